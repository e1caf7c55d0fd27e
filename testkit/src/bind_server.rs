//! BIND 9 (Debian `bind9`) on loopback, for the RFC2136 tests and the distributed-mode tests:
//! one primary zone that accepts TSIG-signed UPDATEs and transfers. The process is killed and
//! its directory removed on drop, and the kernel kills it if the owning process dies first.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use base64::Engine as _;

use meridian_providers::Provider;
use meridian_providers::rfc2136::{Rfc2136Config, Rfc2136Provider};

/// A loopback port free for both UDP and TCP, for a DNS server to listen on.
pub fn free_dns_port() -> Result<u16, String> {
    crate::ports::reserve_loopback_port(crate::ports::Listens::TcpAndUdp)
}

/// A server process and its directory: the process is killed and the directory removed on
/// drop.
#[derive(Debug)]
pub(crate) struct Daemon {
    pub child: Child,
    pub dir: PathBuf,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A running BIND serving one zone.
#[derive(Debug)]
pub struct BindServer {
    daemon: Daemon,
    /// How to reach the zone: server, zone, TSIG key.
    pub config: Rfc2136Config,
    /// BIND's statistics channel (HTTP), where [`BindServer::requests`] reads its counters.
    statistics: std::net::SocketAddr,
}

impl BindServer {
    /// The `kuadrant.io/rfc2136` Secret `namespace/name` a ManagedZone names to publish to this
    /// server.
    pub fn provider_secret(&self, namespace: &str, name: &str) -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/rfc2136",
            "metadata": { "name": name, "namespace": namespace },
            "stringData": {
                "server": self.config.server.to_string(),
                "tsigKeyName": self.config.key_name,
                "tsigAlgorithm": self.config.algorithm,
                "tsigSecret": self.config.secret,
            },
        })
    }

    /// Starts BIND for `zone` on a free loopback port and waits until it serves the zone.
    pub async fn start(zone: &str) -> Result<Self, String> {
        let dir =
            std::env::temp_dir().join(format!("meridian-bind-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let port = free_dns_port()?;
        let statistics_port = free_dns_port()?;
        let secret = base64::engine::general_purpose::STANDARD.encode(rand::random::<[u8; 32]>());
        let d = dir.display();
        let write = |name: &str, text: String| {
            std::fs::write(dir.join(name), text).map_err(|e| e.to_string())
        };
        write(
            "named.conf",
            format!(
                r#"{options}
statistics-channels {{ inet 127.0.0.1 port {statistics_port} allow {{ 127.0.0.1; }}; }};
key "meridian" {{ algorithm hmac-sha256; secret "{secret}"; }};
zone "{zone}" {{
  type primary;
  file "{d}/zone.db";
  allow-update {{ key "meridian"; }};
  allow-transfer {{ key "meridian"; }};
}};
"#,
                options = named_options(&dir, port, ""),
            ),
        )?;
        write(
            "zone.db",
            format!(
                "$TTL 60\n@ IN SOA ns1.{zone}. hostmaster.{zone}. 1 3600 600 86400 60\n@ IN NS ns1.{zone}.\nns1 IN A 127.0.0.1\n"
            ),
        )?;
        let log = std::fs::File::create(dir.join("named.log")).map_err(|e| e.to_string())?;
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", "named", "-g", "-c"])
            .arg(dir.join("named.conf"))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting named (Debian bind9): {e}"))?;
        let config = Rfc2136Config {
            server: format!("127.0.0.1:{port}")
                .parse()
                .expect("a socket address"),
            zone: zone.into(),
            key_name: "meridian".into(),
            algorithm: "hmac-sha256".into(),
            secret,
        };
        let server = BindServer {
            daemon: Daemon { child, dir },
            config,
            statistics: std::net::SocketAddr::from(([127, 0, 0, 1], statistics_port)),
        };
        let provider = Rfc2136Provider::new(server.config.clone()).map_err(|e| e.to_string())?;
        for _ in 0..100 {
            if provider.records(zone).await.is_ok() {
                return Ok(server);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Err(format!("BIND did not serve the zone:\n{}", server.log()))
    }

    /// The process ID of named (to pause it, as an unreachable server).
    pub fn pid(&self) -> u32 {
        self.daemon.child.id()
    }

    /// The requests BIND has answered so far, as its statistics channel counts them: by opcode
    /// (`QUERY`, `UPDATE`, …) and, for queries, `AXFR`/`IXFR` transfers apart (`QUERY` then
    /// counts the rest).
    pub fn requests(&self) -> Result<std::collections::BTreeMap<String, u64>, String> {
        use std::io::{Read, Write};
        let mut stream =
            std::net::TcpStream::connect(self.statistics).map_err(|e| e.to_string())?;
        stream
            .write_all(b"GET /json/v1/server HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .map_err(|e| e.to_string())?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .map_err(|e| e.to_string())?;
        let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
        let stats: serde_json::Value = serde_json::from_str(body)
            .map_err(|e| format!("BIND statistics are not JSON ({e}): {response}"))?;
        let count = |section: &str, key: &str| stats[section][key].as_u64().unwrap_or(0);
        let transfers = count("qtypes", "AXFR") + count("qtypes", "IXFR");
        let mut requests = std::collections::BTreeMap::new();
        if let Some(opcodes) = stats["opcodes"].as_object() {
            for (opcode, n) in opcodes {
                let n = n.as_u64().unwrap_or(0);
                if n > 0 {
                    requests.insert(opcode.clone(), n);
                }
            }
        }
        if let Some(queries) = requests.get_mut("QUERY") {
            *queries = queries.saturating_sub(transfers);
        }
        if transfers > 0 {
            requests.insert("AXFR/IXFR".into(), transfers);
        }
        Ok(requests)
    }

    /// What named logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.daemon.dir.join("named.log")).unwrap_or_default()
    }
}

/// The `options` block of a `named.conf` for a BIND the tests start: in `dir`, authoritative
/// only, on loopback `port`, with `extra` statements.
pub(crate) fn named_options(dir: &std::path::Path, port: u16, extra: &str) -> String {
    let d = dir.display();
    format!(
        r#"options {{
  directory "{d}";
  listen-on port {port} {{ 127.0.0.1; }};
  listen-on-v6 {{ none; }};
  pid-file "{d}/named.pid";
  session-keyfile "{d}/session.key";
  recursion no;
  allow-query {{ any; }};
  dnssec-validation no;
{extra}}};"#
    )
}
