//! The hub end to end on real API servers: a hub and three spokes with OCM's placement
//! controller and work agents. The hub places a Gateway on every decided spoke through
//! ManifestWorks and installs the agent there with hub credentials scoped to its cluster
//! namespace; each agent runs as its own process with exactly the credentials the hub delivered
//! and reports its Gateway; the hub publishes the DNSPolicy's records through the embedded
//! nameserver; answers are checked with `dig`.
//!
//! The test plays one part itself: the gateway implementation on each spoke (there is no
//! Istio here), which gives each downstream Gateway an address in its status.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use meridian_api::conditions::{self, condition_status};
use meridian_api::kuadrant::{DNSHealthCheckProbe, DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::meridian::ClusterReport;
use meridian_api::names::DNSSEC_KEYS_SECRET;
use meridian_api::upstream::{Gateway, ManagedCluster, ManagedClusterAddOn, ManifestWork};
use meridian_e2e::example::{
    FRANCE, GEO_LABEL, HOST, IRELAND, NAMESPACE, SPOKES, UNITED_STATES, apply_ocm,
    client_from_file, delivered_hub_kubeconfig, dig, dig_short, install, one_serial_everywhere,
    placement, serve_gateway, with_example_spokes, write_geoip,
};
use meridian_e2e::{
    DEFAULT_PATIENCE, Error, Fleet, ManagedProcess, Passes, condition_becomes, eventually, observe,
};
use meridian_hub::run_command::{RunArgs, RunningHub};
use meridian_testkit::backends::{Backends, start_backends};
use meridian_testkit::fixtures;
use serde_json::json;

fn spoke_ip(spoke: &str) -> &'static str {
    SPOKES.iter().find(|s| s.0 == spoke).map_or("", |s| s.3)
}

/// Environment of the agent helper process.
const AGENT_ENV: [&str; 3] = [
    "MERIDIAN_E2E_AGENT_CLUSTER",
    "MERIDIAN_E2E_AGENT_SPOKE_KUBECONFIG",
    "MERIDIAN_E2E_AGENT_HUB_KUBECONFIG",
];

/// Optional environment of the agent helper: the address its probes connect from.
/// Where `RunArgs::local` keeps what the hub makes, the agents' copies among it.
const HUB_NAMESPACE: &str = "kube-system";
const PROBE_SOURCE_ENV: &str = "MERIDIAN_E2E_AGENT_PROBE_SOURCE";
/// Optional environment of the agent helper: where it answers DNS, and its GEO database.
const SERVE_DNS_ENV: [&str; 2] = ["MERIDIAN_E2E_AGENT_DNS", "MERIDIAN_E2E_AGENT_GEOIP"];

/// The spoke agent as its own process: this test binary, re-run as the helper below, with the
/// hub kubeconfig the hub delivered to the spoke (read back from the spoke, where the work
/// agent put it) and nothing else of the hub's.
async fn start_agent(fleet: &Fleet, spoke: &str, dir: &Path) -> Result<ManagedProcess, Error> {
    start_agent_with(fleet, spoke, dir, Vec::new()).await
}

/// The agent as its own process, answering DNS for the hub's embedded zones at `dns` too.
async fn start_agent_serving_dns(
    fleet: &Fleet,
    spoke: &str,
    dir: &Path,
    dns: SocketAddr,
    geoip: &Path,
) -> Result<ManagedProcess, Error> {
    let env = vec![
        format!("{}={dns}", SERVE_DNS_ENV[0]),
        format!("{}={}", SERVE_DNS_ENV[1], geoip.display()),
    ];
    start_agent_with(fleet, spoke, dir, env).await
}

/// The agent as its own process, probing from `source`.
async fn start_agent_probing_from(
    fleet: &Fleet,
    spoke: &str,
    dir: &Path,
    source: &str,
) -> Result<ManagedProcess, Error> {
    start_agent_with(
        fleet,
        spoke,
        dir,
        vec![format!("{PROBE_SOURCE_ENV}={source}")],
    )
    .await
}

/// Each spoke's Gateway served at its address of `gateway_ips`, and its agent probing from its
/// address of `sources`.
async fn serve_and_probe(
    fleet: &Fleet,
    gateway_ips: &[std::net::IpAddr; 3],
    sources: &[&str; 3],
    dir: &Path,
) -> Result<Vec<ManagedProcess>, Error> {
    let mut agents = Vec::new();
    for (index, spoke) in ["spoke-1", "spoke-2", "spoke-3"].into_iter().enumerate() {
        serve_gateway(
            &fleet.spoke(spoke).client(),
            &gateway_ips[index].to_string(),
        )
        .await?;
        agents.push(start_agent_probing_from(fleet, spoke, dir, sources[index]).await?);
    }
    Ok(agents)
}

/// The agent as its own process, with `env` (`NAME=VALUE`) besides the clients'.
async fn start_agent_with(
    fleet: &Fleet,
    spoke: &str,
    dir: &Path,
    env: Vec<String>,
) -> Result<ManagedProcess, Error> {
    let kubeconfig = delivered_hub_kubeconfig(&fleet.spoke(spoke).client()).await?;
    let hub_kubeconfig = dir.join(format!("{spoke}-hub.kubeconfig"));
    std::fs::write(&hub_kubeconfig, kubeconfig).unwrap();
    let mut args = env;
    args.extend([
        format!("{}={spoke}", AGENT_ENV[0]),
        format!(
            "{}={}",
            AGENT_ENV[1],
            fleet.spoke(spoke).kubeconfig_path().display()
        ),
        format!("{}={}", AGENT_ENV[2], hub_kubeconfig.display()),
        std::env::current_exe().unwrap().display().to_string(),
        "--ignored".into(),
        "--exact".into(),
        "agent_process".into(),
        "--nocapture".into(),
    ]);
    ManagedProcess::spawn(
        format!("agent-{spoke}"),
        Path::new("env"),
        &args,
        &dir.join(format!("agent-{spoke}.log")),
    )
}

/// The agent helper: runs the agent (reports and probes) with the clients named in its environment.
#[tokio::test]
#[ignore = "run by the hub test as the agent's own process"]
async fn agent_process() {
    let env = |name: &str| std::env::var(name).expect("started by the hub test");
    let _ = rustls::crypto::ring::default_provider().install_default();
    let spoke = client_from_file(Path::new(&env(AGENT_ENV[1])))
        .await
        .unwrap();
    let hub = client_from_file(Path::new(&env(AGENT_ENV[2])))
        .await
        .unwrap();
    let probe_source = std::env::var(PROBE_SOURCE_ENV)
        .ok()
        .map(|ip| ip.parse().expect("an IP address"));
    let serve_dns =
        std::env::var(SERVE_DNS_ENV[0])
            .ok()
            .map(|listen| meridian_agent::dns::ServeDns {
                listen: listen.parse().expect("an address"),
                geoip: std::env::var(SERVE_DNS_ENV[1]).ok().map(Into::into),
                name_servers: Vec::new(),
                // The test queries from loopback as fast as it likes.
                rate_limit: None,
            });
    let options = meridian_agent::HubModeOptions {
        probe_source,
        serve_dns,
        // The test's gateways listen on loopback addresses.
        probe_policy: meridian_controllers::decide::probe_policy::ProbeAddressPolicy::test_bed(),
        ..meridian_agent::HubModeOptions::with_heartbeat(std::time::Duration::from_secs(2))
    };
    meridian_agent::run_hub_mode(spoke, hub, env(AGENT_ENV[0]), options)
        .await
        .unwrap();
}

async fn start_hub(hub_kubeconfig: &Path, geoip: &Path) -> RunningHub {
    // Short, so the test sees a leaving cluster's Gateway go.
    start_hub_with_grace(hub_kubeconfig, geoip, 3).await
}

async fn start_hub_with_grace(hub_kubeconfig: &Path, geoip: &Path, grace: u64) -> RunningHub {
    let mut args = RunArgs::local(hub_kubeconfig);
    args.geoip = Some(geoip.to_path_buf());
    // The test's gateways listen on loopback addresses.
    args.probes.probe_allow_loopback = true;
    args.withdrawal_grace_seconds = grace;
    // The default, not shorter: a standby stands by through a stall of the loaded machine.
    // With a 3 s Lease, in a CI run the leader's renewals went unanswered for over 10 s just
    // as the standby started; the standby took the Lease, and the test saw it reconcile.
    args.lease_seconds = 15;
    // Agents report every 2 s here.
    args.cluster_heartbeat_timeout_seconds = 8;
    // Agents may answer DNS (the test starts them itself, so the address is only for the
    // manifests; what matters here is their read access).
    args.agent_dns_listen = Some("0.0.0.0:5353".parse().expect("an address"));
    RunningHub::start(&args).await.expect("the hub starts")
}

async fn policy_enforced(hub: &Client, name: &str) -> Result<Option<DNSPolicy>, Error> {
    let policy = Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE)
        .get(name)
        .await?;
    let enforced = policy.status.as_ref().is_some_and(|s| {
        s.observed_generation == policy.metadata.generation
            && condition_status(&s.conditions, conditions::ENFORCED) == Some(true)
    });
    Ok(enforced.then_some(policy))
}

/// Waits until `dig` from `subnet` answers exactly `expected` (sorted), every time of `tries`.
async fn answers_become(
    nameserver: SocketAddr,
    subnet: Option<&'static str>,
    expected: &[&str],
) -> Result<(), Error> {
    let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    let what = format!("dig from {subnet:?} answers {expected:?}");
    eventually(&what, DEFAULT_PATIENCE, || {
        let expected = expected.clone();
        async move {
            let seen = tokio::task::spawn_blocking(move || dig(nameserver, subnet))
                .await
                .unwrap();
            if seen != expected {
                eprintln!("dig from {subnet:?}: {seen:?}, waiting for {expected:?}");
            }
            Ok((seen == expected).then_some(()))
        }
    })
    .await
}

/// A plain HTTP/1.1 GET; the whole response.
fn http_get(address: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

/// Asks `servers` for HOST's A record in a loop until `stop`, with no cache; with several
/// servers, as a recursive resolver asks a zone's NS set (hickory sends to two at once and
/// prefers the one that answers). Every outcome: the addresses, or the error.
async fn query_loop(
    servers: Vec<SocketAddr>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Vec<Result<Vec<String>, String>> {
    use hickory_resolver::Resolver;
    use hickory_resolver::config::{
        LookupIpStrategy, NameServerConfig, ResolverConfig, ResolverOpts,
    };
    use hickory_resolver::net::runtime::TokioRuntimeProvider;

    let name_servers = servers
        .iter()
        .map(|server| {
            let mut config = NameServerConfig::udp(server.ip());
            config.connections[0].port = server.port();
            config
        })
        .collect();
    let mut options = ResolverOpts::default();
    options.cache_size = 0;
    options.timeout = std::time::Duration::from_millis(500);
    options.attempts = 2;
    options.ip_strategy = LookupIpStrategy::Ipv4Only;
    let mut builder = Resolver::builder_with_config(
        ResolverConfig::from_name_servers(name_servers),
        TokioRuntimeProvider::default(),
    );
    *builder.options_mut() = options;
    let resolver = builder.build().expect("a resolver");
    let mut answers = Vec::new();
    while !*stop.borrow_and_update() {
        let answer = resolver
            .lookup_ip(format!("{HOST}."))
            .await
            .map(|lookup| lookup.iter().map(|a| a.to_string()).collect())
            .map_err(|error| error.to_string());
        answers.push(answer);
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    answers
}

/// Waits until ten `dig`s in a row from `subnet` each answer one address out of `allowed`.
async fn answers_within(
    nameserver: SocketAddr,
    subnet: Option<&'static str>,
    allowed: &'static [&'static str],
) -> Result<(), Error> {
    let what = format!("dig from {subnet:?} answers within {allowed:?}");
    eventually(&what, DEFAULT_PATIENCE, || async move {
        for _ in 0..10 {
            let seen = tokio::task::spawn_blocking(move || dig(nameserver, subnet))
                .await
                .unwrap();
            if seen.len() != 1 || !allowed.contains(&seen[0].as_str()) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await
}

/// The example scene the policy tests start from: a hub and three spokes with OCM, the
/// `prod-web` Gateway placed on each and given its spoke's address (10.0.0.1, .2, .3) by the
/// test, an agent per spoke started with the credentials the hub delivered (spoke-1's also
/// answering DNS), and the DNSPolicy Enforced.
struct Scene {
    fleet: Fleet,
    hub: Client,
    geoip_dir: tempfile::TempDir,
    geoip: std::path::PathBuf,
    running: RunningHub,
    nameserver: SocketAddr,
    agent_dns: SocketAddr,
    agents: Vec<ManagedProcess>,
    gateways: Api<Gateway>,
    zones: Api<ManagedZone>,
    policies: Api<DNSPolicy>,
    records: Api<DNSRecord>,
    enforced: DNSPolicy,
}

async fn start_scene() -> Result<Scene, Error> {
    meridian_e2e::test_logs("warn,meridian_hub=info");
    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    let hub = fleet.hub.client();
    let geoip_dir = tempfile::tempdir().unwrap();
    let geoip = geoip_dir.path().join("country.mmdb");
    write_geoip(&geoip)?;
    install(&hub).await?;
    let gateways: Api<Gateway> = Api::namespaced(hub.clone(), NAMESPACE);
    let zones: Api<ManagedZone> = Api::namespaced(hub.clone(), NAMESPACE);
    let policies: Api<DNSPolicy> = Api::namespaced(hub.clone(), NAMESPACE);
    // The Gateway as an earlier release left it: its condition in Kuadrant's domain, written by
    // the hub's field manager. The hub started below moves it to Meridian's domain.
    let before = gateways
        .patch_status(
            "prod-web",
            &meridian_controllers::apply_params(),
            &kube::api::Patch::Apply(serde_json::json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "status": { "conditions": [{
                    "type": conditions::KUADRANT_DNS_POLICY_AFFECTED, "status": "True",
                    "reason": "Accepted", "message": "DNSPolicy prod-web applies",
                    "lastTransitionTime": "2026-01-01T00:00:00Z",
                }] },
            })),
        )
        .await?;
    assert_eq!(
        before.status.as_ref().and_then(|s| condition_status(
            &s.conditions,
            conditions::KUADRANT_DNS_POLICY_AFFECTED
        )),
        Some(true),
        "the earlier release's condition is on the Gateway before the hub starts"
    );
    // A gateway controller's status for the listener `api` (not for `elsewhere`): the hub adds
    // its condition to that entry and makes none for `elsewhere`, whose entry would need the
    // fields only such a controller knows.
    gateways
        .patch_status(
            "prod-web",
            &PatchParams::apply("a-gateway-controller").force(),
            &Patch::Apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "status": { "listeners": [{
                    "name": "api", "attachedRoutes": 2,
                    "supportedKinds": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute" }],
                    "conditions": [{
                        "type": "Programmed", "status": "True", "reason": "Programmed",
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
                    }],
                }] },
            })),
        )
        .await?;

    let running = start_hub(fleet.hub.kubeconfig_path(), &geoip).await;
    let nameserver = running.nameserver;

    // The spokes' side: the hub's ManifestWorks create each downstream Gateway, which the
    // gateway implementation (the test) gives an address; each agent, started with the
    // credentials the hub delivered, reports it.
    // spoke-1's agent answers DNS for the zone too, from what the hub's records say.
    let agent_dns = SocketAddr::from((
        [127, 0, 0, 1],
        meridian_testkit::bind_server::free_dns_port().expect("a free port"),
    ));
    let mut agents = Vec::new();
    for spoke in ["spoke-1", "spoke-2", "spoke-3"] {
        serve_gateway(&fleet.spoke(spoke).client(), spoke_ip(spoke)).await?;
        let agent = if spoke == "spoke-1" {
            start_agent_serving_dns(&fleet, spoke, geoip_dir.path(), agent_dns, &geoip).await?
        } else {
            start_agent(&fleet, spoke, geoip_dir.path()).await?
        };
        agents.push(agent);
    }
    let enforced = eventually("the policy is Enforced", DEFAULT_PATIENCE, || {
        policy_enforced(&hub, "prod-web")
    })
    .await?;
    // Every spoke's agent has reported its Gateway: all three addresses are in the record.
    let records: Api<DNSRecord> = Api::namespaced(hub.clone(), NAMESPACE);
    eventually(
        "every spoke's address is published",
        DEFAULT_PATIENCE,
        || {
            let records = records.clone();
            async move {
                let record = records.get_opt("prod-web-api").await?;
                let targets: std::collections::BTreeSet<String> = record
                    .iter()
                    .flat_map(|r| r.spec.endpoints.iter())
                    .flat_map(|e| e.targets.iter().cloned())
                    .collect();
                let all = SPOKES.iter().all(|spoke| targets.contains(spoke.3));
                Ok(all.then_some(()))
            }
        },
    )
    .await?;
    Ok(Scene {
        records,
        fleet,
        hub,
        geoip_dir,
        geoip,
        running,
        nameserver,
        agent_dns,
        agents,
        gateways,
        zones,
        policies,
        enforced,
    })
}

/// GEO answers by client subnet, as `meridian-hub explain` tells them, and the statuses that say
/// the policy took effect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_policy_on_a_placed_gateway_answers_by_geo_and_explains_its_answers()
-> Result<(), Error> {
    // Bound whole first: the fields a test does not name live until its end.
    let scene = start_scene().await?;
    let Scene {
        fleet,
        hub,
        geoip,
        nameserver,
        gateways,
        zones,
        policies,
        records,
        enforced,
        ..
    } = scene;
    let enforced_message = enforced
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::ENFORCED)
        .unwrap()
        .message
        .clone();
    assert!(
        enforced_message.contains("no ManagedZone holds www.example.org"),
        "{enforced_message}"
    );

    // GEO by client subnet: Ireland → spoke-1; the US → spoke-2; France (no FR, continent EU)
    // → spoke-3; a client with no subnet gets the catch-all, IE.
    answers_become(nameserver, Some(IRELAND), &["10.0.0.1"]).await?;
    answers_become(nameserver, Some(UNITED_STATES), &["10.0.0.2"]).await?;
    answers_become(nameserver, Some(FRANCE), &["10.0.0.3"]).await?;
    answers_become(nameserver, None, &["10.0.0.1"]).await?;
    // `meridian-hub explain` tells each client the answer dig gets, and which branch gave it.
    for (subnet, branch) in [
        (IRELAND, "geo-country"),
        (UNITED_STATES, "geo-country"),
        (FRANCE, "geo-continent"),
    ] {
        let report = observe::explain_live(&hub, HOST, Some(subnet), &geoip).await?;
        let dug = tokio::task::spawn_blocking(move || dig(nameserver, Some(subnet)))
            .await
            .unwrap();
        assert_eq!(observe::explained_addresses(&report), dug, "{subnet}");
        let text = meridian_hub::explain_command::render(
            &report,
            meridian_hub::explain_command::ExplainFormat::Text,
        )
        .unwrap();
        assert!(text.contains(&format!("klb.{HOST}: {branch}")), "{text}");
    }

    let gateway = gateways.get("prod-web").await?;
    let affected = gateway
        .status
        .as_ref()
        .map(|s| condition_status(&s.conditions, conditions::DNS_POLICY_AFFECTED));
    assert_eq!(
        affected,
        Some(Some(true)),
        "the Gateway says a DNSPolicy affects it"
    );
    let kuadrant_domain = gateway
        .status
        .as_ref()
        .and_then(|s| condition_status(&s.conditions, conditions::KUADRANT_DNS_POLICY_AFFECTED));
    assert_eq!(
        kuadrant_domain, None,
        "the earlier release's Kuadrant-domain condition moved to Meridian's"
    );
    // The listener the gateway controller lists names the policy that covers it, beside the
    // controller's own fields; the one it does not list got no entry.
    let listeners = gateway
        .status
        .as_ref()
        .map(|s| s.listeners.clone())
        .unwrap_or_default();
    let api = listeners
        .iter()
        .find(|l| l.name == "api")
        .expect("the controller's entry for api stays");
    let affected = api
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::DNS_POLICY_AFFECTED)
        .expect("the listener says a DNSPolicy affects it");
    assert_eq!(affected.message, "DNSPolicy prod-web applies");
    assert_eq!(
        condition_status(&api.conditions, "Programmed"),
        Some(true),
        "the controller's condition stays"
    );
    assert_eq!(api.attached_routes, 2);
    assert!(api.extra.contains_key("supportedKinds"), "{api:?}");
    assert!(
        !listeners.iter().any(|l| l.name == "elsewhere"),
        "{listeners:?}"
    );
    // Gateway API v1.5 policy status: Programmed, and the Gateway as the policy's ancestor.
    let status = enforced.status.as_ref().unwrap();
    assert_eq!(
        condition_status(&status.conditions, conditions::PROGRAMMED),
        Some(true)
    );
    let [ancestor] = status.ancestors.as_slice() else {
        panic!("one ancestor: {:?}", status.ancestors)
    };
    assert_eq!(ancestor.controller_name, conditions::CONTROLLER_NAME);
    assert_eq!(
        (
            ancestor.ancestor_ref.kind.as_str(),
            ancestor.ancestor_ref.name.as_str()
        ),
        ("Gateway", "prod-web")
    );
    for type_ in [conditions::ACCEPTED, conditions::PROGRAMMED] {
        assert_eq!(
            condition_status(&ancestor.conditions, type_),
            Some(true),
            "{type_}"
        );
    }
    let zone = zones.get("example").await?;
    assert_eq!(
        zone.status.as_ref().and_then(|s| s.provider.as_deref()),
        Some("embedded")
    );
    let addons: Api<ManagedClusterAddOn> = Api::namespaced(hub.clone(), "spoke-1");
    assert!(
        addons.get_opt("meridian").await?.is_some(),
        "Meridian is registered as an OCM addon"
    );
    listener_sets_add_listeners_the_gateway_admits(&fleet, &hub, nameserver, &gateways, &zones)
        .await?;
    eventually(
        "the policy says why another namespace's ListenerSet adds nothing",
        DEFAULT_PATIENCE,
        || async {
            let policy = policies.get("prod-web").await?;
            let says = policy
                .status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .any(|c| c.message.contains("naming the Gateway add nothing (the Gateway admits ListenerSets of its own namespace only): mallory/steal"));
            Ok(says.then_some(()))
        },
    )
    .await?;
    assert!(
        records
            .get_opt("prod-web-mallory.steal.admin")
            .await?
            .is_none(),
        "another namespace's ListenerSet publishes nothing"
    );
    a_policy_for_a_listener_set_listener_takes_it_and_hands_it_back(
        hub.clone(),
        nameserver,
        &policies,
        &records,
    )
    .await?;
    Ok(())
}

/// A policy targeting a ListenerSet's listener (`kind: ListenerSet`, `sectionName`) takes that
/// listener from the Gateway-wide GEO policy in place, and hands it back the same way when it
/// goes; another namespace's policy for its ListenerSet on this Gateway is refused.
async fn a_policy_for_a_listener_set_listener_takes_it_and_hands_it_back(
    hub: Client,
    nameserver: SocketAddr,
    policies: &Api<DNSPolicy>,
    records: &Api<DNSRecord>,
) -> Result<(), Error> {
    const SHOP: &str = "shop.example.com";
    const RECORD: &str = "prod-web-extra.shop";
    let dig_until = |subnet: &'static str, expected: Vec<&'static str>| async move {
        let what = format!("{SHOP} from {subnet} answers {expected:?}");
        eventually(&what, DEFAULT_PATIENCE, || {
            let expected = expected.clone();
            async move {
                let seen =
                    meridian_e2e::example::dig_host_async(nameserver, SHOP, Some(subnet)).await;
                Ok((seen == expected).then_some(()))
            }
        })
        .await
    };
    let before = records.get(RECORD).await?;
    let set_policy = |namespace: &str, set: &str, section: &str| {
        json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
            "metadata": { "name": "shop-simple", "namespace": namespace },
            "spec": {
                "targetRef": {
                    "group": "gateway.networking.k8s.io", "kind": "ListenerSet",
                    "name": set, "sectionName": section,
                },
                "routingStrategy": "simple",
            },
        })
    };
    meridian_e2e::example::apply(policies, set_policy(NAMESPACE, "extra", "shop")).await?;
    // Mallory's policy for her ListenerSet, which names this namespace's Gateway.
    let mallory = Api::<DNSPolicy>::namespaced(hub, "mallory");
    meridian_e2e::example::apply(&mallory, set_policy("mallory", "steal", "admin")).await?;
    dig_until(UNITED_STATES, vec!["10.0.0.1", "10.0.0.2", "10.0.0.3"]).await?;
    let taken = records.get(RECORD).await?;
    assert_eq!(
        taken.uid(),
        before.uid(),
        "taken over in place, never deleted"
    );
    assert_eq!(
        taken
            .labels()
            .get(meridian_controllers::POLICY_LABEL)
            .map(String::as_str),
        Some("shop-simple")
    );
    let status = eventually("shop-simple is Programmed", DEFAULT_PATIENCE, || async {
        let status = policies
            .get("shop-simple")
            .await?
            .status
            .unwrap_or_default();
        Ok(
            (condition_status(&status.conditions, conditions::PROGRAMMED) == Some(true))
                .then_some(status),
        )
    })
    .await?;
    let ancestor = &status.ancestors[0].ancestor_ref;
    assert_eq!(
        (
            ancestor.kind.as_str(),
            ancestor.name.as_str(),
            ancestor.section_name.as_deref()
        ),
        ("ListenerSet", "extra", Some("shop"))
    );
    let refused = eventually("mallory's policy is refused", DEFAULT_PATIENCE, || async {
        let policy = mallory.get("shop-simple").await?;
        Ok(policy
            .status
            .unwrap_or_default()
            .conditions
            .into_iter()
            .find(|c| c.type_ == conditions::ACCEPTED && c.reason == conditions::reasons::INVALID))
    })
    .await?;
    assert!(
        refused.message.contains("of another namespace"),
        "{}",
        refused.message
    );
    assert!(
        meridian_e2e::example::dig_host_async(nameserver, "admin.example.com", Some(UNITED_STATES))
            .await
            .is_empty()
    );
    mallory
        .delete("shop-simple", &DeleteParams::default())
        .await?;

    // The ListenerSet's policy goes: the GEO policy takes the record back in place.
    policies
        .delete("shop-simple", &DeleteParams::default())
        .await?;
    dig_until(UNITED_STATES, vec!["10.0.0.2"]).await?;
    let back = records.get(RECORD).await?;
    assert_eq!(
        back.uid(),
        before.uid(),
        "handed back in place, never deleted"
    );
    assert_eq!(
        back.labels()
            .get(meridian_controllers::POLICY_LABEL)
            .map(String::as_str),
        Some("prod-web")
    );
    Ok(())
}

/// The admin lets every plan of the scene's zone through: a change to most of this small zone
/// would otherwise be held for approval (tested on its own).
async fn let_every_plan_through(zones: &Api<ManagedZone>) -> Result<(), Error> {
    zones
        .patch(
            "example",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": {
                meridian_controllers::decide::plan_guard::THRESHOLD_ANNOTATION: "100",
            } } })),
        )
        .await?;
    Ok(())
}

/// ListenerSets (Gateway API v1.5): the hub Gateway admits those of its own namespace. One of
/// them adds a listener, which the Gateway-wide policy publishes like the Gateway's own and
/// the hub copies beside the downstream Gateway on every spoke. One in another namespace
/// naming the Gateway (a tenant reaching for a hostname of the Gateway's zone) adds nothing.
async fn listener_sets_add_listeners_the_gateway_admits(
    fleet: &Fleet,
    hub: &Client,
    nameserver: SocketAddr,
    gateways: &Api<Gateway>,
    zones: &Api<ManagedZone>,
) -> Result<(), Error> {
    use meridian_api::upstream::ListenerSet;
    use meridian_e2e::example::GATEWAY;
    const SHOP: &str = "shop.example.com";
    const STOLEN: &str = "admin.example.com";
    // A new GEO tree is most of this small zone.
    let_every_plan_through(zones).await?;
    gateways
        .patch(
            GATEWAY,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "allowedListeners": {
                "namespaces": { "from": "Same" },
            } } })),
        )
        .await?;
    let listener_set = |namespace: &str, name: &str, listener: &str, host: &str| {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
            "metadata": { "name": name, "namespace": namespace },
            "spec": {
                "parentRef": { "name": GATEWAY, "namespace": NAMESPACE },
                "listeners": [{ "name": listener, "hostname": host, "port": 80, "protocol": "HTTP" }],
            },
        })
    };
    meridian_e2e::ensure_namespace(hub, "mallory").await?;
    meridian_e2e::example::apply(
        &Api::<ListenerSet>::namespaced(hub.clone(), "mallory"),
        listener_set("mallory", "steal", "admin", STOLEN),
    )
    .await?;
    meridian_e2e::example::apply(
        &Api::<ListenerSet>::namespaced(hub.clone(), NAMESPACE),
        listener_set(NAMESPACE, "extra", "shop", SHOP),
    )
    .await?;
    eventually(
        "the ListenerSet's host answers by GEO",
        DEFAULT_PATIENCE,
        || async move {
            let seen =
                meridian_e2e::example::dig_host_async(nameserver, SHOP, Some(UNITED_STATES)).await;
            Ok((seen == ["10.0.0.2"]).then_some(()))
        },
    )
    .await?;
    assert!(
        meridian_e2e::example::dig_host_async(nameserver, STOLEN, Some(UNITED_STATES))
            .await
            .is_empty(),
        "nothing answers for the hostname another namespace's ListenerSet names"
    );
    // The copy beside the downstream Gateway, which admits its own namespace's alone.
    let downstream = format!("kuadrant-{NAMESPACE}");
    let spoke = fleet.spoke("spoke-1").client();
    let copies = Api::<ListenerSet>::namespaced(spoke.clone(), &downstream);
    let copy = eventually(
        "the ListenerSet is copied to the spoke",
        DEFAULT_PATIENCE,
        || {
            let copies = copies.clone();
            async move {
                let listed = copies.list(&Default::default()).await?.items;
                Ok(listed
                    .into_iter()
                    .find(|c| c.name_any().starts_with("extra-")))
            }
        },
    )
    .await?;
    assert_eq!(copy.spec.parent_ref.name, GATEWAY);
    assert_eq!(copy.spec.listeners.len(), 1);
    assert_eq!(copy.spec.listeners[0].hostname.as_deref(), Some(SHOP));
    // The spoke's gateway implementation counts the routes on the copy's listener: the agent
    // reports them under the name the hub publishes the listener by.
    copies
        .patch_status(
            &copy.name_any(),
            &PatchParams::apply("gateway-implementation").force(),
            &Patch::Apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
                "status": { "listeners": [
                    { "name": "shop", "attachedRoutes": 3, "supportedKinds": [], "conditions": [] },
                ] },
            })),
        )
        .await?;
    let reports = Api::<ClusterReport>::namespaced(hub.clone(), "spoke-1");
    eventually(
        "spoke-1 reports the ListenerSet listener's routes",
        DEFAULT_PATIENCE,
        || {
            let reports = reports.clone();
            let downstream = downstream.clone();
            async move {
                let report = reports.get(meridian_api::names::CLUSTER_REPORT).await?;
                let routes = report
                    .spec
                    .gateways
                    .iter()
                    .filter(|g| g.name == GATEWAY && g.namespace == downstream)
                    .flat_map(|g| g.listeners.iter())
                    .find(|l| l.name == "extra.shop")
                    .and_then(|l| l.attached_routes);
                Ok((routes == Some(3)).then_some(()))
            }
        },
    )
    .await?;
    let copied_gateway = Api::<Gateway>::namespaced(spoke.clone(), &downstream)
        .get(GATEWAY)
        .await?;
    assert_eq!(
        copied_gateway.spec.extra.get("allowedListeners"),
        Some(&json!({ "namespaces": { "from": "Same" } }))
    );
    let copied: Vec<String> = copies
        .list(&Default::default())
        .await?
        .items
        .iter()
        .flat_map(|c| c.spec.listeners.iter())
        .filter_map(|l| l.hostname.clone())
        .collect();
    assert_eq!(
        copied,
        [SHOP],
        "another namespace's ListenerSet is not copied"
    );
    Ok(())
}

/// What a spoke agent may do with the hub credentials the hub delivered to it.
/// Listener-level policies (GEP-713). On the Gateway the Gateway-wide GEO policy covers, a
/// policy for one listener takes that listener's record over in place (the record's UID never
/// changes, so its DNS never lapses) and publishes its own tree, while the GEO policy keeps the
/// other listener; a younger policy for the same listener is Conflicted; deleting the listener
/// policy hands the record back the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_policy_takes_its_listener_from_the_gateway_wide_one_and_hands_it_back()
-> Result<(), Error> {
    let scene = start_scene().await?;
    let Scene {
        fleet,
        nameserver,
        gateways,
        zones,
        policies,
        records,
        ..
    } = scene;
    const SHOP: &str = "shop.example.com";
    // Moving a host between a GEO tree and a simple record changes most of this small zone.
    let_every_plan_through(&zones).await?;
    let dig_until = |host: &'static str,
                     subnet: Option<&'static str>,
                     expected: Vec<&'static str>| async move {
        let what = format!("{host} from {subnet:?} answers {expected:?}");
        eventually(&what, DEFAULT_PATIENCE, || {
            let expected = expected.clone();
            async move {
                let seen = meridian_e2e::example::dig_host_async(nameserver, host, subnet).await;
                if seen != expected {
                    eprintln!("{host} from {subnet:?}: {seen:?}, waiting for {expected:?}");
                }
                Ok((seen == expected).then_some(()))
            }
        })
        .await
    };
    // A second listener in the zone: the Gateway-wide GEO policy publishes it too.
    meridian_e2e::example::apply(
        &gateways,
        fixtures::gateway(NAMESPACE, "prod-web")
            .placement("everywhere")
            .listener("api", HOST, 80, "HTTP")
            .listener("elsewhere", "www.example.org", 80, "HTTP")
            .listener("shop", SHOP, 80, "HTTP")
            .json(),
    )
    .await?;
    // Each spoke's gateway implementation attaches a route to the new listener (a listener
    // with none is not published).
    for spoke in ["spoke-1", "spoke-2", "spoke-3"] {
        let downstream: Api<Gateway> = Api::namespaced(
            fleet.spoke(spoke).client(),
            &format!("kuadrant-{NAMESPACE}"),
        );
        eventually(
            "the shop listener reaches the spoke",
            DEFAULT_PATIENCE,
            || {
                let downstream = downstream.clone();
                async move {
                    let gateway = downstream.get("prod-web").await?;
                    Ok(gateway
                        .spec
                        .listeners
                        .iter()
                        .any(|l| l.name == "shop")
                        .then_some(()))
                }
            },
        )
        .await?;
        downstream
            .patch_status(
                "prod-web",
                &PatchParams::apply("gateway-implementation").force(),
                &Patch::Apply(fixtures::gateway_status(
                    &[spoke_ip(spoke)],
                    &[("api", 1), ("shop", 1)],
                )),
            )
            .await?;
    }
    dig_until(SHOP, Some(UNITED_STATES), vec!["10.0.0.2"]).await?;
    dig_until(HOST, Some(IRELAND), vec!["10.0.0.1"]).await?;
    let api_record = records.get("prod-web-api").await?;
    let policy_of = |record: &DNSRecord| {
        record
            .labels()
            .get(meridian_controllers::POLICY_LABEL)
            .cloned()
    };
    assert_eq!(policy_of(&api_record).as_deref(), Some("prod-web"));

    // A simple policy for the api listener alone: every client gets every cluster.
    let api_policy = fixtures::dns_policy(NAMESPACE, "api-simple", "prod-web").with(
        json!({ "spec": { "targetRef": { "sectionName": "api" }, "routingStrategy": "simple" } }),
    );
    meridian_e2e::example::apply(&policies, api_policy.json()).await?;
    dig_until(
        HOST,
        Some(IRELAND),
        vec!["10.0.0.1", "10.0.0.2", "10.0.0.3"],
    )
    .await?;
    let taken = records.get("prod-web-api").await?;
    assert_eq!(policy_of(&taken).as_deref(), Some("api-simple"));
    assert_eq!(
        taken.uid(),
        api_record.uid(),
        "taken over in place, never deleted"
    );
    assert_eq!(
        taken
            .owner_references()
            .iter()
            .map(|o| o.name.as_str())
            .collect::<Vec<_>>(),
        ["api-simple"]
    );
    // The GEO policy keeps the shop listener.
    dig_until(SHOP, Some(UNITED_STATES), vec!["10.0.0.2"]).await?;
    let programmed = |name: &'static str| {
        let policies = policies.clone();
        move || {
            let policies = policies.clone();
            async move {
                let policy = policies.get(name).await?;
                let status = policy.status.clone().unwrap_or_default();
                Ok(
                    (condition_status(&status.conditions, conditions::PROGRAMMED) == Some(true))
                        .then_some(status),
                )
            }
        }
    };
    let status = eventually(
        "api-simple is Programmed",
        DEFAULT_PATIENCE,
        programmed("api-simple"),
    )
    .await?;
    assert_eq!(
        status.ancestors[0].ancestor_ref.section_name.as_deref(),
        Some("api"),
        "its ancestor is the listener"
    );
    eventually(
        "prod-web is Programmed",
        DEFAULT_PATIENCE,
        programmed("prod-web"),
    )
    .await?;

    // A younger policy for the same listener is refused; the older keeps it.
    let rival = fixtures::dns_policy(NAMESPACE, "api-too", "prod-web")
        .with(json!({ "spec": { "targetRef": { "sectionName": "api" } } }));
    meridian_e2e::example::apply(&policies, rival.json()).await?;
    let refused = eventually("api-too is Conflicted", DEFAULT_PATIENCE, || {
        let policies = policies.clone();
        async move {
            let policy = policies.get("api-too").await?;
            let status = policy.status.unwrap_or_default();
            let conflicted = status.conditions.iter().any(|c| {
                c.type_ == conditions::ACCEPTED && c.reason == conditions::reasons::CONFLICTED
            });
            Ok(conflicted.then_some(status))
        }
    })
    .await?;
    let overridden = refused
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::PROGRAMMED)
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(overridden, Some(("False".into(), "Overridden".into())));
    policies.delete("api-too", &DeleteParams::default()).await?;

    // The listener policy goes: the GEO policy takes the record back in place.
    policies
        .delete("api-simple", &DeleteParams::default())
        .await?;
    dig_until(HOST, Some(IRELAND), vec!["10.0.0.1"]).await?;
    let back = records.get("prod-web-api").await?;
    assert_eq!(policy_of(&back).as_deref(), Some("prod-web"));
    assert_eq!(
        back.uid(),
        api_record.uid(),
        "handed back in place, never deleted"
    );
    eventually("api-simple is gone", DEFAULT_PATIENCE, || {
        let policies = policies.clone();
        async move {
            Ok(policies
                .get_opt("api-simple")
                .await?
                .is_none()
                .then_some(()))
        }
    })
    .await?;
    assert_eq!(
        records.get("prod-web-api").await?.uid(),
        api_record.uid(),
        "the record outlived the policy that held it"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_hub_credentials_write_its_own_report_and_nothing_else() -> Result<(), Error> {
    // Bound whole first: the fields a test does not name live until its end.
    let scene = start_scene().await?;
    let Scene { geoip_dir, .. } = scene;
    // The agent's hub credentials write its own report and nothing else. As agents serve DNS
    // here, they read the records and zones, and may change neither, nor read a Secret.
    let spoke_1_hub = client_from_file(&geoip_dir.path().join("spoke-1-hub.kubeconfig")).await?;
    let hub_records = Api::<DNSRecord>::namespaced(spoke_1_hub.clone(), NAMESPACE);
    assert!(
        !hub_records
            .list(&Default::default())
            .await?
            .items
            .is_empty()
    );
    let refused = [
        hub_records
            .delete("prod-web-api", &DeleteParams::default())
            .await
            .expect_err("an agent cannot change the hub's records"),
        Api::<ManagedZone>::namespaced(spoke_1_hub.clone(), NAMESPACE)
            .patch(
                "example",
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": { "description": "mine" } })),
            )
            .await
            .expect_err("an agent cannot change the hub's zones"),
        Api::<Secret>::namespaced(spoke_1_hub.clone(), NAMESPACE)
            .list(&Default::default())
            .await
            .expect_err("an agent cannot read the hub's Secrets"),
    ];
    for error in refused {
        assert!(
            matches!(error, kube::Error::Api(ref e) if e.code == 403),
            "{error}"
        );
    }
    let foreign_report = json!({
        "apiVersion": "meridian.dev/v1alpha1", "kind": "ClusterReport",
        "metadata": { "name": "forged", "namespace": "spoke-2" },
        "spec": { "clusterID": "forged" },
    });
    let forged = Api::<ClusterReport>::namespaced(spoke_1_hub.clone(), "spoke-2")
        .patch(
            "forged",
            &PatchParams::apply("forger"),
            &Patch::Apply(&foreign_report),
        )
        .await
        .expect_err("an agent cannot write another cluster's report");
    assert!(
        matches!(forged, kube::Error::Api(ref e) if e.code == 403),
        "{forged}"
    );
    // In its own namespace it has one report and at most 1,024 result shards: the schema
    // refuses any other name (a compromised agent cannot fill etcd and the hub's cache), and
    // it may change no report but its own.
    let own_reports = Api::<ClusterReport>::namespaced(spoke_1_hub.clone(), "spoke-1");
    let second = own_reports
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "apiVersion": "meridian.dev/v1alpha1", "kind": "ClusterReport",
                "metadata": { "name": "second", "namespace": "spoke-1" },
                "spec": { "clusterID": "second" },
            }))
            .expect("a report"),
        )
        .await
        .expect_err("one report per cluster");
    assert!(
        matches!(second, kube::Error::Api(ref e) if e.code == 422 && e.message.contains("named agent")),
        "{second}"
    );
    let own_results =
        Api::<meridian_api::meridian::ProbeResults>::namespaced(spoke_1_hub.clone(), "spoke-1");
    for (name, shard) in [
        ("agent-probes-2000", 7),
        ("extra", 0),
        ("agent-probes-1024", 1024),
    ] {
        let refused = own_results
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({
                    "apiVersion": "meridian.dev/v1alpha1", "kind": "ProbeResults",
                    "metadata": { "name": name, "namespace": "spoke-1" },
                    "spec": { "shard": shard, "shards": 1024 },
                }))
                .expect("a shard"),
            )
            .await
            .expect_err("result shards are named after their index, below 1,024");
        assert!(
            matches!(refused, kube::Error::Api(ref e) if e.code == 422),
            "{name}: {refused}"
        );
    }
    Ok(())
}

/// Placement and cluster labels move answers; an invalid change is refused and the seeds'
/// other shapes take over the live name; deleting the policy leaves nothing behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dns_policy_follows_placement_labels_and_its_own_changes_to_its_deletion()
-> Result<(), Error> {
    // Bound whole first: the fields a test does not name live until its end.
    let scene = start_scene().await?;
    let Scene {
        fleet,
        hub,
        running,
        nameserver,
        agents,
        gateways,
        zones,
        policies,
        records,
        ..
    } = scene;
    // The Gateway follows a Placement OCM has not decided yet (no PlacementDecision at all):
    // that is no evidence that no cluster is placed, and DNS stays as it is.
    let follow = |placement: String| {
        let gateways = gateways.clone();
        async move {
            gateways
                .patch(
                    "prod-web",
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "metadata": { "labels": {
                        meridian_api::labels::PLACEMENT_LABEL: placement,
                    } } })),
                )
                .await
        }
    };
    let placed =
        gateways.get("prod-web").await?.labels()[meridian_api::labels::PLACEMENT_LABEL].clone();
    let before = meridian_e2e::example::dig_host_async(nameserver, HOST, Some(UNITED_STATES)).await;
    assert!(!before.is_empty());
    follow("not-decided-yet".into()).await?;
    eventually(
        "the policy waits for OCM's decision",
        DEFAULT_PATIENCE,
        || async {
            let status = policies.get("prod-web").await?.status.unwrap_or_default();
            Ok(status
                .conditions
                .iter()
                .any(|c| {
                    c.type_ == conditions::PROGRAMMED
                        && c.message
                            .contains("Placement not-decided-yet has no PlacementDecision")
                })
                .then_some(()))
        },
    )
    .await?;
    assert_eq!(
        meridian_e2e::example::dig_host_async(nameserver, HOST, Some(UNITED_STATES)).await,
        before,
        "an undecided Placement withdraws nothing"
    );
    assert!(records.get_opt("prod-web-api").await?.is_some());
    follow(placed).await?;
    // spoke-2 leaves the placement: it leaves DNS at once (US clients get the catch-all, IE),
    // its Gateway's ManifestWork stays for the grace period, then goes.
    apply_ocm(&hub, placement(&["US"])).await?;
    answers_become(nameserver, Some(UNITED_STATES), &["10.0.0.1"]).await?;
    let spoke_2_works: Api<ManifestWork> = Api::namespaced(hub.clone(), "spoke-2");
    let work_name = meridian_hub::gateway_bundle::BUNDLE_WORK.to_string();
    let label = meridian_hub::placement::gateway_label(NAMESPACE, "prod-web");
    // The Gateway stays in spoke-2's bundle, marked as leaving (the placement controller and
    // the DNSPolicy controller follow the same decision independently, so the mark may come
    // just after DNS moved; it goes only a grace period after the mark). It was the bundle's
    // only Gateway, so the bundle goes with it.
    eventually(
        "spoke-2's Gateway is marked as leaving in its bundle",
        DEFAULT_PATIENCE,
        || {
            let works = spoke_2_works.clone();
            let (name, label) = (work_name.clone(), label.clone());
            async move {
                let work = works
                    .get_opt(&name)
                    .await?
                    .expect("the bundle stays until a grace period after the mark");
                let entries =
                    meridian_api::labels::bundle_entries(work.metadata.annotations.as_ref());
                let entry = entries
                    .get(&label)
                    .expect("the Gateway stays in the bundle");
                Ok(entry.leaving_since.is_some().then_some(()))
            }
        },
    )
    .await?;
    eventually(
        "spoke-2's bundle is removed after the grace period",
        DEFAULT_PATIENCE,
        || {
            let works = spoke_2_works.clone();
            let name = work_name.clone();
            async move { Ok(works.get_opt(&name).await?.is_none().then_some(())) }
        },
    )
    .await?;
    eventually(
        "the work agent removes spoke-2's Gateway",
        DEFAULT_PATIENCE,
        || {
            let gateways: Api<Gateway> = Api::namespaced(
                fleet.spoke("spoke-2").client(),
                &format!("kuadrant-{NAMESPACE}"),
            );
            async move { Ok(gateways.get_opt("prod-web").await?.is_none().then_some(())) }
        },
    )
    .await?;

    // Relabel spoke-3 from GEO-EU to IE: the French client now falls to the catch-all (IE),
    // where spoke-1 and spoke-3 share the answers by weight (120 : 30).
    let managed_clusters: Api<ManagedCluster> = Api::all(hub.clone());
    managed_clusters
        .patch(
            "spoke-3",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { GEO_LABEL: "IE" } } })),
        )
        .await?;
    eventually("spoke-3 joins the IE group", DEFAULT_PATIENCE, || {
        let records = records.clone();
        async move {
            let record = records.get("prod-web-api").await?;
            let ie_weights: BTreeMap<String, String> = record
                .spec
                .endpoints
                .iter()
                .filter(|e| e.dns_name == format!("ie.klb.{HOST}"))
                .map(|e| {
                    let weight = e
                        .provider_specific
                        .iter()
                        .find(|p| p.name == "weight")
                        .map(|p| p.value.clone())
                        .unwrap_or_default();
                    (e.targets[0].clone(), weight)
                })
                .collect();
            let geo_eu_gone = !record
                .spec
                .endpoints
                .iter()
                .any(|e| e.dns_name.starts_with("geo-eu."));
            let weights: Vec<&str> = ie_weights.values().map(String::as_str).collect();
            Ok((ie_weights.len() == 2
                && geo_eu_gone
                && weights.contains(&"30")
                && weights.contains(&"120"))
            .then_some(()))
        }
    })
    .await?;
    let mut seen = BTreeMap::new();
    for _ in 0..60 {
        for ip in tokio::task::spawn_blocking(move || dig(nameserver, Some(FRANCE)))
            .await
            .unwrap()
        {
            *seen.entry(ip).or_insert(0) += 1;
        }
    }
    assert_eq!(
        seen.keys().cloned().collect::<Vec<_>>(),
        ["10.0.0.1", "10.0.0.3"],
        "{seen:?}"
    );
    assert!(
        seen["10.0.0.1"] > seen["10.0.0.3"],
        "weights 120 : 30 show in proportions: {seen:?}"
    );
    let metrics = http_get(running.health, "/metrics");
    assert!(
        metrics.contains("meridian_dns_choices_total{policy=\"weighted\",by=\"drawn\"}"),
        "{metrics}"
    );

    // An invalid policy keeps what is published and says why.
    policies
        .patch("prod-web", &PatchParams::default(), &Patch::Merge(json!({ "spec": { "loadBalancing": { "weighted": { "custom": [{ "value": "Azure", "selector": { "matchLabels": { "a": "b" } }, "weight": 5 }] } } } })))
        .await
        .expect_err("the schema refuses a custom weight with both forms");

    // The seeds' other shapes on the live name: `simple` answers every cluster's address; a
    // load-balanced policy without GEO has one weighted group for everyone.
    policies
        .patch(
            "prod-web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "routingStrategy": "simple" } })),
        )
        .await?;
    answers_become(nameserver, Some(UNITED_STATES), &["10.0.0.1", "10.0.0.3"]).await?;
    policies
        .patch(
            "prod-web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "routingStrategy": "loadbalanced", "loadBalancing": { "geo": null } } })),
        )
        .await?;
    eventually(
        "the record has one weighted group and no GEO",
        DEFAULT_PATIENCE,
        || {
            let records = records.clone();
            async move {
                let record = records.get("prod-web-api").await?;
                let codes: Vec<String> = record
                    .spec
                    .endpoints
                    .iter()
                    .flat_map(|e| e.provider_specific.iter())
                    .filter(|p| p.name == "geo-code")
                    .map(|p| p.value.clone())
                    .collect();
                Ok((codes == ["*"]).then_some(()))
            }
        },
    )
    .await?;

    // Deleting the policy removes every record it created, and nothing else. The policy holds
    // no finalizer (a write saved per policy): its records follow its deletion themselves.
    assert!(
        policies
            .get("prod-web")
            .await?
            .metadata
            .finalizers
            .unwrap_or_default()
            .is_empty(),
        "the policy carries no finalizer"
    );
    policies
        .delete("prod-web", &DeleteParams::default())
        .await?;
    eventually(
        "the policy and its records are gone",
        DEFAULT_PATIENCE,
        || {
            let (policies, records) = (policies.clone(), records.clone());
            async move {
                let policy_gone = policies.get_opt("prod-web").await?.is_none();
                let records_gone = records.list(&Default::default()).await?.items.is_empty();
                Ok((policy_gone && records_gone).then_some(()))
            }
        },
    )
    .await?;
    answers_become(nameserver, Some(IRELAND), &[]).await?;
    assert_eq!(
        running
            .context
            .providers
            .embedded_zones()
            .expect("the hub serves embedded zones")
            .record_count("example.com"),
        0,
        "no orphans: every record and ownership record is gone"
    );
    assert!(zones.get_opt("example").await?.is_some(), "the zone stays");
    let gateway = gateways.get("prod-web").await?;
    let affected = gateway
        .status
        .as_ref()
        .and_then(|s| condition_status(&s.conditions, conditions::DNS_POLICY_AFFECTED));
    assert_eq!(affected, None, "the Gateway's condition is withdrawn");
    // A graceful stop hands the Lease over instead of letting it expire.
    running.stop().await;
    let lease =
        Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(hub.clone(), "kube-system")
            .get(meridian_hub::leader::LEASE_NAME)
            .await?;
    assert_eq!(
        lease.spec.and_then(|s| s.holder_identity),
        None,
        "the stopped leader released the Lease"
    );
    drop(agents);
    Ok(())
}

/// A standby replica and spoke-1's agent serve the zone the leader publishes, with its name
/// servers and its signatures; the leader dies and no query fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_and_an_agent_serve_one_signed_zone_through_the_leaders_death() -> Result<(), Error>
{
    // Bound whole first: the fields a test does not name live until its end.
    let scene = start_scene().await?;
    let Scene {
        fleet,
        hub,
        geoip_dir,
        geoip,
        running,
        agent_dns,
        zones,
        records,
        ..
    } = scene;
    let spoke_1_hub = client_from_file(&geoip_dir.path().join("spoke-1-hub.kubeconfig")).await?;
    answers_become(running.nameserver, Some(UNITED_STATES), &["10.0.0.2"]).await?;
    // A restart converges with no duplicates and no orphans: the new hub's embedded zone is
    // rebuilt from the DNSRecords, record for record.
    let published = records.get("prod-web-api").await?.status.unwrap().endpoints;
    let count_before = running
        .context
        .providers
        .embedded_zones()
        .expect("the hub serves embedded zones")
        .record_count("example.com");
    // A second replica stands by and writes nothing while the first holds the Lease, yet it
    // answers DNS too: its zones are mirrored from the DNSRecords, record for record.
    let standby = start_hub(fleet.hub.kubeconfig_path(), &geoip).await;
    eventually("the standby mirrors the zone", DEFAULT_PATIENCE, || {
        let ready = standby.is_ready();
        let count = standby
            .context
            .providers
            .embedded_zones()
            .expect("the hub serves embedded zones")
            .record_count("example.com");
        async move { Ok((ready && count == count_before).then_some(())) }
    })
    .await?;
    assert!(running.is_leading() && !standby.is_leading(), "one writer");
    assert!(http_get(running.health, "/readyz").starts_with("HTTP/1.1 200"));
    assert!(http_get(standby.health, "/readyz").starts_with("HTTP/1.1 200"));
    assert!(http_get(running.health, "/leaderz").starts_with("HTTP/1.1 200"));
    assert!(http_get(standby.health, "/leaderz").starts_with("HTTP/1.1 503"));
    answers_within(standby.nameserver, Some(UNITED_STATES), &["10.0.0.2"]).await?;
    assert!(http_get(standby.health, "/livez").starts_with("HTTP/1.1 200"));
    let metrics = http_get(running.health, "/metrics");
    assert!(
        metrics.contains("meridian_dns_queries_total{qtype=\"A\",rcode=\"NOERROR\"}")
            && metrics.contains("meridian_dns_choices_total{policy=\"geo\",by=\"country\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("meridian_reconciles_total{controller=\"dnspolicy\"}")
            && metrics
                .contains("meridian_provider_calls_total{provider=\"embedded\",outcome=\"ok\"}"),
        "{metrics}"
    );
    assert!(
        !standby
            .context
            .metrics
            .render()
            .contains("meridian_reconciles_total{"),
        "the standby reconciled nothing"
    );
    // The zone names its name servers: both replicas serve them (NS, the SOA primary, the
    // in-zone one's glue), and the zone's status says what the parent zone needs. Until then
    // the placeholder ns1.example.com has no address and the status says so.
    let zone = zones.get("example").await?;
    assert_eq!(
        condition_status(&zone.status.unwrap().conditions, conditions::DELEGATABLE),
        Some(false),
        "the placeholder cannot be delegated to"
    );
    zones
        .patch(
            "example",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "nameServers": [
                { "name": "ns1.example.com", "addresses": ["192.0.2.53", "2001:db8::53"] },
                { "name": "ns.dns.example.net" },
            ] } })),
        )
        .await?;
    let zone = eventually("the zone says how to delegate", DEFAULT_PATIENCE, || {
        let zones = zones.clone();
        async move {
            let zone = zones.get("example").await?;
            let delegatable = zone.status.as_ref().is_some_and(|s| {
                condition_status(&s.conditions, conditions::DELEGATABLE) == Some(true)
            });
            Ok(delegatable.then_some(zone))
        }
    })
    .await?;
    assert_eq!(
        zone.status.unwrap().delegation,
        [
            "example.com. 3600 IN NS ns1.example.com.",
            "example.com. 3600 IN NS ns.dns.example.net.",
            "ns1.example.com. 3600 IN A 192.0.2.53",
            "ns1.example.com. 3600 IN AAAA 2001:db8::53",
        ]
    );
    // The agent on spoke-1 serves the same zone: same answers, same name servers.
    answers_within(agent_dns, Some(UNITED_STATES), &["10.0.0.2"]).await?;
    for server in [running.nameserver, standby.nameserver, agent_dns] {
        eventually(
            "every server names both name servers",
            DEFAULT_PATIENCE,
            || async move {
                let ns =
                    tokio::task::spawn_blocking(move || dig_short(server, "example.com", "NS"))
                        .await
                        .unwrap();
                Ok((ns == ["ns.dns.example.net.", "ns1.example.com."]).then_some(()))
            },
        )
        .await?;
        let glue = tokio::task::spawn_blocking(move || dig_short(server, "ns1.example.com", "A"))
            .await
            .unwrap();
        assert_eq!(glue, ["192.0.2.53"]);
        let soa = tokio::task::spawn_blocking(move || dig_short(server, "example.com", "SOA"))
            .await
            .unwrap();
        assert!(soa[0].starts_with("ns1.example.com. "), "{soa:?}");
    }
    let servers = [running.nameserver, standby.nameserver, agent_dns];
    let serial = one_serial_everywhere(&zones, "example", servers).await?;
    eprintln!("the leader, the standby and the agent serve serial {serial}");

    // Signed: the agent signs with the zone's own ZSK, which the hub copies into its own
    // namespace, the one Secret there the agent may watch, with the hub's signature over the
    // DNSKEY set in place of the KSK: what the agent's credentials read holds no KSK.
    let ds = meridian_e2e::example::sign_zone(&hub, NAMESPACE, "example", None).await?;
    let own_copy = Api::<Secret>::namespaced(spoke_1_hub.clone(), HUB_NAMESPACE);
    let copied = eventually(
        "spoke-1's agent reads its copy of the keys",
        DEFAULT_PATIENCE,
        || {
            let own_copy = own_copy.clone();
            async move {
                // The copy may land before the grant to read it reaches the API server's
                // authorizer: a refusal is "not yet", like a missing copy.
                let copy = match own_copy.get_opt(DNSSEC_KEYS_SECRET).await {
                    Err(kube::Error::Api(e)) if e.code == 403 => None,
                    other => other?,
                };
                Ok(copy
                    .and_then(|copy| copy.data)
                    .and_then(|mut data| data.remove(&format!("{NAMESPACE}.example"))))
            }
        },
    )
    .await?;
    let copied: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&copied.0).expect("the copy's entries are JSON");
    assert!(
        !copied.contains_key("ksk") && copied.contains_key("dnskeySignature"),
        "{:?}",
        copied.keys()
    );
    let keys = Api::<Secret>::namespaced(hub.clone(), HUB_NAMESPACE)
        .get(&meridian_controllers::zones::dnssec_keys::keys_secret_name(
            NAMESPACE, "example",
        ))
        .await?;
    let ksk = serde_json::to_value(&keys.data.unwrap()["ksk"]).expect("bytes serialize");
    assert!(
        !copied.values().any(|value| value == &ksk),
        "the KSK is in the agents' copy"
    );
    // Nor the zone's key Secret itself, nor anything the hub left in a cluster namespace.
    for (namespace, name) in [
        (
            HUB_NAMESPACE,
            meridian_controllers::zones::dnssec_keys::keys_secret_name(NAMESPACE, "example"),
        ),
        ("spoke-1", DNSSEC_KEYS_SECRET.to_string()),
        ("spoke-2", DNSSEC_KEYS_SECRET.to_string()),
    ] {
        let denied = Api::<Secret>::namespaced(spoke_1_hub.clone(), namespace)
            .get(&name)
            .await
            .expect_err("an agent reads the copy only");
        assert!(
            matches!(denied, kube::Error::Api(ref e) if e.code == 403),
            "{namespace}/{name}: {denied}"
        );
    }
    let at_agent =
        meridian_testkit::unbound::ValidatingResolver::start("example.com", &[agent_dns], &ds)
            .await
            .map_err(Error::Component)?;
    let resolver = at_agent.address;
    eventually(
        "the agent's signed GEO answers validate",
        DEFAULT_PATIENCE,
        || async move {
            let (validated, addresses) = tokio::task::spawn_blocking(move || {
                meridian_e2e::example::dig_validated(resolver, HOST, "A", Some(UNITED_STATES))
            })
            .await
            .unwrap();
            let expected = !addresses.is_empty()
                && addresses.iter().all(|a| ["10.0.0.2"].contains(&a.as_str()));
            Ok((validated && expected).then_some(()))
        },
    )
    .await?;
    let serial = one_serial_everywhere(&zones, "example", servers).await?;
    eprintln!("signed, every server serves serial {serial}");

    // The leader dies mid-flight (no graceful stop, no Lease release) while clients query in a
    // loop: one knows both replicas (as a resolver knows a zone's NS set), one only the standby. The standby takes over once the Lease expires; until then, and
    // while it takes over, no query fails and none gets a wrong answer.
    // The loops ask with no client subnet: the catch-all, IE.
    const ALLOWED: &[&str] = &["10.0.0.1"];
    let (stop_queries, queries_stopped) = tokio::sync::watch::channel(false);
    let both = tokio::spawn(query_loop(
        vec![running.nameserver, standby.nameserver],
        queries_stopped.clone(),
    ));
    let survivor = tokio::spawn(query_loop(vec![standby.nameserver], queries_stopped));
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    running.abort();
    let killed = std::time::Instant::now();
    eventually("the standby leads", DEFAULT_PATIENCE, || {
        let leading = standby.is_leading();
        async move { Ok(leading.then_some(())) }
    })
    .await?;
    eprintln!(
        "the standby leads {:.1} s after the leader died (Lease: 15 s)",
        killed.elapsed().as_secs_f64()
    );
    // The new leader replans every record; queries go on through that, until its passes have
    // all ended (it counts from none: as a standby it reconciled nothing).
    let record_count = records.list(&Default::default()).await?.items.len() as u64;
    Passes { begun: 0, ended: 0 }
        .wait_for_more(&standby, "dnsrecord", record_count)
        .await?;
    stop_queries.send(true).unwrap();
    for (client, loop_task) in [("both replicas", both), ("the standby", survivor)] {
        let answers = loop_task.await.unwrap();
        let wrong: Vec<&Result<Vec<String>, String>> = answers
            .iter()
            .filter(|answer| {
                !answer
                    .as_ref()
                    .is_ok_and(|ips| ips.len() == 1 && ALLOWED.contains(&ips[0].as_str()))
            })
            .collect();
        eprintln!(
            "through the leader kill, a client of {client}: {} queries, {} failed or wrong",
            answers.len(),
            wrong.len()
        );
        assert!(answers.len() >= 20, "{client}: the loop ran: {answers:?}");
        assert!(wrong.is_empty(), "{client}: {wrong:?}");
    }
    let running = standby;
    let nameserver = running.nameserver;
    answers_within(nameserver, Some(UNITED_STATES), &["10.0.0.2"]).await?;
    eventually(
        "the restarted hub serves the same zone",
        DEFAULT_PATIENCE,
        || {
            let zones = running
                .context
                .providers
                .embedded_zones()
                .expect("the hub serves embedded zones");
            let count = zones.record_count("example.com");
            async move { Ok((count == count_before).then_some(())) }
        },
    )
    .await?;
    assert_eq!(
        records.get("prod-web-api").await?.status.unwrap().endpoints,
        published
    );
    Ok(())
}

/// A cluster whose agent goes silent leaves DNS; when every agent goes silent at once the fleet
/// brake holds what is published, says so, and lets go when they are heard again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_agents_leave_dns_and_a_silent_fleet_holds_it() -> Result<(), Error> {
    // Bound whole first: the fields a test does not name live until its end.
    let scene = start_scene().await?;
    let Scene {
        fleet,
        hub,
        geoip_dir,
        running,
        nameserver,
        mut agents,
        zones,
        policies,
        ..
    } = scene;
    // spoke-3's agent dies: once its heartbeat is older than the timeout, the cluster is gone
    // for DNS, and the policy says why.
    drop(agents.remove(2));
    condition_becomes(
        &policies,
        "prod-web",
        conditions::ENFORCED,
        "the policy says spoke-3 went silent",
        |c| c.message.contains("spoke-3: no heartbeat from its agent"),
    )
    .await?;
    answers_within(nameserver, Some(FRANCE), &["10.0.0.1"]).await?;

    // Then every other agent stops at once: that is the hub cut off, not the fleet dead. The
    // fleet brake holds what is published, and says so, until the agents are heard again.
    // (spoke-3 went silent more than a heartbeat timeout before: it is not this wave.)
    tokio::time::sleep(std::time::Duration::from_secs(4)).await;
    agents.clear();
    let fail_static = |what: &'static str, reason: &'static str| {
        condition_becomes(
            &policies,
            "prod-web",
            conditions::FAIL_STATIC,
            what,
            move |c| c.reason == reason,
        )
    };
    // The two agents stopped together, but each heartbeat lapses at its own moment: the brake
    // may first name one of them, and names both once the second has lapsed too.
    let braked = condition_becomes(
        &policies,
        "prod-web",
        conditions::FAIL_STATIC,
        "the fleet brake holds both silent clusters",
        |c| {
            c.reason == conditions::fail_static::FLEET_BRAKE
                && ["spoke-1", "spoke-2"]
                    .iter()
                    .all(|spoke| c.message.contains(&format!("{spoke}: no heartbeat")))
        },
    )
    .await?;
    eprintln!("with every agent stopped: {}", braked.message);
    assert!(!braked.message.contains("spoke-3"), "{}", braked.message);
    answers_within(nameserver, Some(UNITED_STATES), &["10.0.0.2"]).await?;
    let metrics = http_get(running.health, "/metrics");
    assert!(
        metrics.contains("meridian_fleet_brake_engaged 1"),
        "{metrics}"
    );
    assert!(
        meridian_e2e::has_event(&hub, NAMESPACE, "FleetBrakeOn").await?,
        "an Event says the brake is on"
    );
    // The zone the policy publishes into says so too.
    let zone_braked = condition_becomes(
        &zones,
        "example",
        conditions::FAIL_STATIC,
        "the zone says the brake holds spoke-1",
        |c| {
            c.reason == conditions::fail_static::FLEET_BRAKE
                && c.message.contains("spoke-1: no heartbeat")
        },
    )
    .await?;
    assert!(
        zone_braked.message.contains("DNSPolicy prod-web: "),
        "{}",
        zone_braked.message
    );
    // The agents come back: the brake lets go by itself.
    for spoke in ["spoke-1", "spoke-2"] {
        agents.push(start_agent(&fleet, spoke, geoip_dir.path()).await?);
    }
    let released = fail_static(
        "the fleet brake lets go",
        conditions::fail_static::NONE_KEPT,
    )
    .await?;
    eprintln!("with the agents back: {}", released.message);
    answers_within(nameserver, Some(UNITED_STATES), &["10.0.0.2"]).await?;
    condition_becomes(
        &zones,
        "example",
        conditions::FAIL_STATIC,
        "the zone says the brake let go",
        |c| c.reason != conditions::fail_static::FLEET_BRAKE,
    )
    .await?;
    drop(agents);
    Ok(())
}

/// A zone at a provider: the hub publishes a DNSRecord for `root_host` with `endpoints` through `secret` (in
/// namespace `dns`), which `provider` then holds in `zone_id`; the zone's status names the
/// provider `kind`; deleting the record withdraws it and its ownership records.
async fn a_record_is_published_and_withdrawn_through<P: meridian_providers::Provider>(
    (secret, providers): (
        serde_json::Value,
        meridian_controllers::zones::provider_args::ProviderArgs,
    ),
    domain: &str,
    kind: &str,
    root_host: &str,
    endpoints: &[meridian_dns::model::Endpoint],
    provider: &P,
    zone_id: &str,
) -> Result<(), Error> {
    let fleet = Fleet::builder().without_ocm().start().await?;
    let hub = fleet.hub.client();
    let namespace = "dns";
    meridian_e2e::ensure_namespace(&hub, namespace).await?;
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), namespace);
    meridian_e2e::example::apply(&secrets, secret).await?;
    let zones: Api<ManagedZone> = Api::namespaced(hub.clone(), namespace);
    meridian_e2e::example::apply(
        &zones,
        fixtures::managed_zone(namespace, "zone", domain)
            .at_provider("provider")
            .json(),
    )
    .await?;
    let records: Api<DNSRecord> = Api::namespaced(hub.clone(), namespace);
    meridian_e2e::example::apply(
        &records,
        fixtures::dns_record(namespace, "shop", "zone")
            .root_host(root_host)
            .endpoints(json!(endpoints))
            .json(),
    )
    .await?;
    let args = RunArgs {
        providers,
        ..RunArgs::local(fleet.hub.kubeconfig_path())
    };
    let running = RunningHub::start(&args).await.expect("the hub starts");
    eventually("the record is Ready", DEFAULT_PATIENCE, || {
        let records = records.clone();
        async move {
            let record = records.get("shop").await?;
            Ok(record
                .status
                .filter(|s| condition_status(&s.conditions, conditions::READY) == Some(true))
                .map(|_| ()))
        }
    })
    .await?;
    let mut held: Vec<_> = provider
        .records(zone_id)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| {
            r.record_type != meridian_dns::model::RecordType::Txt
                && meridian_dns::model::is_at_or_below(&r.dns_name, root_host)
        })
        .collect();
    meridian_dns::model::sort_endpoints(&mut held);
    let mut expected = endpoints.to_vec();
    meridian_dns::model::sort_endpoints(&mut expected);
    assert_eq!(
        held, expected,
        "the provider holds exactly the record's endpoints"
    );
    eventually(
        "the zone's status names its provider",
        DEFAULT_PATIENCE,
        || {
            let zones = zones.clone();
            async move {
                let zone = zones.get("zone").await?;
                Ok(zone
                    .status
                    .filter(|s| s.provider.as_deref() == Some(kind) && s.record_count.is_some())
                    .map(|_| ()))
            }
        },
    )
    .await?;

    records.delete("shop", &DeleteParams::default()).await?;
    eventually("the record is withdrawn", DEFAULT_PATIENCE, || {
        let records = records.clone();
        async move { Ok(records.get_opt("shop").await?.is_none().then_some(())) }
    })
    .await?;
    let left = provider.records(zone_id).await.unwrap();
    assert!(
        left.iter().all(|r| !r.dns_name.contains(root_host)),
        "the record and its ownership records are gone: {left:?}"
    );
    running.stop().await;
    Ok(())
}

/// Route53 (moto, a real Route53 API) through a `kuadrant.io/aws` Secret.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_in_a_route53_zone_is_published_and_withdrawn_through_its_secret()
-> Result<(), Error> {
    use meridian_providers::Provider;
    use meridian_testkit::moto::MotoServer;

    let moto = MotoServer::start().expect("moto starts");
    moto.create_zone("example.net")
        .await
        .expect("a hosted zone");
    let route53 = moto.provider(100);
    let zone_id = route53.list_zones().await.unwrap()[0].id.clone();
    let shop = meridian_dns::model::Endpoint::new(
        "shop.example.net",
        meridian_dns::model::RecordType::A,
        ["192.0.2.7".to_string()],
        60,
    );
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/aws",
        "metadata": { "name": "provider", "namespace": "dns" },
        "stringData": {
            "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_REGION": "us-east-1",
        },
    });
    // Where Route53 is: the admin's setting, never the Secret's.
    let providers = meridian_controllers::zones::provider_args::ProviderArgs {
        aws_endpoint: Some(moto.endpoint()),
        ..Default::default()
    };
    a_record_is_published_and_withdrawn_through(
        (secret, providers),
        "example.net",
        "route53",
        "shop.example.net",
        &[shop],
        &route53,
        &zone_id,
    )
    .await
}

/// Azure DNS and Traffic Manager (the FAKE of their APIs; Azure has no emulator) through a
/// `kuadrant.io/azure` Secret in the dns-operator's `azure.json` format: a GEO-then-weighted
/// tree becomes nested Traffic Manager profiles, and every profile is removed with the record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loadbalanced_record_in_an_azure_zone_is_published_and_withdrawn_through_its_secret()
-> Result<(), Error> {
    use meridian_providers::azure::AzureProvider;
    use meridian_testkit::azure_fake::{FakeAzure, FakeAzureOptions};

    let fake = FakeAzure::start(&FakeAzureOptions {
        zones: vec!["example.net".into()],
        ..Default::default()
    });
    let azure = AzureProvider::new(
        &fake.credentials(),
        std::sync::Arc::new(meridian_providers::budget::RequestBudget::per_second(100)),
        AzureProvider::default_retry(),
    )
    .unwrap();
    let endpoints = meridian_e2e::example::geo_tree(
        "shop.example.net",
        "gateways",
        &[
            ("cluster-0", "192.0.2.1", "IE"),
            ("cluster-1", "192.0.2.2", "US"),
            ("cluster-2", "192.0.2.3", "IE"),
        ],
    );
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/azure",
        "metadata": { "name": "provider", "namespace": "dns" },
        "stringData": { "azure.json": fake.azure_json(), "ca.crt": fake.ca_pem() },
    });
    // The fake's cloud: the admin's setting, never the Secret's.
    let providers = meridian_controllers::zones::provider_args::ProviderArgs {
        azure_resource_manager: Some(fake.url()),
        azure_authority_host: Some(fake.url()),
        ..Default::default()
    };
    a_record_is_published_and_withdrawn_through(
        (secret, providers),
        "example.net",
        "azure",
        "shop.example.net",
        &endpoints,
        &azure,
        "example.net",
    )
    .await?;
    let profiles = fake.state()["profiles"].as_array().unwrap().len();
    assert_eq!(profiles, 0, "no Traffic Manager profile is left");
    let requests = fake.requests();
    assert!(
        requests.get("put-profile").copied().unwrap_or(0) >= 3,
        "{requests:?}"
    );
    Ok(())
}

/// The header the backends require; the policy names a Secret holding it.
const PROBE_TOKEN: (&str, &str) = ("X-Probe-Token", "s3cret-token");

/// The probes of the example host, by address, once each has results from `clusters` clusters.
async fn probes_judged_by(
    hub: &Client,
    clusters: usize,
) -> Result<Option<BTreeMap<String, DNSHealthCheckProbe>>, Error> {
    let probes = Api::<DNSHealthCheckProbe>::namespaced(hub.clone(), NAMESPACE)
        .list(&Default::default())
        .await?
        .items;
    let judged = probes.len() == 3
        && probes.iter().all(|p| {
            p.status
                .as_ref()
                .is_some_and(|s| s.clusters.len() == clusters)
        });
    Ok(judged.then(|| {
        probes
            .into_iter()
            .map(|p| (p.spec.address.clone(), p))
            .collect()
    }))
}

/// `dig` answers for the example host, with no client subnet.
async fn answers_now(nameserver: SocketAddr) -> Vec<String> {
    tokio::task::spawn_blocking(move || dig(nameserver, None))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_from_every_cluster_decide_which_gateways_stay_in_dns() -> Result<(), Error> {
    meridian_e2e::test_logs("warn,meridian_hub=info");
    // The probe interval and threshold; MERIDIAN_E2E_HEALTH_INTERVAL=30s and
    // MERIDIAN_E2E_HEALTH_THRESHOLD=3 measure the defaults' time to withdraw.
    let interval = std::env::var("MERIDIAN_E2E_HEALTH_INTERVAL").unwrap_or_else(|_| "5s".into());
    let threshold: i64 = std::env::var("MERIDIAN_E2E_HEALTH_THRESHOLD")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let gateway_ips: [std::net::IpAddr; 3] = [
        "127.0.1.1".parse().unwrap(),
        "127.0.1.2".parse().unwrap(),
        "127.0.1.3".parse().unwrap(),
    ];
    let sources = ["127.0.2.1", "127.0.2.2", "127.0.2.3"];
    let backends = Backends::default();
    backends.lock().unwrap().required_header =
        Some((PROBE_TOKEN.0.to_string(), PROBE_TOKEN.1.to_string()));
    let port = start_backends(&gateway_ips, backends.clone()).await;

    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    let hub = fleet.hub.client();
    let dir = tempfile::tempdir().unwrap();
    let geoip = dir.path().join("country.mmdb");
    write_geoip(&geoip)?;
    install(&hub).await?;
    Api::<Secret>::namespaced(hub.clone(), NAMESPACE)
        .patch(
            "probe-auth",
            &PatchParams::apply("example-admin").force(),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": { "name": "probe-auth", "namespace": NAMESPACE },
                "type": "meridian.dev/probe-headers",
                "stringData": { PROBE_TOKEN.0: PROBE_TOKEN.1 },
            })),
        )
        .await?;
    // A simple policy answers every healthy gateway at once, which dig shows directly.
    meridian_e2e::example::apply(
        &Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE),
        json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
            "metadata": { "name": "prod-web", "namespace": NAMESPACE },
            "spec": {
                "targetRef": { "name": "prod-web" },
                "routingStrategy": "simple",
                "healthCheck": {
                    "endpoint": "/healthz", "port": port, "protocol": "HTTP",
                    "interval": interval, "failureThreshold": threshold,
                    "additionalHeadersRef": { "name": "probe-auth" },
                },
            },
        }),
    )
    .await?;
    let running = start_hub(fleet.hub.kubeconfig_path(), &geoip).await;
    let nameserver = running.nameserver;
    let mut agents = serve_and_probe(&fleet, &gateway_ips, &sources, dir.path()).await?;
    let all = ["127.0.1.1", "127.0.1.2", "127.0.1.3"];
    answers_become(nameserver, None, &all).await?;

    // Every cluster judged every leaf, through the headers the hub copied for it.
    let probes = eventually("every cluster judges every probe", DEFAULT_PATIENCE, || {
        probes_judged_by(&hub, 3)
    })
    .await?;
    for probe in probes.values() {
        let status = probe.status.as_ref().unwrap();
        assert_eq!(status.healthy, Some(true), "{status:?}");
        assert!(status.clusters.iter().all(|c| c.healthy), "{status:?}");
        assert_eq!(probe.spec.host, HOST);
    }
    let spoke_1_hub = client_from_file(&dir.path().join("spoke-1-hub.kubeconfig")).await?;
    let denied = Api::<Secret>::namespaced(spoke_1_hub.clone(), NAMESPACE)
        .get("probe-auth")
        .await
        .expect_err("an agent cannot read the hub's Secrets");
    assert!(
        matches!(denied, kube::Error::Api(ref e) if e.code == 403),
        "{denied}"
    );
    // One copy per tenant namespace in the hub's namespace, readable by the agent by name and
    // no other.
    let copies = Api::<Secret>::namespaced(spoke_1_hub.clone(), HUB_NAMESPACE);
    let copy = copies.get("meridian-probe-headers-gateways").await?;
    assert_eq!(
        copy.data.unwrap().keys().collect::<Vec<_>>(),
        ["probe-auth"]
    );
    for other in [
        "meridian-probe-headers-kube-system",
        "meridian-probe-headers",
    ] {
        let denied = copies
            .get(other)
            .await
            .expect_err("an agent reads only the copies its probes need");
        assert!(
            matches!(denied, kube::Error::Api(ref e) if e.code == 403),
            "{other}: {denied}"
        );
    }
    // A binding someone deleted is made again at once: the hub's cache of its bindings wakes
    // that cluster (the resync is 300 s away).
    let bindings =
        Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(hub.clone(), HUB_NAMESPACE);
    let binding = meridian_api::names::agent_copies_binding("spoke-1");
    let deleted_uid = bindings.get(&binding).await?.metadata.uid;
    bindings.delete(&binding, &DeleteParams::default()).await?;
    eventually(
        "the deleted binding is made again",
        DEFAULT_PATIENCE,
        || async {
            let again = bindings.get_opt(&binding).await?;
            Ok(again.filter(|b| b.metadata.uid != deleted_uid).map(|_| ()))
        },
    )
    .await?;
    eventually(
        "the agent reads its copy again",
        DEFAULT_PATIENCE,
        || async {
            Ok(copies
                .get_opt("meridian-probe-headers-gateways")
                .await
                .ok()
                .flatten()
                .map(|_| ()))
        },
    )
    .await?;

    // Two impostors, holding a fresh report and results that call every leaf unhealthy: a
    // namespace that is no ManagedCluster (what anyone who may write there could do), and a
    // ManagedCluster the policy's placement did not choose (a compromised agent of another
    // team's cluster). Neither votes: every probe below stays judged by exactly the three
    // placed clusters, through the changes that follow.
    let impostors = ["impostor", "unplaced"];
    Api::<meridian_api::upstream::ManagedCluster>::all(hub.clone())
        .patch(
            "unplaced",
            &PatchParams::apply("example-admin").force(),
            &Patch::Apply(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": { "name": "unplaced" },
                "spec": { "hubAcceptsClient": true },
            })),
        )
        .await?;
    for impostor in impostors {
        meridian_e2e::ensure_namespace(&hub, impostor).await?;
    }
    let report_now = |impostor: &str| {
        json!({
            "apiVersion": "meridian.dev/v1alpha1", "kind": "ClusterReport",
            "metadata": { "name": "agent", "namespace": impostor },
            "spec": { "clusterID": impostor, "reportedAt": k8s_openapi::jiff::Timestamp::now().to_string() },
        })
    };
    let lies: Vec<serde_json::Value> = probes
        .values()
        .map(|p| {
            json!({
                "namespace": NAMESPACE, "name": p.name_any(), "healthy": false,
                "consecutiveFailures": 9, "reason": "status 503",
            })
        })
        .collect();
    for impostor in impostors {
        let reports = Api::<ClusterReport>::namespaced(hub.clone(), impostor);
        meridian_e2e::example::apply(&reports, report_now(impostor)).await?;
        meridian_e2e::example::apply(
            &Api::<meridian_api::meridian::ProbeResults>::namespaced(hub.clone(), impostor),
            json!({
                "apiVersion": "meridian.dev/v1alpha1", "kind": "ProbeResults",
                "metadata": { "name": "agent-probes-0", "namespace": impostor },
                "spec": { "shard": 0, "shards": 1, "probes": lies },
            }),
        )
        .await?;
    }
    // Heard all along, as a live agent is.
    let heartbeat = tokio::spawn({
        let hub = hub.clone();
        async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                for impostor in impostors {
                    let reports = Api::<ClusterReport>::namespaced(hub.clone(), impostor);
                    let _ = meridian_e2e::example::apply(&reports, report_now(impostor)).await;
                }
            }
        }
    });

    // One vantage point of three sees 127.0.1.2 failing: its view shows in the probe's
    // status, and DNS does not move.
    backends
        .lock()
        .unwrap()
        .failing_for
        .insert(gateway_ips[1], vec![sources[0].parse().unwrap()]);
    eventually(
        "spoke-1 sees 127.0.1.2 failing",
        DEFAULT_PATIENCE,
        || async {
            let Some(probes) = probes_judged_by(&hub, 3).await? else {
                return Ok(None);
            };
            let status = probes["127.0.1.2"].status.clone().unwrap();
            let spoke_1 = status
                .clusters
                .iter()
                .find(|c| c.cluster == "spoke-1")
                .unwrap();
            Ok((!spoke_1.healthy).then_some(status))
        },
    )
    .await
    .map(|status| {
        assert_eq!(
            status.healthy,
            Some(true),
            "1 of 3 is below 66 %: {status:?}"
        );
        let voters: Vec<&str> = status.clusters.iter().map(|c| c.cluster.as_str()).collect();
        assert_eq!(
            voters,
            ["spoke-1", "spoke-2", "spoke-3"],
            "no impostor votes"
        );
    })?;
    for _ in 0..6 {
        assert_eq!(
            answers_now(nameserver).await,
            all,
            "one vantage point does not flap DNS"
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }

    heartbeat.abort();

    // Two of three: the leaf leaves DNS, and the record says which address is unhealthy.
    backends.lock().unwrap().failing_for.insert(
        gateway_ips[1],
        vec![sources[0].parse().unwrap(), sources[1].parse().unwrap()],
    );
    answers_become(nameserver, None, &["127.0.1.1", "127.0.1.3"]).await?;
    let records = Api::<DNSRecord>::namespaced(hub.clone(), NAMESPACE);
    let record = records.get("prod-web-api").await?;
    let healthy = record
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::HEALTHY)
        .unwrap()
        .clone();
    assert_eq!(healthy.status, "False");
    assert!(healthy.message.contains("127.0.1.2"), "{}", healthy.message);
    let policies = Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE);
    condition_becomes(
        &policies,
        "prod-web",
        conditions::ENFORCED,
        "the policy says what health left out",
        |c| c.message.contains("unhealthy, left out of DNS: 127.0.1.2"),
    )
    .await?;
    // What explain, the live view and the metrics say of it.
    see_a_withdrawn_leaf(&hub, &running, nameserver, &geoip).await?;
    backends.lock().unwrap().failing_for.clear();
    answers_become(nameserver, None, &all).await?;

    // A gateway whose backend dies leaves DNS, and returns when it recovers.
    let died = std::time::Instant::now();
    backends.lock().unwrap().dead.insert(gateway_ips[2]);
    answers_become(nameserver, None, &["127.0.1.1", "127.0.1.2"]).await?;
    let withdrawn_after = died.elapsed();
    let recovered = std::time::Instant::now();
    backends.lock().unwrap().dead.clear();
    answers_become(nameserver, None, &all).await?;
    eprintln!(
        "health: interval {interval}, threshold {threshold}: withdrawn {:.1} s after the backend died, back {:.1} s after it recovered",
        withdrawn_after.as_secs_f64(),
        recovered.elapsed().as_secs_f64()
    );

    // spoke-3's agent stops, its gateway still serving: silence is evidence about the agent,
    // not the gateway. With a healthCheck, 127.0.1.3 stays well past the 8 s heartbeat timeout
    // while the other clusters' probes find it healthy, and their verdict alone withdraws it.
    drop(agents.remove(2));
    // Its credentials, stolen, claim a heartbeat in the year 2100 on both channels (its report
    // and its Lease): the hub believes no time later than the API server stamped on the
    // write, so the cluster still falls silent a heartbeat timeout after it.
    let stolen = client_from_file(&dir.path().join("spoke-3-hub.kubeconfig")).await?;
    let forever = "2100-01-01T00:00:00Z";
    Api::<ClusterReport>::namespaced(stolen.clone(), "spoke-3")
        .patch(
            "agent",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "reportedAt": forever } })),
        )
        .await?;
    Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(stolen, "spoke-3")
        .patch(
            meridian_api::names::HEARTBEAT_LEASE,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "renewTime": "2100-01-01T00:00:00.000000Z" } })),
        )
        .await?;
    let kept = condition_becomes(
        &policies,
        "prod-web",
        conditions::ENFORCED,
        "the policy says spoke-3 is silent and kept",
        |c| c.message.contains("spoke-3: no heartbeat from its agent"),
    )
    .await?
    .message;
    assert!(
        kept.contains("kept in DNS while the other clusters' probes find it healthy"),
        "{kept}"
    );
    for _ in 0..12 {
        assert_eq!(
            answers_now(nameserver).await,
            all,
            "a silent cluster whose gateway serves stays"
        );
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
    backends.lock().unwrap().dead.insert(gateway_ips[2]);
    answers_become(nameserver, None, &["127.0.1.1", "127.0.1.2"]).await?;
    backends.lock().unwrap().dead.clear();
    answers_become(nameserver, None, &all).await?;
    agents.insert(
        2,
        start_agent_probing_from(&fleet, "spoke-3", dir.path(), sources[2]).await?,
    );

    // Every backend failing: nothing is removed (a total outage is more likely the probes').
    backends.lock().unwrap().dead.extend(gateway_ips);
    eventually(
        "every leaf is judged unhealthy",
        DEFAULT_PATIENCE,
        || async {
            let Some(probes) = probes_judged_by(&hub, 3).await? else {
                return Ok(None);
            };
            Ok(probes
                .values()
                .all(|p| p.status.as_ref().unwrap().healthy == Some(false))
                .then_some(()))
        },
    )
    .await?;
    answers_become(nameserver, None, &all).await?;
    let record = records.get("prod-web-api").await?;
    let healthy = record
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == conditions::HEALTHY)
        .unwrap();
    assert_eq!(healthy.reason, "NoHealthyEndpoints", "{healthy:?}");

    // Deleting the policy withdraws the records and their probes. It carries the finalizer
    // hubs gave policies before (as one enforced by such a hub would): that still works, and
    // the hub lets the policy go once its records are gone.
    let policies = Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE);
    policies
        .patch(
            "prod-web",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": {
                "finalizers": [meridian_controllers::reconcile::dns_policy::FINALIZER] } })),
        )
        .await?;
    policies
        .delete("prod-web", &DeleteParams::default())
        .await?;
    eventually(
        "the probes and the policy are gone",
        DEFAULT_PATIENCE,
        || async {
            let left = Api::<DNSHealthCheckProbe>::namespaced(hub.clone(), NAMESPACE)
                .list(&Default::default())
                .await?
                .items
                .len();
            let policy_gone = policies.get_opt("prod-web").await?.is_none();
            Ok((left == 0 && policy_gone).then_some(()))
        },
    )
    .await?;
    answers_become(nameserver, None, &[]).await?;
    running.stop().await;
    drop(agents);
    Ok(())
}

/// While two of three clusters see 127.0.1.2 failing: `explain` gives dig's answer and the
/// votes behind the verdict; the live view, loaded in headless Chromium, draws the leaf as
/// unhealthy and left out (its screenshot is kept in target/test-artifacts); `/metrics` has
/// the failover's timing and every metric the chart's dashboard and alerts name.
async fn see_a_withdrawn_leaf(
    hub: &Client,
    running: &RunningHub,
    nameserver: SocketAddr,
    geoip: &Path,
) -> Result<(), Error> {
    let report = observe::explain_live(hub, HOST, None, geoip).await?;
    let dug = tokio::task::spawn_blocking(move || dig(nameserver, None))
        .await
        .unwrap();
    assert_eq!(observe::explained_addresses(&report), dug);
    let record = &report.records[0];
    let leaf = record
        .leaves
        .iter()
        .find(|l| l.address == "127.0.1.2")
        .unwrap();
    assert_eq!(
        (leaf.verdict, leaf.published, leaf.cluster.as_deref()),
        ("unhealthy", false, Some("spoke-2")),
        "{leaf:?}"
    );
    let failing: Vec<&str> = leaf
        .votes
        .iter()
        .filter(|v| !v.healthy)
        .map(|v| v.cluster.as_str())
        .collect();
    assert_eq!(failing, ["spoke-1", "spoke-2"], "{leaf:?}");
    assert!(
        leaf.votes
            .iter()
            .all(|v| v.healthy || v.failing_since.is_some())
    );
    let text = meridian_hub::explain_command::render(
        &report,
        meridian_hub::explain_command::ExplainFormat::Text,
    )
    .unwrap();
    eprintln!("explain {HOST}:\n{text}");
    assert!(
        text.contains("127.0.1.2 (spoke-2): unhealthy, NOT published"),
        "{text}"
    );

    let view = running.view;
    let screenshot = observe::artifacts_dir().join("live-view-host.png");
    let dom = tokio::task::spawn_blocking({
        let screenshot = screenshot.clone();
        move || {
            observe::browse(
                &format!("http://{view}/hosts/{NAMESPACE}/prod-web-api"),
                &screenshot,
            )
        }
    })
    .await
    .unwrap()?;
    for expected in [
        "<h1>api.example.com</h1>",
        "data-address=\"127.0.1.2\" data-verdict=\"unhealthy\"",
        "data-address=\"127.0.1.1\" data-verdict=\"healthy\"",
        "class=\"node unhealthy\" data-published=\"false\"",
        "spoke-1: failing",
    ] {
        assert!(
            dom.contains(expected),
            "{expected} missing from the page:\n{dom}"
        );
    }
    assert!(std::fs::metadata(&screenshot).is_ok_and(|m| m.len() > 1000));
    eprintln!("live view screenshot: {}", screenshot.display());
    let index = tokio::task::spawn_blocking(move || {
        observe::browse(
            &format!("http://{view}/"),
            &observe::artifacts_dir().join("live-view-index.png"),
        )
    })
    .await
    .unwrap()?;
    assert!(
        index.contains("<h2 class=\"zone\">example.com</h2>"),
        "{index}"
    );
    assert!(
        index.contains(&format!("href=\"/hosts/{NAMESPACE}/prod-web-api\"")),
        "{index}"
    );
    assert!(
        index.contains("unhealthy, left out of DNS: 127.0.1.2"),
        "the change and why: {index}"
    );

    let metrics = observe::scrape(running.health).await?;
    let declared = observe::declared_metrics(&metrics);
    let missing: Vec<String> = observe::metrics_named_by_monitoring()
        .into_iter()
        .filter(|name| !declared.contains(name))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard or the alerts name metrics the hub does not have: {missing:?}"
    );
    for timed in [
        "meridian_failover_detection_seconds_count{zone=\"example.com\"} ",
        "meridian_failover_publication_seconds_count{zone=\"example.com\"} ",
        "meridian_failover_seconds_count{zone=\"example.com\"} ",
    ] {
        assert!(metrics.contains(timed), "{timed} missing:\n{metrics}");
    }
    assert!(metrics.contains("meridian_leaves{verdict=\"unhealthy\",published=\"false\"} 1"));
    assert!(metrics.contains("meridian_leader 1"));
    Ok(())
}

/// Priority tiers with real probes and `dig`: the primary (IE) serves; when its backend dies
/// the second tier (US) serves at once; when it recovers, traffic stays on US for the whole
/// hold-down and then goes back; draining the primary (a label on its ManagedCluster) steps
/// its weight down a TTL apart and hands the traffic to US, and back when the label goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn priority_tiers_fail_over_at_once_fail_back_after_the_hold_down_and_drain()
-> Result<(), Error> {
    const HOLD_DOWN: u64 = 20;
    let gateway_ips: [std::net::IpAddr; 3] = [
        "127.0.6.1".parse().unwrap(),
        "127.0.6.2".parse().unwrap(),
        "127.0.6.3".parse().unwrap(),
    ];
    let sources = ["127.0.7.1", "127.0.7.2", "127.0.7.3"];
    let backends = Backends::default();
    let port = start_backends(&gateway_ips, backends.clone()).await;
    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    let hub = fleet.hub.client();
    let dir = tempfile::tempdir().unwrap();
    let geoip = dir.path().join("country.mmdb");
    write_geoip(&geoip)?;
    install(&hub).await?;
    // IE first, then US, then everything else (spoke-3, GEO-EU).
    meridian_e2e::example::apply(
        &Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE),
        json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
            "metadata": { "name": "prod-web", "namespace": NAMESPACE },
            "spec": {
                "targetRef": { "name": "prod-web" },
                "ttl": "5s",
                "loadBalancing": { "failover": {
                    "priorities": [
                        { "attribute": "geo-code", "value": "IE", "priority": 1 },
                        { "attribute": "geo-code", "value": "US", "priority": 2 },
                    ],
                    "holdDown": format!("{HOLD_DOWN}s"),
                } },
                "healthCheck": {
                    "endpoint": "/healthz", "port": port, "protocol": "HTTP",
                    "interval": "5s", "failureThreshold": 1,
                },
            },
        }),
    )
    .await?;
    let running = start_hub(fleet.hub.kubeconfig_path(), &geoip).await;
    let nameserver = running.nameserver;
    let agents = serve_and_probe(&fleet, &gateway_ips, &sources, dir.path()).await?;
    let (ie, us, eu) = ("127.0.6.1", "127.0.6.2", "127.0.6.3");
    answers_become(nameserver, None, &[ie]).await?;
    // The standby tiers' clusters are probed (their leaves are in the record) but not answered.
    for _ in 0..5 {
        assert_eq!(
            answers_now(nameserver).await,
            [ie],
            "only the first tier answers"
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }

    // The primary's backend dies: the second tier, not the third.
    backends.lock().unwrap().dead.insert(gateway_ips[0]);
    answers_become(nameserver, None, &[us]).await?;
    let records = Api::<DNSRecord>::namespaced(hub.clone(), NAMESPACE);
    condition_becomes(
        &records,
        "prod-web-api",
        conditions::READY,
        "the record says which tier serves and why",
        |c| {
            c.message
                .contains("served by tier 2: tier 1 has no healthy gateway")
        },
    )
    .await?;

    // It recovers: US keeps the traffic while IE proves itself for the hold-down, then IE.
    let recovered = std::time::Instant::now();
    backends.lock().unwrap().dead.clear();
    // Until the hub has seen IE healthy again, and for the hold-down after that, US answers:
    // sampled for half the hold-down, which starts no sooner than the backend recovered.
    while recovered.elapsed() < std::time::Duration::from_secs(HOLD_DOWN / 2) {
        assert_eq!(
            answers_now(nameserver).await,
            [us],
            "no failback within the hold-down ({:.1} s after recovery)",
            recovered.elapsed().as_secs_f64()
        );
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    answers_become(nameserver, None, &[ie]).await?;
    let failback = recovered.elapsed();
    assert!(
        failback >= std::time::Duration::from_secs(HOLD_DOWN),
        "failback after {failback:?}, before the {HOLD_DOWN} s hold-down"
    );
    eprintln!(
        "tiers: failback {:.1} s after the primary recovered (hold-down {HOLD_DOWN} s)",
        failback.as_secs_f64()
    );

    // Drain the primary: its weight steps down a TTL apart (status shows the step), and at 0
    // the whole tier is drained, so US serves; IE's records stay, so the host never empties.
    let clusters = Api::<ManagedCluster>::all(hub.clone());
    let label = |value: Option<&str>| json!({ "metadata": { "labels": { meridian_api::labels::DRAIN_LABEL: value } } });
    clusters
        .patch(
            "spoke-1",
            &PatchParams::default(),
            &Patch::Merge(label(Some("true"))),
        )
        .await?;
    let policies = Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE);
    let step_of = |policy: &DNSPolicy| {
        policy
            .status
            .as_ref()
            .and_then(|s| s.draining.iter().find(|d| d.cluster == "spoke-1"))
            .map(|d| (d.weight_percent, d.phase.clone()))
    };
    let steps = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    eventually("spoke-1 drains to 0", DEFAULT_PATIENCE, || {
        let (policies, steps) = (policies.clone(), steps.clone());
        async move {
            let step = step_of(&policies.get("prod-web").await?);
            let mut steps = steps.lock().unwrap();
            if let Some(step) = &step
                && steps.last() != Some(step)
            {
                steps.push(step.clone());
            }
            Ok((step.map(|s| s.0) == Some(0)).then_some(()))
        }
    })
    .await?;
    let steps = steps.lock().unwrap().clone();
    assert_eq!(
        steps.iter().map(|s| s.0).collect::<Vec<_>>(),
        [50, 10, 0],
        "drain steps: {steps:?}"
    );
    answers_become(nameserver, None, &[us]).await?;
    let record = records.get("prod-web-api").await?;
    let published = record.status.unwrap().endpoints;
    assert!(
        published.iter().any(|e| e.targets.iter().any(|t| t == ie)),
        "the drained cluster's address stays published: {published:?}"
    );

    // The label goes: back up in steps, and IE serves again.
    clusters
        .patch(
            "spoke-1",
            &PatchParams::default(),
            &Patch::Merge(label(None)),
        )
        .await?;
    answers_become(nameserver, None, &[ie]).await?;
    eventually("spoke-1 is back at full weight", DEFAULT_PATIENCE, || {
        let policies = policies.clone();
        async move {
            Ok(step_of(&policies.get("prod-web").await?)
                .is_none()
                .then_some(()))
        }
    })
    .await?;
    let _ = eu;
    drop(agents);
    Ok(())
}

/// An upgrade from hubs that wrote a work per Gateway and cluster (under its hashed name, and
/// before that as `gateway-<namespace>-<name>`, which two namespaces could make one work): the
/// new hub puts the Gateway in the cluster's bundle, and once the spoke's work agent has applied
/// the bundle, orphans and deletes both old works. The spoke's Gateway is never deleted on the
/// way (the same UID before and after). The agent's Roles and seal key copy that hub kept in the
/// cluster namespace go. Then the Gateway is deleted three ways (with the hub up, and down with
/// and without an earlier hub's finalizer): each time it is marked leaving in the bundle, and
/// leaves the spoke after the grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_earlier_hubs_work_and_finalizer_are_handed_over_and_a_deleted_gateways_works_go()
-> Result<(), Error> {
    use meridian_api::labels::bundle_entries;
    use meridian_e2e::example::{CLUSTER_SET, CLUSTER_SET_LABEL, GATEWAY};
    use meridian_hub::gateway_bundle::BUNDLE_WORK;
    use meridian_hub::placement::LEGACY_GATEWAY_FINALIZER as LEGACY_FINALIZER;
    use meridian_hub::placement::{
        gateway_label, gateway_work, gateway_work_name, legacy_gateway_work_name,
    };

    let fleet = Fleet::builder()
        .spoke(
            "spoke-1",
            [(CLUSTER_SET_LABEL, CLUSTER_SET), (GEO_LABEL, "IE")],
        )
        .start()
        .await?;
    let hub = fleet.hub.client();
    install(&hub).await?;
    let gateway = Api::<Gateway>::namespaced(hub.clone(), NAMESPACE)
        .get(GATEWAY)
        .await?;
    // The earlier hub placed spoke-1 on OCM's decision: the new one starts from it too (before
    // OCM decides, a first decision may still be empty, and with this test's 3 s grace the
    // new hub would rightly withdraw the work it names).
    let decisions: Api<meridian_api::upstream::PlacementDecision> =
        Api::namespaced(hub.clone(), NAMESPACE);
    eventually("OCM places spoke-1", DEFAULT_PATIENCE, || async {
        let placed = decisions
            .list(&Default::default())
            .await?
            .items
            .iter()
            .any(|d| {
                d.status
                    .as_ref()
                    .is_some_and(|s| s.decisions.iter().any(|c| c.cluster_name == "spoke-1"))
            });
        Ok(placed.then_some(()))
    })
    .await?;
    // What earlier hubs wrote: a work of the Gateway's own, under the name hubs before bundles
    // gave it, and under the older name before that.
    let own_name = gateway_work_name(NAMESPACE, GATEWAY);
    let legacy_name = legacy_gateway_work_name(NAMESPACE, GATEWAY);
    let works: Api<ManifestWork> = Api::namespaced(hub.clone(), "spoke-1");
    for name in [&own_name, &legacy_name] {
        let mut own = gateway_work(&gateway, "istio", &[], &[], "spoke-1");
        own["metadata"]["name"] = json!(name);
        works
            .patch(
                name,
                &meridian_controllers::apply_params(),
                &Patch::Apply(own),
            )
            .await?;
    }
    let downstream: Api<Gateway> = Api::namespaced(
        fleet.spoke("spoke-1").client(),
        &format!("kuadrant-{NAMESPACE}"),
    );
    let before = eventually(
        "the earlier work's Gateway is on the spoke",
        DEFAULT_PATIENCE,
        || async {
            Ok(downstream
                .get_opt(GATEWAY)
                .await?
                .and_then(|g| g.metadata.uid))
        },
    )
    .await?;

    // The earlier hub also held its finalizer on the Gateway, beside someone else's.
    const OTHERS: &str = "example.com/someone-elses";
    let gateways = Api::<Gateway>::namespaced(hub.clone(), NAMESPACE);
    let set_finalizers = |finalizers: Vec<&'static str>| {
        let gateways = gateways.clone();
        async move {
            gateways
                .patch(
                    GATEWAY,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "metadata": { "finalizers": finalizers } })),
                )
                .await
        }
    };
    set_finalizers(vec![OTHERS, LEGACY_FINALIZER]).await?;

    // And the agent's identity in spoke-1's namespace: its own Roles and bindings, and a copy
    // of the seal key (the trace that says an earlier hub was here).
    use meridian_api::names::{PROBE_HEADERS_READER, PROBE_SEAL_SECRET};
    use meridian_e2e::example::apply;
    use meridian_hub::placement::LEGACY_AGENT_ROLE;
    let roles = Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(hub.clone(), "spoke-1");
    let bindings =
        Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(hub.clone(), "spoke-1");
    let copies = Api::<Secret>::namespaced(hub.clone(), "spoke-1");
    for role in [LEGACY_AGENT_ROLE, PROBE_HEADERS_READER] {
        let metadata = json!({ "name": role, "namespace": "spoke-1" });
        apply(&roles, json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": metadata,
            "rules": [{ "apiGroups": [""], "resources": ["secrets"], "resourceNames": [PROBE_SEAL_SECRET], "verbs": ["get"] }],
        }))
        .await?;
        apply(&bindings, json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": metadata,
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role },
            "subjects": [{ "kind": "ServiceAccount", "name": LEGACY_AGENT_ROLE, "namespace": "spoke-1" }],
        }))
        .await?;
    }
    apply(
        &copies,
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": PROBE_SEAL_SECRET, "namespace": "spoke-1" },
            "type": "Opaque",
            "stringData": { "key": "an earlier hub's seal key" },
        }),
    )
    .await?;

    let geoip_dir = tempfile::tempdir().unwrap();
    let geoip = geoip_dir.path().join("country.mmdb");
    write_geoip(&geoip)?;
    // A grace long enough to see a deleted Gateway's work marked and still there.
    let grace = 10;
    let running = start_hub_with_grace(fleet.hub.kubeconfig_path(), &geoip, grace).await;
    let new_name = BUNDLE_WORK.to_string();
    let label = gateway_label(NAMESPACE, GATEWAY);
    // The Gateway's entry in the bundle, if the bundle holds it.
    let entry = |work: Option<ManifestWork>| {
        work.and_then(|w| bundle_entries(w.metadata.annotations.as_ref()).remove(&label))
    };
    eventually(
        "the hub lets go of the earlier hub's finalizer, and of no other",
        DEFAULT_PATIENCE,
        || async {
            let finalizers = gateways.get(GATEWAY).await?.metadata.finalizers;
            Ok((finalizers.unwrap_or_default() == [OTHERS]).then_some(()))
        },
    )
    .await?;
    eventually(
        "the earlier works are handed over to the bundle and gone",
        DEFAULT_PATIENCE * 2,
        || async {
            let own = works.get_opt(&own_name).await?;
            let legacy = works.get_opt(&legacy_name).await?;
            let held = entry(works.get_opt(&new_name).await?).is_some();
            Ok((own.is_none() && legacy.is_none() && held).then_some(()))
        },
    )
    .await?;
    let after = downstream
        .get_opt(GATEWAY)
        .await?
        .and_then(|g| g.metadata.uid);
    assert_eq!(
        after,
        Some(before),
        "the spoke's Gateway stayed through the hand-over"
    );
    eventually(
        "the earlier hub's Roles, bindings and copy in spoke-1's namespace are gone",
        DEFAULT_PATIENCE,
        || async {
            let mut left = Vec::new();
            for role in [LEGACY_AGENT_ROLE, PROBE_HEADERS_READER] {
                if roles.get_opt(role).await?.is_some() {
                    left.push(format!("Role {role}"));
                }
                if bindings.get_opt(role).await?.is_some() {
                    left.push(format!("RoleBinding {role}"));
                }
            }
            if copies.get_opt(PROBE_SEAL_SECRET).await?.is_some() {
                left.push(format!("Secret {PROBE_SEAL_SECRET}"));
            }
            Ok(left.is_empty().then_some(()))
        },
    )
    .await?;

    let marked_then_gone = |what: &'static str| {
        let (works, downstream, new_name) = (works.clone(), downstream.clone(), new_name.clone());
        async move {
            let marked = eventually(what, DEFAULT_PATIENCE, || async {
                let work = works.get_opt(&new_name).await?;
                Ok(entry(work).and_then(|e| e.leaving_since))
            })
            .await?;
            assert!(
                downstream.get_opt(GATEWAY).await?.is_some(),
                "the spoke's Gateway stays while it is marked leaving (since {marked})"
            );
            // It was the bundle's only Gateway: the bundle goes with it.
            eventually(
                "after the grace, the bundle and the spoke's Gateway go",
                DEFAULT_PATIENCE,
                || async {
                    let gone = works.get_opt(&new_name).await?.is_none()
                        && downstream.get_opt(GATEWAY).await?.is_none();
                    Ok(gone.then_some(()))
                },
            )
            .await
        }
    };
    let recreate = || async {
        let mut recreated = gateway.clone();
        recreated.metadata = kube::api::ObjectMeta {
            name: gateway.metadata.name.clone(),
            namespace: gateway.metadata.namespace.clone(),
            labels: gateway.metadata.labels.clone(),
            ..Default::default()
        };
        gateways.create(&PostParams::default(), &recreated).await?;
        eventually(
            "the Gateway is placed again, on the spoke too",
            DEFAULT_PATIENCE,
            || async {
                let placed = entry(works.get_opt(&new_name).await?).is_some()
                    && downstream.get_opt(GATEWAY).await?.is_some();
                Ok(placed.then_some(()))
            },
        )
        .await
    };

    // Deleted while the hub runs: the Gateway waits only for the other finalizer, and keeps its
    // work meanwhile (it is still there, being deleted).
    gateways.delete(GATEWAY, &DeleteParams::default()).await?;
    let terminating = gateways.get(GATEWAY).await?;
    assert!(terminating.metadata.deletion_timestamp.is_some());
    let held = entry(works.get_opt(&new_name).await?).expect("the bundle holds it");
    assert_eq!(
        held.leaving_since, None,
        "a Gateway being deleted stays unmarked in the bundle while it is still there"
    );
    set_finalizers(vec![]).await?;
    // Gone now: it is marked leaving, stays for the grace, then goes with the spoke's Gateway.
    marked_then_gone("the deleted Gateway is marked leaving").await?;

    // Deleted while the hub is down, holding an earlier hub's finalizer: the restarted hub lets
    // the Gateway go, and it leaves the bundle after the grace.
    recreate().await?;
    running.stop().await;
    set_finalizers(vec![LEGACY_FINALIZER]).await?;
    gateways.delete(GATEWAY, &DeleteParams::default()).await?;
    let running = start_hub_with_grace(fleet.hub.kubeconfig_path(), &geoip, grace).await;
    eventually(
        "the earlier hub's finalizer: the Gateway goes, then the bundle",
        DEFAULT_PATIENCE,
        || async {
            let gone = gateways.get_opt(GATEWAY).await?.is_none()
                && works.get_opt(&new_name).await?.is_none();
            Ok(gone.then_some(()))
        },
    )
    .await?;

    // Deleted while the hub is down, with no finalizer: it stays in the bundle until the hub is
    // back, then leaves as above.
    recreate().await?;
    running.stop().await;
    gateways.delete(GATEWAY, &DeleteParams::default()).await?;
    eventually("the Gateway is gone", DEFAULT_PATIENCE, || async {
        Ok(gateways.get_opt(GATEWAY).await?.is_none().then_some(()))
    })
    .await?;
    assert!(
        entry(works.get_opt(&new_name).await?).is_some(),
        "with no hub running, the deleted Gateway is still in the bundle"
    );
    let running = start_hub_with_grace(fleet.hub.kubeconfig_path(), &geoip, grace).await;
    marked_then_gone("the restarted hub marks the Gateway deleted while it was down").await?;
    running.stop().await;
    Ok(())
}
