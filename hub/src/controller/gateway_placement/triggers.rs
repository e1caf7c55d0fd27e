//! What wakes a hub Gateway's placement: pure indexes over the caches, and the trigger
//! streams built from them.

use std::sync::Arc;

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use meridian_api::upstream::{
    Gateway, GatewayClass, ListenerSet, ManagedCluster, ManifestWork, PlacementDecision,
};

use super::is_multi_cluster;
use crate::placement::{
    AGENT_WORK, GATEWAY_WORK_LABEL, cluster_downstream_class, gateway_label, tls_secret_names,
};
use meridian_controllers::decide::listener_sets;
use meridian_controllers::runtime::caches::{
    Caches, Change, everything_once, own_changes, triggers,
};
use meridian_controllers::runtime::indexes;

/// Every Gateway once at start, its own changes, and:
/// - a PlacementDecision → the Gateways following its Placement;
/// - a cluster joining or leaving OCM → every multi-cluster Gateway (its work comes or goes at
///   once); a cluster changing the downstream class it names → the Gateways placed on it;
/// - a Secret → the Gateways whose listeners carry it;
/// - a GatewayClass, or a ConfigMap a class names as parameters → every multi-cluster Gateway;
/// - a ManifestWork someone else changed or deleted → the Gateways it serves.
pub fn requests(caches: &Caches) -> Vec<BoxStream<'static, ObjectRef<Gateway>>> {
    let all = caches.gateways.store().clone();
    let multi_cluster = {
        let gateways = all.clone();
        move || multi_cluster_gateways(&gateways.state())
    };
    let by_decision = {
        let gateways = all.clone();
        move |change: &Change<PlacementDecision>| match change.object() {
            Some(decision) => {
                let placements = indexes::placement_of(decision).into_iter().collect();
                indexes::gateways_following(&gateways.state(), &placements)
            }
            None => Vec::new(),
        }
    };
    let by_cluster = {
        let multi_cluster = multi_cluster.clone();
        let (gateways, decisions) = (all.clone(), caches.decisions.store().clone());
        move |change: &Change<ManagedCluster>| match change {
            Change::Applied { old: None, .. } | Change::Deleted(_) => multi_cluster(),
            // Only the Gateways placed on it: a spoke that flips its claim wakes its own.
            Change::Applied {
                old: Some(old),
                new,
            } if class_changed(old, new) => {
                let placements = indexes::placements_deciding(&decisions.state(), &new.name_any());
                indexes::gateways_following(&gateways.state(), &placements)
            }
            _ => Vec::new(),
        }
    };
    let by_secret = {
        let (gateways, sets) = (all.clone(), caches.listener_sets.store().clone());
        move |change: &Change<Secret>| match change.object() {
            Some(secret) => gateways_using_secret(
                &gateways.state(),
                &sets.state(),
                &secret.namespace().unwrap_or_default(),
                &secret.name_any(),
            ),
            None => Vec::new(),
        }
    };
    // A ListenerSet adds, changes or takes away listeners of the Gateway it names (of both,
    // when it moves from one to another).
    let by_listener_set = |change: &Change<ListenerSet>| {
        let Some((before, after)) = change.before_after() else {
            return Vec::new();
        };
        indexes::gateways_of_listener_set_change(before, after)
            .into_iter()
            .map(|(namespace, name)| ObjectRef::new(&name).within(&namespace))
            .collect()
    };
    let by_class = {
        let multi_cluster = multi_cluster.clone();
        move |_: &Change<GatewayClass>| multi_cluster()
    };
    let by_parameters = {
        let classes = caches.gateway_classes.store().clone();
        move |change: &Change<ConfigMap>| match change.object() {
            Some(config_map) if parameters_of_a_class(&classes.state(), config_map) => {
                multi_cluster()
            }
            _ => Vec::new(),
        }
    };
    let by_work = {
        let (gateways, decisions) = (all.clone(), caches.decisions.store().clone());
        move |change: &Change<ManifestWork>| match changed_by_others(change) {
            Some(work) => gateways_served_by(&gateways.state(), &decisions.state(), work),
            None => Vec::new(),
        }
    };
    vec![
        everything_once(&caches.gateways),
        own_changes(&caches.gateways),
        triggers(caches.decisions.subscribe(), all.clone(), by_decision),
        triggers(caches.clusters.subscribe(), all.clone(), by_cluster),
        triggers(caches.secrets.subscribe(), all.clone(), by_secret),
        triggers(caches.gateway_classes.subscribe(), all.clone(), by_class),
        triggers(caches.config_maps.subscribe(), all.clone(), by_parameters),
        triggers(caches.works.subscribe(), all.clone(), by_work),
        triggers(caches.listener_sets.subscribe(), all, by_listener_set),
    ]
}

/// Whether a cluster's own downstream class (label or claim) changed; status updates of
/// other kinds (conditions, heartbeats' resources) wake nothing.
pub fn class_changed(old: &ManagedCluster, new: &ManagedCluster) -> bool {
    let class = |cluster: &ManagedCluster| cluster_downstream_class(Some(cluster), "");
    class(old) != class(new)
}

fn multi_cluster_gateways(gateways: &[Arc<Gateway>]) -> Vec<ObjectRef<Gateway>> {
    gateways
        .iter()
        .filter(|g| is_multi_cluster(g))
        .map(|g| ObjectRef::from_obj(&**g))
        .collect()
}

/// A work whose spec changed, or that was deleted: someone else's doing, to be put back. The
/// work agents' status updates change no spec; the hub's own writes are creations or match
/// what it already decided.
pub fn changed_by_others(change: &Change<ManifestWork>) -> Option<&ManifestWork> {
    match change {
        Change::Applied {
            old: Some(old),
            new,
        } if old.spec != new.spec => Some(new),
        Change::Deleted(old) => Some(old),
        _ => None,
    }
}

/// The hub Gateways whose downstream copies carry the TLS Secret `namespace/secret`: for their
/// own listeners, or for those the ListenerSets they admit add.
pub fn gateways_using_secret(
    gateways: &[Arc<Gateway>],
    sets: &[Arc<ListenerSet>],
    namespace: &str,
    secret: &str,
) -> Vec<ObjectRef<Gateway>> {
    // Only a ListenerSet of the Gateway's own namespace has its Secrets copied: the others
    // are never looked at, once per Secret change rather than once per Gateway.
    let own: Vec<&Arc<ListenerSet>> = sets
        .iter()
        .filter(|s| s.namespace().as_deref() == Some(namespace))
        .collect();
    gateways
        .iter()
        .filter(|g| is_multi_cluster(g) && g.namespace().as_deref() == Some(namespace))
        .filter(|g| {
            let naming: Vec<Arc<ListenerSet>> = own
                .iter()
                .copied()
                .filter(|s| {
                    indexes::listener_set_group(s).as_deref()
                        == Some(indexes::group_key(namespace, &g.name_any()).as_str())
                })
                .cloned()
                .collect();
            let added = listener_sets::attached(g, &naming).listeners;
            tls_secret_names(g, &added)
                .iter()
                .any(|name| name == secret)
        })
        .map(|g| ObjectRef::from_obj(&**g))
        .collect()
}

/// Whether a ConfigMap is the parameters of some GatewayClass.
pub fn parameters_of_a_class(classes: &[Arc<GatewayClass>], config_map: &ConfigMap) -> bool {
    classes.iter().any(|class| {
        class.spec.parameters_ref.as_ref().is_some_and(|p| {
            p.kind == "ConfigMap"
                && p.name == config_map.name_any()
                && p.namespace == config_map.namespace()
        })
    })
}

/// The hub Gateways a ManifestWork serves: the Gateway whose copy it carries, or for the
/// agent's work, every Gateway placed on its cluster (each installs the agent there).
pub fn gateways_served_by(
    gateways: &[Arc<Gateway>],
    decisions: &[Arc<PlacementDecision>],
    work: &ManifestWork,
) -> Vec<ObjectRef<Gateway>> {
    let cluster = work.namespace().unwrap_or_default();
    if work.name_any() == AGENT_WORK {
        let placements = indexes::placements_deciding(decisions, &cluster);
        return indexes::gateways_following(gateways, &placements);
    }
    let Some(label) = work.labels().get(GATEWAY_WORK_LABEL) else {
        return Vec::new();
    };
    gateways
        .iter()
        .filter(|g| gateway_label(&g.namespace().unwrap_or_default(), &g.name_any()) == *label)
        .map(|g| ObjectRef::from_obj(&**g))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn from_json<K: serde::de::DeserializeOwned>(value: serde_json::Value) -> Arc<K> {
        Arc::new(serde_json::from_value(value).expect("a valid object"))
    }

    #[test]
    fn a_cluster_wakes_placement_when_its_class_changes_not_on_other_updates() {
        let cluster = |labels: serde_json::Value, claims: serde_json::Value, heard: &str| {
            from_json::<ManagedCluster>(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
                "metadata": { "name": "spoke-1", "labels": labels },
                "spec": { "hubAcceptsClient": true },
                "status": { "clusterClaims": claims, "conditions": [{
                    "type": "ManagedClusterConditionAvailable", "status": "True", "reason": "x",
                    "message": "", "lastTransitionTime": heard,
                }] },
            }))
        };
        let plain = cluster(json!({}), json!([]), "2026-01-01T00:00:00Z");
        let heard_later = cluster(json!({}), json!([]), "2026-01-01T00:05:00Z");
        let labelled = cluster(
            json!({ "meridian.dev/downstream-gateway-class": "eg" }),
            json!([]),
            "2026-01-01T00:00:00Z",
        );
        let claimed = cluster(
            json!({}),
            json!([{ "name": "gatewayclass.meridian.dev", "value": "traefik" }]),
            "2026-01-01T00:00:00Z",
        );
        let other_claim = cluster(
            json!({ "kuadrant.io/lb-attribute-geo-code": "IE" }),
            json!([{ "name": "platform.open-cluster-management.io", "value": "AWS" }]),
            "2026-01-01T00:00:00Z",
        );
        assert!(!class_changed(&plain, &heard_later));
        assert!(!class_changed(&plain, &other_claim));
        assert!(class_changed(&plain, &labelled));
        assert!(class_changed(&plain, &claimed));
        assert!(class_changed(&labelled, &claimed));
    }

    fn gateway(namespace: &str, name: &str, placement: &str, certificate: &str) -> Arc<Gateway> {
        from_json(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": { "name": name, "namespace": namespace,
                          "labels": { meridian_api::labels::PLACEMENT_LABEL: placement } },
            "spec": {
                "gatewayClassName": meridian_api::upstream::MULTI_CLUSTER_GATEWAY_CLASS,
                "listeners": [{ "name": "api", "hostname": "api.example.com", "port": 443, "protocol": "HTTPS",
                                "tls": { "certificateRefs": [{ "name": certificate }] } }],
            },
        }))
    }

    #[test]
    fn a_secret_a_class_parameters_and_works_wake_only_the_gateways_they_serve() {
        let gateways = [
            gateway("gw", "web", "everywhere", "web-cert"),
            gateway("gw", "api", "europe", "api-cert"),
            gateway("other", "web", "everywhere", "web-cert"),
        ];
        assert_eq!(
            meridian_testkit::fixtures::names(gateways_using_secret(
                &gateways,
                &[],
                "gw",
                "web-cert"
            )),
            ["gw/web"]
        );
        assert_eq!(
            meridian_testkit::fixtures::names(gateways_using_secret(
                &gateways,
                &[],
                "gw",
                "nothing"
            )),
            Vec::<String>::new()
        );
        // A ListenerSet's certificate wakes the Gateway that admits it, and no other.
        let set = |namespace: &str| -> Arc<ListenerSet> {
            from_json(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
                "metadata": { "name": "extra", "namespace": namespace },
                "spec": {
                    "parentRef": { "name": "web", "namespace": "gw" },
                    "listeners": [{ "name": "a", "hostname": "a.example.com", "port": 443, "protocol": "HTTPS",
                                    "tls": { "certificateRefs": [{ "name": "set-cert" }] } }],
                },
            }))
        };
        let mut admitting = (*gateway("gw", "web", "everywhere", "web-cert")).clone();
        admitting.spec.extra.insert(
            "allowedListeners".into(),
            json!({ "namespaces": { "from": "Same" } }),
        );
        let with_admitting = [Arc::new(admitting), gateways[1].clone()];
        let names = |gateways: &[Arc<Gateway>], sets: &[Arc<ListenerSet>]| {
            meridian_testkit::fixtures::names(gateways_using_secret(
                gateways, sets, "gw", "set-cert",
            ))
        };
        assert_eq!(names(&with_admitting, &[set("gw")]), ["gw/web"]);
        // Not admitted (the default), or from another namespace (whose Secrets are not copied).
        assert_eq!(names(&gateways, &[set("gw")]), Vec::<String>::new());
        assert_eq!(
            names(&with_admitting, &[set("mallory")]),
            Vec::<String>::new()
        );

        let class: Arc<GatewayClass> = from_json(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": { "name": meridian_api::upstream::MULTI_CLUSTER_GATEWAY_CLASS },
            "spec": { "controllerName": "meridian.dev/hub",
                      "parametersRef": { "group": "", "kind": "ConfigMap", "name": "downstream", "namespace": "meridian" } },
        }));
        let config_map = |namespace: &str, name: &str| {
            let mut c = ConfigMap::default();
            c.metadata.namespace = Some(namespace.into());
            c.metadata.name = Some(name.into());
            c
        };
        let classes = [class];
        assert!(parameters_of_a_class(
            &classes,
            &config_map("meridian", "downstream")
        ));
        assert!(!parameters_of_a_class(
            &classes,
            &config_map("other", "downstream")
        ));
        assert!(!parameters_of_a_class(
            &classes,
            &config_map("meridian", "unrelated")
        ));

        let decision: Arc<PlacementDecision> = from_json(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
            "metadata": { "name": "europe-decision-1", "namespace": "gw",
                          "labels": { meridian_api::labels::PLACEMENT_LABEL: "europe" } },
            "status": { "decisions": [{ "clusterName": "eu-1", "reason": "" }] },
        }));
        let decisions = [decision];
        let work = |cluster: &str, name: &str, label: Option<&str>| -> ManifestWork {
            let mut work = ManifestWork::new(name, Default::default());
            work.metadata.namespace = Some(cluster.into());
            work.metadata.labels =
                label.map(|l| [(GATEWAY_WORK_LABEL.to_string(), l.to_string())].into());
            work
        };
        let cases = [
            (
                work("eu-1", "gateway-gw-web", Some("gw.web")),
                vec!["gw/web"],
                "a Gateway's copy",
            ),
            (
                work("eu-1", AGENT_WORK, None),
                vec!["gw/api"],
                "the agent, on a cluster placed by europe",
            ),
            (
                work("us-1", AGENT_WORK, None),
                vec![],
                "the agent, on a cluster nobody placed",
            ),
            (
                work("eu-1", "unrelated", None),
                vec![],
                "someone else's work",
            ),
        ];
        for (work, expected, what) in cases {
            assert_eq!(
                meridian_testkit::fixtures::names(gateways_served_by(&gateways, &decisions, &work)),
                expected,
                "{what}"
            );
        }
    }

    #[test]
    fn only_someone_elses_change_to_a_work_is_one_to_undo() {
        let mut work = ManifestWork::new("gateway-gw-web", Default::default());
        work.metadata.namespace = Some("eu-1".into());
        let work = Arc::new(work);
        let mut status_only = (*work).clone();
        status_only.status = Some(Default::default());
        let mut edited = (*work).clone();
        edited
            .spec
            .workload
            .manifests
            .push(json!({ "kind": "ConfigMap" }));
        let cases = [
            (
                Change::Applied {
                    old: None,
                    new: work.clone(),
                },
                false,
                "created (by the hub)",
            ),
            (
                Change::Applied {
                    old: Some(work.clone()),
                    new: Arc::new(status_only),
                },
                false,
                "a status update",
            ),
            (
                Change::Applied {
                    old: Some(work.clone()),
                    new: Arc::new(edited),
                },
                true,
                "an edited spec",
            ),
            (Change::Deleted(work.clone()), true, "deleted"),
            (Change::Relisted, false, "a relist (handled by the trigger)"),
        ];
        for (change, expected, what) in cases {
            assert_eq!(changed_by_others(&change).is_some(), expected, "{what}");
        }
    }
}
