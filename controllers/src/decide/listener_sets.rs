//! Which ListenerSets attach to a Gateway, and the listeners they add (Gateway API v1.5).
//!
//! A ListenerSet attaches when its `parentRef` names the Gateway and the Gateway admits the
//! ListenerSet's namespace (`spec.allowedListeners.namespaces.from`: `Same`, `All`; the
//! default `None` admits none). A ListenerSet is a tenant's input: one in a namespace the
//! Gateway does not admit adds nothing, whatever it names, and says why. The Gateway's own
//! listeners come first, then the ListenerSets oldest first: a listener whose hostname an
//! earlier one already has adds nothing (Gateway API's precedence), so a ListenerSet cannot
//! take over the DNS of the Gateway's own hostnames.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;
use meridian_api::upstream::{Gateway, Listener, ListenerSet};

/// The Gateway API group a parentRef names by default.
const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// The longest DNSRecord name a ListenerSet's listener may have: a label value's.
const MAX_RECORD_NAME: usize = 63;

/// A listener a ListenerSet adds to its Gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct SetListener {
    /// What the listener is called beside the Gateway's own: `<set>.<listener>` for a
    /// ListenerSet of the Gateway's namespace, `<namespace>.<set>.<listener>` for another's. A
    /// Gateway's listener names hold no dot, so no key is ever one of theirs.
    pub key: String,
    pub namespace: String,
    pub set: String,
    pub listener: Listener,
}

/// What the ListenerSets naming a Gateway add, and why the others add nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attached {
    pub listeners: Vec<SetListener>,
    /// The ListenerSets attached, as `<namespace>/<name>`.
    pub sets: Vec<String>,
    pub problems: Vec<String>,
}

/// Whether `set` names `gateway` as its parent.
pub fn names_gateway(set: &ListenerSet, gateway_namespace: &str, gateway_name: &str) -> bool {
    let parent = &set.spec.parent_ref;
    let namespace = parent
        .namespace
        .clone()
        .or_else(|| set.namespace())
        .unwrap_or_default();
    parent.group.as_deref().unwrap_or(GATEWAY_GROUP) == GATEWAY_GROUP
        && parent.kind.as_deref().unwrap_or("Gateway") == "Gateway"
        && parent.name == gateway_name
        && namespace == gateway_namespace
}

/// Whether `gateway` admits ListenerSets of `namespace`, or why not.
pub fn admits(gateway: &Gateway, namespace: &str) -> Result<(), String> {
    let from = gateway
        .spec
        .extra
        .get("allowedListeners")
        .and_then(|allowed| allowed["namespaces"]["from"].as_str())
        .unwrap_or("None");
    match from {
        "All" => Ok(()),
        "Same" if gateway.namespace().as_deref() == Some(namespace) => Ok(()),
        "Same" => Err("the Gateway admits ListenerSets of its own namespace only".into()),
        "Selector" => Err(
            "the Gateway admits ListenerSets by namespace selector, which Meridian does not read (use Same or All)"
                .into(),
        ),
        _ => Err("the Gateway admits no ListenerSet (spec.allowedListeners)".into()),
    }
}

/// The listeners the ListenerSets in `sets` that name `gateway` add to it.
pub fn attached(gateway: &Gateway, sets: &[Arc<ListenerSet>]) -> Attached {
    let gateway_namespace = gateway.namespace().unwrap_or_default();
    let mut naming: Vec<&Arc<ListenerSet>> = sets
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter(|s| names_gateway(s, &gateway_namespace, &gateway.name_any()))
        .collect();
    naming.sort_by_key(|s| {
        (
            s.metadata.creation_timestamp.as_ref().map(|t| t.0),
            s.namespace(),
            s.name_any(),
        )
    });
    let mut hostnames: BTreeSet<Option<String>> = gateway
        .spec
        .listeners
        .iter()
        .map(|l| l.hostname.as_deref().map(str::to_ascii_lowercase))
        .collect();
    let mut keys = BTreeSet::new();
    let mut found = Attached::default();
    for set in naming {
        let namespace = set.namespace().unwrap_or_default();
        let name = set.name_any();
        let id = format!("{namespace}/{name}");
        if let Err(why) = admits(gateway, &namespace) {
            found
                .problems
                .push(format!("ListenerSet {id} adds nothing: {why}"));
            continue;
        }
        found.sets.push(id.clone());
        for listener in &set.spec.listeners {
            let key = if namespace == gateway_namespace {
                format!("{name}.{}", listener.name)
            } else {
                format!("{namespace}.{name}.{}", listener.name)
            };
            let hostname = listener.hostname.as_deref().map(str::to_ascii_lowercase);
            // A listener with no hostname publishes nothing; it takes nothing either.
            if hostname.is_some() && !hostnames.insert(hostname.clone()) {
                found.problems.push(format!(
                    "ListenerSet {id} listener {}: hostname {} is already the Gateway's or an older ListenerSet's",
                    listener.name,
                    hostname.unwrap_or_default()
                ));
                continue;
            }
            // Its record (`<gateway>-<key>`) names its health probes by label, whose values
            // hold 63 characters: a longer name (a ListenerSet of another namespace may choose
            // it) would fail every write of the policy, not only its own.
            let record = crate::decide::desired::record_name(&gateway.name_any(), &key);
            if record.len() > MAX_RECORD_NAME || !meridian_api::names::is_object_name(&record) {
                found.problems.push(format!(
                    "ListenerSet {id} listener {}: its DNSRecord {record} would not be a name of at most {MAX_RECORD_NAME} characters",
                    listener.name
                ));
                continue;
            }
            if !keys.insert(key.clone()) {
                found.problems.push(format!(
                    "ListenerSet {id} listener {}: another ListenerSet's listener is already called {key}",
                    listener.name
                ));
                continue;
            }
            found.listeners.push(SetListener {
                key,
                namespace: namespace.clone(),
                set: name.clone(),
                listener: listener.clone(),
            });
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gateway(from: Option<&str>) -> Gateway {
        let mut spec = json!({
            "gatewayClassName": "multi",
            "listeners": [{ "name": "api", "hostname": "api.example.com", "port": 80, "protocol": "HTTP" }],
        });
        if let Some(from) = from {
            spec["allowedListeners"] = json!({ "namespaces": { "from": from } });
        }
        serde_json::from_value(json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
            "metadata": { "name": "web", "namespace": "shop" },
            "spec": spec,
        }))
        .unwrap()
    }

    fn set(
        namespace: &str,
        name: &str,
        created: &str,
        parent: serde_json::Value,
        hosts: &[(&str, &str)],
    ) -> Arc<ListenerSet> {
        let listeners: Vec<_> = hosts
            .iter()
            .map(|(listener, host)| {
                json!({ "name": listener, "hostname": host, "port": 80, "protocol": "HTTP" })
            })
            .collect();
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
                "metadata": { "name": name, "namespace": namespace, "creationTimestamp": created },
                "spec": { "parentRef": parent, "listeners": listeners },
            }))
            .unwrap(),
        )
    }

    const EARLY: &str = "2026-01-01T00:00:00Z";
    const LATE: &str = "2026-02-01T00:00:00Z";

    #[test]
    fn a_gateway_admits_listener_sets_only_as_its_allowed_listeners_say() {
        let cases = [
            (None, "shop", false),
            (Some("None"), "shop", false),
            (Some("Same"), "shop", true),
            (Some("Same"), "mallory", false),
            (Some("All"), "mallory", true),
            (Some("Selector"), "shop", false),
        ];
        for (from, namespace, admitted) in cases {
            assert_eq!(
                admits(&gateway(from), namespace).is_ok(),
                admitted,
                "{from:?} {namespace}"
            );
        }
    }

    #[test]
    fn a_listener_set_names_its_gateway_by_kind_name_and_namespace() {
        let parent = |value| set("shop", "extra", EARLY, value, &[]);
        assert!(names_gateway(
            &parent(json!({ "name": "web" })),
            "shop",
            "web"
        ));
        assert!(names_gateway(
            &parent(
                json!({ "name": "web", "namespace": "shop", "kind": "Gateway",
                            "group": "gateway.networking.k8s.io" })
            ),
            "shop",
            "web"
        ));
        for other in [
            json!({ "name": "other" }),
            json!({ "name": "web", "namespace": "elsewhere" }),
            json!({ "name": "web", "kind": "XListenerSet" }),
            json!({ "name": "web", "group": "example.com" }),
        ] {
            assert!(
                !names_gateway(&parent(other.clone()), "shop", "web"),
                "{other}"
            );
        }
        // Another namespace's ListenerSet names the Gateway with its namespace.
        let mallory = set(
            "mallory",
            "extra",
            EARLY,
            json!({ "name": "web", "namespace": "shop" }),
            &[],
        );
        assert!(names_gateway(&mallory, "shop", "web"));
        let unqualified = set("mallory", "extra", EARLY, json!({ "name": "web" }), &[]);
        assert!(!names_gateway(&unqualified, "shop", "web"));
    }

    #[test]
    fn attached_listeners_come_oldest_first_and_never_take_a_hostname_already_taken() {
        let to_web = json!({ "name": "web", "namespace": "shop" });
        let sets = [
            set(
                "shop",
                "late",
                LATE,
                to_web.clone(),
                &[("a", "late.example.com"), ("b", "early.example.com")],
            ),
            set(
                "shop",
                "early",
                EARLY,
                to_web.clone(),
                &[("a", "early.example.com"), ("own", "API.example.com")],
            ),
            set(
                "mallory",
                "steal",
                EARLY,
                to_web.clone(),
                &[("a", "mallory.example.com")],
            ),
            set(
                "shop",
                "elsewhere",
                EARLY,
                json!({ "name": "other" }),
                &[("a", "other.example.com")],
            ),
        ];
        let same = attached(&gateway(Some("Same")), &sets);
        let keys: Vec<&str> = same.listeners.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["early.a", "late.a"]);
        assert_eq!(same.sets, ["shop/early", "shop/late"]);
        assert_eq!(same.problems.len(), 3, "{:?}", same.problems);
        assert!(
            same.problems
                .iter()
                .any(|p| p.contains("mallory/steal adds nothing"))
        );
        assert!(
            same.problems
                .iter()
                .any(|p| p.contains("listener own: hostname api.example.com"))
        );
        assert!(
            same.problems
                .iter()
                .any(|p| p.contains("listener b: hostname early.example.com"))
        );

        // Admitting every namespace: another namespace's listener is keyed with it.
        let all = attached(&gateway(Some("All")), &sets);
        let keys: Vec<&str> = all.listeners.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(keys, ["mallory.steal.a", "early.a", "late.a"]);

        // A name too long for its record's label (another namespace chooses it) adds nothing.
        let long = "n".repeat(60);
        let too_long = attached(
            &gateway(Some("All")),
            &[set(
                "mallory",
                &long,
                EARLY,
                to_web.clone(),
                &[("a", "long.example.com")],
            )],
        );
        assert!(too_long.listeners.is_empty());
        assert!(
            too_long.problems[0].contains("at most 63 characters"),
            "{:?}",
            too_long.problems
        );

        // The default admits none.
        let none = attached(&gateway(None), &sets);
        assert!(none.listeners.is_empty());
        assert_eq!(none.problems.len(), 3, "{:?}", none.problems);
    }
}
