//! A DNSPolicy whose zone is held at a provider of plain records: PowerDNS behind external-dns
//! v0.21.0's webhook server. What the provider cannot hold (GEO answers, unequal weights) is
//! refused with `Accepted=False`, naming it, and nothing is published or changed for it; a
//! tree the provider holds (one location, equal weights) is published as every address.

use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use meridian_api::conditions::{ACCEPTED, READY, reasons};
use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};
use meridian_controllers::decide::convert::all_to_api;
use meridian_e2e::example::{
    GATEWAY, HOST, NAMESPACE, RunningExample, apply, dig_host_async, geo_tree, with_example_spokes,
};
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, ensure_namespace, eventually};
use meridian_testkit::fixtures;
use meridian_testkit::powerdns::PowerDns;
use meridian_testkit::webhook_server::WebhookServer;
use serde_json::{Value, json};

/// The policy's `Accepted` once it says `accepted` for its current generation: reason and
/// message.
async fn accepted(policies: &Api<DNSPolicy>, accepted: bool) -> Result<(String, String), Error> {
    let status = if accepted { "True" } else { "False" };
    eventually(
        &format!("the policy's Accepted is {status}"),
        DEFAULT_PATIENCE,
        || async {
            let policy = policies.get(GATEWAY).await?;
            Ok(policy
                .status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .find(|c| {
                    c.type_ == ACCEPTED
                        && c.status == status
                        && c.observed_generation == policy.metadata.generation
                })
                .map(|c| (c.reason.clone(), c.message.clone())))
        },
    )
    .await
}

async fn set_load_balancing(policies: &Api<DNSPolicy>, load_balancing: Value) -> Result<(), Error> {
    policies
        .patch(
            GATEWAY,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "loadBalancing": load_balancing } })),
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_a_plain_zone_cannot_hold_is_refused_and_one_it_can_is_published()
-> Result<(), Error> {
    let pdns = PowerDns::start("example.com")
        .await
        .expect("PowerDNS starts");
    let webhook = WebhookServer::powerdns(&pdns, "example.com")
        .await
        .expect("external-dns --webhook-server starts");
    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    let hub = fleet.hub.client();
    // The platform admin puts the example's zone at the webhook before the example's own
    // objects are applied (as another field manager, so they keep it).
    ensure_namespace(&hub, NAMESPACE).await?;
    let admin = PatchParams::apply("platform-admin").force();
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(hub.clone(), NAMESPACE)
        .patch(
            "webhook",
            &admin,
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/webhook",
                "metadata": { "name": "webhook", "namespace": NAMESPACE },
                "stringData": { "url": webhook.url },
            })),
        )
        .await?;
    Api::<ManagedZone>::namespaced(hub.clone(), NAMESPACE)
        .patch(
            "example",
            &admin,
            &Patch::Apply(
                fixtures::managed_zone(NAMESPACE, "example", "example.com")
                    .at_provider("webhook")
                    .json(),
            ),
        )
        .await?;
    let example = RunningExample::start_configured(&fleet, Duration::from_secs(5), None, |args| {
        args.providers.webhook_allow = vec!["127.0.0.1/32".into()];
        args.providers.ambient_identity_namespaces = vec![NAMESPACE.into()];
    })
    .await?;
    let policies = Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE);

    // The example policy answers by location (IE, US, GEO-EU): plain records cannot.
    let (reason, message) = accepted(&policies, false).await?;
    println!("GEO at a webhook zone: {reason}: {message}");
    assert_eq!(reason, reasons::UNSUPPORTED);
    assert!(
        message.contains(
            "ManagedZone example: klb.api.example.com: webhook has no GEO answers, and the geo codes *, GEO-EU, IE, US answer differently"
        ),
        "{message}"
    );
    // Never flattened: at most what a tree of one location (the first cluster to report,
    // before the others did) held is published.
    let published = dig_host_async(pdns.dns, HOST, None).await;
    println!("published while refused: {published:?}");
    assert!(published.len() < 3, "{published:?}");

    // One location, but the Azure cluster weighs 30 against 120: still refused, by weight.
    set_load_balancing(&policies, json!({ "geo": null })).await?;
    let (reason, message) = accepted(&policies, false).await?;
    assert_eq!(reason, reasons::UNSUPPORTED);
    assert!(
        message.contains("default.klb.api.example.com: webhook has no weighted answers, and the weights differ (30, 120)"),
        "{message}"
    );

    // Equal weights: the tree loses nothing as plain records, and PowerDNS answers every
    // cluster's address.
    set_load_balancing(
        &policies,
        json!({ "weighted": { "defaultWeight": 120, "custom": null } }),
    )
    .await?;
    let (reason, _) = accepted(&policies, true).await?;
    assert_eq!(reason, reasons::ACCEPTED);
    let every = ["10.0.0.1", "10.0.0.2", "10.0.0.3"];
    let server = pdns.dns;
    eventually(
        "PowerDNS answers every cluster",
        DEFAULT_PATIENCE,
        || async move { Ok((dig_host_async(server, HOST, None).await == every).then_some(())) },
    )
    .await?;

    // Asking for GEO again is refused, and what was published stays published.
    set_load_balancing(&policies, json!({ "geo": { "defaultGeo": "IE" } })).await?;
    let (reason, _) = accepted(&policies, false).await?;
    assert_eq!(reason, reasons::UNSUPPORTED);
    assert_eq!(dig_host_async(pdns.dns, HOST, None).await, every);

    // A DNSRecord written by hand (no policy) with GEO answers is refused the same way, before
    // any call to the webhook.
    let hand = "hand.example.com";
    let tree = geo_tree(
        hand,
        NAMESPACE,
        &[("c1", "10.1.0.1", "IE"), ("c2", "10.1.0.2", "US")],
    );
    let records = Api::<DNSRecord>::namespaced(hub.clone(), NAMESPACE);
    apply(
        &records,
        fixtures::dns_record(NAMESPACE, "hand", "example")
            .root_host(hand)
            .endpoints(serde_json::to_value(all_to_api(&tree)).unwrap())
            .json(),
    )
    .await?;
    let refused = eventually(
        "the hand-written record is refused",
        DEFAULT_PATIENCE,
        || async {
            let record = records.get("hand").await?;
            Ok(record
                .status
                .iter()
                .flat_map(|s| s.conditions.iter())
                .find(|c| c.type_ == READY && c.reason == "Unsupported")
                .map(|c| (c.status.clone(), c.message.clone())))
        },
    )
    .await?;
    println!("a hand-written GEO record: {refused:?}");
    assert_eq!(refused.0, "False");
    assert!(
        refused.1.starts_with(
            "webhook cannot hold this record tree: klb.hand.example.com: webhook has no GEO answers"
        ),
        "{}",
        refused.1
    );
    assert_eq!(
        dig_host_async(pdns.dns, hand, None).await,
        Vec::<String>::new()
    );
    example.stop().await;
    Ok(())
}
