//! What placing a Gateway reads, all from the shared caches.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use meridian_api::labels::{GATEWAY_WORK_LABEL, PLACEMENT_LABEL};
use meridian_api::upstream::{Gateway, GatewayClass, ManifestWork, PlacementDecision};

use super::PlacementContext;
use crate::placement::{DEFAULT_DOWNSTREAM_CLASS, gateway_label, tls_secret_names};
use meridian_controllers::decide::listener_sets::{self, SetListener};
use meridian_controllers::runtime::indexes;

/// What the caches say about one hub Gateway.
pub struct Seen {
    /// The clusters its Placement decided that are still in OCM.
    pub placed: BTreeSet<String>,
    /// Its Placement has no PlacementDecision at all: OCM has not decided yet (it writes one,
    /// empty if need be, for every Placement it schedules), or the Placement is gone. Not
    /// evidence that any cluster left.
    pub undecided: bool,
    /// The class the downstream copies take unless their cluster names its own.
    pub downstream_class: String,
    /// The TLS Secrets its listeners name that exist.
    pub tls_secrets: Vec<Secret>,
    /// The listeners the ListenerSets it admits add, copied beside it.
    pub set_listeners: Vec<SetListener>,
    /// Whether ListenerSets can be read: while not, a work's copies are no evidence of what
    /// exists, and its works stay as they are.
    pub sets_readable: bool,
}

pub fn gather(gateway: &Gateway, ctx: &PlacementContext) -> Seen {
    let caches = &ctx.caches;
    let namespace = gateway.namespace().unwrap_or_default();
    let placement = gateway.labels().get(PLACEMENT_LABEL).map(String::as_str);
    let decisions = placement
        .map(|placement| {
            caches
                .decisions
                .group(&indexes::group_key(&namespace, placement))
        })
        .unwrap_or_default();
    let (decided, undecided) = decided(&namespace, placement, &decisions);
    // A cluster gone from OCM gets no work.
    let placed = decided
        .into_iter()
        .filter(|cluster| caches.clusters.get(None, cluster).is_some())
        .collect();
    let class = caches
        .gateway_classes
        .get(None, &gateway.spec.gateway_class_name);
    let downstream_class = downstream_class(class.as_deref(), ctx);
    let set_listeners = listener_sets::attached(
        gateway,
        &caches
            .listener_sets
            .group(&indexes::group_key(&namespace, &gateway.name_any())),
    )
    .listeners;
    let tls_secrets = tls_secret_names(gateway, &set_listeners)
        .iter()
        .filter_map(|secret| caches.secrets.get(Some(&namespace), secret))
        .map(|secret| (*secret).clone())
        .collect();
    Seen {
        placed,
        undecided,
        downstream_class,
        tls_secrets,
        set_listeners,
        sets_readable: caches.listener_sets.readable(),
    }
}

/// The clusters the Gateway's Placement (`placement`, its label) decided, and whether the
/// Placement is undecided: named, with no PlacementDecision at all. A Gateway without the label
/// is placed nowhere, which is decided.
fn decided(
    namespace: &str,
    placement: Option<&str>,
    decisions: &[Arc<PlacementDecision>],
) -> (BTreeSet<String>, bool) {
    let Some(placement) = placement else {
        return (BTreeSet::new(), false);
    };
    let of_placement: Vec<Arc<PlacementDecision>> = decisions
        .iter()
        .filter(|d| {
            d.namespace().as_deref() == Some(namespace)
                && d.labels().get(PLACEMENT_LABEL).map(String::as_str) == Some(placement)
        })
        .cloned()
        .collect();
    (
        indexes::decided_clusters(&of_placement, namespace, placement),
        of_placement.is_empty(),
    )
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

/// The multi-cluster Gateways whose Placement chose `cluster` (through the decisions grouped
/// under it), but those being deleted.
pub fn placed_on(cluster: &str, ctx: &PlacementContext) -> Vec<Arc<Gateway>> {
    let caches = &ctx.caches;
    let placements: BTreeSet<indexes::PlacementKey> = caches
        .decisions
        .group(&indexes::cluster_group(cluster))
        .iter()
        .filter_map(|decision| indexes::placement_of(decision))
        .collect();
    placements
        .iter()
        .flat_map(|(namespace, placement)| {
            caches
                .gateways
                .group(&indexes::group_key(namespace, placement))
        })
        .filter(|gateway| {
            super::is_multi_cluster(gateway) && gateway.metadata.deletion_timestamp.is_none()
        })
        .collect()
}

/// The Gateway's own ManifestWorks (earlier hubs wrote one per cluster it was placed on; the
/// bundles holding it are not among them).
pub fn works_of(gateway: &Gateway, ctx: &PlacementContext) -> Vec<Arc<ManifestWork>> {
    let label = gateway_label(
        &gateway.namespace().unwrap_or_default(),
        &gateway.name_any(),
    );
    let mut works = ctx.caches.works.group(&label);
    works.retain(|work| work.labels().get(GATEWAY_WORK_LABEL) == Some(&label));
    works
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(namespace: &str, placement: &str, clusters: &[&str]) -> Arc<PlacementDecision> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                "kind": "PlacementDecision",
                "metadata": {
                    "name": format!("{placement}-decision-1"), "namespace": namespace,
                    "labels": { PLACEMENT_LABEL: placement },
                },
                "status": { "decisions": clusters.iter()
                    .map(|c| serde_json::json!({ "clusterName": c, "reason": "" }))
                    .collect::<Vec<_>>() },
            }))
            .expect("a PlacementDecision"),
        )
    }

    #[test]
    fn only_a_placement_with_no_decision_at_all_is_undecided() {
        let placed = |clusters: &[&str]| clusters.iter().map(|c| c.to_string()).collect();
        // The Placement, its decisions, and what they decide: the clusters, whether undecided.
        type Case<'a> = (
            Option<&'a str>,
            Vec<Arc<PlacementDecision>>,
            BTreeSet<String>,
            bool,
        );
        let cases: [Case; 6] = [
            // No label: placed nowhere, and that is a decision.
            (
                None,
                vec![decision("shop", "everywhere", &["spoke-1"])],
                placed(&[]),
                false,
            ),
            // OCM has not written the Placement's decision yet (or the Placement is gone).
            (Some("everywhere"), vec![], placed(&[]), true),
            // Another Placement's decision, or the same name in another namespace, is not its.
            (
                Some("everywhere"),
                vec![decision("shop", "elsewhere", &["spoke-1"])],
                placed(&[]),
                true,
            ),
            (
                Some("everywhere"),
                vec![decision("other", "everywhere", &["spoke-1"])],
                placed(&[]),
                true,
            ),
            // OCM decided no cluster: the clusters left.
            (
                Some("everywhere"),
                vec![decision("shop", "everywhere", &[])],
                placed(&[]),
                false,
            ),
            (
                Some("everywhere"),
                vec![decision("shop", "everywhere", &["spoke-1", "spoke-2"])],
                placed(&["spoke-1", "spoke-2"]),
                false,
            ),
        ];
        for (placement, decisions, clusters, undecided) in cases {
            assert_eq!(
                decided("shop", placement, &decisions),
                (clusters, undecided),
                "{placement:?} {decisions:?}"
            );
        }
    }
}
