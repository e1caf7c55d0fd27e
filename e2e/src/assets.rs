//! Where the test bed's binaries and upstream CRDs are: the per-version cache directory that
//! `e2e/testbed/build.sh` fills, or `KUBEBUILDER_ASSETS` for kube-apiserver, etcd and kubectl.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// Environment variable naming the test bed's cache directory; the Makefile sets it.
pub const TESTBED_DIR_ENV: &str = "MERIDIAN_TESTBED_DIR";
/// The controller-runtime convention for a directory holding kube-apiserver, etcd and kubectl.
pub const KUBEBUILDER_ASSETS_ENV: &str = "KUBEBUILDER_ASSETS";

/// Paths of everything the test bed runs or installs.
#[derive(Debug, Clone)]
pub struct TestBedAssets {
    pub kube_apiserver: PathBuf,
    pub etcd: PathBuf,
    pub kubectl: PathBuf,
    pub ocm_work: PathBuf,
    pub ocm_placement: PathBuf,
    /// Upstream CRD YAML (Gateway API, OCM, OpenShift Route), one folder per project.
    pub upstream_crds: PathBuf,
    /// Meridian's own generated CRDs (`crds/` in the repository).
    pub meridian_crds: PathBuf,
}

impl TestBedAssets {
    /// Finds the assets, checking that each exists.
    pub fn locate() -> Result<Self, Error> {
        let dir = match std::env::var_os(TESTBED_DIR_ENV) {
            Some(dir) => PathBuf::from(dir),
            None => build_script_dir()?,
        };
        let kube_assets = std::env::var_os(KUBEBUILDER_ASSETS_ENV)
            .map(PathBuf::from)
            .filter(|assets| assets.join("kube-apiserver").exists() && assets.join("etcd").exists());
        let kube_bin = kube_assets.unwrap_or_else(|| dir.join("bin"));
        let kubectl = [kube_bin.join("kubectl"), dir.join("bin/kubectl")]
            .into_iter()
            .find(|path| path.exists())
            .unwrap_or_else(|| kube_bin.join("kubectl"));

        let assets = TestBedAssets {
            kube_apiserver: kube_bin.join("kube-apiserver"),
            etcd: kube_bin.join("etcd"),
            kubectl,
            ocm_work: dir.join("bin/work"),
            ocm_placement: dir.join("bin/placement"),
            upstream_crds: dir.join("crds"),
            meridian_crds: repository_root().join("crds"),
        };
        for (path, hint) in [
            (&assets.kube_apiserver, "kube-apiserver"),
            (&assets.etcd, "etcd"),
            (&assets.ocm_work, "OCM work agent"),
            (&assets.ocm_placement, "OCM placement controller"),
            (&assets.upstream_crds, "upstream CRDs"),
        ] {
            if !path.exists() {
                return Err(Error::MissingAsset { path: path.clone(), hint });
            }
        }
        Ok(assets)
    }
}

/// The repository root, found from this crate's manifest directory at compile time.
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the e2e crate lives inside the repository")
        .to_path_buf()
}

/// Asks the build script for its cache directory, so `cargo test` run by hand finds the same
/// directory `make testbed` filled.
fn build_script_dir() -> Result<PathBuf, Error> {
    let script = repository_root().join("e2e/testbed/build.sh");
    let output = Command::new("bash")
        .arg(&script)
        .arg("--print-dir")
        .output()
        .map_err(|source| Error::Spawn { program: script.display().to_string(), source })?;
    let dir = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if !output.status.success() || dir.is_empty() {
        return Err(Error::MissingAsset { path: script, hint: "the build script failed" });
    }
    Ok(PathBuf::from(dir))
}
