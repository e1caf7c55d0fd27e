//! The hub's owner ID: what every record it publishes (without an owner of its own) is owned
//! as at the provider, with a hash of the record's namespace and name
//! ([`meridian_controllers::zones::owners::hub_record_owner`]). It must come out the same after the
//! hub is restored from a backup or rebuilt from its manifests, or the new hub finds its own
//! records owned by someone else and never changes or removes them again. So it is never an
//! object's UID:
//!
//! 1. `--owner-id` (Helm value `ownerID`) when set: configuration, which a rebuild from the
//!    same values carries over. What a platform running more than one hub, or rebuilding hubs
//!    from GitOps, should set.
//! 2. Else the one the ConfigMap `meridian-owner-id` in the hub's namespace holds, which a
//!    backup of that namespace carries (Velero restoring it into a new cluster included).
//! 3. Else, on the first start, the UID of the hub cluster's `kube-system` namespace, written to
//!    that ConfigMap. It survives a restore into the same cluster and every upgrade.
//!
//! The ConfigMap always says which ID is in use; a configured one is written there too, so
//! removing the setting later changes nothing.

use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use meridian_controllers::zones::owners::valid_hub_owner;

/// The ConfigMap in the hub's namespace that holds the owner ID in use.
pub const CONFIGMAP: &str = "meridian-owner-id";
/// Its key.
pub const KEY: &str = "ownerID";

/// Where the owner ID in use came from (logged at start).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Configured,
    Kept,
    ClusterUid,
}

/// The owner ID this hub publishes under (see the module's documentation), writing the
/// ConfigMap when it does not say so yet.
pub async fn resolve(
    client: &Client,
    namespace: &str,
    configured: Option<&str>,
) -> anyhow::Result<(String, Source)> {
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    if let Some(id) = configured {
        valid_hub_owner(id).map_err(|e| anyhow::anyhow!("--owner-id: {e}"))?;
        if kept(&configmaps).await?.as_deref() != Some(id) {
            let patch = serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": { "name": CONFIGMAP, "namespace": namespace },
                "data": { KEY: id },
            });
            let params = PatchParams::apply(meridian_controllers::FIELD_MANAGER).force();
            configmaps
                .patch(CONFIGMAP, &params, &Patch::Apply(patch))
                .await?;
        }
        return Ok((id.to_string(), Source::Configured));
    }
    if let Some(id) = kept(&configmaps).await? {
        valid_hub_owner(&id).map_err(|e| {
            anyhow::anyhow!("ConfigMap {namespace}/{CONFIGMAP} key {KEY}: {e}; set --owner-id")
        })?;
        return Ok((id, Source::Kept));
    }
    let uid = Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await?
        .uid()
        .ok_or_else(|| anyhow::anyhow!("the kube-system namespace has no UID"))?;
    let configmap: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": CONFIGMAP, "namespace": namespace },
        "data": { KEY: uid },
    }))?;
    match configmaps.create(&PostParams::default(), &configmap).await {
        Ok(_) => Ok((uid, Source::ClusterUid)),
        // Another replica wrote it first: take what it wrote.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let id = kept(&configmaps)
                .await?
                .ok_or_else(|| anyhow::anyhow!("{namespace}/{CONFIGMAP} has no {KEY}"))?;
            Ok((id, Source::Kept))
        }
        Err(error) => Err(error.into()),
    }
}

async fn kept(configmaps: &Api<ConfigMap>) -> anyhow::Result<Option<String>> {
    Ok(configmaps
        .get_opt(CONFIGMAP)
        .await?
        .and_then(|configmap| configmap.data?.remove(KEY)))
}
