//! A signed embedded zone through the hub, validated by Unbound: the leader makes the zone's
//! keys (a Secret) and puts the DS in the ManagedZone's status; a standby replica signs with
//! the same keys; GEO answers validate from Ireland, the US and France at either replica; a
//! ZSK rollover runs while clients keep asking, and every answer on the way validates; both
//! replicas serve one serial; a key Secret deleted by mistake stops nothing and makes no new
//! keys; the standby takes over the lead with the same keys.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use meridian_api::conditions;
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_e2e::example::{
    apply, dig_validated, embedded_zone, one_serial_everywhere, sign_zone,
};
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, Passes, eventually};
use meridian_hub::run_command::{RunArgs, RunningHub};
use meridian_testkit::fixtures;
use meridian_testkit::unbound::ValidatingResolver;
use serde_json::json;

const NAMESPACE: &str = "dns";
/// Where `RunArgs::local` keeps what the hub makes (its Lease, seal and zone keys).
const HUB_NAMESPACE: &str = "kube-system";
const DOMAIN: &str = "signed.example";
const HOST: &str = "api.signed.example";
/// Client subnets the GEO database places in Ireland, the US and France, and what each gets.
const PLACES: [(&str, &str, &str); 3] = [
    ("Ireland", "192.0.2.0/24", "10.0.0.1"),
    ("the US", "198.51.100.0/24", "10.0.0.2"),
    ("France", "100.64.0.0/24", "10.0.0.3"),
];

fn hub_args(kubeconfig: &std::path::Path, geoip: &std::path::Path) -> RunArgs {
    RunArgs {
        lease_seconds: 3,
        geoip: Some(geoip.to_path_buf()),
        ..RunArgs::local(kubeconfig)
    }
}

/// A GEO set at `api`: Ireland, the US, the rest of Europe; a catch-all to Ireland.
fn geo_endpoints() -> serde_json::Value {
    let mut endpoints = Vec::new();
    for (code, leaf, address) in [
        ("IE", "ie", "10.0.0.1"),
        ("US", "us", "10.0.0.2"),
        ("GEO-EU", "eu", "10.0.0.3"),
        ("*", "ie", "10.0.0.1"),
    ] {
        let set = if code == "*" { "default" } else { code };
        endpoints.push(json!({
            "dnsName": HOST, "recordType": "CNAME", "recordTTL": 5,
            "targets": [format!("{leaf}.{HOST}")], "setIdentifier": set,
            "providerSpecific": [{ "name": "geo-code", "value": code }],
        }));
        if code != "*" {
            endpoints.push(json!({
                "dnsName": format!("{leaf}.{HOST}"), "recordType": "A", "recordTTL": 5,
                "targets": [address],
            }));
        }
    }
    serde_json::Value::Array(endpoints)
}

async fn ask_async(
    resolver: SocketAddr,
    name: &'static str,
    qtype: &'static str,
    subnet: Option<&'static str>,
) -> (bool, Vec<String>) {
    tokio::task::spawn_blocking(move || dig_validated(resolver, name, qtype, subnet))
        .await
        .unwrap()
}

async fn zone_dnssec(
    zones: &Api<ManagedZone>,
) -> Result<meridian_api::kuadrant::ZoneDnssecStatus, Error> {
    Ok(zones
        .get("zone")
        .await?
        .status
        .and_then(|s| s.dnssec)
        .unwrap_or_default())
}

/// Waits until `resolver` validates an answer for the test's host, asked from `subnet` (the
/// zone is signed and served by then).
async fn first_validates(
    resolver: &ValidatingResolver,
    subnet: &'static str,
    what: &str,
) -> Result<(), Error> {
    let address = resolver.address;
    eventually(
        &format!("{what}'s answers validate"),
        DEFAULT_PATIENCE,
        || async move {
            let (validated, addresses) =
                ask_async(address, "api.signed.example.", "A", Some(subnet)).await;
            Ok((validated && !addresses.is_empty()).then_some(()))
        },
    )
    .await
}

/// Every place's answer validates and is the place's address, at `resolver`.
async fn geo_validates(resolver: &ValidatingResolver, what: &str) {
    for (place, subnet, expected) in PLACES {
        let (validated, addresses) =
            ask_async(resolver.address, "api.signed.example.", "A", Some(subnet)).await;
        assert!(
            validated,
            "{what}: from {place}, not validated; Unbound:\n{}",
            resolver.log()
        );
        assert_eq!(addresses, [expected], "{what}: from {place}");
    }
    for (name, qtype) in [
        ("missing.signed.example.", "A"),
        ("api.signed.example.", "MX"),
    ] {
        let (validated, addresses) = ask_async(resolver.address, name, qtype, None).await;
        assert!(
            validated && addresses.is_empty(),
            "{what}: {name} {qtype} denial not validated"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_zone_validates_at_every_replica_through_a_rollover_and_a_leader_change()
-> Result<(), Error> {
    meridian_e2e::test_logs("warn,meridian_controllers=info");
    let fleet = Fleet::builder().without_ocm().start().await?;
    let hub = fleet.hub.client();
    meridian_e2e::ensure_namespace(&hub, NAMESPACE).await?;
    let geoip_dir = tempfile::tempdir().unwrap();
    let geoip = geoip_dir.path().join("country.mmdb");
    std::fs::write(
        &geoip,
        meridian_testkit::geo_db::write_database(&[
            ("192.0.2.0/24".parse().unwrap(), "IE", "EU"),
            ("198.51.100.0/24".parse().unwrap(), "US", "NA"),
            ("100.64.0.0/24".parse().unwrap(), "FR", "EU"),
        ]),
    )
    .unwrap();
    let zones = embedded_zone(&hub, NAMESPACE, DOMAIN).await?;
    apply(
        &Api::<DNSRecord>::namespaced(hub.clone(), NAMESPACE),
        fixtures::dns_record(NAMESPACE, "api", "zone")
            .root_host(HOST)
            .endpoints(geo_endpoints())
            .json(),
    )
    .await?;

    let leader = RunningHub::start(&hub_args(fleet.hub.kubeconfig_path(), &geoip))
        .await
        .expect("the leader starts");
    // DNSSEC on once the zone is served; rollover steps of 8 s (the DNSKEY TTL follows at
    // 4 s, so a resolver sees each step in time). Steps are timed in whole seconds and reach
    // the standby through a Secret watch, so a step can be a second short and seen late by a
    // loaded API server: with 4 s steps the margin over the TTL was barely a second.
    let ds = sign_zone(&hub, NAMESPACE, "zone", Some("8s")).await?;
    let first = zone_dnssec(&zones).await?;
    eprintln!("status.dnssec.ds: {ds}");
    assert_eq!(first.algorithm.as_deref(), Some("ECDSAP256SHA256"));
    assert_eq!(first.rollover.as_deref(), Some("Stable"));
    // The keys are kept in the hub's namespace (`RunArgs::local`'s), never beside the zone
    // where its team could read the key-signing key.
    let keys_name = meridian_controllers::zones::dnssec_keys::keys_secret_name(NAMESPACE, "zone");
    let secret = Api::<Secret>::namespaced(hub.clone(), HUB_NAMESPACE)
        .get(&keys_name)
        .await?;
    assert_eq!(secret.type_.as_deref(), Some("meridian.io/dnssec-keys"));
    assert!(
        Api::<Secret>::namespaced(hub.clone(), NAMESPACE)
            .get_opt("zone-dnssec")
            .await?
            .is_none()
    );

    let standby = RunningHub::start(&hub_args(fleet.hub.kubeconfig_path(), &geoip))
        .await
        .expect("the standby starts");
    eventually("the standby is ready", DEFAULT_PATIENCE, || async {
        Ok(standby.is_ready().then_some(()))
    })
    .await?;
    assert!(leader.is_leading() && !standby.is_leading());
    // One resolver per replica, so each replica's signatures are what is validated.
    let at_leader = ValidatingResolver::start(DOMAIN, &[leader.nameserver], &ds)
        .await
        .map_err(Error::Component)?;
    let at_standby = ValidatingResolver::start(DOMAIN, &[standby.nameserver], &ds)
        .await
        .map_err(Error::Component)?;
    first_validates(&at_leader, PLACES[0].1, "the leader").await?;
    geo_validates(&at_leader, "the leader").await;
    first_validates(&at_standby, PLACES[1].1, "the standby").await?;
    geo_validates(&at_standby, "the standby").await;

    // A ZSK rollover while clients ask both replicas every 100 ms: no answer may fail.
    let asking = Arc::new(AtomicBool::new(true));
    let (asked, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut clients = Vec::new();
    for (resolver, (_, subnet, expected)) in [
        (at_leader.address, PLACES[0]),
        (at_standby.address, PLACES[2]),
    ] {
        let (asking, asked, failed) = (asking.clone(), asked.clone(), failed.clone());
        clients.push(tokio::spawn(async move {
            while asking.load(Ordering::Relaxed) {
                let (validated, addresses) =
                    ask_async(resolver, "api.signed.example.", "A", Some(subnet)).await;
                asked.fetch_add(1, Ordering::Relaxed);
                if !validated || addresses != [expected] {
                    failed.fetch_add(1, Ordering::Relaxed);
                    eprintln!("{resolver} from {subnet}: validated {validated}, {addresses:?}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }));
    }
    zones
        .patch(
            "zone",
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "dnssec": { "zskRollover": "first" } } })),
        )
        .await?;
    let started = Instant::now();
    let mut timeline = Vec::new();
    let mut phase = String::from("Stable");
    let finished = loop {
        let dnssec = zone_dnssec(&zones).await?;
        let now = dnssec.rollover.clone().unwrap_or_default();
        if now != phase {
            timeline.push(format!(
                "{:5.1} s: {now}, ZSK {:?} signs, DNSKEY tags {:?}",
                started.elapsed().as_secs_f64(),
                dnssec.zsk_tag,
                dnssec.published_tags
            ));
            phase = now.clone();
        }
        if now == "Stable" && dnssec.zsk_tag != first.zsk_tag {
            break dnssec;
        }
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "the rollover did not end: {timeline:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    // Clients keep asking a while after the old key is gone.
    tokio::time::sleep(Duration::from_secs(3)).await;
    asking.store(false, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    eprintln!("rollover timeline:\n  {}", timeline.join("\n  "));
    let (asked, failed) = (
        asked.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
    eprintln!("{asked} validated queries during the rollover, {failed} failed");
    assert_eq!(failed, 0, "every answer validated through the rollover");
    assert!(asked > 20, "{asked}");
    assert_eq!(
        timeline
            .iter()
            .map(|t| t.split(": ").nth(1).unwrap().split(',').next().unwrap())
            .collect::<Vec<_>>(),
        ["Prepublished", "Switched", "Stable"]
    );
    assert_eq!(
        finished.ds.as_deref(),
        Some(ds.as_str()),
        "a ZSK rollover leaves the DS alone"
    );
    assert_eq!(finished.published_tags.len(), 2, "the old ZSK is withdrawn");
    geo_validates(&at_standby, "the standby after the rollover").await;
    // Both replicas serve one serial, the leader's, through the keys' changes.
    let serial =
        one_serial_everywhere(&zones, "zone", [leader.nameserver, standby.nameserver]).await?;
    eprintln!("after the rollover both replicas serve serial {serial}");

    // The key Secret deleted by mistake: the leader makes no new keys (they would not match the
    // DS in the parent) and says so in status, and both replicas go on signing with the keys
    // they had. Put back, it is taken up again.
    let secrets = Api::<Secret>::namespaced(hub.clone(), HUB_NAMESPACE);
    let backup = secrets.get(&keys_name).await?;
    secrets.delete(&keys_name, &Default::default()).await?;
    let ready = |reason: &'static str| {
        let zones = zones.clone();
        move || {
            let zones = zones.clone();
            async move {
                let zone = zones.get("zone").await?;
                let ready = zone
                    .status
                    .iter()
                    .flat_map(|s| s.conditions.iter())
                    .find(|c| c.type_ == conditions::READY)
                    .is_some_and(|c| c.reason == reason);
                Ok(ready.then_some(()))
            }
        }
    };
    eventually(
        "the zone says its keys are gone",
        DEFAULT_PATIENCE,
        ready("DNSSECKeysUnavailable"),
    )
    .await?;
    assert!(
        secrets.get_opt(&keys_name).await?.is_none(),
        "no new keys were made"
    );
    geo_validates(&at_leader, "the leader without the key Secret").await;
    geo_validates(&at_standby, "the standby without the key Secret").await;
    let restored = Secret {
        metadata: ObjectMeta {
            name: backup.metadata.name.clone(),
            namespace: backup.metadata.namespace.clone(),
            labels: backup.metadata.labels.clone(),
            annotations: backup.metadata.annotations.clone(),
            ..Default::default()
        },
        type_: backup.type_.clone(),
        data: backup.data.clone(),
        ..Default::default()
    };
    secrets.create(&PostParams::default(), &restored).await?;
    eventually(
        "the zone is served with its keys again",
        DEFAULT_PATIENCE,
        ready("Serving"),
    )
    .await?;
    assert_eq!(zone_dnssec(&zones).await?.ds.as_deref(), Some(ds.as_str()));

    // The leader goes: the standby leads with the same keys.
    leader.stop().await;
    eventually("the standby leads", DEFAULT_PATIENCE, || async {
        Ok(standby.is_leading().then_some(()))
    })
    .await?;
    // The new leader has replanned the record (as a standby it reconciled nothing).
    Passes { begun: 0, ended: 0 }
        .wait_for_more(&standby, "dnsrecord", 1)
        .await?;
    geo_validates(&at_standby, "the new leader").await;
    assert_eq!(
        zone_dnssec(&zones).await?.ds.as_deref(),
        Some(ds.as_str()),
        "the same keys"
    );
    standby.stop().await;
    Ok(())
}
