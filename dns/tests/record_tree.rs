//! The record tree, checked record by record against the rules of DESIGN.md ("The record
//! tree"). Cluster IDs are chosen so the names use the documented shortcodes:
//! shortcode6("test-cluster-1") = 20qri0, shortcode6("TestName-TestNamespace") = a8xcra.

use std::collections::BTreeMap;

use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::tree::{
    Address, ClusterTarget, CustomWeight, GatewayRef, Health, LabelSelector, LoadBalancing, Pruned,
    RecordTree, Strategy, TierRule, Tiers, TreeError, build_branch, build_record_tree,
};
use meridian_testkit::trees::{GEO_LABEL, cluster, weighted};

const C1: &str = "20qri0-a8xcra.klb.api.example.com";
const C2: &str = "2pj3we-a8xcra.klb.api.example.com";
const C3: &str = "336mwr-a8xcra.klb.api.example.com";

fn gateway() -> GatewayRef {
    GatewayRef {
        name: "TestName".into(),
        namespace: "TestNamespace".into(),
    }
}

fn rec(name: &str, record_type: RecordType, targets: &[&str], ttl: u32) -> Endpoint {
    Endpoint::new(
        name,
        record_type,
        targets.iter().map(|t| t.to_string()),
        ttl,
    )
}

fn lb(set: &str, geo_code: &str, target: &str) -> Endpoint {
    rec("klb.api.example.com", RecordType::Cname, &[target], 300)
        .with_set_identifier(set)
        .with_property("geo-code", geo_code)
}

fn geo(geo: &str, target: &str, weight: u32) -> Endpoint {
    rec(
        &format!("{geo}.klb.api.example.com"),
        RecordType::Cname,
        &[target],
        60,
    )
    .with_set_identifier(target)
    .with_property("weight", weight.to_string())
}

fn root() -> Endpoint {
    rec(
        "api.example.com",
        RecordType::Cname,
        &["klb.api.example.com"],
        300,
    )
}

fn build(strategy: Strategy, clusters: &[ClusterTarget]) -> Vec<Endpoint> {
    build_record_tree("api.example.com", &gateway(), &strategy, clusters)
        .unwrap()
        .endpoints()
}

fn sorted(mut endpoints: Vec<Endpoint>) -> Vec<Endpoint> {
    meridian_dns::model::sort_endpoints(&mut endpoints);
    endpoints
}

#[test]
fn weighted_only_puts_every_cluster_in_the_default_geo() {
    let clusters = [
        cluster(1, &[], &["172.31.0.1"]),
        cluster(2, &[], &["172.31.0.2", "172.31.0.3"]),
    ];
    let expected = sorted(vec![
        root(),
        rec(C1, RecordType::A, &["172.31.0.1"], 60),
        rec(C2, RecordType::A, &["172.31.0.2", "172.31.0.3"], 60),
        geo("default", C1, 120),
        geo("default", C2, 120),
        lb("default", "*", "default.klb.api.example.com"),
    ]);
    assert_eq!(
        build(Strategy::LoadBalanced(weighted(120)), &clusters),
        expected
    );
}

#[test]
fn geo_groups_clusters_and_the_catch_all_points_at_the_default_geo() {
    let clusters = [
        cluster(1, &[(GEO_LABEL, "IE")], &["172.31.0.1"]),
        cluster(2, &[(GEO_LABEL, "US")], &["172.31.0.2"]),
        cluster(3, &[], &["172.31.0.3"]), // no label: the default geo
    ];
    let policy = LoadBalancing {
        default_geo: Some("IE".into()),
        ..weighted(120)
    };
    let expected = sorted(vec![
        root(),
        rec(C1, RecordType::A, &["172.31.0.1"], 60),
        rec(C2, RecordType::A, &["172.31.0.2"], 60),
        rec(C3, RecordType::A, &["172.31.0.3"], 60),
        geo("ie", C1, 120),
        geo("ie", C3, 120),
        geo("us", C2, 120),
        lb("IE", "IE", "ie.klb.api.example.com"),
        lb("US", "US", "us.klb.api.example.com"),
        lb("default", "*", "ie.klb.api.example.com"),
    ]);
    assert_eq!(build(Strategy::LoadBalanced(policy), &clusters), expected);
}

#[test]
fn geo_with_custom_weights_first_matching_entry_wins() {
    let clusters = [
        cluster(
            1,
            &[
                (GEO_LABEL, "GEO-EU"),
                ("kuadrant.io/lb-attribute-cloud", "Azure"),
            ],
            &["172.31.0.1"],
        ),
        cluster(
            2,
            &[
                (GEO_LABEL, "GEO-EU"),
                ("kuadrant.io/lb-attribute-custom-weight", "GCP"),
            ],
            &["172.31.0.2"],
        ),
        cluster(
            3,
            &[
                (GEO_LABEL, "GEO-NA"),
                ("kuadrant.io/lb-attribute-cloud", "Azure"),
                ("kuadrant.io/lb-attribute-custom-weight", "GCP"),
            ],
            &["172.31.0.3"],
        ),
    ];
    let azure = LabelSelector {
        match_labels: [("kuadrant.io/lb-attribute-cloud".into(), "Azure".into())].into(),
        ..Default::default()
    };
    let gcp = LabelSelector {
        match_labels: [(
            "kuadrant.io/lb-attribute-custom-weight".into(),
            "GCP".into(),
        )]
        .into(),
        ..Default::default()
    };
    let policy = LoadBalancing {
        default_weight: 10,
        custom: vec![
            CustomWeight {
                selector: azure,
                weight: 30,
            },
            CustomWeight {
                selector: gcp,
                weight: 20,
            },
        ],
        default_geo: Some("GEO-EU".into()),
        tiers: None,
    };
    let expected = sorted(vec![
        root(),
        rec(C1, RecordType::A, &["172.31.0.1"], 60),
        rec(C2, RecordType::A, &["172.31.0.2"], 60),
        rec(C3, RecordType::A, &["172.31.0.3"], 60),
        geo("geo-eu", C1, 30),
        geo("geo-eu", C2, 20),
        geo("geo-na", C3, 30),
        lb("GEO-EU", "GEO-EU", "geo-eu.klb.api.example.com"),
        lb("GEO-NA", "GEO-NA", "geo-na.klb.api.example.com"),
        lb("default", "*", "geo-eu.klb.api.example.com"),
    ]);
    assert_eq!(build(Strategy::LoadBalanced(policy), &clusters), expected);
}

#[test]
fn tiers_put_each_clusters_priority_on_its_weighted_record_within_its_geo() {
    let tiers = Tiers {
        rules: vec![TierRule {
            selector: LabelSelector {
                match_labels: [("kuadrant.io/lb-attribute-tier".into(), "primary".into())].into(),
                ..Default::default()
            },
            priority: 1,
        }],
        default_priority: 1000,
    };
    let policy = LoadBalancing {
        default_geo: Some("IE".into()),
        tiers: Some(tiers),
        ..weighted(120)
    };
    let ie = GEO_LABEL;
    let clusters = [
        cluster(
            1,
            &[(ie, "IE"), ("kuadrant.io/lb-attribute-tier", "primary")],
            &["172.31.0.1"],
        ),
        cluster(2, &[(ie, "IE")], &["172.31.0.2"]),
        cluster(3, &[(ie, "US")], &["172.31.0.3"]),
    ];
    let expected = sorted(vec![
        root(),
        rec(C1, RecordType::A, &["172.31.0.1"], 60),
        rec(C2, RecordType::A, &["172.31.0.2"], 60),
        rec(C3, RecordType::A, &["172.31.0.3"], 60),
        geo("ie", C1, 120).with_property("priority", "1"),
        geo("ie", C2, 120).with_property("priority", "1000"),
        geo("us", C3, 120).with_property("priority", "1000"),
        lb("IE", "IE", "ie.klb.api.example.com"),
        lb("US", "US", "us.klb.api.example.com"),
        lb("default", "*", "ie.klb.api.example.com"),
    ]);
    assert_eq!(
        build(Strategy::LoadBalanced(policy.clone()), &clusters),
        expected
    );
    // Without tiers, the same clusters get the same records without a priority.
    let untiered = build(
        Strategy::LoadBalanced(LoadBalancing {
            tiers: None,
            ..policy
        }),
        &clusters,
    );
    assert!(untiered.iter().all(|e| e.property("priority").is_none()));
    assert_eq!(untiered.len(), expected.len());
}

#[test]
fn an_empty_default_geo_falls_back_to_the_lowest_geo_and_says_so() {
    let clusters = [
        cluster(1, &[(GEO_LABEL, "US")], &["172.31.0.1"]),
        cluster(2, &[(GEO_LABEL, "CA")], &["172.31.0.2"]),
    ];
    let policy = LoadBalancing {
        default_geo: Some("IE".into()),
        ..weighted(120)
    };
    let tree = build_record_tree(
        "api.example.com",
        &gateway(),
        &Strategy::LoadBalanced(policy),
        &clusters,
    )
    .unwrap();
    let catch_all = tree
        .endpoints()
        .into_iter()
        .find(|e| e.set_identifier.as_deref() == Some("default"))
        .unwrap();
    assert_eq!(catch_all.targets, ["ca.klb.api.example.com"]);
    assert_eq!(tree.warnings.len(), 1);
    assert!(
        tree.warnings[0].contains("IE") && tree.warnings[0].contains("CA"),
        "{:?}",
        tree.warnings
    );
}

#[test]
fn wildcard_hosts_keep_the_wildcard_only_at_the_root() {
    let tree = build_record_tree(
        "*.apps.example.com",
        &gateway(),
        &Strategy::LoadBalanced(weighted(120)),
        &[cluster(1, &[], &["172.31.0.1"])],
    )
    .unwrap();
    let names: Vec<(String, RecordType)> = tree
        .endpoints()
        .into_iter()
        .map(|e| (e.dns_name, e.record_type))
        .collect();
    assert_eq!(
        names,
        [
            ("*.apps.example.com".to_string(), RecordType::Cname),
            (
                "20qri0-a8xcra.klb.apps.example.com".to_string(),
                RecordType::A
            ),
            (
                "default.klb.apps.example.com".to_string(),
                RecordType::Cname
            ),
            ("klb.apps.example.com".to_string(), RecordType::Cname),
        ]
    );
}

#[test]
fn hostname_addresses_are_pointed_at_from_the_geo_record() {
    let clusters = [
        cluster(1, &[], &["lb-1.elb.amazonaws.com"]),
        cluster(2, &[], &["172.31.0.2"]),
    ];
    let expected = sorted(vec![
        root(),
        rec(C2, RecordType::A, &["172.31.0.2"], 60),
        geo("default", "lb-1.elb.amazonaws.com", 120),
        geo("default", C2, 120),
        lb("default", "*", "default.klb.api.example.com"),
    ]);
    assert_eq!(
        build(Strategy::LoadBalanced(weighted(120)), &clusters),
        expected
    );
}

#[test]
fn ipv6_addresses_give_aaaa_records_beside_a_records() {
    let clusters = [cluster(1, &[], &["172.31.0.1", "2001:db8::1"])];
    let endpoints = build(Strategy::LoadBalanced(weighted(120)), &clusters);
    let leaves: Vec<&Endpoint> = endpoints.iter().filter(|e| e.dns_name == C1).collect();
    assert_eq!(
        leaves,
        [
            &rec(C1, RecordType::A, &["172.31.0.1"], 60),
            &rec(C1, RecordType::Aaaa, &["2001:db8::1"], 60)
        ]
    );
    assert_eq!(
        endpoints
            .iter()
            .filter(|e| e.dns_name == "default.klb.api.example.com")
            .count(),
        1,
        "one GEO record per cluster"
    );

    let simple = build(Strategy::Simple, &clusters);
    assert_eq!(
        simple,
        [
            rec("api.example.com", RecordType::A, &["172.31.0.1"], 60),
            rec("api.example.com", RecordType::Aaaa, &["2001:db8::1"], 60)
        ]
    );
}

#[test]
fn clusters_without_attached_routes_get_no_records() {
    let mut idle = cluster(2, &[], &["172.31.0.2"]);
    idle.attached_routes = Some(0);
    let mut busy = cluster(1, &[], &["172.31.0.1"]);
    busy.attached_routes = Some(3);
    let endpoints = build(Strategy::LoadBalanced(weighted(120)), &[busy, idle.clone()]);
    assert!(
        endpoints
            .iter()
            .all(|e| !e.dns_name.contains("2pj3we")
                && !e.targets.iter().any(|t| t.contains("2pj3we")))
    );
    assert!(
        build(Strategy::LoadBalanced(weighted(120)), &[idle]).is_empty(),
        "no serving cluster, no records"
    );
}

#[test]
fn simple_publishes_one_record_with_every_address() {
    let clusters = [
        cluster(1, &[], &["172.31.0.1"]),
        cluster(2, &[], &["172.31.0.2"]),
    ];
    assert_eq!(
        build(Strategy::Simple, &clusters),
        [rec(
            "api.example.com",
            RecordType::A,
            &["172.31.0.1", "172.31.0.2"],
            60
        )]
    );
    assert_eq!(
        build(Strategy::Simple, &[cluster(1, &[], &["lb.example.net"])]),
        [rec(
            "api.example.com",
            RecordType::Cname,
            &["lb.example.net"],
            60
        )]
    );
}

#[test]
fn simple_refuses_what_one_record_cannot_hold() {
    let two_hostnames = [
        cluster(1, &[], &["a.example.net"]),
        cluster(2, &[], &["b.example.net"]),
    ];
    let mixed = [
        cluster(1, &[], &["a.example.net"]),
        cluster(2, &[], &["172.31.0.2"]),
    ];
    for (clusters, what) in [
        (&two_hostnames[..], "two hostnames"),
        (&mixed[..], "IPs and a hostname"),
    ] {
        let error = build_record_tree("api.example.com", &gateway(), &Strategy::Simple, clusters)
            .unwrap_err();
        assert!(
            matches!(
                error,
                TreeError::SimpleMultipleHostnames { .. } | TreeError::SimpleMixedAddresses { .. }
            ),
            "{what}: {error}"
        );
        assert!(
            error.to_string().contains("loadbalanced"),
            "the error says what to do: {error}"
        );
    }
}

#[test]
fn invalid_addresses_are_errors_not_panics() {
    assert!(Address::parse(Some("IPAddress"), "300.1.1.1").is_err());
    assert!(Address::parse(Some("NamedAddress"), "x").is_err());
    assert!(Address::parse(Some("Hostname"), "").is_err());
}

fn pruned(strategy: Strategy, clusters: &[ClusterTarget], health: &[(&str, Health)]) -> Pruned {
    let tree = build_record_tree("api.example.com", &gateway(), &strategy, clusters).unwrap();
    let health: BTreeMap<String, Health> =
        health.iter().map(|(a, h)| (a.to_string(), *h)).collect();
    tree.prune(&health)
}

#[test]
fn pruning_removes_unhealthy_leaves_and_their_childless_parents() {
    let clusters = [
        cluster(1, &[(GEO_LABEL, "IE")], &["172.31.0.1"]),
        cluster(2, &[(GEO_LABEL, "US")], &["172.31.0.2"]),
        cluster(3, &[(GEO_LABEL, "US")], &["172.31.0.3", "172.31.0.4"]),
    ];
    let policy = Strategy::LoadBalanced(LoadBalancing {
        default_geo: Some("IE".into()),
        ..weighted(120)
    });
    let Pruned::Endpoints(endpoints) = pruned(
        policy,
        &clusters,
        &[
            ("172.31.0.1", Health::Unhealthy),
            ("172.31.0.3", Health::Unhealthy),
            ("172.31.0.4", Health::Unknown),
        ],
    ) else {
        panic!("some leaves are healthy");
    };
    let expected = sorted(vec![
        root(),
        rec(C2, RecordType::A, &["172.31.0.2"], 60),
        rec(C3, RecordType::A, &["172.31.0.4"], 60),
        geo("us", C2, 120),
        geo("us", C3, 120),
        lb("US", "US", "us.klb.api.example.com"),
        lb("default", "*", "us.klb.api.example.com"),
    ]);
    // IE lost its only cluster: its GEO record and its lb record go, and the catch-all that
    // pointed at it answers with US, so clients from IE and from anywhere else still get one.
    assert_eq!(endpoints, expected);
}

#[test]
fn pruning_with_no_healthy_leaf_keeps_what_was_published() {
    let clusters = [
        cluster(1, &[], &["172.31.0.1"]),
        cluster(2, &[], &["lb.example.net"]),
    ];
    let all_down = [
        ("172.31.0.1", Health::Unhealthy),
        ("lb.example.net", Health::Unhealthy),
    ];
    assert_eq!(
        pruned(Strategy::LoadBalanced(weighted(120)), &clusters, &all_down),
        Pruned::NoHealthyLeaf
    );
    let simple = [cluster(1, &[], &["172.31.0.1"])];
    assert_eq!(
        pruned(
            Strategy::Simple,
            &simple,
            &[("172.31.0.1", Health::Unhealthy)]
        ),
        Pruned::NoHealthyLeaf
    );
}

#[test]
fn pruning_an_unhealthy_hostname_removes_its_geo_record() {
    let clusters = [
        cluster(1, &[], &["lb.example.net"]),
        cluster(2, &[], &["172.31.0.2"]),
    ];
    let Pruned::Endpoints(endpoints) = pruned(
        Strategy::LoadBalanced(weighted(120)),
        &clusters,
        &[("lb.example.net", Health::Unhealthy)],
    ) else {
        panic!("cluster 2 is healthy");
    };
    assert!(endpoints.iter().all(|e| e.targets != ["lb.example.net"]));
    assert_eq!(endpoints.len(), 4);
}

#[test]
fn a_tree_rebuilt_from_its_records_has_the_same_leaves_and_prunes_the_same() {
    let clusters = [
        cluster(1, &[(GEO_LABEL, "IE")], &["172.31.0.1"]),
        cluster(2, &[(GEO_LABEL, "US")], &["lb.example.net"]),
        cluster(3, &[(GEO_LABEL, "US")], &["172.31.0.3", "172.31.0.1"]),
    ];
    let policy = Strategy::LoadBalanced(weighted(120));
    let built = build_record_tree("api.example.com", &gateway(), &policy, &clusters).unwrap();
    let rebuilt = RecordTree::from_records("api.example.com", built.endpoints());
    assert_eq!(
        rebuilt.leaf_addresses(),
        ["172.31.0.1", "172.31.0.3", "lb.example.net"],
        "every address once, hostnames included"
    );
    for down in ["172.31.0.1", "172.31.0.3", "lb.example.net"] {
        let health = BTreeMap::from([(down.to_string(), Health::Unhealthy)]);
        assert_eq!(rebuilt.prune(&health), built.prune(&health), "{down} down");
    }
    let simple = build_record_tree(
        "api.example.com",
        &gateway(),
        &Strategy::Simple,
        &clusters[..1],
    )
    .unwrap();
    assert_eq!(
        RecordTree::from_records("api.example.com", simple.endpoints()).leaf_addresses(),
        ["172.31.0.1"]
    );
}

#[test]
fn branches_add_up_to_the_whole_tree_and_keep_the_configured_catch_all() {
    let clusters = [
        cluster(1, &[(GEO_LABEL, "IE")], &["172.31.0.1"]),
        cluster(2, &[(GEO_LABEL, "US")], &["172.31.0.2"]),
        cluster(3, &[(GEO_LABEL, "US")], &["172.31.0.3"]),
    ];
    let policy = Strategy::LoadBalanced(LoadBalancing {
        default_geo: Some("IE".into()),
        ..weighted(120)
    });
    let whole = build_record_tree("api.example.com", &gateway(), &policy, &clusters).unwrap();
    let mut union: Vec<Endpoint> = Vec::new();
    for one in &clusters {
        let branch = build_branch(
            "api.example.com",
            &gateway(),
            &policy,
            std::slice::from_ref(one),
        )
        .unwrap();
        assert!(branch.warnings.is_empty(), "{:?}", branch.warnings);
        let catch_all = branch
            .endpoints()
            .into_iter()
            .find(|e| e.set_identifier.as_deref() == Some("default"))
            .unwrap();
        assert_eq!(
            catch_all.targets,
            ["ie.klb.api.example.com"],
            "even in a US branch"
        );
        for endpoint in branch.endpoints() {
            if !union.contains(&endpoint) {
                union.push(endpoint);
            }
        }
    }
    meridian_dns::model::sort_endpoints(&mut union);
    assert_eq!(
        union,
        whole.endpoints(),
        "endpoints() is sorted the same way"
    );
}

#[test]
fn renders_text_and_dot() {
    let clusters = [cluster(1, &[(GEO_LABEL, "IE")], &["172.31.0.1"])];
    let policy = Strategy::LoadBalanced(LoadBalancing {
        default_geo: Some("IE".into()),
        ..weighted(120)
    });
    let tree = build_record_tree("api.example.com", &gateway(), &policy, &clusters).unwrap();
    let text = tree.render_text();
    assert!(
        text.starts_with("api.example.com CNAME [ttl=300]\n"),
        "{text}"
    );
    assert!(
        text.contains("└─ 20qri0-a8xcra.klb.api.example.com A 172.31.0.1 [ttl=60]"),
        "{text}"
    );
    let dot = tree.render_dot();
    assert!(dot.starts_with("digraph \"api.example.com\" {"), "{dot}");
    // root → 2 lb records, each lb record → the IE GEO record, the GEO record → the A record.
    assert_eq!(dot.matches(" -> ").count(), 5, "{dot}");
}

#[test]
fn a_policy_ttl_reaches_every_record_a_failover_changes_but_the_host_cname() {
    let clusters = [
        cluster(1, &[(GEO_LABEL, "IE")], &["172.31.0.1"]),
        cluster(2, &[(GEO_LABEL, "US")], &["172.31.0.2"]),
    ];
    let strategy = Strategy::LoadBalanced(LoadBalancing {
        default_geo: Some("IE".into()),
        ..weighted(120)
    });
    let mut endpoints = build(strategy, &clusters);
    meridian_dns::tree::set_answer_ttl(&mut endpoints, "api.example.com", 5);
    for endpoint in &endpoints {
        let expected = if endpoint == &root() { 300 } else { 5 };
        assert_eq!(endpoint.record_ttl, expected, "{endpoint:?}");
    }
    // The weighted choices, the GEO choices and the catch-all are all among them.
    assert_eq!(endpoints.iter().filter(|e| e.record_ttl == 5).count(), 7);

    // With `simple`, the host's own record is the leaf: it changes with health too.
    let mut simple = build(Strategy::Simple, &clusters);
    meridian_dns::tree::set_answer_ttl(&mut simple, "api.example.com", 5);
    assert_eq!(
        simple,
        vec![rec(
            "api.example.com",
            RecordType::A,
            &["172.31.0.1", "172.31.0.2"],
            5
        )]
    );
}
