//! The plan: one owner's desired records + the zone + what the owner published before → a
//! change batch, with external-dns-compatible ownership.
//!
//! Every record an owner publishes is paired with a TXT record
//! `kuadrant-<shortcode8(owner)>-<type>-<name>` holding
//! `heritage=external-dns,external-dns/owner=<owner>,external-dns/version=1` (same set
//! identifier and routing properties as the record, so providers with routing policies can store
//! it). Rules:
//! - several owners may publish one record: multi-value targets are unioned, and a record is
//!   deleted only by its last owner;
//! - records of other owners, and records nobody owns, are never changed;
//! - a record-type change on a shared name, and a CNAME inside the root host pointing at
//!   nothing, are refused;
//! - value conflicts between owners (single CNAME target such as the catch-all, TTL, routing
//!   properties) are reported, and the value already published stays.
//!
//! A refused or conflicting record is left out of the batch; everything else still goes ahead.
//!
//! Other tools' registries in the same zone are read too, so a record they hold is reported
//! with its owner rather than as nobody's:
//! - Kuadrant's dns-operator writes the same `kuadrant-` records (one per owner); it spells a
//!   wildcard's leading `*` as `wildcard`, so `kuadrant-<code>-cname-wildcard.x` vouches for
//!   `*.x` when another owner wrote it;
//! - external-dns writes `<prefix><type>-<first label><suffix>.<rest>` (before 0.18 also the
//!   record's own name) holding `heritage=external-dns,external-dns/owner=<id>,…`. Its prefix
//!   and suffix are flags Meridian cannot see, so a heritage TXT at the record's parent whose
//!   first labels hold the record's first label as a word counts as a claim. A claim only
//!   changes how a refusal is worded: a record Meridian does not own is never changed either
//!   way.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::changes::{Changes, Update, ZoneRecords};
use crate::model::{Endpoint, RecordKey, RecordType, is_at_or_below};
use crate::shortcode::shortcode;

const REGISTRY_PREFIX: &str = "kuadrant-";
const HERITAGE: &str = "heritage=external-dns";
/// How Kuadrant's dns-operator spells a leading `*.` inside an ownership record's name.
const KUADRANT_WILDCARD: &str = "wildcard.";

/// Name of the ownership TXT record of `owner`'s record `record_type` at `dns_name`.
pub fn ownership_txt_name(owner: &str, record_type: RecordType, dns_name: &str) -> String {
    txt_name_with_code(&shortcode(owner, 8), record_type, dns_name)
}

fn txt_name_with_code(owner_code: &str, record_type: RecordType, dns_name: &str) -> String {
    format!(
        "{REGISTRY_PREFIX}{owner_code}-{}-{dns_name}",
        record_type.as_str().to_ascii_lowercase()
    )
}

/// Value of `owner`'s ownership TXT records.
pub fn ownership_txt_value(owner: &str) -> String {
    format!("{HERITAGE},external-dns/owner={owner},external-dns/version=1")
}

/// The ownership TXT record for `owner`'s `record`.
pub fn ownership_record(owner: &str, record: &Endpoint) -> Endpoint {
    ownership_record_with_code(&shortcode(owner, 8), owner, record)
}

/// [`ownership_record`] with the owner's shortcode already computed (it is a SHA-224; a plan
/// writes one ownership record per record).
fn ownership_record_with_code(owner_code: &str, owner: &str, record: &Endpoint) -> Endpoint {
    let mut txt = Endpoint::new(
        txt_name_with_code(owner_code, record.record_type, &record.dns_name),
        RecordType::Txt,
        [ownership_txt_value(owner)],
        record.record_ttl,
    );
    txt.set_identifier = record.set_identifier.clone();
    txt.provider_specific = record.provider_specific.clone();
    txt
}

/// The key of the record an ownership TXT record vouches for, read from its name alone (the
/// owner is not checked).
pub fn record_vouched_for(txt: &Endpoint) -> Option<RecordKey> {
    let (record_type, dns_name) = vouched_name(txt)?;
    Some(RecordKey {
        dns_name: dns_name.to_string(),
        record_type,
        set_identifier: txt.set_identifier.clone(),
    })
}

/// The type and name of the record an ownership TXT record vouches for, borrowed from its name
/// (as [`record_vouched_for`], without copying: [`host_records`] asks it of every TXT record
/// of the zone).
fn vouched_name(txt: &Endpoint) -> Option<(RecordType, &str)> {
    if txt.record_type != RecordType::Txt {
        return None;
    }
    let rest = txt.dns_name.strip_prefix(REGISTRY_PREFIX)?;
    let (_, rest) = rest.split_at_checked(8)?;
    let (type_name, dns_name) = rest.strip_prefix('-')?.split_once('-')?;
    Some((RecordType::parse(type_name)?, dns_name))
}

/// The `external-dns/<key>=<value>` labels of a registry TXT record (one with
/// `heritage=external-dns`), from one value or spread over several, quoted or not.
fn registry_labels(txt: &Endpoint) -> Option<BTreeMap<&str, &str>> {
    if txt.record_type != RecordType::Txt {
        return None;
    }
    let parts = || {
        txt.targets
            .iter()
            .flat_map(|value| value.trim_matches('"').split(','))
            .map(str::trim)
    };
    if !parts().any(|part| part == HERITAGE) {
        return None;
    }
    Some(
        parts()
            .filter_map(|part| part.strip_prefix("external-dns/")?.split_once('='))
            .collect(),
    )
}

/// The record an ownership TXT record vouches for, and its owner, when the name's shortcode is
/// the owner's. `codes` memoizes owners' shortcodes across the records of one zone.
fn parse_ownership(
    txt: &Endpoint,
    codes: &mut BTreeMap<String, String>,
) -> Option<(RecordKey, String)> {
    let key = record_vouched_for(txt)?;
    let code = txt.dns_name.strip_prefix(REGISTRY_PREFIX)?.get(..8)?;
    let owner = registry_labels(txt)?.get("owner")?.to_string();
    let owner_code = codes
        .entry(owner.clone())
        .or_insert_with(|| shortcode(&owner, 8));
    (owner_code == code).then_some((key, owner))
}

/// The wildcard record a dns-operator ownership record spelt `wildcard.<rest>` vouches for.
fn kuadrant_wildcard(key: &RecordKey) -> Option<RecordKey> {
    let rest = key.dns_name.strip_prefix(KUADRANT_WILDCARD)?;
    Some(RecordKey {
        dns_name: format!("*.{rest}"),
        ..key.clone()
    })
}

/// A registry TXT record of another tool (external-dns), and whose it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignClaim {
    /// The TXT record's name.
    pub txt_name: String,
    /// Its `external-dns/owner`.
    pub owner: String,
    /// Its `external-dns/resource` (the object that asked for the record), when given.
    pub resource: Option<String>,
}

impl ForeignClaim {
    /// Whether this may be the ownership record of `dns_name` (see [`may_claim`]).
    pub fn may_claim(&self, dns_name: &str) -> bool {
        may_claim(&self.txt_name, dns_name)
    }
}

/// Whether an external-dns registry record named `txt_name` may vouch for `dns_name` (any
/// type): the record's own name (external-dns before 0.18), or a name at the same parent whose
/// first labels hold the record's first label as a word (between separators `-`, `.`, `_` or
/// the ends), with a type and an affix around it.
fn may_claim(txt_name: &str, dns_name: &str) -> bool {
    if txt_name == dns_name {
        return true;
    }
    let (first, parent) = dns_name.split_once('.').unwrap_or((dns_name, ""));
    let head = if parent.is_empty() {
        Some(txt_name)
    } else {
        txt_name
            .strip_suffix(parent)
            .and_then(|head| head.strip_suffix('.'))
    };
    let separated = |c: Option<char>| c.is_none_or(|c| matches!(c, '-' | '.' | '_'));
    head.is_some_and(|head| {
        head != first
            && head.match_indices(first).any(|(at, _)| {
                separated(head[..at].chars().next_back())
                    && separated(head[at + first.len()..].chars().next())
            })
    })
}

/// The zone as `owner` left it when it published `published`: the records and their ownership
/// records. Planning a small change against this, instead of reading the provider, costs no
/// read at all; if someone changed the zone meanwhile, the provider refuses the inexact change
/// and the controller falls back to reading.
pub fn published_zone(owner: &str, published: &[Endpoint]) -> Vec<Endpoint> {
    let owner_code = shortcode(owner, 8);
    published
        .iter()
        .flat_map(|record| {
            [
                record.clone(),
                ownership_record_with_code(&owner_code, owner, record),
            ]
        })
        .collect()
}

/// Ownership handed from earlier owner IDs to a new one, and the zone as it is afterwards.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Adoption {
    /// Only ownership records: the records themselves, and so every answer, stay as they are.
    pub changes: Changes,
    /// The zone once `changes` are applied, to plan against.
    pub zone: Vec<Endpoint>,
}

/// Moves the ownership of the records at or below `root_host` from the owner IDs in `from` to
/// `to`: each earlier owner's ownership TXT record goes, and `to`'s takes its place (same set
/// identifier, routing properties and TTL) unless `to` vouches for the record already. An
/// ownership record that vouches for no record is only removed, so nothing is left orphaned.
///
/// An owner ID changes when what it is derived from changes: a hub that published under each
/// DNSRecord's UID before its owner ID became configuration, or an admin who changed the hub's
/// owner ID. The caller names the earlier IDs it knows to be the same record's; records of any
/// other owner are never touched.
pub fn adoption(zone: &[Endpoint], from: &[&str], to: &str, root_host: &str) -> Adoption {
    let base = root_host.trim_start_matches("*.");
    let registry = Registry::read(zone);
    let to_code = shortcode(to, 8);
    let mut changes = Changes::default();
    for (key, owners) in &registry.ownership {
        if !is_at_or_below(&key.dns_name, base) {
            continue;
        }
        let earlier: Vec<&Endpoint> = from
            .iter()
            .filter(|owner| **owner != to)
            .filter_map(|owner| owners.get(*owner))
            .collect();
        let Some(first) = earlier.first() else {
            continue;
        };
        changes
            .deletes
            .extend(earlier.iter().map(|txt| (*txt).clone()));
        // The record it vouches for: the key itself, or a wildcard an earlier owner spelt
        // dns-operator's way (`wildcard.x` for `*.x`), which the new claim spells as Meridian
        // does. An ownership record of no record is only removed.
        let vouched = Some(key.clone())
            .filter(|key| registry.records.contains_key(key))
            .or_else(|| kuadrant_wildcard(key).filter(|w| registry.records.contains_key(w)));
        let Some(vouched) = vouched else {
            continue;
        };
        let owned_already = registry
            .ownership
            .get(&vouched)
            .is_some_and(|owners| owners.contains_key(to));
        let created_already = changes
            .creates
            .iter()
            .any(|txt| record_vouched_for(txt).as_ref() == Some(&vouched));
        if !owned_already && !created_already {
            changes.creates.push(Endpoint {
                dns_name: txt_name_with_code(&to_code, vouched.record_type, &vouched.dns_name),
                targets: vec![ownership_txt_value(to)],
                ..(*first).clone()
            });
        }
    }
    let gone: BTreeSet<RecordKey> = changes.deletes.iter().map(Endpoint::key).collect();
    let zone = zone
        .iter()
        .filter(|record| !gone.contains(&record.key()))
        .chain(&changes.creates)
        .cloned()
        .collect();
    Adoption { changes, zone }
}

/// The zone split into records and who owns each.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    pub records: ZoneRecords,
    /// Ownership TXT records, by the key of the record they vouch for, then owner.
    pub ownership: BTreeMap<RecordKey, BTreeMap<String, Endpoint>>,
    /// dns-operator's `wildcard.` spelling of a wildcard's ownership, by the wildcard record's
    /// key, then owner. Apart from `ownership` because a host may really be named
    /// `wildcard.…`: these count only as other owners, never as the planning owner's own.
    pub wildcard_ownership: BTreeMap<RecordKey, BTreeMap<String, Endpoint>>,
    /// Other tools' registry records (external-dns). They are also in `records`, where nothing
    /// ever changes them.
    pub foreign: Vec<ForeignClaim>,
}

impl Registry {
    pub fn read(zone: &[Endpoint]) -> Self {
        let mut registry = Registry::default();
        let mut codes = BTreeMap::new();
        for record in zone {
            match parse_ownership(record, &mut codes) {
                Some((key, owner)) => {
                    if let Some(wildcard) = kuadrant_wildcard(&key) {
                        registry
                            .wildcard_ownership
                            .entry(wildcard)
                            .or_default()
                            .insert(owner.clone(), record.clone());
                    }
                    registry
                        .ownership
                        .entry(key)
                        .or_default()
                        .insert(owner, record.clone());
                }
                None => {
                    if let Some(labels) = registry_labels(record)
                        && let Some(owner) = labels.get("owner")
                    {
                        registry.foreign.push(ForeignClaim {
                            txt_name: record.dns_name.clone(),
                            owner: owner.to_string(),
                            resource: labels.get("resource").map(|r| r.to_string()),
                        });
                    }
                    registry.records.insert(record.key(), record.clone());
                }
            }
        }
        registry
    }

    pub fn owners(&self, key: &RecordKey) -> BTreeSet<&str> {
        self.ownership
            .get(key)
            .map(|owners| owners.keys().map(String::as_str).collect())
            .unwrap_or_default()
    }

    /// Another tool's claim on a record nobody vouches for in Meridian's registry.
    pub fn foreign_claim(&self, key: &RecordKey) -> Option<&ForeignClaim> {
        self.foreign
            .iter()
            .find(|claim| claim.may_claim(&key.dns_name))
    }
}

/// What the plan needs to know.
#[derive(Debug, Clone)]
pub struct PlanInput<'a> {
    /// Who is planning; its ownership TXT records are written with this ID.
    pub owner: &'a str,
    /// The host whose records these are; CNAMEs inside it must point at records.
    pub root_host: &'a str,
    /// The owner's desired records (all at or below the root host's base).
    pub desired: &'a [Endpoint],
    /// What this owner published before (its contribution to shared records). `None` when
    /// unknown: then only records it owns alone count as wholly its own.
    pub previous: Option<&'a [Endpoint]>,
}

/// A record left out of the batch, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Problem {
    /// The record exists and no owner vouches for it: it is never changed.
    Unowned(RecordKey),
    /// The record exists and another tool's registry (external-dns) claims it: it is never
    /// changed.
    OwnedElsewhere {
        key: RecordKey,
        owner: String,
        /// The claiming TXT record's name.
        txt_name: String,
    },
    /// Another owner's records of another type hold the name.
    TypeConflict {
        key: RecordKey,
        existing: RecordType,
    },
    /// Owners disagree on a value; the published value stays.
    ValueConflict {
        key: RecordKey,
        field: &'static str,
        published: String,
        desired: String,
    },
    /// The CNAME would point at a name with no record.
    DanglingCname { key: RecordKey, target: String },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Unowned(key) => write!(
                f,
                "{key} exists and is not owned by Meridian; left unchanged"
            ),
            Problem::OwnedElsewhere {
                key,
                owner,
                txt_name,
            } => write!(
                f,
                "{key} is owned by external-dns owner {owner} (TXT {txt_name}); left unchanged"
            ),
            Problem::TypeConflict { key, existing } => {
                write!(
                    f,
                    "{key} cannot be published: another owner holds {} records at {}",
                    existing, key.dns_name
                )
            }
            Problem::ValueConflict {
                key,
                field,
                published,
                desired,
            } => {
                write!(
                    f,
                    "{key}: owners disagree on {field} (published {published}, this owner wants {desired}); keeping the published value"
                )
            }
            Problem::DanglingCname { key, target } => write!(
                f,
                "{key} would point at {target}, which has no record; not published"
            ),
        }
    }
}

/// A change batch and the records left out of it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub changes: Changes,
    pub problems: Vec<Problem>,
}

/// The records of `zone` a plan for `root_host` reads: those at or below its base, and the
/// ownership TXT records vouching for them. Planning against these is planning against the
/// whole zone (records elsewhere are neither read nor written), so a caller holding a large
/// zone in memory plans one host without copying the rest.
pub fn host_records<'a>(
    zone: impl IntoIterator<Item = &'a Endpoint>,
    root_host: &str,
) -> Vec<Endpoint> {
    let base = root_host
        .strip_prefix("*.")
        .unwrap_or(root_host)
        .to_ascii_lowercase();
    zone.into_iter()
        .filter(|record| {
            if is_at_or_below(&record.dns_name, &base) {
                return true;
            }
            // A TXT record elsewhere: an ownership record of a record under the base, or
            // another tool's registry record that may claim the base itself.
            match vouched_name(record) {
                Some((_, dns_name)) => is_at_or_below(dns_name, &base),
                None => may_claim(&record.dns_name, &base) && registry_labels(record).is_some(),
            }
        })
        .cloned()
        .collect()
}

/// Plans `input.owner`'s records against `zone`.
pub fn plan(input: &PlanInput<'_>, zone: &[Endpoint]) -> Plan {
    let registry = Registry::read(zone);
    let owner = input.owner;
    let desired = merge_by_key(input.desired);
    let previous = input.previous.map(merge_by_key);
    let owned_before: BTreeSet<&RecordKey> = registry
        .ownership
        .iter()
        .filter(|(_, owners)| owners.contains_key(owner))
        .map(|(key, _)| key)
        .collect();

    let mut problems = Vec::new();
    // The records this owner will publish (or leave) after the plan, by key: None = remove.
    let mut next: BTreeMap<RecordKey, Option<Endpoint>> = BTreeMap::new();
    // Keys whose ownership TXT this owner should hold afterwards.
    let mut own_after: BTreeSet<RecordKey> = BTreeSet::new();

    // Removals first: the records this owner owned and no longer wants.
    for key in owned_before
        .iter()
        .filter(|key| !desired.contains_key(**key))
    {
        let others = others(&registry, key, owner);
        let Some(current) = registry.records.get(*key) else {
            continue;
        };
        if others.is_empty() {
            next.insert((*key).clone(), None);
        } else if current.record_type.is_multi_value() {
            let mine = contribution(previous.as_ref(), key, current, &desired);
            let remaining: Vec<String> = current
                .targets
                .iter()
                .filter(|t| !mine.contains(*t))
                .cloned()
                .collect();
            if !remaining.is_empty() && remaining != current.targets {
                next.insert(
                    (*key).clone(),
                    Some(Endpoint {
                        targets: remaining,
                        ..current.clone()
                    }),
                );
            }
        }
    }

    for (key, want) in &desired {
        let others = others(&registry, key, owner);
        let current = registry.records.get(key);
        match current {
            None => {
                if let Some(existing) = blocking_type(&registry, key, &next) {
                    problems.push(Problem::TypeConflict {
                        key: key.clone(),
                        existing,
                    });
                    continue;
                }
                next.insert(key.clone(), Some(want.clone()));
                own_after.insert(key.clone());
            }
            // Nobody vouches for it: a hand-made record, or another tool's. Unless it is
            // exactly what this owner published and only its ownership record went missing
            // (deleted out of band): then it is vouched for again.
            Some(current)
                if others.is_empty()
                    && !owned_before.contains(key)
                    && !lost_only_its_ownership_record(&registry, previous.as_ref(), current) =>
            {
                problems.push(match registry.foreign_claim(key) {
                    Some(claim) => Problem::OwnedElsewhere {
                        key: key.clone(),
                        owner: claim.owner.clone(),
                        txt_name: claim.txt_name.clone(),
                    },
                    None => Problem::Unowned(key.clone()),
                })
            }
            Some(current) if others.is_empty() => {
                if current != want {
                    next.insert(key.clone(), Some(want.clone()));
                }
                own_after.insert(key.clone());
            }
            Some(current) => {
                let merged = merge_shared(
                    key,
                    current,
                    want,
                    previous.as_ref(),
                    &desired,
                    &mut problems,
                );
                if let Some(merged) = merged {
                    if &merged != current {
                        next.insert(key.clone(), Some(merged));
                    }
                    own_after.insert(key.clone());
                }
            }
        }
    }

    // Drop changes that would leave a CNAME inside the root host pointing at nothing, until
    // what remains is consistent.
    let base = input
        .root_host
        .strip_prefix("*.")
        .unwrap_or(input.root_host)
        .to_ascii_lowercase();
    loop {
        let result: BTreeSet<&str> = records_after(&registry, &next)
            .map(|r| r.dns_name.as_str())
            .collect();
        let dangling: Vec<(RecordKey, String)> = next
            .iter()
            .filter_map(|(key, record)| {
                let record = record.as_ref()?;
                let target = record.targets.first()?;
                (record.record_type == RecordType::Cname
                    && is_at_or_below(target, &base)
                    && !result.contains(target.as_str()))
                .then(|| (key.clone(), target.clone()))
            })
            .collect();
        // A removal that strands someone's CNAME is undone as well.
        let stranding: Vec<RecordKey> = next
            .iter()
            .filter(|(key, record)| record.is_none() && !result.contains(key.dns_name.as_str()))
            .filter(|(key, _)| {
                records_after(&registry, &next).any(|r| {
                    r.record_type == RecordType::Cname && r.targets.first() == Some(&key.dns_name)
                })
            })
            .map(|(key, _)| key.clone())
            .collect();
        if dangling.is_empty() && stranding.is_empty() {
            break;
        }
        for (key, target) in dangling {
            next.remove(&key);
            own_after.remove(&key);
            problems.push(Problem::DanglingCname { key, target });
        }
        for key in stranding {
            next.remove(&key);
            own_after.insert(key);
        }
    }

    Plan {
        changes: to_changes(&registry, owner, &next, &own_after),
        problems,
    }
}

/// Whether `current` is exactly what this owner published before and no other tool claims it.
fn lost_only_its_ownership_record(
    registry: &Registry,
    previous: Option<&BTreeMap<RecordKey, Endpoint>>,
    current: &Endpoint,
) -> bool {
    let mut current = current.clone();
    current.normalize();
    previous.and_then(|p| p.get(&current.key())) == Some(&current)
        && registry.foreign_claim(&current.key()).is_none()
}

fn others<'r>(registry: &'r Registry, key: &RecordKey, owner: &str) -> BTreeSet<&'r str> {
    let mut owners = registry.owners(key);
    owners.remove(owner);
    if let Some(wildcard) = registry.wildcard_ownership.get(key) {
        owners.extend(
            wildcard
                .keys()
                .map(String::as_str)
                .filter(|other| *other != owner),
        );
    }
    owners
}

fn merge_by_key(endpoints: &[Endpoint]) -> BTreeMap<RecordKey, Endpoint> {
    let mut merged: BTreeMap<RecordKey, Endpoint> = BTreeMap::new();
    for endpoint in endpoints {
        let mut endpoint = endpoint.clone();
        endpoint.normalize();
        merged
            .entry(endpoint.key())
            .and_modify(|existing| {
                existing.targets.extend(endpoint.targets.iter().cloned());
                existing.normalize();
            })
            .or_insert(endpoint);
    }
    merged
}

/// This owner's targets within a shared record: what it published before if known, else the
/// targets it wants now (it cannot prove any others are its own).
fn contribution(
    previous: Option<&BTreeMap<RecordKey, Endpoint>>,
    key: &RecordKey,
    current: &Endpoint,
    desired: &BTreeMap<RecordKey, Endpoint>,
) -> BTreeSet<String> {
    let known = previous
        .and_then(|p| p.get(key))
        .or_else(|| desired.get(key));
    known
        .map(|e| {
            e.targets
                .iter()
                .filter(|t| current.targets.contains(t))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

/// A shared record after this owner's contribution: targets unioned for multi-value records;
/// single values, TTLs and routing properties must agree with what is published.
fn merge_shared(
    key: &RecordKey,
    current: &Endpoint,
    want: &Endpoint,
    previous: Option<&BTreeMap<RecordKey, Endpoint>>,
    desired: &BTreeMap<RecordKey, Endpoint>,
    problems: &mut Vec<Problem>,
) -> Option<Endpoint> {
    let conflict =
        |field: &'static str, published: String, desired: String| Problem::ValueConflict {
            key: key.clone(),
            field,
            published,
            desired,
        };
    if current.record_ttl != want.record_ttl {
        problems.push(conflict(
            "TTL",
            current.record_ttl.to_string(),
            want.record_ttl.to_string(),
        ));
    }
    if current.provider_specific != want.provider_specific {
        let show = |e: &Endpoint| {
            e.provider_specific
                .iter()
                .map(|p| format!("{}={}", p.name, p.value))
                .collect::<Vec<_>>()
                .join(",")
        };
        problems.push(conflict("routing properties", show(current), show(want)));
    }
    if !current.record_type.is_multi_value() {
        if current.targets != want.targets {
            problems.push(conflict(
                "target",
                current.targets.join(","),
                want.targets.join(","),
            ));
            return None;
        }
        return Some(current.clone());
    }
    // Union: drop what this owner contributed before and no longer wants, add what it wants.
    let stale: BTreeSet<String> = contribution(previous, key, current, desired)
        .into_iter()
        .filter(|t| !want.targets.contains(t))
        .collect();
    let mut merged = current.clone();
    merged.targets.retain(|t| !stale.contains(t));
    merged.targets.extend(want.targets.iter().cloned());
    merged.normalize();
    Some(merged)
}

/// A record of another type at `key`'s name that stops this owner from creating `key`: any
/// other record beside a CNAME, or a CNAME beside anything, unless this plan removes it (a type
/// change of records the owner held alone).
fn blocking_type(
    registry: &Registry,
    key: &RecordKey,
    next: &BTreeMap<RecordKey, Option<Endpoint>>,
) -> Option<RecordType> {
    registry
        .records
        .values()
        .filter(|r| r.dns_name == key.dns_name && r.record_type != key.record_type)
        .filter(|r| r.record_type == RecordType::Cname || key.record_type == RecordType::Cname)
        .find(|r| !matches!(next.get(&r.key()), Some(None)))
        .map(|r| r.record_type)
}

/// Every record in the zone after the plan (ownership records aside).
fn records_after<'a>(
    registry: &'a Registry,
    next: &'a BTreeMap<RecordKey, Option<Endpoint>>,
) -> impl Iterator<Item = &'a Endpoint> {
    registry
        .records
        .iter()
        .filter(|(key, _)| !next.contains_key(*key))
        .map(|(_, record)| record)
        .chain(next.values().flatten())
}

fn to_changes(
    registry: &Registry,
    owner: &str,
    next: &BTreeMap<RecordKey, Option<Endpoint>>,
    own_after: &BTreeSet<RecordKey>,
) -> Changes {
    let mut changes = Changes::default();
    for (key, record) in next {
        match (registry.records.get(key), record) {
            (Some(old), None) => changes.deletes.push(old.clone()),
            (Some(old), Some(new)) => changes.updates.push(Update {
                old: old.clone(),
                new: new.clone(),
            }),
            (None, Some(new)) => changes.creates.push(new.clone()),
            (None, None) => {}
        }
    }
    // Ownership records follow the records: one per owned record, matching its properties.
    let record_after = |key: &RecordKey| -> Option<&Endpoint> {
        match next.get(key) {
            Some(record) => record.as_ref(),
            None => registry.records.get(key),
        }
    };
    let owner_code = shortcode(owner, 8);
    let mut keys: BTreeSet<&RecordKey> = own_after.iter().collect();
    keys.extend(
        registry
            .ownership
            .iter()
            .filter(|(_, o)| o.contains_key(owner))
            .map(|(k, _)| k),
    );
    for key in keys {
        let existing = registry
            .ownership
            .get(key)
            .and_then(|owners| owners.get(owner));
        let wanted = own_after
            .contains(key)
            .then(|| record_after(key))
            .flatten()
            .map(|r| ownership_record_with_code(&owner_code, owner, r));
        match (existing, wanted) {
            (Some(old), Some(new)) if old != &new => changes.updates.push(Update {
                old: old.clone(),
                new,
            }),
            (Some(_), Some(_)) => {}
            (Some(old), None) => changes.deletes.push(old.clone()),
            (None, Some(new)) => changes.creates.push(new),
            (None, None) => {}
        }
    }
    changes
}
