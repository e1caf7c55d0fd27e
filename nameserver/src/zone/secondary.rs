//! The zone as a standard secondary holds it (BIND, Knot, a DNS provider's secondary
//! service). A secondary serves plain DNS: it cannot choose by GEO or weight, and it cannot hold
//! the several CNAMEs a weighted or GEO name has here. So each such name is carried as the
//! addresses its tree leads to (every cluster's, as the RFC2136 provider publishes them); names
//! outside the tree travel as they are.

use std::collections::BTreeSet;

use meridian_dns::model::{Endpoint, RecordType, is_at_or_below};
use meridian_dns::wire::DEFAULT_TTL;

use super::{NAME_SERVER_TTL, Zone};
use crate::history::PlainRecord;
use crate::query::MAX_CHAIN;

/// The zone as a secondary holds it, apart from the SOA: the NS set, and every name, those
/// with a GEO or weighted choice flattened to the addresses they lead to.
pub(crate) fn secondary_view(zone: &Zone) -> Vec<PlainRecord> {
    let apex = zone.apex();
    let mut view: BTreeSet<PlainRecord> = zone
        .config
        .name_servers
        .iter()
        .map(|ns| PlainRecord::new(apex, RecordType::Ns, NAME_SERVER_TTL, &ns.name))
        .collect();
    let records: Vec<&Endpoint> = zone.all_records().collect();
    for group in records.chunk_by(|a, b| a.dns_name == b.dns_name) {
        let name = group[0].dns_name.as_str();
        let dynamic = group.iter().any(|r| r.set_identifier.is_some());
        for record in group {
            let flattened = dynamic
                && matches!(
                    record.record_type,
                    RecordType::A | RecordType::Aaaa | RecordType::Cname
                );
            if flattened || !served(record.record_type) {
                continue;
            }
            for value in &record.targets {
                view.insert(PlainRecord::new(
                    name,
                    record.record_type,
                    record.record_ttl,
                    value,
                ));
            }
        }
        if dynamic {
            view.extend(flatten(zone, name, group));
        }
    }
    view.into_iter().collect()
}

/// The record types the nameserver serves (it does not serve SRV, MX or CAA).
fn served(record_type: RecordType) -> bool {
    !matches!(
        record_type,
        RecordType::Srv | RecordType::Mx | RecordType::Caa
    )
}

/// A GEO or weighted name as plain records: every address its tree leads to inside the zone;
/// when it leads to none, a CNAME to the first hostname outside the zone.
fn flatten(zone: &Zone, name: &str, records: &[&Endpoint]) -> Vec<PlainRecord> {
    let ttl = records
        .iter()
        .filter(|r| r.set_identifier.is_some())
        .map(|r| r.record_ttl)
        .min()
        .unwrap_or(DEFAULT_TTL);
    let mut addresses = BTreeSet::new();
    let mut hostnames = BTreeSet::new();
    let mut pending: Vec<(&Endpoint, usize)> = records.iter().map(|r| (*r, 0)).collect();
    while let Some((record, depth)) = pending.pop() {
        match record.record_type {
            RecordType::A | RecordType::Aaaa => {
                for target in &record.targets {
                    addresses.insert((record.record_type, target.as_str()));
                }
            }
            RecordType::Cname => {
                for target in &record.targets {
                    if !is_at_or_below(target, zone.apex()) {
                        hostnames.insert(target.as_str());
                    } else if depth < MAX_CHAIN {
                        let next = zone.lookup(target).unwrap_or_default();
                        pending.extend(next.iter().map(|r| (r, depth + 1)));
                    }
                }
            }
            _ => {}
        }
    }
    if addresses.is_empty() {
        return hostnames
            .first()
            .map(|host| PlainRecord::new(name, RecordType::Cname, ttl, host))
            .into_iter()
            .collect();
    }
    addresses
        .into_iter()
        .map(|(record_type, address)| PlainRecord::new(name, record_type, ttl, address))
        .collect()
}
