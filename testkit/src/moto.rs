//! moto's Route53 server on loopback, for the Route53 tests and `make bench-providers`.
//!
//! moto is installed into a cached virtualenv by `scripts/moto-venv.sh` (the Makefile exports
//! its path as `MERIDIAN_MOTO_SERVER`) and started through `testkit/moto_server.py`, which
//! corrects one moto bug (see that file). The process is killed on drop, and by the kernel if
//! the owning process dies first.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use meridian_providers::route53::Route53Credentials;

/// A running moto server.
#[derive(Debug)]
pub struct MotoServer {
    child: Child,
    pub port: u16,
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn repository() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn moto_server_path() -> std::io::Result<PathBuf> {
    if let Some(path) = std::env::var_os("MERIDIAN_MOTO_SERVER") {
        return Ok(PathBuf::from(path));
    }
    let output = Command::new("bash")
        .arg(repository().join("scripts/moto-venv.sh"))
        .output()?;
    if !output.status.success() {
        return Err(std::io::Error::other(format!(
            "installing moto failed: {}",
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(PathBuf::from(
        String::from_utf8_lossy(&output.stdout).trim(),
    ))
}

impl MotoServer {
    /// Starts moto on a free loopback port, which moto binds itself and reports once it
    /// listens (a port picked here and handed over could be taken by another test meanwhile).
    /// moto imports for several seconds, longer on a loaded machine: it has 60 s.
    pub fn start() -> std::io::Result<Self> {
        use std::io::BufRead;
        let python = moto_server_path()?.with_file_name("python3");
        // moto's own log, for a failure to start (a pipe nobody drains would fill and stall it).
        let log = tempfile::NamedTempFile::new()?;
        let mut child = Command::new("setpriv")
            .args(["--pdeathsig", "KILL", "--"])
            .arg(python)
            .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("moto_server.py"))
            .stdout(Stdio::piped())
            .stderr(log.reopen()?)
            .spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        // The server owns the process from here: it is killed however this ends.
        let mut server = MotoServer { child, port: 0 };
        let (said, first_line) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            // A moto that dies closes its stdout: the read ends either way.
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = said.send(line);
        });
        let line = first_line
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_default();
        match line.trim().parse::<u16>() {
            Ok(port) => {
                server.port = port;
                Ok(server)
            }
            Err(_) => {
                let log = std::fs::read_to_string(log.path()).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                Err(std::io::Error::other(format!(
                    "moto did not start within 60 s (it said {line:?}); its log ends:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                )))
            }
        }
    }

    pub fn address(&self) -> std::net::SocketAddr {
        ([127, 0, 0, 1], self.port).into()
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address())
    }

    /// Credentials moto accepts, pointing at `endpoint` (moto itself, or a proxy before it).
    pub fn credentials(&self, endpoint: &str) -> Route53Credentials {
        Route53Credentials {
            access_key_id: "testing".into(),
            secret_access_key: "testing".into(),
            region: "us-east-1".into(),
            endpoint: Some(endpoint.to_string()),
        }
    }

    /// A Route53 provider talking to moto directly, allowed `per_second` requests a second.
    pub fn provider(&self, per_second: u32) -> meridian_providers::route53::Route53Provider {
        meridian_providers::route53::Route53Provider::new(
            &self.credentials(&self.endpoint()),
            std::sync::Arc::new(meridian_providers::budget::RequestBudget::per_second(
                per_second,
            )),
        )
    }

    /// Creates a hosted zone directly in moto (not through any proxy).
    pub async fn create_zone(&self, domain: &str) -> Result<(), String> {
        use aws_sdk_route53::config::{BehaviorVersion, Credentials, Region};
        let config = aws_sdk_route53::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .http_client(meridian_providers::aws_identity::http_client())
            .region(Region::new("us-east-1"))
            .credentials_provider(Credentials::new("testing", "testing", None, None, "moto"))
            .endpoint_url(self.endpoint())
            .build();
        aws_sdk_route53::Client::from_conf(config)
            .create_hosted_zone()
            .name(domain)
            .caller_reference(domain)
            .send()
            .await
            .map(drop)
            .map_err(|e| aws_smithy_types::error::display::DisplayErrorContext(&e).to_string())
    }
}
