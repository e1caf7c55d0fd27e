//! Multi-vantage health: every cluster's agent probes every leaf, and the hub decides. A leaf
//! is unhealthy when at least `threshold_percent` of the clusters that have judged it see it
//! unhealthy, so a failure seen from one vantage point does not take a leaf out of DNS. A leaf
//! no cluster has judged yet has no verdict (it is not published until a probe passes).
//!
//! Everything here is pure: which probes a DNSRecord needs, a probe's status from the
//! clusters' reports, and what a record publishes given its leaves' verdicts. The DNSRecord
//! controller does the reading and writing around it.

use std::collections::{BTreeMap, BTreeSet};

use meridian_api::kuadrant::{
    ClusterProbeResult, DNSHealthCheckProbeSpec, DNSHealthCheckProbeStatus, HealthCheck,
};
use meridian_api::meridian::ProbeReport;
use meridian_dns::model::Endpoint;
use meridian_dns::shortcode::shortcode;
use meridian_dns::tree::{Health, Pruned, RecordTree};

/// One cluster's view of a leaf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterView {
    pub cluster: String,
    /// `None` until the cluster's probe has judged the leaf.
    pub healthy: Option<bool>,
}

/// The hub's verdict on a leaf, and the counts behind it (for probe status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// `None` when no cluster has judged the leaf yet.
    pub healthy: Option<bool>,
    pub unhealthy_views: usize,
    pub judging: usize,
}

/// The default `MultiClusterFailureThreshold`.
pub const DEFAULT_THRESHOLD_PERCENT: u32 = 66;

pub fn aggregate(views: &[ClusterView], threshold_percent: u32) -> Verdict {
    let judging = views.iter().filter(|v| v.healthy.is_some()).count();
    let unhealthy_views = views.iter().filter(|v| v.healthy == Some(false)).count();
    let healthy = (judging > 0).then(|| {
        // unhealthy / judging < threshold, in integers.
        (unhealthy_views as u64) * 100 < u64::from(threshold_percent) * judging as u64
    });
    Verdict {
        healthy,
        unhealthy_views,
        judging,
    }
}

/// Label on a DNSHealthCheckProbe naming the DNSRecord (same namespace) it checks a leaf of.
pub const PROBE_RECORD_LABEL: &str = "meridian.dev/dns-record";

/// A probe a DNSRecord needs: one per leaf address.
#[derive(Debug, Clone, PartialEq)]
pub struct WantedProbe {
    pub name: String,
    pub spec: DNSHealthCheckProbeSpec,
}

/// The probes of a record's leaves: one per leaf, asking for the record's host. A wildcard
/// host names no one host to ask for, so each leaf of a wildcard is probed through the
/// concrete hostnames `route_hosts` gives for it ([`wildcard_probe_hosts`]), one probe per
/// host; a leaf with none gets no probe.
pub fn wanted_probes(
    record: &str,
    root_host: &str,
    leaves: &[String],
    check: &HealthCheck,
    route_hosts: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<WantedProbe> {
    // Object names stop at 253 characters; the leaf's code takes 9 of them.
    let prefix: String = record.chars().take(240).collect();
    let prefix = prefix.trim_end_matches(['-', '.']);
    let probe = |name: String, host: &str, address: &String| WantedProbe {
        name,
        spec: DNSHealthCheckProbeSpec {
            port: check.port,
            host: host.to_string(),
            address: address.clone(),
            path: check.endpoint.clone(),
            protocol: check.protocol,
            interval: check.interval.clone(),
            additional_headers_ref: check.additional_headers_ref.clone(),
            expected_responses: check.expected_responses.clone(),
            allow_insecure_certificate: check.allow_insecure_certificates,
            failure_threshold: check.failure_threshold,
        },
    };
    if !root_host.starts_with("*.") {
        return leaves
            .iter()
            .map(|address| {
                probe(
                    format!("{prefix}-{}", shortcode(address, 8)),
                    root_host,
                    address,
                )
            })
            .collect();
    }
    leaves
        .iter()
        .flat_map(|address| {
            route_hosts
                .get(&address.to_ascii_lowercase())
                .into_iter()
                .flatten()
                .map(move |host| (address, host))
        })
        .map(|(address, host)| {
            let code = shortcode(&format!("{address} {host}"), 8);
            probe(format!("{prefix}-{code}"), host, address)
        })
        .collect()
}

/// The concrete hosts each address of wildcard host `root_host` is probed through: the route
/// hostnames the clusters report for the listeners with that hostname on the downstream
/// Gateways of hub namespace `namespace`, at most
/// [`MAX_ROUTE_HOSTNAMES`](meridian_api::meridian::MAX_ROUTE_HOSTNAMES) per address. `reports`
/// are those of the clusters that speak for the record (its voters); the caller filters. Each
/// host is checked again here (an agent may lie): one the wildcard does not cover is never
/// probed, so a report cannot aim the fleet's `Host` or SNI outside the tenant's wildcard.
/// Where several clusters report one address, the sample takes each cluster's hosts in turn,
/// so a lying cluster claiming another's address cannot push out the hosts its owner reports
/// (and one healthy host keeps a leaf). Empty for a host that is not a wildcard.
pub fn wildcard_probe_hosts(
    reports: &[std::sync::Arc<meridian_api::meridian::ClusterReport>],
    namespace: &str,
    root_host: &str,
) -> BTreeMap<String, BTreeSet<String>> {
    use meridian_api::meridian::{MAX_ROUTE_HOSTNAMES, covered_by_wildcard};
    if !root_host.starts_with("*.") {
        return BTreeMap::new();
    }
    let downstream = crate::decide::desired::downstream_namespace(namespace);
    // Address → cluster → that cluster's hosts for it, sorted.
    let mut reported: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for report in reports {
        let cluster = report.metadata.namespace.clone().unwrap_or_default();
        for gateway in report
            .spec
            .gateways
            .iter()
            .filter(|gateway| gateway.namespace == downstream)
        {
            let hosts: BTreeSet<String> = gateway
                .listeners
                .iter()
                .filter(|l| {
                    l.hostname
                        .as_deref()
                        .is_some_and(|h| h.eq_ignore_ascii_case(root_host))
                })
                .flat_map(|l| &l.route_hostnames)
                .filter(|host| covered_by_wildcard(root_host, host))
                .take(MAX_ROUTE_HOSTNAMES)
                .map(|host| host.to_ascii_lowercase())
                .collect();
            if hosts.is_empty() {
                continue;
            }
            for address in &gateway.addresses {
                reported
                    .entry(address.value.to_ascii_lowercase())
                    .or_default()
                    .entry(cluster.clone())
                    .or_default()
                    .extend(hosts.iter().cloned());
            }
        }
    }
    reported
        .into_iter()
        .map(|(address, by_cluster)| {
            let lists: Vec<Vec<&String>> =
                by_cluster.values().map(|h| h.iter().collect()).collect();
            let mut chosen = BTreeSet::new();
            let longest = lists.iter().map(Vec::len).max().unwrap_or(0);
            'turns: for turn in 0..longest {
                for list in &lists {
                    if chosen.len() == MAX_ROUTE_HOSTNAMES {
                        break 'turns;
                    }
                    if let Some(host) = list.get(turn) {
                        chosen.insert((*host).clone());
                    }
                }
            }
            (address, chosen)
        })
        .collect()
}

/// A leaf's verdict from the verdicts of its probes (one per probed host: one for a concrete
/// host, up to three route hostnames for a wildcard's). The rule: healthy when any host is
/// healthy (the gateway serves, and one team's broken app must not take a shared wildcard
/// out of DNS for the others); unhealthy only when every host is judged unhealthy (each by
/// the fleet's quorum, [`aggregate`]); no verdict otherwise.
pub fn leaf_verdicts<'a>(
    probes: impl IntoIterator<Item = (&'a str, Option<bool>)>,
) -> BTreeMap<String, Option<bool>> {
    let mut by_leaf: BTreeMap<String, Vec<Option<bool>>> = BTreeMap::new();
    for (address, verdict) in probes {
        by_leaf
            .entry(address.to_string())
            .or_default()
            .push(verdict);
    }
    by_leaf
        .into_iter()
        .map(|(address, verdicts)| {
            let verdict = if verdicts.contains(&Some(true)) {
                Some(true)
            } else if verdicts.iter().all(|v| *v == Some(false)) {
                Some(false)
            } else {
                None
            };
            (address, verdict)
        })
        .collect()
}

/// The addresses the clusters report for the downstream Gateways of hub namespace `namespace`:
/// on the hub, the only leaves of that namespace's records a probe is derived for. A record a
/// tenant writes by hand can name any address; only a gateway of its own namespace, on a
/// cluster with an agent, is probed by the fleet.
pub fn reported_gateway_addresses(
    reports: &[std::sync::Arc<meridian_api::meridian::ClusterReport>],
    namespace: &str,
) -> std::collections::BTreeSet<String> {
    let downstream = crate::decide::desired::downstream_namespace(namespace);
    reports
        .iter()
        .flat_map(|report| report.spec.gateways.iter())
        .filter(|gateway| gateway.namespace == downstream)
        .flat_map(|gateway| gateway.addresses.iter())
        .map(|address| address.value.to_ascii_lowercase())
        .collect()
}

/// A probe's status from the live clusters' results (`(cluster, result)`; a cluster that has
/// not judged the probe yet is absent). Sorted by cluster, so an unchanged fleet writes an
/// unchanged status.
pub fn probe_status(
    results: &[(String, &ProbeReport)],
    threshold_percent: u32,
) -> DNSHealthCheckProbeStatus {
    let mut clusters: Vec<ClusterProbeResult> = results
        .iter()
        .map(|(cluster, result)| ClusterProbeResult {
            cluster: cluster.clone(),
            healthy: result.healthy,
            consecutive_failures: result.consecutive_failures,
            reason: result.reason.clone(),
            last_checked_at: result.last_checked_at.clone(),
        })
        .collect();
    clusters.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    let views: Vec<ClusterView> = clusters
        .iter()
        .map(|c| ClusterView {
            cluster: c.cluster.clone(),
            healthy: Some(c.healthy),
        })
        .collect();
    let verdict = aggregate(&views, threshold_percent);
    let failing: Vec<&ClusterProbeResult> = clusters.iter().filter(|c| !c.healthy).collect();
    let reason = failing.first().map(|first| {
        let judgement = if verdict.healthy == Some(false) {
            "unhealthy"
        } else {
            "still healthy: below the failure threshold"
        };
        format!(
            "{} of {} clusters see it failing ({judgement}); {}: {}",
            verdict.unhealthy_views,
            verdict.judging,
            first.cluster,
            first.reason.as_deref().unwrap_or("failing")
        )
    });
    DNSHealthCheckProbeStatus {
        healthy: verdict.healthy,
        consecutive_failures: failing
            .iter()
            .map(|c| c.consecutive_failures)
            .max()
            .filter(|_| verdict.healthy == Some(false))
            .unwrap_or(0),
        reason,
        last_checked_at: clusters
            .iter()
            .filter_map(|c| c.last_checked_at.clone())
            .max_by_key(|t| t.0),
        observed_generation: None,
        conditions: Vec::new(),
        clusters,
    }
}

/// Whether two statuses say the same thing, timestamps aside: only a change of verdicts,
/// counts or reasons is worth a write (thousands of probes re-checked every few seconds must
/// not each cost a write).
pub fn same_findings(a: &DNSHealthCheckProbeStatus, b: &DNSHealthCheckProbeStatus) -> bool {
    fn without_times(status: &DNSHealthCheckProbeStatus) -> DNSHealthCheckProbeStatus {
        let mut status = status.clone();
        status.last_checked_at = None;
        for cluster in &mut status.clusters {
            cluster.last_checked_at = None;
        }
        status
    }
    without_times(a) == without_times(b)
}

/// What a health-checked record publishes, and what its `Healthy` condition says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthOutcome {
    pub endpoints: Vec<Endpoint>,
    pub healthy: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Reasons of the DNSRecord's `Healthy` condition.
pub mod reasons {
    pub const HEALTHY: &str = "HealthChecksPassed";
    pub const UNHEALTHY: &str = "UnhealthyEndpoints";
    pub const NONE_HEALTHY: &str = "NoHealthyEndpoints";
    pub const AWAITING: &str = "AwaitingProbes";
}

/// Prunes a record by its leaves' verdicts (`None`: no cluster has judged it yet). A leaf
/// without a verdict stays if it is published already (an agent restarting must not flap
/// DNS) and waits otherwise: a leaf that was never healthy is not published until a probe
/// passes. When no leaf is healthy, nothing published is removed: the whole record is
/// published, as when every leaf is healthy (seed 004: a total outage is more likely the
/// probes' than every gateway's, and a configured host must not answer NXDOMAIN). A record
/// that was never published stays unpublished until a probe passes.
pub fn apply_health(
    root_host: &str,
    requested: &[Endpoint],
    verdicts: &BTreeMap<String, Option<bool>>,
    published: Option<&[Endpoint]>,
) -> HealthOutcome {
    let tree = RecordTree::from_records(root_host, requested.to_vec());
    let published_leaves = published
        .map(|p| RecordTree::from_records(root_host, p.to_vec()).leaf_addresses())
        .unwrap_or_default();
    let mut health = BTreeMap::new();
    let (mut unhealthy, mut awaiting) = (Vec::new(), Vec::new());
    for leaf in tree.leaf_addresses() {
        let state = match verdicts.get(&leaf).copied().flatten() {
            Some(true) => Health::Healthy,
            Some(false) => {
                unhealthy.push(leaf.clone());
                Health::Unhealthy
            }
            None if published_leaves.contains(&leaf) => Health::Unknown,
            None => {
                awaiting.push(leaf.clone());
                Health::Unhealthy
            }
        };
        health.insert(leaf, state);
    }
    match tree.prune(&health) {
        Pruned::Endpoints(endpoints) => {
            let (healthy, reason, mut message) = if !unhealthy.is_empty() {
                (
                    false,
                    reasons::UNHEALTHY,
                    format!("unhealthy, left out of DNS: {}", unhealthy.join(", ")),
                )
            } else {
                (
                    true,
                    reasons::HEALTHY,
                    "every probed endpoint is healthy".to_string(),
                )
            };
            if !awaiting.is_empty() {
                message.push_str(&format!(
                    "; not published until a probe passes: {}",
                    awaiting.join(", ")
                ));
            }
            HealthOutcome {
                endpoints,
                healthy,
                reason,
                message,
            }
        }
        Pruned::NoHealthyLeaf => {
            let was_published = published.is_some_and(|p| !p.is_empty());
            let kept = if was_published {
                requested.to_vec()
            } else {
                Vec::new()
            };
            let (reason, message) = if unhealthy.is_empty() {
                (
                    reasons::AWAITING,
                    format!(
                        "not published until a probe passes: {}",
                        awaiting.join(", ")
                    ),
                )
            } else {
                let mut message = format!(
                    "no endpoint is healthy (unhealthy: {}); ",
                    unhealthy.join(", ")
                );
                message.push_str(if kept.is_empty() {
                    "nothing was published before, so nothing is"
                } else {
                    "publishing every endpoint rather than none"
                });
                if !awaiting.is_empty() {
                    message.push_str(&format!("; awaiting probes: {}", awaiting.join(", ")));
                }
                (reasons::NONE_HEALTHY, message)
            };
            HealthOutcome {
                endpoints: kept,
                healthy: false,
                reason,
                message,
            }
        }
    }
}

/// The type a Secret must have for a health check to send its keys and values as headers. Any
/// Secret of the namespace would do otherwise, and naming the zone's `kuadrant.io/aws` Secret
/// made every spoke send the account's keys to the tenant's gateway.
pub const PROBE_HEADERS_SECRET_TYPE: &str = "meridian.dev/probe-headers";
/// The most headers one Secret may give a probe.
pub const MAX_PROBE_HEADERS: usize = 16;
/// The most bytes of names and values one Secret may give a probe: every tenant's headers
/// travel to every cluster that probes them, and one large Secret must not stop the others.
pub const MAX_PROBE_HEADER_BYTES: usize = 8 * 1024;

/// A header Secret's keys and values, as request headers; or why the Secret gives none (its
/// type, too many or too large headers, a name that is not an HTTP token or a value with a
/// control character). The message names keys, never values.
pub fn secret_headers(
    secret: &k8s_openapi::api::core::v1::Secret,
) -> Result<BTreeMap<String, String>, String> {
    let name = secret.metadata.name.as_deref().unwrap_or_default();
    let type_ = secret.type_.as_deref().unwrap_or("Opaque");
    if type_ != PROBE_HEADERS_SECRET_TYPE {
        return Err(format!(
            "Secret {name} has type {type_}: probe headers come only from Secrets of type {PROBE_HEADERS_SECRET_TYPE}"
        ));
    }
    let headers: BTreeMap<String, String> = secret
        .data
        .iter()
        .flatten()
        .map(|(key, value)| (key.clone(), String::from_utf8_lossy(&value.0).into_owned()))
        .chain(
            secret
                .string_data
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), v.clone())),
        )
        .collect();
    if headers.len() > MAX_PROBE_HEADERS {
        return Err(format!(
            "Secret {name} has {} keys: at most {MAX_PROBE_HEADERS} headers",
            headers.len()
        ));
    }
    let bytes: usize = headers.iter().map(|(k, v)| k.len() + v.len()).sum();
    if bytes > MAX_PROBE_HEADER_BYTES {
        return Err(format!(
            "Secret {name} holds {bytes} bytes of headers: at most {MAX_PROBE_HEADER_BYTES}"
        ));
    }
    let is_token = |key: &str| {
        !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    if let Some((key, _)) = headers.iter().find(|(key, value)| {
        !is_token(key) || value.bytes().any(|b| b.is_ascii_control() && b != b'\t')
    }) {
        return Err(format!(
            "Secret {name}: key {key:?} is not an HTTP header name, or its value holds a control character"
        ));
    }
    Ok(headers)
}

/// When a leaf's current run of failed probes began: `consecutive_failures` probes, `interval`
/// apart, the last at `last_checked`.
pub fn failing_since(
    last_checked: Option<k8s_openapi::jiff::Timestamp>,
    consecutive_failures: i32,
    interval: std::time::Duration,
) -> Option<k8s_openapi::jiff::Timestamp> {
    let last = last_checked?;
    if consecutive_failures < 1 {
        return None;
    }
    let earlier = interval * (consecutive_failures as u32 - 1);
    last.checked_sub(k8s_openapi::jiff::SignedDuration::try_from(earlier).ok()?)
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::model::RecordType;

    #[test]
    fn only_the_gateways_clusters_report_for_the_namespace_are_probed() {
        let report = |cluster: &str, gateways: serde_json::Value| {
            std::sync::Arc::new(
                serde_json::from_value::<meridian_api::meridian::ClusterReport>(
                    serde_json::json!({
                        "apiVersion": "meridian.dev/v1alpha1", "kind": "ClusterReport",
                        "metadata": { "name": "agent", "namespace": cluster },
                        "spec": { "clusterID": cluster, "gateways": gateways },
                    }),
                )
                .expect("a report"),
            )
        };
        let gateway = |namespace: &str, addresses: &[&str]| {
            serde_json::json!({
                "name": "web", "namespace": namespace,
                "addresses": addresses.iter().map(|a| serde_json::json!({ "value": a })).collect::<Vec<_>>(),
            })
        };
        let reports = [
            report(
                "spoke-1",
                serde_json::json!([
                    gateway("kuadrant-shop", &["10.0.0.1", "LB.Example.NET"]),
                    gateway("kuadrant-mallory", &["10.0.0.66"]),
                ]),
            ),
            report(
                "spoke-2",
                serde_json::json!([gateway("kuadrant-shop", &["10.0.0.2"])]),
            ),
        ];
        let shop: Vec<String> = reported_gateway_addresses(&reports, "shop")
            .into_iter()
            .collect();
        assert_eq!(shop, ["10.0.0.1", "10.0.0.2", "lb.example.net"]);
        let mallory: Vec<String> = reported_gateway_addresses(&reports, "mallory")
            .into_iter()
            .collect();
        assert_eq!(
            mallory,
            ["10.0.0.66"],
            "another team's gateways are not its own"
        );
        assert!(reported_gateway_addresses(&reports, "nobody").is_empty());
    }

    #[test]
    fn only_a_probe_headers_secret_of_sane_size_and_names_gives_headers() {
        use k8s_openapi::ByteString;
        use k8s_openapi::api::core::v1::Secret;
        let secret = |type_: Option<&str>, data: Vec<(String, String)>| Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("s".into()),
                ..Default::default()
            },
            type_: type_.map(Into::into),
            data: Some(
                data.into_iter()
                    .map(|(k, v)| (k, ByteString(v.into_bytes())))
                    .collect(),
            ),
            ..Default::default()
        };
        let one = |k: &str, v: &str| vec![(k.to_string(), v.to_string())];
        let ok = Some(PROBE_HEADERS_SECRET_TYPE);
        let many: Vec<(String, String)> = (0..17).map(|i| (format!("X-{i}"), "v".into())).collect();
        let cases = [
            (secret(ok, one("X-Probe-Token", "s3cret")), Ok(())),
            (secret(ok, Vec::new()), Ok(())),
            (
                secret(Some("kuadrant.io/aws"), one("AWS_SECRET_ACCESS_KEY", "k")),
                Err(
                    "Secret s has type kuadrant.io/aws: probe headers come only from Secrets of type meridian.dev/probe-headers",
                ),
            ),
            (
                secret(None, one("X-A", "v")),
                Err(
                    "Secret s has type Opaque: probe headers come only from Secrets of type meridian.dev/probe-headers",
                ),
            ),
            (
                secret(ok, many),
                Err("Secret s has 17 keys: at most 16 headers"),
            ),
            (
                secret(ok, one("X-Big", &"v".repeat(9000))),
                Err("Secret s holds 9005 bytes of headers: at most 8192"),
            ),
            (
                secret(ok, one("X-A", "v\r\nX-Injected: 1")),
                Err(
                    "Secret s: key \"X-A\" is not an HTTP header name, or its value holds a control character",
                ),
            ),
            (
                secret(ok, one("X A", "v")),
                Err(
                    "Secret s: key \"X A\" is not an HTTP header name, or its value holds a control character",
                ),
            ),
        ];
        for (secret, expected) in cases {
            let got = secret_headers(&secret).map(|_| ());
            assert_eq!(got, expected.map_err(str::to_string), "{secret:?}");
        }
        // Values are never in a message.
        let refused = secret(Some("Opaque"), one("X-A", "hunter2"));
        assert!(!secret_headers(&refused).unwrap_err().contains("hunter2"));
    }

    const HOST: &str = "api.example.com";
    const LB: &str = "klb.api.example.com";

    fn check() -> HealthCheck {
        serde_json::from_value(serde_json::json!({ "port": 8443, "endpoint": "/healthz" }))
            .expect("a health check")
    }

    fn result(healthy: bool, failures: i32, reason: Option<&str>, at: i64) -> ProbeReport {
        ProbeReport {
            namespace: "gateways".into(),
            name: "probe".into(),
            healthy,
            consecutive_failures: failures,
            reason: reason.map(str::to_string),
            last_checked_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(at).expect("a time"),
            )),
        }
    }

    /// A loadbalanced record: root → lb → two weighted A records.
    fn record() -> Vec<Endpoint> {
        let mut endpoints = vec![
            Endpoint::new(HOST, RecordType::Cname, [LB.to_string()], 300),
            Endpoint::new(
                LB,
                RecordType::Cname,
                ["a.klb.api.example.com".to_string()],
                60,
            )
            .with_set_identifier("a")
            .with_property("weight", "120"),
            Endpoint::new(
                LB,
                RecordType::Cname,
                ["b.klb.api.example.com".to_string()],
                60,
            )
            .with_set_identifier("b")
            .with_property("weight", "120"),
            Endpoint::new(
                "a.klb.api.example.com",
                RecordType::A,
                ["10.0.0.1".to_string()],
                60,
            ),
            Endpoint::new(
                "b.klb.api.example.com",
                RecordType::A,
                ["10.0.0.2".to_string()],
                60,
            ),
        ];
        meridian_dns::model::sort_endpoints(&mut endpoints);
        endpoints
    }

    fn verdicts(entries: &[(&str, Option<bool>)]) -> BTreeMap<String, Option<bool>> {
        entries.iter().map(|(a, v)| (a.to_string(), *v)).collect()
    }

    fn addresses(endpoints: &[Endpoint]) -> Vec<String> {
        let mut leaves = RecordTree::from_records(HOST, endpoints.to_vec()).leaf_addresses();
        leaves.sort();
        leaves
    }

    #[test]
    fn one_probe_per_leaf_with_the_checks_settings_and_none_for_wildcards_without_routes() {
        let leaves = vec!["10.0.0.1".to_string(), "lb.example.net".to_string()];
        let none = BTreeMap::new();
        let probes = wanted_probes("prod-web-api", HOST, &leaves, &check(), &none);
        assert_eq!(probes.len(), 2);
        assert_ne!(probes[0].name, probes[1].name);
        assert!(
            probes[0].name.starts_with("prod-web-api-"),
            "{}",
            probes[0].name
        );
        let spec = &probes[1].spec;
        assert_eq!(
            (
                spec.host.as_str(),
                spec.address.as_str(),
                spec.port,
                spec.path.as_str()
            ),
            (HOST, "lb.example.net", 8443, "/healthz")
        );
        assert_eq!(spec.expected_responses, [200, 201]);
        assert_eq!((spec.failure_threshold, spec.interval.as_str()), (3, "30s"));
        assert_eq!(
            wanted_probes("prod-web-api", HOST, &leaves, &check(), &none),
            probes,
            "names are stable"
        );
        assert_eq!(
            probes[0].name,
            format!("prod-web-api-{}", shortcode("10.0.0.1", 8)),
            "a concrete host's probes keep the names they had before wildcards were probed"
        );
        assert!(wanted_probes("w", "*.example.com", &leaves, &check(), &none).is_empty());
        let long = "r".repeat(300);
        assert!(
            wanted_probes(&long, HOST, &leaves, &check(), &none)[0]
                .name
                .len()
                <= 253
        );
    }

    #[test]
    fn a_wildcard_leaf_is_probed_once_per_route_hostname_and_a_leaf_without_any_is_not() {
        let leaves = vec!["10.0.0.1".to_string(), "10.0.0.2".to_string()];
        let hosts: BTreeMap<String, BTreeSet<String>> = [(
            "10.0.0.1".to_string(),
            ["blog.apps.example.com", "shop.apps.example.com"]
                .map(String::from)
                .into(),
        )]
        .into();
        let probes = wanted_probes("w", "*.apps.example.com", &leaves, &check(), &hosts);
        let asked: Vec<(&str, &str)> = probes
            .iter()
            .map(|p| (p.spec.address.as_str(), p.spec.host.as_str()))
            .collect();
        assert_eq!(
            asked,
            [
                ("10.0.0.1", "blog.apps.example.com"),
                ("10.0.0.1", "shop.apps.example.com")
            ]
        );
        assert_ne!(probes[0].name, probes[1].name);
        assert_eq!(
            wanted_probes("w", "*.apps.example.com", &leaves, &check(), &hosts),
            probes,
            "names are stable"
        );
        // A leaf spelt in capitals (a gateway hostname) is the same leaf.
        let upper = wanted_probes(
            "w",
            "*.apps.example.com",
            &["LB.Example.NET".to_string()],
            &check(),
            &[(
                "lb.example.net".to_string(),
                ["a.apps.example.com".to_string()].into(),
            )]
            .into(),
        );
        assert_eq!(upper.len(), 1);
        // A concrete host ignores route hostnames: it is asked for by its own name.
        let concrete = wanted_probes("w", HOST, &leaves, &check(), &hosts);
        assert!(concrete.iter().all(|p| p.spec.host == HOST));
        assert_eq!(concrete.len(), 2);
    }

    fn wildcard_report(
        cluster: &str,
        namespace: &str,
        address: &str,
        listener_host: &str,
        route_hosts: &[&str],
    ) -> std::sync::Arc<meridian_api::meridian::ClusterReport> {
        std::sync::Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "meridian.dev/v1alpha1", "kind": "ClusterReport",
                "metadata": { "name": "agent", "namespace": cluster },
                "spec": { "clusterID": cluster, "gateways": [{
                    "name": "web", "namespace": namespace,
                    "addresses": [{ "value": address }],
                    "listeners": [{ "name": "apps", "hostname": listener_host, "attachedRoutes": 2, "routeHostnames": route_hosts }],
                }] },
            }))
            .expect("a report"),
        )
    }

    #[test]
    fn a_wildcard_is_probed_only_through_hosts_it_covers_on_its_own_namespaces_gateways() {
        const WILDCARD: &str = "*.apps.example.com";
        let reports = [
            wildcard_report(
                "spoke-1",
                "kuadrant-gateways",
                "192.0.2.1",
                WILDCARD,
                &["shop.apps.example.com", "Blog.Apps.example.com"],
            ),
            // A lying agent aims the fleet at names outside the wildcard, and at more than
            // the sample.
            wildcard_report(
                "spoke-2",
                "kuadrant-gateways",
                "192.0.2.2",
                WILDCARD,
                &[
                    "metadata.google.internal",
                    "apps.example.com",
                    "a.apps.example.com\r\nX-Injected: 1",
                    "a.apps.example.com",
                    "b.apps.example.com",
                    "c.apps.example.com",
                    "d.apps.example.com",
                ],
            ),
            // Another tenant's Gateway, and another listener host, give nothing here.
            wildcard_report(
                "spoke-3",
                "kuadrant-other",
                "192.0.2.3",
                WILDCARD,
                &["x.apps.example.com"],
            ),
            wildcard_report(
                "spoke-4",
                "kuadrant-gateways",
                "192.0.2.4",
                "*.web.example.com",
                &["x.web.example.com"],
            ),
        ];
        let hosts = wildcard_probe_hosts(&reports, "gateways", WILDCARD);
        let hosts: Vec<(&str, Vec<&str>)> = hosts
            .iter()
            .map(|(a, h)| (a.as_str(), h.iter().map(String::as_str).collect()))
            .collect();
        assert_eq!(
            hosts,
            [
                (
                    "192.0.2.1",
                    vec!["blog.apps.example.com", "shop.apps.example.com"]
                ),
                (
                    "192.0.2.2",
                    vec![
                        "a.apps.example.com",
                        "b.apps.example.com",
                        "c.apps.example.com"
                    ]
                ),
            ],
            "only what the wildcard covers, and at most three"
        );
        assert!(wildcard_probe_hosts(&reports, "gateways", "api.example.com").is_empty());

        // A lying cluster claims spoke-1's address with hosts that sort first: the sample
        // takes each cluster's hosts in turn, so spoke-1's own stay in it.
        let mut with_liar = reports.to_vec();
        with_liar.push(wildcard_report(
            "spoke-5",
            "kuadrant-gateways",
            "192.0.2.1",
            WILDCARD,
            &[
                "0.apps.example.com",
                "00.apps.example.com",
                "000.apps.example.com",
            ],
        ));
        let hosts = wildcard_probe_hosts(&with_liar, "gateways", WILDCARD);
        let sample: Vec<&str> = hosts["192.0.2.1"].iter().map(String::as_str).collect();
        assert_eq!(
            sample,
            [
                "0.apps.example.com",
                "blog.apps.example.com",
                "shop.apps.example.com"
            ]
        );
    }

    #[test]
    fn a_leaf_is_unhealthy_only_when_every_host_it_is_probed_through_is() {
        let cases: &[(&[Option<bool>], Option<bool>)] = &[
            (&[Some(true)], Some(true)),
            (&[Some(false)], Some(false)),
            (&[None], None),
            (&[Some(false), Some(true)], Some(true)),
            (&[Some(false), Some(false), Some(false)], Some(false)),
            (&[Some(false), None], None),
            (&[None, Some(true)], Some(true)),
        ];
        for (probes, expected) in cases {
            let verdicts = leaf_verdicts(probes.iter().map(|v| ("192.0.2.1", *v)));
            assert_eq!(verdicts["192.0.2.1"], *expected, "{probes:?}");
        }
        let two = leaf_verdicts([
            ("192.0.2.1", Some(false)),
            ("192.0.2.2", Some(true)),
            ("192.0.2.1", Some(false)),
        ]);
        assert_eq!(
            two,
            verdicts(&[("192.0.2.1", Some(false)), ("192.0.2.2", Some(true))])
        );
    }

    #[test]
    fn probe_status_aggregates_the_clusters_and_names_who_sees_a_failure() {
        let (ok, down) = (
            result(true, 0, None, 100),
            result(false, 4, Some("connection refused"), 130),
        );
        let one_down = [
            ("spoke-2".to_string(), &down),
            ("spoke-1".to_string(), &ok),
            ("spoke-3".to_string(), &ok),
        ];
        let status = probe_status(&one_down, DEFAULT_THRESHOLD_PERCENT);
        assert_eq!(status.healthy, Some(true));
        assert_eq!(status.consecutive_failures, 0);
        let clusters: Vec<&str> = status.clusters.iter().map(|c| c.cluster.as_str()).collect();
        assert_eq!(clusters, ["spoke-1", "spoke-2", "spoke-3"]);
        assert_eq!(
            status.reason.as_deref(),
            Some(
                "1 of 3 clusters see it failing (still healthy: below the failure threshold); spoke-2: connection refused"
            )
        );
        assert_eq!(status.last_checked_at, down.last_checked_at);

        let two_down = [
            ("spoke-1".to_string(), &down),
            ("spoke-2".to_string(), &down),
            ("spoke-3".to_string(), &ok),
        ];
        let status = probe_status(&two_down, DEFAULT_THRESHOLD_PERCENT);
        assert_eq!(status.healthy, Some(false));
        assert_eq!(status.consecutive_failures, 4);
        assert!(
            status
                .reason
                .as_deref()
                .unwrap()
                .starts_with("2 of 3 clusters see it failing (unhealthy)")
        );

        let nobody = probe_status(&[], DEFAULT_THRESHOLD_PERCENT);
        assert_eq!((nobody.healthy, nobody.reason), (None, None));
    }

    #[test]
    fn only_findings_count_as_a_change() {
        let (early, late) = (result(true, 0, None, 100), result(true, 0, None, 200));
        let a = probe_status(&[("c".to_string(), &early)], 66);
        let b = probe_status(&[("c".to_string(), &late)], 66);
        assert_ne!(a, b);
        assert!(same_findings(&a, &b));
        let failing = result(false, 3, Some("timeout"), 200);
        assert!(!same_findings(
            &a,
            &probe_status(&[("c".to_string(), &failing)], 66)
        ));
    }

    #[test]
    fn unhealthy_leaves_are_pruned_and_named() {
        let outcome = apply_health(
            HOST,
            &record(),
            &verdicts(&[("10.0.0.1", Some(true)), ("10.0.0.2", Some(false))]),
            Some(&record()),
        );
        assert_eq!(addresses(&outcome.endpoints), ["10.0.0.1"]);
        assert_eq!(
            outcome.endpoints.len(),
            3,
            "the weighted record of b goes too"
        );
        assert!(!outcome.healthy);
        assert_eq!(outcome.reason, reasons::UNHEALTHY);
        assert_eq!(outcome.message, "unhealthy, left out of DNS: 10.0.0.2");

        let all_well = apply_health(
            HOST,
            &record(),
            &verdicts(&[("10.0.0.1", Some(true)), ("10.0.0.2", Some(true))]),
            None,
        );
        assert_eq!(all_well.endpoints, record());
        assert!(all_well.healthy);
    }

    #[test]
    fn nothing_healthy_removes_nothing_and_never_healthy_waits() {
        let both_down = verdicts(&[("10.0.0.1", Some(false)), ("10.0.0.2", Some(false))]);
        let previous = &record()[..4];
        let kept = apply_health(HOST, &record(), &both_down, Some(previous));
        assert_eq!(
            kept.endpoints,
            record(),
            "all unhealthy is published like all healthy"
        );
        assert_eq!(kept.reason, reasons::NONE_HEALTHY);
        assert!(
            kept.message.contains("10.0.0.1, 10.0.0.2"),
            "{}",
            kept.message
        );
        assert!(
            apply_health(HOST, &record(), &both_down, None)
                .endpoints
                .is_empty(),
            "never published, never healthy: nothing"
        );

        // A new record: no verdicts yet, nothing published before.
        let fresh = apply_health(HOST, &record(), &verdicts(&[]), None);
        assert!(fresh.endpoints.is_empty());
        assert_eq!(fresh.reason, reasons::AWAITING);
        // The first passing probe publishes that leaf only.
        let first = apply_health(
            HOST,
            &record(),
            &verdicts(&[("10.0.0.2", Some(true))]),
            None,
        );
        assert_eq!(addresses(&first.endpoints), ["10.0.0.2"]);
        assert!(
            first
                .message
                .contains("not published until a probe passes: 10.0.0.1")
        );
        // A published leaf whose verdict is gone (agents restarting) stays.
        let restarted = apply_health(HOST, &record(), &verdicts(&[]), Some(&record()));
        assert_eq!(restarted.endpoints, record());
        assert!(restarted.healthy);
    }

    fn views(states: &[Option<bool>]) -> Vec<ClusterView> {
        states
            .iter()
            .enumerate()
            .map(|(i, healthy)| ClusterView {
                cluster: format!("c{i}"),
                healthy: *healthy,
            })
            .collect()
    }

    #[test]
    fn one_vantage_point_does_not_decide_two_of_three_do() {
        let (ok, bad) = (Some(true), Some(false));
        let cases: [(&[Option<bool>], Option<bool>); 7] = [
            (&[ok, ok, ok], Some(true)),
            (&[bad, ok, ok], Some(true)),
            (&[bad, bad, ok], Some(false)),
            (&[bad, bad, bad], Some(false)),
            (&[None, None, None], None),
            (&[bad, None, None], Some(false)),
            (&[bad, ok, None], Some(true)),
        ];
        for (states, expected) in cases {
            assert_eq!(
                aggregate(&views(states), DEFAULT_THRESHOLD_PERCENT).healthy,
                expected,
                "{states:?}"
            );
        }
        let verdict = aggregate(&views(&[bad, bad, ok]), DEFAULT_THRESHOLD_PERCENT);
        assert_eq!((verdict.unhealthy_views, verdict.judging), (2, 3));
        assert_eq!(
            aggregate(&views(&[bad, ok]), 50).healthy,
            Some(false),
            "the threshold is inclusive"
        );
    }
}
