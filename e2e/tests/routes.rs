//! Router shards and route scheduling (seed 003) on real API servers: the agent's scheduler
//! binds OpenShift Routes (the test bed's Route CRD) to Routers by each strategy, keeps
//! bindings sticky across restarts, generates hosts, resolves host conflicts the way OpenShift
//! does, reschedules the routes of a deleted shard, and says why a route cannot be scheduled.
//! End to end, the hub publishes `*.<shard suffix>` and `dig` resolves a generated route host
//! through the embedded nameserver, and an HTTPRoute's host under the suffix, which is not
//! scheduled.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use meridian_api::meridian::{RouteBinding, Router};
use meridian_api::upstream::Route;
use meridian_e2e::example::{apply, dig_host};
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, ensure_namespace, eventually};
use meridian_testkit::fixtures;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

const SHOP: &str = "shop";

async fn router(
    client: &Client,
    name: &str,
    selector: Value,
    addresses: &[&str],
    capacity: Option<i32>,
) -> Result<(), Error> {
    let mut spec = json!({
        "dns": format!("{name}.apps.example.com"),
        "routeSelector": selector,
        "addresses": addresses,
    });
    if let Some(capacity) = capacity {
        spec["capacity"] = json!(capacity);
    }
    apply(
        &Api::<Router>::all(client.clone()),
        json!({
            "apiVersion": "meridian.dev/v1alpha1", "kind": "Router",
            "metadata": { "name": name },
            "spec": spec,
        }),
    )
    .await?;
    Ok(())
}

async fn route(
    client: &Client,
    name: &str,
    labels: Value,
    host: Option<&str>,
) -> Result<(), Error> {
    let mut spec = json!({ "to": { "kind": "Service", "name": name } });
    if let Some(host) = host {
        spec["host"] = json!(host);
    }
    apply(
        &Api::<Route>::namespaced(client.clone(), SHOP),
        json!({
            "apiVersion": "route.openshift.io/v1", "kind": "Route",
            "metadata": { "name": name, "namespace": SHOP, "labels": labels },
            "spec": spec,
        }),
    )
    .await?;
    Ok(())
}

/// A route's `status.ingress[]` as (router, host, admitted, reason), sorted.
async fn ingress(
    client: &Client,
    name: &str,
) -> Result<Vec<(String, String, bool, String)>, Error> {
    let route = Api::<Route>::namespaced(client.clone(), SHOP)
        .get(name)
        .await?;
    let mut entries: Vec<(String, String, bool, String)> = route
        .status
        .map(|s| s.ingress)
        .unwrap_or_default()
        .into_iter()
        .map(|i| {
            let admitted = i.conditions.iter().find(|c| c.type_ == "Admitted");
            (
                i.router_name.unwrap_or_default(),
                i.host.unwrap_or_default(),
                admitted.is_some_and(|c| c.status == "True"),
                admitted.and_then(|c| c.reason.clone()).unwrap_or_default(),
            )
        })
        .collect();
    entries.sort();
    Ok(entries)
}

/// Waits until a route's ingress is exactly `expected`.
async fn ingress_becomes(
    client: &Client,
    name: &str,
    expected: &[(&str, &str, bool, &str)],
) -> Result<(), Error> {
    let expected: Vec<(String, String, bool, String)> = expected
        .iter()
        .map(|(r, h, a, why)| (r.to_string(), h.to_string(), *a, why.to_string()))
        .collect();
    eventually(
        &format!("route {name} shows {expected:?}"),
        DEFAULT_PATIENCE,
        || {
            let expected = expected.clone();
            async move {
                let seen = ingress(client, name).await?;
                Ok((seen == expected).then_some(()))
            }
        },
    )
    .await
}

fn scheduler(client: &Client, strategy: &str) -> JoinHandle<anyhow::Result<()>> {
    let (shards, _) = tokio::sync::watch::channel(Vec::new());
    tokio::spawn(meridian_agent::scheduler::run(
        client.clone(),
        strategy.into(),
        meridian_agent::scheduler::AGENT_NAMESPACE.into(),
        shards,
    ))
}

/// The bindings in the shop namespace as (route, router, host), sorted.
async fn bindings(client: &Client) -> Result<Vec<(String, String, String)>, Error> {
    let mut all: Vec<(String, String, String)> =
        Api::<RouteBinding>::namespaced(client.clone(), SHOP)
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .map(|b| (b.spec.route_ref.name, b.spec.router, b.spec.host))
            .collect();
    all.sort();
    Ok(all)
}

fn host(route: &str, shard: &str) -> String {
    format!("{SHOP}-{route}.{shard}.apps.example.com")
}

#[tokio::test]
async fn routes_are_scheduled_onto_router_shards_by_each_strategy() -> Result<(), Error> {
    let fleet = Fleet::builder().without_ocm().start().await?;
    let client = fleet.hub.client();
    ensure_namespace(&client, SHOP).await?;
    ensure_namespace(&client, meridian_agent::scheduler::AGENT_NAMESPACE).await?;
    router(
        &client,
        "shard-a",
        json!({}),
        &["192.0.2.10", "192.0.2.11"],
        None,
    )
    .await?;
    router(&client, "shard-b", json!({}), &["192.0.2.20"], None).await?;
    let mut running = scheduler(&client, "round-robin");

    // Round-robin, in creation order: a, b, a. Hosts are generated per shard.
    for name in ["r1", "r2", "r3"] {
        route(&client, name, json!({}), None).await?;
        // Distinct creation seconds keep the order the test expects.
        tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    }
    let (r1, r2, r3) = (
        host("r1", "shard-a"),
        host("r2", "shard-b"),
        host("r3", "shard-a"),
    );
    ingress_becomes(&client, "r1", &[("shard-a", &r1, true, "")]).await?;
    ingress_becomes(&client, "r2", &[("shard-b", &r2, true, "")]).await?;
    ingress_becomes(&client, "r3", &[("shard-a", &r3, true, "")]).await?;
    let routers = Api::<Router>::all(client.clone());
    eventually("router status counts routes", DEFAULT_PATIENCE, || async {
        let a = routers.get("shard-a").await?.status.unwrap_or_default();
        Ok((a.routes == 2 && a.addresses == ["192.0.2.10", "192.0.2.11"]).then_some(()))
    })
    .await?;
    let binding = Api::<RouteBinding>::namespaced(client.clone(), SHOP)
        .get("r2.shard-b")
        .await?;
    assert_eq!(binding.spec.host, r2);
    assert!(
        binding
            .status
            .unwrap()
            .conditions
            .iter()
            .any(|c| c.type_ == "Admitted" && c.status == "True")
    );

    // A restarted scheduler keeps every binding and continues from the persisted cursor.
    let cursors = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
        client.clone(),
        meridian_agent::scheduler::AGENT_NAMESPACE,
    );
    eventually("the cursor is persisted", DEFAULT_PATIENCE, || async {
        let cursor = cursors
            .get_opt(meridian_agent::scheduler::CURSOR_CONFIG_MAP)
            .await?
            .and_then(|c| c.data)
            .and_then(|d| d.get("roundRobinCursor").cloned());
        Ok((cursor.as_deref() == Some("3")).then_some(()))
    })
    .await?;
    running.abort();
    running = scheduler(&client, "round-robin");
    route(&client, "r4", json!({}), None).await?;
    let r4 = host("r4", "shard-b");
    ingress_becomes(&client, "r4", &[("shard-b", &r4, true, "")]).await?;
    assert_eq!(
        bindings(&client).await?,
        [
            ("r1".into(), "shard-a".into(), r1.clone()),
            ("r2".into(), "shard-b".into(), r2.clone()),
            ("r3".into(), "shard-a".into(), r3.clone()),
            ("r4".into(), "shard-b".into(), r4.clone()),
        ]
    );

    // Two routes claim one host: the older wins, the newer says why and waits.
    route(&client, "shop-old", json!({}), Some("shop.example.com")).await?;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    route(&client, "shop-new", json!({}), Some("shop.example.com")).await?;
    eventually(
        "the older route holds the host",
        DEFAULT_PATIENCE,
        || async {
            let old = ingress(&client, "shop-old").await?;
            let new = ingress(&client, "shop-new").await?;
            let old_admitted = old.len() == 1 && old[0].1 == "shop.example.com" && old[0].2;
            let new_refused = new.len() == 1 && !new[0].2 && new[0].3 == "HostAlreadyClaimed";
            Ok((old_admitted && new_refused).then_some(()))
        },
    )
    .await?;
    let refused = Api::<Route>::namespaced(client.clone(), SHOP)
        .get("shop-new")
        .await?;
    let message = refused.status.unwrap().ingress[0].conditions[0]
        .message
        .clone()
        .unwrap();
    assert!(message.contains("shop/shop-old"), "{message}");
    Api::<Route>::namespaced(client.clone(), SHOP)
        .delete("shop-old", &DeleteParams::default())
        .await?;
    eventually(
        "the newer route is admitted once the older goes",
        DEFAULT_PATIENCE,
        || async {
            let new = ingress(&client, "shop-new").await?;
            Ok((new.len() == 1 && new[0].2 && new[0].1 == "shop.example.com").then_some(()))
        },
    )
    .await?;

    // A shard deleted under its routes: they move to the shard left, with new hosts.
    routers.delete("shard-a", &DeleteParams::default()).await?;
    ingress_becomes(
        &client,
        "r1",
        &[("shard-b", &host("r1", "shard-b"), true, "")],
    )
    .await?;
    ingress_becomes(
        &client,
        "r3",
        &[("shard-b", &host("r3", "shard-b"), true, "")],
    )
    .await?;
    eventually(
        "no binding names the deleted shard",
        DEFAULT_PATIENCE,
        || async { Ok((!bindings(&client).await?.iter().any(|b| b.1 == "shard-a")).then_some(())) },
    )
    .await?;

    // A route no shard selects says so, and is scheduled once a shard selects it. shard-b
    // selects everything: narrow it to non-internal routes first.
    router(&client, "shard-b", json!({ "matchExpressions": [{ "key": "exposure", "operator": "NotIn", "values": ["internal"] }] }), &["192.0.2.20"], None).await?;
    eventually(
        "shard-b's new selector is seen",
        DEFAULT_PATIENCE,
        || async {
            let router = routers.get("shard-b").await?;
            let seen = router.status.as_ref().and_then(|s| s.observed_generation)
                == router.metadata.generation;
            Ok(seen.then_some(()))
        },
    )
    .await?;
    route(&client, "internal", json!({ "exposure": "internal" }), None).await?;
    ingress_becomes(
        &client,
        "internal",
        &[("none", "", false, "NoEligibleShard")],
    )
    .await?;
    router(
        &client,
        "shard-int",
        json!({ "matchLabels": { "exposure": "internal" } }),
        &["192.0.2.30"],
        None,
    )
    .await?;
    ingress_becomes(
        &client,
        "internal",
        &[("shard-int", &host("internal", "shard-int"), true, "")],
    )
    .await?;
    running.abort();

    // Least-loaded: shard-b holds 5 routes, shard-c none, so new routes go to shard-c.
    router(&client, "shard-c", json!({ "matchExpressions": [{ "key": "exposure", "operator": "NotIn", "values": ["internal"] }] }), &["192.0.2.40"], Some(1)).await?;
    running = scheduler(&client, "least-loaded");
    route(&client, "l1", json!({}), None).await?;
    ingress_becomes(
        &client,
        "l1",
        &[("shard-c", &host("l1", "shard-c"), true, "")],
    )
    .await?;
    // shard-c is full (capacity 1): the next one goes to shard-b.
    route(&client, "l2", json!({}), None).await?;
    ingress_becomes(
        &client,
        "l2",
        &[("shard-b", &host("l2", "shard-b"), true, "")],
    )
    .await?;
    running.abort();

    // Label-match: every shard that selects the route serves it.
    router(&client, "shard-c", json!({ "matchExpressions": [{ "key": "exposure", "operator": "NotIn", "values": ["internal"] }] }), &["192.0.2.40"], None).await?;
    running = scheduler(&client, "label-match");
    route(&client, "everywhere", json!({ "exposure": "public" }), None).await?;
    ingress_becomes(
        &client,
        "everywhere",
        &[
            ("shard-b", &host("everywhere", "shard-b"), true, ""),
            ("shard-c", &host("everywhere", "shard-c"), true, ""),
        ],
    )
    .await?;
    // Earlier bindings stay where they were (sticky across a strategy change).
    assert!(
        bindings(&client)
            .await?
            .contains(&("r2".into(), "shard-b".into(), r2))
    );

    // A deleted route's bindings go.
    Api::<Route>::namespaced(client.clone(), SHOP)
        .delete("everywhere", &DeleteParams::default())
        .await?;
    eventually(
        "a deleted route's bindings go",
        DEFAULT_PATIENCE,
        || async {
            Ok((!bindings(&client).await?.iter().any(|b| b.0 == "everywhere")).then_some(()))
        },
    )
    .await?;

    // A shard behind a LoadBalancer Service answers at the Service's ingress addresses, and
    // says it has none until the load balancer is provisioned.
    let services = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client.clone(), SHOP);
    apply(
        &services,
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "router-lb", "namespace": SHOP },
            "spec": { "type": "LoadBalancer", "ports": [{ "port": 443 }], "selector": { "app": "router" } },
        }),
    )
    .await?;
    apply(
        &routers,
        json!({
            "apiVersion": "meridian.dev/v1alpha1", "kind": "Router",
            "metadata": { "name": "shard-lb" },
            "spec": {
                "dns": "shard-lb.apps.example.com",
                "routeSelector": { "matchLabels": { "tier": "nothing-yet" } },
                "service": { "namespace": SHOP, "name": "router-lb" },
            },
        }),
    )
    .await?;
    let ready = |reason: &'static str, addresses: &'static [&'static str]| {
        let routers = routers.clone();
        move || {
            let routers = routers.clone();
            async move {
                let status = routers.get("shard-lb").await?.status.unwrap_or_default();
                let ready = status
                    .conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.reason == reason);
                Ok((ready && status.addresses == addresses).then_some(()))
            }
        }
    };
    eventually(
        "shard-lb waits for its load balancer",
        DEFAULT_PATIENCE,
        ready("NoAddresses", &[]),
    )
    .await?;
    services
        .patch_status(
            "router-lb",
            &PatchParams::apply("cloud-provider").force(),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Service",
                "status": { "loadBalancer": { "ingress": [{ "ip": "192.0.2.50" }, { "hostname": "lb.example.net" }] } },
            })),
        )
        .await?;
    eventually(
        "shard-lb answers at the Service's addresses",
        DEFAULT_PATIENCE,
        ready("Serving", &["192.0.2.50", "lb.example.net"]),
    )
    .await?;
    running.abort();
    Ok(())
}

fn dig(server: SocketAddr, name: &str) -> Vec<String> {
    dig_host(server, name, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_route_host_resolves_to_its_shard_through_the_hub() -> Result<(), Error> {
    let fleet = Fleet::builder()
        .spokes(["spoke-1", "spoke-2"])
        .without_ocm()
        .start()
        .await?;
    let hub = fleet.hub.client();
    ensure_namespace(&hub, "infra").await?;
    apply(
        &Api::<meridian_api::kuadrant::ManagedZone>::namespaced(hub.clone(), "infra"),
        fixtures::managed_zone("infra", "apps", "apps.example.com").json(),
    )
    .await?;
    let mut args = meridian_hub::run_command::RunArgs::local(fleet.hub.kubeconfig_path());
    args.cluster_heartbeat_timeout_seconds = 8;
    let running = meridian_hub::run_command::RunningHub::start(&args)
        .await
        .map_err(|e| Error::Component(e.to_string()))?;

    // One shard suffix served by a router on each spoke; a route on spoke-1.
    let mut agents = Vec::new();
    for (spoke, address) in [("spoke-1", "127.0.3.1"), ("spoke-2", "127.0.3.2")] {
        let client = fleet.spoke(spoke).client();
        ensure_namespace(&client, SHOP).await?;
        ensure_namespace(&client, meridian_agent::scheduler::AGENT_NAMESPACE).await?;
        apply(
            &Api::<Router>::all(client.clone()),
            json!({
                "apiVersion": "meridian.dev/v1alpha1", "kind": "Router",
                "metadata": { "name": format!("public-{spoke}") },
                "spec": { "dns": "shard1.apps.example.com", "addresses": [address] },
            }),
        )
        .await?;
        agents.push(tokio::spawn(meridian_agent::run_hub_mode(
            client,
            hub.clone(),
            spoke.to_string(),
            meridian_agent::HubModeOptions::with_heartbeat(std::time::Duration::from_secs(2)),
        )));
    }
    let spoke_1 = fleet.spoke("spoke-1").client();
    // An HTTPRoute under the shard's suffix, created before the Route: once the Route is bound,
    // a scheduling pass has seen the HTTPRoute too.
    let http_routes = Api::<meridian_api::upstream::HTTPRoute>::namespaced(spoke_1.clone(), SHOP);
    let blog = "blog.shard1.apps.example.com";
    apply(
        &http_routes,
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": { "name": "blog", "namespace": SHOP },
            "spec": { "parentRefs": [{ "name": "shard1", "namespace": "routers" }], "hostnames": [blog] },
        }),
    )
    .await?;
    route(&spoke_1, "web", json!({}), None).await?;
    let generated = "shop-web.shard1.apps.example.com";
    ingress_becomes(&spoke_1, "web", &[("public-spoke-1", generated, true, "")]).await?;
    // HTTPRoutes choose their Gateways by parentRefs: none is bound to a shard, and the agent
    // writes nothing into its status (docs/routers.md, "HTTPRoutes are not scheduled").
    assert_eq!(
        bindings(&spoke_1).await?,
        [(
            "web".to_string(),
            "public-spoke-1".to_string(),
            generated.to_string()
        )]
    );
    let untouched = http_routes.get("blog").await?;
    assert!(
        untouched
            .status
            .as_ref()
            .is_none_or(|s| s.parents.is_empty()),
        "{:?}",
        untouched.status
    );

    // The route's generated host resolves to the shard's routers, across both clusters.
    let nameserver = running.nameserver;
    let seen = eventually(
        "dig answers both routers over time",
        DEFAULT_PATIENCE,
        || async move {
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..40 {
                let answers = tokio::task::spawn_blocking(move || dig(nameserver, generated))
                    .await
                    .unwrap();
                if answers.len() != 1 {
                    return Ok(None);
                }
                seen.insert(answers[0].clone());
            }
            Ok((seen.len() == 2).then_some(seen))
        },
    )
    .await?;
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        ["127.0.3.1", "127.0.3.2"]
    );
    // The HTTPRoute's host, on a Gateway the shard's routers serve, resolves to them through
    // the shard's wildcard without being scheduled.
    let answers = tokio::task::spawn_blocking(move || dig(nameserver, blog))
        .await
        .unwrap();
    assert!(
        answers.len() == 1 && ["127.0.3.1", "127.0.3.2"].contains(&answers[0].as_str()),
        "{answers:?}"
    );

    // `meridian-hub routers` shows the shard, its clusters, its route and its DNS.
    let reports: Vec<std::sync::Arc<meridian_api::meridian::ClusterReport>> =
        Api::<meridian_api::meridian::ClusterReport>::all(hub.clone())
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .map(std::sync::Arc::new)
            .collect();
    let shards = meridian_hub::controller::router_dns::fleet_shards(
        &hub,
        &reports,
        std::time::Duration::from_secs(60),
        k8s_openapi::jiff::Timestamp::now(),
    )
    .await?;
    let text = meridian_hub::routers::render(&shards, &BTreeMap::new());
    assert!(
        text.contains("*.shard1.apps.example.com  (zone infra/apps"),
        "{text}"
    );
    assert!(
        text.contains("served by spoke-1/public-spoke-1 at 127.0.3.1"),
        "{text}"
    );
    assert!(
        text.contains("route shop/web → shop-web.shard1.apps.example.com"),
        "{text}"
    );

    // spoke-2's router goes: only spoke-1's answers remain.
    Api::<Router>::all(fleet.spoke("spoke-2").client())
        .delete("public-spoke-2", &DeleteParams::default())
        .await?;
    eventually(
        "only spoke-1's router answers",
        DEFAULT_PATIENCE,
        || async move {
            for _ in 0..10 {
                let answers = tokio::task::spawn_blocking(move || dig(nameserver, generated))
                    .await
                    .unwrap();
                if answers != ["127.0.3.1"] {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        },
    )
    .await?;
    let records = Api::<meridian_api::kuadrant::DNSRecord>::namespaced(hub.clone(), "infra");
    let record = records
        .get(&meridian_hub::routers::record_name(
            "shard1.apps.example.com",
        ))
        .await?;
    assert_eq!(record.spec.root_host, "*.shard1.apps.example.com");
    assert!(record.name_any().starts_with("router-"));

    for agent in agents {
        agent.abort();
    }
    running.stop().await;
    Ok(())
}
