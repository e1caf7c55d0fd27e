//! `meridian-hub explain HOST --client IP | --country CC`: the answer that client gets and the
//! path to it. Against the live hub it reads every DNSRecord, probe, policy, cluster report and
//! zone once; offline (`-f`) it takes a `plan` scenario, with every leaf healthy. The answer is
//! the nameserver's own walk over what is published (`meridian_nameserver::explain`), and the
//! why of each leaf is `crate::insight`.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::insight::{FleetSnapshot, HostView, host_views};
use ipnet::IpNet;
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_api::meridian::ClusterReport;
use meridian_controllers::decide::convert::all_to_api;
use meridian_dns::model::RecordType;
use meridian_nameserver::{Explanation, GeoCode, GeoDb, Location};
use serde::Serialize;

#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("who").required(true).args(["client", "country"]))]
pub struct ExplainArgs {
    /// The host asked for (`api.example.com`).
    pub host: String,

    /// The client's address or subnet (as EDNS Client Subnet carries it), located with
    /// `--geoip`.
    #[arg(long)]
    pub client: Option<String>,

    /// The client's country (ISO 3166 alpha-2), instead of an address.
    #[arg(long)]
    pub country: Option<String>,

    /// The client's continent (`EU`, or `GEO-EU`), with `--country`: a country alone does not
    /// tell which continent branch it falls in.
    #[arg(long, requires = "country")]
    pub continent: Option<String>,

    /// The record type asked for.
    #[arg(long = "type", default_value = "A", value_parser = ["A", "AAAA"])]
    pub record_type: String,

    /// Explain a `plan` scenario offline instead of the live hub (every leaf healthy).
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,

    /// Kubeconfig of the hub cluster; in-cluster configuration when absent.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,

    /// The MaxMind-format database the nameserver locates clients with (for `--client`).
    #[arg(long, env = "MERIDIAN_GEOIP")]
    pub geoip: Option<PathBuf>,

    /// Seconds without a report after which a cluster counts as silent.
    #[arg(long, default_value_t = 120)]
    pub cluster_heartbeat_timeout_seconds: u64,

    /// Also ask each of these DNS servers (ADDRESS:PORT, comma-separated: hub replicas,
    /// agents serving DNS, secondaries) directly what it answers the client now and which
    /// serial it serves, beside what the leading replica's status says it serves.
    #[arg(long, value_delimiter = ',')]
    pub servers: Vec<SocketAddr>,

    /// Also ask every ready endpoint of this DNS Service (NAMESPACE/NAME, e.g.
    /// meridian-system/meridian-dns), as `--servers` does: each hub replica behind it.
    #[arg(long)]
    pub dns_service: Option<String>,

    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: ExplainFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ExplainFormat {
    Text,
    Json,
}

/// Who asks.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Client {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continent: Option<String>,
}

impl Client {
    fn location(&self) -> Option<Location> {
        let location = Location {
            country: self.country.as_deref().and_then(GeoCode::new),
            continent: self.continent.as_deref().and_then(GeoCode::new),
        };
        (location != Location::default()).then_some(location)
    }
}

/// The explanation `explain` prints.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    pub client: Client,
    pub answer: Explanation,
    /// Every record at or above the host: its leaves' verdicts, clusters, held plans.
    pub records: Vec<HostView>,
    /// What each server asked directly answers (`--servers`, `--dns-service`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub servers: Vec<ServerAnswer>,
    pub notes: Vec<String>,
}

/// What one server of the zone answers the client now, asked directly.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerAnswer {
    pub server: SocketAddr,
    /// The addresses it answered, sorted (none: no answer, or no address).
    pub answers: Vec<String>,
    /// The SOA serial it serves for the zone (none: it does not serve the zone, or did not
    /// answer).
    pub serial: Option<u32>,
    /// How that compares with what the leading replica's status says it serves.
    pub verdict: String,
}

/// How a server's answer compares with what is published (pure): its serial against the one
/// the leading replica wrote to the zone's status (`leader`), and its addresses against those
/// the published records can give the client (`publishable`; none when the client is given
/// by country, without an address to ask as).
pub fn judge_server(
    serial: Option<u32>,
    leader: Option<u32>,
    answers: &[String],
    publishable: Option<&[&str]>,
) -> String {
    let mut verdict = match (serial, leader) {
        (None, _) => "does not serve the zone (no SOA answer)".to_string(),
        (Some(serial), None) => format!("serial {serial}; the zone's status names no serial yet"),
        (Some(serial), Some(leader)) if serial == leader => {
            format!("serial {serial}, the leader's")
        }
        (Some(serial), Some(leader)) if meridian_nameserver::serial_newer(serial, leader) => {
            format!(
                "serial {serial}, ahead of the leader's status ({leader}): a change its status has not caught up with yet"
            )
        }
        (Some(serial), Some(leader)) => format!(
            "serial {serial}, BEHIND the leader's {leader}: it serves an older zone than the leader"
        ),
    };
    // Without the client's address there is no subnet to ask as: the server answers for the
    // asker, so its addresses are not judged.
    let Some(publishable) = publishable else {
        return verdict;
    };
    let strange: Vec<&str> = answers
        .iter()
        .map(String::as_str)
        .filter(|answer| !publishable.contains(answer))
        .collect();
    if !strange.is_empty() {
        verdict.push_str(&format!(
            "; answers {} which the published records do not give this client",
            strange.join(", ")
        ));
    }
    verdict
}

/// Asks `server` for `host` (as the client: its address as EDNS Client Subnet) and for the
/// SOA of `apex`; the addresses answered and the serial.
fn ask_server(
    server: SocketAddr,
    host: &str,
    record_type: RecordType,
    apex: &str,
    client: Option<IpAddr>,
) -> (Vec<String>, Option<u32>) {
    use hickory_proto::op::{Edns, Message, Query};
    use hickory_proto::rr::rdata::opt::{ClientSubnet, EdnsOption};
    use hickory_proto::rr::{Name, RData, RecordType as WireType};
    let ask = |name: &str, qtype: WireType| -> Option<Message> {
        let mut query = Message::query();
        query.metadata.id = rand::random();
        query.add_query(Query::query(
            Name::from_ascii(format!("{name}.")).ok()?,
            qtype,
        ));
        if let Some(address) = client {
            let prefix = if address.is_ipv4() { 24 } else { 56 };
            let mut edns = Edns::new();
            edns.options_mut()
                .insert(EdnsOption::Subnet(ClientSubnet::new(address, prefix, 0)));
            query.set_edns(edns);
        }
        let bind = if server.is_ipv4() {
            "0.0.0.0:0"
        } else {
            "[::]:0"
        };
        let socket = std::net::UdpSocket::bind(bind).ok()?;
        socket.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        socket.send_to(&query.to_vec().ok()?, server).ok()?;
        let mut buffer = [0u8; 4096];
        let n = socket.recv(&mut buffer).ok()?;
        Message::from_vec(&buffer[..n]).ok()
    };
    let qtype = if record_type == RecordType::Aaaa {
        WireType::AAAA
    } else {
        WireType::A
    };
    let mut answers: Vec<String> = ask(host, qtype)
        .map(|response| {
            response
                .answers
                .iter()
                .filter_map(|record| match &record.data {
                    RData::A(a) => Some(a.0.to_string()),
                    RData::AAAA(a) => Some(a.0.to_string()),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    answers.sort();
    let serial = ask(apex, WireType::SOA).and_then(|response| {
        response
            .answers
            .iter()
            .find_map(|record| match &record.data {
                RData::SOA(soa) => Some(soa.serial),
                _ => None,
            })
    });
    (answers, serial)
}

/// Every ready endpoint of the DNS Service `namespace/name` (its UDP port named `dns-udp`, as
/// the chart names it, else its first UDP port).
async fn service_endpoints(
    client: &kube::Client,
    service: &str,
) -> anyhow::Result<Vec<SocketAddr>> {
    use k8s_openapi::api::discovery::v1::EndpointSlice;
    let (namespace, name) = service
        .split_once('/')
        .ok_or_else(|| anyhow::anyhow!("--dns-service {service}: expected NAMESPACE/NAME"))?;
    let slices: kube::Api<EndpointSlice> = kube::Api::namespaced(client.clone(), namespace);
    let list = slices
        .list(
            &kube::api::ListParams::default().labels(&format!("kubernetes.io/service-name={name}")),
        )
        .await?;
    let mut endpoints = Vec::new();
    for slice in list.items {
        let ports = slice.ports.unwrap_or_default();
        let port = ports
            .iter()
            .find(|p| p.name.as_deref() == Some("dns-udp"))
            .or_else(|| ports.iter().find(|p| p.protocol.as_deref() == Some("UDP")))
            .and_then(|p| p.port);
        let Some(port) = port.and_then(|p| u16::try_from(p).ok()) else {
            continue;
        };
        for endpoint in slice.endpoints.iter().flatten() {
            if endpoint.conditions.as_ref().and_then(|c| c.ready) != Some(true) {
                continue;
            }
            endpoints.extend(
                endpoint
                    .addresses
                    .iter()
                    .filter_map(|a| a.parse::<IpAddr>().ok())
                    .map(|ip| SocketAddr::new(ip, port)),
            );
        }
    }
    anyhow::ensure!(
        !endpoints.is_empty(),
        "--dns-service {service}: no ready endpoint"
    );
    Ok(endpoints)
}

/// Asks each of `servers` what it answers the client for the report's host, and judges it
/// against the leading replica's serial in the zone's status.
fn ask_servers(
    report: &mut Report,
    snapshot: &FleetSnapshot,
    host: &str,
    record_type: RecordType,
    servers: &[SocketAddr],
) {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    // The embedded zone holding the host (a provider's zone has no serial in status).
    let zone = snapshot
        .zones
        .iter()
        .filter(|zone| zone.spec.dns_provider_secret_ref.is_none())
        .filter(|zone| {
            let domain = zone
                .spec
                .domain_name
                .trim_end_matches('.')
                .to_ascii_lowercase();
            meridian_dns::model::is_at_or_below(&host, &domain)
        })
        .max_by_key(|zone| zone.spec.domain_name.len());
    let Some(zone) = zone else {
        return;
    };
    let apex = zone
        .spec
        .domain_name
        .trim_end_matches('.')
        .to_ascii_lowercase();
    let leader = zone.status.as_ref().and_then(|status| status.serial);
    let publishable: Vec<&str> = report.answer.answers.keys().map(String::as_str).collect();
    for server in servers {
        let (answers, serial) =
            ask_server(*server, &host, record_type, &apex, report.client.address);
        let asked_as_client = report.client.address.is_some();
        let verdict = judge_server(
            serial,
            leader,
            &answers,
            asked_as_client.then_some(publishable.as_slice()),
        );
        report.servers.push(ServerAnswer {
            server: *server,
            answers,
            serial,
            verdict,
        });
    }
}

/// The client as the nameserver would see it: located by `geo` from an address or subnet, or
/// given by country (and continent).
pub fn client(
    address: Option<&str>,
    country: Option<&str>,
    continent: Option<&str>,
    geo: Option<&GeoDb>,
) -> anyhow::Result<(Client, Vec<String>)> {
    let mut notes = Vec::new();
    let mut client = Client {
        country: country.map(str::to_ascii_uppercase),
        continent: continent.map(|c| {
            let c = c.to_ascii_uppercase();
            if c.starts_with("GEO-") {
                c
            } else {
                format!("GEO-{c}")
            }
        }),
        ..Client::default()
    };
    for (flag, code) in [
        ("--country", &client.country),
        ("--continent", &client.continent),
    ] {
        if let Some(code) = code
            && GeoCode::new(code).is_none()
        {
            anyhow::bail!("{flag} {code}: not a country (IE) or continent (EU) code");
        }
    }
    if let Some(address) = address {
        let ip: IpAddr = match address.parse::<IpNet>() {
            Ok(net) => net.addr(),
            Err(_) => address
                .parse()
                .map_err(|_| anyhow::anyhow!("--client {address}: not an address or a subnet"))?,
        };
        client.address = Some(ip);
        match geo {
            Some(geo) => match geo.locate(ip) {
                Some(location) => {
                    client.country = location.country.map(|code| code.to_string());
                    client.continent = location.continent.map(|code| code.to_string());
                }
                None => notes.push(format!(
                    "the GeoIP database does not know {ip}: the client gets the catch-all"
                )),
            },
            None => notes.push(
                "no GeoIP database (--geoip): the client is unlocated and gets the catch-all"
                    .into(),
            ),
        }
    }
    Ok((client, notes))
}

/// Explains `host` for `client` from a snapshot of the fleet.
pub fn explain_snapshot(
    snapshot: &FleetSnapshot,
    host: &str,
    record_type: RecordType,
    client: Client,
    mut notes: Vec<String>,
) -> anyhow::Result<Report> {
    let zone = snapshot
        .published_zone(host)
        .ok_or_else(|| anyhow::anyhow!("no ManagedZone holds {host}"))?;
    let location = client.location();
    let answer = meridian_nameserver::explain(&zone, host, record_type, location.as_ref());
    let records = host_views(snapshot, Some(host));
    if records.is_empty() {
        notes.push(format!("no DNSRecord publishes {host}"));
    }
    for record in &records {
        // A GEO branch that matches the client but is not published: why the client is sent
        // elsewhere.
        for branch in record.wanted.iter().filter(|e| {
            let code = e.property(meridian_dns::model::GEO_CODE);
            code.is_some_and(|code| {
                location.as_ref().is_some_and(|l| {
                    l.country.as_deref() == Some(code) || l.continent.as_deref() == Some(code)
                })
            }) && !record.published.iter().any(|p| p.key() == e.key())
        }) {
            notes.push(format!(
                "{}: the GEO branch {} matches this client but is out of DNS now (no leaf under it is published), so the client gets the next match",
                record.record,
                branch.property(meridian_dns::model::GEO_CODE).unwrap_or_default()
            ));
        }
        // Unhealthy, awaiting a first probe, or a standby tier's: the leaves list says which.
        let left_out: Vec<&str> = record
            .leaves
            .iter()
            .filter(|l| !l.published)
            .map(|l| l.address.as_str())
            .collect();
        if !left_out.is_empty() {
            notes.push(format!(
                "{}: left out of DNS now: {}",
                record.record,
                left_out.join(", ")
            ));
        }
    }
    Ok(Report {
        client,
        answer,
        records,
        servers: Vec::new(),
        notes,
    })
}

/// A scenario as the fleet a live hub would have: one DNSRecord per listener, everything it
/// wants published, in a zone of its host's parent domain.
fn scenario_snapshot(path: &std::path::Path) -> anyhow::Result<FleetSnapshot> {
    let scenario = crate::plan_command::read_scenario(path)?;
    let plan = crate::plan_command::plan_scenario(&scenario)?;
    let namespace = scenario.gateway.namespace.clone();
    let mut snapshot = FleetSnapshot::default();
    for record in &plan.records {
        let base = record.root_host.trim_start_matches("*.");
        let domain = base.split_once('.').map_or(base, |(_, parent)| parent);
        let zone_name = format!("zone-{}", record.name);
        let endpoints = all_to_api(&record.endpoints);
        let object: DNSRecord = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
            "metadata": { "name": record.name, "namespace": namespace },
            "spec": { "rootHost": record.root_host, "managedZone": { "name": zone_name }, "endpoints": endpoints },
            "status": {
                "endpoints": endpoints,
                "conditions": [{
                    "type": "Ready", "status": "True", "reason": "Scenario",
                    "message": "planned offline: every leaf counts as healthy",
                    "lastTransitionTime": "1970-01-01T00:00:00Z",
                }],
            },
        }))?;
        let zone: ManagedZone = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
            "metadata": { "name": zone_name, "namespace": namespace },
            "spec": { "domainName": domain, "description": "scenario" },
        }))?;
        snapshot.records.push(Arc::new(object));
        snapshot.zones.push(Arc::new(zone));
    }
    // Each cluster as its agent would report it, so leaves are named by their cluster.
    for cluster in &scenario.clusters {
        let report: ClusterReport = serde_json::from_value(serde_json::json!({
            "apiVersion": "meridian.dev/v1alpha1", "kind": "ClusterReport",
            "metadata": { "name": "report", "namespace": cluster.name },
            "spec": {
                "clusterID": cluster.cluster_id,
                "gateways": [{
                    "name": scenario.gateway.name, "namespace": namespace,
                    "addresses": cluster.addresses.iter().map(|a| serde_json::json!({
                        "type": a.type_.clone().unwrap_or_else(|| "IPAddress".into()),
                        "value": a.value,
                    })).collect::<Vec<_>>(),
                }],
            },
        }))?;
        snapshot.reports.push(Arc::new(report));
    }
    Ok(snapshot)
}

/// Renders a report.
pub fn render(report: &Report, format: ExplainFormat) -> anyhow::Result<String> {
    if format == ExplainFormat::Json {
        return Ok(serde_json::to_string_pretty(report)? + "\n");
    }
    let mut out = String::from("client: ");
    let who = &report.client;
    let mut parts = Vec::new();
    if let Some(address) = who.address {
        parts.push(address.to_string());
    }
    parts.push(format!(
        "country {}, continent {}",
        who.country.as_deref().unwrap_or("unknown"),
        who.continent.as_deref().unwrap_or("unknown")
    ));
    out.push_str(&parts.join(", "));
    out.push('\n');
    out.push_str(&report.answer.render_text());
    let mut served: std::collections::BTreeMap<&str, f64> = std::collections::BTreeMap::new();
    for (address, share) in &report.answer.answers {
        let cluster = report
            .records
            .iter()
            .flat_map(|r| &r.leaves)
            .find(|l| &l.address == address)
            .and_then(|l| l.cluster.as_deref())
            .unwrap_or("an unknown cluster");
        *served.entry(cluster).or_default() += share;
    }
    if !served.is_empty() {
        let shares: Vec<String> = served
            .iter()
            .map(|(cluster, share)| format!("{cluster} {:.0}%", share * 100.0))
            .collect();
        out.push_str(&format!("served by: {}\n", shares.join(", ")));
    }
    for record in &report.records {
        out.push_str(&record.render_text());
    }
    if !report.servers.is_empty() {
        out.push_str("what each server answers now, asked directly:\n");
        for server in &report.servers {
            let answers = if server.answers.is_empty() {
                "no address".to_string()
            } else {
                server.answers.join(", ")
            };
            out.push_str(&format!(
                "  {}  {answers}  ({})\n",
                server.server, server.verdict
            ));
        }
    }
    for note in &report.notes {
        out.push_str(&format!("note: {note}\n"));
    }
    Ok(out)
}

/// `meridian-hub explain`.
pub fn run(args: &ExplainArgs) -> anyhow::Result<()> {
    let geo = args.geoip.as_deref().map(GeoDb::open).transpose()?;
    let (client, notes) = client(
        args.client.as_deref(),
        args.country.as_deref(),
        args.continent.as_deref(),
        geo.as_ref(),
    )?;
    let record_type = RecordType::parse(&args.record_type).expect("clap allows A and AAAA");
    let mut servers = args.servers.clone();
    let snapshot = match &args.file {
        Some(path) => scenario_snapshot(path)?,
        None => {
            let _ = rustls::crypto::ring::default_provider().install_default();
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            runtime.block_on(async {
                let config = crate::run_command::client_config(args.kubeconfig.as_ref()).await?;
                let client = kube::Client::try_from(config)?;
                if let Some(service) = &args.dns_service {
                    servers.extend(service_endpoints(&client, service).await?);
                }
                anyhow::Ok(
                    FleetSnapshot::list(
                        &client,
                        Duration::from_secs(args.cluster_heartbeat_timeout_seconds),
                    )
                    .await?,
                )
            })?
        }
    };
    let mut report = explain_snapshot(&snapshot, &args.host, record_type, client, notes)?;
    ask_servers(&mut report, &snapshot, &args.host, record_type, &servers);
    print!("{}", render(&report, args.output)?);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_controllers::decide::convert::all_to_engine;
    use meridian_dns::tree::{Health, Pruned, RecordTree};

    fn geo_example() -> FleetSnapshot {
        let path =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/plan-examples/geo.yaml");
        scenario_snapshot(&path).expect("the documented scenario")
    }

    #[test]
    fn each_server_is_judged_against_the_leaders_serial_and_the_published_answers() {
        let published = ["10.0.0.1", "10.0.0.2"];
        let addresses = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // (serial, leader's, answers, verdict)
        type Case = (Option<u32>, Option<u32>, Vec<String>, &'static str);
        let cases: [Case; 6] = [
            (
                Some(7),
                Some(7),
                addresses(&["10.0.0.1"]),
                "serial 7, the leader's",
            ),
            (
                Some(8),
                Some(7),
                addresses(&["10.0.0.2"]),
                "serial 8, ahead of the leader's status (7): a change its status has not caught up with yet",
            ),
            (
                Some(6),
                Some(7),
                addresses(&["10.0.0.9"]),
                "serial 6, BEHIND the leader's 7: it serves an older zone than the leader; answers 10.0.0.9 which the published records do not give this client",
            ),
            // Serials wrap (RFC 1982): 1 is after 4294967295.
            (
                Some(1),
                Some(u32::MAX),
                addresses(&["10.0.0.1"]),
                "serial 1, ahead of the leader's status (4294967295): a change its status has not caught up with yet",
            ),
            (
                Some(3),
                None,
                addresses(&[]),
                "serial 3; the zone's status names no serial yet",
            ),
            (
                None,
                Some(7),
                addresses(&[]),
                "does not serve the zone (no SOA answer)",
            ),
        ];
        // A client given by country: no address to ask as, so the addresses are not judged.
        assert_eq!(
            judge_server(Some(7), Some(7), &addresses(&["192.0.2.99"]), None),
            "serial 7, the leader's"
        );
        for (serial, leader, answers, verdict) in cases {
            assert_eq!(
                judge_server(serial, leader, &answers, Some(&published)),
                verdict,
                "{serial:?} / {leader:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_server_is_asked_as_the_client_for_its_answer_and_serial() {
        use meridian_dns::model::Endpoint;
        use meridian_nameserver::{NameServer, ServerConfig, ZoneConfig};
        let dir = tempfile::tempdir().unwrap();
        let geo = dir.path().join("country.mmdb");
        std::fs::write(
            &geo,
            meridian_testkit::geo_db::write_database(&[
                ("192.0.2.0/24".parse().unwrap(), "IE", "EU"),
                ("198.51.100.0/24".parse().unwrap(), "US", "NA"),
            ]),
        )
        .unwrap();
        let server = NameServer::start(
            "127.0.0.1:0".parse().unwrap(),
            ServerConfig {
                geo: Some(GeoDb::open(&geo).unwrap()),
                ..ServerConfig::default()
            },
        )
        .await
        .unwrap();
        let geo_a = |code: &str, address: &str| {
            Endpoint::new("api.example.com", RecordType::A, [address.to_string()], 60)
                .with_set_identifier(code)
                .with_property(meridian_dns::model::GEO_CODE, code)
        };
        server.publish_numbered(
            ZoneConfig::new("example.com"),
            [geo_a("IE", "10.0.0.1"), geo_a("*", "10.0.0.2")],
            |_| 41,
        );
        let address = server.local_addr();
        let asked = tokio::task::spawn_blocking(move || {
            [
                ask_server(
                    address,
                    "api.example.com",
                    RecordType::A,
                    "example.com",
                    Some("192.0.2.7".parse().unwrap()),
                ),
                ask_server(
                    address,
                    "api.example.com",
                    RecordType::A,
                    "example.com",
                    Some("198.51.100.7".parse().unwrap()),
                ),
                ask_server(
                    address,
                    "api.example.org",
                    RecordType::A,
                    "example.org",
                    None,
                ),
            ]
        })
        .await
        .unwrap();
        assert_eq!(
            asked[0],
            (vec!["10.0.0.1".to_string()], Some(41)),
            "from Ireland"
        );
        assert_eq!(
            asked[1],
            (vec!["10.0.0.2".to_string()], Some(41)),
            "from the US: the catch-all"
        );
        assert_eq!(asked[2], (Vec::new(), None), "a zone it does not serve");
    }

    fn located(country: &str, continent: &str) -> Client {
        Client {
            address: None,
            country: Some(country.into()),
            continent: Some(continent.into()),
        }
    }

    #[test]
    fn a_client_whose_geo_branch_is_out_of_dns_is_told_why_it_goes_elsewhere() {
        let mut snapshot = geo_example();
        // A client in Ireland asking for the host.
        let from_dublin = |snapshot: &FleetSnapshot| {
            explain_snapshot(
                snapshot,
                "api.example.com",
                RecordType::A,
                located("IE", "GEO-EU"),
                Vec::new(),
            )
            .unwrap()
        };
        let healthy = from_dublin(&snapshot);
        assert_eq!(
            healthy.answer.answers.keys().collect::<Vec<_>>(),
            ["172.31.0.1"]
        );
        assert!(healthy.notes.is_empty(), "{:?}", healthy.notes);
        // Dublin's gateway fails: what the record publishes is the tree without it.
        let index = snapshot
            .records
            .iter()
            .position(|r| r.spec.root_host == "api.example.com")
            .unwrap();
        let mut record = (*snapshot.records[index]).clone();
        let tree =
            RecordTree::from_records("api.example.com", all_to_engine(&record.spec.endpoints));
        let Pruned::Endpoints(published) = tree.prune(&std::collections::BTreeMap::from([(
            "172.31.0.1".to_string(),
            Health::Unhealthy,
        )])) else {
            panic!("virginia stays")
        };
        record.status.as_mut().unwrap().endpoints = all_to_api(&published);
        snapshot.records[index] = Arc::new(record);
        let report = from_dublin(&snapshot);
        assert_eq!(
            report.answer.answers.keys().collect::<Vec<_>>(),
            ["172.31.1.1"],
            "the catch-all falls back to the US group"
        );
        let notes = report.notes.join("\n");
        assert!(
            notes.contains("the GEO branch IE matches this client but is out of DNS now"),
            "{notes}"
        );
        assert!(notes.contains("left out of DNS now: 172.31.0.1"), "{notes}");
        let leaf = &report.records[0].leaves[0];
        assert_eq!(
            (
                leaf.address.as_str(),
                leaf.cluster.as_deref(),
                leaf.published
            ),
            ("172.31.0.1", Some("dublin"), false)
        );
    }
}
