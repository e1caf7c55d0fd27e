//! The admin's provider settings, as flags of the hub and the agent: endpoints and identities
//! that no tenant's Secret may choose. A Secret naming its own endpoint sent the hub's requests
//! (signed with the tenant's keys, or worse, an identity token) wherever the tenant liked; a
//! Secret asking for workload identity made the hub act as itself in a subscription the tenant
//! named. See docs/security.md.

use std::collections::BTreeSet;

use meridian_providers::azure::CustomCloud;

use crate::zone_provider::ProviderSettings;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProviderArgs {
    /// A Route53-compatible endpoint for every Route53 zone (a private endpoint; moto on a test
    /// bed). A Secret's `AWS_ENDPOINT_URL` is refused.
    #[arg(long, env = "MERIDIAN_AWS_ENDPOINT")]
    pub aws_endpoint: Option<String>,
    /// A Cloud DNS-compatible endpoint for every Google zone. A Secret's `GOOGLE_ENDPOINT_URL`
    /// is refused.
    #[arg(long, env = "MERIDIAN_GOOGLE_ENDPOINT")]
    pub google_endpoint: Option<String>,
    /// Azure Resource Manager's endpoint for every Azure zone, for a cloud other than Azure's
    /// public one (with `--azure-authority-host`). `resourceManagerEndpoint` in a Secret's
    /// azure.json is refused.
    #[arg(
        long,
        env = "MERIDIAN_AZURE_RESOURCE_MANAGER",
        requires = "azure_authority_host"
    )]
    pub azure_resource_manager: Option<String>,
    /// Microsoft Entra's authority host for that cloud. `activeDirectoryAuthorityHost` in a
    /// Secret's azure.json is refused.
    #[arg(
        long,
        env = "MERIDIAN_AZURE_AUTHORITY_HOST",
        requires = "azure_resource_manager"
    )]
    pub azure_authority_host: Option<String>,
    /// A namespace whose zones may use this process's own identity (Azure workload identity)
    /// instead of credentials in their Secret (repeatable; comma-separated in the
    /// environment). No namespace may by default.
    #[arg(
        long = "ambient-identity-namespace",
        env = "MERIDIAN_AMBIENT_IDENTITY_NAMESPACES",
        value_delimiter = ','
    )]
    pub ambient_identity_namespaces: Vec<String>,
}

impl ProviderArgs {
    pub fn settings(&self) -> ProviderSettings {
        ProviderSettings {
            aws_endpoint: self.aws_endpoint.clone(),
            google_endpoint: self.google_endpoint.clone(),
            azure_cloud: self
                .azure_resource_manager
                .clone()
                .zip(self.azure_authority_host.clone())
                .map(|(resource_manager, authority_host)| CustomCloud {
                    resource_manager,
                    authority_host,
                }),
            ambient_identity_namespaces: self
                .ambient_identity_namespaces
                .iter()
                .map(|n| n.trim().to_string())
                .filter(|n| !n.is_empty())
                .collect::<BTreeSet<_>>(),
        }
    }
}
