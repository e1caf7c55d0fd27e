//! What wakes the controller: the trigger streams, built from pure indexes over the caches.

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::runtime::reflector::ObjectRef;
use meridian_api::kuadrant::ManagedZone;
use meridian_api::names::{DNSSEC_KEYS_SECRET, agent_zone_keys_binding};
use meridian_api::upstream::ManagedCluster;

use meridian_controllers::runtime::caches::{Caches, Change, everything_once, triggers};
use meridian_controllers::zones::dnssec_keys::{KEYS_SECRET_TYPE, dnskey_ttl};

use super::signed_embedded;
use crate::controller::cluster_copies::{
    cluster_of_binding, clusters_coming_and_going, clusters_for_copy, first_cluster,
};

/// Key copies: a new cluster wakes itself (its binding), and so does its binding deleted or
/// changed; a zone turning signing on or off or changing what its DNSKEY set is signed for
/// (apex, TTL), a key Secret changing (a rollover step), the copy changing or the first
/// cluster leaving wakes the first cluster, which makes the copy; a new copy wakes every
/// cluster, whose bindings it owns.
pub fn requests(
    caches: &Caches,
    hub_namespace: Option<String>,
) -> Vec<BoxStream<'static, ObjectRef<ManagedCluster>>> {
    let all = caches.clusters.store().clone();
    let binding_namespace = hub_namespace.clone();
    let clusters_changed = {
        let clusters = all.clone();
        move |change: &Change<ManagedCluster>| clusters_coming_and_going(&clusters, change)
    };
    let by_zone = {
        let clusters = all.clone();
        move |change: &Change<ManagedZone>| {
            // What the copy holds of a zone: whether it is signed, and for which apex and
            // DNSKEY TTL its DNSKEY set is signed.
            let copied = |zone: Option<&ManagedZone>| {
                zone.filter(|zone| signed_embedded(zone))
                    .map(|zone| (zone.spec.domain_name.clone(), dnskey_ttl(zone)))
            };
            let changed = match change {
                Change::Applied { old, new } => copied(old.as_deref()) != copied(Some(new)),
                Change::Deleted(old) => copied(Some(old)).is_some(),
                Change::Relisted => false,
            };
            if changed {
                first_cluster(&clusters)
            } else {
                Vec::new()
            }
        }
    };
    let by_secret = {
        let clusters = all.clone();
        move |change: &Change<Secret>| {
            let Some(secret) = change.object() else {
                return Vec::new();
            };
            if secret.type_.as_deref() == Some(KEYS_SECRET_TYPE) {
                // A zone's keys changed: the copy holds them.
                return first_cluster(&clusters);
            }
            clusters_for_copy(
                &clusters,
                hub_namespace.as_deref(),
                change,
                |name| name == DNSSEC_KEYS_SECRET,
                true,
            )
        }
    };
    let by_binding = move |change: &Change<RoleBinding>| {
        cluster_of_binding(
            binding_namespace.as_deref(),
            change,
            agent_zone_keys_binding,
        )
    };
    vec![
        everything_once(&caches.clusters),
        triggers(caches.clusters.subscribe(), all.clone(), clusters_changed),
        triggers(caches.zones.subscribe(), all.clone(), by_zone),
        triggers(caches.secrets.subscribe(), all.clone(), by_secret),
        triggers(caches.role_bindings.subscribe(), all, by_binding),
    ]
}
