//! What the nameserver's integration tests share: the zone they serve.

use std::collections::BTreeMap;

use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::tree::{
    Address, ClusterTarget, GatewayRef, LoadBalancing, Strategy, build_record_tree,
};

const GEO_LABEL: &str = "kuadrant.io/lb-attribute-geo-code";
pub const IE_IP: &str = "203.0.113.1";
pub const US_IP: &str = "203.0.113.2";
pub const EU_IP: &str = "203.0.113.3";

fn cluster(n: u32, geo: &str, ip: &str) -> ClusterTarget {
    ClusterTarget {
        name: format!("c{n}"),
        cluster_id: format!("test-cluster-{n}"),
        labels: BTreeMap::from([(GEO_LABEL.to_string(), geo.to_string())]),
        addresses: vec![Address::parse(None, ip).unwrap()],
        attached_routes: None,
        weight_percent: 100,
    }
}

/// The zone every test serves: a GEO tree, a weighted pair, a wildcard tree, a TXT too big for
/// 512 bytes, and a name with only a child (an empty non-terminal).
pub fn example_zone() -> Vec<Endpoint> {
    let gateway = GatewayRef {
        name: "prod-web".into(),
        namespace: "gateways".into(),
    };
    let geo = Strategy::LoadBalanced(LoadBalancing {
        default_weight: 120,
        custom: Vec::new(),
        default_geo: Some("IE".into()),
        tiers: None,
    });
    let clusters = [
        cluster(1, "IE", IE_IP),
        cluster(2, "US", US_IP),
        cluster(3, "GEO-EU", EU_IP),
    ];
    let mut records = build_record_tree("api.example.com", &gateway, &geo, &clusters)
        .unwrap()
        .endpoints();
    records.extend(
        build_record_tree("*.apps.example.com", &gateway, &geo, &clusters)
            .unwrap()
            .endpoints(),
    );
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
