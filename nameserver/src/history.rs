//! What a zone's transfers remember: the zone as a secondary holds it (plain records) and the
//! journal of its recent changes, from which an IXFR is answered.

use std::collections::{BTreeSet, VecDeque};
use std::sync::Arc;

use hickory_proto::rr::Record;

use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::wire::{DEFAULT_TTL, fqdn, to_wire};

/// Changes the journal keeps, at most; an older serial gets the whole zone.
pub(crate) const JOURNAL_CHANGES: usize = 100;
/// Records the journal keeps across its changes, at most (a bound on its memory).
const JOURNAL_RECORDS: usize = 200_000;

/// One record as a secondary holds it: a name, a type and one value.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct PlainRecord {
    pub name: String,
    pub record_type: RecordType,
    pub ttl: u32,
    pub value: String,
}

impl PlainRecord {
    pub(crate) fn new(name: &str, record_type: RecordType, ttl: u32, value: &str) -> Self {
        PlainRecord {
            name: name.to_string(),
            record_type,
            ttl: if ttl == 0 { DEFAULT_TTL } else { ttl },
            value: value.to_string(),
        }
    }

    pub(crate) fn to_wire(&self) -> Vec<Record> {
        let endpoint = Endpoint::new(&self.name, self.record_type, [self.value.clone()], self.ttl);
        to_wire(&fqdn(&self.name), vec![&endpoint])
    }
}

/// One change of the zone, from one serial to the next, as a secondary sees it.
#[derive(Debug)]
pub(crate) struct Change {
    pub from: u32,
    pub to: u32,
    pub removed: Vec<PlainRecord>,
    pub added: Vec<PlainRecord>,
}

/// What transfers need of a zone: its secondary view and the journal of the changes that led
/// to it (kept only by servers that allow transfers).
#[derive(Debug, Default)]
pub(crate) struct History {
    pub view: Vec<PlainRecord>,
    pub(crate) journal: VecDeque<Arc<Change>>,
}

impl History {
    /// The history of a zone whose secondary view is `view` at `serial`, one change after
    /// `previous` (the history of the zone it replaces, and that zone's serial).
    pub(crate) fn after(
        previous: Option<(&History, u32)>,
        view: Vec<PlainRecord>,
        serial: u32,
    ) -> History {
        let Some((previous, previous_serial)) = previous else {
            return History {
                view,
                journal: VecDeque::new(),
            };
        };
        let old: BTreeSet<&PlainRecord> = previous.view.iter().collect();
        let new: BTreeSet<&PlainRecord> = view.iter().collect();
        let change = Change {
            from: previous_serial,
            to: serial,
            removed: old.difference(&new).map(|r| (*r).clone()).collect(),
            added: new.difference(&old).map(|r| (*r).clone()).collect(),
        };
        let mut journal = previous.journal.clone();
        journal.push_back(Arc::new(change));
        let size = |c: &Change| c.removed.len() + c.added.len();
        let mut kept: usize = journal.iter().map(|c| size(c)).sum();
        while journal.len() > JOURNAL_CHANGES || (kept > JOURNAL_RECORDS && journal.len() > 1) {
            if let Some(dropped) = journal.pop_front() {
                kept -= size(&dropped);
            }
        }
        History { view, journal }
    }

    /// The changes from `serial` to the current one, in order; none when the journal does not
    /// reach back that far.
    pub(crate) fn changes_since(&self, serial: u32) -> Option<impl Iterator<Item = &Change> + '_> {
        // The journal is contiguous: each change starts where the one before ended.
        let start = self.journal.iter().position(|c| c.from == serial)?;
        Some(self.journal.range(start..).map(Arc::as_ref))
    }
}

/// Whether serial `a` is newer than `b` (RFC 1982 serial number arithmetic).
pub fn serial_newer(a: u32, b: u32) -> bool {
    a != b && (a.wrapping_sub(b) as i32) > 0
}
