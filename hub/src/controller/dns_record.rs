//! DNSRecord → the zone's provider. The record's endpoints are planned against the zone with
//! external-dns-compatible ownership (owner: `spec.ownerID`, else the record's UID) and applied
//! in batches; status says what is published. Deleting a record removes only its own
//! contribution. Provider errors are said in status and retried with backoff; what was
//! published before stays published.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate, set_condition};
use meridian_api::kuadrant::{DNSRecord, DNSRecordStatus, ManagedZone};
use meridian_dns::model::{Endpoint, RecordKey};
use meridian_dns::plan::{PlanInput, Registry, plan};
use meridian_dns::provider::{Provider, ProviderError};
use serde_json::json;

use super::{Context, Error, apply_params, now, retry_after, with_finalizer};
use crate::convert::{all_to_api, all_to_engine};
use crate::zone_provider::ZoneProvider;

pub const FINALIZER: &str = "meridian.dev/dns-record";
const CONTROLLER: &str = "dnsrecord";

/// Reasons of the record's `Ready` condition.
pub mod reasons {
    pub const PUBLISHED: &str = "Published";
    pub const PARTLY_PUBLISHED: &str = "PartlyPublished";
    pub const ZONE_NOT_FOUND: &str = "ZoneNotFound";
    pub const PROVIDER_UNAVAILABLE: &str = "ProviderUnavailable";
    pub const PROVIDER_ERROR: &str = "ProviderError";
}

pub async fn reconcile(record: Arc<DNSRecord>, ctx: Arc<Context>) -> Result<Action, Error> {
    with_finalizer(
        record,
        &ctx,
        CONTROLLER,
        FINALIZER,
        |record| {
            let ctx = &ctx;
            async move { publish(&record, ctx).await }
        },
        |record| {
            let ctx = &ctx;
            async move { withdraw(&record, ctx).await }
        },
    )
    .await
}

pub fn error_policy(record: Arc<DNSRecord>, error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(&*record, error, &ctx, CONTROLLER)
}

/// The owner ID the record publishes under.
pub fn owner_of(record: &DNSRecord) -> String {
    record
        .spec
        .owner_id
        .clone()
        .or_else(|| record.uid())
        .unwrap_or_else(|| record.name_any())
}

/// The zone and its provider, or the reason (for status) why there is none.
async fn zone_provider(
    record: &DNSRecord,
    ctx: &Context,
) -> Result<(ManagedZone, ZoneProvider, String), (String, &'static str, String)> {
    let namespace = record.namespace().unwrap_or_default();
    let zone_name = &record.spec.managed_zone.name;
    let zones: Api<ManagedZone> = Api::namespaced(ctx.client.clone(), &namespace);
    let zone = match zones.get_opt(zone_name).await {
        Ok(Some(zone)) => zone,
        Ok(None) => {
            return Err((
                zone_name.clone(),
                reasons::ZONE_NOT_FOUND,
                format!("ManagedZone {zone_name} not found"),
            ));
        }
        Err(error) => {
            return Err((
                zone_name.clone(),
                reasons::PROVIDER_UNAVAILABLE,
                error.to_string(),
            ));
        }
    };
    let domain = zone.spec.domain_name.clone();
    let provider = match &zone.spec.dns_provider_secret_ref {
        None => ctx.providers.embedded(&domain),
        Some(secret_ref) => {
            let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
            let secret = match secrets.get_opt(&secret_ref.name).await {
                Ok(Some(secret)) => secret,
                Ok(None) => {
                    return Err((
                        zone_name.clone(),
                        reasons::PROVIDER_UNAVAILABLE,
                        format!("Secret {} not found", secret_ref.name),
                    ));
                }
                Err(error) => {
                    return Err((
                        zone_name.clone(),
                        reasons::PROVIDER_UNAVAILABLE,
                        error.to_string(),
                    ));
                }
            };
            ctx.providers
                .for_secret(&secret, &domain)
                .await
                .map_err(|e| {
                    (
                        zone_name.clone(),
                        reasons::PROVIDER_UNAVAILABLE,
                        e.to_string(),
                    )
                })?
        }
    };
    let zone_id = provider
        .zone_id(&domain, zone.spec.id.as_deref())
        .await
        .map_err(|e| (zone_name.clone(), reasons::PROVIDER_ERROR, e.to_string()))?;
    Ok((zone, provider, zone_id))
}

async fn publish(record: &DNSRecord, ctx: &Context) -> Result<Action, Error> {
    let started = Instant::now();
    let (_, provider, zone_id) = match zone_provider(record, ctx).await {
        Ok(found) => found,
        Err((_, reason, message)) => {
            // Nothing is changed at any provider: what was published stays published.
            write_status(record, ctx, None, false, reason, message, Vec::new()).await?;
            return Err(Error::Waiting(format!("zone of {}", record.name_any())));
        }
    };
    let owner = owner_of(record);
    let requested = all_to_engine(&record.spec.endpoints);
    let (desired, notes) = provider.publishable(&record.spec.root_host, &requested);
    let previous: Option<Vec<Endpoint>> = record
        .status
        .as_ref()
        .filter(|status| !status.endpoints.is_empty())
        .map(|status| all_to_engine(&status.endpoints));

    // Steady state at a provider: what this generation asks for is what status says is
    // published, so there is nothing to ask the provider (not even a zone list). Embedded zones
    // are always planned: reading them is free, and after a restart they start empty.
    let published_as_desired = record.status.as_ref().is_some_and(|status| {
        status.observed_generation == record.metadata.generation
            && conditions::condition_status(&status.conditions, conditions::READY) == Some(true)
    }) && previous.as_deref() == Some(desired.as_slice());
    if published_as_desired && !matches!(provider, ZoneProvider::Embedded(_)) {
        return Ok(Action::requeue(ctx.config.resync));
    }

    let current = provider.records(&zone_id).await;
    let current = match current {
        Ok(current) => current,
        Err(error) => return provider_failed(record, ctx, &provider, error).await,
    };
    let planned = plan(
        &PlanInput {
            owner: &owner,
            root_host: &record.spec.root_host,
            desired: &desired,
            previous: previous.as_deref(),
        },
        &current,
    );
    if !planned.changes.is_empty() {
        if let Err(error) = provider.apply(&zone_id, &planned.changes).await {
            ctx.metrics.provider_call(provider.kind(), "error");
            return provider_failed(record, ctx, &provider, error).await;
        }
        ctx.metrics.provider_call(provider.kind(), "ok");
        ctx.metrics.published(started.elapsed());
    }
    let owners = domain_owners(&current, &record.spec.root_host, &owner);
    let mut messages: Vec<String> = planned.problems.iter().map(ToString::to_string).collect();
    messages.extend(notes);
    let (ready, reason, message) = if planned.problems.is_empty() {
        let mut message = format!(
            "{} records published through {}",
            desired.len(),
            provider.kind()
        );
        if !messages.is_empty() {
            message = format!("{message}; {}", messages.join("; "));
        }
        (true, reasons::PUBLISHED, message)
    } else {
        (false, reasons::PARTLY_PUBLISHED, messages.join("; "))
    };
    write_status(record, ctx, Some(&desired), ready, reason, message, owners).await?;
    Ok(Action::requeue(ctx.config.resync))
}

/// Owners of the root host's record besides this one, and this one.
fn domain_owners(zone: &[Endpoint], root_host: &str, owner: &str) -> Vec<String> {
    let registry = Registry::read(zone);
    let mut owners: Vec<String> = registry
        .ownership
        .iter()
        .filter(|(key, _): &(&RecordKey, _)| key.dns_name == root_host)
        .flat_map(|(_, owners)| owners.keys().cloned())
        .chain([owner.to_string()])
        .collect();
    owners.sort();
    owners.dedup();
    owners
}

async fn provider_failed(
    record: &DNSRecord,
    ctx: &Context,
    provider: &ZoneProvider,
    error: ProviderError,
) -> Result<Action, Error> {
    let message = format!("{}: {error}", provider.kind());
    let failing_before = record.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == conditions::READY && c.reason == reasons::PROVIDER_ERROR)
    });
    if !failing_before {
        ctx.notify(
            record,
            true,
            reasons::PROVIDER_ERROR,
            "Publish",
            message.clone(),
        )
        .await;
    }
    write_status(
        record,
        ctx,
        None,
        false,
        reasons::PROVIDER_ERROR,
        message,
        Vec::new(),
    )
    .await?;
    Err(Error::Provider(error))
}

/// Writes status. `published` is `None` when nothing changed at the provider (the endpoints
/// published before stay in status, since they stay in DNS).
async fn write_status(
    record: &DNSRecord,
    ctx: &Context,
    published: Option<&[Endpoint]>,
    ready: bool,
    reason: &str,
    message: String,
    domain_owners: Vec<String>,
) -> Result<(), Error> {
    let mut status = record.status.clone().unwrap_or_default();
    if let Some(published) = published {
        status.endpoints = all_to_api(published);
        status.domain_owners = domain_owners;
    }
    status.observed_generation = record.metadata.generation;
    set_condition(
        &mut status.conditions,
        ConditionUpdate {
            type_: conditions::READY,
            status: ready,
            reason,
            message,
        },
        record.metadata.generation,
        &now(),
    );
    if record.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let api: Api<DNSRecord> =
        Api::namespaced(ctx.client.clone(), &record.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": DNSRecord::api_version(&()),
        "kind": DNSRecord::kind(&()),
        "status": DNSRecordStatus { ..status },
    });
    api.patch_status(&record.name_any(), &apply_params(), &Patch::Apply(patch))
        .await?;
    Ok(())
}

/// Removes this record's contribution from its zone, then lets the finalizer go.
async fn withdraw(record: &DNSRecord, ctx: &Context) -> Result<Action, Error> {
    let Some(previous) = record
        .status
        .as_ref()
        .filter(|status| !status.endpoints.is_empty())
        .map(|status| all_to_engine(&status.endpoints))
    else {
        return Ok(Action::await_change());
    };
    let (_, provider, zone_id) = match zone_provider(record, ctx).await {
        Ok(found) => found,
        // The zone is gone: there is nowhere left to withdraw from.
        Err((_, reasons::ZONE_NOT_FOUND, _)) => return Ok(Action::await_change()),
        Err((_, _, message)) => return Err(Error::Waiting(message)),
    };
    let owner = owner_of(record);
    let current = provider.records(&zone_id).await?;
    let planned = plan(
        &PlanInput {
            owner: &owner,
            root_host: &record.spec.root_host,
            desired: &[],
            previous: Some(&previous),
        },
        &current,
    );
    if !planned.changes.is_empty() {
        provider.apply(&zone_id, &planned.changes).await?;
        ctx.metrics.provider_call(provider.kind(), "ok");
    }
    tracing::info!(record = %record.name_any(), removed = planned.changes.deletes.len(), "withdrew records");
    Ok(Action::await_change())
}
