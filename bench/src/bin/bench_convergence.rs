//! `make bench-convergence`: a spoke Gateway's address change until the embedded nameserver
//! answers it, on the test bed's hub and three spokes; p50/p99 over `--changes` changes.

use std::time::Instant;

use clap::Parser;
use meridian_e2e::Fleet;

#[derive(Debug, Parser)]
#[command(name = "bench-convergence", about)]
struct Args {
    /// How many address changes to time.
    #[arg(long, default_value_t = 25)]
    changes: usize,
    /// Log filter in `tracing` syntax (kube's client is quiet unless asked for).
    #[arg(long, env = "MERIDIAN_LOG", default_value = "info,kube_client=off")]
    log: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    meridian_e2e::cli::run_program(&args.log, convergence(args.changes))
}

/// `make bench-convergence`: change spoke-1's Gateway address `changes` times; each time, poll
/// the embedded nameserver (as a client in Ireland, which spoke-1 serves) until it answers the
/// new address. Prints p50/p99 next to the peers' documented figures.
async fn convergence(changes: usize) -> anyhow::Result<()> {
    use meridian_e2e::example::{
        IRELAND, RunningExample, dig, set_gateway_address, with_example_spokes,
    };

    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    let example = RunningExample::start(&fleet, std::time::Duration::from_secs(30)).await?;
    let nameserver = example.hub.nameserver;
    let spoke = fleet.spoke("spoke-1").client();
    let answer = || async move {
        tokio::task::spawn_blocking(move || dig(nameserver, Some(IRELAND)))
            .await
            .unwrap_or_default()
    };
    meridian_e2e::eventually(
        "the first answer",
        meridian_e2e::DEFAULT_PATIENCE,
        || async { Ok((answer().await == ["10.0.0.1"]).then_some(())) },
    )
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
