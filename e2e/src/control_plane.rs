//! One Kubernetes control plane: etcd and kube-apiserver on free loopback ports, in a temporary
//! directory of their own, with their own CA and an admin client certificate; optionally with a
//! real node that runs pods (see [`crate::node`]), when the API server listens on the node's
//! address instead.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_openapi::api::core::v1::Namespace;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use tempfile::TempDir;

use crate::node::{Node, NodeAssets, NodeLaunch, NodeSlot};
use crate::pki::ControlPlanePki;
use crate::ports::free_loopback_port;
use crate::process::ManagedProcess;
use crate::{Error, TestBedAssets};

const READY_TIMEOUT: Duration = Duration::from_secs(90);
const POLL_INTERVAL: Duration = Duration::from_millis(200);

/// A running control plane. Dropping it stops its processes and deletes its directory.
pub struct ControlPlane {
    name: String,
    server_url: String,
    kubeconfig_path: PathBuf,
    client: Client,
    // Field order is drop order: the node goes while its API server still answers, the apiserver
    // stops before etcd, and all before the directory holding their data is deleted.
    node: Option<Node>,
    apiserver: ManagedProcess,
    etcd: ManagedProcess,
    dir: TempDir,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("name", &self.name)
            .field("server_url", &self.server_url)
            .field("dir", &self.dir.path())
            .finish_non_exhaustive()
    }
}

/// A control plane whose processes are started but not yet known to be ready.
#[derive(Debug)]
struct Launched {
    name: String,
    server_url: String,
    kubeconfig_path: PathBuf,
    apiserver: ManagedProcess,
    etcd: ManagedProcess,
    dir: TempDir,
}

impl ControlPlane {
    /// Starts one control plane and waits until it serves.
    pub async fn start(name: &str, assets: &TestBedAssets) -> Result<Self, Error> {
        Self::start_with_audit(name, assets, None).await
    }

    /// Starts one control plane with a node that runs pods from `images` (OCI archives
    /// imported into the node's containerd), and waits until the node is Ready. The API server
    /// then listens on `https://<node address>:443`.
    pub async fn start_with_node(
        name: &str,
        assets: &TestBedAssets,
        node_assets: &NodeAssets,
        images: &[PathBuf],
    ) -> Result<Self, Error> {
        let slot = NodeSlot::claim()?;
        slot.bring_up_address()?;
        let mut control_plane = launch(name, assets, None, Some(&slot))?
            .wait_ready()
            .await?;
        let path = |file: &str| control_plane.dir.path().join(file);
        let node_launch = NodeLaunch {
            name,
            dir: control_plane.dir.path(),
            kubeconfig: &control_plane.kubeconfig_path,
            ca_cert: &path("ca.crt"),
            service_account_key: &path("service-account.key"),
            kubelet_cert: &path("kubelet.crt"),
            kubelet_key: &path("kubelet.key"),
            kubelet_kubeconfig: &path("kubelet.kubeconfig"),
            images,
            slot,
        };
        let node = Node::start(node_launch, &control_plane.client, assets, node_assets).await?;
        control_plane.node = Some(node);
        Ok(control_plane)
    }

    /// Starts one control plane whose API server writes an audit log, `audit.log` in its
    /// directory: one JSON line per request of `user` (metadata only), for benchmarks that
    /// count one client's requests.
    pub async fn start_audited(
        name: &str,
        assets: &TestBedAssets,
        user: &str,
    ) -> Result<Self, Error> {
        Self::start_with_audit(name, assets, Some(user)).await
    }

    async fn start_with_audit(
        name: &str,
        assets: &TestBedAssets,
        audited_user: Option<&str>,
    ) -> Result<Self, Error> {
        // A start can fail for the moment rather than for the test (see
        // [`is_transient_start_failure`]); it is retried on fresh ports and a fresh etcd.
        const ATTEMPTS: usize = 3;
        for attempt in 1.. {
            match launch(name, assets, audited_user, None)?.wait_ready().await {
                Err(error) if attempt < ATTEMPTS && is_transient_start_failure(&error) => {
                    tracing::warn!(%name, attempt, %error, "the control plane failed to start; retrying");
                }
                result => return result,
            }
        }
        unreachable!("the last attempt returns")
    }

    /// Starts several control planes at once; N take about as long as the slowest one.
    pub async fn start_many(names: &[&str], assets: &TestBedAssets) -> Result<Vec<Self>, Error> {
        futures::future::try_join_all(names.iter().map(|name| Self::start(name, assets))).await
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A client authenticated as a cluster admin (`system:masters`).
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// A kubeconfig file for this control plane, usable with `kubectl --kubeconfig`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// This control plane's private directory (data, certificates, logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The node, when the control plane was started with one.
    pub fn node(&self) -> Option<&Node> {
        self.node.as_ref()
    }

    /// Process IDs of etcd, kube-apiserver and the node's processes, for tests that prove
    /// nothing outlives a test.
    pub fn pids(&self) -> Vec<u32> {
        let mut pids = vec![self.etcd.pid(), self.apiserver.pid()];
        pids.extend(self.node.iter().flat_map(Node::pids));
        pids
    }

    /// Resident memory of etcd, kube-apiserver and the node's processes (pods' shims included,
    /// not the pods), from /proc, in bytes.
    pub fn resident_memory_bytes(&self) -> u64 {
        self.pids().into_iter().filter_map(resident_memory_of).sum()
    }

    /// The cluster ID Meridian uses: the UID of the `kube-system` namespace.
    pub async fn cluster_id(&self) -> Result<String, Error> {
        let namespace = Api::<Namespace>::all(self.client.clone())
            .get("kube-system")
            .await?;
        Ok(namespace.metadata.uid.unwrap_or_default())
    }
}

fn launch(
    name: &str,
    assets: &TestBedAssets,
    audited_user: Option<&str>,
    node_slot: Option<&NodeSlot>,
) -> Result<Launched, Error> {
    let node_address = node_slot.map(NodeSlot::address);
    let dir = tempfile::Builder::new()
        .prefix(&format!("meridian-{name}-"))
        .tempdir()
        .map_err(Error::io("creating a control-plane directory"))?;
    let path = |file: &str| dir.path().join(file);
    let write = |file: &str, contents: &str| {
        std::fs::write(path(file), contents).map_err(Error::io(format!("writing {file}")))
    };

    let pki = ControlPlanePki::generate(name, node_address)?;
    write("ca.crt", &pki.ca_cert)?;
    write("ca.key", &pki.ca_key)?;
    if let (Some(cert), Some(key)) = (&pki.kubelet_cert, &pki.kubelet_key) {
        write("kubelet.crt", cert)?;
        write("kubelet.key", key)?;
        // The API server's client certificate towards kubelets (logs, exec).
        write("admin.crt", &pki.admin_cert)?;
        write("admin.key", &pki.admin_key)?;
    }
    write("apiserver.crt", &pki.serving_cert)?;
    write("apiserver.key", &pki.serving_key)?;
    write("service-account.key", &pki.service_account_key)?;
    write("service-account.pub", &pki.service_account_public_key)?;

    let etcd_client_port = free_loopback_port()?;
    let etcd_peer_port = free_loopback_port()?;
    // With a node, the API server listens on the node's address at the `kubernetes` Service's
    // port, so that address and port are what in-cluster configuration names.
    let (apiserver_address, apiserver_port) = match node_address {
        Some(address) => (address, 443),
        None => (Ipv4Addr::LOCALHOST, free_loopback_port()?),
    };
    let etcd_client_url = format!("http://127.0.0.1:{etcd_client_port}");
    let etcd_peer_url = format!("http://127.0.0.1:{etcd_peer_port}");
    let server_url = format!("https://{apiserver_address}:{apiserver_port}");

    let etcd_args = [
        "--name=testbed".to_string(),
        format!("--data-dir={}", path("etcd").display()),
        format!("--listen-client-urls={etcd_client_url}"),
        format!("--advertise-client-urls={etcd_client_url}"),
        format!("--listen-peer-urls={etcd_peer_url}"),
        format!("--initial-advertise-peer-urls={etcd_peer_url}"),
        format!("--initial-cluster=testbed={etcd_peer_url}"),
        // A test cluster's data is thrown away with its directory; fsync only costs time.
        "--unsafe-no-fsync=true".to_string(),
        "--log-level=warn".to_string(),
    ];
    let etcd = ManagedProcess::spawn(
        format!("{name}/etcd"),
        &assets.etcd,
        &etcd_args,
        &path("etcd.log"),
    )?;

    let mut apiserver_args = vec![
        format!("--etcd-servers={etcd_client_url}"),
        format!("--bind-address={apiserver_address}"),
        format!("--advertise-address={apiserver_address}"),
        format!("--secure-port={apiserver_port}"),
        format!("--cert-dir={}", path("apiserver-certs").display()),
        format!("--tls-cert-file={}", path("apiserver.crt").display()),
        format!("--tls-private-key-file={}", path("apiserver.key").display()),
        format!("--client-ca-file={}", path("ca.crt").display()),
        format!(
            "--service-account-key-file={}",
            path("service-account.pub").display()
        ),
        format!(
            "--service-account-signing-key-file={}",
            path("service-account.key").display()
        ),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".to_string(),
        "--allow-privileged=true".to_string(),
        // Fewer background controllers on a two-core machine that runs several control planes.
        "--enable-priority-and-fairness=false".to_string(),
    ];
    match node_slot {
        Some(slot) => apiserver_args.extend([
            // Only an allocation range; its first address, the `kubernetes` Service's, is the
            // API server's own. Nothing routes the others (there is no kube-proxy).
            format!("--service-cluster-ip-range={}", slot.service_range()),
            "--authorization-mode=Node,RBAC".to_string(),
            format!(
                "--kubelet-client-certificate={}",
                path("admin.crt").display()
            ),
            format!("--kubelet-client-key={}", path("admin.key").display()),
            format!(
                "--kubelet-certificate-authority={}",
                path("ca.crt").display()
            ),
            "--kubelet-preferred-address-types=InternalIP".to_string(),
        ]),
        None => apiserver_args.extend([
            // Only an allocation range for Service IPs; nothing routes to it.
            "--service-cluster-ip-range=10.0.0.0/24".to_string(),
            "--authorization-mode=RBAC".to_string(),
        ]),
    }
    if let Some(user) = audited_user {
        let policy = format!(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\nrules:\n- level: Metadata\n  users: [{user:?}]\n- level: None\n"
        );
        write("audit-policy.yaml", &policy)?;
        apiserver_args.extend([
            format!(
                "--audit-policy-file={}",
                path("audit-policy.yaml").display()
            ),
            format!("--audit-log-path={}", path("audit.log").display()),
            "--audit-log-format=json".to_string(),
            "--audit-log-mode=batch".to_string(),
            "--audit-log-batch-max-wait=1s".to_string(),
            // Never rotated (the default rotates at 100 MB): readers count from an offset.
            "--audit-log-maxsize=1000000".to_string(),
        ]);
    }
    let apiserver = ManagedProcess::spawn(
        format!("{name}/kube-apiserver"),
        &assets.kube_apiserver,
        &apiserver_args,
        &path("kube-apiserver.log"),
    )?;

    let kubeconfig_path = path(&format!("{name}.kubeconfig"));
    write(
        &format!("{name}.kubeconfig"),
        &kubeconfig(
            name,
            "admin",
            &server_url,
            &pki.ca_cert,
            &pki.admin_cert,
            &pki.admin_key,
        ),
    )?;
    if let (Some(cert), Some(key)) = (&pki.kubelet_cert, &pki.kubelet_key) {
        // The kubelet's own identity, `system:node:<name>`, which the Node authorizer limits
        // to its node and its pods.
        write(
            "kubelet.kubeconfig",
            &kubeconfig(name, "kubelet", &server_url, &pki.ca_cert, cert, key),
        )?;
    }

    Ok(Launched {
        name: name.to_string(),
        server_url,
        kubeconfig_path,
        apiserver,
        etcd,
        dir,
    })
}

impl Launched {
    async fn wait_ready(mut self) -> Result<ControlPlane, Error> {
        let client = client_from_kubeconfig(&self.kubeconfig_path).await?;
        let started = Instant::now();
        let readyz = || {
            http::Request::get("/readyz")
                .body(Vec::new())
                .expect("static request")
        };
        loop {
            self.etcd.ensure_running()?;
            self.apiserver.ensure_running()?;
            if client
                .request_text(readyz())
                .await
                .is_ok_and(|body| body.trim() == "ok")
            {
                break;
            }
            self.check_deadline(started)?;
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        // kube-system is created by a post-start hook that /readyz does not wait for, and its UID
        // is the cluster ID, so a control plane is only ready for Meridian once it exists.
        let namespaces = Api::<Namespace>::all(client.clone());
        while namespaces.get_opt("kube-system").await?.is_none() {
            self.check_deadline(started)?;
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        tracing::info!(name = %self.name, url = %self.server_url, elapsed = ?started.elapsed(), "control plane ready");
        Ok(ControlPlane {
            name: self.name,
            server_url: self.server_url,
            kubeconfig_path: self.kubeconfig_path,
            client,
            node: None,
            apiserver: self.apiserver,
            etcd: self.etcd,
            dir: self.dir,
        })
    }

    fn check_deadline(&self, started: Instant) -> Result<(), Error> {
        if started.elapsed() < READY_TIMEOUT {
            return Ok(());
        }
        Err(Error::NotReady {
            what: format!("control plane {}", self.name),
            seconds: READY_TIMEOUT.as_secs(),
            log_tail: format!(
                "--- etcd ---\n{}\n--- kube-apiserver ---\n{}",
                self.etcd.log_tail(),
                self.apiserver.log_tail()
            ),
        })
    }
}

/// A client built from a kubeconfig file, exactly as a user of that file would get one.
pub async fn client_from_kubeconfig(path: &Path) -> Result<Client, Error> {
    // The workspace builds rustls with two crypto backends (ring for kube, aws-lc-rs for the AWS
    // SDK), so there is no implicit default: choose ring, once per process.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = Kubeconfig::read_from(path)?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// A kubeconfig for `server_url` as the client whose certificate and key are given (PEM).
fn kubeconfig(name: &str, user: &str, server_url: &str, ca: &str, cert: &str, key: &str) -> String {
    let ca = BASE64.encode(ca);
    let cert = BASE64.encode(cert);
    let key = BASE64.encode(key);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: {name}
  cluster:
    server: {server_url}
    certificate-authority-data: {ca}
users:
- name: {name}-{user}
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: {name}
  context:
    cluster: {name}
    user: {name}-{user}
current-context: {name}
"
    )
}

/// Whether a control plane's start failed for the moment: a free port taken by another process
/// between being picked and being bound, or kube-apiserver exiting because a post-start hook
/// gave up while etcd answered too slowly (`PostStartHook "start-service-ip-repair-controllers"
/// failed`, seen when many tests start control planes on a loaded machine).
fn is_transient_start_failure(error: &Error) -> bool {
    matches!(error, Error::ExitedEarly { log_tail, .. }
        if log_tail.contains("address already in use") || log_tail.contains("PostStartHook"))
}

fn resident_memory_of(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
