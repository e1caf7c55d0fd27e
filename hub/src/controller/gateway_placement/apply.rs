//! What placing a Gateway writes: its works (only where the cache differs), the leaving
//! marks, and the agent's install when it is due.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DynamicObject, Patch, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::{Resource, ResourceExt};
use meridian_api::names::{
    DNSSEC_KEYS_SECRET, PROBE_HEADERS_READER, PROBE_HEADERS_SECRET, PROBE_SEAL_SECRET,
};
use meridian_api::upstream::{ClusterManagementAddOn, ManagedClusterAddOn, ManifestWork};
use serde_json::{Value, json};

use super::{AgentDelivery, AgentInstall, PlacementContext};
use crate::addon::{
    ADDON_NAME, AddonInstall, TEMPLATE_LABEL, addon_template, cluster_management_addon,
    is_available, managed_cluster_addon, template_name, template_resource,
};
use crate::placement::{
    AGENT_WORK, AgentLayout, LEGACY_AGENT_ROLE, agent_hub_rbac, agent_kubeconfig, agent_manifests,
    agent_work,
};
use meridian_api::labels::GATEWAY_BUNDLE_LABEL;
use meridian_controllers::runtime::applied::already_applied;
use meridian_controllers::{Error, apply_params, delete_if_present};

/// Lifetime of the agents' hub tokens; they are renewed at half-life.
const AGENT_TOKEN_SECONDS: i64 = 24 * 3600;
/// Annotation on the agent's ManifestWork: when its token was issued (RFC 3339).
const TOKEN_ISSUED: &str = "meridian.dev/token-issued";
/// Annotation on the agent's ManifestWork: a digest of what it was installed with besides its
/// token (the hub RBAC, the agent's manifests with its image, the hub's address and CA).
const AGENT_REVISION: &str = "meridian.dev/agent-revision";

fn works_api(ctx: &PlacementContext, cluster: &str) -> Api<ManifestWork> {
    Api::namespaced(ctx.client.clone(), cluster)
}

/// Applies a cluster's bundle `name` unless the cache shows it already there. A work of that
/// name the hub did not label as a bundle is someone else's: it is left alone.
pub async fn bundle(
    cluster: &str,
    name: &str,
    work: Value,
    ctx: &PlacementContext,
) -> Result<(), Error> {
    let current = ctx.caches.works.get(Some(cluster), name);
    if let Some(current) = &current
        && !current.labels().contains_key(GATEWAY_BUNDLE_LABEL)
    {
        return Err(Error::Waiting(format!(
            "ManifestWork {cluster}/{name} exists and is not the hub's bundle (no label {GATEWAY_BUNDLE_LABEL}): left alone"
        )));
    }
    if !already_applied(current.as_deref(), &work) {
        works_api(ctx, cluster)
            .patch(name, &apply_params(), &Patch::Apply(work))
            .await?;
    }
    Ok(())
}

/// How soon to look again while a work is handed over.
pub const HAND_OVER_RECHECK: Duration = Duration::from_secs(5);

/// Hands `legacy` (a Gateway's own work, as earlier hubs wrote them) over to the bundle `name`
/// holding the Gateway, in the same cluster namespace: once the work agent reports the bundle
/// applied, `legacy` is set to orphan what it applied and deleted, so the spoke's Gateway and
/// Secrets stay, owned by the bundle. Until then, returns when to look again.
pub async fn hand_over(
    legacy: &ManifestWork,
    name: &str,
    ctx: &PlacementContext,
) -> Result<Option<Duration>, Error> {
    let cluster = legacy.namespace().unwrap_or_default();
    let applied = ctx
        .caches
        .works
        .get(Some(&cluster), name)
        .is_some_and(|work| is_applied(&work));
    if !applied {
        return Ok(Some(HAND_OVER_RECHECK));
    }
    tracing::info!(%cluster, legacy = %legacy.name_any(), work = %name, "handing an earlier hub's ManifestWork over: orphaning what it applied, then deleting it");
    let api = works_api(ctx, &cluster);
    let orphan = json!({ "spec": { "deleteOption": {
        "propagationPolicy": "Orphan", "selectivelyOrphans": null,
    } } });
    api.patch(
        &legacy.name_any(),
        &Default::default(),
        &Patch::Merge(orphan),
    )
    .await?;
    delete_if_present(&api, &legacy.name_any()).await?;
    Ok(None)
}

/// Whether the work agent reports every manifest of `work`'s current generation applied.
fn is_applied(work: &ManifestWork) -> bool {
    work.status.as_ref().is_some_and(|status| {
        status.conditions.iter().any(|c| {
            c.type_ == "Applied"
                && c.status == "True"
                && (c.observed_generation.is_none()
                    || c.observed_generation == work.metadata.generation)
        })
    })
}

pub async fn delete_work(work: &ManifestWork, ctx: &PlacementContext) -> Result<(), Error> {
    delete_if_present(
        &works_api(ctx, &work.namespace().unwrap_or_default()),
        &work.name_any(),
    )
    .await
}

/// Installs (or refreshes) the agent on `cluster`: hub RBAC scoped to the cluster namespace,
/// a token for it, and the ManifestWork carrying the agent.
///
/// Every Gateway placed on a cluster asks for its agent, and at a cold start they ask
/// together, before the first install's work has reached the cache. One install per cluster
/// runs at a time, and it waits until the cache shows its work, so the Gateways after it find
/// the agent installed instead of installing it again (ten Gateways per cluster were ten
/// installs of nine writes each).
/// Returns when to look again, if sooner than the resync (an add-on install handing over).
pub async fn install_agent(
    cluster: &str,
    ctx: &PlacementContext,
) -> Result<Option<Duration>, Error> {
    let Some(install) = &ctx.agent else {
        return Ok(None);
    };
    if let AgentDelivery::AddOn(addon) = &install.delivery {
        return install_addon(cluster, install, addon, ctx).await;
    }
    let rbac = agent_hub_rbac(cluster, install.dns.is_some(), false);
    // A hub upgrade that changes the agents' RBAC, image or manifests, or the hub's address,
    // reinstalls them (rolls the agents) at once instead of at the next token renewal.
    let without_token = agent_kubeconfig(&install.server_url, &install.ca_pem, "", cluster);
    let revision = meridian_dns::shortcode::shortcode(
        &json!([
            rbac,
            agent_work(
                cluster,
                &without_token,
                &install.image,
                install.dns.as_ref(),
                &install.agent_args,
            )
        ])
        .to_string(),
        8,
    );
    let installing = ctx.agent_installs.of(cluster);
    let _one_at_a_time = installing.lock().await;
    if let Some(existing) = ctx.caches.works.get(Some(cluster), AGENT_WORK) {
        let fresh = existing
            .annotations()
            .get(TOKEN_ISSUED)
            .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
            .is_some_and(|issued| {
                (ctx.clock)().duration_since(issued).as_secs() < AGENT_TOKEN_SECONDS / 2
            });
        let same_revision = existing.annotations().get(AGENT_REVISION) == Some(&revision);
        if fresh && same_revision {
            return Ok(None);
        }
    }
    for object in rbac {
        if object["kind"] == "ClusterRoleBinding" {
            // The hub may create these and not change or delete them (its RBAC): what one
            // says never changes, so one that exists is left as it is.
            create_binding(ctx, object).await?;
        } else {
            apply_dynamic(ctx, object).await?;
        }
    }
    remove_legacy_identity(cluster, ctx).await?;
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
    let mut work = agent_work(
        cluster,
        &kubeconfig,
        &install.image,
        install.dns.as_ref(),
        &install.agent_args,
    );
    let issued = (ctx.clock)().to_string();
    work["metadata"]["annotations"] = json!({
        TOKEN_ISSUED: issued,
        AGENT_REVISION: revision,
    });
    Api::<ManifestWork>::namespaced(ctx.client.clone(), cluster)
        .patch(AGENT_WORK, &apply_params(), &Patch::Apply(work))
        .await?;
    let written = |work: &ManifestWork| work.annotations().get(TOKEN_ISSUED) == Some(&issued);
    if !ctx
        .caches
        .works
        .wait_for(Some(cluster), AGENT_WORK, written, AGENT_WORK_CACHED)
        .await
    {
        // The next Gateway of this cluster may install again; wasteful, not wrong.
        tracing::debug!(%cluster, "the agent's work has not reached the cache yet");
    }
    Ok(None)
}

/// How soon to look again while an add-on install has not taken over from the hub's own.
const ADDON_HAND_OVER_RECHECK: Duration = Duration::from_secs(10);

/// The agent as an OCM add-on on `cluster` (see [`crate::addon`]): the fleet's template and
/// ClusterManagementAddOn (once per process), the agent's hub identity and a
/// ManagedClusterAddOn asking for it here (once per cluster and process). An agent the hub
/// installed itself keeps running until OCM reports the add-on available; then its
/// ManifestWork (and with it that agent and its namespace) and its ServiceAccount (and with it
/// every token minted for it) go.
async fn install_addon(
    cluster: &str,
    install: &AgentInstall,
    addon: &AddonInstall,
    ctx: &PlacementContext,
) -> Result<Option<Duration>, Error> {
    ctx.agent_installs
        .addon_registered
        .get_or_try_init(|| register_addon_template(install, addon, ctx))
        .await?;
    let installing = ctx.agent_installs.of(cluster);
    let _one_at_a_time = installing.lock().await;
    if !ctx.agent_installs.is_installed(cluster) {
        for object in agent_hub_rbac(cluster, install.dns.is_some(), true) {
            apply_dynamic(ctx, object).await?;
        }
        remove_legacy_identity(cluster, ctx).await?;
        apply_dynamic(ctx, managed_cluster_addon(cluster)).await?;
        ctx.agent_installs.mark_installed(cluster);
    }
    if ctx.caches.works.get(Some(cluster), AGENT_WORK).is_none() {
        return Ok(None);
    }
    let available = Api::<ManagedClusterAddOn>::namespaced(ctx.client.clone(), cluster)
        .get_opt(ADDON_NAME)
        .await?
        .is_some_and(|addon| is_available(&addon));
    if !available {
        return Ok(Some(ADDON_HAND_OVER_RECHECK));
    }
    tracing::info!(%cluster, "the add-on agent is available: removing the agent the hub installed itself, and its ServiceAccount");
    delete_if_present(&works_api(ctx, cluster), AGENT_WORK).await?;
    delete_if_present(
        &Api::<ServiceAccount>::namespaced(ctx.client.clone(), cluster),
        AGENT_WORK,
    )
    .await?;
    Ok(None)
}

/// The fleet's part of the add-on: the template of this hub's agent, the
/// ClusterManagementAddOn pointing at it, and the removal of earlier hubs' templates that no
/// cluster's add-on still names (a rollout under way keeps its old template until a later hub
/// start).
async fn register_addon_template(
    install: &AgentInstall,
    addon: &AddonInstall,
    ctx: &PlacementContext,
) -> Result<(), Error> {
    let manifests = agent_manifests(
        AgentLayout::AddOn,
        &install.image,
        install.dns.as_ref(),
        &install.agent_args,
    );
    let template = addon_template(&manifests);
    let name = template_name(&manifests);
    apply_dynamic(ctx, template).await?;
    apply_dynamic(ctx, cluster_management_addon(&name, addon)).await?;
    tracing::info!(template = %name, ?addon, "the agent is an OCM add-on of this template");
    let templates = Api::<DynamicObject>::all_with(ctx.client.clone(), &template_resource());
    let named: std::collections::BTreeSet<String> =
        Api::<ManagedClusterAddOn>::all(ctx.client.clone())
            .list(&kube::api::ListParams::default().fields(&format!("metadata.name={ADDON_NAME}")))
            .await?
            .items
            .iter()
            .flat_map(templates_named)
            .collect();
    let ours = templates
        .list(&kube::api::ListParams::default().labels(TEMPLATE_LABEL))
        .await?;
    for old in ours.items {
        let old = old.name_any();
        if old != name && !named.contains(&old) {
            tracing::info!(template = %old, "removing an earlier agent template no cluster uses");
            delete_if_present(&templates, &old).await?;
        }
    }
    Ok(())
}

/// The templates a cluster's add-on names in its status: the one it should run and the one it
/// last ran.
fn templates_named(addon: &ManagedClusterAddOn) -> Vec<String> {
    let Some(status) = &addon.status else {
        return Vec::new();
    };
    let references = status
        .extra
        .get("configReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    references
        .iter()
        .filter(|reference| reference["resource"] == "addontemplates")
        .flat_map(|reference| {
            [
                reference["desiredConfig"]["name"].as_str(),
                reference["lastAppliedConfig"]["name"].as_str(),
                reference["name"].as_str(),
            ]
        })
        .flatten()
        .map(String::from)
        .collect()
}

/// How long an install waits for its work to reach the cache.
const AGENT_WORK_CACHED: Duration = Duration::from_secs(10);

/// One lock per cluster, held while its agent is installed; and whether the fleet-wide addon
/// has been applied by this process: each hub process applies it once, at its first install,
/// so an upgraded hub brings its own.
#[derive(Debug, Default)]
pub struct AgentInstalls {
    per_cluster:
        std::sync::Mutex<std::collections::HashMap<String, std::sync::Arc<tokio::sync::Mutex<()>>>>,
    addon_registered: tokio::sync::OnceCell<()>,
    /// Clusters whose add-on install (hub identity, ManagedClusterAddOn) this process wrote.
    addon_installed: std::sync::Mutex<std::collections::HashSet<String>>,
}

impl AgentInstalls {
    fn of(&self, cluster: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
        self.per_cluster
            .lock()
            .expect("no panics while the map is held")
            .entry(cluster.to_string())
            .or_default()
            .clone()
    }

    fn is_installed(&self, cluster: &str) -> bool {
        self.addon_installed
            .lock()
            .expect("no panics while the set is held")
            .contains(cluster)
    }

    fn mark_installed(&self, cluster: &str) {
        self.addon_installed
            .lock()
            .expect("no panics while the set is held")
            .insert(cluster.to_string());
    }
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
    // One object for the fleet: applied once per process, not once per cluster.
    ctx.agent_installs
        .addon_registered
        .get_or_try_init(|| async {
            Api::<ClusterManagementAddOn>::all(ctx.client.clone())
                .patch("meridian", &apply_params(), &Patch::Apply(addon))
                .await
                .map(|_| ())
        })
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

/// What earlier hubs kept in the cluster namespace for the agent: their own Roles for it (now
/// bindings of the chart's ClusterRoles) and the copies of the seal key, zone keys and probe
/// headers (now in the hub's namespace; the header copies were owned by their reader Role).
///
/// Only where an earlier hub left a trace the caches show: its agent work, or one of its
/// copies. Those hubs wrote the agent's Role just before its work, and copied the seal key to
/// every cluster before its header reader Role; the copies go here after the Roles. Elsewhere
/// the four deletes would each answer 404: 12,000 requests at a cold start of 3,000 clusters.
async fn remove_legacy_identity(cluster: &str, ctx: &PlacementContext) -> Result<(), Error> {
    let legacy_copies = [PROBE_SEAL_SECRET, DNSSEC_KEYS_SECRET, PROBE_HEADERS_SECRET];
    if !earlier_hub_may_have_been_here(
        ctx.caches.works.listed() && ctx.caches.secrets.listed(),
        ctx.caches.works.get(Some(cluster), AGENT_WORK).is_some(),
        legacy_copies
            .iter()
            .any(|copy| ctx.caches.secrets.get(Some(cluster), copy).is_some()),
    ) {
        return Ok(());
    }
    for role in [LEGACY_AGENT_ROLE, PROBE_HEADERS_READER] {
        delete_if_present(
            &Api::<RoleBinding>::namespaced(ctx.client.clone(), cluster),
            role,
        )
        .await?;
        delete_if_present(&Api::<Role>::namespaced(ctx.client.clone(), cluster), role).await?;
    }
    for copy in legacy_copies {
        if ctx.caches.secrets.get(Some(cluster), copy).is_some() {
            delete_if_present(
                &Api::<Secret>::namespaced(ctx.client.clone(), cluster),
                copy,
            )
            .await?;
        }
    }
    Ok(())
}

/// Whether an earlier hub's identity for the agent may remain in a cluster namespace: unless
/// the caches have been listed (an empty cache is no evidence), only where they show that hub's
/// agent work or one of its copies.
fn earlier_hub_may_have_been_here(
    caches_listed: bool,
    agent_work: bool,
    legacy_copy: bool,
) -> bool {
    !caches_listed || agent_work || legacy_copy
}

/// Creates a ClusterRoleBinding unless one of its name exists.
async fn create_binding(ctx: &PlacementContext, object: Value) -> Result<(), Error> {
    let binding: ClusterRoleBinding = serde_json::from_value(object)
        .map_err(|e| Error::Aborted(format!("the hub rendered a malformed binding: {e}")))?;
    let params = PostParams {
        field_manager: Some(meridian_controllers::FIELD_MANAGER.into()),
        ..Default::default()
    };
    match Api::<ClusterRoleBinding>::all(ctx.client.clone())
        .create(&params, &binding)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
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
