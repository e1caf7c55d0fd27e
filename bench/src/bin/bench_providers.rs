//! `make bench-providers`: Route53 API calls per phase, against moto behind a counting proxy,
//! with Route53's real budget of 5 requests per second. 1,000 hosts × 3 clusters (GEO + weighted
//! trees): converge from empty, reconcile again with no change, change one host's weight, and a
//! drift verification pass that finds and repairs two hosts edited out of band. Prints the
//! calls per phase by type next to the theoretical minimum under Route53's limits.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use meridian_dns::changes::Changes;
use meridian_dns::model::Endpoint;
use meridian_dns::plan::{PlanInput, plan, published_zone};
use meridian_dns::tree::{
    Address, ClusterTarget, CustomWeight, GatewayRef, LabelSelector, LoadBalancing, Strategy,
    build_record_tree,
};
use meridian_providers::Provider;
use meridian_providers::batch::{ROUTE53_LIMITS, group_by_name, pack};
use meridian_providers::budget::{ROUTE53_REQUESTS_PER_SECOND, RequestBudget};
use meridian_providers::route53::Route53Provider;
use meridian_testkit::counting_proxy::CountingProxy;
use meridian_testkit::moto::MotoServer;

const HOSTS: usize = 1000;
const OWNER: &str = "bench-hub";

fn tree(host: &str, azure_weight: u32) -> Vec<Endpoint> {
    let gateway = GatewayRef {
        name: "prod-web".into(),
        namespace: "gateways".into(),
    };
    let clusters: Vec<ClusterTarget> = [("IE", "Azure"), ("US", "AWS"), ("GEO-EU", "AWS")]
        .iter()
        .enumerate()
        .map(|(i, (geo, cloud))| ClusterTarget {
            name: format!("c{i}"),
            cluster_id: format!("cluster-{i}"),
            labels: BTreeMap::from([
                (
                    "kuadrant.io/lb-attribute-geo-code".to_string(),
                    geo.to_string(),
                ),
                (
                    "kuadrant.io/lb-attribute-cloud".to_string(),
                    cloud.to_string(),
                ),
            ]),
            addresses: vec![Address::parse(None, &format!("192.0.2.{}", i + 1)).unwrap()],
            attached_routes: None,
        })
        .collect();
    let azure = LabelSelector {
        match_labels: [("kuadrant.io/lb-attribute-cloud".into(), "Azure".into())].into(),
        ..Default::default()
    };
    let strategy = Strategy::LoadBalanced(LoadBalancing {
        default_weight: 120,
        custom: vec![CustomWeight {
            selector: azure,
            weight: azure_weight,
        }],
        default_geo: Some("IE".into()),
    });
    build_record_tree(host, &gateway, &strategy, &clusters)
        .unwrap()
        .endpoints()
}

/// Fewest ChangeResourceRecordSets calls that can carry `changes` under Route53's limits.
fn minimum_change_calls(changes: &Changes) -> usize {
    pack(group_by_name(changes), ROUTE53_LIMITS).len()
}

fn print_phase(name: &str, proxy: &CountingProxy, minimum: &str, started: Instant) {
    let calls = proxy.calls();
    let by_type: Vec<String> = calls
        .iter()
        .map(|(action, count)| format!("{action} {count}"))
        .collect();
    println!(
        "{name:<34} {:>5} calls ({})  minimum {minimum}  [{:.1} s]",
        calls.values().sum::<u64>(),
        if by_type.is_empty() {
            "none".to_string()
        } else {
            by_type.join(", ")
        },
        started.elapsed().as_secs_f64()
    );
    proxy.reset();
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let moto = MotoServer::start()?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let proxy = CountingProxy::start(moto.address(), 0).await?;
        let budget = Arc::new(RequestBudget::per_second(ROUTE53_REQUESTS_PER_SECOND));
        let provider = Route53Provider::new(&moto.credentials(&proxy.endpoint()), budget);
        moto.create_zone("example.com").await?;
        let hosts: Vec<String> = (0..HOSTS).map(|i| format!("app{i}.example.com")).collect();
        println!("Route53 API calls, {HOSTS} hosts x 3 clusters (GEO + weighted), budget {ROUTE53_REQUESTS_PER_SECOND} req/s, moto behind a counting proxy");

        // 1. From empty: one read of the zone, every host planned against it, one apply.
        let started = Instant::now();
        let zone = provider.list_zones().await?.into_iter().find(|z| z.domain == "example.com").ok_or("zone")?;
        let current = provider.records(&zone.id).await?;
        let mut published: BTreeMap<&str, Vec<Endpoint>> = BTreeMap::new();
        let mut all = Changes::default();
        for host in &hosts {
            let desired = tree(host, 30);
            let planned = plan(&PlanInput { owner: OWNER, root_host: host, desired: &desired, previous: None }, &current);
            all.deletes.extend(planned.changes.deletes);
            all.updates.extend(planned.changes.updates);
            all.creates.extend(planned.changes.creates);
            published.insert(host, desired);
        }
        let total_changes = all.len();
        provider.apply(&zone.id, &all).await?;
        let minimum = format!("{} (1 ListHostedZones, 1 ListResourceRecordSets, {} changes in {} ChangeResourceRecordSets)", 2 + minimum_change_calls(&all), total_changes, minimum_change_calls(&all));
        print_phase("1. converge from empty", &proxy, &minimum, started);

        // 2. No change: what each host would publish equals what it published; nothing to ask.
        let started = Instant::now();
        let mut changed_hosts = 0;
        for host in &hosts {
            if tree(host, 30) != published[host.as_str()] {
                changed_hosts += 1;
            }
        }
        assert_eq!(changed_hosts, 0);
        provider.list_zones().await?; // cached
        print_phase("2. reconcile again, no change", &proxy, "0", started);

        // 3. One host's weight changes: planned against what it published, one batch.
        let started = Instant::now();
        let host = hosts[0].as_str();
        let desired = tree(host, 200);
        let previous = &published[host];
        let planned = plan(&PlanInput { owner: OWNER, root_host: host, desired: &desired, previous: Some(previous) }, &published_zone(OWNER, previous));
        provider.apply(&zone.id, &planned.changes).await?;
        print_phase("3. change one host's weight", &proxy, "1 ChangeResourceRecordSets", started);
        println!("(phase 3 changed {} records; the zone was then checked:)", planned.changes.len());

        let records = provider.records(&zone.id).await?;
        let ours = records
            .iter()
            .filter(|r| r.record_type != meridian_dns::model::RecordType::Txt)
            .filter(|r| meridian_dns::model::is_at_or_below(&r.dns_name, host) && r.property("weight") == Some("200"))
            .count();
        print_phase(&format!("   full read to verify ({} records)", records.len()), &proxy, "-", started);
        assert_eq!(ours, 1, "the Azure cluster's GEO record carries the new weight");
        published.insert(host, desired);

        // 4. Drift: someone deletes one host's record and edits another's out of band. The
        // verification pass (once per zone per interval) reads the zone whole and re-plans
        // only the hosts whose published records drifted.
        let started = Instant::now();
        let victims = [hosts[10].as_str(), hosts[20].as_str()];
        let in_zone = |host: &str| records.iter().find(|r| r.record_type == meridian_dns::model::RecordType::A && meridian_dns::model::is_at_or_below(&r.dns_name, host)).cloned().unwrap();
        let deleted = in_zone(victims[0]);
        let edited = in_zone(victims[1]);
        let mut edit = edited.clone();
        edit.targets = vec!["203.0.113.66".into()];
        provider.apply(&zone.id, &Changes { deletes: vec![deleted], updates: vec![meridian_dns::changes::Update { old: edited, new: edit }], ..Default::default() }).await?;
        proxy.reset();
        let started_verify = Instant::now();
        let current = provider.records(&zone.id).await?;
        let registry = meridian_dns::plan::Registry::read(&current);
        let drifted: Vec<&str> = hosts
            .iter()
            .map(String::as_str)
            .filter(|host| !meridian_dns::drift::drift(OWNER, &published[host], &registry).is_empty())
            .collect();
        let read_calls: u64 = proxy.calls().values().sum();
        let read_seconds = started_verify.elapsed().as_secs_f64();
        assert_eq!(drifted, victims, "exactly the edited hosts drifted");
        let mut repair = Changes::default();
        for host in &drifted {
            let planned = plan(&PlanInput { owner: OWNER, root_host: host, desired: &published[host], previous: Some(&published[host]) }, &meridian_dns::plan::host_records(&current, host));
            repair.append(planned.changes);
        }
        provider.apply(&zone.id, &repair).await?;
        print_phase(
            &format!("4. verify the zone, repair {}", drifted.len()),
            &proxy,
            &format!("{} ({} ListResourceRecordSets pages of 300 for {} records, 1 ChangeResourceRecordSets)", current.len().div_ceil(300) + 1, current.len().div_ceil(300), current.len()),
            started,
        );
        let interval = 600.0;
        println!(
            "   at the default interval of 10 min: {read_calls} reads per {interval:.0} s = {:.3} req/s, {:.1} % of Route53's {ROUTE53_REQUESTS_PER_SECOND} req/s; the read took {read_seconds:.1} s at that pace",
            read_calls as f64 / interval,
            100.0 * read_calls as f64 / interval / f64::from(ROUTE53_REQUESTS_PER_SECOND),
        );
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
