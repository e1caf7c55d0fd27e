//! Labels and annotations Meridian reads or writes.

/// ManagedCluster label holding the cluster's geo code (`IE`, `US`, or a continent `GEO-EU`).
pub const GEO_CODE_LABEL: &str = "kuadrant.io/lb-attribute-geo-code";

/// Prefix of the ManagedCluster labels a custom weight's `{attribute, value}` shorthand matches:
/// `kuadrant.io/lb-attribute-<attribute>: <value>`.
pub const LB_ATTRIBUTE_LABEL_PREFIX: &str = "kuadrant.io/lb-attribute-";

/// The attribute a custom weight entry means when it names none.
pub const DEFAULT_WEIGHT_ATTRIBUTE: &str = "custom-weight";

/// Label on a hub Gateway naming the OCM Placement that decides its clusters, and on each
/// PlacementDecision naming the Placement it belongs to.
pub const PLACEMENT_LABEL: &str = "cluster.open-cluster-management.io/placement";

/// Label that makes a ManagedCluster a member of a ManagedClusterSet.
pub const CLUSTER_SET_LABEL: &str = "cluster.open-cluster-management.io/clusterset";

/// The attribute a failover priority entry means when it names none:
/// `kuadrant.io/lb-attribute-tier`.
pub const DEFAULT_TIER_ATTRIBUTE: &str = "tier";

/// ManagedCluster label marking a cluster for drain (`kubectl label managedcluster NAME
/// meridian.dev/drain=true`): its traffic moves away in TTL-sized steps, and back the same
/// way when the label goes. Any value but `false` drains.
pub const DRAIN_LABEL: &str = "meridian.dev/drain";

/// Label on the agents' heartbeat Leases, so the hub watches those and no others.
pub const HEARTBEAT_LABEL: &str = "meridian.dev/heartbeat";

/// The label key a custom weight's `{attribute, value}` shorthand stands for.
pub fn lb_attribute_label(attribute: Option<&str>) -> String {
    format!(
        "{LB_ATTRIBUTE_LABEL_PREFIX}{}",
        attribute.unwrap_or(DEFAULT_WEIGHT_ATTRIBUTE)
    )
}

/// Label on the DNSRecord holding a zone's delegation to its routing delegate (NS and glue);
/// its value is the zone's name. The record is named [`routing_delegation_record`].
pub const ROUTING_DELEGATE_LABEL: &str = "meridian.dev/routing-delegate";

/// The name of the DNSRecord holding `zone`'s delegation to its routing delegate.
pub fn routing_delegation_record(zone: &str) -> String {
    format!("{zone}{ROUTING_DELEGATION_SUFFIX}")
}

/// The zone whose delegation a DNSRecord named `record` would hold (by name alone: whether it
/// is that zone's is for its label to say).
pub fn routing_delegation_zone(record: &str) -> Option<&str> {
    record
        .strip_suffix(ROUTING_DELEGATION_SUFFIX)
        .filter(|zone| !zone.is_empty())
}

const ROUTING_DELEGATION_SUFFIX: &str = "-routing-delegate";

/// Label on ManifestWorks naming the hub Gateway they place (`<namespace>.<name>`, shortened
/// past 63 characters).
pub const GATEWAY_WORK_LABEL: &str = "meridian.dev/gateway";

/// Label on the ManifestWorks that bundle a cluster's hub Gateways (`meridian-gateways`,
/// `meridian-gateways-1`, …): one work per cluster instead of one per Gateway and cluster.
/// Its value is `true`; which Gateways a bundle holds is in [`GATEWAY_BUNDLE_ENTRIES`].
pub const GATEWAY_BUNDLE_LABEL: &str = "meridian.dev/gateway-bundle";

/// Annotation on a bundle: a JSON object from each Gateway's work label ([`GATEWAY_WORK_LABEL`]'s
/// value) to its [`BundleEntry`].
pub const GATEWAY_BUNDLE_ENTRIES: &str = "meridian.dev/gateways";

/// One hub Gateway in a bundle: which it is, which of the bundle's manifests are its, and since
/// when it is leaving the cluster (it left the placement, or was deleted), if it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleEntry {
    /// `<namespace>/<name>` of the hub Gateway.
    pub gateway: String,
    /// Its manifests, as `<kind>/<namespace>/<name>` (a manifest two Gateways share, their
    /// downstream Namespace or a TLS Secret, is in the bundle once and in both lists).
    pub manifests: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leaving_since: Option<String>,
}

/// The entries of a bundle, from its annotations; none when it has no readable list.
pub fn bundle_entries(
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> std::collections::BTreeMap<String, BundleEntry> {
    annotations
        .and_then(|a| a.get(GATEWAY_BUNDLE_ENTRIES))
        .and_then(|json| serde_json::from_str(json).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shorthand_attribute_maps_to_its_label() {
        assert_eq!(
            lb_attribute_label(None),
            "kuadrant.io/lb-attribute-custom-weight"
        );
        assert_eq!(
            lb_attribute_label(Some("cloud")),
            "kuadrant.io/lb-attribute-cloud"
        );
    }

    #[test]
    fn a_delegation_records_name_leads_back_to_its_zone() {
        for zone in ["example", "a-routing-delegate", "x"] {
            let record = routing_delegation_record(zone);
            assert_eq!(routing_delegation_zone(&record), Some(zone), "{record}");
        }
        for record in ["example", "-routing-delegate", "example-routing-delegates"] {
            assert_eq!(routing_delegation_zone(record), None, "{record}");
        }
    }
}
