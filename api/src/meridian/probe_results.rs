use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// One shard of a cluster's health-probe results, written by its agent into the cluster's
/// namespace on the hub next to its [`ClusterReport`](super::ClusterReport). A cluster that
/// probes many leaves splits its results over `shards` objects (`agent-probes-<shard>`), a
/// probe always in shard [`probe_shard`]`(namespace, name, shards)`, so that no object grows
/// large and a changed verdict rewrites one shard only.
#[derive(CustomResource, Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[kube(
    group = "meridian.dev",
    version = "v1alpha1",
    kind = "ProbeResults",
    plural = "proberesults",
    doc = "One shard of a cluster's health-probe results, as its agent reports them to the hub.",
    namespaced,
    shortname = "presults",
    category = "meridian",
    printcolumn(name = "Shard", type_ = "integer", json_path = ".spec.shard"),
    // Named after its shard (below 1,024): at most 1,024 shards of at most 2,000 results per
    // cluster namespace, whatever an agent writes.
    validation = Rule::new("self.metadata.name.size() <= 17 && self.metadata.name.startsWith('agent-probes-') && int(self.metadata.name.substring(13)) == self.spec.shard").message("a shard of probe results is named agent-probes-<spec.shard>"),
    printcolumn(name = "Of", type_ = "integer", json_path = ".spec.shards"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ProbeResultsSpec {
    /// This shard's index, below `shards`.
    #[schemars(range(min = 0, max = 1023))]
    pub shard: u32,
    /// How many shards the cluster's results are split into (a power of two).
    #[schemars(range(min = 1, max = 1024))]
    pub shards: u32,
    /// The results of the probes that fall in this shard, ordered by namespace and name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 2000))]
    pub probes: Vec<ProbeReport>,
}

/// This cluster's latest result for one DNSHealthCheckProbe.
#[derive(Serialize, Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProbeReport {
    /// Namespace of the DNSHealthCheckProbe on the hub.
    pub namespace: String,
    /// Name of the DNSHealthCheckProbe on the hub.
    pub name: String,
    pub healthy: bool,
    #[serde(default)]
    pub consecutive_failures: i32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checked_at: Option<Time>,
}

/// Results per shard the agent aims for: about 170 bytes each in JSON, so a shard stays near
/// 70 KB even when the power-of-two rounding and the hash's unevenness both go against it.
pub const PROBES_PER_SHARD: usize = 400;

/// The most shards a cluster's results are split into.
pub const MAX_SHARDS: u32 = 1024;

/// Name of shard `shard` of a cluster's probe results.
pub fn probe_results_name(shard: u32) -> String {
    format!("agent-probes-{shard}")
}

/// How many shards `probes` results take: the smallest power of two that keeps shards at or
/// under [`PROBES_PER_SHARD`] on average (doubling splits each shard in two, so a growing
/// cluster moves half of each shard's probes, not all of them).
pub fn shard_count(probes: usize) -> u32 {
    let needed = probes.div_ceil(PROBES_PER_SHARD).max(1);
    (needed.next_power_of_two() as u32).min(MAX_SHARDS)
}

/// The shard a probe's result lives in, of `shards`: FNV-1a of `namespace/name`, the same on
/// every agent and hub version.
pub fn probe_shard(namespace: &str, name: &str, shards: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in namespace
        .bytes()
        .chain(std::iter::once(b'/'))
        .chain(name.bytes())
    {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (hash % u64::from(shards.max(1))) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_counts_are_powers_of_two_that_keep_shards_small() {
        let cases = [
            (0, 1),
            (1, 1),
            (400, 1),
            (401, 2),
            (800, 2),
            (801, 4),
            (10_000, 32),
            (1_000_000, MAX_SHARDS),
        ];
        for (probes, shards) in cases {
            assert_eq!(shard_count(probes), shards, "{probes} probes");
        }
    }

    #[test]
    fn a_probe_stays_in_its_shard_and_doubling_splits_shards_in_two() {
        assert_eq!(probe_shard("gateways", "api-1", 1), 0);
        for i in 0..1000 {
            let name = format!("api-{i}");
            let shard = probe_shard("gateways", &name, 16);
            assert!(shard < 16);
            assert_eq!(shard, probe_shard("gateways", &name, 16), "stable");
            // After doubling, a probe is in its old shard or the one 16 above it.
            assert_eq!(probe_shard("gateways", &name, 32) % 16, shard);
        }
    }

    #[test]
    fn ten_thousand_probes_spread_evenly_enough_to_keep_every_shard_under_100_kb() {
        let shards = shard_count(10_000);
        let mut sizes = vec![0usize; shards as usize];
        for i in 0..10_000 {
            let probe = ProbeReport {
                namespace: "gateways-production".into(),
                name: format!("api-example-com-{i}-203-0-113-{}", i % 250),
                healthy: false,
                consecutive_failures: 12,
                reason: Some("HTTP 503 from https://203.0.113.7:443/healthz".into()),
                last_checked_at: Some(Time("2026-11-23T12:00:00Z".parse().expect("a valid time"))),
            };
            let shard = probe_shard(&probe.namespace, &probe.name, shards);
            sizes[shard as usize] += serde_json::to_vec(&probe).expect("serializes").len() + 1;
        }
        let largest = sizes.iter().max().copied().unwrap_or_default();
        assert!(
            largest < 100 * 1024,
            "the largest of {shards} shards is {largest} bytes"
        );
        assert!(sizes.iter().all(|&size| size > 0), "every shard is used");
    }
}
