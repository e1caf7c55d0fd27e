//! The Meridian spoke agent: the `meridian-agent` command line, gateway reports to the hub
//! ([`report`]), and, as issues land, health probes, router-shard scheduling and distributed
//! mode. `main` only
//! calls [`Cli::parse_and_run`].

pub mod distributed;
pub mod dns;
pub mod health;
pub mod probe;
pub mod probe_results;
pub mod report;
pub mod routes;
pub mod scheduler;

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};
use meridian_controllers::decide::probe_policy::{ProbeAddressPolicy, ProbePolicyArgs};
use meridian_controllers::zones::provider_args::ProviderArgs;

/// `meridian-agent`: the per-cluster side of Meridian.
#[derive(Debug, Parser)]
#[command(name = "meridian-agent", version, about)]
pub struct Cli {
    /// Log filter in `tracing` syntax, e.g. `info,meridian_agent=debug`.
    #[arg(long, env = "MERIDIAN_LOG", default_value = "info", global = true)]
    pub log: String,

    #[command(subcommand)]
    pub command: Command,
}

// Parsed once at start: the size of the larger variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent on a managed cluster.
    Run(RunArgs),
    /// List the owners publishing in a ManagedZone's zone (distributed mode), or purge what a
    /// vanished cluster left there.
    ZoneOwners(ZoneOwnersArgs),
}

#[derive(Debug, clap::Args)]
pub struct ZoneOwnersArgs {
    /// Kubeconfig of the cluster holding the ManagedZone; in-cluster when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Namespace of the ManagedZone.
    #[arg(long)]
    pub namespace: String,
    /// Name of the ManagedZone.
    #[arg(long)]
    pub zone: String,
    /// Remove this owner's records (a cluster ID) the way it would have withdrawn them.
    #[arg(long)]
    pub purge: Option<String>,

    #[command(flatten)]
    pub providers: ProviderArgs,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Name of this managed cluster on the hub (its cluster namespace there).
    #[arg(long, env = "MERIDIAN_CLUSTER_NAME")]
    pub cluster_name: String,

    /// Kubeconfig of the managed cluster the agent runs on; in-cluster when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// `hub`: report to the hub and let it publish. `distributed`: no hub; publish this
    /// cluster's branch of every local DNSPolicy into the shared provider zones.
    #[arg(long, env = "MERIDIAN_MODE", value_enum, default_value_t = Mode::Hub)]
    pub mode: Mode,

    /// Kubeconfig of the hub (hub mode).
    #[arg(long, env = "MERIDIAN_HUB_KUBECONFIG")]
    pub hub_kubeconfig: Option<PathBuf>,

    /// The hub's namespace, where it keeps what the agents read (the probe seal key, the
    /// probes' header copies, the zone keys' copy): the hub passes its own (hub mode); the
    /// default is `meridian-hub run`'s.
    #[arg(long, env = "MERIDIAN_HUB_NAMESPACE", default_value = "kube-system")]
    pub hub_namespace: String,

    /// Distributed mode: this cluster's attributes, as a ManagedCluster's labels would give
    /// them (`kuadrant.io/lb-attribute-geo-code=IE`); repeatable.
    #[arg(long = "cluster-label", value_parser = parse_label)]
    pub cluster_labels: Vec<(String, String)>,

    /// Distributed mode: watch DNSPolicies, Gateways, ManagedZones and Secrets in this namespace
    /// only (an agent granted a Role there rather than a ClusterRole); all when unset.
    #[arg(long, env = "MERIDIAN_WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,

    /// Distributed mode: seconds between looks at the shared zone (the shortest record TTL).
    #[arg(long, env = "MERIDIAN_REFRESH_SECONDS", default_value_t = 60)]
    pub refresh_seconds: u64,

    /// The agent's own namespace on its cluster, where it keeps the route scheduler's cursor
    /// (its pod's, which the manifests the hub writes pass down).
    #[arg(long, env = "MERIDIAN_AGENT_NAMESPACE", default_value = scheduler::AGENT_NAMESPACE)]
    pub agent_namespace: String,

    /// Seconds between reports when nothing changes (the hub's liveness signal).
    #[arg(long, env = "MERIDIAN_HEARTBEAT_SECONDS", default_value_t = 30)]
    pub heartbeat_seconds: u64,

    /// Local address health probes connect from (a node with several networks, or one
    /// vantage point per agent on one machine).
    #[arg(long, env = "MERIDIAN_PROBE_SOURCE_ADDRESS")]
    pub probe_source_address: Option<std::net::IpAddr>,

    /// How new OpenShift Routes are scheduled onto Router shards: `round-robin`,
    /// `label-match` (every shard that selects the route) or `least-loaded`; `off` leaves
    /// routes alone.
    #[arg(long, env = "MERIDIAN_ROUTE_SCHEDULING", default_value = "round-robin")]
    pub route_scheduling: String,

    /// Hub mode: also answer DNS for the hub's embedded zones on this UDP and TCP address,
    /// mirrored from the hub's DNSRecords (the hub grants the read when it installs agents
    /// with `--agent-dns-listen`).
    #[arg(long, env = "MERIDIAN_SERVE_DNS")]
    pub serve_dns: Option<std::net::SocketAddr>,

    /// With `--serve-dns`: name servers of zones whose ManagedZone names none, as the hub's
    /// `--ns` gives them (`NAME[=ADDRESS[,ADDRESS]]`, repeatable; space-separated in the
    /// environment).
    #[arg(
        long = "ns",
        env = "MERIDIAN_NAME_SERVERS",
        value_name = "NAME[=ADDRESS]",
        value_delimiter = ' ',
        value_parser = meridian_nameserver::ZoneNameServer::parse
    )]
    pub name_servers: Vec<meridian_nameserver::ZoneNameServer>,

    /// With `--serve-dns`: a MaxMind-format database for GEO answers.
    #[arg(long, env = "MERIDIAN_GEOIP")]
    pub geoip: Option<PathBuf>,

    /// With `--serve-dns`: UDP responses per second to one client prefix before response
    /// rate limiting (every second held-back one goes out truncated); 0 turns it off.
    #[arg(long, env = "MERIDIAN_DNS_RATE_LIMIT", default_value_t = meridian_nameserver::rate_limit::DEFAULT_RESPONSES_PER_SECOND)]
    pub dns_rate_limit: u32,

    #[command(flatten)]
    pub probes: ProbePolicyArgs,

    /// Distributed mode: the endpoints and identities the zones' Secrets may not choose.
    #[command(flatten)]
    pub providers: ProviderArgs,
}

/// The agent's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    Hub,
    Distributed,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    let (key, value) = text
        .split_once('=')
        .ok_or_else(|| format!("{text:?} is not KEY=VALUE"))?;
    Ok((key.to_string(), value.to_string()))
}

/// How the agent runs in hub mode.
#[derive(Debug, Clone)]
pub struct HubModeOptions {
    pub heartbeat: Duration,
    pub probe_source: Option<std::net::IpAddr>,
    /// A strategy name for the route scheduler, or `None` for no scheduling.
    pub route_scheduling: Option<String>,
    /// Answer DNS for the hub's embedded zones too.
    pub serve_dns: Option<dns::ServeDns>,
    /// The addresses probes may not reach.
    pub probe_policy: ProbeAddressPolicy,
    /// The hub's namespace, where the copies the agent reads are.
    pub hub_namespace: String,
    /// The agent's own namespace on its cluster.
    pub agent_namespace: String,
}

impl HubModeOptions {
    /// Heartbeat as given, probes from the default address, round-robin scheduling, the hub's
    /// namespace `meridian-hub run`'s default.
    pub fn with_heartbeat(heartbeat: Duration) -> Self {
        HubModeOptions {
            hub_namespace: "kube-system".into(),
            agent_namespace: scheduler::AGENT_NAMESPACE.into(),
            heartbeat,
            probe_source: None,
            route_scheduling: Some("round-robin".into()),
            serve_dns: None,
            probe_policy: ProbeAddressPolicy::default(),
        }
    }
}

async fn client(kubeconfig: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => kube::Config::infer().await?,
    };
    Ok(kube::Client::try_from(config)?)
}

async fn run_agent(args: RunArgs) -> anyhow::Result<()> {
    let spoke = client(args.kubeconfig.as_ref()).await?;
    let probe_policy = args.probes.policy().map_err(|e| anyhow::anyhow!(e))?;
    let providers = args.providers.settings().map_err(|e| anyhow::anyhow!(e))?;
    if args.mode == Mode::Distributed {
        let cluster_id = report::cluster_id(&spoke).await?;
        let local = meridian_controllers::LocalCluster {
            name: args.cluster_name.clone(),
            cluster_id,
            labels: args.cluster_labels.iter().cloned().collect(),
            namespace: args.watch_namespace.clone(),
        };
        tracing::info!(cluster = %local.name, owner = %local.cluster_id, "distributed mode");
        let refresh = Duration::from_secs(args.refresh_seconds.max(1));
        let probes = health::ZoneProbes::start(std::sync::Arc::new(probe::Prober::new(
            &[],
            args.probe_source_address,
            probe_policy,
        )));
        return tokio::select! {
            result = crate::distributed::run(spoke, local, refresh, Some(probes), providers) => result,
            _ = tokio::signal::ctrl_c() => Ok(()),
        };
    }
    let Some(hub_kubeconfig) = &args.hub_kubeconfig else {
        anyhow::bail!("hub mode needs --hub-kubeconfig (or use --mode distributed)");
    };
    let hub = client(Some(hub_kubeconfig)).await?;
    let options = HubModeOptions {
        heartbeat: Duration::from_secs(args.heartbeat_seconds.max(1)),
        probe_source: args.probe_source_address,
        route_scheduling: Some(args.route_scheduling.clone()).filter(|s| s != "off"),
        serve_dns: args.serve_dns.map(|listen| dns::ServeDns {
            listen,
            geoip: args.geoip.clone(),
            name_servers: args.name_servers.clone(),
            rate_limit: meridian_nameserver::RateLimit::per_second(args.dns_rate_limit),
        }),
        probe_policy,
        hub_namespace: args.hub_namespace.clone(),
        agent_namespace: args.agent_namespace.clone(),
    };
    tokio::select! {
        result = run_hub_mode(spoke, hub, args.cluster_name.clone(), options) => result,
        () = credentials_replaced(hub_kubeconfig.clone()) => {
            // A client reads its certificate once. OCM's registration renews the certificate
            // before it expires (and an installing hub replaces the token); exiting lets the
            // restart read the new one, well before the old one stops working.
            tracing::info!(path = %hub_kubeconfig.display(), "the hub credentials were replaced: exiting so that the restart reads them");
            Ok(())
        }
        _ = tokio::signal::ctrl_c() => Ok(()),
    }
}

/// How often the hub credentials' files are read for a change.
const CREDENTIALS_CHECK: Duration = Duration::from_secs(30);

/// Resolves once the hub kubeconfig, or a file beside it (a certificate and key the
/// kubeconfig names), holds something else than at the start. A file that cannot be read is
/// no change (a Secret volume swaps its files atomically; a read between is retried).
async fn credentials_replaced(kubeconfig: PathBuf) {
    let read = |path: &std::path::Path| -> Option<Vec<(std::ffi::OsString, Vec<u8>)>> {
        let dir = path.parent()?;
        let mut files: Vec<(std::ffi::OsString, Vec<u8>)> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(Result::ok)
            // A Secret volume keeps its data under dot-named directories; the visible names
            // are links to them.
            .filter(|entry| !entry.file_name().to_string_lossy().starts_with('.'))
            .filter_map(|entry| Some((entry.file_name(), std::fs::read(entry.path()).ok()?)))
            .collect();
        files.sort();
        Some(files)
    };
    let first = read(&kubeconfig);
    loop {
        tokio::time::sleep(CREDENTIALS_CHECK).await;
        if let (Some(first), Some(now)) = (&first, read(&kubeconfig))
            && *first != now
        {
            return;
        }
    }
}

/// `meridian-agent zone-owners`: the owners in the zone and their record counts (this
/// cluster marked), and `--purge`.
async fn zone_owners(args: ZoneOwnersArgs) -> anyhow::Result<()> {
    use kube::api::Api;
    use meridian_providers::Provider;
    let client = client(args.kubeconfig.as_ref()).await?;
    let zone =
        Api::<meridian_api::kuadrant::ManagedZone>::namespaced(client.clone(), &args.namespace)
            .get(&args.zone)
            .await?;
    let Some(secret_name) = zone
        .provider_secret_name()
        .map_err(|message| anyhow::anyhow!(message))?
    else {
        anyhow::bail!("ManagedZone {} has no dnsProviderSecretRef", args.zone);
    };
    let secret =
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &args.namespace)
            .get(secret_name)
            .await?;
    let domain = zone
        .spec
        .domain_name
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let provider = meridian_controllers::zones::zone_provider::ProviderCache::without_embedded()
        .with_settings(args.providers.settings().map_err(|e| anyhow::anyhow!(e))?)
        .for_secret(&secret, &domain)
        .await?;
    let zone_id = provider.zone_id(&domain, zone.spec.id.as_deref()).await?;
    let this_cluster = report::cluster_id(&client).await.ok();
    if let Some(owner) = &args.purge {
        let changes =
            meridian_controllers::zones::owners::purge(&provider, &zone_id, &domain, owner).await?;
        println!("purged {owner}: {changes} changes");
        return Ok(());
    }
    let records = provider.records(&zone_id).await?;
    for (owner, count) in meridian_controllers::zones::owners::owner_counts(&records) {
        let marker = if this_cluster.as_deref() == Some(owner.as_str()) {
            "  (this cluster)"
        } else {
            ""
        };
        println!("{owner}  {count} records{marker}");
    }
    Ok(())
}

/// The agent in hub mode: the report loop, and the health loop and route scheduler feeding
/// it, until one fails.
pub async fn run_hub_mode(
    spoke: kube::Client,
    hub: kube::Client,
    cluster_name: String,
    options: HubModeOptions,
) -> anyhow::Result<()> {
    let (probes, probe_reports) = tokio::sync::watch::channel(Vec::new());
    let (shards, shard_reports) = tokio::sync::watch::channel(Vec::new());
    let prober = std::sync::Arc::new(probe::Prober::new(
        &[],
        options.probe_source,
        options.probe_policy.clone(),
    ));
    let scheduling = async {
        match options.route_scheduling {
            Some(strategy) => {
                scheduler::run(
                    spoke.clone(),
                    strategy,
                    options.agent_namespace.clone(),
                    shards,
                )
                .await
            }
            // Keep the sender: a dropped one would read as "no shards" forever, which is true.
            None => std::future::pending().await,
        }
    };
    let (dns_hub, dns_copies) = (hub.clone(), options.hub_namespace.clone());
    let serving_dns = async move {
        match options.serve_dns {
            Some(config) => dns::serve(dns_hub, dns_copies, config).await,
            None => std::future::pending().await,
        }
    };
    tokio::select! {
        result = report::run(spoke.clone(), hub.clone(), cluster_name.clone(), options.heartbeat, shard_reports) => result,
        result = serving_dns => result,
        result = probe_results::run(hub.clone(), cluster_name.clone(), options.heartbeat, probe_reports) => result,
        result = health::run(hub, options.hub_namespace.clone(), prober, probes) => result,
        result = scheduling => result,
    }
}

impl Cli {
    /// Parses the process arguments and runs the chosen command.
    pub fn parse_and_run() -> anyhow::Result<()> {
        Self::parse().run()
    }

    pub fn run(self) -> anyhow::Result<()> {
        tracing_subscriber::fmt()
            .with_env_filter(self.log.as_str())
            // Colour only for a person at a terminal; a pod's log is read as text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init();
        match self.command {
            Command::ZoneOwners(args) => {
                let _ = rustls::crypto::ring::default_provider().install_default();
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()?
                    .block_on(zone_owners(args))
            }
            Command::Run(args) => {
                // kube brings rustls without a default crypto backend choice; pick ring.
                let _ = rustls::crypto::ring::default_provider().install_default();
                tokio::runtime::Builder::new_multi_thread()
                    .enable_all()
                    .build()?
                    .block_on(run_agent(args))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn cluster_name_is_required() {
        assert!(Cli::try_parse_from(["meridian-agent", "run"]).is_err());
        let cli = Cli::try_parse_from(["meridian-agent", "run", "--cluster-name", "spoke-1"])
            .expect("valid flags");
        let Command::Run(args) = cli.command else {
            panic!("run was asked for");
        };
        assert_eq!(args.cluster_name, "spoke-1");
        assert!(args.hub_kubeconfig.is_none());
        assert_eq!(args.mode, Mode::Hub);
        let cli = Cli::try_parse_from([
            "meridian-agent",
            "run",
            "--cluster-name",
            "spoke-1",
            "--mode",
            "distributed",
            "--cluster-label",
            "kuadrant.io/lb-attribute-geo-code=IE",
        ])
        .expect("valid flags");
        let Command::Run(args) = cli.command else {
            panic!("run was asked for");
        };
        assert_eq!(args.mode, Mode::Distributed);
        assert_eq!(
            args.cluster_labels,
            [(
                "kuadrant.io/lb-attribute-geo-code".to_string(),
                "IE".to_string()
            )]
        );
        assert!(
            Cli::try_parse_from([
                "meridian-agent",
                "run",
                "--cluster-name",
                "a",
                "--cluster-label",
                "nolabel"
            ])
            .is_err()
        );
    }
}
