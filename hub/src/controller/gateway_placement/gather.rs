//! What placing a Gateway reads, all from the shared caches.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use meridian_api::labels::PLACEMENT_LABEL;
use meridian_api::upstream::{Gateway, GatewayClass, ManifestWork};

use super::PlacementContext;
use crate::placement::{
    DEFAULT_DOWNSTREAM_CLASS, GATEWAY_WORK_LABEL, gateway_label, tls_secret_names,
};
use meridian_controllers::runtime::indexes;

/// What the caches say about one hub Gateway.
pub struct Seen {
    /// The clusters its Placement decided that are still in OCM.
    pub placed: BTreeSet<String>,
    /// Its ManifestWorks, on clusters it is or was placed on.
    pub works: Vec<Arc<ManifestWork>>,
    /// Its GatewayClass, when there is one.
    pub class: Option<Arc<GatewayClass>>,
    /// The class the downstream copies take unless their cluster names its own.
    pub downstream_class: String,
    /// The TLS Secrets its listeners name that exist.
    pub tls_secrets: Vec<Secret>,
}

pub fn gather(gateway: &Gateway, ctx: &PlacementContext) -> Seen {
    let caches = &ctx.caches;
    let namespace = gateway.namespace().unwrap_or_default();
    let decided = match gateway.labels().get(PLACEMENT_LABEL) {
        Some(placement) => indexes::decided_clusters(
            &caches
                .decisions
                .group(&indexes::group_key(&namespace, placement)),
            &namespace,
            placement,
        ),
        None => BTreeSet::new(),
    };
    // A cluster gone from OCM gets no work.
    let placed = decided
        .into_iter()
        .filter(|cluster| caches.clusters.get(None, cluster).is_some())
        .collect();
    let class = caches
        .gateway_classes
        .get(None, &gateway.spec.gateway_class_name);
    let downstream_class = downstream_class(class.as_deref(), ctx);
    let tls_secrets = tls_secret_names(gateway)
        .iter()
        .filter_map(|secret| caches.secrets.get(Some(&namespace), secret))
        .map(|secret| (*secret).clone())
        .collect();
    Seen {
        placed,
        works: works_of(gateway, ctx),
        class,
        downstream_class,
        tls_secrets,
    }
}

/// The fleet's downstream class: the `downstreamClass` key of a ConfigMap the GatewayClass
/// names as parameters, else `istio` (a cluster may name its own: see
/// [`crate::placement::cluster_downstream_class`]).
fn downstream_class(class: Option<&GatewayClass>, ctx: &PlacementContext) -> String {
    class
        .and_then(|class| class.spec.parameters_ref.as_ref())
        .filter(|parameters| parameters.kind == "ConfigMap")
        .and_then(|parameters| {
            ctx.caches
                .config_maps
                .get(parameters.namespace.as_deref(), &parameters.name)
        })
        .and_then(|config_map| config_map.data.as_ref()?.get("downstreamClass").cloned())
        .filter(|class| meridian_api::names::is_object_name(class))
        .unwrap_or_else(|| DEFAULT_DOWNSTREAM_CLASS.to_string())
}

/// The Gateway's ManifestWorks (one per cluster it is, or was, placed on).
pub fn works_of(gateway: &Gateway, ctx: &PlacementContext) -> Vec<Arc<ManifestWork>> {
    let label = gateway_label(
        &gateway.namespace().unwrap_or_default(),
        &gateway.name_any(),
    );
    ctx.caches
        .works
        .state()
        .into_iter()
        .filter(|work| work.labels().get(GATEWAY_WORK_LABEL) == Some(&label))
        .collect()
}
