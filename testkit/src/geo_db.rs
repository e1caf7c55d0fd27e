//! Small MaxMind-format databases written on the spot, for the GEO tests, the demo and
//! `make bench-dns`, which must not download GeoLite2.

use std::net::IpAddr;

use serde::Serialize;

/// One network's data in the GeoIP2 Country layout (the part the nameserver reads).
#[derive(Debug, Serialize)]
struct CountryRecord {
    country: IsoCode,
    continent: ContinentCode,
}

#[derive(Debug, Serialize)]
struct IsoCode {
    iso_code: String,
}

#[derive(Debug, Serialize)]
struct ContinentCode {
    code: String,
}

/// Writes a small MaxMind-format IPv4 database: each network gets a country and a continent
/// code (`EU`, `NA`, …).
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
        let record = CountryRecord {
            country: IsoCode {
                iso_code: country.to_string(),
            },
            continent: ContinentCode {
                code: continent.to_string(),
            },
        };
        let data = database.insert_value(record).expect("serializable record");
        database.insert_node(
            IpAddrWithMask::new(IpAddr::V4(network.network()), network.prefix_len()),
            data,
        );
    }
    database.write_to(Vec::new()).expect("writing to memory")
}
