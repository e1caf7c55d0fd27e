//! The fleet brake as the reconcilers use it, in the pipeline's three steps: [`heard`] gathers
//! every cluster's last heartbeat, [`decide`] (pure) computes the brake with what it held when
//! last looked at, and [`remember`] looks again under the memory's lock and keeps what it holds,
//! logs the brake's changes and sets its metrics. The rules are [`crate::decide::silence`]'s.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::Context;
use crate::decide::silence::{BrakeMemory, FleetBrake, brake_with_memory, fleet_brake};

/// The brake decided at one look, with the memory to keep for the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrakeLook {
    pub brake: FleetBrake,
    pub memory: Option<BrakeMemory>,
}

/// Gather: every ManagedCluster's last heartbeat (clusters never heard from do not count).
pub fn heard(ctx: &Context) -> Vec<Timestamp> {
    ctx.caches
        .clusters
        .state()
        .iter()
        .filter_map(|cluster| {
            let name = kube::ResourceExt::name_any(cluster.as_ref());
            ctx.last_heard(&name, ctx.report_of(&name).as_deref())
        })
        .collect()
}

/// Decide (pure): the brake now, from the heartbeats and what it held when last looked at. It
/// lingers half a heartbeat timeout after its wave would let go: two renewals of the agents
/// (every quarter of it), enough for the whole wave to be heard again.
pub fn decide(
    heard: &[Timestamp],
    recalled: Option<BrakeMemory>,
    now: Timestamp,
    timeout: Duration,
    threshold_percent: u32,
) -> BrakeLook {
    let computed = fleet_brake(heard, now, timeout, threshold_percent);
    let (brake, memory) = brake_with_memory(computed, recalled, now, timeout / 2);
    BrakeLook { brake, memory }
}

/// Apply: looks at the brake again under the memory's lock, from the same heartbeats and time
/// as the decide, and keeps what it holds for the next look (another reconcile may have looked
/// since this one gathered: the memory is always the latest look's). Sets its metrics and logs
/// when it turns on or off. Returns the look kept.
pub fn remember(ctx: &Context, heard: &[Timestamp], now: Timestamp) -> BrakeLook {
    let timeout = ctx.config.heartbeat_timeout;
    let percent = ctx.config.fleet_brake_percent;
    let (look, was) = ctx.brake_memory.update(|recalled| {
        let look = decide(heard, recalled, now, timeout, percent);
        (look, look.memory)
    });
    let brake = look.brake;
    ctx.metrics.fleet(&brake);
    if brake.engaged && !was {
        tracing::warn!(
            quiet = brake.quiet,
            heard = brake.heard,
            threshold_percent = percent,
            "fleet brake on: most clusters went quiet together; the hub assumes it is the one cut off and withdraws nothing for silence"
        );
    } else if was && !brake.engaged {
        tracing::info!(
            quiet = brake.quiet,
            heard = brake.heard,
            "fleet brake off: enough clusters are heard again; silence withdraws under the usual limits"
        );
    }
    look
}

/// Gather and apply at once, for a reconcile that needs the brake and nothing else of silence.
pub fn current(ctx: &Context) -> FleetBrake {
    remember(ctx, &heard(ctx), (ctx.clock)()).brake
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::runtime::clock::at;

    #[test]
    fn a_look_keeps_the_brake_on_after_its_wave_is_heard_until_the_linger_ends() {
        let timeout = Duration::from_secs(120);
        // Four clusters heard at 10,000 s; three of them go quiet together.
        let quiet = [at(10_000), at(10_000), at(10_000), at(10_100)];
        let on = decide(&quiet, None, at(10_101), timeout, 55);
        assert!(on.brake.engaged, "{on:?}");
        assert!(on.memory.is_some());
        // All heard again: the brake lingers for half a timeout, then lets go.
        let back = [at(10_102); 4];
        let lingering = decide(&back, on.memory, at(10_102), timeout, 55);
        assert!(lingering.brake.engaged, "{lingering:?}");
        let still_heard = [at(10_160); 4];
        let off = decide(&still_heard, lingering.memory, at(10_102 + 61), timeout, 55);
        assert!(!off.brake.engaged, "{off:?}");
        assert_eq!(off.memory, None);
    }
}
