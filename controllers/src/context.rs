//! What every reconcile shares: the client, the providers, the settings, the metrics, the
//! watch caches, and the helpers for finalizers, backoff and Events.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use kube::api::PatchParams;
use kube::runtime::controller::Action;
use meridian_api::kuadrant::ManagedZone;
use meridian_api::meridian::ClusterReport;
use rand::Rng;

use crate::caches::{Caches, Scope};
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
    /// The fleet brake: when more than this share (percent) of the recently heard clusters
    /// went quiet together, silence withdraws nothing ([`crate::silence`]).
    pub fleet_brake_percent: u32,
    /// The share (percent) of a host's clusters silence may withdraw per heartbeat timeout.
    pub silence_withdrawal_percent: u32,
    /// Distributed mode: the controllers run on a spoke, for that cluster alone, and publish
    /// its branch into shared zones under its own owner ID. `None` on the hub.
    pub distributed: Option<LocalCluster>,
    /// How many objects each controller reconciles at once.
    pub concurrency: Concurrency,
    /// The domain suffixes the platform admin granted to namespaces (see
    /// [`crate::zone_claims`]).
    pub domain_grants: crate::zone_claims::DomainGrants,
    /// The addresses health probes may not reach (see [`crate::probe_policy`]).
    pub probe_policy: crate::probe_policy::ProbeAddressPolicy,
    /// The hub's own namespace, where it keeps the key it seals probes with (see
    /// [`crate::probe_seal`]); `None` in distributed mode.
    pub hub_namespace: Option<String>,
    /// The hub's owner ID (`--owner-id`, see [`crate::owners::hub_record_owner`]): what a
    /// record without `spec.ownerID` publishes under, with its namespace and name. `None` in
    /// distributed mode, where every record names its cluster's.
    pub hub_owner: Option<String>,
}

/// Reconciles each controller runs at once. A cold start finds every object due together;
/// unbounded, 2,000 policies sent their writes at once and the API server answered most of
/// them 429, while each controller's share of its seats is what decides who waits. DNS gets
/// the larger share because answers are what users wait for. The defaults are those measured
/// best with `make bench-hub-scale` (see `docs/hub.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    /// DNSPolicies: each sends its writes one after another.
    pub policies: u16,
    /// DNSRecords: each publishes, then writes its status.
    pub records: u16,
    /// Gateway placement (works and agent installs): most of a new fleet's writes, which
    /// should not hold DNS back.
    pub placement: u16,
    /// The hub's light controllers (zone status, probe header copies, router shards): their
    /// objects are few or their writes rare.
    pub light: u16,
}

impl Default for Concurrency {
    fn default() -> Self {
        Concurrency {
            policies: 16,
            records: 16,
            placement: 6,
            light: 4,
        }
    }
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
    /// Watch and write in this namespace alone (an agent bound by a Role, not a ClusterRole);
    /// every namespace when `None`.
    pub namespace: Option<String>,
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
            fleet_brake_percent: crate::silence::DEFAULT_FLEET_BRAKE_PERCENT,
            silence_withdrawal_percent: crate::silence::DEFAULT_WITHDRAWAL_PERCENT,
            distributed: None,
            concurrency: Concurrency::default(),
            domain_grants: crate::zone_claims::DomainGrants::default(),
            probe_policy: crate::probe_policy::ProbeAddressPolicy::default(),
            hub_namespace: None,
            hub_owner: None,
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
    /// The watch caches every reconcile reads instead of the API server.
    pub caches: Arc<Caches>,
    recorder: kube::runtime::events::Recorder,
    failures: Mutex<HashMap<String, u32>>,
    /// Distributed mode: each record's host mark as this process last saw it.
    marks: Mutex<HashMap<String, Option<String>>>,
    /// Distributed mode: per record, the refreshes since its host's mark was last read (a
    /// host only this cluster publishes is read every few refreshes, not every one).
    refreshes_unread: Mutex<HashMap<String, u32>>,
    /// Distributed mode: the agent's probes of the hosts' addresses, and what they said at
    /// each record's last full pass.
    pub shared_probes: Option<Arc<dyn crate::shared_health::SharedProbes>>,
    failing_seen: Mutex<HashMap<String, BTreeSet<String>>>,
    /// Records the zone's last verification found drifted: their next pass reads the zone.
    drifted: Mutex<BTreeSet<String>>,
    /// Whether this process may write now (the hub Lease); open where nothing is elected.
    /// The client above checks it before every write request; provider batches check it
    /// through [`Context::check_fence`].
    pub fence: Arc<crate::fence::Fence>,
    /// What the brake held when last looked at, so that it lets go only once its wave is
    /// heard again (and its changes are logged); `None` while it is off.
    brake_memory: Mutex<Option<crate::silence::BrakeMemory>>,
    /// Per policy, where each drained cluster's steps stand; a policy missing here has not
    /// been looked at since this process started.
    drains: Mutex<HashMap<String, BTreeMap<String, meridian_dns::drain::DrainState>>>,
    /// Per DNSRecord, what its priority tiers remember between passes.
    tiers: Mutex<HashMap<String, meridian_dns::tiers::TierMemory>>,
    /// Per DNSRecord, the leaves judged unhealthy that are still in the zone: when their
    /// failures began and when the verdict came (the failover metrics).
    failovers: Mutex<HashMap<String, BTreeMap<String, FailoverClock>>>,
    /// What the hub changed in DNS recently, newest last (the live view).
    pub journal: crate::journal::Journal,
    /// Every zone's claim, computed once per change of the zones cache: every DNSRecord
    /// reconcile asks for its zone's.
    claims: Mutex<Option<Arc<ZoneClaims>>>,
}

/// The claims of the zones in the cache at one revision of it.
#[derive(Debug)]
struct ZoneClaims {
    revision: u64,
    /// By `namespace/name`, with the `resourceVersion` the claim was decided on.
    by_zone: BTreeMap<String, (Option<String>, crate::zone_claims::Claim)>,
    /// The domains a zone holds.
    held: BTreeSet<String>,
}

/// When a leaf's failover began and was decided.
#[derive(Debug, Clone, Copy)]
struct FailoverClock {
    first_failure: k8s_openapi::jiff::Timestamp,
    verdict: k8s_openapi::jiff::Timestamp,
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
        let scope = match config.distributed {
            None => Scope::Hub,
            Some(_) => Scope::Distributed,
        };
        let namespace = config
            .distributed
            .as_ref()
            .and_then(|local| local.namespace.clone());
        Context {
            client: client.clone(),
            providers,
            config,
            metrics: Metrics::default(),
            clock: Arc::new(k8s_openapi::jiff::Timestamp::now),
            caches: Arc::new(Caches::new(scope).within(namespace)),
            recorder: kube::runtime::events::Recorder::new(
                client.clone(),
                kube::runtime::events::Reporter {
                    controller: FIELD_MANAGER.into(),
                    instance: std::env::var("HOSTNAME").ok(),
                },
            ),
            failures: Mutex::new(HashMap::new()),
            marks: Mutex::new(HashMap::new()),
            refreshes_unread: Mutex::new(HashMap::new()),
            shared_probes: None,
            failing_seen: Mutex::new(HashMap::new()),
            drifted: Mutex::new(BTreeSet::new()),
            fence: Arc::new(crate::fence::Fence::open()),
            brake_memory: Mutex::new(None),
            drains: Mutex::new(HashMap::new()),
            tiers: Mutex::new(HashMap::new()),
            failovers: Mutex::new(HashMap::new()),
            journal: crate::journal::Journal::default(),
            claims: Mutex::new(None),
        }
    }

    /// The claims of the zones in the cache now, from the memo when the cache has not changed.
    fn current_claims(&self) -> Arc<ZoneClaims> {
        let revision = self.caches.zones.revision();
        let mut memo = self.claims.lock().expect("claims lock");
        if let Some(claims) = memo.as_ref().filter(|c| c.revision == revision) {
            return claims.clone();
        }
        let zones = self.caches.zones.state();
        let claims = crate::zone_claims::claims(&zones, &self.config.domain_grants);
        let mut by_zone = BTreeMap::new();
        let mut held = BTreeSet::new();
        for zone in &zones {
            let key = crate::zone_claims::claim_key(zone);
            let claim = claims
                .get(&key)
                .cloned()
                .unwrap_or(crate::zone_claims::Claim::Holds);
            if claim.holds() {
                held.insert(crate::zone_claims::normalize(&zone.spec.domain_name));
            }
            by_zone.insert(key, (zone.metadata.resource_version.clone(), claim));
        }
        let fresh = Arc::new(ZoneClaims {
            revision,
            by_zone,
            held,
        });
        *memo = Some(fresh.clone());
        fresh
    }

    /// Takes each of a policy's clusters one drain step further where one is due (`marked`:
    /// whether its ManagedCluster carries the drain label); returns the clusters that drain or
    /// return, with where they stand.
    pub fn drain_steps(
        &self,
        policy: &str,
        marked: &[(String, bool)],
        step_seconds: u64,
    ) -> BTreeMap<String, meridian_dns::drain::DrainState> {
        let now = (self.clock)().as_second().max(0) as u64;
        let mut drains = self.drains.lock().expect("drain memory lock");
        let restarted = !drains.contains_key(policy);
        let states = drains.entry(policy.to_string()).or_default();
        for (cluster, marked) in marked {
            let before = states.get(cluster).copied();
            match meridian_dns::drain::drain_step(before, *marked, now, step_seconds, restarted) {
                Some(state) => {
                    if before.map(|b| b.percent) != Some(state.percent) {
                        tracing::info!(
                            policy,
                            cluster,
                            percent = state.percent,
                            draining = state.draining,
                            "drain step"
                        );
                    }
                    states.insert(cluster.clone(), state);
                }
                None => {
                    states.remove(cluster);
                }
            }
        }
        states.retain(|cluster, _| marked.iter().any(|(name, _)| name == cluster));
        states.clone()
    }

    /// Chooses the active priority tier of each weighted set of a record (see
    /// [`meridian_dns::tiers`]), remembering what the choice needs between passes.
    pub fn choose_tiers(
        &self,
        record: &str,
        healthy: &[meridian_dns::model::Endpoint],
        requested: &[meridian_dns::model::Endpoint],
        published: Option<&[meridian_dns::model::Endpoint]>,
        hold_down: u64,
    ) -> meridian_dns::tiers::TierChoice {
        let now = (self.clock)().as_second().max(0) as u64;
        let mut tiers = self.tiers.lock().expect("tier memory lock");
        let memory = tiers.entry(record.to_string()).or_default();
        meridian_dns::tiers::choose_tiers(
            healthy,
            requested,
            published,
            memory,
            meridian_dns::tiers::TierClock { now, hold_down },
        )
    }

    /// Refuses a provider batch unless this replica still holds the Lease.
    pub fn check_fence(&self) -> Result<(), Error> {
        self.fence.check().map_err(Error::Fenced)
    }

    /// The fleet brake now, from every ManagedCluster's last heartbeat (clusters never heard
    /// from do not count). Its changes are logged, and it is kept in the metrics.
    pub fn fleet_brake(&self) -> crate::silence::FleetBrake {
        let heard: Vec<k8s_openapi::jiff::Timestamp> = self
            .caches
            .clusters
            .state()
            .iter()
            .filter_map(|cluster| {
                let name = kube::ResourceExt::name_any(cluster.as_ref());
                self.last_heard(&name, self.report_of(&name).as_deref())
            })
            .collect();
        let now = (self.clock)();
        let computed = crate::silence::fleet_brake(
            &heard,
            now,
            self.config.heartbeat_timeout,
            self.config.fleet_brake_percent,
        );
        // Lingers half a timeout after the wave would let go: two renewals of the agents (every
        // quarter of it), enough for the whole wave to be heard again.
        // The brake is on exactly while there is a memory of what it holds.
        let (brake, was) = {
            let mut memory = self.brake_memory.lock().expect("brake memory lock");
            let was = memory.is_some();
            let (brake, remembered) = crate::silence::brake_with_memory(
                computed,
                *memory,
                now,
                self.config.heartbeat_timeout / 2,
            );
            *memory = remembered;
            (brake, was)
        };
        self.metrics.fleet(&brake);
        if brake.engaged && !was {
            tracing::warn!(
                quiet = brake.quiet,
                heard = brake.heard,
                threshold_percent = self.config.fleet_brake_percent,
                "fleet brake on: most clusters went quiet together; the hub assumes it is the one cut off and withdraws nothing for silence"
            );
        } else if was && !brake.engaged {
            tracing::info!(
                quiet = brake.quiet,
                heard = brake.heard,
                "fleet brake off: enough clusters are heard again; silence withdraws under the usual limits"
            );
        }
        brake
    }

    /// Marks `record` as drifted: its next pass reads the zone even in the steady state.
    pub fn mark_drifted(&self, record: &str) {
        self.drifted
            .lock()
            .expect("drifted lock")
            .insert(record.to_string());
    }

    /// Whether `record` was marked drifted, clearing the mark.
    pub fn take_drifted(&self, record: &str) -> bool {
        self.drifted.lock().expect("drifted lock").remove(record)
    }

    /// Whether the agent's probes of `record`'s addresses say what they said at its last full
    /// pass.
    pub fn failing_unchanged(&self, record: &str, failing: &BTreeSet<String>) -> bool {
        self.failing_seen.lock().expect("failing lock").get(record) == Some(failing)
    }

    /// A leaf of `record` judged unhealthy now, its failures begun at `first_failure`: counts
    /// its detection time, once per run of failures.
    pub fn failover_detected(
        &self,
        record: &str,
        address: &str,
        first_failure: k8s_openapi::jiff::Timestamp,
        zone: &str,
    ) {
        let now = (self.clock)();
        let mut failovers = self.failovers.lock().expect("failovers lock");
        let leaves = failovers.entry(record.to_string()).or_default();
        if leaves.contains_key(address) {
            return;
        }
        leaves.insert(
            address.to_string(),
            FailoverClock {
                first_failure: first_failure.min(now),
                verdict: now,
            },
        );
        self.metrics.failover(
            crate::metrics::FailoverPhase::Detection,
            zone,
            seconds_between(first_failure.min(now), now),
        );
    }

    /// A leaf of `record` judged healthy (or no longer judged): a failover of it that had not
    /// reached the zone is over.
    pub fn failover_called_off(&self, record: &str, address: &str) {
        let mut failovers = self.failovers.lock().expect("failovers lock");
        if let Some(leaves) = failovers.get_mut(record) {
            leaves.remove(address);
            if leaves.is_empty() {
                failovers.remove(record);
            }
        }
    }

    /// `record` now publishes only the leaves `published` in `zone`: every failover of a leaf
    /// not among them has reached the zone, and its publication and whole times count.
    pub fn failovers_published(&self, record: &str, published: &[String], zone: &str) {
        let now = (self.clock)();
        let mut failovers = self.failovers.lock().expect("failovers lock");
        let Some(leaves) = failovers.get_mut(record) else {
            return;
        };
        leaves.retain(|address, clock| {
            if published.contains(address) {
                return true;
            }
            use crate::metrics::FailoverPhase;
            self.metrics.failover(
                FailoverPhase::Publication,
                zone,
                seconds_between(clock.verdict, now),
            );
            self.metrics.failover(
                FailoverPhase::Whole,
                zone,
                seconds_between(clock.first_failure, now),
            );
            false
        });
        if leaves.is_empty() {
            failovers.remove(record);
        }
    }

    pub fn remember_failing(&self, record: &str, failing: BTreeSet<String>) {
        self.failing_seen
            .lock()
            .expect("failing lock")
            .insert(record.to_string(), failing);
    }

    /// Whether this refresh of `record` reads its host's last-modified mark
    /// ([`crate::dns_record::mark_read_due`]); counts the refreshes that do not.
    pub fn mark_read_due(&self, record: &str, sole_owner: bool) -> bool {
        let mut unread = self.refreshes_unread.lock().expect("refreshes lock");
        // A record not seen before reads at once.
        let count = unread
            .entry(record.to_string())
            .or_insert(crate::dns_record::SOLE_OWNER_REFRESHES_UNREAD);
        let due = crate::dns_record::mark_read_due(sole_owner, *count);
        *count = if due { 0 } else { *count + 1 };
        due
    }

    /// Makes the next refresh of `record` read its host's mark: after this cluster wrote, others
    /// may start publishing the host (a fleet's cold start), and the first writer would
    /// otherwise take itself for the sole owner for ten refreshes.
    pub fn read_mark_next_refresh(&self, record: &str) {
        self.refreshes_unread
            .lock()
            .expect("refreshes lock")
            .insert(
                record.to_string(),
                crate::dns_record::SOLE_OWNER_REFRESHES_UNREAD,
            );
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

    /// The key the hub seals the probes it writes with, from the cache; made on first use (the
    /// caller waits for the cache to show it).
    pub async fn probe_seal_key(&self) -> Result<Vec<u8>, crate::Error> {
        use meridian_api::names::PROBE_SEAL_SECRET;
        let namespace = self.config.hub_namespace.as_deref().ok_or_else(|| {
            crate::Error::Waiting("the hub's namespace for the probe seal".into())
        })?;
        if let Some(key) = self
            .caches
            .secrets
            .get(Some(namespace), PROBE_SEAL_SECRET)
            .and_then(|secret| crate::probe_seal::key_of(&secret))
        {
            return Ok(key);
        }
        let secret: k8s_openapi::api::core::v1::Secret =
            serde_json::from_value(serde_json::json!({
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {
                    "name": PROBE_SEAL_SECRET, "namespace": namespace,
                    "labels": { "app.kubernetes.io/managed-by": FIELD_MANAGER },
                },
                "data": { crate::probe_seal::KEY_FIELD: k8s_openapi::ByteString(crate::probe_seal::new_key()) },
            }))
            .expect("a Secret");
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> =
            kube::Api::namespaced(self.client.clone(), namespace);
        match api.create(&Default::default(), &secret).await {
            Ok(_) => tracing::info!(%namespace, "made the key probes are sealed with"),
            // Another replica, or an earlier run whose Secret the cache has not shown yet.
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(error) => return Err(error.into()),
        }
        Err(crate::Error::Waiting(
            "the probe seal key in the cache".into(),
        ))
    }

    /// `zone`'s claim on its domain among the zones in the cache (see [`crate::zone_claims`]).
    pub fn zone_claim(&self, zone: &ManagedZone) -> crate::zone_claims::Claim {
        let claims = self.current_claims();
        match claims.by_zone.get(&crate::zone_claims::claim_key(zone)) {
            Some((version, claim)) if *version == zone.metadata.resource_version => claim.clone(),
            // A zone the cache has not caught up with: decided among the others as given.
            _ => crate::zone_claims::claim_of(
                zone,
                &self.caches.zones.state(),
                &self.config.domain_grants,
            ),
        }
    }

    /// Whether a ManagedZone in the cache for the domain `apex` holds its claim.
    pub fn apex_held(&self, apex: &str) -> bool {
        self.current_claims().held.contains(apex)
    }

    /// The agent's report for `cluster`, from the cache.
    pub fn report_of(&self, cluster: &str) -> Option<Arc<ClusterReport>> {
        self.caches
            .reports
            .get(Some(cluster), meridian_api::names::CLUSTER_REPORT)
    }

    /// When the agent of `cluster` was last heard from: its heartbeat Lease's renewal, or its
    /// report's time (agents that keep no Lease), whichever is later.
    pub fn last_heard(
        &self,
        cluster: &str,
        report: Option<&ClusterReport>,
    ) -> Option<k8s_openapi::jiff::Timestamp> {
        let lease = self
            .caches
            .heartbeats
            .get(Some(cluster), meridian_api::names::HEARTBEAT_LEASE);
        last_heard(lease.as_deref(), report)
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
    /// A write built on a cached object the API server has since moved past (the cache has not
    /// heard yet): retried shortly, without backoff, as the watch catches up.
    #[error("the cache is behind: {0}")]
    Stale(String),
    #[error("provider: {0}")]
    Provider(#[from] meridian_providers::ProviderError),
    #[error("waiting: {0}")]
    Waiting(String),
    /// A write refused because this replica may no longer hold the Lease.
    #[error("fenced: {0}")]
    Fenced(crate::fence::Fenced),
    #[error("the reconcile ended abnormally: {0}")]
    Aborted(String),
}

impl Error {
    /// A short label for metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(_) => "finalizer",
            Error::Stale(_) => "stale",
            Error::Provider(_) => "provider",
            Error::Waiting(_) => "waiting",
            Error::Fenced(_) => "fenced",
            Error::Aborted(_) => "aborted",
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
    let api: kube::Api<K> =
        kube::Api::namespaced(ctx.client.clone(), &object.namespace().unwrap_or_default());
    let reconciled = object.clone();
    let reconcile = async move {
        finalizer(&api, finalizer_name, object, |event| async {
            match event {
                Event::Apply(object) => apply(object).await,
                Event::Cleanup(object) => cleanup(object).await,
            }
        })
        .await
        .map_err(|error| match error {
            FinalizerError::ApplyFailed(e) | FinalizerError::CleanupFailed(e) => e,
            // The finalizer list the patch tested is not the stored one any more.
            FinalizerError::AddFinalizer(kube::Error::Api(status))
            | FinalizerError::RemoveFinalizer(kube::Error::Api(status))
                if status.code == 409 || status.code == 422 =>
            {
                Error::Stale(status.message)
            }
            other => Error::Finalizer(other.to_string()),
        })
    };
    counted(&*reconciled, ctx, controller, reconcile).await
}

/// Runs a namespaced object's reconcile with no finalizer of ours: counts the reconcile and
/// resets the object's backoff on success.
pub async fn counted<K>(
    object: &K,
    ctx: &Context,
    controller: &str,
    reconcile: impl std::future::Future<Output = Result<Action, Error>>,
) -> Result<Action, Error>
where
    K: kube::Resource<DynamicType = ()>,
{
    use kube::ResourceExt;
    let key = object_key(
        &K::kind(&()),
        object.namespace().as_deref(),
        &object.name_any(),
    );
    ctx.metrics.reconciled(controller);
    let result = reconcile.await;
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
    if let Error::Stale(_) = error {
        tracing::debug!(object = %key, %error, "the cache is behind; looking again shortly");
        let delay = rand::rng().random_range(STALE_RETRY / 2..=STALE_RETRY);
        return Action::requeue(delay);
    }
    tracing::warn!(object = %key, %error, "reconcile failed; retrying with backoff");
    ctx.retry_after_failure(&key)
}

/// The longest wait before looking again at an object whose cached copy was behind.
const STALE_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

pub fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Deletes an object; one already gone is fine (a cache may not have heard of the deletion
/// yet, or another pass got there first).
pub async fn delete_if_present<K>(api: &kube::Api<K>, name: &str) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(error) => Err(error.into()),
    }
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

/// The time from `from` to `to`; nothing when `to` is not later.
fn seconds_between(
    from: k8s_openapi::jiff::Timestamp,
    to: k8s_openapi::jiff::Timestamp,
) -> std::time::Duration {
    std::time::Duration::try_from(to.duration_since(from)).unwrap_or_default()
}

/// When an agent was last heard from: its heartbeat Lease's renewal, or its report's time
/// (agents that keep no Lease), whichever is later. Both times are the agent's word, so each
/// counts no later than the API server saw the object written ([`server_stamped`]): a
/// compromised agent writing a far-future time once is not "heard" forever after.
pub fn last_heard(
    lease: Option<&k8s_openapi::api::coordination::v1::Lease>,
    report: Option<&ClusterReport>,
) -> Option<k8s_openapi::jiff::Timestamp> {
    let renewed = lease.and_then(|lease| {
        let claimed = lease.spec.as_ref()?.renew_time.as_ref()?.0;
        Some(no_later_than_written(claimed, &lease.metadata))
    });
    let reported = report.and_then(|report| {
        let claimed = report.spec.reported_at.as_ref()?.0;
        Some(no_later_than_written(claimed, &report.metadata))
    });
    renewed.max(reported)
}

/// The latest time the API server stamped on a write of the object (`managedFields[].time`,
/// set by the server whenever a manager changes a field), to the second.
pub fn server_stamped(
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<k8s_openapi::jiff::Timestamp> {
    metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|entry| entry.time.as_ref().map(|t| t.0))
        .max()
}

/// `claimed`, but no later than the server's last stamp on the object plus the second its
/// stamps are truncated to. An object without stamps (none from a real API server) keeps its
/// claim.
fn no_later_than_written(
    claimed: k8s_openapi::jiff::Timestamp,
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> k8s_openapi::jiff::Timestamp {
    match server_stamped(metadata) {
        Some(written) => {
            let written = written
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(1))
                .unwrap_or(written);
            claimed.min(written)
        }
        None => claimed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        ManagedFieldsEntry, MicroTime, ObjectMeta,
    };

    fn at(second: i64) -> k8s_openapi::jiff::Timestamp {
        k8s_openapi::jiff::Timestamp::from_second(second).unwrap()
    }

    fn written_at(second: Option<i64>) -> ObjectMeta {
        ObjectMeta {
            managed_fields: second.map(|s| {
                vec![ManagedFieldsEntry {
                    manager: Some("meridian-agent".into()),
                    time: Some(Time(at(s))),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }
    }

    fn lease(renewed: i64, written: Option<i64>) -> Lease {
        Lease {
            metadata: written_at(written),
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(at(renewed))),
                ..Default::default()
            }),
        }
    }

    fn report(reported: i64, written: Option<i64>) -> ClusterReport {
        let mut report = ClusterReport::new(
            meridian_api::names::CLUSTER_REPORT,
            serde_json::from_value(serde_json::json!({ "clusterID": "c" })).unwrap(),
        );
        report.metadata = written_at(written);
        report.spec.reported_at = Some(Time(at(reported)));
        report
    }

    #[test]
    fn an_agents_times_count_no_later_than_the_api_server_saw_them_written() {
        // (lease renewTime and server stamp, report reportedAt and server stamp, heard)
        let far_future = 4_102_444_800; // 2100-01-01
        let cases = [
            (
                Some((1_000, Some(1_000))),
                None,
                Some(1_000),
                "an honest renewal",
            ),
            (
                None,
                Some((1_000, Some(1_000))),
                Some(1_000),
                "an honest report",
            ),
            (
                Some((far_future, Some(1_000))),
                None,
                Some(1_001),
                "the attack: a renewal dated 2100, written at 1,000",
            ),
            (
                None,
                Some((far_future, Some(1_000))),
                Some(1_001),
                "a report dated 2100",
            ),
            (
                Some((900, Some(1_000))),
                Some((1_200, Some(1_200))),
                Some(1_200),
                "the later of the two",
            ),
            (
                Some((1_000, None)),
                None,
                Some(1_000),
                "no stamps (not from an API server): the claim",
            ),
        ];
        for (renewed, reported, heard, what) in cases {
            let lease = renewed.map(|(time, written)| lease(time, written));
            let report = reported.map(|(time, written)| report(time, written));
            assert_eq!(
                last_heard(lease.as_ref(), report.as_ref()),
                heard.map(at),
                "{what}"
            );
        }
    }
}
