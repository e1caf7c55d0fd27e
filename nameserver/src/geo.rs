//! Client locations from a MaxMind-format database (GeoIP2/GeoLite2 Country or City layout).

use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;

/// Where a client is: an ISO-3166 alpha-2 country and a continent written `GEO-XX`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Location {
    pub country: Option<String>,
    pub continent: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct GeoRecord {
    #[serde(default)]
    country: Option<IsoCode>,
    #[serde(default)]
    continent: Option<ContinentCode>,
}

#[derive(Debug, Deserialize)]
struct IsoCode {
    iso_code: Option<String>,
}

#[derive(Debug, Deserialize)]
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
