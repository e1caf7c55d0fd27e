//! A hub and its spokes: control planes started at once, CRDs installed everywhere, spokes
//! registered on the hub, and OCM's agents running.

use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::crds::{install_crds, load_crds};
use crate::ocm::{
    RegistrationHub, accept, issued_hub_kubeconfig, join, label_managed_cluster,
    register_managed_cluster, start_placement_controller, start_work_agent,
};
use crate::process::ManagedProcess;
use crate::{ControlPlane, Error, NodeAssets, TestBedAssets};

/// Describes a fleet to start; see [`Fleet::builder`].
#[derive(Debug, Clone)]
pub struct FleetBuilder {
    hub_name: String,
    spokes: Vec<(String, BTreeMap<String, String>)>,
    run_ocm: bool,
    /// Spokes join through OCM's registration instead of being written on the hub.
    registration: bool,
    /// With nodes: the image archives every node imports.
    node_images: Option<Vec<PathBuf>>,
}

/// A running hub and spokes. Dropping it stops the OCM agents, then the control planes.
#[derive(Debug)]
pub struct Fleet {
    // Declared first so they stop before the API servers they talk to.
    ocm_processes: Vec<ManagedProcess>,
    pub hub: ControlPlane,
    pub spokes: Vec<ControlPlane>,
    pub assets: TestBedAssets,
}

impl Fleet {
    /// A hub named `hub` with no spokes and OCM's agents enabled; add spokes to taste.
    pub fn builder() -> FleetBuilder {
        FleetBuilder {
            hub_name: "hub".to_string(),
            spokes: Vec::new(),
            run_ocm: true,
            registration: false,
            node_images: None,
        }
    }

    /// The spoke called `name`.
    pub fn spoke(&self, name: &str) -> &ControlPlane {
        self.spokes
            .iter()
            .find(|spoke| spoke.name() == name)
            .unwrap_or_else(|| panic!("no spoke named {name} in this fleet"))
    }

    /// Every control plane, hub first.
    pub fn clusters(&self) -> impl Iterator<Item = &ControlPlane> {
        std::iter::once(&self.hub).chain(&self.spokes)
    }

    /// Process IDs of everything the fleet runs.
    pub fn pids(&self) -> Vec<u32> {
        self.clusters()
            .flat_map(ControlPlane::pids)
            .chain(self.ocm_processes.iter().map(ManagedProcess::pid))
            .collect()
    }

    /// The OCM processes' log tails, for a failing test to print.
    pub fn ocm_logs(&self) -> String {
        self.ocm_processes
            .iter()
            .map(|process| format!("--- {} ---\n{}", process.name(), process.log_tail()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Fails when an OCM process has exited.
    pub fn ensure_ocm_running(&mut self) -> Result<(), Error> {
        self.ocm_processes
            .iter_mut()
            .try_for_each(ManagedProcess::ensure_running)
    }
}

impl FleetBuilder {
    pub fn hub_name(mut self, name: impl Into<String>) -> Self {
        self.hub_name = name.into();
        self
    }

    /// Adds spokes without labels.
    pub fn spokes<S: Into<String>>(mut self, names: impl IntoIterator<Item = S>) -> Self {
        self.spokes
            .extend(names.into_iter().map(|name| (name.into(), BTreeMap::new())));
        self
    }

    /// Adds a spoke whose ManagedCluster carries `labels`.
    pub fn spoke<K: Into<String>, V: Into<String>>(
        mut self,
        name: impl Into<String>,
        labels: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        let labels = labels
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        self.spokes.push((name.into(), labels));
        self
    }

    /// Spokes join as `clusteradm join` and `clusteradm accept` do (see [`crate::ocm`]): OCM's
    /// registration controller and a CSR signer on the hub, its registration agent on each
    /// spoke, and work agents reading the hub with the credentials registration issued. The
    /// spokes' labels are put on their ManagedClusters once accepted.
    pub fn with_registration(mut self) -> Self {
        self.registration = true;
        self
    }

    /// Leaves OCM's work agents and placement controller out (plain control planes only).
    pub fn without_ocm(mut self) -> Self {
        self.run_ocm = false;
        self
    }

    /// Gives every control plane a node that runs pods, with `images` (OCI archives)
    /// imported into it.
    pub fn with_nodes(mut self, images: impl IntoIterator<Item = PathBuf>) -> Self {
        self.node_images = Some(images.into_iter().collect());
        self
    }

    pub async fn start(self) -> Result<Fleet, Error> {
        let assets = TestBedAssets::locate()?;
        let names: Vec<&str> = std::iter::once(self.hub_name.as_str())
            .chain(self.spokes.iter().map(|(name, _)| name.as_str()))
            .collect();
        let mut clusters = match &self.node_images {
            None => ControlPlane::start_many(&names, &assets).await?,
            Some(images) => {
                let node_assets = NodeAssets::locate()?;
                let starts = names
                    .iter()
                    .map(|name| ControlPlane::start_with_node(name, &assets, &node_assets, images));
                futures::future::try_join_all(starts).await?
            }
        };
        let spokes = clusters.split_off(1);
        let hub = clusters.pop().expect("the hub was started first");

        let mut crds = load_crds(&assets.upstream_crds)?;
        crds.extend(load_crds(&assets.meridian_crds)?);
        let installs = std::iter::once(&hub)
            .chain(&spokes)
            .map(|cluster| async { install_crds(&cluster.client(), &crds).await });
        futures::future::try_join_all(installs).await?;

        // The agents' ClusterRoles, as the chart installs them: a hub run in-process binds them
        // and writes none (a chart installed on this fleet takes them over).
        for role in meridian_hub::placement::agent_cluster_roles() {
            let role: ClusterRole = serde_json::from_value(role).expect("a ClusterRole");
            Api::<ClusterRole>::all(hub.client())
                .patch(
                    &role.name_any(),
                    &PatchParams::apply("meridian-testbed").force(),
                    &Patch::Apply(&role),
                )
                .await?;
        }
        let mut ocm_processes = Vec::new();
        if self.registration {
            let registration = RegistrationHub::start(&assets, &hub).await?;
            ocm_processes.extend(registration.processes);
            let joins = spokes
                .iter()
                .map(|spoke| join(&assets, spoke, &registration.bootstrap_kubeconfig));
            ocm_processes.extend(futures::future::try_join_all(joins).await?);
            for (name, labels) in &self.spokes {
                accept(&hub.client(), name).await?;
                label_managed_cluster(&hub.client(), name, labels).await?;
            }
        } else {
            for (name, labels) in &self.spokes {
                register_managed_cluster(&hub.client(), name, labels).await?;
            }
        }

        if self.run_ocm || self.registration {
            // Each started and serving, side by side.
            let work_agents = spokes.iter().map(|spoke| async {
                let hub_kubeconfig = if self.registration {
                    issued_hub_kubeconfig(spoke).await?
                } else {
                    hub.kubeconfig_path().to_path_buf()
                };
                start_work_agent(&assets, &hub_kubeconfig, spoke).await
            });
            let (placement, work_agents) = futures::try_join!(
                start_placement_controller(&assets, &hub),
                futures::future::try_join_all(work_agents),
            )?;
            ocm_processes.push(placement);
            ocm_processes.extend(work_agents);
        }
        Ok(Fleet {
            ocm_processes,
            hub,
            spokes,
            assets,
        })
    }
}
