//! The plan and its ownership rules: tables for each rule, and properties over random trees,
//! zones and sequences of owners joining and leaving. Every change set is applied to the
//! strict in-memory zone, so a plan a real provider would reject fails here too.

use std::collections::{BTreeMap, BTreeSet};

use meridian_dns::changes::{ZoneRecords, apply_strictly};
use meridian_dns::model::{Endpoint, RecordKey, RecordType, is_at_or_below};
use meridian_dns::plan::{
    PlanInput, Problem, Registry, adoption, host_records, ownership_txt_name, plan,
};
use meridian_dns::tree::{
    Address, ClusterTarget, GatewayRef, LoadBalancing, Strategy as TreeStrategy, build_record_tree,
};
use proptest::prelude::*;

const HOST: &str = "api.example.com";

fn a(name: &str, ips: &[&str]) -> Endpoint {
    Endpoint::new(name, RecordType::A, ips.iter().map(|ip| ip.to_string()), 60)
}

fn cname(name: &str, target: &str, ttl: u32) -> Endpoint {
    Endpoint::new(name, RecordType::Cname, [target.to_string()], ttl)
}

fn zone_of(records: &ZoneRecords) -> Vec<Endpoint> {
    records.values().cloned().collect()
}

/// Plans `owner`'s `desired` against `zone` and applies it strictly; returns the problems.
fn publish(
    zone: &mut ZoneRecords,
    owner: &str,
    desired: &[Endpoint],
    previous: Option<&[Endpoint]>,
) -> Vec<Problem> {
    let input = PlanInput {
        owner,
        root_host: HOST,
        desired,
        previous,
    };
    let planned = plan(&input, &zone_of(zone));
    apply_strictly(zone, &planned.changes)
        .unwrap_or_else(|error| panic!("{owner}'s plan was rejected: {error}\n{planned:#?}"));
    planned.problems
}

fn records_only(zone: &ZoneRecords) -> Vec<Endpoint> {
    zone.values()
        .filter(|r| !r.dns_name.starts_with("kuadrant-"))
        .cloned()
        .collect()
}

#[test]
fn a_new_owner_creates_its_records_with_ownership_records() {
    let mut zone = ZoneRecords::new();
    let desired = [
        cname(HOST, "klb.api.example.com", 300),
        a("klb.api.example.com", &["192.0.2.1"]),
    ];
    assert!(publish(&mut zone, "owner-a", &desired, None).is_empty());
    assert_eq!(zone.len(), 4, "two records, two TXT");
    let txt_name = ownership_txt_name("owner-a", RecordType::Cname, HOST);
    assert!(
        txt_name.starts_with("kuadrant-") && txt_name.ends_with("-cname-api.example.com"),
        "{txt_name}"
    );
    let txt = zone
        .values()
        .find(|r| r.dns_name == txt_name)
        .expect("ownership record");
    assert_eq!(
        txt.targets,
        ["heritage=external-dns,external-dns/owner=owner-a,external-dns/version=1"]
    );

    let again = plan(
        &PlanInput {
            owner: "owner-a",
            root_host: HOST,
            desired: &desired,
            previous: Some(&desired),
        },
        &zone_of(&zone),
    );
    assert!(
        again.changes.is_empty() && again.problems.is_empty(),
        "{again:#?}"
    );
}

#[test]
fn shared_records_union_targets_and_the_last_owner_deletes() {
    let mut zone = ZoneRecords::new();
    let mine = [a(HOST, &["192.0.2.1"])];
    let theirs = [a(HOST, &["192.0.2.2"])];
    publish(&mut zone, "owner-a", &mine, None);
    publish(&mut zone, "owner-b", &theirs, None);
    assert_eq!(records_only(&zone), [a(HOST, &["192.0.2.1", "192.0.2.2"])]);

    publish(&mut zone, "owner-a", &[], Some(&mine));
    assert_eq!(
        records_only(&zone),
        [a(HOST, &["192.0.2.2"])],
        "a leaving owner takes only its own targets"
    );
    publish(&mut zone, "owner-b", &[], Some(&theirs));
    assert!(
        zone.is_empty(),
        "the last owner deletes the record and every ownership record is gone: {zone:#?}"
    );
}

#[test]
fn records_nobody_owns_and_records_of_others_are_never_changed() {
    let mut zone = ZoneRecords::new();
    let hand_made = a(HOST, &["198.51.100.1"]);
    zone.insert(hand_made.key(), hand_made.clone());
    publish(
        &mut zone,
        "owner-b",
        &[a("other.example.com", &["192.0.2.9"])],
        None,
    );
    let before = zone.clone();

    let problems = publish(&mut zone, "owner-a", &[a(HOST, &["192.0.2.1"])], None);
    assert_eq!(problems, [Problem::Unowned(hand_made.key())]);
    assert_eq!(
        zone, before,
        "neither the unowned record nor owner-b's changed"
    );
    assert!(problems[0].to_string().contains("not owned by Meridian"));
}

#[test]
fn a_sole_owner_changes_record_type_in_one_batch() {
    let mut zone = ZoneRecords::new();
    let simple = [a(HOST, &["192.0.2.1"])];
    publish(&mut zone, "owner-a", &simple, None);
    let loadbalanced = [
        cname(HOST, "klb.api.example.com", 300),
        a("klb.api.example.com", &["192.0.2.1"]),
    ];
    let planned = plan(
        &PlanInput {
            owner: "owner-a",
            root_host: HOST,
            desired: &loadbalanced,
            previous: Some(&simple),
        },
        &zone_of(&zone),
    );
    assert!(
        planned
            .changes
            .deletes
            .iter()
            .any(|r| r.key() == simple[0].key()),
        "the A record is deleted"
    );
    assert!(
        planned
            .changes
            .creates
            .iter()
            .any(|r| r.key() == loadbalanced[0].key()),
        "the CNAME is created in the same batch"
    );
    apply_strictly(&mut zone, &planned.changes).unwrap();
    assert_eq!(records_only(&zone).len(), 2);
}

#[test]
fn a_type_change_on_a_shared_name_is_refused() {
    let mut zone = ZoneRecords::new();
    publish(&mut zone, "owner-a", &[a(HOST, &["192.0.2.1"])], None);
    publish(&mut zone, "owner-b", &[a(HOST, &["192.0.2.2"])], None);
    let problems = publish(
        &mut zone,
        "owner-a",
        &[cname(HOST, "lb.example.net", 300)],
        Some(&[a(HOST, &["192.0.2.1"])]),
    );
    assert!(
        problems.iter().any(|p| matches!(
            p,
            Problem::TypeConflict {
                existing: RecordType::A,
                ..
            }
        )),
        "{problems:?}"
    );
    // owner-a's address leaves the shared record; owner-b's record is not replaced by a CNAME.
    assert_eq!(records_only(&zone), [a(HOST, &["192.0.2.2"])]);
}

#[test]
fn value_conflicts_between_owners_keep_the_published_value() {
    let mut zone = ZoneRecords::new();
    let catch_all = |target: &str| {
        cname("klb.api.example.com", target, 300)
            .with_set_identifier("default")
            .with_property("geo-code", "*")
    };
    publish(
        &mut zone,
        "owner-a",
        &[
            catch_all("ie.klb.api.example.com"),
            a("ie.klb.api.example.com", &["192.0.2.1"]),
        ],
        None,
    );
    let problems = publish(
        &mut zone,
        "owner-b",
        &[
            catch_all("us.klb.api.example.com"),
            a("us.klb.api.example.com", &["192.0.2.2"]),
        ],
        None,
    );
    assert!(
        problems.iter().any(|p| matches!(
            p,
            Problem::ValueConflict {
                field: "target",
                ..
            }
        )),
        "{problems:?}"
    );
    let published = zone.get(&catch_all("x").key()).unwrap();
    assert_eq!(
        published.targets,
        ["ie.klb.api.example.com"],
        "not fought over"
    );

    let problems = publish(
        &mut zone,
        "owner-b",
        &[Endpoint {
            record_ttl: 30,
            ..a("ie.klb.api.example.com", &["192.0.2.3"])
        }],
        None,
    );
    assert!(
        problems
            .iter()
            .any(|p| matches!(p, Problem::ValueConflict { field: "TTL", .. })),
        "{problems:?}"
    );
    let shared = zone.get(&a("ie.klb.api.example.com", &[]).key()).unwrap();
    assert_eq!(
        (shared.record_ttl, shared.targets.len()),
        (60, 2),
        "targets unioned, TTL kept"
    );
}

#[test]
fn a_cname_inside_the_root_host_pointing_at_nothing_is_refused() {
    let mut zone = ZoneRecords::new();
    let problems = publish(
        &mut zone,
        "owner-a",
        &[cname(HOST, "klb.api.example.com", 300)],
        None,
    );
    assert!(
        matches!(&problems[..], [Problem::DanglingCname { target, .. }] if target == "klb.api.example.com"),
        "{problems:?}"
    );
    assert!(zone.is_empty());
    // Outside the root host a CNAME may point anywhere.
    assert!(
        publish(
            &mut zone,
            "owner-a",
            &[cname(HOST, "lb.example.net", 300)],
            None
        )
        .is_empty()
    );
}

// --- properties -----------------------------------------------------------------------------

fn gateway() -> GatewayRef {
    GatewayRef {
        name: "prod-web".into(),
        namespace: "gateways".into(),
    }
}

const GEOS: [Option<&str>; 4] = [Some("IE"), Some("US"), Some("GEO-EU"), None];

prop_compose! {
    fn arb_cluster(index: usize)(
        geo in 0..GEOS.len(),
        ips in prop::collection::btree_set(1u8..20, 1..3),
        v6 in any::<bool>(),
        hostname in any::<bool>(),
        routes in prop::option::of(0u32..3),
    ) -> ClusterTarget {
        let mut addresses: Vec<Address> = ips.iter().map(|o| Address::parse(None, &format!("10.{index}.0.{o}")).unwrap()).collect();
        if v6 {
            addresses.push(Address::parse(None, &format!("2001:db8::{index}")).unwrap());
        }
        if hostname {
            addresses.push(Address::parse(Some("Hostname"), &format!("lb-{index}.example.net")).unwrap());
        }
        ClusterTarget {
            name: format!("cluster-{index}"),
            cluster_id: format!("uid-{index}"),
            labels: GEOS[geo].map(|g| ("kuadrant.io/lb-attribute-geo-code".to_string(), g.to_string())).into_iter().collect(),
            addresses,
            attached_routes: routes,
            weight_percent: 100,
        }
    }
}

fn arb_clusters() -> impl Strategy<Value = Vec<ClusterTarget>> {
    (1usize..6).prop_flat_map(|n| (0..n).map(arb_cluster).collect::<Vec<_>>())
}

fn arb_policy() -> impl Strategy<Value = TreeStrategy> {
    (0u32..200, prop::option::of(0..3usize)).prop_map(|(default_weight, geo)| {
        TreeStrategy::LoadBalanced(LoadBalancing {
            default_weight,
            custom: Vec::new(),
            default_geo: geo.and_then(|g| GEOS[g].map(String::from)),
            tiers: None,
        })
    })
}

fn tree(strategy: &TreeStrategy, clusters: &[ClusterTarget]) -> Vec<Endpoint> {
    build_record_tree(HOST, &gateway(), strategy, clusters)
        .expect("valid input")
        .endpoints()
}

/// Every CNAME inside the root host points at a record.
fn dangling(zone: &ZoneRecords) -> Vec<String> {
    let names: BTreeSet<&str> = zone.keys().map(|k| k.dns_name.as_str()).collect();
    zone.values()
        .filter(|r| r.record_type == RecordType::Cname && is_at_or_below(&r.targets[0], HOST))
        .filter(|r| !names.contains(r.targets[0].as_str()))
        .map(|r| format!("{} → {}", r.dns_name, r.targets[0]))
        .collect()
}

/// The union of owners' records: same key, targets unioned.
fn union(sets: &[Vec<Endpoint>]) -> Vec<Endpoint> {
    let mut merged: BTreeMap<RecordKey, Endpoint> = BTreeMap::new();
    for record in sets.iter().flatten() {
        merged
            .entry(record.key())
            .and_modify(|existing| {
                existing.targets.extend(record.targets.iter().cloned());
                existing.normalize();
            })
            .or_insert_with(|| record.clone());
    }
    merged.into_values().collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn the_tree_is_deterministic_and_independent_of_cluster_order(
        (clusters, shuffled) in arb_clusters().prop_flat_map(|c| (Just(c.clone()), Just(c).prop_shuffle())),
        policy in arb_policy(),
    ) {
        let first = tree(&policy, &clusters);
        prop_assert_eq!(&first, &tree(&policy, &clusters));
        prop_assert_eq!(&first, &tree(&policy, &shuffled));
    }

    #[test]
    fn replanning_what_was_applied_changes_nothing(clusters in arb_clusters(), policy in arb_policy()) {
        let desired = tree(&policy, &clusters);
        let mut zone = ZoneRecords::new();
        prop_assert!(publish(&mut zone, "owner-a", &desired, None).is_empty());
        let again = plan(&PlanInput { owner: "owner-a", root_host: HOST, desired: &desired, previous: Some(&desired) }, &zone_of(&zone));
        prop_assert!(again.changes.is_empty(), "{:#?}", again.changes);
        prop_assert!(dangling(&zone).is_empty(), "{:?}", dangling(&zone));
        prop_assert_eq!(records_only(&zone), desired);
    }

    #[test]
    fn other_owners_and_unowned_records_are_never_changed(
        clusters in arb_clusters(),
        policy in arb_policy(),
        theirs in arb_clusters(),
    ) {
        let mut zone = ZoneRecords::new();
        let other_host = build_record_tree("other.example.com", &gateway(), &TreeStrategy::LoadBalanced(LoadBalancing { default_weight: 1, custom: Vec::new(), default_geo: None, tiers: None }), &theirs).unwrap().endpoints();
        let input = PlanInput { owner: "owner-b", root_host: "other.example.com", desired: &other_host, previous: None };
        apply_strictly(&mut zone, &plan(&input, &[]).changes).unwrap();
        let unowned = a("legacy.api.example.com", &["198.51.100.7"]);
        zone.insert(unowned.key(), unowned.clone());
        let before: Vec<Endpoint> = zone.values().cloned().collect();

        let desired = tree(&policy, &clusters);
        publish(&mut zone, "owner-a", &desired, None);
        publish(&mut zone, "owner-a", &[], Some(&desired));
        prop_assert_eq!(zone.values().cloned().collect::<Vec<_>>(), before);
    }

    #[test]
    fn planning_against_the_hosts_records_is_planning_against_the_zone(
        clusters in arb_clusters(),
        next in arb_clusters(),
        policy in arb_policy(),
        theirs in arb_clusters(),
    ) {
        let mut zone = ZoneRecords::new();
        // Beside the host: a host whose name ends like it, a wildcard, and records nobody owns
        // inside and outside it.
        for other in ["xapi.example.com", "*.apps.example.com"] {
            let records = build_record_tree(other, &gateway(), &TreeStrategy::LoadBalanced(LoadBalancing { default_weight: 1, custom: Vec::new(), default_geo: None, tiers: None }), &theirs).unwrap().endpoints();
            apply_strictly(&mut zone, &plan(&PlanInput { owner: "owner-b", root_host: other, desired: &records, previous: None }, &[]).changes).unwrap();
        }
        for unowned in [a("legacy.api.example.com", &["198.51.100.7"]), a("example.com", &["198.51.100.8"])] {
            zone.insert(unowned.key(), unowned);
        }
        let desired = tree(&policy, &clusters);
        publish(&mut zone, "owner-a", &desired, None);
        let whole = zone_of(&zone);
        let scoped = host_records(&whole, HOST);
        prop_assert!(scoped.iter().all(|r| !r.dns_name.contains("xapi") && !r.dns_name.contains("apps")));
        let changed = tree(&policy, &next);
        let input = PlanInput { owner: "owner-a", root_host: HOST, desired: &changed, previous: Some(&desired) };
        let (from_zone, from_host) = (plan(&input, &whole), plan(&input, &scoped));
        prop_assert_eq!(from_zone.changes, from_host.changes);
        prop_assert_eq!(from_zone.problems, from_host.problems);
    }

    #[test]
    fn owners_joining_and_leaving_converge_to_the_union_and_leave_nothing(
        clusters in prop::collection::vec(arb_cluster(0), 2..5),
        simple in any::<bool>(),
        operations in prop::collection::vec((0usize..4, any::<bool>()), 1..12),
    ) {
        // Distributed mode: every cluster is an owner publishing its own branch of one host.
        let clusters: Vec<ClusterTarget> = clusters.into_iter().enumerate().map(|(i, mut c)| {
            c.cluster_id = format!("uid-{i}");
            c.name = format!("cluster-{i}");
            c.attached_routes = None;
            c.addresses.retain(|a| matches!(a, Address::Ip(_)));
            c.addresses = c.addresses.into_iter().map(|a| Address::parse(None, &a.value().replace("10.0.", &format!("10.{i}."))).unwrap()).collect();
            c
        }).collect();
        let strategy = if simple { TreeStrategy::Simple } else { TreeStrategy::LoadBalanced(LoadBalancing { default_weight: 120, custom: Vec::new(), default_geo: None, tiers: None }) };
        let branch = |i: usize| tree(&strategy, &clusters[i..=i]);
        let mut zone = ZoneRecords::new();
        let mut published: BTreeMap<usize, Vec<Endpoint>> = BTreeMap::new();
        for (index, join) in operations {
            let owner = index % clusters.len();
            let previous = published.get(&owner).cloned();
            let desired = if join { branch(owner) } else { Vec::new() };
            publish(&mut zone, &format!("uid-{owner}"), &desired, previous.as_deref());
            if join { published.insert(owner, desired); } else { published.remove(&owner); }
        }
        // Settle: every remaining owner reconciles until nothing changes.
        for _ in 0..3 {
            for (owner, desired) in &published {
                publish(&mut zone, &format!("uid-{owner}"), desired, Some(desired));
            }
        }
        let expected = union(&published.values().cloned().collect::<Vec<_>>());
        prop_assert_eq!(records_only(&zone), expected);
        prop_assert!(dangling(&zone).is_empty());
        for (owner, desired) in published.clone() {
            publish(&mut zone, &format!("uid-{owner}"), &[], Some(&desired));
        }
        prop_assert!(zone.is_empty(), "all owners left: {:#?}", zone);
    }

    #[test]
    fn an_adopted_tree_is_the_new_owners_to_the_last_record_and_answers_as_before(
        clusters in arb_clusters(),
        policy in arb_policy(),
        theirs in arb_clusters(),
    ) {
        // The record's records under its UID (an earlier hub), a neighbour's host beside it.
        let mut zone = ZoneRecords::new();
        let other_host = build_record_tree("other.example.com", &gateway(), &TreeStrategy::LoadBalanced(LoadBalancing { default_weight: 1, custom: Vec::new(), default_geo: None, tiers: None }), &theirs).unwrap().endpoints();
        apply_strictly(&mut zone, &plan(&PlanInput { owner: "owner-b", root_host: "other.example.com", desired: &other_host, previous: None }, &[]).changes).unwrap();
        let desired = tree(&policy, &clusters);
        publish(&mut zone, "uid-1", &desired, None);
        let records_before = records_only(&zone);
        let neighbour_before: Vec<Endpoint> = zone.values().filter(|r| r.dns_name.contains("other.example.com")).cloned().collect();

        let adopted = adoption(&zone_of(&zone), &["uid-1", "not-here"], "hub/team/api", HOST);
        apply_strictly(&mut zone, &adopted.changes).unwrap_or_else(|e| panic!("the adoption was rejected: {e}"));
        prop_assert_eq!(zone_of(&zone).into_iter().collect::<BTreeSet<_>>(), adopted.zone.iter().cloned().collect::<BTreeSet<_>>(), "the zone after is what the adoption says");
        prop_assert!(adopted.changes.updates.is_empty());
        prop_assert!(adopted.changes.creates.iter().chain(&adopted.changes.deletes).all(|r| r.record_type == RecordType::Txt && r.dns_name.starts_with("kuadrant-")));
        prop_assert_eq!(records_only(&zone), records_before, "no answer changed");
        prop_assert_eq!(zone.values().filter(|r| r.dns_name.contains("other.example.com")).cloned().collect::<Vec<_>>(), neighbour_before);
        let registry = Registry::read(&zone_of(&zone));
        for (key, owners) in &registry.ownership {
            if is_at_or_below(&key.dns_name, HOST) {
                prop_assert_eq!(owners.keys().collect::<Vec<_>>(), [&"hub/team/api".to_string()], "{:?}", key);
            }
        }
        // The new owner finds its own tree: nothing to change, and withdrawing leaves nothing.
        let again = plan(&PlanInput { owner: "hub/team/api", root_host: HOST, desired: &desired, previous: None }, &zone_of(&zone));
        prop_assert!(again.changes.is_empty() && again.problems.is_empty(), "{:#?}", again);
        publish(&mut zone, "hub/team/api", &[], Some(&desired));
        prop_assert!(zone.values().all(|r| r.dns_name.contains("other.example.com")), "{:#?}", zone);
        // Adopting twice changes nothing the second time.
        prop_assert!(adoption(&zone_of(&zone), &["uid-1"], "hub/team/api", HOST).changes.is_empty());
    }
}

#[test]
fn external_dns_registry_records_name_their_owner_with_any_affix() {
    // (external-dns's TXT name for shop.example.com's A record, whether it claims the record)
    let table = [
        ("a-shop.example.com", true),      // 0.18 and later, no affix
        ("shop.example.com", true),        // before 0.18: the record's own name
        ("edns-a-shop.example.com", true), // --txt-prefix=edns-
        ("edns-a.shop.example.com", true), // --txt-prefix=edns-%{record_type}.
        ("a-shop-edns.example.com", true), // --txt-suffix=-edns
        ("a-shop.edns.example.com", true), // --txt-suffix=.edns
        ("a-shopping.example.com", false), // ambiguous: only the wording of a refusal
        ("a-other.example.com", false),
        ("a-shop.example.org", false),
    ];
    for (txt_name, claims) in table {
        let mut zone = ZoneRecords::new();
        let theirs = a("shop.example.com", &["198.51.100.7"]);
        let registry_record = Endpoint::new(
            txt_name,
            RecordType::Txt,
            ["\"heritage=external-dns,external-dns/owner=edns,external-dns/resource=service/default/shop\"".to_string()],
            300,
        );
        for record in [&theirs, &registry_record] {
            zone.insert(record.key(), record.clone());
        }
        let before = zone.clone();
        let desired = [a("shop.example.com", &["192.0.2.1"])];
        let planned = plan(
            &PlanInput {
                owner: "owner-a",
                root_host: "shop.example.com",
                desired: &desired,
                previous: None,
            },
            &host_records(zone.values(), "shop.example.com"),
        );
        assert!(planned.changes.is_empty(), "{txt_name}: {planned:#?}");
        let expected = if claims {
            Problem::OwnedElsewhere {
                key: theirs.key(),
                owner: "edns".into(),
                txt_name: txt_name.into(),
            }
        } else {
            Problem::Unowned(theirs.key())
        };
        assert_eq!(planned.problems, [expected], "{txt_name}");
        assert_eq!(zone, before);
    }
}

#[test]
fn a_record_that_lost_only_its_ownership_record_is_vouched_for_again() {
    let mut zone = ZoneRecords::new();
    let mine = [a(HOST, &["192.0.2.1"])];
    publish(&mut zone, "owner-a", &mine, None);
    let txt_name = ownership_txt_name("owner-a", RecordType::A, HOST);
    zone.retain(|_, r| r.dns_name != txt_name);

    // Exactly what it published: its ownership record comes back, nothing else changes.
    let mut repaired = zone.clone();
    assert_eq!(publish(&mut repaired, "owner-a", &mine, Some(&mine)), []);
    assert!(repaired.values().any(|r| r.dns_name == txt_name));
    assert_eq!(records_only(&repaired), records_only(&zone));

    // Changed meanwhile, or with nothing known of what it published: nobody's, left alone.
    let mut edited = zone.clone();
    edited.insert(mine[0].key(), a(HOST, &["198.51.100.1"]));
    let before = edited.clone();
    assert_eq!(
        publish(&mut edited, "owner-a", &mine, Some(&mine)),
        [Problem::Unowned(mine[0].key())]
    );
    assert_eq!(edited, before);
    let mut unknown = zone.clone();
    assert_eq!(
        publish(&mut unknown, "owner-a", &mine, None),
        [Problem::Unowned(mine[0].key())]
    );
}

#[test]
fn adoption_moves_only_the_earlier_owners_claims_and_drops_its_orphans() {
    let host = cname(HOST, "klb.api.example.com", 300);
    let klb = a("klb.api.example.com", &["192.0.2.1"]);
    let mut zone = ZoneRecords::new();
    publish(&mut zone, "uid-1", &[host.clone(), klb.clone()], None);
    // The new owner already vouches for klb (a pass that published before adopting); a
    // neighbour shares klb; an earlier owner's claim on a record gone; a record outside.
    let mut shared_zone = zone_of(&zone);
    shared_zone.push(meridian_dns::plan::ownership_record("hub/team/api", &klb));
    shared_zone.push(meridian_dns::plan::ownership_record("neighbour", &klb));
    let gone = a("gone.api.example.com", &["192.0.2.9"]);
    shared_zone.push(meridian_dns::plan::ownership_record("uid-1", &gone));
    let outside = a("www.example.com", &["192.0.2.7"]);
    shared_zone.push(outside.clone());
    shared_zone.push(meridian_dns::plan::ownership_record("uid-1", &outside));

    let adopted = adoption(&shared_zone, &["uid-1"], "hub/team/api", HOST);
    let names = |records: &[Endpoint]| {
        let mut names: Vec<String> = records.iter().map(|r| r.dns_name.clone()).collect();
        names.sort();
        names
    };
    let mut deleted = vec![
        ownership_txt_name("uid-1", RecordType::Cname, HOST),
        ownership_txt_name("uid-1", RecordType::A, "klb.api.example.com"),
        ownership_txt_name("uid-1", RecordType::A, "gone.api.example.com"),
    ];
    deleted.sort();
    assert_eq!(names(&adopted.changes.deletes), deleted);
    assert_eq!(
        names(&adopted.changes.creates),
        [ownership_txt_name("hub/team/api", RecordType::Cname, HOST)],
        "only the claim the new owner lacked on a record that exists"
    );
    assert_eq!(
        adopted.changes.creates[0].targets,
        ["heritage=external-dns,external-dns/owner=hub/team/api,external-dns/version=1"]
    );
    let registry = Registry::read(&adopted.zone);
    assert_eq!(
        registry.owners(&klb.key()),
        BTreeSet::from(["hub/team/api", "neighbour"])
    );
    assert_eq!(registry.owners(&outside.key()), BTreeSet::from(["uid-1"]));
    // Nothing of an owner not named moves.
    assert!(
        adoption(&shared_zone, &["uid-2"], "hub/team/api", HOST)
            .changes
            .is_empty()
    );
}

#[test]
fn adoption_keeps_a_wildcard_an_earlier_owner_spelt_the_dns_operator_way() {
    // dns-operator names the ownership record of `*.apps.example.com`
    // `kuadrant-<code>-cname-wildcard.apps.example.com`.
    let wildcard = cname("*.apps.example.com", "klb.apps.example.com", 300);
    let mut claim = meridian_dns::plan::ownership_record("earlier", &wildcard);
    claim.dns_name = claim.dns_name.replace("*.apps", "wildcard.apps");
    let zone = vec![wildcard.clone(), claim.clone()];
    let adopted = adoption(&zone, &["earlier"], "hub/abc", "*.apps.example.com");
    assert_eq!(adopted.changes.deletes, [claim]);
    assert_eq!(
        adopted
            .changes
            .creates
            .iter()
            .map(|r| r.dns_name.clone())
            .collect::<Vec<_>>(),
        [ownership_txt_name(
            "hub/abc",
            RecordType::Cname,
            "*.apps.example.com"
        )],
        "the wildcard keeps an owner, in Meridian's spelling"
    );
    assert_eq!(
        Registry::read(&adopted.zone).owners(&wildcard.key()),
        BTreeSet::from(["hub/abc"])
    );
}
