//! Names of objects the hub and the agents both know, so neither has to ask the other.

/// The namespace the hub installs the agent into on every managed cluster.
pub const AGENT_NAMESPACE: &str = "meridian-system";

/// The Secret an earlier hub kept in each cluster namespace with every tenant's probe headers in
/// one object. The hub now keeps one copy per tenant namespace ([`probe_headers_copy`]) and
/// deletes this one.
pub const PROBE_HEADERS_SECRET: &str = "meridian-probe-headers";

/// The copy, in the hub's namespace, of the probe header Secrets of one tenant namespace (keys:
/// the Secret's name; values: JSON header maps). One copy per namespace: one team's headers
/// never travel in another team's object, and one team's size cannot stop another's delivery.
/// A namespace name is a DNS label, so the names cannot collide. (Earlier hubs kept a copy in
/// every cluster namespace, which made the hub a writer of Secrets everywhere.)
pub fn probe_headers_copy(namespace: &str) -> String {
    format!("{PROBE_HEADERS_SECRET}-{namespace}")
}

/// The Role (and its RoleBinding) an earlier hub kept in each cluster namespace, naming the
/// header copies there; it owned them, so deleting it removes them.
pub const PROBE_HEADERS_READER: &str = "meridian-agent-probe-headers";

/// The Role in the hub's namespace that lets the agents read what the hub keeps there for
/// them: the seal key and exactly the current header copies, by name. The copies, and each
/// cluster's binding to it ([`agent_copies_binding`]), are owned by it, so deleting it
/// (uninstall) removes them.
pub const AGENT_COPIES_READER: &str = "meridian-agent-copies";

/// The binding, in the hub's namespace, of [`AGENT_COPIES_READER`] to `cluster`'s agent.
pub fn agent_copies_binding(cluster: &str) -> String {
    format!("{AGENT_COPIES_READER}-{cluster}")
}

/// The binding, in the hub's namespace, of the zone keys' copy to `cluster`'s agent, when
/// agents serve DNS (owned by the copy).
pub fn agent_zone_keys_binding(cluster: &str) -> String {
    format!("meridian-agent-zone-keys-{cluster}")
}

/// The Secret holding the key the hub seals the probes it derives with, in the hub's own
/// namespace (made on first use): the one key the agents check a probe's seal with before
/// they run it (key `key`).
pub const PROBE_SEAL_SECRET: &str = "meridian-probe-seal";

/// The Secret in the hub's namespace holding copies of the keys of the signed embedded zones,
/// when agents serve DNS (keys `<namespace>.<ManagedZone>`, values JSON maps of the key
/// Secret's fields).
pub const DNSSEC_KEYS_SECRET: &str = "meridian-dnssec-keys";

/// The Lease in each cluster namespace on the hub that the cluster's agent renews as its
/// heartbeat (the hub creates it when it installs the agent; the agent may only renew it).
pub const HEARTBEAT_LEASE: &str = "meridian-agent-heartbeat";

/// The agent's ClusterReport in its cluster namespace on the hub (its probe results are
/// `ProbeResults` objects beside it, see `meridian::probe_results_name`).
pub const CLUSTER_REPORT: &str = "agent";

/// Whether `value` can name an object (a DNS subdomain: lowercase letters, digits, `-` and
/// `.`, starting and ending with a letter or digit, at most 253 characters).
pub fn is_object_name(value: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    (1..=253).contains(&value.len())
        && value
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && edge(value.chars().next())
        && edge(value.chars().next_back())
}

/// On a ListenerSet's copy beside a downstream Gateway: what the hub calls its listeners,
/// `<set>` or `<namespace>.<set>`, so that the agent reports each as `<key>.<listener>`, the
/// name the hub publishes it under.
pub const LISTENER_SET_KEY_ANNOTATION: &str = "meridian.dev/listener-set-key";
