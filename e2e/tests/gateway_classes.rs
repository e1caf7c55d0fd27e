//! A mixed fleet behind one hub Gateway: each spoke's downstream Gateway takes the class of the
//! implementation that spoke runs. The fleet's class comes from the hub GatewayClass's
//! parameters (none here: `istio`); a ManagedCluster's label `meridian.dev/downstream-gateway-class`
//! (the admin's word) or its ClusterClaim `gatewayclass.meridian.dev` (the spoke's, as OCM's
//! registration agent reports it) names another for that cluster alone. OCM's work agent
//! applies each spoke's Gateway, so what is asserted is what landed on the spokes.

use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use meridian_api::upstream::{Gateway, ManagedCluster};
use meridian_e2e::example::{GATEWAY, NAMESPACE, install, with_example_spokes};
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, eventually, has_event};
use meridian_hub::run_command::{RunArgs, RunningHub};
use serde_json::json;

const LABEL: &str = "meridian.dev/downstream-gateway-class";
const CLAIM: &str = "gatewayclass.meridian.dev";

/// Waits until the downstream Gateway on `spoke` has class `class`.
async fn class_on(fleet: &Fleet, spoke: &str, class: &str) -> Result<(), Error> {
    let gateways: Api<Gateway> = Api::namespaced(
        fleet.spoke(spoke).client(),
        &format!("kuadrant-{NAMESPACE}"),
    );
    eventually(
        &format!("{spoke}'s Gateway has class {class}"),
        DEFAULT_PATIENCE,
        || async {
            Ok(gateways
                .get_opt(GATEWAY)
                .await?
                .filter(|g| g.spec.gateway_class_name == class)
                .map(drop))
        },
    )
    .await
}

async fn label(hub: &Client, cluster: &str, class: Option<&str>) -> Result<(), Error> {
    Api::<ManagedCluster>::all(hub.clone())
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": { LABEL: class } } })),
        )
        .await?;
    Ok(())
}

/// Reports a ClusterClaim on `cluster`, as the spoke's registration agent would.
async fn claim(hub: &Client, cluster: &str, class: &str) -> Result<(), Error> {
    Api::<ManagedCluster>::all(hub.clone())
        .patch_status(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "status": { "clusterClaims": [
                { "name": "id.k8s.io", "value": cluster },
                { "name": CLAIM, "value": class },
            ] } })),
        )
        .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_spoke_gets_the_gateway_class_it_runs() -> Result<(), Error> {
    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    let hub = fleet.hub.client();
    // spoke-2 runs Envoy Gateway (its admin's label); spoke-3 runs Traefik (its own claim).
    label(&hub, "spoke-2", Some("eg")).await?;
    claim(&hub, "spoke-3", "traefik").await?;
    install(&hub).await?;
    let running = RunningHub::start(&RunArgs::local(fleet.hub.kubeconfig_path()))
        .await
        .expect("the hub starts");
    class_on(&fleet, "spoke-1", "istio").await?;
    class_on(&fleet, "spoke-2", "eg").await?;
    class_on(&fleet, "spoke-3", "traefik").await?;

    // A claim that names no class is not used: that spoke falls back to the fleet's class,
    // with a warning on the hub Gateway, and no other spoke changes.
    assert!(!has_event(&hub, NAMESPACE, "InvalidDownstreamClass").await?);
    claim(&hub, "spoke-3", "Traefik Proxy").await?;
    class_on(&fleet, "spoke-3", "istio").await?;
    eventually("a warning names the claim", DEFAULT_PATIENCE, || async {
        Ok(has_event(&hub, NAMESPACE, "InvalidDownstreamClass")
            .await?
            .then_some(()))
    })
    .await?;
    class_on(&fleet, "spoke-2", "eg").await?;

    // The admin's label wins over the spoke's claim, and moves the spoke's Gateway with it.
    claim(&hub, "spoke-3", "traefik").await?;
    class_on(&fleet, "spoke-3", "traefik").await?;
    label(&hub, "spoke-3", Some("eg")).await?;
    class_on(&fleet, "spoke-3", "eg").await?;
    label(&hub, "spoke-2", None).await?;
    class_on(&fleet, "spoke-2", "istio").await?;
    class_on(&fleet, "spoke-1", "istio").await?;
    // The downstream namespace stays put throughout (the work changed the Gateway in place).
    let namespace = Api::<Namespace>::all(fleet.spoke("spoke-3").client())
        .get(&format!("kuadrant-{NAMESPACE}"))
        .await?;
    assert!(namespace.metadata.deletion_timestamp.is_none());
    running.stop().await;
    Ok(())
}
