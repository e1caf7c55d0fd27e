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
    /// A Gateway as the hub needs to know it: its addresses, and per listener the host, the
    /// routes attached and, for a wildcard listener, the hostnames of `routes` to probe it
    /// through ([`route_hostnames`]).
    pub fn from_gateway(
        gateway: &crate::upstream::Gateway,
        sets: &[crate::upstream::ListenerSet],
        routes: &[crate::upstream::HTTPRoute],
    ) -> Self {
        use kube::ResourceExt;
        let status = gateway.status.clone().unwrap_or_default();
        // Whether the Gateway's controller has seen this generation of it: a listener its
        // status does not name then has no routes; before that, nothing is known of it yet.
        let seen = gateway.metadata.generation.is_some_and(|generation| {
            status
                .conditions
                .iter()
                .any(|c| c.observed_generation.is_some_and(|seen| seen >= generation))
        });
        let parent = RouteParent {
            kind: "Gateway",
            namespace: gateway.namespace().unwrap_or_default(),
            name: gateway.name_any(),
        };
        let mut report = GatewayReport {
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
                        .map(|l| l.attached_routes)
                        .or(seen.then_some(0)),
                    route_hostnames: route_hostnames(&parent, listener, routes),
                })
                .collect(),
        };
        report.listeners.extend(
            sets.iter()
                .flat_map(|set| set_listeners(gateway, set, routes)),
        );
        report
    }
}

/// The listeners a ListenerSet copied beside `gateway` (its parent, of its namespace, and
/// carrying the hub's key: [`crate::names::LISTENER_SET_KEY_ANNOTATION`]) adds, as the hub
/// names them, for those its controller lists in its status: a listener no controller has
/// looked at is not reported, and the hub publishes it as it would without a report (a
/// cluster whose implementation does not serve ListenerSets never withdraws them).
fn set_listeners(
    gateway: &crate::upstream::Gateway,
    set: &crate::upstream::ListenerSet,
    routes: &[crate::upstream::HTTPRoute],
) -> Vec<ListenerReport> {
    use kube::ResourceExt;
    let namespace = gateway.namespace().unwrap_or_default();
    let parent = &set.spec.parent_ref;
    let names_gateway = set.namespace().as_deref() == Some(namespace.as_str())
        && parent.name == gateway.name_any()
        && parent.namespace.as_deref().is_none_or(|n| n == namespace)
        && parent.kind.as_deref().is_none_or(|k| k == "Gateway");
    let Some(key) = set
        .annotations()
        .get(crate::names::LISTENER_SET_KEY_ANNOTATION)
        .filter(|_| names_gateway)
    else {
        return Vec::new();
    };
    let status = set.status.clone().unwrap_or_default();
    let route_parent = RouteParent {
        kind: "ListenerSet",
        namespace,
        name: set.name_any(),
    };
    set.spec
        .listeners
        .iter()
        .filter_map(|listener| {
            let seen = status.listeners.iter().find(|l| l.name == listener.name)?;
            Some(ListenerReport {
                name: format!("{key}.{}", listener.name),
                hostname: listener.hostname.clone(),
                attached_routes: Some(seen.attached_routes),
                route_hostnames: route_hostnames(&route_parent, listener, routes),
            })
        })
        .collect()
}

/// What an HTTPRoute attaches to: a Gateway or a ListenerSet.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteParent {
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

/// The most route hostnames a wildcard listener's report carries, and the hub probes each of
/// its addresses through: enough that one broken app does not decide for the whole listener,
/// few enough that a listener with thousands of routes costs every cluster a handful of
/// probes per address, not thousands. (The schema's `maxItems` below says the same.)
pub const MAX_ROUTE_HOSTNAMES: usize = 3;

/// Whether `host` is a concrete name a wildcard listener hostname covers, as Gateway API
/// matches listener wildcards (`*.apps.example.com` covers `shop.apps.example.com` and
/// `a.shop.apps.example.com`, not `apps.example.com`), and one a probe can send as its Host and
/// SNI: letters, digits and hyphens in labels of at most 63, at most 253 in all.
pub fn covered_by_wildcard(wildcard: &str, host: &str) -> bool {
    let Some(suffix) = wildcard.strip_prefix('*').filter(|s| s.starts_with('.')) else {
        return false;
    };
    host.len() > suffix.len()
        && host.len() <= 253
        && host
            .to_ascii_lowercase()
            .ends_with(&suffix.to_ascii_lowercase())
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// The hostnames a wildcard listener is probed through: those of the HTTPRoutes its
/// implementation accepted on it (`status.parents`, `Accepted=True`, for `parent`, the Gateway
/// or ListenerSet, and this listener or the whole parent) that the wildcard covers,
/// lower-cased, the first [`MAX_ROUTE_HOSTNAMES`] in order. Routes in the Gateway's own namespace come first, and
/// routes of other namespaces count only when it has none: a team allowed to attach routes to
/// a shared listener cannot fill the sample with hosts that fail and so take the listener out
/// of DNS while the owner's apps serve. Empty for a listener that is not a wildcard.
pub fn route_hostnames(
    parent: &RouteParent,
    listener: &crate::upstream::Listener,
    routes: &[crate::upstream::HTTPRoute],
) -> Vec<String> {
    use kube::ResourceExt;
    let Some(wildcard) = listener.hostname.as_deref().filter(|h| h.starts_with("*.")) else {
        return Vec::new();
    };
    let (gateway_namespace, gateway_name) = (parent.namespace.clone(), parent.name.clone());
    let accepted = |route: &crate::upstream::HTTPRoute| {
        let route_namespace = route.namespace().unwrap_or_default();
        route
            .status
            .iter()
            .flat_map(|s| &s.parents)
            .any(|route_parent| {
                let reference = &route_parent.parent_ref;
                let kind = reference.extra.get("kind").and_then(|k| k.as_str());
                kind.unwrap_or("Gateway") == parent.kind
                    && reference.name == gateway_name
                    && reference.namespace.as_deref().unwrap_or(&route_namespace)
                        == gateway_namespace
                    && reference
                        .section_name
                        .as_deref()
                        .is_none_or(|section| section == listener.name)
                    && route_parent
                        .conditions
                        .iter()
                        .any(|c| c.type_ == "Accepted" && c.status == "True")
            })
    };
    let hosts = |own: bool| -> std::collections::BTreeSet<String> {
        routes
            .iter()
            .filter(|route| (route.namespace().unwrap_or_default() == gateway_namespace) == own)
            .filter(|route| accepted(route))
            .flat_map(|route| &route.spec.hostnames)
            .filter(|host| covered_by_wildcard(wildcard, host))
            .map(|host| host.to_ascii_lowercase())
            .collect()
    };
    let mut chosen = hosts(true);
    if chosen.is_empty() {
        chosen = hosts(false);
    }
    chosen.into_iter().take(MAX_ROUTE_HOSTNAMES).collect()
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
    /// Routes attached to the listener, from the Gateway's status. Absent while the status
    /// has no entry for the listener and the Gateway's controller has not yet seen the
    /// Gateway's current generation (a listener just added): that is silence, not evidence,
    /// so the hub counts the listener as served. A controller that saw the generation and
    /// lists no entry for the listener: 0. Agents before it could be absent wrote 0 there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attached_routes: Option<i32>,
    /// For a wildcard listener: the concrete hostnames of routes attached to it that the hub
    /// probes its addresses through ([`route_hostnames`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 3), inner(length(max = 253)))]
    pub route_hostnames: Vec<String>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream::{Gateway, HTTPRoute};

    const WILDCARD: &str = "*.apps.example.com";

    #[test]
    fn a_wildcard_covers_concrete_names_below_it_and_nothing_a_probe_cannot_send() {
        let cases = [
            ("shop.apps.example.com", true),
            ("Shop.APPS.example.com", true),
            ("a.shop.apps.example.com", true),
            ("apps.example.com", false),
            ("xapps.example.com", false),
            ("shop.apps.example.org", false),
            ("*.shop.apps.example.com", false),
            ("shop_1.apps.example.com", false),
            ("shop.apps.example.com\r\nX-Injected: 1", false),
            ("a..apps.example.com", false),
        ];
        for (host, covered) in cases {
            assert_eq!(covered_by_wildcard(WILDCARD, host), covered, "{host:?}");
        }
        let long = format!("{}.apps.example.com", vec!["a".repeat(63); 4].join("."));
        assert!(!covered_by_wildcard(WILDCARD, &long), "over 253 characters");
        assert!(!covered_by_wildcard("api.example.com", "x.api.example.com"));
    }

    fn gateway() -> Gateway {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": { "name": "web", "namespace": "kuadrant-gateways" },
            "spec": { "gatewayClassName": "traefik", "listeners": [
                { "name": "apps", "hostname": WILDCARD, "port": 80, "protocol": "HTTP" },
                { "name": "api", "hostname": "api.example.com", "port": 80, "protocol": "HTTP" },
            ] },
        }))
        .expect("a Gateway")
    }

    /// A route accepted (or not) by its implementation on `parent` (`gateway[/section]`, in
    /// `parent_namespace` when given).
    fn route(
        namespace: &str,
        name: &str,
        hostnames: &[&str],
        parent: (&str, Option<&str>, Option<&str>),
        accepted: bool,
    ) -> HTTPRoute {
        let (gateway, parent_namespace, section) = parent;
        let reference = serde_json::json!({ "name": gateway, "namespace": parent_namespace, "sectionName": section });
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": { "name": name, "namespace": namespace },
            "spec": { "parentRefs": [reference], "hostnames": hostnames },
            "status": { "parents": [{
                "parentRef": reference, "controllerName": "traefik.io/gateway-controller",
                "conditions": [{
                    "type": "Accepted", "status": if accepted { "True" } else { "False" },
                    "reason": "Accepted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
                }],
            }] },
        }))
        .expect("an HTTPRoute")
    }

    #[test]
    fn a_listener_its_controller_has_not_caught_up_with_is_not_said_to_have_no_routes() {
        let observed = |generation: i64| {
            serde_json::json!([{
                "type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": generation,
            }])
        };
        // (Gateway generation, the status's conditions, the api listener's entry, expected)
        let cases = [
            (
                2,
                observed(1),
                None,
                None,
                "the controller is a generation behind",
            ),
            (
                2,
                serde_json::json!([]),
                None,
                None,
                "no condition says what it saw",
            ),
            (
                2,
                observed(2),
                None,
                Some(0),
                "it saw this generation and lists no entry",
            ),
            (2, observed(2), Some(3), Some(3), "its entry"),
            (
                2,
                observed(1),
                Some(3),
                Some(3),
                "an entry, even from before",
            ),
        ];
        for (generation, conditions, entry, expected, why) in cases {
            let mut gateway = gateway();
            gateway.metadata.generation = Some(generation);
            let listeners: Vec<serde_json::Value> = entry
                .iter()
                .map(|routes| serde_json::json!({ "name": "api", "attachedRoutes": routes }))
                .collect();
            gateway.status = Some(
                serde_json::from_value(
                    serde_json::json!({ "conditions": conditions, "listeners": listeners }),
                )
                .expect("a status"),
            );
            let report = GatewayReport::from_gateway(&gateway, &[], &[]);
            let api = report
                .listeners
                .iter()
                .find(|l| l.name == "api")
                .expect("the api listener");
            assert_eq!(api.attached_routes, expected, "{why}");
        }
    }

    fn hosts(routes: &[HTTPRoute], listener: usize) -> Vec<String> {
        let gateway = gateway();
        let parent = RouteParent {
            kind: "Gateway",
            namespace: OWN.into(),
            name: "web".into(),
        };
        route_hostnames(&parent, &gateway.spec.listeners[listener], routes)
    }

    /// A ListenerSet copy's listeners are reported under the hub's key, with the routes its
    /// controller counted and, for a wildcard, the hostnames of the routes attached to the
    /// ListenerSet (not to the Gateway); a listener no controller lists, a ListenerSet
    /// without the hub's key or naming another Gateway, are not reported.
    #[test]
    fn a_listener_sets_copy_reports_its_listeners_under_the_hubs_key() {
        let set = |name: &str, key: Option<&str>, parent: &str| -> crate::upstream::ListenerSet {
            let mut metadata = serde_json::json!({ "name": name, "namespace": OWN });
            if let Some(key) = key {
                metadata["annotations"] =
                    serde_json::json!({ crate::names::LISTENER_SET_KEY_ANNOTATION: key });
            }
            serde_json::from_value(serde_json::json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
                "metadata": metadata,
                "spec": { "parentRef": { "name": parent }, "listeners": [
                    { "name": "shops", "hostname": "*.shop.example.com", "port": 80, "protocol": "HTTP" },
                    { "name": "unseen", "hostname": "unseen.example.com", "port": 80, "protocol": "HTTP" },
                ] },
                "status": { "listeners": [{ "name": "shops", "attachedRoutes": 2 }] },
            }))
            .expect("a ListenerSet")
        };
        let mut on_set = route(
            OWN,
            "a",
            &["a.shop.example.com"],
            ("extra-1", None, Some("shops")),
            true,
        );
        for reference in [
            &mut on_set.spec.parent_refs[0],
            &mut on_set.status.as_mut().unwrap().parents[0].parent_ref,
        ] {
            reference
                .extra
                .insert("kind".into(), serde_json::json!("ListenerSet"));
        }
        let on_gateway = route(OWN, "b", &["b.shop.example.com"], ("web", None, None), true);
        let routes = [on_set, on_gateway];
        let sets = [
            set("extra-1", Some("extra"), "web"),
            set("unkeyed", None, "web"),
            set("elsewhere", Some("other"), "api-gateway"),
        ];
        let report = GatewayReport::from_gateway(&gateway(), &sets, &routes);
        let added: Vec<(&str, Option<i32>, &[String])> = report.listeners[2..]
            .iter()
            .map(|l| {
                (
                    l.name.as_str(),
                    l.attached_routes,
                    l.route_hostnames.as_slice(),
                )
            })
            .collect();
        assert_eq!(
            added,
            [(
                "extra.shops",
                Some(2),
                ["a.shop.example.com".to_string()].as_slice()
            )]
        );
    }

    const OWN: &str = "kuadrant-gateways";

    #[test]
    fn a_wildcard_listener_reports_the_accepted_hostnames_of_its_own_routes() {
        let routes = [
            route(
                OWN,
                "shop",
                &["shop.apps.example.com"],
                ("web", None, Some("apps")),
                true,
            ),
            route(
                OWN,
                "blog",
                &["Blog.apps.example.com", "blog.example.org"],
                ("web", None, None),
                true,
            ),
            // Not accepted, on another listener, on another Gateway: not attached here.
            route(
                OWN,
                "pending",
                &["pending.apps.example.com"],
                ("web", None, None),
                false,
            ),
            route(
                OWN,
                "elsewhere",
                &["api2.apps.example.com"],
                ("web", None, Some("api")),
                true,
            ),
            route(
                OWN,
                "other",
                &["other.apps.example.com"],
                ("other-gateway", None, None),
                true,
            ),
            // A wildcard route hostname names no one host either.
            route(
                OWN,
                "wild",
                &["*.team.apps.example.com"],
                ("web", None, None),
                true,
            ),
        ];
        assert_eq!(
            hosts(&routes, 0),
            ["blog.apps.example.com", "shop.apps.example.com"]
        );
        assert!(
            hosts(&routes, 1).is_empty(),
            "a concrete listener is probed by its own name"
        );
        assert!(hosts(&[], 0).is_empty());
    }

    #[test]
    fn another_namespaces_routes_cannot_crowd_out_the_owners_and_the_sample_is_bounded() {
        let owner = route(
            OWN,
            "shop",
            &["shop.apps.example.com"],
            ("web", Some(OWN), None),
            true,
        );
        // A team allowed to attach to the shared listener names hosts that sort first and
        // would all fail: while the Gateway's own namespace has routes, they are not sampled.
        let crowd = route(
            "team-b",
            "crowd",
            &[
                "a1.apps.example.com",
                "a2.apps.example.com",
                "a3.apps.example.com",
                "a4.apps.example.com",
            ],
            ("web", Some(OWN), None),
            true,
        );
        assert_eq!(hosts(&[owner, crowd.clone()], 0), ["shop.apps.example.com"]);
        // With no route of its own, the others' are what the listener serves: the first three.
        assert_eq!(
            hosts(std::slice::from_ref(&crowd), 0),
            [
                "a1.apps.example.com",
                "a2.apps.example.com",
                "a3.apps.example.com"
            ]
        );
        // A route of another namespace whose parentRef names no namespace points at its own.
        let unqualified = route(
            "team-b",
            "r",
            &["b.apps.example.com"],
            ("web", None, None),
            true,
        );
        assert!(hosts(&[unqualified], 0).is_empty());
    }
}
