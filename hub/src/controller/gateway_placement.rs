//! Hub Gateways of class `kuadrant-multi-cluster-gateway-instance-per-cluster` → one
//! ManifestWork per placed cluster with the downstream Gateway and its TLS Secrets, and the
//! Meridian agent installed on each placed cluster with hub credentials scoped to that
//! cluster's namespace. A cluster that leaves the placement is withdrawn from DNS at once (the
//! DNSPolicy controller follows the same decisions) and its ManifestWork is deleted after the
//! grace period; at once when the ManagedCluster is gone or the hub Gateway is deleted.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use meridian_api::labels::PLACEMENT_LABEL;
use meridian_api::upstream::{
    ClusterManagementAddOn, Gateway, GatewayClass, MULTI_CLUSTER_GATEWAY_CLASS,
    ManagedClusterAddOn, ManifestWork,
};
use serde_json::{Value, json};

use crate::placement::{
    AGENT_WORK, DEFAULT_DOWNSTREAM_CLASS, GATEWAY_WORK_LABEL, LEAVING_SINCE, WorkFate,
    agent_hub_rbac, agent_kubeconfig, agent_work, gateway_label, gateway_work, gateway_work_name,
    tls_secret_names, work_fate,
};
use meridian_controllers::indexes;
use meridian_controllers::{Context, Error, apply_params, retry_after, with_finalizer};

pub const FINALIZER: &str = "meridian.dev/gateway-placement";
const CONTROLLER: &str = "gatewayplacement";
/// Lifetime of the agents' hub tokens; they are renewed at half-life.
const AGENT_TOKEN_SECONDS: i64 = 24 * 3600;
/// Annotation on the agent's ManifestWork: when its token was issued (RFC 3339).
const TOKEN_ISSUED: &str = "meridian.dev/token-issued";
/// Annotation on the agent's ManifestWork: a digest of the hub RBAC it was installed with.
const RBAC_REVISION: &str = "meridian.dev/rbac-revision";

/// What placement needs besides what every reconcile shares.
#[derive(Debug)]
pub struct PlacementContext {
    pub shared: Arc<Context>,
    /// How to install the agent on placed clusters; `None` leaves agents to the operator.
    pub agent: Option<AgentInstall>,
    /// How long a cluster that left a placement keeps its Gateway (DNS no longer points at
    /// it; clients holding old answers drain).
    pub withdrawal_grace: Duration,
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
    pub image: String,
}

/// Whether the hub handles this Gateway (its class is the multi-cluster class).
pub fn is_multi_cluster(gateway: &Gateway) -> bool {
    gateway.spec.gateway_class_name == MULTI_CLUSTER_GATEWAY_CLASS
}

pub async fn reconcile(gateway: Arc<Gateway>, ctx: Arc<PlacementContext>) -> Result<Action, Error> {
    if !is_multi_cluster(&gateway) {
        return Ok(Action::await_change());
    }
    with_finalizer(
        gateway,
        &ctx.shared,
        CONTROLLER,
        FINALIZER,
        |gateway| {
            let ctx = &ctx;
            async move { place(&gateway, ctx).await }
        },
        |gateway| {
            let ctx = &ctx;
            async move { unplace(&gateway, ctx).await }
        },
    )
    .await
}

pub fn error_policy(gateway: Arc<Gateway>, error: &Error, ctx: Arc<PlacementContext>) -> Action {
    retry_after(&*gateway, error, &ctx.shared, CONTROLLER)
}

fn works_api(ctx: &PlacementContext) -> Api<ManifestWork> {
    Api::all(ctx.client.clone())
}

/// The downstream class: the `downstreamClass` key of a ConfigMap the GatewayClass names as
/// parameters, else `istio`. Also marks the GatewayClass Accepted.
async fn downstream_class(gateway: &Gateway, ctx: &PlacementContext) -> Result<String, Error> {
    let classes: Api<GatewayClass> = Api::all(ctx.client.clone());
    let Some(class) = classes.get_opt(&gateway.spec.gateway_class_name).await? else {
        return Ok(DEFAULT_DOWNSTREAM_CLASS.to_string());
    };
    accept_class(&class, ctx).await?;
    let Some(parameters) = &class.spec.parameters_ref else {
        return Ok(DEFAULT_DOWNSTREAM_CLASS.to_string());
    };
    if parameters.kind != "ConfigMap" {
        return Ok(DEFAULT_DOWNSTREAM_CLASS.to_string());
    }
    let namespace = parameters.namespace.clone().unwrap_or_default();
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    Ok(config_maps
        .get_opt(&parameters.name)
        .await?
        .and_then(|c| c.data?.get("downstreamClass").cloned())
        .unwrap_or_else(|| DEFAULT_DOWNSTREAM_CLASS.to_string()))
}

async fn accept_class(class: &GatewayClass, ctx: &PlacementContext) -> Result<(), Error> {
    let accepted = class.status.as_ref().is_some_and(|s| {
        meridian_api::conditions::condition_status(&s.conditions, "Accepted") == Some(true)
    });
    if accepted {
        return Ok(());
    }
    let api: Api<GatewayClass> = Api::all(ctx.client.clone());
    let patch = json!({
        "apiVersion": GatewayClass::api_version(&()),
        "kind": GatewayClass::kind(&()),
        "status": { "conditions": [{
            "type": "Accepted",
            "status": "True",
            "reason": "Accepted",
            "message": "handled by Meridian's hub: one Gateway per placed cluster",
            "lastTransitionTime": meridian_controllers::now(),
            "observedGeneration": class.metadata.generation,
        }]},
    });
    api.patch_status(&class.name_any(), &apply_params(), &Patch::Apply(patch))
        .await?;
    Ok(())
}

async fn place(gateway: &Gateway, ctx: &PlacementContext) -> Result<Action, Error> {
    let namespace = gateway.namespace().unwrap_or_default();
    let name = gateway.name_any();
    let decided = match gateway.labels().get(PLACEMENT_LABEL) {
        Some(placement) => {
            indexes::decided_clusters(&ctx.caches.decisions.state(), &namespace, placement)
        }
        None => BTreeSet::new(),
    };
    // A cluster gone from OCM gets no work.
    let placed: BTreeSet<String> = decided
        .into_iter()
        .filter(|cluster| ctx.caches.clusters.get(None, cluster).is_some())
        .collect();

    // Clusters that left first (DNS withdraws them at once; marking them is one write each):
    // the work stays for the grace period, then goes.
    let label = format!("{GATEWAY_WORK_LABEL}={}", gateway_label(&namespace, &name));
    let mut next_look = ctx.config.resync;
    for work in works_api(ctx)
        .list(&ListParams::default().labels(&label))
        .await?
        .items
    {
        let cluster = work.namespace().unwrap_or_default();
        let exists = ctx.caches.clusters.get(None, &cluster).is_some();
        let since = work.annotations().get(LEAVING_SINCE).cloned();
        let api = Api::<ManifestWork>::namespaced(ctx.client.clone(), &cluster);
        match work_fate(
            placed.contains(&cluster),
            exists,
            since.as_deref(),
            (ctx.clock)(),
            ctx.withdrawal_grace,
        ) {
            WorkFate::Keep => {
                if since.is_some() {
                    // Placed again: forget that it was leaving.
                    let patch = json!({ "metadata": { "annotations": { LEAVING_SINCE: null } } });
                    api.patch(&work.name_any(), &Default::default(), &Patch::Merge(patch))
                        .await?;
                }
            }
            WorkFate::MarkLeaving => {
                tracing::info!(%cluster, gateway = %name, grace = ?ctx.withdrawal_grace, "cluster left the placement: withdrawn from DNS; its Gateway stays for the grace period");
                ctx.notify(
                    gateway,
                    false,
                    "ClusterLeaving",
                    "Withdraw",
                    format!("{cluster} left the placement: withdrawn from DNS; its Gateway is removed after {:?}", ctx.withdrawal_grace),
                )
                .await;
                let patch = json!({ "metadata": { "annotations": { LEAVING_SINCE: (ctx.clock)().to_string() } } });
                api.patch(&work.name_any(), &Default::default(), &Patch::Merge(patch))
                    .await?;
                next_look = next_look.min(ctx.withdrawal_grace);
            }
            WorkFate::Wait(left) => next_look = next_look.min(left + Duration::from_millis(100)),
            WorkFate::Delete => {
                tracing::info!(%cluster, gateway = %name, "removing the Gateway's ManifestWork");
                api.delete(&work.name_any(), &DeleteParams::default())
                    .await?;
            }
        }
    }

    let class = downstream_class(gateway, ctx).await?;
    let secrets_api: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut secrets = Vec::new();
    for secret in tls_secret_names(gateway) {
        if let Some(secret) = secrets_api.get_opt(&secret).await? {
            secrets.push(secret);
        }
    }
    for cluster in &placed {
        let work = gateway_work(gateway, &class, &secrets, cluster);
        Api::<ManifestWork>::namespaced(ctx.client.clone(), cluster)
            .patch(
                &gateway_work_name(&namespace, &name),
                &apply_params(),
                &Patch::Apply(work),
            )
            .await?;
        install_agent(cluster, ctx).await?;
    }
    Ok(Action::requeue(next_look))
}

/// Deletes every ManifestWork of the Gateway at once.
async fn unplace(gateway: &Gateway, ctx: &PlacementContext) -> Result<Action, Error> {
    let label = format!(
        "{GATEWAY_WORK_LABEL}={}",
        gateway_label(
            &gateway.namespace().unwrap_or_default(),
            &gateway.name_any()
        )
    );
    for work in works_api(ctx)
        .list(&ListParams::default().labels(&label))
        .await?
        .items
    {
        Api::<ManifestWork>::namespaced(ctx.client.clone(), &work.namespace().unwrap_or_default())
            .delete(&work.name_any(), &DeleteParams::default())
            .await?;
    }
    Ok(Action::await_change())
}

/// Installs (or refreshes) the agent on `cluster`: hub RBAC scoped to the cluster namespace,
/// a token for it, and the ManifestWork carrying the agent.
async fn install_agent(cluster: &str, ctx: &PlacementContext) -> Result<(), Error> {
    let Some(install) = &ctx.agent else {
        return Ok(());
    };
    let works = Api::<ManifestWork>::namespaced(ctx.client.clone(), cluster);
    let rbac = agent_hub_rbac(cluster);
    // A hub upgrade that changes the agents' RBAC reinstalls them.
    let rbac_revision = meridian_dns::shortcode::shortcode(&json!(rbac).to_string(), 8);
    if let Some(existing) = works.get_opt(AGENT_WORK).await? {
        let fresh = existing
            .annotations()
            .get(TOKEN_ISSUED)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .is_some_and(|issued| {
                (ctx.clock)().duration_since(issued).as_secs() < AGENT_TOKEN_SECONDS / 2
            });
        let same_rbac = existing.annotations().get(RBAC_REVISION) == Some(&rbac_revision);
        if fresh && same_rbac {
            return Ok(());
        }
    }
    for object in rbac {
        apply_dynamic(ctx, object).await?;
    }
    register_addon(cluster, ctx).await?;
    let token = Api::<ServiceAccount>::namespaced(ctx.client.clone(), cluster)
        .create_token_request(
            AGENT_WORK,
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(AGENT_TOKEN_SECONDS),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await?
        .status
        .and_then(|s| s.token)
        .unwrap_or_default();
    let kubeconfig = agent_kubeconfig(&install.server_url, &install.ca_pem, &token, cluster);
    let mut work = agent_work(cluster, &kubeconfig, &install.image);
    work["metadata"]["annotations"] = json!({
        TOKEN_ISSUED: (ctx.clock)().to_string(),
        RBAC_REVISION: rbac_revision,
    });
    works
        .patch(AGENT_WORK, &apply_params(), &Patch::Apply(work))
        .await?;
    Ok(())
}

/// Meridian as an OCM addon: the ClusterManagementAddOn, and a ManagedClusterAddOn in the
/// cluster's namespace saying where the agent is installed.
async fn register_addon(cluster: &str, ctx: &PlacementContext) -> Result<(), Error> {
    let addon = json!({
        "apiVersion": ClusterManagementAddOn::api_version(&()),
        "kind": ClusterManagementAddOn::kind(&()),
        "metadata": { "name": "meridian" },
        "spec": { "addOnMeta": {
            "displayName": "Meridian",
            "description": "Multi-cluster DNS load balancing; the agent reports Gateways and probes health.",
        } },
    });
    Api::<ClusterManagementAddOn>::all(ctx.client.clone())
        .patch("meridian", &apply_params(), &Patch::Apply(addon))
        .await?;
    let installed = json!({
        "apiVersion": ManagedClusterAddOn::api_version(&()),
        "kind": ManagedClusterAddOn::kind(&()),
        "metadata": { "name": "meridian", "namespace": cluster },
        "spec": { "installNamespace": crate::placement::AGENT_NAMESPACE },
    });
    Api::<ManagedClusterAddOn>::namespaced(ctx.client.clone(), cluster)
        .patch("meridian", &apply_params(), &Patch::Apply(installed))
        .await?;
    Ok(())
}

/// Applies an object of any kind; cluster-scoped when its metadata has no namespace.
async fn apply_dynamic(ctx: &PlacementContext, object: Value) -> Result<(), Error> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let kind = object["kind"].as_str().unwrap_or_default();
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, kind));
    let api: Api<DynamicObject> = match object["metadata"]["namespace"].as_str() {
        Some(namespace) => Api::namespaced_with(ctx.client.clone(), namespace, &resource),
        None => Api::all_with(ctx.client.clone(), &resource),
    };
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.patch(&name, &apply_params(), &Patch::Apply(object))
        .await?;
    Ok(())
}
