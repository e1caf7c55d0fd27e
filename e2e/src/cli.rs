//! The `meridian-testbed` command line.

use std::time::Instant;

use clap::{Parser, Subcommand};

use crate::{ControlPlane, Fleet, TestBedAssets};

#[derive(Debug, Parser)]
#[command(
    name = "meridian-testbed",
    version,
    about = "Meridian's test bed of real control planes"
)]
pub struct Cli {
    /// Log filter in `tracing` syntax. kube's client logs every refused connection while the
    /// test bed polls a starting apiserver, so it is quiet unless asked for.
    #[arg(
        long,
        env = "MERIDIAN_LOG",
        default_value = "info,kube_client=off",
        global = true
    )]
    pub log: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run Meridian end to end: a hub and three spokes with OCM, the hub and the agents, the
    /// example DNSPolicy, answers from the embedded nameserver; stop on Ctrl-C.
    Demo,
    /// Time from a spoke Gateway's address change to the embedded nameserver answering with it.
    Convergence {
        /// How many address changes to time.
        #[arg(long, default_value_t = 25)]
        changes: usize,
    },
    /// Time the start of one control plane and of several at once, and one's resident memory.
    Measure {
        /// How many control planes to start at once in the second measurement.
        #[arg(long, default_value_t = 3)]
        at_once: usize,
        /// Repetitions of each measurement; the median is printed.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
}

impl Cli {
    pub fn parse_and_run() -> anyhow::Result<()> {
        Self::parse().run()
    }

    pub fn run(self) -> anyhow::Result<()> {
        tracing_subscriber::fmt()
            .with_env_filter(self.log.as_str())
            .with_writer(std::io::stderr)
            .init();
        // A current-thread runtime: every child process is spawned from this thread, which is the
        // one its parent-death signal is tied to.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        match self.command {
            Command::Demo => runtime.block_on(demo()),
            Command::Measure { at_once, rounds } => runtime.block_on(measure(at_once, rounds)),
            Command::Convergence { changes } => runtime.block_on(convergence(changes)),
        }
    }
}

async fn demo() -> anyhow::Result<()> {
    use crate::example::{
        FRANCE, HOST, IRELAND, NAMESPACE, RunningExample, UNITED_STATES, dig, with_example_spokes,
    };
    use meridian_api::conditions::{ENFORCED, condition_status};
    use meridian_api::kuadrant::{DNSPolicy, DNSRecord};

    let started = Instant::now();
    println!(
        "Starting a hub and three spokes (real kube-apiservers, OCM placement and work agents)..."
    );
    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    // Each spoke: the hub's ManifestWork creates the downstream Gateway; the demo plays the
    // gateway implementation (there is no Istio here) and gives it an address; the agent runs
    // with the hub credentials the hub delivered to the spoke.
    let example = RunningExample::start(&fleet, std::time::Duration::from_secs(10)).await?;
    let hub_client = fleet.hub.client();
    let policies: kube::Api<DNSPolicy> = kube::Api::namespaced(hub_client.clone(), NAMESPACE);
    crate::eventually("the DNSPolicy is Enforced", crate::DEFAULT_PATIENCE, || {
        let policies = policies.clone();
        async move {
            let policy = policies.get("prod-web").await?;
            Ok(policy
                .status
                .filter(|s| condition_status(&s.conditions, ENFORCED) == Some(true))
                .map(|_| ()))
        }
    })
    .await?;
    let record = kube::Api::<DNSRecord>::namespaced(hub_client.clone(), NAMESPACE)
        .get("prod-web-api")
        .await?;
    println!(
        "\nUp in {:.1} s. The DNSRecord prod-web-api the hub built from the policy:",
        started.elapsed().as_secs_f64()
    );
    for endpoint in record.status.map(|s| s.endpoints).unwrap_or_default() {
        let routing: Vec<String> = endpoint
            .provider_specific
            .iter()
            .map(|p| format!("{}={}", p.name, p.value))
            .collect();
        println!(
            "  {:<44} {:<5} {:<28} -> {}",
            endpoint.dns_name,
            serde_json::to_value(endpoint.record_type)?
                .as_str()
                .unwrap_or_default(),
            routing.join(","),
            endpoint.targets.join(", ")
        );
    }
    let nameserver = example.hub.nameserver;
    println!(
        "\nAnswers for {HOST} (spoke-1 IE 10.0.0.1, spoke-2 US 10.0.0.2, spoke-3 GEO-EU 10.0.0.3):"
    );
    for (place, subnet) in [
        ("Ireland", IRELAND),
        ("the United States", UNITED_STATES),
        ("France", FRANCE),
    ] {
        let answers = tokio::task::spawn_blocking(move || dig(nameserver, Some(subnet))).await?;
        println!(
            "  from {place:<18} (+subnet={subnet}): {}",
            answers.join(", ")
        );
    }
    println!("\nnameserver: {nameserver}");
    println!("KUBECONFIG={}", fleet.hub.kubeconfig_path().display());
    println!("kubectl: {}", fleet.assets.kubectl.display());
    println!(
        "\nTry it (in another shell, with the KUBECONFIG above):
  dig @{ip} -p {port} {HOST} +subnet={UNITED_STATES} +short
  kubectl label managedcluster spoke-2 kuadrant.io/lb-attribute-geo-code=IE --overwrite
  dig @{ip} -p {port} {HOST} +subnet={UNITED_STATES} +short    # now the IE group answers
  kubectl -n {NAMESPACE} patch dnspolicy prod-web --type merge -p '{{\"spec\":{{\"loadBalancing\":{{\"weighted\":{{\"defaultWeight\":10}}}}}}}}'
  kubectl -n {NAMESPACE} get dnsrecord prod-web-api -o yaml    # the weights changed
Press Ctrl-C to stop; everything is deleted on exit.",
        ip = nameserver.ip(),
        port = nameserver.port()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    println!("Stopping.");
    example.stop().await;
    drop(fleet);
    Ok(())
}

/// `make bench-convergence`: change spoke-1's Gateway address `changes` times; each time, poll
/// the embedded nameserver (as a client in Ireland, which spoke-1 serves) until it answers the
/// new address. Prints p50/p99 next to the peers' documented figures.
async fn convergence(changes: usize) -> anyhow::Result<()> {
    use crate::example::{IRELAND, RunningExample, dig, set_gateway_address, with_example_spokes};

    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    let example = RunningExample::start(&fleet, std::time::Duration::from_secs(30)).await?;
    let nameserver = example.hub.nameserver;
    let spoke = fleet.spoke("spoke-1").client();
    let answer = || async move {
        tokio::task::spawn_blocking(move || dig(nameserver, Some(IRELAND)))
            .await
            .unwrap_or_default()
    };
    crate::eventually("the first answer", crate::DEFAULT_PATIENCE, || async {
        Ok((answer().await == ["10.0.0.1"]).then_some(()))
    })
    .await?;
    let mut latencies = Vec::new();
    for change in 0..changes.max(1) {
        let ip = format!("10.1.{}.{}", change / 250, change % 250 + 1);
        let started = Instant::now();
        set_gateway_address(&spoke, &ip).await?;
        loop {
            if answer().await == [ip.clone()] {
                break;
            }
            if started.elapsed() > std::time::Duration::from_secs(120) {
                anyhow::bail!("the nameserver never answered {ip}");
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        latencies.push(started.elapsed().as_secs_f64());
    }
    latencies.sort_by(f64::total_cmp);
    let percentile = |p: f64| latencies[((latencies.len() as f64 - 1.0) * p).round() as usize];
    let (p50, p99) = (percentile(0.5), percentile(0.99));
    println!(
        "address change on a spoke → embedded nameserver answers it, {} changes:",
        latencies.len()
    );
    println!(
        "  p50 {:.3} s   p99 {:.3} s   max {:.3} s",
        p50,
        p99,
        latencies[latencies.len() - 1]
    );
    println!(
        "  goal p99 < 2 s: {}",
        if p99 < 2.0 { "met" } else { "NOT met" }
    );
    println!(
        "  peers (documented): k8gb 60–90 s → {:.0}× faster at p99; external-dns 60 s interval → {:.0}×",
        60.0 / p99,
        60.0 / p99
    );
    example.stop().await;
    Ok(())
}

async fn measure(at_once: usize, rounds: usize) -> anyhow::Result<()> {
    let assets = TestBedAssets::locate()?;
    let names: Vec<String> = (1..=at_once).map(|i| format!("measure-{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (mut one, mut many, mut memory) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds.max(1) {
        let started = Instant::now();
        let single = ControlPlane::start("measure", &assets).await?;
        one.push(started.elapsed().as_secs_f64());
        memory.push(single.resident_memory_bytes() as f64 / (1024.0 * 1024.0));
        drop(single);

        let started = Instant::now();
        let several = ControlPlane::start_many(&names, &assets).await?;
        many.push(started.elapsed().as_secs_f64());
        drop(several);
    }
    println!(
        "one control plane ready (etcd + kube-apiserver, /readyz ok): {:.2} s median",
        median(&mut one)
    );
    println!(
        "{at_once} control planes at once, all ready: {:.2} s median",
        median(&mut many)
    );
    println!(
        "resident memory of one control plane just after ready: {:.0} MiB median",
        median(&mut memory)
    );
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}
