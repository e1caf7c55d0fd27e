//! Fenced writes on a real API server: the leading hub replica runs as its own process, is
//! paused (SIGSTOP) past its lease while a standby takes over and changes a record, and is
//! resumed. Its watch then hands it the change, so it goes to publish it (a provider batch and
//! a status write): the fence refuses both, and nothing it does lands after the new leader's.
//! Then it stands by, answering from zones mirrored from the new leader's records.
//!
//! The same helper, started with a limit of 256 open files, is flooded with more idle
//! connections than it may open, on its HTTP and DNS ports at once: the kubelet's `/livez`
//! and DNS over UDP and TCP are still answered.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use kube::api::Api;
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_e2e::example::{apply, dig_host, dig_host_async};
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, ManagedProcess, eventually};
use meridian_hub::run_command::{RunArgs, RunningHub};
use meridian_testkit::fixtures;
use serde_json::json;

const NAMESPACE: &str = "dns";
const HOST: &str = "api.fenced.example";
/// The hub helper's kubeconfig.
const KUBECONFIG_ENV: &str = "MERIDIAN_E2E_HUB_KUBECONFIG";
/// Short, so the standby takes over quickly.
const LEASE_SECONDS: u64 = 3;

fn hub_args(kubeconfig: &Path) -> RunArgs {
    RunArgs {
        lease_seconds: LEASE_SECONDS,
        ..RunArgs::local(kubeconfig)
    }
}

/// The hub helper: one hub replica as its own process, printing its addresses, serving until
/// killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the fencing test as the leading replica's own process"]
async fn hub_process() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let _ = tracing_subscriber::fmt()
        .with_env_filter("warn,meridian_hub=info,meridian_controllers=info")
        .try_init();
    let kubeconfig = std::env::var(KUBECONFIG_ENV).expect("started by the fencing test");
    let hub = RunningHub::start(&hub_args(Path::new(&kubeconfig)))
        .await
        .expect("the hub starts");
    println!("nameserver: {}", hub.nameserver);
    println!("health: {}", hub.health);
    std::future::pending::<()>().await;
}

/// A plain HTTP/1.1 GET; the status line and body.
fn http_get(address: SocketAddr, path: &str) -> String {
    use std::io::{Read, Write};
    let Ok(mut stream) = std::net::TcpStream::connect(address) else {
        return String::new();
    };
    let _ = write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: hub\r\nConnection: close\r\n\r\n"
    );
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
}

/// The value of an unlabelled-or-labelled metric line starting with `prefix`, 0 when absent.
fn metric(metrics: &str, prefix: &str) -> u64 {
    metrics
        .lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

/// An address the helper printed to its log (`label: address`).
async fn printed_address(process: &ManagedProcess, label: &str) -> Result<SocketAddr, Error> {
    let prefix = format!("{label}: ");
    eventually(
        &format!("the hub prints its {label}"),
        DEFAULT_PATIENCE,
        || {
            let log = std::fs::read_to_string(process.log_path()).unwrap_or_default();
            let found = log
                .lines()
                .find_map(|line| line.strip_prefix(&prefix)?.trim().parse().ok());
            async move { Ok(found) }
        },
    )
    .await
}

fn signal(process: &ManagedProcess, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([format!("-{signal}"), process.pid().to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {}", process.pid());
}

async fn record_endpoints(records: &Api<DNSRecord>, address: &str) -> Result<(), Error> {
    let endpoints =
        json!([{ "dnsName": HOST, "recordType": "A", "recordTTL": 60, "targets": [address] }]);
    apply(
        records,
        fixtures::dns_record(NAMESPACE, "api", "zone")
            .root_host(HOST)
            .endpoints(endpoints)
            .json(),
    )
    .await?;
    Ok(())
}

/// Waits until the record's status says its current generation is published.
async fn published(records: &Api<DNSRecord>) -> Result<DNSRecord, Error> {
    eventually(
        "the record's generation is published",
        DEFAULT_PATIENCE,
        || {
            let records = records.clone();
            async move {
                let record = records.get("api").await?;
                let done = record.status.as_ref().is_some_and(|s| {
                    s.observed_generation == record.metadata.generation
                        && meridian_api::conditions::condition_status(
                            &s.conditions,
                            meridian_api::conditions::READY,
                        ) == Some(true)
                });
                Ok(done.then_some(record))
            }
        },
    )
    .await
}

/// A hub cluster with the test's zone and its record at 10.0.0.1.
async fn fleet_with_a_record() -> Result<(Fleet, Api<DNSRecord>), Error> {
    let fleet = Fleet::builder().without_ocm().start().await?;
    let hub = fleet.hub.client();
    meridian_e2e::ensure_namespace(&hub, NAMESPACE).await?;
    apply(
        &Api::<ManagedZone>::namespaced(hub.clone(), NAMESPACE),
        fixtures::managed_zone(NAMESPACE, "zone", "fenced.example").json(),
    )
    .await?;
    let records: Api<DNSRecord> = Api::namespaced(hub, NAMESPACE);
    record_endpoints(&records, "10.0.0.1").await?;
    Ok((fleet, records))
}

/// The hub helper (`hub_process`) as its own process against `fleet`'s hub, run through
/// `wrapper` (a command that runs the rest, such as `prlimit`; none when empty).
fn spawn_hub(
    fleet: &Fleet,
    name: &str,
    wrapper: &[String],
    log: &Path,
) -> Result<ManagedProcess, Error> {
    let kubeconfig = fleet.hub.kubeconfig_path().display().to_string();
    let mut args = vec![format!("{KUBECONFIG_ENV}={kubeconfig}")];
    args.extend(wrapper.iter().cloned());
    args.extend([
        std::env::current_exe().unwrap().display().to_string(),
        "--ignored".into(),
        "--exact".into(),
        "hub_process".into(),
        "--nocapture".into(),
    ]);
    ManagedProcess::spawn(name, Path::new("env"), &args, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_paused_past_its_lease_writes_nothing_after_its_successor() -> Result<(), Error> {
    let (fleet, records) = fleet_with_a_record().await?;

    // The first replica, alone, leads and publishes.
    let dir = tempfile::tempdir().unwrap();
    let old = spawn_hub(
        &fleet,
        "hub-old-leader",
        &[],
        &dir.path().join("old-leader.log"),
    )?;
    let old_dns = printed_address(&old, "nameserver").await?;
    let old_health = printed_address(&old, "health").await?;
    published(&records).await?;
    eventually("the old leader answers", DEFAULT_PATIENCE, || async move {
        let seen = dig_host_async(old_dns, HOST, None).await;
        Ok((seen == ["10.0.0.1"]).then_some(()))
    })
    .await?;
    assert!(http_get(old_health, "/leaderz").starts_with("HTTP/1.1 200"));

    // A standby, in this process, mirrors and waits.
    let standby = RunningHub::start(&hub_args(fleet.hub.kubeconfig_path()))
        .await
        .expect("the standby starts");
    eventually("the standby is ready", DEFAULT_PATIENCE, || async {
        Ok(standby.is_ready().then_some(()))
    })
    .await?;
    let batches_before = metric(
        &http_get(old_health, "/metrics"),
        "meridian_provider_calls_total{provider=\"embedded\",outcome=\"ok\"}",
    );

    // Paused past its lease: the standby takes over and publishes a change.
    signal(&old, "STOP");
    let paused = std::time::Instant::now();
    eventually("the standby leads", DEFAULT_PATIENCE, || async {
        Ok(standby.is_leading().then_some(()))
    })
    .await?;
    record_endpoints(&records, "10.0.0.2").await?;
    let by_new_leader = published(&records).await?;
    let standby_dns = standby.nameserver;
    eventually(
        "the new leader answers the change",
        DEFAULT_PATIENCE,
        || async move {
            let seen = dig_host_async(standby_dns, HOST, None).await;
            Ok((seen == ["10.0.0.2"]).then_some(()))
        },
    )
    .await?;
    eprintln!(
        "the new leader published generation {:?} {:.1} s after the old one was paused",
        by_new_leader.metadata.generation,
        paused.elapsed().as_secs_f64()
    );

    // Resumed: its watch hands it the change, and its Lease renewal finds another holder.
    signal(&old, "CONT");
    eventually(
        "the old leader stands down",
        DEFAULT_PATIENCE,
        || async move {
            let standing_by = http_get(old_health, "/leaderz").starts_with("HTTP/1.1 503");
            Ok(standing_by.then_some(()))
        },
    )
    .await?;
    // Whatever it had in flight has ended: every pass it began, of every controller.
    eventually(
        "the old leader's passes have ended",
        DEFAULT_PATIENCE,
        || async move {
            let metrics = http_get(old_health, "/metrics");
            let in_flight: Vec<&str> = ["dnsrecord", "dnspolicy"]
                .into_iter()
                .filter(|controller| {
                    let begun = format!("meridian_reconciles_total{{controller=\"{controller}\"}}");
                    let ended = format!(
                        "meridian_reconcile_duration_seconds_count{{controller=\"{controller}\"}}"
                    );
                    metric(&metrics, &begun) != metric(&metrics, &ended)
                })
                .collect();
            Ok(in_flight.is_empty().then_some(()))
        },
    )
    .await?;
    let log = std::fs::read_to_string(old.log_path()).unwrap_or_default();
    let refused = log.lines().filter(|l| l.contains("write refused")).count()
        + log.lines().filter(|l| l.contains("fenced:")).count();
    let metrics = http_get(old_health, "/metrics");
    let batches_after = metric(
        &metrics,
        "meridian_provider_calls_total{provider=\"embedded\",outcome=\"ok\"}",
    );
    let fenced = metric(
        &metrics,
        "meridian_reconcile_errors_total{controller=\"dnsrecord\",reason=\"fenced\"}",
    );
    eprintln!(
        "after resuming, the old leader: {batches_before} → {batches_after} provider batches, {fenced} reconciles fenced, {refused} log lines of refused writes"
    );
    assert_eq!(
        batches_after, batches_before,
        "the old leader applied no provider batch after resuming"
    );
    let now = records.get("api").await?;
    assert_eq!(
        now.metadata.resource_version, by_new_leader.metadata.resource_version,
        "nothing was written to the record after the new leader's write"
    );
    assert_eq!(
        now.status.as_ref().map(|s| s.endpoints.clone()),
        by_new_leader.status.as_ref().map(|s| s.endpoints.clone())
    );
    // It stands by now, answering DNS from its zones, which mirror the new leader's records.
    eventually(
        "the old leader, standing by, answers the change",
        DEFAULT_PATIENCE,
        || async move {
            let seen = dig_host_async(old_dns, HOST, None).await;
            Ok((seen == ["10.0.0.2"]).then_some(()))
        },
    )
    .await?;
    assert!(http_get(old_health, "/readyz").starts_with("HTTP/1.1 200"));
    standby.stop().await;
    drop(old);
    Ok(())
}

/// `dig +tcp` for the test's host: the addresses answered.
fn dig_tcp(server: SocketAddr) -> Vec<String> {
    let output = meridian_e2e::example::dig_at(server, &["+tcp"])
        .args([HOST, "A"])
        .output()
        .expect("dig runs");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// `count` idle TCP connections to `target` from the loopback address `from`.
async fn idle_connections(
    from: &str,
    target: SocketAddr,
    count: usize,
) -> Vec<tokio::net::TcpStream> {
    let mut idle = Vec::with_capacity(count);
    for _ in 0..count {
        let socket = tokio::net::TcpSocket::new_v4().expect("a socket");
        socket
            .bind(format!("{from}:0").parse().unwrap())
            .expect("a loopback source");
        // Past the backlog a connect waits: those that never connect hold nothing anyway.
        if let Ok(Ok(stream)) =
            tokio::time::timeout(Duration::from_secs(2), socket.connect(target)).await
        {
            idle.push(stream);
        }
    }
    idle
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_at_its_file_limit_answers_livez_and_dns_through_a_flood_of_idle_connections()
-> Result<(), Error> {
    let (fleet, records) = fleet_with_a_record().await?;
    const OPEN_FILES: usize = 256;
    let dir = tempfile::tempdir().unwrap();
    let limit = [
        "prlimit".to_string(),
        format!("--nofile={OPEN_FILES}:{OPEN_FILES}"),
        "--".into(),
    ];
    let mut hub_process = spawn_hub(
        &fleet,
        "hub-at-its-file-limit",
        &limit,
        &dir.path().join("hub.log"),
    )?;
    let dns = printed_address(&hub_process, "nameserver").await?;
    let health = printed_address(&hub_process, "health").await?;
    let limits = std::fs::read_to_string(format!("/proc/{}/limits", hub_process.pid()))
        .expect("the hub's limits");
    assert!(
        limits
            .lines()
            .any(|l| l.starts_with("Max open files") && l.contains(&OPEN_FILES.to_string())),
        "{limits}"
    );
    published(&records).await?;
    eventually("the hub answers", DEFAULT_PATIENCE, || async move {
        let seen = dig_host_async(dns, HOST, None).await;
        Ok((seen == ["10.0.0.1"]).then_some(()))
    })
    .await?;

    // One pod opens three times the hub's file limit in idle connections, to the HTTP port
    // and to the DNS port, and holds them.
    let flood = 3 * OPEN_FILES / 2;
    let mut held = idle_connections("127.0.0.2", health, flood).await;
    held.extend(idle_connections("127.0.0.2", SocketAddr::new(dns.ip(), dns.port()), flood).await);
    assert!(held.len() > OPEN_FILES, "{} connected", held.len());

    // The kubelet's probe and the DNS clients, from elsewhere, are answered while it holds on.
    let livez = eventually(
        "/livez answers through the flood",
        DEFAULT_PATIENCE,
        || async move {
            let response = tokio::task::spawn_blocking(move || http_get(health, "/livez"))
                .await
                .unwrap();
            Ok(response.starts_with("HTTP/1.1 200").then_some(response))
        },
    )
    .await?;
    assert!(livez.starts_with("HTTP/1.1 200"), "{livez}");
    let (udp, tcp) = tokio::task::spawn_blocking(move || (dig_host(dns, HOST, None), dig_tcp(dns)))
        .await
        .unwrap();
    assert_eq!(udp, ["10.0.0.1"], "over UDP");
    assert_eq!(tcp, ["10.0.0.1"], "over TCP");
    // The flood reached the hub and was turned away at the door, not left to pile up.
    let metrics = tokio::task::spawn_blocking(move || http_get(health, "/metrics"))
        .await
        .unwrap();
    let turned_away = metric(
        &metrics,
        "meridian_dns_tcp_closed_total{why=\"per_client\"}",
    );
    assert!(turned_away > 0, "{metrics}");
    let mut closed = 0;
    for stream in &mut held {
        let mut byte = [0u8; 1];
        use tokio::io::AsyncReadExt;
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(50), stream.read(&mut byte)).await
        {
            closed += 1;
        }
    }
    eprintln!(
        "{} idle connections from one address at a hub limited to {OPEN_FILES} files: {closed} \
         closed by the hub, {turned_away} of them on the DNS port over the client's share; \
         /livez, DNS over UDP and TCP answered",
        held.len()
    );
    assert!(
        closed > held.len() - OPEN_FILES,
        "{closed} of {} closed",
        held.len()
    );
    hub_process.ensure_running()?;
    drop(held);
    drop(hub_process);
    Ok(())
}
