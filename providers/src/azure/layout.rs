//! The pure middle of the Azure provider: how the engine's records are laid out as Azure DNS
//! record sets and Traffic Manager profiles, how they read back, and which calls turn one
//! layout into another. No I/O here.
//!
//! - A plain record (no set identifier) is one record set.
//! - Every routed name (CNAME records with set identifiers) is a Traffic Manager profile and
//!   an alias record set at the name pointing at it: `Weighted` when the records carry
//!   weights, `Geographic` when they carry geo codes.
//!   - Weighted: one external endpoint per record (the target, its weight).
//!   - Geographic: one endpoint per target, mapped to every code that answers it; `*` is
//!     `WORLD`. When the target is itself a weighted name, the endpoint is nested: it points
//!     at that name's profile, so Traffic Manager answers with the cluster directly
//!     (GEO-then-weighted in one lookup).
//!   - Endpoints always serve (`alwaysServe`): Meridian's own probes decide health and take
//!     an unhealthy cluster out of the records, so Traffic Manager must not second-guess it.
//! - Ownership TXT records stay plain TXT sets (`routed_txt`).
//!
//! Reading back inverts this exactly: a weighted record's set identifier is its target, and a
//! GEO record's is its code (`default` for `*`). [`refusals`] names records that would not
//! read back as they were given, before any call.

use std::collections::{BTreeMap, BTreeSet};

use meridian_dns::model::{Endpoint, GEO_CODE, RecordType, WEIGHT, is_at_or_below};
use sha2::{Digest, Sha256};

use super::arm::{
    ArmScope, DnsConfig, EXTERNAL_ENDPOINT, EndpointProperties, NESTED_ENDPOINT, PROFILE_TYPE,
    Precondition, Profile, ProfileProperties, RecordSet, RecordSetProperties, SubResource,
    TrafficEndpoint,
};
use crate::routed_txt::{marked_value, restore_routing_properties, unmarked_records};

pub const WEIGHTED: &str = "Weighted";
pub const GEOGRAPHIC: &str = "Geographic";
/// Traffic Manager's catch-all geographic code.
pub const WORLD: &str = "WORLD";
const CATCH_ALL_CODE: &str = "*";
const CATCH_ALL_SET: &str = "default";
/// Traffic Manager weights.
pub const MIN_WEIGHT: u32 = 1;
pub const MAX_WEIGHT: u32 = 1000;
/// The tag naming the DNS name a profile serves (for people reading the portal).
pub const DNS_NAME_TAG: &str = "meridian-dns-name";

/// The record types the provider reads and writes; others are left alone.
const TYPES: [RecordType; 5] = [
    RecordType::A,
    RecordType::Aaaa,
    RecordType::Cname,
    RecordType::Txt,
    RecordType::Ns,
];

/// One zone as last read or written: its record sets by (relative name, type), and the
/// resource group's Traffic Manager profiles by lower-cased name.
#[derive(Debug, Clone, Default)]
pub struct ZoneState {
    pub record_sets: BTreeMap<(String, RecordType), RecordSet>,
    profiles: BTreeMap<String, Profile>,
    /// Profiles by the DNS name their tag says they serve.
    by_dns_name: BTreeMap<String, String>,
}

impl ZoneState {
    pub fn new(record_sets: Vec<RecordSet>, profiles: Vec<Profile>) -> Self {
        let mut state = ZoneState::default();
        for set in record_sets {
            state.store_record_set(set);
        }
        for profile in profiles {
            state.store_profile(profile);
        }
        state
    }

    pub fn store_record_set(&mut self, set: RecordSet) {
        if let Some(record_type) = RecordType::parse(set.record_type()) {
            self.record_sets
                .insert((set.name.to_ascii_lowercase(), record_type), set);
        }
    }

    pub fn store_profile(&mut self, profile: Profile) {
        let key = profile.name.to_ascii_lowercase();
        self.remove_profile(&key);
        if let Some(dns_name) = profile.tags.get(DNS_NAME_TAG) {
            self.by_dns_name
                .insert(dns_name.to_ascii_lowercase(), key.clone());
        }
        self.profiles.insert(key, profile);
    }

    pub fn remove_profile(&mut self, name: &str) {
        if let Some(profile) = self.profiles.remove(&name.to_ascii_lowercase())
            && let Some(dns_name) = profile.tags.get(DNS_NAME_TAG)
        {
            self.by_dns_name.remove(&dns_name.to_ascii_lowercase());
        }
    }

    pub fn profiles(&self) -> impl Iterator<Item = &Profile> {
        self.profiles.values()
    }

    /// The profile an alias record set points at, by resource ID.
    fn profile_by_id(&self, id: &str) -> Option<&Profile> {
        let name = id.rsplit('/').next()?;
        let profile = self.profiles.get(&name.to_ascii_lowercase())?;
        (id.to_ascii_lowercase()
            .contains(&PROFILE_TYPE.to_ascii_lowercase()))
        .then_some(profile)
    }

    /// The profile an alias CNAME record set at `relative` points at.
    fn aliased_at(&self, relative: &str) -> Option<&Profile> {
        let set = self
            .record_sets
            .get(&(relative.to_string(), RecordType::Cname))?;
        self.profile_by_id(set.properties.target_resource.as_ref()?.id.as_deref()?)
    }

    /// The profile serving routed name `relative`: through its alias record set, or, for a
    /// weighted name only ever reached as a nested endpoint, by its tag.
    fn profile_at(&self, zone: &str, relative: &str) -> Option<&Profile> {
        if self
            .record_sets
            .contains_key(&(relative.to_string(), RecordType::Cname))
        {
            return self.aliased_at(relative);
        }
        let key = self.by_dns_name.get(&absolute_name(zone, relative))?;
        self.profiles.get(key)
    }
}

/// `name` relative to `zone` (`@` at the apex), as Azure DNS names record sets.
pub fn relative_name(zone: &str, name: &str) -> String {
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    if name == zone {
        return "@".into();
    }
    name.strip_suffix(&format!(".{zone}"))
        .map_or_else(|| name.clone(), str::to_string)
}

fn absolute_name(zone: &str, relative: &str) -> String {
    if relative == "@" {
        zone.to_string()
    } else {
        format!("{relative}.{zone}")
    }
}

/// The engine's records in a zone as Azure holds it.
pub fn read_back(zone: &str, state: &ZoneState) -> Vec<Endpoint> {
    // Which name serves each profile, so a nested endpoint reads back as the name it nests.
    let served_by: BTreeMap<String, String> = state
        .record_sets
        .iter()
        .filter_map(|((relative, _), set)| {
            let id = set.properties.target_resource.as_ref()?.id.as_deref()?;
            let profile = state.profile_by_id(id)?;
            Some((
                profile.name.to_ascii_lowercase(),
                absolute_name(zone, relative),
            ))
        })
        .collect();
    // Weighted names reached only through nested endpoints have no record set: their
    // profile's tag names them.
    let nested_only: Vec<(String, &Profile)> = state
        .by_dns_name
        .iter()
        .filter(|(dns_name, _)| is_at_or_below(dns_name, zone))
        .filter(|(dns_name, _)| {
            !state
                .record_sets
                .contains_key(&(relative_name(zone, dns_name), RecordType::Cname))
        })
        .filter_map(|(dns_name, key)| Some((dns_name.clone(), state.profiles.get(key)?)))
        .filter(|(_, profile)| !served_by.contains_key(&profile.name.to_ascii_lowercase()))
        .collect();
    let served_by: BTreeMap<String, String> = served_by
        .into_iter()
        .chain(
            nested_only
                .iter()
                .map(|(dns_name, p)| (p.name.to_ascii_lowercase(), dns_name.clone())),
        )
        .collect();
    let mut records = Vec::new();
    for (dns_name, profile) in &nested_only {
        records.extend(profile_records(dns_name, profile, state, &served_by));
    }
    for ((relative, record_type), set) in &state.record_sets {
        let name = absolute_name(zone, relative);
        let ttl = set.properties.ttl;
        if let Some(target) = &set.properties.target_resource {
            let id = target.id.clone().unwrap_or_default();
            match state.profile_by_id(&id) {
                Some(profile) => records.extend(profile_records(&name, profile, state, &served_by)),
                // An alias of something else: shown, so nobody takes the name for free.
                None => records.push(Endpoint::new(name, *record_type, [id], ttl)),
            }
            continue;
        }
        let Some(values) = set.properties.values(*record_type) else {
            continue;
        };
        if *record_type == RecordType::Txt {
            records.extend(unmarked_records(&name, ttl, values));
        } else if !values.is_empty() {
            records.push(Endpoint::new(name, *record_type, values, ttl));
        }
    }
    restore_routing_properties(&mut records);
    records
}

/// The records a Weighted or Geographic profile answers for `name`.
fn profile_records(
    name: &str,
    profile: &Profile,
    state: &ZoneState,
    served_by: &BTreeMap<String, String>,
) -> Vec<Endpoint> {
    let ttl = profile.properties.dns_config.ttl;
    let mut records = Vec::new();
    for endpoint in &profile.properties.endpoints {
        let target = match endpoint_target(endpoint, state, served_by) {
            Some(target) => target,
            None => continue,
        };
        let record = Endpoint::new(name, RecordType::Cname, [target.clone()], ttl);
        match profile.properties.traffic_routing_method.as_str() {
            WEIGHTED => records.push(
                record
                    .with_set_identifier(target)
                    .with_property(WEIGHT, endpoint.properties.weight.unwrap_or(1).to_string()),
            ),
            GEOGRAPHIC => {
                for code in endpoint.properties.geo_mapping.iter().flatten() {
                    let code = engine_geo_code(code);
                    let set = if code == CATCH_ALL_CODE {
                        CATCH_ALL_SET
                    } else {
                        &code
                    };
                    records.push(
                        record
                            .clone()
                            .with_set_identifier(set)
                            .with_property(GEO_CODE, code.clone()),
                    );
                }
            }
            // Another routing method: the profile's own name stands for it.
            _ => {
                let fqdn = format!(
                    "{}.trafficmanager.net",
                    profile.properties.dns_config.relative_name
                );
                return vec![Endpoint::new(name, RecordType::Cname, [fqdn], ttl)];
            }
        }
    }
    records
}

fn endpoint_target(
    endpoint: &TrafficEndpoint,
    state: &ZoneState,
    served_by: &BTreeMap<String, String>,
) -> Option<String> {
    if let Some(target) = &endpoint.properties.target
        && endpoint
            .endpoint_type
            .eq_ignore_ascii_case(EXTERNAL_ENDPOINT)
    {
        return Some(target.trim_end_matches('.').to_ascii_lowercase());
    }
    let id = endpoint.properties.target_resource_id.as_deref()?;
    let child = state.profile_by_id(id)?;
    served_by
        .get(&child.name.to_ascii_lowercase())
        .cloned()
        .or_else(|| {
            Some(format!(
                "{}.trafficmanager.net",
                child.properties.dns_config.relative_name
            ))
        })
}

/// Engine geo codes ↔ Traffic Manager's: the same ISO country codes and `GEO-` continents,
/// except Oceania, which Traffic Manager calls Australia / Pacific; `*` is `WORLD`.
fn azure_geo_code(code: &str) -> String {
    match code {
        CATCH_ALL_CODE => WORLD.into(),
        "GEO-OC" => "GEO-AP".into(),
        code => code.to_string(),
    }
}

fn engine_geo_code(code: &str) -> String {
    match code {
        WORLD => CATCH_ALL_CODE.into(),
        "GEO-AP" => "GEO-OC".into(),
        code => code.to_string(),
    }
}

/// Why records cannot be published to Azure as given, one message per record; nothing is
/// sent for a name with a refused record.
pub fn refusals<'a>(records: impl IntoIterator<Item = &'a Endpoint>) -> BTreeMap<String, String> {
    let mut refused = BTreeMap::new();
    for record in records {
        let name = &record.dns_name;
        let Some(set_identifier) = &record.set_identifier else {
            continue;
        };
        if record.record_type == RecordType::Txt {
            continue;
        }
        let problem = if record.record_type != RecordType::Cname {
            Some(format!(
                "{name}: Traffic Manager routes CNAME answers only; a routed {} record cannot be \
                 published",
                record.record_type
            ))
        } else if record.targets.len() != 1 {
            Some(format!("{name}: a routed record needs exactly one target"))
        } else {
            match (record.property(WEIGHT), record.property(GEO_CODE)) {
                (Some(weight), None) => match weight.parse::<u32>() {
                    Ok(w) if (MIN_WEIGHT..=MAX_WEIGHT).contains(&w) => {
                        (*set_identifier != record.targets[0]).then(|| {
                            format!(
                                "{name}: a weighted record's set identifier must be its target \
                                 (Traffic Manager endpoints read back by target); got \
                                 {set_identifier:?}"
                            )
                        })
                    }
                    _ => Some(format!(
                        "{name}: Traffic Manager weights are {MIN_WEIGHT} to {MAX_WEIGHT}; got \
                         {weight:?}"
                    )),
                },
                (None, Some(code)) => {
                    let expected = if code == CATCH_ALL_CODE {
                        CATCH_ALL_SET
                    } else {
                        code
                    };
                    (set_identifier != expected).then(|| {
                        format!(
                            "{name}: a GEO record's set identifier must be {expected:?} \
                             (Traffic Manager stores codes, not identifiers); got \
                             {set_identifier:?}"
                        )
                    })
                }
                _ => Some(format!(
                    "{name}: a set identifier needs exactly one of a weight and a geo code"
                )),
            }
        };
        if let Some(problem) = problem {
            refused.entry(name.clone()).or_insert(problem);
        }
    }
    refused
}

/// One call that moves Azure towards a layout.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    PutProfile {
        name: String,
        profile: Profile,
    },
    PutRecordSet {
        relative: String,
        record_type: RecordType,
        set: RecordSet,
        precondition: Precondition,
    },
    DeleteRecordSet {
        relative: String,
        record_type: RecordType,
        precondition: Precondition,
    },
    DeleteProfile {
        name: String,
    },
}

impl Call {
    pub fn is_deletion(&self) -> bool {
        matches!(
            self,
            Call::DeleteRecordSet { .. } | Call::DeleteProfile { .. }
        )
    }

    /// The DNS name (relative) or profile the call is about, for messages.
    pub fn subject(&self) -> String {
        match self {
            Call::PutProfile { name, .. } | Call::DeleteProfile { name } => {
                format!("profile {name}")
            }
            Call::PutRecordSet {
                relative,
                record_type,
                ..
            }
            | Call::DeleteRecordSet {
                relative,
                record_type,
                ..
            } => format!("{relative} {record_type}"),
        }
    }
}

/// The calls, in phases that may each run concurrently but in this order: child (weighted)
/// profiles before the profiles nesting them, record sets a CNAME must replace removed before
/// it is written, and nothing deleted until what replaces it points elsewhere.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Calls {
    pub phases: Vec<Vec<Call>>,
}

impl Calls {
    pub fn len(&self) -> usize {
        self.phases.iter().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What Azure should hold at one name.
#[derive(Debug, Default)]
struct NameLayout {
    record_sets: BTreeMap<RecordType, RecordSet>,
    profile: Option<(String, Profile)>,
}

/// The calls that make `names` (absolute) hold `records` (every record of the zone after the
/// change), from `state`. Names in `skip` are left as they are.
pub fn calls(
    zone: &str,
    scope: &ArmScope,
    names: &BTreeSet<String>,
    records: &[Endpoint],
    state: &ZoneState,
) -> Calls {
    let mut by_name: BTreeMap<String, Vec<&Endpoint>> = BTreeMap::new();
    for record in records {
        by_name
            .entry(record.dns_name.to_ascii_lowercase())
            .or_default()
            .push(record);
    }
    let weighted_names: BTreeSet<String> = records
        .iter()
        .filter(|r| {
            r.set_identifier.is_some()
                && r.record_type == RecordType::Cname
                && r.property(WEIGHT).is_some()
        })
        .map(|r| r.dns_name.to_ascii_lowercase())
        .collect();
    // Weighted names a GEO profile nests are reached through it alone: they need no alias
    // record set (the engine's trees nest every weighted name).
    let nested_names: BTreeSet<String> = records
        .iter()
        .filter(|r| r.set_identifier.is_some() && r.property(GEO_CODE).is_some())
        .flat_map(|r| r.targets.iter().map(|t| t.to_ascii_lowercase()))
        .filter(|target| weighted_names.contains(target))
        .collect();
    let routing = Routing {
        weighted: &weighted_names,
        nested: &nested_names,
    };
    let profile_name_of = |absolute: &str| -> String {
        let relative = relative_name(zone, absolute);
        state
            .profile_at(zone, &relative)
            .map_or_else(|| new_profile_name(zone, absolute), |p| p.name.clone())
    };

    let mut put_children = Vec::new();
    let mut put_parents = Vec::new();
    let mut clear_for_cname = Vec::new();
    let mut put_sets = Vec::new();
    let mut delete_sets = Vec::new();
    let mut delete_parents = Vec::new();
    let mut delete_children = Vec::new();

    for name in names {
        let relative = relative_name(zone, name);
        let at_name = by_name.get(name).map(Vec::as_slice).unwrap_or_default();
        let current_profile = state.profile_at(zone, &relative).cloned();
        let desired = lay_out(
            zone,
            scope,
            name,
            at_name,
            current_profile.as_ref(),
            &routing,
            &profile_name_of,
        );

        // Profiles.
        match (&desired.profile, &current_profile) {
            (Some((profile_name, profile)), current) => {
                if current.as_ref().map(comparable_profile) != Some(comparable_profile(profile)) {
                    let call = Call::PutProfile {
                        name: profile_name.clone(),
                        profile: profile.clone(),
                    };
                    if profile.properties.traffic_routing_method == WEIGHTED {
                        put_children.push(call);
                    } else {
                        put_parents.push(call);
                    }
                }
                if let Some(current) = current
                    && !current.name.eq_ignore_ascii_case(profile_name)
                {
                    delete_parents.push(Call::DeleteProfile {
                        name: current.name.clone(),
                    });
                }
            }
            (None, Some(current)) => {
                let call = Call::DeleteProfile {
                    name: current.name.clone(),
                };
                if current.properties.traffic_routing_method == WEIGHTED {
                    delete_children.push(call);
                } else {
                    delete_parents.push(call);
                }
            }
            (None, None) => {}
        }

        // Record sets.
        let wants_cname = desired.record_sets.contains_key(&RecordType::Cname);
        for record_type in TYPES {
            let current = state.record_sets.get(&(relative.clone(), record_type));
            match (desired.record_sets.get(&record_type), current) {
                (Some(set), current) => {
                    if current.map(|c| comparable_set(&c.properties))
                        == Some(comparable_set(&set.properties))
                    {
                        continue;
                    }
                    let precondition = current
                        .and_then(|c| c.etag.clone())
                        .map_or(Precondition::Absent, Precondition::Version);
                    put_sets.push(Call::PutRecordSet {
                        relative: relative.clone(),
                        record_type,
                        set: set.clone(),
                        precondition,
                    });
                }
                (None, Some(current)) => {
                    let precondition = current
                        .etag
                        .clone()
                        .map_or(Precondition::Any, Precondition::Version);
                    let call = Call::DeleteRecordSet {
                        relative: relative.clone(),
                        record_type,
                        precondition,
                    };
                    // A CNAME stands alone at its name, so whatever shares the name goes
                    // first (and a CNAME making way for other types goes first too).
                    let conflicts = (wants_cname && record_type != RecordType::Cname)
                        || (record_type == RecordType::Cname && !desired.record_sets.is_empty());
                    if conflicts {
                        clear_for_cname.push(call);
                    } else {
                        delete_sets.push(call);
                    }
                }
                (None, None) => {}
            }
        }
    }
    Calls {
        phases: [
            put_children,
            put_parents,
            clear_for_cname,
            put_sets,
            delete_sets,
            delete_parents,
            delete_children,
        ]
        .into_iter()
        .filter(|phase| !phase.is_empty())
        .collect(),
    }
}

/// A record set's properties as compared: resource IDs are case-insensitive and names may
/// come back with a final dot.
fn comparable_set(properties: &RecordSetProperties) -> RecordSetProperties {
    let mut properties = properties.clone();
    if let Some(target) = properties.target_resource.as_mut() {
        target.id = target.id.as_ref().map(|id| id.to_ascii_lowercase());
    }
    if let Some(cname) = properties.cname_record.as_mut() {
        cname.cname = cname.cname.trim_end_matches('.').to_ascii_lowercase();
    }
    for ns in properties.ns_records.iter_mut().flatten() {
        ns.nsdname = ns.nsdname.trim_end_matches('.').to_ascii_lowercase();
    }
    properties
}

/// A profile's fields that Meridian sets, for comparison (the service adds read-only ones).
fn comparable_profile(
    profile: &Profile,
) -> (String, u32, Vec<(String, String, EndpointProperties)>) {
    let mut endpoints: Vec<(String, String, EndpointProperties)> = profile
        .properties
        .endpoints
        .iter()
        .map(|e| {
            let mut properties = e.properties.clone();
            properties.extra.clear();
            properties.target_resource_id = properties
                .target_resource_id
                .map(|id| id.to_ascii_lowercase());
            if let Some(codes) = properties.geo_mapping.as_mut() {
                codes.sort();
            }
            (
                e.name.clone(),
                e.endpoint_type.to_ascii_lowercase(),
                properties,
            )
        })
        .collect();
    endpoints.sort_by(|a, b| a.0.cmp(&b.0));
    (
        profile.properties.traffic_routing_method.clone(),
        profile.properties.dns_config.ttl,
        endpoints,
    )
}

/// Which names of the zone (after the change) are weighted, and which of those a GEO profile
/// nests.
struct Routing<'a> {
    weighted: &'a BTreeSet<String>,
    nested: &'a BTreeSet<String>,
}

fn lay_out(
    zone: &str,
    scope: &ArmScope,
    name: &str,
    records: &[&Endpoint],
    current_profile: Option<&Profile>,
    routing: &Routing<'_>,
    profile_name_of: &dyn Fn(&str) -> String,
) -> NameLayout {
    let mut layout = NameLayout::default();
    let mut by_type: BTreeMap<RecordType, Vec<&Endpoint>> = BTreeMap::new();
    for record in records {
        by_type.entry(record.record_type).or_default().push(record);
    }
    for (record_type, records) in by_type {
        let ttl = records[0].record_ttl;
        let routed =
            record_type != RecordType::Txt && records.iter().any(|r| r.set_identifier.is_some());
        if routed {
            let profile_name = profile_name_of(name);
            let profile = routed_profile(
                zone,
                scope,
                name,
                &records,
                current_profile,
                routing.weighted,
                profile_name_of,
            );
            layout.profile = Some((profile_name.clone(), profile));
            if routing.nested.contains(name) {
                continue;
            }
            layout.record_sets.insert(
                record_type,
                RecordSet {
                    properties: RecordSetProperties {
                        ttl,
                        target_resource: Some(SubResource {
                            id: Some(scope.profile_id(&profile_name)),
                        }),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            );
            continue;
        }
        let values = records
            .iter()
            .flat_map(|r| r.targets.iter().map(move |t| marked_value(r, t)))
            .collect();
        let Some(properties) = RecordSetProperties::with_values(ttl, record_type, values) else {
            continue;
        };
        layout.record_sets.insert(
            record_type,
            RecordSet {
                properties,
                ..Default::default()
            },
        );
    }
    layout
}

fn routed_profile(
    zone: &str,
    scope: &ArmScope,
    name: &str,
    records: &[&Endpoint],
    current: Option<&Profile>,
    weighted_names: &BTreeSet<String>,
    profile_name_of: &dyn Fn(&str) -> String,
) -> Profile {
    let weighted = records.iter().all(|r| r.property(WEIGHT).is_some());
    let mut endpoints = Vec::new();
    if weighted {
        for record in records {
            let target = record.targets[0].to_ascii_lowercase();
            endpoints.push(TrafficEndpoint {
                name: endpoint_name(&target),
                endpoint_type: EXTERNAL_ENDPOINT.into(),
                properties: EndpointProperties {
                    target: Some(target),
                    endpoint_status: Some("Enabled".into()),
                    weight: record.property(WEIGHT).and_then(|w| w.parse().ok()),
                    always_serve: Some("Enabled".into()),
                    ..Default::default()
                },
            });
        }
    } else {
        let mut codes_by_target: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for record in records {
            let code = azure_geo_code(record.property(GEO_CODE).unwrap_or(CATCH_ALL_CODE));
            codes_by_target
                .entry(record.targets[0].to_ascii_lowercase())
                .or_default()
                .push(code);
        }
        for (target, mut codes) in codes_by_target {
            codes.sort();
            codes.dedup();
            let properties = if weighted_names.contains(&target) {
                EndpointProperties {
                    target_resource_id: Some(scope.profile_id(&profile_name_of(&target))),
                    endpoint_status: Some("Enabled".into()),
                    geo_mapping: Some(codes),
                    min_child_endpoints: Some(1),
                    ..Default::default()
                }
            } else {
                EndpointProperties {
                    target: Some(target.clone()),
                    endpoint_status: Some("Enabled".into()),
                    geo_mapping: Some(codes),
                    always_serve: Some("Enabled".into()),
                    ..Default::default()
                }
            };
            let endpoint_type = if properties.target_resource_id.is_some() {
                NESTED_ENDPOINT
            } else {
                EXTERNAL_ENDPOINT
            };
            endpoints.push(TrafficEndpoint {
                name: endpoint_name(&target),
                endpoint_type: endpoint_type.into(),
                properties,
            });
        }
    }
    endpoints.sort_by(|a, b| a.name.cmp(&b.name));
    let method = if weighted { WEIGHTED } else { GEOGRAPHIC };
    let ttl = records[0].record_ttl;
    let mut profile = current.cloned().unwrap_or_else(|| Profile {
        id: String::new(),
        name: String::new(),
        location: "global".into(),
        tags: BTreeMap::from([(DNS_NAME_TAG.to_string(), name.to_string())]),
        properties: ProfileProperties {
            profile_status: "Enabled".into(),
            traffic_routing_method: method.into(),
            dns_config: DnsConfig {
                relative_name: new_relative_name(scope, zone, name),
                ttl,
                fqdn: None,
            },
            // Probing is off in effect (every endpoint always serves); Traffic Manager still
            // requires a monitor, and a TCP connect to 443 is the least it can be.
            monitor_config: serde_json::json!({
                "protocol": "TCP",
                "port": 443,
                "intervalInSeconds": 30,
                "timeoutInSeconds": 10,
                "toleratedNumberOfFailures": 3
            }),
            endpoints: Vec::new(),
            extra: serde_json::Map::new(),
        },
    });
    profile.properties.traffic_routing_method = method.into();
    profile.properties.dns_config.ttl = ttl;
    profile.properties.endpoints = endpoints;
    profile
}

/// An endpoint's name: its target when that is a valid name, else a digest of it.
fn endpoint_name(target: &str) -> String {
    let valid = target.len() <= 63
        && target
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.');
    if valid {
        target.to_string()
    } else {
        format!("e-{}", digest(target, 20))
    }
}

/// The name of a new profile serving `name`: stable, so a retried create finds its own.
fn new_profile_name(zone: &str, name: &str) -> String {
    format!("meridian-{}", digest(&format!("{zone}/{name}"), 24))
}

/// A profile's `<relativeName>.trafficmanager.net` is global across Azure, so it is derived
/// from the subscription and resource group as well.
fn new_relative_name(scope: &ArmScope, zone: &str, name: &str) -> String {
    format!(
        "meridian-{}",
        digest(
            &format!(
                "{}/{}/{zone}/{name}",
                scope.subscription, scope.resource_group
            ),
            24
        )
    )
}

fn digest(text: &str, hex_chars: usize) -> String {
    let hash = Sha256::digest(text.as_bytes());
    hash.iter().map(|b| format!("{b:02x}")).collect::<String>()[..hex_chars].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::model::sort_endpoints;
    use meridian_dns::plan::{PlanInput, plan};
    use meridian_dns::tree::{
        Address, ClusterTarget, CustomWeight, GatewayRef, LabelSelector, LoadBalancing, Strategy,
        build_record_tree,
    };
    use proptest::prelude::*;

    const ZONE: &str = "example.com";

    fn scope() -> ArmScope {
        ArmScope {
            resource_manager: "https://management.azure.com/".parse().unwrap(),
            subscription: "sub".into(),
            resource_group: "rg".into(),
        }
    }

    /// What Azure would hold after `calls` succeed (the service's side, simulated).
    fn simulate(state: &mut ZoneState, calls: &Calls) {
        for call in calls.phases.iter().flatten() {
            match call.clone() {
                Call::PutProfile { name, mut profile } => {
                    profile.id = scope().profile_id(&name);
                    profile.name = name;
                    state.store_profile(profile);
                }
                Call::DeleteProfile { name } => {
                    state.remove_profile(&name);
                }
                Call::PutRecordSet {
                    relative,
                    record_type,
                    mut set,
                    ..
                } => {
                    set.name = relative;
                    set.resource_type = format!("Microsoft.Network/dnszones/{record_type}");
                    set.etag = Some(format!("{}", state.record_sets.len()));
                    state.store_record_set(set);
                }
                Call::DeleteRecordSet {
                    relative,
                    record_type,
                    ..
                } => {
                    state.record_sets.remove(&(relative, record_type));
                }
            }
        }
    }

    fn sorted(mut records: Vec<Endpoint>) -> Vec<Endpoint> {
        records.iter_mut().for_each(Endpoint::normalize);
        sort_endpoints(&mut records);
        records
    }

    /// Plans `desired` for `host` against the simulated zone, lays the result out, and
    /// checks the zone then reads back exactly as planned. Returns the number of calls.
    fn converge(
        state: &mut ZoneState,
        host: &str,
        desired: &[Endpoint],
        previous: Option<&[Endpoint]>,
    ) -> usize {
        let current = read_back(ZONE, state);
        let planned = plan(
            &PlanInput {
                owner: "hub",
                root_host: host,
                desired,
                previous,
            },
            &current,
        );
        assert!(planned.problems.is_empty(), "{:?}", planned.problems);
        let mut after: BTreeMap<_, _> = current.iter().map(|r| (r.key(), r.clone())).collect();
        let mut names = BTreeSet::new();
        for old in &planned.changes.deletes {
            after.remove(&old.key());
            names.insert(old.dns_name.clone());
        }
        for update in &planned.changes.updates {
            after.remove(&update.old.key());
            after.insert(update.new.key(), update.new.clone());
            names.insert(update.new.dns_name.clone());
        }
        for new in &planned.changes.creates {
            after.insert(new.key(), new.clone());
            names.insert(new.dns_name.clone());
        }
        let after: Vec<Endpoint> = after.into_values().collect();
        assert!(refusals(&after).is_empty(), "{:?}", refusals(&after));
        // Parents of touched names are laid out again, as the provider does.
        let parents: Vec<String> = after
            .iter()
            .filter(|r| r.set_identifier.is_some() && r.targets.iter().any(|t| names.contains(t)))
            .map(|r| r.dns_name.clone())
            .collect();
        names.extend(parents);
        let calls = calls(ZONE, &scope(), &names, &after, state);
        simulate(state, &calls);
        assert_eq!(sorted(read_back(ZONE, state)), sorted(after));
        calls.len()
    }

    fn clusters(spec: &[(&str, bool, bool)]) -> Vec<ClusterTarget> {
        spec.iter()
            .enumerate()
            .map(|(i, (geo, azure, hostname))| ClusterTarget {
                name: format!("c{i}"),
                cluster_id: format!("cluster-{i}"),
                labels: [
                    (
                        "kuadrant.io/lb-attribute-geo-code".to_string(),
                        geo.to_string(),
                    ),
                    (
                        "kuadrant.io/lb-attribute-cloud".to_string(),
                        if *azure { "Azure" } else { "AWS" }.to_string(),
                    ),
                ]
                .into(),
                addresses: vec![if *hostname {
                    Address::parse(Some("Hostname"), &format!("lb-{i}.elb.example.net")).unwrap()
                } else {
                    Address::parse(None, &format!("192.0.2.{}", i + 1)).unwrap()
                }],
                attached_routes: None,
                weight_percent: 100,
            })
            .collect()
    }

    fn strategy(kind: u8, weight: u32) -> Strategy {
        let azure = LabelSelector {
            match_labels: [("kuadrant.io/lb-attribute-cloud".into(), "Azure".into())].into(),
            ..Default::default()
        };
        let balanced = |default_geo: Option<&str>| {
            Strategy::LoadBalanced(LoadBalancing {
                default_weight: 120,
                custom: vec![CustomWeight {
                    selector: azure.clone(),
                    weight,
                }],
                default_geo: default_geo.map(str::to_string),
                tiers: None,
            })
        };
        match kind {
            0 => Strategy::Simple,
            1 => balanced(None),
            _ => balanced(Some("IE")),
        }
    }

    fn tree(host: &str, strategy: &Strategy, clusters: &[ClusterTarget]) -> Option<Vec<Endpoint>> {
        let gateway = GatewayRef {
            name: "prod-web".into(),
            namespace: "gateways".into(),
        };
        build_record_tree(host, &gateway, strategy, clusters)
            .ok()
            .map(|t| t.endpoints())
    }

    #[test]
    fn oceania_and_the_catch_all_use_traffic_managers_codes() {
        let mut state = ZoneState::default();
        let spec = clusters(&[("GEO-OC", false, false), ("IE", true, false)]);
        let desired = tree("api.example.com", &strategy(2, 30), &spec).unwrap();
        converge(&mut state, "api.example.com", &desired, None);
        let geo = state.profile_at(ZONE, "klb.api").unwrap();
        let mut codes: Vec<String> = geo
            .properties
            .endpoints
            .iter()
            .flat_map(|e| e.properties.geo_mapping.clone().unwrap())
            .collect();
        codes.sort();
        assert_eq!(codes, ["GEO-AP", "IE", "WORLD"]);
    }

    #[test]
    fn what_would_not_read_back_is_refused() {
        let routed = |set: &str, property: (&str, &str)| {
            Endpoint::new(
                "w.example.com",
                RecordType::Cname,
                ["a.example.net".to_string()],
                60,
            )
            .with_set_identifier(set)
            .with_property(property.0, property.1)
        };
        let cases = [
            (
                routed("a.example.net", (WEIGHT, "0")),
                "weights are 1 to 1000",
            ),
            (
                routed("a.example.net", (WEIGHT, "1001")),
                "weights are 1 to 1000",
            ),
            (routed("other", (WEIGHT, "10")), "must be its target"),
            (routed("IE", (GEO_CODE, "US")), "must be \"US\""),
            (
                routed("x", ("something", "else")),
                "exactly one of a weight and a geo code",
            ),
            (
                Endpoint::new(
                    "w.example.com",
                    RecordType::A,
                    ["192.0.2.1".to_string()],
                    60,
                )
                .with_set_identifier("a")
                .with_property(WEIGHT, "10"),
                "CNAME answers only",
            ),
        ];
        for (record, expected) in cases {
            let refused = refusals(std::slice::from_ref(&record));
            let message = refused
                .get("w.example.com")
                .unwrap_or_else(|| panic!("{record:?} is refused"));
            assert!(message.contains(expected), "{message}");
        }
        assert!(
            refusals(&[
                routed("a.example.net", (WEIGHT, "1000")),
                routed("default", (GEO_CODE, "*"))
            ])
            .is_empty()
        );
    }

    #[test]
    fn a_converged_name_needs_no_call() {
        let mut state = ZoneState::default();
        let spec = clusters(&[("IE", true, false), ("US", false, true)]);
        let desired = tree("api.example.com", &strategy(2, 30), &spec).unwrap();
        converge(&mut state, "api.example.com", &desired, None);
        assert_eq!(
            converge(&mut state, "api.example.com", &desired, Some(&desired)),
            0
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Any tree, then any other tree for the same host, then none: each step lays out to
        /// calls after which the zone reads back exactly as planned, and nothing is left.
        #[test]
        fn every_tree_reads_back_exactly_through_any_change(
            first in proptest::collection::vec((0usize..5, any::<bool>(), any::<bool>()), 1..5),
            second in proptest::collection::vec((0usize..5, any::<bool>(), any::<bool>()), 1..5),
            kinds in (0u8..3, 0u8..3),
            weights in (1u32..1000, 1u32..1000),
        ) {
            let geos = ["IE", "US", "GEO-EU", "GEO-OC", "DE"];
            let spec = |picks: &[(usize, bool, bool)]| {
                let picked: Vec<(&str, bool, bool)> = picks.iter().map(|(g, a, h)| (geos[*g], *a, *h)).collect();
                clusters(&picked)
            };
            let host = "api.example.com";
            let Some(one) = tree(host, &strategy(kinds.0, weights.0), &spec(&first)) else { return Ok(()) };
            let Some(two) = tree(host, &strategy(kinds.1, weights.1), &spec(&second)) else { return Ok(()) };
            let mut state = ZoneState::default();
            converge(&mut state, host, &one, None);
            converge(&mut state, host, &two, Some(&one));
            converge(&mut state, host, &[], Some(&two));
            prop_assert!(state.record_sets.is_empty(), "{:?}", state.record_sets.keys().collect::<Vec<_>>());
            prop_assert!(state.profiles.is_empty());
        }
    }
}
