//! The condition DNSPolicies set on the Gateways they target (`meridian.dev/DNSPolicyAffected`,
//! and `kuadrant.io/DNSPolicyAffected` beside it when configured), written as this field
//! manager's only status field of the Gateway: the policy controller marks a Gateway, and
//! whichever of the policy or record controllers sees the last policy go unmarks it.
//!
//! Each write applies the whole set this field manager wants, so an upgrade from a release that
//! wrote only the Kuadrant-domain condition replaces it with Meridian's in one write: no reader
//! sees the Gateway with neither.
//!
//! The same condition goes on each listener a policy covers (`status.listeners[].conditions`),
//! naming that listener's policy: its own where a policy targets it by `sectionName`, else the
//! Gateway-wide one. Only on listeners the Gateway's controller already lists in its status: an
//! entry needs `attachedRoutes`, which only the controller serving the listener knows, so this
//! never creates one; and only where the listener has room for it among its 8 conditions. A hub Gateway of the multi-cluster class is
//! served by no controller on the hub (its copies are, downstream), so its listeners carry
//! none; its Gateway-level condition names every policy.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
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

/// Whether this field manager wrote the condition `type_` of the Gateway, or of its listener
/// `listener` (its managed fields say so). Kuadrant writes `kuadrant.io/DNSPolicyAffected`
/// too: that one is not ours to compare or remove. A Gateway read without managed fields (a
/// test's) counts every one as ours.
fn written_by_us(gateway: &Gateway, listener: Option<&str>, type_: &str) -> bool {
    let Some(entries) = gateway.metadata.managed_fields.as_ref() else {
        return true;
    };
    let key = format!("k:{}", json!({ "type": type_ }));
    entries.iter().any(|entry| {
        entry.manager.as_deref() == Some(crate::FIELD_MANAGER)
            && entry.fields_v1.as_ref().is_some_and(|fields| {
                let status = &fields.0["f:status"];
                let conditions = match listener {
                    None => &status["f:conditions"],
                    Some(name) => {
                        &status["f:listeners"][format!("k:{}", json!({ "name": name }))]
                            ["f:conditions"]
                    }
                };
                conditions
                    .as_object()
                    .is_some_and(|owned| owned.contains_key(&key))
            })
    })
}

/// `conditions` cut to ours: of the DNSPolicyAffected types, written by this field manager
/// (on the Gateway, or on `listener`).
fn ours(gateway: &Gateway, listener: Option<&str>, conditions: &[Condition]) -> Vec<Condition> {
    conditions
        .iter()
        .filter(|c| affected_types(true).contains(&c.type_.as_str()))
        .filter(|c| written_by_us(gateway, listener, &c.type_))
        .cloned()
        .collect()
}

/// `existing` (ours) changed to say, in each `wanted` type, that `message` holds; or to say
/// nothing, with no `message`.
fn affected(
    existing: &[Condition],
    message: Option<&str>,
    wanted: &[&str],
    generation: Option<i64>,
    time: &Time,
) -> Vec<Condition> {
    let Some(message) = message else {
        return Vec::new();
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
                message: message.to_string(),
            },
            generation,
            time,
        );
    }
    mine
}

/// The Gateway's conditions of the `wanted` types, saying `policies` apply, and whether they
/// differ from what this controller wrote there before (a condition of ours of a type no
/// longer wanted counts as a difference: the apply removes it). The message names every
/// policy on the Gateway, so that a Gateway-wide policy and a listener's write the same one.
pub fn affected_conditions(
    gateway: &Gateway,
    policies: &[String],
    wanted: &[&str],
    time: &Time,
) -> (Vec<Condition>, bool) {
    let said = gateway
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let existing = ours(gateway, None, said);
    let message = match policies {
        [one] => format!("DNSPolicy {one} applies"),
        many => format!("DNSPolicies {} apply", many.join(", ")),
    };
    let mine = affected(
        &existing,
        Some(&message),
        wanted,
        gateway.metadata.generation,
        time,
    );
    let changed = mine != existing;
    (mine, changed)
}

/// The most conditions a listener's status holds (the Gateway CRD's `maxItems`).
const MAX_LISTENER_CONDITIONS: usize = 8;

/// Each listener's conditions of ours, by listener name.
pub type ListenerConditions = BTreeMap<String, Vec<Condition>>;

/// The conditions of ours on the Gateway's listeners: each listener its controller lists in its
/// status and a policy covers (`holders`: listener → policy) says so in the `wanted` types,
/// where the listener has room for them;
/// and whether that differs from what this field manager wrote there (a listener no policy
/// covers any more loses ours).
pub fn listener_conditions(
    gateway: &Gateway,
    holders: &BTreeMap<String, String>,
    wanted: &[&str],
    time: &Time,
) -> (ListenerConditions, bool) {
    let listed = gateway
        .status
        .as_ref()
        .map(|s| s.listeners.as_slice())
        .unwrap_or_default();
    let mut all = ListenerConditions::new();
    let mut changed = false;
    for listener in listed {
        let existing = ours(gateway, Some(&listener.name), &listener.conditions);
        // A listener holds at most 8 conditions: ours never takes the controller's room.
        let theirs = listener.conditions.len() - existing.len();
        let message = holders
            .get(&listener.name)
            .filter(|_| theirs + wanted.len() <= MAX_LISTENER_CONDITIONS)
            .map(|policy| format!("DNSPolicy {policy} applies"));
        let mine = affected(
            &existing,
            message.as_deref(),
            wanted,
            gateway.metadata.generation,
            time,
        );
        changed |= mine != existing;
        if !mine.is_empty() {
            all.insert(listener.name.clone(), mine);
        }
    }
    (all, changed)
}

/// Sets the DNSPolicyAffected condition(s) on the Gateway (naming `policies`, every policy on
/// it) and on its listeners (naming each one's policy, `holders`), unless they already say so.
pub async fn mark_gateway(
    gateway: &Gateway,
    policies: &[String],
    holders: &BTreeMap<String, String>,
    ctx: &Context,
) -> Result<(), Error> {
    let wanted = affected_types(ctx.config.kuadrant_gateway_condition);
    let time = now();
    let (mine, changed) = affected_conditions(gateway, policies, wanted, &time);
    let (listeners, listeners_changed) = listener_conditions(gateway, holders, wanted, &time);
    if !changed && !listeners_changed {
        return Ok(());
    }
    match apply_gateway_conditions(gateway, ctx, mine.clone(), listeners).await {
        // A listener the controller just dropped, which the cache still lists: the entry would
        // lack the fields only the controller writes. The Gateway's own condition goes alone;
        // the Gateway's next change brings the listeners' again.
        Err(Error::Kube(kube::Error::Api(status))) if status.code == 422 => {
            tracing::warn!(gateway = %gateway.name_any(), message = %status.message, "the listeners' conditions were refused; writing the Gateway's alone");
            apply_gateway_conditions(gateway, ctx, mine, ListenerConditions::new()).await
        }
        written => written,
    }
}

/// Removes our `DNSPolicyAffected` condition(s) from the Gateway and its listeners.
pub async fn unmark_gateway(gateway: &Gateway, ctx: &Context) -> Result<(), Error> {
    apply_gateway_conditions(gateway, ctx, Vec::new(), ListenerConditions::new()).await
}

/// Applies the Gateway's conditions and its listeners' as this manager's only status fields:
/// what it no longer applies (a listener left out, an empty list) is dropped, and the gateway
/// controller's conditions and listener fields are left alone. Listeners with none of ours
/// are left out rather than sent empty: an entry sent is one this manager then co-owns.
async fn apply_gateway_conditions(
    gateway: &Gateway,
    ctx: &Context,
    conditions: Vec<Condition>,
    listeners: ListenerConditions,
) -> Result<(), Error> {
    let api: Api<Gateway> =
        Api::namespaced(ctx.client.clone(), &gateway.namespace().unwrap_or_default());
    let mut status = json!({ "conditions": conditions });
    if !listeners.is_empty() {
        status["listeners"] = listeners
            .into_iter()
            .map(|(name, conditions)| json!({ "name": name, "conditions": conditions }))
            .collect();
    }
    let patch = json!({
        "apiVersion": Gateway::api_version(&()),
        "kind": Gateway::kind(&()),
        "status": status,
    });
    api.patch_status(&gateway.name_any(), &apply_params(), &Patch::Apply(patch))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
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

    /// A listener says which policy covers it, only where the Gateway's controller lists it;
    /// a listener no policy covers any more loses ours, and the controller's conditions are
    /// never ours.
    #[test]
    fn a_listener_names_its_policy_only_where_its_controller_lists_it() {
        let time = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let ours_saying = |message: &str| {
            let mut c = fixtures::condition(conditions::DNS_POLICY_AFFECTED);
            c.reason = reasons::ACCEPTED.into();
            c.message = message.into();
            c.observed_generation = Some(1);
            c.last_transition_time = time.clone();
            c
        };
        let listed = |listeners: Vec<(&str, Vec<Condition>)>| {
            let listeners: Vec<_> = listeners
                .into_iter()
                .map(|(name, conditions)| {
                    json!({
                        "name": name, "attachedRoutes": 1, "conditions": conditions,
                        "supportedKinds": [{ "kind": "HTTPRoute" }],
                    })
                })
                .collect();
            fixtures::gateway("team", "gw")
                .generation(1)
                .with(json!({ "status": { "listeners": listeners } }))
                .build()
        };
        let gateway = listed(vec![
            ("api", vec![fixtures::condition("Programmed")]),
            ("web", vec![ours_saying("DNSPolicy wide applies")]),
        ]);
        let holders: BTreeMap<String, String> =
            [("api", "api-geo"), ("web", "wide"), ("unlisted", "wide")]
                .into_iter()
                .map(|(l, p)| (l.to_string(), p.to_string()))
                .collect();
        let wanted = affected_types(false);
        let (mine, changed) = listener_conditions(&gateway, &holders, wanted, &time);
        assert!(changed, "api is new");
        let said: BTreeMap<&str, Vec<&str>> = mine
            .iter()
            .map(|(l, cs)| (l.as_str(), cs.iter().map(|c| c.message.as_str()).collect()))
            .collect();
        assert_eq!(
            said,
            BTreeMap::from([
                ("api", vec!["DNSPolicy api-geo applies"]),
                ("web", vec!["DNSPolicy wide applies"]),
            ]),
            "no entry is made for a listener its controller does not list"
        );
        assert!(
            mine.values()
                .flatten()
                .all(|c| c.type_ == conditions::DNS_POLICY_AFFECTED)
        );

        // Written: the next pass changes nothing.
        let written = listed(vec![
            (
                "api",
                vec![fixtures::condition("Programmed"), mine["api"][0].clone()],
            ),
            ("web", mine["web"].clone()),
        ]);
        assert!(!listener_conditions(&written, &holders, wanted, &time).1);

        // The policies go: ours goes from every listener, the controller's stays its own.
        let (none, changed) = listener_conditions(&written, &BTreeMap::new(), wanted, &time);
        assert!(changed);
        assert!(none.is_empty(), "{none:?}");
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
