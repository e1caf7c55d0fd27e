//! Health before publishing: on the hub, the record's probes (written for the agents) and the
//! clusters' verdicts aggregated into each probe's status; in distributed mode, agreement
//! through the zone. Both leave out the leaves the fleet finds failing.

use std::collections::BTreeMap;

use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use meridian_api::kuadrant::{
    DNSHealthCheckProbe, DNSHealthCheckProbeStatus, DNSRecord, HealthCheck,
};
use meridian_api::meridian::ProbeReport;
use meridian_dns::model::Endpoint;
use meridian_dns::tree::RecordTree;
use serde_json::json;

use crate::decide::health::{
    HealthOutcome, PROBE_RECORD_LABEL, apply_health, probe_status, same_findings, wanted_probes,
};
use crate::decide::shared_health;
use crate::{Context, Error, apply_params};

use super::gather::{live_results, probes_of};

/// What this cluster publishes of a host after agreeing on health through the zone, the
/// changes to the shared health records, and notes for status.
pub(super) struct AgreedHealth {
    pub(super) endpoints: Vec<Endpoint>,
    pub(super) changes: meridian_dns::changes::Changes,
    pub(super) notes: Vec<String>,
    /// Every address of the host the fleet agrees is failing (for the shared tiers).
    pub(super) down: std::collections::BTreeSet<String>,
    /// This cluster's addresses left out for it.
    pub(super) withdrawn: std::collections::BTreeSet<String>,
}

/// Distributed mode: probes the host's addresses from here (with the check's headers),
/// updates this cluster's failure reports, and leaves out its own addresses the fleet agrees
/// are failing (`crate::decide::shared_health`).
pub(super) async fn agree_on_health(
    record: &DNSRecord,
    ctx: &Context,
    (check, probes): (&HealthCheck, &dyn shared_health::SharedProbes),
    failing: &std::collections::BTreeSet<String>,
    owner: &str,
    desired: Vec<Endpoint>,
    current: &[Endpoint],
) -> Result<AgreedHealth, Error> {
    let root_host = &record.spec.effective_root_host().unwrap_or_default();
    let own = shared_health::host_addresses(&desired, root_host);
    let mut notes = Vec::new();
    if let Err(problem) = probe_host(record, ctx, (check, probes), &desired, current) {
        notes.push(format!("health checks wait: {problem}"));
    }
    let verdict = shared_health::decide(
        owner,
        root_host,
        &own,
        failing,
        current,
        ctx.config.failure_threshold_percent,
    );
    let endpoints = without_withdrawn(root_host, desired, &verdict.withdrawn);
    notes.extend(verdict.notes);
    Ok(AgreedHealth {
        endpoints,
        changes: verdict.changes,
        notes,
        down: verdict.down,
        withdrawn: verdict.withdrawn,
    })
}

/// This cluster's branch without the leaves the fleet agreed to withdraw.
pub(super) fn without_withdrawn(
    root_host: &str,
    desired: Vec<Endpoint>,
    withdrawn: &std::collections::BTreeSet<String>,
) -> Vec<Endpoint> {
    if withdrawn.is_empty() {
        return desired;
    }
    let down = withdrawn
        .iter()
        .map(|address| (address.clone(), meridian_dns::tree::Health::Unhealthy))
        .collect();
    match RecordTree::from_records(root_host, desired).prune(&down) {
        meridian_dns::tree::Pruned::Endpoints(endpoints) => endpoints,
        // Nothing of this cluster's is healthy: its branch goes, the others serve.
        meridian_dns::tree::Pruned::NoHealthyLeaf => Vec::new(),
    }
}

/// Points this cluster's probes of `record` at the addresses of its host
/// ([`shared_health::addresses_to_probe`] of the host's records, `zone`, and its own
/// `desired` ones), with the check's headers. `Err`: the headers cannot be read, and nothing
/// is probed (a probe without them would report a failure that is not the backend's).
pub(super) fn probe_host(
    record: &DNSRecord,
    ctx: &Context,
    (check, probes): (&HealthCheck, &dyn shared_health::SharedProbes),
    desired: &[Endpoint],
    zone: &[Endpoint],
) -> Result<(), String> {
    let root_host = &record.spec.effective_root_host().unwrap_or_default();
    let record_key = crate::object_key(
        "DNSRecord",
        record.namespace().as_deref(),
        &record.name_any(),
    );
    let addresses = shared_health::addresses_to_probe(zone, desired, root_host);
    let headers = header_problem(record, check, ctx);
    let named = headers
        .as_ref()
        .ok()
        .map(|headers| headers.clone().into_iter().collect::<Vec<_>>());
    probes.watch(&record_key, root_host, &addresses, check, named.as_deref());
    headers.map(drop)
}

/// The headers of the check's header Secret, or why there are none to send (missing, or
/// refused by [`crate::decide::health::secret_headers`]).
pub(super) fn header_problem(
    record: &DNSRecord,
    check: &HealthCheck,
    ctx: &Context,
) -> Result<BTreeMap<String, String>, String> {
    let Some(reference) = &check.additional_headers_ref else {
        return Ok(BTreeMap::new());
    };
    let secret = ctx
        .caches
        .secrets
        .get(record.namespace().as_deref(), &reference.name)
        .ok_or_else(|| format!("header Secret {} not found", reference.name))?;
    crate::decide::health::secret_headers(&secret)
}

/// Keeps one probe per leaf of the record, turns the live clusters' results into each probe's
/// status, and prunes the record by them.
pub(super) async fn check_health(
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
    let root_host = &record.spec.effective_root_host().unwrap_or_default();
    // A record its zone cannot publish (the zone does not hold its domain, or the record is
    // outside it) gets no probe: the fleet probes nothing for what is never published.
    let publishable = ctx
        .caches
        .zones
        .get(Some(&namespace), &record.spec.managed_zone.name)
        .is_some_and(|zone| {
            ctx.zone_claim(&zone).holds() && crate::decide::zone_claims::in_zone(root_host, &zone)
        });
    let leaves = if publishable {
        RecordTree::from_records(root_host.as_str(), requested.to_vec()).leaf_addresses()
    } else {
        Vec::new()
    };
    // A tree moved into a routing delegate is probed as the host its clients ask for, which
    // its gateways serve: the parent zone's (of this namespace) that names the record's zone.
    let probe_host = delegated_from(record, root_host, ctx).unwrap_or_else(|| root_host.clone());
    // Addresses no probe may reach (loopback, the metadata service, the admin's ranges): no
    // probe is written for them, and they count as failing, so they are never published
    // behind a health check.
    let gateways =
        crate::decide::health::reported_gateway_addresses(&ctx.caches.reports.state(), &namespace);
    let refusal = |leaf: &str| -> Option<String> {
        if let Some(refusal) = ctx.config.probe_policy.refuses_leaf(leaf) {
            return Some(refusal.to_string());
        }
        (!gateways.contains(&leaf.to_ascii_lowercase()))
            .then(|| format!("no cluster reports it as a Gateway address of namespace {namespace}"))
    };
    let (leaves, refused): (Vec<String>, Vec<String>) =
        leaves.into_iter().partition(|leaf| refusal(leaf).is_none());
    // A wildcard is probed through the hostnames of the routes on its listener; a leaf with
    // none reported has nothing to be probed through and is published unprobed (it waited
    // for a verdict that never came before), and status says so. Only the reports of the
    // clusters that speak for the record count: another cluster's agent cannot choose the
    // hosts this tenant's leaves are probed through.
    let route_hosts = if probe_host.starts_with("*.") {
        let voters = super::gather::voters(record, ctx);
        let reports: Vec<_> = ctx
            .caches
            .reports
            .state()
            .into_iter()
            .filter(|report| {
                report
                    .metadata
                    .namespace
                    .as_ref()
                    .is_some_and(|cluster| voters.contains(cluster))
            })
            .collect();
        crate::decide::health::wildcard_probe_hosts(&reports, &namespace, &probe_host)
    } else {
        BTreeMap::new()
    };
    let unprobed: Vec<&String> = if probe_host.starts_with("*.") {
        leaves
            .iter()
            .filter(|leaf| !route_hosts.contains_key(&leaf.to_ascii_lowercase()))
            .collect()
    } else {
        Vec::new()
    };
    let wanted = wanted_probes(&name, &probe_host, &leaves, check, &route_hosts);
    let seal_key = ctx.probe_seal_key().await?;
    let existing = probes_of(record, ctx);
    let api: Api<DNSHealthCheckProbe> = Api::namespaced(ctx.client.clone(), &namespace);
    let owner = record
        .controller_owner_ref(&())
        .expect("a stored record has a UID");
    for probe in &wanted {
        // Agents run only probes the hub sealed (see `crate::decide::probe_seal`).
        let seal = crate::decide::probe_seal::seal(
            &seal_key,
            &namespace,
            &probe.name,
            crate::decide::probe_seal::Owner {
                record: &name,
                uid: &owner.uid,
            },
            &probe.spec,
        );
        let current = existing.iter().find(|p| p.name_any() == probe.name);
        if current.is_some_and(|p| {
            p.spec == probe.spec
                && p.annotations()
                    .get(crate::decide::probe_seal::SEAL_ANNOTATION)
                    == Some(&seal)
        }) {
            continue;
        }
        let object = json!({
            "apiVersion": DNSHealthCheckProbe::api_version(&()),
            "kind": DNSHealthCheckProbe::kind(&()),
            "metadata": {
                "name": probe.name,
                "namespace": namespace,
                "labels": { PROBE_RECORD_LABEL: name },
                "annotations": { crate::decide::probe_seal::SEAL_ANNOTATION: seal },
                "ownerReferences": [owner],
            },
            "spec": probe.spec,
        });
        api.patch(&probe.name, &apply_params(), &Patch::Apply(object))
            .await?;
    }
    let keep: Vec<&str> = wanted.iter().map(|p| p.name.as_str()).collect();
    delete_probes(record, ctx, &keep).await?;

    let results = live_results(record, ctx);
    let mut probe_verdicts = Vec::new();
    let mut judged = Vec::new();
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
        probe_verdicts.push((probe.spec.address.as_str(), status.healthy));
        judged.push(Judged {
            probe,
            results,
            before: current.and_then(|c| c.healthy),
        });
    }
    let mut verdicts = crate::decide::health::leaf_verdicts(probe_verdicts);
    for (address, verdict) in &verdicts {
        let probes: Vec<&Judged> = judged
            .iter()
            .filter(|judged| &judged.probe.spec.address == address)
            .collect();
        note_failover(ctx, record, address, *verdict, &probes);
    }
    for leaf in &unprobed {
        verdicts.insert((*leaf).clone(), Some(true));
    }
    for leaf in &refused {
        verdicts.insert(leaf.clone(), Some(false));
    }
    let mut outcome = apply_health(root_host, requested, &verdicts, published);
    if let Err(problem) = header_problem(record, check, ctx) {
        // The agents wait for headers the hub will not copy: say why.
        outcome
            .message
            .push_str(&format!("; probes wait for their headers: {problem}"));
    }
    if !unprobed.is_empty() {
        let leaves: Vec<&str> = unprobed.iter().map(|leaf| leaf.as_str()).collect();
        outcome.message.push_str(&format!(
            "; not health-checked, published as they are: {} (no cluster reports an accepted HTTPRoute with a hostname under {probe_host} on its listener)",
            leaves.join(", ")
        ));
    }
    if !refused.is_empty() {
        let why: Vec<String> = refused
            .iter()
            .filter_map(|leaf| Some(format!("{leaf} ({})", refusal(leaf)?)))
            .collect();
        outcome.message.push_str(&format!(
            "; not probed, so never published: {}",
            why.join(", ")
        ));
    }
    Ok(outcome)
}

/// One probe of a leaf, judged: the clusters' results and the verdict its status held before.
struct Judged<'a> {
    probe: &'a crate::decide::health::WantedProbe,
    results: Vec<(String, &'a ProbeReport)>,
    before: Option<bool>,
}

/// Times a failover's detection when a leaf's verdict turns unhealthy: from when its last
/// host began failing (a wildcard's leaf fails when all its hosts do), each host's failure
/// dated by the earliest first failure among the clusters that see it. A verdict that turns
/// healthy again calls off a failover that had not reached the zone.
fn note_failover(
    ctx: &Context,
    record: &DNSRecord,
    address: &str,
    verdict: Option<bool>,
    probes: &[&Judged],
) {
    let record_key = crate::object_key(
        "DNSRecord",
        record.namespace().as_deref(),
        &record.name_any(),
    );
    if verdict != Some(false) {
        ctx.record_memory.failovers.called_off(&record_key, address);
        return;
    }
    if probes.iter().all(|judged| judged.before == Some(false)) {
        return; // judged unhealthy before this process looked: its start is unknown
    }
    let host_failing_since = |judged: &&Judged| {
        let interval = meridian_api::duration::parse_duration(&judged.probe.spec.interval)
            .unwrap_or(std::time::Duration::from_secs(30));
        judged
            .results
            .iter()
            .filter(|(_, result)| !result.healthy)
            .filter_map(|(_, result)| {
                crate::decide::health::failing_since(
                    result.last_checked_at.as_ref().map(|t| t.0),
                    result.consecutive_failures,
                    interval,
                )
            })
            .min()
    };
    let Some(first_failure) = probes.iter().filter_map(host_failing_since).max() else {
        return;
    };
    let zone = ctx
        .caches
        .zones
        .get(
            record.namespace().as_deref(),
            &record.spec.managed_zone.name,
        )
        .map(|z| z.spec.domain_name.clone())
        .unwrap_or_default();
    ctx.record_memory.failovers.detected(
        &ctx.metrics,
        &record_key,
        address,
        first_failure,
        (ctx.clock)(),
        &zone,
    );
}

/// A probe's status is rewritten when its findings change, and otherwise only to refresh
/// `lastCheckedAt` once per resync period.
pub(super) fn status_worth_writing(
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

/// Deletes the record's probes except `keep`.
pub(super) async fn delete_probes(
    record: &DNSRecord,
    ctx: &Context,
    keep: &[&str],
) -> Result<(), Error> {
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

/// The host a record's tree was moved from, when it is the delegated half of a policy's record
/// (named `<record>-delegated`, beside the half the parent zone keeps, of the same policy):
/// that half's host, which the Gateways serve ([`meridian_dns::delegation::client_host`]).
/// Read from the records, not the zones' current spec, so a delegation kept after the zone
/// stopped naming its delegate is still probed as what clients ask for.
fn delegated_from(record: &DNSRecord, root_host: &str, ctx: &Context) -> Option<String> {
    let namespace = record.namespace().unwrap_or_default();
    let name = record.name_any();
    let parent_name = name.strip_suffix(crate::decide::desired::DELEGATED_SUFFIX)?;
    let parent = ctx.caches.records.get(Some(&namespace), parent_name)?;
    let policy = |r: &DNSRecord| r.labels().get(crate::POLICY_LABEL).cloned();
    if policy(&parent).is_none() || policy(&parent) != policy(record) {
        return None;
    }
    let zone = ctx
        .caches
        .zones
        .get(Some(&namespace), &parent.spec.managed_zone.name)?;
    let delegate = ctx
        .caches
        .zones
        .get(Some(&namespace), &record.spec.managed_zone.name)?;
    meridian_dns::delegation::client_host(
        root_host,
        &zone.spec.domain_name,
        &delegate.spec.domain_name,
        &parent.spec.effective_root_host()?,
    )
}
