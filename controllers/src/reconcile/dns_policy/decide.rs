//! Decide (pure): from what was gathered, the drain steps due, the fleet brake when a cluster
//! is silent, the addresses the policy excludes, and the records the policy wants. What the decision says to remember is kept by
//! [`super::enforce`] after it; nothing here reads a cache, a clock or a memory.

use std::collections::BTreeMap;
use std::time::Duration;

use meridian_api::kuadrant::DrainingCluster;
use meridian_dns::drain::{DrainState, drain_step, next_step_in};
use meridian_dns::tree::Strategy;

use super::gather::Seen;
use crate::decide::desired::{
    Desired, DesiredRecord, PlacedCluster, delegated_record_name, desired_branch, desired_records,
    no_addresses_yet,
};
use crate::decide::silence::SilenceRules;
use crate::reconcile::fleet_brake::{self, BrakeLook};

/// What enforcing a policy does, decided.
#[derive(Debug)]
pub struct Decision {
    /// The records the policy wants.
    pub desired: Desired,
    /// Where each draining or returning cluster stands after this pass: the policy's drain
    /// memory for the next.
    pub drains: BTreeMap<String, DrainState>,
    /// The clusters draining or returning, for status.
    pub draining: Vec<DrainingCluster>,
    /// When the next drain step is due.
    pub drain_recheck: Option<Duration>,
    /// The fleet brake, when one of the clusters is silent (a steady fleet never looks).
    pub brake: Option<BrakeLook>,
    /// What the zones' providers cannot hold of the records, each naming the record: the
    /// policy is refused while there is any ([`unsupported`]).
    pub unsupported: Vec<String>,
}

/// Takes each cluster one drain step further where one is due (`marked`: whether its
/// ManagedCluster carries the drain label), from where the last pass left them (`None`: the
/// policy has not been looked at since this process started). Returns the clusters that drain
/// or return, with where they stand.
pub fn step_drains(
    recalled: Option<&BTreeMap<String, DrainState>>,
    marked: &[(String, bool)],
    now: u64,
    step_seconds: u64,
) -> BTreeMap<String, DrainState> {
    let restarted = recalled.is_none();
    marked
        .iter()
        .filter_map(|(cluster, marked)| {
            let before = recalled.and_then(|states| states.get(cluster)).copied();
            drain_step(before, *marked, now, step_seconds, restarted)
                .map(|state| (cluster.clone(), state))
        })
        .collect()
}

/// The policy's decision, from what was gathered: the whole tree on the hub, this cluster's
/// branch in distributed mode.
pub fn decide(seen: &Seen, distributed: bool) -> Decision {
    let drains = step_drains(
        seen.drains.as_ref(),
        &seen.marked_for_drain,
        seen.now_seconds,
        seen.drain_step_seconds,
    );
    let mut clusters = seen.clusters.clone();
    let excluded = seen.excluded.apply(&mut clusters);
    // The policy is assessed as it asks, without a drain's steps (see `unsupported`).
    let undrained = (!drains.is_empty()).then(|| clusters.clone());
    let mut draining = Vec::new();
    let mut drain_recheck: Option<Duration> = None;
    for cluster in &mut clusters {
        let Some(state) = drains.get(&cluster.name) else {
            continue;
        };
        cluster.weight_percent = state.percent;
        draining.push(DrainingCluster {
            cluster: cluster.name.clone(),
            weight_percent: state.percent,
            phase: if state.draining {
                "Draining"
            } else {
                "Returning"
            }
            .to_string(),
        });
        if let Some(next) = next_step_in(state, seen.now_seconds, seen.drain_step_seconds) {
            let next = Duration::from_secs(next);
            drain_recheck = Some(drain_recheck.map_or(next, |r| r.min(next)));
        }
    }
    // The fleet is only looked at when one of these clusters is silent: a steady fleet costs
    // no walk over every cluster.
    let brake = seen.fleet.as_ref().map(|fleet| {
        fleet_brake::decide(
            &fleet.heard,
            fleet.recalled,
            seen.now,
            seen.silence.timeout,
            fleet.threshold_percent,
        )
    });
    let silence = SilenceRules {
        brake: brake.map(|look| look.brake).unwrap_or_default(),
        ..seen.silence
    };
    let build = |clusters: &[PlacedCluster]| {
        if distributed {
            desired_branch(
                &seen.gateway_ref,
                &seen.listeners,
                &seen.strategy,
                &clusters[0],
                &seen.zones,
            )
        } else {
            desired_records(
                &seen.gateway_ref,
                &seen.listeners,
                &seen.strategy,
                clusters,
                &seen.zones,
                &silence,
            )
        }
    };
    let mut desired = build(&clusters);
    // A cluster excluded whole has no address because the policy said so, not "yet".
    desired.waiting.retain(|note| {
        !excluded
            .emptied
            .iter()
            .any(|cluster| *note == no_addresses_yet(cluster))
    });
    desired.excluded = excluded.notes;
    // What the ListenerSets add is the Gateway-wide policy's to explain (`gather` leaves the
    // problems to it).
    desired
        .problems
        .extend(seen.listener_set_problems.iter().cloned());
    refuse_foreign(&mut desired, &seen.foreign_records);
    // Of the records that would be written (not another owner's), as the policy asks them.
    let written = |records: Vec<DesiredRecord>| -> Vec<DesiredRecord> {
        records
            .into_iter()
            .filter(|r| desired.records.iter().any(|d| d.name == r.name))
            .collect()
    };
    let assessed = match &undrained {
        Some(undrained) => {
            unsupported_by_record(&written(build(undrained).records), &seen.zone_fidelity)
        }
        None => unsupported_by_record(&desired.records, &seen.zone_fidelity),
    };
    // At a zone with a routing delegate (on the hub: in distributed mode no cluster sees the
    // whole tree to move), every loadbalanced tree goes to the delegate, what the provider
    // could hold too: a tree whose shape follows the fleet (one location left, weights made
    // equal) would otherwise flip between the provider and the delegate, and each flip
    // withdraws one half while resolvers still hold the other.
    let (mut to_delegate, mut unsupported): (BTreeMap<_, _>, BTreeMap<_, _>) = assessed
        .into_iter()
        .partition(|(_, (zone, _))| !distributed && seen.zone_delegates.contains_key(zone));
    if !distributed && matches!(seen.strategy, Strategy::LoadBalanced(_)) {
        for record in &desired.records {
            if seen.zone_delegates.contains_key(&record.zone) {
                to_delegate
                    .entry(record.name.clone())
                    .or_insert_with(|| (record.zone.clone(), Vec::new()));
            }
        }
    }
    desired.records = delegate_records(
        std::mem::take(&mut desired.records),
        &to_delegate,
        seen,
        &mut unsupported,
    );
    let mut unsupported: Vec<String> = unsupported
        .into_values()
        .flat_map(|(_, messages)| messages)
        .collect();
    if distributed {
        unsupported.extend(unseen_in_a_branch(
            &seen.strategy,
            &desired.records,
            &seen.zone_fidelity,
        ));
    }
    if let Some(ttl) = seen.answer_ttl {
        for record in &mut desired.records {
            meridian_dns::tree::set_answer_ttl(&mut record.endpoints, &record.root_host, ttl);
        }
    }
    Decision {
        desired,
        drains,
        draining,
        drain_recheck,
        brake,
        unsupported,
    }
}

/// In distributed mode a cluster builds only its own branch, which never shows the fleet's
/// other weights or locations: at a zone of plain records, what the policy asks for that could
/// differ across clusters (a `geo` section, a custom weight other than the default) is refused
/// by the spec, so that every cluster decides the same.
fn unseen_in_a_branch(
    strategy: &Strategy,
    records: &[DesiredRecord],
    fidelity: &BTreeMap<String, meridian_dns::fidelity::Fidelity>,
) -> Vec<String> {
    let Strategy::LoadBalanced(lb) = strategy else {
        return Vec::new();
    };
    let mut asks = Vec::new();
    if lb.default_geo.is_some() {
        asks.push("GEO answers (a geo section)");
    }
    if lb.custom.iter().any(|c| c.weight != lb.default_weight) {
        asks.push("unequal weights (custom weights)");
    }
    if asks.is_empty() {
        return Vec::new();
    }
    let mut zones: Vec<(&str, &str)> = records
        .iter()
        .filter_map(|r| {
            let fidelity = fidelity.get(&r.zone)?;
            (fidelity.weights == meridian_dns::fidelity::Support::Missing)
                .then_some((r.zone.as_str(), fidelity.provider))
        })
        .collect();
    zones.sort_unstable();
    zones.dedup();
    zones
        .into_iter()
        .map(|(zone, provider)| {
            format!(
                "ManagedZone {zone}: {provider} has no weighted or GEO answers, and the policy asks for {} (in distributed mode each cluster sees only its own branch, so the policy is refused by what it asks)",
                asks.join(" and ")
            )
        })
        .collect()
}

/// What the providers of the records' zones cannot hold of them (missing, not approximated),
/// by record name: the record's zone, and each finding naming the record. Drains are left out
/// by the caller: their steps are Meridian's, and a provider of plain records publishes a
/// draining cluster until it weighs 0. A zone whose provider is not known yet is not assessed
/// (its records then refuse at publication).
pub fn unsupported_by_record(
    records: &[DesiredRecord],
    fidelity: &BTreeMap<String, meridian_dns::fidelity::Fidelity>,
) -> BTreeMap<String, (String, Vec<String>)> {
    records
        .iter()
        .filter_map(|record| Some((record, fidelity.get(&record.zone)?)))
        .filter_map(|(record, fidelity)| {
            let messages: Vec<String> = meridian_dns::fidelity::assess(fidelity, &record.endpoints)
                .into_iter()
                .filter(|finding| finding.missing)
                .map(|finding| format!("ManagedZone {}: {}", record.zone, finding.message))
                .collect();
            (!messages.is_empty()).then(|| (record.name.clone(), (record.zone.clone(), messages)))
        })
        .collect()
}

/// Splits each record of `to_delegate` (with what its provider cannot hold of it) between its
/// zone and the zone's routing delegate (`meridian_dns::delegation`): the zone keeps the
/// host's CNAME into the delegate, unprobed, and a second record, in the delegate, holds the
/// rest of the tree. A record that cannot be split (its host is the zone's apex, the delegate
/// is not below the zone, the second record's name is taken) stays whole, and when the
/// provider cannot hold it, is added to `unsupported`, with why.
fn delegate_records(
    records: Vec<DesiredRecord>,
    to_delegate: &BTreeMap<String, (String, Vec<String>)>,
    seen: &Seen,
    unsupported: &mut BTreeMap<String, (String, Vec<String>)>,
) -> Vec<DesiredRecord> {
    let names: std::collections::BTreeSet<String> =
        records.iter().map(|r| r.name.clone()).collect();
    let records_named = |name: &str| names.contains(name);
    let mut split = Vec::with_capacity(records.len());
    for record in records {
        let Some((zone, messages)) = to_delegate.get(&record.name) else {
            split.push(record);
            continue;
        };
        let delegate = &seen.zone_delegates[zone];
        let domain = seen
            .zones
            .iter()
            .find(|z| z.name == *zone)
            .map(|z| z.domain.as_str())
            .unwrap_or_default();
        let name = delegated_record_name(&record.name);
        let split_result = if records_named(&name) {
            Err(format!(
                "its delegated record's name {name} is another listener's record"
            ))
        } else {
            meridian_dns::delegation::delegate(
                &record.root_host,
                domain,
                &delegate.domain,
                &record.endpoints,
            )
            .map_err(|error| error.to_string())
        };
        match split_result {
            // The delegated half first: writing it, `write_records` learns whether its name is
            // another owner's before pointing the host into it.
            Ok(delegated) => {
                split.push(DesiredRecord {
                    name,
                    listener: record.listener.clone(),
                    root_host: delegated.delegated_root,
                    zone: delegate.name.clone(),
                    endpoints: delegated.delegated,
                    warnings: Vec::new(),
                    health_checked: true,
                });
                split.push(DesiredRecord {
                    endpoints: delegated.parent,
                    health_checked: false,
                    ..record
                });
            }
            // A tree the provider holds as it is stays whole where it cannot move.
            Err(_) if messages.is_empty() => split.push(record),
            Err(error) => {
                let mut messages = messages.clone();
                messages.push(format!(
                    "ManagedZone {zone}: {}: not delegated to ManagedZone {}: {error}",
                    record.root_host, delegate.name
                ));
                unsupported.insert(record.name.clone(), (zone.clone(), messages));
                split.push(record);
            }
        }
    }
    split
}

/// Leaves out the records another owner holds under the name this policy's would have, and
/// says why: what that owner publishes stays as it is.
fn refuse_foreign(desired: &mut Desired, foreign: &BTreeMap<String, String>) {
    desired.records.retain(|record| {
        let Some(holder) = foreign.get(&record.name) else {
            return true;
        };
        desired
            .problems
            .push(crate::decide::desired::foreign_record_note(
                &record.listener,
                &record.name,
                holder,
            ));
        false
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::desired::{ListenerRef, PlacedCluster, ZoneRef};
    use crate::decide::exclude::Exclusions;
    use meridian_api::meridian::{GatewayReport, ReportedAddress};
    use meridian_dns::tree::{GatewayRef, Strategy};
    use meridian_testkit::fixtures;

    fn placed(name: &str, address: &str) -> PlacedCluster {
        PlacedCluster {
            name: name.into(),
            labels: Default::default(),
            cluster_id: Some(format!("id-{name}")),
            gateway: Some(GatewayReport {
                name: "web".into(),
                namespace: "kuadrant-shop".into(),
                addresses: vec![ReportedAddress {
                    type_: "IPAddress".into(),
                    value: address.into(),
                }],
                listeners: Vec::new(),
            }),
            silent_for: None,
            weight_percent: 100,
        }
    }

    /// [`placed`], in the GEO group `geo`.
    fn in_geo(name: &str, address: &str, geo: &str) -> PlacedCluster {
        PlacedCluster {
            labels: [(
                meridian_dns::tree::GEO_CODE_LABEL.to_string(),
                geo.to_string(),
            )]
            .into(),
            ..placed(name, address)
        }
    }

    fn seen(clusters: Vec<PlacedCluster>, excluded: &[&str]) -> Seen {
        let now = k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap();
        Seen {
            gateway: fixtures::gateway("shop", "web").arc(),
            gateway_ref: GatewayRef {
                name: "web".into(),
                namespace: "shop".into(),
            },
            listeners: vec![ListenerRef {
                name: "api".into(),
                hostname: Some("api.example.com".into()),
            }],
            listener_set_problems: Vec::new(),
            gateway_wide: true,
            coverable: Vec::new(),
            rivals: Vec::new(),
            handed_over: Vec::new(),
            foreign_records: BTreeMap::new(),
            strategy: Strategy::Simple,
            answer_ttl: None,
            excluded: Exclusions::parse(
                &excluded.iter().map(|e| e.to_string()).collect::<Vec<_>>(),
            )
            .unwrap(),
            zones: vec![ZoneRef {
                name: "zone".into(),
                domain: "example.com".into(),
            }],
            zone_fidelity: BTreeMap::new(),
            zone_delegates: BTreeMap::new(),
            clusters,
            silence: SilenceRules::immediate(),
            fleet: None,
            marked_for_drain: Vec::new(),
            drains: Some(BTreeMap::new()),
            drain_step_seconds: 60,
            now,
            now_seconds: 1_000,
            key: "DNSPolicy/shop/p".into(),
        }
    }

    #[test]
    fn excluded_addresses_are_not_published_and_status_says_why_not_yet() {
        let clusters = vec![
            placed("spoke-1", "10.0.0.1"),
            placed("spoke-2", "192.0.2.2"),
        ];
        let decision = decide(&seen(clusters.clone(), &["10.0.0.0/8"]), false);
        let targets: Vec<&String> = decision.desired.records[0]
            .endpoints
            .iter()
            .flat_map(|e| &e.targets)
            .collect();
        assert_eq!(targets, ["192.0.2.2"]);
        assert!(
            decision.desired.waiting.is_empty(),
            "{:?}",
            decision.desired.waiting
        );
        assert_eq!(decision.desired.excluded.len(), 1);
        assert!(
            decision.desired.excluded[0].starts_with("spoke-1: every address"),
            "{:?}",
            decision.desired.excluded
        );
        // Without the exclusion both are published, and nothing is said.
        let decision = decide(&seen(clusters, &[]), false);
        assert_eq!(decision.desired.records[0].endpoints[0].targets.len(), 2);
        assert!(decision.desired.excluded.is_empty());
    }

    #[test]
    fn a_record_another_owner_holds_under_the_listeners_name_is_left_alone_and_named() {
        let clusters = vec![placed("spoke-1", "192.0.2.1")];
        let mut seen = seen(clusters, &[]);
        assert_eq!(decide(&seen, false).desired.records[0].name, "web-api");
        // Another Gateway `web-api`'s policy (or a hand-written record) holds `web-api`.
        seen.foreign_records = [(
            "web-api".to_string(),
            "DNSPolicy other, which targets another Gateway".to_string(),
        )]
        .into();
        let desired = decide(&seen, false).desired;
        assert!(desired.records.is_empty(), "{:?}", desired.records);
        assert_eq!(
            desired.problems,
            [
                "listener api: DNSRecord web-api exists and is held by DNSPolicy other, which targets another Gateway; it is not overwritten (rename the listener or the Gateway, or remove that record)"
            ]
        );
    }

    #[test]
    fn a_policy_its_zone_cannot_hold_is_refused_by_name_and_a_drain_alone_never_is() {
        use meridian_dns::fidelity::{ROUTE53, of_provider};
        use meridian_dns::tree::{CustomWeight, GEO_CODE_LABEL, LabelSelector, LoadBalancing};
        let mut seen = seen(
            vec![
                in_geo("spoke-1", "192.0.2.1", "GEO-EU"),
                in_geo("spoke-2", "192.0.2.2", "GEO-NA"),
            ],
            &[],
        );
        let lb = |default_geo: Option<&str>, custom: Vec<CustomWeight>| {
            Strategy::LoadBalanced(LoadBalancing {
                default_weight: 120,
                custom,
                default_geo: default_geo.map(str::to_string),
                tiers: None,
            })
        };
        let webhook = BTreeMap::from([("zone".to_string(), of_provider("webhook").unwrap())]);
        seen.strategy = lb(Some("GEO-EU"), Vec::new());
        seen.zone_fidelity = webhook.clone();
        assert_eq!(
            decide(&seen, false).unsupported,
            [
                "ManagedZone zone: klb.api.example.com: webhook has no GEO answers, and the geo codes *, GEO-EU, GEO-NA answer differently"
            ]
        );
        // A cluster's own branch cannot show the fleet's locations: refused by what it asks.
        let branch = decide(&seen, true).unsupported;
        assert!(
            branch
                .iter()
                .any(|m| m.contains("the policy asks for GEO answers (a geo section)")),
            "{branch:?}"
        );
        seen.zone_fidelity = BTreeMap::from([("zone".to_string(), ROUTE53)]);
        assert_eq!(decide(&seen, false).unsupported, Vec::<String>::new());
        assert_eq!(decide(&seen, true).unsupported, Vec::<String>::new());
        seen.zone_fidelity = BTreeMap::new();
        assert_eq!(
            decide(&seen, false).unsupported,
            Vec::<String>::new(),
            "a zone whose provider is not known yet is left to its records"
        );

        // One geo and equal weights: a zone of plain records holds it (every address), also
        // while a cluster drains through unequal weights.
        seen.zone_fidelity = webhook;
        seen.strategy = lb(None, Vec::new());
        seen.marked_for_drain = marked(&[("spoke-1", true)]);
        let decision = decide(&seen, false);
        assert!(
            decision.draining[0].weight_percent < 100,
            "{:?}",
            decision.draining
        );
        assert_eq!(decision.unsupported, Vec::<String>::new());
        // Unequal weights the policy asks for are refused.
        seen.marked_for_drain = Vec::new();
        seen.strategy = lb(
            None,
            vec![CustomWeight {
                selector: LabelSelector {
                    match_labels: [(GEO_CODE_LABEL.to_string(), "GEO-NA".to_string())].into(),
                    match_expressions: Vec::new(),
                },
                weight: 10,
            }],
        );
        assert_eq!(
            decide(&seen, false).unsupported,
            [
                "ManagedZone zone: default.klb.api.example.com: webhook has no weighted answers, and the weights differ (10, 120)"
            ]
        );
    }

    #[test]
    fn what_a_zone_cannot_hold_goes_to_its_routing_delegate_and_the_zone_keeps_a_cname() {
        use meridian_dns::fidelity::of_provider;
        use meridian_dns::model::RecordType;
        use meridian_dns::tree::LoadBalancing;
        let mut seen = seen(
            vec![
                in_geo("spoke-1", "192.0.2.1", "GEO-EU"),
                in_geo("spoke-2", "192.0.2.2", "GEO-NA"),
            ],
            &[],
        );
        seen.strategy = Strategy::LoadBalanced(LoadBalancing {
            default_weight: 120,
            custom: Vec::new(),
            default_geo: Some("GEO-EU".into()),
            tiers: None,
        });
        seen.zone_fidelity = BTreeMap::from([
            ("zone".to_string(), of_provider("webhook").unwrap()),
            ("klb".to_string(), of_provider("embedded").unwrap()),
        ]);
        seen.zones.push(ZoneRef {
            name: "klb".into(),
            domain: "klb.example.com".into(),
        });
        let whole = decide(&seen, false);
        assert_eq!(whole.unsupported.len(), 1, "{:?}", whole.unsupported);
        seen.zone_delegates = BTreeMap::from([(
            "zone".to_string(),
            ZoneRef {
                name: "klb".into(),
                domain: "klb.example.com".into(),
            },
        )]);
        let decision = decide(&seen, false);
        assert_eq!(decision.unsupported, Vec::<String>::new());
        let [delegated, parent] = &decision.desired.records[..] else {
            panic!("{:?}", decision.desired.records)
        };
        assert_eq!(
            (
                parent.name.as_str(),
                parent.zone.as_str(),
                parent.root_host.as_str()
            ),
            ("web-api", "zone", "api.example.com")
        );
        assert_eq!(parent.endpoints.len(), 1, "{:?}", parent.endpoints);
        // The CNAME has nothing to probe; the moved tree is probed.
        assert!(!parent.health_checked && delegated.health_checked);
        assert_eq!(parent.endpoints[0].record_type, RecordType::Cname);
        assert_eq!(parent.endpoints[0].targets, ["klb.api.klb.example.com"]);
        assert_eq!(
            (
                delegated.name.as_str(),
                delegated.zone.as_str(),
                delegated.root_host.as_str()
            ),
            ("web-api-delegated", "klb", "api.klb.example.com")
        );
        assert_eq!(
            delegated.endpoints.len() + 1,
            whole.desired.records[0].endpoints.len()
        );
        assert!(
            delegated
                .endpoints
                .iter()
                .all(|e| e.dns_name.ends_with(".api.klb.example.com")),
            "{:?}",
            delegated.endpoints
        );
        // What the delegate holds, the zone's provider never has to: nothing is refused.
        assert!(unsupported_by_record(&decision.desired.records, &seen.zone_fidelity).is_empty());
        // In distributed mode no cluster sees the whole tree to move: refused as before.
        assert!(!decide(&seen, true).unsupported.is_empty());
        // One location left, which the provider could hold: still delegated, so the host does
        // not flip between the provider and the delegate as the fleet changes.
        let everywhere = std::mem::take(&mut seen.clusters);
        seen.clusters = vec![in_geo("spoke-1", "192.0.2.1", "GEO-EU")];
        let one = decide(&seen, false);
        assert_eq!(one.unsupported, Vec::<String>::new());
        assert_eq!(
            one.desired
                .records
                .iter()
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>(),
            ["web-api-delegated", "web-api"]
        );
        seen.clusters = everywhere;
        // A delegate that is not below the zone: refused, saying why.
        seen.zone_delegates.get_mut("zone").unwrap().domain = "klb.example.net".into();
        let refused = decide(&seen, false).unsupported;
        assert!(
            refused
                .iter()
                .any(|m| m.contains("not delegated to ManagedZone klb: the delegated zone klb.example.net is not below the zone example.com")),
            "{refused:?}"
        );
    }

    fn marked(pairs: &[(&str, bool)]) -> Vec<(String, bool)> {
        pairs.iter().map(|(c, m)| (c.to_string(), *m)).collect()
    }

    #[test]
    fn drains_step_a_ttl_apart_and_return_the_same_way() {
        let step = 60;
        // A mark first seen takes the first step at once; the next waits a step.
        let first = step_drains(Some(&BTreeMap::new()), &marked(&[("a", true)]), 1_000, step);
        let a = first["a"];
        assert!(a.draining && a.percent < 100, "{a:?}");
        let early = step_drains(Some(&first), &marked(&[("a", true)]), 1_030, step);
        assert_eq!(early["a"].percent, a.percent, "not due yet");
        let later = step_drains(Some(&first), &marked(&[("a", true)]), 1_060, step);
        assert!(later["a"].percent < a.percent, "{later:?}");
        // The mark taken off: it returns, a step at a time, and is forgotten at full weight.
        let mut states = later;
        let mut now = 1_060;
        for _ in 0..10 {
            now += step;
            states = step_drains(Some(&states), &marked(&[("a", false)]), now, step);
        }
        assert!(states.is_empty(), "{states:?}");
    }

    #[test]
    fn after_a_restart_a_marked_cluster_is_taken_as_drained_and_an_unmarked_one_is_left_alone() {
        let states = step_drains(None, &marked(&[("a", true), ("b", false)]), 1_000, 60);
        assert_eq!(states["a"].percent, 0);
        assert!(!states.contains_key("b"));
    }

    /// A restart (in distributed mode, the way a cluster's drain label changes) takes each
    /// drain up where status left it: a half-drained cluster goes on in steps, and one whose
    /// mark went while the agent was down comes back in steps, not at once.
    #[test]
    fn after_a_restart_drains_go_on_from_the_step_status_says() {
        let status = |draining: &[(&str, u32, &str)]| meridian_api::kuadrant::DNSPolicyStatus {
            observed_generation: Some(1),
            draining: draining
                .iter()
                .map(|(cluster, percent, phase)| DrainingCluster {
                    cluster: cluster.to_string(),
                    weight_percent: *percent,
                    phase: phase.to_string(),
                })
                .collect(),
            ..Default::default()
        };
        let step = 60;
        let seeded = crate::reconcile::memory::drains::drains_in_status(
            Some(&status(&[("a", 50, "Draining"), ("b", 0, "Draining")])),
            1_000,
        );
        let states = step_drains(
            seeded.as_ref(),
            &marked(&[("a", true), ("b", false), ("c", true)]),
            1_000,
            step,
        );
        // Where status left them, the next step a whole step away.
        assert_eq!(states["a"].percent, 50);
        assert_eq!(states["b"].percent, 0);
        // A mark status never saw starts at the first step, as without a restart.
        assert_eq!(states["c"].percent, 50);
        let later = step_drains(
            Some(&states),
            &marked(&[("a", true), ("b", false), ("c", true)]),
            1_000 + step,
            step,
        );
        assert_eq!(later["a"].percent, 10);
        assert_eq!((later["b"].percent, later["b"].draining), (10, false));
        // No status written yet: as before, a marked cluster is taken as drained.
        assert_eq!(
            crate::reconcile::memory::drains::drains_in_status(None, 1_000),
            None
        );
        let unwritten = meridian_api::kuadrant::DNSPolicyStatus::default();
        assert_eq!(
            crate::reconcile::memory::drains::drains_in_status(Some(&unwritten), 1_000),
            None
        );
    }

    #[test]
    fn a_cluster_no_longer_placed_is_forgotten() {
        let first = step_drains(Some(&BTreeMap::new()), &marked(&[("a", true)]), 1_000, 60);
        let gone = step_drains(Some(&first), &marked(&[("b", false)]), 1_060, 60);
        assert!(gone.is_empty(), "{gone:?}");
    }
}
