//! The servers people would pick instead of Meridian's nameserver, each started on loopback
//! from its Debian package with the benchmark's zone: Knot DNS and NSD (static answers, the
//! ceiling), gdnsd (static, and its weighted and geoip plugins), PowerDNS (static with its packet
//! cache; LUA records for weighted and GEO with its caches off, or every answer would be the
//! first one drawn).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use meridian_testkit::bind_server::free_dns_port;

use crate::{CaseKind, dig};

pub type BoxError = Box<dyn std::error::Error>;

/// A running peer: what it serves, where, and its process.
pub struct Peer {
    pub name: &'static str,
    pub version: String,
    pub address: SocketAddr,
    pub serves: &'static [CaseKind],
    child: Child,
}

impl Peer {
    /// Its process.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The zone file every peer but gdnsd serves statically (gdnsd's adds its DYNA records).
fn zone_file(extra: &str) -> String {
    format!(
        "$ORIGIN example.com.\n\
         @        60 IN SOA ns1.example.com. hostmaster.example.com. 1 3600 600 86400 60\n\
         @        60 IN NS  ns1.example.com.\n\
         ns1      60 IN A   127.0.0.1\n\
         static   60 IN A   198.18.0.10\n\
         {extra}"
    )
}

fn package_version(package: &str) -> String {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Version}", package])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_else(|_| "?".to_string())
}

/// Starts `command` (killed with the bench), logging to `dir/<name>.log`, and waits until it
/// answers the static query.
fn spawn(
    name: &'static str,
    package: &str,
    serves: &'static [CaseKind],
    dir: &Path,
    port: u16,
    command: Command,
) -> Result<Peer, BoxError> {
    let log_path = dir.join(format!("{package}.log"));
    let program = command.get_program().to_string_lossy().into_owned();
    let mut setpriv = Command::new("setpriv");
    setpriv
        .args(["--pdeathsig", "KILL", "--"])
        .arg(command.get_program())
        .args(command.get_args())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path)?);
    let child = setpriv
        .spawn()
        .map_err(|e| format!("cannot start {program} (make bench-dns installs {package}): {e}"))?;
    let peer = Peer {
        name,
        version: package_version(package),
        address: SocketAddr::from(([127, 0, 0, 1], port)),
        serves,
        child,
    };
    for _ in 0..100 {
        if !dig(peer.address, "static.example.com", false).is_empty() {
            return Ok(peer);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let log = std::fs::read_to_string(&log_path).unwrap_or_default();
    Err(format!("{name} did not answer; its log:\n{log}").into())
}

pub fn knot(dir: &Path) -> Result<Peer, BoxError> {
    knot_serving(dir, false)
}

/// Knot DNS signing on the fly (`mod-onlinesign`, ECDSA P-256, keys it makes itself): every
/// answer signed as it leaves, as Meridian signs its dynamic ones.
pub fn knot_online_signing(dir: &Path) -> Result<Peer, BoxError> {
    knot_serving(dir, true)
}

/// Knot DNS serving the static zone, signing it on the fly when `signed`.
fn knot_serving(dir: &Path, signed: bool) -> Result<Peer, BoxError> {
    let dir = &dir.join(if signed { "knot-signed" } else { "knot" });
    std::fs::create_dir_all(dir)?;
    let port = free_dns_port()?;
    std::fs::write(dir.join("example.com.zone"), zone_file(""))?;
    let d = dir.display();
    let (signing, module) = if signed {
        (
            "policy:\n  - id: online\n    algorithm: ecdsap256sha256\n\
             mod-onlinesign:\n  - id: signer\n    policy: online\n",
            "    module: mod-onlinesign/signer\n",
        )
    } else {
        ("", "")
    };
    std::fs::write(
        dir.join("knot.conf"),
        format!(
            "server:\n  rundir: \"{d}\"\n  listen: 127.0.0.1@{port}\n  udp-workers: 2\n  tcp-workers: 1\n\
             database:\n  storage: \"{d}\"\n\
             log:\n  - target: stderr\n    any: warning\n\
             {signing}\
             zone:\n  - domain: example.com\n    storage: \"{d}\"\n    file: example.com.zone\n    journal-content: none\n{module}"
        ),
    )?;
    let mut command = Command::new("knotd");
    command.arg("-c").arg(dir.join("knot.conf"));
    let (name, cases): (_, &'static [CaseKind]) = if signed {
        ("Knot signing", &[CaseKind::SignedStatic])
    } else {
        ("Knot DNS", &[CaseKind::Static])
    };
    spawn(name, "knot", cases, dir, port, command)
}

pub fn nsd(dir: &Path) -> Result<Peer, BoxError> {
    let dir = &dir.join("nsd");
    std::fs::create_dir_all(dir)?;
    let port = free_dns_port()?;
    std::fs::write(dir.join("example.com.zone"), zone_file(""))?;
    let d = dir.display();
    std::fs::write(
        dir.join("nsd.conf"),
        format!(
            "server:\n  ip-address: 127.0.0.1\n  port: {port}\n  server-count: 2\n  username: \"\"\n  \
             zonesdir: \"{d}\"\n  pidfile: \"{d}/nsd.pid\"\n  xfrdfile: \"{d}/xfrd.state\"\n  \
             zonelistfile: \"{d}/zone.list\"\n  xfrdir: \"{d}\"\n  database: \"\"\n  verbosity: 0\n  \
             rrl-ratelimit: 0\n  rrl-whitelist-ratelimit: 0\n\
             remote-control:\n  control-enable: no\n\
             zone:\n  name: example.com\n  zonefile: example.com.zone\n"
        ),
    )?;
    let mut command = Command::new("nsd");
    command.arg("-d").arg("-c").arg(dir.join("nsd.conf"));
    spawn("NSD", "nsd", &[CaseKind::Static], dir, port, command)
}

pub fn gdnsd(dir: &Path, database: &Path) -> Result<Peer, BoxError> {
    let dir = &dir.join("gdnsd");
    std::fs::create_dir_all(dir.join("zones"))?;
    let port = free_dns_port()?;
    std::fs::write(
        dir.join("zones").join("example.com"),
        zone_file("weighted 60 DYNA weighted!wres\ngeo      60 DYNA geoip!geores\n"),
    )?;
    let d = dir.display();
    std::fs::write(
        dir.join("config"),
        format!(
            "options => {{\n  listen => [ 127.0.0.1:{port} ]\n  udp_threads => 2\n  \
             run_dir => \"{d}/run\"\n  state_dir => \"{d}/state\"\n  edns_client_subnet => true\n}}\n\
             plugins => {{\n  weighted => {{\n    wres => {{\n      a => [ 198.18.0.1, 1 ]\n      b => [ 198.18.0.3, 3 ]\n    }}\n  }}\n  \
             geoip => {{\n    maps => {{\n      m => {{\n        geoip2_db => \"{db}\"\n        datacenters => [ ie, us, eu ]\n        \
             map => {{\n          default => [ ie ]\n          EU => {{ default => [ eu ], IE => [ ie ] }}\n          NA => {{ US => [ us ] }}\n        }}\n      }}\n    }}\n    \
             resources => {{\n      geores => {{\n        map => m\n        dcmap => {{ ie => 203.0.113.1, us => 203.0.113.2, eu => 203.0.113.3 }}\n      }}\n    }}\n  }}\n}}\n",
            db = database.display()
        ),
    )?;
    let mut command = Command::new("gdnsd");
    command.arg("-c").arg(dir).arg("start");
    spawn(
        "gdnsd",
        "gdnsd",
        &[CaseKind::Static, CaseKind::Weighted, CaseKind::Geo],
        dir,
        port,
        command,
    )
}

/// PowerDNS with the bind backend. `lua` serves the dynamic records as LUA records with every
/// cache off; otherwise the static zone with the packet cache on, as PowerDNS runs by default.
/// `signed`: the zone secured with `pdnsutil secure-zone` (ECDSA P-256, PowerDNS's default),
/// which PowerDNS signs live as it answers (keeping signatures in its signature cache).
pub fn powerdns(dir: &Path, database: &Path, lua: bool, signed: bool) -> Result<Peer, BoxError> {
    let dir = &dir.join(format!(
        "pdns{}{}",
        if lua { "-lua" } else { "" },
        if signed { "-signed" } else { "" }
    ));
    std::fs::create_dir_all(dir)?;
    let port = free_dns_port()?;
    let extra = if lua {
        "weighted 60 IN LUA A \"pickwrandom({{1, '198.18.0.1'}, {3, '198.18.0.3'}})\"\n\
         geo      60 IN LUA A \";if country('IE') then return '203.0.113.1' elseif country('US') then return '203.0.113.2' elseif continent('EU') then return '203.0.113.3' else return '203.0.113.1' end\"\n"
    } else {
        ""
    };
    std::fs::write(dir.join("example.com.zone"), zone_file(extra))?;
    std::fs::write(
        dir.join("named.conf"),
        format!(
            "zone \"example.com\" {{ type master; file \"{}\"; }};\n",
            dir.join("example.com.zone").display()
        ),
    )?;
    std::fs::write(dir.join("geo-zones.yaml"), "domains: []\n")?;
    let mut config = vec![
        "launch=bind,geoip".to_string(),
        format!("bind-config={}", dir.join("named.conf").display()),
        format!("geoip-database-files=mmdb:{}", database.display()),
        format!("geoip-zones-file={}", dir.join("geo-zones.yaml").display()),
        "enable-lua-records=yes".to_string(),
        "edns-subnet-processing=yes".to_string(),
        "local-address=127.0.0.1".to_string(),
        format!("local-port={port}"),
        format!("socket-dir={}", dir.display()),
        "receiver-threads=2".to_string(),
        "disable-syslog=yes".to_string(),
        "loglevel=3".to_string(),
    ];
    if lua {
        config
            .extend(["cache-ttl=0", "query-cache-ttl=0", "negquery-cache-ttl=0"].map(String::from));
    }
    if signed {
        config.push(format!(
            "bind-dnssec-db={}",
            dir.join("dnssec.sqlite3").display()
        ));
    }
    std::fs::write(dir.join("pdns.conf"), config.join("\n") + "\n")?;
    if signed {
        let pdnsutil = |args: &[&str]| -> Result<(), BoxError> {
            let output = Command::new("pdnsutil")
                .arg(format!("--config-dir={}", dir.display()))
                .args(args)
                .output()?;
            if !output.status.success() {
                return Err(format!(
                    "pdnsutil {args:?}: {}",
                    String::from_utf8_lossy(&output.stderr)
                )
                .into());
            }
            Ok(())
        };
        pdnsutil(&[
            "create-bind-db",
            &dir.join("dnssec.sqlite3").display().to_string(),
        ])?;
        pdnsutil(&["secure-zone", "example.com"])?;
    }
    let mut command = Command::new("pdns_server");
    command
        .args(["--guardian=no", "--daemon=no"])
        .arg(format!("--config-dir={}", dir.display()));
    let (name, serves): (_, &'static [CaseKind]) = match (lua, signed) {
        (true, false) => ("PowerDNS LUA", &[CaseKind::Weighted, CaseKind::Geo]),
        (false, false) => ("PowerDNS", &[CaseKind::Static]),
        (true, true) => (
            "PowerDNS LUA signed",
            &[CaseKind::SignedWeighted, CaseKind::SignedGeo],
        ),
        (false, true) => ("PowerDNS signed", &[CaseKind::SignedStatic]),
    };
    spawn(name, "pdns-server", serves, dir, port, command)
}
