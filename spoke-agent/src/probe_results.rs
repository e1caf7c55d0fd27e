//! The agent's probe results on the hub: the health loop's results split into `ProbeResults`
//! shards in the cluster's namespace (see `meridian_api::meridian::probe_shard`), so that no
//! object grows past about 70 KB however many leaves the cluster probes, and a changed verdict
//! rewrites one shard, not everything the cluster knows.
//!
//! A shard is written when a verdict in it changes, and otherwise refreshed once every
//! [`REFRESH_HEARTBEATS`] heartbeats (its counts and times). When the split changes (the
//! cluster probes many more or fewer leaves), shards beyond the new count are deleted.

use std::collections::BTreeMap;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use meridian_api::meridian::{
    ProbeReport, ProbeResults, ProbeResultsSpec, probe_results_name, probe_shard, shard_count,
};
use rand::Rng;
use serde_json::json;
use tokio::time::Instant;

use crate::health::verdicts_differ;
use crate::report::FIELD_MANAGER;

/// How many heartbeats pass between rewrites of a shard whose verdicts did not change.
pub const REFRESH_HEARTBEATS: u32 = 10;

/// The shards of a cluster's results (every shard, empty ones included, so the hub finds
/// shard 0 and the count even when nothing is probed).
pub fn split(probes: &[ProbeReport]) -> Vec<ProbeResultsSpec> {
    let shards = shard_count(probes.len());
    let mut split: Vec<ProbeResultsSpec> = (0..shards)
        .map(|shard| ProbeResultsSpec {
            shard,
            shards,
            probes: Vec::new(),
        })
        .collect();
    for probe in probes {
        let shard = probe_shard(&probe.namespace, &probe.name, shards);
        split[shard as usize].probes.push(probe.clone());
    }
    for shard in &mut split {
        shard
            .probes
            .sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    }
    split
}

/// What was last written of a shard, and when.
#[derive(Debug, Clone)]
pub struct Written {
    pub spec: ProbeResultsSpec,
    pub at: Instant,
}

/// Whether a shard is due: never written, split differently, a verdict changed, or its
/// refresh is due.
pub fn due(
    written: Option<&Written>,
    fresh: &ProbeResultsSpec,
    now: Instant,
    refresh: Duration,
) -> bool {
    match written {
        None => true,
        Some(written) => {
            written.spec.shards != fresh.shards
                || verdicts_differ(&written.spec.probes, &fresh.probes)
                || now.duration_since(written.at) >= refresh
        }
    }
}

async fn write(hub: &Client, cluster: &str, spec: &ProbeResultsSpec) -> Result<(), kube::Error> {
    let name = probe_results_name(spec.shard);
    let object = json!({
        "apiVersion": "meridian.dev/v1alpha1",
        "kind": "ProbeResults",
        "metadata": { "name": name, "namespace": cluster },
        "spec": spec,
    });
    Api::<ProbeResults>::namespaced(hub.clone(), cluster)
        .patch(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(object),
        )
        .await?;
    Ok(())
}

/// The shards that exist on the hub, as far as this agent can tell at start.
async fn existing(hub: &Client, cluster: &str) -> Result<Vec<u32>, kube::Error> {
    Ok(Api::<ProbeResults>::namespaced(hub.clone(), cluster)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|r| r.spec.shard)
        .collect())
}

/// Keeps the cluster's probe results on the hub current until the process ends.
pub async fn run(
    hub: Client,
    cluster: String,
    heartbeat: Duration,
    mut probes: tokio::sync::watch::Receiver<Vec<ProbeReport>>,
) -> anyhow::Result<()> {
    let refresh = heartbeat * REFRESH_HEARTBEATS;
    // Shards on the hub this agent has not written (an earlier run's larger split): deleted
    // once the first split is known.
    let mut leftover: Vec<u32> = loop {
        match existing(&hub, &cluster).await {
            Ok(shards) => break shards,
            Err(error) => {
                tracing::warn!(%error, "cannot list this cluster's probe results on the hub; retrying");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    };
    let mut written: BTreeMap<u32, Written> = BTreeMap::new();
    let mut ticks = tokio::time::interval(heartbeat);
    let mut probes_open = true;
    let mut failures = 0u32;
    loop {
        tokio::select! {
            changed = probes.changed(), if probes_open => {
                if changed.is_err() {
                    probes_open = false;
                }
            }
            _ = ticks.tick() => {}
        }
        let shards = split(&probes.borrow_and_update());
        let now = Instant::now();
        let mut failed = false;
        for shard in &shards {
            if !due(written.get(&shard.shard), shard, now, refresh) {
                continue;
            }
            match write(&hub, &cluster, shard).await {
                Ok(()) => {
                    written.insert(
                        shard.shard,
                        Written {
                            spec: shard.clone(),
                            at: now,
                        },
                    );
                }
                Err(error) => {
                    tracing::warn!(%error, shard = shard.shard, "writing probe results to the hub failed; retrying");
                    failed = true;
                    break;
                }
            }
        }
        let count = shards.len() as u32;
        let beyond: Vec<u32> = written
            .keys()
            .copied()
            .chain(leftover.iter().copied())
            .filter(|shard| *shard >= count)
            .collect();
        for shard in beyond {
            let api = Api::<ProbeResults>::namespaced(hub.clone(), &cluster);
            match api
                .delete(&probe_results_name(shard), &Default::default())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => {
                    tracing::warn!(%error, shard, "deleting a probe-results shard beyond the split failed; retrying");
                    failed = true;
                    continue;
                }
            }
            written.remove(&shard);
            leftover.retain(|s| *s != shard);
        }
        if failed {
            // Back off with jitter; the next tick or verdict tries again.
            failures = failures.saturating_add(1);
            let ceiling = Duration::from_millis(500).saturating_mul(1 << failures.min(6));
            let delay = rand::rng().random_range(ceiling / 2..=ceiling);
            tokio::time::sleep(delay).await;
        } else {
            failures = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(namespace: &str, name: &str, healthy: bool, failures: i32) -> ProbeReport {
        ProbeReport {
            namespace: namespace.into(),
            name: name.into(),
            healthy,
            consecutive_failures: failures,
            reason: None,
            last_checked_at: None,
        }
    }

    #[test]
    fn every_result_lands_once_in_its_shard_and_every_shard_exists() {
        let probes: Vec<ProbeReport> = (0..1000)
            .map(|i| result("gateways", &format!("api-{i}"), true, 0))
            .collect();
        let shards = split(&probes);
        assert_eq!(
            shards.len(),
            4,
            "1000 results take 4 shards of 400 at most on average"
        );
        assert_eq!(shards.iter().map(|s| s.probes.len()).sum::<usize>(), 1000);
        for shard in &shards {
            assert_eq!(shard.shards, 4);
            assert!(
                shard
                    .probes
                    .iter()
                    .all(|p| probe_shard(&p.namespace, &p.name, 4) == shard.shard)
            );
            assert!(
                shard.probes.windows(2).all(|w| w[0].name < w[1].name),
                "ordered"
            );
        }
        let nothing = split(&[]);
        assert_eq!(nothing.len(), 1, "shard 0 exists when nothing is probed");
        assert!(nothing[0].probes.is_empty());
    }

    #[test]
    fn a_shard_is_due_on_a_verdict_a_new_split_or_its_refresh_only() {
        let now = Instant::now();
        let refresh = Duration::from_secs(300);
        let spec = |probes: Vec<ProbeReport>, shards: u32| ProbeResultsSpec {
            shard: 0,
            shards,
            probes,
        };
        let written = Written {
            spec: spec(
                vec![result("gw", "a", true, 0), result("gw", "b", false, 3)],
                1,
            ),
            at: now,
        };
        let cases = [
            (
                spec(
                    vec![result("gw", "a", true, 0), result("gw", "b", false, 9)],
                    1,
                ),
                now,
                false,
                "counts only",
            ),
            (
                spec(
                    vec![result("gw", "a", false, 1), result("gw", "b", false, 3)],
                    1,
                ),
                now,
                true,
                "a verdict",
            ),
            (
                spec(vec![result("gw", "a", true, 0)], 1),
                now,
                true,
                "a probe gone",
            ),
            (
                spec(written.spec.probes.clone(), 2),
                now,
                true,
                "a new split",
            ),
            (
                spec(written.spec.probes.clone(), 1),
                now + refresh,
                true,
                "the refresh",
            ),
        ];
        for (fresh, at, expected, what) in cases {
            assert_eq!(due(Some(&written), &fresh, at, refresh), expected, "{what}");
        }
        assert!(due(None, &written.spec, now, refresh), "never written");
    }
}
