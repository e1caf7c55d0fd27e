//! An HTTP proxy for Route53-compatible endpoints that counts API calls by action, can answer a
//! share of them with Route53's throttling error or pace them as Route53 does (calls beyond
//! a rate per second get that error), and can play an outage (every connection
//! closed unanswered) while the server behind it keeps its state. Test and benchmark tooling: it sits
//! between the provider and moto so tests can see every call and inject throttling.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const THROTTLING_BODY: &str = "<?xml version=\"1.0\"?>\n<ErrorResponse xmlns=\"https://route53.amazonaws.com/doc/2013-04-01/\"><Error><Type>Sender</Type><Code>Throttling</Code><Message>Rate exceeded</Message></Error><RequestId>meridian-fault-proxy</RequestId></ErrorResponse>";

/// A running proxy; dropping it stops it.
#[derive(Debug)]
pub struct CountingProxy {
    pub address: SocketAddr,
    calls: Arc<Mutex<BTreeMap<String, u64>>>,
    throttled: Arc<AtomicU64>,
    outage: Arc<AtomicBool>,
    refused: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

/// Route53's pacing: a token bucket of `per_second` calls a second, as deep as one second's
/// worth; a call finding it empty is throttled.
#[derive(Debug)]
struct Pace {
    per_second: f64,
    bucket: Mutex<(std::time::Instant, f64)>,
}

impl Pace {
    fn new(per_second: u32) -> Self {
        Pace {
            per_second: f64::from(per_second),
            bucket: Mutex::new((std::time::Instant::now(), f64::from(per_second))),
        }
    }

    /// Whether a call may go now (and takes its token).
    fn admit(&self) -> bool {
        let mut bucket = self.bucket.lock().expect("pace lock");
        let now = std::time::Instant::now();
        let refilled = bucket.1 + now.duration_since(bucket.0).as_secs_f64() * self.per_second;
        *bucket = (now, refilled.min(self.per_second));
        if bucket.1 >= 1.0 {
            bucket.1 -= 1.0;
            true
        } else {
            false
        }
    }
}

/// When the proxy throttles a call.
#[derive(Debug, Clone)]
pub enum Throttle {
    /// Never.
    Never,
    /// Every n-th call.
    Every(u64),
    /// Beyond n calls a second, as Route53 paces an account (5 a second).
    PerSecond(u32),
    /// The calls numbered in this range, the proxy's first call being 1: a run of throttled
    /// calls exactly where a test wants it, whatever the timing.
    Calls(std::ops::RangeInclusive<u64>),
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl CountingProxy {
    /// Forwards to `upstream`; every `throttle_every`-th call (0: none) gets a throttling error
    /// instead.
    pub async fn start(upstream: SocketAddr, throttle_every: u64) -> std::io::Result<Self> {
        let throttle = match throttle_every {
            0 => Throttle::Never,
            n => Throttle::Every(n),
        };
        Self::start_with(upstream, throttle).await
    }

    /// Forwards to `upstream`, throttling calls as `throttle` says.
    pub async fn start_with(upstream: SocketAddr, throttle: Throttle) -> std::io::Result<Self> {
        let (throttle_every, pace, calls_throttled) = match throttle {
            Throttle::Never => (0, None, None),
            Throttle::Every(n) => (n, None, None),
            Throttle::PerSecond(n) => (0, Some(Arc::new(Pace::new(n))), None),
            Throttle::Calls(numbers) => (0, None, Some(numbers)),
        };
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let address = listener.local_addr()?;
        let calls = Arc::new(Mutex::new(BTreeMap::new()));
        let throttled = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(AtomicU64::new(0));
        let outage = Arc::new(AtomicBool::new(false));
        let refused = Arc::new(AtomicU64::new(0));
        let (task_calls, task_throttled) = (calls.clone(), throttled.clone());
        let (task_outage, task_refused) = (outage.clone(), refused.clone());
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if task_outage.load(Ordering::SeqCst) {
                    task_refused.fetch_add(1, Ordering::Relaxed);
                    drop(client);
                    continue;
                }
                let (calls, throttled, seen) =
                    (task_calls.clone(), task_throttled.clone(), seen.clone());
                let (pace, numbers) = (pace.clone(), calls_throttled.clone());
                tokio::spawn(async move {
                    let throttle = Throttling {
                        every: throttle_every,
                        pace: pace.as_deref(),
                        numbers,
                    };
                    let _ = relay(client, upstream, throttle, &calls, &throttled, &seen).await;
                });
            }
        });
        Ok(CountingProxy {
            address,
            calls,
            throttled,
            outage,
            refused,
            task,
        })
    }

    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Calls answered by the upstream, by Route53 action.
    pub fn calls(&self) -> BTreeMap<String, u64> {
        self.calls.lock().expect("calls lock").clone()
    }

    /// Calls answered with a throttling error.
    pub fn throttled(&self) -> u64 {
        self.throttled.load(Ordering::Relaxed)
    }

    /// Starts or ends an outage: while on, every connection is closed unanswered.
    pub fn set_outage(&self, on: bool) {
        self.outage.store(on, Ordering::SeqCst);
    }

    /// Connections closed unanswered by an outage.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    pub fn reset(&self) {
        self.calls.lock().expect("calls lock").clear();
        self.throttled.store(0, Ordering::Relaxed);
    }
}

/// The Route53 action of a request line.
fn action(method: &str, path: &str) -> String {
    let (path, query) = path.split_once('?').unwrap_or((path, ""));
    let path = path.trim_end_matches('/');
    // A one-item listing is how a single record set is read.
    let one_item = query.split('&').any(|p| p == "maxitems=1");
    // A read of one host's records asks for 300 items; a zone listing leaves the page size to
    // Route53 (`meridian_providers::route53::HOST_READ_ITEMS`).
    let host = query.split('&').any(|p| p == "maxitems=300");
    match (method, path.rsplit('/').next()) {
        ("POST", Some("rrset")) => "ChangeResourceRecordSets",
        ("GET", Some("rrset")) if one_item => "ListResourceRecordSets(one)",
        ("GET", Some("rrset")) if host => "ListResourceRecordSets(host)",
        ("GET", Some("rrset")) => "ListResourceRecordSets",
        ("GET", Some("hostedzone")) => "ListHostedZones",
        ("POST", Some("hostedzone")) => "CreateHostedZone",
        _ => "Other",
    }
    .to_string()
}

/// Reads one HTTP/1.1 message (head and Content-Length body).
async fn read_message(stream: &mut TcpStream) -> std::io::Result<Option<Vec<u8>>> {
    let mut message = Vec::new();
    let mut buffer = [0u8; 8192];
    let head_end = loop {
        if let Some(position) = message.windows(4).position(|w| w == b"\r\n\r\n") {
            break position + 4;
        }
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            return Ok(None);
        }
        message.extend_from_slice(&buffer[..read]);
    };
    let head = String::from_utf8_lossy(&message[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0);
    while message.len() < head_end + length {
        let read = stream.read(&mut buffer).await?;
        if read == 0 {
            break;
        }
        message.extend_from_slice(&buffer[..read]);
    }
    Ok(Some(message))
}

/// What decides that one call is throttled.
struct Throttling<'a> {
    every: u64,
    pace: Option<&'a Pace>,
    numbers: Option<std::ops::RangeInclusive<u64>>,
}

async fn relay(
    mut client: TcpStream,
    upstream: SocketAddr,
    throttle: Throttling<'_>,
    calls: &Mutex<BTreeMap<String, u64>>,
    throttled: &AtomicU64,
    seen: &AtomicU64,
) -> std::io::Result<()> {
    // One request per connection keeps the relay simple; clients reconnect.
    let Some(request) = read_message(&mut client).await? else {
        return Ok(());
    };
    let line =
        String::from_utf8_lossy(&request[..request.iter().position(|b| *b == b'\r').unwrap_or(0)])
            .to_string();
    let mut parts = line.split_whitespace();
    let action = action(parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let number = seen.fetch_add(1, Ordering::Relaxed) + 1;
    let paced_out = throttle.pace.is_some_and(|pace| !pace.admit());
    let numbered = throttle.numbers.is_some_and(|n| n.contains(&number));
    if paced_out || numbered || (throttle.every > 0 && number.is_multiple_of(throttle.every)) {
        throttled.fetch_add(1, Ordering::Relaxed);
        let response = format!(
            "HTTP/1.1 400 Bad Request\r\nContent-Type: text/xml\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{THROTTLING_BODY}",
            THROTTLING_BODY.len()
        );
        return client.write_all(response.as_bytes()).await;
    }
    *calls.lock().expect("calls lock").entry(action).or_default() += 1;
    let mut server = TcpStream::connect(upstream).await?;
    let request =
        String::from_utf8_lossy(&request).replacen("\r\n", "\r\nConnection: close\r\n", 1);
    server.write_all(request.as_bytes()).await?;
    let mut response = Vec::new();
    server.read_to_end(&mut response).await?;
    client.write_all(&response).await
}
