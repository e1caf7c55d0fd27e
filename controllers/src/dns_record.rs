//! DNSRecord → the zone's provider. The record's endpoints are planned against the zone with
//! external-dns-compatible ownership (owner: `spec.ownerID`, else the record's UID) and applied
//! in batches; status says what is published. Deleting a record removes only its own
//! contribution. Provider errors are said in status and retried with backoff; what was
//! published before stays published.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Secret;
use std::collections::BTreeMap;

use kube::api::{Api, DeleteParams, ListParams, Patch};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate, set_condition};
use meridian_api::kuadrant::{
    DNSHealthCheckProbe, DNSHealthCheckProbeStatus, DNSRecord, DNSRecordStatus, HealthCheck,
    ManagedZone,
};
use meridian_api::meridian::{ProbeReport, ProbeResults, probe_shard};
use meridian_dns::changes::Update;
use meridian_dns::model::{Endpoint, RecordKey};
use meridian_dns::model::{RecordType, is_at_or_below};
use meridian_dns::plan::{PlanInput, Registry, plan};
use meridian_dns::tree::RecordTree;
use meridian_providers::{Provider, ProviderError};
use serde_json::json;

use crate::caches::{Change, everything_once, own_changes, run_controller, triggers};
use crate::convert::{all_to_api, all_to_engine};
use crate::desired::silence;
use crate::health::{
    HealthOutcome, PROBE_RECORD_LABEL, apply_health, probe_status, reasons as health_reasons,
    same_findings, wanted_probes,
};
use crate::indexes;
use crate::shared_health;
use crate::zone_provider::ZoneProvider;
use crate::{Context, Error, apply_params, now, retry_after, with_finalizer};

pub const FINALIZER: &str = "meridian.dev/dns-record";
const CONTROLLER: &str = "dnsrecord";

/// Reasons of the record's `Ready` condition.
pub mod reasons {
    pub const PUBLISHED: &str = "Published";
    pub const PARTLY_PUBLISHED: &str = "PartlyPublished";
    pub const ZONE_NOT_FOUND: &str = "ZoneNotFound";
    pub const PROVIDER_UNAVAILABLE: &str = "ProviderUnavailable";
    pub const PROVIDER_ERROR: &str = "ProviderError";
}

/// Runs the DNSRecord controller until `stop`. Besides its own records it follows, from the
/// shared caches, the ManagedZones they publish into and, on the hub, the reports whose probe
/// verdicts changed ([`crate::indexes::records_with_changed_verdicts`]). In distributed mode
/// the caches hold only the records this cluster's agent wrote.
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let caches = ctx.caches.clone();
    let all = caches.records.store().clone();
    let by_zone = {
        let records = all.clone();
        move |change: &Change<ManagedZone>| match change {
            Change::Applied { new: zone, .. } | Change::Deleted(zone) => {
                let namespace = zone.namespace();
                records
                    .state()
                    .iter()
                    .filter(|r| {
                        r.namespace() == namespace && r.spec.managed_zone.name == zone.name_any()
                    })
                    .map(|r| ObjectRef::from_obj(&**r))
                    .collect()
            }
            Change::Relisted => Vec::new(),
        }
    };
    let by_secret = {
        let (records, zones) = (all.clone(), caches.zones.store().clone());
        move |change: &Change<Secret>| {
            let Some(secret) = change.object() else {
                return Vec::new();
            };
            indexes::records_using_secret(
                &records.state(),
                &zones.state(),
                &secret.namespace().unwrap_or_default(),
                &secret.name_any(),
            )
        }
    };
    let mut triggers = vec![
        everything_once(&caches.records),
        own_changes(&caches.records),
        triggers(caches.zones.subscribe(), all.clone(), by_zone),
        triggers(caches.secrets.subscribe(), all.clone(), by_secret),
    ];
    if ctx.config.distributed.is_none() {
        let probes = caches.probes.store().clone();
        let record_of_probe = move |namespace: &str, probe: &str| {
            let probe = probes.get(&ObjectRef::new(probe).within(namespace))?;
            probe.labels().get(PROBE_RECORD_LABEL).cloned()
        };
        let by_results = move |change: &Change<ProbeResults>| match change {
            Change::Applied { old, new } => {
                indexes::records_with_changed_verdicts(old.as_deref(), Some(new), &record_of_probe)
            }
            Change::Deleted(old) => {
                indexes::records_with_changed_verdicts(Some(old), None, &record_of_probe)
            }
            Change::Relisted => Vec::new(),
        };
        triggers.push(crate::caches::triggers(
            caches.probe_results.subscribe(),
            all.clone(),
            by_results,
        ));
    }
    run_controller(all, triggers, reconcile, error_policy, ctx.clone(), stop).await;
}

pub async fn reconcile(record: Arc<DNSRecord>, ctx: Arc<Context>) -> Result<Action, Error> {
    with_finalizer(
        record,
        &ctx,
        CONTROLLER,
        FINALIZER,
        |record| {
            let ctx = &ctx;
            async move { publish(&record, ctx).await }
        },
        |record| {
            let ctx = &ctx;
            async move { withdraw(&record, ctx).await }
        },
    )
    .await
}

pub fn error_policy(record: Arc<DNSRecord>, error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(&*record, error, &ctx, CONTROLLER)
}

/// The owner ID the record publishes under.
pub fn owner_of(record: &DNSRecord) -> String {
    record
        .spec
        .owner_id
        .clone()
        .or_else(|| record.uid())
        .unwrap_or_else(|| record.name_any())
}

/// The zone and its provider, or the reason (for status) why there is none.
async fn zone_provider(
    record: &DNSRecord,
    ctx: &Context,
) -> Result<(ManagedZone, ZoneProvider, String), (String, &'static str, String)> {
    let namespace = record.namespace().unwrap_or_default();
    let zone_name = &record.spec.managed_zone.name;
    let Some(zone) = ctx.caches.zones.get(Some(&namespace), zone_name) else {
        return Err((
            zone_name.clone(),
            reasons::ZONE_NOT_FOUND,
            format!("ManagedZone {zone_name} not found"),
        ));
    };
    let zone = (*zone).clone();
    let domain = zone.spec.domain_name.clone();
    let provider = match &zone.spec.dns_provider_secret_ref {
        None => ctx.providers.embedded(&domain).ok_or_else(|| {
            (
                zone_name.clone(),
                reasons::PROVIDER_UNAVAILABLE,
                format!(
                    "ManagedZone {zone_name} has no dnsProviderSecretRef, and only the hub serves zones itself"
                ),
            )
        })?,
        Some(secret_ref) => {
            let Some(secret) = ctx.caches.secrets.get(Some(&namespace), &secret_ref.name) else {
                return Err((
                    zone_name.clone(),
                    reasons::PROVIDER_UNAVAILABLE,
                    format!("Secret {} not found", secret_ref.name),
                ));
            };
            ctx.providers
                .for_secret(&secret, &domain)
                .await
                .map_err(|e| {
                    (
                        zone_name.clone(),
                        reasons::PROVIDER_UNAVAILABLE,
                        e.to_string(),
                    )
                })?
        }
    };
    let zone_id = provider
        .zone_id(&domain, zone.spec.id.as_deref())
        .await
        .map_err(|e| (zone_name.clone(), reasons::PROVIDER_ERROR, e.to_string()))?;
    Ok((zone, provider, zone_id))
}

async fn publish(record: &DNSRecord, ctx: &Context) -> Result<Action, Error> {
    let started = Instant::now();
    let requested = all_to_engine(&record.spec.endpoints);
    let previous: Option<Vec<Endpoint>> = record
        .status
        .as_ref()
        .filter(|status| !status.endpoints.is_empty())
        .map(|status| all_to_engine(&status.endpoints));
    // On the hub, health is probes and their aggregate; in distributed mode it is agreed
    // through the zone (below, once the zone is read).
    let shared_check = record
        .spec
        .health_check
        .as_ref()
        .filter(|_| ctx.config.distributed.is_some());
    let health = match &record.spec.health_check {
        Some(check) if shared_check.is_none() => {
            Some(check_health(record, check, &requested, previous.as_deref(), ctx).await?)
        }
        Some(_) => None,
        None => {
            delete_probes(record, ctx, &[]).await?;
            None
        }
    };
    let health = health.as_ref();
    // A silent cluster's results must expire even when nothing else changes.
    let resync = if health.is_some() {
        ctx.config.resync.min(ctx.config.heartbeat_timeout)
    } else {
        ctx.config.resync
    };
    let (_, provider, zone_id) = match zone_provider(record, ctx).await {
        Ok(found) => found,
        Err((_, reason, message)) => {
            // Nothing is changed at any provider: what was published stays published.
            let outcome = (false, reason, message);
            write_status(record, ctx, None, outcome, health, Vec::new()).await?;
            return Err(Error::Waiting(format!("zone of {}", record.name_any())));
        }
    };
    let owner = owner_of(record);
    let healthy_endpoints = health.map_or(&requested, |h| &h.endpoints);
    let (mut desired, mut notes) = provider.publishable(&record.spec.root_host, healthy_endpoints);

    // Steady state at a provider: what this generation asks for is what status says is
    // published, so there is nothing to ask the provider (not even a zone list). Embedded zones
    // are always planned: reading them is free, and after a restart they start empty.
    let published_as_desired = record.status.as_ref().is_some_and(|status| {
        status.observed_generation == record.metadata.generation
            && conditions::condition_status(&status.conditions, conditions::READY) == Some(true)
    }) && previous.as_deref() == Some(desired.as_slice());
    let distributed = ctx.config.distributed.is_some();
    let record_key = crate::object_key(
        "DNSRecord",
        record.namespace().as_deref(),
        &record.name_any(),
    );
    let mark_name = last_modified_name(&record.spec.root_host);
    let shared = shared_check.zip(ctx.shared_probes.as_ref());
    let failing = shared.map(|(_, probes)| probes.failing(&record_key));
    // What this cluster's probes say changed since the last full pass: look at the zone.
    let health_unchanged = failing
        .as_ref()
        .is_none_or(|failing| ctx.failing_unchanged(&record_key, failing));
    if published_as_desired && health_unchanged && !matches!(provider, ZoneProvider::Embedded(_)) {
        // On the hub, nothing but this record changes what this record publishes. In
        // distributed mode other clusters write the same names: one small read of the host's
        // last-modified mark says whether anyone did since this cluster last looked.
        let unchanged = if distributed {
            let mark = match provider
                .read_record(&zone_id, &mark_name, RecordType::Txt)
                .await
            {
                Ok(mark) => mark.map(|m| m.targets.join("")),
                Err(error) => return provider_failed(record, ctx, &provider, error).await,
            };
            ctx.last_seen_mark(&record_key) == Some(mark)
        } else {
            true
        };
        if unchanged {
            write_status(
                record,
                ctx,
                None,
                ready_as_before(record),
                health,
                Vec::new(),
            )
            .await?;
            return Ok(Action::requeue(refresh_after(resync, distributed)));
        }
    }

    let current = provider.records(&zone_id).await;
    let current = match current {
        Ok(current) => current,
        Err(error) => return provider_failed(record, ctx, &provider, error).await,
    };
    let mark_before = current
        .iter()
        .find(|e| e.dns_name == mark_name && e.record_type == RecordType::Txt)
        .cloned();
    let mut health_changes = meridian_dns::changes::Changes::default();
    if let (Some((check, probes)), Some(failing)) = (shared, failing) {
        let agreed = agree_on_health(
            record,
            ctx,
            (check, probes.as_ref()),
            &failing,
            &owner,
            desired,
            &current,
        )
        .await?;
        desired = agreed.endpoints;
        notes.extend(agreed.notes);
        health_changes = agreed.changes;
        ctx.remember_failing(&record_key, failing);
    }
    let planned = plan(
        &PlanInput {
            owner: &owner,
            root_host: &record.spec.root_host,
            desired: &desired,
            previous: previous.as_deref(),
        },
        &current,
    );
    let mut changes = planned.changes.clone();
    changes.append(health_changes);
    let mut mark_after = mark_before.as_ref().map(|m| m.targets.join(""));
    if distributed && !changes.is_empty() {
        mark_after = move_mark(&mut changes, &mark_name, mark_before.as_ref(), &owner, ctx);
    }
    if !changes.is_empty() {
        if let Err(error) = provider.apply(&zone_id, &changes).await {
            ctx.metrics.provider_call(provider.kind(), "error");
            return provider_failed(record, ctx, &provider, error).await;
        }
        ctx.metrics.provider_call(provider.kind(), "ok");
        ctx.metrics.published(started.elapsed());
    }
    if distributed {
        ctx.remember_mark(&record_key, mark_after);
    }
    let owners = domain_owners(&current, &record.spec.root_host, &owner);
    let mut messages: Vec<String> = planned.problems.iter().map(ToString::to_string).collect();
    messages.extend(notes);
    let (ready, reason, message) = if planned.problems.is_empty() {
        let mut message = format!(
            "{} records published through {}",
            desired.len(),
            provider.kind()
        );
        if !messages.is_empty() {
            message = format!("{message}; {}", messages.join("; "));
        }
        (true, reasons::PUBLISHED, message)
    } else {
        (false, reasons::PARTLY_PUBLISHED, messages.join("; "))
    };
    write_status(
        record,
        ctx,
        Some(&desired),
        (ready, reason, message),
        health,
        owners,
    )
    .await?;
    // A conflict with another owner is not fought over: look again later and later (its own
    // count, which a successful pass does not reset).
    let conflict_key = format!("{record_key}/conflict");
    if !planned.problems.is_empty() {
        return Ok(ctx.retry_after_failure(&conflict_key));
    }
    ctx.succeeded(&conflict_key);
    Ok(Action::requeue(refresh_after(resync, distributed)))
}

/// What this cluster publishes of a host after agreeing on health through the zone, the
/// changes to the shared health records, and notes for status.
struct AgreedHealth {
    endpoints: Vec<Endpoint>,
    changes: meridian_dns::changes::Changes,
    notes: Vec<String>,
}

/// Distributed mode: probes the host's addresses from here (with the check's headers),
/// updates this cluster's failure reports, and leaves out its own addresses the fleet agrees
/// are failing (`crate::shared_health`).
async fn agree_on_health(
    record: &DNSRecord,
    ctx: &Context,
    (check, probes): (&HealthCheck, &dyn shared_health::SharedProbes),
    failing: &std::collections::BTreeSet<String>,
    owner: &str,
    desired: Vec<Endpoint>,
    current: &[Endpoint],
) -> Result<AgreedHealth, Error> {
    let root_host = &record.spec.root_host;
    let record_key = crate::object_key(
        "DNSRecord",
        record.namespace().as_deref(),
        &record.name_any(),
    );
    let own = shared_health::host_addresses(&desired, root_host);
    let mut watched = shared_health::host_addresses(current, root_host);
    watched.extend(own.iter().cloned());
    let mut notes = Vec::new();
    let headers = match &check.additional_headers_ref {
        None => Some(Vec::new()),
        Some(reference) => ctx
            .caches
            .secrets
            .get(record.namespace().as_deref(), &reference.name)
            .map(|secret| crate::health::secret_headers(&secret).into_iter().collect()),
    };
    if headers.is_none() {
        notes.push(format!(
            "health checks wait for their header Secret {}",
            check
                .additional_headers_ref
                .as_ref()
                .map_or("", |r| r.name.as_str())
        ));
    }
    probes.watch(&record_key, root_host, &watched, check, headers.as_deref());
    let verdict = shared_health::decide(
        owner,
        root_host,
        &own,
        failing,
        current,
        ctx.config.failure_threshold_percent,
    );
    let endpoints = if verdict.withdrawn.is_empty() {
        desired
    } else {
        let down = verdict
            .withdrawn
            .iter()
            .map(|address| (address.clone(), meridian_dns::tree::Health::Unhealthy))
            .collect();
        match RecordTree::from_records(root_host.as_str(), desired).prune(&down) {
            meridian_dns::tree::Pruned::Endpoints(endpoints) => endpoints,
            // Nothing of this cluster's is healthy: its branch goes, the others serve.
            meridian_dns::tree::Pruned::NoHealthyLeaf => Vec::new(),
        }
    };
    notes.extend(verdict.notes);
    Ok(AgreedHealth {
        endpoints,
        changes: verdict.changes,
        notes,
    })
}

/// TTL of the last-modified mark.
const MARK_TTL: u32 = 60;

/// Adds to `changes` a new value of the host's mark, so the other clusters look again; returns
/// the new value.
fn move_mark(
    changes: &mut meridian_dns::changes::Changes,
    mark_name: &str,
    before: Option<&Endpoint>,
    owner: &str,
    ctx: &Context,
) -> Option<String> {
    let value = format!("{} {owner}", (ctx.clock)());
    let mark = Endpoint::new(mark_name, RecordType::Txt, [value.clone()], MARK_TTL);
    match before {
        Some(old) => changes.updates.push(Update {
            old: old.clone(),
            new: mark,
        }),
        None => changes.creates.push(mark),
    }
    Some(value)
}

/// The TXT record whose value changes with every change any cluster makes to a host's records
/// in distributed mode (`kuadrant.last_modified_at.<host>`).
pub fn last_modified_name(root_host: &str) -> String {
    format!(
        "kuadrant.last_modified_at.{}",
        root_host.trim_start_matches("*.")
    )
}

/// The next refresh: in distributed mode with ±5 % jitter, so clusters sharing a zone do not
/// read it in step.
fn refresh_after(resync: std::time::Duration, distributed: bool) -> std::time::Duration {
    if !distributed {
        return resync;
    }
    use rand::Rng;
    resync.mul_f64(rand::rng().random_range(0.95..=1.05))
}

/// The `Ready` condition as status has it (for passes that publish nothing new).
fn ready_as_before(record: &DNSRecord) -> (bool, &str, String) {
    let ready = record
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY));
    match ready {
        Some(c) => (c.status == "True", c.reason.as_str(), c.message.clone()),
        None => (false, reasons::PUBLISHED, String::new()),
    }
}

/// Keeps one probe per leaf of the record, turns the live clusters' results into each probe's
/// status, and prunes the record by them.
async fn check_health(
    record: &DNSRecord,
    check: &HealthCheck,
    requested: &[Endpoint],
    published: Option<&[Endpoint]>,
    ctx: &Context,
) -> Result<HealthOutcome, Error> {
    if !ctx.caches.listed() {
        return Err(Error::Waiting(
            "the first list of probes and reports".into(),
        ));
    }
    let namespace = record.namespace().unwrap_or_default();
    let name = record.name_any();
    let root_host = &record.spec.root_host;
    let leaves = RecordTree::from_records(root_host.as_str(), requested.to_vec()).leaf_addresses();
    let wanted = wanted_probes(&name, root_host, &leaves, check);
    let existing = probes_of(record, ctx);
    let api: Api<DNSHealthCheckProbe> = Api::namespaced(ctx.client.clone(), &namespace);
    let owner = record
        .controller_owner_ref(&())
        .expect("a stored record has a UID");
    for probe in &wanted {
        let current = existing.iter().find(|p| p.name_any() == probe.name);
        if current.is_some_and(|p| p.spec == probe.spec) {
            continue;
        }
        let object = json!({
            "apiVersion": DNSHealthCheckProbe::api_version(&()),
            "kind": DNSHealthCheckProbe::kind(&()),
            "metadata": {
                "name": probe.name,
                "namespace": namespace,
                "labels": { PROBE_RECORD_LABEL: name },
                "ownerReferences": [owner],
            },
            "spec": probe.spec,
        });
        api.patch(&probe.name, &apply_params(), &Patch::Apply(object))
            .await?;
    }
    let keep: Vec<&str> = wanted.iter().map(|p| p.name.as_str()).collect();
    delete_probes(record, ctx, &keep).await?;

    let results = live_results(ctx);
    let mut verdicts = BTreeMap::new();
    for probe in &wanted {
        let results: Vec<(String, &ProbeReport)> = results
            .iter()
            .filter_map(|(cluster, results)| {
                Some((cluster.clone(), results.find(&namespace, &probe.name)?))
            })
            .collect();
        let status = probe_status(&results, ctx.config.failure_threshold_percent);
        let current = existing
            .iter()
            .find(|p| p.name_any() == probe.name)
            .and_then(|p| p.status.clone());
        if status_worth_writing(current.as_ref(), &status, ctx.config.resync) {
            let patch = json!({
                "apiVersion": DNSHealthCheckProbe::api_version(&()),
                "kind": DNSHealthCheckProbe::kind(&()),
                "status": status,
            });
            api.patch_status(&probe.name, &apply_params(), &Patch::Apply(patch))
                .await?;
        }
        verdicts.insert(probe.spec.address.clone(), status.healthy);
    }
    Ok(apply_health(root_host, requested, &verdicts, published))
}

/// The probe results of every cluster heard from within the heartbeat timeout, by cluster.
fn live_results(ctx: &Context) -> Vec<(String, ClusterResults)> {
    let now = (ctx.clock)();
    let mut by_cluster: BTreeMap<String, Vec<Arc<ProbeResults>>> = BTreeMap::new();
    for shard in ctx.caches.probe_results.state() {
        by_cluster
            .entry(shard.namespace().unwrap_or_default())
            .or_default()
            .push(shard);
    }
    by_cluster
        .into_iter()
        .filter(|(cluster, _)| {
            let report = ctx
                .caches
                .reports
                .get(Some(cluster), meridian_api::names::CLUSTER_REPORT);
            let heard = ctx.last_heard(cluster, report.as_deref());
            heard.is_some() && silence(heard, now, ctx.config.heartbeat_timeout).is_none()
        })
        .map(|(cluster, shards)| (cluster, ClusterResults::new(shards)))
        .collect()
}

/// One cluster's probe results, over its shards.
struct ClusterResults {
    /// By shard index, of the current shard count.
    shards: BTreeMap<u32, Arc<ProbeResults>>,
    count: u32,
}

impl ClusterResults {
    fn new(shards: Vec<Arc<ProbeResults>>) -> Self {
        // Shard 0 always exists and says how many there are now; shards of an older split
        // (an agent growing or shrinking its split) are ignored until rewritten.
        let count = shards
            .iter()
            .find(|s| s.spec.shard == 0)
            .map_or(1, |s| s.spec.shards);
        let shards = shards
            .into_iter()
            .filter(|s| s.spec.shards == count)
            .map(|s| (s.spec.shard, s))
            .collect();
        ClusterResults { shards, count }
    }

    fn find(&self, namespace: &str, probe: &str) -> Option<&ProbeReport> {
        let shard = self
            .shards
            .get(&probe_shard(namespace, probe, self.count))?;
        shard
            .spec
            .probes
            .iter()
            .find(|p| p.namespace == namespace && p.name == probe)
    }
}

/// A probe's status is rewritten when its findings change, and otherwise only to refresh
/// `lastCheckedAt` once per resync period.
fn status_worth_writing(
    current: Option<&DNSHealthCheckProbeStatus>,
    new: &DNSHealthCheckProbeStatus,
    refresh: std::time::Duration,
) -> bool {
    let Some(current) = current else {
        return true;
    };
    if !same_findings(current, new) {
        return true;
    }
    match (&current.last_checked_at, &new.last_checked_at) {
        (Some(old), Some(new)) => {
            new.0.duration_since(old.0).as_secs().max(0).unsigned_abs() > refresh.as_secs()
        }
        (None, Some(_)) => true,
        _ => false,
    }
}

/// The record's probes, from the cache.
fn probes_of(record: &DNSRecord, ctx: &Context) -> Vec<Arc<DNSHealthCheckProbe>> {
    let namespace = record.namespace();
    let name = record.name_any();
    ctx.caches
        .probes
        .state()
        .into_iter()
        .filter(|p| p.namespace() == namespace && p.labels().get(PROBE_RECORD_LABEL) == Some(&name))
        .collect()
}

/// Deletes the record's probes except `keep`.
async fn delete_probes(record: &DNSRecord, ctx: &Context, keep: &[&str]) -> Result<(), Error> {
    let api: Api<DNSHealthCheckProbe> =
        Api::namespaced(ctx.client.clone(), &record.namespace().unwrap_or_default());
    for stale in probes_of(record, ctx)
        .iter()
        .filter(|p| !keep.contains(&p.name_any().as_str()))
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        crate::delete_if_present(&api, &stale.name_any()).await?;
    }
    Ok(())
}

/// Owners of the root host's record besides this one, and this one.
fn domain_owners(zone: &[Endpoint], root_host: &str, owner: &str) -> Vec<String> {
    let registry = Registry::read(zone);
    let mut owners: Vec<String> = registry
        .ownership
        .iter()
        .filter(|(key, _): &(&RecordKey, _)| key.dns_name == root_host)
        .flat_map(|(_, owners)| owners.keys().cloned())
        .chain([owner.to_string()])
        .collect();
    owners.sort();
    owners.dedup();
    owners
}

async fn provider_failed(
    record: &DNSRecord,
    ctx: &Context,
    provider: &ZoneProvider,
    error: ProviderError,
) -> Result<Action, Error> {
    let message = format!("{}: {error}", provider.kind());
    let failing_before = record.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == conditions::READY && c.reason == reasons::PROVIDER_ERROR)
    });
    if !failing_before {
        ctx.notify(
            record,
            true,
            reasons::PROVIDER_ERROR,
            "Publish",
            message.clone(),
        )
        .await;
    }
    let health = record
        .spec
        .health_check
        .as_ref()
        .and_then(|_| health_as_before(record));
    write_status(
        record,
        ctx,
        None,
        (false, reasons::PROVIDER_ERROR, message),
        health.as_ref(),
        Vec::new(),
    )
    .await?;
    Err(Error::Provider(error))
}

/// Writes status. `published` is `None` when nothing changed at the provider (the endpoints
/// published before stay in status, since they stay in DNS).
async fn write_status(
    record: &DNSRecord,
    ctx: &Context,
    published: Option<&[Endpoint]>,
    (ready, reason, message): (bool, &str, String),
    health: Option<&HealthOutcome>,
    domain_owners: Vec<String>,
) -> Result<(), Error> {
    let mut status = record.status.clone().unwrap_or_default();
    if let Some(published) = published {
        status.endpoints = all_to_api(published);
        status.domain_owners = domain_owners;
    }
    status.observed_generation = record.metadata.generation;
    set_condition(
        &mut status.conditions,
        ConditionUpdate {
            type_: conditions::READY,
            status: ready,
            reason,
            message,
        },
        record.metadata.generation,
        &now(),
    );
    match health {
        Some(health) => set_condition(
            &mut status.conditions,
            ConditionUpdate {
                type_: conditions::HEALTHY,
                status: health.healthy,
                reason: health.reason,
                message: health.message.clone(),
            },
            record.metadata.generation,
            &now(),
        ),
        None => status.conditions.retain(|c| c.type_ != conditions::HEALTHY),
    }
    if record.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<DNSRecord> =
        Api::namespaced(ctx.client.clone(), &record.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": DNSRecord::api_version(&()),
        "kind": DNSRecord::kind(&()),
        "status": DNSRecordStatus { ..status },
    });
    api.patch_status(&record.name_any(), &apply_params(), &Patch::Apply(patch))
        .await?;
    Ok(())
}

/// The `Healthy` condition as status has it, for a pass that could not look at health.
fn health_as_before(record: &DNSRecord) -> Option<HealthOutcome> {
    let condition = record
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::HEALTHY)?;
    let reason = [
        health_reasons::HEALTHY,
        health_reasons::UNHEALTHY,
        health_reasons::NONE_HEALTHY,
        health_reasons::AWAITING,
    ]
    .into_iter()
    .find(|r| *r == condition.reason)?;
    Some(HealthOutcome {
        endpoints: Vec::new(),
        healthy: condition.status == "True",
        reason,
        message: condition.message.clone(),
    })
}

/// Removes this record's contribution from its zone, then lets the finalizer go.
async fn withdraw(record: &DNSRecord, ctx: &Context) -> Result<Action, Error> {
    let probes: Api<DNSHealthCheckProbe> =
        Api::namespaced(ctx.client.clone(), &record.namespace().unwrap_or_default());
    probes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{PROBE_RECORD_LABEL}={}", record.name_any())),
        )
        .await?;
    let Some(previous) = record
        .status
        .as_ref()
        .filter(|status| !status.endpoints.is_empty())
        .map(|status| all_to_engine(&status.endpoints))
    else {
        return Ok(Action::await_change());
    };
    let (_, provider, zone_id) = match zone_provider(record, ctx).await {
        Ok(found) => found,
        // The zone is gone: there is nowhere left to withdraw from.
        Err((_, reasons::ZONE_NOT_FOUND, _)) => return Ok(Action::await_change()),
        Err((_, _, message)) => return Err(Error::Waiting(message)),
    };
    let owner = owner_of(record);
    let current = provider.records(&zone_id).await?;
    let planned = plan(
        &PlanInput {
            owner: &owner,
            root_host: &record.spec.root_host,
            desired: &[],
            previous: Some(&previous),
        },
        &current,
    );
    let mut changes = planned.changes.clone();
    if ctx.config.distributed.is_some() {
        // Out of the host's member list and failure reports too.
        changes.append(shared_health::leave(
            &owner,
            &current,
            &record.spec.root_host,
        ));
    }
    if ctx.config.distributed.is_some() && !changes.is_empty() {
        let mark_name = last_modified_name(&record.spec.root_host);
        let mark = current
            .iter()
            .find(|e| e.dns_name == mark_name && e.record_type == RecordType::Txt);
        let base = record.spec.root_host.trim_start_matches("*.");
        let others_remain = Registry::read(&current)
            .ownership
            .iter()
            .any(|(key, owners)| {
                is_at_or_below(&key.dns_name, base) && owners.keys().any(|o| o != &owner)
            });
        match (mark, others_remain) {
            // The last owner leaves: its mark goes with it.
            (Some(mark), false) => changes.deletes.push(mark.clone()),
            (mark, true) => {
                move_mark(&mut changes, &mark_name, mark, &owner, ctx);
            }
            (None, false) => {}
        }
    }
    if !changes.is_empty() {
        provider.apply(&zone_id, &changes).await?;
        ctx.metrics.provider_call(provider.kind(), "ok");
    }
    tracing::info!(record = %record.name_any(), removed = planned.changes.deletes.len(), "withdrew records");
    Ok(Action::await_change())
}
