//! The Route53 provider against moto's server (a real Route53 API implementation, started by
//! the test on loopback), driven by the engine's own plans.

use std::sync::Arc;

mod support;
use support::{
    a_stale_update_is_refused_not_lost, cluster_on, count_read, create,
    leave_foreign_records_alone, numbered, only_the_bad_record_fails, plan_many, publish_tree,
    replan_reweight_and_remove, switch_simple_and_loadbalanced, weighted,
};

use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::tree::ClusterTarget;
use meridian_providers::aws_identity::{AssumedRole, AwsIdentity, AwsSource};
use meridian_providers::budget::RequestBudget;
use meridian_providers::route53::Route53Provider;
use meridian_providers::{Provider, ProviderError};
use meridian_testkit::moto::MotoServer;
use meridian_testkit::zone_id_of;

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
    let zone = zone_id_of(&provider, domain).await;
    (provider, budget, zone)
}

fn clusters() -> Vec<ClusterTarget> {
    vec![
        cluster_on(1, "IE", "Azure", "192.0.2.1"),
        cluster_on(2, "US", "AWS", "192.0.2.2"),
        cluster_on(3, "GEO-EU", "AWS", "lb-3.elb.example.net"),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_weighted_geo_tree_is_created_updated_and_removed() {
    let moto = MotoServer::start().unwrap();
    let (provider, _, zone) = provider_with_zone(&moto, "example.com").await;
    let host = "api.example.com";
    let desired = publish_tree(
        &provider,
        &zone,
        host,
        &clusters(),
        "what Route53 holds is exactly the tree",
    )
    .await;

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
    let planned = plan_many(&provider, &zone, "bulk.example.com", 700).await;
    let calls_before = budget.spent();
    provider.apply(&zone, &planned.changes).await.unwrap();
    // Each name's pair (an A value of ~9 characters, a quoted ownership value of 69) costs ~78
    // of the 32,000 characters a call may carry, and two of its 1,000 values: at most 410
    // pairs fit in a call by characters, so 700 pairs take two calls.
    assert_eq!(budget.spent() - calls_before, 2);
    let a_records = count_read(&provider, &zone, |r| r.record_type == RecordType::A).await;
    assert_eq!(a_records, 700, "all records, read across pages");
    let owners = count_read(&provider, &zone, |r| r.dns_name.starts_with("kuadrant-")).await;
    assert_eq!(owners, 700);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_record_blocks_only_itself() {
    let moto = MotoServer::start().unwrap();
    let (provider, _, zone) = provider_with_zone(&moto, "example.com").await;
    let good = numbered("good", "example.com", 5);
    // A record outside the zone is refused by Route53, and fails the whole batch.
    let outside = Endpoint::new(
        "outside.example.org",
        RecordType::A,
        ["192.0.2.9".to_string()],
        60,
    );
    let changes = Changes {
        creates: good.clone().into_iter().chain([outside]).collect(),
        ..Default::default()
    };
    only_the_bad_record_fails(&provider, &zone, &changes, "outside.example.org", &good).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_plan_is_refused_and_loses_no_other_writers_change() {
    let moto = MotoServer::start().unwrap();
    let (provider, _, zone) = provider_with_zone(&moto, "example.com").await;
    a_stale_update_is_refused_not_lost(&provider, &zone, "kuadrant.members.api.example.com").await;
    // A delete planned on values another writer has since changed is refused too, and so is a
    // create of a record someone created since the read; a delete of what is gone is stale,
    // not an error to report.
    let txt = |values: &[&str]| {
        Endpoint::new(
            "kuadrant.members.api.example.com",
            RecordType::Txt,
            values.iter().map(|v| v.to_string()),
            60,
        )
    };
    for (changes, what) in [
        (
            Changes {
                deletes: vec![txt(&["a", "b"])],
                ..Default::default()
            },
            "a delete of values since changed",
        ),
        (
            Changes {
                creates: vec![txt(&["z"])],
                ..Default::default()
            },
            "a create of a record created meanwhile",
        ),
        (
            Changes {
                deletes: vec![Endpoint::new(
                    "gone.example.com",
                    RecordType::A,
                    ["192.0.2.9".to_string()],
                    60,
                )],
                ..Default::default()
            },
            "a delete of a record deleted meanwhile",
        ),
    ] {
        let refused = provider.apply(&zone, &changes).await;
        assert!(
            matches!(refused, Err(ProviderError::Stale(_))),
            "{what}: {refused:?}"
        );
    }
    let members = provider
        .read_record(&zone, "kuadrant.members.api.example.com", RecordType::Txt)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(members.targets.len(), 3, "{members:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_records_are_refused_before_any_call() {
    let moto = MotoServer::start().unwrap();
    let (provider, budget, zone) = provider_with_zone(&moto, "example.com").await;
    let calls_before = budget.spent();
    let heavy = weighted("w.example.com", RecordType::A, "192.0.2.1", "a", "300");
    let error = create(&provider, &zone, vec![heavy]).await.unwrap_err();
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
    publish_tree(
        &provider,
        &zone,
        host,
        &clusters(),
        "converged despite throttling",
    )
    .await;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_throttled_past_its_tries_is_asked_again_and_no_page_twice() {
    use meridian_providers::budget::Backoff;
    use meridian_testkit::counting_proxy::{CountingProxy, Throttle};

    let moto = MotoServer::start().unwrap();
    let (provider, _, zone) = provider_with_zone(&moto, "pages.example.com").await;
    let planned = plan_many(&provider, &zone, "pages.example.com", 400).await;
    provider.apply(&zone, &planned.changes).await.unwrap();
    // 400 A records and their 400 ownership records, SOA and NS: 802 sets, three pages of up
    // to 300. A provider that tries a call twice, with short waits.
    let backoff = Backoff {
        base: std::time::Duration::from_millis(10),
        cap: std::time::Duration::from_millis(50),
        max_attempts: 2,
    };
    let through = |proxy: &CountingProxy| {
        Route53Provider::new(
            &moto.credentials(&proxy.endpoint()),
            Arc::new(RequestBudget::per_second(1000)),
        )
        .with_backoff(backoff)
    };
    // The third page's two tries are throttled: without patience the listing fails, as every
    // listing did before.
    let proxy = CountingProxy::start_with(moto.address(), Throttle::Calls(3..=4))
        .await
        .unwrap();
    let impatient = through(&proxy).with_list_patience(std::time::Duration::ZERO);
    let listed = impatient.records(&zone).await;
    assert!(
        matches!(listed, Err(ProviderError::Throttled(_))),
        "{listed:?}"
    );
    // With patience (the default), a third throttle too: the page is asked again, and the
    // pages before it are not.
    let proxy = CountingProxy::start_with(moto.address(), Throttle::Calls(3..=5))
        .await
        .unwrap();
    let records = through(&proxy).records(&zone).await.unwrap();
    let a_records = records
        .iter()
        .filter(|r| r.record_type == RecordType::A)
        .count();
    assert_eq!(a_records, 400, "every record, across the pages");
    assert_eq!(proxy.throttled(), 3);
    assert_eq!(
        proxy.calls().get("ListResourceRecordSets").copied(),
        Some(3),
        "each page answered once"
    );
}

/// The roles moto's STS handed out: (role ARN, external ID), from its state dump.
fn assumed_roles(moto: &MotoServer) -> Vec<(String, Option<String>)> {
    let output = std::process::Command::new("curl")
        .args(["-fs", &format!("{}/moto-api/data.json", moto.endpoint())])
        .output()
        .expect("curl runs");
    let data: serde_json::Value = serde_json::from_slice(&output.stdout).expect("moto's state");
    data["sts"]["AssumedRole"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|role| {
            (
                role["role_arn"].as_str().unwrap_or_default().to_string(),
                role["external_id"].as_str().map(str::to_string),
            )
        })
        .collect()
}

const ROLE: &str = "arn:aws:iam::123456789012:role/meridian-dns";

/// Publishes one record in the zone `domain` at Route53 `endpoint` through a provider calling
/// as `identity`, and reads it back.
async fn publish_as(endpoint: &str, identity: &AwsIdentity, domain: &str) {
    let provider = Route53Provider::with_identity(
        identity,
        Some(endpoint.to_string()),
        Arc::new(RequestBudget::per_second(1000)),
    )
    .await;
    let zone = provider
        .list_zones()
        .await
        .expect("Route53 answers the assumed identity")
        .into_iter()
        .find(|z| z.domain == domain)
        .expect("the zone is listed");
    let record = Endpoint::new(
        format!("api.{domain}"),
        RecordType::A,
        ["192.0.2.1".to_string()],
        60,
    );
    provider
        .apply(
            &zone.id,
            &Changes {
                creates: vec![record.clone()],
                ..Changes::default()
            },
        )
        .await
        .expect("the change is applied");
    assert!(provider.records(&zone.id).await.unwrap().contains(&record));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_assumed_from_a_key_with_its_external_id_publishes() {
    let moto = MotoServer::start().unwrap();
    let identity = AwsIdentity {
        source: AwsSource::Keys {
            access_key_id: "testing".into(),
            secret_access_key: "testing".into(),
        },
        assume_role: Some(AssumedRole {
            role_arn: ROLE.into(),
            external_id: Some("team-a-4711".into()),
            session_name: "meridian-team-a".into(),
        }),
        region: "us-east-1".into(),
        sts_endpoint: Some(moto.endpoint()),
    };
    assert!(assumed_roles(&moto).is_empty());
    moto.create_zone("assumed.example").await.unwrap();
    publish_as(&moto.endpoint(), &identity, "assumed.example").await;
    assert_eq!(
        assumed_roles(&moto),
        [(ROLE.to_string(), Some("team-a-4711".to_string()))],
        "the calls went through STS AssumeRole with the external ID"
    );
}

/// Run by [`the_hubs_own_identity_is_irsas_web_identity`] in a process of its own, whose
/// environment is what EKS gives a pod with IRSA: the default credential chain reads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the_hubs_own_identity_is_irsas_web_identity in its own environment"]
async fn ambient_identity_process() {
    let endpoint = std::env::var("MERIDIAN_TEST_MOTO").expect("the parent names moto");
    let identity = AwsIdentity {
        source: AwsSource::Ambient,
        assume_role: None,
        region: "us-east-1".into(),
        sts_endpoint: None,
    };
    publish_as(&endpoint, &identity, "ambient.example").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hubs_own_identity_is_irsas_web_identity() {
    let moto = MotoServer::start().unwrap();
    moto.create_zone("ambient.example").await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    // A service account token's shape; moto's STS takes any.
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6bWVyaWRpYW4tc3lzdGVtOm1lcmlkaWFuIn0.c2ln").unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    for variable in [
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_PROFILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    ] {
        child.env_remove(variable);
    }
    let status = child
        .env("AWS_WEB_IDENTITY_TOKEN_FILE", &token)
        .env("AWS_ROLE_ARN", ROLE)
        .env("AWS_ROLE_SESSION_NAME", "meridian-hub")
        .env("AWS_ENDPOINT_URL_STS", moto.endpoint())
        .env("AWS_CONFIG_FILE", dir.path().join("none"))
        .env("AWS_SHARED_CREDENTIALS_FILE", dir.path().join("none"))
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("MERIDIAN_TEST_MOTO", moto.endpoint())
        .args(["--ignored", "--exact", "ambient_identity_process"])
        .status()
        .expect("the test binary runs");
    assert!(
        status.success(),
        "the process with IRSA's environment published"
    );
    assert_eq!(
        assumed_roles(&moto),
        [(ROLE.to_string(), None)],
        "the calls went through STS AssumeRoleWithWebIdentity"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_records_are_read_from_its_name_on_without_the_rest_of_the_zone() {
    use meridian_testkit::counting_proxy::{CountingProxy, Throttle};

    let moto = MotoServer::start().unwrap();
    let (provider, _, zone) = provider_with_zone(&moto, "example.com").await;
    let a = |name: &str| Endpoint::new(name, RecordType::A, ["192.0.2.1".to_string()], 60);
    let txt = |name: &str| Endpoint::new(name, RecordType::Txt, ["v".to_string()], 60);
    // The host, its subtree (enough for two reads of 300), a wildcard under it, and names
    // that sort around it in Route53's order or moto's: siblings that begin like it, the
    // ownership records of its own name beside it, names before and after.
    let mut under: Vec<Endpoint> = (0..320)
        .map(|i| a(&format!("n{i:03}.shared.example.com")))
        .collect();
    under.push(a("shared.example.com"));
    under.push(a("*.shared.example.com"));
    under.push(txt("kuadrant.last_modified_at.shared.example.com"));
    under.push(a("deep.er.shared.example.com"));
    let beside = [
        a("shared-a.example.com"),
        a("x.shared-a.example.com"),
        a("shared0.example.com"),
        a("sharedx.example.com"),
        a("sharee.example.com"),
        a("a.example.com"),
        a("z.example.com"),
        txt("kuadrant-abcdefgh-a-shared.example.com"),
    ];
    let creates: Vec<Endpoint> = under.iter().chain(&beside).cloned().collect();
    provider
        .apply(
            &zone,
            &Changes {
                creates,
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let proxy = CountingProxy::start_with(moto.address(), Throttle::Never)
        .await
        .unwrap();
    let reader = Route53Provider::new(
        &moto.credentials(&proxy.endpoint()),
        Arc::new(RequestBudget::per_second(1000)),
    );
    for host in ["shared.example.com", "*.shared.example.com"] {
        let mut read: Vec<String> = reader
            .host_records(&zone, host)
            .await
            .unwrap()
            .into_iter()
            .map(|r| format!("{} {}", r.dns_name, r.record_type))
            .collect();
        read.sort();
        let mut expected: Vec<String> = under
            .iter()
            .map(|r| format!("{} {}", r.dns_name, r.record_type))
            .collect();
        expected.sort();
        assert_eq!(
            read, expected,
            "{host}: the host and all under it, nothing beside"
        );
    }
    // 324 sets under the host: two reads each, not the whole zone's pages (334 sets and the
    // apex's SOA and NS).
    assert_eq!(
        proxy.calls().get("ListResourceRecordSets(host)").copied(),
        Some(4),
        "{:?}",
        proxy.calls()
    );
    // A host with nothing under it reads nothing but its neighbours, once.
    assert!(
        reader
            .host_records(&zone, "none.example.com")
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        reader
            .host_records(&zone, "shared-a.example.com")
            .await
            .unwrap()
            .len(),
        2
    );
    // How many calls a read took, for a caller choosing it over a one-item read.
    let (records, calls) = reader
        .host_records_paged(&zone, "shared.example.com")
        .await
        .unwrap();
    assert_eq!((records.len(), calls), (under.len(), 2));
    let (_, calls) = reader
        .host_records_paged(&zone, "shared-a.example.com")
        .await
        .unwrap();
    assert_eq!(calls, 1);
}
