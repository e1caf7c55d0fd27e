//! A zone at a provider of plain records hands what it cannot hold (GEO and weighted answers)
//! to its `spec.routingDelegate`, an embedded zone below it that Meridian's nameservers serve
//! (the DNSPolicy controller moves the trees there, `meridian_dns::delegation`). Here the zone
//! gets what delegating to it takes: one DNSRecord `<zone>-routing-delegate` with the
//! delegate's NS records and the glue of its name servers, as the delegate's status lists
//! them; the zone's `RoutingDelegated` condition says whether it is published, or why not.

use std::sync::Arc;

use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate};
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_controllers::decide::convert::{all_to_api, all_to_engine};
use meridian_controllers::{Context, Error, apply_params, delete_if_present};
use meridian_dns::delegation::{NameServer, delegation_records};
use meridian_dns::model::{Endpoint, RecordType, is_at_or_below};
use serde_json::json;

pub use meridian_api::labels::ROUTING_DELEGATE_LABEL;
use meridian_api::labels::routing_delegation_record as record_name;

/// The name servers of a delegation, from the zone-file lines an embedded zone's
/// `status.delegation` lists (`<apex>. <ttl> IN NS <name>.`, `<name>. <ttl> IN A <address>`):
/// each NS name with the addresses given for it, and the NS TTL. Lines of other types, or that
/// do not parse, are left out.
pub fn name_servers_of(lines: &[String]) -> (Vec<NameServer>, Option<u32>) {
    let mut servers: Vec<NameServer> = Vec::new();
    let mut ttl = None;
    let clean = |name: &str| name.trim_end_matches('.').to_ascii_lowercase();
    let fields: Vec<Vec<&str>> = lines
        .iter()
        .map(|line| line.split_whitespace().collect())
        .collect();
    for field in &fields {
        if let [_, line_ttl, "IN", kind, name] = field[..]
            && kind.eq_ignore_ascii_case("NS")
        {
            ttl = ttl.or(line_ttl.parse().ok());
            servers.push(NameServer {
                name: clean(name),
                addresses: Vec::new(),
            });
        }
    }
    for field in &fields {
        if let [name, _, "IN", kind, address] = field[..]
            && (kind.eq_ignore_ascii_case("A") || kind.eq_ignore_ascii_case("AAAA"))
            && let Ok(address) = address.parse()
            && let Some(server) = servers.iter_mut().find(|s| s.name == clean(name))
        {
            server.addresses.push(address);
        }
    }
    (servers, ttl)
}

/// Why a zone's routing delegate cannot be published, as a condition's reason and message.
type NotDelegated = (&'static str, String);

/// What `zone` (at a provider) publishes to delegate to the zone its `spec.routingDelegate`
/// names among `zones` (its namespace's): the delegate's domain and the NS and glue records.
/// `None`: the zone names no delegate.
pub fn delegation_for(
    zone: &ManagedZone,
    zones: &[Arc<ManagedZone>],
) -> Option<Result<(String, Vec<Endpoint>), NotDelegated>> {
    let wanted = zone.spec.routing_delegate.as_deref()?;
    let namespace = zone.namespace();
    let Some(delegate) = zones
        .iter()
        .find(|d| d.name_any() == wanted && d.namespace() == namespace)
    else {
        return Some(Err((
            "DelegateNotFound",
            format!("spec.routingDelegate: no ManagedZone {wanted} in this namespace"),
        )));
    };
    let sharing: Vec<String> = zones
        .iter()
        .filter(|z| z.namespace() == namespace && z.name_any() != zone.name_any())
        .filter(|z| z.spec.routing_delegate.as_deref() == Some(wanted))
        .map(|z| z.name_any())
        .collect();
    if !sharing.is_empty() {
        // Each parent's trees move by its own suffix: two parents' hosts could meet at one
        // name in the delegate.
        return Some(Err((
            "DelegateShared",
            format!(
                "spec.routingDelegate: ManagedZone {wanted} is also the routing delegate of {}; a delegate serves one zone",
                sharing.join(", ")
            ),
        )));
    }
    if delegate.spec.dns_provider_secret_ref.is_some() {
        return Some(Err((
            "DelegateNotEmbedded",
            format!(
                "spec.routingDelegate: ManagedZone {wanted} is at a provider; the delegate must be served by Meridian's nameservers (no dnsProviderSecretRef)"
            ),
        )));
    }
    let domain = zone
        .spec
        .domain_name
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let sub_zone = delegate
        .spec
        .domain_name
        .trim_end_matches('.')
        .to_ascii_lowercase();
    if sub_zone == domain || !is_at_or_below(&sub_zone, &domain) {
        return Some(Err((
            "DelegateNotBelow",
            format!(
                "spec.routingDelegate: ManagedZone {wanted} is for {sub_zone}, which is not below {domain}"
            ),
        )));
    }
    let lines = delegate
        .status
        .as_ref()
        .map(|s| s.delegation.as_slice())
        .unwrap_or_default();
    let (servers, ttl) = name_servers_of(lines);
    if servers.is_empty() {
        return Some(Err((
            "DelegateNotServed",
            format!(
                "waiting for ManagedZone {wanted} to be served (its status.delegation lists no name server yet)"
            ),
        )));
    }
    Some(
        delegation_records(&sub_zone, &servers, ttl.unwrap_or(3600))
            .map(|records| (sub_zone, records))
            .map_err(|error| ("DelegateLame", format!("spec.routingDelegate: {error}"))),
    )
}

/// Publishes or withdraws `zone`'s delegation record, and says so in the condition returned
/// (`None`: the zone names no delegate, and no record of it is left).
pub async fn reconcile(
    zone: &ManagedZone,
    ctx: &Context,
) -> Result<Option<ConditionUpdate<'static>>, Error> {
    let namespace = zone.namespace().unwrap_or_default();
    let zones: Vec<Arc<ManagedZone>> = ctx
        .caches
        .zones
        .state()
        .into_iter()
        .filter(|z| z.namespace().as_deref() == Some(namespace.as_str()))
        .collect();
    let records: Api<DNSRecord> = Api::namespaced(ctx.client.clone(), &namespace);
    let name = record_name(&zone.name_any());
    let stored = ctx.caches.records.get(Some(&namespace), &name);
    if let Some(other) = stored
        .as_ref()
        .filter(|r| r.labels().get(ROUTING_DELEGATE_LABEL) != Some(&zone.name_any()))
    {
        // Someone else's record (a policy's, or one written by hand) is never taken over.
        return Ok(zone.spec.routing_delegate.is_some().then(|| ConditionUpdate {
            type_: conditions::ROUTING_DELEGATED,
            status: false,
            reason: "NameTaken",
            message: format!(
                "the DNSRecord {} that would hold the delegation is not this zone's (labels {:?}); delete it to free the name",
                other.name_any(),
                other.labels()
            ),
        }));
    }
    if let Some(going) = stored
        .as_ref()
        .filter(|r| r.metadata.deletion_timestamp.is_some())
    {
        // Withdrawn from the provider before it is gone: the next one waits (its rootHost may
        // differ, which the object being deleted cannot take).
        return Ok(zone
            .spec
            .routing_delegate
            .is_some()
            .then(|| ConditionUpdate {
                type_: conditions::ROUTING_DELEGATED,
                status: false,
                reason: "DelegateChanging",
                message: format!(
                    "waiting for the delegation of {} to be withdrawn",
                    going.spec.root_host
                ),
            }));
    }
    let existing = stored;
    // Hosts still pointing into the sub-zone it delegates (the records moved there) keep the
    // delegation: withdrawn under them, they would stop resolving.
    let still_used = |record: &DNSRecord| {
        let sub_zone = &record.spec.root_host;
        ctx.caches
            .records
            .state()
            .iter()
            .filter(|r| r.namespace().as_deref() == Some(namespace.as_str()))
            .filter(|r| r.name_any() != name && r.metadata.deletion_timestamp.is_none())
            .filter(|r| is_at_or_below(&r.spec.root_host, sub_zone))
            .count()
    };
    let wanted = match (delegation_for(zone, &zones), &existing) {
        (None, None) => return Ok(None),
        (None, Some(old)) => {
            let used = still_used(old);
            if used == 0 {
                tracing::info!(record = %name, "the zone names no routing delegate any more");
                delete_if_present(&records, &name).await?;
                return Ok(None);
            }
            return Ok(Some(ConditionUpdate {
                type_: conditions::ROUTING_DELEGATED,
                status: false,
                reason: "DelegationKept",
                message: format!(
                    "the zone names no routing delegate, but {used} DNSRecords still answer in {}: its delegation stays until they are gone",
                    old.spec.root_host
                ),
            }));
        }
        (Some(wanted), _) => wanted,
    };
    // Until the delegation can be published, what was published stays (fail static): the
    // delegate's trees are still served, and a resolver may hold its NS records.
    let (sub_zone, endpoints) = match wanted {
        Ok(wanted) => wanted,
        Err((reason, message)) => {
            return Ok(Some(ConditionUpdate {
                type_: conditions::ROUTING_DELEGATED,
                status: false,
                reason,
                message,
            }));
        }
    };
    if let Some(old) = existing.as_ref().filter(|r| r.spec.root_host != sub_zone) {
        // The admin named another delegate: rootHost cannot change, so the old delegation
        // goes (its record's deletion wakes the zone again) and the new one is written on the
        // next pass; the policies move their hosts once this condition is True again.
        delete_if_present(&records, &name).await?;
        return Ok(Some(ConditionUpdate {
            type_: conditions::ROUTING_DELEGATED,
            status: false,
            reason: "DelegateChanging",
            message: format!(
                "{} is withdrawn; {sub_zone} is delegated next",
                old.spec.root_host
            ),
        }));
    }
    let api_endpoints = all_to_api(&endpoints);
    let unchanged = existing.as_ref().is_some_and(|r| {
        r.spec.managed_zone.name == zone.name_any() && all_to_engine(&r.spec.endpoints) == endpoints
    });
    if !unchanged {
        let owner = zone
            .controller_owner_ref(&())
            .expect("a stored zone has a UID");
        let record = json!({
            "apiVersion": DNSRecord::api_version(&()),
            "kind": DNSRecord::kind(&()),
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": { ROUTING_DELEGATE_LABEL: zone.name_any() },
                "ownerReferences": [owner],
            },
            "spec": {
                "rootHost": sub_zone,
                "managedZone": { "name": zone.name_any() },
                "endpoints": api_endpoints,
            },
        });
        records
            .patch(&name, &apply_params(), &Patch::Apply(record))
            .await?;
    }
    // Published means held by the provider, not written here: until the record says so, no
    // policy points a host into the sub-zone. Its status changes wake the zone again.
    let published = unchanged
        && existing.as_ref().is_some_and(|r| {
            r.status.as_ref().is_some_and(|s| {
                s.observed_generation == r.metadata.generation
                    && meridian_api::conditions::condition_status(&s.conditions, conditions::READY)
                        == Some(true)
            })
        });
    if !published {
        let said = existing
            .as_ref()
            .and_then(|r| r.status.as_ref())
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY))
            .filter(|_| unchanged)
            .map(|c| format!(": {}", c.message))
            .unwrap_or_default();
        return Ok(Some(ConditionUpdate {
            type_: conditions::ROUTING_DELEGATED,
            status: false,
            reason: "Publishing",
            message: format!(
                "the delegation of {sub_zone} (DNSRecord {name}) is being published{said}"
            ),
        }));
    }
    let servers: Vec<&str> = endpoints
        .iter()
        .filter(|e| e.record_type == RecordType::Ns)
        .flat_map(|e| e.targets.iter().map(String::as_str))
        .collect();
    let mut message = format!(
        "{sub_zone} is delegated to {} (DNSRecord {name})",
        servers.join(", ")
    );
    if let Some(ds) = zones
        .iter()
        .find(|d| Some(d.name_any().as_str()) == zone.spec.routing_delegate.as_deref())
        .and_then(|d| d.status.as_ref()?.dnssec.as_ref()?.ds.clone())
    {
        // The providers' record types carry no DS: signed answers need it added by hand.
        message.push_str(&format!(
            "; the delegate is signed: add its DS to this zone by hand: {ds}"
        ));
    }
    Ok(Some(ConditionUpdate {
        type_: conditions::ROUTING_DELEGATED,
        status: true,
        reason: "Published",
        message,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(name: &str, domain: &str, secret: Option<&str>, delegate: Option<&str>) -> ManagedZone {
        serde_json::from_value(json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
            "metadata": { "name": name, "namespace": "team" },
            "spec": {
                "domainName": domain,
                "dnsProviderSecretRef": secret.map(|s| json!({ "name": s })),
                "routingDelegate": delegate,
            },
        }))
        .unwrap()
    }

    fn served(mut zone: ManagedZone, lines: &[&str]) -> Arc<ManagedZone> {
        zone.status = Some(meridian_api::kuadrant::ManagedZoneStatus {
            delegation: lines.iter().map(|l| l.to_string()).collect(),
            ..Default::default()
        });
        Arc::new(zone)
    }

    const LINES: &[&str] = &[
        "klb.example.com. 3600 IN NS ns1.klb.example.com.",
        "klb.example.com. 3600 IN NS ns.example.net.",
        "ns1.klb.example.com. 3600 IN A 192.0.2.53",
        "ns1.klb.example.com. 3600 IN AAAA 2001:db8::53",
    ];

    #[test]
    fn the_delegates_name_servers_and_glue_are_read_from_its_status() {
        let (servers, ttl) =
            name_servers_of(&LINES.iter().map(|l| l.to_string()).collect::<Vec<_>>());
        assert_eq!(ttl, Some(3600));
        assert_eq!(
            servers,
            [
                NameServer {
                    name: "ns1.klb.example.com".into(),
                    addresses: vec![
                        "192.0.2.53".parse().unwrap(),
                        "2001:db8::53".parse().unwrap()
                    ],
                },
                NameServer {
                    name: "ns.example.net".into(),
                    addresses: Vec::new(),
                },
            ]
        );
        let parent = zone("example", "example.com", Some("webhook"), Some("klb"));
        let zones = vec![
            Arc::new(parent.clone()),
            served(zone("klb", "klb.example.com", None, None), LINES),
        ];
        let (sub_zone, records) = delegation_for(&parent, &zones).unwrap().unwrap();
        assert_eq!(sub_zone, "klb.example.com");
        let shown: Vec<(String, RecordType, Vec<String>)> = records
            .into_iter()
            .map(|e| (e.dns_name, e.record_type, e.targets))
            .collect();
        assert!(
            shown.contains(&(
                "klb.example.com".into(),
                RecordType::Ns,
                vec!["ns.example.net".into(), "ns1.klb.example.com".into()]
            )),
            "{shown:?}"
        );
        assert!(
            shown.contains(&(
                "ns1.klb.example.com".into(),
                RecordType::A,
                vec!["192.0.2.53".into()]
            )),
            "{shown:?}"
        );
        // No glue for a name server outside the delegate.
        assert!(
            !shown.iter().any(|(name, ..)| name == "ns.example.net"),
            "{shown:?}"
        );
    }

    #[test]
    fn a_delegate_that_cannot_serve_the_zones_answers_is_refused_with_why() {
        let parent = zone("example", "example.com", Some("webhook"), Some("klb"));
        let reason = |zones: Vec<Arc<ManagedZone>>| {
            let mut all = vec![Arc::new(parent.clone())];
            all.extend(zones);
            delegation_for(&parent, &all).unwrap().unwrap_err().0
        };
        assert_eq!(reason(Vec::new()), "DelegateNotFound");
        // Another namespace's zone of the same name is not this team's.
        let mut elsewhere = zone("klb", "klb.example.com", None, None);
        elsewhere.metadata.namespace = Some("other".into());
        assert_eq!(reason(vec![served(elsewhere, LINES)]), "DelegateNotFound");
        assert_eq!(
            reason(vec![served(
                zone("klb", "klb.example.com", Some("aws"), None),
                LINES
            )]),
            "DelegateNotEmbedded"
        );
        for domain in ["example.com", "klb.example.net", "com"] {
            assert_eq!(
                reason(vec![served(zone("klb", domain, None, None), LINES)]),
                "DelegateNotBelow",
                "{domain}"
            );
        }
        assert_eq!(
            reason(vec![served(
                zone("klb", "klb.example.com", None, None),
                &[]
            )]),
            "DelegateNotServed"
        );
        // A name server inside the delegate with no address would make a lame delegation.
        assert_eq!(
            reason(vec![served(
                zone("klb", "klb.example.com", None, None),
                &["klb.example.com. 3600 IN NS ns1.klb.example.com."]
            )]),
            "DelegateLame"
        );
        // Two zones naming one delegate: their hosts could meet at one name in it.
        let mut all = vec![
            Arc::new(parent.clone()),
            Arc::new(zone("other", "a.example.com", Some("webhook"), Some("klb"))),
            served(zone("klb", "klb.a.example.com", None, None), LINES),
        ];
        assert_eq!(
            delegation_for(&parent, &all).unwrap().unwrap_err().0,
            "DelegateShared"
        );
        all.remove(1);
        assert!(delegation_for(&parent, &all).unwrap().is_ok());
        assert!(
            delegation_for(&zone("example", "example.com", Some("webhook"), None), &[]).is_none()
        );
    }
}
