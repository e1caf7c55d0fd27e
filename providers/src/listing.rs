//! One zone listing shared by the plans of a process: a plan reads the records of its host
//! from a listing that started after the plan began, so it sees everything that could have
//! triggered it (a record's first plan, which nothing in the zone triggered, also from one that
//! started a moment before: [`earliest_listing`]), and every plan that began before a listing
//! started takes its records from that one listing instead of listing the zone again. At a
//! fleet's cold start each cluster's records are planned at once, and a hub plans every record
//! of a zone at once: one listing each, instead of one per record.
//!
//! The process's own writes keep a stored listing current (a listing is then the zone as it was
//! when it started, plus what this process wrote since), and a write whose outcome is not known
//! whole drops it. A listing in flight while this process writes is not stored: it may have read
//! the zone before the write. Other writers' changes after a listing started are not in it, and
//! a plan that began after it started never uses it; a plan that did, and was raced, writes
//! conditionally and is refused as stale (see `crate::route53`). So is a plan raced by this
//! process's writes through another provider of the same zone (another Secret for it): each
//! provider keeps its own listings. A failed listing fails the plans that waited for it too.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, RecordKey};

use crate::ProviderError;

/// How long before a record's first plan began a listing may have started and still serve it.
pub const FIRST_PLAN_LISTING_AGE: Duration = Duration::from_secs(5);

/// The earliest start of a listing that a plan which began at `began` may read. A plan that
/// something in the zone may have started (another cluster's mark, drift, a retry after a write
/// refused as stale) needs a listing that started after it began, or it could miss what woke
/// it. A record's first plan (`first_plan`: never published under any owner) was started by its
/// object, not by the zone, so a listing begun a moment before serves it as well. Its writes
/// are conditional name by name (a create needs the name free, an update or delete the values
/// read): a name another cluster changed meanwhile is refused as stale (the host's mark always
/// is, when anyone wrote the host), which drops the stored listing, and the retry plans from a
/// new one. At a cluster's start its records are created a few hundred milliseconds apart, and
/// without this the second one's plan listed the whole zone again right after the first's.
pub fn earliest_listing(began: Instant, first_plan: bool) -> Instant {
    if first_plan {
        began.checked_sub(FIRST_PLAN_LISTING_AGE).unwrap_or(began)
    } else {
        began
    }
}

/// The listings of a provider's zones, by zone ID.
#[derive(Debug, Default)]
pub struct ZoneListings {
    zones: Mutex<BTreeMap<String, Arc<ZoneListing>>>,
}

#[derive(Debug, Default)]
struct ZoneListing {
    /// Held while the zone is listed: one listing at a time, which the plans waiting for it
    /// then share.
    in_flight: tokio::sync::Mutex<()>,
    stored: Mutex<Stored>,
}

#[derive(Debug, Default)]
struct Stored {
    /// Counts this process's writes to the zone: a listing is stored only if none began while
    /// it ran.
    writes: u64,
    listing: Option<Listing>,
    /// The last listing that failed, and when it started: the plans that waited for it get its
    /// error rather than each trying again in turn (a throttled listing may take minutes).
    failed: Option<(Instant, ProviderError)>,
}

#[derive(Debug)]
struct Listing {
    started: Instant,
    records: BTreeMap<RecordKey, Endpoint>,
}

impl ZoneListings {
    fn zone(&self, zone_id: &str) -> Arc<ZoneListing> {
        self.zones
            .lock()
            .expect("listings lock")
            .entry(zone_id.to_string())
            .or_default()
            .clone()
    }

    /// The records a plan for `root_host` reads ([`meridian_dns::plan::host_records`]), from a
    /// listing that started at or after `since` (when the plan began): the stored one, or a new
    /// one made by `list`.
    pub async fn host_records_since<F, Fut>(
        &self,
        zone_id: &str,
        root_host: &str,
        since: Instant,
        list: F,
    ) -> Result<Vec<Endpoint>, ProviderError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<Endpoint>, ProviderError>>,
    {
        let zone = self.zone(zone_id);
        let _listing = zone.in_flight.lock().await;
        let writes = {
            let stored = zone.stored.lock().expect("listing lock");
            if let Some(listing) = stored.listing.as_ref().filter(|l| l.started >= since) {
                return Ok(meridian_dns::plan::host_records(
                    listing.records.values(),
                    root_host,
                ));
            }
            if let Some((_, error)) = stored.failed.as_ref().filter(|(at, _)| *at >= since) {
                return Err(error.clone());
            }
            tracing::debug!(
                zone_id,
                root_host,
                stored_before_plan = stored.listing.is_some(),
                "listing the zone"
            );
            stored.writes
        };
        let started = Instant::now();
        let records = match list().await {
            Ok(records) => records,
            Err(error) => {
                zone.stored.lock().expect("listing lock").failed = Some((started, error.clone()));
                return Err(error);
            }
        };
        let host = meridian_dns::plan::host_records(&records, root_host);
        let mut stored = zone.stored.lock().expect("listing lock");
        stored.failed = None;
        tracing::debug!(
            zone_id,
            root_host,
            records = records.len(),
            kept = stored.writes == writes,
            "zone listed"
        );
        if stored.writes == writes {
            stored.listing = Some(Listing {
                started,
                records: records.into_iter().map(|r| (r.key(), r)).collect(),
            });
        }
        Ok(host)
    }

    /// This process wrote `changes` to the zone: whole (`applied`), or with an outcome not
    /// known whole (an error), which drops the stored listing.
    pub fn wrote(&self, zone_id: &str, changes: &Changes, applied: bool) {
        let zone = self.zone(zone_id);
        let mut stored = zone.stored.lock().expect("listing lock");
        stored.writes += 1;
        match stored.listing.as_mut() {
            Some(listing) if applied => {
                for record in &changes.deletes {
                    listing.records.remove(&record.key());
                }
                for record in changes
                    .creates
                    .iter()
                    .chain(changes.updates.iter().map(|u| &u.new))
                {
                    listing.records.insert(record.key(), record.clone());
                }
            }
            _ => stored.listing = None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::changes::Update;
    use meridian_dns::model::RecordType;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn a(name: &str, value: &str) -> Endpoint {
        Endpoint::new(name, RecordType::A, [value.to_string()], 60)
    }

    /// A zone of two hosts, listed by a counter of listings.
    struct Zone {
        records: Mutex<Vec<Endpoint>>,
        listed: AtomicUsize,
    }

    impl Zone {
        fn new() -> Self {
            Zone {
                records: Mutex::new(vec![
                    a("one.example.com", "192.0.2.1"),
                    a("two.example.com", "192.0.2.2"),
                ]),
                listed: AtomicUsize::new(0),
            }
        }

        async fn list(&self) -> Result<Vec<Endpoint>, ProviderError> {
            self.listed.fetch_add(1, Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok(self.records.lock().unwrap().clone())
        }
    }

    #[tokio::test]
    async fn plans_that_began_before_a_listing_share_it_and_later_ones_list_again() {
        let (zone, listings) = (Zone::new(), ZoneListings::default());
        let began = Instant::now();
        let one = listings
            .host_records_since("z", "one.example.com", began, || zone.list())
            .await
            .unwrap();
        let two = listings
            .host_records_since("z", "two.example.com", began, || zone.list())
            .await
            .unwrap();
        assert_eq!(one, [a("one.example.com", "192.0.2.1")]);
        assert_eq!(two, [a("two.example.com", "192.0.2.2")]);
        assert_eq!(
            zone.listed.load(Ordering::SeqCst),
            1,
            "one listing for both"
        );
        // Another writer changes the zone; a plan that begins now lists again and sees it.
        zone.records.lock().unwrap()[1] = a("two.example.com", "192.0.2.9");
        let later = listings
            .host_records_since("z", "two.example.com", Instant::now(), || zone.list())
            .await
            .unwrap();
        assert_eq!(later, [a("two.example.com", "192.0.2.9")]);
        assert_eq!(zone.listed.load(Ordering::SeqCst), 2);
        // Zones are listed apart.
        listings
            .host_records_since("y", "one.example.com", began, || zone.list())
            .await
            .unwrap();
        assert_eq!(zone.listed.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_first_plan_shares_a_listing_begun_a_moment_before_it_and_a_later_plan_does_not() {
        let (zone, listings) = (Zone::new(), ZoneListings::default());
        listings
            .host_records_since("z", "one.example.com", Instant::now(), || zone.list())
            .await
            .unwrap();
        // The cluster's second record is created right after the first one's listing started.
        let began = Instant::now();
        let first = listings
            .host_records_since(
                "z",
                "two.example.com",
                earliest_listing(began, true),
                || zone.list(),
            )
            .await
            .unwrap();
        assert_eq!(first, [a("two.example.com", "192.0.2.2")]);
        assert_eq!(
            zone.listed.load(Ordering::SeqCst),
            1,
            "shared by the first plan"
        );
        // A plan that the zone may have started (its mark changed) lists again.
        listings
            .host_records_since(
                "z",
                "two.example.com",
                earliest_listing(began, false),
                || zone.list(),
            )
            .await
            .unwrap();
        assert_eq!(
            zone.listed.load(Ordering::SeqCst),
            2,
            "listed for a later plan"
        );
        // A first plan long after the last listing lists again too: it is bounded.
        let long_after = Instant::now() + FIRST_PLAN_LISTING_AGE + Duration::from_secs(1);
        assert!(earliest_listing(long_after, true) > Instant::now());
    }

    #[tokio::test]
    async fn plans_waiting_on_a_listing_in_flight_share_it() {
        let (zone, listings) = (Zone::new(), ZoneListings::default());
        let began = Instant::now();
        let (one, two) = tokio::join!(
            listings.host_records_since("z", "one.example.com", began, || zone.list()),
            listings.host_records_since("z", "two.example.com", began, || zone.list()),
        );
        assert_eq!(one.unwrap().len() + two.unwrap().len(), 2);
        assert_eq!(zone.listed.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn own_writes_keep_the_listing_current_and_a_failed_one_drops_it() {
        let (zone, listings) = (Zone::new(), ZoneListings::default());
        let began = Instant::now();
        let read = |host: &'static str| {
            let (zone, listings) = (&zone, &listings);
            async move {
                listings
                    .host_records_since("z", host, began, || zone.list())
                    .await
                    .unwrap()
            }
        };
        read("one.example.com").await;
        let changes = Changes {
            creates: vec![a("new.one.example.com", "192.0.2.3")],
            updates: vec![Update {
                old: a("one.example.com", "192.0.2.1"),
                new: a("one.example.com", "192.0.2.4"),
            }],
            deletes: vec![a("two.example.com", "192.0.2.2")],
        };
        listings.wrote("z", &changes, true);
        assert_eq!(
            read("one.example.com").await,
            [
                a("new.one.example.com", "192.0.2.3"),
                a("one.example.com", "192.0.2.4")
            ]
        );
        assert_eq!(read("two.example.com").await, []);
        assert_eq!(
            zone.listed.load(Ordering::SeqCst),
            1,
            "no listing after a write"
        );
        listings.wrote("z", &changes, false);
        read("one.example.com").await;
        assert_eq!(
            zone.listed.load(Ordering::SeqCst),
            2,
            "listed again after a failure"
        );
    }

    #[tokio::test]
    async fn a_failed_listing_fails_the_plans_that_waited_for_it_and_no_later_one() {
        let (zone, listings) = (Zone::new(), ZoneListings::default());
        let began = Instant::now();
        let throttled = || async {
            zone.listed.fetch_add(1, Ordering::SeqCst);
            Err(ProviderError::Throttled("ListResourceRecordSets".into()))
        };
        let (one, two) = tokio::join!(
            listings.host_records_since("z", "one.example.com", began, throttled),
            listings.host_records_since("z", "two.example.com", began, throttled),
        );
        assert!(matches!(one, Err(ProviderError::Throttled(_))), "{one:?}");
        assert!(matches!(two, Err(ProviderError::Throttled(_))), "{two:?}");
        assert_eq!(zone.listed.load(Ordering::SeqCst), 1, "tried once for both");
        let later = listings
            .host_records_since("z", "one.example.com", Instant::now(), || zone.list())
            .await;
        assert_eq!(
            later.unwrap().len(),
            1,
            "a plan that began after it lists again"
        );
        // That success ends the failure's reach, even once its listing is dropped: a plan that
        // began before the failure lists again rather than getting the old error.
        listings.wrote("z", &Changes::default(), false);
        let early = listings
            .host_records_since("z", "one.example.com", began, || zone.list())
            .await;
        assert!(early.is_ok(), "{early:?}");
    }

    #[tokio::test]
    async fn a_listing_during_which_this_process_wrote_is_not_kept() {
        let (zone, listings) = (Zone::new(), ZoneListings::default());
        let began = Instant::now();
        let listed = listings
            .host_records_since("z", "one.example.com", began, || async {
                // This process writes while the listing runs: the listing may predate it.
                listings.wrote("z", &Changes::default(), true);
                zone.list().await
            })
            .await
            .unwrap();
        assert_eq!(listed.len(), 1, "its own plan still gets the listing");
        listings
            .host_records_since("z", "one.example.com", began, || zone.list())
            .await
            .unwrap();
        assert_eq!(
            zone.listed.load(Ordering::SeqCst),
            2,
            "not stored for others"
        );
    }
}
