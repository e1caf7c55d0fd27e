//! DNSPolicy → one DNSRecord per listener of its Gateway. Reads the Gateway, the clusters its
//! Placement decided, their labels and their agents' reports, and the namespace's zones; the
//! pure [`crate::desired::desired_records`] decides the records; they are written with
//! server-side apply and owned by the policy. A listener's removal deletes its record; a changed
//! hostname or zone replaces it (the old record withdraws its DNS first). An invalid or
//! conflicting policy changes nothing that was published.

use std::sync::Arc;

use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, watcher};
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate, condition_status, reasons, set_condition};
use meridian_api::kuadrant::{DNSPolicy, DNSPolicyStatus, DNSRecord, ManagedZone};
use meridian_api::labels::PLACEMENT_LABEL;
use meridian_api::meridian::{ClusterReport, GatewayReport};
use meridian_api::upstream::PlacementDecision;
use meridian_api::upstream::{Gateway, ManagedCluster};
use meridian_dns::tree::GatewayRef;
use serde_json::json;

use crate::convert::all_to_api;
use crate::desired::{
    Desired, ListenerRef, PlacedCluster, ZoneRef, desired_branch, desired_records,
    downstream_namespace, silence,
};
use crate::policy::routing_strategy;
use crate::{
    Context, Error, POLICY_LABEL, apply_params, decided_clusters, now, retry_after, with_finalizer,
};

pub const FINALIZER: &str = "meridian.dev/dns-policy";
const CONTROLLER: &str = "dnspolicy";

/// Reasons of `Enforced` (Gateway API policy status).
mod enforced {
    pub const ENFORCED: &str = "Enforced";
    pub const UNKNOWN: &str = "Unknown";
}

/// The DNSPolicy controller. On the hub it also follows placements, clusters and their
/// reports; in distributed mode (`hub_mode` false) the cluster's own Gateways are enough.
pub fn controller(client: &Client, hub_mode: bool) -> Controller<DNSPolicy> {
    let controller = Controller::new(
        Api::<DNSPolicy>::all(client.clone()),
        watcher::Config::default(),
    );
    let store = controller.store();
    let all_policies = move || -> Vec<ObjectRef<DNSPolicy>> {
        store
            .state()
            .iter()
            .map(|p| ObjectRef::from_obj(&**p))
            .collect()
    };
    let by_gateway = {
        let store = controller.store();
        move |gateway: Gateway| {
            let (namespace, name) = (gateway.namespace().unwrap_or_default(), gateway.name_any());
            store
                .state()
                .iter()
                .filter(|p| targets(p, &namespace, &name))
                .map(|p| ObjectRef::from_obj(&**p))
                .collect::<Vec<_>>()
        }
    };
    let (a, b, c, d) = (
        all_policies.clone(),
        all_policies.clone(),
        all_policies.clone(),
        all_policies,
    );
    let controller = controller
        .owns(
            Api::<DNSRecord>::all(client.clone()),
            watcher::Config::default(),
        )
        .watches(
            Api::<Gateway>::all(client.clone()),
            watcher::Config::default(),
            by_gateway,
        )
        .watches(
            Api::<ManagedZone>::all(client.clone()),
            watcher::Config::default(),
            move |_| d(),
        );
    if !hub_mode {
        return controller;
    }
    controller
        .watches(
            Api::<PlacementDecision>::all(client.clone()),
            watcher::Config::default(),
            move |_| a(),
        )
        .watches(
            Api::<ManagedCluster>::all(client.clone()),
            watcher::Config::default(),
            move |_| b(),
        )
        .watches(
            Api::<ClusterReport>::all(client.clone()),
            watcher::Config::default(),
            move |_| c(),
        )
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
    let target = &policy.spec.target_ref;
    let target_namespace = target
        .namespace
        .clone()
        .or_else(|| policy.namespace())
        .unwrap_or_default();
    target.name == name && target_namespace == namespace
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
    let gateways: Api<Gateway> = Api::namespaced(ctx.client.clone(), &gateway_namespace);
    let Some(gateway) = gateways.get_opt(&target.name).await? else {
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

    let policies: Api<DNSPolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    let rivals: Vec<DNSPolicy> = policies
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| targets(p, &gateway_namespace, &target.name))
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

    let zones: Vec<ZoneRef> = Api::<ManagedZone>::namespaced(ctx.client.clone(), &namespace)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|zone| ZoneRef {
            name: zone.name_any(),
            domain: zone.spec.domain_name.clone(),
        })
        .collect();
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
    let desired = match &ctx.config.distributed {
        None => {
            let clusters = placed_clusters(&gateway, ctx).await?;
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
    Ok(Action::requeue(ctx.config.resync))
}

/// The clusters the Gateway's Placement decided, with their labels and reports.
async fn placed_clusters(gateway: &Gateway, ctx: &Context) -> Result<Vec<PlacedCluster>, Error> {
    let namespace = gateway.namespace().unwrap_or_default();
    let Some(placement) = gateway.labels().get(PLACEMENT_LABEL) else {
        return Ok(Vec::new());
    };
    let names = decided_clusters(&ctx.client, &namespace, placement).await?;
    let managed_clusters: Api<ManagedCluster> = Api::all(ctx.client.clone());
    let downstream = downstream_namespace(&namespace);
    let mut clusters = Vec::new();
    for name in names {
        // A cluster that is gone from OCM is gone from DNS.
        let Some(cluster) = managed_clusters.get_opt(&name).await? else {
            continue;
        };
        let reports: Api<ClusterReport> = Api::namespaced(ctx.client.clone(), &name);
        let report = reports
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .max_by_key(|r| r.spec.reported_at.as_ref().map(|t| t.0));
        let silent_for = silence(
            report
                .as_ref()
                .and_then(|r| r.spec.reported_at.as_ref())
                .map(|t| t.0),
            (ctx.clock)(),
            ctx.config.heartbeat_timeout,
        );
        clusters.push(PlacedCluster {
            name: name.clone(),
            labels: cluster.labels().clone(),
            silent_for,
            cluster_id: report.as_ref().map(|r| r.spec.cluster_id.clone()),
            gateway: report.and_then(|r| {
                r.spec
                    .gateways
                    .into_iter()
                    .find(|g| g.name == gateway.name_any() && g.namespace == downstream)
            }),
        });
    }
    Ok(clusters)
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
    let existing = api
        .list(&ListParams::default().labels(&format!("{POLICY_LABEL}={}", policy.name_any())))
        .await?
        .items;
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
    let records = api
        .list(&ListParams::default().labels(&format!("{POLICY_LABEL}={}", policy.name_any())))
        .await?
        .items;
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
    let gateways: Api<Gateway> = Api::namespaced(ctx.client.clone(), &gateway_namespace);
    if let Some(gateway) = gateways.get_opt(&target.name).await? {
        mark_gateway(&gateway, policy, ctx, false).await?;
    }
    Ok(Action::await_change())
}
