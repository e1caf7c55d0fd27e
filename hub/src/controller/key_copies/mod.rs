//! Delivers the keys of signed embedded zones to the agents that serve DNS, so they sign with
//! the keys every hub replica signs with. An agent may read one Secret in its cluster's
//! namespace on the hub and no other: the hub copies every signed zone's key Secret into
//! `meridian-dnssec-keys` there (`meridian_controllers::dnssec_keys::copy_data`). Runs only when
//! the hub's agents serve DNS (`--agent-dns-listen`); otherwise no key leaves its namespace.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | ManagedClusters, ManagedZones, Secrets |
//! | **Triggered by** ([`triggers`]) | a new cluster; a zone turning signing on or off (every cluster); a key Secret (every cluster); a cluster's copy changed or deleted (that cluster) |
//! | **Gathers** | the signed embedded zones and their key Secrets, and the cluster's copy, from the cache |
//! | **Decides** | the copy's data (`copy_data`, pure) |
//! | **Writes** | the copy, only when its data differs |

pub mod triggers;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use meridian_api::kuadrant::ManagedZone;
use meridian_api::names::DNSSEC_KEYS_SECRET;
use meridian_api::upstream::ManagedCluster;
use meridian_controllers::dnssec_keys::{copy_data, keys_secret_name, signing_requested};
use meridian_controllers::{Context, Error, retry_after};

const CONTROLLER: &str = "dnssec-key-copies";

/// Runs the controller until `stop` resolves.
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let all = ctx.caches.clusters.store().clone();
    let requests = triggers::requests(&ctx.caches);
    meridian_controllers::caches::run_controller(
        all,
        ctx.config.concurrency.light,
        requests,
        reconcile,
        error_policy,
        ctx,
        stop,
    )
    .await;
}

/// Whether `zone` is an embedded zone to be signed (its keys go to the agents).
pub fn signed_embedded(zone: &ManagedZone) -> bool {
    zone.spec.dns_provider_secret_ref.is_none() && signing_requested(zone)
}

pub async fn reconcile(cluster: Arc<ManagedCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciled(CONTROLLER);
    if !ctx.caches.listed() {
        return Err(Error::Waiting("the first list of zones and Secrets".into()));
    }
    let namespace = cluster.name_any();
    let zones = ctx.caches.zones.state();
    let keys: Vec<(String, String, Arc<Secret>)> = zones
        .iter()
        .filter(|zone| signed_embedded(zone))
        .filter_map(|zone| {
            let zone_namespace = zone.namespace().unwrap_or_default();
            let secret = ctx
                .caches
                .secrets
                .get(Some(&zone_namespace), &keys_secret_name(&zone.name_any()))?;
            Some((zone_namespace, zone.name_any(), secret))
        })
        .collect();
    let data = copy_data(
        keys.iter()
            .map(|(namespace, zone, secret)| (namespace.as_str(), zone.as_str(), &**secret)),
    );
    if super::cluster_copies::deliver(&ctx, &namespace, DNSSEC_KEYS_SECRET, &data, None).await? {
        // Names the zones, never a key.
        tracing::info!(cluster = %namespace, zones = ?data.keys().collect::<Vec<_>>(), "delivered the keys of signed zones");
    }
    Ok(Action::requeue(ctx.config.resync))
}

pub fn error_policy(cluster: Arc<ManagedCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(&*cluster, error, &ctx, CONTROLLER)
}
