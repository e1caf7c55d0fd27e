//! `meridian-hub uninstall`: removes what the hub spread across the fleet, for `helm
//! uninstall` (the chart runs it as a pre-delete hook) or by hand. Helm deletes only what the
//! chart rendered; the hub created more at run time: each placed cluster's agent (its
//! ManifestWork, which OCM's work agent then removes from the spoke), the agent's identity in
//! the cluster namespace on the hub, its copies of the probe headers (owned by their reader
//! Role), and the addon registration.
//!
//! The hub must not reinstall the agents while they are being removed, so the command first
//! takes the hub's Lease for itself: the leader sees another holder at its next renewal and
//! stops writing. The users' objects stay: DNSPolicies, Gateways and their ManifestWorks. A
//! Gateway still holding the finalizer earlier hubs put on it (a hub upgraded and uninstalled
//! before it led) is let go of it, or it could never be deleted.

use std::path::PathBuf;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::DynamicObject;
use kube::api::ListParams;
use kube::{Api, Client, ResourceExt};
use meridian_api::names::{
    AGENT_COPIES_READER, DNSSEC_KEYS_SECRET, HEARTBEAT_LEASE, PROBE_HEADERS_READER,
    PROBE_HEADERS_SECRET, PROBE_SEAL_SECRET,
};
use meridian_api::upstream::{ClusterManagementAddOn, Gateway, ManagedClusterAddOn, ManifestWork};

use crate::addon::{ADDON_NAME, TEMPLATE_LABEL, template_resource};
use meridian_controllers::delete_if_present;

use crate::leader::{self, Election};
use crate::placement::{
    AGENT_PROBE_READER, AGENT_REPORTER, AGENT_WORK, AGENT_ZONE_READER, LEGACY_AGENT_CLUSTER_ROLES,
    LEGACY_AGENT_ROLE, legacy_finalizer_release,
};

#[derive(Debug, clap::Args)]
pub struct UninstallArgs {
    /// Kubeconfig of the hub cluster; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Namespace of the hub's Lease.
    #[arg(long, env = "MERIDIAN_LEASE_NAMESPACE", default_value = "kube-system")]
    pub lease_namespace: String,

    /// The hub's lease duration: how long the leader may go on writing after the Lease is taken.
    #[arg(long, env = "MERIDIAN_LEASE_SECONDS", default_value_t = 15)]
    pub lease_seconds: u64,
}

pub fn run(args: UninstallArgs) -> anyhow::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(uninstall(args))
}

async fn uninstall(args: UninstallArgs) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client =
        Client::try_from(crate::run_command::client_config(args.kubeconfig.as_ref()).await?)?;
    let lease_duration = Duration::from_secs(args.lease_seconds.max(1));
    let uninstaller = Election {
        namespace: args.lease_namespace.clone(),
        identity: "meridian-uninstall".into(),
        // Longer than the uninstall: no replica may lead again meanwhile.
        lease_duration: Duration::from_secs(3600),
    };
    leader::seize(&client, &uninstaller).await?;
    tracing::info!(wait = ?lease_duration, "took the hub Lease; waiting until the leader has stopped writing");
    tokio::time::sleep(lease_duration).await;

    // Clusters with an agent the hub installed itself, or one OCM's addon manager installed.
    let by_name = |name: &str| ListParams::default().fields(&format!("metadata.name={name}"));
    let mut clusters = std::collections::BTreeSet::new();
    for work in Api::<ManifestWork>::all(client.clone())
        .list(&by_name(AGENT_WORK))
        .await?
    {
        clusters.insert(work.namespace().unwrap_or_default());
    }
    for addon in Api::<ManagedClusterAddOn>::all(client.clone())
        .list(&by_name(ADDON_NAME))
        .await?
    {
        clusters.insert(addon.namespace().unwrap_or_default());
    }
    for cluster in clusters {
        remove_agent(&client, &cluster).await?;
        println!("removed the agent of {cluster}");
    }
    for gateway in Api::<Gateway>::all(client.clone())
        .list_metadata(&ListParams::default())
        .await?
    {
        let Some(patch) = legacy_finalizer_release(gateway.finalizers()) else {
            continue;
        };
        let namespace = gateway.namespace().unwrap_or_default();
        Api::<Gateway>::namespaced(client.clone(), &namespace)
            .patch(
                &gateway.name_any(),
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Json::<()>(patch),
            )
            .await?;
        println!(
            "let go of an earlier hub's finalizer on Gateway {namespace}/{}",
            gateway.name_any()
        );
    }
    // The agents' ClusterRoles are the chart's, which Helm removes; earlier hubs wrote their
    // own under other names.
    for legacy in LEGACY_AGENT_CLUSTER_ROLES {
        delete_if_present(&Api::<ClusterRole>::all(client.clone()), legacy).await?;
    }
    delete_if_present(
        &Api::<ClusterManagementAddOn>::all(client.clone()),
        ADDON_NAME,
    )
    .await?;
    // The agent's templates: with the add-on gone, none is in use.
    let templates = Api::<DynamicObject>::all_with(client.clone(), &template_resource());
    for template in templates
        .list(&ListParams::default().labels(TEMPLATE_LABEL))
        .await?
    {
        delete_if_present(&templates, &template.name_any()).await?;
    }
    // What the hub made in its own namespace at run time: the key it sealed probes with, the
    // agents' copies and their bindings (owned by the reader Role and the zone keys' copy).
    let own = &args.lease_namespace;
    for secret in [PROBE_SEAL_SECRET, DNSSEC_KEYS_SECRET] {
        delete_if_present(&Api::<Secret>::namespaced(client.clone(), own), secret).await?;
    }
    delete_if_present(
        &Api::<Role>::namespaced(client.clone(), own),
        AGENT_COPIES_READER,
    )
    .await?;
    // The Lease stays, held by the uninstall for an hour: the replicas Helm is about to delete
    // cannot lead (and reinstall agents) meanwhile. It goes with the release's namespace.
    Ok(())
}

/// One cluster's agent: its ManifestWork (the work agent then deletes what it applied on the
/// spoke), and what the hub made for it in the cluster namespace.
async fn remove_agent(client: &Client, cluster: &str) -> anyhow::Result<()> {
    delete_if_present(
        &Api::<ManifestWork>::namespaced(client.clone(), cluster),
        AGENT_WORK,
    )
    .await?;
    delete_if_present(
        &Api::<ManagedClusterAddOn>::namespaced(client.clone(), cluster),
        ADDON_NAME,
    )
    .await?;
    for binding in [AGENT_REPORTER, LEGACY_AGENT_ROLE] {
        delete_if_present(
            &Api::<RoleBinding>::namespaced(client.clone(), cluster),
            binding,
        )
        .await?;
    }
    delete_if_present(
        &Api::<Role>::namespaced(client.clone(), cluster),
        LEGACY_AGENT_ROLE,
    )
    .await?;
    delete_if_present(
        &Api::<ServiceAccount>::namespaced(client.clone(), cluster),
        AGENT_WORK,
    )
    .await?;
    // The per-namespace header copies are owned by their reader Role: they go with it.
    delete_if_present(
        &Api::<RoleBinding>::namespaced(client.clone(), cluster),
        PROBE_HEADERS_READER,
    )
    .await?;
    delete_if_present(
        &Api::<Role>::namespaced(client.clone(), cluster),
        PROBE_HEADERS_READER,
    )
    .await?;
    for copy in [PROBE_HEADERS_SECRET, PROBE_SEAL_SECRET, DNSSEC_KEYS_SECRET] {
        delete_if_present(&Api::<Secret>::namespaced(client.clone(), cluster), copy).await?;
    }
    delete_if_present(
        &Api::<Lease>::namespaced(client.clone(), cluster),
        HEARTBEAT_LEASE,
    )
    .await?;
    let shared = [AGENT_PROBE_READER, AGENT_ZONE_READER];
    for shared in shared.into_iter().chain(LEGACY_AGENT_CLUSTER_ROLES) {
        delete_if_present(
            &Api::<ClusterRoleBinding>::all(client.clone()),
            &format!("{shared}-{cluster}"),
        )
        .await?;
    }
    Ok(())
}
