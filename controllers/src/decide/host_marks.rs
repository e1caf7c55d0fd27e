//! Distributed mode's host marks: the TXT record `kuadrant.last_modified_at.<host>` whose value
//! changes with every change any cluster makes to a host's records, and when a refresh reads it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use meridian_dns::model::{Endpoint, RecordType, is_at_or_below};
use meridian_dns::plan::ownership_txt_name;

use crate::decide::shared_health::{read_members, read_reports};

/// Refreshes a host that only this cluster publishes goes without a read of its mark, in a
/// fleet small enough ([`sole_owner_refreshes_unread`]).
pub const SOLE_OWNER_REFRESHES_UNREAD: u32 = 9;

/// Per owner of a shared host (and per shared host a cluster looks at in the zone, since a
/// provider's budget is the account's): how much each owner's looks at it are spaced out once
/// the fleet is large. The owners together then look twice a second, 40 % of Route53's 5
/// requests a second, whatever their number: past 120 owners at a 60 s refresh, a cluster with
/// one shared host looks every `owners × 0.5 s` (150 s at 300 owners) instead of every
/// refresh, and sees another cluster's change that much later. Its refreshes still come every refresh interval, and one at which
/// its own probes' verdicts changed plans at once: only reading the zone is spaced out.
pub const LOOK_SPACING: Duration = Duration::from_millis(500);

/// Per cluster publishing into a zone: how much a cluster's full reads of the zone
/// (verification) and its looks at hosts only it publishes are spaced out once the fleet is
/// large: every `clusters × 20 s` (100 min at 300 clusters) if longer than the zone's
/// verification interval.
pub const VERIFY_SPACING: Duration = Duration::from_secs(20);

/// Per cluster and per page of the zone: a full read costs a call per page (Route53's 300
/// record sets), and the zone grows with the fleet, so verification is spaced by both: the
/// fleet's full reads together then come to one page every 4 s (5 % of Route53's budget),
/// whatever the fleet's size. At 300 clusters sharing a zone of 15 pages, every 5 hours.
pub const VERIFY_PAGE_SPACING: Duration = Duration::from_secs(4);

/// The longest the fleet's size and the zone's space verification out (a zone's own longer
/// `spec.verificationInterval` stands): however large a zone grows (another writer could
/// inflate it), each cluster still reads it daily.
pub const MAX_FLEET_VERIFICATION: Duration = Duration::from_secs(86_400);

/// The record sets of one page of a zone's listing (Route53's), by which a zone's size is
/// counted for [`fleet_verification_interval`] at every provider.
pub const ZONE_PAGE_RECORDS: usize = 300;

/// How long a cluster waits between two looks at a host it shares with `owners` clusters
/// (itself included; times the shared hosts it looks at in the zone): the refresh, or
/// [`LOOK_SPACING`] per owner if longer.
pub fn look_interval(refresh: Duration, owners: usize) -> Duration {
    refresh.max(LOOK_SPACING.saturating_mul(u32::try_from(owners).unwrap_or(u32::MAX)))
}

fn per_cluster(fleet: usize) -> Duration {
    VERIFY_SPACING.saturating_mul(u32::try_from(fleet).unwrap_or(u32::MAX))
}

/// How long a cluster of a fleet of `fleet` clusters (the most owners any of its hosts in the
/// zone has) waits between two full reads of a zone of `pages` pages (as its last read found
/// it): the zone's own interval, or [`VERIFY_SPACING`] per cluster, or
/// [`VERIFY_PAGE_SPACING`] per cluster and page, whichever is longest (the last two at most
/// [`MAX_FLEET_VERIFICATION`]).
pub fn fleet_verification_interval(configured: Duration, fleet: usize, pages: usize) -> Duration {
    let fleet_pages = u32::try_from(fleet.saturating_mul(pages)).unwrap_or(u32::MAX);
    let spacing = per_cluster(fleet).max(VERIFY_PAGE_SPACING.saturating_mul(fleet_pages));
    configured.max(spacing.min(MAX_FLEET_VERIFICATION))
}

/// Refreshes a host only this cluster publishes goes without a read of its mark, in a fleet of
/// `fleet` clusters: [`SOLE_OWNER_REFRESHES_UNREAD`], or as many as fill [`VERIFY_SPACING`]
/// per cluster if more (one item a read, however large the zone).
pub fn sole_owner_refreshes_unread(refresh: Duration, fleet: usize) -> u32 {
    let paced = per_cluster(fleet).as_secs_f64() / refresh.as_secs_f64().max(1.0);
    SOLE_OWNER_REFRESHES_UNREAD.max((paced.ceil() as u32).saturating_sub(1))
}

/// Whether a distributed-mode refresh reads the host's last-modified mark, after
/// `refreshes_unread` refreshes that did not. A host other clusters publish too is read at
/// every look ([`look_interval`]: every refresh, short of a large fleet): they change it, and
/// report health on it. A host only this cluster publishes (as
/// the last full look at the zone found) changes only by this cluster's hand, so its mark is
/// read once `unread_limit` refreshes went without ([`sole_owner_refreshes_unread`]: every tenth
/// refresh, or rarer in a large fleet): a cluster that starts publishing the same host, or an
/// edit from outside, is seen that much later. At 100 clusters with one own host and one shared
/// host each, that is 110 reads per refresh interval instead of 200.
pub fn mark_read_due(sole_owner: bool, refreshes_unread: u32, unread_limit: u32) -> bool {
    !sole_owner || refreshes_unread >= unread_limit
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

/// Per record, its host's mark as this process last saw it, the refreshes since it was last
/// read (a host only this cluster publishes is read every few refreshes, not every one), when
/// its next look is due, whether the host's last read took one call, and how many members its
/// last look found.
#[derive(Debug, Default)]
pub struct HostMarks {
    marks: Mutex<HashMap<String, Option<String>>>,
    refreshes_unread: Mutex<HashMap<String, u32>>,
    next_looks: Mutex<HashMap<String, Instant>>,
    one_call_hosts: Mutex<HashMap<String, bool>>,
    owners_looked: Mutex<HashMap<String, usize>>,
}

/// What the refresh count of a record whose next refresh must read starts from.
const READ_AT_ONCE: u32 = u32::MAX;

impl HostMarks {
    /// Whether this refresh of `record` reads its host's last-modified mark
    /// ([`mark_read_due`] after `unread_limit` refreshes); counts the refreshes that do not.
    pub fn read_due(&self, record: &str, sole_owner: bool, unread_limit: u32) -> bool {
        let mut unread = self.refreshes_unread.lock().expect("refreshes lock");
        // A record not seen before reads at once.
        let count = unread.entry(record.to_string()).or_insert(READ_AT_ONCE);
        let due = mark_read_due(sole_owner, *count, unread_limit);
        *count = if due { 0 } else { count.saturating_add(1) };
        due
    }

    /// Whether a refresh at `now` of `record`, whose host other clusters publish too, looks at
    /// the host: at once for a record not looked at before (or just written), then once its
    /// [`look_interval`] has passed since the last look.
    pub fn look_due(&self, record: &str, now: Instant) -> bool {
        self.next_looks
            .lock()
            .expect("next looks lock")
            .get(record)
            .is_none_or(|next| *next <= now)
    }

    /// A look at `record`'s host at `now`: the next is due `interval` later.
    pub fn looked(&self, record: &str, now: Instant, interval: Duration) {
        self.next_looks
            .lock()
            .expect("next looks lock")
            .insert(record.to_string(), now + interval);
    }

    /// How long after `now` the next look at `record`'s host is due (zero if it is).
    pub fn next_look_in(&self, record: &str, now: Instant) -> Duration {
        self.next_looks
            .lock()
            .expect("next looks lock")
            .get(record)
            .map_or(Duration::ZERO, |next| next.saturating_duration_since(now))
    }

    /// Whether a look at `record`'s host reads the host whole rather than its mark alone: the
    /// mark is among the host's records, so a host whose last read took one call (or that was
    /// never read) costs one call either way, and a look that finds the mark moved needs no
    /// second read.
    pub fn host_fits_one_read(&self, record: &str) -> bool {
        self.one_call_hosts
            .lock()
            .expect("host reads lock")
            .get(record)
            .is_none_or(|one_call| *one_call)
    }

    /// The owners a look at `record`'s host found (its member list as read): status has them
    /// as of the last plan, which a look that settles does not update.
    pub fn note_owners(&self, record: &str, owners: usize) {
        self.owners_looked
            .lock()
            .expect("owners lock")
            .insert(record.to_string(), owners);
    }

    /// The owners the last look at `record`'s host found, if one read its member list.
    pub fn owners_looked(&self, record: &str) -> Option<usize> {
        self.owners_looked
            .lock()
            .expect("owners lock")
            .get(record)
            .copied()
    }

    /// Whether the last read of `record`'s host took one call.
    pub fn note_host_read(&self, record: &str, one_call: bool) {
        self.one_call_hosts
            .lock()
            .expect("host reads lock")
            .insert(record.to_string(), one_call);
    }

    /// Makes the next refresh of `record` read its host's mark: after this cluster wrote, others
    /// may start publishing the host (a fleet's cold start), and the first writer would
    /// otherwise take itself for the sole owner for ten refreshes.
    pub fn read_next_refresh(&self, record: &str) {
        self.refreshes_unread
            .lock()
            .expect("refreshes lock")
            .insert(record.to_string(), READ_AT_ONCE);
        self.next_looks
            .lock()
            .expect("next looks lock")
            .remove(record);
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

    /// Drops what is kept of `record`, withdrawn: a fleet whose records come and go would
    /// otherwise keep every record it ever published.
    pub fn forget(&self, record: &str) {
        self.marks.lock().expect("marks lock").remove(record);
        self.refreshes_unread
            .lock()
            .expect("refreshes lock")
            .remove(record);
        self.next_looks
            .lock()
            .expect("next looks lock")
            .remove(record);
        self.one_call_hosts
            .lock()
            .expect("host reads lock")
            .remove(record);
        self.owners_looked
            .lock()
            .expect("owners lock")
            .remove(record);
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
        let limit = sole_owner_refreshes_unread(Duration::from_secs(60), 10);
        assert_eq!(limit, SOLE_OWNER_REFRESHES_UNREAD);
        for unread in 0..30 {
            assert!(
                mark_read_due(false, unread, limit),
                "shared, {unread} unread"
            );
        }
        let due: Vec<u32> = (0..30)
            .filter(|unread| mark_read_due(true, *unread, limit))
            .collect();
        assert_eq!(due, (SOLE_OWNER_REFRESHES_UNREAD..30).collect::<Vec<_>>());
        // A record never read, or just written, reads at once, then counts again.
        let marks = HostMarks::default();
        let reads: Vec<bool> = (0..12).map(|_| marks.read_due("r", true, limit)).collect();
        assert_eq!(reads.iter().filter(|read| **read).count(), 2);
        assert!(reads[0] && reads[10], "{reads:?}");
        marks.read_next_refresh("r");
        assert!(marks.read_due("r", true, limit));
    }

    #[test]
    fn a_withdrawn_record_is_forgotten_and_starts_afresh_if_it_comes_back() {
        let marks = HostMarks::default();
        let now = Instant::now();
        marks.remember("gone", Some("mark".into()));
        marks.looked("gone", now, Duration::from_secs(60));
        marks.note_owners("gone", 3);
        marks.note_host_read("gone", false);
        assert!(marks.read_due("gone", true, 10));
        assert!(!marks.read_due("gone", true, 10));
        marks.remember("kept", Some("other".into()));
        marks.forget("gone");
        assert_eq!(marks.last_seen("gone"), None);
        assert_eq!(marks.owners_looked("gone"), None);
        assert!(marks.host_fits_one_read("gone"));
        // As a record never seen: looked at and read at once.
        assert!(marks.look_due("gone", now));
        assert!(marks.read_due("gone", true, 10));
        assert_eq!(marks.last_seen("kept"), Some(Some("other".into())));
    }

    #[test]
    fn a_large_fleet_spaces_its_looks_so_the_fleet_stays_inside_a_fixed_share_of_the_budget() {
        let refresh = Duration::from_secs(60);
        // (owners or clusters, the zone's pages, look interval s, verification s, sole
        // owner's refreshes unread)
        let cases = [
            (1, 1, 60, 600, 9),
            (10, 1, 60, 600, 9),
            (100, 5, 60, 2_000, 33),
            (120, 6, 60, 2_880, 39),
            (300, 15, 150, 18_000, 99),
            (3_000, 150, 1_500, 86_400, 999),
        ];
        for (fleet, pages, look, verify, unread) in cases {
            assert_eq!(
                look_interval(refresh, fleet),
                Duration::from_secs(look),
                "{fleet}"
            );
            assert_eq!(
                fleet_verification_interval(Duration::from_secs(600), fleet, pages),
                Duration::from_secs(verify),
                "{fleet}"
            );
            // The fleet's full reads: one page every 4 s once past the zone's own interval,
            // until a day between reads.
            let pages_per_second =
                (fleet * pages) as f64 / Duration::from_secs(verify).as_secs_f64();
            assert!(
                pages_per_second <= 0.25 + 1e-9 || verify == 86_400,
                "{fleet}: {pages_per_second}"
            );
            assert_eq!(
                sole_owner_refreshes_unread(refresh, fleet),
                unread,
                "{fleet}"
            );
        }
        // Past the refresh, the owners' looks together come twice a second, however many.
        for owners in [120_usize, 300, 1_000, 10_000] {
            let per_second = owners as f64 / look_interval(refresh, owners).as_secs_f64();
            assert!((per_second - 2.0).abs() < 1e-9, "{owners}: {per_second}");
        }
        // A zone's own longer interval stands; a slow refresh is never shortened.
        assert_eq!(
            fleet_verification_interval(Duration::from_secs(86_400), 300, 1),
            Duration::from_secs(86_400)
        );
        assert_eq!(
            look_interval(Duration::from_secs(600), 300),
            Duration::from_secs(600)
        );
    }

    #[test]
    fn a_shared_host_is_looked_at_once_its_interval_passed_and_at_once_after_a_write() {
        let marks = HostMarks::default();
        let start = Instant::now();
        let interval = Duration::from_secs(150);
        assert!(marks.look_due("r", start), "never looked at");
        assert_eq!(marks.next_look_in("r", start), Duration::ZERO);
        marks.looked("r", start, interval);
        for (after, due) in [
            (0, false),
            (60, false),
            (149, false),
            (150, true),
            (400, true),
        ] {
            let now = start + Duration::from_secs(after);
            assert_eq!(marks.look_due("r", now), due, "{after} s after");
        }
        assert_eq!(
            marks.next_look_in("r", start + Duration::from_secs(100)),
            Duration::from_secs(50)
        );
        assert!(
            marks.look_due("other", start),
            "each record has its own looks"
        );
        marks.read_next_refresh("r");
        assert!(
            marks.look_due("r", start),
            "a write makes the next refresh look"
        );
    }

    #[test]
    fn a_host_is_read_whole_until_a_read_of_it_takes_more_than_one_call() {
        let marks = HostMarks::default();
        assert!(marks.host_fits_one_read("r"), "never read");
        marks.note_host_read("r", true);
        assert!(marks.host_fits_one_read("r"));
        marks.note_host_read("r", false);
        assert!(!marks.host_fits_one_read("r"));
        assert!(marks.host_fits_one_read("other"));
    }
}
