//! What wakes a record: the trigger streams over the shared caches, built from pure predicates:
//! the record's own below (which report and probe-result changes concern it), and the indexes
//! several controllers share in [`crate::runtime::indexes`].

use std::collections::{BTreeMap, BTreeSet};
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
/// results whose verdicts changed ([`records_with_changed_verdicts`]) and the
/// reports whose Gateway addresses changed ([`records_behind_changed_gateways`]). In
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
                records_with_changed_verdicts(old.as_deref(), Some(new), &record_of_probe)
            }
            Change::Deleted(old) => {
                records_with_changed_verdicts(Some(old), None, &record_of_probe)
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
            Change::Applied { old, new } => {
                records_behind_changed_gateways(&records.state(), old.as_deref(), Some(new))
            }
            Change::Deleted(old) => {
                records_behind_changed_gateways(&records.state(), Some(old), None)
            }
            Change::Relisted => Vec::new(),
        };
        requests.push(triggers(caches.reports.subscribe(), all.clone(), by_report));
    }
    requests
}

/// The health-checked DNSRecords whose tenants' downstream Gateways changed addresses (or the
/// route hostnames a wildcard is probed through) between
/// two versions of a cluster's report: only a reported Gateway address of the record's own
/// namespace (`kuadrant-<namespace>`) gets a probe, so a new one must reach the record at once,
/// not at the next resync.
pub fn records_behind_changed_gateways(
    records: &[Arc<DNSRecord>],
    old: Option<&ClusterReport>,
    new: Option<&ClusterReport>,
) -> Vec<ObjectRef<DNSRecord>> {
    let addresses = |report: Option<&ClusterReport>| -> BTreeMap<String, BTreeSet<String>> {
        let mut by_namespace: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for gateway in report.iter().flat_map(|r| &r.spec.gateways) {
            // Per Gateway: its addresses, and the route hostnames its wildcards are probed
            // through (a host moving between two Gateways of a namespace is a change).
            let addresses = gateway
                .addresses
                .iter()
                .map(|a| format!("{} {}", gateway.name, a.value));
            let hosts = gateway.listeners.iter().flat_map(|l| {
                l.route_hostnames.iter().map(|host| {
                    let listener = l.hostname.as_deref().unwrap_or_default();
                    format!("{} {listener} {host}", gateway.name)
                })
            });
            by_namespace
                .entry(gateway.namespace.clone())
                .or_default()
                .extend(addresses.chain(hosts));
        }
        by_namespace
    };
    let (before, after) = (addresses(old), addresses(new));
    let changed: BTreeSet<String> = before
        .keys()
        .chain(after.keys())
        .filter(|namespace| before.get(*namespace) != after.get(*namespace))
        .filter_map(|namespace| namespace.strip_prefix("kuadrant-").map(String::from))
        .collect();
    records
        .iter()
        .filter(|record| record.spec.health_check.is_some())
        .filter(|record| changed.contains(&record.namespace().unwrap_or_default()))
        .map(|record| ObjectRef::from_obj(&**record))
        .collect()
}

/// The DNSRecords whose probes' verdicts differ between two versions of a shard of probe
/// results (probe name → the record it belongs to, from the probe cache).
pub fn records_with_changed_verdicts(
    old: Option<&ProbeResults>,
    new: Option<&ProbeResults>,
    record_of_probe: impl Fn(&str, &str) -> Option<String>,
) -> Vec<ObjectRef<DNSRecord>> {
    let verdicts = |report: Option<&ProbeResults>| -> BTreeMap<(String, String), bool> {
        report
            .map(|r| {
                r.spec
                    .probes
                    .iter()
                    .map(|p| ((p.namespace.clone(), p.name.clone()), p.healthy))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (before, after) = (verdicts(old), verdicts(new));
    let changed: BTreeSet<&(String, String)> = before
        .keys()
        .chain(after.keys())
        .filter(|probe| before.get(*probe) != after.get(*probe))
        .collect();
    let records: BTreeSet<(String, String)> = changed
        .into_iter()
        .filter_map(|(namespace, probe)| {
            Some((namespace.clone(), record_of_probe(namespace, probe)?))
        })
        .collect();
    records
        .into_iter()
        .map(|(namespace, name)| ObjectRef::new(&name).within(&namespace))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_testkit::fixtures;

    /// Shard 0 of spoke c1's probe results: probes of namespace `gw` with these verdicts,
    /// `failures` the count each carries.
    fn results(verdicts: &[(&str, bool)], failures: i32) -> ProbeResults {
        let probes: Vec<serde_json::Value> = verdicts
            .iter()
            .map(|(name, healthy)| {
                serde_json::json!({
                    "namespace": "gw", "name": name, "healthy": healthy,
                    "consecutiveFailures": failures,
                })
            })
            .collect();
        fixtures::probe_results("c1", 0)
            .with(serde_json::json!({ "spec": { "probes": probes } }))
            .build()
    }

    #[test]
    fn a_reported_gateway_address_wakes_its_tenants_health_checked_records_only() {
        let record = |namespace: &str, name: &str, checked: bool| -> Arc<DNSRecord> {
            let record = fixtures::dns_record(namespace, name, "zone").root_host("api.example.com");
            if checked {
                record.health_check(443, "HTTPS").arc()
            } else {
                record.arc()
            }
        };
        let report = |addresses: &[(&str, &str)]| -> ClusterReport {
            addresses
                .iter()
                .fold(
                    fixtures::cluster_report("spoke-1", "c"),
                    |report, (namespace, address)| report.gateway(namespace, "web", address),
                )
                .build()
        };
        let records = [
            record("shop", "checked", true),
            record("shop", "unchecked", false),
            record("other", "checked", true),
        ];
        let woken = |old: Option<&ClusterReport>, new: Option<&ClusterReport>| -> Vec<String> {
            records_behind_changed_gateways(&records, old, new)
                .into_iter()
                .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
                .collect()
        };
        let before = report(&[
            ("kuadrant-shop", "192.0.2.10"),
            ("kuadrant-other", "192.0.2.20"),
        ]);
        let moved = report(&[
            ("kuadrant-shop", "192.0.2.11"),
            ("kuadrant-other", "192.0.2.20"),
        ]);
        assert_eq!(
            woken(None, Some(&before)),
            ["shop/checked", "other/checked"]
        );
        assert_eq!(woken(Some(&before), Some(&moved)), ["shop/checked"]);
        assert!(
            woken(Some(&moved), Some(&moved)).is_empty(),
            "a heartbeat wakes nothing"
        );
        assert_eq!(woken(Some(&moved), None), ["shop/checked", "other/checked"]);
        // A Gateway outside the downstream namespaces names no tenant.
        assert!(woken(None, Some(&report(&[("shop", "192.0.2.30")]))).is_empty());
        // A wildcard's route hostname appearing (it is probed through it) is a change too.
        let mut routed = moved.clone();
        let shop = routed
            .spec
            .gateways
            .iter_mut()
            .find(|g| g.namespace == "kuadrant-shop")
            .expect("shop's Gateway");
        shop.listeners.push(meridian_api::meridian::ListenerReport {
            name: "apps".into(),
            hostname: Some("*.apps.example.com".into()),
            attached_routes: Some(1),
            route_hostnames: vec!["shop.apps.example.com".into()],
        });
        assert_eq!(woken(Some(&moved), Some(&routed)), ["shop/checked"]);
    }

    #[test]
    fn only_verdict_changes_wake_the_records_of_their_probes() {
        let record_of = |_: &str, probe: &str| match probe {
            "p1" | "p2" => Some("web-dns-api".to_string()),
            "p3" => Some("api-dns-api".to_string()),
            _ => None,
        };
        let base = results(&[("p1", true), ("p3", true)], 100);
        let cases = [
            (
                results(&[("p1", true), ("p3", true)], 999),
                vec![],
                "counts and times",
            ),
            (
                results(&[("p1", false), ("p3", true)], 100),
                vec!["gw/web-dns-api"],
                "one verdict",
            ),
            (
                results(&[("p1", true)], 100),
                vec!["gw/api-dns-api"],
                "a probe gone",
            ),
            (
                results(&[("p1", true), ("p3", true), ("p9", false)], 100),
                vec![],
                "a probe of no known record",
            ),
        ];
        for (new, expected, what) in cases {
            assert_eq!(
                fixtures::names(records_with_changed_verdicts(
                    Some(&base),
                    Some(&new),
                    record_of
                )),
                expected,
                "{what}"
            );
        }
        assert_eq!(
            fixtures::names(records_with_changed_verdicts(Some(&base), None, record_of)),
            ["gw/api-dns-api", "gw/web-dns-api"],
            "a deleted shard"
        );
    }
}
