//! The example deployment the hub's end-to-end test and `make demo` share: three spokes with
//! geo and cloud labels, the admin's objects for one multi-cluster Gateway with a DNSPolicy,
//! the gateway implementation's part on the spokes, a small GeoIP database, and `dig`.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use meridian_api::upstream::Gateway;
use meridian_testkit::fixtures;
use serde_json::{Value, json};

use crate::{DEFAULT_PATIENCE, Error, FleetBuilder, OcmDynamicApis, ensure_namespace, eventually};

pub const CLUSTER_SET: &str = "meridian";
pub const CLUSTER_SET_LABEL: &str = "cluster.open-cluster-management.io/clusterset";
pub const GEO_LABEL: &str = "kuadrant.io/lb-attribute-geo-code";
pub const CLOUD_LABEL: &str = "kuadrant.io/lb-attribute-cloud";
pub const PLACEMENT_LABEL: &str = "cluster.open-cluster-management.io/placement";
/// The hub namespace of the example Gateway, policy and zone.
pub const NAMESPACE: &str = "gateways";
pub const GATEWAY: &str = "prod-web";
pub const HOST: &str = "api.example.com";
pub const ZONE_DOMAIN: &str = "example.com";

/// Client subnets the example GeoIP database places: Ireland, the United States, France.
pub const IRELAND: &str = "192.0.2.0/24";
pub const UNITED_STATES: &str = "198.51.100.0/24";
pub const FRANCE: &str = "203.0.113.0/24";

/// The example spokes: name, geo code, cloud, and the address their Gateway gets.
pub const SPOKES: [(&str, &str, &str, &str); 3] = [
    ("spoke-1", "IE", "AWS", "10.0.0.1"),
    ("spoke-2", "US", "AWS", "10.0.0.2"),
    ("spoke-3", "GEO-EU", "Azure", "10.0.0.3"),
];

/// Adds the example spokes, labelled, to a fleet.
pub fn with_example_spokes(mut builder: FleetBuilder) -> FleetBuilder {
    for (name, geo, cloud, _) in SPOKES {
        builder = builder.spoke(
            name,
            [
                (CLUSTER_SET_LABEL, CLUSTER_SET),
                (GEO_LABEL, geo),
                (CLOUD_LABEL, cloud),
            ],
        );
    }
    builder
}

/// Writes the example GeoIP database (MaxMind format) to `path`.
pub fn write_geoip(path: &Path) -> Result<(), Error> {
    let database = meridian_testkit::geo_db::write_database(&[
        (IRELAND.parse().expect("a network"), "IE", "EU"),
        (UNITED_STATES.parse().expect("a network"), "US", "NA"),
        (FRANCE.parse().expect("a network"), "FR", "EU"),
    ]);
    std::fs::write(path, database).map_err(Error::io("writing the GeoIP database"))
}

/// Server-side applies an object through `api` as the example's admin.
pub async fn apply<K>(api: &Api<K>, object: Value) -> Result<K, Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let name = object["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok(api
        .patch(
            &name,
            &PatchParams::apply("example-admin").force(),
            &Patch::Apply(&object),
        )
        .await?)
}

/// Applies the ManagedZone `namespace/zone` for `domain` with no provider: the hub's embedded
/// nameserver serves it. Returns the namespace's ManagedZone API.
pub async fn embedded_zone(
    client: &Client,
    namespace: &str,
    domain: &str,
) -> Result<Api<meridian_api::kuadrant::ManagedZone>, Error> {
    let zones = Api::namespaced(client.clone(), namespace);
    apply(
        &zones,
        fixtures::managed_zone(namespace, "zone", domain).json(),
    )
    .await?;
    Ok(zones)
}

/// Server-side applies a ManagedClusterSet, ManagedClusterSetBinding or Placement.
pub async fn apply_ocm(client: &Client, object: Value) -> Result<(), Error> {
    let object: DynamicObject = serde_json::from_value(object).expect("a valid object");
    let kind = object.types.clone().expect("apiVersion and kind").kind;
    let resource = [
        OcmDynamicApis::managed_cluster_set(),
        OcmDynamicApis::managed_cluster_set_binding(),
        OcmDynamicApis::placement(),
    ]
    .into_iter()
    .find(|r| r.kind == kind)
    .expect("a known OCM kind");
    let api: Api<DynamicObject> = match object.namespace() {
        Some(namespace) => Api::namespaced_with(client.clone(), &namespace, &resource),
        None => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        &object.name_any(),
        &PatchParams::apply("example-admin").force(),
        &Patch::Apply(&object),
    )
    .await?;
    Ok(())
}

/// The Placement `everywhere`: every cluster of the set, except those labelled with one of
/// `excluded_geos`.
pub fn placement(excluded_geos: &[&str]) -> Value {
    let predicates = if excluded_geos.is_empty() {
        json!([])
    } else {
        json!([{ "requiredClusterSelector": { "labelSelector": {
            "matchExpressions": [{ "key": GEO_LABEL, "operator": "NotIn", "values": excluded_geos }],
        } } }])
    };
    json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
        "metadata": { "name": "everywhere", "namespace": NAMESPACE },
        "spec": { "clusterSets": [CLUSTER_SET], "predicates": predicates },
    })
}

/// The example DNSPolicy: load-balanced, GEO with `IE` as the default, Azure clusters weighted
/// `azure_weight` against 120 for the rest.
pub fn dns_policy(azure_weight: i64) -> Value {
    json!({
        "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
        "metadata": { "name": GATEWAY, "namespace": NAMESPACE },
        "spec": {
            "targetRef": { "name": GATEWAY },
            "routingStrategy": "loadbalanced",
            "loadBalancing": {
                "weighted": { "defaultWeight": 120, "custom": [{ "attribute": "cloud", "value": "Azure", "weight": azure_weight }] },
                "geo": { "defaultGeo": "IE" },
            },
        },
    })
}

/// The admin's side: a cluster set bound to the namespace, a Placement of every cluster, a
/// multi-cluster Gateway placed by it (one listener in the zone, one outside any zone), a
/// ManagedZone without a provider secret (served by the hub), and the DNSPolicy.
pub async fn install(hub: &Client) -> Result<(), Error> {
    ensure_namespace(hub, NAMESPACE).await?;
    apply_ocm(
        hub,
        json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSet",
            "metadata": { "name": CLUSTER_SET },
            "spec": { "clusterSelector": { "selectorType": "ExclusiveClusterSetLabel" } },
        }),
    )
    .await?;
    apply_ocm(hub, json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
        "metadata": { "name": CLUSTER_SET, "namespace": NAMESPACE },
        "spec": { "clusterSet": CLUSTER_SET },
    }))
    .await?;
    apply_ocm(hub, placement(&[])).await?;
    apply(
        &Api::<Gateway>::namespaced(hub.clone(), NAMESPACE),
        fixtures::gateway(NAMESPACE, GATEWAY)
            .placement("everywhere")
            .listener("api", HOST, 80, "HTTP")
            .listener("elsewhere", "www.example.org", 80, "HTTP")
            .json(),
    )
    .await?;
    apply(
        &Api::<meridian_api::kuadrant::ManagedZone>::namespaced(hub.clone(), NAMESPACE),
        fixtures::managed_zone(NAMESPACE, "example", ZONE_DOMAIN).json(),
    )
    .await?;
    apply(
        &Api::<meridian_api::kuadrant::DNSPolicy>::namespaced(hub.clone(), NAMESPACE),
        dns_policy(30),
    )
    .await?;
    Ok(())
}

/// The gateway implementation's part (there is no Istio here): once the work agent created the
/// downstream Gateway on the spoke, give it an address and count one route on its listener.
pub async fn serve_gateway(spoke: &Client, ip: &str) -> Result<(), Error> {
    let gateways: Api<Gateway> = Api::namespaced(spoke.clone(), &format!("kuadrant-{NAMESPACE}"));
    eventually(
        "the work agent creates the downstream Gateway",
        DEFAULT_PATIENCE,
        || {
            let gateways = gateways.clone();
            async move { Ok(gateways.get_opt(GATEWAY).await?) }
        },
    )
    .await?;
    let status = fixtures::gateway_status(&[ip], &[("api", 1)]);
    gateways
        .patch_status(
            GATEWAY,
            &PatchParams::apply("gateway-implementation").force(),
            &Patch::Apply(&status),
        )
        .await?;
    Ok(())
}

/// The hub kubeconfig the hub delivered to a spoke for its agent (where the work agent put it).
pub async fn delivered_hub_kubeconfig(spoke: &Client) -> Result<Vec<u8>, Error> {
    let secrets: Api<Secret> = Api::namespaced(spoke.clone(), "meridian-system");
    let secret = eventually(
        "the hub delivers the agent's hub kubeconfig",
        DEFAULT_PATIENCE,
        || {
            let secrets = secrets.clone();
            async move { Ok(secrets.get_opt("meridian-hub-kubeconfig").await?) }
        },
    )
    .await?;
    Ok(secret
        .data
        .and_then(|d| d.get("kubeconfig").cloned())
        .map(|b| b.0)
        .unwrap_or_default())
}

/// A client from a kubeconfig file.
pub async fn client_from_file(path: &Path) -> Result<Client, Error> {
    let config = kube::config::Kubeconfig::read_from(path)?;
    Ok(Client::try_from(
        kube::Config::from_custom_kubeconfig(config, &Default::default()).await?,
    )?)
}

/// `dig +short` for `HOST A` at `server`, optionally as a client in `subnet` (EDNS Client
/// Subnet); the addresses answered, sorted.
pub fn dig(server: SocketAddr, subnet: Option<&str>) -> Vec<String> {
    dig_host(server, HOST, subnet)
}

/// `dig` asking `server` (its address and port) with `options`, two tries of two seconds,
/// for the answers alone.
pub fn dig_at(server: SocketAddr, options: &[&str]) -> Command {
    let mut command = Command::new("dig");
    command
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string()])
        .args(options)
        .args(["+time=2", "+tries=2", "+short"]);
    command
}

/// `dig +short` for `name` and `kind` at `server`: the answer lines, sorted.
pub fn dig_short(server: SocketAddr, name: &str, kind: &str) -> Vec<String> {
    let output = dig_at(server, &[])
        .args([name, kind])
        .output()
        .expect("dig runs (Debian dnsutils)");
    let mut lines: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with(';'))
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// The SOA serial `server` serves for the zone at `apex`.
pub fn soa_serial(server: SocketAddr, apex: &str) -> Option<u32> {
    let output = dig_at(server, &[]).args([apex, "SOA"]).output().ok()?;
    // "mname rname serial refresh retry expire minimum"
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .next()?
        .split_whitespace()
        .nth(2)?
        .parse()
        .ok()
}

/// Waits until every server in `servers` serves the SOA serial the leader wrote to the status
/// of the ManagedZone `zone` (the others take it once their records match its digest), and
/// returns it.
pub async fn one_serial_everywhere<const N: usize>(
    zones: &Api<meridian_api::kuadrant::ManagedZone>,
    zone: &str,
    servers: [SocketAddr; N],
) -> Result<u32, Error> {
    eventually(
        "every server serves the leader's serial",
        DEFAULT_PATIENCE,
        || async move {
            let zone = zones.get(zone).await?;
            let apex = zone.spec.domain_name.clone();
            let Some(serial) = zone.status.and_then(|s| s.serial) else {
                return Ok(None);
            };
            let served = tokio::task::spawn_blocking(move || {
                servers.map(|server| soa_serial(server, &apex))
            })
            .await
            .expect("dig ran");
            Ok(served.iter().all(|s| *s == Some(serial)).then_some(serial))
        },
    )
    .await
}

/// [`dig_host`] on a blocking thread, for async tests.
pub async fn dig_host_async(server: SocketAddr, host: &str, subnet: Option<&str>) -> Vec<String> {
    let (host, subnet) = (host.to_string(), subnet.map(str::to_string));
    tokio::task::spawn_blocking(move || dig_host(server, &host, subnet.as_deref()))
        .await
        .expect("dig ran")
}

/// `dig +short` for `host A` at `server`, optionally from `subnet` (EDNS Client Subnet); the
/// IPv4 addresses answered (CNAME chains followed), sorted.
pub fn dig_host(server: SocketAddr, host: &str, subnet: Option<&str>) -> Vec<String> {
    let mut command = dig_at(server, &[]);
    if let Some(subnet) = subnet {
        command.arg(format!("+subnet={subnet}"));
    }
    command.args([host, "A"]);
    let Ok(output) = command.output() else {
        return Vec::new();
    };
    let mut answers: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|l| l.parse::<std::net::Ipv4Addr>().is_ok())
        .map(str::to_string)
        .collect();
    answers.sort();
    answers
}

/// What a server said to one `A` query: its response code (`None` when nothing came back in
/// two tries of two seconds) and the IPv4 addresses in its answer (a resolver's answer carries
/// the CNAME chain it followed; its CNAMEs are left out), sorted.
/// Tells a resolver that gave up (SERVFAIL, silence) from a name that does not answer (NXDOMAIN,
/// or NOERROR with no address), which `dig +short` cannot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigOutcome {
    pub status: Option<String>,
    pub answers: Vec<String>,
    /// The answer's CNAME records, in order: (owner, target).
    pub cnames: Vec<(String, String)>,
}

impl DigOutcome {
    /// The server gave up, or nothing came back: says nothing about the name itself.
    pub fn unanswered(&self) -> bool {
        self.status
            .as_deref()
            .is_none_or(|status| status == "SERVFAIL")
    }
}

/// As [`dig_host_async`], keeping the response code: see [`DigOutcome`].
pub async fn dig_outcome_async(server: SocketAddr, host: &str, subnet: Option<&str>) -> DigOutcome {
    let mut command = tokio::process::Command::new("dig");
    command
        .arg(format!("@{}", server.ip()))
        .args(["-p", &server.port().to_string()])
        .args(["+time=2", "+tries=2", "+noall", "+comments", "+answer"]);
    if let Some(subnet) = subnet {
        command.arg(format!("+subnet={subnet}"));
    }
    command.args([host, "A"]);
    let text = match command.output().await {
        Ok(output) => String::from_utf8_lossy(&output.stdout).into_owned(),
        Err(_) => String::new(),
    };
    let status = text
        .split_once("status: ")
        .and_then(|(_, rest)| rest.split(',').next())
        .map(str::to_string);
    let mut answers: Vec<String> = text
        .lines()
        .filter(|line| !line.starts_with(';'))
        .filter_map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [_, _, "IN", "A", address] => Some(address.to_string()),
                _ => None,
            },
        )
        .collect();
    answers.sort();
    let cnames = text
        .lines()
        .filter(|line| !line.starts_with(';'))
        .filter_map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [owner, _, "IN", "CNAME", target] => Some((
                    owner.trim_end_matches('.').to_string(),
                    target.trim_end_matches('.').to_string(),
                )),
                _ => None,
            },
        )
        .collect();
    DigOutcome {
        status,
        answers,
        cnames,
    }
}

/// `dig +dnssec` for `host A` at a validating `resolver`, optionally from `subnet`: whether
/// the answer was validated (the AD flag) and its IPv4 addresses, sorted.
pub fn dig_validated(
    resolver: SocketAddr,
    host: &str,
    qtype: &str,
    subnet: Option<&str>,
) -> (bool, Vec<String>) {
    let mut command = Command::new("dig");
    command.arg(format!("@{}", resolver.ip())).args([
        "-p",
        &resolver.port().to_string(),
        "+dnssec",
        "+time=3",
        "+tries=2",
    ]);
    if let Some(subnet) = subnet {
        command.arg(format!("+subnet={subnet}"));
    }
    let Ok(output) = command.args([host, qtype]).output() else {
        return (false, Vec::new());
    };
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    // ";; flags: qr rd ra ad; QUERY: 1, ..."
    let validated = text.lines().any(|line| {
        line.strip_prefix(";; flags:")
            .and_then(|flags| flags.split(';').next())
            .is_some_and(|flags| flags.split_whitespace().any(|flag| flag == "ad"))
    });
    let mut addresses: Vec<String> = text
        .lines()
        .filter(|line| !line.starts_with(';'))
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() == 5 && fields[3] == "A").then(|| fields[4].to_string())
        })
        .collect();
    addresses.sort();
    (validated, addresses)
}

/// Turns DNSSEC on for the ManagedZone `zone` in `namespace` (merged into its spec, with
/// `rollover_step` if given) and waits for the DS record the leading hub puts in its status.
pub async fn sign_zone(
    hub: &Client,
    namespace: &str,
    zone: &str,
    rollover_step: Option<&str>,
) -> Result<String, Error> {
    let zones: Api<meridian_api::kuadrant::ManagedZone> = Api::namespaced(hub.clone(), namespace);
    let mut dnssec = json!({ "enabled": true });
    if let Some(step) = rollover_step {
        dnssec["rolloverStep"] = json!(step);
    }
    zones
        .patch(
            zone,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({ "spec": { "dnssec": dnssec } })),
        )
        .await?;
    eventually("the zone's DS is in its status", DEFAULT_PATIENCE, || {
        let zones = zones.clone();
        async move {
            let ds = zones
                .get(zone)
                .await?
                .status
                .and_then(|s| s.dnssec)
                .and_then(|d| d.ds);
            Ok(ds)
        }
    })
    .await
}

/// The example running: the hub in this process, the example installed, each spoke's Gateway
/// served and its agent running (in this process, with the credentials the hub delivered).
#[derive(Debug)]
pub struct RunningExample {
    pub hub: meridian_hub::run_command::RunningHub,
    /// One per example spoke, in [`SPOKES`] order.
    pub agents: Vec<tokio::task::JoinHandle<anyhow::Result<()>>>,
    /// Holds the GeoIP database and the agents' kubeconfigs.
    pub dir: tempfile::TempDir,
    /// How each agent was started, to start it again.
    agent_starts: Vec<AgentStart>,
}

#[derive(Clone)]
struct AgentStart {
    spoke: String,
    spoke_client: Client,
    hub_client: Client,
    options: meridian_agent::HubModeOptions,
}

impl std::fmt::Debug for AgentStart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentStart")
            .field("spoke", &self.spoke)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl AgentStart {
    fn spawn(&self) -> tokio::task::JoinHandle<anyhow::Result<()>> {
        tokio::spawn(meridian_agent::run_hub_mode(
            self.spoke_client.clone(),
            self.hub_client.clone(),
            self.spoke.clone(),
            self.options.clone(),
        ))
    }
}

impl RunningExample {
    pub async fn start(
        fleet: &crate::Fleet,
        heartbeat: std::time::Duration,
    ) -> Result<Self, Error> {
        Self::start_with(fleet, heartbeat, None).await
    }

    /// [`Self::start`], or with `real_gateways` the example with this DNSPolicy on spokes whose
    /// gateway implementation runs (it writes the Gateways' addresses, the test bed does not),
    /// each agent probing from its spoke node's address as it would from its own cluster.
    pub async fn start_with(
        fleet: &crate::Fleet,
        heartbeat: std::time::Duration,
        real_gateways: Option<Value>,
    ) -> Result<Self, Error> {
        Self::start_configured(fleet, heartbeat, real_gateways, |_| {}).await
    }

    /// [`Self::start_with`], with the hub's flags as `configure` leaves them (the admin's
    /// grants of provider addresses, for example).
    pub async fn start_configured(
        fleet: &crate::Fleet,
        heartbeat: std::time::Duration,
        real_gateways: Option<Value>,
        configure: impl FnOnce(&mut meridian_hub::run_command::RunArgs),
    ) -> Result<Self, Error> {
        let dir = tempfile::tempdir().map_err(Error::io("creating the example's directory"))?;
        let geoip = dir.path().join("country.mmdb");
        write_geoip(&geoip)?;
        let mut args = meridian_hub::run_command::RunArgs::local(fleet.hub.kubeconfig_path());
        args.geoip = Some(geoip);
        configure(&mut args);
        let hub = meridian_hub::run_command::RunningHub::start(&args)
            .await
            .map_err(|e| Error::Component(format!("starting the hub: {e}")))?;
        install(&fleet.hub.client()).await?;
        if let Some(policy) = &real_gateways {
            apply(
                &Api::<meridian_api::kuadrant::DNSPolicy>::namespaced(
                    fleet.hub.client(),
                    NAMESPACE,
                ),
                policy.clone(),
            )
            .await?;
        }
        let mut agent_starts = Vec::new();
        for (spoke, _, _, ip) in SPOKES {
            let spoke_client = fleet.spoke(spoke).client();
            let mut options = meridian_agent::HubModeOptions::with_heartbeat(heartbeat);
            if real_gateways.is_some() {
                options.probe_source = fleet
                    .spoke(spoke)
                    .node()
                    .map(|node| std::net::IpAddr::V4(node.address()));
            } else {
                serve_gateway(&spoke_client, ip).await?;
            }
            let kubeconfig = dir.path().join(format!("{spoke}-agent-hub.kubeconfig"));
            std::fs::write(&kubeconfig, delivered_hub_kubeconfig(&spoke_client).await?)
                .map_err(Error::io("writing an agent kubeconfig"))?;
            agent_starts.push(AgentStart {
                spoke: spoke.to_string(),
                hub_client: client_from_file(&kubeconfig).await?,
                spoke_client,
                options,
            });
        }
        let agents = agent_starts.iter().map(AgentStart::spawn).collect();
        Ok(RunningExample {
            hub,
            agents,
            dir,
            agent_starts,
        })
    }

    fn agent_index(&self, spoke: &str) -> usize {
        self.agent_starts
            .iter()
            .position(|start| start.spoke == spoke)
            .unwrap_or_else(|| panic!("no agent for {spoke}"))
    }

    /// Stops `spoke`'s agent, as if its cluster went away.
    pub fn stop_agent(&mut self, spoke: &str) {
        let index = self.agent_index(spoke);
        self.agents[index].abort();
    }

    /// Starts `spoke`'s agent again, as it was first started.
    pub fn restart_agent(&mut self, spoke: &str) {
        let index = self.agent_index(spoke);
        self.agents[index].abort();
        self.agents[index] = self.agent_starts[index].spawn();
    }

    pub async fn stop(self) {
        self.hub.stop().await;
        for agent in self.agents {
            agent.abort();
        }
    }
}

/// Sets the address of the example Gateway on a spoke, as its gateway implementation would.
/// The message of a DNSRecord's `Ready` condition (empty while the record or its status is
/// missing).
/// The records a hub publishes for `host` on Gateway `prod-web` in `gateway_namespace` with a
/// GEO policy defaulting to IE and default weights, for `clusters` given as (cluster ID,
/// address, geo code).
pub fn geo_tree(
    host: &str,
    gateway_namespace: &str,
    clusters: &[(&str, &str, &str)],
) -> Vec<meridian_dns::model::Endpoint> {
    use meridian_dns::tree::{Address, ClusterTarget, GatewayRef, LoadBalancing, Strategy};
    let targets: Vec<ClusterTarget> = clusters
        .iter()
        .map(|(id, address, geo)| ClusterTarget {
            name: id.to_string(),
            cluster_id: id.to_string(),
            labels: [(GEO_LABEL.to_string(), geo.to_string())].into(),
            addresses: vec![Address::Ip(address.parse().expect("an IP address"))],
            attached_routes: Some(1),
            weight_percent: 100,
        })
        .collect();
    let strategy = Strategy::LoadBalanced(LoadBalancing {
        default_weight: 120,
        custom: Vec::new(),
        default_geo: Some("IE".into()),
        tiers: None,
    });
    let gateway = GatewayRef {
        name: GATEWAY.into(),
        namespace: gateway_namespace.into(),
    };
    meridian_dns::tree::build_record_tree(host, &gateway, &strategy, &targets)
        .expect("a valid tree")
        .endpoints()
}

pub async fn ready_message(
    records: &Api<meridian_api::kuadrant::DNSRecord>,
    name: &str,
) -> Result<String, Error> {
    Ok(records
        .get_opt(name)
        .await?
        .iter()
        .flat_map(|r| r.status.iter())
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == meridian_api::conditions::READY)
        .map(|c| c.message.clone())
        .unwrap_or_default())
}

pub async fn set_gateway_address(spoke: &Client, ip: &str) -> Result<(), Error> {
    serve_gateway(spoke, ip).await
}
