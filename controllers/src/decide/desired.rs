//! The pure middle of the DNSPolicy reconcile: from a Gateway's listeners, the clusters it is
//! placed on (labels and their agents' reports) and the namespace's ManagedZones, to the
//! DNSRecords the policy should own. No Kubernetes I/O here, so it is tested with tables.

use std::collections::BTreeMap;

use meridian_api::meridian::GatewayReport;
use meridian_dns::model::Endpoint;
use meridian_dns::tree::{
    Address, ClusterTarget, GatewayRef, RecordTree, Strategy, TreeError, build_branch,
    build_record_tree,
};

use crate::decide::silence::{Fate, Heard, Kept, SilenceRules};

/// One placed cluster as the hub sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacedCluster {
    /// The ManagedCluster's name (= its namespace on the hub).
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// The cluster ID its agent reported; `None` when no report arrived yet.
    pub cluster_id: Option<String>,
    /// The downstream Gateway as the agent reported it; `None` when not (yet) there.
    pub gateway: Option<GatewayReport>,
    /// How long the agent has been silent, when that is past the heartbeat timeout: the
    /// cluster is then gone for DNS, unless a brake of [`crate::decide::silence`] keeps it.
    pub silent_for: Option<std::time::Duration>,
    /// The share of its weight it has now, in percent: 100, or less while it drains
    /// ([`meridian_dns::drain`]).
    pub weight_percent: u32,
}

/// How long a report has gone without a heartbeat, if that exceeds `timeout`.
pub fn silence(
    reported_at: Option<k8s_openapi::jiff::Timestamp>,
    now: k8s_openapi::jiff::Timestamp,
    timeout: std::time::Duration,
) -> Option<std::time::Duration> {
    let reported_at = reported_at?;
    let silent = std::time::Duration::try_from(now.duration_since(reported_at)).unwrap_or_default();
    (silent > timeout).then_some(silent)
}

/// How long until a cluster last heard at `heard` counts as silent: `None` when it never was
/// heard from, or already is silent.
pub fn until_silent(
    heard: Option<k8s_openapi::jiff::Timestamp>,
    now: k8s_openapi::jiff::Timestamp,
    timeout: std::time::Duration,
) -> Option<std::time::Duration> {
    let since = std::time::Duration::try_from(now.duration_since(heard?)).unwrap_or_default();
    timeout.checked_sub(since).filter(|left| !left.is_zero())
}

/// A ManagedZone in the policy's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneRef {
    pub name: String,
    pub domain: String,
}

/// A listener as the policy needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenerRef {
    pub name: String,
    pub hostname: Option<String>,
}

/// A DNSRecord the policy should own.
#[derive(Debug, Clone, PartialEq)]
pub struct DesiredRecord {
    /// `<gateway>-<listener>`.
    pub name: String,
    pub listener: String,
    pub root_host: String,
    pub zone: String,
    pub endpoints: Vec<Endpoint>,
    pub warnings: Vec<String>,
    /// Whether the record carries the policy's health check: not when it holds only a CNAME
    /// into a routing delegate, whose delegated half is what is probed.
    pub health_checked: bool,
}

/// What the policy should own, and what it could not build (each names the listener).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Desired {
    pub records: Vec<DesiredRecord>,
    pub problems: Vec<String>,
    /// Clusters that add nothing yet, and why.
    pub waiting: Vec<String>,
    /// Addresses left out by the policy's `excludeAddresses`, per cluster.
    pub excluded: Vec<String>,
    /// Silent clusters still published, and which brake keeps each (fail static).
    pub kept_silent: Vec<String>,
    /// Whether the fleet brake keeps any of them.
    pub braked: bool,
    /// When the policy must look again without any change: a kept cluster's withdrawal
    /// comes due, or a brake may have let go.
    pub recheck_after: Option<std::time::Duration>,
}

/// The ManagedZone holding `host`: the one whose domain is the longest suffix of it (walking
/// up the host's parent domains). A wildcard host's zone is its base's.
pub fn zone_for<'a>(host: &str, zones: &'a [ZoneRef]) -> Option<&'a ZoneRef> {
    let host = host
        .trim_start_matches("*.")
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let mut candidate = host.as_str();
    loop {
        if let Some(zone) = zones.iter().find(|z| {
            z.domain
                .trim_end_matches('.')
                .eq_ignore_ascii_case(candidate)
        }) {
            return Some(zone);
        }
        candidate = candidate.split_once('.')?.1;
    }
}

/// What the policy says of a cluster whose Gateway reports no address.
pub fn no_addresses_yet(cluster: &str) -> String {
    format!("{cluster}: the Gateway has no addresses yet")
}

/// The name of the record holding the part of `record`'s tree moved into its zone's routing
/// delegate (`meridian_dns::delegation`).
pub fn delegated_record_name(record: &str) -> String {
    format!("{record}{DELEGATED_SUFFIX}")
}

/// What [`delegated_record_name`] adds to a record's name.
pub const DELEGATED_SUFFIX: &str = "-delegated";

/// Name of the DNSRecord for a listener.
pub fn record_name(gateway: &str, listener: &str) -> String {
    format!("{gateway}-{listener}")
}

/// What a policy's status says of a listener's record it leaves alone because `holder` holds
/// a record of that name.
pub fn foreign_record_note(listener: &str, record: &str, holder: &str) -> String {
    format!(
        "listener {listener}: DNSRecord {record} exists and is held by {holder}; it is not overwritten (rename the listener or the Gateway, or remove that record)"
    )
}

/// The records for every listener that has a hostname in a zone.
pub fn desired_records(
    gateway: &GatewayRef,
    listeners: &[ListenerRef],
    strategy: &Strategy,
    clusters: &[PlacedCluster],
    zones: &[ZoneRef],
    silence: &SilenceRules,
) -> Desired {
    desired_with(
        gateway,
        listeners,
        strategy,
        (clusters, silence),
        zones,
        build_record_tree,
    )
}

/// Distributed mode: `cluster`'s branch of every listener's records (see
/// [`meridian_dns::tree::build_branch`]).
pub fn desired_branch(
    gateway: &GatewayRef,
    listeners: &[ListenerRef],
    strategy: &Strategy,
    cluster: &PlacedCluster,
    zones: &[ZoneRef],
) -> Desired {
    desired_with(
        gateway,
        listeners,
        strategy,
        // The local cluster is never silent to itself.
        (std::slice::from_ref(cluster), &SilenceRules::immediate()),
        zones,
        build_branch,
    )
}

type TreeBuilder =
    fn(&str, &GatewayRef, &Strategy, &[ClusterTarget]) -> Result<RecordTree, TreeError>;

fn desired_with(
    gateway: &GatewayRef,
    listeners: &[ListenerRef],
    strategy: &Strategy,
    (clusters, silence): (&[PlacedCluster], &SilenceRules),
    zones: &[ZoneRef],
    build: TreeBuilder,
) -> Desired {
    let mut desired = Desired::default();
    let fates = silent_fates(clusters, silence, &mut desired);
    for (cluster, fate) in clusters.iter().zip(&fates) {
        if fate.is_some() {
            continue;
        }
        match (&cluster.cluster_id, &cluster.gateway) {
            (None, _) => desired
                .waiting
                .push(format!("{}: no report from its agent yet", cluster.name)),
            (Some(_), None) => desired.waiting.push(format!(
                "{}: its agent reports no Gateway {}/{} yet",
                cluster.name,
                downstream_namespace(&gateway.namespace),
                gateway.name
            )),
            (Some(_), Some(report)) if report.addresses.is_empty() => {
                desired.waiting.push(no_addresses_yet(&cluster.name))
            }
            _ => {}
        }
    }
    for listener in listeners {
        let Some(host) = &listener.hostname else {
            continue;
        };
        let Some(zone) = zone_for(host, zones) else {
            desired.problems.push(format!(
                "listener {}: no ManagedZone holds {host}",
                listener.name
            ));
            continue;
        };
        let mut targets = Vec::new();
        for (cluster, fate) in clusters.iter().zip(&fates) {
            if *fate == Some(Fate::Withdrawn) {
                continue;
            }
            match cluster_target(cluster, &listener.name) {
                Ok(Some(target)) => targets.push(target),
                Ok(None) => {}
                Err(problem) => desired
                    .problems
                    .push(format!("listener {}: {problem}", listener.name)),
            }
        }
        match build(host, gateway, strategy, &targets) {
            Ok(tree) => desired.records.push(DesiredRecord {
                name: record_name(&gateway.name, &listener.name),
                listener: listener.name.clone(),
                root_host: tree.host.clone(),
                zone: zone.name.clone(),
                endpoints: tree.endpoints(),
                warnings: tree.warnings.clone(),
                health_checked: true,
            }),
            Err(error) => desired
                .problems
                .push(format!("listener {}: {error}", listener.name)),
        }
    }
    desired
}

/// What silence does to each cluster (`None`: heard), with what the policy says about it.
fn silent_fates(
    clusters: &[PlacedCluster],
    silence: &SilenceRules,
    desired: &mut Desired,
) -> Vec<Option<Fate>> {
    let heard: Vec<Heard> = clusters
        .iter()
        .map(|cluster| Heard {
            silent_for: cluster.silent_for,
            serves: cluster.cluster_id.is_some()
                && cluster
                    .gateway
                    .as_ref()
                    .is_some_and(|report| !report.addresses.is_empty()),
        })
        .collect();
    let fates = crate::decide::silence::fates(&heard, silence);
    for (cluster, fate) in clusters.iter().zip(&fates) {
        let (Some(fate), Some(silent)) = (fate, cluster.silent_for) else {
            continue;
        };
        let quiet = format!(
            "{}: no heartbeat from its agent for {} s",
            cluster.name,
            silent.as_secs()
        );
        let kept = match fate {
            Fate::Withdrawn => {
                desired.waiting.push(format!("{quiet}; withdrawn from DNS"));
                continue;
            }
            Fate::Kept(kept) => *kept,
        };
        let why = match kept {
            Kept::HealthCheck => {
                "kept in DNS while the other clusters' probes find it healthy".to_string()
            }
            Kept::FleetBrake => {
                desired.braked = true;
                desired.recheck_after = earliest(desired.recheck_after, silence.timeout / 8);
                format!(
                    "kept in DNS by the fleet brake ({} of {} recently heard clusters went quiet together: the hub assumes it is the one cut off)",
                    silence.brake.quiet, silence.brake.heard
                )
            }
            Kept::Budget { withdraws_in } => {
                desired.recheck_after = earliest(desired.recheck_after, withdraws_in);
                format!(
                    "kept in DNS for {} s more: silence withdraws at most {} % of a host's clusters per {} s",
                    withdraws_in.as_secs().max(1),
                    silence.withdrawal_percent,
                    silence.timeout.as_secs()
                )
            }
            Kept::LastCluster => {
                "kept in DNS: silence never withdraws a host's last clusters".to_string()
            }
        };
        desired.kept_silent.push(format!("{quiet}; {why}"));
    }
    fates
}

fn earliest(
    current: Option<std::time::Duration>,
    candidate: std::time::Duration,
) -> Option<std::time::Duration> {
    Some(current.map_or(candidate, |current| current.min(candidate)))
}

/// The namespace downstream Gateways live in on the spokes.
pub fn downstream_namespace(hub_namespace: &str) -> String {
    format!("kuadrant-{hub_namespace}")
}

fn cluster_target(
    cluster: &PlacedCluster,
    listener: &str,
) -> Result<Option<ClusterTarget>, String> {
    let (Some(cluster_id), Some(report)) = (&cluster.cluster_id, &cluster.gateway) else {
        return Ok(None);
    };
    let addresses = report
        .addresses
        .iter()
        .map(|a| Address::parse(Some(&a.type_), &a.value))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("cluster {}: {error}", cluster.name))?;
    let attached_routes = report
        .listeners
        .iter()
        .find(|l| l.name == listener)
        .and_then(|l| l.attached_routes)
        .map(|routes| u32::try_from(routes).unwrap_or(0));
    Ok(Some(ClusterTarget {
        name: cluster.name.clone(),
        cluster_id: cluster_id.clone(),
        labels: cluster.labels.clone(),
        addresses,
        attached_routes,
        weight_percent: cluster.weight_percent,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_api::meridian::{ListenerReport, ReportedAddress};
    use meridian_dns::model::RecordType;
    use meridian_dns::tree::LoadBalancing;

    #[test]
    fn a_cluster_goes_silent_a_timeout_after_it_was_last_heard() {
        let at = |s: i64| k8s_openapi::jiff::Timestamp::from_second(s).unwrap();
        let timeout = std::time::Duration::from_secs(120);
        let cases = [
            (None, 1_000, None, "never heard"),
            (Some(1_000), 1_000, Some(120), "just heard"),
            (Some(1_000), 1_090, Some(30), "heard 90 s ago"),
            (Some(1_000), 1_120, None, "at the timeout"),
            (Some(1_000), 1_500, None, "long silent"),
            (
                Some(1_010),
                1_000,
                Some(120),
                "heard in the future (clock skew)",
            ),
        ];
        for (heard, now, left, what) in cases {
            assert_eq!(
                until_silent(heard.map(at), at(now), timeout),
                left.map(std::time::Duration::from_secs),
                "{what}"
            );
        }
    }

    fn zones() -> Vec<ZoneRef> {
        vec![
            ZoneRef {
                name: "example".into(),
                domain: "example.com".into(),
            },
            ZoneRef {
                name: "apps".into(),
                domain: "apps.example.com".into(),
            },
        ]
    }

    #[test]
    fn the_zone_is_the_longest_parent_domain() {
        let zones = zones();
        let cases = [
            ("api.example.com", Some("example")),
            ("shop.apps.example.com", Some("apps")),
            ("*.apps.example.com", Some("apps")),
            ("apps.example.com", Some("apps")),
            ("API.Example.COM.", Some("example")),
            ("example.org", None),
            ("badexample.com", None),
        ];
        for (host, expected) in cases {
            assert_eq!(
                zone_for(host, &zones).map(|z| z.name.as_str()),
                expected,
                "{host}"
            );
        }
    }

    fn cluster(name: &str, geo: &str, ip: Option<&str>, routes: i32) -> PlacedCluster {
        PlacedCluster {
            name: name.into(),
            labels: [(
                "kuadrant.io/lb-attribute-geo-code".to_string(),
                geo.to_string(),
            )]
            .into(),
            cluster_id: Some(format!("id-{name}")),
            gateway: ip.map(|ip| GatewayReport {
                name: "prod-web".into(),
                namespace: "kuadrant-gateways".into(),
                addresses: vec![ReportedAddress {
                    type_: "IPAddress".into(),
                    value: ip.into(),
                }],
                listeners: vec![ListenerReport {
                    name: "api".into(),
                    hostname: Some("api.example.com".into()),
                    attached_routes: Some(routes),
                    route_hostnames: Vec::new(),
                }],
            }),
            silent_for: None,
            weight_percent: 100,
        }
    }

    fn listeners() -> Vec<ListenerRef> {
        vec![
            ListenerRef {
                name: "api".into(),
                hostname: Some("api.example.com".into()),
            },
            ListenerRef {
                name: "other".into(),
                hostname: Some("www.example.org".into()),
            },
            ListenerRef {
                name: "any".into(),
                hostname: None,
            },
        ]
    }

    fn gateway() -> GatewayRef {
        GatewayRef {
            name: "prod-web".into(),
            namespace: "gateways".into(),
        }
    }

    fn loadbalanced() -> Strategy {
        Strategy::LoadBalanced(LoadBalancing {
            default_weight: 120,
            custom: vec![],
            default_geo: Some("IE".into()),
            tiers: None,
        })
    }

    #[test]
    fn one_record_per_listener_in_a_zone_and_problems_for_the_rest() {
        let clusters = [
            cluster("c1", "IE", Some("192.0.2.1"), 1),
            cluster("c2", "US", Some("192.0.2.2"), 1),
        ];
        let desired = desired_records(
            &gateway(),
            &listeners(),
            &loadbalanced(),
            &clusters,
            &zones(),
            &SilenceRules::immediate(),
        );
        assert_eq!(desired.records.len(), 1);
        let record = &desired.records[0];
        assert_eq!(record.name, "prod-web-api");
        assert_eq!(record.zone, "example");
        assert_eq!(record.root_host, "api.example.com");
        let mut ips: Vec<&str> = record
            .endpoints
            .iter()
            .filter(|e| e.record_type == RecordType::A)
            .flat_map(|e| e.targets.iter().map(String::as_str))
            .collect();
        ips.sort();
        assert_eq!(ips, ["192.0.2.1", "192.0.2.2"]);
        assert_eq!(
            desired.problems,
            ["listener other: no ManagedZone holds www.example.org"]
        );
        assert!(desired.waiting.is_empty());
    }

    #[test]
    fn clusters_without_reports_or_addresses_wait_and_add_nothing() {
        let mut silent = cluster("c2", "US", None, 0);
        silent.cluster_id = None;
        let clusters = [
            cluster("c1", "IE", Some("192.0.2.1"), 1),
            silent,
            cluster("c3", "US", None, 0),
        ];
        let desired = desired_records(
            &gateway(),
            &listeners()[..1],
            &Strategy::Simple,
            &clusters,
            &zones(),
            &SilenceRules::immediate(),
        );
        assert_eq!(desired.waiting.len(), 2, "{:?}", desired.waiting);
        let record = &desired.records[0];
        assert_eq!(record.endpoints.len(), 1);
        assert_eq!(record.endpoints[0].targets, ["192.0.2.1"]);
    }

    #[test]
    fn a_silent_cluster_is_gone_for_dns_and_says_why() {
        use k8s_openapi::jiff::Timestamp;
        use std::time::Duration;
        let at = |s: i64| Timestamp::from_second(s).unwrap();
        let timeout = Duration::from_secs(120);
        assert_eq!(silence(Some(at(1_000)), at(1_100), timeout), None);
        assert_eq!(
            silence(Some(at(1_000)), at(1_121), timeout),
            Some(Duration::from_secs(121))
        );
        assert_eq!(
            silence(None, at(1_121), timeout),
            None,
            "no heartbeat yet is not silence"
        );

        let mut silent = cluster("c2", "US", Some("192.0.2.2"), 1);
        silent.silent_for = Some(Duration::from_secs(121));
        let clusters = [cluster("c1", "IE", Some("192.0.2.1"), 1), silent];
        let desired = desired_records(
            &gateway(),
            &listeners()[..1],
            &Strategy::Simple,
            &clusters,
            &zones(),
            &SilenceRules::immediate(),
        );
        assert_eq!(desired.records[0].endpoints[0].targets, ["192.0.2.1"]);
        assert_eq!(
            desired.waiting,
            ["c2: no heartbeat from its agent for 121 s; withdrawn from DNS"]
        );
    }

    #[test]
    fn brakes_keep_silent_clusters_published_and_say_which() {
        use crate::decide::silence::{FleetBrake, SilenceRules};
        use std::time::Duration;
        let quiet = |name: &str, ip: &str, secs: u64| {
            let mut c = cluster(name, "US", Some(ip), 1);
            c.silent_for = Some(Duration::from_secs(secs));
            c
        };
        let rules = SilenceRules {
            timeout: Duration::from_secs(120),
            health_checked: false,
            brake: FleetBrake::default(),
            withdrawal_percent: 20,
        };
        let published = |desired: &Desired| {
            let mut ips: Vec<String> = desired.records[0]
                .endpoints
                .iter()
                .flat_map(|e| e.targets.clone())
                .collect();
            ips.sort();
            ips
        };
        let decide = |clusters: &[PlacedCluster], rules: &SilenceRules| {
            desired_records(
                &gateway(),
                &listeners()[..1],
                &Strategy::Simple,
                clusters,
                &zones(),
                rules,
            )
        };
        let heard = cluster("c1", "IE", Some("192.0.2.1"), 1);
        let with_check = SilenceRules {
            health_checked: true,
            ..rules
        };
        let braked = SilenceRules {
            brake: FleetBrake {
                engaged: true,
                quiet: 2,
                heard: 2,
                holds_silent_up_to: Duration::from_secs(400),
            },
            ..rules
        };
        let desired = decide(&[heard.clone(), quiet("c2", "192.0.2.2", 300)], &with_check);
        assert_eq!(published(&desired), ["192.0.2.1", "192.0.2.2"]);
        assert_eq!(
            desired.kept_silent,
            [
                "c2: no heartbeat from its agent for 300 s; kept in DNS while the other clusters' probes find it healthy"
            ]
        );
        assert!(!desired.braked && desired.recheck_after.is_none());

        let desired = decide(
            &[quiet("c1", "192.0.2.1", 130), quiet("c2", "192.0.2.2", 140)],
            &braked,
        );
        assert_eq!(published(&desired), ["192.0.2.1", "192.0.2.2"]);
        assert!(desired.braked, "{:?}", desired.kept_silent);
        assert!(desired.kept_silent[0].contains("fleet brake (2 of 2"));
        assert_eq!(desired.recheck_after, Some(Duration::from_secs(15)));

        // Without the brake, both silent: the budget (one) takes the earlier, and the later
        // is the host's last.
        let desired = decide(
            &[quiet("c1", "192.0.2.1", 130), quiet("c2", "192.0.2.2", 140)],
            &rules,
        );
        assert_eq!(published(&desired), ["192.0.2.1"]);
        assert_eq!(
            desired.waiting,
            ["c2: no heartbeat from its agent for 140 s; withdrawn from DNS"]
        );
        assert!(
            desired.kept_silent[0].starts_with(
                "c1: no heartbeat from its agent for 130 s; kept in DNS for 100 s more"
            ),
            "{:?}",
            desired.kept_silent
        );
        assert_eq!(desired.recheck_after, Some(Duration::from_secs(100)));
    }

    /// c2's listener has routes, has none, or is not in its Gateway's status yet: a listener
    /// just added reaches a cluster's Gateway before its controller writes the listener's
    /// status, and that silence must not take the cluster out of the record (a fleet taking
    /// the listener one cluster at a time would empty it on the way).
    #[test]
    fn a_cluster_is_left_out_only_where_its_listener_has_no_routes() {
        let cases: [(Option<i32>, &[&str]); 3] = [
            (Some(1), &["192.0.2.1", "192.0.2.2"]),
            (Some(0), &["192.0.2.1"]),
            (None, &["192.0.2.1", "192.0.2.2"]),
        ];
        for (routes, expected) in cases {
            let mut c2 = cluster("c2", "US", Some("192.0.2.2"), 0);
            if let Some(gateway) = c2.gateway.as_mut() {
                gateway.listeners[0].attached_routes = routes;
            }
            let clusters = [cluster("c1", "IE", Some("192.0.2.1"), 1), c2];
            let desired = desired_records(
                &gateway(),
                &listeners()[..1],
                &Strategy::Simple,
                &clusters,
                &zones(),
                &SilenceRules::immediate(),
            );
            let mut targets = desired.records[0].endpoints[0].targets.clone();
            targets.sort();
            assert_eq!(targets, expected, "{routes:?}");
        }
    }
}
