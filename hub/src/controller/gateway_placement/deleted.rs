//! The works of deleted Gateways. The hub holds no finalizer on Gateways, so a deleted Gateway
//! is simply gone from the cache; its works, labelled with it, are then removed. The caches are
//! looked at whole (a few milliseconds at 6,000 Gateways and 33,000 works): once both are
//! listed, after each deletion of a Gateway or a relist of them (a deletion while the hub was
//! away or its watch was down), and once per resync, which also tries again a delete that
//! failed.

use std::sync::Arc;

use kube::ResourceExt;
use meridian_controllers::runtime::caches::Change;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::PlacementContext;
use super::apply::delete_work;
use crate::placement::works_of_deleted_gateways;

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
        } => {}
    }
    loop {
        remove_once(&ctx).await;
        let next_look = tokio::time::Instant::now() + ctx.config.next_resync();
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

/// Removes the works whose Gateway is not in the cache; a failed delete is logged and tried
/// again at the next look.
async fn remove_once(ctx: &PlacementContext) {
    let gateways = ctx.caches.gateways.state();
    let works = ctx.caches.works.state();
    for work in works_of_deleted_gateways(&gateways, &works) {
        let cluster = work.namespace().unwrap_or_default();
        tracing::info!(%cluster, work = %work.name_any(), "its Gateway was deleted: removing the ManifestWork");
        if let Err(error) = delete_work(work, ctx).await {
            tracing::warn!(%cluster, work = %work.name_any(), %error, "could not remove the ManifestWork of a deleted Gateway; trying again at the next look");
        }
    }
}
