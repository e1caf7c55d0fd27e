//! `--serve-dns`: the agent answers for the hub's embedded zones too, so a zone's name servers
//! can span the hub and the spokes and survive the hub's cluster going dark. It mirrors the
//! zones from the hub's DNSRecords and ManagedZones (the only hub objects it needs to read),
//! exactly as a standby hub replica does, and writes nothing. It signs signed zones with the
//! copy of their keys the hub keeps in its own namespace.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::core::DeserializeGuard;
use kube::runtime::watcher;
use meridian_api::names::DNSSEC_KEYS_SECRET;
use meridian_controllers::decide::zone_claims::DomainGrants;
use meridian_controllers::runtime::caches::{Caches, Scope};
use meridian_controllers::zones::dnssec_keys::KeySource;
use meridian_controllers::zones::zone_mirror;
use meridian_controllers::zones::zone_provider::EmbeddedZones;
use meridian_nameserver::{GeoDb, NameServer, RateLimit, ServerConfig, ZoneNameServer};

/// How the agent serves DNS.
#[derive(Debug, Clone)]
pub struct ServeDns {
    /// UDP and TCP address to answer on.
    pub listen: SocketAddr,
    /// MaxMind-format database for GEO answers.
    pub geoip: Option<PathBuf>,
    /// Name servers of zones whose ManagedZone names none: the hub's `--ns`, so every server
    /// of a zone names the same set.
    pub name_servers: Vec<ZoneNameServer>,
    /// Response rate limiting per client prefix.
    pub rate_limit: Option<RateLimit>,
}

/// Answers DNS for the hub's embedded zones until the watches end. Signed zones are signed
/// with the keys the hub copies into its namespace (`hub_namespace`), the one Secret there the
/// agent may watch; until they arrive, a signed zone is not served.
pub async fn serve(
    hub: kube::Client,
    hub_namespace: String,
    config: ServeDns,
) -> anyhow::Result<()> {
    let geo = config.geoip.as_deref().map(GeoDb::open).transpose()?;
    let server = NameServer::start(
        config.listen,
        ServerConfig {
            geo,
            rate_limit: config.rate_limit,
            ..ServerConfig::default()
        },
    )
    .await?;
    let listen = server.local_addr();
    let embedded = Arc::new(EmbeddedZones::new(Arc::new(server), config.name_servers));
    let caches = Arc::new(Caches::new(Scope::Zones));
    let key_copy = Api::<DeserializeGuard<Secret>>::namespaced(hub.clone(), &hub_namespace);
    let only_the_copy =
        watcher::Config::default().fields(&format!("metadata.name={DNSSEC_KEYS_SECRET}"));
    tokio::select! {
        () = caches.reflect(hub) => {}
        () = caches.secrets.reflect(key_copy, only_the_copy) => {}
        () = zone_mirror::run(
            caches.clone(),
            embedded,
            KeySource::HubCopy { namespace: hub_namespace },
            // The hub's grants are the hub's: the agent follows its refusals in status.
            DomainGrants::following_the_leader(),
            move || tracing::info!(%listen, "answering DNS for the hub's embedded zones"),
            std::future::pending(),
        ) => {}
    }
    anyhow::bail!("the watches of the hub's DNSRecords, ManagedZones and key copy ended")
}
