//! Zone transfers to standard secondaries (BIND, Knot, a DNS provider's secondary service):
//! the AXFR and IXFR record sequences, built from the zone as a secondary holds it
//! ([`crate::zone::secondary`]) and the journal of its recent changes ([`crate::history`]).
//! Meridian's own servers keep answering by GEO and weight.

use hickory_proto::rr::Record;

use crate::history::{History, PlainRecord, serial_newer};
use crate::zone::Zone;

/// What an AXFR, or an IXFR from `client_serial`, sends: the records between the opening and
/// closing SOA, given the SOA of a serial.
pub(crate) fn transfer_records(
    zone: &Zone,
    history: &History,
    client_serial: Option<u32>,
    soa: impl Fn(u32) -> Record,
) -> Vec<Record> {
    let current = zone.serial;
    let mut records = vec![soa(current)];
    if let Some(serial) = client_serial {
        if serial == current || serial_newer(serial, current) {
            // Up to date (or ahead): the current SOA alone says so.
            return records;
        }
        if let Some(changes) = history.changes_since(serial) {
            for change in changes {
                records.push(soa(change.from));
                records.extend(change.removed.iter().flat_map(PlainRecord::to_wire));
                records.push(soa(change.to));
                records.extend(change.added.iter().flat_map(PlainRecord::to_wire));
            }
            records.push(soa(current));
            return records;
        }
    }
    records.extend(history.view.iter().flat_map(PlainRecord::to_wire));
    records.push(soa(current));
    records
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::JOURNAL_CHANGES;
    use crate::zone::secondary::secondary_view;
    use crate::zone::{ZoneConfig, ZoneNameServer};
    use meridian_dns::model::{Endpoint, RecordType};
    use meridian_dns::model::{GEO_CODE, WEIGHT};
    use meridian_dns::wire::fqdn;

    fn weighted(name: &str, set: &str, target: &str, weight: u32) -> Endpoint {
        Endpoint::new(name, RecordType::Cname, [target.to_string()], 60)
            .with_set_identifier(set)
            .with_property(WEIGHT, weight.to_string())
    }

    fn a(name: &str, address: &str, ttl: u32) -> Endpoint {
        Endpoint::new(name, RecordType::A, [address.to_string()], ttl)
    }

    fn plain(name: &str, record_type: RecordType, ttl: u32, value: &str) -> PlainRecord {
        PlainRecord::new(name, record_type, ttl, value)
    }

    fn zone(serial: u32, endpoints: Vec<Endpoint>) -> Zone {
        let config = ZoneConfig::with_name_servers(
            "example.com",
            [ZoneNameServer {
                name: "ns1.example.com".into(),
                addresses: vec!["192.0.2.53".parse().unwrap()],
            }],
        );
        Zone::new(config, serial, endpoints)
    }

    /// A GEO name over two weighted names, one of which leads outside the zone.
    fn tree() -> Vec<Endpoint> {
        vec![
            Endpoint::new(
                "api.example.com",
                RecordType::Cname,
                ["klb.api.example.com".to_string()],
                300,
            ),
            Endpoint::new(
                "klb.api.example.com",
                RecordType::Cname,
                ["ie.klb.api.example.com".to_string()],
                300,
            )
            .with_set_identifier("IE")
            .with_property(GEO_CODE, "IE"),
            Endpoint::new(
                "klb.api.example.com",
                RecordType::Cname,
                ["us.klb.api.example.com".to_string()],
                300,
            )
            .with_set_identifier("default")
            .with_property(GEO_CODE, "*"),
            weighted(
                "ie.klb.api.example.com",
                "c1",
                "c1.klb.api.example.com",
                120,
            ),
            weighted("ie.klb.api.example.com", "c2", "c2.klb.api.example.com", 60),
            weighted("us.klb.api.example.com", "c3", "lb.cloud.example.net", 10),
            a("c1.klb.api.example.com", "203.0.113.1", 60),
            a("c2.klb.api.example.com", "203.0.113.2", 60),
            Endpoint::new(
                "api.example.com",
                RecordType::Txt,
                ["\"heritage=meridian\"".to_string()],
                0,
            ),
        ]
    }

    #[test]
    fn secondaries_get_plain_records_with_every_address_a_choice_leads_to() {
        let view = secondary_view(&zone(7, tree()));
        use RecordType::*;
        assert_eq!(
            view,
            [
                plain("api.example.com", Cname, 300, "klb.api.example.com"),
                plain("api.example.com", Txt, 60, "\"heritage=meridian\""),
                plain("c1.klb.api.example.com", A, 60, "203.0.113.1"),
                plain("c2.klb.api.example.com", A, 60, "203.0.113.2"),
                plain("example.com", Ns, 3600, "ns1.example.com"),
                plain("ie.klb.api.example.com", A, 60, "203.0.113.1"),
                plain("ie.klb.api.example.com", A, 60, "203.0.113.2"),
                // The GEO name holds what every branch leads to inside the zone.
                plain("klb.api.example.com", A, 300, "203.0.113.1"),
                plain("klb.api.example.com", A, 300, "203.0.113.2"),
                plain("ns1.example.com", A, 3600, "192.0.2.53"),
                // No address inside the zone: one CNAME to the hostname outside.
                plain("us.klb.api.example.com", Cname, 60, "lb.cloud.example.net"),
            ]
        );
        // At most one CNAME per name, and never a CNAME next to other data.
        for group in view.chunk_by(|a, b| a.name == b.name) {
            let cnames = group.iter().filter(|r| r.record_type == Cname).count();
            let others = group
                .iter()
                .filter(|r| !matches!(r.record_type, Cname | Txt))
                .count();
            assert!(cnames <= 1 && (cnames == 0 || others == 0), "{group:?}");
        }
    }

    #[test]
    fn a_cname_loop_ends() {
        let looped = vec![
            weighted("x.example.com", "a", "y.example.com", 1),
            weighted("y.example.com", "b", "x.example.com", 1),
        ];
        let view = secondary_view(&zone(1, looped));
        assert!(
            view.iter()
                .all(|r| r.record_type == RecordType::Ns || r.record_type == RecordType::A)
        );
    }

    fn history_of(versions: &[Vec<Endpoint>]) -> (Zone, History) {
        let mut previous: Option<(Zone, History)> = None;
        for (index, endpoints) in versions.iter().enumerate() {
            let zone = zone(100 + index as u32, endpoints.clone());
            let history = zone.history_after(previous.as_ref().map(|(z, h)| (h, z.serial)));
            previous = Some((zone, history));
        }
        previous.unwrap()
    }

    fn soa_serials(records: &[Record]) -> Vec<u32> {
        records
            .iter()
            .filter_map(|r| match &r.data {
                hickory_proto::rr::RData::SOA(soa) => Some(soa.serial),
                _ => None,
            })
            .collect()
    }

    fn fake_soa(serial: u32) -> Record {
        use hickory_proto::rr::RData;
        use hickory_proto::rr::rdata::SOA;
        Record::from_rdata(
            fqdn("example.com"),
            60,
            RData::SOA(SOA::new(
                fqdn("ns1.example.com"),
                fqdn("hostmaster.example.com"),
                serial,
                1,
                1,
                1,
                1,
            )),
        )
    }

    #[test]
    fn ixfr_sends_the_journal_since_the_client_serial_and_axfr_the_whole_zone() {
        let v0 = vec![a("a.example.com", "198.18.0.1", 60)];
        let v1 = vec![a("a.example.com", "198.18.0.2", 60)];
        let mut v2 = v1.clone();
        v2.push(a("b.example.com", "198.18.0.3", 60));
        let (zone, history) = history_of(&[v0, v1, v2]);
        assert_eq!(zone.serial, 102);

        // From 100: two changes, each old SOA, removed, new SOA, added.
        let ixfr = transfer_records(&zone, &history, Some(100), fake_soa);
        assert_eq!(soa_serials(&ixfr), [102, 100, 101, 101, 102, 102]);
        assert_eq!(ixfr.len(), 6 + 3, "198.18.0.1 out, 198.18.0.2 in, b in");
        // From 101: one change.
        let ixfr = transfer_records(&zone, &history, Some(101), fake_soa);
        assert_eq!(soa_serials(&ixfr), [102, 101, 102, 102]);
        assert_eq!(ixfr.len(), 5);
        // Up to date, or ahead: the SOA alone.
        for serial in [102, 103] {
            let ixfr = transfer_records(&zone, &history, Some(serial), fake_soa);
            assert_eq!(soa_serials(&ixfr), [102], "from {serial}");
            assert_eq!(ixfr.len(), 1);
        }
        // A serial the journal never saw, and AXFR: the whole zone between two SOAs.
        for client in [Some(50), None] {
            let full = transfer_records(&zone, &history, client, fake_soa);
            assert_eq!(soa_serials(&full), [102, 102], "{client:?}");
            assert_eq!(full.len(), 2 + history.view.len());
        }
    }

    #[test]
    fn the_journal_forgets_the_oldest_changes_first() {
        let versions: Vec<Vec<Endpoint>> = (0..JOURNAL_CHANGES as u32 + 5)
            .map(|i| {
                vec![a(
                    "a.example.com",
                    &format!("198.18.{}.{}", i / 200, i % 200),
                    60,
                )]
            })
            .collect();
        let (zone, history) = history_of(&versions);
        assert_eq!(history.journal.len(), JOURNAL_CHANGES);
        assert!(history.changes_since(100).is_none(), "forgotten");
        let oldest_kept = zone.serial - JOURNAL_CHANGES as u32;
        assert_eq!(
            history.changes_since(oldest_kept).map(Iterator::count),
            Some(JOURNAL_CHANGES)
        );
        assert!(serial_newer(1, u32::MAX), "serials wrap");
        assert!(!serial_newer(u32::MAX, 1));
    }
}
