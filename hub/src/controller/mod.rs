//! The controllers only a hub runs: gateway placement and agent install
//! ([`gateway_placement`]), the probe header and zone key copies agents read
//! ([`probe_headers`], [`key_copies`]), ManagedZone
//! status ([`managed_zone`]) and router-shard DNS ([`router_dns`]). The DNSPolicy and DNSRecord
//! controllers are shared with the agents (`meridian_controllers`).

pub mod cluster_copies;
pub mod gateway_placement;
pub mod key_copies;
pub mod managed_zone;
pub mod probe_headers;
pub mod router_dns;

use std::future::Future;
use std::sync::Arc;

use futures::stream::BoxStream;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use meridian_controllers::{Context, Error};

/// Runs the hub's light controller named `controller` (at the light concurrency) over `store`
/// until `stop` resolves, reconciling what `requests` ask for: each pass counted
/// ([`meridian_controllers::counted`]), each failure retried with the object's backoff
/// ([`meridian_controllers::retry_after`]).
async fn run_light<K, Reconcile, Fut>(
    controller: &'static str,
    store: Store<K>,
    requests: Vec<BoxStream<'static, ObjectRef<K>>>,
    reconcile: Reconcile,
    ctx: Arc<Context>,
    stop: impl Future<Output = ()> + Send + 'static,
) where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + Send + Sync + 'static,
    Reconcile: Fn(Arc<K>, Arc<Context>) -> Fut + Send + 'static,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    let concurrency = ctx.config.concurrency.light;
    meridian_controllers::runtime::caches::run_controller(
        store,
        concurrency,
        requests,
        move |object: Arc<K>, ctx: Arc<Context>| {
            let pass = reconcile(object.clone(), ctx.clone());
            async move { meridian_controllers::counted(&*object, &ctx, controller, pass).await }
        },
        move |object: Arc<K>, error: &Error, ctx: Arc<Context>| {
            meridian_controllers::retry_after(&*object, error, &ctx, controller)
        },
        ctx,
        stop,
    )
    .await;
}
