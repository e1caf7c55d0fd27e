//! The record model shared by the tree, the plan and the providers.

use std::fmt;

use serde::{Deserialize, Serialize};

/// DNS record types the engine handles.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum RecordType {
    A,
    #[serde(rename = "AAAA")]
    Aaaa,
    #[serde(rename = "CNAME")]
    Cname,
    #[serde(rename = "TXT")]
    Txt,
    #[serde(rename = "NS")]
    Ns,
    #[serde(rename = "SRV")]
    Srv,
    #[serde(rename = "MX")]
    Mx,
    #[serde(rename = "CAA")]
    Caa,
}

impl RecordType {
    /// Every type, for parsing and for tests.
    pub const ALL: [RecordType; 8] = [
        RecordType::A,
        RecordType::Aaaa,
        RecordType::Cname,
        RecordType::Txt,
        RecordType::Ns,
        RecordType::Srv,
        RecordType::Mx,
        RecordType::Caa,
    ];

    /// The type named `name` (as DNS spells it, any case).
    pub fn parse(name: &str) -> Option<RecordType> {
        RecordType::ALL
            .into_iter()
            .find(|t| t.as_str().eq_ignore_ascii_case(name))
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RecordType::A => "A",
            RecordType::Aaaa => "AAAA",
            RecordType::Cname => "CNAME",
            RecordType::Txt => "TXT",
            RecordType::Ns => "NS",
            RecordType::Srv => "SRV",
            RecordType::Mx => "MX",
            RecordType::Caa => "CAA",
        }
    }

    /// Whether several values of one record are a set (A, AAAA, TXT…) rather than one value
    /// that owners must agree on (CNAME).
    pub fn is_multi_value(self) -> bool {
        self != RecordType::Cname
    }
}

impl fmt::Display for RecordType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Provider-specific property names the engine writes.
pub const WEIGHT: &str = "weight";
pub const GEO_CODE: &str = "geo-code";
/// A weighted record's failover tier (1 is the best); consumed before publishing
/// ([`crate::tiers`]), never sent to a provider.
pub const PRIORITY: &str = "priority";

/// A provider-specific routing property (`weight`, `geo-code`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct ProviderSpecific {
    pub name: String,
    pub value: String,
}

/// One record: a name, a type, its values and its routing properties.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    pub dns_name: String,
    pub record_type: RecordType,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    #[serde(rename = "recordTTL", default, skip_serializing_if = "is_zero")]
    pub record_ttl: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub set_identifier: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub provider_specific: Vec<ProviderSpecific>,
}

fn is_zero(ttl: &u32) -> bool {
    *ttl == 0
}

/// What identifies a record in a zone: name, type and set identifier.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordKey {
    pub dns_name: String,
    pub record_type: RecordType,
    pub set_identifier: Option<String>,
}

impl fmt::Display for RecordKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.dns_name, self.record_type)?;
        if let Some(set) = &self.set_identifier {
            write!(f, " [{set}]")?;
        }
        Ok(())
    }
}

impl Endpoint {
    /// A record with sorted, de-duplicated targets and sorted properties.
    pub fn new(
        dns_name: impl Into<String>,
        record_type: RecordType,
        targets: impl IntoIterator<Item = String>,
        ttl: u32,
    ) -> Self {
        let mut endpoint = Endpoint {
            dns_name: dns_name.into(),
            record_type,
            set_identifier: None,
            targets: targets.into_iter().collect(),
            record_ttl: ttl,
            provider_specific: Vec::new(),
        };
        endpoint.normalize();
        endpoint
    }

    pub fn with_set_identifier(mut self, set_identifier: impl Into<String>) -> Self {
        self.set_identifier = Some(set_identifier.into());
        self
    }

    pub fn with_property(mut self, name: &str, value: impl Into<String>) -> Self {
        self.provider_specific.retain(|p| p.name != name);
        self.provider_specific.push(ProviderSpecific {
            name: name.to_string(),
            value: value.into(),
        });
        self.provider_specific.sort();
        self
    }

    pub fn property(&self, name: &str) -> Option<&str> {
        self.provider_specific
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.value.as_str())
    }

    pub fn key(&self) -> RecordKey {
        RecordKey {
            dns_name: self.dns_name.clone(),
            record_type: self.record_type,
            set_identifier: self.set_identifier.clone(),
        }
    }

    /// Sorts and de-duplicates targets and properties, and lowercases the name, so equal
    /// records compare equal whatever order they were built in.
    pub fn normalize(&mut self) {
        self.dns_name = self.dns_name.trim_end_matches('.').to_ascii_lowercase();
        self.targets.sort();
        self.targets.dedup();
        self.provider_specific.sort();
        self.provider_specific.dedup();
    }
}

/// Records as a reader of a zone hands them on: each normalized (values sorted and without
/// duplicates), in the engine's order ([`sort_endpoints`]).
pub fn normalized(endpoints: impl IntoIterator<Item = Endpoint>) -> Vec<Endpoint> {
    let mut endpoints: Vec<Endpoint> = endpoints
        .into_iter()
        .map(|mut e| {
            e.normalize();
            e
        })
        .collect();
    sort_endpoints(&mut endpoints);
    endpoints
}

/// Sorts endpoints the way every output of the engine is sorted: by name, then set identifier,
/// then type.
pub fn sort_endpoints(endpoints: &mut [Endpoint]) {
    endpoints.sort_by(|a, b| {
        (&a.dns_name, &a.set_identifier, a.record_type).cmp(&(
            &b.dns_name,
            &b.set_identifier,
            b.record_type,
        ))
    });
}

/// Whether `name` is `base` or a name below it.
pub fn is_at_or_below(name: &str, base: &str) -> bool {
    name == base
        || name
            .strip_suffix(base)
            .is_some_and(|prefix| prefix.ends_with('.'))
}

/// A TXT value as DNS character-strings of at most 255 bytes each, split on character
/// boundaries (a value longer than one string holds travels as several, joined on reading).
pub fn txt_strings(value: &str) -> Vec<String> {
    let mut strings = Vec::new();
    let mut rest = value;
    while !rest.is_empty() || strings.is_empty() {
        let mut end = rest.len().min(255);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (chunk, tail) = rest.split_at(end);
        strings.push(chunk.to_string());
        rest = tail;
    }
    strings
}

#[cfg(test)]
mod txt_tests {
    use super::txt_strings;

    #[test]
    fn long_txt_values_split_into_strings_of_at_most_255_bytes() {
        assert_eq!(txt_strings(""), [""]);
        assert_eq!(txt_strings("short"), ["short"]);
        let long = "é".repeat(200); // 400 bytes, two bytes per character
        let strings = txt_strings(&long);
        assert_eq!(strings.len(), 2);
        assert!(strings.iter().all(|s| s.len() <= 255));
        assert_eq!(strings.concat(), long);
    }
}
