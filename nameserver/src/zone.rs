//! Zone snapshots and the catalog of zones the server answers for.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use meridian_dns::model::{Endpoint, is_at_or_below};

/// What a zone is, apart from its records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneConfig {
    /// The apex, e.g. `example.com`.
    pub apex: String,
    /// Names of the zone's name servers (the NS records and the SOA's primary).
    pub name_servers: Vec<String>,
}

impl ZoneConfig {
    pub fn new(apex: &str) -> Self {
        let apex = normalize(apex);
        ZoneConfig {
            name_servers: vec![format!("ns1.{apex}")],
            apex,
        }
    }
}

/// An immutable snapshot of one zone.
#[derive(Debug, Clone)]
pub struct Zone {
    pub config: ZoneConfig,
    pub serial: u32,
    records: HashMap<String, Vec<Endpoint>>,
    /// Every name that exists: record names and their ancestors up to the apex (empty
    /// non-terminals answer NODATA, not NXDOMAIN).
    names: HashSet<String>,
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
        let mut records: HashMap<String, Vec<Endpoint>> = HashMap::new();
        let mut names = HashSet::from([config.apex.clone()]);
        for mut endpoint in endpoints {
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
        Zone {
            config,
            serial,
            records,
            names,
        }
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
