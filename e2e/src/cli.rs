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
    /// Start a hub and spokes with every CRD installed and OCM running; stop on Ctrl-C.
    Demo {
        /// Names of the spoke clusters.
        #[arg(long, value_delimiter = ',', default_value = "spoke-1,spoke-2")]
        spokes: Vec<String>,
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
            Command::Demo { spokes } => runtime.block_on(demo(spokes)),
            Command::Measure { at_once, rounds } => runtime.block_on(measure(at_once, rounds)),
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
