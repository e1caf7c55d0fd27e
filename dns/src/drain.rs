//! Graceful drain: a cluster marked for drain loses its weight in steps a TTL apart (100 % →
//! 50 % → 10 % → 0), so resolvers' caches of the previous step expire before the next, and
//! gets it back the same way (0 → 10 % → 50 % → 100 %) when the mark goes. Pure: the caller
//! keeps each cluster's [`DrainState`] and passes the time in.
//!
//! A drained cluster keeps its records at weight 0: it is never the reason a host empties,
//! and with priority tiers a tier whose clusters all weigh 0 hands its traffic to the next
//! ([`crate::tiers`]).

/// The weights a drain steps through, in percent of the cluster's own.
pub const DRAIN_STEPS: [u32; 4] = [100, 50, 10, 0];

/// Where a cluster's drain stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DrainState {
    /// Percent of its weight the cluster has now.
    pub percent: u32,
    /// When (seconds) it last moved a step.
    pub moved_at: u64,
    /// Whether the mark is on (draining) or off (returning).
    pub draining: bool,
}

/// The next state of a cluster's drain: `None` once it is back at full weight with no mark.
/// A mark first seen takes the first step at once. `restarted` says the caller has no memory
/// of the cluster because it just started: a marked cluster is then taken as fully drained
/// (the likeliest state before the restart; its gateway still serves while caches expire).
pub fn drain_step(
    state: Option<DrainState>,
    marked: bool,
    now: u64,
    step_seconds: u64,
    restarted: bool,
) -> Option<DrainState> {
    let target = if marked { 0 } else { 100 };
    let state = match state {
        None if !marked => return None,
        None if restarted => {
            return Some(DrainState {
                percent: 0,
                moved_at: now,
                draining: true,
            });
        }
        None => {
            return Some(DrainState {
                percent: DRAIN_STEPS[1],
                moved_at: now,
                draining: true,
            });
        }
        Some(state) => state,
    };
    let due = now.saturating_sub(state.moved_at) >= step_seconds;
    let next = if state.percent == target || !due {
        DrainState {
            draining: marked,
            ..state
        }
    } else {
        let position = DRAIN_STEPS
            .iter()
            .position(|p| *p <= state.percent)
            .unwrap_or(DRAIN_STEPS.len() - 1);
        let percent = if marked {
            DRAIN_STEPS[(position + 1).min(DRAIN_STEPS.len() - 1)]
        } else {
            // Back up: the step above the highest step at or below where it is.
            DRAIN_STEPS[position.saturating_sub(1)]
        };
        DrainState {
            percent,
            moved_at: now,
            draining: marked,
        }
    };
    (next.percent != 100 || marked).then_some(next)
}

/// Seconds until `state` may take its next step, if it has one left.
pub fn next_step_in(state: &DrainState, now: u64, step_seconds: u64) -> Option<u64> {
    let target = if state.draining { 0 } else { 100 };
    (state.percent != target).then(|| {
        step_seconds
            .saturating_sub(now.saturating_sub(state.moved_at))
            .max(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Steps through `passes` of (time, marked) and returns the percent after each.
    fn walk(passes: &[(u64, bool)], restarted_first: bool) -> Vec<u32> {
        let mut state = None;
        passes
            .iter()
            .enumerate()
            .map(|(i, (now, marked))| {
                state = drain_step(state, *marked, *now, 30, restarted_first && i == 0);
                state.map_or(100, |s| s.percent)
            })
            .collect()
    }

    #[test]
    fn drain_and_return_step_a_ttl_apart() {
        /// (name, passes of (time, marked), whether the first pass follows a restart, percents).
        type Case<'a> = (&'a str, &'a [(u64, bool)], bool, &'a [u32]);
        let cases: &[Case] = &[
            (
                "no mark, nothing happens",
                &[(0, false), (100, false)],
                false,
                &[100, 100],
            ),
            (
                "marked: 50 at once, then 10 and 0 a TTL apart",
                &[
                    (0, true),
                    (10, true),
                    (30, true),
                    (59, true),
                    (60, true),
                    (500, true),
                ],
                false,
                &[50, 50, 10, 10, 0, 0],
            ),
            (
                "unmarked when drained: 10, 50, 100 a TTL apart",
                &[
                    (0, true),
                    (30, true),
                    (60, true),
                    (90, false),
                    (100, false),
                    (120, false),
                    (150, false),
                    (151, false),
                ],
                false,
                &[50, 10, 0, 10, 10, 50, 100, 100],
            ),
            (
                "unmarked halfway: back up from where it is",
                &[(0, true), (30, true), (40, false), (60, false), (90, false)],
                false,
                &[50, 10, 10, 50, 100],
            ),
            (
                "a restart with the mark on: fully drained",
                &[(0, true), (10, true)],
                true,
                &[0, 0],
            ),
        ];
        for (name, passes, restarted, expected) in cases {
            assert_eq!(walk(passes, *restarted), *expected, "{name}");
        }
    }

    #[test]
    fn the_next_step_is_due_a_ttl_after_the_last() {
        let state = drain_step(None, true, 100, 30, false).unwrap();
        assert_eq!(next_step_in(&state, 110, 30), Some(20));
        let drained = DrainState {
            percent: 0,
            moved_at: 0,
            draining: true,
        };
        assert_eq!(next_step_in(&drained, 10, 30), None);
    }
}
