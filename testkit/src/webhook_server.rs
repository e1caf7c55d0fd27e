//! external-dns v0.21.0 (built by `e2e/testbed/external-dns.sh`) running `--webhook-server` in
//! front of a real DNS server: PowerDNS through its `pdns` provider, or BIND through its
//! `rfc2136` provider. The webhook provider's tests talk to it as Meridian would to any webhook.
//! Killed on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use meridian_providers::rfc2136::Rfc2136Config;

use crate::powerdns::PowerDns;

/// Where `make test` puts external-dns (`e2e/testbed/external-dns.sh --print-dir`).
pub const EXTERNAL_DNS_DIR_ENV: &str = "MERIDIAN_EXTERNAL_DNS_DIR";

/// A running `external-dns --webhook-server`.
#[derive(Debug)]
pub struct WebhookServer {
    child: Child,
    log: PathBuf,
    /// How it was started, to start it again on the same port.
    command: Vec<String>,
    port: u16,
    /// The webhook's URL (`http://127.0.0.1:<port>`).
    pub url: String,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

impl WebhookServer {
    /// external-dns's `pdns` provider in front of `pdns`, for the domain `zone`.
    pub async fn powerdns(pdns: &PowerDns, zone: &str) -> Result<Self, String> {
        Self::start(
            zone,
            &[
                "--provider=pdns".to_string(),
                format!("--pdns-server={}", pdns.api),
                format!("--pdns-api-key={}", pdns.api_key),
            ],
        )
        .await
    }

    /// external-dns's `rfc2136` provider in front of the server and zone of `config`.
    pub async fn rfc2136(config: &Rfc2136Config) -> Result<Self, String> {
        Self::start(
            &config.zone,
            &[
                "--provider=rfc2136".to_string(),
                format!("--rfc2136-host={}", config.server.ip()),
                format!("--rfc2136-port={}", config.server.port()),
                format!("--rfc2136-zone={}", config.zone),
                format!("--rfc2136-tsig-keyname={}", config.key_name),
                format!("--rfc2136-tsig-secret={}", config.secret),
                format!("--rfc2136-tsig-secret-alg={}", config.algorithm),
                "--rfc2136-tsig-axfr".to_string(),
            ],
        )
        .await
    }

    /// external-dns `--webhook-server` with `provider` flags, serving the domain `zone`; waits
    /// until it answers the protocol's negotiation.
    pub async fn start(zone: &str, provider: &[String]) -> Result<Self, String> {
        let dir = std::env::var_os(EXTERNAL_DNS_DIR_ENV).ok_or_else(|| {
            format!("{EXTERNAL_DNS_DIR_ENV} is not set (make test sets it; e2e/testbed/external-dns.sh --print-dir)")
        })?;
        let binary = PathBuf::from(dir).join("external-dns");
        let port = crate::bind_server::free_dns_port()?;
        let metrics = crate::bind_server::free_dns_port()?;
        let log = std::env::temp_dir().join(format!(
            "meridian-webhook-{:016x}.log",
            rand::random::<u64>()
        ));
        let mut command = vec![
            binary.display().to_string(),
            "--webhook-server".into(),
            "--source=fake".into(),
            format!("--domain-filter={zone}"),
            format!("--metrics-address=127.0.0.1:{metrics}"),
        ];
        command.extend(provider.iter().cloned());
        let child = spawn(&command, port, &log)?;
        let mut server = WebhookServer {
            child,
            log,
            command,
            port,
            url: format!("http://127.0.0.1:{port}"),
        };
        server.answering().await?;
        Ok(server)
    }

    /// Stops it (its port then refuses connections), as a webhook that went away.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again on the same port, after [`Self::stop`].
    pub async fn restart(&mut self) -> Result<(), String> {
        self.stop();
        self.child = spawn(&self.command, self.port, &self.log)?;
        self.answering().await
    }

    /// Waits until it answers the protocol's negotiation.
    async fn answering(&mut self) -> Result<(), String> {
        for _ in 0..100 {
            let negotiated = crate::http_exchange(
                &format!("127.0.0.1:{}", self.port),
                "GET / HTTP/1.0\r\nHost: localhost\r\nAccept: application/external.dns.webhook+json;version=1\r\n\r\n",
            );
            if negotiated.is_ok_and(|(status, _)| status == 200) {
                return Ok(());
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "external-dns --webhook-server exited ({status}):\n{}",
                    self.log()
                ));
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        Err(format!(
            "external-dns --webhook-server did not answer:\n{}",
            self.log()
        ))
    }

    /// What external-dns logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// external-dns as `command` says, listening on `port` (the test bed's copy takes its address
/// from the environment; upstream's listens on 127.0.0.1:8888 only, one at a time), appending
/// to `log`.
fn spawn(command: &[String], port: u16, log: &std::path::Path) -> Result<Child, String> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .map_err(|e| e.to_string())?;
    Command::new("setpriv")
        .args(["--pdeathsig", "KILL", "--"])
        .args(command)
        .env("EXTERNAL_DNS_WEBHOOK_LISTEN", format!("127.0.0.1:{port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", command[0]))
}
