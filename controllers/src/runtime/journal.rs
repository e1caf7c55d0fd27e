//! What the hub changed in DNS lately, for the live view: each publication that changed a
//! zone, with its time and why. Kept in memory on the replica that publishes (a standby's is
//! empty until it leads), the newest [`CAPACITY`] entries.

use std::collections::VecDeque;
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;
use serde::Serialize;

/// Entries kept.
pub const CAPACITY: usize = 200;

/// One change to a zone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    pub at: Timestamp,
    /// `namespace/name` of the DNSRecord.
    pub record: String,
    pub host: String,
    /// Records created, updated and deleted, e.g. `+1 ~0 -2`.
    pub changes: String,
    /// Why, as the record's status says it (health, tiers, drains, a new spec).
    pub reason: String,
}

#[derive(Debug, Default)]
pub struct Journal {
    entries: Mutex<VecDeque<Entry>>,
}

impl Journal {
    pub fn record(&self, entry: Entry) {
        let mut entries = self.entries.lock().expect("journal lock");
        if entries.len() == CAPACITY {
            entries.pop_front();
        }
        entries.push_back(entry);
    }

    /// The entries, newest first.
    pub fn recent(&self) -> Vec<Entry> {
        self.entries
            .lock()
            .expect("journal lock")
            .iter()
            .rev()
            .cloned()
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_newest_entries_newest_first() {
        let journal = Journal::default();
        for n in 0..CAPACITY + 5 {
            journal.record(Entry {
                at: Timestamp::from_second(n as i64).unwrap(),
                record: format!("ns/r{n}"),
                host: "api.example.com".into(),
                changes: "+1 ~0 -0".into(),
                reason: String::new(),
            });
        }
        let recent = journal.recent();
        assert_eq!(recent.len(), CAPACITY);
        assert_eq!(recent[0].record, format!("ns/r{}", CAPACITY + 4));
        assert_eq!(recent[CAPACITY - 1].record, "ns/r5");
    }
}
