//! What wakes the controller: the trigger streams, built from pure indexes over the caches.

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::ObjectRef;
use meridian_api::kuadrant::ManagedZone;
use meridian_api::names::DNSSEC_KEYS_SECRET;
use meridian_api::upstream::ManagedCluster;

use meridian_controllers::caches::{Caches, Change, everything_once, triggers};
use meridian_controllers::dnssec_keys::KEYS_SECRET_TYPE;

use super::signed_embedded;
use crate::controller::cluster_copies::{clusters_for_copy, first_cluster};

/// Key copies: a new cluster wakes itself (its binding); a zone turning signing on or off, a
/// key Secret changing (a rollover step) or the copy changing wakes the first cluster, which
/// makes the copy; a new copy wakes every cluster, whose bindings it owns.
pub fn requests(
    caches: &Caches,
    hub_namespace: Option<String>,
) -> Vec<BoxStream<'static, ObjectRef<ManagedCluster>>> {
    let all = caches.clusters.store().clone();
    let new_clusters = |change: &Change<ManagedCluster>| match change {
        Change::Applied { old: None, new } => vec![ObjectRef::from_obj(&**new)],
        _ => Vec::new(),
    };
    let by_zone = {
        let clusters = all.clone();
        move |change: &Change<ManagedZone>| {
            let signed = |zone: Option<&ManagedZone>| zone.is_some_and(signed_embedded);
            let toggled = match change {
                Change::Applied { old, new } => signed(old.as_deref()) != signed(Some(new)),
                Change::Deleted(old) => signed(Some(old)),
                Change::Relisted => false,
            };
            if toggled {
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
    vec![
        everything_once(&caches.clusters),
        triggers(caches.clusters.subscribe(), all.clone(), new_clusters),
        triggers(caches.zones.subscribe(), all.clone(), by_zone),
        triggers(caches.secrets.subscribe(), all, by_secret),
    ]
}
