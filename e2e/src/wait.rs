//! Waiting for eventual consistency without timing assertions: poll until a condition holds,
//! with a generous deadline that only exists so a broken test ends instead of hanging.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use crate::Error;

/// How long [`eventually`] waits by default; generous for a loaded two-core machine.
pub const DEFAULT_PATIENCE: Duration = Duration::from_secs(120);

/// Polls `check` until it yields `Some`, at most for `patience`.
pub async fn eventually<T, F, Fut>(what: &str, patience: Duration, mut check: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>, Error>>,
{
    let started = Instant::now();
    let mut interval = Duration::from_millis(100);
    loop {
        if let Some(value) = check().await? {
            return Ok(value);
        }
        if started.elapsed() > patience {
            return Err(Error::NotReady {
                what: what.to_string(),
                seconds: patience.as_secs(),
                log_tail: String::new(),
            });
        }
        tokio::time::sleep(interval).await;
        interval = (interval * 2).min(Duration::from_secs(1));
    }
}

/// A kind whose status carries conditions.
pub trait WithConditions {
    fn conditions(&self) -> &[Condition];
}

impl WithConditions for meridian_api::kuadrant::DNSPolicy {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl WithConditions for meridian_api::kuadrant::DNSRecord {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

impl WithConditions for meridian_api::kuadrant::ManagedZone {
    fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |s| &s.conditions)
    }
}

/// Waits until `name`'s condition `type_` satisfies `holds` (at most twice the default
/// patience: some wait for a heartbeat timeout), and returns it.
pub async fn condition_becomes<K>(
    api: &kube::Api<K>,
    name: &str,
    type_: &str,
    what: &str,
    holds: impl Fn(&Condition) -> bool,
) -> Result<Condition, Error>
where
    K: WithConditions + kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    eventually(what, DEFAULT_PATIENCE * 2, || async {
        let object = api.get(name).await?;
        Ok(object
            .conditions()
            .iter()
            .find(|c| c.type_ == type_ && holds(c))
            .cloned())
    })
    .await
}

/// The DNSRecord `name` once its `Ready` condition has `reason` for its current generation.
pub async fn record_ready_with(
    records: &kube::Api<meridian_api::kuadrant::DNSRecord>,
    name: &str,
    reason: &str,
) -> Result<meridian_api::kuadrant::DNSRecord, Error> {
    eventually(
        &format!("{name} is {reason}"),
        DEFAULT_PATIENCE,
        || async move {
            let record = records.get(name).await?;
            let done = record.status.as_ref().is_some_and(|status| {
                status.observed_generation == record.metadata.generation
                    && status
                        .conditions
                        .iter()
                        .any(|c| c.type_ == meridian_api::conditions::READY && c.reason == reason)
            });
            Ok(done.then_some(record))
        },
    )
    .await
}

/// One series of a hub's counters (`name{labels}` as `/metrics` prints it), 0 before its first
/// count.
pub fn hub_counter(hub: &meridian_hub::run_command::RunningHub, series: &str) -> u64 {
    counter_in(&hub.context.metrics.render(), series)
}

fn counter_in(metrics: &str, series: &str) -> u64 {
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|count| count.trim().parse().ok())
        .unwrap_or(0)
}

/// A controller's passes on a hub, read at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Passes {
    pub begun: u64,
    pub ended: u64,
}

impl Passes {
    pub fn of(hub: &meridian_hub::run_command::RunningHub, controller: &str) -> Self {
        let metrics = hub.context.metrics.render();
        Passes {
            begun: counter_in(
                &metrics,
                &format!("meridian_reconciles_total{{controller=\"{controller}\"}}"),
            ),
            ended: counter_in(
                &metrics,
                &format!(
                    "meridian_reconcile_duration_seconds_count{{controller=\"{controller}\"}}"
                ),
            ),
        }
    }

    /// Waits until `controller` has begun `more` passes since `self` and ended every pass it
    /// began: what those passes do is done.
    pub async fn wait_for_more(
        self,
        hub: &meridian_hub::run_command::RunningHub,
        controller: &str,
        more: u64,
    ) -> Result<Passes, Error> {
        eventually(
            &format!("{more} more {controller} passes, ended"),
            DEFAULT_PATIENCE,
            || async {
                let now = Passes::of(hub, controller);
                Ok((now.begun >= self.begun + more && now.ended == now.begun).then_some(now))
            },
        )
        .await
    }
}

/// Waits until `count` has grown by `by` from what it is now, and returns it: the proof that
/// what it counts happened, before a test asserts that it changed nothing.
pub async fn counter_grows(what: &str, by: u64, count: impl Fn() -> u64) -> Result<u64, Error> {
    let start = count();
    let count = &count;
    eventually(what, DEFAULT_PATIENCE, || async move {
        let now = count();
        Ok((now >= start + by).then_some(now))
    })
    .await
}
