//! Pure indexes over the watch caches that several controllers share: which clusters a
//! placement decided, which Gateways, DNSPolicies and records a change to a cluster, a
//! placement, a zone or a Secret concerns, and whether a zone or an object changed beyond its
//! status. The controllers' triggers are built from these and from each controller's own
//! predicates, which sit beside its triggers (`reconcile/*/triggers.rs`, the hub's
//! `controller/*/triggers.rs`), so a change reconciles only what it can affect.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::labels::{
    GATEWAY_BUNDLE_LABEL, GATEWAY_WORK_LABEL, PLACEMENT_LABEL, bundle_entries,
};
use meridian_api::upstream::{Gateway, ListenerSet, ManifestWork, PlacementDecision};

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

/// A policy's group in the policy cache: the Gateway it targets, or the ListenerSet
/// ([`listener_set_policies`]).
pub fn policy_group(policy: &DNSPolicy) -> Option<String> {
    let (namespace, name) = policy_target(policy);
    Some(if policy.spec.target_ref.is_listener_set() {
        listener_set_policies(namespace, name)
    } else {
        group_key(namespace, name)
    })
}

/// The group in the policy cache of the policies targeting the ListenerSet `namespace/name`:
/// apart from those of a Gateway of that name (names hold no `/`).
pub fn listener_set_policies(namespace: &str, name: &str) -> String {
    format!("{namespace}/ListenerSet/{name}")
}

/// A record's group in the record cache: the policy that wrote it (by its label; a record an
/// admin wrote is in none).
pub fn record_group(record: &DNSRecord) -> Option<String> {
    let policy = record.labels().get(crate::POLICY_LABEL)?;
    Some(group_key(record.metadata.namespace.as_deref()?, policy))
}

/// A PlacementDecision's groups in the decision cache: its Placement, and each cluster it
/// decides ([`cluster_group`]), so a cluster's pass finds the Placements that chose it without
/// going through every decision.
pub fn decision_groups(decision: &PlacementDecision) -> Vec<String> {
    let placement = decision
        .labels()
        .get(PLACEMENT_LABEL)
        .zip(decision.metadata.namespace.as_deref())
        .map(|(placement, namespace)| group_key(namespace, placement));
    let clusters = decision
        .status
        .iter()
        .flat_map(|status| &status.decisions)
        .filter(|d| !d.cluster_name.is_empty())
        .map(|d| cluster_group(&d.cluster_name));
    placement.into_iter().chain(clusters).collect()
}

/// The group of what concerns one cluster (the decisions that chose it, the hub's works in its
/// namespace): apart from a Placement's (`namespace/name`: a cluster name has no `:`).
pub fn cluster_group(cluster: &str) -> String {
    format!("cluster:{cluster}")
}

/// A ManifestWork's groups in the work cache: the hub Gateways it places (a Gateway's own work
/// by its [`GATEWAY_WORK_LABEL`], a cluster's bundle by each of its entries), and, for either,
/// its cluster ([`cluster_group`]). Other works are in no group.
pub fn work_groups(work: &ManifestWork) -> Vec<String> {
    let cluster = work.metadata.namespace.as_deref().map(cluster_group);
    if let Some(label) = work.labels().get(GATEWAY_WORK_LABEL) {
        return [label.clone()].into_iter().chain(cluster).collect();
    }
    if work.labels().contains_key(GATEWAY_BUNDLE_LABEL) {
        return bundle_entries(work.metadata.annotations.as_ref())
            .into_keys()
            .chain(cluster)
            .collect();
    }
    Vec::new()
}

/// A Gateway's group in the Gateway cache: the Placement it follows.
pub fn gateway_group(gateway: &Gateway) -> Option<String> {
    let (namespace, placement) = gateway_placement(gateway)?;
    Some(group_key(namespace, placement))
}

/// A ListenerSet's group in the ListenerSet cache: the Gateway it names
/// ([`crate::decide::listener_sets::parent`]).
pub fn listener_set_group(set: &ListenerSet) -> Option<String> {
    let (namespace, name) = crate::decide::listener_sets::parent(set)?;
    Some(group_key(&namespace, &name))
}

/// The Gateways a change to a ListenerSet concerns, as `(namespace, name)`: the one it names,
/// and the one it named `before` when it moved (`before` is none for a new ListenerSet,
/// `after` none for a deleted one). A change to its status or metadata alone concerns none.
pub fn gateways_of_listener_set_change(
    before: Option<&ListenerSet>,
    after: Option<&ListenerSet>,
) -> BTreeSet<(String, String)> {
    if let (Some(before), Some(after)) = (before, after)
        && before.spec == after.spec
        && before.metadata.deletion_timestamp == after.metadata.deletion_timestamp
    {
        return BTreeSet::new();
    }
    [before, after]
        .into_iter()
        .flatten()
        .filter_map(crate::decide::listener_sets::parent)
        .collect()
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

/// The object a policy targets (a Gateway, or a ListenerSet): namespace and name (borrowed, as
/// for [`gateway_placement`]).
pub fn policy_target(policy: &DNSPolicy) -> (&str, &str) {
    let target = &policy.spec.target_ref;
    let namespace = target
        .namespace
        .as_deref()
        .or(policy.metadata.namespace.as_deref())
        .unwrap_or_default();
    (namespace, target.name.as_str())
}

/// The Gateway a policy is enforced on, as (namespace, name): the one it targets, or the parent
/// of the ListenerSet it targets, when `sets` holds that ListenerSet.
pub fn policy_gateway(policy: &DNSPolicy, sets: &[Arc<ListenerSet>]) -> Option<(String, String)> {
    let (namespace, name) = policy_target(policy);
    if !policy.spec.target_ref.is_listener_set() {
        return Some((namespace.to_string(), name.to_string()));
    }
    let set = sets.iter().find(|s| {
        s.metadata.namespace.as_deref() == Some(namespace)
            && s.metadata.name.as_deref() == Some(name)
    })?;
    crate::decide::listener_sets::parent(set)
}

/// The policies enforced on one of `gateways` (namespace, name): those targeting it, and those
/// targeting a ListenerSet of `sets` that names it.
pub fn policies_targeting(
    policies: &[Arc<DNSPolicy>],
    sets: &[Arc<ListenerSet>],
    gateways: &BTreeSet<(String, String)>,
) -> Vec<ObjectRef<DNSPolicy>> {
    policies
        .iter()
        .filter(|p| policy_gateway(p, sets).is_some_and(|gateway| gateways.contains(&gateway)))
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
    // A policy for a ListenerSet marks no Gateway.
    let targeted: BTreeSet<(&str, &str)> = policies
        .iter()
        .filter(|p| !p.spec.target_ref.is_listener_set())
        .map(|p| policy_target(p))
        .collect();
    gateways
        .iter()
        .filter(|g| {
            g.status.as_ref().is_some_and(|status| {
                status
                    .conditions
                    .iter()
                    // Either domain: a Gateway an older release marked in Kuadrant's loses it too.
                    .any(|c| {
                        meridian_api::conditions::DNS_POLICY_AFFECTED_TYPES
                            .contains(&c.type_.as_str())
                    })
            })
        })
        .filter(|g| {
            let namespace = g.metadata.namespace.as_deref().unwrap_or_default();
            !targeted.contains(&(namespace, g.metadata.name.as_deref().unwrap_or_default()))
        })
        .cloned()
        .collect()
}

/// The policies whose Gateway is placed on `cluster` (with `sets`, the ListenerSets policies
/// may target).
pub fn policies_on_cluster(
    policies: &[Arc<DNSPolicy>],
    sets: &[Arc<ListenerSet>],
    gateways: &[Arc<Gateway>],
    decisions: &[Arc<PlacementDecision>],
    cluster: &str,
) -> Vec<ObjectRef<DNSPolicy>> {
    let placements = placements_deciding(decisions, cluster);
    policies_of_placements(policies, sets, gateways, &placements)
}

/// The policies whose Gateway follows one of `placements`.
pub fn policies_of_placements(
    policies: &[Arc<DNSPolicy>],
    sets: &[Arc<ListenerSet>],
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
    policies_targeting(policies, sets, &targets)
}

/// The ManagedClusters whose agents vote on a record's health: those its policy's Gateway is
/// placed on (`policy`, the one the record's label names in its namespace; `None` when that
/// policy is gone, and then nobody votes; `sets`, the ListenerSet it may target). A record
/// written by hand answers for its namespace's Gateways, so the clusters any of them is placed
/// on vote. An agent of any other cluster probes the record's leaves too, but its verdict
/// withdraws nothing: a cluster the tenant's placement never chose is not the tenant's witness.
pub fn record_voters(
    record: &DNSRecord,
    policy: Option<&DNSPolicy>,
    sets: &[Arc<ListenerSet>],
    gateways: &[Arc<Gateway>],
    decisions: &[Arc<PlacementDecision>],
) -> BTreeSet<String> {
    let namespace = record.metadata.namespace.as_deref().unwrap_or_default();
    let placements: BTreeSet<(&str, &str)> = if record.labels().contains_key(crate::POLICY_LABEL) {
        let Some(target) = policy.and_then(|policy| policy_gateway(policy, sets)) else {
            return BTreeSet::new();
        };
        // A policy aimed at another namespace's Gateway (or ListenerSet of one) is refused,
        // and its placement is no witness for this namespace's records.
        if Some(target.0.as_str()) != policy.and_then(|p| p.metadata.namespace.as_deref()) {
            return BTreeSet::new();
        }
        gateways
            .iter()
            .filter(|g| {
                (g.metadata.namespace.as_deref(), g.metadata.name.as_deref())
                    == (Some(target.0.as_str()), Some(target.1.as_str()))
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

/// Whether a ManagedZone changed in what records and policies read of it: its spec (domain,
/// provider Secret, ID), its plan guard's annotations (threshold, approvals), the provider
/// its status names (what policies are assessed against), whether its routing delegate is
/// published (its `RoutingDelegated` condition), or its being deleted. The rest of
/// its status (the record count, rewritten as records are published) concerns none of them;
/// reading it as a change would wake every policy and record of the zone for each record
/// published.
pub fn zone_changed_for_dns(old: Option<&ManagedZone>, new: &ManagedZone) -> bool {
    let provider = |zone: &ManagedZone| zone.status.as_ref().and_then(|s| s.provider.clone());
    // Whether a routing delegate may be used (`zone_delegates` in the policy's gather).
    let delegated = |zone: &ManagedZone| {
        zone.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == meridian_api::conditions::ROUTING_DELEGATED)
                .map(|c| (c.status.clone(), c.observed_generation))
        })
    };
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
            || provider(old) != provider(new)
            || delegated(old) != delegated(new)
    })
}

/// Whether an object changed beyond its status: its spec (the generation counts spec changes of
/// a kind with a status subresource), or the metadata a reconcile reads (labels, annotations,
/// finalizers, owners, being deleted, a new object under the same name). For a kind whose
/// status only its own controller writes (DNSPolicy, DNSRecord), a write of it read back as a
/// change would reconcile the object again at once: often from a cache that had not yet seen
/// the write, which then wrote the same status again; and for a failing object, outside its
/// backoff. A kind without generations always counts as changed.
pub fn changed_beyond_status<K: kube::Resource>(old: Option<&K>, new: &K) -> bool {
    let Some(old) = old else {
        return true;
    };
    let (old, new) = (old.meta(), new.meta());
    old.generation.is_none()
        || old.generation != new.generation
        || old.uid != new.uid
        || old.deletion_timestamp != new.deletion_timestamp
        || old.finalizers != new.finalizers
        || old.labels != new.labels
        || old.annotations != new.annotations
        || old.owner_references != new.owner_references
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listener_set_concerns_its_gateways_by_its_spec_and_deletion() {
        use meridian_api::upstream::ListenerSet;
        let set = |parent: &str, host: &str| -> ListenerSet {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
                "metadata": { "name": "extra", "namespace": "shop" },
                "spec": {
                    "parentRef": { "name": parent },
                    "listeners": [{ "name": "a", "hostname": host, "port": 80, "protocol": "HTTP" }],
                },
            }))
            .unwrap()
        };
        let first = set("web", "a.example.com");
        let mut labelled = first.clone();
        labelled.metadata.labels = Some([("team".to_string(), "a".to_string())].into());
        let mut deleting = first.clone();
        deleting.metadata.deletion_timestamp = Some(crate::now());
        let (listener, moved) = (set("web", "b.example.com"), set("api", "a.example.com"));
        let gateways = |names: &[&str]| -> BTreeSet<(String, String)> {
            names
                .iter()
                .map(|n| ("shop".to_string(), n.to_string()))
                .collect()
        };
        let cases = [
            (None, Some(&first), gateways(&["web"]), "a new ListenerSet"),
            (
                Some(&first),
                Some(&labelled),
                gateways(&[]),
                "its metadata alone",
            ),
            (
                Some(&first),
                Some(&listener),
                gateways(&["web"]),
                "a listener",
            ),
            (
                Some(&first),
                Some(&moved),
                gateways(&["web", "api"]),
                "moved to another Gateway",
            ),
            (
                Some(&first),
                Some(&deleting),
                gateways(&["web"]),
                "being deleted",
            ),
            (Some(&first), None, gateways(&["web"]), "deleted"),
        ];
        for (before, after, expected, case) in cases {
            assert_eq!(
                gateways_of_listener_set_change(before, after),
                expected,
                "{case}"
            );
        }
    }
    use meridian_testkit::fixtures;

    fn decision(namespace: &str, placement: &str, clusters: &[&str]) -> Arc<PlacementDecision> {
        fixtures::placement_decision(namespace, placement, clusters).arc()
    }

    fn gateway(namespace: &str, name: &str, placement: Option<&str>) -> Arc<Gateway> {
        let gateway = fixtures::gateway(namespace, name);
        match placement {
            Some(placement) => gateway.placement(placement).arc(),
            None => gateway.arc(),
        }
    }

    fn policy(namespace: &str, name: &str, gateway: &str) -> Arc<DNSPolicy> {
        fixtures::dns_policy(namespace, name, gateway).arc()
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
                fixtures::names(policies_on_cluster(
                    &policies,
                    &[],
                    &gateways,
                    &decisions,
                    cluster
                )),
                expected,
                "{cluster}"
            );
        }
        let placements: BTreeSet<PlacementKey> = [("gw".to_string(), "web".to_string())].into();
        assert_eq!(
            fixtures::names(policies_of_placements(
                &policies,
                &[],
                &gateways,
                &placements
            )),
            ["gw/web-dns"],
            "a placement's decision concerns the policies of its Gateways"
        );
        assert_eq!(
            fixtures::names(policies_in_namespace(&policies, "team")),
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
            fixtures::names(policies_targeting(&[Arc::new(p)], &[], &targets)),
            ["gw/cross"]
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
        let mut served = counted.clone();
        served.status.as_mut().unwrap().provider = Some("webhook".into());
        assert!(
            zone_changed_for_dns(Some(&counted), &served),
            "its provider known: what its policies are assessed against"
        );
        let mut delegated = served.clone();
        meridian_api::conditions::set_condition(
            &mut delegated.status.as_mut().unwrap().conditions,
            meridian_api::conditions::ConditionUpdate {
                type_: meridian_api::conditions::ROUTING_DELEGATED,
                status: true,
                reason: "Published",
                message: "klb.example.com is delegated".into(),
            },
            None,
            &crate::now(),
        );
        assert!(
            zone_changed_for_dns(Some(&served), &delegated),
            "its routing delegate published: where its policies' trees go"
        );
    }

    fn bare_record(namespace: &str, name: &str) -> DNSRecord {
        record(namespace, name).build()
    }

    fn record(namespace: &str, name: &str) -> fixtures::Fixture<DNSRecord> {
        fixtures::dns_record(namespace, name, "example").root_host("api.example.com")
    }

    fn owned_record(namespace: &str, name: &str, owner: &DNSPolicy) -> Arc<DNSRecord> {
        record(namespace, name).owned_by(owner).arc()
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
            let voters: Vec<String> = record_voters(&record, policy, &[], &gateways, &decisions)
                .into_iter()
                .collect();
            assert_eq!(voters, expected, "{what}");
        }
    }

    #[test]
    fn records_of_deleted_policies_are_found_by_owner_uid() {
        let kept = fixtures::dns_policy("gw", "web", "web")
            .uid("uid-web")
            .arc();
        let deleted = fixtures::dns_policy("gw", "api", "api")
            .uid("uid-api")
            .arc();
        let recreated = fixtures::dns_policy("gw", "api", "api")
            .uid("uid-api-2")
            .arc();
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
            fixtures::names(records_of_deleted_policies(
                &records,
                std::slice::from_ref(&kept)
            )),
            ["gw/api-http"],
            "only the record whose policy is gone; records nobody's policy wrote are left alone"
        );
        assert_eq!(
            fixtures::names(records_of_deleted_policies(
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
                vec![fixtures::condition("kuadrant.io/DNSPolicyAffected")];
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

    #[test]
    fn a_policy_status_write_does_not_wake_the_policy() {
        let mut stored = (*policy("gateways", "api", "api")).clone();
        stored.metadata.generation = Some(1);
        let mut with_status = stored.clone();
        with_status.status = Some(Default::default());
        with_status.status.as_mut().unwrap().conditions = vec![fixtures::condition("Enforced")];
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
            assert_eq!(changed_beyond_status(old, new), changed, "{case}");
        }
    }

    #[test]
    fn a_record_status_write_alone_is_no_change_of_the_record() {
        let record = |generation: Option<i64>| {
            let mut record: DNSRecord = serde_json::from_value(serde_json::json!({
                "apiVersion": "kuadrant.io/v1alpha1",
                "kind": "DNSRecord",
                "metadata": { "name": "web", "namespace": "dns", "uid": "u1", "resourceVersion": "1" },
                "spec": { "managedZone": { "name": "zone" }, "endpoints": [] },
            }))
            .expect("a minimal record");
            record.metadata.generation = generation;
            record
        };
        let old = record(Some(1));
        let mut status_only = old.clone();
        status_only.metadata.resource_version = Some("2".into());
        status_only.status = Some(Default::default());
        assert!(!changed_beyond_status(Some(&old), &status_only));

        let mut spec = status_only.clone();
        spec.metadata.generation = Some(2);
        let mut annotated = status_only.clone();
        annotated
            .annotations_mut()
            .insert("test/round".into(), "1".into());
        let mut deleting = status_only.clone();
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        let mut released = status_only.clone();
        released.metadata.finalizers = Some(vec!["meridian.dev/x".into()]);
        let mut recreated = status_only.clone();
        recreated.metadata.uid = Some("u2".into());
        for (what, new) in [
            ("spec", &spec),
            ("annotations", &annotated),
            ("deletion", &deleting),
            ("finalizers", &released),
            ("uid", &recreated),
        ] {
            assert!(changed_beyond_status(Some(&old), new), "{what}");
        }
        assert!(changed_beyond_status(None, &old), "a new object");
        assert!(
            changed_beyond_status(Some(&record(None)), &record(None)),
            "without generations every change counts"
        );
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
                fixtures::names(zones_using_secret(&zones, namespace, secret)),
                want_zones,
                "zones of {namespace}/{secret}"
            );
            assert_eq!(
                fixtures::names(records_using_secret(&records, &zones, namespace, secret)),
                want_records,
                "records of {namespace}/{secret}"
            );
        }
    }
}
