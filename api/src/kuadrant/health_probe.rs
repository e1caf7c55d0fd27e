use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::health_check::{
    default_expected_responses, default_failure_threshold, default_interval,
};
use super::{HealthProtocol, SecretRef};
use crate::validation::DURATION_PATTERN;

/// One health check of one endpoint (a leaf of a record tree), created by the hub for each leaf
/// and probed from every spoke (multi-vantage). Its status aggregates the spokes' results.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kuadrant.io",
    version = "v1alpha1",
    kind = "DNSHealthCheckProbe",
    doc = "A health check of one endpoint, probed from every spoke; status aggregates their results.",
    namespaced,
    status = "DNSHealthCheckProbeStatus",
    shortname = "dnsprobe",
    category = "meridian",
    printcolumn(name = "Host", type_ = "string", json_path = ".spec.host"),
    printcolumn(name = "Address", type_ = "string", json_path = ".spec.address"),
    printcolumn(name = "Healthy", type_ = "boolean", json_path = ".status.healthy"),
    printcolumn(
        name = "Failures",
        type_ = "integer",
        json_path = ".status.consecutiveFailures"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct DNSHealthCheckProbeSpec {
    /// Port to connect to.
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,
    /// Value of the Host header (and TLS server name).
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9._-]+$')").message("spec.host must be a host name (letters, digits, '.', '-', '_')"))]
    pub host: String,
    /// Address to connect to: an IP address or the gateway's hostname.
    #[schemars(length(min = 1, max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9._:-]+$')").message("spec.address must be an IP address or a host name"))]
    pub address: String,
    /// HTTP path to request (visible ASCII: it goes into the request line as written).
    #[serde(default = "super::health_check::default_endpoint")]
    #[x_kube(validation = Rule::new("self.matches('^/[!-~]*$')").message("spec.path must start with '/' and hold visible ASCII characters only (no spaces, CR, LF or other control characters)"))]
    #[schemars(length(max = 2048))]
    pub path: String,
    /// `HTTP` or `HTTPS`.
    #[serde(default)]
    pub protocol: HealthProtocol,
    /// How often to probe; at least 5 s.
    #[serde(default = "default_interval")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('5s')").message("spec.interval must be at least 5s"))]
    pub interval: String,
    /// Secret whose keys and values are sent as extra request headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_headers_ref: Option<SecretRef>,
    /// HTTP status codes that count as healthy.
    #[serde(default = "default_expected_responses")]
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = Rule::new("self.all(code, code >= 100 && code <= 599)").message("spec.expectedResponses must be HTTP status codes between 100 and 599"))]
    pub expected_responses: Vec<i32>,
    /// Accept invalid (e.g. self-signed) certificates.
    #[serde(default)]
    pub allow_insecure_certificate: bool,
    /// Consecutive failures before the endpoint counts as unhealthy.
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = 1))]
    pub failure_threshold: i32,
}

/// Aggregated probe state, and the per-cluster results behind it.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DNSHealthCheckProbeStatus {
    /// The endpoint's verdict; absent until a result arrives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub healthy: Option<bool>,
    /// Consecutive failures behind the verdict.
    #[serde(default)]
    pub consecutive_failures: i32,
    /// Why the last probe failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When the newest result was taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The result from each vantage point (spoke cluster).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterProbeResult>,
}

/// One vantage point's view of a probe.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClusterProbeResult {
    /// The spoke cluster that probed.
    pub cluster: String,
    pub healthy: bool,
    #[serde(default)]
    pub consecutive_failures: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked_at: Option<Time>,
}
