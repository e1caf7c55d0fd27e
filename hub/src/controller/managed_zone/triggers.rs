//! What wakes the controller: the trigger streams, built from pure indexes over the caches.

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_api::kuadrant::{DNSRecord, ManagedZone};

use meridian_controllers::caches::{Caches, Change, everything_once, own_changes, triggers};
use meridian_controllers::indexes;
use meridian_controllers::plan_guard::held_message;

/// ManagedZone status: a zone, a record of an embedded zone (its count), or a record whose plan
/// is held or let go wakes it.
pub fn requests(caches: &Caches) -> Vec<BoxStream<'static, ObjectRef<ManagedZone>>> {
    let all = caches.zones.store().clone();
    let by_record = {
        let zones = all.clone();
        move |change: &Change<DNSRecord>| {
            let Some(record) = change.object() else {
                return Vec::new();
            };
            let zone = ObjectRef::<ManagedZone>::new(&record.spec.managed_zone.name)
                .within(&record.namespace().unwrap_or_default());
            // A plan held or let go changes the zone's `PlansHeld`, whatever serves it.
            let held =
                |record: Option<&DNSRecord>| record.and_then(held_message).map(str::to_owned);
            let held_changed = match change {
                Change::Applied { old, new } => held(old.as_deref()) != held(Some(new)),
                Change::Deleted(old) => held(Some(old)).is_some(),
                Change::Relisted => false,
            };
            // Otherwise only embedded zones are recounted per record change (counting them is
            // free).
            zones
                .get(&zone)
                .filter(|z| held_changed || z.spec.dns_provider_secret_ref.is_none())
                .map(|_| zone)
                .into_iter()
                .collect()
        }
    };
    let by_secret = {
        let zones = all.clone();
        move |change: &Change<Secret>| match change.object() {
            Some(secret) => indexes::zones_using_secret(
                &zones.state(),
                &secret.namespace().unwrap_or_default(),
                &secret.name_any(),
            ),
            None => Vec::new(),
        }
    };
    vec![
        everything_once(&caches.zones),
        own_changes(&caches.zones),
        triggers(caches.records.subscribe(), all.clone(), by_record),
        triggers(caches.secrets.subscribe(), all, by_secret),
    ]
}
