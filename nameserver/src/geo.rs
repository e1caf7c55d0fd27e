//! Client locations from a MaxMind-format database (GeoIP2/GeoLite2 Country or City layout).

use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;

/// Where a client is: an ISO-3166 alpha-2 country and a continent written `GEO-XX`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Location {
    pub country: Option<GeoCode>,
    pub continent: Option<GeoCode>,
}

/// A short location code (`IE`, `GEO-EU`) held inline: locating a client is on the path of
/// every GEO answer, and a heap string per query was most of its cost.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct GeoCode {
    bytes: [u8; GeoCode::CAPACITY],
    length: u8,
}

impl GeoCode {
    const CAPACITY: usize = 8;
    const CONTINENT_PREFIX: &'static str = "GEO-";

    /// The code, if it is short enough to be one (at most 8 bytes).
    pub fn new(code: &str) -> Option<GeoCode> {
        Self::joined(&[code])
    }

    /// A continent code as Meridian writes it: `EU` becomes `GEO-EU`.
    pub fn continent(code: &str) -> Option<GeoCode> {
        Self::joined(&[Self::CONTINENT_PREFIX, code])
    }

    fn joined(parts: &[&str]) -> Option<GeoCode> {
        let length: usize = parts.iter().map(|part| part.len()).sum();
        if length == 0 || length > Self::CAPACITY {
            return None;
        }
        let mut bytes = [0u8; Self::CAPACITY];
        let mut at = 0;
        for part in parts {
            bytes[at..at + part.len()].copy_from_slice(part.as_bytes());
            at += part.len();
        }
        Some(GeoCode {
            bytes,
            length: u8::try_from(length).ok()?,
        })
    }

    pub fn as_str(&self) -> &str {
        // Built only from whole `&str`s, so always UTF-8.
        std::str::from_utf8(&self.bytes[..usize::from(self.length)]).unwrap_or_default()
    }
}

impl std::ops::Deref for GeoCode {
    type Target = str;

    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for GeoCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

impl std::fmt::Display for GeoCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The parts of a database record Meridian reads, borrowed from the database in memory.
#[derive(Debug, Default, Deserialize)]
struct GeoRecord<'a> {
    #[serde(default, borrow)]
    country: Option<IsoCode<'a>>,
    #[serde(default, borrow)]
    continent: Option<ContinentCode<'a>>,
}

#[derive(Debug, Deserialize)]
struct IsoCode<'a> {
    #[serde(borrow)]
    iso_code: Option<&'a str>,
}

#[derive(Debug, Deserialize)]
struct ContinentCode<'a> {
    #[serde(borrow)]
    code: Option<&'a str>,
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
            country: record
                .country
                .and_then(|c| c.iso_code)
                .and_then(GeoCode::new),
            continent: record
                .continent
                .and_then(|c| c.code)
                .and_then(GeoCode::continent),
        };
        (location != Location::default()).then_some(location)
    }
}
