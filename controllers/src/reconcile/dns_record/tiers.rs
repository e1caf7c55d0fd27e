//! Distributed mode's priority tiers: the standings every cluster keeps in the shared zone
//! decide which of this cluster's weighted records serve ([`crate::decide::shared_tiers`]).
//! Nothing of it is kept in memory but when to look again for a hold-down's end.

use std::collections::BTreeSet;

use kube::ResourceExt;
use meridian_api::kuadrant::DNSRecord;
use meridian_dns::model::{Endpoint, PRIORITY, RecordType, sort_endpoints};
use meridian_dns::tiers::{DEFAULT_HOLD_DOWN, TierClock};

use crate::Context;
use crate::decide::shared_health;
use crate::decide::shared_tiers::{self, SharedTiers, TierInputs};

use super::health::without_withdrawn;

/// Now, and the record's hold-down.
pub(super) fn tier_clock(record: &DNSRecord, ctx: &Context) -> TierClock {
    TierClock {
        now: (ctx.clock)().as_second().max(0) as u64,
        hold_down: record
            .spec
            .failback_hold_down_seconds
            .map_or(DEFAULT_HOLD_DOWN, u64::from),
    }
}

fn record_key(record: &DNSRecord) -> String {
    crate::object_key(
        "DNSRecord",
        record.namespace().as_deref(),
        &record.name_any(),
    )
}

/// The records this cluster publishes of its `proposed` branch after health (`healthy`) and
/// the tiers, as the host's records (`zone`) and the addresses the fleet agrees are failing
/// (`down`) say. Remembers when a held-back better tier may take traffic back.
pub(super) struct TierPass<'a> {
    pub(super) owner: &'a str,
    pub(super) requested: &'a [Endpoint],
    pub(super) proposed: &'a [Endpoint],
    pub(super) healthy: &'a [Endpoint],
    pub(super) zone: &'a [Endpoint],
    pub(super) down: &'a BTreeSet<String>,
    /// The zone holds plain records: `proposed` and `healthy` are the branch as a tree, and
    /// what comes out is [`plain_branch`]'s.
    pub(super) plain: bool,
}

pub(super) fn share_tiers(record: &DNSRecord, ctx: &Context, pass: TierPass<'_>) -> SharedTiers {
    let clock = tier_clock(record, ctx);
    let root_host = record.spec.effective_root_host().unwrap_or_default();
    let mut out = shared_tiers::decide(TierInputs {
        me: pass.owner,
        host: &root_host,
        requested: pass.requested,
        proposed: pass.proposed,
        healthy: pass.healthy,
        zone: pass.zone,
        down: pass.down,
        clock,
        plain: pass.plain,
    });
    if pass.plain {
        out.endpoints = plain_branch(&root_host, &out.endpoints);
    }
    ctx.record_memory.tier_rechecks.set(
        &record_key(record),
        out.recheck_after.map(|after| clock.now + after),
    );
    out
}

/// A branch after the tiers (`tree`) as a zone of plain records holds it: the host's own
/// records answer with the addresses of the weighted records still in their sets, flattened as
/// any plain zone's are, and every leaf stays published under its own name (nothing resolves
/// it), on standby or not, so the fleet keeps probing it and finds its owner there.
pub(super) fn plain_branch(host: &str, tree: &[Endpoint]) -> Vec<Endpoint> {
    let is_leaf = |e: &Endpoint| {
        matches!(e.record_type, RecordType::A | RecordType::Aaaa) && e.dns_name != host
    };
    let pointed_at: BTreeSet<&str> = tree
        .iter()
        .filter(|e| e.record_type == RecordType::Cname)
        .flat_map(|e| e.targets.iter().map(String::as_str))
        .collect();
    let serving: Vec<Endpoint> = tree
        .iter()
        .filter(|e| !is_leaf(e) || pointed_at.contains(e.dns_name.as_str()))
        .cloned()
        .collect();
    // With every weighted record on standby, the host answers with none of this branch (what
    // is left is a chain of names that leads nowhere).
    let mut records = if serving.iter().any(|e| e.set_identifier.is_some()) {
        meridian_providers::rfc2136::plain_dns_records(host, &serving).0
    } else {
        Vec::new()
    };
    records.extend(tree.iter().filter(|e| is_leaf(e)).cloned());
    sort_endpoints(&mut records);
    records
}

/// Whether a look at the host's records (`host_records`) leaves this cluster's tiers as they
/// are: health agreed on them as a plan would, the tiers choose what it `published`, and its
/// tier record and its status already say so. `failing`: what its probes see failing, for a health-checked
/// record.
pub(super) struct TierLook<'a> {
    pub(super) owner: &'a str,
    pub(super) requested: &'a [Endpoint],
    pub(super) proposed: &'a [Endpoint],
    pub(super) published: &'a [Endpoint],
    pub(super) host_records: &'a [Endpoint],
    pub(super) failing: Option<&'a BTreeSet<String>>,
    /// `Some(tree)` on a zone of plain records: the branch as a tree, `proposed` being its
    /// flattened records ([`plain_branch`]).
    pub(super) plain_tree: Option<&'a [Endpoint]>,
}

pub(super) fn tiers_settle(record: &DNSRecord, ctx: &Context, look: TierLook<'_>) -> bool {
    let TierLook {
        owner,
        requested,
        proposed,
        published,
        host_records,
        failing,
        plain_tree,
    } = look;
    let root_host = record.spec.effective_root_host().unwrap_or_default();
    let (withdrawn, down) = match failing {
        Some(failing) => {
            let verdict = shared_health::decide(
                owner,
                &root_host,
                &shared_health::host_addresses(proposed, &root_host),
                failing,
                host_records,
                ctx.config.failure_threshold_percent,
            );
            (verdict.withdrawn, verdict.down)
        }
        None => Default::default(),
    };
    let proposed = plain_tree.unwrap_or(proposed);
    let healthy = without_withdrawn(&root_host, proposed.to_vec(), &withdrawn);
    let clock = tier_clock(record, ctx);
    let mut out = shared_tiers::decide(TierInputs {
        me: owner,
        host: &root_host,
        requested,
        proposed,
        healthy: &healthy,
        zone: host_records,
        down: &down,
        clock,
        plain: plain_tree.is_some(),
    });
    if plain_tree.is_some() {
        out.endpoints = plain_branch(&root_host, &out.endpoints);
    }
    // A hold-down this look found (a restart's first look, say) ends in a plan too.
    ctx.record_memory.tier_rechecks.set(
        &record_key(record),
        out.recheck_after.map(|after| clock.now + after),
    );
    let mut published = published.to_vec();
    sort_endpoints(&mut published);
    // Status must say it too: which tier serves and why changes without a change here.
    let said = record
        .status
        .as_ref()
        .and_then(|status| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == meridian_api::conditions::READY)
        })
        .map(|ready| ready.message.as_str())
        .unwrap_or_default();
    out.changes.is_empty()
        && out.endpoints == published
        && out.notes.iter().all(|note| said.contains(note.as_str()))
}

/// Whether what status says is published is the `proposed` branch but for weighted records of
/// this cluster in sets with priorities (a standby's), so that the steady state of a cluster
/// on standby needs no plan either: a look decides whether the tiers still want it so
/// ([`tiers_settle`]).
pub(super) fn published_but_standby(
    requested: &[Endpoint],
    proposed: &[Endpoint],
    published: &[Endpoint],
) -> bool {
    let tiered = |e: &Endpoint| {
        requested.iter().any(|r| {
            r.dns_name == e.dns_name
                && r.set_identifier.is_some()
                && r.set_identifier == e.set_identifier
                && r.property(PRIORITY).is_some()
        })
    };
    let mut expected: Vec<Endpoint> = proposed
        .iter()
        .filter(|e| !tiered(e) || published.contains(e))
        .cloned()
        .collect();
    let mut published = published.to_vec();
    sort_endpoints(&mut expected);
    sort_endpoints(&mut published);
    expected == published
}

/// [`published_but_standby`] on a zone of plain records: what status says is published is
/// the `proposed` records ([`plain_branch`] of the whole branch) but for addresses the host's
/// own records leave out (a standby's; its leaves stay).
pub(super) fn plain_published_but_standby(
    host: &str,
    proposed: &[Endpoint],
    published: &[Endpoint],
) -> bool {
    let at_host = |e: &Endpoint| {
        matches!(e.record_type, RecordType::A | RecordType::Aaaa) && e.dns_name == host
    };
    let answered: BTreeSet<&String> = published
        .iter()
        .filter(|e| at_host(e))
        .flat_map(|e| &e.targets)
        .collect();
    let mut expected: Vec<Endpoint> = proposed
        .iter()
        .filter_map(|e| {
            if !at_host(e) {
                return Some(e.clone());
            }
            let mut kept = e.clone();
            kept.targets.retain(|t| answered.contains(t));
            (!kept.targets.is_empty()).then_some(kept)
        })
        .collect();
    let mut published = published.to_vec();
    sort_endpoints(&mut expected);
    sort_endpoints(&mut published);
    expected == published
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::model::WEIGHT;

    const HOST: &str = "api.example.com";
    const SET: &str = "default.klb.api.example.com";
    const LEAF: &str = "c1-gw.klb.api.example.com";

    /// A cluster's branch: the host through its GEO and weighted records to its leaf; the
    /// weighted record left out when `member` is false (on standby).
    fn branch(member: bool) -> Vec<Endpoint> {
        let mut records = vec![
            Endpoint::new(HOST, RecordType::Cname, ["klb.api.example.com".into()], 5),
            Endpoint::new("klb.api.example.com", RecordType::Cname, [SET.into()], 5)
                .with_set_identifier("default")
                .with_property(meridian_dns::model::GEO_CODE, "*"),
            Endpoint::new(LEAF, RecordType::A, ["10.0.0.1".into()], 60),
        ];
        if member {
            records.push(
                Endpoint::new(SET, RecordType::Cname, [LEAF.into()], 5)
                    .with_set_identifier(LEAF)
                    .with_property(WEIGHT, "120"),
            );
        }
        records
    }

    #[test]
    fn a_plain_branch_answers_with_serving_leaves_and_keeps_every_leaf_published() {
        let leaf = Endpoint::new(LEAF, RecordType::A, ["10.0.0.1".into()], 60);
        let serving = plain_branch(HOST, &branch(true));
        let mut expected = vec![
            Endpoint::new(HOST, RecordType::A, ["10.0.0.1".into()], 5),
            leaf.clone(),
        ];
        sort_endpoints(&mut expected);
        assert_eq!(serving, expected);
        // On standby: the leaf alone, and nothing at the host (not the chain of CNAMEs).
        assert_eq!(plain_branch(HOST, &branch(false)), vec![leaf]);
        // What status says is published on standby is the branch but for the host's
        // addresses; anything else is not.
        let standby = plain_branch(HOST, &branch(false));
        assert!(plain_published_but_standby(HOST, &serving, &standby));
        assert!(plain_published_but_standby(HOST, &serving, &serving));
        assert!(!plain_published_but_standby(HOST, &serving, &[]));
        let moved = vec![Endpoint::new(LEAF, RecordType::A, ["10.0.0.9".into()], 60)];
        assert!(!plain_published_but_standby(HOST, &serving, &moved));
    }
}
