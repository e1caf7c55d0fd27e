//! Installing CRDs from YAML files and waiting until the API server serves them.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};
use serde::Deserialize;

use crate::{Error, FIELD_MANAGER};

const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(60);

/// Every CustomResourceDefinition in the `.yaml`/`.yml` files under `dir` (recursively; other
/// kinds in the same files are skipped). A missing directory holds no CRDs.
pub fn load_crds(dir: &Path) -> Result<Vec<CustomResourceDefinition>, Error> {
    let mut files = Vec::new();
    collect_yaml_files(dir, &mut files)?;
    files.sort();
    let mut crds = Vec::new();
    for path in files {
        let text = std::fs::read_to_string(&path)
            .map_err(Error::io(format!("reading {}", path.display())))?;
        for document in yaml_serde::Deserializer::from_str(&text) {
            let value =
                yaml_serde::Value::deserialize(document).map_err(|source| Error::InvalidCrd {
                    path: path.clone(),
                    source,
                })?;
            if value.get("kind").and_then(|kind| kind.as_str()) != Some("CustomResourceDefinition")
            {
                continue;
            }
            let crd = yaml_serde::from_value(value).map_err(|source| Error::InvalidCrd {
                path: path.clone(),
                source,
            })?;
            crds.push(crd);
        }
    }
    Ok(crds)
}

fn collect_yaml_files(dir: &Path, files: &mut Vec<PathBuf>) -> Result<(), Error> {
    if !dir.exists() {
        return Ok(());
    }
    let entries =
        std::fs::read_dir(dir).map_err(Error::io(format!("listing {}", dir.display())))?;
    for entry in entries {
        let path = entry
            .map_err(Error::io(format!("listing {}", dir.display())))?
            .path();
        if path.is_dir() {
            collect_yaml_files(&path, files)?;
        } else if path
            .extension()
            .is_some_and(|ext| ext == "yaml" || ext == "yml")
        {
            files.push(path);
        }
    }
    Ok(())
}

/// Server-side applies the CRDs, then waits until every one is Established.
pub async fn install_crds(client: &Client, crds: &[CustomResourceDefinition]) -> Result<(), Error> {
    let api = Api::<CustomResourceDefinition>::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        let name = crd.metadata.name.as_deref().unwrap_or_default();
        api.patch(name, &params, &Patch::Apply(crd)).await?;
    }
    let established = crds.iter().map(|crd| {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let api = api.clone();
        async move {
            tokio::time::timeout(
                ESTABLISHED_TIMEOUT,
                await_condition(api, &name, conditions::is_crd_established()),
            )
            .await
            .map_err(|_| Error::NotReady {
                what: format!("CRD {name}"),
                seconds: ESTABLISHED_TIMEOUT.as_secs(),
                log_tail: String::new(),
            })?
            .map_err(|error| Error::NotReady {
                what: format!("CRD {name}"),
                seconds: 0,
                log_tail: error.to_string(),
            })
        }
    });
    futures::future::try_join_all(established).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const CRD: &str = "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: things.example.dev
spec:
  group: example.dev
  scope: Namespaced
  names: {kind: Thing, plural: things}
  versions: [{name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}]
";

    #[test]
    fn loads_crds_from_nested_multi_document_files_and_skips_other_kinds() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("nested")).unwrap();
        let other = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: not-a-crd}\n";
        std::fs::write(dir.path().join("a.yaml"), format!("{other}---\n{CRD}")).unwrap();
        std::fs::write(
            dir.path().join("nested/b.yml"),
            CRD.replace("things", "gadgets"),
        )
        .unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not yaml: [").unwrap();

        let names: Vec<_> = load_crds(dir.path())
            .unwrap()
            .into_iter()
            .map(|crd| crd.metadata.name.unwrap())
            .collect();
        assert_eq!(names, ["things.example.dev", "gadgets.example.dev"]);
    }

    #[test]
    fn a_missing_directory_holds_no_crds() {
        assert!(
            load_crds(Path::new("/nonexistent/meridian/crds"))
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn a_malformed_crd_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let broken =
            "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nspec: 7\n";
        std::fs::write(dir.path().join("broken.yaml"), broken).unwrap();
        let error = load_crds(dir.path()).unwrap_err();
        assert!(error.to_string().contains("broken.yaml"), "{error}");
    }
}
