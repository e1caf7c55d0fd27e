//! What each DNS provider can hold of a record tree, and what a tree asks for that its zone's
//! provider cannot hold. One table for every provider, so a policy is refused (or, later,
//! delegated) for the same reasons whichever part of Meridian looks: the DNSPolicy controller
//! before it writes records, the DNSRecord controller before it publishes, and
//! `meridian-hub plan` offline.
//!
//! A gap is either *missing* (the provider cannot answer as the tree asks: the caller refuses)
//! or *approximated* (it answers with the same intent in another way: the caller publishes and
//! says how in status).

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{Endpoint, GEO_CODE, PRIORITY, RecordType, WEIGHT};
use crate::tree::CATCH_ALL_GEO;

/// How a provider holds one routing feature.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    Held,
    /// Held another way; the text says how, for status.
    Approximated(&'static str),
    Missing,
}

/// What a provider can hold, as Meridian drives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fidelity {
    /// The provider's name, as a ManagedZone's `status.provider` says it.
    pub provider: &'static str,
    /// Weighted answers. `Missing` means plain records: a weighted set is held only when its
    /// members weigh the same (every address published, as `simple`).
    pub weights: Support,
    /// The weights it takes, inclusive.
    pub weight_range: (u64, u64),
    /// GEO answers by continent (`GEO-EU`). With `Missing` for every kind of code, a GEO set
    /// is held only when all its members answer the same.
    pub continents: Support,
    /// GEO answers by country (`IE`).
    pub countries: Support,
    /// GEO answers by subdivision (`US-CA`); DNSPolicy does not admit these yet.
    pub subdivisions: Support,
    /// The answer for clients from anywhere else (`*`).
    pub catch_all: Support,
    /// The record types a weighted or GEO record may have.
    pub routed_types: &'static [RecordType],
    /// Geo codes of a kind it holds that it has no location for.
    pub unlocated: &'static [&'static str],
}

const ANY_TYPE: &[RecordType] = &RecordType::ALL;

/// Route53: weighted (0–255) and geolocation records of any type.
pub const ROUTE53: Fidelity = Fidelity {
    provider: "route53",
    weights: Support::Held,
    weight_range: (0, 255),
    continents: Support::Held,
    countries: Support::Held,
    subdivisions: Support::Held,
    catch_all: Support::Held,
    routed_types: ANY_TYPE,
    unlocated: &[],
};

/// Google Cloud DNS: WRR items take any weight; GEO items are Google Cloud regions, so each
/// continent is served as the region configured for it, and there is no catch-all location.
pub const GOOGLE: Fidelity = Fidelity {
    provider: "google",
    weights: Support::Held,
    weight_range: (0, u32::MAX as u64),
    continents: Support::Approximated(
        "Cloud DNS locates clients by Google Cloud region: each continent is served as the region configured for it, and clients get their nearest listed region's answer",
    ),
    countries: Support::Missing,
    subdivisions: Support::Missing,
    catch_all: Support::Approximated(
        "Cloud DNS has no catch-all location: the `*` answer is served as the catch-all region's, and clients elsewhere get their nearest listed region's answer",
    ),
    routed_types: ANY_TYPE,
    // No Google Cloud region is in Antarctica (the provider's default region map).
    unlocated: &["GEO-AN"],
};

/// Azure DNS with Traffic Manager: Weighted (1–1000) and Geographic profiles, which answer
/// CNAMEs only.
pub const AZURE: Fidelity = Fidelity {
    provider: "azure",
    weights: Support::Held,
    weight_range: (1, 1000),
    continents: Support::Held,
    countries: Support::Held,
    subdivisions: Support::Held,
    catch_all: Support::Held,
    routed_types: &[RecordType::Cname],
    unlocated: &[],
};

/// RFC2136 and the external-dns webhook protocol: plain records only.
pub const PLAIN: Fidelity = Fidelity {
    provider: "plain",
    weights: Support::Missing,
    weight_range: (0, u32::MAX as u64),
    continents: Support::Missing,
    countries: Support::Missing,
    subdivisions: Support::Missing,
    catch_all: Support::Missing,
    routed_types: &[],
    unlocated: &[],
};

/// Meridian's own nameserver: everything the tree can say.
pub const EMBEDDED: Fidelity = Fidelity {
    provider: "embedded",
    weights: Support::Held,
    weight_range: (0, u32::MAX as u64),
    continents: Support::Held,
    countries: Support::Held,
    subdivisions: Support::Missing,
    catch_all: Support::Held,
    routed_types: ANY_TYPE,
    unlocated: &[],
};

/// The table of a provider named as a ManagedZone's `status.provider` names it.
pub fn of_provider(kind: &str) -> Option<Fidelity> {
    match kind {
        "route53" => Some(ROUTE53),
        "google" => Some(GOOGLE),
        "azure" => Some(AZURE),
        "rfc2136" => Some(Fidelity {
            provider: "rfc2136",
            ..PLAIN
        }),
        "webhook" => Some(Fidelity {
            provider: "webhook",
            ..PLAIN
        }),
        "embedded" => Some(EMBEDDED),
        _ => None,
    }
}

/// What kind of gap a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Gap {
    /// A weighted set whose members weigh differently, at a provider of plain records.
    Weights,
    /// A weight outside the provider's range.
    WeightRange,
    /// A GEO set whose members answer differently, at a provider of plain records.
    Geo,
    /// A geo code of a kind (country, continent, subdivision) the provider does not locate by.
    GeoCode,
    /// The catch-all answer.
    CatchAll,
    /// A weighted or GEO record of a type the provider cannot route.
    RoutedType,
    /// One record with both a weight and a geo code.
    Mixed,
}

/// One thing a tree asks of a provider that the provider holds differently or not at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The record's name.
    pub name: String,
    pub gap: Gap,
    /// Whether the provider cannot hold it at all (otherwise it is approximated).
    pub missing: bool,
    /// What to tell the user, naming the record.
    pub message: String,
}

/// What `endpoints` (one host's tree) asks of a provider with `fidelity` that it does not hold
/// as asked, one finding per name and gap, in order of name.
pub fn assess(fidelity: &Fidelity, endpoints: &[Endpoint]) -> Vec<Finding> {
    let mut findings: BTreeMap<(String, Gap), Finding> = BTreeMap::new();
    // One finding per name and gap: what is missing outweighs what is approximated, and
    // further codes missing for the same reason are added to its message.
    let mut found = |name: &str, gap: Gap, missing: bool, message: String| {
        let finding = Finding {
            name: name.to_string(),
            gap,
            missing,
            message: format!("{name}: {message}"),
        };
        match findings.entry((name.to_string(), gap)) {
            std::collections::btree_map::Entry::Vacant(entry) => {
                entry.insert(finding);
            }
            std::collections::btree_map::Entry::Occupied(mut entry) => {
                let kept = entry.get_mut();
                if missing && !kept.missing {
                    *kept = finding;
                } else if missing && kept.missing && !kept.message.contains(&finding.message) {
                    let extra = finding.message.trim_start_matches(&format!("{name}: "));
                    kept.message = format!("{}; {extra}", kept.message);
                }
            }
        }
    };
    let plain = fidelity.weights == Support::Missing;
    // Per name: the weighted members' weights by tier, and the GEO members' answers by code.
    let mut weighted: BTreeMap<&str, BTreeMap<&str, BTreeSet<u64>>> = BTreeMap::new();
    // Per name: the weighted members' targets, to tell gateways' hostnames from addresses.
    let mut weighted_targets: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    let names: BTreeSet<&str> = endpoints.iter().map(|e| e.dns_name.as_str()).collect();
    let mut geo: BTreeMap<&str, BTreeMap<&str, &[String]>> = BTreeMap::new();
    for record in endpoints {
        if record.record_type == RecordType::Txt {
            continue;
        }
        let name = record.dns_name.as_str();
        let weight = record.property(WEIGHT);
        let code = record.property(GEO_CODE);
        if weight.is_none() && code.is_none() {
            continue;
        }
        if weight.is_some() && code.is_some() {
            found(
                name,
                Gap::Mixed,
                true,
                "a record has both a weight and a geo code, which no provider answers by".into(),
            );
            continue;
        }
        if !plain && !fidelity.routed_types.contains(&record.record_type) {
            found(
                name,
                Gap::RoutedType,
                true,
                format!(
                    "{} cannot route {} records (only {})",
                    fidelity.provider,
                    record.record_type,
                    type_list(fidelity.routed_types)
                ),
            );
        }
        if let Some(weight) = weight {
            let value = weight.parse::<u64>().ok();
            if plain {
                weighted_targets
                    .entry(name)
                    .or_default()
                    .extend(record.targets.iter().map(String::as_str));
                weighted
                    .entry(name)
                    .or_default()
                    .entry(record.property(PRIORITY).unwrap_or(""))
                    .or_default()
                    .insert(value.unwrap_or(u64::MAX));
            } else if !value
                .is_some_and(|w| (fidelity.weight_range.0..=fidelity.weight_range.1).contains(&w))
            {
                found(
                    name,
                    Gap::WeightRange,
                    true,
                    format!(
                        "weight {weight} is outside {}'s {}–{}",
                        fidelity.provider, fidelity.weight_range.0, fidelity.weight_range.1
                    ),
                );
            }
        }
        if let Some(code) = code {
            if plain {
                geo.entry(name)
                    .or_default()
                    .insert(code, record.targets.as_slice());
                continue;
            }
            let (support, gap, kind) = match geo_kind(code) {
                GeoKind::CatchAll => (fidelity.catch_all, Gap::CatchAll, "a catch-all answer"),
                GeoKind::Continent => (fidelity.continents, Gap::GeoCode, "continents"),
                GeoKind::Country => (fidelity.countries, Gap::GeoCode, "countries"),
                GeoKind::Subdivision => (fidelity.subdivisions, Gap::GeoCode, "subdivisions"),
            };
            if fidelity.unlocated.contains(&code) {
                found(
                    name,
                    gap,
                    true,
                    format!("{} has no location for geo code {code}", fidelity.provider),
                );
                continue;
            }
            match support {
                Support::Held => {}
                Support::Approximated(how) => found(name, gap, false, how.to_string()),
                Support::Missing => found(
                    name,
                    gap,
                    true,
                    format!(
                        "{} has no GEO answers by {kind} (geo code {code})",
                        fidelity.provider
                    ),
                ),
            }
        }
    }
    for (name, targets) in &weighted_targets {
        // Plain records cannot hold a CNAME beside addresses, nor two CNAMEs: a gateway known
        // by hostname would get no traffic once flattened.
        let hostnames = targets.iter().filter(|t| !names.contains(*t)).count();
        if hostnames > 0 && targets.len() > 1 {
            found(
                name,
                Gap::Weights,
                true,
                format!(
                    "{} has no weighted answers, and plain records cannot hold a gateway's hostname beside other gateways",
                    fidelity.provider
                ),
            );
        }
    }
    for (name, tiers) in weighted {
        let differing = tiers.values().find(|weights| weights.len() > 1);
        match differing {
            Some(weights) => found(
                name,
                Gap::Weights,
                true,
                format!(
                    "{} has no weighted answers, and the weights differ ({})",
                    fidelity.provider,
                    weights
                        .iter()
                        .map(u64::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            None => found(
                name,
                Gap::Weights,
                false,
                format!(
                    "{} has no weighted answers; the weights are equal, so every address is published",
                    fidelity.provider
                ),
            ),
        }
    }
    for (name, answers) in geo {
        let distinct: BTreeSet<&[String]> = answers.values().copied().collect();
        if distinct.len() > 1 {
            found(
                name,
                Gap::Geo,
                true,
                format!(
                    "{} has no GEO answers, and the geo codes {} answer differently",
                    fidelity.provider,
                    answers.keys().copied().collect::<Vec<_>>().join(", ")
                ),
            );
        } else {
            found(
                name,
                Gap::Geo,
                false,
                format!(
                    "{} has no GEO answers; every location gets the same answer here, so one is published",
                    fidelity.provider
                ),
            );
        }
    }
    findings.into_values().collect()
}

/// The findings' messages that refuse (missing) and those that only inform (approximated).
pub fn split(findings: &[Finding]) -> (Vec<String>, Vec<String>) {
    let (missing, approximated): (Vec<&Finding>, Vec<&Finding>) =
        findings.iter().partition(|f| f.missing);
    let messages = |found: Vec<&Finding>| found.into_iter().map(|f| f.message.clone()).collect();
    (messages(missing), messages(approximated))
}

enum GeoKind {
    CatchAll,
    Continent,
    Country,
    Subdivision,
}

fn geo_kind(code: &str) -> GeoKind {
    if code == CATCH_ALL_GEO {
        GeoKind::CatchAll
    } else if code.starts_with("GEO-") {
        GeoKind::Continent
    } else if code.len() == 2 {
        GeoKind::Country
    } else {
        GeoKind::Subdivision
    }
}

fn type_list(types: &[RecordType]) -> String {
    types
        .iter()
        .map(|t| t.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{
        Address, ClusterTarget, CustomWeight, GatewayRef, LabelSelector, LoadBalancing, Strategy,
        build_record_tree,
    };
    use proptest::prelude::*;

    fn weighted(name: &str, target: &str, weight: u64) -> Endpoint {
        Endpoint::new(name, RecordType::Cname, [target.to_string()], 60)
            .with_set_identifier(target)
            .with_property(WEIGHT, weight.to_string())
    }

    fn located(name: &str, target: &str, code: &str) -> Endpoint {
        Endpoint::new(name, RecordType::Cname, [target.to_string()], 300)
            .with_set_identifier(code)
            .with_property(GEO_CODE, code)
    }

    /// The gaps of `endpoints`, with an address record at every one-letter target (the
    /// tests' cluster records; a dotted target is a gateway's hostname).
    fn gaps(fidelity: &Fidelity, endpoints: &[Endpoint]) -> Vec<(Gap, bool)> {
        let leaves: BTreeSet<&String> = endpoints
            .iter()
            .flat_map(|e| &e.targets)
            .filter(|t| t.len() == 1)
            .collect();
        let tree: Vec<Endpoint> = endpoints
            .iter()
            .cloned()
            .chain(
                leaves
                    .into_iter()
                    .map(|l| Endpoint::new(l, RecordType::A, ["10.0.0.1".to_string()], 60)),
            )
            .collect();
        assess(fidelity, &tree)
            .into_iter()
            .map(|f| (f.gap, f.missing))
            .collect()
    }

    #[test]
    fn each_provider_finds_what_it_cannot_hold() {
        let equal = [weighted("w", "a", 120), weighted("w", "b", 120)];
        let unequal = [weighted("w", "a", 300), weighted("w", "b", 100)];
        let one_answer = [located("g", "x", "GEO-EU"), located("g", "x", "*")];
        let two_answers = [located("g", "x", "IE"), located("g", "y", "*")];
        let routed_a = [
            Endpoint::new("w", RecordType::A, ["10.0.0.1".to_string()], 60)
                .with_set_identifier("a")
                .with_property(WEIGHT, "1"),
        ];
        let mixed = [weighted("m", "a", 1).with_property(GEO_CODE, "IE")];
        type Case<'a> = (&'a str, Fidelity, &'a [Endpoint], &'a [(Gap, bool)]);
        let cases: [Case; 18] = [
            ("route53 equal", ROUTE53, &equal, &[]),
            (
                "route53 over 255",
                ROUTE53,
                &unequal,
                &[(Gap::WeightRange, true)],
            ),
            ("route53 countries", ROUTE53, &two_answers, &[]),
            ("route53 routed A", ROUTE53, &routed_a, &[]),
            ("azure weights", AZURE, &unequal, &[]),
            (
                "azure routed A",
                AZURE,
                &routed_a,
                &[(Gap::RoutedType, true)],
            ),
            ("azure countries", AZURE, &two_answers, &[]),
            ("google weights", GOOGLE, &unequal, &[]),
            (
                "google continent and catch-all",
                GOOGLE,
                &one_answer,
                &[(Gap::GeoCode, false), (Gap::CatchAll, false)],
            ),
            (
                "google country",
                GOOGLE,
                &two_answers,
                &[(Gap::GeoCode, true), (Gap::CatchAll, false)],
            ),
            (
                "plain equal weights",
                PLAIN,
                &equal,
                &[(Gap::Weights, false)],
            ),
            (
                "plain unequal weights",
                PLAIN,
                &unequal,
                &[(Gap::Weights, true)],
            ),
            ("plain one answer", PLAIN, &one_answer, &[(Gap::Geo, false)]),
            (
                "plain two answers",
                PLAIN,
                &two_answers,
                &[(Gap::Geo, true)],
            ),
            ("embedded weights", EMBEDDED, &unequal, &[]),
            ("embedded countries", EMBEDDED, &two_answers, &[]),
            ("mixed anywhere", EMBEDDED, &mixed, &[(Gap::Mixed, true)]),
            ("mixed plain", PLAIN, &mixed, &[(Gap::Mixed, true)]),
        ];
        for (what, fidelity, endpoints, expected) in cases {
            assert_eq!(gaps(&fidelity, endpoints), expected, "{what}");
        }
    }

    #[test]
    fn what_is_missing_is_never_hidden_by_what_is_approximated_under_the_same_gap() {
        // Set identifiers sort GEO-EU before IE: the country must still refuse at Google.
        let mixed = [
            located("g", "x", "GEO-EU"),
            located("g", "y", "IE"),
            located("g", "z", "US"),
            located("g", "x", "*"),
        ];
        let findings = assess(&GOOGLE, &mixed);
        let codes: Vec<&Finding> = findings.iter().filter(|f| f.gap == Gap::GeoCode).collect();
        assert_eq!(codes.len(), 1);
        assert!(codes[0].missing);
        assert_eq!(
            codes[0].message,
            "g: google has no GEO answers by countries (geo code IE); google has no GEO answers by countries (geo code US)"
        );
        let antarctica = [located("g", "x", "GEO-AN"), located("g", "x", "*")];
        assert!(
            assess(&GOOGLE, &antarctica)
                .iter()
                .any(|f| f.missing && f.message == "g: google has no location for geo code GEO-AN")
        );
    }

    #[test]
    fn plain_records_refuse_a_gateway_hostname_beside_others_even_at_equal_weights() {
        let cluster = Endpoint::new("c1.w", RecordType::A, ["10.0.0.1".to_string()], 60);
        let mixed = [
            weighted("w", "c1.w", 120),
            weighted("w", "lb.elb.example.net", 120),
            cluster.clone(),
        ];
        assert_eq!(gaps(&PLAIN, &mixed), [(Gap::Weights, true)]);
        let one_hostname = [weighted("w", "lb.elb.example.net", 120)];
        assert_eq!(gaps(&PLAIN, &one_hostname), [(Gap::Weights, false)]);
        let addresses = [weighted("w", "c1.w", 120), cluster];
        assert_eq!(gaps(&PLAIN, &addresses), [(Gap::Weights, false)]);
    }

    #[test]
    fn plain_weights_are_compared_within_a_tier() {
        let tiered = [
            weighted("w", "a", 100).with_property(PRIORITY, "1"),
            weighted("w", "b", 100).with_property(PRIORITY, "1"),
            weighted("w", "c", 50).with_property(PRIORITY, "2"),
        ];
        assert_eq!(gaps(&PLAIN, &tiered), [(Gap::Weights, false)]);
        let leaf = |name: &str| Endpoint::new(name, RecordType::A, ["10.0.0.1".to_string()], 60);
        let uneven = [
            weighted("w", "a", 100).with_property(PRIORITY, "1"),
            weighted("w", "b", 50).with_property(PRIORITY, "1"),
            leaf("a"),
            leaf("b"),
        ];
        let findings = assess(&PLAIN, &uneven);
        assert_eq!(
            findings[0].message,
            "w: plain has no weighted answers, and the weights differ (50, 100)"
        );
    }

    #[test]
    fn messages_name_the_record_and_the_provider() {
        let findings = assess(
            &of_provider("webhook").unwrap(),
            &[
                located("klb.api.example.com", "x", "IE"),
                located("klb.api.example.com", "y", "*"),
            ],
        );
        let (missing, approximated) = split(&findings);
        assert_eq!(
            missing,
            [
                "klb.api.example.com: webhook has no GEO answers, and the geo codes *, IE answer differently"
            ]
        );
        assert!(approximated.is_empty());
        assert_eq!(of_provider("rfc2136").unwrap().weights, Support::Missing);
        assert_eq!(of_provider("cloudflare"), None);
    }

    fn cluster(index: usize, geo: &str, weight: &str) -> ClusterTarget {
        ClusterTarget {
            name: format!("c{index}"),
            cluster_id: format!("id-{index}"),
            labels: [
                (crate::tree::GEO_CODE_LABEL.to_string(), geo.to_string()),
                ("weight".to_string(), weight.to_string()),
            ]
            .into(),
            addresses: vec![Address::parse(None, &format!("10.0.0.{}", index + 1)).unwrap()],
            attached_routes: None,
            weight_percent: 100,
        }
    }

    fn tree_of(clusters: &[(&str, u32)], default_geo: Option<&str>) -> Vec<Endpoint> {
        let targets: Vec<ClusterTarget> = clusters
            .iter()
            .enumerate()
            .map(|(i, (geo, weight))| cluster(i, geo, &weight.to_string()))
            .collect();
        let weights: BTreeSet<u32> = clusters.iter().map(|c| c.1).collect();
        let lb = LoadBalancing {
            default_weight: 120,
            custom: weights
                .into_iter()
                .map(|w| CustomWeight {
                    selector: LabelSelector {
                        match_labels: [("weight".to_string(), w.to_string())].into(),
                        match_expressions: Vec::new(),
                    },
                    weight: w,
                })
                .collect(),
            default_geo: default_geo.map(str::to_string),
            tiers: None,
        };
        let gateway = GatewayRef {
            name: "gw".into(),
            namespace: "ns".into(),
        };
        build_record_tree(
            "api.example.com",
            &gateway,
            &Strategy::LoadBalanced(lb),
            &targets,
        )
        .unwrap()
        .endpoints()
    }

    proptest! {
        /// Route53 and the embedded nameserver hold every tree a policy with weights up to
        /// 255 builds; a provider of plain records refuses exactly the trees whose weights
        /// differ or whose locations answer differently.
        #[test]
        fn trees_are_refused_exactly_where_answers_would_be_lost(
            clusters in prop::collection::vec(
                (prop::sample::select(vec!["IE", "US", "GEO-EU", "GEO-OC"]), 0u32..=255),
                1..6,
            ),
            with_geo in any::<bool>(),
        ) {
            let clusters: Vec<(&str, u32)> = clusters.into_iter().collect();
            let endpoints = tree_of(&clusters, with_geo.then_some(clusters[0].0));
            prop_assert!(split(&assess(&ROUTE53, &endpoints)).0.is_empty());
            prop_assert!(assess(&EMBEDDED, &endpoints).is_empty());
            let (missing, _) = split(&assess(&PLAIN, &endpoints));
            let geos: BTreeSet<&str> = clusters.iter().map(|c| c.0).collect();
            let mut weights_by_geo: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
            for (geo, weight) in &clusters {
                let group = if with_geo { *geo } else { "default" };
                weights_by_geo.entry(group).or_default().insert(*weight);
            }
            let weights_differ = weights_by_geo.values().any(|w| w.len() > 1);
            let geos_differ = with_geo && geos.len() > 1;
            prop_assert_eq!(!missing.is_empty(), weights_differ || geos_differ, "{:?}", missing);
        }
    }
}
