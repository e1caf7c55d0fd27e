//! Distributed mode's host marks: the TXT record `kuadrant.last_modified_at.<host>` whose value
//! changes with every change any cluster makes to a host's records, and when a refresh reads it.

use std::collections::HashMap;
use std::sync::Mutex;

/// Refreshes a host that only this cluster publishes goes without a read of its mark.
pub const SOLE_OWNER_REFRESHES_UNREAD: u32 = 9;

/// Whether a distributed-mode refresh reads the host's last-modified mark, after
/// `refreshes_unread` refreshes that did not. A host other clusters publish too is read every
/// refresh: they change it, and report health on it. A host only this cluster publishes (as
/// the last full look at the zone found) changes only by this cluster's hand, so its mark is
/// read every tenth refresh: a cluster that starts publishing the same host, or an edit from
/// outside, is seen within ten refreshes. At 100 clusters with one own host and one shared host
/// each, that is 110 reads per refresh interval instead of 200, which keeps a fleet sharing one
/// Route53 account under half of its 5 calls a second at the default 60 s refresh.
pub fn mark_read_due(sole_owner: bool, refreshes_unread: u32) -> bool {
    !sole_owner || refreshes_unread >= SOLE_OWNER_REFRESHES_UNREAD
}

pub fn last_modified_name(root_host: &str) -> String {
    format!(
        "kuadrant.last_modified_at.{}",
        root_host.trim_start_matches("*.")
    )
}

/// Per record, its host's mark as this process last saw it, and the refreshes since it was
/// last read (a host only this cluster publishes is read every few refreshes, not every one).
#[derive(Debug, Default)]
pub struct HostMarks {
    marks: Mutex<HashMap<String, Option<String>>>,
    refreshes_unread: Mutex<HashMap<String, u32>>,
}

impl HostMarks {
    /// Whether this refresh of `record` reads its host's last-modified mark
    /// ([`mark_read_due`]); counts the refreshes that do not.
    pub fn read_due(&self, record: &str, sole_owner: bool) -> bool {
        let mut unread = self.refreshes_unread.lock().expect("refreshes lock");
        // A record not seen before reads at once.
        let count = unread
            .entry(record.to_string())
            .or_insert(SOLE_OWNER_REFRESHES_UNREAD);
        let due = mark_read_due(sole_owner, *count);
        *count = if due { 0 } else { *count + 1 };
        due
    }

    /// Makes the next refresh of `record` read its host's mark: after this cluster wrote, others
    /// may start publishing the host (a fleet's cold start), and the first writer would
    /// otherwise take itself for the sole owner for ten refreshes.
    pub fn read_next_refresh(&self, record: &str) {
        self.refreshes_unread
            .lock()
            .expect("refreshes lock")
            .insert(record.to_string(), SOLE_OWNER_REFRESHES_UNREAD);
    }

    /// The last-modified mark of `record`'s host as last seen (`Some(None)`: seen absent).
    pub fn last_seen(&self, record: &str) -> Option<Option<String>> {
        self.marks.lock().expect("marks lock").get(record).cloned()
    }

    pub fn remember(&self, record: &str, mark: Option<String>) {
        self.marks
            .lock()
            .expect("marks lock")
            .insert(record.to_string(), mark);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_host_reads_its_mark_every_refresh_a_sole_owner_every_tenth() {
        for unread in 0..30 {
            assert!(mark_read_due(false, unread), "shared, {unread} unread");
        }
        let due: Vec<u32> = (0..30)
            .filter(|unread| mark_read_due(true, *unread))
            .collect();
        assert_eq!(due, (SOLE_OWNER_REFRESHES_UNREAD..30).collect::<Vec<_>>());
    }
}
