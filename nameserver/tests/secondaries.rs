//! Standard secondaries follow the embedded nameserver: BIND 9 and Knot DNS (Debian packages)
//! load the zone by AXFR, are told of every change by NOTIFY and fetch it by IXFR, all signed
//! with TSIG; dig checks the signed transfers as a client; a wrong key gets nothing.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

use base64::Engine as _;
use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType as WireType};
use meridian_dns::model::{Endpoint, RecordType};
use meridian_nameserver::{NameServer, ServerConfig, TsigKey, ZoneConfig, ZoneNameServer};
use meridian_testkit::bind_server::free_dns_port;
use meridian_testkit::secondaries::{Kind, Primary, Secondary};
use meridian_testkit::trees::{GEO_LABEL, cluster, geo_policy, tree};

mod common;
use tokio::net::UdpSocket;

const ZONE: &str = "example.com";
const KEY_NAME: &str = "meridian-transfer";
/// How long a secondary may take to follow, at most, before the test gives up (it normally
/// takes well under a second; the figure printed is the measure).
const PATIENCE: Duration = Duration::from_secs(30);

fn secret(seed: u8) -> String {
    base64::engine::general_purpose::STANDARD.encode([seed; 32])
}

fn zone_config() -> ZoneConfig {
    ZoneConfig::with_name_servers(
        ZONE,
        [ZoneNameServer {
            name: "ns1.example.com".into(),
            addresses: vec!["127.0.0.1".parse().unwrap()],
        }],
    )
}

/// A GEO name over weighted names (what secondaries get flattened), a plain name, and enough
/// filler that a transfer spans several messages (each one signed, chained to the last).
fn records(version: u32) -> Vec<Endpoint> {
    // Two clusters in IE (a weighted set of two), one in the US.
    let in_geo = |n: u32, geo: &str| cluster(n, &[(GEO_LABEL, geo)], &[&format!("203.0.113.{n}")]);
    let mut records = tree(
        "api.example.com",
        &geo_policy(),
        &[in_geo(1, "IE"), in_geo(2, "IE"), in_geo(3, "US")],
    );
    for n in 0..400 {
        records.push(Endpoint::new(
            format!("filler-{n}.example.com"),
            RecordType::A,
            [format!("198.18.{}.{}", n / 250, n % 250)],
            60,
        ));
    }
    // What changes from one version to the next.
    records.push(Endpoint::new(
        "changing.example.com",
        RecordType::A,
        [format!("198.19.0.{version}")],
        60,
    ));
    records
}

async fn ask(server: SocketAddr, name: &str, record_type: WireType) -> Option<Message> {
    let socket = UdpSocket::bind("127.0.0.1:0").await.ok()?;
    let mut request = Message::new(rand::random(), MessageType::Query, OpCode::Query);
    request.add_query(Query::query(
        Name::from_ascii(format!("{name}.")).unwrap(),
        record_type,
    ));
    socket.send_to(&request.to_vec().ok()?, server).await.ok()?;
    let mut buffer = vec![0u8; 4096];
    let (length, _) = tokio::time::timeout(Duration::from_secs(1), socket.recv_from(&mut buffer))
        .await
        .ok()?
        .ok()?;
    Message::from_vec(&buffer[..length]).ok()
}

async fn serial(server: SocketAddr) -> Option<u32> {
    let response = ask(server, ZONE, WireType::SOA).await?;
    response.answers.iter().find_map(|r| match &r.data {
        RData::SOA(soa) => Some(soa.serial),
        _ => None,
    })
}

async fn addresses(server: SocketAddr, name: &str) -> BTreeSet<String> {
    let Some(response) = ask(server, name, WireType::A).await else {
        return BTreeSet::new();
    };
    common::a_records(&response).into_iter().collect()
}

/// Waits until every secondary serves `serial`; returns how long each took.
async fn followed(secondaries: &[&Secondary], serial: u32) -> Vec<Duration> {
    let start = Instant::now();
    let mut took = vec![None; secondaries.len()];
    while took.iter().any(Option::is_none) {
        for (index, secondary) in secondaries.iter().enumerate() {
            if took[index].is_none() && self::serial(secondary.address).await == Some(serial) {
                took[index] = Some(start.elapsed());
            }
        }
        if start.elapsed() > PATIENCE {
            let logs: Vec<String> = secondaries.iter().map(|s| s.log()).collect();
            panic!("serial {serial} did not reach every secondary: {took:?}\n{logs:#?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    took.into_iter().flatten().collect()
}

fn dig(server: SocketAddr, args: &[&str]) -> String {
    let output = Command::new("dig")
        .args([
            &format!("@{}", server.ip()),
            "-p",
            &server.port().to_string(),
            "+time=3",
            "+tries=1",
        ])
        .args(args)
        .output()
        .expect("dig runs (Debian dnsutils)");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_and_knot_follow_every_change_through_notify_and_ixfr() {
    let key = TsigKey::new(KEY_NAME, "hmac-sha256", &secret(7)).unwrap();
    let [bind_port, knot_port, wrong_port] = [(); 3].map(|_| free_dns_port().expect("a free port"));
    let loopback = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));
    let server = NameServer::start(
        "127.0.0.1:0".parse().unwrap(),
        ServerConfig {
            tsig_keys: vec![key.clone()],
            notify: vec![loopback(bind_port), loopback(knot_port)],
            ..ServerConfig::default()
        },
    )
    .await
    .unwrap();
    let config = zone_config();
    server.publish(config.clone(), records(1));
    let first = server.serial(ZONE).unwrap();

    let primary = Primary {
        address: server.local_addr(),
        key_name: KEY_NAME.into(),
        algorithm: "hmac-sha256".into(),
        secret: secret(7),
    };
    let bind = Secondary::start(Kind::Bind, bind_port, ZONE, &primary).unwrap();
    let knot = Secondary::start(Kind::Knot, knot_port, ZONE, &primary).unwrap();
    let wrong_key = Primary {
        secret: secret(8),
        ..primary.clone()
    };
    let refused = Secondary::start(Kind::Bind, wrong_port, ZONE, &wrong_key).unwrap();

    let took = followed(&[&bind, &knot], first).await;
    println!("initial AXFR: BIND {:?}, Knot {:?}", took[0], took[1]);
    for secondary in [&bind, &knot] {
        // The GEO name over weighted names is every address it leads to; a plain name as is.
        assert_eq!(
            addresses(secondary.address, "api.example.com").await,
            BTreeSet::from(["203.0.113.1", "203.0.113.2", "203.0.113.3"].map(String::from)),
            "{:?}",
            secondary.kind
        );
        assert_eq!(
            addresses(secondary.address, "changing.example.com").await,
            BTreeSet::from(["198.19.0.1".to_string()])
        );
    }

    // Changes reach both by NOTIFY and IXFR.
    for version in 2..=4 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        server.publish(config.clone(), records(version));
        let serial = server.serial(ZONE).unwrap();
        let took = followed(&[&bind, &knot], serial).await;
        println!(
            "change {version} (serial {serial}) served by BIND after {:?}, Knot after {:?}",
            took[0], took[1]
        );
        for secondary in [&bind, &knot] {
            assert_eq!(
                addresses(secondary.address, "changing.example.com").await,
                BTreeSet::from([format!("198.19.0.{version}")]),
                "{:?}",
                secondary.kind
            );
        }
    }
    // Each change after the first load travelled alone: 6 records (the new SOA, the old one,
    // the address out, the new SOA, the address in, the new SOA again), not the whole zone.
    let bind_log = bind.log();
    let transfer_sizes: Vec<&str> = bind_log
        .lines()
        .filter_map(|line| {
            line.split_once("Transfer completed: ")?
                .1
                .split_once(" bytes")
        })
        .map(|(size, _)| size)
        .collect();
    assert!(
        transfer_sizes.len() >= 4
            && transfer_sizes[1..]
                .iter()
                .all(|size| size.starts_with("1 messages, 6 records")),
        "BIND took the changes by IXFR: {transfer_sizes:?}\n{bind_log}"
    );
    let knot_log = knot.log();
    assert!(
        knot_log.contains("IXFR, incoming") && knot_log.contains("notify, incoming"),
        "Knot took the changes by IXFR after NOTIFY:\n{knot_log}"
    );

    if std::env::var_os("MERIDIAN_SHOW_LOGS").is_some() {
        println!("{bind_log}\n{knot_log}");
    }
    // dig checks every signed message of a transfer that spans several.
    let signing = format!("hmac-sha256:{KEY_NAME}:{}", secret(7));
    let axfr = dig(server.local_addr(), &["-y", &signing, ZONE, "AXFR"]);
    assert!(axfr.contains("XFR size: "), "{axfr}");
    assert!(!axfr.contains("tsig verify failure"), "{axfr}");
    let records_in = |text: &str| text.lines().filter(|l| l.contains("\tIN\t")).count();
    assert!(records_in(&axfr) > 400, "{axfr}");
    let serial = server.serial(ZONE).unwrap();
    let ixfr = dig(
        server.local_addr(),
        &["-y", &signing, ZONE, &format!("IXFR={}", serial - 1)],
    );
    assert!(!ixfr.contains("tsig verify failure"), "{ixfr}");
    assert_eq!(
        records_in(&ixfr),
        6,
        "IXFR from the last serial: SOA, old SOA, one out, new SOA, one in, SOA:\n{ixfr}"
    );

    // A wrong key, or none, gets nothing.
    let wrong = format!("hmac-sha256:{KEY_NAME}:{}", secret(8));
    let output = dig(server.local_addr(), &["-y", &wrong, ZONE, "AXFR"]);
    assert_eq!(records_in(&output), 0, "{output}");
    let output = dig(server.local_addr(), &["+tcp", ZONE, "AXFR"]);
    assert_eq!(records_in(&output), 0, "{output}");
    assert!(output.contains("Transfer failed"), "{output}");
    assert_eq!(
        ask(refused.address, "changing.example.com", WireType::A)
            .await
            .map(|r| r.metadata.response_code),
        Some(ResponseCode::ServFail),
        "the secondary with the wrong key never had the zone:\n{}",
        refused.log()
    );
    let refused_log = refused.log();
    assert!(
        refused_log.contains("NOTAUTH") || refused_log.contains("tsig"),
        "{refused_log}"
    );
    server.shutdown().await;
}
