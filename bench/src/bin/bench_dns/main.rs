//! `make bench-dns`: queries per second and latency of Meridian's nameserver next to the servers
//! people would pick instead, measured with dnsperf in one run on loopback against the same
//! zone: a static A record (Knot DNS and NSD, the ceiling; gdnsd; PowerDNS with its packet
//! cache), a weighted record (one target drawn by weight: gdnsd's weighted plugin, PowerDNS LUA
//! `pickwrandom`) and a GEO record answered from EDNS Client Subnet with a MaxMind-format
//! database (gdnsd's geoip plugin, PowerDNS LUA `country()`/`continent()`; PowerDNS's caches
//! off for LUA: a cached answer would stop drawing by weight). The same three are then asked
//! with the DO bit of a signed zone (ECDSA P-256): Meridian signed against Meridian unsigned,
//! Knot DNS signing on the fly (`mod-onlinesign`, static only) and PowerDNS live-signing its
//! static and LUA records. Each pair runs alternately for
//! ROUNDS rounds, in a rotated order, so drift of the machine falls on every server alike; the
//! table shows medians. Absolute numbers are noise on a shared machine; read the ratios.

mod cpu;
mod peers;

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Command;

use meridian_dns::model::{Endpoint, RecordType};
use meridian_nameserver::dnssec::{KeyAlgorithm, ZoneKeys, generate_key};
use meridian_nameserver::{GeoDb, NameServer, ServerConfig, ZoneConfig};
use meridian_testkit::geo_db::write_database;

use cpu::CpuOf;
use peers::{BoxError, Peer};

/// Seconds per dnsperf run (`MERIDIAN_BENCH_SECONDS` overrides).
const SECONDS_PER_RUN: u32 = 6;
/// How Meridian's nameserver names its UDP threads (`dns-udp-0`, …).
const MERIDIAN_UDP_THREADS: &str = "dns-udp-";
/// Alternating rounds per server and case (`MERIDIAN_BENCH_ROUNDS` overrides).
const ROUNDS: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseKind {
    Static,
    Weighted,
    Geo,
    /// The same three with the DO bit: answers with their signatures.
    SignedStatic,
    SignedWeighted,
    SignedGeo,
}

struct Case {
    kind: CaseKind,
    name: &'static str,
    qname: &'static str,
    /// ECS for 192.0.2.0/24 (in the test database: IE), as dnsperf's `-E` option.
    ecs: bool,
    /// The DO bit set (dnsperf's `-D`): a signing server adds its RRSIGs.
    dnssec: bool,
}

/// dnsperf's `-E` for ECS 192.0.2.0/24: option 8, family 1, source /24, scope 0, 192.0.2.
const ECS_OPTION: &str = "8:00011800c00002";

const CASES: [Case; 6] = [
    Case {
        kind: CaseKind::Static,
        name: "static A",
        qname: "static.example.com",
        ecs: false,
        dnssec: false,
    },
    Case {
        kind: CaseKind::Weighted,
        name: "weighted A",
        qname: "weighted.example.com",
        ecs: false,
        dnssec: false,
    },
    Case {
        kind: CaseKind::Geo,
        name: "GEO A (ECS)",
        qname: "geo.example.com",
        ecs: true,
        dnssec: false,
    },
    Case {
        kind: CaseKind::SignedStatic,
        name: "signed static",
        qname: "static.example.com",
        ecs: false,
        dnssec: true,
    },
    Case {
        kind: CaseKind::SignedWeighted,
        name: "signed weight",
        qname: "weighted.example.com",
        ecs: false,
        dnssec: true,
    },
    Case {
        kind: CaseKind::SignedGeo,
        name: "signed GEO",
        qname: "geo.example.com",
        ecs: true,
        dnssec: true,
    },
];

/// The cases a signing server answers, and those a server without DNSSEC answers.
const SIGNED: &[CaseKind] = &[
    CaseKind::SignedStatic,
    CaseKind::SignedWeighted,
    CaseKind::SignedGeo,
];

fn bench_zone() -> Vec<Endpoint> {
    let a = |name: &str, ip: &str| Endpoint::new(name, RecordType::A, [ip.to_string()], 60);
    let mut records = vec![a("static.example.com", "198.18.0.10")];
    for (set, weight, ip) in [("a", 1, "198.18.0.1"), ("b", 3, "198.18.0.3")] {
        records.push(
            a("weighted.example.com", ip)
                .with_set_identifier(set)
                .with_property("weight", weight.to_string()),
        );
    }
    for (code, ip) in [
        ("IE", "203.0.113.1"),
        ("US", "203.0.113.2"),
        ("GEO-EU", "203.0.113.3"),
        ("*", "203.0.113.1"),
    ] {
        let set = if code == "*" { "default" } else { code };
        records.push(
            a("geo.example.com", ip)
                .with_set_identifier(set)
                .with_property("geo-code", code),
        );
    }
    records
}

fn main() -> Result<(), BoxError> {
    let dir = std::env::temp_dir().join(format!("meridian-bench-dns-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = run(&dir);
    if std::env::var_os("MERIDIAN_BENCH_KEEP").is_some() {
        eprintln!("kept {}", dir.display());
    } else {
        let _ = std::fs::remove_dir_all(&dir);
    }
    result
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The peers or cases an environment variable names (comma-separated words, each the start of
/// a name, any case), for measuring a few of them quickly; unset, all of them.
struct Selection(Option<Vec<String>>);

impl Selection {
    fn from_env(name: &str) -> Selection {
        Selection(std::env::var(name).ok().map(|list| {
            list.split(',')
                .map(|word| word.trim().to_lowercase())
                .filter(|word| !word.is_empty())
                .collect()
        }))
    }

    fn admits(&self, name: &str) -> bool {
        let name = name.to_lowercase();
        self.0
            .as_ref()
            .is_none_or(|words| words.iter().any(|word| name.starts_with(word.as_str())))
    }
}

/// Starts one peer, named for `MERIDIAN_BENCH_PEERS`.
type StartPeer<'a> = &'a dyn Fn() -> Result<Peer, BoxError>;

/// One server under load: its name, address and what it serves.
struct Contender<'a> {
    name: &'a str,
    address: SocketAddr,
    serves: &'a [CaseKind],
    /// Whose CPU time is the server's.
    cpu: CpuOf,
}

fn run(dir: &Path) -> Result<(), BoxError> {
    let seconds: u32 = env_or("MERIDIAN_BENCH_SECONDS", SECONDS_PER_RUN);
    let rounds: usize = env_or("MERIDIAN_BENCH_ROUNDS", ROUNDS);
    let database = write_database(&[
        ("192.0.2.0/24".parse()?, "IE", "EU"),
        ("198.51.100.0/24".parse()?, "US", "NA"),
    ]);
    let database_path = dir.join("country.mmdb");
    std::fs::write(&database_path, &database)?;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let meridian = runtime.block_on(async {
        let config = ServerConfig {
            geo: Some(GeoDb::from_bytes(database)?),
            ..ServerConfig::default()
        };
        let server = NameServer::start("127.0.0.1:0".parse()?, config).await?;
        server.publish(ZoneConfig::new("example.com"), bench_zone());
        Ok::<_, BoxError>(server)
    })?;
    // The same zone signed (ECDSA P-256, the default), on a server of its own.
    let meridian_signed = runtime.block_on(async {
        let algorithm = KeyAlgorithm::EcdsaP256Sha256;
        let keys = ZoneKeys::new(
            "example.com",
            algorithm,
            &generate_key(algorithm)?,
            &generate_key(algorithm)?,
            &[],
            3600,
        )?;
        let config = ServerConfig {
            geo: Some(GeoDb::open(&database_path)?),
            ..ServerConfig::default()
        };
        let server = NameServer::start("127.0.0.1:0".parse()?, config).await?;
        let zone = ZoneConfig::new("example.com").signed_with(Some(std::sync::Arc::new(keys)));
        server.publish(zone, bench_zone());
        Ok::<_, BoxError>(server)
    })?;
    let only_peers = Selection::from_env("MERIDIAN_BENCH_PEERS");
    let starts: [(&str, StartPeer); 8] = [
        ("knot", &|| peers::knot(dir)),
        ("nsd", &|| peers::nsd(dir)),
        ("gdnsd", &|| peers::gdnsd(dir, &database_path)),
        ("powerdns", &|| {
            peers::powerdns(dir, &database_path, false, false)
        }),
        ("powerdns", &|| {
            peers::powerdns(dir, &database_path, true, false)
        }),
        ("knot", &|| peers::knot_online_signing(dir)),
        ("powerdns", &|| {
            peers::powerdns(dir, &database_path, false, true)
        }),
        ("powerdns", &|| {
            peers::powerdns(dir, &database_path, true, true)
        }),
    ];
    let peers: Vec<Peer> = starts
        .iter()
        .filter(|(name, _)| only_peers.admits(name))
        .map(|(_, start)| start())
        .collect::<Result<_, _>>()?;
    // Meridian signed comes first among the signed cases: the ratios are against it. The
    // unsigned server asked the same (DO set, nothing to sign) shows what signing costs.
    let mut contenders = vec![
        Contender {
            name: "Meridian signed",
            address: meridian_signed.local_addr(),
            serves: SIGNED,
            cpu: CpuOf::OwnThreads(MERIDIAN_UDP_THREADS),
        },
        Contender {
            name: "Meridian",
            address: meridian.local_addr(),
            serves: &[
                CaseKind::Static,
                CaseKind::Weighted,
                CaseKind::Geo,
                CaseKind::SignedStatic,
                CaseKind::SignedWeighted,
                CaseKind::SignedGeo,
            ],
            cpu: CpuOf::OwnThreads(MERIDIAN_UDP_THREADS),
        },
    ];
    contenders.extend(peers.iter().map(|peer| Contender {
        name: peer.name,
        address: peer.address,
        serves: peer.serves,
        cpu: CpuOf::ProcessTree(peer.pid()),
    }));
    // Every server gives the answer the case asks for before anything is measured.
    for contender in &contenders {
        for case in CASES.iter().filter(|c| contender.serves.contains(&c.kind)) {
            let answer = dig(contender.address, case.qname, case.ecs);
            let expected = match case.kind {
                CaseKind::Static | CaseKind::SignedStatic => vec!["198.18.0.10"],
                CaseKind::Weighted | CaseKind::SignedWeighted => vec!["198.18.0.1", "198.18.0.3"],
                CaseKind::Geo | CaseKind::SignedGeo => vec!["203.0.113.1"],
            };
            // A signing server's answer carries its signature (dig +short prints it as
            // "A 13 3 60 ...").
            let signs = contender.name != "Meridian" && SIGNED.contains(&case.kind);
            if signs && !dig_signed(contender.address, case.qname, case.ecs).contains("A 13 ") {
                return Err(format!("{} does not sign {}", contender.name, case.qname).into());
            }
            if !expected.contains(&answer.as_str()) {
                return Err(format!(
                    "{} answers {:?} for {}, not one of {expected:?}",
                    contender.name, answer, case.qname
                )
                .into());
            }
        }
    }
    println!(
        "dnsperf, {seconds} s per run, {rounds} alternating rounds, loopback, 2 workers each where the server has the setting"
    );
    for peer in &peers {
        println!("  {} {} on {}", peer.name, peer.version, peer.address);
    }
    let clock_ticks = cpu::ticks_per_second();
    let mut meridian_static = None;
    let mut unsigned_rates = Vec::new();
    let only_cases = Selection::from_env("MERIDIAN_BENCH_CASES");
    for case in CASES.iter().filter(|case| only_cases.admits(case.name)) {
        let serving: Vec<&Contender> = contenders
            .iter()
            .filter(|c| c.serves.contains(&case.kind))
            .collect();
        let mut runs: Vec<Vec<Measurement>> = serving.iter().map(|_| Vec::new()).collect();
        for round in 0..rounds {
            for offset in 0..serving.len() {
                let index = (round + offset) % serving.len();
                let contender = serving[index];
                let before = cpu::ticks(contender.cpu);
                let mut measured = dnsperf(dir, contender.address, case, seconds)?;
                let spent = cpu::ticks(contender.cpu).saturating_sub(before) as f64 / clock_ticks;
                measured.cpu_us = spent * 1e6 / measured.completed;
                runs[index].push(measured);
            }
        }
        let medians: Vec<Measurement> = runs.iter().map(|r| median(r)).collect();
        let ours = &medians[0];
        if case.kind == CaseKind::Static {
            meridian_static = Some(ours.qps);
        }
        if !case.dnssec {
            unsigned_rates.push((case.qname, case.name, ours.qps));
        }
        println!();
        println!(
            "{:<14} {:<14} {:>10} {:>21} {:>11} {:>10} {:>16}   each round",
            case.name, "server", "qps", "(min–max)", "latency ms", "CPU µs/q", "Meridian/server",
        );
        for ((contender, measured), all) in serving.iter().zip(&medians).zip(&runs) {
            let low = all.iter().map(|m| m.qps).fold(f64::INFINITY, f64::min);
            let high = all.iter().map(|m| m.qps).fold(0.0, f64::max);
            // Each round runs every server back to back, so a round's ratio is taken under
            // the same machine drift: its range says whether a margin is real.
            let per_round: Vec<f64> = runs[0]
                .iter()
                .zip(all)
                .map(|(mine, theirs)| mine.qps / theirs.qps)
                .collect();
            let each_round: Vec<String> = per_round.iter().map(|r| format!("{r:.2}x")).collect();
            let mut cpu_us: Vec<f64> = all.iter().map(|m| m.cpu_us).collect();
            cpu_us.sort_by(f64::total_cmp);
            println!(
                "{:<14} {:<14} {:>10.0} {:>21} {:>11.3} {:>10.2} {:>15.2}x   {}",
                "",
                contender.name,
                measured.qps,
                format!("({low:.0}–{high:.0})"),
                measured.latency_ms,
                cpu_us[cpu_us.len() / 2],
                ours.qps / measured.qps,
                each_round.join(" ")
            );
        }
        if case.dnssec {
            // The unsigned case of the same name, measured earlier in this run.
            if let Some((_, name, unsigned)) = unsigned_rates
                .iter()
                .find(|(qname, ..)| *qname == case.qname)
            {
                println!(
                    "{:<14} Meridian signed / Meridian unsigned ({name}): {:.2}x",
                    "",
                    ours.qps / unsigned
                );
            }
        } else if case.kind != CaseKind::Static
            && let Some(static_qps) = meridian_static
        {
            println!(
                "{:<14} Meridian {} / Meridian static A: {:.2}x",
                "",
                case.name,
                ours.qps / static_qps
            );
        }
    }
    drop(peers);
    runtime.block_on(meridian.shutdown());
    runtime.block_on(meridian_signed.shutdown());
    profile(&database_path)?;
    Ok(())
}

/// Where one answer's time goes, in process on one core: the whole answer on the fast path and
/// on the general path (a request with an unknown EDNS option, which the fast path leaves to it),
/// and of the general path its parse and its encode (hickory's `Message`); lookup and choice
/// are the rest.
fn profile(database: &Path) -> Result<(), BoxError> {
    use hickory_proto::op::Message;
    use meridian_nameserver::{Catalog, Zone, respond, respond_into};
    use rand::SeedableRng;
    use std::time::Instant;

    const QUERIES: u32 = 200_000;
    let geo = GeoDb::open(database)?;
    let catalog =
        Catalog::default().with_zone(Zone::new(ZoneConfig::new("example.com"), 1, bench_zone()));
    let context = udp_context(&geo);
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut buffer = Vec::new();
    let time = |f: &mut dyn FnMut()| {
        let start = Instant::now();
        for _ in 0..QUERIES {
            f();
        }
        start.elapsed().as_nanos() as f64 / f64::from(QUERIES)
    };
    println!();
    println!("answer path, ns per query in process (one core, {QUERIES} queries each)");
    println!(
        "{:<14} {:>10} {:>13} {:>8} {:>8} {:>15}",
        "query", "fast path", "general path", "parse", "encode", "lookup+choice"
    );
    // The unsigned zone: the signed cases would repeat these rows without signatures.
    for case in CASES.iter().filter(|case| !case.dnssec) {
        let subnet = case.ecs.then(|| Ipv4Addr::new(192, 0, 2, 0));
        let (fast, general) = (
            a_query(case.qname, subnet, false)?,
            a_query(case.qname, subnet, true)?,
        );
        let fast_ns = time(&mut || {
            // As a UDP thread answers: into a buffer it keeps.
            std::hint::black_box(respond_into(
                &catalog,
                &fast,
                &context,
                &mut rng,
                &mut buffer,
            ));
        });
        let general_ns = time(&mut || {
            std::hint::black_box(respond(&catalog, &general, &context, &mut rng));
        });
        let parse_ns = time(&mut || {
            std::hint::black_box(Message::from_vec(&general).ok());
        });
        let response = Message::from_vec(&respond(&catalog, &general, &context, &mut rng)[0])?;
        let encode_ns = time(&mut || {
            std::hint::black_box(response.to_vec().ok());
        });
        println!(
            "{:<14} {:>10.0} {:>13.0} {:>8.0} {:>8.0} {:>15.0}",
            case.name,
            fast_ns,
            general_ns,
            parse_ns,
            encode_ns,
            general_ns - parse_ns - encode_ns
        );
    }
    geo_networks_profile(&catalog, &mut rng, &time)
}

/// The GEO answer's fast path when clients come from many networks: a database of 65,536 /24s,
/// asked from 256 of them (a quarter of what each thread's cache of recent networks holds, so
/// nearly all are answered from it; a few share a set with two others) and from all of them
/// (nearly every query a miss: the tree walk and decoding the cache saves, and the cache's own
/// upkeep).
fn geo_networks_profile(
    catalog: &meridian_nameserver::Catalog,
    rng: &mut rand::rngs::SmallRng,
    time: &dyn Fn(&mut dyn FnMut()) -> f64,
) -> Result<(), BoxError> {
    use meridian_nameserver::respond_into;

    const NETWORKS: u32 = 65_536;
    let network = |i: u32| Ipv4Addr::from(0x0a00_0000 | (i << 8));
    let networks: Vec<(ipnet::Ipv4Net, &str, &str)> = (0..NETWORKS)
        .map(|i| {
            let country = if i % 2 == 0 { "IE" } else { "US" };
            Ok((ipnet::Ipv4Net::new(network(i), 24)?, country, "EU"))
        })
        .collect::<Result<_, ipnet::PrefixLenError>>()?;
    let geo = GeoDb::from_bytes(write_database(&networks))?;
    let context = udp_context(&geo);
    // Spread over the space, so neighbouring requests are not neighbouring networks.
    let requests: Vec<Vec<u8>> = (0..NETWORKS)
        .map(|i| {
            a_query(
                "geo.example.com",
                Some(network(i.wrapping_mul(40_503) % NETWORKS)),
                false,
            )
        })
        .collect::<Result<_, BoxError>>()?;
    println!();
    println!("GEO A (ECS) fast path, clients from many networks, ns per query");
    let mut buffer = Vec::new();
    for clients in [256, NETWORKS as usize] {
        let mut next = 0;
        let ns = time(&mut || {
            std::hint::black_box(respond_into(
                catalog,
                &requests[next],
                &context,
                rng,
                &mut buffer,
            ));
            next = (next + 1) % clients;
        });
        println!("{:>6} networks {:>10.0}", clients, ns);
    }
    Ok(())
}

/// What a UDP thread answers a local client with, locating by `geo`, counting nothing.
fn udp_context(geo: &GeoDb) -> meridian_nameserver::QueryContext<'_> {
    meridian_nameserver::QueryContext {
        source: Ipv4Addr::LOCALHOST.into(),
        transport: meridian_nameserver::Transport::Udp,
        geo: Some(geo),
        transfer_allowed: &[],
        stats: None,
        tsig_keys: &[],
        cookie_secret: None,
        now: 0,
    }
}

/// An A query for `qname` with EDNS, its client subnet `subnet`/24 if any, and an option the
/// fast path leaves to the general path when `unknown_option`.
fn a_query(
    qname: &str,
    subnet: Option<Ipv4Addr>,
    unknown_option: bool,
) -> Result<Vec<u8>, BoxError> {
    use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
    use hickory_proto::rr::Name;
    use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};

    let mut message = Message::new(7, MessageType::Query, OpCode::Query);
    message.add_query(Query::query(
        Name::from_ascii(format!("{qname}."))?,
        hickory_proto::rr::RecordType::A,
    ));
    let mut edns = Edns::new();
    if let Some(subnet) = subnet {
        let subnet = ClientSubnet::new(subnet.into(), 24, 0);
        edns.options_mut().insert(EdnsOption::Subnet(subnet));
    }
    if unknown_option {
        edns.options_mut()
            .insert(EdnsOption::Unknown(65001, Vec::new()));
    }
    message.set_edns(edns);
    Ok(message.to_vec()?)
}

fn median(runs: &[Measurement]) -> Measurement {
    let mut sorted: Vec<&Measurement> = runs.iter().collect();
    sorted.sort_by(|a, b| a.qps.total_cmp(&b.qps));
    let middle = sorted[sorted.len() / 2];
    Measurement {
        qps: middle.qps,
        latency_ms: middle.latency_ms,
        completed: middle.completed,
        cpu_us: middle.cpu_us,
    }
}

/// `dig +short` of `qname` A at `server`, with ECS 192.0.2.1/24 when `ecs`.
pub fn dig(server: SocketAddr, qname: &str, ecs: bool) -> String {
    dig_with(server, qname, ecs, false)
}

/// [`dig`] with the DO bit: the answer and its signatures.
pub fn dig_signed(server: SocketAddr, qname: &str, ecs: bool) -> String {
    dig_with(server, qname, ecs, true)
}

fn dig_with(server: SocketAddr, qname: &str, ecs: bool, dnssec: bool) -> String {
    let mut command = Command::new("dig");
    if dnssec {
        command.arg("+dnssec");
    }
    command.args([
        format!("@{}", server.ip()),
        "-p".into(),
        server.port().to_string(),
        "+short".into(),
        "+time=1".into(),
        "+tries=1".into(),
    ]);
    if ecs {
        command.arg("+subnet=192.0.2.1/24");
    }
    command.arg(qname);
    command
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

struct Measurement {
    qps: f64,
    latency_ms: f64,
    /// Queries answered in the run.
    completed: f64,
    /// The server's CPU time per query answered, µs (user and system).
    cpu_us: f64,
}

fn dnsperf(
    dir: &Path,
    server: SocketAddr,
    case: &Case,
    seconds: u32,
) -> Result<Measurement, BoxError> {
    let queries: PathBuf = dir.join("queries.txt");
    std::fs::write(&queries, format!("{} A\n", case.qname))?;
    let mut command = Command::new("dnsperf");
    command
        .args([
            "-s",
            &server.ip().to_string(),
            "-p",
            &server.port().to_string(),
        ])
        .arg("-d")
        .arg(&queries)
        .args([
            "-l",
            &seconds.to_string(),
            "-c",
            "4",
            "-T",
            "1",
            "-q",
            "200",
        ]);
    if case.ecs {
        command.args(["-E", ECS_OPTION]);
    }
    if case.dnssec {
        command.arg("-D");
    }
    let output = command
        .output()
        .map_err(|e| format!("cannot run dnsperf (make bench-dns installs it): {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let field = |label: &str| -> Option<f64> {
        text.lines()
            .find(|l| l.trim_start().starts_with(label))?
            .split(':')
            .nth(1)?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    };
    match (
        field("Queries per second"),
        field("Average Latency (s)"),
        field("Queries completed"),
    ) {
        (Some(qps), Some(latency), Some(completed)) if qps > 0.0 && completed > 0.0 => {
            Ok(Measurement {
                qps,
                latency_ms: latency * 1000.0,
                completed,
                cpu_us: 0.0,
            })
        }
        _ => Err(format!("unexpected dnsperf output:\n{text}").into()),
    }
}
