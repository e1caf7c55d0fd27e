//! Sharing a zone with external-dns: the real external-dns (built from its Go module by
//! `e2e/testbed/external-dns.sh`, its `crd` source reading DNSEndpoints on the same control
//! plane) and Meridian's hub publish into one zone on BIND (RFC2136) and on moto (Route53).
//!
//! After every step of one side, the other side's records, ownership records included, must
//! be exactly as before. Names both want stay with whoever had them first, and each side says
//! so: Meridian in the DNSRecord's status, external-dns in its log. Distributed mode is tested
//! the same way in `distributed.rs`.

use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use meridian_api::kuadrant::DNSRecord;
use meridian_controllers::zones::owners::hub_record_owner;
use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::plan::Registry;
use meridian_e2e::example::{apply, ready_message};
use meridian_e2e::external_dns::{self, ExternalDns, ExternalDnsZone};
use meridian_e2e::{
    DEFAULT_PATIENCE, Error, Fleet, Passes, counter_grows, ensure_namespace, eventually,
    hub_counter,
};
use meridian_hub::run_command::{RunArgs, RunningHub};
use meridian_providers::Provider;
use meridian_providers::rfc2136::Rfc2136Provider;
use meridian_providers::route53::Route53Provider;
use meridian_testkit::bind_server::BindServer;
use meridian_testkit::fixtures;
use meridian_testkit::moto::MotoServer;
use serde_json::{Value, json};

const NAMESPACE: &str = "shared";
const ZONE: &str = "example.com";
const EXTERNAL_DNS_OWNER: &str = "edns";

/// A zone both tools write to, read the way Meridian reads it.
enum SharedZone {
    Bind(BindServer),
    Moto {
        moto: MotoServer,
        provider: Route53Provider,
        zone_id: String,
    },
}

impl SharedZone {
    async fn bind() -> Result<Self, Error> {
        Ok(SharedZone::Bind(
            BindServer::start(ZONE).await.map_err(Error::Component)?,
        ))
    }

    async fn moto() -> Result<Self, Error> {
        let moto = MotoServer::start().map_err(|e| Error::Component(e.to_string()))?;
        moto.create_zone(ZONE).await.map_err(Error::Component)?;
        let provider = moto.provider(1000);
        let zone_id = provider
            .list_zones()
            .await
            .map_err(|e| Error::Component(e.to_string()))?
            .into_iter()
            .find(|z| z.domain == ZONE)
            .expect("the zone is listed")
            .id;
        Ok(SharedZone::Moto {
            moto,
            provider,
            zone_id,
        })
    }

    /// Every record but the apex's SOA and NS, in a stable order.
    async fn records(&self) -> Vec<Endpoint> {
        let mut records = match self {
            SharedZone::Bind(bind) => Rfc2136Provider::new(bind.config.clone())
                .unwrap()
                .records(ZONE)
                .await
                .unwrap(),
            SharedZone::Moto {
                provider, zone_id, ..
            } => provider.records(zone_id).await.unwrap(),
        };
        records.retain(|r| r.dns_name != ZONE && r.dns_name != format!("ns1.{ZONE}"));
        for record in &mut records {
            record.normalize();
        }
        records.sort_by_key(Endpoint::key);
        records
    }

    /// Adds records as someone else would (a seeded fixture).
    async fn seed(&self, records: &[Endpoint]) {
        let changes = meridian_dns::changes::Changes {
            creates: records.to_vec(),
            ..Default::default()
        };
        match self {
            SharedZone::Bind(bind) => Rfc2136Provider::new(bind.config.clone())
                .unwrap()
                .apply(ZONE, &changes)
                .await
                .unwrap(),
            SharedZone::Moto {
                provider, zone_id, ..
            } => provider.apply(zone_id, &changes).await.unwrap(),
        }
    }

    fn for_external_dns(&self) -> ExternalDnsZone {
        match self {
            SharedZone::Bind(bind) => ExternalDnsZone::rfc2136(&bind.config),
            SharedZone::Moto { moto, .. } => ExternalDnsZone::Route53 {
                endpoint: moto.endpoint(),
                zone: ZONE.into(),
            },
        }
    }

    /// The zone's `kuadrant.io/*` provider Secret for Meridian.
    fn secret(&self) -> Value {
        let data = match self {
            SharedZone::Bind(bind) => json!({
                "server": bind.config.server.to_string(),
                "tsigKeyName": bind.config.key_name,
                "tsigAlgorithm": bind.config.algorithm,
                "tsigSecret": bind.config.secret,
            }),
            SharedZone::Moto { .. } => json!({
                "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1",
            }),
        };
        let type_ = match self {
            SharedZone::Bind(_) => "kuadrant.io/rfc2136",
            SharedZone::Moto { .. } => "kuadrant.io/aws",
        };
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": type_,
            "metadata": { "name": "zone", "namespace": NAMESPACE },
            "stringData": data,
        })
    }
}

/// The zone split into Meridian's owners' records and everything else.
fn split(zone: &[Endpoint], meridian_owners: &[String]) -> (Vec<Endpoint>, Vec<Endpoint>) {
    external_dns::split_by_owner(zone, ZONE, meridian_owners)
}

fn find<'z>(zone: &'z [Endpoint], name: &str, record_type: RecordType) -> Option<&'z Endpoint> {
    zone.iter()
        .find(|r| r.dns_name == name && r.record_type == record_type)
}

fn a(name: &str, address: &str) -> Endpoint {
    Endpoint::new(name, RecordType::A, [address.to_string()], 300)
}

fn dns_endpoints(client: &Client) -> Api<DynamicObject> {
    external_dns::dns_endpoints(client, NAMESPACE)
}

/// external-dns's DNSEndpoint asking for an A record.
async fn want_from_external_dns(client: &Client, name: &str, address: &str) -> Result<(), Error> {
    external_dns::want_a_record(client, NAMESPACE, name, &format!("{name}.{ZONE}"), address).await
}

/// Meridian's DNSRecord asking for an A record.
async fn want_from_meridian(client: &Client, name: &str, address: &str) -> Result<(), Error> {
    let host = format!("{name}.{ZONE}");
    apply(
        &Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE),
        fixtures::dns_record(NAMESPACE, name, "shared")
            .root_host(&host)
            .endpoint_for(&host, "A", &[address], 300)
            .json(),
    )
    .await?;
    Ok(())
}

/// Waits until the `Ready` message of Meridian's record `name` is `wanted`, and returns it.
async fn meridian_status(
    client: &Client,
    name: &str,
    wanted: impl Fn(&str) -> bool,
) -> Result<String, Error> {
    let records = Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE);
    eventually(
        &format!("DNSRecord {name}'s status"),
        DEFAULT_PATIENCE,
        || async {
            let message = ready_message(&records, name).await?;
            Ok(wanted(&message).then_some(message))
        },
    )
    .await
}

async fn wait_for_zone(
    zone: &SharedZone,
    what: &str,
    check: impl Fn(&[Endpoint]) -> bool,
) -> Result<Vec<Endpoint>, Error> {
    eventually(what, DEFAULT_PATIENCE, || async {
        let records = zone.records().await;
        Ok(check(&records).then_some(records))
    })
    .await
}

/// The owner IDs Meridian publishes under: the hub's owner ID (kept in its namespace's
/// ConfigMap) with each DNSRecord's namespace and name.
async fn meridian_owners(client: &Client) -> Result<Vec<String>, Error> {
    let hub = meridian_e2e::hub_owner_id(client, "kube-system").await?;
    Ok(Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|r| hub_record_owner(&hub, NAMESPACE, &r.name_any()))
        .collect())
}

/// A control plane with the zone's Secret and ManagedZone `shared` (verified every
/// `verification_interval`, else the default), and Meridian's hub running against it.
async fn start_hub(
    zone: &SharedZone,
    verification_interval: Option<&str>,
) -> Result<(Fleet, RunningHub), Error> {
    let fleet = Fleet::builder().without_ocm().start().await?;
    let client = fleet.hub.client();
    ensure_namespace(&client, NAMESPACE).await?;
    apply(
        &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), NAMESPACE),
        zone.secret(),
    )
    .await?;
    let mut spec = json!({ "domainName": ZONE, "dnsProviderSecretRef": { "name": "zone" } });
    if let Some(interval) = verification_interval {
        spec["verificationInterval"] = json!(interval);
    }
    apply(
        &Api::<meridian_api::kuadrant::ManagedZone>::namespaced(client.clone(), NAMESPACE),
        json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
            "metadata": { "name": "shared", "namespace": NAMESPACE },
            "spec": spec,
        }),
    )
    .await?;
    let mut args = RunArgs::local(fleet.hub.kubeconfig_path());
    // BIND listens on loopback: the admin allows it (a Secret alone could not).
    args.providers.rfc2136_server_allow = vec!["127.0.0.0/8".into()];
    if let SharedZone::Moto { moto, .. } = zone {
        // Where Route53 is, the admin's setting (never the Secret's).
        args.providers.aws_endpoint = Some(moto.endpoint());
    }
    let hub = RunningHub::start(&args)
        .await
        .map_err(|e| Error::Component(e.to_string()))?;
    Ok((fleet, hub))
}

/// The whole exchange on one zone, with external-dns configured by `flags`. `legacy` seeds
/// what external-dns before 0.18 also wrote: an ownership record at the record's own name.
async fn share_a_zone(zone: SharedZone, flags: &[&str], legacy: bool) -> Result<(), Error> {
    let (fleet, hub) = start_hub(&zone, None).await?;
    let client = fleet.hub.client();
    let kubeconfig = fleet.hub.kubeconfig_path().to_path_buf();
    let external_dns = ExternalDns::locate(EXTERNAL_DNS_OWNER)?.with_flags(flags.iter().copied());
    external_dns.install_crd(&client).await?;
    let target = zone.for_external_dns();
    let sync = || external_dns.sync_once(&kubeconfig, &target);

    // external-dns goes first: its own name, and a name Meridian will want too.
    if legacy {
        zone.seed(&[
            a(&format!("legacy.{ZONE}"), "192.0.2.40"),
            Endpoint::new(
                format!("legacy.{ZONE}"),
                RecordType::Txt,
                [format!("heritage=external-dns,external-dns/owner={EXTERNAL_DNS_OWNER},external-dns/resource=crd/{NAMESPACE}/legacy")],
                300,
            ),
        ])
        .await;
        want_from_external_dns(&client, "legacy", "192.0.2.40").await?;
    }
    want_from_external_dns(&client, "shop", "192.0.2.10").await?;
    want_from_external_dns(&client, "both", "192.0.2.20").await?;
    sync().await?;
    let records = zone.records().await;
    assert_eq!(
        find(&records, "shop.example.com", RecordType::A)
            .unwrap()
            .targets,
        ["192.0.2.10"]
    );
    let edns_txt = records
        .iter()
        .filter(|r| {
            r.record_type == RecordType::Txt
                && r.targets
                    .iter()
                    .any(|t| t.contains("external-dns/owner=edns"))
        })
        .count();
    assert!(
        edns_txt >= 2,
        "external-dns writes its registry records: {records:#?}"
    );

    // Meridian: its own names, and the name external-dns holds.
    want_from_meridian(&client, "api", "10.0.0.1").await?;
    want_from_meridian(&client, "mine", "10.0.0.3").await?;
    want_from_meridian(&client, "both", "10.0.0.2").await?;
    if legacy {
        want_from_meridian(&client, "legacy", "10.0.0.4").await?;
    }
    for name in ["api", "mine"] {
        meridian_status(&client, name, |m| m.contains("published")).await?;
    }
    let refusal = meridian_status(&client, "both", |m| m.contains("owned by external-dns")).await?;
    assert!(
        refusal.contains(&format!("owner {EXTERNAL_DNS_OWNER}"))
            && refusal.contains("left unchanged"),
        "Meridian names the other owner: {refusal}"
    );
    if legacy {
        let refusal =
            meridian_status(&client, "legacy", |m| m.contains("owned by external-dns")).await?;
        assert!(
            refusal.contains(&format!("owner {EXTERNAL_DNS_OWNER}")),
            "{refusal}"
        );
    }
    let owners = meridian_owners(&client).await?;
    let before = wait_for_zone(&zone, "Meridian's api and mine", |z| {
        find(z, "api.example.com", RecordType::A).is_some()
            && find(z, "mine.example.com", RecordType::A).is_some()
    })
    .await?;
    let (_, theirs_before) = split(&before, &owners);
    let (_, theirs_at_start) = split(&records, &owners);
    assert_eq!(
        theirs_before, theirs_at_start,
        "Meridian changed nothing of external-dns's"
    );
    assert_eq!(
        find(&before, "both.example.com", RecordType::A)
            .unwrap()
            .targets,
        ["192.0.2.20"]
    );

    // external-dns now wants the name Meridian holds: it leaves it, and says whose it is not.
    want_from_external_dns(&client, "mine", "192.0.2.30").await?;
    let log = sync().await?;
    assert!(
        log.contains("mine.example.com") && log.contains("owner id does not match"),
        "external-dns reports the name as someone else's:\n{log}"
    );
    let after = zone.records().await;
    eprintln!("the shared zone:\n{}", show(&after));
    let (mine_before, _) = split(&before, &owners);
    let (mine_after, _) = split(&after, &owners);
    assert_eq!(
        mine_after, mine_before,
        "external-dns changed nothing of Meridian's"
    );

    // Nobody flaps: more rounds of both change nothing. (Meridian re-plans the refused
    // record on its own, with backoff; the annotation wakes every record once more.)
    for round in 0..3 {
        sync().await?;
        let passes = Passes::of(&hub, "dnsrecord");
        for name in ["api", "mine", "both"] {
            Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE)
                .patch(
                    name,
                    &PatchParams::apply("coexistence-test"),
                    &Patch::Merge(json!({ "metadata": { "annotations": { "test/round": round.to_string() } } })),
                )
                .await?;
        }
        // Each record's pass of this round has run to its end.
        passes.wait_for_more(&hub, "dnsrecord", 3).await?;
    }
    assert_eq!(zone.records().await, after, "neither side flaps");

    // Updates on both sides.
    want_from_external_dns(&client, "shop", "192.0.2.11").await?;
    sync().await?;
    let updated = zone.records().await;
    assert_eq!(
        find(&updated, "shop.example.com", RecordType::A)
            .unwrap()
            .targets,
        ["192.0.2.11"]
    );
    assert_eq!(
        split(&updated, &owners).0,
        mine_before,
        "external-dns's update left Meridian's records"
    );
    let theirs = split(&updated, &owners).1;
    want_from_meridian(&client, "api", "10.0.0.11").await?;
    let updated = wait_for_zone(&zone, "Meridian's update", |z| {
        find(z, "api.example.com", RecordType::A).is_some_and(|r| r.targets == ["10.0.0.11"])
    })
    .await?;
    assert_eq!(
        split(&updated, &owners).1,
        theirs,
        "Meridian's update left external-dns's records"
    );

    // Deletes on both sides.
    let mine = split(&updated, &owners).0;
    dns_endpoints(&client)
        .delete("shop", &DeleteParams::default())
        .await?;
    sync().await?;
    let deleted = zone.records().await;
    assert!(find(&deleted, "shop.example.com", RecordType::A).is_none());
    assert!(
        !deleted
            .iter()
            .any(|r| r.record_type == RecordType::Txt && r.dns_name.contains("shop")),
        "external-dns removes its registry record too: {deleted:#?}"
    );
    assert_eq!(
        split(&deleted, &owners).0,
        mine,
        "external-dns's delete left Meridian's records"
    );
    let theirs = split(&deleted, &owners).1;
    Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE)
        .delete("api", &DeleteParams::default())
        .await?;
    let deleted = wait_for_zone(&zone, "Meridian's delete", |z| {
        find(z, "api.example.com", RecordType::A).is_none()
    })
    .await?;
    assert_eq!(
        split(&deleted, &owners).1,
        theirs,
        "Meridian's delete left external-dns's records"
    );
    assert!(
        !deleted
            .iter()
            .any(|r| r.dns_name.contains("-a-api.example.com")),
        "Meridian removes its ownership record too"
    );
    hub.stop().await;
    Ok(())
}

/// The zone as text, one record a line (seen with `--nocapture`).
fn show(zone: &[Endpoint]) -> String {
    zone.iter()
        .map(|r| format!("  {} {} {}", r.dns_name, r.record_type, r.targets.join(" ")))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_dns_and_meridian_share_a_bind_zone() -> Result<(), Error> {
    share_a_zone(SharedZone::bind().await?, &[], true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_dns_with_a_txt_prefix_and_meridian_share_a_bind_zone() -> Result<(), Error> {
    share_a_zone(
        SharedZone::bind().await?,
        &["--txt-prefix=edns-%{record_type}."],
        false,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_dns_and_meridian_share_a_route53_zone() -> Result<(), Error> {
    share_a_zone(SharedZone::moto().await?, &[], true).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_dns_with_a_txt_suffix_and_meridian_share_a_route53_zone() -> Result<(), Error> {
    share_a_zone(SharedZone::moto().await?, &["--txt-suffix=-edns"], false).await
}

/// Drift: records of Meridian's changed or deleted out of band are put back at the zone's next
/// verification (here every 10 s; 10 min by default) with no change to the DNSRecord, and a
/// record another tool took over (its ownership record now, Meridian's gone) is reported and
/// left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_changed_out_of_band_are_put_back_and_takeovers_reported() -> Result<(), Error> {
    let zone = SharedZone::bind().await?;
    let (fleet, hub) = start_hub(&zone, Some("10s")).await?;
    let client = fleet.hub.client();
    for (name, address) in [
        ("api", "10.0.0.1"),
        ("www", "10.0.0.2"),
        ("taken", "10.0.0.3"),
    ] {
        want_from_meridian(&client, name, address).await?;
        meridian_status(&client, name, |m| m.contains("published")).await?;
    }
    let published = zone.records().await;
    let owner_of = |name: &str| {
        let registry = Registry::read(&published);
        registry
            .ownership
            .iter()
            .find(|(key, _)| key.dns_name == format!("{name}.{ZONE}"))
            .map(|(_, owners)| owners.values().next().unwrap().clone())
            .unwrap()
    };
    let taken_txt = owner_of("taken");

    // Out of band: api's address is replaced, www is deleted, and external-dns's registry
    // record replaces Meridian's for taken (the record itself stays).
    let provider = match &zone {
        SharedZone::Bind(bind) => Rfc2136Provider::new(bind.config.clone()).unwrap(),
        SharedZone::Moto { .. } => unreachable!(),
    };
    let edited = |name: &str| {
        find(&published, &format!("{name}.{ZONE}"), RecordType::A)
            .unwrap()
            .clone()
    };
    let takeover = Endpoint::new(
        format!("a-taken.{ZONE}"),
        RecordType::Txt,
        [format!(
            "heritage=external-dns,external-dns/owner={EXTERNAL_DNS_OWNER},external-dns/resource=service/default/taken"
        )],
        300,
    );
    provider
        .apply(
            ZONE,
            &meridian_dns::changes::Changes {
                updates: vec![meridian_dns::changes::Update {
                    old: edited("api"),
                    new: a(&format!("api.{ZONE}"), "10.6.6.6"),
                }],
                deletes: vec![edited("www"), taken_txt],
                creates: vec![takeover.clone()],
            },
        )
        .await
        .unwrap();

    let repaired = wait_for_zone(&zone, "api and www put back", |z| {
        find(z, &format!("api.{ZONE}"), RecordType::A).is_some_and(|r| r.targets == ["10.0.0.1"])
            && find(z, &format!("www.{ZONE}"), RecordType::A)
                .is_some_and(|r| r.targets == ["10.0.0.2"])
    })
    .await?;
    let refusal =
        meridian_status(&client, "taken", |m| m.contains("owned by external-dns")).await?;
    assert!(refusal.contains(&format!("a-taken.{ZONE}")), "{refusal}");
    assert!(find(&repaired, &format!("a-taken.{ZONE}"), RecordType::Txt).is_some());
    assert!(
        !repaired
            .iter()
            .any(|r| r.dns_name.ends_with(&format!("-a-taken.{ZONE}"))),
        "Meridian does not re-vouch for what someone else took: {}",
        show(&repaired)
    );
    for name in ["api", "www"] {
        meridian_status(&client, name, |m| m.contains("published")).await?;
    }

    // Later verifications change nothing more: two more, so one began after the repair.
    counter_grows("two more zone verifications", 2, || {
        hub_counter(&hub, "meridian_zone_verifications_total{outcome=\"ok\"}")
    })
    .await?;
    // ...and whatever passes they woke have ended.
    Passes::of(&hub, "dnsrecord")
        .wait_for_more(&hub, "dnsrecord", 0)
        .await?;
    assert_eq!(
        zone.records().await,
        repaired,
        "no fight over the taken record"
    );
    hub.stop().await;
    Ok(())
}
