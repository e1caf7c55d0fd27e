//! Who publishes in a zone, and removing what a vanished owner left. In distributed mode a
//! cluster that disappears without deleting its policies leaves its records behind; the other
//! clusters never touch them (they are not theirs). `meridian-agent zone-owners` reports the
//! owners and how many records each vouches for, and `--purge <owner>` removes that owner's
//! records the way the owner itself would have.

use std::collections::BTreeMap;

use meridian_dns::model::Endpoint;
use meridian_dns::plan::{PlanInput, Registry, plan};
use meridian_providers::{Provider, ProviderError};

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
    changes.append(crate::shared_health::leave(owner, &zone, apex));
    if !changes.is_empty() {
        provider.apply(zone_id, &changes).await?;
    }
    Ok(changes.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::model::RecordType;

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
