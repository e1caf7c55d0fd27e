//! Router-shard DNS: for each ManagedZone, one DNSRecord `router-<code>` per shard suffix the
//! zone holds, built from the live clusters' reports (`crate::routers`, pure). The DNSRecord
//! controller publishes them like any other record; a suffix no cluster reports any more loses
//! its record.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | ManagedZones, ClusterReports, ManagedClusters, heartbeat Leases, DNSRecords |
//! | **Triggered by** ([`triggers`]) | the zone; a report whose router shards changed; a look after the heartbeat timeout (silent clusters expire without an event) |
//! | **Gathers** | live clusters' shards and every zone ([`shards_of`]) from the caches |
//! | **Decides** | one record per shard suffix (`crate::routers::shard_dns`, pure) |
//! | **Writes** | `router-<code>` DNSRecords where they differ; deletes the ones no cluster serves |

pub mod triggers;

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::api::{Api, ListParams, Patch};
use kube::runtime::controller::Action;
use kube::{Client, Resource, ResourceExt};
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_api::meridian::ClusterReport;
use meridian_api::upstream::ManagedCluster;
use serde_json::json;

use crate::routers::{FleetZone, ROUTER_DNS_LABEL, ShardDns, ShardSighting, shard_dns};
use meridian_controllers::decide::convert::{all_to_api, all_to_engine};
use meridian_controllers::decide::desired::{ZoneRef, silence};
use meridian_controllers::{Context, Error, apply_params, delete_if_present};

const CONTROLLER: &str = "router-dns";

/// The shards of every live cluster, and every ManagedZone (oldest first), read from the API
/// server (for `meridian-hub routers`); a cluster is live when its report is recent.
pub async fn fleet_shards(
    client: &Client,
    reports: &[Arc<ClusterReport>],
    heartbeat_timeout: std::time::Duration,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<Vec<ShardDns>, kube::Error> {
    async fn listed<K>(client: &Client) -> Result<Vec<Arc<K>>, kube::Error>
    where
        K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let items = Api::<K>::all(client.clone())
            .list(&ListParams::default())
            .await?
            .items;
        Ok(items.into_iter().map(Arc::new).collect())
    }
    let clusters: Vec<Arc<ManagedCluster>> = listed(client).await?;
    let zones: Vec<Arc<ManagedZone>> = listed(client).await?;
    let live = |report: &ClusterReport| {
        let reported_at = report.spec.reported_at.as_ref().map(|t| t.0);
        reported_at.is_some() && silence(reported_at, now, heartbeat_timeout).is_none()
    };
    Ok(shards_of(reports, &clusters, &zones, live))
}

/// The shards of every cluster that is `live` and still in OCM, in every ManagedZone (oldest
/// first).
pub fn shards_of(
    reports: &[Arc<ClusterReport>],
    clusters: &[Arc<ManagedCluster>],
    zones: &[Arc<ManagedZone>],
    live: impl Fn(&ClusterReport) -> bool,
) -> Vec<ShardDns> {
    let clusters: BTreeMap<String, &ManagedCluster> =
        clusters.iter().map(|c| (c.name_any(), &**c)).collect();
    let mut sightings = Vec::new();
    for report in reports {
        let cluster = report.namespace().unwrap_or_default();
        // A cluster gone from OCM, or silent, is gone for DNS.
        let Some(managed) = clusters.get(&cluster).filter(|_| live(report)) else {
            continue;
        };
        for shard in &report.spec.router_shards {
            sightings.push(ShardSighting {
                cluster: cluster.clone(),
                cluster_id: report.spec.cluster_id.clone(),
                labels: managed.labels().clone(),
                shard: shard.clone(),
            });
        }
    }
    let mut zones: Vec<&Arc<ManagedZone>> = zones.iter().collect();
    zones.sort_by_key(|z| (z.metadata.creation_timestamp.as_ref().map(|t| t.0), z.uid()));
    let zones: Vec<FleetZone> = zones
        .iter()
        .filter(|z| z.metadata.deletion_timestamp.is_none())
        .map(|z| FleetZone {
            namespace: z.namespace().unwrap_or_default(),
            zone: ZoneRef {
                name: z.name_any(),
                domain: z.spec.domain_name.clone(),
            },
        })
        .collect();
    shard_dns(&sightings, &zones)
}

/// Runs the controller until `stop` resolves.
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let all = ctx.caches.zones.store().clone();
    let requests = triggers::requests(&ctx.caches);
    super::run_light(CONTROLLER, all, requests, reconcile_zone, ctx, stop).await;
}

async fn reconcile_zone(zone: Arc<ManagedZone>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.caches.listed() {
        return Err(Error::Waiting("the first list of reports".into()));
    }
    let namespace = zone.namespace().unwrap_or_default();
    let now = (ctx.clock)();
    // While the fleet brake is on, the clusters it holds are live: the hub assumes it is the
    // one cut off (`meridian_controllers::decide::silence`).
    let brake = meridian_controllers::reconcile::fleet_brake::current(&ctx);
    let live = |report: &ClusterReport| {
        let heard = ctx.last_heard(&report.namespace().unwrap_or_default(), Some(report));
        heard.is_some()
            && silence(heard, now, ctx.config.heartbeat_timeout)
                .is_none_or(|silent_for| brake.holds(silent_for))
    };
    let shards = shards_of(
        &ctx.caches.reports.state(),
        &ctx.caches.clusters.state(),
        &ctx.caches.zones.state(),
        live,
    );
    let here = |s: &&ShardDns| {
        s.zone.as_ref() == Some(&(namespace.clone(), zone.name_any())) && !s.endpoints.is_empty()
    };
    let records: Api<DNSRecord> = Api::namespaced(ctx.client.clone(), &namespace);
    let owner = zone
        .controller_owner_ref(&())
        .expect("a stored zone has a UID");
    let existing: Vec<Arc<DNSRecord>> = ctx
        .caches
        .records
        .state()
        .into_iter()
        .filter(|r| r.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|r| r.labels().contains_key(ROUTER_DNS_LABEL))
        .collect();
    for shard in shards.iter().filter(here) {
        let endpoints = all_to_api(&shard.endpoints);
        let unchanged = existing.iter().any(|r| {
            r.name_any() == shard.record_name
                && r.spec.managed_zone.name == zone.name_any()
                && all_to_engine(&r.spec.endpoints) == all_to_engine(&endpoints)
        });
        if unchanged {
            continue;
        }
        let record = json!({
            "apiVersion": DNSRecord::api_version(&()),
            "kind": DNSRecord::kind(&()),
            "metadata": {
                "name": shard.record_name,
                "namespace": namespace,
                "labels": { ROUTER_DNS_LABEL: shard.record_name },
                "ownerReferences": [owner],
            },
            "spec": {
                "rootHost": format!("*.{}", shard.suffix),
                "managedZone": { "name": zone.name_any() },
                "endpoints": endpoints,
            },
        });
        records
            .patch(&shard.record_name, &apply_params(), &Patch::Apply(record))
            .await?;
    }
    for stale in existing.iter().filter(|r| {
        r.spec.managed_zone.name == zone.name_any()
            && r.metadata.deletion_timestamp.is_none()
            && !shards
                .iter()
                .filter(here)
                .any(|s| s.record_name == r.name_any())
    }) {
        tracing::info!(record = %stale.name_any(), "no cluster serves this router shard any more");
        delete_if_present(&records, &stale.name_any()).await?;
    }
    // Silent clusters expire without an event.
    Ok(Action::requeue(
        ctx.config.next_resync_within(ctx.config.heartbeat_timeout),
    ))
}
