//! Helpers shared by the provider tests: drive any provider with the engine's own plans, and
//! the clusters and policy they publish. Each test file uses a part of it.
#![allow(dead_code)]

use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, RecordType, is_at_or_below, sort_endpoints};
use meridian_dns::plan::{Plan, PlanInput, plan};
use meridian_dns::tree::{ClusterTarget, Strategy};
use meridian_providers::{Provider, ProviderError};
// Each test file uses a part of the shared tree.
#[allow(unused_imports)]
pub use meridian_testkit::trees::{
    cluster_on, four_clusters, gateway, geo_policy_weighing_azure as geo_policy, tree,
};

/// The engine's plan of `desired` for `owner` at `host`, against the zone as the provider holds
/// it.
pub async fn plan_at<P: Provider>(
    provider: &P,
    zone: &str,
    owner: &str,
    host: &str,
    desired: &[Endpoint],
    previous: Option<&[Endpoint]>,
) -> Plan {
    let current = provider.records(zone).await.unwrap();
    plan(
        &PlanInput {
            owner,
            root_host: host,
            desired,
            previous,
        },
        &current,
    )
}

/// Plans `desired` for `owner` against the zone as the provider holds it, and applies the plan.
pub async fn converge<P: Provider>(
    provider: &P,
    zone: &str,
    owner: &str,
    host: &str,
    desired: &[Endpoint],
    previous: Option<&[Endpoint]>,
) {
    let planned = plan_at(provider, zone, owner, host, desired, previous).await;
    assert!(planned.problems.is_empty(), "{:?}", planned.problems);
    provider.apply(zone, &planned.changes).await.unwrap();
}

/// Publishes the GEO tree of `host` on `clusters` (the Azure ones weighing 30) for "hub" into
/// an empty zone, and checks the provider reads back exactly it (`what` says what is checked).
/// Returns the tree.
pub async fn publish_tree<P: Provider>(
    provider: &P,
    zone: &str,
    host: &str,
    clusters: &[ClusterTarget],
    what: &str,
) -> Vec<Endpoint> {
    let desired = tree(host, &geo_policy(30), clusters);
    converge(provider, zone, "hub", host, &desired, None).await;
    assert_eq!(published(provider, zone, host).await, desired, "{what}");
    desired
}

/// A weighted choice of `name`: a `record_type` record to `target`, the set `set`, weighing
/// `weight` (as written, so a test can write a weight a provider refuses).
pub fn weighted(
    name: &str,
    record_type: RecordType,
    target: &str,
    set: &str,
    weight: &str,
) -> Endpoint {
    Endpoint::new(name, record_type, [target.to_string()], 60)
        .with_set_identifier(set)
        .with_property("weight", weight)
}

/// Creates `records` in `zone`, in one apply.
pub async fn create<P: Provider>(
    provider: &P,
    zone: &str,
    records: Vec<Endpoint>,
) -> Result<(), ProviderError> {
    let changes = Changes {
        creates: records,
        ..Default::default()
    };
    provider.apply(zone, &changes).await
}

/// `count` A records, `{prefix}{i}.{domain}`, each with an address of its own.
pub fn numbered(prefix: &str, domain: &str, count: usize) -> Vec<Endpoint> {
    (0..count)
        .map(|i| {
            Endpoint::new(
                format!("{prefix}{i}.{domain}"),
                RecordType::A,
                [format!("10.0.{}.{}", i / 250, i % 250)],
                60,
            )
        })
        .collect()
}

/// The plan that fills an empty zone with `count` numbered records at or below `domain`: each
/// record and its ownership record.
pub async fn plan_many<P: Provider>(provider: &P, zone: &str, domain: &str, count: usize) -> Plan {
    let desired = numbered("h", domain, count);
    let planned = plan_at(provider, zone, "hub", domain, &desired, None).await;
    assert_eq!(
        planned.changes.len(),
        2 * count,
        "{count} records and their ownership records"
    );
    planned
}

/// How many records of `zone` the provider reads back (across its pages) that `keep` keeps.
pub async fn count_read<P: Provider>(
    provider: &P,
    zone: &str,
    keep: impl Fn(&Endpoint) -> bool,
) -> usize {
    provider
        .records(zone)
        .await
        .unwrap()
        .iter()
        .filter(|r| keep(r))
        .count()
}

/// Applies `changes`, of which only the record named `bad` is refused by the provider: the
/// apply is a partial failure naming `bad` alone, and every record of `landed` is in the zone
/// after it. Returns what the provider said of `bad`.
pub async fn only_the_bad_record_fails<P: Provider>(
    provider: &P,
    zone: &str,
    changes: &Changes,
    bad: &str,
    landed: &[Endpoint],
) -> String {
    let failure = match provider.apply(zone, changes).await {
        Err(ProviderError::PartlyApplied(failures)) => {
            assert_eq!(failures.len(), 1, "{failures:?}");
            assert!(failures[0].starts_with(bad), "{failures:?}");
            failures[0].clone()
        }
        other => panic!("expected a partial failure, got {other:?}"),
    };
    let names: Vec<String> = provider
        .records(zone)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.dns_name)
        .collect();
    for record in landed {
        assert!(
            names.contains(&record.dns_name),
            "{} landed despite its neighbour",
            record.dns_name
        );
    }
    failure
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

/// Simple → load-balanced → simple on one live name; each switch (A ↔ CNAME) lands whole.
pub async fn switch_simple_and_loadbalanced<P: Provider>(provider: &P, zone: &str) {
    let host = "shop.example.com";
    let ips = [
        cluster_on(1, "IE", "AWS", "192.0.2.1"),
        cluster_on(2, "US", "AWS", "192.0.2.2"),
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
    let again = plan_at(provider, zone, "hub", host, desired, Some(desired)).await;
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

/// Two writers of one shared TXT record at `name`, both having read it as `a`: the first adds
/// `b`; the second's update, planned on `a`, is refused as stale and `b` is not lost. Planned
/// again on what is there, it applies.
pub async fn a_stale_update_is_refused_not_lost<P: Provider>(provider: &P, zone: &str, name: &str) {
    let txt = |values: &[&str]| {
        Endpoint::new(
            name,
            RecordType::Txt,
            values.iter().map(|v| v.to_string()),
            60,
        )
    };
    let update = |old: &[&str], new: &[&str]| Changes {
        updates: vec![meridian_dns::changes::Update {
            old: txt(old),
            new: txt(new),
        }],
        ..Default::default()
    };
    let held = || async {
        let mut values = provider
            .records(zone)
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.dns_name == name && r.record_type == RecordType::Txt)
            .map(|r| r.targets)
            .unwrap_or_default();
        values.sort();
        values
    };
    let created = Changes {
        creates: vec![txt(&["a"])],
        ..Default::default()
    };
    provider.apply(zone, &created).await.unwrap();
    provider
        .apply(zone, &update(&["a"], &["a", "b"]))
        .await
        .unwrap();
    let second = provider.apply(zone, &update(&["a"], &["a", "c"])).await;
    assert!(
        matches!(second, Err(ProviderError::Stale(_))),
        "the second writer is refused as stale: {second:?}"
    );
    assert_eq!(held().await, ["a", "b"], "the first writer's b is not lost");
    provider
        .apply(zone, &update(&["a", "b"], &["a", "b", "c"]))
        .await
        .unwrap();
    assert_eq!(held().await, ["a", "b", "c"]);
}
