//! `make bench-distributed`: hub-less mode (seed 002) at 10, 50 and 100 clusters sharing one
//! provider zone: Route53 (moto behind a proxy that paces calls at Route53's 5 a second per
//! account, throttling the rest as Route53 does) and RFC2136 (BIND, counted by its own
//! statistics channel).
//!
//! The clusters are distributed-mode agents (`meridian_agent::distributed::run`), many
//! instances in this one process, each confined to a namespace of its own on one API server
//! (`LocalCluster::namespace`): a kube-apiserver per cluster does not fit 100 times on this
//! machine, and the API server is not what is measured here; the provider is. Each cluster has
//! a Gateway with two listeners, its own host `c<i>.example.com` and the host
//! `shared.example.com` that every cluster serves, a DNSPolicy with a health check, and its
//! own prober; every gateway address answers the probes (loopback backends).
//!
//! Per provider and size it prints:
//! - the provider calls until every cluster's records are published (a cold start);
//! - provider calls per minute in steady state, by kind, next to what the refresh interval
//!   implies (one `last_modified_at` read per record per refresh), and for Route53 the share
//!   of the account's budget (5 calls a second);
//! - after one cluster's gateway address changes: the calls and seconds until the change is
//!   applied and every cluster has seen it, traced per cluster: each agent's own memory of the
//!   shared host's last-modified mark as its last look at the zone found it (the change's mark,
//!   or a later one);
//! - the size of the health TXT records: the shared host's member list, and a failure report
//!   signed by every cluster (its largest possible value).

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::{Client, ResourceExt};
use meridian_api::conditions::{READY, condition_status};
use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::upstream::Gateway;
use meridian_controllers::decide::host_marks::last_modified_name;
use meridian_controllers::{LocalCluster, object_key};
use meridian_dns::model::RecordType;
use meridian_e2e::{ControlPlane, TestBedAssets, install_crds, load_crds};
use meridian_providers::Provider;
use meridian_testkit::backends::{Backends, start_backends};
use meridian_testkit::bind_server::BindServer;
use meridian_testkit::counting_proxy::{CountingProxy, Throttle};
use meridian_testkit::moto::MotoServer;
use serde_json::{Value, json};

const ZONE: &str = "example.com";
const SHARED_HOST: &str = "shared.example.com";
/// Route53's pace per account.
const ROUTE53_PER_SECOND: u32 = 5;
/// Hosts each cluster publishes (its own and the shared one): one record, one mark each.
const HOSTS_PER_CLUSTER: usize = 2;
const GATEWAY: &str = "web";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ProviderKind {
    Route53,
    Rfc2136,
}

#[derive(Debug, Parser)]
#[command(name = "bench-distributed", about)]
struct Args {
    /// Fleet sizes (clusters).
    #[arg(long, value_delimiter = ',', default_value = "10,100,300")]
    sizes: Vec<usize>,
    /// Providers holding the shared zone.
    #[arg(
        long,
        value_delimiter = ',',
        value_enum,
        default_value = "route53,rfc2136"
    )]
    providers: Vec<ProviderKind>,
    /// Each agent's `--refresh-seconds` (the agent's default is 60).
    #[arg(long, default_value_t = 60)]
    refresh_seconds: u64,
    /// Seconds to wait for a cold start or a change before giving up on it (300 clusters on
    /// Route53 take about 15 minutes).
    #[arg(long, default_value_t = 2400)]
    patience_seconds: u64,
    #[arg(long, env = "MERIDIAN_LOG", default_value = "warn,kube_client=off")]
    log: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    meridian_e2e::cli::init_logging(&args.log);
    // Many agents: a runtime with a worker per core, as one agent process would have.
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(bench(args))
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let assets = TestBedAssets::locate()?;
    let plane = ControlPlane::start("distributed", &assets).await?;
    let client = plane.client();
    let mut crds = load_crds(&assets.upstream_crds)?;
    crds.extend(load_crds(&assets.meridian_crds)?);
    install_crds(&client, &crds).await?;
    let refresh = Duration::from_secs(args.refresh_seconds.max(1));
    println!(
        "distributed mode: each cluster an agent instance in this process (own namespace, own \
         prober), {HOSTS_PER_CLUSTER} hosts each (its own and {SHARED_HOST}), health checked; \
         refresh every {} s; Route53 paced at {ROUTE53_PER_SECOND} calls/s",
        refresh.as_secs()
    );
    let mut rows = Vec::new();
    for provider in &args.providers {
        for &size in &args.sizes {
            eprintln!("== {provider:?}, {size} clusters");
            let figures = measure(&client, *provider, size, refresh, &args).await?;
            eprintln!("   {figures:?}");
            rows.push((*provider, size, figures));
        }
    }
    println!();
    println!(
        "{:<9} {:>8} {:>13} {:>14} {:>12} {:>10} {:>16} {:>12} {:>10} {:>10}",
        "provider",
        "clusters",
        "cold calls",
        "steady /min",
        "implied /min",
        "budget",
        "change calls",
        "change s",
        "members B",
        "report B"
    );
    for (provider, size, figures) in &rows {
        let budget = match provider {
            ProviderKind::Route53 => format!(
                "{:.0} %",
                figures.steady_per_minute / 60.0 / f64::from(ROUTE53_PER_SECOND) * 100.0
            ),
            ProviderKind::Rfc2136 => "n/a".into(),
        };
        let change_seconds = match seen_by_all(&figures.change_seen_after) {
            Some(slowest) => format!("{slowest:.1}"),
            None => format!(
                "{} of {size} saw",
                figures.change_seen_after.iter().flatten().count()
            ),
        };
        println!(
            "{:<9} {:>8} {:>13} {:>14.1} {:>12.1} {:>10} {:>16} {:>12} {:>10} {:>10}",
            format!("{provider:?}").to_lowercase(),
            size,
            figures.cold_calls,
            figures.steady_per_minute,
            figures.implied_per_minute,
            budget,
            figures.change_calls,
            change_seconds,
            figures.members_bytes,
            figures.full_report_bytes,
        );
    }
    println!();
    for (provider, size, figures) in &rows {
        println!(
            "{:?} at {size}: cold start {:.1} s, calls by kind {:?} ({} throttled); steady calls \
             by kind {:?}; change calls by kind {:?}; change seen by each cluster after (s) {}{}",
            provider,
            figures.cold_seconds,
            figures.cold_by_kind,
            figures.cold_throttled,
            figures.steady_by_kind,
            figures.change_by_kind,
            seen_spread(&figures.change_seen_after),
            if figures.throttled > 0 {
                format!("; {} calls throttled in all", figures.throttled)
            } else {
                String::new()
            }
        );
    }
    drop(plane);
    Ok(())
}

#[derive(Debug, Default)]
struct Figures {
    cold_calls: u64,
    cold_seconds: f64,
    cold_by_kind: BTreeMap<String, u64>,
    cold_throttled: u64,
    steady_per_minute: f64,
    steady_by_kind: BTreeMap<String, f64>,
    implied_per_minute: f64,
    change_calls: u64,
    change_by_kind: BTreeMap<String, u64>,
    /// Per cluster, seconds from the change until its own last look had seen it (`None`: not
    /// within two refreshes and a minute).
    change_seen_after: Vec<Option<f64>>,
    members_bytes: usize,
    full_report_bytes: usize,
    throttled: u64,
}

/// The zone's server, and how its calls are counted.
enum ZoneServer {
    Route53 {
        moto: MotoServer,
        proxy: CountingProxy,
    },
    Rfc2136(BindServer),
}

impl ZoneServer {
    async fn start(kind: ProviderKind) -> anyhow::Result<Self> {
        Ok(match kind {
            ProviderKind::Route53 => {
                let moto = MotoServer::start()?;
                moto.create_zone(ZONE).await.map_err(anyhow::Error::msg)?;
                let proxy = CountingProxy::start_with(
                    moto.address(),
                    Throttle::PerSecond(ROUTE53_PER_SECOND),
                )
                .await?;
                ZoneServer::Route53 { moto, proxy }
            }
            ProviderKind::Rfc2136 => {
                ZoneServer::Rfc2136(BindServer::start(ZONE).await.map_err(anyhow::Error::msg)?)
            }
        })
    }

    /// The agents' provider settings: where Route53 is (the proxy), as `--aws-endpoint` says.
    fn providers(&self) -> meridian_controllers::zones::zone_provider::ProviderSettings {
        match self {
            ZoneServer::Route53 { proxy, .. } => {
                meridian_controllers::zones::zone_provider::ProviderSettings {
                    aws_endpoint: Some(proxy.endpoint()),
                    ..Default::default()
                }
            }
            // BIND listens on loopback, which RFC2136 servers reach only by the admin's leave.
            ZoneServer::Rfc2136(_) => {
                meridian_controllers::zones::zone_provider::ProviderSettings::test_bed()
            }
        }
    }

    /// The provider Secret a cluster's ManagedZone names.
    fn secret(&self, namespace: &str) -> Value {
        match self {
            ZoneServer::Route53 { .. } => json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/aws",
                "metadata": { "name": "zone", "namespace": namespace },
                "stringData": {
                    "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                    "AWS_REGION": "us-east-1",
                },
            }),
            ZoneServer::Rfc2136(bind) => json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/rfc2136",
                "metadata": { "name": "zone", "namespace": namespace },
                "stringData": {
                    "server": bind.config.server.to_string(),
                    "tsigKeyName": bind.config.key_name,
                    "tsigAlgorithm": bind.config.algorithm,
                    "tsigSecret": bind.config.secret,
                },
            }),
        }
    }

    /// Calls answered so far, by kind (Route53 action; RFC2136 opcode, transfers apart).
    fn calls(&self) -> anyhow::Result<BTreeMap<String, u64>> {
        match self {
            ZoneServer::Route53 { proxy, .. } => Ok(proxy.calls()),
            ZoneServer::Rfc2136(bind) => bind.requests().map_err(anyhow::Error::msg),
        }
    }

    fn throttled(&self) -> u64 {
        match self {
            ZoneServer::Route53 { proxy, .. } => proxy.throttled(),
            ZoneServer::Rfc2136(_) => 0,
        }
    }

    /// The zone's TXT record `name`, read past the counters where possible (moto directly).
    async fn txt(&self, name: &str) -> anyhow::Result<Option<String>> {
        let record = match self {
            ZoneServer::Route53 { moto, .. } => {
                let provider = meridian_providers::route53::Route53Provider::new(
                    &moto.credentials(&moto.endpoint()),
                    Arc::new(meridian_providers::budget::RequestBudget::per_second(
                        ROUTE53_PER_SECOND,
                    )),
                );
                let zone_id = provider
                    .list_zones()
                    .await?
                    .into_iter()
                    .find(|z| z.domain.trim_end_matches('.') == ZONE)
                    .context("moto holds the zone")?
                    .id;
                provider
                    .read_record(&zone_id, name, RecordType::Txt)
                    .await?
            }
            ZoneServer::Rfc2136(bind) => {
                meridian_providers::rfc2136::Rfc2136Provider::new(bind.config.clone())?
                    .read_record(name, RecordType::Txt)
                    .await?
            }
        };
        Ok(record.map(|r| r.targets.join("")))
    }
}

/// When a host's last-modified mark (`<RFC 3339 time> <writer>`) was written.
fn mark_time(mark: &str) -> Option<k8s_openapi::jiff::Timestamp> {
    mark.split_whitespace().next()?.parse().ok()
}

/// Seconds until the last cluster saw the change, if every cluster did.
fn seen_by_all(seen_after: &[Option<f64>]) -> Option<f64> {
    seen_after
        .iter()
        .try_fold(0.0_f64, |slowest, seen| seen.map(|s| slowest.max(s)))
}

/// The clusters' seconds until each saw the change: minimum, median, maximum, and how many saw.
fn seen_spread(seen_after: &[Option<f64>]) -> String {
    let mut seen: Vec<f64> = seen_after.iter().flatten().copied().collect();
    seen.sort_by(f64::total_cmp);
    match (seen.first(), seen.last()) {
        (Some(first), Some(last)) => format!(
            "min {first:.1}, median {:.1}, max {last:.1} ({} of {} clusters)",
            seen[seen.len() / 2],
            seen.len(),
            seen_after.len()
        ),
        _ => format!("none of {} clusters", seen_after.len()),
    }
}

fn delta(after: &BTreeMap<String, u64>, before: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(kind, n)| (kind.clone(), n - before.get(kind).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// Cluster `i`'s gateway address: one loopback address each, all answering the probes.
fn address(i: usize) -> IpAddr {
    let i = u16::try_from(i).expect("a small fleet");
    IpAddr::V4(Ipv4Addr::new(127, 20, (i / 250) as u8, (i % 250) as u8 + 1))
}

/// The address cluster 0 moves to.
fn changed_address() -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 21, 0, 1))
}

/// Cluster `i`'s namespace in the fleet of `size` on `provider` (namespaces of a finished run
/// are still being deleted when the next starts).
fn namespace(provider: ProviderKind, size: usize, i: usize) -> String {
    format!("{}-n{size}-c{i:03}", fleet_prefix(provider))
}

fn fleet_prefix(provider: ProviderKind) -> &'static str {
    match provider {
        ProviderKind::Route53 => "r53",
        ProviderKind::Rfc2136 => "bind",
    }
}

async fn measure(
    client: &Client,
    provider: ProviderKind,
    size: usize,
    refresh: Duration,
    args: &Args,
) -> anyhow::Result<Figures> {
    let zone = ZoneServer::start(provider).await?;
    let mut addresses: Vec<IpAddr> = (0..size).map(address).collect();
    addresses.push(changed_address());
    let port = start_backends(&addresses, Backends::default()).await;
    for i in 0..size {
        install(
            client,
            &namespace(provider, size, i),
            &zone,
            address(i),
            port,
            i,
        )
        .await?;
    }
    let started = Instant::now();
    let mut agents = Vec::new();
    let mut contexts = Vec::new();
    for i in 0..size {
        let local = LocalCluster {
            name: format!("cluster-{i:03}"),
            // As long as a real one (the UID of the cluster's kube-system namespace).
            cluster_id: format!("{:08x}-0000-4000-8000-{i:012x}", size),
            labels: BTreeMap::new(),
            namespace: Some(namespace(provider, size, i)),
        };
        let probes = meridian_agent::health::ZoneProbes::start(Arc::new(
            // The benchmark's gateways listen on loopback addresses.
            meridian_agent::probe::Prober::new(
                &[],
                None,
                meridian_controllers::decide::probe_policy::ProbeAddressPolicy::test_bed(),
            ),
        ));
        let agent = meridian_agent::distributed::context(
            client.clone(),
            local,
            refresh,
            Some(probes),
            zone.providers(),
        );
        contexts.push(agent.clone());
        agents.push(tokio::spawn(meridian_agent::distributed::run_with(
            client.clone(),
            agent,
        )));
    }
    let patience = Duration::from_secs(args.patience_seconds);
    wait_ready(client, provider, size, None, started, patience).await?;
    let cold_by_kind = zone.calls()?;
    let mut figures = Figures {
        cold_calls: cold_by_kind.values().sum(),
        cold_seconds: started.elapsed().as_secs_f64(),
        cold_throttled: zone.throttled(),
        cold_by_kind,
        ..Figures::default()
    };
    eprintln!(
        "   published in {:.1} s, {} calls {:?}, {} throttled",
        figures.cold_seconds, figures.cold_calls, figures.cold_by_kind, figures.cold_throttled
    );

    // Steady state: one refresh for the health agreement and the first refreshes to settle,
    // then two refreshes counted (every record's mark is read about twice).
    tokio::time::sleep(refresh).await;
    let before = zone.calls()?;
    let window = refresh * 2;
    tokio::time::sleep(window).await;
    let steady = delta(&zone.calls()?, &before);
    tracing::debug!(?before, ?steady, "steady window");
    let minutes = window.as_secs_f64() / 60.0;
    figures.steady_per_minute = steady.values().sum::<u64>() as f64 / minutes;
    figures.steady_by_kind = steady
        .iter()
        .map(|(kind, n)| (kind.clone(), *n as f64 / minutes))
        .collect();
    figures.implied_per_minute = (size * HOSTS_PER_CLUSTER) as f64 * 60.0 / refresh.as_secs_f64();

    // One cluster's address changes: its own host and the shared one.
    let before = zone.calls()?;
    let changed_at = Instant::now();
    let first = namespace(provider, size, 0);
    let generation_before = records_generation(client, &first).await?;
    set_address(client, &first, changed_address()).await?;
    wait_ready(
        client,
        provider,
        size,
        Some((&first, generation_before)),
        changed_at,
        patience,
    )
    .await?;
    // Traced per cluster: each agent's own memory of the shared host's last-modified mark as
    // its last look at the zone found it. A cluster has seen the change once that mark is the
    // one the change wrote or a later one (a look after another cluster's later write).
    let written = zone
        .txt(&last_modified_name(SHARED_HOST))
        .await?
        .and_then(|mark| mark_time(&mark))
        .context("the change wrote the shared host's mark")?;
    let mut shared_records = Vec::new();
    for i in 0..size {
        let namespace = namespace(provider, size, i);
        let record = Api::<DNSRecord>::namespaced(client.clone(), &namespace)
            .list(&ListParams::default())
            .await?
            .into_iter()
            .find(|r| r.spec.root_host == SHARED_HOST)
            .map(|r| object_key("DNSRecord", Some(&namespace), &r.name_any()));
        shared_records.push(record);
    }
    let mut seen_after: Vec<Option<f64>> = vec![None; size];
    while seen_after.iter().any(Option::is_none)
        && changed_at.elapsed() < refresh * 2 + Duration::from_secs(60)
    {
        for (i, (agent, record)) in contexts.iter().zip(&shared_records).enumerate() {
            if seen_after[i].is_some() {
                continue;
            }
            let seen = record
                .as_ref()
                .and_then(|record| agent.host_marks.last_seen(record).flatten())
                .and_then(|mark| mark_time(&mark))
                .is_some_and(|at| at >= written);
            if seen {
                seen_after[i] = Some(changed_at.elapsed().as_secs_f64());
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    figures.change_seen_after = seen_after;
    figures.change_by_kind = delta(&zone.calls()?, &before);
    figures.change_calls = figures.change_by_kind.values().sum();
    figures.throttled = zone.throttled();

    let members = zone
        .txt(&format!("kuadrant.members.{SHARED_HOST}"))
        .await?
        .unwrap_or_default();
    figures.members_bytes = members.len();
    // A failure report names the failing clusters as the member list names the members:
    // every cluster reporting one address is the member list's IDs under another key.
    figures.full_report_bytes = members
        .strip_prefix("members=")
        .map_or(0, |ids| format!("ip={};failing={ids}", address(0)).len());

    for agent in &agents {
        agent.abort();
    }
    for i in 0..size {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let _ = namespaces
            .delete(&namespace(provider, size, i), &Default::default())
            .await;
    }
    Ok(figures)
}

/// One cluster's side: the zone's Secret and ManagedZone, a Gateway with its own host and the
/// shared one, and a health-checked policy.
async fn install(
    client: &Client,
    namespace: &str,
    zone: &ZoneServer,
    address: IpAddr,
    port: u16,
    index: usize,
) -> anyhow::Result<()> {
    let patch = PatchParams::apply("bench").force();
    Api::<Namespace>::all(client.clone())
        .patch(
            namespace,
            &patch,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": namespace },
            })),
        )
        .await?;
    Api::<Secret>::namespaced(client.clone(), namespace)
        .patch("zone", &patch, &Patch::Apply(zone.secret(namespace)))
        .await?;
    Api::<ManagedZone>::namespaced(client.clone(), namespace)
        .patch(
            "example",
            &patch,
            &Patch::Apply(json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
                "metadata": { "name": "example", "namespace": namespace },
                "spec": { "domainName": ZONE, "dnsProviderSecretRef": { "name": "zone" } },
            })),
        )
        .await?;
    Api::<Gateway>::namespaced(client.clone(), namespace)
        .patch(
            GATEWAY,
            &patch,
            &Patch::Apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "metadata": { "name": GATEWAY, "namespace": namespace },
                "spec": {
                    "gatewayClassName": "bench",
                    "listeners": [
                        { "name": "own", "hostname": format!("c{index}.{ZONE}"), "port": 80, "protocol": "HTTP" },
                        { "name": "shared", "hostname": SHARED_HOST, "port": 80, "protocol": "HTTP" },
                    ],
                },
            })),
        )
        .await?;
    set_address(client, namespace, address).await?;
    Api::<DNSPolicy>::namespaced(client.clone(), namespace)
        .patch(
            GATEWAY,
            &patch,
            &Patch::Apply(json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
                "metadata": { "name": GATEWAY, "namespace": namespace },
                "spec": {
                    "targetRef": { "name": GATEWAY },
                    "routingStrategy": "simple",
                    "healthCheck": {
                        "endpoint": "/healthz", "port": port, "protocol": "HTTP",
                        "interval": "60s", "failureThreshold": 3,
                    },
                },
            })),
        )
        .await?;
    Ok(())
}

/// Plays the gateway implementation: the Gateway's address.
async fn set_address(client: &Client, namespace: &str, address: IpAddr) -> anyhow::Result<()> {
    Api::<Gateway>::namespaced(client.clone(), namespace)
        .patch_status(
            GATEWAY,
            &PatchParams::apply("gateway-implementation").force(),
            &Patch::Apply(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                "status": {
                    "addresses": [{ "type": "IPAddress", "value": address.to_string() }],
                    "listeners": [
                        { "name": "own", "attachedRoutes": 1, "supportedKinds": [], "conditions": [] },
                        { "name": "shared", "attachedRoutes": 1, "supportedKinds": [], "conditions": [] },
                    ],
                },
            })),
        )
        .await?;
    Ok(())
}

/// The generations of a namespace's DNSRecords, by name.
async fn records_generation(
    client: &Client,
    namespace: &str,
) -> anyhow::Result<BTreeMap<String, i64>> {
    Ok(Api::<DNSRecord>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?
        .into_iter()
        .map(|r| (r.name_any(), r.metadata.generation.unwrap_or(0)))
        .collect())
}

/// Waits until every cluster's records of this size are published (`Ready` at their
/// generation); with `changed`, until that namespace's records have also moved past the
/// generations given.
async fn wait_ready(
    client: &Client,
    provider: ProviderKind,
    size: usize,
    changed: Option<(&str, BTreeMap<String, i64>)>,
    since: Instant,
    patience: Duration,
) -> anyhow::Result<()> {
    let records: Api<DNSRecord> = Api::all(client.clone());
    let mut said = Instant::now();
    loop {
        let all = records.list(&ListParams::default()).await?;
        let prefix = format!("{}-n{size}-", fleet_prefix(provider));
        let mine: Vec<&DNSRecord> = all
            .iter()
            .filter(|r| r.namespace().is_some_and(|ns| ns.starts_with(&prefix)))
            .collect();
        let ready = mine
            .iter()
            .filter(|r| {
                r.status.as_ref().is_some_and(|s| {
                    s.observed_generation == r.metadata.generation
                        && condition_status(&s.conditions, READY) == Some(true)
                })
            })
            .filter(|r| match &changed {
                Some((namespace, before)) if r.namespace().as_deref() == Some(namespace) => before
                    .get(&r.name_any())
                    .is_none_or(|g| r.metadata.generation.unwrap_or(0) > *g),
                _ => true,
            })
            .count();
        if ready == size * HOSTS_PER_CLUSTER {
            return Ok(());
        }
        anyhow::ensure!(
            since.elapsed() < patience,
            "{ready} of {} records published after {} s",
            size * HOSTS_PER_CLUSTER,
            patience.as_secs()
        );
        if said.elapsed() > Duration::from_secs(15) {
            eprintln!(
                "   {ready} of {} records published at {:.0} s",
                size * HOSTS_PER_CLUSTER,
                since.elapsed().as_secs_f64()
            );
            said = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
