//! How long a failing object waits before its next reconcile: exponential in its failures in a
//! row, with full jitter so that many objects failing together (a provider outage) never retry
//! in step; its first success starts it over.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use rand::Rng;

/// Per object, its failures in a row, and its writes a provider refused in a row because
/// another writer got there first.
#[derive(Debug, Default)]
pub struct Backoff {
    failures: Mutex<HashMap<String, u32>>,
    raced: Mutex<HashMap<String, u32>>,
}

impl Backoff {
    /// Counts a provider's refusal of `object`'s write because another writer got there
    /// first; its refusals in a row, this one included.
    pub fn raced(&self, object: &str) -> u32 {
        let mut raced = self.raced.lock().expect("raced lock");
        let count = raced.entry(object.to_string()).or_insert(0);
        *count = count.saturating_add(1);
        *count
    }

    /// `object`'s such refusals in a row so far.
    pub fn raced_in_a_row(&self, object: &str) -> u32 {
        self.raced
            .lock()
            .expect("raced lock")
            .get(object)
            .copied()
            .unwrap_or(0)
    }

    /// Counts a failure of `object`; the wait before its next attempt, drawn at random from the
    /// upper half of [`ceiling`] for its failures in a row.
    pub fn failed(&self, object: &str, base: Duration, cap: Duration) -> Duration {
        let attempt = {
            let mut failures = self.failures.lock().expect("failures lock");
            let count = failures.entry(object.to_string()).or_insert(0);
            *count = count.saturating_add(1);
            *count
        };
        let ceiling = ceiling(attempt, base, cap);
        rand::rng().random_range(ceiling / 2..=ceiling)
    }

    /// Whether `object`'s last pass failed (a success since would have forgotten it).
    pub fn failing(&self, object: &str) -> bool {
        self.failures
            .lock()
            .expect("failures lock")
            .contains_key(object)
    }

    /// Forgets `object`'s failures and refusals: its next failure waits as its first did.
    pub fn succeeded(&self, object: &str) {
        self.failures.lock().expect("failures lock").remove(object);
        self.raced.lock().expect("raced lock").remove(object);
    }
}

/// The longest wait after `attempt` failures in a row: `base` doubled per failure, at most `cap`.
pub fn ceiling(attempt: u32, base: Duration, cap: Duration) -> Duration {
    base.saturating_mul(1 << attempt.min(16)).min(cap)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: Duration = Duration::from_millis(500);
    const CAP: Duration = Duration::from_secs(300);

    #[test]
    fn waits_grow_with_failures_in_a_row_and_start_over_after_a_success() {
        let backoff = Backoff::default();
        let waits: Vec<Duration> = (0..12).map(|_| backoff.failed("a", BASE, CAP)).collect();
        for (attempt, wait) in (1..).zip(&waits) {
            let ceiling = ceiling(attempt, BASE, CAP);
            assert!(
                ceiling / 2 <= *wait && *wait <= ceiling,
                "failure {attempt}: {wait:?} outside the upper half of {ceiling:?}"
            );
        }
        // The ranges of successive failures grow until the cap: each wait's floor is the
        // previous wait's ceiling.
        for attempt in 1..9 {
            assert_eq!(
                ceiling(attempt + 1, BASE, CAP) / 2,
                ceiling(attempt, BASE, CAP)
            );
        }
        assert_eq!(ceiling(12, BASE, CAP), CAP);
        assert_eq!(ceiling(40, BASE, CAP), CAP, "no overflow past the cap");

        // Another object's failures are its own; a success starts this one over.
        assert!(backoff.failed("b", BASE, CAP) <= ceiling(1, BASE, CAP));
        assert!(backoff.failing("a") && !backoff.failing("c"));
        backoff.succeeded("a");
        assert!(!backoff.failing("a"));
        assert!(backoff.failed("a", BASE, CAP) <= ceiling(1, BASE, CAP));
    }

    #[test]
    fn races_count_in_a_row_until_a_success() {
        let backoff = Backoff::default();
        assert_eq!(backoff.raced_in_a_row("a"), 0);
        assert_eq!(backoff.raced("a"), 1);
        assert_eq!(backoff.raced("a"), 2);
        assert_eq!(backoff.raced("b"), 1);
        assert_eq!(backoff.raced_in_a_row("a"), 2);
        backoff.succeeded("a");
        assert_eq!(backoff.raced_in_a_row("a"), 0);
        assert_eq!(backoff.raced_in_a_row("b"), 1);
    }
}
