//! Route53 through aws-sdk-route53: weighted (0–255) and geolocation records with set
//! identifiers, batches within Route53's limits, a record and its ownership record in one batch
//! with deletes first, name-by-name retry after a refused batch, one request budget per account,
//! backoff with jitter when throttled, and a cached zone list.

use std::future::Future;
use std::sync::{Arc, Mutex};

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
    zones: Mutex<Option<Vec<ZoneInfo>>>,
}

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
            zones: Mutex::new(None),
        }
    }

    pub fn with_backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Forgets the cached zone list (after a zone was created or deleted).
    pub fn invalidate_zones(&self) {
        *self.zones.lock().expect("zones lock") = None;
    }

    /// Runs one API call within the budget, retrying throttling and transport errors with
    /// backoff; any other error is final.
    async fn call<T, E, R, F, Fut>(&self, what: &str, mut operation: F) -> Result<T, ProviderError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SdkError<E, R>>>,
        E: ProvideErrorMetadata + std::error::Error + 'static,
        R: std::fmt::Debug,
    {
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        // What the last transient failure was: throttling, or no answer at all.
        let mut unreachable = None;
        for attempt in 0..self.backoff.max_attempts {
            self.budget.acquire().await;
            match operation().await {
                Ok(value) => return Ok(value),
                Err(error) if is_transient(&error) => {
                    let delay = self.backoff.delay(attempt, &mut rng);
                    tracing::debug!(what, attempt, ?delay, code = ?error.code(), "Route53 throttled or unreachable; backing off");
                    unreachable =
                        (!matches!(error, SdkError::ServiceError(_))).then(|| causes(&error));
                    tokio::time::sleep(delay).await;
                }
                Err(error) => {
                    let message = error.message().map(str::to_string).unwrap_or_else(|| {
                        aws_smithy_types::error::display::DisplayErrorContext(&error).to_string()
                    });
                    return Err(ProviderError::Rejected(format!("{what}: {message}")));
                }
            }
        }
        Err(match unreachable {
            Some(error) => ProviderError::Other(format!(
                "{what}: no answer after {} tries: {error}",
                self.backoff.max_attempts
            )),
            None => ProviderError::Throttled(what.to_string()),
        })
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

    async fn change(&self, zone_id: &str, changes: &[Change]) -> Result<(), ProviderError> {
        let aws_changes = changes
            .iter()
            .map(to_aws_change)
            .collect::<Result<Vec<_>, _>>()?;
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
            let page = self.call("ListResourceRecordSets", request).await?;
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
        send_batches(batches, move |batch: Vec<Change>| async move {
            self.change(zone_id, &batch).await
        })
        .await
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

fn to_rrset(record: &Endpoint) -> Result<ResourceRecordSet, ProviderError> {
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
    let ttl = if record.record_ttl == 0 {
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

fn to_aws_change(change: &Change) -> Result<AwsChange, ProviderError> {
    // Creates go out as UPSERTs: a batch retried after a timeout that in fact landed must not
    // fail forever on "already exists". The plan has already checked the record is absent or
    // ours, so an UPSERT cannot take over anyone else's record.
    let action = match change.action {
        Action::Delete => ChangeAction::Delete,
        Action::Upsert | Action::Create => ChangeAction::Upsert,
    };
    AwsChange::builder()
        .action(action)
        .resource_record_set(to_rrset(&change.record)?)
        .build()
        .map_err(|e| ProviderError::Invalid(e.to_string()))
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
}
