//! What wakes a policy: the trigger streams, built from the pure indexes of
//! [`crate::runtime::indexes`] over the shared caches.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::meridian::ClusterReport;
use meridian_api::upstream::{Gateway, ManagedCluster, PlacementDecision};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::decide::desired::until_silent;
use crate::runtime::caches::{Change, everything_once, triggers};
use crate::{Context, POLICY_LABEL, runtime::indexes};

/// Every policy once at start, its own changes but to its status, and: its DNSRecords (not
/// their creation); its Gateway (not its conditions); a
/// ManagedZone of its namespace; and on the hub, a change to the placement of its Gateway or
/// in what a placed cluster says (labels, report, coming back after a silence).
pub fn requests(ctx: &Arc<Context>) -> Vec<BoxStream<'static, ObjectRef<DNSPolicy>>> {
    let caches = &ctx.caches;
    let all = caches.policies.store().clone();
    let by_gateway = {
        let caches = caches.clone();
        move |change: &Change<Gateway>| {
            let gateway = match change {
                Change::Applied { old, new } => {
                    if !indexes::gateway_changed_for_dns(old.as_deref(), new) {
                        return Vec::new();
                    }
                    new
                }
                Change::Deleted(gateway) => gateway,
                Change::Relisted => return Vec::new(),
            };
            let target = (gateway.namespace().unwrap_or_default(), gateway.name_any());
            let rivals = caches
                .policies
                .group(&indexes::group_key(&target.0, &target.1));
            indexes::policies_targeting(&rivals, &[target].into())
        }
    };
    let by_record = |change: &Change<DNSRecord>| {
        let record = match change {
            Change::Applied { old, new }
                if indexes::record_changed_for_policy(old.as_deref(), new) =>
            {
                new
            }
            Change::Deleted(record) => record,
            _ => return Vec::new(),
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
            Change::Applied { old, new: zone }
                if indexes::zone_changed_for_dns(old.as_deref(), zone) =>
            {
                indexes::policies_in_namespace(
                    &policies.state(),
                    &zone.namespace().unwrap_or_default(),
                )
            }
            Change::Deleted(zone) => indexes::policies_in_namespace(
                &policies.state(),
                &zone.namespace().unwrap_or_default(),
            ),
            _ => Vec::new(),
        }
    };
    let mut requests = vec![
        everything_once(&caches.policies),
        triggers(
            caches.policies.subscribe(),
            all.clone(),
            |change| match change {
                Change::Applied { old, new }
                    if indexes::policy_changed_beyond_status(old.as_deref(), new) =>
                {
                    vec![ObjectRef::from_obj(&**new)]
                }
                _ => Vec::new(),
            },
        ),
        triggers(caches.records.subscribe(), all.clone(), by_record),
        triggers(caches.gateways.subscribe(), all.clone(), by_gateway),
        triggers(caches.zones.subscribe(), all.clone(), by_zone),
    ];
    if ctx.config.distributed.is_none() {
        requests.extend(hub_triggers(ctx));
    }
    requests
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
        silences(ctx),
    ]
}

/// Clusters falling silent. Each cluster has one deadline (when it was last heard from plus the
/// heartbeat timeout), moved by every renewal; when one passes unrenewed, the policies whose
/// Gateway is placed on that cluster look again. One timer for the fleet rather than one per
/// policy, so a steady fleet, heartbeating, wakes no policy. Every quarter of the timeout the
/// whole fleet is looked at again from the caches, and a cluster found silent that was not
/// announced for its last heartbeat is announced then: a missed change (a relist, a lagging
/// subscriber) delays a silence by at most that long instead of hiding it.
fn silences(ctx: &Arc<Context>) -> BoxStream<'static, ObjectRef<DNSPolicy>> {
    let watch = Silences {
        ctx: ctx.clone(),
        leases: ctx.caches.heartbeats.subscribe(),
        reports: ctx.caches.reports.subscribe(),
        deadlines: BTreeMap::new(),
        announced: BTreeMap::new(),
        primed: false,
    };
    futures::stream::unfold(watch, |mut watch| async move {
        let silent = watch.next_silent().await?;
        let caches = &watch.ctx.caches;
        let policies = indexes::policies_on_cluster(
            &caches.policies.state(),
            &caches.gateways.state(),
            &caches.decisions.state(),
            &silent,
        );
        tracing::info!(
            cluster = %silent,
            policies = policies.len(),
            "no heartbeat from the cluster's agent for the timeout; its policies look again"
        );
        Some((policies, watch))
    })
    .flat_map(futures::stream::iter)
    .boxed()
}

/// The state behind [`silences`].
struct Silences {
    ctx: Arc<Context>,
    leases: broadcast::Receiver<Change<Lease>>,
    reports: broadcast::Receiver<Change<ClusterReport>>,
    /// When each cluster heard from goes silent unless renewed.
    deadlines: BTreeMap<String, Instant>,
    /// The clusters announced silent, with the heartbeat they fell silent after.
    announced: BTreeMap<String, k8s_openapi::jiff::Timestamp>,
    primed: bool,
}

impl Silences {
    /// Sets `cluster`'s deadline from what the caches say now.
    fn watch(&mut self, cluster: &str) {
        let report = self.ctx.report_of(cluster);
        let heard = self.ctx.last_heard(cluster, report.as_deref());
        let Some(heard) = heard else {
            self.deadlines.remove(cluster);
            return;
        };
        let left = until_silent(
            Some(heard),
            (self.ctx.clock)(),
            self.ctx.config.heartbeat_timeout,
        );
        tracing::debug!(cluster, %heard, ?left, "heartbeat deadline");
        match left {
            // Just past the deadline, so the cluster is silent when the policies look.
            Some(left) => {
                let at = Instant::now() + left + Duration::from_secs(1);
                self.deadlines.insert(cluster.to_string(), at);
            }
            // Silent already: announced now unless it was for this heartbeat.
            None if self.announced.get(cluster) != Some(&heard) => {
                self.deadlines.insert(cluster.to_string(), Instant::now());
            }
            None => {
                self.deadlines.remove(cluster);
            }
        }
    }

    /// Records that `cluster` was announced silent after its last heartbeat.
    fn announce(&mut self, cluster: &str) {
        let report = self.ctx.report_of(cluster);
        if let Some(heard) = self.ctx.last_heard(cluster, report.as_deref()) {
            self.announced.insert(cluster.to_string(), heard);
        }
    }

    fn watch_everyone(&mut self) {
        let caches = self.ctx.caches.clone();
        let clusters: BTreeSet<String> = caches
            .heartbeats
            .state()
            .iter()
            .filter_map(|lease| lease.namespace())
            .chain(caches.reports.state().iter().filter_map(|r| r.namespace()))
            .collect();
        for cluster in clusters {
            self.watch(&cluster);
        }
    }

    /// The next cluster to go silent, when it does; `None` once the caches are gone.
    async fn next_silent(&mut self) -> Option<String> {
        if !self.primed {
            // Only the heartbeats and reports set deadlines: waiting for every kind's first
            // list would leave the timer off for as long as any one of them failed to list.
            let caches = self.ctx.caches.clone();
            let inputs = async {
                caches.heartbeats.wait_until_listed().await;
                caches.reports.wait_until_listed().await;
            };
            tokio::pin!(inputs);
            loop {
                tokio::select! {
                    () = &mut inputs => break,
                    () = tokio::time::sleep(Duration::from_secs(30)) => tracing::warn!(
                        unlisted = ?caches.unlisted(),
                        "the silence timer waits for the first list of heartbeats and reports"
                    ),
                }
            }
            // A cluster silent already is announced at once: the policies' first reconcile
            // may have looked before it fell silent.
            self.watch_everyone();
            self.primed = true;
            tracing::info!(
                clusters = self.deadlines.len(),
                "watching the fleet's heartbeats for silence"
            );
        }
        let rescan = (self.ctx.config.heartbeat_timeout / 4).max(Duration::from_secs(1));
        let mut rescans = tokio::time::interval_at(Instant::now() + rescan, rescan);
        rescans.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let soonest = self
                .deadlines
                .iter()
                .min_by_key(|(_, at)| **at)
                .map(|(cluster, at)| (cluster.clone(), *at));
            let expiry = async {
                match &soonest {
                    Some((_, at)) => tokio::time::sleep_until(*at).await,
                    None => std::future::pending().await,
                }
            };
            // A relist (the first list, or one after a watch error) brings its objects without
            // a change of their own: a renewal that came with it must move a deadline too.
            tokio::select! {
                change = self.leases.recv() => match change {
                    Ok(Change::Relisted) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.watch_everyone()
                    }
                    Ok(change) => {
                        if let Some(cluster) = change.object().and_then(|lease| lease.namespace()) {
                            self.watch(&cluster);
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                change = self.reports.recv() => match change {
                    Ok(Change::Relisted) | Err(broadcast::error::RecvError::Lagged(_)) => {
                        self.watch_everyone()
                    }
                    Ok(change) => {
                        if let Some(cluster) = change.object().and_then(|report| report.namespace()) {
                            self.watch(&cluster);
                        }
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
                _ = rescans.tick() => self.watch_everyone(),
                () = expiry => {
                    let (cluster, _) = soonest?;
                    self.deadlines.remove(&cluster);
                    self.announce(&cluster);
                    return Some(cluster);
                }
            }
        }
    }
}
