//! The Meridian spoke agent: the `meridian-agent` command line and, as issues land, gateway
//! reports to the hub, health probes, router-shard scheduling and distributed mode. `main` only
//! calls [`Cli::parse_and_run`].

use std::path::PathBuf;

use clap::{Parser, Subcommand};

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

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the agent on a managed cluster.
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Name of this managed cluster on the hub (its cluster namespace there).
    #[arg(long, env = "MERIDIAN_CLUSTER_NAME")]
    pub cluster_name: String,

    /// Kubeconfig of the managed cluster the agent runs on; in-cluster when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Kubeconfig of the hub; without it the agent runs in distributed mode.
    #[arg(long, env = "MERIDIAN_HUB_KUBECONFIG")]
    pub hub_kubeconfig: Option<PathBuf>,
}

impl Cli {
    /// Parses the process arguments and runs the chosen command.
    pub fn parse_and_run() -> anyhow::Result<()> {
        Self::parse().run()
    }

    pub fn run(self) -> anyhow::Result<()> {
        tracing_subscriber::fmt()
            .with_env_filter(self.log.as_str())
            .init();
        match self.command {
            Command::Run(args) => {
                // Reporting, probing and scheduling are the subject of later issues; until they
                // land the command says so and exits cleanly.
                tracing::warn!(
                    cluster = %args.cluster_name,
                    mode = if args.hub_kubeconfig.is_some() { "hub" } else { "distributed" },
                    "no agent loops are built yet; exiting"
                );
                Ok(())
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
        let Command::Run(args) = cli.command;
        assert_eq!(args.cluster_name, "spoke-1");
        assert!(args.hub_kubeconfig.is_none());
    }
}
