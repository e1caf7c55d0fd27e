use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::validation::DNS_NAME_PATTERN;

/// A router shard (seed 003): a public DNS suffix, the routes it serves, and the addresses of
/// its routers. Routes scheduled onto it without a host get `<namespace>-<name>.<dns>`, and the
/// hub publishes `*.<dns>` pointing at `addresses`.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "meridian.dev",
    version = "v1alpha1",
    kind = "Router",
    doc = "A router shard: a public DNS suffix, the routes it serves and the addresses of its routers.",
    status = "RouterStatus",
    shortname = "rtr",
    category = "meridian",
    printcolumn(name = "DNS", type_ = "string", json_path = ".spec.dns"),
    printcolumn(name = "Addresses", type_ = "string", json_path = ".status.addresses"),
    printcolumn(name = "Routes", type_ = "integer", json_path = ".status.routes"),
    printcolumn(name = "Capacity", type_ = "integer", json_path = ".spec.capacity"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.service) != (has(self.addresses) && size(self.addresses) > 0)").message("a Router takes its addresses from exactly one of spec.service and spec.addresses"))]
pub struct RouterSpec {
    /// What the shard is for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub description: Option<String>,
    /// The shard's public DNS suffix, e.g. `shard1.apps.example.com`.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_NAME_PATTERN))]
    pub dns: String,
    /// Routes (by their labels) this shard serves; empty selects every route.
    #[serde(default)]
    pub route_selector: LabelSelector,
    /// Namespaces (by their labels) whose routes this shard serves; empty selects every one.
    #[serde(default)]
    pub namespace_selector: LabelSelector,
    /// Fixed addresses (IPs or hostnames) of the shard's routers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub addresses: Vec<String>,
    /// A Service of type LoadBalancer in front of the shard's routers: its ingress addresses
    /// are the shard's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceReference>,
    /// Most routes the shard takes; unlimited when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub capacity: Option<i32>,
}

/// A Service in a namespace.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct ServiceReference {
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
}

/// Observed state of a Router.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouterStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The addresses the shard answers at (from the Service or the fixed list).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub addresses: Vec<String>,
    /// Routes bound to the shard.
    #[serde(default)]
    pub routes: i32,
}
