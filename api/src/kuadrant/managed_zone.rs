use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::SecretRef;
use crate::validation::DNS_NAME_PATTERN;

/// A DNS zone Meridian publishes into. With `dnsProviderSecretRef` the zone lives at a provider
/// (the Secret's type picks it: `kuadrant.io/aws`, `kuadrant.io/gcp`, `kuadrant.io/rfc2136`);
/// without one, Meridian's embedded nameserver is authoritative for it.
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
    pub dns_provider_secret_ref: Option<SecretRef>,
}

/// Observed state of a ManagedZone.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ManagedZoneStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The provider serving the zone: `route53`, `google`, `rfc2136` or `embedded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// The zone's ID at the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Name servers to delegate the domain to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub name_servers: Vec<String>,
    /// Records in the zone, as last read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub record_count: Option<i64>,
}
