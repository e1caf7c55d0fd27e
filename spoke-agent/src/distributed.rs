//! Distributed mode: the shared DNSPolicy and DNSRecord controllers on a spoke, publishing this
//! cluster's branch of every policy into shared provider zones under its own owner ID. There
//! is no hub, no embedded nameserver and no Lease (one agent per cluster).

use std::sync::Arc;

use kube::Client;
use meridian_controllers::decide::shared_health::SharedProbes;
use meridian_controllers::zones::zone_provider::{ProviderCache, ProviderSettings};
use meridian_controllers::{
    Context, ControllerConfig, LocalCluster, reconcile::dns_policy, reconcile::dns_record,
};

/// Runs the controllers for `local` until the process ends, looking at each shared zone again
/// every `refresh`.
///
/// `probes` are the agent's probes of the hosts' addresses, for policies with a
/// `healthCheck` (health agreed through the zone); without them health is not checked.
pub async fn run(
    client: Client,
    local: LocalCluster,
    refresh: std::time::Duration,
    probes: Option<Arc<dyn SharedProbes>>,
    providers: ProviderSettings,
) -> anyhow::Result<()> {
    let ctx = context(client.clone(), local, refresh, probes, providers);
    run_with(client, ctx).await
}

/// The controllers' shared state for `local` (see [`run`]): what [`run_with`] runs on, and
/// what a caller may watch meanwhile (the host marks each look saw, for a per-cluster trace).
pub fn context(
    client: Client,
    local: LocalCluster,
    refresh: std::time::Duration,
    probes: Option<Arc<dyn SharedProbes>>,
    providers: ProviderSettings,
) -> Arc<Context> {
    let config = ControllerConfig {
        resync: refresh,
        distributed: Some(local),
        ..ControllerConfig::default()
    };
    let mut ctx = Context::new(
        client,
        ProviderCache::without_embedded().with_settings(providers),
        config,
    );
    ctx.shared_probes = probes;
    Arc::new(ctx)
}

/// Runs the controllers on `ctx` until the process ends.
pub async fn run_with(client: Client, ctx: Arc<Context>) -> anyhow::Result<()> {
    // One watch per kind for both controllers; they run until the process ends.
    let never = std::future::pending::<()>;
    tokio::join!(
        ctx.caches.reflect(client),
        dns_policy::run(ctx.clone(), never()),
        dns_record::run(ctx.clone(), never()),
    );
    Ok(())
}
