//! One writer among hub replicas, through a `coordination.k8s.io/v1` Lease. A replica writes
//! only while it holds the Lease; it renews it every third of the lease duration, and takes it
//! over only when the holder has not renewed for a whole duration. Every change to the Lease is
//! conditional on its resourceVersion, so two replicas can never both believe they won.

use std::time::{Duration, Instant};

use meridian_controllers::runtime::fence::Fence;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

/// Name of the hub's Lease.
pub const LEASE_NAME: &str = "meridian-hub";

/// Settings of the election.
#[derive(Debug, Clone)]
pub struct Election {
    pub namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
}

impl Election {
    pub fn renew_every(&self) -> Duration {
        self.lease_duration / 3
    }
}

/// What a look at the Lease decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// This replica holds the Lease in `term` (its transition count), renewed by a request
    /// sent at `sent` or later.
    Leading {
        term: i32,
        sent: Instant,
    },
    Following,
}

/// Whether `spec` lets `identity` hold the Lease at `now`: it is free, ours, or expired.
pub fn may_hold(spec: Option<&LeaseSpec>, identity: &str, now: Timestamp) -> bool {
    let Some(spec) = spec else {
        return true;
    };
    match spec.holder_identity.as_deref() {
        None | Some("") => true,
        Some(holder) if holder == identity => true,
        Some(_) => {
            let renewed = spec.renew_time.as_ref().map(|t| t.0);
            let duration = i64::from(spec.lease_duration_seconds.unwrap_or(15));
            // Counted to the microsecond: in whole seconds, a renewal at .99 looked a second
            // older than it was, and a standby took the Lease while the holder's fence (a
            // second of margin on a short lease) was about to close, not closed.
            match renewed {
                None => true,
                Some(renewed) => {
                    now.as_microsecond() - renewed.as_microsecond()
                        >= duration.saturating_mul(1_000_000)
                }
            }
        }
    }
}

/// Tries once to acquire or renew the Lease.
pub async fn try_lead(client: &Client, election: &Election) -> Result<Standing, kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &election.namespace);
    // Both clocks before anything is sent: a standby counts the lease from `now`, and this
    // replica's fence from `sent`, so the fence never outlives what the standby sees.
    let now = Timestamp::now();
    let sent = Instant::now();
    let seconds = i32::try_from(election.lease_duration.as_secs()).unwrap_or(i32::MAX);
    match api.get_opt(LEASE_NAME).await? {
        None => {
            let mut lease = Lease::default();
            lease.metadata.name = Some(LEASE_NAME.into());
            lease.spec = Some(LeaseSpec {
                holder_identity: Some(election.identity.clone()),
                lease_duration_seconds: Some(seconds),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..Default::default()
            });
            match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(Standing::Leading { term: 0, sent }),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Standing::Following),
                Err(error) => Err(error),
            }
        }
        Some(mut lease) => {
            if !may_hold(lease.spec.as_ref(), &election.identity, now) {
                return Ok(Standing::Following);
            }
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(&election.identity) {
                spec.acquire_time = Some(MicroTime(now));
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                spec.holder_identity = Some(election.identity.clone());
            }
            spec.renew_time = Some(MicroTime(now));
            spec.lease_duration_seconds = Some(seconds);
            let term = spec.lease_transitions.unwrap_or(0);
            // The replace carries the resourceVersion read above: if anyone changed the Lease
            // since, it fails with a conflict and we stay a follower.
            match api
                .replace(&lease.name_any(), &PostParams::default(), &lease)
                .await
            {
                Ok(_) => Ok(Standing::Leading { term, sent }),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(Standing::Following),
                Err(error) => Err(error),
            }
        }
    }
}

/// Waits until this replica leads, and opens the fence for its term.
pub async fn acquire(client: &Client, election: &Election, fence: &Fence) {
    loop {
        match try_lead(client, election).await {
            Ok(Standing::Leading { term, sent }) => {
                fence.renewed(term, sent, election.lease_duration);
                return;
            }
            Ok(Standing::Following) => {}
            Err(error) => tracing::warn!(%error, "reading the hub Lease failed; retrying"),
        }
        tokio::time::sleep(election.renew_every()).await;
    }
}

/// Takes the Lease whoever holds it, for `election.lease_duration` (the uninstall, which must
/// stop the leader). Conditional like every change: retried until no one changed it between
/// the read and the write.
pub async fn seize(client: &Client, election: &Election) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &election.namespace);
    let seconds = i32::try_from(election.lease_duration.as_secs()).unwrap_or(i32::MAX);
    loop {
        let now = MicroTime(Timestamp::now());
        let spec = LeaseSpec {
            holder_identity: Some(election.identity.clone()),
            lease_duration_seconds: Some(seconds),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            ..Default::default()
        };
        let written = match api.get_opt(LEASE_NAME).await? {
            None => {
                let mut lease = Lease::default();
                lease.metadata.name = Some(LEASE_NAME.into());
                lease.spec = Some(spec);
                api.create(&PostParams::default(), &lease).await
            }
            Some(mut lease) => {
                let transitions = lease.spec.as_ref().and_then(|s| s.lease_transitions);
                lease.spec = Some(LeaseSpec {
                    lease_transitions: Some(transitions.unwrap_or(0) + 1),
                    ..spec
                });
                api.replace(LEASE_NAME, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(error) => return Err(error),
        }
    }
}

/// Gives the Lease up when this replica holds it, so a standby takes over at its next look
/// instead of after a whole lease duration. Conditional like every change to the Lease: a
/// Lease someone else took meanwhile is left alone.
pub async fn release(client: &Client, election: &Election) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(client.clone(), &election.namespace);
    let Some(mut lease) = api.get_opt(LEASE_NAME).await? else {
        return Ok(());
    };
    let Some(spec) = lease.spec.as_mut() else {
        return Ok(());
    };
    if spec.holder_identity.as_deref() != Some(&election.identity) {
        return Ok(());
    }
    spec.holder_identity = None;
    match api
        .replace(&lease.name_any(), &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(error) => Err(error),
    }
}

/// Renews the Lease (and the fence with it) until a renewal is lost or has failed for a whole
/// lease duration; then closes the fence and returns, and the caller must stop. Between a
/// failed renewal and the end, the fence closes by itself when its deadline passes.
///
/// Each renewal waits a third of the lease after the last one's answer, not after its send:
/// after an API server outage longer than the lease, the leader's hung renewal is not followed
/// at once by another, so a standby sees the Lease lapsed and takes it, and the controllers
/// start over from a fresh look. A renewal without an answer within a third of the lease is
/// given up and tried again at once; a failed one is tried again after a twelfth.
pub async fn hold(client: &Client, election: &Election, fence: &Fence) {
    let mut last_renewal = tokio::time::Instant::now();
    let mut wait = election.renew_every();
    loop {
        tokio::time::sleep(wait).await;
        wait = election.renew_every();
        // A renewal is given up after a third of the lease and tried again: a request stuck on
        // a dead connection would otherwise wait for the client's read timeout (minutes), and
        // the Lease lapse while the API server answers everyone else.
        let renewal = tokio::time::timeout(election.renew_every(), try_lead(client, election));
        let (renewal, timed_out) = match renewal.await {
            Ok(renewal) => (renewal, false),
            Err(_) => (
                Err(kube::Error::Service(
                    "no answer within a third of the lease".into(),
                )),
                true,
            ),
        };
        match renewal {
            Ok(Standing::Leading { term, sent }) => {
                fence.renewed(term, sent, election.lease_duration);
                last_renewal = tokio::time::Instant::now();
            }
            Ok(Standing::Following) => {
                fence.revoke();
                tracing::error!("another hub replica holds the Lease; stopping");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, "renewing the hub Lease failed");
                if last_renewal.elapsed() >= election.lease_duration {
                    fence.revoke();
                    tracing::error!("the hub Lease could not be renewed in time; stopping");
                    return;
                }
                // Tried again at once after a renewal that timed out (a third of the lease is
                // already spent; another third would pass the fence's deadline), and soon after
                // one that failed.
                wait = if timed_out {
                    Duration::ZERO
                } else {
                    (election.renew_every() / 4).max(Duration::from_millis(100))
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Lease of 15 s renewed `renewed` milliseconds into the epoch.
    fn spec(holder: Option<&str>, renewed: Option<i64>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            renew_time: renewed.map(|ms| MicroTime(Timestamp::from_millisecond(ms).unwrap())),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_is_held_when_free_ours_or_expired() {
        let now = Timestamp::from_millisecond(1_000_000).unwrap();
        let cases = [
            (None, true),
            (Some(spec(None, None)), true),
            (Some(spec(Some("me"), Some(999_000))), true),
            (Some(spec(Some("other"), Some(990_000))), false),
            (Some(spec(Some("other"), Some(985_000))), true),
            (Some(spec(Some("other"), None)), true),
            // 14.01 s after a renewal late in its second: not yet expired (in whole seconds,
            // 1000 - 985 = 15, it was).
            (Some(spec(Some("other"), Some(985_990))), false),
            (Some(spec(Some("other"), Some(984_999))), true),
        ];
        for (lease, expected) in cases {
            assert_eq!(may_hold(lease.as_ref(), "me", now), expected, "{lease:?}");
        }
    }
}
