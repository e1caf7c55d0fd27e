//! `make bench-failover`: what users see when a cluster fails and recovers. The example fleet
//! (hub and three spokes, each spoke with a node) with a real gateway on every spoke (Traefik),
//! the demo app behind it, and client workers resolving the example host through Unbound and
//! requesting it every 100 ms. For each scenario: seconds from the fault until 99 % and 100 %
//! of requests succeed, failed requests, and where the time went (the probes' verdict, the
//! nameserver's answer, the resolver's cache); then the recovery and the traffic's return.
//! Then a gateway failing one probe in three must never be withdrawn. Last, the example switches
//! to priority tiers: the primary fails over to the second tier, fails back only after the
//! hold-down, and is drained and undrained, each without a failed request.
//!
//! The hub and the agents run in this process (as in `make demo-in-process`); the spokes'
//! gateways, apps and nodes, and the resolver, are real.

use std::time::Duration;

use clap::Parser;
use kube::Api;
use kube::api::ListParams;
use meridian_api::meridian::ProbeResults;
use meridian_e2e::example::HOST;
use meridian_e2e::traffic::{
    Clients, Outcome, Recovery, Sample, TrafficExample, back_to, health_checked_policy,
    mark_for_drain, publish_tiered_policy, recovery, request, resolve, set_fault, tiered_policy,
};
use meridian_e2e::{Fleet, eventually};

const INTERVAL_SECONDS: u64 = 5;
const FAILURE_THRESHOLD: u64 = 2;
const TTL_SECONDS: u64 = 5;
/// The goal: every failure fully recovered within this many seconds.
const GOAL_SECONDS: f64 = 16.0;
/// The cluster every scenario fails: the default GEO's (clients from nowhere in particular).
const FAILED: &str = "spoke-1";
const PERIOD: Duration = Duration::from_millis(100);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// How long a scenario may take to fail over or come back before the bench gives up.
const PATIENCE: Duration = Duration::from_secs(120);

#[derive(Debug, Parser)]
#[command(name = "bench-failover", about)]
struct Args {
    /// Client workers, each sending a request every 100 ms.
    #[arg(long, default_value_t = 10)]
    workers: usize,
    /// How long the flapping gateway is watched.
    #[arg(long, default_value_t = 60)]
    flap_seconds: u64,
    /// Log filter in `tracing` syntax (kube's client is quiet unless asked for).
    #[arg(long, env = "MERIDIAN_LOG", default_value = "warn,kube_client=off")]
    log: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let log = args.log.clone();
    meridian_e2e::cli::run_program(&log, failover(args))
}

#[derive(Debug, Clone, Copy)]
enum Scenario {
    AppUnavailable,
    AppHangs,
    GatewayStops,
    SpokeStops,
}

impl Scenario {
    fn describe(self) -> &'static str {
        match self {
            Scenario::AppUnavailable => "app answers 503",
            Scenario::AppHangs => "app hangs",
            Scenario::GatewayStops => "gateway stops (refused)",
            Scenario::SpokeStops => "whole spoke stops",
        }
    }

    async fn inject(self, traffic: &mut TrafficExample, fleet: &Fleet) -> anyhow::Result<()> {
        match self {
            Scenario::AppUnavailable => {
                set_fault(traffic.gateways.app_pod(FAILED), "unavailable").await?
            }
            Scenario::AppHangs => set_fault(traffic.gateways.app_pod(FAILED), "hang").await?,
            Scenario::GatewayStops => traffic.gateways.stop_gateway(FAILED),
            Scenario::SpokeStops => traffic.freeze_spoke(fleet, FAILED),
        }
        Ok(())
    }

    async fn recover(self, traffic: &mut TrafficExample, fleet: &Fleet) -> anyhow::Result<()> {
        match self {
            Scenario::AppUnavailable | Scenario::AppHangs => {
                set_fault(traffic.gateways.app_pod(FAILED), "none").await?
            }
            Scenario::GatewayStops => traffic.gateways.start_gateway(fleet, FAILED)?,
            Scenario::SpokeStops => traffic.thaw_spoke(fleet, FAILED),
        }
        Ok(())
    }
}

/// When, after a fault, each stage let go of the failed gateway (seconds).
#[derive(Debug, Default, Clone, Copy)]
struct Stages {
    /// A majority of the agents report its probe unhealthy.
    verdict: Option<f64>,
    /// The hub's nameserver stops answering its address.
    nameserver: Option<f64>,
    /// Unbound stops answering it (its cache drained).
    resolver: Option<f64>,
}

struct FailoverRow {
    scenario: Scenario,
    failover: Recovery,
    stages: Stages,
    failback: Recovery,
    back: (Option<f64>, Option<f64>),
}

async fn failover(args: Args) -> anyhow::Result<()> {
    let (fleet, app_image) = meridian_e2e::traffic::fleet_with_the_app().await?;
    let mut traffic = TrafficExample::start(
        &fleet,
        &app_image.reference,
        health_checked_policy(
            30,
            &format!("{INTERVAL_SECONDS}s"),
            FAILURE_THRESHOLD as u32,
            &format!("{TTL_SECONDS}s"),
        ),
        Duration::from_secs(10),
    )
    .await?;
    let resolver = traffic.resolver.address();
    let nameserver = traffic.example.hub.nameserver;
    let failed_address = traffic.gateways.gateway(FAILED).address();
    eventually("the first request is served", PATIENCE, || async {
        Ok(request(resolver, HOST, REQUEST_TIMEOUT)
            .await
            .succeeded()
            .then_some(()))
    })
    .await?;
    eprintln!(
        "{} client workers through Unbound, a request each per {} ms; failing {FAILED} ({failed_address})",
        args.workers,
        PERIOD.as_millis()
    );
    let clients = Clients::start(args.workers, resolver, HOST, PERIOD, REQUEST_TIMEOUT);
    let mut samples: Vec<Sample> = Vec::new();
    let mut rows = Vec::new();
    for scenario in [
        Scenario::AppUnavailable,
        Scenario::AppHangs,
        Scenario::GatewayStops,
        Scenario::SpokeStops,
    ] {
        wait_for_traffic(&clients, &mut samples, args.workers, |c| c == FAILED).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        samples.extend(clients.take());
        eprintln!("{}...", scenario.describe());
        let fault = clients.now();
        let watch = tokio::spawn(watch_stages(
            fleet.hub.client(),
            nameserver,
            resolver,
            failed_address.to_string(),
        ));
        scenario.inject(&mut traffic, &fleet).await?;
        wait_for_traffic(&clients, &mut samples, args.workers, |c| c != FAILED).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        samples.extend(clients.take());
        let stages = watch.await?;
        eprintln!("  recovered; undoing it...");
        let recovered = clients.now();
        scenario.recover(&mut traffic, &fleet).await?;
        wait_for_traffic(&clients, &mut samples, args.workers, |c| c == FAILED).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        samples.extend(clients.take());
        let failback = recovery(&samples, recovered);
        let back = back_to(&samples, recovered, FAILED);
        rows.push(FailoverRow {
            scenario,
            failover: recovery_between(&samples, fault, recovered),
            stages,
            failback,
            back,
        });
    }

    eprintln!("flapping for {} s...", args.flap_seconds);
    let flap_start = clients.now();
    set_fault(traffic.gateways.app_pod(FAILED), "flap").await?;
    let mut answers = 0usize;
    let mut withdrawn = 0usize;
    while clients.now() - flap_start < Duration::from_secs(args.flap_seconds) {
        if let Ok(addresses) = resolve(nameserver, HOST, REQUEST_TIMEOUT).await {
            answers += 1;
            if !addresses.contains(&failed_address) {
                withdrawn += 1;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    set_fault(traffic.gateways.app_pod(FAILED), "none").await?;
    samples.extend(clients.take());
    let flap = recovery(&samples, flap_start);

    let tiers = tiers(&traffic, &fleet, &clients, &mut samples, args.workers).await?;

    print_table(&args, &rows, &flap, answers, withdrawn);
    print_tiers(&tiers);
    drop(clients);
    traffic.stop().await;
    Ok(())
}

/// The tier that takes the failed primary's traffic.
const SECOND_TIER: &str = "spoke-2";

/// What priority tiers do for users: failover to the second tier, failback after the
/// hold-down, a drain and its return.
struct TierRows {
    failover: Recovery,
    failback: Recovery,
    /// Seconds after the primary recovered until its first and last worker were served by it.
    back: (Option<f64>, Option<f64>),
    drain: Recovery,
    /// Seconds from the drain mark until every worker was served by the second tier.
    drained_after: f64,
    undrain: Recovery,
    undrained_after: f64,
}

/// The example policy switched to tiers (IE, then US, then the rest; the default hold-down),
/// then the primary fails and recovers, then it is drained and undrained.
async fn tiers(
    traffic: &TrafficExample,
    fleet: &Fleet,
    clients: &Clients,
    samples: &mut Vec<Sample>,
    workers: usize,
) -> anyhow::Result<TierRows> {
    eprintln!("priority tiers: {FAILED} first, then {SECOND_TIER}, then the rest...");
    let hub = fleet.hub.client();
    publish_tiered_policy(
        &hub,
        tiered_policy(
            &format!("{INTERVAL_SECONDS}s"),
            FAILURE_THRESHOLD as u32,
            &format!("{TTL_SECONDS}s"),
            &format!("{}s", meridian_dns::tiers::DEFAULT_HOLD_DOWN),
        ),
    )
    .await?;
    wait_for_traffic(clients, samples, workers, |c| c == FAILED).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let fault = clients.now();
    set_fault(traffic.gateways.app_pod(FAILED), "unavailable").await?;
    wait_for_traffic(clients, samples, workers, |c| c == SECOND_TIER).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    samples.extend(clients.take());
    let recovered = clients.now();
    let failover = recovery_between(samples, fault, recovered);
    eprintln!(
        "  failed over; recovering (the hold-down is {} s)...",
        meridian_dns::tiers::DEFAULT_HOLD_DOWN
    );
    set_fault(traffic.gateways.app_pod(FAILED), "none").await?;
    wait_for_traffic(clients, samples, workers, |c| c == FAILED).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    samples.extend(clients.take());
    let failback = recovery(samples, recovered);
    let back = back_to(samples, recovered, FAILED);

    eprintln!("  draining {FAILED}...");
    let drained = clients.now();
    mark_for_drain(&hub, FAILED, true).await?;
    wait_for_traffic(clients, samples, workers, |c| c == SECOND_TIER).await?;
    let drained_after = (clients.now() - drained).as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    samples.extend(clients.take());
    let returned = clients.now();
    let drain = recovery_between(samples, drained, returned);
    mark_for_drain(&hub, FAILED, false).await?;
    wait_for_traffic(clients, samples, workers, |c| c == FAILED).await?;
    let undrained_after = (clients.now() - returned).as_secs_f64();
    tokio::time::sleep(Duration::from_secs(3)).await;
    samples.extend(clients.take());
    let undrain = recovery(samples, returned);
    Ok(TierRows {
        failover,
        failback,
        back,
        drain,
        drained_after,
        undrain,
        undrained_after,
    })
}

fn print_tiers(tiers: &TierRows) {
    let hold_down = meridian_dns::tiers::DEFAULT_HOLD_DOWN;
    println!(
        "
Priority tiers ({FAILED} first, then {SECOND_TIER}, then the rest; hold-down {hold_down} s; TTL {TTL_SECONDS} s)"
    );
    println!(
        "{:<34} {:>8} {:>7} {:>9} {:>28} {:>6}",
        "event", "requests", "failed", "100 % ok", "traffic", "goal"
    );
    let served = |r: &Recovery| {
        r.served_by
            .iter()
            .map(|(cluster, n)| format!("{cluster} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let third_tier = tiers
        .failover
        .served_by
        .keys()
        .any(|c| c != FAILED && c != SECOND_TIER);
    println!(
        "{:<34} {:>8} {:>7} {:>8}s {:>28} {:>6}",
        format!("{FAILED} answers 503"),
        tiers.failover.requests,
        tiers.failover.failed,
        seconds(tiers.failover.until_100),
        served(&tiers.failover),
        if tiers.failover.until_100.is_some_and(|s| s <= GOAL_SECONDS) && !third_tier {
            "met"
        } else {
            "NOT met"
        }
    );
    println!(
        "{:<34} {:>8} {:>7} {:>9} {:>28} {:>6}",
        format!("{FAILED} recovers: first back {}s", seconds(tiers.back.0)),
        tiers.failback.requests,
        tiers.failback.failed,
        "-",
        served(&tiers.failback),
        if tiers.failback.failed == 0 && tiers.back.0.is_some_and(|s| s >= hold_down as f64) {
            "met"
        } else {
            "NOT met"
        }
    );
    for (what, recovery, moved) in [
        (
            format!("{FAILED} drained"),
            &tiers.drain,
            tiers.drained_after,
        ),
        (
            format!("{FAILED} undrained"),
            &tiers.undrain,
            tiers.undrained_after,
        ),
    ] {
        println!(
            "{:<34} {:>8} {:>7} {:>8}s {:>28} {:>6}",
            format!("{what}: moved in {moved:.1}s"),
            recovery.requests,
            recovery.failed,
            seconds(recovery.until_100),
            served(recovery),
            if recovery.failed == 0 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    println!(
        "goals: failover within {GOAL_SECONDS:.0} s and to the second tier only; failback no sooner than the hold-down and without a failed request; a drain and its return without a failed request."
    );
}

/// The failover's figures from the samples between the fault and the recovery only.
fn recovery_between(samples: &[Sample], fault: Duration, recovered: Duration) -> Recovery {
    let before: Vec<Sample> = samples
        .iter()
        .filter(|s| s.at < recovered)
        .cloned()
        .collect();
    recovery(&before, fault)
}

/// Waits until the last requests of every worker were served by clusters `wanted` accepts.
async fn wait_for_traffic(
    clients: &Clients,
    samples: &mut Vec<Sample>,
    workers: usize,
    wanted: impl Fn(&str) -> bool,
) -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    loop {
        samples.extend(clients.take());
        let window = 3 * workers;
        let settled = samples.len() > window
            && samples
                .iter()
                .rev()
                .take(window)
                .all(|s| matches!(&s.outcome, Outcome::Served(cluster) if wanted(cluster)));
        if settled {
            return Ok(());
        }
        if started.elapsed() > PATIENCE {
            let last: Vec<&Outcome> = samples
                .iter()
                .rev()
                .take(window)
                .map(|s| &s.outcome)
                .collect();
            anyhow::bail!("traffic did not settle in {PATIENCE:?}; last outcomes: {last:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Polls every 100 ms until the nameserver and the resolver both stop answering `address`,
/// noting when a majority of the agents first report a probe unhealthy.
async fn watch_stages(
    hub: kube::Client,
    nameserver: std::net::SocketAddr,
    resolver: std::net::SocketAddr,
    address: String,
) -> Stages {
    let started = std::time::Instant::now();
    let results: Api<ProbeResults> = Api::all(hub);
    let mut stages = Stages::default();
    let answers_without = |addresses: Vec<std::net::Ipv4Addr>| {
        !addresses.is_empty() && !addresses.iter().any(|a| a.to_string() == address)
    };
    while started.elapsed() < PATIENCE {
        let now = started.elapsed().as_secs_f64();
        if stages.verdict.is_none()
            && let Ok(list) = results.list(&ListParams::default()).await
        {
            let unhealthy = list
                .items
                .iter()
                .filter(|r| r.spec.probes.iter().any(|p| !p.healthy))
                .count();
            if unhealthy >= 2 {
                stages.verdict = Some(now);
            }
        }
        if stages.nameserver.is_none()
            && let Ok(addresses) = resolve(nameserver, HOST, REQUEST_TIMEOUT).await
            && answers_without(addresses)
        {
            stages.nameserver = Some(now);
        }
        if stages.resolver.is_none()
            && let Ok(addresses) = resolve(resolver, HOST, REQUEST_TIMEOUT).await
            && answers_without(addresses)
        {
            stages.resolver = Some(now);
        }
        if stages.verdict.is_some() && stages.nameserver.is_some() && stages.resolver.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stages
}

fn seconds(value: Option<f64>) -> String {
    value.map_or_else(|| "never".to_string(), |s| format!("{s:.1}"))
}

fn print_table(
    args: &Args,
    rows: &[FailoverRow],
    flap: &Recovery,
    answers: usize,
    withdrawn: usize,
) {
    let budget = (INTERVAL_SECONDS * FAILURE_THRESHOLD + TTL_SECONDS) as f64;
    println!(
        "\nFailover through real gateways (Traefik) and a real resolver (Unbound): {} clients, a request each per {} ms, {} s timeout",
        args.workers,
        PERIOD.as_millis(),
        REQUEST_TIMEOUT.as_secs()
    );
    println!(
        "health check every {INTERVAL_SECONDS} s, {FAILURE_THRESHOLD} failures; TTL {TTL_SECONDS} s; budget interval × threshold + TTL = {budget:.0} s; goal ≤ {GOAL_SECONDS:.0} s\n"
    );
    println!(
        "{:<26} {:>8} {:>7} {:>8} {:>9} {:>8} {:>11} {:>9} {:>6}",
        "failure",
        "requests",
        "failed",
        "99 % ok",
        "100 % ok",
        "verdict",
        "nameserver",
        "resolver",
        "goal"
    );
    for row in rows {
        let until_100 = row.failover.until_100;
        println!(
            "{:<26} {:>8} {:>7} {:>7}s {:>8}s {:>7}s {:>10}s {:>8}s {:>6}",
            row.scenario.describe(),
            row.failover.requests,
            row.failover.failed,
            seconds(row.failover.until_99),
            seconds(until_100),
            seconds(row.stages.verdict),
            seconds(row.stages.nameserver),
            seconds(row.stages.resolver),
            if until_100.is_some_and(|s| s <= GOAL_SECONDS) {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    println!(
        "\n{:<26} {:>8} {:>7} {:>11} {:>10} {:>6}",
        "recovery (failback)", "requests", "failed", "first back", "all back", "goal"
    );
    for row in rows {
        println!(
            "{:<26} {:>8} {:>7} {:>10}s {:>9}s {:>6}",
            format!("after {}", row.scenario.describe()),
            row.failback.requests,
            row.failback.failed,
            seconds(row.back.0),
            seconds(row.back.1),
            if row.failback.failed == 0 {
                "met"
            } else {
                "NOT met"
            }
        );
    }
    println!(
        "\nflap (every third probe of each prober fails) for {} s: the nameserver withdrew the gateway in {withdrawn} of {answers} answers; {} of {} requests failed; goal no withdrawal: {}",
        args.flap_seconds,
        flap.failed,
        flap.requests,
        if withdrawn == 0 { "met" } else { "NOT met" }
    );
    println!(
        "\nverdict: a majority of the agents report the probe unhealthy; nameserver: the hub's nameserver no longer answers the gateway; resolver: nor does Unbound (its cache drained)."
    );
    println!(
        "Anchors, from a failure until users are served again: k8gb 157 s measured once (PR #80), about 60–90 s documented; Route53 at its defaults detects in about 90 s (30 s × 3), Keycloak's benchmark measured 57–72 s end to end; Azure Traffic Manager's documented example 70 s; Kuadrant's defaults (5 min interval, more than 5 failures) about 30 minutes of detection alone."
    );
}
