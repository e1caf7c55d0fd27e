//! `meridian-hub check-manifests DIR`: what applying manifests written for
//! multicluster-gateway-controller (MGC, the `kuadrant.io/v1alpha1` API as it stood in its
//! releases 0.2 and 0.3 and until it was removed) would change under Meridian. Offline: it reads
//! every YAML file under the directory, checks each DNSPolicy, DNSRecord, ManagedZone and
//! DNSHealthCheckProbe against Meridian's own CRD schemas and the differences docs/mgc.md lists,
//! and prints one line per finding. It exits non-zero when the API server or Meridian would
//! refuse something.

use std::path::{Path, PathBuf};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use serde::Deserialize;
use serde_json::Value;

/// One difference between what a manifest says under MGC and what it does under Meridian.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Refused by the API server or reported in status; `fix` says what to write instead.
    Refused { path: String, fix: String },
    /// Not in Meridian's schema: the API server drops it.
    Dropped { path: String },
    /// Accepted, and read as `meaning`.
    ReadAs { path: String, meaning: String },
}

impl Finding {
    pub fn is_refusal(&self) -> bool {
        matches!(self, Finding::Refused { .. })
    }
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Finding::Refused { path, fix } => write!(f, "refused  {path}: {fix}"),
            Finding::Dropped { path } => write!(
                f,
                "dropped  {path}: not in Meridian's schema; the API server drops it"
            ),
            Finding::ReadAs { path, meaning } => write!(f, "read as  {path}: {meaning}"),
        }
    }
}

#[derive(Debug, clap::Args)]
pub struct CheckManifestsArgs {
    /// A directory of YAML manifests (searched recursively), or one file.
    pub path: PathBuf,
}

/// `meridian-hub check-manifests`.
pub fn run(args: &CheckManifestsArgs) -> anyhow::Result<()> {
    let crds = meridian_api::crds::served_crds();
    let mut refused = 0;
    let mut checked = 0;
    for file in yaml_files(&args.path)? {
        let text = std::fs::read_to_string(&file)?;
        for document in yaml_serde::Deserializer::from_str(&text) {
            let object = Value::deserialize(document)
                .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
            let Some(findings) = check_object(&object, &crds) else {
                continue;
            };
            checked += 1;
            let name = format!(
                "{} {}/{}",
                object["kind"].as_str().unwrap_or_default(),
                object["metadata"]["namespace"].as_str().unwrap_or("-"),
                object["metadata"]["name"].as_str().unwrap_or_default()
            );
            if findings.is_empty() {
                println!("{}: {name}: applies unchanged", file.display());
            }
            for finding in &findings {
                println!("{}: {name}: {finding}", file.display());
            }
            refused += findings.iter().filter(|f| f.is_refusal()).count();
        }
    }
    println!("{checked} objects checked, {refused} refusals");
    if refused > 0 {
        anyhow::bail!("{refused} refusals");
    }
    Ok(())
}

pub(crate) fn yaml_files(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if path.is_file() {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        // A link is not followed: a link to a parent directory would recurse forever.
        if entry.file_type()?.is_symlink() {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            files.extend(yaml_files(&path)?);
        } else if path.extension().is_some_and(|e| e == "yaml" || e == "yml") {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// The findings for one object, or `None` when it is not one of the `kuadrant.io/v1alpha1`
/// kinds Meridian serves (nor a Kuadrant `kuadrant.io/v1` DNSPolicy, which is refused with the
/// way over).
pub fn check_object(object: &Value, crds: &[CustomResourceDefinition]) -> Option<Vec<Finding>> {
    if object["apiVersion"] == "kuadrant.io/v1" && object["kind"] == "DNSPolicy" {
        return Some(vec![Finding::Refused {
            path: "apiVersion".into(),
            fix: "kuadrant.io/v1 is Kuadrant's DNSPolicy, which Meridian does not serve (its CRD serves kuadrant.io/v1alpha1 under the same name): `meridian-hub convert` writes Meridian's objects from it (docs/migrating-from-kuadrant.md)".into(),
        }]);
    }
    if object["apiVersion"] != "kuadrant.io/v1alpha1" {
        return None;
    }
    let kind = object["kind"].as_str()?;
    let crd = crds
        .iter()
        .find(|c| c.spec.group == "kuadrant.io" && c.spec.names.kind == kind)?;
    let schema = crd
        .spec
        .versions
        .iter()
        .find(|v| v.name == "v1alpha1")?
        .schema
        .as_ref()?
        .open_api_v3_schema
        .as_ref()?;
    let mut findings = Vec::new();
    let spec = &object["spec"];
    if let Some(spec_schema) = schema.properties.as_ref().and_then(|p| p.get("spec")) {
        compare(spec, spec_schema, "spec", &mut findings);
    }
    findings.extend(known_differences(kind, object));
    // What the typed API makes of it (types, enums the schema cannot say).
    let typed = match kind {
        "DNSPolicy" => {
            serde_json::from_value::<meridian_api::kuadrant::DNSPolicy>(object.clone()).err()
        }
        "DNSRecord" => {
            serde_json::from_value::<meridian_api::kuadrant::DNSRecord>(object.clone()).err()
        }
        "ManagedZone" => {
            serde_json::from_value::<meridian_api::kuadrant::ManagedZone>(object.clone()).err()
        }
        "DNSHealthCheckProbe" => {
            serde_json::from_value::<meridian_api::kuadrant::DNSHealthCheckProbe>(object.clone())
                .err()
        }
        _ => None,
    };
    if let Some(error) = typed
        && !findings.iter().any(Finding::is_refusal)
    {
        findings.push(Finding::Refused {
            path: "spec".into(),
            fix: error.to_string(),
        });
    }
    Some(findings)
}

/// Unknown fields (dropped) and missing required ones (refused), against the schema.
fn compare(value: &Value, schema: &JSONSchemaProps, path: &str, findings: &mut Vec<Finding>) {
    match value {
        Value::Object(fields) => {
            if schema.x_kubernetes_preserve_unknown_fields == Some(true) {
                return;
            }
            for required in schema.required.iter().flatten() {
                if !fields.contains_key(required) {
                    findings.push(Finding::Refused {
                        path: format!("{path}.{required}"),
                        fix: "required by Meridian: write it (docs/api.md says what it holds)"
                            .into(),
                    });
                }
            }
            let properties = schema.properties.as_ref();
            let map_values = match &schema.additional_properties {
                Some(JSONSchemaPropsOrBool::Schema(s)) => Some(&**s),
                _ => None,
            };
            for (name, field) in fields {
                let child = format!("{path}.{name}");
                match properties.and_then(|p| p.get(name)).or(map_values) {
                    Some(field_schema) => compare(field, field_schema, &child, findings),
                    None if schema.additional_properties.is_some() => {}
                    None => findings.push(Finding::Dropped { path: child }),
                }
            }
        }
        Value::Array(items) => {
            if let Some(JSONSchemaPropsOrArray::Schema(item)) = &schema.items {
                for (i, item_value) in items.iter().enumerate() {
                    compare(item_value, item, &format!("{path}[{i}]"), findings);
                }
            }
        }
        _ => {}
    }
}

/// The differences a schema cannot show (docs/mgc.md).
fn known_differences(kind: &str, object: &Value) -> Vec<Finding> {
    let spec = &object["spec"];
    let mut findings = Vec::new();
    match kind {
        "DNSPolicy" if spec["targetRef"]["group"] == "" => {
            findings.push(Finding::ReadAs {
                path: "spec.targetRef.group".into(),
                meaning:
                    "\"\" next to kind Gateway is the Gateway API group, gateway.networking.k8s.io"
                        .into(),
            });
        }
        "ManagedZone" => {
            if spec.get("parentManagedZone").is_some() {
                findings.push(Finding::Refused {
                    path: "spec.parentManagedZone".into(),
                    fix: "not supported: remove it and delegate the zone with NS records in the parent zone".into(),
                });
            }
            let own = object["metadata"]["namespace"].as_str();
            if let Some(other) = spec["dnsProviderSecretRef"]["namespace"].as_str()
                && Some(other) != own
            {
                findings.push(Finding::Refused {
                    path: "spec.dnsProviderSecretRef.namespace".into(),
                    fix: format!(
                        "the zone's Secret is read only from the ManagedZone's own namespace; copy Secret {other}/{} there and remove the field",
                        spec["dnsProviderSecretRef"]["name"].as_str().unwrap_or_default()
                    ),
                });
            }
        }
        "DNSRecord" => {
            if spec.get("rootHost").is_none()
                && let Ok(parsed) =
                    serde_json::from_value::<meridian_api::kuadrant::DNSRecordSpec>(spec.clone())
            {
                findings.push(match parsed.effective_root_host() {
                    Some(root) => Finding::ReadAs {
                        path: "spec.rootHost".into(),
                        meaning: format!("absent: the root host is {root}, the name every endpoint is at or below"),
                    },
                    None => Finding::Refused {
                        path: "spec.rootHost".into(),
                        fix: "absent, and no endpoint's name holds all the others: set spec.rootHost to the host the records serve".into(),
                    },
                });
            }
            for (i, endpoint) in spec["endpoints"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                for (j, property) in endpoint["providerSpecific"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    let name = property["name"].as_str().unwrap_or_default();
                    let value = property["value"].as_str().unwrap_or_default();
                    let path = format!("spec.endpoints[{i}].providerSpecific[{j}]");
                    if matches!(name, "weight" | "geo-code") {
                        continue;
                    }
                    let read = meridian_controllers::decide::convert::routing_property(name, value);
                    findings.push(if read.name != name {
                        Finding::ReadAs {
                            path,
                            meaning: format!("{name}={value} is {}={}", read.name, read.value),
                        }
                    } else {
                        Finding::ReadAs {
                            path,
                            meaning: format!("{name} is not a routing property Meridian knows; providers ignore it (Meridian's are weight and geo-code)"),
                        }
                    });
                }
            }
        }
        _ => {}
    }
    findings
}
