//! DNSPolicy → one DNSRecord per listener of its Gateway. A listener's removal deletes its
//! record; a changed hostname or zone replaces it (the old record withdraws its DNS first). An
//! invalid or conflicting policy changes nothing that was published.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | DNSPolicies, DNSRecords, Gateways, ManagedZones, ListenerSets; on the hub also PlacementDecisions, ManagedClusters, ClusterReports, heartbeat Leases |
//! | **Triggered by** ([`triggers`]) | the policy (not its status); its records (not their creation); its Gateway (not its conditions); a zone of its namespace; a ListenerSet of its Gateway, or the one it targets; on the hub, a decision of its Gateway's Placement, a placed cluster's labels or report (Gateways only), a heartbeat that ends a silence, and a placed cluster going silent (one timer per cluster, not per policy) |
//! | **Gathers** ([`gather`]) | the Gateway, rival policies, the namespace's zones, the placed clusters with their labels, reports and last heartbeat: from the caches only |
//! | **Decides** (pure, [`decide`]) | the drain steps due; the fleet brake when a cluster is silent ([`crate::reconcile::fleet_brake`]); the records: [`crate::decide::desired::desired_records`] on the hub, [`crate::decide::desired::desired_branch`] in distributed mode |
//! | **Remembers** ([`crate::reconcile::memory`]) | the drain steps and what the brake holds, for the next pass |
//! | **Writes** ([`apply`], [`status`]) | DNSRecords (server-side apply, only where they differ), the Gateway's `DNSPolicyAffected`, the policy's `Accepted`/`Programmed`/`Enforced` and `status.ancestors[]` |

mod apply;
pub mod decide;
mod gather;
mod status;
pub mod triggers;

use std::sync::Arc;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use meridian_api::kuadrant::DNSPolicy;

use crate::runtime::caches::run_controller;
use crate::{Context, Error, counted, retry_after, with_finalizer};

pub use gather::targets;

/// The finalizer of a policy for one listener (`sectionName`): its deletion waits until the
/// Gateway-wide policy has taken its record over, so the listener's DNS passes between them
/// without a gap (without it the record, left with no owner, would withdraw). Policies
/// enforced by releases before records learnt to follow their policy's deletion carry it too.
pub const FINALIZER: &str = "meridian.dev/dns-policy";
const CONTROLLER: &str = "dnspolicy";

/// Runs the DNSPolicy controller until `stop`.
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let all = ctx.caches.policies.store().clone();
    let requests = triggers::requests(&ctx);
    run_controller(
        all,
        ctx.config.concurrency.policies,
        requests,
        reconcile,
        error_policy,
        ctx.clone(),
        stop,
    )
    .await;
}

pub async fn reconcile(policy: Arc<DNSPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
    let held = policy.finalizers().iter().any(|f| f == FINALIZER);
    let target = &policy.spec.target_ref;
    if !held && !target.is_listener_set() && target.section_name.is_none() {
        // No finalizer: it would cost every policy a write at creation. A deleted policy's
        // records delete themselves ([`crate::reconcile::dns_record`]).
        return counted(&*policy, &ctx, CONTROLLER, async {
            if policy.metadata.deletion_timestamp.is_some() {
                remove(&policy, &ctx).await
            } else {
                enforce(&policy, &ctx).await
            }
        })
        .await;
    }
    // A policy for one listener or a ListenerSet, or one enforced by an earlier release, holds
    // the finalizer.
    with_finalizer(
        policy,
        &ctx,
        CONTROLLER,
        FINALIZER,
        |policy| {
            let ctx = &ctx;
            async move { enforce(&policy, ctx).await }
        },
        |policy| {
            let ctx = &ctx;
            async move { remove(&policy, ctx).await }
        },
    )
    .await
}

pub fn error_policy(policy: Arc<DNSPolicy>, error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(&*policy, error, &ctx, CONTROLLER)
}

/// Gather → decide → apply → status.
async fn enforce(policy: &DNSPolicy, ctx: &Context) -> Result<Action, Error> {
    let seen = match gather::gather(policy, ctx) {
        Ok(seen) => seen,
        Err(refusal) => return refuse(policy, ctx, refusal).await,
    };
    let decision = decide::decide(&seen, ctx.config.distributed.is_some());
    if !decision.unsupported.is_empty() {
        // Never flattened silently: the records stay as they are until the policy asks what
        // the zone can hold (or the zone changes, which brings the policy back). Drains do
        // not step meanwhile: nothing publishes their steps.
        let problem = decision.unsupported.join("; ");
        return refuse(policy, ctx, gather::Refusal::Unsupported(problem)).await;
    }
    ctx.drains.keep(&seen.key, &decision.drains);
    if let Some(fleet) = &seen.fleet {
        crate::reconcile::fleet_brake::remember(ctx, &fleet.heard, seen.now);
    }
    let mut desired = decision.desired;
    let (records, refused) = apply::write_records(policy, &desired, &seen.handed_over, ctx).await?;
    for (name, note) in refused {
        desired.records.retain(|r| r.name != name);
        desired.problems.push(note);
    }
    // Every policy targeting the Gateway, and each listener's, so that its conditions say the
    // same whoever writes them. A policy for a ListenerSet marks no Gateway (the Gateway's
    // conditions are its team's; the ListenerSet's status is not written).
    if !policy.spec.target_ref.is_listener_set() {
        let mut on_gateway: Vec<String> = seen
            .rivals
            .iter()
            .filter(|p| !p.spec.target_ref.is_listener_set())
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| p.name_any())
            .collect();
        on_gateway.sort();
        on_gateway.dedup();
        let own: Vec<gather::Coverable> = seen
            .coverable
            .iter()
            .filter(|l| l.set.is_none())
            .cloned()
            .collect();
        let holders = gather::listener_holders(&seen.rivals, &own);
        crate::reconcile::gateway_status::mark_gateway(&seen.gateway, &on_gateway, &holders, ctx)
            .await?;
    }
    let enforced = status::enforced_state(&desired, &records);
    if let Some(wait) = status::first_status_wait(
        policy,
        &enforced,
        &desired,
        &records,
        k8s_openapi::jiff::Timestamp::now(),
    ) {
        return Ok(Action::requeue(wait));
    }
    let fail_static = status::fail_static(&desired);
    let accepted = status::accepted();
    let programmed = status::programmed(
        &accepted,
        &enforced,
        status::published_records(&desired, &records),
    );
    status::write_status(
        policy,
        ctx,
        accepted,
        enforced,
        programmed,
        Some(fail_static),
        Some(&decision.draining),
    )
    .await?;
    // A silent cluster kept by a brake is looked at again when the brake may let it go, a
    // draining one when its next step is due.
    let recheck = [desired.recheck_after, decision.drain_recheck]
        .into_iter()
        .flatten()
        .fold(ctx.config.next_resync(), std::time::Duration::min);
    Ok(Action::requeue(recheck))
}

/// Says why the policy cannot be enforced, and changes nothing else.
async fn refuse(
    policy: &DNSPolicy,
    ctx: &Context,
    refusal: gather::Refusal,
) -> Result<Action, Error> {
    let (accepted, enforced) = status::refused(&refusal);
    let programmed = status::programmed(&accepted, &enforced, 0);
    status::write_status(policy, ctx, accepted, enforced, programmed, None, None).await?;
    Ok(Action::requeue(match refusal {
        // The Gateway watch brings the policy back when the Gateway appears; the retry is a
        // safety net.
        gather::Refusal::TargetNotFound { .. } => ctx.config.retry_cap,
        _ => ctx.config.next_resync(),
    }))
}

/// Deletes the policy's DNSRecords and waits until they are gone (each withdraws its DNS as
/// it goes), then takes the policy's condition off its Gateway.
///
/// A policy for one listener, or for a ListenerSet, whose listeners another policy covers
/// next (the Gateway-wide one) leaves their records to it, which takes them over in place
/// ([`gather::handed_back`]): the listeners' DNS passes from one to the other without being
/// withdrawn.
async fn remove(policy: &DNSPolicy, ctx: &Context) -> Result<Action, Error> {
    let Some(gather::Remembered {
        gateway,
        rivals,
        listeners,
    }) = gather::remembered_gateway(policy, ctx)
    else {
        // Fail static: which policy takes its listeners next is not known; nothing is deleted.
        return Err(Error::Waiting(format!(
            "ListenerSets cannot be read (not served, or not allowed): the DNSRecords of DNSPolicy {} stay until they can",
            policy.name_any()
        )));
    };
    let handed_back = gather::handed_back(policy, &rivals, &gateway.1, &listeners, (ctx.clock)());
    let remaining = apply::delete_records(policy, &handed_back, ctx).await?;
    if remaining > 0 {
        return Err(Error::Waiting(if handed_back.is_empty() {
            format!(
                "{remaining} DNSRecords of DNSPolicy {} are withdrawing",
                policy.name_any()
            )
        } else {
            format!(
                "DNSRecords {} of DNSPolicy {} are being taken over by the policy covering their listeners",
                handed_back.join(", "),
                policy.name_any()
            )
        }));
    }
    // A policy naming another namespace's Gateway never marked it, and does not unmark it;
    // nor does one for a ListenerSet.
    if gather::target_namespace(policy).is_err() || policy.spec.target_ref.is_listener_set() {
        return Ok(Action::await_change());
    }
    // Another policy still targeting the Gateway keeps its condition.
    let others = rivals.iter().any(|p| {
        p.uid() != policy.uid()
            && p.metadata.deletion_timestamp.is_none()
            && !p.spec.target_ref.is_listener_set()
    });
    if !others && let Some(gateway) = ctx.caches.gateways.get(Some(&gateway.0), &gateway.1) {
        crate::reconcile::gateway_status::unmark_gateway(&gateway, ctx).await?;
    }
    Ok(Action::await_change())
}
