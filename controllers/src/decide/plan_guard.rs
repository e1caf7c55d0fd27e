//! Plan thresholds: a record's plan that would delete or change more than a share of
//! Meridian's records in a zone is held, not applied, until someone approves it by name (as
//! octoDNS refuses a plan touching more than 30 % of a zone of at least 10 records unless
//! forced). A bug, a bad input or a vanished cluster list then costs one held plan and a
//! condition, not a zone emptied at the provider.
//!
//! What is not held: a deleted DNSRecord or DNSPolicy (deletion is intent; that path never
//! comes here), creations (nothing published is lost), and a pass in which probe verdicts
//! withdraw leaves (evidence, which must act at once).
//!
//! Pure: the DNSRecord controller counts the zone's published records from its cache and
//! reads the zone's annotations.

use std::collections::BTreeMap;

use meridian_dns::model::{Endpoint, RecordKey};
use meridian_dns::shortcode::shortcode;

/// Percent of the zone's Meridian records a plan may delete or change before it is held.
pub const DEFAULT_THRESHOLD_PERCENT: u32 = 30;
/// Zones with fewer Meridian records are never held: in a small zone any change is large.
pub const MIN_ZONE_RECORDS: usize = 10;
/// ManagedZone annotation: this zone's threshold in percent (`100` holds nothing).
pub const THRESHOLD_ANNOTATION: &str = "meridian.dev/plan-threshold-percent";
/// ManagedZone annotation: plan names (comma-separated) approved to apply once.
pub const APPROVE_ANNOTATION: &str = "meridian.dev/approve-plan";
/// The reason on a record's `Ready` while its plan is held.
pub const HELD_REASON: &str = "PlanHeld";

/// The message of a record's `Ready` while its plan is held, if it is.
pub fn held_message(record: &meridian_api::kuadrant::DNSRecord) -> Option<&str> {
    record
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == meridian_api::conditions::READY && c.reason == HELD_REASON)
        .map(|c| c.message.as_str())
}

/// How many of `previous`'s records `desired` deletes or changes.
pub fn churn(previous: &[Endpoint], desired: &[Endpoint]) -> usize {
    let wanted: BTreeMap<RecordKey, &Endpoint> = desired.iter().map(|e| (e.key(), e)).collect();
    previous
        .iter()
        .filter(|old| wanted.get(&old.key()).is_none_or(|new| *new != *old))
        .count()
}

/// The zone's settings, from its annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneGuard {
    pub threshold_percent: u32,
    pub approved: Vec<String>,
}

impl ZoneGuard {
    /// From a ManagedZone's annotations; an unreadable threshold keeps the default (and is
    /// reported by the caller through [`ZoneGuard::problem`]).
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Self {
        let threshold_percent = annotations
            .get(THRESHOLD_ANNOTATION)
            .and_then(|value| value.trim().parse::<u32>().ok())
            .filter(|percent| (1..=100).contains(percent))
            .unwrap_or(DEFAULT_THRESHOLD_PERCENT);
        let approved = annotations
            .get(APPROVE_ANNOTATION)
            .map(|value| {
                value
                    .split(',')
                    .map(|plan| plan.trim().to_string())
                    .filter(|plan| !plan.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        ZoneGuard {
            threshold_percent,
            approved,
        }
    }

    /// What is wrong with the zone's threshold annotation, if anything.
    pub fn problem(annotations: &BTreeMap<String, String>) -> Option<String> {
        let value = annotations.get(THRESHOLD_ANNOTATION)?;
        match value.trim().parse::<u32>() {
            Ok(1..=100) => None,
            _ => Some(format!(
                "annotation {THRESHOLD_ANNOTATION}={value:?} is not a percent from 1 to 100; the default {DEFAULT_THRESHOLD_PERCENT} applies"
            )),
        }
    }
}

/// A plan the guard looks at.
#[derive(Debug, Clone, Copy)]
pub struct Proposed<'a> {
    /// `namespace/name` of the DNSRecord.
    pub record: &'a str,
    /// The record's generation: the same change asked for again later is another plan.
    pub generation: Option<i64>,
    /// What the record has published (`None`: nothing yet).
    pub previous: Option<&'a [Endpoint]>,
    pub desired: &'a [Endpoint],
    /// Meridian's records published in the zone now (every record's `status.endpoints`).
    pub zone_records: usize,
    /// Probe verdicts withdraw leaves in this pass.
    pub health_withdraws: bool,
}

/// A plan held until approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The plan's name, for the approval annotation.
    pub plan: String,
    pub changed: usize,
    pub zone_records: usize,
    pub threshold_percent: u32,
}

impl Held {
    pub fn message(&self) -> String {
        format!(
            "{} would delete or change {} of the zone's {} Meridian records, more than {} %: nothing of it is applied and what was published stays; approve it once with the ManagedZone annotation {APPROVE_ANNOTATION}={}",
            self.plan, self.changed, self.zone_records, self.threshold_percent, self.plan
        )
    }
}

/// What happens to a plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    Apply,
    /// Over the threshold but named in the approval annotation.
    Approved(String),
    Held(Held),
}

pub fn judge(proposed: &Proposed<'_>, zone: &ZoneGuard) -> Verdict {
    let Some(previous) = proposed.previous else {
        return Verdict::Apply;
    };
    if proposed.health_withdraws || proposed.zone_records < MIN_ZONE_RECORDS {
        return Verdict::Apply;
    }
    let changed = churn(previous, proposed.desired);
    if changed * 100 <= zone.threshold_percent as usize * proposed.zone_records {
        return Verdict::Apply;
    }
    let plan = plan_name(proposed, previous);
    if zone.approved.contains(&plan) {
        return Verdict::Approved(plan);
    }
    Verdict::Held(Held {
        plan,
        changed,
        zone_records: proposed.zone_records,
        threshold_percent: zone.threshold_percent,
    })
}

/// A name for the change from `previous` to `desired` of one generation of a record: the same
/// plan has the same name on every replica and pass, and any other plan (another change, or
/// the same change asked for again by a later generation) another name, so an approval
/// applies once.
fn plan_name(proposed: &Proposed<'_>, previous: &[Endpoint]) -> String {
    let canonical = |endpoints: &[Endpoint]| {
        let mut sorted: Vec<&Endpoint> = endpoints.iter().collect();
        sorted.sort_by_key(|e| e.key());
        serde_json::to_string(&sorted).unwrap_or_default()
    };
    let identity = format!(
        "{}\n{}\n{}\n{}",
        proposed.record,
        proposed.generation.unwrap_or_default(),
        canonical(previous),
        canonical(proposed.desired)
    );
    format!("plan-{}", shortcode(&identity, 10))
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::model::RecordType;

    fn a(name: &str, ip: &str) -> Endpoint {
        Endpoint::new(name, RecordType::A, [ip.to_string()], 60)
    }

    fn hosts(n: usize) -> Vec<Endpoint> {
        (0..n)
            .map(|i| a(&format!("h{i}.example.com"), "192.0.2.1"))
            .collect()
    }

    fn zone() -> ZoneGuard {
        ZoneGuard::from_annotations(&BTreeMap::new())
    }

    #[test]
    fn churn_counts_deletions_and_changes_not_creations() {
        let previous = hosts(4);
        let mut desired = hosts(3);
        desired[0].targets = vec!["192.0.2.9".into()];
        desired.push(a("new.example.com", "192.0.2.1"));
        // h3 deleted, h0 changed, h1 and h2 kept, new created.
        assert_eq!(churn(&previous, &desired), 2);
        assert_eq!(churn(&previous, &previous), 0);
        assert_eq!(churn(&[], &desired), 0);
    }

    #[test]
    fn plans_over_the_threshold_of_a_large_enough_zone_are_held() {
        let previous = hosts(10);
        // (desired, zone records, health withdraws, held, why)
        let cases: &[(Vec<Endpoint>, usize, bool, bool, &str)] = &[
            (hosts(7), 10, false, false, "30 % is not more than 30 %"),
            (hosts(6), 10, false, true, "40 % of ten"),
            (hosts(6), 20, false, false, "20 % of twenty"),
            (hosts(0), 10, false, true, "emptied"),
            (hosts(0), 9, false, false, "a zone under ten is never held"),
            (hosts(0), 10, true, false, "probe verdicts are evidence"),
        ];
        for (desired, zone_records, health_withdraws, held, why) in cases {
            let verdict = judge(
                &Proposed {
                    record: "ns/api",
                    generation: Some(3),
                    previous: Some(&previous),
                    desired,
                    zone_records: *zone_records,
                    health_withdraws: *health_withdraws,
                },
                &zone(),
            );
            assert_eq!(
                matches!(verdict, Verdict::Held(_)),
                *held,
                "{why}: {verdict:?}"
            );
        }
        let first = Proposed {
            record: "ns/api",
            generation: Some(1),
            previous: None,
            desired: &[],
            zone_records: 50,
            health_withdraws: false,
        };
        assert_eq!(judge(&first, &zone()), Verdict::Apply, "a first publish");
    }

    #[test]
    fn an_approval_names_one_plan_and_applies_it_once() {
        let previous = hosts(10);
        let emptied = Proposed {
            record: "ns/api",
            generation: Some(3),
            previous: Some(&previous),
            desired: &[],
            zone_records: 10,
            health_withdraws: false,
        };
        let Verdict::Held(held) = judge(&emptied, &zone()) else {
            panic!("held");
        };
        assert!(held.plan.starts_with("plan-") && held.plan.len() == 15);
        assert!(
            held.message()
                .contains(&format!("{APPROVE_ANNOTATION}={}", held.plan))
        );
        let approving = ZoneGuard::from_annotations(&BTreeMap::from([(
            APPROVE_ANNOTATION.to_string(),
            format!("plan-other, {}", held.plan),
        )]));
        assert_eq!(
            judge(&emptied, &approving),
            Verdict::Approved(held.plan.clone())
        );
        // Another plan (another record, another change, or the same change asked for again
        // by a later generation) is not approved by it.
        let other = Proposed {
            record: "ns/web",
            ..emptied
        };
        assert!(matches!(judge(&other, &approving), Verdict::Held(_)));
        let again = Proposed {
            generation: Some(7),
            ..emptied
        };
        assert!(matches!(judge(&again, &approving), Verdict::Held(_)));
        let half = hosts(4);
        let smaller = Proposed {
            desired: &half,
            ..emptied
        };
        assert!(matches!(judge(&smaller, &approving), Verdict::Held(_)));
    }

    #[test]
    fn a_zone_sets_its_own_threshold() {
        let annotations =
            |value: &str| BTreeMap::from([(THRESHOLD_ANNOTATION.to_string(), value.to_string())]);
        assert_eq!(
            ZoneGuard::from_annotations(&annotations("60")).threshold_percent,
            60
        );
        assert_eq!(ZoneGuard::problem(&annotations("60")), None);
        for bad in ["0", "101", "lots"] {
            assert_eq!(
                ZoneGuard::from_annotations(&annotations(bad)).threshold_percent,
                DEFAULT_THRESHOLD_PERCENT
            );
            assert!(ZoneGuard::problem(&annotations(bad)).is_some(), "{bad}");
        }
        let previous = hosts(10);
        let proposed = Proposed {
            record: "ns/api",
            generation: Some(3),
            previous: Some(&previous),
            desired: &[],
            zone_records: 10,
            health_withdraws: false,
        };
        assert_eq!(
            judge(&proposed, &ZoneGuard::from_annotations(&annotations("100"))),
            Verdict::Apply,
            "100 % holds nothing"
        );
    }
}
