//! `make bench-providers`: API calls per phase for the same fleet, 1,000 hosts × 3 clusters
//! (GEO + weighted trees), on three providers side by side:
//! - Route53 against moto behind a counting proxy, at Route53's real budget of 5 requests/s;
//! - Google Cloud DNS against the FAKE of its API (`testkit/fake_cloud_dns.py`), which counts
//!   what it answers;
//! - Azure DNS + Traffic Manager against the FAKE of their APIs (`testkit/fake_azure.py`),
//!   with its quotas raised to hold the fleet (the note after its phases says by how much).
//!
//! Phases: converge from empty, reconcile again with no change, change one host's weight (and
//! a full read to check it), and a drift verification pass that finds and repairs two hosts
//! edited out of band. Each phase prints the calls by type next to the fewest the provider's
//! API allows for the same work, and what the calls cost at the provider's own rate limit.
//! The fakes answer faster than the services; counts, not timings, are the result.
//!
//! Then the webhook provider (`webhook`): external-dns v0.21.0 `--webhook-server` in front of
//! PowerDNS and of BIND, converging the same 1,000 hosts as plain records (the protocol has no
//! weights or GEO: each tree flattened as the hub flattens it), reconciling with no change and
//! changing one host's address, each next to Route53 doing the same work with the same records
//! in the same run. Webhook calls are counted by method and path as the provider sends them.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Instant;

use meridian_dns::changes::{Changes, Update};
use meridian_dns::model::{Endpoint, RecordType, is_at_or_below};
use meridian_dns::plan::{PlanInput, Registry, host_records, plan, published_zone};
use meridian_dns::tree::{
    ClusterTarget, Health, LabelSelector, LoadBalancing, Pruned, Strategy, TierRule, Tiers,
    build_record_tree,
};
use meridian_providers::Provider;
use meridian_providers::azure::{AZURE_REQUESTS_PER_SECOND, AzureProvider};
use meridian_providers::batch::{Limits, ROUTE53_LIMITS, group_by_name, pack};
use meridian_providers::budget::{ROUTE53_REQUESTS_PER_SECOND, RequestBudget};
use meridian_providers::google::{
    CLOUD_DNS_LIMITS, CLOUD_DNS_REQUESTS_PER_SECOND, GeoRegions, GoogleAuth, GoogleCredentials,
    GoogleProvider,
};
use meridian_providers::rfc2136::plain_dns_records;
use meridian_providers::route53::Route53Provider;
use meridian_providers::webhook::{WebhookConfig, WebhookProvider};
use meridian_testkit::azure_fake::{FakeAzure, FakeAzureOptions};
use meridian_testkit::bind_server::BindServer;
use meridian_testkit::cloud_dns_fake::FakeCloudDns;
use meridian_testkit::counting_proxy::CountingProxy;
use meridian_testkit::moto::MotoServer;
use meridian_testkit::powerdns::PowerDns;
use meridian_testkit::trees;
use meridian_testkit::webhook_server::WebhookServer;

const HOSTS: usize = 1000;
const OWNER: &str = "bench-hub";
/// The drift verifier's default interval.
const VERIFY_INTERVAL_SECONDS: f64 = 600.0;

/// A host's GEO + weighted tree on three clusters (IE on Azure, the US, GEO-EU), the Azure one
/// weighing `azure_weight`.
fn tree(host: &str, azure_weight: u32) -> Vec<Endpoint> {
    let clusters = [
        trees::cluster_on(1, "IE", "Azure", "192.0.2.1"),
        trees::cluster_on(2, "US", "AWS", "192.0.2.2"),
        trees::cluster_on(3, "GEO-EU", "AWS", "192.0.2.3"),
    ];
    trees::tree(
        host,
        &trees::geo_policy_weighing_azure(azure_weight),
        &clusters,
    )
}

/// A host with priority tiers: c0 (tier 1) and c1 (tier 2), in one geo; what the hub publishes
/// with `c0_healthy` (the active tier only, as [`meridian_dns::tiers`] chooses it).
fn tiered(host: &str, c0_healthy: bool, published: Option<&[Endpoint]>) -> Vec<Endpoint> {
    let clusters: Vec<ClusterTarget> = (0..2)
        .map(|i| {
            trees::cluster(
                i,
                &[("kuadrant.io/lb-attribute-tier", &format!("t{i}"))],
                &[&format!("192.0.2.{}", i + 1)],
            )
        })
        .collect();
    let strategy = Strategy::LoadBalanced(LoadBalancing {
        tiers: Some(Tiers {
            rules: vec![TierRule {
                selector: LabelSelector {
                    match_labels: [("kuadrant.io/lb-attribute-tier".into(), "t0".into())].into(),
                    ..Default::default()
                },
                priority: 1,
            }],
            default_priority: 2,
        }),
        ..trees::weighted(120)
    });
    let requested = build_record_tree(host, &trees::gateway(), &strategy, &clusters).unwrap();
    let health = BTreeMap::from([(
        "192.0.2.1".to_string(),
        if c0_healthy {
            Health::Healthy
        } else {
            Health::Unhealthy
        },
    )]);
    let Pruned::Endpoints(healthy) = requested.prune(&health) else {
        unreachable!("c1 stays healthy")
    };
    meridian_dns::tiers::choose_tiers(
        &healthy,
        &requested.endpoints(),
        published,
        &mut Default::default(),
        meridian_dns::tiers::TierClock {
            now: 0,
            hold_down: 60,
        },
    )
    .endpoints
}

/// Calls answered since the last look, by type, from a cumulative count.
struct Counter<'a> {
    read: Box<dyn Fn() -> BTreeMap<String, u64> + 'a>,
    seen: RefCell<BTreeMap<String, u64>>,
}

impl<'a> Counter<'a> {
    fn new(read: impl Fn() -> BTreeMap<String, u64> + 'a) -> Self {
        let seen = RefCell::new(read());
        Counter {
            read: Box::new(read),
            seen,
        }
    }

    fn take(&self) -> BTreeMap<String, u64> {
        let now = (self.read)();
        let mut seen = self.seen.borrow_mut();
        let delta = now
            .iter()
            .map(|(k, v)| (k.clone(), v - seen.get(k).copied().unwrap_or(0)))
            .filter(|(_, v)| *v > 0)
            .collect();
        *seen = now;
        delta
    }
}

/// Which API, for the fewest calls it allows for a piece of work.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Api {
    Route53,
    CloudDns,
    Azure,
}

impl Api {
    fn name(self) -> &'static str {
        match self {
            Api::Route53 => "Route53",
            Api::CloudDns => "Cloud DNS",
            Api::Azure => "Azure DNS + Traffic Manager",
        }
    }

    /// Requests per second the provider allows itself (its budget).
    fn rate(self) -> u32 {
        match self {
            Api::Route53 => ROUTE53_REQUESTS_PER_SECOND,
            Api::CloudDns => CLOUD_DNS_REQUESTS_PER_SECOND,
            Api::Azure => AZURE_REQUESTS_PER_SECOND,
        }
    }

    /// Records a list call returns per page.
    fn page(self) -> usize {
        match self {
            Api::Route53 => 300,
            Api::CloudDns | Api::Azure => 100,
        }
    }

    /// The fewest write calls that carry `changes`: batches for Route53 and Cloud DNS; for
    /// Azure, which has no batch, one PUT or DELETE per record set and per Traffic Manager
    /// profile touched.
    fn writes(self, changes: &Changes) -> String {
        let batches = |limits: Limits| pack(group_by_name(changes), limits).len();
        match self {
            Api::Route53 => format!("{} ChangeResourceRecordSets", batches(ROUTE53_LIMITS)),
            Api::CloudDns => format!("{} changes.create", batches(CLOUD_DNS_LIMITS)),
            Api::Azure => {
                let routed =
                    |r: &Endpoint| r.set_identifier.is_some() && r.record_type != RecordType::Txt;
                let changed = || {
                    changes
                        .creates
                        .iter()
                        .chain(&changes.deletes)
                        .chain(changes.updates.iter().map(|u| &u.new))
                };
                let profiles: BTreeSet<&str> = changed()
                    .filter(|r| routed(r))
                    .map(|r| r.dns_name.as_str())
                    .collect();
                // Plain record sets (ownership TXT sets included) whose stored values change;
                // the routing properties an ownership record carries are not stored.
                let mut sets: BTreeSet<(&str, RecordType)> = changes
                    .creates
                    .iter()
                    .chain(&changes.deletes)
                    .filter(|r| !routed(r))
                    .map(|r| (r.dns_name.as_str(), r.record_type))
                    .collect();
                sets.extend(
                    changes
                        .updates
                        .iter()
                        .filter(|u| !routed(&u.new))
                        .filter(|u| {
                            u.old.targets != u.new.targets || u.old.record_ttl != u.new.record_ttl
                        })
                        .map(|u| (u.new.dns_name.as_str(), u.new.record_type)),
                );
                // A routed name created or removed whole needs its alias record set written,
                // unless a GEO profile nests it (then it has none).
                let updated: BTreeSet<&str> = changes
                    .updates
                    .iter()
                    .map(|u| u.new.dns_name.as_str())
                    .collect();
                let nested = nested_names(changed());
                let aliases = profiles
                    .iter()
                    .filter(|name| !updated.contains(*name) && !nested.contains(*name))
                    .count();
                format!(
                    "{} (one PUT or DELETE each: {} record sets, {aliases} alias record sets, {} profiles)",
                    sets.len() + aliases + profiles.len(),
                    sets.len(),
                    profiles.len()
                )
            }
        }
    }

    /// Record sets (Cloud DNS, Azure) or records (Route53) a full read of `records` lists.
    fn listed(self, records: &[Endpoint]) -> usize {
        match self {
            Api::Route53 => records.len(),
            // The zone's SOA record set is listed too; the providers do not return it.
            Api::CloudDns => {
                1 + records
                    .iter()
                    .map(|r| (&r.dns_name, r.record_type))
                    .collect::<BTreeSet<_>>()
                    .len()
            }
            // Weighted names nested in a GEO profile have no record set.
            Api::Azure => {
                let nested = nested_names(records.iter());
                1 + records
                    .iter()
                    .filter(|r| {
                        !nested.contains(r.dns_name.as_str()) || r.record_type == RecordType::Txt
                    })
                    .map(|r| (&r.dns_name, r.record_type))
                    .collect::<BTreeSet<_>>()
                    .len()
            }
        }
    }
}

/// Names GEO records point at: the weighted names Azure nests.
fn nested_names<'a>(records: impl Iterator<Item = &'a Endpoint>) -> BTreeSet<&'a str> {
    records
        .filter(|r| r.set_identifier.is_some() && r.property("geo-code").is_some())
        .flat_map(|r| r.targets.iter().map(String::as_str))
        .collect()
}

fn print_phase(
    name: &str,
    counter: &Counter<'_>,
    api: Api,
    minimum: &str,
    started: Instant,
) -> u64 {
    let calls = counter.take();
    let total: u64 = calls.values().sum();
    let by_type: Vec<String> = calls
        .iter()
        .map(|(action, count)| format!("{action} {count}"))
        .collect();
    println!(
        "{name:<34} {total:>6} calls ({})  minimum {minimum}  [{:.1} s here; {:.0} s at {} req/s]",
        if by_type.is_empty() {
            "none".to_string()
        } else {
            by_type.join(", ")
        },
        started.elapsed().as_secs_f64(),
        total as f64 / f64::from(api.rate()),
        api.rate(),
    );
    total
}

/// The four phases on one provider's zone `zone_id`.
async fn run_phases<P: Provider>(
    api: Api,
    provider: &P,
    zone_domain: &str,
    counter: &Counter<'_>,
) -> Result<(), Box<dyn std::error::Error>> {
    let hosts: Vec<String> = (0..HOSTS)
        .map(|i| format!("app{i}.{zone_domain}"))
        .collect();

    // 1. From empty: one read of the zone, every host planned against it, one apply.
    let started = Instant::now();
    let zone = provider
        .list_zones()
        .await?
        .into_iter()
        .find(|z| z.domain == zone_domain)
        .ok_or("zone")?;
    let current = provider.records(&zone.id).await?;
    let mut published: BTreeMap<&str, Vec<Endpoint>> = BTreeMap::new();
    let mut all = Changes::default();
    for host in &hosts {
        let desired = tree(host, 30);
        let planned = plan(
            &PlanInput {
                owner: OWNER,
                root_host: host,
                desired: &desired,
                previous: None,
            },
            &current,
        );
        all.append(planned.changes);
        published.insert(host, desired);
    }
    provider.apply(&zone.id, &all).await?;
    let reads = match api {
        Api::Azure => "1 zone list, 1 record-set list, 1 profile list",
        _ => "1 zone list, 1 record list",
    };
    print_phase(
        "1. converge from empty",
        counter,
        api,
        &format!("{reads}, {} changes in {}", all.len(), api.writes(&all)),
        started,
    );

    // 2. No change: what each host would publish equals what it published; nothing to ask.
    let started = Instant::now();
    assert!(
        hosts
            .iter()
            .all(|host| tree(host, 30) == published[host.as_str()])
    );
    provider.list_zones().await?; // cached
    print_phase("2. reconcile again, no change", counter, api, "0", started);

    // 3. One host's weight changes: planned against what it published.
    let started = Instant::now();
    let host = hosts[0].as_str();
    let desired = tree(host, 200);
    let previous = &published[host];
    let planned = plan(
        &PlanInput {
            owner: OWNER,
            root_host: host,
            desired: &desired,
            previous: Some(previous),
        },
        &published_zone(OWNER, previous),
    );
    provider.apply(&zone.id, &planned.changes).await?;
    print_phase(
        "3. change one host's weight",
        counter,
        api,
        &api.writes(&planned.changes),
        started,
    );
    let records = provider.records(&zone.id).await?;
    let reweighted = records
        .iter()
        .filter(|r| r.record_type != RecordType::Txt)
        .filter(|r| is_at_or_below(&r.dns_name, host) && r.property("weight") == Some("200"))
        .count();
    print_phase(
        &format!("   full read to verify ({} records)", records.len()),
        counter,
        api,
        "-",
        started,
    );
    assert_eq!(
        reweighted, 1,
        "the Azure cluster's record carries the new weight"
    );
    published.insert(host, desired);

    // 3b. A host with priority tiers fails over: its primary's leaf is withdrawn and the
    // weighted set moves to the second tier, planned against what it published.
    let tiered_host = format!("tiered.{zone_domain}");
    let primary = tiered(&tiered_host, true, None);
    let planned = plan(
        &PlanInput {
            owner: OWNER,
            root_host: &tiered_host,
            desired: &primary,
            previous: None,
        },
        &[],
    );
    provider.apply(&zone.id, &planned.changes).await?;
    counter.take();
    let started = Instant::now();
    let secondary = tiered(&tiered_host, false, Some(&primary));
    let planned = plan(
        &PlanInput {
            owner: OWNER,
            root_host: &tiered_host,
            desired: &secondary,
            previous: Some(&primary),
        },
        &published_zone(OWNER, &primary),
    );
    provider.apply(&zone.id, &planned.changes).await?;
    print_phase(
        "3b. one tiered host fails over",
        counter,
        api,
        &format!(
            "{} changes in {}",
            planned.changes.len(),
            api.writes(&planned.changes)
        ),
        started,
    );
    let served: Vec<String> = provider
        .records(&zone.id)
        .await?
        .into_iter()
        .filter(|r| r.dns_name == format!("default.klb.{tiered_host}"))
        .flat_map(|r| r.targets)
        .collect();
    counter.take();
    assert_eq!(served.len(), 1, "one tier's record serves: {served:?}");
    assert!(
        served[0].starts_with(&meridian_dns::shortcode::shortcode("test-cluster-1", 6)),
        "the second tier serves: {served:?}"
    );

    // 4. Drift: someone deletes one host's record and edits another's out of band. The
    // verification pass (once per zone per interval) reads the zone whole and re-plans only
    // the hosts whose published records drifted.
    let victims = [hosts[10].as_str(), hosts[20].as_str()];
    let in_zone = |host: &str| {
        records
            .iter()
            .find(|r| r.record_type == RecordType::A && is_at_or_below(&r.dns_name, host))
            .cloned()
            .unwrap()
    };
    let deleted = in_zone(victims[0]);
    let edited = in_zone(victims[1]);
    let mut edit = edited.clone();
    edit.targets = vec!["203.0.113.66".into()];
    provider
        .apply(
            &zone.id,
            &Changes {
                deletes: vec![deleted],
                updates: vec![Update {
                    old: edited,
                    new: edit,
                }],
                ..Default::default()
            },
        )
        .await?;
    counter.take();
    let started = Instant::now();
    let current = provider.records(&zone.id).await?;
    let registry = Registry::read(&current);
    let drifted: Vec<&str> = hosts
        .iter()
        .map(String::as_str)
        .filter(|host| !meridian_dns::drift::drift(OWNER, &published[host], &registry).is_empty())
        .collect();
    let read_calls: u64 = counter.take().values().sum();
    assert_eq!(drifted, victims, "exactly the edited hosts drifted");
    let mut repair = Changes::default();
    for host in &drifted {
        let planned = plan(
            &PlanInput {
                owner: OWNER,
                root_host: host,
                desired: &published[host],
                previous: Some(&published[host]),
            },
            &host_records(&current, host),
        );
        repair.append(planned.changes);
    }
    provider.apply(&zone.id, &repair).await?;
    let pages = api.listed(&current).div_ceil(api.page());
    let lists = match api {
        Api::Azure => format!("{pages} record-set list pages of 100, 1 profile list"),
        Api::CloudDns => format!("{pages} list pages of 100 record sets"),
        Api::Route53 => format!("{pages} list pages of 300 records"),
    };
    let write_calls = print_phase(
        &format!("4. verify the zone, repair {}", drifted.len()),
        counter,
        api,
        &format!("{lists}, {}", api.writes(&repair)),
        started,
    );
    println!(
        "   ({} read calls + {} writes) at the default interval of 10 min: {:.3} req/s, {:.1} % of the {} req/s budget",
        read_calls,
        write_calls,
        read_calls as f64 / VERIFY_INTERVAL_SECONDS,
        100.0 * read_calls as f64 / VERIFY_INTERVAL_SECONDS / f64::from(api.rate()),
        api.rate(),
    );
    Ok(())
}

/// A host's tree as a provider of plain records holds it (flattened, as the hub does), with
/// the US cluster at `us_address`.
fn plain_tree(host: &str, us_address: &str) -> Vec<Endpoint> {
    let clusters = [
        trees::cluster_on(1, "IE", "Azure", "192.0.2.1"),
        trees::cluster_on(2, "US", "AWS", us_address),
        trees::cluster_on(3, "GEO-EU", "AWS", "192.0.2.3"),
    ];
    let tree = trees::tree(host, &trees::geo_policy_weighing_azure(30), &clusters);
    plain_dns_records(host, &tree).0
}

/// The plain-records phases on `provider` (with `adjust`, what the hub asks before planning a
/// host: the webhook's `adjustendpoints`, or nothing); returns the calls of each phase.
async fn plain_phases<P: Provider>(
    name: &str,
    provider: &P,
    adjust: impl AsyncFn(&[Endpoint]) -> Result<Vec<Endpoint>, meridian_providers::ProviderError>,
    calls: impl Fn() -> BTreeMap<String, u64>,
) -> Result<[u64; 3], Box<dyn std::error::Error>> {
    let counter = Counter::new(calls);
    let hosts: Vec<String> = (0..HOSTS).map(|i| format!("app{i}.example.com")).collect();
    let show = |phase: &str, started: Instant| {
        let calls = counter.take();
        let total: u64 = calls.values().sum();
        let by_type: Vec<String> = calls.iter().map(|(c, n)| format!("{c} {n}")).collect();
        println!(
            "{name:<24} {phase:<32} {total:>6} calls ({})  [{:.1} s here]",
            if by_type.is_empty() {
                "none".to_string()
            } else {
                by_type.join(", ")
            },
            started.elapsed().as_secs_f64()
        );
        total
    };

    // 1. From empty: one read of the zone, each host adjusted and planned, one apply.
    let started = Instant::now();
    let zone = provider
        .list_zones()
        .await?
        .into_iter()
        .find(|z| z.domain == "example.com")
        .ok_or("zone")?;
    let current = provider.records(&zone.id).await?;
    let mut published: BTreeMap<&str, Vec<Endpoint>> = BTreeMap::new();
    let mut all = Changes::default();
    for host in &hosts {
        let desired = adjust(&plain_tree(host, "192.0.2.2")).await?;
        let planned = plan(
            &PlanInput {
                owner: OWNER,
                root_host: host,
                desired: &desired,
                previous: None,
            },
            &current,
        );
        all.append(planned.changes);
        published.insert(host, desired);
    }
    provider.apply(&zone.id, &all).await?;
    let converge = show(&format!("1. converge ({} changes)", all.len()), started);

    // 2. No change: each host adjusted again and compared with what it published.
    let started = Instant::now();
    for host in &hosts {
        let desired = adjust(&plain_tree(host, "192.0.2.2")).await?;
        assert_eq!(desired, published[host.as_str()]);
    }
    let steady = show("2. reconcile again, no change", started);

    // 3. One host's US cluster moves to a new address.
    let started = Instant::now();
    let host = hosts[0].as_str();
    let desired = adjust(&plain_tree(host, "192.0.2.22")).await?;
    let previous = &published[host];
    let planned = plan(
        &PlanInput {
            owner: OWNER,
            root_host: host,
            desired: &desired,
            previous: Some(previous),
        },
        &published_zone(OWNER, previous),
    );
    provider.apply(&zone.id, &planned.changes).await?;
    let change = show("3. one host's address changes", started);
    let records = provider.records(&zone.id).await?;
    counter.take();
    assert!(
        records
            .iter()
            .any(|r| r.dns_name == host && r.targets.contains(&"192.0.2.22".to_string())),
        "the new address is held"
    );
    Ok([converge, steady, change])
}

/// The webhook rows: PowerDNS and BIND behind external-dns's webhook server, and Route53 with
/// the same plain records.
async fn webhook_rows() -> Result<(), Box<dyn std::error::Error>> {
    println!(
        "
Webhook (external-dns v0.21.0 --webhook-server): {HOSTS} hosts x 3 clusters flattened to plain records, next to Route53 (moto, {ROUTE53_REQUESTS_PER_SECOND} req/s) with the same records"
    );
    let moto = MotoServer::start()?;
    let proxy = CountingProxy::start(moto.address(), 0).await?;
    let budget = Arc::new(RequestBudget::per_second(ROUTE53_REQUESTS_PER_SECOND));
    let route53 = Route53Provider::new(&moto.credentials(&proxy.endpoint()), budget);
    moto.create_zone("example.com").await?;
    let same = async |records: &[Endpoint]| Ok(records.to_vec());
    let route53_calls = plain_phases("Route53", &route53, same, || proxy.calls()).await?;

    let pdns = PowerDns::start("example.com").await?;
    let pdns_webhook = WebhookServer::powerdns(&pdns, "example.com").await?;
    let bind = BindServer::start("example.com").await?;
    let bind_webhook = WebhookServer::rfc2136(&bind.config).await?;
    for (name, server) in [
        ("webhook to PowerDNS", &pdns_webhook),
        ("webhook to BIND", &bind_webhook),
    ] {
        let webhook = WebhookProvider::new(WebhookConfig {
            url: server.url.parse()?,
            zone: "example.com".into(),
            headers: Vec::new(),
            extra_ca_pem: None,
            pinned: Vec::new(),
        })?;
        let adjust = async |records: &[Endpoint]| webhook.adjust(records).await;
        let calls = plain_phases(name, &webhook, adjust, || webhook.requests_by_call()).await?;
        let ratio: Vec<String> = calls
            .iter()
            .zip(route53_calls)
            .map(|(ours, theirs)| match theirs {
                0 => format!("{ours} vs 0"),
                _ => format!("{:.1}x", *ours as f64 / theirs as f64),
            })
            .collect();
        println!(
            "{:<24} calls against Route53's, phase by phase: {} (adjustendpoints, asked once per host's record set and then kept, is answered by the webhook itself: no provider API call)",
            "",
            ratio.join(", ")
        );
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // `bench-providers [route53] [google] [azure] [webhook]` runs only those; all by default.
    let chosen: Vec<String> = std::env::args().skip(1).collect();
    let runs = |name: &str| chosen.is_empty() || chosen.iter().any(|c| c == name);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        // Route53: moto behind a counting proxy, at the real budget.
        if runs("route53") {
        let moto = MotoServer::start()?;
        let proxy = CountingProxy::start(moto.address(), 0).await?;
        let budget = Arc::new(RequestBudget::per_second(ROUTE53_REQUESTS_PER_SECOND));
        let route53 = Route53Provider::new(&moto.credentials(&proxy.endpoint()), budget);
        moto.create_zone("example.com").await?;
        println!(
            "\n{}: {HOSTS} hosts x 3 clusters (GEO + weighted), budget {ROUTE53_REQUESTS_PER_SECOND} req/s, moto behind a counting proxy",
            Api::Route53.name()
        );
        run_phases(Api::Route53, &route53, "example.com", &Counter::new(|| proxy.calls())).await?;
        }

        // Cloud DNS: the fake, with regions for the fleet's geo codes.
        if runs("google") {
        let google = FakeCloudDns::start("bench", &[]);
        let regions = GeoRegions::new(
            [("IE", "europe-west1"), ("US", "us-east1"), ("GEO-EU", "europe-west4")]
                .into_iter()
                .map(|(c, r)| (c.to_string(), r.to_string()))
                .collect(),
            "europe-west1".into(),
        )?;
        let cloud_dns = GoogleProvider::new(
            &GoogleCredentials {
                project: "bench".into(),
                auth: GoogleAuth::Anonymous,
                endpoint: Some(format!("http://127.0.0.1:{}", google.port())),
            },
            regions,
            Arc::new(RequestBudget::per_second(10_000)),
        )
        .await?;
        println!(
            "\n{}: the same fleet against the FAKE of Cloud DNS (counts as answered; the budget is {CLOUD_DNS_REQUESTS_PER_SECOND} req/s)",
            Api::CloudDns.name()
        );
        run_phases(Api::CloudDns, &cloud_dns, "example.com", &Counter::new(|| google.requests())).await?;
        }

        // Azure: the fake, its quotas raised so the fleet fits.
        if runs("azure") {
        let azure_fake = FakeAzure::start(&FakeAzureOptions {
            max_record_sets: 100_000,
            max_profiles: 100_000,
            ..Default::default()
        });
        let azure = AzureProvider::new(
            &azure_fake.credentials(),
            Arc::new(RequestBudget::per_second(10_000)),
            AzureProvider::default_retry(),
        )?;
        println!(
            "\n{}: the same fleet against the FAKE of Azure's APIs (counts as answered; the budget is {AZURE_REQUESTS_PER_SECOND} req/s, ARM's write refill rate)",
            Api::Azure.name()
        );
        run_phases(Api::Azure, &azure, "example.com", &Counter::new(|| azure_fake.requests())).await?;
        let state = azure_fake.state();
        let record_sets = state["zones"]["example.com"].as_array().map_or(0, Vec::len);
        let profiles = state["profiles"].as_array().map_or(0, Vec::len);
        println!(
            "   the fleet holds {record_sets} record sets ({:.1}x Azure's default of 10,000 per zone) and {profiles} Traffic Manager profiles ({:.0}x the default of 200 per subscription): both quotas must be raised",
            record_sets as f64 / 10_000.0,
            profiles as f64 / 200.0,
        );
        }

        if runs("webhook") {
            webhook_rows().await?;
        }
        Ok::<_, Box<dyn std::error::Error>>(())
    })
}
