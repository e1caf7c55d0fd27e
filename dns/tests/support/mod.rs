//! Helpers shared by the provider tests: drive any provider with the engine's own plans.

use meridian_dns::model::{Endpoint, RecordType, is_at_or_below, sort_endpoints};
use meridian_dns::plan::{PlanInput, plan};
use meridian_dns::provider::Provider;

/// Plans `desired` for `owner` against the zone as the provider holds it, and applies the plan.
pub async fn converge<P: Provider>(
    provider: &P,
    zone: &str,
    owner: &str,
    host: &str,
    desired: &[Endpoint],
    previous: Option<&[Endpoint]>,
) {
    let current = provider.records(zone).await.unwrap();
    let planned = plan(
        &PlanInput {
            owner,
            root_host: host,
            desired,
            previous,
        },
        &current,
    );
    assert!(planned.problems.is_empty(), "{:?}", planned.problems);
    provider.apply(zone, &planned.changes).await.unwrap();
}

/// The zone's records at or below `host`, without ownership records, sorted.
pub async fn published<P: Provider>(provider: &P, zone: &str, host: &str) -> Vec<Endpoint> {
    let base = host.trim_start_matches("*.");
    let mut records: Vec<Endpoint> = provider
        .records(zone)
        .await
        .unwrap()
        .into_iter()
        .filter(|r| is_at_or_below(&r.dns_name, base) && r.record_type != RecordType::Txt)
        .collect();
    sort_endpoints(&mut records);
    records
}
