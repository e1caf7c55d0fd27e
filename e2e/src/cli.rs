//! The `meridian-testbed` command line.

use std::time::Instant;

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
    /// Start a hub and spokes with every CRD installed and OCM running; stop on Ctrl-C.
    Demo {
        /// Names of the spoke clusters.
        #[arg(long, value_delimiter = ',', default_value = "spoke-1,spoke-2")]
        spokes: Vec<String>,
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
            Command::Demo { spokes } => runtime.block_on(demo(spokes)),
        }
    }
}

async fn demo(spokes: Vec<String>) -> anyhow::Result<()> {
    let started = Instant::now();
    let fleet = Fleet::builder().spokes(spokes).start().await?;
    println!(
        "Meridian test bed up in {:.1} s. Use a cluster with kubectl:",
        started.elapsed().as_secs_f64()
    );
    for cluster in fleet.clusters() {
        let role = if cluster.name() == fleet.hub.name() {
            "hub"
        } else {
            "spoke"
        };
        println!(
            "  {:<10} {role:<6} KUBECONFIG={}",
            cluster.name(),
            cluster.kubeconfig_path().display()
        );
    }
    println!("kubectl: {}", fleet.assets.kubectl.display());
    println!("Press Ctrl-C to stop; everything is deleted on exit.");
    tokio::signal::ctrl_c().await?;
    println!("Stopping the test bed.");
    drop(fleet);
    Ok(())
}
