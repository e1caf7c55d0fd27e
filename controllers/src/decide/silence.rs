//! What a silent agent takes out of DNS: the brakes between "no heartbeat" and "withdrawn".
//!
//! Silence is evidence about an agent, not about its gateways, and the hub cannot tell its own
//! lost connection from the fleet's. So (all pure, decided from heartbeat times alone, so that
//! every replica and every restart decides the same):
//!
//! - with a healthCheck, a silent cluster stays: the other clusters' probes judge its gateways,
//!   and their quorum verdict withdraws it (evidence);
//! - the **fleet brake**: when more than a threshold (55 %, the Kubernetes node lifecycle
//!   controller's disruption threshold) of the clusters heard recently went quiet together
//!   (each within one heartbeat timeout of the next), the hub assumes it is the one cut off
//!   and withdraws nothing for that silence until the fraction drops;
//! - **bounded withdrawal**: silence withdraws at most a share of a host's clusters per heartbeat
//!   timeout, the earliest silent first;
//! - **the last cluster stays**: silence never leaves a host without a cluster; the ones that
//!   fell silent last keep answering (fail static).

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

/// The default fleet brake threshold (percent of the recently heard clusters).
pub const DEFAULT_FLEET_BRAKE_PERCENT: u32 = 55;

/// The default withdrawal budget (percent of a host's clusters per heartbeat timeout). With the
/// default two-minute timeout, a fifth per interval takes a ten-cluster host down to its last
/// cluster in eight minutes at the fastest: long enough for an alert on the silent clusters to
/// reach someone, while one cluster of a small fleet (the budget is never below one) still
/// leaves at its timeout, as a single failure should.
pub const DEFAULT_WITHDRAWAL_PERCENT: u32 = 20;

/// The state of the fleet brake, from every cluster's last heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FleetBrake {
    /// More than the threshold of the clusters heard when the wave began went quiet in it:
    /// silence withdraws none of the wave.
    pub engaged: bool,
    /// The clusters of the latest wave of quiet (not heard for more than half the timeout).
    pub quiet: usize,
    /// The clusters heard when the wave began: the wave and every cluster heard since.
    pub heard: usize,
    /// The wave's clusters are those not heard for at most this long.
    pub holds_silent_up_to: Duration,
}

impl FleetBrake {
    /// Whether the brake keeps a cluster that has been silent for `silent_for`.
    pub fn holds(&self, silent_for: Duration) -> bool {
        self.engaged && silent_for <= self.holds_silent_up_to
    }
}

/// The fleet brake from when each cluster was last heard (clusters never heard from do not
/// count).
///
/// A cluster counts toward the brake once it is *quiet*: not heard for more than half the
/// timeout. The clusters of one outage stopped renewing at different points of their renewal
/// interval (a quarter of the timeout by default), so all of them are quiet before the first
/// of them is silent, and the brake is on before silence could withdraw any. The latest
/// *wave* is the quiet clusters chained back from the latest quiet one, each last heard
/// within one timeout of the next, so a wave that grows while the brake holds it stays one
/// wave. The clusters heard when it began are the wave and every cluster heard since. All of
/// this is fixed while the clusters stay quiet, so a long partition keeps the brake on until
/// clusters are heard again.
pub fn fleet_brake(
    last_heard: &[Timestamp],
    now: Timestamp,
    timeout: Duration,
    threshold_percent: u32,
) -> FleetBrake {
    let mut quiet_for: Vec<Duration> = last_heard
        .iter()
        .map(|heard| Duration::try_from(now.duration_since(*heard)).unwrap_or_default())
        .collect();
    quiet_for.sort();
    let late = timeout / 2;
    let mut wave = quiet_for.iter().filter(|quiet| **quiet > late);
    let Some(&latest) = wave.next() else {
        return FleetBrake::default();
    };
    let mut oldest = latest;
    for &earlier in wave {
        if earlier - oldest > timeout {
            break;
        }
        oldest = earlier;
    }
    let quiet = quiet_for
        .iter()
        .filter(|q| **q > late && **q <= oldest)
        .count();
    let heard = quiet_for.iter().filter(|q| **q <= oldest + timeout).count();
    FleetBrake {
        // quiet / heard > threshold, in integers.
        engaged: (quiet as u64) * 100 > u64::from(threshold_percent) * heard as u64,
        quiet,
        heard,
        holds_silent_up_to: oldest,
    }
}

/// What the brake held, kept so that it lets go of a wave only once the wave is heard again:
/// the agents of a partition that ends renew one after another over a renewal interval, and
/// without this the first ones back would drop the wave below the threshold and silence would
/// withdraw the ones not yet back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrakeMemory {
    /// The brake held the silent clusters last heard at or after this.
    pub held_heard_since: Timestamp,
    /// When the brake was first found off after holding them.
    pub released_at: Option<Timestamp>,
}

/// The brake as computed from the heartbeats, kept on for `linger` after it would let go (and
/// holding only the clusters it held), with the memory for the next look. The brake returned
/// is on exactly when a memory is returned. Pure.
pub fn brake_with_memory(
    computed: FleetBrake,
    memory: Option<BrakeMemory>,
    now: Timestamp,
    linger: Duration,
) -> (FleetBrake, Option<BrakeMemory>) {
    if computed.engaged {
        let held_heard_since = now - computed.holds_silent_up_to;
        // A wave that grows while held keeps its earliest boundary.
        let held_heard_since = match memory {
            Some(m) if m.released_at.is_none() => m.held_heard_since.min(held_heard_since),
            _ => held_heard_since,
        };
        let memory = BrakeMemory {
            held_heard_since,
            released_at: None,
        };
        return (computed, Some(memory));
    }
    let Some(memory) = memory else {
        return (computed, None);
    };
    let released_at = memory.released_at.unwrap_or(now);
    let since = Duration::try_from(now.duration_since(released_at)).unwrap_or_default();
    if since > linger {
        return (computed, None);
    }
    let lingering = FleetBrake {
        engaged: true,
        holds_silent_up_to: Duration::try_from(now.duration_since(memory.held_heard_since))
            .unwrap_or_default(),
        ..computed
    };
    let memory = BrakeMemory {
        released_at: Some(released_at),
        ..memory
    };
    (lingering, Some(memory))
}

/// How silence is weighed for one host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SilenceRules {
    pub timeout: Duration,
    /// The policy has a healthCheck: probes, not silence, withdraw.
    pub health_checked: bool,
    pub brake: FleetBrake,
    /// Percent of the host's clusters silence may withdraw per `timeout` (at least one).
    pub withdrawal_percent: u32,
}

impl SilenceRules {
    /// Silence withdraws at once, all but the last cluster (no timeout, no brake, no budget).
    /// Distributed mode, where the one cluster is never silent to itself, and tables.
    pub fn immediate() -> Self {
        SilenceRules {
            timeout: Duration::ZERO,
            health_checked: false,
            brake: FleetBrake::default(),
            withdrawal_percent: 100,
        }
    }
}

/// Why a silent cluster is still published.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kept {
    /// The policy has a healthCheck: the other clusters' probes decide.
    HealthCheck,
    /// The fleet brake is on.
    FleetBrake,
    /// The host's withdrawal budget is spent; the cluster leaves in this long unless heard.
    Budget { withdraws_in: Duration },
    /// Nothing else would be left of the host.
    LastCluster,
}

/// A silent cluster's fate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Withdrawn,
    Kept(Kept),
}

/// One of a host's clusters as silence sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heard {
    /// How long since its agent was last heard, when that is past the timeout.
    pub silent_for: Option<Duration>,
    /// Whether it would add answers to the host if published.
    pub serves: bool,
}

/// The fate of each silent cluster of a host (`None` for the clusters that are heard), in the
/// order given.
pub fn fates(clusters: &[Heard], rules: &SilenceRules) -> Vec<Option<Fate>> {
    let mut fates: Vec<Option<Fate>> = clusters
        .iter()
        .map(|cluster| {
            let silent_for = cluster.silent_for?;
            Some(if rules.health_checked {
                Fate::Kept(Kept::HealthCheck)
            } else if rules.brake.holds(silent_for) {
                Fate::Kept(Kept::FleetBrake)
            } else {
                Fate::Withdrawn
            })
        })
        .collect();
    limit_withdrawals(clusters, rules, &mut fates);
    keep_the_last(clusters, rules, &mut fates);
    fates
}

/// At most `budget` withdrawals per timeout, the earliest silent first: the k-th withdrawal
/// happens when its cluster fell silent, but no sooner than one timeout after the
/// (k - budget)-th. Worked in "how long ago", so it needs no clock.
fn limit_withdrawals(clusters: &[Heard], rules: &SilenceRules, fates: &mut [Option<Fate>]) {
    let budget = (clusters.len() * rules.withdrawal_percent as usize / 100).max(1);
    let mut order: Vec<usize> = (0..clusters.len())
        .filter(|&i| fates[i] == Some(Fate::Withdrawn))
        .collect();
    // Longest silent first; ties by position, so the order is stable.
    order.sort_by_key(|&i| (std::cmp::Reverse(clusters[i].silent_for), i));
    // For each in order: how long ago it was withdrawn (`None`: not yet, or wait this long).
    let mut withdrawn_ago: Vec<Result<Duration, Duration>> = Vec::with_capacity(order.len());
    for (rank, &i) in order.iter().enumerate() {
        let silent_for = clusters[i].silent_for.unwrap_or_default();
        // It counts as silent from the moment its timeout passed.
        let silent_since = silent_for.saturating_sub(rules.timeout);
        let earliest = match rank
            .checked_sub(budget)
            .map(|earlier| withdrawn_ago[earlier])
        {
            None => Ok(silent_since),
            Some(Ok(ago)) => match ago.checked_sub(rules.timeout) {
                Some(after) => Ok(after.min(silent_since)),
                None => Err(rules.timeout - ago),
            },
            // The earlier one waits, so this one waits at least a timeout longer.
            Some(Err(wait)) => Err(wait + rules.timeout),
        };
        if let Err(wait) = earliest {
            fates[i] = Some(Fate::Kept(Kept::Budget { withdraws_in: wait }));
        }
        withdrawn_ago.push(earliest);
    }
}

/// When silence would leave the host with nothing to answer, the clusters that fell silent
/// last (within one timeout of the latest) stay.
fn keep_the_last(clusters: &[Heard], rules: &SilenceRules, fates: &mut [Option<Fate>]) {
    let serving = clusters
        .iter()
        .zip(fates.iter())
        .any(|(cluster, fate)| cluster.serves && !matches!(fate, Some(Fate::Withdrawn)));
    if serving {
        return;
    }
    let Some(latest) = clusters
        .iter()
        .zip(fates.iter())
        .filter(|(cluster, fate)| cluster.serves && fate.is_some())
        .filter_map(|(cluster, _)| cluster.silent_for)
        .min()
    else {
        return;
    };
    for (cluster, fate) in clusters.iter().zip(fates.iter_mut()) {
        if cluster.serves
            && cluster
                .silent_for
                .is_some_and(|silent_for| silent_for <= latest + rules.timeout)
        {
            *fate = Some(Fate::Kept(Kept::LastCluster));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(120);

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    fn heard() -> Heard {
        Heard {
            silent_for: None,
            serves: true,
        }
    }

    fn silent(s: u64) -> Heard {
        Heard {
            silent_for: Some(secs(s)),
            serves: true,
        }
    }

    fn rules() -> SilenceRules {
        SilenceRules {
            timeout: TIMEOUT,
            health_checked: false,
            brake: FleetBrake::default(),
            withdrawal_percent: DEFAULT_WITHDRAWAL_PERCENT,
        }
    }

    #[test]
    fn the_brake_engages_when_most_of_the_fleet_goes_quiet_together() {
        let now = at(10_000);
        // (seconds since each cluster was last heard, engaged, quiet, heard, why)
        let cases: &[(&[i64], bool, usize, usize, &str)] = &[
            (&[], false, 0, 0, "no fleet"),
            (&[5, 10, 20], false, 0, 0, "everyone heard"),
            (&[5, 10, 200], false, 1, 3, "one of three"),
            (&[5, 200, 210], true, 2, 3, "two of three together"),
            (&[200, 210, 220], true, 3, 3, "everyone: the hub is cut off"),
            (
                &[3_000, 3_010, 3_020],
                true,
                3,
                3,
                "a long partition stays braked",
            ),
            (
                &[5, 10, 200, 5_000],
                false,
                1,
                3,
                "an old silence is not this wave",
            ),
            (
                &[5, 200, 1_000, 5_000],
                false,
                1,
                2,
                "waves far apart are each alone",
            ),
            (
                &[5, 10, 200, 210],
                false,
                2,
                4,
                "half is not more than 55 %",
            ),
            (&[5, 200, 210, 215], true, 3, 4, "three of four"),
            (&[200], true, 1, 1, "a fleet of one"),
            (
                &[5, 70, 125],
                true,
                2,
                3,
                "quiet before silent: the wave is seen whole",
            ),
            (
                &[5, 50, 59],
                false,
                0,
                0,
                "a renewal or two late is not quiet",
            ),
            (
                &[5, 200, 300, 400],
                true,
                3,
                4,
                "a wave growing while held is one wave",
            ),
        ];
        for (ages, engaged, quiet, heard, why) in cases {
            let heard_at: Vec<Timestamp> = ages.iter().map(|age| at(10_000 - age)).collect();
            let brake = fleet_brake(&heard_at, now, TIMEOUT, DEFAULT_FLEET_BRAKE_PERCENT);
            assert_eq!(
                (brake.engaged, brake.quiet, brake.heard),
                (*engaged, *quiet, *heard),
                "{why}"
            );
        }
    }

    #[test]
    fn the_brake_holds_the_wave_but_not_an_older_silence() {
        let heard_at = [
            at(10_000 - 5),
            at(10_000 - 200),
            at(10_000 - 210),
            at(10_000 - 5_000),
        ];
        let brake = fleet_brake(&heard_at, at(10_000), TIMEOUT, DEFAULT_FLEET_BRAKE_PERCENT);
        assert!(brake.engaged);
        assert!(brake.holds(secs(200)) && brake.holds(secs(210)));
        assert!(!brake.holds(secs(5_000)), "silent long before the wave");
    }

    #[test]
    fn with_a_health_check_silence_withdraws_nothing() {
        let rules = SilenceRules {
            health_checked: true,
            ..rules()
        };
        assert_eq!(
            fates(&[heard(), silent(500)], &rules),
            [None, Some(Fate::Kept(Kept::HealthCheck))]
        );
    }

    #[test]
    fn the_brake_keeps_its_wave() {
        let rules = SilenceRules {
            brake: FleetBrake {
                engaged: true,
                quiet: 2,
                heard: 3,
                holds_silent_up_to: secs(210),
            },
            ..rules()
        };
        assert_eq!(
            fates(&[heard(), silent(200), silent(210), silent(5_000)], &rules),
            [
                None,
                Some(Fate::Kept(Kept::FleetBrake)),
                Some(Fate::Kept(Kept::FleetBrake)),
                Some(Fate::Withdrawn),
            ]
        );
    }

    #[test]
    fn silence_withdraws_a_bounded_share_per_timeout() {
        // Ten clusters, a budget of two per timeout. Four fell silent within the last 100 s
        // (their timeouts passed 10 to 100 s ago): the two earliest go, the others wait a
        // timeout after the first two.
        let mut clusters = vec![heard(); 6];
        clusters.extend([silent(220), silent(200), silent(150), silent(130)]);
        let fates = fates(&clusters, &rules());
        assert_eq!(
            &fates[6..],
            [
                Some(Fate::Withdrawn),
                Some(Fate::Withdrawn),
                Some(Fate::Kept(Kept::Budget {
                    withdraws_in: secs(20)
                })),
                Some(Fate::Kept(Kept::Budget {
                    withdraws_in: secs(40)
                })),
            ]
        );
    }

    #[test]
    fn the_budget_chains_waits_and_forgets_old_withdrawals() {
        let mut clusters = vec![heard(); 2];
        // A budget of one (20 % of six): an old silence, then three new ones in a row.
        clusters.extend([silent(9_000), silent(125), silent(124), silent(123)]);
        let fates = fates(&clusters, &rules());
        assert_eq!(
            &fates[2..],
            [
                Some(Fate::Withdrawn),
                Some(Fate::Withdrawn),
                Some(Fate::Kept(Kept::Budget {
                    withdraws_in: secs(115)
                })),
                Some(Fate::Kept(Kept::Budget {
                    withdraws_in: secs(235)
                })),
            ]
        );
    }

    #[test]
    fn a_single_failure_leaves_at_its_timeout() {
        assert_eq!(
            fates(&[heard(), heard(), silent(121)], &rules()),
            [None, None, Some(Fate::Withdrawn)]
        );
    }

    #[test]
    fn the_last_silent_clusters_stay_when_nothing_else_would() {
        // Everyone silent, the brake off (say it was turned up to 100 %): the budget lets the
        // oldest go, and the latest wave stays as the host's last answers.
        let rules = SilenceRules {
            withdrawal_percent: 100,
            ..rules()
        };
        assert_eq!(
            fates(&[silent(5_000), silent(300), silent(250)], &rules),
            [
                Some(Fate::Withdrawn),
                Some(Fate::Kept(Kept::LastCluster)),
                Some(Fate::Kept(Kept::LastCluster)),
            ]
        );
        // A heard cluster that serves nothing (no addresses yet) does not count.
        let waiting = Heard {
            silent_for: None,
            serves: false,
        };
        assert_eq!(
            fates(&[waiting, silent(300)], &rules),
            [None, Some(Fate::Kept(Kept::LastCluster))]
        );
        // One that serves does.
        assert_eq!(
            fates(&[heard(), silent(300)], &rules),
            [None, Some(Fate::Withdrawn)]
        );
    }

    #[test]
    fn the_brake_lets_go_of_a_wave_only_after_a_linger() {
        let linger = secs(60);
        let now = at(10_000);
        let engaged = FleetBrake {
            engaged: true,
            quiet: 2,
            heard: 3,
            holds_silent_up_to: secs(100),
        };
        let off = FleetBrake {
            quiet: 1,
            ..FleetBrake::default()
        };
        // Engaged: remembered, as is.
        let (brake, memory) = brake_with_memory(engaged, None, now, linger);
        assert_eq!(brake, engaged);
        let memory = memory.unwrap();
        assert_eq!(memory.held_heard_since, at(9_900));
        // The first clusters back drop the wave below the threshold: still held, and the hold
        // still reaches the clusters heard last at 9,900 s.
        let later = at(10_020);
        let (brake, memory) = brake_with_memory(off, Some(memory), later, linger);
        assert!(brake.engaged);
        assert!(brake.holds(secs(120)) && !brake.holds(secs(121)));
        let memory = memory.unwrap();
        assert_eq!(memory.released_at, Some(later));
        // Still within the linger, counted from the release.
        let (brake, memory) = brake_with_memory(off, Some(memory), at(10_080), linger);
        assert!(brake.engaged);
        // Past it: off and forgotten.
        let (brake, memory) = brake_with_memory(off, memory, at(10_081), linger);
        assert_eq!((brake, memory), (off, None));
        // Never engaged: nothing to remember.
        assert_eq!(brake_with_memory(off, None, now, linger), (off, None));
        // Engaged again within the linger: a fresh hold.
        let released = BrakeMemory {
            held_heard_since: at(9_000),
            released_at: Some(at(9_990)),
        };
        let (_, memory) = brake_with_memory(engaged, Some(released), now, linger);
        assert_eq!(
            memory,
            Some(BrakeMemory {
                held_heard_since: at(9_900),
                released_at: None
            })
        );
    }

    #[test]
    fn no_silence_no_fates() {
        assert_eq!(fates(&[heard(), heard()], &rules()), [None, None]);
        assert_eq!(fates(&[], &rules()), Vec::<Option<Fate>>::new());
    }
}
