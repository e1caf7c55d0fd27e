//! What `meridian-hub convert` reads: Kuadrant's `kuadrant.io/v1` DNSPolicies, the provider
//! Secrets they name (their type and labels, never their data) and the Gateways they target
//! (their listeners' hostnames), each from one cluster's manifests.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

/// The Secret label that makes a Secret its namespace's provider when a policy names none
/// (Kuadrant's dns-operator's `kuadrant.io/default-provider`).
pub const DEFAULT_PROVIDER_LABEL: &str = "kuadrant.io/default-provider";

/// One cluster's manifests, as far as a conversion needs them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClusterManifests {
    /// The cluster's name (its ManagedCluster's, or its agent's `--cluster-name`).
    pub cluster: String,
    pub policies: Vec<Policy>,
    pub secrets: Vec<SecretFacts>,
    pub gateways: Vec<GatewayFacts>,
    /// Documents that are none of these kinds (Deployments, HTTPRoutes, …), left alone.
    pub others: usize,
}

/// A `kuadrant.io/v1` DNSPolicy.
#[derive(Debug, Clone, PartialEq)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    pub spec: Spec,
}

/// `DNSPolicy.spec` of `kuadrant.io/v1`. Fields Kuadrant does not define either are kept in
/// `unknown`, so the conversion can say they were not carried.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    pub target_ref: TargetRef,
    #[serde(default)]
    pub health_check: Option<HealthCheck>,
    #[serde(default)]
    pub load_balancing: Option<LoadBalancing>,
    #[serde(default)]
    pub provider_refs: Vec<NameRef>,
    #[serde(default)]
    pub exclude_addresses: Vec<String>,
    #[serde(default)]
    pub delegate: bool,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TargetRef {
    #[serde(default)]
    pub group: String,
    #[serde(default)]
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub section_name: Option<String>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

/// dns-operator's `HealthCheckSpec`; every field optional, with the defaults its CRD applies
/// written in the conversion.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HealthCheck {
    #[serde(default)]
    pub port: Option<i64>,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub protocol: Option<String>,
    #[serde(default)]
    pub interval: Option<String>,
    #[serde(default)]
    pub additional_headers_ref: Option<NameRef>,
    #[serde(default)]
    pub failure_threshold: Option<i64>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancing {
    #[serde(default)]
    pub weight: Option<i64>,
    #[serde(default)]
    pub geo: Option<String>,
    #[serde(default)]
    pub default_geo: Option<bool>,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct NameRef {
    pub name: String,
}

/// What a conversion may know of a Secret: never its data.
#[derive(Debug, Clone, PartialEq)]
pub struct SecretFacts {
    pub namespace: String,
    pub name: String,
    pub type_: String,
    pub default_provider: bool,
}

/// A Gateway's name and its listeners' hostnames.
#[derive(Debug, Clone, PartialEq)]
pub struct GatewayFacts {
    pub namespace: String,
    pub name: String,
    pub hostnames: Vec<String>,
}

/// A document that claims to be a Kuadrant v1 DNSPolicy but is not one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{namespace}/{name}: not a kuadrant.io/v1 DNSPolicy: {reason}")]
pub struct Unreadable {
    pub namespace: String,
    pub name: String,
    pub reason: String,
}

impl ClusterManifests {
    pub fn new(cluster: &str) -> Self {
        ClusterManifests {
            cluster: cluster.to_string(),
            ..Default::default()
        }
    }

    /// Takes in one parsed YAML document. A DNSPolicy that does not parse is returned as an
    /// error (and left out); every other document is kept or counted.
    pub fn add(&mut self, document: &Value) -> Result<(), Unreadable> {
        let api_version = document["apiVersion"].as_str().unwrap_or_default();
        let kind = document["kind"].as_str().unwrap_or_default();
        let metadata = &document["metadata"];
        // Kuadrant's controllers work in the object's namespace; `kubectl apply` without one
        // puts it in `default`.
        let namespace = metadata["namespace"]
            .as_str()
            .unwrap_or("default")
            .to_string();
        let name = metadata["name"].as_str().unwrap_or_default().to_string();
        match (api_version, kind) {
            // `kubectl get -o yaml` writes a List of the objects.
            ("v1", "List") => {
                for item in document["items"].as_array().into_iter().flatten() {
                    self.add(item)?;
                }
            }
            ("kuadrant.io/v1", "DNSPolicy") => {
                let spec = Spec::deserialize(&document["spec"]).map_err(|e| Unreadable {
                    namespace: namespace.clone(),
                    name: name.clone(),
                    reason: e.to_string(),
                })?;
                self.policies.push(Policy {
                    namespace,
                    name,
                    spec,
                });
            }
            ("v1", "Secret") => self.secrets.push(SecretFacts {
                namespace,
                name,
                type_: document["type"].as_str().unwrap_or("Opaque").to_string(),
                default_provider: metadata["labels"][DEFAULT_PROVIDER_LABEL] == "true",
            }),
            (version, "Gateway") if version.starts_with("gateway.networking.k8s.io/") => {
                let hostnames = document["spec"]["listeners"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|l| l["hostname"].as_str())
                    .map(|h| h.trim_end_matches('.').to_ascii_lowercase())
                    .collect();
                self.gateways.push(GatewayFacts {
                    namespace,
                    name,
                    hostnames,
                });
            }
            _ => self.others += 1,
        }
        Ok(())
    }

    pub fn secret(&self, namespace: &str, name: &str) -> Option<&SecretFacts> {
        self.secrets
            .iter()
            .find(|s| s.namespace == namespace && s.name == name)
    }

    pub fn gateway(&self, namespace: &str, name: &str) -> Option<&GatewayFacts> {
        self.gateways
            .iter()
            .find(|g| g.namespace == namespace && g.name == name)
    }

    /// The namespace's default provider Secret, when exactly one is labelled so.
    pub fn default_provider(&self, namespace: &str) -> Option<&SecretFacts> {
        let mut labelled = self
            .secrets
            .iter()
            .filter(|s| s.namespace == namespace && s.default_provider);
        let first = labelled.next()?;
        labelled.next().is_none().then_some(first)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn documents_are_sorted_by_kind_and_secret_data_is_never_kept() {
        let mut cluster = ClusterManifests::new("eu-1");
        for document in [
            json!({"apiVersion": "kuadrant.io/v1", "kind": "DNSPolicy",
                   "metadata": {"name": "p", "namespace": "team"},
                   "spec": {"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
                            "surprise": 1}}),
            json!({"apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/aws",
                   "metadata": {"name": "aws", "namespace": "team",
                                "labels": {DEFAULT_PROVIDER_LABEL: "true"}},
                   "stringData": {"AWS_SECRET_ACCESS_KEY": "hunter2"}}),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                   "metadata": {"name": "gw", "namespace": "team"},
                   "spec": {"listeners": [{"name": "a", "hostname": "App.Example.com."}, {"name": "b"}]}}),
            json!({"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}},
            ]}),
        ] {
            cluster.add(&document).unwrap();
        }
        assert_eq!(cluster.policies[0].spec.target_ref.name, "gw");
        assert_eq!(
            cluster.policies[0].spec.unknown.keys().collect::<Vec<_>>(),
            ["surprise"]
        );
        assert_eq!(cluster.default_provider("team").unwrap().name, "aws");
        assert!(cluster.default_provider("other").is_none());
        assert_eq!(
            cluster.gateway("team", "gw").unwrap().hostnames,
            ["app.example.com"]
        );
        assert_eq!(cluster.others, 1);
        assert!(!format!("{cluster:?}").contains("hunter2"));
        let broken = json!({"apiVersion": "kuadrant.io/v1", "kind": "DNSPolicy",
                            "metadata": {"name": "b"}, "spec": {"targetRef": {"name": 3}}});
        let error = cluster.add(&broken).unwrap_err();
        assert_eq!(
            (error.namespace.as_str(), error.name.as_str()),
            ("default", "b")
        );
    }
}
