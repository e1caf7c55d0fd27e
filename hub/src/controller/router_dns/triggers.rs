//! What wakes the controller: the trigger streams, built from pure indexes over the caches.

use futures::stream::BoxStream;
use kube::runtime::reflector::ObjectRef;
use meridian_api::kuadrant::ManagedZone;
use meridian_api::meridian::ClusterReport;

use meridian_controllers::runtime::caches::{
    Caches, Change, everything_once, own_changes, triggers,
};

/// Router-shard DNS per zone: a zone, or a report whose shards changed, wakes it.
pub fn requests(caches: &Caches) -> Vec<BoxStream<'static, ObjectRef<ManagedZone>>> {
    let all = caches.zones.store().clone();
    let by_report = {
        let zones = all.clone();
        move |change: &Change<ClusterReport>| {
            let shards_changed = match change {
                Change::Applied { old, new } => {
                    old.as_ref().map(|o| &o.spec.router_shards) != Some(&new.spec.router_shards)
                }
                Change::Deleted(old) => !old.spec.router_shards.is_empty(),
                Change::Relisted => false,
            };
            if !shards_changed {
                return Vec::new();
            }
            zones
                .state()
                .iter()
                .map(|z| ObjectRef::from_obj(&**z))
                .collect()
        }
    };
    vec![
        everything_once(&caches.zones),
        own_changes(&caches.zones),
        triggers(caches.reports.subscribe(), all.clone(), by_report),
    ]
}
