//! The route scheduler on a spoke: reads Routers, Routes, RouteBindings, namespaces and the
//! Routers' Services, runs [`crate::routes::schedule`], and writes what it decided: bindings
//! (created and deleted only here), each route's `status.ingress[]`, each Router's status, and
//! the round-robin cursor. It reports the shards (addresses and admitted routes) to the hub,
//! which publishes `*.<suffix>` for them.
//!
//! Every pass recomputes the whole schedule from what the cluster holds, so a missed event or
//! a restart changes nothing: bindings are sticky because they are read back, not remembered.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use meridian_api::meridian::{RouteBinding, Router, RouterShardReport, RouterStatus, ShardRoute};
use meridian_api::upstream::{Route, RouteIngress, RouteIngressCondition};
use serde_json::json;
use tokio::sync::watch;

use crate::report::FIELD_MANAGER;
use crate::routes::{Admission, Binding, RouteView, Shard, binding_name, schedule, strategy_named};

/// Where the round-robin cursor is kept: a ConfigMap in the agent's namespace.
pub const CURSOR_CONFIG_MAP: &str = "meridian-route-scheduler";
/// The agent's own namespace on its cluster (the hub installs it there).
pub use meridian_api::names::AGENT_NAMESPACE;
const CURSOR_KEY: &str = "roundRobinCursor";
/// Label on bindings naming their Router.
pub const ROUTER_LABEL: &str = "meridian.dev/router";
/// A pass runs at least this often, so unschedulable routes are retried.
const RETRY: Duration = Duration::from_secs(30);

/// A Router as the scheduler takes it, or why it cannot.
fn shard_of(router: &Router) -> Result<Shard, String> {
    Ok(Shard {
        name: router.name_any(),
        dns: router.spec.dns.trim_end_matches('.').to_ascii_lowercase(),
        route_selector: meridian_controllers::decide::convert::label_selector(
            &router.spec.route_selector,
        )
        .map_err(|e| format!("spec.routeSelector: {e}"))?,
        namespace_selector: meridian_controllers::decide::convert::label_selector(
            &router.spec.namespace_selector,
        )
        .map_err(|e| format!("spec.namespaceSelector: {e}"))?,
        capacity: router.spec.capacity.and_then(|c| usize::try_from(c).ok()),
    })
}

/// The addresses a Service of type LoadBalancer was given.
fn service_addresses(service: &Service) -> Vec<String> {
    service
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|ingress| ingress.ip.clone().or_else(|| ingress.hostname.clone()))
        .collect()
}

/// A route's `status.ingress[]` for what the schedule says, keeping the transition times of
/// conditions that did not change.
pub fn ingress_entries(
    admissions: &[Admission],
    current: &[RouteIngress],
    now: &Time,
) -> Vec<RouteIngress> {
    admissions
        .iter()
        .map(|admission| {
            let status = if admission.admitted { "True" } else { "False" };
            let router = admission.router.clone().unwrap_or_else(|| "none".into());
            let since = current
                .iter()
                .find(|i| i.router_name.as_deref() == Some(router.as_str()))
                .and_then(|i| i.conditions.iter().find(|c| c.type_ == "Admitted"))
                .filter(|c| c.status == status)
                .and_then(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            RouteIngress {
                host: Some(admission.host.clone()).filter(|h| !h.is_empty()),
                router_name: Some(router),
                router_canonical_hostname: None,
                conditions: vec![RouteIngressCondition {
                    type_: "Admitted".into(),
                    status: status.into(),
                    reason: admission.reason.map(str::to_string),
                    message: admission.message.clone(),
                    last_transition_time: Some(since),
                }],
            }
        })
        .collect()
}

/// Runs the scheduler until the process ends. `strategy` is a name from
/// [`crate::routes::strategy_named`]; `namespace` is the agent's own, where it keeps its cursor.
pub async fn run(
    spoke: Client,
    strategy: String,
    namespace: String,
    shards: watch::Sender<Vec<RouterShardReport>>,
) -> anyhow::Result<()> {
    if strategy_named(&strategy, 0).is_none() {
        anyhow::bail!(
            "unknown route scheduling strategy {strategy:?} (round-robin, label-match, least-loaded)"
        );
    }
    let changes = futures::stream::select_all([
        changes_of::<Route>(&spoke),
        changes_of::<Router>(&spoke),
        changes_of::<RouteBinding>(&spoke),
        changes_of::<Namespace>(&spoke),
        changes_of::<Service>(&spoke),
    ]);
    let mut changes = std::pin::pin!(changes);
    let mut retry = tokio::time::interval(RETRY);
    loop {
        tokio::select! {
            _ = changes.next() => {
                // Let a burst of events settle into one pass.
                tokio::time::sleep(Duration::from_millis(200)).await;
                while let Some(Some(_)) = futures::FutureExt::now_or_never(changes.next()) {}
            }
            _ = retry.tick() => {}
        }
        match pass(&spoke, &strategy, &namespace).await {
            Ok(reports) => {
                shards.send_if_modified(|current| {
                    let changed = *current != reports;
                    *current = reports;
                    changed
                });
            }
            Err(error) => {
                tracing::warn!(%error, "a scheduling pass failed; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// A stream that yields whenever an object of kind `K` changes (errors are retried inside).
fn changes_of<K>(client: &Client) -> futures::stream::BoxStream<'static, ()>
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + 'static,
{
    watcher(Api::<K>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .filter_map(|event| async move {
            match event {
                Ok(
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone,
                ) => Some(()),
                Ok(_) => None,
                Err(error) => {
                    tracing::debug!(%error, "a scheduler watch failed; it restarts with backoff");
                    None
                }
            }
        })
        .boxed()
}

/// One scheduling pass; returns the shards to report.
async fn pass(
    spoke: &Client,
    strategy_name: &str,
    namespace: &str,
) -> Result<Vec<RouterShardReport>, kube::Error> {
    let routers = Api::<Router>::all(spoke.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let routes = match Api::<Route>::all(spoke.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(list) => list.items,
        // No Route kind on this cluster: nothing to schedule.
        Err(kube::Error::Api(status)) if status.code == 404 => Vec::new(),
        Err(error) => return Err(error),
    };
    let existing_bindings = Api::<RouteBinding>::all(spoke.clone())
        .list(&ListParams::default())
        .await?
        .items;
    let namespace_labels: BTreeMap<String, BTreeMap<String, String>> =
        Api::<Namespace>::all(spoke.clone())
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|ns| (ns.name_any(), ns.labels().clone()))
            .collect();
    let cursors: Api<ConfigMap> = Api::namespaced(spoke.clone(), namespace);
    let cursor: u64 = cursors
        .get_opt(CURSOR_CONFIG_MAP)
        .await?
        .and_then(|cm| cm.data?.get(CURSOR_KEY)?.parse().ok())
        .unwrap_or(0);

    let mut shards = Vec::new();
    let mut invalid: BTreeMap<String, String> = BTreeMap::new();
    for router in &routers {
        match shard_of(router) {
            Ok(shard) if router.metadata.deletion_timestamp.is_none() => shards.push(shard),
            Ok(_) => {}
            Err(problem) => {
                invalid.insert(router.name_any(), problem);
            }
        }
    }
    let views: Vec<RouteView> = routes
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .map(|route| {
            let namespace = route.namespace().unwrap_or_default();
            RouteView {
                namespace_labels: namespace_labels
                    .get(&namespace)
                    .cloned()
                    .unwrap_or_default(),
                namespace,
                name: route.name_any(),
                uid: route.uid().unwrap_or_default(),
                created: route
                    .metadata
                    .creation_timestamp
                    .as_ref()
                    .map_or(0, |t| t.0.as_second()),
                labels: route.labels().clone(),
                host: route.spec.host.clone().filter(|h| !h.is_empty()),
            }
        })
        .collect();
    let existing: Vec<Binding> = existing_bindings
        .iter()
        .filter(|b| b.metadata.deletion_timestamp.is_none())
        .map(|b| Binding {
            namespace: b.namespace().unwrap_or_default(),
            route: b.spec.route_ref.name.clone(),
            router: b.spec.router.clone(),
            host: b.spec.host.clone(),
        })
        .collect();
    let mut strategy = strategy_named(strategy_name, cursor).expect("checked at start");
    let planned = schedule(&views, &shards, &existing, strategy.as_mut());

    write_bindings(spoke, &planned.bindings, &existing_bindings).await?;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    for route in &routes {
        let key = (route.namespace().unwrap_or_default(), route.name_any());
        let Some(admissions) = planned.admissions.get(&key) else {
            continue;
        };
        let current = route
            .status
            .as_ref()
            .map(|s| s.ingress.clone())
            .unwrap_or_default();
        let wanted = ingress_entries(admissions, &current, &now);
        if wanted != current {
            Api::<Route>::namespaced(spoke.clone(), &key.0)
                .patch_status(
                    &key.1,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": { "ingress": wanted } })),
                )
                .await?;
        }
    }

    let mut reports = Vec::new();
    for router in &routers {
        let addresses = match &router.spec.service {
            Some(service) => Api::<Service>::namespaced(spoke.clone(), &service.namespace)
                .get_opt(&service.name)
                .await?
                .map(|s| service_addresses(&s))
                .unwrap_or_default(),
            None => router.spec.addresses.clone(),
        };
        let name = router.name_any();
        let routes_here: Vec<ShardRoute> = planned
            .bindings
            .iter()
            .filter(|b| b.router == name)
            .map(|b| ShardRoute {
                namespace: b.namespace.clone(),
                name: b.route.clone(),
                host: b.host.clone(),
            })
            .collect();
        let (ready, reason, message) = if let Some(problem) = invalid.get(&name) {
            (false, "InvalidSelector", problem.clone())
        } else if addresses.is_empty() {
            let source = match &router.spec.service {
                Some(s) => format!(
                    "Service {}/{} has no load-balancer address yet",
                    s.namespace, s.name
                ),
                None => "spec.addresses is empty".into(),
            };
            (false, "NoAddresses", source)
        } else {
            (
                true,
                "Serving",
                format!("{} routes at {}", routes_here.len(), addresses.join(", ")),
            )
        };
        write_router_status(
            spoke,
            router,
            &addresses,
            routes_here.len(),
            (ready, reason, message),
        )
        .await?;
        if !invalid.contains_key(&name) {
            reports.push(RouterShardReport {
                name,
                dns: router.spec.dns.trim_end_matches('.').to_ascii_lowercase(),
                addresses,
                routes: routes_here,
            });
        }
    }

    if let Some(cursor_now) = strategy.cursor().filter(|now| *now != cursor) {
        cursors
            .patch(
                CURSOR_CONFIG_MAP,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": { "name": CURSOR_CONFIG_MAP, "namespace": namespace },
                    "data": { CURSOR_KEY: cursor_now.to_string() },
                })),
            )
            .await?;
    }
    Ok(reports)
}

/// Creates the planned bindings that are missing or changed and deletes the rest.
async fn write_bindings(
    spoke: &Client,
    planned: &[Binding],
    existing: &[RouteBinding],
) -> Result<(), kube::Error> {
    for binding in planned {
        let name = binding_name(&binding.route, &binding.router);
        let current = existing.iter().find(|b| {
            b.namespace().as_deref() == Some(binding.namespace.as_str()) && b.name_any() == name
        });
        let api: Api<RouteBinding> = Api::namespaced(spoke.clone(), &binding.namespace);
        if current.is_none_or(|b| b.spec.host != binding.host) {
            api.patch(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(json!({
                    "apiVersion": "meridian.dev/v1alpha1", "kind": "RouteBinding",
                    "metadata": { "name": name, "namespace": binding.namespace, "labels": { ROUTER_LABEL: binding.router } },
                    "spec": {
                        "routeRef": { "kind": "Route", "name": binding.route },
                        "router": binding.router,
                        "host": binding.host,
                    },
                })),
            )
            .await?;
        }
        let admitted = current.and_then(|b| b.status.as_ref()).is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "Admitted" && c.status == "True")
        });
        if current.is_none() || !admitted {
            api.patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(json!({
                    "apiVersion": "meridian.dev/v1alpha1", "kind": "RouteBinding",
                    "status": { "conditions": [{
                        "type": "Admitted", "status": "True", "reason": "Scheduled",
                        "message": format!("served by Router {} at {}", binding.router, binding.host),
                        "lastTransitionTime": Time(k8s_openapi::jiff::Timestamp::now()),
                    }] },
                })),
            )
            .await?;
        }
    }
    for stale in existing.iter().filter(|b| {
        !planned.iter().any(|p| {
            b.namespace().as_deref() == Some(p.namespace.as_str())
                && b.name_any() == binding_name(&p.route, &p.router)
        })
    }) {
        if stale.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let api: Api<RouteBinding> =
            Api::namespaced(spoke.clone(), &stale.namespace().unwrap_or_default());
        match api
            .delete(&stale.name_any(), &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

async fn write_router_status(
    spoke: &Client,
    router: &Router,
    addresses: &[String],
    routes: usize,
    (ready, reason, message): (bool, &str, String),
) -> Result<(), kube::Error> {
    let mut status: RouterStatus = router.status.clone().unwrap_or_default();
    status.addresses = addresses.to_vec();
    status.routes = i32::try_from(routes).unwrap_or(i32::MAX);
    status.observed_generation = router.metadata.generation;
    meridian_api::conditions::set_condition(
        &mut status.conditions,
        meridian_api::conditions::ConditionUpdate {
            type_: meridian_api::conditions::READY,
            status: ready,
            reason,
            message,
        },
        router.metadata.generation,
        &Time(k8s_openapi::jiff::Timestamp::now()),
    );
    if router.status.as_ref() == Some(&status) {
        return Ok(());
    }
    Api::<Router>::all(spoke.clone())
        .patch_status(
            &router.name_any(),
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "meridian.dev/v1alpha1", "kind": "Router",
                "status": status,
            })),
        )
        .await?;
    Ok(())
}
