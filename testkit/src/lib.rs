//! Meridian's test kit: the real servers and the fakes that tests and benchmarks run against.
//! Only tests, benchmarks and the test bed depend on it; no production binary links it.
//!
//! - [`moto`]: moto's Route53 server (real AWS API semantics, from PyPI);
//! - [`bind_server`]: BIND 9 serving one zone with TSIG-signed updates (RFC2136);
//! - [`powerdns`]: PowerDNS serving one zone from SQLite, written through its HTTP API;
//! - [`webhook_server`]: external-dns `--webhook-server` in front of PowerDNS or BIND;
//! - [`secondaries`]: BIND 9 and Knot DNS as secondaries following a Meridian zone (NOTIFY, IXFR);
//! - [`counting_proxy`]: counts Route53 calls and injects throttling between a provider and moto;
//! - [`azure_fake`]: launches the request-checking FAKE of Azure DNS and Traffic Manager (Azure
//!   has no emulator);
//! - [`cloud_dns_fake`]: launches the request-checking FAKE of Cloud DNS (Google has no emulator);
//! - [`in_memory`]: a FAKE provider that keeps zones in memory under the engine's strict rules;
//! - [`backends`]: HTTP backends for health probes, failing on demand;
//! - [`geo_db`]: small MaxMind-format databases for GEO answers;
//! - [`unbound`]: Unbound as a validating resolver of one signed zone (DNSSEC);
//! - [`ports`]: loopback ports for servers started as child processes, reserved across test
//!   processes and outside the kernel's ephemeral range;
//! - [`fixtures`]: the objects of Meridian's kinds (and the upstream ones it reads) as builders;
//! - [`trees`]: the GEO/weighted record tree tests publish, and the clusters it is built from.

pub mod azure_fake;
pub mod backends;
pub mod bind_server;
pub mod cloud_dns_fake;
pub mod counting_proxy;
pub mod fixtures;
pub mod geo_db;
pub mod in_memory;
pub mod moto;
pub mod ports;
pub mod powerdns;
pub mod secondaries;
pub mod trees;
pub mod unbound;
pub mod webhook_server;

/// One plain HTTP/1.0 exchange with `address` (`host:port`): sends `request` as it is and
/// returns the answer's status and body.
pub fn http_exchange(address: &str, request: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(address).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .map_err(|e| e.to_string())?;
    stream
        .write_all(request.as_bytes())
        .map_err(|e| e.to_string())?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .map_err(|e| e.to_string())?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP answer: {response:.200}"))?;
    let body = response.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    Ok((status, body.to_string()))
}

/// The ID of the zone for `domain` at `provider` (which must list it).
pub async fn zone_id_of<P: meridian_providers::Provider>(provider: &P, domain: &str) -> String {
    provider
        .list_zones()
        .await
        .unwrap_or_else(|error| panic!("the provider lists its zones: {error}"))
        .into_iter()
        .find(|zone| zone.domain.trim_end_matches('.') == domain.trim_end_matches('.'))
        .unwrap_or_else(|| panic!("the zone {domain} is listed"))
        .id
}

/// Runs a fake's Python script under `command` and returns it with the ports it prints on its
/// first line (`listening on <port> [<port> ...]`).
pub(crate) fn spawn_fake(mut command: std::process::Command) -> (std::process::Child, Vec<u16>) {
    use std::io::BufRead;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .expect("python3 runs the fake");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ports: Vec<u16> = line
        .trim()
        .strip_prefix("listening on ")
        .map(|p| p.split(' ').filter_map(|p| p.parse().ok()).collect())
        .unwrap_or_default();
    if ports.is_empty() {
        panic!("the fake did not start: {line:?}");
    }
    (child, ports)
}

/// A plain HTTP/1.1 request to a fake's loopback `port`, its body returned (the fakes' test
/// helpers need no HTTP client).
pub(crate) fn loopback_request(port: u16, method: &str, path: &str) -> String {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .unwrap();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (_, body) = response.split_once("\r\n\r\n").expect("an HTTP response");
    body.to_string()
}
