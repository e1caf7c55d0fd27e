//! `meridian-hub run`: the controllers, the embedded nameserver and the health endpoints, in
//! one process, until SIGINT or SIGTERM ([`RunningHub`] runs them inside another process, as
//! the end-to-end tests do).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use kube::{Client, Config};
use meridian_nameserver::rate_limit::DEFAULT_RESPONSES_PER_SECOND;
use meridian_nameserver::{GeoDb, NameServer, RateLimit, ServerConfig, ZoneNameServer};
use tokio::net::TcpListener;

use meridian_controllers::decide::health::DEFAULT_THRESHOLD_PERCENT;
use meridian_controllers::decide::probe_policy::ProbePolicyArgs;
use meridian_controllers::decide::silence::{
    DEFAULT_FLEET_BRAKE_PERCENT, DEFAULT_WITHDRAWAL_PERCENT,
};
use meridian_controllers::decide::zone_claims::DomainGrants;
use meridian_controllers::zones::provider_args::ProviderArgs;
use meridian_controllers::zones::zone_provider::{EmbeddedZones, ProviderCache};
use meridian_controllers::{
    Concurrency, Context, ControllerConfig, reconcile::dns_policy, reconcile::dns_record,
    zones::zone_mirror,
};

use crate::controller::gateway_placement::{AgentDelivery, AgentInstall, PlacementContext};
use crate::controller::{gateway_placement, key_copies, managed_zone, probe_headers, router_dns};
use crate::leader::{self, Election};
use crate::placement::AgentDns;
use crate::secondaries_args::SecondariesArgs;
use meridian_controllers::runtime::fence::{Fence, FenceLayer};
use meridian_controllers::zones::dnssec_keys::KeySource;

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Kubeconfig of the hub cluster; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// Address of the `/livez`, `/readyz` and `/metrics` endpoints.
    #[arg(long, env = "MERIDIAN_HEALTH_ADDR", default_value = "127.0.0.1:8080")]
    pub health_addr: SocketAddr,

    /// Address of the live, read-only view of zones, hosts, trees and recent changes (HTML);
    /// never the DNS address.
    #[arg(long, env = "MERIDIAN_VIEW_ADDR", default_value = "127.0.0.1:8088")]
    pub view_addr: SocketAddr,

    /// Answer `/metrics` and the view only to a bearer token whose identity may `get` the
    /// non-resource URL `/metrics` (the view: `/meridian/view`), asked of the API server
    /// (TokenReview and SubjectAccessReview); the probes stay open. The chart turns it on.
    #[arg(long, env = "MERIDIAN_HTTP_AUTH", default_value_t = false)]
    pub http_auth: bool,

    /// UDP and TCP address of the embedded nameserver (zones without a provider secret).
    #[arg(long, env = "MERIDIAN_DNS_ADDR", default_value = "127.0.0.1:5353")]
    pub dns_addr: SocketAddr,

    /// MaxMind-format database (GeoIP2/GeoLite2 Country or City) for GEO answers.
    #[arg(long, env = "MERIDIAN_GEOIP")]
    pub geoip: Option<PathBuf>,

    /// A name server of every embedded zone whose ManagedZone names none,
    /// `NAME[=ADDRESS[,ADDRESS]]` (repeatable; in the environment, space-separated): the
    /// addresses at which the Internet reaches the hub's and agents' nameservers. Its address
    /// is served in any zone the name is inside.
    #[arg(
        long = "ns",
        env = "MERIDIAN_NAME_SERVERS",
        value_name = "NAME[=ADDRESS]",
        value_delimiter = ' ',
        value_parser = ZoneNameServer::parse
    )]
    pub name_servers: Vec<ZoneNameServer>,

    /// Have the agents the hub installs answer DNS for the embedded zones too, on this address
    /// in their pods (e.g. `0.0.0.0:5353`), so a zone's name servers can span the hub and the
    /// spokes; they are then allowed to read the hub's DNSRecords and ManagedZones.
    #[arg(long, env = "MERIDIAN_AGENT_DNS_LISTEN")]
    pub agent_dns_listen: Option<SocketAddr>,

    /// UDP responses per second to one client prefix (IPv4 /24, IPv6 /56) before response
    /// rate limiting holds them back (every second one then goes out truncated, sending the
    /// client to TCP); 0 turns it off.
    #[arg(long, env = "MERIDIAN_DNS_RATE_LIMIT", default_value_t = DEFAULT_RESPONSES_PER_SECOND)]
    pub dns_rate_limit: u32,

    /// Transfers of the embedded zones to standard secondaries, and NOTIFY.
    #[command(flatten)]
    pub secondaries: SecondariesArgs,

    #[command(flatten)]
    pub providers: ProviderArgs,

    /// Seconds between looks at converged objects.
    #[arg(long, env = "MERIDIAN_RESYNC_SECONDS", default_value_t = 300)]
    pub resync_seconds: u64,

    /// Seconds a cluster that left a placement keeps its Gateway after leaving DNS.
    #[arg(long, env = "MERIDIAN_WITHDRAWAL_GRACE_SECONDS", default_value_t = 600)]
    pub withdrawal_grace_seconds: u64,

    /// Image of the agent the hub installs on placed clusters.
    #[arg(
        long,
        env = "MERIDIAN_AGENT_IMAGE",
        default_value = "ghcr.io/meridian-dev/meridian-agent:latest"
    )]
    pub agent_image: String,

    /// Secrets (`kubernetes.io/dockerconfigjson`) in the agent's namespace on each spoke that
    /// its pod pulls the image with (repeatable; comma-separated in the environment). An
    /// add-on agent also names OCM's `open-cluster-management-image-pull-credentials`.
    #[arg(
        long = "agent-image-pull-secret",
        env = "MERIDIAN_AGENT_IMAGE_PULL_SECRETS",
        value_delimiter = ','
    )]
    pub agent_image_pull_secrets: Vec<String>,

    /// The hub's API address as agents reach it; the address in the hub kubeconfig when unset.
    /// (`--agent-delivery work` only: an add-on agent's address is the one OCM's
    /// registration gave its cluster.)
    #[arg(long, env = "MERIDIAN_HUB_SERVER_URL")]
    pub hub_server_url: Option<String>,

    /// Who installs the agent on the spokes: `addon`, OCM's addon manager (an AddOnTemplate
    /// the hub writes; credentials from OCM's registration), or `work`, the hub itself (a
    /// ManifestWork per cluster with a token it mints: fleets without the addon manager).
    #[arg(long, env = "MERIDIAN_AGENT_DELIVERY", value_enum, default_value_t = Delivery::Addon)]
    pub agent_delivery: Delivery,

    /// `--agent-delivery addon`: Placements (`NAMESPACE/NAME`) installing the agent besides
    /// the clusters Gateways are placed on; repeatable. Without any, the add-on is installed
    /// only where the hub asks.
    #[arg(
        long = "addon-placement",
        env = "MERIDIAN_ADDON_PLACEMENTS",
        value_delimiter = ','
    )]
    pub addon_placements: Vec<crate::addon::AddonPlacement>,

    /// `--agent-delivery addon`: how a new agent reaches the placements' clusters: `all`, or
    /// `progressive[:N]` (N clusters at a time, each seen available before the next).
    #[arg(long, env = "MERIDIAN_ADDON_ROLLOUT", default_value = "progressive")]
    pub addon_rollout: crate::addon::Rollout,

    /// `--agent-delivery addon`: an AddOnDeploymentConfig (`NAMESPACE/NAME`) for every agent:
    /// image registries, proxy and its CA bundle, node placement, resources.
    #[arg(long, env = "MERIDIAN_ADDON_DEPLOYMENT_CONFIG")]
    pub addon_deployment_config: Option<crate::addon::AddonPlacement>,

    /// Seconds without a report after which a cluster is gone for DNS (agents report every 30 s).
    #[arg(
        long,
        env = "MERIDIAN_CLUSTER_HEARTBEAT_TIMEOUT_SECONDS",
        default_value_t = 120
    )]
    pub cluster_heartbeat_timeout_seconds: u64,

    /// `MultiClusterFailureThreshold`: the share (percent) of the clusters probing a leaf that
    /// must see it failing before it leaves DNS; one failing vantage point of three is not enough.
    #[arg(
        long,
        env = "MERIDIAN_FAILURE_THRESHOLD_PERCENT",
        default_value_t = DEFAULT_THRESHOLD_PERCENT,
        value_parser = clap::value_parser!(u32).range(1..=100)
    )]
    pub failure_threshold_percent: u32,

    /// The fleet brake: when more than this share (percent) of the recently heard clusters go
    /// quiet together (unheard for half the heartbeat timeout, each within one timeout of the
    /// next), the hub assumes it is the one cut off and withdraws nothing for silence until
    /// they are heard again (100 turns it off).
    #[arg(
        long,
        env = "MERIDIAN_FLEET_BRAKE_PERCENT",
        default_value_t = DEFAULT_FLEET_BRAKE_PERCENT,
        value_parser = clap::value_parser!(u32).range(1..=100)
    )]
    pub fleet_brake_percent: u32,

    /// The share (percent) of a host's clusters that silence may withdraw per heartbeat
    /// timeout, the earliest silent first (never below one cluster). Probe verdicts are not
    /// limited.
    #[arg(
        long,
        env = "MERIDIAN_SILENCE_WITHDRAWAL_PERCENT",
        default_value_t = DEFAULT_WITHDRAWAL_PERCENT,
        value_parser = clap::value_parser!(u32).range(1..=100)
    )]
    pub silence_withdrawal_percent: u32,

    /// DNSPolicies reconciled at once. With `--record-concurrency` this is most of the API
    /// server's seats at a cold start, where every policy is due together.
    #[arg(long, env = "MERIDIAN_POLICY_CONCURRENCY", default_value_t = Concurrency::default().policies,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub policy_concurrency: u16,

    /// DNSRecords reconciled (published) at once.
    #[arg(long, env = "MERIDIAN_RECORD_CONCURRENCY", default_value_t = Concurrency::default().records,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub record_concurrency: u16,

    /// Gateways placed at once (their works and agent installs, most of a new fleet's writes:
    /// fewer than DNS takes, so answers do not wait behind them).
    #[arg(long, env = "MERIDIAN_PLACEMENT_CONCURRENCY", default_value_t = Concurrency::default().placement,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub placement_concurrency: u16,

    /// Reconciles at once for each of the light controllers (zone status, probe header copies,
    /// router shards).
    #[arg(long, env = "MERIDIAN_LIGHT_CONCURRENCY", default_value_t = Concurrency::default().light,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub light_concurrency: u16,

    /// Namespace of the Lease that makes one hub replica the only writer.
    #[arg(long, env = "MERIDIAN_LEASE_NAMESPACE", default_value = "kube-system")]
    pub lease_namespace: String,

    /// Seconds a hub replica's Lease lasts without renewal.
    #[arg(long, env = "MERIDIAN_LEASE_SECONDS", default_value_t = 15)]
    pub lease_seconds: u64,

    /// Seconds a stopping replica goes on answering DNS after it reports unready, so that
    /// Services stop sending it queries before it stops answering them.
    #[arg(long, env = "MERIDIAN_DRAIN_SECONDS", default_value_t = 5)]
    pub drain_seconds: u64,

    /// Domain suffixes a namespace may claim with ManagedZones, `NAMESPACE=SUFFIX[,SUFFIX...]`,
    /// repeated per namespace (Helm value `tenancy.domainGrants`). Once any is given, a
    /// namespace claims only names under its own suffixes; without any, any namespace may claim
    /// any domain no older zone holds. See docs/security.md.
    #[arg(
        long = "domain-grant",
        env = "MERIDIAN_DOMAIN_GRANTS",
        value_delimiter = ';'
    )]
    pub domain_grants: Vec<String>,

    /// The owner ID the hub publishes under at every provider (with each record's namespace and
    /// name). Set it when hubs may be rebuilt from their manifests, or when more than one hub
    /// shares a zone; unset, the one kept in the ConfigMap `meridian-owner-id`, else the hub
    /// cluster's `kube-system` UID (see docs/hub.md, "Restores and rebuilds").
    #[arg(long, env = "MERIDIAN_OWNER_ID")]
    pub owner_id: Option<String>,

    /// Also write the Gateway condition in Kuadrant's domain (`kuadrant.io/DNSPolicyAffected`)
    /// beside Meridian's (`meridian.dev/DNSPolicyAffected`), as releases before Gateway API v1.5
    /// status did, for tools written for multicluster-gateway-controller. Off by default:
    /// Kuadrant writes that condition too, and two controllers writing one type on one Gateway
    /// fight over it.
    #[arg(
        long,
        env = "MERIDIAN_KUADRANT_GATEWAY_CONDITION",
        default_value_t = false,
        action = clap::ArgAction::Set,
        value_name = "BOOL"
    )]
    pub kuadrant_gateway_condition: bool,

    #[command(flatten)]
    pub probes: ProbePolicyArgs,
}

/// `--agent-delivery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Delivery {
    Addon,
    Work,
}

impl RunArgs {
    /// Defaults for running against `kubeconfig` on loopback ports chosen by the system (tests,
    /// the demo).
    pub fn local(kubeconfig: &std::path::Path) -> Self {
        RunArgs {
            kubeconfig: Some(kubeconfig.to_path_buf()),
            health_addr: "127.0.0.1:0".parse().expect("valid address"),
            view_addr: "127.0.0.1:0".parse().expect("valid address"),
            http_auth: false,
            dns_addr: "127.0.0.1:0".parse().expect("valid address"),
            geoip: None,
            name_servers: Vec::new(),
            agent_dns_listen: None,
            // Tests and the demo query from loopback as fast as they like.
            dns_rate_limit: 0,
            secondaries: SecondariesArgs::default(),
            providers: ProviderArgs::default(),
            resync_seconds: 300,
            withdrawal_grace_seconds: 600,
            agent_image: "ghcr.io/meridian-dev/meridian-agent:latest".into(),
            agent_image_pull_secrets: Vec::new(),
            hub_server_url: None,
            // Fleets written by hand, without OCM's addon manager.
            agent_delivery: Delivery::Work,
            addon_placements: Vec::new(),
            addon_rollout: crate::addon::Rollout::Progressive { max_concurrency: 1 },
            addon_deployment_config: None,
            lease_namespace: "kube-system".into(),
            lease_seconds: 15,
            drain_seconds: 0,
            domain_grants: Vec::new(),
            owner_id: None,
            kuadrant_gateway_condition: false,
            probes: ProbePolicyArgs::default(),
            cluster_heartbeat_timeout_seconds: 120,
            failure_threshold_percent: DEFAULT_THRESHOLD_PERCENT,
            fleet_brake_percent: DEFAULT_FLEET_BRAKE_PERCENT,
            silence_withdrawal_percent: DEFAULT_WITHDRAWAL_PERCENT,
            policy_concurrency: Concurrency::default().policies,
            record_concurrency: Concurrency::default().records,
            placement_concurrency: Concurrency::default().placement,
            light_concurrency: Concurrency::default().light,
        }
    }

    fn concurrency(&self) -> Concurrency {
        Concurrency {
            policies: self.policy_concurrency,
            records: self.record_concurrency,
            placement: self.placement_concurrency,
            light: self.light_concurrency,
        }
    }
}

pub fn run(args: RunArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let mut hub = RunningHub::start(&args).await?;
        // Scripts and the demo read these lines.
        // Whoever started the hub may stop reading once it has the addresses: a closed
        // standard output is no reason to stop serving.
        {
            use std::io::Write as _;
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "nameserver: {}", hub.nameserver);
            let _ = writeln!(out, "health: {}", hub.health);
            let _ = writeln!(out, "view: http://{}/", hub.view);
            let _ = out.flush();
        }
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
            _ = hub.stopped() => {
                // A lost Lease makes the replica a standby; the controllers end only when
                // asked to, so this is not expected.
                anyhow::bail!("the hub's controllers ended");
            }
        }
        tracing::info!("shutting down: unready now, answering DNS while the Services catch up");
        let drain = std::time::Duration::from_secs(args.drain_seconds);
        hub.ready.store(false, Ordering::SeqCst);
        // Stopping first hands the Lease over at once; the zones stay as they are meanwhile.
        hub.stop_controllers().await;
        tokio::time::sleep(drain).await;
        hub.stop().await;
        Ok(())
    })
}

pub(crate) async fn client_config(kubeconfig: Option<&PathBuf>) -> anyhow::Result<Config> {
    Ok(match kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
            Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?
        }
        None => Config::infer().await?,
    })
}

/// PEM of the CA certificates a client trusts (DER in kube's config).
fn ca_pem(config: &Config) -> String {
    use base64::Engine;
    config
        .root_cert
        .iter()
        .flatten()
        .map(|der| {
            let body = base64::engine::general_purpose::STANDARD.encode(der);
            let lines: Vec<&str> = body
                .as_bytes()
                .chunks(64)
                .map(|c| std::str::from_utf8(c).expect("base64 is ASCII"))
                .collect();
            format!(
                "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
                lines.join("\n")
            )
        })
        .collect()
}

/// A hub running in this process: controllers, nameserver and health endpoints.
#[derive(Debug)]
pub struct RunningHub {
    pub nameserver: SocketAddr,
    pub health: SocketAddr,
    /// The live view's address.
    pub view: SocketAddr,
    pub context: Arc<Context>,
    leading: Arc<AtomicBool>,
    /// Whether this replica answers DNS with the current zones (`/readyz`).
    ready: Arc<AtomicBool>,
    stop: tokio::sync::watch::Sender<bool>,
    /// Taken once it has ended (a JoinHandle must not be awaited twice).
    controllers: Option<tokio::task::JoinHandle<()>>,
    health_server: tokio::task::JoinHandle<()>,
    view_server: tokio::task::JoinHandle<()>,
}

impl RunningHub {
    pub async fn start(args: &RunArgs) -> anyhow::Result<Self> {
        // kube and the AWS SDK bring two rustls crypto backends; pick one before any TLS.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client_config = client_config(args.kubeconfig.as_ref()).await?;
        let probe_policy = args.probes.policy().map_err(|e| anyhow::anyhow!(e))?;
        let providers = args.providers.settings().map_err(|e| anyhow::anyhow!(e))?;
        if let Some(listen) = args.agent_dns_listen
            && listen.port() < 1024
        {
            anyhow::bail!(
                "--agent-dns-listen {listen}: the agent runs as a non-root user (Pod Security `restricted`), so its DNS port must be 1024 or above; expose it on 53 through a Service"
            );
        }
        let agent = AgentInstall {
            delivery: match args.agent_delivery {
                Delivery::Work => AgentDelivery::Work,
                Delivery::Addon => AgentDelivery::AddOn(crate::addon::AddonInstall {
                    placements: args.addon_placements.clone(),
                    rollout: args.addon_rollout,
                    deployment_config: args.addon_deployment_config.clone(),
                }),
            },
            agent_args: [
                probe_policy.agent_args(),
                vec!["--hub-namespace".into(), args.lease_namespace.clone()],
            ]
            .concat(),
            server_url: args.hub_server_url.clone().unwrap_or_else(|| {
                client_config
                    .cluster_url
                    .to_string()
                    .trim_end_matches('/')
                    .to_string()
            }),
            ca_pem: ca_pem(&client_config),
            image: crate::placement::AgentImage {
                reference: args.agent_image.clone(),
                pull_secrets: args.agent_image_pull_secrets.clone(),
            },
            dns: args.agent_dns_listen.map(|listen| AgentDns {
                listen,
                name_servers: args.name_servers.clone(),
            }),
        };
        let fenced_config = client_config.clone();
        let client = Client::try_from(client_config)?;
        let (owner_id, source) =
            crate::owner_id::resolve(&client, &args.lease_namespace, args.owner_id.as_deref())
                .await?;
        tracing::info!(owner_id = %owner_id, ?source, "publishing under this owner ID");
        let geo = args.geoip.as_deref().map(GeoDb::open).transpose()?;
        let open_files = crate::open_files::raise();
        let server = NameServer::start(
            args.dns_addr,
            args.secondaries.apply(ServerConfig {
                geo,
                rate_limit: RateLimit::per_second(args.dns_rate_limit),
                max_tcp_connections: crate::open_files::dns_tcp_connections(
                    open_files,
                    meridian_nameserver::DEFAULT_TCP_CONNECTIONS,
                ),
                ..ServerConfig::default()
            })?,
        )
        .await?;
        let nameserver = server.local_addr();
        let embedded = Arc::new(EmbeddedZones::new(
            Arc::new(server),
            args.name_servers.clone(),
        ));
        let config = ControllerConfig {
            resync: std::time::Duration::from_secs(args.resync_seconds.max(1)),
            heartbeat_timeout: std::time::Duration::from_secs(
                args.cluster_heartbeat_timeout_seconds.max(2),
            ),
            failure_threshold_percent: args.failure_threshold_percent,
            fleet_brake_percent: args.fleet_brake_percent,
            silence_withdrawal_percent: args.silence_withdrawal_percent,
            concurrency: args.concurrency(),
            domain_grants: DomainGrants::parse(&args.domain_grants)
                .map_err(|e| anyhow::anyhow!("--domain-grant: {e}"))?,
            probe_policy: probe_policy.clone(),
            hub_namespace: Some(args.lease_namespace.clone()),
            hub_owner: Some(owner_id),
            kuadrant_gateway_condition: args.kuadrant_gateway_condition,
            ..ControllerConfig::default()
        };
        // The controllers write through a client that checks the fence before every write;
        // the election keeps its own, unfenced.
        let fence = Arc::new(Fence::closed());
        let fenced_client = kube::client::ClientBuilder::try_from(fenced_config)?
            .with_layer(&FenceLayer(fence.clone()))
            .build();
        let mut ctx = Context::new(
            fenced_client,
            ProviderCache::new(embedded).with_settings(providers),
            config,
        );
        ctx.fence = fence;
        let ctx = Arc::new(ctx);
        let placement = Arc::new(PlacementContext {
            shared: ctx.clone(),
            agent: Some(agent),
            withdrawal_grace: std::time::Duration::from_secs(args.withdrawal_grace_seconds),
            agent_installs: Default::default(),
            gone: Default::default(),
        });
        let ready = Arc::new(AtomicBool::new(false));
        let health_listener = TcpListener::bind(args.health_addr).await?;
        let health = health_listener.local_addr()?;
        let leading = Arc::new(AtomicBool::new(false));
        // Asking who is asking is no write of the leader's: unfenced, so a standby answers
        // /metrics too (the fence refused its reviews, and a standby answered 503).
        let authorizer = args
            .http_auth
            .then(|| Arc::new(crate::http_auth::Authorizer::new(client.clone())));
        let guard = |url_for: fn(&str) -> Option<&'static str>| {
            authorizer.clone().map(|authorizer| crate::http::Guard {
                authorizer,
                url_for,
            })
        };
        let health_server = tokio::spawn(serve_health(
            health_listener,
            guard(|path| {
                (path.split('?').next() == Some("/metrics"))
                    .then_some(crate::http_auth::METRICS_URL)
            }),
            ctx.clone(),
            ready.clone(),
            leading.clone(),
        ));

        let view_listener = TcpListener::bind(args.view_addr).await?;
        let view = view_listener.local_addr()?;
        let view_server = tokio::spawn(crate::view::serve(
            view_listener,
            guard(|_| Some(crate::http_auth::VIEW_URL)),
            ctx.clone(),
        ));

        let (stop, stop_rx) = tokio::sync::watch::channel(false);
        let election = Election {
            namespace: args.lease_namespace.clone(),
            identity: format!(
                "{}-{}",
                std::env::var("HOSTNAME").unwrap_or_else(|_| "meridian-hub".into()),
                rand::random::<u32>()
            ),
            lease_duration: std::time::Duration::from_secs(args.lease_seconds.max(3)),
        };
        let controllers = tokio::spawn(lead_and_run(
            client,
            placement,
            election,
            stop_rx,
            ready.clone(),
            leading.clone(),
        ));
        tracing::info!(%nameserver, %health, %view, "hub controllers running");
        Ok(RunningHub {
            nameserver,
            health,
            view,
            context: ctx,
            leading,
            ready,
            stop,
            controllers: Some(controllers),
            health_server,
            view_server,
        })
    }

    /// Whether this replica holds the Lease and runs the controllers.
    pub fn is_leading(&self) -> bool {
        self.leading.load(Ordering::SeqCst)
    }

    /// Resolves when the controllers have stopped (asked to: a lost Lease makes the replica a
    /// standby instead).
    pub async fn stopped(&mut self) {
        if let Some(controllers) = self.controllers.as_mut() {
            let _ = controllers.await;
            self.controllers = None;
        }
    }

    /// Lets running reconciles finish and stops the controllers (a leader releases its Lease);
    /// the nameserver and the health endpoints go on.
    pub async fn stop_controllers(&mut self) {
        let _ = self.stop.send(true);
        self.stopped().await;
    }

    /// Whether this replica answers DNS from current zones: mirrored from the DNSRecords as a
    /// standby, published itself as the leader.
    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::SeqCst)
    }

    /// Lets running reconciles finish, then stops everything.
    pub async fn stop(mut self) {
        self.stop_controllers().await;
        self.health_server.abort();
        self.view_server.abort();
        let _ = self.health_server.await;
        let _ = self.view_server.await;
    }

    /// Stops at once, as a crash would (for tests of restarts mid-publish).
    pub fn abort(self) {
        if let Some(controllers) = &self.controllers {
            controllers.abort();
        }
        self.health_server.abort();
        self.view_server.abort();
    }
}

/// Stands by (mirroring the embedded zones from the DNSRecords) until this replica takes the
/// Lease, then runs the controllers until asked to stop or the Lease is lost; a lost Lease
/// makes it a standby again, answering from the zones as they are, never from empty ones (a
/// restart would start empty and could not fill them while the API server is away). The
/// watch caches fill from the start, on every replica, so a new leader starts warm.
async fn lead_and_run(
    client: Client,
    placement: Arc<PlacementContext>,
    election: Election,
    stop_rx: tokio::sync::watch::Receiver<bool>,
    ready: Arc<AtomicBool>,
    leading: Arc<AtomicBool>,
) {
    let ctx = placement.shared.clone();
    let caches = {
        let (ctx, client, stop_rx) = (ctx.clone(), client.clone(), stop_rx.clone());
        tokio::spawn(async move {
            tokio::select! {
                _ = ctx.caches.reflect(client) => {}
                _ = stopped(stop_rx) => {}
            }
        })
    };
    let embedded = ctx
        .providers
        .embedded_zones()
        .expect("a hub serves embedded zones")
        .clone();
    loop {
        // Every replica answers DNS: until it leads, its embedded zones are mirrored from the
        // DNSRecords, and it is ready once they are.
        let (synced, mut mirror_synced) = tokio::sync::watch::channel(false);
        let mirror = {
            let ready = ready.clone();
            tokio::spawn(zone_mirror::run(
                ctx.caches.clone(),
                embedded.clone(),
                KeySource::HubSecrets {
                    namespace: election.namespace.clone(),
                },
                ctx.config.domain_grants.clone(),
                move || {
                    ready.store(true, Ordering::SeqCst);
                    let _ = synced.send(true);
                },
                stopped(stop_rx.clone()),
            ))
        };
        let led = async {
            leader::acquire(&client, &election, &ctx.fence).await;
            // A new leader starts from mirrored zones, so it never answers from empty ones.
            let _ = mirror_synced.wait_for(|synced| *synced).await;
        };
        tokio::select! {
            _ = led => {}
            _ = stopped(stop_rx.clone()) => {
                ctx.fence.revoke();
                let _ = mirror.await;
                let _ = caches.await;
                return;
            }
        }
        mirror.abort();
        let _ = mirror.await;
        // Whatever the mirror staged before it stopped is served before the controllers plan
        // against those records.
        embedded.mirror_stopped().await;
        leading.store(true, Ordering::SeqCst);
        ctx.metrics.leading(true);
        tracing::info!(identity = %election.identity, "holding the hub Lease; starting the controllers");
        let lost = lead(&client, &placement, &election, stop_rx.clone()).await;
        ctx.fence.revoke();
        leading.store(false, Ordering::SeqCst);
        ctx.metrics.leading(false);
        if !lost {
            break;
        }
        tracing::warn!("lost the hub Lease: standing by, answering DNS from the zones as they are");
    }
    ready.store(false, Ordering::SeqCst);
    // Every reconcile has finished: hand the Lease over now (a rolling restart's new replica
    // leads within one look instead of a lease duration). A lost Lease is not ours to release.
    if let Err(error) = leader::release(&client, &election).await {
        tracing::warn!(%error, "could not release the hub Lease; it expires instead");
    }
    let _ = caches.await;
}

/// Resolves once `stop` is set.
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// Runs the controllers while the Lease is held; returns whether it was lost (rather than
/// the replica asked to stop).
async fn lead(
    client: &Client,
    placement: &Arc<PlacementContext>,
    election: &Election,
    stop_rx: tokio::sync::watch::Receiver<bool>,
) -> bool {
    let ctx = placement.shared.clone();
    let agents_serve_dns = placement
        .agent
        .as_ref()
        .is_some_and(|agent| agent.dns.is_some());
    let (step_down, step_down_rx) = tokio::sync::watch::channel(false);
    let stop_on = || {
        let (stop_rx, step_down_rx) = (stop_rx.clone(), step_down_rx.clone());
        async move {
            tokio::select! {
                _ = stopped(stop_rx) => {}
                _ = stopped(step_down_rx) => {}
            }
        }
    };
    let hold = async {
        tokio::select! {
            _ = leader::hold(client, election, &ctx.fence) => {
                // Lost: the fence is closed already; stop the controllers.
                let _ = step_down.send(true);
            }
            _ = stopped(stop_rx.clone()) => {}
        }
    };
    tokio::join!(
        dns_policy::run(ctx.clone(), stop_on()),
        dns_record::run(ctx.clone(), stop_on()),
        gateway_placement::run(placement.clone(), stop_on()),
        probe_headers::run(ctx.clone(), stop_on()),
        async {
            // Keys go to the agents only when they serve DNS.
            if agents_serve_dns {
                key_copies::run(ctx.clone(), stop_on()).await;
            }
        },
        router_dns::run(ctx.clone(), stop_on()),
        managed_zone::run(ctx.clone(), stop_on()),
        hold,
    );
    *step_down.borrow()
}

/// `/livez`, `/readyz` (answering DNS from current zones), `/leaderz` (holding the Lease) and
/// `/metrics` (behind `guard`) over plain HTTP/1.1.
async fn serve_health(
    listener: TcpListener,
    guard: Option<crate::http::Guard>,
    ctx: Arc<Context>,
    ready: Arc<AtomicBool>,
    leading: Arc<AtomicBool>,
) {
    crate::http::serve(listener, guard, move |path| {
        let (status, body) = match path {
            "/livez" => ("200 OK", "ok\n".to_string()),
            "/readyz" if ready.load(Ordering::SeqCst) => ("200 OK", "ok\n".to_string()),
            "/readyz" => ("503 Service Unavailable", "not ready\n".to_string()),
            "/leaderz" if leading.load(Ordering::SeqCst) => ("200 OK", "leading\n".to_string()),
            "/leaderz" => ("503 Service Unavailable", "standby\n".to_string()),
            "/metrics" => ("200 OK", metrics(&ctx)),
            _ => ("404 Not Found", "not found\n".to_string()),
        };
        crate::http::Response::text(status, body)
    })
    .await;
}

/// Everything `/metrics` says: the controllers' counters, the fleet's gauges as the live view
/// sees it, and the nameserver's answers.
fn metrics(ctx: &Context) -> String {
    let mut metrics = ctx.metrics.render();
    metrics.push_str(&meridian_controllers::runtime::metrics::render_undecodable(
        &ctx.caches.undecodable(),
    ));
    let snapshot = crate::insight::FleetSnapshot::from_caches(
        &ctx.caches,
        (ctx.clock)(),
        ctx.config.heartbeat_timeout,
    );
    metrics.push_str(&crate::insight::render_gauges(&crate::insight::host_views(
        &snapshot, None,
    )));
    if let Some(embedded) = ctx.providers.embedded_zones() {
        metrics.push_str(&embedded.server().stats().render());
        metrics.push_str(&embedded.render_metrics());
    }
    metrics
}
