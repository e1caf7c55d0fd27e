//! Verification of zones at providers against what their records published. In the steady
//! state a record asks its provider nothing, so a record of Meridian's changed or deleted out
//! of band (by a person, or another tool) would stay wrong. Each zone is read whole once per
//! `spec.verificationInterval` (default 10 min, ±10 % jitter so zones do not line up), through
//! the provider's own paced reads and request budget; every record found drifted
//! ([`meridian_dns::drift`]) is woken and re-planned against the zone. The plan puts back what
//! is Meridian's and reports, never fights, what another owner took over.
//!
//! Embedded zones are not verified: they live in this process and every pass plans them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_api::conditions;
use meridian_api::duration::parse_duration;
use meridian_api::kuadrant::{DEFAULT_VERIFICATION_INTERVAL, DNSRecord, ManagedZone};
use meridian_dns::drift::drift;
use meridian_dns::plan::Registry;
use meridian_providers::Provider;

use super::gather::provider_of;
use super::owner_of;
use crate::decide::convert::all_to_engine;
use crate::{Context, jittered};

/// How often the verifier looks at which zones are due (cheap: no provider call).
const TICK: Duration = Duration::from_secs(5);
/// After a failed read, the next attempt comes at most this much later.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(60);

/// The stream of drifted records to wake, and the task that verifies zones (abort it when the
/// controller stops).
pub fn start(
    ctx: Arc<Context>,
) -> (
    BoxStream<'static, ObjectRef<DNSRecord>>,
    tokio::task::JoinHandle<()>,
) {
    let (wake, woken) = futures::channel::mpsc::unbounded();
    let task = tokio::spawn(async move {
        let mut schedules: HashMap<String, Schedule> = HashMap::new();
        loop {
            tokio::time::sleep(TICK).await;
            let zones: Vec<(String, Arc<ManagedZone>)> = ctx
                .caches
                .zones
                .state()
                .into_iter()
                .filter(|zone| zone.spec.dns_provider_secret_ref.is_some())
                .map(|zone| {
                    let key = crate::object_key(
                        "ManagedZone",
                        zone.namespace().as_deref(),
                        &zone.name_any(),
                    );
                    (key, zone)
                })
                .collect();
            // Forget zones that are gone.
            schedules.retain(|key, _| zones.iter().any(|(live, _)| live == key));
            for (key, zone) in zones {
                let mut interval = verification_interval(&zone);
                let now = Instant::now();
                let schedule = schedules
                    .entry(key.clone())
                    .or_insert_with(|| Schedule::from(now));
                if ctx.config.distributed.is_some() {
                    // Every cluster of the fleet reads the whole zone: spaced with the fleet's
                    // size as it is now (a fleet that grew since the last read waits longer)
                    // and the zone's as the last read found it.
                    let fleet = fleet_seen(&ctx.caches.records.state(), &zone, &ctx.host_marks);
                    interval = crate::decide::host_marks::fleet_verification_interval(
                        interval,
                        fleet,
                        schedule.pages,
                    );
                }
                if !schedule.due(now, interval) {
                    continue;
                }
                match verify_zone(&zone, &ctx).await {
                    Ok((drifted, read)) => {
                        for record in drifted {
                            if wake.unbounded_send(record).is_err() {
                                return;
                            }
                        }
                        let pages = read
                            .map_or(schedule.pages, |records| {
                                records.div_ceil(crate::decide::host_marks::ZONE_PAGE_RECORDS)
                            })
                            .max(1);
                        *schedule = Schedule {
                            pages,
                            ..Schedule::from(Instant::now())
                        };
                    }
                    Err(message) => {
                        tracing::warn!(zone = %key, %message, "zone verification failed; trying again later");
                        schedule.retry_at =
                            Some(Instant::now() + interval.min(RETRY_AFTER_FAILURE));
                    }
                }
            }
        }
    });
    (woken.boxed(), task)
}

/// When a zone is read next: its interval (±10 %, drawn once per read) after the last read, or
/// after it was first seen; or, after a failed read, at the retry.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    since: Instant,
    spread: f64,
    retry_at: Option<Instant>,
    /// The zone's pages as its last read found them (1 before the first).
    pages: usize,
}

impl Schedule {
    fn from(since: Instant) -> Self {
        let spread = jittered(Duration::from_secs(1_000)).as_secs_f64() / 1_000.0;
        Schedule {
            since,
            spread,
            retry_at: None,
            pages: 1,
        }
    }

    fn due(&self, now: Instant, interval: Duration) -> bool {
        match self.retry_at {
            Some(retry) => retry <= now,
            None => self.since + interval.mul_f64(self.spread) <= now,
        }
    }
}

/// The zone's `spec.verificationInterval`, else the default.
pub fn verification_interval(zone: &ManagedZone) -> Duration {
    zone.spec
        .verification_interval
        .as_deref()
        .and_then(parse_duration)
        .unwrap_or(DEFAULT_VERIFICATION_INTERVAL)
}

/// The records of `records` that publish into `zone`.
fn records_in_zone<'a>(
    records: &'a [Arc<DNSRecord>],
    zone: &'a ManagedZone,
) -> impl Iterator<Item = &'a Arc<DNSRecord>> {
    records.iter().filter(|r| {
        r.namespace() == zone.namespace() && r.spec.managed_zone.name == zone.name_any()
    })
}

/// In distributed mode, how many clusters publish into `zone` as far as this one knows: the most
/// owners any of its records there found for their host, at its last plan (status) or its last
/// look (which settles without writing status), 1 with none published.
pub fn fleet_seen(
    records: &[Arc<DNSRecord>],
    zone: &ManagedZone,
    host_marks: &crate::decide::host_marks::HostMarks,
) -> usize {
    records_in_zone(records, zone)
        .map(|r| {
            let planned = r.status.as_ref().map_or(0, |s| s.domain_owners.len());
            let key = crate::object_key("DNSRecord", r.namespace().as_deref(), &r.name_any());
            planned.max(host_marks.owners_looked(&key).unwrap_or_default())
        })
        .max()
        .unwrap_or_default()
        .max(1)
}

/// How many of this cluster's records in `zone` found other owners for their host (at least 1):
/// Route53's budget is the account's, so a cluster's looks at all its shared hosts are spaced
/// out together.
pub fn shared_hosts_seen(records: &[Arc<DNSRecord>], zone: &ManagedZone) -> usize {
    records_in_zone(records, zone)
        .filter(|r| {
            r.status
                .as_ref()
                .is_some_and(|status| status.domain_owners.len() > 1)
        })
        .count()
        .max(1)
}

/// Reads the zone once and returns the records whose published records drifted, each marked
/// so that its next pass reads the zone, and how many record sets it read (`None`: nothing to
/// verify, so nothing was read).
async fn verify_zone(
    zone: &ManagedZone,
    ctx: &Context,
) -> Result<(Vec<ObjectRef<DNSRecord>>, Option<usize>), String> {
    let cached = ctx.caches.records.state();
    let records: Vec<Arc<DNSRecord>> = records_in_zone(&cached, zone)
        .filter(|r| published_and_ready(r))
        .cloned()
        .collect();
    if records.is_empty() {
        return Ok((Vec::new(), None));
    }
    // Counted once the zone is read (or could not be): a zone with nothing published to
    // verify reads nothing.
    let read = async {
        let (provider, zone_id) = provider_of(zone, ctx)
            .await
            .map_err(|(_, message)| message)?;
        provider.records(&zone_id).await.map_err(|e| e.to_string())
    }
    .await;
    ctx.metrics.zone_verified(read.is_ok());
    let current = read?;
    let registry = Registry::read(&current);
    let mut drifted = Vec::new();
    for record in records {
        let published = record
            .status
            .as_ref()
            .map(|s| all_to_engine(&s.endpoints))
            .unwrap_or_default();
        let owner = owner_of(&record, &ctx.config);
        let found = drift(&owner, &published, &registry);
        // Who else publishes the host is in status as the last plan found it. In distributed
        // mode a refresh can be settled by a read of the host's own records, which does not
        // hold the owners of the host's name (their records sit beside it): the owners found
        // here say when status is behind. Not drift: nothing of Meridian's changed.
        let owners_moved = record.spec.effective_root_host().is_some_and(|root_host| {
            record.status.as_ref().is_some_and(|status| {
                super::status::domain_owners(&current, &root_host, &owner) != status.domain_owners
            })
        });
        if found.is_empty() && !owners_moved {
            continue;
        }
        let key = crate::object_key(
            "DNSRecord",
            record.namespace().as_deref(),
            &record.name_any(),
        );
        if found.is_empty() {
            tracing::debug!(record = %key, "the host's owners changed since the record's last plan; re-planning for its status");
        } else {
            let found: Vec<String> = found.iter().map(ToString::to_string).collect();
            tracing::info!(record = %key, drift = %found.join("; "), "records changed out of band; re-planning");
            ctx.metrics.drift_repaired();
        }
        ctx.record_memory.drifted.mark(&key);
        drifted.push(ObjectRef::from_obj(&*record));
    }
    tracing::debug!(zone = %zone.name_any(), records = current.len(), drifted = drifted.len(), "zone verified");
    Ok((drifted, Some(current.len())))
}

/// Whether the record's status says its current generation is published in full: only those
/// can drift (the others re-read the zone on their own retries).
fn published_and_ready(record: &DNSRecord) -> bool {
    record.metadata.deletion_timestamp.is_none()
        && record.status.as_ref().is_some_and(|status| {
            status.observed_generation == record.metadata.generation
                && !status.endpoints.is_empty()
                && conditions::condition_status(&status.conditions, conditions::READY) == Some(true)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zone_is_read_an_interval_after_the_last_read_as_the_interval_is_now() {
        let start = Instant::now();
        let schedule = Schedule {
            since: start,
            spread: 1.0,
            retry_at: None,
            pages: 1,
        };
        let minutes = |m: u64| Duration::from_secs(m * 60);
        assert!(!schedule.due(start + minutes(9), minutes(10)));
        assert!(schedule.due(start + minutes(10), minutes(10)));
        // The fleet grew meanwhile: the same schedule waits for the longer interval.
        assert!(!schedule.due(start + minutes(10), minutes(100)));
        assert!(schedule.due(start + minutes(100), minutes(100)));
        let failed = Schedule {
            retry_at: Some(start + minutes(1)),
            ..schedule
        };
        assert!(
            failed.due(start + minutes(1), minutes(100)),
            "a failed read is retried"
        );
        for _ in 0..100 {
            let spread = Schedule::from(start).spread;
            assert!((0.9..=1.1).contains(&spread), "{spread}");
        }
    }
}
