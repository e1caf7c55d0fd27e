//! Who publishes in a zone, and removing what a vanished owner left. In distributed mode a
//! cluster that disappears without deleting its policies leaves its records behind; the other
//! clusters never touch them (they are not theirs). `meridian-agent zone-owners` reports the
//! owners and how many records each vouches for, and `--purge <owner>` removes that owner's
//! records the way the owner itself would have.

use std::collections::BTreeMap;

use kube::ResourceExt;
use meridian_api::kuadrant::DNSRecord;

use meridian_dns::model::Endpoint;
use meridian_dns::plan::{PlanInput, Registry, plan};
use meridian_providers::{Provider, ProviderError};

/// Why a hub owner ID cannot be used.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "owner ID {0:?} is not 1 to 63 lowercase letters, digits, '-' or '.', starting and ending with a letter or digit"
)]
pub struct InvalidOwnerId(pub String);

/// Checks a hub's owner ID (`--owner-id`): a DNS label's characters and length, so it reads
/// well in a TXT value and can hold no `,`, `=` or `/` that would change how the value or a
/// record's owner parses.
pub fn valid_hub_owner(id: &str) -> Result<(), InvalidOwnerId> {
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let ok = (1..=63).contains(&id.len())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && edge_ok(id.chars().next())
        && edge_ok(id.chars().next_back());
    if ok {
        Ok(())
    } else {
        Err(InvalidOwnerId(id.to_string()))
    }
}

/// The owner ID a hub publishes a record under when the record names none: the hub's owner ID
/// with a hash of the record's namespace and name, `<hub>/<hash>`, which a hub restored or
/// rebuilt from the same manifests derives again (an object's UID would not survive). A hash,
/// not the names: ownership records are public DNS, and a tenant's namespace and record names
/// are not the world's to read (`status.ownerID` says which record an owner is). It holds a
/// slash, which no UID or cluster ID does, so it is never a distributed cluster's owner ID.
pub fn hub_record_owner(hub: &str, namespace: &str, name: &str) -> String {
    format!(
        "{hub}/{}",
        meridian_dns::shortcode::shortcode(&format!("{namespace}/{name}"), 24)
    )
}

/// The owner ID `record` publishes under: its `spec.ownerID` (distributed mode writes the
/// cluster's; a hand-written record may name one), else, on a hub, [`hub_record_owner`]. Where
/// no hub owner ID is known (an agent mirroring a zone before the hub wrote the record's
/// status), the record's UID, which is what hubs before owner IDs used.
pub fn record_owner(record: &DNSRecord, hub: Option<&str>) -> String {
    if let Some(owner) = &record.spec.owner_id {
        return owner.clone();
    }
    match hub {
        Some(hub) => hub_record_owner(
            hub,
            record.namespace().as_deref().unwrap_or_default(),
            &record.name_any(),
        ),
        None => legacy_owner(record),
    }
}

/// The owner ID the endpoints in `record`'s status were published under, as status says (a
/// standby or an agent mirroring the leader's zone knows no hub owner ID of its own); for a
/// status written before it said, what hubs then used ([`record_owner`] without a hub).
pub fn published_owner(record: &DNSRecord) -> String {
    record
        .status
        .as_ref()
        .and_then(|status| status.owner_id.clone())
        .unwrap_or_else(|| record_owner(record, None))
}

/// What hubs before configurable owner IDs published a record under: its UID.
pub fn legacy_owner(record: &DNSRecord) -> String {
    record.uid().unwrap_or_else(|| record.name_any())
}

/// The earlier owner IDs whose records `record` takes over when it publishes as `owner`: the
/// owner status says it published under, if another, and its UID (what hubs before owner IDs
/// used). None for a record that names its owner: `spec.ownerID` never changes.
pub fn earlier_owners(record: &DNSRecord, owner: &str) -> Vec<String> {
    if record.spec.owner_id.is_some() {
        return Vec::new();
    }
    let mut earlier: Vec<String> = record
        .status
        .as_ref()
        .and_then(|status| status.owner_id.clone())
        .into_iter()
        .chain(record.uid())
        .filter(|earlier| earlier != owner)
        .collect();
    earlier.dedup();
    earlier
}

/// Records each owner vouches for.
pub fn owner_counts(zone: &[Endpoint]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for owners in Registry::read(zone).ownership.values() {
        for owner in owners.keys() {
            *counts.entry(owner.clone()).or_default() += 1;
        }
    }
    counts
}

/// Removes `owner`'s records from the zone at `apex` as if it withdrew them: records it owns
/// alone go, shared ones lose its ownership record, nothing another owner's records point at
/// is removed, and it leaves every member list and failure report. What it added to a multi-value record shared with others cannot be told
/// apart and stays. Returns how many changes were made.
pub async fn purge<P: Provider>(
    provider: &P,
    zone_id: &str,
    apex: &str,
    owner: &str,
) -> Result<usize, ProviderError> {
    let zone = provider.records(zone_id).await?;
    let planned = plan(
        &PlanInput {
            owner,
            root_host: apex,
            desired: &[],
            previous: None,
        },
        &zone,
    );
    let mut changes = planned.changes;
    // Out of every member list and failure report as well.
    changes.append(crate::decide::shared_health::leave(owner, &zone, apex));
    changes.append(crate::decide::shared_tiers::leave(owner, &zone, apex));
    if !changes.is_empty() {
        provider.apply(zone_id, &changes).await?;
    }
    Ok(changes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::model::RecordType;

    #[test]
    fn a_hub_owner_id_is_a_dns_labels_characters() {
        for good in [
            "prod-hub-eu",
            "a",
            "7c1e2f3a-0b1c-4d5e-8f90-123456789abc",
            "hub.eu-1",
        ] {
            assert_eq!(valid_hub_owner(good), Ok(()), "{good}");
        }
        let too_long = "a".repeat(64);
        for bad in [
            "", "Prod", "-hub", "hub-", "hub/a", "hub,x", "owner=x", "hub a", &too_long,
        ] {
            assert!(valid_hub_owner(bad).is_err(), "{bad:?} accepted");
        }
    }

    fn record(namespace: &str, name: &str, uid: &str, spec_owner: Option<&str>) -> DNSRecord {
        let mut record: DNSRecord = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
            "metadata": { "name": name, "namespace": namespace, "uid": uid },
            "spec": { "rootHost": "api.example.com", "managedZone": { "name": "zone" } },
        }))
        .expect("a record");
        record.spec.owner_id = spec_owner.map(str::to_string);
        record
    }

    #[test]
    fn a_record_publishes_under_its_own_owner_else_the_hubs_with_its_name_never_its_uid() {
        let plain = record("team-a", "api", "uid-1", None);
        let named = record("team-a", "api", "uid-1", Some("cluster-7"));
        // (record, hub owner ID, owner)
        let hub_owner = hub_record_owner("hub-eu", "team-a", "api");
        assert!(hub_owner.starts_with("hub-eu/"), "{hub_owner}");
        let table = [
            (&plain, Some("hub-eu"), hub_owner.as_str()),
            (&plain, None, "uid-1"),
            (&named, Some("hub-eu"), "cluster-7"),
            (&named, None, "cluster-7"),
        ];
        for (record, hub, want) in table {
            assert_eq!(record_owner(record, hub), want, "{hub:?}");
        }
        // Restored with a new UID: the same owner.
        let restored = record("team-a", "api", "uid-2", None);
        assert_eq!(
            record_owner(&restored, Some("hub-eu")),
            record_owner(&plain, Some("hub-eu"))
        );
    }

    #[test]
    fn a_hub_owner_names_no_tenant_and_fits_one_txt_string() {
        let hub = "h".repeat(63);
        let (namespace, name) = ("n".repeat(63), "r".repeat(253));
        let owner = hub_record_owner(&hub, &namespace, &name);
        assert!(
            !owner.contains(&namespace) && !owner.contains("rrr"),
            "{owner}"
        );
        assert_eq!(owner.matches('/').count(), 1);
        assert!(
            meridian_dns::plan::ownership_txt_value(&owner).len() <= 255,
            "one DNS character-string"
        );
        // Namespace and name are not interchangeable.
        assert_ne!(
            hub_record_owner("hub", "a", "b-c"),
            hub_record_owner("hub", "a-b", "c")
        );
        assert_ne!(
            hub_record_owner("hub", "a", "b"),
            hub_record_owner("hub", "b", "a")
        );
    }

    #[test]
    fn earlier_owners_are_the_status_owner_and_the_uid_unless_the_owner_is_named() {
        let mut plain = record("team-a", "api", "uid-1", None);
        assert_eq!(earlier_owners(&plain, "hub-eu/team-a/api"), ["uid-1"]);
        plain.status = Some(meridian_api::kuadrant::DNSRecordStatus {
            owner_id: Some("hub-old/team-a/api".into()),
            ..Default::default()
        });
        assert_eq!(
            earlier_owners(&plain, "hub-eu/team-a/api"),
            ["hub-old/team-a/api", "uid-1"]
        );
        assert_eq!(
            earlier_owners(&plain, "hub-old/team-a/api"),
            ["uid-1"],
            "the owner itself is not an earlier one"
        );
        let named = record("team-a", "api", "uid-1", Some("cluster-7"));
        assert!(earlier_owners(&named, "cluster-7").is_empty());
    }

    fn owned(name: &str, owner: &str) -> Vec<Endpoint> {
        vec![
            Endpoint::new(name, RecordType::A, ["192.0.2.1".to_string()], 60),
            Endpoint::new(
                format!(
                    "kuadrant-{}-a-{name}",
                    meridian_dns::shortcode::shortcode(owner, 8)
                ),
                RecordType::Txt,
                [format!(
                    "heritage=external-dns,external-dns/owner={owner},external-dns/version=1"
                )],
                0,
            ),
        ]
    }

    #[test]
    fn owners_are_counted_by_the_records_they_vouch_for() {
        let mut zone = owned("a.example.com", "gone");
        zone.extend(owned("b.example.com", "gone"));
        zone.extend(owned("c.example.com", "alive"));
        zone.push(Endpoint::new(
            "hand.example.com",
            RecordType::A,
            ["192.0.2.9".to_string()],
            60,
        ));
        assert_eq!(
            owner_counts(&zone),
            BTreeMap::from([("alive".to_string(), 1), ("gone".to_string(), 2)])
        );
    }
}
