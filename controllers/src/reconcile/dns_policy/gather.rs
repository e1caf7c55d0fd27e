//! What enforcing a policy reads, all from the shared caches: its Gateway, the rival
//! policies, the namespace's zones, and on the hub the clusters its Gateway is placed on.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use meridian_api::kuadrant::{DNSPolicy, DNSRecord};
use meridian_api::labels::{DRAIN_LABEL, PLACEMENT_LABEL};
use meridian_api::meridian::GatewayReport;
use meridian_api::upstream::Gateway;
use meridian_dns::tree::GatewayRef;

use crate::Context;
use crate::decide::desired::{ListenerRef, PlacedCluster, ZoneRef, downstream_namespace, silence};
use crate::decide::exclude::Exclusions;
use crate::decide::policy::routing_strategy;
use crate::decide::silence::{BrakeMemory, FleetBrake, SilenceRules};
use crate::reconcile::fleet_brake;
use crate::runtime::indexes;
use meridian_dns::drain::DrainState;
use meridian_dns::tree::Strategy;

/// Everything a policy's records are decided from.
#[derive(Debug)]
pub struct Seen {
    pub gateway: Arc<Gateway>,
    pub gateway_ref: GatewayRef,
    /// The Gateway's listeners, then those its ListenerSets add (keyed `<set>.<listener>`).
    pub listeners: Vec<ListenerRef>,
    /// Why ListenerSets naming the Gateway add nothing, or some of their listeners nothing.
    pub listener_set_problems: Vec<String>,
    /// The listener the policy targets, when it names one.
    pub section: Option<String>,
    /// The records of the listeners policies targeting them hold: left to them, never
    /// deleted by this policy (the holder takes each over in place, so its DNS never lapses).
    pub handed_over: Vec<String>,
    /// Records named as this policy's would be (`<gateway>-<listener>`) that another holds:
    /// name → who. Never overwritten ([`foreign_records`]).
    pub foreign_records: BTreeMap<String, String>,
    pub strategy: Strategy,
    /// The policy's `ttl` for the records health and choices change, seconds.
    pub answer_ttl: Option<u32>,
    /// The Gateway addresses the policy never publishes.
    pub excluded: Exclusions,
    /// The namespace's zones, by name.
    pub zones: Vec<ZoneRef>,
    /// On the hub, the clusters the Gateway is placed on; in distributed mode, this cluster.
    pub clusters: Vec<PlacedCluster>,
    /// How the silent ones among them are weighed, but for the fleet brake (decided).
    pub silence: SilenceRules,
    /// The fleet's heartbeats, when one of the clusters is silent.
    pub fleet: Option<FleetSeen>,
    /// Whether each cluster's ManagedCluster carries the drain label.
    pub marked_for_drain: Vec<(String, bool)>,
    /// Where the clusters' drains stood after the policy's last pass; `None` when there was
    /// none since this process started.
    pub drains: Option<BTreeMap<String, DrainState>>,
    /// Drains step a TTL apart, so resolvers' caches of one step expire before the next.
    pub drain_step_seconds: u64,
    /// The time the pass is decided at.
    pub now: Timestamp,
    pub now_seconds: u64,
    /// `DNSPolicy/namespace/name`: the policy's key in the memories.
    pub key: String,
}

/// What the fleet brake is decided from.
#[derive(Debug)]
pub struct FleetSeen {
    /// Every cluster's last heartbeat.
    pub heard: Vec<Timestamp>,
    /// What the brake held when last looked at.
    pub recalled: Option<BrakeMemory>,
    pub threshold_percent: u32,
}

/// Why a policy cannot be enforced; what was published stays published.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    TargetNotFound { gateway: String },
    Conflicted { gateway: String, holder: String },
    Invalid(String),
}

/// Whether `policy` targets the Gateway `namespace/name`.
pub fn targets(policy: &DNSPolicy, namespace: &str, name: &str) -> bool {
    let (target_namespace, target_name) = indexes::policy_target(policy);
    target_name == name && target_namespace == namespace
}

/// The listeners of its Gateway a policy leaves to others: a policy targeting one listener
/// (`sectionName`) holds that listener, and a Gateway-wide policy covers the listeners no
/// section-targeted policy holds (GEP-713: the more specific target wins). Between equals
/// (two policies for one listener, or two Gateway-wide ones) the oldest holds, then by name,
/// and the others are refused as `Conflicted`. `rivals` are the policies of the policy's
/// namespace targeting its Gateway, itself among them; `gateway` names it for messages.
pub fn coverage(
    policy: &DNSPolicy,
    rivals: &[DNSPolicy],
    listeners: &[String],
    gateway: &str,
) -> Result<Vec<String>, Refusal> {
    let section = policy.spec.target_ref.section_name.as_deref();
    if let Some(section) = section
        && !listeners.iter().any(|l| l == section)
    {
        return Err(Refusal::TargetNotFound {
            gateway: format!("{gateway} listener {section}"),
        });
    }
    let equals: Vec<DNSPolicy> = rivals
        .iter()
        .filter(|p| p.spec.target_ref.section_name.as_deref() == section)
        .cloned()
        .collect();
    if let Some(holder) = holder(&equals)
        && holder.uid() != policy.uid()
    {
        return Err(Refusal::Conflicted {
            gateway: match section {
                Some(section) => format!("{gateway} listener {section}"),
                None => gateway.to_string(),
            },
            holder: holder.name_any(),
        });
    }
    if section.is_some() {
        return Ok(Vec::new());
    }
    // Only a listener policy that can be enforced takes its listener: an invalid one would
    // leave the listener's record to nobody.
    let taken: std::collections::BTreeSet<String> = rivals
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| is_valid(p))
        .filter_map(|p| p.spec.target_ref.section_name.clone())
        .filter(|s| listeners.contains(s))
        .collect();
    Ok(taken.into_iter().collect())
}

/// Which policy covers each of the Gateway's `listeners`, by [`coverage`]'s rules: the
/// listener's own (`sectionName`) where it holds the listener and can be enforced, else the
/// Gateway-wide one where it does. `rivals` are every policy targeting the Gateway. A listener
/// no policy covers is left out.
pub fn listener_holders(
    rivals: &[DNSPolicy],
    listeners: &[String],
) -> std::collections::BTreeMap<String, String> {
    let enforceable = |section: Option<&str>| {
        let equals: Vec<DNSPolicy> = rivals
            .iter()
            .filter(|p| p.spec.target_ref.section_name.as_deref() == section)
            .cloned()
            .collect();
        holder(&equals)
            .filter(|p| is_valid(p))
            .map(ResourceExt::name_any)
    };
    let gateway_wide = enforceable(None);
    listeners
        .iter()
        .filter_map(|listener| {
            let policy = enforceable(Some(listener)).or_else(|| gateway_wide.clone())?;
            Some((listener.clone(), policy))
        })
        .collect()
}

/// The listeners whose records the policy leaves to others rather than delete: for a
/// Gateway-wide policy, those listener policies hold (`taken`); for a listener's, every other
/// listener when a Gateway-wide policy covers them (its `sectionName` moved, or went: the old
/// listener's record passes to that policy in place instead of being withdrawn).
fn handed_over(
    policy: &DNSPolicy,
    rivals: &[DNSPolicy],
    listeners: &[String],
    taken: &[String],
) -> Vec<String> {
    let Some(section) = policy.spec.target_ref.section_name.as_deref() else {
        return taken.to_vec();
    };
    let covered = rivals.iter().any(|p| {
        p.uid() != policy.uid()
            && p.metadata.deletion_timestamp.is_none()
            && p.spec.target_ref.section_name.is_none()
            && is_valid(p)
    });
    if !covered {
        return Vec::new();
    }
    listeners
        .iter()
        .filter(|l| *l != section)
        .cloned()
        .collect()
}

/// Whether the policy's own fields can be enforced (what [`gather`] refuses as `Invalid`).
pub fn is_valid(policy: &DNSPolicy) -> bool {
    target_namespace(policy).is_ok()
        && routing_strategy(policy.spec.routing_strategy, &policy.spec.load_balancing).is_ok()
        && answer_ttl(policy.spec.ttl.as_deref()).is_ok()
        && Exclusions::parse(&policy.spec.exclude_addresses).is_ok()
}

/// The policy that holds a Gateway (or a listener) when several target it: the oldest, then by
/// name.
fn holder(policies: &[DNSPolicy]) -> Option<&DNSPolicy> {
    policies
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .min_by(|a, b| {
            (
                a.metadata.creation_timestamp.as_ref().map(|t| t.0),
                a.name_any(),
            )
                .cmp(&(
                    b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    b.name_any(),
                ))
        })
}

/// The Gateway namespace a policy may target: its own. A `targetRef.namespace` naming another
/// is refused, as Gateway API refuses a reference across namespaces that the target's namespace
/// did not grant: a team with rights in one namespace would otherwise publish another team's
/// Gateway under its own names and write that Gateway's conditions.
pub fn target_namespace(policy: &DNSPolicy) -> Result<String, Refusal> {
    let namespace = policy.namespace().unwrap_or_default();
    match policy.spec.target_ref.namespace.as_deref() {
        None => Ok(namespace),
        Some(target) if target == namespace => Ok(namespace),
        Some(target) => Err(Refusal::Invalid(format!(
            "targetRef.namespace {target} is not the policy's namespace {namespace}: a DNSPolicy applies to a Gateway of its own namespace"
        ))),
    }
}

/// The policies of `policy`'s namespace that target its Gateway (in `gateway_namespace`),
/// itself among them.
pub fn rivals(policy: &DNSPolicy, gateway_namespace: &str, ctx: &Context) -> Vec<DNSPolicy> {
    let namespace = policy.namespace().unwrap_or_default();
    let target = &policy.spec.target_ref;
    ctx.caches
        .policies
        .group(&indexes::group_key(gateway_namespace, &target.name))
        .iter()
        .filter(|p| p.metadata.namespace.as_deref() == Some(namespace.as_str()))
        .filter(|p| targets(p, gateway_namespace, &target.name))
        .map(|p| (**p).clone())
        .collect()
}

/// How long a deleted section-targeted policy waits for the Gateway-wide policy to take its
/// listener's record over before it deletes the record anyway.
pub const HANDOVER_GRACE: std::time::Duration = std::time::Duration::from_secs(120);

/// The records a deleted `policy` leaves for another to take over in place, rather than
/// withdraw: its listener's, when it targets one and a valid policy not being deleted will
/// cover the listener once this one is gone (the Gateway-wide one, or another for the same
/// listener), for [`HANDOVER_GRACE`] after the deletion.
pub fn handed_back(policy: &DNSPolicy, rivals: &[DNSPolicy], now: Timestamp) -> Vec<String> {
    let Some(section) = policy.spec.target_ref.section_name.as_deref() else {
        return Vec::new();
    };
    // The Gateway-wide policy, or another policy for the same listener, takes it next.
    let successor = rivals.iter().any(|p| {
        p.uid() != policy.uid()
            && p.metadata.deletion_timestamp.is_none()
            && is_valid(p)
            && (p.spec.target_ref.section_name.is_none()
                || p.spec.target_ref.section_name.as_deref() == Some(section))
    });
    let within_grace = policy
        .metadata
        .deletion_timestamp
        .as_ref()
        .is_none_or(|deleted| {
            now.duration_since(deleted.0).as_secs() < HANDOVER_GRACE.as_secs() as i64
        });
    if successor && within_grace {
        vec![crate::decide::desired::record_name(
            &policy.spec.target_ref.name,
            section,
        )]
    } else {
        Vec::new()
    }
}

pub fn gather(policy: &DNSPolicy, ctx: &Context) -> Result<Seen, Refusal> {
    let namespace = policy.namespace().unwrap_or_default();
    let target = &policy.spec.target_ref;
    target_namespace(policy)?;
    let gateway_namespace = target
        .namespace
        .clone()
        .unwrap_or_else(|| namespace.clone());
    let Some(gateway) = ctx
        .caches
        .gateways
        .get(Some(&gateway_namespace), &target.name)
    else {
        return Err(Refusal::TargetNotFound {
            gateway: format!("{gateway_namespace}/{}", target.name),
        });
    };
    let rivals = rivals(policy, &gateway_namespace, ctx);
    let names: Vec<String> = gateway
        .spec
        .listeners
        .iter()
        .map(|l| l.name.clone())
        .collect();
    let taken = coverage(
        policy,
        &rivals,
        &names,
        &format!("{gateway_namespace}/{}", target.name),
    )?;
    let strategy = routing_strategy(policy.spec.routing_strategy, &policy.spec.load_balancing)
        .map_err(|problem| Refusal::Invalid(problem.to_string()))?;
    let answer_ttl = answer_ttl(policy.spec.ttl.as_deref()).map_err(Refusal::Invalid)?;
    let excluded = Exclusions::parse(&policy.spec.exclude_addresses).map_err(Refusal::Invalid)?;

    let mut zones: Vec<ZoneRef> = ctx
        .caches
        .zones
        .state()
        .iter()
        .filter(|zone| zone.namespace().as_deref() == Some(namespace.as_str()))
        .map(|zone| ZoneRef {
            name: zone.name_any(),
            domain: zone.spec.domain_name.clone(),
        })
        .collect();
    // In the order the API server lists them, so equal candidates resolve the same way.
    zones.sort_by(|a, b| a.name.cmp(&b.name));
    let mut listeners: Vec<ListenerRef> = gateway
        .spec
        .listeners
        .iter()
        .filter(|l| !taken.contains(&l.name))
        .map(|l| ListenerRef {
            name: l.name.clone(),
            hostname: l.hostname.clone(),
        })
        .collect();
    // The listeners of the ListenerSets the Gateway admits, as its own (a policy for one
    // listener of the Gateway covers none of them).
    let sets = crate::decide::listener_sets::attached(
        &gateway,
        &ctx.caches
            .listener_sets
            .group(&indexes::group_key(&gateway_namespace, &target.name)),
    );
    listeners.extend(
        sets.listeners
            .iter()
            .filter(|l| l.publish)
            .map(|l| ListenerRef {
                name: l.key.clone(),
                hostname: l.listener.hostname.clone(),
            }),
    );
    let mut listener_set_problems = sets.problems;
    let mut handed_over: Vec<String> = handed_over(policy, &rivals, &names, &taken)
        .iter()
        .map(|listener| crate::decide::desired::record_name(&target.name, listener))
        .collect();
    // Fail static: while ListenerSets cannot be read (not served, or not allowed), the records
    // their listeners published stay as they are: every record of the policy that none of
    // the Gateway's own listeners makes.
    if !ctx.caches.listener_sets.readable() && target.section_name.is_none() {
        let own: std::collections::BTreeSet<String> = names
            .iter()
            .map(|listener| crate::decide::desired::record_name(&target.name, listener))
            .collect();
        let kept: Vec<String> = records_of(policy, ctx)
            .iter()
            .map(ResourceExt::name_any)
            .filter(|name| !own.contains(name))
            .collect();
        if !kept.is_empty() {
            listener_set_problems.push(format!(
                "ListenerSets cannot be read (not served, or not allowed): DNSRecords {} stay as they are",
                kept.join(", ")
            ));
        }
        handed_over.extend(kept);
    }
    let clusters = match &ctx.config.distributed {
        None => placed_clusters(&gateway, ctx),
        // This cluster's branch alone, from the Gateway the policy targets here.
        Some(local) => vec![PlacedCluster {
            name: local.name.clone(),
            labels: local.labels.clone(),
            cluster_id: Some(local.cluster_id.clone()),
            gateway: Some(GatewayReport::from_gateway(&gateway, &[])),
            silent_for: None,
            weight_percent: 100,
        }],
    };
    let marked_for_drain: Vec<(String, bool)> = clusters
        .iter()
        .map(|c| (c.name.clone(), is_marked_for_drain(&c.labels)))
        .collect();
    let key = crate::object_key("DNSPolicy", Some(&namespace), &policy.name_any());
    let fleet = clusters
        .iter()
        .any(|c| c.silent_for.is_some())
        .then(|| FleetSeen {
            heard: fleet_brake::heard(ctx),
            recalled: ctx.brake_memory.recalled(),
            threshold_percent: ctx.config.fleet_brake_percent,
        });
    let silence = SilenceRules {
        timeout: ctx.config.heartbeat_timeout,
        health_checked: policy.spec.health_check.is_some(),
        brake: FleetBrake::default(),
        withdrawal_percent: ctx.config.silence_withdrawal_percent,
    };
    let now = (ctx.clock)();
    Ok(Seen {
        silence,
        gateway_ref: GatewayRef {
            name: gateway.name_any(),
            namespace: gateway_namespace,
        },
        gateway,
        handed_over,
        foreign_records: foreign_records(policy, &listeners, ctx),
        listeners,
        listener_set_problems,
        section: target.section_name.clone(),
        strategy,
        answer_ttl,
        excluded,
        zones,
        clusters,
        fleet,
        marked_for_drain,
        drains: ctx.drains.recalled(&key),
        drain_step_seconds: u64::from(answer_ttl.unwrap_or(meridian_dns::tree::LEAF_TTL)),
        now,
        now_seconds: now.as_second().max(0) as u64,
        key,
    })
}

/// The records this policy's listeners would be written as that exist and that another owner
/// holds ([`foreign_holder`]): name → who. Applying would take such a record over and
/// rewrite what its owner publishes.
fn foreign_records(
    policy: &DNSPolicy,
    listeners: &[ListenerRef],
    ctx: &Context,
) -> BTreeMap<String, String> {
    let namespace = policy.namespace().unwrap_or_default();
    let gateway = &policy.spec.target_ref.name;
    listeners
        .iter()
        .filter_map(|listener| {
            let name = crate::decide::desired::record_name(gateway, &listener.name);
            let record = ctx.caches.records.get(Some(&namespace), &name)?;
            Some((name, foreign_holder(&record, policy, ctx)?))
        })
        .collect()
}

/// Who holds `record` when it is neither this policy's nor free to take: `None` when it is
/// this policy's, another's on the same Gateway (they hand records over in place), or a
/// policy's that no longer exists (it goes with that policy). A record with no policy's label
/// (written by hand, or the hub's own) or of a policy on another Gateway (`a` + `b-c` and
/// `a-b` + `c` both make `a-b-c`) is another owner's.
pub fn foreign_holder(record: &DNSRecord, policy: &DNSPolicy, ctx: &Context) -> Option<String> {
    let namespace = policy.namespace().unwrap_or_default();
    let Some(holder) = record.labels().get(crate::POLICY_LABEL) else {
        return Some("no DNSPolicy (written by hand or by the hub)".to_string());
    };
    if *holder == policy.name_any() {
        return None;
    }
    let other = ctx.caches.policies.get(Some(&namespace), holder)?;
    let (gateway_namespace, gateway) = indexes::policy_target(policy);
    (!targets(&other, gateway_namespace, gateway))
        .then(|| format!("DNSPolicy {holder}, which targets another Gateway"))
}

/// Whether a ManagedCluster's labels mark it for drain: the drain label with any value but
/// `false`.
fn is_marked_for_drain(labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels
        .get(DRAIN_LABEL)
        .is_some_and(|value| !value.eq_ignore_ascii_case("false"))
}

/// The policy's `ttl` in whole seconds (at least one); the schema refuses what cannot be one,
/// this says why for a policy written before it did.
fn answer_ttl(ttl: Option<&str>) -> Result<Option<u32>, String> {
    let Some(text) = ttl else {
        return Ok(None);
    };
    meridian_api::duration::parse_duration(text)
        .map(|duration| u32::try_from(duration.as_secs().max(1)).unwrap_or(u32::MAX))
        .map(Some)
        .ok_or_else(|| format!("ttl {text:?} is not a duration such as 5s or 1m"))
}

/// The clusters the Gateway's Placement decided, with their labels, reports and silences,
/// from the caches. (A cluster going silent wakes the policy through the fleet's one silence
/// timer, [`super::triggers`].)
fn placed_clusters(gateway: &Gateway, ctx: &Context) -> Vec<PlacedCluster> {
    let namespace = gateway.namespace().unwrap_or_default();
    let Some(placement) = gateway.labels().get(PLACEMENT_LABEL) else {
        return Vec::new();
    };
    let decisions = ctx
        .caches
        .decisions
        .group(&indexes::group_key(&namespace, placement));
    let names = indexes::decided_clusters(&decisions, &namespace, placement);
    let downstream = downstream_namespace(&namespace);
    let now = (ctx.clock)();
    let mut clusters = Vec::new();
    for name in names {
        // A cluster that is gone from OCM is gone from DNS.
        let Some(cluster) = ctx.caches.clusters.get(None, &name) else {
            continue;
        };
        let report = ctx.report_of(&name);
        let heard = ctx.last_heard(&name, report.as_deref());
        let silent_for = silence(heard, now, ctx.config.heartbeat_timeout);
        clusters.push(PlacedCluster {
            name: name.clone(),
            labels: cluster.labels().clone(),
            silent_for,
            cluster_id: report.as_ref().map(|r| r.spec.cluster_id.clone()),
            gateway: report.and_then(|r| {
                r.spec
                    .gateways
                    .iter()
                    .find(|g| g.name == gateway.name_any() && g.namespace == downstream)
                    .cloned()
            }),
            weight_percent: 100,
        });
    }
    clusters
}

/// The policy's DNSRecords.
pub fn records_of(policy: &DNSPolicy, ctx: &Context) -> Vec<DNSRecord> {
    let namespace = policy.namespace().unwrap_or_default();
    ctx.caches
        .records
        .group(&indexes::group_key(&namespace, &policy.name_any()))
        .iter()
        .map(|r| (**r).clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(namespace: &str, target_namespace: Option<&str>) -> DNSPolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
            "metadata": { "name": "p", "namespace": namespace },
            "spec": { "targetRef": {
                "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "web",
                "namespace": target_namespace,
            } },
        }))
        .expect("a policy")
    }

    #[test]
    fn a_policy_reaches_only_its_own_namespaces_gateways() {
        assert_eq!(target_namespace(&policy("shop", None)), Ok("shop".into()));
        assert_eq!(
            target_namespace(&policy("shop", Some("shop"))),
            Ok("shop".into())
        );
        let Err(Refusal::Invalid(message)) = target_namespace(&policy("mallory", Some("shop")))
        else {
            panic!("another namespace's Gateway is refused");
        };
        assert!(message.contains("targetRef.namespace shop"), "{message}");
        assert!(message.contains("namespace mallory"), "{message}");
    }

    /// `name` created at second `created`, for `section` (or the whole Gateway).
    fn on_web(name: &str, created: i64, section: Option<&str>) -> DNSPolicy {
        let mut policy = policy("shop", None);
        policy.metadata.name = Some(name.into());
        policy.metadata.uid = Some(format!("uid-{name}"));
        policy.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::from_second(created).unwrap(),
            ));
        policy.spec.target_ref.section_name = section.map(str::to_string);
        policy
    }

    #[test]
    fn a_listener_policy_takes_its_listener_and_equals_conflict_oldest_first() {
        let listeners = ["api".to_string(), "www".to_string(), "shop".to_string()];
        let wide = on_web("wide", 10, None);
        let wide_later = on_web("wide-later", 20, None);
        let api = on_web("api", 30, Some("api"));
        let api_older = on_web("api-older", 5, Some("api"));
        let www = on_web("www", 40, Some("www"));
        let nowhere = on_web("nowhere", 50, Some("missing"));
        let mut deleting = on_web("shop", 1, Some("shop"));
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        let all = [
            wide.clone(),
            wide_later.clone(),
            api.clone(),
            api_older.clone(),
            www.clone(),
            nowhere.clone(),
            deleting.clone(),
        ];
        let conflicted = |holder: &str, gateway: &str| {
            Err(Refusal::Conflicted {
                gateway: gateway.into(),
                holder: holder.into(),
            })
        };
        let cases: [(&DNSPolicy, Result<Vec<String>, Refusal>); 7] = [
            // The Gateway-wide holder leaves every listener a listener policy targets (the
            // one being deleted leaves its own back).
            (&wide, Ok(vec!["api".into(), "www".into()])),
            (&wide_later, conflicted("wide", "shop/web")),
            (&api, conflicted("api-older", "shop/web listener api")),
            (&api_older, Ok(vec![])),
            (&www, Ok(vec![])),
            (
                &nowhere,
                Err(Refusal::TargetNotFound {
                    gateway: "shop/web listener missing".into(),
                }),
            ),
            // A policy being deleted holds nothing: an equal younger one takes over.
            (&on_web("shop-new", 60, Some("shop")), Ok(vec![])),
        ];
        for (policy, expected) in cases {
            let mut rivals = all.to_vec();
            if !rivals.iter().any(|r| r.uid() == policy.uid()) {
                rivals.push(policy.clone());
            }
            assert_eq!(
                coverage(policy, &rivals, &listeners, "shop/web"),
                expected,
                "{}",
                policy.name_any()
            );
        }
    }

    #[test]
    fn each_listener_names_the_policy_that_covers_it() {
        let listeners = [
            "api".to_string(),
            "www".to_string(),
            "shop".to_string(),
            "bad".to_string(),
        ];
        let mut deleting = on_web("shop", 1, Some("shop"));
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        let mut invalid = on_web("bad", 1, Some("bad"));
        invalid.spec.ttl = Some("soon".into());
        let rivals = [
            on_web("wide-later", 20, None),
            on_web("wide", 10, None),
            on_web("api", 30, Some("api")),
            on_web("api-older", 5, Some("api")),
            on_web("nowhere", 50, Some("missing")),
            deleting,
            invalid,
        ];
        let holders = listener_holders(&rivals, &listeners);
        let expected: std::collections::BTreeMap<String, String> = [
            // The oldest of equals, as coverage has it.
            ("api", "api-older"),
            // No listener policy: the Gateway-wide holder.
            ("www", "wide"),
            // One being deleted, or one that cannot be enforced, leaves it to the Gateway-wide.
            ("shop", "wide"),
            ("bad", "wide"),
        ]
        .into_iter()
        .map(|(l, p)| (l.to_string(), p.to_string()))
        .collect();
        assert_eq!(holders, expected);
        // With no Gateway-wide policy, a listener no policy holds is left out.
        let only_api = [on_web("api", 30, Some("api"))];
        assert_eq!(
            listener_holders(&only_api, &listeners),
            [("api".to_string(), "api".to_string())].into()
        );
    }

    #[test]
    fn a_deleted_listener_policy_hands_its_record_back_to_the_gateway_wide_one_for_a_while() {
        let mut api = on_web("api", 30, Some("api"));
        let deleted_at = Timestamp::from_second(100).unwrap();
        api.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(deleted_at),
        );
        let wide = on_web("wide", 10, None);
        let grace = HANDOVER_GRACE.as_secs() as i64;
        let at = |seconds: i64| Timestamp::from_second(100 + seconds).unwrap();
        assert_eq!(
            handed_back(&api, &[api.clone(), wide.clone()], at(1)),
            ["web-api"]
        );
        assert!(handed_back(&api, &[api.clone(), wide.clone()], at(grace)).is_empty());
        // No Gateway-wide policy to take it, or that one is going too: withdrawn.
        assert!(handed_back(&api, std::slice::from_ref(&api), at(1)).is_empty());
        let mut going = wide.clone();
        going.metadata.deletion_timestamp = api.metadata.deletion_timestamp.clone();
        assert!(handed_back(&api, &[api.clone(), going], at(1)).is_empty());
        // A Gateway-wide policy hands nothing back.
        let mut wide_deleted = wide.clone();
        wide_deleted.metadata.deletion_timestamp = api.metadata.deletion_timestamp.clone();
        assert!(handed_back(&wide_deleted, &[wide_deleted.clone(), api.clone()], at(1)).is_empty());
    }
}
