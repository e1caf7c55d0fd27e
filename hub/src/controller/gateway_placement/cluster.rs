//! A cluster's pass: the hub Gateways placed on it, in its bundle (see
//! [`crate::gateway_bundle`]), and its agent.
//!
//! Each Gateway the cluster's Placements chose, or its bundles or an earlier hub's works hold,
//! stands one of three ways ([`Standing`]): placed here (its part is written afresh), left (its
//! Placement decided otherwise, or it was deleted: marked leaving, removed after the grace), or
//! not to be decided now (its Placement has no decision, its Gateway is being deleted or unread,
//! its ListenerSets cannot be read): kept exactly as the bundle holds it. Fail static: only
//! evidence takes a Gateway off a spoke.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use meridian_api::labels::{GATEWAY_BUNDLE_LABEL, GATEWAY_WORK_LABEL, bundle_entries};
use meridian_api::upstream::{Gateway, ManagedCluster, ManifestWork};
use meridian_controllers::Error;
use meridian_controllers::runtime::indexes;

use super::{PlacementContext, apply, gather, is_multi_cluster};
use crate::gateway_bundle::{
    BUNDLE_LIMIT, Part, bundle_name, bundle_shard, cluster_bundles, held_parts, part_of_own_work,
};
use crate::placement::{
    LEAVING_SINCE, WorkFate, cluster_downstream_class, gateway_label, gateway_work, work_fate,
};

/// How a Gateway stands on a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Its Placement chose the cluster: its part is written as the Gateway says now.
    Placed,
    /// Its Placement decided without the cluster, or the Gateway is gone (a list confirmed it):
    /// it leaves after the grace.
    Left,
    /// Nothing may be decided about it now: its part stays as it is.
    AsItIs,
}

/// How the Gateway a part belongs to stands: `gateway` as the cache has it, whether a list of
/// every Gateway confirmed it gone, and, for one that is there, whether its Placement chose the
/// cluster (`None`: the Placement has no decision at all).
pub fn standing(gateway: Option<&Gateway>, confirmed_gone: bool, chose: Option<bool>) -> Standing {
    let Some(gateway) = gateway else {
        return if confirmed_gone {
            Standing::Left
        } else {
            Standing::AsItIs
        };
    };
    // A Gateway being deleted leaves once it is gone; one no longer of the multi-cluster class
    // keeps what it had (as before bundles).
    if gateway.metadata.deletion_timestamp.is_some() || !is_multi_cluster(gateway) {
        return Standing::AsItIs;
    }
    match chose {
        Some(true) => Standing::Placed,
        Some(false) => Standing::Left,
        None => Standing::AsItIs,
    }
}

/// What the cluster's works are now.
struct Works {
    /// Its bundles, by shard.
    bundles: BTreeMap<usize, Arc<ManifestWork>>,
    /// The works of one Gateway each that earlier hubs wrote, by the Gateway's label.
    own: BTreeMap<String, Vec<Arc<ManifestWork>>>,
}

fn works(cluster: &str, ctx: &PlacementContext) -> Works {
    let mut bundles = BTreeMap::new();
    let mut own: BTreeMap<String, Vec<Arc<ManifestWork>>> = BTreeMap::new();
    for work in ctx.caches.works.group(&indexes::cluster_group(cluster)) {
        if let Some(label) = work.labels().get(GATEWAY_WORK_LABEL) {
            own.entry(label.clone()).or_default().push(work.clone());
        } else if work.labels().contains_key(GATEWAY_BUNDLE_LABEL)
            && let Some(shard) = bundle_shard(&work.name_any())
        {
            bundles.insert(shard, work);
        }
    }
    Works { bundles, own }
}

/// How soon a cluster's pass looks again while the caches it reads have not been listed.
const UNLISTED_RECHECK: Duration = Duration::from_secs(1);

/// Whether every cache a cluster's pass reads has been listed: before, an empty one would read
/// as "no such Gateway, decision or work", and a bundle written from it would drop what it
/// holds.
fn listed(ctx: &PlacementContext) -> bool {
    let caches = &ctx.caches;
    caches.works.listed()
        && caches.gateways.listed()
        && caches.decisions.listed()
        && caches.clusters.listed()
        && caches.secrets.listed()
        && caches.listener_sets.listed()
        && caches.gateway_classes.listed()
        && caches.config_maps.listed()
}

/// Gather → decide → apply, for one cluster.
pub async fn place(cluster: &ManagedCluster, ctx: &PlacementContext) -> Result<Action, Error> {
    if !listed(ctx) {
        return Ok(Action::requeue(UNLISTED_RECHECK));
    }
    let name = cluster.name_any();
    let now = (ctx.clock)();
    let mut next_look = ctx.config.next_resync();
    let mut look_at = |after: Duration| next_look = next_look.min(after);

    let works = works(&name, ctx);
    let as_values: Vec<(usize, serde_json::Value)> = works
        .bundles
        .iter()
        .filter_map(|(shard, work)| Some((*shard, serde_json::to_value(&**work).ok()?)))
        .collect();
    let held = held_parts(
        &as_values
            .iter()
            .map(|(shard, work)| (*shard, work))
            .collect::<Vec<_>>(),
    );
    let own_parts: BTreeMap<String, Part> = works
        .own
        .iter()
        .filter_map(|(label, works)| {
            let work = works.first()?;
            let leaving = work.annotations().get(LEAVING_SINCE).cloned();
            Some((
                label.clone(),
                part_of_own_work(label, &serde_json::to_value(&**work).ok()?, leaving),
            ))
        })
        .collect();

    // The Gateways to look at: those placed here, and those the works hold.
    let mut gateways: BTreeMap<String, Option<Arc<Gateway>>> = BTreeMap::new();
    for gateway in gather::placed_on(&name, ctx) {
        let label = gateway_label(
            &gateway.namespace().unwrap_or_default(),
            &gateway.name_any(),
        );
        gateways.insert(label, Some(gateway));
    }
    for (label, part) in held
        .iter()
        .map(|(label, (_, part))| (label, part))
        .chain(&own_parts)
    {
        if !gateways.contains_key(label) {
            let gateway = part
                .gateway
                .split_once('/')
                .and_then(|(namespace, name)| ctx.caches.gateways.get(Some(namespace), name));
            // Only the Gateway the label names: a label shortened past 63 characters is
            // checked against the one the part names.
            let gateway = gateway.filter(|g| {
                gateway_label(&g.namespace().unwrap_or_default(), &g.name_any()) == *label
            });
            gateways.insert(label.clone(), gateway);
        }
    }

    let gone = ctx.gone.read().expect("no panics while held").clone();
    let mut parts = Vec::new();
    let mut placed_any = false;
    let mut dropped = BTreeSet::new();
    for (label, gateway) in &gateways {
        let now_held = held
            .get(label)
            .map(|(_, part)| part)
            .or(own_parts.get(label));
        let seen = gateway.as_deref().map(|g| gather::gather(g, ctx));
        let chose = seen
            .as_ref()
            .map(|seen| (!seen.undecided).then(|| seen.placed.contains(&name)))
            .unwrap_or(Some(false));
        let mut standing = standing(gateway.as_deref(), gone.contains(label), chose);
        if let (Standing::Placed, Some(seen), Some(part)) = (standing, &seen, now_held)
            && !seen.sets_readable
            && part.manifests.iter().any(|m| m["kind"] == "ListenerSet")
        {
            // Fail static: while ListenerSets cannot be read, a part carrying copies of some
            // stays as it is rather than lose them.
            tracing::warn!(cluster = %name, gateway = %part.gateway, "ListenerSets cannot be read; its part of the bundle stays as it is");
            standing = Standing::AsItIs;
        }
        match (standing, gateway, seen) {
            (Standing::Placed, Some(gateway), Some(seen)) => {
                placed_any = true;
                let (class, refused) =
                    cluster_downstream_class(Some(cluster), &seen.downstream_class);
                if let Some(refused) = refused {
                    tracing::warn!(gateway = %gateway.name_any(), cluster = %name, %class, "{refused}");
                    let note = format!("{refused}; its downstream Gateway takes {class}");
                    ctx.notify(&**gateway, true, "InvalidDownstreamClass", "Place", note)
                        .await;
                }
                let work = gateway_work(
                    gateway,
                    &class,
                    &seen.tls_secrets,
                    &seen.set_listeners,
                    &name,
                );
                parts.push(part_of_own_work(label, &work, None));
            }
            (Standing::Left, gateway, _) => {
                let Some(part) = now_held else { continue };
                let fate = work_fate(
                    false,
                    true,
                    part.leaving_since.as_deref(),
                    now,
                    ctx.withdrawal_grace,
                );
                match fate {
                    WorkFate::Keep => parts.push(part.clone()),
                    WorkFate::MarkLeaving => {
                        tracing::info!(cluster = %name, gateway = %part.gateway, grace = ?ctx.withdrawal_grace, "left the cluster: withdrawn from DNS; its Gateway stays for the grace period");
                        if let Some(gateway) = gateway {
                            let note = format!(
                                "{name} left the placement: withdrawn from DNS; its Gateway is removed after {:?}",
                                ctx.withdrawal_grace
                            );
                            ctx.notify(&**gateway, false, "ClusterLeaving", "Withdraw", note)
                                .await;
                        }
                        let mut part = part.clone();
                        part.leaving_since = Some(now.to_string());
                        parts.push(part);
                        look_at(ctx.withdrawal_grace);
                    }
                    WorkFate::Wait(left) => {
                        parts.push(part.clone());
                        look_at(left + Duration::from_millis(100));
                    }
                    WorkFate::Delete => {
                        tracing::info!(cluster = %name, gateway = %part.gateway, "the grace is over: its Gateway leaves the cluster");
                        dropped.insert(label.clone());
                    }
                }
            }
            _ => {
                if let Some(part) = now_held {
                    parts.push(part.clone());
                }
            }
        }
    }

    let held_shards: BTreeMap<String, usize> = held
        .iter()
        .map(|(label, (shard, _))| (label.clone(), *shard))
        .collect();
    let wanted = cluster_bundles(&name, &parts, &held_shards, BUNDLE_LIMIT);
    for (shard, work) in &wanted {
        apply::bundle(&name, &bundle_name(*shard), work.clone(), ctx).await?;
    }
    for (shard, work) in &works.bundles {
        if !wanted.contains_key(shard) {
            tracing::info!(cluster = %name, bundle = %work.name_any(), "a bundle no Gateway needs any more goes");
            apply::delete_work(work, ctx).await?;
        }
    }

    // The works earlier hubs wrote, one per Gateway: handed over to the bundle holding the
    // Gateway once it is applied there (the spoke's Gateway stays), or removed with their
    // Gateway once it left.
    for (label, own) in &works.own {
        for work in own {
            if dropped.contains(label) || !parts.iter().any(|p| &p.label == label) {
                apply::delete_work(work, ctx).await?;
                continue;
            }
            let holding = ctx.caches.works.group(label).into_iter().find(|w| {
                w.namespace().as_deref() == Some(&name)
                    && w.labels().contains_key(GATEWAY_BUNDLE_LABEL)
                    && bundle_entries(w.metadata.annotations.as_ref()).contains_key(label)
            });
            match holding {
                Some(bundle) => {
                    if let Some(look) = apply::hand_over(work, &bundle.name_any(), ctx).await? {
                        look_at(look);
                    }
                }
                None => look_at(apply::HAND_OVER_RECHECK),
            }
        }
    }

    if placed_any && let Some(look) = apply::install_agent(&name, ctx).await? {
        look_at(look);
    }
    Ok(Action::requeue(next_look))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway(class: &str, deleting: bool) -> Gateway {
        let mut gateway: Gateway = serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": { "name": "web", "namespace": "shop" },
            "spec": { "gatewayClassName": class, "listeners": [] },
        }))
        .expect("a Gateway");
        if deleting {
            gateway.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        gateway
    }

    #[test]
    fn only_evidence_takes_a_gateway_off_a_cluster() {
        let multi = meridian_api::upstream::MULTI_CLUSTER_GATEWAY_CLASS;
        let cases = [
            // Absent from the cache: gone only once a list of every Gateway says so.
            (None, false, None, Standing::AsItIs),
            (None, true, None, Standing::Left),
            (
                Some(gateway(multi, false)),
                false,
                Some(true),
                Standing::Placed,
            ),
            (
                Some(gateway(multi, false)),
                false,
                Some(false),
                Standing::Left,
            ),
            // No decision of its Placement at all: no evidence that the cluster left.
            (Some(gateway(multi, false)), false, None, Standing::AsItIs),
            // Being deleted (it leaves once gone), or of another class now (keeps what it had).
            (
                Some(gateway(multi, true)),
                false,
                Some(false),
                Standing::AsItIs,
            ),
            (
                Some(gateway("istio", false)),
                false,
                Some(false),
                Standing::AsItIs,
            ),
            // The cache has it back: a stale "gone" is no evidence against it.
            (
                Some(gateway(multi, false)),
                true,
                Some(true),
                Standing::Placed,
            ),
        ];
        for (gateway, gone, chose, want) in cases {
            assert_eq!(
                standing(gateway.as_ref(), gone, chose),
                want,
                "{gateway:?} gone={gone} chose={chose:?}"
            );
        }
    }
}
