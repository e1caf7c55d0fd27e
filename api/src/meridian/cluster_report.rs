use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// What a spoke agent tells the hub about its cluster, written into the cluster's own namespace
/// on the hub (the only place the agent may write there): its cluster ID, every downstream
/// Gateway's addresses and listeners, and its router shards. Health-probe results travel
/// separately, in [`ProbeResults`](super::ProbeResults), so this object stays small and a
/// verdict does not rewrite it.
#[derive(CustomResource, Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[kube(
    group = "meridian.dev",
    version = "v1alpha1",
    kind = "ClusterReport",
    doc = "What a spoke agent reports to the hub: cluster ID, gateway addresses and listeners, router shards.",
    namespaced,
    status = "ClusterReportStatus",
    shortname = "creport",
    category = "meridian",
    printcolumn(name = "Cluster ID", type_ = "string", json_path = ".spec.clusterID"),
    printcolumn(
        name = "Gateways",
        type_ = "string",
        json_path = ".spec.gateways[*].name"
    ),
    printcolumn(name = "Reported", type_ = "date", json_path = ".spec.reportedAt"),
    // One per cluster namespace: an agent (compromised or not) cannot fill the hub's etcd and
    // cache with reports.
    validation = Rule::new("self.metadata.name == 'agent'").message("a cluster's report is named agent: one per cluster namespace"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReportSpec {
    /// UID of the cluster's `kube-system` namespace.
    #[serde(rename = "clusterID")]
    #[schemars(length(min = 1, max = 128))]
    pub cluster_id: String,
    /// When the agent last wrote the report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reported_at: Option<Time>,
    /// The downstream Gateways on the cluster.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 1000))]
    pub gateways: Vec<GatewayReport>,
    /// The cluster's router shards.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256))]
    pub router_shards: Vec<RouterShardReport>,
}

/// One downstream Gateway.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GatewayReport {
    pub name: String,
    pub namespace: String,
    /// The Gateway's `status.addresses`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<ReportedAddress>,
    /// Per listener: its host and how many routes are attached.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listeners: Vec<ListenerReport>,
}

impl GatewayReport {
    /// A Gateway as the hub needs to know it: its addresses, and per listener the host and the
    /// routes attached.
    pub fn from_gateway(gateway: &crate::upstream::Gateway) -> Self {
        use kube::ResourceExt;
        let status = gateway.status.clone().unwrap_or_default();
        GatewayReport {
            name: gateway.name_any(),
            namespace: gateway.namespace().unwrap_or_default(),
            addresses: status
                .addresses
                .iter()
                .map(|a| ReportedAddress {
                    type_: a.type_.clone().unwrap_or_else(ip_address_type),
                    value: a.value.clone(),
                })
                .collect(),
            listeners: gateway
                .spec
                .listeners
                .iter()
                .map(|listener| ListenerReport {
                    name: listener.name.clone(),
                    hostname: listener.hostname.clone(),
                    attached_routes: status
                        .listeners
                        .iter()
                        .find(|l| l.name == listener.name)
                        .map_or(0, |l| l.attached_routes),
                })
                .collect(),
        }
    }
}

/// An address as Gateway API writes it: `IPAddress` or `Hostname`.
#[derive(
    Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash,
)]
#[serde(rename_all = "camelCase")]
pub struct ReportedAddress {
    #[serde(rename = "type", default = "ip_address_type")]
    pub type_: String,
    pub value: String,
}

fn ip_address_type() -> String {
    "IPAddress".to_string()
}

/// One listener of a downstream Gateway.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ListenerReport {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    #[serde(default)]
    pub attached_routes: i32,
}

/// One router shard on the cluster.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RouterShardReport {
    /// The Router's name.
    pub name: String,
    /// The shard's public DNS suffix.
    pub dns: String,
    /// Addresses of the shard's routers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// The routes bound to the shard and admitted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub routes: Vec<ShardRoute>,
}

/// A route served by a shard.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ShardRoute {
    pub namespace: String,
    pub name: String,
    pub host: String,
}

/// The hub's view of a report.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterReportStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
