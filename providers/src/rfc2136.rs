//! RFC2136: DNS UPDATE signed with TSIG, the zone read by AXFR (also TSIG-signed), for BIND and
//! any server that speaks them. Plain DNS has no weights and no GEO, and cannot hold several
//! CNAMEs at one name, so a loadbalanced tree that loses nothing that way (one answer for every
//! location, equal weights: `meridian_dns::fidelity` says, and refuses any other) is first
//! flattened to the addresses it leads to ([`plain_dns_records`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{SystemTime, UNIX_EPOCH};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType as WireType, TSigner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::batch::{Action, Change, Limits, group_by_name, pack, send_batches};
use super::{Provider, ProviderError, ZoneInfo};
use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, RecordKey, RecordType, WEIGHT, is_at_or_below, normalized};
use meridian_dns::tree::LEAF_TTL;
use meridian_dns::wire::{TsigKey, fqdn, to_wire, wire_type};

/// How long one step of an exchange with the server may take: connecting, sending, or
/// receiving one response message (a transfer is many, each within it).
pub const STEP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// One step of an exchange with `server`, within [`STEP_TIMEOUT`]: a server that accepts and
/// never answers (frozen, overloaded, a black-holed route) fails the call, to be retried with
/// backoff, instead of holding the record's reconcile for ever.
async fn within<T>(
    server: SocketAddr,
    what: &str,
    step: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, ProviderError> {
    match tokio::time::timeout(STEP_TIMEOUT, step).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(ProviderError::Other(format!("{server}: {what}: {e}"))),
        Err(_) => Err(ProviderError::Other(format!(
            "{server}: {what} took over {} s",
            STEP_TIMEOUT.as_secs()
        ))),
    }
}
/// Changes per UPDATE message; keeps a message far below 64 KiB.
const UPDATE_LIMITS: Limits = Limits {
    max_changes: 400,
    max_values: 800,
    max_value_chars: 24_000,
    updates_replace: false,
};

/// What a `kuadrant.io/rfc2136` Secret holds, and the zone.
#[derive(Clone)]
pub struct Rfc2136Config {
    pub server: SocketAddr,
    pub zone: String,
    pub key_name: String,
    /// `hmac-sha256`, `hmac-sha384` or `hmac-sha512`.
    pub algorithm: String,
    /// The TSIG secret, base64 as BIND writes it.
    pub secret: String,
}

impl std::fmt::Debug for Rfc2136Config {
    // The TSIG secret never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rfc2136Config")
            .field("server", &self.server)
            .field("zone", &self.zone)
            .field("key_name", &self.key_name)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// One zone on one RFC2136 server.
pub struct Rfc2136Provider {
    config: Rfc2136Config,
    signer: TSigner,
}

impl std::fmt::Debug for Rfc2136Provider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Rfc2136Provider")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Rfc2136Provider {
    pub fn new(config: Rfc2136Config) -> Result<Self, ProviderError> {
        let signer = TsigKey::new(&config.key_name, &config.algorithm, &config.secret)
            .map_err(|e| ProviderError::Invalid(e.to_string()))?
            .signer(300);
        Ok(Rfc2136Provider { config, signer })
    }

    fn zone_name(&self) -> Name {
        fqdn(self.config.zone.trim_end_matches('.'))
    }

    /// Sends signed `message` over TCP and returns every response message until `done` says so;
    /// each step (connecting, sending, each response) within [`STEP_TIMEOUT`].
    async fn exchange(
        &self,
        mut message: Message,
        mut done: impl FnMut(&Message) -> bool,
    ) -> Result<Vec<Message>, ProviderError> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        message
            .finalize(&self.signer, now)
            .map_err(|e| ProviderError::Other(format!("signing: {e}")))?;
        let bytes = message
            .to_vec()
            .map_err(|e| ProviderError::Other(e.to_string()))?;
        let server = self.config.server;
        let mut stream = within(server, "connecting", TcpStream::connect(server)).await?;
        let length = u16::try_from(bytes.len())
            .map_err(|_| ProviderError::Invalid("UPDATE too large".into()))?;
        let mut framed = length.to_be_bytes().to_vec();
        framed.extend_from_slice(&bytes);
        within(server, "sending the request", stream.write_all(&framed)).await?;
        let mut responses = Vec::new();
        loop {
            let mut length = [0u8; 2];
            within(server, "reading a response", stream.read_exact(&mut length)).await?;
            let mut buffer = vec![0u8; usize::from(u16::from_be_bytes(length))];
            within(server, "reading a response", stream.read_exact(&mut buffer)).await?;
            let response =
                Message::from_vec(&buffer).map_err(|e| ProviderError::Other(e.to_string()))?;
            let code = response.metadata.response_code;
            if matches!(code, ResponseCode::YXRRSet | ResponseCode::NXRRSet) {
                // A prerequisite failed: another writer changed the values this plan saw.
                return Err(ProviderError::Stale(format!(
                    "{} answered {code}",
                    self.config.server
                )));
            }
            if code != ResponseCode::NoError {
                return Err(ProviderError::Rejected(format!(
                    "{} answered {code}",
                    self.config.server
                )));
            }
            let finished = done(&response);
            responses.push(response);
            if finished {
                return Ok(responses);
            }
        }
    }

    /// One record set (name and type) by a signed query to the server, without a transfer.
    pub async fn read_record(
        &self,
        name: &str,
        record_type: RecordType,
    ) -> Result<Option<Endpoint>, ProviderError> {
        let mut request = Message::new(rand::random(), MessageType::Query, OpCode::Query);
        request.add_query(Query::query(fqdn(name), wire_type(record_type)));
        match self.exchange(request, |_| true).await {
            Ok(responses) => {
                let records: Vec<Record> = responses.into_iter().flat_map(|r| r.answers).collect();
                Ok(endpoints_from_transfer(&records)
                    .into_iter()
                    .find(|e| e.dns_name == name && e.record_type == record_type))
            }
            Err(ProviderError::Rejected(message)) if message.ends_with("NXDomain") => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn update(&self, changes: &[Change]) -> Result<(), ProviderError> {
        let mut message = Message::new(rand::random(), MessageType::Query, OpCode::Update);
        let mut zone = Query::new();
        zone.set_name(self.zone_name())
            .set_query_class(DNSClass::IN)
            .set_query_type(WireType::SOA);
        message.add_query(zone);
        for change in changes {
            let owner = fqdn(&change.record.dns_name);
            let wire = to_wire(&owner, vec![&change.record]);
            match change.action {
                Action::Delete => {
                    for mut record in wire {
                        record.dns_class = DNSClass::NONE;
                        record.ttl = 0;
                        message.add_authority(record);
                    }
                }
                Action::Upsert | Action::Create => {
                    if let Some(replaced) = &change.replaces {
                        // Prerequisite "RRset exists (value dependent)": the update applies only
                        // to the values the plan saw, so two writers cannot lose each other's
                        // change; the server refuses the stale one and it is planned again.
                        for mut record in to_wire(&owner, vec![replaced]) {
                            record.ttl = 0;
                            message.add_answer(record);
                        }
                    }
                    if change.action == Action::Upsert {
                        let record_type = wire_type(change.record.record_type);
                        let mut clear = Record::update0(owner.clone(), 0, record_type);
                        clear.dns_class = DNSClass::ANY;
                        message.add_authority(clear);
                    }
                    message.add_authorities(wire);
                }
            }
        }
        self.exchange(message, |_| true)
            .await
            .map(drop)
            .map_err(|error| explain_failure(error, changes))
    }
}

/// The most records BIND (9.18.28 and later, 9.20) holds in one RRset by default
/// (`max-records-per-type`, the fix of CVE-2024-1737).
const BIND_RRSET_LIMIT: usize = 100;

/// `error` with its likely cause when the server failed an UPDATE that writes an RRset larger
/// than BIND accepts by default: BIND answers that with SERVFAIL and nothing else, and a
/// flattened host of more than 100 clusters meets it first.
fn explain_failure(error: ProviderError, changes: &[Change]) -> ProviderError {
    let ProviderError::Rejected(message) = error else {
        return error;
    };
    let largest = changes
        .iter()
        .filter(|change| change.action != Action::Delete)
        .map(|change| (change.record.targets.len(), &change.record.dns_name))
        .max();
    match largest {
        Some((records, name))
            if records > BIND_RRSET_LIMIT
                && message.ends_with(&ResponseCode::ServFail.to_string()) =>
        {
            ProviderError::Rejected(format!(
                "{message}: the update gives {name} {records} records, and BIND refuses an \
                 RRset of more than {BIND_RRSET_LIMIT} by default (raise max-records-per-type \
                 in the server's options)"
            ))
        }
        _ => ProviderError::Rejected(message),
    }
}

/// Records of a zone transfer, as engine endpoints (one per name and type; SOA left out).
fn endpoints_from_transfer(records: &[Record]) -> Vec<Endpoint> {
    let mut grouped: BTreeMap<(String, RecordType), Endpoint> = BTreeMap::new();
    for record in records {
        let name = record
            .name
            .to_ascii()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        let (record_type, value) = match &record.data {
            RData::A(a) => (RecordType::A, a.0.to_string()),
            RData::AAAA(aaaa) => (RecordType::Aaaa, aaaa.0.to_string()),
            RData::CNAME(cname) => (
                RecordType::Cname,
                cname.0.to_ascii().trim_end_matches('.').to_string(),
            ),
            RData::NS(ns) => (
                RecordType::Ns,
                ns.0.to_ascii().trim_end_matches('.').to_string(),
            ),
            RData::TXT(txt) => (
                RecordType::Txt,
                txt.txt_data
                    .iter()
                    .map(|d| String::from_utf8_lossy(d).into_owned())
                    .collect(),
            ),
            _ => continue,
        };
        grouped
            .entry((name.clone(), record_type))
            .or_insert_with(|| Endpoint::new(name, record_type, [], record.ttl))
            .targets
            .push(value);
    }
    normalized(grouped.into_values())
}

impl Provider for Rfc2136Provider {
    async fn list_zones(&self) -> Result<Vec<ZoneInfo>, ProviderError> {
        let domain = self.config.zone.trim_end_matches('.').to_ascii_lowercase();
        Ok(vec![ZoneInfo {
            id: domain.clone(),
            domain,
        }])
    }

    async fn records(&self, _zone_id: &str) -> Result<Vec<Endpoint>, ProviderError> {
        let mut request = Message::new(rand::random(), MessageType::Query, OpCode::Query);
        request.add_query(Query::query(self.zone_name(), WireType::AXFR));
        let mut soa_seen = 0;
        let responses = self
            .exchange(request, |response| {
                soa_seen += response
                    .answers
                    .iter()
                    .filter(|r| r.record_type() == WireType::SOA)
                    .count();
                soa_seen >= 2
            })
            .await?;
        let records: Vec<Record> = responses.into_iter().flat_map(|r| r.answers).collect();
        Ok(endpoints_from_transfer(&records))
    }

    async fn apply(&self, _zone_id: &str, changes: &Changes) -> Result<(), ProviderError> {
        let routed: Vec<&str> = changes
            .creates
            .iter()
            .chain(changes.updates.iter().map(|u| &u.new))
            .filter(|r| r.set_identifier.is_some() || !r.provider_specific.is_empty())
            .map(|r| r.dns_name.as_str())
            .collect();
        if !routed.is_empty() {
            return Err(ProviderError::Invalid(format!(
                "RFC2136 has no weighted or GEO records ({}); flatten the tree with plain_dns_records first",
                routed.join(", ")
            )));
        }
        let batches = pack(group_by_name(changes), UPDATE_LIMITS);
        send_batches(batches, move |batch: Vec<Change>| async move {
            self.update(&batch).await
        })
        .await
    }
}

/// A record tree as plain DNS can hold it: without weighted or GEO records, the host answers
/// with every cluster address the tree leads to (A and AAAA), like `simple`, but for those of
/// clusters weighing 0 beside others (drained). Hostname targets cannot stand beside
/// addresses, so they are left out unless there is no address at all. Returns the records and
/// notes for the status (empty when the tree was already plain).
///
/// Whether the tree should be flattened at all is `meridian_dns::fidelity`'s to say: only a
/// tree whose weights are equal and whose locations all get the same answer loses nothing.
pub fn plain_dns_records(host: &str, endpoints: &[Endpoint]) -> (Vec<Endpoint>, Vec<String>) {
    if endpoints
        .iter()
        .all(|e| e.set_identifier.is_none() && e.provider_specific.is_empty())
    {
        return (endpoints.to_vec(), Vec::new());
    }
    let base = host.strip_prefix("*.").unwrap_or(host);
    let drained = Drained::of(endpoints);
    let mut v4 = Vec::new();
    let mut v6 = Vec::new();
    let mut hostnames = Vec::new();
    for endpoint in endpoints {
        if drained.leaves_out(endpoint) {
            continue;
        }
        match endpoint.record_type {
            RecordType::A | RecordType::Aaaa => {
                for target in &endpoint.targets {
                    match target.parse::<IpAddr>() {
                        Ok(IpAddr::V4(_)) => v4.push(target.clone()),
                        Ok(IpAddr::V6(_)) => v6.push(target.clone()),
                        Err(_) => {}
                    }
                }
            }
            RecordType::Cname => hostnames.extend(
                endpoint
                    .targets
                    .iter()
                    .filter(|t| !is_at_or_below(t, base))
                    .cloned(),
            ),
            _ => {}
        }
    }
    hostnames.sort();
    hostnames.dedup();
    let mut notes = vec![format!(
        "{host}: this provider has no weighted or GEO records; every cluster address weighing more than 0 is published, so weights and GEO are not honoured"
    )];
    // The host's answer changes whenever any record of the tree does (a failover moves a
    // weighted record, not a leaf), so resolvers keep it no longer than the shortest of them.
    let ttl = endpoints
        .iter()
        .map(|e| e.record_ttl)
        .filter(|ttl| *ttl > 0)
        .min()
        .unwrap_or(LEAF_TTL);
    let mut records = Vec::new();
    if !v4.is_empty() {
        records.push(Endpoint::new(host, RecordType::A, v4, ttl));
    }
    if !v6.is_empty() {
        records.push(Endpoint::new(host, RecordType::Aaaa, v6, ttl));
    }
    if records.is_empty() {
        if let Some(first) = hostnames.first() {
            records.push(Endpoint::new(host, RecordType::Cname, [first.clone()], ttl));
            if hostnames.len() > 1 {
                notes.push(format!(
                    "{host}: only {first} of the hostnames {} can be published",
                    hostnames.join(", ")
                ));
            }
        }
    } else if !hostnames.is_empty() {
        notes.push(format!(
            "{host}: hostname addresses {} cannot be published beside IP addresses",
            hostnames.join(", ")
        ));
    }
    (records, notes)
}

/// What a drained cluster leaves out of plain records: the weighted members of weight 0 in a
/// set where others weigh more, and the cluster records only such members lead to.
#[derive(Default)]
struct Drained {
    members: BTreeSet<RecordKey>,
    names: BTreeSet<String>,
}

impl Drained {
    fn of(endpoints: &[Endpoint]) -> Self {
        let weighs = |e: &Endpoint| e.property(WEIGHT).map(|w| w.parse::<u64>().unwrap_or(0));
        let mut sets: BTreeMap<&str, Vec<&Endpoint>> = BTreeMap::new();
        for endpoint in endpoints.iter().filter(|e| weighs(e).is_some()) {
            sets.entry(&endpoint.dns_name).or_default().push(endpoint);
        }
        let mut drained = Drained::default();
        let mut kept_targets = BTreeSet::new();
        for members in sets.values() {
            let any_weighs = members.iter().any(|e| weighs(e) > Some(0));
            for member in members {
                if any_weighs && weighs(member) == Some(0) {
                    drained.members.insert(member.key());
                    drained.names.extend(member.targets.iter().cloned());
                } else {
                    kept_targets.extend(member.targets.iter().cloned());
                }
            }
        }
        drained.names.retain(|name| !kept_targets.contains(name));
        drained
    }

    fn leaves_out(&self, endpoint: &Endpoint) -> bool {
        self.members.contains(&endpoint.key()) || self.names.contains(&endpoint.dns_name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::model::GEO_CODE;

    #[test]
    fn a_server_failure_on_an_rrset_over_bind_s_limit_says_so() {
        let addresses = |count: usize| {
            Endpoint::new(
                "shared.example.com",
                RecordType::A,
                (0..count).map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1)),
                60,
            )
        };
        let change = |action, count| Change {
            action,
            record: addresses(count),
            replaces: None,
        };
        let failed =
            || ProviderError::Rejected(format!("127.0.0.1:53 answered {}", ResponseCode::ServFail));
        let refused =
            || ProviderError::Rejected(format!("127.0.0.1:53 answered {}", ResponseCode::Refused));
        let explained = |error, changes: &[Change]| match explain_failure(error, changes) {
            ProviderError::Rejected(message) => message,
            other => panic!("{other:?}"),
        };
        let over = explained(failed(), &[change(Action::Upsert, 101)]);
        assert!(
            over.ends_with(
                "shared.example.com 101 records, and BIND refuses an RRset of more than 100 by \
                 default (raise max-records-per-type in the server's options)"
            ),
            "{over}"
        );
        assert!(over.starts_with("127.0.0.1:53 answered"), "{over}");
        // At the limit, another code, or a deletion of a large RRset: as the server said.
        for (error, changes, expected) in [
            (failed(), vec![change(Action::Upsert, 100)], failed()),
            (refused(), vec![change(Action::Create, 101)], refused()),
            (failed(), vec![change(Action::Delete, 101)], failed()),
        ] {
            let ProviderError::Rejected(expected) = expected else {
                unreachable!()
            };
            assert_eq!(explained(error, &changes), expected);
        }
        // Other errors pass through untouched.
        assert!(matches!(
            explain_failure(
                ProviderError::Stale("raced".into()),
                &[change(Action::Upsert, 101)]
            ),
            ProviderError::Stale(_)
        ));
    }

    /// `api` → klb (GEO `*`) → default.klb (weighted) → one cluster record each.
    fn tree(weights: &[(&str, u32)]) -> Vec<Endpoint> {
        let host = "api.example.com";
        let mut records = vec![
            Endpoint::new(host, RecordType::Cname, ["klb.api.example.com".into()], 300),
            Endpoint::new(
                "klb.api.example.com",
                RecordType::Cname,
                ["default.klb.api.example.com".into()],
                300,
            )
            .with_set_identifier("default")
            .with_property(GEO_CODE, "*"),
        ];
        for (address, weight) in weights {
            let cluster = format!("c-{address}.klb.api.example.com");
            records.push(
                Endpoint::new(
                    "default.klb.api.example.com",
                    RecordType::Cname,
                    [cluster.clone()],
                    60,
                )
                .with_set_identifier(cluster.clone())
                .with_property(WEIGHT, weight.to_string()),
            );
            records.push(Endpoint::new(
                &cluster,
                RecordType::A,
                [address.to_string()],
                60,
            ));
        }
        records
    }

    fn addresses(weights: &[(&str, u32)]) -> Vec<String> {
        let (records, _) = plain_dns_records("api.example.com", &tree(weights));
        assert_eq!(records.len(), 1, "{records:?}");
        records[0].targets.clone()
    }

    /// A failover changes a weighted record, not a leaf: the host's plain answer must expire
    /// as soon as the shortest-lived record of the tree would.
    #[test]
    fn plain_records_live_no_longer_than_the_shortest_lived_record_of_the_tree() {
        let mut records = tree(&[("10.0.0.1", 1), ("10.0.0.2", 1)]);
        let ttl =
            |records: &[Endpoint]| plain_dns_records("api.example.com", records).0[0].record_ttl;
        assert_eq!(ttl(&records), 60);
        for record in records.iter_mut().filter(|e| e.set_identifier.is_some()) {
            record.record_ttl = 5;
        }
        assert_eq!(ttl(&records), 5);
        // A TTL of 0 is no TTL given: it does not make the answer uncacheable.
        records[0].record_ttl = 0;
        assert_eq!(ttl(&records), 5);
    }

    #[test]
    fn a_drained_cluster_leaves_plain_records_once_it_weighs_nothing() {
        let both = ["10.0.0.1", "10.0.0.2"];
        assert_eq!(addresses(&[("10.0.0.1", 120), ("10.0.0.2", 120)]), both);
        assert_eq!(
            addresses(&[("10.0.0.1", 120), ("10.0.0.2", 12)]),
            both,
            "a drain's step is still served"
        );
        assert_eq!(
            addresses(&[("10.0.0.1", 120), ("10.0.0.2", 0)]),
            ["10.0.0.1"]
        );
        assert_eq!(
            addresses(&[("10.0.0.1", 0), ("10.0.0.2", 0)]),
            both,
            "every cluster drained: all are served, as weighted providers answer"
        );
    }
}
