//! DNSRecord → the zone's provider. The record's endpoints are planned against the zone with
//! external-dns-compatible ownership (owner: `spec.ownerID`, else the record's UID) and applied
//! in batches; status says what is published. Deleting a record removes only its own
//! contribution. Provider errors are said in status and retried with backoff; what was
//! published before stays published.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | DNSRecords, ManagedZones, Secrets; on the hub also DNSHealthCheckProbes, ProbeResults, ClusterReports, heartbeat Leases |
//! | **Triggered by** ([`triggers`]) | the record; its zone; the zone's provider Secret or the health check's header Secret; on the hub, a changed verdict of one of its probes; a timer at the heartbeat timeout while it has health checks |
//! | **Gathers** ([`gather`]) | the zone and its provider (credentials from the cache); the live clusters' probe results; then the zone's records from the provider, only when something may have changed (hub-less on Route53, first the host's own records, which often show nothing to do) |
//! | **Decides** (pure) | health pruning ([`crate::decide::health`], [`crate::decide::shared_health`]); the active tiers; then [`publication`]: the plan guard's verdict, the changes (`meridian_dns::plan`) with external-dns ownership and the host's mark, what status says |
//! | **Writes** ([`health`], [`status`]) | the provider's records, in batches; the record's probes and their status (hub); the record's status |

mod gather;
mod health;
pub mod publication;
mod status;
mod tiers;
pub mod triggers;
pub mod verify;

use std::sync::Arc;
use std::time::Instant;

use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::controller::Action;
use meridian_api::conditions::{self};
use meridian_api::kuadrant::{DNSHealthCheckProbe, DNSPolicy, DNSRecord};
use meridian_dns::model::Endpoint;
use meridian_dns::model::{RecordType, is_at_or_below};
use meridian_dns::plan::{PlanInput, Registry, plan};
use meridian_dns::tree::RecordTree;
use meridian_providers::Provider;

use crate::decide::convert::all_to_engine;
use crate::decide::health::PROBE_RECORD_LABEL;
use crate::decide::host_marks::{last_modified_name, look_settles};
use crate::decide::shared_health;
use crate::runtime::caches::run_controller;
use crate::runtime::journal;
use crate::zones::zone_provider::{HostRead, ZoneProvider};
use crate::{
    Context, Error, decide::plan_guard, delete_if_present, retry_after, runtime::indexes,
    with_finalizer,
};

use gather::{zone_provider, zone_published_count};
use health::{agree_on_health, check_health, delete_probes, probe_host};
use publication::Publication;
use status::{provider_failed, ready_as_before, write_status};

pub use crate::runtime::identity::RECORD_FINALIZER as FINALIZER;
const CONTROLLER: &str = "dnsrecord";
/// The shortest wait before a refresh comes again.
const MIN_REQUEUE: std::time::Duration = std::time::Duration::from_secs(1);

/// Reasons of the record's `Ready` condition.
pub mod reasons {
    pub const PUBLISHED: &str = "Published";
    pub const PARTLY_PUBLISHED: &str = "PartlyPublished";
    pub const ZONE_NOT_FOUND: &str = "ZoneNotFound";
    pub const PROVIDER_UNAVAILABLE: &str = "ProviderUnavailable";
    pub const PROVIDER_ERROR: &str = "ProviderError";
    pub const INVALID: &str = "Invalid";
    /// The zone's provider cannot hold what the record asks (`meridian_dns::fidelity`).
    pub const UNSUPPORTED: &str = "Unsupported";
}

/// Runs the DNSRecord controller until `stop`.
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let all = ctx.caches.records.store().clone();
    let mut requests = triggers::requests(&ctx);
    let (drifted, verifier) = verify::start(ctx.clone());
    requests.push(drifted);
    run_controller(
        all,
        ctx.config.concurrency.records,
        requests,
        reconcile,
        error_policy,
        ctx.clone(),
        stop,
    )
    .await;
    verifier.abort();
}

pub async fn reconcile(record: Arc<DNSRecord>, ctx: Arc<Context>) -> Result<Action, Error> {
    if record.metadata.deletion_timestamp.is_none() && policy_deleted(&record, &ctx).await? {
        // Its policy holds no finalizer: the record goes itself, and withdraws as it goes.
        // Where kube-controller-manager runs, its garbage collector would delete the record
        // too (the owner reference); this does not wait for it.
        tracing::info!(record = %record.name_any(), "deleting the DNSRecord of a deleted DNSPolicy");
        let api: Api<DNSRecord> =
            Api::namespaced(ctx.client.clone(), &record.namespace().unwrap_or_default());
        delete_if_present(&api, &record.name_any()).await?;
        return Ok(Action::await_change());
    }
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
            async move {
                let action = withdraw(&record, ctx).await?;
                release_gateways(&record, ctx).await?;
                ctx.host_marks.forget(&crate::object_key(
                    "DNSRecord",
                    record.namespace().as_deref(),
                    &record.name_any(),
                ));
                Ok(action)
            }
        },
    )
    .await
}

/// Whether the record's DNSPolicy is deleted: gone from the cache and, asked directly, from
/// the API server (or replaced by a namesake). Only that evidence deletes a record: a cache
/// that has not seen the policy yet does not.
async fn policy_deleted(record: &DNSRecord, ctx: &Context) -> Result<bool, Error> {
    let Some(owner) = indexes::owning_policy(record) else {
        return Ok(false);
    };
    let namespace = record.namespace().unwrap_or_default();
    let same_policy = |policy: &DNSPolicy| policy.uid().as_deref() == Some(owner.uid.as_str());
    if ctx
        .caches
        .policies
        .get(Some(&namespace), &owner.name)
        .is_some_and(|policy| same_policy(&policy))
    {
        return Ok(false);
    }
    let api: Api<DNSPolicy> = Api::namespaced(ctx.client.clone(), &namespace);
    Ok(!api
        .get_opt(&owner.name)
        .await?
        .is_some_and(|p| same_policy(&p)))
}

/// Once a deleted policy's record has withdrawn, the Gateways no policy targets any more lose
/// their `DNSPolicyAffected` condition.
async fn release_gateways(record: &DNSRecord, ctx: &Context) -> Result<(), Error> {
    if indexes::owning_policy(record).is_none() {
        return Ok(());
    }
    let left =
        indexes::gateways_left_affected(&ctx.caches.gateways.state(), &ctx.caches.policies.state());
    for gateway in left {
        crate::reconcile::gateway_status::unmark_gateway(&gateway, ctx).await?;
    }
    Ok(())
}

pub fn error_policy(record: Arc<DNSRecord>, error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(&*record, error, &ctx, CONTROLLER)
}

/// The owner ID the record publishes under (see [`crate::zones::owners::record_owner`]).
pub fn owner_of(
    record: &DNSRecord,
    config: &crate::reconcile::context::ControllerConfig,
) -> String {
    crate::zones::owners::record_owner(record, config.hub_owner.as_deref())
}

async fn publish(record: &DNSRecord, ctx: &Context) -> Result<Action, Error> {
    let started = Instant::now();
    let requested = all_to_engine(&record.spec.endpoints);
    let previous: Option<Vec<Endpoint>> = record
        .status
        .as_ref()
        .filter(|status| !status.endpoints.is_empty())
        .map(|status| all_to_engine(&status.endpoints));
    // On the hub, health is probes and their aggregate; in distributed mode it is agreed
    // through the zone (below, once the zone is read).
    let shared_check = record
        .spec
        .health_check
        .as_ref()
        .filter(|_| ctx.config.distributed.is_some());
    let health = match &record.spec.health_check {
        Some(check) if shared_check.is_none() => {
            Some(check_health(record, check, &requested, previous.as_deref(), ctx).await?)
        }
        Some(_) => None,
        None => {
            delete_probes(record, ctx, &[]).await?;
            None
        }
    };
    let health = health.as_ref();
    // A silent cluster's results must expire even when nothing else changes.
    // In distributed mode the resync is the refresh, and its jitter keeps the clusters sharing a
    // zone from reading it in step.
    let resync = if health.is_some() {
        ctx.config.next_resync_within(ctx.config.heartbeat_timeout)
    } else {
        ctx.config.next_resync()
    };
    let (zone, provider, zone_id) = match zone_provider(record, ctx).await {
        Ok(found) => found,
        Err((_, reason, message)) => {
            // Nothing is changed at any provider: what was published stays published.
            let outcome = (false, reason, message);
            write_status(record, ctx, None, outcome, health, Vec::new()).await?;
            return Err(Error::Waiting(format!("zone of {}", record.name_any())));
        }
    };
    let owner = owner_of(record, &ctx.config);
    let root_host = match record.spec.effective_root_host() {
        None => Err("spec.rootHost is empty and no endpoint's name holds all the others: set spec.rootHost to the host these records serve".to_string()),
        // Every endpoint is at or under the root host (the schema, or how the root host is
        // found), so this keeps the whole record inside the zone it names: a zone is never
        // a way to publish another domain's names.
        Some(root_host) if !crate::decide::zone_claims::in_zone(&root_host, &zone) => Err(format!(
            "the root host {root_host} is not in ManagedZone {}'s domain {}: a record publishes only names at or under its zone's domain",
            zone.name_any(),
            crate::decide::zone_claims::normalize(&zone.spec.domain_name)
        )),
        Some(root_host) => Ok(root_host),
    };
    let root_host = match root_host {
        Ok(root_host) => root_host,
        Err(message) => {
            let outcome = (false, reasons::INVALID, message);
            write_status(record, ctx, None, outcome, health, Vec::new()).await?;
            return Ok(Action::await_change());
        }
    };
    let healthy_endpoints = health.map_or(&requested, |h| &h.endpoints);
    let record_key = crate::object_key(
        "DNSRecord",
        record.namespace().as_deref(),
        &record.name_any(),
    );
    let distributed = ctx.config.distributed.is_some();
    // Of each weighted set with priorities, only the active tier is published (for every
    // provider: it is what they all can serve, and one failover costs one set's change).
    // In distributed mode this cluster's branch holds only its own records, which pass
    // through here; the tiers are agreed through the zone once it is read (below).
    let tiered = distributed && crate::decide::shared_tiers::has_tiers(&requested);
    // A provider of plain records publishes every serving cluster's address in the host's
    // own records: a cluster on standby leaves its addresses out of them.
    let plain = provider.fidelity().weights == meridian_dns::fidelity::Support::Missing;
    let tier_clock = tiers::tier_clock(record, ctx);
    let tiers = ctx.record_memory.tiers.choose(
        &record_key,
        healthy_endpoints,
        &requested,
        previous.as_deref(),
        tier_clock,
    );
    let (desired, mut notes) = match provider.publishable(&root_host, &tiers.endpoints) {
        // Tiers on plain records: the leaves stay published beside the host's records.
        Ok((_, notes)) if tiered && plain => {
            (tiers::plain_branch(&root_host, &tiers.endpoints), notes)
        }
        Ok(publishable) => publishable,
        Err(missing) => {
            // Nothing is changed at the provider: what was published stays published.
            let message = format!(
                "{} cannot hold this record tree: {}",
                provider.kind(),
                missing.join("; ")
            );
            let outcome = (false, reasons::UNSUPPORTED, message);
            write_status(record, ctx, None, outcome, health, Vec::new()).await?;
            return Ok(Action::requeue(resync));
        }
    };
    // As the provider stores them (a webhook's own normalising), so steady state plans nothing.
    let mut desired = match provider.adjusted(&root_host, desired).await {
        Ok((adjusted, adjusted_notes)) => {
            notes.extend(adjusted_notes);
            adjusted
        }
        Err(error) => return provider_failed(record, ctx, &provider, error).await,
    };
    notes.extend(tier_notes(&tiers, distributed));
    let resync = tiers.recheck_after.map_or(resync, |after| {
        resync.min(std::time::Duration::from_secs(after))
    });

    // Steady state at a provider: what this generation asks for is what status says is
    // published, so there is nothing to ask the provider (not even a zone list). Embedded zones
    // are always planned: reading them is free, and after a restart they start empty.
    // A status that names another owner (or none: written before owner IDs) was published
    // under an earlier one, whose records this pass adopts.
    let published_as_desired = record.status.as_ref().is_some_and(|status| {
        status.observed_generation == record.metadata.generation
            && conditions::condition_status(&status.conditions, conditions::READY) == Some(true)
            && status.owner_id.as_deref() == Some(owner.as_str())
    }) && previous.as_deref().is_some_and(|previous| {
        previous == desired.as_slice()
            // A cluster on standby publishes its branch without its tiered records.
            || tiered
                && if plain {
                    tiers::plain_published_but_standby(&root_host, &desired, previous)
                } else {
                    tiers::published_but_standby(&requested, &desired, previous)
                }
    });
    let mark_name = last_modified_name(&root_host);
    let shared = shared_check.zip(ctx.shared_probes.as_ref());
    let failing = shared.map(|(_, probes)| probes.failing(&record_key));
    // What this cluster's probes say changed since the last full pass: look at the zone.
    let health_unchanged = failing.as_ref().is_none_or(|failing| {
        ctx.record_memory
            .probes_seen
            .unchanged(&record_key, failing)
    });
    // A verification pass of the zone found this record drifted: read and re-plan it.
    let drifted = ctx.record_memory.drifted.take(&record_key);
    // A better tier's hold-down ended: nothing in the zone says so, so plan.
    let tier_recheck = tiered
        && ctx
            .record_memory
            .tier_rechecks
            .due(&record_key, tier_clock.now);
    // The zone listing this plan reads must start after whatever made it look: this pass's
    // start (or shortly before, for a record never published under any owner), or the read of
    // the host's mark below (see `meridian_providers::listing`).
    let never_published = record
        .status
        .as_ref()
        .is_none_or(|status| status.owner_id.is_none());
    let mut look_since = meridian_providers::listing::earliest_listing(started, never_published);
    if published_as_desired
        && health_unchanged
        && !drifted
        && !tier_recheck
        && !matches!(provider, ZoneProvider::Embedded(_))
    {
        // On the hub, nothing but this record changes what this record publishes. In
        // distributed mode other clusters write the same names: one small read (the host's
        // last-modified mark, or the host itself where that is one call) says whether anyone
        // did since this cluster last looked.
        let sole_owner = record
            .status
            .as_ref()
            .is_some_and(|status| status.domain_owners == [owner.as_str()]);
        // A host shared by a large fleet is looked at less often than every refresh, so that
        // the whole fleet's looks stay inside a fixed share of the provider's budget; the
        // refreshes between looks still weigh this cluster's own probes (a verdict that
        // changed plans above, without waiting for the look).
        let owners = record
            .status
            .as_ref()
            .map_or(0, |status| status.domain_owners.len());
        let look_due = !distributed
            || if sole_owner {
                let unread_limit = crate::decide::host_marks::sole_owner_refreshes_unread(
                    ctx.config.resync,
                    verify::fleet_seen(&ctx.caches.records.state(), &zone, &ctx.host_marks),
                );
                ctx.host_marks.read_due(&record_key, true, unread_limit)
            } else {
                ctx.host_marks.look_due(&record_key, Instant::now())
            };
        let nothing_to_plan = if distributed && !look_due {
            true
        } else if distributed {
            // A shared host that fits one read is looked at whole: its mark is among its
            // records, so the look costs one call, and one that finds the mark moved needs no
            // second read to settle.
            let whole = !sole_owner && ctx.host_marks.host_fits_one_read(&record_key);
            let (mark, host_read) =
                match read_mark(&provider, &zone_id, &root_host, &mark_name, whole).await {
                    Ok(read) => read,
                    Err(error) => return look_failed(record, ctx, &provider, error).await,
                };
            // The owners as they are now where the look read the host's member list (a
            // health-checked host): status has them as of the last plan, far behind a fleet
            // that is still joining.
            let owners = host_read
                .as_ref()
                .and_then(|read| shared_health::read_members(&read.records, &root_host))
                .map_or(owners, |(_, members)| owners.max(members.len()));
            ctx.host_marks.note_owners(&record_key, owners);
            if let Some(read) = &host_read {
                ctx.host_marks.note_host_read(&record_key, read.one_call);
            }
            look_since = Instant::now();
            if !sole_owner {
                // Counted from a look that read: a throttled one is tried again at once.
                ctx.host_marks.looked(
                    &record_key,
                    look_since,
                    crate::jittered(crate::decide::host_marks::look_interval(
                        ctx.config.resync,
                        owners * verify::shared_hosts_seen(&ctx.caches.records.state(), &zone),
                    )),
                );
            }
            if ctx.host_marks.last_seen(&record_key) == Some(mark.clone()) {
                true
            } else if sole_owner {
                // Another cluster started publishing this host: plan, to learn of it.
                false
            } else {
                // Another cluster changed the host: a read of the host's own records (where
                // the provider has one) often shows there is nothing for this one to do.
                let host_read = match host_read {
                    Some(read) => Some(Ok(read)),
                    None => provider.read_host(&zone_id, &root_host).await,
                };
                match host_read {
                    None => false,
                    Some(Err(error)) => {
                        return look_failed(record, ctx, &provider, error).await;
                    }
                    Some(Ok(HostRead {
                        records: host_records,
                        one_call,
                    })) => {
                        ctx.host_marks.note_host_read(&record_key, one_call);
                        let published = previous.as_deref().unwrap_or_default();
                        let settled = look_settles(
                            &owner,
                            failing.as_ref(),
                            published,
                            &host_records,
                            &root_host,
                        ) && shared.is_none_or(|(check, probes)| {
                            // As a plan would: another cluster's new address is probed too.
                            probe_host(
                                record,
                                ctx,
                                (check, probes.as_ref()),
                                published,
                                &host_records,
                            )
                            .is_ok()
                        }) && (!tiered
                            || tiers::tiers_settle(
                                record,
                                ctx,
                                tiers::TierLook {
                                    owner: &owner,
                                    requested: &requested,
                                    proposed: &desired,
                                    published,
                                    host_records: &host_records,
                                    failing: failing.as_ref(),
                                    plain_tree: plain.then_some(tiers.endpoints.as_slice()),
                                },
                            ));
                        tracing::debug!(record = %record_key, settled, "looked at the host's records");
                        if settled {
                            ctx.host_marks.remember(&record_key, mark);
                        }
                        settled
                    }
                }
            }
        } else {
            true
        };
        if nothing_to_plan {
            write_status(
                record,
                ctx,
                None,
                ready_as_before(record),
                health,
                Vec::new(),
            )
            .await?;
            // The next refresh, or the next look or a hold-down's end if that comes first.
            let next_look = if distributed && !sole_owner {
                ctx.host_marks.next_look_in(&record_key, Instant::now())
            } else {
                resync
            };
            let recheck = ctx
                .record_memory
                .tier_rechecks
                .wait(&record_key, tier_clock.now)
                .map_or(resync, std::time::Duration::from_secs);
            return Ok(Action::requeue(
                resync.min(next_look.min(recheck).max(MIN_REQUEUE)),
            ));
        }
    }

    tracing::debug!(
        record = %record_key,
        first = previous.is_none(),
        published_as_desired,
        health_unchanged,
        drifted,
        "reading the zone for a plan"
    );
    let current = provider
        .host_records(&zone_id, &root_host, look_since)
        .await;
    let current = match current {
        Ok(current) => current,
        Err(error) => return provider_failed(record, ctx, &provider, error).await,
    };
    let current = match adopt(
        record, ctx, &provider, &zone_id, &owner, &root_host, current,
    )
    .await
    {
        Ok(current) => current,
        Err(Error::Provider(error)) => return provider_failed(record, ctx, &provider, error).await,
        Err(error) => return Err(error),
    };
    let mut health_changes = meridian_dns::changes::Changes::default();
    // Probe verdicts withdraw leaves in this pass (evidence, which the plan guard never holds).
    let mut health_withdraws =
        health.is_some_and(|h| h.endpoints.len() < requested.len()) || tiers.switched;
    let proposed = distributed.then(|| desired.clone());
    let mut down = std::collections::BTreeSet::new();
    let mut withdrawn = std::collections::BTreeSet::new();
    // What this cluster's probes say, remembered once the plan made of it has landed: a
    // refused or held plan must be made again, not taken as done by the next refresh.
    let mut seen_failing = None;
    if let (Some((check, probes)), Some(failing)) = (shared, failing) {
        let proposed_count = desired.len();
        let agreed = agree_on_health(
            record,
            ctx,
            (check, probes.as_ref()),
            &failing,
            &owner,
            desired,
            &current,
        )
        .await?;
        health_withdraws |= agreed.endpoints.len() < proposed_count;
        desired = agreed.endpoints;
        notes.extend(agreed.notes);
        health_changes = agreed.changes;
        down = agreed.down;
        withdrawn = agreed.withdrawn;
        seen_failing = Some(failing);
    }
    // Distributed mode: which of this cluster's weighted records serve, from every cluster's
    // tier standing in the zone. A record without tiers (any more) only has its standing
    // deleted, so no one counts a tier it left.
    let mut resync = resync;
    if let Some(proposed) = &proposed {
        // On plain records the tiers decide on the branch as a tree, its leaves as health
        // left them.
        let plain_tiers = tiered && plain;
        let healthy_tree = plain_tiers
            .then(|| health::without_withdrawn(&root_host, tiers.endpoints.clone(), &withdrawn));
        let shared_tiers = tiers::share_tiers(
            record,
            ctx,
            tiers::TierPass {
                owner: &owner,
                requested: if tiered { &requested } else { &[] },
                proposed: if plain_tiers {
                    &tiers.endpoints
                } else {
                    proposed
                },
                healthy: healthy_tree.as_deref().unwrap_or(&desired),
                zone: &current,
                down: &down,
                plain: plain_tiers,
            },
        );
        health_changes.append(shared_tiers.changes);
        if tiered {
            desired = if plain_tiers {
                // As the provider stores them, as the records before the tiers were.
                match provider.adjusted(&root_host, shared_tiers.endpoints).await {
                    Ok((adjusted, _)) => adjusted,
                    Err(error) => return provider_failed(record, ctx, &provider, error).await,
                }
            } else {
                shared_tiers.endpoints
            };
            // The tree's leaves left out for health are the fleet's evidence too.
            health_withdraws |= plain_tiers && !withdrawn.is_empty();
            notes.extend(shared_tiers.notes);
            health_withdraws |= shared_tiers.withdraws;
            if let Some(after) = shared_tiers.recheck_after {
                resync = resync.min(std::time::Duration::from_secs(after.max(1)));
            }
        }
    }
    let mark_next = format!("{} {owner}", (ctx.clock)());
    let decided = publication::decide(publication::Inputs {
        record: &record_key,
        generation: record.metadata.generation,
        owner: &owner,
        root_host: &root_host,
        provider: provider.kind(),
        previous: previous.as_deref(),
        desired: &desired,
        current: &current,
        health_changes,
        health_withdraws,
        // Counted over every record of the zone, so only where the guard reads it: a record
        // that published nothing yet is never held.
        zone_records: if previous.is_some() {
            zone_published_count(record, ctx)
        } else {
            0
        },
        guard: &plan_guard::ZoneGuard::from_annotations(zone.annotations()),
        notes: notes.clone(),
        mark: distributed.then_some(publication::Mark {
            name: &mark_name,
            next: &mark_next,
        }),
    });
    let write = match decided {
        Publication::Hold(held) => return hold_plan(record, ctx, &held, health).await,
        Publication::Write(write) => write,
    };
    if let Some(plan) = &write.approved {
        tracing::info!(record = %record_key, %plan, "applying a plan over the zone's threshold: approved");
        ctx.notify(
            record,
            false,
            "PlanApproved",
            "Publish",
            format!(
                "plan {plan} applied: approved by the ManagedZone annotation {}",
                plan_guard::APPROVE_ANNOTATION
            ),
        )
        .await;
    }
    if !write.changes.is_empty() {
        ctx.check_fence()?;
        if let Err(error) = provider.apply(&zone_id, &write.changes).await {
            let outcome = match error {
                meridian_providers::ProviderError::Throttled(_) => "throttled",
                _ => "error",
            };
            ctx.metrics.provider_call(provider.kind(), outcome);
            return provider_failed(record, ctx, &provider, error).await;
        }
        ctx.metrics.provider_call(provider.kind(), "ok");
        ctx.metrics.published(started.elapsed());
        journal_change(
            record,
            ctx,
            &root_host,
            &write.changes,
            why_changed(record, health, &notes),
        );
    }
    ctx.record_memory.failovers.published(
        &ctx.metrics,
        &record_key,
        &RecordTree::from_records(root_host.as_str(), desired.clone()).leaf_addresses(),
        (ctx.clock)(),
        &zone.spec.domain_name,
    );
    if let Some(failing) = seen_failing {
        ctx.record_memory.probes_seen.remember(&record_key, failing);
    }
    if distributed {
        ctx.host_marks.remember(&record_key, write.mark_after);
        if !write.changes.is_empty() {
            ctx.host_marks.read_next_refresh(&record_key);
        }
    }
    write_status(
        record,
        ctx,
        Some(&desired),
        write.ready,
        health,
        write.owners,
    )
    .await?;
    // A conflict with another owner is not fought over: look again later and later (its own
    // count, which a successful pass does not reset).
    let conflict_key = format!("{record_key}/conflict");
    if write.conflict {
        return Ok(ctx.retry_after_failure(&conflict_key));
    }
    ctx.succeeded(&conflict_key);
    Ok(Action::requeue(resync))
}

/// Takes over what the record published under an earlier owner ID (its UID, before owner IDs
/// were configuration; or the owner ID status names, if the hub's changed), in a batch of its
/// own that changes only ownership records, so no answer changes and a failure midway leaves
/// each record owned by one of the two. Returns the host's records as they are afterwards.
async fn adopt(
    record: &DNSRecord,
    ctx: &Context,
    provider: &ZoneProvider,
    zone_id: &str,
    owner: &str,
    root_host: &str,
    current: Vec<Endpoint>,
) -> Result<Vec<Endpoint>, Error> {
    let earlier = crate::zones::owners::earlier_owners(record, owner);
    let earlier: Vec<&str> = earlier.iter().map(String::as_str).collect();
    let adopted = meridian_dns::plan::adoption(&current, &earlier, owner, root_host);
    if adopted.changes.is_empty() {
        return Ok(current);
    }
    ctx.check_fence()?;
    // Through `provider_failed` (the caller's), which says why in status once it is raced again
    // and again.
    provider
        .apply(zone_id, &adopted.changes)
        .await
        .map_err(Error::Provider)?;
    ctx.metrics.provider_call(provider.kind(), "ok");
    tracing::info!(
        record = %record.name_any(),
        %owner,
        from = ?earlier,
        moved = adopted.changes.creates.len(),
        removed = adopted.changes.deletes.len(),
        "adopted the records an earlier owner ID published"
    );
    journal_change(
        record,
        ctx,
        root_host,
        &adopted.changes,
        format!("ownership moved from {} to {owner}", earlier.join(", ")),
    );
    Ok(adopted.zone)
}

/// Records a change applied to the zone in the journal (the live view's recent changes).
fn journal_change(
    record: &DNSRecord,
    ctx: &Context,
    host: &str,
    changes: &meridian_dns::changes::Changes,
    reason: String,
) {
    ctx.journal.record(journal::Entry {
        at: (ctx.clock)(),
        record: format!(
            "{}/{}",
            record.namespace().unwrap_or_default(),
            record.name_any()
        ),
        host: host.to_string(),
        changes: format!(
            "+{} ~{} -{}",
            changes.creates.len(),
            changes.updates.len(),
            changes.deletes.len()
        ),
        reason,
    });
}

/// Why a publication changed the zone, for the journal: a new spec, what health says (a leaf
/// withdrawn, restored or awaiting its first probe), the notes (tiers, drains); otherwise the
/// zone differed from the plan (changed out of band, or a restart's empty embedded zone).
fn why_changed(
    record: &DNSRecord,
    health: Option<&crate::decide::health::HealthOutcome>,
    notes: &[String],
) -> String {
    let mut why = Vec::new();
    let observed = record.status.as_ref().and_then(|s| s.observed_generation);
    if observed != record.metadata.generation {
        why.push(format!(
            "new spec (generation {})",
            record.metadata.generation.unwrap_or_default()
        ));
    }
    why.extend(health.map(|h| h.message.clone()));
    why.extend(notes.iter().cloned());
    if why.is_empty() {
        why.push(
            "the zone differed from the plan (changed out of band, or after a restart)".into(),
        );
    }
    why.join("; ")
}

/// What status says about tiers: the sets not served by their best tier, and why.
fn tier_notes(tiers: &meridian_dns::tiers::TierChoice, distributed: bool) -> Vec<String> {
    // Agreed through the zone instead ([`tiers`]), which says its own.
    if distributed {
        return Vec::new();
    }
    tiers
        .active
        .iter()
        .filter(|active| active.reason != meridian_dns::tiers::BEST_TIER)
        .map(|active| {
            format!(
                "{} served by tier {}: {}",
                active.set, active.priority, active.reason
            )
        })
        .collect()
}

/// A look at a host that could not read: a throttled one changes nothing at the provider and
/// says nothing new of the host, so status stays as it is and the look is tried again with
/// backoff. Marking the record not Ready would make its next pass plan from a listing of the
/// whole zone, several calls where the look was one, and at a fleet's cold start, when the
/// budget is short, that turned every throttled look into more of what throttled it. Other
/// errors are reported as a plan's would be.
async fn look_failed(
    record: &DNSRecord,
    ctx: &Context,
    provider: &ZoneProvider,
    error: meridian_providers::ProviderError,
) -> Result<Action, Error> {
    if let meridian_providers::ProviderError::Throttled(_) = &error {
        return Err(Error::Provider(error));
    }
    provider_failed(record, ctx, provider, error).await
}

/// A look at a host's last-modified mark: the mark's value, and the host's records when `whole`
/// asks for them, the provider has such a read and the mark lies under the host (then the mark
/// comes from them, in the same call); else the mark alone.
async fn read_mark(
    provider: &ZoneProvider,
    zone_id: &str,
    root_host: &str,
    mark_name: &str,
    whole: bool,
) -> Result<(Option<String>, Option<HostRead>), meridian_providers::ProviderError> {
    let mark_of = |found: Option<&Endpoint>| found.map(|m| m.targets.join(""));
    if whole
        && is_at_or_below(mark_name, root_host.trim_start_matches("*."))
        && let Some(read) = provider.read_host(zone_id, root_host).await
    {
        let read = read?;
        let mark = mark_of(
            read.records
                .iter()
                .find(|e| e.record_type == RecordType::Txt && e.dns_name == mark_name),
        );
        return Ok((mark, Some(read)));
    }
    let mark = provider
        .read_record(zone_id, mark_name, RecordType::Txt)
        .await?;
    Ok((mark_of(mark.as_ref()), None))
}

/// A plan over the zone's threshold: nothing of it is applied, what was published stays, and
/// status (here and, from it, the ManagedZone's) says which plan and how to approve it. The
/// approval annotation on the zone wakes the record.
async fn hold_plan(
    record: &DNSRecord,
    ctx: &Context,
    held: &plan_guard::Held,
    health: Option<&crate::decide::health::HealthOutcome>,
) -> Result<Action, Error> {
    let message = held.message();
    let (_, reason_before, message_before) = ready_as_before(record);
    if reason_before != plan_guard::HELD_REASON || message_before != message {
        tracing::warn!(record = %record.name_any(), plan = %held.plan, changed = held.changed, zone_records = held.zone_records, "plan held: over the zone's threshold");
        ctx.notify(
            record,
            true,
            plan_guard::HELD_REASON,
            "Publish",
            message.clone(),
        )
        .await;
    }
    write_status(
        record,
        ctx,
        None,
        (false, plan_guard::HELD_REASON, message),
        health,
        Vec::new(),
    )
    .await?;
    Ok(Action::requeue(ctx.config.next_resync()))
}

/// Removes this record's contribution from its zone, then lets the finalizer go.
async fn withdraw(record: &DNSRecord, ctx: &Context) -> Result<Action, Error> {
    let probes: Api<DNSHealthCheckProbe> =
        Api::namespaced(ctx.client.clone(), &record.namespace().unwrap_or_default());
    probes
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{PROBE_RECORD_LABEL}={}", record.name_any())),
        )
        .await?;
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
        // The zone lost its claim (an admin's grants changed): it is not this record's to
        // change any more, and a finalizer kept for it would never go.
        Err((
            _,
            crate::decide::zone_claims::reasons::DOMAIN_CLAIMED
            | crate::decide::zone_claims::reasons::DOMAIN_NOT_GRANTED
            | crate::decide::zone_claims::reasons::PUBLIC_SUFFIX,
            message,
        )) => {
            tracing::warn!(record = %record.name_any(), %message, "deleted without withdrawing: its zone does not hold its domain");
            return Ok(Action::await_change());
        }
        Err((_, _, message)) => return Err(Error::Waiting(message)),
    };
    let owner = owner_of(record, &ctx.config);
    let Some(root_host) = record.spec.effective_root_host() else {
        // Without a root host nothing was ever published.
        return Ok(Action::await_change());
    };
    let current = provider
        .host_records(&zone_id, &root_host, Instant::now())
        .await?;
    let current = adopt(
        record, ctx, &provider, &zone_id, &owner, &root_host, current,
    )
    .await
    .map_err(|error| match error {
        // A race is retried shortly here too (`Error::Raced`).
        Error::Provider(error) => Error::from(error),
        other => other,
    })?;
    let planned = plan(
        &PlanInput {
            owner: &owner,
            root_host: &root_host,
            desired: &[],
            previous: Some(&previous),
        },
        &current,
    );
    let mut changes = planned.changes.clone();
    if ctx.config.distributed.is_some() {
        // Out of the host's member list and failure reports too.
        changes.append(shared_health::leave(&owner, &current, &root_host));
        changes.append(crate::decide::shared_tiers::leave_host(
            &owner, &current, &root_host,
        ));
    }
    if ctx.config.distributed.is_some() && !changes.is_empty() {
        let mark_name = last_modified_name(&root_host);
        let mark = current
            .iter()
            .find(|e| e.dns_name == mark_name && e.record_type == RecordType::Txt);
        let base = root_host.trim_start_matches("*.");
        let others_remain = Registry::read(&current)
            .ownership
            .iter()
            .any(|(key, owners)| {
                is_at_or_below(&key.dns_name, base) && owners.keys().any(|o| o != &owner)
            });
        match (mark, others_remain) {
            // The last owner leaves: its mark goes with it.
            (Some(mark), false) => changes.deletes.push(mark.clone()),
            (mark, true) => {
                let next = format!("{} {owner}", (ctx.clock)());
                let next = publication::Mark {
                    name: &mark_name,
                    next: &next,
                };
                publication::move_mark(&mut changes, next, mark);
            }
            (None, false) => {}
        }
    }
    if !changes.is_empty() {
        ctx.check_fence()?;
        provider.apply(&zone_id, &changes).await?;
        ctx.metrics.provider_call(provider.kind(), "ok");
    }
    tracing::info!(record = %record.name_any(), removed = planned.changes.deletes.len(), "withdrew records");
    Ok(Action::await_change())
}
