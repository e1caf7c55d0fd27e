//! `make bench-testbed`: how long one control plane of the test bed takes to start, several at
//! once, and one's resident memory.

use std::time::Instant;

use clap::Parser;
use meridian_e2e::{ControlPlane, TestBedAssets};

#[derive(Debug, Parser)]
#[command(name = "bench-testbed", about)]
struct Args {
    /// How many control planes to start at once in the second measurement.
    #[arg(long, default_value_t = 3)]
    at_once: usize,
    /// Repetitions of each measurement; the median is printed.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Log filter in `tracing` syntax (kube's client is quiet unless asked for).
    #[arg(long, env = "MERIDIAN_LOG", default_value = "info,kube_client=off")]
    log: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    meridian_e2e::cli::run_program(&args.log, measure(args.at_once, args.rounds))
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
