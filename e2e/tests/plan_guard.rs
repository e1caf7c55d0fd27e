//! Plan thresholds on a real API server, through the embedded nameserver: a change deleting
//! most of a zone's Meridian records is held (nothing of it applied, the answers unchanged, the
//! record and the ManagedZone say which plan and why), applied once when the zone's annotation
//! names it, and a deletion is never held.

use kube::api::{Api, DeleteParams, Patch, PatchParams};
use meridian_api::conditions;
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_controllers::decide::plan_guard::{APPROVE_ANNOTATION, HELD_REASON};
use meridian_e2e::example::{apply, dig_host_async, embedded_zone};
use meridian_e2e::{
    DEFAULT_PATIENCE, Error, Fleet, condition_becomes, eventually, record_ready_with,
};
use meridian_hub::run_command::{RunArgs, RunningHub};
use meridian_testkit::fixtures;
use serde_json::json;

const NAMESPACE: &str = "dns";

/// `hosts` A records below `root`, each answering `ip`.
fn endpoints(root: &str, hosts: usize, ip: &str) -> serde_json::Value {
    (0..hosts)
        .map(|i| json!({ "dnsName": format!("h{i}.{root}"), "recordType": "A", "recordTTL": 60, "targets": [ip] }))
        .collect()
}

async fn write_record(
    records: &Api<DNSRecord>,
    name: &str,
    hosts: usize,
    ip: &str,
) -> Result<(), Error> {
    let root = format!("{name}.guard.example");
    apply(
        records,
        fixtures::dns_record(NAMESPACE, name, "zone")
            .root_host(&root)
            .endpoints(endpoints(&root, hosts, ip))
            .json(),
    )
    .await?;
    Ok(())
}

/// The zone's `PlansHeld` message once its status is `held`.
async fn plans_held(zones: &Api<ManagedZone>, held: bool) -> Result<String, Error> {
    let status = if held { "True" } else { "False" };
    let what = format!("the zone's PlansHeld is {status}");
    let condition = condition_becomes(zones, "zone", conditions::PLANS_HELD, &what, |c| {
        c.status == status
    })
    .await?;
    Ok(condition.message)
}

fn ready_message(record: &DNSRecord) -> String {
    record
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == conditions::READY)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plan_over_the_zone_threshold_waits_for_approval() -> Result<(), Error> {
    let fleet = Fleet::builder().without_ocm().start().await?;
    let hub = fleet.hub.client();
    meridian_e2e::ensure_namespace(&hub, NAMESPACE).await?;
    let zones = embedded_zone(&hub, NAMESPACE, "guard.example").await?;
    let records: Api<DNSRecord> = Api::namespaced(hub.clone(), NAMESPACE);
    // Twelve Meridian records in the zone: ten of `big`, two of `small`.
    write_record(&records, "big", 10, "10.0.0.1").await?;
    write_record(&records, "small", 2, "10.0.0.1").await?;
    let running = RunningHub::start(&RunArgs::local(fleet.hub.kubeconfig_path()))
        .await
        .expect("the hub starts");
    let dns = running.nameserver;
    let answers = move |host: &'static str| async move { dig_host_async(dns, host, None).await };
    record_ready_with(&records, "big", "Published").await?;
    record_ready_with(&records, "small", "Published").await?;
    assert_eq!(answers("h9.big.guard.example").await, ["10.0.0.1"]);

    // A small change (2 of 12 records) goes out at once.
    write_record(&records, "small", 2, "10.0.0.2").await?;
    record_ready_with(&records, "small", "Published").await?;
    assert_eq!(answers("h1.small.guard.example").await, ["10.0.0.2"]);

    // Deleting 8 of the zone's 12 records is held: nothing of it applied.
    write_record(&records, "big", 2, "10.0.0.1").await?;
    let held = record_ready_with(&records, "big", HELD_REASON).await?;
    let message = ready_message(&held);
    eprintln!("held: {message}");
    assert!(message.contains("8 of the zone's 12"), "{message}");
    assert_eq!(
        held.status.as_ref().map(|s| s.endpoints.len()),
        Some(10),
        "status keeps what is published"
    );
    assert_eq!(answers("h9.big.guard.example").await, ["10.0.0.1"]);
    let plan = message
        .split_whitespace()
        .find(|word| word.starts_with("plan-"))
        .expect("the message names the plan")
        .to_string();
    let zone_message = plans_held(&zones, true).await?;
    eprintln!("zone: {zone_message}");
    assert!(zone_message.contains(&plan), "{zone_message}");
    assert!(
        meridian_e2e::has_event(&hub, NAMESPACE, HELD_REASON).await?,
        "an Event says the plan is held"
    );

    // Approved by name: applied.
    zones
        .patch(
            "zone",
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "annotations": { APPROVE_ANNOTATION: plan } } })),
        )
        .await?;
    record_ready_with(&records, "big", "Published").await?;
    eventually(
        "the approved deletion is answered",
        DEFAULT_PATIENCE,
        || async move {
            Ok(answers("h9.big.guard.example")
                .await
                .is_empty()
                .then_some(()))
        },
    )
    .await?;
    assert_eq!(answers("h1.big.guard.example").await, ["10.0.0.1"]);
    plans_held(&zones, false).await?;

    // Once: the annotation approves that plan only. The zone has 4 records now, under ten:
    // grow it back first (creations are never held), then a second large change waits again.
    write_record(&records, "big", 10, "10.0.0.1").await?;
    record_ready_with(&records, "big", "Published").await?;
    write_record(&records, "big", 10, "10.0.0.3").await?;
    let again = record_ready_with(&records, "big", HELD_REASON).await?;
    assert!(
        !ready_message(&again).contains(&plan),
        "another plan, another name"
    );
    assert_eq!(answers("h9.big.guard.example").await, ["10.0.0.1"]);

    // Deleting the record is intent: withdrawn at once, held plan or not.
    records.delete("big", &DeleteParams::default()).await?;
    eventually(
        "the deleted record is withdrawn",
        DEFAULT_PATIENCE,
        || async move {
            Ok(answers("h0.big.guard.example")
                .await
                .is_empty()
                .then_some(()))
        },
    )
    .await?;
    // The answers stop once the record is withdrawn; the object goes a moment later, when the
    // hub removes its finalizer (CI once saw it still there).
    eventually("the deleted record is gone", DEFAULT_PATIENCE, || {
        let records = records.clone();
        async move { Ok(records.get_opt("big").await?.is_none().then_some(())) }
    })
    .await?;
    assert_eq!(answers("h1.small.guard.example").await, ["10.0.0.2"]);
    running.stop().await;
    Ok(())
}
