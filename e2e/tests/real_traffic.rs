//! Real requests through real gateways, once: Traefik (a Gateway API implementation, built from
//! its Go module) serves the example Gateway on each spoke's node and writes its address into
//! the Gateway's status; the demo app runs behind it as a pod; clients resolve the example host
//! through Unbound in front of the hub's nameserver and send requests every 100 ms. One
//! cluster's app starts failing: its traffic moves to another cluster once the probes agree and
//! the resolver's cache drains; it recovers, and its traffic comes back without one failed
//! request. Then the same with priority tiers: the failing primary's traffic goes to the second
//! tier, returns only after the hold-down, and a drain moves it without a failed request.
//! The same failover once more with the example's zone at PowerDNS, which cannot hold the tree:
//! clients follow PowerDNS's referral to the routing delegate the hub serves.
//! `make bench-failover` runs every scenario and prints the times; this test prints
//! them and asserts only the behaviour.
//!
//! Needs the demo app's image (`make test` packs it; run alone, `make images`) and Traefik
//! (`make testbed`).

use std::time::Duration;

use meridian_e2e::example::{HOST, UNITED_STATES, dig_host_async};
use meridian_e2e::traffic::{
    Clients, Outcome, Recovery, Sample, TrafficExample, back_to, fleet_with_the_app,
    health_checked_policy, mark_for_drain, publish_tiered_policy, recovery, request, resolve,
    set_fault, tiered_policy,
};
use meridian_e2e::{DEFAULT_PATIENCE, Error, eventually};

/// Client workers, each sending a request every `PERIOD`.
const WORKERS: usize = 4;
const PERIOD: Duration = Duration::from_millis(100);
/// A request that takes longer failed (a user would have given up).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_traffic_moves_off_a_failing_cluster_and_back_without_a_failed_failback()
-> Result<(), Error> {
    let (fleet, traffic) = health_checked_example().await?;
    let resolver = traffic.resolver.address();

    // Clients from no GEO in particular get the default, IE: spoke-1, through its Traefik.
    wait_until_a_request_is_served_by(resolver, "spoke-1", "a request through Unbound").await?;
    // A client in the US, its subnet passed on by Unbound (ECS), gets spoke-2's gateway.
    let spoke_2 = traffic.gateways.gateway("spoke-2").address().to_string();
    eventually(
        "Unbound answers a US client with spoke-2's gateway",
        DEFAULT_PATIENCE,
        || async {
            let answers = dig_host_async(resolver, HOST, Some(UNITED_STATES)).await;
            Ok((answers == [spoke_2.clone()]).then_some(()))
        },
    )
    .await?;

    let clients = Clients::start(WORKERS, resolver, HOST, PERIOD, REQUEST_TIMEOUT);
    let mut samples: Vec<Sample> = Vec::new();
    tokio::time::sleep(Duration::from_secs(3)).await;
    samples.extend(clients.take());
    let steady = recovery(&samples, Duration::ZERO);
    assert_eq!(steady.failed, 0, "before any fault: {steady:?}");
    assert_eq!(steady.served_by.keys().collect::<Vec<_>>(), ["spoke-1"]);

    // spoke-1's app answers 503, health path and traffic alike.
    let fault = clients.now();
    set_fault(traffic.gateways.app_pod("spoke-1"), "unavailable").await?;
    wait_until_served_only_by_others(&clients, &mut samples, "spoke-1").await?;
    let failover = recovery(&samples, fault);
    report("spoke-1 answers 503", &failover);
    assert!(failover.failed > 0, "the fault was seen: {failover:?}");
    assert!(
        failover.until_100.is_some(),
        "every request succeeds again: {failover:?}"
    );
    // IE has no other cluster: the catch-all falls back to the first GEO group left.
    assert!(failover.served_by.contains_key("spoke-3"), "{failover:?}");

    // It recovers: the traffic comes back, and not one request fails on the way.
    let recovered = clients.now();
    set_fault(traffic.gateways.app_pod("spoke-1"), "none").await?;
    eventually(
        "requests are served by spoke-1 again",
        DEFAULT_PATIENCE,
        || {
            samples.extend(clients.take());
            let back = samples
                .iter()
                .rev()
                .take(2 * WORKERS)
                .all(|s| s.outcome == Outcome::Served("spoke-1".into()));
            async move { Ok(back.then_some(())) }
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    samples.extend(clients.take());
    let failback = recovery(&samples, recovered);
    report("spoke-1 recovers (failback)", &failback);
    assert_eq!(
        failback.failed, 0,
        "failback loses no request: {failback:?}"
    );
    assert!(failback.served_by.contains_key("spoke-1"));

    // Priority tiers instead of GEO: IE, then US, then the rest.
    let hub = fleet.hub.client();
    publish_tiered_policy(
        &hub,
        tiered_policy("5s", 2, "5s", &format!("{}s", HOLD_DOWN.as_secs())),
    )
    .await?;
    wait_until_served_only_by(&clients, &mut samples, "spoke-1").await?;

    // spoke-1's app fails: the second tier serves, never the third.
    let fault = clients.now();
    set_fault(traffic.gateways.app_pod("spoke-1"), "unavailable").await?;
    wait_until_served_only_by(&clients, &mut samples, "spoke-2").await?;
    let tier_failover = recovery(&samples, fault);
    report("tiers: spoke-1 (tier 1) answers 503", &tier_failover);
    assert!(tier_failover.until_100.is_some(), "{tier_failover:?}");
    assert!(
        !tier_failover.served_by.contains_key("spoke-3"),
        "the second tier takes the traffic, not the third: {tier_failover:?}"
    );

    // It recovers: the traffic stays on spoke-2 for the hold-down, then returns, and no
    // request fails either way.
    let recovered = clients.now();
    set_fault(traffic.gateways.app_pod("spoke-1"), "none").await?;
    wait_until_served_only_by(&clients, &mut samples, "spoke-1").await?;
    let tier_failback = recovery(&samples, recovered);
    let (first_back, _) = back_to(&samples, recovered, "spoke-1");
    report("tiers: spoke-1 recovers (failback)", &tier_failback);
    println!(
        "tiers: first request served by spoke-1 again {first_back:?} s after it recovered (hold-down {HOLD_DOWN:?})"
    );
    assert_eq!(tier_failback.failed, 0, "{tier_failback:?}");
    assert!(
        first_back.is_some_and(|s| s >= HOLD_DOWN.as_secs_f64()),
        "no failback within the hold-down: {first_back:?}"
    );

    // spoke-1 is drained: its traffic moves to spoke-2 in steps, without a failed request;
    // the mark goes and the traffic comes back the same way.
    let drained = clients.now();
    mark_for_drain(&hub, "spoke-1", true).await?;
    wait_until_served_only_by(&clients, &mut samples, "spoke-2").await?;
    let drain = recovery(&samples, drained);
    report("tiers: spoke-1 drained", &drain);
    assert_eq!(drain.failed, 0, "a drain loses no request: {drain:?}");
    let returned = clients.now();
    mark_for_drain(&hub, "spoke-1", false).await?;
    wait_until_served_only_by(&clients, &mut samples, "spoke-1").await?;
    let undrain = recovery(&samples, returned);
    report("tiers: spoke-1 back from the drain", &undrain);
    assert_eq!(undrain.failed, 0, "{undrain:?}");

    drop(clients);
    traffic.stop().await;
    Ok(())
}

/// The wildcard listener the wildcard test adds to the example Gateway, and the hosts of the
/// routes on it (both to the demo app).
const WILDCARD: &str = "*.apps.example.com";
const SHOP: &str = "shop.apps.example.com";
const BLOG: &str = "blog.apps.example.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wildcard_listener_is_probed_through_its_routes_and_fails_over_with_real_traffic()
-> Result<(), Error> {
    use kube::api::{Api, Patch, PatchParams};
    use meridian_api::kuadrant::{DNSHealthCheckProbe, DNSRecord};
    use meridian_api::upstream::{Gateway, HTTPRoute};
    use meridian_e2e::example::{GATEWAY, NAMESPACE, SPOKES};
    use meridian_e2e::traffic::{APP, spoke_namespace};

    let (fleet, traffic) = health_checked_example().await?;
    let resolver = traffic.resolver.address();
    let hub = fleet.hub.client();

    // The example Gateway gains a wildcard listener on the same port.
    let gateways: Api<Gateway> = Api::namespaced(hub.clone(), NAMESPACE);
    let mut listeners = serde_json::to_value(&gateways.get(GATEWAY).await?.spec.listeners)
        .expect("listeners are JSON");
    if let Some(list) = listeners.as_array_mut() {
        list.push(serde_json::json!({ "name": "apps", "hostname": WILDCARD, "port": 80, "protocol": "HTTP" }));
    }
    gateways
        .patch(
            GATEWAY,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "spec": { "listeners": listeners } })),
        )
        .await?;

    // Every spoke attaches a route naming no host to the wildcard, so it serves the listener
    // (a listener without routes gets no records) but has no concrete host to be probed
    // through: the wildcard is published unprobed, and its status says so.
    let route_on_the_wildcard = |hostnames: &[&str]| {
        serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": { "name": "apps", "namespace": spoke_namespace() },
            "spec": {
                "parentRefs": [{ "name": GATEWAY, "sectionName": "apps" }],
                "hostnames": hostnames,
                "rules": [{ "backendRefs": [{ "name": APP, "port": 80 }] }],
            },
        })
    };
    for (spoke, _, _, _) in SPOKES {
        let routes: Api<HTTPRoute> =
            Api::namespaced(fleet.spoke(spoke).client(), &spoke_namespace());
        meridian_e2e::example::apply(&routes, route_on_the_wildcard(&[])).await?;
    }
    let records: Api<DNSRecord> = Api::namespaced(hub.clone(), NAMESPACE);
    let record = format!("{GATEWAY}-apps");
    eventually(
        "the wildcard's record says it is not health-checked for want of route hosts",
        DEFAULT_PATIENCE,
        || {
            let (records, record) = (records.clone(), record.clone());
            async move {
                let status = records.get_opt(&record).await?.and_then(|r| r.status);
                Ok(status
                    .filter(|s| {
                        s.conditions.iter().any(|c| {
                            c.message.contains("not health-checked") && c.message.contains(WILDCARD)
                        })
                    })
                    .map(|_| ()))
            }
        },
    )
    .await?;
    let spoke_1: std::net::Ipv4Addr = traffic.gateways.gateway("spoke-1").address();
    eventually(
        "a host under the wildcard resolves to spoke-1's gateway (the default GEO's)",
        DEFAULT_PATIENCE,
        || async {
            let answers = resolve(resolver, SHOP, REQUEST_TIMEOUT).await;
            Ok((answers == Ok(vec![spoke_1])).then_some(()))
        },
    )
    .await?;

    // Every spoke's route now names two hosts under the wildcard; Traefik accepts them.
    for (spoke, _, _, _) in SPOKES {
        let routes: Api<HTTPRoute> =
            Api::namespaced(fleet.spoke(spoke).client(), &spoke_namespace());
        meridian_e2e::example::apply(&routes, route_on_the_wildcard(&[SHOP, BLOG])).await?;
    }
    // The hub probes each gateway address through both hosts, never the wildcard itself.
    let probes: Api<DNSHealthCheckProbe> = Api::namespaced(hub.clone(), NAMESPACE);
    let addresses: Vec<String> = SPOKES
        .iter()
        .map(|(spoke, _, _, _)| traffic.gateways.address(spoke))
        .collect();
    eventually(
        "every gateway address is probed through both route hosts, and every probe passes",
        DEFAULT_PATIENCE,
        || {
            let (probes, record, addresses) = (probes.clone(), record.clone(), addresses.clone());
            async move {
                let list = probes
                    .list(&kube::api::ListParams::default().labels(&format!(
                        "{}={record}",
                        meridian_controllers::decide::health::PROBE_RECORD_LABEL
                    )))
                    .await?;
                let mut asked: Vec<(String, String)> = list
                    .items
                    .iter()
                    .filter(|p| p.status.as_ref().and_then(|s| s.healthy) == Some(true))
                    .map(|p| (p.spec.address.clone(), p.spec.host.clone()))
                    .collect();
                asked.sort();
                let mut wanted: Vec<(String, String)> = addresses
                    .iter()
                    .flat_map(|a| [(a.clone(), BLOG.to_string()), (a.clone(), SHOP.to_string())])
                    .collect();
                wanted.sort();
                Ok((asked == wanted && list.items.len() == wanted.len()).then_some(()))
            }
        },
    )
    .await?;
    eventually(
        "the wildcard's record no longer says it is unprobed",
        DEFAULT_PATIENCE,
        || {
            let (records, record) = (records.clone(), record.clone());
            async move {
                let status = records.get_opt(&record).await?.and_then(|r| r.status);
                Ok(status
                    .filter(|s| {
                        !s.conditions
                            .iter()
                            .any(|c| c.message.contains("not health-checked"))
                    })
                    .map(|_| ()))
            }
        },
    )
    .await?;

    // spoke-1's app fails, for both hosts: the wildcard's traffic moves off spoke-1.
    let clients = Clients::start(WORKERS, resolver, SHOP, PERIOD, REQUEST_TIMEOUT);
    let mut samples: Vec<Sample> = Vec::new();
    wait_until_served_only_by(&clients, &mut samples, "spoke-1").await?;
    let fault = clients.now();
    set_fault(traffic.gateways.app_pod("spoke-1"), "unavailable").await?;
    wait_until_served_only_by_others(&clients, &mut samples, "spoke-1").await?;
    let failover = recovery(&samples, fault);
    report("wildcard: spoke-1's routes answer 503", &failover);
    assert!(failover.failed > 0, "the fault was seen: {failover:?}");
    assert!(failover.until_100.is_some(), "{failover:?}");

    // It recovers: the wildcard's traffic comes back to spoke-1.
    let recovered = clients.now();
    set_fault(traffic.gateways.app_pod("spoke-1"), "none").await?;
    wait_until_served_only_by(&clients, &mut samples, "spoke-1").await?;
    let failback = recovery(&samples, recovered);
    report("wildcard: spoke-1 recovers (failback)", &failback);
    assert!(failback.served_by.contains_key("spoke-1"));

    drop(clients);
    traffic.stop().await;
    Ok(())
}

/// Where the hub serves the routing delegate in the delegation test (port 53): an address of
/// its own, not another test's.
const DELEGATE_SERVER: std::net::IpAddr =
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 53, 54));

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_traffic_fails_over_through_the_routing_delegate_of_a_plain_zone() -> Result<(), Error>
{
    use kube::api::Api;
    use meridian_api::kuadrant::DNSHealthCheckProbe;
    use meridian_e2e::example::{NAMESPACE, ZONE_DOMAIN};
    use meridian_e2e::plain_zone::PlainZone;
    use meridian_e2e::traffic::Resolver;

    // The health-checked example, its zone at PowerDNS behind external-dns's webhook: PowerDNS
    // cannot hold GEO answers or health checks, so the tree goes to the routing delegate the
    // hub serves at DELEGATE_SERVER. Unbound knows only PowerDNS and follows its referral.
    meridian_e2e::test_logs("warn,kube_client=off,meridian_e2e=info");
    let (fleet, app_image) = fleet_with_the_app().await?;
    let hub = fleet.hub.client();
    let zone = PlainZone::start_delegating(&hub, DELEGATE_SERVER).await?;
    let traffic = TrafficExample::start_configured(
        &fleet,
        &app_image.reference,
        health_checked_policy(30, "5s", 2, "5s"),
        Duration::from_secs(10),
        |args| zone.configure(args),
        |_| async {
            zone.wait_for_delegation(&hub).await?;
            Resolver::start_with_delegations(ZONE_DOMAIN, &[zone.pdns.dns], &[DELEGATE_SERVER])
                .await
        },
    )
    .await?;
    let resolver = traffic.resolver.address();
    wait_until_a_request_is_served_by(
        resolver,
        "spoke-1",
        "a request through Unbound and the referral",
    )
    .await?;

    // The delegated tree's name is klb.example.com's, but clients ask for the example's host:
    // every gateway is probed as that host (what Traefik routes by), and every probe passes.
    let probes: Api<DNSHealthCheckProbe> = Api::namespaced(hub.clone(), NAMESPACE);
    let addresses: Vec<String> = meridian_e2e::example::SPOKES
        .iter()
        .map(|(spoke, _, _, _)| traffic.gateways.address(spoke))
        .collect();
    eventually(
        "every gateway is probed as the host clients ask for, and passes",
        DEFAULT_PATIENCE,
        || {
            let (probes, addresses) = (probes.clone(), addresses.clone());
            async move {
                let list = probes.list(&Default::default()).await?;
                let mut asked: Vec<(String, String, bool)> = list
                    .items
                    .iter()
                    .map(|p| {
                        let healthy = p.status.as_ref().and_then(|s| s.healthy) == Some(true);
                        (p.spec.address.clone(), p.spec.host.clone(), healthy)
                    })
                    .collect();
                asked.sort();
                let mut wanted: Vec<(String, String, bool)> = addresses
                    .iter()
                    .map(|a| (a.clone(), HOST.to_string(), true))
                    .collect();
                wanted.sort();
                Ok((asked == wanted).then_some(()))
            }
        },
    )
    .await?;

    let clients = Clients::start(WORKERS, resolver, HOST, PERIOD, REQUEST_TIMEOUT);
    let mut samples: Vec<Sample> = Vec::new();
    wait_until_served_only_by(&clients, &mut samples, "spoke-1").await?;
    let parent_records = zone.records().await?;

    // spoke-1's app answers 503: the delegate stops answering it; PowerDNS's records stay as
    // they were.
    let fault = clients.now();
    set_fault(traffic.gateways.app_pod("spoke-1"), "unavailable").await?;
    wait_until_served_only_by_others(&clients, &mut samples, "spoke-1").await?;
    let failover = recovery(&samples, fault);
    report(
        "through the routing delegate: spoke-1 answers 503",
        &failover,
    );
    assert!(failover.failed > 0, "the fault was seen: {failover:?}");
    assert!(failover.until_100.is_some(), "{failover:?}");
    assert!(failover.served_by.contains_key("spoke-3"), "{failover:?}");
    assert_eq!(
        zone.records().await?,
        parent_records,
        "a failover inside the delegate leaves the parent zone as it was"
    );

    // It recovers: the traffic comes back without a failed request.
    let recovered = clients.now();
    set_fault(traffic.gateways.app_pod("spoke-1"), "none").await?;
    wait_until_served_only_by(&clients, &mut samples, "spoke-1").await?;
    let failback = recovery(&samples, recovered);
    report(
        "through the routing delegate: spoke-1 recovers (failback)",
        &failback,
    );
    assert_eq!(
        failback.failed, 0,
        "failback loses no request: {failback:?}"
    );

    drop(clients);
    traffic.stop().await;
    Ok(())
}

/// The example fleet serving real traffic: Traefik and the demo app on every spoke, the
/// policy health-checking it every 5 s (2 failures, answers' TTL 5 s).
async fn health_checked_example() -> Result<(meridian_e2e::Fleet, TrafficExample), Error> {
    meridian_e2e::test_logs("warn,kube_client=off,meridian_e2e=info");
    let (fleet, app_image) = fleet_with_the_app().await?;
    let traffic = TrafficExample::start(
        &fleet,
        &app_image.reference,
        health_checked_policy(30, "5s", 2, "5s"),
        Duration::from_secs(10),
    )
    .await?;
    Ok((fleet, traffic))
}

/// How long a recovered better tier must stay healthy before it takes traffic back.
const HOLD_DOWN: Duration = Duration::from_secs(20);

/// Waits until one request for the example's host through `resolver` is served by `cluster`.
async fn wait_until_a_request_is_served_by(
    resolver: std::net::SocketAddr,
    cluster: &str,
    what: &str,
) -> Result<(), Error> {
    eventually(
        &format!("{what} is served by {cluster}"),
        DEFAULT_PATIENCE,
        || async {
            let outcome = request(resolver, HOST, REQUEST_TIMEOUT).await;
            Ok((outcome == Outcome::Served(cluster.to_string())).then_some(()))
        },
    )
    .await
}

/// Waits until the last requests of every worker were served by `cluster`.
async fn wait_until_served_only_by(
    clients: &Clients,
    samples: &mut Vec<Sample>,
    cluster: &str,
) -> Result<(), Error> {
    eventually(
        &format!("requests are served by {cluster} only"),
        DEFAULT_PATIENCE,
        || {
            samples.extend(clients.take());
            let only = samples.len() > 4 * WORKERS
                && samples
                    .iter()
                    .rev()
                    .take(4 * WORKERS)
                    .all(|s| s.outcome == Outcome::Served(cluster.to_string()));
            async move { Ok(only.then_some(())) }
        },
    )
    .await
}

/// Waits until the last requests of every worker were served by clusters other than `failed`.
async fn wait_until_served_only_by_others(
    clients: &Clients,
    samples: &mut Vec<Sample>,
    failed: &str,
) -> Result<(), Error> {
    eventually(
        &format!("requests are served by clusters other than {failed}"),
        DEFAULT_PATIENCE,
        || {
            samples.extend(clients.take());
            let moved =
                samples.len() > 4 * WORKERS
                    && samples.iter().rev().take(4 * WORKERS).all(
                        |s| matches!(&s.outcome, Outcome::Served(cluster) if cluster != failed),
                    );
            async move { Ok(moved.then_some(())) }
        },
    )
    .await
}

fn report(what: &str, recovery: &Recovery) {
    println!(
        "{what}: {} requests, {} failed; 99 % succeed after {:?} s, 100 % after {:?} s; served by {:?}",
        recovery.requests,
        recovery.failed,
        recovery.until_99,
        recovery.until_100,
        recovery.served_by
    );
}
