//! What wakes the controller: the trigger streams over the caches, and the pure predicate of
//! which Secrets are probe header sources.

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_api::kuadrant::DNSHealthCheckProbe;
use meridian_api::names::agent_copies_binding;
use meridian_api::upstream::ManagedCluster;

use meridian_controllers::runtime::caches::{Caches, Change, everything_once, triggers};

use crate::controller::cluster_copies::{
    cluster_of_binding, clusters_coming_and_going, clusters_for_copy, first_cluster,
};

/// Probe header copies: a new cluster wakes itself (its binding), and so does its binding
/// deleted or changed; a probe that names a header Secret, a named Secret, a copy, or the
/// first cluster leaving wakes the first cluster, which makes the copies.
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
            if probes_send_headers_of(&probes.state(), &namespace, &name) {
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
    let by_binding = move |change: &Change<RoleBinding>| {
        cluster_of_binding(binding_namespace.as_deref(), change, agent_copies_binding)
    };
    vec![
        everything_once(&caches.clusters),
        triggers(caches.clusters.subscribe(), all.clone(), clusters_changed),
        triggers(caches.probes.subscribe(), all.clone(), by_probe),
        triggers(caches.secrets.subscribe(), all.clone(), by_secret),
        triggers(caches.role_bindings.subscribe(), all, by_binding),
    ]
}

/// Whether some health probe sends the headers of the Secret `namespace/secret`.
pub fn probes_send_headers_of(
    probes: &[std::sync::Arc<DNSHealthCheckProbe>],
    namespace: &str,
    secret: &str,
) -> bool {
    probes.iter().any(|p| {
        p.namespace().as_deref() == Some(namespace)
            && p.spec
                .additional_headers_ref
                .as_ref()
                .is_some_and(|r| r.name == secret)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_secret_a_probe_names_is_one_whose_headers_are_sent() {
        let probe: DNSHealthCheckProbe = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSHealthCheckProbe",
            "metadata": { "name": "p", "namespace": "a" },
            "spec": { "address": "192.0.2.1", "host": "api.example.com", "port": 443,
                      "protocol": "HTTPS", "path": "/", "interval": "10s",
                      "additionalHeadersRef": { "name": "probe-auth" } },
        }))
        .expect("a probe");
        let probe = std::sync::Arc::new(probe);
        let probes = [probe];
        assert!(probes_send_headers_of(&probes, "a", "probe-auth"));
        assert!(!probes_send_headers_of(&probes, "b", "probe-auth"));
        assert!(!probes_send_headers_of(&probes, "a", "other"));
    }
}
