//! What wakes a hub Gateway's placement: pure indexes over the caches, and the trigger
//! streams built from them.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::StreamExt;
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
use meridian_api::labels::GATEWAY_BUNDLE_LABEL;
use meridian_controllers::decide::listener_sets;
use meridian_controllers::runtime::caches::{
    Caches, Change, everything_once, own_changes, triggers,
};
use meridian_controllers::runtime::indexes;

/// Every Gateway once at start, its own changes, and a GatewayClass's: a Gateway's own pass
/// accepts its class.
pub fn requests(caches: &Caches) -> Vec<BoxStream<'static, ObjectRef<Gateway>>> {
    let all = caches.gateways.store().clone();
    let by_class = {
        let gateways = all.clone();
        move |_: &Change<GatewayClass>| multi_cluster_gateways(&gateways.state())
    };
    vec![
        everything_once(&caches.gateways),
        own_changes(&caches.gateways),
        triggers(caches.gateway_classes.subscribe(), all, by_class),
    ]
}

/// What wakes a cluster's pass (its bundle, its agent): every cluster once at start, and
/// - the cluster joining OCM, or changing the downstream class it names;
/// - a PlacementDecision → the clusters it chose or let go;
/// - a Gateway's change beyond its status, its TLS Secret, a ListenerSet naming it → the
///   clusters it is placed on or held by;
/// - a GatewayClass's change beyond its status, or a ConfigMap a class names → every cluster;
/// - a work of the hub's in the cluster's namespace changed or deleted by someone else;
/// - `woken`: the clusters holding a Gateway a list confirmed deleted.
pub fn cluster_requests(
    caches: &Arc<Caches>,
    woken: tokio::sync::mpsc::UnboundedReceiver<ObjectRef<ManagedCluster>>,
) -> Vec<BoxStream<'static, ObjectRef<ManagedCluster>>> {
    let all = caches.clusters.store().clone();
    let every_cluster = {
        let clusters = all.clone();
        move || {
            clusters
                .state()
                .iter()
                .map(|c| ObjectRef::from_obj(&**c))
                .collect::<Vec<_>>()
        }
    };
    let by_cluster = |change: &Change<ManagedCluster>| match change {
        Change::Applied { old: None, new } => vec![ObjectRef::from_obj(&**new)],
        Change::Applied {
            old: Some(old),
            new,
        } if class_changed(old, new) => vec![ObjectRef::from_obj(&**new)],
        _ => Vec::new(),
    };
    let by_decision = |change: &Change<PlacementDecision>| {
        let Some((before, after)) = change.before_after() else {
            return Vec::new();
        };
        clusters_changed(before, after)
            .iter()
            .map(|c| ObjectRef::new(c))
            .collect()
    };
    let by_gateway = {
        let caches = caches.clone();
        move |change: &Change<Gateway>| match change {
            Change::Applied { old, new } if indexes::changed_beyond_status(old.as_deref(), new) => {
                clusters_of(&caches, new)
            }
            _ => Vec::new(),
        }
    };
    let by_secret = {
        let caches = caches.clone();
        move |change: &Change<Secret>| match change.object() {
            Some(secret) => gateways_using_secret(
                &caches.gateways.state(),
                &caches.listener_sets.state(),
                &secret.namespace().unwrap_or_default(),
                &secret.name_any(),
            )
            .iter()
            .filter_map(|g| caches.gateways.get(g.namespace.as_deref(), &g.name))
            .flat_map(|g| clusters_of(&caches, &g))
            .collect(),
            None => Vec::new(),
        }
    };
    // A ListenerSet adds, changes or takes away listeners of the Gateway it names (of both,
    // when it moves from one to another).
    let by_listener_set = {
        let caches = caches.clone();
        move |change: &Change<ListenerSet>| {
            let Some((before, after)) = change.before_after() else {
                return Vec::new();
            };
            indexes::gateways_of_listener_set_change(before, after)
                .into_iter()
                .filter_map(|(namespace, name)| caches.gateways.get(Some(&namespace), &name))
                .flat_map(|g| clusters_of(&caches, &g))
                .collect()
        }
    };
    let by_class = {
        let every_cluster = every_cluster.clone();
        move |change: &Change<GatewayClass>| match change {
            Change::Applied { old, new }
                if !indexes::changed_beyond_status(old.as_deref(), new) =>
            {
                Vec::new()
            }
            _ => every_cluster(),
        }
    };
    let by_parameters = {
        let classes = caches.gateway_classes.store().clone();
        move |change: &Change<ConfigMap>| match change.object() {
            Some(config_map) if parameters_of_a_class(&classes.state(), config_map) => {
                every_cluster()
            }
            _ => Vec::new(),
        }
    };
    let by_work = |change: &Change<ManifestWork>| match changed_by_others(change) {
        Some(work) if is_the_hubs(work) => work
            .namespace()
            .map(|cluster| vec![ObjectRef::new(&cluster)])
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    let woken = futures::stream::unfold(woken, |mut woken| async move {
        woken.recv().await.map(|cluster| (cluster, woken))
    })
    .boxed();
    vec![
        everything_once(&caches.clusters),
        triggers(caches.clusters.subscribe(), all.clone(), by_cluster),
        triggers(caches.decisions.subscribe(), all.clone(), by_decision),
        triggers(caches.gateways.subscribe(), all.clone(), by_gateway),
        triggers(caches.secrets.subscribe(), all.clone(), by_secret),
        triggers(caches.gateway_classes.subscribe(), all.clone(), by_class),
        triggers(caches.config_maps.subscribe(), all.clone(), by_parameters),
        triggers(caches.works.subscribe(), all.clone(), by_work),
        triggers(caches.listener_sets.subscribe(), all, by_listener_set),
        woken,
    ]
}

/// The clusters a Gateway concerns: those its Placement chose, and those whose works hold it.
pub fn clusters_of(caches: &Caches, gateway: &Gateway) -> Vec<ObjectRef<ManagedCluster>> {
    let namespace = gateway.namespace().unwrap_or_default();
    let mut clusters: BTreeSet<String> = indexes::gateway_placement(gateway)
        .map(|(namespace, placement)| {
            let decisions = caches
                .decisions
                .group(&indexes::group_key(namespace, placement));
            indexes::decided_clusters(&decisions, namespace, placement)
        })
        .unwrap_or_default();
    clusters.extend(
        caches
            .works
            .group(&gateway_label(&namespace, &gateway.name_any()))
            .iter()
            .filter_map(|work| work.namespace()),
    );
    clusters.iter().map(|c| ObjectRef::new(c)).collect()
}

/// The clusters a change of a PlacementDecision chose or let go (`before` is none for a new
/// one, `after` none for a deleted one).
pub fn clusters_changed(
    before: Option<&PlacementDecision>,
    after: Option<&PlacementDecision>,
) -> BTreeSet<String> {
    let chosen = |decision: Option<&PlacementDecision>| -> BTreeSet<String> {
        decision
            .and_then(|d| d.status.as_ref())
            .iter()
            .flat_map(|s| &s.decisions)
            .map(|d| d.cluster_name.clone())
            .filter(|name| !name.is_empty())
            .collect()
    };
    let (before, after) = (chosen(before), chosen(after));
    before.symmetric_difference(&after).cloned().collect()
}

/// Whether a work is one the hub writes for placement: a bundle, a Gateway's own work (an
/// earlier hub's), or the agent's.
fn is_the_hubs(work: &ManifestWork) -> bool {
    work.labels().contains_key(GATEWAY_BUNDLE_LABEL)
        || work.labels().contains_key(GATEWAY_WORK_LABEL)
        || work.name_any() == AGENT_WORK
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

        let work = |cluster: &str, name: &str, label: Option<(&str, &str)>| -> ManifestWork {
            let mut work = ManifestWork::new(name, Default::default());
            work.metadata.namespace = Some(cluster.into());
            work.metadata.labels = label.map(|(k, v)| [(k.to_string(), v.to_string())].into());
            work
        };
        let cases = [
            (
                work(
                    "eu-1",
                    "gateway-gw-web",
                    Some((GATEWAY_WORK_LABEL, "gw.web")),
                ),
                true,
                "a Gateway's own work",
            ),
            (
                work(
                    "eu-1",
                    "meridian-gateways",
                    Some((GATEWAY_BUNDLE_LABEL, "true")),
                ),
                true,
                "a bundle",
            ),
            (work("eu-1", AGENT_WORK, None), true, "the agent's"),
            (
                work("eu-1", "unrelated", None),
                false,
                "someone else's work",
            ),
        ];
        for (work, hubs, what) in cases {
            assert_eq!(is_the_hubs(&work), hubs, "{what}");
        }
    }

    #[test]
    fn a_decision_wakes_the_clusters_it_chose_or_let_go_only() {
        let decision = |clusters: &[&str]| -> PlacementDecision {
            serde_json::from_value(json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
                "metadata": { "name": "europe-decision-1", "namespace": "gw",
                              "labels": { meridian_api::labels::PLACEMENT_LABEL: "europe" } },
                "status": { "decisions": clusters.iter()
                    .map(|c| json!({ "clusterName": c, "reason": "" })).collect::<Vec<_>>() },
            }))
            .expect("a PlacementDecision")
        };
        let set = |clusters: &[&str]| -> BTreeSet<String> {
            clusters.iter().map(|c| c.to_string()).collect()
        };
        let (one, two) = (decision(&["eu-1", "eu-2"]), decision(&["eu-2", "eu-3"]));
        assert_eq!(
            clusters_changed(Some(&one), Some(&two)),
            set(&["eu-1", "eu-3"])
        );
        assert_eq!(clusters_changed(Some(&one), Some(&one)), set(&[]));
        assert_eq!(clusters_changed(None, Some(&one)), set(&["eu-1", "eu-2"]));
        assert_eq!(clusters_changed(Some(&two), None), set(&["eu-2", "eu-3"]));
        assert_eq!(clusters_changed(None, Some(&decision(&[""]))), set(&[]));
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
