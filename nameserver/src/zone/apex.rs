//! The records of a zone's apex that come from its configuration, not its records: the SOA,
//! the NS set and their glue, and, signed, the keys.

use hickory_proto::rr::rdata::{NS, SOA};
use hickory_proto::rr::{RData, Record, RecordType as WireType};

use meridian_dns::model::{Endpoint, RecordType};
use meridian_dns::wire::{DEFAULT_TTL, fqdn, to_wire};

use super::{NAME_SERVER_TTL, Zone};

/// The SOA's timers for secondaries: ask for changes hourly, retry every 10 minutes, and keep
/// serving when the primary cannot be reached for the zone's expire (`ZoneConfig::soa_expire`:
/// two weeks unless the ManagedZone says otherwise, never under one). Expire is how long a
/// secondary fails static: RFC 1912 suggests two to four weeks, zonemaster wants at least one,
/// and the day it was before made a secondary drop the zone after one day of a hub outage.
const SOA_REFRESH: i32 = 3600;
const SOA_RETRY: i32 = 600;
const _: () = assert!(
    super::MIN_SOA_EXPIRE as i32 > SOA_REFRESH + SOA_RETRY
        && super::DEFAULT_SOA_EXPIRE >= super::MIN_SOA_EXPIRE
);

/// The apex's own sets, each as one RRset: SOA, NS and, in a signed zone, DNSKEY, CDS and
/// CDNSKEY (their signatures are made when the zone is built).
pub(crate) fn apex_rrsets(zone: &Zone) -> Vec<Vec<Record>> {
    let mut rrsets = vec![vec![soa(zone)], ns_records(zone)];
    if let Some(keys) = &zone.config.dnssec {
        for record_type in [WireType::DNSKEY, WireType::CDS, WireType::CDNSKEY] {
            rrsets.push(keys.apex_records(record_type));
        }
    }
    rrsets
}

/// The zone's SOA at its serial.
pub(crate) fn soa(zone: &Zone) -> Record {
    soa_with_serial(zone, zone.serial)
}

pub(crate) fn soa_with_serial(zone: &Zone, serial: u32) -> Record {
    let apex = zone.apex();
    let primary = zone
        .config
        .name_servers
        .first()
        .map_or_else(|| format!("ns1.{apex}"), |ns| ns.name.clone());
    let rdata = SOA::new(
        fqdn(&primary),
        fqdn(&format!("hostmaster.{apex}")),
        serial,
        SOA_REFRESH,
        SOA_RETRY,
        i32::try_from(zone.config.soa_expire).unwrap_or(i32::MAX),
        DEFAULT_TTL,
    );
    Record::from_rdata(fqdn(apex), DEFAULT_TTL, RData::SOA(rdata))
}

pub(crate) fn ns_records(zone: &Zone) -> Vec<Record> {
    zone.config
        .name_servers
        .iter()
        .map(|ns| {
            Record::from_rdata(
                fqdn(zone.apex()),
                NAME_SERVER_TTL,
                RData::NS(NS(fqdn(&ns.name))),
            )
        })
        .collect()
}

/// The addresses of the zone's own name servers, for the additional section of an NS answer
/// (resolvers then need no second query to reach them).
pub(crate) fn name_server_glue(zone: &Zone) -> Vec<Record> {
    let mut glue = Vec::new();
    for ns in zone
        .config
        .name_servers
        .iter()
        .filter(|ns| ns.is_inside(zone.apex()))
    {
        if let Some(records) = zone.lookup(&ns.name) {
            let addresses: Vec<&Endpoint> = records
                .iter()
                .filter(|r| matches!(r.record_type, RecordType::A | RecordType::Aaaa))
                .collect();
            glue.extend(to_wire(&fqdn(&ns.name), addresses));
        }
    }
    glue
}
