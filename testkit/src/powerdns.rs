//! PowerDNS (Debian `pdns-server`) on loopback with its SQLite backend and HTTP API, serving one
//! zone: the server behind external-dns's `pdns` provider in the webhook tests, and a plain
//! records provider whose zone Meridian delegates from. Killed and removed on drop.

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use crate::bind_server::{Daemon, free_dns_port};

/// Where Debian's `pdns-backend-sqlite3` keeps the schema of its database.
const SQLITE_SCHEMA: &str = "/usr/share/pdns-backend-sqlite3/schema/schema.sqlite3.sql";

/// A running PowerDNS serving one zone.
#[derive(Debug)]
pub struct PowerDns {
    daemon: Daemon,
    /// Its HTTP API (`http://127.0.0.1:<port>`), as external-dns's `--pdns-server` takes it.
    pub api: String,
    /// The API's key (`X-API-Key`).
    pub api_key: String,
    /// Where it answers DNS (UDP and TCP).
    pub dns: SocketAddr,
}

impl PowerDns {
    /// Starts PowerDNS serving the empty zone `zone` (its SOA and one NS record) and waits
    /// until its API answers.
    pub async fn start(zone: &str) -> Result<Self, String> {
        let dir =
            std::env::temp_dir().join(format!("meridian-pdns-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let port = free_dns_port()?;
        let api_port = free_dns_port()?;
        let api_key = format!("{:032x}", rand::random::<u128>());
        let database = dir.join("pdns.sqlite3");
        let schema = std::fs::File::open(SQLITE_SCHEMA)
            .map_err(|e| format!("{SQLITE_SCHEMA} (Debian pdns-backend-sqlite3): {e}"))?;
        let created = Command::new("sqlite3")
            .arg(&database)
            .stdin(schema)
            .output()
            .map_err(|e| format!("sqlite3 (Debian sqlite3): {e}"))?;
        if !created.status.success() {
            return Err(format!(
                "creating PowerDNS's database: {}",
                String::from_utf8_lossy(&created.stderr)
            ));
        }
        let config = [
            "launch=gsqlite3".to_string(),
            format!("gsqlite3-database={}", database.display()),
            "local-address=127.0.0.1".into(),
            format!("local-port={port}"),
            format!("socket-dir={}", dir.display()),
            "api=yes".into(),
            format!("api-key={api_key}"),
            "webserver=yes".into(),
            "webserver-address=127.0.0.1".into(),
            format!("webserver-port={api_port}"),
            "webserver-allow-from=127.0.0.1".into(),
            // Answers follow writes at once (no packet or query cache).
            "cache-ttl=0".into(),
            "query-cache-ttl=0".into(),
            "negquery-cache-ttl=0".into(),
            "disable-syslog=yes".into(),
            "loglevel=4".into(),
        ];
        std::fs::write(dir.join("pdns.conf"), config.join("\n") + "\n")
            .map_err(|e| e.to_string())?;
        let zone = zone.trim_end_matches('.');
        let made = Command::new("pdnsutil")
            .arg(format!("--config-dir={}", dir.display()))
            .args(["create-zone", zone, &format!("ns1.{zone}")])
            .output()
            .map_err(|e| format!("pdnsutil (Debian pdns-server): {e}"))?;
        if !made.status.success() {
            return Err(format!(
                "pdnsutil create-zone {zone}: {}",
                String::from_utf8_lossy(&made.stderr)
            ));
        }
        let log = std::fs::File::create(dir.join("pdns.log")).map_err(|e| e.to_string())?;
        let child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--", "pdns_server"])
            .args(["--guardian=no", "--daemon=no"])
            .arg(format!("--config-dir={}", dir.display()))
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting pdns_server (Debian pdns-server): {e}"))?;
        let server = PowerDns {
            daemon: Daemon { child, dir },
            api: format!("http://127.0.0.1:{api_port}"),
            api_key,
            dns: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        for _ in 0..100 {
            if server
                .get("/api/v1/servers/localhost/zones")
                .is_ok_and(|(status, _)| status == 200)
            {
                return Ok(server);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Err(format!("PowerDNS's API did not answer:\n{}", server.log()))
    }

    /// `GET path` at the API: the status and body.
    pub fn get(&self, path: &str) -> Result<(u16, String), String> {
        let address = self.api.trim_start_matches("http://");
        crate::http_exchange(
            address,
            &format!(
                "GET {path} HTTP/1.0\r\nHost: localhost\r\nX-API-Key: {}\r\n\r\n",
                self.api_key
            ),
        )
    }

    /// What PowerDNS logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.daemon.dir.join("pdns.log")).unwrap_or_default()
    }
}
