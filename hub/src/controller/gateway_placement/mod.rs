//! Gateway placement: hub Gateways of class `kuadrant-multi-cluster-gateway-instance-per-cluster`
//! → one ManifestWork per placed cluster with the downstream Gateway and its TLS Secrets, and
//! the Meridian agent installed on each placed cluster with hub credentials scoped to that
//! cluster's namespace. A cluster that leaves the placement is withdrawn from DNS at once (the
//! DNSPolicy controller follows the same decisions) and its ManifestWork is deleted after the
//! grace period (so are a deleted Gateway's, see [`deleted`]); at once when the ManagedCluster
//! is gone. A Placement with no PlacementDecision at all (OCM has not decided yet, or the
//! Placement is gone) is not evidence: the Gateway's works stay as they are until there is one.
//!
//! Gateways carry no finalizer of the hub's: a deleted Gateway's works are found by their label
//! once neither the cache nor a list of every Gateway has it ([`deleted`]). A finalizer cost a
//! write per Gateway at a cold start (6,000 at 3,000 clusters), and a Gateway the hub no longer
//! ran for (uninstalled) could not be deleted. The one earlier hubs held is let go.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | Gateways, PlacementDecisions, ManagedClusters, Secrets, GatewayClasses, ConfigMaps, ManifestWorks, ListenerSets |
//! | **Triggered by** ([`triggers`]) | the Gateway; a decision of its Placement; a cluster joining or leaving OCM, or changing its downstream class; its TLS Secret; a GatewayClass or its parameters; a work of its changed or deleted by someone else; a ListenerSet naming it |
//! | **Gathers** ([`gather`]) | the placed clusters, the Gateway's works, the fleet's downstream class, the TLS Secrets, the listeners of the ListenerSets it admits, from the caches only |
//! | **Decides** (`crate::placement`, pure) | each work's fate (keep, mark leaving, wait, delete), each cluster's downstream class (its label, its ClusterClaim, the fleet's), the downstream Gateway's work (with its ListenerSets' copies), the agent's RBAC and work |
//! | **Writes** ([`apply`], [`status`]) | ManifestWorks (only where they differ from the cache), the agent's RBAC, token and addon registration when due; GatewayClass `Accepted`; Events; the finalizer earlier hubs held, let go |
//! | **Deletes** ([`deleted`]) | the works of deleted Gateways (gone from the cache and from a list of them), marked leaving, then removed after the grace: looked at on start, after a Gateway's deletion or a relist, when a grace ends, once per resync |

mod apply;
mod deleted;
mod gather;
mod status;
pub mod triggers;

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use meridian_api::upstream::{Gateway, MULTI_CLUSTER_GATEWAY_CLASS};

pub use apply::AgentInstalls;

use crate::placement::{
    LEGACY_GATEWAY_FINALIZER, cluster_downstream_class, gateway_work, gateway_work_name,
    legacy_finalizer_release, work_fate,
};
use meridian_controllers::{Context, Error, counted, retry_after};

const CONTROLLER: &str = "gatewayplacement";

/// What placement needs besides what every reconcile shares.
#[derive(Debug)]
pub struct PlacementContext {
    pub shared: Arc<Context>,
    /// How to install the agent on placed clusters; `None` leaves agents to the operator.
    pub agent: Option<AgentInstall>,
    /// How long a cluster that left a placement keeps its Gateway (DNS no longer points at
    /// it; clients holding old answers drain).
    pub withdrawal_grace: Duration,
    /// The installs of agents under way, one per cluster at a time.
    pub agent_installs: AgentInstalls,
}

impl std::ops::Deref for PlacementContext {
    type Target = Context;

    fn deref(&self) -> &Context {
        &self.shared
    }
}

/// What the agent's install needs: where the hub is for the agents, and the image.
#[derive(Debug, Clone)]
pub struct AgentInstall {
    pub server_url: String,
    /// The hub's CA, PEM.
    pub ca_pem: String,
    pub image: crate::placement::AgentImage,
    /// Whether and how the agents also answer DNS for the embedded zones.
    pub dns: Option<crate::placement::AgentDns>,
    /// The agent's arguments the hub's own settings give: its probe address policy and its
    /// namespace (where the agents read the copies it keeps for them).
    pub agent_args: Vec<String>,
    /// Who installs the agent on the spokes.
    pub delivery: AgentDelivery,
}

/// Who installs the agent on the spokes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentDelivery {
    /// OCM's addon manager, from the template the hub writes (see [`crate::addon`]).
    AddOn(crate::addon::AddonInstall),
    /// The hub, with a ManifestWork per cluster carrying a token it mints (a fleet without
    /// OCM's addon manager).
    Work,
}

/// Whether the hub handles this Gateway (its class is the multi-cluster class).
pub fn is_multi_cluster(gateway: &Gateway) -> bool {
    gateway.spec.gateway_class_name == MULTI_CLUSTER_GATEWAY_CLASS
}

/// Runs the controller until `stop` resolves.
pub async fn run(
    placement: Arc<PlacementContext>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let all = placement.shared.caches.gateways.store().clone();
    let requests = triggers::requests(&placement.shared.caches);
    let stop = stop.shared();
    tokio::join!(
        meridian_controllers::runtime::caches::run_controller(
            all,
            placement.shared.config.concurrency.placement,
            requests,
            reconcile,
            error_policy,
            placement.clone(),
            stop.clone(),
        ),
        deleted::remove_works_of_deleted_gateways(placement, stop),
    );
}

pub async fn reconcile(gateway: Arc<Gateway>, ctx: Arc<PlacementContext>) -> Result<Action, Error> {
    if gateway
        .finalizers()
        .iter()
        .any(|f| f == LEGACY_GATEWAY_FINALIZER)
    {
        return counted(
            &*gateway,
            &ctx.shared,
            CONTROLLER,
            release_legacy_finalizer(&gateway, &ctx),
        )
        .await;
    }
    // A Gateway being deleted is left to [`deleted`], which removes its works once it is gone.
    if !is_multi_cluster(&gateway) || gateway.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    counted(&*gateway, &ctx.shared, CONTROLLER, place(&gateway, &ctx)).await
}

/// Lets go of the finalizer an earlier hub put on `gateway`: a Gateway being deleted loses its
/// works first, as that hub would have done; any other is placed on its next pass, which the
/// change this makes brings.
async fn release_legacy_finalizer(
    gateway: &Gateway,
    ctx: &PlacementContext,
) -> Result<Action, Error> {
    if gateway.meta().deletion_timestamp.is_some() {
        unplace(gateway, ctx).await?;
    }
    let Some(patch) = legacy_finalizer_release(gateway.finalizers()) else {
        return Ok(Action::await_change());
    };
    Api::<Gateway>::namespaced(ctx.client.clone(), &gateway.namespace().unwrap_or_default())
        .patch(
            &gateway.name_any(),
            &PatchParams::default(),
            &Patch::Json::<()>(patch),
        )
        .await
        .map_err(|error| match error {
            // A failed test is 422 (409 on older API servers).
            kube::Error::Api(status) if status.code == 409 || status.code == 422 => {
                Error::Stale(status.message)
            }
            other => other.into(),
        })?;
    tracing::info!(gateway = %gateway.name_any(), namespace = ?gateway.namespace(), "let go of the finalizer an earlier hub held");
    Ok(Action::await_change())
}

pub fn error_policy(gateway: Arc<Gateway>, error: &Error, ctx: Arc<PlacementContext>) -> Action {
    retry_after(&*gateway, error, &ctx.shared, CONTROLLER)
}

/// Gather → decide → apply → status.
async fn place(gateway: &Gateway, ctx: &PlacementContext) -> Result<Action, Error> {
    let seen = gather::gather(gateway, ctx);
    let now = (ctx.clock)();

    // Clusters that left first (DNS withdraws them at once; marking them is one write each):
    // the work stays for the grace period, then goes.
    let mut next_look = ctx.config.next_resync();
    if seen.undecided && !seen.works.is_empty() {
        // Fail static: no decision is no evidence, so every work stays as it is (none marked
        // leaving, none written) until OCM decides.
        tracing::info!(gateway = %gateway.name_any(), works = seen.works.len(), "its Placement has no decision yet; its works stay as they are");
    }
    for work in &seen.works {
        let cluster = work.namespace().unwrap_or_default();
        let fate = work_fate(
            seen.placed.contains(&cluster) || seen.undecided,
            ctx.caches.clusters.get(None, &cluster).is_some(),
            work.annotations()
                .get(crate::placement::LEAVING_SINCE)
                .map(String::as_str),
            now,
            ctx.withdrawal_grace,
        );
        if let Some(look) = apply::settle(gateway, work, fate, ctx).await? {
            next_look = next_look.min(look);
        }
    }

    if let Some(class) = &seen.class {
        status::accept_class(class, ctx).await?;
    }
    let work_name = gateway_work_name(
        &gateway.namespace().unwrap_or_default(),
        &gateway.name_any(),
    );
    for cluster in &seen.placed {
        let (class, refused) = cluster_downstream_class(
            ctx.caches.clusters.get(None, cluster).as_deref(),
            &seen.downstream_class,
        );
        if let Some(refused) = refused {
            tracing::warn!(gateway = %gateway.name_any(), %cluster, %class, "{refused}");
            let note = format!("{refused}; its downstream Gateway takes {class}");
            ctx.notify(gateway, true, "InvalidDownstreamClass", "Place", note)
                .await;
        }
        // Fail static: while ListenerSets cannot be read, a work that carries copies of some
        // stays as it is rather than lose them.
        let carries_sets = || {
            ctx.caches
                .works
                .get(Some(cluster), &work_name)
                .is_some_and(|work| {
                    work.spec
                        .workload
                        .manifests
                        .iter()
                        .any(|m| m["kind"] == "ListenerSet")
                })
        };
        if seen.sets_readable || !carries_sets() {
            let work = gateway_work(
                gateway,
                &class,
                &seen.tls_secrets,
                &seen.set_listeners,
                cluster,
            );
            apply::work(cluster, &work_name, work, ctx).await?;
        } else {
            tracing::warn!(gateway = %gateway.name_any(), %cluster, "ListenerSets cannot be read; the work keeps its copies as they are");
        }
        if let Some(look) = apply::install_agent(cluster, ctx).await? {
            next_look = next_look.min(look);
        }
    }
    // Works of this Gateway under another name (an earlier hub's) on clusters still placed:
    // handed over to the work above once it is applied, without removing what they applied.
    for legacy in seen.works.iter().filter(|work| {
        work.name_any() != work_name && seen.placed.contains(&work.namespace().unwrap_or_default())
    }) {
        if let Some(look) = apply::hand_over(legacy, &work_name, ctx).await? {
            next_look = next_look.min(look);
        }
    }
    Ok(Action::requeue(next_look))
}

/// Deletes every ManifestWork of the Gateway at once (a Gateway an earlier hub held).
async fn unplace(gateway: &Gateway, ctx: &PlacementContext) -> Result<Action, Error> {
    for work in gather::works_of(gateway, ctx) {
        apply::delete_work(&work, ctx).await?;
    }
    Ok(Action::await_change())
}
