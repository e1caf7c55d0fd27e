//! A record's address changes several times in a row, and every server of the zone answers
//! each new address once the record's `status.endpoints` says it is published: the leading hub
//! replica, the standby, and an agent serving DNS, each asked directly, the next change only
//! once every server answered the last (no server lags the status by a change; how far behind
//! the status each answered is printed, not asserted). Once with nothing else changing, once
//! while other records of the zone change at the same time, in an unsigned and in a signed
//! zone. The in-process twin of the install test's phase on the chart-installed hub.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use kube::Client;
use kube::api::Api;
use meridian_api::kuadrant::DNSRecord;
use meridian_e2e::example::{apply, dig_host_async, embedded_zone, sign_zone};
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, eventually};
use meridian_hub::run_command::{RunArgs, RunningHub};
use meridian_testkit::fixtures;
use serde_json::json;

const NAMESPACE: &str = "changes";
const DOMAIN: &str = "changes.example";
/// Records besides the one whose address changes, some of them changing at the same time.
const OTHERS: usize = 40;

fn host(name: &str) -> String {
    format!("{name}.{DOMAIN}")
}

/// A small tree as the policy controller writes it: the host → its leaf, A → `address`.
fn endpoints(name: &str, address: &str) -> serde_json::Value {
    let host = host(name);
    json!([
        { "dnsName": host, "recordType": "CNAME", "recordTTL": 60,
          "targets": [format!("leaf.klb.{host}")] },
        { "dnsName": format!("leaf.klb.{host}"), "recordType": "A", "recordTTL": 60,
          "targets": [address] },
    ])
}

async fn write_record(
    records: &Api<DNSRecord>,
    name: String,
    address: String,
) -> Result<DNSRecord, Error> {
    let (name, address) = (name.as_str(), address.as_str());
    apply(
        records,
        fixtures::dns_record(NAMESPACE, name, "zone")
            .root_host(&host(name))
            .endpoints(endpoints(name, address))
            .json(),
    )
    .await
}

/// Whether the record's status says `address` is published.
fn published(record: &DNSRecord, address: &str) -> bool {
    record.status.as_ref().is_some_and(|status| {
        status.observed_generation == record.metadata.generation
            && status.endpoints.iter().any(|e| {
                serde_json::to_value(e.record_type).ok() == Some(json!("A"))
                    && e.targets == [address]
            })
    })
}

async fn answers(server: SocketAddr, name: &str) -> Vec<String> {
    let host = host(name);
    dig_host_async(server, &host, None).await
}

/// Changes the address of `api` five times; after each, waits until its status says the new
/// one is published, then until every server answers it; returns each server's lag behind
/// the status per change. With `churn`, other records change at the same moment.
async fn change_addresses(
    hub: &Client,
    servers: &[(&str, SocketAddr)],
    round: u8,
    churn: bool,
) -> Result<Vec<Vec<Duration>>, Error> {
    let records: Api<DNSRecord> = Api::namespaced(hub.clone(), NAMESPACE);
    let mut lags = Vec::new();
    for change in 1..=5u8 {
        let address = format!("10.99.{round}.{change}");
        let mut writes = vec![write_record(&records, "api".into(), address.clone())];
        if churn {
            for other in (usize::from(change)..OTHERS).step_by(4) {
                writes.push(write_record(
                    &records,
                    format!("other-{other}"),
                    format!("10.98.{round}.{}", change * 10 + (other % 10) as u8),
                ));
            }
        }
        for written in futures::future::join_all(writes).await {
            written?;
        }
        let status_at = eventually(
            &format!("status says {address} is published"),
            DEFAULT_PATIENCE,
            || {
                let records = records.clone();
                let address = address.clone();
                async move {
                    let record = records.get("api").await?;
                    Ok(published(&record, &address).then(Instant::now))
                }
            },
        )
        .await?;
        let mut change_lags = Vec::new();
        for (server, at) in servers {
            let seen = eventually(
                &format!("{server} answers {address} (change {change})"),
                DEFAULT_PATIENCE,
                || async {
                    let answered = answers(*at, "api").await;
                    Ok((answered == [address.clone()]).then(Instant::now))
                },
            )
            .await;
            let seen = match seen {
                Ok(seen) => seen,
                Err(error) => {
                    eprintln!(
                        "{server} still answers {:?} for change {change} ({address})",
                        answers(*at, "api").await
                    );
                    return Err(error);
                }
            };
            change_lags.push(seen.saturating_duration_since(status_at));
        }
        lags.push(change_lags);
    }
    Ok(lags)
}

fn print_lags(what: &str, servers: &[(&str, SocketAddr)], lags: &[Vec<Duration>]) {
    for (index, (server, _)) in servers.iter().enumerate() {
        let each: Vec<String> = lags
            .iter()
            .map(|change| format!("{}ms", change[index].as_millis()))
            .collect();
        println!("{what}: {server} answered after status: {}", each.join(" "));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_server_answers_each_new_address_once_status_says_it_is_published()
-> Result<(), Error> {
    meridian_e2e::test_logs("warn");
    let fleet = Fleet::builder().without_ocm().start().await?;
    let hub = fleet.hub.client();
    meridian_e2e::ensure_namespace(&hub, NAMESPACE).await?;
    embedded_zone(&hub, NAMESPACE, DOMAIN).await?;
    let records: Api<DNSRecord> = Api::namespaced(hub.clone(), NAMESPACE);
    write_record(&records, "api".into(), "10.99.0.0".into()).await?;
    for other in 0..OTHERS {
        write_record(&records, format!("other-{other}"), "10.98.0.1".into()).await?;
    }
    let args = RunArgs {
        lease_seconds: 3,
        ..RunArgs::local(fleet.hub.kubeconfig_path())
    };
    let leader = RunningHub::start(&args).await.expect("the leader starts");
    eventually("the leader leads", DEFAULT_PATIENCE, || async {
        Ok(leader.is_leading().then_some(()))
    })
    .await?;
    let standby = RunningHub::start(&args).await.expect("the standby starts");
    eventually("the standby is ready", DEFAULT_PATIENCE, || async {
        Ok(standby.is_ready().then_some(()))
    })
    .await?;
    assert!(!standby.is_leading());
    let agent_listen = SocketAddr::from((
        [127, 0, 0, 1],
        meridian_testkit::bind_server::free_dns_port().map_err(Error::Component)?,
    ));
    let agent = tokio::spawn(meridian_agent::dns::serve(
        hub.clone(),
        "spoke-1".into(),
        meridian_agent::dns::ServeDns {
            listen: agent_listen,
            geoip: None,
            name_servers: Vec::new(),
            rate_limit: None,
        },
    ));
    let servers = [
        ("the leader", leader.nameserver),
        ("the standby", standby.nameserver),
        ("the agent", agent_listen),
    ];
    for (server, at) in servers {
        eventually(
            &format!("{server} answers"),
            DEFAULT_PATIENCE,
            || async move { Ok((answers(at, "api").await == ["10.99.0.0"]).then_some(())) },
        )
        .await?;
    }

    let alone = change_addresses(&hub, &servers, 1, false).await?;
    print_lags("unsigned, alone", &servers, &alone);
    let churned = change_addresses(&hub, &servers, 2, true).await?;
    print_lags("unsigned, with other records changing", &servers, &churned);

    // Signed: the replicas sign with the zone's keys; an agent would need the hub's copy of
    // them in its cluster's namespace, which this test's agent has not, so it holds the zone.
    sign_zone(&hub, NAMESPACE, "zone", None).await?;
    let replicas = &servers[..2];
    let signed = change_addresses(&hub, replicas, 3, false).await?;
    print_lags("signed, alone", replicas, &signed);
    let signed_churned = change_addresses(&hub, replicas, 4, true).await?;
    print_lags(
        "signed, with other records changing",
        replicas,
        &signed_churned,
    );

    agent.abort();
    standby.stop().await;
    leader.stop().await;
    Ok(())
}
