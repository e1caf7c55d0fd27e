//! Meridian's test bed: real Kubernetes control planes (etcd + kube-apiserver built from their Go
//! modules), the upstream and Meridian CRDs, and OCM's own work agent and placement controller.
//!
//! ```no_run
//! # async fn demo() -> Result<(), meridian_e2e::Error> {
//! let fleet = meridian_e2e::Fleet::builder().spokes(["spoke-1", "spoke-2"]).start().await?;
//! let hub_client = fleet.hub.client();
//! # Ok(()) }
//! ```
//!
//! Everything a test starts is owned by a value that kills it on drop, also while a test panics.
//! Every child process is started through `setpriv --pdeathsig KILL`, so the kernel kills it
//! when the thread that started it ends, even if the test process itself is killed and no
//! destructor runs.

mod assets;
pub mod cli;
mod control_plane;
mod crds;
mod error;
pub mod example;
pub mod external_dns;
mod fleet;
mod images;
pub mod node;
pub mod observe;
mod ocm;
mod pki;
pub mod plain_zone;
mod ports;
mod process;
pub mod registry;
pub mod release;
pub mod route53;
pub mod synthetic;
pub mod traffic;
mod wait;

pub use assets::{TestBedAssets, helm, helm_command, pinned_kubernetes_version, repository_root};
pub use control_plane::{ControlPlane, client_from_kubeconfig};
pub use crds::{install_crds, load_crds};
pub use error::Error;
pub use fleet::{Fleet, FleetBuilder};
pub use images::{BuiltImage, built_images, hub_and_agent, image_named};
pub use node::{Node, NodeAssets, NodeFootprint};
pub use ocm::{
    AGENT_NAMESPACE, HUB_NAMESPACE, OcmDynamicApis, ensure_namespace, hub_kubeconfig_dir,
    managed_cluster_condition, placement_controller_args, register_managed_cluster, spawn_serving,
};
pub use ports::free_loopback_port;
pub use process::{ManagedProcess, is_alive};
pub use wait::{
    DEFAULT_PATIENCE, Passes, WithConditions, condition_becomes, counter_grows, eventually,
    hub_counter, record_ready_with,
};

/// Sends a test's logs, filtered by `filter` (`RUST_LOG` syntax), to the test's own output, so
/// they show with the test that failed. The first test in a binary to ask sets the filter.
///
/// The kube client's own failure logs are left out unless `filter` names the client: a control
/// plane's start asks `/readyz` until it answers 200, and each early 500 would print the whole
/// health report, pages that bury the failure a reader looks for (errors still reach the test
/// as values).
pub fn test_logs(filter: &str) {
    let filter = if filter.contains("kube_client") {
        filter.to_string()
    } else {
        format!("{filter},kube_client=off")
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_test_writer()
        .try_init();
}

/// Writes `through_status` to `name`'s status subresource, then `through_main` to the object
/// itself, both as merge patches; returns the object after each. What a test of the status
/// subresource checks: that neither write reaches what the other owns.
pub async fn patch_status_then_main<K>(
    api: &kube::Api<K>,
    name: &str,
    through_status: serde_json::Value,
    through_main: serde_json::Value,
) -> Result<(K, K), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    use kube::api::{Patch, PatchParams};
    let params = PatchParams::default();
    let after_status = api
        .patch_status(name, &params, &Patch::Merge(&through_status))
        .await?;
    let after_main = api
        .patch(name, &params, &Patch::Merge(&through_main))
        .await?;
    Ok((after_status, after_main))
}

/// The field manager the test bed uses for its own server-side applies.
pub const FIELD_MANAGER: &str = "meridian-testbed";

/// Whether an Event with `reason` was recorded in `namespace` (what a controller says about the
/// objects there).
pub async fn has_event(
    client: &kube::Client,
    namespace: &str,
    reason: &str,
) -> Result<bool, Error> {
    let events =
        kube::Api::<k8s_openapi::api::events::v1::Event>::namespaced(client.clone(), namespace)
            .list(&Default::default())
            .await?;
    Ok(events
        .items
        .iter()
        .any(|event| event.reason.as_deref() == Some(reason)))
}

/// The owner ID a hub whose namespace is `hub_namespace` publishes under, as it keeps it in
/// that namespace (written at its start; waited for).
pub async fn hub_owner_id(client: &kube::Client, hub_namespace: &str) -> Result<String, Error> {
    let configmaps = kube::Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(
        client.clone(),
        hub_namespace,
    );
    eventually("the hub keeps its owner ID", DEFAULT_PATIENCE, || async {
        Ok(configmaps
            .get_opt(meridian_hub::owner_id::CONFIGMAP)
            .await?
            .and_then(|c| c.data?.remove(meridian_hub::owner_id::KEY)))
    })
    .await
}
