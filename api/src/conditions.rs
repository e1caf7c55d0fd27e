//! Condition types and reasons, and the one helper that writes conditions: it owns
//! `lastTransitionTime` (changed only when the status changes) and `observedGeneration`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Gateway API policy condition: the policy is valid and attached to its target.
pub const ACCEPTED: &str = "Accepted";
/// Gateway API policy condition before v1.5: what the policy asks for is in effect in DNS. Kept
/// beside [`PROGRAMMED`] for the manifests and dashboards that read it; deprecated.
pub const ENFORCED: &str = "Enforced";
/// Gateway API policy condition (GEP-713 as of v1.5): what the policy asks for is programmed
/// into DNS. Reasons in [`programmed`].
pub const PROGRAMMED: &str = "Programmed";
/// A record or zone is published / usable.
pub const READY: &str = "Ready";
/// A record's endpoints pass their health checks.
pub const HEALTHY: &str = "Healthy";
/// ManagedZone (embedded): its name servers make a delegation a parent zone can use (every one
/// inside the zone has an address).
pub const DELEGATABLE: &str = "Delegatable";
/// ManagedZone at a provider with `spec.routingDelegate`: the delegate's NS records and glue
/// are published in this zone (True), or why not (False).
pub const ROUTING_DELEGATED: &str = "meridian.dev/RoutingDelegated";
/// DNSPolicy: silent clusters are still published because a brake keeps them (True), or
/// none is (False). See the reasons in [`fail_static`].
pub const FAIL_STATIC: &str = "meridian.dev/FailStatic";
/// ManagedZone: plans of its records over the zone's change threshold wait for approval (True),
/// or none does (False).
pub const PLANS_HELD: &str = "meridian.dev/PlansHeld";
/// Condition Meridian sets on a Gateway targeted by a DNSPolicy, in Meridian's own domain
/// (GEP-713's `<domain>/<Kind>Affected`): another controller's condition of the same meaning
/// never collides with it.
pub const DNS_POLICY_AFFECTED: &str = "meridian.dev/DNSPolicyAffected";
/// The same condition in Kuadrant's domain, as earlier releases wrote it: written beside
/// [`DNS_POLICY_AFFECTED`] only when the hub is asked to (`--kuadrant-gateway-condition`), for
/// tools written for multicluster-gateway-controller. Kuadrant writes it too, so on a Gateway
/// both target the two would fight.
pub const KUADRANT_DNS_POLICY_AFFECTED: &str = "kuadrant.io/DNSPolicyAffected";
/// Both domains' DNSPolicyAffected conditions, Meridian's first: what this controller may
/// have written on a Gateway.
pub const DNS_POLICY_AFFECTED_TYPES: [&str; 2] =
    [DNS_POLICY_AFFECTED, KUADRANT_DNS_POLICY_AFFECTED];
/// The `controllerName` of Meridian's entries in a policy's `status.ancestors[]`.
pub const CONTROLLER_NAME: &str = "meridian.dev/dns-controller";

/// Reasons of the `Accepted` condition, as Gateway API policy attachment defines them.
pub mod reasons {
    pub const ACCEPTED: &str = "Accepted";
    pub const CONFLICTED: &str = "Conflicted";
    pub const INVALID: &str = "Invalid";
    pub const TARGET_NOT_FOUND: &str = "TargetNotFound";
    /// Meridian's: a zone's provider cannot hold what the policy asks (weights, GEO), and the
    /// zone does not delegate it.
    pub const UNSUPPORTED: &str = "Unsupported";
}

/// Reasons of the [`PROGRAMMED`] condition (GEP-713).
pub mod programmed {
    /// Every record the policy asks for is published.
    pub const PROGRAMMED: &str = "Programmed";
    /// Some of its records are published, others wait (the message says which and why).
    pub const PARTIALLY_PROGRAMMED: &str = "PartiallyProgrammed";
    /// Nothing is published for it yet, or it is refused (`Accepted` says why).
    pub const RECONCILING: &str = "Reconciling";
    /// Another policy holds its Gateway.
    pub const OVERRIDDEN: &str = "Overridden";
}

/// Reasons of the [`FAIL_STATIC`] condition.
pub mod fail_static {
    /// Most of the fleet fell silent together: the hub assumes it is the one cut off.
    pub const FLEET_BRAKE: &str = "FleetBrake";
    /// Some silent clusters stay (health checks vouch, the withdrawal budget, the last cluster).
    pub const SILENT_CLUSTERS_KEPT: &str = "SilentClustersKept";
    /// No silent cluster is published.
    pub const NONE_KEPT: &str = "NoSilentClusterKept";
}

/// What a reconciler wants a condition to say; [`set_condition`] turns it into a `Condition`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConditionUpdate<'a> {
    pub type_: &'a str,
    pub status: bool,
    pub reason: &'a str,
    pub message: String,
}

/// Sets one condition in `conditions`. `lastTransitionTime` moves to `now` only when the
/// condition is new or its status flips, so a reconcile that repeats itself changes nothing
/// but `observedGeneration`, reason and message.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    update: ConditionUpdate<'_>,
    generation: Option<i64>,
    now: &Time,
) {
    let status = if update.status { "True" } else { "False" }.to_string();
    let existing = conditions
        .iter_mut()
        .find(|condition| condition.type_ == update.type_);
    let last_transition_time = match &existing {
        Some(condition) if condition.status == status => condition.last_transition_time.clone(),
        _ => now.clone(),
    };
    let condition = Condition {
        type_: update.type_.to_string(),
        status,
        reason: update.reason.to_string(),
        message: update.message,
        observed_generation: generation,
        last_transition_time,
    };
    match existing {
        Some(slot) => *slot = condition,
        None => conditions.push(condition),
    }
}

/// The status of condition `type_` (`Some(true)` for "True"), if present.
pub fn condition_status(conditions: &[Condition], type_: &str) -> Option<bool> {
    conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    fn update(status: bool, message: &str) -> ConditionUpdate<'static> {
        ConditionUpdate {
            type_: READY,
            status,
            reason: "Test",
            message: message.to_string(),
        }
    }

    #[test]
    fn transition_time_moves_only_when_status_changes() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, update(true, "first"), Some(1), &at(100));
        set_condition(
            &mut conditions,
            update(true, "same status"),
            Some(2),
            &at(200),
        );
        assert_eq!(conditions.len(), 1);
        assert_eq!(conditions[0].last_transition_time, at(100));
        assert_eq!(conditions[0].message, "same status");
        assert_eq!(conditions[0].observed_generation, Some(2));

        set_condition(&mut conditions, update(false, "flipped"), Some(3), &at(300));
        assert_eq!(conditions[0].last_transition_time, at(300));
        assert_eq!(condition_status(&conditions, READY), Some(false));
    }

    #[test]
    fn conditions_of_other_types_are_kept() {
        let mut conditions = Vec::new();
        set_condition(&mut conditions, update(true, "ready"), None, &at(1));
        let healthy = ConditionUpdate {
            type_: HEALTHY,
            status: false,
            reason: "Probe",
            message: String::new(),
        };
        set_condition(&mut conditions, healthy, None, &at(2));
        assert_eq!(condition_status(&conditions, READY), Some(true));
        assert_eq!(condition_status(&conditions, HEALTHY), Some(false));
        assert_eq!(condition_status(&conditions, ACCEPTED), None);
    }
}
