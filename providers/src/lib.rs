//! Meridian's DNS providers: the [`Provider`] interface, batching within each API's limits
//! ([`batch`]), request budgets and backoff ([`budget`]), and the clients for Route53
//! ([`route53`]), Google Cloud DNS ([`google`]), Azure DNS with Traffic Manager ([`azure`]),
//! RFC2136 servers ([`rfc2136`]) and any provider behind the external-dns webhook protocol
//! ([`webhook`]).
//!
//! A provider applies the change sets the engine plans (`meridian_dns::changes`); it never
//! decides what to publish.

use std::future::Future;

use meridian_dns::changes::Changes;
use meridian_dns::model::Endpoint;

pub mod aws_identity;
pub mod azure;
pub mod batch;
pub mod budget;
pub mod google;
pub mod listing;
pub mod rfc2136;
pub mod route53;
mod routed_txt;
pub mod webhook;

/// A zone a provider serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneInfo {
    pub id: String,
    pub domain: String,
}

/// Why a provider refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    #[error("zone {0} not found")]
    ZoneNotFound(String),
    /// A change set the zone's strict rules refuse (the embedded zones, the in-memory fake).
    #[error(transparent)]
    Refused(#[from] meridian_dns::changes::Refusal),
    #[error("provider error: {0}")]
    Other(String),
    #[error("invalid records, nothing sent: {0}")]
    Invalid(String),
    #[error("the provider refused the change: {0}")]
    Rejected(String),
    #[error("some records could not be published: {}", .0.join("; "))]
    PartlyApplied(Vec<String>),
    #[error("still throttled after retries: {0}")]
    Throttled(String),
    /// The records changed since they were read (another writer got there first): nothing was
    /// applied; read again and plan again.
    #[error("the records changed since they were read: {0}")]
    Stale(String),
}

/// What Meridian needs of a DNS provider.
pub trait Provider {
    fn list_zones(&self) -> impl Future<Output = Result<Vec<ZoneInfo>, ProviderError>> + Send;
    fn records(
        &self,
        zone_id: &str,
    ) -> impl Future<Output = Result<Vec<Endpoint>, ProviderError>> + Send;
    fn apply(
        &self,
        zone_id: &str,
        changes: &Changes,
    ) -> impl Future<Output = Result<(), ProviderError>> + Send;
}

/// A TXT value as zone files and provider APIs write it: quoted, with `"` and `\\` escaped, and
/// split into strings of at most 255 bytes (the most one DNS character-string holds).
pub(crate) fn quote_txt(value: &str) -> String {
    meridian_dns::model::txt_strings(value)
        .iter()
        .map(|chunk| format!("\"{}\"", chunk.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The value [`quote_txt`] wrote: the quoted strings unescaped and joined. A value that is not
/// quoted is returned as it is.
pub(crate) fn unquote_txt(value: &str) -> String {
    let value = value.trim();
    if !value.starts_with('"') {
        return value.to_string();
    }
    let mut out = String::with_capacity(value.len());
    let mut inside = false;
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match (c, inside) {
            ('"', _) => inside = !inside,
            ('\\', true) => out.extend(chars.next()),
            (c, true) => out.push(c),
            (_, false) => {} // the blanks between strings
        }
    }
    out
}
