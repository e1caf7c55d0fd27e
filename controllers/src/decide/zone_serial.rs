//! SOA serials that every server of an embedded zone agrees on: the leading hub replica, the
//! standbys and the agents serving DNS.
//!
//! Each server builds the zone itself, from the same records, so each would number its own
//! changes. The leader numbers them instead (at least the Unix time, +1 per change) and writes
//! the serial it serves, with a digest of what it serves under it, to the ManagedZone's status
//! (`status.serial`, `status.contentDigest`). A server that follows adopts that serial once its
//! own content has the same digest. Until then it numbers a change itself, one past the serial
//! it has, which stays below the leader's next (those follow the clock), so the leader's serial
//! can still be adopted when it comes. A serial never goes back, on any server.

use hickory_proto::rr::RecordType as WireType;
use meridian_api::kuadrant::ManagedZone;
use meridian_dns::changes::ZoneRecords;
use meridian_nameserver::{ZoneConfig, next_serial, serial_newer};
use sha2::{Digest, Sha256};

/// The leader's word on a zone: the serial it serves, and the digest of what it serves under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SerialStamp {
    pub serial: u32,
    pub digest: String,
}

impl SerialStamp {
    /// The stamp in the zone's status, if the leader has written one.
    pub fn of(zone: &ManagedZone) -> Option<SerialStamp> {
        let status = zone.status.as_ref()?;
        Some(SerialStamp {
            serial: status.serial?,
            digest: status.content_digest.clone()?,
        })
    }
}

/// Who numbers a server's changes of a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Numbering {
    /// The leading hub replica: it numbers them, and its numbers go to status.
    Leads,
    /// A standby replica or an agent: it takes the leader's numbers.
    Follows,
}

/// The digest of what a zone serves: its apex, name servers, keys and records. Equal content
/// gives equal digests on every server (records are in key order, each normalized).
pub fn content_digest(config: &ZoneConfig, records: &ZoneRecords) -> String {
    let mut hash = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(bytes);
    };
    field(config.apex.as_bytes());
    for name_server in &config.name_servers {
        field(name_server.to_string().as_bytes());
    }
    if let Some(keys) = &config.dnssec {
        for record_type in [WireType::DNSKEY, WireType::CDS] {
            for record in keys.apex_records(record_type) {
                field(record.to_string().as_bytes());
            }
        }
        field(&keys.signing_tag().to_be_bytes());
    }
    for endpoint in records.values() {
        let mut endpoint = endpoint.clone();
        endpoint.normalize();
        field(&serde_json::to_vec(&endpoint).expect("an endpoint serializes"));
    }
    hash.finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The serial to serve content with `digest` under (pure). `previous` is the serial served
/// until now and the digest of its content; `stamp` the leader's word from status.
pub fn choose_serial(
    previous: Option<(u32, &str)>,
    digest: &str,
    stamp: Option<&SerialStamp>,
    numbering: Numbering,
    now: u32,
) -> u32 {
    let adoptable = stamp.filter(|stamp| stamp.digest == digest);
    let one_past = |serial: u32| serial.wrapping_add(1).max(1);
    let Some((serial, served)) = previous else {
        // New here (a start, a zone added): the leader's serial for the same content, else one
        // past it (a follower) or the clock past it (the leader).
        return match (adoptable, stamp, numbering) {
            (Some(stamp), _, _) => stamp.serial,
            (None, Some(stamp), Numbering::Follows) => one_past(stamp.serial),
            (None, Some(stamp), Numbering::Leads) => next_serial(stamp.serial, now),
            (None, None, _) => now,
        };
    };
    if served == digest {
        // The same content (built again for another reason): the serial stays, unless it is
        // the leader's to take.
        return match (numbering, adoptable) {
            (Numbering::Follows, Some(stamp)) if serial_newer(stamp.serial, serial) => stamp.serial,
            _ => serial,
        };
    }
    match (numbering, adoptable, stamp) {
        (Numbering::Follows, Some(stamp), _) if serial_newer(stamp.serial, serial) => stamp.serial,
        (Numbering::Follows, _, Some(_)) => one_past(serial),
        // No word from a leader yet (a fresh install, or a leader from before serials were
        // shared): number as a leader would.
        (Numbering::Follows, _, None) => next_serial(serial, now),
        (Numbering::Leads, _, stamp) => {
            let next = next_serial(serial, now);
            // Past whatever a former leader served, even if this replica never took it.
            match stamp {
                Some(stamp) if !serial_newer(next, stamp.serial) => one_past(stamp.serial),
                _ => next,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u32 = 1_800_000_000;

    fn stamp(serial: u32, digest: &str) -> SerialStamp {
        SerialStamp {
            serial,
            digest: digest.into(),
        }
    }

    #[test]
    fn servers_take_the_leaders_serial_for_the_same_content_and_never_go_back() {
        use Numbering::{Follows, Leads};
        let leader_said = stamp(NOW - 100, "B");
        // (what, previous, digest, stamp, numbering, serial)
        type Case<'a> = (
            &'a str,
            Option<(u32, &'a str)>,
            &'a str,
            Option<&'a SerialStamp>,
            Numbering,
            u32,
        );
        let cases: [Case; 16] = [
            ("a first build, nothing said", None, "A", None, Leads, NOW),
            ("a first build, nothing said", None, "A", None, Follows, NOW),
            (
                "a start with the content the leader serves",
                None,
                "B",
                Some(&leader_said),
                Follows,
                NOW - 100,
            ),
            (
                "a leader restarting with its content",
                None,
                "B",
                Some(&leader_said),
                Leads,
                NOW - 100,
            ),
            (
                "a start ahead of the leader's word",
                None,
                "C",
                Some(&leader_said),
                Follows,
                NOW - 99,
            ),
            (
                "a leader starting with new content",
                None,
                "C",
                Some(&leader_said),
                Leads,
                NOW,
            ),
            (
                "a follower catching up",
                Some((NOW - 150, "A")),
                "B",
                Some(&leader_said),
                Follows,
                NOW - 100,
            ),
            (
                "the word comes after the change",
                Some((NOW - 150, "B")),
                "B",
                Some(&leader_said),
                Follows,
                NOW - 100,
            ),
            (
                "a follower ahead of the word",
                Some((NOW - 100, "B")),
                "C",
                Some(&leader_said),
                Follows,
                NOW - 99,
            ),
            (
                "a follower that numbered past the word keeps its serial",
                Some((NOW - 99, "B")),
                "B",
                Some(&leader_said),
                Follows,
                NOW - 99,
            ),
            (
                "a changed follower already past the word",
                Some((NOW - 99, "C")),
                "B",
                Some(&leader_said),
                Follows,
                NOW - 98,
            ),
            (
                "no word at all",
                Some((NOW - 150, "A")),
                "B",
                None,
                Follows,
                NOW,
            ),
            (
                "the leader's change",
                Some((NOW - 100, "B")),
                "C",
                Some(&leader_said),
                Leads,
                NOW,
            ),
            (
                "the leader built the same content again",
                Some((NOW - 100, "B")),
                "B",
                Some(&leader_said),
                Leads,
                NOW - 100,
            ),
            (
                "changes within a second",
                Some((NOW + 5, "B")),
                "C",
                Some(&leader_said),
                Leads,
                NOW + 6,
            ),
            (
                "a new leader behind what the old one served",
                Some((NOW - 200, "A")),
                "C",
                Some(&stamp(NOW + 10, "B")),
                Leads,
                NOW + 11,
            ),
        ];
        for (what, previous, digest, stamp, numbering, serial) in cases {
            let chosen = choose_serial(previous, digest, stamp, numbering, NOW);
            assert_eq!(chosen, serial, "{what}");
            if let Some((before, _)) = previous {
                assert!(
                    chosen == before || serial_newer(chosen, before),
                    "{what}: a serial never goes back"
                );
            }
        }
    }

    #[test]
    fn the_digest_covers_records_name_servers_and_keys_and_nothing_else() {
        use meridian_dns::model::{Endpoint, RecordType};
        use meridian_nameserver::dnssec::{KeyAlgorithm, ZoneKeys, generate_key};
        let endpoint = |target: &str| Endpoint {
            dns_name: "api.example.com".into(),
            record_type: RecordType::A,
            targets: vec![target.into()],
            record_ttl: 60,
            set_identifier: None,
            provider_specific: Vec::new(),
        };
        let records = |target: &str| {
            let endpoint = endpoint(target);
            ZoneRecords::from([(endpoint.key(), endpoint)])
        };
        let config = ZoneConfig::new("example.com");
        let base = content_digest(&config, &records("10.0.0.1"));
        assert_eq!(base, content_digest(&config, &records("10.0.0.1")));
        assert_eq!(base.len(), 64);
        assert_ne!(base, content_digest(&config, &records("10.0.0.2")));
        let other_servers = ZoneConfig::with_name_servers(
            "example.com",
            [meridian_nameserver::ZoneNameServer::parse("ns9.example.net").unwrap()],
        );
        assert_ne!(base, content_digest(&other_servers, &records("10.0.0.1")));
        let key = || generate_key(KeyAlgorithm::EcdsaP256Sha256).unwrap();
        let keys = ZoneKeys::new(
            "example.com",
            KeyAlgorithm::EcdsaP256Sha256,
            &key(),
            &key(),
            &[],
            3600,
        )
        .map(std::sync::Arc::new)
        .unwrap();
        assert_ne!(
            base,
            content_digest(
                &config.clone().signed_with(Some(keys)),
                &records("10.0.0.1")
            )
        );
    }
}
