use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The association of a route with the router shard serving it (seed 003), in the route's
/// namespace. The binding is the record of a scheduling decision; the route's status mirrors it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "meridian.dev",
    version = "v1alpha1",
    kind = "RouteBinding",
    doc = "The association of a route with the router shard serving it.",
    namespaced,
    status = "RouteBindingStatus",
    shortname = "rtb",
    category = "meridian",
    printcolumn(name = "Route", type_ = "string", json_path = ".spec.routeRef.name"),
    printcolumn(name = "Router", type_ = "string", json_path = ".spec.router"),
    printcolumn(name = "Host", type_ = "string", json_path = ".spec.host"),
    printcolumn(
        name = "Admitted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Admitted\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.routeRef == oldSelf.routeRef && self.router == oldSelf.router").message("a RouteBinding's routeRef and router are immutable: delete it to reschedule"))]
pub struct RouteBindingSpec {
    /// The route being scheduled, in the binding's namespace.
    pub route_ref: RouteReference,
    /// Name of the Router (shard) serving it.
    #[schemars(length(min = 1, max = 253))]
    pub router: String,
    /// The host the route is served at.
    #[schemars(length(min = 1, max = 253))]
    pub host: String,
}

/// A route in the binding's namespace.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RouteReference {
    /// `Route` (route.openshift.io) or `HTTPRoute` (gateway.networking.k8s.io).
    pub kind: RouteKind,
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// Route kinds the scheduler binds.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteKind {
    Route,
    #[serde(rename = "HTTPRoute")]
    HttpRoute,
}

/// Observed state of a RouteBinding.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RouteBindingStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
