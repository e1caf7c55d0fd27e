//! OCM's own agents in the test bed: the work agent applies a ManifestWork on its spoke, and the
//! placement controller turns a Placement bound to a ManagedClusterSet into PlacementDecisions.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams};
use kube::{Api, Client};
use meridian_e2e::{
    ControlPlane, DEFAULT_PATIENCE, Error, Fleet, FleetBuilder, HUB_NAMESPACE, OcmDynamicApis,
    TestBedAssets, ensure_namespace, eventually, managed_cluster_condition,
    placement_controller_args, spawn_serving,
};
use serde_json::json;

const CLUSTER_SET: &str = "meridian";
const CLUSTER_SET_LABEL: &str = "cluster.open-cluster-management.io/clusterset";
const GEO_LABEL: &str = "kuadrant.io/lb-attribute-geo-code";
const PLACEMENT_LABEL: &str = "cluster.open-cluster-management.io/placement";

async fn apply(
    client: &Client,
    namespace: Option<&str>,
    object: serde_json::Value,
) -> Result<(), Error> {
    let object: DynamicObject = serde_json::from_value(object).expect("valid object");
    let types = object
        .types
        .clone()
        .expect("object has apiVersion and kind");
    let resource = [
        OcmDynamicApis::managed_cluster_set(),
        OcmDynamicApis::managed_cluster_set_binding(),
        OcmDynamicApis::placement(),
        OcmDynamicApis::manifest_work(),
    ]
    .into_iter()
    .find(|resource| resource.kind == types.kind)
    .expect("a known OCM kind");
    let api: Api<DynamicObject> = match namespace {
        Some(namespace) => Api::namespaced_with(client.clone(), namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    let name = object.metadata.name.clone().expect("object has a name");
    api.patch(
        &name,
        &PatchParams::apply("ocm-test"),
        &Patch::Apply(&object),
    )
    .await?;
    Ok(())
}

/// Two spokes in the cluster set, one in Ireland and one in the US.
fn two_spokes(builder: FleetBuilder) -> FleetBuilder {
    builder
        .spoke(
            "spoke-1",
            [(CLUSTER_SET_LABEL, CLUSTER_SET), (GEO_LABEL, "IE")],
        )
        .spoke(
            "spoke-2",
            [(CLUSTER_SET_LABEL, CLUSTER_SET), (GEO_LABEL, "US")],
        )
}

/// `result`, with the OCM processes' logs printed when it failed.
fn with_ocm_logs(fleet: &Fleet, result: Result<(), Error>) -> Result<(), Error> {
    if result.is_err() {
        eprintln!("OCM logs:\n{}", fleet.ocm_logs());
    }
    result
}

#[tokio::test]
async fn ocm_applies_work_and_places_clusters() -> Result<(), Error> {
    let fleet = two_spokes(Fleet::builder()).start().await?;
    let result = async {
        manifest_work_is_applied_on_its_spoke(&fleet).await?;
        placement_decides_the_right_clusters(&fleet).await
    }
    .await;
    with_ocm_logs(&fleet, result)
}

async fn manifest_work_is_applied_on_its_spoke(fleet: &Fleet) -> Result<(), Error> {
    let hub = fleet.hub.client();
    apply(
        &hub,
        Some("spoke-1"),
        json!({
            "apiVersion": "work.open-cluster-management.io/v1",
            "kind": "ManifestWork",
            "metadata": { "name": "hello", "namespace": "spoke-1" },
            "spec": { "workload": { "manifests": [{
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": { "name": "hello-from-hub", "namespace": "default" },
                "data": { "greeting": "hello" },
            }]}},
        }),
    )
    .await?;

    let on_spoke = Api::<ConfigMap>::namespaced(fleet.spoke("spoke-1").client(), "default");
    let config_map = eventually(
        "the ConfigMap to reach spoke-1",
        DEFAULT_PATIENCE,
        || async { Ok(on_spoke.get_opt("hello-from-hub").await?) },
    )
    .await?;
    assert_eq!(
        config_map
            .data
            .unwrap_or_default()
            .get("greeting")
            .map(String::as_str),
        Some("hello")
    );

    let works =
        Api::<DynamicObject>::namespaced_with(hub, "spoke-1", &OcmDynamicApis::manifest_work());
    eventually(
        "the ManifestWork to report Applied",
        DEFAULT_PATIENCE,
        || async {
            let work = works.get("hello").await?;
            let applied = work.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|condition| condition["type"] == "Applied" && condition["status"] == "True");
            Ok(applied.then_some(()))
        },
    )
    .await?;

    // The work was addressed to spoke-1's namespace only.
    let elsewhere = Api::<ConfigMap>::namespaced(fleet.spoke("spoke-2").client(), "default");
    assert!(elsewhere.get_opt("hello-from-hub").await?.is_none());
    Ok(())
}

async fn placement_decides_the_right_clusters(fleet: &Fleet) -> Result<(), Error> {
    let hub = fleet.hub.client();
    let namespace = "gateways";
    ensure_namespace(&hub, namespace).await?;
    apply(
        &hub,
        None,
        json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2",
            "kind": "ManagedClusterSet",
            "metadata": { "name": CLUSTER_SET },
            "spec": { "clusterSelector": { "selectorType": "ExclusiveClusterSetLabel" } },
        }),
    )
    .await?;
    apply(
        &hub,
        Some(namespace),
        json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2",
            "kind": "ManagedClusterSetBinding",
            "metadata": { "name": CLUSTER_SET, "namespace": namespace },
            "spec": { "clusterSet": CLUSTER_SET },
        }),
    )
    .await?;
    for (name, predicates) in [
        ("everywhere", json!([])),
        (
            "ireland",
            json!([{ "requiredClusterSelector": { "labelSelector": { "matchLabels": { GEO_LABEL: "IE" } } } }]),
        ),
    ] {
        apply(
            &hub,
            Some(namespace),
            json!({
                "apiVersion": "cluster.open-cluster-management.io/v1beta1",
                "kind": "Placement",
                "metadata": { "name": name, "namespace": namespace },
                "spec": { "clusterSets": [CLUSTER_SET], "predicates": predicates },
            }),
        )
        .await?;
    }

    let decisions = Api::<DynamicObject>::namespaced_with(
        hub,
        namespace,
        &OcmDynamicApis::placement_decision(),
    );
    for (placement, expected) in [
        ("everywhere", vec!["spoke-1", "spoke-2"]),
        ("ireland", vec!["spoke-1"]),
    ] {
        let expected: BTreeSet<String> = expected.into_iter().map(String::from).collect();
        let decided = eventually(
            &format!("PlacementDecisions for {placement}"),
            DEFAULT_PATIENCE,
            || async {
                let selector = format!("{PLACEMENT_LABEL}={placement}");
                let list = decisions
                    .list(&ListParams::default().labels(&selector))
                    .await?;
                let clusters: BTreeSet<String> = list
                    .items
                    .iter()
                    .flat_map(|decision| {
                        decision.data["status"]["decisions"]
                            .as_array()
                            .cloned()
                            .unwrap_or_default()
                    })
                    .filter_map(|decision| decision["clusterName"].as_str().map(String::from))
                    .filter(|name| !name.is_empty())
                    .collect();
                Ok((clusters == expected).then_some(clusters))
            },
        )
        .await?;
        assert_eq!(decided, expected);
    }
    Ok(())
}

#[tokio::test]
async fn spokes_join_through_ocm_registration_and_work_with_the_credentials_it_issued()
-> Result<(), Error> {
    let fleet = two_spokes(Fleet::builder().with_registration())
        .start()
        .await?;
    let result = async {
        let hub = fleet.hub.client();
        // OCM's own word on each cluster: accepted, joined, and available (its lease renewed
        // by the registration agent).
        for cluster in ["spoke-1", "spoke-2"] {
            for condition in [
                "HubAcceptedManagedCluster",
                "ManagedClusterJoined",
                "ManagedClusterConditionAvailable",
            ] {
                eventually(
                    &format!("{cluster} is {condition}"),
                    DEFAULT_PATIENCE,
                    || async { Ok(managed_cluster_condition(&hub, cluster, condition).await?.then_some(())) },
                )
                .await?;
            }
        }
        // A ClusterClaim made on the spoke reaches its ManagedCluster's status.
        let claims = Api::<DynamicObject>::all_with(
            fleet.spoke("spoke-1").client(),
            &kube::api::ApiResource {
                group: "cluster.open-cluster-management.io".into(),
                version: "v1alpha1".into(),
                api_version: "cluster.open-cluster-management.io/v1alpha1".into(),
                kind: "ClusterClaim".into(),
                plural: "clusterclaims".into(),
            },
        );
        let claim: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.open-cluster-management.io/v1alpha1", "kind": "ClusterClaim",
            "metadata": { "name": "gatewayclass.meridian.dev" },
            "spec": { "value": "eg" },
        }))
        .expect("a ClusterClaim");
        claims
            .patch(
                "gatewayclass.meridian.dev",
                &PatchParams::apply("ocm-test"),
                &Patch::Apply(&claim),
            )
            .await?;
        let clusters =
            Api::<DynamicObject>::all_with(hub.clone(), &OcmDynamicApis::managed_cluster());
        eventually("the claim is reported", DEFAULT_PATIENCE, || async {
            let reported = clusters.get("spoke-1").await?.data["status"]["clusterClaims"]
                .as_array()
                .is_some_and(|claims| {
                    claims
                        .iter()
                        .any(|c| c["name"] == "gatewayclass.meridian.dev" && c["value"] == "eg")
                });
            Ok(reported.then_some(()))
        })
        .await?;

        // The credentials registration issued spoke-1 read its own cluster namespace, not
        // another's; the bootstrap token reads neither.
        let issued = meridian_e2e::client_from_kubeconfig(
            &meridian_e2e::hub_kubeconfig_dir(fleet.spoke("spoke-1")).join("kubeconfig"),
        )
        .await?;
        let works_in = |client: &Client, namespace: &str| {
            Api::<DynamicObject>::namespaced_with(
                client.clone(),
                namespace,
                &OcmDynamicApis::manifest_work(),
            )
        };
        works_in(&issued, "spoke-1")
            .list(&ListParams::default())
            .await?;
        let forbidden = |result: Result<_, kube::Error>| {
            matches!(result, Err(kube::Error::Api(status)) if status.code == 403)
        };
        assert!(forbidden(
            works_in(&issued, "spoke-2").list(&ListParams::default()).await
        ));
        let bootstrap =
            meridian_e2e::client_from_kubeconfig(&fleet.hub.dir().join("bootstrap.kubeconfig"))
                .await?;
        assert!(forbidden(
            works_in(&bootstrap, "spoke-1").list(&ListParams::default()).await
        ));

        // The work agents, reading the hub as registration let them, apply work and follow
        // placement as before.
        manifest_work_is_applied_on_its_spoke(&fleet).await?;
        placement_decides_the_right_clusters(&fleet).await
    }
    .await;
    with_ocm_logs(&fleet, result)
}

/// An OCM component binds its port a second or more after it starts, and exits when someone
/// took it meanwhile: the test bed starts it again on another port and returns it serving. One
/// that exits for another reason fails the start at once, with its log.
#[tokio::test]
async fn an_ocm_component_whose_port_was_taken_starts_again_and_one_that_fails_says_why()
-> Result<(), Error> {
    let assets = TestBedAssets::locate()?;
    let hub = ControlPlane::start("hub", &assets).await?;
    ensure_namespace(&hub.client(), HUB_NAMESPACE).await?;
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback port");
    let taken_port = taken.local_addr().expect("its address").port();
    let ports = std::sync::Mutex::new(Vec::new());
    let placement = |port: u16| {
        // The first start gets the port someone holds.
        let mut given = ports.lock().expect("the ports");
        let port = if given.is_empty() { taken_port } else { port };
        given.push(port);
        placement_controller_args(&hub, port)
    };
    let mut serving = spawn_serving(
        "hub/ocm-placement".into(),
        &assets.ocm_placement,
        placement,
        hub.dir().join("ocm-placement.log"),
    )
    .await?;
    let given = ports.lock().expect("the ports").clone();
    println!("ports given: {given:?}");
    assert_eq!(given.len(), 2, "{given:?}");
    assert_eq!(given[0], taken_port);
    assert_ne!(given[1], taken_port);
    serving.ensure_running()?;
    std::net::TcpStream::connect(("127.0.0.1", given[1])).expect("it serves on the new port");
    drop(taken);

    let refused = spawn_serving(
        "hub/ocm-placement-misconfigured".into(),
        &assets.ocm_placement,
        |port| {
            vec![
                "controller".to_string(),
                "--no-such-flag".to_string(),
                format!("--listen=127.0.0.1:{port}"),
            ]
        },
        hub.dir().join("ocm-placement-misconfigured.log"),
    )
    .await;
    match refused {
        Err(Error::ExitedEarly { log_tail, .. }) => {
            assert!(log_tail.contains("no-such-flag"), "{log_tail}");
        }
        other => panic!("a component that cannot start is reported at once: {other:?}"),
    }
    Ok(())
}
