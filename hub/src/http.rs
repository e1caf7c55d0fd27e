//! The smallest HTTP/1.1 server the hub's endpoints need: read a request head, answer one
//! response, close. Only GET paths matter; nothing is written through it.
//!
//! Any pod that reaches the port is a client, so no client may hold the server: a request
//! head must arrive within [`Limits::read_timeout`] and the response leave within
//! [`Limits::write_timeout`], at most [`Limits::max_connections`] are open at once (the rest
//! wait in the kernel's backlog, each freed slot within a timeout), and a failing `accept()`
//! (out of file descriptors) backs off instead of spinning. Responses are rendered on the
//! blocking pool, never on the runtime's workers that the DNS server and controllers share.

use std::sync::Arc;
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
            read_timeout: Duration::from_secs(5),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// The longest request head read (the path is all that matters).
const MAX_HEAD: usize = 8192;
/// Back-off after a failed `accept()`, doubled up to the second value.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(10), Duration::from_secs(1));

/// Answers every connection on `listener` with `respond(path)` until the task is aborted.
pub async fn serve<F>(listener: TcpListener, respond: F)
where
    F: Fn(&str) -> Response + Send + Sync + Clone + 'static,
{
    serve_with(listener, Limits::default(), respond).await;
}

/// [`serve`] with `limits`.
pub async fn serve_with<F>(listener: TcpListener, limits: Limits, respond: F)
where
    F: Fn(&str) -> Response + Send + Sync + Clone + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut backoff = ACCEPT_BACKOFF.0;
    loop {
        let slot = slots
            .clone()
            .acquire_owned()
            .await
            .expect("the semaphore is never closed");
        let mut stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff = ACCEPT_BACKOFF.0;
                stream
            }
            Err(error) => {
                // Most often EMFILE: retrying at once would spin a worker and free nothing.
                tracing::warn!(%error, ?backoff, "accepting an HTTP connection failed");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);
                continue;
            }
        };
        let respond = respond.clone();
        tokio::spawn(async move {
            let _slot = slot;
            let Ok(Some(path)) =
                tokio::time::timeout(limits.read_timeout, read_path(&mut stream)).await
            else {
                return;
            };
            let Ok(response) = tokio::task::spawn_blocking(move || respond(&path)).await else {
                return;
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

/// Reads a request head (up to [`MAX_HEAD`]) and returns its path; `None` when the client
/// closed before saying anything.
async fn read_path(stream: &mut tokio::net::TcpStream) -> Option<String> {
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
    let request = String::from_utf8_lossy(&buffer);
    Some(request.split_whitespace().nth(1).unwrap_or("/").to_string())
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
            read_timeout: Duration::from_millis(300),
            write_timeout: Duration::from_millis(300),
        };
        let server = tokio::spawn(serve_with(listener, limits, |path| {
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
    async fn a_client_that_sends_a_head_without_end_is_cut_off() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let limits = Limits {
            max_connections: 1,
            read_timeout: Duration::from_millis(300),
            write_timeout: Duration::from_millis(300),
        };
        let server = tokio::spawn(serve_with(listener, limits, |_| {
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
}
