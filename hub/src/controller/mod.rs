//! The hub's controllers: DNSPolicy → DNSRecords, DNSRecord → provider, ManagedZone status.
//! Each reconcile is a pipeline: read what it needs, compute the result with a pure function
//! (`crate::desired`, `meridian_dns::plan`), write with server-side apply under one field
//! manager, and say what happened in status.

pub mod dns_policy;
pub mod dns_record;
pub mod managed_zone;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::PatchParams;
use kube::runtime::controller::Action;
use rand::Rng;

use crate::metrics::Metrics;
use crate::zone_provider::ProviderCache;

/// The one field manager every hub write uses.
pub const FIELD_MANAGER: &str = "meridian-hub";

/// Label on DNSRecords naming the DNSPolicy that owns them.
pub const POLICY_LABEL: &str = "meridian.dev/dns-policy";

/// Settings of the hub's controllers.
#[derive(Debug, Clone)]
pub struct HubConfig {
    /// How often a converged object is looked at again anyway.
    pub resync: Duration,
    /// First delay after a failed reconcile; doubles per consecutive failure.
    pub retry_base: Duration,
    pub retry_cap: Duration,
}

impl Default for HubConfig {
    fn default() -> Self {
        HubConfig {
            resync: Duration::from_secs(300),
            retry_base: Duration::from_secs(1),
            retry_cap: Duration::from_secs(120),
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub providers: ProviderCache,
    pub config: HubConfig,
    pub metrics: Metrics,
    failures: Mutex<HashMap<String, u32>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub fn new(client: Client, providers: ProviderCache, config: HubConfig) -> Self {
        Context {
            client,
            providers,
            config,
            metrics: Metrics::default(),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// The delay before retrying `object` after a failure: exponential per consecutive
    /// failure, with full jitter, so many failing objects never retry in step.
    pub fn retry_after_failure(&self, object: &str) -> Action {
        let attempt = {
            let mut failures = self.failures.lock().expect("failures lock");
            let count = failures.entry(object.to_string()).or_insert(0);
            *count = count.saturating_add(1);
            *count
        };
        let ceiling = self
            .config
            .retry_base
            .saturating_mul(1 << attempt.min(16))
            .min(self.config.retry_cap);
        let delay = rand::rng().random_range(ceiling / 2..=ceiling);
        Action::requeue(delay)
    }

    /// Forgets `object`'s failures after a successful reconcile.
    pub fn succeeded(&self, object: &str) {
        self.failures.lock().expect("failures lock").remove(object);
    }
}

/// Why a reconcile failed; every variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Finalizer(String),
    #[error("provider: {0}")]
    Provider(#[from] meridian_dns::provider::ProviderError),
    #[error("waiting: {0}")]
    Waiting(String),
}

impl Error {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::Provider(_) => "provider",
            Error::Waiting(_) => "waiting",
        }
    }
}

pub fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// `namespace/name` of an object, for logs, metrics and the failure map.
pub fn object_key(kind: &str, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(namespace) => format!("{kind}/{namespace}/{name}"),
        None => format!("{kind}/{name}"),
    }
}
