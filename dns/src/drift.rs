//! Drift: how a zone differs from what one owner published into it. A zone that people and
//! other tools also edit drifts; the controller reads the zone now and then (never in the
//! steady state between) and re-plans the records this finds, which puts back what was
//! changed or deleted and reports what someone else took over.

use std::collections::BTreeSet;

use crate::model::{Endpoint, RecordKey};
use crate::plan::Registry;

/// One difference between the zone and an owner's published record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// The record is gone.
    Missing(RecordKey),
    /// The record is there, but without targets this owner published, or with another TTL or
    /// other routing properties.
    Changed(RecordKey),
    /// The owner's ownership record is gone; `others` vouch for the record now (empty:
    /// nobody does).
    Unvouched {
        key: RecordKey,
        others: BTreeSet<String>,
    },
}

impl std::fmt::Display for Drift {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Drift::Missing(key) => write!(f, "{key} is missing"),
            Drift::Changed(key) => write!(f, "{key} was changed"),
            Drift::Unvouched { key, others } if others.is_empty() => {
                write!(f, "{key} lost its ownership record")
            }
            Drift::Unvouched { key, others } => write!(
                f,
                "{key} is vouched for by {} instead",
                others.iter().cloned().collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// How `zone` differs from what `owner` published (`published`, as its DNSRecord's status
/// says). Targets other owners added to a shared record are not drift.
pub fn drift(owner: &str, published: &[Endpoint], zone: &Registry) -> Vec<Drift> {
    let mut found = Vec::new();
    for record in published {
        let key = record.key();
        let Some(current) = zone.records.get(&key) else {
            found.push(Drift::Missing(key));
            continue;
        };
        let targets_kept = record
            .targets
            .iter()
            .all(|t| current.targets.iter().any(|c| c.eq_ignore_ascii_case(t)));
        if !targets_kept
            || current.record_ttl != record.record_ttl
            || current.provider_specific != record.provider_specific
        {
            found.push(Drift::Changed(key.clone()));
        }
        let mut owners = zone.owners(&key);
        if !owners.remove(owner) {
            found.push(Drift::Unvouched {
                key,
                others: owners.into_iter().map(String::from).collect(),
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::RecordType;
    use crate::plan::published_zone;

    fn a(name: &str, targets: &[&str]) -> Endpoint {
        Endpoint::new(
            name,
            RecordType::A,
            targets.iter().map(|t| t.to_string()),
            60,
        )
    }

    #[test]
    fn each_kind_of_drift_is_found_and_shared_targets_are_not_drift() {
        let published = [
            a("api.example.com", &["10.0.0.1"]),
            a("www.example.com", &["10.0.0.2"]),
        ];
        let as_published = published_zone("me", &published);
        let key = published[0].key();
        // (what happened to the zone, the drift found)
        let cases: Vec<(&str, Vec<Endpoint>, Vec<Drift>)> = vec![
            ("nothing", as_published.clone(), vec![]),
            (
                "another owner's target added",
                as_published
                    .iter()
                    .map(|r| {
                        let mut r = r.clone();
                        if r.key() == key {
                            r.targets.push("10.0.0.9".into());
                        }
                        r
                    })
                    .collect(),
                vec![],
            ),
            (
                "record deleted",
                as_published
                    .iter()
                    .filter(|r| r.key() != key)
                    .cloned()
                    .collect(),
                vec![Drift::Missing(key.clone())],
            ),
            (
                "target replaced",
                as_published
                    .iter()
                    .map(|r| {
                        if r.key() == key {
                            a("api.example.com", &["10.6.6.6"])
                        } else {
                            r.clone()
                        }
                    })
                    .collect(),
                vec![Drift::Changed(key.clone())],
            ),
            (
                "TTL changed",
                as_published
                    .iter()
                    .map(|r| {
                        let mut r = r.clone();
                        if r.key() == key {
                            r.record_ttl = 3600;
                        }
                        r
                    })
                    .collect(),
                vec![Drift::Changed(key.clone())],
            ),
            (
                "ownership record deleted",
                as_published
                    .iter()
                    .filter(|r| !r.dns_name.ends_with("-a-api.example.com"))
                    .cloned()
                    .collect(),
                vec![Drift::Unvouched {
                    key: key.clone(),
                    others: BTreeSet::new(),
                }],
            ),
            (
                "taken over",
                as_published
                    .iter()
                    .filter(|r| !r.dns_name.ends_with("-a-api.example.com"))
                    .cloned()
                    .chain(published_zone("them", &published[..1]).into_iter().skip(1))
                    .collect(),
                vec![Drift::Unvouched {
                    key: key.clone(),
                    others: ["them".to_string()].into(),
                }],
            ),
        ];
        for (what, zone, expected) in cases {
            assert_eq!(
                drift("me", &published, &Registry::read(&zone)),
                expected,
                "{what}"
            );
        }
    }
}
