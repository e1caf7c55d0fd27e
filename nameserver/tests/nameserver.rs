//! The embedded nameserver against real DNS clients: `dig` (Debian dnsutils) and hickory (its
//! resolver, and raw messages for the statistical and load tests), over UDP and TCP, with a
//! MaxMind-format database written by the test.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::EdnsOption;
use hickory_proto::rr::{Name, RData, RecordType as WireType};
use meridian_dns::model::{Endpoint, RecordType};
use meridian_nameserver::{GeoDb, NameServer, ServerConfig, ZoneConfig, ZoneNameServer};
use meridian_testkit::geo_db::{write_database, write_database_v6};
use tokio::net::UdpSocket;

mod common;

use common::{EU_IP, IE_IP, US_IP, a_records, example_zone};

fn geo_database() -> GeoDb {
    GeoDb::from_bytes(write_database(&[
        ("192.0.2.0/24".parse().unwrap(), "IE", "EU"),
        ("198.51.100.0/24".parse().unwrap(), "US", "NA"),
        ("100.64.0.0/24".parse().unwrap(), "FR", "EU"),
        ("100.64.1.0/24".parse().unwrap(), "JP", "AS"),
    ]))
    .unwrap()
}

async fn start(transfer_allowed: &[&str]) -> NameServer {
    let config = ServerConfig {
        geo: Some(geo_database()),
        transfer_allowed: transfer_allowed
            .iter()
            .map(|net| net.parse().unwrap())
            .collect(),
        ..ServerConfig::default()
    };
    serving_example(config).await
}

/// `dig +short api.example.com A` over IPv6 loopback, with `args`.
fn dig_ipv6(port: u16, args: &[String]) -> String {
    let output = Command::new("dig")
        .args([
            "@::1",
            "-p",
            &port.to_string(),
            "+time=2",
            "+tries=1",
            "+short",
        ])
        .args(args)
        .args(["api.example.com", "A"])
        .output()
        .expect("dig runs (Debian dnsutils)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Runs dig against the server and returns its output.
async fn dig(server: &NameServer, args: &[&str]) -> String {
    let port = server.local_addr().port().to_string();
    let mut command = Command::new("dig");
    command
        .args(["@127.0.0.1", "-p", &port, "+time=2", "+tries=1"])
        .args(args);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .expect("dig runs (Debian dnsutils)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn answers(dig_short: &str) -> Vec<&str> {
    dig_short
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(';'))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geo_answers_follow_the_client_subnet_and_unknown_clients_get_the_catch_all() {
    let server = start(&[]).await;
    for (subnet, expected_ip, expected_geo) in [
        ("192.0.2.1/24", IE_IP, "ie."),      // country IE
        ("198.51.100.7/24", US_IP, "us."),   // country US
        ("100.64.0.9/24", EU_IP, "geo-eu."), // France: no FR record, continent Europe
        ("100.64.1.9/24", IE_IP, "ie."),     // Japan: no JP, no GEO-AS → catch-all (IE)
        ("203.0.113.200/24", IE_IP, "ie."),  // not in the database → catch-all
    ] {
        let output = dig(
            &server,
            &[
                "+short",
                &format!("+subnet={subnet}"),
                "api.example.com",
                "A",
            ],
        )
        .await;
        let lines = answers(&output);
        assert_eq!(
            lines.first(),
            Some(&"klb.api.example.com."),
            "{subnet}: {output}"
        );
        assert!(lines[1].starts_with(expected_geo), "{subnet}: {output}");
        assert_eq!(
            lines.last(),
            Some(&expected_ip),
            "{subnet}: the chain ends at the address\n{output}"
        );
        assert_eq!(
            lines.len(),
            4,
            "root → lb → geo → cluster → address: {output}"
        );
    }
    // Without ECS the source address (127.0.0.1, unknown) decides: the catch-all.
    let output = dig(&server, &["+short", "api.example.com"]).await;
    assert_eq!(answers(&output).last(), Some(&IE_IP));
    // The scope of the answer is echoed to the resolver.
    let output = dig(&server, &["+subnet=198.51.100.7/24", "api.example.com"]).await;
    assert!(
        output.contains("CLIENT-SUBNET: 198.51.100.0/24/24"),
        "{output}"
    );
    // Wildcards, case-insensitively.
    let output = dig(
        &server,
        &["+short", "+subnet=198.51.100.7/24", "Shop.APPS.example.com"],
    )
    .await;
    assert_eq!(answers(&output).last(), Some(&US_IP), "{output}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authoritative_rcodes_and_the_apex() {
    let server = start(&[]).await;
    let output = dig(&server, &["api.example.com"]).await;
    assert!(
        output.contains("status: NOERROR") && output.contains(" aa"),
        "authoritative: {output}"
    );
    assert!(!output.contains(" ra"), "no recursion offered: {output}");

    let output = dig(&server, &["nope.example.com"]).await;
    assert!(output.contains("status: NXDOMAIN"), "{output}");
    assert!(
        output.contains("AUTHORITY SECTION") && output.contains("SOA"),
        "SOA in authority: {output}"
    );

    let output = dig(&server, &["sub.example.com", "A"]).await;
    assert!(
        output.contains("status: NOERROR") && output.contains("ANSWER: 0"),
        "empty non-terminal is NODATA: {output}"
    );
    assert!(output.contains("SOA"), "{output}");
    let output = dig(&server, &["a.example.com", "AAAA"]).await;
    assert!(
        output.contains("status: NOERROR") && output.contains("ANSWER: 0"),
        "NODATA: {output}"
    );

    for outside in [vec!["example.org"], vec!["+rec", "www.google.com"]] {
        let output = dig(&server, &outside).await;
        assert!(output.contains("status: REFUSED"), "{outside:?}: {output}");
    }

    // The serial starts at the Unix time (it then grows across restarts) and grows by one
    // at least on every change.
    let serial_in = |soa: &str| -> u32 {
        let fields: Vec<&str> = soa.split_whitespace().collect();
        assert_eq!(
            fields[..2],
            ["ns1.example.com.", "hostmaster.example.com."],
            "{soa}"
        );
        fields[2].parse().unwrap()
    };
    let unix_now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as u32
    };
    let before = unix_now();
    let first = serial_in(&dig(&server, &["+short", "example.com", "SOA"]).await);
    assert!(
        first <= before && first + 60 > before,
        "{first} vs now {before}"
    );
    assert_eq!(
        answers(&dig(&server, &["+short", "example.com", "NS"]).await),
        ["ns1.example.com."]
    );
    server.publish(ZoneConfig::new("example.com"), example_zone());
    let second = serial_in(&dig(&server, &["+short", "example.com", "SOA"]).await);
    assert!(second > first, "the serial grows: {first} then {second}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_udp_answers_truncate_and_tcp_carries_them() {
    let server = start(&[]).await;
    let output = dig(&server, &["+noedns", "+ignore", "big.example.com", "TXT"]).await;
    assert!(
        output.contains(" tc") && output.contains("ANSWER: 0"),
        "truncated over UDP: {output}"
    );
    let output = dig(&server, &["+noedns", "big.example.com", "TXT"]).await;
    assert!(
        output.contains("ANSWER: 12"),
        "dig retries over TCP and gets everything: {output}"
    );
    // About 1,300 bytes: more than the 1,232 the server advertises, so a client offering 4,096
    // still gets it truncated (no UDP answer is larger than advertised, none fragments).
    let output = dig(
        &server,
        &["+bufsize=4096", "+ignore", "big.example.com", "TXT"],
    )
    .await;
    assert!(
        output.contains(" tc") && output.contains("ANSWER: 0"),
        "capped at the advertised 1,232 bytes: {output}"
    );
    let output = dig(&server, &["+bufsize=4096", "big.example.com", "TXT"]).await;
    assert!(
        output.contains("ANSWER: 12") && output.contains("MSG SIZE  rcvd: 1"),
        "over TCP it comes whole: {output}"
    );
    let output = dig(
        &server,
        &["+tcp", "+short", "+subnet=192.0.2.1/24", "api.example.com"],
    )
    .await;
    assert_eq!(answers(&output).last(), Some(&IE_IP), "{output}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_zone_names_its_name_servers_and_serves_their_glue() {
    let server = start(&["127.0.0.0/8"]).await;
    let name_servers = [
        "ns1.example.com=192.0.2.53,2001:db8::53",
        "ns.dns.example.net",
    ]
    .map(|text| ZoneNameServer::parse(text).unwrap());
    server.publish(
        ZoneConfig::with_name_servers("example.com", name_servers),
        example_zone(),
    );

    let output = dig(&server, &["+norec", "example.com", "NS"]).await;
    let records = answers(&output);
    let ns: Vec<&str> = records
        .iter()
        .filter(|l| l.contains("\tNS\t"))
        .copied()
        .collect();
    assert_eq!(ns.len(), 2, "{output}");
    assert!(
        ns[0].ends_with("ns1.example.com.") && ns[1].ends_with("ns.dns.example.net."),
        "{output}"
    );
    // The in-zone name server's addresses come along (additional section); the other's are
    // not this zone's to give.
    assert!(
        output.contains("ADDITIONAL: 3"),
        "two glue records and OPT: {output}"
    );
    assert!(
        records
            .iter()
            .any(|l| l.starts_with("ns1.example.com.") && l.ends_with("\tA\t192.0.2.53")),
        "{output}"
    );
    assert!(
        records
            .iter()
            .any(|l| l.starts_with("ns1.example.com.") && l.ends_with("\tAAAA\t2001:db8::53")),
        "{output}"
    );
    // The primary in the SOA is the first name server, and it resolves in the zone.
    let soa = dig(&server, &["+short", "example.com", "SOA"]).await;
    assert!(
        soa.starts_with("ns1.example.com. hostmaster.example.com. "),
        "{soa}"
    );
    assert_eq!(
        answers(&dig(&server, &["+short", "ns1.example.com", "A"]).await),
        ["192.0.2.53"]
    );
    assert_eq!(
        answers(&dig(&server, &["+short", "ns1.example.com", "AAAA"]).await),
        ["2001:db8::53"]
    );
    let output = dig(&server, &["ns.dns.example.net", "A"]).await;
    assert!(output.contains("status: REFUSED"), "not ours: {output}");
    // A secondary gets them too.
    let output = dig(&server, &["example.com", "AXFR"]).await;
    assert!(
        answers(&output)
            .iter()
            .any(|l| l.starts_with("ns1.example.com.") && l.ends_with("\tA\t192.0.2.53")),
        "{output}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn geo_answers_ipv6_clients_by_their_subnet_or_their_own_address() {
    // An IPv6 database (as GeoLite2 is) holding IPv6 and IPv4 networks.
    let database = write_database_v6(&[
        ("2001:db8:1::/48".parse().unwrap(), "US", "NA"),
        ("2001:db8:2::/48".parse().unwrap(), "JP", "AS"),
        ("::1/128".parse().unwrap(), "FR", "EU"),
        ("192.0.2.0/24".parse().unwrap(), "IE", "EU"),
    ]);
    let config = ServerConfig {
        geo: Some(GeoDb::from_bytes(database).unwrap()),
        ..ServerConfig::default()
    };
    // Listening on IPv6 loopback, so a client without ECS is located by its IPv6 address.
    let server = NameServer::start("[::1]:0".parse().unwrap(), config)
        .await
        .unwrap();
    server.publish(ZoneConfig::new("example.com"), example_zone());
    let port = server.local_addr().port();
    for (subnet, expected) in [
        (Some("2001:db8:1:5::/56"), US_IP), // United States by an IPv6 ECS prefix
        (Some("2001:db8:2::/48"), IE_IP),   // Japan: no JP, no GEO-AS → catch-all (IE)
        (Some("192.0.2.0/24"), IE_IP),      // IPv4 ECS in the same database
        (None, EU_IP),                      // ::1 itself: France → GEO-EU
    ] {
        let args: Vec<String> = subnet.map(|s| format!("+subnet={s}")).into_iter().collect();
        let output = tokio::task::spawn_blocking(move || dig_ipv6(port, &args))
            .await
            .unwrap();
        assert_eq!(
            answers(&output).last(),
            Some(&expected),
            "{subnet:?}: {output}"
        );
    }
    // The ECS option comes back with the IPv6 family and the prefix it was answered for.
    let output = tokio::task::spawn_blocking(move || {
        Command::new("dig")
            .args(["@::1", "-p", &port.to_string(), "+time=2", "+tries=1"])
            .args(["+subnet=2001:db8:1:5::/56", "api.example.com", "A"])
            .output()
            .expect("dig runs (Debian dnsutils)")
    })
    .await
    .unwrap();
    let output = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.contains("CLIENT-SUBNET: 2001:db8:1::/56/56"),
        "{output}"
    );
    server.shutdown().await;
}

/// A server of the example zone that rate limits at `per_second` responses per client prefix,
/// with slip 2.
async fn start_rate_limited(per_second: u32) -> NameServer {
    let config = ServerConfig {
        rate_limit: Some(meridian_nameserver::RateLimit {
            responses_per_second: per_second,
            slip: 2,
        }),
        ..ServerConfig::default()
    };
    serving_example(config).await
}

/// Sends `count` A queries from `socket` at once and reads the replies until none come for
/// half a second: (full answers, truncated ones).
async fn burst(socket: &UdpSocket, server: SocketAddr, count: u16) -> (usize, usize) {
    burst_with_cookie(socket, server, count, None).await
}

/// [`burst`], each query carrying `cookie` (client and server cookie) when there is one.
async fn burst_with_cookie(
    socket: &UdpSocket,
    server: SocketAddr,
    count: u16,
    cookie: Option<&[u8]>,
) -> (usize, usize) {
    for id in 0..count {
        let mut request = Message::new(id, MessageType::Query, OpCode::Query);
        request.add_query(Query::query(
            Name::from_ascii("api.example.com.").unwrap(),
            WireType::A,
        ));
        if let Some(cookie) = cookie {
            let mut edns = Edns::new();
            edns.options_mut()
                .insert(EdnsOption::Unknown(10, cookie.to_vec()));
            request.set_edns(edns);
        }
        socket
            .send_to(&request.to_vec().unwrap(), server)
            .await
            .unwrap();
    }
    let (mut full, mut truncated) = (0, 0);
    let mut buffer = [0u8; 4096];
    while let Ok(Ok(length)) = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        socket.recv(&mut buffer),
    )
    .await
    {
        let response = Message::from_vec(&buffer[..length]).unwrap();
        if response.metadata.truncation {
            assert!(response.answers.is_empty());
            truncated += 1;
        } else {
            assert!(!response.answers.is_empty());
            full += 1;
        }
    }
    (full, truncated)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limiting_holds_back_one_prefix_and_slips_it_to_tcp() {
    let server = start_rate_limited(5).await;
    let flooding = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (full, truncated) = burst(&flooding, server.local_addr(), 40).await;
    assert!(
        (5..40).contains(&full),
        "the bucket's worth, not all: {full}"
    );
    assert!(truncated >= 1, "some slip through truncated");
    assert!(
        full + truncated < 40,
        "the rest are dropped: {full} + {truncated}"
    );
    let (dropped, slipped) = server.stats().rate_limited_counts();
    assert_eq!(slipped as usize, truncated);
    assert_eq!(dropped as usize, 40 - full - truncated);
    // Another prefix is not held back, and TCP never is.
    let elsewhere = UdpSocket::bind("127.0.1.1:0").await.unwrap();
    assert_eq!(burst(&elsewhere, server.local_addr(), 1).await, (1, 0));
    let output = dig(&server, &["+tcp", "+short", "example.com", "SOA"]).await;
    assert!(output.starts_with("ns1.example.com."), "{output}");
    server.shutdown().await;
}

/// The cookie dig printed (`; COOKIE: <hex> (good)`), as bytes, and whether dig found it good.
fn dig_cookie(output: &str) -> Option<(Vec<u8>, bool)> {
    let line = output.lines().find_map(|l| l.strip_prefix("; COOKIE: "))?;
    let (hex, verdict) = line.split_once(' ').unwrap_or((line, ""));
    let bytes = (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
        .collect();
    Some((bytes, verdict.contains("good")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_cookies_are_given_checked_and_spare_their_holders_rate_limiting() {
    let server = start_rate_limited(2).await;
    // dig sends a client cookie and checks the server cookie that comes back with it.
    let output = dig(&server, &["+cookie=0102030405060708", "example.com", "SOA"]).await;
    let (cookie, good) = dig_cookie(&output).unwrap_or_else(|| panic!("{output}"));
    assert!(good, "{output}");
    assert_eq!(cookie.len(), 24);
    assert_eq!(
        cookie[..8],
        [1, 2, 3, 4, 5, 6, 7, 8],
        "the client cookie comes back"
    );
    let hex: String = cookie.iter().map(|b| format!("{b:02x}")).collect();
    let output = dig(&server, &[&format!("+cookie={hex}"), "example.com", "SOA"]).await;
    assert!(
        dig_cookie(&output).is_some_and(|(_, good)| good),
        "{output}"
    );
    // A malformed cookie (a client cookie is 8 bytes) is a format error (over TCP: this
    // client has had its two UDP answers of the second).
    let output = dig(&server, &["+tcp", "+cookie=0102", "example.com", "SOA"]).await;
    assert!(output.contains("status: FORMERR"), "{output}");

    // A client holding a valid server cookie has proven its address: not rate limited, while
    // a client without one from another address is.
    let holder = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let (full, truncated) =
        burst_with_cookie(&holder, server.local_addr(), 20, Some(&cookie)).await;
    assert_eq!((full, truncated), (20, 0));
    let anonymous = UdpSocket::bind("127.0.2.1:0").await.unwrap();
    let (full, _) = burst(&anonymous, server.local_addr(), 20).await;
    assert!(full < 20, "{full}");
    // A forged server cookie gets no such pass.
    let mut forged = cookie.clone();
    forged[23] ^= 0xff;
    let forger = UdpSocket::bind("127.0.3.1:0").await.unwrap();
    let (full, _) = burst_with_cookie(&forger, server.local_addr(), 20, Some(&forged)).await;
    assert!(full < 20, "{full}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_is_answered_minimally_and_the_do_bit_is_echoed() {
    let server = start(&[]).await;
    // RFC 8482: one synthesized HINFO, not the name's records.
    let output = dig(&server, &["api.example.com", "ANY"]).await;
    let records = answers(&output);
    assert_eq!(records.len(), 1, "{output}");
    assert!(records[0].contains("\tHINFO\t\"RFC8482\" \"\""), "{output}");
    let output = dig(&server, &["nope.example.com", "ANY"]).await;
    assert!(output.contains("status: NXDOMAIN"), "{output}");
    // RFC 3225: DO comes back as it was sent.
    let output = dig(&server, &["+dnssec", "api.example.com", "A"]).await;
    assert!(
        output.contains("; EDNS: version: 0, flags: do;"),
        "{output}"
    );
    let output = dig(&server, &["api.example.com", "A"]).await;
    assert!(output.contains("; EDNS: version: 0, flags:;"), "{output}");
    // Every response is counted by query type and code, and dynamic answers by how.
    let stats = server.stats();
    assert_eq!(stats.queries("ANY", "NOERROR"), 1);
    assert_eq!(stats.queries("ANY", "NXDOMAIN"), 1);
    assert_eq!(stats.queries("A", "NOERROR"), 2);
    let metrics = stats.render();
    assert!(
        metrics.contains("meridian_dns_choices_total{policy=\"geo\",by=\"catch_all\"} 2\n"),
        "two A answers from an unknown client: {metrics}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_connections_beyond_the_limit_are_closed_and_the_rest_are_served() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let config = ServerConfig {
        max_tcp_connections: 2,
        ..ServerConfig::default()
    };
    let server = serving_example(config).await;
    let address = server.local_addr();
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(tokio::net::TcpStream::connect(address).await.unwrap());
    }
    // Both are open and idle; the third is closed without an answer.
    let mut third = tokio::net::TcpStream::connect(address).await.unwrap();
    let mut buffer = [0u8; 1];
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), third.read(&mut buffer))
        .await
        .expect("closed, not left hanging");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    // A held connection is served.
    let stream = &mut held[0];
    stream.write_all(&framed_soa_query(7)).await.unwrap();
    let length = stream.read_u16().await.unwrap();
    let mut response = vec![0u8; usize::from(length)];
    stream.read_exact(&mut response).await.unwrap();
    assert_eq!(Message::from_vec(&response).unwrap().answers.len(), 1);
    // Once one closes, a new connection is taken again (dig over TCP).
    held.clear();
    let mut output = String::new();
    for _ in 0..50 {
        output = dig(&server, &["+tcp", "+short", "example.com", "SOA"]).await;
        if output.starts_with("ns1.example.com.") {
            break;
        }
        // The server notices the closed connections when it next reads them.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(output.starts_with("ns1.example.com."), "{output}");
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_transfers_only_for_allowed_networks() {
    let refusing = start(&[]).await;
    let output = dig(&refusing, &["example.com", "AXFR"]).await;
    assert!(output.contains("Transfer failed"), "{output}");
    refusing.shutdown().await;

    let allowing = start(&["127.0.0.0/8"]).await;
    let output = dig(&allowing, &["example.com", "AXFR"]).await;
    let records: Vec<&str> = answers(&output);
    let soa_count = records.iter().filter(|l| l.contains("\tSOA\t")).count();
    assert_eq!(soa_count, 2, "AXFR opens and closes with the SOA: {output}");
    assert!(
        records.len() > example_zone().len(),
        "every record is transferred: {output}"
    );
    allowing.shutdown().await;
}

async fn query(
    socket: &UdpSocket,
    server: SocketAddr,
    name: &str,
    subnet: Option<&str>,
) -> Message {
    let mut request = Message::new(rand::random(), MessageType::Query, OpCode::Query);
    request.add_query(Query::query(Name::from_ascii(name).unwrap(), WireType::A));
    if let Some(subnet) = subnet {
        let (address, prefix) = subnet.split_once('/').unwrap();
        let mut edns = Edns::new();
        let ecs = hickory_proto::rr::rdata::opt::ClientSubnet::new(
            address.parse().unwrap(),
            prefix.parse().unwrap(),
            0,
        );
        edns.options_mut()
            .insert(hickory_proto::rr::rdata::opt::EdnsOption::Subnet(ecs));
        request.set_edns(edns);
    }
    socket
        .send_to(&request.to_vec().unwrap(), server)
        .await
        .unwrap();
    let mut buffer = vec![0u8; 4096];
    loop {
        let (length, _) = socket.recv_from(&mut buffer).await.unwrap();
        let response = Message::from_vec(&buffer[..length]).unwrap();
        if response.metadata.id == request.metadata.id {
            return response;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_answers_hold_their_proportions() {
    let server = start(&[]).await;
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let queries = 4000;
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for _ in 0..queries {
        let response = query(&socket, server.local_addr(), "w.example.com.", None).await;
        let [address] = a_records(&response)
            .try_into()
            .expect("exactly one target per answer");
        *counts.entry(address).or_default() += 1;
    }
    // Weights 1 and 3: a gets a quarter. Pearson's chi-square with one degree of freedom must
    // stay below 10.83 (p = 0.001), so a correct server fails this once in a thousand runs.
    let observed = [
        counts.get("198.18.0.1").copied().unwrap_or(0),
        counts.get("198.18.0.3").copied().unwrap_or(0),
    ];
    let expected = [f64::from(queries) / 4.0, f64::from(queries) * 3.0 / 4.0];
    let chi_square: f64 = observed
        .iter()
        .zip(expected)
        .map(|(o, e)| (f64::from(*o) - e).powi(2) / e)
        .sum();
    assert!(
        chi_square < 10.83,
        "observed {observed:?} for expected {expected:?}: chi-square {chi_square:.2}"
    );
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zone_updates_under_load_never_give_a_wrong_or_mixed_answer() {
    let server = Arc::new(start(&[]).await);
    let first = server.serial("example.com").unwrap();
    // Two versions of a chain whose intermediate names exist only in their own version: a
    // query that saw half of each would get a CNAME to a missing name.
    let version = |v: u8| {
        let mut records = example_zone();
        records.push(Endpoint::new(
            "v.example.com",
            RecordType::Cname,
            [format!("v{v}.example.com")],
            60,
        ));
        records.push(Endpoint::new(
            format!("v{v}.example.com"),
            RecordType::A,
            [format!("198.19.0.{v}")],
            60,
        ));
        records
    };
    server.publish(ZoneConfig::new("example.com"), version(1));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for _ in 0..2 {
        let (server, stop) = (server.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
            let mut seen = [0u32; 2];
            while !stop.load(Ordering::Relaxed) {
                let response = query(&socket, server.local_addr(), "v.example.com.", None).await;
                assert_eq!(response.metadata.response_code, ResponseCode::NoError);
                let target = response.answers.iter().find_map(|r| match &r.data {
                    RData::CNAME(c) => Some(c.0.to_ascii()),
                    _ => None,
                });
                match (target.as_deref(), a_records(&response).as_slice()) {
                    (Some("v1.example.com."), [ip]) if ip == "198.19.0.1" => seen[0] += 1,
                    (Some("v2.example.com."), [ip]) if ip == "198.19.0.2" => seen[1] += 1,
                    other => panic!("mixed or wrong answer: {other:?}"),
                }
            }
            seen
        }));
    }
    for round in 0..400u32 {
        server.publish(
            ZoneConfig::new("example.com"),
            version(if round % 2 == 0 { 2 } else { 1 }),
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut total = [0u32; 2];
    for client in clients {
        let seen = client.await.expect("no client saw a wrong answer");
        total[0] += seen[0];
        total[1] += seen[1];
    }
    assert!(
        total[0] > 0 && total[1] > 0,
        "both versions were served during the updates: {total:?}"
    );
    assert!(
        server.serial("example.com").unwrap() >= first + 400,
        "every one of the 400 changes raised the serial"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hickory_resolver_follows_the_chain() {
    use hickory_resolver::Resolver;
    use hickory_resolver::config::{NameServerConfig, ResolverConfig};
    use hickory_resolver::net::runtime::TokioRuntimeProvider;

    let server = start(&[]).await;
    for tcp in [false, true] {
        let mut name_server = if tcp {
            NameServerConfig::tcp(IpAddr::from([127, 0, 0, 1]))
        } else {
            NameServerConfig::udp(IpAddr::from([127, 0, 0, 1]))
        };
        name_server.connections[0].port = server.local_addr().port();
        let resolver = Resolver::builder_with_config(
            ResolverConfig::from_name_servers(vec![name_server]),
            TokioRuntimeProvider::default(),
        )
        .build()
        .unwrap();
        let addresses: Vec<IpAddr> = resolver
            .lookup_ip("api.example.com.")
            .await
            .unwrap()
            .iter()
            .collect();
        assert_eq!(addresses, [IE_IP.parse::<IpAddr>().unwrap()], "tcp={tcp}");
        assert!(resolver.lookup_ip("nope.example.com.").await.is_err());
    }
    server.shutdown().await;
}

/// UDP is read and written in batches (`recvmmsg`/`sendmmsg`): queries from several clients
/// sent faster than they are answered must each get one answer, sent to the client that asked,
/// with its own ID and question, whatever batch they shared.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_udp_answers_every_client_its_own_queries() {
    let server = start(&[]).await;
    let names = [
        ("deep.sub.example.com.", Some("198.18.1.1")),
        ("a.example.com.", Some("198.18.0.1")),
        ("b.example.com.", Some("198.18.0.3")),
        ("nothing.example.com.", None),
    ];
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    }
    // Waves of 32 queries per client, all sent before any answer is read, so the server's
    // socket queue holds many at once; small enough that no kernel buffer overflows.
    for wave in 0..8u16 {
        for client in &clients {
            for n in 0..32u16 {
                let id = wave * 32 + n;
                let (name, _) = names[usize::from(id) % names.len()];
                let mut request = Message::new(id, MessageType::Query, OpCode::Query);
                request.add_query(Query::query(Name::from_ascii(name).unwrap(), WireType::A));
                client
                    .send_to(&request.to_vec().unwrap(), server.local_addr())
                    .await
                    .unwrap();
            }
        }
        for client in &clients {
            let mut seen = std::collections::BTreeSet::new();
            let mut buffer = [0u8; 4096];
            while seen.len() < 32 {
                let (length, from) = tokio::time::timeout(
                    std::time::Duration::from_secs(10),
                    client.recv_from(&mut buffer),
                )
                .await
                .expect("every query is answered")
                .unwrap();
                assert_eq!(from, server.local_addr());
                let response = Message::from_vec(&buffer[..length]).unwrap();
                let id = response.metadata.id;
                assert!(id / 32 == wave, "answer {id} came to another wave {wave}");
                assert!(seen.insert(id), "query {id} answered twice");
                let (name, address) = names[usize::from(id) % names.len()];
                assert_eq!(response.queries[0].name().to_ascii(), name);
                assert_eq!(
                    a_records(&response),
                    address.map(String::from).into_iter().collect::<Vec<_>>()
                );
                let rcode = if address.is_some() {
                    ResponseCode::NoError
                } else {
                    ResponseCode::NXDomain
                };
                assert_eq!(response.metadata.response_code, rcode);
            }
        }
    }
}

/// A query for the SOA of example.com, framed for TCP.
fn framed_soa_query(id: u16) -> Vec<u8> {
    let mut request = Message::new(id, MessageType::Query, OpCode::Query);
    request.add_query(Query::query(
        Name::from_ascii("example.com.").unwrap(),
        WireType::SOA,
    ));
    let bytes = request.to_vec().unwrap();
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend(bytes);
    framed
}

/// Whether the server answers one SOA query on a new TCP connection from `source`.
async fn answered_over_tcp(server: std::net::SocketAddr, source: std::net::IpAddr) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::new(source, 0)).unwrap();
    let Ok(mut stream) = socket.connect(server).await else {
        return false;
    };
    if stream.write_all(&framed_soa_query(9)).await.is_err() {
        return false;
    }
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        let length = stream.read_u16().await?;
        let mut response = vec![0u8; usize::from(length)];
        stream.read_exact(&mut response).await?;
        Ok::<_, std::io::Error>(response)
    })
    .await;
    matches!(answer, Ok(Ok(response)) if Message::from_vec(&response).is_ok_and(|m| m.answers.len() == 1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_client_holds_a_few_tcp_connections_and_others_still_get_in() {
    let config = ServerConfig {
        max_tcp_per_client: 2,
        ..ServerConfig::default()
    };
    let server = serving_example(config).await;
    let address = server.local_addr();
    let (greedy, other): (std::net::IpAddr, std::net::IpAddr) =
        ("127.0.0.1".parse().unwrap(), "127.0.0.2".parse().unwrap());
    // The greedy client's two idle connections are open (the server answers on them)…
    let mut held = Vec::new();
    for _ in 0..2 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(std::net::SocketAddr::new(greedy, 0)).unwrap();
        held.push(socket.connect(address).await.unwrap());
    }
    assert!(
        answered_over_tcp(address, other).await,
        "another client is served"
    );
    // …and its third is closed unanswered, while another client's is served.
    assert!(!answered_over_tcp(address, greedy).await);
    assert!(answered_over_tcp(address, other).await);
    assert!(
        server
            .stats()
            .render()
            .contains("meridian_dns_tcp_closed_total{why=\"per_client\"} 1\n")
    );
    drop(held);
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_pipelines_and_never_reads_loses_its_connection_and_its_slot() {
    use tokio::io::AsyncWriteExt;
    // The stalled write's timeout is all the time the check that nobody else gets in has:
    // long enough that a loaded machine (CI runs two test binaries on two cores) does not
    // free the slot before the check connects (at 1 s it did, twice).
    let config = ServerConfig {
        max_tcp_connections: 1,
        tcp_idle: std::time::Duration::from_secs(5),
        ..ServerConfig::default()
    };
    let server = serving_example(config).await;
    let address = server.local_addr();
    let client: std::net::IpAddr = "127.0.0.3".parse().unwrap();
    // Reading nothing, with a small receive buffer, while writing question after question:
    // the server's answers fill both sides' buffers and its writes stop.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.bind(std::net::SocketAddr::new(client, 0)).unwrap();
    let stream = socket.connect(address).await.unwrap();
    let (reader, mut writer) = stream.into_split();
    // Far more answers than the send buffer the kernel lets a socket grow to (4 MiB).
    let questions: Vec<u8> = (0..200_000u32)
        .flat_map(|id| framed_soa_query(id as u16))
        .collect();
    let pipelining = tokio::spawn(async move {
        let _ = writer.write_all(&questions).await;
        writer
    });
    // The one slot is the pipeliner's: nobody else gets in meanwhile.
    assert!(!answered_over_tcp(address, "127.0.0.4".parse().unwrap()).await);
    // The stalled write times out, the connection goes, and the slot is free again.
    let mut freed = false;
    for _ in 0..100 {
        if answered_over_tcp(address, "127.0.0.4".parse().unwrap()).await {
            freed = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert!(
        freed,
        "a client that never reads held the server's only TCP slot"
    );
    drop((reader, pipelining));
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_zone_serves_its_own_soa_expire_and_two_weeks_by_default() {
    let server = NameServer::start("127.0.0.1:0".parse().unwrap(), ServerConfig::default())
        .await
        .unwrap();
    server.publish(ZoneConfig::new("example.com"), example_zone());
    server.publish(
        ZoneConfig::new("example.org").with_soa_expire(30 * 86_400),
        Vec::new(),
    );
    // `ns1.example.com. hostmaster.example.com. serial refresh retry expire minimum`
    let expire = |answer: String| -> String {
        answer
            .split_whitespace()
            .nth(5)
            .unwrap_or_default()
            .to_string()
    };
    let default = dig(&server, &["+short", "example.com", "SOA"]).await;
    assert_eq!(expire(default.clone()), "1209600", "{default}");
    let own = dig(&server, &["+short", "example.org", "SOA"]).await;
    assert_eq!(expire(own.clone()), "2592000", "{own}");
    server.shutdown().await;
}

/// A server with `config` on a free loopback port, serving the example zone.
async fn serving_example(config: ServerConfig) -> NameServer {
    let server = NameServer::start("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    server.publish(ZoneConfig::new("example.com"), example_zone());
    server
}
