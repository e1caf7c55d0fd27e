//! The works of deleted Gateways. The hub holds no finalizer on Gateways, so a deleted Gateway
//! is simply gone from the cache. Its works (labelled with it) then leave as a cluster's work
//! does when the cluster leaves the placement: marked `leaving-since` at once, removed after the
//! withdrawal grace. DNS stopped pointing at them when the Gateway went (its policies lost their
//! target), so clients holding old answers drain meanwhile; and a Gateway that comes back within
//! the grace keeps them (placement unmarks them). That is what makes absence from the cache safe
//! to act on: a restore that brings the works back before the Gateways, with the hub running,
//! costs nothing if the Gateways follow within the grace.
//!
//! The caches are looked at whole (a few milliseconds at 6,000 Gateways and 33,000 works): once
//! both are listed, after each deletion of a Gateway or a relist of them (a deletion while the
//! hub was away or its watch was down), when a grace ends, and once per resync, which also
//! tries again a write that failed.

use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use meridian_controllers::runtime::caches::Change;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::PlacementContext;
use super::apply::{delete_work, mark_leaving};
use crate::placement::{LEAVING_SINCE, WorkFate, work_fate, works_of_deleted_gateways};

/// Runs until `stop` resolves.
pub async fn remove_works_of_deleted_gateways(
    ctx: Arc<PlacementContext>,
    stop: impl std::future::Future<Output = ()>,
) {
    // Subscribed before the lists, so no deletion falls between them and the first look.
    let mut changes = ctx.caches.gateways.subscribe();
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
        let wait = look_once(&ctx)
            .await
            .map_or(ctx.config.next_resync(), |grace_ends| {
                grace_ends.min(ctx.config.next_resync())
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
            }
        }
        // A namespace's Gateways deleted together are one look, not one each.
        while !matches!(
            changes.try_recv(),
            Err(TryRecvError::Empty | TryRecvError::Closed)
        ) {}
    }
}

/// Marks, or after the grace removes, the works whose Gateway is not in the cache; returns when
/// the first grace still running ends. A failed write is logged and tried again at the next
/// look.
async fn look_once(ctx: &PlacementContext) -> Option<Duration> {
    let gateways = ctx.caches.gateways.state();
    let works = ctx.caches.works.state();
    let now = (ctx.clock)();
    let mut next_look: Option<Duration> = None;
    for work in works_of_deleted_gateways(&gateways, &works) {
        let cluster = work.namespace().unwrap_or_default();
        let fate = work_fate(
            false,
            ctx.caches.clusters.get(None, &cluster).is_some(),
            work.annotations().get(LEAVING_SINCE).map(String::as_str),
            now,
            ctx.withdrawal_grace,
        );
        let written = match fate {
            WorkFate::Keep => Ok(()),
            WorkFate::MarkLeaving => {
                tracing::info!(%cluster, work = %work.name_any(), grace = ?ctx.withdrawal_grace, "its Gateway was deleted: the ManifestWork goes after the grace period");
                next_look =
                    Some(next_look.map_or(ctx.withdrawal_grace, |n| n.min(ctx.withdrawal_grace)));
                mark_leaving(work, ctx).await
            }
            WorkFate::Wait(left) => {
                // Just after the grace ends.
                let left = left + Duration::from_millis(100);
                next_look = Some(next_look.map_or(left, |n| n.min(left)));
                Ok(())
            }
            WorkFate::Delete => {
                tracing::info!(%cluster, work = %work.name_any(), "its Gateway was deleted: removing the ManifestWork");
                delete_work(work, ctx).await
            }
        };
        if let Err(error) = written {
            tracing::warn!(%cluster, work = %work.name_any(), %error, "could not mark or remove the ManifestWork of a deleted Gateway; trying again at the next look");
        }
    }
    next_look
}
