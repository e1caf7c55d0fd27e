//! Zone snapshots and the catalog of zones the server answers for.

pub(crate) mod apex;
pub(crate) mod secondary;

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Arc;

use crate::dnssec::ZoneKeys;
use crate::history::History;
use crate::prepared::{Prepared, RecordsByName};
use hickory_proto::rr::Record;
use meridian_dns::model::{Endpoint, RecordType, is_at_or_below};

/// What a zone is, apart from its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneConfig {
    /// The apex, e.g. `example.com`.
    pub apex: String,
    /// The zone's name servers: its NS records, and the SOA's primary (the first). Those inside
    /// the zone also get their addresses served in it, so a delegation to them resolves.
    pub name_servers: Vec<ZoneNameServer>,
    /// The keys it is signed with; none serves it unsigned.
    pub dnssec: Option<Arc<ZoneKeys>>,
    /// The SOA's expire, seconds: how long a secondary answers without reaching a primary.
    pub soa_expire: u32,
}

/// The SOA expire of a zone that sets none: two weeks, so secondaries keep answering through a
/// long outage of every primary (zonemaster asks for a week or more; RFC 1912 suggests two to
/// four).
pub const DEFAULT_SOA_EXPIRE: u32 = 14 * 86_400;
/// The least SOA expire served, whatever a zone asks: a week.
pub const MIN_SOA_EXPIRE: u32 = 7 * 86_400;

/// One name server of a zone: its name, and the addresses a name inside the zone needs
/// (served in the zone and given to the parent as glue).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ZoneNameServer {
    pub name: String,
    #[serde(default)]
    pub addresses: Vec<IpAddr>,
}

/// Why a zone's name servers cannot make a working delegation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DelegationError {
    #[error("name server {name} is inside the zone and has no address: give it one (NAME=ADDRESS)")]
    NoAddress { name: String },
    #[error("name server {0:?} is not a domain name")]
    BadName(String),
    #[error("{0:?} is not an IP address")]
    BadAddress(String),
}

/// How long NS records and the addresses of in-zone name servers live in caches: they change
/// rarely, and a delegation is only as stable as its glue.
pub const NAME_SERVER_TTL: u32 = 3600;

/// `NAME` or `NAME=ADDRESS[,ADDRESS...]`, as [`ZoneNameServer::parse`] reads it.
impl std::fmt::Display for ZoneNameServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.name)?;
        for (index, address) in self.addresses.iter().enumerate() {
            f.write_str(if index == 0 { "=" } else { "," })?;
            write!(f, "{address}")?;
        }
        Ok(())
    }
}

impl ZoneNameServer {
    /// Parses `NAME` or `NAME=ADDRESS[,ADDRESS...]`, as flags give name servers.
    pub fn parse(text: &str) -> Result<Self, DelegationError> {
        let (name, addresses) = text.split_once('=').unwrap_or((text, ""));
        let name = normalize(name);
        let valid_label = |label: &str| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        };
        if name.len() > 253 || !name.contains('.') || !name.split('.').all(valid_label) {
            return Err(DelegationError::BadName(text.to_string()));
        }
        let addresses = addresses
            .split(',')
            .filter(|a| !a.trim().is_empty())
            .map(|a| {
                a.trim()
                    .parse()
                    .map_err(|_| DelegationError::BadAddress(a.to_string()))
            })
            .collect::<Result<_, _>>()?;
        Ok(ZoneNameServer { name, addresses })
    }

    pub fn is_inside(&self, apex: &str) -> bool {
        is_at_or_below(&self.name, apex)
    }
}

impl ZoneConfig {
    /// A zone with the placeholder name server `ns1.<apex>`, which has no address: enough to
    /// answer, not to delegate to (see [`ZoneConfig::check_delegation`]).
    pub fn new(apex: &str) -> Self {
        let apex = normalize(apex);
        ZoneConfig {
            name_servers: vec![ZoneNameServer {
                name: format!("ns1.{apex}"),
                addresses: Vec::new(),
            }],
            apex,
            dnssec: None,
            soa_expire: DEFAULT_SOA_EXPIRE,
        }
    }

    /// The zone with its SOA's expire `seconds` (at least [`MIN_SOA_EXPIRE`]).
    pub fn with_soa_expire(mut self, seconds: u32) -> Self {
        self.soa_expire = seconds.max(MIN_SOA_EXPIRE);
        self
    }

    /// The zone signed with `keys`.
    pub fn signed_with(mut self, keys: Option<Arc<ZoneKeys>>) -> Self {
        self.dnssec = keys;
        self
    }

    /// A zone served by `name_servers` (the same name given twice is one server with both
    /// addresses); the placeholder when there are none.
    pub fn with_name_servers(
        apex: &str,
        name_servers: impl IntoIterator<Item = ZoneNameServer>,
    ) -> Self {
        let mut config = ZoneConfig::new(apex);
        let mut merged: Vec<ZoneNameServer> = Vec::new();
        for mut server in name_servers {
            server.name = normalize(&server.name);
            match merged.iter_mut().find(|s| s.name == server.name) {
                Some(known) => {
                    for address in server.addresses {
                        if !known.addresses.contains(&address) {
                            known.addresses.push(address);
                        }
                    }
                }
                None => merged.push(server),
            }
        }
        if !merged.is_empty() {
            config.name_servers = merged;
        }
        config
    }

    /// Whether a parent can delegate to these name servers: each one inside the zone needs
    /// an address (glue), or resolvers could never reach it.
    pub fn check_delegation(&self) -> Result<(), DelegationError> {
        match self
            .name_servers
            .iter()
            .find(|ns| ns.is_inside(&self.apex) && ns.addresses.is_empty())
        {
            Some(lame) => Err(DelegationError::NoAddress {
                name: lame.name.clone(),
            }),
            None => Ok(()),
        }
    }

    /// What the parent zone needs, in zone-file lines: the NS records and, for name servers
    /// inside the zone, their addresses (glue).
    pub fn delegation(&self) -> Vec<String> {
        let apex = &self.apex;
        let mut lines: Vec<String> = self
            .name_servers
            .iter()
            .map(|ns| format!("{apex}. {NAME_SERVER_TTL} IN NS {}.", ns.name))
            .collect();
        for ns in self.name_servers.iter().filter(|ns| ns.is_inside(apex)) {
            for address in &ns.addresses {
                let kind = if address.is_ipv4() { "A" } else { "AAAA" };
                lines.push(format!(
                    "{}. {NAME_SERVER_TTL} IN {kind} {address}",
                    ns.name
                ));
            }
        }
        lines
    }

    /// The address records of the name servers inside the zone, as the zone serves them.
    fn name_server_addresses(&self) -> Vec<Endpoint> {
        let mut endpoints = Vec::new();
        for ns in self
            .name_servers
            .iter()
            .filter(|ns| ns.is_inside(&self.apex))
        {
            for (record_type, version_4) in [(RecordType::A, true), (RecordType::Aaaa, false)] {
                let targets: Vec<String> = ns
                    .addresses
                    .iter()
                    .filter(|a| a.is_ipv4() == version_4)
                    .map(IpAddr::to_string)
                    .collect();
                if !targets.is_empty() {
                    endpoints.push(Endpoint::new(
                        &ns.name,
                        record_type,
                        targets,
                        NAME_SERVER_TTL,
                    ));
                }
            }
        }
        endpoints
    }
}

/// An immutable snapshot of one zone.
#[derive(Debug)]
pub struct Zone {
    pub config: ZoneConfig,
    pub serial: u32,
    records: RecordsByName,
    /// Every name that exists: record names and their ancestors up to the apex (empty
    /// non-terminals answer NODATA, not NXDOMAIN).
    names: HashSet<String>,
    /// What secondaries transfer, and the journal of recent changes (servers that allow
    /// transfers keep it; see [`Zone::with_history`]).
    pub(crate) history: Option<Arc<History>>,
    /// The records as the fast path answers from them.
    pub(crate) prepared: Prepared,
    /// In a signed zone, the signatures of the apex's own sets (SOA, NS, DNSKEY, CDS,
    /// CDNSKEY), made when the zone is built.
    pub(crate) apex_signatures: Vec<Record>,
    /// Unix time the zone was built (and its apex signatures made).
    built_at: u64,
}

pub(crate) fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl Zone {
    /// A zone holding the `endpoints` at or below the apex (others are ignored).
    pub fn new(
        config: ZoneConfig,
        serial: u32,
        endpoints: impl IntoIterator<Item = Endpoint>,
    ) -> Self {
        Zone::replacing(None, config, serial, endpoints)
    }

    /// The zone that replaces `previous`, holding the `endpoints` at or below the apex: as
    /// [`Zone::new`], encoding again only the names whose records changed.
    pub fn replacing(
        previous: Option<&Zone>,
        config: ZoneConfig,
        serial: u32,
        endpoints: impl IntoIterator<Item = Endpoint>,
    ) -> Self {
        let mut records: HashMap<String, Vec<Endpoint>> = HashMap::new();
        let mut names = HashSet::from([config.apex.clone()]);
        let name_server_addresses = config.name_server_addresses();
        for mut endpoint in endpoints.into_iter().chain(name_server_addresses) {
            endpoint.normalize();
            if !is_at_or_below(&endpoint.dns_name, &config.apex) {
                continue;
            }
            let mut name = endpoint.dns_name.as_str();
            while name != config.apex && names.insert(name.to_string()) {
                name = name
                    .split_once('.')
                    .map_or(config.apex.as_str(), |(_, parent)| parent);
            }
            records
                .entry(endpoint.dns_name.clone())
                .or_default()
                .push(endpoint);
        }
        for group in records.values_mut() {
            meridian_dns::model::sort_endpoints(group);
        }
        let now = crate::clock::unix_now();
        let prepared = Prepared::new(
            &config.apex,
            &records,
            previous.map(|zone| (&zone.records, &zone.prepared)),
            config.dnssec.as_deref(),
            now,
        );
        let mut zone = Zone {
            config,
            serial,
            records,
            names,
            history: None,
            prepared,
            apex_signatures: Vec::new(),
            built_at: now,
        };
        if let Some(keys) = zone.config.dnssec.clone() {
            zone.apex_signatures = apex::apex_rrsets(&zone)
                .iter()
                .filter_map(|rrset| keys.sign(rrset, now))
                .collect();
        }
        zone
    }

    /// The same zone (records, serial, history) with the signatures that are due made again.
    pub(crate) fn signed_again(&self) -> Zone {
        // The addresses of in-zone name servers come from the configuration, not the records.
        let from_config = self.config.name_server_addresses();
        let records: Vec<Endpoint> = self
            .all_records()
            .filter(|record| !from_config.contains(record))
            .cloned()
            .collect();
        let mut zone = Zone::replacing(Some(self), self.config.clone(), self.serial, records);
        zone.history = self.history.clone();
        zone
    }

    /// When the signatures made with this zone are due to be made again (Unix time): `None`
    /// for an unsigned zone. The apex's own were made with the zone, so a zone with no names
    /// of its own is due too.
    pub fn signatures_due(&self) -> Option<u64> {
        self.config.dnssec.as_ref()?;
        let apex_due = self.built_at + u64::from(crate::dnssec::SIGNATURE_REFRESH);
        Some(self.prepared.signatures_due().min(apex_due))
    }

    /// The zone with its transfer history: the journal of `previous` (the zone it replaces)
    /// and one more change, from `previous`'s records to these.
    pub fn with_history(mut self, previous: Option<&Zone>) -> Zone {
        let previous = previous.and_then(|zone| Some((zone.history.as_deref()?, zone.serial)));
        self.history = Some(Arc::new(self.history_after(previous)));
        self
    }

    /// This zone's transfer history, one change after `previous` (the history of the zone it
    /// replaces, and that zone's serial).
    pub(crate) fn history_after(&self, previous: Option<(&History, u32)>) -> History {
        History::after(previous, secondary::secondary_view(self), self.serial)
    }

    pub fn apex(&self) -> &str {
        &self.config.apex
    }

    /// The records at `name`, following RFC 4592 wildcards: `None` when the name does not exist.
    pub(crate) fn lookup(&self, name: &str) -> Option<&[Endpoint]> {
        if let Some(records) = self.records.get(name) {
            return Some(records);
        }
        if self.names.contains(name) {
            return Some(&[]);
        }
        // The closest encloser is the longest existing ancestor; its wildcard child answers.
        let mut ancestor = name;
        while let Some((_, parent)) = ancestor.split_once('.') {
            if self.names.contains(parent) {
                return self.records.get(&format!("*.{parent}")).map(Vec::as_slice);
            }
            if parent == self.config.apex {
                break;
            }
            ancestor = parent;
        }
        None
    }

    /// Every record, for zone transfers.
    pub(crate) fn all_records(&self) -> impl Iterator<Item = &Endpoint> {
        let mut names: Vec<&String> = self.records.keys().collect();
        names.sort();
        names.into_iter().flat_map(|name| self.records[name].iter())
    }

    pub fn record_count(&self) -> usize {
        self.records.values().map(Vec::len).sum()
    }
}

/// The zones a server answers for.
#[derive(Debug, Clone, Default)]
pub struct Catalog {
    zones: Vec<Arc<Zone>>,
}

impl Catalog {
    /// The catalog with `zone` added or replaced (by apex).
    pub fn with_zone(&self, zone: Zone) -> Catalog {
        let mut zones: Vec<Arc<Zone>> = self
            .zones
            .iter()
            .filter(|z| z.apex() != zone.apex())
            .cloned()
            .collect();
        zones.push(Arc::new(zone));
        // Longest apex first, so the most specific zone answers.
        zones.sort_by_key(|z| std::cmp::Reverse(z.apex().len()));
        Catalog { zones }
    }

    /// The catalog without the zone at `apex`.
    pub fn without(&self, apex: &str) -> Catalog {
        Catalog {
            zones: self
                .zones
                .iter()
                .filter(|z| z.apex() != apex)
                .cloned()
                .collect(),
        }
    }

    /// Every zone, the longest apex first.
    pub fn zones(&self) -> impl Iterator<Item = &Zone> {
        self.zones.iter().map(Arc::as_ref)
    }

    pub fn zone(&self, apex: &str) -> Option<&Arc<Zone>> {
        self.zones.iter().find(|z| z.apex() == apex)
    }

    /// The zone `name` belongs to.
    pub fn find(&self, name: &str) -> Option<&Zone> {
        self.zones
            .iter()
            .find(|z| is_at_or_below(name, z.apex()))
            .map(Arc::as_ref)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(name: &str, addresses: &[&str]) -> ZoneNameServer {
        ZoneNameServer {
            name: name.into(),
            addresses: addresses.iter().map(|a| a.parse().unwrap()).collect(),
        }
    }

    #[test]
    fn name_servers_parse_from_flags() {
        let table: &[(&str, Result<ZoneNameServer, DelegationError>)] = &[
            ("ns.dns.example.net", Ok(ns("ns.dns.example.net", &[]))),
            (
                "NS1.Example.com.=192.0.2.53",
                Ok(ns("ns1.example.com", &["192.0.2.53"])),
            ),
            (
                "ns1.example.com=192.0.2.53,2001:db8::53",
                Ok(ns("ns1.example.com", &["192.0.2.53", "2001:db8::53"])),
            ),
            ("ns1", Err(DelegationError::BadName("ns1".into()))),
            (
                "ns_1.example.com",
                Err(DelegationError::BadName("ns_1.example.com".into())),
            ),
            (
                "=192.0.2.53",
                Err(DelegationError::BadName("=192.0.2.53".into())),
            ),
            (
                "ns1.example.com=192.0.2.300",
                Err(DelegationError::BadAddress("192.0.2.300".into())),
            ),
        ];
        for (text, expected) in table {
            let parsed = ZoneNameServer::parse(text);
            assert_eq!(&parsed, expected, "{text}");
            if let Ok(server) = parsed {
                assert_eq!(
                    ZoneNameServer::parse(&server.to_string()),
                    Ok(server),
                    "round trip"
                );
            }
        }
    }

    #[test]
    fn a_delegation_needs_glue_for_names_inside_the_zone_only() {
        let config = ZoneConfig::with_name_servers(
            "example.com",
            [
                ns("ns1.example.com", &["192.0.2.53"]),
                ns("ns.dns.example.net", &[]),
                // The same name twice is one server with both addresses.
                ns("ns1.example.com.", &["2001:db8::53", "192.0.2.53"]),
            ],
        );
        assert_eq!(config.name_servers.len(), 2);
        assert_eq!(config.check_delegation(), Ok(()));
        assert_eq!(
            config.delegation(),
            [
                "example.com. 3600 IN NS ns1.example.com.",
                "example.com. 3600 IN NS ns.dns.example.net.",
                "ns1.example.com. 3600 IN A 192.0.2.53",
                "ns1.example.com. 3600 IN AAAA 2001:db8::53",
            ]
        );
        // The zone serves the addresses of its own name servers, and of no other.
        let zone = Zone::new(config, 1, []);
        let served: Vec<(RecordType, Vec<String>)> = zone
            .lookup("ns1.example.com")
            .unwrap()
            .iter()
            .map(|e| (e.record_type, e.targets.clone()))
            .collect();
        assert_eq!(
            served,
            [
                (RecordType::A, vec!["192.0.2.53".to_string()]),
                (RecordType::Aaaa, vec!["2001:db8::53".to_string()])
            ]
        );
        assert!(zone.lookup("ns.dns.example.net").is_none());

        let lame = ZoneConfig::new("example.com");
        assert_eq!(
            lame.check_delegation(),
            Err(DelegationError::NoAddress {
                name: "ns1.example.com".into()
            })
        );
        assert_eq!(
            ZoneConfig::with_name_servers("example.com", []),
            lame,
            "no name servers: the placeholder"
        );
        // A name server outside the zone needs no glue: a resolver finds it elsewhere.
        let outside = ZoneConfig::with_name_servers("example.com", [ns("ns.example.net", &[])]);
        assert_eq!(outside.check_delegation(), Ok(()));
        assert!(
            !ns("ns1.notexample.com", &[]).is_inside("example.com"),
            "a suffix is not a parent"
        );
    }
}
