//! Meridian installed as users install it, on a fleet whose control planes have nodes: the
//! chart and the images `make images` built, pushed to the test bed's registry, installed with
//! `helm install oci://…` and pulled by the nodes' containerd; the hub as pods, the agents the
//! hub delivers as pods, and DNS asked through the hub's DNS Service. Shared by the install test
//! and the demo.
//!
//! The test bed runs no service proxy (kube-proxy), so a client asks the endpoints the DNS
//! Service selects, as a proxy would: the ready addresses of its EndpointSlices.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{ListParams, PostParams};
use kube::{Api, Client, ResourceExt};

use crate::example::{HOST, dig_host, write_geoip};
use crate::registry::Registry;
use crate::{
    BuiltImage, ControlPlane, DEFAULT_PATIENCE, Error, Fleet, ensure_namespace, eventually,
    helm_command,
};

/// The release's name and namespace.
pub const RELEASE: &str = "meridian";
pub const RELEASE_NAMESPACE: &str = "meridian-system";
/// The hub's pods.
pub const HUB_PODS: &str = "app.kubernetes.io/component=hub";
/// The agent's namespace on a spoke, as OCM's addon manager installs it (the chart's default).
pub const AGENT_NAMESPACE: &str = meridian_hub::addon::ADDON_NAMESPACE;
/// The agent's namespace on a spoke when the hub installs it itself (`agent.delivery=work`).
pub const WORK_AGENT_NAMESPACE: &str = meridian_api::names::AGENT_NAMESPACE;

/// The release as users get it: the chart and the hub's and agent's images, pushed to the
/// test bed's registry.
#[derive(Debug, Clone)]
pub struct Published {
    /// `oci://<registry>/charts/meridian`.
    pub chart: String,
    pub version: String,
    /// The chart's `image.registry`.
    pub image_registry: String,
    /// The images' tag (`image.tag`).
    pub tag: String,
    /// Helm's login to the registry (`--registry-config`).
    pub registry_config: String,
    /// The registry's credentials as a `.dockerconfigjson`.
    pub pull_secret: String,
}

/// The pull Secret the release names (`image.pullSecrets`), in the hub's namespace and the
/// hub-installed agent's on each spoke.
pub const PULL_SECRET: &str = "meridian-registry";

/// The Meridian images the registry serves: the hub's and the agent's.
const PUBLISHED_IMAGES: [&str; 2] = ["/meridian-hub", "/meridian-agent"];

/// Pushes the hub's and agent's images, each with every one of `tags` (the first the
/// release's), and the chart, to `registry`.
pub fn publish(
    registry: &Registry,
    images: &[BuiltImage],
    tags: &[&str],
) -> Result<Published, Error> {
    for name in PUBLISHED_IMAGES {
        registry.push_image(&crate::image_named(images, name), tags)?;
    }
    let (chart, version) = registry.push_chart()?;
    Ok(Published {
        chart,
        version,
        image_registry: registry.image_registry(),
        tag: tags[0].to_string(),
        registry_config: registry.helm_registry_config().display().to_string(),
        pull_secret: registry.pull_secret(),
    })
}

/// The archives a node imports: every built image but the hub's and the agent's, which the
/// nodes pull from the registry.
pub fn imported_archives(images: &[BuiltImage]) -> Vec<std::path::PathBuf> {
    images
        .iter()
        .filter(|image| {
            !PUBLISHED_IMAGES
                .iter()
                .any(|name| image.repository().ends_with(name))
        })
        .map(|image| image.archive.clone())
        .collect()
}

/// `helm install oci://…` of the published chart on the fleet's hub, its images pulled from
/// the registry; the example GeoIP database in a ConfigMap the chart mounts, the DNS Service a
/// ClusterIP one; `extra_sets` are further `--set`s.
pub async fn install_release(
    fleet: &Fleet,
    published: &Published,
    extra_sets: &[&str],
) -> Result<(), Error> {
    let hub = fleet.hub.client();
    let dir = tempfile::tempdir().map_err(Error::io("creating a directory"))?;
    let geoip = dir.path().join("country.mmdb");
    write_geoip(&geoip)?;
    ensure_namespace(&hub, RELEASE_NAMESPACE).await?;
    let database = std::fs::read(&geoip).map_err(Error::io("reading the GeoIP database"))?;
    let config_map = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some("meridian-geoip".into()),
            ..Default::default()
        },
        binary_data: Some(BTreeMap::from([(
            "country.mmdb".to_string(),
            ByteString(database),
        )])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(hub.clone(), RELEASE_NAMESPACE)
        .create(&PostParams::default(), &config_map)
        .await?;
    // The registry asks for credentials: a pull Secret where the hub runs, and on each spoke
    // where its agent will (the hub's own install names the release's Secret; the add-on
    // OCM's, which OCM's klusterlet copies into add-on namespaces, played here).
    write_pull_secret(&hub, RELEASE_NAMESPACE, PULL_SECRET, &published.pull_secret).await?;
    for spoke in fleet.clusters().skip(1) {
        let client = spoke.client();
        write_pull_secret(
            &client,
            WORK_AGENT_NAMESPACE,
            PULL_SECRET,
            &published.pull_secret,
        )
        .await?;
        write_pull_secret(
            &client,
            AGENT_NAMESPACE,
            meridian_hub::placement::OCM_PULL_SECRET,
            &published.pull_secret,
        )
        .await?;
    }
    let registry = format!("image.registry={}", published.image_registry);
    let pull_secret = format!("image.pullSecrets[0]={PULL_SECRET}");
    // The add-on is installed by the example's Placement of every cluster (and rolled out over
    // it one cluster at a time, the chart's default).
    let placement = format!(
        "agent.addon.placements[0]={}/everywhere",
        crate::example::NAMESPACE
    );
    let tag = format!("image.tag={}", published.tag);
    let mut args = published_chart("install", published);
    args.extend([
        "--set",
        &pull_secret,
        // The fleet installed the CRDs, as a cluster admin would apart from the chart.
        "--set",
        "crds.install=false",
        // And the agents' ClusterRoles, for a hub run in-process: the chart takes them over.
        "--take-ownership",
        "--set",
        &registry,
        "--set",
        &tag,
        "--set",
        &placement,
        "--set",
        "dns.service.type=ClusterIP",
        "--set",
        "geoip.volume.configMap.name=meridian-geoip",
        "--set",
        "geoip.file=country.mmdb",
    ]);
    for set in extra_sets {
        args.extend(["--set", set]);
    }
    run_helm(&fleet.hub, &args)
}

/// `helm upgrade` of the release to the published chart, keeping its values but `sets`.
pub fn upgrade_release(fleet: &Fleet, published: &Published, sets: &[&str]) -> Result<(), Error> {
    let mut args = published_chart("upgrade", published);
    args.push("--reuse-values");
    for set in sets {
        args.extend(["--set", set]);
    }
    run_helm(&fleet.hub, &args)
}

/// The start of a `helm install` or `upgrade` of the release from the published chart, in its
/// namespace.
fn published_chart<'a>(verb: &'a str, published: &'a Published) -> Vec<&'a str> {
    vec![
        verb,
        RELEASE,
        &published.chart,
        "--version",
        &published.version,
        // The test bed's registry speaks HTTP on loopback, and asks who is pulling.
        "--plain-http",
        "--registry-config",
        &published.registry_config,
        "--namespace",
        RELEASE_NAMESPACE,
    ]
}

/// The image IDs of every container of the pods in `namespace`, failing unless each was
/// pulled from `image_registry` (containerd names a pulled image by its repository digest).
pub async fn pulled_from(
    client: &Client,
    namespace: &str,
    image_registry: &str,
) -> Result<Vec<String>, Error> {
    let pods = Api::<Pod>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?;
    let ids: Vec<String> = pods
        .items
        .iter()
        .flat_map(|pod| {
            pod.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
        })
        .map(|container| container.image_id.clone())
        .collect();
    let prefix = format!("{image_registry}/");
    if ids.is_empty() || ids.iter().any(|id| !id.starts_with(&prefix)) {
        return Err(Error::Component(format!(
            "pods in {namespace} run images not pulled from {image_registry}: {ids:?}"
        )));
    }
    Ok(ids)
}

/// Runs `helm args…` against `cluster`.
pub fn run_helm(cluster: &ControlPlane, args: &[&str]) -> Result<(), Error> {
    let output = helm_command()?
        .args(args)
        .arg(format!(
            "--kubeconfig={}",
            cluster.kubeconfig_path().display()
        ))
        .output()
        .map_err(|e| Error::Component(format!("running helm: {e}")))?;
    if !output.status.success() {
        return Err(Error::Component(format!(
            "helm {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr)
        )));
    }
    Ok(())
}

/// Waits until the hub's Deployment runs the chart's two replicas, both from `tag`, and
/// returns their names.
pub async fn wait_for_hub_pods(hub: &Client, tag: &str) -> Result<Vec<String>, Error> {
    let pods: Api<Pod> = Api::namespaced(hub.clone(), RELEASE_NAMESPACE);
    let suffix = format!(":{tag}");
    eventually(
        &format!("two hub pods running {tag}"),
        DEFAULT_PATIENCE,
        || {
            let (pods, suffix) = (pods.clone(), suffix.clone());
            async move {
                let list = pods.list(&ListParams::default().labels(HUB_PODS)).await?;
                let running: Vec<String> = list
                    .items
                    .iter()
                    .filter(|pod| pod.metadata.deletion_timestamp.is_none())
                    .filter(|pod| is_running_image(pod, &suffix))
                    .map(ResourceExt::name_any)
                    .collect();
                Ok((running.len() == 2 && list.items.len() == 2).then_some(running))
            }
        },
    )
    .await
}

/// Waits until the agent's Deployment in `namespace` on a spoke has rolled to `tag` and its pod
/// runs.
pub async fn wait_for_agent_pod(
    spoke: &Client,
    namespace: &str,
    tag: &str,
) -> Result<String, Error> {
    let pods: Api<Pod> = Api::namespaced(spoke.clone(), namespace);
    let deployments: Api<Deployment> = Api::namespaced(spoke.clone(), namespace);
    let suffix = format!(":{tag}");
    let waited = eventually(
        &format!("the agent pod runs {tag}"),
        DEFAULT_PATIENCE,
        || {
            let (pods, deployments, suffix) = (pods.clone(), deployments.clone(), suffix.clone());
            async move {
                let rolled = deployments
                    .get_opt("meridian-agent")
                    .await?
                    .is_some_and(|d| {
                        let status = d.status.unwrap_or_default();
                        status.updated_replicas == Some(1) && status.replicas == Some(1)
                    });
                let list = pods
                    .list(&ListParams::default().labels("app=meridian-agent"))
                    .await?;
                let running = list
                    .items
                    .iter()
                    .find(|pod| {
                        pod.metadata.deletion_timestamp.is_none() && is_running_image(pod, &suffix)
                    })
                    .map(ResourceExt::name_any);
                Ok(running.filter(|_| rolled))
            }
        },
    )
    .await;
    if waited.is_err() {
        // Why not: each pod's phase and its containers' waiting reasons, and the Deployment's
        // conditions (a Pod Security refusal shows there).
        let pods = pods.list(&ListParams::default()).await?;
        for pod in &pods.items {
            let status = pod.status.clone().unwrap_or_default();
            let waiting: Vec<String> = status
                .container_statuses
                .unwrap_or_default()
                .iter()
                .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
                .map(|w| format!("{:?}: {:?}", w.reason, w.message))
                .collect();
            eprintln!("pod {}: {:?} {waiting:?}", pod.name_any(), status.phase);
        }
        if let Some(deployment) = deployments.get_opt("meridian-agent").await? {
            eprintln!(
                "deployment: {:?}",
                deployment.status.and_then(|s| s.conditions)
            );
        }
    }
    waited
}

fn is_running_image(pod: &Pod, suffix: &str) -> bool {
    let status = pod.status.as_ref();
    status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && pod.spec.as_ref().is_some_and(|spec| {
            spec.containers
                .iter()
                .all(|c| c.image.as_deref().is_some_and(|i| i.ends_with(suffix)))
        })
        && status
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|statuses| {
                statuses
                    .iter()
                    .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
            })
}

/// The ready addresses behind the hub's DNS Service, as a service proxy would route to them.
pub async fn dns_endpoints(hub: &Client) -> Result<Vec<SocketAddr>, Error> {
    let slices: Api<EndpointSlice> = Api::namespaced(hub.clone(), RELEASE_NAMESPACE);
    let list = slices
        .list(&ListParams::default().labels(&format!("kubernetes.io/service-name={RELEASE}-dns")))
        .await?;
    let mut endpoints = Vec::new();
    for slice in list.items {
        let port = slice
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some("dns-udp"))
            .and_then(|p| p.port);
        let Some(port) = port else { continue };
        for endpoint in slice.endpoints.into_iter().flatten() {
            let ready = endpoint.conditions.as_ref().and_then(|c| c.ready) == Some(true);
            if !ready {
                continue;
            }
            endpoints.extend(
                endpoint
                    .addresses
                    .iter()
                    .filter_map(|a| a.parse().ok())
                    .map(|ip| SocketAddr::new(ip, port as u16)),
            );
        }
    }
    Ok(endpoints)
}

/// One `dig` through the Service: at one of its ready endpoints, chosen at random as a proxy
/// would. No ready endpoint answers nothing.
pub async fn dig_service(hub: &Client, subnet: Option<&'static str>) -> Result<Vec<String>, Error> {
    let endpoints = dns_endpoints(hub).await?;
    if endpoints.is_empty() {
        return Ok(Vec::new());
    }
    let server = endpoints[rand_index(endpoints.len())];
    Ok(
        tokio::task::spawn_blocking(move || dig_host(server, HOST, subnet))
            .await
            .unwrap(),
    )
}

fn rand_index(len: usize) -> usize {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos() as usize;
    nanos % len
}

/// `dig` from `subnet` at every endpoint of the DNS Service, one answer each (sorted): the
/// replicas follow the leader a moment apart, and a client may reach any of them.
pub async fn dig_each_endpoint(
    hub: &Client,
    subnet: Option<&'static str>,
) -> Result<Vec<Vec<String>>, Error> {
    let mut answers = Vec::new();
    for server in dns_endpoints(hub).await? {
        answers.push(
            tokio::task::spawn_blocking(move || dig_host(server, HOST, subnet))
                .await
                .unwrap(),
        );
    }
    Ok(answers)
}

/// Waits until `dig` from `subnet` answers exactly `expected` (sorted) at every endpoint of the
/// DNS Service: one replica's answer says nothing of another's, which may lag it a moment.
pub async fn answers_become(
    hub: &Client,
    subnet: Option<&'static str>,
    expected: &[&str],
) -> Result<(), Error> {
    let expected: Vec<String> = expected.iter().map(|s| s.to_string()).collect();
    eventually(
        &format!("dig from {subnet:?} answers {expected:?} at every replica"),
        DEFAULT_PATIENCE,
        || {
            let (hub, expected) = (hub.clone(), expected.clone());
            async move {
                let answers = dig_each_endpoint(&hub, subnet).await?;
                Ok((!answers.is_empty() && answers.iter().all(|a| *a == expected)).then_some(()))
            }
        },
    )
    .await
}

/// One cluster's Meridian add-on as `kubectl get managedclusteraddon -A` shows it, and the
/// template it last applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonState {
    pub cluster: String,
    pub available: Option<String>,
    pub reason: String,
    pub desired_template: Option<String>,
    pub applied_template: Option<String>,
}

impl std::fmt::Display for AddonState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<10} meridian  AVAILABLE={:<6} {:<34} template {}",
            self.cluster,
            self.available.as_deref().unwrap_or("-"),
            self.reason,
            self.applied_template.as_deref().unwrap_or("-"),
        )
    }
}

/// The Meridian add-on of each of `clusters`, as OCM reports it.
pub async fn addon_states(hub: &Client, clusters: &[&str]) -> Result<Vec<AddonState>, Error> {
    use meridian_api::upstream::ManagedClusterAddOn;
    let mut states = Vec::new();
    for cluster in clusters {
        let addon = Api::<ManagedClusterAddOn>::namespaced(hub.clone(), cluster)
            .get_opt(meridian_hub::addon::ADDON_NAME)
            .await?;
        let status = addon.and_then(|addon| addon.status);
        let available = status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Available"));
        let template = |field: &str| {
            status.as_ref().and_then(|s| {
                s.extra
                    .get("configReferences")?
                    .as_array()?
                    .iter()
                    .find_map(|r| {
                        (r["resource"] == "addontemplates")
                            .then(|| r[field]["name"].as_str().map(String::from))
                            .flatten()
                    })
            })
        };
        states.push(AddonState {
            cluster: cluster.to_string(),
            available: available.map(|c| c.status.clone()),
            reason: available.map(|c| c.reason.clone()).unwrap_or_default(),
            desired_template: template("desiredConfig"),
            applied_template: template("lastAppliedConfig"),
        });
    }
    Ok(states)
}

/// Watches a rollout of the add-on away from template `from` (none: a first install) until
/// OCM reports every one of `clusters` Available with another one applied: returns that
/// template and the clusters in the order each was asked to run it, with when (since the call)
/// it was asked and when it was Available with it. Start it before the change that rolls.
pub async fn addon_rollout(
    hub: Client,
    clusters: Vec<String>,
    from: Option<String>,
) -> Result<(String, Vec<(String, Duration, Duration)>), Error> {
    let started = std::time::Instant::now();
    let names: Vec<&str> = clusters.iter().map(String::as_str).collect();
    let mut asked: BTreeMap<String, Duration> = BTreeMap::new();
    let mut done: BTreeMap<String, (Duration, String)> = BTreeMap::new();
    let deadline = started + DEFAULT_PATIENCE * 3;
    let new = |template: &Option<String>| template.is_some() && *template != from;
    loop {
        let now = started.elapsed();
        for state in addon_states(&hub, &names).await? {
            if new(&state.desired_template) || new(&state.applied_template) {
                asked.entry(state.cluster.clone()).or_insert(now);
            }
            if new(&state.applied_template) && state.available.as_deref() == Some("True") {
                let template = state.applied_template.clone().unwrap_or_default();
                done.entry(state.cluster.clone()).or_insert((now, template));
            }
        }
        if done.len() == clusters.len() {
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::Component(format!(
                "the add-on's rollout from {from:?} reached {done:?} of {clusters:?} (asked: {asked:?}): {:?}",
                addon_states(&hub, &names).await?
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let template = done
        .values()
        .next()
        .map(|(_, t)| t.clone())
        .unwrap_or_default();
    let mut order: Vec<(String, Duration, Duration)> = done
        .into_iter()
        .map(|(cluster, (available, _))| {
            let asked = asked.get(&cluster).copied().unwrap_or(available);
            (cluster, asked, available)
        })
        .collect();
    order.sort_by_key(|(_, asked, _)| *asked);
    Ok((template, order))
}

/// The name of the AddOnTemplate the add-on's ClusterManagementAddOn points at, once the hub
/// wrote one other than `other_than`.
pub async fn current_addon_template(
    hub: &Client,
    other_than: Option<&str>,
) -> Result<String, Error> {
    use meridian_api::upstream::ClusterManagementAddOn;
    let addons = Api::<ClusterManagementAddOn>::all(hub.clone());
    eventually(
        "the hub points the add-on at its template",
        DEFAULT_PATIENCE,
        || {
            let addons = addons.clone();
            async move {
                let Some(addon) = addons.get_opt(meridian_hub::addon::ADDON_NAME).await? else {
                    return Ok(None);
                };
                let template = addon
                    .spec
                    .extra
                    .get("supportedConfigs")
                    .and_then(|configs| {
                        configs.as_array()?.iter().find_map(|c| {
                            (c["resource"] == "addontemplates")
                                .then(|| c["defaultConfig"]["name"].as_str().map(String::from))
                                .flatten()
                        })
                    });
                Ok(template.filter(|t| Some(t.as_str()) != other_than))
            }
        },
    )
    .await
}

/// A `kubernetes.io/dockerconfigjson` Secret `name` in `namespace` (made if missing).
async fn write_pull_secret(
    client: &Client,
    namespace: &str,
    name: &str,
    dockerconfigjson: &str,
) -> Result<(), Error> {
    ensure_namespace(client, namespace).await?;
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/dockerconfigjson",
        "metadata": { "name": name, "namespace": namespace },
        "stringData": { ".dockerconfigjson": dockerconfigjson },
    }))
    .expect("a Secret");
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}
