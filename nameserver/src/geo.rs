//! Client locations from a MaxMind-format database (GeoIP2/GeoLite2 Country or City layout).

use std::cell::RefCell;
use std::net::IpAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use ipnet::IpNet;
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
    /// Tells this database's entries in a thread's [`RecentNetworks`] from another's.
    id: u64,
}

/// Numbers the databases opened in this process.
static NEXT_DATABASE_ID: AtomicU64 = AtomicU64::new(1);

/// Sets in a thread's cache of recent networks, of two networks each: about 48 KiB a thread,
/// enough for the client networks of a busy resolver population to stay while they keep
/// asking.
const RECENT_SETS: usize = 512;

/// A network the database gave for an address, with what it says of every address in it.
#[derive(Debug, Clone, Copy)]
struct RecentNetwork {
    database: u64,
    network: IpNet,
    location: Option<Location>,
}

/// The networks recently located on one thread: two in each set, the one used last first. The
/// database gives each answer's network (the prefix its tree walk ended at), so an address
/// inside a cached network has exactly that answer: a hit is never stale or approximate. The
/// tree walk and the record's decoding it saves were most of a GEO answer's cost.
type RecentNetworks = Box<[[Option<RecentNetwork>; 2]]>;

thread_local! {
    /// Made on a thread's first GEO lookup, so threads that never locate anyone hold none.
    static RECENT: RefCell<Option<RecentNetworks>> = const { RefCell::new(None) };
}

/// The set `address` falls in: its /24 (IPv4) or /56 (IPv6, the longest ECS prefix resolvers
/// send) hashed, so the addresses of one client network share a set and neighbours spread. An
/// IPv4-mapped address (a dual-stack socket's IPv4 client) is keyed by its IPv4 part, or every
/// such client would fall in one set.
fn recent_set(address: IpAddr) -> usize {
    let key = match address.to_canonical() {
        IpAddr::V4(v4) => u64::from(u32::from(v4) >> 8),
        IpAddr::V6(v6) => ((u128::from(v6) >> 72) as u64) | (1 << 63),
    };
    // Fibonacci hashing: the top bits of the product spread keys that differ in low bits.
    (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (64 - RECENT_SETS.trailing_zeros())) as usize
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
        let id = NEXT_DATABASE_ID.fetch_add(1, Ordering::Relaxed);
        Ok(GeoDb { reader, id })
    }

    /// The location of `address`, if the database knows it; from this thread's cache of recent
    /// networks when `address` is in one.
    pub fn locate(&self, address: IpAddr) -> Option<Location> {
        let set = recent_set(address);
        let holds = |entry: &Option<RecentNetwork>| {
            entry.is_some_and(|e| e.database == self.id && e.network.contains(&address))
        };
        let cached = RECENT.with_borrow_mut(|recent| {
            let ways = &mut recent.as_mut()?[set];
            if holds(&ways[0]) {
                return ways[0];
            }
            if holds(&ways[1]) {
                ways.swap(0, 1); // used last: the other goes first
                return ways[0];
            }
            None
        });
        if let Some(entry) = cached {
            return entry.location;
        }
        let (network, location) = self.look_up(address)?;
        RECENT.with_borrow_mut(|recent| {
            let ways = &mut recent.get_or_insert_with(|| vec![[None; 2]; RECENT_SETS].into())[set];
            // The one used longer ago goes.
            ways[1] = ways[0];
            ways[0] = Some(RecentNetwork {
                database: self.id,
                network,
                location,
            });
        });
        location
    }

    /// The network the database holds `address` in, and its location there (none when the
    /// database has no record for it, or one with neither code): the walk of its tree, with no
    /// cache. `None` when the address cannot be looked up at all.
    fn look_up(&self, address: IpAddr) -> Option<(IpNet, Option<Location>)> {
        let found = self.reader.lookup(address).ok()?;
        let network = found.network().ok()?;
        let network = IpNet::new(network.network(), network.prefix()).ok()?;
        let record: Option<GeoRecord> = found.decode().ok()?;
        Some((network, record.and_then(Self::location_of)))
    }

    fn location_of(record: GeoRecord<'_>) -> Option<Location> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    fn is_cached(database: &GeoDb, address: IpAddr) -> bool {
        RECENT.with_borrow(|recent| {
            recent.as_ref().is_some_and(|recent| {
                recent[recent_set(address)]
                    .iter()
                    .flatten()
                    .any(|entry| entry.database == database.id && entry.network.contains(&address))
            })
        })
    }

    /// Nested networks (a /24 carved out of a /16, a /28 out of that /24), a country-less
    /// record, and space the database does not hold.
    fn database(carve_out: &str) -> GeoDb {
        GeoDb::from_bytes(meridian_testkit::geo_db::write_database(&[
            ("10.0.0.0/16".parse().unwrap(), "IE", "EU"),
            ("10.0.1.0/24".parse().unwrap(), carve_out, "NA"),
            ("10.0.1.16/28".parse().unwrap(), "JP", "AS"),
            ("10.0.2.0/24".parse().unwrap(), "", "EU"),
            ("192.0.2.0/24".parse().unwrap(), "DE", "EU"),
        ]))
        .unwrap()
    }

    #[test]
    fn a_cached_location_is_exactly_the_databases_for_every_address_of_its_network() {
        let (first, second) = (database("US"), database("CA"));
        let mut rng = SmallRng::seed_from_u64(55);
        let mut hits = 0;
        for round in 0..40_000 {
            // One database for half the rounds, then the other, which takes over its sets.
            let database = if round < 20_000 { &first } else { &second };
            // Mostly the nested networks, so sets are shared and replaced often.
            let address = if round % 4 == 0 {
                IpAddr::V4(rng.random::<u32>().into())
            } else {
                IpAddr::V4((0x0a00_0000 | rng.random_range(0..0x0300u32)).into())
            };
            let expected = database.look_up(address).and_then(|(_, found)| found);
            let was_cached = is_cached(database, address);
            hits += usize::from(was_cached);
            assert_eq!(
                database.locate(address),
                expected,
                "{address} in database {}",
                database.id
            );
        }
        assert!(hits > 10_000, "the cache answered {hits} of 40,000");
        // Each database answers for itself from the same set.
        let carved = "10.0.1.1".parse().unwrap();
        for _ in 0..2 {
            assert_eq!(
                first.locate(carved).unwrap().country.unwrap().as_str(),
                "US"
            );
            assert_eq!(
                second.locate(carved).unwrap().country.unwrap().as_str(),
                "CA"
            );
        }
        // The /28 inside the /24 is its own network, cached or not.
        for address in ["10.0.1.17", "10.0.1.1", "10.0.1.17"] {
            let expected = if address == "10.0.1.17" { "JP" } else { "US" };
            let located = first.locate(address.parse().unwrap()).unwrap();
            assert_eq!(located.country.unwrap().as_str(), expected, "{address}");
        }
        // What the database does not hold is cached as unknown and stays unknown.
        for _ in 0..2 {
            assert_eq!(first.locate("203.0.113.9".parse().unwrap()), None);
        }
        // A record with a continent and no country.
        let continent_only = first.locate("10.0.2.9".parse().unwrap()).unwrap();
        assert_eq!(continent_only.country, None);
        assert_eq!(continent_only.continent.unwrap().as_str(), "GEO-EU");
    }

    #[test]
    fn an_ipv6_database_answers_both_families_from_the_cache_as_from_its_tree() {
        // As GeoLite2 is: IPv6, with IPv4 networks where readers look IPv4 addresses up.
        let database = GeoDb::from_bytes(meridian_testkit::geo_db::write_database_v6(&[
            ("10.0.0.0/16".parse().unwrap(), "IE", "EU"),
            ("10.0.1.0/24".parse().unwrap(), "US", "NA"),
            ("2001:db8::/32".parse().unwrap(), "DE", "EU"),
            ("2001:db8:1::/48".parse().unwrap(), "JP", "AS"),
        ]))
        .unwrap();
        let country = |address: &str| {
            database
                .locate(address.parse().unwrap())
                .and_then(|l| l.country)
                .map(|c| c.as_str().to_string())
        };
        for _ in 0..2 {
            assert_eq!(country("10.0.0.5").as_deref(), Some("IE"));
            assert_eq!(country("10.0.1.5").as_deref(), Some("US"));
            assert_eq!(country("2001:db8:1::5").as_deref(), Some("JP"));
            assert_eq!(country("2001:db8:2::5").as_deref(), Some("DE"));
            assert_eq!(country("2001:db9::5"), None);
        }
        let mut rng = SmallRng::seed_from_u64(6);
        for round in 0..20_000u32 {
            let address = match round % 4 {
                0 => IpAddr::V4((0x0a00_0000 | rng.random_range(0..0x0200u32)).into()),
                // The same addresses written as IPv6 (IPv4-compatible and IPv4-mapped).
                1 => IpAddr::V6(u128::from(0x0a00_0000 | rng.random_range(0..0x0200u32)).into()),
                2 => IpAddr::V6(
                    std::net::Ipv4Addr::from(0x0a00_0000 | rng.random_range(0..0x0200u32))
                        .to_ipv6_mapped(),
                ),
                _ => IpAddr::V6(
                    ((0x2001_0db8_u128 << 96) | (u128::from(rng.random_range(0..4u32)) << 80))
                        .into(),
                ),
            };
            let expected = database.look_up(address).and_then(|(_, found)| found);
            assert_eq!(database.locate(address), expected, "{address}");
        }
    }

    #[test]
    fn ipv4_clients_of_a_dual_stack_socket_spread_over_the_sets() {
        let sets: std::collections::BTreeSet<usize> = (0..256u32)
            .map(|i| {
                let client = std::net::Ipv4Addr::from(0x0a00_0000 | (i << 8));
                recent_set(IpAddr::V6(client.to_ipv6_mapped()))
            })
            .collect();
        assert!(sets.len() > 150, "256 /24s in {} sets", sets.len());
    }

    #[test]
    fn each_thread_keeps_its_own_recent_networks() {
        let database = database("US");
        let address: IpAddr = "192.0.2.77".parse().unwrap();
        assert_eq!(
            database.locate(address).unwrap().country.unwrap().as_str(),
            "DE"
        );
        std::thread::scope(|scope| {
            scope.spawn(|| {
                assert!(
                    RECENT.with_borrow(Option::is_none),
                    "a new thread starts empty"
                );
                assert_eq!(
                    database.locate(address).unwrap().country.unwrap().as_str(),
                    "DE"
                );
            });
        });
    }
}
