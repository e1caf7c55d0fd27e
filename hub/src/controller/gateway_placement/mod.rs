//! Gateway placement: hub Gateways of class `kuadrant-multi-cluster-gateway-instance-per-cluster`
//! → the downstream Gateway and its TLS Secrets on each cluster its Placement chose, all of a
//! cluster's Gateways in one ManifestWork (its bundle, [`crate::gateway_bundle`]), and the
//! Meridian agent installed on each placed cluster with hub credentials scoped to that
//! cluster's namespace. The pass is the cluster's ([`cluster`]): one write per cluster at a
//! cold start, however many Gateways it has (a work per Gateway and cluster was 30,000 writes
//! at 3,000 clusters × 6,000 Gateways). A Gateway's own pass accepts its GatewayClass.
//!
//! A cluster that leaves a Gateway's placement is withdrawn from DNS at once (the DNSPolicy
//! controller follows the same decisions); the Gateway is marked leaving in its bundle and
//! leaves it after the grace period (so does a deleted Gateway, see [`deleted`]); every work of
//! the hub's goes at once when the ManagedCluster is gone. A Placement with no PlacementDecision
//! at all (OCM has not decided yet, or the Placement is gone) is not evidence: the Gateway's
//! parts stay as they are until there is one. Works of one Gateway each, as earlier hubs wrote
//! them, are handed over to the bundle without the spoke's objects leaving.
//!
//! Gateways carry no finalizer of the hub's: a deleted Gateway is found by its label once
//! neither the cache nor a list of every Gateway has it ([`deleted`]). A finalizer cost a write
//! per Gateway at a cold start (6,000 at 3,000 clusters), and a Gateway the hub no longer ran
//! for (uninstalled) could not be deleted. The one earlier hubs held is let go.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | Gateways, PlacementDecisions, ManagedClusters, Secrets, GatewayClasses, ConfigMaps, ManifestWorks, ListenerSets |
//! | **Triggered by** ([`triggers`]) | a cluster: joining OCM or changing its downstream class; a decision choosing it or letting it go; a change of a Gateway placed on it or held by its bundle, of such a Gateway's TLS Secret or ListenerSet; a GatewayClass or its parameters; a work of the hub's in its namespace changed or deleted by someone else; a Gateway it holds confirmed deleted. A Gateway: its own change, its class |
//! | **Gathers** ([`gather`], [`cluster`]) | the Gateways placed on the cluster (through the decisions grouped by cluster), its bundles and the earlier hubs' works, each Gateway's placed clusters, the fleet's downstream class, the TLS Secrets, the listeners of the ListenerSets it admits, from the caches only |
//! | **Decides** (`crate::gateway_bundle`, `crate::placement`, [`cluster::standing`], pure) | each Gateway's standing on the cluster (placed, left, as it is) and fate (keep, mark leaving, wait, drop), each cluster's downstream class, each Gateway's part, the parts' bundles (shared manifests once, under OCM's size limit, each Gateway staying where it is), the agent's RBAC and work |
//! | **Writes** ([`apply`], [`status`]) | bundles (only where they differ from the cache), the hand-over of earlier hubs' works, the agent's RBAC, token and addon registration when due; GatewayClass `Accepted`; Events; the finalizer earlier hubs held, let go |
//! | **Deletes** ([`deleted`], [`cluster`]) | bundles no Gateway needs; earlier hubs' works once handed over, or with their Gateway; every work of the hub's of a cluster gone from OCM |

mod apply;
mod cluster;
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
use meridian_api::upstream::{Gateway, MULTI_CLUSTER_GATEWAY_CLASS, ManagedCluster};

pub use apply::AgentInstalls;

use crate::placement::{LEGACY_GATEWAY_FINALIZER, legacy_finalizer_release};
use meridian_controllers::{Context, Error, counted, retry_after};

const CONTROLLER: &str = "gatewayplacement";
const CLUSTER_CONTROLLER: &str = "gatewaybundle";

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
    /// The work labels of Gateways a list of every Gateway confirmed deleted ([`deleted`]):
    /// their parts leave the clusters' bundles after the grace.
    pub gone: std::sync::RwLock<std::collections::HashSet<String>>,
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

/// Runs the controllers until `stop` resolves: the Gateways' (their class), the clusters'
/// (their bundles and agents), and the look for deleted Gateways.
pub async fn run(
    placement: Arc<PlacementContext>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let caches = placement.shared.caches.clone();
    let (wake, woken) = tokio::sync::mpsc::unbounded_channel();
    let stop = stop.shared();
    tokio::join!(
        meridian_controllers::runtime::caches::run_controller(
            caches.gateways.store().clone(),
            placement.shared.config.concurrency.placement,
            triggers::requests(&caches),
            reconcile,
            error_policy,
            placement.clone(),
            stop.clone(),
        ),
        meridian_controllers::runtime::caches::run_controller(
            caches.clusters.store().clone(),
            placement.shared.config.concurrency.placement,
            triggers::cluster_requests(&caches, woken),
            reconcile_cluster,
            cluster_error_policy,
            placement.clone(),
            stop.clone(),
        ),
        deleted::look_for_deleted_gateways(placement, wake, stop),
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

/// A Gateway's own pass: its GatewayClass accepted. What goes to its clusters is their pass
/// ([`cluster`]).
async fn place(gateway: &Gateway, ctx: &PlacementContext) -> Result<Action, Error> {
    let class = ctx
        .caches
        .gateway_classes
        .get(None, &gateway.spec.gateway_class_name);
    if let Some(class) = &class {
        status::accept_class(class, ctx).await?;
    }
    Ok(Action::await_change())
}

pub async fn reconcile_cluster(
    cluster: Arc<ManagedCluster>,
    ctx: Arc<PlacementContext>,
) -> Result<Action, Error> {
    counted(
        &*cluster,
        &ctx.shared,
        CLUSTER_CONTROLLER,
        cluster::place(&cluster, &ctx),
    )
    .await
}

pub fn cluster_error_policy(
    cluster: Arc<ManagedCluster>,
    error: &Error,
    ctx: Arc<PlacementContext>,
) -> Action {
    retry_after(&*cluster, error, &ctx.shared, CLUSTER_CONTROLLER)
}

/// Deletes every ManifestWork of the Gateway at once (a Gateway an earlier hub held).
async fn unplace(gateway: &Gateway, ctx: &PlacementContext) -> Result<Action, Error> {
    for work in gather::works_of(gateway, ctx) {
        apply::delete_work(&work, ctx).await?;
    }
    Ok(Action::await_change())
}
