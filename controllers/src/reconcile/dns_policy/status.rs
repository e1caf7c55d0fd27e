//! What enforcing a policy says: `Accepted`, `Programmed` (with `Enforced`, its pre-v1.5
//! name) and the Gateway API v1.5 `status.ancestors[]`, decided by pure functions from what was
//! gathered, decided and written.

use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate, condition_status, reasons, set_condition};
use meridian_api::kuadrant::{
    DNSPolicy, DNSPolicyStatus, DNSRecord, ParentReference, PolicyAncestorStatus,
};
use serde_json::json;

use super::gather::Refusal;
use crate::decide::desired::Desired;
use crate::{Context, Error, apply_params, now};

/// Reasons of `Enforced` (Gateway API policy status).
mod enforced {
    pub const ENFORCED: &str = "Enforced";
    pub const UNKNOWN: &str = "Unknown";
}

/// A condition: status, reason, message.
pub type Condition = (bool, &'static str, String);

/// `Accepted` and `Enforced` for a policy that cannot be enforced.
pub fn refused(refusal: &Refusal) -> (Condition, Condition) {
    match refusal {
        Refusal::TargetNotFound { target } => (
            (
                false,
                reasons::TARGET_NOT_FOUND,
                format!("{target} not found"),
            ),
            (false, enforced::UNKNOWN, "the target does not exist".into()),
        ),
        Refusal::Conflicted { target, holder } => (
            (
                false,
                reasons::CONFLICTED,
                format!("{target} is already targeted by DNSPolicy {holder}"),
            ),
            (
                false,
                enforced::UNKNOWN,
                "the policy is not in effect".into(),
            ),
        ),
        Refusal::Undecided { placement } => (
            accepted(),
            (
                false,
                enforced::UNKNOWN,
                format!(
                    "Placement {placement} has no PlacementDecision yet: published DNS is unchanged until OCM decides"
                ),
            ),
        ),
        Refusal::Unsupported(problem) => (
            (false, reasons::UNSUPPORTED, problem.clone()),
            (
                false,
                enforced::UNKNOWN,
                "the zone's provider cannot hold the policy's records; published DNS is unchanged"
                    .into(),
            ),
        ),
        Refusal::Invalid(problem) => (
            (false, reasons::INVALID, problem.clone()),
            (
                false,
                enforced::UNKNOWN,
                "the policy is invalid; published DNS is unchanged".into(),
            ),
        ),
    }
}

/// `Accepted` for a policy that is enforced.
pub fn accepted() -> Condition {
    (
        true,
        reasons::ACCEPTED,
        "the policy is valid and attached to its Gateway".into(),
    )
}

/// `Enforced`: every desired record written and ready, and each serving someone; otherwise
/// what it waits for. Problems, health pruning and warnings are repeated either way.
pub fn enforced_state(desired: &Desired, records: &[DNSRecord]) -> Condition {
    let not_ready: Vec<String> = desired
        .records
        .iter()
        .filter(|wanted| !is_ready(&wanted.name, records))
        .map(|r| r.name.clone())
        .collect();
    let mut notes = desired.problems.clone();
    notes.extend(desired.waiting.iter().cloned());
    notes.extend(desired.excluded.iter().cloned());
    notes.extend(desired.kept_silent.iter().cloned());
    // Health pruning is the records' business; the policy repeats what it left out.
    notes.extend(records.iter().filter_map(|r| {
        let status = r.status.as_ref()?;
        let healthy = status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::HEALTHY && c.status == "False")?;
        Some(format!("{}: {}", r.name_any(), healthy.message))
    }));
    notes.extend(
        desired
            .records
            .iter()
            .flat_map(|r| r.warnings.iter().cloned()),
    );
    let empty: Vec<&str> = desired
        .records
        .iter()
        .filter(|r| r.endpoints.is_empty())
        .map(|r| r.name.as_str())
        .collect();
    if not_ready.is_empty() && !desired.records.is_empty() && empty.is_empty() {
        let mut message = format!("{} DNSRecords published", desired.records.len());
        if !notes.is_empty() {
            message = format!("{message}; {}", notes.join("; "));
        }
        (true, enforced::ENFORCED, message)
    } else {
        let mut waiting = if desired.records.is_empty() {
            vec!["no listener has a hostname in a ManagedZone".to_string()]
        } else if !not_ready.is_empty() {
            vec![format!("waiting for DNSRecords {}", not_ready.join(", "))]
        } else {
            vec![format!("no placed cluster serves {} yet", empty.join(", "))]
        };
        waiting.extend(notes);
        (false, enforced::UNKNOWN, waiting.join("; "))
    }
}

/// Whether the record `name` says it is published, at its current generation.
fn is_ready(name: &str, records: &[DNSRecord]) -> bool {
    records.iter().any(|r| {
        r.name_any() == name
            && r.status.as_ref().is_some_and(|s| {
                s.observed_generation == r.metadata.generation
                    && condition_status(&s.conditions, conditions::READY) == Some(true)
            })
    })
}

/// How many of the wanted records are published and serve someone.
pub fn published_records(desired: &Desired, records: &[DNSRecord]) -> usize {
    desired
        .records
        .iter()
        .filter(|wanted| !wanted.endpoints.is_empty() && is_ready(&wanted.name, records))
        .count()
}

/// `Programmed` (GEP-713, Gateway API v1.5), from `Accepted`, `Enforced` and how many records
/// are published: `Programmed` when enforced, `PartiallyProgrammed` (still True) while some
/// records are out and others wait, `Reconciling` while none is or the policy is refused, and
/// `Overridden` when another policy holds the Gateway.
pub fn programmed(accepted: &Condition, enforced: &Condition, published: usize) -> Condition {
    use conditions::programmed::*;
    if !accepted.0 {
        let reason = if accepted.1 == reasons::CONFLICTED {
            OVERRIDDEN
        } else {
            RECONCILING
        };
        return (false, reason, accepted.2.clone());
    }
    match (enforced.0, published) {
        (true, _) => (true, PROGRAMMED, enforced.2.clone()),
        (false, 0) => (false, RECONCILING, enforced.2.clone()),
        (false, _) => (true, PARTIALLY_PROGRAMMED, enforced.2.clone()),
    }
}

/// The policy's entry in `status.ancestors[]`: its Gateway, this controller's name, and
/// `Accepted` and `Programmed`. Entries other controllers wrote stay; a condition's
/// `lastTransitionTime` moves only when its status does.
pub fn with_ancestor(
    ancestors: &[PolicyAncestorStatus],
    policy: &DNSPolicy,
    accepted: &Condition,
    programmed: &Condition,
    time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> Vec<PolicyAncestorStatus> {
    let target = &policy.spec.target_ref;
    let ancestor_ref = ParentReference {
        group: target.group.clone(),
        kind: target.kind.clone(),
        namespace: Some(
            target
                .namespace
                .clone()
                .unwrap_or_else(|| policy.namespace().unwrap_or_default()),
        ),
        name: target.name.clone(),
        section_name: target.section_name.clone(),
    };
    let mut conditions_now = ancestors
        .iter()
        .find(|a| {
            a.controller_name == conditions::CONTROLLER_NAME && a.ancestor_ref == ancestor_ref
        })
        .map(|a| a.conditions.clone())
        .unwrap_or_default();
    for (type_, (ok, reason, message)) in [
        (conditions::ACCEPTED, accepted),
        (conditions::PROGRAMMED, programmed),
    ] {
        set_condition(
            &mut conditions_now,
            ConditionUpdate {
                type_,
                status: *ok,
                reason,
                message: message.clone(),
            },
            policy.metadata.generation,
            time,
        );
    }
    ancestors
        .iter()
        .filter(|a| a.controller_name != conditions::CONTROLLER_NAME)
        .cloned()
        .chain([PolicyAncestorStatus {
            ancestor_ref,
            controller_name: conditions::CONTROLLER_NAME.to_string(),
            conditions: conditions_now,
        }])
        .collect()
}

/// How long a new policy's first status may wait for its records to be published.
pub const FIRST_STATUS_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// How long to hold back a new policy's first status while its new records are published, so
/// that it says `Accepted` and `Enforced` in one write instead of two ("waiting for
/// DNSRecords", then "Enforced"): at a cold start that is one write per policy fewer. A
/// record's status wakes the policy, so it waits only as long as publishing takes, and at
/// most [`FIRST_STATUS_GRACE`] from the record's creation. `None` writes now: the policy has
/// said something before, it is enforced, it waits on something other than a record being
/// published (no hostname in a zone, no placed cluster, a problem), or a record has already
/// said it is not ready.
pub fn first_status_wait(
    policy: &DNSPolicy,
    enforced: &Condition,
    desired: &Desired,
    records: &[DNSRecord],
    now: k8s_openapi::jiff::Timestamp,
) -> Option<std::time::Duration> {
    let said_before = policy
        .status
        .as_ref()
        .is_some_and(|status| !status.conditions.is_empty());
    let only_publishing_left = desired.problems.is_empty()
        && desired.waiting.is_empty()
        && !desired.records.is_empty()
        && desired.records.iter().all(|r| !r.endpoints.is_empty());
    if said_before || enforced.0 || !only_publishing_left {
        return None;
    }
    let mut wait = std::time::Duration::ZERO;
    for wanted in &desired.records {
        let record = records.iter().find(|r| r.name_any() == wanted.name)?;
        if let Some(status) = &record.status
            && status.observed_generation == record.metadata.generation
        {
            // Judged at its generation: ready, or not and saying why, which the policy repeats.
            if condition_status(&status.conditions, conditions::READY) == Some(true) {
                continue;
            }
            return None;
        }
        let created = record.metadata.creation_timestamp.as_ref()?.0;
        // A clock behind the API server's counts the record as new, never older than it is.
        let elapsed = now.duration_since(created);
        let age = if elapsed.is_negative() {
            std::time::Duration::ZERO
        } else {
            elapsed.unsigned_abs()
        };
        let left = FIRST_STATUS_GRACE.checked_sub(age)?;
        wait = wait.max(left);
    }
    (!wait.is_zero()).then_some(wait)
}

/// `FailStatic`: which silent clusters stay published, and why (the fleet brake first).
pub fn fail_static(desired: &Desired) -> Condition {
    if desired.kept_silent.is_empty() {
        return (
            false,
            conditions::fail_static::NONE_KEPT,
            "every published cluster's agent is heard".into(),
        );
    }
    let reason = if desired.braked {
        conditions::fail_static::FLEET_BRAKE
    } else {
        conditions::fail_static::SILENT_CLUSTERS_KEPT
    };
    (true, reason, desired.kept_silent.join("; "))
}

/// Writes the policy's conditions and its ancestor entry when they change; `fail_static` is
/// left as it was when `None` (a refused policy decides nothing about clusters).
pub async fn write_status(
    policy: &DNSPolicy,
    ctx: &Context,
    accepted: Condition,
    enforced_state: Condition,
    programmed: Condition,
    fail_static: Option<Condition>,
    draining: Option<&[meridian_api::kuadrant::DrainingCluster]>,
) -> Result<(), Error> {
    let mut status: DNSPolicyStatus = policy.status.clone().unwrap_or_default();
    if let Some(draining) = draining {
        status.draining = draining.to_vec();
    }
    let generation = policy.metadata.generation;
    status.observed_generation = generation;
    let time = now();
    let braked_before = fail_static_reason(policy.status.as_ref());
    status.ancestors = with_ancestor(&status.ancestors, policy, &accepted, &programmed, &time);
    for (type_, (ok, reason, message)) in [
        (conditions::ACCEPTED, Some(accepted)),
        (conditions::PROGRAMMED, Some(programmed)),
        (conditions::ENFORCED, Some(enforced_state)),
        (conditions::FAIL_STATIC, fail_static),
    ]
    .into_iter()
    .filter_map(|(type_, condition)| Some((type_, condition?)))
    {
        set_condition(
            &mut status.conditions,
            ConditionUpdate {
                type_,
                status: ok,
                reason,
                message,
            },
            generation,
            &time,
        );
    }
    if policy.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let accepted_before = policy
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == conditions::ACCEPTED)
        })
        .map(|c| c.reason.clone());
    // An Event when acceptance changes, or a policy is refused; not for a first acceptance,
    // which status already says (at a cold start that is one more write per policy).
    if let Some(now_accepted) = status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::ACCEPTED)
        && accepted_before.as_deref() != Some(now_accepted.reason.as_str())
        && (accepted_before.is_some() || now_accepted.status != "True")
    {
        ctx.notify(
            policy,
            now_accepted.status != "True",
            &now_accepted.reason,
            "Attach",
            now_accepted.message.clone(),
        )
        .await;
    }
    // An Event when the fleet brake starts or stops holding this policy's clusters.
    let braked_now = fail_static_reason(Some(&status));
    let brake = Some(conditions::fail_static::FLEET_BRAKE);
    if (braked_now == brake) != (braked_before == brake) {
        let message = status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::FAIL_STATIC)
            .map(|c| c.message.clone())
            .unwrap_or_default();
        let (warning, reason) = if braked_now == brake {
            (true, "FleetBrakeOn")
        } else {
            (false, "FleetBrakeOff")
        };
        ctx.notify(policy, warning, reason, "Withdraw", message)
            .await;
    }
    let api: Api<DNSPolicy> =
        Api::namespaced(ctx.client.clone(), &policy.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": DNSPolicy::api_version(&()),
        "kind": DNSPolicy::kind(&()),
        "status": status,
    });
    api.patch_status(&policy.name_any(), &apply_params(), &Patch::Apply(patch))
        .await?;
    Ok(())
}

fn fail_static_reason(status: Option<&DNSPolicyStatus>) -> Option<&str> {
    status?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::FAIL_STATIC && c.status == "True")
        .map(|c| c.reason.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decide::desired::DesiredRecord;
    use meridian_api::kuadrant::DNSRecordStatus;
    use meridian_dns::model::{Endpoint, RecordType};

    fn wanted(name: &str, serving: bool) -> DesiredRecord {
        DesiredRecord {
            name: name.into(),
            listener: "api".into(),
            root_host: "api.example.com".into(),
            zone: "example".into(),
            endpoints: if serving {
                vec![Endpoint::new(
                    "api.example.com",
                    RecordType::A,
                    ["192.0.2.1".to_string()],
                    60,
                )]
            } else {
                Vec::new()
            },
            warnings: Vec::new(),
            health_checked: true,
        }
    }

    fn stored(name: &str, ready: bool) -> DNSRecord {
        let mut record: DNSRecord = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
            "metadata": { "name": name, "namespace": "gw", "generation": 2 },
            "spec": { "rootHost": "api.example.com", "managedZone": { "name": "example" }, "endpoints": [] },
        }))
        .expect("a valid record");
        let mut status = DNSRecordStatus {
            observed_generation: Some(2),
            ..Default::default()
        };
        set_condition(
            &mut status.conditions,
            ConditionUpdate {
                type_: conditions::READY,
                status: ready,
                reason: "Published",
                message: String::new(),
            },
            Some(2),
            &now(),
        );
        record.status = Some(status);
        record
    }

    #[test]
    fn enforced_only_when_every_record_is_ready_and_serves_someone() {
        let desired = |records: Vec<DesiredRecord>| Desired {
            records,
            ..Default::default()
        };
        let cases = [
            (desired(vec![]), vec![], false, "no listener has a hostname"),
            (
                desired(vec![wanted("gw-api", true)]),
                vec![],
                false,
                "waiting for DNSRecords gw-api",
            ),
            (
                desired(vec![wanted("gw-api", true)]),
                vec![stored("gw-api", false)],
                false,
                "waiting for DNSRecords gw-api",
            ),
            (
                desired(vec![wanted("gw-api", false)]),
                vec![stored("gw-api", true)],
                false,
                "no placed cluster serves gw-api",
            ),
            (
                desired(vec![wanted("gw-api", true)]),
                vec![stored("gw-api", true)],
                true,
                "1 DNSRecords published",
            ),
        ];
        for (desired, records, expected, message) in cases {
            let (enforced, _, said) = enforced_state(&desired, &records);
            assert_eq!(enforced, expected, "{message}");
            assert!(
                said.starts_with(message),
                "{said:?} starts with {message:?}"
            );
        }
    }

    /// A record just created (`created` seconds before the reconcile), not yet judged.
    fn new_record(
        name: &str,
        created_seconds_ago: i64,
        now: k8s_openapi::jiff::Timestamp,
    ) -> DNSRecord {
        let mut record = stored(name, false);
        record.status = None;
        record.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                now - k8s_openapi::jiff::SignedDuration::from_secs(created_seconds_ago),
            ));
        record
    }

    fn policy(said_before: bool) -> DNSPolicy {
        let mut policy: DNSPolicy = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
            "metadata": { "name": "web", "namespace": "gw", "generation": 1 },
            "spec": { "targetRef": { "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "web" } },
        }))
        .expect("a valid policy");
        if said_before {
            let mut status = DNSPolicyStatus::default();
            set_condition(
                &mut status.conditions,
                ConditionUpdate {
                    type_: conditions::ACCEPTED,
                    status: true,
                    reason: reasons::ACCEPTED,
                    message: String::new(),
                },
                Some(1),
                &now(),
            );
            policy.status = Some(status);
        }
        policy
    }

    #[test]
    fn a_new_policy_holds_its_first_status_only_while_new_records_publish() {
        use std::time::Duration;
        let now = k8s_openapi::jiff::Timestamp::now();
        let desired = |records: Vec<DesiredRecord>, waiting: &[&str]| Desired {
            records,
            waiting: waiting.iter().map(|w| w.to_string()).collect(),
            ..Default::default()
        };
        let one = || desired(vec![wanted("gw-api", true)], &[]);
        let two = || desired(vec![wanted("gw-api", true), wanted("gw-web", true)], &[]);
        // (case, policy, desired, records, expected wait)
        type Case = (
            &'static str,
            DNSPolicy,
            Desired,
            Vec<DNSRecord>,
            Option<Duration>,
        );
        let cases: [Case; 9] = [
            (
                "a record created now: wait the grace",
                policy(false),
                one(),
                vec![new_record("gw-api", 0, now)],
                Some(FIRST_STATUS_GRACE),
            ),
            (
                "created 3 s ago: wait what is left",
                policy(false),
                one(),
                vec![new_record("gw-api", 3, now)],
                Some(Duration::from_secs(2)),
            ),
            (
                "created past the grace: write now",
                policy(false),
                one(),
                vec![new_record("gw-api", 6, now)],
                None,
            ),
            (
                "the API server's clock ahead: counted as new",
                policy(false),
                one(),
                vec![new_record("gw-api", -30, now)],
                Some(FIRST_STATUS_GRACE),
            ),
            (
                "the policy said something before",
                policy(true),
                one(),
                vec![new_record("gw-api", 0, now)],
                None,
            ),
            (
                "a record judged not ready says why now",
                policy(false),
                one(),
                vec![stored("gw-api", false)],
                None,
            ),
            (
                "one ready, one new: wait for the new one",
                policy(false),
                two(),
                vec![stored("gw-api", true), new_record("gw-web", 1, now)],
                Some(Duration::from_secs(4)),
            ),
            (
                "a record not written yet: write now",
                policy(false),
                two(),
                vec![new_record("gw-api", 0, now)],
                None,
            ),
            (
                "waiting on a cluster, not on publishing",
                policy(false),
                desired(
                    vec![wanted("gw-api", true)],
                    &["cluster-2 has no address yet"],
                ),
                vec![new_record("gw-api", 0, now)],
                None,
            ),
        ];
        for (case, policy, desired, records, expected) in cases {
            let enforced = enforced_state(&desired, &records);
            assert_eq!(
                first_status_wait(&policy, &enforced, &desired, &records, now),
                expected,
                "{case}"
            );
        }
        // Enforced already: nothing to wait for.
        let desired = one();
        let records = vec![stored("gw-api", true)];
        let enforced = enforced_state(&desired, &records);
        assert_eq!(
            first_status_wait(&policy(false), &enforced, &desired, &records, now),
            None
        );
    }

    #[test]
    fn a_refused_policy_is_neither_accepted_nor_enforced_and_says_why() {
        let cases = [
            (
                Refusal::TargetNotFound {
                    target: "Gateway gw/web".into(),
                },
                reasons::TARGET_NOT_FOUND,
                "Gateway gw/web not found",
            ),
            (
                Refusal::Conflicted {
                    target: "Gateway gw/web".into(),
                    holder: "first".into(),
                },
                reasons::CONFLICTED,
                "Gateway gw/web is already targeted by DNSPolicy first",
            ),
            (
                Refusal::Invalid("weights must be positive".into()),
                reasons::INVALID,
                "weights must be positive",
            ),
        ];
        // Undecided is no refusal of the policy: it is accepted, and waits with its DNS as it
        // was.
        let (accepted, enforced) = refused(&Refusal::Undecided {
            placement: "web".into(),
        });
        assert!(accepted.0);
        assert!(!enforced.0);
        assert!(
            enforced
                .2
                .contains("Placement web has no PlacementDecision")
        );
        assert_eq!(
            programmed(&accepted, &enforced, 0).1,
            conditions::programmed::RECONCILING
        );
        for (refusal, reason, message) in cases {
            let (accepted, enforced) = refused(&refusal);
            assert_eq!(accepted, (false, reason, message.to_string()));
            assert!(!enforced.0);
            // Gateway API v1.5: a refused policy is not programmed; one whose Gateway another
            // policy holds is overridden.
            let programmed = programmed(&accepted, &enforced, 0);
            let expected = if reason == reasons::CONFLICTED {
                conditions::programmed::OVERRIDDEN
            } else {
                conditions::programmed::RECONCILING
            };
            assert_eq!(programmed, (false, expected, message.to_string()));
        }
    }

    #[test]
    fn programmed_follows_what_is_published() {
        use conditions::programmed::*;
        let desired = Desired {
            records: vec![wanted("gw-api", true), wanted("gw-www", true)],
            ..Default::default()
        };
        // (records stored, published, Programmed)
        let cases = [
            (
                vec![stored("gw-api", true), stored("gw-www", true)],
                2,
                (true, PROGRAMMED),
            ),
            (
                vec![stored("gw-api", true), stored("gw-www", false)],
                1,
                (true, PARTIALLY_PROGRAMMED),
            ),
            (
                vec![stored("gw-api", true)],
                1,
                (true, PARTIALLY_PROGRAMMED),
            ),
            (vec![stored("gw-api", false)], 0, (false, RECONCILING)),
            (vec![], 0, (false, RECONCILING)),
        ];
        for (records, published, (status, reason)) in cases {
            let enforced = enforced_state(&desired, &records);
            assert_eq!(published_records(&desired, &records), published);
            let said = programmed(&accepted(), &enforced, published);
            assert_eq!((said.0, said.1), (status, reason), "{records:?}");
            assert_eq!(said.2, enforced.2, "Programmed says what Enforced says");
        }
        // A record out with no cluster serving it is not published.
        let empty = Desired {
            records: vec![wanted("gw-api", false)],
            ..Default::default()
        };
        assert_eq!(published_records(&empty, &[stored("gw-api", true)]), 0);
    }

    #[test]
    fn the_ancestor_entry_names_the_gateway_and_keeps_other_controllers_entries() {
        let mut policy = policy(false);
        policy.metadata.generation = Some(3);
        let time = now();
        let other = PolicyAncestorStatus {
            ancestor_ref: ParentReference {
                group: "gateway.networking.k8s.io".into(),
                kind: "Gateway".into(),
                namespace: Some("gw".into()),
                name: "web".into(),
                section_name: None,
            },
            controller_name: "example.com/another".into(),
            conditions: Vec::new(),
        };
        let first = with_ancestor(
            std::slice::from_ref(&other),
            &policy,
            &accepted(),
            &(
                true,
                conditions::programmed::PROGRAMMED,
                "2 DNSRecords published".into(),
            ),
            &time,
        );
        assert_eq!(first.len(), 2);
        assert_eq!(first[0], other);
        let ours = &first[1];
        assert_eq!(ours.controller_name, "meridian.dev/dns-controller");
        assert_eq!(
            (
                ours.ancestor_ref.kind.as_str(),
                ours.ancestor_ref.namespace.as_deref(),
                ours.ancestor_ref.name.as_str()
            ),
            (
                "Gateway",
                policy.metadata.namespace.as_deref(),
                policy.spec.target_ref.name.as_str()
            )
        );
        let types: Vec<_> = ours
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str(), c.observed_generation))
            .collect();
        assert_eq!(
            types,
            [
                ("Accepted", "True", Some(3)),
                ("Programmed", "True", Some(3))
            ]
        );
        // Written again later with the same verdicts: one entry of ours, transition times kept.
        let later = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            time.0 + k8s_openapi::jiff::SignedDuration::from_secs(60),
        );
        let again = with_ancestor(
            &first,
            &policy,
            &accepted(),
            &(
                true,
                conditions::programmed::PROGRAMMED,
                "2 DNSRecords published".into(),
            ),
            &later,
        );
        assert_eq!(again, first);
    }
}
