//! Change sets: what a plan asks a zone to do, and what applying one strictly means.
//!
//! [`apply_strictly`] holds a zone to the rules of the strictest real provider. The embedded
//! nameserver's zones are kept with it, and the engine's tests run every plan through it.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Endpoint, RecordKey, RecordType};

/// One record replaced by another with the same key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Update {
    pub old: Endpoint,
    pub new: Endpoint,
}

/// A change batch. Providers apply deletes before updates before creates, so a record can
/// change type (delete A, create CNAME) inside one batch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    pub deletes: Vec<Endpoint>,
    pub updates: Vec<Update>,
    pub creates: Vec<Endpoint>,
}

impl Changes {
    pub fn is_empty(&self) -> bool {
        self.deletes.is_empty() && self.updates.is_empty() && self.creates.is_empty()
    }

    pub fn len(&self) -> usize {
        self.deletes.len() + self.updates.len() + self.creates.len()
    }

    /// Adds another batch's changes to this one.
    pub fn append(&mut self, other: Changes) {
        self.deletes.extend(other.deletes);
        self.updates.extend(other.updates);
        self.creates.extend(other.creates);
    }
}

/// Why a strict zone refused a change set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("{0} already exists")]
    AlreadyExists(RecordKey),
    #[error("{0} does not match the current record")]
    Mismatch(RecordKey),
    #[error("{0} is changed twice in one batch")]
    ChangedTwice(RecordKey),
    #[error("CNAME at {0} would share its name with other records")]
    CnameNotAlone(String),
}

/// A zone's records keyed by name, type and set identifier.
pub type ZoneRecords = BTreeMap<RecordKey, Endpoint>;

/// Applies `changes` to `zone` as strictly as the strictest provider would: a batch is applied
/// whole or not at all, a create must not exist, a delete or update must match the current
/// record exactly, one record may change only once per batch, and a CNAME shares its name with
/// no other record. On error `zone` is unchanged.
pub fn apply_strictly(zone: &mut ZoneRecords, changes: &Changes) -> Result<(), Refusal> {
    // Checked against the zone as it is, without copying it: every record changes at most
    // once per batch, so no change sees another's effect. A copy of the zone per batch made an
    // embedded zone of 6,000 hosts cost more to change than to serve.
    let mut touched = BTreeSet::new();
    let keys = changes
        .deletes
        .iter()
        .map(Endpoint::key)
        .chain(changes.updates.iter().map(|u| u.old.key()))
        .chain(changes.creates.iter().map(Endpoint::key));
    for key in keys {
        if !touched.insert(key.clone()) {
            return Err(Refusal::ChangedTwice(key));
        }
    }
    for delete in &changes.deletes {
        let key = delete.key();
        if zone.get(&key) != Some(delete) {
            return Err(Refusal::Mismatch(key));
        }
    }
    for update in &changes.updates {
        let key = update.old.key();
        if update.new.key() != key || zone.get(&key) != Some(&update.old) {
            return Err(Refusal::Mismatch(key));
        }
    }
    for create in &changes.creates {
        let key = create.key();
        if zone.contains_key(&key) {
            return Err(Refusal::AlreadyExists(key));
        }
    }
    // The zone held no CNAME beside another record before (every change comes through
    // here), so only the names this batch writes can break that.
    let deleted: BTreeSet<RecordKey> = changes.deletes.iter().map(Endpoint::key).collect();
    let written = changes
        .updates
        .iter()
        .map(|u| &u.new)
        .chain(&changes.creates);
    let names: BTreeSet<&str> = written.clone().map(|e| e.dns_name.as_str()).collect();
    for name in names {
        let mut types: BTreeSet<RecordType> = records_named(zone, name)
            .filter(|key| !deleted.contains(*key))
            .map(|key| key.record_type)
            .collect();
        types.extend(
            written
                .clone()
                .filter(|e| e.dns_name == name)
                .map(|e| e.record_type),
        );
        if types.contains(&RecordType::Cname) && types.len() > 1 {
            return Err(Refusal::CnameNotAlone(name.to_string()));
        }
    }
    for delete in &changes.deletes {
        zone.remove(&delete.key());
    }
    for endpoint in written {
        zone.insert(endpoint.key(), endpoint.clone());
    }
    Ok(())
}

/// The keys of the zone's records named `name` (keys sort by name first).
fn records_named<'a>(zone: &'a ZoneRecords, name: &'a str) -> impl Iterator<Item = &'a RecordKey> {
    let first = RecordKey {
        dns_name: name.to_string(),
        record_type: RecordType::A,
        set_identifier: None,
    };
    zone.range(first..)
        .map(|(key, _)| key)
        .take_while(move |key| key.dns_name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(name: &str, record_type: RecordType, target: &str) -> Endpoint {
        Endpoint {
            dns_name: name.into(),
            record_type,
            targets: vec![target.into()],
            record_ttl: 60,
            set_identifier: None,
            provider_specific: Vec::new(),
        }
    }

    fn zone_of(records: &[Endpoint]) -> ZoneRecords {
        records.iter().map(|r| (r.key(), r.clone())).collect()
    }

    #[test]
    fn a_batch_applies_whole_or_not_at_all() {
        let a = record("api.example.com", RecordType::A, "10.0.0.1");
        let a2 = record("api.example.com", RecordType::A, "10.0.0.2");
        let txt = record("api.example.com", RecordType::Txt, "\"owner\"");
        let cname = record("api.example.com", RecordType::Cname, "lb.example.net");
        let other_cname = record("www.example.com", RecordType::Cname, "lb.example.net");
        let www_a = record("www.example.com", RecordType::A, "10.0.0.9");
        let update = |old: &Endpoint, new: &Endpoint| Update {
            old: old.clone(),
            new: new.clone(),
        };
        let batch =
            |deletes: Vec<Endpoint>, updates: Vec<Update>, creates: Vec<Endpoint>| Changes {
                deletes,
                updates,
                creates,
            };
        // What the zone holds, the batch, and what it holds after (or why it refused).
        type Case = (
            &'static str,
            Vec<Endpoint>,
            Changes,
            Result<Vec<Endpoint>, Refusal>,
        );
        let cases: Vec<Case> = vec![
            (
                "a create, an update and a delete",
                vec![a.clone(), other_cname.clone()],
                batch(
                    vec![other_cname.clone()],
                    vec![update(&a, &a2)],
                    vec![txt.clone()],
                ),
                Ok(vec![a2.clone(), txt.clone()]),
            ),
            (
                "a create of a record that exists",
                vec![a.clone()],
                batch(vec![], vec![], vec![a2.clone()]),
                Err(Refusal::AlreadyExists(a.key())),
            ),
            (
                "a delete that does not match",
                vec![a.clone()],
                batch(vec![a2.clone()], vec![], vec![]),
                Err(Refusal::Mismatch(a.key())),
            ),
            (
                "an update of what is not there",
                vec![],
                batch(vec![], vec![update(&a, &a2)], vec![]),
                Err(Refusal::Mismatch(a.key())),
            ),
            (
                "one record changed twice",
                vec![a.clone()],
                batch(vec![a.clone()], vec![], vec![a2.clone()]),
                Err(Refusal::ChangedTwice(a.key())),
            ),
            (
                "a CNAME beside a record the zone has",
                vec![txt.clone()],
                batch(vec![], vec![], vec![cname.clone()]),
                Err(Refusal::CnameNotAlone("api.example.com".into())),
            ),
            (
                "a record beside a CNAME the zone has",
                vec![other_cname.clone()],
                batch(vec![], vec![], vec![www_a.clone()]),
                Err(Refusal::CnameNotAlone("www.example.com".into())),
            ),
            (
                "a CNAME beside a record of the same batch",
                vec![],
                batch(vec![], vec![], vec![cname.clone(), a.clone()]),
                Err(Refusal::CnameNotAlone("api.example.com".into())),
            ),
            (
                "a CNAME in place of the record deleted in the same batch",
                vec![a.clone()],
                batch(vec![a.clone()], vec![], vec![cname.clone()]),
                Ok(vec![cname.clone()]),
            ),
        ];
        for (case, before, changes, expected) in cases {
            let mut zone = zone_of(&before);
            let result = apply_strictly(&mut zone, &changes);
            match expected {
                Ok(after) => {
                    assert_eq!(result, Ok(()), "{case}");
                    assert_eq!(zone, zone_of(&after), "{case}");
                }
                Err(refusal) => {
                    assert_eq!(result, Err(refusal), "{case}");
                    assert_eq!(zone, zone_of(&before), "{case}: the zone is unchanged");
                }
            }
        }
    }
}
