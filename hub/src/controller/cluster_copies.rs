//! What the probe header and zone key copies share: one Secret each in the hub's own
//! namespace, which the agents may read by name, written when its data differs. The hub writes
//! Secrets in its own namespace only.
//!
//! Both controllers reconcile ManagedClusters, since each cluster's agent needs its own
//! binding to read the copies; but the copies are the fleet's, one for all. So one cluster's
//! reconcile, the first by name ([`leads_fleet_step`]), makes them, and a change to what they
//! are made of wakes that cluster alone ([`first_cluster`]); every other reconcile only binds
//! its agent. At 3,000 clusters a changed probe or key Secret is one reconcile, not 3,000.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use kube::runtime::reflector::{ObjectRef, Store};
use meridian_api::upstream::ManagedCluster;
use meridian_controllers::runtime::caches::Change;
use meridian_controllers::{Context, Error, FIELD_MANAGER, apply_params};
use serde_json::json;

/// The hub's own namespace, where the copies are kept.
pub fn hub_namespace(ctx: &Context) -> Result<&str, Error> {
    ctx.config
        .hub_namespace
        .as_deref()
        .ok_or_else(|| Error::Waiting("the hub's namespace, where the agents' copies are".into()))
}

/// Makes the Secret `name` in the hub's namespace `namespace` hold exactly `data`, unless the
/// cached one already does (or there is none and nothing to hold). Returns whether it wrote.
/// An `owner` in the same namespace takes the copy with it when it is deleted.
pub async fn deliver(
    ctx: &Context,
    namespace: &str,
    name: &str,
    data: &BTreeMap<String, ByteString>,
    owner: Option<&OwnerReference>,
) -> Result<bool, Error> {
    let unchanged = match ctx.caches.secrets.get(Some(namespace), name) {
        Some(copy) => copy
            .data
            .as_ref()
            .map_or(data.is_empty(), |held| held == data),
        None => data.is_empty(),
    };
    if unchanged {
        return Ok(false);
    }
    let mut copy = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": { "app.kubernetes.io/managed-by": FIELD_MANAGER },
        },
        "type": "Opaque",
        "data": data,
    });
    if let Some(owner) = owner {
        copy["metadata"]["ownerReferences"] = json!([owner]);
    }
    // SSA replaces the whole data map this manager owns: an entry no longer wanted goes.
    Api::<Secret>::namespaced(ctx.client.clone(), namespace)
        .patch(name, &apply_params(), &Patch::Apply(copy))
        .await?;
    Ok(true)
}

/// The cluster whose reconcile makes the fleet's copies: the first by name (none without
/// clusters, when no agent needs a copy).
pub fn first_cluster(clusters: &Store<ManagedCluster>) -> Vec<ObjectRef<ManagedCluster>> {
    clusters
        .state()
        .iter()
        .map(|cluster| ObjectRef::from_obj(&**cluster))
        .min_by(|a, b| a.name.cmp(&b.name))
        .into_iter()
        .collect()
}

/// Whether `cluster`'s reconcile makes the fleet's copies (see [`first_cluster`]).
pub fn leads_fleet_step(clusters: &Store<ManagedCluster>, cluster: &str) -> bool {
    first_cluster(clusters)
        .first()
        .is_some_and(|first| first.name == cluster)
}

/// Who acts when `secret`, a copy (its name satisfies `is_copy`) in the hub's namespace,
/// changed or was deleted: the first cluster, which puts it back; and when the copy is new and
/// the agents' bindings hang on it (`bound_to_copy`), every cluster, to bind its agent.
pub fn clusters_for_copy(
    clusters: &Store<ManagedCluster>,
    hub_namespace: Option<&str>,
    change: &Change<Secret>,
    is_copy: impl Fn(&str) -> bool,
    bound_to_copy: bool,
) -> Vec<ObjectRef<ManagedCluster>> {
    let Some(secret) = change.object() else {
        return Vec::new();
    };
    if secret.namespace().as_deref() != hub_namespace || !is_copy(&secret.name_any()) {
        return Vec::new();
    }
    if bound_to_copy && matches!(change, Change::Applied { old: None, .. }) {
        return every_cluster(clusters);
    }
    first_cluster(clusters)
}

/// Who acts when the clusters change: a new cluster binds its agent (and makes the copies,
/// if it comes first); when a cluster leaves, the one now first makes them from then on.
pub fn clusters_coming_and_going(
    clusters: &Store<ManagedCluster>,
    change: &Change<ManagedCluster>,
) -> Vec<ObjectRef<ManagedCluster>> {
    match change {
        Change::Applied { old: None, new } => vec![ObjectRef::from_obj(&**new)],
        Change::Deleted(_) => first_cluster(clusters),
        _ => Vec::new(),
    }
}

/// Who acts when `binding`, a RoleBinding in the hub's namespace, was deleted or changed by
/// someone after its creation: the cluster whose agent it binds, when its name is
/// `binding_of(cluster)` for some cluster. (Its creation is the cluster's own reconcile's
/// doing.)
pub fn cluster_of_binding(
    hub_namespace: Option<&str>,
    change: &Change<RoleBinding>,
    binding_of: impl Fn(&str) -> String,
) -> Vec<ObjectRef<ManagedCluster>> {
    let binding = match change {
        Change::Deleted(binding)
        | Change::Applied {
            old: Some(_),
            new: binding,
        } => binding,
        Change::Applied { old: None, .. } | Change::Relisted => return Vec::new(),
    };
    if binding.namespace().as_deref() != hub_namespace {
        return Vec::new();
    }
    let name = binding.name_any();
    let prefix = binding_of("");
    name.strip_prefix(&prefix)
        .filter(|cluster| !cluster.is_empty() && binding_of(cluster) == name)
        .map(|cluster| vec![ObjectRef::new(cluster)])
        .unwrap_or_default()
}

/// Every cluster (for a change each agent's binding answers).
pub fn every_cluster(clusters: &Store<ManagedCluster>) -> Vec<ObjectRef<ManagedCluster>> {
    clusters
        .state()
        .iter()
        .map(|cluster| ObjectRef::from_obj(&**cluster))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::{reflector, watcher};

    fn clusters(names: &[&str]) -> Store<ManagedCluster> {
        let (store, mut writer) = reflector::store();
        for name in names {
            let cluster = ManagedCluster::new(name, Default::default());
            writer.apply_watcher_event(&watcher::Event::Apply(cluster));
        }
        store
    }

    fn copy(namespace: &str, name: &str) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                namespace: Some(namespace.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn names(refs: Vec<ObjectRef<ManagedCluster>>) -> Vec<String> {
        let mut names: Vec<String> = refs.into_iter().map(|r| r.name).collect();
        names.sort();
        names
    }

    #[test]
    fn one_cluster_makes_the_fleets_copies_and_a_new_copy_wakes_every_binding() {
        let store = clusters(&["spoke-2", "spoke-10", "spoke-1"]);
        assert_eq!(names(first_cluster(&store)), ["spoke-1"]);
        assert!(leads_fleet_step(&store, "spoke-1"));
        assert!(!leads_fleet_step(&store, "spoke-2"));
        assert!(first_cluster(&clusters(&[])).is_empty());

        let is_copy = |name: &str| name == "the-copy";
        let changed = |secret: Secret, new: bool| Change::Applied {
            old: (!new).then(|| std::sync::Arc::new(secret.clone())),
            new: std::sync::Arc::new(secret),
        };
        let wake = |change: &Change<Secret>, bound: bool| {
            names(clusters_for_copy(
                &store,
                Some("hub"),
                change,
                is_copy,
                bound,
            ))
        };
        let all = ["spoke-1", "spoke-10", "spoke-2"];
        // A new copy the bindings hang on: every cluster binds its agent.
        assert_eq!(wake(&changed(copy("hub", "the-copy"), true), true), all);
        // Bindings that do not hang on it, or a copy changed or deleted: the first puts it back.
        assert_eq!(
            wake(&changed(copy("hub", "the-copy"), true), false),
            ["spoke-1"]
        );
        assert_eq!(
            wake(&changed(copy("hub", "the-copy"), false), true),
            ["spoke-1"]
        );
        let deleted = Change::Deleted(std::sync::Arc::new(copy("hub", "the-copy")));
        assert_eq!(wake(&deleted, true), ["spoke-1"]);
        // Not a copy, or not in the hub's namespace: nobody.
        assert!(wake(&changed(copy("hub", "other"), true), true).is_empty());
        assert!(wake(&changed(copy("team", "the-copy"), true), true).is_empty());
    }

    #[test]
    fn a_binding_deleted_or_changed_by_someone_wakes_the_cluster_it_binds() {
        use meridian_api::names::{agent_copies_binding, agent_zone_keys_binding};
        let binding = |namespace: &str, name: &str| {
            std::sync::Arc::new(RoleBinding {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some(namespace.into()),
                    ..Default::default()
                },
                ..Default::default()
            })
        };
        let wake = |change: &Change<RoleBinding>| {
            names(cluster_of_binding(
                Some("hub"),
                change,
                agent_copies_binding,
            ))
        };
        let ours = binding("hub", "meridian-agent-copies-spoke-7");
        assert_eq!(wake(&Change::Deleted(ours.clone())), ["spoke-7"]);
        let edited = Change::Applied {
            old: Some(ours.clone()),
            new: ours.clone(),
        };
        assert_eq!(wake(&edited), ["spoke-7"]);
        // Its creation is the reconcile's own doing; a relist is every cluster's anyway.
        let created = Change::Applied {
            old: None,
            new: ours,
        };
        assert!(wake(&created).is_empty());
        assert!(wake(&Change::Relisted).is_empty());
        // Another controller's binding, the Role's name alone, another namespace: nobody.
        for other in [
            binding("hub", "meridian-agent-zone-keys-spoke-7"),
            binding("hub", "meridian-agent-copies-"),
            binding("hub", "meridian-agent-copies"),
            binding("team", "meridian-agent-copies-spoke-7"),
        ] {
            assert!(wake(&Change::Deleted(other)).is_empty());
        }
        assert_eq!(
            names(cluster_of_binding(
                Some("hub"),
                &Change::Deleted(binding("hub", "meridian-agent-zone-keys-spoke-7")),
                agent_zone_keys_binding,
            )),
            ["spoke-7"]
        );
    }
}
