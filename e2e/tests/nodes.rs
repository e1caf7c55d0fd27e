//! A control plane with a real node: pods are scheduled, get sandboxes and addresses from the
//! node's bridge, reach their API server through in-cluster configuration's address, and
//! teardown leaves no process, mount, interface or cgroup behind.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{ListParams, Patch, PatchParams};
use meridian_e2e::node::PAUSE_IMAGE;
use meridian_e2e::{
    ControlPlane, DEFAULT_PATIENCE, Error, FIELD_MANAGER, NodeAssets, TestBedAssets, eventually,
};
use serde_json::json;

#[tokio::test]
async fn a_node_runs_pods_and_its_teardown_leaves_nothing() -> Result<(), Error> {
    let assets = TestBedAssets::locate()?;
    let node_assets = NodeAssets::locate()?;
    let control_plane =
        ControlPlane::start_with_node("node-test", &assets, &node_assets, &[]).await?;
    let node = control_plane.node().expect("started with a node");
    let address = node.address();
    assert_eq!(
        control_plane.server_url(),
        format!("https://{address}:443"),
        "the API server listens where in-cluster configuration points"
    );

    // Two pods of the sandbox image itself: scheduled, started, given bridge addresses.
    let client = control_plane.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": { "name": "sleepers", "namespace": "default" },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "sleepers" } },
            "template": {
                "metadata": { "labels": { "app": "sleepers" } },
                "spec": { "containers": [{ "name": "sleep", "image": PAUSE_IMAGE, "imagePullPolicy": "Never" }] },
            },
        },
    });
    deployments
        .patch(
            "sleepers",
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&deployment),
        )
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let running = eventually("two pods running", DEFAULT_PATIENCE, || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels("app=sleepers"))
                .await?;
            let ips: Vec<String> = list
                .items
                .iter()
                .filter(|pod| {
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .filter_map(|pod| pod.status.as_ref()?.pod_ip.clone())
                .collect();
            Ok((ips.len() == 2).then_some(ips))
        }
    })
    .await?;
    let [_, _, slot, _] = address.octets();
    for ip in &running {
        assert!(
            ip.starts_with(&format!("10.251.{slot}.")),
            "pod address {ip} is on the node's pod bridge"
        );
    }

    // The `kubernetes` Service's cluster address is the API server's own.
    let service = Api::<k8s_openapi::api::core::v1::Service>::namespaced(client, "default")
        .get("kubernetes")
        .await?;
    assert_eq!(
        service.spec.and_then(|s| s.cluster_ip).as_deref(),
        Some(address.to_string().as_str())
    );

    let footprint = node.footprint();
    assert!(
        footprint.pids.len() >= 4 + 2,
        "containerd, kubelet, scheduler, controller manager and a shim per pod: {:?}",
        footprint.pids
    );
    println!(
        "node ready {:.1} s after containerd started; control plane + node resident: {} MiB",
        node.start_time().as_secs_f64(),
        control_plane.resident_memory_bytes() / (1 << 20)
    );
    drop(control_plane);
    eventually(
        "the node leaves nothing behind",
        Duration::from_secs(30),
        || {
            let remains = footprint.remains();
            async move {
                if remains.is_empty() {
                    Ok(Some(()))
                } else {
                    tracing::info!(?remains, "still there");
                    Ok(None)
                }
            }
        },
    )
    .await
    .map_err(|e| Error::Component(format!("{e}; left behind: {:?}", footprint.remains())))?;
    Ok(())
}
