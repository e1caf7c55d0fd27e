use kube::KubeSchema;
use serde::{Deserialize, Serialize};

use super::SecretRef;
use crate::validation::DURATION_PATTERN;

/// How gateways behind a hostname are probed; present means probe every leaf of the record tree.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    /// HTTP path to request.
    #[serde(default = "default_endpoint")]
    // Visible ASCII only: the path goes into the probe's request line as written, so a space,
    // CR or LF would let a tenant write the rest of the request (and more requests) itself.
    #[x_kube(validation = Rule::new("self.matches('^/[!-~]*$')").message("healthCheck.endpoint must be a path starting with '/', of visible ASCII characters only (no spaces, CR, LF or other control characters)"))]
    #[schemars(length(max = 2048))]
    pub endpoint: String,

    /// Port to connect to (1–65535).
    #[serde(default = "default_port")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: i32,

    /// `HTTP` or `HTTPS` (the seeds' `https` is written `HTTPS`).
    #[serde(default)]
    pub protocol: HealthProtocol,

    /// Consecutive failures before an endpoint counts as unhealthy (≥ 1).
    #[serde(default = "default_failure_threshold")]
    #[schemars(range(min = 1))]
    pub failure_threshold: i32,

    /// How often each vantage point probes, as a duration (`30s`, `1m`); at least 5 s.
    #[serde(default = "default_interval")]
    #[schemars(regex(pattern = DURATION_PATTERN))]
    #[x_kube(validation = Rule::new("duration(self) >= duration('5s')").message("healthCheck.interval must be at least 5s"))]
    pub interval: String,

    /// HTTP status codes that count as healthy (100–599).
    #[serde(default = "default_expected_responses")]
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = Rule::new("self.all(code, code >= 100 && code <= 599)").message("healthCheck.expectedResponses must be HTTP status codes between 100 and 599"))]
    pub expected_responses: Vec<i32>,

    /// Secret in the policy's namespace whose keys and values are sent as extra request headers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub additional_headers_ref: Option<SecretRef>,

    /// Accept invalid (for example self-signed) certificates.
    #[serde(default)]
    pub allow_insecure_certificates: bool,
}

/// The protocol a health probe speaks.
#[derive(
    Serialize, Deserialize, schemars::JsonSchema, Clone, Copy, Debug, Default, PartialEq, Eq, Hash,
)]
pub enum HealthProtocol {
    #[serde(rename = "HTTP")]
    Http,
    #[default]
    #[serde(rename = "HTTPS")]
    Https,
}

impl HealthProtocol {
    pub fn scheme(self) -> &'static str {
        match self {
            HealthProtocol::Http => "http",
            HealthProtocol::Https => "https",
        }
    }
}

pub(crate) fn default_endpoint() -> String {
    "/".to_string()
}
pub(crate) fn default_port() -> i32 {
    443
}
pub(crate) fn default_failure_threshold() -> i32 {
    3
}
pub(crate) fn default_interval() -> String {
    "30s".to_string()
}
pub(crate) fn default_expected_responses() -> Vec<i32> {
    vec![200, 201]
}
