//! A DNSPolicy whose zone is held at a provider of plain records: PowerDNS behind external-dns
//! v0.21.0's webhook server. What the provider cannot hold (GEO answers, unequal weights) is
//! refused with `Accepted=False`, naming it, and nothing is published or changed for it; a
//! tree the provider holds (one location, equal weights) is published as every address. With
//! a routing delegate, the same tree is answered by Meridian's server for a sub-zone PowerDNS
//! delegates to, and a resolver that knows only PowerDNS gets GEO answers, a weighted split, and
//! a moved Gateway's new address.

use std::time::Duration;

use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use meridian_api::conditions::{ACCEPTED, READY, ROUTING_DELEGATED, reasons};
use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};
use meridian_controllers::decide::convert::all_to_api;
use meridian_e2e::example::{
    FRANCE, GATEWAY, HOST, IRELAND, NAMESPACE, RunningExample, UNITED_STATES, apply,
    dig_host_async, dig_outcome_async, geo_tree, with_example_spokes,
};
use meridian_e2e::plain_zone::PlainZone;
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, condition_becomes, eventually};
use meridian_testkit::fixtures;
use serde_json::{Value, json};

/// The policy's `Accepted` once it says `accepted` for its current generation: reason and
/// message.
async fn accepted(policies: &Api<DNSPolicy>, accepted: bool) -> Result<(String, String), Error> {
    accepted_saying(policies, accepted, "").await
}

/// The same, once its message also contains `saying`: a refusal is written as soon as the
/// first clusters have reported, and names what the tree holds then, so a test that expects
/// every cluster's part waits for it.
async fn accepted_saying(
    policies: &Api<DNSPolicy>,
    accepted: bool,
    saying: &str,
) -> Result<(String, String), Error> {
    let status = if accepted { "True" } else { "False" };
    eventually(
        &format!("the policy's Accepted is {status}, saying {saying:?}"),
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
                        && c.message.contains(saying)
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
    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    let hub = fleet.hub.client();
    // The platform admin puts the example's zone at the webhook before the example's own
    // objects are applied.
    let zone = PlainZone::start(&hub).await?;
    let pdns = &zone.pdns;
    let example = RunningExample::start_configured(&fleet, Duration::from_secs(5), None, |args| {
        zone.configure(args)
    })
    .await?;
    let policies = Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE);

    // The example policy answers by location (IE, US, GEO-EU): plain records cannot.
    let (reason, message) = accepted_saying(
        &policies,
        false,
        "ManagedZone example: klb.api.example.com: webhook has no GEO answers, and the geo codes *, GEO-EU, IE, US answer differently",
    )
    .await?;
    println!("GEO at a webhook zone: {reason}: {message}");
    assert_eq!(reason, reasons::UNSUPPORTED);
    // Never flattened: at most what a tree of one location (the first cluster to report,
    // before the others did) held is published.
    let published = dig_host_async(pdns.dns, HOST, None).await;
    println!("published while refused: {published:?}");
    assert!(published.len() < 3, "{published:?}");

    // One location, but the Azure cluster weighs 30 against 120: still refused, by weight.
    set_load_balancing(&policies, json!({ "geo": null })).await?;
    let (reason, _) = accepted_saying(
        &policies,
        false,
        "default.klb.api.example.com: webhook has no weighted answers, and the weights differ (30, 120)",
    )
    .await?;
    assert_eq!(reason, reasons::UNSUPPORTED);

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
    let refused = condition_becomes(
        &records,
        "hand",
        READY,
        "the hand-written record is refused",
        |c| c.reason == "Unsupported",
    )
    .await?;
    println!("a hand-written GEO record: {refused:?}");
    assert_eq!(refused.status, "False");
    assert!(
        refused.message.starts_with(
            "webhook cannot hold this record tree: klb.hand.example.com: webhook has no GEO answers"
        ),
        "{}",
        refused.message
    );
    assert_eq!(
        dig_host_async(pdns.dns, hand, None).await,
        Vec::<String>::new()
    );
    example.stop().await;
    Ok(())
}

/// The name server of the routing delegate: a loopback address of its own, on port 53, where a
/// resolver following PowerDNS's referral asks.
const DELEGATE_SERVER: &str = "127.0.53.53";

/// Client subnets no GEO group holds: each its own /24, so a resolver caching by client subnet
/// asks the delegate's servers afresh for every one.
fn fresh_subnet(i: usize) -> String {
    format!("100.{}.{}.0/24", 64 + i / 256, i % 256)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_zone_with_a_routing_delegate_answers_by_location_and_weight_through_a_resolver()
-> Result<(), Error> {
    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    let hub = fleet.hub.client();
    // The platform admin: the example's zone at the webhook, delegating what PowerDNS cannot
    // hold to klb.example.com, which Meridian serves at DELEGATE_SERVER.
    let zone =
        PlainZone::start_delegating(&hub, DELEGATE_SERVER.parse().expect("an address")).await?;
    let pdns = &zone.pdns;
    let zones = Api::<ManagedZone>::namespaced(hub.clone(), NAMESPACE);
    // A tenant of the namespace already has a DNSRecord under the name the delegation needs.
    let records = Api::<DNSRecord>::namespaced(hub.clone(), NAMESPACE);
    let taken = meridian_api::labels::routing_delegation_record("example");
    apply(
        &records,
        fixtures::dns_record(NAMESPACE, &taken, "example")
            .root_host("taken.example.com")
            .endpoints(json!([{
                "dnsName": "taken.example.com", "recordType": "A",
                "targets": ["10.9.9.9"], "recordTTL": 60,
            }]))
            .json(),
    )
    .await?;
    let example = RunningExample::start_configured(&fleet, Duration::from_secs(2), None, |args| {
        zone.configure(args)
    })
    .await?;
    let policies = Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE);

    // The hub never takes the tenant's record over: the zone says why it cannot delegate, and
    // the policy PowerDNS cannot hold is refused meanwhile.
    let refused = condition_becomes(
        &zones,
        "example",
        ROUTING_DELEGATED,
        "the zone says the delegation's name is taken",
        |c| c.reason == "NameTaken",
    )
    .await?;
    println!("a tenant's record under the delegation's name: {refused:?}");
    assert_eq!(refused.status, "False");
    assert!(
        refused.message.contains(&format!(
            "the DNSRecord {taken} that would hold the delegation is not this zone's"
        )),
        "{}",
        refused.message
    );
    let (reason, _) = accepted(&policies, false).await?;
    assert_eq!(reason, reasons::UNSUPPORTED);
    let kept = records.get(&taken).await?;
    assert_eq!(kept.spec.root_host, "taken.example.com");
    assert!(kept.labels().is_empty(), "{:?}", kept.labels());
    eventually(
        "PowerDNS answers the tenant's record",
        DEFAULT_PATIENCE,
        || async move {
            Ok(
                (dig_host_async(pdns.dns, "taken.example.com", None).await == ["10.9.9.9"])
                    .then_some(()),
            )
        },
    )
    .await?;

    // The tenant removes it: the name is free, the delegation is published (woken by the
    // removal, not a resync), and the policy's tree goes to the delegate.
    records.delete(&taken, &Default::default()).await?;
    eventually(
        "the tenant's record is withdrawn from PowerDNS",
        DEFAULT_PATIENCE,
        || async move {
            Ok(dig_host_async(pdns.dns, "taken.example.com", None)
                .await
                .is_empty()
                .then_some(()))
        },
    )
    .await?;

    // The example policy answers by location (IE, US, GEO-EU) and weight: PowerDNS cannot,
    // so the tree goes to the delegate, and the policy is accepted.
    let (reason, _) = accepted(&policies, true).await?;
    assert_eq!(reason, reasons::ACCEPTED);
    let delegated = condition_becomes(
        &zones,
        "example",
        ROUTING_DELEGATED,
        "the zone says klb.example.com is delegated",
        |c| c.status == "True",
    )
    .await?
    .message;
    println!("the parent zone: {delegated}");
    // PowerDNS holds the host's CNAME into the delegate and the delegation, nothing more.
    zone.wait_for_delegation(&hub).await?;

    // A resolver that knows only PowerDNS follows the referral, and gets GEO answers by the
    // client's subnet from Meridian's server.
    let resolver = meridian_e2e::traffic::Resolver::start_with_delegations(
        "example.com",
        &[pdns.dns],
        &[DELEGATE_SERVER.parse().expect("an address")],
    )
    .await?;
    let at = resolver.address();
    for (subnet, expected) in [
        (IRELAND, "10.0.0.1"),
        (UNITED_STATES, "10.0.0.2"),
        (FRANCE, "10.0.0.3"),
    ] {
        eventually(
            &format!("Unbound answers {subnet} with {expected}"),
            DEFAULT_PATIENCE,
            || async move {
                Ok((dig_host_async(at, HOST, Some(subnet)).await == [expected]).then_some(()))
            },
        )
        .await?;
    }
    println!("through Unbound: IE -> 10.0.0.1, US -> 10.0.0.2, FR (GEO-EU) -> 10.0.0.3");

    // One location: the weights (120, 120, and 30 for the Azure cluster) split the answers.
    set_load_balancing(&policies, json!({ "geo": null })).await?;
    let (reason, _) = accepted(&policies, true).await?;
    assert_eq!(reason, reasons::ACCEPTED);
    let mut subnets = (0..).map(fresh_subnet);
    eventually(
        "the Azure cluster is answered too, by weight",
        DEFAULT_PATIENCE,
        || {
            let subnet = subnets.next().unwrap();
            async move {
                let answers = dig_host_async(at, HOST, Some(&subnet)).await;
                Ok(
                    (answers.len() == 1 && answers[0] != "10.0.0.1" && answers[0] != "10.0.0.2")
                        .then_some(()),
                )
            }
        },
    )
    .await?;
    const QUERIES: usize = 400;
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    // A resolver that gives up on a query (SERVFAIL, or silence past dig's tries) on a loaded
    // machine says nothing about the records: that query is asked again from another subnet,
    // and counted. A name that does not answer (NXDOMAIN, NODATA) or answers twice fails.
    let mut unanswered = 0;
    while counts.values().sum::<usize>() < QUERIES {
        let subnet = subnets.next().unwrap();
        let mut outcome = dig_outcome_async(at, HOST, Some(&subnet)).await;
        // A chain the resolver left unfinished (NOERROR, its CNAMEs, no address: seen once in
        // CI, on a loaded machine) is the resolver's unless Meridian's server, asked for the
        // chain's last name from the same subnet, leaves it without an address too.
        if outcome.status.as_deref() == Some("NOERROR")
            && outcome.answers.is_empty()
            && let Some((_, last)) = outcome.cnames.last()
        {
            let direct = dig_outcome_async(example.hub.nameserver, last, Some(&subnet)).await;
            println!(
                "the resolver left {HOST} at {last} without an address: {outcome:?}; Meridian's server answers {direct:?}"
            );
            assert_eq!(
                direct.answers.len(),
                1,
                "Meridian's server answers the chain's last name {last} with an address: {direct:?}"
            );
            outcome.status = Some("SERVFAIL".into());
        }
        if outcome.unanswered() {
            unanswered += 1;
            assert!(
                unanswered <= QUERIES / 20,
                "{unanswered} queries unanswered, the last {outcome:?}; Unbound: {}",
                resolver.log_tail()
            );
            // A resolver that just gave up on a server answers SERVFAIL at once for a while:
            // asking again at once would spend every retry in one stall.
            tokio::time::sleep(Duration::from_millis(500)).await;
            continue;
        }
        assert_eq!(
            (outcome.status.as_deref(), outcome.answers.len()),
            (Some("NOERROR"), 1),
            "{outcome:?} after {counts:?}; Unbound: {}",
            resolver.log_tail()
        );
        *counts.entry(outcome.answers[0].clone()).or_default() += 1;
    }
    let weights = [("10.0.0.1", 120.0), ("10.0.0.2", 120.0), ("10.0.0.3", 30.0)];
    let total: f64 = weights.iter().map(|(_, w)| w).sum();
    let chi_square: f64 = weights
        .iter()
        .map(|(address, weight)| {
            let expected = QUERIES as f64 * weight / total;
            let observed = counts.get(*address).copied().unwrap_or_default() as f64;
            (observed - expected).powi(2) / expected
        })
        .sum();
    println!(
        "{QUERIES} queries through Unbound, each from its own subnet: {counts:?} for weights 120:120:30; chi-square {chi_square:.2} (2 degrees of freedom, 13.82 at p = 0.001); {unanswered} more the resolver gave up on"
    );
    assert_eq!(counts.values().sum::<usize>(), QUERIES, "{counts:?}");
    assert!(chi_square < 13.82, "{counts:?}: chi-square {chi_square:.2}");

    // spoke-2's Gateway moves to another address: the delegate answers the new one through the
    // same resolver (fresh subnets, so nothing cached stands in the way), the old one never.
    meridian_e2e::example::set_gateway_address(&fleet.spoke("spoke-2").client(), "10.0.0.22")
        .await?;
    let moved = std::time::Instant::now();
    eventually(
        "spoke-2's new address is answered",
        DEFAULT_PATIENCE,
        || {
            let fresh: Vec<String> = (0..20).map(|_| subnets.next().unwrap()).collect();
            async move {
                let mut seen = std::collections::BTreeSet::new();
                for subnet in &fresh {
                    seen.extend(dig_host_async(at, HOST, Some(subnet)).await);
                }
                Ok((seen.contains("10.0.0.22") && !seen.contains("10.0.0.2")).then_some(()))
            }
        },
    )
    .await?;
    println!(
        "spoke-2's Gateway moved to 10.0.0.22: answered through the referral after {:.1} s",
        moved.elapsed().as_secs_f64()
    );
    example.stop().await;
    Ok(())
}
