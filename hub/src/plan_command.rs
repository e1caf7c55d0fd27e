//! `meridian-hub plan`: the records a DNSPolicy would publish for a gateway on a set of
//! clusters, computed offline from a scenario file (see docs/plan.md).

use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;

use meridian_api::kuadrant::{LoadBalancing, RoutingStrategy};
use meridian_dns::model::Endpoint;
use meridian_dns::tree::{Address, ClusterTarget, GatewayRef, RecordTree, build_record_tree};
use serde::{Deserialize, Serialize};

use meridian_controllers::decide::exclude::Exclusions;
use meridian_controllers::decide::policy::routing_strategy;

/// A gateway, a policy and the clusters the gateway is placed on.
#[derive(Debug, Clone, Deserialize)]
pub struct Scenario {
    pub gateway: ScenarioGateway,
    #[serde(default)]
    pub policy: ScenarioPolicy,
    #[serde(default)]
    pub clusters: Vec<ScenarioCluster>,
    /// The zone's provider (`route53`, `google`, `azure`, `rfc2136`, `webhook`, `embedded`):
    /// the plan then says what it cannot hold, as the hub would refuse the policy.
    #[serde(default)]
    pub provider: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ScenarioGateway {
    pub name: String,
    pub namespace: String,
    pub listeners: Vec<ScenarioListener>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ScenarioListener {
    pub name: String,
    #[serde(default)]
    pub hostname: Option<String>,
}

/// The parts of a DNSPolicy spec that shape records (`targetRef` and `healthCheck` are accepted
/// and ignored, so a policy's spec can be pasted as it is).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioPolicy {
    #[serde(default)]
    pub routing_strategy: RoutingStrategy,
    #[serde(default)]
    pub load_balancing: LoadBalancing,
    #[serde(default)]
    pub target_ref: Option<serde_json::Value>,
    #[serde(default)]
    pub health_check: Option<serde_json::Value>,
    /// Addresses never published, as the policy's `excludeAddresses`.
    #[serde(default)]
    pub exclude_addresses: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScenarioCluster {
    pub name: String,
    #[serde(rename = "clusterID")]
    pub cluster_id: String,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub addresses: Vec<ScenarioAddress>,
    /// Routes attached per listener name; a listener not named here counts as served.
    #[serde(default)]
    pub attached_routes: BTreeMap<String, u32>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ScenarioAddress {
    #[serde(rename = "type", default)]
    pub type_: Option<String>,
    pub value: String,
}

/// Output formats of `plan`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    Yaml,
    Json,
    Tree,
    Dot,
}

/// One DNSRecord the hub would write: `<gateway>-<listener>`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlannedRecord {
    pub name: String,
    pub root_host: String,
    pub endpoints: Vec<Endpoint>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// What the scenario's provider cannot hold: the hub refuses the policy for these.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unsupported: Vec<String>,
    /// What the scenario's provider holds another way.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approximated: Vec<String>,
    #[serde(skip)]
    tree: Option<RecordTree>,
}

#[derive(Debug, Clone, Serialize)]
pub struct PlanOutput {
    pub records: Vec<PlannedRecord>,
}

/// Reads a scenario from a file, or from standard input for `-`.
pub fn read_scenario(path: &Path) -> anyhow::Result<Scenario> {
    let text = if path == Path::new("-") {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text)?;
        text
    } else {
        std::fs::read_to_string(path)
            .map_err(|error| anyhow::anyhow!("cannot read {}: {error}", path.display()))?
    };
    parse_scenario(&text)
        .map_err(|error| anyhow::anyhow!("invalid scenario {}: {error}", path.display()))
}

/// Parses a scenario, refusing fields it does not know (a misspelt `defaultWeight` must not
/// silently become the default).
pub fn parse_scenario(text: &str) -> anyhow::Result<Scenario> {
    let mut unknown = Vec::new();
    let scenario = serde_ignored::deserialize(yaml_serde::Deserializer::from_str(text), |path| {
        unknown.push(path.to_string())
    })?;
    if !unknown.is_empty() {
        anyhow::bail!(
            "unknown field{} {}",
            if unknown.len() > 1 { "s" } else { "" },
            unknown.join(", ")
        );
    }
    Ok(scenario)
}

/// The records of every listener that has a hostname.
pub fn plan_scenario(scenario: &Scenario) -> anyhow::Result<PlanOutput> {
    let strategy = routing_strategy(
        scenario.policy.routing_strategy,
        &scenario.policy.load_balancing,
    )
    .map_err(|error| anyhow::anyhow!("invalid policy: {error}"))?;
    let excluded = Exclusions::parse(&scenario.policy.exclude_addresses)
        .map_err(|error| anyhow::anyhow!("invalid policy: {error}"))?;
    let fidelity = scenario
        .provider
        .as_deref()
        .map(|provider| {
            meridian_dns::fidelity::of_provider(provider).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown provider {provider:?}: one of route53, google, azure, rfc2136, webhook, embedded"
                )
            })
        })
        .transpose()?;
    let gateway = GatewayRef {
        name: scenario.gateway.name.clone(),
        namespace: scenario.gateway.namespace.clone(),
    };
    let mut records = Vec::new();
    for listener in &scenario.gateway.listeners {
        let Some(host) = &listener.hostname else {
            continue;
        };
        let clusters = scenario
            .clusters
            .iter()
            .map(|cluster| cluster_target(cluster, &listener.name, &excluded))
            .collect::<anyhow::Result<Vec<_>>>()?;
        let tree = build_record_tree(host, &gateway, &strategy, &clusters)
            .map_err(|error| anyhow::anyhow!("listener {}: {error}", listener.name))?;
        let endpoints = tree.endpoints();
        let (unsupported, approximated) = fidelity.map_or_else(Default::default, |fidelity| {
            meridian_dns::fidelity::split(&meridian_dns::fidelity::assess(&fidelity, &endpoints))
        });
        records.push(PlannedRecord {
            name: format!("{}-{}", gateway.name, listener.name),
            root_host: tree.host.clone(),
            endpoints,
            warnings: tree.warnings.clone(),
            unsupported,
            approximated,
            tree: Some(tree),
        });
    }
    Ok(PlanOutput { records })
}

fn cluster_target(
    cluster: &ScenarioCluster,
    listener: &str,
    excluded: &Exclusions,
) -> anyhow::Result<ClusterTarget> {
    let addresses = cluster
        .addresses
        .iter()
        .filter(|a| !excluded.excludes(&a.value))
        .map(|a| Address::parse(a.type_.as_deref(), &a.value))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| anyhow::anyhow!("cluster {}: {error}", cluster.name))?;
    if cluster.cluster_id.is_empty() {
        anyhow::bail!("cluster {}: clusterID must not be empty", cluster.name);
    }
    Ok(ClusterTarget {
        name: cluster.name.clone(),
        cluster_id: cluster.cluster_id.clone(),
        labels: cluster.labels.clone(),
        addresses,
        attached_routes: cluster.attached_routes.get(listener).copied(),
        weight_percent: 100,
    })
}

/// Renders a plan in the requested format.
pub fn render(output: &PlanOutput, format: OutputFormat) -> anyhow::Result<String> {
    Ok(match format {
        OutputFormat::Json => serde_json::to_string_pretty(output)? + "\n",
        OutputFormat::Yaml => yaml_serde::to_string(output)?,
        OutputFormat::Tree => output
            .records
            .iter()
            .map(|record| {
                let tree = record
                    .tree
                    .as_ref()
                    .map(RecordTree::render_text)
                    .unwrap_or_default();
                let warnings: String = (record.warnings.iter().map(|w| ("warning", w)))
                    .chain(record.unsupported.iter().map(|u| ("cannot hold", u)))
                    .chain(record.approximated.iter().map(|a| ("held differently", a)))
                    .map(|(what, text)| format!("{what}: {text}\n"))
                    .collect();
                format!("# {} ({})\n{warnings}{tree}", record.name, record.root_host)
            })
            .collect::<Vec<_>>()
            .join("\n"),
        OutputFormat::Dot => output
            .records
            .iter()
            .filter_map(|r| r.tree.as_ref().map(RecordTree::render_dot))
            .collect(),
    })
}

/// `meridian-hub plan -f FILE -o FORMAT`: fails (after printing) when the scenario's provider
/// cannot hold a record.
pub fn run(file: &Path, format: OutputFormat) -> anyhow::Result<()> {
    let scenario = read_scenario(file)?;
    let plan = plan_scenario(&scenario)?;
    print!("{}", render(&plan, format)?);
    // Printed first, so the user sees what it would be; the status makes it a gate in CI.
    let refused = plan
        .records
        .iter()
        .filter(|r| !r.unsupported.is_empty())
        .count();
    if refused > 0 {
        anyhow::bail!(
            "the {} provider cannot hold {refused} of the records: the hub would refuse this policy (see `unsupported`)",
            scenario.provider.as_deref().unwrap_or_default()
        );
    }
    Ok(())
}
