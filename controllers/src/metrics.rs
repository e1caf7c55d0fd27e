//! Prometheus metrics of the hub, in the text exposition format: reconciles and errors by
//! controller and reason, provider calls by provider and outcome, and publish latency.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the publish-latency histogram.
const LATENCY_BUCKETS: [f64; 9] = [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    reconciles: BTreeMap<String, u64>,
    errors: BTreeMap<(String, String), u64>,
    provider_calls: BTreeMap<(String, String), u64>,
    latency_buckets: [u64; LATENCY_BUCKETS.len()],
    latency_count: u64,
    latency_sum: f64,
    fleet: crate::silence::FleetBrake,
}

impl Metrics {
    pub fn reconciled(&self, controller: &str) {
        *self
            .inner
            .lock()
            .expect("metrics lock")
            .reconciles
            .entry(controller.to_string())
            .or_default() += 1;
    }

    pub fn failed(&self, controller: &str, reason: &str) {
        *self
            .inner
            .lock()
            .expect("metrics lock")
            .errors
            .entry((controller.to_string(), reason.to_string()))
            .or_default() += 1;
    }

    pub fn provider_call(&self, provider: &str, outcome: &str) {
        *self
            .inner
            .lock()
            .expect("metrics lock")
            .provider_calls
            .entry((provider.to_string(), outcome.to_string()))
            .or_default() += 1;
    }

    /// Time from a record's change being seen to its publication.
    pub fn published(&self, latency: Duration) {
        let seconds = latency.as_secs_f64();
        let mut inner = self.inner.lock().expect("metrics lock");
        for (bucket, bound) in inner.latency_buckets.iter_mut().zip(LATENCY_BUCKETS) {
            if seconds <= bound {
                *bucket += 1;
            }
        }
        inner.latency_count += 1;
        inner.latency_sum += seconds;
    }

    /// The fleet brake as last looked at.
    pub fn fleet(&self, brake: &crate::silence::FleetBrake) {
        self.inner.lock().expect("metrics lock").fleet = *brake;
    }

    /// The metrics in Prometheus' text format.
    pub fn render(&self) -> String {
        let inner = self.inner.lock().expect("metrics lock");
        let mut out = String::new();
        out.push_str("# HELP meridian_reconciles_total Reconciles by controller.\n");
        out.push_str("# TYPE meridian_reconciles_total counter\n");
        for (controller, n) in &inner.reconciles {
            let _ = writeln!(
                out,
                "meridian_reconciles_total{{controller=\"{controller}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP meridian_reconcile_errors_total Failed reconciles by controller and reason.\n",
        );
        out.push_str("# TYPE meridian_reconcile_errors_total counter\n");
        for ((controller, reason), n) in &inner.errors {
            let _ = writeln!(
                out,
                "meridian_reconcile_errors_total{{controller=\"{controller}\",reason=\"{reason}\"}} {n}"
            );
        }
        out.push_str("# HELP meridian_provider_calls_total Change batches sent to providers.\n");
        out.push_str("# TYPE meridian_provider_calls_total counter\n");
        for ((provider, outcome), n) in &inner.provider_calls {
            let _ = writeln!(
                out,
                "meridian_provider_calls_total{{provider=\"{provider}\",outcome=\"{outcome}\"}} {n}"
            );
        }
        out.push_str(
            "# HELP meridian_publish_latency_seconds From a DNSRecord change to its publication.\n",
        );
        out.push_str("# TYPE meridian_publish_latency_seconds histogram\n");
        for (bound, n) in LATENCY_BUCKETS.iter().zip(inner.latency_buckets) {
            let _ = writeln!(
                out,
                "meridian_publish_latency_seconds_bucket{{le=\"{bound}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "meridian_publish_latency_seconds_bucket{{le=\"+Inf\"}} {}",
            inner.latency_count
        );
        let _ = writeln!(
            out,
            "meridian_publish_latency_seconds_sum {}",
            inner.latency_sum
        );
        let _ = writeln!(
            out,
            "meridian_publish_latency_seconds_count {}",
            inner.latency_count
        );
        let fleet = &inner.fleet;
        out.push_str("# HELP meridian_fleet_brake_engaged 1 while most recently heard clusters went quiet together and silence withdraws nothing.\n");
        out.push_str("# TYPE meridian_fleet_brake_engaged gauge\n");
        let _ = writeln!(
            out,
            "meridian_fleet_brake_engaged {}",
            u8::from(fleet.engaged)
        );
        out.push_str("# HELP meridian_fleet_quiet_clusters Clusters of the latest wave of quiet (not heard for more than half the heartbeat timeout).\n");
        out.push_str("# TYPE meridian_fleet_quiet_clusters gauge\n");
        let _ = writeln!(out, "meridian_fleet_quiet_clusters {}", fleet.quiet);
        out.push_str("# HELP meridian_fleet_heard_clusters Clusters heard when the latest wave of silence began.\n");
        out.push_str("# TYPE meridian_fleet_heard_clusters gauge\n");
        let _ = writeln!(out, "meridian_fleet_heard_clusters {}", fleet.heard);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_a_cumulative_histogram() {
        let metrics = Metrics::default();
        metrics.reconciled("dnsrecord");
        metrics.reconciled("dnsrecord");
        metrics.failed("dnspolicy", "kube");
        metrics.provider_call("embedded", "ok");
        metrics.published(Duration::from_millis(30));
        metrics.published(Duration::from_secs(3));
        let text = metrics.render();
        assert!(text.contains("meridian_reconciles_total{controller=\"dnsrecord\"} 2"));
        assert!(text.contains(
            "meridian_reconcile_errors_total{controller=\"dnspolicy\",reason=\"kube\"} 1"
        ));
        assert!(
            text.contains("meridian_provider_calls_total{provider=\"embedded\",outcome=\"ok\"} 1")
        );
        assert!(text.contains("meridian_publish_latency_seconds_bucket{le=\"0.05\"} 1"));
        assert!(text.contains("meridian_publish_latency_seconds_bucket{le=\"10\"} 2"));
        assert!(text.contains("meridian_publish_latency_seconds_count 2"));
        assert!(text.contains("meridian_fleet_brake_engaged 0"));
        metrics.fleet(&crate::silence::FleetBrake {
            engaged: true,
            quiet: 3,
            heard: 4,
            holds_silent_up_to: Duration::from_secs(300),
        });
        let text = metrics.render();
        assert!(text.contains("meridian_fleet_brake_engaged 1"));
        assert!(text.contains("meridian_fleet_quiet_clusters 3"));
        assert!(text.contains("meridian_fleet_heard_clusters 4"));
    }
}
