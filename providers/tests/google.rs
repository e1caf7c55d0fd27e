//! The Google Cloud DNS provider against a FAKE of Cloud DNS's REST API
//! (`testkit/fake_cloud_dns.py`, started by `meridian_testkit::cloud_dns_fake` on loopback). Google publishes no Cloud DNS
//! emulator, so this is the one provider tested against a fake; the fake checks every request
//! body strictly (fields, values, routing policies, per-change quotas, exact deletions).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

mod support;
use support::{
    a_stale_update_is_refused_not_lost, cluster_on, count_read, four_clusters, geo_policy,
    leave_foreign_records_alone, numbered, only_the_bad_record_fails, plan_many, publish_tree,
    replan_reweight_and_remove, switch_simple_and_loadbalanced, tree,
};

use meridian_dns::changes::{Changes, Update};
use meridian_dns::model::{Endpoint, RecordType};
use meridian_providers::budget::{Backoff, RequestBudget};
use meridian_providers::google::{
    CLOUD_DNS_REQUESTS_PER_SECOND, GeoRegions, GoogleAuth, GoogleCredentials, GoogleProvider,
};
use meridian_providers::{Provider, ProviderError};
use meridian_testkit::cloud_dns_fake::FakeCloudDns;
use meridian_testkit::zone_id_of;

const PROJECT: &str = "meridian-test";

/// A provider for the fake's project, through `budget`.
async fn provider(fake: &FakeCloudDns, budget: Arc<RequestBudget>) -> GoogleProvider {
    GoogleProvider::new(
        &GoogleCredentials {
            project: PROJECT.into(),
            auth: GoogleAuth::Anonymous,
            endpoint: Some(format!("http://127.0.0.1:{}", fake.port())),
        },
        geo_regions(),
        budget,
    )
    .await
    .unwrap()
}

/// IE and `*` share europe-west1: the trees below use `defaultGeo: IE`.
fn geo_regions() -> GeoRegions {
    GeoRegions::new(
        [
            ("IE", "europe-west1"),
            ("US", "us-east1"),
            ("GEO-EU", "europe-west4"),
        ]
        .into_iter()
        .map(|(c, r)| (c.to_string(), r.to_string()))
        .collect(),
        "europe-west1".into(),
    )
    .unwrap()
}

async fn provider_and_zone(fake: &FakeCloudDns) -> (GoogleProvider, Arc<RequestBudget>, String) {
    let budget = Arc::new(RequestBudget::per_second(1000));
    let provider = provider(fake, budget.clone()).await;
    let zone = zone_id_of(&provider, "example.com").await;
    (provider, budget, zone)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_geo_tree_is_one_record_set_per_name_created_updated_and_removed() {
    let fake = FakeCloudDns::start(PROJECT, &["--page-size", "7"]);
    let (provider, _, zone) = provider_and_zone(&fake).await;
    let host = "api.example.com";
    let desired = publish_tree(
        &provider,
        &zone,
        host,
        &four_clusters(),
        "what Cloud DNS holds reads back exactly as the tree (across pages of 7)",
    )
    .await;

    // Cloud DNS's own shapes: one GEO set, `*` merged into IE's region, and one WRR set.
    let geo = fake.record_set("klb.api.example.com.", "CNAME");
    let locations: Vec<&str> = geo["routingPolicy"]["geo"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["location"].as_str().unwrap())
        .collect();
    assert_eq!(locations, ["europe-west1", "europe-west4", "us-east1"]);
    let ie = fake.record_set("ie.klb.api.example.com.", "CNAME");
    let mut weights: Vec<f64> = ie["routingPolicy"]["wrr"]["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|item| item["weight"].as_f64().unwrap())
        .collect();
    weights.sort_by(f64::total_cmp);
    assert_eq!(weights, [30.0, 120.0]);
    let notes = provider.status_notes(&desired);
    assert!(
        notes
            .iter()
            .any(|n| n.contains("`*` answer of klb.api.example.com") && n.contains("europe-west1")),
        "status says what `*` became: {notes:?}"
    );

    replan_reweight_and_remove(&provider, &zone, host, &desired, &four_clusters()).await;
    assert_eq!(
        fake.requests().get("create-change-refused"),
        None,
        "the fake accepted every request body"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_to_loadbalanced_and_back_on_a_live_name() {
    let fake = FakeCloudDns::start(PROJECT, &[]);
    let (provider, _, zone) = provider_and_zone(&fake).await;
    switch_simple_and_loadbalanced(&provider, &zone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_unowned_records_are_never_touched() {
    let fake = FakeCloudDns::start(PROJECT, &[]);
    let (provider, _, zone) = provider_and_zone(&fake).await;
    leave_foreign_records_alone(&provider, &zone, &four_clusters()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_cache_never_overwrites_someone_elses_change() {
    let fake = FakeCloudDns::start(PROJECT, &[]);
    let (mine, _, zone) = provider_and_zone(&fake).await;
    let (theirs, _, _) = provider_and_zone(&fake).await;
    let member = |target: &str, weight: &str| {
        Endpoint::new("w.example.com", RecordType::Cname, [target.into()], 60)
            .with_set_identifier(target)
            .with_property("weight", weight)
    };
    let one = member("c1.example.com", "10");
    mine.apply(
        &zone,
        &Changes {
            creates: vec![one.clone()],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    mine.records(&zone).await.unwrap(); // `mine` caches the set with one member
    theirs.records(&zone).await.unwrap();
    theirs
        .apply(
            &zone,
            &Changes {
                creates: vec![member("c2.example.com", "5")],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    // `mine` rebuilds the set from its stale copy; Cloud DNS refuses the deletion, the cache is
    // dropped, and the retry rebuilds from a fresh read.
    mine.apply(
        &zone,
        &Changes {
            updates: vec![Update {
                old: one,
                new: member("c1.example.com", "99"),
            }],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let mut records: Vec<Endpoint> = mine
        .records(&zone)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.dns_name == "w.example.com")
        .collect();
    records.sort();
    assert_eq!(
        records,
        [
            member("c1.example.com", "99"),
            member("c2.example.com", "5")
        ]
    );
    assert_eq!(fake.requests().get("create-change-refused"), Some(&1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_plan_is_refused_and_loses_no_other_writers_change() {
    let fake = FakeCloudDns::start(PROJECT, &[]);
    let (provider, _, zone) = provider_and_zone(&fake).await;
    a_stale_update_is_refused_not_lost(&provider, &zone, "kuadrant.members.api.example.com").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_changes_than_one_call_takes_are_split_into_calls() {
    let fake = FakeCloudDns::start(PROJECT, &[]);
    let (provider, _, zone) = provider_and_zone(&fake).await;
    let planned = plan_many(&provider, &zone, "bulk.example.com", 250).await;
    let before = fake.requests();
    provider.apply(&zone, &planned.changes).await.unwrap();
    let after = fake.requests();
    // 100 record-set additions per change: 500 additions take five calls, none refused.
    let changes =
        |counts: &BTreeMap<String, u64>| counts.get("create-change").copied().unwrap_or(0);
    assert_eq!(changes(&after) - changes(&before), 5);
    assert_eq!(after.get("create-change-refused"), None);
    let a_records = count_read(&provider, &zone, |r| r.record_type == RecordType::A).await;
    assert_eq!(a_records, 250, "all records, read across pages");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_record_blocks_only_itself() {
    let fake = FakeCloudDns::start(PROJECT, &[]);
    let (provider, _, zone) = provider_and_zone(&fake).await;
    let good = numbered("good", "example.com", 5);
    // Outside the zone: Cloud DNS refuses it, and with it the whole change.
    let outside = Endpoint::new(
        "www.example.org",
        RecordType::A,
        ["192.0.2.9".to_string()],
        60,
    );
    let mut creates = good.clone();
    creates.push(outside);
    let changes = Changes {
        creates,
        ..Default::default()
    };
    let failure =
        only_the_bad_record_fails(&provider, &zone, &changes, "www.example.org", &good).await;
    assert!(failure.contains("is not in zone"), "{failure}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_cloud_dns_cannot_hold_is_refused_before_any_call() {
    let fake = FakeCloudDns::start(PROJECT, &[]);
    let (provider, budget, zone) = provider_and_zone(&fake).await;
    let spent = budget.spent();
    let unmapped = tree(
        "api.example.com",
        &geo_policy(30),
        &[cluster_on(5, "JP", "AWS", "192.0.2.5")],
    );
    let error = provider
        .apply(
            &zone,
            &Changes {
                creates: unmapped,
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(error, ProviderError::Invalid(_)), "{error}");
    assert!(
        error
            .to_string()
            .contains("geo code JP has no Cloud DNS region"),
        "{error}"
    );
    assert_eq!(budget.spent(), spent, "no request was made");
    provider.list_zones().await.unwrap();
    assert_eq!(budget.spent(), spent, "the zone list is cached");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_absorbed_with_backoff_within_the_budget() {
    // Every third request is answered with 429 rateLimitExceeded.
    let fake = FakeCloudDns::start(PROJECT, &["--throttle-every", "3"]);
    let budget = Arc::new(RequestBudget::per_second(CLOUD_DNS_REQUESTS_PER_SECOND));
    let provider = provider(&fake, budget.clone()).await.with_backoff(Backoff {
        base: Duration::from_millis(50),
        cap: Duration::from_secs(1),
        max_attempts: 8,
    });
    let zone = provider.list_zones().await.unwrap()[0].id.clone();
    let host = "api.example.com";
    publish_tree(
        &provider,
        &zone,
        host,
        &four_clusters(),
        "converged despite throttling",
    )
    .await;
    let requests = fake.requests();
    let throttled = requests["throttled"];
    let answered: u64 = requests
        .iter()
        .filter(|(method, _)| !["throttled", "create-change-refused"].contains(&method.as_str()))
        .map(|(_, n)| n)
        .sum();
    assert!(throttled > 0, "the fake throttled some calls");
    assert_eq!(
        answered + throttled,
        budget.spent(),
        "every attempt, retries included, went through the budget"
    );
    assert!(
        budget.spent() <= 2 * answered,
        "no hot loop: {} attempts for {answered} answered calls",
        budget.spent()
    );
}

/// Workload identity (the hub's own Google identity on GKE): the provider takes its token from
/// the metadata server (the fake plays it) and Cloud DNS sees that token; a provider without
/// one is refused, so the fake does check.
#[tokio::test]
async fn the_hubs_own_identity_takes_its_token_from_the_metadata_server() {
    let fake = FakeCloudDns::start(PROJECT, &["--metadata-token", "ya29.workload-identity"]);
    let endpoint = format!("http://127.0.0.1:{}", fake.port());
    let with = |auth: GoogleAuth| {
        let credentials = GoogleCredentials {
            project: PROJECT.into(),
            auth,
            endpoint: Some(endpoint.clone()),
        };
        async move {
            GoogleProvider::new(
                &credentials,
                geo_regions(),
                Arc::new(RequestBudget::per_second(CLOUD_DNS_REQUESTS_PER_SECOND)),
            )
            .await
            .unwrap()
        }
    };
    let anonymous = with(GoogleAuth::Anonymous).await;
    assert!(anonymous.list_zones().await.is_err(), "no token, no zones");
    let refused = fake.requests().get("unauthenticated").copied();
    assert!(refused.is_some_and(|n| n >= 1), "the fake refused it");

    let ambient = with(GoogleAuth::Ambient {
        metadata_endpoint: Some(endpoint.clone()),
    })
    .await;
    let zones = ambient.list_zones().await.unwrap();
    assert_eq!(zones.len(), 1, "{zones:?}");
    let requests = fake.requests();
    assert!(
        requests.get("metadata-token").is_some_and(|n| *n >= 1),
        "{requests:?}"
    );
    assert_eq!(requests.get("list-zones"), Some(&1), "{requests:?}");
    assert_eq!(
        requests.get("unauthenticated").copied(),
        refused,
        "every request of the provider with the hub's identity carried its token: {requests:?}"
    );
}
