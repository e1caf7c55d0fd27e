//! The external-dns webhook protocol: any of the providers that implement it (out-of-tree
//! webhooks, or any in-tree external-dns provider behind `external-dns --webhook-server`) as a
//! zone's provider.
//!
//! The protocol (external-dns `api/webhook.yaml`, version 1) carries plain records: `GET /`
//! negotiates the media type and says which domains the webhook serves, `GET /records` lists
//! them unpaged, `POST /adjustendpoints` normalises records as the provider would store them,
//! and `POST /records` applies creates, updates (old and new) and deletes, answering 204. It has
//! no ownership of its own: Meridian's TXT registry travels as ordinary TXT records, so other
//! owners' records are left alone as at every provider. It has no weights and no GEO either:
//! a loadbalanced tree is flattened first when that loses nothing (see `plain_dns_records` and
//! `meridian_dns::fidelity`) and a routed record refused.
//!
//! Only a 5xx answer (and a request that never got one) is retried here, with backoff and
//! jitter, as external-dns's own client does; a 3xx or 4xx is the webhook refusing and is
//! reported as it said it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

/// A webhook's URL.
pub use reqwest::Url;
use reqwest::{Method, StatusCode};
use serde::{Deserialize, Serialize};

use super::batch::{Action, Change, Limits, group_by_name, pack, send_batches};
use super::budget::Backoff;
use super::{Provider, ProviderError, ZoneInfo, quote_txt, unquote_txt};
use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, RecordType, is_at_or_below, normalized};

/// The media type of every request and answer body of the protocol's version 1.
pub const MEDIA_TYPE: &str = "application/external.dns.webhook+json;version=1";

/// The largest body sent or read: what external-dns's webhook server accepts since its PR
/// #6484. A larger answer (a hostile or broken webhook) is refused, not buffered.
pub const MAX_BODY_BYTES: usize = 32 * 1024 * 1024;

/// How long one request may take, answer included.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The largest answer to `GET /` (a domain filter) or `POST /records` (204, or a refusal's
/// reason): far below the protocol's limit, which only record lists need.
const SMALL_ANSWER_BYTES: usize = 1024 * 1024;

/// Changes per `POST /records`. Far within the body limit (a change is a few hundred bytes), and
/// small enough that a retried 5xx resends little; external-dns's own providers split further
/// as their APIs need.
const WEBHOOK_LIMITS: Limits = Limits {
    max_changes: 1000,
    max_values: 4000,
    max_value_chars: 4_000_000,
    updates_replace: false,
};

/// How a webhook zone is reached: what a `kuadrant.io/webhook` Secret gives, and the zone.
#[derive(Clone)]
pub struct WebhookConfig {
    /// The webhook's base URL; the protocol's paths are below it.
    pub url: Url,
    /// The ManagedZone's domain; records outside it are neither read nor written.
    pub zone: String,
    /// Headers sent with every request (an API token, say): values never logged.
    pub headers: Vec<(String, String)>,
    /// A CA (PEM) trusted for an `https` URL besides the system's.
    pub extra_ca_pem: Option<String>,
    /// The addresses the URL's host was resolved to and checked at (the caller's job): every
    /// request goes to these, so a name that later resolves elsewhere cannot move the hub.
    pub pinned: Vec<SocketAddr>,
}

impl std::fmt::Debug for WebhookConfig {
    // Header values are credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Nor the URL's query, which may carry a token.
        let mut url = self.url.clone();
        url.set_query(None);
        let _ = url.set_password(None);
        f.debug_struct("WebhookConfig")
            .field("url", &url.as_str())
            .field("zone", &self.zone)
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(name, _)| name)
                    .collect::<Vec<_>>(),
            )
            .field("pinned", &self.pinned)
            .finish_non_exhaustive()
    }
}

/// The domains a webhook says it serves (`GET /`): external-dns's domain filter.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainFilter {
    #[serde(default)]
    pub include: Vec<String>,
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub regex_include: String,
    #[serde(default)]
    pub regex_exclude: String,
}

impl DomainFilter {
    /// Why the webhook cannot hold the zone `zone`, if the filter says it cannot: the zone is
    /// neither at or below a domain it includes, or it excludes the zone. A filter by regular
    /// expression is the webhook's to apply (Go's syntax, not checked here).
    pub fn refuses_zone(&self, zone: &str) -> Option<String> {
        let zone = zone.trim_end_matches('.').to_ascii_lowercase();
        let covers = |domain: &String| {
            let domain = domain.trim_start_matches('.').trim_end_matches('.');
            is_at_or_below(&zone, &domain.to_ascii_lowercase())
        };
        if !self.include.is_empty() && !self.include.iter().any(covers) {
            return Some(format!(
                "the webhook serves {} only, not the zone {zone}",
                self.include.join(", ")
            ));
        }
        self.exclude
            .iter()
            .find(|domain| covers(domain))
            .map(|domain| format!("the webhook excludes {domain}, and so the zone {zone}"))
    }
}

/// A record as the protocol carries it (external-dns's `endpoint.Endpoint`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireEndpoint {
    dns_name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    targets: Vec<String>,
    #[serde(default)]
    record_type: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    set_identifier: String,
    #[serde(rename = "recordTTL", default, skip_serializing_if = "is_zero")]
    record_ttl: i64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<String, String>,
}

fn is_zero(ttl: &i64) -> bool {
    *ttl == 0
}

/// external-dns's `plan.Changes`, as `POST /records` takes it.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireChanges {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    create: Vec<WireEndpoint>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    update_old: Vec<WireEndpoint>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    update_new: Vec<WireEndpoint>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    delete: Vec<WireEndpoint>,
}

/// A record as the protocol carries it: TXT values quoted as zone files write them, which is
/// what external-dns's providers store (PowerDNS takes them as they are, RFC2136 parses them);
/// NS targets fully qualified (external-dns's PowerDNS provider qualifies CNAME targets only,
/// and PowerDNS refuses a relative name server).
fn to_wire(record: &Endpoint) -> WireEndpoint {
    let targets = match record.record_type {
        RecordType::Txt => record.targets.iter().map(|t| quote_txt(t)).collect(),
        RecordType::Ns => record
            .targets
            .iter()
            .map(|t| format!("{}.", t.trim_end_matches('.')))
            .collect(),
        _ => record.targets.clone(),
    };
    WireEndpoint {
        dns_name: record.dns_name.clone(),
        targets,
        record_type: record.record_type.to_string(),
        set_identifier: record.set_identifier.clone().unwrap_or_default(),
        record_ttl: i64::from(record.record_ttl),
        labels: BTreeMap::new(),
    }
}

/// The records a webhook answered with, as the engine reads a zone: names lower case without
/// the final dot, TXT values unquoted, hostname targets without the final dot, one record per
/// name, type and set identifier. Record types Meridian does not write are left out, as are
/// names outside `zone` (a webhook may serve several zones) and the routing properties
/// external-dns providers add (Meridian writes none there).
fn from_wire(zone: &str, records: Vec<WireEndpoint>) -> Vec<Endpoint> {
    let mut grouped: BTreeMap<(String, RecordType, Option<String>), Endpoint> = BTreeMap::new();
    for record in records {
        let Some(record_type) = RecordType::parse(&record.record_type) else {
            continue;
        };
        let name = record.dns_name.trim_end_matches('.').to_ascii_lowercase();
        if !is_at_or_below(&name, zone) {
            continue;
        }
        let targets = record.targets.into_iter().map(|target| match record_type {
            RecordType::Txt => unquote_txt(&target),
            RecordType::Cname | RecordType::Ns => target.trim_end_matches('.').to_ascii_lowercase(),
            _ => target,
        });
        let set = Some(record.set_identifier).filter(|s| !s.is_empty());
        let ttl = u32::try_from(record.record_ttl.max(0)).unwrap_or(u32::MAX);
        grouped
            .entry((name.clone(), record_type, set.clone()))
            .or_insert_with(|| {
                let endpoint = Endpoint::new(name, record_type, [], ttl);
                match set {
                    Some(set) => endpoint.with_set_identifier(set),
                    None => endpoint,
                }
            })
            .targets
            .extend(targets);
    }
    normalized(grouped.into_values())
}

/// One zone at one webhook.
pub struct WebhookProvider {
    config: WebhookConfig,
    client: reqwest::Client,
    backoff: Backoff,
    /// The webhook's domain filter, once negotiated.
    negotiated: tokio::sync::Mutex<Option<DomainFilter>>,
    /// `adjustendpoints` answers by what was asked: the protocol makes it a function of the
    /// records, and asking once per record set keeps steady state free of calls. With the
    /// bytes they hold, bounded ([`ADJUSTED_KEPT_BYTES`]).
    adjusted: Mutex<AdjustedKept>,
    /// HTTP requests sent, by method and path, retries included.
    requests: Mutex<BTreeMap<String, u64>>,
}

impl std::fmt::Debug for WebhookProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookProvider")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// How many `adjustendpoints` answers are kept, and how many bytes of names and values they
/// may hold; past either they are all forgotten (the next pass of each record asks again). A
/// webhook's answers are the webhook's to size: the bound keeps a hostile one from filling the
/// hub's memory through them.
const ADJUSTED_KEPT: usize = 20_000;
const ADJUSTED_KEPT_BYTES: usize = 64 * 1024 * 1024;

/// `adjustendpoints` answers by the records asked about, and the bytes they hold.
type AdjustedKept = (BTreeMap<Vec<Endpoint>, Vec<Endpoint>>, usize);

/// Bytes of names and values in `records`, roughly what keeping them costs.
fn held_bytes(records: &[Endpoint]) -> usize {
    records
        .iter()
        .map(|r| r.dns_name.len() + r.targets.iter().map(String::len).sum::<usize>() + 64)
        .sum()
}

impl WebhookProvider {
    pub fn new(config: WebhookConfig) -> Result<Self, ProviderError> {
        Self::with_backoff(
            config,
            Backoff {
                base: Duration::from_millis(250),
                cap: Duration::from_secs(5),
                max_attempts: 4,
            },
        )
    }

    /// With the backoff between attempts at a request that got a 5xx or no answer.
    pub fn with_backoff(config: WebhookConfig, backoff: Backoff) -> Result<Self, ProviderError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let invalid = |e: &dyn std::fmt::Display| ProviderError::Invalid(e.to_string());
        match config.url.scheme() {
            "http" | "https" => {}
            other => {
                return Err(invalid(&format!(
                    "URL scheme {other:?} is not http or https"
                )));
            }
        }
        let mut builder = reqwest::Client::builder()
            // A webhook answers; it does not send the hub elsewhere (the metadata service, say).
            .redirect(reqwest::redirect::Policy::none())
            // The address checked is the address reached: no proxy from the environment.
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .timeout(REQUEST_TIMEOUT);
        if let (Some(host), false) = (config.url.host_str(), config.pinned.is_empty()) {
            builder = builder.resolve_to_addrs(host, &config.pinned);
        }
        if let Some(pem) = &config.extra_ca_pem {
            let ca = reqwest::Certificate::from_pem(pem.as_bytes()).map_err(|e| invalid(&e))?;
            builder = builder.tls_certs_merge([ca]);
        }
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &config.headers {
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                // Not quoted back: a malformed name may be part of a token.
                .map_err(|_| invalid(&"a header's name is not a header name"))?;
            let mut value = reqwest::header::HeaderValue::from_str(value)
                .map_err(|_| invalid(&format!("header {name}'s value is not a header value")))?;
            value.set_sensitive(true);
            headers.insert(header, value);
        }
        let client = builder
            .default_headers(headers)
            .build()
            .map_err(|e| invalid(&e))?;
        Ok(WebhookProvider {
            config,
            client,
            backoff,
            negotiated: tokio::sync::Mutex::new(None),
            adjusted: Mutex::new((BTreeMap::new(), 0)),
            requests: Mutex::new(BTreeMap::new()),
        })
    }

    /// HTTP requests sent so far, retries included.
    pub fn requests(&self) -> u64 {
        self.requests_by_call().values().sum()
    }

    /// HTTP requests sent so far by method and path (`POST /records`), retries included.
    pub fn requests_by_call(&self) -> BTreeMap<String, u64> {
        self.requests.lock().expect("requests lock").clone()
    }

    fn zone(&self) -> String {
        self.config.zone.trim_end_matches('.').to_ascii_lowercase()
    }

    fn endpoint(&self, path: &str) -> Result<Url, ProviderError> {
        let mut url = self.config.url.clone();
        let base = url.path().trim_end_matches('/').to_string();
        url.set_path(&format!("{base}{path}"));
        Ok(url)
    }

    /// One request, retried with backoff while the webhook answers 5xx or not at all. Returns
    /// the answer's status, `Content-Type` and body (at most `limit` bytes).
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Vec<u8>>,
        limit: usize,
    ) -> Result<(StatusCode, String, Vec<u8>), ProviderError> {
        let url = self.endpoint(path)?;
        if body.as_ref().is_some_and(|b| b.len() > MAX_BODY_BYTES) {
            return Err(ProviderError::Invalid(format!(
                "{method} {path}: the request is over the protocol's {} MiB",
                MAX_BODY_BYTES >> 20
            )));
        }
        let mut attempt = 0;
        loop {
            let mut request = self
                .client
                .request(method.clone(), url.clone())
                .header(reqwest::header::ACCEPT, MEDIA_TYPE);
            if let Some(body) = &body {
                request = request
                    .header(reqwest::header::CONTENT_TYPE, MEDIA_TYPE)
                    .body(body.clone());
            }
            *self
                .requests
                .lock()
                .expect("requests lock")
                .entry(format!("{method} {path}"))
                .or_default() += 1;
            let failure = match request.send().await {
                Ok(response) if response.status().is_server_error() => {
                    format!("answered {}", response.status())
                }
                Ok(response) => {
                    let status = response.status();
                    let content_type = response
                        .headers()
                        .get(reqwest::header::CONTENT_TYPE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_string();
                    let body = read_limited(response, method.as_str(), path, limit).await?;
                    if status.is_success() {
                        return Ok((status, content_type, body));
                    }
                    return Err(ProviderError::Rejected(format!(
                        "{method} {path} answered {status}{}",
                        excerpt(&body)
                    )));
                }
                // Without the URL: it is the tenant's, and may carry a token in its query.
                Err(error) => format!("failed: {}", with_causes(error.without_url())),
            };
            attempt += 1;
            if attempt >= self.backoff.max_attempts {
                return Err(ProviderError::Other(format!(
                    "{method} {path} {failure} ({attempt} attempts)"
                )));
            }
            let delay = self.backoff.delay(attempt, &mut rand::rng());
            tokio::time::sleep(delay).await;
        }
    }

    /// `GET /`: the media type agreed and the webhook's domain filter, once; checks the zone is
    /// the webhook's to serve.
    pub async fn negotiate(&self) -> Result<DomainFilter, ProviderError> {
        let mut negotiated = self.negotiated.lock().await;
        if let Some(filter) = negotiated.as_ref() {
            return Ok(filter.clone());
        }
        let (_, content_type, body) = self
            .call(Method::GET, "/", None, SMALL_ANSWER_BYTES)
            .await?;
        if !same_media_type(&content_type) {
            return Err(ProviderError::Rejected(format!(
                "the webhook answers {content_type:?}, not {MEDIA_TYPE}: it does not speak version 1 of the protocol"
            )));
        }
        let filter: DomainFilter = serde_json::from_slice(&body).map_err(|e| {
            ProviderError::Other(format!("the webhook's domain filter is not JSON: {e}"))
        })?;
        if let Some(refusal) = filter.refuses_zone(&self.zone()) {
            return Err(ProviderError::ZoneNotFound(refusal));
        }
        *negotiated = Some(filter.clone());
        Ok(filter)
    }

    /// `POST /adjustendpoints`: `records` as the webhook's provider would store them, so that
    /// what is planned compares with what is read back. Asked once per set of records.
    pub async fn adjust(&self, records: &[Endpoint]) -> Result<Vec<Endpoint>, ProviderError> {
        if records.is_empty() {
            return Ok(Vec::new());
        }
        if let Some(known) = self.adjusted.lock().expect("adjusted lock").0.get(records) {
            return Ok(known.clone());
        }
        self.negotiate().await?;
        let wire: Vec<WireEndpoint> = records.iter().map(to_wire).collect();
        let body = serde_json::to_vec(&wire).map_err(|e| ProviderError::Other(e.to_string()))?;
        // An adjusted record set is about the size of the one asked about.
        let limit = (SMALL_ANSWER_BYTES + 4 * body.len()).min(MAX_BODY_BYTES);
        let (_, _, answer) = self
            .call(Method::POST, "/adjustendpoints", Some(body), limit)
            .await?;
        let answer: Vec<WireEndpoint> = serde_json::from_slice(&answer).map_err(|e| {
            ProviderError::Other(format!("the webhook's adjusted records are not JSON: {e}"))
        })?;
        let adjusted = from_wire(&self.zone(), answer);
        let bytes = held_bytes(records) + held_bytes(&adjusted);
        let mut guard = self.adjusted.lock().expect("adjusted lock");
        let (known, held) = &mut *guard;
        if known.len() >= ADJUSTED_KEPT || *held + bytes > ADJUSTED_KEPT_BYTES {
            known.clear();
            *held = 0;
        }
        if bytes <= ADJUSTED_KEPT_BYTES / 16 {
            known.insert(records.to_vec(), adjusted.clone());
            *held += bytes;
        }
        Ok(adjusted)
    }

    async fn send(&self, batch: &[Change]) -> Result<(), ProviderError> {
        let mut changes = WireChanges::default();
        for change in batch {
            match (change.action, &change.replaces) {
                (Action::Delete, _) => changes.delete.push(to_wire(&change.record)),
                (Action::Upsert, Some(old)) => {
                    changes.update_old.push(to_wire(old));
                    changes.update_new.push(to_wire(&change.record));
                }
                // An upsert without the record it replaces does not come from the plan; as a
                // create, the webhook's provider replaces what is there.
                (Action::Upsert | Action::Create, _) => {
                    changes.create.push(to_wire(&change.record))
                }
            }
        }
        let body = serde_json::to_vec(&changes).map_err(|e| ProviderError::Other(e.to_string()))?;
        self.call(Method::POST, "/records", Some(body), SMALL_ANSWER_BYTES)
            .await
            .map(drop)
    }
}

/// Whether a `Content-Type` is the protocol's media type (parameters in any order and case,
/// with or without blanks).
fn same_media_type(content_type: &str) -> bool {
    let parts = |value: &str| {
        let mut parts: Vec<String> = value
            .split(';')
            .map(|part| part.trim().to_ascii_lowercase().replace(' ', ""))
            .filter(|part| !part.is_empty())
            .collect();
        if let Some(parameters) = parts.get_mut(1..) {
            parameters.sort();
        }
        parts
    };
    !content_type.trim().is_empty() && parts(content_type) == parts(MEDIA_TYPE)
}

/// A body, read up to `limit` bytes: more is refused as it arrives, never buffered.
async fn read_limited(
    mut response: reqwest::Response,
    method: &str,
    path: &str,
    limit: usize,
) -> Result<Vec<u8>, ProviderError> {
    let too_large = || {
        ProviderError::Other(if limit == MAX_BODY_BYTES {
            format!(
                "{method} {path}: the answer is over the protocol's {} MiB",
                MAX_BODY_BYTES >> 20
            )
        } else {
            format!("{method} {path}: the answer is over {limit} bytes, far more than asked for")
        })
    };
    if response
        .content_length()
        .is_some_and(|length| length > limit as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        ProviderError::Other(format!(
            "{method} {path}: reading the answer: {}",
            with_causes(e.without_url())
        ))
    })? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error and what caused it ("error sending request: … Connection refused"), which reqwest
/// keeps apart.
fn with_causes(error: reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut cause = std::error::Error::source(&error);
    while let Some(inner) = cause {
        text = format!("{text}: {inner}");
        cause = inner.source();
    }
    text
}

/// The start of what a webhook said when it refused, for status: printable, one line, short.
fn excerpt(body: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(200)
        .collect();
    let text = text.trim();
    if text.is_empty() {
        String::new()
    } else {
        format!(": {text}")
    }
}

impl Provider for WebhookProvider {
    async fn list_zones(&self) -> Result<Vec<ZoneInfo>, ProviderError> {
        self.negotiate().await?;
        let domain = self.zone();
        Ok(vec![ZoneInfo {
            id: domain.clone(),
            domain,
        }])
    }

    async fn records(&self, _zone_id: &str) -> Result<Vec<Endpoint>, ProviderError> {
        self.negotiate().await?;
        let (_, _, body) = self
            .call(Method::GET, "/records", None, MAX_BODY_BYTES)
            .await?;
        let records: Vec<WireEndpoint> = serde_json::from_slice(&body).map_err(|e| {
            ProviderError::Other(format!("the webhook's records are not JSON: {e}"))
        })?;
        Ok(from_wire(&self.zone(), records))
    }

    async fn apply(&self, _zone_id: &str, changes: &Changes) -> Result<(), ProviderError> {
        let zone = self.zone();
        let written = || {
            changes
                .creates
                .iter()
                .chain(changes.deletes.iter())
                .chain(changes.updates.iter().flat_map(|u| [&u.old, &u.new]))
        };
        let routed: Vec<&str> = written()
            .filter(|r| r.set_identifier.is_some() || !r.provider_specific.is_empty())
            .map(|r| r.dns_name.as_str())
            .collect();
        if !routed.is_empty() {
            return Err(ProviderError::Invalid(format!(
                "the webhook protocol has no weighted or GEO records ({}); flatten the tree with plain_dns_records first",
                routed.join(", ")
            )));
        }
        if let Some(outside) = written().find(|r| !is_at_or_below(&r.dns_name, &zone)) {
            return Err(ProviderError::Invalid(format!(
                "{} is outside the zone {zone}",
                outside.dns_name
            )));
        }
        self.negotiate().await?;
        let (first, rest) = type_changes_first(changes);
        for changes in [first, rest].iter().filter(|c| !c.is_empty()) {
            let batches = pack(group_by_name(changes), WEBHOOK_LIMITS);
            send_batches(batches, move |batch: Vec<Change>| async move {
                self.send(&batch).await
            })
            .await?;
        }
        Ok(())
    }
}

/// `changes` as two batches to send one after the other: first the deletes that make room for
/// a record of another type at the same name (a CNAME where an A was, or the reverse), then
/// the rest. external-dns's providers apply a batch's creates before its deletes (PowerDNS then
/// refuses a CNAME beside the A it was to replace), so a type change sent as one batch would
/// never apply. The name answers nothing between the two.
fn type_changes_first(changes: &Changes) -> (Changes, Changes) {
    let written: Vec<&Endpoint> = changes
        .creates
        .iter()
        .chain(changes.updates.iter().map(|u| &u.new))
        .collect();
    let makes_room = |deleted: &Endpoint| {
        written.iter().any(|w| {
            w.dns_name == deleted.dns_name
                && w.record_type != deleted.record_type
                && (w.record_type == RecordType::Cname || deleted.record_type == RecordType::Cname)
        })
    };
    let (first, deletes): (Vec<Endpoint>, Vec<Endpoint>) =
        changes.deletes.iter().cloned().partition(|d| makes_room(d));
    (
        Changes {
            deletes: first,
            ..Changes::default()
        },
        Changes {
            deletes,
            ..changes.clone()
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_type_change_deletes_the_old_type_in_a_batch_of_its_own_first() {
        let a = Endpoint::new(
            "api.example.com",
            RecordType::A,
            ["192.0.2.1".to_string()],
            60,
        );
        let cname = Endpoint::new(
            "api.example.com",
            RecordType::Cname,
            ["klb.api.klb.example.com".to_string()],
            60,
        );
        let other = Endpoint::new(
            "www.example.com",
            RecordType::A,
            ["192.0.2.2".to_string()],
            60,
        );
        let txt = Endpoint::new(
            "api.example.com",
            RecordType::Txt,
            ["owner".to_string()],
            60,
        );
        let changes = Changes {
            deletes: vec![a.clone(), other.clone(), txt.clone()],
            updates: Vec::new(),
            creates: vec![cname.clone()],
        };
        let (first, rest) = type_changes_first(&changes);
        // Any record beside a CNAME conflicts with it, the A and a TXT alike.
        assert_eq!(first.deletes, [a.clone(), txt]);
        assert!(first.creates.is_empty() && first.updates.is_empty());
        assert_eq!(rest.deletes, std::slice::from_ref(&other));
        assert_eq!(rest.creates, std::slice::from_ref(&cname));
        // And back: the CNAME goes first, then the A is created.
        let back = Changes {
            deletes: vec![cname.clone()],
            updates: Vec::new(),
            creates: vec![a.clone()],
        };
        let (first, rest) = type_changes_first(&back);
        assert_eq!(first.deletes, [cname]);
        assert_eq!(rest.creates, std::slice::from_ref(&a));
        // No type change: one batch, as before.
        let plain = Changes {
            deletes: vec![other],
            updates: Vec::new(),
            creates: vec![a],
        };
        let (first, rest) = type_changes_first(&plain);
        assert!(first.is_empty());
        assert_eq!(rest, plain);
    }

    #[test]
    fn records_travel_as_external_dns_writes_them() {
        let txt = Endpoint::new(
            "a-shop.example.com",
            RecordType::Txt,
            ["heritage=external-dns,external-dns/owner=hub".to_string()],
            300,
        );
        let wire = serde_json::to_value(to_wire(&txt)).unwrap();
        assert_eq!(
            wire,
            serde_json::json!({
                "dnsName": "a-shop.example.com",
                "targets": ["\"heritage=external-dns,external-dns/owner=hub\""],
                "recordType": "TXT",
                "recordTTL": 300,
            })
        );
        let changes = WireChanges {
            update_old: vec![to_wire(&txt)],
            update_new: vec![to_wire(&txt)],
            ..Default::default()
        };
        let keys: Vec<String> = serde_json::to_value(&changes)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .cloned()
            .collect();
        assert_eq!(
            keys,
            ["updateNew", "updateOld"],
            "plan.Changes's JSON names"
        );
    }

    #[test]
    fn what_a_webhook_lists_is_read_as_the_engine_reads_a_zone() {
        let answer: Vec<WireEndpoint> = serde_json::from_value(serde_json::json!([
            // RFC2136 behind external-dns: the final dot, unquoted TXT strings.
            {"dnsName": "Shop.Example.com.", "targets": ["192.0.2.2"], "recordType": "A", "recordTTL": 60},
            {"dnsName": "shop.example.com", "targets": ["192.0.2.1"], "recordType": "A", "recordTTL": 60},
            {"dnsName": "a-shop.example.com", "targets": ["heritage=external-dns"], "recordType": "TXT"},
            // PowerDNS: quoted TXT, hostnames with the final dot, labels.
            {"dnsName": "b-shop.example.com", "targets": ["\"say \\\"hi\\\"\""], "recordType": "TXT",
             "labels": {"owner": "x"}},
            {"dnsName": "www.example.com", "targets": ["Shop.Example.com."], "recordType": "CNAME"},
            // Not ours to read: another zone, a type Meridian never writes, a negative TTL.
            {"dnsName": "shop.example.org", "targets": ["192.0.2.9"], "recordType": "A"},
            {"dnsName": "ptr.example.com", "targets": ["x"], "recordType": "PTR"},
            {"dnsName": "old.example.com", "targets": ["192.0.2.3"], "recordType": "A", "recordTTL": -5},
        ]))
        .unwrap();
        let read = from_wire("example.com", answer);
        let shown: Vec<String> = read
            .iter()
            .map(|e| {
                format!(
                    "{} {} {} {:?}",
                    e.dns_name, e.record_type, e.record_ttl, e.targets
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                "a-shop.example.com TXT 0 [\"heritage=external-dns\"]",
                "b-shop.example.com TXT 0 [\"say \\\"hi\\\"\"]",
                "old.example.com A 0 [\"192.0.2.3\"]",
                "shop.example.com A 60 [\"192.0.2.1\", \"192.0.2.2\"]",
                "www.example.com CNAME 0 [\"shop.example.com\"]",
            ]
        );
    }

    #[test]
    fn a_zone_is_the_webhooks_only_where_its_domain_filter_says() {
        let filter = |include: &[&str], exclude: &[&str]| DomainFilter {
            include: include.iter().map(|s| s.to_string()).collect(),
            exclude: exclude.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let cases = [
            (filter(&[], &[]), "example.com", true),
            (filter(&["example.com"], &[]), "example.com", true),
            (filter(&["example.com."], &[]), "Sub.Example.com", true),
            (filter(&[".example.com"], &[]), "sub.example.com", true),
            (filter(&["example.com"], &[]), "example.org", false),
            (filter(&["example.com"], &[]), "badexample.com", false),
            (filter(&["sub.example.com"], &[]), "example.com", false),
            (
                filter(&["example.com"], &["team.example.com"]),
                "team.example.com",
                false,
            ),
            (
                filter(&["example.com"], &["team.example.com"]),
                "example.com",
                true,
            ),
        ];
        for (filter, zone, served) in cases {
            assert_eq!(
                filter.refuses_zone(zone).is_none(),
                served,
                "{filter:?} {zone}: {:?}",
                filter.refuses_zone(zone)
            );
        }
    }

    #[test]
    fn the_media_type_is_compared_as_a_media_type() {
        for (content_type, same) in [
            (MEDIA_TYPE, true),
            ("application/external.dns.webhook+json; version=1", true),
            ("Application/External.DNS.Webhook+JSON;Version=1", true),
            ("application/external.dns.webhook+json;version=2", false),
            ("application/json", false),
            ("", false),
            (";", false),
            ("; ;", false),
        ] {
            assert_eq!(same_media_type(content_type), same, "{content_type:?}");
        }
    }

    #[test]
    fn a_refusal_is_quoted_short_and_on_one_line() {
        assert_eq!(excerpt(b""), "");
        assert_eq!(excerpt(b"bad\nrecord\x1b[31m"), ": bad record [31m");
        assert_eq!(excerpt(&[b'x'; 1000]).len(), 202);
    }
}
