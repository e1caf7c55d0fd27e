//! `make bench-hub-scale`: the hub's cost with a fleet of synthetic clusters.
//!
//! One control plane of the test bed, no real spokes. The bench writes what OCM and the agents
//! would (ManagedClusters with geo and custom-weight labels and their namespaces,
//! PlacementDecisions of 5 clusters per Gateway, one report per cluster, heartbeats) and what
//! admins would (Gateways with one listener each in an embedded ManagedZone, one DNSPolicy
//! each), then runs `meridian-hub run` as its own process under its own ServiceAccount, so the
//! API server's audit log tells its requests from the bench's. Per size it prints:
//! - seconds from the hub's start until every policy is `Enforced` and the nameserver answers
//!   every host, printing the progress on the way;
//! - seconds until every Gateway's works and every placed cluster's agent work (or, with the
//!   default add-on delivery, its ManagedClusterAddOn) are written
//!   (the hub's start-up work is done; the steady window begins after it);
//! - the hub's API requests per second by verb over the steady window (its own leader Lease
//!   apart), with the synthetic agents heartbeating;
//! - reconciles per second by controller, the hub's CPU (cores) and peak RSS;
//! - p50/p99 of one cluster's gateway address change until each server of the zone answers
//!   it: the leading replica, a standby replica (a second `meridian-hub run`, started once the
//!   leader has converged) and an agent serving DNS (the agent's DNS path, in this process),
//!   each asked directly; and how long after the record's `status.endpoints` said so.
//!
//! `--dnssec` signs the zone (the standby signs with the same keys; the agent gets no copy of
//! them here, so it is not asked then).
//!
//! `--baseline-hub PATH` runs the same with another build (the code before a change) and
//! prints the ratios: absolute figures on a shared two-core machine are noise, ratios are not.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use meridian_api::kuadrant::DNSPolicy;
use meridian_api::meridian::ClusterReport;
use meridian_api::upstream::{ManagedClusterAddOn, ManifestWork};
use meridian_e2e::synthetic::{
    CLUSTERS_PER_GATEWAY, ChangeRun, Strategy, SyntheticFleet, change_address, lease, query_a,
    wait_answering, write_fleet,
};
use meridian_e2e::{ControlPlane, TestBedAssets, install_crds, load_crds};
use serde_json::{Value, json};

const HUB_ACCOUNT: &str = "meridian-hub";
/// How long one address change may take to be answered before it counts as unanswered.
const CHANGE_PATIENCE: Duration = Duration::from_secs(120);
/// After this many unanswered changes a hub is not timed further (each costs the patience).
const UNANSWERED_LIMIT: usize = 3;
/// How often the wait for convergence prints how far it got.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

#[derive(Debug, Parser)]
#[command(name = "bench-hub-scale", about)]
struct Args {
    /// Fleet sizes, clusters x gateways.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "10x10,100x300,1000x2000,3000x6000"
    )]
    sizes: Vec<Size>,
    /// The hub to measure; `meridian-hub` next to this program when unset.
    #[arg(long)]
    hub: Option<PathBuf>,
    /// Another hub build to measure in the same run (with the agents of its time, which
    /// heartbeat by rewriting their reports).
    #[arg(long)]
    baseline_hub: Option<PathBuf>,
    /// The sizes to measure the baseline at (all of `--sizes` when unset): a hub that cannot
    /// keep up at a size would spend the whole convergence timeout there.
    #[arg(long, value_delimiter = ',')]
    baseline_sizes: Option<Vec<Size>>,
    /// The hubs' resync period (`--resync-seconds`); the hub's default (300 s) when unset. A
    /// period shorter than the steady window puts every object's periodic pass inside it.
    #[arg(long)]
    hub_resync_seconds: Option<u64>,
    /// Seconds of steady state to count requests over.
    #[arg(long, default_value_t = 60)]
    steady_seconds: u64,
    /// Seconds between a synthetic agent's heartbeats.
    #[arg(long, default_value_t = 30)]
    heartbeat_seconds: u64,
    /// Address changes to time.
    #[arg(long, default_value_t = 20)]
    changes: usize,
    /// Each DNSPolicy's routing strategy: `simple` (one A record per host), or `loadbalanced`
    /// (GEO by the clusters' geo labels, IE by default, and weights: a leaf per cluster).
    #[arg(long, default_value = "simple", value_parser = ["simple", "loadbalanced"])]
    strategy: String,
    /// Sign the zone (DNSSEC), as `make demo` does.
    #[arg(long)]
    dnssec: bool,
    /// Who installs the agents (the hubs' `--agent-delivery`): `addon`, the hub's default (a
    /// ManagedClusterAddOn per placed cluster, for OCM's addon manager, which the bench does not
    /// run), or `work` (the hub's own ManifestWork per placed cluster, with a token it mints).
    #[arg(long, default_value = "addon", value_parser = ["addon", "work"])]
    agent_delivery: String,
    /// Longest wait for convergence, in seconds.
    #[arg(long, default_value_t = 1800)]
    converge_timeout_seconds: u64,
    /// Append each hub's log (warnings and errors) to this file; discarded when unset.
    #[arg(long)]
    hub_log: Option<PathBuf>,
    /// Log filter in `tracing` syntax (kube's client is quiet unless asked for).
    #[arg(long, env = "MERIDIAN_LOG", default_value = "warn,kube_client=off")]
    log: String,
}

#[derive(Debug, Clone, Copy)]
struct Size {
    clusters: usize,
    gateways: usize,
}

impl std::str::FromStr for Size {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let (clusters, gateways) = s
            .split_once('x')
            .ok_or_else(|| format!("{s:?}: expected CLUSTERSxGATEWAYS"))?;
        let number = |n: &str| n.trim().parse::<usize>().map_err(|e| format!("{s:?}: {e}"));
        let size = Size {
            clusters: number(clusters)?,
            gateways: number(gateways)?,
        };
        if size.clusters < CLUSTERS_PER_GATEWAY || size.gateways == 0 {
            return Err(format!(
                "{s:?}: at least {CLUSTERS_PER_GATEWAY} clusters and 1 gateway"
            ));
        }
        Ok(size)
    }
}

/// How the synthetic agents say they are alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Heartbeat {
    /// Renew the cluster's heartbeat Lease (agents since the Lease).
    Lease,
    /// Rewrite the whole report (agents before it).
    Report,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let log = args.log.clone();
    meridian_e2e::cli::run_program(&log, bench(args))
}

async fn bench(args: Args) -> anyhow::Result<()> {
    let assets = TestBedAssets::locate()?;
    let hub = match &args.hub {
        Some(path) => path.clone(),
        None => std::env::current_exe()?.with_file_name("meridian-hub"),
    };
    anyhow::ensure!(hub.exists(), "no hub binary at {}", hub.display());
    let mut runs = vec![("this", hub, Heartbeat::Lease)];
    if let Some(baseline) = &args.baseline_hub {
        runs.push(("baseline", baseline.clone(), Heartbeat::Report));
    }
    let resync = args
        .hub_resync_seconds
        .map_or("the hub's default resync".to_string(), |s| {
            format!("resync every {s} s")
        });
    println!(
        "hub scale: each Gateway placed on {CLUSTERS_PER_GATEWAY} clusters, one DNSPolicy each ({}), \
         agents heartbeating every {} s, {} s of steady state, {} address changes, {resync}, \
         agents delivered by {}{}",
        args.strategy,
        args.heartbeat_seconds,
        args.steady_seconds,
        args.changes,
        args.agent_delivery,
        if args.dnssec { ", the zone signed" } else { "" }
    );
    for size in &args.sizes {
        let mut measured = Vec::new();
        for (label, binary, heartbeat) in &runs {
            let skipped = *label == "baseline"
                && args.baseline_sizes.as_ref().is_some_and(|sizes| {
                    !sizes
                        .iter()
                        .any(|s| s.clusters == size.clusters && s.gateways == size.gateways)
                });
            if skipped {
                continue;
            }
            eprintln!("== {} x {}: {label} hub", size.clusters, size.gateways);
            let figures = measure(&assets, *size, binary, *heartbeat, &args).await?;
            println!(
                "\n{} clusters x {} gateways, {label} hub ({}):",
                size.clusters,
                size.gateways,
                binary.display()
            );
            print!("{}", figures.render());
            measured.push(figures);
        }
        if let [this, baseline] = measured.as_slice() {
            println!("  this / baseline: {}", this.ratios(baseline));
        }
    }
    Ok(())
}

#[derive(Debug, Default)]
struct Figures {
    converged_seconds: f64,
    /// Until every Gateway's works and every placed cluster's agent work are written.
    placed_seconds: f64,
    /// The hub's writes on the DNS path until converged, per policy, by resource.
    dns_writes_per_policy: BTreeMap<String, f64>,
    /// The hub's requests from its start until placed, by verb and resource (and answer, when
    /// it was a 404 or 409): what placement costs the API server, beside the DNS path.
    requests_until_placed: BTreeMap<String, u64>,
    requests_per_second: BTreeMap<String, f64>,
    own_lease_per_second: f64,
    reconciles_per_second: BTreeMap<String, f64>,
    cores: f64,
    peak_rss_mib: f64,
    /// Per change, the slowest server.
    change_p50: f64,
    change_p99: f64,
    /// Per server: p50 and p99 from the change, the most after status said it was published,
    /// and how many changes it had not answered after [`CHANGE_PATIENCE`].
    servers: Vec<ServerFigures>,
    /// Changes some server had not answered after [`CHANGE_PATIENCE`].
    changes_unanswered: usize,
    /// Changes timed (fewer than asked once [`UNANSWERED_LIMIT`] went unanswered).
    changes_timed: usize,
}

#[derive(Debug, Default)]
struct ServerFigures {
    name: &'static str,
    p50: f64,
    p99: f64,
    most_after_status: f64,
    unanswered: usize,
}

impl Figures {
    fn total_requests(&self) -> f64 {
        // A fold from +0.0: an empty sum of floats is -0.0.
        self.requests_per_second
            .values()
            .fold(0.0, |sum, n| sum + n)
    }

    fn render(&self) -> String {
        let by_verb = |map: &BTreeMap<String, f64>| {
            if map.is_empty() {
                return "none".to_string();
            }
            map.iter()
                .map(|(k, v)| format!("{k} {v:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        format!(
            "  converged (all Enforced, every host answers): {:.1} s\n  \
             placed (every Gateway work and each cluster's agent work or add-on written): {:.1} s\n  \
             DNS writes per policy until converged: {:.2} ({})\n  \
             requests until placed: {} ({})\n  \
             steady API requests/s: {:.2} ({}); own Lease {:.2}/s\n  \
             steady reconciles/s: {}\n  \
             hub CPU {:.3} cores, peak RSS {:.0} MiB\n  \
             address change → answer at every server: p50 {:.3} s, p99 {:.3} s over {} changes ({} not answered within {} s)\n{}",
            self.converged_seconds,
            self.placed_seconds,
            self.dns_writes_per_policy.values().sum::<f64>(),
            by_verb(&self.dns_writes_per_policy),
            self.requests_until_placed.values().sum::<u64>(),
            largest(&self.requests_until_placed, 10),
            self.total_requests(),
            by_verb(&self.requests_per_second),
            self.own_lease_per_second,
            by_verb(&self.reconciles_per_second),
            self.cores,
            self.peak_rss_mib,
            self.change_p50,
            self.change_p99,
            self.changes_timed,
            self.changes_unanswered,
            CHANGE_PATIENCE.as_secs(),
            self.servers
                .iter()
                .map(|server| format!(
                    "    {}: p50 {:.3} s, p99 {:.3} s; at most {:.3} s after status said published; {} not answered\n",
                    server.name, server.p50, server.p99, server.most_after_status, server.unanswered
                ))
                .collect::<String>(),
        )
    }

    fn ratios(&self, baseline: &Figures) -> String {
        let ratio = |a: f64, b: f64| {
            if b > 0.0 {
                format!("{:.3}", a / b)
            } else {
                "n/a".into()
            }
        };
        format!(
            "converge {}, placed {}, DNS writes {}, requests/s {}, CPU {}, RSS {}, change p99 {}",
            ratio(self.converged_seconds, baseline.converged_seconds),
            ratio(self.placed_seconds, baseline.placed_seconds),
            ratio(
                self.dns_writes_per_policy.values().sum(),
                baseline.dns_writes_per_policy.values().sum()
            ),
            ratio(self.total_requests(), baseline.total_requests()),
            ratio(self.cores, baseline.cores),
            ratio(self.peak_rss_mib, baseline.peak_rss_mib),
            ratio(self.change_p99, baseline.change_p99),
        )
    }
}

async fn measure(
    assets: &TestBedAssets,
    size: Size,
    binary: &Path,
    heartbeat: Heartbeat,
    args: &Args,
) -> anyhow::Result<Figures> {
    let hub_user = format!("system:serviceaccount:kube-system:{HUB_ACCOUNT}");
    let plane = ControlPlane::start_audited("scale", assets, &hub_user).await?;
    let client = plane.client();
    let mut crds = load_crds(&assets.upstream_crds)?;
    crds.extend(load_crds(&assets.meridian_crds)?);
    install_crds(&client, &crds).await?;
    let fleet = Arc::new(SyntheticFleet {
        clusters: size.clusters,
        gateways: size.gateways,
        strategy: match args.strategy.as_str() {
            "loadbalanced" => Strategy::LoadBalanced,
            _ => Strategy::Simple,
        },
        first_cluster: 0,
    });
    let started_writing = Instant::now();
    write_fleet(&client, &fleet, args.dnssec).await?;
    eprintln!(
        "   wrote the fleet in {:.1} s",
        started_writing.elapsed().as_secs_f64()
    );
    let kubeconfig = hub_kubeconfig(&client, &plane).await?;

    let audit = plane.dir().join("audit.log");
    let audit_at_start = std::fs::metadata(&audit).map(|m| m.len()).unwrap_or(0);
    let started = Instant::now();
    let hub = HubProcess::start(
        binary,
        &kubeconfig,
        args.hub_resync_seconds,
        &args.agent_delivery,
        args.hub_log.as_deref(),
    )?;
    let heartbeats = Heartbeats::start(
        plane.kubeconfig_path(),
        fleet.clone(),
        heartbeat,
        Duration::from_secs(args.heartbeat_seconds),
    );
    let timeout = Duration::from_secs(args.converge_timeout_seconds);
    wait_converged(&client, &fleet, hub.nameserver, started, timeout).await?;
    let mut figures = Figures {
        converged_seconds: started.elapsed().as_secs_f64(),
        ..Figures::default()
    };
    eprintln!("   converged in {:.1} s", figures.converged_seconds);
    figures.dns_writes_per_policy = audited_dns_writes(&audit, audit_at_start)?
        .into_iter()
        .map(|(resource, n)| (resource, n as f64 / size.gateways as f64))
        .collect();
    // The steady window starts once the Gateways are placed: until then the hub is still
    // writing works and installing agents, which is start-up work, not steady cost.
    wait_placed(&client, &fleet, &args.agent_delivery, started, timeout).await?;
    figures.placed_seconds = started.elapsed().as_secs_f64();
    eprintln!("   placed in {:.1} s", figures.placed_seconds);
    figures.requests_until_placed = audited_requests_by_kind(&audit, audit_at_start)?;

    // Steady state: let the hub settle for one heartbeat, then count.
    tokio::time::sleep(Duration::from_secs(args.heartbeat_seconds.min(30))).await;
    let audit_from = std::fs::metadata(&audit).map(|m| m.len()).unwrap_or(0);
    let cpu_from = hub.cpu_seconds()?;
    let reconciles_from = hub.reconciles().await?;
    let window = Duration::from_secs(args.steady_seconds.max(1));
    tokio::time::sleep(window).await;
    let seconds = window.as_secs_f64();
    let (requests, own_lease) = audited_requests(&audit, audit_from)?;
    figures.requests_per_second = requests
        .into_iter()
        .map(|(verb, n)| (verb, n as f64 / seconds))
        .collect();
    figures.own_lease_per_second = own_lease as f64 / seconds;
    figures.cores = (hub.cpu_seconds()? - cpu_from) / seconds;
    let reconciles_to = hub.reconciles().await?;
    figures.reconciles_per_second = reconciles_to
        .iter()
        .map(|(controller, n)| {
            let before = reconciles_from.get(controller).copied().unwrap_or(0.0);
            (controller.clone(), (n - before) / seconds)
        })
        .filter(|(_, rate)| *rate > 0.0)
        .collect();

    // Every server of the zone: the leader, a standby replica, and an agent serving DNS.
    let standby = HubProcess::start(
        binary,
        &kubeconfig,
        args.hub_resync_seconds,
        &args.agent_delivery,
        args.hub_log.as_deref(),
    )?;
    let agent_dns = std::net::UdpSocket::bind("127.0.0.1:0")?.local_addr()?;
    let agent = tokio::spawn(meridian_agent::dns::serve(
        client.clone(),
        fleet.cluster(0),
        meridian_agent::dns::ServeDns {
            listen: agent_dns,
            geoip: None,
            name_servers: Vec::new(),
            rate_limit: None,
        },
    ));
    let mut servers = vec![("leader", hub.nameserver), ("standby", standby.nameserver)];
    // The agent signs with the copy of the keys the hub delivers to its cluster's namespace,
    // which needs an agent install this bench does not make.
    if !args.dnssec {
        servers.push(("agent", agent_dns));
    }
    for (name, server) in &servers {
        let asked = Instant::now();
        wait_answering(&fleet, *server, timeout).await?;
        eprintln!(
            "   the {name} answers every host ({:.1} s)",
            asked.elapsed().as_secs_f64()
        );
    }
    let addresses: Vec<SocketAddr> = servers.iter().map(|(_, address)| *address).collect();
    let mut timed = Vec::new();
    let mut overrides = BTreeMap::new();
    // Five changes in a row to one Gateway's address (a load balancer re-provisioned a few
    // times), then the next Gateway.
    for run in 0..args.changes.div_ceil(5) {
        let j = (run * 7919) % size.gateways;
        let i = fleet.placed(j)[0];
        let count = (args.changes - run * 5).min(5);
        let new: Vec<String> = (0..count)
            .map(|k| format!("172.16.{run}.{}", k + 1))
            .collect();
        let run = ChangeRun {
            cluster: i,
            gateway: j,
            addresses: new,
            churn: None,
        };
        let changes = change_address(
            &client,
            &fleet,
            &run,
            &addresses,
            &mut overrides,
            CHANGE_PATIENCE,
        )
        .await?;
        for change in &changes {
            let late: Vec<&str> = servers
                .iter()
                .zip(&change.answered)
                .filter(|(_, answered)| answered.is_none())
                .map(|((name, _), _)| *name)
                .collect();
            if !late.is_empty() {
                eprintln!(
                    "   {} → {}: not answered by {late:?} within {CHANGE_PATIENCE:?} (status {}); they answered {:?}",
                    change.name,
                    change.address,
                    if change.published.is_some() {
                        "said published"
                    } else {
                        "did not say published"
                    },
                    change.last_answer
                );
            }
        }
        timed.extend(changes);
        if timed
            .iter()
            .filter(|c| c.answered.iter().any(Option::is_none))
            .count()
            >= UNANSWERED_LIMIT
        {
            break;
        }
    }
    let seconds = |d: Option<Duration>| d.unwrap_or(CHANGE_PATIENCE).as_secs_f64();
    let mut slowest: Vec<f64> = timed
        .iter()
        .map(|c| c.answered.iter().map(|a| seconds(*a)).fold(0.0, f64::max))
        .collect();
    slowest.sort_by(f64::total_cmp);
    figures.changes_timed = timed.len();
    figures.changes_unanswered = timed
        .iter()
        .filter(|c| c.answered.iter().any(Option::is_none))
        .count();
    figures.change_p50 = percentile(&slowest, 0.5);
    figures.change_p99 = percentile(&slowest, 0.99);
    figures.servers = servers
        .iter()
        .enumerate()
        .map(|(index, (name, _))| {
            let mut each: Vec<f64> = timed.iter().map(|c| seconds(c.answered[index])).collect();
            each.sort_by(f64::total_cmp);
            ServerFigures {
                name,
                p50: percentile(&each, 0.5),
                p99: percentile(&each, 0.99),
                most_after_status: timed
                    .iter()
                    .filter_map(|c| c.after_status()[index])
                    .map(|d| d.as_secs_f64())
                    .fold(0.0, f64::max),
                unanswered: timed.iter().filter(|c| c.answered[index].is_none()).count(),
            }
        })
        .collect();
    agent.abort();
    standby.stop();
    figures.peak_rss_mib = hub.peak_rss_mib()?;
    heartbeats.stop();
    hub.stop();
    drop(plane);
    Ok(figures)
}

/// The `p`-th percentile of `sorted` (0 when empty).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted
        .get(((sorted.len().max(1) - 1) as f64 * p).round() as usize)
        .copied()
        .unwrap_or_default()
}

/// Server-side apply under the bench's field manager.
async fn apply<K>(api: &Api<K>, name: &str, object: Value) -> anyhow::Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply("meridian-bench").force(),
        &Patch::Apply(object),
    )
    .await
    .with_context(|| format!("applying {name}"))?;
    Ok(())
}

/// The synthetic agents' heartbeats on a thread, runtime and client of their own: the bench's
/// own waits (DNS queries, lists) must never delay them, or the hub would rightly see a fleet
/// gone quiet and hold its brake.
struct Heartbeats {
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Heartbeats {
    fn start(
        kubeconfig: &Path,
        fleet: Arc<SyntheticFleet>,
        heartbeat: Heartbeat,
        interval: Duration,
    ) -> Self {
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let kubeconfig = kubeconfig.to_path_buf();
        let thread = std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(error) => {
                    tracing::error!(%error, "no runtime for the heartbeats");
                    return;
                }
            };
            runtime.block_on(async move {
                let client = match meridian_e2e::client_from_kubeconfig(&kubeconfig).await {
                    Ok(client) => client,
                    Err(error) => {
                        tracing::error!(%error, "no client for the heartbeats");
                        return;
                    }
                };
                tokio::select! {
                    () = heartbeat_forever(client, fleet, heartbeat, interval) => {}
                    _ = stopped => {}
                }
            });
        });
        Heartbeats { stop, thread }
    }

    fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.thread.join();
    }
}

/// The synthetic agents' heartbeats, spread evenly over the interval. Each renewal is its own
/// task, as each agent is its own process: a slow API server delays renewals, it does not
/// queue them behind each other (which would silence clusters the hub then withdraws).
async fn heartbeat_forever(
    client: Client,
    fleet: Arc<SyntheticFleet>,
    heartbeat: Heartbeat,
    interval: Duration,
) {
    let clusters = fleet.clusters.max(1);
    let mut tick = tokio::time::interval(interval / clusters as u32);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for i in (0..clusters).cycle() {
        tick.tick().await;
        let (client, fleet) = (client.clone(), fleet.clone());
        tokio::spawn(async move {
            let name = fleet.cluster(i);
            let result = match heartbeat {
                Heartbeat::Lease => {
                    apply(
                        &Api::<Lease>::namespaced(client, &name),
                        meridian_api::names::HEARTBEAT_LEASE,
                        lease(&name),
                    )
                    .await
                }
                Heartbeat::Report => {
                    apply(
                        &Api::<ClusterReport>::namespaced(client, &name),
                        "agent",
                        fleet.report(i, &BTreeMap::new()),
                    )
                    .await
                }
            };
            if let Err(error) = result {
                tracing::warn!(%error, cluster = %name, "a heartbeat failed");
            }
        });
    }
}

/// A kubeconfig for the hub as ServiceAccount `kube-system/meridian-hub` (cluster-admin), so
/// the audit log can tell its requests from the bench's.
async fn hub_kubeconfig(client: &Client, plane: &ControlPlane) -> anyhow::Result<PathBuf> {
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    apply(
        &accounts,
        HUB_ACCOUNT,
        json!({ "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": { "name": HUB_ACCOUNT, "namespace": "kube-system" } }),
    )
    .await?;
    apply(
        &Api::<ClusterRoleBinding>::all(client.clone()),
        HUB_ACCOUNT,
        json!({ "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": HUB_ACCOUNT },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin" },
            "subjects": [{ "kind": "ServiceAccount", "name": HUB_ACCOUNT, "namespace": "kube-system" }] }),
    )
    .await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(24 * 3600),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = accounts
        .create_token_request(HUB_ACCOUNT, &PostParams::default(), &request)
        .await?
        .status
        .context("the token request has no status")?
        .token;
    let mut kubeconfig: yaml_serde::Value =
        yaml_serde::from_str(&std::fs::read_to_string(plane.kubeconfig_path())?)?;
    for user in kubeconfig["users"]
        .as_sequence_mut()
        .context("a kubeconfig has users")?
    {
        user["user"] = yaml_serde::to_value(json!({ "token": token }))?;
    }
    let path = plane.dir().join("hub.kubeconfig");
    std::fs::write(&path, yaml_serde::to_string(&kubeconfig)?)?;
    Ok(path)
}

/// Every policy `Enforced` and every host answered by the nameserver.
/// Waits until every policy is `Enforced` and the nameserver answers every host, printing the
/// progress every [`PROGRESS_EVERY`]. The policies are watched, not listed: listing 2,000
/// policies twice a second would load the API server the hub is measured against.
async fn wait_converged(
    client: &Client,
    fleet: &SyntheticFleet,
    nameserver: SocketAddr,
    started: Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    use kube::runtime::{WatchStreamExt, reflector, watcher};
    let policies: Api<DNSPolicy> =
        Api::namespaced(client.clone(), meridian_e2e::example::NAMESPACE);
    let (store, writer) = reflector::store();
    let watch = tokio::spawn(
        reflector(writer, watcher(policies, watcher::Config::default()))
            .default_backoff()
            .for_each(|_| async {}),
    );
    let mut answered = vec![false; fleet.gateways];
    let mut next_progress = PROGRESS_EVERY;
    let outcome = loop {
        if started.elapsed() >= timeout {
            break Err(anyhow::anyhow!("not converged within {timeout:?}"));
        }
        let enforced = store
            .state()
            .iter()
            .filter(|p| {
                p.status.as_ref().is_some_and(|s| {
                    meridian_api::conditions::condition_status(
                        &s.conditions,
                        meridian_api::conditions::ENFORCED,
                    ) == Some(true)
                })
            })
            .count();
        for (j, done) in answered.iter_mut().enumerate() {
            if !*done {
                *done = !query_a(nameserver, &fleet.host(j)).is_empty();
            }
        }
        let hosts = answered.iter().filter(|a| **a).count();
        if enforced == fleet.gateways && hosts == fleet.gateways {
            break Ok(());
        }
        if started.elapsed() >= next_progress {
            eprintln!(
                "   {:>5.0} s: {enforced} policies enforced, {hosts} hosts answered",
                started.elapsed().as_secs_f64()
            );
            next_progress += PROGRESS_EVERY;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    watch.abort();
    outcome
}

/// Waits until every placed Gateway is in a work on each of its clusters, and each placed
/// cluster has its agent: one more work (`work` delivery) or a ManagedClusterAddOn (`addon`).
/// A hub writes either a work per Gateway and cluster (hubs before bundles: counted with
/// one-item lists, the API server's remaining count) or a bundle per cluster (once there are
/// as many works as that needs, the bundles' entries are counted), so the wait costs the API
/// server next to nothing.
async fn wait_placed(
    client: &Client,
    fleet: &SyntheticFleet,
    agent_delivery: &str,
    started: Instant,
    timeout: Duration,
) -> anyhow::Result<()> {
    let placed_clusters = (0..fleet.gateways)
        .flat_map(|j| fleet.placed(j))
        .collect::<std::collections::BTreeSet<usize>>()
        .len();
    let gateway_works = fleet.gateways * CLUSTERS_PER_GATEWAY;
    let by_work = agent_delivery == "work";
    let agent_works = if by_work { placed_clusters } else { 0 };
    let addons_expected = if by_work { 0 } else { placed_clusters };
    let all_works = Api::<ManifestWork>::all(client.clone());
    let bundles = ListParams::default().labels(meridian_api::labels::GATEWAY_BUNDLE_LABEL);
    let mut next_progress = started.elapsed() + PROGRESS_EVERY;
    loop {
        let works = count(&all_works).await?;
        let addons = if by_work {
            0
        } else {
            count(&Api::<ManagedClusterAddOn>::all(client.clone())).await?
        };
        let bundled = !all_works
            .list(&bundles.clone().limit(1))
            .await?
            .items
            .is_empty();
        let (placed, progress) = if bundled {
            let mut entries = 0;
            if works >= placed_clusters + agent_works {
                entries = all_works
                    .list(&bundles)
                    .await?
                    .items
                    .iter()
                    .map(|w| {
                        meridian_api::labels::bundle_entries(w.metadata.annotations.as_ref()).len()
                    })
                    .sum();
            }
            (
                entries >= gateway_works,
                format!(
                    "{works} ManifestWorks ({entries} of {gateway_works} Gateways in bundles), {addons} of {addons_expected} ManagedClusterAddOns"
                ),
            )
        } else {
            let works_expected = gateway_works + agent_works;
            (
                works >= works_expected,
                format!(
                    "{works} of {works_expected} ManifestWorks, {addons} of {addons_expected} ManagedClusterAddOns"
                ),
            )
        };
        if placed && addons >= addons_expected {
            return Ok(());
        }
        anyhow::ensure!(started.elapsed() < timeout, "{progress} after {timeout:?}");
        if started.elapsed() >= next_progress {
            eprintln!("   {:>5.0} s: {progress}", started.elapsed().as_secs_f64());
            next_progress += PROGRESS_EVERY;
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
}

/// How many objects `api` lists, from a one-item page and the API server's remaining count.
async fn count<K>(api: &Api<K>) -> anyhow::Result<usize>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let page = api.list(&ListParams::default().limit(1)).await?;
    Ok(page.items.len()
        + page
            .metadata
            .remaining_item_count
            .map_or(0, |n| n.max(0) as usize))
}

/// The hub's completed requests in the audit log after `offset`.
fn audited_events(path: &Path, offset: u64) -> anyhow::Result<Vec<Value>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|event| event["stage"] == "ResponseComplete")
        .collect())
}

/// The hub's requests in the audit log after `offset` but its own leader Lease's, by verb and
/// resource (`create manifestworks`), a 404 or 409 answer counted apart (`delete roles 404`).
fn audited_requests_by_kind(path: &Path, offset: u64) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut by_kind = BTreeMap::new();
    for event in audited_events(path, offset)? {
        let reference = &event["objectRef"];
        if reference["resource"] == "leases" && reference["namespace"] == "kube-system" {
            continue;
        }
        let mut kind = format!(
            "{} {}",
            event["verb"].as_str().unwrap_or("?"),
            reference["resource"].as_str().unwrap_or("?")
        );
        if let Some(sub) = reference["subresource"].as_str().filter(|s| !s.is_empty()) {
            kind = format!("{kind}/{sub}");
        }
        if let Some(code @ (404 | 409)) = event["responseStatus"]["code"].as_u64() {
            kind = format!("{kind} {code}");
        }
        *by_kind.entry(kind).or_insert(0) += 1;
    }
    Ok(by_kind)
}

/// The `n` largest counts, largest first.
fn largest(counts: &BTreeMap<String, u64>, n: usize) -> String {
    let mut sorted: Vec<(&String, &u64)> = counts.iter().collect();
    sorted.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    sorted
        .iter()
        .take(n)
        .map(|(kind, count)| format!("{kind} {count}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The hub's requests in the audit log after `offset`, by verb; and its own leader Lease's.
fn audited_requests(path: &Path, offset: u64) -> anyhow::Result<(BTreeMap<String, u64>, u64)> {
    let mut by_verb = BTreeMap::new();
    let mut own_lease = 0;
    for event in audited_events(path, offset)? {
        let reference = &event["objectRef"];
        if reference["resource"] == "leases" && reference["namespace"] == "kube-system" {
            own_lease += 1;
            continue;
        }
        let verb = event["verb"].as_str().unwrap_or("?").to_string();
        *by_verb.entry(verb).or_insert(0) += 1;
    }
    Ok((by_verb, own_lease))
}

/// The hub's writes on the DNS path after `offset` (policies, records, their status, the
/// Gateways' status), by resource and subresource; refused ones (a 409 or 422) count too, as
/// they cost the API server as much.
fn audited_dns_writes(path: &Path, offset: u64) -> anyhow::Result<BTreeMap<String, u64>> {
    let mut writes = BTreeMap::new();
    for event in audited_events(path, offset)? {
        if !matches!(
            event["verb"].as_str(),
            Some("create" | "update" | "patch" | "delete")
        ) {
            continue;
        }
        let reference = &event["objectRef"];
        let resource = reference["resource"].as_str().unwrap_or_default();
        let dns_path = match resource {
            "dnspolicies" | "dnsrecords" => true,
            "gateways" => reference["subresource"] == "status",
            _ => false,
        };
        if !dns_path {
            continue;
        }
        let key = match reference["subresource"].as_str() {
            Some(sub) if !sub.is_empty() => format!("{resource}/{sub}"),
            _ => resource.to_string(),
        };
        *writes.entry(key).or_insert(0) += 1;
    }
    Ok(writes)
}

/// `meridian-hub run` in its own process.
struct HubProcess {
    child: Child,
    nameserver: SocketAddr,
    health: SocketAddr,
}

impl HubProcess {
    fn start(
        binary: &Path,
        kubeconfig: &Path,
        resync: Option<u64>,
        agent_delivery: &str,
        log: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let log = match log {
            Some(path) => Stdio::from(
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening {}", path.display()))?,
            ),
            None => Stdio::null(),
        };
        let mut command = Command::new("setpriv");
        if let Some(seconds) = resync {
            command.env("MERIDIAN_RESYNC_SECONDS", seconds.to_string());
        }
        let mut child = command
            .args(["--pdeathsig", "KILL", "--"])
            .arg(binary)
            .args(["run", "--kubeconfig"])
            .arg(kubeconfig)
            .args(["--dns-addr", "127.0.0.1:0", "--health-addr", "127.0.0.1:0"])
            .env("MERIDIAN_LOG", "warn")
            .env("MERIDIAN_AGENT_DELIVERY", agent_delivery)
            // The bench asks for every host at once from one address: response rate limiting
            // would drop most answers, and each drop costs the bench a timeout.
            .env("MERIDIAN_DNS_RATE_LIMIT", "0")
            // A port of its own for the live view (an environment variable, which a baseline
            // hub from before the view ignores, where a flag would stop it).
            .env("MERIDIAN_VIEW_ADDR", "127.0.0.1:0")
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .context("starting the hub")?;
        let mut lines = BufReader::new(child.stdout.take().context("the hub's output")?).lines();
        let mut address = |prefix: &str| -> anyhow::Result<SocketAddr> {
            let line = lines.next().context("the hub ended before it started")??;
            Ok(line
                .strip_prefix(prefix)
                .with_context(|| format!("expected {prefix:?}, the hub printed {line:?}"))?
                .trim()
                .parse()?)
        };
        let nameserver = address("nameserver:")?;
        let health = address("health:")?;
        // Keep reading what else it prints, so it never writes into a closed pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(HubProcess {
            child,
            nameserver,
            health,
        })
    }

    fn proc_file(&self, file: &str) -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(format!(
            "/proc/{}/{file}",
            self.child.id()
        ))?)
    }

    /// User and system CPU seconds so far.
    fn cpu_seconds(&self) -> anyhow::Result<f64> {
        let stat = self.proc_file("stat")?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .context("a stat line")?
            .1
            .split_whitespace()
            .collect();
        let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
        Ok(ticks / 100.0)
    }

    fn peak_rss_mib(&self) -> anyhow::Result<f64> {
        let status = self.proc_file("status")?;
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .context("VmHWM")?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()?;
        Ok(kib / 1024.0)
    }

    /// `meridian_reconciles_total` by controller, from the hub's metrics.
    async fn reconciles(&self) -> anyhow::Result<BTreeMap<String, f64>> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(self.health).await?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n")
            .await?;
        let mut body = String::new();
        stream.read_to_string(&mut body).await?;
        Ok(body
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("meridian_reconciles_total{controller=\"")?;
                let (controller, value) = rest.split_once("\"}")?;
                Some((controller.to_string(), value.trim().parse().ok()?))
            })
            .collect())
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
