//! What the nameserver's integration tests share: the zone they serve, and how they read
//! answers. Each test file uses a part of it.
#![allow(dead_code)]

use hickory_proto::op::Message;
use hickory_proto::rr::RData;
use meridian_dns::model::{Endpoint, RecordType};
use meridian_testkit::trees::{geo_policy, three_clusters, tree};

pub const IE_IP: &str = "203.0.113.1";
pub const US_IP: &str = "203.0.113.2";
pub const EU_IP: &str = "203.0.113.3";

/// The zone every test serves: a GEO tree, a weighted pair, a wildcard tree, a TXT too big for
/// 512 bytes, and a name with only a child (an empty non-terminal).
pub fn example_zone() -> Vec<Endpoint> {
    let clusters = three_clusters([IE_IP, US_IP, EU_IP]);
    let mut records = tree("api.example.com", &geo_policy(), &clusters);
    records.extend(tree("*.apps.example.com", &geo_policy(), &clusters));
    for (set, weight) in [("a", 1), ("b", 3)] {
        records.push(
            Endpoint::new(
                "w.example.com",
                RecordType::Cname,
                [format!("{set}.example.com")],
                60,
            )
            .with_set_identifier(set)
            .with_property("weight", weight.to_string()),
        );
        records.push(Endpoint::new(
            format!("{set}.example.com"),
            RecordType::A,
            [format!("198.18.0.{weight}")],
            60,
        ));
    }
    records.push(Endpoint::new(
        "big.example.com",
        RecordType::Txt,
        (0..12).map(|i| format!("{i:02}{}", "x".repeat(90))),
        60,
    ));
    records.push(Endpoint::new(
        "deep.sub.example.com",
        RecordType::A,
        ["198.18.1.1".to_string()],
        60,
    ));
    records
}

/// The IPv4 addresses of a response's answers, in its order.
pub fn a_records(response: &Message) -> Vec<String> {
    response
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect()
}
