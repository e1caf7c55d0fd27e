//! The app the test bed runs behind each spoke's gateway (`make demo`, the real-traffic test,
//! `make bench-failover`).
//!
//! It answers every request with the name of the cluster that served it, has a health path for
//! Meridian's probes, and can be told to fail. The fault is set on a control port the gateway
//! does not route to, so only the test bed (or a user of the demo) can flip it:
//!
//! ```text
//! curl -X PUT http://POD_IP:8081/fault/unavailable   # health path and traffic answer 503
//! curl -X PUT http://POD_IP:8081/fault/hang          # requests are held, never answered
//! curl -X PUT http://POD_IP:8081/fault/flap          # every third health probe of each prober fails
//! curl -X PUT http://POD_IP:8081/fault/none          # serving again
//! ```
//!
//! The standard library only, a thread per connection, HTTP/1.1 with `Connection: close`: it
//! serves a test bed's few hundred requests a second and builds in seconds.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The path Meridian's health checks ask for.
const HEALTH_PATH: &str = "/healthz";
/// How long a held request waits before the connection is dropped unanswered.
const LONGEST_HANG: Duration = Duration::from_secs(300);
/// The longest request head read before the connection is dropped.
const MAX_HEAD_LINES: usize = 100;

/// What the app does wrong, if anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Health path and traffic answer 503.
    Unavailable,
    /// Requests are held and never answered.
    Hang,
    /// Every third health probe from each prober answers 503; traffic is served. A probe
    /// threshold of two consecutive failures must never withdraw the gateway.
    Flap,
}

impl Fault {
    fn parse(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Fault::None),
            "unavailable" | "503" => Some(Fault::Unavailable),
            "hang" => Some(Fault::Hang),
            "flap" => Some(Fault::Flap),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Unavailable => "unavailable",
            Fault::Hang => "hang",
            Fault::Flap => "flap",
        }
    }
}

/// What one request gets.
#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Answer(u16, String),
    Hold,
}

/// The answer to a request for `path` under `fault`; `probe_number` counts this prober's
/// health probes, this one included (1 for its first).
fn outcome(fault: Fault, cluster: &str, path: &str, probe_number: u64) -> Outcome {
    let health = path == HEALTH_PATH;
    match fault {
        Fault::Hang => Outcome::Hold,
        Fault::Unavailable => Outcome::Answer(503, format!("{cluster} is unavailable\n")),
        Fault::Flap if health && probe_number.is_multiple_of(3) => {
            Outcome::Answer(503, format!("{cluster} fails this probe\n"))
        }
        Fault::None | Fault::Flap if health => Outcome::Answer(200, "ok\n".into()),
        Fault::None | Fault::Flap => Outcome::Answer(200, format!("served by {cluster}\n")),
    }
}

struct App {
    cluster: String,
    fault: Mutex<Fault>,
    /// Health probes seen per prober (the first `X-Forwarded-For` address, else the peer).
    probes: Mutex<HashMap<String, u64>>,
}

impl App {
    fn fault(&self) -> Fault {
        *self.fault.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn count_probe(&self, prober: &str) -> u64 {
        let mut probes = self.probes.lock().unwrap_or_else(PoisonError::into_inner);
        let count = probes.entry(prober.to_string()).or_default();
        *count += 1;
        *count
    }

    fn serve(&self, mut stream: TcpStream) -> std::io::Result<()> {
        let Some(request) = read_head(&stream)? else {
            return Ok(());
        };
        let fault = self.fault();
        let probe_number = if request.path == HEALTH_PATH {
            let peer = stream.peer_addr()?.ip().to_string();
            self.count_probe(request.forwarded_for.as_deref().unwrap_or(&peer))
        } else {
            0
        };
        match outcome(fault, &self.cluster, &request.path, probe_number) {
            Outcome::Answer(status, body) => write_response(&mut stream, status, &body),
            Outcome::Hold => {
                let start = std::time::Instant::now();
                while self.fault() == Fault::Hang && start.elapsed() < LONGEST_HANG {
                    std::thread::sleep(Duration::from_millis(100));
                }
                Ok(())
            }
        }
    }

    fn control(&self, mut stream: TcpStream) -> std::io::Result<()> {
        let Some(request) = read_head(&stream)? else {
            return Ok(());
        };
        let name = request.path.strip_prefix("/fault/");
        match (request.method.as_str(), name.and_then(Fault::parse)) {
            ("PUT" | "POST", Some(fault)) => {
                *self.fault.lock().unwrap_or_else(PoisonError::into_inner) = fault;
                println!("{}: fault set to {}", self.cluster, fault.name());
                write_response(&mut stream, 200, &format!("fault: {}\n", fault.name()))
            }
            ("GET", _) if request.path == "/fault" => write_response(
                &mut stream,
                200,
                &format!("fault: {}\n", self.fault().name()),
            ),
            _ => write_response(
                &mut stream,
                404,
                "PUT /fault/none, /fault/unavailable, /fault/hang or /fault/flap; GET /fault\n",
            ),
        }
    }
}

struct RequestHead {
    method: String,
    path: String,
    forwarded_for: Option<String>,
}

/// The request line and the `X-Forwarded-For` header; `None` when the peer sent no request.
fn read_head(stream: &TcpStream) -> std::io::Result<Option<RequestHead>> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Ok(None);
    };
    let path = target.split('?').next().unwrap_or(target).to_string();
    let method = method.to_string();
    let mut forwarded_for = None;
    for _ in 0..MAX_HEAD_LINES {
        line.clear();
        if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("x-forwarded-for")
        {
            forwarded_for = value.split(',').next().map(|v| v.trim().to_string());
        }
    }
    Ok(Some(RequestHead {
        method,
        path,
        forwarded_for,
    }))
}

fn write_response(stream: &mut TcpStream, status: u16, body: &str) -> std::io::Result<()> {
    let reason = match status {
        200 => "OK",
        404 => "Not Found",
        _ => "Service Unavailable",
    };
    write!(
        stream,
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    stream.flush()
}

fn listen(
    address: &str,
    app: Arc<App>,
    handle: fn(&App, TcpStream) -> std::io::Result<()>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    let listener = TcpListener::bind(address)?;
    println!("listening on {address}");
    Ok(std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let app = app.clone();
            std::thread::spawn(move || {
                // A peer that goes away mid-request costs nothing worth reporting.
                let _ = handle(&app, stream);
            });
        }
    }))
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn main() -> std::io::Result<()> {
    let fault_name = env_or("FAULT", "none");
    let fault = Fault::parse(&fault_name).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("FAULT={fault_name:?}: expected none, unavailable, hang or flap"),
        )
    })?;
    let app = Arc::new(App {
        cluster: env_or("CLUSTER_NAME", "an unnamed cluster"),
        fault: Mutex::new(fault),
        probes: Mutex::new(HashMap::new()),
    });
    let serving = listen(&env_or("LISTEN", "0.0.0.0:8080"), app.clone(), App::serve)?;
    listen(&env_or("CONTROL_LISTEN", "0.0.0.0:8081"), app, App::control)?;
    serving
        .join()
        .map_err(|_| std::io::Error::other("the serving thread panicked"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_fault_answers_health_and_traffic_as_documented() {
        let cases = [
            (
                Fault::None,
                "/",
                1,
                Outcome::Answer(200, "served by c1\n".into()),
            ),
            (
                Fault::None,
                HEALTH_PATH,
                3,
                Outcome::Answer(200, "ok\n".into()),
            ),
            (
                Fault::Unavailable,
                "/",
                1,
                Outcome::Answer(503, "c1 is unavailable\n".into()),
            ),
            (
                Fault::Unavailable,
                HEALTH_PATH,
                1,
                Outcome::Answer(503, "c1 is unavailable\n".into()),
            ),
            (Fault::Hang, "/", 1, Outcome::Hold),
            (Fault::Hang, HEALTH_PATH, 1, Outcome::Hold),
            (
                Fault::Flap,
                "/",
                0,
                Outcome::Answer(200, "served by c1\n".into()),
            ),
            (
                Fault::Flap,
                HEALTH_PATH,
                1,
                Outcome::Answer(200, "ok\n".into()),
            ),
            (
                Fault::Flap,
                HEALTH_PATH,
                2,
                Outcome::Answer(200, "ok\n".into()),
            ),
            (
                Fault::Flap,
                HEALTH_PATH,
                3,
                Outcome::Answer(503, "c1 fails this probe\n".into()),
            ),
        ];
        for (fault, path, probe, expected) in cases {
            assert_eq!(
                outcome(fault, "c1", path, probe),
                expected,
                "{fault:?} {path} #{probe}"
            );
        }
    }

    #[test]
    fn a_flapping_app_never_fails_two_probes_of_one_prober_in_a_row() {
        let app = App {
            cluster: "c1".into(),
            fault: Mutex::new(Fault::Flap),
            probes: Mutex::new(HashMap::new()),
        };
        for prober in ["10.250.1.1", "10.250.2.1"] {
            let failed: Vec<bool> = (0..30)
                .map(|_| {
                    let number = app.count_probe(prober);
                    matches!(
                        outcome(Fault::Flap, "c1", HEALTH_PATH, number),
                        Outcome::Answer(503, _)
                    )
                })
                .collect();
            assert_eq!(failed.iter().filter(|f| **f).count(), 10, "{prober}");
            assert!(
                !failed.windows(2).any(|w| w[0] && w[1]),
                "{prober}: {failed:?}"
            );
        }
    }

    #[test]
    fn fault_names_round_trip() {
        for fault in [Fault::None, Fault::Unavailable, Fault::Hang, Fault::Flap] {
            assert_eq!(Fault::parse(fault.name()), Some(fault));
        }
        assert_eq!(Fault::parse("503"), Some(Fault::Unavailable));
        assert_eq!(Fault::parse("broken"), None);
    }
}
