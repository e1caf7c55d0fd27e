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
    let mut next = zone.clone();
    for delete in &changes.deletes {
        let key = delete.key();
        match next.get(&key) {
            Some(current) if current == delete => next.remove(&key),
            _ => return Err(Refusal::Mismatch(key)),
        };
    }
    for update in &changes.updates {
        let key = update.old.key();
        if update.new.key() != key || next.get(&key) != Some(&update.old) {
            return Err(Refusal::Mismatch(key));
        }
        next.insert(key, update.new.clone());
    }
    for create in &changes.creates {
        let key = create.key();
        if next.contains_key(&key) {
            return Err(Refusal::AlreadyExists(key));
        }
        next.insert(key, create.clone());
    }
    let mut types_by_name: BTreeMap<&str, BTreeSet<RecordType>> = BTreeMap::new();
    for key in next.keys() {
        types_by_name
            .entry(&key.dns_name)
            .or_default()
            .insert(key.record_type);
    }
    if let Some((name, _)) = types_by_name
        .iter()
        .find(|(_, types)| types.contains(&RecordType::Cname) && types.len() > 1)
    {
        return Err(Refusal::CnameNotAlone(name.to_string()));
    }
    *zone = next;
    Ok(())
}
