//! Unbound (Debian `unbound`) on loopback as a validating resolver for one zone: the zone is a
//! stub zone at given nameservers, its DS record is the only trust anchor, and client subnets
//! (ECS) are sent on, so GEO answers follow the client. The process is killed and its
//! directory removed on drop.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::bind_server::{Daemon, free_dns_port};

/// A running validating Unbound.
#[derive(Debug)]
pub struct ValidatingResolver {
    daemon: Daemon,
    pub address: SocketAddr,
}

impl ValidatingResolver {
    /// Starts Unbound resolving `zone` at `nameservers`, trusting `trust_anchor` (a DS record
    /// in zone-file form), and waits until it answers.
    pub async fn start(
        zone: &str,
        nameservers: &[SocketAddr],
        trust_anchor: &str,
    ) -> Result<Self, String> {
        let dir =
            std::env::temp_dir().join(format!("meridian-unbound-{:016x}", rand::random::<u64>()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let port = free_dns_port()?;
        let address = SocketAddr::from(([127, 0, 0, 1], port));
        let config = dir.join("unbound.conf");
        std::fs::write(
            &config,
            config_text(&dir, address, zone, nameservers, &[], Some(trust_anchor)),
        )
        .map_err(|e| e.to_string())?;
        let log = std::fs::File::create(dir.join("unbound.log")).map_err(|e| e.to_string())?;
        let child = Command::new("/usr/sbin/unbound")
            .args(["-d", "-c"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting unbound (Debian unbound): {e}"))?;
        let resolver = ValidatingResolver {
            daemon: Daemon { child, dir },
            address,
        };
        for _ in 0..100 {
            let answered = Command::new("dig")
                .args(["@127.0.0.1", "-p", &port.to_string(), "+time=1", "+tries=1"])
                .args(["localhost.", "A"])
                .output()
                .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).contains("status:"));
            if answered {
                return Ok(resolver);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Err(format!(
            "Unbound did not answer; its log: {}",
            resolver.log()
        ))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.daemon.dir.join("unbound.log")).unwrap_or_default()
    }
}

/// Unbound's configuration for a resolver on loopback at `listen` (its files in `dir`): it
/// recurses only into the stub zone `zone` at `nameservers` (this machine reaches no other DNS
/// server), caches nothing longer than its TTL, never serves stale answers, and asks with the
/// client's subnet (ECS) to them and to the servers of sub-zones they delegate to
/// (`delegated_servers`, found by referral), so GEO answers follow the client. With a
/// `trust_anchor` (a DS record in zone-file form) it validates the zone from it; without, it
/// treats the zone as unsigned.
pub fn config_text(
    dir: &std::path::Path,
    listen: SocketAddr,
    zone: &str,
    nameservers: &[SocketAddr],
    delegated_servers: &[std::net::IpAddr],
    trust_anchor: Option<&str>,
) -> String {
    let stub_addrs: String = nameservers
        .iter()
        .map(|ns| format!("  stub-addr: {}@{}\n", ns.ip(), ns.port()))
        .collect();
    let ecs_servers: String = nameservers
        .iter()
        .map(|ns| ns.ip())
        .chain(delegated_servers.iter().copied())
        .map(|ip| format!("  send-client-subnet: {ip}\n"))
        .collect();
    let (modules, validation) = match trust_anchor {
        Some(anchor) => (
            "subnetcache validator iterator",
            format!("  val-log-level: 2\n  trust-anchor: \"{anchor}\"\n"),
        ),
        None => (
            "subnetcache iterator",
            format!("  domain-insecure: \"{zone}.\"\n"),
        ),
    };
    format!(
        "server:
  interface: {ip}
  port: {port}
  do-daemonize: no
  username: \"\"
  chroot: \"\"
  directory: \"{dir}\"
  pidfile: \"{dir}/unbound.pid\"
  use-syslog: no
  logfile: \"\"
  verbosity: 1
  log-servfail: yes
  access-control: 127.0.0.0/8 allow
  do-not-query-localhost: no
  module-config: \"{modules}\"
{ecs_servers}  client-subnet-always-forward: yes
  max-client-subnet-ipv4: 24
  cache-min-ttl: 0
  serve-expired: no
  prefetch: no
  local-zone: \"{zone}.\" transparent
{validation}remote-control:
  control-enable: no
stub-zone:
  name: \"{zone}.\"
{stub_addrs}",
        ip = listen.ip(),
        port = listen.port(),
        dir = dir.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbound_is_a_stub_resolver_for_the_zone_only_with_ecs_validating_only_with_an_anchor() {
        let config = |anchor| {
            config_text(
                std::path::Path::new("/tmp/x"),
                "127.0.0.1:5300".parse().unwrap(),
                "example.com",
                &["10.251.0.5:53".parse().unwrap()],
                &["10.251.0.6".parse().unwrap()],
                anchor,
            )
        };
        for text in [
            config(None),
            config(Some("example.com. 3600 IN DS 1 13 2 AB")),
        ] {
            assert!(
                text.contains("stub-zone:\n  name: \"example.com.\"\n  stub-addr: 10.251.0.5@53\n")
            );
            assert!(text.contains("send-client-subnet: 10.251.0.5\n"));
            assert!(text.contains("send-client-subnet: 10.251.0.6\n"));
            assert!(text.contains("interface: 127.0.0.1\n  port: 5300\n"));
        }
        let plain = config(None);
        assert!(plain.contains("module-config: \"subnetcache iterator\""));
        assert!(plain.contains("domain-insecure: \"example.com.\""));
        assert!(!plain.contains("trust-anchor"));
        let validating = config(Some("example.com. 3600 IN DS 1 13 2 AB"));
        assert!(validating.contains("module-config: \"subnetcache validator iterator\""));
        assert!(validating.contains("trust-anchor: \"example.com. 3600 IN DS 1 13 2 AB\""));
        assert!(!validating.contains("domain-insecure"));
    }
}
