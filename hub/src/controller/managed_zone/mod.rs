//! ManagedZone status: which provider serves it, its name servers, how many records it holds,
//! and `Ready`. Embedded zones are counted from memory whenever one of their records changes;
//! zones at a provider are counted by reading them only when the zone itself changes and once
//! per resync, so status never costs a zone list per record change.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | ManagedZones, DNSRecords, DNSPolicies, Secrets |
//! | **Triggered by** ([`triggers`]) | the zone; a record of an embedded zone (its count); a record whose plan is held or let go; the zone's delegation record; a policy whose `FailStatic` changes; the zone's provider or DNSSEC key Secret; its routing delegate's delegation |
//! | **Gathers** | the zone's Secret from the cache; for a provider zone, its name servers and record count from the provider |
//! | **Decides** | `Ready`, the reason and the provider kind; `PlansHeld`; `FailStatic` (the brakes keeping silent clusters in the zone's records) |
//! | **Writes** | the zone's status; for a zone at a provider with a routing delegate, the DNSRecord delegating to it ([`routing_delegate`]) |

pub mod routing_delegate;
pub mod triggers;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

use kube::api::{Api, Patch};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate, set_condition};
use meridian_api::kuadrant::{
    DNSPolicy, DNSRecord, ManagedZone, ManagedZoneStatus, ZoneDnssecStatus,
};
use meridian_controllers::decide::zone_serial::Numbering;
use meridian_controllers::zones::dnssec_keys;
use meridian_nameserver::DelegationError;
use meridian_nameserver::dnssec::ZoneKeys;
use meridian_providers::Provider;
use serde_json::json;

use meridian_controllers::{
    Context, Error, FIELD_MANAGER, POLICY_LABEL, apply_params, decide::plan_guard, now,
};

const CONTROLLER: &str = "managedzone";

/// Runs the controller until `stop` resolves.
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let all = ctx.caches.zones.store().clone();
    let requests = triggers::requests(&ctx.caches);
    super::run_light(CONTROLLER, all, requests, reconcile_zone, ctx, stop).await;
}

async fn reconcile_zone(zone: Arc<ManagedZone>, ctx: Arc<Context>) -> Result<Action, Error> {
    let namespace = zone.namespace().unwrap_or_default();
    let domain = zone
        .spec
        .domain_name
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let mut status = zone.status.clone().unwrap_or_default();
    status.observed_generation = zone.metadata.generation;
    status.delegation = Vec::new();
    let mut delegation = None;
    let claim = ctx.zone_claim(&zone);
    let (ready, reason, message, requeue) = match zone.provider_secret_name() {
        // Another team's domain, or one the namespace was not granted: nothing is served,
        // read or published, and nothing of the holder's is touched.
        _ if !claim.holds() => {
            // Served here before it lost its claim (a grant changed, or an older zone came in
            // the same second): no longer, unless the zone now holding the name is at the
            // same apex.
            if let Some(embedded) = ctx.providers.embedded_zones()
                && zone.spec.dns_provider_secret_ref.is_none()
                && !ctx.apex_held(&domain)
                && embedded.forget(&domain).await
            {
                tracing::warn!(zone = %domain, namespace = %namespace, "stopped serving a zone that lost its claim");
            }
            status = ManagedZoneStatus {
                observed_generation: zone.metadata.generation,
                conditions: status.conditions,
                ..Default::default()
            };
            (
                false,
                claim.reason(),
                claim.to_string(),
                ctx.config.next_resync(),
            )
        }
        Err(message) => (false, "InvalidSecretRef", message, ctx.config.retry_cap),
        Ok(None) => {
            let Some(embedded) = ctx.providers.embedded_zones() else {
                return Ok(Action::await_change());
            };
            match signing(&zone, &domain, &ctx).await {
                // What is served stays as it was: signed with the keys it had, or, never
                // served here, not at all (never unsigned).
                Err(error) => {
                    status.delegation = zone
                        .status
                        .as_ref()
                        .map(|s| s.delegation.clone())
                        .unwrap_or_default();
                    (
                        false,
                        "DNSSECKeysUnavailable",
                        format!("{error}; the zone is served as it was"),
                        ctx.config.retry_cap,
                    )
                }
                Ok((keys, dnssec)) => {
                    status.dnssec = dnssec;
                    let signed_requeue = status
                        .dnssec
                        .as_ref()
                        .and_then(|d| d.next_step.as_deref())
                        .and_then(|next| next.parse::<Timestamp>().ok())
                        .map(|next| {
                            let wait = next.as_second() - (ctx.clock)().as_second();
                            Duration::from_secs(wait.max(1) as u64)
                        });
                    let served = embedded.ensure_served(&zone, keys, Numbering::Leads).await;
                    status.provider = Some("embedded".into());
                    status.name_servers = served
                        .name_servers
                        .iter()
                        .map(|ns| ns.name.clone())
                        .collect();
                    status.delegation = served.delegation();
                    delegation = Some(served.check_delegation());
                    status.record_count = Some(embedded.record_count(&domain) as i64);
                    // What every other server of the zone takes its serial from.
                    if let Some(stamp) = embedded.served_stamp(&domain) {
                        status.serial = Some(stamp.serial);
                        status.content_digest = Some(stamp.digest);
                    }
                    (
                        true,
                        "Serving",
                        format!(
                            "served by the hub's embedded nameserver at {}",
                            embedded.server().local_addr()
                        ),
                        // Counting is free; the DNSRecord watch keeps it fresh. A rollover's
                        // next step comes on time.
                        signed_requeue.map_or_else(
                            || ctx.config.next_resync(),
                            |wait| wait.min(ctx.config.next_resync()),
                        ),
                    )
                }
            }
        }
        Ok(Some(secret_name)) => match ctx.caches.secrets.get(Some(&namespace), secret_name) {
            None => (
                false,
                "SecretNotFound",
                format!("Secret {secret_name} not found"),
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
                                ctx.config.next_resync(),
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
    let records = ctx.caches.records.state();
    set_condition(
        &mut status.conditions,
        plans_held_condition(&zone, &records),
        zone.metadata.generation,
        &now(),
    );
    set_condition(
        &mut status.conditions,
        fail_static_condition(&zone, &records, &ctx.caches.policies.state()),
        zone.metadata.generation,
        &now(),
    );
    // Also for an embedded zone, whose delegation record (from when it was at a provider) goes.
    let routed = if claim.holds() {
        routing_delegate::reconcile(&zone, &ctx).await?
    } else {
        None
    };
    match routed {
        Some(update) => set_condition(
            &mut status.conditions,
            update,
            zone.metadata.generation,
            &now(),
        ),
        None => status
            .conditions
            .retain(|c| c.type_ != conditions::ROUTING_DELEGATED),
    }
    match delegation {
        Some(check) => set_condition(
            &mut status.conditions,
            delegatable_condition(&check),
            zone.metadata.generation,
            &now(),
        ),
        // A provider names its own name servers.
        None if zone.spec.dns_provider_secret_ref.is_some() => status
            .conditions
            .retain(|c| c.type_ != conditions::DELEGATABLE),
        // An embedded zone not looked at this time keeps what its status said.
        None => {}
    }
    if let Some(wait) = count_refresh_wait(
        zone.status.as_ref(),
        &status,
        last_status_write(&zone),
        (ctx.clock)(),
    ) {
        // Only the count moved, and it was written moments ago: write it once the burst of
        // record changes has had time to add up.
        return Ok(Action::requeue(wait));
    }
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
    Ok(Action::requeue(requeue))
}

/// The keys an embedded zone is signed with and its status, when `spec.dnssec` is on: made on
/// first use, one rollover step on when due (see `meridian_controllers::zones::dnssec_keys`).
async fn signing(
    zone: &ManagedZone,
    domain: &str,
    ctx: &Context,
) -> Result<(Option<Arc<ZoneKeys>>, Option<ZoneDnssecStatus>), Error> {
    if !dnssec_keys::signing_requested(zone) {
        return Ok((None, None));
    }
    let namespace = zone.namespace().unwrap_or_default();
    let hub_namespace =
        ctx.config.hub_namespace.as_deref().ok_or_else(|| {
            Error::Waiting("the hub's namespace, where zone keys are kept".into())
        })?;
    let secret = dnssec_keys::keys_secret_name(&namespace, &zone.name_any());
    let cached = ctx.caches.secrets.get(Some(hub_namespace), &secret);
    let legacy = ctx.caches.secrets.get(
        Some(&namespace),
        &dnssec_keys::legacy_keys_secret_name(&zone.name_any()),
    );
    let now = (ctx.clock)().as_second().max(0) as u64;
    let keys =
        dnssec_keys::ensure_keys(&ctx.client, zone, hub_namespace, cached, legacy, now).await?;
    let zone_keys = keys
        .zone_keys(domain, &secret, dnssec_keys::dnskey_ttl(zone))
        .map_err(|e| Error::Waiting(format!("DNSSEC keys: {e}")))?;
    let next_step = keys
        .rollover
        .next_step_at(dnssec_keys::rollover_step(zone))
        .and_then(|at| Timestamp::from_second(at as i64).ok())
        .map(|at| at.to_string());
    let status = ZoneDnssecStatus {
        ds: Some(zone_keys.ds_line()),
        algorithm: Some(keys.algorithm.name().to_string()),
        ksk_tag: Some(zone_keys.ksk_tag()),
        zsk_tag: Some(zone_keys.signing_tag()),
        published_tags: zone_keys.published_tags(),
        rollover: Some(keys.rollover.phase().to_string()),
        next_step,
    };
    Ok((Some(zone_keys), Some(status)))
}

/// `PlansHeld`: the zone's records whose plans are over its threshold and wait for approval
/// (`meridian_controllers::decide::plan_guard`), or the threshold that applies.
fn plans_held_condition(
    zone: &ManagedZone,
    records: &[Arc<DNSRecord>],
) -> ConditionUpdate<'static> {
    // Called for every record change of a cold start, over every record: nothing is copied
    // until a record is found held.
    let mut held: Vec<String> = records
        .iter()
        .filter_map(|r| Some((r, plan_guard::held_message(r)?)))
        .filter(|(r, _)| in_zone(r, zone))
        .map(|(r, message)| format!("{}: {message}", r.name_any()))
        .collect();
    held.sort();
    let guard = plan_guard::ZoneGuard::from_annotations(zone.annotations());
    let mut notes = Vec::new();
    notes.extend(plan_guard::ZoneGuard::problem(zone.annotations()));
    if held.is_empty() {
        notes.insert(
            0,
            format!(
                "no plan held; a plan deleting or changing more than {} % of the zone's Meridian records (once it has {} or more) waits for approval",
                guard.threshold_percent,
                plan_guard::MIN_ZONE_RECORDS
            ),
        );
        return ConditionUpdate {
            type_: conditions::PLANS_HELD,
            status: false,
            reason: "NoPlanHeld",
            message: notes.join("; "),
        };
    }
    held.extend(notes);
    ConditionUpdate {
        type_: conditions::PLANS_HELD,
        status: true,
        reason: plan_guard::HELD_REASON,
        message: held.join("; "),
    }
}

/// Whether `record` publishes into `zone`.
fn in_zone(record: &DNSRecord, zone: &ManagedZone) -> bool {
    record.spec.managed_zone.name == zone.metadata.name.as_deref().unwrap_or_default()
        && record.metadata.namespace == zone.metadata.namespace
}

/// `FailStatic`: the policies publishing into the zone whose silent clusters a brake keeps in
/// DNS, the fleet brake first (it says the hub may be the one cut off), or none. It repeats
/// the policies' own conditions so that whoever watches zones sees it too.
fn fail_static_condition(
    zone: &ManagedZone,
    records: &[Arc<DNSRecord>],
    policies: &[Arc<DNSPolicy>],
) -> ConditionUpdate<'static> {
    // The policies kept static first: there are none in a steady fleet, and this runs for
    // every record change of a cold start.
    let kept_static: Vec<(&DNSPolicy, &Condition)> = policies
        .iter()
        .filter(|p| p.metadata.namespace == zone.metadata.namespace)
        .filter_map(|policy| {
            let condition = policy
                .status
                .as_ref()?
                .conditions
                .iter()
                .find(|c| c.type_ == conditions::FAIL_STATIC && c.status == "True")?;
            Some((policy.as_ref(), condition))
        })
        .collect();
    let publishing: BTreeSet<&String> = if kept_static.is_empty() {
        BTreeSet::new()
    } else {
        records
            .iter()
            .filter(|r| in_zone(r, zone))
            .filter_map(|r| r.labels().get(POLICY_LABEL))
            .collect()
    };
    let mut kept: Vec<(bool, String)> = kept_static
        .into_iter()
        .filter(|(policy, _)| publishing.contains(&policy.name_any()))
        .map(|(policy, condition)| {
            let braked = condition.reason == conditions::fail_static::FLEET_BRAKE;
            (
                braked,
                format!("DNSPolicy {}: {}", policy.name_any(), condition.message),
            )
        })
        .collect();
    // The braked policies first, each group by name.
    kept.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    let Some(&(braked, _)) = kept.first() else {
        return ConditionUpdate {
            type_: conditions::FAIL_STATIC,
            status: false,
            reason: conditions::fail_static::NONE_KEPT,
            message: "no silent cluster is kept in the zone's records".into(),
        };
    };
    ConditionUpdate {
        type_: conditions::FAIL_STATIC,
        status: true,
        reason: if braked {
            conditions::fail_static::FLEET_BRAKE
        } else {
            conditions::fail_static::SILENT_CLUSTERS_KEPT
        },
        message: kept_message(kept.into_iter().map(|(_, message)| message)),
    }
}

/// Policies named in the zone's `FailStatic` message; the rest are counted.
const FAIL_STATIC_POLICIES_LISTED: usize = 10;
/// The longest a policy's part of that message may be.
const FAIL_STATIC_POLICY_MESSAGE: usize = 400;

/// The zone's `FailStatic` message from its kept policies' messages, braked first: the first
/// few, each cut short, and how many more. Under a fleet brake every policy of a large zone
/// keeps clusters, and all their messages together passed etcd's request limit (1.5 MiB at
/// 6,000 policies in `make bench-hub-scale`), so the zone's status could not be written.
fn kept_message(messages: impl ExactSizeIterator<Item = String>) -> String {
    let total = messages.len();
    let mut parts: Vec<String> = messages
        .take(FAIL_STATIC_POLICIES_LISTED)
        .map(
            |message| match message.char_indices().nth(FAIL_STATIC_POLICY_MESSAGE) {
                Some((cut, _)) => format!("{}…", &message[..cut]),
                None => message,
            },
        )
        .collect();
    if total > FAIL_STATIC_POLICIES_LISTED {
        parts.push(format!(
            "and {} more DNSPolicies",
            total - FAIL_STATIC_POLICIES_LISTED
        ));
    }
    parts.join("; ")
}

/// Whether a parent zone can delegate to an embedded zone's name servers, and if not, what to
/// set.
fn delegatable_condition(check: &Result<(), DelegationError>) -> ConditionUpdate<'static> {
    match check {
        Ok(()) => ConditionUpdate {
            type_: conditions::DELEGATABLE,
            status: true,
            reason: "NameServersAddressed",
            message: "status.delegation lists the NS and glue records for the parent zone".into(),
        },
        Err(error) => ConditionUpdate {
            type_: conditions::DELEGATABLE,
            status: false,
            reason: "NameServerWithoutAddress",
            message: format!(
                "{error}; set spec.nameServers, or the hub's --ns (Helm value dns.nameServers)"
            ),
        },
    }
}

/// A change of the record count and serial alone is written at most this often: a zone filling
/// with 2,000 records would otherwise write its status about once per record. The other servers
/// of an embedded zone take the leader's serial about this long after a change.
const COUNT_REFRESH: Duration = Duration::from_secs(10);

/// When this manager last applied the zone's status (from managedFields, so it survives a
/// restart and needs no memory of its own).
fn last_status_write(zone: &ManagedZone) -> Option<Timestamp> {
    zone.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|entry| {
            entry.manager.as_deref() == Some(FIELD_MANAGER)
                && entry.subresource.as_deref() == Some("status")
        })
        .filter_map(|entry| entry.time.as_ref().map(|time| time.0))
        .max()
}

/// How long to hold a status write back (pure): only when nothing but the record count and
/// the serial (with its digest) differs and the last write is younger than [`COUNT_REFRESH`].
fn count_refresh_wait(
    current: Option<&ManagedZoneStatus>,
    wanted: &ManagedZoneStatus,
    last_write: Option<Timestamp>,
    now: Timestamp,
) -> Option<Duration> {
    let current = current?;
    let without_counts = |status: &ManagedZoneStatus| ManagedZoneStatus {
        record_count: None,
        serial: None,
        content_digest: None,
        ..status.clone()
    };
    if current == wanted || without_counts(current) != without_counts(wanted) {
        return None;
    }
    let since = Duration::try_from(now.duration_since(last_write?)).unwrap_or_default();
    COUNT_REFRESH
        .checked_sub(since)
        .filter(|wait| !wait.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(count: i64, provider: &str) -> ManagedZoneStatus {
        ManagedZoneStatus {
            record_count: Some(count),
            provider: Some(provider.into()),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_fresh_count_only_change_waits() {
        let now: Timestamp = "2026-11-23T12:00:00Z".parse().unwrap();
        let ago = |seconds: i64| Some(now - k8s_openapi::jiff::SignedDuration::from_secs(seconds));
        let cases = [
            // (current, wanted, last write, wait)
            (
                Some(status(5, "embedded")),
                status(6, "embedded"),
                ago(3),
                Some(7),
            ),
            (
                Some(status(5, "embedded")),
                status(6, "embedded"),
                ago(10),
                None,
            ),
            (
                Some(status(5, "embedded")),
                status(6, "embedded"),
                ago(60),
                None,
            ),
            // Never written by this manager: write.
            (
                Some(status(5, "embedded")),
                status(6, "embedded"),
                None,
                None,
            ),
            // Something besides the count changed: write at once.
            (
                Some(status(5, "embedded")),
                status(6, "route53"),
                ago(1),
                None,
            ),
            (
                Some(status(5, "embedded")),
                status(5, "route53"),
                ago(1),
                None,
            ),
            // No status yet: write at once.
            (None, status(6, "embedded"), ago(1), None),
            // A new serial is held back as a count is.
            (
                Some(status(5, "embedded")),
                ManagedZoneStatus {
                    serial: Some(1_800_000_001),
                    content_digest: Some("d".into()),
                    ..status(5, "embedded")
                },
                ago(4),
                Some(6),
            ),
            // Nothing differs: nothing to hold back (and nothing is written).
            (
                Some(status(5, "embedded")),
                status(5, "embedded"),
                ago(1),
                None,
            ),
        ];
        for (current, wanted, last, wait) in cases {
            assert_eq!(
                count_refresh_wait(current.as_ref(), &wanted, last, now),
                wait.map(Duration::from_secs),
                "{current:?} → {wanted:?}, last write {last:?}"
            );
        }
    }

    fn object<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> Arc<K> {
        Arc::new(serde_json::from_value(value).expect("a valid object"))
    }

    fn record(name: &str, zone: &str, policy: &str) -> Arc<DNSRecord> {
        object(json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
            "metadata": {
                "name": name, "namespace": "team",
                "labels": { POLICY_LABEL: policy },
            },
            "spec": { "managedZone": { "name": zone }, "endpoints": [] },
        }))
    }

    fn policy(name: &str, fail_static: Option<(&str, &str)>) -> Arc<DNSPolicy> {
        let conditions: Vec<_> = fail_static
            .into_iter()
            .map(|(reason, message)| {
                json!({
                    "type": conditions::FAIL_STATIC, "status": "True", "reason": reason,
                    "message": message, "lastTransitionTime": "2026-11-25T12:00:00Z",
                })
            })
            .collect();
        object(json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
            "metadata": { "name": name, "namespace": "team" },
            "spec": { "targetRef": { "name": name } },
            "status": { "conditions": conditions },
        }))
    }

    #[test]
    fn the_zone_names_ten_kept_policies_at_most_each_cut_short() {
        let few =
            kept_message(["DNSPolicy a: x".to_string(), "DNSPolicy b: y".to_string()].into_iter());
        assert_eq!(few, "DNSPolicy a: x; DNSPolicy b: y");
        let many: Vec<String> = (0..6000)
            .map(|i| {
                format!(
                    "DNSPolicy gw-{i:04}: {}",
                    "cluster kept silent; ".repeat(50)
                )
            })
            .collect();
        let message = kept_message(many.into_iter());
        assert!(
            message.ends_with("; and 5990 more DNSPolicies"),
            "{message}"
        );
        assert!(message.starts_with("DNSPolicy gw-0000: "));
        assert_eq!(message.matches('…').count(), 10);
        assert!(
            message.len() < 10 * (FAIL_STATIC_POLICY_MESSAGE + 4) + 100,
            "{}",
            message.len()
        );
    }

    #[test]
    fn the_zone_says_which_of_its_policies_a_brake_holds() {
        let zone: ManagedZone = serde_json::from_value(json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
            "metadata": { "name": "example", "namespace": "team" },
            "spec": { "domainName": "example.com" },
        }))
        .unwrap();
        let records = [
            record("web-api", "example", "web"),
            record("shop-api", "example", "shop"),
            record("other-api", "elsewhere", "other"),
        ];
        let brake = conditions::fail_static::FLEET_BRAKE;
        let kept = conditions::fail_static::SILENT_CLUSTERS_KEPT;
        let none = conditions::fail_static::NONE_KEPT;
        let cases = [
            // (policies, status, reason, message)
            (
                vec![policy("web", None), policy("shop", None)],
                false,
                none,
                "no silent cluster is kept in the zone's records",
            ),
            // A policy of another zone is not this zone's concern.
            (
                vec![
                    policy("web", None),
                    policy("other", Some((brake, "c1 held"))),
                ],
                false,
                none,
                "no silent cluster is kept in the zone's records",
            ),
            (
                vec![policy("web", Some((kept, "c2 vouched")))],
                true,
                kept,
                "DNSPolicy web: c2 vouched",
            ),
            // The brake comes first, whatever the names.
            (
                vec![
                    policy("web", Some((kept, "c2 vouched"))),
                    policy("shop", Some((brake, "c1 held"))),
                ],
                true,
                brake,
                "DNSPolicy shop: c1 held; DNSPolicy web: c2 vouched",
            ),
        ];
        for (policies, status, reason, message) in cases {
            let condition = fail_static_condition(&zone, &records, &policies);
            assert_eq!(
                (
                    condition.status,
                    condition.reason,
                    condition.message.as_str()
                ),
                (status, reason, message),
                "{policies:?}"
            );
        }
    }
}
