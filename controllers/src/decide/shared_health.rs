//! Health agreed through the zone itself (distributed mode, seed 002), the pure part. Every
//! cluster probes every address of a host from where it stands and keeps, per address, a TXT
//! record `kuadrant.health.<address>.<host>` listing the IDs of the clusters that see it
//! failing (`ip=<address>;failing=<id>,<id>`; past 255 bytes it is several strings). A cluster
//! withdraws one of its own addresses once `failing / clusters ≥ threshold`, unless every
//! address of the host would go: then all stay (a total outage is more likely the probes' own
//! fault than every gateway's). The clusters are the members listed in
//! `kuadrant.members.<host>` (each cluster adds itself while it publishes the host and leaves
//! when it withdraws) and the owners of the host's records: a cluster that withdrew all of its
//! addresses still counts, so withdrawing cannot shrink the fleet under the threshold.

use std::collections::{BTreeMap, BTreeSet};

use meridian_dns::changes::{Changes, Update};
use meridian_dns::model::{Endpoint, RecordType, is_at_or_below};
use meridian_dns::plan::Registry;

/// How long a health record lives in resolvers (nobody resolves it; it is read by the API).
const HEALTH_TTL: u32 = 60;

/// Probes of a host's addresses from this cluster, run by the agent.
pub trait SharedProbes: Send + Sync + std::fmt::Debug {
    /// Probes these addresses of `record` (served at `host`) from now on, instead of any
    /// before, sending `headers` (from the check's `additionalHeadersRef`). `None`: the check
    /// names headers that cannot be read, so nothing is probed (a probe without them would
    /// report a failure that is not the backend's).
    fn watch(
        &self,
        record: &str,
        host: &str,
        addresses: &BTreeSet<String>,
        check: &meridian_api::kuadrant::HealthCheck,
        headers: Option<&[(String, String)]>,
    );
    /// The addresses of `record` this cluster sees failing now.
    fn failing(&self, record: &str) -> BTreeSet<String>;
}

/// The name of an address's health record under a host.
pub fn health_record_name(address: &str, host: &str) -> String {
    let base = host.trim_start_matches("*.");
    format!(
        "kuadrant.health.{}.{base}",
        address.replace(['.', ':'], "-").to_ascii_lowercase()
    )
}

fn health_value(address: &str, failing: &BTreeSet<String>) -> String {
    let ids: Vec<&str> = failing.iter().map(String::as_str).collect();
    format!("ip={address};failing={}", ids.join(","))
}

/// A failure report's address and IDs. Two clusters writing at once can leave two values;
/// their IDs add up (the next write replaces both with one).
fn parse_report(record: &Endpoint) -> Option<(String, BTreeSet<String>)> {
    let mut address = None;
    let mut ids = BTreeSet::new();
    for value in &record.targets {
        let (ip, failing) = value.strip_prefix("ip=")?.split_once(";failing=")?;
        address = Some(ip.to_string());
        ids.extend(
            failing
                .split(',')
                .filter(|id| !id.is_empty())
                .map(str::to_string),
        );
    }
    Some((address?, ids))
}

/// A member list's IDs (values of racing writers add up).
fn parse_members(record: &Endpoint) -> BTreeSet<String> {
    record
        .targets
        .iter()
        .filter_map(|value| value.strip_prefix("members="))
        .flat_map(|ids| ids.split(','))
        .filter(|id| !id.is_empty())
        .map(str::to_string)
        .collect()
}

fn is_report(record: &Endpoint, base: &str) -> bool {
    record.record_type == RecordType::Txt
        && record.dns_name.starts_with("kuadrant.health.")
        && is_at_or_below(&record.dns_name, base)
}

/// The failure reports in a zone for a host: address → (its record, who sees it failing).
pub fn read_reports(
    zone: &[Endpoint],
    host: &str,
) -> BTreeMap<String, (Endpoint, BTreeSet<String>)> {
    let base = host.trim_start_matches("*.");
    zone.iter()
        .filter(|e| is_report(e, base))
        .filter_map(|e| {
            let (address, ids) = parse_report(e)?;
            Some((address, (e.clone(), ids)))
        })
        .collect()
}

/// The addresses a host's records answer with (A and AAAA values at or below it).
pub fn host_addresses(zone: &[Endpoint], host: &str) -> BTreeSet<String> {
    let base = host.trim_start_matches("*.");
    zone.iter()
        .filter(|e| matches!(e.record_type, RecordType::A | RecordType::Aaaa))
        .filter(|e| is_at_or_below(&e.dns_name, base))
        .flat_map(|e| e.targets.iter().cloned())
        .collect()
}

/// The name of a host's member list.
pub fn members_record_name(host: &str) -> String {
    format!("kuadrant.members.{}", host.trim_start_matches("*."))
}

fn members_value(members: &BTreeSet<String>) -> String {
    let ids: Vec<&str> = members.iter().map(String::as_str).collect();
    format!("members={}", ids.join(","))
}

/// A host's member list as written.
pub fn read_members(zone: &[Endpoint], host: &str) -> Option<(Endpoint, BTreeSet<String>)> {
    let name = members_record_name(host);
    let record = zone
        .iter()
        .find(|e| e.record_type == RecordType::Txt && e.dns_name == name)?;
    Some((record.clone(), parse_members(record)))
}

/// The changes that take `me` out of every member list and failure report at or below
/// `base` (a host, or a zone's apex to leave everything).
pub fn leave(me: &str, zone: &[Endpoint], base: &str) -> Changes {
    let base = base.trim_start_matches("*.");
    let mut changes = Changes::default();
    let mut rewrite = |record: &Endpoint, remaining: &BTreeSet<String>, value: String| {
        if remaining.is_empty() {
            changes.deletes.push(record.clone());
        } else {
            changes.updates.push(Update {
                old: record.clone(),
                new: Endpoint::new(&record.dns_name, RecordType::Txt, [value], HEALTH_TTL),
            });
        }
    };
    for record in zone.iter().filter(|e| e.record_type == RecordType::Txt) {
        if record.dns_name.starts_with("kuadrant.members.")
            && is_at_or_below(&record.dns_name, base)
        {
            let mut members = parse_members(record);
            if members.remove(me) {
                rewrite(record, &members, members_value(&members));
            }
        } else if is_report(record, base)
            && let Some((address, mut ids)) = parse_report(record)
            && ids.remove(me)
        {
            rewrite(record, &ids, health_value(&address, &ids));
        }
    }
    changes
}

/// The clusters publishing the host: the owners vouching for its records.
pub fn host_owners(zone: &[Endpoint], host: &str) -> BTreeSet<String> {
    let base = host.trim_start_matches("*.");
    Registry::read(zone)
        .ownership
        .iter()
        .filter(|(key, _)| is_at_or_below(&key.dns_name, base))
        .flat_map(|(_, owners)| owners.keys().cloned())
        .collect()
}

/// What this cluster does about health on one pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SharedVerdict {
    /// Changes to the health records (this cluster's ID added or removed).
    pub changes: Changes,
    /// This cluster's own addresses to leave out of its branch.
    pub withdrawn: BTreeSet<String>,
    /// For status.
    pub notes: Vec<String>,
}

/// One pass of shared health for `me`, which publishes `own` addresses of `host` and sees
/// `failing` ones failing. `zone` is the zone as last read.
pub fn decide(
    me: &str,
    host: &str,
    own: &BTreeSet<String>,
    failing: &BTreeSet<String>,
    zone: &[Endpoint],
    threshold_percent: u32,
) -> SharedVerdict {
    let reports = read_reports(zone, host);
    let mut addresses = host_addresses(zone, host);
    addresses.extend(own.iter().cloned());
    let recorded = read_members(zone, host);
    let mut owners = host_owners(zone, host);
    owners.insert(me.to_string());
    let mut verdict = SharedVerdict::default();
    match &recorded {
        // Listed already, in one value.
        Some((record, members)) if members.contains(me) && record.targets.len() == 1 => {}
        Some((record, members)) => {
            let mut members = members.clone();
            members.insert(me.to_string());
            verdict.changes.updates.push(Update {
                old: record.clone(),
                new: Endpoint::new(
                    members_record_name(host),
                    RecordType::Txt,
                    [members_value(&members)],
                    HEALTH_TTL,
                ),
            });
        }
        None => verdict.changes.creates.push(Endpoint::new(
            members_record_name(host),
            RecordType::Txt,
            [members_value(&BTreeSet::from([me.to_string()]))],
            HEALTH_TTL,
        )),
    }
    owners.extend(recorded.map(|(_, members)| members).unwrap_or_default());
    let total = owners.len().max(1) as u64;

    let mut agreed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let everything: BTreeSet<&String> = addresses.iter().chain(reports.keys()).collect();
    for address in everything {
        let existing = reports.get(address);
        let mut ids = existing.map(|(_, ids)| ids.clone()).unwrap_or_default();
        // Reports of clusters that no longer publish the host do not count.
        ids.retain(|id| owners.contains(id));
        // A withdrawn address keeps the reports of the clusters that still see it failing:
        // were they dropped once it left the zone, it would come back while still failing,
        // and leave again (a flap a probe interval long).
        if failing.contains(address) && (addresses.contains(address) || existing.is_some()) {
            ids.insert(me.to_string());
        } else {
            ids.remove(me);
        }
        let name = health_record_name(address, host);
        let record = Endpoint::new(
            &name,
            RecordType::Txt,
            [health_value(address, &ids)],
            HEALTH_TTL,
        );
        match existing {
            Some((old, _)) if ids.is_empty() => verdict.changes.deletes.push(old.clone()),
            Some((old, before)) if *before != ids || old.targets.len() > 1 => {
                verdict.changes.updates.push(Update {
                    old: old.clone(),
                    new: record,
                })
            }
            Some(_) => {}
            None if !ids.is_empty() => verdict.changes.creates.push(record),
            None => {}
        }
        agreed.insert(address.clone(), ids);
    }
    let down = |address: &String| {
        agreed
            .get(address)
            .is_some_and(|ids| ids.len() as u64 * 100 >= u64::from(threshold_percent) * total)
    };
    if !addresses.is_empty() && addresses.iter().all(down) {
        verdict.notes.push(format!(
            "every address of {host} fails from at least {threshold_percent}% of {total} clusters; publishing all of them"
        ));
        return verdict;
    }
    for address in own.iter().filter(|a| down(a)) {
        let ids = &agreed[address];
        verdict.notes.push(format!(
            "{address} withdrawn: {} of {total} clusters see it failing",
            ids.len()
        ));
        verdict.withdrawn.insert(address.clone());
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "api.example.com";

    fn a(addresses: &[&str]) -> Endpoint {
        Endpoint::new(
            HOST,
            RecordType::A,
            addresses.iter().map(|a| a.to_string()),
            60,
        )
    }

    fn owner(id: &str) -> Endpoint {
        Endpoint::new(
            format!(
                "kuadrant-{}-a-{HOST}",
                meridian_dns::shortcode::shortcode(id, 8)
            ),
            RecordType::Txt,
            [format!(
                "heritage=external-dns,external-dns/owner={id},external-dns/version=1"
            )],
            0,
        )
    }

    fn report(address: &str, ids: &[&str]) -> Endpoint {
        let ids: BTreeSet<String> = ids.iter().map(|s| s.to_string()).collect();
        Endpoint::new(
            health_record_name(address, HOST),
            RecordType::Txt,
            [health_value(address, &ids)],
            HEALTH_TTL,
        )
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn changes_to_health(verdict: &SharedVerdict) -> Vec<&Endpoint> {
        verdict
            .changes
            .updates
            .iter()
            .map(|u| &u.new)
            .chain(verdict.changes.creates.iter())
            .filter(|e| e.dns_name.starts_with("kuadrant.health."))
            .collect()
    }

    fn zone(reports: &[Endpoint]) -> Vec<Endpoint> {
        let mut zone = vec![
            a(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]),
            owner("c1"),
            owner("c2"),
            owner("c3"),
        ];
        zone.extend(reports.iter().cloned());
        zone
    }

    #[test]
    fn one_report_of_three_keeps_an_address_two_withdraw_it() {
        // c2 publishes 10.0.0.2; c1 already sees it failing, c2 does not.
        let one = zone(&[report("10.0.0.2", &["c1"])]);
        let verdict = decide("c2", HOST, &set(&["10.0.0.2"]), &set(&[]), &one, 66);
        assert!(verdict.withdrawn.is_empty(), "1 of 3 is below 66 %");
        assert!(
            changes_to_health(&verdict).is_empty(),
            "nothing to say: c2 sees it healthy"
        );

        // c3 sees it failing too: it adds its ID, and then c2 withdraws its address.
        let verdict = decide(
            "c3",
            HOST,
            &set(&["10.0.0.3"]),
            &set(&["10.0.0.2"]),
            &one,
            66,
        );
        let health = changes_to_health(&verdict);
        assert_eq!(health.len(), 1);
        let updated = health[0];
        assert_eq!(updated.targets, ["ip=10.0.0.2;failing=c1,c3"]);
        let two = zone(&[report("10.0.0.2", &["c1", "c3"])]);
        let verdict = decide("c2", HOST, &set(&["10.0.0.2"]), &set(&[]), &two, 66);
        assert_eq!(verdict.withdrawn, set(&["10.0.0.2"]));
        assert!(verdict.notes[0].contains("2 of 3"), "{:?}", verdict.notes);
    }

    #[test]
    fn a_withdrawn_address_keeps_its_reports_while_it_still_fails() {
        // c2 withdrew 10.0.0.2 (no A record for it any more); c1 and c3 still see it failing.
        let mut withdrawn = zone(&[report("10.0.0.2", &["c1", "c3"])]);
        withdrawn[0] = a(&["10.0.0.1", "10.0.0.3"]);
        let verdict = decide(
            "c1",
            HOST,
            &set(&["10.0.0.1"]),
            &set(&["10.0.0.2"]),
            &withdrawn,
            66,
        );
        assert!(
            changes_to_health(&verdict).is_empty(),
            "c1 keeps its report, so c2 stays withdrawn: {:?}",
            verdict.changes
        );
        let verdict = decide("c2", HOST, &set(&["10.0.0.2"]), &set(&[]), &withdrawn, 66);
        assert_eq!(verdict.withdrawn, set(&["10.0.0.2"]));

        // It recovers for c1: c1's report goes, and with 1 of 3 left c2 publishes it again.
        let verdict = decide("c1", HOST, &set(&["10.0.0.1"]), &set(&[]), &withdrawn, 66);
        assert_eq!(
            changes_to_health(&verdict)[0].targets,
            ["ip=10.0.0.2;failing=c3"]
        );
        let recovering = zone(&[report("10.0.0.2", &["c3"])]);
        let verdict = decide("c2", HOST, &set(&["10.0.0.2"]), &set(&[]), &recovering, 66);
        assert!(verdict.withdrawn.is_empty());
    }

    #[test]
    fn when_every_address_would_go_all_stay_and_recovery_clears_reports() {
        let all_down = zone(&[
            report("10.0.0.1", &["c1", "c2", "c3"]),
            report("10.0.0.2", &["c1", "c2", "c3"]),
            report("10.0.0.3", &["c1", "c2"]),
        ]);
        let everything = set(&["10.0.0.1", "10.0.0.2", "10.0.0.3"]);
        let verdict = decide("c3", HOST, &set(&["10.0.0.3"]), &everything, &all_down, 66);
        assert!(verdict.withdrawn.is_empty());
        assert!(
            verdict.notes[0].contains("publishing all"),
            "{:?}",
            verdict.notes
        );
        // c1 recovers its view of everything: its ID leaves every record.
        let verdict = decide("c1", HOST, &set(&["10.0.0.1"]), &set(&[]), &all_down, 66);
        let health = changes_to_health(&verdict);
        assert_eq!(health.len(), 3);
        assert!(health.iter().all(|e| !e.targets[0].contains("c1")));
        // The last ID leaving deletes the record.
        let lone = zone(&[report("10.0.0.2", &["c1"])]);
        let verdict = decide("c1", HOST, &set(&["10.0.0.1"]), &set(&[]), &lone, 66);
        assert_eq!(verdict.changes.deletes.len(), 1);
    }

    #[test]
    fn reports_of_departed_clusters_do_not_count_and_many_ids_still_read_back() {
        // c9 left the fleet (no ownership record) but its report stayed.
        let stale = zone(&[report("10.0.0.2", &["c9", "c1"])]);
        let verdict = decide("c2", HOST, &set(&["10.0.0.2"]), &set(&[]), &stale, 50);
        assert!(verdict.withdrawn.is_empty(), "only c1 of 3 counts");
        assert_eq!(
            changes_to_health(&verdict)[0].targets,
            ["ip=10.0.0.2;failing=c1"]
        );

        let ids: Vec<String> = (0..12)
            .map(|i| format!("5edb17db-b8b5-4031-bc9f-6ef46a75186{i:x}"))
            .collect();
        let id_refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let long = report("10.0.0.1", &id_refs);
        assert!(long.targets[0].len() > 255);
        let read = read_reports(&[long], HOST);
        assert_eq!(read["10.0.0.1"].1.len(), 12);

        // Two values left by two writers at once: their IDs add up, and the next write merges.
        let mut doubled = report("10.0.0.2", &["c1"]);
        doubled
            .targets
            .push(health_value("10.0.0.2", &set(&["c3"])));
        let zone = zone(&[doubled]);
        assert_eq!(read_reports(&zone, HOST)["10.0.0.2"].1, set(&["c1", "c3"]));
        let verdict = decide(
            "c1",
            HOST,
            &set(&["10.0.0.1"]),
            &set(&["10.0.0.2"]),
            &zone,
            66,
        );
        assert_eq!(
            changes_to_health(&verdict)[0].targets,
            ["ip=10.0.0.2;failing=c1,c3"]
        );
    }

    #[test]
    fn a_member_that_withdrew_everything_still_counts_and_leaving_takes_it_out() {
        // c2 withdrew its only address, so it vouches for nothing now; it is still a member.
        let mut zone = vec![a(&["10.0.0.1", "10.0.0.3"]), owner("c1"), owner("c3")];
        zone.push(Endpoint::new(
            members_record_name(HOST),
            RecordType::Txt,
            [members_value(&set(&["c1", "c2", "c3"]))],
            HEALTH_TTL,
        ));
        zone.push(report("10.0.0.1", &["c2"]));
        // 1 of 3 members, not 1 of 2 owners: 10.0.0.1 stays at 50 %.
        let verdict = decide("c1", HOST, &set(&["10.0.0.1"]), &set(&[]), &zone, 50);
        assert!(verdict.withdrawn.is_empty(), "{:?}", verdict.notes);
        assert!(
            verdict.changes.is_empty(),
            "c1 is listed and has nothing to report"
        );

        // A new cluster lists itself.
        let verdict = decide("c4", HOST, &set(&[]), &set(&[]), &zone, 66);
        assert_eq!(
            verdict.changes.updates[0].new.targets,
            ["members=c1,c2,c3,c4"]
        );

        // c2 leaves: out of the member list and out of its report (the record goes).
        let left = leave("c2", &zone, HOST);
        assert_eq!(left.updates.len(), 1);
        assert_eq!(left.updates[0].new.targets, ["members=c1,c3"]);
        assert_eq!(left.deletes.len(), 1);
        assert!(left.deletes[0].dns_name.starts_with("kuadrant.health."));
    }
}
