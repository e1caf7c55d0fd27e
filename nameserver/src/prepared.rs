//! A zone's records as the fast path answers from them: each name's records by type, already
//! in wire form after their owner name, and, in a signed zone, their signatures. Built when a
//! zone is published (again only for the names that changed), so a query copies bytes.

use std::collections::HashMap;
use std::sync::Arc;

use hickory_proto::rr::{Name, Record};
use hickory_proto::serialize::binary::{BinEncodable, BinEncoder, NameEncoding};

use crate::dnssec::ZoneKeys;
use crate::query::{Candidate, Chosen};
use meridian_dns::model::{Endpoint, GEO_CODE, RecordType, WEIGHT, is_at_or_below};
use meridian_dns::wire::to_wire;
/// A zone's records as the fast path answers from them.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Prepared {
    /// The apex in lowercase wire form.
    pub(crate) apex: Box<[u8]>,
    /// Lowercase wire names that hold records → their records by type (shared with the
    /// zone's next version where a name's records stay the same).
    pub(crate) names: HashMap<Box<[u8]>, Arc<Node>>,
    /// When the first of its signatures is due to be made again (Unix time; never when the
    /// zone is unsigned).
    pub(crate) signatures_due: u64,
}

#[derive(Debug, Default, PartialEq)]
pub(crate) struct Node {
    /// Every served type at the name, CNAME included, by its type code.
    pub(crate) by_type: Vec<(u16, Vec<PreparedRecord>)>,
    /// The name's signatures, when the zone is signed.
    pub(crate) signed: Option<NodeSignatures>,
}

/// What a signed zone keeps of a name's signatures besides those of single records
/// ([`PreparedRecord::signature`]).
#[derive(Debug, PartialEq)]
pub(crate) struct NodeSignatures {
    /// The ZSK that made them.
    pub(crate) key_tag: u16,
    /// Unix time they are due to be made again (the general path signs until then).
    pub(crate) refresh_at: u64,
    /// Per type whose records answer together (none has a set identifier): the RRSIG over
    /// all of them, after its owner name.
    pub(crate) whole: Vec<(u16, Box<[u8]>)>,
}

impl Node {
    pub(crate) fn records(&self, code: u16) -> Option<&[PreparedRecord]> {
        self.by_type
            .iter()
            .find(|(t, _)| *t == code)
            .map(|(_, records)| records.as_slice())
    }

    /// The RRSIG (after its owner) of what `chosen` picks among the records of type `code`,
    /// if the node has fresh signatures.
    pub(crate) fn signature<'a>(
        &'a self,
        code: u16,
        records: &'a [PreparedRecord],
        chosen: Chosen,
        now: u64,
    ) -> Option<&'a [u8]> {
        let signed = self.signed.as_ref().filter(|s| now < s.refresh_at)?;
        match chosen {
            Chosen::All => signed
                .whole
                .iter()
                .find(|(t, _)| *t == code)
                .map(|(_, tail)| &**tail),
            Chosen::One(index) => records.get(index)?.signature.as_deref(),
            Chosen::None => None,
        }
    }
}

/// One endpoint as answers carry it.
#[derive(Debug, PartialEq)]
pub(crate) struct PreparedRecord {
    pub(crate) set_identifier: Option<String>,
    pub(crate) geo_code: Option<String>,
    pub(crate) weight: u64,
    /// Each target's resource record after its owner name: type, class, TTL, length, data.
    pub(crate) tails: Vec<Box<[u8]>>,
    /// A CNAME's first target.
    pub(crate) target: Option<Target>,
    /// In a signed zone, the RRSIG (after its owner) of this record's targets answered alone
    /// (GEO and weighted choices).
    pub(crate) signature: Option<Box<[u8]>>,
}

/// Where a CNAME leads.
#[derive(Debug, PartialEq)]
pub(crate) struct Target {
    /// Its wire name, as written: the owner of the next step of the chain.
    pub(crate) wire: Box<[u8]>,
    /// Its lowercase wire name, to look it up.
    pub(crate) key: Box<[u8]>,
    /// Whether it is inside the zone (else the resolver follows it).
    pub(crate) inside: bool,
}

impl Candidate for PreparedRecord {
    fn set_identifier(&self) -> Option<&str> {
        self.set_identifier.as_deref()
    }

    fn geo_code(&self) -> Option<&str> {
        self.geo_code.as_deref()
    }

    fn weight(&self) -> u64 {
        self.weight
    }
}

/// `name` (dotted, no final dot) in wire form, lowercased when `lowercase`; none when a label
/// is empty or too long.
pub(crate) fn wire_name(name: &str, lowercase: bool) -> Option<Box<[u8]>> {
    let mut wire = Vec::with_capacity(name.len() + 2);
    if !name.is_empty() {
        for label in name.split('.') {
            if label.is_empty() || label.len() > 63 {
                return None;
            }
            wire.push(label.len() as u8);
            if lowercase {
                wire.extend(label.bytes().map(|b| b.to_ascii_lowercase()));
            } else {
                wire.extend_from_slice(label.as_bytes());
            }
        }
    }
    wire.push(0);
    (wire.len() <= 255).then(|| wire.into_boxed_slice())
}

/// The records of `endpoint` after their owner name, one per target.
pub(crate) fn record_tails(endpoint: &Endpoint) -> Vec<Box<[u8]>> {
    to_wire(&Name::root(), vec![endpoint])
        .iter()
        .filter_map(record_tail)
        .collect()
}

/// `record` after its owner name: type, class, TTL, length, data (names uncompressed).
pub(crate) fn record_tail(record: &Record) -> Option<Box<[u8]>> {
    let mut record = record.clone();
    record.name = Name::root();
    let mut bytes = Vec::with_capacity(128);
    {
        let mut encoder = BinEncoder::new(&mut bytes);
        let mut encoder = encoder.with_name_encoding(NameEncoding::Uncompressed);
        record.emit(&mut encoder).ok()?;
    }
    // The owner is the root: one zero byte.
    Some(bytes[1..].into())
}

/// The RRSIG over `endpoints` (one owner and type) answered at `owner`, after its owner name.
pub(crate) fn signature_tail(
    keys: &ZoneKeys,
    owner: &Name,
    endpoints: Vec<&Endpoint>,
    now: u64,
) -> Option<Box<[u8]>> {
    let rrset = to_wire(owner, endpoints);
    record_tail(&keys.sign(&rrset, now)?)
}

/// A zone's records by normalized name, as [`Prepared::new`] reads them.
pub(crate) type RecordsByName = HashMap<String, Vec<Endpoint>>;

impl Prepared {
    /// Prepares the records of the zone at `apex`. A name whose records are the same in
    /// `previous` (the version this one replaces: its records and what was prepared of them)
    /// keeps what was prepared for it: a change to one host of a large zone encodes that host,
    /// not the zone, which made a cold start of 6,000 hosts quadratic.
    ///
    /// With `keys` (a signed zone), every answer a name can give is signed too, at Unix time
    /// `now`; a kept name keeps its signatures while they are fresh and made by the signing key.
    pub(crate) fn new(
        apex: &str,
        records: &RecordsByName,
        previous: Option<(&RecordsByName, &Prepared)>,
        keys: Option<&ZoneKeys>,
        now: u64,
    ) -> Self {
        let apex_key = wire_name(apex, true).unwrap_or_else(|| Box::new([0]));
        // Where a CNAME leads depends on the apex: nothing is kept from another zone.
        let previous = previous.filter(|(_, prepared)| prepared.apex == apex_key);
        let mut names = HashMap::with_capacity(records.len());
        for (name, endpoints) in records {
            let Some(key) = wire_name(name, true) else {
                continue;
            };
            let signatures_hold = |node: &Node| match (keys, &node.signed) {
                (None, None) => true,
                (Some(keys), Some(signed)) => {
                    signed.key_tag == keys.signing_tag() && now < signed.refresh_at
                }
                _ => false,
            };
            let kept = previous.and_then(|(old_records, old_prepared)| {
                (old_records.get(name) == Some(endpoints))
                    .then(|| old_prepared.names.get(&key).cloned())
                    .flatten()
                    .filter(|node| signatures_hold(node))
            });
            if let Some(node) = kept {
                names.insert(key, node);
                continue;
            }
            let mut node = Node::default();
            for endpoint in endpoints {
                if matches!(
                    endpoint.record_type,
                    RecordType::Srv | RecordType::Mx | RecordType::Caa
                ) {
                    continue;
                }
                let prepare = || PreparedRecord {
                    set_identifier: endpoint.set_identifier.clone(),
                    geo_code: endpoint.property(GEO_CODE).map(String::from),
                    weight: endpoint
                        .property(WEIGHT)
                        .and_then(|w| w.parse().ok())
                        .unwrap_or(1),
                    tails: record_tails(endpoint),
                    signature: None,
                    target: (endpoint.record_type == RecordType::Cname)
                        .then(|| endpoint.targets.first())
                        .flatten()
                        .and_then(|target| {
                            Some(Target {
                                wire: wire_name(target, false)?,
                                key: wire_name(target, true)?,
                                inside: is_at_or_below(target, apex),
                            })
                        }),
                };
                let code = u16::from(meridian_dns::wire::wire_type(endpoint.record_type));
                match node.by_type.iter_mut().find(|(t, _)| *t == code) {
                    Some((_, list)) => list.push(prepare()),
                    None => node.by_type.push((code, vec![prepare()])),
                }
            }
            if let Some(keys) = keys {
                sign_node(&mut node, keys, name, endpoints, now);
            }
            names.insert(key, Arc::new(node));
        }
        let signatures_due = names
            .values()
            .filter_map(|node| node.signed.as_ref().map(|s| s.refresh_at))
            .min()
            .unwrap_or(u64::MAX);
        Prepared {
            apex: apex_key,
            names,
            signatures_due,
        }
    }

    pub(crate) fn signatures_due(&self) -> u64 {
        self.signatures_due
    }
}

/// Signs every answer `node` (the records `endpoints` at `name`) can give: each record alone
/// where a choice picks one, else all of a type together.
pub(crate) fn sign_node(
    node: &mut Node,
    keys: &ZoneKeys,
    name: &str,
    endpoints: &[Endpoint],
    now: u64,
) {
    let Ok(owner) = Name::from_ascii(format!("{name}.")) else {
        return;
    };
    let mut whole = Vec::new();
    for (code, records) in &mut node.by_type {
        let of_type: Vec<&Endpoint> = endpoints
            .iter()
            .filter(|e| {
                !matches!(
                    e.record_type,
                    RecordType::Srv | RecordType::Mx | RecordType::Caa
                ) && u16::from(meridian_dns::wire::wire_type(e.record_type)) == *code
            })
            .collect();
        if records.iter().all(|r| r.set_identifier.is_none()) {
            whole.extend(signature_tail(keys, &owner, of_type, now).map(|tail| (*code, tail)));
        } else {
            for (record, endpoint) in records.iter_mut().zip(of_type) {
                record.signature = signature_tail(keys, &owner, vec![endpoint], now);
            }
        }
    }
    node.signed = Some(NodeSignatures {
        key_tag: keys.signing_tag(),
        refresh_at: now + u64::from(crate::dnssec::SIGNATURE_REFRESH),
        whole,
    });
}
