//! The admin's provider settings, as flags of the hub and the agent: endpoints and identities
//! that no tenant's Secret may choose. A Secret naming its own endpoint sent the hub's requests
//! (signed with the tenant's keys, or worse, an identity token) wherever the tenant liked; a
//! Secret asking for workload identity made the hub act as itself in a subscription the tenant
//! named; a Secret naming an RFC2136 server or a webhook on loopback or link-local made the hub
//! send DNS messages or HTTP requests inside its own network. See docs/security.md.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use meridian_providers::azure::CustomCloud;

use crate::zones::zone_provider::ProviderSettings;

#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProviderArgs {
    /// A Route53-compatible endpoint for every Route53 zone (a private endpoint; moto on a test
    /// bed). A Secret's `AWS_ENDPOINT_URL` is refused.
    #[arg(long, env = "MERIDIAN_AWS_ENDPOINT")]
    pub aws_endpoint: Option<String>,
    /// An STS-compatible endpoint for the roles Route53 zones assume (a private endpoint; moto
    /// on a test bed); the region's STS by default.
    #[arg(long, env = "MERIDIAN_AWS_STS_ENDPOINT")]
    pub aws_sts_endpoint: Option<String>,
    /// A Cloud DNS-compatible endpoint for every Google zone. A Secret's `GOOGLE_ENDPOINT_URL`
    /// is refused.
    #[arg(long, env = "MERIDIAN_GOOGLE_ENDPOINT")]
    pub google_endpoint: Option<String>,
    /// The metadata server Google zones using this process's own identity take tokens from
    /// (a test bed's fake); Application Default Credentials when unset.
    #[arg(long, env = "MERIDIAN_GOOGLE_METADATA_ENDPOINT")]
    pub google_metadata_endpoint: Option<String>,
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
    /// A namespace whose zones may use this process's own identity (AWS's default credential
    /// chain: IRSA, EKS Pod Identity, the instance role; Google's Application Default
    /// Credentials: GKE Workload Identity; Azure workload identity) instead of
    /// credentials in their Secret (repeatable; comma-separated in the environment). No
    /// namespace may by default.
    #[arg(
        long = "ambient-identity-namespace",
        env = "MERIDIAN_AMBIENT_IDENTITY_NAMESPACES",
        value_delimiter = ','
    )]
    pub ambient_identity_namespaces: Vec<String>,
    /// The address ranges a `kuadrant.io/rfc2136` Secret's `server` may be in (repeatable,
    /// CIDRs or addresses; comma-separated in the environment). Without any, a server may be
    /// anywhere but loopback, link-local (the metadata services), unspecified and multicast
    /// addresses. Once any is given, only these.
    #[arg(
        long = "rfc2136-server-allow",
        env = "MERIDIAN_RFC2136_SERVER_ALLOW",
        value_delimiter = ','
    )]
    pub rfc2136_server_allow: Vec<String>,
    /// The address ranges a `kuadrant.io/webhook` Secret's `url` may reach (repeatable, CIDRs
    /// or addresses; comma-separated in the environment). Without any, a webhook may be
    /// anywhere but this host (loopback, unspecified); once any is given, only these.
    /// Link-local, metadata-service, multicast and broadcast addresses never. A webhook on this
    /// host (a sidecar of the hub, holding the admin's provider credentials) is further only
    /// for namespaces granted `--ambient-identity-namespace`.
    #[arg(
        long = "webhook-allow",
        env = "MERIDIAN_WEBHOOK_ALLOW",
        value_delimiter = ','
    )]
    pub webhook_allow: Vec<String>,
}

/// Address ranges from a flag's values (CIDRs or addresses).
fn ranges(flag: &str, values: &[String]) -> Result<Vec<IpNet>, String> {
    values
        .iter()
        .map(|value| {
            let value = value.trim();
            value
                .parse::<IpNet>()
                .or_else(|_| value.parse::<IpAddr>().map(IpNet::from))
                .map(|net| net.trunc())
                .map_err(|_| format!("--{flag}: {value:?} is not a CIDR or an address"))
        })
        .collect()
}

impl ProviderArgs {
    /// The settings these flags give; a range that does not parse is an error at start.
    pub fn settings(&self) -> Result<ProviderSettings, String> {
        Ok(ProviderSettings {
            rfc2136_servers: ranges("rfc2136-server-allow", &self.rfc2136_server_allow)?,
            webhook_addresses: ranges("webhook-allow", &self.webhook_allow)?,
            aws_endpoint: self.aws_endpoint.clone(),
            aws_sts_endpoint: self.aws_sts_endpoint.clone(),
            google_endpoint: self.google_endpoint.clone(),
            google_metadata_endpoint: self.google_metadata_endpoint.clone(),
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
        })
    }
}
