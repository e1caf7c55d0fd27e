//! Priority tiers: of a weighted set whose records carry a `priority`, only the active tier is
//! published. The active tier is the best one (lowest number) with a healthy gateway, but a
//! recovered better tier takes traffic back only after it has stayed healthy for a hold-down,
//! and never sooner than one TTL after traffic last moved. Losing the active tier moves
//! traffic at once: waiting would serve a dead gateway.
//!
//! Pure: the caller keeps a [`TierMemory`] per record between passes and passes the time in.
//! Records without a `priority` pass through untouched, so a policy without tiers publishes
//! exactly what it did before tiers existed.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Endpoint, PRIORITY, WEIGHT, sort_endpoints};

/// What one record's tier choices remember between passes. Lost on restart, which only makes
/// a failback wait a full hold-down from the restart.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TierMemory {
    /// Per (set name, set identifier): since when (seconds) the record has had a healthy
    /// gateway without a break.
    live_since: BTreeMap<(String, String), u64>,
    /// Per set name: when (seconds) traffic last moved to another tier.
    switched_at: BTreeMap<String, u64>,
}

impl TierMemory {
    /// A memory read back from somewhere that outlives the process (in distributed mode, the
    /// shared zone): since when each (set name, set identifier) has been healthy, and when
    /// each set's traffic last moved.
    pub fn seeded(
        live_since: BTreeMap<(String, String), u64>,
        switched_at: BTreeMap<String, u64>,
    ) -> Self {
        Self {
            live_since,
            switched_at,
        }
    }
}

/// The inputs of one pass that are not records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TierClock {
    /// Now, in seconds.
    pub now: u64,
    /// Seconds a better tier must stay healthy before it takes traffic back.
    pub hold_down: u64,
}

/// The active tier of one weighted set, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveTier {
    /// The weighted set's name (`ie.klb.api.example.com`).
    pub set: String,
    pub priority: u32,
    /// Why it is this tier, for status.
    pub reason: String,
}

/// The outcome of one pass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TierChoice {
    /// The records to publish: only the active tier's of each set, without `priority`.
    pub endpoints: Vec<Endpoint>,
    pub active: Vec<ActiveTier>,
    /// Whether any set's traffic moved to another tier in this pass.
    pub switched: bool,
    /// When (seconds from now) a held-back better tier may take traffic back.
    pub recheck_after: Option<u64>,
}

/// The reason of a set served by its best tier with a healthy gateway.
pub const BEST_TIER: &str = "the best tier with a healthy gateway";

/// Default hold-down: twelve passing probes at the 5 s interval, and a whole default TTL, so
/// a gateway that passes a few probes between failures never gets traffic back.
pub const DEFAULT_HOLD_DOWN: u64 = 60;

/// A tier's standing in one set: its number, whether its records have weight, since when it
/// has been healthy.
#[derive(Debug, Clone, Copy)]
struct Tier {
    priority: u32,
    weighted: bool,
    live_since: u64,
}

impl Tier {
    /// Order of preference: tiers with weight before fully drained ones, then by number.
    fn rank(&self) -> (bool, u32) {
        (!self.weighted, self.priority)
    }
}

fn priority_of(endpoint: &Endpoint) -> Option<u32> {
    endpoint.property(PRIORITY)?.parse().ok()
}

fn weight_of(endpoint: &Endpoint) -> u64 {
    endpoint
        .property(WEIGHT)
        .and_then(|w| w.parse().ok())
        .unwrap_or(1)
}

/// Chooses the active tier of every weighted set with priorities in `healthy` (the record's
/// endpoints after health pruning: a record is there only while it leads to a healthy
/// gateway). `requested` is the whole tree with priorities; `published` what is published now
/// (without them), from which the tier serving now is read.
pub fn choose_tiers(
    healthy: &[Endpoint],
    requested: &[Endpoint],
    published: Option<&[Endpoint]>,
    memory: &mut TierMemory,
    clock: TierClock,
) -> TierChoice {
    let now = clock.now;
    let requested_priority: BTreeMap<(&str, &str), u32> = requested
        .iter()
        .filter_map(|e| {
            Some((
                (e.dns_name.as_str(), e.set_identifier.as_deref()?),
                priority_of(e)?,
            ))
        })
        .collect();
    let mut sets: BTreeMap<String, BTreeMap<u32, Tier>> = BTreeMap::new();
    let mut live_now: BTreeSet<(String, String)> = BTreeSet::new();
    for endpoint in healthy {
        let (Some(priority), Some(set_id)) = (priority_of(endpoint), &endpoint.set_identifier)
        else {
            continue;
        };
        let key = (endpoint.dns_name.clone(), set_id.clone());
        let since = *memory.live_since.entry(key.clone()).or_insert(now);
        live_now.insert(key);
        let tier = sets
            .entry(endpoint.dns_name.clone())
            .or_default()
            .entry(priority)
            .or_insert(Tier {
                priority,
                weighted: false,
                live_since: since,
            });
        tier.weighted |= weight_of(endpoint) > 0;
        tier.live_since = tier.live_since.min(since);
    }
    // A record that lost its gateway starts its hold-down again when it comes back.
    memory.live_since.retain(|key, _| live_now.contains(key));

    let mut choice = TierChoice::default();
    let mut chosen: BTreeMap<String, u32> = BTreeMap::new();
    for (set, tiers) in &sets {
        let serving = published.and_then(|published| {
            published
                .iter()
                .filter(|e| &e.dns_name == set)
                .filter_map(|e| {
                    requested_priority
                        .get(&(e.dns_name.as_str(), e.set_identifier.as_deref()?))
                        .copied()
                })
                .min()
        });
        let ttl = healthy
            .iter()
            .filter(|e| &e.dns_name == set)
            .map(|e| u64::from(e.record_ttl))
            .max()
            .unwrap_or(0);
        let held_for = |tier: &Tier| now.saturating_sub(tier.live_since);
        let settled = |tier: &&Tier| held_for(tier) >= clock.hold_down;
        let best = |candidates: &mut dyn Iterator<Item = &Tier>| {
            candidates.min_by_key(|t| t.rank()).copied()
        };
        let any_weighted = tiers.values().any(|t| t.weighted);
        let current = serving
            .and_then(|p| tiers.get(&p))
            .filter(|t| t.weighted || !any_weighted);
        let (active, reason) = match current {
            // Nothing served yet: the best tier, at once.
            None if serving.is_none() => {
                let tier = best(&mut tiers.values()).expect("a set has a tier");
                (tier, BEST_TIER.to_string())
            }
            // The serving tier lost its last healthy (or weighted) gateway: move now, to the
            // best tier that has been healthy for the hold-down if there is one.
            None => {
                let tier = best(&mut tiers.values().filter(settled))
                    .or_else(|| best(&mut tiers.values()))
                    .expect("a set has a tier");
                (
                    tier,
                    format!(
                        "tier {} has no healthy gateway left",
                        serving.unwrap_or_default()
                    ),
                )
            }
            Some(current) => {
                let since_switch = memory
                    .switched_at
                    .get(set)
                    .map_or(u64::MAX, |at| now.saturating_sub(*at));
                let better: Vec<&Tier> = tiers
                    .values()
                    .filter(|t| t.rank() < current.rank())
                    .collect();
                let ready = better
                    .iter()
                    .copied()
                    .filter(|t| held_for(t) >= clock.hold_down)
                    .min_by_key(|t| t.rank());
                match ready {
                    Some(tier) if since_switch >= ttl => (
                        *tier,
                        // Worded the same on every pass: status says it until the next move.
                        format!(
                            "tier {} took traffic back after its {} s hold-down",
                            tier.priority, clock.hold_down
                        ),
                    ),
                    _ => {
                        if let Some(wait) = better
                            .iter()
                            .map(|t| {
                                clock
                                    .hold_down
                                    .saturating_sub(held_for(t))
                                    .max(ttl.saturating_sub(since_switch.min(ttl)))
                            })
                            .min()
                        {
                            choice.recheck_after =
                                Some(choice.recheck_after.map_or(wait, |r| r.min(wait)).max(1));
                        }
                        let configured_best = requested_priority
                            .iter()
                            .filter(|((name, _), _)| name == set)
                            .map(|(_, p)| *p)
                            .min();
                        let reason = match (better.first(), configured_best) {
                            (Some(tier), _) => format!(
                                "tier {} is healthy again and takes traffic back after {} s of hold-down",
                                tier.priority, clock.hold_down
                            ),
                            (None, Some(best)) if best < current.priority => {
                                format!("tier {best} has no healthy gateway")
                            }
                            (None, _) => BEST_TIER.to_string(),
                        };
                        (*current, reason)
                    }
                }
            }
        };
        if serving.is_some_and(|p| p != active.priority) {
            memory.switched_at.insert(set.clone(), now);
            choice.switched = true;
        }
        chosen.insert(set.clone(), active.priority);
        choice.active.push(ActiveTier {
            set: set.clone(),
            priority: active.priority,
            reason,
        });
    }
    memory.switched_at.retain(|set, _| sets.contains_key(set));

    choice.endpoints = healthy
        .iter()
        .filter(|e| match (priority_of(e), chosen.get(&e.dns_name)) {
            (Some(priority), Some(active)) => priority == *active,
            _ => true,
        })
        .map(|e| {
            let mut e = e.clone();
            e.provider_specific.retain(|p| p.name != PRIORITY);
            e
        })
        .collect();
    sort_endpoints(&mut choice.endpoints);
    choice
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RecordType;
    use proptest::prelude::*;

    const SET: &str = "default.klb.api.example.com";

    fn member(target: &str, priority: u32, weight: u32) -> Endpoint {
        Endpoint::new(SET, RecordType::Cname, [target.to_string()], 30)
            .with_set_identifier(target)
            .with_property(WEIGHT, weight.to_string())
            .with_property(PRIORITY, priority.to_string())
    }

    /// eu (tier 1), us (tier 2), ap (tier 3), one cluster each.
    fn requested() -> Vec<Endpoint> {
        vec![
            member("eu", 1, 120),
            member("us", 2, 120),
            member("ap", 3, 120),
        ]
    }

    fn only(targets: &[&str]) -> Vec<Endpoint> {
        requested()
            .into_iter()
            .filter(|e| targets.contains(&e.targets[0].as_str()))
            .collect()
    }

    fn served(choice: &TierChoice) -> Vec<String> {
        choice
            .endpoints
            .iter()
            .filter(|e| e.dns_name == SET)
            .map(|e| e.targets[0].clone())
            .collect()
    }

    /// Runs passes at the given times with the given healthy targets, publishing each pass's
    /// answer, and returns what each pass served.
    fn run(passes: &[(u64, &[&str])], hold_down: u64) -> Vec<Vec<String>> {
        let mut memory = TierMemory::default();
        let mut published: Option<Vec<Endpoint>> = None;
        let mut out = Vec::new();
        for (now, healthy) in passes {
            let choice = choose_tiers(
                &only(healthy),
                &requested(),
                published.as_deref(),
                &mut memory,
                TierClock {
                    now: *now,
                    hold_down,
                },
            );
            out.push(served(&choice));
            published = Some(choice.endpoints);
        }
        out
    }

    #[test]
    fn records_without_priorities_pass_through_untouched() {
        let plain = vec![
            Endpoint::new(SET, RecordType::Cname, ["a".to_string()], 60)
                .with_set_identifier("a")
                .with_property(WEIGHT, "1"),
            Endpoint::new("a", RecordType::A, ["192.0.2.1".to_string()], 60),
        ];
        let mut expected = plain.clone();
        sort_endpoints(&mut expected);
        let choice = choose_tiers(
            &plain,
            &plain,
            None,
            &mut TierMemory::default(),
            TierClock {
                now: 0,
                hold_down: 60,
            },
        );
        assert_eq!(choice.endpoints, expected);
        assert!(choice.active.is_empty());
    }

    #[test]
    fn failover_is_immediate_and_failback_waits_for_the_hold_down() {
        let all: &[&str] = &["eu", "us", "ap"];
        /// (name, passes of (time, healthy targets), what each pass serves).
        type Case<'a> = (&'a str, &'a [(u64, &'a [&'a str])], &'a [&'a [&'a str]]);
        let cases: &[Case] = &[
            (
                "first publication takes the best tier",
                &[(0, all)],
                &[&["eu"]],
            ),
            (
                "the primary fails: the second tier at once; the third only when both fail",
                &[(0, all), (10, &["us", "ap"]), (20, &["ap"])],
                &[&["eu"], &["us"], &["ap"]],
            ),
            (
                "the primary recovers: back only after 60 s of health",
                &[
                    (0, all),
                    (10, &["us", "ap"]),
                    (100, all),
                    (130, all),
                    (159, all),
                    (160, all),
                ],
                &[&["eu"], &["us"], &["us"], &["us"], &["us"], &["eu"]],
            ),
            (
                "a flapping primary never gets traffic back",
                &[
                    (0, all),
                    (10, &["us", "ap"]),
                    (40, all),
                    (80, &["us", "ap"]),
                    (90, all),
                    (140, &["us", "ap"]),
                    (150, all),
                    (200, &["us", "ap"]),
                ],
                &[
                    &["eu"],
                    &["us"],
                    &["us"],
                    &["us"],
                    &["us"],
                    &["us"],
                    &["us"],
                    &["us"],
                ],
            ),
            (
                "the serving tier fails while a better one is still held: the better one, as it is healthy",
                &[(0, all), (10, &["us", "ap"]), (20, &["eu", "ap"])],
                &[&["eu"], &["us"], &["eu"]],
            ),
        ];
        for (name, passes, expected) in cases {
            let got = run(passes, 60);
            let expected: Vec<Vec<String>> = expected
                .iter()
                .map(|t| t.iter().map(|s| s.to_string()).collect())
                .collect();
            assert_eq!(got, expected, "{name}");
        }
    }

    #[test]
    fn traffic_moves_back_no_sooner_than_a_ttl_after_it_moved() {
        // Hold-down 0: the primary would take traffic back at once, but the TTL (30 s) holds it.
        let got = run(
            &[
                (0, &["eu", "us"]),
                (10, &["us"]),
                (20, &["eu", "us"]),
                (39, &["eu", "us"]),
                (40, &["eu", "us"]),
            ],
            0,
        );
        assert_eq!(
            got,
            [vec!["eu"], vec!["us"], vec!["us"], vec!["us"], vec!["eu"]]
        );
    }

    #[test]
    fn a_fully_drained_tier_hands_over_to_the_next_and_weights_hold_within_a_tier() {
        let requested = vec![
            member("eu-1", 1, 0),
            member("eu-2", 1, 0),
            member("us-1", 2, 100),
            member("us-2", 2, 20),
        ];
        let choice = choose_tiers(
            &requested,
            &requested,
            None,
            &mut TierMemory::default(),
            TierClock {
                now: 0,
                hold_down: 60,
            },
        );
        assert_eq!(served(&choice), ["us-1", "us-2"]);
        let weights: Vec<&str> = choice
            .endpoints
            .iter()
            .filter_map(|e| e.property(WEIGHT))
            .collect();
        assert_eq!(weights, ["100", "20"]);
        assert!(
            choice
                .endpoints
                .iter()
                .all(|e| e.property(PRIORITY).is_none())
        );
    }

    #[test]
    fn the_held_back_tier_says_when_to_look_again() {
        let mut memory = TierMemory::default();
        let clock = |now| TierClock { now, hold_down: 60 };
        let first = choose_tiers(&only(&["us"]), &requested(), None, &mut memory, clock(0));
        let second = choose_tiers(
            &only(&["eu", "us"]),
            &requested(),
            Some(&first.endpoints),
            &mut memory,
            clock(100),
        );
        assert_eq!(served(&second), ["us"]);
        assert_eq!(second.recheck_after, Some(60));
        assert!(second.active[0].reason.contains("takes traffic back"));
    }

    proptest! {
        /// Whatever the sequence of health, every pass serves exactly one tier, from the
        /// healthy records, and never an empty set while any record is healthy; when the best
        /// healthy tier has been healthy for the hold-down and a TTL has passed, it serves.
        #[test]
        fn one_healthy_tier_always_serves(
            steps in proptest::collection::vec((0u64..40, proptest::collection::vec(any::<bool>(), 3)), 1..30)
        ) {
            let names = ["eu", "us", "ap"];
            let mut memory = TierMemory::default();
            let mut published: Option<Vec<Endpoint>> = None;
            let mut now = 0;
            for (advance, up) in steps {
                now += advance;
                let healthy: Vec<&str> = names.iter().zip(&up).filter(|(_, u)| **u).map(|(n, _)| *n).collect();
                let choice = choose_tiers(&only(&healthy), &requested(), published.as_deref(), &mut memory, TierClock { now, hold_down: 60 });
                let serving = served(&choice);
                prop_assert_eq!(serving.len(), usize::from(!healthy.is_empty()));
                for target in &serving {
                    prop_assert!(healthy.contains(&target.as_str()));
                }
                published = Some(choice.endpoints);
            }
            // Everything healthy and quiet for longer than the hold-down and the TTL: the best.
            for _ in 0..2 {
                now += 61;
                let choice = choose_tiers(&only(&names), &requested(), published.as_deref(), &mut memory, TierClock { now, hold_down: 60 });
                published = Some(choice.endpoints);
            }
            let last = published.unwrap();
            prop_assert_eq!(last.iter().map(|e| e.targets[0].as_str()).collect::<Vec<_>>(), ["eu"]);
        }
    }
}
