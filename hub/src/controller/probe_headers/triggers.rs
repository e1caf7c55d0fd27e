//! What wakes the controller: the trigger streams, built from pure indexes over the caches.

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_api::kuadrant::DNSHealthCheckProbe;
use meridian_api::upstream::ManagedCluster;

use meridian_controllers::runtime::caches::{Caches, Change, everything_once, triggers};
use meridian_controllers::runtime::indexes;

use crate::controller::cluster_copies::{
    clusters_coming_and_going, clusters_for_copy, first_cluster,
};

/// Probe header copies: a new cluster wakes itself (its binding); a probe that names a header
/// Secret, a named Secret, a copy, or the first cluster leaving wakes the first cluster, which
/// makes the copies.
pub fn requests(
    caches: &Caches,
    hub_namespace: Option<String>,
) -> Vec<BoxStream<'static, ObjectRef<ManagedCluster>>> {
    let all = caches.clusters.store().clone();
    let clusters_changed = {
        let clusters = all.clone();
        move |change: &Change<ManagedCluster>| clusters_coming_and_going(&clusters, change)
    };
    let by_probe = {
        let clusters = all.clone();
        move |change: &Change<DNSHealthCheckProbe>| {
            let names_headers = match change {
                Change::Applied { old, new } => {
                    new.spec.additional_headers_ref.is_some()
                        || old
                            .as_ref()
                            .is_some_and(|o| o.spec.additional_headers_ref.is_some())
                }
                Change::Deleted(old) => old.spec.additional_headers_ref.is_some(),
                Change::Relisted => false,
            };
            if !names_headers {
                return Vec::new();
            }
            first_cluster(&clusters)
        }
    };
    let by_secret = {
        let (clusters, probes) = (all.clone(), caches.probes.store().clone());
        move |change: &Change<Secret>| {
            let Some(secret) = change.object() else {
                return Vec::new();
            };
            let (namespace, name) = (secret.namespace().unwrap_or_default(), secret.name_any());
            if indexes::probes_send_headers_of(&probes.state(), &namespace, &name) {
                // A source changed: the copies hold it.
                return first_cluster(&clusters);
            }
            clusters_for_copy(
                &clusters,
                hub_namespace.as_deref(),
                change,
                super::is_copy,
                false,
            )
        }
    };
    vec![
        everything_once(&caches.clusters),
        triggers(caches.clusters.subscribe(), all.clone(), clusters_changed),
        triggers(caches.probes.subscribe(), all.clone(), by_probe),
        triggers(caches.secrets.subscribe(), all, by_secret),
    ]
}
