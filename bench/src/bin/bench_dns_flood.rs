//! `make bench-dns-flood`: what a legitimate client gets from Meridian's nameserver while a flood
//! of client prefixes arrives, the load a forged-source attack puts on response rate limiting
//! (RRL). The flood comes from every /24 of 127.0.0.0/8 in turn (65,535 prefixes, one question
//! each, round after round), which loopback answers for as forged addresses would arrive; the
//! legitimate client asks from 127.0.0.1 in a closed loop. Each phase is measured with RRL on
//! (its table churning with the flood) and off, in one run: the ratio "RRL on / RRL off during
//! the flood" is what limiting costs under attack, and "during / before" what the flood costs.
//! The limit is set far above the legitimate client's rate, so that it measures the table, not
//! the limit. Absolute numbers are noise on a shared machine; read the ratios.

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query};
use hickory_proto::rr::{Name, RecordType as WireType};
use meridian_dns::model::{Endpoint, RecordType};
use meridian_nameserver::{NameServer, RateLimit, ServerConfig, ZoneConfig};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Seconds per phase (`MERIDIAN_BENCH_SECONDS` overrides).
const SECONDS: u64 = 3;
/// Closed-loop clients of the legitimate side.
const CLIENTS: usize = 2;

fn main() -> Result<(), BoxError> {
    let seconds = std::env::var("MERIDIAN_BENCH_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SECONDS);
    let phase = Duration::from_secs(seconds);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let question = query();
    println!(
        "answers per second to the legitimate client ({CLIENTS} closed loops, {seconds} s a phase)"
    );
    println!(
        "{:<10} {:>10} {:>14} {:>14} {:>8}",
        "RRL", "before", "during flood", "flood q/s", "ratio"
    );
    let mut during = Vec::new();
    for (label, rate_limit) in [("on", RateLimit::per_second(1_000_000)), ("off", None)] {
        let server = runtime.block_on(async {
            let config = ServerConfig {
                rate_limit,
                ..ServerConfig::default()
            };
            let server = NameServer::start("127.0.0.1:0".parse()?, config).await?;
            server.publish(
                ZoneConfig::new("example.com"),
                [Endpoint::new(
                    "static.example.com",
                    RecordType::A,
                    ["198.18.0.10".to_string()],
                    60,
                )],
            );
            Ok::<_, BoxError>(server)
        })?;
        let address = server.local_addr();
        let before = legitimate(address, &question, phase)?;
        let flooding = Arc::new(AtomicBool::new(true));
        let sent = Arc::new(AtomicU64::new(0));
        let flood = {
            let (flooding, sent, question) = (flooding.clone(), sent.clone(), question.clone());
            std::thread::spawn(move || flood(address, &question, &flooding, &sent))
        };
        // The flood runs a moment first, so the table is full of it when measuring starts.
        std::thread::sleep(Duration::from_millis(500));
        let start = sent.load(Ordering::Relaxed);
        let under = legitimate(address, &question, phase)?;
        let flood_rate = (sent.load(Ordering::Relaxed) - start) as f64 / phase.as_secs_f64();
        flooding.store(false, Ordering::Relaxed);
        flood.join().expect("the flood thread ends")?;
        println!(
            "{label:<10} {before:>10.0} {under:>14.0} {flood_rate:>14.0} {:>8.2}",
            under / before
        );
        during.push(under);
        runtime.block_on(server.shutdown());
    }
    println!(
        "during the flood, RRL on / RRL off: {:.2}",
        during[0] / during[1]
    );
    Ok(())
}

/// A question for the static record, framed for UDP.
fn query() -> Vec<u8> {
    let mut message = Message::new(1, MessageType::Query, OpCode::Query);
    message.add_query(Query::query(
        Name::from_ascii("static.example.com.").expect("a name"),
        WireType::A,
    ));
    message.to_vec().expect("a question encodes")
}

/// Answers per second `CLIENTS` closed loops from 127.0.0.1 get over `phase`.
fn legitimate(server: SocketAddr, question: &[u8], phase: Duration) -> Result<f64, BoxError> {
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let question = question.to_vec();
            std::thread::spawn(move || -> Result<u64, std::io::Error> {
                let socket = UdpSocket::bind("127.0.0.1:0")?;
                socket.set_read_timeout(Some(Duration::from_millis(200)))?;
                let mut buffer = [0u8; 512];
                let mut answered = 0;
                let end = Instant::now() + phase;
                while Instant::now() < end {
                    socket.send_to(&question, server)?;
                    if socket.recv(&mut buffer).is_ok() {
                        answered += 1;
                    }
                }
                Ok(answered)
            })
        })
        .collect();
    let mut answered = 0;
    for client in clients {
        answered += client.join().expect("a client thread ends")?;
    }
    Ok(answered as f64 / phase.as_secs_f64())
}

/// Questions from every /24 of 127.0.0.0/8 but the legitimate client's, one each, round after
/// round, until `flooding` is cleared; answers are not read.
fn flood(
    server: SocketAddr,
    question: &[u8],
    flooding: &AtomicBool,
    sent: &AtomicU64,
) -> Result<(), std::io::Error> {
    let mut prefix: u32 = 0;
    while flooding.load(Ordering::Relaxed) {
        prefix = (prefix + 1) % (1 << 16);
        if prefix == 0 {
            continue; // 127.0.0.0/24 is the legitimate client's
        }
        let source = Ipv4Addr::from((127u32 << 24) | (prefix << 8) | 1);
        let socket = UdpSocket::bind(SocketAddrV4::new(source, 0))?;
        if socket.send_to(question, server).is_ok() {
            sent.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}
