//! What wakes a record: the trigger streams, built from the pure indexes of
//! [`crate::runtime::indexes`] over the shared caches.

use std::sync::Arc;

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::meridian::{ClusterReport, ProbeResults};

use crate::decide::health::PROBE_RECORD_LABEL;
use crate::runtime::caches::{Change, everything_once, own_changes_beyond_status, triggers};
use crate::{Context, runtime::indexes};

/// What wakes a record: besides its own records it follows, from the shared caches, the
/// deletion of its DNSPolicy, the ManagedZones they publish into and, on the hub, the probe
/// results whose verdicts changed ([`crate::runtime::indexes::records_with_changed_verdicts`]) and the
/// reports whose Gateway addresses changed ([`crate::runtime::indexes::records_behind_changed_gateways`]). In
/// distributed mode the caches hold only the records this cluster's agent wrote.
pub fn requests(ctx: &Arc<Context>) -> Vec<BoxStream<'static, ObjectRef<DNSRecord>>> {
    let caches = ctx.caches.clone();
    let all = caches.records.store().clone();
    let by_zone = {
        let records = all.clone();
        move |change: &Change<ManagedZone>| match change {
            Change::Applied { old, new: zone }
                if !indexes::zone_changed_for_dns(old.as_deref(), zone) =>
            {
                Vec::new()
            }
            Change::Applied { new: zone, .. } | Change::Deleted(zone) => {
                let namespace = zone.namespace();
                records
                    .state()
                    .iter()
                    .filter(|r| {
                        r.namespace() == namespace && r.spec.managed_zone.name == zone.name_any()
                    })
                    .map(|r| ObjectRef::from_obj(&**r))
                    .collect()
            }
            Change::Relisted => Vec::new(),
        }
    };
    let by_secret = {
        let (records, zones) = (all.clone(), caches.zones.store().clone());
        move |change: &Change<Secret>| {
            let Some(secret) = change.object() else {
                return Vec::new();
            };
            indexes::records_using_secret(
                &records.state(),
                &zones.state(),
                &secret.namespace().unwrap_or_default(),
                &secret.name_any(),
            )
        }
    };
    // A deleted policy's records delete themselves (policies hold no finalizer); a relist
    // may have missed a deletion.
    let by_deleted_policy = {
        let (records, policies) = (all.clone(), caches.policies.store().clone());
        move |change: &Change<DNSPolicy>| match change {
            Change::Applied { .. } => Vec::new(),
            Change::Deleted(_) | Change::Relisted => {
                indexes::records_of_deleted_policies(&records.state(), &policies.state())
            }
        }
    };
    let mut requests = vec![
        everything_once(&caches.records),
        triggers(caches.policies.subscribe(), all.clone(), by_deleted_policy),
        // The record's status is this controller's own write: it wakes nothing.
        own_changes_beyond_status(&caches.records),
        triggers(caches.zones.subscribe(), all.clone(), by_zone),
        triggers(caches.secrets.subscribe(), all.clone(), by_secret),
    ];
    if ctx.config.distributed.is_none() {
        let probes = caches.probes.store().clone();
        let record_of_probe = move |namespace: &str, probe: &str| {
            let probe = probes.get(&ObjectRef::new(probe).within(namespace))?;
            probe.labels().get(PROBE_RECORD_LABEL).cloned()
        };
        let by_results = move |change: &Change<ProbeResults>| match change {
            Change::Applied { old, new } => {
                indexes::records_with_changed_verdicts(old.as_deref(), Some(new), &record_of_probe)
            }
            Change::Deleted(old) => {
                indexes::records_with_changed_verdicts(Some(old), None, &record_of_probe)
            }
            Change::Relisted => Vec::new(),
        };
        requests.push(triggers(
            caches.probe_results.subscribe(),
            all.clone(),
            by_results,
        ));
        let records = all.clone();
        let by_report = move |change: &Change<ClusterReport>| match change {
            Change::Applied { old, new } => indexes::records_behind_changed_gateways(
                &records.state(),
                old.as_deref(),
                Some(new),
            ),
            Change::Deleted(old) => {
                indexes::records_behind_changed_gateways(&records.state(), Some(old), None)
            }
            Change::Relisted => Vec::new(),
        };
        requests.push(triggers(caches.reports.subscribe(), all.clone(), by_report));
    }
    requests
}
