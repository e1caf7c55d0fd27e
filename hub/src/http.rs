//! The smallest HTTP/1.1 server the hub's endpoints need: read a request head, answer one
//! response, close. Only GET paths matter; nothing is written through it.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

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

/// Answers every connection on `listener` with `respond(path)` until the task is aborted.
pub async fn serve<F>(listener: TcpListener, respond: F)
where
    F: Fn(&str) -> Response + Send + Sync + Clone + 'static,
{
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let respond = respond.clone();
        tokio::spawn(async move {
            // Read the request head (up to 8 KiB), then answer and close.
            let mut buffer = Vec::with_capacity(1024);
            let mut chunk = [0u8; 1024];
            while !buffer.windows(4).any(|w| w == b"\r\n\r\n") && buffer.len() < 8192 {
                match stream.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                }
            }
            let request = String::from_utf8_lossy(&buffer);
            let path = request.split_whitespace().nth(1).unwrap_or("/").to_string();
            let response = respond(&path);
            let head = format!(
                "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                response.status,
                response.content_type,
                response.body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(response.body.as_bytes()).await;
        });
    }
}
