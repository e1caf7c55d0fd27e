//! Meridian's CRDs on a real API server: the examples apply as written, invalid manifests are
//! rejected with a message naming the field, the server fills in the defaults, immutable fields
//! stay put, and status is written only through the status subresource.

use std::path::{Path, PathBuf};
use std::process::Command;

use kube::api::{ApiResource, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use meridian_api::kuadrant::{
    DNSHealthCheckProbe, DNSPolicy, DNSRecord, HealthProtocol, ManagedZone, RoutingStrategy,
};
use meridian_api::meridian::{RouteBinding, Router};
use meridian_e2e::{ControlPlane, Error, Fleet};
use serde_json::json;

const NAMESPACE: &str = "default";

fn examples_dir() -> PathBuf {
    meridian_e2e::repository_root().join("deploy/examples")
}

fn kubectl(fleet: &Fleet, args: &[&str]) -> std::process::Output {
    Command::new(&fleet.assets.kubectl)
        .arg("--kubeconfig")
        .arg(fleet.hub.kubeconfig_path())
        .args(args)
        .output()
        .expect("kubectl runs")
}

fn object(yaml: &str) -> DynamicObject {
    yaml_serde::from_str(yaml)
        .unwrap_or_else(|error| panic!("test manifest is YAML: {error}\n{yaml}"))
}

fn api_for(client: &Client, object: &DynamicObject) -> Api<DynamicObject> {
    let kind = object
        .types
        .as_ref()
        .expect("apiVersion and kind")
        .kind
        .as_str();
    // The resource names come from Meridian's own types, as a controller would use them.
    let resource = match kind {
        "DNSPolicy" => ApiResource::erase::<DNSPolicy>(&()),
        "DNSRecord" => ApiResource::erase::<DNSRecord>(&()),
        "ManagedZone" => ApiResource::erase::<ManagedZone>(&()),
        "DNSHealthCheckProbe" => ApiResource::erase::<DNSHealthCheckProbe>(&()),
        "RouteBinding" => ApiResource::erase::<RouteBinding>(&()),
        "Router" => return Api::all_with(client.clone(), &ApiResource::erase::<Router>(&())),
        other => panic!("no Meridian kind {other}"),
    };
    Api::namespaced_with(client.clone(), NAMESPACE, &resource)
}

async fn create(client: &Client, yaml: &str) -> Result<DynamicObject, kube::Error> {
    let object = object(yaml);
    api_for(client, &object)
        .create(&PostParams::default(), &object)
        .await
}

async fn hub_only() -> Result<Fleet, Error> {
    Fleet::builder().without_ocm().start().await
}

#[tokio::test]
async fn examples_apply_as_written_and_list_under_the_meridian_category() -> Result<(), Error> {
    let fleet = hub_only().await?;
    let examples = examples_dir();
    let applied = kubectl(
        &fleet,
        &["apply", "-n", NAMESPACE, "-f", examples.to_str().unwrap()],
    );
    assert!(
        applied.status.success(),
        "kubectl apply -f deploy/examples/ failed:\n{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    let example_files = std::fs::read_dir(&examples).unwrap().count();
    let applied_lines = String::from_utf8_lossy(&applied.stdout).lines().count();
    assert_eq!(applied_lines, example_files, "one object per example file");

    // The examples read back into Meridian's own types.
    let client = fleet.hub.client();
    let policies = Api::<DNSPolicy>::namespaced(client.clone(), NAMESPACE)
        .list(&Default::default())
        .await?;
    assert_eq!(
        policies.items.len(),
        6,
        "the five seed policies and the failover one"
    );
    let azure = policies
        .items
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("send-more-to-azure"))
        .unwrap();
    let shorthand = &azure.spec.load_balancing.weighted.custom[0];
    let selector = shorthand
        .matcher()
        .selector()
        .expect("shorthand expands to a selector");
    assert_eq!(
        selector
            .match_labels
            .unwrap()
            .get("kuadrant.io/lb-attribute-cloud")
            .map(String::as_str),
        Some("Azure")
    );
    let zone = Api::<ManagedZone>::namespaced(client.clone(), NAMESPACE)
        .get("example-com")
        .await?;
    assert!(
        zone.spec.dns_provider_secret_ref.is_none(),
        "the example zone is served by the embedded nameserver"
    );
    let router = Api::<Router>::all(client).get("shard1").await?;
    assert_eq!(router.spec.dns, "shard1.apps.example.com");

    let listed = kubectl(&fleet, &["get", "meridian", "-A"]);
    assert!(
        listed.status.success(),
        "{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let table = String::from_utf8_lossy(&listed.stdout);
    for column in [
        "TARGET",
        "STRATEGY",
        "ACCEPTED",
        "PROGRAMMED",
        "DOMAIN",
        "PROVIDER",
        "RECORDS",
        "READY",
        "DNS",
    ] {
        assert!(
            table.contains(column),
            "`kubectl get meridian` lacks column {column}:\n{table}"
        );
    }
    for name in [
        "round-robin",
        "geo-and-send-more-to-azure",
        "prod-web",
        "example-com",
        "shard1",
    ] {
        assert!(
            table.contains(name),
            "`kubectl get meridian` lacks {name}:\n{table}"
        );
    }
    Ok(())
}

/// Each case: what is wrong, the manifest, and what the rejection must say (field and reason).
const INVALID: &[(&str, &str, &[&str])] = &[
    (
        "failover tiers on a simple policy",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, routingStrategy: simple, loadBalancing: {failover: {priorities: [{value: primary, priority: 1}]}}}",
        &["loadBalancing.failover needs routingStrategy loadbalanced"],
    ),
    (
        "failover priority out of range, no priorities, hold-down too long",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, loadBalancing: {failover: {priorities: [{value: primary, priority: 0}], holdDown: 2h}}}",
        &[
            "spec.loadBalancing.failover.priorities[0].priority",
            "failover.holdDown must be at most 1h",
        ],
    ),
    (
        "failover priority with both value and selector",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, loadBalancing: {failover: {priorities: [{value: a, selector: {matchLabels: {a: b}}, priority: 1}]}}}",
        &["exactly one of value and selector"],
    ),
    (
        "excluded addresses that are neither IPs, CIDR ranges nor hostnames",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, excludeAddresses: ['10.0.0.300/8', '10.0.0.300', 'not an address']}",
        &["spec.excludeAddresses", "must be IP addresses, CIDR ranges"],
    ),
    (
        "more than 20 excluded addresses",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, excludeAddresses: [10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5, 10.0.0.6, 10.0.0.7, 10.0.0.8, 10.0.0.9, 10.0.0.10, 10.0.0.11, 10.0.0.12, 10.0.0.13, 10.0.0.14, 10.0.0.15, 10.0.0.16, 10.0.0.17, 10.0.0.18, 10.0.0.19, 10.0.0.20, 10.0.0.21]}",
        &["spec.excludeAddresses", "must have at most 20 items"],
    ),
    (
        "negative default weight",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, loadBalancing: {weighted: {defaultWeight: -1}}}",
        &[
            "spec.loadBalancing.weighted.defaultWeight",
            "greater than or equal to 0",
        ],
    ),
    (
        "negative custom weight",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, loadBalancing: {weighted: {custom: [{value: AWS, weight: -5}]}}}",
        &[
            "spec.loadBalancing.weighted.custom[0].weight",
            "greater than or equal to 0",
        ],
    ),
    (
        "custom weight with both value and selector",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, loadBalancing: {weighted: {custom: [{value: AWS, selector: {matchLabels: {a: b}}, weight: 5}]}}}",
        &[
            "spec.loadBalancing.weighted.custom[0]",
            "exactly one of value and selector",
        ],
    ),
    (
        "custom weight with neither value nor selector",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, loadBalancing: {weighted: {custom: [{weight: 5}]}}}",
        &[
            "spec.loadBalancing.weighted.custom[0]",
            "exactly one of value and selector",
        ],
    ),
    (
        "attribute without value",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, loadBalancing: {weighted: {custom: [{attribute: cloud, selector: {matchLabels: {a: b}}, weight: 5}]}}}",
        &[
            "spec.loadBalancing.weighted.custom[0]",
            "attribute is only allowed together with value",
        ],
    ),
    (
        "health interval below 5 s",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, healthCheck: {interval: 2s}}",
        &["spec.healthCheck.interval", "at least 5s"],
    ),
    (
        "health interval that is not a duration",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, healthCheck: {interval: soon}}",
        &["spec.healthCheck.interval", "should match"],
    ),
    (
        "failure threshold 0",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, healthCheck: {failureThreshold: 0}}",
        &[
            "spec.healthCheck.failureThreshold",
            "greater than or equal to 1",
        ],
    ),
    (
        "port 0",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, healthCheck: {port: 0}}",
        &["spec.healthCheck.port", "greater than or equal to 1"],
    ),
    (
        "port above 65535",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, healthCheck: {port: 70000}}",
        &["spec.healthCheck.port", "less than or equal to 65535"],
    ),
    (
        "expected response outside 100-599",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, healthCheck: {expectedResponses: [200, 999]}}",
        &["spec.healthCheck.expectedResponses", "between 100 and 599"],
    ),
    (
        "health endpoint that is not a path",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, healthCheck: {endpoint: health}}",
        &["spec.healthCheck.endpoint", "starting with '/'"],
    ),
    (
        // The attack: a path that ends the request line and writes its own headers (and with
        // them, a second request) into every agent's probe.
        "health endpoint that writes its own request",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, healthCheck: {endpoint: \"/health HTTP/1.1\\r\\nX-Injected: 1\\r\\n\\r\\nGET /admin\"}}",
        &["spec.healthCheck.endpoint", "no spaces, CR, LF"],
    ),
    (
        "probe path with a line break",
        "kind: DNSHealthCheckProbe\nspec: {port: 80, host: app.example.com, address: 192.0.2.1, path: \"/h\\nX-Injected: 1\"}",
        &["spec.path", "no spaces, CR, LF"],
    ),
    (
        "probe host with a line break",
        "kind: DNSHealthCheckProbe\nspec: {port: 80, host: \"app.example.com\\r\\nX-Injected: 1\", address: 192.0.2.1}",
        &["spec.host", "must be a host name"],
    ),
    (
        "unknown protocol",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, healthCheck: {protocol: TCP}}",
        &["spec.healthCheck.protocol", "Unsupported value"],
    ),
    (
        "default geo that is not a country or continent",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, loadBalancing: {geo: {defaultGeo: EU}}}",
        &["spec.loadBalancing.geo.defaultGeo", "ISO-3166 alpha-2"],
    ),
    (
        "lowercase default geo",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, loadBalancing: {geo: {defaultGeo: ie}}}",
        &["spec.loadBalancing.geo.defaultGeo", "ISO-3166 alpha-2"],
    ),
    (
        "unknown routing strategy",
        "kind: DNSPolicy\nspec: {targetRef: {name: gw}, routingStrategy: weighted}",
        &["spec.routingStrategy", "Unsupported value", "loadbalanced"],
    ),
    (
        "target that is not a Gateway",
        "kind: DNSPolicy\nspec: {targetRef: {group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}}",
        &[
            "spec.targetRef",
            "must reference a Gateway or a ListenerSet",
        ],
    ),
    (
        "ListenerSet target of another group",
        "kind: DNSPolicy\nspec: {targetRef: {group: '', kind: ListenerSet, name: s}}",
        &[
            "spec.targetRef",
            "must reference a Gateway or a ListenerSet",
        ],
    ),
    (
        "target without a name",
        "kind: DNSPolicy\nspec: {targetRef: {kind: Gateway}}",
        &["spec.targetRef.name", "Required value"],
    ),
    (
        "record endpoint outside the root host",
        "kind: DNSRecord\nspec: {rootHost: app.example.com, managedZone: {name: z}, endpoints: [{dnsName: app.other.com, recordType: A, targets: [192.0.2.1]}]}",
        &[
            "spec",
            "every endpoints[].dnsName must be spec.rootHost or a name under it",
        ],
    ),
    (
        "record endpoint that only shares a suffix with the root host",
        "kind: DNSRecord\nspec: {rootHost: app.example.com, managedZone: {name: z}, endpoints: [{dnsName: myapp.example.com, recordType: A, targets: [192.0.2.1]}]}",
        &["every endpoints[].dnsName must be spec.rootHost"],
    ),
    (
        "unsupported record type",
        "kind: DNSRecord\nspec: {rootHost: app.example.com, managedZone: {name: z}, endpoints: [{dnsName: app.example.com, recordType: ALIAS, targets: [x]}]}",
        &["spec.endpoints[0].recordType", "Unsupported value"],
    ),
    (
        "zone domain that is not a DNS name",
        "kind: ManagedZone\nspec: {domainName: not a domain}",
        &["spec.domainName", "should match"],
    ),
    (
        "zone whose in-zone name server has no address",
        "kind: ManagedZone\nspec: {domainName: example.com., nameServers: [{name: ns.dns.example.net}, {name: ns1.example.com}]}",
        &["a name server inside the zone needs addresses"],
    ),
    (
        "DNSSEC on a zone at a provider",
        "kind: ManagedZone\nspec: {domainName: example.com, dnsProviderSecretRef: {name: aws}, dnssec: {enabled: true}}",
        &["spec.dnssec signs embedded zones only"],
    ),
    (
        "DNSSEC with an algorithm not offered",
        "kind: ManagedZone\nspec: {domainName: example.com, dnssec: {enabled: true, algorithm: RSASHA1}}",
        &["spec.dnssec.algorithm", "Unsupported value"],
    ),
    (
        "DNSSEC with a rollover step under a second",
        "kind: ManagedZone\nspec: {domainName: example.com, dnssec: {enabled: true, rolloverStep: 100ms}}",
        &["rolloverStep must be at least 1s"],
    ),
    (
        "SOA expire under a week",
        "kind: ManagedZone\nspec: {domainName: example.com, soaExpire: 24h}",
        &["spec.soaExpire must be between 168h (a week) and 8760h (a year)"],
    ),
    (
        "SOA expire on a zone at a provider",
        "kind: ManagedZone\nspec: {domainName: example.com, dnsProviderSecretRef: {name: aws}, soaExpire: 336h}",
        &["spec.soaExpire sets an embedded zone's SOA"],
    ),
    (
        "routing delegate on an embedded zone",
        "kind: ManagedZone\nspec: {domainName: example.com, routingDelegate: klb}",
        &["spec.routingDelegate names the embedded zone"],
    ),
    (
        "routing delegate that is not a name",
        "kind: ManagedZone\nspec: {domainName: example.com, dnsProviderSecretRef: {name: aws}, routingDelegate: 'Klb/x'}",
        &["spec.routingDelegate", "should match"],
    ),
    (
        "zone name server address that is not an IP",
        "kind: ManagedZone\nspec: {domainName: example.com, nameServers: [{name: ns1.example.com, addresses: [192.0.2.300]}]}",
        &["nameServers[0].addresses", "must be IP addresses"],
    ),
    (
        "probe with port 0 and a 1 s interval",
        "kind: DNSHealthCheckProbe\nspec: {port: 0, host: app.example.com, address: 192.0.2.1, interval: 1s}",
        &["spec.port", "spec.interval", "at least 5s"],
    ),
    (
        "router whose DNS suffix is not a DNS name",
        "apiVersion: meridian.dev/v1alpha1\nkind: Router\nspec: {dns: 'shard one', addresses: [192.0.2.1]}",
        &["spec.dns", "should match"],
    ),
    (
        "router with both a Service and fixed addresses",
        "apiVersion: meridian.dev/v1alpha1\nkind: Router\nspec: {dns: shard1.example.com, addresses: [192.0.2.1], service: {namespace: infra, name: router}}",
        &["exactly one of spec.service and spec.addresses"],
    ),
    (
        "router with no addresses at all",
        "apiVersion: meridian.dev/v1alpha1\nkind: Router\nspec: {dns: shard1.example.com, capacity: 0}",
        &[
            "exactly one of spec.service and spec.addresses",
            "spec.capacity",
        ],
    ),
];

fn full_manifest(index: usize, yaml: &str) -> String {
    let api_version = if yaml.contains("apiVersion:") {
        ""
    } else {
        "apiVersion: kuadrant.io/v1alpha1\n"
    };
    format!("{api_version}metadata: {{name: invalid-{index}}}\n{yaml}")
}

#[tokio::test]
async fn invalid_manifests_are_rejected_with_the_field_named() -> Result<(), Error> {
    assert!(INVALID.len() >= 15);
    let fleet = hub_only().await?;
    let client = fleet.hub.client();
    let mut failures = Vec::new();
    for (index, (what, yaml, expected)) in INVALID.iter().enumerate() {
        match create(&client, &full_manifest(index, yaml)).await {
            Ok(_) => failures.push(format!("{what}: accepted")),
            Err(kube::Error::Api(status)) => {
                let missing: Vec<_> = expected
                    .iter()
                    .filter(|part| !status.message.contains(*part))
                    .collect();
                if status.code != 422 || !missing.is_empty() {
                    failures.push(format!(
                        "{what}: {} {:?} lacks {missing:?}",
                        status.code, status.message
                    ));
                }
            }
            Err(other) => failures.push(format!("{what}: {other}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases wrong:\n{}",
        failures.len(),
        INVALID.len(),
        failures.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn server_applies_defaults_and_keeps_immutable_fields() -> Result<(), Error> {
    let fleet = hub_only().await?;
    let client = fleet.hub.client();

    create(&client, "apiVersion: kuadrant.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: minimal}\nspec: {targetRef: {name: gw}, healthCheck: {}}").await?;
    let policy = Api::<DNSPolicy>::namespaced(client.clone(), NAMESPACE)
        .get("minimal")
        .await?;
    assert_eq!(policy.spec.target_ref.group, "gateway.networking.k8s.io");
    assert_eq!(policy.spec.target_ref.kind, "Gateway");
    assert_eq!(policy.spec.routing_strategy, RoutingStrategy::Loadbalanced);
    assert_eq!(policy.spec.load_balancing.weighted.default_weight, 120);
    assert!(policy.spec.load_balancing.geo.is_none());
    let health = policy.spec.health_check.expect("healthCheck kept");
    assert_eq!(
        (
            health.endpoint.as_str(),
            health.port,
            health.protocol,
            health.failure_threshold,
            health.interval.as_str()
        ),
        ("/", 443, HealthProtocol::Https, 3, "30s")
    );
    assert_eq!(health.expected_responses, [200, 201]);
    assert!(!health.allow_insecure_certificates);

    create(&client, "apiVersion: kuadrant.io/v1alpha1\nkind: DNSHealthCheckProbe\nmetadata: {name: minimal}\nspec: {port: 8443, host: app.example.com, address: 192.0.2.1}").await?;
    let probe = Api::<DNSHealthCheckProbe>::namespaced(client.clone(), NAMESPACE)
        .get("minimal")
        .await?;
    assert_eq!(
        (
            probe.spec.path.as_str(),
            probe.spec.interval.as_str(),
            probe.spec.failure_threshold
        ),
        ("/", "30s", 3)
    );
    assert_eq!(probe.spec.expected_responses, [200, 201]);

    // Immutable fields: rootHost, ownerID (once set), domainName, a binding's route and router.
    create(&client, "apiVersion: kuadrant.io/v1alpha1\nkind: DNSRecord\nmetadata: {name: rec}\nspec: {rootHost: app.example.com, ownerID: owner-a, managedZone: {name: z}, endpoints: [{dnsName: app.example.com, recordType: A, targets: [192.0.2.1], recordTTL: 60}]}").await?;
    create(&client, "apiVersion: kuadrant.io/v1alpha1\nkind: ManagedZone\nmetadata: {name: zone}\nspec: {domainName: example.com}").await?;
    create(&client, "apiVersion: meridian.dev/v1alpha1\nkind: RouteBinding\nmetadata: {name: bind}\nspec: {routeRef: {kind: Route, name: web}, router: shard1, host: web.shard1.example.com}").await?;
    for (manifest, patch, expected) in [
        (
            "kind: DNSRecord\nmetadata: {name: rec}",
            json!({"spec": {"rootHost": "other.example.com", "endpoints": []}}),
            "spec.rootHost is immutable",
        ),
        (
            "kind: DNSRecord\nmetadata: {name: rec}",
            json!({"spec": {"ownerID": "owner-b"}}),
            "spec.ownerID is immutable",
        ),
        (
            "kind: DNSRecord\nmetadata: {name: rec}",
            json!({"spec": {"ownerID": null}}),
            "spec.ownerID is immutable",
        ),
        (
            "kind: ManagedZone\nmetadata: {name: zone}",
            json!({"spec": {"domainName": "example.org"}}),
            "spec.domainName is immutable",
        ),
        (
            "apiVersion: meridian.dev/v1alpha1\nkind: RouteBinding\nmetadata: {name: bind}",
            json!({"spec": {"router": "shard2"}}),
            "routeRef and router are immutable",
        ),
    ] {
        let manifest = if manifest.contains("apiVersion") {
            manifest.to_string()
        } else {
            format!("apiVersion: kuadrant.io/v1alpha1\n{manifest}")
        };
        let target = object(&manifest);
        let name = target.metadata.name.clone().unwrap();
        let error = api_for(&client, &target)
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect_err(expected);
        assert!(error.to_string().contains(expected), "{expected}: {error}");
    }
    // The host of a binding may change (a reschedule onto the same router renames nothing else).
    let binding =
        object("apiVersion: meridian.dev/v1alpha1\nkind: RouteBinding\nmetadata: {name: bind}");
    api_for(&client, &binding)
        .patch(
            "bind",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"host": "web2.shard1.example.com"}})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn status_is_written_only_through_the_status_subresource() -> Result<(), Error> {
    let fleet = hub_only().await?;
    exercise_status(&fleet.hub).await
}

async fn exercise_status(cluster: &ControlPlane) -> Result<(), Error> {
    let client = cluster.client();
    let policies = Api::<DNSPolicy>::namespaced(client.clone(), NAMESPACE);
    create(&client, "apiVersion: kuadrant.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: statused}\nspec: {targetRef: {name: gw}}").await?;

    let condition = json!({"type": "Accepted", "status": "True", "reason": "Accepted", "message": "ok", "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1});
    let through_status = json!({"spec": {"routingStrategy": "simple"}, "status": {"conditions": [condition], "observedGeneration": 1}});
    let through_main = json!({"status": {"observedGeneration": 99}});
    let (after, after_main) =
        meridian_e2e::patch_status_then_main(&policies, "statused", through_status, through_main)
            .await?;
    assert_eq!(
        after.spec.routing_strategy,
        RoutingStrategy::Loadbalanced,
        "spec is not writable through /status"
    );
    let status = after.status.expect("status written");
    assert_eq!(status.observed_generation, Some(1));
    assert_eq!(
        meridian_api::conditions::condition_status(&status.conditions, "Accepted"),
        Some(true)
    );

    assert_eq!(
        after_main.status.unwrap().observed_generation,
        Some(1),
        "status is not writable through the main resource"
    );
    Ok(())
}

#[test]
fn every_example_parses_into_meridian_types() {
    for entry in std::fs::read_dir(examples_dir()).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        let kind = object(&text).types.unwrap().kind;
        let parsed = match kind.as_str() {
            "DNSPolicy" => yaml_serde::from_str::<DNSPolicy>(&text).map(drop),
            "ManagedZone" => yaml_serde::from_str::<ManagedZone>(&text).map(drop),
            "Router" => yaml_serde::from_str::<Router>(&text).map(drop),
            other => panic!("{}: no Meridian type for {other}", path_name(&path)),
        };
        parsed.unwrap_or_else(|error| panic!("{}: {error}", path_name(&path)));
    }
}

fn path_name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// Manifests written for multicluster-gateway-controller (`fixtures/mgc`): every one under
/// `accepted/` applies, every one under `refused/` is refused by the API server, and
/// `meridian-hub check-manifests` predicts both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mgc_manifests_apply_unchanged_or_are_refused_as_check_manifests_says() -> Result<(), Error>
{
    let fleet = hub_only().await?;
    let client = fleet.hub.client();
    meridian_e2e::ensure_namespace(&client, "mgc").await?;
    let crds = meridian_api::crds::served_crds();
    let fixtures = meridian_e2e::repository_root().join("e2e/tests/fixtures/mgc");
    let mut seen = 0;
    for verdict in ["accepted", "refused"] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(fixtures.join(verdict))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            for document in yaml_serde::Deserializer::from_str(&text) {
                let value =
                    <serde_json::Value as serde::Deserialize>::deserialize(document).unwrap();
                let name = format!("{}: {}", file.display(), value["metadata"]["name"]);
                let findings = meridian_hub::check_manifests_command::check_object(&value, &crds)
                    .expect("a Meridian kind");
                let predicted_refusal = findings.iter().any(|f| f.is_refusal());
                let object: DynamicObject = serde_json::from_value(value.clone()).unwrap();
                let kind = object.types.as_ref().unwrap().kind.clone();
                let resource = match kind.as_str() {
                    "DNSPolicy" => ApiResource::erase::<DNSPolicy>(&()),
                    "DNSRecord" => ApiResource::erase::<DNSRecord>(&()),
                    "ManagedZone" => ApiResource::erase::<ManagedZone>(&()),
                    other => panic!("no fixture kind {other}"),
                };
                let created =
                    Api::<DynamicObject>::namespaced_with(client.clone(), "mgc", &resource)
                        .create(&PostParams::default(), &object)
                        .await;
                match (&created, verdict) {
                    (Ok(_), "accepted") | (Err(kube::Error::Api(_)), "refused") => {}
                    _ => panic!("{name}: expected {verdict}, the server said {created:?}"),
                }
                assert_eq!(
                    predicted_refusal,
                    verdict == "refused",
                    "{name}: check-manifests said {findings:#?}"
                );
                if let Err(kube::Error::Api(status)) = &created {
                    eprintln!("{name}: refused: {}", status.message);
                }
                seen += 1;
            }
        }
    }
    assert_eq!(seen, 10, "every fixture was checked");
    Ok(())
}

/// Kuadrant's own v1 examples (`hub/tests/fixtures/kuadrant-v1`), converted as
/// `meridian-hub convert` converts them, one cluster each and the first as a two-cluster fleet
/// with custom weights: every ManagedZone and DNSPolicy written passes Meridian's schema and
/// CEL rules on a real API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn converted_kuadrant_v1_examples_apply() -> Result<(), Error> {
    use meridian_hub::convert::fleet::{Options, convert};
    use meridian_hub::convert::kuadrant_v1::ClusterManifests;
    let fleet = hub_only().await?;
    let client = fleet.hub.client();
    let fixtures = meridian_e2e::repository_root().join("hub/tests/fixtures/kuadrant-v1");
    let cluster = |name: &str, namespace: &str, files: &[String]| {
        let mut cluster = ClusterManifests::new(name);
        for file in files {
            let text = std::fs::read_to_string(fixtures.join(file))
                .unwrap()
                .replace("${DNSPOLICY_NAMESPACE}", namespace)
                .replace("${KUADRANT_ZONE_ROOT_DOMAIN}", "example.com");
            let text = if name == "us-1" {
                text.replace("geo: GEO-EU", "geo: US")
                    .replace("weight: 120", "weight: 200")
                    .replace("defaultGeo: true", "defaultGeo: false")
            } else {
                text
            };
            for document in yaml_serde::Deserializer::from_str(&text) {
                let value =
                    <serde_json::Value as serde::Deserialize>::deserialize(document).unwrap();
                cluster.add(&value).unwrap();
            }
        }
        cluster
    };
    let examples = [
        "dnspolicy.yaml",
        "dnspolicy-healthchecks.yaml",
        "dnspolicy-exclude-address.yaml",
        "dnspolicy-bad-strategy.yaml",
        "dnspolicy-delegated.yaml",
        "kuadrant_v1_dnspolicy.yaml",
    ];
    let options = Options {
        zones: vec!["example.com".into()],
        insecure_health_checks: true,
    };
    let mut created = 0;
    for (index, example) in examples.iter().enumerate() {
        let namespace = format!("kuadrant-{index}");
        meridian_e2e::ensure_namespace(&client, &namespace).await?;
        let files = [example.to_string(), "gateway.yaml".to_string()];
        let mut clusters = vec![cluster("eu-1", &namespace, &files)];
        if index == 0 {
            clusters.push(cluster("us-1", &namespace, &files));
        }
        let conversion = convert(&clusters, &options);
        assert_eq!(conversion.policies.len(), 1, "{example}");
        if index == 0 {
            assert_eq!(
                conversion.policies[0]
                    .spec
                    .load_balancing
                    .weighted
                    .custom
                    .len(),
                1
            );
        }
        for zone in &conversion.zones {
            let namespace = zone.metadata.namespace.as_deref().unwrap();
            Api::<ManagedZone>::namespaced(client.clone(), namespace)
                .create(&PostParams::default(), zone)
                .await
                .unwrap_or_else(|e| panic!("{example}: the zone is refused: {e}"));
            created += 1;
        }
        for policy in &conversion.policies {
            let namespace = policy.metadata.namespace.as_deref().unwrap();
            Api::<DNSPolicy>::namespaced(client.clone(), namespace)
                .create(&PostParams::default(), policy)
                .await
                .unwrap_or_else(|e| panic!("{example}: the policy is refused: {e}"));
            created += 1;
        }
    }
    // Six policies; a zone for each but the delegated one, whose Secret the manifests lack.
    assert_eq!(created, 11);
    Ok(())
}
