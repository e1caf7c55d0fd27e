//! The condition DNSPolicies set on the Gateways they target (`meridian.dev/DNSPolicyAffected`,
//! and `kuadrant.io/DNSPolicyAffected` beside it when configured), written as this field
//! manager's only status field of the Gateway: the policy controller marks a Gateway, and
//! whichever of the policy or record controllers sees the last policy go unmarks it.
//!
//! Each write applies the whole set this field manager wants, so an upgrade from a release that
//! wrote only the Kuadrant-domain condition replaces it with Meridian's in one write: no reader
//! sees the Gateway with neither.

use kube::api::{Api, Patch};
use kube::{Resource, ResourceExt};
use meridian_api::conditions::{self, ConditionUpdate, reasons, set_condition};
use meridian_api::upstream::Gateway;
use serde_json::json;

use crate::{Context, Error, apply_params, now};
/// The Gateway condition types this controller writes.
pub fn affected_types(kuadrant_too: bool) -> &'static [&'static str] {
    let all = &conditions::DNS_POLICY_AFFECTED_TYPES;
    if kuadrant_too { all } else { &all[..1] }
}

/// Whether this field manager wrote the Gateway's condition `type_` (its managed fields say
/// so). Kuadrant writes `kuadrant.io/DNSPolicyAffected` too: that one is not ours to compare
/// or remove. A Gateway read without managed fields (a test's) counts every one as ours.
fn written_by_us(gateway: &Gateway, type_: &str) -> bool {
    let Some(entries) = gateway.metadata.managed_fields.as_ref() else {
        return true;
    };
    let key = format!("k:{{\"type\":\"{type_}\"}}");
    entries.iter().any(|entry| {
        entry.manager.as_deref() == Some(crate::FIELD_MANAGER)
            && entry.fields_v1.as_ref().is_some_and(|fields| {
                fields.0["f:status"]["f:conditions"]
                    .as_object()
                    .is_some_and(|owned| owned.contains_key(&key))
            })
    })
}

/// The Gateway's conditions of the `wanted` types, saying `policies` apply, and whether they
/// differ from what this controller wrote there before (a condition of ours of a type no
/// longer wanted counts as a difference: the apply removes it). The message names every
/// policy on the Gateway, so that a Gateway-wide policy and a listener's write the same one.
pub fn affected_conditions(
    gateway: &Gateway,
    policies: &[String],
    wanted: &[&str],
    time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
) -> (
    Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    bool,
) {
    let said = gateway
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let existing: Vec<_> = said
        .iter()
        .filter(|c| affected_types(true).contains(&c.type_.as_str()))
        .filter(|c| written_by_us(gateway, &c.type_))
        .cloned()
        .collect();
    let message = match policies {
        [one] => format!("DNSPolicy {one} applies"),
        many => format!("DNSPolicies {} apply", many.join(", ")),
    };
    let mut mine: Vec<_> = existing
        .iter()
        .filter(|c| wanted.contains(&c.type_.as_str()))
        .cloned()
        .collect();
    for type_ in wanted {
        set_condition(
            &mut mine,
            ConditionUpdate {
                type_,
                status: true,
                reason: reasons::ACCEPTED,
                message: message.clone(),
            },
            gateway.metadata.generation,
            time,
        );
    }
    let changed = mine != existing;
    (mine, changed)
}

/// Sets the DNSPolicyAffected condition(s) on the Gateway, unless it already says so.
pub async fn mark_gateway(
    gateway: &Gateway,
    policies: &[String],
    ctx: &Context,
) -> Result<(), Error> {
    let wanted = affected_types(ctx.config.kuadrant_gateway_condition);
    let (mine, changed) = affected_conditions(gateway, policies, wanted, &now());
    if !changed {
        return Ok(());
    }
    apply_gateway_conditions(gateway, ctx, mine).await
}

/// Removes our `DNSPolicyAffected` condition(s) from the Gateway.
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
    use meridian_testkit::fixtures;

    fn gateway_saying(types: &[&str]) -> Gateway {
        let mut conditions: Vec<Condition> = vec![fixtures::condition("Programmed")];
        conditions.extend(types.iter().map(|t| {
            let mut c = fixtures::condition(t);
            c.reason = reasons::ACCEPTED.into();
            c.message = "DNSPolicy p applies".into();
            c.observed_generation = Some(1);
            c
        }));
        fixtures::gateway("team", "gw")
            .generation(1)
            .with(json!({ "status": { "conditions": conditions } }))
            .build()
    }

    /// An upgrade from a release that wrote Kuadrant's domain: the one apply carries Meridian's
    /// condition and not Kuadrant's, so the move is one write with no gap; with the chart value
    /// on, both. The gateway controller's own conditions are never in our set.
    #[test]
    fn an_upgrade_moves_the_gateway_condition_to_meridians_domain_in_one_write() {
        let policy = vec!["p".to_string()];
        let time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        for (said, kuadrant_too, wanted, changed) in [
            (
                &[conditions::KUADRANT_DNS_POLICY_AFFECTED][..],
                false,
                &[conditions::DNS_POLICY_AFFECTED][..],
                true,
            ),
            (
                &[conditions::DNS_POLICY_AFFECTED],
                false,
                &[conditions::DNS_POLICY_AFFECTED],
                false,
            ),
            (
                &[conditions::KUADRANT_DNS_POLICY_AFFECTED],
                true,
                &[
                    conditions::DNS_POLICY_AFFECTED,
                    conditions::KUADRANT_DNS_POLICY_AFFECTED,
                ],
                true,
            ),
            (
                &[
                    conditions::DNS_POLICY_AFFECTED,
                    conditions::KUADRANT_DNS_POLICY_AFFECTED,
                ],
                true,
                &[
                    conditions::DNS_POLICY_AFFECTED,
                    conditions::KUADRANT_DNS_POLICY_AFFECTED,
                ],
                false,
            ),
            (
                &[
                    conditions::DNS_POLICY_AFFECTED,
                    conditions::KUADRANT_DNS_POLICY_AFFECTED,
                ],
                false,
                &[conditions::DNS_POLICY_AFFECTED],
                true,
            ),
            (&[], false, &[conditions::DNS_POLICY_AFFECTED], true),
        ] {
            let gateway = gateway_saying(said);
            let (mine, differs) =
                affected_conditions(&gateway, &policy, affected_types(kuadrant_too), &time);
            let types: std::collections::BTreeSet<&str> =
                mine.iter().map(|c| c.type_.as_str()).collect();
            assert_eq!(
                types,
                wanted.iter().copied().collect(),
                "{said:?} kuadrant_too={kuadrant_too}"
            );
            assert_eq!(differs, changed, "{said:?} kuadrant_too={kuadrant_too}");
        }
    }

    /// Kuadrant's own `kuadrant.io/DNSPolicyAffected` on a Gateway both target is not ours:
    /// it is neither compared (no write every pass) nor removed.
    #[test]
    fn kuadrants_own_condition_is_left_alone() {
        let mut gateway = gateway_saying(&[
            conditions::DNS_POLICY_AFFECTED,
            conditions::KUADRANT_DNS_POLICY_AFFECTED,
        ]);
        let owned = |manager: &str, type_: &str| {
            serde_json::from_value::<
                k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry,
            >(json!({
                "manager": manager, "operation": "Apply", "subresource": "status",
                "fieldsType": "FieldsV1",
                "fieldsV1": { "f:status": { "f:conditions": {
                    format!("k:{{\"type\":\"{type_}\"}}"): { ".": {} } } } },
            }))
            .unwrap()
        };
        gateway.metadata.managed_fields = Some(vec![
            owned(crate::FIELD_MANAGER, conditions::DNS_POLICY_AFFECTED),
            owned(
                "kuadrant-operator",
                conditions::KUADRANT_DNS_POLICY_AFFECTED,
            ),
        ]);
        let time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let (mine, differs) =
            affected_conditions(&gateway, &["p".into()], affected_types(false), &time);
        assert!(!differs, "nothing of ours changes: no write");
        assert_eq!(mine.len(), 1);
        assert_eq!(mine[0].type_, conditions::DNS_POLICY_AFFECTED);
        // Two policies on the Gateway: one message, whichever writes it.
        let (both, _) = affected_conditions(
            &gateway,
            &["api".into(), "wide".into()],
            affected_types(false),
            &time,
        );
        assert_eq!(both[0].message, "DNSPolicies api, wide apply");
    }
}
