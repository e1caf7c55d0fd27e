//! The `meridian-testbed` command line.

use clap::{Parser, Subcommand};

use crate::Fleet;

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
}

impl Cli {
    pub fn parse_and_run() -> anyhow::Result<()> {
        Self::parse().run()
    }

    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Demo => run_program(&self.log, demo()),
        }
    }
}

/// Runs a test-bed program (the demo, a benchmark) to its end: logs to standard error under
/// `log` (a `tracing` filter), on a current-thread runtime, because every child process is
/// spawned from this thread and its parent-death signal is tied to it.
pub fn run_program(
    log: &str,
    program: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(log)
        .with_writer(std::io::stderr)
        .init();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(program)
}

async fn demo() -> anyhow::Result<()> {
    use crate::example::{
        FRANCE, HOST, IRELAND, NAMESPACE, RunningExample, UNITED_STATES, dig, with_example_spokes,
    };
    use meridian_api::conditions::{ENFORCED, condition_status};
    use meridian_api::kuadrant::{DNSPolicy, DNSRecord};

    let started = std::time::Instant::now();
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
