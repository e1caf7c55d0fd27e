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
    printcolumn(name = "Addresses", type_ = "string", json_path = ".spec.addresses"),
    printcolumn(name = "Routes", type_ = "integer", json_path = ".status.routes"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
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
    /// Addresses (IPs or hostnames) of the shard's routers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub addresses: Vec<String>,
}

/// Observed state of a Router.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouterStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Routes bound to the shard.
    #[serde(default)]
    pub routes: i32,
}
