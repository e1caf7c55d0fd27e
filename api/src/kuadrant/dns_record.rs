use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::HealthCheck;
use crate::validation::DNS_NAME_OR_WILDCARD_PATTERN;

/// The records of one hostname (a listener's host) in one ManagedZone, written by the hub's
/// DNSPolicy controller (or by the agent in distributed mode) and published by the DNSRecord
/// controller with external-dns-compatible ownership.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kuadrant.io",
    version = "v1alpha1",
    kind = "DNSRecord",
    doc = "The records of one hostname in one ManagedZone, published with external-dns-compatible ownership.",
    namespaced,
    status = "DNSRecordStatus",
    shortname = "dnsrec",
    category = "meridian",
    printcolumn(name = "Root Host", type_ = "string", json_path = ".spec.rootHost"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Healthy",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Healthy\")].status"
    ),
    printcolumn(name = "Zone", type_ = "string", json_path = ".spec.managedZone.name"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.rootHost) || self.endpoints.all(e, e.dnsName == self.rootHost || e.dnsName.endsWith('.' + (self.rootHost.startsWith('*.') ? self.rootHost.substring(2) : self.rootHost)))").message("every endpoints[].dnsName must be spec.rootHost or a name under it"),
    validation = Rule::new("has(oldSelf.ownerID) == has(self.ownerID) && (!has(self.ownerID) || self.ownerID == oldSelf.ownerID)").message("spec.ownerID is immutable")
)]
pub struct DNSRecordSpec {
    /// The hostname this record set serves (`*.x` allowed); every endpoint is it or under it.
    /// Optional for DNSRecords written for multicluster-gateway-controller, which had no such
    /// field: then it is the endpoint name every other endpoint is at or below, and a record
    /// without one is refused in status ([`DNSRecordSpec::effective_root_host`]).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_NAME_OR_WILDCARD_PATTERN))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.rootHost is immutable"))]
    pub root_host: String,

    /// The ManagedZone (same namespace) the records are published in.
    pub managed_zone: ManagedZoneReference,

    /// The records to publish.
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub endpoints: Vec<Endpoint>,

    /// Owner of these records in the zone (external-dns registry); set once, never changed.
    #[serde(rename = "ownerID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 255))]
    pub owner_id: Option<String>,

    /// Health checks of the leaf endpoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_check: Option<HealthCheck>,

    /// With priority tiers (endpoints carrying the `priority` property): how long a recovered
    /// better tier must stay healthy before it takes traffic back. Default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 3600))]
    pub failback_hold_down_seconds: Option<u32>,
}

impl DNSRecordSpec {
    /// `spec.rootHost`, or when it is empty the endpoint name every other endpoint name is at
    /// or below (lowercased); `None` when there is no such name.
    pub fn effective_root_host(&self) -> Option<String> {
        if !self.root_host.is_empty() {
            return Some(self.root_host.clone());
        }
        let names: Vec<String> = self
            .endpoints
            .iter()
            .map(|e| e.dns_name.trim_end_matches('.').to_ascii_lowercase())
            .collect();
        names
            .iter()
            .filter(|root| {
                names.iter().all(|name| {
                    name == *root
                        || name
                            .strip_suffix(root.as_str())
                            .is_some_and(|head| head.ends_with('.'))
                })
            })
            .min_by_key(|root| root.len())
            .cloned()
    }
}

/// Names a ManagedZone in the same namespace.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct ManagedZoneReference {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// One DNS record (external-dns endpoint shape).
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// The record's name.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_NAME_OR_WILDCARD_PATTERN))]
    pub dns_name: String,
    /// The record's type.
    pub record_type: RecordType,
    /// The record's values (addresses, a CNAME target, TXT strings).
    #[schemars(length(min = 1, max = 1000))]
    pub targets: Vec<String>,
    /// TTL in seconds; 0 means the provider's default.
    #[serde(rename = "recordTTL", default)]
    #[schemars(range(min = 0, max = 2147483647))]
    pub record_ttl: i64,
    /// Distinguishes records of one name and type in a weighted or GEO set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub set_identifier: Option<String>,
    /// Routing properties: `weight` and `geo-code`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub provider_specific: Vec<ProviderSpecificProperty>,
    /// Free-form labels (external-dns compatibility).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
}

/// A provider-specific routing property.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct ProviderSpecificProperty {
    pub name: String,
    pub value: String,
}

/// Record types Meridian publishes or reads.
#[derive(
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
)]
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

/// Observed state of a DNSRecord.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DNSRecordStatus {
    /// `Ready` (published) and `Healthy` (health checks pass).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// What is published now (after health pruning).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<Endpoint>,
    /// Every owner that publishes into this record's names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domain_owners: Vec<String>,
    /// The owner ID `endpoints` are published under: `spec.ownerID`, else (on a hub) the hub's
    /// owner ID with a hash of the record's namespace and name. A pass that finds it different
    /// adopts what the earlier owner published.
    #[serde(rename = "ownerID", default, skip_serializing_if = "Option::is_none")]
    pub owner_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(root_host: &str, names: &[&str]) -> DNSRecordSpec {
        serde_json::from_value(serde_json::json!({
            "rootHost": root_host,
            "managedZone": { "name": "zone" },
            "endpoints": names.iter().map(|n| serde_json::json!({
                "dnsName": n, "recordType": "A", "targets": ["192.0.2.1"],
            })).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn a_record_without_a_root_host_takes_the_name_that_holds_every_other() {
        // (rootHost, endpoint names, effective root host)
        let table: [(&str, &[&str], Option<&str>); 6] = [
            (
                "api.example.com",
                &["x.api.example.com"],
                Some("api.example.com"),
            ),
            ("", &["echo.example.com"], Some("echo.example.com")),
            (
                "",
                &["na.geo.example.com", "geo.example.com", "geo.example.com"],
                Some("geo.example.com"),
            ),
            (
                "",
                &["Geo.Example.com.", "na.geo.example.com"],
                Some("geo.example.com"),
            ),
            ("", &["a.example.com", "b.example.com"], None),
            ("", &["xgeo.example.com", "geo.example.com"], None),
        ];
        for (root_host, names, expected) in table {
            assert_eq!(
                spec(root_host, names).effective_root_host().as_deref(),
                expected,
                "{root_host:?} {names:?}"
            );
        }
    }
}
