//! The interface to DNS providers, change sets, and a strict in-memory provider.
//!
//! The in-memory provider is as strict as the strictest real provider: a batch is applied
//! whole or not at all, a create must not exist, a delete or update must match the current
//! record exactly, one record may change only once per batch, and a CNAME shares its name with
//! no other record. The engine's own tests run every plan against it.

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Mutex;

use crate::model::{Endpoint, RecordKey, RecordType};

pub mod batch;
pub mod bind_server;
pub mod budget;
pub mod counting_proxy;
pub mod google;
pub mod moto;
pub mod rfc2136;
pub mod route53;

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

/// A zone a provider serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneInfo {
    pub id: String,
    pub domain: String,
}

/// Why a provider refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("zone {0} not found")]
    ZoneNotFound(String),
    #[error("{0} already exists")]
    AlreadyExists(RecordKey),
    #[error("{0} does not match the current record")]
    Mismatch(RecordKey),
    #[error("{0} is changed twice in one batch")]
    ChangedTwice(RecordKey),
    #[error("CNAME at {0} would share its name with other records")]
    CnameNotAlone(String),
    #[error("provider error: {0}")]
    Other(String),
    #[error("invalid records, nothing sent: {0}")]
    Invalid(String),
    #[error("the provider refused the change: {0}")]
    Rejected(String),
    #[error("some records could not be published: {}", .0.join("; "))]
    PartlyApplied(Vec<String>),
    #[error("still throttled after retries: {0}")]
    Throttled(String),
}

/// What Meridian needs of a DNS provider.
pub trait Provider {
    fn list_zones(&self) -> impl Future<Output = Result<Vec<ZoneInfo>, ProviderError>> + Send;
    fn records(
        &self,
        zone_id: &str,
    ) -> impl Future<Output = Result<Vec<Endpoint>, ProviderError>> + Send;
    fn apply(
        &self,
        zone_id: &str,
        changes: &Changes,
    ) -> impl Future<Output = Result<(), ProviderError>> + Send;
}

/// A TXT value as zone files and provider APIs write it: quoted, with `"` and `\\` escaped, and
/// split into strings of at most 255 bytes (the most one DNS character-string holds).
pub(crate) fn quote_txt(value: &str) -> String {
    crate::model::txt_strings(value)
        .iter()
        .map(|chunk| format!("\"{}\"", chunk.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value [`quote_txt`] wrote: the quoted strings unescaped and joined. A value that is not
/// quoted is returned as it is.
pub(crate) fn unquote_txt(value: &str) -> String {
    let value = value.trim();
    if !value.starts_with('"') {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len());
    let mut inside = false;
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match (c, inside) {
            ('"', _) => inside = !inside,
            ('\\', true) => out.extend(chars.next()),
            (c, true) => out.push(c),
            (_, false) => {} // the blanks between strings
        }
    }
    out
}

/// A zone's records keyed by name, type and set identifier.
pub type ZoneRecords = BTreeMap<RecordKey, Endpoint>;

/// Applies `changes` to `zone` with the in-memory provider's strictness; on error `zone` is
/// unchanged.
pub fn apply_strictly(zone: &mut ZoneRecords, changes: &Changes) -> Result<(), ProviderError> {
    let mut touched = BTreeSet::new();
    let keys = changes
        .deletes
        .iter()
        .map(Endpoint::key)
        .chain(changes.updates.iter().map(|u| u.old.key()))
        .chain(changes.creates.iter().map(Endpoint::key));
    for key in keys {
        if !touched.insert(key.clone()) {
            return Err(ProviderError::ChangedTwice(key));
        }
    }
    let mut next = zone.clone();
    for delete in &changes.deletes {
        let key = delete.key();
        match next.get(&key) {
            Some(current) if current == delete => next.remove(&key),
            _ => return Err(ProviderError::Mismatch(key)),
        };
    }
    for update in &changes.updates {
        let key = update.old.key();
        if update.new.key() != key || next.get(&key) != Some(&update.old) {
            return Err(ProviderError::Mismatch(key));
        }
        next.insert(key, update.new.clone());
    }
    for create in &changes.creates {
        let key = create.key();
        if next.contains_key(&key) {
            return Err(ProviderError::AlreadyExists(key));
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
        return Err(ProviderError::CnameNotAlone(name.to_string()));
    }
    *zone = next;
    Ok(())
}

/// A strict provider that keeps zones in memory. It is a fake: tests of real providers run
/// against real servers.
#[derive(Debug, Default)]
pub struct InMemoryProvider {
    zones: Mutex<BTreeMap<String, (String, ZoneRecords)>>,
}

impl InMemoryProvider {
    pub fn with_zone(id: &str, domain: &str) -> Self {
        let provider = InMemoryProvider::default();
        provider
            .zones
            .lock()
            .expect("zones lock")
            .insert(id.to_string(), (domain.to_string(), ZoneRecords::new()));
        provider
    }

    fn with_records<T>(
        &self,
        zone_id: &str,
        f: impl FnOnce(&mut ZoneRecords) -> Result<T, ProviderError>,
    ) -> Result<T, ProviderError> {
        let mut zones = self.zones.lock().expect("zones lock");
        let (_, records) = zones
            .get_mut(zone_id)
            .ok_or_else(|| ProviderError::ZoneNotFound(zone_id.to_string()))?;
        f(records)
    }
}

impl Provider for InMemoryProvider {
    async fn list_zones(&self) -> Result<Vec<ZoneInfo>, ProviderError> {
        let zones = self.zones.lock().expect("zones lock");
        Ok(zones
            .iter()
            .map(|(id, (domain, _))| ZoneInfo {
                id: id.clone(),
                domain: domain.clone(),
            })
            .collect())
    }

    async fn records(&self, zone_id: &str) -> Result<Vec<Endpoint>, ProviderError> {
        self.with_records(zone_id, |records| Ok(records.values().cloned().collect()))
    }

    async fn apply(&self, zone_id: &str, changes: &Changes) -> Result<(), ProviderError> {
        self.with_records(zone_id, |records| apply_strictly(records, changes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(name: &str, ip: &str) -> Endpoint {
        Endpoint::new(name, RecordType::A, [ip.to_string()], 60)
    }

    fn cname(name: &str, target: &str) -> Endpoint {
        Endpoint::new(name, RecordType::Cname, [target.to_string()], 300)
    }

    #[tokio::test]
    async fn rejects_what_a_strict_provider_rejects_and_applies_nothing_then() {
        let provider = InMemoryProvider::with_zone("z", "example.com");
        let create = Changes {
            creates: vec![a("app.example.com", "192.0.2.1")],
            ..Default::default()
        };
        provider.apply("z", &create).await.unwrap();

        let cases = [
            (create.clone(), "create of an existing record"),
            (
                Changes {
                    deletes: vec![a("app.example.com", "192.0.2.9")],
                    ..Default::default()
                },
                "inexact delete",
            ),
            (
                Changes {
                    updates: vec![Update {
                        old: a("app.example.com", "192.0.2.9"),
                        new: a("app.example.com", "192.0.2.2"),
                    }],
                    ..Default::default()
                },
                "inexact update",
            ),
            (
                Changes {
                    deletes: vec![a("app.example.com", "192.0.2.1")],
                    creates: vec![a("app.example.com", "192.0.2.2")],
                    ..Default::default()
                },
                "two changes to one record",
            ),
            (
                Changes {
                    creates: vec![cname("app.example.com", "lb.example.com")],
                    ..Default::default()
                },
                "CNAME beside an A",
            ),
            (
                Changes {
                    creates: vec![a("new.example.com", "192.0.2.3")],
                    deletes: vec![a("gone.example.com", "192.0.2.4")],
                    ..Default::default()
                },
                "a valid create in a batch with an invalid delete",
            ),
        ];
        for (changes, what) in cases {
            assert!(
                provider.apply("z", &changes).await.is_err(),
                "{what} must be rejected"
            );
        }
        assert_eq!(
            provider.records("z").await.unwrap(),
            vec![a("app.example.com", "192.0.2.1")],
            "nothing applied"
        );
    }

    #[tokio::test]
    async fn a_type_change_in_one_batch_deletes_first() {
        let provider = InMemoryProvider::with_zone("z", "example.com");
        provider
            .apply(
                "z",
                &Changes {
                    creates: vec![a("app.example.com", "192.0.2.1")],
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let change = Changes {
            deletes: vec![a("app.example.com", "192.0.2.1")],
            creates: vec![
                cname("app.example.com", "klb.app.example.com"),
                a("klb.app.example.com", "192.0.2.1"),
            ],
            ..Default::default()
        };
        provider.apply("z", &change).await.unwrap();
        assert_eq!(provider.records("z").await.unwrap().len(), 2);
        assert_eq!(
            provider.list_zones().await.unwrap()[0].domain,
            "example.com"
        );
        assert!(matches!(
            provider.records("nope").await,
            Err(ProviderError::ZoneNotFound(_))
        ));
    }
}
