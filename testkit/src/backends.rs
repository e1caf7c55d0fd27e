//! HTTP backends for health-check tests: one listener per gateway address, all on one port,
//! each answering 200, or 503 when it is marked dead or failing for the probe's source address
//! (so agents probing from different loopback addresses can see different things), or 401
//! without a required header. A body names the address that answered (`served by 127.0.4.1`), as
//! the demo app names its cluster, so real clients can tell which gateway served them.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// How the backends answer now; tests change it while they run.
#[derive(Debug, Default)]
pub struct BackendState {
    /// Addresses answering 503 to everyone.
    pub dead: BTreeSet<IpAddr>,
    /// Per address, the probe sources it answers 503.
    pub failing_for: BTreeMap<IpAddr, Vec<IpAddr>>,
    /// A header (`name`, `value`) every request must carry, else 401.
    pub required_header: Option<(String, String)>,
}

pub type Backends = Arc<Mutex<BackendState>>;

/// Starts a backend on each of `addresses`, on one port chosen by the system; returns it.
pub async fn start_backends(addresses: &[IpAddr], state: Backends) -> u16 {
    'attempt: loop {
        let first = tokio::net::TcpListener::bind((addresses[0], 0))
            .await
            .expect("binding a loopback address");
        let port = first.local_addr().expect("a bound address").port();
        let mut listeners = vec![first];
        for address in &addresses[1..] {
            match tokio::net::TcpListener::bind((*address, port)).await {
                Ok(listener) => listeners.push(listener),
                Err(_) => continue 'attempt,
            }
        }
        for listener in listeners {
            let state = state.clone();
            tokio::spawn(async move {
                while let Ok((mut stream, peer)) = listener.accept().await {
                    let Ok(local) = stream.local_addr().map(|a| a.ip()) else {
                        continue;
                    };
                    let state = state.clone();
                    tokio::spawn(async move {
                        let mut head = Vec::new();
                        let mut chunk = [0u8; 1024];
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 8192 {
                            match stream.read(&mut chunk).await {
                                Ok(0) | Err(_) => break,
                                Ok(n) => head.extend_from_slice(&chunk[..n]),
                            }
                        }
                        let head = String::from_utf8_lossy(&head);
                        let status = {
                            let state = state.lock().expect("backend state");
                            let authorized =
                                state.required_header.as_ref().is_none_or(|(name, value)| {
                                    head.contains(&format!("{name}: {value}"))
                                });
                            let failing = state.dead.contains(&local)
                                || state
                                    .failing_for
                                    .get(&local)
                                    .is_some_and(|sources| sources.contains(&peer.ip()));
                            match (authorized, failing) {
                                (false, _) => "401 Unauthorized",
                                (true, true) => "503 Service Unavailable",
                                (true, false) => "200 OK",
                            }
                        };
                        let body = format!("served by {local}");
                        let _ = stream
                            .write_all(
                                format!(
                                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                                    body.len()
                                )
                                .as_bytes(),
                            )
                            .await;
                    });
                }
            });
        }
        return port;
    }
}
