//! Open Cluster Management in the test bed: spokes registered as ManagedClusters on the hub,
//! OCM's own work agent per spoke and placement controller on the hub.
//!
//! Registration is done directly (namespace + accepted ManagedCluster) instead of by OCM's
//! registration agent: its CSR approval and hub-kubeconfig bootstrap add nothing Meridian
//! depends on, and the work agent only needs the cluster namespace and a hub kubeconfig.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;

use crate::ports::free_loopback_port;
use crate::process::ManagedProcess;
use crate::{ControlPlane, Error, FIELD_MANAGER, TestBedAssets};

/// Namespace the OCM agents run in on a spoke (their events and leases go here).
pub const AGENT_NAMESPACE: &str = "open-cluster-management-agent";
/// Namespace the OCM hub controllers run in.
pub const HUB_NAMESPACE: &str = "open-cluster-management-hub";

/// The OCM kinds the test bed and the tests touch, as dynamic API resources.
#[derive(Debug, Clone, Copy)]
pub struct OcmDynamicApis;

impl OcmDynamicApis {
    pub fn managed_cluster() -> ApiResource {
        resource(
            "cluster.open-cluster-management.io",
            "v1",
            "ManagedCluster",
            "managedclusters",
        )
    }
    pub fn managed_cluster_set() -> ApiResource {
        resource(
            "cluster.open-cluster-management.io",
            "v1beta2",
            "ManagedClusterSet",
            "managedclustersets",
        )
    }
    pub fn managed_cluster_set_binding() -> ApiResource {
        resource(
            "cluster.open-cluster-management.io",
            "v1beta2",
            "ManagedClusterSetBinding",
            "managedclustersetbindings",
        )
    }
    pub fn placement() -> ApiResource {
        resource(
            "cluster.open-cluster-management.io",
            "v1beta1",
            "Placement",
            "placements",
        )
    }
    pub fn placement_decision() -> ApiResource {
        resource(
            "cluster.open-cluster-management.io",
            "v1beta1",
            "PlacementDecision",
            "placementdecisions",
        )
    }
    pub fn manifest_work() -> ApiResource {
        resource(
            "work.open-cluster-management.io",
            "v1",
            "ManifestWork",
            "manifestworks",
        )
    }
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.to_string(),
        version: version.to_string(),
        api_version: format!("{group}/{version}"),
        kind: kind.to_string(),
        plural: plural.to_string(),
    }
}

/// Server-side applies a namespace (no-op when it exists).
pub async fn ensure_namespace(client: &Client, name: &str) -> Result<(), Error> {
    let namespace: Namespace = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": { "name": name },
    }))
    .expect("static namespace");
    Api::<Namespace>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&namespace),
        )
        .await?;
    Ok(())
}

/// Makes `cluster_name` a managed cluster of the hub: its cluster namespace and an accepted
/// ManagedCluster carrying `labels` (geo codes, cluster-set membership, …).
pub async fn register_managed_cluster(
    hub: &Client,
    cluster_name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), Error> {
    ensure_namespace(hub, cluster_name).await?;
    let resource = OcmDynamicApis::managed_cluster();
    let managed_cluster: DynamicObject = serde_json::from_value(json!({
        "apiVersion": resource.api_version,
        "kind": resource.kind,
        "metadata": { "name": cluster_name, "labels": labels },
        "spec": { "hubAcceptsClient": true },
    }))
    .expect("static ManagedCluster");
    Api::<DynamicObject>::all_with(hub.clone(), &resource)
        .patch(
            cluster_name,
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(&managed_cluster),
        )
        .await?;
    Ok(())
}

/// OCM's work agent for `spoke`, pulling ManifestWorks from its cluster namespace on `hub`.
pub(crate) async fn start_work_agent(
    assets: &TestBedAssets,
    hub: &ControlPlane,
    spoke: &ControlPlane,
) -> Result<ManagedProcess, Error> {
    ensure_namespace(&spoke.client(), AGENT_NAMESPACE).await?;
    let args = vec![
        "agent".to_string(),
        format!("--spoke-cluster-name={}", spoke.name()),
        format!("--agent-id={}", spoke.name()),
        format!("--hub-kubeconfig={}", hub.kubeconfig_path().display()),
        // The "kube" workload source reads ManifestWorks through this file, not --hub-kubeconfig.
        format!(
            "--workload-source-config={}",
            hub.kubeconfig_path().display()
        ),
        format!("--spoke-kubeconfig={}", spoke.kubeconfig_path().display()),
        format!("--kubeconfig={}", spoke.kubeconfig_path().display()),
        format!("--namespace={AGENT_NAMESPACE}"),
        format!("--listen=127.0.0.1:{}", free_loopback_port()?),
        "--disable-leader-election".to_string(),
    ];
    let log = spoke.dir().join("ocm-work-agent.log");
    ManagedProcess::spawn(
        format!("{}/ocm-work-agent", spoke.name()),
        &assets.ocm_work,
        &args,
        &log,
    )
}

/// OCM's placement controller on `hub`, turning Placements into PlacementDecisions.
pub(crate) async fn start_placement_controller(
    assets: &TestBedAssets,
    hub: &ControlPlane,
) -> Result<ManagedProcess, Error> {
    ensure_namespace(&hub.client(), HUB_NAMESPACE).await?;
    let args = vec![
        "controller".to_string(),
        format!("--kubeconfig={}", hub.kubeconfig_path().display()),
        format!("--namespace={HUB_NAMESPACE}"),
        format!("--listen=127.0.0.1:{}", free_loopback_port()?),
        "--disable-leader-election".to_string(),
    ];
    let log = hub.dir().join("ocm-placement.log");
    ManagedProcess::spawn(
        format!("{}/ocm-placement", hub.name()),
        &assets.ocm_placement,
        &args,
        &log,
    )
}
