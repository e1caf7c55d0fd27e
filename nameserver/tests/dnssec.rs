//! Signed zones against real validators: Unbound (Debian) with the zone's DS as its only trust
//! anchor, and BIND's `delv`. GEO answers from three places, weighted answers, wildcards,
//! denials of names and of types, a large answer over TCP, and a tampered answer, which must
//! fail validation.

use std::net::SocketAddr;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
use hickory_proto::rr::{Name, RData, RecordType as WireType};
use meridian_nameserver::dnssec::{KeyAlgorithm, ZoneKeys, generate_key};
use meridian_nameserver::{GeoDb, NameServer, ServerConfig, ZoneConfig};
use meridian_testkit::geo_db::write_database;
use meridian_testkit::unbound::ValidatingResolver;
use tokio::net::UdpSocket;

mod common;

use common::{EU_IP, IE_IP, US_IP, a_records, example_zone};

/// Client subnets the GEO database places in Ireland, the US and France.
const PLACES: [(&str, &str, &str); 3] = [
    ("Ireland", "192.0.2.0/24", IE_IP),
    ("the US", "198.51.100.0/24", US_IP),
    ("France", "100.64.0.0/24", EU_IP),
];

fn keys(algorithm: KeyAlgorithm) -> Arc<ZoneKeys> {
    let ksk = generate_key(algorithm).unwrap();
    let zsk = generate_key(algorithm).unwrap();
    Arc::new(ZoneKeys::new("example.com", algorithm, &ksk, &zsk, &[], 3600).unwrap())
}

async fn signed_server(keys: &Arc<ZoneKeys>) -> NameServer {
    let geo = GeoDb::from_bytes(write_database(&[
        ("192.0.2.0/24".parse().unwrap(), "IE", "EU"),
        ("198.51.100.0/24".parse().unwrap(), "US", "NA"),
        ("100.64.0.0/24".parse().unwrap(), "FR", "EU"),
    ]))
    .unwrap();
    let config = ServerConfig {
        geo: Some(geo),
        ..ServerConfig::default()
    };
    let server = NameServer::start("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    let zone = ZoneConfig::new("example.com").signed_with(Some(keys.clone()));
    server.publish(zone, example_zone());
    server
}

/// A recursive query with DO set to `resolver`, from `subnet` (ECS) if given.
async fn ask(resolver: SocketAddr, name: &str, qtype: WireType, subnet: Option<&str>) -> Message {
    let mut request = Message::new(rand::random(), MessageType::Query, OpCode::Query);
    request.metadata.recursion_desired = true;
    request.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    let mut edns = Edns::new();
    edns.set_max_payload(1232);
    edns.set_dnssec_ok(true);
    if let Some(subnet) = subnet {
        let (address, prefix) = subnet.split_once('/').unwrap();
        let subnet = ClientSubnet::new(address.parse().unwrap(), prefix.parse().unwrap(), 0);
        edns.options_mut().insert(EdnsOption::Subnet(subnet));
    }
    request.set_edns(edns);
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let bytes = request.to_vec().unwrap();
    for _ in 0..3 {
        socket.send_to(&bytes, resolver).await.unwrap();
        let mut buffer = vec![0u8; 65535];
        let received =
            tokio::time::timeout(std::time::Duration::from_secs(5), socket.recv(&mut buffer)).await;
        if let Ok(Ok(length)) = received {
            let response = Message::from_vec(&buffer[..length]).unwrap();
            if response.metadata.truncation {
                return ask_over_tcp(resolver, &bytes).await;
            }
            return response;
        }
    }
    panic!("{resolver} did not answer {name} {qtype}");
}

/// The request `bytes` again over TCP, as a client does after a truncated answer.
async fn ask_over_tcp(resolver: SocketAddr, bytes: &[u8]) -> Message {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(resolver).await.unwrap();
    let mut framed = (bytes.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(bytes);
    stream.write_all(&framed).await.unwrap();
    let length = stream.read_u16().await.unwrap();
    let mut answer = vec![0u8; usize::from(length)];
    stream.read_exact(&mut answer).await.unwrap();
    Message::from_vec(&answer).unwrap()
}

/// Every question the validators are asked, and what a validated answer holds.
async fn assert_validated(resolver: &ValidatingResolver, what: &str) {
    let address = resolver.address;
    let validated = |response: &Message, question: &str| {
        assert!(
            response.metadata.authentic_data,
            "{what}: {question} is not validated (AD clear, {}); Unbound's log:\n{}",
            response.metadata.response_code,
            resolver.log()
        );
    };
    for (place, subnet, expected) in PLACES {
        let response = ask(address, "api.example.com.", WireType::A, Some(subnet)).await;
        validated(&response, &format!("api.example.com from {place}"));
        assert_eq!(a_records(&response), [expected], "{what}: from {place}");
        let response = ask(address, "x.apps.example.com.", WireType::A, Some(subnet)).await;
        validated(&response, &format!("the wildcard from {place}"));
        assert_eq!(
            a_records(&response),
            [expected],
            "{what}: wildcard from {place}"
        );
    }
    let weighted = ask(address, "w.example.com.", WireType::A, None).await;
    validated(&weighted, "the weighted name");
    let answer = a_records(&weighted);
    assert!(
        answer == ["198.18.0.1"] || answer == ["198.18.0.3"],
        "{what}: weighted {answer:?}"
    );
    for (name, qtype, question) in [
        (
            "missing.example.com.",
            WireType::A,
            "a name that does not exist",
        ),
        (
            "below.missing.example.com.",
            WireType::AAAA,
            "a name below one that does not",
        ),
        (
            "api.example.com.",
            WireType::MX,
            "a type the name does not have",
        ),
        ("sub.example.com.", WireType::A, "an empty non-terminal"),
        ("example.com.", WireType::A, "a type the apex does not have"),
    ] {
        let response = ask(address, name, qtype, None).await;
        validated(&response, question);
        assert!(
            matches!(
                response.metadata.response_code,
                ResponseCode::NoError | ResponseCode::NXDomain
            ) && a_records(&response).is_empty(),
            "{what}: {question}: {response:?}"
        );
    }
    let big = ask(address, "big.example.com.", WireType::TXT, None).await;
    validated(&big, "a TXT set too big for UDP (fetched over TCP)");
    assert_eq!(
        big.answers
            .iter()
            .filter(|r| r.record_type() == WireType::TXT)
            .count(),
        12
    );
    for qtype in [WireType::SOA, WireType::NS, WireType::DNSKEY, WireType::CDS] {
        let response = ask(address, "example.com.", qtype, None).await;
        validated(&response, &format!("the apex {qtype}"));
        assert!(
            response.answers.iter().any(|r| r.record_type() == qtype),
            "{what}: apex {qtype}"
        );
    }
}

/// `delv` (BIND 9) asked the nameserver directly, trusting the zone's DS: whether it says the
/// answer is fully validated.
fn delv(server: SocketAddr, keys: &ZoneKeys, name: &str, qtype: &str) -> String {
    let ds = keys.ds();
    let dir = tempfile::tempdir().unwrap();
    let anchor = dir.path().join("anchor.conf");
    std::fs::write(
        &anchor,
        format!(
            "trust-anchors {{ example.com. static-ds {} {} 2 \"{}\"; }};\n",
            ds.key_tag(),
            keys.algorithm().number(),
            ds.digest()
                .iter()
                .map(|b| format!("{b:02X}"))
                .collect::<String>()
        ),
    )
    .unwrap();
    let output = Command::new("delv")
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string(), "-a"])
        .arg(&anchor)
        .args(["+root=example.com", name, qtype])
        .output()
        .expect("delv runs (Debian bind9-dnsutils)");
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbound_and_delv_validate_every_kind_of_answer_with_either_algorithm() {
    for algorithm in [KeyAlgorithm::EcdsaP256Sha256, KeyAlgorithm::Ed25519] {
        let keys = keys(algorithm);
        let server = signed_server(&keys).await;
        let resolver =
            ValidatingResolver::start("example.com", &[server.local_addr()], &keys.ds_line())
                .await
                .unwrap();
        assert_validated(&resolver, algorithm.name()).await;
        for (name, qtype) in [
            ("api.example.com", "A"),
            ("w.example.com", "A"),
            ("missing.example.com", "A"),
            ("api.example.com", "MX"),
        ] {
            let said = delv(server.local_addr(), &keys, name, qtype);
            assert!(
                said.contains("fully validated"),
                "{algorithm}: delv {name} {qtype}:\n{said}"
            );
        }
    }
}

/// A UDP relay that rewrites the addresses in every A answer when told to, keeping the
/// signatures: what an attacker on the path would do.
async fn tampering_relay(upstream: SocketAddr, tamper: Arc<AtomicBool>) -> SocketAddr {
    let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let address = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buffer = vec![0u8; 65535];
        loop {
            let Ok((length, client)) = socket.recv_from(&mut buffer).await else {
                return;
            };
            let request = buffer[..length].to_vec();
            let (socket, tamper) = (socket.clone(), tamper.clone());
            tokio::spawn(async move {
                let relay = UdpSocket::bind("127.0.0.1:0").await.unwrap();
                relay.send_to(&request, upstream).await.unwrap();
                let mut answer = vec![0u8; 65535];
                let Ok(length) = relay.recv(&mut answer).await else {
                    return;
                };
                let mut answer = answer[..length].to_vec();
                if tamper.load(Ordering::Relaxed) {
                    let mut message = Message::from_vec(&answer).unwrap();
                    for record in &mut message.answers {
                        if let RData::A(a) = &mut record.data {
                            a.0 = "198.51.100.66".parse().unwrap();
                        }
                    }
                    answer = message.to_vec().unwrap();
                }
                let _ = socket.send_to(&answer, client).await;
            });
        }
    });
    address
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_answer_fails_validation() {
    let keys = keys(KeyAlgorithm::EcdsaP256Sha256);
    let server = signed_server(&keys).await;
    let tamper = Arc::new(AtomicBool::new(false));
    let relay = tampering_relay(server.local_addr(), tamper.clone()).await;
    let resolver = ValidatingResolver::start("example.com", &[relay], &keys.ds_line())
        .await
        .unwrap();
    // Untouched, it validates: the relay itself breaks nothing.
    let honest = ask(resolver.address, "w.example.com.", WireType::A, None).await;
    assert!(honest.metadata.authentic_data, "{}", resolver.log());
    tamper.store(true, Ordering::Relaxed);
    let forged = ask(
        resolver.address,
        "api.example.com.",
        WireType::A,
        Some(PLACES[0].1),
    )
    .await;
    assert_eq!(
        forged.metadata.response_code,
        ResponseCode::ServFail,
        "a forged address must not reach the client: {forged:?}"
    );
    assert!(a_records(&forged).is_empty());
    assert!(
        resolver.log().contains("validation failure"),
        "Unbound says why: {}",
        resolver.log()
    );
}

/// What a secondary gets of a signed zone: its transfer is refused, with an extended DNS error
/// that says why (a secondary serving the records unsigned under the parent's DS would fail
/// every validator). BIND's and Knot's transfer clients see the same REFUSED as `dig`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_zone_is_not_transferred_and_the_refusal_says_why() {
    let keys = keys(KeyAlgorithm::EcdsaP256Sha256);
    let config = ServerConfig {
        transfer_allowed: vec!["127.0.0.0/8".parse().unwrap()],
        ..ServerConfig::default()
    };
    let server = NameServer::start("127.0.0.1:0".parse().unwrap(), config)
        .await
        .unwrap();
    server.publish(
        ZoneConfig::new("example.com").signed_with(Some(keys.clone())),
        example_zone(),
    );
    let axfr = |server: SocketAddr| {
        let output = Command::new("dig")
            .arg(format!("@{}", server.ip()))
            .args(["-p", &server.port().to_string(), "+time=3", "+tries=1"])
            .args(["example.com", "AXFR"])
            .output()
            .expect("dig runs");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let refused = axfr(server.local_addr());
    assert!(refused.contains("Transfer failed"), "{refused}");
    // A request with EDNS gets the reason as an extended DNS error (RFC 8914, option 15).
    let mut request = Message::new(7, MessageType::Query, OpCode::Query);
    request.add_query(Query::query(
        Name::from_ascii("example.com.").unwrap(),
        WireType::AXFR,
    ));
    request.set_edns(Edns::new());
    let response = ask_over_tcp(server.local_addr(), &request.to_vec().unwrap()).await;
    assert_eq!(response.metadata.response_code, ResponseCode::Refused);
    assert!(response.answers.is_empty());
    let reason = response
        .edns
        .as_ref()
        .and_then(|edns| edns.option(hickory_proto::rr::rdata::opt::EdnsCode::Unknown(15)))
        .and_then(|option| match option {
            EdnsOption::Unknown(15, data) => Some(String::from_utf8_lossy(&data[2..]).into_owned()),
            _ => None,
        })
        .unwrap_or_default();
    assert!(
        reason.contains("secondaries cannot serve it"),
        "{response:?}"
    );
    // Unsigned, the same zone transfers.
    server.publish(ZoneConfig::new("example.com"), example_zone());
    let transferred = axfr(server.local_addr());
    assert!(transferred.contains("api.example.com."), "{transferred}");
    assert!(!transferred.contains("Transfer failed"), "{transferred}");
}
