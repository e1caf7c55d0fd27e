//! Distributed mode's host marks: the TXT record `kuadrant.last_modified_at.<host>` whose value
//! changes with every change any cluster makes to a host's records, and when a refresh reads it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use meridian_dns::model::{Endpoint, RecordType, is_at_or_below};
use meridian_dns::plan::ownership_txt_name;

use crate::decide::shared_health::{read_members, read_reports};

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

/// Whether the records at and below a host, freshly read (`host_records`), settle a refresh
/// whose mark read found the host changed by another cluster, without planning from a listing
/// of the whole zone. They do when what this cluster published there (`published`, as its
/// status says) is all still in place, and there is nothing for it to weigh:
/// - each published record is there with the same key, TTL and properties, and every value of
///   it (a set the clusters share holds the others' values beside them);
/// - its ownership record is there, where that lies under the host (a host's own name has its
///   ownership record beside it, outside this read: the zone's verification reads those);
/// - for a health-checked host (`failing`: what this cluster's probes see failing there):
///   `owner` is in its member list and its probes see nothing failing (the caller then points
///   the probes at the host's addresses as read, as a plan would: another cluster's new
///   address must be probed);
/// - no failure report names any address: a report can withdraw this cluster's addresses, or
///   give back ones it withdrew, so it is weighed by a plan.
///
/// Anything else is planned from a listing as before. What another cluster changed otherwise
/// (its own values, its joining or leaving) asks nothing of this one: the shared sets are
/// written by each cluster with the others' values kept, and conditionally.
pub fn look_settles(
    owner: &str,
    failing: Option<&BTreeSet<String>>,
    published: &[Endpoint],
    host_records: &[Endpoint],
    host: &str,
) -> bool {
    let base = host.trim_start_matches("*.");
    let properties = |e: &Endpoint| {
        let mut properties = e.provider_specific.clone();
        properties.sort_by(|a, b| (&a.name, &a.value).cmp(&(&b.name, &b.value)));
        properties
    };
    let in_place = |mine: &Endpoint| {
        host_records.iter().any(|there| {
            there.key() == mine.key()
                && there.record_ttl == mine.record_ttl
                && properties(there) == properties(mine)
                && {
                    let values: BTreeSet<&String> = there.targets.iter().collect();
                    mine.targets.iter().all(|t| values.contains(t))
                }
        })
    };
    let vouched = |mine: &Endpoint| {
        let name = ownership_txt_name(owner, mine.record_type, &mine.dns_name);
        !is_at_or_below(&name, base)
            || host_records
                .iter()
                .any(|e| e.record_type == RecordType::Txt && e.dns_name == name)
    };
    let health_settled = failing.is_none_or(|failing| {
        failing.is_empty()
            && read_members(host_records, host).is_some_and(|(_, members)| members.contains(owner))
    });
    let reported = read_reports(host_records, host)
        .values()
        .any(|(_, failing)| !failing.is_empty());
    published.iter().all(|mine| in_place(mine) && vouched(mine)) && health_settled && !reported
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
    use meridian_dns::plan::ownership_record;

    fn rr(name: &str, record_type: RecordType, values: &[&str]) -> Endpoint {
        Endpoint::new(name, record_type, values.iter().map(|v| v.to_string()), 60)
    }

    /// A host two clusters share, as a read of its records finds it after `b` changed its
    /// address: the shared set, a name under the host only `a` publishes and its ownership
    /// record, the member list and the mark.
    fn host_after_b_changed() -> Vec<Endpoint> {
        let own = rr("a.api.example.com", RecordType::A, &["192.0.2.1"]);
        vec![
            rr(
                "api.example.com",
                RecordType::A,
                &["192.0.2.1", "198.51.100.9"],
            ),
            ownership_record("a", &own),
            own,
            rr(
                "kuadrant.members.api.example.com",
                RecordType::Txt,
                &["members=a,b"],
            ),
            rr(
                "kuadrant.last_modified_at.api.example.com",
                RecordType::Txt,
                &["9 b"],
            ),
        ]
    }

    fn published_by_a() -> Vec<Endpoint> {
        vec![
            rr("api.example.com", RecordType::A, &["192.0.2.1"]),
            rr("a.api.example.com", RecordType::A, &["192.0.2.1"]),
        ]
    }

    #[test]
    fn another_clusters_change_settles_a_look_only_when_nothing_of_this_ones_moved() {
        let host = host_after_b_changed();
        let nothing = BTreeSet::new();
        let settles = |host: &[Endpoint]| {
            look_settles(
                "a",
                Some(&nothing),
                &published_by_a(),
                host,
                "api.example.com",
            )
        };
        assert!(settles(&host), "b's new address asks nothing of a");
        assert!(
            look_settles("a", None, &published_by_a(), &host[..4], "api.example.com"),
            "no member list needed without a health check"
        );

        let mut changed: Vec<(&str, Vec<Endpoint>)> = Vec::new();
        let mut lost_value = host.clone();
        lost_value[0].targets = vec!["198.51.100.9".into()];
        changed.push(("a's value gone from the shared set", lost_value));
        let mut ttl = host.clone();
        ttl[0].record_ttl = 300;
        changed.push(("the shared set's TTL changed", ttl));
        let mut weighted = host.clone();
        weighted[2].set_identifier = Some("a".into());
        changed.push(("a's record under another key", weighted));
        changed.push(("a's ownership record under the host gone", {
            let mut gone = host.clone();
            gone.remove(1);
            gone
        }));
        changed.push(("a left the member list", {
            let mut left = host.clone();
            left[3].targets = vec!["members=b".into()];
            left
        }));
        changed.push(("a failure report, even on another's address", {
            let mut reported = host.clone();
            reported.push(rr(
                &crate::decide::shared_health::health_record_name(
                    "198.51.100.9",
                    "api.example.com",
                ),
                RecordType::Txt,
                &["ip=198.51.100.9;failing=b"],
            ));
            reported
        }));
        for (what, host) in changed {
            assert!(!settles(&host), "{what}: planned from a listing");
        }
        // An emptied report (every cluster sees the address healthy again) weighs nothing.
        let mut healed = host.clone();
        healed.push(rr(
            &crate::decide::shared_health::health_record_name("198.51.100.9", "api.example.com"),
            RecordType::Txt,
            &["ip=198.51.100.9;failing="],
        ));
        assert!(settles(&healed));
        // This cluster's own probes see an address failing: a plan reports it.
        let failing: BTreeSet<String> = ["198.51.100.9".to_string()].into();
        assert!(!look_settles(
            "a",
            Some(&failing),
            &published_by_a(),
            &host,
            "api.example.com"
        ));
    }

    #[test]
    fn a_property_of_this_clusters_record_must_be_in_place_exactly() {
        let weight = |value: &str| meridian_dns::model::ProviderSpecific {
            name: meridian_dns::model::WEIGHT.into(),
            value: value.into(),
        };
        let mut mine = rr("w.api.example.com", RecordType::A, &["192.0.2.1"]);
        mine.set_identifier = Some("a".into());
        mine.provider_specific = vec![weight("10")];
        let settles = |there: &Endpoint| {
            let zone = [there.clone(), ownership_record("a", there)];
            look_settles(
                "a",
                None,
                std::slice::from_ref(&mine),
                &zone,
                "api.example.com",
            )
        };
        assert!(settles(&mine));
        let mut reweighted = mine.clone();
        reweighted.provider_specific = vec![weight("20")];
        assert!(!settles(&reweighted), "another weight");
        let mut more = mine.clone();
        more.provider_specific
            .push(meridian_dns::model::ProviderSpecific {
                name: meridian_dns::model::GEO_CODE.into(),
                value: "IE".into(),
            });
        assert!(!settles(&more), "a property more than published");
    }

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
