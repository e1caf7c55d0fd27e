//! One watch per kind in the process, shared by every controller: each kind is reflected into a
//! [`Store`] that reconciles read instead of the API server, and every change is broadcast with
//! the object as it was before, so a controller's trigger can tell a change that matters to it
//! (a cluster's labels) from one that does not (its status heartbeat).
//!
//! Controllers run on kube-runtime's [`applier`](kube::runtime::applier) fed by these
//! broadcasts ([`run_controller`]), not on `Controller::new`, which would open a watch of its
//! own for every kind it follows.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{DeserializeGuard, error_boundary::InvalidObject};
use kube::runtime::controller::{Action, ReconcileRequest};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use meridian_api::kuadrant::{DNSHealthCheckProbe, DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::meridian::{ClusterReport, ProbeResults};
use meridian_api::upstream::{
    Gateway, GatewayClass, ListenerSet, ManagedCluster, ManifestWork, PlacementDecision,
};
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

use crate::{DISTRIBUTED_LABEL, Error};

/// How many changes a slow controller may fall behind before it reconciles everything instead.
const CHANGE_BUFFER: usize = 4096;

/// A change to one object of a kind.
#[derive(Debug)]
pub enum Change<K> {
    /// Created (`old` is `None`) or changed.
    Applied {
        old: Option<Arc<K>>,
        new: Arc<K>,
    },
    Deleted(Arc<K>),
    /// The kind was listed again (at start, or after the watch restarted): anything may have
    /// changed. A subscriber that fell behind sees this too.
    Relisted,
}

impl<K> Change<K> {
    /// The object changed: as it is now, or as it was when deleted (none for a relist).
    pub fn object(&self) -> Option<&Arc<K>> {
        match self {
            Change::Applied { new, .. } => Some(new),
            Change::Deleted(old) => Some(old),
            Change::Relisted => None,
        }
    }

    /// The object before and after the change (none before a creation, none after a
    /// deletion); none at all for a relist.
    pub fn before_after(&self) -> Option<(Option<&K>, Option<&K>)> {
        match self {
            Change::Applied { old, new } => Some((old.as_deref(), Some(&**new))),
            Change::Deleted(old) => Some((Some(&**old), None)),
            Change::Relisted => None,
        }
    }
}

impl<K> Clone for Change<K> {
    fn clone(&self) -> Self {
        match self {
            Change::Applied { old, new } => Change::Applied {
                old: old.clone(),
                new: new.clone(),
            },
            Change::Deleted(object) => Change::Deleted(object.clone()),
            Change::Relisted => Change::Relisted,
        }
    }
}

/// The objects of one kind as last listed and watched, and their changes.
pub struct Cache<K: Resource<DynamicType = ()> + Clone + 'static> {
    store: Store<K>,
    writer: std::sync::Mutex<Option<Writer<K>>>,
    changes: broadcast::Sender<Change<K>>,
    listed: AtomicBool,
    groups: Groups<K>,
    /// Counts the watch events applied: equal revisions, the same objects (see
    /// [`Cache::revision`]).
    revision: AtomicU64,
    /// The versions of objects reported as undecodable (see [`Cache::reflect`]), by
    /// `namespace/name`, and how many were.
    undecodable_seen: std::sync::Mutex<HashMap<String, String>>,
    undecodable: AtomicU64,
    /// False while the kind is neither served nor readable and the cache stands empty for it
    /// ([`Cache::reflect_if_served`]): its emptiness is then no evidence that nothing exists.
    readable: AtomicBool,
}

/// The reason of the Event on an object the watch cannot decode.
pub const UNDECODABLE_REASON: &str = "Undecodable";

/// `namespace/name` (or `name`) of an object.
fn undecodable_key(metadata: &ObjectMeta) -> String {
    let name = metadata.name.as_deref().unwrap_or_default();
    match &metadata.namespace {
        Some(namespace) => format!("{namespace}/{name}"),
        None => name.to_string(),
    }
}

/// An Event's note is at most 1 kB; a decoding error quoting a large value can be longer.
fn truncate_note(note: &str) -> String {
    const MAX: usize = 1000;
    if note.len() <= MAX {
        return note.to_string();
    }
    let mut end = MAX - 3;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &note[..end])
}

/// The key an object is grouped under (`None`: in no group).
pub type GroupKey<K> = fn(&K) -> Option<String>;

/// The keys an object is grouped under, when it belongs to several groups (a PlacementDecision
/// under its Placement and under each cluster it decides).
pub type GroupKeys<K> = fn(&K) -> Vec<String>;

/// How a cache's objects are grouped.
enum KeyOf<K> {
    One(GroupKey<K>),
    Many(GroupKeys<K>),
}

impl<K> Clone for KeyOf<K> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K> Copy for KeyOf<K> {}

impl<K> KeyOf<K> {
    fn keys(self, object: &K) -> Vec<String> {
        match self {
            KeyOf::One(key_of) => key_of(object).into_iter().collect(),
            KeyOf::Many(keys_of) => keys_of(object),
        }
    }
}

/// A secondary index of a cache: its objects grouped by a key read from each (a policy by the
/// Gateway it targets, a record by its policy). Kept as the store changes, so a reconcile asks
/// for its group instead of walking every object of the kind: at 6,000 policies those walks were
/// a fifth of a cold start's CPU.
struct Groups<K: Resource<DynamicType = ()>> {
    key_of: Option<KeyOf<K>>,
    members: std::sync::RwLock<HashMap<String, HashSet<ObjectRef<K>>>>,
}

impl<K: Resource<DynamicType = ()> + Clone> Groups<K> {
    fn new(key_of: Option<KeyOf<K>>) -> Self {
        Groups {
            key_of,
            members: Default::default(),
        }
    }

    /// Moves an object from the groups it was in to those it is in now.
    fn regroup(&self, old: Option<&K>, new: Option<&K>) {
        let Some(key_of) = self.key_of else {
            return;
        };
        let keys = |object: Option<&K>| object.map(|o| key_of.keys(o)).unwrap_or_default();
        let (old_keys, new_keys) = (keys(old), keys(new));
        if old_keys == new_keys && new.is_some() {
            return;
        }
        let mut members = self
            .members
            .write()
            .expect("no panics while groups are held");
        if let Some(object) = old {
            for key in &old_keys {
                if let Some(group) = members.get_mut(key) {
                    group.remove(&ObjectRef::from_obj(object));
                    if group.is_empty() {
                        members.remove(key);
                    }
                }
            }
        }
        if let Some(object) = new {
            for key in new_keys {
                members
                    .entry(key)
                    .or_default()
                    .insert(ObjectRef::from_obj(object));
            }
        }
    }

    /// Groups every object again (after a relist replaced the store's contents).
    fn rebuild(&self, objects: &[Arc<K>]) {
        let Some(key_of) = self.key_of else {
            return;
        };
        let mut members: HashMap<String, HashSet<ObjectRef<K>>> = HashMap::new();
        for object in objects {
            for key in key_of.keys(object) {
                members
                    .entry(key)
                    .or_default()
                    .insert(ObjectRef::from_obj(&**object));
            }
        }
        *self
            .members
            .write()
            .expect("no panics while groups are held") = members;
    }

    fn of(&self, key: &str) -> Vec<ObjectRef<K>> {
        debug_assert!(self.key_of.is_some(), "{} is not grouped", K::kind(&()));
        self.members
            .read()
            .expect("no panics while groups are held")
            .get(key)
            .map(|group| group.iter().cloned().collect())
            .unwrap_or_default()
    }
}

impl<K: Resource<DynamicType = ()> + Clone> Debug for Cache<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("kind", &K::kind(&()))
            .field("objects", &self.store.len())
            .finish_non_exhaustive()
    }
}

impl<K> Default for Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    fn default() -> Self {
        Cache::with_groups(None)
    }
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
{
    /// A cache that also groups its objects by `key_of`, for [`Cache::group`].
    pub fn grouped_by(key_of: GroupKey<K>) -> Self {
        Cache::with_groups(Some(KeyOf::One(key_of)))
    }

    /// A cache that groups each object under every key `keys_of` gives it, for [`Cache::group`].
    pub fn grouped_under(keys_of: GroupKeys<K>) -> Self {
        Cache::with_groups(Some(KeyOf::Many(keys_of)))
    }

    fn with_groups(key_of: Option<KeyOf<K>>) -> Self {
        let (store, writer) = reflector::store();
        Cache {
            store,
            writer: std::sync::Mutex::new(Some(writer)),
            changes: broadcast::channel(CHANGE_BUFFER).0,
            listed: AtomicBool::new(false),
            readable: AtomicBool::new(true),
            groups: Groups::new(key_of),
            revision: AtomicU64::new(0),
            undecodable_seen: Default::default(),
            undecodable: AtomicU64::new(0),
        }
    }
}

impl<K> Cache<K>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Every object, in no particular order.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.store.state()
    }

    /// The objects grouped under `key` (for a cache made with [`Cache::grouped_by`]), in no
    /// particular order.
    pub fn group(&self, key: &str) -> Vec<Arc<K>> {
        let belongs = |object: &Arc<K>| {
            self.groups
                .key_of
                .is_some_and(|key_of| key_of.keys(object).iter().any(|k| k == key))
        };
        self.groups
            .of(key)
            .iter()
            .filter_map(|reference| self.store.get(reference))
            // Checked again: a group may hold the name of an object that was deleted, and
            // created again elsewhere, while a watch was down.
            .filter(belongs)
            .collect()
    }

    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<K>> {
        let reference = ObjectRef::new(name);
        let reference = match namespace {
            Some(namespace) => reference.within(namespace),
            None => reference,
        };
        self.store.get(&reference)
    }

    /// Waits until the cached object `namespace/name` satisfies `wanted`, at most `patience`;
    /// whether it did. For a reconcile that wrote an object and must not act on the older
    /// copy the cache still holds.
    pub async fn wait_for(
        &self,
        namespace: Option<&str>,
        name: &str,
        wanted: impl Fn(&K) -> bool,
        patience: std::time::Duration,
    ) -> bool {
        // Subscribed before the first look, so no change falls between the two.
        let mut changes = self.subscribe();
        let satisfied = || {
            self.get(namespace, name)
                .is_some_and(|object| wanted(&object))
        };
        let watched = async {
            loop {
                if satisfied() {
                    return;
                }
                match changes.recv().await {
                    // Lagging only means another look at the store.
                    Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => {}
                    Err(broadcast::error::RecvError::Closed) => std::future::pending::<()>().await,
                }
            }
        };
        tokio::time::timeout(patience, watched).await.is_ok()
    }

    /// Changes from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Change<K>> {
        self.changes.subscribe()
    }

    /// Whether the kind has been listed once (an unstarted cache never is).
    pub async fn wait_until_listed(&self) {
        // The store resolves once its writer has applied a first complete list. That needs the
        // writer to be driven: a store whose writer waits for a watch that never starts (as
        // the old health caches did until the replica led) never resolves.
        let _ = self.store.wait_until_ready().await;
    }

    /// Watches the kind until the process ends; only the first call does anything.
    ///
    /// The watch decodes each object on its own ([`DeserializeGuard`]): an object the types
    /// cannot read (written under another version of its CRD, or around its schema) is
    /// reported and skipped, and the rest of its kind keeps flowing. Without the guard one
    /// such object fails every list of the kind, and every controller reading it (and the
    /// process's readiness) waits forever.
    pub async fn reflect(&self, api: Api<DeserializeGuard<K>>, config: watcher::Config) {
        let Some(writer) = self.writer.lock().expect("writer lock").take() else {
            return;
        };
        self.watch_into(writer, api, config).await;
    }

    /// Whether what the cache holds is what exists: false while the kind stands empty because
    /// it could not be read ([`Cache::reflect_if_served`]).
    pub fn readable(&self) -> bool {
        self.readable.load(Ordering::SeqCst)
    }

    async fn watch_into(
        &self,
        mut writer: Writer<K>,
        api: Api<DeserializeGuard<K>>,
        config: watcher::Config,
    ) {
        let recorder = Recorder::new(
            api.clone().into_client(),
            Reporter {
                controller: crate::FIELD_MANAGER.into(),
                instance: std::env::var("HOSTNAME").ok(),
            },
        );
        let mut events = watcher(api, config).default_backoff().boxed();
        let mut relisting = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    let (event, undecodable) = self.admit(event);
                    if let Some(invalid) = undecodable {
                        self.report_undecodable(&recorder, &invalid);
                    }
                    if let Some(event) = event {
                        self.apply(&mut writer, &event, &mut relisting);
                        if matches!(event, watcher::Event::InitDone) {
                            // A complete list of what exists.
                            self.readable.store(true, Ordering::SeqCst);
                        }
                    }
                }
                Err(error) => {
                    tracing::warn!(kind = %K::kind(&()), %error, "watch error; retrying");
                }
            }
        }
    }

    /// [`Cache::reflect`] for a kind the API server may not serve (a CRD of a newer release
    /// than the cluster's) or the process may not read (RBAC of an earlier release). While a
    /// list finds no such resource, or is forbidden, the cache stands listed and empty, so
    /// nothing waits for it, but not [`Cache::readable`]: readers must not take its emptiness
    /// for evidence (a CRD being installed, RBAC arriving after the pod). It looks again every
    /// minute or two, and watches the kind as any other once it can.
    pub async fn reflect_if_served(&self, api: Api<DeserializeGuard<K>>, config: watcher::Config) {
        use rand::Rng;
        let Some(mut writer) = self.writer.lock().expect("writer lock").take() else {
            return;
        };
        let probe = kube::api::ListParams::default().limit(1);
        let mut standing_empty = false;
        loop {
            match api.list_metadata(&probe).await {
                Err(kube::Error::Api(status)) if status.code == 404 || status.code == 403 => {
                    if !standing_empty {
                        if status.code == 404 {
                            tracing::info!(kind = %K::kind(&()), "not served by the API server; none are read until it is");
                        } else {
                            tracing::warn!(kind = %K::kind(&()), "not allowed to list them (RBAC); none are read until it is");
                        }
                        self.readable.store(false, Ordering::SeqCst);
                        let mut relisting = false;
                        self.apply(&mut writer, &watcher::Event::Init, &mut relisting);
                        self.apply(&mut writer, &watcher::Event::InitDone, &mut relisting);
                        standing_empty = true;
                    }
                    let wait = rand::rng().random_range(60..=120);
                    tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
                }
                // Served (or not known yet: the watch retries).
                _ => break,
            }
        }
        if standing_empty {
            tracing::info!(kind = %K::kind(&()), "now readable; watching");
        }
        // Readable again at the watch's first complete list.
        self.watch_into(writer, api, config).await;
    }

    /// What a watch event of guarded objects does to the store, and the object it could not
    /// decode, if that is one to report.
    ///
    /// Fail static: an object that no longer decodes keeps its last readable copy, through
    /// changes and relists alike, so nothing published for it is withdrawn because its newest
    /// version is unreadable; one never readable is left out. A deletion needs no more than
    /// the name.
    fn admit(
        &self,
        event: watcher::Event<DeserializeGuard<K>>,
    ) -> (Option<watcher::Event<K>>, Option<InvalidObject>) {
        // The copy of the same object (same UID: not a namesake created while the watch was
        // down) the store holds, carrying a deletion the unreadable version says is under way:
        // a deletion is evidence, and the object's finalizer (ours) must run its cleanup.
        let last_readable = |invalid: &InvalidObject| {
            let reference = ObjectRef::<K>::new(invalid.metadata.name.as_deref().unwrap_or(""));
            let reference = match &invalid.metadata.namespace {
                Some(namespace) => reference.within(namespace),
                None => reference,
            };
            let stored = self.store.get(&reference).filter(|stored| {
                invalid.metadata.uid.is_none() || stored.meta().uid == invalid.metadata.uid
            })?;
            let mut object = (*stored).clone();
            if invalid.metadata.deletion_timestamp.is_some() {
                let metadata = object.meta_mut();
                metadata.deletion_timestamp = invalid.metadata.deletion_timestamp.clone();
                metadata.finalizers = invalid.metadata.finalizers.clone();
                metadata.resource_version = invalid.metadata.resource_version.clone();
            }
            Some(object)
        };
        match event {
            watcher::Event::Apply(DeserializeGuard(Ok(object))) => {
                self.forget_undecodable(&object);
                (Some(watcher::Event::Apply(object)), None)
            }
            // Unchanged in the store, unless a deletion began: that wakes the controllers.
            watcher::Event::Apply(DeserializeGuard(Err(invalid))) => (
                last_readable(&invalid)
                    .filter(|object| object.meta().deletion_timestamp.is_some())
                    .map(watcher::Event::Apply),
                Some(invalid),
            ),
            watcher::Event::InitApply(DeserializeGuard(Ok(object))) => {
                self.forget_undecodable(&object);
                (Some(watcher::Event::InitApply(object)), None)
            }
            watcher::Event::InitApply(DeserializeGuard(Err(invalid))) => (
                last_readable(&invalid).map(watcher::Event::InitApply),
                Some(invalid),
            ),
            watcher::Event::Delete(DeserializeGuard(Ok(object))) => {
                self.undecodable_seen
                    .lock()
                    .expect("undecodable lock")
                    .remove(&undecodable_key(object.meta()));
                (Some(watcher::Event::Delete(object)), None)
            }
            watcher::Event::Delete(DeserializeGuard(Err(invalid))) => {
                let object = last_readable(&invalid);
                self.undecodable_seen
                    .lock()
                    .expect("undecodable lock")
                    .remove(&undecodable_key(&invalid.metadata));
                (object.map(watcher::Event::Delete), None)
            }
            watcher::Event::Init => (Some(watcher::Event::Init), None),
            watcher::Event::InitDone => (Some(watcher::Event::InitDone), None),
        }
    }

    /// Logs and counts an object that could not be decoded, once per version of it however
    /// often the kind is listed again; whether this version is new (and so worth an Event).
    fn note_undecodable(&self, invalid: &InvalidObject) -> bool {
        let key = undecodable_key(&invalid.metadata);
        let version = invalid
            .metadata
            .resource_version
            .clone()
            .unwrap_or_default();
        let new = self
            .undecodable_seen
            .lock()
            .expect("undecodable lock")
            .insert(key.clone(), version.clone())
            .is_none_or(|seen| seen != version);
        if new {
            self.undecodable.fetch_add(1, Ordering::SeqCst);
            tracing::warn!(
                kind = %K::kind(&()),
                object = %key,
                resource_version = %version,
                error = %invalid.error,
                "an object of a watched kind cannot be decoded; skipped (its last readable copy, if any, stays)"
            );
        }
        new
    }

    /// Notes an object that could not be decoded and, the first time for this version of a
    /// namespaced one, says so in an Event on it, where its owners look. The Event is sent on
    /// its own task: a kind whose every object is unreadable lists without waiting for them.
    fn report_undecodable(&self, recorder: &Recorder, invalid: &InvalidObject) {
        if !self.note_undecodable(invalid) || invalid.metadata.namespace.is_none() {
            return;
        }
        let event = Event {
            type_: EventType::Warning,
            reason: UNDECODABLE_REASON.into(),
            note: Some(truncate_note(&format!(
                "Meridian cannot read this {kind}, so it is skipped until it changes: {error}",
                kind = K::kind(&()),
                error = invalid.error,
            ))),
            action: "Watch".into(),
            secondary: None,
        };
        let reference = DeserializeGuard::<K>(Err(invalid.clone())).object_ref(&());
        let recorder = recorder.clone();
        tokio::spawn(async move {
            if let Err(error) = recorder.publish(&event, &reference).await {
                tracing::debug!(%error, object = ?reference.name, "could not publish an Event");
            }
        });
    }

    /// An object that decodes again is one to report anew if it breaks again.
    fn forget_undecodable(&self, object: &K) {
        let mut seen = self.undecodable_seen.lock().expect("undecodable lock");
        if !seen.is_empty() && seen.remove(&undecodable_key(object.meta())).is_some() {
            tracing::info!(kind = %K::kind(&()), object = %undecodable_key(object.meta()), "decodes again");
        }
    }

    /// How many versions of this kind's objects could not be decoded since the process began.
    pub fn undecodable(&self) -> u64 {
        self.undecodable.load(Ordering::SeqCst)
    }

    /// Applies one watch event to the store and the groups, and tells the subscribers.
    fn apply(&self, writer: &mut Writer<K>, event: &watcher::Event<K>, relisting: &mut bool) {
        let change = match event {
            watcher::Event::Apply(object) => {
                let old = self.store.get(&ObjectRef::from_obj(object));
                Some(Change::Applied {
                    old,
                    new: Arc::new(object.clone()),
                })
            }
            watcher::Event::Delete(object) => Some(Change::Deleted(Arc::new(object.clone()))),
            watcher::Event::Init => {
                *relisting = true;
                None
            }
            watcher::Event::InitApply(_) => None,
            watcher::Event::InitDone => relisting.then_some(Change::Relisted),
        };
        writer.apply_watcher_event(event);
        self.revision.fetch_add(1, Ordering::SeqCst);
        match &change {
            Some(Change::Applied { old, new }) => self.groups.regroup(old.as_deref(), Some(new)),
            Some(Change::Deleted(old)) => self.groups.regroup(Some(old), None),
            _ => {}
        }
        if matches!(event, watcher::Event::InitDone) {
            // The store now holds the new list whole.
            self.groups.rebuild(&self.store.state());
            *relisting = false;
            self.listed.store(true, Ordering::SeqCst);
        }
        if let Some(change) = change {
            // No subscriber yet is fine: controllers list the store when they start.
            let _ = self.changes.send(change);
        }
    }

    /// A number that changes whenever the store does: what was derived from the whole store at
    /// one revision holds until the next (read it before reading the store).
    pub fn revision(&self) -> u64 {
        self.revision.load(Ordering::SeqCst)
    }

    /// Whether the kind has been listed once.
    pub fn listed(&self) -> bool {
        self.listed.load(Ordering::SeqCst)
    }
}

/// The caches of every kind a hub or an agent's controllers read.
#[derive(Debug)]
pub struct Caches {
    scope: Scope,
    /// The one namespace watched in distributed mode, if the agent is confined to one.
    namespace: Option<String>,
    /// The hub's own namespace, where it keeps the agents' bindings ([`Caches::role_bindings`]).
    hub_namespace: Option<String>,
    pub policies: Cache<DNSPolicy>,
    pub records: Cache<DNSRecord>,
    pub gateways: Cache<Gateway>,
    pub zones: Cache<ManagedZone>,
    pub probes: Cache<DNSHealthCheckProbe>,
    pub decisions: Cache<PlacementDecision>,
    pub clusters: Cache<ManagedCluster>,
    pub reports: Cache<ClusterReport>,
    /// The agents' probe results, in shards beside their reports.
    pub probe_results: Cache<ProbeResults>,
    /// The agents' heartbeats: one Lease per cluster, in its namespace.
    pub heartbeats: Cache<Lease>,
    /// Provider credentials, probe header Secrets, TLS Secrets of hub Gateways, and the
    /// copies the hub writes; never service-account tokens or Helm releases (see
    /// [`SECRETS_READ`]).
    pub secrets: Cache<Secret>,
    /// GatewayClass parameters (the downstream class).
    pub config_maps: Cache<ConfigMap>,
    pub gateway_classes: Cache<GatewayClass>,
    /// The ManifestWorks the hub writes (and every other, which it leaves alone).
    pub works: Cache<ManifestWork>,
    /// ListenerSets, grouped by the Gateway they name (empty where the API server serves none).
    pub listener_sets: Cache<ListenerSet>,
    /// The RoleBindings the hub keeps in its own namespace, one per agent and copy reader
    /// (labelled as Meridian's): checked against this cache, not read, at every resync of every
    /// cluster, and a deleted one is bound again at once.
    pub role_bindings: Cache<RoleBinding>,
}

/// The API of a namespaced kind in `namespace`, or in every namespace.
fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<DeserializeGuard<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(namespace) => Api::namespaced(client.clone(), namespace),
        None => Api::all(client.clone()),
    }
}

/// The Secrets a process caches: every type but those that are never Meridian's to read, so
/// that the hub's memory holds no token or login of anyone else's: service-account and
/// bootstrap tokens, registry and SSH credentials, basic auth, and Helm releases (numerous and
/// large). Provider credentials, probe headers, TLS Secrets of hub Gateways and keys are typed
/// `kuadrant.io/*`, `meridian.*`, `kubernetes.io/tls` or `Opaque`. (RBAC cannot narrow a read
/// by type, and a field selector has no "one of"; this is the narrowest one selector allows.)
pub const SECRETS_READ: &str = "type!=kubernetes.io/service-account-token,\
type!=bootstrap.kubernetes.io/token,type!=kubernetes.io/dockerconfigjson,\
type!=kubernetes.io/dockercfg,type!=kubernetes.io/basic-auth,type!=kubernetes.io/ssh-auth,\
type!=helm.sh/release.v1";

/// The ConfigMaps a hub caches: every one but the CA bundle Kubernetes puts in every namespace.
pub const CONFIG_MAPS_READ: &str = "metadata.name!=kube-root-ca.crt";

/// Which kinds a process watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Everything a hub reads.
    Hub,
    /// An agent in distributed mode: its cluster's policies, Gateways, zones and the records it
    /// wrote itself.
    Distributed,
    /// An agent serving the embedded zones: the hub's DNSRecords and ManagedZones, no more.
    Zones,
}

impl Caches {
    pub fn new(scope: Scope) -> Self {
        Caches {
            scope,
            namespace: None,
            hub_namespace: None,
            policies: Cache::grouped_by(crate::runtime::indexes::policy_group),
            records: Cache::grouped_by(crate::runtime::indexes::record_group),
            gateways: Cache::grouped_by(crate::runtime::indexes::gateway_group),
            zones: Cache::default(),
            probes: Cache::default(),
            decisions: Cache::grouped_under(crate::runtime::indexes::decision_groups),
            clusters: Cache::default(),
            reports: Cache::default(),
            probe_results: Cache::default(),
            heartbeats: Cache::default(),
            secrets: Cache::default(),
            config_maps: Cache::default(),
            gateway_classes: Cache::default(),
            works: Cache::grouped_under(crate::runtime::indexes::work_groups),
            listener_sets: Cache::grouped_by(crate::runtime::indexes::listener_set_group),
            role_bindings: Cache::default(),
        }
    }

    /// The hub's own namespace, whose Meridian RoleBindings a hub caches (none without it).
    pub fn keeping_bindings_in(mut self, hub_namespace: Option<String>) -> Self {
        self.hub_namespace = hub_namespace;
        self
    }

    /// Confines a distributed-mode agent's watches to `namespace` (all namespaces when `None`).
    pub fn within(mut self, namespace: Option<String>) -> Self {
        self.namespace = namespace;
        self
    }

    /// Watches the kinds the scope needs until the process ends.
    pub async fn reflect(&self, client: Client) {
        let all = watcher::Config::default;
        match self.scope {
            Scope::Distributed => {
                let own = all().labels(&format!("{DISTRIBUTED_LABEL}=true"));
                let namespace = self.namespace.as_deref();
                tokio::join!(
                    self.policies.reflect(scoped(&client, namespace), all()),
                    self.records.reflect(scoped(&client, namespace), own),
                    self.gateways.reflect(scoped(&client, namespace), all()),
                    self.zones.reflect(scoped(&client, namespace), all()),
                    self.secrets
                        .reflect(scoped(&client, namespace), all().fields(SECRETS_READ)),
                    self.listener_sets
                        .reflect_if_served(scoped(&client, namespace), all()),
                );
            }
            Scope::Zones => {
                tokio::join!(
                    self.records.reflect(Api::all(client.clone()), all()),
                    self.zones.reflect(Api::all(client), all()),
                );
            }
            Scope::Hub => {
                let heartbeats =
                    all().labels(&format!("{}=true", meridian_api::labels::HEARTBEAT_LABEL));
                tokio::join!(
                    self.policies.reflect(Api::all(client.clone()), all()),
                    self.records.reflect(Api::all(client.clone()), all()),
                    self.gateways.reflect(Api::all(client.clone()), all()),
                    self.zones.reflect(Api::all(client.clone()), all()),
                    self.probes.reflect(Api::all(client.clone()), all()),
                    self.decisions.reflect(Api::all(client.clone()), all()),
                    self.clusters.reflect(Api::all(client.clone()), all()),
                    self.reports.reflect(Api::all(client.clone()), all()),
                    self.probe_results.reflect(Api::all(client.clone()), all()),
                    self.heartbeats
                        .reflect(Api::all(client.clone()), heartbeats),
                    self.secrets
                        .reflect(Api::all(client.clone()), all().fields(SECRETS_READ)),
                    self.config_maps
                        .reflect(Api::all(client.clone()), all().fields(CONFIG_MAPS_READ)),
                    self.gateway_classes
                        .reflect(Api::all(client.clone()), all()),
                    self.works.reflect(Api::all(client.clone()), all()),
                    self.listener_sets
                        .reflect_if_served(Api::all(client.clone()), all()),
                    async {
                        if let Some(namespace) = &self.hub_namespace {
                            let meridians = all().labels(&format!(
                                "app.kubernetes.io/managed-by={}",
                                crate::FIELD_MANAGER
                            ));
                            self.role_bindings
                                .reflect(Api::namespaced(client.clone(), namespace), meridians)
                                .await;
                        }
                    },
                );
            }
        }
    }

    /// Resolves once every watched kind has been listed (before that, an empty cache would
    /// read as "nothing exists").
    pub async fn wait_until_listed(&self) {
        self.records.wait_until_listed().await;
        self.zones.wait_until_listed().await;
        if self.scope == Scope::Zones {
            return;
        }
        self.policies.wait_until_listed().await;
        self.gateways.wait_until_listed().await;
        self.secrets.wait_until_listed().await;
        self.listener_sets.wait_until_listed().await;
        if self.scope == Scope::Hub {
            self.probes.wait_until_listed().await;
            self.decisions.wait_until_listed().await;
            self.clusters.wait_until_listed().await;
            self.reports.wait_until_listed().await;
            self.probe_results.wait_until_listed().await;
            self.heartbeats.wait_until_listed().await;
            self.config_maps.wait_until_listed().await;
            self.gateway_classes.wait_until_listed().await;
            self.works.wait_until_listed().await;
            if self.hub_namespace.is_some() {
                self.role_bindings.wait_until_listed().await;
            }
        }
    }

    /// The watched kinds, each with whether it has been listed and how many versions of its
    /// objects could not be decoded.
    fn watched(&self) -> Vec<(&'static str, bool, u64)> {
        fn of<K>(kind: &'static str, cache: &Cache<K>) -> (&'static str, bool, u64)
        where
            K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync,
        {
            (kind, cache.listed(), cache.undecodable())
        }
        let mut kinds = vec![
            of("DNSRecord", &self.records),
            of("ManagedZone", &self.zones),
        ];
        if self.scope != Scope::Zones {
            kinds.extend([
                of("DNSPolicy", &self.policies),
                of("Gateway", &self.gateways),
                of("Secret", &self.secrets),
                of("ListenerSet", &self.listener_sets),
            ]);
        }
        if self.scope == Scope::Hub {
            kinds.extend([
                of("DNSHealthCheckProbe", &self.probes),
                of("PlacementDecision", &self.decisions),
                of("ManagedCluster", &self.clusters),
                of("ClusterReport", &self.reports),
                of("ProbeResults", &self.probe_results),
                of("Lease", &self.heartbeats),
                of("ConfigMap", &self.config_maps),
                of("GatewayClass", &self.gateway_classes),
                of("ManifestWork", &self.works),
            ]);
            if self.hub_namespace.is_some() {
                kinds.push(of("RoleBinding", &self.role_bindings));
            }
        }
        kinds
    }

    /// The watched kinds not listed yet, for a log line that says what a wait is for.
    pub fn unlisted(&self) -> Vec<&'static str> {
        self.watched()
            .into_iter()
            .filter(|(_, listed, _)| !listed)
            .map(|(kind, _, _)| kind)
            .collect()
    }

    /// Per watched kind, how many versions of its objects could not be decoded (and were
    /// skipped) since the process began.
    pub fn undecodable(&self) -> Vec<(&'static str, u64)> {
        self.watched()
            .into_iter()
            .map(|(kind, _, undecodable)| (kind, undecodable))
            .collect()
    }

    /// Whether every watched kind has been listed, without waiting.
    pub fn listed(&self) -> bool {
        self.unlisted().is_empty()
    }
}

/// The reconcile requests a change to another kind makes: `map` says which objects it
/// concerns; a relist (or falling behind) asks for every object of `all`.
pub fn triggers<Other, K>(
    changes: broadcast::Receiver<Change<Other>>,
    all: Store<K>,
    map: impl Fn(&Change<Other>) -> Vec<ObjectRef<K>> + Send + 'static,
) -> BoxStream<'static, ObjectRef<K>>
where
    Other: Send + Sync + 'static,
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    futures::stream::unfold(changes, |mut changes| async move {
        Some((changes.recv().await, changes))
    })
    .flat_map(move |received| {
        let requests = match received {
            Ok(change @ (Change::Applied { .. } | Change::Deleted(_))) => map(&change),
            Ok(Change::Relisted) | Err(broadcast::error::RecvError::Lagged(_)) => all
                .state()
                .iter()
                .map(|object| ObjectRef::from_obj(&**object))
                .collect(),
            Err(broadcast::error::RecvError::Closed) => Vec::new(),
        };
        futures::stream::iter(requests)
    })
    .boxed()
}

/// The requests a kind's own changes make: the changed object (a deleted one has nothing left
/// to reconcile; its finalizer already brought it by) and, at a relist, every object.
pub fn own_changes<K>(cache: &Cache<K>) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    own_changes_where(cache, |_, _| true)
}

/// The requests a kind's own changes make, but for changes to its status alone: for a kind
/// whose status only its controller writes, that write would otherwise wake the controller
/// again at once, and a failing object would be retried the moment its status says it failed,
/// outside its backoff.
pub fn own_changes_beyond_status<K>(cache: &Cache<K>) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    own_changes_where(cache, crate::runtime::indexes::changed_beyond_status)
}

/// The changed objects of the kind for which `wakes(old, new)` holds.
fn own_changes_where<K>(
    cache: &Cache<K>,
    wakes: fn(Option<&K>, &K) -> bool,
) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    triggers(
        cache.subscribe(),
        cache.store().clone(),
        move |change| match change {
            Change::Applied { old, new } if wakes(old.as_deref(), new) => {
                vec![ObjectRef::from_obj(&**new)]
            }
            _ => Vec::new(),
        },
    )
}

/// Every object of the kind, once, when a controller starts (its subscriptions begin after
/// the first list).
pub fn everything_once<K>(cache: &Cache<K>) -> BoxStream<'static, ObjectRef<K>>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let store = cache.store().clone();
    futures::stream::once(async move {
        let _ = store.wait_until_ready().await;
        futures::stream::iter(
            store
                .state()
                .iter()
                .map(|object| ObjectRef::from_obj(&**object))
                .collect::<Vec<_>>(),
        )
    })
    .flatten()
    .boxed()
}

type ReconcileFuture = Pin<Box<dyn Future<Output = Result<Action, Error>> + Send>>;

/// Runs a controller of `K` over `store`, reconciling what `triggers` ask for, at most
/// `concurrency` at a time, until `stop` resolves; reconciles already running then finish.
///
/// The bound matters when a whole fleet is due at once (a hub's first start, a new leader with
/// an empty API server): unbounded, 2,000 reconciles each send their writes together, the API
/// server's priority level answers most of them 429, and the client's retries back off for
/// minutes. Bounded, the writes queue here and the API server stays busy but not flooded.
pub async fn run_controller<K, Ctx, Reconcile, Fut>(
    store: Store<K>,
    concurrency: u16,
    triggers: Vec<BoxStream<'static, ObjectRef<K>>>,
    reconcile: Reconcile,
    error_policy: impl Fn(Arc<K>, &Error, Arc<Ctx>) -> Action + Send + 'static,
    context: Arc<Ctx>,
    stop: impl Future<Output = ()> + Send + 'static,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    Ctx: Send + Sync + 'static,
    Reconcile: Fn(Arc<K>, Arc<Ctx>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let queue = futures::stream::select_all(triggers)
        .map(|reference| Ok::<_, std::convert::Infallible>(ReconcileRequest::from(reference)))
        .take_until(stop);
    kube::runtime::applier(
        move |object, context| -> ReconcileFuture {
            // Each reconcile on its own task, so reconciles of different objects use every core.
            let running = tokio::spawn(reconcile(object, context));
            Box::pin(async move {
                running
                    .await
                    .unwrap_or_else(|error| Err(Error::Aborted(error.to_string())))
            })
        },
        error_policy,
        context,
        store,
        queue,
        kube::runtime::Config::default().concurrency(concurrency),
    )
    .into_stream()
    .for_each(|_| async {})
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;
    use meridian_api::kuadrant::DNSPolicySpec;

    fn policy(namespace: &str, name: &str, gateway: &str) -> DNSPolicy {
        let spec: DNSPolicySpec = serde_json::from_value(serde_json::json!({
            "targetRef": { "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway },
        }))
        .expect("a minimal policy");
        let mut p = DNSPolicy::new(name, spec);
        p.metadata.namespace = Some(namespace.into());
        p
    }

    fn group(cache: &Cache<DNSPolicy>, key: &str) -> Vec<String> {
        let mut names: Vec<String> = cache.group(key).iter().map(|p| p.name_any()).collect();
        names.sort();
        names
    }

    #[test]
    fn groups_follow_the_store_through_changes_deletions_and_relists() {
        let cache = Cache::grouped_by(crate::runtime::indexes::policy_group);
        let mut writer = cache.writer.lock().unwrap().take().unwrap();
        let mut relisting = false;
        let mut apply = |event| cache.apply(&mut writer, &event, &mut relisting);

        // A first list.
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(policy("a", "one", "web")));
        apply(watcher::Event::InitApply(policy("a", "two", "web")));
        apply(watcher::Event::InitApply(policy("b", "three", "web")));
        apply(watcher::Event::InitDone);
        assert_eq!(group(&cache, "a/web"), ["one", "two"]);
        assert_eq!(group(&cache, "b/web"), ["three"]);

        // A policy retargeted leaves its old group; one deleted leaves every group.
        apply(watcher::Event::Apply(policy("a", "two", "api")));
        assert_eq!(group(&cache, "a/web"), ["one"]);
        assert_eq!(group(&cache, "a/api"), ["two"]);
        apply(watcher::Event::Delete(policy("a", "one", "web")));
        assert!(group(&cache, "a/web").is_empty());
        // An unchanged target keeps its group.
        apply(watcher::Event::Apply(policy("a", "two", "api")));
        assert_eq!(group(&cache, "a/api"), ["two"]);

        // A deletion that says another target than the one grouped (a change the watch
        // missed), then the name created again: the group does not hand out the newcomer.
        apply(watcher::Event::Delete(policy("a", "two", "web")));
        apply(watcher::Event::Apply(policy("a", "two", "other")));
        assert!(group(&cache, "a/api").is_empty());
        assert_eq!(group(&cache, "a/other"), ["two"]);
        apply(watcher::Event::Apply(policy("a", "two", "api")));

        // A relist replaces everything, including what its watch missed.
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(policy("a", "four", "web")));
        // Until the relist is done, the groups are those of the store as it still is.
        assert_eq!(group(&cache, "a/api"), ["two"]);
        apply(watcher::Event::InitDone);
        assert_eq!(group(&cache, "a/web"), ["four"]);
        assert!(group(&cache, "a/api").is_empty());
        assert!(group(&cache, "b/web").is_empty());
    }

    #[test]
    fn an_object_in_several_groups_moves_between_them_key_by_key() {
        use meridian_api::upstream::PlacementDecision;
        let decision = |name: &str, placement: &str, clusters: &[&str]| -> PlacementDecision {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "PlacementDecision",
                "metadata": { "name": name, "namespace": "shop",
                              "labels": { meridian_api::labels::PLACEMENT_LABEL: placement } },
                "status": { "decisions": clusters.iter()
                    .map(|c| serde_json::json!({ "clusterName": c, "reason": "" }))
                    .collect::<Vec<_>>() },
            }))
            .expect("a PlacementDecision")
        };
        let cache = Cache::grouped_under(crate::runtime::indexes::decision_groups);
        let mut writer = cache.writer.lock().unwrap().take().unwrap();
        let mut relisting = false;
        let mut apply = |event| cache.apply(&mut writer, &event, &mut relisting);
        let names = |key: &str| -> Vec<String> {
            let mut names: Vec<String> = cache.group(key).iter().map(|d| d.name_any()).collect();
            names.sort();
            names
        };
        apply(watcher::Event::Init);
        apply(watcher::Event::InitApply(decision(
            "eu-1",
            "eu",
            &["a", "b"],
        )));
        apply(watcher::Event::InitApply(decision(
            "all-1",
            "all",
            &["b", "c"],
        )));
        apply(watcher::Event::InitDone);
        assert_eq!(names("shop/eu"), ["eu-1"]);
        assert_eq!(names("cluster:a"), ["eu-1"]);
        assert_eq!(names("cluster:b"), ["all-1", "eu-1"]);
        // A cluster let go leaves that group alone; a cluster chosen joins its group.
        apply(watcher::Event::Apply(decision("eu-1", "eu", &["b", "d"])));
        assert!(names("cluster:a").is_empty());
        assert_eq!(names("cluster:b"), ["all-1", "eu-1"]);
        assert_eq!(names("cluster:d"), ["eu-1"]);
        assert_eq!(names("shop/eu"), ["eu-1"]);
        // Deleted: out of every group.
        apply(watcher::Event::Delete(decision("eu-1", "eu", &["b", "d"])));
        assert_eq!(names("cluster:b"), ["all-1"]);
        assert!(names("cluster:d").is_empty());
        assert!(names("shop/eu").is_empty());
    }

    /// A policy as the API server may hold it and the types cannot read.
    fn unreadable(namespace: &str, name: &str, version: &str) -> DeserializeGuard<DNSPolicy> {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
            "metadata": { "name": name, "namespace": namespace, "resourceVersion": version },
            "spec": { "targetRef": "not an object" },
        }))
        .expect("the guard decodes anything with metadata")
    }

    fn readable(policy: DNSPolicy) -> DeserializeGuard<DNSPolicy> {
        DeserializeGuard(Ok(policy))
    }

    #[test]
    fn an_undecodable_object_is_skipped_and_its_last_readable_copy_stays() {
        let cache = Cache::grouped_by(crate::runtime::indexes::policy_group);
        let mut writer = cache.writer.lock().unwrap().take().unwrap();
        let mut relisting = false;
        let mut watch = |event| {
            let (event, undecodable) = cache.admit(event);
            let noted = undecodable.map(|invalid| cache.note_undecodable(&invalid));
            if let Some(event) = event {
                cache.apply(&mut writer, &event, &mut relisting);
            }
            noted
        };
        let names = |cache: &Cache<DNSPolicy>| {
            let mut names: Vec<String> = cache.state().iter().map(|p| p.name_any()).collect();
            names.sort();
            names
        };

        // A list with an unreadable policy among readable ones: the readable ones are listed.
        watch(watcher::Event::Init);
        watch(watcher::Event::InitApply(readable(policy(
            "a", "one", "web",
        ))));
        assert_eq!(
            watch(watcher::Event::InitApply(unreadable("a", "bad", "1"))),
            Some(true)
        );
        watch(watcher::Event::InitApply(readable(policy(
            "a", "two", "web",
        ))));
        watch(watcher::Event::InitDone);
        assert!(cache.listed());
        assert_eq!(names(&cache), ["one", "two"]);
        assert_eq!(cache.undecodable(), 1);

        // A readable policy that becomes unreadable keeps its last readable copy, through a
        // change and a relist; the same version is counted once however often it is listed.
        assert_eq!(
            watch(watcher::Event::Apply(unreadable("a", "one", "2"))),
            Some(true)
        );
        assert_eq!(group(&cache, "a/web"), ["one", "two"]);
        watch(watcher::Event::Init);
        watch(watcher::Event::InitApply(unreadable("a", "one", "2")));
        assert_eq!(
            watch(watcher::Event::InitApply(unreadable("a", "bad", "1"))),
            Some(false)
        );
        watch(watcher::Event::InitApply(readable(policy(
            "a", "two", "web",
        ))));
        watch(watcher::Event::InitDone);
        assert_eq!(names(&cache), ["one", "two"]);
        assert_eq!(group(&cache, "a/web"), ["one", "two"]);
        assert_eq!(cache.undecodable(), 2);

        // Mended, it flows again; broken again, it is reported again.
        watch(watcher::Event::Apply(readable(policy("a", "one", "api"))));
        assert_eq!(group(&cache, "a/api"), ["one"]);
        assert_eq!(
            watch(watcher::Event::Apply(unreadable("a", "one", "2"))),
            Some(true)
        );
        assert_eq!(cache.undecodable(), 3);

        // Deleted while unreadable: gone, by name.
        watch(watcher::Event::Delete(unreadable("a", "one", "3")));
        watch(watcher::Event::Delete(unreadable("a", "bad", "4")));
        assert_eq!(names(&cache), ["two"]);
        assert!(group(&cache, "a/api").is_empty());
    }

    /// `object` with `uid`, and (when `deleted`) a deletion under way held by a finalizer.
    fn with_identity<K: Resource>(mut object: K, uid: &str, deleted: bool) -> K {
        let metadata = object.meta_mut();
        metadata.uid = Some(uid.into());
        if deleted {
            metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
            metadata.finalizers = Some(vec!["meridian.dev/test".into()]);
        }
        object
    }

    #[test]
    fn a_deletion_of_an_unreadable_object_reaches_its_last_readable_copy_and_a_namesake_does_not() {
        let cache: Cache<DNSPolicy> = Cache::grouped_by(crate::runtime::indexes::policy_group);
        let mut writer = cache.writer.lock().unwrap().take().unwrap();
        let mut relisting = false;
        let mut watch = |event| {
            let (event, _) = cache.admit(event);
            let woke = event.is_some();
            if let Some(event) = event {
                cache.apply(&mut writer, &event, &mut relisting);
            }
            woke
        };
        watch(watcher::Event::Init);
        watch(watcher::Event::InitApply(readable(with_identity(
            policy("a", "one", "web"),
            "uid-1",
            false,
        ))));
        watch(watcher::Event::InitDone);

        // Unreadable and not being deleted: nothing changes, nothing wakes.
        let unreadable_one = |deleted| {
            let DeserializeGuard(Err(mut invalid)) = unreadable("a", "one", "5") else {
                unreachable!()
            };
            invalid.metadata = with_identity(
                DNSPolicy {
                    metadata: invalid.metadata,
                    ..policy("a", "one", "web")
                },
                "uid-1",
                deleted,
            )
            .metadata;
            DeserializeGuard::<DNSPolicy>(Err(invalid))
        };
        assert!(!watch(watcher::Event::Apply(unreadable_one(false))));
        let stored = cache.get(Some("a"), "one").unwrap();
        assert!(stored.metadata.deletion_timestamp.is_none());

        // Its deletion begins: the last readable copy carries it, and the controllers wake to
        // run the finalizer's cleanup.
        assert!(watch(watcher::Event::Apply(unreadable_one(true))));
        let stored = cache.get(Some("a"), "one").unwrap();
        assert!(stored.metadata.deletion_timestamp.is_some());
        assert_eq!(
            stored.metadata.finalizers.as_deref().unwrap(),
            ["meridian.dev/test"]
        );
        assert_eq!(stored.metadata.resource_version.as_deref(), Some("5"));
        assert_eq!(group(&cache, "a/web"), ["one"], "the readable spec stays");

        // A namesake (another UID) listed unreadable after the watch was down does not take
        // the old object's copy: it is left out.
        watch(watcher::Event::Init);
        let DeserializeGuard(Err(mut namesake)) = unreadable("a", "one", "9") else {
            unreachable!()
        };
        namesake.metadata.uid = Some("uid-2".into());
        watch(watcher::Event::InitApply(DeserializeGuard(Err(namesake))));
        watch(watcher::Event::InitDone);
        assert!(cache.get(Some("a"), "one").is_none());
    }

    #[test]
    fn event_notes_are_cut_at_a_character_boundary() {
        let long = "é".repeat(700);
        let note = truncate_note(&long);
        assert!(note.len() <= 1000, "{}", note.len());
        assert!(note.ends_with("..."));
        assert_eq!(truncate_note("short"), "short");
    }
}
