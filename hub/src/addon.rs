//! The agent as an OCM add-on, installed by OCM's addon manager: what the hub writes for it.
//!
//! The hub renders the agent's manifests once into an `AddOnTemplate` named after their digest
//! (`meridian-agent-<digest>`), and points the `ClusterManagementAddOn` `meridian` at it as the
//! default config. OCM's addon manager then does the rest, as for any add-on of the fleet:
//! - installs it where the add-on's placements select (`installStrategy`), and where the hub
//!   asks with a `ManagedClusterAddOn` (every cluster a Gateway is placed on);
//! - rolls a new template out by the placements' rollout strategy (a new hub version is a new
//!   template name, so `Progressive` reaches one cluster, sees it succeed, then the next);
//! - honours `AddOnDeploymentConfig` (image registries, proxy and its CA bundle, node
//!   placement, resources, install namespace);
//! - registers the agent through a CSR the spoke's registration agent makes and rotates, so the
//!   hub mints no token and no credential travels inside a ManifestWork;
//! - reports `Available` from the agent Deployment's availability on the spoke.
//!
//! The template asks for no hub permissions: OCM would bind them to the add-on's fleet-wide
//! group as well as to the cluster's agent, so any cluster's agent could write any other
//! cluster's report. The hub binds its reporter role in each cluster namespace to that
//! cluster's agent user alone ([`agent_user`]); what every agent reads fleet-wide is bound to
//! the add-on's group ([`ADDON_GROUP`]) by the chart.

use serde_json::{Value, json};

use meridian_dns::shortcode::shortcode;

/// The add-on's name: the ClusterManagementAddOn and every ManagedClusterAddOn.
pub const ADDON_NAME: &str = "meridian";
/// The agent's namespace on a spoke when the addon manager installs it (an
/// AddOnDeploymentConfig's `agentInstallNamespace` moves it). Not the namespace the hub's own
/// ManifestWork used, so that an upgrade can run both agents while it hands over.
pub const ADDON_NAMESPACE: &str = "meridian-addon";
/// Prefix of the templates' names; the rest is a digest of what they install.
pub const TEMPLATE_PREFIX: &str = "meridian-agent-";
/// Label on the templates the hub writes (the uninstall finds them by it).
pub const TEMPLATE_LABEL: &str = "meridian.dev/agent-template";
/// The group OCM's signer gives every Meridian agent's certificate, on every cluster.
pub const ADDON_GROUP: &str = "system:open-cluster-management:addon:meridian";
/// Name of the spoke-side objects the template installs (ServiceAccount, Deployment, roles).
pub const ADDON_AGENT: &str = "meridian-agent";
/// The ClusterRole (and its binding) the template gives the agent on its spoke: named apart
/// from the hub-written ManifestWork's `meridian-agent`, which an upgrade deletes.
pub const ADDON_SPOKE_ROLE: &str = "open-cluster-management:meridian:agent";

/// The hub user OCM's registration issues `cluster`'s agent a certificate for (the addon
/// manager's template agent is named `<addon>-agent`).
pub fn agent_user(cluster: &str) -> String {
    format!(
        "system:open-cluster-management:cluster:{cluster}:addon:{ADDON_NAME}:agent:{ADDON_NAME}-agent"
    )
}

/// A Placement the add-on is installed by, and how new templates roll out over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonPlacement {
    pub namespace: String,
    pub name: String,
}

impl std::str::FromStr for AddonPlacement {
    type Err = String;

    /// `NAMESPACE/NAME`.
    fn from_str(value: &str) -> Result<Self, String> {
        match value.split_once('/') {
            Some((namespace, name))
                if meridian_api::names::is_object_name(namespace)
                    && meridian_api::names::is_object_name(name) =>
            {
                Ok(AddonPlacement {
                    namespace: namespace.into(),
                    name: name.into(),
                })
            }
            _ => Err(format!(
                "{value:?} is not NAMESPACE/NAME of a Placement (DNS subdomain names)"
            )),
        }
    }
}

/// How a new template reaches the clusters of a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rollout {
    /// Every cluster at once.
    All,
    /// At most this many clusters at a time; the next once those succeed.
    Progressive { max_concurrency: u32 },
}

impl std::str::FromStr for Rollout {
    type Err = String;

    /// `all`, or `progressive` / `progressive:N` (N clusters at a time; one by default).
    fn from_str(value: &str) -> Result<Self, String> {
        match value.split_once(':') {
            None if value == "all" => Ok(Rollout::All),
            None if value == "progressive" => Ok(Rollout::Progressive { max_concurrency: 1 }),
            Some(("progressive", n)) => match n.parse::<u32>() {
                Ok(n) if n > 0 => Ok(Rollout::Progressive { max_concurrency: n }),
                _ => Err(format!("{n:?} is not a positive number of clusters")),
            },
            _ => Err(format!(
                "{value:?} is not `all`, `progressive` or `progressive:N`"
            )),
        }
    }
}

/// How the addon manager installs the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddonInstall {
    /// Placements selecting clusters to install on besides those the hub places Gateways on.
    pub placements: Vec<AddonPlacement>,
    pub rollout: Rollout,
    /// An AddOnDeploymentConfig (`namespace/name`) applied to every cluster's agent.
    pub deployment_config: Option<AddonPlacement>,
}

/// The template's name for `manifests`: a new agent (image, arguments, manifests) is a new
/// name, which is what makes the addon manager roll it out.
pub fn template_name(manifests: &[Value]) -> String {
    format!(
        "{TEMPLATE_PREFIX}{}",
        shortcode(&Value::from(manifests.to_vec()).to_string(), 10)
    )
}

/// The AddOnTemplate carrying `manifests`, with its agent registered as a hub client (a CSR
/// signed by the hub's client signer) and no hub permissions (the hub binds them).
pub fn addon_template(manifests: &[Value]) -> Value {
    json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "AddOnTemplate",
        "metadata": {
            "name": template_name(manifests),
            "labels": { TEMPLATE_LABEL: "true" },
        },
        "spec": {
            "addonName": ADDON_NAME,
            "agentSpec": { "workload": { "manifests": manifests } },
            "registration": [{ "type": "KubeClient", "kubeClient": {} }],
        },
    })
}

/// The ClusterManagementAddOn: the template as the default config (and the deployment config
/// when given), installed by the addon manager over `install`'s placements.
pub fn cluster_management_addon(template: &str, install: &AddonInstall) -> Value {
    let rollout = match install.rollout {
        Rollout::All => json!({ "type": "All" }),
        Rollout::Progressive { max_concurrency } => json!({
            "type": "Progressive",
            "progressive": { "maxConcurrency": max_concurrency },
        }),
    };
    let mut configs = vec![json!({
        "group": "addon.open-cluster-management.io",
        "resource": "addontemplates",
        "defaultConfig": { "name": template },
    })];
    let mut deployment_config = json!({
        "group": "addon.open-cluster-management.io",
        "resource": "addondeploymentconfigs",
    });
    if let Some(config) = &install.deployment_config {
        deployment_config["defaultConfig"] =
            json!({ "namespace": config.namespace, "name": config.name });
    }
    configs.push(deployment_config);
    let placements: Vec<Value> = install
        .placements
        .iter()
        .map(|placement| {
            json!({
                "namespace": placement.namespace,
                "name": placement.name,
                "rolloutStrategy": rollout,
            })
        })
        .collect();
    let strategy = if placements.is_empty() {
        json!({ "type": "Manual" })
    } else {
        json!({ "type": "Placements", "placements": placements })
    };
    json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "ClusterManagementAddOn",
        "metadata": {
            "name": ADDON_NAME,
            // The addon manager, not the hub, installs and rolls the agents.
            "annotations": { "addon.open-cluster-management.io/lifecycle": "addon-manager" },
        },
        "spec": {
            "addOnMeta": {
                "displayName": "Meridian",
                "description": "Multi-cluster DNS load balancing; the agent reports Gateways and probes health.",
            },
            "supportedConfigs": configs,
            "installStrategy": strategy,
        },
    })
}

/// The ManagedClusterAddOn asking for the agent on `cluster` (a cluster the hub places a
/// Gateway on, whether or not a placement of the add-on selects it).
pub fn managed_cluster_addon(cluster: &str) -> Value {
    json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "ManagedClusterAddOn",
        "metadata": { "name": ADDON_NAME, "namespace": cluster },
        // A spec with no field applies as none, which the schema refuses; the template's
        // namespace (an AddOnDeploymentConfig's, when it names one, wins).
        "spec": { "installNamespace": ADDON_NAMESPACE },
    })
}

/// The AddOnTemplate kind.
pub fn template_resource() -> kube::core::ApiResource {
    kube::core::ApiResource::from_gvk(&kube::core::GroupVersionKind::gvk(
        "addon.open-cluster-management.io",
        "v1alpha1",
        "AddOnTemplate",
    ))
}

/// Whether OCM reports `cluster`'s add-on available (its agent Deployment is available).
pub fn is_available(addon: &meridian_api::upstream::ManagedClusterAddOn) -> bool {
    addon.status.as_ref().is_some_and(|status| {
        status
            .conditions
            .iter()
            .any(|c| c.type_ == "Available" && c.status == "True")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placements_and_rollouts_parse_and_nonsense_is_refused() {
        let placement: AddonPlacement = "ocm/all-spokes".parse().unwrap();
        assert_eq!(
            (placement.namespace.as_str(), placement.name.as_str()),
            ("ocm", "all-spokes")
        );
        for bad in ["all-spokes", "/x", "x/", "Ocm/x", "a/b/c", "a b/c"] {
            assert!(bad.parse::<AddonPlacement>().is_err(), "{bad}");
        }
        let table = [
            ("all", Some(Rollout::All)),
            (
                "progressive",
                Some(Rollout::Progressive { max_concurrency: 1 }),
            ),
            (
                "progressive:5",
                Some(Rollout::Progressive { max_concurrency: 5 }),
            ),
            ("progressive:0", None),
            ("progressive:-1", None),
            ("Progressive", None),
            ("canary", None),
        ];
        for (value, expected) in table {
            assert_eq!(value.parse::<Rollout>().ok(), expected, "{value}");
        }
    }

    #[test]
    fn a_new_agent_is_a_new_template_and_the_same_one_is_the_same() {
        let a = vec![json!({ "kind": "Deployment", "image": "r/agent:1" })];
        let b = vec![json!({ "kind": "Deployment", "image": "r/agent:2" })];
        assert_eq!(template_name(&a), template_name(&a.clone()));
        assert_ne!(template_name(&a), template_name(&b));
        assert!(template_name(&a).len() <= 63);
        let template = addon_template(&a);
        assert_eq!(template["metadata"]["name"], template_name(&a).as_str());
        assert_eq!(template["spec"]["addonName"], ADDON_NAME);
        // Registered as a hub client, with no permissions bound by OCM (they would reach the
        // add-on's fleet-wide group).
        assert_eq!(
            template["spec"]["registration"],
            json!([{ "type": "KubeClient", "kubeClient": {} }])
        );
    }

    #[test]
    fn the_addon_rolls_out_over_its_placements_or_waits_for_the_hub_to_ask() {
        let install = AddonInstall {
            placements: vec!["ocm/spokes".parse().unwrap()],
            rollout: Rollout::Progressive { max_concurrency: 1 },
            deployment_config: Some("ocm/agents".parse().unwrap()),
        };
        let addon = cluster_management_addon("meridian-agent-abc", &install);
        assert_eq!(
            addon["metadata"]["annotations"]["addon.open-cluster-management.io/lifecycle"],
            "addon-manager"
        );
        assert_eq!(
            addon["spec"]["installStrategy"],
            json!({ "type": "Placements", "placements": [{
                "namespace": "ocm", "name": "spokes",
                "rolloutStrategy": { "type": "Progressive", "progressive": { "maxConcurrency": 1 } },
            }] })
        );
        let configs = addon["spec"]["supportedConfigs"].as_array().unwrap();
        assert_eq!(
            configs[0]["defaultConfig"],
            json!({ "name": "meridian-agent-abc" })
        );
        assert_eq!(
            configs[1]["defaultConfig"],
            json!({ "namespace": "ocm", "name": "agents" })
        );

        let manual = cluster_management_addon(
            "meridian-agent-abc",
            &AddonInstall {
                placements: vec![],
                rollout: Rollout::All,
                deployment_config: None,
            },
        );
        assert_eq!(
            manual["spec"]["installStrategy"],
            json!({ "type": "Manual" })
        );
        // Supported without a default, so a ManagedClusterAddOn may name its own.
        assert!(
            manual["spec"]["supportedConfigs"][1]
                .get("defaultConfig")
                .is_none()
        );
    }

    #[test]
    fn each_clusters_agent_is_its_own_user() {
        assert_eq!(
            agent_user("eu-1"),
            "system:open-cluster-management:cluster:eu-1:addon:meridian:agent:meridian-agent"
        );
        assert_ne!(agent_user("eu-1"), agent_user("eu-2"));
        assert!(!agent_user("eu-1").starts_with(ADDON_GROUP));
    }
}
