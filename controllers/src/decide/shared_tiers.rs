//! Priority tiers agreed through the zone (distributed mode), the pure part. On the hub one
//! process sees every cluster of a weighted set and publishes only the active tier's records
//! ([`meridian_dns::tiers`]); without a hub each cluster publishes only its own branch, so
//! each decides for its own records, from what every cluster of the set wrote in the zone.
//!
//! Each cluster keeps, per host, the TXT record `kuadrant.tier.<shortcode of its ID>.<host>`
//! with a value per weighted record it has in a set with priorities:
//! `owner=<ID>;set=<set name>;id=<set identifier>;priority=<n>;weight=<w>;live=<since>;serving=<since>`
//! (`-` for never). `live` is since when (Unix seconds) its gateway has been healthy without a
//! break, `serving` since when its record has been published. From them every cluster
//! computes the same active tier with the hub's rules (failover at once, failback after the
//! hold-down and no sooner than a TTL after the last move), and a restarted agent reads the
//! hold-down back from the zone instead of starting it again.
//!
//! A cluster's liveness is its own word (`live`), overruled by the fleet's: a gateway whose
//! every address the fleet agrees is failing ([`crate::decide::shared_health`]) is not live,
//! whatever its record says. A standby tier's leaf records stay published (nothing points at
//! them), so every cluster keeps probing them.
//!
//! A zone of plain records (RFC2136, webhooks) has no weighted records: the set is the host's
//! own A and AAAA records, which hold every serving cluster's addresses, and a cluster's
//! record is in the set when an address of its leaf is there ([`TierInputs::plain`]). Its
//! leaf records are published under the host as on any provider (no one resolves them), so
//! the fleet probes a standby and reads its ownership.
//!
//! Traffic moves make-before-break, since no one writes the whole set at once: a cluster
//! leaves a set for a better tier only once a live record of that tier is in the set, and a
//! failing cluster that is the last record of its set stays (with its leaf) until the tier
//! taking over has published. A set never goes empty on the way.

use std::collections::{BTreeMap, BTreeSet};

use meridian_dns::changes::{Changes, Update};
use meridian_dns::model::{Endpoint, PRIORITY, RecordType, WEIGHT, is_at_or_below, sort_endpoints};
use meridian_dns::shortcode::shortcode;
use meridian_dns::tiers::{BEST_TIER, TierClock, TierMemory, choose_tiers};

/// How long a tier record lives in resolvers (nobody resolves it; it is read by the API).
const TIER_TTL: u32 = 60;

const TIER_RECORD_PREFIX: &str = "kuadrant.tier.";
/// A wildcard host's tier records start with a label of their own: `*.example.com`'s and
/// `example.com`'s standings would otherwise share one record, each host's pass writing over
/// the other's.
const WILDCARD_TIER_RECORD_PREFIX: &str = "kuadrant.tier-wildcard.";

/// The name of `owner`'s tier record under a host.
pub fn tier_record_name(owner: &str, host: &str) -> String {
    let (prefix, base) = match host.strip_prefix("*.") {
        Some(base) => (WILDCARD_TIER_RECORD_PREFIX, base),
        None => (TIER_RECORD_PREFIX, host),
    };
    format!("{prefix}{}.{base}", shortcode(owner, 8))
}

/// One cluster's record in one weighted set with priorities, as its tier record says.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Standing {
    pub owner: String,
    /// The weighted set's name (`ie.klb.api.example.com`).
    pub set: String,
    /// The record's set identifier (its target).
    pub id: String,
    pub priority: u32,
    pub weight: u64,
    /// Since when (Unix seconds) its gateway has been healthy without a break.
    pub live_since: Option<u64>,
    /// Since when its record has been published.
    pub serving_since: Option<u64>,
}

fn since_text(since: Option<u64>) -> String {
    since.map_or_else(|| "-".to_string(), |at| at.to_string())
}

fn since_parse(text: &str) -> Option<Option<u64>> {
    match text {
        "-" => Some(None),
        at => at.parse().ok().map(Some),
    }
}

impl Standing {
    fn value(&self) -> String {
        format!(
            "owner={};set={};id={};priority={};weight={};live={};serving={}",
            self.owner,
            self.set,
            self.id,
            self.priority,
            self.weight,
            since_text(self.live_since),
            since_text(self.serving_since)
        )
    }

    /// A value as [`Standing::value`] writes it; anything else is passed over.
    fn parse(value: &str) -> Option<Self> {
        let fields: BTreeMap<&str, &str> = value
            .split(';')
            .filter_map(|field| field.split_once('='))
            .collect();
        Some(Self {
            owner: fields.get("owner")?.to_string(),
            set: fields.get("set")?.to_ascii_lowercase(),
            id: fields.get("id")?.to_string(),
            priority: fields.get("priority")?.parse().ok()?,
            weight: fields.get("weight")?.parse().ok()?,
            live_since: since_parse(fields.get("live")?)?,
            serving_since: since_parse(fields.get("serving")?)?,
        })
    }
}

fn is_tier_record(record: &Endpoint, base: &str) -> bool {
    record.record_type == RecordType::Txt
        && (record.dns_name.starts_with(TIER_RECORD_PREFIX)
            || record.dns_name.starts_with(WILDCARD_TIER_RECORD_PREFIX))
        && is_at_or_below(&record.dns_name, base)
}

/// Whether `record` holds a standing of `me`'s (a value of another form, or another owner's,
/// does not make it `me`'s to delete).
fn holds_standing_of(record: &Endpoint, me: &str) -> bool {
    record
        .targets
        .iter()
        .filter_map(|value| Standing::parse(value))
        .any(|standing| standing.owner == me)
}

/// Every cluster's standings under a host. A value is taken only from its owner's own record
/// (the name carries the owner's code), so a stray or mistaken value cannot speak for another
/// cluster.
pub fn read_standings(zone: &[Endpoint], host: &str) -> Vec<Standing> {
    let base = host.trim_start_matches("*.");
    let mut standings: Vec<Standing> = zone
        .iter()
        .filter(|e| is_tier_record(e, base))
        .flat_map(|record| {
            record
                .targets
                .iter()
                .filter_map(|value| Standing::parse(value))
                .filter(|standing| tier_record_name(&standing.owner, host) == record.dns_name)
                .collect::<Vec<_>>()
        })
        .collect();
    standings.sort();
    standings.dedup_by(|a, b| a.owner == b.owner && a.set == b.set && a.id == b.id);
    standings
}

/// The changes that delete every tier record of `me` at or below `apex` (a cluster purged
/// from a zone).
pub fn leave(me: &str, zone: &[Endpoint], apex: &str) -> Changes {
    let apex = apex.trim_start_matches("*.");
    let code = shortcode(me, 8);
    let prefixes = [TIER_RECORD_PREFIX, WILDCARD_TIER_RECORD_PREFIX].map(|p| format!("{p}{code}."));
    Changes {
        deletes: zone
            .iter()
            .filter(|e| is_tier_record(e, apex))
            .filter(|e| prefixes.iter().any(|p| e.dns_name.starts_with(p)))
            .filter(|e| holds_standing_of(e, me))
            .cloned()
            .collect(),
        ..Changes::default()
    }
}

/// The changes that delete `me`'s tier record of `host` alone (a record withdrawn): the
/// hosts under it, and its wildcard or apex, keep theirs.
pub fn leave_host(me: &str, zone: &[Endpoint], host: &str) -> Changes {
    let name = tier_record_name(me, host);
    Changes {
        deletes: zone
            .iter()
            .filter(|e| e.record_type == RecordType::Txt && e.dns_name == name)
            .filter(|e| holds_standing_of(e, me))
            .cloned()
            .collect(),
        ..Changes::default()
    }
}

/// One pass's inputs.
#[derive(Debug, Clone, Copy)]
pub struct TierInputs<'a> {
    /// This cluster's ID.
    pub me: &'a str,
    pub host: &'a str,
    /// This cluster's branch as requested, with priorities.
    pub requested: &'a [Endpoint],
    /// What it would publish before health (priorities taken off).
    pub proposed: &'a [Endpoint],
    /// What it would publish after health.
    pub healthy: &'a [Endpoint],
    /// The host's records as read.
    pub zone: &'a [Endpoint],
    /// The addresses the fleet agrees are failing.
    pub down: &'a BTreeSet<String>,
    pub clock: TierClock,
    /// The zone holds plain records: a record is in its set when an address of its leaf is
    /// among the host's own addresses (there are no weighted records to find).
    pub plain: bool,
}

/// What this cluster publishes after the tiers, and the change to its tier record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharedTiers {
    pub endpoints: Vec<Endpoint>,
    pub changes: Changes,
    /// For status.
    pub notes: Vec<String>,
    /// When (seconds from now) a held-back better tier may take traffic back.
    pub recheck_after: Option<u64>,
    /// Whether this pass takes one of this cluster's records out of its set for a better
    /// tier: the fleet's evidence, as a health withdrawal is.
    pub withdraws: bool,
}

/// Whether a record is `(set, id)`'s member.
fn is_member(record: &Endpoint, set: &str, id: &str) -> bool {
    record.dns_name == set && record.set_identifier.as_deref() == Some(id)
}

/// One pass of the shared tiers for the records of `inputs.me`.
pub fn decide(inputs: TierInputs<'_>) -> SharedTiers {
    let TierInputs {
        me,
        host,
        requested,
        proposed,
        healthy,
        zone,
        down,
        clock,
        plain,
    } = inputs;
    let now = clock.now;
    let everyone: Vec<Standing> = read_standings(zone, host)
        .into_iter()
        .map(|mut s| {
            // A time to come never counts: it would hold a hold-down or a move off for ever.
            s.live_since = s.live_since.map(|at| at.min(now));
            s.serving_since = s.serving_since.map(|at| at.min(now));
            s
        })
        .collect();
    let before: BTreeMap<(&str, &str), &Standing> = everyone
        .iter()
        .filter(|s| s.owner == me)
        .map(|s| ((s.set.as_str(), s.id.as_str()), s))
        .collect();
    // On plain records, the addresses the host answers with, and a leaf's: this cluster's
    // as it proposes them (its leaf may not be in the zone yet), another's as the zone has it.
    let is_address = |e: &Endpoint| matches!(e.record_type, RecordType::A | RecordType::Aaaa);
    let host_answers: BTreeSet<&str> = zone
        .iter()
        .filter(|e| is_address(e) && e.dns_name == host)
        .flat_map(|e| e.targets.iter().map(String::as_str))
        .collect();
    let leaf_answers = |id: &str| -> Vec<&str> {
        let named = |e: &&Endpoint| is_address(e) && e.dns_name == id;
        let own: Vec<&str> = proposed
            .iter()
            .filter(named)
            .flat_map(|e| e.targets.iter().map(String::as_str))
            .collect();
        if !own.is_empty() {
            return own;
        }
        zone.iter()
            .filter(named)
            .flat_map(|e| e.targets.iter().map(String::as_str))
            .collect()
    };
    let published = |set: &str, id: &str| {
        if plain {
            leaf_answers(id).iter().any(|a| host_answers.contains(a))
        } else {
            zone.iter().any(|e| is_member(e, set, id))
        }
    };

    // This cluster's standings as they are now.
    let mut mine: Vec<Standing> = requested
        .iter()
        .filter_map(|e| {
            let id = e.set_identifier.as_ref()?;
            let priority = e.property(PRIORITY)?.parse().ok()?;
            let weight = e.property(WEIGHT).and_then(|w| w.parse().ok()).unwrap_or(1);
            let live = healthy.iter().any(|h| is_member(h, &e.dns_name, id));
            let was = before.get(&(e.dns_name.as_str(), id.as_str()));
            Some(Standing {
                owner: me.to_string(),
                set: e.dns_name.clone(),
                id: id.clone(),
                priority,
                weight,
                live_since: live.then(|| was.and_then(|w| w.live_since).unwrap_or(now)),
                serving_since: was.and_then(|w| w.serving_since),
            })
        })
        .collect();
    mine.sort();
    let my_sets: BTreeSet<&str> = mine.iter().map(|s| s.set.as_str()).collect();
    let my_ids: BTreeSet<(&str, &str)> = mine
        .iter()
        .map(|s| (s.set.as_str(), s.id.as_str()))
        .collect();
    // The others that count: in one of this cluster's sets, owners of records under the host
    // (the standing of no one who publishes here, a forged owner's, is passed over), and
    // never speaking for one of this cluster's own records.
    let owners = crate::decide::shared_health::host_owners(zone, host);
    let others: Vec<Standing> = everyone
        .iter()
        .filter(|s| s.owner != me && owners.contains(&s.owner))
        .filter(|s| my_sets.contains(s.set.as_str()))
        .filter(|s| !my_ids.contains(&(s.set.as_str(), s.id.as_str())))
        .cloned()
        .collect();
    let ttl_of = |set: &str| {
        requested
            .iter()
            .filter(|e| e.dns_name == set)
            .map(|e| e.record_ttl)
            .max()
            .unwrap_or(TIER_TTL)
    };
    // Another cluster is live by its own word, unless its leaf is gone from the zone or the
    // fleet agrees every address of it is failing. (A leaf outside the host, a gateway's own
    // hostname, is taken on its word.)
    let leaf_down = |id: &str| {
        let addresses: Vec<&String> = zone
            .iter()
            .filter(|e| {
                e.dns_name == id && matches!(e.record_type, RecordType::A | RecordType::Aaaa)
            })
            .flat_map(|e| &e.targets)
            .collect();
        if addresses.is_empty() {
            is_at_or_below(id, host.trim_start_matches("*."))
        } else {
            addresses.iter().all(|a| down.contains(*a))
        }
    };
    let standings: Vec<Standing> = mine
        .iter()
        .cloned()
        .chain(others.into_iter().map(|mut s| {
            if leaf_down(&s.id) {
                s.live_since = None;
            }
            s
        }))
        .collect();
    let live = |s: &Standing| s.live_since.is_some();

    // The hub's choice, over every cluster's standing, its memory read back from the zone.
    let as_endpoint = |s: &Standing| {
        Endpoint::new(&s.set, RecordType::Cname, [s.id.clone()], ttl_of(&s.set))
            .with_set_identifier(&s.id)
            .with_property(WEIGHT, s.weight.to_string())
            .with_property(PRIORITY, s.priority.to_string())
    };
    let all: Vec<Endpoint> = standings.iter().map(as_endpoint).collect();
    let healthy_all: Vec<Endpoint> = standings
        .iter()
        .filter(|s| live(s))
        .map(as_endpoint)
        .collect();
    let serving: Vec<&Standing> = standings
        .iter()
        .filter(|s| published(&s.set, &s.id))
        .collect();
    let published_all: Vec<Endpoint> = serving
        .iter()
        .map(|s| {
            Endpoint::new(&s.set, RecordType::Cname, [s.id.clone()], ttl_of(&s.set))
                .with_set_identifier(&s.id)
        })
        .collect();
    let mut switched_at: BTreeMap<String, u64> = BTreeMap::new();
    let serving_tier: BTreeMap<&str, u32> = serving.iter().fold(BTreeMap::new(), |mut tiers, s| {
        let tier = tiers.entry(s.set.as_str()).or_insert(s.priority);
        *tier = (*tier).min(s.priority);
        tiers
    });
    for s in &serving {
        if serving_tier.get(s.set.as_str()) == Some(&s.priority)
            && let Some(since) = s.serving_since
        {
            let at = switched_at.entry(s.set.clone()).or_insert(since);
            *at = (*at).min(since);
        }
    }
    let mut memory = TierMemory::seeded(
        standings
            .iter()
            .filter_map(|s| Some(((s.set.clone(), s.id.clone()), s.live_since?)))
            .collect(),
        switched_at,
    );
    let choice = choose_tiers(&healthy_all, &all, Some(&published_all), &mut memory, clock);
    let active: BTreeMap<&str, (u32, &str)> = choice
        .active
        .iter()
        .map(|a| (a.set.as_str(), (a.priority, a.reason.as_str())))
        .collect();
    // A live record of the active tier other than this cluster's, in the set now.
    let replaced = |set: &str, priority: u32| {
        serving
            .iter()
            .any(|s| s.set == set && s.owner != me && s.priority == priority && live(s))
    };

    let mut out = SharedTiers {
        recheck_after: choice.recheck_after,
        ..SharedTiers::default()
    };
    let mut endpoints = healthy.to_vec();
    let mine_keys: BTreeSet<(String, Option<String>)> = mine
        .iter()
        .map(|s| (s.set.clone(), Some(s.id.clone())))
        .collect();
    let mine_keys: BTreeSet<(&str, Option<&str>)> = mine_keys
        .iter()
        .map(|(set, id)| (set.as_str(), id.as_deref()))
        .collect();
    for standing in &mut mine {
        let (set, id) = (standing.set.as_str(), standing.id.as_str());
        let is_published = published(set, id);
        let active_here = active.get(set).copied();
        if !live(standing) {
            // Withdrawn for health: the last record of its set stays, with the rest of its
            // branch, until a live record of the active tier is there (with no tier live,
            // what is published stays: silence withdraws nothing).
            let replacement = active_here.is_some_and(|(priority, _)| replaced(set, priority));
            if is_published && !replacement {
                let waiting_for = active_here.map_or_else(
                    || "a live record is".to_string(),
                    |(priority, _)| format!("tier {priority} is"),
                );
                let tiered = |e: &Endpoint| {
                    mine_keys.contains(&(e.dns_name.as_str(), e.set_identifier.as_deref()))
                };
                let back: Vec<Endpoint> = proposed
                    .iter()
                    .filter(|e| is_member(e, set, id) || !tiered(e))
                    .filter(|e| !endpoints.contains(e))
                    .cloned()
                    .collect();
                endpoints.extend(back);
                out.notes.push(format!(
                    "{id} is failing and stays in {set} until {waiting_for} published there"
                ));
            }
        } else if let Some((priority, reason)) = active_here
            && priority != standing.priority
        {
            if is_published && !replaced(set, priority) {
                out.notes.push(format!(
                    "{id} stays in {set} until tier {priority} is published there ({reason})"
                ));
            } else {
                endpoints.retain(|e| !is_member(e, set, id));
                out.withdraws |= is_published;
                out.notes.push(format!(
                    "{id} is on standby in {set}: tier {priority} serves ({reason})"
                ));
            }
        }
        let serves = endpoints.iter().any(|e| is_member(e, set, id));
        standing.serving_since = match (serves, is_published) {
            (false, _) => None,
            (true, true) => standing.serving_since.or(Some(now)),
            (true, false) => Some(now),
        };
    }
    for a in &choice.active {
        if a.reason != BEST_TIER && mine.iter().any(|s| s.set == a.set) {
            out.notes.push(format!(
                "{} served by tier {}: {}",
                a.set, a.priority, a.reason
            ));
        }
    }
    sort_endpoints(&mut endpoints);
    out.endpoints = endpoints;

    // This cluster's tier record, written when what it says changed.
    let name = tier_record_name(me, host);
    let existing = zone
        .iter()
        .find(|e| e.record_type == RecordType::Txt && e.dns_name == name);
    let record = (!mine.is_empty()).then(|| {
        Endpoint::new(
            &name,
            RecordType::Txt,
            mine.iter().map(Standing::value),
            TIER_TTL,
        )
    });
    match (existing, record) {
        (Some(old), Some(new))
            if old.targets.iter().collect::<BTreeSet<_>>()
                != new.targets.iter().collect::<BTreeSet<_>>() =>
        {
            out.changes.updates.push(Update {
                old: old.clone(),
                new,
            });
        }
        (Some(old), None) => {
            out.changes.deletes.push(old.clone());
        }
        (None, Some(new)) => out.changes.creates.push(new),
        _ => {}
    }
    out
}

/// Whether `requested` has records in a set with priorities (the tiers apply).
pub fn has_tiers(requested: &[Endpoint]) -> bool {
    requested
        .iter()
        .any(|e| e.set_identifier.is_some() && e.property(PRIORITY).is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HOST: &str = "api.example.com";
    const SET: &str = "ie.klb.api.example.com";
    const HOLD_DOWN: u64 = 60;

    /// A cluster of the test fleet: its ID, priority, weight and gateway address.
    #[derive(Debug, Clone)]
    struct Cluster {
        id: &'static str,
        priority: u32,
        weight: u32,
        address: &'static str,
    }

    fn leaf(cluster: &Cluster) -> String {
        format!("{}-lb.klb.{HOST}", cluster.id)
    }

    /// The cluster's branch as requested: its weighted record (with its priority) and leaf.
    fn requested(cluster: &Cluster) -> Vec<Endpoint> {
        vec![
            Endpoint::new(SET, RecordType::Cname, [leaf(cluster)], 60)
                .with_set_identifier(leaf(cluster))
                .with_property(WEIGHT, cluster.weight.to_string())
                .with_property(PRIORITY, cluster.priority.to_string()),
            Endpoint::new(
                leaf(cluster),
                RecordType::A,
                [cluster.address.to_string()],
                60,
            ),
        ]
    }

    fn without_priority(endpoints: Vec<Endpoint>) -> Vec<Endpoint> {
        endpoints
            .into_iter()
            .map(|mut e| {
                e.provider_specific.retain(|p| p.name != PRIORITY);
                e
            })
            .collect()
    }

    /// One pass of `cluster` at `now`, the fleet agreeing `down` is failing; the zone takes its
    /// publication and its tier record. Returns the pass's outcome.
    /// Weighted records (Route53's kind) or plain ones (RFC2136's).
    const WEIGHTED: bool = false;
    const PLAIN: bool = true;

    fn pass(
        plain: bool,
        zone: &mut Vec<Endpoint>,
        cluster: &Cluster,
        down: &BTreeSet<String>,
        now: u64,
    ) -> SharedTiers {
        // As the fleet agrees: every address failing withdraws none.
        let everything = fleet().iter().all(|c| down.contains(c.address));
        let none = BTreeSet::new();
        let down = if everything { &none } else { down };
        let requested = requested(cluster);
        let proposed = without_priority(requested.clone());
        let healthy: Vec<Endpoint> = if down.contains(cluster.address) {
            Vec::new()
        } else {
            proposed.clone()
        };
        let out = decide(TierInputs {
            me: cluster.id,
            host: HOST,
            requested: &requested,
            proposed: &proposed,
            healthy: &healthy,
            zone,
            down,
            clock: TierClock {
                now,
                hold_down: HOLD_DOWN,
            },
            plain,
        });
        // The branch as published: this cluster's records replaced by what it publishes now,
        // vouched for by its ownership record as a plan writes it.
        let vouch = Endpoint::new(
            meridian_dns::plan::ownership_txt_name(cluster.id, RecordType::A, &leaf(cluster)),
            RecordType::Txt,
            [meridian_dns::plan::ownership_txt_value(cluster.id)],
            0,
        );
        if !zone.contains(&vouch) {
            zone.push(vouch);
        }
        if plain {
            // Its leaf as published, and its address in the host's one A record (which every
            // cluster's plan merges into) while its weighted record serves.
            zone.retain(|e| e.dns_name != leaf(cluster));
            zone.extend(
                out.endpoints
                    .iter()
                    .filter(|e| e.dns_name == leaf(cluster))
                    .cloned(),
            );
            let mut answers: BTreeSet<String> = zone
                .iter()
                .filter(|e| e.dns_name == HOST && e.record_type == RecordType::A)
                .flat_map(|e| e.targets.clone())
                .collect();
            answers.remove(cluster.address);
            if out.endpoints.iter().any(|e| e.dns_name == SET) {
                answers.insert(cluster.address.to_string());
            }
            zone.retain(|e| !(e.dns_name == HOST && e.record_type == RecordType::A));
            if !answers.is_empty() {
                zone.push(Endpoint::new(HOST, RecordType::A, answers, 60));
            }
        } else {
            zone.retain(|e| !proposed.iter().any(|p| p.key() == e.key()));
            zone.extend(out.endpoints.iter().cloned());
        }
        let changes = out.changes.clone();
        zone.retain(|e| !changes.deletes.contains(e));
        for update in &changes.updates {
            let at = zone
                .iter()
                .position(|e| *e == update.old)
                .expect("the old record");
            zone[at] = update.new.clone();
        }
        for create in &changes.creates {
            assert!(
                !zone.iter().any(|e| e.key() == create.key()),
                "{create:?} exists"
            );
            zone.push(create.clone());
        }
        out
    }

    /// The clusters the set answers with: its weighted records', or on plain records those
    /// whose address the host's A record holds.
    fn serving(zone: &[Endpoint]) -> Vec<String> {
        let answers: BTreeSet<&String> = zone
            .iter()
            .filter(|e| e.dns_name == HOST && e.record_type == RecordType::A)
            .flat_map(|e| &e.targets)
            .collect();
        let mut ids: Vec<String> = zone
            .iter()
            .filter(|e| e.dns_name == SET)
            .filter_map(|e| e.set_identifier.clone())
            .map(|id| id.trim_end_matches(&format!("-lb.klb.{HOST}")).to_string())
            .chain(
                fleet()
                    .into_iter()
                    .filter(|c| answers.contains(&c.address.to_string()))
                    .map(|c| c.id.to_string()),
            )
            .collect();
        ids.sort();
        ids
    }

    fn fleet() -> Vec<Cluster> {
        vec![
            Cluster {
                id: "eu-1",
                priority: 1,
                weight: 120,
                address: "10.0.0.1",
            },
            Cluster {
                id: "us-1",
                priority: 2,
                weight: 120,
                address: "10.0.0.2",
            },
            Cluster {
                id: "us-2",
                priority: 2,
                weight: 120,
                address: "10.0.0.3",
            },
        ]
    }

    fn all_pass(
        plain: bool,
        zone: &mut Vec<Endpoint>,
        fleet: &[Cluster],
        down: &BTreeSet<String>,
        now: u64,
    ) {
        for cluster in fleet {
            pass(plain, zone, cluster, down, now);
        }
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_best_tier_serves_and_the_others_stand_by_with_their_leaves_published() {
        for plain in [WEIGHTED, PLAIN] {
            for order in [[0, 1, 2], [0, 2, 1]] {
                let fleet = fleet();
                let mut zone = Vec::new();
                for _ in 0..2 {
                    for &i in &order {
                        pass(plain, &mut zone, &fleet[i], &BTreeSet::new(), 1_000);
                    }
                }
                assert_eq!(serving(&zone), ["eu-1"], "order {order:?}");
                // Standby leaves stay, so every cluster keeps probing them.
                for cluster in &fleet {
                    assert!(
                        zone.iter().any(|e| e.dns_name == leaf(cluster)),
                        "{}",
                        cluster.id
                    );
                }
                let standings = read_standings(&zone, HOST);
                assert_eq!(standings.len(), 3);
                let eu = standings.iter().find(|s| s.owner == "eu-1").unwrap();
                assert_eq!(
                    (eu.live_since, eu.serving_since),
                    (Some(1_000), Some(1_000))
                );
                let us = standings.iter().find(|s| s.owner == "us-1").unwrap();
                assert_eq!((us.live_since, us.serving_since), (Some(1_000), None));
            }
        }
    }

    /// A better tier that joins after a worse one began serving is a tier coming back: it
    /// takes the traffic after the hold-down, as a recovered one does.
    #[test]
    fn a_better_tier_joining_late_takes_over_after_the_hold_down() {
        for plain in [WEIGHTED, PLAIN] {
            let fleet = fleet();
            let mut zone = Vec::new();
            for &i in &[2, 1, 0] {
                pass(plain, &mut zone, &fleet[i], &BTreeSet::new(), 1_000);
            }
            assert_eq!(serving(&zone), ["us-1", "us-2"]);
            let out = pass(plain, &mut zone, &fleet[0], &BTreeSet::new(), 1_010);
            assert_eq!(out.recheck_after, Some(50));
            assert_eq!(serving(&zone), ["us-1", "us-2"]);
            all_pass(
                plain,
                &mut zone,
                &fleet,
                &BTreeSet::new(),
                1_000 + HOLD_DOWN,
            );
            assert_eq!(serving(&zone), ["eu-1"]);
        }
    }

    #[test]
    fn failover_is_make_before_break_and_failback_waits_out_the_hold_down_read_from_the_zone() {
        for plain in [WEIGHTED, PLAIN] {
            let fleet = fleet();
            let mut zone = Vec::new();
            all_pass(plain, &mut zone, &fleet, &BTreeSet::new(), 1_000);
            assert_eq!(serving(&zone), ["eu-1"]);

            // eu-1 fails. It looks first: the set would be empty without it, so it stays.
            let down = set(&["10.0.0.1"]);
            let out = pass(plain, &mut zone, &fleet[0], &down, 1_010);
            assert_eq!(serving(&zone), ["eu-1"]);
            assert!(
                out.notes.iter().any(|n| n.contains("stays in")),
                "{:?}",
                out.notes
            );
            // Tier 2 takes over at its clusters' next looks; eu-1 then leaves.
            pass(plain, &mut zone, &fleet[1], &down, 1_011);
            assert_eq!(serving(&zone), ["eu-1", "us-1"]);
            pass(plain, &mut zone, &fleet[0], &down, 1_012);
            assert_eq!(serving(&zone), ["us-1"]);
            pass(plain, &mut zone, &fleet[2], &down, 1_013);
            assert_eq!(serving(&zone), ["us-1", "us-2"]);

            // eu-1 recovers at 1,100 and says so; tier 2 keeps serving through the hold-down,
            // even for a us-1 that restarted (the decision has no memory but the zone).
            let healthy = BTreeSet::new();
            pass(plain, &mut zone, &fleet[0], &healthy, 1_100);
            assert_eq!(serving(&zone), ["us-1", "us-2"]);
            let out = pass(plain, &mut zone, &fleet[1], &healthy, 1_130);
            assert_eq!(serving(&zone), ["us-1", "us-2"]);
            assert_eq!(out.recheck_after, Some(30));
            // Hold-down over: eu-1 publishes first, tier 2 leaves only after.
            let out = pass(plain, &mut zone, &fleet[1], &healthy, 1_160);
            assert_eq!(serving(&zone), ["us-1", "us-2"], "{:?}", out.notes);
            pass(plain, &mut zone, &fleet[0], &healthy, 1_161);
            assert_eq!(serving(&zone), ["eu-1", "us-1", "us-2"]);
            let out = pass(plain, &mut zone, &fleet[1], &healthy, 1_162);
            assert!(out.withdraws);
            pass(plain, &mut zone, &fleet[2], &healthy, 1_163);
            assert_eq!(serving(&zone), ["eu-1"]);
        }
    }

    #[test]
    fn a_cluster_the_fleet_sees_failing_is_not_live_whatever_its_own_record_says() {
        for plain in [WEIGHTED, PLAIN] {
            let fleet = fleet();
            let mut zone = Vec::new();
            all_pass(plain, &mut zone, &fleet, &BTreeSet::new(), 1_000);
            // eu-1's agent is gone (its record still says live); the fleet sees its gateway fail.
            let down = set(&["10.0.0.1"]);
            pass(plain, &mut zone, &fleet[1], &down, 1_010);
            assert_eq!(serving(&zone), ["eu-1", "us-1"]);
            // Without that evidence, its word stands: us-2 stays on standby.
            pass(plain, &mut zone, &fleet[2], &BTreeSet::new(), 1_011);
            assert_eq!(serving(&zone), ["eu-1", "us-1"]);
        }
    }

    #[test]
    fn a_fully_drained_tier_hands_its_traffic_to_the_next() {
        for plain in [WEIGHTED, PLAIN] {
            let mut fleet = fleet();
            let mut zone = Vec::new();
            all_pass(plain, &mut zone, &fleet, &BTreeSet::new(), 1_000);
            fleet[0].weight = 0;
            all_pass(plain, &mut zone, &fleet, &BTreeSet::new(), 1_100);
            all_pass(plain, &mut zone, &fleet, &BTreeSet::new(), 1_101);
            assert_eq!(serving(&zone), ["us-1", "us-2"]);
        }
    }

    #[test]
    fn a_value_in_another_clusters_record_cannot_speak_for_it() {
        let fleet = fleet();
        let mut zone = Vec::new();
        all_pass(WEIGHTED, &mut zone, &fleet, &BTreeSet::new(), 1_000);
        // us-1's record claims eu-1 is not live: passed over.
        let forged = Standing {
            owner: "eu-1".into(),
            set: SET.into(),
            id: leaf(&fleet[0]),
            priority: 1,
            weight: 120,
            live_since: None,
            serving_since: None,
        };
        let name = tier_record_name("us-1", HOST);
        let at = zone.iter().position(|e| e.dns_name == name).unwrap();
        zone[at].targets.push(forged.value());
        zone[at].targets.push("garbage;priority=x".into());
        let standings = read_standings(&zone, HOST);
        let eu = standings.iter().find(|s| s.owner == "eu-1").unwrap();
        assert_eq!(eu.live_since, Some(1_000));
        pass(WEIGHTED, &mut zone, &fleet[2], &BTreeSet::new(), 1_001);
        assert_eq!(serving(&zone), ["eu-1"]);
    }

    /// A peer with write access to the zone could always publish records of its own; what it
    /// must not do through standings is more: speak for a cluster that publishes nothing here,
    /// or for another cluster's record.
    #[test]
    fn standings_of_no_publisher_or_for_another_clusters_record_do_not_count() {
        let fleet = fleet();
        let mut zone = Vec::new();
        all_pass(WEIGHTED, &mut zone, &fleet, &BTreeSet::new(), 1_000);
        let value = |owner: &str, id: &str, priority: u32| Standing {
            owner: owner.into(),
            set: SET.into(),
            id: id.into(),
            priority,
            weight: 120,
            live_since: Some(0),
            serving_since: Some(0),
        };
        // "mallory" owns nothing under the host: its tier 0 does not exist for the fleet.
        zone.push(Endpoint::new(
            tier_record_name("mallory", HOST),
            RecordType::Txt,
            [value("mallory", "mallory-lb.klb.api.example.com", 0).value()],
            60,
        ));
        all_pass(WEIGHTED, &mut zone, &fleet, &BTreeSet::new(), 1_100);
        let out = pass(WEIGHTED, &mut zone, &fleet[0], &BTreeSet::new(), 1_101);
        assert!(out.notes.is_empty(), "{:?}", out.notes);
        assert_eq!(serving(&zone), ["eu-1"]);
        // us-1 claims eu-1's own record as a live tier-2 one. eu-1 fails and looks first: its
        // record is not "replaced" by that claim, so it stays rather than empty the set.
        let name = tier_record_name("us-1", HOST);
        let at = zone.iter().position(|e| e.dns_name == name).unwrap();
        zone[at]
            .targets
            .push(value("us-1", &leaf(&fleet[0]), 2).value());
        pass(WEIGHTED, &mut zone, &fleet[0], &set(&["10.0.0.1"]), 1_200);
        assert_eq!(serving(&zone), ["eu-1"]);
    }

    #[test]
    fn leaving_deletes_only_this_clusters_tier_records() {
        let fleet = fleet();
        let mut zone = Vec::new();
        all_pass(WEIGHTED, &mut zone, &fleet, &BTreeSet::new(), 1_000);
        let changes = leave("us-1", &zone, HOST);
        assert_eq!(changes.deletes.len(), 1);
        assert_eq!(changes.deletes[0].dns_name, tier_record_name("us-1", HOST));
        assert!(changes.updates.is_empty() && changes.creates.is_empty());
        assert!(leave("us-1", &zone, "other.example.com").is_empty());
    }

    /// A wildcard host and its apex, and a host and one under it, each keep their own tier
    /// records: one host's standings neither count for nor overwrite the other's, and
    /// withdrawing one host deletes its record alone (purging a cluster deletes them all).
    #[test]
    fn a_wildcard_its_apex_and_a_host_below_keep_separate_standings() {
        let hosts = ["example.com", "*.example.com", "api.example.com"];
        let names: BTreeSet<String> = hosts.iter().map(|h| tier_record_name("eu-1", h)).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        let standing = |host: &str, priority: u32| {
            let base = host.trim_start_matches("*.");
            Standing {
                owner: "eu-1".into(),
                set: format!("ie.klb.{base}"),
                id: format!("eu-1-lb.klb.{base}"),
                priority,
                weight: 120,
                live_since: Some(1),
                serving_since: None,
            }
        };
        let zone: Vec<Endpoint> = hosts
            .iter()
            .zip(1..)
            .map(|(host, priority)| {
                Endpoint::new(
                    tier_record_name("eu-1", host),
                    RecordType::Txt,
                    [standing(host, priority).value()],
                    60,
                )
            })
            .collect();
        for (host, priority) in hosts.iter().zip(1..) {
            assert_eq!(
                read_standings(&zone, host),
                vec![standing(host, priority)],
                "{host}"
            );
            let left = leave_host("eu-1", &zone, host);
            assert_eq!(left.deletes.len(), 1, "{host}");
            assert_eq!(left.deletes[0].dns_name, tier_record_name("eu-1", host));
            assert!(leave_host("us-1", &zone, host).is_empty());
        }
        assert_eq!(leave("eu-1", &zone, "example.com").deletes.len(), 3);
    }

    #[test]
    fn a_branch_without_priorities_writes_no_tier_record() {
        let cluster = Cluster {
            id: "eu-1",
            priority: 1,
            weight: 120,
            address: "10.0.0.1",
        };
        let proposed = without_priority(requested(&cluster));
        assert!(!has_tiers(&proposed));
        let out = decide(TierInputs {
            me: "eu-1",
            host: HOST,
            requested: &proposed,
            proposed: &proposed,
            healthy: &proposed,
            zone: &[],
            down: &BTreeSet::new(),
            clock: TierClock {
                now: 1,
                hold_down: HOLD_DOWN,
            },
            plain: false,
        });
        let mut expected = proposed.clone();
        sort_endpoints(&mut expected);
        assert_eq!(out.endpoints, expected);
        assert!(out.changes.is_empty());
    }

    proptest! {
        /// Whatever order the clusters look in and whatever fails, once published the set is
        /// never empty while any cluster is live; with health steady and the hold-down past,
        /// a few rounds of looks leave exactly the best live tier serving.
        #[test]
        fn the_set_never_empties_and_settles_on_the_best_live_tier(
            plain in any::<bool>(),
            steps in proptest::collection::vec((0usize..3, proptest::collection::vec(any::<bool>(), 3), 0u64..40), 1..40),
        ) {
            let fleet = fleet();
            let mut zone = Vec::new();
            all_pass(plain, &mut zone, &fleet, &BTreeSet::new(), 1_000);
            let mut now = 1_000;
            let mut down = BTreeSet::new();
            for (who, failing, wait) in steps {
                now += wait;
                down = fleet
                    .iter()
                    .zip(&failing)
                    .filter(|(_, f)| **f)
                    .map(|(c, _)| c.address.to_string())
                    .collect();
                pass(plain, &mut zone, &fleet[who], &down, now);
                prop_assert!(!serving(&zone).is_empty(), "the set emptied: {zone:?}");
            }
            // Every cluster sees the health as it now is, then the hold-down passes.
            all_pass(plain, &mut zone, &fleet, &down, now + 1);
            for round in 0..3 {
                all_pass(plain, &mut zone, &fleet, &down, now + 1 + HOLD_DOWN + round);
            }
            let best = fleet
                .iter()
                .filter(|c| !down.contains(c.address))
                .map(|c| c.priority)
                .min();
            if let Some(best) = best {
                let expected: Vec<String> = fleet
                    .iter()
                    .filter(|c| c.priority == best && !down.contains(c.address))
                    .map(|c| c.id.to_string())
                    .collect();
                prop_assert_eq!(serving(&zone), expected);
            }
        }
    }
}
