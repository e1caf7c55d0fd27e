//! Fenced writes: a hub replica writes to a provider or the API server only while it knows it
//! holds the Lease. Knowing is local: the lease term (the Lease's transition count when this
//! replica took it) and a deadline on the monotonic clock, one safety margin short of when a
//! standby may take over, counted from before the renewal was sent. A replica paused past its
//! lease (SIGSTOP, a frozen VM) finds the deadline passed when it resumes, before it learns
//! anything from the API server, so the writes it had in flight are refused instead of
//! landing after the new leader's.
//!
//! The check is made right before each provider batch ([`Fence::check`]) and each API request
//! that writes ([`FenceLayer`] on the controllers' client).

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

/// Why a write was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Fenced {
    #[error("this replica does not hold the hub Lease")]
    NotLeading,
    #[error("the hub Lease (term {term}) ran out {late_ms} ms ago without a renewal")]
    Expired { term: i32, late_ms: u128 },
}

/// The lease this replica holds, as far as it knows.
#[derive(Debug)]
pub struct Fence {
    /// `None` for a process that writes without an election (a spoke agent, a test).
    held: Option<Mutex<Option<Held>>>,
}

#[derive(Debug, Clone, Copy)]
struct Held {
    term: i32,
    valid_until: Instant,
}

impl Fence {
    /// No election: every write is allowed.
    pub fn open() -> Self {
        Fence { held: None }
    }

    /// An election decides: nothing is allowed until [`Fence::renewed`].
    pub fn closed() -> Self {
        Fence {
            held: Some(Mutex::new(None)),
        }
    }

    /// The Lease was taken or renewed for `lease` by a request sent at `sent`, in `term`. The
    /// deadline keeps a fifth of the lease (at least one second) as margin for the clocks of
    /// the replicas and the API server.
    pub fn renewed(&self, term: i32, sent: Instant, lease: Duration) {
        let margin = (lease / 5).max(Duration::from_secs(1));
        let valid_until = sent + lease.saturating_sub(margin);
        if let Some(held) = &self.held {
            *held.lock().expect("fence lock") = Some(Held { term, valid_until });
        }
    }

    /// The Lease is lost or given up: nothing more is written.
    pub fn revoke(&self) {
        if let Some(held) = &self.held {
            *held.lock().expect("fence lock") = None;
        }
    }

    /// Whether a write may go out now.
    pub fn check(&self) -> Result<(), Fenced> {
        self.check_at(Instant::now())
    }

    fn check_at(&self, now: Instant) -> Result<(), Fenced> {
        let Some(held) = &self.held else {
            return Ok(());
        };
        match *held.lock().expect("fence lock") {
            None => Err(Fenced::NotLeading),
            Some(Held { valid_until, .. }) if now < valid_until => Ok(()),
            Some(Held { term, valid_until }) => Err(Fenced::Expired {
                term,
                late_ms: now.duration_since(valid_until).as_millis(),
            }),
        }
    }
}

/// A layer for the controllers' Kubernetes client: every request but a read is checked
/// against the fence first and refused (never sent) when it fails.
#[derive(Debug, Clone)]
pub struct FenceLayer(pub std::sync::Arc<Fence>);

impl<S> tower::Layer<S> for FenceLayer {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService {
            inner,
            fence: self.0.clone(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct FencedService<S> {
    inner: S,
    fence: std::sync::Arc<Fence>,
}

/// Whether a request only reads (lists and watches are GETs).
fn reads(method: &http::Method) -> bool {
    matches!(
        *method,
        http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
    )
}

impl<S, B> tower::Service<http::Request<B>> for FencedService<S>
where
    S: tower::Service<http::Request<B>>,
    S::Response: Send + 'static,
    S::Error: Into<tower::BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = tower::BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, tower::BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if !reads(request.method())
            && let Err(fenced) = self.fence.check()
        {
            tracing::warn!(method = %request.method(), uri = %request.uri(), %fenced, "write refused");
            return Box::pin(std::future::ready(Err(fenced.into())));
        }
        let call = self.inner.call(request);
        Box::pin(async move { call.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_go_out_only_inside_the_lease() {
        let lease = Duration::from_secs(15);
        let fence = Fence::closed();
        let start = Instant::now();
        assert_eq!(fence.check_at(start), Err(Fenced::NotLeading));
        fence.renewed(4, start, lease);
        assert_eq!(fence.check_at(start + Duration::from_secs(11)), Ok(()));
        // 15 s less the margin of 3 s.
        assert_eq!(
            fence.check_at(start + Duration::from_secs(13)),
            Err(Fenced::Expired {
                term: 4,
                late_ms: 1_000
            })
        );
        fence.renewed(4, start + Duration::from_secs(10), lease);
        assert_eq!(fence.check_at(start + Duration::from_secs(13)), Ok(()));
        fence.revoke();
        assert_eq!(
            fence.check_at(start + Duration::from_secs(13)),
            Err(Fenced::NotLeading)
        );
    }

    #[test]
    fn short_leases_keep_a_second_of_margin_and_no_election_allows_everything() {
        let fence = Fence::closed();
        let start = Instant::now();
        fence.renewed(1, start, Duration::from_secs(3));
        assert!(fence.check_at(start + Duration::from_millis(1_900)).is_ok());
        assert!(
            fence
                .check_at(start + Duration::from_millis(2_000))
                .is_err()
        );
        assert!(Fence::open().check_at(start).is_ok());
    }

    #[test]
    fn reads_are_never_fenced() {
        assert!(reads(&http::Method::GET));
        for write in [
            http::Method::POST,
            http::Method::PUT,
            http::Method::PATCH,
            http::Method::DELETE,
        ] {
            assert!(!reads(&write), "{write}");
        }
    }
}
