//! The pure middle of gateway placement: what the hub asks each placed cluster's work agent to
//! apply (the downstream Gateway and its TLS Secrets; the Meridian agent with credentials that
//! can write only in that cluster's namespace on the hub), and when a cluster that left the
//! placement loses its ManifestWork.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::ObjectMeta;
use meridian_api::labels::{GATEWAY_BUNDLE_LABEL, bundle_entries};
use meridian_api::upstream::{Gateway, Listener, ManagedCluster, ManifestWork};
use serde_json::{Value, json};

use meridian_controllers::decide::desired::downstream_namespace;
use meridian_controllers::decide::listener_sets::{self, SetListener};
use meridian_dns::shortcode::shortcode;

/// Label on ManifestWorks naming the hub Gateway they place (`<namespace>.<name>`).
pub use meridian_api::labels::GATEWAY_WORK_LABEL;
/// Annotation on a ManifestWork whose cluster left the placement: since when (RFC 3339).
pub const LEAVING_SINCE: &str = "meridian.dev/leaving-since";
/// Name of the ManifestWork that installs the agent in a cluster namespace.
pub const AGENT_WORK: &str = "meridian-agent";
/// Namespace the agent runs in on a spoke.
pub use meridian_api::names::AGENT_NAMESPACE;
/// Secret on the spoke holding the agent's hub kubeconfig.
pub const AGENT_HUB_KUBECONFIG_SECRET: &str = "meridian-hub-kubeconfig";
/// The downstream GatewayClass when the hub GatewayClass names none.
pub const DEFAULT_DOWNSTREAM_CLASS: &str = "istio";
/// Label on a ManagedCluster giving its downstream Gateways another class than the fleet's (an
/// Envoy Gateway cluster in an Istio fleet). The hub's admin sets it; OCM lets the spoke's
/// registration agent update its own ManagedCluster too, so, like the claim below, it is the
/// spoke's word as well, and it decides nothing but that spoke's own Gateways.
pub const DOWNSTREAM_CLASS_LABEL: &str = "meridian.dev/downstream-gateway-class";
/// ClusterClaim a spoke states the same with (`status.clusterClaims` of its ManagedCluster,
/// reported by OCM's registration agent); the label wins over it.
pub const DOWNSTREAM_CLASS_CLAIM: &str = "gatewayclass.meridian.dev";

/// The class a cluster's downstream Gateways take: its [`DOWNSTREAM_CLASS_LABEL`], else its
/// [`DOWNSTREAM_CLASS_CLAIM`], else `fleet` (the hub GatewayClass's parameters). A value that
/// is no GatewayClass name is not used: the next one is, and the second element says why.
/// What a cluster says changes only its own Gateways.
pub fn cluster_downstream_class(
    cluster: Option<&ManagedCluster>,
    fleet: &str,
) -> (String, Option<String>) {
    let Some(cluster) = cluster else {
        return (fleet.to_string(), None);
    };
    let label = cluster
        .labels()
        .get(DOWNSTREAM_CLASS_LABEL)
        .map(|value| (format!("label {DOWNSTREAM_CLASS_LABEL}"), value.as_str()));
    let claim = cluster
        .status
        .iter()
        .flat_map(|status| &status.cluster_claims)
        .find(|claim| claim.name == DOWNSTREAM_CLASS_CLAIM)
        .map(|claim| {
            (
                format!("ClusterClaim {DOWNSTREAM_CLASS_CLAIM}"),
                claim.value.as_str(),
            )
        });
    let mut refused = Vec::new();
    for (source, value) in label.into_iter().chain(claim) {
        if meridian_api::names::is_object_name(value) {
            return (value.to_string(), complaint(&cluster.name_any(), &refused));
        }
        refused.push(format!("{source} {value:?} is not a GatewayClass name"));
    }
    (fleet.to_string(), complaint(&cluster.name_any(), &refused))
}

fn complaint(cluster: &str, refused: &[String]) -> Option<String> {
    (!refused.is_empty()).then(|| format!("ManagedCluster {cluster}: {}", refused.join("; ")))
}

/// The value of [`GATEWAY_WORK_LABEL`] for a hub Gateway: `<namespace>.<name>` (unambiguous:
/// a namespace has no dots), or past a label value's 63 characters its start and a hash.
pub fn gateway_label(namespace: &str, name: &str) -> String {
    let plain = format!("{namespace}.{name}");
    if plain.len() <= 63 {
        return plain;
    }
    let start: String = plain.chars().take(52).collect();
    format!(
        "{}-{}",
        start.trim_end_matches(['-', '.', '_']),
        shortcode(&plain, 10)
    )
}

/// Name of the ManifestWork placing a hub Gateway: readable, and a hash of namespace and name
/// so that no two Gateways share one (`gateway-<namespace>-<name>` alone made `web` in
/// `shop-prod` and `prod-web` in `shop` one work, each deleting the other's Gateway and TLS
/// Secrets on every spoke), within an object name's 253 characters.
pub fn gateway_work_name(namespace: &str, name: &str) -> String {
    let hash = shortcode(&format!("{namespace}/{name}"), 10);
    let readable: String = format!("gateway-{namespace}-{name}")
        .chars()
        .take(253 - hash.len() - 1)
        .collect();
    format!("{}-{hash}", readable.trim_end_matches(['-', '.']))
}

/// The name earlier hubs gave the work (see [`gateway_work_name`]); such works move over to
/// the new name without their Gateways leaving the spokes.
pub fn legacy_gateway_work_name(namespace: &str, name: &str) -> String {
    format!("gateway-{namespace}-{name}")
}

/// Secrets the Gateway's listeners use for TLS (`tls.certificateRefs`, kind Secret, in the
/// Gateway's namespace), and those of the listeners ListenerSets of its namespace add (`sets`):
/// a ListenerSet of another namespace names its own namespace's Secrets, which the hub does
/// not copy.
pub fn tls_secret_names(gateway: &Gateway, sets: &[SetListener]) -> Vec<String> {
    let namespace = gateway.namespace().unwrap_or_default();
    let of_sets = sets
        .iter()
        .filter(|l| l.namespace == namespace)
        .map(|l| &l.listener);
    let mut names: Vec<String> = gateway
        .spec
        .listeners
        .iter()
        .chain(of_sets)
        .filter_map(|l| l.extra.get("tls"))
        .filter_map(|tls| tls.get("certificateRefs").and_then(Value::as_array))
        .flatten()
        .filter(|r| r.get("kind").and_then(Value::as_str).unwrap_or("Secret") == "Secret")
        .filter(|r| r.get("namespace").is_none())
        .filter_map(|r| r.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The ManifestWork placing `gateway` on a cluster: the downstream namespace, the Gateway
/// (same listeners, the downstream class), copies of the ListenerSets attached to it (`sets`,
/// their listeners as attached) and of its TLS Secrets.
pub fn gateway_work(
    gateway: &Gateway,
    downstream_class: &str,
    secrets: &[Secret],
    sets: &[SetListener],
    cluster: &str,
) -> Value {
    let namespace = gateway.namespace().unwrap_or_default();
    let downstream = downstream_namespace(&namespace);
    let mut spec = serde_json::to_value(&gateway.spec).expect("a Gateway spec serializes");
    spec["gatewayClassName"] = json!(downstream_class);
    // The downstream copy admits the ListenerSets copied beside it, and nothing else: never a
    // ListenerSet someone on the spoke writes.
    match spec.as_object_mut() {
        Some(spec) if sets.is_empty() => {
            spec.remove("allowedListeners");
        }
        Some(spec) => {
            spec.insert(
                "allowedListeners".into(),
                json!({ "namespaces": { "from": "Same" } }),
            );
        }
        None => {}
    }
    let mut manifests = vec![
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": downstream } }),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": { "name": gateway.name_any(), "namespace": downstream },
            "spec": spec,
        }),
    ];
    manifests.extend(listener_set_copies(gateway, sets, &downstream));
    for secret in secrets {
        manifests.push(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": { "name": secret.name_any(), "namespace": downstream },
            "type": secret.type_,
            "data": secret.data,
        }));
    }
    json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": {
            "name": gateway_work_name(&namespace, &gateway.name_any()),
            "namespace": cluster,
            "labels": { GATEWAY_WORK_LABEL: gateway_label(&namespace, &gateway.name_any()) },
        },
        "spec": {
            "workload": { "manifests": manifests },
            // Other Gateways of the same hub namespace share the downstream namespace: removing
            // this work leaves it in place.
            "deleteOption": {
                "propagationPolicy": "SelectivelyOrphan",
                "selectivelyOrphans": { "orphaningRules": [
                    { "group": "", "resource": "namespaces", "name": downstream },
                ] },
            },
        },
    })
}

/// The ListenerSets of `sets` as copies in the downstream namespace (named as
/// [`SetListener::copy`] says), each naming the downstream Gateway, with the listeners attached.
fn listener_set_copies(gateway: &Gateway, sets: &[SetListener], downstream: &str) -> Vec<Value> {
    let mut copies: Vec<(String, Vec<&SetListener>)> = Vec::new();
    for listener in sets {
        match copies.iter_mut().find(|(copy, _)| *copy == listener.copy) {
            Some((_, listeners)) => listeners.push(listener),
            None => copies.push((listener.copy.clone(), vec![listener])),
        }
    }
    copies
        .into_iter()
        .map(|(name, listeners)| {
            // What the hub calls the set's listeners (`<key>.<listener>`), for the agent's
            // report of them.
            let key = listeners
                .first()
                .map(|l| {
                    listener_sets::set_key(
                        &gateway.namespace().unwrap_or_default(),
                        &l.namespace,
                        &l.set,
                    )
                })
                .unwrap_or_default();
            let listeners: Vec<&Listener> = listeners.iter().map(|l| &l.listener).collect();
            json!({
                "apiVersion": "gateway.networking.k8s.io/v1",
                "kind": "ListenerSet",
                "metadata": {
                    "name": name,
                    "namespace": downstream,
                    "annotations": { meridian_api::names::LISTENER_SET_KEY_ANNOTATION: key },
                },
                "spec": {
                    "parentRef": {
                        "group": "gateway.networking.k8s.io", "kind": "Gateway",
                        "name": gateway.name_any(),
                    },
                    "listeners": listeners,
                },
            })
        })
        .collect()
}

/// What to do with a cluster's ManifestWork for a Gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkFate {
    /// The cluster is placed: keep (and update) the work.
    Keep,
    /// The cluster just left: remember since when; DNS already no longer points at it.
    MarkLeaving,
    /// Still within the grace period: look again after this long.
    Wait(Duration),
    /// Remove the work now.
    Delete,
}

/// The fate of a cluster's work: placed clusters keep it; a cluster that left keeps it for
/// `grace` (its traffic drains while DNS TTLs expire), unless the ManagedCluster is gone.
pub fn work_fate(
    placed: bool,
    cluster_exists: bool,
    leaving_since: Option<&str>,
    now: Timestamp,
    grace: Duration,
) -> WorkFate {
    if placed {
        return WorkFate::Keep;
    }
    if !cluster_exists {
        return WorkFate::Delete;
    }
    let Some(since) = leaving_since.and_then(|s| s.parse::<Timestamp>().ok()) else {
        return WorkFate::MarkLeaving;
    };
    let elapsed = now.duration_since(since);
    let elapsed = Duration::try_from(elapsed).unwrap_or_default();
    if elapsed >= grace {
        WorkFate::Delete
    } else {
        WorkFate::Wait(grace - elapsed)
    }
}

/// The finalizer hubs before this one held on each multi-cluster Gateway; let go on sight (by
/// placement, and by `meridian-hub uninstall` for a hub that never ran after an upgrade).
pub const LEGACY_GATEWAY_FINALIZER: &str = "meridian.dev/gateway-placement";

/// The JSON Patch letting go of [`LEGACY_GATEWAY_FINALIZER`] among `finalizers`, if it is there:
/// that one entry, removed if it is still where it was read whatever else changed since
/// (status writes move the resource version all the time); a finalizer added or removed
/// meanwhile fails the test (422), and the caller reads again.
pub fn legacy_finalizer_release(finalizers: &[String]) -> Option<json_patch::Patch> {
    let index = finalizers
        .iter()
        .position(|f| f == LEGACY_GATEWAY_FINALIZER)?;
    let path = format!("/metadata/finalizers/{index}");
    serde_json::from_value(json!([
        { "op": "test", "path": path, "value": LEGACY_GATEWAY_FINALIZER },
        { "op": "remove", "path": path },
    ]))
    .ok()
}

/// The work labels ([`gateway_label`]) of `gateways`.
pub fn gateway_labels<'a>(gateways: impl IntoIterator<Item = &'a ObjectMeta>) -> HashSet<String> {
    gateways
        .into_iter()
        .map(|meta| {
            gateway_label(
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            )
        })
        .collect()
}

/// The Gateways among those `works` hold (a Gateway's own work, as earlier hubs wrote them,
/// or a bundle's entry) whose label is not in `present` (the labels of every Gateway there is,
/// of any class): deleted, with the clusters holding each. A Gateway that is still there keeps
/// its parts whatever its class (one no longer multi-cluster keeps them as they are); works of
/// no Gateway (the agent's) hold none.
pub fn deleted_gateways(
    present: &HashSet<String>,
    works: &[Arc<ManifestWork>],
) -> BTreeMap<String, BTreeSet<String>> {
    let mut deleted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for work in works {
        let labels: Vec<String> = match work.labels().get(GATEWAY_WORK_LABEL) {
            Some(label) => vec![label.clone()],
            None if work.labels().contains_key(GATEWAY_BUNDLE_LABEL) => {
                bundle_entries(work.metadata.annotations.as_ref())
                    .into_keys()
                    .collect()
            }
            None => Vec::new(),
        };
        for label in labels.into_iter().filter(|l| !present.contains(l)) {
            deleted
                .entry(label)
                .or_default()
                .insert(work.namespace().unwrap_or_default());
        }
    }
    deleted
}

/// A kubeconfig for the agent: the hub's address and CA, and a token of the agent's hub
/// ServiceAccount, whose Role allows writing ClusterReports in the cluster namespace only.
pub fn agent_kubeconfig(server: &str, ca_pem: &str, token: &str, cluster: &str) -> String {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    yaml_serde::to_string(&json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "hub", "cluster": { "server": server, "certificate-authority-data": ca } }],
        "users": [{ "name": "meridian-agent", "user": { "token": token } }],
        "contexts": [{ "name": "hub", "context": { "cluster": "hub", "user": "meridian-agent", "namespace": cluster } }],
        "current-context": "hub",
    }))
    .expect("a kubeconfig serializes")
}

/// The ClusterRoles the agents hold on the hub, shipped by the chart (`agent-roles.yaml`,
/// checked against [`agent_cluster_roles`]) so that the hub writes no ClusterRole: it only
/// binds these, by name (`bind` with `resourceNames`).
///
/// Bound in a cluster's namespace (a RoleBinding): its report, probe results and heartbeat.
/// (The seal key and the header copies are read in the hub's namespace, through a Role the hub
/// keeps there: `controller::probe_headers`.)
pub const AGENT_REPORTER: &str = "meridian-agent-reporter";
/// Bound in the hub's namespace when agents serve DNS (`controller::key_copies`): the copy of
/// the signed zones' keys.
pub const AGENT_ZONE_KEYS: &str = "meridian-agent-zone-keys";
/// Bound cluster-wide: reading the health probes (every agent probes every leaf). Probes hold
/// hosts and addresses, never credentials.
pub const AGENT_PROBE_READER: &str = "meridian-agent-probes";
/// Bound cluster-wide when agents serve DNS: reading the DNSRecords and ManagedZones their
/// zones are mirrored from. Both hold DNS data, which the nameserver gives anyone who asks,
/// never credentials.
pub const AGENT_ZONE_READER: &str = "meridian-agent-zones";

/// The names earlier hubs gave what they wrote themselves: the shared ClusterRoles (now the
/// chart's, under new names so that an upgrade does not find them owned by the hub) and, in
/// each cluster namespace, the agent's Role and its binding (a binding cannot change the role
/// it names). The uninstall removes them; an upgraded hub deletes the namespaced pair.
pub const LEGACY_AGENT_CLUSTER_ROLES: [&str; 2] =
    ["meridian-agent-probe-reader", "meridian-agent-zone-reader"];
pub const LEGACY_AGENT_ROLE: &str = AGENT_WORK;

/// The ClusterRoles the agents hold on the hub (see [`AGENT_REPORTER`]); the chart renders
/// exactly these.
pub fn agent_cluster_roles() -> Vec<Value> {
    let role = |name: &str, rules: Value| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": name, "labels": { "meridian.dev/granted-to": "agents" } },
            "rules": rules,
        })
    };
    vec![
        role(
            AGENT_REPORTER,
            json!([
                {
                    "apiGroups": ["meridian.dev"],
                    "resources": ["clusterreports"],
                    "verbs": ["get", "list", "watch", "create"],
                },
                {
                    // Its one report (the schema refuses any other name).
                    "apiGroups": ["meridian.dev"],
                    "resources": ["clusterreports"],
                    "resourceNames": [meridian_api::names::CLUSTER_REPORT],
                    "verbs": ["update", "patch"],
                },
                {
                    // Its probe results, in shards; a smaller split deletes the shards beyond it.
                    "apiGroups": ["meridian.dev"],
                    "resources": ["proberesults"],
                    "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
                },
                {
                    // Its heartbeat, which the hub creates: the agent only renews it.
                    "apiGroups": ["coordination.k8s.io"],
                    "resources": ["leases"],
                    "resourceNames": [meridian_api::names::HEARTBEAT_LEASE],
                    "verbs": ["get", "update", "patch"],
                },
            ]),
        ),
        role(
            AGENT_ZONE_KEYS,
            // The copy of the signed zones' keys (`controller::key_copies`): `get`, and `list`
            // and `watch` narrowed to it by name (a watch must then select it by
            // `metadata.name`).
            json!([{
                "apiGroups": [""],
                "resources": ["secrets"],
                "resourceNames": [meridian_api::names::DNSSEC_KEYS_SECRET],
                "verbs": ["get", "list", "watch"],
            }]),
        ),
        role(
            AGENT_PROBE_READER,
            json!([{
                "apiGroups": ["kuadrant.io"],
                "resources": ["dnshealthcheckprobes"],
                "verbs": ["get", "list", "watch"],
            }]),
        ),
        role(
            AGENT_ZONE_READER,
            json!([{
                "apiGroups": ["kuadrant.io"],
                "resources": ["dnsrecords", "managedzones"],
                "verbs": ["get", "list", "watch"],
            }]),
        ),
    ]
}

/// How the hub's agents answer DNS for the embedded zones (`meridian-hub run
/// --agent-dns-listen`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentDns {
    /// The agent's DNS address in its pod.
    pub listen: std::net::SocketAddr,
    /// The hub's default name servers (`--ns`), so every server of a zone names the same set.
    pub name_servers: Vec<meridian_nameserver::ZoneNameServer>,
}

/// Who `cluster`'s agent is on the hub: the ServiceAccount the hub mints tokens for when it
/// installs the agent itself, and the user OCM's registration certifies when the addon
/// manager installs it. Both, so that an agent keeps its rights while an upgrade hands one
/// install over to the other; neither can be had for another cluster (the ServiceAccount
/// lives in the cluster's namespace, which only the hub's admins write; the certificate's
/// user names the cluster the CSR came from).
pub fn agent_subjects(cluster: &str) -> Value {
    json!([
        { "kind": "ServiceAccount", "name": AGENT_WORK, "namespace": cluster },
        { "kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": crate::addon::agent_user(cluster) },
    ])
}

/// Whether a binding's `subjects` are exactly `cluster`'s agent's ([`agent_subjects`]), read as
/// kind and name (the API server fills in API groups).
pub fn binds_agent(
    subjects: Option<&[k8s_openapi::api::rbac::v1::Subject]>,
    cluster: &str,
) -> bool {
    let held: std::collections::BTreeSet<(&str, &str)> = subjects
        .unwrap_or_default()
        .iter()
        .map(|s| (s.kind.as_str(), s.name.as_str()))
        .collect();
    let wanted = agent_subjects(cluster);
    let wanted: std::collections::BTreeSet<(&str, &str)> = wanted
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap_or_default(),
                s["name"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    held == wanted
}

/// The ClusterRoleBindings the chart gives every add-on agent (OCM's group for the add-on):
/// reading the probes, and when agents serve DNS the records and zones. One binding each for
/// the fleet, where the hub's own install binds them per agent.
pub fn addon_fleet_bindings(serves_dns: bool) -> Vec<Value> {
    let bind = |role: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": format!("{role}-addon"), "labels": { "meridian.dev/granted-to": "agents" } },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": [{ "kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": crate::addon::ADDON_GROUP }],
        })
    };
    let mut bindings = vec![bind(AGENT_PROBE_READER)];
    if serves_dns {
        bindings.push(bind(AGENT_ZONE_READER));
    }
    bindings
}

/// The hub-side identity of a cluster's agent: its heartbeat Lease and the reporter's binding
/// in the cluster namespace alone ([`agent_subjects`]); when the hub installs the agent itself
/// (`addon` false), also the ServiceAccount it mints tokens for and bindings of the probe
/// reader, and when agents serve DNS the zone reader, cluster-wide (an add-on agent has those
/// through its group: [`addon_fleet_bindings`]). (What it reads in the hub's namespace is
/// bound by the controllers that keep it there.) The hub writes no Role or ClusterRole for it.
pub fn agent_hub_rbac(cluster: &str, serves_dns: bool, addon: bool) -> Vec<Value> {
    let subjects = agent_subjects(cluster);
    let in_namespace = |role: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": role, "namespace": cluster },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": subjects,
        })
    };
    let account = json!([{ "kind": "ServiceAccount", "name": AGENT_WORK, "namespace": cluster }]);
    let cluster_wide = |role: &str| {
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": format!("{role}-{cluster}") },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role },
            "subjects": account,
        })
    };
    let mut rbac = vec![
        // The agent's heartbeat: created here, so the agent needs no right to create Leases,
        // only to renew this one.
        json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {
                "name": meridian_api::names::HEARTBEAT_LEASE,
                "namespace": cluster,
                "labels": { meridian_api::labels::HEARTBEAT_LABEL: "true" },
            },
        }),
        in_namespace(AGENT_REPORTER),
    ];
    if !addon {
        rbac.push(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": { "name": AGENT_WORK, "namespace": cluster },
        }));
        rbac.push(cluster_wide(AGENT_PROBE_READER));
        if serves_dns {
            rbac.push(cluster_wide(AGENT_ZONE_READER));
        }
    }
    rbac
}

/// Where an agent's manifests install it, and how it finds the hub.
#[derive(Debug, Clone, Copy)]
pub enum AgentLayout<'a> {
    /// The hub's own ManifestWork in `cluster`'s namespace (`--agent-delivery work`): the
    /// agent in [`AGENT_NAMESPACE`], its hub kubeconfig (a hub-minted token) in a Secret the
    /// work carries.
    Work {
        cluster: &'a str,
        hub_kubeconfig: &'a str,
    },
    /// An AddOnTemplate (`--agent-delivery addon`): OCM's addon manager fills in
    /// `{{CLUSTER_NAME}}` and `{{HUB_KUBECONFIG}}` and mounts the kubeconfig OCM's
    /// registration writes (a client certificate it renews); the agent in
    /// [`crate::addon::ADDON_NAMESPACE`] unless an AddOnDeploymentConfig moves it.
    AddOn,
}

/// The agent's image, and the Secrets its pod pulls it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentImage {
    pub reference: String,
    /// `kubernetes.io/dockerconfigjson` Secrets in the agent's namespace on each spoke.
    pub pull_secrets: Vec<String>,
}

impl AgentImage {
    /// An image pulled without credentials.
    pub fn public(reference: &str) -> Self {
        AgentImage {
            reference: reference.into(),
            pull_secrets: Vec::new(),
        }
    }
}

/// The pull secret OCM's klusterlet copies into every namespace labelled
/// [`ADDON_NAMESPACE_LABEL`] (its own registry credentials), which an add-on agent always names.
pub const OCM_PULL_SECRET: &str = "open-cluster-management-image-pull-credentials";
/// The label asking OCM's klusterlet for that copy.
pub const ADDON_NAMESPACE_LABEL: &str = "addon.open-cluster-management.io/namespace";

/// The user the agents run as: the images' `nonroot`.
const AGENT_UID: u32 = 65532;

/// The agent's manifests for `layout`: its namespace (enforcing Pod Security `restricted`), a
/// ServiceAccount that may read Gateways and namespaces and schedule routes there, the hub
/// kubeconfig when the layout carries it, and the Deployment, whose pod meets `restricted`.
pub fn agent_manifests(
    layout: AgentLayout<'_>,
    image: &AgentImage,
    dns: Option<&AgentDns>,
    agent_args: &[String],
) -> Vec<Value> {
    let (namespace, cluster, kubeconfig_path, spoke_role) = match layout {
        AgentLayout::Work { cluster, .. } => (
            AGENT_NAMESPACE,
            cluster,
            "/etc/meridian/hub/kubeconfig",
            "meridian-agent",
        ),
        AgentLayout::AddOn => (
            crate::addon::ADDON_NAMESPACE,
            "{{CLUSTER_NAME}}",
            "{{HUB_KUBECONFIG}}",
            crate::addon::ADDON_SPOKE_ROLE,
        ),
    };
    let account = "meridian-agent";
    let mut args: Vec<String> = [
        "run",
        "--cluster-name",
        cluster,
        "--hub-kubeconfig",
        kubeconfig_path,
    ]
    .map(String::from)
    .to_vec();
    // The hub's probe address policy, so the agent refuses what the hub refuses, and where the
    // hub keeps what the agent reads.
    args.extend(agent_args.iter().cloned());
    let mut ports = Vec::new();
    if let Some(dns) = dns {
        args.extend(["--serve-dns".to_string(), dns.listen.to_string()]);
        for name_server in &dns.name_servers {
            args.extend(["--ns".to_string(), name_server.to_string()]);
        }
        let port = dns.listen.port();
        ports = vec![
            json!({ "name": "dns", "containerPort": port, "protocol": "UDP" }),
            json!({ "name": "dns-tcp", "containerPort": port, "protocol": "TCP" }),
        ];
    }
    let (mut volumes, mut mounts) = (Vec::new(), Vec::new());
    if let AgentLayout::Work { .. } = layout {
        volumes.push(
            json!({ "name": "hub", "secret": { "secretName": AGENT_HUB_KUBECONFIG_SECRET } }),
        );
        mounts.push(json!({ "name": "hub", "mountPath": "/etc/meridian/hub", "readOnly": true }));
    }
    let mut namespace_labels = json!({
        "pod-security.kubernetes.io/enforce": "restricted",
        "pod-security.kubernetes.io/audit": "restricted",
    });
    let mut pull_secrets: Vec<&str> = Vec::new();
    if let AgentLayout::AddOn = layout {
        // OCM's registry credentials, copied here by its klusterlet when it has them (a name
        // without a Secret is only a warning: the image is then pulled without credentials).
        namespace_labels[ADDON_NAMESPACE_LABEL] = json!("true");
        pull_secrets.push(OCM_PULL_SECRET);
    }
    pull_secrets.extend(image.pull_secrets.iter().map(String::as_str));
    let pull_secrets: Vec<Value> = pull_secrets
        .into_iter()
        .map(|name| json!({ "name": name }))
        .collect();
    let mut manifests = vec![
        json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": { "name": namespace, "labels": namespace_labels },
        }),
        json!({ "apiVersion": "v1", "kind": "ServiceAccount", "metadata": { "name": account, "namespace": namespace } }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": spoke_role },
            "rules": [
                { "apiGroups": ["gateway.networking.k8s.io"], "resources": ["gateways"], "verbs": ["get", "list", "watch"] },
                // The hostnames of HTTPRoutes on wildcard listeners, which the hub probes them
                // through (routes may attach from any namespace the listener allows: read only).
                { "apiGroups": ["gateway.networking.k8s.io"], "resources": ["httproutes"], "verbs": ["get", "list", "watch"] },
                // The routes attached to the listeners of ListenerSets copied beside the
                // downstream Gateways (their status), reported as the Gateway's own are.
                { "apiGroups": ["gateway.networking.k8s.io"], "resources": ["listenersets"], "verbs": ["get", "list", "watch"] },
                // The cluster ID (kube-system's UID) and the namespace labels routers select.
                { "apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"] },
                // Route scheduling: routes and their status, routers and their Services, bindings.
                { "apiGroups": ["route.openshift.io"], "resources": ["routes"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": ["route.openshift.io"], "resources": ["routes/status"], "verbs": ["get", "patch", "update"] },
                { "apiGroups": ["meridian.dev"], "resources": ["routers"], "verbs": ["get", "list", "watch"] },
                { "apiGroups": ["meridian.dev"], "resources": ["routers/status"], "verbs": ["get", "patch", "update"] },
                { "apiGroups": ["meridian.dev"], "resources": ["routebindings"], "verbs": ["get", "list", "watch", "create", "patch", "update", "delete"] },
                { "apiGroups": ["meridian.dev"], "resources": ["routebindings/status"], "verbs": ["get", "patch", "update"] },
                { "apiGroups": [""], "resources": ["services"], "verbs": ["get", "list", "watch"] },
            ],
        }),
        json!({
            // The round-robin cursor, in the agent's own namespace.
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": account, "namespace": namespace },
            "rules": [{ "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "update"] }],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": account, "namespace": namespace },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account },
            "subjects": [{ "kind": "ServiceAccount", "name": account, "namespace": namespace }],
        }),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": spoke_role },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": spoke_role },
            "subjects": [{ "kind": "ServiceAccount", "name": account, "namespace": namespace }],
        }),
    ];
    if let AgentLayout::Work { hub_kubeconfig, .. } = layout {
        manifests.push(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": { "name": AGENT_HUB_KUBECONFIG_SECRET, "namespace": namespace },
            "stringData": { "kubeconfig": hub_kubeconfig },
        }));
    }
    manifests.push(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": account, "namespace": namespace },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": "meridian-agent" } },
            "template": {
                "metadata": { "labels": { "app": "meridian-agent" } },
                "spec": {
                    "serviceAccountName": account,
                    "imagePullSecrets": pull_secrets,
                    // Pod Security `restricted`: not root, no escalation, no capabilities, the
                    // runtime's seccomp profile. (So a DNS port must be 1024 or above.)
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": AGENT_UID,
                        "runAsGroup": AGENT_UID,
                        "seccompProfile": { "type": "RuntimeDefault" },
                    },
                    "containers": [{
                        "name": "agent",
                        "image": image.reference,
                        "args": args,
                        // Its namespace, where it keeps the route scheduler's cursor.
                        "env": [{
                            "name": "MERIDIAN_AGENT_NAMESPACE",
                            "valueFrom": { "fieldRef": { "fieldPath": "metadata.namespace" } },
                        }],
                        "ports": ports,
                        "securityContext": {
                            "allowPrivilegeEscalation": false,
                            "capabilities": { "drop": ["ALL"] },
                        },
                        "volumeMounts": mounts,
                    }],
                    "volumes": volumes,
                },
            },
        },
    }));
    manifests
}

/// The ManifestWork installing the agent on a cluster (`--agent-delivery work`).
pub fn agent_work(
    cluster: &str,
    hub_kubeconfig: &str,
    image: &AgentImage,
    dns: Option<&AgentDns>,
    agent_args: &[String],
) -> Value {
    let layout = AgentLayout::Work {
        cluster,
        hub_kubeconfig,
    };
    json!({
        "apiVersion": "work.open-cluster-management.io/v1",
        "kind": "ManifestWork",
        "metadata": { "name": AGENT_WORK, "namespace": cluster },
        "spec": { "workload": { "manifests": agent_manifests(layout, image, dns, agent_args) } },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(label: Option<&str>, claim: Option<&str>) -> ManagedCluster {
        let mut cluster: ManagedCluster = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1", "kind": "ManagedCluster",
            "metadata": { "name": "spoke-1" },
            "spec": { "hubAcceptsClient": true },
            "status": { "clusterClaims": [{ "name": "id.k8s.io", "value": "spoke-1" }] },
        }))
        .expect("a ManagedCluster");
        if let Some(label) = label {
            cluster
                .labels_mut()
                .insert(DOWNSTREAM_CLASS_LABEL.into(), label.into());
        }
        if let Some(claim) = claim {
            let status = cluster.status.as_mut().expect("a status");
            status
                .cluster_claims
                .push(meridian_api::upstream::ClusterClaimStatus {
                    name: DOWNSTREAM_CLASS_CLAIM.into(),
                    value: claim.into(),
                });
        }
        cluster
    }

    #[test]
    fn a_clusters_label_then_its_claim_then_the_fleet_name_its_downstream_class() {
        // (label, claim, class, refused)
        let long = "a".repeat(254);
        let table: [(Option<&str>, Option<&str>, &str, bool); 8] = [
            (None, None, "istio", false),
            (Some("eg"), None, "eg", false),
            (None, Some("traefik"), "traefik", false),
            (Some("eg"), Some("traefik"), "eg", false),
            (Some("Envoy Gateway"), Some("traefik"), "traefik", true),
            (None, Some("../kube-system"), "istio", true),
            (Some(""), Some(&long), "istio", true),
            (Some("eg.example.com"), None, "eg.example.com", false),
        ];
        for (label, claim, want, refused) in table {
            let (class, why) = cluster_downstream_class(Some(&cluster(label, claim)), "istio");
            assert_eq!(class, want, "{label:?} {claim:?}");
            assert_eq!(why.is_some(), refused, "{label:?} {claim:?}: {why:?}");
            if let Some(why) = why {
                assert!(why.starts_with("ManagedCluster spoke-1: "), "{why}");
            }
        }
        assert_eq!(
            cluster_downstream_class(None, "cilium"),
            ("cilium".into(), None),
            "a cluster not in the cache takes the fleet's"
        );
    }

    #[test]
    fn no_two_gateways_share_a_work_or_a_label_and_names_stay_within_limits() {
        // The collision the old names made: `web` in `shop-prod` and `prod-web` in `shop`.
        assert_eq!(
            legacy_gateway_work_name("shop-prod", "web"),
            legacy_gateway_work_name("shop", "prod-web")
        );
        assert_ne!(
            gateway_work_name("shop-prod", "web"),
            gateway_work_name("shop", "prod-web")
        );
        assert_ne!(
            gateway_label("shop-prod", "web"),
            gateway_label("shop", "prod-web")
        );
        let name = gateway_work_name("gateways", "prod-web");
        assert!(name.starts_with("gateway-gateways-prod-web-"), "{name}");
        assert_eq!(name, gateway_work_name("gateways", "prod-web"), "stable");
        // The longest a namespace (63) and a Gateway name (253) can be.
        let (namespace, gateway) = ("n".repeat(63), format!("{}.x", "g".repeat(251)));
        let long = gateway_work_name(&namespace, &gateway);
        assert!(long.len() <= 253, "{}", long.len());
        assert_ne!(
            long,
            gateway_work_name(&namespace, &format!("{}.y", "g".repeat(251)))
        );
        let label = gateway_label(&namespace, &gateway);
        assert!(label.len() <= 63, "{label}");
        assert_eq!(gateway_label("gateways", "prod-web"), "gateways.prod-web");
        for value in [long, label] {
            assert!(
                value.bytes().all(|b| b.is_ascii_lowercase()
                    || b.is_ascii_digit()
                    || b == b'-'
                    || b == b'.')
                    && !value.ends_with(['-', '.']),
                "{value}"
            );
        }
    }
    use meridian_api::upstream::GatewaySpec;

    #[test]
    fn the_earlier_finalizer_goes_alone_and_only_if_it_is_still_where_it_was_read() {
        let strings = |items: &[&str]| items.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(legacy_finalizer_release(&strings(&["example.com/other"])).is_none());
        assert!(legacy_finalizer_release(&[]).is_none());
        let read = strings(&["example.com/other", LEGACY_GATEWAY_FINALIZER]);
        let patch = legacy_finalizer_release(&read).expect("a patch");
        let gateway = |finalizers: Vec<String>| json!({ "metadata": { "finalizers": finalizers } });
        // As read: only the earlier hub's entry goes.
        let mut doc = gateway(read.clone());
        json_patch::patch(&mut doc, &patch).expect("the patch applies");
        assert_eq!(doc, gateway(strings(&["example.com/other"])));
        // Moved since (an entry before it went): the test fails, nothing is removed.
        let mut moved = gateway(strings(&[LEGACY_GATEWAY_FINALIZER]));
        assert!(json_patch::patch(&mut moved, &patch).is_err());
        assert_eq!(moved, gateway(strings(&[LEGACY_GATEWAY_FINALIZER])));
        // Another entry now where it was: left alone.
        let mut replaced = gateway(strings(&["example.com/other", "example.com/third"]));
        assert!(json_patch::patch(&mut replaced, &patch).is_err());
    }

    #[test]
    fn only_gateways_gone_from_every_list_are_deleted() {
        use meridian_api::upstream::MULTI_CLUSTER_GATEWAY_CLASS;

        let gateway = |namespace: &str, name: &str, class: &str| {
            let mut gateway = Gateway::new(
                name,
                GatewaySpec {
                    gateway_class_name: class.into(),
                    listeners: Vec::new(),
                    extra: Default::default(),
                },
            );
            gateway.metadata.namespace = Some(namespace.into());
            Arc::new(gateway)
        };
        let long_name = "g".repeat(80);
        let gateways = [
            gateway("shop", "web", MULTI_CLUSTER_GATEWAY_CLASS),
            // A name past a label's length: its works carry the hashed label.
            gateway("shop", &long_name, MULTI_CLUSTER_GATEWAY_CLASS),
            // No longer multi-cluster: it is still there, so its works stay as they are.
            gateway("shop", "was-multi", "istio"),
        ];
        let work = |cluster: &str, label: Option<String>| -> Arc<ManifestWork> {
            let labels = match &label {
                Some(label) => json!({ GATEWAY_WORK_LABEL: label }),
                None => json!({}),
            };
            serde_json::from_value(json!({
                "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
                "metadata": {
                    "name": format!("work-{}", label.unwrap_or_default()),
                    "namespace": cluster, "labels": labels,
                },
                "spec": { "workload": { "manifests": [] } },
            }))
            .map(Arc::new)
            .expect("a ManifestWork")
        };
        let works = [
            work("spoke-1", Some(gateway_label("shop", "web"))),
            work("spoke-2", Some(gateway_label("shop", "web"))),
            work("spoke-1", Some(gateway_label("shop", &long_name))),
            work("spoke-1", Some(gateway_label("shop", "was-multi"))),
            // Deleted: `api` in shop, and `web` of another namespace.
            work("spoke-1", Some(gateway_label("shop", "api"))),
            work("spoke-2", Some(gateway_label("shop", "api"))),
            work("spoke-1", Some(gateway_label("other", "web"))),
            // Not a Gateway's work (the agent's).
            work("spoke-1", None),
        ];
        // A bundle holding two that are there and one deleted (`blog/web`).
        let entry = |gateway: &str| json!({ "gateway": gateway, "manifests": [] });
        let entries = json!({
            gateway_label("shop", "web"): entry("shop/web"),
            gateway_label("shop", &long_name): entry(&format!("shop/{long_name}")),
            gateway_label("blog", "web"): entry("blog/web"),
        });
        let bundle: Arc<ManifestWork> = serde_json::from_value(json!({
            "apiVersion": "work.open-cluster-management.io/v1", "kind": "ManifestWork",
            "metadata": {
                "name": "meridian-gateways", "namespace": "spoke-3",
                "labels": { GATEWAY_BUNDLE_LABEL: "true" },
                "annotations": { meridian_api::labels::GATEWAY_BUNDLE_ENTRIES: entries.to_string() },
            },
            "spec": { "workload": { "manifests": [] } },
        }))
        .map(Arc::new)
        .expect("a bundle");
        let works: Vec<Arc<ManifestWork>> = works.into_iter().chain([bundle]).collect();
        let present = gateway_labels(gateways.iter().map(|g| &g.metadata));
        let clusters = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        assert_eq!(
            deleted_gateways(&present, &works),
            BTreeMap::from([
                ("blog.web".to_string(), clusters(&["spoke-3"])),
                ("other.web".to_string(), clusters(&["spoke-1"])),
                ("shop.api".to_string(), clusters(&["spoke-1", "spoke-2"])),
            ])
        );
        // With no Gateway at all every Gateway the works hold is deleted, and the agent's work
        // holds none.
        assert_eq!(deleted_gateways(&HashSet::new(), &works).len(), 6);
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap()
    }

    #[test]
    fn a_leaving_cluster_keeps_its_work_for_the_grace_period_unless_it_is_gone() {
        let grace = Duration::from_secs(600);
        let since = at(1_000).to_string();
        let cases = [
            (true, true, None, at(0), WorkFate::Keep),
            (false, true, None, at(1_000), WorkFate::MarkLeaving),
            (
                false,
                true,
                Some(since.as_str()),
                at(1_100),
                WorkFate::Wait(Duration::from_secs(500)),
            ),
            (
                false,
                true,
                Some(since.as_str()),
                at(1_600),
                WorkFate::Delete,
            ),
            (false, false, None, at(1_000), WorkFate::Delete),
            (
                false,
                true,
                Some("not a time"),
                at(1_000),
                WorkFate::MarkLeaving,
            ),
        ];
        for (placed, exists, leaving, now, expected) in cases {
            assert_eq!(
                work_fate(placed, exists, leaving, now, grace),
                expected,
                "{placed} {exists} {leaving:?}"
            );
        }
    }

    #[test]
    fn the_downstream_gateway_keeps_listeners_and_takes_the_downstream_class_and_tls_secrets() {
        let mut listener = Listener {
            name: "api".into(),
            hostname: Some("api.example.com".into()),
            port: 443,
            protocol: "HTTPS".into(),
            extra: Default::default(),
        };
        listener.extra.insert(
            "tls".into(),
            json!({ "certificateRefs": [{ "name": "api-cert" }, { "name": "elsewhere", "namespace": "other" }] }),
        );
        let mut gateway = Gateway::new(
            "prod-web",
            GatewaySpec {
                gateway_class_name: "kuadrant-multi-cluster-gateway-instance-per-cluster".into(),
                listeners: vec![listener],
                extra: Default::default(),
            },
        );
        gateway.metadata.namespace = Some("gateways".into());
        assert_eq!(tls_secret_names(&gateway, &[]), ["api-cert"]);
        let mut secret = Secret::default();
        secret.metadata.name = Some("api-cert".into());
        secret.type_ = Some("kubernetes.io/tls".into());
        let work = gateway_work(&gateway, "istio", &[secret], &[], "spoke-1");
        assert_eq!(work["metadata"]["namespace"], "spoke-1");
        assert_eq!(
            work["metadata"]["labels"][GATEWAY_WORK_LABEL],
            "gateways.prod-web"
        );
        let manifests = work["spec"]["workload"]["manifests"].as_array().unwrap();
        assert_eq!(manifests[0]["metadata"]["name"], "kuadrant-gateways");
        assert_eq!(manifests[1]["spec"]["gatewayClassName"], "istio");
        assert_eq!(
            manifests[1]["spec"]["listeners"][0]["tls"]["certificateRefs"][0]["name"],
            "api-cert"
        );
        assert_eq!(manifests[2]["metadata"]["namespace"], "kuadrant-gateways");
        assert_eq!(manifests[2]["type"], "kubernetes.io/tls");
        let orphaned = &work["spec"]["deleteOption"]["selectivelyOrphans"]["orphaningRules"][0];
        assert_eq!(
            orphaned["resource"], "namespaces",
            "the shared namespace outlives the work"
        );
        assert!(
            manifests[1]["spec"].get("allowedListeners").is_none(),
            "no ListenerSet: the downstream Gateway admits none"
        );
    }

    /// The ListenerSets attached to a hub Gateway go beside its copy, naming it, with the
    /// listeners attached; the copy admits its own namespace's alone, whatever the hub Gateway
    /// admits, so nobody on the spoke adds listeners to it.
    #[test]
    fn attached_listener_sets_are_copied_beside_the_downstream_gateway() {
        let listener = |name: &str, host: &str, tls: Option<&str>| {
            let mut listener = Listener {
                name: name.into(),
                hostname: Some(host.into()),
                port: 443,
                protocol: "HTTPS".into(),
                extra: Default::default(),
            };
            if let Some(secret) = tls {
                listener.extra.insert(
                    "tls".into(),
                    json!({ "certificateRefs": [{ "name": secret }] }),
                );
            }
            listener
        };
        let set_listener = |namespace: &str, set: &str, l: Listener| SetListener {
            key: if namespace == "gateways" {
                format!("{set}.{}", l.name)
            } else {
                format!("{namespace}.{set}.{}", l.name)
            },
            namespace: namespace.into(),
            set: set.into(),
            copy: format!("{namespace}-{set}-copy"),
            listener: l,
            publish: true,
        };
        let mut gateway = Gateway::new(
            "prod-web",
            GatewaySpec {
                gateway_class_name: "kuadrant-multi-cluster-gateway-instance-per-cluster".into(),
                listeners: vec![listener("api", "api.example.com", None)],
                extra: [(
                    "allowedListeners".to_string(),
                    json!({ "namespaces": { "from": "All" } }),
                )]
                .into(),
            },
        );
        gateway.metadata.namespace = Some("gateways".into());
        let sets = [
            set_listener(
                "gateways",
                "extra",
                listener("a", "a.example.com", Some("a-cert")),
            ),
            set_listener("gateways", "extra", listener("b", "b.example.com", None)),
            set_listener(
                "shop",
                "extra",
                listener("c", "c.example.com", Some("shop-cert")),
            ),
        ];
        // Only the Gateway namespace's Secrets are copied.
        assert_eq!(tls_secret_names(&gateway, &sets), ["a-cert"]);
        let work = gateway_work(&gateway, "istio", &[], &sets, "spoke-1");
        let manifests = work["spec"]["workload"]["manifests"].as_array().unwrap();
        assert_eq!(
            manifests[1]["spec"]["allowedListeners"],
            json!({ "namespaces": { "from": "Same" } })
        );
        let copies: Vec<&Value> = manifests
            .iter()
            .filter(|m| m["kind"] == "ListenerSet")
            .collect();
        assert_eq!(copies.len(), 2);
        assert_eq!(copies[0]["metadata"]["name"], "gateways-extra-copy");
        assert_eq!(copies[1]["metadata"]["name"], "shop-extra-copy");
        for copy in &copies {
            assert_eq!(copy["metadata"]["namespace"], "kuadrant-gateways");
            assert_eq!(copy["spec"]["parentRef"]["name"], "prod-web");
            assert!(copy["spec"]["parentRef"].get("namespace").is_none());
        }
        let names = |copy: &Value| -> Vec<String> {
            copy["spec"]["listeners"]
                .as_array()
                .unwrap()
                .iter()
                .map(|l| l["name"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(names(copies[0]), ["a", "b"]);
        assert_eq!(names(copies[1]), ["c"]);
    }

    #[test]
    fn an_agent_is_bound_by_its_own_clusters_identities_and_no_group() {
        let subjects = agent_subjects("spoke-1");
        let subjects = subjects.as_array().unwrap();
        assert_eq!(subjects.len(), 2);
        assert!(
            subjects.iter().all(|s| s["kind"] != "Group"),
            "{subjects:?}"
        );
        assert!(subjects.iter().all(|s| {
            s["namespace"] == "spoke-1" || s["name"].as_str().unwrap().contains(":cluster:spoke-1:")
        }));
        assert_ne!(agent_subjects("spoke-1"), agent_subjects("spoke-2"));
    }

    fn args_of(container: &Value) -> Vec<&str> {
        container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect()
    }

    fn deployment_of(manifests: &[Value]) -> Value {
        manifests
            .iter()
            .find(|m| m["kind"] == "Deployment")
            .unwrap()
            .clone()
    }

    #[test]
    fn both_installs_meet_pod_security_restricted_and_only_the_work_carries_a_credential() {
        let work = agent_work(
            "spoke-1",
            "kubeconfig",
            &AgentImage::public("agent:1"),
            None,
            &[],
        );
        let work = work["spec"]["workload"]["manifests"]
            .as_array()
            .unwrap()
            .clone();
        let addon = agent_manifests(
            AgentLayout::AddOn,
            &AgentImage::public("agent:1"),
            None,
            &[],
        );
        for manifests in [&work, &addon] {
            let namespace = manifests.iter().find(|m| m["kind"] == "Namespace").unwrap();
            assert_eq!(
                namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
                "restricted"
            );
            let pod = deployment_of(manifests)["spec"]["template"]["spec"].clone();
            assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
            assert_eq!(
                pod["securityContext"]["seccompProfile"]["type"],
                "RuntimeDefault"
            );
            for container in pod["containers"].as_array().unwrap() {
                assert_eq!(
                    container["securityContext"]["allowPrivilegeEscalation"],
                    false
                );
                assert_eq!(
                    container["securityContext"]["capabilities"],
                    json!({ "drop": ["ALL"] })
                );
                assert_eq!(
                    container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"],
                    "metadata.namespace"
                );
            }
        }
        assert!(work.iter().any(|m| m["kind"] == "Secret"));
        // Registry credentials: OCM's, which its klusterlet copies into the add-on's labelled
        // namespace, and the admin's; the hub's own install names the admin's alone.
        let private = AgentImage {
            reference: "registry.example.com/agent:1".into(),
            pull_secrets: vec!["regcred".into()],
        };
        let pulls = |manifests: &[Value]| {
            deployment_of(manifests)["spec"]["template"]["spec"]["imagePullSecrets"].clone()
        };
        assert_eq!(
            pulls(&agent_manifests(AgentLayout::AddOn, &private, None, &[])),
            json!([{ "name": OCM_PULL_SECRET }, { "name": "regcred" }])
        );
        let private_work = agent_work("spoke-1", "kubeconfig", &private, None, &[]);
        assert_eq!(
            pulls(
                private_work["spec"]["workload"]["manifests"]
                    .as_array()
                    .unwrap()
            ),
            json!([{ "name": "regcred" }])
        );
        let namespace = addon.iter().find(|m| m["kind"] == "Namespace").unwrap();
        assert_eq!(
            namespace["metadata"]["labels"][ADDON_NAMESPACE_LABEL],
            "true"
        );
        // The add-on carries no credential: OCM's registration writes it on the spoke, and the
        // addon manager mounts it and fills in the cluster's name.
        assert!(addon.iter().all(|m| m["kind"] != "Secret"));
        let container = deployment_of(&addon)["spec"]["template"]["spec"]["containers"][0].clone();
        assert_eq!(
            args_of(&container),
            [
                "run",
                "--cluster-name",
                "{{CLUSTER_NAME}}",
                "--hub-kubeconfig",
                "{{HUB_KUBECONFIG}}"
            ]
        );
        // Its spoke objects are named apart from the work's, so both run while one install
        // hands over to the other.
        let names = |manifests: &[Value]| -> Vec<(String, String, String)> {
            manifests
                .iter()
                .map(|m| {
                    (
                        m["kind"].as_str().unwrap().to_string(),
                        m["metadata"]["namespace"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        m["metadata"]["name"].as_str().unwrap().to_string(),
                    )
                })
                .collect()
        };
        let work_names = names(&work);
        assert!(names(&addon).iter().all(|name| !work_names.contains(name)));
    }

    #[test]
    fn the_agent_kubeconfig_points_at_the_hub_in_the_cluster_namespace() {
        let text = agent_kubeconfig(
            "https://hub:6443",
            "-----BEGIN CERTIFICATE-----\n",
            "tok",
            "spoke-1",
        );
        let config: Value = yaml_serde::from_str(&text).unwrap();
        assert_eq!(
            config["clusters"][0]["cluster"]["server"],
            "https://hub:6443"
        );
        assert_eq!(config["users"][0]["user"]["token"], "tok");
        assert_eq!(config["contexts"][0]["context"]["namespace"], "spoke-1");
    }

    #[test]
    fn agents_read_zones_and_answer_dns_only_when_the_hub_says_so() {
        let bound = |rbac: &[Value], kind: &str| -> Vec<String> {
            rbac.iter()
                .filter(|o| o["kind"] == kind)
                .map(|o| o["roleRef"]["name"].as_str().unwrap().to_string())
                .collect()
        };
        let plain = agent_hub_rbac("spoke-1", false, false);
        assert_eq!(bound(&plain, "ClusterRoleBinding"), [AGENT_PROBE_READER]);
        assert_eq!(bound(&plain, "RoleBinding"), [AGENT_REPORTER]);
        // An add-on agent reads probes and zones through its group's fleet-wide bindings, and
        // has no ServiceAccount on the hub.
        let addon = agent_hub_rbac("spoke-1", true, true);
        assert!(bound(&addon, "ClusterRoleBinding").is_empty());
        assert_eq!(bound(&addon, "RoleBinding"), [AGENT_REPORTER]);
        assert!(addon.iter().all(|o| o["kind"] != "ServiceAccount"));
        assert_eq!(
            addon_fleet_bindings(true)
                .iter()
                .map(|b| b["roleRef"]["name"].as_str().unwrap())
                .collect::<Vec<_>>(),
            [AGENT_PROBE_READER, AGENT_ZONE_READER]
        );
        assert_eq!(addon_fleet_bindings(false).len(), 1);
        let rbac = agent_hub_rbac("spoke-1", true, false);
        assert_eq!(
            bound(&rbac, "ClusterRoleBinding"),
            [AGENT_PROBE_READER, AGENT_ZONE_READER]
        );
        assert_eq!(bound(&rbac, "RoleBinding"), [AGENT_REPORTER]);
        assert!(
            rbac.iter()
                .all(|o| o["kind"] != "Role" && o["kind"] != "ClusterRole"),
            "the hub binds the chart's roles and writes none"
        );
        for binding in rbac.iter().filter(|o| o["kind"] == "RoleBinding") {
            assert_eq!(binding["metadata"]["namespace"], "spoke-1");
            assert_eq!(binding["roleRef"]["kind"], "ClusterRole");
        }
        // The reporter is bound to this cluster's agent alone, under either install; what is
        // bound cluster-wide to one agent is bound to its ServiceAccount.
        let reporter = rbac.iter().find(|o| o["kind"] == "RoleBinding").unwrap();
        assert_eq!(reporter["subjects"], agent_subjects("spoke-1"));
        for binding in rbac.iter().filter(|o| o["kind"] == "ClusterRoleBinding") {
            assert_eq!(
                binding["subjects"],
                json!([{ "kind": "ServiceAccount", "name": AGENT_WORK, "namespace": "spoke-1" }])
            );
        }

        let roles = agent_cluster_roles();
        let rules_of = |name: &str| {
            roles
                .iter()
                .find(|o| o["metadata"]["name"] == name)
                .unwrap()["rules"]
                .clone()
        };
        assert_eq!(
            rules_of(AGENT_ZONE_READER),
            json!([{ "apiGroups": ["kuadrant.io"], "resources": ["dnsrecords", "managedzones"], "verbs": ["get", "list", "watch"] }]),
            "reading the records and zones, nothing else"
        );
        // Secrets only by name, and never anything cluster-wide but probes, records and zones.
        for role in &roles {
            for rule in role["rules"].as_array().unwrap() {
                if rule["resources"] == json!(["secrets"]) {
                    assert!(rule["resourceNames"].is_array(), "{rule}");
                }
                for field in ["apiGroups", "resources", "verbs"] {
                    assert!(
                        !rule[field].as_array().unwrap().contains(&json!("*")),
                        "{rule}"
                    );
                }
            }
        }
        let secrets_readable = |name: &str| -> Vec<Value> {
            rules_of(name)
                .as_array()
                .unwrap()
                .iter()
                .filter(|rule| rule["resources"] == json!(["secrets"]))
                .flat_map(|rule| rule["resourceNames"].as_array().unwrap().clone())
                .collect()
        };
        assert!(secrets_readable(AGENT_REPORTER).is_empty());
        assert_eq!(
            secrets_readable(AGENT_ZONE_KEYS),
            [meridian_api::names::DNSSEC_KEYS_SECRET]
        );

        let container = |work: &Value| {
            let manifests = work["spec"]["workload"]["manifests"].as_array().unwrap();
            deployment_of(manifests)["spec"]["template"]["spec"]["containers"][0].clone()
        };
        let plain = container(&agent_work(
            "spoke-1",
            "kubeconfig",
            &AgentImage::public("agent:1"),
            None,
            &[],
        ));
        assert_eq!(plain["args"].as_array().unwrap().len(), 5, "{plain}");
        assert_eq!(plain["ports"], json!([]));
        let dns = AgentDns {
            listen: "0.0.0.0:5353".parse().unwrap(),
            name_servers: vec![
                meridian_nameserver::ZoneNameServer::parse("ns1.example.com=192.0.2.53").unwrap(),
            ],
        };
        let serving = container(&agent_work(
            "spoke-1",
            "kubeconfig",
            &AgentImage::public("agent:1"),
            Some(&dns),
            &[],
        ));
        assert_eq!(
            args_of(&serving)[5..],
            [
                "--serve-dns",
                "0.0.0.0:5353",
                "--ns",
                "ns1.example.com=192.0.2.53"
            ]
        );
        assert_eq!(serving["ports"][0]["containerPort"], 5353);
        assert_eq!(serving["ports"][0]["protocol"], "UDP");
        assert_eq!(serving["ports"][1]["protocol"], "TCP");
    }
}
