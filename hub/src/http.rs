//! The smallest HTTP/1.1 server the hub's endpoints need: read a request head, answer one
//! response, close. Only GET paths matter; nothing is written through it.
//!
//! Any pod that reaches the port is a client, so no client may hold the server: a request
//! head must arrive within [`Limits::read_timeout`] and the response leave within
//! [`Limits::write_timeout`], at most [`Limits::max_connections`] are open at once (the rest
//! wait in the kernel's backlog, each freed slot within a timeout), one client address holds
//! at most [`Limits::max_per_client`] of them (more are closed as they are accepted, so one
//! pod's flood drains from the backlog at once and the kubelet's probe behind it is answered),
//! and a failing `accept()` (out of file descriptors) backs off instead of spinning. The
//! limits are sized to the process's file limit ([`Limits::within_open_files`]). Responses are
//! rendered on the blocking pool, never on the runtime's workers that the DNS server and
//! controllers share.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// A response: status line text, content type and body.
#[derive(Debug)]
pub struct Response {
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: String,
}

impl Response {
    pub fn new(status: &'static str, content_type: &'static str, body: String) -> Self {
        Response {
            status,
            content_type,
            body,
        }
    }

    pub fn text(status: &'static str, body: String) -> Self {
        Self::new(status, "text/plain; version=0.0.4", body)
    }

    pub fn html(body: String) -> Self {
        Self::new("200 OK", "text/html; charset=utf-8", body)
    }
}

/// What one listener allows its clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections open at once; more wait to be accepted.
    pub max_connections: usize,
    /// Connections open at once from one client address; more are closed when accepted.
    pub max_per_client: usize,
    /// How long a client has to send its request head.
    pub read_timeout: Duration,
    /// How long a client has to take the response.
    pub write_timeout: Duration,
}

impl Default for Limits {
    /// A few hundred connections per port: far below a pod's file limit even with both ports
    /// full, and far above what Prometheus, the kubelet and a browser need.
    fn default() -> Self {
        Limits {
            max_connections: 256,
            max_per_client: 16,
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
        }
    }
}

impl Limits {
    /// These limits for one of the hub's two HTTP ports in a process that may open
    /// `open_files` files: together the ports hold at most a quarter of what is left after a
    /// reserve for the API clients, the DNS sockets and the runtime, so a full port never
    /// makes `accept()` fail, here or on the DNS port. A client holds at most a quarter of a
    /// port, so four clients always fit.
    pub fn within_open_files(self, open_files: u64) -> Self {
        let share =
            usize::try_from(open_files.saturating_sub(crate::open_files::FILES_RESERVED) / 8)
                .unwrap_or(usize::MAX)
                .max(4);
        let max_connections = self.max_connections.min(share);
        Limits {
            max_connections,
            max_per_client: self.max_per_client.min(max_connections / 4).max(1),
            ..self
        }
    }
}

/// The longest request head read (the path is all that matters).
const MAX_HEAD: usize = 8192;
/// Back-off after a failed `accept()`, doubled up to the second value.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// Who may read which page: pages `url_for` maps to a non-resource URL are answered only to a
/// bearer token whose identity may `get` that URL; the others (the kubelet's probes) to anyone.
#[derive(Clone, Debug)]
pub struct Guard {
    pub authorizer: Arc<crate::http_auth::Authorizer>,
    pub url_for: fn(&str) -> Option<&'static str>,
}

/// Answers every connection on `listener` with `respond(path)` until the task is aborted,
/// behind `guard` if there is one, within the process's file limit.
pub async fn serve<F>(listener: TcpListener, guard: Option<Guard>, respond: F)
where
    F: Fn(&str) -> Response + Send + Sync + Clone + 'static,
{
    let limits = Limits::default().within_open_files(crate::open_files::limit());
    serve_with(listener, limits, guard, respond).await;
}

/// [`serve`] with `limits`.
pub async fn serve_with<F>(listener: TcpListener, limits: Limits, guard: Option<Guard>, respond: F)
where
    F: Fn(&str) -> Response + Send + Sync + Clone + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let max_per_client = limits.max_per_client.max(1);
    let held = Arc::new(Mutex::new(HashMap::new()));
    let mut backoff = ACCEPT_BACKOFF.0;
    loop {
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let stream = match listener.accept().await {
            Ok((stream, peer)) => {
                backoff = ACCEPT_BACKOFF.0;
                // Over its share: closed at once, and the slot is free for the next.
                let Some(share) = ClientShare::take(&held, peer.ip(), max_per_client) else {
                    tracing::debug!(client = %peer.ip(), "closed a connection over the client's share");
                    continue;
                };
                (stream, share)
            }
            Err(error) => {
                // Most often EMFILE: retrying at once would spin a worker and free nothing.
                tracing::warn!(%error, ?backoff, "accepting an HTTP connection failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
                continue;
            }
        };
        let (mut stream, share) = stream;
        let (respond, guard) = (respond.clone(), guard.clone());
        tokio::spawn(async move {
            let _slot = slot;
            let _share = share;
            let Ok(Some(request)) =
                tokio::time::timeout(limits.read_timeout, read_request(&mut stream)).await
            else {
                return;
            };
            let refusal = match guard
                .as_ref()
                .and_then(|guard| Some((guard, (guard.url_for)(&request.path)?)))
            {
                Some((guard, url)) => {
                    use crate::http_auth::Decision;
                    match guard.authorizer.check(request.token.as_deref(), url).await {
                        Decision::Allowed => None,
                        Decision::Unauthenticated => Some(Response::text(
                            "401 Unauthorized",
                            "a bearer token is needed\n".into(),
                        )),
                        Decision::Forbidden => Some(Response::text(
                            "403 Forbidden",
                            format!("get on {url} is needed\n"),
                        )),
                        Decision::Unavailable => Some(Response::text(
                            "503 Service Unavailable",
                            "the API server could not be asked\n".into(),
                        )),
                    }
                }
                None => None,
            };
            let response = match refusal {
                Some(refusal) => refusal,
                None => {
                    let path = request.path;
                    let Ok(response) = tokio::task::spawn_blocking(move || respond(&path)).await
                    else {
                        return;
                    };
                    response
                }
            };
            let head = format!(
                "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                response.status,
                response.content_type,
                response.body.len()
            );
            let _ = tokio::time::timeout(limits.write_timeout, async {
                stream.write_all(head.as_bytes()).await?;
                stream.write_all(response.body.as_bytes()).await
            })
            .await;
        });
    }
}

/// One connection of a client, counted against its share while it is held.
struct ClientShare {
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
    client: IpAddr,
}

impl ClientShare {
    /// A connection of `client`, if it holds fewer than `limit`.
    fn take(
        held: &Arc<Mutex<HashMap<IpAddr, usize>>>,
        client: IpAddr,
        limit: usize,
    ) -> Option<Self> {
        // The counts stay right whatever panicked while holding the lock.
        let mut counts = held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = counts.entry(client).or_insert(0);
        if *count >= limit {
            return None;
        }
        *count += 1;
        Some(ClientShare {
            held: held.clone(),
            client,
        })
    }
}

impl Drop for ClientShare {
    fn drop(&mut self) {
        let mut counts = self
            .held
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = counts.get_mut(&self.client) {
            *count -= 1;
            if *count == 0 {
                counts.remove(&self.client);
            }
        }
    }
}

/// What a request asks for, and with whose token.
struct Request {
    path: String,
    /// The `Authorization: Bearer` token, if any.
    token: Option<String>,
}

/// Reads a request head (up to [`MAX_HEAD`]); `None` when the client closed before saying
/// anything.
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<Request> {
    let mut buffer = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buffer.windows(4).any(|w| w == b"\r\n\r\n") && buffer.len() < MAX_HEAD {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
    if buffer.is_empty() {
        return None;
    }
    Some(parse_request(&String::from_utf8_lossy(&buffer)))
}

/// The path and bearer token of a request head (pure).
fn parse_request(head: &str) -> Request {
    let mut lines = head.split("\r\n");
    let path = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .unwrap_or("/")
        .to_string();
    let token = lines
        .take_while(|line| !line.is_empty())
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("authorization"))
        .and_then(|(_, value)| {
            let (scheme, token) = value.trim().split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| token.trim().to_string())
        });
    Request { path, token }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::net::TcpStream;

    async fn get(address: std::net::SocketAddr, path: &str) -> String {
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nHost: hub\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut response = String::new();
        stream.read_to_string(&mut response).await.unwrap();
        response
    }

    #[tokio::test]
    async fn idle_clients_holding_every_slot_are_dropped_and_a_request_is_answered() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = Limits {
            max_connections: 4,
            max_per_client: 4,
            read_timeout: Duration::from_millis(300),
            write_timeout: Duration::from_millis(300),
        };
        let server = tokio::spawn(serve_with(listener, limits, None, |path| {
            Response::text("200 OK", format!("you asked for {path}\n"))
        }));
        // Twice the slots, connected and silent: the first four hold every slot.
        let mut idle = Vec::new();
        for _ in 0..8 {
            idle.push(TcpStream::connect(address).await.unwrap());
        }
        let response = get(address, "/livez").await;
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(response.ends_with("you asked for /livez\n"), "{response}");
        // The idle clients were closed by the server, not left open.
        let mut closed = 0;
        for mut stream in idle {
            let mut byte = [0u8; 1];
            if matches!(stream.read(&mut byte).await, Ok(0)) {
                closed += 1;
            }
        }
        assert_eq!(
            closed, 8,
            "every silent client is closed after the read timeout"
        );
        server.abort();
    }

    #[tokio::test]
    async fn one_client_flooding_the_port_leaves_room_for_another() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        // Idle clients are never timed out here: only the share can make room.
        let limits = Limits {
            max_connections: 8,
            max_per_client: 2,
            read_timeout: Duration::from_secs(3600),
            write_timeout: Duration::from_secs(3600),
        };
        let server = tokio::spawn(serve_with(listener, limits, None, |path| {
            Response::text("200 OK", format!("you asked for {path}\n"))
        }));
        // 100 silent connections from one address, ten times the port's slots.
        let flooder = "127.0.0.2:0".parse().unwrap();
        let mut flood = Vec::new();
        for _ in 0..100 {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(flooder).unwrap();
            flood.push(socket.connect(address).await.unwrap());
        }
        // The kubelet, from another address, is answered while the flood stays connected.
        let response = tokio::time::timeout(Duration::from_secs(60), get(address, "/livez"))
            .await
            .expect("answered while the flooder holds its share");
        assert!(response.ends_with("you asked for /livez\n"), "{response}");
        // The flooder kept its two; the other 98 were closed as they were accepted.
        let mut closed = 0;
        for stream in &mut flood {
            let mut byte = [0u8; 1];
            match tokio::time::timeout(Duration::from_millis(200), stream.read(&mut byte)).await {
                Ok(Ok(0)) | Ok(Err(_)) => closed += 1,
                _ => {}
            }
        }
        assert_eq!(closed, 98, "all but the flooder's share are closed");
        server.abort();
    }

    #[test]
    fn the_ports_fit_in_the_file_limit_with_room_for_four_clients_each() {
        for (open_files, max_connections, max_per_client) in [
            (1_048_576, 256, 16),
            (20_000, 256, 16),
            (1_024, 116, 16),
            (256, 20, 5),
            (100, 4, 1),
            (10, 4, 1),
        ] {
            let limits = Limits::default().within_open_files(open_files);
            assert_eq!(
                (limits.max_connections, limits.max_per_client),
                (max_connections, max_per_client),
                "{open_files} files"
            );
            assert!(max_per_client * 4 <= max_connections.max(4), "{open_files}");
        }
    }

    #[tokio::test]
    async fn a_client_that_sends_a_head_without_end_is_cut_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = Limits {
            max_connections: 1,
            max_per_client: 1,
            read_timeout: Duration::from_millis(300),
            write_timeout: Duration::from_millis(300),
        };
        let server = tokio::spawn(serve_with(listener, limits, None, |_| {
            Response::text("200 OK", "ok\n".into())
        }));
        // A slow-loris: a head that never ends, a byte at a time.
        let mut slow = TcpStream::connect(address).await.unwrap();
        slow.write_all(b"GET /metrics HTTP/1.1\r\n").await.unwrap();
        let response = get(address, "/readyz").await;
        assert!(response.ends_with("ok\n"), "{response}");
        let mut rest = Vec::new();
        let _ = slow.read_to_end(&mut rest).await;
        assert!(rest.is_empty(), "the slow client got no answer: {rest:?}");
        server.abort();
    }

    #[test]
    fn the_path_and_bearer_token_are_read_from_the_head_and_nothing_else() {
        let request = parse_request(
            "GET /metrics HTTP/1.1\r\nHost: hub\r\nauthorization:  Bearer abc.def \r\n\r\n",
        );
        assert_eq!(request.path, "/metrics");
        assert_eq!(request.token.as_deref(), Some("abc.def"));
        for head in [
            "GET /metrics HTTP/1.1\r\nAuthorization: Basic dXNlcg==\r\n\r\n",
            "GET /metrics HTTP/1.1\r\n\r\nAuthorization: Bearer in-the-body",
            "GET /metrics HTTP/1.1\r\nX-Authorization: Bearer nope\r\n\r\n",
        ] {
            assert_eq!(parse_request(head).token, None, "{head:?}");
        }
        assert_eq!(parse_request("garbage").path, "/");
    }
}
