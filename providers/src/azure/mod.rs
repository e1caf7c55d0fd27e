//! Azure DNS, with weighted and GEO answers through Azure Traffic Manager.
//!
//! Azure DNS record sets have no routing of their own, so every routed name becomes a Traffic
//! Manager profile with an alias record set pointing at it ([`layout`] says exactly how).
//! There is no official Rust management crate for these APIs; [`arm`] is a small typed client
//! on `azure_core`'s pipeline, with Entra ID credentials from `azure_identity`.
//!
//! Applying reads the zone (record sets and the resource group's profiles) once and keeps it,
//! updated from every answer, so a steady-state change costs only its writes. Record-set
//! writes carry the ETag they were planned against (`If-Match`, or `If-None-Match: *` for a
//! create); when someone else changed a record set, Azure answers 412, the cached zone is
//! dropped, and the next attempt plans against a fresh read. Traffic Manager profiles carry no
//! ETag, so a profile is rewritten whole from the records as last read.

pub mod arm;
pub mod layout;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

use azure_core::cloud::{CloudConfiguration, CustomConfiguration};
use azure_core::credentials::{Secret, TokenCredential};
use azure_core::http::{ClientOptions, ExponentialRetryOptions, Transport, Url};
use azure_identity::{
    ClientAssertionCredentialOptions, ClientSecretCredential, ClientSecretCredentialOptions,
    WorkloadIdentityCredential, WorkloadIdentityCredentialOptions,
};
use futures::StreamExt;
use meridian_dns::changes::Changes;
use meridian_dns::model::{Endpoint, RecordKey};
use meridian_dns::plan::record_vouched_for;
use serde::Deserialize;

use self::arm::{ArmClient, ArmError, ArmScope, RecordSet};
use self::layout::{Call, ZoneState};
use super::budget::RequestBudget;
use super::{Provider, ProviderError, ZoneInfo};

/// Requests per second Meridian allows itself per subscription unless configured otherwise:
/// Azure Resource Manager refills 10 writes and 10 deletes per second per subscription
/// (25 reads), and this stays inside the smallest of them.
pub const AZURE_REQUESTS_PER_SECOND: u32 = 10;
/// Calls of one phase in flight at once (the budget paces them).
const CONCURRENT_CALLS: usize = 8;
const PUBLIC_RESOURCE_MANAGER: &str = "https://management.azure.com/";

/// How the provider authenticates to Entra ID.
#[derive(Clone)]
pub enum AzureAuth {
    /// A service principal's client secret.
    ClientSecret { client_id: String, secret: String },
    /// Workload identity: a federated token file projected into the pod. Unset fields come
    /// from `AZURE_CLIENT_ID` and `AZURE_FEDERATED_TOKEN_FILE` (which the workload identity
    /// webhook sets).
    WorkloadIdentity {
        client_id: Option<String>,
        token_file: Option<std::path::PathBuf>,
    },
}

impl std::fmt::Debug for AzureAuth {
    // The client secret never reaches a log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AzureAuth::ClientSecret { client_id, .. } => f
                .debug_struct("ClientSecret")
                .field("client_id", client_id)
                .finish_non_exhaustive(),
            AzureAuth::WorkloadIdentity {
                client_id,
                token_file,
            } => f
                .debug_struct("WorkloadIdentity")
                .field("client_id", client_id)
                .field("token_file", token_file)
                .finish(),
        }
    }
}

/// What a `kuadrant.io/azure` Secret holds.
#[derive(Clone, Debug)]
pub struct AzureCredentials {
    pub tenant: String,
    pub subscription: String,
    pub resource_group: String,
    pub auth: AzureAuth,
    /// Where Resource Manager and Entra ID are, and the token audience; the public cloud's when
    /// `None`.
    pub cloud: Option<CustomCloud>,
    /// A PEM certificate authority to trust besides the system's (a private cloud, the fake).
    pub extra_ca_pem: Option<String>,
}

/// A cloud other than Azure's public one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CustomCloud {
    pub resource_manager: String,
    pub authority_host: String,
}

/// The `azure.json` of a `kuadrant.io/azure` Secret, in the dns-operator's (and external-dns's)
/// field names, plus Meridian's endpoint fields for other clouds.
#[derive(Deserialize)]
struct AzureJson {
    #[serde(rename = "tenantId", default)]
    tenant_id: String,
    #[serde(rename = "subscriptionId", default)]
    subscription_id: String,
    #[serde(rename = "resourceGroup", default)]
    resource_group: String,
    #[serde(rename = "aadClientId", default)]
    aad_client_id: String,
    #[serde(rename = "aadClientSecret", default)]
    aad_client_secret: String,
    #[serde(rename = "useWorkloadIdentityExtension", default)]
    use_workload_identity_extension: bool,
    #[serde(rename = "useManagedIdentityExtension", default)]
    use_managed_identity_extension: bool,
    #[serde(rename = "resourceManagerEndpoint", default)]
    resource_manager_endpoint: String,
    #[serde(rename = "activeDirectoryAuthorityHost", default)]
    active_directory_authority_host: String,
}

impl AzureCredentials {
    /// Reads an `azure.json` document. The message of an error names the problem, never a
    /// value.
    pub fn from_azure_json(json: &str, extra_ca_pem: Option<String>) -> Result<Self, String> {
        let parsed: AzureJson =
            serde_json::from_str(json).map_err(|e| format!("azure.json is not valid: {e}"))?;
        let required = |value: &str, key: &str| {
            if value.is_empty() {
                Err(format!("azure.json lacks {key}"))
            } else {
                Ok(value.to_string())
            }
        };
        let auth = if !parsed.aad_client_secret.is_empty()
            && !parsed.aad_client_secret.eq_ignore_ascii_case("msi")
        {
            AzureAuth::ClientSecret {
                client_id: required(&parsed.aad_client_id, "aadClientId")?,
                secret: parsed.aad_client_secret,
            }
        } else if parsed.use_workload_identity_extension {
            AzureAuth::WorkloadIdentity {
                client_id: Some(parsed.aad_client_id).filter(|id| !id.is_empty()),
                token_file: None,
            }
        } else if parsed.use_managed_identity_extension {
            return Err(
                "useManagedIdentityExtension is not supported; use a client secret or workload identity"
                    .into(),
            );
        } else {
            return Err(
                "azure.json has neither aadClientId/aadClientSecret nor useWorkloadIdentityExtension"
                    .into(),
            );
        };
        let cloud = match (
            parsed.resource_manager_endpoint.is_empty(),
            parsed.active_directory_authority_host.is_empty(),
        ) {
            (true, true) => None,
            (false, false) => Some(CustomCloud {
                resource_manager: parsed.resource_manager_endpoint,
                authority_host: parsed.active_directory_authority_host,
            }),
            _ => {
                return Err(
                    "resourceManagerEndpoint and activeDirectoryAuthorityHost go together".into(),
                );
            }
        };
        Ok(AzureCredentials {
            tenant: required(&parsed.tenant_id, "tenantId")?,
            subscription: required(&parsed.subscription_id, "subscriptionId")?,
            resource_group: required(&parsed.resource_group, "resourceGroup")?,
            auth,
            cloud,
            extra_ca_pem,
        })
    }
}

/// Azure DNS and Traffic Manager for one subscription and resource group.
#[derive(Debug)]
pub struct AzureProvider {
    client: ArmClient,
    zones: Mutex<Option<Vec<ZoneInfo>>>,
    /// Each zone as last read or written.
    state: Mutex<BTreeMap<String, ZoneState>>,
}

impl AzureProvider {
    /// A provider whose every request goes through `budget` (share one per subscription).
    pub fn new(
        credentials: &AzureCredentials,
        budget: Arc<RequestBudget>,
        retry: ExponentialRetryOptions,
    ) -> Result<Self, ProviderError> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let invalid = |e: &dyn std::fmt::Display| ProviderError::Invalid(e.to_string());
        let mut http = reqwest::Client::builder();
        if let Some(pem) = &credentials.extra_ca_pem {
            let ca = reqwest::Certificate::from_pem(pem.as_bytes()).map_err(|e| invalid(&e))?;
            http = http.tls_certs_merge([ca]);
        }
        let http = Arc::new(http.build().map_err(|e| invalid(&e))?);
        let mut options = ClientOptions {
            transport: Some(Transport::new(http)),
            ..Default::default()
        };
        let resource_manager = match &credentials.cloud {
            Some(cloud) => {
                let mut custom = CustomConfiguration::default();
                custom.authority_host = cloud.authority_host.clone();
                options.cloud = Some(Arc::new(CloudConfiguration::Custom(custom)));
                cloud.resource_manager.clone()
            }
            None => PUBLIC_RESOURCE_MANAGER.to_string(),
        };
        let resource_manager = Url::parse(&resource_manager).map_err(|e| invalid(&e))?;
        let credential: Arc<dyn TokenCredential> = match &credentials.auth {
            AzureAuth::ClientSecret { client_id, secret } => ClientSecretCredential::new(
                &credentials.tenant,
                client_id.clone(),
                Secret::new(secret.clone()),
                Some(ClientSecretCredentialOptions {
                    client_options: options.clone(),
                }),
            )
            .map_err(|e| invalid(&e))?,
            AzureAuth::WorkloadIdentity {
                client_id,
                token_file,
            } => WorkloadIdentityCredential::new(Some(WorkloadIdentityCredentialOptions {
                credential_options: ClientAssertionCredentialOptions {
                    client_options: options.clone(),
                },
                client_id: client_id.clone(),
                tenant_id: Some(credentials.tenant.clone()),
                token_file_path: token_file.clone(),
            }))
            .map_err(|e| invalid(&e))?,
        };
        // The token audience is Resource Manager itself.
        let token_scope = format!("{}.default", resource_manager.as_str());
        let scope = ArmScope {
            resource_manager,
            subscription: credentials.subscription.clone(),
            resource_group: credentials.resource_group.clone(),
        };
        Ok(AzureProvider {
            client: ArmClient::new(scope, credential, token_scope, options, budget, retry),
            zones: Mutex::new(None),
            state: Mutex::new(BTreeMap::new()),
        })
    }

    /// Retries for throttled and failed calls: exponential with jitter, at least as long as
    /// `Retry-After` asks, for at most about two minutes.
    pub fn default_retry() -> ExponentialRetryOptions {
        ExponentialRetryOptions {
            initial_delay: azure_core::time::Duration::milliseconds(500),
            max_retries: 8,
            max_total_elapsed: azure_core::time::Duration::seconds(120),
            max_delay: azure_core::time::Duration::seconds(30),
        }
    }

    /// Forgets the cached zone list (after a zone was created or deleted).
    pub fn invalidate_zones(&self) {
        *self.zones.lock().expect("zones lock") = None;
    }

    /// What users should know about how `records` land in Azure, for status.
    pub fn status_notes(&self, records: &[Endpoint]) -> Vec<String> {
        layout::refusals(records).into_values().collect()
    }

    async fn read_zone(&self, zone: &str) -> Result<ZoneState, ProviderError> {
        let record_sets = self
            .client
            .record_sets(zone)
            .await
            .map_err(|e| arm_error(zone, e))?;
        let profiles = self
            .client
            .profiles()
            .await
            .map_err(|e| arm_error(zone, e))?;
        Ok(ZoneState::new(record_sets, profiles))
    }

    /// Reads the zone unless it is cached.
    async fn load_zone(&self, zone: &str) -> Result<(), ProviderError> {
        if self.state.lock().expect("state lock").contains_key(zone) {
            return Ok(());
        }
        let state = self.read_zone(zone).await?;
        self.state
            .lock()
            .expect("state lock")
            .insert(zone.to_string(), state);
        Ok(())
    }

    fn forget_zone(&self, zone: &str) {
        self.state.lock().expect("state lock").remove(zone);
    }

    fn remember(&self, zone: &str, update: impl FnOnce(&mut ZoneState)) {
        if let Some(state) = self.state.lock().expect("state lock").get_mut(zone) {
            update(state);
        }
    }

    async fn send(&self, zone: &str, call: Call) -> Result<(), ArmError> {
        match call {
            Call::PutProfile { name, profile } => {
                let stored = self.client.put_profile(&name, &profile).await?;
                self.remember(zone, |state| state.store_profile(stored));
            }
            Call::DeleteProfile { name } => {
                match self.client.delete_profile(&name).await {
                    Ok(()) => {}
                    Err(e) if e.status == 404 => {}
                    Err(e) => return Err(e),
                }
                self.remember(zone, |state| {
                    state.remove_profile(&name);
                });
            }
            Call::PutRecordSet {
                relative,
                record_type,
                set,
                precondition,
            } => {
                let stored: RecordSet = self
                    .client
                    .put_record_set(zone, record_type.as_str(), &relative, &set, &precondition)
                    .await?;
                self.remember(zone, |state| state.store_record_set(stored));
            }
            Call::DeleteRecordSet {
                relative,
                record_type,
                precondition,
            } => {
                self.client
                    .delete_record_set(zone, record_type.as_str(), &relative, &precondition)
                    .await?;
                self.remember(zone, |state| {
                    state.record_sets.remove(&(relative, record_type));
                });
            }
        }
        Ok(())
    }
}

fn arm_error(what: &str, error: ArmError) -> ProviderError {
    match error.status {
        404 => ProviderError::ZoneNotFound(what.to_string()),
        429 => ProviderError::Throttled(format!("{what}: {error}")),
        _ => ProviderError::Other(format!("{what}: {error}")),
    }
}

/// The zone's records after `changes`; a delete or update of a record that is not there (or
/// differs) is a problem, the rest applies.
fn changed_records(
    current: Vec<Endpoint>,
    changes: &Changes,
) -> (Vec<Endpoint>, BTreeSet<String>, Vec<String>) {
    let mut records: BTreeMap<RecordKey, Endpoint> =
        current.into_iter().map(|r| (r.key(), r)).collect();
    let mut names = BTreeSet::new();
    let mut stale = Vec::new();
    let mut expect = |old: &Endpoint, records: &mut BTreeMap<RecordKey, Endpoint>| {
        let key = old.key();
        let mut found = records.remove(&key);
        if let Some(found) = found.as_mut() {
            found.normalize();
        }
        let mut old = old.clone();
        old.normalize();
        if found.as_ref() != Some(&old) {
            stale.push(format!("{key} is not as planned"));
        }
    };
    for old in &changes.deletes {
        names.insert(old.dns_name.to_ascii_lowercase());
        expect(old, &mut records);
    }
    for update in &changes.updates {
        names.insert(update.old.dns_name.to_ascii_lowercase());
        names.insert(update.new.dns_name.to_ascii_lowercase());
        expect(&update.old, &mut records);
        records.insert(update.new.key(), update.new.clone());
    }
    for new in &changes.creates {
        names.insert(new.dns_name.to_ascii_lowercase());
        records.insert(new.key(), new.clone());
    }
    (records.into_values().collect(), names, stale)
}

/// The calls that apply `changes` to the zone as `state` holds it, and the problems of the
/// records refused before any call; `Err` names the changes planned against records that
/// have since changed.
fn plan_calls(
    zone: &str,
    scope: &ArmScope,
    state: &ZoneState,
    changes: &Changes,
) -> Result<(layout::Calls, Vec<String>), Vec<String>> {
    let (after, mut names, stale) = changed_records(layout::read_back(zone, state), changes);
    if !stale.is_empty() {
        return Err(stale);
    }
    // A GEO profile nests its targets' profiles: when a target becomes (or stops being)
    // weighted, the profile naming it changes as well.
    let parents: Vec<String> = after
        .iter()
        .filter(|r| {
            r.set_identifier.is_some()
                && r.targets
                    .iter()
                    .any(|t| names.contains(&t.to_ascii_lowercase()))
        })
        .map(|r| r.dns_name.to_ascii_lowercase())
        .collect();
    names.extend(parents);
    let touched: Vec<&Endpoint> = after
        .iter()
        .filter(|r| names.contains(&r.dns_name.to_ascii_lowercase()))
        .collect();
    let refused = layout::refusals(touched.iter().copied());
    // A refused record's ownership records wait with it.
    let held_back: BTreeSet<String> = touched
        .iter()
        .filter_map(|r| {
            let vouched = record_vouched_for(r)?;
            refused
                .contains_key(&vouched.dns_name)
                .then(|| r.dns_name.to_ascii_lowercase())
        })
        .chain(refused.keys().map(|name| name.to_ascii_lowercase()))
        .collect();
    names.retain(|name| !held_back.contains(name));
    let calls = layout::calls(zone, scope, &names, &after, state);
    Ok((calls, refused.into_values().collect()))
}

impl Provider for AzureProvider {
    async fn list_zones(&self) -> Result<Vec<ZoneInfo>, ProviderError> {
        if let Some(zones) = self.zones.lock().expect("zones lock").clone() {
            return Ok(zones);
        }
        let zones: Vec<ZoneInfo> = self
            .client
            .dns_zones()
            .await
            .map_err(|e| arm_error("dnsZones", e))?
            .into_iter()
            .map(|zone| ZoneInfo {
                id: zone.name.clone(),
                domain: zone.name.trim_end_matches('.').to_ascii_lowercase(),
            })
            .collect();
        *self.zones.lock().expect("zones lock") = Some(zones.clone());
        Ok(zones)
    }

    /// Reads the zone whole (record sets, then profiles) and keeps what it read.
    async fn records(&self, zone_id: &str) -> Result<Vec<Endpoint>, ProviderError> {
        let state = self.read_zone(zone_id).await?;
        let records = layout::read_back(&zone_id.to_ascii_lowercase(), &state);
        self.state
            .lock()
            .expect("state lock")
            .insert(zone_id.to_string(), state);
        Ok(records)
    }

    async fn apply(&self, zone_id: &str, changes: &Changes) -> Result<(), ProviderError> {
        if changes.is_empty() {
            return Ok(());
        }
        self.load_zone(zone_id).await?;
        // Planned under the lock on the cached zone, which is not copied.
        let planned = match self.state.lock().expect("state lock").get(zone_id) {
            Some(state) => plan_calls(
                &zone_id.to_ascii_lowercase(),
                self.client.scope(),
                state,
                changes,
            ),
            None => Err(vec![
                "the zone was dropped from the cache meanwhile".to_string(),
            ]),
        };
        let (calls, mut problems) = match planned {
            Ok(planned) => planned,
            Err(stale) => {
                // Planned against records that have since changed: plan again on a fresh read.
                self.forget_zone(zone_id);
                return Err(ProviderError::Other(format!(
                    "the zone changed since it was read: {}",
                    stale.join("; ")
                )));
            }
        };
        let mut precondition_failed = false;
        let mut write_failed = false;
        let mut held_back_deletions = 0;
        for mut phase in calls.phases {
            // After a failed write, nothing is deleted: what the write would have moved off a
            // record may still point at it.
            if write_failed {
                let before = phase.len();
                phase.retain(|call| !call.is_deletion());
                held_back_deletions += before - phase.len();
            }
            let results: Vec<(String, Result<(), ArmError>)> = futures::stream::iter(phase)
                .map(|call| async move {
                    let subject = call.subject();
                    (subject, self.send(zone_id, call).await)
                })
                .buffer_unordered(CONCURRENT_CALLS)
                .collect()
                .await;
            for (subject, result) in results {
                if let Err(error) = result {
                    write_failed = true;
                    precondition_failed |= error.is_precondition_failed();
                    if error.is_throttled() {
                        problems.push(format!("{subject}: still throttled after retries: {error}"));
                    } else {
                        problems.push(format!("{subject}: {error}"));
                    }
                }
            }
        }
        if precondition_failed {
            self.forget_zone(zone_id);
        }
        if held_back_deletions > 0 {
            problems.push(format!(
                "{held_back_deletions} deletions wait until the writes above succeed"
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ProviderError::PartlyApplied(problems))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn azure_json_in_the_dns_operators_format() {
        let secret = r#"{"tenantId": "t", "subscriptionId": "s", "resourceGroup": "rg",
            "aadClientId": "id", "aadClientSecret": "hunter2"}"#;
        let credentials = AzureCredentials::from_azure_json(secret, None).unwrap();
        assert_eq!(
            (
                credentials.tenant.as_str(),
                credentials.subscription.as_str(),
                credentials.resource_group.as_str()
            ),
            ("t", "s", "rg")
        );
        assert!(
            matches!(&credentials.auth, AzureAuth::ClientSecret { client_id, secret } if client_id == "id" && secret == "hunter2")
        );
        assert_eq!(credentials.cloud, None);
        assert!(
            !format!("{credentials:?}").contains("hunter2"),
            "Debug never shows the secret"
        );

        let workload = r#"{"tenantId": "t", "subscriptionId": "s", "resourceGroup": "rg",
            "aadClientSecret": "msi", "useWorkloadIdentityExtension": true}"#;
        let credentials = AzureCredentials::from_azure_json(workload, None).unwrap();
        assert!(matches!(
            credentials.auth,
            AzureAuth::WorkloadIdentity {
                client_id: None,
                token_file: None
            }
        ));

        let custom = r#"{"tenantId": "t", "subscriptionId": "s", "resourceGroup": "rg",
            "aadClientId": "id", "aadClientSecret": "x",
            "resourceManagerEndpoint": "https://arm.example/", "activeDirectoryAuthorityHost": "https://login.example/"}"#;
        let credentials = AzureCredentials::from_azure_json(custom, Some("PEM".into())).unwrap();
        assert_eq!(
            credentials.cloud,
            Some(CustomCloud {
                resource_manager: "https://arm.example/".into(),
                authority_host: "https://login.example/".into()
            })
        );
    }

    #[test]
    fn what_azure_json_lacks_is_named_and_no_value_is_repeated() {
        let cases = [
            (
                r#"{"subscriptionId": "s", "resourceGroup": "rg", "aadClientId": "id", "aadClientSecret": "hunter2"}"#,
                "lacks tenantId",
            ),
            (
                r#"{"tenantId": "t", "resourceGroup": "rg", "aadClientId": "id", "aadClientSecret": "hunter2"}"#,
                "lacks subscriptionId",
            ),
            (
                r#"{"tenantId": "t", "subscriptionId": "s", "aadClientId": "id", "aadClientSecret": "hunter2"}"#,
                "lacks resourceGroup",
            ),
            (
                r#"{"tenantId": "t", "subscriptionId": "s", "resourceGroup": "rg", "aadClientSecret": "hunter2"}"#,
                "lacks aadClientId",
            ),
            (
                r#"{"tenantId": "t", "subscriptionId": "s", "resourceGroup": "rg"}"#,
                "neither",
            ),
            (
                r#"{"tenantId": "t", "subscriptionId": "s", "resourceGroup": "rg", "useManagedIdentityExtension": true}"#,
                "not supported",
            ),
            (
                r#"{"tenantId": "t", "subscriptionId": "s", "resourceGroup": "rg", "aadClientId": "id", "aadClientSecret": "hunter2", "resourceManagerEndpoint": "https://arm/"}"#,
                "go together",
            ),
            (
                r#"{"tenantId": "t", "aadClientSecret": "hunter2""#,
                "not valid",
            ),
        ];
        for (json, expected) in cases {
            let error = AzureCredentials::from_azure_json(json, None).unwrap_err();
            assert!(error.contains(expected), "{json}: {error}");
            assert!(!error.contains("hunter2"), "{error}");
        }
    }
}
