//! What every reconcile shares: the client, the providers, the settings, the metrics, the
//! watch caches, and the helpers for finalizers, backoff and Events.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::PatchParams;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{self, Store, store::Writer};
use kube::{Api, Client};
use meridian_api::kuadrant::DNSHealthCheckProbe;
use meridian_api::meridian::ClusterReport;
use rand::Rng;

use crate::metrics::Metrics;
use crate::zone_provider::ProviderCache;

/// The one field manager every write of these controllers uses (on the hub and, in distributed
/// mode, on a spoke).
pub const FIELD_MANAGER: &str = "meridian-hub";

/// Label on DNSRecords naming the DNSPolicy that owns them.
pub const POLICY_LABEL: &str = "meridian.dev/dns-policy";

/// Settings of the shared controllers.
#[derive(Debug, Clone)]
pub struct ControllerConfig {
    /// How often a converged object is looked at again anyway.
    pub resync: Duration,
    /// First delay after a failed reconcile; doubles per consecutive failure.
    pub retry_base: Duration,
    pub retry_cap: Duration,
    /// A cluster whose agent has not reported for this long is gone for DNS.
    pub heartbeat_timeout: Duration,
    /// `MultiClusterFailureThreshold`: the share (percent) of judging clusters that must see a
    /// leaf failing before it leaves DNS.
    pub failure_threshold_percent: u32,
    /// Distributed mode: the controllers run on a spoke, for that cluster alone, and publish
    /// its branch into shared zones under its own owner ID. `None` on the hub.
    pub distributed: Option<LocalCluster>,
}

/// The cluster a distributed-mode agent runs on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalCluster {
    /// The cluster's name (for status).
    pub name: String,
    /// The UID of its `kube-system` namespace: the owner ID of everything it publishes.
    pub cluster_id: String,
    /// Its attributes (`kuadrant.io/lb-attribute-*`), as a ManagedCluster's labels would be.
    pub labels: std::collections::BTreeMap<String, String>,
}

/// Label on the DNSRecords a distributed-mode agent writes.
pub const DISTRIBUTED_LABEL: &str = "meridian.dev/distributed";

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            resync: Duration::from_secs(300),
            retry_base: Duration::from_secs(1),
            retry_cap: Duration::from_secs(120),
            heartbeat_timeout: Duration::from_secs(120),
            failure_threshold_percent: crate::health::DEFAULT_THRESHOLD_PERCENT,
            distributed: None,
        }
    }
}

/// What every reconcile shares.
pub struct Context {
    pub client: Client,
    pub providers: ProviderCache,
    pub config: ControllerConfig,
    pub metrics: Metrics,
    /// The time; injectable so tests can move it.
    pub clock: Clock,
    /// Caches of what every health-checked record reads, filled while leading.
    pub watched: Watched,
    recorder: kube::runtime::events::Recorder,
    failures: Mutex<HashMap<String, u32>>,
    /// Distributed mode: each record's host mark as this process last saw it.
    marks: Mutex<HashMap<String, Option<String>>>,
    /// Distributed mode: the agent's probes of the hosts' addresses, and what they said at
    /// each record's last full pass.
    pub shared_probes: Option<Arc<dyn crate::shared_health::SharedProbes>>,
    failing_seen: Mutex<HashMap<String, BTreeSet<String>>>,
}

pub type Clock = Arc<dyn Fn() -> k8s_openapi::jiff::Timestamp + Send + Sync>;

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Context {
    pub fn new(client: Client, providers: ProviderCache, config: ControllerConfig) -> Self {
        Context {
            client: client.clone(),
            providers,
            config,
            metrics: Metrics::default(),
            clock: Arc::new(k8s_openapi::jiff::Timestamp::now),
            watched: Watched::new(),
            recorder: kube::runtime::events::Recorder::new(
                client.clone(),
                kube::runtime::events::Reporter {
                    controller: FIELD_MANAGER.into(),
                    instance: std::env::var("HOSTNAME").ok(),
                },
            ),
            failures: Mutex::new(HashMap::new()),
            marks: Mutex::new(HashMap::new()),
            shared_probes: None,
            failing_seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether the agent's probes of `record`'s addresses say what they said at its last full
    /// pass.
    pub fn failing_unchanged(&self, record: &str, failing: &BTreeSet<String>) -> bool {
        self.failing_seen.lock().expect("failing lock").get(record) == Some(failing)
    }

    pub fn remember_failing(&self, record: &str, failing: BTreeSet<String>) {
        self.failing_seen
            .lock()
            .expect("failing lock")
            .insert(record.to_string(), failing);
    }

    /// The last-modified mark of `record`'s host as last seen (`Some(None)`: seen absent).
    pub fn last_seen_mark(&self, record: &str) -> Option<Option<String>> {
        self.marks.lock().expect("marks lock").get(record).cloned()
    }

    pub fn remember_mark(&self, record: &str, mark: Option<String>) {
        self.marks
            .lock()
            .expect("marks lock")
            .insert(record.to_string(), mark);
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

    /// Publishes a Kubernetes Event about `object` for what users must notice. An Event that
    /// cannot be written is logged and otherwise ignored: it never fails a reconcile.
    pub async fn notify<K: kube::Resource<DynamicType = ()>>(
        &self,
        object: &K,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        use kube::runtime::events::{Event, EventType};
        let event = Event {
            type_: if warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: reason.into(),
            note: Some(note),
            action: action.into(),
            secondary: None,
        };
        if let Err(error) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::debug!(%error, reason, "could not publish an Event");
        }
    }

    /// Forgets `object`'s failures after a successful reconcile.
    pub fn succeeded(&self, object: &str) {
        self.failures.lock().expect("failures lock").remove(object);
    }
}

/// Caches of the kinds that many reconciles read: the clusters' reports and the health
/// probes. One watch each, however many records read them.
pub struct Watched {
    pub reports: Store<ClusterReport>,
    pub probes: Store<DNSHealthCheckProbe>,
    listed: Arc<(AtomicBool, AtomicBool)>,
    writers: Mutex<Option<(Writer<ClusterReport>, Writer<DNSHealthCheckProbe>)>>,
}

impl std::fmt::Debug for Watched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("listed", &self.listed())
            .finish_non_exhaustive()
    }
}

impl Watched {
    fn new() -> Self {
        let (reports, report_writer) = reflector::store();
        let (probes, probe_writer) = reflector::store();
        Watched {
            reports,
            probes,
            listed: Arc::new((AtomicBool::new(false), AtomicBool::new(false))),
            writers: Mutex::new(Some((report_writer, probe_writer))),
        }
    }

    /// Whether both caches hold a first complete list (before that, an empty cache would read
    /// as "no cluster reported").
    pub fn listed(&self) -> bool {
        self.listed.0.load(Ordering::SeqCst) && self.listed.1.load(Ordering::SeqCst)
    }

    /// Fills the caches until the process ends; only the first call does anything.
    pub async fn reflect(&self, client: Client) {
        let Some((report_writer, probe_writer)) = self.writers.lock().expect("writers lock").take()
        else {
            return;
        };
        let reports = reflect_into(
            Api::<ClusterReport>::all(client.clone()),
            report_writer,
            self.listed.clone(),
            |listed| &listed.0,
        );
        let probes = reflect_into(
            Api::<DNSHealthCheckProbe>::all(client),
            probe_writer,
            self.listed.clone(),
            |listed| &listed.1,
        );
        tokio::join!(reports, probes);
    }
}

async fn reflect_into<K>(
    api: Api<K>,
    writer: Writer<K>,
    listed: Arc<(AtomicBool, AtomicBool)>,
    flag: fn(&(AtomicBool, AtomicBool)) -> &AtomicBool,
) where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .for_each(|event| {
            if let Ok(watcher::Event::InitDone) = event {
                flag(&listed).store(true, Ordering::SeqCst);
            }
            async {}
        })
        .await;
}

/// Why a reconcile failed; every variant is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Finalizer(String),
    #[error("provider: {0}")]
    Provider(#[from] meridian_providers::ProviderError),
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

/// The clusters a Placement decided: the union of `status.decisions[].clusterName` over every
/// PlacementDecision labelled with it (100 decisions each), every page, empty names skipped.
pub async fn decided_clusters(
    client: &Client,
    namespace: &str,
    placement: &str,
) -> Result<BTreeSet<String>, kube::Error> {
    use kube::api::{Api, ListParams};
    use meridian_api::labels::PLACEMENT_LABEL;
    use meridian_api::upstream::PlacementDecision;

    let decisions: Api<PlacementDecision> = Api::namespaced(client.clone(), namespace);
    let mut names = BTreeSet::new();
    let mut params = ListParams::default()
        .labels(&format!("{PLACEMENT_LABEL}={placement}"))
        .limit(500);
    loop {
        let page = decisions.list(&params).await?;
        names.extend(
            page.items
                .iter()
                .filter_map(|d| d.status.as_ref())
                .flat_map(|s| s.decisions.iter())
                .map(|d| d.cluster_name.clone())
                .filter(|name| !name.is_empty()),
        );
        match page.metadata.continue_ {
            Some(token) if !token.is_empty() => params = params.continue_token(&token),
            _ => return Ok(names),
        }
    }
}

/// Runs a namespaced object's reconcile behind its finalizer: `apply` while it exists,
/// `cleanup` once it is being deleted (the finalizer goes when `cleanup` succeeds). Counts the
/// reconcile and resets the object's backoff on success.
pub async fn with_finalizer<K, Apply, ApplyFut, Cleanup, CleanupFut>(
    object: Arc<K>,
    ctx: &Context,
    controller: &str,
    finalizer_name: &str,
    apply: Apply,
    cleanup: Cleanup,
) -> Result<Action, Error>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug,
    Apply: FnOnce(Arc<K>) -> ApplyFut,
    ApplyFut: std::future::Future<Output = Result<Action, Error>>,
    Cleanup: FnOnce(Arc<K>) -> CleanupFut,
    CleanupFut: std::future::Future<Output = Result<Action, Error>>,
{
    use kube::ResourceExt;
    use kube::runtime::finalizer::{Error as FinalizerError, Event, finalizer};
    let namespace = object.namespace().unwrap_or_default();
    let key = object_key(&K::kind(&()), Some(&namespace), &object.name_any());
    ctx.metrics.reconciled(controller);
    let api: kube::Api<K> = kube::Api::namespaced(ctx.client.clone(), &namespace);
    let result = finalizer(&api, finalizer_name, object, |event| async {
        match event {
            Event::Apply(object) => apply(object).await,
            Event::Cleanup(object) => cleanup(object).await,
        }
    })
    .await
    .map_err(|error| match error {
        FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e) => e,
        other => Error::Finalizer(other.to_string()),
    });
    if result.is_ok() {
        ctx.succeeded(&key);
    }
    result
}

/// The error policy every controller shares: count, log, and retry with jittered backoff.
pub fn retry_after<K: kube::Resource<DynamicType = ()>>(
    object: &K,
    error: &Error,
    ctx: &Context,
    controller: &str,
) -> Action {
    use kube::ResourceExt;
    ctx.metrics.failed(controller, error.reason());
    let key = object_key(
        &K::kind(&()),
        object.namespace().as_deref(),
        &object.name_any(),
    );
    tracing::warn!(object = %key, %error, "reconcile failed; retrying with backoff");
    ctx.retry_after_failure(&key)
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
