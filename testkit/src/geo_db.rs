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
    let networks: Vec<(IpAddr, u8, &str, &str)> = networks
        .iter()
        .map(|(net, country, continent)| {
            (
                IpAddr::V4(net.network()),
                net.prefix_len(),
                *country,
                *continent,
            )
        })
        .collect();
    write(&networks, false)
}

/// Writes a small MaxMind-format IPv6 database, as GeoLite2 is: IPv6 networks, and IPv4 ones
/// where readers look IPv4 addresses up in such a database (`::a.b.c.d/96+len`).
pub fn write_database_v6(networks: &[(ipnet::IpNet, &str, &str)]) -> Vec<u8> {
    let networks: Vec<(IpAddr, u8, &str, &str)> = networks
        .iter()
        .map(|(net, country, continent)| match net {
            ipnet::IpNet::V4(v4) => (
                IpAddr::V6(std::net::Ipv6Addr::from(u128::from(u32::from(
                    v4.network(),
                )))),
                v4.prefix_len() + 96,
                *country,
                *continent,
            ),
            ipnet::IpNet::V6(v6) => (
                IpAddr::V6(v6.network()),
                v6.prefix_len(),
                *country,
                *continent,
            ),
        })
        .collect();
    write(&networks, true)
}

fn write(networks: &[(IpAddr, u8, &str, &str)], version_6: bool) -> Vec<u8> {
    use maxminddb_writer::paths::IpAddrWithMask;
    let mut database = maxminddb_writer::Database::default();
    if version_6 {
        database.metadata.ip_version = maxminddb_writer::metadata::IpVersion::V6;
    }
    database.metadata.database_type = "Meridian-Test-Country".to_string();
    database.metadata.languages = vec!["en".to_string()];
    database.metadata.binary_format_major_version = 2;
    // libmaxminddb (PowerDNS, mmdblookup) rejects a database whose build_epoch is 0.
    database.metadata.build_epoch = 1_767_225_600;
    database.metadata.description.insert(
        "en".to_string(),
        "Meridian test country database".to_string(),
    );
    for (address, prefix, country, continent) in networks {
        let record = CountryRecord {
            country: IsoCode {
                iso_code: country.to_string(),
            },
            continent: ContinentCode {
                code: continent.to_string(),
            },
        };
        let data = database.insert_value(record).expect("serializable record");
        database.insert_node(IpAddrWithMask::new(*address, *prefix), data);
    }
    database.write_to(Vec::new()).expect("writing to memory")
}
