//! The Meridian hub: the `meridian-hub` command line and what only a hub does. `run` starts the
//! shared DNSPolicy and DNSRecord controllers (`meridian_controllers`) beside the hub's own
//! ([`controller`]: gateway placement and agent install, probe header copies, ManagedZone
//! status, router-shard DNS), the embedded nameserver and the health endpoints, behind a Lease
//! ([`leader`]). `main` only calls [`Cli::parse_and_run`].

pub mod addon;
pub mod check_manifests_command;
pub mod controller;
pub mod convert;
pub mod explain_command;
pub mod gateway_bundle;
pub mod http;
pub mod http_auth;
pub mod insight;
pub mod leader;
pub mod nameserver_command;
pub mod open_files;
pub mod owner_id;
pub mod placement;
pub mod plan_command;
pub mod routers;
pub mod run_command;
pub mod secondaries_args;
pub mod uninstall_command;
pub mod view;

use std::path::PathBuf;

use clap::{Parser, Subcommand};

/// `meridian-hub`: multi-cluster DNS load balancing for OCM fleets, hub side.
#[derive(Debug, Parser)]
#[command(name = "meridian-hub", version, about)]
pub struct Cli {
    /// Log filter in `tracing` syntax, e.g. `info,meridian_hub=debug`.
    #[arg(long, env = "MERIDIAN_LOG", default_value = "info", global = true)]
    pub log: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the hub controllers against the hub cluster.
    Run(Box<run_command::RunArgs>),
    /// Print the records a policy would publish for a gateway on given clusters (offline).
    Plan(PlanArgs),
    /// Why a client gets its answer: the GEO branch, tier and weights, each leaf's health
    /// verdict with the clusters' votes, silent and draining clusters, held plans, conflicts
    /// (live, or offline from a `plan` scenario).
    Explain(explain_command::ExplainArgs),
    /// Serve the records of a plan with the embedded nameserver (for dig and benchmarks).
    Nameserver(nameserver_command::NameserverArgs),
    /// Print the router shards the agents report, their routes and their DNS.
    Routers(RoutersArgs),
    /// Remove the agents and what the hub made for them across the fleet (`helm uninstall`
    /// runs it first); the users' objects stay.
    Uninstall(uninstall_command::UninstallArgs),
    /// Check a directory of manifests written for multicluster-gateway-controller: say what
    /// Meridian would refuse, drop or read differently (offline).
    CheckManifests(check_manifests_command::CheckManifestsArgs),
    /// Convert Kuadrant `kuadrant.io/v1` DNSPolicies, from each cluster of a fleet, into
    /// Meridian's objects; print what changes (offline).
    Convert(convert::ConvertArgs),
}

#[derive(Debug, clap::Args)]
pub struct RoutersArgs {
    /// Kubeconfig of the hub cluster; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Seconds without a report after which a cluster's shards are left out.
    #[arg(long, default_value_t = 120)]
    pub cluster_heartbeat_timeout_seconds: u64,
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// Scenario file (gateway, policy, clusters; see docs/plan.md), or `-` for standard input.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,

    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "yaml")]
    pub output: plan_command::OutputFormat,
}

impl Cli {
    /// Parses the process arguments and runs the chosen command.
    pub fn parse_and_run() -> anyhow::Result<()> {
        Self::parse().run()
    }

    pub fn run(self) -> anyhow::Result<()> {
        tracing_subscriber::fmt()
            .with_env_filter(self.log.as_str())
            .with_writer(std::io::stderr)
            // Colour only for a person at a terminal; a pod's log is read as text.
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
        match self.command {
            Command::Plan(args) => plan_command::run(&args.file, args.output),
            Command::Nameserver(args) => nameserver_command::run(args),
            Command::Run(args) => run_command::run(*args),
            Command::Explain(args) => explain_command::run(&args),
            Command::Routers(args) => routers_command(&args),
            Command::Uninstall(args) => uninstall_command::run(args),
            Command::CheckManifests(args) => check_manifests_command::run(&args),
            Command::Convert(args) => convert::run(&args),
        }
    }
}

/// `meridian-hub routers`.
fn routers_command(args: &RoutersArgs) -> anyhow::Result<()> {
    use kube::api::{Api, ListParams};
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let config = match &args.kubeconfig {
            Some(path) => {
                let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
                kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
            }
            None => kube::Config::infer().await?,
        };
        let client = kube::Client::try_from(config)?;
        let reports: Vec<std::sync::Arc<meridian_api::meridian::ClusterReport>> =
            Api::<meridian_api::meridian::ClusterReport>::all(client.clone())
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .map(std::sync::Arc::new)
                .collect();
        let shards = controller::router_dns::fleet_shards(
            &client,
            &reports,
            std::time::Duration::from_secs(args.cluster_heartbeat_timeout_seconds),
            k8s_openapi::jiff::Timestamp::now(),
        )
        .await?;
        let published: std::collections::BTreeMap<String, bool> =
            Api::<meridian_api::kuadrant::DNSRecord>::all(client)
                .list(&ListParams::default().labels(routers::ROUTER_DNS_LABEL))
                .await?
                .items
                .into_iter()
                .map(|r| {
                    let ready = r.status.as_ref().is_some_and(|s| {
                        meridian_api::conditions::condition_status(
                            &s.conditions,
                            meridian_api::conditions::READY,
                        ) == Some(true)
                    });
                    (kube::ResourceExt::name_any(&r), ready)
                })
                .collect();
        print!("{}", routers::render(&shards, &published));
        Ok(())
    })
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
    fn run_flags_parse_and_default() {
        let cli = Cli::try_parse_from(["meridian-hub", "run", "--kubeconfig", "hub.kubeconfig"])
            .expect("valid flags");
        let Command::Run(args) = cli.command else {
            panic!("run parses as run")
        };
        assert_eq!(args.kubeconfig, Some(PathBuf::from("hub.kubeconfig")));
        assert_eq!(args.health_addr, "127.0.0.1:8080".parse().unwrap());
        assert_eq!(args.dns_addr, "127.0.0.1:5353".parse().unwrap());
        assert!(args.domain_grants.is_empty() && args.probes.probe_deny.is_empty());
        assert!(!args.probes.probe_allow_loopback);
    }

    #[test]
    fn tenancy_flags_parse() {
        let cli = Cli::try_parse_from([
            "meridian-hub",
            "run",
            "--domain-grant",
            "shop=shop.example.com,shop.example.org",
            "--domain-grant",
            "web=web.example.com",
            "--probe-deny",
            "10.244.0.0/16,10.96.0.0/12",
        ])
        .expect("valid flags");
        let Command::Run(args) = cli.command else {
            panic!("run parses as run")
        };
        let grants =
            meridian_controllers::decide::zone_claims::DomainGrants::parse(&args.domain_grants)
                .unwrap();
        assert!(grants.allows("shop", "api.shop.example.org"));
        assert!(grants.allows("web", "web.example.com"));
        assert!(!grants.allows("web", "shop.example.com"));
        let policy = args.probes.policy().unwrap();
        assert!(policy.refuses("10.96.0.1".parse().unwrap()).is_some());
        assert!(policy.refuses("10.250.2.1".parse().unwrap()).is_none());
    }

    #[test]
    fn unknown_flag_is_rejected() {
        assert!(Cli::try_parse_from(["meridian-hub", "run", "--no-such-flag"]).is_err());
    }
}
