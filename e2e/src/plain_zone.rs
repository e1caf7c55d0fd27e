//! The example's zone held by a server of plain records: PowerDNS, written through external-dns's
//! webhook server, set up the way a platform admin would before any tenant object exists (as
//! another field manager, so the example's own objects never take it over). Optionally with a
//! routing delegate: an embedded zone below it that Meridian serves, for what PowerDNS cannot
//! hold (GEO, weights, health-checked answers).

use std::net::IpAddr;

use kube::Client;
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_testkit::fixtures;
use meridian_testkit::powerdns::PowerDns;
use meridian_testkit::webhook_server::WebhookServer;
use serde_json::json;

use crate::example::{HOST, NAMESPACE, ZONE_DOMAIN, dig_short};
use crate::{DEFAULT_PATIENCE, Error, ensure_namespace, eventually};

/// The routing delegate's ManagedZone and domain, and its name server's name.
pub const DELEGATE: &str = "klb";
pub const DELEGATE_DOMAIN: &str = "klb.example.com";
pub const DELEGATE_NAME_SERVER: &str = "ns1.klb.example.com";
/// What the example's host is a CNAME to in PowerDNS once its tree moved into the delegate.
pub const DELEGATED_HOST: &str = "klb.api.klb.example.com";

/// PowerDNS and the webhook in front of it, running while this lives.
#[derive(Debug)]
pub struct PlainZone {
    pub pdns: PowerDns,
    pub webhook: WebhookServer,
    /// Where the hub serves the routing delegate (port 53), if the zone has one.
    pub delegate_server: Option<IpAddr>,
}

impl PlainZone {
    /// PowerDNS for the example's domain behind the webhook, and on `hub` the admin's webhook
    /// Secret and ManagedZone `example` at it.
    pub async fn start(hub: &Client) -> Result<Self, Error> {
        Self::start_with(hub, None).await
    }

    /// As [`Self::start`], the zone delegating what PowerDNS cannot hold to the embedded
    /// ManagedZone [`DELEGATE`], whose name server is the hub's, at `server` port 53 (where a
    /// resolver following PowerDNS's referral asks). Each test needs an address of its own.
    pub async fn start_delegating(hub: &Client, server: IpAddr) -> Result<Self, Error> {
        Self::start_with(hub, Some(server)).await
    }

    async fn start_with(hub: &Client, delegate_server: Option<IpAddr>) -> Result<Self, Error> {
        let pdns = PowerDns::start(ZONE_DOMAIN)
            .await
            .map_err(|e| Error::Component(format!("starting PowerDNS: {e}")))?;
        let webhook = WebhookServer::powerdns(&pdns, ZONE_DOMAIN)
            .await
            .map_err(|e| Error::Component(format!("starting external-dns's webhook: {e}")))?;
        ensure_namespace(hub, NAMESPACE).await?;
        let admin = PatchParams::apply("platform-admin").force();
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(hub.clone(), NAMESPACE)
            .patch(
                "webhook",
                &admin,
                &Patch::Apply(json!({
                    "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/webhook",
                    "metadata": { "name": "webhook", "namespace": NAMESPACE },
                    "stringData": { "url": webhook.url },
                })),
            )
            .await?;
        let zones = Api::<ManagedZone>::namespaced(hub.clone(), NAMESPACE);
        let mut parent = fixtures::managed_zone(NAMESPACE, "example", ZONE_DOMAIN)
            .at_provider("webhook")
            .json();
        if let Some(server) = delegate_server {
            parent["spec"]["routingDelegate"] = json!(DELEGATE);
            let mut delegate = fixtures::managed_zone(NAMESPACE, DELEGATE, DELEGATE_DOMAIN).json();
            delegate["spec"]["nameServers"] =
                json!([{ "name": DELEGATE_NAME_SERVER, "addresses": [server.to_string()] }]);
            // The tests change a whole tree at once (GEO to weights): no plan is held for
            // approval.
            delegate["metadata"]["annotations"] = json!({
                meridian_controllers::decide::plan_guard::THRESHOLD_ANNOTATION: "100"
            });
            zones
                .patch(DELEGATE, &admin, &Patch::Apply(delegate))
                .await?;
        }
        zones
            .patch("example", &admin, &Patch::Apply(parent))
            .await?;
        Ok(PlainZone {
            pdns,
            webhook,
            delegate_server,
        })
    }

    /// The hub's flags this zone needs: the webhook (on this host, as a sidecar of the hub
    /// would be) allowed, for the example's namespace alone, and the delegate's server address.
    pub fn configure(&self, args: &mut meridian_hub::run_command::RunArgs) {
        args.providers.webhook_allow = vec!["127.0.0.1/32".into()];
        args.providers.ambient_identity_namespaces = vec![NAMESPACE.into()];
        if let Some(server) = self.delegate_server {
            args.dns_addr = std::net::SocketAddr::new(server, 53);
        }
    }

    /// The record sets PowerDNS holds for the zone, as its API lists them (comparable: a
    /// write shows, the serial aside).
    pub async fn records(&self) -> Result<serde_json::Value, Error> {
        let path = format!("/api/v1/servers/localhost/zones/{ZONE_DOMAIN}.");
        // A blocking exchange: off the runtime's turn (the tests run multi-threaded).
        let (status, body) =
            tokio::task::block_in_place(|| self.pdns.get(&path)).map_err(Error::Component)?;
        let mut zone: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| Error::Component(format!("PowerDNS's zone ({status}): {e}: {body}")))?;
        let mut rrsets = zone["rrsets"].take();
        if let Some(sets) = rrsets.as_array_mut() {
            sets.sort_by_key(|set| (set["name"].to_string(), set["type"].to_string()));
        }
        Ok(rrsets)
    }

    /// Waits until PowerDNS holds the example host's CNAME into the delegate and refers the
    /// delegate to the hub's server, and that server answers it: before then a resolver would
    /// cache the host's absence for the zone's negative TTL (an hour). On a timeout the error
    /// carries the DNSRecords' conditions and the webhook's log.
    pub async fn wait_for_delegation(&self, hub: &Client) -> Result<(), Error> {
        let server = self.pdns.dns;
        let delegate_server = self
            .delegate_server
            .map(|address| std::net::SocketAddr::new(address, 53))
            .ok_or_else(|| Error::Component("the zone has no routing delegate".into()))?;
        let published = eventually(
            "PowerDNS holds the host's CNAME and refers the delegate to the hub, which answers",
            DEFAULT_PATIENCE,
            || async move {
                // dig blocks: off the runtime, which also runs the hub and agents.
                let published = tokio::task::spawn_blocking(move || {
                    let cname = dig_short(server, HOST, "CNAME");
                    let referral = std::process::Command::new("dig")
                        .arg(format!("@{}", server.ip()))
                        .args(["-p", &server.port().to_string(), "+norecurse", "+time=2"])
                        .args([DELEGATED_HOST, "A"])
                        .output()
                        .map(|output| String::from_utf8_lossy(&output.stdout).into_owned())
                        .unwrap_or_default();
                    let answered = dig_short(delegate_server, DELEGATED_HOST, "A");
                    cname == [format!("{DELEGATED_HOST}.")]
                        && referral.contains("AUTHORITY: 1")
                        && referral.contains(&format!("{DELEGATE_NAME_SERVER}."))
                        && referral.contains(&delegate_server.ip().to_string())
                        && !answered.is_empty()
                })
                .await
                .unwrap_or(false);
                Ok(published.then_some(()))
            },
        )
        .await;
        let Err(error) = published else {
            return Ok(());
        };
        let mut state = Vec::new();
        for record in Api::<DNSRecord>::namespaced(hub.clone(), NAMESPACE)
            .list(&Default::default())
            .await?
        {
            state.push(format!(
                "DNSRecord {}: {:?}",
                record.name_any(),
                record.status.map(|s| s.conditions)
            ));
        }
        let log = self.webhook.log();
        state.extend(
            log.lines()
                .filter(|l| !l.contains("level=debug"))
                .take(80)
                .map(|line| format!("external-dns: {line}")),
        );
        Err(Error::Component(format!("{error}; {}", state.join("\n"))))
    }
}
