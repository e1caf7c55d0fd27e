//! Route53 through aws-sdk-route53: weighted (0–255) and geolocation records with set
//! identifiers, batches within Route53's limits, a record and its ownership record in one batch
//! with deletes first, name-by-name retry after a refused batch, one request budget per account,
//! backoff with jitter when throttled, and a cached zone list.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_credential_types::provider::SharedCredentialsProvider;
use aws_sdk_route53::Client;
use aws_sdk_route53::config::retry::RetryConfig;
use aws_sdk_route53::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_route53::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_route53::types::{
    Change as AwsChange, ChangeAction, ChangeBatch, GeoLocation, ResourceRecord, ResourceRecordSet,
    RrType,
};
use rand::SeedableRng;
use rand::rngs::SmallRng;

use super::batch::{Action, Change, ROUTE53_LIMITS, group_by_name, pack, send_batches};
use super::budget::{Backoff, RequestBudget};
use super::listing::ZoneListings;
use super::{Provider, ProviderError, ZoneInfo, quote_txt, unquote_txt};
use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, GEO_CODE, ProviderSpecific, RecordType, WEIGHT};

const CONTINENTS: [&str; 7] = ["AF", "AN", "AS", "EU", "NA", "OC", "SA"];

/// What a `kuadrant.io/aws` Secret holds, plus an endpoint override for tests.
#[derive(Clone)]
pub struct Route53Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub region: String,
    /// A Route53-compatible endpoint (moto in tests); the real service when `None`.
    pub endpoint: Option<String>,
}

impl std::fmt::Debug for Route53Credentials {
    // Credentials never reach a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route53Credentials")
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

/// Route53 for one account.
#[derive(Debug)]
pub struct Route53Provider {
    client: Client,
    budget: Arc<RequestBudget>,
    backoff: Backoff,
    /// How long a page of a zone listing may stay throttled past the backoff's tries: see
    /// [`Route53Provider::with_list_patience`].
    list_patience: Duration,
    zones: Mutex<Option<Vec<ZoneInfo>>>,
    listings: ZoneListings,
}

/// A page throttled for this long past its tries fails its listing: by then many clusters share
/// a throttled account, and the reconcile's own backoff spreads them better.
pub const LIST_PATIENCE: Duration = Duration::from_secs(300);

impl Route53Provider {
    /// A provider whose every request goes through `budget` (share one per account).
    pub fn new(credentials: &Route53Credentials, budget: Arc<RequestBudget>) -> Self {
        let keys = SharedCredentialsProvider::new(Credentials::new(
            credentials.access_key_id.clone(),
            credentials.secret_access_key.clone(),
            None,
            None,
            "kuadrant.io/aws secret",
        ));
        Self::with_credentials(
            keys,
            &credentials.region,
            credentials.endpoint.clone(),
            budget,
        )
    }

    /// A provider calling as `identity` (see [`crate::aws_identity`]), at `endpoint` (the
    /// real service when `None`).
    pub async fn with_identity(
        identity: &crate::aws_identity::AwsIdentity,
        endpoint: Option<String>,
        budget: Arc<RequestBudget>,
    ) -> Self {
        let credentials = crate::aws_identity::credentials_provider(identity).await;
        Self::with_credentials(credentials, &identity.region, endpoint, budget)
    }

    fn with_credentials(
        credentials: SharedCredentialsProvider,
        region: &str,
        endpoint: Option<String>,
        budget: Arc<RequestBudget>,
    ) -> Self {
        let mut builder = aws_sdk_route53::Config::builder();
        builder.set_endpoint_url(endpoint);
        let config = builder
            .http_client(crate::aws_identity::http_client())
            .behavior_version(BehaviorVersion::latest())
            .region(Region::new(region.to_string()))
            .credentials_provider(credentials)
            // Retries go through the shared budget and our backoff, not the SDK's own.
            .retry_config(RetryConfig::disabled())
            .build();
        Route53Provider {
            client: Client::from_conf(config),
            budget,
            backoff: Backoff::default(),
            list_patience: LIST_PATIENCE,
            zones: Mutex::new(None),
            listings: ZoneListings::default(),
        }
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long a page of a zone listing may go on being throttled after the backoff's tries
    /// before the listing fails. Until then the page is asked again after the backoff's longest
    /// (jittered) delays, and the pages already read are kept: a throttled page once failed the whole listing, and
    /// the reconcile read the zone again from its first page (at a fleet's cold start on one
    /// account, most of the pages answered were such repeats).
    pub fn with_list_patience(mut self, patience: Duration) -> Self {
        self.list_patience = patience;
        self
    }

    /// Forgets the cached zone list (after a zone was created or deleted).
    pub fn invalidate_zones(&self) {
        *self.zones.lock().expect("zones lock") = None;
    }

    /// Runs one API call within the budget, retrying throttling and transport errors with
    /// backoff; any other error is final.
    async fn call<T, E, R, F, Fut>(&self, what: &str, operation: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, R>>>,
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        self.call_with_patience(what, Duration::ZERO, operation)
            .await
    }

    /// [`Self::call`], but throttling past the backoff's tries is waited out, with the
    /// backoff's longest (jittered) delays, until `patience` has passed since the call began. An API server that does not
    /// answer at all still fails after the tries.
    async fn call_with_patience<T, E, R, F, Fut>(
        &self,
        what: &str,
        patience: Duration,
        mut operation: F,
    ) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, R>>>,
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        let give_up_at = tokio::time::Instant::now() + patience;
        let mut attempt = 0;
        // What the last transient failure was: throttling, or no answer at all.
        let unreachable = loop {
            self.budget.acquire().await;
            match operation().await {
                Ok(value) => return Ok(value),
                Err(error) if is_transient(&error) => {
                    let unreachable =
                        (!matches!(error, SdkError::ServiceError(_))).then(|| causes(&error));
                    let patient = unreachable.is_none() && tokio::time::Instant::now() < give_up_at;
                    if attempt + 1 >= self.backoff.max_attempts && !patient {
                        break unreachable;
                    }
                    let delay = self.backoff.delay(attempt, &mut rng);
                    tracing::debug!(what, attempt, ?delay, code = ?error.code(), "Route53 throttled or unreachable; backing off");
                    attempt += 1;
                    tokio::time::sleep(delay).await;
                }
                Err(error) => {
                    let message = error.message().map(str::to_string).unwrap_or_else(|| {
                        aws_smithy_types::error::display::DisplayErrorContext(&error).to_string()
                    });
                    if refused_as_stale(error.code(), &message) {
                        tracing::debug!(what, %message, "Route53 refused a change as stale");
                        return Err(ProviderError::Stale(format!("{what}: {message}")));
                    }
                    return Err(ProviderError::Rejected(format!("{what}: {message}")));
                }
            }
        };
        Err(match unreachable {
            Some(error) => ProviderError::Other(format!(
                "{what}: no answer after {} tries: {error}",
                self.backoff.max_attempts
            )),
            None => ProviderError::Throttled(what.to_string()),
        })
    }

    /// The records a plan for `root_host` that began at `since` reads, from a listing of the
    /// zone that started after it, shared with the other plans of this process that began
    /// before that listing (see [`crate::listing`]).
    pub async fn host_records_since(
        &self,
        zone_id: &str,
        root_host: &str,
        since: std::time::Instant,
    ) -> Result<Vec<Endpoint>, ProviderError> {
        self.listings
            .host_records_since(zone_id, root_host, since, || self.records(zone_id))
            .await
    }

    /// One record set (name and type) without listing the zone: one call, one item.
    pub async fn read_record(
        &self,
        zone_id: &str,
        name: &str,
        record_type: meridian_dns::model::RecordType,
    ) -> Result<Option<Endpoint>, ProviderError> {
        let request = || {
            self.client
                .list_resource_record_sets()
                .hosted_zone_id(zone_id)
                .start_record_name(name)
                .start_record_type(rr_type(record_type))
                .max_items(1)
                .send()
        };
        let page = self.call("ListResourceRecordSets", request).await?;
        Ok(page
            .resource_record_sets()
            .iter()
            .filter_map(from_rrset)
            .find(|e| e.dns_name == name && e.record_type == record_type))
    }

    /// The record sets at or below `host` (a `*.` wildcard's base): read from the host's own
    /// name onward, one call for a host of up to [`HOST_READ_ITEMS`] record sets, instead of a
    /// listing of the whole zone. Route53 orders names with their labels reversed
    /// (`com.example.shared.www`), and so does moto, comparing the reversed names as strings.
    /// Either way the names whose reversed form begins with the host's (its subtree, and
    /// siblings such as `shared-a` beside `shared`) come together from the host's own name on,
    /// so the read stops at the first name past them. The ownership records of the host's own
    /// name sit beside it (`kuadrant-<code>-a-<host>`), not under it, and are not read. A page
    /// that says there is more but not where, or would start where the last one did (moto
    /// ignores the set identifier to start from), fails the read rather than return part of
    /// the host.
    pub async fn host_records(
        &self,
        zone_id: &str,
        host: &str,
    ) -> Result<Vec<Endpoint>, ProviderError> {
        Ok(self.host_records_paged(zone_id, host).await?.0)
    }

    /// [`Self::host_records`], and how many calls the read took: a host whose names share
    /// their first characters with many siblings (`api`, `api-eu`, `api2`…) pages through
    /// those too, and a caller choosing between this read and a one-item one needs to know.
    pub async fn host_records_paged(
        &self,
        zone_id: &str,
        host: &str,
    ) -> Result<(Vec<Endpoint>, u32), ProviderError> {
        let mut calls = 0_u32;
        let base = host.trim_start_matches("*.").to_ascii_lowercase();
        let reversed_base = reversed_labels(&base);
        let mut records: std::collections::BTreeMap<meridian_dns::model::RecordKey, Endpoint> =
            std::collections::BTreeMap::new();
        let mut start: (String, Option<RrType>, Option<String>) = (base.clone(), None, None);
        loop {
            let request = || {
                self.client
                    .list_resource_record_sets()
                    .hosted_zone_id(zone_id)
                    .start_record_name(&start.0)
                    .set_start_record_type(start.1.clone())
                    .set_start_record_identifier(start.2.clone())
                    .max_items(HOST_READ_ITEMS)
                    .send()
            };
            let page = self.call("ListResourceRecordSets", request).await?;
            calls += 1;
            let mut past = false;
            for rrset in page.resource_record_sets() {
                if !reversed_labels(&from_route53_name(rrset.name())).starts_with(&reversed_base) {
                    past = true;
                    break;
                }
                if let Some(record) = from_rrset(rrset)
                    && meridian_dns::model::is_at_or_below(&record.dns_name, &base)
                {
                    records.entry(record.key()).or_insert(record);
                }
            }
            if past || !page.is_truncated() {
                break;
            }
            let next = match (page.next_record_name(), page.next_record_type()) {
                (Some(name), Some(record_type)) => (
                    name.to_string(),
                    Some(record_type.clone()),
                    page.next_record_identifier().map(str::to_string),
                ),
                _ => {
                    return Err(ProviderError::Other(format!(
                        "reading {base}: Route53 said there is more but not where it starts"
                    )));
                }
            };
            if next == start {
                return Err(ProviderError::Other(format!(
                    "reading {base}: the next page would start where the last did ({})",
                    next.0
                )));
            }
            start = next;
        }
        Ok((records.into_values().collect(), calls))
    }

    async fn change(&self, zone_id: &str, changes: &[Change]) -> Result<(), ProviderError> {
        let aws_changes = changes
            .iter()
            .map(to_aws_changes)
            .collect::<Result<Vec<_>, _>>()?
            .concat();
        let batch = ChangeBatch::builder()
            .set_changes(Some(aws_changes))
            .build()
            .map_err(|e| ProviderError::Invalid(e.to_string()))?;
        self.call("ChangeResourceRecordSets", || {
            self.client
                .change_resource_record_sets()
                .hosted_zone_id(zone_id)
                .change_batch(batch.clone())
                .send()
        })
        .await
        .map(drop)
    }
}

/// An error and its sources, one after another (`dispatch failure: io error: …`), without the
/// debug dump the SDK's own context display adds.
fn causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.ends_with(&more) {
            text = format!("{text}: {more}");
        }
        source = cause.source();
    }
    text
}

/// Whether Route53 refused a change batch because the records were not as the batch said: a
/// deletion found nothing or other values, or a creation found the record there. Another writer
/// got there first (or an earlier try of this very batch landed, its answer lost): nothing of
/// the batch was applied, and a fresh read and plan will do.
fn refused_as_stale(code: Option<&str>, message: &str) -> bool {
    const NOT_AS_PLANNED: [&str; 3] = [
        "but it was not found",
        "values provided do not match the current values",
        "but it already exists",
    ];
    code == Some("InvalidChangeBatch") && NOT_AS_PLANNED.iter().any(|m| message.contains(m))
}

fn is_transient<E: ProvideErrorMetadata, R>(error: &SdkError<E, R>) -> bool {
    match error {
        SdkError::ServiceError(_) => matches!(
            error.code(),
            Some(
                "Throttling"
                    | "ThrottlingException"
                    | "PriorRequestNotComplete"
                    | "RequestLimitExceeded"
                    | "TooManyRequestsException"
            )
        ),
        SdkError::DispatchFailure(_) | SdkError::TimeoutError(_) | SdkError::ResponseError(_) => {
            true
        }
        _ => false,
    }
}

impl Provider for Route53Provider {
    async fn list_zones(&self) -> Result<Vec<ZoneInfo>, ProviderError> {
        if let Some(zones) = self.zones.lock().expect("zones lock").clone() {
            return Ok(zones);
        }
        let mut zones = Vec::new();
        let mut marker: Option<String> = None;
        loop {
            let page = self
                .call("ListHostedZones", || {
                    self.client
                        .list_hosted_zones()
                        .set_marker(marker.clone())
                        .send()
                })
                .await?;
            zones.extend(page.hosted_zones().iter().map(|zone| ZoneInfo {
                id: zone.id().trim_start_matches("/hostedzone/").to_string(),
                domain: from_route53_name(zone.name()),
            }));
            match page.next_marker() {
                Some(next) if page.is_truncated() => marker = Some(next.to_string()),
                _ => break,
            }
        }
        *self.zones.lock().expect("zones lock") = Some(zones.clone());
        Ok(zones)
    }

    async fn records(&self, zone_id: &str) -> Result<Vec<Endpoint>, ProviderError> {
        // Keyed by name, type and set identifier: a page that restarts inside a set of
        // identified records (moto ignores StartRecordIdentifier) must not duplicate them.
        let mut records: std::collections::BTreeMap<meridian_dns::model::RecordKey, Endpoint> =
            std::collections::BTreeMap::new();
        let mut start: Option<(String, RrType, Option<String>)> = None;
        loop {
            let request = || {
                let mut request = self
                    .client
                    .list_resource_record_sets()
                    .hosted_zone_id(zone_id);
                if let Some((name, record_type, identifier)) = &start {
                    request = request
                        .start_record_name(name)
                        .start_record_type(record_type.clone())
                        .set_start_record_identifier(identifier.clone());
                }
                request.send()
            };
            let page = self
                .call_with_patience("ListResourceRecordSets", self.list_patience, request)
                .await?;
            for record in page.resource_record_sets().iter().filter_map(from_rrset) {
                records.entry(record.key()).or_insert(record);
            }
            match (
                page.is_truncated(),
                page.next_record_name(),
                page.next_record_type(),
            ) {
                (true, Some(name), Some(record_type)) => {
                    start = Some((
                        name.to_string(),
                        record_type.clone(),
                        page.next_record_identifier().map(str::to_string),
                    ));
                }
                _ => break,
            }
        }
        Ok(records.into_values().collect())
    }

    async fn apply(&self, zone_id: &str, changes: &Changes) -> Result<(), ProviderError> {
        validate(changes)?;
        let batches = pack(group_by_name(changes), ROUTE53_LIMITS);
        let sent = send_batches(batches, move |batch: Vec<Change>| async move {
            self.change(zone_id, &batch).await
        })
        .await;
        self.listings
            .wrote(zone_id, &as_written(changes), sent.is_ok());
        sent
    }
}

/// Refuses what Route53 cannot hold before any call, with one message for status.
pub fn validate(changes: &Changes) -> Result<(), ProviderError> {
    let mut problems = Vec::new();
    for record in changes
        .creates
        .iter()
        .chain(changes.updates.iter().map(|u| &u.new))
    {
        if let Some(weight) = record.property(WEIGHT)
            && weight.parse::<u8>().is_err()
        {
            problems.push(format!(
                "{}: weight {weight:?} is not an integer between 0 and 255",
                record.dns_name
            ));
        }
        if let Some(code) = record.property(GEO_CODE)
            && geo_location(code).is_none()
        {
            problems.push(format!(
                "{}: geo code {code:?} is not a country, GEO-<continent> or *",
                record.dns_name
            ));
        }
        if record.set_identifier.is_some()
            && record.property(WEIGHT).is_none()
            && record.property(GEO_CODE).is_none()
        {
            problems.push(format!(
                "{}: a set identifier needs a weight or a geo code",
                record.dns_name
            ));
        }
        if record.targets.is_empty() {
            problems.push(format!("{}: no values", record.dns_name));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ProviderError::Invalid(problems.join("; ")))
    }
}

fn geo_location(code: &str) -> Option<GeoLocation> {
    let builder = GeoLocation::builder();
    if code == "*" {
        return Some(builder.country_code("*").build());
    }
    if let Some(continent) = code.strip_prefix("GEO-") {
        return CONTINENTS
            .contains(&continent)
            .then(|| builder.continent_code(continent).build());
    }
    (code.len() == 2 && code.bytes().all(|b| b.is_ascii_uppercase()))
        .then(|| builder.country_code(code).build())
}

fn rr_type(record_type: RecordType) -> RrType {
    match record_type {
        RecordType::A => RrType::A,
        RecordType::Aaaa => RrType::Aaaa,
        RecordType::Cname => RrType::Cname,
        RecordType::Txt => RrType::Txt,
        RecordType::Ns => RrType::Ns,
        RecordType::Srv => RrType::Srv,
        RecordType::Mx => RrType::Mx,
        RecordType::Caa => RrType::Caa,
    }
}

fn record_type(rr_type: &RrType) -> Option<RecordType> {
    Some(match rr_type {
        RrType::A => RecordType::A,
        RrType::Aaaa => RecordType::Aaaa,
        RrType::Cname => RecordType::Cname,
        RrType::Txt => RecordType::Txt,
        RrType::Ns => RecordType::Ns,
        RrType::Srv => RecordType::Srv,
        RrType::Mx => RecordType::Mx,
        RrType::Caa => RecordType::Caa,
        _ => return None,
    })
}

/// `changes` as Route53 holds them once written: a TTL of 0 is the default, 300 s (what a
/// listing would read back, and a later DELETE must match).
fn as_written(changes: &Changes) -> Changes {
    let held = |record: &Endpoint| {
        let mut record = record.clone();
        if record.record_ttl == 0 {
            record.record_ttl = 300;
        }
        record
    };
    Changes {
        creates: changes.creates.iter().map(held).collect(),
        updates: changes
            .updates
            .iter()
            .map(|u| meridian_dns::changes::Update {
                old: u.old.clone(),
                new: held(&u.new),
            })
            .collect(),
        deletes: changes.deletes.clone(),
    }
}

/// `record` as a record set to write: a TTL of 0 means the default, 300 s.
fn to_rrset(record: &Endpoint) -> Result<ResourceRecordSet, ProviderError> {
    to_rrset_ttl(record, record.record_ttl == 0)
}

/// `record` as the record set a listing gave: its TTL exactly, 0 included, since a DELETE
/// must match the record set exactly.
fn as_read(record: &Endpoint) -> Result<ResourceRecordSet, ProviderError> {
    to_rrset_ttl(record, false)
}

fn to_rrset_ttl(record: &Endpoint, default_ttl: bool) -> Result<ResourceRecordSet, ProviderError> {
    let values = record
        .targets
        .iter()
        .map(|target| {
            let value = if record.record_type == RecordType::Txt {
                quote_txt(target)
            } else {
                target.clone()
            };
            ResourceRecord::builder()
                .value(value)
                .build()
                .map_err(|e| ProviderError::Invalid(e.to_string()))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ttl = if default_ttl {
        300
    } else {
        i64::from(record.record_ttl)
    };
    let mut builder = ResourceRecordSet::builder()
        .name(&record.dns_name)
        .r#type(rr_type(record.record_type))
        .ttl(ttl)
        .set_resource_records(Some(values))
        .set_set_identifier(record.set_identifier.clone());
    if record.set_identifier.is_some() {
        if let Some(weight) = record.property(WEIGHT).and_then(|w| w.parse::<i64>().ok()) {
            builder = builder.weight(weight);
        } else if let Some(location) = record.property(GEO_CODE).and_then(geo_location) {
            builder = builder.geo_location(location);
        }
    }
    builder
        .build()
        .map_err(|e| ProviderError::Invalid(e.to_string()))
}

/// The Route53 changes of one change, conditional where the plan says what it expects: a
/// batch is applied whole or not at all, a deletion must match the record set exactly, and a
/// creation must find none. An update is the deletion of the record it replaces and the
/// creation of the new one, so another writer's change since the plan's read refuses the batch
/// ([`refused_as_stale`]) instead of being overwritten; so does a concurrent creation. A try
/// whose answer was lost and that in fact landed is refused the same way when retried, and the
/// fresh plan finds nothing left to do.
fn to_aws_changes(change: &Change) -> Result<Vec<AwsChange>, ProviderError> {
    let one = |action: ChangeAction, record: &Endpoint| {
        let rrset = if action == ChangeAction::Delete {
            as_read(record)?
        } else {
            to_rrset(record)?
        };
        AwsChange::builder()
            .action(action)
            .resource_record_set(rrset)
            .build()
            .map_err(|e| ProviderError::Invalid(e.to_string()))
    };
    Ok(match (change.action, &change.replaces) {
        (Action::Delete, _) => vec![one(ChangeAction::Delete, &change.record)?],
        (Action::Create, _) => vec![one(ChangeAction::Create, &change.record)?],
        (Action::Upsert, Some(old)) => vec![
            one(ChangeAction::Delete, old)?,
            one(ChangeAction::Create, &change.record)?,
        ],
        // An upsert from outside a plan (no record it replaces) overwrites what is there.
        (Action::Upsert, None) => vec![one(ChangeAction::Upsert, &change.record)?],
    })
}

/// How many record sets a read of one host's records asks for at a time.
pub const HOST_READ_ITEMS: i32 = 300;

/// A name's labels in reverse order, dot-separated (`shared.example.com` → `com.example.shared`).
fn reversed_labels(name: &str) -> String {
    name.trim_end_matches('.')
        .rsplit('.')
        .collect::<Vec<_>>()
        .join(".")
}

/// Route53 writes names with a trailing dot and `*` as `\052`.
fn from_route53_name(name: &str) -> String {
    name.replace("\\052", "*")
        .trim_end_matches('.')
        .to_ascii_lowercase()
}

fn from_rrset(rrset: &ResourceRecordSet) -> Option<Endpoint> {
    let record_type = record_type(rrset.r#type())?;
    if rrset.alias_target().is_some() {
        return None; // alias records are Route53's own construct; never ours
    }
    let targets: Vec<String> = rrset
        .resource_records()
        .iter()
        .map(|r| {
            if record_type == RecordType::Txt {
                unquote_txt(r.value())
            } else {
                r.value().trim_end_matches('.').to_string()
            }
        })
        .collect();
    let mut endpoint = Endpoint::new(
        from_route53_name(rrset.name()),
        record_type,
        targets,
        rrset.ttl().unwrap_or(0).try_into().unwrap_or(0),
    );
    endpoint.set_identifier = rrset.set_identifier().map(str::to_string);
    if let Some(weight) = rrset.weight() {
        endpoint.provider_specific.push(ProviderSpecific {
            name: WEIGHT.to_string(),
            value: weight.to_string(),
        });
    }
    if let Some(location) = rrset.geo_location() {
        let code = match (location.continent_code(), location.country_code()) {
            (Some(continent), _) => format!("GEO-{continent}"),
            (None, Some(country)) => country.to_string(),
            (None, None) => return Some(endpoint),
        };
        endpoint.provider_specific.push(ProviderSpecific {
            name: GEO_CODE.to_string(),
            value: code,
        });
    }
    endpoint.normalize();
    Some(endpoint)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_through_route53_shapes() {
        use meridian_testkit::trees::{four_clusters, geo_policy_weighing_azure, tree};
        // Every shape of a GEO/weighted tree (GEO choices, the catch-all, weighted choices, A
        // and CNAME leaves), an ownership record and a wildcard.
        let mut records = tree(
            "api.example.com",
            &geo_policy_weighing_azure(30),
            &four_clusters(),
        );
        records.extend([
            Endpoint::new(
                "kuadrant-x-a-api.example.com",
                RecordType::Txt,
                ["heritage=external-dns,external-dns/owner=\"o\"".to_string()],
                60,
            ),
            Endpoint::new(
                "*.apps.example.com",
                RecordType::A,
                ["192.0.2.1".to_string()],
                60,
            ),
        ]);
        for record in records {
            let mut rrset = to_rrset(&record).unwrap();
            rrset.name = rrset.name.replace('*', "\\052") + ".";
            assert_eq!(from_rrset(&rrset).unwrap(), record);
        }
    }

    #[test]
    fn invalid_weights_and_geo_codes_are_refused_before_any_call() {
        let bad = |property: &str, value: &str| {
            Endpoint::new(
                "x.example.com",
                RecordType::A,
                ["192.0.2.1".to_string()],
                60,
            )
            .with_set_identifier("s")
            .with_property(property, value)
        };
        for (record, expected) in [
            (bad(WEIGHT, "256"), "between 0 and 255"),
            (bad(WEIGHT, "-1"), "between 0 and 255"),
            (bad(GEO_CODE, "GEO-XX"), "geo code"),
            (bad(GEO_CODE, "ie"), "geo code"),
            (
                Endpoint::new(
                    "x.example.com",
                    RecordType::A,
                    ["192.0.2.1".to_string()],
                    60,
                )
                .with_set_identifier("s"),
                "needs a weight",
            ),
        ] {
            let error = validate(&Changes {
                creates: vec![record],
                ..Default::default()
            })
            .unwrap_err();
            assert!(error.to_string().contains(expected), "{error}");
        }
    }

    #[test]
    fn an_update_deletes_exactly_what_the_plan_read_and_creates_the_new_record() {
        let txt = |value: &str| {
            Endpoint::new(
                "kuadrant.members.api.example.com",
                RecordType::Txt,
                [value.to_string()],
                60,
            )
        };
        let sent = |change: Change| -> Vec<(ChangeAction, Endpoint)> {
            to_aws_changes(&change)
                .unwrap()
                .into_iter()
                .map(|c| {
                    let rrset = c.resource_record_set().unwrap().clone();
                    (c.action().clone(), from_rrset(&rrset).unwrap())
                })
                .collect()
        };
        let (old, new) = (txt("a,b"), txt("a,b,c"));
        assert_eq!(
            sent(Change {
                action: Action::Upsert,
                record: new.clone(),
                replaces: Some(old.clone()),
            }),
            [
                (ChangeAction::Delete, old.clone()),
                (ChangeAction::Create, new.clone())
            ],
            "a conditional update: refused if the record is no longer a,b"
        );
        assert_eq!(
            sent(Change {
                action: Action::Create,
                record: new.clone(),
                replaces: None,
            }),
            [(ChangeAction::Create, new.clone())],
            "a create is refused if someone created the record meanwhile"
        );
        assert_eq!(
            sent(Change {
                action: Action::Upsert,
                record: new.clone(),
                replaces: None,
            }),
            [(ChangeAction::Upsert, new.clone())]
        );
        assert_eq!(
            sent(Change {
                action: Action::Delete,
                record: old.clone(),
                replaces: None,
            }),
            [(ChangeAction::Delete, old)]
        );
        // A record read with a TTL of 0 is deleted as read (written, 0 means the default).
        let zero = Endpoint::new("z.example.com", RecordType::A, ["192.0.2.1".to_string()], 0);
        let deleted = to_aws_changes(&Change {
            action: Action::Delete,
            record: zero.clone(),
            replaces: None,
        })
        .unwrap();
        assert_eq!(deleted[0].resource_record_set().unwrap().ttl(), Some(0));
        let created = to_aws_changes(&Change {
            action: Action::Create,
            record: zero,
            replaces: None,
        })
        .unwrap();
        assert_eq!(created[0].resource_record_set().unwrap().ttl(), Some(300));
    }

    #[test]
    fn a_batch_refused_for_records_not_as_planned_is_stale_and_nothing_else_is() {
        let cases = [
            (
                "InvalidChangeBatch",
                "[Tried to delete resource record set [name='a.example.com.', type='TXT'] but the values provided do not match the current values]",
                true,
            ),
            (
                "InvalidChangeBatch",
                "[Tried to delete resource record set [name='a.example.com.', type='A'] but it was not found]",
                true,
            ),
            (
                "InvalidChangeBatch",
                "[Tried to create resource record set [name='a.example.com.', type='A'] but it already exists]",
                true,
            ),
            (
                "InvalidChangeBatch",
                "[RRSet of type CNAME with DNS name a.example.com. is not permitted as it conflicts with other records with the same DNS name in zone example.com.]",
                false,
            ),
            (
                "InvalidChangeBatch",
                "Number of records limit of 1000 exceeded.",
                false,
            ),
            ("InvalidInput", "but it was not found", false),
        ];
        for (code, message, stale) in cases {
            assert_eq!(
                refused_as_stale(Some(code), message),
                stale,
                "{code}: {message}"
            );
        }
        assert!(!refused_as_stale(None, "but it already exists"));
    }
}
