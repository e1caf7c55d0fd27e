//! The GEO/weighted record tree the engine's, the providers' and the nameserver's tests publish:
//! one Gateway, one way to place a cluster, one policy. A change to the tree's rules then shows
//! in every test that serves or writes it, not in one hand-written copy of three.

use meridian_dns::model::Endpoint;
use meridian_dns::tree::{
    Address, ClusterTarget, CustomWeight, GatewayRef, LabelSelector, LoadBalancing, Strategy,
    build_record_tree,
};

/// The label a cluster's GEO code is read from.
pub const GEO_LABEL: &str = "kuadrant.io/lb-attribute-geo-code";
/// The label the trees' custom weight selects on.
pub const CLOUD_LABEL: &str = "kuadrant.io/lb-attribute-cloud";

/// The Gateway every test tree is built for.
pub fn gateway() -> GatewayRef {
    GatewayRef {
        name: "prod-web".into(),
        namespace: "gateways".into(),
    }
}

/// Cluster `c{n}` (ID `test-cluster-{n}`) with `labels`, serving `addresses`; an address that is
/// not an IP is a hostname.
pub fn cluster(n: u32, labels: &[(&str, &str)], addresses: &[&str]) -> ClusterTarget {
    ClusterTarget {
        name: format!("c{n}"),
        cluster_id: format!("test-cluster-{n}"),
        labels: labels
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()))
            .collect(),
        addresses: addresses
            .iter()
            .map(|address| {
                let kind = match address.parse::<std::net::IpAddr>() {
                    Ok(_) => "IPAddress",
                    Err(_) => "Hostname",
                };
                Address::parse(Some(kind), address).expect("a test address parses")
            })
            .collect(),
        attached_routes: None,
        weight_percent: 100,
    }
}

/// Cluster `c{n}` in `geo`, on `cloud`, serving one address.
pub fn cluster_on(n: u32, geo: &str, cloud: &str, address: &str) -> ClusterTarget {
    cluster(n, &[(GEO_LABEL, geo), (CLOUD_LABEL, cloud)], &[address])
}

/// Three clusters at `addresses`: c1 in IE, c2 in the US and c3 in GEO-EU (a GEO group, not a
/// country), so a GEO tree has a country, another country and a group, each of one cluster.
pub fn three_clusters(addresses: [&str; 3]) -> Vec<ClusterTarget> {
    let [ie, us, eu] = addresses;
    vec![
        cluster(1, &[(GEO_LABEL, "IE")], &[ie]),
        cluster(2, &[(GEO_LABEL, "US")], &[us]),
        cluster(3, &[(GEO_LABEL, "GEO-EU")], &[eu]),
    ]
}

/// Four clusters: two in IE (one of them on Azure), one in the US, and one in GEO-EU behind a
/// hostname, so a GEO tree has a weighted group of two, groups of one, and a CNAME leaf.
pub fn four_clusters() -> Vec<ClusterTarget> {
    vec![
        cluster_on(1, "IE", "Azure", "192.0.2.1"),
        cluster_on(2, "US", "AWS", "192.0.2.2"),
        cluster_on(4, "IE", "AWS", "192.0.2.4"),
        cluster_on(3, "GEO-EU", "AWS", "lb-3.elb.example.net"),
    ]
}

/// Weights alone: every cluster weighs `default_weight`, no GEO default, no tiers.
pub fn weighted(default_weight: u32) -> LoadBalancing {
    LoadBalancing {
        default_weight,
        custom: Vec::new(),
        default_geo: None,
        tiers: None,
    }
}

/// The trees' policy: GEO answers with IE as the catch-all, every cluster weighing 120.
pub fn geo_policy() -> Strategy {
    Strategy::LoadBalanced(LoadBalancing {
        default_geo: Some("IE".into()),
        ..weighted(120)
    })
}

/// [`geo_policy`], with clusters on Azure weighing `azure_weight`: a change of it is one
/// weight changed in the tree.
pub fn geo_policy_weighing_azure(azure_weight: u32) -> Strategy {
    let azure = LabelSelector {
        match_labels: [(CLOUD_LABEL.into(), "Azure".into())].into(),
        ..Default::default()
    };
    Strategy::LoadBalanced(LoadBalancing {
        custom: vec![CustomWeight {
            selector: azure,
            weight: azure_weight,
        }],
        default_geo: Some("IE".into()),
        ..weighted(120)
    })
}

/// The records of `host`'s tree for `clusters` on [`gateway`].
pub fn tree(host: &str, strategy: &Strategy, clusters: &[ClusterTarget]) -> Vec<Endpoint> {
    build_record_tree(host, &gateway(), strategy, clusters)
        .expect("a test tree builds")
        .endpoints()
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_dns::model::RecordType;

    #[test]
    fn the_four_cluster_tree_has_a_weighted_group_single_groups_and_a_cname_leaf() {
        let records = tree(
            "api.example.com",
            &geo_policy_weighing_azure(30),
            &four_clusters(),
        );
        let ie_weights: Vec<&str> = records
            .iter()
            .filter(|r| r.dns_name == "ie.klb.api.example.com")
            .filter_map(|r| r.property("weight"))
            .collect();
        assert_eq!(ie_weights.len(), 2, "{records:#?}");
        assert!(ie_weights.contains(&"30") && ie_weights.contains(&"120"));
        assert!(
            records.iter().any(
                |r| r.record_type == RecordType::Cname && r.targets == ["lb-3.elb.example.net"]
            ),
            "the hostname cluster's leaf is a CNAME"
        );
    }
}
