//! The webhook provider against external-dns v0.21.0 `--webhook-server` in front of real
//! servers (PowerDNS through its `pdns` provider, BIND through `rfc2136`), and against a
//! hostile webhook written here: one that fails, refuses, redirects, floods or speaks another
//! version of the protocol.

mod support;
use support::{converge, create, plan_at, published, weighted};

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, RecordType, is_at_or_below};
use meridian_dns::plan::{PlanInput, plan};
use meridian_dns::tree::ClusterTarget;
use meridian_providers::budget::Backoff;
use meridian_providers::rfc2136::{Rfc2136Provider, plain_dns_records};
use meridian_providers::webhook::{MEDIA_TYPE, WebhookConfig, WebhookProvider};
use meridian_providers::{Provider, ProviderError};
use meridian_testkit::bind_server::BindServer;
use meridian_testkit::powerdns::PowerDns;
use meridian_testkit::trees::{geo_policy, three_clusters, tree};
use meridian_testkit::webhook_server::WebhookServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ZONE: &str = "example.com";

fn config(url: &str) -> WebhookConfig {
    WebhookConfig {
        url: url.parse().unwrap(),
        zone: ZONE.into(),
        headers: Vec::new(),
        extra_ca_pem: None,
        pinned: Vec::new(),
    }
}

/// Retries quickly, so the tests of retrying take milliseconds.
fn quick(config: WebhookConfig) -> WebhookProvider {
    WebhookProvider::with_backoff(
        config,
        Backoff {
            base: Duration::from_millis(10),
            cap: Duration::from_millis(50),
            max_attempts: 3,
        },
    )
    .unwrap()
}

fn clusters() -> Vec<ClusterTarget> {
    three_clusters(["192.0.2.1", "192.0.2.2", "2001:db8::3"])
}

/// A webhook in front of PowerDNS, and the server (kept alive beside it).
async fn powerdns_webhook() -> (WebhookProvider, WebhookServer, PowerDns) {
    let pdns = PowerDns::start(ZONE).await.unwrap();
    let server = WebhookServer::powerdns(&pdns, ZONE).await.unwrap();
    (
        WebhookProvider::new(config(&server.url)).unwrap(),
        server,
        pdns,
    )
}

/// A webhook in front of BIND, and the server.
async fn bind_webhook() -> (WebhookProvider, WebhookServer, BindServer) {
    let bind = BindServer::start(ZONE).await.unwrap();
    let server = WebhookServer::rfc2136(&bind.config).await.unwrap();
    (
        WebhookProvider::new(config(&server.url)).unwrap(),
        server,
        bind,
    )
}

/// What every provider passes, at a provider of plain records: a flattened tree lands and
/// reads back exactly (nothing to re-plan), shrinks, and goes, leaving another owner's tree
/// and an unowned record as they were.
async fn a_flattened_tree_lands_updates_and_leaves_others_alone(provider: &WebhookProvider) {
    let legacy = Endpoint::new(
        "legacy.example.com",
        RecordType::A,
        ["198.51.100.1".to_string()],
        300,
    );
    create(provider, ZONE, vec![legacy]).await.unwrap();
    let other = "other.example.com";
    let (theirs, _) = plain_dns_records(other, &tree(other, &geo_policy(), &clusters()));
    converge(provider, ZONE, "someone-else", other, &theirs, None).await;
    let before = provider.records(ZONE).await.unwrap();

    let host = "api.example.com";
    let (desired, _) = plain_dns_records(host, &tree(host, &geo_policy(), &clusters()));
    let desired = provider.adjust(&desired).await.unwrap();
    converge(provider, ZONE, "hub", host, &desired, None).await;
    assert_eq!(published(provider, ZONE, host).await, desired);
    let again = plan_at(provider, ZONE, "hub", host, &desired, Some(&desired)).await;
    assert!(
        again.changes.is_empty(),
        "what the webhook holds reads back exactly: {:#?}",
        again.changes
    );

    let (fewer, _) = plain_dns_records(host, &tree(host, &geo_policy(), &clusters()[..1]));
    converge(provider, ZONE, "hub", host, &fewer, Some(&desired)).await;
    assert_eq!(published(provider, ZONE, host).await, fewer);

    // A hostname target (the CNAME a delegation writes) lands and reads back too.
    let alias = "www.example.com";
    let cname = vec![Endpoint::new(
        alias,
        RecordType::Cname,
        ["www.klb.example.com".to_string()],
        300,
    )];
    converge(provider, ZONE, "hub", alias, &cname, None).await;
    assert_eq!(published(provider, ZONE, alias).await, cname);
    converge(provider, ZONE, "hub", alias, &[], Some(&cname)).await;

    converge(provider, ZONE, "hub", host, &[], Some(&fewer)).await;
    assert_eq!(
        provider.records(ZONE).await.unwrap(),
        before,
        "only our records came and went"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_external_dns_to_powerdns_a_tree_lands_and_others_are_left_alone() {
    let (provider, server, _pdns) = powerdns_webhook().await;
    a_flattened_tree_lands_updates_and_leaves_others_alone(&provider).await;
    assert!(server.log().contains("PowerDNS"), "{}", server.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_external_dns_to_bind_a_tree_lands_and_others_are_left_alone() {
    let (provider, server, _bind) = bind_webhook().await;
    a_flattened_tree_lands_updates_and_leaves_others_alone(&provider).await;
    assert!(server.log().contains("rfc2136"), "{}", server.log());
}

/// The plan Meridian makes lands the same whether BIND is written directly (RFC2136) or
/// through external-dns's webhook (its rfc2136 provider), and the same at PowerDNS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_plan_lands_identically_direct_and_through_webhooks() {
    let direct_bind = BindServer::start(ZONE).await.unwrap();
    let direct = Rfc2136Provider::new(direct_bind.config.clone()).unwrap();
    let (to_bind, _bind_server, _bind) = bind_webhook().await;
    let (to_pdns, _pdns_server, _pdns) = powerdns_webhook().await;

    let host = "api.example.com";
    let (desired, _) = plain_dns_records(host, &tree(host, &geo_policy(), &clusters()));
    let planned = plan(
        &PlanInput {
            owner: "hub",
            root_host: host,
            desired: &desired,
            previous: None,
        },
        &[],
    );
    direct.apply(ZONE, &planned.changes).await.unwrap();
    to_bind.apply(ZONE, &planned.changes).await.unwrap();
    to_pdns.apply(ZONE, &planned.changes).await.unwrap();

    let ours = |records: Vec<Endpoint>| -> Vec<Endpoint> {
        records
            .into_iter()
            .filter(|r| is_at_or_below(&r.dns_name, host) || r.dns_name.starts_with("kuadrant-"))
            .collect()
    };
    let on_bind = ours(direct.records(ZONE).await.unwrap());
    assert_eq!(
        on_bind.len(),
        4,
        "two records and two ownership records: {on_bind:#?}"
    );
    assert_eq!(ours(to_bind.records(ZONE).await.unwrap()), on_bind);
    assert_eq!(ours(to_pdns.records(ZONE).await.unwrap()), on_bind);
}

/// Many records go in batches within the protocol's body limit, and a second adjust of the same
/// records asks the webhook nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_hosts_go_in_batches_and_adjusting_again_costs_nothing() {
    let (provider, _server, _pdns) = powerdns_webhook().await;
    let planned = support::plan_many(&provider, ZONE, ZONE, 1000).await;
    let before = provider.requests();
    provider.apply(ZONE, &planned.changes).await.unwrap();
    let posts = provider.requests() - before;
    assert_eq!(posts, 2, "2,000 changes in batches of 1,000");
    assert_eq!(
        support::count_read(&provider, ZONE, |r| r.record_type == RecordType::A).await,
        1000
    );

    let records = support::numbered("h", ZONE, 10);
    let first = provider.adjust(&records).await.unwrap();
    assert_eq!(
        first, records,
        "external-dns's providers store them as they are"
    );
    let asked = provider.requests();
    assert_eq!(provider.adjust(&records).await.unwrap(), first);
    assert_eq!(provider.requests(), asked, "the answer was kept");
}

/// What a webhook cannot hold is refused before anything is sent: routed records, names outside
/// the zone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn weighted_records_and_names_outside_the_zone_are_refused_unsent() {
    let (provider, _server, _pdns) = powerdns_webhook().await;
    let before = provider.requests();
    let choice = weighted("w.example.com", RecordType::A, "192.0.2.1", "a", "10");
    let error = create(&provider, ZONE, vec![choice]).await.unwrap_err();
    assert!(
        matches!(error, ProviderError::Invalid(_))
            && error.to_string().contains("no weighted or GEO"),
        "{error}"
    );
    let outside = Endpoint::new(
        "shop.example.org",
        RecordType::A,
        ["192.0.2.1".to_string()],
        60,
    );
    let error = create(&provider, ZONE, vec![outside]).await.unwrap_err();
    assert!(
        error.to_string().contains("outside the zone example.com"),
        "{error}"
    );
    assert_eq!(provider.requests(), before, "nothing was sent");
}

/// A zone the webhook's domain filter does not cover is not the webhook's: found missing, not
/// written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_outside_the_webhooks_domain_filter_is_not_found() {
    let (_, server, _pdns) = powerdns_webhook().await;
    let mut elsewhere = config(&server.url);
    elsewhere.zone = "example.org".into();
    let provider = WebhookProvider::new(elsewhere).unwrap();
    let error = provider.list_zones().await.unwrap_err();
    assert!(
        matches!(&error, ProviderError::ZoneNotFound(why) if why.contains("not the zone example.org")),
        "{error}"
    );
}

/// A webhook written here: answers each request by `respond` (path, request count so far) and
/// counts the requests and what they carried.
struct Hostile {
    url: String,
    requests: Arc<AtomicUsize>,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

type Respond = dyn Fn(&str, usize) -> (u16, Vec<(String, String)>, Vec<u8>) + Send + Sync;

async fn hostile(respond: Arc<Respond>) -> Hostile {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let requests = Arc::new(AtomicUsize::new(0));
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (count, log) = (requests.clone(), seen.clone());
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let (count, log, respond) = (count.clone(), log.clone(), respond.clone());
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if stream.read_exact(&mut byte).await.is_err() {
                        return;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let length: usize = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                let mut body = vec![0u8; length];
                let _ = stream.read_exact(&mut body).await;
                let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
                let n = count.fetch_add(1, Ordering::SeqCst);
                log.lock().unwrap().push(head);
                let (status, headers, body) = respond(&path, n);
                let mut answer = format!("HTTP/1.1 {status} X\r\nConnection: close\r\n");
                if !headers.iter().any(|(k, _)| k == "Content-Length") {
                    answer.push_str(&format!("Content-Length: {}\r\n", body.len()));
                }
                // An empty value leaves the header out (no Content-Length: read to the end).
                for (name, value) in headers.into_iter().filter(|(_, v)| !v.is_empty()) {
                    answer.push_str(&format!("{name}: {value}\r\n"));
                }
                answer.push_str("\r\n");
                let _ = stream.write_all(answer.as_bytes()).await;
                let _ = stream.write_all(&body).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Hostile {
        url,
        requests,
        seen,
    }
}

fn media() -> Vec<(String, String)> {
    vec![("Content-Type".into(), MEDIA_TYPE.into())]
}

/// Negotiation as a well-behaved webhook answers it, then `rest` for every other request.
fn negotiating(
    rest: impl Fn(&str, usize) -> (u16, Vec<(String, String)>, Vec<u8>) + Send + Sync + 'static,
) -> Arc<Respond> {
    Arc::new(move |path, n| {
        if path == "/" {
            (200, media(), br#"{"include":["example.com"]}"#.to_vec())
        } else {
            rest(path, n)
        }
    })
}

fn one_record() -> Changes {
    Changes {
        creates: vec![Endpoint::new(
            "x.example.com",
            RecordType::A,
            ["192.0.2.9".to_string()],
            60,
        )],
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_is_retried_with_backoff_and_a_4xx_is_reported_at_once() {
    // Fails twice, then applies.
    let flaky = hostile(negotiating(|_, n| {
        if n < 3 {
            (503, Vec::new(), Vec::new())
        } else {
            (204, Vec::new(), Vec::new())
        }
    }))
    .await;
    let provider = quick(config(&flaky.url));
    provider.apply(ZONE, &one_record()).await.unwrap();
    assert_eq!(
        flaky.requests.load(Ordering::SeqCst),
        4,
        "negotiation, two 503s, the 204"
    );

    // Always 500: given up after the attempts, as an error to back off from (not a refusal).
    let down = hostile(negotiating(|_, _| (500, Vec::new(), Vec::new()))).await;
    let provider = quick(config(&down.url));
    let error = provider.records(ZONE).await.unwrap_err();
    assert!(
        matches!(&error, ProviderError::Other(m) if m.contains("500") && m.contains("3 attempts")),
        "{error}"
    );
    assert_eq!(down.requests.load(Ordering::SeqCst), 1 + 3);

    // 422 with a reason: reported with it, never retried.
    let refusing = hostile(negotiating(|_, _| {
        (422, Vec::new(), b"record x.example.com:\nbad\n".to_vec())
    }))
    .await;
    let provider = quick(config(&refusing.url));
    let error = provider.apply(ZONE, &one_record()).await.unwrap_err();
    assert!(
        matches!(&error, ProviderError::PartlyApplied(failures)
            if failures == &["x.example.com: POST /records answered 422 Unprocessable Entity: record x.example.com: bad".to_string()]),
        "{error}"
    );
    assert_eq!(refusing.requests.load(Ordering::SeqCst), 2);
}

/// A webhook cannot send the hub elsewhere: a redirect is not followed (the target, standing in
/// for a metadata service, is never reached) and is reported as a refusal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_not_followed() {
    let target = hostile(Arc::new(|_, _| (200, media(), b"[]".to_vec()))).await;
    let location = format!("{}/latest/meta-data", target.url);
    let redirecting = hostile(negotiating(move |_, _| {
        (302, vec![("Location".into(), location.clone())], Vec::new())
    }))
    .await;
    let provider = quick(config(&redirecting.url));
    let error = provider.records(ZONE).await.unwrap_err();
    assert!(
        matches!(&error, ProviderError::Rejected(m) if m.contains("302")),
        "{error}"
    );
    assert_eq!(target.requests.load(Ordering::SeqCst), 0);
}

/// An answer over the protocol's 32 MiB is refused, whether it says so up front or streams
/// without end; the hub never holds more than the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_over_32_mib_is_refused() {
    let declared = hostile(negotiating(|_, _| {
        (
            200,
            vec![("Content-Length".into(), (33u64 << 20).to_string())],
            Vec::new(),
        )
    }))
    .await;
    let error = quick(config(&declared.url))
        .records(ZONE)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("over the protocol's 32 MiB"),
        "{error}"
    );

    let streamed = hostile(negotiating(|_, _| {
        // No Content-Length: read until the webhook closes.
        let mut body = b"[".to_vec();
        body.resize(33 << 20, b' ');
        (200, vec![("Content-Length".into(), String::new())], body)
    }))
    .await;
    let error = quick(config(&streamed.url))
        .records(ZONE)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("over the protocol's 32 MiB")
            || error.to_string().contains("reading"),
        "{error}"
    );
}

/// A server that is not a version 1 webhook is refused at negotiation, and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_protocol_version_is_refused_at_negotiation() {
    let other = hostile(Arc::new(|path, _| {
        if path == "/" {
            (
                200,
                vec![(
                    "Content-Type".into(),
                    "application/external.dns.webhook+json;version=2".into(),
                )],
                b"{}".to_vec(),
            )
        } else {
            (204, Vec::new(), Vec::new())
        }
    }))
    .await;
    let provider = quick(config(&other.url));
    let error = provider.apply(ZONE, &one_record()).await.unwrap_err();
    assert!(error.to_string().contains("version 1"), "{error}");
    assert_eq!(
        other.requests.load(Ordering::SeqCst),
        1,
        "only the negotiation"
    );
}

/// The Secret's headers (a token) reach the webhook on every request, with the protocol's media
/// type; they never show in the provider's debug form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_secrets_headers_go_with_every_request_and_never_to_a_log() {
    let webhook = hostile(negotiating(|_, _| (200, media(), b"[]".to_vec()))).await;
    let mut with_token = config(&webhook.url);
    with_token.headers = vec![("Authorization".into(), "Bearer s3cr3t-token".into())];
    let provider = quick(with_token);
    provider.records(ZONE).await.unwrap();
    let seen = webhook.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for head in &seen {
        let lower = head.to_ascii_lowercase();
        assert!(
            lower.contains("authorization: bearer s3cr3t-token"),
            "{head}"
        );
        assert!(
            lower.contains(&format!("accept: {}", MEDIA_TYPE.to_ascii_lowercase())),
            "{head}"
        );
    }
    assert!(!format!("{provider:?}").contains("s3cr3t"), "{provider:?}");

    let mut bad = config(&webhook.url);
    bad.headers = vec![("X-Token".into(), "a\r\nInjected: yes".into())];
    let error = WebhookProvider::new(bad).unwrap_err();
    assert!(
        error.to_string().contains("not a header value") && !error.to_string().contains("Injected"),
        "{error}"
    );
}
