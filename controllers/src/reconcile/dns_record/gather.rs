//! What publishing a record reads before it asks the provider anything: the zone and its
//! provider (credentials from the cache), and the live clusters' probe results.

use std::sync::Arc;

use std::collections::BTreeMap;

use kube::ResourceExt;
use meridian_api::kuadrant::{DNSHealthCheckProbe, DNSRecord, ManagedZone};
use meridian_api::meridian::{ProbeReport, ProbeResults, probe_shard};
use meridian_api::upstream::{Gateway, ListenerSet, PlacementDecision};

use super::reasons;
use crate::Context;
use crate::decide::desired::silence;
use crate::decide::health::PROBE_RECORD_LABEL;
use crate::runtime::indexes;
use crate::zones::zone_provider::ZoneProvider;

/// The zone and its provider, or the reason (for status) why there is none.
pub(super) async fn zone_provider(
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
    let (provider, zone_id) = provider_of(&zone, ctx)
        .await
        .map_err(|(reason, message)| (zone_name.clone(), reason, message))?;
    Ok((zone, provider, zone_id))
}

/// A ManagedZone's provider and the zone's ID there, or the reason why there is none.
pub(super) async fn provider_of(
    zone: &ManagedZone,
    ctx: &Context,
) -> Result<(ZoneProvider, String), (&'static str, String)> {
    let namespace = zone.namespace().unwrap_or_default();
    let zone_name = zone.name_any();
    let domain = zone.spec.domain_name.clone();
    let claim = ctx.zone_claim(zone);
    if !claim.holds() {
        return Err((claim.reason(), format!("ManagedZone {zone_name}: {claim}")));
    }
    let secret_name = zone
        .provider_secret_name()
        .map_err(|message| (reasons::PROVIDER_UNAVAILABLE, message))?;
    let provider = match secret_name {
        None => ctx.providers.embedded(&domain).ok_or_else(|| {
            (
                reasons::PROVIDER_UNAVAILABLE,
                format!(
                    "ManagedZone {zone_name} has no dnsProviderSecretRef, and only the hub serves zones itself"
                ),
            )
        })?,
        Some(secret_name) => {
            let Some(secret) = ctx.caches.secrets.get(Some(&namespace), secret_name) else {
                return Err((
                    reasons::PROVIDER_UNAVAILABLE,
                    format!("Secret {secret_name} not found"),
                ));
            };
            ctx.providers
                .for_secret(&secret, &domain)
                .await
                .map_err(|e| (reasons::PROVIDER_UNAVAILABLE, e.to_string()))?
        }
    };
    let zone_id = provider
        .zone_id(&domain, zone.spec.id.as_deref())
        .await
        .map_err(|e| (reasons::PROVIDER_ERROR, e.to_string()))?;
    Ok((provider, zone_id))
}

/// The probe results of `record`'s voters heard from within the heartbeat timeout, by
/// cluster. Only a namespace that is a ManagedCluster's votes: ProbeResults and a report in
/// any other namespace (written by whoever may write there) say nothing about the fleet; and
/// of those, only the clusters the record is placed on ([`indexes::record_voters`]).
pub(super) fn live_results(record: &DNSRecord, ctx: &Context) -> Vec<(String, ClusterResults)> {
    let now = (ctx.clock)();
    let voters = voters(record, ctx);
    let mut by_cluster: BTreeMap<String, Vec<Arc<ProbeResults>>> = BTreeMap::new();
    for shard in ctx.caches.probe_results.state() {
        by_cluster
            .entry(shard.namespace().unwrap_or_default())
            .or_default()
            .push(shard);
    }
    by_cluster
        .into_iter()
        .filter(|(cluster, _)| voters.contains(cluster))
        .filter(|(cluster, _)| {
            let report = ctx.report_of(cluster);
            let heard = ctx.last_heard(cluster, report.as_deref());
            heard.is_some() && silence(heard, now, ctx.config.heartbeat_timeout).is_none()
        })
        .map(|(cluster, shards)| (cluster, ClusterResults::new(shards)))
        .collect()
}

/// The ManagedClusters that speak for `record` ([`indexes::record_voters`]): their probe
/// results vote on its leaves, and their reports say which route hosts a wildcard's leaves
/// are probed through. A namespace that is not a ManagedCluster's is never one.
pub(super) fn voters(record: &DNSRecord, ctx: &Context) -> std::collections::BTreeSet<String> {
    let namespace = record.namespace();
    let policy = record
        .labels()
        .get(crate::POLICY_LABEL)
        .map(|name| ctx.caches.policies.get(namespace.as_deref(), name));
    // Only the Gateways and decisions the voters can come from, by key: this runs for every
    // health-checked record of the fleet.
    // A policy for a ListenerSet answers for the ListenerSet's Gateway.
    let sets: Vec<Arc<ListenerSet>> = match &policy {
        Some(Some(policy)) if policy.spec.target_ref.is_listener_set() => {
            let (set_namespace, name) = indexes::policy_target(policy);
            ctx.caches
                .listener_sets
                .get(Some(set_namespace), name)
                .into_iter()
                .collect()
        }
        _ => Vec::new(),
    };
    let gateways: Vec<Arc<Gateway>> = match &policy {
        Some(Some(policy)) => indexes::policy_gateway(policy, &sets)
            .and_then(|(gateway_namespace, name)| {
                ctx.caches.gateways.get(Some(&gateway_namespace), &name)
            })
            .into_iter()
            .collect(),
        Some(None) => Vec::new(),
        None => ctx
            .caches
            .gateways
            .state()
            .into_iter()
            .filter(|gateway| gateway.metadata.namespace == namespace)
            .collect(),
    };
    let decisions: Vec<Arc<PlacementDecision>> = gateways
        .iter()
        .filter_map(|gateway| indexes::gateway_placement(gateway))
        .flat_map(|(namespace, placement)| {
            ctx.caches
                .decisions
                .group(&indexes::group_key(namespace, placement))
        })
        .collect();
    indexes::record_voters(
        record,
        policy.flatten().as_deref(),
        &sets,
        &gateways,
        &decisions,
    )
    .into_iter()
    .filter(|cluster| ctx.caches.clusters.get(None, cluster).is_some())
    .collect()
}

/// One cluster's probe results, over its shards.
pub(super) struct ClusterResults {
    /// By shard index, of the current shard count.
    shards: BTreeMap<u32, Arc<ProbeResults>>,
    count: u32,
}

impl ClusterResults {
    pub(super) fn new(shards: Vec<Arc<ProbeResults>>) -> Self {
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

    pub(super) fn find(&self, namespace: &str, probe: &str) -> Option<&ProbeReport> {
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

/// The record's probes, from the cache.
pub(super) fn probes_of(record: &DNSRecord, ctx: &Context) -> Vec<Arc<DNSHealthCheckProbe>> {
    let namespace = record.namespace();
    let name = record.name_any();
    ctx.caches
        .probes
        .state()
        .into_iter()
        .filter(|p| p.namespace() == namespace && p.labels().get(PROBE_RECORD_LABEL) == Some(&name))
        .collect()
}

/// Meridian's records published in `record`'s zone now: every DNSRecord of the zone's
/// `status.endpoints`, from the cache (what the plan guard measures a plan against).
pub(super) fn zone_published_count(record: &DNSRecord, ctx: &Context) -> usize {
    // Borrowed comparisons: this walks every record of the hub for each record published.
    ctx.caches
        .records
        .state()
        .iter()
        .filter(|r| {
            r.metadata.namespace == record.metadata.namespace
                && r.spec.managed_zone.name == record.spec.managed_zone.name
        })
        .filter_map(|r| r.status.as_ref())
        .map(|status| status.endpoints.len())
        .sum()
}
