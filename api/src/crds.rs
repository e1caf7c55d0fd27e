//! The CRDs Meridian serves, as `crdgen` writes them into `crds/` and the Helm chart's
//! `files/crds/`.

use std::path::Path;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::kuadrant::{DNSHealthCheckProbe, DNSPolicy, DNSRecord, ManagedZone};
use crate::meridian::{ClusterReport, ProbeResults, RouteBinding, Router};

/// The command that regenerates `crds/`, quoted in the staleness check's message.
pub const REGENERATE_COMMAND: &str = "make crds";

/// Every CRD Meridian serves.
pub fn served_crds() -> Vec<CustomResourceDefinition> {
    vec![
        DNSPolicy::crd(),
        DNSRecord::crd(),
        ManagedZone::crd(),
        DNSHealthCheckProbe::crd(),
        ClusterReport::crd(),
        ProbeResults::crd(),
        Router::crd(),
        RouteBinding::crd(),
    ]
}

/// The file a CRD is written to: `<plural>.<group>.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.yaml", crd.metadata.name.as_deref().unwrap_or("unnamed"))
}

/// A CRD as YAML, with a header saying where it comes from.
pub fn render(crd: &CustomResourceDefinition) -> Result<String, yaml_serde::Error> {
    Ok(format!(
        "# Generated from the meridian-api crate by `{REGENERATE_COMMAND}`; do not edit.\n{}",
        yaml_serde::to_string(crd)?
    ))
}

/// Files in `dir` that differ from what [`served_crds`] renders, plus generated-looking files no
/// CRD renders any more. Empty means `dir` is fresh.
pub fn stale_files(dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut stale = Vec::new();
    let mut expected = std::collections::BTreeSet::new();
    for crd in served_crds() {
        let name = file_name(&crd);
        let current = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
        if current != render(&crd)? {
            stale.push(name.clone());
        }
        expected.insert(name);
    }
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if name.ends_with(".yaml") && !expected.contains(&name) {
            stale.push(name);
        }
    }
    Ok(stale)
}

/// Writes every CRD into `dir` and removes YAML files no CRD renders any more.
pub fn write_all(dir: &Path) -> anyhow::Result<Vec<String>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for crd in served_crds() {
        let name = file_name(&crd);
        std::fs::write(dir.join(&name), render(&crd)?)?;
        written.push(name);
    }
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".yaml") && !written.contains(&name) {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn repository_crds() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds")
    }

    #[test]
    fn committed_crds_are_fresh() {
        let stale = stale_files(&repository_crds()).unwrap();
        assert!(
            stale.is_empty(),
            "crds/ is stale ({stale:?}); regenerate it with `{REGENERATE_COMMAND}` and commit the result"
        );
    }

    /// The Helm chart carries its own copy (a chart cannot read files outside itself).
    #[test]
    fn the_charts_crds_are_fresh() {
        let chart =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/helm/meridian/files/crds");
        let stale = stale_files(&chart).unwrap();
        assert!(
            stale.is_empty(),
            "the chart's files/crds/ is stale ({stale:?}); regenerate it with `{REGENERATE_COMMAND}` and commit the result"
        );
    }

    #[test]
    fn write_all_then_stale_files_is_empty_and_removes_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("oldkinds.kuadrant.io.yaml"), "left over").unwrap();
        std::fs::write(dir.path().join("README.md"), "kept").unwrap();
        write_all(dir.path()).unwrap();
        assert!(stale_files(dir.path()).unwrap().is_empty());
        assert!(!dir.path().join("oldkinds.kuadrant.io.yaml").exists());
        assert!(dir.path().join("README.md").exists());

        std::fs::write(
            dir.path().join("dnspolicies.kuadrant.io.yaml"),
            "edited by hand",
        )
        .unwrap();
        assert_eq!(
            stale_files(dir.path()).unwrap(),
            ["dnspolicies.kuadrant.io.yaml"]
        );
    }

    #[test]
    fn every_served_kind_is_in_the_meridian_category_with_a_short_name_and_status_subresource() {
        for crd in served_crds() {
            let names = &crd.spec.names;
            assert_eq!(
                names.categories.as_deref(),
                Some(&["meridian".to_string()][..]),
                "{}",
                names.kind
            );
            assert!(
                names.short_names.as_ref().is_some_and(|s| !s.is_empty()),
                "{}",
                names.kind
            );
            let version = &crd.spec.versions[0];
            let has_status = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .and_then(|s| s.properties.as_ref())
                .is_some_and(|p| p.contains_key("status"));
            // ProbeResults has no status: the agent writes it whole and nobody else writes it.
            assert_eq!(
                has_status,
                names.kind != "ProbeResults",
                "{} has a status",
                names.kind
            );
            assert_eq!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some(),
                has_status,
                "{}: a status is written through its subresource",
                names.kind
            );
        }
    }
}
