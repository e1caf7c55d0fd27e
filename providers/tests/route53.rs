//! The Route53 provider against moto's server (a real Route53 API implementation, started by
//! the test on loopback), driven by the engine's own plans.

use std::sync::Arc;

mod support;
use support::{
    cluster, converge, geo_policy, leave_foreign_records_alone, published,
    replan_reweight_and_remove, switch_simple_and_loadbalanced, tree,
};

use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::plan::{PlanInput, plan};
use meridian_dns::tree::ClusterTarget;
use meridian_providers::budget::RequestBudget;
use meridian_providers::route53::Route53Provider;
use meridian_providers::{Provider, ProviderError};
use meridian_testkit::moto::MotoServer;

/// A provider with a generous budget (tests are not about pacing) and a new zone.
async fn provider_with_zone(
    moto: &MotoServer,
    domain: &str,
) -> (Route53Provider, Arc<RequestBudget>, String) {
    let budget = Arc::new(RequestBudget::per_second(1000));
    provider_through(moto, &moto.endpoint(), budget, domain).await
}

/// A provider talking to `endpoint` (moto, or a proxy in front of it) and a new zone in moto.
async fn provider_through(
    moto: &MotoServer,
    endpoint: &str,
    budget: Arc<RequestBudget>,
    domain: &str,
) -> (Route53Provider, Arc<RequestBudget>, String) {
    let provider = Route53Provider::new(&moto.credentials(endpoint), budget.clone());
    moto.create_zone(domain).await.unwrap();
    provider.invalidate_zones();
    let zone = provider
        .list_zones()
        .await
        .unwrap()
        .into_iter()
        .find(|z| z.domain == domain)
        .expect("the new zone is listed");
    (provider, budget, zone.id)
}

fn clusters() -> Vec<ClusterTarget> {
    vec![
        cluster(1, "IE", "192.0.2.1", "Azure"),
        cluster(2, "US", "192.0.2.2", "AWS"),
        cluster(3, "GEO-EU", "lb-3.elb.example.net", "AWS"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_geo_tree_is_created_updated_and_removed() {
    let moto = MotoServer::start().unwrap();
    let (provider, _, zone) = provider_with_zone(&moto, "example.com").await;
    let host = "api.example.com";
    let desired = tree(host, &geo_policy(30), &clusters());
    converge(&provider, &zone, "hub", host, &desired, None).await;
    assert_eq!(
        published(&provider, &zone, host).await,
        desired,
        "what Route53 holds is exactly the tree"
    );

    replan_reweight_and_remove(&provider, &zone, host, &desired, &clusters()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_to_loadbalanced_and_back_on_a_live_name() {
    let moto = MotoServer::start().unwrap();
    let (provider, _, zone) = provider_with_zone(&moto, "example.com").await;
    switch_simple_and_loadbalanced(&provider, &zone).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_and_unowned_records_are_never_touched() {
    let moto = MotoServer::start().unwrap();
    let (provider, _, zone) = provider_with_zone(&moto, "example.com").await;
    leave_foreign_records_alone(&provider, &zone, &clusters()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_a_thousand_changes_are_split_into_batches() {
    let moto = MotoServer::start().unwrap();
    let (provider, budget, zone) = provider_with_zone(&moto, "bulk.example.com").await;
    let desired: Vec<Endpoint> = (0..700)
        .map(|i| {
            Endpoint::new(
                format!("h{i}.bulk.example.com"),
                RecordType::A,
                [format!("10.0.{}.{}", i / 250, i % 250)],
                60,
            )
        })
        .collect();
    let planned = plan(
        &PlanInput {
            owner: "hub",
            root_host: "bulk.example.com",
            desired: &desired,
            previous: None,
        },
        &provider.records(&zone).await.unwrap(),
    );
    assert_eq!(
        planned.changes.len(),
        1400,
        "700 records and their ownership records"
    );
    let calls_before = budget.spent();
    provider.apply(&zone, &planned.changes).await.unwrap();
    // Creates go out as UPSERTs, whose values count twice. Each name's pair (an A value of ~9
    // characters, a quoted ownership value of 69) costs ~156 of the 32,000 characters a call may
    // carry, so at most ~205 pairs fit in a call: 700 pairs take four calls.
    assert_eq!(budget.spent() - calls_before, 4);
    let records = provider.records(&zone).await.unwrap();
    assert_eq!(
        records
            .iter()
            .filter(|r| r.record_type == RecordType::A)
            .count(),
        700,
        "all records, read across pages"
    );
    assert_eq!(
        records
            .iter()
            .filter(|r| r.dns_name.starts_with("kuadrant-"))
            .count(),
        700
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_record_blocks_only_itself() {
    let moto = MotoServer::start().unwrap();
    let (provider, _, zone) = provider_with_zone(&moto, "example.com").await;
    let good: Vec<Endpoint> = (0..5)
        .map(|i| {
            Endpoint::new(
                format!("good{i}.example.com"),
                RecordType::A,
                ["192.0.2.1".to_string()],
                60,
            )
        })
        .collect();
    // Deleting a record that is not there is refused by Route53, and fails the whole batch.
    let missing = Endpoint::new(
        "missing.example.com",
        RecordType::A,
        ["192.0.2.9".to_string()],
        60,
    );
    let changes = Changes {
        creates: good.clone(),
        deletes: vec![missing],
        ..Default::default()
    };
    let error = provider.apply(&zone, &changes).await.unwrap_err();
    match &error {
        ProviderError::PartlyApplied(failures) => {
            assert_eq!(failures.len(), 1, "{failures:?}");
            assert!(
                failures[0].starts_with("missing.example.com"),
                "{failures:?}"
            );
        }
        other => panic!("expected a partial failure, got {other}"),
    }
    let names: Vec<String> = provider
        .records(&zone)
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.dns_name)
        .collect();
    for record in &good {
        assert!(
            names.contains(&record.dns_name),
            "{} landed despite its neighbour",
            record.dns_name
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_records_are_refused_before_any_call() {
    let moto = MotoServer::start().unwrap();
    let (provider, budget, zone) = provider_with_zone(&moto, "example.com").await;
    let calls_before = budget.spent();
    let heavy = Endpoint::new(
        "w.example.com",
        RecordType::A,
        ["192.0.2.1".to_string()],
        60,
    )
    .with_set_identifier("a")
    .with_property("weight", "300");
    let error = provider
        .apply(
            &zone,
            &Changes {
                creates: vec![heavy],
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert!(matches!(error, ProviderError::Invalid(_)), "{error}");
    assert_eq!(budget.spent(), calls_before, "no request was made");
    // The zone list is cached: listing again costs nothing.
    provider.list_zones().await.unwrap();
    assert_eq!(budget.spent(), calls_before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_is_absorbed_with_backoff_within_the_budget() {
    use meridian_providers::budget::{Backoff, ROUTE53_REQUESTS_PER_SECOND};
    use meridian_testkit::counting_proxy::CountingProxy;

    let moto = MotoServer::start().unwrap();
    // Every third request is answered with Route53's throttling error.
    let proxy = CountingProxy::start(moto.address(), 3).await.unwrap();
    let budget = Arc::new(RequestBudget::per_second(ROUTE53_REQUESTS_PER_SECOND));
    let (provider, budget, zone) =
        provider_through(&moto, &proxy.endpoint(), budget, "example.com").await;
    let provider = provider.with_backoff(Backoff {
        base: std::time::Duration::from_millis(50),
        cap: std::time::Duration::from_secs(1),
        max_attempts: 8,
    });
    proxy.reset();
    let spent_before = budget.spent();

    let host = "api.example.com";
    let desired = tree(host, &geo_policy(30), &clusters());
    converge(&provider, &zone, "hub", host, &desired, None).await;
    assert_eq!(
        published(&provider, &zone, host).await,
        desired,
        "converged despite throttling"
    );

    let answered: u64 = proxy.calls().values().sum();
    let attempts = budget.spent() - spent_before;
    assert!(proxy.throttled() > 0, "the proxy throttled some calls");
    assert_eq!(
        answered + proxy.throttled(),
        attempts,
        "every attempt, retries included, went through the budget"
    );
    assert!(
        attempts <= 2 * answered,
        "no hot loop: {attempts} attempts for {answered} answered calls"
    );
}
