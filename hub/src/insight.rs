//! What an operator needs to read a host's DNS without rebuilding it by hand: the tree the hub
//! wants, what is published of it, each leaf's health verdict with the clusters' votes behind
//! it, the clusters that serve it (silent or draining), a held plan and other owners.
//!
//! [`host_views`] is pure: it reads a [`FleetSnapshot`], which the hub's live view fills from
//! its watch caches and `meridian-hub explain` from one list of each kind. The answer a client
//! gets is explained by the nameserver's own walk (`meridian_nameserver::explain`) over
//! [`FleetSnapshot::published_zone`].

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use meridian_api::conditions::{READY, condition_status};
use meridian_api::kuadrant::{DNSHealthCheckProbe, DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::meridian::ClusterReport;
use meridian_dns::model::{Endpoint, is_at_or_below};
use meridian_dns::tree::RecordTree;
use serde::Serialize;

use meridian_controllers::decide::convert::all_to_engine;
use meridian_controllers::decide::health::PROBE_RECORD_LABEL;
use meridian_controllers::zones::zone_mirror::published_endpoints;

/// The objects a view is made of, as one moment's lists.
#[derive(Debug, Clone, Default)]
pub struct FleetSnapshot {
    pub records: Vec<Arc<DNSRecord>>,
    pub probes: Vec<Arc<DNSHealthCheckProbe>>,
    pub policies: Vec<Arc<DNSPolicy>>,
    pub reports: Vec<Arc<ClusterReport>>,
    /// The agents' heartbeat Leases, one per cluster namespace.
    pub heartbeats: Vec<Arc<Lease>>,
    pub zones: Vec<Arc<ManagedZone>>,
    pub now: Option<Timestamp>,
    /// Unheard for longer than this, a cluster is silent.
    pub heartbeat_timeout: Duration,
}

/// One DNSRecord (one host), explained.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HostView {
    /// `namespace/name` of the DNSRecord.
    pub record: String,
    pub host: String,
    /// The domain of the record's ManagedZone (empty when the zone is missing).
    pub zone: String,
    pub ready: Option<bool>,
    /// The `Ready` condition's reason and message.
    pub ready_reason: String,
    pub ready_message: String,
    /// The `Healthy` condition's message, when the record is health-checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub health_message: Option<String>,
    /// A plan over the zone's threshold waiting for approval: its message.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub held_plan: Option<String>,
    /// Owners other than this record publishing into its names: a conflict.
    pub other_owners: Vec<String>,
    pub leaves: Vec<LeafView>,
    pub clusters: Vec<ClusterState>,
    /// The records the hub wants (the whole tree, every leaf).
    #[serde(skip)]
    pub wanted: Vec<Endpoint>,
    /// The records published now (the tree after health, tiers and drains).
    #[serde(skip)]
    pub published: Vec<Endpoint>,
}

/// A leaf address of the tree and what the fleet thinks of it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LeafView {
    pub address: String,
    /// The cluster whose Gateway has the address, from the clusters' reports.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    pub published: bool,
    /// The priority tier of the weighted record leading to the leaf (1 is served first), when
    /// the policy has tiers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    /// `healthy`, `unhealthy`, `awaiting` (probed, not judged yet) or `unchecked`.
    pub verdict: &'static str,
    pub votes: Vec<Vote>,
}

/// One cluster's probe of a leaf.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Vote {
    pub cluster: String,
    pub healthy: bool,
    pub consecutive_failures: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_checked_at: Option<Timestamp>,
    /// When this cluster's run of failures began: its last check less one interval per
    /// failure after the first (so to within one probe interval).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failing_since: Option<Timestamp>,
}

/// A cluster that has a leaf of the host.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterState {
    pub name: String,
    /// Seconds since its agent last reported.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_heard_seconds: Option<i64>,
    /// Unheard for longer than the heartbeat timeout.
    pub silent: bool,
    /// Being drained: the share of its weight it keeps, and the drain's phase.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draining: Option<(u32, String)>,
}

impl FleetSnapshot {
    /// The snapshot of a hub's watch caches.
    pub fn from_caches(
        caches: &meridian_controllers::runtime::caches::Caches,
        now: Timestamp,
        heartbeat_timeout: Duration,
    ) -> Self {
        FleetSnapshot {
            records: caches.records.state(),
            probes: caches.probes.state(),
            policies: caches.policies.state(),
            reports: caches.reports.state(),
            heartbeats: caches.heartbeats.state(),
            zones: caches.zones.state(),
            now: Some(now),
            heartbeat_timeout,
        }
    }

    /// The snapshot listed from the hub's API server.
    pub async fn list(
        client: &kube::Client,
        heartbeat_timeout: Duration,
    ) -> Result<Self, kube::Error> {
        async fn all<K>(client: &kube::Client) -> Result<Vec<Arc<K>>, kube::Error>
        where
            K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
                + Clone
                + serde::de::DeserializeOwned
                + std::fmt::Debug,
        {
            Ok(kube::Api::<K>::all(client.clone())
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .map(Arc::new)
                .collect())
        }
        Ok(FleetSnapshot {
            records: all(client).await?,
            probes: all(client).await?,
            policies: all(client).await?,
            reports: all(client).await?,
            heartbeats: kube::Api::<Lease>::all(client.clone())
                .list(&kube::api::ListParams::default().fields(&format!(
                    "metadata.name={}",
                    meridian_api::names::HEARTBEAT_LEASE
                )))
                .await?
                .items
                .into_iter()
                .map(Arc::new)
                .collect(),
            zones: all(client).await?,
            now: Some(Timestamp::now()),
            heartbeat_timeout,
        })
    }

    /// The ManagedZone a record publishes into.
    fn zone_of(&self, record: &DNSRecord) -> Option<&ManagedZone> {
        self.zones
            .iter()
            .find(|z| {
                z.namespace() == record.namespace() && z.name_any() == record.spec.managed_zone.name
            })
            .map(Arc::as_ref)
    }

    /// The zone holding `host`, with what every record of it publishes now, as the embedded
    /// nameserver serves it (for a provider's zone: what Meridian published there). `None`
    /// when no record publishes at or above `host`.
    pub fn published_zone(&self, host: &str) -> Option<meridian_nameserver::Zone> {
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        // The closest enclosing domain; every ManagedZone of it (in any namespace) feeds the
        // one zone the nameserver serves for it.
        let domain = self
            .zones
            .iter()
            .map(|zone| zone.spec.domain_name.as_str())
            .filter(|domain| is_at_or_below(&host, domain))
            .max_by_key(|domain| domain.len())?
            .to_string();
        let zones: Vec<&Arc<ManagedZone>> = self
            .zones
            .iter()
            .filter(|zone| zone.spec.domain_name == domain)
            .collect();
        let records: Vec<&Arc<DNSRecord>> = self
            .records
            .iter()
            .filter(|r| {
                zones.iter().any(|zone| {
                    r.namespace() == zone.namespace() && r.spec.managed_zone.name == zone.name_any()
                })
            })
            .collect();
        let endpoints: Vec<Endpoint> = records
            .iter()
            .flat_map(|record| published_endpoints(record))
            .collect();
        Some(meridian_nameserver::Zone::new(
            meridian_nameserver::ZoneConfig::new(&domain),
            0,
            endpoints,
        ))
    }
}

/// The views of every record, sorted by host; with `host`, only the records at or above it.
pub fn host_views(snapshot: &FleetSnapshot, host: Option<&str>) -> Vec<HostView> {
    let host = host.map(|h| h.trim_end_matches('.').to_ascii_lowercase());
    let index = Index::new(snapshot);
    let mut views: Vec<HostView> = snapshot
        .records
        .iter()
        .filter(|record| record.metadata.deletion_timestamp.is_none())
        .filter_map(|record| {
            let root = record.spec.effective_root_host()?;
            let covers = host.as_deref().is_none_or(|host| {
                let base = root.trim_start_matches("*.");
                host == root || is_at_or_below(host, base)
            });
            covers.then(|| host_view(snapshot, &index, record, root))
        })
        .collect();
    views.sort_by(|a, b| (&a.host, &a.record).cmp(&(&b.host, &b.record)));
    views
}

/// The snapshot's lists keyed the way each view looks them up, built once for all views (a
/// scrape of `/metrics` draws every host, so scanning every list per host would grow with the
/// square of the fleet).
struct Index<'a> {
    /// Cluster of each gateway address its agent reports.
    owners: BTreeMap<&'a str, &'a str>,
    /// Probes by (namespace, DNSRecord).
    probes: BTreeMap<(&'a str, &'a str), Vec<&'a DNSHealthCheckProbe>>,
    reports: BTreeMap<&'a str, &'a ClusterReport>,
    heartbeats: BTreeMap<&'a str, &'a Lease>,
    /// Drained clusters by policy namespace.
    draining: BTreeMap<&'a str, BTreeMap<&'a str, (u32, String)>>,
}

impl<'a> Index<'a> {
    fn new(snapshot: &'a FleetSnapshot) -> Self {
        let namespace = |meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
            meta.namespace.as_deref().unwrap_or_default()
        };
        let mut probes: BTreeMap<(&str, &str), Vec<&DNSHealthCheckProbe>> = BTreeMap::new();
        for probe in &snapshot.probes {
            if let Some(record) = probe
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(PROBE_RECORD_LABEL))
            {
                probes
                    .entry((namespace(&probe.metadata), record.as_str()))
                    .or_default()
                    .push(probe);
            }
        }
        let mut draining: BTreeMap<&str, BTreeMap<&str, (u32, String)>> = BTreeMap::new();
        for policy in &snapshot.policies {
            for drain in policy.status.iter().flat_map(|s| s.draining.iter()) {
                draining
                    .entry(namespace(&policy.metadata))
                    .or_default()
                    .insert(
                        drain.cluster.as_str(),
                        (drain.weight_percent, drain.phase.clone()),
                    );
            }
        }
        Index {
            owners: snapshot
                .reports
                .iter()
                .flat_map(|report| {
                    let cluster = namespace(&report.metadata);
                    report.spec.gateways.iter().flat_map(move |gateway| {
                        gateway
                            .addresses
                            .iter()
                            .map(move |a| (a.value.as_str(), cluster))
                    })
                })
                .collect(),
            probes,
            reports: snapshot
                .reports
                .iter()
                .map(|r| (namespace(&r.metadata), r.as_ref()))
                .collect(),
            heartbeats: snapshot
                .heartbeats
                .iter()
                .filter(|l| {
                    l.metadata.name.as_deref() == Some(meridian_api::names::HEARTBEAT_LEASE)
                })
                .map(|l| (namespace(&l.metadata), l.as_ref()))
                .collect(),
            draining,
        }
    }
}

fn host_view(
    snapshot: &FleetSnapshot,
    index: &Index<'_>,
    record: &DNSRecord,
    host: String,
) -> HostView {
    let namespace = record.namespace().unwrap_or_default();
    let wanted = all_to_engine(&record.spec.endpoints);
    let published = published_endpoints(record);
    let published_leaves: BTreeSet<String> =
        RecordTree::from_records(host.as_str(), published.clone())
            .leaf_addresses()
            .into_iter()
            .collect();
    let owners_of = &index.owners;
    let no_probes = Vec::new();
    let name = record.name_any();
    let probes = index
        .probes
        .get(&(namespace.as_str(), name.as_str()))
        .unwrap_or(&no_probes);
    let tiers = leaf_tiers(&wanted);
    let leaves: Vec<LeafView> = RecordTree::from_records(host.as_str(), wanted.clone())
        .leaf_addresses()
        .into_iter()
        .map(|address| {
            let probe = probes.iter().find(|p| p.spec.address == address);
            let interval = probe
                .and_then(|p| meridian_api::duration::parse_duration(&p.spec.interval))
                .unwrap_or(Duration::from_secs(30));
            let status = probe.and_then(|p| p.status.as_ref());
            let votes = status
                .map(|s| {
                    s.clusters
                        .iter()
                        .map(|c| Vote {
                            cluster: c.cluster.clone(),
                            healthy: c.healthy,
                            consecutive_failures: c.consecutive_failures,
                            reason: c.reason.clone(),
                            last_checked_at: c.last_checked_at.as_ref().map(|t| t.0),
                            failing_since: meridian_controllers::decide::health::failing_since(
                                c.last_checked_at.as_ref().map(|t| t.0),
                                c.consecutive_failures,
                                interval,
                            ),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let verdict = match (probe, status.and_then(|s| s.healthy)) {
                (None, _) => "unchecked",
                (Some(_), None) => "awaiting",
                (Some(_), Some(true)) => "healthy",
                (Some(_), Some(false)) => "unhealthy",
            };
            LeafView {
                cluster: owners_of.get(address.as_str()).map(|c| c.to_string()),
                published: published_leaves.contains(&address),
                tier: tiers.get(&address).copied(),
                verdict,
                votes,
                address,
            }
        })
        .collect();
    let no_drains = BTreeMap::new();
    let draining = index.draining.get(namespace.as_str()).unwrap_or(&no_drains);
    let cluster_names: BTreeSet<&str> =
        leaves.iter().filter_map(|l| l.cluster.as_deref()).collect();
    let clusters = cluster_names
        .into_iter()
        .map(|name| {
            let report = index.reports.get(name).copied();
            let lease = index.heartbeats.get(name).copied();
            let heard = meridian_controllers::runtime::clock::last_heard(lease, report);
            let last_heard_seconds = heard
                .zip(snapshot.now)
                .map(|(heard, now)| now.duration_since(heard).as_secs());
            ClusterState {
                name: name.to_string(),
                last_heard_seconds,
                // Offline (no time) nothing is silent.
                silent: snapshot.now.is_some()
                    && last_heard_seconds
                        .is_none_or(|s| s.unsigned_abs() > snapshot.heartbeat_timeout.as_secs()),
                draining: draining.get(name).cloned(),
            }
        })
        .collect();
    let conditions = record
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let ready = conditions.iter().find(|c| c.type_ == READY);
    let owner = meridian_controllers::zones::owners::published_owner(record);
    HostView {
        record: format!("{namespace}/{}", record.name_any()),
        zone: snapshot
            .zone_of(record)
            .map(|z| z.spec.domain_name.clone())
            .unwrap_or_default(),
        ready: condition_status(conditions, READY),
        ready_reason: ready.map(|c| c.reason.clone()).unwrap_or_default(),
        ready_message: ready.map(|c| c.message.clone()).unwrap_or_default(),
        health_message: conditions
            .iter()
            .find(|c| c.type_ == meridian_api::conditions::HEALTHY)
            .map(|c| c.message.clone()),
        held_plan: meridian_controllers::decide::plan_guard::held_message(record)
            .map(str::to_string),
        other_owners: record
            .status
            .iter()
            .flat_map(|s| s.domain_owners.iter())
            .filter(|o| **o != owner)
            .cloned()
            .collect(),
        leaves,
        clusters,
        wanted,
        published,
        host,
    }
}

/// The tier of each leaf: the `priority` of the weighted CNAME that leads to it (to its A or
/// AAAA record, or to a gateway hostname outside the tree).
fn leaf_tiers(wanted: &[Endpoint]) -> BTreeMap<String, u32> {
    use meridian_dns::model::{PRIORITY, RecordType};
    let mut tiers = BTreeMap::new();
    for cname in wanted.iter().filter(|e| e.record_type == RecordType::Cname) {
        let (Some(priority), Some(target)) = (
            cname.property(PRIORITY).and_then(|p| p.parse::<u32>().ok()),
            cname.targets.first(),
        ) else {
            continue;
        };
        let addresses: Vec<&String> = wanted
            .iter()
            .filter(|e| &e.dns_name == target)
            .filter(|e| matches!(e.record_type, RecordType::A | RecordType::Aaaa))
            .flat_map(|e| &e.targets)
            .collect();
        if addresses.is_empty() && !wanted.iter().any(|e| &e.dns_name == target) {
            tiers.insert(target.clone(), priority);
        }
        for address in addresses {
            tiers.insert(address.clone(), priority);
        }
    }
    tiers
}

/// Gauges of the fleet's DNS as the views see it, in Prometheus' text format: leaves by
/// verdict and publication, records by readiness, held plans, other owners, silent and
/// draining clusters. Computed when scraped, from the same views the live page draws.
pub fn render_gauges(views: &[HostView]) -> String {
    use std::fmt::Write as _;
    let mut leaves: BTreeMap<(&str, bool), u64> = BTreeMap::new();
    for verdict in ["healthy", "unhealthy", "awaiting", "unchecked"] {
        for published in [true, false] {
            leaves.insert((verdict, published), 0);
        }
    }
    let mut clusters: BTreeMap<&str, (bool, bool)> = BTreeMap::new();
    for view in views {
        for leaf in &view.leaves {
            *leaves.entry((leaf.verdict, leaf.published)).or_default() += 1;
        }
        for cluster in &view.clusters {
            let seen = clusters.entry(cluster.name.as_str()).or_default();
            seen.0 |= cluster.silent;
            seen.1 |= cluster.draining.is_some();
        }
    }
    let count = |test: &dyn Fn(&HostView) -> bool| views.iter().filter(|v| test(v)).count();
    let mut out = String::new();
    out.push_str("# HELP meridian_leaves Leaf addresses of the hosts' trees, by health verdict and whether they are published.
");
    out.push_str(
        "# TYPE meridian_leaves gauge
",
    );
    for ((verdict, published), n) in &leaves {
        let _ = writeln!(
            out,
            "meridian_leaves{{verdict=\"{verdict}\",published=\"{published}\"}} {n}"
        );
    }
    out.push_str(
        "# HELP meridian_records DNSRecords by whether they are Ready.
",
    );
    out.push_str(
        "# TYPE meridian_records gauge
",
    );
    let ready = count(&|v| v.ready == Some(true));
    let _ = writeln!(out, "meridian_records{{ready=\"true\"}} {ready}");
    let _ = writeln!(
        out,
        "meridian_records{{ready=\"false\"}} {}",
        views.len() - ready
    );
    out.push_str("# HELP meridian_plans_held DNSRecords whose plan is held over their zone's threshold, awaiting approval.
");
    out.push_str(
        "# TYPE meridian_plans_held gauge
",
    );
    let _ = writeln!(
        out,
        "meridian_plans_held {}",
        count(&|v| v.held_plan.is_some())
    );
    out.push_str(
        "# HELP meridian_records_conflicted DNSRecords whose names other owners publish into.
",
    );
    out.push_str(
        "# TYPE meridian_records_conflicted gauge
",
    );
    let _ = writeln!(
        out,
        "meridian_records_conflicted {}",
        count(&|v| !v.other_owners.is_empty())
    );
    out.push_str("# HELP meridian_clusters_silent Clusters serving a host whose agent is unheard for longer than the heartbeat timeout.
");
    out.push_str(
        "# TYPE meridian_clusters_silent gauge
",
    );
    let _ = writeln!(
        out,
        "meridian_clusters_silent {}",
        clusters.values().filter(|(silent, _)| *silent).count()
    );
    out.push_str(
        "# HELP meridian_clusters_draining Clusters being drained.
",
    );
    out.push_str(
        "# TYPE meridian_clusters_draining gauge
",
    );
    let _ = writeln!(
        out,
        "meridian_clusters_draining {}",
        clusters.values().filter(|(_, draining)| *draining).count()
    );
    out
}

impl HostView {
    /// The view for a person: the record's state, the leaves with their votes, the clusters.
    pub fn render_text(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let _ = writeln!(out, "record {} (zone {})", self.record, self.zone);
        let ready = match self.ready {
            Some(true) => "ready",
            Some(false) => "not ready",
            None => "not reconciled yet",
        };
        let _ = writeln!(
            out,
            "  {ready}: {} {}",
            self.ready_reason, self.ready_message
        );
        if let Some(health) = &self.health_message {
            let _ = writeln!(out, "  health: {health}");
        }
        if let Some(held) = &self.held_plan {
            let _ = writeln!(out, "  PLAN HELD: {held}");
        }
        if !self.other_owners.is_empty() {
            let _ = writeln!(
                out,
                "  CONFLICT: other owners publish into these names: {}",
                self.other_owners.join(", ")
            );
        }
        out.push_str("  leaves:\n");
        for leaf in &self.leaves {
            let _ = writeln!(
                out,
                "    {} ({}): {}, {}",
                leaf.address,
                leaf.cluster.as_deref().unwrap_or("cluster unknown"),
                leaf.verdict,
                if leaf.published {
                    "published"
                } else {
                    "NOT published"
                }
            );
            for vote in &leaf.votes {
                let mut line = format!(
                    "      probed from {}: {}",
                    vote.cluster,
                    if vote.healthy { "passing" } else { "FAILING" }
                );
                if !vote.healthy {
                    let _ = write!(line, ", {} failures in a row", vote.consecutive_failures);
                    if let Some(since) = vote.failing_since {
                        let _ = write!(line, " since {since}");
                    }
                }
                if let Some(reason) = vote.reason.as_deref().filter(|r| !r.is_empty()) {
                    let _ = write!(line, " ({reason})");
                }
                let _ = writeln!(out, "{line}");
            }
        }
        if !self.clusters.is_empty() {
            out.push_str("  clusters:\n");
        }
        for cluster in &self.clusters {
            let mut line = format!("    {}", cluster.name);
            if let Some(seconds) = cluster.last_heard_seconds {
                let _ = write!(line, ": heard {seconds}s ago");
            }
            if cluster.silent {
                line.push_str(", SILENT");
            }
            if let Some((percent, phase)) = &cluster.draining {
                let _ = write!(line, ", draining ({phase}, keeps {percent}% of its weight)");
            }
            let _ = writeln!(out, "{line}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> Arc<K> {
        Arc::new(serde_json::from_value(value).expect("a valid object"))
    }

    /// A simple record over two gateways, the second failing from two of three clusters and
    /// left out; spoke-2 silent (its Lease and report old) and being drained.
    fn fleet(now: &str) -> FleetSnapshot {
        let a = |address: &str| serde_json::json!({ "dnsName": "api.example.com", "recordType": "A", "targets": [address], "recordTTL": 60 });
        let probe = |address: &str, healthy: bool, votes: serde_json::Value| {
            object(serde_json::json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSHealthCheckProbe",
                "metadata": { "name": format!("api-{address}"), "namespace": "gateways", "labels": { PROBE_RECORD_LABEL: "api" } },
                "spec": { "port": 80, "host": "api.example.com", "address": address, "path": "/healthz", "protocol": "HTTP", "interval": "5s" },
                "status": { "healthy": healthy, "consecutiveFailures": 0, "clusters": votes },
            }))
        };
        let vote = |cluster: &str, healthy: bool, failures: i32| {
            serde_json::json!({
                "cluster": cluster, "healthy": healthy, "consecutiveFailures": failures,
                "lastCheckedAt": "2026-11-26T10:00:30Z",
            })
        };
        let report = |cluster: &str, address: &str, at: &str| {
            object(serde_json::json!({
                "apiVersion": "meridian.dev/v1alpha1", "kind": "ClusterReport",
                "metadata": { "name": meridian_api::names::CLUSTER_REPORT, "namespace": cluster },
                "spec": { "clusterID": cluster, "reportedAt": at, "gateways": [{ "name": "prod-web", "namespace": "gateways", "addresses": [{ "value": address }] }] },
            }))
        };
        FleetSnapshot {
            records: vec![object(serde_json::json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
                "metadata": { "name": "api", "namespace": "gateways" },
                "spec": { "rootHost": "api.example.com", "managedZone": { "name": "example" }, "endpoints": [a("192.0.2.1"), a("192.0.2.2")] },
                "status": { "endpoints": [a("192.0.2.1")], "domainOwners": ["someone-else"] },
            }))],
            probes: vec![
                probe(
                    "192.0.2.1",
                    true,
                    serde_json::json!([vote("spoke-1", true, 0), vote("spoke-2", true, 0)]),
                ),
                probe(
                    "192.0.2.2",
                    false,
                    serde_json::json!([
                        vote("spoke-1", false, 3),
                        vote("spoke-2", false, 1),
                        vote("spoke-3", true, 0)
                    ]),
                ),
            ],
            policies: vec![object(serde_json::json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
                "metadata": { "name": "prod-web", "namespace": "gateways" },
                "spec": { "targetRef": { "name": "prod-web" } },
                "status": { "draining": [{ "cluster": "spoke-2", "weightPercent": 50, "phase": "Draining" }] },
            }))],
            reports: vec![
                report("spoke-1", "192.0.2.1", "2026-11-26T09:00:00Z"),
                report("spoke-2", "192.0.2.2", "2026-11-26T09:00:00Z"),
            ],
            heartbeats: vec![object(serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": { "name": meridian_api::names::HEARTBEAT_LEASE, "namespace": "spoke-1" },
                "spec": { "renewTime": "2026-11-26T10:00:28.000000Z" },
            }))],
            zones: vec![object(serde_json::json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
                "metadata": { "name": "example", "namespace": "gateways" },
                "spec": { "domainName": "example.com", "description": "example" },
            }))],
            now: Some(now.parse().unwrap()),
            heartbeat_timeout: Duration::from_secs(120),
        }
    }

    #[test]
    fn a_view_names_each_leafs_cluster_verdict_and_votes_and_the_clusters_state() {
        let snapshot = fleet("2026-11-26T10:00:30Z");
        let views = host_views(&snapshot, Some("api.example.com."));
        let [view] = views.as_slice() else {
            panic!("one record: {views:?}")
        };
        assert_eq!(
            (view.record.as_str(), view.zone.as_str()),
            ("gateways/api", "example.com")
        );
        assert_eq!(view.other_owners, ["someone-else"]);
        let summary: Vec<(&str, Option<&str>, &str, bool)> = view
            .leaves
            .iter()
            .map(|l| {
                (
                    l.address.as_str(),
                    l.cluster.as_deref(),
                    l.verdict,
                    l.published,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("192.0.2.1", Some("spoke-1"), "healthy", true),
                ("192.0.2.2", Some("spoke-2"), "unhealthy", false),
            ]
        );
        let failing: Vec<(&str, Option<String>)> = view.leaves[1]
            .votes
            .iter()
            .filter(|v| !v.healthy)
            .map(|v| (v.cluster.as_str(), v.failing_since.map(|t| t.to_string())))
            .collect();
        assert_eq!(
            failing,
            [
                ("spoke-1", Some("2026-11-26T10:00:20Z".to_string())),
                ("spoke-2", Some("2026-11-26T10:00:30Z".to_string())),
            ]
        );
        // spoke-1 renews its Lease; spoke-2 was last heard an hour ago and is draining.
        let clusters: Vec<(&str, Option<i64>, bool, Option<u32>)> = view
            .clusters
            .iter()
            .map(|c| {
                (
                    c.name.as_str(),
                    c.last_heard_seconds,
                    c.silent,
                    c.draining.as_ref().map(|d| d.0),
                )
            })
            .collect();
        assert_eq!(
            clusters,
            [
                ("spoke-1", Some(2), false, None),
                ("spoke-2", Some(3630), true, Some(50))
            ]
        );
        assert!(host_views(&snapshot, Some("www.example.com")).is_empty());
        let zone = snapshot
            .published_zone("api.example.com")
            .expect("example.com holds it");
        assert_eq!(zone.apex(), "example.com");
        assert_eq!(
            zone.record_count(),
            1,
            "what is published, not what is wanted"
        );
        let gauges = render_gauges(&views);
        for line in [
            "meridian_leaves{verdict=\"unhealthy\",published=\"false\"} 1",
            "meridian_leaves{verdict=\"healthy\",published=\"true\"} 1",
            "meridian_records{ready=\"false\"} 1",
            "meridian_records_conflicted 1",
            "meridian_clusters_silent 1",
            "meridian_clusters_draining 1",
        ] {
            assert!(gauges.contains(line), "{line} missing from\n{gauges}");
        }
    }

    #[test]
    fn each_leaf_has_the_tier_of_the_weighted_record_leading_to_it() {
        use meridian_dns::model::{PRIORITY, RecordType, WEIGHT};
        let weighted = |target: &str, priority: &str| {
            Endpoint::new("ie.klb.h", RecordType::Cname, [target.to_string()], 60)
                .with_set_identifier(target)
                .with_property(WEIGHT, "10")
                .with_property(PRIORITY, priority)
        };
        let wanted = vec![
            weighted("a.klb.h", "1"),
            weighted("lb.elb.example.net", "2"),
            Endpoint::new("ie.klb.h", RecordType::Cname, ["c.klb.h".to_string()], 60),
            Endpoint::new("a.klb.h", RecordType::A, ["192.0.2.1".to_string()], 60),
            Endpoint::new("c.klb.h", RecordType::A, ["192.0.2.3".to_string()], 60),
        ];
        assert_eq!(
            leaf_tiers(&wanted),
            BTreeMap::from([
                ("192.0.2.1".to_string(), 1),
                ("lb.elb.example.net".to_string(), 2),
            ])
        );
    }

    #[test]
    fn a_run_of_failures_began_one_interval_before_each_failure_after_the_first() {
        let last: Timestamp = "2026-11-26T10:00:30Z".parse().unwrap();
        let interval = Duration::from_secs(5);
        // (consecutive failures, failing since)
        let table: [(i32, Option<&str>); 3] = [
            (0, None),
            (1, Some("2026-11-26T10:00:30Z")),
            (3, Some("2026-11-26T10:00:20Z")),
        ];
        for (failures, expected) in table {
            assert_eq!(
                meridian_controllers::decide::health::failing_since(Some(last), failures, interval),
                expected.map(|t| t.parse().unwrap()),
                "{failures}"
            );
        }
        assert_eq!(
            meridian_controllers::decide::health::failing_since(None, 3, interval),
            None
        );
    }
}
