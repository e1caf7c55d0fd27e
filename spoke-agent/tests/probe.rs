//! The prober against real HTTP and HTTPS servers started by the test on loopback (HTTPS with a
//! self-signed certificate made by rcgen).

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use meridian_agent::probe::{ProbeSpec, ProbeState, Prober, Protocol};
use meridian_controllers::decide::probe_policy::ProbeAddressPolicy;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

const HOST: &str = "api.example.test";

/// How a test server answers one request: from the request head and the client's address.
type Answer = Arc<dyn Fn(&str, IpAddr) -> u16 + Send + Sync>;

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, peer: IpAddr, answer: Answer) {
    let mut head = Vec::new();
    let mut chunk = [0u8; 512];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&chunk[..n]),
        }
    }
    let status = answer(&String::from_utf8_lossy(&head), peer);
    let response = format!("HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// A plain HTTP server on 127.0.0.1.
async fn http_server(answer: Answer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            tokio::spawn(serve(stream, peer.ip(), answer.clone()));
        }
    });
    address
}

/// An HTTPS server on 127.0.0.1 with a self-signed certificate for `HOST`; returns the address
/// and the certificate (DER).
async fn https_server(answer: Answer) -> (SocketAddr, Vec<u8>) {
    let certified = rcgen::generate_simple_self_signed(vec![HOST.to_string()]).unwrap();
    let der = certified.cert.der().to_vec();
    let key =
        rustls::pki_types::PrivateKeyDer::try_from(certified.signing_key.serialize_der()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![der.clone().into()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            let (acceptor, answer) = (acceptor.clone(), answer.clone());
            tokio::spawn(async move {
                if let Ok(tls) = acceptor.accept(stream).await {
                    serve(tls, peer.ip(), answer).await;
                }
            });
        }
    });
    (address, der)
}

fn spec(address: SocketAddr, protocol: Protocol) -> ProbeSpec {
    ProbeSpec {
        host: HOST.into(),
        address: address.ip().to_string(),
        port: address.port(),
        path: "/healthz".into(),
        protocol,
        expected: vec![200, 201],
        headers: vec![],
        allow_insecure_certificate: false,
        timeout: Duration::from_secs(5),
    }
}

#[tokio::test]
async fn expected_codes_host_and_required_headers() {
    // 200 only for the right path, Host and key; 401 without the key; 503 otherwise.
    let answer: Answer = Arc::new(|head, _| {
        // The port is not 80, so it travels in Host too.
        let host_ok = head.contains(&format!("\r\nHost: {HOST}:"));
        match (
            head.starts_with("GET /healthz "),
            host_ok,
            head.contains("X-Probe-Key: s3cret"),
        ) {
            (true, true, true) => 200,
            (true, true, false) => 401,
            _ => 503,
        }
    });
    let address = http_server(answer).await;
    let prober = Prober::new(&[], None, ProbeAddressPolicy::test_bed());
    let mut probe = spec(address, Protocol::Http);
    assert_eq!(
        prober.probe(&probe).await.unwrap_err(),
        "status 401, expected one of [200, 201]"
    );
    probe.headers = vec![("X-Probe-Key".into(), "s3cret".into())];
    assert_eq!(
        prober.probe(&probe).await,
        Ok(200),
        "Host carries the real host, the key is sent"
    );
    probe.path = "/elsewhere".into();
    assert!(prober.probe(&probe).await.is_err());
    probe.expected = vec![503];
    assert_eq!(
        prober.probe(&probe).await,
        Ok(503),
        "expected codes are configurable"
    );
}

#[tokio::test]
async fn self_signed_certificates_are_refused_unless_allowed_and_sni_names_the_host() {
    let (address, der) = https_server(Arc::new(|_, _| 200)).await;
    let mut probe = spec(address, Protocol::Https);
    let strict = Prober::new(&[], None, ProbeAddressPolicy::test_bed());
    let refused = strict.probe(&probe).await.unwrap_err();
    assert!(refused.contains("TLS with api.example.test"), "{refused}");
    probe.allow_insecure_certificate = true;
    assert_eq!(strict.probe(&probe).await, Ok(200));
    // Trusting the certificate, verification passes: the connection went to 127.0.0.1 while
    // SNI and the name checked were the real host's.
    probe.allow_insecure_certificate = false;
    let trusting = Prober::new(&[der], None, ProbeAddressPolicy::test_bed());
    assert_eq!(trusting.probe(&probe).await, Ok(200));
}

#[tokio::test]
async fn a_failure_seen_from_one_vantage_point_only() {
    // The server fails for clients from 127.0.0.2 only (as if one cluster's path were broken).
    let answer: Answer = Arc::new(|_, peer| {
        if peer == IpAddr::from([127, 0, 0, 2]) {
            503
        } else {
            200
        }
    });
    let listener = TcpListener::bind("0.0.0.0:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            tokio::spawn(serve(stream, peer.ip(), answer.clone()));
        }
    });
    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let mut outcomes = Vec::new();
    for source in [[127, 0, 0, 1], [127, 0, 0, 2], [127, 0, 0, 3]] {
        let prober = Prober::new(
            &[],
            Some(IpAddr::from(source)),
            ProbeAddressPolicy::test_bed(),
        );
        outcomes.push(prober.probe(&spec(address, Protocol::Http)).await.is_ok());
    }
    assert_eq!(outcomes, [true, false, true]);
}

#[tokio::test]
async fn a_silent_server_times_out_and_the_threshold_decides_health() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    // Accepts and never answers.
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let mut probe = spec(address, Protocol::Http);
    probe.timeout = Duration::from_millis(200);
    let prober = Prober::new(&[], None, ProbeAddressPolicy::test_bed());
    let mut state = ProbeState::default();
    for _ in 0..2 {
        let outcome = prober.probe(&probe).await;
        assert!(
            outcome
                .as_ref()
                .unwrap_err()
                .starts_with("no answer within"),
            "{outcome:?}"
        );
        state.record(&outcome, 2);
    }
    assert_eq!(state.healthy, Some(false));
    assert_eq!(state.consecutive_failures, 2);
}

#[tokio::test]
async fn the_runner_keeps_every_leaf_current_and_follows_changes() {
    use meridian_agent::probe::{Leaf, ProbeRunner};
    use std::collections::HashMap;
    // Healthy for every host but "down.example.test".
    let answer: Answer = Arc::new(|head, _| {
        if head.contains("Host: down.example.test") {
            503
        } else {
            200
        }
    });
    let address = http_server(answer).await;
    let leaf = |host: &str| {
        let mut spec = spec(address, Protocol::Http);
        spec.host = host.into();
        Leaf {
            spec,
            interval: Duration::from_millis(50),
            failure_threshold: 2,
        }
    };
    let (updates, mut received) = tokio::sync::mpsc::channel(64);
    let prober = Arc::new(Prober::new(&[], None, ProbeAddressPolicy::test_bed()));
    let mut runner = ProbeRunner::new(prober, updates);
    runner.sync(HashMap::from([
        ("a", leaf("up.example.test")),
        ("b", leaf("down.example.test")),
    ]));
    let mut latest: HashMap<&str, Option<bool>> = HashMap::new();
    while !latest.contains_key("a") || latest.get("b") != Some(&Some(false)) {
        let update = tokio::time::timeout(Duration::from_secs(30), received.recv())
            .await
            .expect("updates keep coming")
            .expect("the runner runs");
        latest.insert(update.key, update.state.healthy);
    }
    assert_eq!(latest["a"], Some(true));

    // "b" now asks another host: it starts over and becomes healthy; "a" is removed.
    let stopped = runner.sync(HashMap::from([("b", leaf("back.example.test"))]));
    assert_eq!(stopped, ["a"], "only the removed leaf stops for good");
    assert_eq!(runner.len(), 1);
    loop {
        let update = tokio::time::timeout(Duration::from_secs(30), received.recv())
            .await
            .expect("updates keep coming")
            .expect("the runner runs");
        if update.key == "b" && update.state.healthy == Some(true) {
            break;
        }
    }
    // Once the channel is drained, no update of "a" arrives any more.
    while let Ok(update) = received.try_recv() {
        let _ = update;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    while let Ok(update) = received.try_recv() {
        assert_eq!(update.key, "b", "a removed leaf is not probed");
    }
}

/// The attack: a probe whose path, host or header would write its own request line, headers or
/// a second request (request smuggling into the gateway, or into whatever the address is). The
/// agent refuses each before connecting: the server sees no request at all.
#[tokio::test]
async fn a_probe_that_would_write_its_own_request_is_never_sent() {
    let requests = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = requests.clone();
    let answer: Answer = Arc::new(move |_, _| {
        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        200
    });
    let address = http_server(answer).await;
    let prober = Prober::new(&[], None, ProbeAddressPolicy::test_bed());
    // First proof that the server counts what reaches it.
    assert_eq!(prober.probe(&spec(address, Protocol::Http)).await, Ok(200));
    assert_eq!(requests.load(std::sync::atomic::Ordering::SeqCst), 1);

    // What the attack is, how it bends the probe, and what the refusal names.
    type Attack = (&'static str, fn(&mut ProbeSpec), &'static str);
    let attacks: [Attack; 5] = [
        (
            "a path ending the request line",
            |p| p.path = "/healthz HTTP/1.1\r\nX-Injected: 1\r\n\r\nGET /admin".into(),
            "the path",
        ),
        (
            "a path with a space",
            |p| p.path = "/a b".into(),
            "the path",
        ),
        (
            "a host with a line break",
            |p| p.host = format!("{HOST}\r\nX-Injected: 1"),
            "the host",
        ),
        (
            "a header value with a line break",
            |p| p.headers = vec![("X-Key".into(), "v\r\nX-Injected: 1".into())],
            "header X-Key",
        ),
        (
            "a header name that is not a token",
            |p| p.headers = vec![("X-Key: v\r\nX-Injected".into(), "1".into())],
            "header name",
        ),
    ];
    for (what, attack, named) in attacks {
        let mut probe = spec(address, Protocol::Http);
        attack(&mut probe);
        let refused = prober.probe(&probe).await.unwrap_err();
        assert!(
            refused.starts_with("refused: ") && refused.contains(named),
            "{what}: {refused}"
        );
        assert!(
            !refused.contains("v\r\n"),
            "{what}: a header value is never echoed"
        );
    }
    assert_eq!(
        requests.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "no refused probe reached the server"
    );
}

/// The attack: a leaf (or a hostname) at the agent's own loopback, the cloud's metadata
/// service or a denied range, to make every spoke scan its own network. The agent opens no
/// connection to any of them: a listener on loopback counts none.
#[tokio::test]
async fn an_agent_never_connects_to_loopback_link_local_or_a_denied_range() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let connections = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((stream, peer)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(serve(stream, peer.ip(), Arc::new(|_, _| 200)));
        }
    });
    // First proof that the listener counts a connection that reaches it.
    let allowed = Prober::new(&[], None, ProbeAddressPolicy::test_bed());
    assert_eq!(allowed.probe(&spec(address, Protocol::Http)).await, Ok(200));
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 1);

    let strict = Prober::new(
        &[],
        None,
        ProbeAddressPolicy::parse(&["192.0.2.0/24"], false).unwrap(),
    );
    let port = address.port();
    let cases = [
        (
            "127.0.0.1".to_string(),
            "127.0.0.1: loopback addresses are never probed",
        ),
        // A hostname is judged by what it resolves to.
        (
            "localhost".to_string(),
            "loopback addresses are never probed",
        ),
        (
            "::ffff:127.0.0.1".to_string(),
            "loopback addresses are never probed",
        ),
        (
            "169.254.169.254".to_string(),
            "169.254.169.254: link-local addresses are never probed",
        ),
        (
            "0.0.0.0".to_string(),
            "0.0.0.0: unspecified addresses are never probed",
        ),
        (
            "192.0.2.7".to_string(),
            "192.0.2.7: 192.0.2.0/24 is denied to probes by the admin",
        ),
    ];
    for (leaf, refusal) in cases {
        let mut probe = spec(address, Protocol::Http);
        probe.address = leaf.clone();
        probe.port = port;
        let outcome = strict.probe(&probe).await;
        let error = outcome.expect_err(&leaf);
        assert!(
            error.starts_with("not probed: ") && error.ends_with(refusal),
            "{leaf}: {error}"
        );
    }
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "no refused probe reached the listener"
    );
}
