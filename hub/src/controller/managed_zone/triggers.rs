//! What wakes the controller: the trigger streams, built from pure indexes over the caches.

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_api::conditions;
use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};

use meridian_controllers::decide::plan_guard::held_message;
use meridian_controllers::runtime::caches::{
    Caches, Change, everything_once, own_changes, triggers,
};
use meridian_controllers::zones::dnssec_keys::{
    KEYS_SECRET_TYPE, ZONE_ANNOTATION, legacy_keys_secret_name,
};
use meridian_controllers::{POLICY_LABEL, runtime::indexes};

/// ManagedZone status: a zone, a record of an embedded zone (its count), a record whose plan is
/// held or let go, a policy publishing into the zone whose `FailStatic` changes, its provider
/// or key Secret, its routing delegate's delegation, or a record under its delegation record's
/// name wakes it.
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
            // A zone's own delegation record, changed or gone, is the zone's to put back.
            let delegation = record
                .labels()
                .contains_key(super::routing_delegate::ROUTING_DELEGATE_LABEL);
            // Otherwise only embedded zones are recounted per record change (counting them is
            // free).
            let mut wakes: Vec<_> = zones
                .get(&zone)
                .filter(|z| held_changed || delegation || z.spec.dns_provider_secret_ref.is_none())
                .map(|_| zone)
                .into_iter()
                .collect();
            // A record under the name a zone's delegation needs decides `NameTaken` by being
            // there and by its label alone: created, gone or relabelled, it wakes that zone
            // (whichever zone the record is in), not on every status write.
            let label = |record: &DNSRecord| {
                record
                    .labels()
                    .get(super::routing_delegate::ROUTING_DELEGATE_LABEL)
                    .cloned()
            };
            let taken_or_freed = match change {
                Change::Applied { old, new } => old.as_deref().map(label) != Some(label(new)),
                Change::Deleted(_) => true,
                Change::Relisted => false,
            };
            let named = meridian_api::labels::routing_delegation_zone(&record.name_any())
                .filter(|_| taken_or_freed)
                .map(|name| {
                    ObjectRef::<ManagedZone>::new(name)
                        .within(&record.namespace().unwrap_or_default())
                })
                .filter(|named| {
                    zones
                        .get(named)
                        .is_some_and(|z| z.spec.routing_delegate.is_some())
                });
            wakes.extend(named);
            wakes
        }
    };
    let by_secret = {
        let zones = all.clone();
        move |change: &Change<Secret>| match change.object() {
            Some(secret) => {
                let (namespace, name) = (secret.namespace().unwrap_or_default(), secret.name_any());
                let zones = zones.state();
                let mut wakes = indexes::zones_using_secret(&zones, &namespace, &name);
                // A zone's DNSSEC keys: changed, broken, gone or put back (in the hub's
                // namespace, naming their zone); or an earlier hub's, beside the zone.
                if secret.type_.as_deref() == Some(KEYS_SECRET_TYPE)
                    && let Some((zone_namespace, zone_name)) = secret
                        .annotations()
                        .get(ZONE_ANNOTATION)
                        .and_then(|zone| zone.split_once('/'))
                {
                    wakes.push(ObjectRef::new(zone_name).within(zone_namespace));
                }
                wakes.extend(
                    zones
                        .iter()
                        .filter(|z| z.namespace().as_deref() == Some(namespace.as_str()))
                        .filter(|z| legacy_keys_secret_name(&z.name_any()) == name)
                        .map(|z| ObjectRef::from_obj(&**z)),
                );
                wakes
            }
            None => Vec::new(),
        }
    };
    let by_policy = {
        let records = caches.records.store().clone();
        move |change: &Change<DNSPolicy>| {
            let changed = match change {
                Change::Applied { old, new } => {
                    fail_static(old.as_deref()) != fail_static(Some(new))
                }
                Change::Deleted(old) => fail_static(Some(old)).is_some(),
                Change::Relisted => false,
            };
            match change.object() {
                Some(policy) if changed => zones_published_by(&records.state(), policy),
                _ => Vec::new(),
            }
        }
    };
    // A zone gone lets the zones it refused claim their domains.
    let by_zone_gone = {
        let zones = all.clone();
        move |change: &Change<ManagedZone>| match change {
            Change::Deleted(_) => refused_by_claims(&zones.state()),
            _ => Vec::new(),
        }
    };
    // A routing delegate whose delegation (name servers, glue, DS) changed, came or went wakes
    // the zones naming it.
    let by_delegate = {
        let zones = all.clone();
        move |change: &Change<ManagedZone>| {
            let published = |zone: Option<&ManagedZone>| {
                zone.map(|z| {
                    let status = z.status.as_ref();
                    (
                        status.map(|s| s.delegation.clone()),
                        status.and_then(|s| s.dnssec.as_ref()?.ds.clone()),
                        z.spec.dns_provider_secret_ref.is_some(),
                    )
                })
            };
            let (changed, delegate) = match change {
                Change::Applied { old, new } => (
                    published(old.as_deref()) != published(Some(new)),
                    new.clone(),
                ),
                Change::Deleted(old) => (true, old.clone()),
                Change::Relisted => return Vec::new(),
            };
            if !changed {
                return Vec::new();
            }
            zones
                .state()
                .iter()
                .filter(|z| {
                    z.namespace() == delegate.namespace()
                        && z.spec.routing_delegate.as_deref() == Some(&delegate.name_any())
                })
                .map(|z| ObjectRef::from_obj(&**z))
                .collect()
        }
    };
    vec![
        everything_once(&caches.zones),
        own_changes(&caches.zones),
        triggers(caches.zones.subscribe(), all.clone(), by_zone_gone),
        triggers(caches.zones.subscribe(), all.clone(), by_delegate),
        triggers(caches.records.subscribe(), all.clone(), by_record),
        triggers(caches.policies.subscribe(), all.clone(), by_policy),
        triggers(caches.secrets.subscribe(), all, by_secret),
    ]
}

/// The zones whose status says an older zone holds their domain.
fn refused_by_claims(zones: &[std::sync::Arc<ManagedZone>]) -> Vec<ObjectRef<ManagedZone>> {
    zones
        .iter()
        .filter(|zone| {
            zone.status.as_ref().is_some_and(|status| {
                status.conditions.iter().any(|c| {
                    c.type_ == conditions::READY
                        && c.reason
                            == meridian_controllers::decide::zone_claims::reasons::DOMAIN_CLAIMED
                })
            })
        })
        .map(|zone| ObjectRef::from_obj(&**zone))
        .collect()
}

/// The policy's `FailStatic` condition while it is True: its reason and message.
fn fail_static(policy: Option<&DNSPolicy>) -> Option<(&str, &str)> {
    policy?
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::FAIL_STATIC && c.status == "True")
        .map(|c| (c.reason.as_str(), c.message.as_str()))
}

/// The zones the policy's records are in.
fn zones_published_by(
    records: &[std::sync::Arc<DNSRecord>],
    policy: &DNSPolicy,
) -> Vec<ObjectRef<ManagedZone>> {
    let namespace = policy.namespace().unwrap_or_default();
    let name = policy.name_any();
    let mut zones: Vec<ObjectRef<ManagedZone>> = records
        .iter()
        .filter(|r| {
            r.namespace().as_deref() == Some(namespace.as_str())
                && r.labels().get(POLICY_LABEL) == Some(&name)
        })
        .map(|r| ObjectRef::new(&r.spec.managed_zone.name).within(&namespace))
        .collect();
    zones.sort_by(|a, b| a.name.cmp(&b.name));
    zones.dedup();
    zones
}
