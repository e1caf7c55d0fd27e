//! A fleet of synthetic clusters written into a hub the way OCM, the agents and the admins
//! would (ManagedClusters with geo and custom-weight labels and their namespaces, one report
//! and heartbeat Lease per cluster, PlacementDecisions of [`CLUSTERS_PER_GATEWAY`] clusters per
//! Gateway, Gateways with one listener each in the example's embedded zone, one DNSPolicy
//! each), and address changes timed at every server of the zone. Shared by
//! `make bench-hub-scale` and the install test, so the bench measures what the test proves.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RData, RecordType};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Resource};
use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::meridian::ClusterReport;
use meridian_api::upstream::{Gateway, ManagedCluster, PlacementDecision};
use meridian_testkit::fixtures;
use serde_json::{Value, json};

use crate::Error;
use crate::example::{NAMESPACE, ZONE_DOMAIN};

pub const CLUSTERS_PER_GATEWAY: usize = 5;
/// Writes sent at once while writing the fleet.
const WRITES_AT_ONCE: usize = 16;

/// How each Gateway's DNSPolicy routes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// One A record per host holding its clusters' addresses.
    Simple,
    /// GEO by the clusters' geo labels (IE by default) and weights: a leaf per cluster.
    LoadBalanced,
}

/// Which clusters each Gateway is placed on, and each cluster's address for it.
#[derive(Debug, Clone)]
pub struct SyntheticFleet {
    pub clusters: usize,
    pub gateways: usize,
    pub strategy: Strategy,
    /// Where the names start, so a second fleet on one hub takes other names.
    pub first_cluster: usize,
}

impl SyntheticFleet {
    pub fn cluster(&self, i: usize) -> String {
        format!("cluster-{:04}", self.first_cluster + i)
    }

    pub fn gateway(&self, j: usize) -> String {
        format!("gw-{j:04}")
    }

    pub fn host(&self, j: usize) -> String {
        format!("{}.{ZONE_DOMAIN}", self.gateway(j))
    }

    /// The DNSRecord the policy writes for Gateway `j`'s one listener.
    pub fn record(&self, j: usize) -> String {
        format!("{}-http", self.gateway(j))
    }

    /// The clusters Gateway `j` is placed on: 5 consecutive ones, spread over the fleet.
    pub fn placed(&self, j: usize) -> Vec<usize> {
        let start = (j * CLUSTERS_PER_GATEWAY) % self.clusters;
        (0..CLUSTERS_PER_GATEWAY)
            .map(|k| (start + k) % self.clusters)
            .collect()
    }

    /// The Gateways placed on cluster `i`.
    pub fn gateways_on(&self, i: usize) -> Vec<usize> {
        (0..self.gateways)
            .filter(|j| self.placed(*j).contains(&i))
            .collect()
    }

    /// Cluster `i`'s first address for Gateway `j`.
    pub fn address(&self, i: usize, j: usize) -> String {
        format!("10.{}.{}.{}", 100 + i / 250, i % 250, j % 250 + 1)
    }

    /// Cluster `i`'s report, its Gateways at their first addresses but for `overrides`
    /// (Gateway → address).
    pub fn report(&self, i: usize, overrides: &BTreeMap<usize, String>) -> Value {
        let gateways: Vec<Value> = self
            .gateways_on(i)
            .into_iter()
            .map(|j| {
                let address = overrides
                    .get(&j)
                    .cloned()
                    .unwrap_or_else(|| self.address(i, j));
                json!({
                    "name": self.gateway(j),
                    "namespace": format!("kuadrant-{NAMESPACE}"),
                    "addresses": [{ "type": "IPAddress", "value": address }],
                    "listeners": [{ "name": "http", "hostname": self.host(j), "attachedRoutes": 1 }],
                })
            })
            .collect();
        json!({
            "apiVersion": ClusterReport::api_version(&()),
            "kind": "ClusterReport",
            "metadata": { "name": "agent", "namespace": self.cluster(i) },
            "spec": {
                "clusterID": format!("id-{}", self.first_cluster + i),
                "reportedAt": Timestamp::now().to_string(),
                "gateways": gateways,
            },
        })
    }

    fn policy_spec(&self, gateway: &str) -> Value {
        let target =
            json!({ "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway });
        match self.strategy {
            Strategy::Simple => json!({ "targetRef": target, "routingStrategy": "simple" }),
            Strategy::LoadBalanced => json!({
                "targetRef": target,
                "routingStrategy": "loadbalanced",
                "loadBalancing": { "geo": { "defaultGeo": "IE" }, "weighted": { "defaultWeight": 120 } },
            }),
        }
    }
}

/// Server-side apply under the fleet's own field manager.
pub async fn apply<K>(api: &Api<K>, name: &str, object: Value) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply("meridian-synthetic-fleet").force(),
        &Patch::Apply(object),
    )
    .await?;
    Ok(())
}

/// Runs `writes` [`WRITES_AT_ONCE`] at a time.
async fn all_of(
    writes: Vec<futures::future::BoxFuture<'static, Result<(), Error>>>,
) -> Result<(), Error> {
    futures::stream::iter(writes)
        .buffer_unordered(WRITES_AT_ONCE)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// A cluster's heartbeat Lease, renewed now.
pub fn lease(cluster: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": { "name": meridian_api::names::HEARTBEAT_LEASE, "namespace": cluster,
            "labels": { meridian_api::labels::HEARTBEAT_LABEL: "true" } },
        "spec": {
            "holderIdentity": cluster,
            "leaseDurationSeconds": 30,
            "renewTime": k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(Timestamp::now()),
        },
    })
}

/// Writes what OCM, the agents and the admins would have written for `fleet`, in the example's
/// namespace and embedded zone (`example.com`, signed when `dnssec`).
pub async fn write_fleet(
    client: &Client,
    fleet: &SyntheticFleet,
    dnssec: bool,
) -> Result<(), Error> {
    let namespace = |name: &str| json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": name } });
    apply(
        &Api::<Namespace>::all(client.clone()),
        NAMESPACE,
        namespace(NAMESPACE),
    )
    .await?;
    let mut zone = json!({ "domainName": ZONE_DOMAIN });
    if dnssec {
        zone["dnssec"] = json!({ "enabled": true });
    }
    apply(
        &Api::<ManagedZone>::namespaced(client.clone(), NAMESPACE),
        "example",
        json!({
            "apiVersion": ManagedZone::api_version(&()), "kind": "ManagedZone",
            "metadata": { "name": "example", "namespace": NAMESPACE },
            "spec": zone,
        }),
    )
    .await?;
    let geos = ["IE", "US", "GEO-EU"];
    let mut writes: Vec<futures::future::BoxFuture<'static, Result<(), Error>>> = Vec::new();
    for i in 0..fleet.clusters {
        let (client, fleet) = (client.clone(), fleet.clone());
        writes.push(Box::pin(async move {
            let name = fleet.cluster(i);
            apply(&Api::<Namespace>::all(client.clone()), &name, namespace(&name)).await?;
            apply(
                &Api::<ManagedCluster>::all(client.clone()),
                &name,
                json!({
                    "apiVersion": ManagedCluster::api_version(&()), "kind": "ManagedCluster",
                    "metadata": { "name": name, "labels": {
                        meridian_api::labels::GEO_CODE_LABEL: geos[i % geos.len()],
                        "kuadrant.io/lb-attribute-custom-weight": if i % 2 == 0 { "AWS" } else { "GCP" },
                    } },
                    "spec": { "hubAcceptsClient": true },
                }),
            )
            .await?;
            apply(
                &Api::<ClusterReport>::namespaced(client.clone(), &name),
                "agent",
                fleet.report(i, &BTreeMap::new()),
            )
            .await?;
            apply(
                &Api::<Lease>::namespaced(client.clone(), &name),
                meridian_api::names::HEARTBEAT_LEASE,
                lease(&name),
            )
            .await
        }));
    }
    all_of(writes).await?;
    let mut writes: Vec<futures::future::BoxFuture<'static, Result<(), Error>>> = Vec::new();
    for j in 0..fleet.gateways {
        let (client, fleet) = (client.clone(), fleet.clone());
        writes.push(Box::pin(async move {
            let gateway = fleet.gateway(j);
            let decisions: Api<PlacementDecision> = Api::namespaced(client.clone(), NAMESPACE);
            let decision = format!("{gateway}-decision-1");
            apply(
                &decisions,
                &decision,
                json!({
                    "apiVersion": PlacementDecision::api_version(&()), "kind": "PlacementDecision",
                    "metadata": { "name": decision, "namespace": NAMESPACE,
                        "labels": { meridian_api::labels::PLACEMENT_LABEL: gateway } },
                }),
            )
            .await?;
            let clusters: Vec<Value> = fleet
                .placed(j)
                .into_iter()
                .map(|i| json!({ "clusterName": fleet.cluster(i), "reason": "synthetic" }))
                .collect();
            decisions
                .patch_status(
                    &decision,
                    &PatchParams::default(),
                    &Patch::Merge(json!({ "status": { "decisions": clusters } })),
                )
                .await?;
            apply(
                &Api::<Gateway>::namespaced(client.clone(), NAMESPACE),
                &gateway,
                fixtures::gateway(NAMESPACE, &gateway)
                    .placement(&gateway)
                    .listener("http", &fleet.host(j), 80, "HTTP")
                    .json(),
            )
            .await?;
            apply(
                &Api::<DNSPolicy>::namespaced(client.clone(), NAMESPACE),
                &gateway,
                json!({
                    "apiVersion": DNSPolicy::api_version(&()), "kind": "DNSPolicy",
                    "metadata": { "name": gateway, "namespace": NAMESPACE },
                    "spec": fleet.policy_spec(&gateway),
                }),
            )
            .await
        }));
    }
    all_of(writes).await
}

/// The A records `server` answers for `name` (none on any failure), asked without a client
/// subnet.
pub fn query_a(server: SocketAddr, name: &str) -> Vec<Ipv4Addr> {
    let Ok(name) = Name::from_ascii(format!("{name}.")) else {
        return Vec::new();
    };
    let mut message = Message::query();
    message.metadata.id = rand_id();
    message.add_query(Query::query(name, RecordType::A));
    let Ok(bytes) = message.to_vec() else {
        return Vec::new();
    };
    let Ok(socket) = UdpSocket::bind(if server.is_ipv4() {
        "0.0.0.0:0"
    } else {
        "[::]:0"
    }) else {
        return Vec::new();
    };
    let _ = socket.set_read_timeout(Some(Duration::from_secs(1)));
    if socket.send_to(&bytes, server).is_err() {
        return Vec::new();
    }
    let mut buffer = [0u8; 4096];
    let Ok(n) = socket.recv(&mut buffer) else {
        return Vec::new();
    };
    Message::from_vec(&buffer[..n])
        .map(|response| {
            response
                .answers
                .iter()
                .filter_map(|record| match &record.data {
                    RData::A(a) => Some(a.0),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default()
}

fn rand_id() -> u16 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    (nanos ^ (nanos >> 16)) as u16
}

/// Waits until `server` answers every host of `fleet` (a standby or an agent mirroring the
/// zone), at most `patience`.
pub async fn wait_answering(
    fleet: &SyntheticFleet,
    server: SocketAddr,
    patience: Duration,
) -> Result<(), Error> {
    let started = Instant::now();
    for j in 0..fleet.gateways {
        let host = fleet.host(j);
        loop {
            let asked = host.clone();
            let answered = tokio::task::spawn_blocking(move || query_a(server, &asked))
                .await
                .unwrap_or_default();
            if !answered.is_empty() {
                break;
            }
            if started.elapsed() > patience {
                return Err(Error::Component(format!(
                    "{server} does not answer {host} after {patience:?}"
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    Ok(())
}

/// One address change as every server answered it.
#[derive(Debug, Clone)]
pub struct TimedChange {
    /// The name whose answer changed (the host, or the cluster's leaf) and its new address.
    pub name: String,
    pub address: String,
    /// From the change (the report written) until the record's `status.endpoints` held it.
    pub published: Option<Duration>,
    /// Per server, from the change until it answered the new address (none: not within the
    /// patience).
    pub answered: Vec<Option<Duration>>,
    /// Per server, what it answered last (for a server that never answered the new address).
    pub last_answer: Vec<Vec<Ipv4Addr>>,
}

impl TimedChange {
    /// Per server, how long after status said the address was published it answered it
    /// (zero when it answered before status was seen).
    pub fn after_status(&self) -> Vec<Option<Duration>> {
        self.answered
            .iter()
            .map(|answered| Some(answered.as_ref()?.saturating_sub(self.published?)))
            .collect()
    }
}

/// Address changes to make in a row: cluster `cluster`'s address for Gateway `gateway` set to
/// each of `addresses` in turn. With `churn` (round, count), `count` other Gateways of the fleet
/// get new addresses in the same moments, each by its own cluster's report.
#[derive(Debug, Clone)]
pub struct ChangeRun {
    pub cluster: usize,
    pub gateway: usize,
    pub addresses: Vec<String>,
    pub churn: Option<(u8, usize)>,
}

/// Makes `run`'s changes by rewriting the clusters' reports as their agents would; after each,
/// asks every server in `servers` directly until each answers the new address (at most
/// `patience` from the change) and reads the record's status until it holds it. `overrides`
/// carries the addresses given so far (cluster, Gateway → address).
pub async fn change_address(
    client: &Client,
    fleet: &SyntheticFleet,
    run: &ChangeRun,
    servers: &[SocketAddr],
    overrides: &mut BTreeMap<(usize, usize), String>,
    patience: Duration,
) -> Result<Vec<TimedChange>, Error> {
    let (i, j, churn) = (run.cluster, run.gateway, run.churn);
    let addresses = &run.addresses;
    let records: Api<DNSRecord> = Api::namespaced(client.clone(), NAMESPACE);
    let mut timed = Vec::new();
    for (step, address) in addresses.iter().enumerate() {
        // The name holding the cluster's address: the host (simple), or the cluster's leaf
        // (loadbalanced; the host answers one GEO branch's weighted pick).
        let before = overrides
            .get(&(i, j))
            .cloned()
            .unwrap_or_else(|| fleet.address(i, j));
        let record = records.get(&fleet.record(j)).await?;
        let name = record
            .spec
            .endpoints
            .iter()
            .find(|endpoint| endpoint.targets.contains(&before))
            .map(|endpoint| endpoint.dns_name.clone())
            .ok_or_else(|| {
                Error::Component(format!("no record of {} holds {before}", fleet.record(j)))
            })?;
        overrides.insert((i, j), address.clone());
        let mut changed_clusters = vec![i];
        if let Some((round, others)) = churn {
            for other in 1..=others {
                let other_j = (j + other * 7) % fleet.gateways;
                let other_i = fleet.placed(other_j)[other % CLUSTERS_PER_GATEWAY];
                if (other_i, other_j) == (i, j) {
                    continue;
                }
                overrides.insert(
                    (other_i, other_j),
                    format!("10.97.{round}.{}", step * 16 + other),
                );
                changed_clusters.push(other_i);
            }
        }
        changed_clusters.sort_unstable();
        changed_clusters.dedup();
        let changed_at = Instant::now();
        let writes = changed_clusters.iter().map(|&cluster| {
            let cluster_overrides: BTreeMap<usize, String> = overrides
                .iter()
                .filter(|((c, _), _)| *c == cluster)
                .map(|((_, g), a)| (*g, a.clone()))
                .collect();
            let reports = Api::<ClusterReport>::namespaced(client.clone(), &fleet.cluster(cluster));
            let report = fleet.report(cluster, &cluster_overrides);
            async move { apply(&reports, "agent", report).await }
        });
        for written in futures::future::join_all(writes).await {
            written?;
        }
        let wanted: Ipv4Addr = address
            .parse()
            .map_err(|_| Error::Component(format!("{address} is not an IPv4 address")))?;
        let mut published = None;
        let mut answered: Vec<Option<Duration>> = vec![None; servers.len()];
        let mut last_answer: Vec<Vec<Ipv4Addr>> = vec![Vec::new(); servers.len()];
        let mut next_status_look = Instant::now();
        while changed_at.elapsed() <= patience
            && (published.is_none() || answered.iter().any(Option::is_none))
        {
            for (index, server) in servers.iter().enumerate() {
                if answered[index].is_some() {
                    continue;
                }
                let (server, asked) = (*server, name.clone());
                let answer = tokio::task::spawn_blocking(move || query_a(server, &asked))
                    .await
                    .unwrap_or_default();
                if answer.contains(&wanted) {
                    answered[index] = Some(changed_at.elapsed());
                }
                last_answer[index] = answer;
            }
            if published.is_none() && Instant::now() >= next_status_look {
                // Every 50 ms, so the reads do not load the API server being measured.
                next_status_look = Instant::now() + Duration::from_millis(50);
                let record = records.get(&fleet.record(j)).await?;
                let holds = record
                    .status
                    .iter()
                    .flat_map(|status| &status.endpoints)
                    .any(|endpoint| endpoint.targets.contains(address));
                if holds {
                    published = Some(changed_at.elapsed());
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        timed.push(TimedChange {
            name,
            address: address.clone(),
            published,
            answered,
            last_answer,
        });
    }
    Ok(timed)
}

/// Renews every synthetic cluster's heartbeat Lease each `interval`, as their agents would,
/// until the task is aborted (a fleet gone quiet would rightly hold the hub's brake).
pub fn heartbeat(
    client: Client,
    fleet: SyntheticFleet,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            for i in 0..fleet.clusters {
                let name = fleet.cluster(i);
                let leases = Api::<Lease>::namespaced(client.clone(), &name);
                if let Err(error) =
                    apply(&leases, meridian_api::names::HEARTBEAT_LEASE, lease(&name)).await
                {
                    tracing::warn!(%error, cluster = %name, "a synthetic heartbeat failed");
                }
            }
            tokio::time::sleep(interval).await;
        }
    })
}
