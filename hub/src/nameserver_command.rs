//! `meridian-hub nameserver`: the embedded nameserver on its own, serving the records of a
//! `meridian-hub plan -o json` file, for trying answers with dig and for benchmarks.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use meridian_dns::model::Endpoint;
use meridian_nameserver::{GeoDb, NameServer, ServerConfig, ZoneConfig, ZoneNameServer};
use serde::Deserialize;

use crate::secondaries_args::SecondariesArgs;

#[derive(Debug, clap::Args)]
pub struct NameserverArgs {
    /// Records to serve: the JSON that `meridian-hub plan -o json` prints.
    #[arg(long)]
    pub records: PathBuf,
    /// The zone's apex; records outside it are not served.
    #[arg(long)]
    pub zone: String,
    /// UDP and TCP address to answer on.
    #[arg(long, default_value = "127.0.0.1:5353")]
    pub listen: SocketAddr,
    /// MaxMind-format database (GeoIP2/GeoLite2 Country or City) for GEO answers.
    #[arg(long)]
    pub geoip: Option<PathBuf>,
    /// A name server of the zone, `NAME[=ADDRESS[,ADDRESS]]` (repeatable): the NS records, the
    /// SOA primary (the first), and for a name inside the zone its A/AAAA records, which it
    /// requires. Default: `ns1.<zone>` without an address, which cannot be delegated to.
    #[arg(long = "ns", value_name = "NAME[=ADDRESS]", value_parser = ZoneNameServer::parse)]
    pub name_servers: Vec<ZoneNameServer>,
    /// UDP responses per second to one client prefix before rate limiting (slip 2); 0 (the
    /// default here, for trying answers and benchmarks) turns it off.
    #[arg(long, default_value_t = 0)]
    pub rate_limit: u32,
    /// Transfers to secondaries and NOTIFY (none by default).
    #[command(flatten)]
    pub secondaries: SecondariesArgs,
}

#[derive(Debug, Deserialize)]
struct PlanFile {
    records: Vec<PlanFileRecord>,
}

#[derive(Debug, Deserialize)]
struct PlanFileRecord {
    endpoints: Vec<Endpoint>,
}

/// The endpoints of every record in a plan file.
pub fn read_plan_records(path: &Path) -> anyhow::Result<Vec<Endpoint>> {
    let text = std::fs::read_to_string(path)
        .map_err(|error| anyhow::anyhow!("cannot read {}: {error}", path.display()))?;
    let plan: PlanFile = serde_json::from_str(&text).map_err(|error| {
        anyhow::anyhow!(
            "{} is not `meridian-hub plan -o json` output: {error}",
            path.display()
        )
    })?;
    Ok(plan
        .records
        .into_iter()
        .flat_map(|record| record.endpoints)
        .collect())
}

pub fn run(args: NameserverArgs) -> anyhow::Result<()> {
    let endpoints = read_plan_records(&args.records)?;
    let geo = args.geoip.as_deref().map(GeoDb::open).transpose()?;
    let zone = ZoneConfig::with_name_servers(&args.zone, args.name_servers.clone());
    if !args.name_servers.is_empty() {
        // Only name servers the admin chose have to be delegatable; the placeholder is for
        // trying answers.
        zone.check_delegation()?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let config = args.secondaries.apply(ServerConfig {
            geo,
            rate_limit: meridian_nameserver::RateLimit::per_second(args.rate_limit),
            ..ServerConfig::default()
        })?;
        let server = NameServer::start(args.listen, config).await?;
        server.publish(zone.clone(), endpoints.clone());
        tracing::info!(
            listen = %server.local_addr(),
            zone = %zone.apex,
            records = endpoints.len(),
            "answering; Ctrl-C stops"
        );
        tracing::info!(
            "the parent zone delegates with:\n{}",
            zone.delegation().join("\n")
        );
        tokio::signal::ctrl_c().await?;
        server.shutdown().await;
        Ok(())
    })
}
