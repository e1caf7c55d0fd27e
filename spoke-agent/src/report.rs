//! The agent's report loop: watch the downstream Gateways of this cluster and keep the
//! cluster's `ClusterReport` on the hub current. The report is written with server-side apply
//! into the cluster's own namespace on the hub (the only place the agent may write there) when
//! what it says changes, and refreshed every [`REPORT_REFRESH_HEARTBEATS`] heartbeats. Probe
//! results travel separately ([`crate::probe_results`]). Liveness is the heartbeat Lease the hub created in the same
//! namespace, renewed every heartbeat: a renewal is a few hundred bytes and wakes no policy on
//! the hub. Where the Lease is missing (a hub that creates none) the report itself is rewritten
//! every heartbeat, as before. Watches and writes that fail are retried with backoff, so after
//! a hub outage the agent reconnects and rewrites the whole report: nothing is duplicated (one
//! object, one field manager) and nothing is lost (it is always whole).

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use meridian_api::meridian::{ClusterReport, ClusterReportSpec, GatewayReport, RouterShardReport};
use meridian_api::upstream::{Gateway, HTTPRoute, ListenerSet};
use rand::Rng;
use serde_json::json;

/// The one field manager the agent writes with.
pub const FIELD_MANAGER: &str = "meridian-agent";
/// Name of the agent's report in its cluster namespace on the hub.
pub const REPORT_NAME: &str = meridian_api::names::CLUSTER_REPORT;
/// How many heartbeats pass between rewrites of an unchanged report; the Lease carries
/// liveness in between.
pub const REPORT_REFRESH_HEARTBEATS: u32 = 10;
/// Downstream Gateways live in namespaces with this prefix (`kuadrant-<hub namespace>`).
pub const DOWNSTREAM_PREFIX: &str = "kuadrant-";

/// The report for a set of Gateways, the ListenerSets copied beside them and the HTTPRoutes
/// of the cluster, in a stable order (so an unchanged cluster writes an unchanged report).
pub fn cluster_report(
    cluster_id: &str,
    gateways: &[Gateway],
    sets: &[ListenerSet],
    routes: &[HTTPRoute],
    findings: &Findings,
    reported_at: Option<Time>,
) -> ClusterReportSpec {
    let mut reports: Vec<GatewayReport> = gateways
        .iter()
        .filter(|g| {
            g.namespace()
                .is_some_and(|ns| ns.starts_with(DOWNSTREAM_PREFIX))
        })
        .map(|gateway| GatewayReport::from_gateway(gateway, sets, routes))
        .collect();
    reports.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    ClusterReportSpec {
        cluster_id: cluster_id.to_string(),
        reported_at,
        gateways: reports,
        router_shards: findings.shards.clone(),
    }
}

/// This cluster's ID: the UID of its `kube-system` namespace.
pub async fn cluster_id(spoke: &Client) -> Result<String, kube::Error> {
    let namespace = Api::<Namespace>::all(spoke.clone())
        .get("kube-system")
        .await?;
    Ok(namespace.metadata.uid.unwrap_or_default())
}

/// Writes the report; returns whether the hub took it.
async fn write_report(hub: &Client, cluster_name: &str, spec: &ClusterReportSpec) -> bool {
    let api: Api<ClusterReport> = Api::namespaced(hub.clone(), cluster_name);
    let report = json!({
        "apiVersion": "meridian.dev/v1alpha1",
        "kind": "ClusterReport",
        "metadata": { "name": REPORT_NAME, "namespace": cluster_name },
        "spec": spec,
    });
    match api
        .patch(
            REPORT_NAME,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(report),
        )
        .await
    {
        Ok(_) => true,
        Err(error) => {
            tracing::warn!(%error, "writing the report to the hub failed; retrying");
            false
        }
    }
}

/// Renews the cluster's heartbeat Lease on the hub; returns whether the hub took it (false
/// when the Lease does not exist or may not be renewed).
async fn renew_heartbeat(hub: &Client, cluster_name: &str, heartbeat: Duration) -> bool {
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let api: Api<Lease> = Api::namespaced(hub.clone(), cluster_name);
    let patch = json!({
        "spec": {
            "holderIdentity": cluster_name,
            "leaseDurationSeconds": heartbeat.as_secs().max(1),
            "renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now()),
        }
    });
    match api
        .patch(
            meridian_api::names::HEARTBEAT_LEASE,
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => true,
        Err(error) => {
            tracing::debug!(%error, "renewing the heartbeat Lease failed; the report carries the heartbeat");
            false
        }
    }
}

/// An HTTPRoute as the report reads it: hostnames, parents and their conditions; its rules,
/// annotations and managed fields are dropped before they are stored.
fn slim_route(route: &mut HTTPRoute) {
    route.metadata.managed_fields = None;
    route.metadata.annotations = None;
    route.spec.extra.clear();
    if let Some(status) = &mut route.status {
        status.extra.clear();
        for parent in &mut status.parents {
            parent.extra.clear();
            parent.conditions.retain(|c| c.type_ == "Accepted");
        }
    }
}

/// What the agent's other loops add to the report.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Findings {
    /// The route scheduler's shards.
    pub shards: Vec<RouterShardReport>,
}

/// Runs the report loop until the process ends. `shards` carries the route scheduler's
/// results; it notifies when they change, and its latest value travels with every write.
pub async fn run(
    spoke: Client,
    hub: Client,
    cluster_name: String,
    heartbeat: Duration,
    mut shards: tokio::sync::watch::Receiver<Vec<RouterShardReport>>,
) -> anyhow::Result<()> {
    let cluster_id = loop {
        match cluster_id(&spoke).await {
            Ok(id) => break id,
            Err(error) => {
                tracing::warn!(%error, "cannot read kube-system on this cluster; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    tracing::info!(cluster = %cluster_name, %cluster_id, "reporting to the hub");
    let gateways = watcher(
        Api::<Gateway>::all(spoke.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .applied_objects();
    let mut gateways = std::pin::pin!(gateways);
    let mut known: BTreeMap<(String, String), Gateway> = BTreeMap::new();
    // The hostnames of routes on wildcard listeners travel with the report: the hub probes
    // those listeners through them. A cluster may hold thousands of routes: the store keeps
    // only what the report reads (hostnames, parents, acceptance), and follows deletions
    // itself.
    let (route_store, route_writer) = kube::runtime::reflector::store();
    let routes = watcher(
        Api::<HTTPRoute>::all(spoke.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(slim_route)
    .reflect(route_writer)
    .touched_objects();
    let mut routes = std::pin::pin!(routes);
    let mut routes_open = true;
    // The ListenerSets the hub copies beside its Gateways: the routes their listeners have.
    let (set_store, set_writer) = kube::runtime::reflector::store();
    let sets = watcher(
        Api::<ListenerSet>::all(spoke.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .modify(|set: &mut ListenerSet| set.metadata.managed_fields = None)
    .reflect(set_writer)
    .touched_objects();
    let mut sets = std::pin::pin!(sets);
    let mut sets_open = true;
    let mut deletions = tokio::time::interval(heartbeat.min(Duration::from_secs(10)));
    let mut next_heartbeat = tokio::time::Instant::now();
    let mut next_refresh = tokio::time::Instant::now();
    let mut heartbeats = tokio::time::interval(heartbeat);
    let mut lease_renewed = false;
    let mut written: Option<ClusterReportSpec> = None;
    let mut failures = 0u32;
    let mut shards_open = true;
    let mut findings_changed = false;
    loop {
        tokio::select! {
            changed = shards.changed(), if shards_open => match changed {
                Ok(()) => findings_changed = true,
                Err(_) => shards_open = false,
            },
            event = gateways.next() => match event {
                Some(Ok(gateway)) => {
                    known.insert((gateway.namespace().unwrap_or_default(), gateway.name_any()), gateway);
                }
                Some(Err(error)) => tracing::warn!(%error, "watching Gateways failed; the watch restarts with backoff"),
                None => anyhow::bail!("the Gateway watch ended"),
            },
            event = routes.next(), if routes_open => match event {
                Some(Ok(_)) => {}
                // A cluster without the HTTPRoute CRD keeps reporting its Gateways.
                Some(Err(error)) => tracing::debug!(%error, "watching HTTPRoutes failed; the watch restarts with backoff"),
                None => routes_open = false,
            },
            event = sets.next(), if sets_open => match event {
                Some(Ok(_)) => {}
                // Nor one without ListenerSets (Gateway API before v1.5).
                Some(Err(error)) => tracing::debug!(%error, "watching ListenerSets failed; the watch restarts with backoff"),
                None => sets_open = false,
            },
            _ = heartbeats.tick() => {
                lease_renewed = renew_heartbeat(&hub, &cluster_name, heartbeat).await;
            }
            _ = deletions.tick() => {
                // `applied_objects` does not see deletions: re-list what still exists.
                if let Ok(list) = Api::<Gateway>::all(spoke.clone()).list(&Default::default()).await {
                    known = list.items.into_iter().map(|g| ((g.namespace().unwrap_or_default(), g.name_any()), g)).collect();
                }
            }
        }
        let current: Vec<Gateway> = known.values().cloned().collect();
        let current_routes: Vec<HTTPRoute> = route_store
            .state()
            .iter()
            .map(|route| (**route).clone())
            .collect();
        let current_sets: Vec<ListenerSet> = set_store
            .state()
            .iter()
            .map(|set| (**set).clone())
            .collect();
        let gateways_unchanged = written.as_ref().is_some_and(|w| {
            cluster_report(
                &cluster_id,
                &current,
                &current_sets,
                &current_routes,
                &Findings::default(),
                None,
            )
            .gateways
                == w.gateways
        });
        let now = tokio::time::Instant::now();
        // With a renewed Lease, an unchanged report waits for its refresh; without one, the
        // report is the heartbeat.
        let due = if lease_renewed {
            next_refresh
        } else {
            next_heartbeat
        };
        if gateways_unchanged && !findings_changed && now < due {
            continue;
        }
        let findings = Findings {
            shards: shards.borrow_and_update().clone(),
        };
        let spec = cluster_report(
            &cluster_id,
            &current,
            &current_sets,
            &current_routes,
            &findings,
            Some(Time(k8s_openapi::jiff::Timestamp::now())),
        );
        if write_report(&hub, &cluster_name, &spec).await {
            written = Some(spec);
            failures = 0;
            findings_changed = false;
            next_heartbeat = now + heartbeat;
            next_refresh = now + heartbeat * REPORT_REFRESH_HEARTBEATS;
        } else {
            // Back off with jitter; the next event or tick tries again.
            failures = failures.saturating_add(1);
            let ceiling = Duration::from_millis(500).saturating_mul(1 << failures.min(6));
            let delay = rand::rng().random_range(ceiling / 2..=ceiling);
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_api::upstream::{
        GatewaySpec, GatewayStatus, GatewayStatusAddress, Listener, ListenerStatus,
    };

    fn gateway(namespace: &str, name: &str, ip: Option<&str>) -> Gateway {
        let mut gateway = Gateway::new(
            name,
            GatewaySpec {
                gateway_class_name: "istio".into(),
                listeners: vec![Listener {
                    name: "api".into(),
                    hostname: Some("api.example.com".into()),
                    port: 443,
                    protocol: "HTTPS".into(),
                    extra: Default::default(),
                }],
                extra: Default::default(),
            },
        );
        gateway.metadata.namespace = Some(namespace.into());
        gateway.status = ip.map(|ip| GatewayStatus {
            addresses: vec![GatewayStatusAddress {
                type_: None,
                value: ip.into(),
            }],
            listeners: vec![ListenerStatus {
                name: "api".into(),
                attached_routes: 2,
                conditions: Vec::new(),
                extra: Default::default(),
            }],
            ..Default::default()
        });
        gateway
    }

    #[test]
    fn reports_downstream_gateways_in_a_stable_order_with_addresses_and_routes() {
        let gateways = [
            gateway("kuadrant-b", "web", Some("192.0.2.2")),
            gateway("default", "ignored", Some("192.0.2.9")),
            gateway("kuadrant-a", "web", Some("192.0.2.1")),
            gateway("kuadrant-a", "pending", None),
        ];
        let report = cluster_report("id-1", &gateways, &[], &[], &Findings::default(), None);
        let names: Vec<(&str, &str)> = report
            .gateways
            .iter()
            .map(|g| (g.namespace.as_str(), g.name.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("kuadrant-a", "pending"),
                ("kuadrant-a", "web"),
                ("kuadrant-b", "web")
            ]
        );
        let web = &report.gateways[1];
        assert_eq!(
            web.addresses[0].type_, "IPAddress",
            "the Gateway API default"
        );
        assert_eq!(web.listeners[0].attached_routes, Some(2));
        assert!(report.gateways[0].addresses.is_empty());
        assert_eq!(
            report.gateways[0].listeners[0].attached_routes, None,
            "a listener its Gateway's status does not name yet is not said to have no routes"
        );
    }
}
