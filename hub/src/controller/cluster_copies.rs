//! What the probe header and zone key copies share: one Secret in each cluster's namespace on
//! the hub, the only Secret there the cluster's agent may read, written when its data differs.

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

/// Makes the Secret `name` in the cluster namespace `namespace` hold exactly `data`, unless the
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

/// The cluster whose copy `secret` is, when it is a copy (its name satisfies `is_copy`) in a
/// cluster's namespace: a copy changed or deleted wakes its cluster, which puts it back.
pub fn cluster_of_copy(
    clusters: &Store<ManagedCluster>,
    secret: &Secret,
    is_copy: impl Fn(&str) -> bool,
) -> Vec<ObjectRef<ManagedCluster>> {
    let cluster = ObjectRef::<ManagedCluster>::new(&secret.namespace().unwrap_or_default());
    (is_copy(&secret.name_any()) && clusters.get(&cluster).is_some())
        .then_some(cluster)
        .into_iter()
        .collect()
}
