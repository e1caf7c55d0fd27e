//! Joining a host that Kuadrant's dns-operator already publishes. The zone is seeded with what
//! a dns-operator cluster writes (`fixtures/dns-operator-zone.json`, after its documentation:
//! the dns-operator's Go module is not served by the module proxy here, so it cannot run in
//! the test bed). A Meridian cluster merges its branch into the host without rewriting the other
//! owner's records, and what it cannot merge is reported and left, on every look.

use std::collections::BTreeSet;

use meridian_dns::changes::{ZoneRecords, apply_strictly};
use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::plan::{PlanInput, Problem, Registry, plan};
use meridian_dns::shortcode::shortcode;
use meridian_dns::tree::{
    Address, ClusterTarget, GatewayRef, LoadBalancing, Strategy, build_record_tree,
};

const HOST: &str = "api.example.com";
const MERIDIAN: &str = "meridian-spoke-1";
const DNS_OPERATOR: &str = "2fgmvv67";

fn fixture() -> Vec<Endpoint> {
    let text = include_str!("fixtures/dns-operator-zone.json");
    let value: serde_json::Value = serde_json::from_str(text).expect("valid JSON");
    serde_json::from_value(value["records"].clone()).expect("records")
}

fn zone_of(records: &[Endpoint]) -> ZoneRecords {
    records.iter().map(|r| (r.key(), r.clone())).collect()
}

/// Meridian's branch of `host` for one cluster in `geo` (loadbalanced, with `default_geo`).
fn meridian_tree(host: &str, geo: &str, default_geo: &str) -> Vec<Endpoint> {
    let cluster = ClusterTarget {
        name: "spoke-1".into(),
        cluster_id: "9c6b4f4e-6a55-4f7e-9d1c-1f0a3c1d2e01".into(),
        labels: [(
            "kuadrant.io/lb-attribute-geo-code".to_string(),
            geo.to_string(),
        )]
        .into(),
        addresses: vec![Address::parse(None, "10.0.0.1").unwrap()],
        attached_routes: None,
        weight_percent: 100,
    };
    let strategy = Strategy::LoadBalanced(LoadBalancing {
        default_weight: 120,
        custom: Vec::new(),
        default_geo: Some(default_geo.into()),
        tiers: None,
    });
    let gateway = GatewayRef {
        name: "prod-web".into(),
        namespace: "gateways".into(),
    };
    build_record_tree(host, &gateway, &strategy, &[cluster])
        .expect("valid tree")
        .endpoints()
}

/// Plans Meridian's records for `host` against `zone`, applies them strictly, and returns
/// the problems and whether anything changed.
fn join(
    zone: &mut ZoneRecords,
    host: &str,
    desired: &[Endpoint],
    previous: Option<&[Endpoint]>,
) -> (Vec<Problem>, bool) {
    let current: Vec<Endpoint> = zone.values().cloned().collect();
    let planned = plan(
        &PlanInput {
            owner: MERIDIAN,
            root_host: host,
            desired,
            previous,
        },
        &current,
    );
    apply_strictly(zone, &planned.changes).expect("a plan the provider accepts");
    (planned.problems, !planned.changes.is_empty())
}

/// The fixture's records that are no longer in the zone exactly as the dns-operator wrote them.
fn rewritten(zone: &ZoneRecords) -> Vec<Endpoint> {
    fixture()
        .into_iter()
        .filter(|record| zone.get(&record.key()) != Some(record))
        .collect()
}

#[test]
fn the_owner_codes_in_the_dns_operators_docs_are_meridians_shortcodes() {
    // Pairs of owner ID and TXT name code from the dns-operator's documented zone.
    for (owner, code) in [
        ("2fgmvv67", "1a20rnj9"),
        ("26yn4kgw", "2o2qjax9"),
        ("34l61c8o", "31aztxux"),
    ] {
        assert_eq!(shortcode(owner, 8), code, "{owner}");
    }
}

#[test]
fn every_fixture_record_is_read_as_its_owners() {
    let registry = Registry::read(&fixture());
    let owners: BTreeSet<&str> = registry
        .ownership
        .values()
        .flat_map(|owners| owners.keys().map(String::as_str))
        .collect();
    assert_eq!(owners, BTreeSet::from(["26yn4kgw", "2fgmvv67", "34l61c8o"]));
    // Every record has its owner; no ownership TXT is left over as a plain record.
    for record in registry.records.values() {
        assert_ne!(record.record_type, RecordType::Txt, "{record:?} unread");
        let owners = registry.owners(&record.key());
        let wildcard = registry
            .wildcard_ownership
            .get(&record.key())
            .map(|o| o.len())
            .unwrap_or(0);
        assert!(owners.len() + wildcard == 1, "{record:?}");
    }
}

#[test]
fn a_meridian_cluster_joins_a_dns_operator_host_without_rewriting_its_records() {
    let mut zone = zone_of(&fixture());
    let mine = meridian_tree(HOST, "IE", "IE");
    let (problems, changed) = join(&mut zone, HOST, &mine, None);
    assert!(problems.is_empty(), "{problems:#?}");
    assert!(changed);
    assert_eq!(
        rewritten(&zone),
        [],
        "the dns-operator's records are as it wrote them"
    );

    // The shared names (root, geo records) now have both owners; the weighted level holds
    // both clusters side by side.
    let registry = Registry::read(&zone.values().cloned().collect::<Vec<_>>());
    for record in mine
        .iter()
        .filter(|r| r.dns_name == HOST || r.dns_name == "klb.api.example.com")
    {
        assert_eq!(
            registry.owners(&record.key()),
            BTreeSet::from([DNS_OPERATOR, MERIDIAN]),
            "{record:?}"
        );
    }
    let weighted: Vec<&Endpoint> = zone
        .values()
        .filter(|r| r.dns_name == "ie.klb.api.example.com")
        .collect();
    assert_eq!(weighted.len(), 2, "{weighted:#?}");

    // Looking again changes nothing; leaving takes only Meridian's part.
    assert_eq!(
        join(&mut zone, HOST, &mine, Some(&mine)),
        (Vec::new(), false)
    );
    join(&mut zone, HOST, &[], Some(&mine));
    assert_eq!(
        zone,
        zone_of(&fixture()),
        "the zone is the dns-operator's again"
    );
}

#[test]
fn what_meridian_cannot_merge_is_reported_and_left_on_every_look() {
    let mut zone = zone_of(&fixture());
    // The dns-operator's catch-all points at IE; this cluster's policy says US.
    let mine = meridian_tree(HOST, "US", "US");
    let (problems, _) = join(&mut zone, HOST, &mine, None);
    assert!(
        matches!(&problems[..], [Problem::ValueConflict { key, field: "target", .. }]
            if key.dns_name == "klb.api.example.com" && key.set_identifier.as_deref() == Some("default")),
        "{problems:#?}"
    );
    assert_eq!(rewritten(&zone), []);
    let published: Vec<Endpoint> = mine
        .iter()
        .filter(|r| r.set_identifier.as_deref() != Some("default"))
        .cloned()
        .collect();
    for _ in 0..3 {
        let (again, changed) = join(&mut zone, HOST, &mine, Some(&published));
        assert_eq!(again, problems);
        assert!(!changed, "not fought over");
    }

    // A host the dns-operator publishes as `simple` (an A record) cannot take Meridian's
    // loadbalanced CNAME.
    let simple = meridian_tree("simple.example.com", "IE", "IE");
    let (problems, _) = join(&mut zone, "simple.example.com", &simple, None);
    assert!(
        problems.iter().any(
            |p| matches!(p, Problem::TypeConflict { key, existing: RecordType::A }
            if key.dns_name == "simple.example.com")
        ),
        "{problems:#?}"
    );
    assert_eq!(rewritten(&zone), []);
}

#[test]
fn dns_operator_wildcard_and_grouped_records_are_shared_not_unowned() {
    for host in ["*.apps.example.com", "grouped.example.com"] {
        let mut zone = zone_of(&fixture());
        let mine = [Endpoint::new(
            host,
            RecordType::A,
            ["10.0.0.1".to_string()],
            60,
        )];
        let (problems, _) = join(&mut zone, host, &mine, None);
        assert!(problems.is_empty(), "{host}: {problems:#?}");
        let record = &zone[&mine[0].key()];
        assert_eq!(
            record.targets.len(),
            2,
            "{host}: targets unioned: {record:?}"
        );
        join(&mut zone, host, &[], Some(&mine));
        assert_eq!(zone, zone_of(&fixture()), "{host}: leaving restores theirs");
    }
}
