//! Real traffic through the fleet: Traefik as each spoke's Gateway API implementation, the demo
//! app (`demo-app/`) behind it, Unbound as the clients' recursive resolver, and clients that
//! resolve through it and send requests, as users would.
//!
//! Every address traffic goes to is one the test bed made: a spoke node's bridge address (where
//! its Traefik listens), a pod address on a node's pod bridge, or loopback.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::Client;
use kube::api::{Api, ListParams};
use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::upstream::{Gateway, GatewayClass, HTTPRoute, MULTI_CLUSTER_GATEWAY_CLASS};
use meridian_controllers::decide::plan_guard::{APPROVE_ANNOTATION, HELD_REASON};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::example::{GATEWAY, HOST, NAMESPACE, RunningExample, SPOKES, ZONE_DOMAIN, apply};
use crate::process::ManagedProcess;
use crate::{ControlPlane, DEFAULT_PATIENCE, Error, Fleet, ensure_namespace, eventually};

/// Where `make test` puts Traefik (`e2e/testbed/traefik.sh --print-dir`).
pub const TRAEFIK_DIR_ENV: &str = "MERIDIAN_TRAEFIK_DIR";
/// The spokes' GatewayClass, and the downstream class the hub's ManifestWorks name.
pub const TRAEFIK_CLASS: &str = "traefik";
/// Traefik's GatewayClass controller name.
pub const TRAEFIK_CONTROLLER: &str = "traefik.io/gateway-controller";
/// The demo app's Deployment, Service and HTTPRoute on every spoke.
pub const APP: &str = "demo-app";
/// The port the demo app takes its faults on (never routed by a gateway).
pub const APP_CONTROL_PORT: u16 = 8081;
/// The path Meridian's health checks ask the demo app for.
pub const HEALTH_PATH: &str = "/healthz";
/// The port the example Gateway's listeners are on, where Traefik listens.
pub const GATEWAY_PORT: u16 = 80;

/// The namespace on a spoke where the work agent puts the example's Gateway.
pub fn spoke_namespace() -> String {
    format!("kuadrant-{NAMESPACE}")
}

/// The example policy with a health check of the demo app (`interval` × `failure_threshold`)
/// and `ttl` on the records a failover changes.
pub fn health_checked_policy(
    azure_weight: i64,
    interval: &str,
    failure_threshold: u32,
    ttl: &str,
) -> serde_json::Value {
    let mut policy = crate::example::dns_policy(azure_weight);
    policy["spec"]["healthCheck"] = json!({
        "endpoint": HEALTH_PATH, "port": GATEWAY_PORT, "protocol": "HTTP",
        "failureThreshold": failure_threshold, "interval": interval,
    });
    policy["spec"]["ttl"] = json!(ttl);
    policy
}

/// The example policy with health checks and priority tiers instead of GEO: every client is
/// answered by IE (spoke-1) while it is healthy, then by US (spoke-2), then by the rest.
pub fn tiered_policy(
    interval: &str,
    failure_threshold: u32,
    ttl: &str,
    hold_down: &str,
) -> serde_json::Value {
    let mut policy = health_checked_policy(30, interval, failure_threshold, ttl);
    let load_balancing = &mut policy["spec"]["loadBalancing"];
    if let Some(fields) = load_balancing.as_object_mut() {
        fields.remove("geo");
    }
    load_balancing["failover"] = json!({
        "priorities": [
            { "attribute": "geo-code", "value": "IE", "priority": 1 },
            { "attribute": "geo-code", "value": "US", "priority": 2 },
        ],
        "holdDown": hold_down,
    });
    policy
}

/// Applies a tiered example policy and waits until the hub publishes it (the record's
/// endpoints carry tiers and it is `Ready`). Moving the example from GEO to tiers rewrites most
/// of the zone, which the plan guard holds until approved: approved here as an operator would.
pub async fn publish_tiered_policy(
    hub: &kube::Client,
    policy: serde_json::Value,
) -> Result<(), Error> {
    crate::example::apply(
        &kube::Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE),
        policy,
    )
    .await?;
    let records = kube::Api::<DNSRecord>::namespaced(hub.clone(), NAMESPACE);
    let zones = kube::Api::<ManagedZone>::namespaced(hub.clone(), NAMESPACE);
    eventually(
        "the record carries tiers and is published",
        DEFAULT_PATIENCE,
        || {
            let (records, zones) = (records.clone(), zones.clone());
            async move {
                let record = records.get("prod-web-api").await?;
                let tiered = record
                    .spec
                    .endpoints
                    .iter()
                    .any(|e| e.provider_specific.iter().any(|p| p.name == "priority"));
                let status = record.status.unwrap_or_default();
                let ready = status.conditions.iter().find(|c| c.type_ == "Ready");
                if let Some(held) = ready.filter(|c| c.reason == HELD_REASON) {
                    let plan = held
                        .message
                        .split_whitespace()
                        .find(|word| word.starts_with("plan-"))
                        .expect("a held plan is named");
                    tracing::info!(
                        plan,
                        "approving the switch to tiers, which the plan guard held"
                    );
                    zones
                        .patch(
                            "example",
                            &kube::api::PatchParams::default(),
                            &kube::api::Patch::Merge(serde_json::json!({
                                "metadata": { "annotations": { APPROVE_ANNOTATION: plan } }
                            })),
                        )
                        .await?;
                }
                let published = status.observed_generation == record.metadata.generation
                    && ready.is_some_and(|c| c.status == "True");
                Ok((tiered && published).then_some(()))
            }
        },
    )
    .await
}

/// Marks (or unmarks) a ManagedCluster for drain, as `kubectl label` would.
pub async fn mark_for_drain(hub: &kube::Client, cluster: &str, drain: bool) -> Result<(), Error> {
    let value = drain.then_some("true");
    kube::Api::<meridian_api::upstream::ManagedCluster>::all(hub.clone())
        .patch(
            cluster,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({
                "metadata": { "labels": { meridian_api::labels::DRAIN_LABEL: value } }
            })),
        )
        .await?;
    Ok(())
}

fn traefik_binary() -> Result<PathBuf, Error> {
    let dir = crate::assets::testbed_dir(TRAEFIK_DIR_ENV, "e2e/testbed/traefik.sh")?;
    let binary = dir.join("traefik");
    if binary.exists() {
        Ok(binary)
    } else {
        Err(Error::MissingAsset {
            path: binary,
            hint: "Traefik (run `make testbed`)",
        })
    }
}

/// Traefik serving one spoke's Gateways on the spoke node's address.
#[derive(Debug)]
pub struct Traefik {
    process: ManagedProcess,
    spoke: String,
    address: Ipv4Addr,
}

impl Traefik {
    /// Starts Traefik with `spoke`'s kubeconfig, its Gateway API provider writing the node's
    /// address into the Gateways' status, and an entry point on that address's port 80.
    pub fn start(spoke: &ControlPlane) -> Result<Self, Error> {
        let node = spoke.node().ok_or_else(|| {
            Error::Component(format!(
                "{} has no node for Traefik to listen on",
                spoke.name()
            ))
        })?;
        let address = node.address();
        let binary = traefik_binary()?;
        let args = vec![
            format!("KUBECONFIG={}", spoke.kubeconfig_path().display()),
            binary.display().to_string(),
            // Nothing leaves the machine: no version check, no usage report.
            "--global.checkNewVersion=false".into(),
            "--global.sendAnonymousUsage=false".into(),
            format!("--entryPoints.web.address={address}:{GATEWAY_PORT}"),
            "--providers.kubernetesgateway=true".into(),
            format!("--providers.kubernetesgateway.statusaddress.ip={address}"),
            "--log.level=INFO".into(),
        ];
        let log = spoke.dir().join("traefik.log");
        // `env` sets the kubeconfig (Traefik reads KUBECONFIG) and execs Traefik, same process.
        let process = ManagedProcess::spawn(
            format!("traefik on {}", spoke.name()),
            std::path::Path::new("/usr/bin/env"),
            &args,
            &log,
        )?;
        Ok(Traefik {
            process,
            spoke: spoke.name().to_string(),
            address,
        })
    }

    /// The address clients and probes reach this gateway at.
    pub fn address(&self) -> Ipv4Addr {
        self.address
    }

    pub fn spoke(&self) -> &str {
        &self.spoke
    }

    pub fn pid(&self) -> u32 {
        self.process.pid()
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// On the hub: the multi-cluster GatewayClass names `traefik` as the downstream class, so the
/// ManifestWorks put Traefik's class on the spokes' Gateways.
pub async fn use_traefik_downstream(hub: &Client) -> Result<(), Error> {
    ensure_namespace(hub, NAMESPACE).await?;
    apply(
        &Api::<ConfigMap>::namespaced(hub.clone(), NAMESPACE),
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": { "name": "downstream-class", "namespace": NAMESPACE },
            "data": { "downstreamClass": TRAEFIK_CLASS },
        }),
    )
    .await?;
    apply(
        &Api::<GatewayClass>::all(hub.clone()),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": { "name": MULTI_CLUSTER_GATEWAY_CLASS },
            "spec": {
                "controllerName": "kuadrant.io/mgc-gw-controller",
                "parametersRef": { "group": "", "kind": "ConfigMap", "name": "downstream-class", "namespace": NAMESPACE },
            },
        }),
    )
    .await?;
    Ok(())
}

/// On a spoke: Traefik's GatewayClass, and the demo app (`image`, already on the node) as a
/// Deployment, a Service and an HTTPRoute for the example host on the example Gateway.
pub async fn install_app(spoke: &Client, cluster: &str, image: &str) -> Result<(), Error> {
    let namespace = spoke_namespace();
    ensure_namespace(spoke, &namespace).await?;
    apply(
        &Api::<GatewayClass>::all(spoke.clone()),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": { "name": TRAEFIK_CLASS },
            "spec": { "controllerName": TRAEFIK_CONTROLLER },
        }),
    )
    .await?;
    let labels = json!({ "app.kubernetes.io/name": APP });
    apply(
        &Api::<Deployment>::namespaced(spoke.clone(), &namespace),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": { "name": APP, "namespace": namespace },
            "spec": {
                "replicas": 1,
                "selector": { "matchLabels": labels },
                "template": {
                    "metadata": { "labels": labels },
                    "spec": {
                        "terminationGracePeriodSeconds": 1,
                        "containers": [{
                            "name": "app", "image": image, "imagePullPolicy": "Never",
                            "env": [{ "name": "CLUSTER_NAME", "value": cluster }],
                            "ports": [
                                { "name": "http", "containerPort": 8080 },
                                { "name": "control", "containerPort": APP_CONTROL_PORT },
                            ],
                        }],
                    },
                },
            },
        }),
    )
    .await?;
    apply(
        &Api::<Service>::namespaced(spoke.clone(), &namespace),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": APP, "namespace": namespace },
            "spec": { "selector": labels, "ports": [{ "name": "http", "port": 80, "targetPort": "http" }] },
        }),
    )
    .await?;
    apply(
        &Api::<HTTPRoute>::namespaced(spoke.clone(), &namespace),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": { "name": APP, "namespace": namespace },
            "spec": {
                "parentRefs": [{ "name": GATEWAY, "sectionName": "api" }],
                "hostnames": [HOST],
                "rules": [{ "backendRefs": [{ "name": APP, "port": 80 }] }],
            },
        }),
    )
    .await?;
    Ok(())
}

/// Waits until Traefik wrote `address` into the spoke's Gateway status (the address Meridian
/// publishes comes from there, written by the implementation, not by the test bed).
pub async fn gateway_serves(spoke: &Client, address: Ipv4Addr) -> Result<(), Error> {
    let gateways: Api<Gateway> = Api::namespaced(spoke.clone(), &spoke_namespace());
    let wanted = address.to_string();
    eventually(
        &format!("Traefik writes {wanted} into the Gateway's status"),
        DEFAULT_PATIENCE,
        || {
            let gateways = gateways.clone();
            let wanted = wanted.clone();
            async move {
                let gateway = gateways.get_opt(GATEWAY).await?;
                Ok(gateway
                    .and_then(|g| g.status)
                    .filter(|s| s.addresses.iter().any(|a| a.value == wanted))
                    .map(|_| ()))
            }
        },
    )
    .await
}

/// The running demo app's pod address on `spoke` (its fault control is there).
pub async fn app_pod_address(spoke: &Client) -> Result<IpAddr, Error> {
    let pods: Api<Pod> = Api::namespaced(spoke.clone(), &spoke_namespace());
    eventually("the demo app's pod runs", DEFAULT_PATIENCE, || {
        let pods = pods.clone();
        async move {
            let list = pods
                .list(&ListParams::default().labels(&format!("app.kubernetes.io/name={APP}")))
                .await?;
            Ok(list
                .items
                .iter()
                .filter(|pod| pod.metadata.deletion_timestamp.is_none())
                .filter(|pod| {
                    pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                })
                .find_map(|pod| pod.status.as_ref()?.pod_ip.as_deref()?.parse().ok()))
        }
    })
    .await
}

/// Sets the demo app's fault (`none`, `unavailable`, `hang` or `flap`) through its control port.
pub async fn set_fault(pod: IpAddr, fault: &str) -> Result<(), Error> {
    let address = SocketAddr::new(pod, APP_CONTROL_PORT);
    let request =
        format!("PUT /fault/{fault} HTTP/1.1\r\nHost: {pod}\r\nConnection: close\r\n\r\n");
    match http_exchange(address, &request, Duration::from_secs(5)).await {
        Ok((200, _)) => Ok(()),
        Ok((status, body)) => Err(Error::Component(format!(
            "the demo app at {address} refused fault {fault}: {status} {body}"
        ))),
        Err(problem) => Err(Error::Component(format!(
            "setting fault {fault} at {address}: {problem}"
        ))),
    }
}

/// The command a user runs to set a fault on the demo app at `pod`.
pub fn fault_command(pod: IpAddr, fault: &str) -> String {
    format!("curl -X PUT http://{pod}:{APP_CONTROL_PORT}/fault/{fault}")
}

/// The example's gateways served for real: the hub's GatewayClass names Traefik's, and every
/// example spoke runs Traefik on its node's address with the demo app behind it. What a test
/// or the demo with nodes runs instead of writing Gateway addresses by hand; start it before
/// the example's objects are installed, then wait for [`Self::serving`].
#[derive(Debug)]
pub struct ExampleGateways {
    gateways: Vec<Traefik>,
    /// Each spoke's demo app pod address (where its faults are set), once serving.
    app_pods: BTreeMap<String, IpAddr>,
}

impl ExampleGateways {
    pub async fn start(fleet: &Fleet, app_image: &str) -> Result<Self, Error> {
        use_traefik_downstream(&fleet.hub.client()).await?;
        let mut gateways = Vec::new();
        for (spoke, _, _, _) in SPOKES {
            let cluster = fleet.spoke(spoke);
            gateways.push(Traefik::start(cluster)?);
            install_app(&cluster.client(), spoke, app_image).await?;
        }
        Ok(ExampleGateways {
            gateways,
            app_pods: BTreeMap::new(),
        })
    }

    /// Waits until every spoke's Traefik wrote its address into the Gateway's status and the
    /// demo app runs.
    pub async fn serving(&mut self, fleet: &Fleet) -> Result<(), Error> {
        for gateway in &self.gateways {
            let spoke = fleet.spoke(gateway.spoke()).client();
            gateway_serves(&spoke, gateway.address())
                .await
                .map_err(|e| {
                    Error::Component(format!("{e}; Traefik's log: {}", gateway.log_tail()))
                })?;
            self.app_pods
                .insert(gateway.spoke().to_string(), app_pod_address(&spoke).await?);
        }
        Ok(())
    }

    /// The Traefik of `spoke`.
    pub fn gateway(&self, spoke: &str) -> &Traefik {
        self.gateways
            .iter()
            .find(|gateway| gateway.spoke() == spoke)
            .unwrap_or_else(|| panic!("no gateway on {spoke}"))
    }

    /// The address `spoke`'s gateway serves on (what DNS answers for it).
    pub fn address(&self, spoke: &str) -> String {
        self.gateway(spoke).address().to_string()
    }

    /// The demo app's pod address on `spoke` (after [`Self::serving`]).
    pub fn app_pod(&self, spoke: &str) -> IpAddr {
        self.app_pods[spoke]
    }

    /// Stops `spoke`'s Traefik: its address refuses connections.
    pub fn stop_gateway(&mut self, spoke: &str) {
        self.gateways.retain(|gateway| gateway.spoke() != spoke);
    }

    /// Starts `spoke`'s Traefik again.
    pub fn start_gateway(&mut self, fleet: &Fleet, spoke: &str) -> Result<(), Error> {
        self.stop_gateway(spoke);
        self.gateways.push(Traefik::start(fleet.spoke(spoke))?);
        Ok(())
    }
}

/// The example fleet with a node per spoke holding the demo app's image, and that image.
pub async fn fleet_with_the_app() -> Result<(Fleet, crate::BuiltImage), Error> {
    let images = crate::built_images()?;
    let app_image = crate::image_named(&images, "/meridian-demo-app");
    let fleet = crate::example::with_example_spokes(Fleet::builder())
        .with_nodes([app_image.archive.clone()])
        .start()
        .await?;
    Ok((fleet, app_image))
}

/// The example with real traffic: the hub and agents in this process (as
/// [`RunningExample`]), [`ExampleGateways`], and Unbound in front of the hub's nameserver.
#[derive(Debug)]
pub struct TrafficExample {
    pub example: RunningExample,
    pub gateways: ExampleGateways,
    pub resolver: Resolver,
}

impl TrafficExample {
    /// Starts it on a fleet whose spokes have nodes holding `app_image`, with `policy` as the
    /// example's DNSPolicy.
    pub async fn start(
        fleet: &Fleet,
        app_image: &str,
        policy: serde_json::Value,
        heartbeat: Duration,
    ) -> Result<Self, Error> {
        Self::start_configured(
            fleet,
            app_image,
            policy,
            heartbeat,
            |_| {},
            |example| {
                let nameserver = example.hub.nameserver;
                async move { Resolver::start(ZONE_DOMAIN, &[nameserver]).await }
            },
        )
        .await
    }

    /// [`Self::start`], with the hub's flags as `configure` leaves them, and the resolver
    /// clients ask made by `resolver` once every gateway serves (a resolver that asks before
    /// the zone holds the host would cache its absence).
    pub async fn start_configured<R>(
        fleet: &Fleet,
        app_image: &str,
        policy: serde_json::Value,
        heartbeat: Duration,
        configure: impl FnOnce(&mut meridian_hub::run_command::RunArgs),
        resolver: impl FnOnce(&RunningExample) -> R,
    ) -> Result<Self, Error>
    where
        R: std::future::Future<Output = Result<Resolver, Error>>,
    {
        let mut gateways = ExampleGateways::start(fleet, app_image).await?;
        let example =
            RunningExample::start_configured(fleet, heartbeat, Some(policy), configure).await?;
        gateways.serving(fleet).await?;
        let resolver = resolver(&example).await?;
        Ok(TrafficExample {
            example,
            gateways,
            resolver,
        })
    }

    /// Stops the whole of `spoke` at once: its agent, and its control plane, node and Traefik
    /// frozen (SIGSTOP; connections to its gateway are accepted by the kernel and never
    /// answered, as from a machine that went away).
    pub fn freeze_spoke(&mut self, fleet: &Fleet, spoke: &str) {
        self.example.stop_agent(spoke);
        signal(&self.spoke_pids(fleet, spoke), "STOP");
    }

    /// Undoes [`Self::freeze_spoke`]: the processes continue and the agent starts again.
    pub fn thaw_spoke(&mut self, fleet: &Fleet, spoke: &str) {
        signal(&self.spoke_pids(fleet, spoke), "CONT");
        self.example.restart_agent(spoke);
    }

    fn spoke_pids(&self, fleet: &Fleet, spoke: &str) -> Vec<u32> {
        let mut pids = fleet.spoke(spoke).pids();
        pids.push(self.gateways.gateway(spoke).pid());
        pids
    }

    pub async fn stop(self) {
        self.example.stop().await;
    }
}

/// Sends `signal` (`STOP`, `CONT`) to the processes `pids`, all of them the test bed's own.
fn signal(pids: &[u32], signal: &str) {
    for pid in pids {
        let _ = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status();
    }
}

/// Unbound as the clients' recursive resolver: the example zone as a stub zone at the
/// nameservers, TTLs honoured, ECS sent to them (the GEO answers) and passed on from clients
/// that send one. Stopped and its directory removed on drop.
#[derive(Debug)]
pub struct Resolver {
    process: ManagedProcess,
    address: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Resolver {
    pub async fn start(zone: &str, nameservers: &[SocketAddr]) -> Result<Self, Error> {
        Self::start_with_delegations(zone, nameservers, &[]).await
    }

    /// As [`Self::start`], also sending client subnets to `delegated_servers`: the name
    /// servers of a sub-zone the zone delegates to, which Unbound reaches by referral (on port
    /// 53).
    pub async fn start_with_delegations(
        zone: &str,
        nameservers: &[SocketAddr],
        delegated_servers: &[std::net::IpAddr],
    ) -> Result<Self, Error> {
        let dir = tempfile::tempdir().map_err(Error::io("creating Unbound's directory"))?;
        let port = meridian_testkit::bind_server::free_dns_port().map_err(Error::Component)?;
        let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let config = dir.path().join("unbound.conf");
        std::fs::write(
            &config,
            // Not validating: the zone is unsigned here and has no trust anchor.
            meridian_testkit::unbound::config_text(
                dir.path(),
                address,
                zone,
                nameservers,
                delegated_servers,
                None,
            ),
        )
        .map_err(Error::io("writing unbound.conf"))?;
        let process = ManagedProcess::spawn(
            "unbound",
            std::path::Path::new("/usr/sbin/unbound"),
            &[
                "-d".to_string(),
                "-c".to_string(),
                config.display().to_string(),
            ],
            &dir.path().join("unbound.log"),
        )?;
        let resolver = Resolver {
            process,
            address,
            _dir: dir,
        };
        eventually("Unbound answers", DEFAULT_PATIENCE, || async {
            Ok(resolve(address, "localhost.", Duration::from_millis(500))
                .await
                .ok()
                .map(|_| ()))
        })
        .await
        .map_err(|e| Error::Component(format!("{e}; Unbound's log: {}", resolver.log_tail())))?;
        Ok(resolver)
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    pub fn log_tail(&self) -> String {
        self.process.log_tail()
    }
}

/// The IPv4 addresses `host` resolves to at `server` over UDP, CNAMEs followed by the server.
pub async fn resolve(
    server: SocketAddr,
    host: &str,
    timeout: Duration,
) -> Result<Vec<Ipv4Addr>, String> {
    use hickory_proto::op::{Message, MessageType, OpCode, Query};
    use hickory_proto::rr::{Name, RData, RecordType};
    let name = Name::from_ascii(host).map_err(|e| e.to_string())?;
    let mut message = Message::new(rand_id(), MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    message.add_query(Query::query(name, RecordType::A));
    let bytes = message.to_vec().map_err(|e| e.to_string())?;
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    socket
        .send_to(&bytes, server)
        .await
        .map_err(|e| e.to_string())?;
    let mut buffer = vec![0u8; 4096];
    let length = tokio::time::timeout(timeout, socket.recv(&mut buffer))
        .await
        .map_err(|_| "no answer in time".to_string())?
        .map_err(|e| e.to_string())?;
    let response = Message::from_vec(&buffer[..length]).map_err(|e| e.to_string())?;
    if response.metadata.response_code != hickory_proto::op::ResponseCode::NoError {
        return Err(format!("{}", response.metadata.response_code));
    }
    Ok(response
        .answers
        .iter()
        .filter_map(|record| match &record.data {
            RData::A(a) => Some(a.0),
            _ => None,
        })
        .collect())
}

fn rand_id() -> u16 {
    use std::hash::{BuildHasher, RandomState};
    (RandomState::new().hash_one(Instant::now()) & 0xffff) as u16
}

/// Sends `request` to `address` and reads the whole response: its status and body.
async fn http_exchange(
    address: SocketAddr,
    request: &str,
    timeout: Duration,
) -> Result<(u16, String), String> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(address)
            .await
            .map_err(|e| format!("connecting: {e}"))?;
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("writing: {e}"))?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .await
            .map_err(|e| format!("reading: {e}"))?;
        Ok::<_, String>(String::from_utf8_lossy(&response).into_owned())
    };
    let response = tokio::time::timeout(timeout, exchange)
        .await
        .map_err(|_| format!("no response in {timeout:?}"))??;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| format!("not an HTTP response: {response:?}"))?;
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, body)| body.trim().to_string())
        .unwrap_or_default();
    Ok((status, body))
}

/// What one client request got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// 200, and the cluster the demo app named.
    Served(String),
    /// No usable answer from the resolver.
    Unresolved(String),
    /// The gateway refused, failed or did not answer in time.
    Failed(String),
}

impl Outcome {
    pub fn succeeded(&self) -> bool {
        matches!(self, Outcome::Served(_))
    }
}

/// One request as a user's client sends it: resolve `host` through `resolver`, then
/// `GET /` on the first address answered, on the gateway port.
pub async fn request(resolver: SocketAddr, host: &str, timeout: Duration) -> Outcome {
    request_at(resolver, host, GATEWAY_PORT, timeout).await
}

/// [`request`] to gateways listening on `port`.
pub async fn request_at(resolver: SocketAddr, host: &str, port: u16, timeout: Duration) -> Outcome {
    let addresses = match resolve(resolver, host, timeout).await {
        Ok(addresses) if !addresses.is_empty() => addresses,
        Ok(_) => return Outcome::Unresolved("no address".into()),
        Err(problem) => return Outcome::Unresolved(problem),
    };
    let target = SocketAddr::from((addresses[0], port));
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    match http_exchange(target, &request, timeout).await {
        Ok((200, body)) => {
            Outcome::Served(body.strip_prefix("served by ").unwrap_or(&body).to_string())
        }
        Ok((status, _)) => Outcome::Failed(format!("{status} from {target}")),
        Err(problem) => Outcome::Failed(format!("{problem} ({target})")),
    }
}

/// When one client request was sent (since the clients started) and what it got.
#[derive(Debug, Clone)]
pub struct Sample {
    pub at: Duration,
    pub outcome: Outcome,
}

/// Client workers, each resolving through the resolver and requesting the host every
/// `period`; their samples are kept until taken.
#[derive(Debug)]
pub struct Clients {
    started: Instant,
    samples: Arc<Mutex<Vec<Sample>>>,
    workers: Vec<tokio::task::JoinHandle<()>>,
}

impl Clients {
    pub fn start(
        workers: usize,
        resolver: SocketAddr,
        host: &str,
        period: Duration,
        timeout: Duration,
    ) -> Self {
        Self::start_at(workers, resolver, (host, GATEWAY_PORT), period, timeout)
    }

    /// [`Self::start`] for gateways listening on `port`.
    pub fn start_at(
        workers: usize,
        resolver: SocketAddr,
        (host, port): (&str, u16),
        period: Duration,
        timeout: Duration,
    ) -> Self {
        let started = Instant::now();
        let samples = Arc::new(Mutex::new(Vec::new()));
        let workers = (0..workers)
            .map(|worker| {
                let samples = samples.clone();
                let host = host.to_string();
                tokio::spawn(async move {
                    // Spread the workers over the period, as independent users are.
                    tokio::time::sleep(period * worker as u32 / workers.max(1) as u32).await;
                    let mut ticks = tokio::time::interval(period);
                    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        ticks.tick().await;
                        // A request counts at the time it was sent: "requests succeed again
                        // from then on", without a timed-out request's wait added to it.
                        let at = started.elapsed();
                        let outcome = request_at(resolver, &host, port, timeout).await;
                        samples
                            .lock()
                            .unwrap_or_else(PoisonError::into_inner)
                            .push(Sample { at, outcome });
                    }
                })
            })
            .collect();
        Clients {
            started,
            samples,
            workers,
        }
    }

    /// Time since the clients started (the clock samples are on).
    pub fn now(&self) -> Duration {
        self.started.elapsed()
    }

    /// The samples since the last call.
    pub fn take(&self) -> Vec<Sample> {
        std::mem::take(&mut *self.samples.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl Drop for Clients {
    fn drop(&mut self) {
        for worker in &self.workers {
            worker.abort();
        }
    }
}

/// How clients fared from a fault (or a recovery) on, from their samples.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovery {
    /// Requests sent after the event.
    pub requests: usize,
    /// Of them, failed (unresolved, refused, 5xx, timed out).
    pub failed: usize,
    /// Seconds from the event until every one-second window after holds at least 99 %
    /// successful requests; `None` when the last window does not.
    pub until_99: Option<f64>,
    /// Seconds from the event until the last failed request (0 with none).
    pub until_100: Option<f64>,
    /// Requests served, per cluster.
    pub served_by: BTreeMap<String, usize>,
}

/// The recovery after an event at `event` (on the samples' clock), from the requests sent at or
/// after it.
pub fn recovery(samples: &[Sample], event: Duration) -> Recovery {
    let after: Vec<&Sample> = samples.iter().filter(|s| s.at >= event).collect();
    let failed_at: Vec<f64> = after
        .iter()
        .filter(|s| !s.outcome.succeeded())
        .map(|s| (s.at - event).as_secs_f64())
        .collect();
    let mut served_by = BTreeMap::new();
    for sample in &after {
        if let Outcome::Served(cluster) = &sample.outcome {
            *served_by.entry(cluster.clone()).or_insert(0) += 1;
        }
    }
    // One-second windows after the event: success ratio per window.
    let mut windows: BTreeMap<u64, (usize, usize)> = BTreeMap::new();
    for sample in &after {
        let window = windows
            .entry((sample.at - event).as_secs())
            .or_insert((0, 0));
        window.0 += 1;
        if sample.outcome.succeeded() {
            window.1 += 1;
        }
    }
    let good = |(total, ok): &(usize, usize)| *ok as f64 >= 0.99 * *total as f64;
    let until_99 = match windows.iter().rev().find(|(_, w)| !good(w)) {
        None => Some(0.0),
        Some((second, _)) if windows.keys().next_back() == Some(second) => None,
        Some((second, _)) => Some((*second + 1) as f64),
    };
    let all_succeed_at_the_end = after.last().is_none_or(|s| s.outcome.succeeded());
    let until_100 = if !all_succeed_at_the_end {
        None
    } else {
        Some(failed_at.iter().copied().fold(0.0, f64::max))
    };
    Recovery {
        requests: after.len(),
        failed: failed_at.len(),
        until_99,
        until_100,
        served_by,
    }
}

/// After a recovery at `event`: seconds until the first request `cluster` served, and until
/// every request from then on was `cluster`'s.
pub fn back_to(samples: &[Sample], event: Duration, cluster: &str) -> (Option<f64>, Option<f64>) {
    let after: Vec<&Sample> = samples.iter().filter(|s| s.at >= event).collect();
    let by_cluster = |s: &Sample| s.outcome == Outcome::Served(cluster.to_string());
    let first = after
        .iter()
        .find(|s| by_cluster(s))
        .map(|s| (s.at - event).as_secs_f64());
    let all = match after.iter().rposition(|s| !by_cluster(s)) {
        None => Some(0.0),
        Some(last) if last + 1 == after.len() => None,
        Some(last) => Some((after[last + 1].at - event).as_secs_f64()),
    };
    (first, all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(at_ms: u64, ok: bool) -> Sample {
        Sample {
            at: Duration::from_millis(at_ms),
            outcome: if ok {
                Outcome::Served("spoke-3".into())
            } else {
                Outcome::Failed("503".into())
            },
        }
    }

    #[test]
    fn recovery_times_come_from_the_last_failures_after_the_event() {
        // Event at 10 s; failures at 10.5 and 12.2 s, successes every 100 ms otherwise, and a
        // failure before the event that does not count.
        let mut samples = vec![sample(9_000, false)];
        for at in (10_000..20_000).step_by(100) {
            samples.push(sample(at, at != 10_500 && at != 12_200));
        }
        let after = recovery(&samples, Duration::from_secs(10));
        assert_eq!(after.requests, 100);
        assert_eq!(after.failed, 2);
        assert_eq!(after.until_100, Some(2.2));
        // The window 2–3 s after holds 1 failure in 10: under 99 %.
        assert_eq!(after.until_99, Some(3.0));
        assert_eq!(after.served_by["spoke-3"], 98);
    }

    #[test]
    fn traffic_is_back_once_every_later_request_is_the_recovered_cluster_s() {
        let served = |at_ms: u64, cluster: &str| Sample {
            at: Duration::from_millis(at_ms),
            outcome: Outcome::Served(cluster.into()),
        };
        let samples = vec![
            served(900, "spoke-3"),
            served(1_500, "spoke-3"),
            served(2_000, "spoke-1"),
            served(2_500, "spoke-3"),
            served(3_000, "spoke-1"),
            served(3_500, "spoke-1"),
        ];
        assert_eq!(
            back_to(&samples, Duration::from_secs(1), "spoke-1"),
            (Some(1.0), Some(2.0))
        );
        assert_eq!(
            back_to(&samples[..4], Duration::from_secs(1), "spoke-1"),
            (Some(1.0), None)
        );
        assert_eq!(
            back_to(&samples[..2], Duration::from_secs(1), "spoke-1"),
            (None, None)
        );
    }

    #[test]
    fn a_failure_to_the_end_is_no_recovery() {
        let samples = vec![sample(1_000, true), sample(1_500, false)];
        let stuck = recovery(&samples, Duration::ZERO);
        assert_eq!(stuck.until_100, None);
        assert_eq!(stuck.until_99, None);
        let clean = vec![sample(1_000, true), sample(1_500, true)];
        assert_eq!(recovery(&clean, Duration::ZERO).until_99, Some(0.0));
        assert_eq!(recovery(&clean, Duration::ZERO).until_100, Some(0.0));
    }
}
