//! What publishing a record says: `Ready`, `Healthy`, the published endpoints and the host's
//! owners, written only when they change.

use kube::api::{Api, Patch};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate, set_condition};
use meridian_api::kuadrant::{DNSRecord, DNSRecordStatus};
use meridian_dns::model::{Endpoint, RecordKey};
use meridian_dns::plan::Registry;
use meridian_providers::ProviderError;
use serde_json::json;

use super::reasons;
use crate::decide::convert::all_to_api;
use crate::decide::health::{HealthOutcome, reasons as health_reasons};
use crate::reconcile::context::RACED_STREAK;
use crate::zones::zone_provider::ZoneProvider;
use crate::{Context, Error, apply_params, now};

/// The `Ready` condition as status has it (for passes that publish nothing new).
pub(super) fn ready_as_before(record: &DNSRecord) -> (bool, &str, String) {
    let ready = record
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == conditions::READY));
    match ready {
        Some(c) => (c.status == "True", c.reason.as_str(), c.message.clone()),
        None => (false, reasons::PUBLISHED, String::new()),
    }
}

/// Owners of the root host's record besides this one, and this one.
pub(super) fn domain_owners(zone: &[Endpoint], root_host: &str, owner: &str) -> Vec<String> {
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

pub(super) async fn provider_failed(
    record: &DNSRecord,
    ctx: &Context,
    provider: &ZoneProvider,
    error: ProviderError,
) -> Result<Action, Error> {
    if let ProviderError::Stale(message) = &error
        && ctx.raced_in_a_row(record, super::CONTROLLER) < RACED_STREAK
    {
        // Another writer of the same names got there first (distributed mode): not a failure
        // to report or back off from; read and plan again shortly. Refused every time, it is
        // reported below like any provider error. The retry looks at the host at once,
        // whenever its next look was due: status still says Ready as before, and only a look
        // can tell it there is something to plan (a withdrawal, a repair) that lost the race.
        let key = crate::object_key(
            "DNSRecord",
            record.namespace().as_deref(),
            &record.name_any(),
        );
        ctx.host_marks.read_next_refresh(&key);
        return Err(Error::Raced(format!("{}: {message}", provider.kind())));
    }
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
    let health = record
        .spec
        .health_check
        .as_ref()
        .and_then(|_| health_as_before(record));
    write_status(
        record,
        ctx,
        None,
        (false, reasons::PROVIDER_ERROR, message),
        health.as_ref(),
        Vec::new(),
    )
    .await?;
    Err(Error::Provider(error))
}

/// Writes status. `published` is `None` when nothing changed at the provider (the endpoints
/// published before stay in status, since they stay in DNS).
pub(super) async fn write_status(
    record: &DNSRecord,
    ctx: &Context,
    published: Option<&[Endpoint]>,
    (ready, reason, message): (bool, &str, String),
    health: Option<&HealthOutcome>,
    domain_owners: Vec<String>,
) -> Result<(), Error> {
    let mut status = record.status.clone().unwrap_or_default();
    if let Some(published) = published {
        status.endpoints = all_to_api(published);
        status.domain_owners = domain_owners;
        status.owner_id = Some(super::owner_of(record, &ctx.config));
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
    match health {
        Some(health) => set_condition(
            &mut status.conditions,
            ConditionUpdate {
                type_: conditions::HEALTHY,
                status: health.healthy,
                reason: health.reason,
                message: health.message.clone(),
            },
            record.metadata.generation,
            &now(),
        ),
        None => status.conditions.retain(|c| c.type_ != conditions::HEALTHY),
    }
    // The first success after failures writes even a status the cache already holds: the
    // cached copy may predate the last failure's write, and no status change wakes a record.
    let recovering = ready && ctx.failed_last(record, super::CONTROLLER);
    if record.status.as_ref() == Some(&status) && !recovering {
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

/// The `Healthy` condition as status has it, for a pass that could not look at health.
pub(super) fn health_as_before(record: &DNSRecord) -> Option<HealthOutcome> {
    let condition = record
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == conditions::HEALTHY)?;
    let reason = [
        health_reasons::HEALTHY,
        health_reasons::UNHEALTHY,
        health_reasons::NONE_HEALTHY,
        health_reasons::AWAITING,
    ]
    .into_iter()
    .find(|r| *r == condition.reason)?;
    Some(HealthOutcome {
        endpoints: Vec::new(),
        healthy: condition.status == "True",
        reason,
        message: condition.message.clone(),
    })
}
