//! What enforcing a policy writes: its DNSRecords (only where the cache differs) and the
//! Gateway's `DNSPolicyAffected` condition.

use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use meridian_api::kuadrant::{DNSPolicy, DNSRecord};
use serde_json::json;

use super::gather::records_of;
use crate::decide::convert::{all_to_api, all_to_engine};
use crate::decide::desired::Desired;
use crate::reconcile::context::delete_if_unchanged;
use crate::{Context, Error, POLICY_LABEL};

/// Applies the desired DNSRecords and deletes the policy's others, but those `handed_over` to
/// the policies now holding their listeners (each takes its record over in place); returns the
/// records as they are now, and the records left alone because another owner holds their name
/// (name, and why; read from the API server before the first write, since the cache may not
/// show them: in distributed mode it holds only the agents' records).
pub async fn write_records(
    policy: &DNSPolicy,
    desired: &Desired,
    handed_over: &[String],
    ctx: &Context,
) -> Result<(Vec<DNSRecord>, Vec<(String, String)>), Error> {
    let namespace = policy.namespace().unwrap_or_default();
    let api: Api<DNSRecord> = Api::namespaced(ctx.client.clone(), &namespace);
    let existing = records_of(policy, ctx);
    let owner = policy
        .controller_owner_ref(&())
        .expect("a stored policy has a UID");
    let mut records = Vec::new();
    let mut refused: Vec<(String, String)> = Vec::new();
    for wanted in &desired.records {
        // A host is pointed into a routing delegate only with its tree there: when another
        // owner holds the delegated half's name (written first), the zone's half stays as it is.
        let delegated = crate::decide::desired::delegated_record_name(&wanted.name);
        if let Some((_, note)) = refused.iter().find(|(name, _)| *name == delegated) {
            let note = note.clone();
            refused.push((wanted.name.clone(), note));
            continue;
        }
        if let Some(old) = existing.iter().find(|r| r.name_any() == wanted.name)
            && (old.spec.root_host != wanted.root_host || old.spec.managed_zone.name != wanted.zone)
        {
            // rootHost is immutable: the old record withdraws its DNS as it is deleted, and
            // the new one is written on the next pass.
            if old.metadata.deletion_timestamp.is_none() {
                delete_if_unchanged(&api, old).await?;
            }
            continue;
        }
        let mut record = json!({
            "apiVersion": DNSRecord::api_version(&()),
            "kind": DNSRecord::kind(&()),
            "metadata": {
                "name": wanted.name,
                "namespace": namespace,
                "labels": { POLICY_LABEL: policy.name_any() },
                "ownerReferences": [owner],
                // Created with the record controller's finalizer, so its first pass publishes
                // instead of spending a write (and a round through the queue) to add it.
                "finalizers": [crate::runtime::identity::RECORD_FINALIZER],
            },
            "spec": {
                "rootHost": wanted.root_host,
                "managedZone": { "name": wanted.zone },
                "endpoints": all_to_api(&wanted.endpoints),
                "healthCheck": policy.spec.health_check.as_ref().filter(|_| wanted.health_checked),
                "failbackHoldDownSeconds": crate::decide::policy::hold_down_seconds(&policy.spec.load_balancing)
                    .ok()
                    .flatten(),
            },
        });
        if let Some(local) = &ctx.config.distributed {
            // The cluster's branch, under its own owner ID, next to the other clusters'.
            record["metadata"]["labels"][crate::DISTRIBUTED_LABEL] = json!("true");
            record["spec"]["ownerID"] = json!(local.cluster_id);
        }
        if let Some(old) = existing.iter().find(|r| r.name_any() == wanted.name)
            && record_matches(old, &record)
        {
            // Nothing to write: a steady policy costs the API server nothing.
            records.push(old.clone());
            continue;
        }
        if !existing.iter().any(|r| r.name_any() == wanted.name)
            && let Some(stored) = api.get_opt(&wanted.name).await?
            && let Some(holder) = super::gather::foreign_holder(&stored, policy, ctx)
        {
            let note = crate::decide::desired::foreign_record_note(
                &wanted.listener,
                &wanted.name,
                &holder,
            );
            refused.push((wanted.name.clone(), note));
            continue;
        }
        let written = api
            .patch(&wanted.name, &crate::apply_params(), &Patch::Apply(record))
            .await?;
        records.push(written);
    }
    for stale in existing
        .iter()
        .filter(|r| !desired.records.iter().any(|w| w.name == r.name_any()))
        .filter(|r| !handed_over.contains(&r.name_any()))
        .filter(|r| r.metadata.deletion_timestamp.is_none())
    {
        tracing::info!(record = %stale.name_any(), "deleting the DNSRecord of a removed listener");
        delete_if_unchanged(&api, stale).await?;
    }
    Ok((records, refused))
}

/// Whether a stored record already says what applying `wanted` would: our labels and owner,
/// and the same spec (endpoints compared as the engine reads them, so server defaults do not
/// count as a difference).
fn record_matches(stored: &DNSRecord, wanted: &serde_json::Value) -> bool {
    let Ok(wanted_record) = serde_json::from_value::<DNSRecord>(wanted.clone()) else {
        return false;
    };
    let labels_kept = wanted_record
        .labels()
        .iter()
        .all(|(key, value)| stored.labels().get(key) == Some(value));
    let owned = wanted_record
        .owner_references()
        .iter()
        .all(|owner| stored.owner_references().iter().any(|o| o.uid == owner.uid));
    let (have, want) = (&stored.spec, &wanted_record.spec);
    labels_kept
        && owned
        && have.root_host == want.root_host
        && have.managed_zone.name == want.managed_zone.name
        && have.owner_id == want.owner_id
        && have.health_check == want.health_check
        && have.failback_hold_down_seconds == want.failback_hold_down_seconds
        && all_to_engine(&have.endpoints) == all_to_engine(&want.endpoints)
}

/// Deletes the policy's records (each withdraws its DNS as it goes) but those `handed_back`
/// to another policy; returns how many are still the policy's.
pub async fn delete_records(
    policy: &DNSPolicy,
    handed_back: &[String],
    ctx: &Context,
) -> Result<usize, Error> {
    let api: Api<DNSRecord> =
        Api::namespaced(ctx.client.clone(), &policy.namespace().unwrap_or_default());
    let records = records_of(policy, ctx);
    for record in records
        .iter()
        .filter(|r| r.metadata.deletion_timestamp.is_none())
        .filter(|r| !handed_back.contains(&r.name_any()))
    {
        // As cached: a record a rival took over in the same instant is not withdrawn.
        delete_if_unchanged(&api, record).await?;
    }
    Ok(records.len())
}
