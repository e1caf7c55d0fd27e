//! A shared request budget per provider account, and backoff with jitter for throttled calls.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

/// Spaces requests so that, across every caller sharing it, no more than `per_second` start in
/// any second. Callers wait their turn; nobody is refused.
#[derive(Debug)]
pub struct RequestBudget {
    interval: Duration,
    next_slot: Mutex<Option<Instant>>,
    spent: AtomicU64,
}

/// Route53's documented rate for one account.
pub const ROUTE53_REQUESTS_PER_SECOND: u32 = 5;

impl RequestBudget {
    pub fn per_second(per_second: u32) -> Self {
        RequestBudget {
            interval: Duration::from_secs(1) / per_second.max(1),
            next_slot: Mutex::new(None),
            spent: AtomicU64::new(0),
        }
    }

    /// Waits for this caller's slot.
    pub async fn acquire(&self) {
        let slot = {
            let mut next = self.next_slot.lock().expect("budget lock");
            let now = Instant::now();
            let slot = next.map_or(now, |n| n.max(now));
            *next = Some(slot + self.interval);
            slot
        };
        tokio::time::sleep_until(slot).await;
        self.spent.fetch_add(1, Ordering::Relaxed);
    }

    /// Requests made through this budget so far.
    pub fn spent(&self) -> u64 {
        self.spent.load(Ordering::Relaxed)
    }
}

/// Exponential backoff with full jitter: attempt n waits a random time up to base·2ⁿ, capped.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    pub max_attempts: u32,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(200),
            cap: Duration::from_secs(20),
            max_attempts: 8,
        }
    }
}

impl Backoff {
    pub fn delay(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let ceiling = self.base.saturating_mul(1 << attempt.min(16)).min(self.cap);
        ceiling.mul_f64(rng.random_range(0.0..=1.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn callers_sharing_a_budget_are_spaced_by_its_interval() {
        let budget = std::sync::Arc::new(RequestBudget::per_second(5));
        let started = Instant::now();
        let mut callers = Vec::new();
        for _ in 0..10 {
            let budget = budget.clone();
            callers.push(tokio::spawn(async move {
                budget.acquire().await;
                Instant::now()
            }));
        }
        let mut times = Vec::new();
        for caller in callers {
            times.push(caller.await.unwrap() - started);
        }
        times.sort();
        assert_eq!(budget.spent(), 10);
        // Ten requests at 5/s: the last starts 1.8 s after the first (virtual time).
        assert_eq!(times.last().copied(), Some(Duration::from_millis(1800)));
        assert!(
            times
                .windows(2)
                .all(|w| w[1] - w[0] == Duration::from_millis(200))
        );
    }

    #[test]
    fn backoff_grows_is_capped_and_jittered() {
        let backoff = Backoff::default();
        let mut rng = rand::rng();
        for attempt in 0..12 {
            let delay = backoff.delay(attempt, &mut rng);
            assert!(delay <= backoff.cap && delay <= backoff.base * (1 << attempt));
        }
        let distinct: std::collections::BTreeSet<Duration> =
            (0..20).map(|_| backoff.delay(5, &mut rng)).collect();
        assert!(distinct.len() > 1, "jittered");
    }
}
