//! Distributed mode's priority tiers: the standings every cluster keeps in the shared zone
//! decide which of this cluster's weighted records serve ([`crate::decide::shared_tiers`]).
//! Nothing of it is kept in memory but when to look again for a hold-down's end.

use std::collections::BTreeSet;

use kube::ResourceExt;
use meridian_api::kuadrant::DNSRecord;
use meridian_dns::model::{Endpoint, PRIORITY, sort_endpoints};
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
}

pub(super) fn share_tiers(record: &DNSRecord, ctx: &Context, pass: TierPass<'_>) -> SharedTiers {
    let clock = tier_clock(record, ctx);
    let root_host = record.spec.effective_root_host().unwrap_or_default();
    let out = shared_tiers::decide(TierInputs {
        me: pass.owner,
        host: &root_host,
        requested: pass.requested,
        proposed: pass.proposed,
        healthy: pass.healthy,
        zone: pass.zone,
        down: pass.down,
        clock,
    });
    ctx.record_memory.tier_rechecks.set(
        &record_key(record),
        out.recheck_after.map(|after| clock.now + after),
    );
    out
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
}

pub(super) fn tiers_settle(record: &DNSRecord, ctx: &Context, look: TierLook<'_>) -> bool {
    let TierLook {
        owner,
        requested,
        proposed,
        published,
        host_records,
        failing,
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
    let healthy = without_withdrawn(&root_host, proposed.to_vec(), &withdrawn);
    let clock = tier_clock(record, ctx);
    let out = shared_tiers::decide(TierInputs {
        me: owner,
        host: &root_host,
        requested,
        proposed,
        healthy: &healthy,
        zone: host_records,
        down: &down,
        clock,
    });
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
