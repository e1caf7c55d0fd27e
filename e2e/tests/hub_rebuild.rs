//! Ownership that outlives the hub's objects. A hub publishes to Route53 (moto) under owner IDs
//! that are configuration, never an object's UID:
//! - rebuilt from its exported manifests on a new API server and etcd (every object a new UID),
//!   it finds its records its own: no record deleted, duplicated or changed, no ownership record
//!   left behind, and the next change applied;
//! - upgraded from a hub that published under each record's UID, it adopts those records in
//!   one ownership-only batch per record, answers unchanged, and keeps the owner ID it derived
//!   (the `kube-system` UID) in its namespace.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, ResourceExt};
use meridian_api::conditions;
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_controllers::decide::convert::all_to_engine;
use meridian_controllers::zones::owners::hub_record_owner;
use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::plan::{PlanInput, Registry, plan};
use meridian_e2e::example::apply;
use meridian_e2e::route53::Route53Zone;
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, ensure_namespace, eventually};
use meridian_hub::run_command::RunningHub;
use meridian_providers::Provider;
use meridian_testkit::fixtures;
use serde_json::{Value, json};

const NAMESPACE: &str = "team-a";
const DOMAIN: &str = "rebuild.example";
const RECORDS: [&str; 2] = ["api", "shop"];
const CHANGES: &str = "ChangeResourceRecordSets";

/// The tenant's objects: provider Secret, ManagedZone and two DNSRecords, one a weighted set
/// (set identifiers and routing properties on its ownership records too).
async fn tenant(client: &Client, route53: &Route53Zone) -> Result<(), Error> {
    ensure_namespace(client, NAMESPACE).await?;
    apply(
        &Api::<Secret>::namespaced(client.clone(), NAMESPACE),
        route53.secret(NAMESPACE, "route53"),
    )
    .await?;
    apply(
        &Api::<ManagedZone>::namespaced(client.clone(), NAMESPACE),
        fixtures::managed_zone(NAMESPACE, "zone", DOMAIN)
            .at_provider("route53")
            .json(),
    )
    .await?;
    let records = Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE);
    let weighted = |set: &str, weight: &str| {
        json!({
            "dnsName": "klb.api.rebuild.example", "recordType": "CNAME", "recordTTL": 60,
            "setIdentifier": set, "providerSpecific": [{ "name": "weight", "value": weight }],
            "targets": [format!("{set}.klb.api.rebuild.example")],
        })
    };
    let a = |name: &str, ip: &str| json!({ "dnsName": name, "recordType": "A", "recordTTL": 60, "targets": [ip] });
    apply(
        &records,
        json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
            "metadata": { "name": "api", "namespace": NAMESPACE },
            "spec": {
                "rootHost": "api.rebuild.example", "managedZone": { "name": "zone" },
                "endpoints": [
                    { "dnsName": "api.rebuild.example", "recordType": "CNAME", "recordTTL": 300,
                      "targets": ["klb.api.rebuild.example"] },
                    weighted("a", "100"), weighted("b", "50"),
                    a("a.klb.api.rebuild.example", "192.0.2.1"),
                    a("b.klb.api.rebuild.example", "192.0.2.2"),
                ],
            },
        }),
    )
    .await?;
    shop(client, &["192.0.2.7", "192.0.2.8"]).await
}

async fn shop(client: &Client, ips: &[&str]) -> Result<(), Error> {
    apply(
        &Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE),
        json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
            "metadata": { "name": "shop", "namespace": NAMESPACE },
            "spec": {
                "rootHost": "shop.rebuild.example", "managedZone": { "name": "zone" },
                "endpoints": [{ "dnsName": "shop.rebuild.example", "recordType": "A",
                                "recordTTL": 60, "targets": ips }],
            },
        }),
    )
    .await?;
    Ok(())
}

/// Waits until every record is published (`Ready`, for its generation) under its expected
/// owner ID.
async fn published_as(client: &Client, hub_owner: &str) -> Result<(), Error> {
    let records = Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE);
    for name in RECORDS {
        let owner = hub_record_owner(hub_owner, NAMESPACE, name);
        let waited = eventually(
            &format!("{name} is published as {owner}"),
            DEFAULT_PATIENCE,
            || async {
                let record = records.get(name).await?;
                Ok(record
                    .status
                    .as_ref()
                    .filter(|s| {
                        s.observed_generation == record.metadata.generation
                            && s.owner_id.as_deref() == Some(owner.as_str())
                            && conditions::condition_status(&s.conditions, conditions::READY)
                                == Some(true)
                    })
                    .map(drop))
            },
        )
        .await;
        if waited.is_err() {
            eprintln!("{name}: {:#?}", records.get(name).await?.status);
        }
        waited?;
    }
    Ok(())
}

/// The owners of the zone's ownership records, and the ownership records vouching for no
/// record (orphans).
fn ownership(zone: &[Endpoint]) -> (BTreeSet<String>, Vec<String>) {
    let registry = Registry::read(zone);
    let owners = registry
        .ownership
        .values()
        .flat_map(|owners| owners.keys().cloned())
        .collect();
    let orphans = registry
        .ownership
        .iter()
        .filter(|(key, _)| !registry.records.contains_key(*key))
        .map(|(key, _)| format!("{key:?}"))
        .collect();
    (owners, orphans)
}

fn records_only(zone: &[Endpoint]) -> Vec<Endpoint> {
    zone.iter()
        .filter(|e| !e.dns_name.starts_with("kuadrant-"))
        .cloned()
        .collect()
}

/// The tenant's objects as `kubectl get -o yaml` exports them for a re-apply: spec and data,
/// name, namespace, labels and annotations; no UID, version, status or server fields.
async fn export(client: &Client) -> Result<Vec<Value>, Error> {
    fn clean(object: impl serde::Serialize) -> Value {
        let mut value = serde_json::to_value(object).expect("serializable");
        let metadata = value["metadata"].take();
        let mut kept = json!({});
        for field in ["name", "namespace", "labels", "annotations"] {
            if !metadata[field].is_null() {
                kept[field] = metadata[field].clone();
            }
        }
        value["metadata"] = kept;
        value.as_object_mut().expect("an object").remove("status");
        value
    }
    let mut exported = vec![clean(
        Api::<Secret>::namespaced(client.clone(), NAMESPACE)
            .get("route53")
            .await?,
    )];
    let all = Default::default();
    let zones = Api::<ManagedZone>::namespaced(client.clone(), NAMESPACE);
    exported.extend(zones.list(&all).await?.items.into_iter().map(clean));
    let records = Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE);
    exported.extend(records.list(&all).await?.items.into_iter().map(clean));
    Ok(exported)
}

async fn reapply(client: &Client, exported: Vec<Value>) -> Result<(), Error> {
    ensure_namespace(client, NAMESPACE).await?;
    for object in exported {
        match object["kind"].as_str() {
            Some("Secret") => drop(
                apply(
                    &Api::<Secret>::namespaced(client.clone(), NAMESPACE),
                    object,
                )
                .await?,
            ),
            Some("ManagedZone") => drop(
                apply(
                    &Api::<ManagedZone>::namespaced(client.clone(), NAMESPACE),
                    object,
                )
                .await?,
            ),
            Some("DNSRecord") => drop(
                apply(
                    &Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE),
                    object,
                )
                .await?,
            ),
            kind => panic!("exported an unexpected kind {kind:?}"),
        }
    }
    Ok(())
}

async fn uids(client: &Client) -> Result<BTreeSet<String>, Error> {
    Ok(Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|r| r.uid())
        .collect())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_rebuilt_from_its_manifests_takes_its_records_back() -> Result<(), Error> {
    const OWNER_ID: &str = "prod-hub-eu";
    let route53 = Route53Zone::start(DOMAIN).await;
    let fleet = Fleet::builder().without_ocm().start().await?;
    let client = fleet.hub.client();
    tenant(&client, &route53).await?;
    let mut args = route53.hub_args(fleet.hub.kubeconfig_path());
    args.owner_id = Some(OWNER_ID.into());
    let hub = RunningHub::start(&args).await.expect("the hub starts");
    published_as(&client, OWNER_ID).await?;
    let before = route53.records().await;
    let (owners, orphans) = ownership(&before);
    let expected_owners: BTreeSet<String> = RECORDS
        .iter()
        .map(|name| hub_record_owner(OWNER_ID, NAMESPACE, name))
        .collect();
    assert_eq!(owners, expected_owners);
    assert!(orphans.is_empty(), "{orphans:?}");
    println!(
        "published: {} records at Route53 ({} of them ownership records)",
        before.len(),
        before.len() - records_only(&before).len()
    );

    // The hub's control plane and etcd are destroyed; a new one gets the exported manifests.
    let exported = export(&client).await?;
    let uids_before = uids(&client).await?;
    hub.stop().await;
    drop(fleet);
    let fleet = Fleet::builder().without_ocm().start().await?;
    let client = fleet.hub.client();
    reapply(&client, exported).await?;
    let uids_after = uids(&client).await?;
    assert!(
        uids_before.is_disjoint(&uids_after),
        "every record has a new UID: {uids_before:?} {uids_after:?}"
    );
    route53.proxy.reset();
    let mut args = route53.hub_args(fleet.hub.kubeconfig_path());
    args.owner_id = Some(OWNER_ID.into());
    let hub = RunningHub::start(&args)
        .await
        .expect("the rebuilt hub starts");
    published_as(&client, OWNER_ID).await?;
    let calls = route53.proxy.calls();
    println!("the rebuilt hub's calls until every record was published: {calls:?}");
    assert_eq!(
        calls.get(CHANGES),
        None,
        "the rebuilt hub changed nothing at Route53"
    );
    assert!(
        calls
            .keys()
            .any(|action| action.starts_with("ListResourceRecordSets")),
        "it read the zone: {calls:?}"
    );
    let after = route53.records().await;
    assert_eq!(after, before, "no record deleted, duplicated or changed");

    // The next change is applied, over the same records.
    shop(&client, &["192.0.2.9"]).await?;
    eventually("shop changes at Route53", DEFAULT_PATIENCE, || async {
        let held = route53.held().await;
        Ok(held
            .contains(&(
                "shop.rebuild.example".to_string(),
                vec!["192.0.2.9".to_string()],
            ))
            .then_some(()))
    })
    .await?;
    let changed = route53.records().await;
    let (owners, orphans) = ownership(&changed);
    assert_eq!(owners, expected_owners, "no owner beside the hub's");
    assert!(
        orphans.is_empty(),
        "no ownership record left behind: {orphans:?}"
    );
    assert_eq!(
        changed.len(),
        before.len(),
        "the change replaced, added nothing"
    );
    println!(
        "after the change: {} records, {:?} calls",
        changed.len(),
        route53.proxy.calls()
    );
    hub.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraded_hub_adopts_what_it_published_under_record_uids() -> Result<(), Error> {
    let route53 = Route53Zone::start(DOMAIN).await;
    let fleet = Fleet::builder().without_ocm().start().await?;
    let client = fleet.hub.client();
    tenant(&client, &route53).await?;

    // What a hub before owner IDs left: each record's tree under its UID, and its status.
    let records = Api::<DNSRecord>::namespaced(client.clone(), NAMESPACE);
    for name in RECORDS {
        let record = records.get(name).await?;
        let uid = record.uid().expect("a UID");
        let desired = all_to_engine(&record.spec.endpoints);
        let root_host = record.spec.root_host.clone();
        let zone = route53.records().await;
        let planned = plan(
            &PlanInput {
                owner: &uid,
                root_host: &root_host,
                desired: &desired,
                previous: None,
            },
            &zone,
        );
        route53
            .direct
            .apply(&route53.zone_id, &planned.changes)
            .await
            .expect("moto applies the old hub's plan");
        records
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": {
                    "observedGeneration": record.metadata.generation,
                    "endpoints": record.spec.endpoints,
                    "domainOwners": [uid],
                    "conditions": [{
                        "type": "Ready", "status": "True", "reason": "Published",
                        "message": "published by the hub before owner IDs",
                        "lastTransitionTime": "2026-01-01T00:00:00Z",
                        "observedGeneration": record.metadata.generation,
                    }],
                }})),
            )
            .await?;
    }
    let before = route53.records().await;
    let uids: BTreeSet<String> = uids(&client).await?;
    assert_eq!(
        ownership(&before).0,
        uids,
        "the old hub's owners are the UIDs"
    );

    // The new hub, no owner ID configured: the hub cluster's kube-system UID.
    route53.proxy.reset();
    let hub = RunningHub::start(&route53.hub_args(fleet.hub.kubeconfig_path()))
        .await
        .expect("the hub starts");
    let cluster = Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await?
        .uid()
        .expect("kube-system has a UID");
    assert_eq!(
        meridian_e2e::hub_owner_id(&client, "kube-system").await?,
        cluster,
        "the derived owner ID is kept in the hub's namespace"
    );
    published_as(&client, &cluster).await?;
    let after = route53.records().await;
    let calls = route53.proxy.calls();
    println!(
        "adopted {} records at Route53 with calls {calls:?}",
        records_only(&after).len()
    );
    assert_eq!(
        records_only(&after),
        records_only(&before),
        "no answer changed"
    );
    assert_eq!(after.len(), before.len());
    let (owners, orphans) = ownership(&after);
    let expected: BTreeSet<String> = RECORDS
        .iter()
        .map(|name| hub_record_owner(&cluster, NAMESPACE, name))
        .collect();
    assert_eq!(
        owners, expected,
        "every ownership record moved to the new owners"
    );
    assert!(orphans.is_empty(), "{orphans:?}");
    assert_eq!(
        calls.get(CHANGES),
        Some(&(RECORDS.len() as u64)),
        "one ownership batch per record, and nothing else"
    );
    assert!(
        after
            .iter()
            .filter(|e| e.record_type == RecordType::Txt)
            .all(|txt| uids
                .iter()
                .all(|uid| !txt.targets.concat().contains(uid.as_str()))),
        "no ownership record names a UID"
    );
    hub.stop().await;
    Ok(())
}
