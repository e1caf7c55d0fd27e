//! A strict provider that keeps zones in memory: a FAKE, for tests that need a `Provider`
//! without a server. Tests of the real providers run against real servers (moto, BIND) or, for
//! Cloud DNS, the request-checking fake.

use std::collections::BTreeMap;
use std::sync::Mutex;

use meridian_dns::changes::{Changes, ZoneRecords, apply_strictly};
use meridian_dns::model::Endpoint;
use meridian_providers::{Provider, ProviderError, ZoneInfo};

/// Zones in memory, held to the engine's strict rules (`apply_strictly`).
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
        self.with_records(zone_id, |records| Ok(apply_strictly(records, changes)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::changes::Update;
    use meridian_dns::model::RecordType;

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
