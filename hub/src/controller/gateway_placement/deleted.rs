//! The works of deleted Gateways. The hub holds no finalizer on Gateways, so a deleted Gateway
//! is simply gone. Its works (labelled with it) then leave as a cluster's work does when the
//! cluster leaves the placement: marked `leaving-since` at once, removed after the withdrawal
//! grace. DNS stopped pointing at them when the Gateway went (its policies lost their target),
//! so clients holding old answers drain meanwhile; and a Gateway that comes back within the
//! grace keeps them (placement unmarks them).
//!
//! Absence from the cache alone is not evidence: a Gateway the cache could not decode, or a
//! Gateway watch behind the works' (a new leader's), is absent there too. So works whose
//! Gateway the cache lacks are acted on only once a list of every Gateway from the API server
//! lacks it as well; and a restore that brings the works back before their Gateways, with the
//! hub running, loses nothing if the Gateways follow within the grace.
//!
//! The caches are looked at whole (a few milliseconds at 6,000 Gateways and 33,000 works): once
//! both are listed, after each deletion of a Gateway or a relist of them (a deletion while the
//! hub was away or its watch was down), when a grace ends, and once per resync, which also
//! tries again a write that failed and finds a work written for a Gateway just deleted.

use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, ListParams};
use kube::{Resource, ResourceExt};
use meridian_api::upstream::Gateway;
use meridian_controllers::runtime::caches::Change;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use super::PlacementContext;
use super::apply::{delete_work, mark_leaving};
use crate::placement::{
    GATEWAY_WORK_LABEL, LEAVING_SINCE, WorkFate, gateway_labels, work_fate,
    works_of_deleted_gateways,
};

/// How soon to look again after the list of Gateways failed.
const LIST_RETRY: Duration = Duration::from_secs(30);

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
        // What is queued (the first list's own relist, a namespace's Gateways deleted together)
        // is covered by the look about to start.
        while !matches!(
            changes.try_recv(),
            Err(TryRecvError::Empty | TryRecvError::Closed)
        ) {}
        // A stop (or a lost Lease) does not wait for the look's writes.
        let soonest = tokio::select! {
            () = &mut stop => return,
            soonest = look_once(&ctx) => soonest,
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
            }
        }
    }
}

/// Marks, or after the grace removes, the works whose Gateway there is no longer; returns when
/// to look again if sooner than the resync (a grace ending, a failed list). A failed write is
/// logged and tried again at the next look.
async fn look_once(ctx: &PlacementContext) -> Option<Duration> {
    let gateways = &ctx.caches.gateways;
    let works = ctx.caches.works.state();
    let mut revision = gateways.revision();
    let mut present = gateway_labels(gateways.state().iter().map(|g| g.meta()));
    if works_of_deleted_gateways(&present, &works).is_empty() {
        return None;
    }
    match Api::<Gateway>::all(ctx.client.clone())
        .list_metadata(&ListParams::default())
        .await
    {
        Ok(listed) => present.extend(gateway_labels(listed.items.iter().map(|g| &g.metadata))),
        Err(error) => {
            tracing::warn!(%error, "could not list Gateways to confirm some are deleted; their works stay as they are for now");
            return Some(LIST_RETRY);
        }
    }
    let now = (ctx.clock)();
    let mut soonest: Option<Duration> = None;
    for work in works_of_deleted_gateways(&present, &works) {
        // Already going (OCM's finalizer holds it until the spoke let go).
        if work.meta().deletion_timestamp.is_some() {
            continue;
        }
        // A Gateway created since the look began (the same one back) keeps its works.
        if gateways.revision() != revision {
            revision = gateways.revision();
            present.extend(gateway_labels(gateways.state().iter().map(|g| g.meta())));
            let label = work.labels().get(GATEWAY_WORK_LABEL);
            if label.is_some_and(|label| present.contains(label)) {
                continue;
            }
        }
        let cluster = work.namespace().unwrap_or_default();
        let fate = work_fate(
            false,
            ctx.caches.clusters.get(None, &cluster).is_some(),
            work.annotations().get(LEAVING_SINCE).map(String::as_str),
            now,
            ctx.withdrawal_grace,
        );
        let mut look_at = |after: Duration| {
            soonest = Some(soonest.map_or(after, |soonest| soonest.min(after)));
        };
        let written = match fate {
            WorkFate::Keep => Ok(()),
            WorkFate::MarkLeaving => {
                tracing::info!(%cluster, work = %work.name_any(), grace = ?ctx.withdrawal_grace, "its Gateway was deleted: the ManifestWork goes after the grace period");
                look_at(ctx.withdrawal_grace);
                mark_leaving(work, ctx).await
            }
            // Just after the grace ends.
            WorkFate::Wait(left) => {
                look_at(left + Duration::from_millis(100));
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
    soonest
}
