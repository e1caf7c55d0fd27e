//! `meridian-hub convert`: Kuadrant `kuadrant.io/v1` DNSPolicies, from each cluster of a
//! fleet, into Meridian's objects (offline). The objects go to standard output as YAML, the
//! findings to standard error; the command exits non-zero when any finding says clients would
//! get different answers. [`kuadrant_v1`] reads the manifests, [`fleet`] converts them (pure).
//! docs/migrating-from-kuadrant.md says what is carried and how.

pub mod fleet;
pub mod kuadrant_v1;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use fleet::{Conversion, Finding, FindingKind, Options};
use kuadrant_v1::ClusterManifests;

/// Where the converted fleet runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// A Meridian hub publishes for the fleet: cluster attributes become ManagedCluster labels.
    #[default]
    Hub,
    /// Every cluster's agent publishes its own branch: attributes become `--cluster-label` flags.
    Distributed,
}

#[derive(Debug, clap::Args)]
pub struct ConvertArgs {
    /// One cluster's manifests, as `NAME=PATH` (a YAML file, or a directory searched
    /// recursively), or `PATH` (the cluster is named after the file or directory). Give one per
    /// cluster of the fleet: the policies of one namespace and name become one.
    #[arg(required = true, value_name = "[CLUSTER=]PATH")]
    pub clusters: Vec<String>,

    /// Where the converted fleet runs: `hub` writes ManagedCluster labels, `distributed` the
    /// agents' `--cluster-label` flags.
    #[arg(long, value_enum, default_value_t = Mode::Hub)]
    pub mode: Mode,

    /// The domain of a provider zone the policies publish into (repeatable). Kuadrant finds the
    /// zone at the provider; a ManagedZone names it.
    #[arg(long = "zone", value_name = "DOMAIN")]
    pub zones: Vec<String>,

    /// Whether the Kuadrant deployment's probes accepted any certificate (dns-operator's
    /// `--insecure-health-checks`, true unless it was turned off).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub insecure_health_checks: bool,
}

/// `meridian-hub convert`.
pub fn run(args: &ConvertArgs) -> anyhow::Result<()> {
    let mut clusters = Vec::new();
    let mut unreadable = Vec::new();
    for argument in &args.clusters {
        let (name, path) = cluster_argument(argument);
        let mut cluster = ClusterManifests::new(&name);
        for file in crate::check_manifests_command::yaml_files(&path)? {
            let text = std::fs::read_to_string(&file)?;
            for document in yaml_serde::Deserializer::from_str(&text) {
                let document = Value::deserialize(document)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
                if let Err(error) = cluster.add(&document) {
                    unreadable.push(Finding {
                        at: format!("{} on {name}", file.display()),
                        kind: FindingKind::ChangesAnswers,
                        text: format!("{error}; not converted"),
                    });
                }
            }
        }
        clusters.push(cluster);
    }
    let options = Options {
        zones: args.zones.clone(),
        insecure_health_checks: args.insecure_health_checks,
    };
    let mut conversion = fleet::convert(&clusters, &options);
    conversion.findings.splice(0..0, unreadable);
    print!("{}", render(&conversion, args.mode)?);
    for finding in &conversion.findings {
        eprintln!("{finding}");
    }
    let changes = conversion.changes_answers();
    eprintln!(
        "{} policies from {} clusters: {} ManagedZones, {} findings, {changes} of them changing answers",
        conversion.policies.len(),
        clusters.len(),
        conversion.zones.len(),
        conversion.findings.len()
    );
    if changes > 0 {
        anyhow::bail!("{changes} findings would change answers");
    }
    Ok(())
}

/// `NAME=PATH`, or `PATH` named after its file (without extension) or directory.
fn cluster_argument(argument: &str) -> (String, PathBuf) {
    if let Some((name, path)) = argument.split_once('=')
        && !name.is_empty()
        && !name.contains('/')
    {
        return (name.to_string(), PathBuf::from(path));
    }
    let path = PathBuf::from(argument);
    let name = Path::new(&path)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| argument.to_string());
    (name, path)
}

/// The objects as YAML documents: zones, then policies, then (hub mode) the ManagedCluster
/// labels, or (distributed mode) each agent's flags as comments first.
pub fn render(conversion: &Conversion, mode: Mode) -> anyhow::Result<String> {
    let mut out = String::new();
    if mode == Mode::Distributed {
        for (cluster, labels) in &conversion.cluster_labels {
            let flags: String = labels
                .iter()
                .map(|(k, v)| format!(" --cluster-label {k}={v}"))
                .collect();
            writeln!(
                out,
                "# {cluster}: meridian-agent run --mode distributed --cluster-name {cluster}{flags}"
            )?;
        }
    }
    let mut documents: Vec<Value> = Vec::new();
    documents.extend(
        conversion
            .zones
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()?,
    );
    documents.extend(
        conversion
            .policies
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<Vec<_>, _>>()?,
    );
    if mode == Mode::Hub {
        documents.extend(conversion.cluster_labels.iter().map(managed_cluster_labels));
    }
    for document in documents {
        out.push_str("---\n");
        out.push_str(&yaml_serde::to_string(&document)?);
    }
    Ok(out)
}

/// A ManagedCluster holding only labels: with `kubectl apply --server-side` it sets these
/// labels on the existing cluster and touches nothing else.
fn managed_cluster_labels((cluster, labels): (&String, &BTreeMap<String, String>)) -> Value {
    json!({
        "apiVersion": "cluster.open-cluster-management.io/v1",
        "kind": "ManagedCluster",
        "metadata": { "name": cluster, "labels": labels },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_arguments_name_their_cluster() {
        for (argument, name, path) in [
            ("eu-1=manifests/eu", "eu-1", "manifests/eu"),
            ("manifests/us-1", "us-1", "manifests/us-1"),
            ("manifests/us-2.yaml", "us-2", "manifests/us-2.yaml"),
            ("dir/a=b.yaml", "a=b", "dir/a=b.yaml"),
        ] {
            assert_eq!(
                cluster_argument(argument),
                (name.to_string(), PathBuf::from(path))
            );
        }
    }
}
