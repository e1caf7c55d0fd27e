//! DNS for router shards (seed 003), the pure part: the agents report their clusters' shards
//! (suffix, addresses, admitted routes); every route host under a suffix must reach the shard's
//! routers, so the hub publishes `*.<suffix>` in the ManagedZone holding the suffix. When
//! several clusters serve one suffix the record is a weighted tree across them, like any
//! gateway's.

use std::collections::BTreeMap;

use meridian_api::meridian::{RouterShardReport, ShardRoute};
use meridian_dns::model::Endpoint;
use meridian_dns::shortcode::shortcode;
use meridian_dns::tree::{
    Address, ClusterTarget, GatewayRef, LoadBalancing, Strategy, build_record_tree,
};

use meridian_controllers::decide::desired::{ZoneRef, zone_for};

/// Label on the DNSRecords of router shards: the suffix's code.
pub const ROUTER_DNS_LABEL: &str = "meridian.dev/router-dns";

/// A shard as one cluster reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardSighting {
    /// The ManagedCluster's name.
    pub cluster: String,
    pub cluster_id: String,
    pub labels: BTreeMap<String, String>,
    pub shard: RouterShardReport,
}

/// A ManagedZone anywhere on the hub; the oldest first (it wins a domain held twice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FleetZone {
    pub namespace: String,
    pub zone: ZoneRef,
}

/// The DNS of one shard suffix across the fleet.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardDns {
    pub suffix: String,
    /// Zone namespace and name; `None` when no ManagedZone holds the suffix.
    pub zone: Option<(String, String)>,
    pub record_name: String,
    pub endpoints: Vec<Endpoint>,
    /// Cluster, Router name and addresses behind the suffix.
    pub serving: Vec<(String, String, Vec<String>)>,
    pub routes: Vec<ShardRoute>,
    pub problems: Vec<String>,
}

/// The DNSRecord name of a suffix.
pub fn record_name(suffix: &str) -> String {
    format!("router-{}", shortcode(suffix, 8))
}

/// One entry per suffix any cluster reports, sorted by suffix.
pub fn shard_dns(sightings: &[ShardSighting], zones: &[FleetZone]) -> Vec<ShardDns> {
    let mut by_suffix: BTreeMap<String, Vec<&ShardSighting>> = BTreeMap::new();
    for sighting in sightings {
        let suffix = sighting
            .shard
            .dns
            .trim_end_matches('.')
            .to_ascii_lowercase();
        by_suffix.entry(suffix).or_default().push(sighting);
    }
    let refs: Vec<ZoneRef> = zones.iter().map(|z| z.zone.clone()).collect();
    by_suffix
        .into_iter()
        .map(|(suffix, sightings)| {
            let mut problems = Vec::new();
            let clusters: Vec<ClusterTarget> = sightings
                .iter()
                .filter(|s| !s.shard.addresses.is_empty())
                .map(|s| ClusterTarget {
                    name: s.cluster.clone(),
                    cluster_id: s.cluster_id.clone(),
                    labels: s.labels.clone(),
                    addresses: s
                        .shard
                        .addresses
                        .iter()
                        .filter_map(|value| {
                            let type_ = if value.parse::<std::net::IpAddr>().is_ok() {
                                "IPAddress"
                            } else {
                                "Hostname"
                            };
                            Address::parse(Some(type_), value)
                                .map_err(|e| problems.push(format!("{}: {e}", s.cluster)))
                                .ok()
                        })
                        .collect(),
                    attached_routes: None,
                    weight_percent: 100,
                })
                .collect();
            let strategy = Strategy::LoadBalanced(LoadBalancing {
                default_weight: 120,
                custom: Vec::new(),
                default_geo: None,
                tiers: None,
            });
            let gateway = GatewayRef {
                name: "router".into(),
                namespace: suffix.clone(),
            };
            let endpoints = if clusters.is_empty() {
                problems.push("no cluster reports an address for the shard yet".into());
                Vec::new()
            } else {
                match build_record_tree(&format!("*.{suffix}"), &gateway, &strategy, &clusters) {
                    Ok(tree) => tree.endpoints(),
                    Err(error) => {
                        problems.push(error.to_string());
                        Vec::new()
                    }
                }
            };
            let zone = zone_for(&suffix, &refs).and_then(|found| {
                let index = refs.iter().position(|r| std::ptr::eq(r, found))?;
                Some((
                    zones[index].namespace.clone(),
                    zones[index].zone.name.clone(),
                ))
            });
            if zone.is_none() {
                problems.push(format!("no ManagedZone holds {suffix}"));
            }
            let mut serving: Vec<(String, String, Vec<String>)> = sightings
                .iter()
                .map(|s| {
                    (
                        s.cluster.clone(),
                        s.shard.name.clone(),
                        s.shard.addresses.clone(),
                    )
                })
                .collect();
            serving.sort();
            let mut routes: Vec<ShardRoute> = sightings
                .iter()
                .flat_map(|s| s.shard.routes.iter().cloned())
                .collect();
            routes.sort_by(|a, b| {
                (&a.host, &a.namespace, &a.name).cmp(&(&b.host, &b.namespace, &b.name))
            });
            routes.dedup();
            ShardDns {
                record_name: record_name(&suffix),
                suffix,
                zone,
                endpoints,
                serving,
                routes,
                problems,
            }
        })
        .collect()
}

/// `meridian-hub routers`: the shards, where their DNS lives, who serves them, their routes.
pub fn render(shards: &[ShardDns], published: &BTreeMap<String, bool>) -> String {
    use std::fmt::Write;
    if shards.is_empty() {
        return "no router shards reported\n".into();
    }
    let mut out = String::new();
    for shard in shards {
        let zone = shard
            .zone
            .as_ref()
            .map_or("no zone".to_string(), |(ns, name)| {
                format!("zone {ns}/{name}")
            });
        let state = match published.get(&shard.record_name) {
            Some(true) => "published",
            Some(false) => "not ready",
            None => "not written",
        };
        let _ = writeln!(
            out,
            "*.{}  ({zone}, DNSRecord {}: {state})",
            shard.suffix, shard.record_name
        );
        for (cluster, router, addresses) in &shard.serving {
            let _ = writeln!(
                out,
                "  served by {cluster}/{router} at {}",
                if addresses.is_empty() {
                    "no address yet".to_string()
                } else {
                    addresses.join(", ")
                }
            );
        }
        for route in &shard.routes {
            let _ = writeln!(
                out,
                "  route {}/{} → {}",
                route.namespace, route.name, route.host
            );
        }
        for problem in &shard.problems {
            let _ = writeln!(out, "  ! {problem}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::model::RecordType;

    fn sighting(cluster: &str, router: &str, dns: &str, addresses: &[&str]) -> ShardSighting {
        ShardSighting {
            cluster: cluster.into(),
            cluster_id: format!("id-{cluster}"),
            labels: BTreeMap::new(),
            shard: RouterShardReport {
                name: router.into(),
                dns: dns.into(),
                addresses: addresses.iter().map(|a| a.to_string()).collect(),
                routes: vec![ShardRoute {
                    namespace: "shop".into(),
                    name: format!("web-{cluster}"),
                    host: format!("shop-web-{cluster}.{dns}"),
                }],
            },
        }
    }

    fn zones() -> Vec<FleetZone> {
        vec![
            FleetZone {
                namespace: "infra".into(),
                zone: ZoneRef {
                    name: "apps".into(),
                    domain: "apps.example.com".into(),
                },
            },
            FleetZone {
                namespace: "other".into(),
                zone: ZoneRef {
                    name: "root".into(),
                    domain: "example.com".into(),
                },
            },
        ]
    }

    #[test]
    fn one_cluster_gets_a_wildcard_tree_in_the_closest_zone() {
        let shards = shard_dns(
            &[sighting(
                "spoke-1",
                "shard1",
                "shard1.apps.example.com.",
                &["192.0.2.10", "192.0.2.11"],
            )],
            &zones(),
        );
        assert_eq!(shards.len(), 1);
        let shard = &shards[0];
        assert_eq!(shard.suffix, "shard1.apps.example.com");
        assert_eq!(shard.zone, Some(("infra".into(), "apps".into())));
        assert_eq!(shard.record_name, record_name("shard1.apps.example.com"));
        assert!(shard.problems.is_empty(), "{:?}", shard.problems);
        let root = shard
            .endpoints
            .iter()
            .find(|e| e.dns_name == "*.shard1.apps.example.com")
            .unwrap();
        assert_eq!(root.record_type, RecordType::Cname);
        let a: Vec<&String> = shard
            .endpoints
            .iter()
            .filter(|e| e.record_type == RecordType::A)
            .flat_map(|e| e.targets.iter())
            .collect();
        assert_eq!(a, ["192.0.2.10", "192.0.2.11"]);
    }

    #[test]
    fn clusters_sharing_a_suffix_are_weighted_and_problems_are_named() {
        let shards = shard_dns(
            &[
                sighting(
                    "spoke-1",
                    "shard1",
                    "shard1.apps.example.com",
                    &["192.0.2.10"],
                ),
                sighting(
                    "spoke-2",
                    "public",
                    "shard1.apps.example.com",
                    &["lb.example.net"],
                ),
                sighting("spoke-3", "lonely", "shard.elsewhere.test", &[]),
            ],
            &zones(),
        );
        let shared = shards
            .iter()
            .find(|s| s.suffix == "shard1.apps.example.com")
            .unwrap();
        let weighted = shared
            .endpoints
            .iter()
            .filter(|e| e.property("weight") == Some("120"))
            .count();
        assert_eq!(weighted, 2, "{:#?}", shared.endpoints);
        assert_eq!(shared.serving.len(), 2);
        assert_eq!(shared.routes.len(), 2);
        let lonely = shards
            .iter()
            .find(|s| s.suffix == "shard.elsewhere.test")
            .unwrap();
        assert!(lonely.endpoints.is_empty());
        assert_eq!(lonely.zone, None);
        assert_eq!(lonely.problems.len(), 2, "{:?}", lonely.problems);
        let text = render(
            &shards,
            &BTreeMap::from([(shared.record_name.clone(), true)]),
        );
        assert!(
            text.contains("*.shard1.apps.example.com  (zone infra/apps"),
            "{text}"
        );
        assert!(text.contains("published"), "{text}");
        assert!(
            text.contains("route shop/web-spoke-1 → shop-web-spoke-1.shard1.apps.example.com"),
            "{text}"
        );
        assert!(
            text.contains("! no ManagedZone holds shard.elsewhere.test"),
            "{text}"
        );
    }
}
