//! Objects the hub cannot decode, on a real API server: a DNSPolicy and a DNSRecord written
//! under a looser CRD than the hub's (as when another version of Meridian's CRDs is installed)
//! are each reported (an Event on the object, a count per kind) and skipped, while the other
//! records of the zone publish; once mended, the record publishes too; unreadable again, what
//! it published stays; deleted while unreadable, it withdraws and goes.
//!
//! Without the guard in the watch, one such object fails every list of its kind: the hub never
//! becomes ready and no record publishes. The hub runs on an API server that serves no
//! ListenerSet, which it must not wait for either.

use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use meridian_api::kuadrant::{DNSPolicy, DNSRecord};
use meridian_controllers::runtime::caches::UNDECODABLE_REASON;
use meridian_e2e::example::{apply, dig_host_async, embedded_zone};
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, eventually, record_ready_with};
use meridian_hub::run_command::{RunArgs, RunningHub};
use meridian_testkit::fixtures;
use serde_json::json;

const NAMESPACE: &str = "dns";

/// Replaces the `spec` schema of a CRD with one that takes anything, as a CRD of another
/// version might: the API server then stores objects the hub's types cannot read.
async fn loosen_spec(crds: &Api<CustomResourceDefinition>, name: &str) -> Result<(), Error> {
    let patch = json!([{
        "op": "replace",
        "path": "/spec/versions/0/schema/openAPIV3Schema/properties/spec",
        "value": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
    }]);
    crds.patch(
        name,
        &PatchParams::default(),
        &Patch::<()>::Json(serde_json::from_value(patch).expect("a JSON patch")),
    )
    .await?;
    Ok(())
}

/// The API of `K` in the test's namespace, with objects read as they are (Meridian's types
/// cannot read the ones this test writes).
fn raw_api<K: kube::Resource<DynamicType = ()>>(client: &kube::Client) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), NAMESPACE, &ApiResource::erase::<K>(&()))
}

/// Applies `object` without reading the answer into Meridian's types (which cannot read it).
async fn apply_raw<K: kube::Resource<DynamicType = ()>>(
    client: &kube::Client,
    object: serde_json::Value,
) -> Result<(), Error> {
    let api = raw_api::<K>(client);
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.patch(
        &name,
        &PatchParams::apply(meridian_e2e::FIELD_MANAGER).force(),
        &Patch::Apply(object),
    )
    .await?;
    Ok(())
}

fn record(name: &str, ip: &str) -> serde_json::Value {
    let root = format!("{name}.skew.example");
    fixtures::dns_record(NAMESPACE, name, "zone")
        .root_host(&root)
        .endpoint(&root, "A", &[ip])
        .json()
}

/// The note of the Event saying that `kind` `name` cannot be decoded, once there is one.
async fn undecodable_event(events: &Api<Event>, kind: &str, name: &str) -> Result<String, Error> {
    eventually(
        &format!("an {UNDECODABLE_REASON} Event on {kind} {name}"),
        DEFAULT_PATIENCE,
        || {
            let events = events.clone();
            async move {
                let list = events.list(&Default::default()).await?;
                Ok(list.items.into_iter().find_map(|event| {
                    let regarding = event.regarding.as_ref()?;
                    (event.reason.as_deref() == Some(UNDECODABLE_REASON)
                        && regarding.kind.as_deref() == Some(kind)
                        && regarding.name.as_deref() == Some(name))
                    .then(|| event.note.unwrap_or_default())
                }))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_the_hub_cannot_decode_are_reported_and_skipped() -> Result<(), Error> {
    let fleet = Fleet::builder().without_ocm().start().await?;
    let hub = fleet.hub.client();
    meridian_e2e::ensure_namespace(&hub, NAMESPACE).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(hub.clone());
    loosen_spec(&crds, "dnspolicies.kuadrant.io").await?;
    loosen_spec(&crds, "dnsrecords.kuadrant.io").await?;

    embedded_zone(&hub, NAMESPACE, "skew.example").await?;
    let records: Api<DNSRecord> = Api::namespaced(hub.clone(), NAMESPACE);
    // The API server takes both (the loosened CRDs allow them); the hub's types cannot read
    // either. Retried while the API server picks up the loosened schemas.
    eventually("the API server takes the objects", DEFAULT_PATIENCE, || {
        let hub = hub.clone();
        async move {
            let policy = apply_raw::<DNSPolicy>(
                &hub,
                json!({
                    "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
                    "metadata": { "name": "broken", "namespace": NAMESPACE },
                    "spec": { "targetRef": "not an object" },
                }),
            )
            .await;
            let mut broken = record("broken", "10.0.0.9");
            broken["spec"]["endpoints"] = json!("not a list");
            let record = apply_raw::<DNSRecord>(&hub, broken).await;
            Ok((policy.is_ok() && record.is_ok()).then_some(()))
        }
    })
    .await?;
    // Neither is readable: a typed read of either fails, and so does a typed list of its kind
    // (what an unguarded watch starts with, and retries forever).
    let policies: Api<DNSPolicy> = Api::namespaced(hub.clone(), NAMESPACE);
    assert!(policies.get("broken").await.is_err());
    assert!(records.get("broken").await.is_err());
    assert!(policies.list(&Default::default()).await.is_err());
    assert!(records.list(&Default::default()).await.is_err());
    apply(&records, record("good", "10.0.0.1")).await?;
    // An API server that serves no ListenerSet (Gateway API before v1.5): the hub reads none,
    // and waits for nothing, rather than never becoming ready.
    crds.delete(
        "listenersets.gateway.networking.k8s.io",
        &Default::default(),
    )
    .await?;
    eventually("ListenerSets are not served", DEFAULT_PATIENCE, || {
        let sets: Api<meridian_api::upstream::ListenerSet> = Api::all(hub.clone());
        async move {
            match sets.list(&Default::default()).await {
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(Some(())),
                _ => Ok(None),
            }
        }
    })
    .await?;

    let running = RunningHub::start(&RunArgs::local(fleet.hub.kubeconfig_path()))
        .await
        .expect("the hub starts");
    let dns = running.nameserver;
    let answers = move |host: &'static str| async move { dig_host_async(dns, host, None).await };

    // The readable record publishes beside the unreadable objects.
    record_ready_with(&records, "good", "Published").await?;
    assert_eq!(answers("good.skew.example").await, ["10.0.0.1"]);

    // Each unreadable object is reported where its owners look, and counted once.
    let events: Api<Event> = Api::namespaced(hub.clone(), NAMESPACE);
    let note = undecodable_event(&events, "DNSPolicy", "broken").await?;
    eprintln!("policy: {note}");
    assert!(note.contains("cannot read this DNSPolicy"), "{note}");
    let note = undecodable_event(&events, "DNSRecord", "broken").await?;
    eprintln!("record: {note}");
    assert!(note.contains("cannot read this DNSRecord"), "{note}");
    let counts = running.context.caches.undecodable();
    assert!(counts.contains(&("DNSPolicy", 1)), "{counts:?}");
    assert!(counts.contains(&("DNSRecord", 1)), "{counts:?}");
    assert!(
        counts.contains(&("ManagedZone", 0)),
        "readable kinds count nothing: {counts:?}"
    );

    // A record written after them flows through the same watch.
    apply(&records, record("later", "10.0.0.2")).await?;
    record_ready_with(&records, "later", "Published").await?;
    assert_eq!(answers("later.skew.example").await, ["10.0.0.2"]);

    // Mended, the unreadable record is read and published like any other.
    apply(&records, record("broken", "10.0.0.9")).await?;
    record_ready_with(&records, "broken", "Published").await?;
    assert_eq!(answers("broken.skew.example").await, ["10.0.0.9"]);
    assert!(
        running
            .context
            .caches
            .undecodable()
            .contains(&("DNSRecord", 1)),
        "a mended object is not counted again"
    );

    // Unreadable again: what it published stays published, from its last readable copy.
    let mut broken = record("broken", "10.0.0.9");
    broken["spec"]["endpoints"] = json!("not a list");
    apply_raw::<DNSRecord>(&hub, broken).await?;
    eventually(
        "the hub sees the unreadable version",
        DEFAULT_PATIENCE,
        || async {
            let counts = running.context.caches.undecodable();
            Ok(counts.contains(&("DNSRecord", 2)).then_some(()))
        },
    )
    .await?;
    assert_eq!(answers("broken.skew.example").await, ["10.0.0.9"]);

    // Deleted while unreadable: the deletion is evidence. The record's finalizer withdraws
    // what it published and lets it go.
    let raw_records = raw_api::<DNSRecord>(&hub);
    raw_records.delete("broken", &Default::default()).await?;
    eventually(
        "the unreadable record is deleted",
        DEFAULT_PATIENCE,
        || async { Ok(raw_records.get_opt("broken").await?.is_none().then_some(())) },
    )
    .await?;
    assert_eq!(answers("broken.skew.example").await, Vec::<String>::new());
    assert_eq!(answers("good.skew.example").await, ["10.0.0.1"]);
    Ok(())
}
