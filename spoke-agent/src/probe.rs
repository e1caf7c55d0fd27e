//! Health probes of record-tree leaves, from this cluster's vantage point.
//!
//! A probe is an HTTP or HTTPS GET of `<protocol>://<host>:<port><path>` whose TCP connection
//! goes to the leaf's address while the real host travels in `Host` and in TLS SNI, so the
//! probe sees exactly what a client sent there by DNS would see. The request is written by
//! hand (HTTP/1.1, `Connection: close`) and only the status line is read: a probe is one
//! connection and a few hundred bytes, so one agent can probe thousands of leaves.
//!
//! [`ProbeState`] turns outcomes into health: unhealthy once `failure_threshold` consecutive
//! failures are seen, healthy again on the first success.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use meridian_controllers::decide::probe_policy::ProbeAddressPolicy;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpSocket;

/// `HTTP` or `HTTPS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Http,
    Https,
}

/// One probe: where to connect and what to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSpec {
    /// The host clients use (Host header and SNI).
    pub host: String,
    /// The leaf's address: where the connection goes. An IP address, or a hostname (a
    /// gateway's load balancer) resolved at each probe.
    pub address: String,
    pub port: u16,
    pub path: String,
    pub protocol: Protocol,
    /// Status codes that count as healthy (default 200 and 201).
    pub expected: Vec<u16>,
    /// Extra request headers (from the probe's Secret); never logged.
    pub headers: Vec<(String, String)>,
    pub allow_insecure_certificate: bool,
    pub timeout: Duration,
}

/// TLS settings shared by every probe of an agent.
#[derive(Debug, Clone)]
pub struct Prober {
    verified: Arc<rustls::ClientConfig>,
    insecure: Arc<rustls::ClientConfig>,
    /// Local address to connect from (one per agent in tests of partial reachability).
    source: Option<IpAddr>,
    /// Where probes may not connect, checked on the address connected to (after resolving).
    policy: ProbeAddressPolicy,
}

impl Prober {
    /// A prober trusting the system's CA certificates plus `extra_roots` (DER), refusing the
    /// addresses `policy` refuses.
    pub fn new(
        extra_roots: &[Vec<u8>],
        source: Option<IpAddr>,
        policy: ProbeAddressPolicy,
    ) -> Self {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        for certificate in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(certificate);
        }
        for der in extra_roots {
            let _ = roots.add(der.clone().into());
        }
        let verified = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let insecure = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate(provider)))
            .with_no_client_auth();
        Prober {
            verified: Arc::new(verified),
            insecure: Arc::new(insecure),
            source,
            policy,
        }
    }

    /// Runs one probe; `Err` says why it failed.
    pub async fn probe(&self, spec: &ProbeSpec) -> Result<u16, String> {
        tokio::time::timeout(spec.timeout, self.probe_inner(spec))
            .await
            .map_err(|_| format!("no answer within {:?}", spec.timeout))?
    }

    async fn probe_inner(&self, spec: &ProbeSpec) -> Result<u16, String> {
        // Written before anything is connected: a refused request opens no connection.
        let request = request_head(spec)?;
        let target = match spec.address.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, spec.port),
            Err(_) => tokio::net::lookup_host((spec.address.as_str(), spec.port))
                .await
                .map_err(|e| format!("resolving {}: {e}", spec.address))?
                .next()
                .ok_or_else(|| format!("{} has no address", spec.address))?,
        };
        // Whatever the hub wrote: a compromised or older hub, a probe written by hand, or a
        // hostname resolving to the metadata service gets no connection.
        if let Some(refusal) = self.policy.refuses(target.ip()) {
            return Err(format!("not probed: {}: {refusal}", target.ip()));
        }
        let socket = if target.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(|e| format!("socket: {e}"))?;
        if let Some(source) = self.source {
            socket
                .bind(SocketAddr::new(source, 0))
                .map_err(|e| format!("binding {source}: {e}"))?;
        }
        let stream = socket
            .connect(target)
            .await
            .map_err(|e| format!("connecting to {target}: {e}"))?;
        match spec.protocol {
            Protocol::Http => exchange(stream, &request).await,
            Protocol::Https => {
                let config = if spec.allow_insecure_certificate {
                    self.insecure.clone()
                } else {
                    self.verified.clone()
                };
                let name = ServerName::try_from(spec.host.clone())
                    .map_err(|_| format!("{} is not a valid TLS server name", spec.host))?;
                let tls = tokio_rustls::TlsConnector::from(config)
                    .connect(name, stream)
                    .await
                    .map_err(|e| format!("TLS with {}: {e}", spec.host))?;
                exchange(tls, &request).await
            }
        }
        .and_then(|status| {
            if spec.expected.contains(&status) {
                Ok(status)
            } else {
                Err(format!(
                    "status {status}, expected one of {:?}",
                    spec.expected
                ))
            }
        })
    }
}

/// The request a probe sends: a GET of the path with the host, the agent's own headers and the
/// probe's extra headers. Refused, naming the field, when the path, host or a header would change
/// the request's shape: the schema refuses such paths and hosts, but a probe may come from an
/// older schema or straight from a writer on the hub, and header Secrets have no schema at all.
pub fn request_head(spec: &ProbeSpec) -> Result<String, String> {
    // The request-target and Host: visible ASCII only (no space, CR, LF or other control).
    let visible = |text: &str| text.bytes().all(|b| b.is_ascii_graphic());
    if !spec.path.starts_with('/') || !visible(&spec.path) {
        return Err(format!(
            "refused: the path {:?} is not a path of visible ASCII characters",
            spec.path
        ));
    }
    if spec.host.is_empty() || !visible(&spec.host) || spec.host.contains(['/', '@']) {
        return Err(format!(
            "refused: the host {:?} is not a host name",
            spec.host
        ));
    }
    let default_port = match spec.protocol {
        Protocol::Http => 80,
        Protocol::Https => 443,
    };
    let host = if spec.port == default_port {
        spec.host.clone()
    } else {
        format!("{}:{}", spec.host, spec.port)
    };
    let mut request = format!(
        "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: meridian-agent\r\nConnection: close\r\n",
        spec.path
    );
    for (name, value) in &spec.headers {
        // A name is an HTTP token; a value any visible character, space or tab. The value is
        // never echoed: it may be a credential.
        let token = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        if !token {
            return Err(format!(
                "refused: the header name {name:?} is not an HTTP token"
            ));
        }
        if !value
            .bytes()
            .all(|b| b == b'\t' || b == b' ' || b.is_ascii_graphic() || b >= 0x80)
        {
            return Err(format!(
                "refused: the value of header {name} holds a control character (CR, LF or other)"
            ));
        }
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str("\r\n");
    Ok(request)
}

/// Sends `request` and reads the status code.
async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &str,
) -> Result<u16, String> {
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut head = Vec::with_capacity(64);
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n") && head.len() < 512 {
        match stream.read(&mut byte).await {
            Ok(0) => break,
            Ok(_) => head.push(byte[0]),
            Err(e) => return Err(format!("reading the response: {e}")),
        }
    }
    parse_status_line(&String::from_utf8_lossy(&head))
}

/// The status code of an HTTP/1.x status line.
pub fn parse_status_line(line: &str) -> Result<u16, String> {
    let mut parts = line.split_whitespace();
    match (
        parts.next(),
        parts.next().and_then(|c| c.parse::<u16>().ok()),
    ) {
        (Some(version), Some(code)) if version.starts_with("HTTP/1.") => Ok(code),
        _ => Err(format!("not an HTTP response: {:?}", line.trim())),
    }
}

/// Health from consecutive outcomes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeState {
    pub consecutive_failures: u32,
    /// `None` until the first outcome.
    pub healthy: Option<bool>,
    pub reason: Option<String>,
}

impl ProbeState {
    /// Records an outcome: a success makes the leaf healthy at once; failures make it
    /// unhealthy once `failure_threshold` of them are consecutive.
    pub fn record(&mut self, outcome: &Result<u16, String>, failure_threshold: u32) {
        match outcome {
            Ok(_) => {
                self.consecutive_failures = 0;
                self.healthy = Some(true);
                self.reason = None;
            }
            Err(reason) => {
                self.consecutive_failures = self.consecutive_failures.saturating_add(1);
                self.reason = Some(reason.clone());
                if self.consecutive_failures >= failure_threshold.max(1) {
                    self.healthy = Some(false);
                }
            }
        }
    }
}

/// Accepts any server certificate: only for probes whose policy allows insecure certificates.
#[derive(Debug)]
struct AcceptAnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        certificate: &rustls::pki_types::CertificateDer<'_>,
        signature: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            certificate,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        certificate: &rustls::pki_types::CertificateDer<'_>,
        signature: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            certificate,
            signature,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_parse_and_garbage_does_not() {
        assert_eq!(parse_status_line("HTTP/1.1 200 OK\r\n"), Ok(200));
        assert_eq!(
            parse_status_line("HTTP/1.0 503 Service Unavailable"),
            Ok(503)
        );
        assert!(parse_status_line("SSH-2.0-OpenSSH").is_err());
        assert!(parse_status_line("").is_err());
    }

    #[test]
    fn ordinary_requests_are_written_as_they_are() {
        let spec = ProbeSpec {
            host: "api.example.com".into(),
            address: "192.0.2.1".into(),
            port: 8443,
            path: "/health?check=all&x=%20y".into(),
            protocol: Protocol::Https,
            expected: vec![200],
            headers: vec![("Authorization".into(), "Bearer a.b c\tdé".into())],
            allow_insecure_certificate: false,
            timeout: Duration::from_secs(1),
        };
        assert_eq!(
            request_head(&spec).unwrap(),
            "GET /health?check=all&x=%20y HTTP/1.1\r\nHost: api.example.com:8443\r\n\
             User-Agent: meridian-agent\r\nConnection: close\r\n\
             Authorization: Bearer a.b c\tdé\r\n\r\n"
        );
    }

    #[test]
    fn unhealthy_after_the_threshold_and_healthy_again_on_a_success() {
        let mut state = ProbeState::default();
        let fail = Err("status 503".to_string());
        state.record(&fail, 3);
        state.record(&fail, 3);
        assert_eq!(state.healthy, None, "two failures of three: not yet judged");
        state.record(&fail, 3);
        assert_eq!(state.healthy, Some(false));
        assert_eq!(state.consecutive_failures, 3);
        state.record(&Ok(200), 3);
        assert_eq!(state.healthy, Some(true));
        assert_eq!(state.consecutive_failures, 0);
        state.record(&fail, 3);
        assert_eq!(
            state.healthy,
            Some(true),
            "one failure does not flap a healthy leaf"
        );
    }
}

/// One leaf to keep probing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leaf {
    pub spec: ProbeSpec,
    pub interval: Duration,
    pub failure_threshold: u32,
}

/// The latest state of a leaf, as the probe loop reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeafUpdate<K> {
    pub key: K,
    pub state: ProbeState,
}

/// Most probes in flight at once: a bound on sockets, whatever the number of leaves.
pub const MAX_IN_FLIGHT: usize = 256;

/// A new leaf's first probe comes at a random point of this window (or of its interval, if
/// shorter): soon, so a new record is published quickly, yet spread, so thousands of new
/// leaves do not burst.
pub const FIRST_PROBE_WINDOW: Duration = Duration::from_secs(5);

/// Keeps probing a changing set of leaves, each every `interval` with ±10 % jitter, sending
/// each leaf's state after every probe. A leaf whose settings change starts over; a removed
/// leaf stops. Dropping the runner stops every probe.
#[derive(Debug)]
pub struct ProbeRunner<K> {
    prober: Arc<Prober>,
    in_flight: Arc<tokio::sync::Semaphore>,
    updates: tokio::sync::mpsc::Sender<LeafUpdate<K>>,
    running: std::collections::HashMap<K, (Leaf, tokio::task::AbortHandle)>,
    tasks: tokio::task::JoinSet<()>,
}

impl<K> ProbeRunner<K>
where
    K: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
{
    pub fn new(prober: Arc<Prober>, updates: tokio::sync::mpsc::Sender<LeafUpdate<K>>) -> Self {
        ProbeRunner {
            prober,
            in_flight: Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT)),
            updates,
            running: Default::default(),
            tasks: tokio::task::JoinSet::new(),
        }
    }

    /// Probes exactly `leaves` from now on; returns the keys that stopped.
    pub fn sync(&mut self, mut leaves: std::collections::HashMap<K, Leaf>) -> Vec<K> {
        let stopped: Vec<K> = self
            .running
            .iter()
            .filter(|(key, (leaf, _))| leaves.get(*key) != Some(leaf))
            .map(|(key, _)| key.clone())
            .collect();
        for key in &stopped {
            if let Some((_, task)) = self.running.remove(key) {
                task.abort();
            }
        }
        for (key, leaf) in leaves.drain() {
            if self.running.contains_key(&key) {
                continue;
            }
            let task = self.tasks.spawn(probe_leaf(
                self.prober.clone(),
                self.in_flight.clone(),
                self.updates.clone(),
                key.clone(),
                leaf.clone(),
            ));
            self.running.insert(key, (leaf, task));
        }
        // Reap the aborted tasks.
        while self.tasks.try_join_next().is_some() {}
        stopped
            .into_iter()
            .filter(|key| !self.running.contains_key(key))
            .collect()
    }

    /// How many leaves are being probed.
    pub fn len(&self) -> usize {
        self.running.len()
    }

    pub fn is_empty(&self) -> bool {
        self.running.is_empty()
    }
}

async fn probe_leaf<K: Clone>(
    prober: Arc<Prober>,
    in_flight: Arc<tokio::sync::Semaphore>,
    updates: tokio::sync::mpsc::Sender<LeafUpdate<K>>,
    key: K,
    leaf: Leaf,
) {
    use rand::Rng;
    let window = leaf.interval.min(FIRST_PROBE_WINDOW);
    let first = rand::rng().random_range(Duration::ZERO..=window);
    tokio::time::sleep(first).await;
    let mut state = ProbeState::default();
    loop {
        // Probes start an interval apart, however long one takes: a gateway that hangs must
        // not stretch the time until its second failure by a timeout per probe.
        let started = tokio::time::Instant::now();
        let outcome = {
            let _permit = in_flight
                .acquire()
                .await
                .expect("the semaphore is never closed");
            prober.probe(&leaf.spec).await
        };
        state.record(&outcome, leaf.failure_threshold);
        let update = LeafUpdate {
            key: key.clone(),
            state: state.clone(),
        };
        if updates.send(update).await.is_err() {
            return;
        }
        let jitter = rand::rng().random_range(0.9..=1.1);
        tokio::time::sleep_until(started + leaf.interval.mul_f64(jitter)).await;
    }
}
