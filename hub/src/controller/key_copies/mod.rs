//! Delivers the keys of signed embedded zones to the agents that serve DNS, so they sign with
//! the keys every hub replica signs with. The hub copies every signed zone's keys but the KSK
//! into `meridian-dnssec-keys` in its own namespace
//! (`meridian_controllers::zones::dnssec_keys::copy_data`), with its signature over each DNSKEY set,
//! made again before it is half its validity old, and binds each cluster's agent to the chart's ClusterRole reading that one Secret by name
//! there (the binding is owned by the copy). Runs only when the hub's agents serve DNS
//! (`--agent-dns-listen`); otherwise no key is copied.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | ManagedClusters, ManagedZones, Secrets, the RoleBindings in the hub's namespace |
//! | **Triggered by** ([`triggers`]) | a new cluster; a zone turning signing on or off, a key Secret, the copy changed or deleted, the resync (signatures due) (the first cluster); a new copy (every cluster); a binding deleted or changed (its cluster) |
//! | **Gathers** | the signed embedded zones and their key Secrets, the copy, and the cluster's binding, from the caches |
//! | **Decides** | the copy's data (`copy_data`, pure) |
//! | **Writes** | the first cluster: the copy, only when its data differs; every cluster: its binding to it, once |

pub mod triggers;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use kube::runtime::controller::Action;
use meridian_api::kuadrant::ManagedZone;
use meridian_api::names::{DNSSEC_KEYS_SECRET, agent_zone_keys_binding};
use meridian_api::upstream::ManagedCluster;
use meridian_controllers::zones::dnssec_keys::{copy_data, keys_secret_name, signing_requested};
use meridian_controllers::{Context, Error, apply_params};
use serde_json::json;

use crate::placement::{AGENT_ZONE_KEYS, agent_subjects, binds_agent};

const CONTROLLER: &str = "dnssec-key-copies";

/// Runs the controller until `stop` resolves.
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let all = ctx.caches.clusters.store().clone();
    let requests = triggers::requests(&ctx.caches, ctx.config.hub_namespace.clone());
    super::run_light(CONTROLLER, all, requests, reconcile_cluster, ctx, stop).await;
}

/// Whether `zone` is an embedded zone to be signed (its keys go to the agents).
pub fn signed_embedded(zone: &ManagedZone) -> bool {
    zone.spec.dns_provider_secret_ref.is_none() && signing_requested(zone)
}

async fn reconcile_cluster(
    cluster: Arc<ManagedCluster>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    if !ctx.caches.listed() {
        return Err(Error::Waiting("the first list of zones and Secrets".into()));
    }
    let cluster = cluster.name_any();
    let namespace = super::cluster_copies::hub_namespace(&ctx)?.to_string();
    if super::cluster_copies::leads_fleet_step(ctx.caches.clusters.store(), &cluster) {
        deliver_copy(&ctx, &namespace).await?;
    }
    let Some(copy) = ctx.caches.secrets.get(Some(&namespace), DNSSEC_KEYS_SECRET) else {
        // No zone is signed yet, or the first cluster has not made the copy: its creation
        // wakes every cluster.
        return Ok(Action::requeue(ctx.config.next_resync()));
    };
    let binding = agent_zone_keys_binding(&cluster);
    // Owned by this copy: a binding owned by an earlier copy is about to be collected with it.
    let owned_by_copy = |binding: &RoleBinding| {
        binding
            .owner_references()
            .iter()
            .any(|owner| Some(&owner.uid) == copy.metadata.uid.as_ref())
    };
    // From the cache: a resync of every cluster reads nothing, and a binding deleted or
    // changed wakes its cluster.
    if !ctx
        .caches
        .role_bindings
        .get(Some(&namespace), &binding)
        .is_some_and(|b| owned_by_copy(&b) && binds_agent(b.subjects.as_deref(), &cluster))
    {
        let owner = OwnerReference {
            api_version: "v1".into(),
            kind: "Secret".into(),
            name: copy.name_any(),
            uid: copy.uid().unwrap_or_default(),
            ..OwnerReference::default()
        };
        let object = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {
                "name": binding,
                "namespace": namespace,
                "labels": { "app.kubernetes.io/managed-by": meridian_controllers::FIELD_MANAGER },
                "ownerReferences": [owner],
            },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": AGENT_ZONE_KEYS },
            "subjects": agent_subjects(&cluster),
        });
        Api::<RoleBinding>::namespaced(ctx.client.clone(), &namespace)
            .patch(&binding, &apply_params(), &Patch::Apply(object))
            .await?;
    }
    Ok(Action::requeue(ctx.config.next_resync()))
}

/// The fleet's part, done by the first cluster's reconcile: the copy of every signed
/// embedded zone's keys, with DNSKEY signatures made again when due.
async fn deliver_copy(ctx: &Context, namespace: &str) -> Result<(), Error> {
    let zones = ctx.caches.zones.state();
    let keys: Vec<(&ManagedZone, Arc<Secret>)> = zones
        .iter()
        .filter(|zone| signed_embedded(zone))
        .filter_map(|zone| {
            let secret = ctx.caches.secrets.get(
                Some(namespace),
                &keys_secret_name(&zone.namespace().unwrap_or_default(), &zone.name_any()),
            )?;
            Some((&**zone, secret))
        })
        .collect();
    let previous = ctx.caches.secrets.get(Some(namespace), DNSSEC_KEYS_SECRET);
    let now = (ctx.clock)().as_second().max(0) as u64;
    let data = copy_data(
        keys.iter().map(|(zone, secret)| (*zone, &**secret)),
        previous.as_deref(),
        now,
    );
    if super::cluster_copies::deliver(ctx, namespace, DNSSEC_KEYS_SECRET, &data, None).await? {
        // Names the zones, never a key.
        tracing::info!(zones = ?data.keys().collect::<Vec<_>>(), "delivered the keys of signed zones");
    }
    Ok(())
}
