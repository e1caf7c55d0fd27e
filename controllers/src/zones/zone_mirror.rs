//! Embedded zones on a hub replica that does not lead: the zones it serves are rebuilt from
//! the DNSRecords it watches, so every replica answers DNS, not only the leader.
//!
//! The leader publishes a record's endpoints into its embedded zone and then writes them to the
//! record's status. A standby plans the same endpoints (`status.endpoints`) under the same
//! owner into its own zone, with the same planner, so its zone holds what the leader's holds,
//! ownership records included, and a standby that takes over finds nothing to change. It writes
//! nothing to the API server. When the replica starts leading, the mirror stops and the
//! DNSRecord controller carries on from the zones as they are.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_dns::model::Endpoint;
use meridian_dns::plan::{PlanInput, plan};
use tokio::sync::broadcast;

use crate::decide::convert::all_to_engine;
use crate::decide::zone_claims::{Claim, DomainGrants, claim_key, claims, in_zone, normalize};
use crate::decide::zone_serial::Numbering;
use crate::runtime::caches::{Caches, Change};
use crate::zones::dnssec_keys::{KEYS_SECRET_TYPE, KeySource, ZoneSigning, signing_from_cache};
use crate::zones::owners::published_owner;
use crate::zones::zone_provider::{EmbeddedZones, ZoneProvider};

/// A look at every record at least this often, besides every change.
const FULL_PASS_EVERY: Duration = Duration::from_secs(10);

/// What the mirror published for one record, to withdraw it once the record is gone.
#[derive(Debug, Clone)]
struct Mirrored {
    provider: ZoneProvider,
    /// The zone's apex (an embedded zone's ID).
    zone_id: String,
    owner: String,
    root_host: String,
    published: Vec<Endpoint>,
}

/// What a record contributes to its zone as the leader last published it: nothing while it is
/// being deleted (the leader withdraws it before letting it go) or before anything was
/// published.
pub fn published_endpoints(record: &DNSRecord) -> Vec<Endpoint> {
    if record.metadata.deletion_timestamp.is_some() {
        return Vec::new();
    }
    record
        .status
        .as_ref()
        .map(|status| all_to_engine(&status.endpoints))
        .unwrap_or_default()
}

/// Keeps `embedded` current from the DNSRecords and ManagedZones in `caches` until `stop` (on
/// a standby hub replica, or an agent serving DNS), signing zones with the keys `keys` names;
/// `on_synced` runs once, after the first whole pass (the process then answers what the leader
/// answers). `grants` are the admin's domain grants where this process has them (a hub
/// replica); an agent has none and follows the leader's refusals (see [`crate::decide::zone_claims`]).
pub async fn run(
    caches: Arc<Caches>,
    embedded: Arc<EmbeddedZones>,
    keys: KeySource,
    grants: DomainGrants,
    on_synced: impl FnOnce() + Send,
    stop: impl std::future::Future<Output = ()> + Send,
) {
    let mut on_synced = Some(on_synced);
    let mut record_changes = caches.records.subscribe();
    let mut zone_changes = caches.zones.subscribe();
    // Keys arriving (or a rollover's next step) change what a signed zone serves.
    let mut key_changes = caches.secrets.subscribe();
    let mirror = async {
        caches.records.wait_until_listed().await;
        caches.zones.wait_until_listed().await;
        if matches!(keys, KeySource::HubSecrets { .. }) {
            // A replica reads every Secret; an agent may read its copy only, and serves a
            // signed zone once that arrives.
            caches.secrets.wait_until_listed().await;
        }
        let mut mirrored = BTreeMap::new();
        loop {
            pass(&caches, &embedded, &keys, &grants, &mut mirrored).await;
            if let Some(synced) = on_synced.take() {
                tracing::info!(
                    records = mirrored.len(),
                    "embedded zones mirrored from the DNSRecords"
                );
                synced();
            }
            tokio::select! {
                _ = record_changes.recv() => {}
                _ = zone_changes.recv() => {}
                () = key_change(&mut key_changes) => {}
                _ = tokio::time::sleep(FULL_PASS_EVERY) => {}
            }
        }
    };
    tokio::select! {
        _ = mirror => {}
        _ = stop => {}
    }
}

/// Waits for a change of a Secret holding zone keys (a zone's key Secret, or an agent's copy),
/// or a relist: a hub's other Secrets change without concern to the zones.
async fn key_change(changes: &mut broadcast::Receiver<Change<Secret>>) {
    let holds_keys = |secret: &Secret| {
        secret.type_.as_deref() == Some(KEYS_SECRET_TYPE)
            || secret.name_any() == meridian_api::names::DNSSEC_KEYS_SECRET
    };
    loop {
        match changes.recv().await {
            Ok(change) if change.object().is_none_or(|secret| holds_keys(secret)) => return,
            Ok(_) => {}
            Err(broadcast::error::RecvError::Lagged(_)) => return,
            // No more changes (the cache is gone): the periodic pass carries on alone.
            Err(broadcast::error::RecvError::Closed) => std::future::pending().await,
        }
    }
}

/// One look at every record whose zone is embedded, and at the records that are gone.
async fn pass(
    caches: &Caches,
    embedded: &Arc<EmbeddedZones>,
    keys: &KeySource,
    grants: &DomainGrants,
    mirrored: &mut BTreeMap<String, Mirrored>,
) {
    // Decided as the leader decides (see `crate::decide::zone_claims`): a zone that lost its claim is
    // never served, and its records never mirrored into the apex that holds.
    let zones = caches.zones.state();
    let claims = claims(&zones, grants);
    let holds = |zone: &ManagedZone| claims.get(&claim_key(zone)).is_some_and(Claim::holds);
    let held_apexes: BTreeSet<String> = zones
        .iter()
        .filter(|zone| holds(zone))
        .map(|zone| normalize(&zone.spec.domain_name))
        .collect();
    for zone in &zones {
        if zone.spec.dns_provider_secret_ref.is_some() {
            continue;
        }
        if !holds(zone) {
            let apex = normalize(&zone.spec.domain_name);
            if !held_apexes.contains(&apex) && embedded.forget(&apex).await {
                tracing::warn!(zone = %apex, "stopped serving a zone that lost its claim");
            }
            continue;
        }
        match signing_from_cache(zone, &caches.secrets, keys) {
            ZoneSigning::Unsigned => {
                embedded.ensure_served(zone, None, Numbering::Follows).await;
            }
            ZoneSigning::Signed(keys) => {
                embedded
                    .ensure_served(zone, Some(keys), Numbering::Follows)
                    .await;
            }
            ZoneSigning::Unavailable(reason) => {
                let apex = zone
                    .spec
                    .domain_name
                    .trim_end_matches('.')
                    .to_ascii_lowercase();
                if embedded.signs(&apex) {
                    // Keys that were here and no longer read (a Secret broken or gone) do not
                    // stop the zone: it is served signed with them, as it was.
                    tracing::debug!(zone = %apex, %reason, "signing with the keys the zone had");
                } else if embedded.withhold(&apex) {
                    tracing::warn!(zone = %apex, %reason, "not serving a signed zone whose keys are not here");
                }
            }
        }
    }
    let mut seen = BTreeSet::new();
    // Every change of the pass is staged, then each zone changed is built once.
    let mut staged = BTreeSet::new();
    for record in caches.records.state() {
        let key = crate::object_key(
            "DNSRecord",
            record.namespace().as_deref(),
            &record.name_any(),
        );
        // Only embedded zones are mirrored; a provider's zone is asked nothing (not even its
        // ID, which costs Route53 a call).
        let Some(zone) = caches
            .zones
            .get(
                record.namespace().as_deref(),
                &record.spec.managed_zone.name,
            )
            .filter(|zone| zone.spec.dns_provider_secret_ref.is_none())
            .filter(|zone| holds(zone))
        else {
            continue;
        };
        let root_host = record.spec.effective_root_host().unwrap_or_default();
        if !in_zone(&root_host, &zone) {
            // The leader refuses it too (see the DNSRecord controller).
            continue;
        }
        let provider = EmbeddedZones::zone(embedded, &zone.spec.domain_name);
        let zone_id = zone
            .spec
            .domain_name
            .trim_end_matches('.')
            .to_ascii_lowercase();
        seen.insert(key.clone());
        let desired = published_endpoints(&record);
        let owner = published_owner(&record);
        let mut previous = mirrored.get(&key).map(|m| m.published.clone());
        if previous.as_ref() == Some(&desired)
            && mirrored.get(&key).is_some_and(|m| m.owner == owner)
        {
            // Mirrored; served unless its zone is withheld (its keys not here).
            embedded.mirror_behind(&key, !embedded.serves(&zone_id));
            continue;
        }
        // The leader adopted the record's records under a new owner ID: what the old one
        // published goes first, as the leader's adoption took its ownership records away.
        if let Some(earlier) = mirrored.get(&key).filter(|m| m.owner != owner) {
            let withdrawn = Mirrored {
                published: Vec::new(),
                ..earlier.clone()
            };
            if !stage(embedded, &withdrawn, previous.as_deref()).await {
                embedded.mirror_behind(&key, true);
                continue;
            }
            staged.insert(withdrawn.zone_id.clone());
            mirrored.remove(&key);
            previous = None;
        }
        let entry = Mirrored {
            provider,
            zone_id,
            owner,
            root_host,
            published: desired,
        };
        let published = stage(embedded, &entry, previous.as_deref()).await;
        embedded.mirror_behind(&key, !published || !embedded.serves(&entry.zone_id));
        if published {
            staged.insert(entry.zone_id.clone());
            mirrored.insert(key, entry);
        }
    }
    let gone: Vec<String> = mirrored
        .keys()
        .filter(|key| !seen.contains(*key))
        .cloned()
        .collect();
    for key in gone {
        let Some(entry) = mirrored.remove(&key) else {
            continue;
        };
        let previous = entry.published.clone();
        let withdrawn = Mirrored {
            published: Vec::new(),
            ..entry
        };
        let published = stage(embedded, &withdrawn, Some(&previous)).await;
        embedded.mirror_behind(&key, !published);
        if published {
            staged.insert(withdrawn.zone_id.clone());
        } else {
            // Try again at the next pass.
            mirrored.insert(
                key,
                Mirrored {
                    published: previous,
                    ..withdrawn
                },
            );
        }
    }
    for apex in staged {
        embedded.serve_staged(&apex).await;
    }
    // A record no longer mirrored (deleted, or its zone gone or moved to a provider) is behind
    // nothing.
    let still: BTreeSet<String> = mirrored.keys().cloned().chain(seen).collect();
    embedded.mirror_retain(&still);
}

/// Plans `entry.published` into its zone as the leader would, and stages the change (served
/// at the end of the pass).
async fn stage(embedded: &EmbeddedZones, entry: &Mirrored, previous: Option<&[Endpoint]>) -> bool {
    let current = match entry
        .provider
        .host_records(&entry.zone_id, &entry.root_host, std::time::Instant::now())
        .await
    {
        Ok(current) => current,
        Err(error) => {
            tracing::warn!(%error, host = %entry.root_host, "reading the embedded zone failed");
            return false;
        }
    };
    let planned = plan(
        &PlanInput {
            owner: &entry.owner,
            root_host: &entry.root_host,
            desired: &entry.published,
            previous,
        },
        &current,
    );
    if planned.changes.is_empty() {
        return true;
    }
    match embedded.stage(&entry.zone_id, &planned.changes) {
        Ok(_) => true,
        Err(error) => {
            tracing::warn!(%error, host = %entry.root_host, "mirroring into the embedded zone failed");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(status: serde_json::Value, deleting: bool) -> DNSRecord {
        let mut record: DNSRecord = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
            "metadata": { "name": "r", "namespace": "n" },
            "spec": { "rootHost": "api.example.com", "managedZone": { "name": "z" }, "endpoints": [] },
            "status": status,
        }))
        .expect("a record");
        if deleting {
            record.metadata.deletion_timestamp = Some(crate::now());
        }
        record
    }

    #[test]
    fn a_standby_mirrors_what_status_says_is_published_and_nothing_of_a_deleted_record() {
        let published = serde_json::json!({ "endpoints": [
            { "dnsName": "api.example.com", "recordType": "A", "targets": ["10.0.0.1"], "recordTTL": 60 },
        ] });
        let endpoints = published_endpoints(&record(published.clone(), false));
        assert_eq!(endpoints.len(), 1);
        assert_eq!(endpoints[0].dns_name, "api.example.com");
        assert_eq!(endpoints[0].targets, ["10.0.0.1"]);
        assert!(
            published_endpoints(&record(published, true)).is_empty(),
            "a record being deleted is withdrawn"
        );
        assert!(
            published_endpoints(&record(serde_json::json!({}), false)).is_empty(),
            "nothing published yet, nothing mirrored"
        );
    }
}
