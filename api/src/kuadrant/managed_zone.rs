use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::SecretRef;
use crate::validation::{DNS_NAME_PATTERN, DURATION_PATTERN};

/// A DNS zone Meridian publishes into. With `dnsProviderSecretRef` the zone lives at a provider
/// (the Secret's type picks it: `kuadrant.io/aws`, `kuadrant.io/gcp`, `kuadrant.io/azure`,
/// `kuadrant.io/rfc2136`, `kuadrant.io/webhook`); without one, Meridian's embedded nameserver is authoritative for it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kuadrant.io",
    version = "v1alpha1",
    kind = "ManagedZone",
    doc = "A DNS zone Meridian publishes into: at a provider (dnsProviderSecretRef) or in its embedded nameserver.",
    namespaced,
    status = "ManagedZoneStatus",
    shortname = "mz",
    category = "meridian",
    printcolumn(name = "Domain", type_ = "string", json_path = ".spec.domainName"),
    printcolumn(name = "Provider", type_ = "string", json_path = ".status.provider"),
    printcolumn(name = "Records", type_ = "integer", json_path = ".status.recordCount"),
    printcolumn(name = "Serial", type_ = "integer", json_path = ".status.serial"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(IN_ZONE_NAME_SERVERS_HAVE_ADDRESSES).message("a name server inside the zone needs addresses (its glue), or no resolver can reach it"))]
#[x_kube(validation = Rule::new("!has(self.routingDelegate) || has(self.dnsProviderSecretRef)").message("spec.routingDelegate names the embedded zone that answers what a provider cannot hold: an embedded zone holds everything itself (remove spec.routingDelegate)"))]
#[x_kube(validation = Rule::new("!has(self.soaExpire) || !has(self.dnsProviderSecretRef)").message("spec.soaExpire sets an embedded zone's SOA: a zone at a provider has the provider's (remove spec.soaExpire or spec.dnsProviderSecretRef)"))]
#[x_kube(validation = Rule::new("!has(self.dnssec) || !self.dnssec.enabled || !has(self.dnsProviderSecretRef)").message("spec.dnssec signs embedded zones only: a zone at a provider is signed by the provider (remove spec.dnssec or spec.dnsProviderSecretRef)"))]
pub struct ManagedZoneSpec {
    /// The provider's zone ID; looked up by `domainName` when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 255))]
    pub id: Option<String>,

    /// The zone's domain, e.g. `example.com`.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_NAME_PATTERN))]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.domainName is immutable: create a new ManagedZone instead"))]
    pub domain_name: String,

    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub description: Option<String>,

    /// Secret (same namespace) with the provider's credentials; none means the embedded nameserver.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_provider_secret_ref: Option<ProviderSecretRef>,

    /// Not supported (multicluster-gateway-controller's delegation of this zone from a parent
    /// ManagedZone). Kept in the schema so that a manifest carrying it is refused with a reason
    /// rather than silently pruned: delegate the zone with NS records in the parent zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("false").message("spec.parentManagedZone is not supported: remove it and delegate this zone with NS records in the parent zone (the ManagedZone's status.nameServers lists them); see docs/mgc.md"))]
    pub parent_managed_zone: Option<SecretRef>,

    /// The name servers an embedded zone is delegated to (its NS records; the first is the SOA
    /// primary): the hub's and agents' DNS addresses as the Internet reaches them. A name
    /// inside the zone needs its addresses, which the zone then serves and the parent needs as
    /// glue. Empty: the hub's `--ns` defaults. Ignored for a zone at a provider, which names
    /// its own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 13))]
    pub name_servers: Vec<ZoneNameServer>,

    /// The name of an embedded ManagedZone in this namespace, for a domain below this one
    /// (e.g. `klb.example.com`), that answers what this zone's provider cannot hold: a policy
    /// whose GEO or weighted answers the provider lacks publishes its host here as a CNAME
    /// into the delegate and its answers in the delegate, which Meridian's nameservers serve;
    /// this zone gets the delegate's NS records and glue. Only for a zone at a provider; the
    /// delegate's DS, when it is signed, is added to this zone by hand (its status says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_NAME_PATTERN))]
    pub routing_delegate: Option<String>,

    /// How often the zone at a provider is read whole to find records of Meridian's that were
    /// changed or deleted out of band and put them back, as a duration (`10m`, `1h`); at least
    /// 10 s. Default 10 minutes. Between passes nothing is read while nothing changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('10s')").message("spec.verificationInterval must be at least 10s"))]
    pub verification_interval: Option<String>,

    /// How long a secondary of an embedded zone keeps answering after it last reached a
    /// primary (the SOA's expire), as a duration: at least a week (`168h`), at most a year;
    /// default 14 days. Longer keeps secondaries serving through a longer outage of every
    /// primary (fail static); shorter drops a zone sooner after it moved away. Ignored (refused
    /// by CEL) for a zone at a provider, whose SOA is the provider's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('168h') && duration(self) <= duration('8760h')").message("spec.soaExpire must be between 168h (a week) and 8760h (a year)"))]
    pub soa_expire: Option<String>,

    /// DNSSEC for an embedded zone: the nameservers sign every answer online with keys the
    /// leading hub keeps in a Secret in its own namespace. Turn it on, wait for
    /// `status.dnssec.ds`, then add that DS record to the parent zone; to turn it off, remove
    /// the DS first and wait its TTL (docs/nameserver.md). Refused (CEL) for a zone at a
    /// provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dnssec: Option<ZoneDnssec>,
}

/// How an embedded zone is signed.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ZoneDnssec {
    /// Sign the zone.
    #[serde(default)]
    pub enabled: bool,
    /// The signing algorithm: `ECDSAP256SHA256` (13, the default) or `ED25519` (15). Keys are
    /// made with it once; a different value later is reported in status and the keys in use
    /// stay (an algorithm rollover is not offered).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<DnssecAlgorithm>,
    /// Any new value starts one rollover of the zone-signing key: the new key is published,
    /// signs one step later, and the old one is withdrawn a step after that. The DS in the
    /// parent does not change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub zsk_rollover: Option<String>,
    /// The time between a rollover's steps, as a duration; it must cover the largest TTL the
    /// zone serves (its NS and DNSKEY records: 1 h), or a resolver can hold a signature whose
    /// key is gone. Default 2h.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('1s')").message("spec.dnssec.rolloverStep must be at least 1s"))]
    pub rollover_step: Option<String>,
}

/// A DNSSEC signing algorithm.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnssecAlgorithm {
    #[serde(rename = "ECDSAP256SHA256")]
    EcdsaP256Sha256,
    #[serde(rename = "ED25519")]
    Ed25519,
}

/// The default of `spec.dnssec.rolloverStep`: twice the NS and DNSKEY TTL.
pub const DEFAULT_ROLLOVER_STEP: std::time::Duration = std::time::Duration::from_secs(7200);

/// The Secret holding a zone's provider credentials.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq)]
pub struct ProviderSecretRef {
    /// Name of the Secret, in the ManagedZone's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Accepted for manifests of multicluster-gateway-controller 0.2, where the Secret could
    /// live in another namespace. Meridian reads a zone's Secret only from the ManagedZone's
    /// own namespace: any other value is refused in status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub namespace: Option<String>,
}

impl ManagedZone {
    /// The name of the zone's provider Secret (`None`: the embedded nameserver), or why it
    /// cannot be used.
    pub fn provider_secret_name(&self) -> Result<Option<&str>, String> {
        let Some(secret) = &self.spec.dns_provider_secret_ref else {
            return Ok(None);
        };
        let own = self.metadata.namespace.as_deref().unwrap_or_default();
        match secret.namespace.as_deref() {
            Some(other) if other != own => Err(format!(
                "spec.dnsProviderSecretRef.namespace {other}: a zone's Secret is read only from the ManagedZone's own namespace ({own}); copy the Secret there and remove the field"
            )),
            _ => Ok(Some(&secret.name)),
        }
    }
}

/// The default of `spec.verificationInterval`.
pub const DEFAULT_VERIFICATION_INTERVAL: std::time::Duration = std::time::Duration::from_secs(600);

/// One name server of an embedded zone.
#[derive(Serialize, Deserialize, KubeSchema, Clone, Debug, PartialEq, Eq)]
pub struct ZoneNameServer {
    /// Its name, e.g. `ns1.example.com`.
    #[schemars(length(min = 1, max = 253), regex(pattern = DNS_NAME_PATTERN))]
    pub name: String,
    /// Its IPv4 and IPv6 addresses; required for a name inside the zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 8), inner(length(max = 45)))]
    #[x_kube(validation = Rule::new("self.all(a, isIP(a))").message("nameServers[].addresses must be IP addresses"))]
    pub addresses: Vec<String>,
}

/// CEL: every name server whose name is at or below the zone's domain has an address (names
/// compared with one trailing dot, which either may have).
const IN_ZONE_NAME_SERVERS_HAVE_ADDRESSES: &str = "!has(self.nameServers) || self.nameServers.all(ns, \
    !('.' + ns.name + (ns.name.endsWith('.') ? '' : '.')).endsWith('.' + self.domainName + (self.domainName.endsWith('.') ? '' : '.')) \
    || (has(ns.addresses) && size(ns.addresses) > 0))";

/// Observed state of a ManagedZone.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManagedZoneStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The provider serving the zone: `route53`, `google`, `azure`, `rfc2136`, `webhook` or
    /// `embedded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The zone's ID at the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Name servers to delegate the domain to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub name_servers: Vec<String>,
    /// For an embedded zone, what the parent zone needs, as zone-file lines: its NS records
    /// and the glue (A/AAAA) of name servers inside the zone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub delegation: Vec<String>,
    /// Records in the zone, as last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_count: Option<i64>,
    /// The zone's signing, when `spec.dnssec` is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dnssec: Option<ZoneDnssecStatus>,
    /// For an embedded zone, the SOA serial the leading hub replica serves. The other replicas
    /// and the agents serve the same serial once their records match `contentDigest`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<u32>,
    /// A digest (SHA-256) of the records and settings served under `serial`, so a replica
    /// adopts the serial only for the same content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_digest: Option<String>,
}

/// How a signed zone is signed, and what its parent needs.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ZoneDnssecStatus {
    /// The DS record to put in the parent zone, as a zone-file line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ds: Option<String>,
    /// The algorithm of the keys in use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// The key tag of the key-signing key (the DS's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ksk_tag: Option<u16>,
    /// The key tag of the zone-signing key that signs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zsk_tag: Option<u16>,
    /// Every published key's tag (the DNSKEY set).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub published_tags: Vec<u16>,
    /// Where a ZSK rollover is: `Stable`, `Prepublished` (the new key is published, the old
    /// one signs) or `Switched` (the new key signs, the old one is still published).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollover: Option<String>,
    /// When the rollover's next step is due (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_step: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_provider_secret_is_read_only_from_the_zones_namespace() {
        let zone = |secret: serde_json::Value| -> ManagedZone {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
                "metadata": { "name": "z", "namespace": "team" },
                "spec": { "domainName": "example.com", "dnsProviderSecretRef": secret },
            }))
            .unwrap()
        };
        assert_eq!(
            zone(serde_json::json!({ "name": "aws" })).provider_secret_name(),
            Ok(Some("aws"))
        );
        assert_eq!(
            zone(serde_json::json!({ "name": "aws", "namespace": "team" })).provider_secret_name(),
            Ok(Some("aws"))
        );
        let refused = zone(serde_json::json!({ "name": "aws", "namespace": "other" }))
            .provider_secret_name()
            .unwrap_err();
        assert!(refused.contains("copy the Secret there"), "{refused}");
        assert_eq!(
            zone(serde_json::Value::Null).provider_secret_name(),
            Ok(None)
        );
    }
}
