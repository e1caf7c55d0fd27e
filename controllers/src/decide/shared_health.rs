//! Health agreed through the zone itself (distributed mode, seed 002), the pure part. Every
//! cluster probes every address of a host from where it stands and keeps, per address, a TXT
//! record `kuadrant.health.<address>.<host>` listing the IDs of the clusters that see it
//! failing (`ip=<address>;failing=<id>,<id>`; a long list runs on into more values of the same
//! record, each at most [`TXT_VALUE_CHARS`], as seed 002 says). A cluster
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

/// The longest value (in bytes) of a member list or failure report written: a longer list
/// runs on into more values of the same record (readers add the values up, as they always did
/// for racing writers). Route53 takes at most 4,000 characters a value, and a hundred
/// clusters' IDs are about 3,700. The record as a whole still travels in one change, so each
/// provider's limit on a change or a record set is still a ceiling (docs/distributed.md).
pub const TXT_VALUE_CHARS: usize = 1_000;

/// `ids` after `prefix`, comma-separated, in as many values as it takes to keep each within
/// `cap` characters (an ID too long for one goes alone). No IDs: the prefix alone.
fn split_ids(prefix: &str, ids: &BTreeSet<String>, cap: usize) -> Vec<String> {
    let mut values = Vec::new();
    let mut value = prefix.to_string();
    for id in ids {
        let comma = usize::from(value.len() > prefix.len());
        if value.len() > prefix.len() && value.len() + comma + id.len() > cap {
            values.push(std::mem::replace(&mut value, prefix.to_string()));
        }
        if value.len() > prefix.len() {
            value.push(',');
        }
        value.push_str(id);
    }
    values.push(value);
    values
}

/// Whether `values` hold exactly `ids`, each once, each value `prefix`ed and within `cap`:
/// written as [`split_ids`] writes them or in any other split that fits (an earlier version's
/// one value, another cluster's order), so nothing needs writing again.
fn holds_exactly(values: &[String], prefix: &str, ids: &BTreeSet<String>, cap: usize) -> bool {
    let mut seen = BTreeSet::new();
    for value in values {
        let Some(list) = value.strip_prefix(prefix) else {
            return false;
        };
        if value.len() > cap && list.contains(',') {
            return false;
        }
        for id in list.split(',').filter(|id| !id.is_empty()) {
            if !seen.insert(id) {
                return false;
            }
        }
    }
    seen.len() == ids.len() && seen.iter().all(|id| ids.contains(*id))
}

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

fn health_prefix(address: &str) -> String {
    format!("ip={address};failing=")
}

fn health_values(address: &str, failing: &BTreeSet<String>) -> Vec<String> {
    split_ids(&health_prefix(address), failing, TXT_VALUE_CHARS)
}

/// A failure report's address and IDs: its values add up (a long list runs on into several,
/// and two clusters writing at once can leave two). A value of another form is passed over,
/// as in a member list: one stray value must not hide every cluster's reports (the next
/// change writes the record without it).
fn parse_report(record: &Endpoint) -> Option<(String, BTreeSet<String>)> {
    let mut address = None;
    let mut ids = BTreeSet::new();
    for value in &record.targets {
        let Some((ip, failing)) = value
            .strip_prefix("ip=")
            .and_then(|rest| rest.split_once(";failing="))
        else {
            continue;
        };
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
        .filter_map(|value| value.strip_prefix(MEMBERS_PREFIX))
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

/// The addresses this cluster probes for a host it publishes `own` records of: every address
/// the host's records answer with (`zone`, as last read), its own, and those a failure report
/// names (addresses withdrawn for failing stay probed, so their reports hold until they
/// recover).
pub fn addresses_to_probe(zone: &[Endpoint], own: &[Endpoint], host: &str) -> BTreeSet<String> {
    let mut addresses = host_addresses(zone, host);
    addresses.extend(host_addresses(own, host));
    addresses.extend(read_reports(zone, host).into_keys());
    addresses
}

/// The name of a host's member list.
pub fn members_record_name(host: &str) -> String {
    format!("kuadrant.members.{}", host.trim_start_matches("*."))
}

const MEMBERS_PREFIX: &str = "members=";

fn members_values(members: &BTreeSet<String>) -> Vec<String> {
    split_ids(MEMBERS_PREFIX, members, TXT_VALUE_CHARS)
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
/// `base` (a host, or a zone's apex to leave everything). Its tier records go with
/// [`crate::decide::shared_tiers::leave`].
pub fn leave(me: &str, zone: &[Endpoint], base: &str) -> Changes {
    let base = base.trim_start_matches("*.");
    let mut changes = Changes::default();
    let mut rewrite = |record: &Endpoint, remaining: &BTreeSet<String>, values: Vec<String>| {
        if remaining.is_empty() {
            changes.deletes.push(record.clone());
        } else {
            changes.updates.push(Update {
                old: record.clone(),
                new: Endpoint::new(&record.dns_name, RecordType::Txt, values, HEALTH_TTL),
            });
        }
    };
    for record in zone.iter().filter(|e| e.record_type == RecordType::Txt) {
        if record.dns_name.starts_with("kuadrant.members.")
            && is_at_or_below(&record.dns_name, base)
        {
            let mut members = parse_members(record);
            if members.remove(me) {
                rewrite(record, &members, members_values(&members));
            }
        } else if is_report(record, base)
            && let Some((address, mut ids)) = parse_report(record)
            && ids.remove(me)
        {
            rewrite(record, &ids, health_values(&address, &ids));
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
    /// Every address of the host the fleet agrees is failing (none while every address is:
    /// then all stay published).
    pub down: BTreeSet<String>,
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
        // Listed already, each member once and every value within the length.
        Some((record, members))
            if members.contains(me)
                && holds_exactly(&record.targets, MEMBERS_PREFIX, members, TXT_VALUE_CHARS) => {}
        Some((record, members)) => {
            let mut members = members.clone();
            members.insert(me.to_string());
            verdict.changes.updates.push(Update {
                old: record.clone(),
                new: Endpoint::new(
                    members_record_name(host),
                    RecordType::Txt,
                    members_values(&members),
                    HEALTH_TTL,
                ),
            });
        }
        None => verdict.changes.creates.push(Endpoint::new(
            members_record_name(host),
            RecordType::Txt,
            members_values(&BTreeSet::from([me.to_string()])),
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
            health_values(address, &ids),
            HEALTH_TTL,
        );
        let written = |old: &Endpoint| {
            holds_exactly(&old.targets, &health_prefix(address), &ids, TXT_VALUE_CHARS)
        };
        match existing {
            Some((old, _)) if ids.is_empty() => verdict.changes.deletes.push(old.clone()),
            Some((old, _)) if !written(old) => verdict.changes.updates.push(Update {
                old: old.clone(),
                new: record,
            }),
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
    verdict.down = addresses
        .iter()
        .chain(reports.keys())
        .filter(|a| down(a))
        .cloned()
        .collect();
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
            health_values(address, &ids),
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

        // Two values left by two writers at once: their IDs add up. Each ID once, they need no
        // write of their own; the next change merges them.
        let mut doubled = report("10.0.0.2", &["c1"]);
        doubled
            .targets
            .extend(health_values("10.0.0.2", &set(&["c3"])));
        let zone = zone(&[doubled.clone()]);
        assert_eq!(read_reports(&zone, HOST)["10.0.0.2"].1, set(&["c1", "c3"]));
        let verdict = decide(
            "c1",
            HOST,
            &set(&["10.0.0.1"]),
            &set(&["10.0.0.2"]),
            &zone,
            66,
        );
        assert!(changes_to_health(&verdict).is_empty(), "{verdict:?}");
        let verdict = decide(
            "c2",
            HOST,
            &set(&["10.0.0.2"]),
            &set(&["10.0.0.2"]),
            &zone,
            66,
        );
        assert_eq!(
            changes_to_health(&verdict)[0].targets,
            ["ip=10.0.0.2;failing=c1,c2,c3"]
        );
        // The same ID in both values is rewritten once.
        let mut twice = doubled;
        twice
            .targets
            .extend(health_values("10.0.0.2", &set(&["c1"])));
        let verdict = decide(
            "c1",
            HOST,
            &set(&["10.0.0.1"]),
            &set(&["10.0.0.2"]),
            &self::zone(&[twice]),
            66,
        );
        assert_eq!(
            changes_to_health(&verdict)[0].targets,
            ["ip=10.0.0.2;failing=c1,c3"]
        );
    }

    #[test]
    fn a_stray_value_does_not_hide_a_report_and_the_next_change_drops_it() {
        let mut stray = report("10.0.0.2", &["c1", "c3"]);
        stray.targets.push("v=spf1 -all".into());
        let zone = zone(&[stray]);
        assert_eq!(read_reports(&zone, HOST)["10.0.0.2"].1, set(&["c1", "c3"]));
        let verdict = decide(
            "c2",
            HOST,
            &set(&["10.0.0.2"]),
            &set(&["10.0.0.2"]),
            &zone,
            66,
        );
        // Read, so updated in place (not created beside the stray value).
        assert!(
            !verdict
                .changes
                .creates
                .iter()
                .any(|e| e.dns_name.starts_with("kuadrant.health.")),
            "{verdict:?}"
        );
        assert_eq!(
            verdict.changes.updates[0].new.targets,
            ["ip=10.0.0.2;failing=c1,c2,c3"]
        );
    }

    /// A fleet's worth of cluster IDs (UUIDs, as OCM's cluster claims are).
    fn fleet_ids(n: usize) -> BTreeSet<String> {
        (0..n)
            .map(|i| format!("5edb17db-b8b5-4031-bc9f-{i:012x}"))
            .collect()
    }

    #[test]
    fn a_long_list_runs_on_into_more_values_within_the_length_and_reads_back_whole() {
        for n in (0..=400).step_by(7).chain([1, 2, 26, 27, 100, 300]) {
            let ids = fleet_ids(n);
            let values = members_values(&ids);
            assert!(
                values.iter().all(|v| v.len() <= TXT_VALUE_CHARS),
                "{n}: {:?}",
                values.iter().map(String::len).collect::<Vec<_>>()
            );
            let record = Endpoint::new(
                members_record_name(HOST),
                RecordType::Txt,
                values.clone(),
                HEALTH_TTL,
            );
            assert_eq!(parse_members(&record), ids, "{n}");
            assert!(holds_exactly(
                &values,
                MEMBERS_PREFIX,
                &ids,
                TXT_VALUE_CHARS
            ));
            // As few values as the length allows: every value but the last is nearly full.
            let id_len = ids.iter().next().map(String::len).unwrap_or_default();
            for value in &values[..values.len() - 1] {
                assert!(
                    value.len() + 1 + id_len > TXT_VALUE_CHARS,
                    "{n}: {}",
                    value.len()
                );
            }
            let address = "2001:db8::1";
            let reports = health_values(address, &ids);
            assert!(reports.iter().all(|v| v.len() <= TXT_VALUE_CHARS));
            let record = Endpoint::new(
                health_record_name(address, HOST),
                RecordType::Txt,
                reports,
                HEALTH_TTL,
            );
            if n > 0 {
                assert_eq!(parse_report(&record), Some((address.to_string(), ids)));
            }
        }
        assert_eq!(members_values(&fleet_ids(100)).len(), 4);
        assert_eq!(members_values(&BTreeSet::new()), ["members="]);
        // An ID longer than a value goes alone, never cut.
        let long = BTreeSet::from(["x".repeat(TXT_VALUE_CHARS + 5), "a".into()]);
        let values = members_values(&long);
        assert_eq!(values.len(), 2);
        assert!(holds_exactly(
            &values,
            MEMBERS_PREFIX,
            &long,
            TXT_VALUE_CHARS
        ));
    }

    #[test]
    fn an_earlier_versions_one_value_stays_while_it_fits_and_is_split_once_it_does_not() {
        let members_record = |values: Vec<String>| {
            Endpoint::new(
                members_record_name(HOST),
                RecordType::Txt,
                values,
                HEALTH_TTL,
            )
        };
        let one_value = |ids: &BTreeSet<String>| {
            let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
            vec![format!("members={}", ids.join(","))]
        };
        // 20 clusters in one value (as every earlier version wrote): listed, nothing to write.
        let small = fleet_ids(20);
        let me = small.iter().next().unwrap().clone();
        let mut zone = vec![a(&["10.0.0.1"]), members_record(one_value(&small))];
        let verdict = decide(&me, HOST, &set(&["10.0.0.1"]), &set(&[]), &zone, 66);
        assert!(verdict.changes.is_empty(), "{verdict:?}");
        // 100 clusters in one value of 3,700 characters: split into values that fit.
        let big = fleet_ids(100);
        let me = big.iter().next().unwrap().clone();
        zone[1] = members_record(one_value(&big));
        assert!(zone[1].targets[0].len() > 3_600);
        let verdict = decide(&me, HOST, &set(&["10.0.0.1"]), &set(&[]), &zone, 66);
        let new = &verdict.changes.updates[0].new;
        assert_eq!(new.targets, members_values(&big));
        assert_eq!(parse_members(new), big);
        // Written so, it stays: another cluster of the fleet has nothing to write.
        zone[1] = new.clone();
        let other = big.iter().nth(50).unwrap().clone();
        let verdict = decide(&other, HOST, &set(&["10.0.0.1"]), &set(&[]), &zone, 66);
        assert!(verdict.changes.is_empty(), "{verdict:?}");
        // A member leaving rewrites the list in values that fit.
        let left = leave(&other, &zone, HOST);
        let mut remaining = big.clone();
        remaining.remove(&other);
        assert_eq!(left.updates[0].new.targets, members_values(&remaining));
    }

    #[test]
    fn a_member_that_withdrew_everything_still_counts_and_leaving_takes_it_out() {
        // c2 withdrew its only address, so it vouches for nothing now; it is still a member.
        let mut zone = vec![a(&["10.0.0.1", "10.0.0.3"]), owner("c1"), owner("c3")];
        zone.push(Endpoint::new(
            members_record_name(HOST),
            RecordType::Txt,
            members_values(&set(&["c1", "c2", "c3"])),
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
