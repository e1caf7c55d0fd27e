//! The fast path for the query nearly every resolver sends: one question, class IN, for a name
//! the zone holds records at, with EDNS carrying at most a client subnet. It reads the request
//! where it lies, looks the name up by its lowercase wire form, chooses as the general path
//! does ([`choose_among`]) and writes the response from records encoded when the zone was
//! published: no request or response `Message`, no name strings, no per-record encoding.
//!
//! A DNS cookie is answered here too (dig and BIND's resolver send one with every query).
//! Anything else returns `None` and takes the general path ([`crate::respond`]): apex SOA and
//! NS, ANY, names that do not exist or exist without records (NXDOMAIN, NODATA, wildcards),
//! TSIG, malformed cookies and other EDNS options, EDNS versions above 0, responses too big for
//! the client. Both paths give the same answers; a test compares them query by query.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::op::ResponseCode;
use hickory_proto::rr::RecordType as WireType;
use rand::Rng;

use crate::cookie;
use crate::prepared::PreparedRecord;
use crate::query::{Chosen, MAX_CHAIN, QueryContext, SERVER_UDP_PAYLOAD, Transport, choose_among};
use crate::zone::Catalog;

const OPT: u16 = 41;
const ECS: u16 = 8;

/// What the fast path reads of a request.
struct Request<'a> {
    /// The end of the question (name, type, class).
    question_end: usize,
    /// The question's name, lowercase wire form, and where its labels start in it.
    key: [u8; 255],
    key_len: usize,
    label_starts: [u8; 128],
    labels: usize,
    qtype: u16,
    edns: Option<Edns<'a>>,
}

struct Edns<'a> {
    payload: u16,
    dnssec_ok: bool,
    /// The client subnet option's data, as sent.
    subnet: Option<&'a [u8]>,
    /// The COOKIE option's data, as sent (RFC 7873).
    cookie: Option<&'a [u8]>,
}

fn read_u16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]))
}

/// The request, if it is one the fast path answers.
fn read(bytes: &[u8]) -> Option<Request<'_>> {
    let flags = read_u16(bytes, 2)?;
    // A query (QR 0), opcode QUERY, not truncated; one question; nothing but an OPT record.
    if flags & 0xfa00 != 0
        || read_u16(bytes, 4)? != 1
        || read_u16(bytes, 6)? != 0
        || read_u16(bytes, 8)? != 0
        || read_u16(bytes, 10)? > 1
    {
        return None;
    }
    let mut request = Request {
        question_end: 0,
        key: [0; 255],
        key_len: 0,
        label_starts: [0; 128],
        labels: 0,
        qtype: 0,
        edns: None,
    };
    let mut at = 12;
    loop {
        let length = usize::from(*bytes.get(at)?);
        if length == 0 {
            break;
        }
        // A compression pointer or an extended label: the general path reads those.
        if length > 63 || request.key_len + length + 2 > 255 || request.labels == 128 {
            return None;
        }
        request.label_starts[request.labels] = request.key_len as u8;
        request.labels += 1;
        request.key[request.key_len] = length as u8;
        let label = bytes.get(at + 1..at + 1 + length)?;
        for (slot, byte) in request.key[request.key_len + 1..].iter_mut().zip(label) {
            *slot = byte.to_ascii_lowercase();
        }
        request.key_len += length + 1;
        at += length + 1;
    }
    request.key[request.key_len] = 0;
    request.key_len += 1;
    request.qtype = read_u16(bytes, at + 1)?;
    if read_u16(bytes, at + 3)? != 1 {
        return None; // class IN only
    }
    request.question_end = at + 5;
    if read_u16(bytes, 10)? == 1 {
        request.edns = Some(read_opt(bytes, request.question_end)?);
    } else if bytes.len() != request.question_end {
        return None;
    }
    Some(request)
}

/// The OPT record at `at`, if it is version 0 and carries no option but a well-formed client
/// subnet.
fn read_opt(bytes: &[u8], at: usize) -> Option<Edns<'_>> {
    if *bytes.get(at)? != 0 || read_u16(bytes, at + 1)? != OPT {
        return None;
    }
    let payload = read_u16(bytes, at + 3)?;
    if *bytes.get(at + 6)? != 0 {
        return None; // EDNS version above 0: BADVERS, the general path answers it
    }
    let dnssec_ok = read_u16(bytes, at + 7)? & 0x8000 != 0;
    let length = usize::from(read_u16(bytes, at + 9)?);
    let options = bytes.get(at + 11..at + 11 + length)?;
    if at + 11 + length != bytes.len() {
        return None;
    }
    let (mut subnet, mut cookie) = (None, None);
    let mut rest = options;
    while !rest.is_empty() {
        let code = read_u16(rest, 0)?;
        let length = usize::from(read_u16(rest, 2)?);
        let data = rest.get(4..4 + length)?;
        rest = &rest[4 + length..];
        if code == cookie::OPTION_CODE && cookie.is_none() {
            cookie = Some(data);
            continue;
        }
        if code != ECS || subnet.is_some() {
            return None;
        }
        let family = read_u16(data, 0)?;
        let source = *data.get(2)?;
        let max = match family {
            1 => 32,
            2 => 128,
            _ => return None,
        };
        if source > max || *data.get(3)? != 0 || data.len() - 4 != usize::from(source).div_ceil(8) {
            return None;
        }
        subnet = Some(data);
    }
    Some(Edns {
        payload,
        dnssec_ok,
        subnet,
        cookie,
    })
}

/// The address a client subnet option names.
fn subnet_address(data: &[u8]) -> IpAddr {
    let address = &data[4..];
    if data[1] == 1 {
        let mut octets = [0u8; 4];
        octets[..address.len()].copy_from_slice(address);
        IpAddr::V4(Ipv4Addr::from(octets))
    } else {
        let mut octets = [0u8; 16];
        octets[..address.len()].copy_from_slice(address);
        IpAddr::V6(Ipv6Addr::from(octets))
    }
}

impl Request<'_> {
    fn key(&self) -> &[u8] {
        &self.key[..self.key_len]
    }

    /// Whether the question's name is `apex` or below it.
    fn is_at_or_below(&self, apex: &[u8]) -> bool {
        let key = self.key();
        (0..self.labels)
            .map(|i| usize::from(self.label_starts[i]))
            .chain([key.len() - 1])
            .any(|start| &key[start..] == apex)
    }
}

/// The records `chosen` names among `records`, without allocating.
fn chosen_records(records: &[PreparedRecord], chosen: Chosen) -> &[PreparedRecord] {
    match chosen {
        Chosen::All => records,
        Chosen::One(index) => std::slice::from_ref(&records[index]),
        Chosen::None => &[],
    }
}

/// The response to `bytes` by the fast path, written into `response` (emptied first, and left
/// in any state on `None`), or `None` when the general path must answer. A reused buffer makes
/// an answer allocate nothing.
pub(crate) fn respond(
    catalog: &Catalog,
    bytes: &[u8],
    context: &QueryContext<'_>,
    rng: &mut impl Rng,
    response: &mut Vec<u8>,
) -> Option<()> {
    let request = read(bytes)?;
    let qtype = request.qtype;
    // ANY (RFC 8482) and zone transfers take the general path.
    if matches!(qtype, 255 | 252 | 251) {
        return None;
    }
    let zone = catalog
        .zones()
        .find(|zone| request.is_at_or_below(&zone.prepared.apex))?;
    let prepared = &zone.prepared;
    // RFC 4035: signatures go to clients that set the DO bit.
    let signed = zone.config.dnssec.is_some() && request.edns.as_ref().is_some_and(|e| e.dnssec_ok);
    let location = std::cell::OnceCell::new();
    let locate = || {
        location
            .get_or_init(|| {
                let geo = context.geo?;
                let address = request
                    .edns
                    .as_ref()
                    .and_then(|e| e.subnet)
                    .filter(|subnet| subnet[2] > 0)
                    .map_or(context.source, subnet_address);
                geo.locate(address)
            })
            .as_ref()
    };

    response.clear();
    response.reserve(bytes.len() + 256);
    response.extend_from_slice(&bytes[..2]);
    // QR and AA; RD as asked; no recursion available; NOERROR.
    response.extend_from_slice(&[0x84 | (bytes[2] & 0x01), 0x00]);
    response.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
    response.extend_from_slice(&[0, u8::from(request.edns.is_some())]);
    response.extend_from_slice(&bytes[12..request.question_end]);
    let mut answers: u16 = 0;
    // How each dynamic answer on the way was chosen, counted once the response is sure.
    let mut choices = [None; MAX_CHAIN];
    let mut key: &[u8] = request.key();
    // The first owner is the question's name: a pointer to it.
    let mut owner: &[u8] = &[0xc0, 0x0c];
    let mut done = false;
    for choice_here in &mut choices {
        if key == &*prepared.apex && matches!(qtype, 6 | 2) {
            return None; // the apex SOA and NS come from the zone's configuration
        }
        let node = prepared.names.get(key)?;
        let mut write = |code: u16, records: &[PreparedRecord], chosen: Chosen| {
            for record in chosen_records(records, chosen) {
                for tail in &record.tails {
                    response.extend_from_slice(owner);
                    response.extend_from_slice(tail);
                    answers += 1;
                }
            }
            if signed {
                // Unsigned or stale: the general path signs it.
                let signature = node.signature(code, records, chosen, context.now)?;
                response.extend_from_slice(owner);
                response.extend_from_slice(signature);
                answers += 1;
            }
            Some(())
        };
        let cname = u16::from(WireType::CNAME);
        if let Some(cnames) = node.records(cname).filter(|_| qtype != cname) {
            let (chosen, choice) = choose_among(cnames, locate, rng);
            *choice_here = choice;
            let target = chosen_records(cnames, chosen).first()?.target.as_ref()?;
            write(cname, cnames, chosen)?;
            if !target.inside {
                done = true; // the resolver follows it
                break;
            }
            owner = &target.wire;
            key = &target.key;
            continue;
        }
        let matching = node.records(qtype)?;
        let (chosen, choice) = choose_among(matching, locate, rng);
        *choice_here = choice;
        write(qtype, matching, chosen)?;
        done = true;
        break;
    }
    if !done {
        return None; // a chain too long: SERVFAIL from the general path
    }
    response[6..8].copy_from_slice(&answers.to_be_bytes());
    if let Some(edns) = &request.edns {
        // A cookie is answered when the server gives cookies; a malformed one is FORMERR,
        // which the general path sends.
        let cookie = match (edns.cookie, context.cookie_secret) {
            (Some(option), Some(secret)) => Some(cookie::reply(
                option,
                secret,
                context.source,
                context.now as u32,
            )?),
            _ => None,
        };
        response.extend_from_slice(&[0, 0, 41]);
        response.extend_from_slice(&SERVER_UDP_PAYLOAD.to_be_bytes());
        // Extended RCODE 0, version 0, the DO bit echoed (RFC 3225).
        response.extend_from_slice(&[0, 0, if edns.dnssec_ok { 0x80 } else { 0 }, 0]);
        let length_at = response.len();
        response.extend_from_slice(&[0, 0]);
        if let Some(subnet) = edns.subnet {
            let length = subnet.len() as u16;
            response.extend_from_slice(&ECS.to_be_bytes());
            response.extend_from_slice(&length.to_be_bytes());
            // The scope is the whole source prefix: the answer was chosen for all of it.
            response.extend_from_slice(&subnet[..3]);
            response.push(subnet[2]);
            response.extend_from_slice(&subnet[4..]);
        }
        if let Some(cookie) = cookie {
            response.extend_from_slice(&cookie::OPTION_CODE.to_be_bytes());
            response.extend_from_slice(&(cookie.len() as u16).to_be_bytes());
            response.extend_from_slice(&cookie);
        }
        let options = (response.len() - length_at - 2) as u16;
        response[length_at..length_at + 2].copy_from_slice(&options.to_be_bytes());
    }
    let limit = match context.transport {
        Transport::Tcp => usize::from(u16::MAX),
        Transport::Udp => request.edns.as_ref().map_or(512, |e| {
            usize::from(e.payload.clamp(512, SERVER_UDP_PAYLOAD))
        }),
    };
    if response.len() > limit {
        return None; // the general path sends it truncated
    }
    if let Some(stats) = context.stats {
        stats.answered(Some(WireType::from(qtype)), ResponseCode::NoError);
        for choice in choices.into_iter().flatten() {
            stats.chose(choice);
        }
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::answer::respond_general;
    use crate::dnssec::ZoneKeys;
    use crate::geo::GeoDb;
    use crate::prepared::wire_name;
    use crate::zone::{Zone, ZoneConfig, ZoneNameServer};
    use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query};
    use hickory_proto::rr::Name;
    use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
    use meridian_dns::model::{Endpoint, GEO_CODE, RecordType, WEIGHT};
    use rand::SeedableRng;
    use rand::rngs::SmallRng;
    use std::sync::Arc;

    fn a(name: &str, targets: &[&str]) -> Endpoint {
        Endpoint::new(
            name,
            RecordType::A,
            targets.iter().map(|t| t.to_string()),
            60,
        )
    }

    fn cname(name: &str, target: &str) -> Endpoint {
        Endpoint::new(name, RecordType::Cname, [target.to_string()], 300)
    }

    /// GEO over weighted over addresses, a chain out of the zone, a wildcard, AAAA and TXT,
    /// an empty non-terminal, a name server with glue, and a GEO set without a catch-all.
    fn zone() -> Zone {
        Zone::new(config(), 42, records())
    }

    fn config() -> ZoneConfig {
        ZoneConfig::with_name_servers(
            "example.com",
            [ZoneNameServer {
                name: "ns1.example.com".into(),
                addresses: vec!["192.0.2.53".parse().unwrap()],
            }],
        )
    }

    fn records() -> Vec<Endpoint> {
        let mut records = vec![
            cname("api.example.com", "klb.api.example.com"),
            cname("klb.api.example.com", "ie.klb.api.example.com")
                .with_set_identifier("IE")
                .with_property(GEO_CODE, "IE"),
            cname("klb.api.example.com", "eu.klb.api.example.com")
                .with_set_identifier("GEO-EU")
                .with_property(GEO_CODE, "GEO-EU"),
            cname("klb.api.example.com", "us.klb.api.example.com")
                .with_set_identifier("default")
                .with_property(GEO_CODE, "*"),
            cname("eu.klb.api.example.com", "lb.cloud.example.net"),
            a("us.klb.api.example.com", &["203.0.113.9"]),
            a("nocatch.example.com", &["198.18.5.1"])
                .with_set_identifier("US")
                .with_property(GEO_CODE, "US"),
            a("nocatch.example.com", &["198.18.5.2"])
                .with_set_identifier("JP")
                .with_property(GEO_CODE, "JP"),
            Endpoint::new(
                "v6.example.com",
                RecordType::Aaaa,
                ["2001:db8::1".to_string()],
                60,
            ),
            Endpoint::new(
                "api.example.com",
                RecordType::Txt,
                ["\"heritage=meridian\"".to_string()],
                60,
            ),
            a("*.apps.example.com", &["198.18.7.7"]),
            a("deep.sub.example.com", &["198.18.8.8"]),
            a(
                "big.example.com",
                &(1..=60)
                    .map(|i| format!("198.18.9.{i}"))
                    .collect::<Vec<_>>()
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>(),
            ),
        ];
        for (set, weight) in [("c1", 3), ("c2", 1), ("c0", 0)] {
            records.push(
                cname(
                    "ie.klb.api.example.com",
                    &format!("{set}.klb.api.example.com"),
                )
                .with_set_identifier(set)
                .with_property(WEIGHT, weight.to_string()),
            );
            records.push(a(
                &format!("{set}.klb.api.example.com"),
                &["203.0.113.1", "203.0.113.2"],
            ));
        }
        records
    }

    #[test]
    fn a_zone_replacing_another_is_prepared_as_if_new_and_shares_what_did_not_change() {
        let before = zone();
        let mut changed = records();
        // One name changes, one goes, one comes.
        changed.retain(|r| r.dns_name != "v6.example.com" && r.dns_name != "deep.sub.example.com");
        changed.push(a("deep.sub.example.com", &["198.18.8.9"]));
        changed.push(a("new.example.com", &["198.18.10.1"]));
        let replacing = Zone::replacing(Some(&before), config(), 43, changed.clone());
        let fresh = Zone::new(config(), 43, changed);
        assert_eq!(replacing.prepared, fresh.prepared);

        let node =
            |zone: &Zone, name: &str| zone.prepared.names[&wire_name(name, true).unwrap()].clone();
        let shared = |name| Arc::ptr_eq(&node(&before, name), &node(&replacing, name));
        assert!(shared("big.example.com"));
        assert!(shared("klb.api.example.com"));
        assert!(!shared("deep.sub.example.com"));
        assert!(
            !replacing
                .prepared
                .names
                .contains_key(&wire_name("v6.example.com", true).unwrap())
        );

        // Another apex shares nothing: where a CNAME leads is judged against the apex.
        let other = ZoneConfig::new("api.example.com");
        let moved = Zone::replacing(Some(&before), other.clone(), 44, records());
        assert_eq!(moved.prepared, Zone::new(other, 44, records()).prepared);
        assert!(!Arc::ptr_eq(
            &node(&before, "klb.api.example.com"),
            &node(&moved, "klb.api.example.com")
        ));
    }

    fn request_with_cookie(
        name: &str,
        qtype: WireType,
        edns: Option<Option<&str>>,
        cookie: Option<&[u8]>,
    ) -> Vec<u8> {
        let mut request = Message::new(0x1234, MessageType::Query, OpCode::Query);
        request.metadata.recursion_desired = true;
        request.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
        if let Some(subnet) = edns {
            let mut edns = Edns::new();
            edns.set_max_payload(1232);
            if let Some(subnet) = subnet {
                let (address, prefix) = subnet.split_once('/').unwrap();
                let subnet =
                    ClientSubnet::new(address.parse().unwrap(), prefix.parse().unwrap(), 0);
                edns.options_mut().insert(EdnsOption::Subnet(subnet));
            }
            if let Some(cookie) = cookie {
                edns.options_mut()
                    .insert(EdnsOption::Unknown(cookie::OPTION_CODE, cookie.to_vec()));
            }
            request.set_edns(edns);
        }
        request.to_vec().unwrap()
    }

    #[test]
    fn the_fast_path_answers_as_the_general_path_does() {
        let catalog = Catalog::default().with_zone(zone());
        let geo = GeoDb::from_bytes(test_database()).unwrap();
        let names = [
            "api.example.com.",
            "API.Example.COM.",
            "klb.api.example.com.",
            "ie.klb.api.example.com.",
            "c1.klb.api.example.com.",
            "eu.klb.api.example.com.",
            "nocatch.example.com.",
            "v6.example.com.",
            "x.apps.example.com.",
            "*.apps.example.com.",
            "sub.example.com.",
            "missing.example.com.",
            "example.com.",
            "ns1.example.com.",
            "big.example.com.",
            "example.org.",
        ];
        let types = [
            WireType::A,
            WireType::AAAA,
            WireType::CNAME,
            WireType::TXT,
            WireType::SOA,
            WireType::NS,
            WireType::MX,
            WireType::ANY,
        ];
        let subnets = [
            None,
            Some(None),
            Some(Some("192.0.2.0/24")),
            Some(Some("100.64.0.0/24")),
            Some(Some("198.51.100.0/24")),
            Some(Some("0.0.0.0/0")),
            Some(Some("2001:db8::/56")),
        ];
        let mut fast_answers = 0;
        let mut buffer = vec![0xA5; 2000];
        // A client cookie, a client and server cookie (not one of ours), and a malformed one.
        let cookies: [Option<&[u8]>; 4] = [
            None,
            Some(b"clientck"),
            Some(b"clientck\x01\0\0\0servercookie"),
            Some(b"bad"),
        ];
        for transport in [Transport::Udp, Transport::Tcp] {
            for (source, secret) in [
                ("192.0.2.7", None),
                ("100.64.1.9", Some(b"cookie secret".as_slice())),
            ] {
                let context = QueryContext {
                    source: source.parse().unwrap(),
                    transport,
                    geo: Some(&geo),
                    transfer_allowed: &[],
                    stats: None,
                    tsig_keys: &[],
                    cookie_secret: secret,
                    now: 0,
                };
                for name in names {
                    for qtype in types {
                        for (subnet, cookie) in subnets
                            .iter()
                            .flat_map(|s| cookies.iter().map(move |c| (*s, *c)))
                            .filter(|(subnet, cookie)| subnet.is_some() || cookie.is_none())
                        {
                            let bytes = request_with_cookie(name, qtype, subnet, cookie);
                            for seed in 0..2 {
                                // One buffer for every request: what the last left in it
                                // must not show in the next.
                                let fast = respond(
                                    &catalog,
                                    &bytes,
                                    &context,
                                    &mut SmallRng::seed_from_u64(seed),
                                    &mut buffer,
                                );
                                let Some(()) = fast else { continue };
                                let fast = buffer.clone();
                                fast_answers += 1;
                                let general = respond_general(
                                    &catalog,
                                    &bytes,
                                    &context,
                                    &mut SmallRng::seed_from_u64(seed),
                                );
                                let what = format!(
                                    "{name} {qtype} {subnet:?} {cookie:?} {transport:?} {source} seed {seed}"
                                );
                                assert_eq!(general.len(), 1, "{what}");
                                let fast = Message::from_vec(&fast)
                                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                                let general = Message::from_vec(&general[0]).unwrap();
                                assert_eq!(fast.metadata, general.metadata, "{what}");
                                assert_eq!(fast.queries, general.queries, "{what}");
                                assert_eq!(fast.answers, general.answers, "{what}");
                                assert_eq!(fast.authorities, general.authorities, "{what}");
                                assert_eq!(fast.additionals, general.additionals, "{what}");
                                assert_eq!(fast.edns, general.edns, "{what}");
                            }
                        }
                    }
                }
            }
        }
        // The common queries took the fast path (the rest were compared by falling back).
        assert!(fast_answers > 1000, "{fast_answers}");
    }

    /// Every RRSIG in `message` verifies with one of `keys`' DNSKEYs over the RRset before it.
    fn assert_signatures_verify(message: &Message, keys: &ZoneKeys, what: &str) -> usize {
        use hickory_proto::dnssec::Verifier;
        use hickory_proto::dnssec::rdata::DNSSECRData;
        use hickory_proto::rr::RData;
        let dnskeys: Vec<_> = keys
            .apex_records(WireType::DNSKEY)
            .into_iter()
            .filter_map(|record| match record.data {
                RData::DNSSEC(DNSSECRData::DNSKEY(key)) => Some(key),
                _ => None,
            })
            .collect();
        let mut verified = 0;
        for section in [&message.answers, &message.authorities] {
            for record in section.iter() {
                let RData::DNSSEC(DNSSECRData::RRSIG(rrsig)) = &record.data else {
                    continue;
                };
                let rrset: Vec<_> = section
                    .iter()
                    .filter(|r| {
                        r.name == record.name && r.record_type() == rrsig.input().type_covered
                    })
                    .cloned()
                    .collect();
                assert!(!rrset.is_empty(), "{what}: an RRSIG without its RRset");
                let key = dnskeys
                    .iter()
                    .find(|key| key.calculate_key_tag().unwrap() == rrsig.input().key_tag)
                    .unwrap_or_else(|| panic!("{what}: signed by an unpublished key"));
                key.verify_rrsig(
                    &record.name,
                    hickory_proto::rr::DNSClass::IN,
                    rrsig,
                    rrset.iter(),
                )
                .unwrap_or_else(|e| {
                    panic!(
                        "{what}: {} {}: {e}",
                        record.name,
                        rrsig.input().type_covered
                    )
                });
                verified += 1;
            }
        }
        verified
    }

    #[test]
    fn signed_answers_of_the_fast_path_are_those_of_the_general_path_and_verify() {
        use crate::dnssec::{KeyAlgorithm, generate_key};
        let algorithm = KeyAlgorithm::EcdsaP256Sha256;
        let (ksk, zsk) = (
            generate_key(algorithm).unwrap(),
            generate_key(algorithm).unwrap(),
        );
        let keys =
            Arc::new(ZoneKeys::new("example.com", algorithm, &ksk, &zsk, &[], 3600).unwrap());
        let catalog = Catalog::default().with_zone(Zone::new(
            config().signed_with(Some(keys.clone())),
            42,
            records(),
        ));
        let geo = GeoDb::from_bytes(test_database()).unwrap();
        let context = QueryContext {
            source: "192.0.2.7".parse().unwrap(),
            transport: Transport::Tcp,
            geo: Some(&geo),
            transfer_allowed: &[],
            stats: None,
            tsig_keys: &[],
            cookie_secret: None,
            now: crate::clock::unix_now(),
        };
        let strip = |records: &[hickory_proto::rr::Record]| -> Vec<hickory_proto::rr::Record> {
            records
                .iter()
                .filter(|r| r.record_type() != WireType::RRSIG)
                .cloned()
                .collect()
        };
        let (mut fast_answers, mut signatures) = (0, 0);
        for name in [
            "api.example.com.",
            "klb.api.example.com.",
            "ie.klb.api.example.com.",
            "eu.klb.api.example.com.",
            "nocatch.example.com.",
            "v6.example.com.",
            "x.apps.example.com.",
            "sub.example.com.",
            "missing.example.com.",
            "example.com.",
            "big.example.com.",
        ] {
            for qtype in [
                WireType::A,
                WireType::AAAA,
                WireType::TXT,
                WireType::SOA,
                WireType::DNSKEY,
            ] {
                for subnet in ["192.0.2.0/24", "198.51.100.0/24", "100.64.0.0/24"] {
                    let mut request = Message::from_vec(&request_with_cookie(
                        name,
                        qtype,
                        Some(Some(subnet)),
                        None,
                    ))
                    .unwrap();
                    request.edns.as_mut().unwrap().set_dnssec_ok(true);
                    let bytes = request.to_vec().unwrap();
                    let what = format!("{name} {qtype} {subnet}");
                    let general = respond_general(
                        &catalog,
                        &bytes,
                        &context,
                        &mut SmallRng::seed_from_u64(1),
                    );
                    let general = Message::from_vec(&general[0]).unwrap();
                    signatures += assert_signatures_verify(&general, &keys, &what);
                    assert!(
                        general.answers.is_empty()
                            || general
                                .answers
                                .iter()
                                .any(|r| r.record_type() == WireType::RRSIG),
                        "{what}: answers unsigned"
                    );
                    if general.answers.is_empty() {
                        assert!(
                            general
                                .authorities
                                .iter()
                                .any(|r| r.record_type() == WireType::NSEC),
                            "{what}: a denial without NSEC"
                        );
                    }
                    let mut fast = Vec::new();
                    let answered = respond(
                        &catalog,
                        &bytes,
                        &context,
                        &mut SmallRng::seed_from_u64(1),
                        &mut fast,
                    );
                    if answered.is_none() {
                        continue;
                    }
                    fast_answers += 1;
                    let fast = Message::from_vec(&fast).unwrap();
                    signatures += assert_signatures_verify(&fast, &keys, &what);
                    assert_eq!(fast.metadata, general.metadata, "{what}");
                    assert_eq!(strip(&fast.answers), strip(&general.answers), "{what}");
                    assert_eq!(
                        fast.answers.len(),
                        general.answers.len(),
                        "{what}: as many signatures"
                    );
                }
            }
        }
        assert!(fast_answers > 20, "{fast_answers}");
        assert!(signatures > 100, "{signatures}");

        // Without DO, no signatures and a plain NXDOMAIN.
        let plain = request_with_cookie("missing.example.com.", WireType::A, Some(None), None);
        let plain = Message::from_vec(
            &crate::answer::respond(&catalog, &plain, &context, &mut SmallRng::seed_from_u64(1))[0],
        )
        .unwrap();
        assert_eq!(plain.metadata.response_code, ResponseCode::NXDomain);
        assert!(
            plain
                .authorities
                .iter()
                .all(|r| r.record_type() == WireType::SOA)
        );
    }

    fn test_database() -> Vec<u8> {
        meridian_testkit::geo_db::write_database(&[
            ("192.0.2.0/24".parse().unwrap(), "IE", "EU"),
            ("198.51.100.0/24".parse().unwrap(), "US", "NA"),
            ("100.64.0.0/24".parse().unwrap(), "FR", "EU"),
            ("100.64.1.0/24".parse().unwrap(), "JP", "AS"),
        ])
    }
}
