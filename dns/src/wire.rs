//! Engine records as DNS wire records (hickory-proto), for the two crates that speak DNS: the
//! embedded nameserver and the RFC2136 provider. Behind the `wire` feature, so the engine on
//! its own needs no DNS wire library.

use std::net::{Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType as WireType};

use crate::model::{Endpoint, RecordType};

/// TTL for records published without one (and the nameserver's negative-caching TTL).
pub const DEFAULT_TTL: u32 = 60;

/// The wire type of a record type.
pub fn wire_type(record_type: RecordType) -> WireType {
    match record_type {
        RecordType::A => WireType::A,
        RecordType::Aaaa => WireType::AAAA,
        RecordType::Cname => WireType::CNAME,
        RecordType::Txt => WireType::TXT,
        RecordType::Ns => WireType::NS,
        RecordType::Srv => WireType::SRV,
        RecordType::Mx => WireType::MX,
        RecordType::Caa => WireType::CAA,
    }
}

/// `records` at `owner` as wire records: one per target. SRV, MX and CAA values, and targets
/// that do not parse as their type, are left out.
pub fn to_wire(owner: &Name, records: Vec<&Endpoint>) -> Vec<Record> {
    let mut wire = Vec::new();
    for record in records {
        let ttl = if record.record_ttl == 0 {
            DEFAULT_TTL
        } else {
            record.record_ttl
        };
        for target in &record.targets {
            let rdata = match record.record_type {
                RecordType::A => target.parse::<Ipv4Addr>().ok().map(|ip| RData::A(A(ip))),
                RecordType::Aaaa => target
                    .parse::<Ipv6Addr>()
                    .ok()
                    .map(|ip| RData::AAAA(AAAA(ip))),
                RecordType::Cname => Name::from_ascii(format!("{target}."))
                    .ok()
                    .map(|n| RData::CNAME(CNAME(n))),
                RecordType::Ns => Name::from_ascii(format!("{target}."))
                    .ok()
                    .map(|n| RData::NS(NS(n))),
                // One DNS character-string holds 255 bytes: longer values travel as several.
                RecordType::Txt => Some(RData::TXT(TXT::new(crate::model::txt_strings(target)))),
                RecordType::Srv | RecordType::Mx | RecordType::Caa => None,
            };
            if let Some(rdata) = rdata {
                wire.push(Record::from_rdata(owner.clone(), ttl, rdata));
            }
        }
    }
    wire
}

/// `name` as an absolute DNS name (the root when it is not a valid name).
pub fn fqdn(name: &str) -> Name {
    Name::from_ascii(format!("{name}.")).unwrap_or_else(|_| Name::root())
}
