//! From a request packet to response packets: authoritative answers, CNAME chains, GEO and
//! weighted choice at query time, NXDOMAIN vs NODATA, EDNS0 and truncation, zone transfers.

use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::dnssec::rdata::DNSSECRData;
use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::HINFO;
use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsCode, EdnsOption};
use hickory_proto::rr::{Name, RData, Record, RecordType as WireType};
use rand::Rng;

use meridian_dns::wire::{DEFAULT_TTL, to_wire};

use crate::cookie;
use crate::dnssec::{ZoneKeys, compact_denial};
use crate::geo::Location;
use crate::query::{Chosen, MAX_CHAIN, QueryContext, SERVER_UDP_PAYLOAD, Transport, choose_among};
use crate::stats::Tally;
use crate::transfer::transfer_records;
use crate::tsig::{self, ResponseSigner};
use crate::zone::apex::{name_server_glue, ns_records, soa, soa_with_serial};
use crate::zone::{Catalog, Zone, normalize};
use meridian_dns::model::{Endpoint, RecordType, is_at_or_below};

/// Records per AXFR message.
const AXFR_CHUNK: usize = 200;
/// EDNS option code of an extended DNS error (RFC 8914).
const EXTENDED_ERROR: u16 = 15;
/// Why a signed zone is not transferred, as its extended error says.
pub(crate) const SIGNED_ZONE_TRANSFER: &str =
    "zone is signed online per query; secondaries cannot serve it";
/// TTL of the record an ANY query gets (RFC 8482 suggests a day's worth of caching).
const RFC8482_TTL: u32 = 3600;

/// The response packets to `request` (several only for a zone transfer); none when the request
/// is not worth answering (unparseable header, or itself a response).
pub fn respond(
    catalog: &Catalog,
    bytes: &[u8],
    context: &QueryContext<'_>,
    rng: &mut impl Rng,
) -> Vec<Vec<u8>> {
    let mut response = Vec::new();
    match crate::fast::respond(catalog, bytes, context, rng, &mut response) {
        Some(()) => vec![response],
        None => respond_general(catalog, bytes, context, rng),
    }
}

/// The response to `bytes` over UDP, written into `response`; false when there is none to send.
/// Over UDP a request has at most one (transfers are refused over it, and an IXFR gets one
/// SOA); over TCP, where a transfer has many, use [`respond`]. On the fast path a reused buffer
/// makes an answer allocate nothing.
pub fn respond_into(
    catalog: &Catalog,
    bytes: &[u8],
    context: &QueryContext<'_>,
    rng: &mut impl Rng,
    response: &mut Vec<u8>,
) -> bool {
    debug_assert_eq!(
        context.transport,
        Transport::Udp,
        "one response per request"
    );
    if crate::fast::respond(catalog, bytes, context, rng, response).is_some() {
        return true;
    }
    match respond_general(catalog, bytes, context, rng)
        .into_iter()
        .next()
    {
        Some(general) => {
            response.clear();
            response.extend_from_slice(&general);
            true
        }
        None => false,
    }
}

/// [`respond`] without the fast path: every request, parsed into a `Message`.
pub(crate) fn respond_general(
    catalog: &Catalog,
    bytes: &[u8],
    context: &QueryContext<'_>,
    rng: &mut impl Rng,
) -> Vec<Vec<u8>> {
    let request = match Message::from_vec(bytes) {
        Ok(message) => message,
        Err(_) => {
            let response = format_error(bytes);
            if let (Some(stats), Some(_)) = (context.stats, &response) {
                stats.answered(None, ResponseCode::FormErr);
            }
            return response.into_iter().collect();
        }
    };
    if request.metadata.message_type != MessageType::Query {
        return Vec::new();
    }
    let mut response = Message::new(
        request.metadata.id,
        MessageType::Response,
        request.metadata.op_code,
    );
    response.metadata.recursion_desired = request.metadata.recursion_desired;
    let mut signer = match tsig::verify(&request, bytes, context.tsig_keys, context.now) {
        tsig::Verdict::Unsigned => None,
        tsig::Verdict::Signed(signer) => Some(signer),
        tsig::Verdict::Rejected(rejection) => {
            // A bad key, signature or time gets NOTAUTH and nothing else.
            response.metadata.response_code = ResponseCode::NotAuth;
            response.add_queries(request.queries.iter().cloned());
            if let Some(stats) = context.stats {
                let qtype = request.queries.first().map(Query::query_type);
                stats.answered(qtype, ResponseCode::NotAuth);
            }
            return rejection.seal(&mut response).into_iter().collect();
        }
    };
    let client_subnet = client_subnet(&request);
    if let Some(edns) = &request.edns {
        let mut reply = Edns::new();
        reply.set_max_payload(SERVER_UDP_PAYLOAD);
        // RFC 3225: the DO bit is echoed; signatures follow only when it is set.
        reply.set_dnssec_ok(edns.flags().dnssec_ok);
        if let Some(subnet) = &client_subnet {
            // The answer was chosen for the whole source prefix the client sent.
            let echoed = ClientSubnet::new(
                subnet.addr(),
                subnet.source_prefix(),
                subnet.source_prefix(),
            );
            reply.options_mut().insert(EdnsOption::Subnet(echoed));
        }
        let cookie = match (request_cookie(&request), context.cookie_secret) {
            (Some(option), Some(secret)) => {
                let now = context.now as u32;
                match cookie::reply(option, secret, context.source, now) {
                    Some(cookie) => Some(cookie),
                    None => {
                        response.metadata.response_code = ResponseCode::FormErr;
                        return encode(response, &request, context, &mut signer)
                            .into_iter()
                            .collect();
                    }
                }
            }
            _ => None,
        };
        if let Some(cookie) = cookie {
            let option = EdnsOption::Unknown(cookie::OPTION_CODE, cookie.to_vec());
            reply.options_mut().insert(option);
        }
        if edns.version() > 0 {
            response.metadata.response_code = ResponseCode::BADVERS;
            response.set_edns(reply);
            return encode(response, &request, context, &mut signer)
                .into_iter()
                .collect();
        }
        response.set_edns(reply);
    }
    if request.metadata.op_code != OpCode::Query {
        response.metadata.response_code = ResponseCode::NotImp;
        return encode(response, &request, context, &mut signer)
            .into_iter()
            .collect();
    }
    let [query] = request.queries.as_slice() else {
        // RFC 7873 section 5.4: a query with no question and a cookie asks for a cookie.
        if request.queries.is_empty() && request_cookie(&request).is_some() {
            return encode(response, &request, context, &mut signer)
                .into_iter()
                .collect();
        }
        response.metadata.response_code = ResponseCode::FormErr;
        return encode(response, &request, context, &mut signer)
            .into_iter()
            .collect();
    };
    response.add_query(query.clone());
    let qname = normalize(&query.name().to_ascii());
    let Some(zone) = catalog.find(&qname) else {
        // Not ours: no recursion, no referral.
        response.metadata.response_code = ResponseCode::Refused;
        return encode(response, &request, context, &mut signer)
            .into_iter()
            .collect();
    };
    if matches!(query.query_type(), WireType::AXFR | WireType::IXFR) {
        return transfer(zone, response, &request, query, context, signer);
    }
    response.metadata.authoritative = true;
    // Located only when a GEO choice asks, once.
    let location = std::cell::OnceCell::new();
    let locate = || {
        location
            .get_or_init(|| client_location(context, client_subnet.as_ref()))
            .as_ref()
    };
    let dnssec_ok = request
        .edns
        .as_ref()
        .is_some_and(|edns| edns.flags().dnssec_ok);
    let keys = zone.config.dnssec.as_deref().filter(|_| dnssec_ok);
    answer_query(
        zone,
        query,
        &locate,
        context.stats,
        keys,
        rng,
        &mut response,
    );
    if let Some(keys) = keys {
        sign_sections(zone, keys, &mut response, context.now);
    }
    encode(response, &request, context, &mut signer)
        .into_iter()
        .collect()
}

fn format_error(request: &[u8]) -> Option<Vec<u8>> {
    // Only a readable header that is a query gets an answer.
    let id = u16::from_be_bytes([*request.first()?, *request.get(1)?]);
    if request.get(2)? & 0x80 != 0 {
        return None;
    }
    let mut response = Message::new(id, MessageType::Response, OpCode::Query);
    response.metadata.response_code = ResponseCode::FormErr;
    response.to_vec().ok()
}

/// The COOKIE option of a request, if it has one.
fn request_cookie(request: &Message) -> Option<&[u8]> {
    match request
        .edns
        .as_ref()?
        .option(EdnsCode::Unknown(cookie::OPTION_CODE))
        .or_else(|| request.edns.as_ref()?.option(EdnsCode::Cookie))?
    {
        EdnsOption::Unknown(_, data) => Some(data),
        _ => None,
    }
}

/// Whether a request carries a server cookie this server made for `source` (rate limiting
/// lets such a client through: its address is proven).
pub(crate) fn has_valid_cookie(bytes: &[u8], secret: &[u8], source: IpAddr, now: u64) -> bool {
    Message::from_vec(bytes).is_ok_and(|request| {
        request_cookie(&request)
            .is_some_and(|option| cookie::is_valid(option, secret, source, now as u32))
    })
}

fn client_subnet(request: &Message) -> Option<ClientSubnet> {
    match request.edns.as_ref()?.option(EdnsCode::Subnet)? {
        EdnsOption::Subnet(subnet) => Some(*subnet),
        _ => None,
    }
}

fn client_location(context: &QueryContext<'_>, subnet: Option<&ClientSubnet>) -> Option<Location> {
    let geo = context.geo?;
    let address = subnet
        .filter(|s| s.source_prefix() > 0)
        .map_or(context.source, ClientSubnet::addr);
    geo.locate(address)
}

/// Answers `query` from `zone` into `response`. With `keys` (a signed zone, a client that set
/// DO), denials are compact (RFC 9824): NOERROR with an NSEC at the name that says which types
/// it has, NXNAME when it has none at all, so nothing but the name asked is revealed.
fn answer_query<'l>(
    zone: &Zone,
    query: &Query,
    location: &dyn Fn() -> Option<&'l Location>,
    stats: Option<&Tally>,
    keys: Option<&ZoneKeys>,
    rng: &mut impl Rng,
    response: &mut Message,
) {
    let qtype = query.query_type();
    let mut owner = query.name().clone();
    let mut name = normalize(&owner.to_ascii());
    let deny = |response: &mut Message, owner: &Name, types: Option<Vec<WireType>>| {
        response.add_authority(soa(zone));
        if keys.is_some() {
            response.add_authority(compact_denial(owner, types.as_deref(), DEFAULT_TTL));
        } else if types.is_none() {
            response.metadata.response_code = ResponseCode::NXDomain;
        }
    };
    if qtype == WireType::ANY {
        // RFC 8482: ANY gets one small synthesized record, not every record of the name, so
        // the server is no amplifier. A name that does not exist is still NXDOMAIN.
        if name == zone.apex() || zone.lookup(&name).is_some() {
            let hinfo = HINFO::new("RFC8482".into(), String::new());
            response.add_answer(Record::from_rdata(owner, RFC8482_TTL, RData::HINFO(hinfo)));
        } else {
            deny(response, &owner, None);
        }
        return;
    }
    for _ in 0..MAX_CHAIN {
        if name == zone.apex() {
            let apex_records = match qtype {
                WireType::SOA => vec![soa(zone)],
                WireType::NS => ns_records(zone),
                _ => zone
                    .config
                    .dnssec
                    .as_ref()
                    .map(|keys| keys.apex_records(qtype))
                    .unwrap_or_default(),
            };
            if !apex_records.is_empty() {
                response.add_answers(apex_records);
                if qtype == WireType::NS {
                    response.add_additionals(name_server_glue(zone));
                }
                return;
            }
        }
        let Some(records) = zone.lookup(&name) else {
            deny(response, &owner, None);
            return;
        };
        let cnames: Vec<&Endpoint> = records
            .iter()
            .filter(|r| r.record_type == RecordType::Cname)
            .collect();
        if !cnames.is_empty() && qtype != WireType::CNAME {
            let chosen = choose_counted(&cnames, location, stats, rng);
            let Some(target) = chosen.first().and_then(|c| c.targets.first()).cloned() else {
                break;
            };
            response.add_answers(to_wire(&owner, chosen));
            let Ok(next) = Name::from_ascii(format!("{target}.")) else {
                return;
            };
            if !is_at_or_below(&target, zone.apex()) {
                return; // outside the zone: the resolver follows it
            }
            owner = next;
            name = target;
            continue;
        }
        let matching: Vec<&Endpoint> = records
            .iter()
            .filter(|r| wire_type(r.record_type) == Some(qtype))
            .collect();
        if matching.is_empty() {
            // The name exists without this type: NODATA.
            deny(response, &owner, Some(types_at(zone, &name, records)));
            return;
        }
        response.add_answers(to_wire(
            &owner,
            choose_counted(&matching, location, stats, rng),
        ));
        return;
    }
    response.metadata.response_code = ResponseCode::ServFail;
}

/// The types `name` (whose records are `records`) has, as a denial's NSEC lists them.
fn types_at(zone: &Zone, name: &str, records: &[Endpoint]) -> Vec<WireType> {
    let mut types: Vec<WireType> = records
        .iter()
        .filter_map(|record| wire_type(record.record_type))
        .collect();
    if name == zone.apex() {
        types.extend([WireType::SOA, WireType::NS]);
        if zone.config.dnssec.is_some() {
            types.extend([WireType::DNSKEY, WireType::CDS, WireType::CDNSKEY]);
        }
    }
    types.sort_unstable();
    types.dedup();
    types
}

/// Puts after every RRset of the answer and authority sections its RRSIG: the apex's own
/// sets' made with the zone, others' made now (denials, wildcard answers, ANY, and whatever
/// the fast path did not answer).
fn sign_sections(zone: &Zone, keys: &ZoneKeys, response: &mut Message, now: u64) {
    let sign = |records: Vec<Record>| -> Vec<Record> {
        let mut signed = Vec::with_capacity(records.len() * 2);
        let mut start = 0;
        while start < records.len() {
            let first = &records[start];
            let end = start
                + records[start..]
                    .iter()
                    .take_while(|r| r.record_type() == first.record_type() && r.name == first.name)
                    .count();
            let rrset = &records[start..end];
            signed.extend_from_slice(rrset);
            let premade = zone.apex_signatures.iter().find(|signature| {
                signature.name == first.name
                    && matches!(&signature.data, RData::DNSSEC(DNSSECRData::RRSIG(rrsig))
                        if rrsig.input().type_covered == first.record_type())
                    && first
                        .name
                        .to_ascii()
                        .trim_end_matches('.')
                        .eq_ignore_ascii_case(zone.apex())
            });
            match premade {
                Some(signature) => signed.push(signature.clone()),
                None => signed.extend(keys.sign(rrset, now)),
            }
            start = end;
        }
        signed
    };
    let answers = std::mem::take(&mut response.answers);
    response.answers = sign(answers);
    let authorities = std::mem::take(&mut response.authorities);
    response.authorities = sign(authorities);
}

/// The records to answer with among `records`, counting how a dynamic answer was chosen.
fn choose_counted<'a, 'l>(
    records: &[&'a Endpoint],
    location: &dyn Fn() -> Option<&'l Location>,
    stats: Option<&Tally>,
    rng: &mut impl Rng,
) -> Vec<&'a Endpoint> {
    let (chosen, choice) = choose_among(records, location, rng);
    if let (Some(stats), Some(choice)) = (stats, choice) {
        stats.chose(choice);
    }
    match chosen {
        Chosen::All => records.to_vec(),
        Chosen::One(index) => vec![records[index]],
        Chosen::None => Vec::new(),
    }
}

/// The wire type of a record type the nameserver serves (it does not serve SRV, MX or CAA).
fn wire_type(record_type: RecordType) -> Option<WireType> {
    match record_type {
        RecordType::Srv | RecordType::Mx | RecordType::Caa => None,
        served => Some(meridian_dns::wire::wire_type(served)),
    }
}

/// An AXFR or IXFR: for a client signed with a known key or in an allowed network, over TCP
/// (an IXFR over UDP gets the current SOA, which sends the client to TCP when it is behind).
fn transfer(
    zone: &Zone,
    mut response: Message,
    request: &Message,
    query: &Query,
    context: &QueryContext<'_>,
    mut signer: Option<ResponseSigner>,
) -> Vec<Vec<u8>> {
    let authorized = signer.is_some()
        || context
            .transfer_allowed
            .iter()
            .any(|net| net.contains(&context.source));
    let over_udp = context.transport == Transport::Udp;
    if !authorized || (over_udp && query.query_type() == WireType::AXFR) {
        response.metadata.response_code = ResponseCode::Refused;
        return encode(response, request, context, &mut signer)
            .into_iter()
            .collect();
    }
    if zone.config.dnssec.is_some() {
        // A signed zone's answers are chosen and signed per query: a secondary given its
        // records would serve them unsigned under the parent's DS, which validators reject.
        // Refused, with an extended error (RFC 8914, 21 "Not Supported") that says why.
        response.metadata.response_code = ResponseCode::Refused;
        if let Some(edns) = response.edns.as_mut() {
            let mut text = 21u16.to_be_bytes().to_vec();
            text.extend_from_slice(SIGNED_ZONE_TRANSFER.as_bytes());
            edns.options_mut()
                .insert(EdnsOption::Unknown(EXTENDED_ERROR, text));
        }
        return encode(response, request, context, &mut signer)
            .into_iter()
            .collect();
    }
    response.metadata.authoritative = true;
    let client_serial = match query.query_type() {
        WireType::AXFR => None,
        _ => match request.authorities.first().map(|r| &r.data) {
            Some(RData::SOA(soa)) => Some(soa.serial),
            // RFC 1995: an IXFR carries the client's SOA.
            _ => {
                response.metadata.response_code = ResponseCode::FormErr;
                return encode(response, request, context, &mut signer)
                    .into_iter()
                    .collect();
            }
        },
    };
    if over_udp {
        response.add_answer(soa(zone));
        return encode(response, request, context, &mut signer)
            .into_iter()
            .collect();
    }
    if let Some(stats) = context.stats {
        stats.answered(Some(query.query_type()), ResponseCode::NoError);
    }
    let history = zone
        .history
        .clone()
        .unwrap_or_else(|| Arc::new(zone.history_after(None)));
    let records = transfer_records(zone, &history, client_serial, |serial| {
        soa_with_serial(zone, serial)
    });
    records
        .chunks(AXFR_CHUNK)
        .filter_map(|chunk| {
            let mut message = response.clone();
            message.add_answers(chunk.to_vec());
            match &mut signer {
                Some(signer) => signer.sign(&mut message),
                None => message.to_vec().ok(),
            }
        })
        .collect()
}

/// Serializes a response, signed when the request was; over UDP, one that does not fit the
/// client's buffer is sent truncated (TC) with no records, so the client retries over TCP.
fn encode(
    mut response: Message,
    request: &Message,
    context: &QueryContext<'_>,
    signer: &mut Option<ResponseSigner>,
) -> Option<Vec<u8>> {
    if let Some(stats) = context.stats {
        let qtype = request.queries.first().map(Query::query_type);
        stats.answered(qtype, response.metadata.response_code);
    }
    let bytes = response.to_vec().ok()?;
    // Clients may offer up to 65535 bytes; the server sends no more than it advertises
    // (DNS Flag Day 2020's 1,232, which crosses any path unfragmented): a fragmented answer is
    // lost or, worse, spoofable, and a large one amplifies a spoofed query.
    let limit = match context.transport {
        Transport::Tcp => usize::from(u16::MAX),
        Transport::Udp => request.edns.as_ref().map_or(512, |e| {
            usize::from(e.max_payload().clamp(512, SERVER_UDP_PAYLOAD))
        }),
    };
    let reserve = signer.as_ref().map_or(0, |_| ResponseSigner::OVERHEAD);
    if bytes.len() + reserve > limit {
        response.metadata.truncation = true;
        response.answers.clear();
        response.authorities.clear();
        response.additionals.clear();
    } else if signer.is_none() {
        return Some(bytes);
    }
    match signer {
        Some(signer) => signer.sign(&mut response),
        None => response.to_vec().ok(),
    }
}
