use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::HealthCheck;
use crate::validation::{DNS_NAME_PATTERN, DURATION_PATTERN};

/// DNS load balancing for the listeners of one Gateway: how the hostname's record tree is
/// shaped (simple, or weighted and GEO load balanced) and how its endpoints are health checked.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kuadrant.io",
    version = "v1alpha1",
    kind = "DNSPolicy",
    doc = "DNS load balancing (simple, weighted, GEO) and health checks for the listeners of one Gateway.",
    plural = "dnspolicies",
    namespaced,
    status = "DNSPolicyStatus",
    shortname = "dnspol",
    category = "meridian",
    printcolumn(name = "Target", type_ = "string", json_path = ".spec.targetRef.name"),
    printcolumn(
        name = "Strategy",
        type_ = "string",
        json_path = ".spec.routingStrategy"
    ),
    printcolumn(
        name = "Accepted",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Accepted\")].status"
    ),
    printcolumn(
        name = "Programmed",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Programmed\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!has(self.loadBalancing) || !has(self.loadBalancing.failover) || !has(self.routingStrategy) || self.routingStrategy == 'loadbalanced'").message("loadBalancing.failover needs routingStrategy loadbalanced: a simple record has no tiers to choose between"))]
pub struct DNSPolicySpec {
    /// The Gateway, or ListenerSet, this policy applies to, in the policy's namespace.
    pub target_ref: PolicyTargetReference,

    /// `loadbalanced` (the default) builds the weighted/GEO record tree; `simple` publishes one
    /// A record (or CNAME) per host holding every cluster's addresses.
    #[serde(default)]
    pub routing_strategy: RoutingStrategy,

    /// Weights and GEO routing of the `loadbalanced` strategy.
    #[serde(default)]
    pub load_balancing: LoadBalancing,

    /// Health checks for every endpoint of the record tree; unhealthy endpoints leave DNS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,

    /// TTL of the records health and choices change (leaves, weighted and GEO choices), as a
    /// duration (`5s`, `1m`); default 60s. A resolver keeps a withdrawn gateway's address for
    /// up to this long, so failover takes the health check's interval × failureThreshold plus
    /// this. The host's CNAME to its load-balancer name never changes and keeps 300s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s') && duration(self) <= duration('24h')").message("ttl must be between 1s and 24h"))]
    pub ttl: Option<String>,

    /// Gateway addresses this policy never publishes, up to 20: IP addresses, CIDR ranges
    /// (IPv4 or IPv6) and hostnames (as Kuadrant's `kuadrant.io/v1` DNSPolicy takes them). A
    /// cluster whose every address is excluded adds nothing to the records, and the policy's
    /// `Enforced` message says so.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 20), inner(length(min = 1, max = 253)))]
    #[x_kube(validation = Rule::new(EXCLUDED_ADDRESSES_RULE.clone()).message("excludeAddresses[] must be IP addresses, CIDR ranges (192.0.2.0/24, 2001:db8::/32) or lowercase hostnames"))]
    pub exclude_addresses: Vec<String>,
}

/// CEL: every excluded address is an IP, a CIDR range or a DNS name.
static EXCLUDED_ADDRESSES_RULE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    // A name whose last label is all digits is a mistyped address (`10.0.0.300`), not a name.
    format!(
        "self.all(a, isIP(a) || isCIDR(a) || (a.matches(r'{DNS_NAME_PATTERN}') && !a.matches(r'(^|\\.)[0-9]+\\.?$')))"
    )
});

/// The object a policy attaches to: a Gateway API Gateway (one listener of it with
/// `sectionName`), or a ListenerSet (one listener of it with `sectionName`), in the policy's
/// namespace.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.kind == 'Gateway' ? (self.group == 'gateway.networking.k8s.io' || self.group == '') : (self.kind == 'ListenerSet' && self.group == 'gateway.networking.k8s.io')").message("targetRef must reference a Gateway or a ListenerSet (group gateway.networking.k8s.io)"))]
pub struct PolicyTargetReference {
    /// API group of the target; defaults to `gateway.networking.k8s.io`. An empty group, as
    /// multicluster-gateway-controller's samples write it next to `kind: Gateway`, means the same.
    #[serde(default = "default_target_group")]
    pub group: String,
    /// Kind of the target: `Gateway` (the default) or `ListenerSet`.
    #[serde(default = "default_target_kind")]
    pub kind: String,
    /// Name of the Gateway or ListenerSet.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Namespace of the target; when set it must be the policy's own namespace (another is
    /// refused with reason `Invalid`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Restricts the policy to one listener of its target. A policy for a listener wins it
    /// from one for the ListenerSet, which wins it from a Gateway-wide one (GEP-713).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

impl PolicyTargetReference {
    /// Whether the policy targets a ListenerSet rather than a Gateway.
    pub fn is_listener_set(&self) -> bool {
        self.kind == "ListenerSet"
    }
}

fn default_target_group() -> String {
    "gateway.networking.k8s.io".to_string()
}
fn default_target_kind() -> String {
    "Gateway".to_string()
}

/// The shape of the published record tree.
#[derive(
    Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash,
)]
#[serde(rename_all = "lowercase")]
pub enum RoutingStrategy {
    /// One record per host with every cluster's addresses.
    Simple,
    /// Load-balancer CNAME → GEO CNAMEs → weighted cluster records → A/AAAA records.
    #[default]
    Loadbalanced,
}

/// Weighted and GEO load balancing.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancing {
    /// Weights of the cluster records (the seeds' `weighted`).
    #[serde(default)]
    pub weighted: WeightedLoadBalancing,

    /// GEO routing (the seeds' `GEO`); absent means every cluster is in the `default` geo.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub geo: Option<GeoLoadBalancing>,

    /// Priority tiers: answers come from the best tier (lowest priority number) that has a
    /// healthy gateway, weights apply within it, and with GEO routing tiers apply within each
    /// geo. Absent means every cluster is in one tier, as without failover.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failover: Option<Failover>,
}

/// Priority tiers of clusters and when traffic goes back to a recovered better tier.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Failover {
    /// Priorities by ManagedCluster labels; the first entry matching a cluster's labels gives
    /// its priority. 1 is the best.
    #[schemars(length(min = 1, max = 64))]
    pub priorities: Vec<TierPriority>,

    /// Priority of a cluster no entry matches (default 1000, the last tier).
    #[serde(default = "default_priority")]
    #[schemars(range(min = 1, max = 1000))]
    pub default_priority: i64,

    /// How long a recovered better tier must stay healthy before it takes traffic back, as a
    /// duration; default 60s (twelve passing probes at the 5s interval). `0s` fails back as
    /// soon as the tier is healthy. Traffic never moves back sooner than one TTL after it last
    /// moved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    #[x_kube(validation = Rule::new("duration(self) <= duration('1h')").message("failover.holdDown must be at most 1h"))]
    pub hold_down: Option<String>,
}

/// The priority of the clusters matching a label selector or the shorthand `{attribute?,
/// value}`, which means the label `kuadrant.io/lb-attribute-<attribute>: <value>` (`attribute`
/// defaults to `tier`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.selector) != has(self.value)").message("each failover priority needs exactly one of value and selector"),
    validation = Rule::new("!has(self.attribute) || has(self.value)").message("failover priority attribute is only allowed together with value")
)]
pub struct TierPriority {
    /// Matches ManagedCluster labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Shorthand: the attribute name, i.e. the label `kuadrant.io/lb-attribute-<attribute>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    )]
    pub attribute: Option<String>,

    /// Shorthand: the label value to match (`eu-west`, `primary`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub value: Option<String>,

    /// The tier of matching clusters: 1 (best) to 1000.
    #[schemars(range(min = 1, max = 1000))]
    pub priority: i64,
}

impl TierPriority {
    /// Which clusters the entry matches (the shorthand's attribute defaults to `tier`).
    pub fn matcher(&self) -> ClusterMatcher<'_> {
        ClusterMatcher {
            selector: self.selector.as_ref(),
            attribute: self.attribute.as_deref(),
            value: self.value.as_deref(),
            default_attribute: Some(crate::labels::DEFAULT_TIER_ATTRIBUTE),
        }
    }
}

/// The priority of clusters no failover entry matches: the last tier.
pub const DEFAULT_PRIORITY: i64 = 1000;

fn default_priority() -> i64 {
    DEFAULT_PRIORITY
}

/// The clusters a failover priority or a custom weight applies to: a label selector, or the
/// shorthand `{attribute?, value}` for the label `kuadrant.io/lb-attribute-<attribute>:
/// <value>`. Both entries are read and checked through it, so they take the same forms and
/// refuse the same mistakes (the CRD's rules say the same).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusterMatcher<'a> {
    pub selector: Option<&'a LabelSelector>,
    pub attribute: Option<&'a str>,
    pub value: Option<&'a str>,
    /// The attribute a shorthand without one means (`None`: the label's own default).
    pub default_attribute: Option<&'static str>,
}

/// What is wrong with a [`ClusterMatcher`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatcherProblem {
    NotExactlyOne,
    AttributeWithoutValue,
}

impl std::fmt::Display for MatcherProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MatcherProblem::NotExactlyOne => "needs exactly one of value and selector",
            MatcherProblem::AttributeWithoutValue => {
                "attribute is only allowed together with value"
            }
        })
    }
}

impl ClusterMatcher<'_> {
    /// The label selector the entry stands for, expanding the shorthand.
    pub fn selector(&self) -> Result<LabelSelector, MatcherProblem> {
        if self.attribute.is_some() && self.value.is_none() {
            return Err(MatcherProblem::AttributeWithoutValue);
        }
        match (self.selector, self.value) {
            (Some(selector), None) => Ok(selector.clone()),
            (None, Some(value)) => Ok(LabelSelector {
                match_labels: Some(
                    [(
                        crate::labels::lb_attribute_label(
                            self.attribute.or(self.default_attribute),
                        ),
                        value.to_string(),
                    )]
                    .into(),
                ),
                match_expressions: None,
            }),
            _ => Err(MatcherProblem::NotExactlyOne),
        }
    }
}

/// Weights of cluster records.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WeightedLoadBalancing {
    /// Weight of a cluster no custom entry matches (the seeds' `weighted.default`).
    #[serde(default = "default_weight")]
    #[schemars(range(min = 0))]
    pub default_weight: i64,

    /// Custom weights; the first entry matching a cluster's ManagedCluster labels wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub custom: Vec<CustomWeight>,
}

impl Default for WeightedLoadBalancing {
    fn default() -> Self {
        WeightedLoadBalancing {
            default_weight: default_weight(),
            custom: Vec::new(),
        }
    }
}

/// The default weight of a cluster record.
pub const DEFAULT_WEIGHT: i64 = 120;

fn default_weight() -> i64 {
    DEFAULT_WEIGHT
}

/// A weight for the clusters that match either a label selector or the seeds' shorthand
/// `{attribute?, value}`, which means the label `kuadrant.io/lb-attribute-<attribute>: <value>`
/// (`attribute` defaults to `custom-weight`).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.selector) != has(self.value)").message("each custom weight needs exactly one of value and selector"),
    validation = Rule::new("!has(self.attribute) || has(self.value)").message("custom weight attribute is only allowed together with value")
)]
pub struct CustomWeight {
    /// Matches ManagedCluster labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Shorthand: the attribute name, i.e. the label `kuadrant.io/lb-attribute-<attribute>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 63),
        regex(pattern = r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
    )]
    pub attribute: Option<String>,

    /// Shorthand: the label value to match (`AWS`, `Azure`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub value: Option<String>,

    /// The weight of matching clusters' records (≥ 0).
    #[schemars(range(min = 0))]
    pub weight: i64,
}

impl CustomWeight {
    /// Which clusters the entry matches (the shorthand's attribute defaults to
    /// `custom-weight`).
    pub fn matcher(&self) -> ClusterMatcher<'_> {
        ClusterMatcher {
            selector: self.selector.as_ref(),
            attribute: self.attribute.as_deref(),
            value: self.value.as_deref(),
            default_attribute: None,
        }
    }
}

/// GEO routing.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct GeoLoadBalancing {
    /// The geo whose clusters also answer clients from unknown locations (the seeds'
    /// `GEO.default`): an ISO-3166 alpha-2 country code or a continent `GEO-AF|AN|AS|EU|NA|OC|SA`.
    #[x_kube(validation = Rule::new(crate::geo::geo_code_cel()).message("geo.defaultGeo must be an ISO-3166 alpha-2 country code (e.g. IE, US) or a continent GEO-AF, GEO-AN, GEO-AS, GEO-EU, GEO-NA, GEO-OC or GEO-SA"))]
    pub default_geo: String,
}

/// Observed state of a DNSPolicy.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DNSPolicyStatus {
    /// `Accepted` (reasons Accepted, Conflicted, Invalid, TargetNotFound), `Programmed`
    /// (Programmed, PartiallyProgrammed, Reconciling, Overridden), `Enforced` (deprecated: what
    /// Gateway API said before v1.5) and `meridian.dev/FailStatic`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Gateway API v1.5 policy status (GEP-713): the Gateway the policy targets, with
    /// `Accepted` and `Programmed` as controller `meridian.dev/dns-controller` sees them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub ancestors: Vec<PolicyAncestorStatus>,
    /// The generation the conditions describe.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Clusters marked for drain (or coming back from one), with the share of their weight
    /// they have now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub draining: Vec<DrainingCluster>,
}

/// One ancestor of a policy (GEP-713's `PolicyAncestorStatus`).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PolicyAncestorStatus {
    /// The object the policy attaches to.
    pub ancestor_ref: ParentReference,
    /// The controller that wrote this entry.
    pub controller_name: String,
    /// `Accepted` and `Programmed` for this ancestor.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8))]
    pub conditions: Vec<Condition>,
}

/// A reference to a Gateway (Gateway API's `ParentReference`).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ParentReference {
    pub group: String,
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    pub name: String,
    /// The listener, for a policy that targets one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section_name: Option<String>,
}

/// A cluster whose traffic is moving away (or back) in steps.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct DrainingCluster {
    /// The ManagedCluster's name.
    pub cluster: String,
    /// The percentage of its configured weight it has now: 50, 10, 0 while draining; 10, 50
    /// on the way back.
    pub weight_percent: u32,
    /// `Draining` while the mark is set, `Returning` after it is removed.
    pub phase: String,
}
