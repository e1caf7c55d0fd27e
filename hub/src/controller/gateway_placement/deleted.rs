//! Deleted Gateways, and the works of clusters that left OCM. The hub holds no finalizer on
//! Gateways, so a deleted Gateway is simply gone. Its parts of the clusters' bundles (and any
//! work of its own an earlier hub wrote) then leave as when a cluster leaves the placement: marked
//! leaving at once, removed after the withdrawal grace (the clusters' passes do both). DNS stopped
//! pointing at them when the Gateway went (its policies lost their target), so clients holding
//! old answers drain meanwhile; and a Gateway that comes back within the grace keeps them.
//!
//! Absence from the cache alone is not evidence: a Gateway the cache could not decode, or a
//! Gateway watch behind the works' (a new leader's), is absent there too. So a Gateway the
//! works hold and the cache lacks counts as deleted ([`super::PlacementContext::gone`]) only once
//! a list of every Gateway from the API server lacks it as well; and a restore that brings the
//! works back before their Gateways, with the hub running, loses nothing if the Gateways follow
//! within the grace.
//!
//! A cluster gone from OCM loses the hub's works in its namespace at once.
//!
//! The caches are looked at whole (a few milliseconds at 6,000 Gateways and 3,000 bundles): once
//! both are listed, after each deletion of a Gateway or a relist of them (a deletion while the
//! hub was away or its watch was down), and once per resync.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use meridian_api::upstream::Gateway;
use meridian_controllers::runtime::caches::Change;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::PlacementContext;
use super::apply::delete_work;
use crate::placement::{deleted_gateways, gateway_labels};
use meridian_api::labels::{GATEWAY_BUNDLE_LABEL, GATEWAY_WORK_LABEL};
use meridian_api::upstream::ManagedCluster;

/// How soon to look again after the list of Gateways failed.
const LIST_RETRY: Duration = Duration::from_secs(30);

/// Runs until `stop` resolves.
pub async fn look_for_deleted_gateways(
    ctx: Arc<PlacementContext>,
    wake: tokio::sync::mpsc::UnboundedSender<ObjectRef<ManagedCluster>>,
    stop: impl std::future::Future<Output = ()>,
) {
    // Subscribed before the lists, so no deletion falls between them and the first look.
    let mut changes = ctx.caches.gateways.subscribe();
    let mut clusters = ctx.caches.clusters.subscribe();
    tokio::pin!(stop);
    tokio::select! {
        () = &mut stop => return,
        _ = async {
            ctx.caches.gateways.wait_until_listed().await;
            ctx.caches.works.wait_until_listed().await;
            ctx.caches.clusters.wait_until_listed().await;
        } => {}
    }
    loop {
        // What is queued (the first list's own relist, a namespace's Gateways deleted together)
        // is covered by the look about to start.
        while !matches!(
            changes.try_recv(),
            Err(TryRecvError::Empty | TryRecvError::Closed)
        ) {}
        // A stop (or a lost Lease) does not wait for the look's writes.
        let soonest = tokio::select! {
            () = &mut stop => return,
            soonest = look_once(&ctx, &wake) => soonest,
        };
        let wait = soonest.map_or(ctx.config.next_resync(), |soonest| {
            soonest.min(ctx.config.next_resync())
        });
        let next_look = tokio::time::Instant::now() + wait;
        loop {
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep_until(next_look) => break,
                change = changes.recv() => match change {
                    Ok(Change::Deleted(_) | Change::Relisted) | Err(RecvError::Lagged(_)) => break,
                    Ok(Change::Applied { .. }) => {}
                    Err(RecvError::Closed) => return,
                },
                change = clusters.recv() => match change {
                    Ok(Change::Deleted(_) | Change::Relisted) | Err(RecvError::Lagged(_)) => break,
                    Ok(Change::Applied { .. }) => {}
                    Err(RecvError::Closed) => return,
                },
            }
        }
    }
}

/// Confirms which Gateways the works hold are deleted (gone from the cache and from a list of
/// them), wakes the clusters holding those newly confirmed, and removes the works of clusters
/// gone from OCM; returns when to look again if sooner than the resync (a failed list). A
/// failed write is logged and tried again at the next look.
async fn look_once(
    ctx: &PlacementContext,
    wake: &tokio::sync::mpsc::UnboundedSender<ObjectRef<ManagedCluster>>,
) -> Option<Duration> {
    let works = ctx.caches.works.state();
    for work in works.iter().filter(|work| {
        let hubs = work.labels().contains_key(GATEWAY_WORK_LABEL)
            || work.labels().contains_key(GATEWAY_BUNDLE_LABEL);
        hubs && work.meta().deletion_timestamp.is_none()
            && ctx
                .caches
                .clusters
                .get(None, &work.namespace().unwrap_or_default())
                .is_none()
    }) {
        tracing::info!(cluster = ?work.namespace(), work = %work.name_any(), "its cluster left OCM: removing the ManifestWork");
        if let Err(error) = delete_work(work, ctx).await {
            tracing::warn!(cluster = ?work.namespace(), work = %work.name_any(), %error, "could not remove the ManifestWork of a cluster gone from OCM; trying again at the next look");
        }
    }

    let mut present = gateway_labels(ctx.caches.gateways.state().iter().map(|g| g.meta()));
    if deleted_gateways(&present, &works).is_empty() {
        ctx.gone.write().expect("no panics while held").clear();
        return None;
    }
    match Api::<Gateway>::all(ctx.client.clone())
        .list_metadata(&ListParams::default())
        .await
    {
        Ok(listed) => present.extend(gateway_labels(listed.items.iter().map(|g| &g.metadata))),
        Err(error) => {
            tracing::warn!(%error, "could not list Gateways to confirm some are deleted; their parts stay as they are for now");
            return Some(LIST_RETRY);
        }
    }
    // A Gateway created since the list (the same one back) is present again.
    present.extend(gateway_labels(
        ctx.caches.gateways.state().iter().map(|g| g.meta()),
    ));
    let confirmed = deleted_gateways(&present, &works);
    let newly: Vec<&String> = {
        let mut gone = ctx.gone.write().expect("no panics while held");
        let newly = confirmed.keys().filter(|l| !gone.contains(*l)).collect();
        *gone = confirmed.keys().cloned().collect();
        newly
    };
    let clusters: BTreeSet<&String> = newly
        .iter()
        .filter_map(|label| confirmed.get(*label))
        .flatten()
        .collect();
    if !newly.is_empty() {
        tracing::info!(
            gateways = newly.len(),
            clusters = clusters.len(),
            "Gateways deleted: their parts leave the clusters after the grace period"
        );
    }
    for cluster in clusters {
        let _ = wake.send(ObjectRef::new(cluster));
    }
    None
}
