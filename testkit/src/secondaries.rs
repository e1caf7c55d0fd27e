//! Standard secondaries of a Meridian zone: BIND 9 (Debian `bind9`) and Knot DNS (Debian
//! `knot`) on loopback, each following one primary by NOTIFY and IXFR with a TSIG key. A
//! secondary is killed and its directory removed on drop, and the kernel kills it if the owning
//! process dies first.

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use crate::bind_server::Daemon;
#[cfg(doc)]
use crate::bind_server::free_dns_port;

/// Which program is the secondary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Bind,
    Knot,
}

/// How a secondary reaches its primary.
#[derive(Debug, Clone)]
pub struct Primary {
    pub address: SocketAddr,
    pub key_name: String,
    /// `hmac-sha256`, `hmac-sha384` or `hmac-sha512`.
    pub algorithm: String,
    /// Base64.
    pub secret: String,
}

/// A running secondary of one zone.
#[derive(Debug)]
pub struct Secondary {
    pub kind: Kind,
    /// Where it answers (UDP and TCP).
    pub address: SocketAddr,
    daemon: Daemon,
}

impl Secondary {
    /// Starts `kind` as a secondary of `zone` from `primary`, on loopback `port` (see
    /// [`free_dns_port`]; the primary has to know it to send NOTIFY). It loads the zone by
    /// itself (AXFR at start); callers wait for the serial they expect.
    pub fn start(kind: Kind, port: u16, zone: &str, primary: &Primary) -> Result<Self, String> {
        let dir =
            std::env::temp_dir().join(format!("meridian-secondary-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let (program, config_file, config) = match kind {
            Kind::Bind => (
                "named",
                "named.conf",
                bind_config(&dir, port, zone, primary),
            ),
            Kind::Knot => ("knotd", "knot.conf", knot_config(&dir, port, zone, primary)),
        };
        std::fs::write(dir.join(config_file), config).map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.join("server.log")).map_err(|e| e.to_string())?;
        let mut command = Command::new("setpriv");
        command.args(["--pdeathsig", "KILL", "--", program]);
        match kind {
            Kind::Bind => command.arg("-g").arg("-c").arg(dir.join(config_file)),
            Kind::Knot => command.arg("-c").arg(dir.join(config_file)),
        };
        let child = command
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {program}: {e}"))?;
        Ok(Secondary {
            kind,
            address: SocketAddr::from(([127, 0, 0, 1], port)),
            daemon: Daemon { child, dir },
        })
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.daemon.dir.join("server.log")).unwrap_or_default()
    }
}

fn bind_config(dir: &std::path::Path, port: u16, zone: &str, primary: &Primary) -> String {
    let d = dir.display();
    let Primary {
        address,
        key_name,
        algorithm,
        secret,
    } = primary;
    format!(
        r#"{options}
logging {{ category xfer-in {{ default_stderr; }}; category notify {{ default_stderr; }}; }};
key "{key_name}" {{ algorithm {algorithm}; secret "{secret}"; }};
zone "{zone}" {{
  type secondary;
  primaries {{ {ip} port {primary_port} key "{key_name}"; }};
  file "{d}/secondary.db";
  request-ixfr yes;
}};
"#,
        options = crate::bind_server::named_options(dir, port, "  notify no;\n"),
        ip = address.ip(),
        primary_port = address.port(),
    )
}

fn knot_config(dir: &std::path::Path, port: u16, zone: &str, primary: &Primary) -> String {
    let d = dir.display();
    let Primary {
        address,
        key_name,
        algorithm,
        secret,
    } = primary;
    format!(
        r#"server:
  rundir: "{d}"
  listen: 127.0.0.1@{port}
database:
  storage: "{d}"
log:
  - target: stderr
    any: info
key:
  - id: {key_name}
    algorithm: {algorithm}
    secret: {secret}
remote:
  - id: primary
    address: {ip}@{primary_port}
    key: {key_name}
acl:
  - id: notify-from-primary
    address: {ip}
    key: {key_name}
    action: notify
zone:
  - domain: {zone}
    storage: "{d}"
    file: "secondary.zone"
    master: primary
    acl: notify-from-primary
    zonefile-sync: -1
    zonefile-load: none
    journal-content: changes
"#,
        ip = address.ip(),
        primary_port = address.port(),
    )
}
