//! external-dns, built from its Go module by `e2e/testbed/external-dns.sh`, run against a test
//! bed control plane (its `crd` source: DNSEndpoint objects) and a real zone (BIND through
//! RFC2136, or moto through Route53), for the tests of sharing a zone with it.
//!
//! Each [`ExternalDns::sync_once`] is one `external-dns --once` run: one full read of the
//! sources and the zone and one change batch, so a test steps both tools in a known order.

use std::path::{Path, PathBuf};
use std::process::Stdio;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::discovery::ApiResource;
use meridian_dns::model::Endpoint;
use meridian_dns::plan::Registry;
use serde_json::json;

use crate::{Error, free_loopback_port, install_crds, load_crds};

/// Where `make test` puts external-dns and its CRD (`e2e/testbed/external-dns.sh --print-dir`).
pub const EXTERNAL_DNS_DIR_ENV: &str = "MERIDIAN_EXTERNAL_DNS_DIR";

/// The zone external-dns writes to, and how.
#[derive(Debug, Clone)]
pub enum ExternalDnsZone {
    /// An RFC2136 server with a TSIG key, read by AXFR.
    Rfc2136 {
        server: std::net::SocketAddr,
        zone: String,
        key_name: String,
        algorithm: String,
        secret: String,
    },
    /// Route53 at `endpoint` (moto), with moto's credentials.
    Route53 { endpoint: String, zone: String },
}

impl ExternalDnsZone {
    /// The zone of an RFC2136 server as Meridian's provider reaches it (same server and key).
    pub fn rfc2136(config: &meridian_providers::rfc2136::Rfc2136Config) -> Self {
        ExternalDnsZone::Rfc2136 {
            server: config.server,
            zone: config.zone.clone(),
            key_name: config.key_name.clone(),
            algorithm: config.algorithm.clone(),
            secret: config.secret.clone(),
        }
    }
}

/// One external-dns configuration: its owner ID and registry flags.
#[derive(Debug, Clone)]
pub struct ExternalDns {
    binary: PathBuf,
    crd_dir: PathBuf,
    /// `--txt-owner-id`.
    pub owner: String,
    /// More flags, such as `--txt-prefix=…` or `--txt-suffix=…`.
    pub flags: Vec<String>,
}

impl ExternalDns {
    /// external-dns as built for the test bed, owning records as `owner`.
    pub fn locate(owner: &str) -> Result<Self, Error> {
        let dir = crate::assets::testbed_dir(EXTERNAL_DNS_DIR_ENV, "e2e/testbed/external-dns.sh")?;
        let binary = dir.join("external-dns");
        if !binary.exists() {
            return Err(Error::MissingAsset {
                path: binary,
                hint: "external-dns (run `make testbed`)",
            });
        }
        Ok(ExternalDns {
            binary,
            crd_dir: dir,
            owner: owner.into(),
            flags: Vec::new(),
        })
    }

    /// The same external-dns with more flags.
    pub fn with_flags<S: Into<String>>(mut self, flags: impl IntoIterator<Item = S>) -> Self {
        self.flags.extend(flags.into_iter().map(Into::into));
        self
    }

    /// Installs the DNSEndpoint CRD of external-dns's `crd` source.
    pub async fn install_crd(&self, client: &Client) -> Result<(), Error> {
        install_crds(client, &load_crds(&self.crd_dir)?).await
    }

    /// One synchronisation (`--once`, policy `sync`) of the DNSEndpoints on the control plane
    /// of `kubeconfig` into `zone`; returns what it logged. Fails when external-dns does.
    pub async fn sync_once(
        &self,
        kubeconfig: &Path,
        zone: &ExternalDnsZone,
    ) -> Result<String, Error> {
        let mut command = tokio::process::Command::new("setpriv");
        command
            .args(["--pdeathsig", "KILL", "--"])
            .arg(&self.binary)
            .arg(format!("--kubeconfig={}", kubeconfig.display()))
            .args([
                "--source=crd",
                "--registry=txt",
                "--policy=sync",
                "--once",
                "--log-level=debug",
                "--interval=1s",
            ])
            .arg(format!("--txt-owner-id={}", self.owner))
            // Its health and metrics server: on a free port, as several run at once.
            .arg(format!(
                "--metrics-address=127.0.0.1:{}",
                free_loopback_port()?
            ))
            .args(&self.flags)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        match zone {
            ExternalDnsZone::Rfc2136 {
                server,
                zone,
                key_name,
                algorithm,
                secret,
            } => {
                command.args([
                    "--provider=rfc2136".to_string(),
                    format!("--rfc2136-host={}", server.ip()),
                    format!("--rfc2136-port={}", server.port()),
                    format!("--rfc2136-zone={zone}"),
                    format!("--domain-filter={zone}"),
                    format!("--rfc2136-tsig-keyname={key_name}"),
                    format!("--rfc2136-tsig-secret={secret}"),
                    format!("--rfc2136-tsig-secret-alg={algorithm}"),
                    "--rfc2136-tsig-axfr".to_string(),
                ]);
            }
            ExternalDnsZone::Route53 { endpoint, zone } => {
                command
                    .args([
                        "--provider=aws".to_string(),
                        format!("--domain-filter={zone}"),
                    ])
                    .env("AWS_ENDPOINT_URL", endpoint)
                    .env("AWS_ACCESS_KEY_ID", "testing")
                    .env("AWS_SECRET_ACCESS_KEY", "testing")
                    .env("AWS_REGION", "us-east-1")
                    .env("AWS_EC2_METADATA_DISABLED", "true");
            }
        }
        let output = command
            .output()
            .await
            .map_err(Error::io(format!("running {}", self.binary.display())))?;
        let log = String::from_utf8_lossy(&output.stderr).into_owned()
            + &String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(Error::Component(format!(
                "external-dns --once failed ({}):\n{log}",
                output.status
            )));
        }
        Ok(log)
    }
}

/// external-dns's DNSEndpoints in `namespace`.
pub fn dns_endpoints(client: &Client, namespace: &str) -> Api<DynamicObject> {
    let resource = ApiResource {
        group: "externaldns.k8s.io".into(),
        version: "v1alpha1".into(),
        api_version: "externaldns.k8s.io/v1alpha1".into(),
        kind: "DNSEndpoint".into(),
        plural: "dnsendpoints".into(),
    };
    Api::namespaced_with(client.clone(), namespace, &resource)
}

/// Applies the DNSEndpoint `name` asking external-dns for one A record, `host` → `address`.
pub async fn want_a_record(
    client: &Client,
    namespace: &str,
    name: &str,
    host: &str,
    address: &str,
) -> Result<(), Error> {
    dns_endpoints(client, namespace)
        .patch(
            name,
            &PatchParams::apply(crate::FIELD_MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "externaldns.k8s.io/v1alpha1", "kind": "DNSEndpoint",
                "metadata": { "name": name, "namespace": namespace },
                "spec": { "endpoints": [{
                    "dnsName": host, "recordType": "A", "targets": [address], "recordTTL": 300,
                }] },
            })),
        )
        .await?;
    Ok(())
}

/// A shared zone split by owner: what `owners` vouch for in Meridian's registry (the records
/// and their ownership records), and everything else (another tool's records and registry
/// records, anything seeded), both sorted. Neither side holds the apex's SOA and NS, the test
/// zones' `ns1.<apex>`, or Meridian's distributed-mode bookkeeping (`kuadrant.…` TXT records).
pub fn split_by_owner(
    zone: &[Endpoint],
    apex: &str,
    owners: &[String],
) -> (Vec<Endpoint>, Vec<Endpoint>) {
    let registry = Registry::read(zone);
    let mut ours: Vec<Endpoint> = registry
        .ownership
        .iter()
        .flat_map(|(key, by_owner)| {
            by_owner
                .iter()
                .filter(|(owner, _)| owners.contains(owner))
                .flat_map(|(_, txt)| registry.records.get(key).into_iter().chain([txt]))
        })
        .cloned()
        .collect();
    ours.sort_by_key(Endpoint::key);
    ours.dedup();
    let name_server = format!("ns1.{apex}");
    let mut theirs: Vec<Endpoint> = zone
        .iter()
        .filter(|r| !ours.contains(r) && !r.dns_name.starts_with("kuadrant."))
        .filter(|r| r.dns_name != apex && r.dns_name != name_server)
        .cloned()
        .collect();
    theirs.sort_by_key(Endpoint::key);
    (ours, theirs)
}
