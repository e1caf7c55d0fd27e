//! The decide step of a DNSRecord's pass, pure: from what the record asks for (after health),
//! what the zone holds at its host and the zone's plan guard, what the pass writes, holds and
//! says. The pass gathers the inputs before it, and applies what this returns after it.

use meridian_dns::changes::{Changes, Update};
use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::plan::{PlanInput, plan};

use super::reasons;
use super::status::domain_owners;
use crate::decide::plan_guard::{self, Held, Proposed, Verdict, ZoneGuard};

/// TTL of the last-modified mark.
const MARK_TTL: u32 = 60;

/// What the decision reads.
#[derive(Debug)]
pub struct Inputs<'a> {
    /// `namespace/name` of the DNSRecord.
    pub record: &'a str,
    pub generation: Option<i64>,
    /// The owner ID the record publishes under.
    pub owner: &'a str,
    pub root_host: &'a str,
    /// The provider's kind, for the status message.
    pub provider: &'a str,
    /// What the record has published (`None`: nothing yet).
    pub previous: Option<&'a [Endpoint]>,
    /// What it publishes now: the requested endpoints after health and the active tier.
    pub desired: &'a [Endpoint],
    /// The zone's records at and under the root host, as read.
    pub current: &'a [Endpoint],
    /// Changes distributed mode's health agreement makes to its TXT records.
    pub health_changes: Changes,
    /// Probe verdicts (or a tier switch) withdraw leaves in this pass.
    pub health_withdraws: bool,
    /// Meridian's records published in the zone now (for the guard; 0 when not counted).
    pub zone_records: usize,
    pub guard: &'a ZoneGuard,
    /// Notes for the status message (provider limits, tiers, health).
    pub notes: Vec<String>,
    /// Distributed mode: the host's last-modified mark, and its value should this pass write.
    pub mark: Option<Mark<'a>>,
}

/// The host's last-modified mark in distributed mode.
#[derive(Debug, Clone, Copy)]
pub struct Mark<'a> {
    pub name: &'a str,
    /// `<time> <owner>`: what the mark says after a write of this pass.
    pub next: &'a str,
}

/// What the pass does.
#[derive(Debug, PartialEq)]
pub enum Publication {
    /// A plan over the zone's threshold: nothing is written, what was published stays.
    Hold(Held),
    Write(Write),
}

/// A pass that writes (possibly nothing) and says what is published.
#[derive(Debug, PartialEq)]
pub struct Write {
    /// A plan over the zone's threshold that its approval lets through, by name.
    pub approved: Option<String>,
    /// What to apply at the provider (empty: the zone already says it).
    pub changes: Changes,
    /// Distributed mode: the host's mark after the pass (`None`: absent).
    pub mark_after: Option<String>,
    /// The record's `Ready`: status, reason, message.
    pub ready: (bool, &'static str, String),
    /// The owners publishing at the root host.
    pub owners: Vec<String>,
    /// Another owner holds some of the names: look again later and later, not at once.
    pub conflict: bool,
}

pub fn decide(inputs: Inputs<'_>) -> Publication {
    let proposed = Proposed {
        record: inputs.record,
        generation: inputs.generation,
        previous: inputs.previous,
        desired: inputs.desired,
        zone_records: inputs.zone_records,
        health_withdraws: inputs.health_withdraws,
    };
    let approved = match plan_guard::judge(&proposed, inputs.guard) {
        Verdict::Apply => None,
        Verdict::Approved(plan) => Some(plan),
        Verdict::Held(held) => return Publication::Hold(held),
    };
    let planned = plan(
        &PlanInput {
            owner: inputs.owner,
            root_host: inputs.root_host,
            desired: inputs.desired,
            previous: inputs.previous,
        },
        inputs.current,
    );
    let mut changes = planned.changes;
    changes.append(inputs.health_changes);
    let mut mark_after = None;
    if let Some(mark) = inputs.mark {
        let before = inputs
            .current
            .iter()
            .find(|e| e.dns_name == mark.name && e.record_type == RecordType::Txt);
        mark_after = before.map(|m| m.targets.join(""));
        if !changes.is_empty() {
            move_mark(&mut changes, mark, before);
            mark_after = Some(mark.next.to_string());
        }
    }
    let mut messages: Vec<String> = planned.problems.iter().map(ToString::to_string).collect();
    messages.extend(inputs.notes);
    let conflict = !planned.problems.is_empty();
    let ready = if conflict {
        (false, reasons::PARTLY_PUBLISHED, messages.join("; "))
    } else {
        let mut message = format!(
            "{} records published through {}",
            inputs.desired.len(),
            inputs.provider
        );
        if !messages.is_empty() {
            message = format!("{message}; {}", messages.join("; "));
        }
        (true, reasons::PUBLISHED, message)
    };
    Publication::Write(Write {
        approved,
        changes,
        mark_after,
        ready,
        owners: domain_owners(inputs.current, inputs.root_host, inputs.owner),
        conflict,
    })
}

/// Adds to `changes` the mark's next value, so the other clusters look again.
pub(super) fn move_mark(changes: &mut Changes, mark: Mark<'_>, before: Option<&Endpoint>) {
    let next = Endpoint::new(
        mark.name,
        RecordType::Txt,
        [mark.next.to_string()],
        MARK_TTL,
    );
    match before {
        Some(old) => changes.updates.push(Update {
            old: old.clone(),
            new: next,
        }),
        None => changes.creates.push(next),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: &str = "hub-1";
    const ROOT: &str = "api.example.com";

    /// A zone's guard without annotations: the default threshold, nothing approved.
    fn default_guard() -> ZoneGuard {
        ZoneGuard::from_annotations(&Default::default())
    }

    fn a(name: &str, address: &str) -> Endpoint {
        Endpoint::new(name, RecordType::A, [address.to_string()], 60)
    }

    /// The zone as this owner published `endpoints` (records and ownership).
    fn zone_with(endpoints: &[Endpoint]) -> Vec<Endpoint> {
        let planned = plan(
            &PlanInput {
                owner: OWNER,
                root_host: ROOT,
                desired: endpoints,
                previous: None,
            },
            &[],
        );
        planned.changes.creates
    }

    fn inputs<'a>(
        previous: Option<&'a [Endpoint]>,
        desired: &'a [Endpoint],
        current: &'a [Endpoint],
        guard: &'a ZoneGuard,
    ) -> Inputs<'a> {
        Inputs {
            record: "web/api",
            generation: Some(2),
            owner: OWNER,
            root_host: ROOT,
            provider: "route53",
            previous,
            desired,
            current,
            health_changes: Changes::default(),
            health_withdraws: false,
            zone_records: 0,
            guard,
            notes: Vec::new(),
            mark: None,
        }
    }

    fn written(publication: Publication) -> Write {
        match publication {
            Publication::Write(write) => write,
            Publication::Hold(held) => panic!("held: {}", held.message()),
        }
    }

    #[test]
    fn a_first_pass_creates_the_records_and_says_published() {
        let desired = [a(ROOT, "192.0.2.1")];
        let guard = default_guard();
        let write = written(decide(inputs(None, &desired, &[], &guard)));
        assert!(write.changes.creates.iter().any(|e| e == &desired[0]));
        assert!(write.changes.deletes.is_empty() && write.changes.updates.is_empty());
        assert_eq!(
            write.ready,
            (
                true,
                reasons::PUBLISHED,
                "1 records published through route53".to_string()
            )
        );
        assert!(!write.conflict && write.approved.is_none());
        assert_eq!(write.mark_after, None, "no mark outside distributed mode");
    }

    #[test]
    fn a_zone_that_already_says_it_gets_no_changes() {
        let desired = [a(ROOT, "192.0.2.1")];
        let current = zone_with(&desired);
        let guard = default_guard();
        let mut asked = inputs(Some(&desired), &desired, &current, &guard);
        asked.notes = vec!["a note".into()];
        let write = written(decide(asked));
        assert!(write.changes.is_empty(), "{:?}", write.changes);
        assert_eq!(write.owners, [OWNER]);
        assert_eq!(
            write.ready.2, "1 records published through route53; a note",
            "notes follow the count"
        );
    }

    #[test]
    fn a_plan_over_the_zone_threshold_is_held_until_approved() {
        // 10 records published; the record now asks for 2 of them: 8 of the zone's 10 go.
        let previous: Vec<Endpoint> = (0..10)
            .map(|i| a(&format!("h{i}.{ROOT}"), "192.0.2.1"))
            .collect();
        let desired = &previous[..2];
        let current = zone_with(&previous);
        let guard = default_guard();
        let mut asked = inputs(Some(&previous), desired, &current, &guard);
        asked.zone_records = 10;
        let Publication::Hold(held) = decide(asked) else {
            panic!("a large deletion is held");
        };
        assert_eq!((held.changed, held.zone_records), (8, 10));

        // Named in the zone's approval, the same plan is written, and says so.
        let approving = ZoneGuard {
            approved: vec![held.plan.clone()],
            ..default_guard()
        };
        let mut asked = inputs(Some(&previous), desired, &current, &approving);
        asked.zone_records = 10;
        let write = written(decide(asked));
        assert_eq!(write.approved.as_deref(), Some(held.plan.as_str()));
        assert!(!write.changes.deletes.is_empty());

        // Withdrawn by health, the same deletion is evidence and never held.
        let mut asked = inputs(Some(&previous), desired, &current, &guard);
        asked.zone_records = 10;
        asked.health_withdraws = true;
        assert!(matches!(decide(asked), Publication::Write(_)));
    }

    #[test]
    fn a_name_held_by_a_record_no_owner_vouches_for_is_a_conflict_not_a_fight() {
        // Made by hand: no ownership record says whose it is.
        let theirs = [a(ROOT, "198.51.100.7")];
        let desired = [a(ROOT, "192.0.2.1")];
        let guard = default_guard();
        let write = written(decide(inputs(None, &desired, &theirs, &guard)));
        assert!(write.conflict);
        assert!(!write.ready.0);
        assert_eq!(write.ready.1, reasons::PARTLY_PUBLISHED);
        let touched = write
            .changes
            .deletes
            .iter()
            .chain(write.changes.updates.iter().map(|u| &u.old))
            .any(|e| e == &theirs[0]);
        assert!(!touched, "the hand-made record stays: {:?}", write.changes);
    }

    #[test]
    fn in_distributed_mode_a_write_moves_the_mark_and_no_write_keeps_it() {
        let mark_name = "kuadrant.last_modified_at.api.example.com";
        let desired = [a(ROOT, "192.0.2.1")];
        let guard = default_guard();
        let mark = Mark {
            name: mark_name,
            next: "2026-11-28T10:00:00Z hub-1",
        };

        // A first write creates the mark with its next value.
        let mut asked = inputs(None, &desired, &[], &guard);
        asked.mark = Some(mark);
        let write = written(decide(asked));
        assert_eq!(write.mark_after.as_deref(), Some(mark.next));
        assert!(
            write
                .changes
                .creates
                .iter()
                .any(|e| e.dns_name == mark_name && e.targets == [mark.next])
        );

        // The zone says it already, the mark with it: nothing written, the mark as it was.
        let mut current = zone_with(&desired);
        let old = Endpoint::new(mark_name, RecordType::Txt, ["earlier other".into()], 60);
        current.push(old.clone());
        let mut asked = inputs(Some(&desired), &desired, &current, &guard);
        asked.mark = Some(mark);
        let write_none = written(decide(asked));
        assert!(write_none.changes.is_empty());
        assert_eq!(write_none.mark_after.as_deref(), Some("earlier other"));

        // A change updates the existing mark.
        let moved = [a(ROOT, "192.0.2.2")];
        let mut asked = inputs(Some(&desired), &moved, &current, &guard);
        asked.mark = Some(mark);
        let write = written(decide(asked));
        assert!(
            write
                .changes
                .updates
                .iter()
                .any(|u| u.old == old && u.new.targets == [mark.next])
        );
        assert_eq!(write.mark_after.as_deref(), Some(mark.next));
    }
}
