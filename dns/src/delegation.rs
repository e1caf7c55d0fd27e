//! A host's record tree split for a zone whose provider holds plain records only: the provider
//! keeps what it can (the host's CNAME, and once per zone the NS and glue of a sub-zone), and
//! the GEO and weighted part moves into that sub-zone, which Meridian's own nameserver serves.
//!
//! The tree's names move by their zone suffix: with the zone `example.com` delegating
//! `klb.example.com`, `klb.api.example.com` becomes `klb.api.klb.example.com` and
//! `ie.klb.api.example.com` becomes `ie.klb.api.klb.example.com`. Replacing a suffix keeps
//! distinct names distinct, so the layout's own guarantees (no two hosts' trees share a name)
//! carry over, and no name lands on the sub-zone's apex (which cannot hold a CNAME).

use std::net::IpAddr;

use crate::model::{Endpoint, RecordType, is_at_or_below, sort_endpoints};

/// Why a host's tree cannot be delegated.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DelegationError {
    #[error("the delegated zone {sub_zone} is not below the zone {zone}")]
    NotBelow { zone: String, sub_zone: String },
    #[error("the host {host} is not in the zone {zone}")]
    HostOutside { host: String, zone: String },
    #[error(
        "the host {host} is inside the delegated zone {sub_zone}, which holds only what Meridian moves there"
    )]
    HostInside { host: String, sub_zone: String },
    #[error("the host {host} is the zone's apex, which cannot be a CNAME into the delegated zone")]
    HostAtApex { host: String },
    #[error("the name server {name} is inside {sub_zone} and has no address for its glue")]
    NoGlue { name: String, sub_zone: String },
}

/// A host's tree, split.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delegated {
    /// What the zone's provider holds: the records at the host itself, pointing into the
    /// sub-zone.
    pub parent: Vec<Endpoint>,
    /// What the sub-zone holds: the rest of the tree, renamed.
    pub delegated: Vec<Endpoint>,
    /// The name every delegated record is at or below (the host's base, renamed).
    pub delegated_root: String,
}

/// Splits the tree `endpoints` of `host` (in `zone`) between the zone and its sub-zone
/// `sub_zone`. Names are compared in lower case without a trailing dot.
pub fn delegate(
    host: &str,
    zone: &str,
    sub_zone: &str,
    endpoints: &[Endpoint],
) -> Result<Delegated, DelegationError> {
    let clean = |name: &str| name.trim_end_matches('.').to_ascii_lowercase();
    let (host, zone, sub_zone) = (clean(host), clean(zone), clean(sub_zone));
    if sub_zone == zone || !is_at_or_below(&sub_zone, &zone) {
        return Err(DelegationError::NotBelow { zone, sub_zone });
    }
    let base = host.strip_prefix("*.").unwrap_or(&host).to_string();
    if !is_at_or_below(&base, &zone) {
        return Err(DelegationError::HostOutside { host, zone });
    }
    if is_at_or_below(&base, &sub_zone) {
        return Err(DelegationError::HostInside { host, sub_zone });
    }
    if host == zone {
        return Err(DelegationError::HostAtApex { host });
    }
    // Only the tree's own names move; a CNAME's target elsewhere (a gateway's hostname, even
    // one under the host) stays as it is.
    let tree_names: std::collections::BTreeSet<String> =
        endpoints.iter().map(|e| clean(&e.dns_name)).collect();
    let moved = |name: &str| -> Option<String> {
        let name = clean(name);
        (name != host && is_at_or_below(&name, &base)).then(|| {
            let prefix = &name[..name.len() - zone.len()];
            format!("{prefix}{sub_zone}")
        })
    };
    let mut parent = Vec::new();
    let mut delegated = Vec::new();
    for endpoint in endpoints {
        let mut endpoint = endpoint.clone();
        if endpoint.record_type == RecordType::Cname {
            for target in &mut endpoint.targets {
                if tree_names.contains(&clean(target))
                    && let Some(renamed) = moved(target)
                {
                    *target = renamed;
                }
            }
        }
        match moved(&endpoint.dns_name) {
            Some(renamed) => {
                endpoint.dns_name = renamed;
                delegated.push(endpoint);
            }
            None => parent.push(endpoint),
        }
    }
    sort_endpoints(&mut parent);
    sort_endpoints(&mut delegated);
    let delegated_root = format!("{}{sub_zone}", &base[..base.len() - zone.len()]);
    Ok(Delegated {
        parent,
        delegated,
        delegated_root,
    })
}

/// The host clients ask for, of a tree [`delegate`] moved from `zone` into `sub_zone`:
/// `api.klb.example.com` is `api.example.com`'s, `*.apps.klb.example.com` is
/// `*.apps.example.com`'s. `None` for a host that is not strictly below the sub-zone. What
/// a moved tree is health-checked as: its gateways serve the clients' host, not the moved one.
pub fn undelegated_host(host: &str, zone: &str, sub_zone: &str) -> Option<String> {
    let clean = |name: &str| name.trim_end_matches('.').to_ascii_lowercase();
    let (host, zone, sub_zone) = (clean(host), clean(zone), clean(sub_zone));
    let (wildcard, base) = match host.strip_prefix("*.") {
        Some(base) => ("*.", base),
        None => ("", host.as_str()),
    };
    if base == sub_zone || !is_at_or_below(base, &sub_zone) {
        return None;
    }
    Some(format!(
        "{wildcard}{}{zone}",
        &base[..base.len() - sub_zone.len()]
    ))
}

/// The host clients ask for, of a tree moved into `sub_zone` under `moved_root`, given the host
/// `parent_root` the zone keeps (the CNAME into the sub-zone; `*.` for a wildcard, which the
/// moved root does not carry): `parent_root` when the move is its, else `None`.
pub fn client_host(
    moved_root: &str,
    zone: &str,
    sub_zone: &str,
    parent_root: &str,
) -> Option<String> {
    let parent = parent_root.trim_end_matches('.').to_ascii_lowercase();
    let base = parent.strip_prefix("*.").unwrap_or(&parent);
    (undelegated_host(moved_root, zone, sub_zone)? == base).then_some(parent.clone())
}

/// A name server of the sub-zone, with its addresses when the parent needs them as glue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameServer {
    pub name: String,
    pub addresses: Vec<IpAddr>,
}

/// What the parent zone holds to delegate `sub_zone`: its NS records, and the glue (A and
/// AAAA) of the name servers inside it, which no resolver could find otherwise (one without an
/// address is an error: the delegation would be lame). Name servers elsewhere resolve through
/// their own zones. The same name given twice (in another case, with a trailing dot) is one.
pub fn delegation_records(
    sub_zone: &str,
    name_servers: &[NameServer],
    ttl: u32,
) -> Result<Vec<Endpoint>, DelegationError> {
    let sub_zone = sub_zone.trim_end_matches('.').to_ascii_lowercase();
    let mut by_name: std::collections::BTreeMap<String, std::collections::BTreeSet<IpAddr>> =
        std::collections::BTreeMap::new();
    for ns in name_servers {
        by_name
            .entry(ns.name.trim_end_matches('.').to_ascii_lowercase())
            .or_default()
            .extend(ns.addresses.iter().copied());
    }
    if by_name.is_empty() {
        return Ok(Vec::new());
    }
    let names: Vec<String> = by_name.keys().cloned().collect();
    let mut records = vec![Endpoint::new(&sub_zone, RecordType::Ns, names, ttl)];
    for (name, addresses) in &by_name {
        if !is_at_or_below(name, &sub_zone) {
            continue;
        }
        if addresses.is_empty() {
            return Err(DelegationError::NoGlue {
                name: name.clone(),
                sub_zone,
            });
        }
        let of = |v4: bool| -> Vec<String> {
            addresses
                .iter()
                .filter(|a| a.is_ipv4() == v4)
                .map(IpAddr::to_string)
                .collect()
        };
        for (record_type, addresses) in [(RecordType::A, of(true)), (RecordType::Aaaa, of(false))] {
            if !addresses.is_empty() {
                records.push(Endpoint::new(name, record_type, addresses, ttl));
            }
        }
    }
    sort_endpoints(&mut records);
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moved_host_maps_back_to_the_host_clients_ask_for() {
        for (host, expected) in [
            ("api.klb.example.com", Some("api.example.com")),
            ("API.KLB.example.com.", Some("api.example.com")),
            ("*.apps.klb.example.com", Some("*.apps.example.com")),
            ("klb.example.com", None),
            ("*.klb.example.com", None),
            ("api.example.com", None),
            ("api.klb.example.net", None),
        ] {
            assert_eq!(
                undelegated_host(host, "example.com", "klb.example.com").as_deref(),
                expected,
                "{host}"
            );
        }
        // A wildcard's moved root has no `*.`: the host the zone keeps says it.
        let client = |moved: &str, parent: &str| {
            client_host(moved, "example.com", "klb.example.com", parent)
        };
        assert_eq!(
            client("apps.klb.example.com", "*.apps.example.com").as_deref(),
            Some("*.apps.example.com")
        );
        assert_eq!(
            client("api.klb.example.com", "api.example.com").as_deref(),
            Some("api.example.com")
        );
        assert_eq!(client("api.klb.example.com", "www.example.com"), None);
        // The inverse of the renaming, for every host delegate accepts.
        for host in ["api.example.com", "*.apps.example.com", "a.b.c.example.com"] {
            let moved = delegate(host, "example.com", "klb.example.com", &[])
                .unwrap()
                .delegated_root;
            let root = host.trim_start_matches("*.");
            assert_eq!(
                undelegated_host(&moved, "example.com", "klb.example.com").as_deref(),
                Some(root),
                "{host}"
            );
        }
    }
    use crate::fidelity::{EMBEDDED, PLAIN, assess};
    use crate::model::{GEO_CODE, WEIGHT};
    use crate::tree::{
        Address, ClusterTarget, CustomWeight, GEO_CODE_LABEL, GatewayRef, LabelSelector,
        LoadBalancing, Strategy, build_record_tree,
    };
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// What a client located at `geo` may get for `name`: the addresses (or outside hostnames)
    /// every GEO choice for it and every weighted member of weight above 0 lead to.
    fn answers(records: &[Endpoint], name: &str, geo: &str, depth: u32) -> BTreeSet<String> {
        assert!(depth < 12, "a CNAME loop at {name}");
        let here: Vec<&Endpoint> = records.iter().filter(|r| r.dns_name == name).collect();
        if here.is_empty() {
            return [name.to_string()].into();
        }
        let follow = |chosen: Vec<&Endpoint>| -> BTreeSet<String> {
            chosen
                .into_iter()
                .flat_map(|r| match r.record_type {
                    RecordType::Cname => answers(records, &r.targets[0], geo, depth + 1),
                    _ => r.targets.iter().cloned().collect(),
                })
                .collect()
        };
        if here.iter().any(|r| r.property(GEO_CODE).is_some()) {
            let chosen: Vec<&Endpoint> = here
                .iter()
                .copied()
                .filter(|r| r.property(GEO_CODE) == Some(geo))
                .collect();
            let chosen = if chosen.is_empty() {
                here.into_iter()
                    .filter(|r| r.property(GEO_CODE) == Some("*"))
                    .collect()
            } else {
                chosen
            };
            return follow(chosen);
        }
        let weighs = |r: &&Endpoint| r.property(WEIGHT).is_some_and(|w| w != "0");
        if here.iter().any(weighs) {
            return follow(here.into_iter().filter(weighs).collect());
        }
        follow(here)
    }

    fn tree(host: &str, clusters: &[(&str, u32, bool)], with_geo: bool) -> Vec<Endpoint> {
        let targets: Vec<ClusterTarget> = clusters
            .iter()
            .enumerate()
            .map(|(i, (geo, weight, hostname))| ClusterTarget {
                name: format!("c{i}"),
                cluster_id: format!("id-{i}"),
                labels: [
                    (GEO_CODE_LABEL.to_string(), geo.to_string()),
                    ("weight".to_string(), weight.to_string()),
                ]
                .into(),
                addresses: vec![if *hostname {
                    Address::parse(Some("Hostname"), &format!("lb-{i}.elb.example.net")).unwrap()
                } else {
                    Address::parse(None, &format!("10.0.0.{}", i + 1)).unwrap()
                }],
                attached_routes: None,
                weight_percent: 100,
            })
            .collect();
        let lb = LoadBalancing {
            default_weight: 120,
            custom: clusters
                .iter()
                .map(|(_, w, _)| CustomWeight {
                    selector: LabelSelector {
                        match_labels: [("weight".to_string(), w.to_string())].into(),
                        match_expressions: Vec::new(),
                    },
                    weight: *w,
                })
                .collect(),
            default_geo: with_geo.then(|| clusters[0].0.to_string()),
            tiers: None,
        };
        let gateway = GatewayRef {
            name: "gw".into(),
            namespace: "ns".into(),
        };
        build_record_tree(host, &gateway, &Strategy::LoadBalanced(lb), &targets)
            .unwrap()
            .endpoints()
    }

    #[test]
    fn the_host_keeps_its_cname_and_the_tree_moves_by_its_zone_suffix() {
        let original = tree(
            "api.example.com",
            &[("IE", 120, false), ("US", 60, true)],
            true,
        );
        let split = delegate(
            "api.example.com",
            "example.com",
            "klb.example.com",
            &original,
        )
        .unwrap();
        assert_eq!(
            split.parent,
            [Endpoint::new(
                "api.example.com",
                RecordType::Cname,
                ["klb.api.klb.example.com".to_string()],
                crate::tree::LB_TTL
            )]
        );
        assert_eq!(split.delegated_root, "api.klb.example.com");
        let names: BTreeSet<&str> = split
            .delegated
            .iter()
            .map(|r| r.dns_name.as_str())
            .collect();
        assert!(names.contains("klb.api.klb.example.com"), "{names:?}");
        assert!(names.contains("ie.klb.api.klb.example.com"), "{names:?}");
        assert!(
            split
                .delegated
                .iter()
                .flat_map(|r| &r.targets)
                .any(|t| t == "lb-1.elb.example.net"),
            "outside hostnames stay as they are"
        );
        // A plain provider holds the parent's part; the sub-zone the rest, as it asked.
        assert!(assess(&PLAIN, &split.parent).is_empty());
        assert!(!assess(&PLAIN, &original).iter().all(|f| !f.missing));

        let wildcard = tree("*.apps.example.com", &[("IE", 120, false)], false);
        let split = delegate(
            "*.apps.example.com",
            "example.com",
            "klb.example.com",
            &wildcard,
        )
        .unwrap();
        assert_eq!(split.parent[0].dns_name, "*.apps.example.com");
        assert_eq!(split.parent[0].targets, ["klb.apps.klb.example.com"]);
        assert_eq!(split.delegated_root, "apps.klb.example.com");
    }

    #[test]
    fn a_host_outside_the_zone_or_inside_the_sub_zone_is_refused() {
        let cases = [
            (
                "api.example.org",
                "example.com",
                "klb.example.com",
                "is not in the zone",
            ),
            (
                "x.klb.example.com",
                "example.com",
                "klb.example.com",
                "is inside the delegated zone",
            ),
            (
                "api.example.com",
                "example.com",
                "example.com",
                "is not below the zone",
            ),
            (
                "api.example.com",
                "example.com",
                "klb.example.org",
                "is not below the zone",
            ),
            (
                "example.com",
                "example.com",
                "klb.example.com",
                "is the zone's apex",
            ),
        ];
        for (host, zone, sub_zone, expected) in cases {
            let error = delegate(host, zone, sub_zone, &[]).unwrap_err();
            assert!(error.to_string().contains(expected), "{host}: {error}");
        }
    }

    #[test]
    fn the_parent_gets_ns_records_and_glue_for_name_servers_inside_the_sub_zone_only() {
        let name_servers = [
            NameServer {
                name: "ns1.klb.example.com.".into(),
                addresses: vec![
                    "192.0.2.53".parse().unwrap(),
                    "2001:db8::53".parse().unwrap(),
                ],
            },
            NameServer {
                name: "ns.provider.example.net".into(),
                addresses: vec!["198.51.100.53".parse().unwrap()],
            },
        ];
        let mut repeated = name_servers.to_vec();
        repeated.push(NameServer {
            name: "NS1.klb.example.com".into(),
            addresses: Vec::new(),
        });
        let records = delegation_records("klb.example.com", &repeated, 3600).unwrap();
        let shown: Vec<(String, RecordType, Vec<String>)> = records
            .into_iter()
            .map(|r| (r.dns_name, r.record_type, r.targets))
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "klb.example.com".into(),
                    RecordType::Ns,
                    vec![
                        "ns.provider.example.net".into(),
                        "ns1.klb.example.com".into()
                    ]
                ),
                (
                    "ns1.klb.example.com".into(),
                    RecordType::A,
                    vec!["192.0.2.53".into()]
                ),
                (
                    "ns1.klb.example.com".into(),
                    RecordType::Aaaa,
                    vec!["2001:db8::53".into()]
                ),
            ]
        );
        assert_eq!(
            delegation_records("klb.example.com", &[], 3600),
            Ok(Vec::new())
        );
        let lame = [NameServer {
            name: "ns2.klb.example.com".into(),
            addresses: Vec::new(),
        }];
        assert!(matches!(
            delegation_records("klb.example.com", &lame, 3600),
            Err(DelegationError::NoGlue { .. })
        ));
    }

    proptest! {
        /// Whatever the tree, a client anywhere gets the same answers through the host's CNAME
        /// and the sub-zone as through the tree itself; the parent holds only the host's
        /// records, plain ones; every moved name is strictly inside the sub-zone.
        #[test]
        fn a_delegated_tree_answers_every_location_as_the_tree_does(
            clusters in prop::collection::vec(
                (prop::sample::select(vec!["IE", "US", "GEO-EU"]), 0u32..=3, any::<bool>()),
                1..6,
            ),
            with_geo in any::<bool>(),
            host in prop::sample::select(vec!["api.example.com", "*.apps.example.com", "*.example.com", "a.b.c.example.com"]),
        ) {
            let original = tree(host, &clusters, with_geo);
            let split = delegate(host, "example.com", "klb.example.com", &original).unwrap();
            prop_assert!(split.parent.iter().all(|r| r.dns_name == host));
            prop_assert!(assess(&PLAIN, &split.parent).is_empty());
            prop_assert!(assess(&EMBEDDED, &split.delegated).is_empty());
            prop_assert!(split.delegated.iter().all(|r| r.dns_name != "klb.example.com"
                && is_at_or_below(&r.dns_name, &split.delegated_root)
                && is_at_or_below(&r.dns_name, "klb.example.com")));
            let joined: Vec<Endpoint> = split.parent.iter().chain(&split.delegated).cloned().collect();
            for geo in ["IE", "US", "GEO-EU", "FR"] {
                prop_assert_eq!(
                    answers(&joined, host, geo, 0),
                    answers(&original, host, geo, 0),
                    "{}", geo
                );
            }
        }
    }
}
