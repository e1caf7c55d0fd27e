//! Client locations from a MaxMind-format database (GeoIP2/GeoLite2 Country or City layout).

use std::net::IpAddr;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Where a client is: an ISO-3166 alpha-2 country and a continent written `GEO-XX`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    pub country: Option<String>,
    pub continent: Option<String>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
struct GeoRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    country: Option<IsoCode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    continent: Option<ContinentCode>,
}

#[derive(Debug, Deserialize, Serialize)]
struct IsoCode {
    iso_code: Option<String>,
}

#[derive(Debug, Deserialize, Serialize)]
struct ContinentCode {
    code: Option<String>,
}

/// A MaxMind-format database held in memory.
pub struct GeoDb {
    reader: maxminddb::Reader<Vec<u8>>,
}

impl std::fmt::Debug for GeoDb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GeoDb")
            .field("type", &self.reader.metadata().database_type)
            .finish()
    }
}

/// Why a database could not be used.
#[derive(Debug, thiserror::Error)]
#[error("GeoIP database: {0}")]
pub struct GeoDbError(String);

impl GeoDb {
    pub fn open(path: &Path) -> Result<Self, GeoDbError> {
        let bytes =
            std::fs::read(path).map_err(|e| GeoDbError(format!("{}: {e}", path.display())))?;
        Self::from_bytes(bytes)
    }

    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GeoDbError> {
        let reader =
            maxminddb::Reader::from_source(bytes).map_err(|e| GeoDbError(e.to_string()))?;
        Ok(GeoDb { reader })
    }

    /// The location of `address`, if the database knows it.
    pub fn locate(&self, address: IpAddr) -> Option<Location> {
        let record: GeoRecord = self.reader.lookup(address).ok()?.decode().ok()??;
        let location = Location {
            country: record.country.and_then(|c| c.iso_code),
            continent: record
                .continent
                .and_then(|c| c.code)
                .map(|code| format!("GEO-{code}")),
        };
        (location != Location::default()).then_some(location)
    }
}

/// Writes a small MaxMind-format IPv4 database: each network gets a country and a continent
/// code (`EU`, `NA`, …). For tests and benchmarks, which must not download GeoLite2.
pub fn write_database(networks: &[(ipnet::Ipv4Net, &str, &str)]) -> Vec<u8> {
    use maxminddb_writer::paths::IpAddrWithMask;
    let mut database = maxminddb_writer::Database::default();
    database.metadata.database_type = "Meridian-Test-Country".to_string();
    database.metadata.languages = vec!["en".to_string()];
    database.metadata.binary_format_major_version = 2;
    // libmaxminddb (PowerDNS, mmdblookup) rejects a database whose build_epoch is 0.
    database.metadata.build_epoch = 1_767_225_600;
    database.metadata.description.insert(
        "en".to_string(),
        "Meridian test country database".to_string(),
    );
    for (network, country, continent) in networks {
        let record = GeoRecord {
            country: Some(IsoCode {
                iso_code: Some(country.to_string()),
            }),
            continent: Some(ContinentCode {
                code: Some(continent.to_string()),
            }),
        };
        let data = database.insert_value(record).expect("serializable record");
        database.insert_node(
            IpAddrWithMask::new(IpAddr::V4(network.network()), network.prefix_len()),
            data,
        );
    }
    database.write_to(Vec::new()).expect("writing to memory")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_database_locates_its_networks_only() {
        let bytes = write_database(&[
            ("192.0.2.0/24".parse().unwrap(), "IE", "EU"),
            ("198.51.100.0/24".parse().unwrap(), "US", "NA"),
        ]);
        let db = GeoDb::from_bytes(bytes).unwrap();
        let ie = db.locate("192.0.2.77".parse().unwrap()).unwrap();
        assert_eq!(
            (ie.country.as_deref(), ie.continent.as_deref()),
            (Some("IE"), Some("GEO-EU"))
        );
        assert_eq!(
            db.locate("198.51.100.1".parse().unwrap())
                .unwrap()
                .country
                .as_deref(),
            Some("US")
        );
        assert_eq!(db.locate("203.0.113.1".parse().unwrap()), None);
    }
}
