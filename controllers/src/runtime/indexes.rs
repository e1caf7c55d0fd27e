//! Pure indexes over the watch caches: which clusters a placement decided, which Gateways and
//! DNSPolicies a change to a cluster, a placement or a zone concerns, and whether a change to a
//! report or a cluster is one the policies read at all. The controllers' triggers are built
//! from these, so a change reconciles only what it can affect.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_api::kuadrant::{DNSHealthCheckProbe, DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::labels::PLACEMENT_LABEL;
use meridian_api::meridian::{ClusterReport, ProbeResults};
use meridian_api::upstream::{Gateway, ManagedCluster, PlacementDecision};

/// A Placement: its namespace and name.
pub type PlacementKey = (String, String);

/// The clusters a Placement decided: the union of `status.decisions[].clusterName` over every
/// PlacementDecision labelled with it (100 decisions each), empty names skipped.
pub fn decided_clusters(
    decisions: &[Arc<PlacementDecision>],
    namespace: &str,
    placement: &str,
) -> BTreeSet<String> {
    decisions
        .iter()
        .filter(|d| {
            d.namespace().as_deref() == Some(namespace)
                && d.labels().get(PLACEMENT_LABEL).map(String::as_str) == Some(placement)
        })
        .filter_map(|d| d.status.as_ref())
        .flat_map(|s| s.decisions.iter())
        .map(|d| d.cluster_name.clone())
        .filter(|name| !name.is_empty())
        .collect()
}

/// The key of objects in `namespace` grouped under `name` (a Gateway, a policy, a Placement):
/// names hold no `/`, so the pair is unambiguous.
pub fn group_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// A policy's group in the policy cache: the Gateway it targets.
pub fn policy_group(policy: &DNSPolicy) -> Option<String> {
    let (namespace, name) = policy_target(policy);
    Some(group_key(namespace, name))
}

/// A record's group in the record cache: the policy that wrote it (by its label; a record an
/// admin wrote is in none).
pub fn record_group(record: &DNSRecord) -> Option<String> {
    let policy = record.labels().get(crate::POLICY_LABEL)?;
    Some(group_key(record.metadata.namespace.as_deref()?, policy))
}

/// A PlacementDecision's group in the decision cache: its Placement.
pub fn decision_group(decision: &PlacementDecision) -> Option<String> {
    let placement = decision.labels().get(PLACEMENT_LABEL)?;
    Some(group_key(
        decision.metadata.namespace.as_deref()?,
        placement,
    ))
}

/// The Placement a PlacementDecision belongs to.
pub fn placement_of(decision: &PlacementDecision) -> Option<PlacementKey> {
    Some((
        decision.namespace()?,
        decision.labels().get(PLACEMENT_LABEL)?.clone(),
    ))
}

/// The Placement a hub Gateway follows: its namespace and the placement's name (borrowed:
/// the triggers ask this of every Gateway for every change).
pub fn gateway_placement(gateway: &Gateway) -> Option<(&str, &str)> {
    Some((
        gateway.metadata.namespace.as_deref()?,
        gateway
            .metadata
            .labels
            .as_ref()?
            .get(PLACEMENT_LABEL)?
            .as_str(),
    ))
}

/// The Placements that decided `cluster`.
pub fn placements_deciding(
    decisions: &[Arc<PlacementDecision>],
    cluster: &str,
) -> BTreeSet<PlacementKey> {
    decisions
        .iter()
        .filter(|d| {
            d.status
                .as_ref()
                .is_some_and(|s| s.decisions.iter().any(|c| c.cluster_name == cluster))
        })
        .filter_map(|d| placement_of(d))
        .collect()
}

/// The Gateways that follow one of `placements`.
pub fn gateways_following(
    gateways: &[Arc<Gateway>],
    placements: &BTreeSet<PlacementKey>,
) -> Vec<ObjectRef<Gateway>> {
    let wanted = borrowed(placements);
    gateways
        .iter()
        .filter(|g| gateway_placement(g).is_some_and(|p| wanted.contains(&p)))
        .map(|g| ObjectRef::from_obj(&**g))
        .collect()
}

/// A set of (namespace, name) keys to look borrowed keys up in.
fn borrowed(keys: &BTreeSet<(String, String)>) -> BTreeSet<(&str, &str)> {
    keys.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
}

/// The Gateway a policy targets: namespace and name (borrowed, as for [`gateway_placement`]).
pub fn policy_target(policy: &DNSPolicy) -> (&str, &str) {
    let target = &policy.spec.target_ref;
    let namespace = target
        .namespace
        .as_deref()
        .or(policy.metadata.namespace.as_deref())
        .unwrap_or_default();
    (namespace, target.name.as_str())
}

/// The policies that target one of `gateways` (namespace, name).
pub fn policies_targeting(
    policies: &[Arc<DNSPolicy>],
    gateways: &BTreeSet<(String, String)>,
) -> Vec<ObjectRef<DNSPolicy>> {
    let wanted = borrowed(gateways);
    policies
        .iter()
        .filter(|p| wanted.contains(&policy_target(p)))
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// The DNSPolicy a record was written for: its controlling owner reference of that kind
/// (a record an admin wrote has none).
pub fn owning_policy(
    record: &DNSRecord,
) -> Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    use kube::Resource;
    record.owner_references().iter().find(|owner| {
        owner.controller == Some(true)
            && owner.kind == DNSPolicy::kind(&())
            && owner.api_version.split('/').next() == Some(&*DNSPolicy::group(&()))
    })
}

/// The policy-owned records whose policy the cache no longer holds (not by name: a policy
/// deleted and created again under the same name is another owner). Policies hold no
/// finalizer, so this is how their deletion reaches their records.
pub fn records_of_deleted_policies(
    records: &[Arc<DNSRecord>],
    policies: &[Arc<DNSPolicy>],
) -> Vec<ObjectRef<DNSRecord>> {
    let cached: BTreeSet<&str> = policies
        .iter()
        .filter_map(|p| p.metadata.uid.as_deref())
        .collect();
    records
        .iter()
        .filter(|r| owning_policy(r).is_some_and(|owner| !cached.contains(owner.uid.as_str())))
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}

/// The Gateways that still say `DNSPolicyAffected` although no policy targets them: their
/// policy was deleted, and the condition goes with it.
pub fn gateways_left_affected(
    gateways: &[Arc<Gateway>],
    policies: &[Arc<DNSPolicy>],
) -> Vec<Arc<Gateway>> {
    let targeted: BTreeSet<(&str, &str)> = policies.iter().map(|p| policy_target(p)).collect();
    gateways
        .iter()
        .filter(|g| {
            g.status.as_ref().is_some_and(|status| {
                status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == meridian_api::conditions::DNS_POLICY_AFFECTED)
            })
        })
        .filter(|g| {
            let namespace = g.metadata.namespace.as_deref().unwrap_or_default();
            !targeted.contains(&(namespace, g.metadata.name.as_deref().unwrap_or_default()))
        })
        .cloned()
        .collect()
}

/// The policies whose Gateway is placed on `cluster`.
pub fn policies_on_cluster(
    policies: &[Arc<DNSPolicy>],
    gateways: &[Arc<Gateway>],
    decisions: &[Arc<PlacementDecision>],
    cluster: &str,
) -> Vec<ObjectRef<DNSPolicy>> {
    let placements = placements_deciding(decisions, cluster);
    policies_of_placements(policies, gateways, &placements)
}

/// The policies whose Gateway follows one of `placements`.
pub fn policies_of_placements(
    policies: &[Arc<DNSPolicy>],
    gateways: &[Arc<Gateway>],
    placements: &BTreeSet<PlacementKey>,
) -> Vec<ObjectRef<DNSPolicy>> {
    if placements.is_empty() {
        return Vec::new();
    }
    let targets: BTreeSet<(String, String)> = gateways_following(gateways, placements)
        .into_iter()
        .map(|g| (g.namespace.unwrap_or_default(), g.name))
        .collect();
    policies_targeting(policies, &targets)
}

/// The ManagedClusters whose agents vote on a record's health: those its policy's Gateway is
/// placed on (`policy`, the one the record's label names in its namespace; `None` when that
/// policy is gone, and then nobody votes). A record written by hand answers for its
/// namespace's Gateways, so the clusters any of them is placed on vote. An agent of any other
/// cluster probes the record's leaves too, but its verdict withdraws nothing: a cluster the
/// tenant's placement never chose is not the tenant's witness.
pub fn record_voters(
    record: &DNSRecord,
    policy: Option<&DNSPolicy>,
    gateways: &[Arc<Gateway>],
    decisions: &[Arc<PlacementDecision>],
) -> BTreeSet<String> {
    let namespace = record.metadata.namespace.as_deref().unwrap_or_default();
    let placements: BTreeSet<(&str, &str)> = if record.labels().contains_key(crate::POLICY_LABEL) {
        let Some(policy) = policy else {
            return BTreeSet::new();
        };
        let target = policy_target(policy);
        // A policy aimed at another namespace's Gateway is refused, and its placement is no
        // witness for this namespace's records.
        if Some(target.0) != policy.metadata.namespace.as_deref() {
            return BTreeSet::new();
        }
        gateways
            .iter()
            .filter(|g| {
                (g.metadata.namespace.as_deref(), g.metadata.name.as_deref())
                    == (Some(target.0), Some(target.1))
            })
            .filter_map(|g| gateway_placement(g))
            .collect()
    } else {
        gateways
            .iter()
            .filter(|g| g.metadata.namespace.as_deref() == Some(namespace))
            .filter_map(|g| gateway_placement(g))
            .collect()
    };
    placements
        .into_iter()
        .flat_map(|(namespace, placement)| decided_clusters(decisions, namespace, placement))
        .collect()
}

/// The policies in `namespace` (a ManagedZone there may hold any of their hostnames).
pub fn policies_in_namespace(
    policies: &[Arc<DNSPolicy>],
    namespace: &str,
) -> Vec<ObjectRef<DNSPolicy>> {
    policies
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace))
        .map(|p| ObjectRef::from_obj(&**p))
        .collect()
}

/// Whether a report changed in what the DNSPolicies read of it: the cluster ID and the
/// Gateways. Probe results and router shards are other controllers' business, and the report's
/// time is the heartbeat's.
pub fn report_changed_for_policies(old: Option<&ClusterReport>, new: &ClusterReport) -> bool {
    old.is_none_or(|old| {
        old.spec.cluster_id != new.spec.cluster_id || old.spec.gateways != new.spec.gateways
    })
}

/// Whether a ManagedCluster changed in what DNS reads of it: its labels (geo code, custom
/// weights). Its status changes with every OCM lease renewal and concerns nobody here.
pub fn cluster_changed_for_dns(old: Option<&ManagedCluster>, new: &ManagedCluster) -> bool {
    old.is_none_or(|old| old.labels() != new.labels())
}

/// Whether a ManagedZone changed in what records and policies read of it: its spec (domain,
/// provider Secret, ID), its plan guard's annotations (threshold, approvals) or its being
/// deleted. Its status (the record count, rewritten as
/// records are published) concerns none of them; reading it as a change would wake every
/// policy and record of the zone for each record published.
pub fn zone_changed_for_dns(old: Option<&ManagedZone>, new: &ManagedZone) -> bool {
    let guard = |zone: &ManagedZone| {
        [
            crate::decide::plan_guard::THRESHOLD_ANNOTATION,
            crate::decide::plan_guard::APPROVE_ANNOTATION,
        ]
        .map(|key| zone.annotations().get(key).cloned())
    };
    old.is_none_or(|old| {
        old.spec != new.spec
            || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
            || guard(old) != guard(new)
    })
}

/// Whether a Gateway changed in what policies read of it: spec, labels (its placement),
/// annotations, being deleted, and status but its conditions (addresses and listeners, which
/// an agent's policies read in distributed mode). The conditions are other controllers' and
/// our own `DNSPolicyAffected`: reading its write as a change would wake the policy that just
/// wrote it.
pub fn gateway_changed_for_dns(old: Option<&Gateway>, new: &Gateway) -> bool {
    let Some(old) = old else {
        return true;
    };
    // No status and a status of conditions only are the same to DNS.
    let without_conditions = |gateway: &Gateway| {
        let mut status = gateway.status.clone().unwrap_or_default();
        status.conditions.clear();
        status
    };
    old.spec != new.spec
        || old.labels() != new.labels()
        || old.annotations() != new.annotations()
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || without_conditions(old) != without_conditions(new)
}

/// Whether a policy changed beyond its status: its generation (spec), labels, annotations,
/// finalizers or being deleted. Its status is what it writes itself; a write of it read back
/// as a change reconciled the policy again, often from a cache that had not yet seen the
/// write, which then wrote the same status again.
pub fn policy_changed_beyond_status(old: Option<&DNSPolicy>, new: &DNSPolicy) -> bool {
    old.is_none_or(|old| {
        old.metadata.generation != new.metadata.generation
            || old.labels() != new.labels()
            || old.annotations() != new.annotations()
            || old.finalizers() != new.finalizers()
            || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
    })
}

/// Whether a DNSRecord changed in what its policy reads: its status (published, ready), its
/// spec or labels (someone else's edit, which the policy undoes), being deleted. A record's
/// creation is not: its policy created it, and the status that follows wakes the policy.
pub fn record_changed_for_policy(old: Option<&DNSRecord>, new: &DNSRecord) -> bool {
    old.is_some_and(|old| {
        old.status != new.status
            || old.spec != new.spec
            || old.labels() != new.labels()
            || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
    })
}

/// Whether a heartbeat brings a cluster back: it was not heard from within `timeout` before
/// this renewal (or never), so the policies that left it out must look again.
pub fn heartbeat_revives(
    previous: Option<k8s_openapi::jiff::Timestamp>,
    renewed: Option<k8s_openapi::jiff::Timestamp>,
    timeout: std::time::Duration,
) -> bool {
    match (previous, renewed) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(previous), Some(renewed)) => {
            std::time::Duration::try_from(renewed.duration_since(previous)).unwrap_or_default()
                > timeout
        }
    }
}

/// The health-checked DNSRecords whose tenants' downstream Gateways changed addresses between
/// two versions of a cluster's report: only a reported Gateway address of the record's own
/// namespace (`kuadrant-<namespace>`) gets a probe, so a new one must reach the record at once,
/// not at the next resync.
pub fn records_behind_changed_gateways(
    records: &[Arc<DNSRecord>],
    old: Option<&ClusterReport>,
    new: Option<&ClusterReport>,
) -> Vec<ObjectRef<DNSRecord>> {
    let addresses = |report: Option<&ClusterReport>| -> BTreeMap<String, BTreeSet<String>> {
        let mut by_namespace: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for gateway in report.iter().flat_map(|r| &r.spec.gateways) {
            by_namespace
                .entry(gateway.namespace.clone())
                .or_default()
                .extend(gateway.addresses.iter().map(|a| a.value.clone()));
        }
        by_namespace
    };
    let (before, after) = (addresses(old), addresses(new));
    let changed: BTreeSet<String> = before
        .keys()
        .chain(after.keys())
        .filter(|namespace| before.get(*namespace) != after.get(*namespace))
        .filter_map(|namespace| namespace.strip_prefix("kuadrant-").map(String::from))
        .collect();
    records
        .iter()
        .filter(|record| record.spec.health_check.is_some())
        .filter(|record| changed.contains(&record.namespace().unwrap_or_default()))
        .map(|record| ObjectRef::from_obj(&**record))
        .collect()
}

/// The DNSRecords whose probes' verdicts differ between two versions of a shard of probe
/// results (probe name → the record it belongs to, from the probe cache).
pub fn records_with_changed_verdicts(
    old: Option<&ProbeResults>,
    new: Option<&ProbeResults>,
    record_of_probe: impl Fn(&str, &str) -> Option<String>,
) -> Vec<ObjectRef<DNSRecord>> {
    let verdicts = |report: Option<&ProbeResults>| -> BTreeMap<(String, String), bool> {
        report
            .map(|r| {
                r.spec
                    .probes
                    .iter()
                    .map(|p| ((p.namespace.clone(), p.name.clone()), p.healthy))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (before, after) = (verdicts(old), verdicts(new));
    let changed: BTreeSet<&(String, String)> = before
        .keys()
        .chain(after.keys())
        .filter(|probe| before.get(*probe) != after.get(*probe))
        .collect();
    let records: BTreeSet<(String, String)> = changed
        .into_iter()
        .filter_map(|(namespace, probe)| {
            Some((namespace.clone(), record_of_probe(namespace, probe)?))
        })
        .collect();
    records
        .into_iter()
        .map(|(namespace, name)| ObjectRef::new(&name).within(&namespace))
        .collect()
}

/// The ManagedZones whose provider credentials are the Secret `namespace/secret`.
pub fn zones_using_secret(
    zones: &[Arc<ManagedZone>],
    namespace: &str,
    secret: &str,
) -> Vec<ObjectRef<ManagedZone>> {
    zones
        .iter()
        .filter(|z| z.namespace().as_deref() == Some(namespace))
        .filter(|z| {
            z.spec
                .dns_provider_secret_ref
                .as_ref()
                .is_some_and(|r| r.name == secret)
        })
        .map(|z| ObjectRef::from_obj(&**z))
        .collect()
}

/// The DNSRecords a Secret concerns: those of the zones whose credentials it holds, and those
/// whose health checks send its headers.
pub fn records_using_secret(
    records: &[Arc<DNSRecord>],
    zones: &[Arc<ManagedZone>],
    namespace: &str,
    secret: &str,
) -> Vec<ObjectRef<DNSRecord>> {
    let zones: BTreeSet<String> = zones_using_secret(zones, namespace, secret)
        .into_iter()
        .map(|z| z.name)
        .collect();
    records
        .iter()
        .filter(|r| r.namespace().as_deref() == Some(namespace))
        .filter(|r| {
            zones.contains(&r.spec.managed_zone.name)
                || r.spec
                    .health_check
                    .as_ref()
                    .and_then(|check| check.additional_headers_ref.as_ref())
                    .is_some_and(|reference| reference.name == secret)
        })
        .map(|r| ObjectRef::from_obj(&**r))
        .collect()
}

/// Whether some health probe sends the headers of the Secret `namespace/secret`.
pub fn probes_send_headers_of(
    probes: &[Arc<DNSHealthCheckProbe>],
    namespace: &str,
    secret: &str,
) -> bool {
    probes.iter().any(|p| {
        p.namespace().as_deref() == Some(namespace)
            && p.spec
                .additional_headers_ref
                .as_ref()
                .is_some_and(|r| r.name == secret)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reported_gateway_address_wakes_its_tenants_health_checked_records_only() {
        let record = |namespace: &str, name: &str, checked: bool| -> Arc<DNSRecord> {
            let mut spec = serde_json::json!({
                "rootHost": "api.example.com", "managedZone": { "name": "zone" }, "endpoints": [],
            });
            if checked {
                spec["healthCheck"] = serde_json::json!({ "port": 443, "protocol": "HTTPS" });
            }
            Arc::new(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
                    "metadata": { "name": name, "namespace": namespace }, "spec": spec,
                }))
                .unwrap(),
            )
        };
        let report = |addresses: &[(&str, &str)]| -> ClusterReport {
            let gateways: Vec<serde_json::Value> = addresses
                .iter()
                .map(|(namespace, address)| {
                    serde_json::json!({
                        "name": "web", "namespace": namespace,
                        "addresses": [{ "type": "IPAddress", "value": address }],
                    })
                })
                .collect();
            serde_json::from_value(serde_json::json!({
                "apiVersion": "meridian.dev/v1alpha1", "kind": "ClusterReport",
                "metadata": { "name": "agent", "namespace": "spoke-1" },
                "spec": { "clusterID": "c", "gateways": gateways },
            }))
            .unwrap()
        };
        let records = [
            record("shop", "checked", true),
            record("shop", "unchecked", false),
            record("other", "checked", true),
        ];
        let woken = |old: Option<&ClusterReport>, new: Option<&ClusterReport>| -> Vec<String> {
            records_behind_changed_gateways(&records, old, new)
                .into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect()
        };
        let before = report(&[
            ("kuadrant-shop", "192.0.2.10"),
            ("kuadrant-other", "192.0.2.20"),
        ]);
        let moved = report(&[
            ("kuadrant-shop", "192.0.2.11"),
            ("kuadrant-other", "192.0.2.20"),
        ]);
        assert_eq!(
            woken(None, Some(&before)),
            ["shop/checked", "other/checked"]
        );
        assert_eq!(woken(Some(&before), Some(&moved)), ["shop/checked"]);
        assert!(
            woken(Some(&moved), Some(&moved)).is_empty(),
            "a heartbeat wakes nothing"
        );
        assert_eq!(woken(Some(&moved), None), ["shop/checked", "other/checked"]);
        // A Gateway outside the downstream namespaces names no tenant.
        assert!(woken(None, Some(&report(&[("shop", "192.0.2.30")]))).is_empty());
    }
    use meridian_api::kuadrant::DNSPolicySpec;
    use meridian_api::meridian::{ClusterReportSpec, GatewayReport, ProbeReport, ProbeResultsSpec};
    use meridian_api::upstream::{ClusterDecision, GatewaySpec, PlacementDecisionStatus};

    fn decision(namespace: &str, placement: &str, clusters: &[&str]) -> Arc<PlacementDecision> {
        let mut d = PlacementDecision::default();
        d.metadata.name = Some(format!("{placement}-decision-1"));
        d.metadata.namespace = Some(namespace.into());
        d.metadata.labels = Some([(PLACEMENT_LABEL.to_string(), placement.to_string())].into());
        d.status = Some(PlacementDecisionStatus {
            decisions: clusters
                .iter()
                .map(|c| ClusterDecision {
                    cluster_name: c.to_string(),
                    reason: String::new(),
                })
                .collect(),
        });
        Arc::new(d)
    }

    fn gateway(namespace: &str, name: &str, placement: Option<&str>) -> Arc<Gateway> {
        let mut g = Gateway::new(
            name,
            GatewaySpec {
                gateway_class_name: "kuadrant-multi-cluster-gateway-instance-per-cluster".into(),
                listeners: Vec::new(),
                extra: Default::default(),
            },
        );
        g.metadata.namespace = Some(namespace.into());
        g.metadata.labels =
            placement.map(|p| [(PLACEMENT_LABEL.to_string(), p.to_string())].into());
        Arc::new(g)
    }

    fn policy(namespace: &str, name: &str, gateway: &str) -> Arc<DNSPolicy> {
        let spec: DNSPolicySpec = serde_json::from_value(serde_json::json!({
            "targetRef": { "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway },
        }))
        .expect("a minimal policy");
        let mut p = DNSPolicy::new(name, spec);
        p.metadata.namespace = Some(namespace.into());
        Arc::new(p)
    }

    fn names<K: kube::Resource>(refs: Vec<ObjectRef<K>>) -> Vec<String> {
        let mut names: Vec<String> = refs
            .into_iter()
            .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn decided_clusters_are_the_union_of_every_decision_of_the_placement() {
        let mut second = (*decision("gw", "web", &["c3", ""])).clone();
        second.metadata.name = Some("web-decision-2".into());
        let decisions = [
            decision("gw", "web", &["c1", "c2"]),
            Arc::new(second),
            decision("gw", "api", &["c9"]),
            decision("other", "web", &["c8"]),
        ];
        let cases = [
            ("gw", "web", vec!["c1", "c2", "c3"]),
            ("gw", "api", vec!["c9"]),
            ("other", "web", vec!["c8"]),
            ("gw", "none", vec![]),
        ];
        for (namespace, placement, expected) in cases {
            let decided: Vec<String> = decided_clusters(&decisions, namespace, placement)
                .into_iter()
                .collect();
            assert_eq!(decided, expected, "{namespace}/{placement}");
        }
    }

    #[test]
    fn a_cluster_concerns_the_policies_of_gateways_placed_on_it_only() {
        let decisions = [
            decision("gw", "web", &["c1", "c2"]),
            decision("gw", "api", &["c2"]),
            decision("team", "web", &["c3"]),
        ];
        let gateways = [
            gateway("gw", "web-gw", Some("web")),
            gateway("gw", "api-gw", Some("api")),
            gateway("gw", "unplaced", None),
            gateway("team", "web-gw", Some("web")),
        ];
        let policies = [
            policy("gw", "web-dns", "web-gw"),
            policy("gw", "api-dns", "api-gw"),
            policy("gw", "unplaced-dns", "unplaced"),
            policy("team", "team-dns", "web-gw"),
        ];
        let cases = [
            ("c1", vec!["gw/web-dns"]),
            ("c2", vec!["gw/api-dns", "gw/web-dns"]),
            ("c3", vec!["team/team-dns"]),
            ("c4", vec![]),
        ];
        for (cluster, expected) in cases {
            assert_eq!(
                names(policies_on_cluster(
                    &policies, &gateways, &decisions, cluster
                )),
                expected,
                "{cluster}"
            );
        }
        let placements: BTreeSet<PlacementKey> = [("gw".to_string(), "web".to_string())].into();
        assert_eq!(
            names(policies_of_placements(&policies, &gateways, &placements)),
            ["gw/web-dns"],
            "a placement's decision concerns the policies of its Gateways"
        );
        assert_eq!(
            names(policies_in_namespace(&policies, "team")),
            ["team/team-dns"],
            "a zone concerns the policies of its namespace"
        );
    }

    #[test]
    fn a_policy_may_target_a_gateway_in_another_namespace() {
        let mut p = (*policy("gw", "cross", "web-gw")).clone();
        p.spec.target_ref.namespace = Some("team".into());
        let targets: BTreeSet<(String, String)> = [("team".into(), "web-gw".into())].into();
        assert_eq!(
            names(policies_targeting(&[Arc::new(p)], &targets)),
            ["gw/cross"]
        );
    }

    fn report(gateway_ip: &str, at: i64) -> ClusterReport {
        let mut r = ClusterReport::new(
            "agent",
            ClusterReportSpec {
                cluster_id: "id".into(),
                reported_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::from_second(at).unwrap(),
                )),
                gateways: vec![GatewayReport {
                    namespace: "kuadrant-gw".into(),
                    name: "web-gw".into(),
                    addresses: vec![meridian_api::meridian::ReportedAddress {
                        type_: "IPAddress".into(),
                        value: gateway_ip.into(),
                    }],
                    listeners: Vec::new(),
                }],
                router_shards: Vec::new(),
            },
        );
        r.metadata.namespace = Some("c1".into());
        r
    }

    fn results(verdicts: &[(&str, bool)], at: i64) -> ProbeResults {
        let mut r = ProbeResults::new(
            "agent-probes-0",
            ProbeResultsSpec {
                shard: 0,
                shards: 1,
                probes: verdicts
                    .iter()
                    .map(|(name, healthy)| ProbeReport {
                        namespace: "gw".into(),
                        name: name.to_string(),
                        healthy: *healthy,
                        consecutive_failures: at as i32,
                        reason: None,
                        last_checked_at: None,
                    })
                    .collect(),
            },
        );
        r.metadata.namespace = Some("c1".into());
        r
    }

    #[test]
    fn only_report_changes_the_policies_read_wake_them() {
        let base = report("10.0.0.1", 100);
        let mut shards_only = base.clone();
        shards_only.spec.router_shards = vec![meridian_api::meridian::RouterShardReport {
            name: "default".into(),
            dns: "apps.c1.example.com".into(),
            addresses: vec!["10.0.0.9".into()],
            routes: Vec::new(),
        }];
        let cases = [
            (report("10.0.0.1", 200), false, "a newer time only"),
            (shards_only, false, "router shards only"),
            (report("10.0.0.2", 100), true, "a gateway address"),
        ];
        for (new, wakes, what) in cases {
            assert_eq!(
                report_changed_for_policies(Some(&base), &new),
                wakes,
                "{what}"
            );
        }
        assert!(report_changed_for_policies(None, &base), "a first report");
    }

    #[test]
    fn only_verdict_changes_wake_the_records_of_their_probes() {
        let record_of = |_: &str, probe: &str| match probe {
            "p1" | "p2" => Some("web-dns-api".to_string()),
            "p3" => Some("api-dns-api".to_string()),
            _ => None,
        };
        let base = results(&[("p1", true), ("p3", true)], 100);
        let cases = [
            (
                results(&[("p1", true), ("p3", true)], 999),
                vec![],
                "counts and times",
            ),
            (
                results(&[("p1", false), ("p3", true)], 100),
                vec!["gw/web-dns-api"],
                "one verdict",
            ),
            (
                results(&[("p1", true)], 100),
                vec!["gw/api-dns-api"],
                "a probe gone",
            ),
            (
                results(&[("p1", true), ("p3", true), ("p9", false)], 100),
                vec![],
                "a probe of no known record",
            ),
        ];
        for (new, expected, what) in cases {
            assert_eq!(
                names(records_with_changed_verdicts(
                    Some(&base),
                    Some(&new),
                    record_of
                )),
                expected,
                "{what}"
            );
        }
        assert_eq!(
            names(records_with_changed_verdicts(Some(&base), None, record_of)),
            ["gw/api-dns-api", "gw/web-dns-api"],
            "a deleted shard"
        );
    }

    #[test]
    fn zone_status_changes_do_not_concern_records_or_policies() {
        let zone: ManagedZone = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
            "metadata": { "name": "example", "namespace": "gw" },
            "spec": { "domainName": "example.com" },
        }))
        .expect("a valid zone");
        let mut counted = zone.clone();
        counted.status = Some(meridian_api::kuadrant::ManagedZoneStatus {
            record_count: Some(42),
            ..Default::default()
        });
        let mut moved = zone.clone();
        moved.spec.domain_name = "example.org".into();
        let mut deleting = zone.clone();
        deleting.metadata.deletion_timestamp = Some(crate::now());
        assert!(zone_changed_for_dns(None, &zone), "a new zone");
        assert!(
            !zone_changed_for_dns(Some(&zone), &counted),
            "a new record count"
        );
        assert!(zone_changed_for_dns(Some(&zone), &moved), "a new domain");
        assert!(
            zone_changed_for_dns(Some(&zone), &deleting),
            "being deleted"
        );
    }

    fn bare_record(namespace: &str, name: &str) -> DNSRecord {
        let spec = serde_json::from_value(serde_json::json!({
            "rootHost": "api.example.com",
            "managedZone": { "name": "example" },
        }))
        .expect("a minimal record");
        let mut record = DNSRecord::new(name, spec);
        record.metadata.namespace = Some(namespace.into());
        record
    }

    fn owned_record(namespace: &str, name: &str, owner: &DNSPolicy) -> Arc<DNSRecord> {
        use kube::Resource;
        let mut record = bare_record(namespace, name);
        record.metadata.owner_references = Some(vec![
            owner
                .controller_owner_ref(&())
                .expect("the policy has a UID"),
        ]);
        Arc::new(record)
    }

    fn with_uid(policy: Arc<DNSPolicy>, uid: &str) -> Arc<DNSPolicy> {
        let mut policy = (*policy).clone();
        policy.metadata.uid = Some(uid.into());
        Arc::new(policy)
    }

    #[test]
    fn only_the_clusters_a_record_is_placed_on_vote_on_its_health() {
        let decisions = [
            decision("team", "web", &["c1", "c2"]),
            decision("team", "api", &["c3"]),
            decision("other", "web", &["c9"]),
        ];
        let gateways = [
            gateway("team", "web-gw", Some("web")),
            gateway("team", "api-gw", Some("api")),
            gateway("team", "unplaced", None),
            gateway("other", "web-gw", Some("web")),
        ];
        let web = policy("team", "web-dns", "web-gw");
        let unplaced = policy("team", "unplaced-dns", "unplaced");
        let across = {
            let mut across = (*policy("team", "across-dns", "web-gw")).clone();
            across.spec.target_ref.namespace = Some("other".into());
            across
        };
        let labelled = |policy: &str| {
            let mut record = bare_record("team", "r");
            record.metadata.labels =
                Some([(crate::POLICY_LABEL.to_string(), policy.to_string())].into());
            record
        };
        let cases: [(&str, DNSRecord, Option<&DNSPolicy>, Vec<&str>); 6] = [
            (
                "the policy's Gateway",
                labelled("web-dns"),
                Some(&web),
                vec!["c1", "c2"],
            ),
            (
                "another namespace's Gateway",
                labelled("across-dns"),
                Some(&across),
                vec![],
            ),
            (
                "an unplaced Gateway",
                labelled("unplaced-dns"),
                Some(&unplaced),
                vec![],
            ),
            ("a policy gone", labelled("web-dns"), None, vec![]),
            (
                "by hand: every placed Gateway of its namespace, no other namespace's",
                bare_record("team", "r"),
                None,
                vec!["c1", "c2", "c3"],
            ),
            (
                "by hand, in a namespace with no Gateway",
                bare_record("empty", "r"),
                None,
                vec![],
            ),
        ];
        for (what, record, policy, expected) in cases {
            let voters: Vec<String> = record_voters(&record, policy, &gateways, &decisions)
                .into_iter()
                .collect();
            assert_eq!(voters, expected, "{what}");
        }
    }

    #[test]
    fn records_of_deleted_policies_are_found_by_owner_uid() {
        let kept = with_uid(policy("gw", "web", "web"), "uid-web");
        let deleted = with_uid(policy("gw", "api", "api"), "uid-api");
        let recreated = with_uid(policy("gw", "api", "api"), "uid-api-2");
        let unowned = bare_record("gw", "by-hand");
        let mut owned_by_other_kind = (*owned_record("gw", "other", &kept)).clone();
        owned_by_other_kind
            .metadata
            .owner_references
            .as_mut()
            .unwrap()[0]
            .kind = "Gateway".into();
        let records = [
            owned_record("gw", "web-http", &kept),
            owned_record("gw", "api-http", &deleted),
            Arc::new(unowned),
            Arc::new(owned_by_other_kind),
        ];
        assert_eq!(
            names(records_of_deleted_policies(
                &records,
                std::slice::from_ref(&kept)
            )),
            ["gw/api-http"],
            "only the record whose policy is gone; records nobody's policy wrote are left alone"
        );
        assert_eq!(
            names(records_of_deleted_policies(
                &records,
                &[kept.clone(), recreated]
            )),
            ["gw/api-http"],
            "a policy of the same name is another owner"
        );
        assert!(records_of_deleted_policies(&records, &[kept, deleted]).is_empty());
    }

    #[test]
    fn a_gateway_keeps_its_condition_while_a_policy_targets_it() {
        let affected = |namespace: &str, name: &str| {
            let mut g = (*gateway(namespace, name, None)).clone();
            g.status = Some(Default::default());
            g.status.as_mut().unwrap().conditions =
                vec![condition("kuadrant.io/DNSPolicyAffected")];
            Arc::new(g)
        };
        let mut elsewhere = (*policy("policies", "shop", "shop")).clone();
        elsewhere.spec.target_ref.namespace = Some("gw".into());
        let gateways = [
            affected("gw", "web"),
            affected("gw", "api"),
            affected("gw", "shop"),
            gateway("gw", "plain", None),
        ];
        let policies = [policy("gw", "web", "web"), Arc::new(elsewhere)];
        let left: Vec<String> = gateways_left_affected(&gateways, &policies)
            .iter()
            .map(|g| g.name_any())
            .collect();
        assert_eq!(
            left,
            ["api"],
            "web and shop are targeted, plain was never affected"
        );
    }

    fn condition(type_: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
        let mut conditions = Vec::new();
        meridian_api::conditions::set_condition(
            &mut conditions,
            meridian_api::conditions::ConditionUpdate {
                type_,
                status: true,
                reason: "Test",
                message: String::new(),
            },
            None,
            &crate::now(),
        );
        conditions.remove(0)
    }

    #[test]
    fn gateway_conditions_do_not_concern_dns() {
        use meridian_api::upstream::{GatewayStatus, GatewayStatusAddress};
        let gateway = (*gateway("gateways", "api", Some("everywhere"))).clone();
        let mut affected = gateway.clone();
        affected.status = Some(GatewayStatus::default());
        affected.status.as_mut().unwrap().conditions = vec![condition("DNSPolicyAffected")];
        let mut programmed = affected.clone();
        programmed
            .status
            .as_mut()
            .unwrap()
            .conditions
            .push(condition("Programmed"));
        let mut addressed = affected.clone();
        addressed.status.as_mut().unwrap().addresses = vec![GatewayStatusAddress {
            type_: None,
            value: "10.0.0.1".into(),
        }];
        let mut moved = gateway.clone();
        moved.metadata.labels = Some([(PLACEMENT_LABEL.into(), "elsewhere".into())].into());
        let mut finalized = gateway.clone();
        finalized.metadata.finalizers = Some(vec!["meridian.dev/gateway-placement".into()]);
        let mut deleting = gateway.clone();
        deleting.metadata.deletion_timestamp = Some(crate::now());
        let cases: [(Option<&Gateway>, &Gateway, bool, &str); 7] = [
            (None, &gateway, true, "a new Gateway"),
            (Some(&gateway), &affected, false, "our DNSPolicyAffected"),
            (
                Some(&affected),
                &programmed,
                false,
                "another controller's condition",
            ),
            (
                Some(&affected),
                &addressed,
                true,
                "an address (distributed mode reads it)",
            ),
            (Some(&gateway), &moved, true, "another placement"),
            (Some(&gateway), &finalized, false, "placement's finalizer"),
            (Some(&gateway), &deleting, true, "being deleted"),
        ];
        for (old, new, changed, case) in cases {
            assert_eq!(gateway_changed_for_dns(old, new), changed, "{case}");
        }
    }

    #[test]
    fn a_policy_status_write_does_not_wake_the_policy() {
        let mut stored = (*policy("gateways", "api", "api")).clone();
        stored.metadata.generation = Some(1);
        let mut with_status = stored.clone();
        with_status.status = Some(Default::default());
        with_status.status.as_mut().unwrap().conditions = vec![condition("Enforced")];
        let mut edited = stored.clone();
        edited.metadata.generation = Some(2);
        let mut finalized = stored.clone();
        finalized.metadata.finalizers = Some(vec!["meridian.dev/dns-policy".into()]);
        let mut deleting = stored.clone();
        deleting.metadata.deletion_timestamp = Some(crate::now());
        let cases: [(Option<&DNSPolicy>, &DNSPolicy, bool, &str); 5] = [
            (None, &stored, true, "a new policy"),
            (Some(&stored), &with_status, false, "its status"),
            (Some(&stored), &edited, true, "a new generation"),
            (Some(&stored), &finalized, true, "its finalizer"),
            (Some(&stored), &deleting, true, "being deleted"),
        ];
        for (old, new, changed, case) in cases {
            assert_eq!(policy_changed_beyond_status(old, new), changed, "{case}");
        }
    }

    #[test]
    fn a_record_wakes_its_policy_when_it_changes_not_when_it_is_created() {
        use meridian_api::kuadrant::{DNSRecordSpec, DNSRecordStatus};
        let spec: DNSRecordSpec = serde_json::from_value(serde_json::json!({
            "rootHost": "api.example.com",
            "managedZone": { "name": "example" },
        }))
        .expect("a minimal record");
        let mut record = DNSRecord::new("api-http", spec);
        record.metadata.namespace = Some("gateways".into());
        let mut published = record.clone();
        published.status = Some(DNSRecordStatus {
            observed_generation: Some(1),
            ..Default::default()
        });
        let mut edited = record.clone();
        edited.spec.root_host = "www.example.com".into();
        let mut deleting = record.clone();
        deleting.metadata.deletion_timestamp = Some(crate::now());
        let mut finalized = record.clone();
        finalized.metadata.finalizers = Some(vec!["meridian.dev/dns-record".into()]);
        let cases: [(Option<&DNSRecord>, &DNSRecord, bool, &str); 5] = [
            (None, &record, false, "created (by its policy)"),
            (Some(&record), &published, true, "published"),
            (Some(&record), &edited, true, "edited by someone"),
            (Some(&record), &deleting, true, "being deleted"),
            (Some(&record), &finalized, false, "its finalizer"),
        ];
        for (old, new, changed, case) in cases {
            assert_eq!(record_changed_for_policy(old, new), changed, "{case}");
        }
    }

    #[test]
    fn cluster_status_changes_do_not_concern_dns() {
        let mut cluster = ManagedCluster::new("c1", Default::default());
        cluster.metadata.labels =
            Some([("kuadrant.io/lb-attribute-geo-code".into(), "IE".into())].into());
        let mut status_only = cluster.clone();
        status_only.metadata.resource_version = Some("2".into());
        let mut relabelled = cluster.clone();
        relabelled.metadata.labels =
            Some([("kuadrant.io/lb-attribute-geo-code".into(), "US".into())].into());
        assert!(!cluster_changed_for_dns(Some(&cluster), &status_only));
        assert!(cluster_changed_for_dns(Some(&cluster), &relabelled));
        assert!(cluster_changed_for_dns(None, &cluster));
    }

    #[test]
    fn a_heartbeat_wakes_policies_only_when_it_ends_a_silence() {
        let at = |s: i64| Some(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let timeout = std::time::Duration::from_secs(120);
        let cases = [
            (at(100), at(130), false, "a regular renewal"),
            (at(100), at(221), true, "back after more than the timeout"),
            (None, at(100), true, "a first heartbeat"),
            (at(100), None, false, "no renewal time"),
        ];
        for (previous, renewed, wakes, what) in cases {
            assert_eq!(
                heartbeat_revives(previous, renewed, timeout),
                wakes,
                "{what}"
            );
        }
    }

    fn from_json<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> Arc<K> {
        Arc::new(serde_json::from_value(value).expect("a valid object"))
    }

    #[test]
    fn a_secret_concerns_the_zones_it_credits_and_the_records_that_use_it() {
        let zone = |namespace: &str, name: &str, secret: Option<&str>| -> Arc<ManagedZone> {
            let mut spec = serde_json::json!({ "domainName": format!("{name}.example.com") });
            if let Some(secret) = secret {
                spec["dnsProviderSecretRef"] = serde_json::json!({ "name": secret });
            }
            from_json(serde_json::json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
                "metadata": { "name": name, "namespace": namespace },
                "spec": spec,
            }))
        };
        let record = |namespace: &str, name: &str, zone: &str, headers: Option<&str>| {
            let mut spec = serde_json::json!({
                "rootHost": "api.example.com",
                "managedZone": { "name": zone },
                "endpoints": [],
            });
            if let Some(headers) = headers {
                spec["healthCheck"] =
                    serde_json::json!({ "additionalHeadersRef": { "name": headers } });
            }
            from_json::<DNSRecord>(serde_json::json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
                "metadata": { "name": name, "namespace": namespace },
                "spec": spec,
            }))
        };
        let zones = [
            zone("a", "aws", Some("aws-credentials")),
            zone("a", "embedded", None),
            zone("b", "aws", Some("aws-credentials")),
        ];
        let records = [
            record("a", "on-aws", "aws", None),
            record("a", "on-embedded", "embedded", None),
            record("a", "probed", "embedded", Some("probe-auth")),
            record("b", "on-aws", "aws", None),
        ];
        let cases = [
            ("a", "aws-credentials", vec!["a/aws"], vec!["a/on-aws"]),
            ("b", "aws-credentials", vec!["b/aws"], vec!["b/on-aws"]),
            ("a", "probe-auth", vec![], vec!["a/probed"]),
            ("b", "probe-auth", vec![], vec![]),
            ("a", "unrelated", vec![], vec![]),
        ];
        for (namespace, secret, want_zones, want_records) in cases {
            assert_eq!(
                names(zones_using_secret(&zones, namespace, secret)),
                want_zones,
                "zones of {namespace}/{secret}"
            );
            assert_eq!(
                names(records_using_secret(&records, &zones, namespace, secret)),
                want_records,
                "records of {namespace}/{secret}"
            );
        }
    }

    #[test]
    fn only_a_secret_a_probe_names_is_one_whose_headers_are_sent() {
        let probe = from_json::<DNSHealthCheckProbe>(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSHealthCheckProbe",
            "metadata": { "name": "p", "namespace": "a" },
            "spec": { "address": "192.0.2.1", "host": "api.example.com", "port": 443,
                      "protocol": "HTTPS", "path": "/", "interval": "10s",
                      "additionalHeadersRef": { "name": "probe-auth" } },
        }));
        let probes = [probe];
        assert!(probes_send_headers_of(&probes, "a", "probe-auth"));
        assert!(!probes_send_headers_of(&probes, "b", "probe-auth"));
        assert!(!probes_send_headers_of(&probes, "a", "other"));
    }
}
