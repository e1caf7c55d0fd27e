//! What placing a Gateway says about it: the GatewayClass accepted.

use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use meridian_api::upstream::GatewayClass;
use serde_json::json;

use super::PlacementContext;
use meridian_controllers::{Error, apply_params};

/// Marks the GatewayClass Accepted, once.
pub async fn accept_class(class: &GatewayClass, ctx: &PlacementContext) -> Result<(), Error> {
    let accepted = class.status.as_ref().is_some_and(|s| {
        meridian_api::conditions::condition_status(&s.conditions, "Accepted") == Some(true)
    });
    if accepted {
        return Ok(());
    }
    let api: Api<GatewayClass> = Api::all(ctx.client.clone());
    let patch = json!({
        "apiVersion": GatewayClass::api_version(&()),
        "kind": GatewayClass::kind(&()),
        "status": { "conditions": [{
            "type": "Accepted",
            "status": "True",
            "reason": "Accepted",
            "message": "handled by Meridian's hub: one Gateway per placed cluster",
            "lastTransitionTime": meridian_controllers::now(),
            "observedGeneration": class.metadata.generation,
        }]},
    });
    api.patch_status(&class.name_any(), &apply_params(), &Patch::Apply(patch))
        .await?;
    Ok(())
}
