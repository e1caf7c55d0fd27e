//! `make bench-engine`: the engine at fleet scale on one core. 10,000 hosts, each served by 10
//! clusters in 3 geos: build every record tree, plan against an empty zone, apply, then plan
//! against the converged zone (which must change nothing). Prints wall time per phase and the
//! process's peak memory. Timings are for comparison between runs on one machine, not targets.

use std::collections::BTreeMap;
use std::time::Instant;

use meridian_dns::changes::{ZoneRecords, apply_strictly};
use meridian_dns::model::Endpoint;
use meridian_dns::plan::{PlanInput, plan};
use meridian_dns::tree::{
    Address, ClusterTarget, CustomWeight, GatewayRef, LabelSelector, LoadBalancing, Strategy,
    build_record_tree,
};

const HOSTS: usize = 10_000;
const CLUSTERS: usize = 10;
const GEOS: [&str; 3] = ["IE", "US", "GEO-AS"];
const OWNER: &str = "bench-hub";

fn main() {
    let hosts: usize = std::env::args()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(HOSTS);
    let gateway = GatewayRef {
        name: "prod-web".into(),
        namespace: "gateways".into(),
    };
    let clusters: Vec<ClusterTarget> = (0..CLUSTERS)
        .map(|i| ClusterTarget {
            name: format!("cluster-{i}"),
            cluster_id: format!("6f1c2a9e-0000-4000-8000-{i:012}"),
            labels: [
                (
                    "kuadrant.io/lb-attribute-geo-code".to_string(),
                    GEOS[i % GEOS.len()].to_string(),
                ),
                (
                    "kuadrant.io/lb-attribute-custom-weight".to_string(),
                    if i % 2 == 0 { "AWS" } else { "GCP" }.to_string(),
                ),
            ]
            .into(),
            addresses: vec![Address::parse(None, &format!("10.0.{i}.1")).unwrap()],
            attached_routes: Some(1),
            weight_percent: 100,
        })
        .collect();
    let aws = LabelSelector {
        match_labels: [(
            "kuadrant.io/lb-attribute-custom-weight".into(),
            "AWS".into(),
        )]
        .into(),
        ..Default::default()
    };
    let strategy = Strategy::LoadBalanced(LoadBalancing {
        default_weight: 120,
        custom: vec![CustomWeight {
            selector: aws,
            weight: 200,
        }],
        default_geo: Some("IE".into()),
        tiers: None,
    });
    let host_names: Vec<String> = (0..hosts)
        .map(|i| format!("app-{i}.apps.example.com"))
        .collect();

    let started = Instant::now();
    let desired: Vec<Vec<Endpoint>> = host_names
        .iter()
        .map(|host| {
            build_record_tree(host, &gateway, &strategy, &clusters)
                .expect("valid tree")
                .endpoints()
        })
        .collect();
    let build_time = started.elapsed();
    let records: usize = desired.iter().map(Vec::len).sum();

    // Each host's records live under its own name, and a controller reads only those: the zone is
    // kept per host, as a provider's name-filtered read would return it.
    let mut zones: BTreeMap<&str, ZoneRecords> = BTreeMap::new();
    let started = Instant::now();
    let mut first_changes = 0;
    let mut plans = Vec::with_capacity(hosts);
    for (host, desired) in host_names.iter().zip(&desired) {
        let planned = plan(
            &PlanInput {
                owner: OWNER,
                root_host: host,
                desired,
                previous: None,
            },
            &[],
        );
        assert!(planned.problems.is_empty(), "{:?}", planned.problems);
        first_changes += planned.changes.len();
        plans.push(planned);
    }
    let empty_plan_time = started.elapsed();
    for ((host, planned), _) in host_names.iter().zip(&plans).zip(&desired) {
        apply_strictly(zones.entry(host.as_str()).or_default(), &planned.changes)
            .expect("strict apply");
    }
    drop(plans);

    // What a provider read would hand the controller; reading is not the engine's cost.
    let read: Vec<Vec<Endpoint>> = host_names
        .iter()
        .map(|host| zones[host.as_str()].values().cloned().collect())
        .collect();
    drop(zones);
    let started = Instant::now();
    let mut converged_changes = 0;
    for ((host, desired), zone) in host_names.iter().zip(&desired).zip(&read) {
        let planned = plan(
            &PlanInput {
                owner: OWNER,
                root_host: host,
                desired,
                previous: Some(desired),
            },
            zone,
        );
        converged_changes += planned.changes.len();
    }
    let converged_plan_time = started.elapsed();
    assert_eq!(converged_changes, 0, "a converged zone needs no changes");

    println!(
        "hosts {hosts}, clusters {CLUSTERS}, geos {}, records {records} (+ as many ownership TXT records)",
        GEOS.len()
    );
    println!(
        "build record trees:          {:>8.3} s",
        build_time.as_secs_f64()
    );
    println!(
        "plan against an empty zone:  {:>8.3} s  ({first_changes} changes)",
        empty_plan_time.as_secs_f64()
    );
    println!(
        "plan against converged zone: {:>8.3} s  ({converged_changes} changes)",
        converged_plan_time.as_secs_f64()
    );
    println!("peak memory (VmHWM):         {:>8} MiB", peak_memory_mib());
}

fn peak_memory_mib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status
                .lines()
                .find(|l| l.starts_with("VmHWM:"))?
                .to_string();
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib / 1024)
}
