//! The parts of upstream kinds Meridian reads or writes: OCM, Gateway API and OpenShift Route.
//!
//! Each struct holds only the fields Meridian uses. Where Meridian writes a whole object (or
//! passes one through, like a Gateway copied into a ManifestWork), every struct on the path keeps
//! the fields it does not model in an `extra` map, so a round trip loses nothing.
//! The schemas are the upstream projects' own CRDs, installed by the test bed, never these types.

mod gateway;
mod ocm;
mod openshift;

pub use gateway::*;
pub use ocm::*;
pub use openshift::*;

/// Fields a struct does not model, kept verbatim.
pub type Extra = std::collections::BTreeMap<String, serde_json::Value>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gateway_round_trip_keeps_fields_meridian_does_not_model() {
        let original = json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "prod-web", "namespace": "multi-cluster-gateways"},
            "spec": {
                "gatewayClassName": MULTI_CLUSTER_GATEWAY_CLASS,
                "infrastructure": {"labels": {"team": "web"}},
                "listeners": [{
                    "name": "api",
                    "hostname": "myapp.hcpapps.net",
                    "port": 443,
                    "protocol": "HTTPS",
                    "allowedRoutes": {"namespaces": {"from": "All"}},
                    "tls": {"mode": "Terminate", "certificateRefs": [{"name": "cert"}]},
                }],
            },
            "status": {"addresses": [{"type": "IPAddress", "value": "192.0.2.1"}], "futureField": 1},
        });
        let gateway: Gateway = serde_json::from_value(original.clone()).unwrap();
        assert_eq!(
            gateway.spec.listeners[0].hostname.as_deref(),
            Some("myapp.hcpapps.net")
        );
        assert_eq!(
            gateway.status.as_ref().unwrap().addresses[0].value,
            "192.0.2.1"
        );
        assert_eq!(serde_json::to_value(&gateway).unwrap(), original);
    }

    #[test]
    fn manifest_work_round_trip_keeps_manifests_and_options() {
        let original = json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": {"name": "gw", "namespace": "spoke-1"},
            "spec": {
                "workload": {"manifests": [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}]},
                "deleteOption": {"propagationPolicy": "Foreground"},
            },
        });
        let work: ManifestWork = serde_json::from_value(original.clone()).unwrap();
        assert_eq!(work.spec.workload.manifests.len(), 1);
        assert_eq!(serde_json::to_value(&work).unwrap(), original);
    }

    #[test]
    fn placement_decisions_read_cluster_names() {
        let decision: PlacementDecision = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "PlacementDecision",
            "metadata": {"name": "p-decision-1", "namespace": "ns", "labels": {crate::labels::PLACEMENT_LABEL: "p"}},
            "spec": {},
            "status": {"decisions": [{"clusterName": "spoke-1", "reason": ""}, {"clusterName": "", "reason": ""}]},
        }))
        .unwrap();
        let names: Vec<_> = decision
            .status
            .unwrap()
            .decisions
            .into_iter()
            .map(|d| d.cluster_name)
            .collect();
        assert_eq!(names, ["spoke-1", ""]);
    }
}
