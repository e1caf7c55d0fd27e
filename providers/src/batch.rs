//! Splitting a change set into provider batches. Pure, so its guarantees are tested directly:
//! every batch is within the limits, the changes at one name (and the ownership records that
//! vouch for them) travel in one batch with deletes first, so a record's type or routing
//! policy can change inside one batch and a record never lands without its ownership record.

use std::collections::BTreeMap;

use std::future::Future;

use super::ProviderError;
use meridian_dns::changes::Changes;
use meridian_dns::model::Endpoint;
use meridian_dns::plan::record_vouched_for;

/// What a change does to a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Action {
    Delete,
    Upsert,
    Create,
}

/// One change of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub action: Action,
    pub record: Endpoint,
    /// For an upsert: the record it replaces, as the plan saw it (providers that can make the
    /// change conditional on it do, so a concurrent change is refused rather than lost).
    pub replaces: Option<Endpoint>,
}

/// A provider's per-request limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_changes: usize,
    /// Resource record values per request; an upsert's count twice.
    pub max_values: usize,
    /// Characters of values per request; an upsert's count twice.
    pub max_value_chars: usize,
    /// The provider sends an update of the plan as the deletion of the record it replaces and
    /// the creation of the new one, so that it is refused if another writer changed the record
    /// since (Route53): two changes, each record's values once.
    pub updates_replace: bool,
}

/// Route53's limits for one ChangeResourceRecordSets call.
pub const ROUTE53_LIMITS: Limits = Limits {
    max_changes: 1000,
    max_values: 1000,
    max_value_chars: 32_000,
    updates_replace: true,
};

impl Change {
    fn weight(&self, limits: &Limits) -> (usize, usize, usize) {
        match (&self.replaces, self.action) {
            (Some(old), Action::Upsert) if limits.updates_replace => {
                let (old_values, old_chars) = values_and_chars(old);
                let (values, chars) = values_and_chars(&self.record);
                (2, old_values + values, old_chars + chars)
            }
            // An upsert counts its values twice (the provider deletes and creates).
            (_, Action::Upsert) => {
                let (values, chars) = values_and_chars(&self.record);
                (1, 2 * values, 2 * chars)
            }
            (_, Action::Create | Action::Delete) => {
                let (values, chars) = values_and_chars(&self.record);
                (1, values, chars)
            }
        }
    }
}

/// A record's values as a request counts them, and their characters: TXT values travel quoted,
/// a long one as several quoted strings.
fn values_and_chars(record: &Endpoint) -> (usize, usize) {
    let txt = record.record_type == meridian_dns::model::RecordType::Txt;
    let chars = record
        .targets
        .iter()
        .map(|t| {
            if txt {
                crate::quote_txt(t).len()
            } else {
                t.len()
            }
        })
        .sum::<usize>();
    (record.targets.len().max(1), chars)
}

/// The changes of one name: the records at it and the ownership records vouching for them.
pub type ChangeGroup = Vec<Change>;

/// Groups a change set by the name each change is about, deletes first within a group.
pub fn group_by_name(changes: &Changes) -> Vec<ChangeGroup> {
    let mut groups: BTreeMap<String, ChangeGroup> = BTreeMap::new();
    let all = changes
        .deletes
        .iter()
        .map(|r| Change {
            action: Action::Delete,
            record: r.clone(),
            replaces: None,
        })
        .chain(changes.updates.iter().map(|u| Change {
            action: Action::Upsert,
            record: u.new.clone(),
            replaces: Some(u.old.clone()),
        }))
        .chain(changes.creates.iter().map(|r| Change {
            action: Action::Create,
            record: r.clone(),
            replaces: None,
        }));
    for change in all {
        let name = record_vouched_for(&change.record)
            .map_or_else(|| change.record.dns_name.clone(), |key| key.dns_name);
        groups.entry(name).or_default().push(change);
    }
    groups
        .into_values()
        .map(|mut group| {
            group.sort_by_key(|change| change.action);
            group
        })
        .collect()
}

/// Packs groups into batches within `limits`, keeping each group whole. A group larger than
/// one batch on its own gets a batch to itself (the provider then says why it is refused).
pub fn pack(groups: Vec<ChangeGroup>, limits: Limits) -> Vec<Vec<ChangeGroup>> {
    let mut batches: Vec<Vec<ChangeGroup>> = Vec::new();
    let mut current: Vec<ChangeGroup> = Vec::new();
    let mut used = (0, 0, 0);
    for group in groups {
        let cost = group
            .iter()
            .map(|c| c.weight(&limits))
            .fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2));
        let fits = used.0 + cost.0 <= limits.max_changes
            && used.1 + cost.1 <= limits.max_values
            && used.2 + cost.2 <= limits.max_value_chars;
        if !fits && !current.is_empty() {
            batches.push(std::mem::take(&mut current));
            used = (0, 0, 0);
        }
        used = (used.0 + cost.0, used.1 + cost.1, used.2 + cost.2);
        current.push(group);
    }
    if !current.is_empty() {
        batches.push(current);
    }
    batches
}

/// The name a group is about (its record, not the ownership records beside it).
pub fn group_name(group: &ChangeGroup) -> String {
    group
        .iter()
        .find(|c| record_vouched_for(&c.record).is_none())
        .or(group.first())
        .map(|c| c.record.dns_name.clone())
        .unwrap_or_default()
}

/// Sends `batches` one after the other. When the provider refuses a batch, its names are sent
/// one by one, so a bad record blocks only itself; the error lists exactly the names that
/// failed. A batch refused as stale (a record not as planned: another writer got there first)
/// is sent name by name too, so the names nobody else touched land now; the result is then
/// [`ProviderError::Stale`] for the others, unless a name failed outright. Any other error
/// (throttling that outlasted the retries, a broken connection) stops.
pub async fn send_batches<F, Fut>(
    batches: Vec<Vec<ChangeGroup>>,
    mut send: F,
) -> Result<(), ProviderError>
where
    F: FnMut(Vec<Change>) -> Fut,
    Fut: Future<Output = Result<(), ProviderError>>,
{
    let mut failures = Vec::new();
    let mut stale = Vec::new();
    for batch in batches {
        match send(batch.concat()).await {
            Ok(()) => {}
            Err(ProviderError::Rejected(_) | ProviderError::Stale(_)) if batch.len() > 1 => {
                for group in batch {
                    let name = group_name(&group);
                    match send(group).await {
                        Ok(()) => {}
                        Err(ProviderError::Stale(message)) => {
                            stale.push(format!("{name}: {message}"))
                        }
                        Err(error) => failures.push(format!("{name}: {error}")),
                    }
                }
            }
            Err(ProviderError::Rejected(message)) => {
                failures.push(format!("{}: {message}", group_name(&batch[0])))
            }
            Err(ProviderError::Stale(message)) => {
                stale.push(format!("{}: {message}", group_name(&batch[0])))
            }
            Err(other) => return Err(other),
        }
    }
    if !failures.is_empty() {
        Err(ProviderError::PartlyApplied(failures))
    } else if !stale.is_empty() {
        Err(ProviderError::Stale(stale.join("; ")))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::changes::Update;
    use meridian_dns::model::RecordType;
    use meridian_dns::plan::ownership_record;
    use proptest::prelude::*;

    fn a(name: &str, targets: usize) -> Endpoint {
        Endpoint::new(
            name,
            RecordType::A,
            (0..targets).map(|i| format!("10.0.{}.{}", i / 250, i % 250)),
            60,
        )
    }

    #[test]
    fn a_type_change_and_its_ownership_records_travel_together_deletes_first() {
        let old = a("app.example.com", 1);
        let new = Endpoint::new(
            "app.example.com",
            RecordType::Cname,
            ["klb.app.example.com".to_string()],
            300,
        );
        let changes = Changes {
            deletes: vec![ownership_record("o", &old), old.clone()],
            creates: vec![
                new.clone(),
                ownership_record("o", &new),
                a("other.example.com", 1),
            ],
            updates: vec![],
        };
        let groups = group_by_name(&changes);
        assert_eq!(groups.len(), 2);
        let app = groups
            .iter()
            .find(|g| g.iter().any(|c| c.record == new))
            .unwrap();
        assert_eq!(
            app.len(),
            4,
            "the record, its replacement and both ownership records"
        );
        assert!(
            app[..2].iter().all(|c| c.action == Action::Delete),
            "deletes first: {app:?}"
        );
    }

    #[test]
    fn a_long_txt_value_costs_what_travels_every_string_quoted() {
        let value = "x".repeat(1_000);
        let change = Change {
            action: Action::Create,
            record: Endpoint::new("list.example.com", RecordType::Txt, [value], 60),
            replaces: None,
        };
        // Four quoted strings of at most 255 bytes and the spaces between them.
        assert_eq!(change.weight(&ROUTE53_LIMITS), (1, 1, 1_000 + 8 + 3));
        // An update replacing a shorter value: two changes, both values once; as an upsert
        // (a provider without the conditional form), the new value twice.
        let update = Change {
            action: Action::Upsert,
            replaces: Some(Endpoint::new(
                "list.example.com",
                RecordType::Txt,
                ["y".repeat(10)],
                60,
            )),
            ..change
        };
        assert_eq!(
            update.weight(&ROUTE53_LIMITS),
            (2, 2, 10 + 2 + 1_000 + 8 + 3)
        );
        let upsert_limits = Limits {
            updates_replace: false,
            ..ROUTE53_LIMITS
        };
        assert_eq!(update.weight(&upsert_limits), (1, 2, 2 * (1_000 + 8 + 3)));
    }

    #[tokio::test]
    async fn a_stale_batch_lands_the_names_nobody_else_touched_and_stays_stale_for_the_rest() {
        let group = |name: &str| {
            vec![Change {
                action: Action::Create,
                record: a(name, 1),
                replaces: None,
            }]
        };
        let batches = vec![vec![
            group("a.example.com"),
            group("b.example.com"),
            group("c.example.com"),
        ]];
        let landed = std::sync::Mutex::new(Vec::new());
        let result = send_batches(batches, |batch: Vec<Change>| {
            let landed = &landed;
            async move {
                // Another writer changed b: a batch holding it is refused whole.
                if batch.iter().any(|c| c.record.dns_name == "b.example.com") {
                    return Err(ProviderError::Stale("b changed".into()));
                }
                landed
                    .lock()
                    .unwrap()
                    .extend(batch.into_iter().map(|c| c.record.dns_name));
                Ok(())
            }
        })
        .await;
        assert_eq!(*landed.lock().unwrap(), ["a.example.com", "c.example.com"]);
        match result {
            Err(ProviderError::Stale(message)) => {
                assert!(message.starts_with("b.example.com: "), "{message}")
            }
            other => panic!("expected stale, got {other:?}"),
        }
    }

    proptest! {
        #[test]
        fn batches_stay_within_limits_and_keep_groups_whole(sizes in prop::collection::vec((1usize..40, any::<bool>()), 1..120)) {
            let mut changes = Changes::default();
            for (i, (targets, upsert)) in sizes.iter().enumerate() {
                let record = a(&format!("h{i}.example.com"), *targets);
                if *upsert {
                    changes.updates.push(Update { old: record.clone(), new: record.clone() });
                } else {
                    changes.creates.push(record.clone());
                }
                changes.creates.push(ownership_record("owner", &record));
            }
            let limits = Limits { max_changes: 50, max_values: 100, max_value_chars: 3000, updates_replace: false };
            let total = changes.len();
            let batches: Vec<Vec<Change>> = pack(group_by_name(&changes), limits).into_iter().map(|b| b.concat()).collect();
            prop_assert_eq!(batches.iter().map(Vec::len).sum::<usize>(), total);
            for batch in &batches {
                let names: std::collections::BTreeSet<String> = batch.iter().map(|c| c.record.dns_name.clone()).collect();
                let cost = batch.iter().map(|c| c.weight(&limits)).fold((0, 0, 0), |a, b| (a.0 + b.0, a.1 + b.1, a.2 + b.2));
                // A group only exceeds the limits when it alone is larger than a batch.
                if batch.len() > 2 {
                    prop_assert!(cost.0 <= limits.max_changes && cost.1 <= limits.max_values && cost.2 <= limits.max_value_chars, "{cost:?}");
                }
                for name in names.iter().filter(|n| !n.starts_with("kuadrant-")) {
                    let txt_name = meridian_dns::plan::ownership_txt_name("owner", RecordType::A, name);
                    prop_assert!(names.contains(&txt_name), "{name} travels with its ownership record");
                }
            }
        }
    }
}
