use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

use super::Extra;

/// `cluster.open-cluster-management.io/v1` ManagedCluster: a spoke as the hub knows it. Its
/// labels carry Meridian's cluster attributes (geo code, custom-weight class).
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1",
    kind = "ManagedCluster",
    status = "ManagedClusterStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSpec {
    #[serde(default)]
    pub hub_accepts_client: bool,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// What the spoke's registration agent reports of the ClusterClaims on the spoke.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_claims: Vec<ClusterClaimStatus>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// One reported ClusterClaim: a fact a spoke states about itself.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ClusterClaimStatus {
    pub name: String,
    #[serde(default)]
    pub value: String,
}

/// `cluster.open-cluster-management.io/v1beta1` Placement. Meridian only needs its identity:
/// the decisions are read from PlacementDecisions.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "cluster.open-cluster-management.io",
    version = "v1beta1",
    kind = "Placement",
    namespaced,
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct PlacementSpec {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cluster_sets: Vec<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `cluster.open-cluster-management.io/v1beta1` PlacementDecision: up to 100 of a Placement's
/// chosen clusters, labelled `cluster.open-cluster-management.io/placement=<placement>`.
/// Written by hand rather than derived: a PlacementDecision has no `spec` at all, which the
/// derive would require.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct PlacementDecision {
    pub metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PlacementDecisionStatus>,
}

impl kube::Resource for PlacementDecision {
    type DynamicType = ();
    type Scope = kube::core::NamespaceResourceScope;

    fn kind(_: &()) -> std::borrow::Cow<'_, str> {
        "PlacementDecision".into()
    }
    fn group(_: &()) -> std::borrow::Cow<'_, str> {
        "cluster.open-cluster-management.io".into()
    }
    fn version(_: &()) -> std::borrow::Cow<'_, str> {
        "v1beta1".into()
    }
    fn plural(_: &()) -> std::borrow::Cow<'_, str> {
        "placementdecisions".into()
    }
    fn meta(&self) -> &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        &mut self.metadata
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
pub struct PlacementDecisionStatus {
    #[serde(default)]
    pub decisions: Vec<ClusterDecision>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterDecision {
    #[serde(default)]
    pub cluster_name: String,
    #[serde(default)]
    pub reason: String,
}

/// `work.open-cluster-management.io/v1` ManifestWork: objects the hub asks a spoke's work agent
/// to apply, placed in the cluster's namespace on the hub.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "work.open-cluster-management.io",
    version = "v1",
    kind = "ManifestWork",
    namespaced,
    status = "ManifestWorkStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkSpec {
    #[serde(default)]
    pub workload: ManifestsTemplate,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ManifestsTemplate {
    /// Whole Kubernetes objects, applied on the spoke as written.
    #[serde(default)]
    pub manifests: Vec<serde_json::Value>,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManifestWorkStatus {
    /// `Applied`, `Available`, `Degraded`, as the work agent reports them.
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub extra: Extra,
}

/// `addon.open-cluster-management.io/v1alpha1` ClusterManagementAddOn: registers the Meridian
/// agent as an OCM addon on the hub.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ClusterManagementAddOn",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterManagementAddOnSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub add_on_meta: Option<AddOnMeta>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AddOnMeta {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `addon.open-cluster-management.io/v1alpha1` ManagedClusterAddOn: the addon enabled on one
/// cluster, in that cluster's namespace on the hub.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[kube(
    group = "addon.open-cluster-management.io",
    version = "v1alpha1",
    kind = "ManagedClusterAddOn",
    namespaced,
    status = "ManagedClusterAddOnStatus",
    schema = "disabled"
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterAddOnSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_namespace: Option<String>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct ManagedClusterAddOnStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    #[serde(flatten)]
    pub extra: Extra,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_placement_decision_has_no_spec_and_still_reads() {
        let decision: PlacementDecision = serde_json::from_value(serde_json::json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1",
            "kind": "PlacementDecision",
            "metadata": { "name": "everywhere-decision-1", "namespace": "gateways" },
            "status": { "decisions": [{ "clusterName": "spoke-1", "reason": "" }] },
        }))
        .unwrap();
        assert_eq!(
            decision.status.unwrap().decisions[0].cluster_name,
            "spoke-1"
        );
    }
}
