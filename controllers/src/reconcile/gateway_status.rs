//! The condition DNSPolicies set on the Gateways they target (`kuadrant.io/DNSPolicyAffected`),
//! written as this field manager's only status field of the Gateway: the policy controller
//! marks a Gateway, and whichever of the policy or record controllers sees the last policy go
//! unmarks it.

use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate, reasons, set_condition};
use meridian_api::kuadrant::DNSPolicy;
use meridian_api::upstream::Gateway;
use serde_json::json;

use crate::{Context, Error, apply_params, now};
/// Sets `kuadrant.io/DNSPolicyAffected` on the Gateway, unless it already says so.
pub async fn mark_gateway(
    gateway: &Gateway,
    policy: &DNSPolicy,
    ctx: &Context,
) -> Result<(), Error> {
    let existing = gateway
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ == conditions::DNS_POLICY_AFFECTED)
        .collect::<Vec<_>>();
    let mut mine = existing.clone();
    set_condition(
        &mut mine,
        ConditionUpdate {
            type_: conditions::DNS_POLICY_AFFECTED,
            status: true,
            reason: reasons::ACCEPTED,
            message: format!("DNSPolicy {} applies", policy.name_any()),
        },
        gateway.metadata.generation,
        &now(),
    );
    if mine == existing {
        return Ok(());
    }
    apply_gateway_conditions(gateway, ctx, mine).await
}

/// Removes our `DNSPolicyAffected` from the Gateway.
pub async fn unmark_gateway(gateway: &Gateway, ctx: &Context) -> Result<(), Error> {
    apply_gateway_conditions(gateway, ctx, Vec::new()).await
}

/// Applies the Gateway's conditions as this manager's only status field: an empty list drops
/// exactly our condition and leaves the gateway controller's alone.
async fn apply_gateway_conditions(
    gateway: &Gateway,
    ctx: &Context,
    conditions: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
) -> Result<(), Error> {
    let api: Api<Gateway> =
        Api::namespaced(ctx.client.clone(), &gateway.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": Gateway::api_version(&()),
        "kind": Gateway::kind(&()),
        "status": { "conditions": conditions },
    });
    api.patch_status(&gateway.name_any(), &apply_params(), &Patch::Apply(patch))
        .await?;
    Ok(())
}
