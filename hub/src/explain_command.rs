//! `meridian-hub explain HOST --client IP | --country CC`: the answer that client gets and the
//! path to it. Against the live hub it reads every DNSRecord, probe, policy, cluster report and
//! zone once; offline (`-f`) it takes a `plan` scenario, with every leaf healthy. The answer is
//! the nameserver's own walk over what is published (`meridian_nameserver::explain`), and the
//! why of each leaf is `meridian_controllers::insight`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ipnet::IpNet;
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_api::meridian::ClusterReport;
use meridian_controllers::convert::all_to_api;
use meridian_controllers::insight::{FleetSnapshot, HostView, host_views};
use meridian_dns::model::RecordType;
use meridian_nameserver::{Explanation, GeoCode, GeoDb, Location};
use serde::Serialize;

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("who").required(true).args(["client", "country"]))]
pub struct ExplainArgs {
    /// The host asked for (`api.example.com`).
    pub host: String,

    /// The client's address or subnet (as EDNS Client Subnet carries it), located with
    /// `--geoip`.
    #[arg(long)]
    pub client: Option<String>,

    /// The client's country (ISO 3166 alpha-2), instead of an address.
    #[arg(long)]
    pub country: Option<String>,

    /// The client's continent (`EU`, or `GEO-EU`), with `--country`: a country alone does not
    /// tell which continent branch it falls in.
    #[arg(long, requires = "country")]
    pub continent: Option<String>,

    /// The record type asked for.
    #[arg(long = "type", default_value = "A", value_parser = ["A", "AAAA"])]
    pub record_type: String,

    /// Explain a `plan` scenario offline instead of the live hub (every leaf healthy).
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,

    /// Kubeconfig of the hub cluster; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// The MaxMind-format database the nameserver locates clients with (for `--client`).
    #[arg(long, env = "MERIDIAN_GEOIP")]
    pub geoip: Option<PathBuf>,

    /// Seconds without a report after which a cluster counts as silent.
    #[arg(long, default_value_t = 120)]
    pub cluster_heartbeat_timeout_seconds: u64,

    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: ExplainFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainFormat {
    Text,
    Json,
}

/// Who asks.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Client {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continent: Option<String>,
}

impl Client {
    fn location(&self) -> Option<Location> {
        let location = Location {
            country: self.country.as_deref().and_then(GeoCode::new),
            continent: self.continent.as_deref().and_then(GeoCode::new),
        };
        (location != Location::default()).then_some(location)
    }
}

/// The explanation `explain` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub client: Client,
    pub answer: Explanation,
    /// Every record at or above the host: its leaves' verdicts, clusters, held plans.
    pub records: Vec<HostView>,
    pub notes: Vec<String>,
}

/// The client as the nameserver would see it: located by `geo` from an address or subnet, or
/// given by country (and continent).
pub fn client(
    address: Option<&str>,
    country: Option<&str>,
    continent: Option<&str>,
    geo: Option<&GeoDb>,
) -> anyhow::Result<(Client, Vec<String>)> {
    let mut notes = Vec::new();
    let mut client = Client {
        country: country.map(str::to_ascii_uppercase),
        continent: continent.map(|c| {
            let c = c.to_ascii_uppercase();
            if c.starts_with("GEO-") {
                c
            } else {
                format!("GEO-{c}")
            }
        }),
        ..Client::default()
    };
    for (flag, code) in [
        ("--country", &client.country),
        ("--continent", &client.continent),
    ] {
        if let Some(code) = code
            && GeoCode::new(code).is_none()
        {
            anyhow::bail!("{flag} {code}: not a country (IE) or continent (EU) code");
        }
    }
    if let Some(address) = address {
        let ip: IpAddr = match address.parse::<IpNet>() {
            Ok(net) => net.addr(),
            Err(_) => address
                .parse()
                .map_err(|_| anyhow::anyhow!("--client {address}: not an address or a subnet"))?,
        };
        client.address = Some(ip);
        match geo {
            Some(geo) => match geo.locate(ip) {
                Some(location) => {
                    client.country = location.country.map(|code| code.to_string());
                    client.continent = location.continent.map(|code| code.to_string());
                }
                None => notes.push(format!(
                    "the GeoIP database does not know {ip}: the client gets the catch-all"
                )),
            },
            None => notes.push(
                "no GeoIP database (--geoip): the client is unlocated and gets the catch-all"
                    .into(),
            ),
        }
    }
    Ok((client, notes))
}

/// Explains `host` for `client` from a snapshot of the fleet.
pub fn explain_snapshot(
    snapshot: &FleetSnapshot,
    host: &str,
    record_type: RecordType,
    client: Client,
    mut notes: Vec<String>,
) -> anyhow::Result<Report> {
    let zone = snapshot
        .published_zone(host)
        .ok_or_else(|| anyhow::anyhow!("no ManagedZone holds {host}"))?;
    let location = client.location();
    let answer = meridian_nameserver::explain(&zone, host, record_type, location.as_ref());
    let records = host_views(snapshot, Some(host));
    if records.is_empty() {
        notes.push(format!("no DNSRecord publishes {host}"));
    }
    for record in &records {
        // A GEO branch that matches the client but is not published: why the client is sent
        // elsewhere.
        for branch in record.wanted.iter().filter(|e| {
            let code = e.property(meridian_dns::model::GEO_CODE);
            code.is_some_and(|code| {
                location.as_ref().is_some_and(|l| {
                    l.country.as_deref() == Some(code) || l.continent.as_deref() == Some(code)
                })
            }) && !record.published.iter().any(|p| p.key() == e.key())
        }) {
            notes.push(format!(
                "{}: the GEO branch {} matches this client but is out of DNS now (no leaf under it is published), so the client gets the next match",
                record.record,
                branch.property(meridian_dns::model::GEO_CODE).unwrap_or_default()
            ));
        }
        // Unhealthy, awaiting a first probe, or a standby tier's: the leaves list says which.
        let left_out: Vec<&str> = record
            .leaves
            .iter()
            .filter(|l| !l.published)
            .map(|l| l.address.as_str())
            .collect();
        if !left_out.is_empty() {
            notes.push(format!(
                "{}: left out of DNS now: {}",
                record.record,
                left_out.join(", ")
            ));
        }
    }
    Ok(Report {
        client,
        answer,
        records,
        notes,
    })
}

/// A scenario as the fleet a live hub would have: one DNSRecord per listener, everything it
/// wants published, in a zone of its host's parent domain.
fn scenario_snapshot(path: &std::path::Path) -> anyhow::Result<FleetSnapshot> {
    let scenario = crate::plan_command::read_scenario(path)?;
    let plan = crate::plan_command::plan_scenario(&scenario)?;
    let namespace = scenario.gateway.namespace.clone();
    let mut snapshot = FleetSnapshot::default();
    for record in &plan.records {
        let base = record.root_host.trim_start_matches("*.");
        let domain = base.split_once('.').map_or(base, |(_, parent)| parent);
        let zone_name = format!("zone-{}", record.name);
        let endpoints = all_to_api(&record.endpoints);
        let object: DNSRecord = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
            "metadata": { "name": record.name, "namespace": namespace },
            "spec": { "rootHost": record.root_host, "managedZone": { "name": zone_name }, "endpoints": endpoints },
            "status": {
                "endpoints": endpoints,
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "Scenario",
                    "message": "planned offline: every leaf counts as healthy",
                    "lastTransitionTime": "1970-01-01T00:00:00Z",
                }],
            },
        }))?;
        let zone: ManagedZone = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
            "metadata": { "name": zone_name, "namespace": namespace },
            "spec": { "domainName": domain, "description": "scenario" },
        }))?;
        snapshot.records.push(Arc::new(object));
        snapshot.zones.push(Arc::new(zone));
    }
    // Each cluster as its agent would report it, so leaves are named by their cluster.
    for cluster in &scenario.clusters {
        let report: ClusterReport = serde_json::from_value(serde_json::json!({
            "apiVersion": "meridian.dev/v1alpha1", "kind": "ClusterReport",
            "metadata": { "name": "report", "namespace": cluster.name },
            "spec": {
                "clusterID": cluster.cluster_id,
                "gateways": [{
                    "name": scenario.gateway.name, "namespace": namespace,
                    "addresses": cluster.addresses.iter().map(|a| serde_json::json!({
                        "type": a.type_.clone().unwrap_or_else(|| "IPAddress".into()),
                        "value": a.value,
                    })).collect::<Vec<_>>(),
                }],
            },
        }))?;
        snapshot.reports.push(Arc::new(report));
    }
    Ok(snapshot)
}

/// Renders a report.
pub fn render(report: &Report, format: ExplainFormat) -> anyhow::Result<String> {
    if format == ExplainFormat::Json {
        return Ok(serde_json::to_string_pretty(report)? + "\n");
    }
    let mut out = String::from("client: ");
    let who = &report.client;
    let mut parts = Vec::new();
    if let Some(address) = who.address {
        parts.push(address.to_string());
    }
    parts.push(format!(
        "country {}, continent {}",
        who.country.as_deref().unwrap_or("unknown"),
        who.continent.as_deref().unwrap_or("unknown")
    ));
    out.push_str(&parts.join(", "));
    out.push('\n');
    out.push_str(&report.answer.render_text());
    let mut served: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for (address, share) in &report.answer.answers {
        let cluster = report
            .records
            .iter()
            .flat_map(|r| &r.leaves)
            .find(|l| &l.address == address)
            .and_then(|l| l.cluster.as_deref())
            .unwrap_or("an unknown cluster");
        *served.entry(cluster).or_default() += share;
    }
    if !served.is_empty() {
        let shares: Vec<String> = served
            .iter()
            .map(|(cluster, share)| format!("{cluster} {:.0}%", share * 100.0))
            .collect();
        out.push_str(&format!("served by: {}\n", shares.join(", ")));
    }
    for record in &report.records {
        out.push_str(&record.render_text());
    }
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    Ok(out)
}

/// `meridian-hub explain`.
pub fn run(args: &ExplainArgs) -> anyhow::Result<()> {
    let geo = args.geoip.as_deref().map(GeoDb::open).transpose()?;
    let (client, notes) = client(
        args.client.as_deref(),
        args.country.as_deref(),
        args.continent.as_deref(),
        geo.as_ref(),
    )?;
    let record_type = RecordType::parse(&args.record_type).expect("clap allows A and AAAA");
    let snapshot = match &args.file {
        Some(path) => scenario_snapshot(path)?,
        None => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let config = crate::run_command::client_config(args.kubeconfig.as_ref()).await?;
                let client = kube::Client::try_from(config)?;
                anyhow::Ok(
                    FleetSnapshot::list(
                        &client,
                        Duration::from_secs(args.cluster_heartbeat_timeout_seconds),
                    )
                    .await?,
                )
            })?
        }
    };
    let report = explain_snapshot(&snapshot, &args.host, record_type, client, notes)?;
    print!("{}", render(&report, args.output)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_controllers::convert::all_to_engine;
    use meridian_dns::tree::{Health, Pruned, RecordTree};

    fn geo_example() -> FleetSnapshot {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/plan-examples/geo.yaml");
        scenario_snapshot(&path).expect("the documented scenario")
    }

    fn located(country: &str, continent: &str) -> Client {
        Client {
            address: None,
            country: Some(country.into()),
            continent: Some(continent.into()),
        }
    }

    #[test]
    fn a_client_whose_geo_branch_is_out_of_dns_is_told_why_it_goes_elsewhere() {
        let mut snapshot = geo_example();
        let healthy = explain_snapshot(
            &snapshot,
            "api.example.com",
            RecordType::A,
            located("IE", "GEO-EU"),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(
            healthy.answer.answers.keys().collect::<Vec<_>>(),
            ["172.31.0.1"]
        );
        assert!(healthy.notes.is_empty(), "{:?}", healthy.notes);
        // Dublin's gateway fails: what the record publishes is the tree without it.
        let index = snapshot
            .records
            .iter()
            .position(|r| r.spec.root_host == "api.example.com")
            .unwrap();
        let mut record = (*snapshot.records[index]).clone();
        let tree =
            RecordTree::from_records("api.example.com", all_to_engine(&record.spec.endpoints));
        let Pruned::Endpoints(published) = tree.prune(&std::collections::BTreeMap::from([(
            "172.31.0.1".to_string(),
            Health::Unhealthy,
        )])) else {
            panic!("virginia stays")
        };
        record.status.as_mut().unwrap().endpoints = all_to_api(&published);
        snapshot.records[index] = Arc::new(record);
        let report = explain_snapshot(
            &snapshot,
            "api.example.com",
            RecordType::A,
            located("IE", "GEO-EU"),
            Vec::new(),
        )
        .unwrap();
        assert_eq!(
            report.answer.answers.keys().collect::<Vec<_>>(),
            ["172.31.1.1"],
            "the catch-all falls back to the US group"
        );
        let notes = report.notes.join("\n");
        assert!(
            notes.contains("the GEO branch IE matches this client but is out of DNS now"),
            "{notes}"
        );
        assert!(notes.contains("left out of DNS now: 172.31.0.1"), "{notes}");
        let leaf = &report.records[0].leaves[0];
        assert_eq!(
            (
                leaf.address.as_str(),
                leaf.cluster.as_deref(),
                leaf.published
            ),
            ("172.31.0.1", Some("dublin"), false)
        );
    }
}
