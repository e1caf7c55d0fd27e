//! A real node for a test-bed control plane: containerd and runc (Debian packages), the CNI
//! bridge plugins, kubelet, kube-controller-manager and kube-scheduler (built from the same
//! `k8s.io/kubernetes` release as the API server by `e2e/testbed/nodes.sh`), running pods from
//! images imported into the node's containerd (no registry).
//!
//! Every node takes a host-wide [`NodeSlot`] that gives it addresses, bridges and a cgroup root
//! no other node uses, so a hub and three spokes with nodes run side by side, also from tests
//! running in parallel. The slot's first address is the API server's as well: it listens on
//! `<slot address>:443`, which is also the `kubernetes` Service's cluster IP (the first address
//! of the Service range), so pods reach their API server through in-cluster configuration with
//! no service proxy. Nothing else routes Service addresses: there is no kube-proxy.
//!
//! What this host needed (see the measured recipe in the shared reference): containerd must
//! clamp `oom_score_adj` (the VM withholds `CAP_SYS_RESOURCE`), the kubelet must accept cgroup
//! v1 and use the cgroupfs driver, and the node address lives on an empty bridge (the kernel
//! has no dummy driver, and the kubelet refuses loopback node addresses).

use std::fs::File;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node as NodeObject;
use kube::{Api, Client};

use crate::process::ManagedProcess;
use crate::{Error, TestBedAssets};

/// Environment variable naming the directory `e2e/testbed/nodes.sh` fills; the Makefile sets it.
pub const NODE_DIR_ENV: &str = "MERIDIAN_NODE_DIR";
/// The image the pod sandboxes run (the static `pause` from `nodes.sh`).
pub const PAUSE_IMAGE: &str = "localhost/meridian-testbed/pause:1";
/// Where the CNI plugins of Debian's `containernetworking-plugins` live.
const CNI_PLUGINS: &str = "/usr/lib/cni";
/// Where slots are claimed: one lock file per slot, held while the node runs.
const SLOT_LOCKS: &str = "/run/meridian-testbed/node-slots";
const SLOTS: u8 = 200;
const NODE_READY_TIMEOUT: Duration = Duration::from_secs(120);

/// The binaries a node runs besides the control plane's.
#[derive(Debug, Clone)]
pub struct NodeAssets {
    pub kubelet: PathBuf,
    pub kube_controller_manager: PathBuf,
    pub kube_scheduler: PathBuf,
    pub pause: PathBuf,
}

impl NodeAssets {
    /// Finds the binaries `e2e/testbed/nodes.sh` built, and checks for containerd, runc and the
    /// CNI plugins (`make packages` installs them).
    pub fn locate() -> Result<Self, Error> {
        let dir = crate::assets::testbed_dir(NODE_DIR_ENV, "e2e/testbed/nodes.sh")?;
        let assets = NodeAssets {
            kubelet: dir.join("kubelet"),
            kube_controller_manager: dir.join("kube-controller-manager"),
            kube_scheduler: dir.join("kube-scheduler"),
            pause: dir.join("pause"),
        };
        let built = [
            &assets.kubelet,
            &assets.kube_controller_manager,
            &assets.kube_scheduler,
            &assets.pause,
        ];
        for path in built {
            if !path.exists() {
                return Err(Error::MissingAsset {
                    path: path.clone(),
                    hint: "node binaries (`make testbed` builds them)",
                });
            }
        }
        for path in [
            "/usr/bin/containerd",
            "/usr/bin/ctr",
            "/usr/sbin/runc",
            "/usr/lib/cni/bridge",
        ] {
            if !Path::new(path).exists() {
                return Err(Error::MissingAsset {
                    path: path.into(),
                    hint: "containerd, runc and CNI plugins (`make packages` installs them)",
                });
            }
        }
        Ok(assets)
    }
}

/// A host-wide claim on slot `index`: the node's address `10.250.<index>.1` (also the API
/// server's and the `kubernetes` Service's), pod subnet `10.251.<index>.0/24`, two bridges and a
/// cgroup root. The claim is an advisory lock on a file, so the kernel drops it with the
/// process that held it, and whatever a killed holder left is cleared by the next claimant.
#[derive(Debug)]
pub(crate) struct NodeSlot {
    index: u8,
    _lock: File,
}

impl NodeSlot {
    pub fn claim() -> Result<Self, Error> {
        std::fs::create_dir_all(SLOT_LOCKS).map_err(Error::io("creating the slot directory"))?;
        for index in 1..=SLOTS {
            let path = Path::new(SLOT_LOCKS).join(index.to_string());
            let file = File::create(&path).map_err(Error::io("creating a slot lock"))?;
            if file.try_lock().is_ok() {
                let slot = NodeSlot { index, _lock: file };
                slot.clear_leftovers();
                return Ok(slot);
            }
        }
        Err(Error::Component(format!(
            "all {SLOTS} node slots are taken"
        )))
    }

    /// The node's address: the kubelet's, the API server's, and the `kubernetes` Service's.
    pub fn address(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 250, self.index, 1)
    }

    /// The Service range; its first address is [`Self::address`].
    pub fn service_range(&self) -> String {
        format!("10.250.{}.0/24", self.index)
    }

    fn pod_subnet(&self) -> String {
        format!("10.251.{}.0/24", self.index)
    }

    fn node_bridge(&self) -> String {
        format!("mrdn-node{}", self.index)
    }

    fn pod_bridge(&self) -> String {
        format!("mrdn-pods{}", self.index)
    }

    fn cgroup_root(&self) -> String {
        format!("meridian-node-{}", self.index)
    }

    /// The host interfaces this slot creates.
    pub fn bridges(&self) -> [String; 2] {
        [self.node_bridge(), self.pod_bridge()]
    }

    /// This slot's cgroup directories, one per cgroup v1 hierarchy.
    pub fn cgroup_dirs(&self) -> Vec<PathBuf> {
        let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
            return Vec::new();
        };
        hierarchies
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.join("cgroup.procs").exists())
            .map(|path| path.join(self.cgroup_root()))
            .collect()
    }

    /// Puts the node address on its bridge, so the API server can bind it before the node runs.
    pub fn bring_up_address(&self) -> Result<(), Error> {
        let bridge = self.node_bridge();
        run("ip", &["link", "add", &bridge, "type", "bridge"])?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{}/32", self.address()),
                "dev",
                &bridge,
            ],
        )?;
        run("ip", &["link", "set", &bridge, "up"])
    }

    /// Removes the bridges and cgroups of this slot (their pods' network namespaces and cgroups
    /// are gone once their processes are).
    fn clear_leftovers(&self) {
        for bridge in self.bridges() {
            if Path::new("/sys/class/net").join(&bridge).exists() {
                let _ = run("ip", &["link", "del", &bridge]);
            }
        }
        for dir in self.cgroup_dirs() {
            remove_cgroup_tree(&dir);
        }
        // libcni caches each attachment's result under the network's name; a pod killed
        // without a CNI DEL leaves its file.
        let prefix = format!("{}-", self.pod_bridge());
        for result in std::fs::read_dir("/var/lib/cni/results")
            .into_iter()
            .flatten()
            .flatten()
        {
            if result.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = std::fs::remove_file(result.path());
            }
        }
    }
}

impl Drop for NodeSlot {
    fn drop(&mut self) {
        self.clear_leftovers();
        if no_other_slot_claimed(self.index) {
            clear_host_leftovers();
        }
    }
}

/// Whether every slot but `own` is free (probing takes each free slot's lock for an instant).
fn no_other_slot_claimed(own: u8) -> bool {
    (1..=SLOTS).filter(|index| *index != own).all(|index| {
        let path = Path::new(SLOT_LOCKS).join(index.to_string());
        !path.exists() || File::open(&path).is_ok_and(|file| file.try_lock().is_ok())
    })
}

/// What every node shares on the host, once the last one is gone: the kubelet's fixed
/// device-plugin socket, and the directories containerd 1.6 and libcni create at fixed paths.
fn clear_host_leftovers() {
    let _ = std::fs::remove_file("/var/lib/kubelet/device-plugins/kubelet.sock");
    // Sockets of shims that were killed rather than stopped: nothing listens on them.
    for socket in std::fs::read_dir("/run/containerd/s")
        .into_iter()
        .flatten()
        .flatten()
    {
        if std::os::unix::net::UnixStream::connect(socket.path()).is_err() {
            let _ = std::fs::remove_file(socket.path());
        }
    }
    for dir in [
        "/var/lib/kubelet/device-plugins",
        "/var/lib/kubelet",
        "/run/containerd/runc/k8s.io",
        "/run/containerd/runc",
        "/run/containerd/s",
        "/run/containerd/fifo",
        "/run/containerd",
        "/var/lib/cni/results",
        "/var/lib/cni",
    ] {
        // Only empty directories go: anything else is not the test bed's.
        let _ = std::fs::remove_dir(dir);
    }
}

/// The processes of a running node. Dropping it tears the node down (see [`Node::teardown`]).
#[derive(Debug)]
pub struct Node {
    name: String,
    dir: PathBuf,
    kubectl: PathBuf,
    kubeconfig: PathBuf,
    socket: PathBuf,
    controller_manager: Option<ManagedProcess>,
    scheduler: Option<ManagedProcess>,
    kubelet: Option<ManagedProcess>,
    containerd: Option<ManagedProcess>,
    slot: NodeSlot,
    started: Duration,
}

/// What a control plane with a node passes to [`Node::start`].
#[derive(Debug)]
pub(crate) struct NodeLaunch<'a> {
    pub name: &'a str,
    /// The control plane's directory; the node's files go to `node/` inside it.
    pub dir: &'a Path,
    pub kubeconfig: &'a Path,
    pub ca_cert: &'a Path,
    pub service_account_key: &'a Path,
    pub kubelet_cert: &'a Path,
    pub kubelet_key: &'a Path,
    pub kubelet_kubeconfig: &'a Path,
    pub images: &'a [PathBuf],
    pub slot: NodeSlot,
}

impl Node {
    /// Starts containerd, imports the images, starts the controller manager, the scheduler and
    /// the kubelet, and waits until the node is Ready.
    pub(crate) async fn start(
        launch: NodeLaunch<'_>,
        client: &Client,
        assets: &TestBedAssets,
        node_assets: &NodeAssets,
    ) -> Result<Self, Error> {
        let started = Instant::now();
        let dir = launch.dir.join("node");
        std::fs::create_dir_all(dir.join("cni")).map_err(Error::io("creating the node dir"))?;
        let path = |file: &str| dir.join(file);
        let write = |file: &str, contents: String| {
            std::fs::write(path(file), contents).map_err(Error::io(format!("writing {file}")))
        };
        let slot = &launch.slot;
        let address = slot.address();
        let socket = path("containerd.sock");
        for cgroup in slot.cgroup_dirs() {
            std::fs::create_dir_all(&cgroup).map_err(Error::io("creating the cgroup root"))?;
        }
        write("containerd.toml", containerd_config(&dir, &socket))?;
        write(
            "cni/10-pods.conflist",
            cni_config(&slot.pod_bridge(), &slot.pod_subnet(), &path("ipam")),
        )?;
        write(
            "kubelet.yaml",
            kubelet_config(&launch, &dir, &socket, address, &slot.cgroup_root()),
        )?;

        let mut node = Node {
            name: launch.name.to_string(),
            dir: dir.clone(),
            kubectl: assets.kubectl.clone(),
            kubeconfig: launch.kubeconfig.to_path_buf(),
            socket: socket.clone(),
            controller_manager: None,
            scheduler: None,
            kubelet: None,
            containerd: None,
            slot: launch.slot,
            started: Duration::ZERO,
        };
        let spawn = |name: &str, program: &Path, args: Vec<String>| {
            ManagedProcess::spawn(
                format!("{}/{name}", launch.name),
                program,
                &args,
                &path(&format!("{name}.log")),
            )
        };
        node.containerd = Some(spawn(
            "containerd",
            Path::new("containerd"),
            vec![
                "--config".into(),
                path("containerd.toml").display().to_string(),
            ],
        )?);
        node.wait_for_containerd().await?;
        let pause = path("pause.oci.tar");
        write_pause_image(&node_assets.pause, &pause)?;
        for image in std::iter::once(&pause).chain(launch.images) {
            node.import_image(image)?;
        }

        let kubeconfig = launch.kubeconfig.display().to_string();
        node.controller_manager = Some(spawn(
            "kube-controller-manager",
            &node_assets.kube_controller_manager,
            vec![
                format!("--kubeconfig={kubeconfig}"),
                "--leader-elect=false".into(),
                format!("--bind-address={address}"),
                format!("--cluster-name={}", launch.name),
                format!("--root-ca-file={}", launch.ca_cert.display()),
                format!(
                    "--service-account-private-key-file={}",
                    launch.service_account_key.display()
                ),
                "--use-service-account-credentials=false".into(),
                "--controllers=*".into(),
            ],
        )?);
        node.scheduler = Some(spawn(
            "kube-scheduler",
            &node_assets.kube_scheduler,
            vec![
                format!("--kubeconfig={kubeconfig}"),
                "--leader-elect=false".into(),
                format!("--bind-address={address}"),
            ],
        )?);
        node.kubelet = Some(spawn(
            "kubelet",
            &node_assets.kubelet,
            vec![
                format!("--config={}", path("kubelet.yaml").display()),
                format!("--kubeconfig={}", launch.kubelet_kubeconfig.display()),
                format!("--root-dir={}", path("kubelet").display()),
                format!("--cert-dir={}", path("kubelet-pki").display()),
                format!("--hostname-override={}", launch.name),
                format!("--node-ip={address}"),
            ],
        )?);
        node.wait_ready(client).await?;
        node.started = started.elapsed();
        tracing::info!(name = %node.name, %address, elapsed = ?node.started, "node ready");
        Ok(node)
    }

    /// The node's (and its API server's) address.
    pub fn address(&self) -> Ipv4Addr {
        self.slot.address()
    }

    /// How long the node took from containerd's start to Ready.
    pub fn start_time(&self) -> Duration {
        self.started
    }

    /// The node's files: configuration, logs, containerd's and the kubelet's state.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Everything the node leaves on the host while it runs, for tests that prove teardown.
    pub fn footprint(&self) -> NodeFootprint {
        NodeFootprint {
            pids: self.pids(),
            dir: self.dir.clone(),
            bridges: self.slot.bridges().to_vec(),
            cgroups: self.slot.cgroup_dirs(),
        }
    }

    /// The node's processes: its components and every containerd shim of its pods.
    pub fn pids(&self) -> Vec<u32> {
        [
            &self.containerd,
            &self.kubelet,
            &self.scheduler,
            &self.controller_manager,
        ]
        .into_iter()
        .flatten()
        .map(ManagedProcess::pid)
        .chain(shims_of(&self.socket))
        .collect()
    }

    /// Imports an image archive into the node's containerd (the kubelet then runs it with
    /// `imagePullPolicy: IfNotPresent` or `Never`).
    pub fn import_image(&self, archive: &Path) -> Result<(), Error> {
        self.ctr(&["images", "import", &archive.display().to_string()])
    }

    /// Gives an imported image a second name, as pushing a new tag of it would.
    pub fn tag_image(&self, source: &str, target: &str) -> Result<(), Error> {
        self.ctr(&["images", "tag", "--force", source, target])
    }

    /// The last lines of every container's log on this node, read from its log directory (the
    /// test bed's API servers cannot reach the kubelet's log endpoint through a proxy), for a
    /// failing test to print.
    pub fn pod_logs(&self) -> String {
        let dir = self.dir.join("pod-logs");
        let mut logs = String::new();
        for pod in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            for container in std::fs::read_dir(pod.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                for file in std::fs::read_dir(container.path())
                    .into_iter()
                    .flatten()
                    .flatten()
                {
                    let text = std::fs::read_to_string(file.path()).unwrap_or_default();
                    let tail: Vec<&str> = text.lines().rev().take(40).collect();
                    logs += &format!("--- {} ---\n", file.path().display());
                    for line in tail.into_iter().rev() {
                        logs += line;
                        logs += "\n";
                    }
                }
            }
        }
        logs
    }

    fn ctr(&self, args: &[&str]) -> Result<(), Error> {
        let socket = self.socket.display().to_string();
        let mut all = vec!["-a", socket.as_str(), "-n", "k8s.io"];
        all.extend_from_slice(args);
        run("ctr", &all)
    }

    async fn wait_for_containerd(&mut self) -> Result<(), Error> {
        let started = Instant::now();
        while !self.socket.exists() {
            if let Some(containerd) = &mut self.containerd {
                containerd.ensure_running()?;
            }
            if started.elapsed() > NODE_READY_TIMEOUT {
                return Err(self.not_ready("containerd"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    async fn wait_ready(&mut self, client: &Client) -> Result<(), Error> {
        let nodes: Api<NodeObject> = Api::all(client.clone());
        let started = Instant::now();
        loop {
            for process in [
                &mut self.containerd,
                &mut self.kubelet,
                &mut self.scheduler,
                &mut self.controller_manager,
            ]
            .into_iter()
            .flatten()
            {
                process.ensure_running()?;
            }
            let node = nodes.get_opt(&self.name).await?;
            let ready = node
                .and_then(|node| node.status?.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            if ready {
                return Ok(());
            }
            if started.elapsed() > NODE_READY_TIMEOUT {
                return Err(self.not_ready(&format!("node {}", self.name)));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn not_ready(&self, what: &str) -> Error {
        let tails = [&self.containerd, &self.kubelet]
            .into_iter()
            .flatten()
            .map(|p| format!("--- {} ---\n{}", p.name(), p.log_tail()))
            .collect::<Vec<_>>()
            .join("\n");
        Error::NotReady {
            what: what.to_string(),
            seconds: NODE_READY_TIMEOUT.as_secs(),
            log_tail: tails,
        }
    }

    /// Stops the node and removes what it put on the host. The order matters: with the
    /// controllers stopped nothing replaces a deleted pod, and while the kubelet still runs it
    /// stops each pod's containers and tears down its network (CNI DEL, network namespace);
    /// then the kubelet, anything left in containerd, containerd and its shims, the mounts under
    /// the node's directory, the bridges and the cgroups.
    fn teardown(&mut self) {
        self.controller_manager.take();
        self.scheduler.take();
        let kubelet_running = self
            .kubelet
            .as_mut()
            .is_some_and(|kubelet| kubelet.ensure_running().is_ok());
        if kubelet_running {
            let deleted = Command::new(&self.kubectl)
                .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
                .args([
                    "delete",
                    "pods",
                    "--all",
                    "--all-namespaces",
                    "--grace-period=1",
                    "--wait=true",
                    "--timeout=60s",
                    // An API server that is gone fails fast instead of at the timeout.
                    "--request-timeout=10s",
                ])
                .output();
            if !deleted.is_ok_and(|output| output.status.success()) {
                tracing::warn!(node = %self.name, "could not delete the node's pods; killing them");
            }
        }
        self.kubelet.take();
        if self.containerd.is_some() {
            let socket = self.socket.display().to_string();
            let tasks = Command::new("ctr")
                .args(["-a", &socket, "-n", "k8s.io", "tasks", "ls", "-q"])
                .output()
                .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
                .unwrap_or_default();
            for task in tasks.split_whitespace() {
                let ctr = ["-a", socket.as_str(), "-n", "k8s.io", "tasks"];
                let _ = Command::new("ctr")
                    .args(ctr)
                    .args(["kill", "-s", "SIGKILL", task])
                    .output();
                let _ = Command::new("ctr")
                    .args(ctr)
                    .args(["delete", "-f", task])
                    .output();
            }
        }
        self.containerd.take();
        for shim in shims_of(&self.socket) {
            let _ = Command::new("kill")
                .args(["-9", &shim.to_string()])
                .output();
        }
        for mount in mounts_under(&self.dir) {
            let _ = Command::new("umount").args(["-l", &mount]).output();
        }
        remove_log_links_into(&self.dir);
        // The slot, dropped after this, removes the bridges and cgroups.
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.teardown();
        tracing::debug!(node = %self.name, "node torn down");
    }
}

/// What a node put on the host; after teardown none of it may remain.
#[derive(Debug, Clone)]
pub struct NodeFootprint {
    pub pids: Vec<u32>,
    pub dir: PathBuf,
    pub bridges: Vec<String>,
    pub cgroups: Vec<PathBuf>,
}

impl NodeFootprint {
    /// What is still there, described; empty when the node left nothing.
    pub fn remains(&self) -> Vec<String> {
        let mut remains = Vec::new();
        remains.extend(
            self.pids
                .iter()
                .filter(|pid| crate::process::is_alive(**pid))
                .map(|pid| format!("process {pid}")),
        );
        remains.extend(
            mounts_under(&self.dir)
                .into_iter()
                .map(|mount| format!("mount {mount}")),
        );
        remains.extend(
            self.bridges
                .iter()
                .filter(|bridge| Path::new("/sys/class/net").join(bridge).exists())
                .map(|bridge| format!("interface {bridge}")),
        );
        remains.extend(
            self.cgroups
                .iter()
                .filter(|dir| dir.exists())
                .map(|dir| format!("cgroup {}", dir.display())),
        );
        remains
    }
}

fn containerd_config(dir: &Path, socket: &Path) -> String {
    let dir = dir.display();
    let socket = socket.display();
    format!(
        r#"version = 2
root = "{dir}/containerd/root"
state = "{dir}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.internal.v1.opt"]
[grpc]
  address = "{socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # This VM withholds CAP_SYS_RESOURCE, so no process may lower its oom_score_adj, which the
  # kubelet asks for sandboxes and Guaranteed pods: clamp to the shim's own instead of failing.
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_PLUGINS}"
    conf_dir = "{dir}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        # runc's state per node: the default is shared by every containerd on the host.
        Root = "{dir}/runc"
"#
    )
}

/// Pods on a bridge of their own, addresses from the slot's subnet, no masquerading (nothing
/// leaves the host).
fn cni_config(bridge: &str, subnet: &str, ipam_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": bridge,
        "plugins": [
            {
                "type": "bridge", "bridge": bridge, "isGateway": true, "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local", "ranges": [[{ "subnet": subnet }]],
                    "routes": [{ "dst": "0.0.0.0/0" }], "dataDir": ipam_dir,
                },
            },
            { "type": "loopback" },
        ],
    })
    .to_string()
}

fn kubelet_config(
    launch: &NodeLaunch<'_>,
    dir: &Path,
    socket: &Path,
    address: Ipv4Addr,
    cgroup_root: &str,
) -> String {
    format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# This host has cgroup v1 (hybrid), which 1.36 refuses unless told, and no systemd.
failCgroupV1: false
cgroupDriver: cgroupfs
# A cgroup subtree per node, so two kubelets never share /kubepods.
cgroupRoot: /{cgroup_root}
containerRuntimeEndpoint: unix://{socket}
address: {address}
readOnlyPort: 0
healthzBindAddress: {address}
tlsCertFile: {cert}
tlsPrivateKeyFile: {key}
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: AlwaysAllow}}
failSwapOn: false
resolvConf: /etc/resolv.conf
# A shared, busy disk: never evict the test's pods for it.
evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
serializeImagePulls: false
# The default /var/log/pods is shared by every kubelet on the host.
podLogsDir: {dir}/pod-logs
",
        socket = socket.display(),
        cert = launch.kubelet_cert.display(),
        key = launch.kubelet_key.display(),
        ca = launch.ca_cert.display(),
        dir = dir.display(),
    )
}

/// The pod sandbox image: the static `pause` alone, built with Meridian's own image writer.
fn write_pause_image(pause: &Path, out: &Path) -> Result<(), Error> {
    let build = || -> anyhow::Result<Vec<u8>> {
        let binary = std::fs::read(pause)?;
        let layer =
            meridian_image::layer(&[meridian_image::Entry::file("pause", 0o755, binary)], 0)?;
        let (repository, tag) = PAUSE_IMAGE.rsplit_once(':').expect("a tagged reference");
        let spec = meridian_image::ImageSpec {
            repository: repository.to_string(),
            tag: tag.to_string(),
            entrypoint: vec!["/pause".into()],
            env: Vec::new(),
            annotations: Default::default(),
            epoch: 0,
        };
        let image = meridian_image::image(&spec, vec![layer])?;
        meridian_image::oci_archive(&image, 0)
    };
    let archive =
        build().map_err(|e| Error::Component(format!("building the pause image: {e}")))?;
    std::fs::write(out, archive).map_err(Error::io("writing the pause image"))
}

/// The containerd shims serving `socket`'s containerd: their command line names it.
fn shims_of(socket: &Path) -> Vec<u32> {
    let needle = format!("-address {} ", socket.display());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|cmdline| {
                let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
                cmdline.contains("containerd-shim") && cmdline.contains(&needle)
            })
        })
        .collect()
}

/// Mount points below `dir` (pod volumes, container root filesystems, shm), deepest first.
fn mounts_under(dir: &Path) -> Vec<String> {
    let prefix = format!("{}/", dir.display());
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| line.split_whitespace().nth(4))
        .filter(|mount| mount.starts_with(&prefix))
        .map(str::to_string)
        .collect();
    mounts.sort_by(|a, b| b.cmp(a));
    mounts
}

/// Removes a cgroup directory and the empty ones below it, deepest first (a cgroup directory
/// is removed with rmdir, and only once no process is left in it).
fn remove_cgroup_tree(dir: &Path) {
    if let Ok(children) = std::fs::read_dir(dir) {
        for child in children.flatten() {
            if child.file_type().is_ok_and(|t| t.is_dir()) {
                remove_cgroup_tree(&child.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// The kubelet links every container's log into /var/log/containers, whichever its logs
/// directory: remove the links into this node's.
fn remove_log_links_into(dir: &Path) {
    let Ok(links) = std::fs::read_dir("/var/log/containers") else {
        return;
    };
    for link in links.flatten() {
        if std::fs::read_link(link.path()).is_ok_and(|target| target.starts_with(dir)) {
            let _ = std::fs::remove_file(link.path());
        }
    }
}

fn run(program: &str, args: &[&str]) -> Result<(), Error> {
    let output = Command::new(program)
        .args(args)
        .output()
        .map_err(|source| Error::Spawn {
            program: program.to_string(),
            source,
        })?;
    if output.status.success() {
        return Ok(());
    }
    Err(Error::Component(format!(
        "{program} {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr).trim()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cni_configuration_keeps_pods_on_the_slot_subnet_without_masquerading() {
        let config: serde_json::Value =
            serde_json::from_str(&cni_config("mrdn-pods7", "10.251.7.0/24", Path::new("/x")))
                .unwrap();
        let bridge = &config["plugins"][0];
        assert_eq!(bridge["bridge"], "mrdn-pods7");
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(bridge["ipam"]["ranges"][0][0]["subnet"], "10.251.7.0/24");
        assert_eq!(bridge["ipam"]["dataDir"], "/x");
    }

    #[test]
    fn a_slot_s_address_is_the_first_of_its_service_range() {
        let slot = NodeSlot {
            index: 9,
            _lock: tempfile::tempfile().unwrap(),
        };
        assert_eq!(slot.address(), Ipv4Addr::new(10, 250, 9, 1));
        assert_eq!(slot.service_range(), "10.250.9.0/24");
        assert_eq!(slot.bridges(), ["mrdn-node9", "mrdn-pods9"]);
    }
}
