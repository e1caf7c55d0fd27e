//! The record tree of one host: load-balancer CNAME → GEO CNAMEs → weighted cluster records →
//! A/AAAA records (`loadbalanced`), or one record holding every address (`simple`).
//!
//! The tree is a petgraph graph whose nodes are records (and external hostnames a record points
//! at) and whose edges go from a CNAME to every record at its target. The same graph validates the
//! tree, is pruned by health, and is rendered as text or Graphviz.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::IpAddr;

use petgraph::Direction;
use petgraph::graph::{DiGraph, NodeIndex};
use petgraph::visit::EdgeRef;

use crate::model::{
    Endpoint, GEO_CODE, PRIORITY, RecordType, WEIGHT, is_at_or_below, sort_endpoints,
};
use crate::shortcode::shortcode;

/// TTL of the root and load-balancer CNAMEs.
pub const LB_TTL: u32 = 300;
/// TTL of GEO CNAMEs, cluster records and `simple` records.
pub const LEAF_TTL: u32 = 60;
/// Set identifier of the catch-all load-balancer record.
pub const DEFAULT_SET: &str = "default";
/// The geo-code value of the catch-all.
pub const CATCH_ALL_GEO: &str = "*";
/// The geo every cluster is in when a policy has no GEO section.
pub const DEFAULT_GEO_GROUP: &str = "default";
/// ManagedCluster label holding a cluster's geo code.
pub const GEO_CODE_LABEL: &str = "kuadrant.io/lb-attribute-geo-code";

/// The Gateway whose listener the tree serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayRef {
    pub name: String,
    pub namespace: String,
}

/// A gateway address as Gateway API reports it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Address {
    Ip(IpAddr),
    Hostname(String),
}

impl Address {
    /// Parses Gateway API's `{type, value}`; `type` defaults to `IPAddress`.
    pub fn parse(type_: Option<&str>, value: &str) -> Result<Self, TreeError> {
        match type_.unwrap_or("IPAddress") {
            "IPAddress" => value
                .parse()
                .map(Address::Ip)
                .map_err(|_| TreeError::InvalidAddress(format!("{value:?} is not an IP address"))),
            "Hostname" if !value.is_empty() => Ok(Address::Hostname(
                value.trim_end_matches('.').to_ascii_lowercase(),
            )),
            other => Err(TreeError::InvalidAddress(format!(
                "unsupported address type {other:?} for {value:?}"
            ))),
        }
    }

    /// The string health results are keyed by.
    pub fn value(&self) -> String {
        match self {
            Address::Ip(ip) => ip.to_string(),
            Address::Hostname(host) => host.clone(),
        }
    }
}

/// One cluster serving the gateway's listener.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterTarget {
    /// The ManagedCluster's name.
    pub name: String,
    /// UID of the cluster's `kube-system` namespace.
    pub cluster_id: String,
    /// The ManagedCluster's labels (geo code, custom-weight attributes).
    pub labels: BTreeMap<String, String>,
    /// The downstream gateway's addresses on this cluster.
    pub addresses: Vec<Address>,
    /// Routes attached to the listener on this cluster; `Some(0)` means the cluster serves
    /// nothing for the host and gets no records. `None` means not reported: it is served.
    pub attached_routes: Option<u32>,
    /// The share of its weight the cluster has now, in percent: 100, or less while it drains.
    pub weight_percent: u32,
}

/// A label selector over ManagedCluster labels (Kubernetes semantics).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    pub match_labels: BTreeMap<String, String>,
    pub match_expressions: Vec<SelectorRequirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectorRequirement {
    pub key: String,
    pub operator: SelectorOperator,
    pub values: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectorOperator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
}

impl LabelSelector {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
            && self.match_expressions.iter().all(|requirement| {
                let value = labels.get(&requirement.key);
                match requirement.operator {
                    SelectorOperator::In => value.is_some_and(|v| requirement.values.contains(v)),
                    SelectorOperator::NotIn => {
                        value.is_none_or(|v| !requirement.values.contains(v))
                    }
                    SelectorOperator::Exists => value.is_some(),
                    SelectorOperator::DoesNotExist => value.is_none(),
                }
            })
    }
}

/// A weight for the clusters a selector matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomWeight {
    pub selector: LabelSelector,
    pub weight: u32,
}

/// A failover priority for the clusters a selector matches (1 is the best tier).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TierRule {
    pub selector: LabelSelector,
    pub priority: u32,
}

/// Priority tiers: the first rule matching a cluster's labels gives its tier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tiers {
    pub rules: Vec<TierRule>,
    /// The tier of a cluster no rule matches.
    pub default_priority: u32,
}

impl Tiers {
    pub fn priority_of(&self, labels: &BTreeMap<String, String>) -> u32 {
        self.rules
            .iter()
            .find(|rule| rule.selector.matches(labels))
            .map_or(self.default_priority, |rule| rule.priority)
    }
}

/// How the host's records are shaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Strategy {
    Simple,
    LoadBalanced(LoadBalancing),
}

/// Weights and GEO routing of the `loadbalanced` strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadBalancing {
    pub default_weight: u32,
    /// The first entry whose selector matches a cluster's labels gives its weight.
    pub custom: Vec<CustomWeight>,
    /// With GEO routing: the geo that also answers unknown locations.
    pub default_geo: Option<String>,
    /// Priority tiers, within each geo; `None`: one tier.
    pub tiers: Option<Tiers>,
}

impl LoadBalancing {
    /// The cluster's weight: the first matching custom weight, or the default, scaled by its
    /// drain step (rounded up, so only a fully drained cluster weighs 0).
    fn weight_of(&self, cluster: &ClusterTarget) -> u32 {
        let configured = self
            .custom
            .iter()
            .find(|custom| custom.selector.matches(&cluster.labels))
            .map_or(self.default_weight, |custom| custom.weight);
        let percent = u64::from(cluster.weight_percent.min(100));
        (u64::from(configured) * percent).div_ceil(100) as u32
    }

    fn geo_of(&self, cluster: &ClusterTarget) -> String {
        match &self.default_geo {
            None => DEFAULT_GEO_GROUP.to_string(),
            Some(default_geo) => cluster
                .labels
                .get(GEO_CODE_LABEL)
                .cloned()
                .unwrap_or_else(|| default_geo.clone()),
        }
    }
}

/// Why a tree could not be built or is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TreeError {
    #[error("invalid address: {0}")]
    InvalidAddress(String),
    #[error(
        "host {host}: a simple record cannot point at several hostnames ({hostnames}); use loadbalanced"
    )]
    SimpleMultipleHostnames { host: String, hostnames: String },
    #[error("host {host}: a simple record cannot mix IP addresses and hostnames; use loadbalanced")]
    SimpleMixedAddresses { host: String },
    #[error("invalid host {0:?}")]
    InvalidHost(String),
    #[error("{record} points at {target}, which has no record")]
    DanglingCname { record: String, target: String },
    #[error("the records of {0} form a CNAME cycle")]
    Cycle(String),
}

/// A node of the tree: a record, or a hostname outside the tree a record points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Record(Endpoint),
    External(String),
}

/// The records of one host, as a graph rooted at the host's record.
#[derive(Debug, Clone)]
pub struct RecordTree {
    pub host: String,
    graph: DiGraph<Node, ()>,
    /// Notes for the policy's status (e.g. the catch-all fell back to another geo).
    pub warnings: Vec<String>,
}

/// Health of a leaf address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Health {
    Healthy,
    Unhealthy,
    /// No result yet: counts as healthy.
    Unknown,
}

/// The result of pruning a tree by health.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pruned {
    /// The tree without its unhealthy leaves and the parents left without children.
    Endpoints(Vec<Endpoint>),
    /// No leaf is healthy: publish what was published before (never answer NXDOMAIN).
    NoHealthyLeaf,
}

/// The cluster record's name: `<shortcode6(clusterID)>-<shortcode6(gw-name + "-" + gw-namespace)>.klb.<h>`.
pub fn cluster_record_name(cluster_id: &str, gateway: &GatewayRef, base: &str) -> String {
    let gateway_code = shortcode(&format!("{}-{}", gateway.name, gateway.namespace), 6);
    format!("{}-{gateway_code}.klb.{base}", shortcode(cluster_id, 6))
}

/// Builds the record tree of `host` for `gateway` on `clusters`.
pub fn build_record_tree(
    host: &str,
    gateway: &GatewayRef,
    strategy: &Strategy,
    clusters: &[ClusterTarget],
) -> Result<RecordTree, TreeError> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    let base = host.strip_prefix("*.").unwrap_or(&host).to_string();
    if base.is_empty() || base.contains('*') || base.contains(' ') {
        return Err(TreeError::InvalidHost(host));
    }
    // Sorted by name, so the result is the same whatever order the clusters arrive in.
    let mut serving: Vec<&ClusterTarget> = clusters
        .iter()
        .filter(|c| c.attached_routes != Some(0))
        .collect();
    serving.sort_by(|a, b| (&a.name, &a.cluster_id).cmp(&(&b.name, &b.cluster_id)));

    let mut warnings = Vec::new();
    let endpoints = match strategy {
        Strategy::Simple => simple_endpoints(&host, &serving)?,
        Strategy::LoadBalanced(lb) => {
            loadbalanced_endpoints(&host, &base, gateway, lb, &serving, &mut warnings)
        }
    };
    let tree = RecordTree::from_endpoints(host, endpoints, warnings);
    tree.validate()?;
    Ok(tree)
}

fn simple_endpoints(host: &str, clusters: &[&ClusterTarget]) -> Result<Vec<Endpoint>, TreeError> {
    let addresses: BTreeSet<&Address> = clusters.iter().flat_map(|c| &c.addresses).collect();
    let hostnames: Vec<&str> = addresses
        .iter()
        .filter_map(|a| match a {
            Address::Hostname(h) => Some(h.as_str()),
            Address::Ip(_) => None,
        })
        .collect();
    let (v4, v6) = split_ips(addresses.iter().copied());
    match (hostnames.as_slice(), v4.is_empty() && v6.is_empty()) {
        ([], _) => Ok(ip_records(host, v4, v6)),
        ([hostname], true) => Ok(vec![Endpoint::new(
            host,
            RecordType::Cname,
            [hostname.to_string()],
            LEAF_TTL,
        )]),
        ([_], false) => Err(TreeError::SimpleMixedAddresses {
            host: host.to_string(),
        }),
        (many, _) => Err(TreeError::SimpleMultipleHostnames {
            host: host.to_string(),
            hostnames: many.join(", "),
        }),
    }
}

fn split_ips<'a>(addresses: impl Iterator<Item = &'a Address>) -> (Vec<String>, Vec<String>) {
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    for address in addresses {
        match address {
            Address::Ip(ip @ IpAddr::V4(_)) => v4.push(ip.to_string()),
            Address::Ip(ip @ IpAddr::V6(_)) => v6.push(ip.to_string()),
            Address::Hostname(_) => {}
        }
    }
    (v4, v6)
}

fn ip_records(name: &str, v4: Vec<String>, v6: Vec<String>) -> Vec<Endpoint> {
    let mut records = Vec::new();
    if !v4.is_empty() {
        records.push(Endpoint::new(name, RecordType::A, v4, LEAF_TTL));
    }
    if !v6.is_empty() {
        records.push(Endpoint::new(name, RecordType::Aaaa, v6, LEAF_TTL));
    }
    records
}

fn loadbalanced_endpoints(
    host: &str,
    base: &str,
    gateway: &GatewayRef,
    lb: &LoadBalancing,
    clusters: &[&ClusterTarget],
    warnings: &mut Vec<String>,
) -> Vec<Endpoint> {
    let lb_name = format!("klb.{base}");
    let geo_name = |geo: &str| format!("{}.{lb_name}", geo.to_ascii_lowercase());
    let mut records: BTreeMap<crate::model::RecordKey, Endpoint> = BTreeMap::new();
    let mut add = |endpoint: Endpoint| {
        // Two clusters behind one load-balancer hostname give the same GEO record: keep the first.
        records.entry(endpoint.key()).or_insert(endpoint);
    };
    let mut geos: BTreeSet<String> = BTreeSet::new();
    let mut cluster_ips: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();

    for cluster in clusters {
        let geo = lb.geo_of(cluster);
        let weight = lb.weight_of(cluster).to_string();
        let (v4, v6) = split_ips(cluster.addresses.iter());
        let mut targets = Vec::new();
        if !v4.is_empty() || !v6.is_empty() {
            let name = cluster_record_name(&cluster.cluster_id, gateway, base);
            let ips = cluster_ips.entry(name.clone()).or_default();
            ips.0.extend(v4);
            ips.1.extend(v6);
            targets.push(name);
        }
        targets.extend(cluster.addresses.iter().filter_map(|a| match a {
            Address::Hostname(h) => Some(h.clone()),
            Address::Ip(_) => None,
        }));
        let priority = lb
            .tiers
            .as_ref()
            .map(|tiers| tiers.priority_of(&cluster.labels).to_string());
        for target in targets {
            geos.insert(geo.clone());
            let mut record = Endpoint::new(
                geo_name(&geo),
                RecordType::Cname,
                [target.clone()],
                LEAF_TTL,
            )
            .with_set_identifier(target)
            .with_property(WEIGHT, weight.clone());
            if let Some(priority) = &priority {
                record = record.with_property(PRIORITY, priority.clone());
            }
            add(record);
        }
    }
    for (name, (v4, v6)) in cluster_ips {
        ip_records(&name, v4, v6).into_iter().for_each(&mut add);
    }
    if geos.is_empty() {
        return Vec::new();
    }

    let catch_all_geo = match &lb.default_geo {
        None => DEFAULT_GEO_GROUP.to_string(),
        Some(default_geo) if geos.contains(default_geo) => default_geo.clone(),
        Some(default_geo) => {
            let lowest = geos.first().expect("geos is not empty").clone();
            warnings.push(format!(
                "no cluster is in the default geo {default_geo}; clients from other locations are answered by {lowest}"
            ));
            lowest
        }
    };
    if lb.default_geo.is_some() {
        for geo in &geos {
            add(
                Endpoint::new(&lb_name, RecordType::Cname, [geo_name(geo)], LB_TTL)
                    .with_set_identifier(geo.clone())
                    .with_property(GEO_CODE, geo.clone()),
            );
        }
    }
    add(Endpoint::new(
        &lb_name,
        RecordType::Cname,
        [geo_name(&catch_all_geo)],
        LB_TTL,
    )
    .with_set_identifier(DEFAULT_SET)
    .with_property(GEO_CODE, CATCH_ALL_GEO));
    add(Endpoint::new(
        host,
        RecordType::Cname,
        [lb_name.clone()],
        LB_TTL,
    ));
    records.into_values().collect()
}

/// Gives `ttl` to every record of `host`'s tree that health or a choice can change: every one
/// but the host's CNAME to its load-balancer name, which never changes and keeps [`LB_TTL`] so
/// resolvers do not ask for it again.
pub fn set_answer_ttl(endpoints: &mut [Endpoint], host: &str, ttl: u32) {
    for endpoint in endpoints {
        let constant = endpoint.dns_name == host
            && endpoint.record_type == RecordType::Cname
            && endpoint.record_ttl == LB_TTL;
        if !constant {
            endpoint.record_ttl = ttl;
        }
    }
}

/// One cluster's branch of a host's tree in distributed mode: the records `clusters` (this
/// cluster's targets) contribute to a tree other clusters add their branches to. Unlike a whole
/// tree, the catch-all always answers with the configured default geo: the group may be
/// another cluster's, and a branch that fell back to its own geo would fight the branches of
/// the default geo over one shared record. The plan refuses the catch-all while no cluster
/// serves the default geo (it would point at nothing) and publishes it once one does.
pub fn build_branch(
    host: &str,
    gateway: &GatewayRef,
    strategy: &Strategy,
    clusters: &[ClusterTarget],
) -> Result<RecordTree, TreeError> {
    let tree = build_record_tree(host, gateway, strategy, clusters)?;
    let Strategy::LoadBalanced(LoadBalancing {
        default_geo: Some(default_geo),
        ..
    }) = strategy
    else {
        return Ok(tree);
    };
    let base = tree
        .host
        .strip_prefix("*.")
        .unwrap_or(&tree.host)
        .to_string();
    let catch_all = format!("{}.klb.{base}", default_geo.to_ascii_lowercase());
    let mut endpoints = tree.endpoints();
    for endpoint in &mut endpoints {
        if endpoint.set_identifier.as_deref() == Some(DEFAULT_SET)
            && endpoint.property(GEO_CODE) == Some(CATCH_ALL_GEO)
        {
            endpoint.targets = vec![catch_all.clone()];
        }
    }
    let warnings = tree
        .warnings
        .iter()
        .filter(|w| !w.starts_with("no cluster is in the default geo"))
        .cloned()
        .collect();
    Ok(RecordTree::from_endpoints(tree.host, endpoints, warnings))
}

impl RecordTree {
    /// The tree of records already built (for example a DNSRecord's endpoints), so they can be
    /// pruned by health.
    pub fn from_records(host: impl Into<String>, endpoints: Vec<Endpoint>) -> Self {
        Self::from_endpoints(host.into(), endpoints, Vec::new())
    }

    /// The addresses of the tree's leaves: A/AAAA values and CNAME targets outside the host's
    /// names (gateway hostnames), sorted and without duplicates.
    pub fn leaf_addresses(&self) -> Vec<String> {
        let mut leaves: Vec<String> = self
            .graph
            .node_weights()
            .flat_map(|node| match node {
                Node::External(hostname) => vec![hostname.clone()],
                Node::Record(e) if matches!(e.record_type, RecordType::A | RecordType::Aaaa) => {
                    e.targets.clone()
                }
                Node::Record(_) => Vec::new(),
            })
            .collect();
        leaves.sort();
        leaves.dedup();
        leaves
    }

    /// Links records into a graph: an edge from each CNAME to every record at its target, or to
    /// an external node when the target is outside the host's names.
    fn from_endpoints(host: String, endpoints: Vec<Endpoint>, warnings: Vec<String>) -> Self {
        let mut graph = DiGraph::new();
        let mut by_name: BTreeMap<String, Vec<NodeIndex>> = BTreeMap::new();
        for endpoint in endpoints {
            let name = endpoint.dns_name.clone();
            let index = graph.add_node(Node::Record(endpoint));
            by_name.entry(name).or_default().push(index);
        }
        let base = host.strip_prefix("*.").unwrap_or(&host).to_string();
        let mut externals: BTreeMap<String, NodeIndex> = BTreeMap::new();
        let cnames: Vec<(NodeIndex, String)> = graph
            .node_indices()
            .filter_map(|index| match &graph[index] {
                Node::Record(e) if e.record_type == RecordType::Cname => {
                    Some((index, e.targets.first()?.clone()))
                }
                _ => None,
            })
            .collect();
        for (index, target) in cnames {
            if let Some(children) = by_name.get(&target) {
                for child in children {
                    graph.add_edge(index, *child, ());
                }
            } else if !is_at_or_below(&target, &base) {
                let external = *externals
                    .entry(target.clone())
                    .or_insert_with(|| graph.add_node(Node::External(target)));
                graph.add_edge(index, external, ());
            }
        }
        RecordTree {
            host,
            graph,
            warnings,
        }
    }

    /// The tree's records, sorted by name, set identifier and type.
    pub fn endpoints(&self) -> Vec<Endpoint> {
        let mut endpoints: Vec<Endpoint> = self
            .graph
            .node_weights()
            .filter_map(|node| match node {
                Node::Record(e) => Some(e.clone()),
                Node::External(_) => None,
            })
            .collect();
        sort_endpoints(&mut endpoints);
        endpoints
    }

    /// No CNAME inside the host's names points at nothing, and no CNAMEs form a cycle.
    pub fn validate(&self) -> Result<(), TreeError> {
        for index in self.graph.node_indices() {
            if let Node::Record(e) = &self.graph[index]
                && e.record_type == RecordType::Cname
                && self.graph.edges(index).next().is_none()
            {
                return Err(TreeError::DanglingCname {
                    record: e.dns_name.clone(),
                    target: e.targets.first().cloned().unwrap_or_default(),
                });
            }
        }
        if petgraph::algo::is_cyclic_directed(&self.graph) {
            return Err(TreeError::Cycle(self.host.clone()));
        }
        Ok(())
    }

    fn roots(&self) -> Vec<NodeIndex> {
        let mut roots: Vec<NodeIndex> = self
            .graph
            .node_indices()
            .filter(|i| matches!(&self.graph[*i], Node::Record(e) if e.dns_name == self.host))
            .collect();
        roots.sort_by_key(|i| self.label(*i));
        roots
    }

    /// Removes unhealthy leaves, then every record left without children; never the host's
    /// own record. A catch-all left without children points at the first GEO group left. `health` is keyed by address (IP or hostname); a missing entry is unknown,
    /// which counts as healthy.
    pub fn prune(&self, health: &BTreeMap<String, Health>) -> Pruned {
        let unhealthy = |value: &str| health.get(value) == Some(&Health::Unhealthy);
        let mut graph = self.graph.clone();
        let mut healthy_leaves = 0usize;
        let mut removed: Vec<NodeIndex> = Vec::new();
        for index in graph.node_indices() {
            match &mut graph[index] {
                Node::External(hostname) => {
                    if unhealthy(hostname) {
                        removed.push(index);
                    } else {
                        healthy_leaves += 1;
                    }
                }
                Node::Record(e) if matches!(e.record_type, RecordType::A | RecordType::Aaaa) => {
                    e.targets.retain(|t| !unhealthy(t));
                    healthy_leaves += e.targets.len();
                    if e.targets.is_empty() && e.dns_name != self.host {
                        removed.push(index);
                    }
                }
                Node::Record(_) => {}
            }
        }
        if healthy_leaves == 0 {
            return Pruned::NoHealthyLeaf;
        }
        // Parents left without children go too, level by level; the root always stays.
        let mut gone: BTreeSet<NodeIndex> = removed.into_iter().collect();
        loop {
            let orphaned: Vec<NodeIndex> = graph
                .node_indices()
                .filter(|i| !gone.contains(i))
                .filter(|i| matches!(&graph[*i], Node::Record(e) if e.record_type == RecordType::Cname && e.dns_name != self.host))
                .filter(|i| graph.neighbors_directed(*i, Direction::Outgoing).all(|child| gone.contains(&child)))
                .collect();
            if orphaned.is_empty() {
                break;
            }
            gone.extend(orphaned);
        }
        let mut endpoints: Vec<Endpoint> = graph
            .node_indices()
            .filter(|i| !gone.contains(i))
            .filter_map(|i| match &graph[i] {
                Node::Record(e) => Some(e.clone()),
                Node::External(_) => None,
            })
            .collect();
        // A catch-all whose GEO group has no healthy leaf left answers with the first group
        // still standing instead: without it, clients of the fallen group and clients from
        // anywhere else would get no address while other groups serve.
        let fallen_catch_alls: Vec<&Endpoint> = gone
            .iter()
            .filter_map(|i| match &graph[*i] {
                Node::Record(e) if e.property(GEO_CODE) == Some(CATCH_ALL_GEO) => Some(e),
                _ => None,
            })
            .collect();
        for catch_all in fallen_catch_alls {
            let standing = endpoints
                .iter()
                .filter(|e| e.dns_name == catch_all.dns_name && e.property(GEO_CODE).is_some())
                .map(|e| e.targets.clone())
                .min();
            if let Some(targets) = standing {
                let mut fallback = catch_all.clone();
                fallback.targets = targets;
                endpoints.push(fallback);
            }
        }
        sort_endpoints(&mut endpoints);
        Pruned::Endpoints(endpoints)
    }

    fn label(&self, index: NodeIndex) -> String {
        match &self.graph[index] {
            Node::External(hostname) => format!("{hostname} (external)"),
            Node::Record(e) => {
                let mut label = format!("{} {}", e.dns_name, e.record_type);
                if e.record_type != RecordType::Cname {
                    let _ = write!(label, " {}", e.targets.join(", "));
                }
                let mut details: Vec<String> = e
                    .set_identifier
                    .iter()
                    .map(|s| format!("set={s}"))
                    .collect();
                details.extend(
                    e.provider_specific
                        .iter()
                        .map(|p| format!("{}={}", p.name, p.value)),
                );
                details.push(format!("ttl={}", e.record_ttl));
                let _ = write!(label, " [{}]", details.join(" "));
                label
            }
        }
    }

    fn sorted_children(&self, index: NodeIndex) -> Vec<NodeIndex> {
        let mut children: Vec<NodeIndex> =
            self.graph.edges(index).map(|edge| edge.target()).collect();
        children.sort_by_key(|child| self.label(*child));
        children
    }

    /// The tree drawn for a terminal.
    pub fn render_text(&self) -> String {
        let mut out = String::new();
        for root in self.roots() {
            let _ = writeln!(out, "{}", self.label(root));
            self.render_children(root, "", &mut out);
        }
        out
    }

    fn render_children(&self, index: NodeIndex, prefix: &str, out: &mut String) {
        let children = self.sorted_children(index);
        for (position, child) in children.iter().enumerate() {
            let last = position + 1 == children.len();
            let _ = writeln!(
                out,
                "{prefix}{}{}",
                if last { "└─ " } else { "├─ " },
                self.label(*child)
            );
            let deeper = format!("{prefix}{}", if last { "   " } else { "│  " });
            self.render_children(*child, &deeper, out);
        }
    }

    /// The tree in Graphviz's dot language.
    pub fn render_dot(&self) -> String {
        let mut nodes: Vec<NodeIndex> = self.graph.node_indices().collect();
        nodes.sort_by_key(|i| self.label(*i));
        let id = |i: NodeIndex| nodes.iter().position(|n| *n == i).unwrap_or_default();
        let mut out = format!(
            "digraph \"{}\" {{\n  rankdir=LR;\n  node [shape=box, fontname=monospace];\n",
            self.host
        );
        for node in &nodes {
            let _ = writeln!(
                out,
                "  n{} [label=\"{}\"];",
                id(*node),
                self.label(*node).replace('"', "\\\"")
            );
        }
        let mut edges: Vec<(usize, usize)> = self
            .graph
            .edge_references()
            .map(|e| (id(e.source()), id(e.target())))
            .collect();
        edges.sort_unstable();
        for (from, to) in edges {
            let _ = writeln!(out, "  n{from} -> n{to};");
        }
        out.push_str("}\n");
        out
    }
}
