//! The provider behind a ManagedZone: the embedded nameserver when the zone names no secret,
//! otherwise Route53, Google Cloud DNS, Azure DNS, RFC2136 or an external-dns webhook from the
//! Secret's type. Providers are kept
//! per Secret (and its resourceVersion), so one account shares one request budget and one zone
//! cache across every record that publishes through it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Secret;
use meridian_api::kuadrant::ManagedZone;
use meridian_dns::changes::{Changes, ZoneRecords, apply_strictly};
use meridian_dns::fidelity::{self, Fidelity, Gap};
use meridian_dns::model::{Endpoint, RecordKey};
use meridian_nameserver::dnssec::ZoneKeys;
use meridian_nameserver::{NameServer, ZoneConfig, ZoneNameServer};
use meridian_providers::azure::{
    AZURE_REQUESTS_PER_SECOND, AzureAuth, AzureCredentials, AzureProvider,
};
use meridian_providers::budget::{ROUTE53_REQUESTS_PER_SECOND, RequestBudget};
use meridian_providers::google::{
    CLOUD_DNS_REQUESTS_PER_SECOND, GeoRegions, GoogleAuth, GoogleCredentials, GoogleProvider,
};
use meridian_providers::rfc2136::{Rfc2136Config, Rfc2136Provider, plain_dns_records};
use meridian_providers::route53::Route53Provider;
use meridian_providers::webhook::{WebhookConfig, WebhookProvider};
use meridian_providers::{Provider, ProviderError, ZoneInfo};

use crate::decide::zone_serial::{Numbering, SerialStamp, choose_serial, content_digest};

pub const AWS_SECRET_TYPE: &str = "kuadrant.io/aws";
pub const GCP_SECRET_TYPE: &str = "kuadrant.io/gcp";
pub const AZURE_SECRET_TYPE: &str = "kuadrant.io/azure";
pub const RFC2136_SECRET_TYPE: &str = "kuadrant.io/rfc2136";
pub const WEBHOOK_SECRET_TYPE: &str = "kuadrant.io/webhook";

/// Zones served by the hub's own nameserver. Each zone's records live here (the source of
/// truth while the hub runs; rebuilt from DNSRecords after a restart) and are republished to
/// the nameserver after every change, with the zone's name servers from its ManagedZone.
///
/// Republishing builds the whole zone, so concurrent changes share one build: a change waits
/// for the build running, and the first change to go next builds for every change made
/// meanwhile (the others find theirs served). One build per change made 6,000 records cost
/// 6,000 builds of a zone of 6,000 hosts, which held the hub's start-up at 3,000 clusters.
#[derive(Debug)]
pub struct EmbeddedZones {
    server: Arc<NameServer>,
    /// Name servers of every zone whose ManagedZone names none (`meridian-hub run --ns`).
    default_name_servers: Vec<ZoneNameServer>,
    zones: Mutex<BTreeMap<String, ServedZone>>,
    /// Per zone, the version the nameserver serves; held while a build runs.
    served_versions: tokio::sync::Mutex<BTreeMap<String, u64>>,
    /// On a server that mirrors the zones (a standby replica, an agent): the DNSRecords whose
    /// published endpoints it does not serve yet, and since when (see [`Self::mirror_behind`];
    /// a replica reports them on `/metrics`).
    mirror_behind: Mutex<BTreeMap<String, std::time::Instant>>,
}

#[derive(Debug)]
struct ServedZone {
    config: ZoneConfig,
    records: ZoneRecords,
    /// Counts the changes to `records`.
    version: u64,
    /// Its ManagedZone has been looked at ([`EmbeddedZones::ensure_served`]): until then its
    /// records are kept, not published, so a zone to be signed is never served unsigned, nor
    /// any zone with default name servers, for a moment at a start.
    configured: bool,
    /// Not served: the zone is to be signed and its keys cannot be had here (see
    /// [`EmbeddedZones::withhold`]). Its records are kept, not published.
    withheld: bool,
    /// Whether this server numbers the zone's changes or takes the leader's serials, and the
    /// leader's word from status (see [`crate::decide::zone_serial`]).
    numbering: Numbering,
    stamp: Option<SerialStamp>,
    /// The serial served and the digest of its content, once built.
    served: Option<SerialStamp>,
    /// The version of `records` the nameserver serves.
    built: u64,
}

impl ServedZone {
    /// A zone whose records arrive before anything else is known of it.
    fn unconfigured(apex: &str) -> Self {
        ServedZone {
            config: ZoneConfig::new(apex),
            records: ZoneRecords::default(),
            version: 1,
            configured: false,
            withheld: false,
            numbering: Numbering::Leads,
            stamp: None,
            served: None,
            built: 0,
        }
    }

    /// Whether the leader's word would change the serial served: a follower serving the
    /// content the leader stamped, under an older serial.
    fn adopts(&self, stamp: Option<&SerialStamp>) -> bool {
        let (Some(stamp), Some(served)) = (stamp, &self.served) else {
            return false;
        };
        self.numbering == Numbering::Follows
            && stamp.digest == served.digest
            && meridian_nameserver::serial_newer(stamp.serial, served.serial)
    }
}

/// The name servers of an embedded zone: the ManagedZone's own, else the hub's defaults, else
/// the placeholder `ns1.<zone>` (see [`ZoneConfig::new`]). Addresses the schema let through
/// but that do not parse are left out (the zone's status then says the delegation is lame).
pub fn embedded_zone_config(
    zone: &ManagedZone,
    defaults: &[ZoneNameServer],
    keys: Option<Arc<ZoneKeys>>,
) -> ZoneConfig {
    let own: Vec<ZoneNameServer> = zone
        .spec
        .name_servers
        .iter()
        .map(|ns| ZoneNameServer {
            name: ns.name.clone(),
            addresses: ns.addresses.iter().filter_map(|a| a.parse().ok()).collect(),
        })
        .collect();
    let chosen = if own.is_empty() {
        defaults.to_vec()
    } else {
        own
    };
    let config = ZoneConfig::with_name_servers(&zone.spec.domain_name, chosen).signed_with(keys);
    match zone
        .spec
        .soa_expire
        .as_deref()
        .and_then(meridian_api::duration::parse_duration)
    {
        Some(expire) => config.with_soa_expire(u32::try_from(expire.as_secs()).unwrap_or(u32::MAX)),
        None => config,
    }
}

impl EmbeddedZones {
    pub fn new(server: Arc<NameServer>, default_name_servers: Vec<ZoneNameServer>) -> Self {
        EmbeddedZones {
            server,
            default_name_servers,
            zones: Mutex::new(BTreeMap::new()),
            served_versions: tokio::sync::Mutex::new(BTreeMap::new()),
            mirror_behind: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn server(&self) -> &NameServer {
        &self.server
    }

    /// The zone at `apex`, as a provider (its zone ID is the apex).
    pub fn zone(zones: &Arc<EmbeddedZones>, apex: &str) -> ZoneProvider {
        ZoneProvider::Embedded(EmbeddedZone {
            zones: zones.clone(),
            apex: apex.trim_end_matches('.').to_ascii_lowercase(),
        })
    }

    /// Records in the zone at `apex`.
    pub fn record_count(&self, apex: &str) -> usize {
        self.zones
            .lock()
            .expect("zones lock")
            .get(apex)
            .map_or(0, |zone| zone.records.len())
    }

    /// Serves `zone` (empty until records arrive), so the nameserver answers for it with
    /// NXDOMAIN or NODATA instead of refusing, under the name servers it names and signed with
    /// `keys` if any; republishes it when they changed, or when it takes the leader's serial
    /// from the zone's status (`numbering`, see [`crate::decide::zone_serial`]). Returns the zone's
    /// configuration.
    pub async fn ensure_served(
        &self,
        zone: &ManagedZone,
        keys: Option<Arc<ZoneKeys>>,
        numbering: Numbering,
    ) -> ZoneConfig {
        let config = embedded_zone_config(zone, &self.default_name_servers, keys);
        let stamp = SerialStamp::of(zone);
        let version = {
            let mut zones = self.zones.lock().expect("zones lock");
            let served = zones
                .entry(config.apex.clone())
                .or_insert_with(|| ServedZone::unconfigured(&config.apex));
            served.numbering = numbering;
            if served.config != config
                || !served.configured
                || served.withheld
                || served.adopts(stamp.as_ref())
            {
                served.config = config.clone();
                served.configured = true;
                served.withheld = false;
                served.version += 1;
            }
            served.stamp = stamp;
            served.version
        };
        self.serve_at_least(&config.apex, version).await;
        config
    }

    /// Stops serving the zone at `apex` and forgets its records: its ManagedZone lost its claim
    /// and no other zone holds the name, so nothing of it may be answered, nor show under a
    /// zone that claims the name later. Returns whether it was here.
    pub async fn forget(&self, apex: &str) -> bool {
        // Held across the removal, so no build running meanwhile serves it again.
        let mut served_versions = self.served_versions.lock().await;
        served_versions.remove(apex);
        let was_here = self
            .zones
            .lock()
            .expect("zones lock")
            .remove(apex)
            .is_some();
        self.server.withdraw(apex);
        was_here
    }

    /// The serial the zone at `apex` is served under here, and the digest of its content: what
    /// the leader writes to the zone's status.
    pub fn served_stamp(&self, apex: &str) -> Option<SerialStamp> {
        let zones = self.zones.lock().expect("zones lock");
        zones.get(apex)?.served.clone()
    }

    /// Whether the zone at `apex` is served signed here.
    pub fn signs(&self, apex: &str) -> bool {
        let zones = self.zones.lock().expect("zones lock");
        zones
            .get(apex)
            .is_some_and(|zone| zone.configured && !zone.withheld && zone.config.dnssec.is_some())
    }

    /// Stops serving the zone at `apex`, keeping its records, until [`Self::ensure_served`]:
    /// for a zone to be signed whose keys cannot be had here. Serving it unsigned would give
    /// validators answers they reject once the parent has the DS; refused, they ask the zone's
    /// other name servers.
    /// Returns whether it was served until now.
    pub fn withhold(&self, apex: &str) -> bool {
        let mut zones = self.zones.lock().expect("zones lock");
        let zone = zones
            .entry(apex.to_string())
            .or_insert_with(|| ServedZone::unconfigured(apex));
        let was_served = !std::mem::replace(&mut zone.withheld, true);
        zone.served = None;
        self.server.withdraw(apex);
        was_served
    }

    /// Applies `changes` to the records of the zone at `apex` without serving them yet (see
    /// [`Self::serve_staged`]); returns the zone's version with them. A zone is served before
    /// its records arrive; should one not be yet, its records wait for its ManagedZone
    /// ([`Self::ensure_served`]) to be served.
    pub fn stage(&self, apex: &str, changes: &Changes) -> Result<u64, ProviderError> {
        let mut zones = self.zones.lock().expect("zones lock");
        let zone = zones
            .entry(apex.to_string())
            .or_insert_with(|| ServedZone::unconfigured(apex));
        apply_strictly(&mut zone.records, changes)?;
        zone.version += 1;
        Ok(zone.version)
    }

    /// Serves every change staged in the zone at `apex`. A server mirroring many records at
    /// once (a standby's or an agent's first pass) stages them all and builds the zone once:
    /// one build per record made a standby's start quadratic (273 s to serve a signed zone of
    /// 2,000 hosts, `make bench-hub-scale`).
    pub async fn serve_staged(&self, apex: &str) {
        let version = {
            let zones = self.zones.lock().expect("zones lock");
            zones.get(apex).map(|zone| zone.version)
        };
        if let Some(version) = version {
            self.serve_at_least(apex, version).await;
        }
    }

    /// Says whether this server serves what the DNSRecord `record` (a key) says is published:
    /// `false` from the first pass that could not serve it until one could. The leader serves
    /// a record's endpoints before its status says so; a server mirroring the zones follows
    /// the status, and this is what it has not caught up with.
    pub fn mirror_behind(&self, record: &str, behind: bool) {
        let mut records = self.mirror_behind.lock().expect("mirror lock");
        if behind {
            records
                .entry(record.to_string())
                .or_insert_with(std::time::Instant::now);
        } else {
            records.remove(record);
        }
    }

    /// Whether the zone at `apex` is served here (looked at, and not withheld for its keys).
    pub fn serves(&self, apex: &str) -> bool {
        let zones = self.zones.lock().expect("zones lock");
        zones
            .get(apex)
            .is_some_and(|zone| zone.configured && !zone.withheld)
    }

    /// Forgets the records behind that are no longer mirrored (deleted, or their zone gone or
    /// moved to a provider).
    pub fn mirror_retain(&self, mirrored: &std::collections::BTreeSet<String>) {
        let mut records = self.mirror_behind.lock().expect("mirror lock");
        records.retain(|record, _| mirrored.contains(record));
    }

    /// After the mirror stopped (the replica leads now): serves whatever it had staged and not
    /// built yet (it may have been stopped between the two), and forgets what it was behind,
    /// since the DNSRecord controller publishes from here on.
    pub async fn mirror_stopped(&self) {
        self.mirror_behind.lock().expect("mirror lock").clear();
        let apexes: Vec<String> = self
            .zones
            .lock()
            .expect("zones lock")
            .keys()
            .cloned()
            .collect();
        for apex in apexes {
            self.serve_staged(&apex).await;
        }
    }

    /// What this server serves, as Prometheus gauges: per embedded zone the serial served, the
    /// serial the leading replica says it serves (the zone's status, as last read here) and
    /// whether the content is the same, and changes made to the zone not served yet; on a
    /// standby replica, the DNSRecords whose published endpoints it does not serve yet (their
    /// zone withheld included) and how long the oldest has waited.
    pub fn render_metrics(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let zones = self.zones.lock().expect("zones lock");
        let served: Vec<(&String, &ServedZone)> = zones
            .iter()
            .filter(|(_, zone)| zone.configured && !zone.withheld)
            .collect();
        let gauge = |out: &mut String, name: &str, help: &str| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
        };
        gauge(
            &mut out,
            "meridian_zone_served_serial",
            "The SOA serial this server answers with, per embedded zone.",
        );
        for (apex, zone) in &served {
            if let Some(stamp) = &zone.served {
                let _ = writeln!(
                    out,
                    "meridian_zone_served_serial{{zone=\"{apex}\"}} {}",
                    stamp.serial
                );
            }
        }
        gauge(
            &mut out,
            "meridian_zone_leader_serial",
            "The serial the leading hub replica says it serves (the ManagedZone's status.serial), as this server last read it.",
        );
        for (apex, zone) in &served {
            if let Some(stamp) = &zone.stamp {
                let _ = writeln!(
                    out,
                    "meridian_zone_leader_serial{{zone=\"{apex}\"}} {}",
                    stamp.serial
                );
            }
        }
        gauge(
            &mut out,
            "meridian_zone_serves_leader_content",
            "1 when this server serves the content the leading replica's status names (the same digest), else 0: behind it, or ahead of a status not yet written.",
        );
        for (apex, zone) in &served {
            if let Some(stamp) = &zone.stamp {
                let same = zone
                    .served
                    .as_ref()
                    .is_some_and(|served| served.digest == stamp.digest);
                let _ = writeln!(
                    out,
                    "meridian_zone_serves_leader_content{{zone=\"{apex}\"}} {}",
                    u8::from(same)
                );
            }
        }
        gauge(
            &mut out,
            "meridian_zone_unserved_changes",
            "Changes made to an embedded zone's records here that the nameserver does not serve yet (a build is due or running).",
        );
        for (apex, zone) in &served {
            let _ = writeln!(
                out,
                "meridian_zone_unserved_changes{{zone=\"{apex}\"}} {}",
                zone.version.saturating_sub(zone.built)
            );
        }
        drop(zones);
        let behind = self.mirror_behind.lock().expect("mirror lock");
        gauge(
            &mut out,
            "meridian_mirror_records_behind",
            "DNSRecords whose published endpoints (status) this server does not serve yet; a standby replica or an agent retries them every pass.",
        );
        let _ = writeln!(out, "meridian_mirror_records_behind {}", behind.len());
        gauge(
            &mut out,
            "meridian_mirror_behind_seconds",
            "How long the oldest DNSRecord this server does not serve yet has waited (0 when none).",
        );
        let oldest = behind
            .values()
            .map(|since| since.elapsed().as_secs_f64())
            .fold(0.0, f64::max);
        let _ = writeln!(out, "meridian_mirror_behind_seconds {oldest:.3}");
        out
    }

    /// Returns once the nameserver serves version `version` of the zone at `apex` or a later
    /// one, building it unless a build since has.
    async fn serve_at_least(&self, apex: &str, version: u64) {
        let mut served_versions = self.served_versions.lock().await;
        if served_versions
            .get(apex)
            .is_some_and(|served| *served >= version)
        {
            return;
        }
        let (config, records, latest, digest, numbering, stamp, served) = {
            let zones = self.zones.lock().expect("zones lock");
            let Some(zone) = zones
                .get(apex)
                .filter(|zone| zone.configured && !zone.withheld)
            else {
                return;
            };
            let records: Vec<Endpoint> = zone.records.values().cloned().collect();
            let digest = content_digest(&zone.config, &zone.records);
            (
                zone.config.clone(),
                records,
                zone.version,
                digest,
                zone.numbering,
                zone.stamp.clone(),
                zone.served.clone(),
            )
        };
        let now = u32::try_from(crate::now().0.as_second()).unwrap_or(u32::MAX);
        // Built outside the zones lock, so changes go on meanwhile (the next build has them).
        let serial = self.server.publish_numbered(config, records, |previous| {
            let previous = previous.zip(served.as_ref().map(|s| s.digest.as_str()));
            choose_serial(previous, &digest, stamp.as_ref(), numbering, now)
        });
        let withheld_meanwhile = {
            let mut zones = self.zones.lock().expect("zones lock");
            match zones.get_mut(apex) {
                Some(zone) if zone.withheld => true,
                Some(zone) => {
                    zone.served = Some(SerialStamp { serial, digest });
                    zone.built = zone.built.max(latest);
                    false
                }
                None => false,
            }
        };
        if withheld_meanwhile {
            // `withhold` ran while this build did: what it stopped serving stays stopped, not
            // put back by a build of the records as they were.
            self.server.withdraw(apex);
        }
        served_versions.insert(apex.to_string(), latest);
    }
}

/// One embedded zone, as a [`Provider`].
#[derive(Debug, Clone)]
pub struct EmbeddedZone {
    zones: Arc<EmbeddedZones>,
    apex: String,
}

impl Provider for EmbeddedZone {
    async fn list_zones(&self) -> Result<Vec<ZoneInfo>, ProviderError> {
        Ok(vec![ZoneInfo {
            id: self.apex.clone(),
            domain: self.apex.clone(),
        }])
    }

    async fn records(&self, _zone_id: &str) -> Result<Vec<Endpoint>, ProviderError> {
        let zones = self.zones.zones.lock().expect("zones lock");
        Ok(zones
            .get(&self.apex)
            .map(|zone| zone.records.values().cloned().collect())
            .unwrap_or_default())
    }

    async fn apply(&self, _zone_id: &str, changes: &Changes) -> Result<(), ProviderError> {
        let version = self.zones.stage(&self.apex, changes)?;
        self.zones.serve_at_least(&self.apex, version).await;
        Ok(())
    }
}

/// The provider kind (as [`ZoneProvider::kind`] names it) a ManagedZone's Secret of type
/// `secret_type` gives, or `None` for a type no provider takes. What the Secret says is known
/// from the cache at once, before the zone is first reconciled.
pub fn kind_of_secret_type(secret_type: &str) -> Option<&'static str> {
    match secret_type {
        AWS_SECRET_TYPE => Some("route53"),
        GCP_SECRET_TYPE => Some("google"),
        AZURE_SECRET_TYPE => Some("azure"),
        RFC2136_SECRET_TYPE => Some("rfc2136"),
        WEBHOOK_SECRET_TYPE => Some("webhook"),
        _ => None,
    }
}

/// A ManagedZone's provider.
#[derive(Debug, Clone)]
pub enum ZoneProvider {
    Embedded(EmbeddedZone),
    Route53(Arc<Route53Provider>),
    Google(Arc<GoogleProvider>),
    Azure(Arc<AzureProvider>),
    Rfc2136(Arc<Rfc2136Provider>),
    Webhook(Arc<WebhookProvider>),
}

impl ZoneProvider {
    pub fn kind(&self) -> &'static str {
        match self {
            ZoneProvider::Embedded(_) => "embedded",
            ZoneProvider::Route53(_) => "route53",
            ZoneProvider::Google(_) => "google",
            ZoneProvider::Azure(_) => "azure",
            ZoneProvider::Rfc2136(_) => "rfc2136",
            ZoneProvider::Webhook(_) => "webhook",
        }
    }

    /// What this provider can hold ([`meridian_dns::fidelity`]).
    pub fn fidelity(&self) -> Fidelity {
        // Every kind has a table (tested); a new one without is taken as plain records.
        fidelity::of_provider(self.kind()).unwrap_or(fidelity::PLAIN)
    }

    /// The records this provider can hold for a record tree at `host`, and notes for status
    /// about what had to change on the way; or, when the tree asks what the provider cannot
    /// hold, what that is (nothing is then published).
    ///
    /// Weights are left to the provider here: a record's weights include a drain's steps,
    /// which the policy was accepted with (it is assessed without them), so a provider of
    /// plain records publishes every address weighing more than 0, and a weight outside a
    /// provider's range is refused by the provider for that name only.
    pub fn publishable(
        &self,
        host: &str,
        endpoints: &[Endpoint],
    ) -> Result<(Vec<Endpoint>, Vec<String>), Vec<String>> {
        let missing: Vec<String> = fidelity::assess(&self.fidelity(), endpoints)
            .into_iter()
            .filter(|f| f.missing && !matches!(f.gap, Gap::Weights | Gap::WeightRange))
            .map(|f| f.message)
            .collect();
        if !missing.is_empty() {
            return Err(missing);
        }
        Ok(match self {
            ZoneProvider::Rfc2136(_) | ZoneProvider::Webhook(_) => {
                plain_dns_records(host, endpoints)
            }
            ZoneProvider::Google(google) => (endpoints.to_vec(), google.status_notes(endpoints)),
            ZoneProvider::Azure(azure) => (endpoints.to_vec(), azure.status_notes(endpoints)),
            ZoneProvider::Embedded(_) | ZoneProvider::Route53(_) => {
                (endpoints.to_vec(), Vec::new())
            }
        })
    }

    /// `records` (a tree at `host`, as [`Self::publishable`] made it) as the provider stores
    /// them, so the plan compares like with like: a webhook's `adjustendpoints` answer, within
    /// `host` (a record it moved elsewhere is left out, and said in the notes). Other providers
    /// store what they are given.
    pub async fn adjusted(
        &self,
        host: &str,
        records: Vec<Endpoint>,
    ) -> Result<(Vec<Endpoint>, Vec<String>), ProviderError> {
        let ZoneProvider::Webhook(webhook) = self else {
            return Ok((records, Vec::new()));
        };
        let base = host.strip_prefix("*.").unwrap_or(host);
        let (kept, moved): (Vec<Endpoint>, Vec<Endpoint>) = webhook
            .adjust(&records)
            .await?
            .into_iter()
            .partition(|r| meridian_dns::model::is_at_or_below(&r.dns_name, base));
        // Bounded: the names are the webhook's to choose.
        let mut notes = match moved.len() {
            0 => Vec::new(),
            n => vec![format!(
                "{host}: the webhook adjusted {n} record(s) to names outside the host; they are left out"
            )],
        };
        notes.extend(raised_ttls(&records, &kept));
        Ok((kept, notes))
    }

    /// The provider's ID of the zone for `domain`: the ManagedZone's `spec.id` when set,
    /// otherwise found by domain in the (cached) zone list.
    pub async fn zone_id(&self, domain: &str, id: Option<&str>) -> Result<String, ProviderError> {
        if let Some(id) = id {
            return Ok(id.to_string());
        }
        let zones = self.list_zones().await?;
        zones
            .into_iter()
            .find(|zone| {
                zone.domain
                    .eq_ignore_ascii_case(domain.trim_end_matches('.'))
            })
            .map(|zone| zone.id)
            .ok_or_else(|| ProviderError::ZoneNotFound(domain.to_string()))
    }
}

/// What a webhook's provider did to the TTLs it was asked for (a provider's floor, such as
/// Cloudflare's 60 s): one note naming the lowest asked and the TTL it holds instead, so that
/// the answers' TTL in status is not a surprise. Empty when every TTL was kept.
fn raised_ttls(asked: &[Endpoint], adjusted: &[Endpoint]) -> Vec<String> {
    let asked_ttl: BTreeMap<RecordKey, u32> =
        asked.iter().map(|r| (r.key(), r.record_ttl)).collect();
    let raised: Vec<(&str, u32, u32)> = adjusted
        .iter()
        .filter_map(|r| {
            let before = *asked_ttl.get(&r.key())?;
            (before > 0 && r.record_ttl > before).then_some((
                r.dns_name.as_str(),
                before,
                r.record_ttl,
            ))
        })
        .collect();
    let Some((name, before, after)) = raised.iter().min_by_key(|(_, before, _)| *before) else {
        return Vec::new();
    };
    vec![format!(
        "the webhook's provider holds {} record(s) with a longer TTL than asked (e.g. {name}: {before} s asked, {after} s held): a TTL floor; answers and failover are that much slower to change",
        raised.len()
    )]
}

impl ZoneProvider {
    /// The zone's records a plan for `root_host` that began at `since` reads
    /// (`meridian_dns::plan::host_records`): an embedded zone copies only those out of memory;
    /// a provider's zone is listed whole, at Route53 once for every plan of this process that
    /// began before the listing started (`meridian_providers::listing`: the calls are the
    /// account's budget, shared by every cluster in hub-less mode).
    pub async fn host_records(
        &self,
        zone_id: &str,
        root_host: &str,
        since: std::time::Instant,
    ) -> Result<Vec<Endpoint>, ProviderError> {
        match self {
            ZoneProvider::Embedded(embedded) => {
                let zones = embedded.zones.zones.lock().expect("zones lock");
                Ok(zones.get(&embedded.apex).map_or_else(Vec::new, |zone| {
                    meridian_dns::plan::host_records(zone.records.values(), root_host)
                }))
            }
            ZoneProvider::Route53(p) => p.host_records_since(zone_id, root_host, since).await,
            _ => Ok(meridian_dns::plan::host_records(
                &self.records(zone_id).await?,
                root_host,
            )),
        }
    }

    /// The records at and below `host`, where the provider reads them without listing the
    /// whole zone (Route53: from the host's name onward, one call for up to 300 record sets),
    /// and whether that took one call.
    /// `None` elsewhere: RFC2136 has no such read (a zone transfer is the whole zone), and the
    /// other providers list the whole zone anyway.
    pub async fn read_host(
        &self,
        zone_id: &str,
        host: &str,
    ) -> Option<Result<HostRead, ProviderError>> {
        match self {
            ZoneProvider::Route53(p) => Some(p.host_records_paged(zone_id, host).await.map(
                |(records, calls)| HostRead {
                    records,
                    one_call: calls <= 1,
                },
            )),
            _ => None,
        }
    }

    /// One record set by name and type: a single small read where the provider has one
    /// (Route53, RFC2136), else read from the whole zone.
    pub async fn read_record(
        &self,
        zone_id: &str,
        name: &str,
        record_type: meridian_dns::model::RecordType,
    ) -> Result<Option<Endpoint>, ProviderError> {
        match self {
            ZoneProvider::Route53(p) => p.read_record(zone_id, name, record_type).await,
            ZoneProvider::Rfc2136(p) => p.read_record(name, record_type).await,
            ZoneProvider::Embedded(_)
            | ZoneProvider::Google(_)
            | ZoneProvider::Azure(_)
            | ZoneProvider::Webhook(_) => Ok(self
                .records(zone_id)
                .await?
                .into_iter()
                .find(|e| e.dns_name == name && e.record_type == record_type)),
        }
    }
}

impl Provider for ZoneProvider {
    async fn list_zones(&self) -> Result<Vec<ZoneInfo>, ProviderError> {
        match self {
            ZoneProvider::Embedded(p) => p.list_zones().await,
            ZoneProvider::Route53(p) => p.list_zones().await,
            ZoneProvider::Google(p) => p.list_zones().await,
            ZoneProvider::Azure(p) => p.list_zones().await,
            ZoneProvider::Rfc2136(p) => p.list_zones().await,
            ZoneProvider::Webhook(p) => p.list_zones().await,
        }
    }

    async fn records(&self, zone_id: &str) -> Result<Vec<Endpoint>, ProviderError> {
        match self {
            ZoneProvider::Embedded(p) => p.records(zone_id).await,
            ZoneProvider::Route53(p) => p.records(zone_id).await,
            ZoneProvider::Google(p) => p.records(zone_id).await,
            ZoneProvider::Azure(p) => p.records(zone_id).await,
            ZoneProvider::Rfc2136(p) => p.records(zone_id).await,
            ZoneProvider::Webhook(p) => p.records(zone_id).await,
        }
    }

    async fn apply(&self, zone_id: &str, changes: &Changes) -> Result<(), ProviderError> {
        match self {
            ZoneProvider::Embedded(p) => p.apply(zone_id, changes).await,
            ZoneProvider::Route53(p) => p.apply(zone_id, changes).await,
            ZoneProvider::Google(p) => p.apply(zone_id, changes).await,
            ZoneProvider::Azure(p) => p.apply(zone_id, changes).await,
            ZoneProvider::Rfc2136(p) => p.apply(zone_id, changes).await,
            ZoneProvider::Webhook(p) => p.apply(zone_id, changes).await,
        }
    }
}

/// Why a zone has no usable provider; said in status, never with secret values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("Secret {0} not found")]
    NotFound(String),
    #[error(
        "Secret {name} has type {type_:?}; expected kuadrant.io/aws, kuadrant.io/gcp, kuadrant.io/azure, kuadrant.io/rfc2136 or kuadrant.io/webhook"
    )]
    UnknownType { name: String, type_: String },
    #[error("Secret {name} lacks key {key}")]
    MissingKey { name: String, key: &'static str },
    #[error("Secret {name}: {problem}")]
    Invalid { name: String, problem: String },
}

fn value(secret: &Secret, key: &'static str) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|data| data.get(key))
        .map(|bytes| String::from_utf8_lossy(&bytes.0).trim().to_string())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|data| data.get(key))
                .cloned()
        })
        .filter(|v| !v.is_empty())
}

fn required(secret: &Secret, key: &'static str) -> Result<String, SecretError> {
    value(secret, key).ok_or_else(|| SecretError::MissingKey {
        name: secret.metadata.name.clone().unwrap_or_default(),
        key,
    })
}

/// The admin's provider settings (see [`crate::zones::provider_args`]): what no Secret may choose.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProviderSettings {
    /// Every Route53 zone's endpoint; the real service when `None`.
    pub aws_endpoint: Option<String>,
    /// The STS endpoint roles are assumed at; the region's when `None`.
    pub aws_sts_endpoint: Option<String>,
    /// Every Google zone's endpoint; the real service when `None`.
    pub google_endpoint: Option<String>,
    /// The metadata server ambient Google identities take tokens from; Application Default
    /// Credentials when `None`.
    pub google_metadata_endpoint: Option<String>,
    /// Every Azure zone's cloud; Azure's public one when `None`.
    pub azure_cloud: Option<meridian_providers::azure::CustomCloud>,
    /// The namespaces whose zones may use this process's own identity.
    pub ambient_identity_namespaces: std::collections::BTreeSet<String>,
    /// The ranges RFC2136 servers may be in; when empty, anywhere but the special addresses
    /// ([`rfc2136_server_refusal`]).
    pub rfc2136_servers: Vec<ipnet::IpNet>,
    /// The ranges webhooks may be reached at; when empty, anywhere but the special addresses
    /// ([`webhook_refusal`]).
    pub webhook_addresses: Vec<ipnet::IpNet>,
}

impl ProviderSettings {
    /// A test bed's settings: its BIND servers listen on loopback (never in
    /// production).
    pub fn test_bed() -> Self {
        ProviderSettings {
            rfc2136_servers: vec![
                "127.0.0.0/8".parse().expect("a CIDR"),
                "::1/128".parse().expect("a CIDR"),
            ],
            ..Default::default()
        }
    }
}

/// Why the hub (or a distributed agent) may not send a zone's DNS UPDATEs to `server`, if it
/// may not. A Secret is a tenant's: without this, it could aim the hub at the node's own
/// services, the metadata service or anything else only the hub's network reaches. With the
/// admin's ranges, only those; without, anywhere but the addresses no probe reaches either.
pub fn rfc2136_server_refusal(
    server: std::net::IpAddr,
    allowed: &[ipnet::IpNet],
) -> Option<String> {
    if !allowed.is_empty() {
        return (!allowed.iter().any(|range| range.contains(&server))).then(|| {
            format!(
                "server {server} is outside the ranges the platform admin allows for RFC2136 servers (--rfc2136-server-allow)"
            )
        });
    }
    crate::decide::probe_policy::ProbeAddressPolicy::default()
        .refuses(server)
        .map(|refusal| {
            let kind = match refusal {
                crate::decide::probe_policy::Refusal::Special(kind) => kind.to_string(),
                crate::decide::probe_policy::Refusal::Denied(range) => range.to_string(),
            };
            format!(
                "server {server} is refused: {kind} addresses are RFC2136 servers only by the platform admin's --rfc2136-server-allow"
            )
        })
}

/// Why the hub (or a distributed agent) may not send a zone's webhook requests to `address`, if
/// it may not. As for RFC2136 servers: with the admin's ranges, only those; without, anywhere
/// but the special addresses. A webhook on loopback besides is a sidecar of this process,
/// holding the admin's provider credentials: like this process's own identity, only namespaces
/// the admin granted it to (`--ambient-identity-namespace`) may publish through it.
pub fn webhook_refusal(
    address: std::net::IpAddr,
    namespace: &str,
    settings: &ProviderSettings,
) -> Option<String> {
    use crate::decide::probe_policy::{ProbeAddressPolicy, Refusal};
    // Judged as the IPv4 address an IPv6 form reaches (mapped, compatible, NAT64, 6to4).
    let reached = ProbeAddressPolicy::reached(address);
    let allowed = &settings.webhook_addresses;
    let special = match ProbeAddressPolicy::default().refuses(address) {
        Some(Refusal::Special(kind)) => Some(kind),
        _ => None,
    };
    // This host: loopback, or the unspecified address, which Linux connects to loopback.
    let own = reached.is_loopback()
        || reached.is_unspecified()
        || matches!(reached, std::net::IpAddr::V4(v4) if v4.octets()[0] == 0);
    match special {
        // Never, whatever the admin allows: nothing a DNS provider is sits there.
        Some(kind) if !own => {
            return Some(format!(
                "the webhook's address {address} is refused: {kind} addresses are never webhooks"
            ));
        }
        Some(kind) if allowed.is_empty() => {
            return Some(format!(
                "the webhook's address {address} is refused: {kind} addresses are webhooks only by the platform admin's --webhook-allow"
            ));
        }
        _ => {}
    }
    if !allowed.is_empty()
        && !allowed
            .iter()
            .any(|range| range.contains(&address) || range.contains(&reached))
    {
        return Some(format!(
            "the webhook's address {address} is outside the ranges the platform admin allows for webhooks (--webhook-allow)"
        ));
    }
    (own && !settings.ambient_identity_namespaces.contains(namespace)).then(|| {
        format!(
            "the webhook at {address} is on the hub's own loopback, a sidecar acting with the platform admin's credentials, which the admin has not granted to namespace {namespace} (--ambient-identity-namespace)"
        )
    })
}

/// How long a webhook URL's host may take to resolve.
const WEBHOOK_LOOKUP_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Headers a webhook Secret may not set: the protocol's own, and those that would change how
/// the request travels rather than what it says.
const RESERVED_HEADERS: [&str; 8] = [
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "proxy-authorization",
    "te",
    "transfer-encoding",
];

/// How a `kuadrant.io/webhook` Secret's zone is reached: `url` (http or https, without
/// credentials in it), `headers` (optional, one `Name: value` per line, sent with every request:
/// a token), `ca.crt` (optional, a PEM CA for an https URL). The URL's host is resolved here
/// and every address checked ([`webhook_refusal`]); requests then go to those addresses only.
pub async fn webhook_config(
    secret: &Secret,
    domain: &str,
    settings: &ProviderSettings,
) -> Result<WebhookConfig, SecretError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let namespace = secret.metadata.namespace.clone().unwrap_or_default();
    let invalid = |problem: String| SecretError::Invalid {
        name: name.clone(),
        problem,
    };
    let written = required(secret, "url")?;
    // The URL is not repeated in a refusal: it may carry a token in its query.
    let url = meridian_providers::webhook::Url::parse(&written)
        .map_err(|e| invalid(format!("url is not a URL: {e}")))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(invalid(format!(
            "url's scheme {:?} is not http or https",
            url.scheme()
        )));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(invalid(
            "url carries credentials; put them in the headers key (Authorization: ...)".into(),
        ));
    }
    let host = url
        .host_str()
        .ok_or_else(|| invalid("url has no host".into()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| invalid("url has no port".into()))?;
    let addresses: Vec<std::net::SocketAddr> = match host.parse::<std::net::IpAddr>() {
        Ok(ip) => vec![std::net::SocketAddr::new(ip, port)],
        Err(_) => {
            let lookup = tokio::net::lookup_host((host.as_str(), port));
            match tokio::time::timeout(WEBHOOK_LOOKUP_TIMEOUT, lookup).await {
                Ok(Ok(addresses)) => addresses.collect(),
                Ok(Err(e)) => {
                    return Err(invalid(format!("url's host {host} does not resolve: {e}")));
                }
                Err(_) => {
                    return Err(invalid(format!(
                        "url's host {host} did not resolve within {} s",
                        WEBHOOK_LOOKUP_TIMEOUT.as_secs()
                    )));
                }
            }
        }
    };
    if addresses.is_empty() {
        return Err(invalid(format!("url's host {host} resolves to no address")));
    }
    for address in &addresses {
        if let Some(refusal) = webhook_refusal(address.ip(), &namespace, settings) {
            return Err(invalid(refusal));
        }
    }
    let mut headers = Vec::new();
    for line in value(secret, "headers").unwrap_or_default().lines() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        // Nothing of a line is quoted back: a malformed one may be part of a token.
        let (header, header_value) = line
            .split_once(':')
            .ok_or_else(|| invalid("headers: each line is `Name: value`".into()))?;
        let header = header.trim();
        if RESERVED_HEADERS.contains(&header.to_ascii_lowercase().as_str()) {
            return Err(invalid(format!(
                "headers: {header} is the protocol's or the connection's, not a Secret's"
            )));
        }
        headers.push((header.to_string(), header_value.trim().to_string()));
    }
    Ok(WebhookConfig {
        url,
        zone: domain.trim_end_matches('.').to_string(),
        headers,
        extra_ca_pem: value(secret, "ca.crt"),
        pinned: if host.parse::<std::net::IpAddr>().is_ok() {
            Vec::new()
        } else {
            addresses
        },
    })
}

/// Providers by Secret, so an account's budget and caches are shared.
#[derive(Debug)]
pub struct ProviderCache {
    /// The hub's nameserver; agents in distributed mode publish to provider zones only.
    embedded: Option<Arc<EmbeddedZones>>,
    by_secret: tokio::sync::Mutex<BTreeMap<(String, String), ZoneProvider>>,
    settings: ProviderSettings,
}

impl ProviderCache {
    pub fn new(embedded: Arc<EmbeddedZones>) -> Self {
        ProviderCache {
            embedded: Some(embedded),
            by_secret: tokio::sync::Mutex::new(BTreeMap::new()),
            settings: ProviderSettings::default(),
        }
    }

    /// Providers at DNS services only (no embedded nameserver in this process).
    pub fn without_embedded() -> Self {
        ProviderCache {
            embedded: None,
            by_secret: tokio::sync::Mutex::new(BTreeMap::new()),
            settings: ProviderSettings::default(),
        }
    }

    /// With the admin's endpoints and identities.
    pub fn with_settings(mut self, settings: ProviderSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The embedded zone `apex`, when this process serves embedded zones.
    pub fn embedded(&self, apex: &str) -> Option<ZoneProvider> {
        Some(EmbeddedZones::zone(self.embedded.as_ref()?, apex))
    }

    pub fn embedded_zones(&self) -> Option<&Arc<EmbeddedZones>> {
        self.embedded.as_ref()
    }

    /// The provider for a zone published through `secret`.
    pub async fn for_secret(
        &self,
        secret: &Secret,
        domain: &str,
    ) -> Result<ZoneProvider, SecretError> {
        let name = secret.metadata.name.clone().unwrap_or_default();
        let key = (
            format!(
                "{}/{name}/{domain}",
                secret.metadata.namespace.clone().unwrap_or_default()
            ),
            secret.metadata.resource_version.clone().unwrap_or_default(),
        );
        if let Some(provider) = self.by_secret.lock().await.get(&key) {
            return Ok(provider.clone());
        }
        // Built without the lock: building may wait on the network (a webhook's host resolved),
        // and one tenant's slow name must not hold every other zone's provider. Two passes
        // building at once keep the first one stored.
        let provider = build_provider(secret, &name, domain, &self.settings).await?;
        let mut cache = self.by_secret.lock().await;
        if let Some(stored) = cache.get(&key) {
            return Ok(stored.clone());
        }
        cache.retain(|(id, _), _| *id != key.0);
        cache.insert(key, provider.clone());
        Ok(provider)
    }
}

/// Refuses a Secret key that names what only the admin may set (see [`ProviderSettings`]).
fn admins_only(secret: &Secret, key: &'static str, flag: &str) -> Result<(), SecretError> {
    match value(secret, key) {
        None => Ok(()),
        Some(_) => Err(SecretError::Invalid {
            name: secret.metadata.name.clone().unwrap_or_default(),
            problem: format!(
                "{key} is the platform admin's setting (the hub's and agent's {flag}), not a Secret's: remove it"
            ),
        }),
    }
}

/// Who a `kuadrant.io/aws` Secret's zone calls Route53 as:
/// - `AWS_ACCESS_KEY_ID` and `AWS_SECRET_ACCESS_KEY`: that key;
/// - neither: the hub's (or agent's) own identity, the AWS default credential chain (IRSA's web
///   identity, EKS Pod Identity, the instance's role), only in a namespace the platform admin
///   granted it to (`--ambient-identity-namespace`);
/// - and with `AWS_ROLE_ARN`, a role assumed from that. With the process's own identity the
///   external ID is `meridian:<namespace>`, never the Secret's: a role whose trust policy asks
///   for it can only be assumed on that namespace's behalf, whichever Secret names it. With a
///   key, `AWS_EXTERNAL_ID` is the Secret's.
pub fn aws_identity(
    secret: &Secret,
    settings: &ProviderSettings,
) -> Result<meridian_providers::aws_identity::AwsIdentity, SecretError> {
    use meridian_providers::aws_identity::{AssumedRole, AwsIdentity, AwsSource, is_role_arn};
    let name = secret.metadata.name.clone().unwrap_or_default();
    let namespace = secret.metadata.namespace.clone().unwrap_or_default();
    let invalid = |problem: String| SecretError::Invalid {
        name: name.clone(),
        problem,
    };
    admins_only(secret, "AWS_ENDPOINT_URL", "--aws-endpoint")?;
    admins_only(secret, "AWS_ENDPOINT_URL_STS", "--aws-sts-endpoint")?;
    let source = match (
        value(secret, "AWS_ACCESS_KEY_ID"),
        value(secret, "AWS_SECRET_ACCESS_KEY"),
    ) {
        (Some(access_key_id), Some(secret_access_key)) => AwsSource::Keys {
            access_key_id,
            secret_access_key,
        },
        (None, None) if settings.ambient_identity_namespaces.contains(&namespace) => {
            AwsSource::Ambient
        }
        (None, None) => {
            return Err(invalid(format!(
                "without AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY this asks for the hub's own AWS identity, which the platform admin has not granted to namespace {namespace} (--ambient-identity-namespace): add a key"
            )));
        }
        (None, Some(_)) => {
            return Err(SecretError::MissingKey {
                name,
                key: "AWS_ACCESS_KEY_ID",
            });
        }
        (Some(_), None) => {
            return Err(SecretError::MissingKey {
                name,
                key: "AWS_SECRET_ACCESS_KEY",
            });
        }
    };
    let external_id = value(secret, "AWS_EXTERNAL_ID");
    let assume_role = match value(secret, "AWS_ROLE_ARN") {
        None if external_id.is_some() => {
            return Err(invalid(
                "AWS_EXTERNAL_ID without AWS_ROLE_ARN: there is no role to assume".into(),
            ));
        }
        None => None,
        Some(arn) if !is_role_arn(&arn) => {
            return Err(invalid(format!(
                "AWS_ROLE_ARN {arn:?} is not an IAM role's ARN (arn:aws:iam::<account>:role/<name>)"
            )));
        }
        Some(role_arn) => {
            let external_id = match (&source, external_id) {
                (AwsSource::Ambient, Some(_)) => {
                    return Err(invalid(format!(
                        "AWS_EXTERNAL_ID with the hub's own identity: the external ID is the hub's, meridian:{namespace}; remove it"
                    )));
                }
                (AwsSource::Ambient, None) => Some(format!("meridian:{namespace}")),
                (AwsSource::Keys { .. }, external_id) => external_id,
            };
            let session_name: String = format!("meridian-{namespace}").chars().take(64).collect();
            Some(AssumedRole {
                role_arn,
                external_id,
                session_name,
            })
        }
    };
    Ok(AwsIdentity {
        source,
        assume_role,
        region: value(secret, "AWS_REGION").unwrap_or_else(|| "us-east-1".into()),
        sts_endpoint: settings.aws_sts_endpoint.clone(),
    })
}

/// The credentials a `kuadrant.io/gcp` Secret gives: its service-account key (`GOOGLE`), or
/// without one the hub's own identity (Application Default Credentials: GKE Workload
/// Identity), only in a namespace the platform admin granted it to.
pub fn google_credentials(
    secret: &Secret,
    settings: &ProviderSettings,
) -> Result<GoogleCredentials, SecretError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let namespace = secret.metadata.namespace.clone().unwrap_or_default();
    admins_only(secret, "GOOGLE_ENDPOINT_URL", "--google-endpoint")?;
    admins_only(secret, "GCE_METADATA_HOST", "--google-metadata-endpoint")?;
    let auth = match value(secret, "GOOGLE") {
        Some(key) => GoogleAuth::ServiceAccount(key),
        None if settings.ambient_identity_namespaces.contains(&namespace) => GoogleAuth::Ambient {
            metadata_endpoint: settings.google_metadata_endpoint.clone(),
        },
        None => {
            return Err(SecretError::Invalid {
                name,
                problem: format!(
                    "without GOOGLE (a service-account key) this asks for the hub's own Google identity, which the platform admin has not granted to namespace {namespace} (--ambient-identity-namespace): add a key"
                ),
            });
        }
    };
    Ok(GoogleCredentials {
        project: required(secret, "PROJECT_ID")?,
        auth,
        endpoint: settings.google_endpoint.clone(),
    })
}

async fn build_provider(
    secret: &Secret,
    name: &str,
    domain: &str,
    settings: &ProviderSettings,
) -> Result<ZoneProvider, SecretError> {
    let invalid = |problem: String| SecretError::Invalid {
        name: name.to_string(),
        problem,
    };
    match secret.type_.as_deref().unwrap_or_default() {
        AWS_SECRET_TYPE => {
            let identity = aws_identity(secret, settings)?;
            let budget = Arc::new(RequestBudget::per_second(ROUTE53_REQUESTS_PER_SECOND));
            Ok(ZoneProvider::Route53(Arc::new(
                Route53Provider::with_identity(&identity, settings.aws_endpoint.clone(), budget)
                    .await,
            )))
        }
        GCP_SECRET_TYPE => {
            let credentials = google_credentials(secret, settings)?;
            let budget = Arc::new(RequestBudget::per_second(CLOUD_DNS_REQUESTS_PER_SECOND));
            let provider = GoogleProvider::new(&credentials, GeoRegions::default(), budget)
                .await
                .map_err(|e| invalid(e.to_string()))?;
            Ok(ZoneProvider::Google(Arc::new(provider)))
        }
        AZURE_SECRET_TYPE => {
            // The dns-operator's format: one `azure.json`; `ca.crt` trusts a private cloud's CA.
            let mut credentials = AzureCredentials::from_azure_json(
                &required(secret, "azure.json")?,
                value(secret, "ca.crt"),
            )
            .map_err(invalid)?;
            if credentials.cloud.is_some() {
                return Err(invalid(
                    "resourceManagerEndpoint and activeDirectoryAuthorityHost are the platform admin's settings (the hub's and agent's --azure-resource-manager and --azure-authority-host), not a Secret's: remove them from azure.json".into(),
                ));
            }
            credentials.cloud = settings.azure_cloud.clone();
            let namespace = secret.metadata.namespace.as_deref().unwrap_or_default();
            if matches!(credentials.auth, AzureAuth::WorkloadIdentity { .. })
                && !settings.ambient_identity_namespaces.contains(namespace)
            {
                return Err(invalid(format!(
                    "useWorkloadIdentityExtension asks for this process's own identity, which the platform admin has not granted to namespace {namespace} (--ambient-identity-namespace): use aadClientId and aadClientSecret"
                )));
            }
            let budget = Arc::new(RequestBudget::per_second(AZURE_REQUESTS_PER_SECOND));
            let provider = AzureProvider::new(&credentials, budget, AzureProvider::default_retry())
                .map_err(|e| invalid(e.to_string()))?;
            Ok(ZoneProvider::Azure(Arc::new(provider)))
        }
        RFC2136_SECRET_TYPE => {
            let server = required(secret, "server")?;
            let server: std::net::SocketAddr = server
                .parse()
                .map_err(|_| invalid(format!("server {server:?} is not host-address:port")))?;
            if let Some(refusal) = rfc2136_server_refusal(server.ip(), &settings.rfc2136_servers) {
                return Err(invalid(refusal));
            }
            let config = Rfc2136Config {
                server,
                zone: domain.trim_end_matches('.').to_string(),
                key_name: required(secret, "tsigKeyName")?,
                algorithm: value(secret, "tsigAlgorithm").unwrap_or_else(|| "hmac-sha256".into()),
                secret: required(secret, "tsigSecret")?,
            };
            let provider = Rfc2136Provider::new(config).map_err(|e| invalid(e.to_string()))?;
            Ok(ZoneProvider::Rfc2136(Arc::new(provider)))
        }
        WEBHOOK_SECRET_TYPE => {
            let config = webhook_config(secret, domain, settings).await?;
            let provider = WebhookProvider::new(config).map_err(|e| match e {
                ProviderError::Invalid(problem) => invalid(problem),
                other => invalid(other.to_string()),
            })?;
            Ok(ZoneProvider::Webhook(Arc::new(provider)))
        }
        other => Err(SecretError::UnknownType {
            name: name.to_string(),
            type_: other.to_string(),
        }),
    }
}

/// A read of a host's own records ([`ZoneProvider::read_host`]).
#[derive(Debug, Clone)]
pub struct HostRead {
    pub records: Vec<Endpoint>,
    /// Whether the read took one call (siblings sharing the host's first characters can make
    /// it page on).
    pub one_call: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_a_secret_names_has_a_fidelity_table() {
        for secret_type in [
            AWS_SECRET_TYPE,
            GCP_SECRET_TYPE,
            AZURE_SECRET_TYPE,
            RFC2136_SECRET_TYPE,
            WEBHOOK_SECRET_TYPE,
        ] {
            let kind = kind_of_secret_type(secret_type).expect("a provider");
            assert_eq!(
                fidelity::of_provider(kind).map(|f| f.provider),
                Some(kind),
                "{secret_type}"
            );
        }
        assert_eq!(kind_of_secret_type("Opaque"), None);
        assert!(fidelity::of_provider("embedded").is_some());
    }

    #[test]
    fn a_webhooks_ttl_floor_is_said_once_with_the_lowest_ttl_it_raised() {
        let asked = [
            Endpoint::new(
                "a.example.com",
                RecordType::A,
                ["192.0.2.1".to_string()],
                30,
            ),
            Endpoint::new(
                "b.example.com",
                RecordType::A,
                ["192.0.2.2".to_string()],
                120,
            ),
        ];
        assert_eq!(raised_ttls(&asked, &asked), Vec::<String>::new());
        let mut floored = asked.clone();
        floored[0].record_ttl = 60;
        assert_eq!(
            raised_ttls(&asked, &floored),
            [
                "the webhook's provider holds 1 record(s) with a longer TTL than asked (e.g. a.example.com: 30 s asked, 60 s held): a TTL floor; answers and failover are that much slower to change"
            ]
        );
        let mut default_asked = asked.clone();
        default_asked[0].record_ttl = 0;
        assert_eq!(
            raised_ttls(&default_asked, &floored),
            Vec::<String>::new(),
            "0 asks for the provider's default"
        );
        floored[0].record_ttl = 10;
        assert_eq!(
            raised_ttls(&asked, &floored),
            Vec::<String>::new(),
            "a lower TTL is no floor"
        );
    }
    use hickory_proto::op::{Message, Query};
    use hickory_proto::rr::{Name, RData, RecordType as WireType};
    use meridian_dns::model::RecordType;
    use meridian_nameserver::ServerConfig;
    use std::net::{Ipv4Addr, SocketAddr, UdpSocket};

    /// The A records the nameserver at `server` answers for `host`.
    fn answered(server: SocketAddr, host: &str) -> Vec<Ipv4Addr> {
        let mut query = Message::query();
        query.add_query(Query::query(
            Name::from_ascii(host).expect("a name"),
            WireType::A,
        ));
        let socket = UdpSocket::bind("127.0.0.1:0").expect("a socket");
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("a timeout");
        socket
            .send_to(&query.to_vec().expect("a query"), server)
            .expect("sent");
        let mut buffer = [0u8; 4096];
        let n = socket.recv(&mut buffer).expect("an answer");
        Message::from_vec(&buffer[..n])
            .expect("a response")
            .answers
            .iter()
            .filter_map(|record| match &record.data {
                RData::A(a) => Some(a.0),
                _ => None,
            })
            .collect()
    }

    fn secret(namespace: &str, type_: &str, data: serde_json::Value) -> Secret {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": type_,
            "metadata": { "name": "zone", "namespace": namespace },
            "stringData": data,
        }))
        .expect("a secret")
    }

    /// Which Google identity a Secret's zone calls as, and the attacks on the hub's own: its
    /// identity outside a granted namespace, a metadata server or endpoint of the tenant's
    /// choosing.
    #[test]
    fn a_google_secret_names_a_key_or_in_a_granted_namespace_the_hubs_own_identity() {
        let settings = ProviderSettings {
            ambient_identity_namespaces: ["platform".to_string()].into(),
            google_metadata_endpoint: Some("http://metadata.test".into()),
            ..Default::default()
        };
        let auth = |namespace: &str, data: serde_json::Value| {
            google_credentials(&secret(namespace, GCP_SECRET_TYPE, data), &settings)
                .map(|credentials| format!("{:?}", credentials.auth))
                .map_err(|e| e.to_string())
        };
        let key = serde_json::json!({ "PROJECT_ID": "p", "GOOGLE": "{}" });
        let none = serde_json::json!({ "PROJECT_ID": "p" });
        assert_eq!(auth("team-a", key.clone()), Ok("ServiceAccount(..)".into()));
        assert_eq!(auth("platform", key), Ok("ServiceAccount(..)".into()));
        assert_eq!(auth("platform", none.clone()), Ok("Ambient".into()));
        let refused = auth("team-a", none).unwrap_err();
        assert!(
            refused.contains("has not granted to namespace team-a"),
            "{refused}"
        );
        for (key, flag) in [
            ("GCE_METADATA_HOST", "--google-metadata-endpoint"),
            ("GOOGLE_ENDPOINT_URL", "--google-endpoint"),
        ] {
            let data = serde_json::json!({ "PROJECT_ID": "p", key: "http://attacker.test" });
            let refused = auth("platform", data).unwrap_err();
            assert!(refused.contains(flag), "{refused}");
        }
        let credentials = google_credentials(
            &secret(
                "platform",
                GCP_SECRET_TYPE,
                serde_json::json!({ "PROJECT_ID": "p" }),
            ),
            &settings,
        )
        .unwrap();
        assert!(matches!(
            credentials.auth,
            GoogleAuth::Ambient { metadata_endpoint: Some(ref e) } if e == "http://metadata.test"
        ));
    }

    /// Which AWS identity a Secret's zone calls as, and the attacks on the hub's own: its
    /// identity outside a granted namespace, an external ID of the tenant's choosing on its
    /// behalf, an STS endpoint of the tenant's choosing.
    #[test]
    fn an_aws_secret_names_a_key_or_in_a_granted_namespace_the_hubs_own_identity() {
        use meridian_providers::aws_identity::{AssumedRole, AwsSource};
        const ROLE: &str = "arn:aws:iam::123456789012:role/dns";
        let settings = ProviderSettings {
            ambient_identity_namespaces: ["platform".to_string()].into(),
            aws_sts_endpoint: Some("http://sts.test".into()),
            ..Default::default()
        };
        let keys = AwsSource::Keys {
            access_key_id: "a".into(),
            secret_access_key: "b".into(),
        };
        let role = |external_id: Option<&str>, namespace: &str| {
            Some(AssumedRole {
                role_arn: ROLE.into(),
                external_id: external_id.map(str::to_string),
                session_name: format!("meridian-{namespace}"),
            })
        };
        let key = serde_json::json!({ "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b" });
        let with = |base: &serde_json::Value, extra: serde_json::Value| {
            let mut data = base.clone();
            data.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            data
        };
        let none = serde_json::json!({});
        // (namespace, data, source and role, or the refusal's words)
        type Want = Result<(AwsSource, Option<AssumedRole>), &'static str>;
        let cases: Vec<(&str, serde_json::Value, Want)> = vec![
            ("team-a", key.clone(), Ok((keys.clone(), None))),
            ("platform", none.clone(), Ok((AwsSource::Ambient, None))),
            (
                "team-a",
                none.clone(),
                Err("has not granted to namespace team-a"),
            ),
            (
                "team-a",
                with(
                    &key,
                    serde_json::json!({ "AWS_ROLE_ARN": ROLE, "AWS_EXTERNAL_ID": "x-1" }),
                ),
                Ok((keys.clone(), role(Some("x-1"), "team-a"))),
            ),
            (
                "platform",
                with(&none, serde_json::json!({ "AWS_ROLE_ARN": ROLE })),
                Ok((
                    AwsSource::Ambient,
                    role(Some("meridian:platform"), "platform"),
                )),
            ),
            (
                "platform",
                with(
                    &none,
                    serde_json::json!({ "AWS_ROLE_ARN": ROLE, "AWS_EXTERNAL_ID": "meridian:team-b" }),
                ),
                Err("the external ID is the hub's, meridian:platform"),
            ),
            (
                "team-a",
                with(&none, serde_json::json!({ "AWS_ROLE_ARN": ROLE })),
                Err("has not granted to namespace team-a"),
            ),
            (
                "team-a",
                with(
                    &key,
                    serde_json::json!({ "AWS_ROLE_ARN": "arn:aws:iam::123456789012:user/x" }),
                ),
                Err("is not an IAM role's ARN"),
            ),
            (
                "team-a",
                with(&key, serde_json::json!({ "AWS_EXTERNAL_ID": "x" })),
                Err("there is no role to assume"),
            ),
            (
                "team-a",
                with(
                    &key,
                    serde_json::json!({ "AWS_ENDPOINT_URL_STS": "http://mallory.example" }),
                ),
                Err("AWS_ENDPOINT_URL_STS is the platform admin's setting"),
            ),
            (
                "team-a",
                serde_json::json!({ "AWS_ACCESS_KEY_ID": "a" }),
                Err("AWS_SECRET_ACCESS_KEY"),
            ),
        ];
        for (namespace, data, want) in cases {
            let got = aws_identity(&secret(namespace, AWS_SECRET_TYPE, data.clone()), &settings);
            match (got, want) {
                (Ok(identity), Ok((source, assume_role))) => {
                    assert_eq!(
                        (&identity.source, &identity.assume_role),
                        (&source, &assume_role),
                        "{data}"
                    );
                    assert_eq!(identity.sts_endpoint.as_deref(), Some("http://sts.test"));
                }
                (Err(error), Err(words)) => {
                    assert!(error.to_string().contains(words), "{data}: {error}")
                }
                (got, want) => panic!("{data}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// The attacks on the hub's identity and endpoints through a tenant's Secret: each is
    /// refused with what to do, and none builds a provider.
    #[tokio::test]
    async fn endpoints_and_the_hubs_identity_are_the_admins_not_a_secrets() {
        let aws = |extra: serde_json::Value| {
            let mut data =
                serde_json::json!({ "AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b" });
            data.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            secret("mallory", AWS_SECRET_TYPE, data)
        };
        let azure = |namespace: &str, json: serde_json::Value| {
            secret(
                namespace,
                AZURE_SECRET_TYPE,
                serde_json::json!({ "azure.json": json.to_string() }),
            )
        };
        let base =
            serde_json::json!({ "tenantId": "t", "subscriptionId": "s", "resourceGroup": "rg" });
        let with = |extra: serde_json::Value| {
            let mut json = base.clone();
            json.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            json
        };
        let granted = ProviderSettings {
            ambient_identity_namespaces: ["platform".to_string()].into(),
            ..Default::default()
        };
        let cases = [
            (
                aws(serde_json::json!({ "AWS_ENDPOINT_URL": "http://mallory.example" })),
                Some("AWS_ENDPOINT_URL is the platform admin's setting"),
            ),
            (aws(serde_json::json!({})), None),
            (
                secret(
                    "mallory",
                    GCP_SECRET_TYPE,
                    serde_json::json!({ "PROJECT_ID": "p", "GOOGLE": "{}", "GOOGLE_ENDPOINT_URL": "http://mallory.example" }),
                ),
                Some("GOOGLE_ENDPOINT_URL is the platform admin's setting"),
            ),
            (
                azure(
                    "mallory",
                    with(serde_json::json!({
                        "aadClientId": "id", "aadClientSecret": "s",
                        "resourceManagerEndpoint": "https://arm.mallory.example/",
                        "activeDirectoryAuthorityHost": "https://login.mallory.example/",
                    })),
                ),
                Some(
                    "resourceManagerEndpoint and activeDirectoryAuthorityHost are the platform admin's settings",
                ),
            ),
            (
                azure(
                    "mallory",
                    with(
                        serde_json::json!({ "useWorkloadIdentityExtension": true, "aadClientId": "id" }),
                    ),
                ),
                Some("has not granted to namespace mallory (--ambient-identity-namespace)"),
            ),
            (
                azure(
                    "mallory",
                    with(serde_json::json!({ "aadClientId": "id", "aadClientSecret": "s" })),
                ),
                None,
            ),
        ];
        for (secret, refusal) in cases {
            let built = build_provider(&secret, "zone", "example.com", &granted).await;
            match (built, refusal) {
                (Err(error), Some(refusal)) => {
                    assert!(error.to_string().contains(refusal), "{error}")
                }
                (Ok(_), None) => {}
                (built, refusal) => panic!("{secret:?}: {:?}, expected {refusal:?}", built.err()),
            }
        }
        // The namespace the admin named may use the hub's identity: whatever stops it now is
        // not the grant.
        let own = azure(
            "platform",
            with(serde_json::json!({ "useWorkloadIdentityExtension": true, "aadClientId": "id" })),
        );
        if let Err(error) = build_provider(&own, "zone", "example.com", &granted).await {
            assert!(!error.to_string().contains("not granted"), "{error}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn each_change_is_served_when_its_apply_returns_though_changes_share_builds() {
        let server = NameServer::start("127.0.0.1:0".parse().unwrap(), ServerConfig::default())
            .await
            .expect("a nameserver");
        let address = server.local_addr();
        let zones = Arc::new(EmbeddedZones::new(Arc::new(server), Vec::new()));
        zones
            .ensure_served(&managed_zone(None), None, Numbering::Leads)
            .await;
        let zone = EmbeddedZones::zone(&zones, "example.com");
        let changes = (1..=48u8).map(|i| {
            let zone = zone.clone();
            tokio::spawn(async move {
                let host = format!("host-{i}.example.com");
                zone.apply("example.com", &creating(i))
                    .await
                    .expect("applied");
                // Asked the moment its apply returns.
                let answer =
                    tokio::task::spawn_blocking(move || answered(address, &format!("{host}.")))
                        .await
                        .expect("asked");
                (i, answer)
            })
        });
        for change in changes.collect::<Vec<_>>() {
            let (i, answer) = change.await.expect("the change ran");
            assert_eq!(answer, [Ipv4Addr::new(10, 0, 0, i)], "host-{i}");
        }
        assert_eq!(zones.record_count("example.com"), 48);
    }

    fn managed_zone(stamp: Option<SerialStamp>) -> ManagedZone {
        let mut zone: ManagedZone = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
            "metadata": { "name": "example", "namespace": "team" },
            "spec": { "domainName": "example.com" },
        }))
        .expect("a zone");
        zone.status = stamp.map(|stamp| meridian_api::kuadrant::ManagedZoneStatus {
            serial: Some(stamp.serial),
            content_digest: Some(stamp.digest),
            ..Default::default()
        });
        zone
    }

    /// The change creating `host-<i>.example.com` A 10.0.0.<i>.
    fn creating(i: u8) -> Changes {
        Changes {
            creates: vec![Endpoint {
                dns_name: format!("host-{i}.example.com"),
                record_type: RecordType::A,
                targets: vec![format!("10.0.0.{i}")],
                record_ttl: 60,
                set_identifier: None,
                provider_specific: Vec::new(),
            }],
            ..Changes::default()
        }
    }

    async fn embedded_zones() -> Arc<EmbeddedZones> {
        let server = NameServer::start("127.0.0.1:0".parse().unwrap(), ServerConfig::default())
            .await
            .expect("a nameserver");
        Arc::new(EmbeddedZones::new(Arc::new(server), Vec::new()))
    }

    #[tokio::test]
    async fn a_zone_forgotten_is_answered_no_more_and_leaves_nothing_for_the_next_holder() {
        let zones = embedded_zones().await;
        let address = zones.server().local_addr();
        zones
            .ensure_served(&managed_zone(None), None, Numbering::Leads)
            .await;
        EmbeddedZones::zone(&zones, "example.com")
            .apply("example.com", &creating(1))
            .await
            .expect("applied");
        let asked = move || answered(address, "host-1.example.com.");
        assert_eq!(
            tokio::task::spawn_blocking(asked).await.unwrap(),
            [Ipv4Addr::new(10, 0, 0, 1)]
        );
        assert!(zones.forget("example.com").await);
        assert!(tokio::task::spawn_blocking(asked).await.unwrap().is_empty());
        assert_eq!(zones.server().serial("example.com"), None);
        // The zone that claims the name next starts empty.
        zones
            .ensure_served(&managed_zone(None), None, Numbering::Leads)
            .await;
        assert_eq!(zones.record_count("example.com"), 0);
        assert!(tokio::task::spawn_blocking(asked).await.unwrap().is_empty());
        assert!(zones.serves("example.com"));
    }

    #[tokio::test]
    async fn records_arriving_before_their_zone_is_looked_at_wait_for_it() {
        let zones = embedded_zones().await;
        let address = zones.server().local_addr();
        EmbeddedZones::zone(&zones, "example.com")
            .apply("example.com", &creating(1))
            .await
            .expect("applied");
        assert_eq!(zones.server().serial("example.com"), None, "not served yet");
        let asked = move || answered(address, "host-1.example.com.");
        assert!(tokio::task::spawn_blocking(asked).await.unwrap().is_empty());
        zones
            .ensure_served(&managed_zone(None), None, Numbering::Leads)
            .await;
        assert_eq!(
            tokio::task::spawn_blocking(asked).await.unwrap(),
            [Ipv4Addr::new(10, 0, 0, 1)]
        );
    }

    #[test]
    fn rfc2136_servers_are_anywhere_but_special_addresses_or_only_where_the_admin_says() {
        let ranges = |list: &[&str]| -> Vec<ipnet::IpNet> {
            list.iter().map(|r| r.parse().unwrap()).collect()
        };
        let none: Vec<ipnet::IpNet> = Vec::new();
        let bed = ProviderSettings::test_bed().rfc2136_servers;
        let platform = ranges(&["10.20.0.0/16"]);
        // (server, allowed ranges, refused?)
        let table: [(&str, &[ipnet::IpNet], bool); 12] = [
            ("198.51.100.53", &none, false),
            ("2001:db8::53", &none, false),
            ("10.1.2.3", &none, false),
            ("127.0.0.1", &none, true),
            ("::1", &none, true),
            ("169.254.169.254", &none, true),
            ("::ffff:127.0.0.1", &none, true),
            ("0.0.0.0", &none, true),
            ("127.0.0.1", &bed, false),
            ("198.51.100.53", &bed, true),
            ("10.20.5.5", &platform, false),
            ("10.21.0.1", &platform, true),
        ];
        for (server, allowed, refused) in table {
            let refusal = rfc2136_server_refusal(server.parse().unwrap(), allowed);
            assert_eq!(
                refusal.is_some(),
                refused,
                "{server} {allowed:?}: {refusal:?}"
            );
        }
        assert_eq!(
            rfc2136_server_refusal("127.0.0.1".parse().unwrap(), &none).unwrap(),
            "server 127.0.0.1 is refused: loopback addresses are RFC2136 servers only by the platform admin's --rfc2136-server-allow"
        );
    }

    /// Where a tenant's webhook Secret may send the hub: the attacks (loopback, where a sidecar
    /// holds the admin's credentials; the metadata service, by address or by a name resolving
    /// to it; credentials in the URL; headers that change how the request travels) and what
    /// the admin's flags allow.
    #[tokio::test]
    async fn a_tenants_webhook_secret_reaches_only_where_the_admin_allows() {
        let strict = ProviderSettings::default();
        let sidecar = ProviderSettings {
            webhook_addresses: vec!["127.0.0.1/32".parse().unwrap()],
            ambient_identity_namespaces: ["platform".to_string()].into(),
            ..Default::default()
        };
        // An admin who allows everything still allows no metadata service, and no sidecar to an
        // ungranted namespace however its loopback is written.
        let broad = ProviderSettings {
            webhook_addresses: vec!["0.0.0.0/0".parse().unwrap(), "::/0".parse().unwrap()],
            ..Default::default()
        };
        let internal = ProviderSettings {
            webhook_addresses: vec!["10.96.0.0/12".parse().unwrap()],
            ..Default::default()
        };
        async fn config(
            namespace: &str,
            data: serde_json::Value,
            settings: ProviderSettings,
        ) -> Result<WebhookConfig, String> {
            webhook_config(
                &secret(namespace, WEBHOOK_SECRET_TYPE, data),
                "example.com",
                &settings,
            )
            .await
            .map_err(|e| e.to_string())
        }
        let url = |url: &str| serde_json::json!({ "url": url });
        let cases: [(&str, serde_json::Value, &ProviderSettings, Option<&str>); 17] = [
            (
                "team-a",
                url("https://dns-webhook.invalid:8443/"),
                &strict,
                Some("does not resolve"),
            ),
            ("team-a", url("http://192.0.2.7:8888"), &strict, None),
            ("team-a", url("http://10.96.4.4:8888"), &internal, None),
            (
                "team-a",
                url("http://192.0.2.7:8888"),
                &internal,
                Some("outside the ranges the platform admin allows for webhooks (--webhook-allow)"),
            ),
            (
                "team-a",
                url("http://127.0.0.1:8888"),
                &strict,
                Some(
                    "loopback addresses are webhooks only by the platform admin's --webhook-allow",
                ),
            ),
            (
                "team-a",
                url("http://localhost:8888"),
                &strict,
                Some("loopback addresses are webhooks only"),
            ),
            (
                "team-a",
                url("http://127.0.0.1:8888"),
                &sidecar,
                Some(
                    "a sidecar acting with the platform admin's credentials, which the admin has not granted to namespace team-a",
                ),
            ),
            ("platform", url("http://127.0.0.1:8888"), &sidecar, None),
            (
                "team-a",
                url("http://169.254.169.254/latest"),
                &strict,
                Some("169.254.169.254 is refused: link-local addresses are never webhooks"),
            ),
            (
                "team-a",
                url("http://[::ffff:169.254.169.254]/"),
                &broad,
                Some("link-local addresses are never webhooks"),
            ),
            (
                "team-a",
                url("http://user:pass@192.0.2.7/"),
                &strict,
                Some("url carries credentials"),
            ),
            (
                "team-a",
                url("file:///etc/passwd"),
                &strict,
                Some("is not http or https"),
            ),
            (
                "team-a",
                url("http://[::]:8888"),
                &broad,
                Some("on the hub's own loopback"),
            ),
            (
                "team-a",
                url("http://[::ffff:0.0.0.0]:8888"),
                &broad,
                Some("on the hub's own loopback"),
            ),
            (
                "team-a",
                url("http://127.3.2.1:8888"),
                &broad,
                Some("on the hub's own loopback"),
            ),
            (
                "team-a",
                url("http://[fd00:ec2::254]/"),
                &broad,
                Some("cloud metadata service addresses are never webhooks"),
            ),
            (
                "team-a",
                url("http://100.100.100.200/"),
                &broad,
                Some("cloud metadata service addresses are never webhooks"),
            ),
        ];
        for (namespace, data, settings, refusal) in cases {
            let shown = data.to_string();
            let got = config(namespace, data, settings.clone()).await;
            match refusal {
                None => assert!(got.is_ok(), "{namespace} {shown}: {got:?}"),
                Some(refusal) => {
                    let message = got.expect_err(&shown);
                    assert!(message.contains(refusal), "{namespace} {shown}: {message}");
                    assert!(!message.contains("pass@"), "{message}");
                }
            }
        }
        let with_headers = |headers: &str| serde_json::json!({ "url": "http://192.0.2.7:8888", "headers": headers });
        let token = webhook_config(
            &secret(
                "team-a",
                WEBHOOK_SECRET_TYPE,
                serde_json::json!({ "url": "http://192.0.2.7:8888", "headers": "Authorization: Bearer abc\n\nX-Team: a" }),
            ),
            "example.com",
            &strict,
        )
        .await
        .map(|c| c.headers.into_iter().map(|(n, _)| n).collect::<Vec<_>>());
        assert_eq!(
            token.as_deref().ok(),
            Some(&["Authorization".to_string(), "X-Team".into()][..])
        );
        for reserved in [
            "Host: metadata.internal",
            "content-type: text/plain",
            "Transfer-Encoding: chunked",
        ] {
            let message = config("team-a", with_headers(reserved), strict.clone())
                .await
                .unwrap_err();
            assert!(message.contains("not a Secret's"), "{reserved}: {message}");
        }
    }

    #[tokio::test]
    async fn a_tenants_rfc2136_secret_cannot_aim_the_hub_at_loopback() {
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("inside".into()),
                namespace: Some("mallory".into()),
                ..Default::default()
            },
            type_: Some(RFC2136_SECRET_TYPE.into()),
            string_data: Some(BTreeMap::from([
                ("server".to_string(), "127.0.0.1:53".to_string()),
                ("tsigKeyName".to_string(), "k".to_string()),
                ("tsigSecret".to_string(), "c2VjcmV0".to_string()),
            ])),
            ..Default::default()
        };
        let refused = ProviderCache::without_embedded()
            .for_secret(&secret, "internal.example")
            .await
            .expect_err("refused");
        assert!(
            refused.to_string().contains("--rfc2136-server-allow"),
            "{refused}"
        );
        ProviderCache::without_embedded()
            .with_settings(ProviderSettings::test_bed())
            .for_secret(&secret, "internal.example")
            .await
            .expect("the admin's test bed allows loopback");
    }

    #[tokio::test]
    async fn metrics_say_whether_a_follower_serves_the_leaders_content_and_what_it_is_behind() {
        let (leader, follower) = (embedded_zones().await, embedded_zones().await);
        let apex = "example.com";
        for zones in [&leader, &follower] {
            zones
                .ensure_served(&managed_zone(None), None, Numbering::Leads)
                .await;
        }
        EmbeddedZones::zone(&leader, apex)
            .apply(apex, &creating(1))
            .await
            .expect("applied");
        let stamp = leader.served_stamp(apex).expect("served");
        let metric = |zones: &EmbeddedZones, name: &str| {
            zones
                .render_metrics()
                .lines()
                .find_map(|line| line.strip_prefix(name).map(str::to_string))
        };
        // The leader's word names content the follower has not got yet.
        follower
            .ensure_served(&managed_zone(Some(stamp.clone())), None, Numbering::Follows)
            .await;
        let serves = r#"meridian_zone_serves_leader_content{zone="example.com"} "#;
        assert_eq!(metric(&follower, serves).as_deref(), Some("0"));
        follower.mirror_behind("DNSRecord/team/api", true);
        assert_eq!(
            metric(&follower, "meridian_mirror_records_behind ").as_deref(),
            Some("1")
        );
        // Caught up: the same records, the leader's serial, nothing behind.
        EmbeddedZones::zone(&follower, apex)
            .apply(apex, &creating(1))
            .await
            .expect("applied");
        follower.mirror_behind("DNSRecord/team/api", false);
        follower
            .ensure_served(&managed_zone(Some(stamp.clone())), None, Numbering::Follows)
            .await;
        assert_eq!(metric(&follower, serves).as_deref(), Some("1"));
        assert_eq!(
            metric(
                &follower,
                r#"meridian_zone_served_serial{zone="example.com"} "#
            ),
            Some(stamp.serial.to_string())
        );
        assert_eq!(
            metric(&follower, "meridian_mirror_records_behind ").as_deref(),
            Some("0")
        );
        assert_eq!(
            metric(
                &follower,
                r#"meridian_zone_unserved_changes{zone="example.com"} "#
            )
            .as_deref(),
            Some("0")
        );
    }

    #[tokio::test]
    async fn a_follower_serves_the_serial_the_leader_stamped_on_the_same_records() {
        let (leader, follower) = (embedded_zones().await, embedded_zones().await);
        let apex = "example.com";
        leader
            .ensure_served(&managed_zone(None), None, Numbering::Leads)
            .await;
        // A follower that started before the leader said anything numbers its own.
        follower
            .ensure_served(&managed_zone(None), None, Numbering::Follows)
            .await;
        for i in 1..=3 {
            for zones in [&leader, &follower] {
                EmbeddedZones::zone(zones, apex)
                    .apply(apex, &creating(i))
                    .await
                    .expect("applied");
            }
            let stamp = leader.served_stamp(apex).expect("served");
            assert_eq!(leader.server().serial(apex), Some(stamp.serial));
            follower
                .ensure_served(&managed_zone(Some(stamp.clone())), None, Numbering::Follows)
                .await;
            assert_eq!(
                follower.served_stamp(apex).map(|s| s.digest),
                Some(stamp.digest.clone()),
                "the same records, the same digest"
            );
            assert_eq!(
                follower.server().serial(apex),
                Some(stamp.serial),
                "change {i}: the follower serves the leader's serial"
            );
        }
        // A follower ahead of the leader's word numbers its change past what it served, and
        // takes the leader's serial once the word comes for that content.
        let before = follower.server().serial(apex).unwrap();
        EmbeddedZones::zone(&follower, apex)
            .apply(apex, &creating(4))
            .await
            .expect("applied");
        assert_eq!(follower.server().serial(apex), Some(before + 1));
        EmbeddedZones::zone(&leader, apex)
            .apply(apex, &creating(4))
            .await
            .expect("applied");
        let stamp = leader.served_stamp(apex).unwrap();
        follower
            .ensure_served(&managed_zone(Some(stamp.clone())), None, Numbering::Follows)
            .await;
        assert_eq!(follower.server().serial(apex), Some(stamp.serial));
    }

    #[test]
    fn an_embedded_zone_sets_its_soa_expire_and_never_below_a_week() {
        let zone = |expire: Option<&str>| -> ManagedZone {
            let mut spec = serde_json::json!({ "domainName": "example.com" });
            if let Some(expire) = expire {
                spec["soaExpire"] = expire.into();
            }
            serde_json::from_value(serde_json::json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
                "metadata": { "name": "zone", "namespace": "dns" },
                "spec": spec,
            }))
            .unwrap()
        };
        let expire = |text: Option<&str>| embedded_zone_config(&zone(text), &[], None).soa_expire;
        assert_eq!(expire(None), meridian_nameserver::DEFAULT_SOA_EXPIRE);
        assert_eq!(expire(Some("720h")), 30 * 86_400);
        // What the schema refuses is still held to a week if it gets through (an old CRD).
        assert_eq!(expire(Some("1h")), 7 * 86_400);
        assert_eq!(
            expire(Some("not a duration")),
            meridian_nameserver::DEFAULT_SOA_EXPIRE
        );
    }
}
