//! DNSPolicy → one DNSRecord per listener of its Gateway. Reads, from the shared watch caches
//! and never from the API server, the Gateway, the clusters its Placement decided, their labels,
//! their agents' reports and heartbeats, and the namespace's zones; the
//! pure [`crate::desired::desired_records`] decides the records; they are written with
//! server-side apply and owned by the policy. A listener's removal deletes its record; a changed
//! hostname or zone replaces it (the old record withdraws its DNS first). An invalid or
//! conflicting policy changes nothing that was published.

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, Patch};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate, condition_status, reasons, set_condition};
use meridian_api::kuadrant::{DNSPolicy, DNSPolicyStatus, DNSRecord, ManagedZone};
use meridian_api::labels::PLACEMENT_LABEL;
use meridian_api::meridian::{ClusterReport, GatewayReport};
use meridian_api::upstream::PlacementDecision;
use meridian_api::upstream::{Gateway, ManagedCluster};
use meridian_dns::tree::GatewayRef;
use serde_json::json;

use crate::caches::{Change, everything_once, own_changes, run_controller, triggers};
use crate::convert::{all_to_api, all_to_engine};
use crate::desired::{
    Desired, ListenerRef, PlacedCluster, ZoneRef, desired_branch, desired_records,
    downstream_namespace, silence,
};
use crate::indexes;
use crate::policy::routing_strategy;
use crate::{Context, Error, POLICY_LABEL, apply_params, now, retry_after, with_finalizer};

pub const FINALIZER: &str = "meridian.dev/dns-policy";
const CONTROLLER: &str = "dnspolicy";

/// Reasons of `Enforced` (Gateway API policy status).
mod enforced {
    pub const ENFORCED: &str = "Enforced";
    pub const UNKNOWN: &str = "Unknown";
}

/// Runs the DNSPolicy controller until `stop`. Besides its own policies it follows, from the
/// shared caches, only what changes a policy's records: its DNSRecords, its Gateway, the
/// ManagedZones of its namespace, and on the hub the placements, clusters, reports and
/// heartbeats of the clusters its Gateway is placed on ([`crate::indexes`]).
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let caches = &ctx.caches;
    let all = caches.policies.store().clone();
    let by_gateway = {
        let policies = all.clone();
        move |change: &Change<Gateway>| {
            let Some(gateway) = change.object() else {
                return Vec::new();
            };
            let target = (gateway.namespace().unwrap_or_default(), gateway.name_any());
            indexes::policies_targeting(&policies.state(), &[target].into())
        }
    };
    let by_record = |change: &Change<DNSRecord>| {
        let Some(record) = change.object() else {
            return Vec::new();
        };
        record
            .labels()
            .get(POLICY_LABEL)
            .map(|policy| ObjectRef::new(policy).within(&record.namespace().unwrap_or_default()))
            .into_iter()
            .collect()
    };
    let by_zone = {
        let policies = all.clone();
        move |change: &Change<ManagedZone>| match change {
            Change::Applied { new: zone, .. } | Change::Deleted(zone) => {
                indexes::policies_in_namespace(
                    &policies.state(),
                    &zone.namespace().unwrap_or_default(),
                )
            }
            Change::Relisted => Vec::new(),
        }
    };
    let mut triggers = vec![
        everything_once(&caches.policies),
        own_changes(&caches.policies),
        triggers(caches.records.subscribe(), all.clone(), by_record),
        triggers(caches.gateways.subscribe(), all.clone(), by_gateway),
        triggers(caches.zones.subscribe(), all.clone(), by_zone),
    ];
    if ctx.config.distributed.is_none() {
        triggers.extend(hub_triggers(&ctx));
    }
    run_controller(all, triggers, reconcile, error_policy, ctx.clone(), stop).await;
}

/// What wakes a policy on the hub besides its own objects: a change to the placement of its
/// Gateway, and a change in what a placed cluster says (labels, report, coming back).
fn hub_triggers(
    ctx: &Arc<Context>,
) -> Vec<futures::stream::BoxStream<'static, ObjectRef<DNSPolicy>>> {
    let caches = ctx.caches.clone();
    let all = caches.policies.store().clone();
    let on_cluster = {
        let caches = caches.clone();
        move |cluster: &str| {
            indexes::policies_on_cluster(
                &caches.policies.state(),
                &caches.gateways.state(),
                &caches.decisions.state(),
                cluster,
            )
        }
    };
    let by_decision = {
        let caches = caches.clone();
        move |change: &Change<PlacementDecision>| match change {
            Change::Applied { new: decision, .. } | Change::Deleted(decision) => {
                let placements = indexes::placement_of(decision).into_iter().collect();
                indexes::policies_of_placements(
                    &caches.policies.state(),
                    &caches.gateways.state(),
                    &placements,
                )
            }
            Change::Relisted => Vec::new(),
        }
    };
    let by_cluster = {
        let on_cluster = on_cluster.clone();
        move |change: &Change<ManagedCluster>| match change {
            Change::Applied { old, new }
                if indexes::cluster_changed_for_dns(old.as_deref(), new) =>
            {
                on_cluster(&new.name_any())
            }
            Change::Deleted(cluster) => on_cluster(&cluster.name_any()),
            _ => Vec::new(),
        }
    };
    let by_report = {
        let on_cluster = on_cluster.clone();
        move |change: &Change<ClusterReport>| match change {
            Change::Applied { old, new }
                if indexes::report_changed_for_policies(old.as_deref(), new) =>
            {
                on_cluster(&new.namespace().unwrap_or_default())
            }
            Change::Deleted(report) => on_cluster(&report.namespace().unwrap_or_default()),
            _ => Vec::new(),
        }
    };
    let timeout = ctx.config.heartbeat_timeout;
    let by_heartbeat = move |change: &Change<Lease>| match change {
        Change::Applied { old, new } => {
            let renewed = |lease: &Lease| lease.spec.as_ref()?.renew_time.as_ref().map(|t| t.0);
            if indexes::heartbeat_revives(old.as_deref().and_then(renewed), renewed(new), timeout) {
                on_cluster(&new.namespace().unwrap_or_default())
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    };
    vec![
        triggers(caches.decisions.subscribe(), all.clone(), by_decision),
        triggers(caches.clusters.subscribe(), all.clone(), by_cluster),
        triggers(caches.reports.subscribe(), all.clone(), by_report),
        triggers(caches.heartbeats.subscribe(), all, by_heartbeat),
    ]
}

pub async fn reconcile(policy: Arc<DNSPolicy>, ctx: Arc<Context>) -> Result<Action, Error> {
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

/// Whether `policy` targets the Gateway `namespace/name`.
pub fn targets(policy: &DNSPolicy, namespace: &str, name: &str) -> bool {
    let (target_namespace, target_name) = indexes::policy_target(policy);
    target_name == name && target_namespace == namespace
}

/// The policy that holds a Gateway when several target it: the oldest, then by name.
fn holder(policies: &[DNSPolicy]) -> Option<&DNSPolicy> {
    policies
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .min_by(|a, b| {
            (
                a.metadata.creation_timestamp.as_ref().map(|t| t.0),
                a.name_any(),
            )
                .cmp(&(
                    b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    b.name_any(),
                ))
        })
}

async fn enforce(policy: &DNSPolicy, ctx: &Context) -> Result<Action, Error> {
    let namespace = policy.namespace().unwrap_or_default();
    let target = &policy.spec.target_ref;
    let gateway_namespace = target
        .namespace
        .clone()
        .unwrap_or_else(|| namespace.clone());
    let Some(gateway) = ctx
        .caches
        .gateways
        .get(Some(&gateway_namespace), &target.name)
    else {
        write_status(
            policy,
            ctx,
            (
                false,
                reasons::TARGET_NOT_FOUND,
                format!("Gateway {gateway_namespace}/{} not found", target.name),
            ),
            (
                false,
                enforced::UNKNOWN,
                "the target Gateway does not exist".into(),
            ),
        )
        .await?;
        // The Gateway watch brings the policy back when the Gateway appears; the retry is a
        // safety net.
        return Ok(Action::requeue(ctx.config.retry_cap));
    };

    let rivals: Vec<DNSPolicy> = ctx
        .caches
        .policies
        .state()
        .iter()
        .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
        .filter(|p| targets(p, &gateway_namespace, &target.name))
        .map(|p| (**p).clone())
        .collect();
    if let Some(holder) = holder(&rivals)
        && holder.uid() != policy.uid()
    {
        write_status(
            policy,
            ctx,
            (
                false,
                reasons::CONFLICTED,
                format!(
                    "Gateway {gateway_namespace}/{} is already targeted by DNSPolicy {}",
                    target.name,
                    holder.name_any()
                ),
            ),
            (
                false,
                enforced::UNKNOWN,
                "the policy is not in effect".into(),
            ),
        )
        .await?;
        return Ok(Action::requeue(ctx.config.resync));
    }

    let strategy = match routing_strategy(policy.spec.routing_strategy, &policy.spec.load_balancing)
    {
        Ok(strategy) => strategy,
        Err(problem) => {
            // What was published stays published: no record is touched.
            write_status(
                policy,
                ctx,
                (false, reasons::INVALID, problem.to_string()),
                (
                    false,
                    enforced::UNKNOWN,
                    "the policy is invalid; published DNS is unchanged".into(),
                ),
            )
            .await?;
            return Ok(Action::requeue(ctx.config.resync));
        }
    };

    let mut zones: Vec<ZoneRef> = ctx
        .caches
        .zones
        .state()
        .iter()
        .filter(|zone| zone.namespace().as_deref() == Some(namespace.as_str()))
        .map(|zone| ZoneRef {
            name: zone.name_any(),
            domain: zone.spec.domain_name.clone(),
        })
        .collect();
    // In the order the API server lists them, so equal candidates resolve the same way.
    zones.sort_by(|a, b| a.name.cmp(&b.name));
    let listeners: Vec<ListenerRef> = gateway
        .spec
        .listeners
        .iter()
        .map(|l| ListenerRef {
            name: l.name.clone(),
            hostname: l.hostname.clone(),
        })
        .collect();
    let gateway_ref = GatewayRef {
        name: gateway.name_any(),
        namespace: gateway_namespace.clone(),
    };
    let section = target.section_name.as_deref();
    let mut next_look = ctx.config.resync;
    let desired = match &ctx.config.distributed {
        None => {
            let (clusters, next_silence) = placed_clusters(&gateway, ctx);
            if let Some(next_silence) = next_silence {
                next_look = next_look.min(next_silence);
            }
            desired_records(
                &gateway_ref,
                &listeners,
                section,
                &strategy,
                &clusters,
                &zones,
            )
        }
        // This cluster's branch alone, from the Gateway the policy targets here.
        Some(local) => {
            let cluster = PlacedCluster {
                name: local.name.clone(),
                labels: local.labels.clone(),
                cluster_id: Some(local.cluster_id.clone()),
                gateway: Some(GatewayReport::from_gateway(&gateway)),
                silent_for: None,
            };
            desired_branch(
                &gateway_ref,
                &listeners,
                section,
                &strategy,
                &cluster,
                &zones,
            )
        }
    };
    let records = write_records(policy, &desired, ctx).await?;
    mark_gateway(&gateway, policy, ctx, true).await?;

    let not_ready: Vec<String> = desired
        .records
        .iter()
        .filter(|wanted| {
            !records.iter().any(|r| {
                r.name_any() == wanted.name
                    && r.status.as_ref().is_some_and(|s| {
                        s.observed_generation == r.metadata.generation
                            && condition_status(&s.conditions, conditions::READY) == Some(true)
                    })
            })
        })
        .map(|r| r.name.clone())
        .collect();
    let mut notes = desired.problems.clone();
    notes.extend(desired.waiting.iter().cloned());
    // Health pruning is the records' business; the policy repeats what it left out.
    notes.extend(records.iter().filter_map(|r| {
        let status = r.status.as_ref()?;
        let healthy = status
            .conditions
            .iter()
            .find(|c| c.type_ == conditions::HEALTHY && c.status == "False")?;
        Some(format!("{}: {}", r.name_any(), healthy.message))
    }));
    notes.extend(
        desired
            .records
            .iter()
            .flat_map(|r| r.warnings.iter().cloned()),
    );
    let empty: Vec<&str> = desired
        .records
        .iter()
        .filter(|r| r.endpoints.is_empty())
        .map(|r| r.name.as_str())
        .collect();
    let enforced_state = if not_ready.is_empty() && !desired.records.is_empty() && empty.is_empty()
    {
        let mut message = format!("{} DNSRecords published", desired.records.len());
        if !notes.is_empty() {
            message = format!("{message}; {}", notes.join("; "));
        }
        (true, enforced::ENFORCED, message)
    } else {
        let mut waiting = if desired.records.is_empty() {
            vec!["no listener has a hostname in a ManagedZone".to_string()]
        } else if !not_ready.is_empty() {
            vec![format!("waiting for DNSRecords {}", not_ready.join(", "))]
        } else {
            vec![format!("no placed cluster serves {} yet", empty.join(", "))]
        };
        waiting.extend(notes);
        (false, enforced::UNKNOWN, waiting.join("; "))
    };
    write_status(
        policy,
        ctx,
        (
            true,
            reasons::ACCEPTED,
            "the policy is valid and attached to its Gateway".into(),
        ),
        enforced_state,
    )
    .await?;
    Ok(Action::requeue(next_look))
}

/// The clusters the Gateway's Placement decided, with their labels and reports, from the
/// caches; and when the policy must look again even if nothing changes: just after the first
/// of them that is heard from now would go silent (a timer, rather than every policy polling).
fn placed_clusters(
    gateway: &Gateway,
    ctx: &Context,
) -> (Vec<PlacedCluster>, Option<std::time::Duration>) {
    let namespace = gateway.namespace().unwrap_or_default();
    let Some(placement) = gateway.labels().get(PLACEMENT_LABEL) else {
        return (Vec::new(), None);
    };
    let names = indexes::decided_clusters(&ctx.caches.decisions.state(), &namespace, placement);
    let downstream = downstream_namespace(&namespace);
    let reports = ctx.caches.reports.state();
    let now = (ctx.clock)();
    let mut clusters = Vec::new();
    let mut next_silence: Option<std::time::Duration> = None;
    for name in names {
        // A cluster that is gone from OCM is gone from DNS.
        let Some(cluster) = ctx.caches.clusters.get(None, &name) else {
            continue;
        };
        let report = reports
            .iter()
            .filter(|r| r.namespace().as_deref() == Some(name.as_str()))
            .max_by_key(|r| r.spec.reported_at.as_ref().map(|t| t.0));
        let heard = ctx.last_heard(&name, report.map(|r| &**r));
        let silent_for = silence(heard, now, ctx.config.heartbeat_timeout);
        let left = heard
            .and_then(|heard| std::time::Duration::try_from(now.duration_since(heard)).ok())
            .and_then(|since| ctx.config.heartbeat_timeout.checked_sub(since));
        if let Some(left) = left {
            // Just past the deadline, so the cluster is silent when the policy looks.
            let at = left + std::time::Duration::from_secs(1);
            next_silence = Some(next_silence.map_or(at, |soonest| soonest.min(at)));
        }
        clusters.push(PlacedCluster {
            name: name.clone(),
            labels: cluster.labels().clone(),
            silent_for,
            cluster_id: report.map(|r| r.spec.cluster_id.clone()),
            gateway: report.and_then(|r| {
                r.spec
                    .gateways
                    .iter()
                    .find(|g| g.name == gateway.name_any() && g.namespace == downstream)
                    .cloned()
            }),
        });
    }
    (clusters, next_silence)
}

/// Applies the desired DNSRecords and deletes the policy's others; returns the records as
/// they are now.
async fn write_records(
    policy: &DNSPolicy,
    desired: &Desired,
    ctx: &Context,
) -> Result<Vec<DNSRecord>, Error> {
    let namespace = policy.namespace().unwrap_or_default();
    let api: Api<DNSRecord> = Api::namespaced(ctx.client.clone(), &namespace);
    let existing = records_of(policy, ctx);
    let owner = policy
        .controller_owner_ref(&())
        .expect("a stored policy has a UID");
    let mut records = Vec::new();
    for wanted in &desired.records {
        if let Some(old) = existing.iter().find(|r| r.name_any() == wanted.name)
            && (old.spec.root_host != wanted.root_host || old.spec.managed_zone.name != wanted.zone)
        {
            // rootHost is immutable: the old record withdraws its DNS as it is deleted, and
            // the new one is written on the next pass.
            if old.metadata.deletion_timestamp.is_none() {
                api.delete(&wanted.name, &DeleteParams::default()).await?;
            }
            continue;
        }
        let mut record = json!({
            "apiVersion": DNSRecord::api_version(&()),
            "kind": DNSRecord::kind(&()),
            "metadata": {
                "name": wanted.name,
                "namespace": namespace,
                "labels": { POLICY_LABEL: policy.name_any() },
                "ownerReferences": [owner],
            },
            "spec": {
                "rootHost": wanted.root_host,
                "managedZone": { "name": wanted.zone },
                "endpoints": all_to_api(&wanted.endpoints),
                "healthCheck": policy.spec.health_check,
            },
        });
        if let Some(local) = &ctx.config.distributed {
            // The cluster's branch, under its own owner ID, next to the other clusters'.
            record["metadata"]["labels"][crate::DISTRIBUTED_LABEL] = json!("true");
            record["spec"]["ownerID"] = json!(local.cluster_id);
        }
        if let Some(old) = existing.iter().find(|r| r.name_any() == wanted.name)
            && record_matches(old, &record)
        {
            // Nothing to write: a steady policy costs the API server nothing.
            records.push(old.clone());
            continue;
        }
        let written = api
            .patch(&wanted.name, &crate::apply_params(), &Patch::Apply(record))
            .await?;
        records.push(written);
    }
    for stale in existing
        .iter()
        .filter(|r| !desired.records.iter().any(|w| w.name == r.name_any()))
        .filter(|r| r.metadata.deletion_timestamp.is_none())
    {
        tracing::info!(record = %stale.name_any(), "deleting the DNSRecord of a removed listener");
        api.delete(&stale.name_any(), &DeleteParams::default())
            .await?;
    }
    Ok(records)
}

/// The policy's DNSRecords, from the cache.
fn records_of(policy: &DNSPolicy, ctx: &Context) -> Vec<DNSRecord> {
    let namespace = policy.namespace();
    let name = policy.name_any();
    ctx.caches
        .records
        .state()
        .iter()
        .filter(|r| r.namespace() == namespace && r.labels().get(POLICY_LABEL) == Some(&name))
        .map(|r| (**r).clone())
        .collect()
}

/// Whether a stored record already says what applying `wanted` would: our labels and owner,
/// and the same spec (endpoints compared as the engine reads them, so server defaults do not
/// count as a difference).
fn record_matches(stored: &DNSRecord, wanted: &serde_json::Value) -> bool {
    let Ok(wanted_record) = serde_json::from_value::<DNSRecord>(wanted.clone()) else {
        return false;
    };
    let labels_kept = wanted_record
        .labels()
        .iter()
        .all(|(key, value)| stored.labels().get(key) == Some(value));
    let owned = wanted_record
        .owner_references()
        .iter()
        .all(|owner| stored.owner_references().iter().any(|o| o.uid == owner.uid));
    let (have, want) = (&stored.spec, &wanted_record.spec);
    labels_kept
        && owned
        && have.root_host == want.root_host
        && have.managed_zone.name == want.managed_zone.name
        && have.owner_id == want.owner_id
        && have.health_check == want.health_check
        && all_to_engine(&have.endpoints) == all_to_engine(&want.endpoints)
}

/// Sets (or removes) `kuadrant.io/DNSPolicyAffected` on the Gateway.
async fn mark_gateway(
    gateway: &Gateway,
    policy: &DNSPolicy,
    ctx: &Context,
    affected: bool,
) -> Result<(), Error> {
    let api: Api<Gateway> =
        Api::namespaced(ctx.client.clone(), &gateway.namespace().unwrap_or_default());
    let mut conditions = Vec::new();
    if affected {
        let existing = gateway
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|c| c.type_ == conditions::DNS_POLICY_AFFECTED)
            .collect::<Vec<_>>();
        let mut mine = existing.clone();
        set_condition(
            &mut mine,
            ConditionUpdate {
                type_: conditions::DNS_POLICY_AFFECTED,
                status: true,
                reason: reasons::ACCEPTED,
                message: format!("DNSPolicy {} applies", policy.name_any()),
            },
            gateway.metadata.generation,
            &now(),
        );
        if mine == existing {
            return Ok(());
        }
        conditions = mine;
    }
    // Applied as this manager's only status field: removing it (an empty list) drops exactly
    // our condition and leaves the gateway controller's alone.
    let patch = json!({
        "apiVersion": Gateway::api_version(&()),
        "kind": Gateway::kind(&()),
        "status": { "conditions": conditions },
    });
    api.patch_status(&gateway.name_any(), &apply_params(), &Patch::Apply(patch))
        .await?;
    Ok(())
}

async fn write_status(
    policy: &DNSPolicy,
    ctx: &Context,
    accepted: (bool, &str, String),
    enforced_state: (bool, &str, String),
) -> Result<(), Error> {
    let mut status: DNSPolicyStatus = policy.status.clone().unwrap_or_default();
    let generation = policy.metadata.generation;
    status.observed_generation = generation;
    let time = now();
    for (type_, (ok, reason, message)) in [
        (conditions::ACCEPTED, accepted),
        (conditions::ENFORCED, enforced_state),
    ] {
        set_condition(
            &mut status.conditions,
            ConditionUpdate {
                type_,
                status: ok,
                reason,
                message,
            },
            generation,
            &time,
        );
    }
    if policy.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let accepted_before = policy
        .status
        .as_ref()
        .and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == conditions::ACCEPTED)
        })
        .map(|c| c.reason.clone());
    if let Some(now_accepted) = status
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::ACCEPTED)
        && accepted_before.as_deref() != Some(now_accepted.reason.as_str())
    {
        ctx.notify(
            policy,
            now_accepted.status != "True",
            &now_accepted.reason,
            "Attach",
            now_accepted.message.clone(),
        )
        .await;
    }
    let api: Api<DNSPolicy> =
        Api::namespaced(ctx.client.clone(), &policy.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": DNSPolicy::api_version(&()),
        "kind": DNSPolicy::kind(&()),
        "status": status,
    });
    api.patch_status(&policy.name_any(), &apply_params(), &Patch::Apply(patch))
        .await?;
    Ok(())
}

/// Deletes the policy's DNSRecords and waits until they are gone (each withdraws its DNS as
/// it goes), then lets the finalizer go.
async fn remove(policy: &DNSPolicy, ctx: &Context) -> Result<Action, Error> {
    let namespace = policy.namespace().unwrap_or_default();
    let api: Api<DNSRecord> = Api::namespaced(ctx.client.clone(), &namespace);
    let records = records_of(policy, ctx);
    for record in records
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
    {
        api.delete(&record.name_any(), &DeleteParams::default())
            .await?;
    }
    if !records.is_empty() {
        return Err(Error::Waiting(format!(
            "{} DNSRecords of DNSPolicy {} are withdrawing",
            records.len(),
            policy.name_any()
        )));
    }
    let target = &policy.spec.target_ref;
    let gateway_namespace = target.namespace.clone().unwrap_or(namespace);
    if let Some(gateway) = ctx
        .caches
        .gateways
        .get(Some(&gateway_namespace), &target.name)
    {
        mark_gateway(&gateway, policy, ctx, false).await?;
    }
    Ok(Action::await_change())
}
