//! The pure middle of a cluster's Gateway bundle: every hub Gateway placed on a cluster goes to
//! the spoke in one ManifestWork, `meridian-gateways` (more, `meridian-gateways-1` and on, past
//! what one work may carry), instead of a work per Gateway and cluster. At 3,000 clusters and
//! 6,000 Gateways placed on 5 each, that is 3,000 works instead of 30,000: a work is what the
//! API server, etcd and every work agent pay for, whatever it carries.
//!
//! Each Gateway is a [`Part`] of the bundle: its manifests (downstream Namespace, Gateway,
//! ListenerSet copies, TLS Secrets) and, once it is leaving the cluster, since when. Which
//! manifests are whose is written on the bundle ([`BundleEntry`]), so a part can be kept exactly
//! as it is when nothing may be decided about it (its Placement undecided, its Gateway unread).
//!
//! OCM's webhook refuses a work whose manifests pass 500 KiB, or that holds one object twice:
//! a manifest two Gateways share (their Namespace, a TLS Secret) is written once, and a bundle is
//! filled to [`BUNDLE_LIMIT`]. A part stays in the bundle that holds it while that bundle has room
//! (moving it would make two works own it for a while, and a work being rewritten for nothing);
//! a new one goes to the first bundle with room.

use std::collections::{BTreeMap, BTreeSet};

use meridian_api::labels::{BundleEntry, GATEWAY_BUNDLE_ENTRIES, GATEWAY_BUNDLE_LABEL};
use serde_json::{Value, json};

/// Name of a cluster's first bundle; the others add `-1`, `-2`…
pub const BUNDLE_WORK: &str = "meridian-gateways";

/// How much of OCM's 500 KiB a bundle's manifests fill, leaving room for the work's own fields
/// and for a Gateway that grows before it is moved.
pub const BUNDLE_LIMIT: usize = 400 * 1024;

/// The name of bundle `shard`.
pub fn bundle_name(shard: usize) -> String {
    match shard {
        0 => BUNDLE_WORK.to_string(),
        shard => format!("{BUNDLE_WORK}-{shard}"),
    }
}

/// Which bundle a work's name is, if it is one.
pub fn bundle_shard(name: &str) -> Option<usize> {
    let rest = name.strip_prefix(BUNDLE_WORK)?;
    if rest.is_empty() {
        return Some(0);
    }
    let shard: usize = rest.strip_prefix('-')?.parse().ok()?;
    // `meridian-gateways-01` is nobody's name for shard 1.
    (shard > 0 && bundle_name(shard) == name).then_some(shard)
}

/// One hub Gateway's share of a cluster's bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    /// Its work label ([`crate::placement::gateway_label`]).
    pub label: String,
    /// `<namespace>/<name>` of the hub Gateway.
    pub gateway: String,
    pub manifests: Vec<Value>,
    /// Since when it is leaving the cluster (RFC 3339), if it is.
    pub leaving_since: Option<String>,
}

/// What names a manifest in a work: `<kind>/<namespace>/<name>` (OCM refuses a work naming one
/// object twice).
pub fn manifest_id(manifest: &Value) -> String {
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    format!(
        "{}/{}/{}",
        text(&manifest["kind"]),
        text(&manifest["metadata"]["namespace"]),
        text(&manifest["metadata"]["name"])
    )
}

/// The parts a cluster's bundles hold now, with the bundle holding each. An entry naming a
/// manifest its bundle lacks keeps those it has.
pub fn held_parts(bundles: &[(usize, &Value)]) -> BTreeMap<String, (usize, Part)> {
    let mut held = BTreeMap::new();
    for (shard, work) in bundles {
        let by_id: BTreeMap<String, &Value> = work["spec"]["workload"]["manifests"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|manifest| (manifest_id(manifest), manifest))
            .collect();
        let annotations: Option<BTreeMap<String, String>> =
            serde_json::from_value(work["metadata"]["annotations"].clone()).ok();
        for (label, entry) in meridian_api::labels::bundle_entries(annotations.as_ref()) {
            let manifests = entry
                .manifests
                .iter()
                .filter_map(|id| by_id.get(id).map(|m| (*m).clone()))
                .collect();
            let part = Part {
                label: label.clone(),
                gateway: entry.gateway,
                manifests,
                leaving_since: entry.leaving_since,
            };
            held.insert(label, (*shard, part));
        }
    }
    held
}

/// A Gateway's own work (what hubs before bundles wrote, labelled `label`) as a part: its
/// Gateway from the downstream copy's name, its leaving mark, and of its manifests those a hub
/// writes for a Gateway (its downstream Namespace, and Gateways, ListenerSets and Secrets in
/// it): a work someone else labelled carries nothing more into the hub's bundle.
pub fn part_of_own_work(label: &str, work: &Value, leaving_since: Option<String>) -> Part {
    let manifests: Vec<Value> = work["spec"]["workload"]["manifests"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let downstream = manifests.iter().find(|m| m["kind"] == "Gateway").map(|m| {
        (
            m["metadata"]["namespace"].as_str().unwrap_or_default(),
            m["metadata"]["name"].as_str().unwrap_or_default(),
        )
    });
    let Some((namespace, name)) = downstream else {
        return Part {
            label: label.to_string(),
            gateway: String::new(),
            manifests: Vec::new(),
            leaving_since,
        };
    };
    let hub_namespace = namespace.strip_prefix("kuadrant-").unwrap_or(namespace);
    let a_gateways = |m: &&Value| match m["kind"].as_str() {
        Some("Namespace") => m["metadata"]["name"] == namespace,
        Some("Gateway" | "ListenerSet" | "Secret") => m["metadata"]["namespace"] == namespace,
        _ => false,
    };
    Part {
        label: label.to_string(),
        gateway: format!("{hub_namespace}/{name}"),
        manifests: manifests.iter().filter(a_gateways).cloned().collect(),
        leaving_since,
    }
}

/// Which bundle each part goes to: the one holding it (`held`) while it has room under `limit`,
/// else the first with room, else a new one. The smallest parts keep their places first, so
/// one that outgrew its bundle is the one to move, not those beside it; ties go by label, so
/// the answer is the same whatever order the parts came in.
pub fn assign(
    parts: &[Part],
    held: &BTreeMap<String, usize>,
    limit: usize,
) -> BTreeMap<String, usize> {
    let size = |part: &Part| -> usize { part.manifests.iter().map(|m| m.to_string().len()).sum() };
    let mut sorted: Vec<(usize, &Part)> = parts.iter().map(|p| (size(p), p)).collect();
    sorted.sort_by(|(a_size, a), (b_size, b)| (a_size, &a.label).cmp(&(b_size, &b.label)));
    let sorted: Vec<&Part> = sorted.into_iter().map(|(_, part)| part).collect();
    let mut bundles: Vec<Fill> = Vec::new();
    let mut placed = BTreeMap::new();
    let mut unplaced = Vec::new();
    for part in &sorted {
        match held.get(&part.label) {
            Some(&shard) => {
                while bundles.len() <= shard {
                    bundles.push(Fill::default());
                }
                if bundles[shard].fits(part, limit) {
                    bundles[shard].add(part);
                    placed.insert(part.label.clone(), shard);
                } else {
                    unplaced.push(*part);
                }
            }
            None => unplaced.push(*part),
        }
    }
    for part in unplaced {
        let shard = match bundles.iter().position(|b| b.fits(part, limit)) {
            Some(shard) => shard,
            None => {
                bundles.push(Fill::default());
                bundles.len() - 1
            }
        };
        bundles[shard].add(part);
        placed.insert(part.label.clone(), shard);
    }
    placed
}

/// What a bundle holds while parts are assigned: the manifests (once each) and their size.
#[derive(Default)]
struct Fill {
    ids: BTreeSet<String>,
    bytes: usize,
}

impl Fill {
    fn added_bytes(&self, part: &Part) -> usize {
        part.manifests
            .iter()
            .filter(|m| !self.ids.contains(&manifest_id(m)))
            .map(|m| m.to_string().len())
            .sum()
    }

    /// An empty bundle takes any part: one too large for any bundle is refused by OCM, which
    /// says so in the work's status, rather than never written.
    fn fits(&self, part: &Part, limit: usize) -> bool {
        self.ids.is_empty() || self.bytes + self.added_bytes(part) <= limit
    }

    fn add(&mut self, part: &Part) {
        self.bytes += self.added_bytes(part);
        self.ids.extend(part.manifests.iter().map(manifest_id));
    }
}

/// The cluster's bundles holding `parts`, by shard (see [`assign`]): each with the manifests of
/// its parts once each, Namespaces first (the work agent applies them in order), the entries
/// saying whose they are, and the downstream Namespaces orphaned (other Gateways of the same
/// hub namespace, in another bundle or placed again later, share them).
pub fn cluster_bundles(
    cluster: &str,
    parts: &[Part],
    held: &BTreeMap<String, usize>,
    limit: usize,
) -> BTreeMap<usize, Value> {
    let assigned = assign(parts, held, limit);
    let mut shards: BTreeMap<usize, Vec<&Part>> = BTreeMap::new();
    for part in parts {
        if let Some(&shard) = assigned.get(&part.label) {
            shards.entry(shard).or_default().push(part);
        }
    }
    shards
        .into_iter()
        .map(|(shard, parts)| (shard, bundle(cluster, shard, &parts)))
        .collect()
}

fn bundle(cluster: &str, shard: usize, parts: &[&Part]) -> Value {
    let mut manifests: BTreeMap<(bool, String), &Value> = BTreeMap::new();
    let mut entries: BTreeMap<&str, BundleEntry> = BTreeMap::new();
    for part in parts {
        let mut ids: Vec<String> = part.manifests.iter().map(manifest_id).collect();
        for (manifest, id) in part.manifests.iter().zip(&ids) {
            // The first part (in label order) to carry an object gives it; the copies two
            // Gateways share are the same object.
            manifests
                .entry((manifest["kind"] != "Namespace", id.clone()))
                .or_insert(manifest);
        }
        ids.sort();
        ids.dedup();
        entries.insert(
            &part.label,
            BundleEntry {
                gateway: part.gateway.clone(),
                manifests: ids,
                leaving_since: part.leaving_since.clone(),
            },
        );
    }
    let orphaned: Vec<Value> = manifests
        .values()
        .filter(|m| m["kind"] == "Namespace")
        .map(|m| json!({ "group": "", "resource": "namespaces", "name": m["metadata"]["name"] }))
        .collect();
    let manifests: Vec<&Value> = manifests.into_values().collect();
    json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {
            "name": bundle_name(shard),
            "namespace": cluster,
            "labels": { GATEWAY_BUNDLE_LABEL: "true" },
            "annotations": {
                GATEWAY_BUNDLE_ENTRIES: serde_json::to_string(&entries).expect("entries serialize"),
            },
        },
        "spec": {
            "workload": { "manifests": manifests },
            "deleteOption": {
                "propagationPolicy": "SelectivelyOrphan",
                "selectivelyOrphans": { "orphaningRules": orphaned },
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(label: &str, namespace: &str, secrets: &[(&str, usize)]) -> Part {
        let downstream = format!("kuadrant-{namespace}");
        let mut manifests = vec![
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": downstream } }),
            json!({ "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                    "metadata": { "name": label, "namespace": downstream }, "spec": {} }),
        ];
        for (secret, size) in secrets {
            manifests.push(json!({ "apiVersion": "v1", "kind": "Secret",
                "metadata": { "name": secret, "namespace": downstream },
                "data": { "tls.crt": "x".repeat(*size) } }));
        }
        Part {
            label: label.to_string(),
            gateway: format!("{namespace}/{label}"),
            manifests,
            leaving_since: None,
        }
    }

    fn ids(work: &Value) -> Vec<String> {
        work["spec"]["workload"]["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(manifest_id)
            .collect()
    }

    #[test]
    fn bundle_names_round_trip_and_nothing_else_is_a_bundle() {
        for shard in [0, 1, 2, 17] {
            assert_eq!(bundle_shard(&bundle_name(shard)), Some(shard));
        }
        for other in [
            "meridian-gateways-0",
            "meridian-gateways-01",
            "meridian-gateways-x",
            "meridian-gatewaysx",
            "meridian-agent",
            "gateway-shop-web-abc",
        ] {
            assert_eq!(bundle_shard(other), None, "{other}");
        }
    }

    #[test]
    fn shared_manifests_are_written_once_namespaces_first_and_orphaned() {
        let parts = [
            part("shop.web", "shop", &[("wildcard", 10)]),
            part("shop.api", "shop", &[("wildcard", 10), ("api", 10)]),
            part("blog.web", "blog", &[]),
        ];
        let bundles = cluster_bundles("eu-1", &parts, &BTreeMap::new(), BUNDLE_LIMIT);
        assert_eq!(bundles.len(), 1);
        let work = &bundles[&0];
        assert_eq!(work["metadata"]["name"], "meridian-gateways");
        assert_eq!(work["metadata"]["namespace"], "eu-1");
        assert_eq!(
            ids(work),
            [
                "Namespace//kuadrant-blog",
                "Namespace//kuadrant-shop",
                "Gateway/kuadrant-blog/blog.web",
                "Gateway/kuadrant-shop/shop.api",
                "Gateway/kuadrant-shop/shop.web",
                "Secret/kuadrant-shop/api",
                "Secret/kuadrant-shop/wildcard",
            ]
        );
        let rules = &work["spec"]["deleteOption"]["selectivelyOrphans"]["orphaningRules"];
        assert_eq!(
            rules,
            &json!([
                { "group": "", "resource": "namespaces", "name": "kuadrant-blog" },
                { "group": "", "resource": "namespaces", "name": "kuadrant-shop" },
            ])
        );
        // Each entry lists its own, the shared ones included; reading the bundle back gives
        // each part exactly as it was given.
        let held = held_parts(&[(0, work)]);
        assert_eq!(held.len(), 3);
        for given in &parts {
            let (shard, read) = &held[&given.label];
            assert_eq!(*shard, 0);
            assert_eq!(read.gateway, given.gateway);
            let sorted = |manifests: &[Value]| {
                let mut m: Vec<String> = manifests.iter().map(|m| m.to_string()).collect();
                m.sort();
                m
            };
            assert_eq!(sorted(&read.manifests), sorted(&given.manifests));
        }
    }

    #[test]
    fn the_same_parts_in_any_order_make_the_same_bundles() {
        let mut parts: Vec<Part> = (0..12)
            .map(|i| {
                part(
                    &format!("ns{}.gw{i}", i % 3),
                    &format!("ns{}", i % 3),
                    &[("c", 900)],
                )
            })
            .collect();
        let first = cluster_bundles("eu-1", &parts, &BTreeMap::new(), 4_000);
        parts.reverse();
        parts.swap(2, 7);
        assert_eq!(
            cluster_bundles("eu-1", &parts, &BTreeMap::new(), 4_000),
            first
        );
        assert!(first.len() > 1, "the limit splits them: {}", first.len());
    }

    #[test]
    fn bundles_stay_under_the_limit_and_parts_stay_where_they_are() {
        let limit = 10_000;
        let parts: Vec<Part> = (0..20)
            .map(|i| {
                part(
                    &format!("shop.gw{i:02}"),
                    "shop",
                    &[(&format!("c{i}"), 1_500)],
                )
            })
            .collect();
        let size = |work: &Value| -> usize {
            work["spec"]["workload"]["manifests"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m.to_string().len())
                .sum()
        };
        let first = cluster_bundles("eu-1", &parts, &BTreeMap::new(), limit);
        assert!(first.len() >= 3, "{}", first.len());
        for work in first.values() {
            assert!(size(work) <= limit, "{}", size(work));
        }
        let held: BTreeMap<String, usize> =
            held_parts(&first.iter().map(|(s, w)| (*s, w)).collect::<Vec<_>>())
                .into_iter()
                .map(|(label, (shard, _))| (label, shard))
                .collect();
        assert_eq!(held.len(), 20);
        // One Gateway goes (the first bundle gets room) and a new one comes: every other stays
        // in its bundle, and the new one takes the room.
        let mut next: Vec<Part> = parts[1..].to_vec();
        next.push(part("shop.gw99", "shop", &[("c99", 1_500)]));
        let again = assign(&next, &held, limit);
        for part in &parts[1..] {
            assert_eq!(again[&part.label], held[&part.label], "{}", part.label);
        }
        assert_eq!(again["shop.gw99"], held["shop.gw00"]);
        // A part that outgrew its bundle moves to one with room, and the others stay.
        let mut grown = parts.clone();
        grown[0] = part("shop.gw00", "shop", &[("c0", 6_000)]);
        let moved = assign(&grown, &held, limit);
        assert_ne!(moved["shop.gw00"], held["shop.gw00"]);
        for part in &parts[1..] {
            assert_eq!(moved[&part.label], held[&part.label], "{}", part.label);
        }
    }

    #[test]
    fn a_part_too_large_for_any_bundle_gets_one_of_its_own() {
        let parts = [
            part("shop.small", "shop", &[("a", 10)]),
            part("shop.huge", "shop", &[("b", 50_000)]),
        ];
        let bundles = cluster_bundles("eu-1", &parts, &BTreeMap::new(), 10_000);
        assert_eq!(bundles.len(), 2);
        let huge = held_parts(&bundles.iter().map(|(s, w)| (*s, w)).collect::<Vec<_>>());
        assert_ne!(huge["shop.huge"].0, huge["shop.small"].0);
    }

    #[test]
    fn leaving_marks_are_kept_per_gateway() {
        let mut leaving = part("shop.old", "shop", &[]);
        leaving.leaving_since = Some("2026-12-01T10:00:00Z".into());
        let parts = [part("shop.web", "shop", &[]), leaving];
        let bundles = cluster_bundles("eu-1", &parts, &BTreeMap::new(), BUNDLE_LIMIT);
        let held = held_parts(&[(0, &bundles[&0])]);
        assert_eq!(
            held["shop.old"].1.leaving_since.as_deref(),
            Some("2026-12-01T10:00:00Z")
        );
        assert_eq!(held["shop.web"].1.leaving_since, None);
    }

    #[test]
    fn a_gateway_s_own_work_is_read_as_its_part_and_nothing_more() {
        let own = json!({ "spec": { "workload": { "manifests": [
            { "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "kuadrant-shop" } },
            { "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
              "metadata": { "name": "web", "namespace": "kuadrant-shop" } },
            { "apiVersion": "v1", "kind": "Secret",
              "metadata": { "name": "cert", "namespace": "kuadrant-shop" } },
            // What someone else added to a work they labelled: not carried into the bundle.
            { "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
              "metadata": { "name": "everyone-is-admin" } },
            { "apiVersion": "v1", "kind": "Secret",
              "metadata": { "name": "stolen", "namespace": "kube-system" } },
            { "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "kube-system" } },
        ] } } });
        let part = part_of_own_work("shop.web", &own, Some("2026-12-01T10:00:00Z".into()));
        assert_eq!(part.gateway, "shop/web");
        assert_eq!(
            part.manifests.iter().map(manifest_id).collect::<Vec<_>>(),
            [
                "Namespace//kuadrant-shop",
                "Gateway/kuadrant-shop/web",
                "Secret/kuadrant-shop/cert"
            ]
        );
        assert_eq!(part.leaving_since.as_deref(), Some("2026-12-01T10:00:00Z"));
        // No Gateway in it: nothing to carry.
        let empty = json!({ "spec": { "workload": { "manifests": [
            { "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "kuadrant-shop" } },
        ] } } });
        assert!(
            part_of_own_work("shop.web", &empty, None)
                .manifests
                .is_empty()
        );
    }

    #[test]
    fn a_bundle_with_an_unreadable_list_holds_no_parts() {
        let mut work = json!({ "spec": { "workload": { "manifests": [] } },
                               "metadata": { "annotations": { GATEWAY_BUNDLE_ENTRIES: "not json" } } });
        assert!(held_parts(&[(0, &work)]).is_empty());
        work["metadata"]["annotations"] = json!(null);
        assert!(held_parts(&[(0, &work)]).is_empty());
    }
}
