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
