//! Distributed mode (seed 002) on real API servers and real DNS servers: three clusters, each
//! with its own DNSPolicy, Gateway and ManagedZone, and an agent in distributed mode, share one
//! zone with no hub. BIND (RFC2136) and moto (Route53) hold the zone.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use meridian_api::kuadrant::DNSRecord;
use meridian_api::upstream::Gateway;
use meridian_controllers::LocalCluster;
use meridian_controllers::zones::zone_provider::ProviderSettings;
use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::plan::Registry;
use meridian_e2e::example::{apply, dig_host, ready_message};
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, ensure_namespace, eventually};
use meridian_providers::Provider;
use meridian_providers::rfc2136::Rfc2136Provider;
use meridian_testkit::backends::{Backends, start_backends};
use meridian_testkit::bind_server::BindServer;
use meridian_testkit::fixtures;
use meridian_testkit::zone_id_of;
use serde_json::{Value, json};
use tokio::task::JoinHandle;

/// Held by each test for its whole run. Every test here runs three clusters' controllers,
/// probes and a shared zone; run side by side on two cores, the health test's agreement
/// (every cluster probing every 5 s and reporting through the zone) missed its two minutes
/// now and then. One at a time costs about two minutes of CI and removes that load.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NAMESPACE: &str = "gateways";
const HOST: &str = "api.example.com";
const CLUSTERS: [(&str, &str, &str); 3] = [
    ("spoke-1", "10.0.0.1", "IE"),
    ("spoke-2", "10.0.0.2", "US"),
    ("spoke-3", "10.0.0.3", "US"),
];

/// One cluster's side: the zone's Secret and ManagedZone, the Gateway with its address, and
/// the policy.
async fn install(
    client: &Client,
    secret: Value,
    address: &str,
    policy: Value,
) -> Result<(), Error> {
    ensure_namespace(client, NAMESPACE).await?;
    apply(
        &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), NAMESPACE),
        secret,
    )
    .await?;
    apply(
        &Api::<meridian_api::kuadrant::ManagedZone>::namespaced(client.clone(), NAMESPACE),
        fixtures::managed_zone(NAMESPACE, "example", "example.com")
            .at_provider("zone")
            .json(),
    )
    .await?;
    let gateways = Api::<Gateway>::namespaced(client.clone(), NAMESPACE);
    apply(
        &gateways,
        fixtures::gateway(NAMESPACE, "prod-web")
            .class("istio")
            .listener("api", HOST, 80, "HTTP")
            .json(),
    )
    .await?;
    gateways
        .patch_status(
            "prod-web",
            &PatchParams::apply("gateway-implementation").force(),
            &Patch::Apply(fixtures::gateway_status(&[address], &[("api", 1)])),
        )
        .await?;
    apply(
        &Api::<meridian_api::kuadrant::DNSPolicy>::namespaced(client.clone(), NAMESPACE),
        policy,
    )
    .await?;
    Ok(())
}

fn policy(spec: Value) -> Value {
    json!({
        "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
        "metadata": { "name": "prod-web", "namespace": NAMESPACE },
        "spec": spec,
    })
}

/// A distributed-mode agent for a cluster, in this process.
async fn agent(
    client: &Client,
    name: &str,
    geo: &str,
) -> Result<JoinHandle<anyhow::Result<()>>, Error> {
    agent_probing_from(client, name, geo, None, ProviderSettings::test_bed()).await
}

/// A distributed-mode agent for a cluster whose Route53 is at `endpoint` (moto): the agent's
/// admin says where, as `--aws-endpoint` does, never the zone's Secret.
async fn agent_with_route53_at(
    client: &Client,
    name: &str,
    geo: &str,
    endpoint: String,
) -> Result<JoinHandle<anyhow::Result<()>>, Error> {
    let providers = ProviderSettings {
        aws_endpoint: Some(endpoint),
        ..ProviderSettings::test_bed()
    };
    agent_probing_from(client, name, geo, None, providers).await
}

/// A distributed-mode agent whose health probes leave from `source`.
async fn agent_probing_from(
    client: &Client,
    name: &str,
    geo: &str,
    source: Option<std::net::IpAddr>,
    providers: ProviderSettings,
) -> Result<JoinHandle<anyhow::Result<()>>, Error> {
    agent_labelled(client, name, geo, &[], source, providers).await
}

/// A distributed-mode agent whose cluster carries `labels` (`--cluster-label`) beside its geo.
async fn agent_labelled(
    client: &Client,
    name: &str,
    geo: &str,
    labels: &[(&str, &str)],
    source: Option<std::net::IpAddr>,
    providers: ProviderSettings,
) -> Result<JoinHandle<anyhow::Result<()>>, Error> {
    let cluster_id = meridian_agent::report::cluster_id(client).await?;
    let local = LocalCluster {
        name: name.into(),
        cluster_id,
        labels: [(
            "kuadrant.io/lb-attribute-geo-code".to_string(),
            geo.to_string(),
        )]
        .into_iter()
        .chain(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())))
        .collect(),
        namespace: None,
    };
    let probes = meridian_agent::health::ZoneProbes::start(std::sync::Arc::new(
        // The test's gateways listen on loopback addresses.
        meridian_agent::probe::Prober::new(
            &[],
            source,
            meridian_controllers::decide::probe_policy::ProbeAddressPolicy::test_bed(),
        ),
    ));
    Ok(tokio::spawn(meridian_agent::distributed::run(
        client.clone(),
        local,
        Duration::from_secs(2),
        Some(probes),
        providers,
    )))
}

/// Installs each cluster (`name`, `geo`) of `fleet` on the zone `secret` names with the policy `spec`,
/// its Gateway at `gateways[i]`, and starts its agent probing from `sources[i]`. Returns the
/// agents and the clusters' IDs, in order.
async fn install_probing(
    fleet: &Fleet,
    clusters: &[(&str, &str)],
    (gateways, sources): (&[std::net::IpAddr], &[std::net::IpAddr]),
    (providers, secret): (&ProviderSettings, &Value),
    spec: &Value,
) -> Result<(Vec<JoinHandle<anyhow::Result<()>>>, Vec<String>), Error> {
    let mut agents = Vec::new();
    let mut ids = Vec::new();
    for (index, (name, geo)) in clusters.iter().enumerate() {
        let client = fleet.spoke(name).client();
        install(
            &client,
            secret.clone(),
            &gateways[index].to_string(),
            policy(spec.clone()),
        )
        .await?;
        ids.push(meridian_agent::report::cluster_id(&client).await?);
        agents.push(
            agent_probing_from(&client, name, geo, Some(sources[index]), providers.clone()).await?,
        );
    }
    Ok((agents, ids))
}

/// Loopback addresses, for gateways and probe sources.
fn loopback(addresses: &[&str]) -> Vec<std::net::IpAddr> {
    addresses.iter().map(|a| a.parse().unwrap()).collect()
}

fn dig(server: SocketAddr) -> Vec<String> {
    dig_host(server, HOST, None)
}

async fn dig_answers(server: SocketAddr, expected: &[&str]) -> Result<(), Error> {
    let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    eventually(
        &format!("BIND answers {expected:?}"),
        DEFAULT_PATIENCE,
        || {
            let expected = expected.clone();
            async move {
                let seen = tokio::task::spawn_blocking(move || dig(server))
                    .await
                    .unwrap();
                Ok((seen == expected).then_some(()))
            }
        },
    )
    .await
}

/// moto holding `example.com`, and a proxy in front of it that counts the calls.
async fn route53_zone() -> Result<
    (
        meridian_testkit::moto::MotoServer,
        meridian_testkit::counting_proxy::CountingProxy,
    ),
    Error,
> {
    let moto = meridian_testkit::moto::MotoServer::start().expect("moto starts");
    moto.create_zone("example.com")
        .await
        .map_err(Error::Component)?;
    let proxy = meridian_testkit::counting_proxy::CountingProxy::start(moto.address(), 0)
        .await
        .unwrap();
    Ok((moto, proxy))
}

/// The `kuadrant.io/aws` Secret of a moto zone (the agent's settings say where moto is).
fn route53_secret() -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/aws",
        "metadata": { "name": "zone", "namespace": NAMESPACE },
        "stringData": {
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        },
    })
}

/// The `kuadrant.io/rfc2136` Secret for a BIND zone.
fn rfc2136_secret(bind: &BindServer) -> Value {
    bind.provider_secret(NAMESPACE, "zone")
}

/// The owners vouching for the host's records in a zone.
fn owners_of_host(zone: &[Endpoint]) -> BTreeSet<String> {
    Registry::read(zone)
        .ownership
        .iter()
        .filter(|(key, _)| key.dns_name == HOST)
        .flat_map(|(_, owners)| owners.keys().cloned())
        .collect()
}

/// BIND serving `example.com`, updated through TSIG.
async fn bind_zone() -> Result<BindServer, Error> {
    BindServer::start("example.com")
        .await
        .map_err(Error::Component)
}

/// A hub and `spokes`, without OCM (the clusters here publish on their own).
async fn fleet_without_ocm(spokes: &[&str]) -> Result<Fleet, Error> {
    Fleet::builder()
        .spokes(spokes.iter().copied())
        .without_ocm()
        .start()
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clusters_share_a_bind_zone_without_a_hub() -> Result<(), Error> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let bind = bind_zone().await?;
    let fleet = fleet_without_ocm(&CLUSTERS.map(|c| c.0)).await?;
    let secret = rfc2136_secret(&bind);
    let mut agents = Vec::new();
    let mut owners = BTreeSet::new();
    for (name, address, geo) in CLUSTERS {
        let client = fleet.spoke(name).client();
        install(
            &client,
            secret.clone(),
            address,
            policy(json!({ "targetRef": { "name": "prod-web" }, "routingStrategy": "simple" })),
        )
        .await?;
        owners.insert(meridian_agent::report::cluster_id(&client).await?);
        agents.push(agent(&client, name, geo).await?);
    }

    // The zone holds the union: one A record with every cluster's address, vouched for by
    // each cluster under its own ID.
    dig_answers(bind.config.server, &["10.0.0.1", "10.0.0.2", "10.0.0.3"]).await?;
    let provider = Rfc2136Provider::new(bind.config.clone()).unwrap();
    let zone = provider.records("example.com").await.unwrap();
    assert_eq!(owners_of_host(&zone), owners);
    let a = zone
        .iter()
        .find(|e| e.dns_name == HOST && e.record_type == RecordType::A)
        .unwrap();
    assert_eq!(a.targets, ["10.0.0.1", "10.0.0.2", "10.0.0.3"]);

    // A ListenerSet adds a listener to the Gateways of spoke-1 and spoke-2, which admit their
    // namespace's: each publishes its branch of the new host, under the hub-mode name.
    const SHOP: &str = "shop.example.com";
    for name in ["spoke-1", "spoke-2"] {
        let client = fleet.spoke(name).client();
        Api::<Gateway>::namespaced(client.clone(), NAMESPACE)
            .patch(
                "prod-web",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "allowedListeners": {
                    "namespaces": { "from": "Same" },
                } } })),
            )
            .await?;
        apply(
            &Api::<meridian_api::upstream::ListenerSet>::namespaced(client, NAMESPACE),
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
                "metadata": { "name": "extra", "namespace": NAMESPACE },
                "spec": {
                    "parentRef": { "name": "prod-web" },
                    "listeners": [{ "name": "shop", "hostname": SHOP, "port": 80, "protocol": "HTTP" }],
                },
            }),
        )
        .await?;
    }
    eventually(
        "BIND answers the ListenerSet's host",
        DEFAULT_PATIENCE,
        || async move {
            let server = bind.config.server;
            let seen = tokio::task::spawn_blocking(move || dig_host(server, SHOP, None))
                .await
                .unwrap();
            Ok((seen == ["10.0.0.1", "10.0.0.2"]).then_some(()))
        },
    )
    .await?;
    Api::<DNSRecord>::namespaced(fleet.spoke("spoke-1").client(), NAMESPACE)
        .get("prod-web-extra.shop")
        .await?;

    // Each cluster's record says what it published and, once it looked again after the
    // others' changes moved the host's mark, who else owns the host.
    let records = Api::<DNSRecord>::namespaced(fleet.spoke("spoke-1").client(), NAMESPACE);
    let status = eventually("spoke-1 sees every owner", DEFAULT_PATIENCE, || async {
        let status = records
            .get("prod-web-api")
            .await?
            .status
            .unwrap_or_default();
        Ok((status.domain_owners.len() == 3).then_some(status))
    })
    .await?;
    assert_eq!(
        status.endpoints[0].targets,
        ["10.0.0.1"],
        "its own contribution"
    );
    let mark = zone
        .iter()
        .find(|e| e.dns_name == "kuadrant.last_modified_at.api.example.com")
        .expect("every change moves the host's mark");
    assert_eq!(mark.record_type, RecordType::Txt);

    // spoke-3's Gateway moves: only its own address changes.
    let spoke_3 = fleet.spoke("spoke-3").client();
    Api::<Gateway>::namespaced(spoke_3.clone(), NAMESPACE)
        .patch_status(
            "prod-web",
            &PatchParams::apply("gateway-implementation").force(),
            &Patch::Apply(fixtures::gateway_status(&["10.0.0.33"], &[("api", 1)])),
        )
        .await?;
    dig_answers(bind.config.server, &["10.0.0.1", "10.0.0.2", "10.0.0.33"]).await?;

    // Deleting spoke-3's policy removes its contribution only; the others' records are intact.
    Api::<meridian_api::kuadrant::DNSPolicy>::namespaced(spoke_3.clone(), NAMESPACE)
        .delete("prod-web", &DeleteParams::default())
        .await?;
    dig_answers(bind.config.server, &["10.0.0.1", "10.0.0.2"]).await?;
    let zone = provider.records("example.com").await.unwrap();
    owners.remove(&meridian_agent::report::cluster_id(&spoke_3).await?);
    assert_eq!(
        owners_of_host(&zone),
        owners,
        "spoke-3 no longer vouches for anything"
    );

    // The last two go: nothing of theirs is left.
    for name in ["spoke-1", "spoke-2"] {
        Api::<meridian_api::kuadrant::DNSPolicy>::namespaced(fleet.spoke(name).client(), NAMESPACE)
            .delete("prod-web", &DeleteParams::default())
            .await?;
    }
    dig_answers(bind.config.server, &[]).await?;
    let zone = provider.records("example.com").await.unwrap();
    assert!(
        zone.iter().all(|e| !e.dns_name.ends_with(HOST)),
        "{zone:#?}"
    );
    for agent in agents {
        agent.abort();
    }
    Ok(())
}

/// The records of the host and below, without ownership TXT records and the host's mark.
fn host_records(zone: &[Endpoint]) -> Vec<Endpoint> {
    let mut records: Vec<Endpoint> = Registry::read(zone)
        .records
        .into_values()
        .filter(|e| meridian_dns::model::is_at_or_below(&e.dns_name, HOST))
        .filter(|e| !e.dns_name.starts_with("kuadrant.last_modified_at."))
        .collect();
    meridian_dns::model::sort_endpoints(&mut records);
    records
}

/// What a hub would publish for the same clusters: the distributed branches must add up to it.
fn hub_tree(clusters: &[(String, &str, &str)]) -> Vec<Endpoint> {
    let clusters: Vec<(&str, &str, &str)> = clusters
        .iter()
        .map(|(id, address, geo)| (id.as_str(), *address, *geo))
        .collect();
    let mut endpoints = meridian_e2e::example::geo_tree(HOST, NAMESPACE, &clusters);
    for endpoint in &mut endpoints {
        endpoint.normalize();
    }
    meridian_dns::model::sort_endpoints(&mut endpoints);
    endpoints
}

fn loadbalanced(default_geo: &str) -> Value {
    policy(json!({
        "targetRef": { "name": "prod-web" },
        "routingStrategy": "loadbalanced",
        "loadBalancing": { "weighted": { "defaultWeight": 120 }, "geo": { "defaultGeo": default_geo } },
    }))
}

/// Reads of a Route53 zone among `calls` (a whole list, or a host's mark): each is a cluster
/// looking at the zone.
fn zone_reads(calls: &BTreeMap<String, u64>) -> u64 {
    calls
        .iter()
        .filter(|(call, _)| call.starts_with("ListResourceRecordSets"))
        .map(|(_, count)| count)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clusters_share_a_route53_zone_agree_and_stay_thrifty() -> Result<(), Error> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let (moto, proxy) = route53_zone().await?;
    let fleet = fleet_without_ocm(&CLUSTERS.map(|c| c.0)).await?;
    let secret = route53_secret();
    let mut agents = Vec::new();
    let mut clusters = Vec::new();
    for (name, address, geo) in CLUSTERS {
        let client = fleet.spoke(name).client();
        install(&client, secret.clone(), address, loadbalanced("IE")).await?;
        clusters.push((
            meridian_agent::report::cluster_id(&client).await?,
            address,
            geo,
        ));
        agents.push(agent_with_route53_at(&client, name, geo, proxy.endpoint()).await?);
    }
    let route53 = moto.provider(1000);
    let zone_id = zone_id_of(&route53, "example.com").await;

    // The branches add up to exactly the tree a hub would publish for the three clusters:
    // the same names, GEO groups and weights.
    let expected = hub_tree(&clusters);
    let last = std::sync::Mutex::new(Vec::new());
    let union = eventually(
        "the zone holds the union of the branches",
        DEFAULT_PATIENCE,
        || async {
            let zone = route53
                .records(&zone_id)
                .await
                .map_err(|e| Error::Component(e.to_string()))?;
            let seen = host_records(&zone);
            *last.lock().unwrap() = seen.clone();
            Ok((seen == expected).then_some(()))
        },
    )
    .await;
    if union.is_err() {
        let seen = last.lock().unwrap().clone();
        let missing: Vec<&Endpoint> = expected.iter().filter(|e| !seen.contains(e)).collect();
        let extra: Vec<&Endpoint> = seen.iter().filter(|e| !expected.contains(e)).collect();
        panic!("missing {missing:#?}\nextra {extra:#?}");
    }

    // Steady state: a refresh looks at the host in one call (its records, the mark among them,
    // as the host fits one read) and reads nothing else. The zone can hold the
    // union before the last writer's mark has reached the others (each lists the zone once when
    // it sees the mark move), so a window that still has such a list is looked at again; a
    // cluster that kept listing would fail every window.
    let mut calls = BTreeMap::new();
    for window in 1..=4 {
        tokio::time::sleep(Duration::from_secs(3)).await;
        proxy.reset();
        tokio::time::sleep(Duration::from_secs(7)).await;
        calls = proxy.calls();
        let settled = !calls.contains_key("ListResourceRecordSets")
            && !calls.contains_key("ChangeResourceRecordSets");
        if settled {
            break;
        }
        eprintln!("distributed: not steady yet in window {window}: {calls:?}");
    }
    assert_eq!(calls.get("ListResourceRecordSets"), None, "{calls:?}");
    assert_eq!(calls.get("ChangeResourceRecordSets"), None, "{calls:?}");
    let reads = calls
        .get("ListResourceRecordSets(host)")
        .copied()
        .unwrap_or(0);
    assert!(reads >= 6, "3 clusters refreshing every 2 s: {calls:?}");
    assert_eq!(
        calls.get("ListResourceRecordSets(one)"),
        None,
        "a shared host's look reads the host, not its mark alone: {calls:?}"
    );
    eprintln!("distributed: 3 clusters over 7 s of steady state made {calls:?}");

    // A conflict: spoke-3 wants US to answer unknown locations, the others IE. It is said in
    // spoke-3's status and not fought over: the writes stay bounded.
    let spoke_3 = fleet.spoke("spoke-3").client();
    apply(
        &Api::<meridian_api::kuadrant::DNSPolicy>::namespaced(spoke_3.clone(), NAMESPACE),
        loadbalanced("US"),
    )
    .await?;
    let records = Api::<DNSRecord>::namespaced(spoke_3.clone(), NAMESPACE);
    let message = eventually("spoke-3 reports the conflict", DEFAULT_PATIENCE, || async {
        let record = records.get("prod-web-api").await?;
        let ready = record
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Ready");
        Ok(ready.filter(|c| c.status == "False").map(|c| c.message))
    })
    .await?;
    assert!(
        message.contains("conflict") || message.contains("disagree"),
        "{message}"
    );
    proxy.reset();
    // Every cluster looks at the zone again and again (each look reads it): three rounds of
    // the three clusters' 2 s refreshes.
    let calls = eventually("the clusters look again", DEFAULT_PATIENCE, || async {
        let calls = proxy.calls();
        Ok((zone_reads(&calls) >= 9).then_some(calls))
    })
    .await?;
    let writes = calls.get("ChangeResourceRecordSets").copied().unwrap_or(0);
    assert!(
        writes <= 1,
        "a conflict is not rewritten in a loop: {calls:?}"
    );
    eprintln!("distributed: three rounds of a defaultGeo conflict made {calls:?}");
    let zone = route53.records(&zone_id).await.unwrap();
    assert_eq!(
        host_records(&zone),
        expected,
        "the published catch-all stays IE"
    );

    // spoke-3 vanishes without cleaning up (its agent stops, its policy stays). Its records
    // stay too: nobody else touches them. The owner counts show it; purging its ID removes
    // its branch, and the others' records are intact, equal to a hub's tree for the two.
    let spoke_3_records = Api::<DNSRecord>::namespaced(spoke_3.clone(), NAMESPACE);
    apply(
        &Api::<meridian_api::kuadrant::DNSPolicy>::namespaced(spoke_3.clone(), NAMESPACE),
        loadbalanced("IE"),
    )
    .await?;
    eventually("spoke-3 agrees again", DEFAULT_PATIENCE, || async {
        let record = spoke_3_records.get("prod-web-api").await?;
        let ready = record
            .status
            .unwrap_or_default()
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        Ok(ready.then_some(()))
    })
    .await?;
    agents.pop().expect("spoke-3's agent").abort();
    let zone = route53.records(&zone_id).await.unwrap();
    let counts = meridian_controllers::zones::owners::owner_counts(&zone);
    assert_eq!(counts.len(), 3, "{counts:?}");
    let vanished = clusters[2].0.clone();
    assert!(
        counts[&vanished] >= 2,
        "its own cluster and weighted records: {counts:?}"
    );
    let purged =
        meridian_controllers::zones::owners::purge(&route53, &zone_id, "example.com", &vanished)
            .await
            .unwrap();
    assert!(purged > 0);
    let zone = route53.records(&zone_id).await.unwrap();
    assert_eq!(host_records(&zone), hub_tree(&clusters[..2]));
    assert!(!meridian_controllers::zones::owners::owner_counts(&zone).contains_key(&vanished));
    for agent in agents {
        agent.abort();
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_clusters_agree_on_health_through_the_zone() -> Result<(), Error> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let bind = bind_zone().await?;
    let gateways = loopback(&["127.0.4.1", "127.0.4.2", "127.0.4.3"]);
    let sources = loopback(&["127.0.5.1", "127.0.5.2", "127.0.5.3"]);
    let backends = Backends::default();
    // The backends want a token, which each cluster's policy names in a Secret of its own.
    backends.lock().unwrap().required_header = Some(("X-Probe-Token".into(), "s3cret".into()));
    let port = start_backends(&gateways, backends.clone()).await;
    let fleet = fleet_without_ocm(&CLUSTERS.map(|c| c.0)).await?;
    let secret = rfc2136_secret(&bind);
    let mut agents = Vec::new();
    let mut ids = Vec::new();
    for (index, (name, _, geo)) in CLUSTERS.into_iter().enumerate() {
        let client = fleet.spoke(name).client();
        let spec = json!({
            "targetRef": { "name": "prod-web" },
            "routingStrategy": "simple",
            "healthCheck": {
                "endpoint": "/healthz", "port": port, "protocol": "HTTP", "interval": "5s", "failureThreshold": 1,
                "additionalHeadersRef": { "name": "probe-auth" },
            },
        });
        install(
            &client,
            secret.clone(),
            &gateways[index].to_string(),
            policy(spec),
        )
        .await?;
        apply(
            &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), NAMESPACE),
            json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": { "name": "probe-auth", "namespace": NAMESPACE },
                "type": "meridian.dev/probe-headers",
                "stringData": { "X-Probe-Token": "s3cret" },
            }),
        )
        .await?;
        ids.push(meridian_agent::report::cluster_id(&client).await?);
        agents.push(
            agent_probing_from(
                &client,
                name,
                geo,
                Some(sources[index]),
                ProviderSettings::test_bed(),
            )
            .await?,
        );
    }
    let all = ["127.0.4.1", "127.0.4.2", "127.0.4.3"];
    dig_answers(bind.config.server, &all).await?;
    let provider = Rfc2136Provider::new(bind.config.clone()).unwrap();
    let reports = || async {
        let zone = provider.records("example.com").await.unwrap();
        meridian_controllers::decide::shared_health::read_reports(&zone, HOST)
            .into_iter()
            .map(|(address, (_, ids))| (address, ids))
            .collect::<std::collections::BTreeMap<_, _>>()
    };

    // spoke-1 alone sees 127.0.4.2 failing: it says so in the zone, and the address stays.
    backends
        .lock()
        .unwrap()
        .failing_for
        .insert(gateways[1], vec![sources[0]]);
    eventually(
        "spoke-1's report is in the zone",
        DEFAULT_PATIENCE,
        || async {
            let seen = reports().await;
            Ok((seen.get("127.0.4.2") == Some(&BTreeSet::from([ids[0].clone()]))).then_some(()))
        },
    )
    .await?;
    for _ in 0..5 {
        assert_eq!(
            tokio::task::spawn_blocking({
                let s = bind.config.server;
                move || dig(s)
            })
            .await
            .unwrap(),
            all,
            "1 of 3 keeps it"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // spoke-3 sees it failing too: 2 of 3, and spoke-2 withdraws its address.
    backends
        .lock()
        .unwrap()
        .failing_for
        .insert(gateways[1], vec![sources[0], sources[2]]);
    dig_answers(bind.config.server, &["127.0.4.1", "127.0.4.3"]).await?;
    let both = BTreeSet::from([ids[0].clone(), ids[2].clone()]);
    eventually(
        "spoke-1 and spoke-3 both report it",
        DEFAULT_PATIENCE,
        || async { Ok((reports().await.get("127.0.4.2") == Some(&both)).then_some(())) },
    )
    .await?;
    let spoke_2_records = Api::<DNSRecord>::namespaced(fleet.spoke("spoke-2").client(), NAMESPACE);
    eventually(
        "spoke-2 says why its address is out",
        DEFAULT_PATIENCE,
        || async {
            let record = spoke_2_records.get("prod-web-api").await?;
            let said = record
                .status
                .unwrap_or_default()
                .conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.message.contains("127.0.4.2 withdrawn: 2 of 3"));
            Ok(said.then_some(()))
        },
    )
    .await?;

    // It recovers: back in DNS, and the reports go.
    backends.lock().unwrap().failing_for.clear();
    dig_answers(bind.config.server, &all).await?;
    eventually("the reports are cleared", DEFAULT_PATIENCE, || async {
        Ok(reports().await.is_empty().then_some(()))
    })
    .await?;

    // Every address fails from everywhere: none is removed.
    {
        let mut backends = backends.lock().unwrap();
        for gateway in &gateways {
            backends.failing_for.insert(*gateway, sources.clone());
        }
    }
    let everything_failing = std::time::Instant::now();
    eventually(
        "every address is reported by every cluster",
        DEFAULT_PATIENCE,
        || async {
            let seen = reports().await;
            eprintln!(
                "{:.1} s: reports {:?}",
                everything_failing.elapsed().as_secs_f64(),
                seen.iter()
                    .map(|(a, ids)| (a, ids.len()))
                    .collect::<Vec<_>>()
            );
            Ok((seen.len() == 3 && seen.values().all(|ids| ids.len() == 3)).then_some(()))
        },
    )
    .await?;
    // Each cluster has decided on those reports: it says it publishes them all.
    for (name, _, _) in CLUSTERS {
        let records = Api::<DNSRecord>::namespaced(fleet.spoke(name).client(), NAMESPACE);
        eventually(
            &format!("{name} keeps every address"),
            DEFAULT_PATIENCE,
            || async {
                let message = ready_message(&records, "prod-web-api").await?;
                Ok(message.contains("publishing all of them").then_some(()))
            },
        )
        .await?;
    }
    dig_answers(bind.config.server, &all).await?;
    for agent in agents {
        agent.abort();
    }
    Ok(())
}

/// On Route53 a cluster settles a look at a host another cluster changed with a read of the
/// host's own records, planning nothing. It must still probe the other cluster's new address,
/// as a plan would: here only the other two clusters see it failing (its own cluster does not
/// and never reports it), and it goes only if both of them probe it and say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_look_settled_on_route53_still_probes_another_clusters_new_address() -> Result<(), Error>
{
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let (moto, proxy) = route53_zone().await?;
    let gateways = loopback(&["127.0.6.1", "127.0.6.2", "127.0.6.3", "127.0.6.33"]);
    let sources = loopback(&["127.0.7.1", "127.0.7.2", "127.0.7.3"]);
    let backends = Backends::default();
    let port = start_backends(&gateways, backends.clone()).await;
    let fleet = fleet_without_ocm(&CLUSTERS.map(|c| c.0)).await?;
    let providers = ProviderSettings {
        aws_endpoint: Some(proxy.endpoint()),
        ..ProviderSettings::test_bed()
    };
    let spec = json!({
        "targetRef": { "name": "prod-web" },
        "routingStrategy": "simple",
        "healthCheck": {
            "endpoint": "/healthz", "port": port, "protocol": "HTTP", "interval": "5s", "failureThreshold": 1,
        },
    });
    let (agents, ids) = install_probing(
        &fleet,
        &CLUSTERS.map(|(name, _, geo)| (name, geo)),
        (&gateways, &sources),
        (&providers, &route53_secret()),
        &spec,
    )
    .await?;
    let route53 = moto.provider(1000);
    let zone_id = zone_id_of(&route53, "example.com").await;
    let answers = || async {
        let zone = route53.records(&zone_id).await.unwrap();
        let mut answers: Vec<String> = zone
            .iter()
            .filter(|e| e.dns_name == HOST && e.record_type == RecordType::A)
            .flat_map(|e| e.targets.clone())
            .collect();
        answers.sort();
        (zone, answers)
    };
    let publishes = |expected: &'static [&'static str]| {
        let answers = &answers;
        async move {
            eventually(
                &format!("the host answers {expected:?}"),
                DEFAULT_PATIENCE,
                || async { Ok((answers().await.1 == expected).then_some(())) },
            )
            .await
        }
    };
    publishes(&["127.0.6.1", "127.0.6.2", "127.0.6.3"]).await?;

    // spoke-3's Gateway moves to an address that spoke-1 and spoke-2 see failing, and spoke-3
    // itself does not.
    backends
        .lock()
        .unwrap()
        .failing_for
        .insert(gateways[3], vec![sources[0], sources[1]]);
    proxy.reset();
    Api::<Gateway>::namespaced(fleet.spoke("spoke-3").client(), NAMESPACE)
        .patch_status(
            "prod-web",
            &PatchParams::apply("gateway-implementation").force(),
            &Patch::Apply(fixtures::gateway_status(&["127.0.6.33"], &[("api", 1)])),
        )
        .await?;
    publishes(&["127.0.6.1", "127.0.6.2"]).await?;
    let (zone, _) = answers().await;
    let reports = meridian_controllers::decide::shared_health::read_reports(&zone, HOST);
    assert_eq!(
        reports.get("127.0.6.33").map(|(_, ids)| ids.clone()),
        Some(BTreeSet::from([ids[0].clone(), ids[1].clone()])),
        "both clusters that see it failing report it"
    );
    let calls = proxy.calls();
    assert!(
        calls
            .get("ListResourceRecordSets(host)")
            .copied()
            .unwrap_or(0)
            > 0,
        "the others looked at the host's own records: {calls:?}"
    );
    for agent in agents {
        agent.abort();
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_and_a_distributed_cluster_share_one_host() -> Result<(), Error> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let bind = bind_zone().await?;
    let fleet = fleet_without_ocm(&["spoke-1"]).await?;
    let secret = rfc2136_secret(&bind);

    // The hub publishes the host through its own DNSRecord, in hub mode.
    let hub = fleet.hub.client();
    ensure_namespace(&hub, NAMESPACE).await?;
    apply(
        &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(hub.clone(), NAMESPACE),
        secret.clone(),
    )
    .await?;
    apply(
        &Api::<meridian_api::kuadrant::ManagedZone>::namespaced(hub.clone(), NAMESPACE),
        fixtures::managed_zone(NAMESPACE, "example", "example.com")
            .at_provider("zone")
            .json(),
    )
    .await?;
    let mut args = meridian_hub::run_command::RunArgs::local(fleet.hub.kubeconfig_path());
    // BIND listens on loopback: the admin allows it (a Secret alone could not).
    args.providers.rfc2136_server_allow = vec!["127.0.0.0/8".into()];
    let running = meridian_hub::run_command::RunningHub::start(&args)
        .await
        .map_err(|e| Error::Component(e.to_string()))?;
    let hub_records = Api::<DNSRecord>::namespaced(hub.clone(), NAMESPACE);
    apply(
        &hub_records,
        fixtures::dns_record(NAMESPACE, "prod-web-api", "example")
            .root_host(HOST)
            .endpoint(HOST, "A", &["10.0.0.9"])
            .json(),
    )
    .await?;
    dig_answers(bind.config.server, &["10.0.0.9"]).await?;

    // A cluster in distributed mode adds its branch to the same host.
    let spoke = fleet.spoke("spoke-1").client();
    install(
        &spoke,
        secret,
        "10.0.0.1",
        policy(json!({ "targetRef": { "name": "prod-web" }, "routingStrategy": "simple" })),
    )
    .await?;
    let distributed = agent(&spoke, "spoke-1", "IE").await?;
    dig_answers(bind.config.server, &["10.0.0.1", "10.0.0.9"]).await?;
    let provider = Rfc2136Provider::new(bind.config.clone()).unwrap();
    assert_eq!(
        owners_of_host(&provider.records("example.com").await.unwrap()).len(),
        2
    );

    // The hub withdraws its record: the distributed cluster's part stays.
    hub_records
        .delete("prod-web-api", &DeleteParams::default())
        .await?;
    dig_answers(bind.config.server, &["10.0.0.1"]).await?;
    distributed.abort();
    running.stop().await;
    Ok(())
}

/// The zone split into the cluster's records and everything else.
fn split_by_owner(zone: &[Endpoint], cluster: &str) -> (Vec<Endpoint>, Vec<Endpoint>) {
    meridian_e2e::external_dns::split_by_owner(zone, "example.com", &[cluster.to_string()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distributed_cluster_and_external_dns_share_a_bind_zone() -> Result<(), Error> {
    use meridian_e2e::external_dns::{self, ExternalDns, ExternalDnsZone};
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let bind = bind_zone().await?;
    let fleet = fleet_without_ocm(&["spoke-1"]).await?;
    let spoke = fleet.spoke("spoke-1").client();
    let kubeconfig = fleet.spoke("spoke-1").kubeconfig_path().to_path_buf();
    let external_dns = ExternalDns::locate("edns")?;
    external_dns.install_crd(&spoke).await?;
    ensure_namespace(&spoke, NAMESPACE).await?;
    let target = ExternalDnsZone::rfc2136(&bind.config);
    let sync = || external_dns.sync_once(&kubeconfig, &target);
    let provider = Rfc2136Provider::new(bind.config.clone()).unwrap();
    let zone = || async { provider.records("example.com").await.unwrap() };

    // external-dns holds a name of its own, and the cluster's host before the cluster comes.
    external_dns::want_a_record(&spoke, NAMESPACE, "shop", "shop.example.com", "192.0.2.10")
        .await?;
    external_dns::want_a_record(&spoke, NAMESPACE, "api", HOST, "192.0.2.50").await?;
    sync().await?;
    install(
        &spoke,
        rfc2136_secret(&bind),
        "10.0.0.1",
        policy(json!({ "targetRef": { "name": "prod-web" }, "routingStrategy": "simple" })),
    )
    .await?;
    let owner = meridian_agent::report::cluster_id(&spoke).await?;
    let distributed = agent(&spoke, "spoke-1", "IE").await?;
    let records = Api::<DNSRecord>::namespaced(spoke.clone(), NAMESPACE);
    let refusal = eventually(
        "the cluster reports the host's owner",
        DEFAULT_PATIENCE,
        || async {
            let message = ready_message(&records, "prod-web-api").await?;
            Ok(message
                .contains("owned by external-dns owner edns")
                .then_some(message))
        },
    )
    .await?;
    assert!(refusal.contains("a-api.example.com"), "{refusal}");
    let contested = zone().await;
    let (ours, theirs) = split_by_owner(&contested, &owner);
    assert!(ours.is_empty(), "the cluster took nothing: {ours:#?}");
    for _ in 0..2 {
        sync().await?;
    }
    assert_eq!(
        split_by_owner(&zone().await, &owner).1,
        theirs,
        "nobody flaps"
    );

    // external-dns lets the host go; the cluster publishes it at its next look (woken here
    // rather than waiting out its backoff), and external-dns leaves it alone from then on.
    external_dns::dns_endpoints(&spoke, NAMESPACE)
        .delete("api", &DeleteParams::default())
        .await?;
    sync().await?;
    records
        .patch(
            "prod-web-api",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { "test/wake": "1" } } })),
        )
        .await?;
    dig_answers(bind.config.server, &["10.0.0.1"]).await?;
    let shared = zone().await;
    let (ours, theirs) = split_by_owner(&shared, &owner);
    assert_eq!(
        ours.len(),
        2,
        "the A record and its ownership record: {ours:#?}"
    );
    external_dns::want_a_record(&spoke, NAMESPACE, "api", HOST, "192.0.2.51").await?;
    external_dns::want_a_record(&spoke, NAMESPACE, "shop", "shop.example.com", "192.0.2.11")
        .await?;
    let log = sync().await?;
    assert!(log.contains("owner id does not match"), "{log}");
    let updated = zone().await;
    assert_eq!(
        split_by_owner(&updated, &owner).0,
        ours,
        "external-dns left the cluster's records"
    );
    assert_ne!(
        split_by_owner(&updated, &owner).1,
        theirs,
        "external-dns updated its own"
    );

    // The cluster withdraws: external-dns's records stay as they are.
    let theirs = split_by_owner(&updated, &owner).1;
    Api::<meridian_api::kuadrant::DNSPolicy>::namespaced(spoke.clone(), NAMESPACE)
        .delete("prod-web", &DeleteParams::default())
        .await?;
    dig_answers(bind.config.server, &[]).await?;
    let after = zone().await;
    assert_eq!(split_by_owner(&after, &owner), (Vec::new(), theirs));
    distributed.abort();
    Ok(())
}

/// Kuadrant's dns-operator cannot run in the test bed (its Go module is not served by the
/// module proxy here), so a Route53 zone (moto) is seeded with what one of its clusters writes
/// for the host (`dns/tests/fixtures/dns-operator-zone.json`, from its documented layout). A
/// distributed cluster joins the host: it adds its branch beside the dns-operator's, rewrites
/// none of the dns-operator's records or ownership records, and reports the catch-all they
/// disagree on (the dns-operator answers unknown locations from IE, this cluster's policy says
/// US) without fighting over it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_distributed_cluster_joins_a_host_the_dns_operator_publishes() -> Result<(), Error> {
    use meridian_testkit::counting_proxy::CountingProxy;
    use meridian_testkit::moto::MotoServer;
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let moto = MotoServer::start().expect("moto starts");
    moto.create_zone("example.com")
        .await
        .map_err(Error::Component)?;
    let route53 = moto.provider(1000);
    let zone_id = zone_id_of(&route53, "example.com").await;
    let text = std::fs::read_to_string(
        meridian_e2e::repository_root().join("dns/tests/fixtures/dns-operator-zone.json"),
    )
    .unwrap();
    let fixture: Vec<Endpoint> =
        serde_json::from_value(serde_json::from_str::<Value>(&text).unwrap()["records"].clone())
            .unwrap();
    let theirs: Vec<Endpoint> = fixture
        .into_iter()
        .filter(|r| {
            meridian_dns::model::is_at_or_below(&r.dns_name, HOST)
                || r.dns_name.ends_with(&format!("-{HOST}"))
        })
        .collect();
    route53
        .apply(
            &zone_id,
            &meridian_dns::changes::Changes {
                creates: theirs.clone(),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let as_seeded = |zone: &[Endpoint]| -> Vec<Endpoint> {
        theirs
            .iter()
            .filter(|r| {
                !zone.iter().any(|z| {
                    let (mut z, mut r) = (z.clone(), (*r).clone());
                    z.normalize();
                    r.normalize();
                    z.targets = z
                        .targets
                        .iter()
                        .map(|t| t.trim_matches('"').to_string())
                        .collect();
                    r.targets = r
                        .targets
                        .iter()
                        .map(|t| t.trim_matches('"').to_string())
                        .collect();
                    z == r
                })
            })
            .cloned()
            .collect()
    };
    assert_eq!(
        as_seeded(&route53.records(&zone_id).await.unwrap()),
        Vec::<Endpoint>::new(),
        "seeded"
    );

    let fleet = fleet_without_ocm(&["spoke-1"]).await?;
    let spoke = fleet.spoke("spoke-1").client();
    let secret = route53_secret();
    install(&spoke, secret, "10.0.0.1", loadbalanced("US")).await?;
    let owner = meridian_agent::report::cluster_id(&spoke).await?;
    let proxy = CountingProxy::start(moto.address(), 0).await.unwrap();
    let distributed = agent_with_route53_at(&spoke, "spoke-1", "US", proxy.endpoint()).await?;

    let records = Api::<DNSRecord>::namespaced(spoke.clone(), NAMESPACE);
    let conflict = eventually(
        "the cluster reports the catch-all conflict",
        DEFAULT_PATIENCE,
        || async {
            let message = ready_message(&records, "prod-web-api").await?;
            Ok(message.contains("owners disagree").then_some(message))
        },
    )
    .await?;
    assert!(conflict.contains("klb.api.example.com"), "{conflict}");
    let joined = eventually(
        "the cluster's branch is in the zone",
        DEFAULT_PATIENCE,
        || async {
            let zone = route53.records(&zone_id).await.unwrap();
            let registry = Registry::read(&zone);
            let root_owners = registry
                .ownership
                .iter()
                .find(|(key, _)| key.dns_name == HOST)
                .map(|(_, owners)| owners.keys().cloned().collect::<BTreeSet<_>>())
                .unwrap_or_default();
            let us = zone.iter().any(|r| r.dns_name == "us.klb.api.example.com");
            Ok((us && root_owners.len() == 2).then_some(zone))
        },
    )
    .await?;
    assert_eq!(
        as_seeded(&joined),
        Vec::<Endpoint>::new(),
        "the dns-operator's records are as it wrote them"
    );
    let registry = Registry::read(&joined);
    assert!(
        registry
            .owners(&Endpoint::new(HOST, RecordType::Cname, [String::new()], 0).key())
            .contains(owner.as_str())
    );

    // Looking again and again does not fight over the catch-all: three more looks.
    proxy.reset();
    eventually("the cluster looks again", DEFAULT_PATIENCE, || async {
        Ok((zone_reads(&proxy.calls()) >= 3).then_some(()))
    })
    .await?;
    let later = route53.records(&zone_id).await.unwrap();
    assert_eq!(as_seeded(&later), Vec::<Endpoint>::new());
    let default = |zone: &[Endpoint]| {
        zone.iter()
            .find(|r| {
                r.dns_name == "klb.api.example.com"
                    && r.set_identifier.as_deref() == Some("default")
                    && r.record_type == RecordType::Cname
            })
            .map(|r| r.targets.clone())
    };
    assert_eq!(
        default(&later),
        Some(vec!["ie.klb.api.example.com".to_string()])
    );
    distributed.abort();
    Ok(())
}

/// The addresses the host's weighted set answers with in a zone: each member's target's A
/// record.
fn serving_addresses(zone: &[Endpoint]) -> BTreeSet<String> {
    zone.iter()
        .filter(|e| e.record_type == RecordType::Cname && e.set_identifier.is_some())
        .filter(|e| e.dns_name.ends_with(&format!(".klb.{HOST}")))
        .flat_map(|member| {
            zone.iter()
                .filter(|leaf| {
                    leaf.record_type == RecordType::A && leaf.dns_name == member.targets[0]
                })
                .flat_map(|leaf| leaf.targets.clone())
        })
        .collect()
}

/// The tier tests' fleet: spoke-1 in Ireland, tier 1; spoke-2 and spoke-3 in the US, tier 2.
const TIERED_CLUSTERS: [(&str, &str); 3] =
    [("spoke-1", "IE"), ("spoke-2", "US"), ("spoke-3", "US")];

/// The tier tests' policy: one weighted set, IE before US with a 20 s hold-down, a 5 s TTL, and
/// gateways probed on `port` every 5 s.
fn tiered_spec(port: u16) -> Value {
    json!({
        "targetRef": { "name": "prod-web" },
        "routingStrategy": "loadbalanced",
        "ttl": "5s",
        "loadBalancing": {
            "weighted": { "defaultWeight": 120 },
            "failover": {
                "priorities": [
                    { "attribute": "geo-code", "value": "IE", "priority": 1 },
                    { "attribute": "geo-code", "value": "US", "priority": 2 },
                ],
                "holdDown": "20s",
            },
        },
        "healthCheck": {
            "endpoint": "/healthz", "port": port, "protocol": "HTTP", "interval": "5s", "failureThreshold": 1,
        },
    })
}

/// Priority tiers without a hub: spoke-1 (IE) is tier 1, spoke-2 and spoke-3 (US) tier 2, in
/// one weighted set on Route53 (moto), each gateway a real HTTP backend every cluster probes.
/// Only tier 1 is published; when its gateway fails, tier 2 takes over, and the set is never
/// empty on the way (each cluster leaves only once its successor is in); when it recovers,
/// it takes the traffic back only after the hold-down, which its agent, restarted meanwhile,
/// reads back from the zone. A drain label on tier 1 (its agent restarted with it) then
/// hands the traffic to tier 2 in steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_tiers_fail_over_and_back_through_a_shared_route53_zone() -> Result<(), Error> {
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let (moto, proxy) = route53_zone().await?;
    let gateways = loopback(&["127.0.8.1", "127.0.8.2", "127.0.8.3"]);
    let sources = loopback(&["127.0.9.1", "127.0.9.2", "127.0.9.3"]);
    let backends = Backends::default();
    let port = start_backends(&gateways, backends.clone()).await;
    let clusters = TIERED_CLUSTERS;
    let fleet = fleet_without_ocm(&clusters.map(|c| c.0)).await?;
    let spec = tiered_spec(port);
    let providers = ProviderSettings {
        aws_endpoint: Some(proxy.endpoint()),
        ..ProviderSettings::test_bed()
    };
    let (mut agents, ids) = install_probing(
        &fleet,
        &clusters,
        (&gateways, &sources),
        (&providers, &route53_secret()),
        &spec,
    )
    .await?;
    let route53 = moto.provider(1000);
    let zone_id = zone_id_of(&route53, "example.com").await;
    let zone = || async {
        route53
            .records(&zone_id)
            .await
            .map_err(|e| Error::Component(e.to_string()))
    };
    let addresses =
        |items: &[&str]| -> BTreeSet<String> { items.iter().map(|s| s.to_string()).collect() };
    let tier_1 = addresses(&["127.0.8.1"]);
    let tier_2 = addresses(&["127.0.8.2", "127.0.8.3"]);
    // Waits until the set answers with `expected`.
    let serves = |what: &'static str, expected: BTreeSet<String>| {
        let zone = &zone;
        eventually(what, DEFAULT_PATIENCE, move || {
            let expected = expected.clone();
            async move {
                let seen = serving_addresses(&zone().await?);
                Ok((seen == expected).then_some(()))
            }
        })
    };

    // Tier 1 alone serves; tier 2's leaves are published too (nothing points at them), so every
    // cluster probes them, and every cluster keeps its standing in the zone.
    let owners: BTreeSet<String> = ids.iter().cloned().collect();
    eventually(
        "tier 1 alone serves, every leaf is published and every cluster has its standing",
        DEFAULT_PATIENCE,
        || async {
            let zone = zone().await?;
            let leaves = gateways.iter().all(|gateway| {
                zone.iter().any(|e| {
                    e.record_type == RecordType::A && e.targets.contains(&gateway.to_string())
                })
            });
            let standing: BTreeSet<String> =
                meridian_controllers::decide::shared_tiers::read_standings(&zone, HOST)
                    .into_iter()
                    .map(|s| s.owner)
                    .collect();
            Ok((serving_addresses(&zone) == tier_1 && leaves && standing == owners).then_some(()))
        },
    )
    .await?;

    // Tier 1's gateway fails for everyone: tier 2 takes over, never leaving the set empty.
    backends.lock().unwrap().dead.insert(gateways[0]);
    // From here on the set is read every 200 ms: it must never be empty.
    let emptied = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let watch_for_empty = tokio::spawn({
        let route53 = moto.provider(1000);
        let zone_id = zone_id.clone();
        let emptied = emptied.clone();
        async move {
            loop {
                if let Ok(zone) = route53.records(&zone_id).await
                    && serving_addresses(&zone).is_empty()
                {
                    emptied.lock().unwrap().push(zone);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    serves("tier 2 serves once tier 1 fails", tier_2.clone()).await?;
    let spoke_2_records = Api::<DNSRecord>::namespaced(fleet.spoke("spoke-2").client(), NAMESPACE);

    // Tier 1 recovers. Its agent restarts meanwhile: the hold-down goes on from when tier 1
    // said it was live, read back from the zone, and tier 2 says why it still serves.
    backends.lock().unwrap().dead.clear();
    let live_since = |zone: &[Endpoint]| {
        meridian_controllers::decide::shared_tiers::read_standings(zone, HOST)
            .into_iter()
            .find(|s| s.owner == ids[0])
            .and_then(|s| s.live_since)
    };
    let since = eventually("tier 1 says it is live again", DEFAULT_PATIENCE, || async {
        Ok(live_since(&zone().await?))
    })
    .await?;
    eventually(
        "tier 2 says tier 1 is held down",
        DEFAULT_PATIENCE,
        || async {
            let message = ready_message(&spoke_2_records, "prod-web-api").await?;
            Ok(message
                .contains("takes traffic back after 20 s of hold-down")
                .then_some(()))
        },
    )
    .await?;
    agents[0].abort();
    agents[0] = agent_probing_from(
        &fleet.spoke("spoke-1").client(),
        "spoke-1",
        "IE",
        Some(sources[0]),
        providers.clone(),
    )
    .await?;
    serves(
        "tier 1 takes its traffic back after the hold-down",
        tier_1.clone(),
    )
    .await?;
    assert_eq!(
        live_since(&zone().await?),
        Some(since),
        "the restarted agent kept tier 1's hold-down as the zone had it"
    );

    // A drain label on tier 1 (its agent restarted with it): its weight steps down to 0 and
    // tier 2, still weighted, takes the traffic.
    agents[0].abort();
    agents[0] = agent_labelled(
        &fleet.spoke("spoke-1").client(),
        "spoke-1",
        "IE",
        &[(meridian_api::labels::DRAIN_LABEL, "true")],
        Some(sources[0]),
        providers.clone(),
    )
    .await?;
    // In steps a TTL apart (5 s), not at once: the agent, restarted with the label, takes
    // the drain up from its policy's status.
    let policies = Api::<meridian_api::kuadrant::DNSPolicy>::namespaced(
        fleet.spoke("spoke-1").client(),
        NAMESPACE,
    );
    eventually(
        "spoke-1 drains a step at a time",
        DEFAULT_PATIENCE,
        || async {
            let policy = policies.get("prod-web").await?;
            let steps: Vec<u32> = policy
                .status
                .iter()
                .flat_map(|s| &s.draining)
                .filter(|d| d.phase == "Draining")
                .map(|d| d.weight_percent)
                .collect();
            Ok(steps.iter().any(|p| *p == 50 || *p == 10).then_some(()))
        },
    )
    .await?;
    serves("tier 2 serves once tier 1 is drained", tier_2.clone()).await?;

    watch_for_empty.abort();
    let emptied = emptied.lock().unwrap();
    assert!(
        emptied.is_empty(),
        "the set was empty: {:#?}",
        emptied.first()
    );
    for agent in agents {
        agent.abort();
    }
    Ok(())
}

/// Priority tiers on a zone of plain records, with real clients: spoke-1 (IE) is tier 1,
/// spoke-2 and spoke-3 (US) tier 2, and BIND holds the zone, where the host's one A record
/// answers with the serving tier's addresses and every cluster's leaf stays published for the
/// fleet to probe. Clients resolve the host through Unbound and send a request to the address
/// it gives every 100 ms; each gateway is a real HTTP backend that says which address served.
/// Tier 1 fails: its traffic goes to tier 2 once the clusters agree and the resolver's cache
/// expires. It recovers: the traffic comes back after the hold-down without one failed
/// request, since tier 1 is in the record before tier 2 leaves it. The host answers with some
/// address throughout (BIND is asked every 200 ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_tiers_move_real_traffic_through_a_shared_bind_zone() -> Result<(), Error> {
    use meridian_e2e::traffic::{Clients, Outcome, Resolver, Sample, recovery};
    let _one_at_a_time = ONE_AT_A_TIME.lock().await;
    let bind = bind_zone().await?;
    let gateways = loopback(&["127.0.10.1", "127.0.10.2", "127.0.10.3"]);
    let sources = loopback(&["127.0.11.1", "127.0.11.2", "127.0.11.3"]);
    let backends = Backends::default();
    let port = start_backends(&gateways, backends.clone()).await;
    let clusters = TIERED_CLUSTERS;
    let fleet = fleet_without_ocm(&clusters.map(|c| c.0)).await?;
    let spec = tiered_spec(port);
    let (agents, ids) = install_probing(
        &fleet,
        &clusters,
        (&gateways, &sources),
        (&ProviderSettings::test_bed(), &rfc2136_secret(&bind)),
        &spec,
    )
    .await?;
    let ids: BTreeSet<String> = ids.into_iter().collect();
    let provider = Rfc2136Provider::new(bind.config.clone()).unwrap();
    let tier_1 = vec!["127.0.10.1".to_string()];
    let tier_2 = vec!["127.0.10.2".to_string(), "127.0.10.3".to_string()];

    // Tier 1 alone is in the host's record; every leaf is published and every cluster has
    // its standing.
    eventually(
        "tier 1 alone answers, every leaf is published and every cluster has its standing",
        DEFAULT_PATIENCE,
        || async {
            let zone = provider.records("example.com").await.unwrap();
            let answers: Vec<String> = zone
                .iter()
                .filter(|e| e.dns_name == HOST && e.record_type == RecordType::A)
                .flat_map(|e| e.targets.clone())
                .collect();
            let leaves = gateways.iter().all(|gateway| {
                zone.iter().any(|e| {
                    e.record_type == RecordType::A
                        && e.dns_name != HOST
                        && e.targets.contains(&gateway.to_string())
                })
            });
            let standing: BTreeSet<String> =
                meridian_controllers::decide::shared_tiers::read_standings(&zone, HOST)
                    .into_iter()
                    .map(|s| s.owner)
                    .collect();
            Ok((answers == tier_1 && leaves && standing == ids).then_some(()))
        },
    )
    .await?;
    dig_answers(bind.config.server, &["127.0.10.1"]).await?;

    // Real clients through Unbound, in front of BIND.
    let resolver = Resolver::start("example.com", &[bind.config.server]).await?;
    let clients = Clients::start_at(
        4,
        resolver.address(),
        (HOST, port),
        Duration::from_millis(100),
        Duration::from_secs(1),
    );
    let mut samples: Vec<Sample> = Vec::new();
    // Waits until the last two seconds of requests were all served by `expected`.
    let served_only_by = |samples: &mut Vec<Sample>, expected: Vec<String>, what: &str| {
        let what = what.to_string();
        let clients = &clients;
        let taken = std::sync::Mutex::new(std::mem::take(samples));
        async move {
            let result = eventually(&what, DEFAULT_PATIENCE, || async {
                let mut taken = taken.lock().unwrap();
                taken.extend(clients.take());
                let since = clients.now().saturating_sub(Duration::from_secs(2));
                let recent: Vec<&Sample> = taken.iter().filter(|s| s.at >= since).collect();
                let only = recent.len() >= 10
                    && recent.iter().all(|s| match &s.outcome {
                        Outcome::Served(address) => expected.contains(address),
                        _ => false,
                    });
                Ok(only.then_some(()))
            })
            .await;
            (result, taken.into_inner().unwrap())
        }
    };
    let (served, taken) =
        served_only_by(&mut samples, tier_1.clone(), "clients are served by tier 1").await;
    samples = taken;
    served?;
    let steady = recovery(&samples, Duration::ZERO);
    assert_eq!(steady.failed, 0, "before any fault: {steady:?}");

    // From here on BIND is asked every 200 ms: the host must always answer with an address.
    let emptied = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let watch_for_empty = tokio::spawn({
        let server = bind.config.server;
        let emptied = emptied.clone();
        async move {
            loop {
                let outcome = meridian_e2e::example::dig_outcome_async(server, HOST, None).await;
                if !outcome.unanswered() && outcome.answers.is_empty() {
                    emptied.lock().unwrap().push(outcome);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });

    // Tier 1's gateway fails for everyone: the clients end up at tier 2.
    let failed_at = clients.now();
    backends.lock().unwrap().dead.insert(gateways[0]);
    let (served, taken) = served_only_by(
        &mut samples,
        tier_2.clone(),
        "clients are served by tier 2 once tier 1 fails",
    )
    .await;
    samples = taken;
    served?;
    dig_answers(bind.config.server, &["127.0.10.2", "127.0.10.3"]).await?;
    let failover = recovery(&samples, failed_at);
    eprintln!("failover to tier 2: {failover:?}");
    assert!(
        failover.served_by.keys().any(|a| tier_2.contains(a)),
        "{failover:?}"
    );

    // Tier 1 recovers: after the hold-down it takes its traffic back, and no request fails on
    // the way (tier 2 serves until tier 1 is in the record, and still answers after).
    let recovered_at = clients.now();
    backends.lock().unwrap().dead.clear();
    let spoke_2_records = Api::<DNSRecord>::namespaced(fleet.spoke("spoke-2").client(), NAMESPACE);
    eventually(
        "tier 2 says tier 1 is held down",
        DEFAULT_PATIENCE,
        || async {
            let message = ready_message(&spoke_2_records, "prod-web-api").await?;
            Ok(message
                .contains("takes traffic back after 20 s of hold-down")
                .then_some(()))
        },
    )
    .await?;
    let (served, taken) = served_only_by(
        &mut samples,
        tier_1.clone(),
        "clients are served by tier 1 again after the hold-down",
    )
    .await;
    samples = taken;
    served?;
    let failback = recovery(&samples, recovered_at);
    eprintln!("failback to tier 1: {failback:?}");
    assert_eq!(failback.failed, 0, "failback lost requests: {failback:?}");
    dig_answers(bind.config.server, &["127.0.10.1"]).await?;

    watch_for_empty.abort();
    let emptied = emptied.lock().unwrap();
    assert!(
        emptied.is_empty(),
        "the host answered with no address: {:?}",
        emptied.first()
    );
    drop(clients);
    for agent in agents {
        agent.abort();
    }
    Ok(())
}
