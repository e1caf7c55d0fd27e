//! Time as the controllers read it: now, an injectable clock for tests, and when an agent was
//! last heard from, no later than the API server saw it write.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use meridian_api::meridian::ClusterReport;

/// The time; injectable so tests can move it.
pub type Clock = Arc<dyn Fn() -> k8s_openapi::jiff::Timestamp + Send + Sync>;

/// Now, as the API's time type.
pub fn now() -> Time {
    Time(k8s_openapi::jiff::Timestamp::now())
}

/// The time from `from` to `to`; nothing when `to` is not later.
pub fn seconds_between(
    from: k8s_openapi::jiff::Timestamp,
    to: k8s_openapi::jiff::Timestamp,
) -> std::time::Duration {
    std::time::Duration::try_from(to.duration_since(from)).unwrap_or_default()
}

/// When an agent was last heard from: its heartbeat Lease's renewal, or its report's time
/// (agents that keep no Lease), whichever is later. Both times are the agent's word, so each
/// counts no later than the API server saw the object written ([`server_stamped`]): a
/// compromised agent writing a far-future time once is not "heard" forever after.
pub fn last_heard(
    lease: Option<&k8s_openapi::api::coordination::v1::Lease>,
    report: Option<&ClusterReport>,
) -> Option<k8s_openapi::jiff::Timestamp> {
    let renewed = lease.and_then(|lease| {
        let claimed = lease.spec.as_ref()?.renew_time.as_ref()?.0;
        Some(no_later_than_written(claimed, &lease.metadata))
    });
    let reported = report.and_then(|report| {
        let claimed = report.spec.reported_at.as_ref()?.0;
        Some(no_later_than_written(claimed, &report.metadata))
    });
    renewed.max(reported)
}

/// The latest time the API server stamped on a write of the object (`managedFields[].time`,
/// set by the server whenever a manager changes a field), to the second.
pub fn server_stamped(
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<k8s_openapi::jiff::Timestamp> {
    metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|entry| entry.time.as_ref().map(|t| t.0))
        .max()
}

/// `claimed`, but no later than the server's last stamp on the object plus the second its
/// stamps are truncated to. An object without stamps (none from a real API server) keeps its
/// claim.
fn no_later_than_written(
    claimed: k8s_openapi::jiff::Timestamp,
    metadata: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> k8s_openapi::jiff::Timestamp {
    match server_stamped(metadata) {
        Some(written) => {
            let written = written
                .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(1))
                .unwrap_or(written);
            claimed.min(written)
        }
        None => claimed,
    }
}

/// Tests' instants: `second` seconds after the epoch.
#[cfg(test)]
pub(crate) fn at(second: i64) -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::from_second(second).expect("a test instant")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        ManagedFieldsEntry, MicroTime, ObjectMeta,
    };

    fn written_at(second: Option<i64>) -> ObjectMeta {
        ObjectMeta {
            managed_fields: second.map(|s| {
                vec![ManagedFieldsEntry {
                    manager: Some("meridian-agent".into()),
                    time: Some(Time(at(s))),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        }
    }

    fn lease(renewed: i64, written: Option<i64>) -> Lease {
        Lease {
            metadata: written_at(written),
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(at(renewed))),
                ..Default::default()
            }),
        }
    }

    fn report(reported: i64, written: Option<i64>) -> ClusterReport {
        let mut report = ClusterReport::new(
            meridian_api::names::CLUSTER_REPORT,
            serde_json::from_value(serde_json::json!({ "clusterID": "c" })).unwrap(),
        );
        report.metadata = written_at(written);
        report.spec.reported_at = Some(Time(at(reported)));
        report
    }

    #[test]
    fn an_agents_times_count_no_later_than_the_api_server_saw_them_written() {
        // (lease renewTime and server stamp, report reportedAt and server stamp, heard)
        let far_future = 4_102_444_800; // 2100-01-01
        let cases = [
            (
                Some((1_000, Some(1_000))),
                None,
                Some(1_000),
                "an honest renewal",
            ),
            (
                None,
                Some((1_000, Some(1_000))),
                Some(1_000),
                "an honest report",
            ),
            (
                Some((far_future, Some(1_000))),
                None,
                Some(1_001),
                "the attack: a renewal dated 2100, written at 1,000",
            ),
            (
                None,
                Some((far_future, Some(1_000))),
                Some(1_001),
                "a report dated 2100",
            ),
            (
                Some((900, Some(1_000))),
                Some((1_200, Some(1_200))),
                Some(1_200),
                "the later of the two",
            ),
            (
                Some((1_000, None)),
                None,
                Some(1_000),
                "no stamps (not from an API server): the claim",
            ),
        ];
        for (renewed, reported, heard, what) in cases {
            let lease = renewed.map(|(time, written)| lease(time, written));
            let report = reported.map(|(time, written)| report(time, written));
            assert_eq!(
                last_heard(lease.as_ref(), report.as_ref()),
                heard.map(at),
                "{what}"
            );
        }
    }
}
