//! ManagedZone status: which provider serves it, its name servers, how many records it holds,
//! and `Ready`. Embedded zones are counted from memory whenever one of their records changes;
//! zones at a provider are counted by reading them only when the zone itself changes and once
//! per resync, so status never costs a zone list per record change.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | ManagedZones, DNSRecords, Secrets |
//! | **Triggered by** ([`triggers`]) | the zone; a record of an embedded zone (its count); the zone's provider Secret |
//! | **Gathers** | the zone's Secret from the cache; for a provider zone, its name servers and record count from the provider |
//! | **Decides** | `Ready`, the reason and the provider kind |
//! | **Writes** | the zone's status |

pub mod triggers;

use std::sync::Arc;

use kube::api::{Api, Patch};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate, set_condition};
use meridian_api::kuadrant::ManagedZone;
use meridian_nameserver::ZoneConfig;
use meridian_providers::Provider;
use serde_json::json;

use meridian_controllers::{Context, Error, apply_params, now, object_key};

const CONTROLLER: &str = "managedzone";

/// Runs the controller until `stop` resolves.
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let all = ctx.caches.zones.store().clone();
    let requests = triggers::requests(&ctx.caches);
    meridian_controllers::caches::run_controller(all, requests, reconcile, error_policy, ctx, stop)
        .await;
}

pub async fn reconcile(zone: Arc<ManagedZone>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciled(CONTROLLER);
    let namespace = zone.namespace().unwrap_or_default();
    let domain = zone
        .spec
        .domain_name
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let mut status = zone.status.clone().unwrap_or_default();
    status.observed_generation = zone.metadata.generation;
    let (ready, reason, message, requeue) = match &zone.spec.dns_provider_secret_ref {
        None => {
            let Some(embedded) = ctx.providers.embedded_zones() else {
                return Ok(Action::await_change());
            };
            embedded.ensure_served(&domain);
            status.provider = Some("embedded".into());
            status.name_servers = ZoneConfig::new(&domain).name_servers;
            status.record_count = Some(embedded.record_count(&domain) as i64);
            (
                true,
                "Serving",
                format!(
                    "served by the hub's embedded nameserver at {}",
                    embedded.server().local_addr()
                ),
                // Counting is free; the DNSRecord watch keeps it fresh.
                ctx.config.resync,
            )
        }
        Some(secret_ref) => match ctx.caches.secrets.get(Some(&namespace), &secret_ref.name) {
            None => (
                false,
                "SecretNotFound",
                format!("Secret {} not found", secret_ref.name),
                ctx.config.retry_cap,
            ),
            Some(secret) => match ctx.providers.for_secret(&secret, &domain).await {
                Err(error) => (
                    false,
                    "InvalidSecret",
                    error.to_string(),
                    ctx.config.retry_cap,
                ),
                Ok(provider) => {
                    status.provider = Some(provider.kind().into());
                    let counted = async {
                        let id = provider.zone_id(&domain, zone.spec.id.as_deref()).await?;
                        let records = provider.records(&id).await?;
                        Ok::<_, meridian_providers::ProviderError>((id, records.len()))
                    };
                    match counted.await {
                        Ok((id, count)) => {
                            status.id = Some(id);
                            status.record_count = Some(count as i64);
                            (
                                true,
                                "Reachable",
                                format!("served by {}", provider.kind()),
                                ctx.config.resync,
                            )
                        }
                        Err(error) => (
                            false,
                            "ProviderError",
                            error.to_string(),
                            ctx.config.retry_cap,
                        ),
                    }
                }
            },
        },
    };
    set_condition(
        &mut status.conditions,
        ConditionUpdate {
            type_: conditions::READY,
            status: ready,
            reason,
            message,
        },
        zone.metadata.generation,
        &now(),
    );
    if zone.status.as_ref() != Some(&status) {
        let api: Api<ManagedZone> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch = json!({
            "apiVersion": ManagedZone::api_version(&()),
            "kind": ManagedZone::kind(&()),
            "status": status,
        });
        api.patch_status(&zone.name_any(), &apply_params(), &Patch::Apply(patch))
            .await?;
    }
    ctx.succeeded(&object_key(
        "ManagedZone",
        Some(&namespace),
        &zone.name_any(),
    ));
    Ok(Action::requeue(requeue))
}

pub fn error_policy(zone: Arc<ManagedZone>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.metrics.failed(CONTROLLER, error.reason());
    let key = object_key("ManagedZone", zone.namespace().as_deref(), &zone.name_any());
    tracing::warn!(zone = %key, %error, "ManagedZone reconcile failed; retrying with backoff");
    ctx.retry_after_failure(&key)
}
