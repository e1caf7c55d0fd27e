//! The RFC2136 provider against BIND 9 (Debian `bind9`), started by the test on loopback with a
//! generated configuration and TSIG key: UPDATE to write, AXFR to read, both signed.

use base64::Engine as _;
mod support;
use support::{converge, create, plan_at, published, weighted};

use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, RecordType, is_at_or_below};
use meridian_dns::plan::{PlanInput, plan};
use meridian_dns::tree::ClusterTarget;
use meridian_providers::rfc2136::{Rfc2136Provider, plain_dns_records};
use meridian_providers::{Provider, ProviderError};
use meridian_testkit::bind_server::BindServer;
use meridian_testkit::trees::{geo_policy, three_clusters, tree};
use meridian_testkit::zone_id_of;

async fn start_bind() -> BindServer {
    BindServer::start("example.com").await.unwrap()
}

fn clusters() -> Vec<ClusterTarget> {
    three_clusters(["192.0.2.1", "192.0.2.2", "2001:db8::3"])
}

fn geo_tree(host: &str, clusters: &[ClusterTarget]) -> Vec<Endpoint> {
    tree(host, &geo_policy(), clusters)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flattened_tree_lands_updates_and_leaves_others_alone() {
    let bind = start_bind().await;
    let provider = Rfc2136Provider::new(bind.config.clone()).unwrap();
    let (theirs, _) = plain_dns_records(
        "other.example.com",
        &geo_tree("other.example.com", &clusters()),
    );
    converge(
        &provider,
        "example.com",
        "someone-else",
        "other.example.com",
        &theirs,
        None,
    )
    .await;
    let before = provider.records("example.com").await.unwrap();

    let host = "api.example.com";
    let (desired, notes) = plain_dns_records(host, &geo_tree(host, &clusters()));
    assert!(
        notes[0].contains("weights and GEO are not honoured"),
        "{notes:?}"
    );
    assert_eq!(
        desired,
        [
            Endpoint::new(
                host,
                RecordType::A,
                ["192.0.2.1".to_string(), "192.0.2.2".to_string()],
                60
            ),
            Endpoint::new(host, RecordType::Aaaa, ["2001:db8::3".to_string()], 60),
        ],
        "every cluster address, at the host"
    );
    converge(&provider, "example.com", "hub", host, &desired, None).await;
    assert_eq!(published(&provider, "example.com", host).await, desired);
    let again = plan_at(
        &provider,
        "example.com",
        "hub",
        host,
        &desired,
        Some(&desired),
    )
    .await;
    assert!(
        again.changes.is_empty(),
        "what BIND holds reads back exactly: {:#?}",
        again.changes
    );

    let (fewer, _) = plain_dns_records(host, &geo_tree(host, &clusters()[..1]));
    converge(
        &provider,
        "example.com",
        "hub",
        host,
        &fewer,
        Some(&desired),
    )
    .await;
    assert_eq!(published(&provider, "example.com", host).await, fewer);

    converge(&provider, "example.com", "hub", host, &[], Some(&fewer)).await;
    assert_eq!(
        provider.records("example.com").await.unwrap(),
        before,
        "only our records came and went"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_records_and_a_wrong_key_are_refused() {
    let bind = start_bind().await;
    let provider = Rfc2136Provider::new(bind.config.clone()).unwrap();
    let choice = weighted("w.example.com", RecordType::A, "192.0.2.1", "a", "10");
    let error = create(&provider, "example.com", vec![choice])
        .await
        .unwrap_err();
    assert!(
        matches!(error, ProviderError::Invalid(_))
            && error.to_string().contains("no weighted or GEO"),
        "{error}"
    );

    let mut wrong = bind.config.clone();
    wrong.secret = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let intruder = Rfc2136Provider::new(wrong).unwrap();
    assert!(
        intruder.records("example.com").await.is_err(),
        "AXFR needs the key"
    );
    let change = Changes {
        creates: vec![Endpoint::new(
            "x.example.com",
            RecordType::A,
            ["192.0.2.9".to_string()],
            60,
        )],
        ..Default::default()
    };
    assert!(
        intruder.apply("example.com", &change).await.is_err(),
        "UPDATE needs the key"
    );
    assert!(
        provider
            .records("example.com")
            .await
            .unwrap()
            .iter()
            .all(|r| r.dns_name != "x.example.com")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_plan_lands_identically_on_bind_and_route53() {
    use meridian_testkit::moto::MotoServer;

    let bind = start_bind().await;
    let rfc2136 = Rfc2136Provider::new(bind.config.clone()).unwrap();
    let moto = MotoServer::start().unwrap();
    moto.create_zone("example.com").await.unwrap();
    let route53 = moto.provider(1000);
    let zone_id = zone_id_of(&route53, "example.com").await;

    // What plain DNS can express: the flattened tree, with its ownership records.
    let host = "api.example.com";
    let (desired, _) = plain_dns_records(host, &geo_tree(host, &clusters()));
    let planned = plan(
        &PlanInput {
            owner: "hub",
            root_host: host,
            desired: &desired,
            previous: None,
        },
        &[],
    );
    rfc2136
        .apply("example.com", &planned.changes)
        .await
        .unwrap();
    route53.apply(&zone_id, &planned.changes).await.unwrap();

    let ours = |records: Vec<Endpoint>| -> Vec<Endpoint> {
        records
            .into_iter()
            .filter(|r| is_at_or_below(&r.dns_name, host) || r.dns_name.starts_with("kuadrant-"))
            .collect()
    };
    let on_bind = ours(rfc2136.records("example.com").await.unwrap());
    let on_route53 = ours(route53.records(&zone_id).await.unwrap());
    assert_eq!(
        on_bind.len(),
        4,
        "two records and two ownership records: {on_bind:#?}"
    );
    assert_eq!(on_bind, on_route53);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_planned_on_stale_values_is_refused_not_lost() {
    let bind = start_bind().await;
    let provider = Rfc2136Provider::new(bind.config.clone()).unwrap();
    let a = |targets: &[&str]| {
        Endpoint::new(
            "shared.example.com",
            RecordType::A,
            targets.iter().map(|t| t.to_string()),
            60,
        )
    };
    let create = Changes {
        creates: vec![a(&["192.0.2.1", "192.0.2.2"])],
        ..Default::default()
    };
    provider.apply("example.com", &create).await.unwrap();

    // A writer that still thinks the record holds only .1 wants to add .3: refused.
    let stale = Changes {
        updates: vec![meridian_dns::changes::Update {
            old: a(&["192.0.2.1"]),
            new: a(&["192.0.2.1", "192.0.2.3"]),
        }],
        ..Default::default()
    };
    assert!(provider.apply("example.com", &stale).await.is_err());
    let held = |zone: Vec<Endpoint>| {
        zone.into_iter()
            .find(|e| e.dns_name == "shared.example.com")
            .map(|e| e.targets)
    };
    assert_eq!(
        held(provider.records("example.com").await.unwrap()),
        Some(vec!["192.0.2.1".to_string(), "192.0.2.2".to_string()]),
        "the other writer's .2 is not lost"
    );

    // Planned on what is there, it applies.
    let fresh = Changes {
        updates: vec![meridian_dns::changes::Update {
            old: a(&["192.0.2.1", "192.0.2.2"]),
            new: a(&["192.0.2.1", "192.0.2.2", "192.0.2.3"]),
        }],
        ..Default::default()
    };
    provider.apply("example.com", &fresh).await.unwrap();
    assert_eq!(
        held(provider.records("example.com").await.unwrap()).map(|t| t.len()),
        Some(3)
    );
}
