//! Delivers the extra request headers of health probes to the agents. A probe names a Secret
//! in its own namespace, which an agent may not read. The hub copies the headers of the
//! Secrets a tenant namespace's probes name into one copy per tenant namespace,
//! `meridian-probe-headers-<namespace>`, in the hub's own namespace (keys: the Secret's name;
//! values: JSON objects of header names to values). A Role there, `meridian-agent-copies`, lets
//! the agents read exactly the current copies and the key of the hub's seal on probes, by
//! name; each cluster's agent is bound to it, and the copies and bindings are owned by it.
//! One team's headers never travel in another team's object, and one team's Secrets, however
//! large, cannot stop another team's delivery. The hub writes no Secret outside its namespace.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | ManagedClusters, DNSHealthCheckProbes, Secrets, the RoleBindings in the hub's namespace |
//! | **Triggered by** ([`triggers`]) | a new cluster; a probe that names (or named) a header Secret, a named Secret, a copy changed or deleted (the first cluster); the reader Role first found or made anew (every cluster); a binding deleted or changed (its cluster) |
//! | **Gathers** | the Secrets the probes name, the copies and the cluster's binding, from the caches; the reader Role (the first cluster; the others take it from memory) |
//! | **Decides** | the copies' data ([`headers_by_namespace`]) and the Role's rules ([`reader_role`]), pure |
//! | **Writes** | the first cluster: the Role, the copies (each only when it differs), then deletes copies no longer wanted; every cluster: its binding to the Role |

pub mod triggers;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, Patch};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use meridian_api::upstream::ManagedCluster;
use serde_json::{Value, json};

use meridian_api::names::{
    AGENT_COPIES_READER, PROBE_HEADERS_SECRET, PROBE_SEAL_SECRET, agent_copies_binding,
    probe_headers_copy,
};
use meridian_controllers::decide::health::secret_headers;
use meridian_controllers::{Context, Error, apply_params, delete_if_present};

use super::cluster_copies::{every_cluster, hub_namespace, leads_fleet_step};
use crate::placement::{agent_subjects, binds_agent};

const CONTROLLER: &str = "probe-headers";

/// Each tenant namespace's copy data: for each named Secret of it that exists and is allowed,
/// its headers as JSON under the Secret's name. Namespaces with nothing to send are left out.
pub fn headers_by_namespace(
    sources: &BTreeMap<(String, String), Option<Secret>>,
) -> BTreeMap<String, BTreeMap<String, ByteString>> {
    let mut copies: BTreeMap<String, BTreeMap<String, ByteString>> = BTreeMap::new();
    for ((namespace, name), secret) in sources {
        // A refused Secret (its type, its size) is not copied; the record's status says why.
        let Some(Ok(headers)) = secret.as_ref().map(secret_headers) else {
            continue;
        };
        let json = serde_json::to_vec(&headers).expect("a map of strings serializes");
        copies
            .entry(namespace.clone())
            .or_default()
            .insert(name.clone(), ByteString(json));
    }
    copies
}

/// Whether `name` is one of the header copies this controller writes.
pub fn is_copy(name: &str) -> bool {
    name.strip_prefix(PROBE_HEADERS_SECRET)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('-'))
}

/// The Role in the hub's namespace `namespace` letting the agents read the seal key and exactly
/// the header copies `readable`, by name. Never a rule with empty `resourceNames`: that would
/// allow every Secret of the namespace.
pub fn reader_role(namespace: &str, readable: &BTreeSet<String>) -> Value {
    let mut rules = vec![json!({
        "apiGroups": [""],
        "resources": ["secrets"],
        "resourceNames": [PROBE_SEAL_SECRET],
        "verbs": ["get"],
    })];
    if !readable.is_empty() {
        rules.push(json!({
            "apiGroups": [""],
            "resources": ["secrets"],
            "resourceNames": readable,
            // `list` and `watch` narrowed by name: the agent watches each copy it needs with a
            // `metadata.name` field selector.
            "verbs": ["get", "list", "watch"],
        }));
    }
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {
            "name": AGENT_COPIES_READER,
            "namespace": namespace,
            "labels": { "app.kubernetes.io/managed-by": meridian_controllers::FIELD_MANAGER },
        },
        "rules": rules,
    })
}

/// The header copies a Role lets the agents read.
pub fn readable_by(role: &Role) -> BTreeSet<String> {
    role.rules
        .iter()
        .flatten()
        .flat_map(|rule| rule.resource_names.iter().flatten())
        .filter(|name| is_copy(name))
        .cloned()
        .collect()
}

/// The reader Role as the first cluster's step last made or found it. Every other cluster's
/// reconcile binds its agent to it from here instead of reading it from the API server: at a
/// cold start of 3,000 clusters, those reads were 3,000 that found it, and over 11,000 that did
/// not yet (each retried until the first cluster's step had made it).
///
/// When it becomes known, or is made again under another UID (the bindings owned by the old
/// one are collected with it), every cluster is woken to bind its agent to it.
#[derive(Clone, Default)]
struct KnownReader(Arc<tokio::sync::watch::Sender<Option<OwnerReference>>>);

impl KnownReader {
    fn get(&self) -> Option<OwnerReference> {
        self.0.borrow().clone()
    }

    /// Records the Role the first cluster's step holds; whether it is another than before.
    fn set(&self, owner: OwnerReference) -> bool {
        self.0.send_if_modified(|known| {
            let other = known.as_ref().map(|k| &k.uid) != Some(&owner.uid);
            *known = Some(owner);
            other
        })
    }

    /// Every cluster, each time the Role becomes known or another one is made.
    fn wakes(
        &self,
        clusters: kube::runtime::reflector::Store<ManagedCluster>,
    ) -> futures::stream::BoxStream<'static, kube::runtime::reflector::ObjectRef<ManagedCluster>>
    {
        use futures::StreamExt;
        let changes = self.0.subscribe();
        futures::stream::unfold(changes, |mut changes| async move {
            changes.changed().await.ok()?;
            Some(((), changes))
        })
        .flat_map(move |()| futures::stream::iter(every_cluster(&clusters)))
        .boxed()
    }
}

/// Runs the controller until `stop` resolves.
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let all = ctx.caches.clusters.store().clone();
    let reader = KnownReader::default();
    let mut requests = triggers::requests(&ctx.caches, ctx.config.hub_namespace.clone());
    requests.push(reader.wakes(all.clone()));
    let reconcile = move |cluster, ctx| reconcile_cluster(cluster, ctx, reader.clone());
    super::run_light(CONTROLLER, all, requests, reconcile, ctx, stop).await;
}

async fn reconcile_cluster(
    cluster: Arc<ManagedCluster>,
    ctx: Arc<Context>,
    reader: KnownReader,
) -> Result<Action, Error> {
    if !ctx.caches.listed() {
        return Err(Error::Waiting("the first list of probes".into()));
    }
    let cluster = cluster.name_any();
    let namespace = hub_namespace(&ctx)?.to_string();
    if leads_fleet_step(ctx.caches.clusters.store(), &cluster) {
        deliver_copies(&ctx, &namespace, &reader).await?;
    }
    let Some(owner) = reader.get() else {
        // The first cluster's step has not made or found the Role yet; when it has, it wakes
        // every cluster.
        return Ok(Action::requeue(ctx.config.next_resync()));
    };
    let binding = agent_copies_binding(&cluster);
    // Written when missing, when it binds another identity (an earlier hub bound the
    // ServiceAccount alone), or when an earlier Role owns it (it is about to be collected).
    // From the cache: a resync of every cluster reads nothing, and a binding deleted or
    // changed wakes its cluster.
    let current = ctx.caches.role_bindings.get(Some(&namespace), &binding);
    let owned = |binding: &RoleBinding| {
        binding
            .owner_references()
            .iter()
            .any(|held| held.uid == owner.uid)
    };
    if !current.is_some_and(|b| owned(&b) && binds_agent(b.subjects.as_deref(), &cluster)) {
        Api::<RoleBinding>::namespaced(ctx.client.clone(), &namespace)
            .patch(
                &binding,
                &apply_params(),
                &Patch::Apply(reader_binding(&namespace, &cluster, &owner)),
            )
            .await?;
    }
    // A rotated source Secret, or a copy someone changed, wakes the first cluster again.
    Ok(Action::requeue(ctx.config.next_resync()))
}

/// The fleet's part, done by the first cluster's reconcile: the seal key, the header copies,
/// the Role naming them (recorded in `reader` as soon as it is made or found), and copies no
/// longer wanted gone.
async fn deliver_copies(ctx: &Context, namespace: &str, reader: &KnownReader) -> Result<(), Error> {
    // The key the agents check the hub's seal on a probe with, before they run it: made on
    // first use, read where it is.
    ctx.probe_seal_key().await?;
    let referenced: BTreeSet<(String, String)> = ctx
        .caches
        .probes
        .state()
        .iter()
        .filter_map(|probe| {
            let reference = probe.spec.additional_headers_ref.as_ref()?;
            Some((
                probe.namespace().unwrap_or_default(),
                reference.name.clone(),
            ))
        })
        .collect();
    let mut sources = BTreeMap::new();
    for (secret_namespace, name) in referenced {
        let secret = ctx.caches.secrets.get(Some(&secret_namespace), &name);
        if secret.is_none() {
            tracing::debug!(namespace = %secret_namespace, secret = %name, "a probe's header Secret does not exist");
        }
        sources.insert((secret_namespace, name), secret.map(|s| (*s).clone()));
    }
    let copies: BTreeMap<String, BTreeMap<String, ByteString>> = headers_by_namespace(&sources)
        .into_iter()
        .map(|(tenant, data)| (probe_headers_copy(&tenant), data))
        .collect();
    let wanted: BTreeSet<String> = copies.keys().cloned().collect();

    let roles = Api::<Role>::namespaced(ctx.client.clone(), namespace);
    let role = match roles.get_opt(AGENT_COPIES_READER).await? {
        Some(role) if readable_by(&role) == wanted => role,
        _ => {
            let role: Role = roles
                .patch(
                    AGENT_COPIES_READER,
                    &apply_params(),
                    &Patch::Apply(reader_role(namespace, &wanted)),
                )
                .await?;
            tracing::info!(copies = ?wanted, "the agents may read these header copies");
            role
        }
    };
    let owner = owned_by(&role);
    if reader.set(owner.clone()) {
        tracing::debug!(uid = %owner.uid, "the agents' reader Role is known: binding every cluster's agent to it");
    }
    for (name, data) in &copies {
        if super::cluster_copies::deliver(ctx, namespace, name, data, Some(&owner)).await? {
            tracing::info!(copy = %name, secrets = data.len(), "delivered probe headers");
        }
    }
    // Copies no longer wanted, which the Role no longer names: the agents cannot read them,
    // and they go.
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), namespace);
    for stale in ctx.caches.secrets.state().iter().filter(|secret| {
        secret.namespace().as_deref() == Some(namespace)
            && is_copy(&secret.name_any())
            && !wanted.contains(&secret.name_any())
    }) {
        delete_if_present(&secrets, &stale.name_any()).await?;
        tracing::info!(copy = %stale.name_any(), "removed a header copy no probe needs");
    }
    Ok(())
}

/// An owner reference to the reader Role: what it owns goes when it goes (uninstall).
fn owned_by(role: &Role) -> OwnerReference {
    OwnerReference {
        api_version: Role::api_version(&()).into(),
        kind: Role::kind(&()).into(),
        name: role.name_any(),
        uid: role.uid().unwrap_or_default(),
        ..OwnerReference::default()
    }
}

/// Binds the reader Role in the hub's namespace to `cluster`'s agent.
fn reader_binding(namespace: &str, cluster: &str, owner: &OwnerReference) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {
            "name": agent_copies_binding(cluster),
            "namespace": namespace,
            "labels": { "app.kubernetes.io/managed-by": meridian_controllers::FIELD_MANAGER },
            "ownerReferences": [owner],
        },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AGENT_COPIES_READER },
        "subjects": agent_subjects(cluster),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role_owner(uid: &str) -> OwnerReference {
        OwnerReference {
            name: AGENT_COPIES_READER.into(),
            uid: uid.into(),
            ..OwnerReference::default()
        }
    }

    #[tokio::test]
    async fn every_cluster_is_woken_when_the_reader_role_becomes_known_or_is_made_again() {
        use futures::{FutureExt, StreamExt};
        let (clusters, mut writer) = kube::runtime::reflector::store::<ManagedCluster>();
        for name in ["spoke-1", "spoke-2"] {
            writer.apply_watcher_event(&kube::runtime::watcher::Event::Apply(ManagedCluster::new(
                name,
                Default::default(),
            )));
        }
        let reader = KnownReader::default();
        let mut wakes = reader.wakes(clusters);
        let woken = |wakes: &mut futures::stream::BoxStream<'static, _>| {
            let mut names: Vec<String> = (0..2)
                .map(|_| {
                    let next: kube::runtime::reflector::ObjectRef<ManagedCluster> =
                        wakes.next().now_or_never().flatten().expect("a wake");
                    next.name
                })
                .collect();
            names.sort();
            names
        };
        assert_eq!(reader.get(), None);
        assert!(
            wakes.next().now_or_never().is_none(),
            "nothing known, nobody woken"
        );

        assert!(reader.set(role_owner("first")));
        assert_eq!(woken(&mut wakes), ["spoke-1", "spoke-2"]);
        // The same Role found again on the next pass wakes nobody.
        assert!(!reader.set(role_owner("first")));
        assert!(wakes.next().now_or_never().is_none());
        // Made again (deleted, and its bindings with it): every agent binds again.
        assert!(reader.set(role_owner("second")));
        assert_eq!(woken(&mut wakes), ["spoke-1", "spoke-2"]);
        assert_eq!(reader.get().map(|o| o.uid).as_deref(), Some("second"));
    }

    fn secret(type_: &str, key: &str) -> Secret {
        Secret {
            type_: Some(type_.into()),
            data: Some(BTreeMap::from([(
                key.to_string(),
                ByteString(b"s3cret".to_vec()),
            )])),
            ..Default::default()
        }
    }

    #[test]
    fn each_namespace_gets_its_own_copy_and_missing_or_refused_secrets_are_left_out() {
        let headers_type = meridian_controllers::decide::health::PROBE_HEADERS_SECRET_TYPE;
        let source = |ns: &str, name: &str| (ns.to_string(), name.to_string());
        let sources = BTreeMap::from([
            (
                source("gateways", "probe-auth"),
                Some(secret(headers_type, "X-Probe-Token")),
            ),
            (source("gateways", "missing"), None),
            // The attack: the zone's provider credentials named as headers.
            (
                source("gateways", "aws"),
                Some(secret("kuadrant.io/aws", "AWS_SECRET_ACCESS_KEY")),
            ),
            (
                source("shop", "probe-auth"),
                Some(secret(headers_type, "X-Shop-Token")),
            ),
            // A namespace whose only Secret is refused gets no copy at all.
            (source("mallory", "token"), Some(secret("Opaque", "X"))),
        ]);
        let copies = headers_by_namespace(&sources);
        assert_eq!(copies.keys().collect::<Vec<_>>(), ["gateways", "shop"]);
        assert_eq!(
            copies["gateways"].keys().collect::<Vec<_>>(),
            ["probe-auth"],
            "one team's copy holds that team's Secrets only"
        );
        let headers: BTreeMap<String, String> =
            serde_json::from_slice(&copies["gateways"]["probe-auth"].0).unwrap();
        assert_eq!(headers["X-Probe-Token"], "s3cret");
        assert!(!String::from_utf8_lossy(&copies["shop"]["probe-auth"].0).contains("X-Probe"));
    }

    #[test]
    fn the_reader_role_names_exactly_the_copies_and_never_leaves_resource_names_empty() {
        let names = BTreeSet::from([probe_headers_copy("gateways"), probe_headers_copy("shop")]);
        let role = reader_role("meridian-system", &names);
        assert_eq!(role["metadata"]["namespace"], "meridian-system");
        assert_eq!(
            role["rules"],
            json!([{
                "apiGroups": [""], "resources": ["secrets"],
                "resourceNames": ["meridian-probe-seal"],
                "verbs": ["get"],
            }, {
                "apiGroups": [""], "resources": ["secrets"],
                "resourceNames": ["meridian-probe-headers-gateways", "meridian-probe-headers-shop"],
                "verbs": ["get", "list", "watch"],
            }])
        );
        let parsed: Role = serde_json::from_value(role).unwrap();
        assert_eq!(readable_by(&parsed), names);
        // The attack on an empty list: `resourceNames: []` is every Secret of the namespace
        // (the hub's own, with its keys and the tenants' copies).
        let none = reader_role("meridian-system", &BTreeSet::new());
        assert_eq!(
            none["rules"],
            json!([{
                "apiGroups": [""], "resources": ["secrets"],
                "resourceNames": ["meridian-probe-seal"],
                "verbs": ["get"],
            }])
        );
        assert!(readable_by(&serde_json::from_value(none).unwrap()).is_empty());
    }

    #[test]
    fn copies_are_recognised_by_name_and_nothing_else_is() {
        for copy in [
            PROBE_HEADERS_SECRET.to_string(),
            probe_headers_copy("gateways"),
        ] {
            assert!(is_copy(&copy), "{copy}");
        }
        for other in [
            "meridian-probe-headersx",
            "meridian-probe-seal",
            "probe-auth",
        ] {
            assert!(!is_copy(other), "{other}");
        }
    }
}
