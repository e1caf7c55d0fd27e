//! The Azure provider against a FAKE of Azure DNS, Traffic Manager and Entra ID's token
//! endpoint (`testkit/fake_azure.py`, started by `meridian_testkit::azure_fake` on loopback,
//! over HTTPS). Azure publishes no emulator for these APIs; the fake checks every request
//! strictly (bearer tokens, api-versions, bodies, ETags, Traffic Manager's rules, quotas) and
//! answers with ARM's error bodies.

use std::sync::Arc;

mod support;
use support::{
    converge, create, four_clusters, geo_policy, leave_foreign_records_alone, plan_at,
    publish_tree, published, replan_reweight_and_remove, switch_simple_and_loadbalanced, tree,
    weighted,
};

use meridian_dns::changes::{Changes, Update};
use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::plan::{PlanInput, plan};
use meridian_providers::azure::{AzureAuth, AzureCredentials, AzureProvider};
use meridian_providers::budget::RequestBudget;
use meridian_providers::{Provider, ProviderError};
use meridian_testkit::azure_fake::{FakeAzure, FakeAzureOptions};
use serde_json::Value;

const ZONE: &str = "example.com";

fn provider(fake: &FakeAzure) -> AzureProvider {
    provider_with(&fake.credentials())
}

fn provider_with(credentials: &AzureCredentials) -> AzureProvider {
    AzureProvider::new(
        credentials,
        Arc::new(RequestBudget::per_second(1000)),
        AzureProvider::default_retry(),
    )
    .unwrap()
}

fn profile<'a>(state: &'a Value, dns_name: &str) -> &'a Value {
    state["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["tags"]["meridian-dns-name"] == dns_name)
        .unwrap_or_else(|| panic!("a profile serves {dns_name}"))
}

fn record_set<'a>(state: &'a Value, name: &str, record_type: &str) -> Option<&'a Value> {
    state["zones"][ZONE].as_array().unwrap().iter().find(|s| {
        s["name"] == name && s["type"] == format!("Microsoft.Network/dnszones/{record_type}")
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_geo_then_weighted_tree_is_nested_traffic_manager_profiles() {
    let fake = FakeAzure::start(&FakeAzureOptions {
        page_size: 7,
        ..Default::default()
    });
    let provider = provider(&fake);
    let zones = provider.list_zones().await.unwrap();
    assert_eq!(
        zones.iter().map(|z| z.domain.as_str()).collect::<Vec<_>>(),
        [ZONE]
    );
    let host = "api.example.com";
    let desired = publish_tree(
        &provider,
        ZONE,
        host,
        &four_clusters(),
        "what Azure holds reads back exactly as the tree (across pages of 7)",
    )
    .await;

    // Azure's own shapes: klb is a Geographic profile whose IE and US endpoints nest the
    // weighted profiles of ie.klb and us.klb, `*` is WORLD on IE's endpoint, and the GEO-EU
    // group (one gateway hostname) is still a weighted profile of its own.
    let state = fake.state();
    let geo = profile(&state, "klb.api.example.com");
    assert_eq!(geo["properties"]["trafficRoutingMethod"], "Geographic");
    assert_eq!(geo["properties"]["dnsConfig"]["ttl"], 300);
    let mut mappings: Vec<(String, String, Vec<String>)> = geo["properties"]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["type"]
                    .as_str()
                    .unwrap()
                    .rsplit('/')
                    .next()
                    .unwrap()
                    .to_string(),
                e["name"].as_str().unwrap().to_string(),
                serde_json::from_value(e["properties"]["geoMapping"].clone()).unwrap(),
            )
        })
        .collect();
    mappings.sort();
    assert_eq!(
        mappings,
        [
            (
                "nestedEndpoints".to_string(),
                "geo-eu.klb.api.example.com".to_string(),
                vec!["GEO-EU".to_string()]
            ),
            (
                "nestedEndpoints".into(),
                "ie.klb.api.example.com".into(),
                vec!["IE".into(), "WORLD".into()]
            ),
            (
                "nestedEndpoints".into(),
                "us.klb.api.example.com".into(),
                vec!["US".into()]
            ),
        ]
    );
    let ie = profile(&state, "ie.klb.api.example.com");
    assert_eq!(ie["properties"]["trafficRoutingMethod"], "Weighted");
    let mut weights: Vec<u64> = ie["properties"]["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            assert_eq!(
                e["properties"]["alwaysServe"], "Enabled",
                "Meridian's probes decide health"
            );
            e["properties"]["weight"].as_u64().unwrap()
        })
        .collect();
    weights.sort();
    assert_eq!(weights, [30, 120]);
    let alias = record_set(&state, "klb.api", "CNAME").expect("klb is an alias record set");
    assert_eq!(
        alias["properties"]["targetResource"]["id"]
            .as_str()
            .unwrap()
            .to_ascii_lowercase(),
        geo["id"].as_str().unwrap().to_ascii_lowercase()
    );
    assert!(alias["properties"].get("CNAMERecord").is_none());
    assert!(
        record_set(&state, "ie.klb.api", "CNAME").is_none(),
        "a nested weighted name is reached through its parent alone: no record set of its own"
    );

    replan_reweight_and_remove(&provider, ZONE, host, &desired, &four_clusters()).await;
    let state = fake.state();
    assert_eq!(
        state["profiles"].as_array().unwrap().len(),
        0,
        "every profile is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_to_loadbalanced_and_back_on_a_live_name() {
    let fake = FakeAzure::start(&FakeAzureOptions::default());
    switch_simple_and_loadbalanced(&provider(&fake), ZONE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_unowned_records_are_never_touched() {
    let fake = FakeAzure::start(&FakeAzureOptions::default());
    leave_foreign_records_alone(&provider(&fake), ZONE, &four_clusters()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_steady_state_change_lists_nothing_and_writes_only_what_changed() {
    let fake = FakeAzure::start(&FakeAzureOptions::default());
    let provider = provider(&fake);
    let host = "api.example.com";
    let before = tree(host, &geo_policy(30), &four_clusters());
    converge(&provider, ZONE, "hub", host, &before, None).await;

    fake.reset_requests();
    let after = tree(host, &geo_policy(200), &four_clusters());
    let planned = plan(
        &PlanInput {
            owner: "hub",
            root_host: host,
            desired: &after,
            previous: Some(&before),
        },
        &meridian_dns::plan::published_zone("hub", &before),
    );
    provider.apply(ZONE, &planned.changes).await.unwrap();
    let requests = fake.requests();
    assert_eq!(
        requests,
        [("put-profile".to_string(), 1)].into(),
        "one weight changed: one profile rewritten, no list, no token refresh"
    );
    assert_eq!(published(&provider, ZONE, host).await, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn someone_elses_change_is_never_overwritten() {
    let fake = FakeAzure::start(&FakeAzureOptions::default());
    let ours = provider(&fake);
    let theirs = provider(&fake);
    let host = "shop.example.com";
    let v1 = Endpoint::new(host, RecordType::A, ["192.0.2.1".to_string()], 60);
    let create = Changes {
        creates: vec![v1.clone()],
        ..Default::default()
    };
    ours.apply(ZONE, &create).await.unwrap();
    // The other writer reads and changes the record set; ours still holds the old ETag.
    theirs.records(ZONE).await.unwrap();
    let mut v2 = v1.clone();
    v2.targets = vec!["192.0.2.2".into()];
    theirs
        .apply(
            ZONE,
            &Changes {
                updates: vec![Update {
                    old: v1.clone(),
                    new: v2.clone(),
                }],
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let mut v3 = v1.clone();
    v3.targets = vec!["192.0.2.3".into()];
    let stale = ours
        .apply(
            ZONE,
            &Changes {
                updates: vec![Update {
                    old: v1.clone(),
                    new: v3.clone(),
                }],
                ..Default::default()
            },
        )
        .await;
    match stale {
        Err(ProviderError::PartlyApplied(problems)) => {
            assert!(
                problems[0].contains("412") && problems[0].contains("PreconditionFailed"),
                "{problems:?}"
            )
        }
        other => panic!("If-Match refused the stale write: {other:?}"),
    }
    let records = ours.records(ZONE).await.unwrap();
    assert!(records.contains(&v2), "their change stands");
    // Re-read, the same update is now planned against what is there: refused before any call.
    let again = ours
        .apply(
            ZONE,
            &Changes {
                updates: vec![Update { old: v1, new: v3 }],
                ..Default::default()
            },
        )
        .await;
    assert!(
        matches!(again, Err(ProviderError::Other(m)) if m.contains("changed since it was read"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_record_blocks_only_itself() {
    let fake = FakeAzure::start(&FakeAzureOptions::default());
    let provider = provider(&fake);
    let good = Endpoint::new(
        "good.example.com",
        RecordType::A,
        ["192.0.2.1".to_string()],
        60,
    );
    // Refused by Azure itself: more than 20 records in one set.
    let too_many = Endpoint::new(
        "many.example.com",
        RecordType::A,
        (1..=21).map(|i| format!("192.0.2.{i}")),
        60,
    );
    // Refused before any call: Traffic Manager weights start at 1.
    let zero = weighted(
        "w.example.com",
        RecordType::Cname,
        "a.example.net",
        "a.example.net",
        "0",
    );
    let result = create(&provider, ZONE, vec![good.clone(), too_many, zero.clone()]).await;
    let Err(ProviderError::PartlyApplied(problems)) = result else {
        panic!("two records fail: {result:?}");
    };
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems.iter().any(|p| p.contains("weights are 1 to 1000")),
        "{problems:?}"
    );
    assert!(
        problems
            .iter()
            .any(|p| p.contains("RecordSetRecordLimitExceeded")),
        "{problems:?}"
    );
    let records = provider.records(ZONE).await.unwrap();
    assert!(records.contains(&good), "the good record landed");
    assert!(
        records
            .iter()
            .all(|r| r.dns_name == ZONE || r.dns_name == "good.example.com"),
        "nothing of the refused records landed: {records:?}"
    );

    // Planned by the engine, the refused record's ownership record waits with it.
    let planned = plan(
        &PlanInput {
            owner: "hub",
            root_host: "w.example.com",
            desired: &[zero],
            previous: None,
        },
        &records,
    );
    assert!(
        planned
            .changes
            .creates
            .iter()
            .any(|r| r.record_type == RecordType::Txt)
    );
    let result = provider.apply(ZONE, &planned.changes).await;
    assert!(matches!(result, Err(ProviderError::PartlyApplied(p)) if p.len() == 1));
    let records = provider.records(ZONE).await.unwrap();
    assert!(
        records
            .iter()
            .all(|r| r.dns_name == ZONE || r.dns_name == "good.example.com"),
        "no ownership record without its record: {records:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_a_write_fails_nothing_is_deleted_and_the_old_answer_stays() {
    // One profile allowed: a GEO tree needs three, so switching a live simple host to it
    // fails part way.
    let fake = FakeAzure::start(&FakeAzureOptions {
        max_profiles: 1,
        ..Default::default()
    });
    let provider = provider(&fake);
    let host = "shop.example.com";
    let ips = [
        support::cluster_on(1, "IE", "AWS", "192.0.2.1"),
        support::cluster_on(2, "US", "AWS", "192.0.2.2"),
    ];
    let simple = tree(host, &meridian_dns::tree::Strategy::Simple, &ips);
    converge(&provider, ZONE, "hub", host, &simple, None).await;
    let loadbalanced = tree(host, &geo_policy(30), &ips);
    let planned = plan_at(&provider, ZONE, "hub", host, &loadbalanced, Some(&simple)).await;
    let Err(ProviderError::PartlyApplied(problems)) = provider.apply(ZONE, &planned.changes).await
    else {
        panic!("the profile quota stops the switch");
    };
    assert!(
        problems.iter().any(|p| p.contains("QuotaExceeded")),
        "{problems:?}"
    );
    assert!(
        problems.iter().any(|p| p.contains("deletions wait")),
        "{problems:?}"
    );
    let answer: Vec<Endpoint> = provider
        .records(ZONE)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.dns_name == host)
        .collect();
    assert_eq!(
        answer, simple,
        "the host still answers as before: {answer:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_absorbed_honouring_retry_after() {
    let fake = FakeAzure::start(&FakeAzureOptions::default());
    let provider = provider(&fake);
    provider.list_zones().await.unwrap();
    fake.throttle(2);
    let host = "api.example.com";
    let desired = tree(host, &geo_policy(30), &four_clusters());
    let started = std::time::Instant::now();
    converge(&provider, ZONE, "hub", host, &desired, None).await;
    assert_eq!(fake.requests().get("throttled"), Some(&2));
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(1),
        "the retry waited for Retry-After"
    );
    assert_eq!(published(&provider, ZONE, host).await, desired);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_identity_exchanges_the_projected_token() {
    let fake = FakeAzure::start(&FakeAzureOptions::default());
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("azure-identity-token");
    std::fs::write(&token_file, meridian_testkit::azure_fake::FEDERATED_TOKEN).unwrap();
    let mut credentials = fake.credentials();
    credentials.auth = AzureAuth::WorkloadIdentity {
        client_id: Some(meridian_testkit::azure_fake::CLIENT_ID.into()),
        token_file: Some(token_file.clone()),
    };
    let provider = provider_with(&credentials);
    assert_eq!(provider.list_zones().await.unwrap()[0].domain, ZONE);

    std::fs::write(&token_file, "a-token-nobody-federated").unwrap();
    let stranger = provider_with(&credentials);
    let error = stranger.list_zones().await.unwrap_err().to_string();
    assert!(error.contains("AADSTS700213"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_client_secret_is_a_clear_error_without_the_secret() {
    let fake = FakeAzure::start(&FakeAzureOptions::default());
    let mut credentials = fake.credentials();
    credentials.auth = AzureAuth::ClientSecret {
        client_id: meridian_testkit::azure_fake::CLIENT_ID.into(),
        secret: "not-the-secret".into(),
    };
    let error = provider_with(&credentials)
        .list_zones()
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("AADSTS7000215"), "{error}");
    assert!(!error.contains("not-the-secret"), "{error}");
}
