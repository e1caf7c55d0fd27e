//! What the probe header and zone key copies share: one Secret each in the hub's own
//! namespace, which the agents may read by name, written when its data differs. The hub writes
//! Secrets in its own namespace only.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::ResourceExt;
use kube::api::{Api, Patch};
use kube::runtime::reflector::{ObjectRef, Store};
use meridian_api::upstream::ManagedCluster;
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

/// Who puts a copy back when `secret`, a copy (its name satisfies `is_copy`) in the hub's
/// namespace, changed or was deleted: one cluster's reconcile, since every cluster's delivers
/// the same copy.
pub fn cluster_for_copy(
    clusters: &Store<ManagedCluster>,
    hub_namespace: Option<&str>,
    secret: &Secret,
    is_copy: impl Fn(&str) -> bool,
) -> Vec<ObjectRef<ManagedCluster>> {
    if secret.namespace().as_deref() != hub_namespace || !is_copy(&secret.name_any()) {
        return Vec::new();
    }
    clusters
        .state()
        .iter()
        .map(|cluster| ObjectRef::from_obj(&**cluster))
        .min_by(|a, b| a.name.cmp(&b.name))
        .into_iter()
        .collect()
}
