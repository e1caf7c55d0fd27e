//! The test bed gathers the upstream CRDs Meridian works with, in the form it can serve: Gateway
//! API standard channel, OCM cluster/work/addon (addon in its v1alpha1-only form, because the
//! v1beta1 files need a conversion webhook), and OpenShift's Route.

use std::collections::BTreeMap;

use meridian_e2e::{TestBedAssets, load_crds};

#[test]
fn upstream_crds_cover_the_kinds_meridian_uses() {
    let assets = TestBedAssets::locate().expect("run `make testbed` first");
    let crds = load_crds(&assets.upstream_crds).expect("upstream CRDs parse");
    let versions: BTreeMap<String, Vec<String>> = crds
        .iter()
        .map(|crd| {
            let served = crd
                .spec
                .versions
                .iter()
                .filter(|v| v.served)
                .map(|v| v.name.clone());
            (crd.metadata.name.clone().unwrap(), served.collect())
        })
        .collect();

    for name in [
        "gatewayclasses.gateway.networking.k8s.io",
        "gateways.gateway.networking.k8s.io",
        "httproutes.gateway.networking.k8s.io",
        "managedclusters.cluster.open-cluster-management.io",
        "managedclustersets.cluster.open-cluster-management.io",
        "managedclustersetbindings.cluster.open-cluster-management.io",
        "placements.cluster.open-cluster-management.io",
        "placementdecisions.cluster.open-cluster-management.io",
        "manifestworks.work.open-cluster-management.io",
        "appliedmanifestworks.work.open-cluster-management.io",
        "clustermanagementaddons.addon.open-cluster-management.io",
        "managedclusteraddons.addon.open-cluster-management.io",
        "routes.route.openshift.io",
    ] {
        assert!(
            versions.contains_key(name),
            "missing {name}; have {:?}",
            versions.keys()
        );
    }
    assert_eq!(
        versions["managedclusteraddons.addon.open-cluster-management.io"],
        ["v1alpha1"]
    );
    assert_eq!(versions["routes.route.openshift.io"], ["v1"]);
    assert!(versions["gateways.gateway.networking.k8s.io"].contains(&"v1".to_string()));
    // Standard channel only: no experimental kinds such as TCPRoute.
    assert!(!versions.contains_key("tcproutes.gateway.networking.k8s.io"));
    // No conversion webhooks: every CRD the test bed installs must be servable without one.
    for crd in &crds {
        let strategy = crd.spec.conversion.as_ref().map(|c| c.strategy.as_str());
        assert_ne!(
            strategy,
            Some("Webhook"),
            "{:?} needs a webhook",
            crd.metadata.name
        );
    }
}
