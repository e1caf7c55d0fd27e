//! Open Cluster Management in the test bed: spokes registered as ManagedClusters on the hub,
//! OCM's own work agent per spoke and placement controller on the hub.
//!
//! Two ways a spoke becomes a ManagedCluster:
//! - written directly (namespace + accepted ManagedCluster, [`register_managed_cluster`]): the
//!   work agent then reads the hub with the test bed's admin credentials. Most tests need no
//!   more, and it costs nothing;
//! - joined as `clusteradm join` and `clusteradm accept` do it ([`RegistrationHub`],
//!   [`join`], [`accept`]): OCM's registration controller on the hub, kube-controller-manager
//!   signing the client certificates the hub approves, a bootstrap ServiceAccount token, and
//!   OCM's registration agent on the spoke, which creates the ManagedCluster and a CSR, keeps
//!   the cluster's lease and reports its ClusterClaims. The work agent then reads the hub with
//!   the credentials registration issued, and ManagedCluster status comes from OCM itself.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use crate::ports::free_loopback_port;
use crate::process::ManagedProcess;
use crate::wait::{DEFAULT_PATIENCE, eventually};
use crate::{ControlPlane, Error, FIELD_MANAGER, NodeAssets, TestBedAssets};

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

/// Puts `labels` on the ManagedCluster `cluster` (the hub admin's part once it joined).
pub async fn label_managed_cluster(
    hub: &Client,
    cluster: &str,
    labels: &BTreeMap<String, String>,
) -> Result<(), Error> {
    Api::<DynamicObject>::all_with(hub.clone(), &OcmDynamicApis::managed_cluster())
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "metadata": { "labels": labels } })),
        )
        .await?;
    Ok(())
}

/// The hub kubeconfig registration issued to `spoke` (its agent writes it once its certificate
/// is signed), for OCM's other agents there.
pub async fn issued_hub_kubeconfig(spoke: &ControlPlane) -> Result<PathBuf, Error> {
    let path = hub_kubeconfig_dir(spoke).join("kubeconfig");
    let cert = hub_kubeconfig_dir(spoke).join("tls.crt");
    eventually(
        &format!("{}'s hub kubeconfig is issued", spoke.name()),
        DEFAULT_PATIENCE,
        || async { Ok((path.exists() && cert.exists()).then(|| path.clone())) },
    )
    .await
}

/// OCM's work agent for `spoke`, pulling ManifestWorks from its cluster namespace on the hub
/// that `hub_kubeconfig` reaches.
pub(crate) async fn start_work_agent(
    assets: &TestBedAssets,
    hub_kubeconfig: &Path,
    spoke: &ControlPlane,
) -> Result<ManagedProcess, Error> {
    ensure_namespace(&spoke.client(), AGENT_NAMESPACE).await?;
    let args = |port| {
        vec![
            "agent".to_string(),
            format!("--spoke-cluster-name={}", spoke.name()),
            format!("--agent-id={}", spoke.name()),
            format!("--hub-kubeconfig={}", hub_kubeconfig.display()),
            // The "kube" workload source reads ManifestWorks through this file, not
            // --hub-kubeconfig.
            format!("--workload-source-config={}", hub_kubeconfig.display()),
            format!("--spoke-kubeconfig={}", spoke.kubeconfig_path().display()),
            format!("--kubeconfig={}", spoke.kubeconfig_path().display()),
            format!("--namespace={AGENT_NAMESPACE}"),
            format!("--listen=127.0.0.1:{port}"),
            "--disable-leader-election".to_string(),
        ]
    };
    spawn_serving(
        format!("{}/ocm-work-agent", spoke.name()),
        &assets.ocm_work,
        args,
        spoke.dir().join("ocm-work-agent.log"),
    )
    .await
}

/// Starts an OCM component (or kube-controller-manager), which serves its health and metrics
/// on the loopback port `args` is given, and waits until it serves. Such a program binds its
/// port a second or more after it starts and exits if it cannot: so a component that dies
/// fails the test bed's start at once with its log, instead of a test waiting minutes for
/// work it will never do, and one whose port was taken meanwhile starts again on another.
pub async fn spawn_serving(
    name: String,
    program: &Path,
    args: impl Fn(u16) -> Vec<String>,
    log: PathBuf,
) -> Result<ManagedProcess, Error> {
    const TRIES: usize = 3;
    for attempt in 1..=TRIES {
        let port = free_loopback_port()?;
        let mut process = ManagedProcess::spawn(name.clone(), program, &args(port), &log)?;
        let serving = format!("Serving securely on 127.0.0.1:{port}");
        let served = eventually(&format!("{name} serves"), DEFAULT_PATIENCE, || {
            std::future::ready(process.ensure_running().map(|()| {
                std::fs::read(&log)
                    .is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains(&serving))
                    .then_some(())
            }))
        })
        .await;
        match served {
            Ok(()) => return Ok(process),
            Err(Error::ExitedEarly { log_tail, .. })
                if attempt < TRIES && log_tail.contains("address already in use") =>
            {
                // The next start truncates the log: what this one said is kept here.
                tracing::warn!(%name, port, %log_tail, "its port was taken before it bound it; starting it again");
            }
            Err(Error::NotReady { what, seconds, .. }) => {
                return Err(Error::NotReady {
                    what,
                    seconds,
                    log_tail: process.log_tail(),
                });
            }
            Err(error) => return Err(error),
        }
    }
    unreachable!("the last try returns")
}

/// The placement controller's arguments for `hub`, serving on `port`.
pub fn placement_controller_args(hub: &ControlPlane, port: u16) -> Vec<String> {
    vec![
        "controller".to_string(),
        format!("--kubeconfig={}", hub.kubeconfig_path().display()),
        format!("--namespace={HUB_NAMESPACE}"),
        format!("--listen=127.0.0.1:{port}"),
        "--disable-leader-election".to_string(),
    ]
}

/// OCM's placement controller on `hub`, turning Placements into PlacementDecisions.
pub(crate) async fn start_placement_controller(
    assets: &TestBedAssets,
    hub: &ControlPlane,
) -> Result<ManagedProcess, Error> {
    ensure_namespace(&hub.client(), HUB_NAMESPACE).await?;
    spawn_serving(
        format!("{}/ocm-placement", hub.name()),
        &assets.ocm_placement,
        |port| placement_controller_args(hub, port),
        hub.dir().join("ocm-placement.log"),
    )
    .await
}

/// Namespace of the bootstrap ServiceAccount joining agents present (`clusteradm init`'s).
pub const BOOTSTRAP_NAMESPACE: &str = "open-cluster-management";
/// The bootstrap ServiceAccount, and the ClusterRole it holds.
const BOOTSTRAP_ACCOUNT: &str = "agent-registration-bootstrap";
const BOOTSTRAP_ROLE: &str = "open-cluster-management:bootstrap";
/// The Secret on a spoke where the registration agent keeps its hub credentials.
pub const HUB_KUBECONFIG_SECRET: &str = "hub-kubeconfig-secret";
/// Label OCM puts on a joining cluster's CSRs.
const CSR_CLUSTER_LABEL: &str = "open-cluster-management.io/cluster-name";

/// The hub's side of OCM registration: the registration controller, a CSR signer, and the
/// bootstrap kubeconfig joining agents present.
#[derive(Debug)]
pub struct RegistrationHub {
    pub processes: Vec<ManagedProcess>,
    /// A kubeconfig holding the bootstrap ServiceAccount's token: what `clusteradm get token`
    /// hands to `clusteradm join`. It may create ManagedClusters and CSRs, nothing else.
    pub bootstrap_kubeconfig: PathBuf,
}

impl RegistrationHub {
    /// Sets up registration on `hub` as `clusteradm init` does, and starts its controllers.
    pub async fn start(assets: &TestBedAssets, hub: &ControlPlane) -> Result<Self, Error> {
        let client = hub.client();
        ensure_namespace(&client, HUB_NAMESPACE).await?;
        ensure_namespace(&client, BOOTSTRAP_NAMESPACE).await?;
        let params = PatchParams::apply(FIELD_MANAGER).force();
        // What a joining agent may do with the bootstrap token, as OCM's bootstrap role has it:
        // ask for a client certificate, create and watch ManagedClusters (and see the CSRs and
        // ManagedClusters of others: OCM's role is that wide), join cluster sets, read
        // ConfigMaps.
        let role: ClusterRole = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": { "name": BOOTSTRAP_ROLE },
            "rules": [
                { "apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"] },
                { "apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
                  "verbs": ["create", "get", "list", "watch"] },
                { "apiGroups": ["cluster.open-cluster-management.io"], "resources": ["managedclusters"],
                  "verbs": ["create", "get", "list", "watch"] },
                { "apiGroups": ["cluster.open-cluster-management.io"], "resources": ["managedclustersets/join"],
                  "verbs": ["create"] },
            ],
        }))
        .expect("a ClusterRole");
        Api::<ClusterRole>::all(client.clone())
            .patch(BOOTSTRAP_ROLE, &params, &Patch::Apply(&role))
            .await?;
        let account: ServiceAccount = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": { "name": BOOTSTRAP_ACCOUNT, "namespace": BOOTSTRAP_NAMESPACE },
        }))
        .expect("a ServiceAccount");
        let accounts = Api::<ServiceAccount>::namespaced(client.clone(), BOOTSTRAP_NAMESPACE);
        accounts
            .patch(BOOTSTRAP_ACCOUNT, &params, &Patch::Apply(&account))
            .await?;
        let binding: ClusterRoleBinding = serde_json::from_value(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": format!("{BOOTSTRAP_ROLE}:{BOOTSTRAP_ACCOUNT}") },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": BOOTSTRAP_ROLE },
            "subjects": [{ "kind": "ServiceAccount", "name": BOOTSTRAP_ACCOUNT, "namespace": BOOTSTRAP_NAMESPACE }],
        }))
        .expect("a ClusterRoleBinding");
        Api::<ClusterRoleBinding>::all(client.clone())
            .patch(&binding.name_any(), &params, &Patch::Apply(&binding))
            .await?;
        let token = accounts
            .create_token_request(
                BOOTSTRAP_ACCOUNT,
                &PostParams::default(),
                &TokenRequest {
                    spec: Some(TokenRequestSpec {
                        expiration_seconds: Some(24 * 3600),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
            )
            .await?
            .status
            .and_then(|status| status.token)
            .unwrap_or_default();
        let bootstrap_kubeconfig = hub.dir().join("bootstrap.kubeconfig");
        let ca = std::fs::read_to_string(hub.dir().join("ca.crt"))
            .map_err(Error::io("reading the hub's CA"))?;
        std::fs::write(
            &bootstrap_kubeconfig,
            meridian_hub::placement::agent_kubeconfig(
                hub.server_url(),
                &ca,
                &token,
                BOOTSTRAP_NAMESPACE,
            ),
        )
        .map_err(Error::io("writing the bootstrap kubeconfig"))?;

        let kubeconfig = hub.kubeconfig_path().display().to_string();
        let kube_controller_manager = NodeAssets::locate()?.kube_controller_manager;
        let (controller, signer, addon_manager) = futures::try_join!(
            spawn_serving(
                format!("{}/ocm-registration", hub.name()),
                &assets.ocm_registration,
                |port| vec![
                    "controller".to_string(),
                    format!("--kubeconfig={kubeconfig}"),
                    format!("--namespace={HUB_NAMESPACE}"),
                    format!("--listen=127.0.0.1:{port}"),
                    "--disable-leader-election".to_string(),
                ],
                hub.dir().join("ocm-registration.log"),
            ),
            // kube-controller-manager's signer alone: it signs the client certificates the
            // hub's admin approved, with the CA the API server trusts for clients.
            spawn_serving(
                format!("{}/csr-signer", hub.name()),
                &kube_controller_manager,
                |port| vec![
                    format!("--kubeconfig={kubeconfig}"),
                    "--leader-elect=false".to_string(),
                    "--bind-address=127.0.0.1".to_string(),
                    format!("--secure-port={port}"),
                    "--controllers=csrsigning".to_string(),
                    format!(
                        "--cluster-signing-cert-file={}",
                        hub.dir().join("ca.crt").display()
                    ),
                    format!(
                        "--cluster-signing-key-file={}",
                        hub.dir().join("ca.key").display()
                    ),
                ],
                hub.dir().join("csr-signer.log"),
            ),
            // The addon manager: installs add-ons by their strategies, renders AddOnTemplates
            // into ManifestWorks, approves add-on agents' CSRs (the signer above signs them).
            spawn_serving(
                format!("{}/ocm-addon-manager", hub.name()),
                &assets.ocm_addon,
                |port| vec![
                    "manager".to_string(),
                    format!("--kubeconfig={kubeconfig}"),
                    format!("--namespace={HUB_NAMESPACE}"),
                    format!("--listen=127.0.0.1:{port}"),
                    "--disable-leader-election".to_string(),
                ],
                hub.dir().join("ocm-addon-manager.log"),
            ),
        )?;
        Ok(RegistrationHub {
            processes: vec![controller, signer, addon_manager],
            bootstrap_kubeconfig,
        })
    }
}

/// Where the registration agent of `spoke` keeps the hub credentials it was issued (it writes
/// its Secret's keys there as files: `kubeconfig`, `tls.crt`, `tls.key`, ...).
pub fn hub_kubeconfig_dir(spoke: &ControlPlane) -> PathBuf {
    spoke.dir().join("hub-kubeconfig")
}

/// OCM's registration agent on `spoke`, joining the hub with `bootstrap_kubeconfig` as
/// `clusteradm join` deploys it. Nothing is accepted until the hub's admin does ([`accept`]).
pub async fn join(
    assets: &TestBedAssets,
    spoke: &ControlPlane,
    bootstrap_kubeconfig: &Path,
) -> Result<ManagedProcess, Error> {
    ensure_namespace(&spoke.client(), AGENT_NAMESPACE).await?;
    let spoke_kubeconfig = spoke.kubeconfig_path().display().to_string();
    spawn_serving(
        format!("{}/ocm-registration-agent", spoke.name()),
        &assets.ocm_registration,
        |port| {
            vec![
                "agent".to_string(),
                format!("--cluster-name={}", spoke.name()),
                format!("--agent-id={}", spoke.name()),
                format!("--bootstrap-kubeconfig={}", bootstrap_kubeconfig.display()),
                format!("--hub-kubeconfig-secret={HUB_KUBECONFIG_SECRET}"),
                format!(
                    "--hub-kubeconfig-dir={}",
                    hub_kubeconfig_dir(spoke).display()
                ),
                format!("--spoke-kubeconfig={spoke_kubeconfig}"),
                format!("--kubeconfig={spoke_kubeconfig}"),
                format!("--namespace={AGENT_NAMESPACE}"),
                format!("--listen=127.0.0.1:{port}"),
                "--disable-leader-election".to_string(),
            ]
        },
        spoke.dir().join("ocm-registration-agent.log"),
    )
    .await
}

/// What `clusteradm accept --clusters <cluster>` does: approves the cluster's pending CSR and
/// accepts the ManagedCluster; then waits until OCM says it joined.
pub async fn accept(hub: &Client, cluster: &str) -> Result<(), Error> {
    let csrs = Api::<CertificateSigningRequest>::all(hub.clone());
    let label = format!("{CSR_CLUSTER_LABEL}={cluster}");
    let csr = eventually(
        &format!("{cluster}'s registration agent asks for a certificate"),
        DEFAULT_PATIENCE,
        || async {
            Ok(csrs
                .list(&ListParams::default().labels(&label))
                .await?
                .items
                .into_iter()
                .next())
        },
    )
    .await?;
    let approval = json!({ "status": { "conditions": [{
        "type": "Approved", "status": "True", "reason": "AcceptedByTestBed",
        "message": "approved as clusteradm accept does",
    }] } });
    csrs.patch_approval(
        &csr.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&approval),
    )
    .await?;
    let clusters = Api::<DynamicObject>::all_with(hub.clone(), &OcmDynamicApis::managed_cluster());
    // The agent creates its ManagedCluster with its own retry backoff: once a clean-clone CI
    // run (two test binaries on two cores) waited more than DEFAULT_PATIENCE for it after the
    // CSR was approved. More patience costs nothing when it comes at once.
    eventually(
        &format!("{cluster}'s ManagedCluster exists"),
        DEFAULT_PATIENCE * 3,
        || async { Ok(clusters.get_opt(cluster).await?) },
    )
    .await?;
    clusters
        .patch(
            cluster,
            &PatchParams::default(),
            &Patch::Merge(json!({ "spec": { "hubAcceptsClient": true } })),
        )
        .await?;
    eventually(&format!("{cluster} joined"), DEFAULT_PATIENCE, || async {
        Ok(
            managed_cluster_condition(hub, cluster, "ManagedClusterJoined")
                .await?
                .then_some(()),
        )
    })
    .await
}

/// Whether the ManagedCluster `cluster` has condition `type_` True (as OCM sets it).
pub async fn managed_cluster_condition(
    hub: &Client,
    cluster: &str,
    type_: &str,
) -> Result<bool, Error> {
    let clusters = Api::<DynamicObject>::all_with(hub.clone(), &OcmDynamicApis::managed_cluster());
    Ok(clusters.get(cluster).await?.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        }))
}
