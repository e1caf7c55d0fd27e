//! Which ListenerSets attach to a Gateway, and the listeners they add (Gateway API v1.5).
//!
//! A ListenerSet attaches when its `parentRef` names the Gateway and the Gateway admits the
//! ListenerSet's namespace (`spec.allowedListeners.namespaces.from`: `Same`, `All`; the
//! default `None` admits none). A ListenerSet is a tenant's input, and may come from any
//! namespace:
//!
//! - one in a namespace the Gateway does not admit adds nothing, whatever it names; the
//!   Gateway's policy says how many, naming a few (a line each would let any namespace fill
//!   another team's status);
//! - the Gateway's own listeners come first, then its namespace's ListenerSets, then other
//!   namespaces', each oldest first: a listener
//!   whose hostname an earlier one has is copied to the spokes (its port or protocol may
//!   differ: the gateway implementation settles conflicts) but publishes no DNS of its own, so a
//!   ListenerSet never takes over the DNS of the Gateway's own hostnames;
//! - a listener of another namespace's ListenerSet that terminates TLS adds nothing: its copy
//!   sits in the Gateway's downstream namespace, where its certificate reference would name a
//!   Secret of the Gateway's team;
//! - at most [`MAX_SET_LISTENERS`] listeners are added, so another namespace cannot grow the
//!   Gateway's ManifestWork past what OCM takes.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;
use meridian_api::upstream::{Gateway, Listener, ListenerSet};

/// The longest DNSRecord name a ListenerSet's listener may have: a label value's.
const MAX_RECORD_NAME: usize = 63;

/// The most listeners ListenerSets add to one Gateway (as many as a Gateway may have itself).
pub const MAX_SET_LISTENERS: usize = 64;

/// The most lines about refused listeners a policy's status carries; the rest are counted.
const MAX_PROBLEM_LINES: usize = 8;

/// A listener a ListenerSet adds to its Gateway.
#[derive(Debug, Clone, PartialEq)]
pub struct SetListener {
    /// What the listener is called beside the Gateway's own: `<set>.<listener>` for a
    /// ListenerSet of the Gateway's namespace, `<namespace>.<set>.<listener>` for another's;
    /// never one of the Gateway's own listener names, nor another set listener's.
    pub key: String,
    pub namespace: String,
    pub set: String,
    /// The name of the ListenerSet's copy beside the downstream Gateway: the set's name and a
    /// hash of the Gateway's and the set's namespaces and names, so no two copies in the
    /// downstream namespace share one (whichever Gateway of the namespace they serve).
    pub copy: String,
    pub listener: Listener,
    /// Whether the listener publishes DNS: no when an earlier listener has its hostname.
    pub publish: bool,
}

/// What the ListenerSets naming a Gateway add, and why the others add nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Attached {
    pub listeners: Vec<SetListener>,
    pub problems: Vec<String>,
}

/// The Gateway API group a parentRef names by default.
const GATEWAY_GROUP: &str = "gateway.networking.k8s.io";

/// The Gateway a ListenerSet names as its parent, as (namespace, name): in its own namespace
/// unless it names another; none when its parent is not a Gateway.
pub fn parent(set: &ListenerSet) -> Option<(String, String)> {
    let parent = &set.spec.parent_ref;
    if parent.group.as_deref().unwrap_or(GATEWAY_GROUP) != GATEWAY_GROUP
        || parent.kind.as_deref().unwrap_or("Gateway") != "Gateway"
    {
        return None;
    }
    let namespace = parent.namespace.clone().or_else(|| set.namespace())?;
    Some((namespace, parent.name.clone()))
}

/// What a ListenerSet's listeners are called beside the Gateway's own, before their names
/// (`<set>.<listener>`): the set's name, or `<namespace>.<set>` for another namespace's.
pub fn set_key(gateway_namespace: &str, namespace: &str, set: &str) -> String {
    if namespace == gateway_namespace {
        set.to_string()
    } else {
        format!("{namespace}.{set}")
    }
}

/// Whether `set` names `gateway` as its parent.
pub fn names_gateway(set: &ListenerSet, gateway_namespace: &str, gateway_name: &str) -> bool {
    parent(set)
        .is_some_and(|(namespace, name)| namespace == gateway_namespace && name == gateway_name)
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

/// Whether a listener names a certificate (`tls.certificateRefs`).
fn terminates_tls(listener: &Listener) -> bool {
    listener
        .extra
        .get("tls")
        .and_then(|tls| tls.get("certificateRefs"))
        .and_then(serde_json::Value::as_array)
        .is_some_and(|refs| !refs.is_empty())
}

/// The listeners the ListenerSets in `sets` that name `gateway` add to it.
pub fn attached(gateway: &Gateway, sets: &[Arc<ListenerSet>]) -> Attached {
    let gateway_namespace = gateway.namespace().unwrap_or_default();
    let gateway_name = gateway.name_any();
    let mut naming: Vec<&Arc<ListenerSet>> = sets
        .iter()
        .filter(|s| s.metadata.deletion_timestamp.is_none())
        .filter(|s| names_gateway(s, &gateway_namespace, &gateway_name))
        .collect();
    // The Gateway's own namespace's first: another namespace's ListenerSet, however old, never
    // takes a hostname or the room of the Gateway team's own.
    naming.sort_by_key(|s| {
        (
            s.namespace().as_deref() != Some(gateway_namespace.as_str()),
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
    // The Gateway's own listener names may hold dots (Gateway API v1.5): no key may be one.
    let mut keys: BTreeSet<String> = gateway
        .spec
        .listeners
        .iter()
        .map(|l| l.name.clone())
        .collect();
    let mut found = Attached::default();
    let mut refused_sets: Vec<String> = Vec::new();
    let mut refusal = String::new();
    let mut refused_listeners: Vec<String> = Vec::new();
    for set in naming {
        let namespace = set.namespace().unwrap_or_default();
        let name = set.name_any();
        let id = format!("{namespace}/{name}");
        if let Err(why) = admits(gateway, &namespace) {
            refused_sets.push(id);
            refusal = why;
            continue;
        }
        let copy = copy_name(&gateway_namespace, &gateway_name, &namespace, &name);
        for listener in &set.spec.listeners {
            let refuse =
                |why: String| format!("ListenerSet {id} listener {}: {why}", listener.name);
            if found.listeners.len() >= MAX_SET_LISTENERS {
                refused_listeners.push(refuse(format!(
                    "the Gateway takes at most {MAX_SET_LISTENERS} listeners from ListenerSets"
                )));
                continue;
            }
            let key = format!(
                "{}.{}",
                set_key(&gateway_namespace, &namespace, &name),
                listener.name
            );
            if namespace != gateway_namespace && terminates_tls(listener) {
                refused_listeners.push(refuse(
                    "a ListenerSet of another namespace may not terminate TLS on this Gateway (its certificate would be looked up in the Gateway's namespace)".into(),
                ));
                continue;
            }
            // Its record (`<gateway>-<key>`) names its health probes by label, whose values
            // hold 63 characters: a longer name (a ListenerSet of another namespace may choose
            // it) would fail every write of the policy, not only its own.
            let record = crate::decide::desired::record_name(&gateway_name, &key);
            if record.len() > MAX_RECORD_NAME || !meridian_api::names::is_object_name(&record) {
                refused_listeners.push(refuse(format!(
                    "its DNSRecord {record} would not be a name of at most {MAX_RECORD_NAME} characters"
                )));
                continue;
            }
            if !keys.insert(key.clone()) {
                refused_listeners.push(refuse(format!(
                    "a listener of the Gateway or of another ListenerSet is already called {key}"
                )));
                continue;
            }
            // A listener with no hostname publishes nothing, and takes nothing either.
            let hostname = listener.hostname.as_deref().map(str::to_ascii_lowercase);
            let publish = hostname.is_some() && hostnames.insert(hostname);
            found.listeners.push(SetListener {
                key,
                namespace: namespace.clone(),
                set: name.clone(),
                copy: copy.clone(),
                listener: listener.clone(),
                publish,
            });
        }
    }
    if !refused_sets.is_empty() {
        let named: Vec<&str> = refused_sets.iter().take(3).map(String::as_str).collect();
        let more = refused_sets.len() - named.len();
        found.problems.push(format!(
            "{} ListenerSet(s) naming the Gateway add nothing ({refusal}): {}{}",
            refused_sets.len(),
            named.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    let shown = refused_listeners.len().min(MAX_PROBLEM_LINES);
    let more = refused_listeners.len() - shown;
    found
        .problems
        .extend(refused_listeners.into_iter().take(shown));
    if more > 0 {
        found
            .problems
            .push(format!("{more} more ListenerSet listeners add nothing"));
    }
    found
}

/// The name of a ListenerSet's copy beside the downstream Gateway (see [`SetListener::copy`]).
fn copy_name(gateway_namespace: &str, gateway: &str, namespace: &str, set: &str) -> String {
    let hash = meridian_dns::shortcode::shortcode(
        &format!("{gateway_namespace}/{gateway}/{namespace}/{set}"),
        8,
    );
    let readable: String = set.chars().take(253 - hash.len() - 1).collect();
    format!("{}-{hash}", readable.trim_end_matches(['-', '.']))
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
    fn attached_listeners_come_oldest_first_and_never_publish_a_hostname_already_taken() {
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
        let published = |found: &Attached| -> Vec<(String, bool)> {
            found
                .listeners
                .iter()
                .map(|l| (l.key.clone(), l.publish))
                .collect()
        };
        let same = attached(&gateway(Some("Same")), &sets);
        // A hostname the Gateway (any case) or an older set has is copied, not published.
        assert_eq!(
            published(&same),
            [
                ("early.a".to_string(), true),
                ("early.own".to_string(), false),
                ("late.a".to_string(), true),
                ("late.b".to_string(), false),
            ]
        );
        let attached_sets: BTreeSet<String> = same
            .listeners
            .iter()
            .map(|l| format!("{}/{}", l.namespace, l.set))
            .collect();
        assert_eq!(
            attached_sets,
            BTreeSet::from(["shop/early".to_string(), "shop/late".to_string()])
        );
        assert_eq!(
            same.problems,
            [
                "1 ListenerSet(s) naming the Gateway add nothing (the Gateway admits ListenerSets of its own namespace only): mallory/steal"
            ]
        );
        // Each set's copy has a name of its own, whichever Gateway it serves.
        let copies: BTreeSet<&str> = same.listeners.iter().map(|l| l.copy.as_str()).collect();
        assert_eq!(copies.len(), 2);
        assert!(
            copies
                .iter()
                .all(|c| c.starts_with("early-") || c.starts_with("late-"))
        );
        assert_ne!(
            copy_name("shop", "web", "shop", "mallory.extra"),
            copy_name("shop", "web", "mallory", "extra")
        );
        assert_ne!(
            copy_name("shop", "web", "mallory", "extra"),
            copy_name("shop", "api", "mallory", "extra")
        );

        // Admitting every namespace: another namespace's listener is keyed with it, and comes
        // after the Gateway's namespace's, however old.
        let all = attached(&gateway(Some("All")), &sets);
        let keys: Vec<&str> = all.listeners.iter().map(|l| l.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "early.a",
                "early.own",
                "late.a",
                "late.b",
                "mallory.steal.a"
            ]
        );

        // The default admits none, and says so in one line.
        let none = attached(&gateway(None), &sets);
        assert!(none.listeners.is_empty());
        assert_eq!(none.problems.len(), 1, "{:?}", none.problems);
        assert!(
            none.problems[0].starts_with("3 ListenerSet(s)"),
            "{:?}",
            none.problems
        );
    }

    /// What another namespace's ListenerSet may try, admitted (`All`): each listener adds
    /// nothing, with a line saying why, and the lines are capped.
    #[test]
    fn another_namespaces_listener_set_can_take_no_name_no_certificate_and_no_more_room() {
        let to_web = json!({ "name": "web", "namespace": "shop" });
        let all = gateway(Some("All"));
        let one = |listeners: Vec<serde_json::Value>| {
            let set: Arc<ListenerSet> = Arc::new(
                serde_json::from_value(json!({
                    "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
                    "metadata": { "name": "x", "namespace": "mallory", "creationTimestamp": EARLY },
                    "spec": { "parentRef": to_web, "listeners": listeners },
                }))
                .unwrap(),
            );
            attached(&all, &[set])
        };
        let http = |name: &str| json!({ "name": name, "hostname": format!("{name}.example.com"), "port": 80, "protocol": "HTTP" });
        // A record name too long for its probes' label.
        let long = one(vec![http(&"n".repeat(60))]);
        assert!(long.listeners.is_empty());
        assert!(
            long.problems[0].contains("at most 63 characters"),
            "{:?}",
            long.problems
        );
        // A certificate reference, which would name a Secret of the Gateway's team downstream.
        let mut tls = http("secure");
        tls["protocol"] = json!("HTTPS");
        tls["port"] = json!(443);
        tls["tls"] = json!({ "certificateRefs": [{ "name": "wildcard-cert" }] });
        let secure = one(vec![tls]);
        assert!(secure.listeners.is_empty());
        assert!(
            secure.problems[0].contains("may not terminate TLS"),
            "{:?}",
            secure.problems
        );
        // More listeners than a Gateway may have: the rest add nothing, in a few lines.
        let many = one((0..100).map(|i| http(&format!("l{i}"))).collect());
        assert_eq!(many.listeners.len(), MAX_SET_LISTENERS);
        assert_eq!(
            many.problems.len(),
            MAX_PROBLEM_LINES + 1,
            "{:?}",
            many.problems
        );
        assert_eq!(
            many.problems.last().unwrap(),
            &format!(
                "{} more ListenerSet listeners add nothing",
                100 - MAX_SET_LISTENERS - MAX_PROBLEM_LINES
            )
        );
    }

    /// An older ListenerSet of another namespace takes neither a hostname nor the room of the
    /// Gateway namespace's own ListenerSets.
    #[test]
    fn the_gateways_namespace_comes_before_older_listener_sets_of_others() {
        let to_web = json!({ "name": "web", "namespace": "shop" });
        let all = gateway(Some("All"));
        let mut crowd: Vec<(String, String)> = (0..MAX_SET_LISTENERS)
            .map(|i| (format!("l{i}"), format!("l{i}.example.com")))
            .collect();
        crowd.push(("docs".into(), "docs.example.com".into()));
        let crowd: Vec<(&str, &str)> = crowd
            .iter()
            .map(|(l, h)| (l.as_str(), h.as_str()))
            .collect();
        let sets = [
            set("mallory", "crowd", EARLY, to_web.clone(), &crowd),
            set(
                "shop",
                "team",
                LATE,
                to_web,
                &[("docs", "docs.example.com")],
            ),
        ];
        let found = attached(&all, &sets);
        let docs: Vec<(&str, bool)> = found
            .listeners
            .iter()
            .filter(|l| l.listener.hostname.as_deref() == Some("docs.example.com"))
            .map(|l| (l.key.as_str(), l.publish))
            .collect();
        assert_eq!(docs, [("team.docs", true)]);
        assert_eq!(found.listeners.len(), MAX_SET_LISTENERS);
        assert_eq!(found.listeners[0].set, "team");
    }

    /// A ListenerSet of the Gateway's namespace whose key is one of the Gateway's own listener
    /// names (which may hold dots) adds nothing rather than share its record.
    #[test]
    fn no_set_listener_shares_a_name_with_the_gateways_own() {
        let mut gateway = gateway(Some("Same"));
        gateway.spec.listeners[0].name = "extra.a".into();
        let found = attached(
            &gateway,
            &[set(
                "shop",
                "extra",
                EARLY,
                json!({ "name": "web" }),
                &[("a", "a.example.com")],
            )],
        );
        assert!(found.listeners.is_empty());
        assert!(
            found.problems[0].contains("already called extra.a"),
            "{:?}",
            found.problems
        );
    }
}
