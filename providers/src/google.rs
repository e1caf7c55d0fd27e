//! Google Cloud DNS through google-cloud-dns-v1.
//!
//! Cloud DNS keeps one record set per name and type. Weighted and GEO answers are that set's
//! `routingPolicy` (`wrr` items with a weight, `geo` items with a Google Cloud region), and the
//! items carry no set identifiers. The engine's records do, so this provider maps between the
//! two, and refuses what would not map back:
//! - a weighted record's set identifier is its target (which is how the engine names them);
//! - a GEO record's set identifier is its geo code, and the code maps to a region through
//!   [`GeoRegions`]; Cloud DNS has no catch-all location, so `*` (set identifier `default`)
//!   becomes one configured region, and [`GoogleProvider::status_notes`] says so;
//! - ownership TXT records of routed records cannot be routed themselves (every member would
//!   have the same value, and which owner owns which member would be lost), so they are kept as
//!   one plain TXT set per name whose values end in `;meridian/set-identifier=<id>`.
//!
//! Applying rebuilds each touched record set from the zone as last read (a cache updated after
//! each write) and sends, per batch, one Changes call with the old sets as deletions and the new
//! ones as additions. Cloud DNS refuses deletions that no longer match, so a stale cache never
//! overwrites someone else's change: the cache is dropped, and the batch is retried name by
//! name against a fresh read.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use google_cloud_dns_v1::client::{Changes as ChangesClient, ManagedZones, ResourceRecordSets};
use google_cloud_dns_v1::model::{
    Change as GoogleChange, RRSetRoutingPolicy, RRSetRoutingPolicyGeoPolicy,
    RRSetRoutingPolicyGeoPolicyGeoPolicyItem, RRSetRoutingPolicyWrrPolicy,
    RRSetRoutingPolicyWrrPolicyWrrPolicyItem, ResourceRecordSet,
};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::batch::{Action, Change, Limits, group_by_name, pack, send_batches};
use super::budget::{Backoff, RequestBudget};
use super::routed_txt::{marked_value, restore_routing_properties, unmarked_records};
use super::{Provider, ProviderError, ZoneInfo, quote_txt, unquote_txt};
use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, GEO_CODE, RecordKey, RecordType, WEIGHT};

/// Cloud DNS's default per-change quotas (`gcloud dns project-info describe`): 100 record-set
/// additions and 100 deletions, 10,000 bytes of values. A changed record costs at most one
/// deletion and one addition; the value budget leaves room for the unchanged members of a
/// rebuilt routed set. A batch the service still refuses is retried name by name.
pub const CLOUD_DNS_LIMITS: Limits = Limits {
    max_changes: 100,
    max_values: 1000,
    max_value_chars: 8_000,
    updates_replace: false,
};

/// Requests per second Meridian allows itself per Google project unless configured otherwise.
/// Cloud DNS's API quotas are per project and per minute; this stays well inside the defaults.
pub const CLOUD_DNS_REQUESTS_PER_SECOND: u32 = 10;

/// The engine's set identifier of the catch-all GEO record.
const CATCH_ALL_SET: &str = "default";
const CATCH_ALL_CODE: &str = "*";

/// How the provider authenticates.
#[derive(Clone)]
pub enum GoogleAuth {
    /// A service-account key (JSON), as a `kuadrant.io/gcp` Secret holds it.
    ServiceAccount(String),
    /// This process's own identity (granted by the platform admin): Application Default
    /// Credentials, which on GKE with Workload Identity are the metadata server's tokens for the
    /// Google service account the hub's ServiceAccount is bound to. With `metadata_endpoint`,
    /// that metadata server only (the fake of a test bed).
    Ambient { metadata_endpoint: Option<String> },
    /// No credentials at all: only for the local fake the tests run.
    Anonymous,
}

impl std::fmt::Debug for GoogleAuth {
    // The service-account key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            GoogleAuth::ServiceAccount(_) => "ServiceAccount(..)",
            GoogleAuth::Ambient { .. } => "Ambient",
            GoogleAuth::Anonymous => "Anonymous",
        })
    }
}

/// What a `kuadrant.io/gcp` Secret holds, plus an endpoint override for tests.
#[derive(Clone)]
pub struct GoogleCredentials {
    pub project: String,
    pub auth: GoogleAuth,
    /// A Cloud DNS-compatible endpoint (the fake in tests); the real service when `None`.
    pub endpoint: Option<String>,
}

impl std::fmt::Debug for GoogleCredentials {
    // The service-account key never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoogleCredentials")
            .field("project", &self.project)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Which Google Cloud region answers each geo code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeoRegions {
    by_code: BTreeMap<String, String>,
    catch_all: String,
}

impl Default for GeoRegions {
    /// One region per continent, and `us-central1` for `*`.
    fn default() -> Self {
        GeoRegions::new(
            [
                ("GEO-AF", "africa-south1"),
                ("GEO-AS", "asia-southeast1"),
                ("GEO-EU", "europe-west1"),
                ("GEO-NA", "us-east1"),
                ("GEO-OC", "australia-southeast1"),
                ("GEO-SA", "southamerica-east1"),
            ]
            .into_iter()
            .map(|(code, region)| (code.to_string(), region.to_string()))
            .collect(),
            "us-central1".to_string(),
        )
        .expect("the default mapping is valid")
    }
}

impl GeoRegions {
    /// A mapping from geo codes to regions. Two codes may not share a region (the answers
    /// could not be told apart when read back); `*` may share one with a code.
    pub fn new(by_code: BTreeMap<String, String>, catch_all: String) -> Result<Self, String> {
        let mut seen: BTreeMap<&str, &str> = BTreeMap::new();
        for (code, region) in &by_code {
            if code == CATCH_ALL_CODE {
                return Err("`*` is configured as the catch-all region, not in the map".into());
            }
            if !is_region_name(region) {
                return Err(format!("{region:?} (for {code}) is not a region name"));
            }
            if let Some(other) = seen.insert(region, code) {
                return Err(format!("{other} and {code} both map to {region}"));
            }
        }
        if !is_region_name(&catch_all) {
            return Err(format!("{catch_all:?} (for *) is not a region name"));
        }
        Ok(GeoRegions { by_code, catch_all })
    }

    /// The region answering `code`: the configured one, the catch-all region for `*`, and a
    /// region name itself for items someone else wrote (read back as their region).
    fn region<'a>(&'a self, code: &'a str) -> Option<&'a str> {
        if code == CATCH_ALL_CODE {
            return Some(&self.catch_all);
        }
        if let Some(region) = self.by_code.get(code) {
            return Some(region);
        }
        is_region_name(code).then_some(code)
    }

    /// The geo code a region reads back as (the region itself when no code maps to it).
    fn code(&self, region: &str) -> String {
        self.by_code
            .iter()
            .find(|(_, r)| *r == region)
            .map_or_else(|| region.to_string(), |(code, _)| code.clone())
    }
}

fn is_region_name(name: &str) -> bool {
    name.contains('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Cloud DNS for one project.
#[derive(Debug)]
pub struct GoogleProvider {
    project: String,
    zones_client: ManagedZones,
    rrsets_client: ResourceRecordSets,
    changes_client: ChangesClient,
    geo: GeoRegions,
    budget: Arc<RequestBudget>,
    backoff: Backoff,
    limits: Limits,
    zones: Mutex<Option<Vec<ZoneInfo>>>,
    /// Each zone's record sets as last read or written, by name and type.
    record_sets: Mutex<BTreeMap<String, RecordSets>>,
}

type RecordSets = BTreeMap<(String, RecordType), ResourceRecordSet>;

impl GoogleProvider {
    /// A provider whose every request goes through `budget` (share one per project).
    pub async fn new(
        credentials: &GoogleCredentials,
        geo: GeoRegions,
        budget: Arc<RequestBudget>,
    ) -> Result<Self, ProviderError> {
        // The Google crates take the process's rustls provider and bring none of their own.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let google_credentials = match &credentials.auth {
            GoogleAuth::ServiceAccount(key) => {
                let key: serde_json::Value = serde_json::from_str(key).map_err(|_| {
                    // serde's message could quote the key; say only what is wrong.
                    ProviderError::Invalid("the service-account key is not JSON".into())
                })?;
                google_cloud_auth::credentials::service_account::Builder::new(key)
                    .build()
                    .map_err(|e| {
                        ProviderError::Invalid(format!("the service-account key is unusable: {e}"))
                    })?
            }
            GoogleAuth::Ambient {
                metadata_endpoint: Some(endpoint),
            } => google_cloud_auth::credentials::mds::Builder::default()
                .with_endpoint(endpoint.clone())
                .build()
                .map_err(|e| ProviderError::Invalid(format!("the metadata server: {e}")))?,
            GoogleAuth::Ambient {
                metadata_endpoint: None,
            } => google_cloud_auth::credentials::Builder::default()
                .build()
                .map_err(|e| {
                    ProviderError::Invalid(format!(
                        "the hub's own Google identity (Application Default Credentials): {e}"
                    ))
                })?,
            GoogleAuth::Anonymous => {
                google_cloud_auth::credentials::anonymous::Builder::new().build()
            }
        };
        macro_rules! client {
            ($client:ty) => {{
                let mut builder = <$client>::builder()
                    .with_credentials(google_credentials.clone())
                    // Retries go through the shared budget and our backoff, not the client's.
                    .with_retry_policy(google_cloud_gax::retry_policy::NeverRetry);
                if let Some(endpoint) = &credentials.endpoint {
                    builder = builder.with_endpoint(endpoint.clone());
                }
                builder
                    .build()
                    .await
                    .map_err(|e| ProviderError::Other(format!("Cloud DNS client: {e}")))?
            }};
        }
        Ok(GoogleProvider {
            project: credentials.project.clone(),
            zones_client: client!(ManagedZones),
            rrsets_client: client!(ResourceRecordSets),
            changes_client: client!(ChangesClient),
            geo,
            budget,
            backoff: Backoff::default(),
            limits: CLOUD_DNS_LIMITS,
            zones: Mutex::new(None),
            record_sets: Mutex::new(BTreeMap::new()),
        })
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    pub fn with_limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Forgets the cached zone list (after a zone was created or deleted).
    pub fn invalidate_zones(&self) {
        *self.zones.lock().expect("zones lock") = None;
    }

    /// What users should know about how `records` land in Cloud DNS, for status.
    pub fn status_notes(&self, records: &[Endpoint]) -> Vec<String> {
        let mut notes = Vec::new();
        for record in records {
            if record.property(GEO_CODE) == Some(CATCH_ALL_CODE) {
                notes.push(format!(
                    "Cloud DNS has no catch-all location: the `*` answer of {} is served as the GEO \
                     item for region {}; clients elsewhere get their nearest listed region's answer",
                    record.dns_name, self.geo.catch_all
                ));
            }
        }
        let mut mapped: Vec<String> = records
            .iter()
            .filter_map(|r| r.property(GEO_CODE))
            .filter(|code| *code != CATCH_ALL_CODE)
            .filter_map(|code| Some(format!("{code} → {}", self.geo.region(code)?)))
            .collect();
        mapped.sort();
        mapped.dedup();
        if !mapped.is_empty() {
            notes.push(format!(
                "geo codes are served as Cloud DNS regions: {}",
                mapped.join(", ")
            ));
        }
        notes
    }

    /// Runs one API call within the budget, retrying throttling and transport errors with
    /// backoff; any other error is final.
    async fn call<T, F, Fut>(&self, what: &str, mut operation: F) -> Result<T, CallError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, google_cloud_gax::error::Error>>,
    {
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        for attempt in 0..self.backoff.max_attempts {
            self.budget.acquire().await;
            match operation().await {
                Ok(value) => return Ok(value),
                Err(error) if is_transient(&error) => {
                    let delay = self.backoff.delay(attempt, &mut rng);
                    tracing::debug!(what, attempt, ?delay, status = ?error.http_status_code(), "Cloud DNS throttled; backing off");
                    tokio::time::sleep(delay).await;
                }
                Err(error) => {
                    let message = error
                        .status()
                        .map(|s| s.message.clone())
                        .unwrap_or_else(|| error.to_string());
                    return Err(CallError::Refused {
                        status: error.http_status_code(),
                        message: format!("{what}: {message}"),
                    });
                }
            }
        }
        Err(CallError::Throttled(what.to_string()))
    }

    async fn read_record_sets(&self, zone_id: &str) -> Result<RecordSets, ProviderError> {
        let mut sets = RecordSets::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .call("ResourceRecordSets.list", || {
                    self.rrsets_client
                        .list()
                        .set_project(&self.project)
                        .set_managed_zone(zone_id)
                        .set_or_clear_page_token(token.clone())
                        .send()
                })
                .await
                .map_err(|e| e.into_provider_error(Some(zone_id)))?;
            for rrset in page.rrsets {
                let Some(record_type) = rrset.r#type.as_deref().and_then(record_type) else {
                    continue; // SOA and types the engine never writes
                };
                let name = from_google_name(rrset.name.as_deref().unwrap_or_default());
                sets.insert((name, record_type), rrset);
            }
            match page.next_page_token {
                Some(next) if !next.is_empty() => token = Some(next),
                _ => break,
            }
        }
        Ok(sets)
    }

    /// The zone's record sets: cached, or read.
    async fn record_sets(&self, zone_id: &str) -> Result<RecordSets, ProviderError> {
        if let Some(sets) = self.record_sets.lock().expect("cache lock").get(zone_id) {
            return Ok(sets.clone());
        }
        let sets = self.read_record_sets(zone_id).await?;
        self.record_sets
            .lock()
            .expect("cache lock")
            .insert(zone_id.to_string(), sets.clone());
        Ok(sets)
    }

    fn forget_record_sets(&self, zone_id: &str) {
        self.record_sets.lock().expect("cache lock").remove(zone_id);
    }

    /// Applies one batch: rebuilds the touched record sets and sends one Changes call. When
    /// the cached copy turns out stale (a record to delete is missing, or Cloud DNS says the
    /// sets differ), the zone is read again and the batch rebuilt once.
    async fn change(&self, zone_id: &str, batch: &[Change]) -> Result<(), ProviderError> {
        let mut fresh = false;
        loop {
            let cached = self
                .record_sets
                .lock()
                .expect("cache lock")
                .contains_key(zone_id);
            let stale_retry = cached && !fresh;
            let current = self.record_sets(zone_id).await?;
            let rebuilt = match rebuild(&current, batch, &self.geo) {
                Ok(rebuilt) => rebuilt,
                // Our cache may be what is behind: read again before deciding.
                Err(_) if stale_retry => {
                    self.forget_record_sets(zone_id);
                    fresh = true;
                    continue;
                }
                Err(Unbuilt::Stale(problem)) => return Err(ProviderError::Stale(problem)),
                Err(Unbuilt::Invalid(problem)) => return Err(ProviderError::Rejected(problem)),
            };
            match self.send_change(zone_id, &rebuilt).await {
                Ok(()) => return Ok(()),
                Err(CallError::Refused {
                    status: Some(404 | 409 | 412),
                    ..
                }) if stale_retry => {
                    self.forget_record_sets(zone_id);
                    fresh = true;
                }
                // Fresh, and still refused: a record set changed between the read and the
                // write (the deletions must match exactly).
                Err(CallError::Refused {
                    status: Some(409 | 412),
                    message,
                }) => {
                    self.forget_record_sets(zone_id);
                    return Err(ProviderError::Stale(message));
                }
                Err(error) => {
                    self.forget_record_sets(zone_id);
                    return Err(error.into_provider_error(None));
                }
            }
        }
    }

    /// Sends one Changes call for `rebuilt` (none when nothing differs) and updates the cache.
    async fn send_change(&self, zone_id: &str, rebuilt: &Rebuilt) -> Result<(), CallError> {
        if rebuilt.deletions.is_empty() && rebuilt.additions.is_empty() {
            return Ok(());
        }
        let body = GoogleChange::default()
            .set_deletions(rebuilt.deletions.iter().map(|(_, set)| set.clone()))
            .set_additions(rebuilt.additions.iter().map(|(_, set)| set.clone()));
        self.call("Changes.create", || {
            self.changes_client
                .create()
                .set_project(&self.project)
                .set_managed_zone(zone_id)
                .set_body(body.clone())
                .send()
        })
        .await?;
        let mut cache = self.record_sets.lock().expect("cache lock");
        if let Some(sets) = cache.get_mut(zone_id) {
            for (key, _) in &rebuilt.deletions {
                sets.remove(key);
            }
            sets.extend(rebuilt.additions.iter().cloned());
        }
        Ok(())
    }
}

/// Why a call failed.
#[derive(Debug)]
enum CallError {
    Refused {
        status: Option<u16>,
        message: String,
    },
    Throttled(String),
}

impl CallError {
    fn into_provider_error(self, zone: Option<&str>) -> ProviderError {
        match (self, zone) {
            (
                CallError::Refused {
                    status: Some(404), ..
                },
                Some(zone),
            ) => ProviderError::ZoneNotFound(zone.to_string()),
            (CallError::Refused { message, .. }, _) => ProviderError::Rejected(message),
            (CallError::Throttled(what), _) => ProviderError::Throttled(what),
        }
    }
}

fn is_transient(error: &google_cloud_gax::error::Error) -> bool {
    match error.http_status_code() {
        Some(429 | 500 | 502 | 503 | 504) => true,
        Some(_) => false,
        None => error.is_io() || error.is_connect() || error.is_timeout() || error.is_transport(),
    }
}

impl Provider for GoogleProvider {
    async fn list_zones(&self) -> Result<Vec<ZoneInfo>, ProviderError> {
        if let Some(zones) = self.zones.lock().expect("zones lock").clone() {
            return Ok(zones);
        }
        let mut zones = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let page = self
                .call("ManagedZones.list", || {
                    self.zones_client
                        .list()
                        .set_project(&self.project)
                        .set_or_clear_page_token(token.clone())
                        .send()
                })
                .await
                .map_err(|e| e.into_provider_error(None))?;
            zones.extend(page.managed_zones.into_iter().filter_map(|zone| {
                Some(ZoneInfo {
                    id: zone.name?,
                    domain: from_google_name(&zone.dns_name?),
                })
            }));
            match page.next_page_token {
                Some(next) if !next.is_empty() => token = Some(next),
                _ => break,
            }
        }
        *self.zones.lock().expect("zones lock") = Some(zones.clone());
        Ok(zones)
    }

    async fn records(&self, zone_id: &str) -> Result<Vec<Endpoint>, ProviderError> {
        let sets = self.read_record_sets(zone_id).await?;
        let records = decode_zone(sets.values(), &self.geo);
        self.record_sets
            .lock()
            .expect("cache lock")
            .insert(zone_id.to_string(), sets);
        Ok(records)
    }

    async fn apply(&self, zone_id: &str, changes: &Changes) -> Result<(), ProviderError> {
        validate(changes, &self.geo)?;
        let batches = pack(group_by_name(changes), self.limits);
        send_batches(batches, move |batch: Vec<Change>| async move {
            self.change(zone_id, &batch).await
        })
        .await
    }
}

/// Refuses what Cloud DNS cannot hold, or could not give back as it was given, before any
/// call, with one message for status.
pub fn validate(changes: &Changes, geo: &GeoRegions) -> Result<(), ProviderError> {
    let mut problems = Vec::new();
    for record in changes
        .creates
        .iter()
        .chain(changes.updates.iter().map(|u| &u.new))
    {
        let name = &record.dns_name;
        if record.targets.is_empty() {
            problems.push(format!("{name}: no values"));
        }
        let Some(set_identifier) = &record.set_identifier else {
            continue;
        };
        match (record.property(WEIGHT), record.property(GEO_CODE)) {
            _ if record.record_type == RecordType::Txt => {} // kept as a plain TXT value
            (Some(weight), None) => {
                if weight.parse::<u32>().is_err() {
                    problems.push(format!(
                        "{name}: weight {weight:?} is not a non-negative integer"
                    ));
                }
                if *set_identifier != wrr_set_identifier(&record.targets) {
                    problems.push(format!(
                        "{name}: a weighted record's set identifier must be its target \
                         (Cloud DNS stores none); got {set_identifier:?}"
                    ));
                }
            }
            (None, Some(code)) => {
                if geo.region(code).is_none() {
                    problems.push(format!(
                        "{name}: geo code {code} has no Cloud DNS region in the provider's \
                         geo-region configuration"
                    ));
                }
                let expected = if code == CATCH_ALL_CODE {
                    CATCH_ALL_SET
                } else {
                    code
                };
                if set_identifier != expected {
                    problems.push(format!(
                        "{name}: a GEO record's set identifier must be {expected:?} \
                         (Cloud DNS stores none); got {set_identifier:?}"
                    ));
                }
            }
            _ => problems.push(format!(
                "{name}: a set identifier needs exactly one of a weight and a geo code"
            )),
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ProviderError::Invalid(problems.join("; ")))
    }
}

fn wrr_set_identifier(targets: &[String]) -> String {
    targets.join(",")
}

/// Record sets to delete and to add, by key.
#[derive(Debug, Default)]
struct Rebuilt {
    deletions: Vec<((String, RecordType), ResourceRecordSet)>,
    additions: Vec<((String, RecordType), ResourceRecordSet)>,
}

/// Why a batch could not be rebuilt onto the record sets as read.
#[derive(Debug, PartialEq, Eq)]
enum Unbuilt {
    /// A record the batch deletes or replaces is gone or holds other values than the plan read:
    /// another writer got there first.
    Stale(String),
    /// The records cannot be held as Cloud DNS record sets.
    Invalid(String),
}

/// Whether `found` holds what `planned` says: the same values (in any order), TTL and routing
/// properties (a weight). An ownership TXT record of a routed record decodes alone without the
/// properties it takes from that record when the zone is read whole, so its are not compared.
fn as_planned(found: &Endpoint, planned: &Endpoint) -> bool {
    fn sorted<T: Ord + Clone>(items: &[T]) -> Vec<T> {
        let mut items = items.to_vec();
        items.sort();
        items
    }
    found.record_ttl == planned.record_ttl
        && sorted(&found.targets) == sorted(&planned.targets)
        && (found.record_type == RecordType::Txt
            || sorted(&found.provider_specific) == sorted(&planned.provider_specific))
}

/// Applies endpoint changes to the record sets they touch. A delete must find its record (by
/// key) as the plan read it; an update must find the record it replaces (or its own new values:
/// an earlier try landed); a create, or an upsert from outside a plan, replaces what is there.
/// The record sets then travel as exact deletions and additions, which Cloud DNS refuses if the
/// sets changed since they were read.
fn rebuild(current: &RecordSets, batch: &[Change], geo: &GeoRegions) -> Result<Rebuilt, Unbuilt> {
    let mut touched: BTreeMap<(String, RecordType), BTreeMap<RecordKey, Endpoint>> =
        BTreeMap::new();
    for change in batch {
        let key = (change.record.dns_name.clone(), change.record.record_type);
        touched.entry(key.clone()).or_insert_with(|| {
            current
                .get(&key)
                .map(|set| decode(set, geo))
                .unwrap_or_default()
                .into_iter()
                .map(|record| (record.key(), record))
                .collect()
        });
    }
    let mut stale = Vec::new();
    for change in batch {
        let records = touched
            .get_mut(&(change.record.dns_name.clone(), change.record.record_type))
            .expect("every touched set was decoded");
        let key = change.record.key();
        match (change.action, &change.replaces) {
            (Action::Delete, _) => match records.remove(&key) {
                None => stale.push(format!("{key} does not exist")),
                Some(found) if !as_planned(&found, &change.record) => {
                    stale.push(format!("{key} holds other values than planned"))
                }
                Some(_) => {}
            },
            (Action::Upsert, Some(old)) => {
                let found = records.get(&key);
                if !found.is_some_and(|f| as_planned(f, old) || as_planned(f, &change.record)) {
                    stale.push(format!("{key} is not the record the update replaces"));
                }
                records.insert(key, change.record.clone());
            }
            (Action::Create | Action::Upsert, _) => {
                records.insert(key, change.record.clone());
            }
        }
    }
    if !stale.is_empty() {
        return Err(Unbuilt::Stale(stale.join("; ")));
    }
    let mut problems = Vec::new();
    let mut rebuilt = Rebuilt::default();
    for (key, records) in touched {
        let records: Vec<Endpoint> = records.into_values().collect();
        let new = match encode(&key.0, key.1, &records, geo) {
            Ok(new) => new,
            Err(problem) => {
                problems.push(problem);
                continue;
            }
        };
        let old = current.get(&key);
        if old.map(comparable) == new.as_ref().map(comparable) {
            continue;
        }
        if let Some(old) = old {
            rebuilt.deletions.push((key.clone(), old.clone()));
        }
        if let Some(new) = new {
            rebuilt.additions.push((key, new));
        }
    }
    if problems.is_empty() {
        Ok(rebuilt)
    } else {
        Err(Unbuilt::Invalid(problems.join("; ")))
    }
}

/// A record set without the `kind` fields the service adds, for comparison.
fn comparable(set: &ResourceRecordSet) -> ResourceRecordSet {
    let mut set = set.clone();
    set.kind = None;
    if let Some(policy) = set.routing_policy.as_mut() {
        policy.kind = None;
        if let Some(wrr) = policy.wrr.as_mut() {
            wrr.kind = None;
            wrr.items.iter_mut().for_each(|item| item.kind = None);
        }
        if let Some(geo) = policy.geo.as_mut() {
            geo.kind = None;
            geo.items.iter_mut().for_each(|item| item.kind = None);
        }
    }
    set
}

/// Every record of a zone, with ownership TXT records of routed records given their record's
/// routing properties (Cloud DNS keeps those TXT records plain).
fn decode_zone<'a>(
    sets: impl Iterator<Item = &'a ResourceRecordSet>,
    geo: &GeoRegions,
) -> Vec<Endpoint> {
    let mut records: Vec<Endpoint> = sets.flat_map(|set| decode(set, geo)).collect();
    restore_routing_properties(&mut records);
    records
}

/// The engine's records in one Cloud DNS record set.
fn decode(set: &ResourceRecordSet, geo: &GeoRegions) -> Vec<Endpoint> {
    let Some(record_type) = set.r#type.as_deref().and_then(record_type) else {
        return Vec::new();
    };
    let name = from_google_name(set.name.as_deref().unwrap_or_default());
    let ttl = set.ttl.unwrap_or(0).try_into().unwrap_or(0);
    let record = |values: &[String]| {
        Endpoint::new(
            name.clone(),
            record_type,
            values.iter().map(|v| from_google_value(record_type, v)),
            ttl,
        )
    };
    let Some(policy) = &set.routing_policy else {
        if record_type != RecordType::Txt {
            return vec![record(&set.rrdatas)];
        }
        // Plain values, and values carrying the set identifier of a routed record.
        return unmarked_records(&name, ttl, set.rrdatas.iter().map(|v| unquote_txt(v)));
    };
    let mut records = Vec::new();
    if let Some(wrr) = &policy.wrr {
        for item in &wrr.items {
            let record = record(&item.rrdatas);
            let weight = item.weight.unwrap_or(0.0);
            let weight = if weight.fract() == 0.0 && weight >= 0.0 {
                format!("{}", weight as u64)
            } else {
                weight.to_string()
            };
            let id = wrr_set_identifier(&record.targets);
            records.push(record.with_set_identifier(id).with_property(WEIGHT, weight));
        }
    }
    if let Some(geo_policy) = &policy.geo {
        for item in &geo_policy.items {
            let region = item.location.as_deref().unwrap_or_default();
            let code = geo.code(region);
            if code != region || region != geo.catch_all {
                records.push(
                    record(&item.rrdatas)
                        .with_set_identifier(code.clone())
                        .with_property(GEO_CODE, code),
                );
            }
            if region == geo.catch_all {
                records.push(
                    record(&item.rrdatas)
                        .with_set_identifier(CATCH_ALL_SET)
                        .with_property(GEO_CODE, CATCH_ALL_CODE),
                );
            }
        }
    }
    records
}

/// One Cloud DNS record set holding `records` (all at `name` with `record_type`); `None` when
/// there are none.
fn encode(
    name: &str,
    record_type: RecordType,
    records: &[Endpoint],
    geo: &GeoRegions,
) -> Result<Option<ResourceRecordSet>, String> {
    let Some(first) = records.first() else {
        return Ok(None);
    };
    if records.iter().any(|r| r.record_ttl != first.record_ttl) {
        return Err(format!(
            "{name} {record_type}: Cloud DNS keeps one TTL per name and type, and these records \
             differ"
        ));
    }
    let ttl = if first.record_ttl == 0 {
        300
    } else {
        first.record_ttl
    };
    let values = |record: &Endpoint| -> Vec<String> {
        record
            .targets
            .iter()
            .map(|t| to_google_value(record_type, t))
            .collect()
    };
    let set = ResourceRecordSet::default()
        .set_name(to_google_name(name))
        .set_type(record_type.as_str())
        .set_ttl(i32::try_from(ttl).unwrap_or(i32::MAX));
    if record_type == RecordType::Txt {
        let mut rrdatas = Vec::new();
        for record in records {
            for target in &record.targets {
                rrdatas.push(quote_txt(&marked_value(record, target)));
            }
        }
        return Ok(Some(set.set_rrdatas(rrdatas)));
    }
    if records.iter().all(|r| r.set_identifier.is_none()) {
        return Ok(Some(set.set_rrdatas(values(first))));
    }
    if records.iter().all(|r| r.property(WEIGHT).is_some()) {
        let items = records.iter().map(|record| {
            let weight = record.property(WEIGHT).and_then(|w| w.parse::<f64>().ok());
            RRSetRoutingPolicyWrrPolicyWrrPolicyItem::default()
                .set_or_clear_weight(weight)
                .set_rrdatas(values(record))
        });
        let policy = RRSetRoutingPolicyWrrPolicy::default().set_items(items);
        return Ok(Some(set.set_routing_policy(
            RRSetRoutingPolicy::default().set_wrr(policy),
        )));
    }
    if records.iter().all(|r| r.property(GEO_CODE).is_some()) {
        let mut by_region: BTreeMap<&str, &Endpoint> = BTreeMap::new();
        for record in records {
            let code = record.property(GEO_CODE).expect("checked above");
            let region = geo
                .region(code)
                .ok_or_else(|| format!("{name}: geo code {code} has no Cloud DNS region"))?;
            if let Some(other) = by_region.insert(region, record)
                && other.targets != record.targets
            {
                return Err(format!(
                    "{name}: {} and {code} are both served by region {region} with different \
                     answers",
                    other.property(GEO_CODE).unwrap_or_default()
                ));
            }
        }
        let items = by_region.into_iter().map(|(region, record)| {
            RRSetRoutingPolicyGeoPolicyGeoPolicyItem::default()
                .set_location(region)
                .set_rrdatas(values(record))
        });
        let policy = RRSetRoutingPolicyGeoPolicy::default().set_items(items);
        return Ok(Some(set.set_routing_policy(
            RRSetRoutingPolicy::default().set_geo(policy),
        )));
    }
    Err(format!(
        "{name} {record_type}: plain, weighted and GEO records cannot share one Cloud DNS record set"
    ))
}

fn record_type(name: &str) -> Option<RecordType> {
    // Cloud DNS spells types in upper case.
    RecordType::ALL.into_iter().find(|t| t.as_str() == name)
}

fn to_google_name(name: &str) -> String {
    format!("{}.", name.trim_end_matches('.'))
}

fn from_google_name(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

/// Values as Cloud DNS writes them: names fully qualified, TXT quoted.
fn to_google_value(record_type: RecordType, value: &str) -> String {
    match record_type {
        RecordType::Txt => quote_txt(value),
        RecordType::Cname | RecordType::Ns | RecordType::Mx | RecordType::Srv => {
            to_google_name(value)
        }
        _ => value.to_string(),
    }
}

fn from_google_value(record_type: RecordType, value: &str) -> String {
    match record_type {
        RecordType::Txt => unquote_txt(value),
        RecordType::Cname | RecordType::Ns | RecordType::Mx | RecordType::Srv => {
            value.trim_end_matches('.').to_string()
        }
        _ => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::plan::ownership_record;

    fn geo_regions() -> GeoRegions {
        GeoRegions::new(
            [
                ("IE", "europe-west1"),
                ("US", "us-east1"),
                ("GEO-AS", "asia-east1"),
            ]
            .into_iter()
            .map(|(c, r)| (c.to_string(), r.to_string()))
            .collect(),
            "us-east1".to_string(),
        )
        .unwrap()
    }

    fn geo_record(code: &str, target: &str) -> Endpoint {
        let id = if code == "*" { "default" } else { code };
        Endpoint::new(
            "klb.api.example.com",
            RecordType::Cname,
            [target.into()],
            300,
        )
        .with_set_identifier(id)
        .with_property(GEO_CODE, code)
    }

    fn weighted(target: &str, weight: &str) -> Endpoint {
        Endpoint::new(
            "us.klb.api.example.com",
            RecordType::Cname,
            [target.into()],
            60,
        )
        .with_set_identifier(target)
        .with_property(WEIGHT, weight)
    }

    fn round_trip(records: &[Endpoint]) -> Vec<Endpoint> {
        let first = &records[0];
        let set = encode(&first.dns_name, first.record_type, records, &geo_regions())
            .unwrap()
            .unwrap();
        let mut decoded = decode(&set, &geo_regions());
        decoded.sort();
        decoded
    }

    #[test]
    fn routed_records_round_trip_through_one_record_set() {
        let cases: Vec<Vec<Endpoint>> = vec![
            vec![
                weighted("c1.example.com", "120"),
                weighted("c2.example.com", "0"),
            ],
            // `*` shares the US region and its answer, as with `defaultGeo: US`.
            vec![
                geo_record("US", "us.klb.api.example.com"),
                geo_record("IE", "ie.klb.api.example.com"),
                geo_record("GEO-AS", "as.klb.api.example.com"),
                geo_record("*", "us.klb.api.example.com"),
            ],
            vec![Endpoint::new(
                "api.example.com",
                RecordType::A,
                ["192.0.2.1".to_string(), "192.0.2.2".to_string()],
                60,
            )],
        ];
        for mut records in cases {
            records.sort();
            assert_eq!(round_trip(&records), records);
        }
    }

    #[test]
    fn ownership_records_of_routed_records_stay_plain_and_keep_their_set_identifiers() {
        let records = [
            weighted("c1.example.com", "120"),
            weighted("c2.example.com", "7"),
        ];
        let owners: Vec<Endpoint> = records
            .iter()
            .flat_map(|r| {
                [
                    ownership_record("owner-a", r),
                    ownership_record("owner-b", r),
                ]
            })
            .collect();
        let name = &owners[0].dns_name;
        let mine: Vec<Endpoint> = owners
            .iter()
            .filter(|o| &o.dns_name == name)
            .cloned()
            .collect();
        let set = encode(name, RecordType::Txt, &mine, &geo_regions())
            .unwrap()
            .unwrap();
        assert!(set.routing_policy.is_none(), "plain TXT: {set:?}");
        let record_set = encode(
            &records[0].dns_name,
            RecordType::Cname,
            &records,
            &geo_regions(),
        )
        .unwrap()
        .unwrap();
        let mut decoded: Vec<Endpoint> =
            decode_zone([&set, &record_set].into_iter(), &geo_regions())
                .into_iter()
                .filter(|r| r.record_type == RecordType::Txt)
                .collect();
        decoded.sort();
        let mut expected = mine.clone();
        expected.sort();
        assert_eq!(
            decoded, expected,
            "weights are restored from the records they vouch for"
        );
    }

    #[test]
    fn long_txt_values_are_split_into_strings_and_joined_back() {
        let long = Endpoint::new("t.example.com", RecordType::Txt, ["x".repeat(600)], 60)
            .with_set_identifier("s".repeat(200));
        let set = encode(
            "t.example.com",
            RecordType::Txt,
            std::slice::from_ref(&long),
            &geo_regions(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            set.rrdatas[0].matches('"').count(),
            8,
            "four strings: {}",
            set.rrdatas[0]
        );
        let decoded = decode(&set, &geo_regions());
        assert_eq!(decoded[0].targets, long.targets);
        assert_eq!(decoded[0].set_identifier, long.set_identifier);
    }

    #[test]
    fn what_would_not_read_back_is_refused_before_any_call() {
        let geo = geo_regions();
        let cases = [
            (weighted("c1.example.com", "1.5"), "non-negative integer"),
            (
                weighted("c1.example.com", "1").with_set_identifier("cluster-1"),
                "must be its target",
            ),
            (geo_record("DE", "de.example.com"), "no Cloud DNS region"),
            (
                geo_record("IE", "ie.example.com").with_set_identifier("ireland"),
                "must be \"IE\"",
            ),
        ];
        for (record, expected) in cases {
            let error = validate(
                &Changes {
                    creates: vec![record],
                    ..Default::default()
                },
                &geo,
            )
            .unwrap_err();
            assert!(error.to_string().contains(expected), "{error}");
        }
        let clash = [
            geo_record("US", "us.klb.api.example.com"),
            geo_record("*", "ie.klb.api.example.com"),
        ];
        let error = encode("klb.api.example.com", RecordType::Cname, &clash, &geo).unwrap_err();
        assert!(error.contains("both served by region us-east1"), "{error}");
    }

    #[test]
    fn a_geo_mapping_must_be_one_to_one() {
        let map = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(c, r)| (c.to_string(), r.to_string()))
                .collect()
        };
        assert!(
            GeoRegions::new(
                map(&[("IE", "europe-west1"), ("GB", "europe-west1")]),
                "us-east1".into()
            )
            .is_err()
        );
        assert!(GeoRegions::new(map(&[("IE", "Europe West")]), "us-east1".into()).is_err());
        assert!(GeoRegions::new(map(&[("IE", "europe-west1")]), "us-east1".into()).is_ok());
    }

    #[test]
    fn rebuilding_changes_only_the_touched_member_and_keeps_foreign_items() {
        let geo = geo_regions();
        let records = [
            weighted("c1.example.com", "120"),
            weighted("c2.example.com", "120"),
        ];
        let set = encode("us.klb.api.example.com", RecordType::Cname, &records, &geo)
            .unwrap()
            .unwrap();
        let current: RecordSets = [(
            ("us.klb.api.example.com".to_string(), RecordType::Cname),
            set.clone(),
        )]
        .into();
        let rebuilt = rebuild(
            &current,
            &[Change {
                action: Action::Upsert,
                record: weighted("c1.example.com", "200"),
                replaces: None,
            }],
            &geo,
        )
        .unwrap();
        assert_eq!(rebuilt.deletions.len(), 1);
        assert_eq!(rebuilt.deletions[0].1, set);
        let mut after = decode(&rebuilt.additions[0].1, &geo);
        after.sort();
        assert_eq!(
            after,
            vec![
                weighted("c1.example.com", "200"),
                weighted("c2.example.com", "120")
            ]
        );
        let missing = rebuild(
            &current,
            &[Change {
                action: Action::Delete,
                record: weighted("c3.example.com", "1"),
                replaces: None,
            }],
            &geo,
        )
        .unwrap_err();
        assert!(
            matches!(&missing, Unbuilt::Stale(m) if m.contains("does not exist")),
            "{missing:?}"
        );
    }

    #[test]
    fn a_member_changed_since_the_plan_is_stale_and_nothing_is_rebuilt() {
        let geo = geo_regions();
        let set = encode(
            "us.klb.api.example.com",
            RecordType::Cname,
            &[
                weighted("c1.example.com", "120"),
                weighted("c2.example.com", "120"),
            ],
            &geo,
        )
        .unwrap()
        .unwrap();
        let current: RecordSets = [(
            ("us.klb.api.example.com".to_string(), RecordType::Cname),
            set,
        )]
        .into();
        // The plan read c1 as it is: rebuilt.
        let planned = weighted("c1.example.com", "120");
        let found = decode(current.values().next().unwrap(), &geo)
            .into_iter()
            .find(|r| r.key() == planned.key())
            .unwrap();
        let as_read = rebuild(
            &current,
            &[Change {
                action: Action::Upsert,
                record: weighted("c1.example.com", "200"),
                replaces: Some(found.clone()),
            }],
            &geo,
        );
        assert!(as_read.is_ok(), "{:?}", as_read.err());
        // Another writer changed c1's weight since the plan read it: stale, nothing sent.
        let moved = weighted("c1.example.com", "7");
        let stale = rebuild(
            &current,
            &[Change {
                action: Action::Upsert,
                record: weighted("c1.example.com", "200"),
                replaces: Some(moved.clone()),
            }],
            &geo,
        )
        .unwrap_err();
        assert!(matches!(stale, Unbuilt::Stale(_)), "{stale:?}");
        let deleted = rebuild(
            &current,
            &[Change {
                action: Action::Delete,
                record: moved,
                replaces: None,
            }],
            &geo,
        )
        .unwrap_err();
        assert!(matches!(deleted, Unbuilt::Stale(_)), "{deleted:?}");
    }
}
