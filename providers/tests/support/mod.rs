//! Helpers shared by the provider tests: drive any provider with the engine's own plans, and
//! the clusters and policy they publish. Each test file uses a part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;

use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, RecordType, is_at_or_below, sort_endpoints};
use meridian_dns::plan::{PlanInput, plan};
use meridian_dns::tree::{
    Address, ClusterTarget, CustomWeight, GatewayRef, LabelSelector, LoadBalancing, Strategy,
    build_record_tree,
};
use meridian_providers::Provider;

/// Plans `desired` for `owner` against the zone as the provider holds it, and applies the plan.
pub async fn converge<P: Provider>(
    provider: &P,
    zone: &str,
    owner: &str,
    host: &str,
    desired: &[Endpoint],
    previous: Option<&[Endpoint]>,
) {
    let current = provider.records(zone).await.unwrap();
    let planned = plan(
        &PlanInput {
            owner,
            root_host: host,
            desired,
            previous,
        },
        &current,
    );
    assert!(planned.problems.is_empty(), "{:?}", planned.problems);
    provider.apply(zone, &planned.changes).await.unwrap();
}

/// The zone's records at or below `host`, without ownership records, sorted.
pub async fn published<P: Provider>(provider: &P, zone: &str, host: &str) -> Vec<Endpoint> {
    let base = host.trim_start_matches("*.");
    let mut records: Vec<Endpoint> = provider
        .records(zone)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| is_at_or_below(&r.dns_name, base) && r.record_type != RecordType::Txt)
        .collect();
    sort_endpoints(&mut records);
    records
}

/// The Gateway every test tree is built for.
pub fn gateway() -> GatewayRef {
    GatewayRef {
        name: "prod-web".into(),
        namespace: "gateways".into(),
    }
}

pub fn cluster(n: u32, geo: &str, address: &str, cloud: &str) -> ClusterTarget {
    let hostname = address.parse::<std::net::IpAddr>().is_err();
    ClusterTarget {
        name: format!("c{n}"),
        cluster_id: format!("test-cluster-{n}"),
        labels: BTreeMap::from([
            (
                "kuadrant.io/lb-attribute-geo-code".to_string(),
                geo.to_string(),
            ),
            (
                "kuadrant.io/lb-attribute-cloud".to_string(),
                cloud.to_string(),
            ),
        ]),
        addresses: vec![
            Address::parse(
                Some(if hostname { "Hostname" } else { "IPAddress" }),
                address,
            )
            .unwrap(),
        ],
        attached_routes: None,
        weight_percent: 100,
    }
}

/// Four clusters: two in IE (one of them on Azure), one in the US, and one in GEO-EU behind a
/// hostname, so a GEO tree has a weighted group of two, groups of one, and a CNAME leaf.
pub fn four_clusters() -> Vec<ClusterTarget> {
    vec![
        cluster(1, "IE", "192.0.2.1", "Azure"),
        cluster(2, "US", "192.0.2.2", "AWS"),
        cluster(4, "IE", "192.0.2.4", "AWS"),
        cluster(3, "GEO-EU", "lb-3.elb.example.net", "AWS"),
    ]
}

pub fn geo_policy(azure_weight: u32) -> Strategy {
    let azure = LabelSelector {
        match_labels: [("kuadrant.io/lb-attribute-cloud".into(), "Azure".into())].into(),
        ..Default::default()
    };
    Strategy::LoadBalanced(LoadBalancing {
        default_weight: 120,
        custom: vec![CustomWeight {
            selector: azure,
            weight: azure_weight,
        }],
        default_geo: Some("IE".into()),
        tiers: None,
    })
}

/// The records of `host`'s tree for `clusters`.
pub fn tree(host: &str, strategy: &Strategy, clusters: &[ClusterTarget]) -> Vec<Endpoint> {
    build_record_tree(host, &gateway(), strategy, clusters)
        .unwrap()
        .endpoints()
}

/// Simple → load-balanced → simple on one live name; each switch (A ↔ CNAME) lands whole.
pub async fn switch_simple_and_loadbalanced<P: Provider>(provider: &P, zone: &str) {
    let host = "shop.example.com";
    let ips = [
        cluster(1, "IE", "192.0.2.1", "AWS"),
        cluster(2, "US", "192.0.2.2", "AWS"),
    ];
    let simple = tree(host, &Strategy::Simple, &ips);
    let loadbalanced = tree(host, &geo_policy(30), &ips);
    converge(provider, zone, "hub", host, &simple, None).await;
    assert_eq!(published(provider, zone, host).await, simple);
    converge(provider, zone, "hub", host, &loadbalanced, Some(&simple)).await;
    assert_eq!(
        published(provider, zone, host).await,
        loadbalanced,
        "A became CNAME in one batch"
    );
    converge(provider, zone, "hub", host, &simple, Some(&loadbalanced)).await;
    assert_eq!(published(provider, zone, host).await, simple, "and back");
}

/// An unowned record and another owner's tree stay exactly as they were while "hub" publishes
/// and then removes its own tree in the same zone.
pub async fn leave_foreign_records_alone<P: Provider>(
    provider: &P,
    zone: &str,
    clusters: &[ClusterTarget],
) {
    let legacy = Endpoint::new(
        "legacy.api.example.com",
        RecordType::A,
        ["198.51.100.1".to_string()],
        300,
    );
    provider
        .apply(
            zone,
            &Changes {
                creates: vec![legacy],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let theirs = tree("other.example.com", &geo_policy(30), clusters);
    converge(
        provider,
        zone,
        "someone-else",
        "other.example.com",
        &theirs,
        None,
    )
    .await;
    let before = provider.records(zone).await.unwrap();

    let host = "api.example.com";
    let desired = tree(host, &geo_policy(30), clusters);
    converge(provider, zone, "hub", host, &desired, None).await;
    converge(provider, zone, "hub", host, &[], Some(&desired)).await;
    assert_eq!(provider.records(zone).await.unwrap(), before);
}

/// From a converged `desired` tree at `host`: re-planning changes nothing, a new weight lands
/// exactly, and removing the tree leaves nothing of ours (the zone's NS records stay).
pub async fn replan_reweight_and_remove<P: Provider>(
    provider: &P,
    zone: &str,
    host: &str,
    desired: &[Endpoint],
    clusters: &[ClusterTarget],
) {
    let current = provider.records(zone).await.unwrap();
    let again = plan(
        &PlanInput {
            owner: "hub",
            root_host: host,
            desired,
            previous: Some(desired),
        },
        &current,
    );
    assert!(
        again.changes.is_empty(),
        "a converged zone plans no change: {:#?}",
        again.changes
    );

    let reweighted = tree(host, &geo_policy(200), clusters);
    converge(provider, zone, "hub", host, &reweighted, Some(desired)).await;
    assert_eq!(published(provider, zone, host).await, reweighted);

    converge(provider, zone, "hub", host, &[], Some(&reweighted)).await;
    let left: Vec<Endpoint> = provider
        .records(zone)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.record_type != RecordType::Ns)
        .collect();
    assert!(left.is_empty(), "nothing of ours is left: {left:#?}");
}
