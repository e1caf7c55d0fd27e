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
    /// OCM's registration: `controller` on the hub, `agent` on a spoke.
    pub ocm_registration: PathBuf,
    /// OCM's addon manager (install strategies, rollouts, AddOnTemplates, add-on CSRs).
    pub ocm_addon: PathBuf,
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
            .filter(|assets| {
                assets.join("kube-apiserver").exists() && assets.join("etcd").exists()
            });
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
            ocm_registration: dir.join("bin/registration"),
            ocm_addon: dir.join("bin/addon"),
            upstream_crds: dir.join("crds"),
            meridian_crds: repository_root().join("crds"),
        };
        for (path, hint) in [
            (&assets.kube_apiserver, "kube-apiserver"),
            (&assets.etcd, "etcd"),
            (&assets.ocm_work, "OCM work agent"),
            (&assets.ocm_placement, "OCM placement controller"),
            (&assets.ocm_registration, "OCM registration"),
            (&assets.ocm_addon, "OCM addon manager"),
            (&assets.upstream_crds, "upstream CRDs"),
        ] {
            if !path.exists() {
                return Err(Error::MissingAsset {
                    path: path.clone(),
                    hint,
                });
            }
        }
        Ok(assets)
    }
}

/// Environment variable naming the Helm binary; the Makefile sets it.
pub const HELM_ENV: &str = "MERIDIAN_HELM";

/// Helm, built from its Go module by `e2e/testbed/helm.sh` (`make testbed` runs it).
pub fn helm() -> Result<PathBuf, Error> {
    let path = match std::env::var_os(HELM_ENV) {
        Some(path) => PathBuf::from(path),
        None => script_answer("e2e/testbed/helm.sh", "--print-path")?,
    };
    if !path.exists() {
        return Err(Error::MissingAsset {
            path,
            hint: "helm (`make testbed` builds it)",
        });
    }
    Ok(path)
}

/// A `helm` command whose cache, configuration and data stay out of the user's home.
pub fn helm_command() -> Result<Command, Error> {
    let mut command = Command::new(helm()?);
    for (variable, dir) in [
        ("HELM_CACHE_HOME", "meridian-helm-cache"),
        ("HELM_CONFIG_HOME", "meridian-helm-config"),
        ("HELM_DATA_HOME", "meridian-helm-data"),
    ] {
        command.env(variable, std::env::temp_dir().join(dir));
    }
    Ok(command)
}

/// The Kubernetes release the test bed builds (`k8s.io/kubernetes` in `e2e/testbed/kube/go.mod`).
pub fn pinned_kubernetes_version() -> Option<String> {
    let go_mod = std::fs::read_to_string(repository_root().join("e2e/testbed/kube/go.mod")).ok()?;
    required_version(&go_mod, "k8s.io/kubernetes")
}

/// The version a go.mod requires of `module`, in a `require` block or on a `require` line.
fn required_version(go_mod: &str, module: &str) -> Option<String> {
    go_mod.lines().find_map(|line| {
        let mut words = line
            .split_whitespace()
            .skip_while(|word| *word == "require");
        (words.next()? == module).then(|| words.next().map(String::from))?
    })
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
    script_answer("e2e/testbed/build.sh", "--print-dir")
}

/// A test-bed tool's folder: the one `env` names, else the one `script` builds it in (asked with
/// `--print-dir`).
pub(crate) fn testbed_dir(env: &str, script: &str) -> Result<PathBuf, Error> {
    match std::env::var_os(env) {
        Some(dir) => Ok(PathBuf::from(dir)),
        None => script_answer(script, "--print-dir"),
    }
}

/// The path a test-bed script prints when asked where it puts things (`script` relative to the
/// repository root).
pub(crate) fn script_answer(script: &str, question: &str) -> Result<PathBuf, Error> {
    let script = repository_root().join(script);
    let output = Command::new("bash")
        .arg(&script)
        .arg(question)
        .output()
        .map_err(|source| Error::Spawn {
            program: script.display().to_string(),
            source,
        })?;
    let answer = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if !output.status.success() || answer.is_empty() {
        return Err(Error::MissingAsset {
            path: script,
            hint: "the test-bed script failed",
        });
    }
    Ok(PathBuf::from(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn required_version_reads_blocks_and_single_lines() {
        let block = "module x\n\nrequire (\n\tk8s.io/api v0.36.3 // indirect\n\tk8s.io/kubernetes v1.36.3 // indirect\n)\n\ntool k8s.io/kubernetes/cmd/kubectl\n";
        assert_eq!(
            required_version(block, "k8s.io/kubernetes").as_deref(),
            Some("v1.36.3")
        );
        let single = "module x\nrequire go.etcd.io/etcd/server/v3 v3.6.8\n";
        assert_eq!(
            required_version(single, "go.etcd.io/etcd/server/v3").as_deref(),
            Some("v3.6.8")
        );
        assert_eq!(required_version(single, "k8s.io/kubernetes"), None);
    }

    #[test]
    fn the_pinned_kubernetes_release_is_a_v1_release() {
        let version = pinned_kubernetes_version().expect("e2e/testbed/kube/go.mod pins kubernetes");
        assert!(version.starts_with("v1."), "{version}");
    }
}
