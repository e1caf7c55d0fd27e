//! What wakes a policy: the trigger streams over the shared caches, built from pure predicates:
//! the policy's own below (which changes to reports, clusters, Gateways and records concern
//! it), and the indexes several controllers share in [`crate::runtime::indexes`].

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
use meridian_api::upstream::{Gateway, ListenerSet, ManagedCluster, PlacementDecision};
use tokio::sync::broadcast;
use tokio::time::Instant;

use crate::decide::desired::until_silent;
use crate::runtime::caches::{Change, everything_once, own_changes_beyond_status, triggers};
use crate::{Context, POLICY_LABEL, runtime::indexes};

/// Every policy once at start, its own changes but to its status, and: its DNSRecords (not
/// their creation); its Gateway (not its conditions, nor its listeners'); a
/// ManagedZone of its namespace; a ListenerSet naming its Gateway, or the one it targets; and
/// on the hub, a change to the placement of its Gateway, or in what a placed cluster says
/// (labels, report, coming back after a silence).
pub fn requests(ctx: &Arc<Context>) -> Vec<BoxStream<'static, ObjectRef<DNSPolicy>>> {
    let caches = &ctx.caches;
    let all = caches.policies.store().clone();
    let by_gateway = {
        let caches = caches.clone();
        move |change: &Change<Gateway>| {
            let gateway = match change {
                Change::Applied { old, new } => {
                    if !gateway_changed_for_dns(old.as_deref(), new) {
                        return Vec::new();
                    }
                    new
                }
                Change::Deleted(gateway) => gateway,
                Change::Relisted => return Vec::new(),
            };
            super::gather::policies_on_gateway(
                &caches,
                &gateway.namespace().unwrap_or_default(),
                &gateway.name_any(),
            )
            .iter()
            .map(|p| ObjectRef::from_obj(&**p))
            .collect()
        }
    };
    // A policy appearing, changing or going changes which listeners its rivals on the same
    // Gateway cover (a section-targeted one takes its listener from a Gateway-wide one) and
    // which of equals holds the Gateway: the rivals on the Gateway it was on, and on the one
    // it is on.
    let by_rival = {
        let caches = caches.clone();
        move |change: &Change<DNSPolicy>| {
            let (policy, before) = match change {
                Change::Applied { old, new } if policy_changed_for_rivals(old.as_deref(), new) => {
                    (new, old.as_deref())
                }
                Change::Deleted(policy) => (policy, None),
                _ => return Vec::new(),
            };
            let sets = caches.listener_sets.state();
            let gateways: BTreeSet<(String, String)> = [Some(&**policy), before]
                .into_iter()
                .flatten()
                .filter_map(|p| indexes::policy_gateway(p, &sets))
                .collect();
            let own = ObjectRef::from_obj(&**policy);
            let mut rivals: Vec<ObjectRef<DNSPolicy>> = gateways
                .iter()
                .flat_map(|(namespace, name)| {
                    super::gather::policies_on_gateway(&caches, namespace, name)
                })
                .map(|p| ObjectRef::from_obj(&*p))
                .filter(|rival| *rival != own)
                .collect();
            rivals.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            rivals.dedup();
            rivals
        }
    };
    let by_record = {
        let policies_store = all.clone();
        move |change: &Change<DNSRecord>| {
            let (record, before) = match change {
                Change::Applied { old, new } if record_changed_for_policy(old.as_deref(), new) => {
                    (new, old.as_deref())
                }
                Change::Deleted(record) => (record, None),
                _ => return Vec::new(),
            };
            // A record taken over by another policy (a listener's passing between a Gateway-wide
            // policy and a listener policy) concerns the one that had it too: its status, or its
            // deletion waiting for the hand-over.
            let namespace = record.namespace().unwrap_or_default();
            let mut policies: Vec<ObjectRef<DNSPolicy>> = [Some(&**record), before]
                .into_iter()
                .flatten()
                .filter_map(|r| r.labels().get(POLICY_LABEL))
                .map(|policy| ObjectRef::new(policy).within(&namespace))
                .collect();
            // A record going, or changing hands, frees its name for a policy that left it alone
            // as another's (`gather::foreign_records`): the policies whose `<gateway>-<listener>`
            // it could be look again.
            let freed = match change {
                Change::Deleted(_) => true,
                _ => before.is_some_and(|b| {
                    b.labels().get(POLICY_LABEL) != record.labels().get(POLICY_LABEL)
                }),
            };
            if freed {
                let name = record.name_any();
                // A policy for a ListenerSet names its records after the ListenerSet's
                // Gateway: it looks again whatever the name.
                policies.extend(
                    policies_store
                        .state()
                        .iter()
                        .filter(|p| p.namespace().as_deref() == Some(namespace.as_str()))
                        .filter(|p| {
                            p.spec.target_ref.is_listener_set()
                                || name.starts_with(&format!("{}-", p.spec.target_ref.name))
                        })
                        .map(|p| ObjectRef::from_obj(&**p)),
                );
            }
            policies.sort_by(|a, b| a.name.cmp(&b.name));
            policies.dedup();
            policies
        }
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
    // A ListenerSet adds, changes or takes away listeners of the Gateway it names (of both, when
    // it moves from one to another), and concerns the policies targeting it (one that names
    // no Gateway, or is gone, is refused).
    let by_listener_set = {
        let caches = caches.clone();
        move |change: &Change<ListenerSet>| {
            let Some((before, after)) = change.before_after() else {
                return Vec::new();
            };
            let gateways = indexes::gateways_of_listener_set_change(before, after);
            let targeting = [before, after].into_iter().flatten().flat_map(|set| {
                caches.policies.group(&indexes::listener_set_policies(
                    &set.namespace().unwrap_or_default(),
                    &set.name_any(),
                ))
            });
            let mut policies: Vec<ObjectRef<DNSPolicy>> = gateways
                .iter()
                .flat_map(|(namespace, name)| {
                    super::gather::policies_on_gateway(&caches, namespace, name)
                })
                .chain(targeting)
                .map(|p| ObjectRef::from_obj(&*p))
                .collect();
            policies.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
            policies.dedup();
            policies
        }
    };
    let mut requests = vec![
        everything_once(&caches.policies),
        // The policy's status is this controller's own write: it wakes nothing.
        own_changes_beyond_status(&caches.policies),
        triggers(caches.records.subscribe(), all.clone(), by_record),
        triggers(caches.gateways.subscribe(), all.clone(), by_gateway),
        triggers(caches.policies.subscribe(), all.clone(), by_rival),
        triggers(caches.zones.subscribe(), all.clone(), by_zone),
        triggers(
            caches.listener_sets.subscribe(),
            all.clone(),
            by_listener_set,
        ),
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
                &caches.listener_sets.state(),
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
                    &caches.listener_sets.state(),
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
            Change::Applied { old, new } if cluster_changed_for_dns(old.as_deref(), new) => {
                on_cluster(&new.name_any())
            }
            Change::Deleted(cluster) => on_cluster(&cluster.name_any()),
            _ => Vec::new(),
        }
    };
    let by_report = {
        let on_cluster = on_cluster.clone();
        move |change: &Change<ClusterReport>| match change {
            Change::Applied { old, new } if report_changed_for_policies(old.as_deref(), new) => {
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
            if heartbeat_revives(old.as_deref().and_then(renewed), renewed(new), timeout) {
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
            &caches.listener_sets.state(),
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

/// Whether a report changed in what the DNSPolicies read of it: the cluster ID and the
/// Gateways. Probe results and router shards are other controllers' business, and the report's
/// time is the heartbeat's.
pub fn report_changed_for_policies(old: Option<&ClusterReport>, new: &ClusterReport) -> bool {
    old.is_none_or(|old| {
        old.spec.cluster_id != new.spec.cluster_id || old.spec.gateways != new.spec.gateways
    })
}

/// Whether a policy changed in what its rivals on the same Gateway read of it: it is new, its
/// spec changed (its generation), or it is being deleted. Its status is nobody else's concern.
pub fn policy_changed_for_rivals(old: Option<&DNSPolicy>, new: &DNSPolicy) -> bool {
    old.is_none_or(|old| {
        old.metadata.generation != new.metadata.generation
            || old.metadata.deletion_timestamp.is_some()
                != new.metadata.deletion_timestamp.is_some()
    })
}

/// Whether a ManagedCluster changed in what DNS reads of it: its labels (geo code, custom
/// weights). Its status changes with every OCM lease renewal and concerns nobody here.
pub fn cluster_changed_for_dns(old: Option<&ManagedCluster>, new: &ManagedCluster) -> bool {
    old.is_none_or(|old| old.labels() != new.labels())
}

/// Whether a Gateway changed in what policies read of it: spec, labels (its placement),
/// annotations, being deleted, and status but its conditions and its listeners' (addresses and
/// listeners, which an agent's policies read in distributed mode). The conditions are other
/// controllers' and our own `DNSPolicyAffected`: reading its write as a change would wake the
/// policy that just wrote it.
pub fn gateway_changed_for_dns(old: Option<&Gateway>, new: &Gateway) -> bool {
    let Some(old) = old else {
        return true;
    };
    // No status and a status of conditions only are the same to DNS.
    let without_conditions = |gateway: &Gateway| {
        let mut status = gateway.status.clone().unwrap_or_default();
        status.conditions.clear();
        for listener in &mut status.listeners {
            listener.conditions.clear();
        }
        status
    };
    old.spec != new.spec
        || old.labels() != new.labels()
        || old.annotations() != new.annotations()
        || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
        || without_conditions(old) != without_conditions(new)
}

/// Whether a DNSRecord changed in what its policy reads: its status (published, ready), its
/// spec or labels (someone else's edit, which the policy undoes), being deleted. A record's
/// creation is not: its policy created it, and the status that follows wakes the policy.
pub fn record_changed_for_policy(old: Option<&DNSRecord>, new: &DNSRecord) -> bool {
    old.is_some_and(|old| {
        old.status != new.status
            || old.spec != new.spec
            || old.labels() != new.labels()
            || old.metadata.deletion_timestamp != new.metadata.deletion_timestamp
    })
}

/// Whether a heartbeat brings a cluster back: it was not heard from within `timeout` before
/// this renewal (or never), so the policies that left it out must look again.
pub fn heartbeat_revives(
    previous: Option<k8s_openapi::jiff::Timestamp>,
    renewed: Option<k8s_openapi::jiff::Timestamp>,
    timeout: std::time::Duration,
) -> bool {
    match (previous, renewed) {
        (_, None) => false,
        (None, Some(_)) => true,
        (Some(previous), Some(renewed)) => {
            std::time::Duration::try_from(renewed.duration_since(previous)).unwrap_or_default()
                > timeout
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_api::labels::PLACEMENT_LABEL;
    use meridian_testkit::fixtures;

    #[test]
    fn rivals_wake_for_a_new_policy_a_spec_change_or_a_deletion_not_for_status() {
        let policy = fixtures::dns_policy("shop", "api", "web").generation(1);
        let base = policy.build();
        let mut status_only = base.clone();
        status_only.status = Some(Default::default());
        let respecified = policy.clone().generation(2).build();
        let mut deleting = base.clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::from_second(1).unwrap(),
            ));
        for (old, new, wakes) in [
            (None, &base, true),
            (Some(&base), &status_only, false),
            (Some(&base), &respecified, true),
            (Some(&base), &deleting, true),
        ] {
            assert_eq!(
                policy_changed_for_rivals(old, new),
                wakes,
                "{old:?} -> {new:?}"
            );
        }
    }

    /// spoke c1's report at `at` (seconds), its one Gateway at `gateway_ip`.
    fn report(gateway_ip: &str, at: i64) -> ClusterReport {
        let mut report = fixtures::cluster_report("c1", "id")
            .gateway("kuadrant-gw", "web-gw", gateway_ip)
            .build();
        report.spec.reported_at = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            k8s_openapi::jiff::Timestamp::from_second(at).unwrap(),
        ));
        report
    }

    #[test]
    fn only_report_changes_the_policies_read_wake_them() {
        let base = report("10.0.0.1", 100);
        let mut shards_only = base.clone();
        shards_only.spec.router_shards = vec![meridian_api::meridian::RouterShardReport {
            name: "default".into(),
            dns: "apps.c1.example.com".into(),
            addresses: vec!["10.0.0.9".into()],
            routes: Vec::new(),
        }];
        let cases = [
            (report("10.0.0.1", 200), false, "a newer time only"),
            (shards_only, false, "router shards only"),
            (report("10.0.0.2", 100), true, "a gateway address"),
        ];
        for (new, wakes, what) in cases {
            assert_eq!(
                report_changed_for_policies(Some(&base), &new),
                wakes,
                "{what}"
            );
        }
        assert!(report_changed_for_policies(None, &base), "a first report");
    }

    #[test]
    fn gateway_conditions_do_not_concern_dns() {
        use meridian_api::upstream::{GatewayStatus, GatewayStatusAddress};
        let gateway = fixtures::gateway("gateways", "api")
            .placement("everywhere")
            .build();
        let mut affected = gateway.clone();
        affected.status = Some(GatewayStatus::default());
        affected.status.as_mut().unwrap().conditions =
            vec![fixtures::condition("DNSPolicyAffected")];
        let mut programmed = affected.clone();
        programmed
            .status
            .as_mut()
            .unwrap()
            .conditions
            .push(fixtures::condition("Programmed"));
        let mut addressed = affected.clone();
        addressed.status.as_mut().unwrap().addresses = vec![GatewayStatusAddress {
            type_: None,
            value: "10.0.0.1".into(),
        }];
        let listed = |conditions: &[&str]| {
            let mut listed = affected.clone();
            listed.status.as_mut().unwrap().listeners =
                vec![meridian_api::upstream::ListenerStatus {
                    name: "api".into(),
                    conditions: conditions.iter().map(|c| fixtures::condition(c)).collect(),
                    ..Default::default()
                }];
            listed
        };
        let (listed_bare, listed_affected) = (listed(&[]), listed(&["DNSPolicyAffected"]));
        let mut moved = gateway.clone();
        moved.metadata.labels = Some([(PLACEMENT_LABEL.into(), "elsewhere".into())].into());
        let mut finalized = gateway.clone();
        finalized.metadata.finalizers = Some(vec!["meridian.dev/gateway-placement".into()]);
        let mut deleting = gateway.clone();
        deleting.metadata.deletion_timestamp = Some(crate::now());
        let cases: [(Option<&Gateway>, &Gateway, bool, &str); 9] = [
            (None, &gateway, true, "a new Gateway"),
            (
                Some(&affected),
                &listed_bare,
                true,
                "a listener listed (distributed mode reads it)",
            ),
            (
                Some(&listed_bare),
                &listed_affected,
                false,
                "our listener's DNSPolicyAffected",
            ),
            (Some(&gateway), &affected, false, "our DNSPolicyAffected"),
            (
                Some(&affected),
                &programmed,
                false,
                "another controller's condition",
            ),
            (
                Some(&affected),
                &addressed,
                true,
                "an address (distributed mode reads it)",
            ),
            (Some(&gateway), &moved, true, "another placement"),
            (Some(&gateway), &finalized, false, "placement's finalizer"),
            (Some(&gateway), &deleting, true, "being deleted"),
        ];
        for (old, new, changed, case) in cases {
            assert_eq!(gateway_changed_for_dns(old, new), changed, "{case}");
        }
    }

    #[test]
    fn cluster_status_changes_do_not_concern_dns() {
        let mut cluster = ManagedCluster::new("c1", Default::default());
        cluster.metadata.labels =
            Some([("kuadrant.io/lb-attribute-geo-code".into(), "IE".into())].into());
        let mut status_only = cluster.clone();
        status_only.metadata.resource_version = Some("2".into());
        let mut relabelled = cluster.clone();
        relabelled.metadata.labels =
            Some([("kuadrant.io/lb-attribute-geo-code".into(), "US".into())].into());
        assert!(!cluster_changed_for_dns(Some(&cluster), &status_only));
        assert!(cluster_changed_for_dns(Some(&cluster), &relabelled));
        assert!(cluster_changed_for_dns(None, &cluster));
    }

    #[test]
    fn a_heartbeat_wakes_policies_only_when_it_ends_a_silence() {
        let at = |s: i64| Some(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let timeout = std::time::Duration::from_secs(120);
        let cases = [
            (at(100), at(130), false, "a regular renewal"),
            (at(100), at(221), true, "back after more than the timeout"),
            (None, at(100), true, "a first heartbeat"),
            (at(100), None, false, "no renewal time"),
        ];
        for (previous, renewed, wakes, what) in cases {
            assert_eq!(
                heartbeat_revives(previous, renewed, timeout),
                wakes,
                "{what}"
            );
        }
    }

    #[test]
    fn a_record_wakes_its_policy_when_it_changes_not_when_it_is_created() {
        use meridian_api::kuadrant::DNSRecordStatus;
        let record = fixtures::dns_record("gateways", "api-http", "example")
            .root_host("api.example.com")
            .build();
        let mut published = record.clone();
        published.status = Some(DNSRecordStatus {
            observed_generation: Some(1),
            ..Default::default()
        });
        let mut edited = record.clone();
        edited.spec.root_host = "www.example.com".into();
        let mut deleting = record.clone();
        deleting.metadata.deletion_timestamp = Some(crate::now());
        let mut finalized = record.clone();
        finalized.metadata.finalizers = Some(vec!["meridian.dev/dns-record".into()]);
        let cases: [(Option<&DNSRecord>, &DNSRecord, bool, &str); 5] = [
            (None, &record, false, "created (by its policy)"),
            (Some(&record), &published, true, "published"),
            (Some(&record), &edited, true, "edited by someone"),
            (Some(&record), &deleting, true, "being deleted"),
            (Some(&record), &finalized, false, "its finalizer"),
        ];
        for (old, new, changed, case) in cases {
            assert_eq!(record_changed_for_policy(old, new), changed, "{case}");
        }
    }
}
