//! What every reconcile shares: the client, the providers, the settings, the metrics, the
//! watch caches, and the helpers for finalizers, backoff and Events.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::Client;
use kube::api::PatchParams;
use kube::runtime::controller::Action;
use meridian_api::kuadrant::ManagedZone;
use meridian_api::meridian::ClusterReport;
use rand::Rng;

use crate::decide::host_marks::HostMarks;
use crate::runtime::caches::{Caches, Scope};
use crate::runtime::clock::{Clock, last_heard};
use crate::runtime::error::Error;
use crate::runtime::identity::{FIELD_MANAGER, object_key};
use crate::runtime::metrics::Metrics;
use crate::zones::zone_provider::ProviderCache;

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
    /// went quiet together, silence withdraws nothing ([`crate::decide::silence`]).
    pub fleet_brake_percent: u32,
    /// The share (percent) of a host's clusters silence may withdraw per heartbeat timeout.
    pub silence_withdrawal_percent: u32,
    /// Distributed mode: the controllers run on a spoke, for that cluster alone, and publish
    /// its branch into shared zones under its own owner ID. `None` on the hub.
    pub distributed: Option<LocalCluster>,
    /// How many objects each controller reconciles at once.
    pub concurrency: Concurrency,
    /// The domain suffixes the platform admin granted to namespaces (see
    /// [`crate::decide::zone_claims`]).
    pub domain_grants: crate::decide::zone_claims::DomainGrants,
    /// The addresses health probes may not reach (see [`crate::decide::probe_policy`]).
    pub probe_policy: crate::decide::probe_policy::ProbeAddressPolicy,
    /// The hub's own namespace, where it keeps the key it seals probes with (see
    /// [`crate::decide::probe_seal`]); `None` in distributed mode.
    pub hub_namespace: Option<String>,
    /// The hub's owner ID (`--owner-id`, see [`crate::zones::owners::hub_record_owner`]): what a
    /// record without `spec.ownerID` publishes under, with its namespace and name. `None` in
    /// distributed mode, where every record names its cluster's.
    pub hub_owner: Option<String>,
    /// Also write the Gateway condition in Kuadrant's domain (`kuadrant.io/DNSPolicyAffected`),
    /// as releases before Gateway API v1.5 status did, for tools written for
    /// multicluster-gateway-controller. Meridian's own (`meridian.dev/DNSPolicyAffected`) is
    /// always written.
    pub kuadrant_gateway_condition: bool,
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

impl ControllerConfig {
    /// When to look at a converged object again: the resync period, give or take a tenth. A
    /// cold start reconciles a whole fleet within a minute or two, and without the spread every
    /// object would come back in the same wave each period (at 3,000 clusters, 53 reconciles a
    /// second for each controller); with it the waves smear out over the periods that follow.
    pub fn next_resync(&self) -> Duration {
        jittered(self.resync)
    }

    /// As [`Self::next_resync`], for an object that must be looked at within `bound` (a silent
    /// cluster's health results expire): the sooner of the two, less up to a tenth, so that
    /// objects reconciled together spread without any waiting past the bound.
    pub fn next_resync_within(&self, bound: Duration) -> Duration {
        self.resync
            .min(bound)
            .mul_f64(rand::rng().random_range(0.9..=1.0))
    }
}

/// `period`, give or take a tenth, drawn anew on each call.
pub fn jittered(period: Duration) -> Duration {
    period.mul_f64(rand::rng().random_range(0.9..=1.1))
}

impl Default for ControllerConfig {
    fn default() -> Self {
        ControllerConfig {
            resync: Duration::from_secs(300),
            retry_base: Duration::from_secs(1),
            retry_cap: Duration::from_secs(120),
            heartbeat_timeout: Duration::from_secs(120),
            failure_threshold_percent: crate::decide::health::DEFAULT_THRESHOLD_PERCENT,
            fleet_brake_percent: crate::decide::silence::DEFAULT_FLEET_BRAKE_PERCENT,
            silence_withdrawal_percent: crate::decide::silence::DEFAULT_WITHDRAWAL_PERCENT,
            distributed: None,
            concurrency: Concurrency::default(),
            domain_grants: crate::decide::zone_claims::DomainGrants::default(),
            probe_policy: crate::decide::probe_policy::ProbeAddressPolicy::default(),
            hub_namespace: None,
            hub_owner: None,
            kuadrant_gateway_condition: false,
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
    /// Per object, how long its next retry waits.
    backoff: crate::runtime::backoff::Backoff,
    /// Distributed mode: what each record's host mark was and when it is next read.
    pub host_marks: HostMarks,
    /// Distributed mode: the agent's probes of the hosts' addresses, and what they said at
    /// each record's last full pass.
    pub shared_probes: Option<Arc<dyn crate::decide::shared_health::SharedProbes>>,
    /// Whether this process may write now (the hub Lease); open where nothing is elected.
    /// The client above checks it before every write request; provider batches check it
    /// through [`Context::check_fence`].
    pub fence: Arc<crate::runtime::fence::Fence>,
    /// What the fleet brake held when last looked at ([`crate::reconcile::fleet_brake`]).
    pub brake_memory: crate::reconcile::memory::brake::FleetBrakeMemory,
    /// Per policy, where its drained clusters' steps stand.
    pub drains: crate::reconcile::memory::drains::DrainMemory,
    /// What each DNSRecord's pass remembers for its next.
    pub record_memory: crate::reconcile::memory::records::RecordMemory,
    /// What the hub changed in DNS recently, newest last (the live view).
    pub journal: crate::runtime::journal::Journal,
    /// Every zone's claim, computed once per change of the zones cache: every DNSRecord
    /// reconcile asks for its zone's.
    claims: Mutex<Option<Arc<ZoneClaims>>>,
}

/// The claims of the zones in the cache at one revision of it.
#[derive(Debug)]
struct ZoneClaims {
    revision: u64,
    /// By `namespace/name`, with the `resourceVersion` the claim was decided on.
    by_zone: BTreeMap<String, (Option<String>, crate::decide::zone_claims::Claim)>,
    /// The domains a zone holds.
    held: BTreeSet<String>,
}

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
        let hub_namespace = match scope {
            Scope::Hub => config.hub_namespace.clone(),
            _ => None,
        };
        Context {
            client: client.clone(),
            providers,
            config,
            metrics: Metrics::default(),
            clock: Arc::new(k8s_openapi::jiff::Timestamp::now),
            caches: Arc::new(
                Caches::new(scope)
                    .within(namespace)
                    .keeping_bindings_in(hub_namespace),
            ),
            recorder: kube::runtime::events::Recorder::new(
                client.clone(),
                kube::runtime::events::Reporter {
                    controller: FIELD_MANAGER.into(),
                    instance: std::env::var("HOSTNAME").ok(),
                },
            ),
            backoff: Default::default(),
            host_marks: HostMarks::default(),
            shared_probes: None,
            fence: Arc::new(crate::runtime::fence::Fence::open()),
            brake_memory: Default::default(),
            drains: Default::default(),
            record_memory: Default::default(),
            journal: crate::runtime::journal::Journal::default(),
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
        let claims = crate::decide::zone_claims::claims(&zones, &self.config.domain_grants);
        let mut by_zone = BTreeMap::new();
        let mut held = BTreeSet::new();
        for zone in &zones {
            let key = crate::decide::zone_claims::claim_key(zone);
            let claim = claims
                .get(&key)
                .cloned()
                .unwrap_or(crate::decide::zone_claims::Claim::Holds);
            if claim.holds() {
                held.insert(crate::decide::zone_claims::normalize(
                    &zone.spec.domain_name,
                ));
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

    /// Refuses a provider batch unless this replica still holds the Lease.
    pub fn check_fence(&self) -> Result<(), Error> {
        self.fence.check().map_err(Error::Fenced)
    }

    /// The delay before retrying `object` after a failure: exponential per consecutive
    /// failure, with full jitter, so many failing objects never retry in step.
    pub fn retry_after_failure(&self, object: &str) -> Action {
        Action::requeue(
            self.backoff
                .failed(object, self.config.retry_base, self.config.retry_cap),
        )
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
            .and_then(|secret| crate::decide::probe_seal::key_of(&secret))
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
                "data": { crate::decide::probe_seal::KEY_FIELD: k8s_openapi::ByteString(crate::decide::probe_seal::new_key()) },
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

    /// `zone`'s claim on its domain among the zones in the cache (see [`crate::decide::zone_claims`]).
    pub fn zone_claim(&self, zone: &ManagedZone) -> crate::decide::zone_claims::Claim {
        let claims = self.current_claims();
        match claims
            .by_zone
            .get(&crate::decide::zone_claims::claim_key(zone))
        {
            Some((version, claim)) if *version == zone.metadata.resource_version => claim.clone(),
            // A zone the cache has not caught up with: decided among the others as given.
            _ => crate::decide::zone_claims::claim_of(
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
    /// Whether `object`'s last pass under `controller` failed. A pass after a failure may read
    /// a cached copy from before the failure's own status write (its status is no trigger):
    /// such a pass writes its status even when the cache already says the same.
    pub fn failed_last<K: kube::Resource<DynamicType = ()>>(
        &self,
        object: &K,
        controller: &str,
    ) -> bool {
        self.backoff.failing(&backoff_key(object, controller))
    }

    pub fn succeeded(&self, object: &str) {
        self.backoff.succeeded(object);
    }

    /// How many times in a row a provider refused `object`'s writes for `controller` because
    /// another writer got there first.
    pub fn raced_in_a_row<K: kube::Resource<DynamicType = ()>>(
        &self,
        object: &K,
        controller: &str,
    ) -> u32 {
        self.backoff
            .raced_in_a_row(&backoff_key(object, controller))
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
    let key = backoff_key(object, controller);
    ctx.metrics.reconciled(controller);
    let started = std::time::Instant::now();
    let result = reconcile.await;
    ctx.metrics.reconcile_took(controller, started.elapsed());
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
    ctx.metrics.failed(controller, error.reason());
    let key = backoff_key(object, controller);
    if let Error::Stale(_) = error {
        tracing::debug!(object = %key, %error, "the cache is behind; looking again shortly");
        let delay = rand::rng().random_range(STALE_RETRY / 2..=STALE_RETRY);
        return Action::requeue(delay);
    }
    if let Error::Raced(_) = error {
        let in_a_row = ctx.backoff.raced(&key);
        if in_a_row <= RACED_STREAK {
            tracing::debug!(object = %key, %error, "another writer got there first; planning again shortly");
            let delay = rand::rng().random_range(STALE_RETRY / 2..=STALE_RETRY);
            return Action::requeue(delay);
        }
        // Refused every time: not a race any more but something a fresh look does not mend
        // (a record another tool keeps changing, one the plan cannot read back exactly).
        tracing::warn!(object = %key, %error, in_a_row, "refused as raced again and again; backing off");
        return ctx.retry_after_failure(&key);
    }
    // The write was refused by this replica's fence (the fence layer logged it): the Lease
    // lapsed for a moment (a slow renewal) or moved. The object is not at fault, so its backoff
    // does not grow: once a renewal lands it is written at the next look; a replica that lost
    // the Lease stops its controllers.
    if error.is_fenced() {
        let delay = rand::rng().random_range(FENCED_RETRY / 2..=FENCED_RETRY);
        return Action::requeue(delay);
    }
    tracing::warn!(object = %key, %error, "reconcile failed; retrying with backoff");
    ctx.retry_after_failure(&key)
}

/// What an object's backoff is kept under: per controller, since several controllers reconcile
/// the same object (a ManagedZone's status and its router-shard DNS), and one's success must
/// not cut short the other's backoff.
fn backoff_key<K: kube::Resource<DynamicType = ()>>(object: &K, controller: &str) -> String {
    use kube::ResourceExt;
    let key = object_key(
        &K::kind(&()),
        object.namespace().as_deref(),
        &object.name_any(),
    );
    format!("{controller} {key}")
}

/// The longest wait before looking again at an object whose cached copy was behind.
const STALE_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

/// Provider refusals of a race in a row that are retried shortly; from the next one an object
/// backs off as any failing one, and a DNSRecord says why in its status.
pub const RACED_STREAK: u32 = 5;

/// The longest wait before looking again at an object whose write the fence refused.
const FENCED_RETRY: std::time::Duration = std::time::Duration::from_secs(2);

pub fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

/// Deletes `object` only as the cache saw it (its UID and resourceVersion as preconditions):
/// one changed meanwhile (another policy took a record over in place) is left alone, and the
/// caller looks again shortly, once the cache has the change ([`Error::Stale`]). One already
/// gone is fine.
pub async fn delete_if_unchanged<K>(api: &kube::Api<K>, object: &K) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let meta = object.meta();
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: meta.uid.clone(),
            resource_version: meta.resource_version.clone(),
        }),
        ..Default::default()
    };
    let name = meta.name.clone().unwrap_or_default();
    match api.delete(&name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Err(Error::Stale(format!(
            "{name} changed since it was read; not deleted"
        ))),
        Err(error) => Err(error.into()),
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resyncs_spread_over_a_fifth_of_the_period_around_it() {
        let config = ControllerConfig::default();
        let draws: Vec<Duration> = (0..2_000).map(|_| config.next_resync()).collect();
        let (low, high) = (Duration::from_secs(270), Duration::from_secs(330));
        assert!(draws.iter().all(|d| (low..=high).contains(d)), "{draws:?}");
        // Spread, not a constant: each tenth of the range is drawn (2,000 draws miss a tenth
        // with odds of about 10 × 0.9^2000).
        let tenths: BTreeSet<u128> = draws
            .iter()
            .map(|d| (d.as_millis() - low.as_millis()) * 10 / 60_001)
            .collect();
        assert_eq!(tenths.len(), 10, "{tenths:?}");
        // Bounded: never past the bound, spread below it.
        let bound = Duration::from_secs(120);
        let draws: Vec<Duration> = (0..2_000)
            .map(|_| config.next_resync_within(bound))
            .collect();
        assert!(
            draws
                .iter()
                .all(|d| (bound.mul_f64(0.9)..=bound).contains(d)),
            "{draws:?}"
        );
        assert!(draws.iter().any(|d| *d < bound.mul_f64(0.95)));
        assert!(draws.iter().any(|d| *d > bound.mul_f64(0.95)));
    }
}
