//! `make bench-dns`: queries per second and latency of Meridian's nameserver next to PowerDNS
//! (the anchor), measured with dnsperf in one run on loopback against the same zone: a static A
//! record, a weighted record (one target drawn by weight) and a GEO record answered from EDNS
//! Client Subnet with a MaxMind-format database. PowerDNS serves the dynamic records as LUA records
//! (`pickwrandom`, `country()`/`continent()`), with its caches off: a cached LUA answer would
//! stop drawing by weight. Absolute numbers are noise on a shared machine; read the ratios.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use meridian_dns::model::{Endpoint, RecordType};
use meridian_nameserver::{GeoDb, NameServer, ServerConfig, ZoneConfig};
use meridian_testkit::geo_db::write_database;

const SECONDS_PER_RUN: u32 = 8;

struct Case {
    name: &'static str,
    qname: &'static str,
    /// `-E` option for dnsperf: ECS for 192.0.2.0/24 (in the test database: IE).
    edns_option: Option<&'static str>,
}

const CASES: [Case; 3] = [
    Case {
        name: "static A",
        qname: "static.example.com",
        edns_option: None,
    },
    Case {
        name: "weighted",
        qname: "weighted.example.com",
        edns_option: None,
    },
    Case {
        name: "GEO (ECS)",
        qname: "geo.example.com",
        edns_option: Some("8:00011800c00002"),
    },
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

const POWERDNS_ZONE: &str = r#"$ORIGIN example.com.
@        60 IN SOA ns1.example.com. hostmaster.example.com. 1 3600 600 86400 60
@        60 IN NS  ns1.example.com.
static   60 IN A   198.18.0.10
weighted 60 IN LUA A "pickwrandom({{1, '198.18.0.1'}, {3, '198.18.0.3'}})"
geo      60 IN LUA A ";if country('IE') then return '203.0.113.1' elseif country('US') then return '203.0.113.2' elseif continent('EU') then return '203.0.113.3' else return '203.0.113.1' end"
"#;

fn main() -> Result<(), Box<dyn std::error::Error>> {
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

fn run(dir: &Path) -> Result<(), Box<dyn std::error::Error>> {
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
        Ok::<_, Box<dyn std::error::Error>>(server)
    })?;
    let mut powerdns = PowerDns::start(dir, &database_path)?;

    let servers = [
        ("Meridian", meridian.local_addr()),
        ("PowerDNS", powerdns.address),
    ];
    for (name, address) in servers {
        for case in &CASES {
            let answer = dig(address, case);
            if answer.is_empty() {
                return Err(format!("{name} gives no answer for {}", case.qname).into());
            }
        }
    }
    println!(
        "dnsperf, {SECONDS_PER_RUN} s per run, loopback; Meridian on {}, PowerDNS {} on {} with caches off",
        meridian.local_addr(),
        powerdns.version,
        powerdns.address
    );
    println!(
        "{:<10} {:>14} {:>14} {:>12} {:>12} {:>10}",
        "query", "Meridian qps", "PowerDNS qps", "Meridian ms", "PowerDNS ms", "qps ratio"
    );
    for case in &CASES {
        let ours = dnsperf(dir, meridian.local_addr(), case)?;
        let theirs = dnsperf(dir, powerdns.address, case)?;
        println!(
            "{:<10} {:>14.0} {:>14.0} {:>12.3} {:>12.3} {:>9.2}x",
            case.name,
            ours.qps,
            theirs.qps,
            ours.latency_ms,
            theirs.latency_ms,
            ours.qps / theirs.qps
        );
    }
    powerdns.stop();
    runtime.block_on(meridian.shutdown());
    Ok(())
}

struct PowerDns {
    child: Child,
    address: SocketAddr,
    version: String,
}

impl PowerDns {
    fn start(dir: &Path, database: &Path) -> Result<Self, Box<dyn std::error::Error>> {
        let port = free_port()?;
        std::fs::write(dir.join("example.com.zone"), POWERDNS_ZONE)?;
        std::fs::write(
            dir.join("named.conf"),
            format!(
                "zone \"example.com\" {{ type master; file \"{}\"; }};\n",
                dir.join("example.com.zone").display()
            ),
        )?;
        std::fs::write(dir.join("geo-zones.yaml"), "domains: []\n")?;
        let config = [
            "launch=bind,geoip".to_string(),
            format!("bind-config={}", dir.join("named.conf").display()),
            format!("geoip-database-files=mmdb:{}", database.display()),
            format!("geoip-zones-file={}", dir.join("geo-zones.yaml").display()),
            "enable-lua-records=yes".to_string(),
            "edns-subnet-processing=yes".to_string(),
            "local-address=127.0.0.1".to_string(),
            format!("local-port={port}"),
            format!("socket-dir={}", dir.display()),
            "cache-ttl=0".to_string(),
            "query-cache-ttl=0".to_string(),
            "negquery-cache-ttl=0".to_string(),
            "disable-syslog=yes".to_string(),
            "loglevel=3".to_string(),
        ];
        std::fs::write(dir.join("pdns.conf"), config.join("\n") + "\n")?;
        let child = Command::new("setpriv")
            .args([
                "--pdeathsig",
                "KILL",
                "--",
                "pdns_server",
                "--guardian=no",
                "--daemon=no",
            ])
            .arg(format!("--config-dir={}", dir.display()))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("pdns.log"))?)
            .spawn()
            .map_err(|e| format!("cannot start pdns_server (make bench-dns installs it): {e}"))?;
        let address: SocketAddr = format!("127.0.0.1:{port}").parse()?;
        let version = Command::new("dpkg-query")
            .args(["-W", "-f=${Version}", "pdns-server"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_else(|_| "?".to_string());
        let mut powerdns = PowerDns {
            child,
            address,
            version,
        };
        for _ in 0..100 {
            if !dig(address, &CASES[0]).is_empty() {
                return Ok(powerdns);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        powerdns.stop();
        let log = std::fs::read_to_string(dir.join("pdns.log")).unwrap_or_default();
        Err(format!("PowerDNS did not answer; its log:\n{log}").into())
    }

    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    loop {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0")?;
        let port = udp.local_addr()?.port();
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
}

fn dig(server: SocketAddr, case: &Case) -> String {
    let mut command = Command::new("dig");
    command.args([
        format!("@{}", server.ip()),
        "-p".into(),
        server.port().to_string(),
        "+short".into(),
        "+time=1".into(),
        "+tries=1".into(),
    ]);
    if case.edns_option.is_some() {
        command.arg("+subnet=192.0.2.1/24");
    }
    command.arg(case.qname);
    command
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

struct Measurement {
    qps: f64,
    latency_ms: f64,
}

fn dnsperf(
    dir: &Path,
    server: SocketAddr,
    case: &Case,
) -> Result<Measurement, Box<dyn std::error::Error>> {
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
            &SECONDS_PER_RUN.to_string(),
            "-c",
            "4",
            "-T",
            "1",
            "-q",
            "200",
        ]);
    if let Some(option) = case.edns_option {
        command.args(["-E", option]);
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
    match (field("Queries per second"), field("Average Latency (s)")) {
        (Some(qps), Some(latency)) if qps > 0.0 => Ok(Measurement {
            qps,
            latency_ms: latency * 1000.0,
        }),
        _ => Err(format!("unexpected dnsperf output:\n{text}").into()),
    }
}
