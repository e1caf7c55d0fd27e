//! A small typed client for the two Azure Resource Manager APIs the provider uses: Azure DNS
//! record sets (`Microsoft.Network/dnsZones`, api-version 2018-05-01) and Traffic Manager
//! profiles (`Microsoft.Network/trafficmanagerprofiles`, api-version 2022-04-01).
//!
//! Requests go through an `azure_core` pipeline: the bearer-token policy (Entra ID tokens from
//! `azure_identity`) and the exponential retry policy, which retries 429 and 5xx answers and
//! waits at least as long as `Retry-After` says. Each attempt first takes a slot from the
//! account's [`RequestBudget`], so retries are paced like everything else.

use std::sync::Arc;

use azure_core::credentials::TokenCredential;
use azure_core::http::headers::HeaderName;
use azure_core::http::policies::auth::BearerTokenAuthorizationPolicy;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{
    ClientOptions, Context, ExponentialRetryOptions, Method, Pipeline, PipelineSendOptions,
    Request, RetryOptions, Url,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::budget::RequestBudget;
use meridian_dns::model::{RecordType, txt_strings};

pub const DNS_API_VERSION: &str = "2018-05-01";
pub const TRAFFIC_MANAGER_API_VERSION: &str = "2022-04-01";
/// The ARM resource type of a profile, as resource IDs and endpoint types spell it.
pub const PROFILE_TYPE: &str = "Microsoft.Network/trafficManagerProfiles";
pub const EXTERNAL_ENDPOINT: &str = "Microsoft.Network/trafficManagerProfiles/externalEndpoints";
pub const NESTED_ENDPOINT: &str = "Microsoft.Network/trafficManagerProfiles/nestedEndpoints";

/// An ARM error answer: the HTTP status and the `error.code` / `error.message` of its body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ArmError {
    pub status: u16,
    pub code: String,
    pub message: String,
}

impl ArmError {
    fn transport(error: impl std::fmt::Display) -> Self {
        ArmError {
            status: 0,
            code: "Transport".into(),
            message: error.to_string(),
        }
    }

    /// The resource changed since its ETag was read (or exists when it should not).
    pub fn is_precondition_failed(&self) -> bool {
        self.status == 412
    }

    pub fn is_throttled(&self) -> bool {
        self.status == 429
    }
}

#[derive(Debug, Deserialize)]
struct ErrorBody {
    error: ErrorDetail,
}

#[derive(Debug, Deserialize)]
struct ErrorDetail {
    code: String,
    message: String,
}

#[derive(Debug, Deserialize)]
struct Page<T> {
    value: Vec<T>,
    #[serde(rename = "nextLink")]
    next_link: Option<String>,
}

/// An Azure DNS zone.
#[derive(Debug, Clone, Deserialize)]
pub struct DnsZone {
    pub name: String,
}

/// An Azure DNS record set. Only the record lists of the types Meridian publishes are typed;
/// a record set of another type reads back with none of them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RecordSet {
    /// The name relative to the zone (`@` at the apex); not sent, it is in the URL.
    #[serde(default, skip_serializing)]
    pub name: String,
    /// `Microsoft.Network/dnszones/<TYPE>`; not sent.
    #[serde(rename = "type", default, skip_serializing)]
    pub resource_type: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub etag: Option<String>,
    pub properties: RecordSetProperties,
}

impl RecordSet {
    /// The record type, from the resource type (`Microsoft.Network/dnszones/A` → `A`).
    pub fn record_type(&self) -> &str {
        self.resource_type.rsplit('/').next().unwrap_or_default()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RecordSetProperties {
    #[serde(rename = "TTL")]
    pub ttl: u32,
    #[serde(
        rename = "targetResource",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub target_resource: Option<SubResource>,
    #[serde(rename = "ARecords", default, skip_serializing_if = "Option::is_none")]
    pub a_records: Option<Vec<ARecord>>,
    #[serde(
        rename = "AAAARecords",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub aaaa_records: Option<Vec<AaaaRecord>>,
    #[serde(
        rename = "CNAMERecord",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub cname_record: Option<CnameRecord>,
    #[serde(
        rename = "TXTRecords",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub txt_records: Option<Vec<TxtRecord>>,
    #[serde(rename = "NSRecords", default, skip_serializing_if = "Option::is_none")]
    pub ns_records: Option<Vec<NsRecord>>,
}

impl RecordSetProperties {
    /// The values of a plain record set of `record_type`: addresses, names without a final
    /// dot, or each TXT record's strings joined; `None` for types Meridian does not read.
    pub fn values(&self, record_type: RecordType) -> Option<Vec<String>> {
        let name = |n: &str| n.trim_end_matches('.').to_string();
        Some(match record_type {
            RecordType::A => self
                .a_records
                .iter()
                .flatten()
                .map(|r| r.ipv4_address.clone())
                .collect(),
            RecordType::Aaaa => self
                .aaaa_records
                .iter()
                .flatten()
                .map(|r| r.ipv6_address.clone())
                .collect(),
            RecordType::Cname => self.cname_record.iter().map(|r| name(&r.cname)).collect(),
            RecordType::Ns => self
                .ns_records
                .iter()
                .flatten()
                .map(|r| name(&r.nsdname))
                .collect(),
            RecordType::Txt => self
                .txt_records
                .iter()
                .flatten()
                .map(|r| r.value.concat())
                .collect(),
            _ => return None,
        })
    }

    /// A plain record set of `record_type` holding `values` (the inverse of [`Self::values`]:
    /// TXT values are split into strings of at most 255 bytes, a CNAME keeps its first value).
    pub fn with_values(ttl: u32, record_type: RecordType, values: Vec<String>) -> Option<Self> {
        let mut properties = RecordSetProperties {
            ttl,
            ..Default::default()
        };
        let values = values.into_iter();
        match record_type {
            RecordType::A => {
                properties.a_records = Some(
                    values
                        .map(|ipv4_address| ARecord { ipv4_address })
                        .collect(),
                )
            }
            RecordType::Aaaa => {
                properties.aaaa_records = Some(
                    values
                        .map(|ipv6_address| AaaaRecord { ipv6_address })
                        .collect(),
                )
            }
            RecordType::Cname => {
                properties.cname_record = values.take(1).map(|cname| CnameRecord { cname }).next()
            }
            RecordType::Ns => {
                properties.ns_records = Some(values.map(|nsdname| NsRecord { nsdname }).collect())
            }
            RecordType::Txt => {
                properties.txt_records = Some(
                    values
                        .map(|v| TxtRecord {
                            value: txt_strings(&v),
                        })
                        .collect(),
                )
            }
            _ => return None,
        }
        Some(properties)
    }
}

/// A reference to another ARM resource (an alias record set's target).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubResource {
    pub id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ARecord {
    #[serde(rename = "ipv4Address")]
    pub ipv4_address: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AaaaRecord {
    #[serde(rename = "ipv6Address")]
    pub ipv6_address: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CnameRecord {
    pub cname: String,
}

/// One TXT record: its character strings, each at most 255 bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TxtRecord {
    pub value: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NsRecord {
    pub nsdname: String,
}

/// A Traffic Manager profile. Fields Meridian does not model are kept as they were read and
/// sent back unchanged (`extra`), so a profile someone tuned keeps its tuning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    #[serde(default, skip_serializing)]
    pub id: String,
    #[serde(default, skip_serializing)]
    pub name: String,
    pub location: String,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub tags: std::collections::BTreeMap<String, String>,
    pub properties: ProfileProperties,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileProperties {
    #[serde(rename = "profileStatus")]
    pub profile_status: String,
    #[serde(rename = "trafficRoutingMethod")]
    pub traffic_routing_method: String,
    #[serde(rename = "dnsConfig")]
    pub dns_config: DnsConfig,
    #[serde(rename = "monitorConfig")]
    pub monitor_config: serde_json::Value,
    #[serde(default)]
    pub endpoints: Vec<TrafficEndpoint>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DnsConfig {
    #[serde(rename = "relativeName")]
    pub relative_name: String,
    pub ttl: u32,
    /// `<relativeName>.trafficmanager.net`; set by the service, not sent.
    #[serde(default, skip_serializing)]
    pub fqdn: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrafficEndpoint {
    pub name: String,
    #[serde(rename = "type")]
    pub endpoint_type: String,
    pub properties: EndpointProperties,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct EndpointProperties {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(
        rename = "targetResourceId",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub target_resource_id: Option<String>,
    #[serde(
        rename = "endpointStatus",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub endpoint_status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<u32>,
    #[serde(
        rename = "geoMapping",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub geo_mapping: Option<Vec<String>>,
    #[serde(
        rename = "minChildEndpoints",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub min_child_endpoints: Option<u32>,
    #[serde(
        rename = "alwaysServe",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub always_serve: Option<String>,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, serde_json::Value>,
}

/// What a write requires of the resource's current version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Precondition {
    /// Create only: `If-None-Match: *`.
    Absent,
    /// Replace or delete only this version: `If-Match: <etag>`.
    Version(String),
    /// Unconditional (Traffic Manager profiles carry no ETag).
    Any,
}

/// Where the client sends requests.
#[derive(Debug, Clone)]
pub struct ArmScope {
    pub resource_manager: Url,
    pub subscription: String,
    pub resource_group: String,
}

impl ArmScope {
    fn group_path(&self) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network",
            self.subscription, self.resource_group
        )
    }

    /// The resource ID of profile `name` (what nested endpoints and alias records point at).
    pub fn profile_id(&self, name: &str) -> String {
        format!("{}/trafficmanagerprofiles/{name}", self.group_path())
    }
}

/// Takes a budget slot before every attempt, retries included.
#[derive(Debug)]
struct BudgetPolicy(Arc<RequestBudget>);

#[async_trait::async_trait]
impl Policy for BudgetPolicy {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        self.0.acquire().await;
        next[0].send(ctx, request, &next[1..]).await
    }
}

/// The typed ARM client for one subscription and resource group.
#[derive(Debug, Clone)]
pub struct ArmClient {
    pipeline: Pipeline,
    scope: ArmScope,
}

impl ArmClient {
    pub fn new(
        scope: ArmScope,
        credential: Arc<dyn TokenCredential>,
        token_scope: String,
        mut options: ClientOptions,
        budget: Arc<RequestBudget>,
        retry: ExponentialRetryOptions,
    ) -> Self {
        options.retry = RetryOptions::exponential(retry);
        let auth: Arc<dyn Policy> = Arc::new(BearerTokenAuthorizationPolicy::new(
            credential,
            vec![token_scope],
        ));
        let pace: Arc<dyn Policy> = Arc::new(BudgetPolicy(budget));
        let pipeline = Pipeline::new(
            Some("meridian-providers"),
            Some(env!("CARGO_PKG_VERSION")),
            options,
            vec![auth],
            vec![pace],
            None,
        );
        ArmClient { pipeline, scope }
    }

    pub fn scope(&self) -> &ArmScope {
        &self.scope
    }

    fn url(&self, path: &str, api_version: &str) -> Result<Url, ArmError> {
        let mut url = self
            .scope
            .resource_manager
            .join(path)
            .map_err(ArmError::transport)?;
        url.query_pairs_mut()
            .append_pair("api-version", api_version);
        Ok(url)
    }

    /// Sends one request; a 2xx answer's body is returned, anything else is an [`ArmError`]
    /// with the code and message of Azure's error body.
    async fn send(
        &self,
        method: Method,
        url: Url,
        precondition: &Precondition,
        body: Option<Vec<u8>>,
    ) -> Result<Vec<u8>, ArmError> {
        let mut request = Request::new(url, method);
        match precondition {
            Precondition::Absent => {
                request.insert_header(HeaderName::from_static("if-none-match"), "*")
            }
            Precondition::Version(etag) => {
                request.insert_header(HeaderName::from_static("if-match"), etag.clone())
            }
            Precondition::Any => {}
        }
        if let Some(body) = body {
            request.insert_header(HeaderName::from_static("content-type"), "application/json");
            request.set_body(body);
        }
        let response = self
            .pipeline
            .send(
                &Context::new(),
                &mut request,
                Some(PipelineSendOptions {
                    skip_checks: true,
                    ..Default::default()
                }),
            )
            .await
            .map_err(ArmError::transport)?;
        let status = u16::from(response.status());
        let body = response.into_body().to_vec();
        if (200..300).contains(&status) {
            return Ok(body);
        }
        let (code, message) = match serde_json::from_slice::<ErrorBody>(&body) {
            Ok(parsed) => (parsed.error.code, parsed.error.message),
            Err(_) => (
                "Unknown".into(),
                String::from_utf8_lossy(&body).chars().take(300).collect(),
            ),
        };
        Err(ArmError {
            status,
            code,
            message,
        })
    }

    async fn json<T: DeserializeOwned>(
        &self,
        method: Method,
        url: Url,
        precondition: &Precondition,
        body: Option<Vec<u8>>,
    ) -> Result<T, ArmError> {
        let bytes = self.send(method, url, precondition, body).await?;
        serde_json::from_slice(&bytes).map_err(|e| ArmError {
            status: 200,
            code: "UnreadableAnswer".into(),
            message: e.to_string(),
        })
    }

    /// Every page of a list, following `nextLink`.
    async fn list<T: DeserializeOwned>(&self, first: Url) -> Result<Vec<T>, ArmError> {
        let mut items = Vec::new();
        let mut next = Some(first);
        while let Some(url) = next.take() {
            let page: Page<T> = self
                .json(Method::Get, url, &Precondition::Any, None)
                .await?;
            items.extend(page.value);
            next = page
                .next_link
                .map(|link| Url::parse(&link).map_err(ArmError::transport))
                .transpose()?;
        }
        Ok(items)
    }

    pub async fn dns_zones(&self) -> Result<Vec<DnsZone>, ArmError> {
        let path = format!("{}/dnsZones", self.scope.group_path());
        self.list(self.url(&path, DNS_API_VERSION)?).await
    }

    fn record_sets_path(&self, zone: &str) -> String {
        format!("{}/dnsZones/{zone}", self.scope.group_path())
    }

    pub async fn record_sets(&self, zone: &str) -> Result<Vec<RecordSet>, ArmError> {
        let path = format!("{}/recordsets", self.record_sets_path(zone));
        self.list(self.url(&path, DNS_API_VERSION)?).await
    }

    /// Creates or replaces record set `name` of `record_type` (`A`, `CNAME`, …).
    pub async fn put_record_set(
        &self,
        zone: &str,
        record_type: &str,
        name: &str,
        set: &RecordSet,
        precondition: &Precondition,
    ) -> Result<RecordSet, ArmError> {
        let path = format!("{}/{record_type}/{name}", self.record_sets_path(zone));
        let body = serde_json::to_vec(set).map_err(ArmError::transport)?;
        self.json(
            Method::Put,
            self.url(&path, DNS_API_VERSION)?,
            precondition,
            Some(body),
        )
        .await
    }

    pub async fn delete_record_set(
        &self,
        zone: &str,
        record_type: &str,
        name: &str,
        precondition: &Precondition,
    ) -> Result<(), ArmError> {
        let path = format!("{}/{record_type}/{name}", self.record_sets_path(zone));
        self.send(
            Method::Delete,
            self.url(&path, DNS_API_VERSION)?,
            precondition,
            None,
        )
        .await
        .map(drop)
    }

    pub async fn profiles(&self) -> Result<Vec<Profile>, ArmError> {
        let path = format!("{}/trafficmanagerprofiles", self.scope.group_path());
        self.list(self.url(&path, TRAFFIC_MANAGER_API_VERSION)?)
            .await
    }

    pub async fn put_profile(&self, name: &str, profile: &Profile) -> Result<Profile, ArmError> {
        let path = format!("{}/trafficmanagerprofiles/{name}", self.scope.group_path());
        let body = serde_json::to_vec(profile).map_err(ArmError::transport)?;
        self.json(
            Method::Put,
            self.url(&path, TRAFFIC_MANAGER_API_VERSION)?,
            &Precondition::Any,
            Some(body),
        )
        .await
    }

    pub async fn delete_profile(&self, name: &str) -> Result<(), ArmError> {
        let path = format!("{}/trafficmanagerprofiles/{name}", self.scope.group_path());
        self.send(
            Method::Delete,
            self.url(&path, TRAFFIC_MANAGER_API_VERSION)?,
            &Precondition::Any,
            None,
        )
        .await
        .map(drop)
    }
}
