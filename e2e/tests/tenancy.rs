//! Many teams, one hub: the attacks a tenant with rights in its own namespace alone would try,
//! against a real API server (RBAC on, the tenant impersonated as a user bound to a Role in its
//! namespace) and a real hub, each checked by what the victim's clients see: the hub's
//! nameserver's answers.
//!
//! The victim is namespace `shop`, holding `example.com` and answering `api.example.com` with
//! 10.250.2.1; the tenant is `mallory`, with every right on Meridian's kinds and Secrets in its
//! namespace and none elsewhere (see docs/security.md).

use k8s_openapi::api::core::v1::Namespace;
use kube::api::Api;
use kube::{Client, Config, ResourceExt};
use meridian_api::conditions;
use meridian_api::kuadrant::{DNSRecord, ManagedZone};
use meridian_controllers::decide::zone_claims::reasons::{
    DOMAIN_CLAIMED, DOMAIN_NOT_GRANTED, PUBLIC_SUFFIX,
};
use meridian_e2e::example::{apply, dig_host_async};
use meridian_e2e::{DEFAULT_PATIENCE, Error, Fleet, condition_becomes, eventually};
use meridian_hub::run_command::{RunArgs, RunningHub};
use meridian_providers::Provider;
use meridian_providers::rfc2136::Rfc2136Provider;
use meridian_testkit::bind_server::BindServer;
use meridian_testkit::fixtures;
use serde_json::json;

const VICTIM: &str = "shop";
const TENANT: &str = "mallory";
const VICTIM_HOST: &str = "api.example.com";
const VICTIM_ADDRESS: &str = "10.250.2.1";
const ATTACKER_ADDRESS: &str = "192.0.2.66";

/// A zone `name` for `domain` in `namespace`.
fn zone(namespace: &str, name: &str, domain: &str) -> serde_json::Value {
    fixtures::managed_zone(namespace, name, domain).json()
}

/// A record `name` in zone `zone` answering `host` with `address`.
fn record(namespace: &str, name: &str, zone: &str, host: &str, address: &str) -> serde_json::Value {
    fixtures::dns_record(namespace, name, zone)
        .root_host(host)
        .endpoint(host, "A", &[address])
        .json()
}

/// The tenant's namespace and its rights there: every verb on Meridian's kinds and Secrets, as
/// a platform would give a team (no status, nothing cluster-wide).
async fn tenant_namespace(admin: &Client) -> Result<(), Error> {
    for namespace in [VICTIM, TENANT] {
        apply(
            &Api::<Namespace>::all(admin.clone()),
            json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": namespace } }),
        )
        .await?;
    }
    grant_team(
        admin,
        TENANT,
        json!([
            { "apiGroups": ["kuadrant.io"], "resources": ["managedzones", "dnsrecords", "dnspolicies", "dnshealthcheckprobes"], "verbs": ["*"] },
            { "apiGroups": [""], "resources": ["secrets"], "verbs": ["*"] },
        ]),
    )
    .await
}

/// The tenant's rights in `namespace`: a Role of `rules` bound to user `mallory`.
async fn grant_team(
    admin: &Client,
    namespace: &str,
    rules: serde_json::Value,
) -> Result<(), Error> {
    apply(
        &Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(admin.clone(), namespace),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": { "name": "team", "namespace": namespace },
            "rules": rules,
        }),
    )
    .await?;
    apply(
        &Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(admin.clone(), namespace),
        json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": { "name": "team", "namespace": namespace },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "team" },
            "subjects": [{ "apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": TENANT }],
        }),
    )
    .await?;
    Ok(())
}

/// A client acting as the tenant: the admin's kubeconfig, impersonating user `mallory`.
async fn as_tenant(fleet: &Fleet) -> Result<Client, Error> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kubeconfig = kube::config::Kubeconfig::read_from(fleet.hub.kubeconfig_path())?;
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.auth_info.impersonate = Some(TENANT.into());
    Ok(Client::try_from(config)?)
}

/// The victim's zone and record, published and answered.
async fn victim(admin: &Client, dns: std::net::SocketAddr) -> Result<(), Error> {
    apply(
        &Api::<ManagedZone>::namespaced(admin.clone(), VICTIM),
        zone(VICTIM, "main", "example.com"),
    )
    .await?;
    apply(
        &Api::<DNSRecord>::namespaced(admin.clone(), VICTIM),
        record(VICTIM, "api", "main", VICTIM_HOST, VICTIM_ADDRESS),
    )
    .await?;
    answered(dns, VICTIM_HOST, &[VICTIM_ADDRESS]).await?;
    // Claims are ordered by creationTimestamp, to the second, then by namespace (`mallory`
    // before `shop`): the tenant's zones come a second later, as they would in life.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    Ok(())
}

/// Waits until the nameserver answers `host` with `addresses`.
async fn answered(
    dns: std::net::SocketAddr,
    host: &'static str,
    addresses: &[&str],
) -> Result<(), Error> {
    let wanted: Vec<String> = addresses.iter().map(|a| a.to_string()).collect();
    eventually(
        &format!("{host} answers {addresses:?}"),
        DEFAULT_PATIENCE,
        || {
            let wanted = wanted.clone();
            async move {
                let got = dig_host_async(dns, host, None).await;
                Ok((got == wanted).then_some(()))
            }
        },
    )
    .await
}

/// The answers to `host` now.
async fn answers(dns: std::net::SocketAddr, host: &'static str) -> Vec<String> {
    dig_host_async(dns, host, None).await
}

/// The `Ready` condition of `name` once its reason is `reason`.
async fn refused<K>(api: &Api<K>, name: &str, reason: &str) -> Result<String, Error>
where
    K: meridian_e2e::WithConditions
        + kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let what = format!("{name} is refused with {reason}");
    let condition = condition_becomes(api, name, conditions::READY, &what, |c| {
        c.status == "False" && c.reason == reason
    })
    .await?;
    Ok(condition.message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_take_another_teams_zone_or_names() -> Result<(), Error> {
    let fleet = Fleet::builder().without_ocm().start().await?;
    let admin = fleet.hub.client();
    tenant_namespace(&admin).await?;
    let running = RunningHub::start(&RunArgs::local(fleet.hub.kubeconfig_path()))
        .await
        .expect("the hub starts");
    let dns = running.nameserver;
    victim(&admin, dns).await?;

    let tenant = as_tenant(&fleet).await?;
    let zones: Api<ManagedZone> = Api::namespaced(tenant.clone(), TENANT);
    let records: Api<DNSRecord> = Api::namespaced(tenant.clone(), TENANT);
    // The tenant's rights end at its namespace.
    let elsewhere: Api<ManagedZone> = Api::namespaced(tenant.clone(), VICTIM);
    assert!(
        elsewhere.list(&Default::default()).await.is_err(),
        "the tenant reads nothing of the victim's namespace"
    );

    // Its own zone works: the hub serves what the tenant may have.
    apply(&zones, zone(TENANT, "own", "mallory.test")).await?;
    apply(
        &records,
        record(TENANT, "own", "own", "www.mallory.test", "192.0.2.10"),
    )
    .await?;
    answered(dns, "www.mallory.test", &["192.0.2.10"]).await?;

    // 1. A longer apex under the victim's domain, answering the victim's host.
    apply(&zones, zone(TENANT, "longer", VICTIM_HOST)).await?;
    apply(
        &records,
        record(TENANT, "longer", "longer", VICTIM_HOST, ATTACKER_ADDRESS),
    )
    .await?;
    let message = refused(&zones, "longer", DOMAIN_CLAIMED).await?;
    assert!(
        message.contains("namespace shop"),
        "the refusal names the holder's namespace: {message}"
    );
    refused(&records, "longer", DOMAIN_CLAIMED).await?;

    // 2. The victim's very domain, sharing its record store.
    apply(&zones, zone(TENANT, "same", "example.com")).await?;
    apply(
        &records,
        record(TENANT, "same", "same", VICTIM_HOST, ATTACKER_ADDRESS),
    )
    .await?;
    refused(&zones, "same", DOMAIN_CLAIMED).await?;
    refused(&records, "same", DOMAIN_CLAIMED).await?;

    // A public suffix: held by no one, so squatting it blocks no later team under it.
    apply(&zones, zone(TENANT, "everything", "com")).await?;
    let message = refused(&zones, "everything", PUBLIC_SUFFIX).await?;
    assert!(message.contains("public suffix"), "{message}");

    // 3. Its own zone, naming the victim's host: a record outside its zone's domain.
    apply(
        &records,
        record(TENANT, "outside", "own", VICTIM_HOST, ATTACKER_ADDRESS),
    )
    .await?;
    let message = refused(&records, "outside", "Invalid").await?;
    assert!(
        message.contains("not in ManagedZone own's domain"),
        "{message}"
    );

    // 4. The hub's own identity, and a token sent to a server the tenant runs.
    apply(
        &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(tenant.clone(), TENANT),
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/azure",
            "metadata": { "name": "borrowed", "namespace": TENANT },
            "stringData": { "azure.json": json!({
                "tenantId": "t", "subscriptionId": "victims-subscription", "resourceGroup": "rg",
                "useWorkloadIdentityExtension": true,
            }).to_string() },
        }),
    )
    .await?;
    apply(
        &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(tenant.clone(), TENANT),
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/azure",
            "metadata": { "name": "elsewhere", "namespace": TENANT },
            "stringData": { "azure.json": json!({
                "tenantId": "t", "subscriptionId": "s", "resourceGroup": "rg",
                "aadClientId": "id", "aadClientSecret": "s",
                "resourceManagerEndpoint": "https://127.0.0.1:1/",
                "activeDirectoryAuthorityHost": "https://127.0.0.1:1/",
            }).to_string() },
        }),
    )
    .await?;
    // 5. DNS UPDATEs aimed inside the hub's network: a real BIND on loopback, as a node's
    // own resolver or a platform DNS server would be, accepting the tenant's TSIG key.
    let bind = BindServer::start("internal.mallory.test")
        .await
        .expect("BIND starts");
    apply(
        &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(tenant.clone(), TENANT),
        bind.provider_secret(TENANT, "inside"),
    )
    .await?;
    apply(
        &records,
        record(
            TENANT,
            "inside",
            "internal",
            "www.internal.mallory.test",
            ATTACKER_ADDRESS,
        ),
    )
    .await?;
    // 6. Webhook requests aimed inside the hub's network: a listener on loopback, standing in
    // for a sidecar webhook that holds the platform's provider credentials, and the cloud
    // metadata service.
    let inside_webhook = std::net::TcpListener::bind("127.0.0.1:0").expect("a loopback listener");
    inside_webhook.set_nonblocking(true).expect("non-blocking");
    for (name, url) in [
        (
            "sidecar",
            format!(
                "http://{}/",
                inside_webhook.local_addr().expect("an address")
            ),
        ),
        ("metadata", "http://169.254.169.254/latest/".to_string()),
    ] {
        apply(
            &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(tenant.clone(), TENANT),
            json!({
                "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/webhook",
                "metadata": { "name": name, "namespace": TENANT },
                "stringData": { "url": url },
            }),
        )
        .await?;
    }
    for (name, secret, refusal) in [
        (
            "sidecar",
            "sidecar",
            "loopback addresses are webhooks only by the platform admin's --webhook-allow"
                .to_string(),
        ),
        (
            "metadata",
            "metadata",
            "link-local addresses are never webhooks".to_string(),
        ),
        (
            "identity",
            "borrowed",
            "has not granted to namespace mallory".to_string(),
        ),
        (
            "endpoints",
            "elsewhere",
            "are the platform admin's settings".to_string(),
        ),
        (
            "internal",
            "inside",
            format!(
                "server {} is refused: loopback addresses are RFC2136 servers only by the platform admin's --rfc2136-server-allow",
                bind.config.server.ip()
            ),
        ),
    ] {
        let mut spec = zone(TENANT, name, &format!("{name}.mallory.test"));
        spec["spec"]["dnsProviderSecretRef"] = json!({ "name": secret });
        apply(&zones, spec).await?;
        let message = refused(&zones, name, "InvalidSecret").await?;
        assert!(message.contains(&refusal), "{name}: {message}");
    }
    refused(&records, "inside", "ProviderUnavailable").await?;
    assert!(
        matches!(inside_webhook.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "nothing connected to the loopback webhook"
    );
    // The server never saw an update: its zone holds what it started with.
    let direct = Rfc2136Provider::new(bind.config.clone()).unwrap();
    let held: Vec<String> = direct
        .records("internal.mallory.test")
        .await
        .expect("BIND answers")
        .into_iter()
        .map(|e| e.dns_name)
        .collect();
    assert!(
        !held.iter().any(|name| name.starts_with("www.")),
        "nothing reached the server: {held:?}"
    );

    // The victim's host answers as before, and the tenant's own name still does.
    assert_eq!(answers(dns, VICTIM_HOST).await, [VICTIM_ADDRESS]);
    assert_eq!(answers(dns, "www.mallory.test").await, ["192.0.2.10"]);
    let victim_zone = Api::<ManagedZone>::namespaced(admin.clone(), VICTIM)
        .get("main")
        .await?;
    let ready = victim_zone
        .status
        .iter()
        .flat_map(|s| s.conditions.iter())
        .find(|c| c.type_ == conditions::READY)
        .map(|c| (c.status.clone(), c.reason.clone()));
    assert_eq!(ready, Some(("True".into(), "Serving".into())));

    // The holder gone, the oldest refused zone for its domain takes it.
    Api::<DNSRecord>::namespaced(admin.clone(), VICTIM)
        .delete("api", &Default::default())
        .await?;
    Api::<ManagedZone>::namespaced(admin.clone(), VICTIM)
        .delete("main", &Default::default())
        .await?;
    condition_becomes(
        &zones,
        "longer",
        conditions::READY,
        "the tenant's zone holds once the victim's is gone",
        |c| c.status == "True",
    )
    .await?;
    running.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_domain_grants_a_tenant_claims_only_its_own_suffixes() -> Result<(), Error> {
    let fleet = Fleet::builder().without_ocm().start().await?;
    let admin = fleet.hub.client();
    tenant_namespace(&admin).await?;
    let args = RunArgs {
        domain_grants: vec![
            format!("{VICTIM}=example.com"),
            format!("{TENANT}=mallory.test"),
        ],
        ..RunArgs::local(fleet.hub.kubeconfig_path())
    };
    let running = RunningHub::start(&args).await.expect("the hub starts");
    let dns = running.nameserver;
    let tenant = as_tenant(&fleet).await?;
    let zones: Api<ManagedZone> = Api::namespaced(tenant.clone(), TENANT);
    let records: Api<DNSRecord> = Api::namespaced(tenant.clone(), TENANT);

    // Created before the victim's zone: without grants the oldest claim would win.
    apply(&zones, zone(TENANT, "early", "example.com")).await?;
    apply(
        &records,
        record(TENANT, "early", "early", VICTIM_HOST, ATTACKER_ADDRESS),
    )
    .await?;
    let message = refused(&zones, "early", DOMAIN_NOT_GRANTED).await?;
    assert!(message.contains("granted: mallory.test"), "{message}");
    // A domain nobody holds, but not granted to the tenant.
    apply(&zones, zone(TENANT, "unclaimed", "elsewhere.org")).await?;
    refused(&zones, "unclaimed", DOMAIN_NOT_GRANTED).await?;

    victim(&admin, dns).await?;
    apply(&zones, zone(TENANT, "own", "mallory.test")).await?;
    apply(
        &records,
        record(TENANT, "own", "own", "www.mallory.test", "192.0.2.10"),
    )
    .await?;
    answered(dns, "www.mallory.test", &["192.0.2.10"]).await?;
    refused(&records, "early", DOMAIN_NOT_GRANTED).await?;
    assert_eq!(answers(dns, VICTIM_HOST).await, [VICTIM_ADDRESS]);
    assert!(answers(dns, "www.elsewhere.org").await.is_empty());
    running.stop().await;
    Ok(())
}

/// The attack on the spokes' networks: a tenant's record whose leaves are the agent's own
/// loopback and the cloud's metadata service, and probes written by hand at them. The hub
/// writes no probe for those leaves and says why; an agent runs only the probes the hub
/// sealed, so a listener on loopback sees no connection even where the address policy would
/// let one through. The zone's provider credentials named as headers are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_aim_probes_at_loopback_or_the_metadata_service() -> Result<(), Error> {
    use meridian_api::kuadrant::DNSHealthCheckProbe;
    use std::sync::atomic::{AtomicUsize, Ordering};

    let fleet = Fleet::builder().without_ocm().start().await?;
    let admin = fleet.hub.client();
    tenant_namespace(&admin).await?;
    let running = RunningHub::start(&RunArgs::local(fleet.hub.kubeconfig_path()))
        .await
        .expect("the hub starts");
    // What a probe would reach: a listener on loopback that counts connections.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    tokio::spawn(async move {
        while let Ok((_stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
        }
    });

    let tenant = as_tenant(&fleet).await?;
    let zones: Api<ManagedZone> = Api::namespaced(tenant.clone(), TENANT);
    let records: Api<DNSRecord> = Api::namespaced(tenant.clone(), TENANT);
    let probes: Api<DNSHealthCheckProbe> = Api::namespaced(tenant.clone(), TENANT);
    apply(&zones, zone(TENANT, "own", "mallory.test")).await?;
    let mut scan = record(TENANT, "scan", "own", "scan.mallory.test", "192.0.2.10");
    scan["spec"]["endpoints"][0]["targets"] =
        json!(["192.0.2.10", "127.0.0.1", "169.254.169.254", "198.51.100.7"]);
    scan["spec"]["healthCheck"] = json!({
        "endpoint": "/latest/meta-data/", "port": port, "protocol": "HTTP",
        "failureThreshold": 1, "interval": "5s",
    });
    // A cluster's agent reports the tenant's Gateway at 192.0.2.10 (as the agent would, in its
    // cluster namespace on the hub).
    apply(
        &Api::<Namespace>::all(admin.clone()),
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": "spoke-1" } }),
    )
    .await?;
    apply(
        &Api::<meridian_api::meridian::ClusterReport>::namespaced(admin.clone(), "spoke-1"),
        json!({
            "apiVersion": "meridian.dev/v1alpha1", "kind": "ClusterReport",
            "metadata": { "name": meridian_api::names::CLUSTER_REPORT, "namespace": "spoke-1" },
            "spec": {
                "clusterID": "00000000-0000-4000-8000-000000000001",
                "gateways": [{
                    "name": "web", "namespace": format!("kuadrant-{TENANT}"),
                    "addresses": [{ "type": "IPAddress", "value": "192.0.2.10" }],
                }],
            },
        }),
    )
    .await?;
    apply(&records, scan).await?;
    // The hub derives one probe, for the one leaf a probe may reach. The report may reach the
    // hub's cache after the record: its Gateway address then wakes the record again.
    let not_probed = "not probed, so never published: 127.0.0.1 (loopback addresses are never probed), 169.254.169.254 (link-local addresses are never probed), 198.51.100.7 (no cluster reports it as a Gateway address of namespace mallory)";
    condition_becomes(
        &records,
        "scan",
        conditions::HEALTHY,
        "the record says which leaves are not probed",
        |c| c.message.contains(not_probed),
    )
    .await?;
    let derived: Vec<String> = probes
        .list(&kube::api::ListParams::default().labels("meridian.dev/dns-record=scan"))
        .await?
        .items
        .into_iter()
        .map(|p| p.spec.address)
        .collect();
    assert_eq!(derived, ["192.0.2.10"]);

    // The zone's provider credentials named as probe headers: refused, and said so.
    apply(
        &Api::<k8s_openapi::api::core::v1::Secret>::namespaced(tenant.clone(), TENANT),
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/aws",
            "metadata": { "name": "aws", "namespace": TENANT },
            "stringData": { "AWS_ACCESS_KEY_ID": "AKIA0000", "AWS_SECRET_ACCESS_KEY": "hunter2" },
        }),
    )
    .await?;
    let mut exfiltrate = record(TENANT, "exfil", "own", "exfil.mallory.test", "192.0.2.11");
    exfiltrate["spec"]["healthCheck"] = json!({
        "endpoint": "/", "port": 80, "protocol": "HTTP",
        "additionalHeadersRef": { "name": "aws" },
    });
    apply(&records, exfiltrate).await?;
    let healthy = condition_becomes(
        &records,
        "exfil",
        conditions::HEALTHY,
        "the record says its header Secret is refused",
        |c| c.message.contains("probes wait for their headers"),
    )
    .await?;
    assert!(
        healthy.message.contains(
            "probes wait for their headers: Secret aws has type kuadrant.io/aws: probe headers come only from Secrets of type meridian.dev/probe-headers"
        ) && !healthy.message.contains("hunter2"),
        "{}",
        healthy.message
    );

    // Probes written by hand at the listener and the metadata service.
    for (name, address) in [("loopback", "127.0.0.1"), ("metadata", "169.254.169.254")] {
        apply(
            &probes,
            json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSHealthCheckProbe",
                "metadata": { "name": name, "namespace": TENANT },
                "spec": {
                    "port": port, "host": "scan.mallory.test", "address": address,
                    "path": "/latest/meta-data/", "protocol": "HTTP", "interval": "5s",
                    "failureThreshold": 1,
                },
            }),
        )
        .await?;
    }
    // An agent reading the hub's seal key where the hub keeps it (its namespace; this fleet
    // has no ManagedCluster, so the admin's client stands in for an agent's) and, to show that
    // the seal alone stops them, a test bed's address policy that would let probes reach
    // loopback.
    eventually(
        "the hub made its probe seal key",
        DEFAULT_PATIENCE,
        || async {
            Ok(
                Api::<k8s_openapi::api::core::v1::Secret>::namespaced(admin.clone(), "kube-system")
                    .get_opt(meridian_api::names::PROBE_SEAL_SECRET)
                    .await?,
            )
        },
    )
    .await?;
    let (reports, results) = tokio::sync::watch::channel(Vec::new());
    let prober = std::sync::Arc::new(meridian_agent::probe::Prober::new(
        &[],
        None,
        meridian_controllers::decide::probe_policy::ProbeAddressPolicy::test_bed(),
    ));
    let agent = tokio::spawn(meridian_agent::health::run(
        admin.clone(),
        "kube-system".into(),
        prober,
        reports,
    ));
    // First proof that the agent runs probes: it judges the one the hub derived and sealed.
    let derived = probes
        .list(&kube::api::ListParams::default().labels("meridian.dev/dns-record=scan"))
        .await?
        .items[0]
        .name_any();
    let reported = eventually(
        "the agent judges the probe the hub sealed",
        DEFAULT_PATIENCE,
        || {
            let reports = results.borrow().clone();
            let derived = derived.clone();
            async move {
                let judged = reports
                    .iter()
                    .any(|r| r.namespace == TENANT && r.name == derived);
                Ok(judged.then_some(reports))
            }
        },
    )
    .await?;
    let hand_written: Vec<&str> = reported
        .iter()
        .filter(|r| r.namespace == TENANT && r.name != derived)
        .map(|r| r.name.as_str())
        .collect();
    assert!(
        hand_written.is_empty(),
        "the probes written by hand are never run: {hand_written:?}"
    );
    assert_eq!(
        connections.load(Ordering::SeqCst),
        0,
        "no probe reached the listener on loopback"
    );
    agent.abort();
    running.stop().await;
    Ok(())
}

/// The attacks across namespaces, on the example fleet (a hub, three spokes with OCM's agents,
/// Meridian's agents): a tenant namespace named so that its Gateway's work had the victim's
/// work name under the earlier scheme (`gateway-gateways-prod-web` for the victim's `prod-web`
/// in `gateways`, and for the tenant's `web` in `gateways-prod`), and a DNSPolicy there
/// targeting the victim's Gateway across namespaces. Nothing of the victim changes: its work
/// and the Gateway the spokes run from it (the same UIDs), its Gateway's conditions, and what
/// its host answers from Ireland, the US and France.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_cannot_reach_another_namespaces_gateway_or_its_work() -> Result<(), Error> {
    use meridian_api::kuadrant::DNSPolicy;
    use meridian_api::upstream::{Gateway, ManifestWork};
    use meridian_e2e::example::{
        CLUSTER_SET, FRANCE, GATEWAY, IRELAND, NAMESPACE, RunningExample, UNITED_STATES, apply_ocm,
        dig, with_example_spokes,
    };
    use meridian_hub::gateway_bundle::{BUNDLE_WORK, Part, held_parts};
    use meridian_hub::placement::{gateway_label, legacy_gateway_work_name};

    const COLLIDING: &str = "gateways-prod";
    const TENANT_GATEWAY: &str = "web";
    assert_eq!(
        legacy_gateway_work_name(COLLIDING, TENANT_GATEWAY),
        legacy_gateway_work_name(NAMESPACE, GATEWAY),
        "under the earlier names the two works were one"
    );

    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    let admin = fleet.hub.client();
    let example = RunningExample::start(&fleet, std::time::Duration::from_secs(5)).await?;
    let dns = example.hub.nameserver;
    let subnets = [IRELAND, UNITED_STATES, FRANCE];
    let answers_now = || async move {
        let mut all = Vec::new();
        for subnet in subnets {
            let answers = tokio::task::spawn_blocking(move || dig(dns, Some(subnet)))
                .await
                .expect("dig ran");
            all.push(answers);
        }
        all
    };
    // Once every spoke has reported: until then a client may be answered by another
    // location's gateway (the catch-all), which is no baseline to compare with.
    let converged =
        [["10.0.0.1"], ["10.0.0.2"], ["10.0.0.3"]].map(|a| a.map(String::from).to_vec());
    let before_answers = eventually(
        "each location answers with its own spoke's gateway",
        DEFAULT_PATIENCE,
        || async {
            let all = answers_now().await;
            Ok((all == converged).then_some(all))
        },
    )
    .await?;
    // The part of spoke-1's bundle a Gateway has, if it has one.
    let works: Api<ManifestWork> = Api::namespaced(admin.clone(), "spoke-1");
    let part_of = |namespace: &'static str, name: &'static str| {
        let works = works.clone();
        async move {
            let bundle = serde_json::to_value(works.get(BUNDLE_WORK).await?)
                .expect("a ManifestWork serializes");
            let part: Option<Part> = held_parts(&[(0, &bundle)])
                .remove(&gateway_label(namespace, name))
                .map(|(_, part)| part);
            Ok::<_, Error>(part)
        }
    };
    let victim_part = part_of(NAMESPACE, GATEWAY)
        .await?
        .expect("the victim's Gateway is in spoke-1's bundle");
    let spoke_gateways: Api<Gateway> = Api::namespaced(
        fleet.spoke("spoke-1").client(),
        &format!("kuadrant-{NAMESPACE}"),
    );
    let spoke_gateway_uid = spoke_gateways.get(GATEWAY).await?.metadata.uid;
    let gateways: Api<Gateway> = Api::namespaced(admin.clone(), NAMESPACE);
    let victim_conditions = |gateway: Gateway| {
        let mut conditions: Vec<(String, String, String)> = gateway
            .status
            .iter()
            .flat_map(|s| s.conditions.iter())
            .filter(|c| {
                meridian_api::conditions::DNS_POLICY_AFFECTED_TYPES.contains(&c.type_.as_str())
            })
            .map(|c| (c.type_.clone(), c.status.clone(), c.message.clone()))
            .collect();
        conditions.sort();
        conditions
    };
    let before_conditions = victim_conditions(gateways.get(GATEWAY).await?);
    assert!(
        !before_conditions.is_empty(),
        "the victim's policy marks its Gateway"
    );

    // The platform gives the team a namespace, its cluster set, and rights on Gateways and
    // Meridian's kinds there.
    apply(
        &Api::<Namespace>::all(admin.clone()),
        json!({ "apiVersion": "v1", "kind": "Namespace", "metadata": { "name": COLLIDING } }),
    )
    .await?;
    apply_ocm(&admin, json!({
        "apiVersion": "cluster.open-cluster-management.io/v1beta2", "kind": "ManagedClusterSetBinding",
        "metadata": { "name": CLUSTER_SET, "namespace": COLLIDING },
        "spec": { "clusterSet": CLUSTER_SET },
    }))
    .await?;
    apply_ocm(
        &admin,
        json!({
            "apiVersion": "cluster.open-cluster-management.io/v1beta1", "kind": "Placement",
            "metadata": { "name": "everywhere", "namespace": COLLIDING },
            "spec": { "clusterSets": [CLUSTER_SET] },
        }),
    )
    .await?;
    grant_team(
        &admin,
        COLLIDING,
        json!([
            { "apiGroups": ["kuadrant.io"], "resources": ["managedzones", "dnsrecords", "dnspolicies"], "verbs": ["*"] },
            { "apiGroups": ["gateway.networking.k8s.io"], "resources": ["gateways"], "verbs": ["*"] },
        ]),
    )
    .await?;
    let tenant = as_tenant(&fleet).await?;

    // 1. A Gateway whose work had the victim's work name.
    apply(
        &Api::<Gateway>::namespaced(tenant.clone(), COLLIDING),
        fixtures::gateway(COLLIDING, TENANT_GATEWAY)
            .placement("everywhere")
            .listener("web", "web.mallory.test", 80, "HTTP")
            .json(),
    )
    .await?;
    // 2. A policy of the tenant's own on the victim's Gateway.
    let policies: Api<DNSPolicy> = Api::namespaced(tenant.clone(), COLLIDING);
    apply(
        &policies,
        json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
            "metadata": { "name": "borrowed", "namespace": COLLIDING },
            "spec": {
                "targetRef": { "name": GATEWAY, "namespace": NAMESPACE },
                "routingStrategy": "simple",
            },
        }),
    )
    .await?;

    // The tenant's Gateway did reach the spoke, as a part of its own: the attack ran.
    let tenant_on_spoke: Api<Gateway> = Api::namespaced(
        fleet.spoke("spoke-1").client(),
        &format!("kuadrant-{COLLIDING}"),
    );
    eventually(
        "the tenant's Gateway is placed on spoke-1",
        DEFAULT_PATIENCE,
        || async { Ok(tenant_on_spoke.get_opt(TENANT_GATEWAY).await?) },
    )
    .await?;
    assert!(part_of(COLLIDING, TENANT_GATEWAY).await?.is_some());
    let condition = condition_becomes(
        &policies,
        "borrowed",
        conditions::ACCEPTED,
        "the cross-namespace policy is refused",
        |c| c.status == "False",
    )
    .await?;
    assert_eq!(condition.reason, "Invalid", "{condition:?}");
    assert!(
        condition.message.contains("targetRef.namespace gateways"),
        "{condition:?}"
    );
    let tenant_records = Api::<DNSRecord>::namespaced(admin.clone(), COLLIDING)
        .list(&Default::default())
        .await?;
    assert!(
        tenant_records.items.is_empty(),
        "no record was made from the victim's Gateway"
    );

    // The victim: the same part of the bundle, the same Gateway on the spoke, the same
    // conditions and answers.
    assert_eq!(
        part_of(NAMESPACE, GATEWAY).await?,
        Some(victim_part),
        "the victim's part of the bundle was not rewritten"
    );
    assert_eq!(
        spoke_gateways.get(GATEWAY).await?.metadata.uid,
        spoke_gateway_uid,
        "the spoke's Gateway of the victim was never deleted"
    );
    assert_eq!(
        victim_conditions(gateways.get(GATEWAY).await?),
        before_conditions
    );
    assert_eq!(answers_now().await, before_answers);
    example.stop().await;
    Ok(())
}
