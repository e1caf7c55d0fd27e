//! `make bench-probes`: one agent probing 5,000 leaves every 5 s. Prints the agent's CPU (cores)
//! and resident memory. The HTTP server the leaves point at runs in a child process, so its
//! work is not counted.

use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use meridian_agent::probe::{Leaf, ProbeRunner, ProbeSpec, Prober, Protocol};

const LEAVES: usize = 5_000;
const INTERVAL: Duration = Duration::from_secs(5);
const WARM_UP: Duration = Duration::from_secs(10);
const MEASURE: Duration = Duration::from_secs(30);

fn main() -> anyhow::Result<()> {
    if std::env::args().nth(1).as_deref() == Some("--serve") {
        return serve();
    }
    let mut server = std::process::Command::new(std::env::current_exe()?)
        .arg("--serve")
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    BufReader::new(server.stdout.take().expect("piped")).read_line(&mut line)?;
    let address: SocketAddr = line.trim().parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result = runtime.block_on(measure(address));
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// A minimal HTTP server answering 200 to everything; prints its address.
fn serve() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        println!("{}", listener.local_addr()?);
        std::io::stdout().flush()?;
        loop {
            let (mut stream, _) = listener.accept().await?;
            tokio::spawn(async move {
                let mut buffer = [0u8; 1024];
                let _ = stream.read(&mut buffer).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                    .await;
            });
        }
    })
}

/// CPU seconds (user + system) this process has used, from /proc.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks: f64 = fields.get(11..13).map_or(0.0, |f| {
        f.iter().filter_map(|v| v.parse::<f64>().ok()).sum()
    });
    ticks / 100.0
}

fn resident_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

async fn measure(address: SocketAddr) -> anyhow::Result<()> {
    // The benchmark's servers listen on loopback addresses.
    let prober = Arc::new(Prober::new(
        &[],
        None,
        meridian_controllers::decide::probe_policy::ProbeAddressPolicy::test_bed(),
    ));
    let leaves: std::collections::HashMap<usize, Leaf> = (0..LEAVES)
        .map(|i| {
            let leaf = Leaf {
                spec: ProbeSpec {
                    host: format!("app-{i}.example.test"),
                    address: address.ip().to_string(),
                    port: address.port(),
                    path: "/healthz".into(),
                    protocol: Protocol::Http,
                    expected: vec![200, 201],
                    headers: vec![],
                    allow_insecure_certificate: false,
                    timeout: Duration::from_secs(3),
                },
                interval: INTERVAL,
                failure_threshold: 3,
            };
            (i, leaf)
        })
        .collect();
    let (updates, mut received) = tokio::sync::mpsc::channel(4096);
    let mut runner = ProbeRunner::new(prober, updates);
    runner.sync(leaves);
    let count = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let healthy = Arc::new(std::sync::atomic::AtomicU64::new(0));
    {
        let (count, healthy) = (count.clone(), healthy.clone());
        tokio::spawn(async move {
            while let Some(update) = received.recv().await {
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if update.state.healthy == Some(true) {
                    healthy.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
    }
    tokio::time::sleep(WARM_UP).await;
    let (cpu_before, probes_before, started) = (
        cpu_seconds(),
        count.load(std::sync::atomic::Ordering::Relaxed),
        Instant::now(),
    );
    tokio::time::sleep(MEASURE).await;
    let elapsed = started.elapsed().as_secs_f64();
    let cores = (cpu_seconds() - cpu_before) / elapsed;
    let probes = count.load(std::sync::atomic::Ordering::Relaxed) - probes_before;
    println!(
        "{LEAVES} leaves every {INTERVAL:?}: {:.0} probes/s measured over {elapsed:.0} s",
        probes as f64 / elapsed
    );
    println!(
        "  CPU {cores:.2} cores (goal < 0.5)   resident memory {:.0} MiB (goal < 200)",
        resident_mib()
    );
    println!(
        "  healthy outcomes: {} of {}",
        healthy.load(std::sync::atomic::Ordering::Relaxed),
        count.load(std::sync::atomic::Ordering::Relaxed)
    );
    Ok(())
}
