//! The drain memory: per policy, where each drained cluster's steps stand, from one pass to
//! the next. [`crate::reconcile::dns_policy::decide::step_drains`] decides the steps; this
//! keeps them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use meridian_dns::drain::DrainState;

/// Per policy (`DNSPolicy/namespace/name`), its draining and returning clusters. A policy
/// missing here has not been looked at since this process started.
#[derive(Debug, Default)]
pub struct DrainMemory(Mutex<HashMap<String, BTreeMap<String, DrainState>>>);

impl DrainMemory {
    /// Where `policy`'s clusters stood after its last pass; `None` when there was none since
    /// this process started.
    pub fn recalled(&self, policy: &str) -> Option<BTreeMap<String, DrainState>> {
        self.0
            .lock()
            .expect("drain memory lock")
            .get(policy)
            .cloned()
    }

    /// Keeps where `policy`'s clusters stand now, logging each step taken.
    pub fn keep(&self, policy: &str, states: &BTreeMap<String, DrainState>) {
        let mut drains = self.0.lock().expect("drain memory lock");
        let before = drains.insert(policy.to_string(), states.clone());
        for (cluster, state) in states {
            let was = before
                .as_ref()
                .and_then(|b| b.get(cluster))
                .map(|b| b.percent);
            if was != Some(state.percent) {
                tracing::info!(
                    policy,
                    cluster,
                    percent = state.percent,
                    draining = state.draining,
                    "drain step"
                );
            }
        }
    }
}

/// Where the drains stood as the policy's status says (`draining`), for a process that has no
/// memory of the policy: each cluster at the step status names, its next step a whole step
/// from `now` (when it last moved is not kept). `None` when no status was written yet, so a
/// marked cluster is then taken as fully drained ([`meridian_dns::drain::drain_step`]).
pub fn drains_in_status(
    status: Option<&meridian_api::kuadrant::DNSPolicyStatus>,
    now: u64,
) -> Option<BTreeMap<String, DrainState>> {
    let status = status.filter(|status| status.observed_generation.is_some())?;
    Some(
        status
            .draining
            .iter()
            .map(|cluster| {
                (
                    cluster.cluster.clone(),
                    DrainState {
                        percent: cluster.weight_percent.min(100),
                        moved_at: now,
                        draining: cluster.phase == "Draining",
                    },
                )
            })
            .collect(),
    )
}
