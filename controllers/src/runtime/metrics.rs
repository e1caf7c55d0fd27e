//! Prometheus metrics of the hub, in the text exposition format: reconciles and errors by
//! controller and reason, provider calls by provider and outcome, publish latency, drift
//! repaired, leadership, and how long failovers take per zone.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

/// Upper bounds (seconds) of the publish-latency histogram.
const LATENCY_BUCKETS: [f64; 9] = [0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Upper bounds (seconds) of the failover histograms: a probe interval of 5 s to a few minutes.
const FAILOVER_BUCKETS: [f64; 12] = [
    0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 120.0, 300.0,
];

/// Upper bounds (seconds) of the reconcile-duration histogram: from a pass that reads caches
/// only to one that waits out a provider's retries.
const RECONCILE_BUCKETS: [f64; 10] = [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0];

/// The parts of a failover that are timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FailoverPhase {
    /// From a leaf's first failed probe to the hub's verdict that it is unhealthy.
    Detection,
    /// From the verdict to the zone without the leaf: served by the embedded nameserver, or
    /// accepted by the provider.
    Publication,
    /// From the first failed probe to the zone without the leaf.
    Whole,
}

impl FailoverPhase {
    const ALL: [FailoverPhase; 3] = [
        FailoverPhase::Detection,
        FailoverPhase::Publication,
        FailoverPhase::Whole,
    ];

    fn metric(self) -> (&'static str, &'static str) {
        match self {
            FailoverPhase::Detection => (
                "meridian_failover_detection_seconds",
                "From a leaf's first failed probe to the hub's verdict that it is unhealthy, per zone.",
            ),
            FailoverPhase::Publication => (
                "meridian_failover_publication_seconds",
                "From an unhealthy verdict to the zone without the leaf (served, or accepted by the provider), per zone.",
            ),
            FailoverPhase::Whole => (
                "meridian_failover_seconds",
                "From a leaf's first failed probe to the zone without it, per zone.",
            ),
        }
    }
}

/// One histogram's counts.
#[derive(Debug, Default, Clone)]
struct Series {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Series {
    fn observe(&mut self, bounds: &[f64], value: f64) {
        self.buckets.resize(bounds.len(), 0);
        for (bucket, bound) in self.buckets.iter_mut().zip(bounds) {
            if value <= *bound {
                *bucket += 1;
            }
        }
        self.count += 1;
        self.sum += value;
    }

    fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let sep = if labels.is_empty() { "" } else { "," };
        // A series not yet observed has every bucket at 0.
        let counts = self.buckets.iter().chain(std::iter::repeat(&0));
        for (bound, n) in bounds.iter().zip(counts) {
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {n}");
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |l: &str| {
            if l.is_empty() {
                String::new()
            } else {
                format!("{{{l}}}")
            }
        };
        let _ = writeln!(out, "{name}_sum{} {}", braces(labels), self.sum);
        let _ = writeln!(out, "{name}_count{} {}", braces(labels), self.count);
    }
}

#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    reconciles: BTreeMap<String, u64>,
    reconcile_durations: BTreeMap<String, Series>,
    errors: BTreeMap<(String, String), u64>,
    provider_calls: BTreeMap<(String, String), u64>,
    latency: Series,
    fleet: crate::decide::silence::FleetBrake,
    failovers: BTreeMap<(FailoverPhase, String), Series>,
    drift_repairs: u64,
    verifications: BTreeMap<&'static str, u64>,
    leading: bool,
    leader_changes: u64,
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

    /// A pass of `controller` ended (in success or failure) after `took`.
    pub fn reconcile_took(&self, controller: &str, took: Duration) {
        self.inner
            .lock()
            .expect("metrics lock")
            .reconcile_durations
            .entry(controller.to_string())
            .or_default()
            .observe(&RECONCILE_BUCKETS, took.as_secs_f64());
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
        self.inner
            .lock()
            .expect("metrics lock")
            .latency
            .observe(&LATENCY_BUCKETS, latency.as_secs_f64());
    }

    /// How long one part of a failover took in `zone`.
    pub fn failover(&self, phase: FailoverPhase, zone: &str, took: Duration) {
        self.inner
            .lock()
            .expect("metrics lock")
            .failovers
            .entry((phase, zone.to_string()))
            .or_default()
            .observe(&FAILOVER_BUCKETS, took.as_secs_f64());
    }

    /// A record found changed out of band, woken to put its records back.
    pub fn drift_repaired(&self) {
        self.inner.lock().expect("metrics lock").drift_repairs += 1;
    }

    /// A zone read whole to find drift: `ok` (whatever it found) or `error` (the read failed).
    pub fn zone_verified(&self, ok: bool) {
        *self
            .inner
            .lock()
            .expect("metrics lock")
            .verifications
            .entry(if ok { "ok" } else { "error" })
            .or_default() += 1;
    }

    /// Whether this replica leads now; a change counts as a leader change.
    pub fn leading(&self, leading: bool) {
        let mut inner = self.inner.lock().expect("metrics lock");
        if inner.leading != leading {
            inner.leader_changes += 1;
        }
        inner.leading = leading;
    }

    /// The fleet brake as last looked at.
    pub fn fleet(&self, brake: &crate::decide::silence::FleetBrake) {
        self.inner.lock().expect("metrics lock").fleet = *brake;
    }

    /// The metrics in Prometheus' text format.
    pub fn render(&self) -> String {
        let inner = self.inner.lock().expect("metrics lock");
        let mut out = String::new();
        let counters: [(&str, &str, Samples); 4] = [
            (
                "meridian_reconciles_total",
                "Reconciles by controller.",
                labelled(&inner.reconciles, |c| format!("controller=\"{c}\"")),
            ),
            (
                "meridian_reconcile_errors_total",
                "Failed reconciles by controller and reason.",
                labelled(&inner.errors, |(c, r)| {
                    format!("controller=\"{c}\",reason=\"{r}\"")
                }),
            ),
            (
                "meridian_provider_calls_total",
                "Change batches sent to providers.",
                labelled(&inner.provider_calls, |(p, o)| {
                    format!("provider=\"{p}\",outcome=\"{o}\"")
                }),
            ),
            (
                "meridian_zone_verifications_total",
                "Zones at providers read whole to find records changed out of band, by outcome.",
                labelled(&inner.verifications, |o| format!("outcome=\"{o}\"")),
            ),
        ];
        for (name, help, samples) in counters {
            let mut family = self::family(&mut out, name, "counter", help);
            for (labels, n) in samples {
                family.sample(&labels, n);
            }
        }
        let mut family = self::family(
            &mut out,
            "meridian_reconcile_duration_seconds",
            "histogram",
            "How long reconciles took, by controller (its count is the passes that ended).",
        );
        for (controller, series) in &inner.reconcile_durations {
            family.histogram(
                &format!("controller=\"{controller}\""),
                series,
                &RECONCILE_BUCKETS,
            );
        }
        self::family(
            &mut out,
            "meridian_publish_latency_seconds",
            "histogram",
            "From a DNSRecord change to its publication.",
        )
        .histogram("", &inner.latency, &LATENCY_BUCKETS);
        for phase in FailoverPhase::ALL {
            let (name, help) = phase.metric();
            let mut family = self::family(&mut out, name, "histogram", help);
            for ((_, zone), series) in inner.failovers.iter().filter(|((p, _), _)| *p == phase) {
                family.histogram(&format!("zone=\"{zone}\""), series, &FAILOVER_BUCKETS);
            }
        }
        let fleet = &inner.fleet;
        let scalars: [(&str, &str, &str, u64); 6] = [
            (
                "meridian_fleet_brake_engaged",
                "gauge",
                "1 while most recently heard clusters went quiet together and silence withdraws nothing.",
                u64::from(fleet.engaged),
            ),
            (
                "meridian_fleet_quiet_clusters",
                "gauge",
                "Clusters of the latest wave of quiet (not heard for more than half the heartbeat timeout).",
                fleet.quiet as u64,
            ),
            (
                "meridian_fleet_heard_clusters",
                "gauge",
                "Clusters heard when the latest wave of silence began.",
                fleet.heard as u64,
            ),
            (
                "meridian_drift_repairs_total",
                "counter",
                "Records found changed out of band in their zone and put back.",
                inner.drift_repairs,
            ),
            (
                "meridian_leader",
                "gauge",
                "1 while this replica holds the hub Lease and runs the controllers.",
                u64::from(inner.leading),
            ),
            (
                "meridian_leader_changes_total",
                "counter",
                "Times this replica took or lost the hub Lease.",
                inner.leader_changes,
            ),
        ];
        for (name, kind, help, value) in scalars {
            self::family(&mut out, name, kind, help).sample("", value);
        }
        out
    }
}

/// The objects each watched kind could not decode and skipped (see
/// [`crate::runtime::caches::Cache::reflect`]), in Prometheus' text format.
pub fn render_undecodable(counts: &[(&str, u64)]) -> String {
    let mut out = String::new();
    let mut family = family(
        &mut out,
        "meridian_watch_undecodable_objects_total",
        "counter",
        "Versions of watched objects that could not be decoded and were skipped, by kind.",
    );
    for (kind, n) in counts {
        family.sample(&format!("kind=\"{kind}\""), n);
    }
    out
}

/// A family's samples: each one's labels (`key="value",…`) and value.
type Samples = Vec<(String, u64)>;

/// A labelled counter's samples: each key's labels (as `label(key)` writes them) and count.
fn labelled<K>(counts: &BTreeMap<K, u64>, label: impl Fn(&K) -> String) -> Samples {
    counts.iter().map(|(key, n)| (label(key), *n)).collect()
}

/// Writes a metric family's help and type lines to `out`, and returns the writer of its samples.
fn family<'a>(out: &'a mut String, name: &'a str, kind: &str, help: &str) -> Family<'a> {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    Family { out, name }
}

/// The samples of one metric family, written after its help and type.
struct Family<'a> {
    out: &'a mut String,
    name: &'a str,
}

impl Family<'_> {
    /// One sample; `labels` is `key="value",…`, empty for none.
    fn sample(&mut self, labels: &str, value: impl std::fmt::Display) {
        let name = self.name;
        let _ = if labels.is_empty() {
            writeln!(self.out, "{name} {value}")
        } else {
            writeln!(self.out, "{name}{{{labels}}} {value}")
        };
    }

    /// One histogram's buckets, sum and count.
    fn histogram(&mut self, labels: &str, series: &Series, bounds: &[f64]) {
        series.render(self.out, self.name, labels, bounds);
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
        metrics.reconcile_took("dnsrecord", Duration::from_millis(70));
        metrics.failed("dnspolicy", "kube");
        metrics.provider_call("embedded", "ok");
        metrics.published(Duration::from_millis(30));
        metrics.published(Duration::from_secs(3));
        let text = metrics.render();
        assert!(text.contains("meridian_reconciles_total{controller=\"dnsrecord\"} 2"));
        assert!(text.contains(
            "meridian_reconcile_duration_seconds_bucket{controller=\"dnsrecord\",le=\"0.05\"} 0"
        ));
        assert!(text.contains(
            "meridian_reconcile_duration_seconds_bucket{controller=\"dnsrecord\",le=\"0.1\"} 1"
        ));
        assert!(
            text.contains("meridian_reconcile_duration_seconds_count{controller=\"dnsrecord\"} 1")
        );
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
        metrics.fleet(&crate::decide::silence::FleetBrake {
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

    #[test]
    fn failover_phases_are_histograms_per_zone_and_leadership_counts_its_changes() {
        let metrics = Metrics::default();
        let text = metrics.render();
        // Named before anything is observed, so dashboards and rules find them.
        assert!(text.contains("# TYPE meridian_failover_seconds histogram"));
        assert!(text.contains("meridian_leader 0"));
        metrics.failover(
            FailoverPhase::Detection,
            "example.com",
            Duration::from_secs(7),
        );
        metrics.failover(
            FailoverPhase::Detection,
            "example.com",
            Duration::from_secs(12),
        );
        metrics.failover(
            FailoverPhase::Whole,
            "other.org",
            Duration::from_millis(400),
        );
        metrics.leading(true);
        metrics.leading(true);
        metrics.leading(false);
        metrics.drift_repaired();
        metrics.zone_verified(true);
        metrics.zone_verified(true);
        metrics.zone_verified(false);
        let text = metrics.render();
        for line in [
            "meridian_failover_detection_seconds_bucket{zone=\"example.com\",le=\"5\"} 0",
            "meridian_failover_detection_seconds_bucket{zone=\"example.com\",le=\"10\"} 1",
            "meridian_failover_detection_seconds_bucket{zone=\"example.com\",le=\"+Inf\"} 2",
            "meridian_failover_detection_seconds_sum{zone=\"example.com\"} 19",
            "meridian_failover_seconds_bucket{zone=\"other.org\",le=\"0.5\"} 1",
            "meridian_failover_seconds_count{zone=\"other.org\"} 1",
            "meridian_leader 0",
            "meridian_leader_changes_total 2",
            "meridian_drift_repairs_total 1",
            "meridian_zone_verifications_total{outcome=\"ok\"} 2",
            "meridian_zone_verifications_total{outcome=\"error\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from\n{text}");
        }
        assert!(!text.contains("meridian_failover_publication_seconds_count"));
    }
}
