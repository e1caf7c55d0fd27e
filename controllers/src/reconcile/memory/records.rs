//! What the DNSRecord reconcile remembers from one pass to the next, each memory owned by the
//! step that uses it: the priority tiers' choice (decide), the failovers under way (health, for
//! their metrics), what this cluster's probes said at the last full pass and the records a zone
//! verification found drifted (the steady-state shortcut). All are keyed by the record's
//! `DNSRecord/namespace/name` and lost on restart, which each step is written to survive.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;
use meridian_dns::model::Endpoint;
use meridian_dns::tiers::{TierChoice, TierClock, TierMemory};

use crate::runtime::clock::seconds_between;
use crate::runtime::metrics::{FailoverPhase, Metrics};

/// The record reconcile's memories.
#[derive(Debug, Default)]
pub struct RecordMemory {
    pub tiers: TierMemories,
    pub failovers: Failovers,
    pub probes_seen: ProbesSeen,
    pub drifted: Drifted,
    pub tier_rechecks: TierRechecks,
}

/// Per record, what its priority tiers remember between passes (see [`meridian_dns::tiers`]).
#[derive(Debug, Default)]
pub struct TierMemories(Mutex<HashMap<String, TierMemory>>);

impl TierMemories {
    /// Chooses the active priority tier of each weighted set of `record`, remembering what the
    /// choice needs for the next pass.
    pub fn choose(
        &self,
        record: &str,
        healthy: &[Endpoint],
        requested: &[Endpoint],
        published: Option<&[Endpoint]>,
        clock: TierClock,
    ) -> TierChoice {
        let mut tiers = self.0.lock().expect("tier memory lock");
        let memory = tiers.entry(record.to_string()).or_default();
        meridian_dns::tiers::choose_tiers(healthy, requested, published, memory, clock)
    }
}

/// When a leaf's failover began and was decided.
#[derive(Debug, Clone, Copy)]
struct FailoverClock {
    first_failure: Timestamp,
    verdict: Timestamp,
}

/// Per record, the leaves judged unhealthy that are still in the zone: when their failures
/// began and when the verdict came. Their failover times go to the metrics.
#[derive(Debug, Default)]
pub struct Failovers(Mutex<HashMap<String, BTreeMap<String, FailoverClock>>>);

impl Failovers {
    /// A leaf of `record` judged unhealthy at `now`, its failures begun at `first_failure`:
    /// counts its detection time, once per run of failures.
    pub fn detected(
        &self,
        metrics: &Metrics,
        record: &str,
        address: &str,
        first_failure: Timestamp,
        now: Timestamp,
        zone: &str,
    ) {
        let mut failovers = self.0.lock().expect("failovers lock");
        let leaves = failovers.entry(record.to_string()).or_default();
        if leaves.contains_key(address) {
            return;
        }
        let first_failure = first_failure.min(now);
        leaves.insert(
            address.to_string(),
            FailoverClock {
                first_failure,
                verdict: now,
            },
        );
        metrics.failover(
            FailoverPhase::Detection,
            zone,
            seconds_between(first_failure, now),
        );
    }

    /// A leaf of `record` judged healthy (or no longer judged): a failover of it that had not
    /// reached the zone is over.
    pub fn called_off(&self, record: &str, address: &str) {
        let mut failovers = self.0.lock().expect("failovers lock");
        if let Some(leaves) = failovers.get_mut(record) {
            leaves.remove(address);
            if leaves.is_empty() {
                failovers.remove(record);
            }
        }
    }

    /// `record` publishes only the leaves `published` in `zone` at `now`: every failover of a
    /// leaf not among them has reached the zone, and its publication and whole times count.
    pub fn published(
        &self,
        metrics: &Metrics,
        record: &str,
        published: &[String],
        now: Timestamp,
        zone: &str,
    ) {
        let mut failovers = self.0.lock().expect("failovers lock");
        let Some(leaves) = failovers.get_mut(record) else {
            return;
        };
        leaves.retain(|address, clock| {
            if published.contains(address) {
                return true;
            }
            let publication = seconds_between(clock.verdict, now);
            metrics.failover(FailoverPhase::Publication, zone, publication);
            let whole = seconds_between(clock.first_failure, now);
            metrics.failover(FailoverPhase::Whole, zone, whole);
            false
        });
        if leaves.is_empty() {
            failovers.remove(record);
        }
    }
}

/// Distributed mode: per record, the addresses this cluster's probes said were failing at its
/// last full pass.
#[derive(Debug, Default)]
pub struct ProbesSeen(Mutex<HashMap<String, BTreeSet<String>>>);

impl ProbesSeen {
    /// Whether the probes of `record`'s addresses say what they said at its last full pass.
    pub fn unchanged(&self, record: &str, failing: &BTreeSet<String>) -> bool {
        self.0.lock().expect("failing lock").get(record) == Some(failing)
    }

    pub fn remember(&self, record: &str, failing: BTreeSet<String>) {
        self.0
            .lock()
            .expect("failing lock")
            .insert(record.to_string(), failing);
    }
}

/// The records the zone's last verification found drifted: their next pass reads the zone.
#[derive(Debug, Default)]
pub struct Drifted(Mutex<BTreeSet<String>>);

impl Drifted {
    /// Marks `record` as drifted: its next pass reads the zone even in the steady state.
    pub fn mark(&self, record: &str) {
        self.0
            .lock()
            .expect("drifted lock")
            .insert(record.to_string());
    }

    /// Whether `record` was marked drifted, clearing the mark.
    pub fn take(&self, record: &str) -> bool {
        self.0.lock().expect("drifted lock").remove(record)
    }
}

/// Distributed mode: per record, when (seconds) a better tier held back by its hold-down may
/// take traffic back. The pass at that time plans, whatever the look at the zone says: nothing
/// in the zone changes when a hold-down ends. Lost on restart, when every record plans anyway.
#[derive(Debug, Default)]
pub struct TierRechecks(Mutex<HashMap<String, u64>>);

impl TierRechecks {
    /// `record` is to plan again at `at`, or (`None`) has nothing held back.
    pub fn set(&self, record: &str, at: Option<u64>) {
        let mut rechecks = self.0.lock().expect("tier rechecks lock");
        match at {
            Some(at) => rechecks.insert(record.to_string(), at),
            None => rechecks.remove(record),
        };
    }

    /// Seconds from `now` until `record`'s recheck, if one is set.
    pub fn wait(&self, record: &str, now: u64) -> Option<u64> {
        self.0
            .lock()
            .expect("tier rechecks lock")
            .get(record)
            .map(|at| at.saturating_sub(now))
    }

    /// Whether `record`'s recheck is due at `now`.
    pub fn due(&self, record: &str, now: u64) -> bool {
        self.0
            .lock()
            .expect("tier rechecks lock")
            .get(record)
            .is_some_and(|at| now >= *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::runtime::clock::at;

    #[test]
    fn a_failover_counts_its_detection_once_and_its_publication_when_the_leaf_leaves() {
        let metrics = Metrics::default();
        let failovers = Failovers::default();
        failovers.detected(&metrics, "r", "192.0.2.1", at(100), at(107), "example.com");
        // Judged again while still in the zone: not a second detection.
        failovers.detected(&metrics, "r", "192.0.2.1", at(100), at(110), "example.com");
        let text = metrics.render();
        assert!(
            text.contains("meridian_failover_detection_seconds_count{zone=\"example.com\"} 1"),
            "{text}"
        );
        // Still published: nothing more; gone from the zone: publication and whole count.
        failovers.published(&metrics, "r", &["192.0.2.1".into()], at(111), "example.com");
        assert!(!metrics.render().contains("meridian_failover_seconds_count"));
        failovers.published(&metrics, "r", &[], at(112), "example.com");
        let text = metrics.render();
        assert!(
            text.contains("meridian_failover_publication_seconds_sum{zone=\"example.com\"} 5"),
            "{text}"
        );
        assert!(
            text.contains("meridian_failover_seconds_sum{zone=\"example.com\"} 12"),
            "{text}"
        );
    }

    #[test]
    fn a_failover_called_off_counts_nothing_more() {
        let metrics = Metrics::default();
        let failovers = Failovers::default();
        failovers.detected(&metrics, "r", "192.0.2.1", at(100), at(107), "example.com");
        failovers.called_off("r", "192.0.2.1");
        failovers.published(&metrics, "r", &[], at(112), "example.com");
        assert!(!metrics.render().contains("meridian_failover_seconds_count"));
    }

    #[test]
    fn a_tier_recheck_is_due_from_its_time_until_it_is_cleared() {
        let rechecks = TierRechecks::default();
        assert!(!rechecks.due("r", 100));
        assert_eq!(rechecks.wait("r", 100), None);
        rechecks.set("r", Some(160));
        assert_eq!(rechecks.wait("r", 100), Some(60));
        assert!(!rechecks.due("r", 159));
        assert!(rechecks.due("r", 160));
        assert!(rechecks.due("r", 200));
        rechecks.set("r", None);
        assert!(!rechecks.due("r", 200));
    }

    #[test]
    fn a_drift_mark_is_taken_once() {
        let drifted = Drifted::default();
        drifted.mark("r");
        assert!(drifted.take("r"));
        assert!(!drifted.take("r"));
    }
}
