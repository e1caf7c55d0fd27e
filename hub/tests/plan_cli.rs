//! `meridian-hub plan` as a user runs it: every documented scenario plans in every format, the
//! JSON is exactly the documented shape, and bad input is a message and a non-zero exit.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn hub(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_meridian-hub"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("meridian-hub starts");
    if let Some(text) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn examples() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/plan-examples");
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
}

#[test]
fn every_documented_scenario_plans_in_every_format() {
    assert!(
        examples().len() >= 4,
        "the seeds' four policies are documented"
    );
    for file in examples() {
        for format in ["yaml", "json", "tree", "dot"] {
            let output = hub(&["plan", "-f", file.to_str().unwrap(), "-o", format], None);
            assert!(
                output.status.success(),
                "{} -o {format}: {}",
                file.display(),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(!output.stdout.is_empty());
        }
    }
}

#[test]
fn json_has_the_documented_shape() {
    let scenario = "
gateway: {name: prod-web, namespace: gateways, listeners: [{name: api, hostname: api.example.com}, {name: nohost}]}
policy: {routingStrategy: simple}
clusters:
  - {name: c1, clusterID: test-cluster-1, addresses: [{type: IPAddress, value: 172.31.0.2}, {value: 172.31.0.1}]}
";
    let output = hub(&["plan", "-f", "-", "-o", "json"], Some(scenario));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        json,
        serde_json::json!({"records": [{
            "name": "prod-web-api",
            "rootHost": "api.example.com",
            "endpoints": [{"dnsName": "api.example.com", "recordType": "A", "targets": ["172.31.0.1", "172.31.0.2"], "recordTTL": 60}],
        }]})
    );
}

#[test]
fn excluded_addresses_are_planned_as_the_hub_publishes_them() {
    let scenario = "
gateway: {name: prod-web, namespace: gateways, listeners: [{name: api, hostname: api.example.com}]}
policy: {routingStrategy: simple, excludeAddresses: [10.0.0.0/8, 172.31.0.2]}
clusters:
  - {name: c1, clusterID: test-cluster-1, addresses: [{value: 172.31.0.2}, {value: 172.31.0.1}, {value: 10.1.2.3}]}
";
    let output = hub(&["plan", "-f", "-", "-o", "json"], Some(scenario));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        json["records"][0]["endpoints"][0]["targets"],
        serde_json::json!(["172.31.0.1"]),
        "{json}"
    );
    let refused = hub(
        &["plan", "-f", "-"],
        Some(&scenario.replace("10.0.0.0/8", "'10.0.0.0/33'")),
    );
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("excludeAddresses"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}

#[test]
fn a_provider_that_cannot_hold_the_tree_is_named_and_fails_the_plan() {
    let scenario = "
gateway: {name: prod-web, namespace: gateways, listeners: [{name: api, hostname: api.example.com}]}
policy: {loadBalancing: {weighted: {defaultWeight: 120}, geo: {defaultGeo: IE}}}
clusters:
  - {name: c1, clusterID: test-cluster-1, labels: {kuadrant.io/lb-attribute-geo-code: IE}, addresses: [{value: 172.31.0.1}]}
  - {name: c2, clusterID: test-cluster-2, labels: {kuadrant.io/lb-attribute-geo-code: US}, addresses: [{value: 172.31.0.2}]}
";
    let plan = |provider: &str, format: &str| {
        hub(
            &["plan", "-f", "-", "-o", format],
            Some(&format!("{scenario}provider: {provider}\n")),
        )
    };
    for provider in ["route53", "azure", "embedded"] {
        let output = plan(provider, "json");
        assert!(output.status.success(), "{provider}");
        let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(json["records"][0].get("unsupported"), None, "{provider}");
    }
    let webhook = plan("webhook", "json");
    assert!(!webhook.status.success());
    let json: serde_json::Value = serde_json::from_slice(&webhook.stdout).unwrap();
    assert_eq!(
        json["records"][0]["unsupported"],
        serde_json::json!([
            "klb.api.example.com: webhook has no GEO answers, and the geo codes *, IE, US answer differently"
        ])
    );
    assert!(
        String::from_utf8_lossy(&webhook.stderr)
            .contains("the webhook provider cannot hold 1 of the records"),
        "{}",
        String::from_utf8_lossy(&webhook.stderr)
    );
    // Google holds GEO by region, not by country, and has no catch-all location.
    let google = plan("google", "tree");
    let text = String::from_utf8_lossy(&google.stdout);
    assert!(!google.status.success());
    assert!(
        text.contains(
            "cannot hold: klb.api.example.com: google has no GEO answers by countries (geo code IE)"
        ),
        "{text}"
    );
    assert!(
        text.contains("held differently: klb.api.example.com: Cloud DNS has no catch-all location"),
        "{text}"
    );
    let unknown = plan("cloudflare", "json");
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown provider \"cloudflare\""));
}

#[test]
fn bad_input_is_a_message_and_a_failure_never_a_panic() {
    let gateway =
        "gateway: {name: gw, namespace: ns, listeners: [{name: api, hostname: api.example.com}]}\n";
    let cases = [
        (
            format!("{gateway}policy: {{loadBalancing: {{weighted: {{default: 10}}}}}}"),
            "unknown field policy.loadBalancing.weighted.default",
        ),
        (
            format!("{gateway}policy: {{loadBalancing: {{geo: {{defaultGeo: EU}}}}}}"),
            "defaultGeo \"EU\"",
        ),
        (
            format!("{gateway}policy: {{loadBalancing: {{weighted: {{defaultWeight: -1}}}}}}"),
            "defaultWeight",
        ),
        (
            format!("{gateway}policy: {{routingStrategy: weighted}}"),
            "unknown variant `weighted`",
        ),
        (
            format!(
                "{gateway}clusters: [{{name: c1, clusterID: x, addresses: [{{value: 300.0.0.1}}]}}]"
            ),
            "cluster c1: invalid address",
        ),
        (
            format!(
                "{gateway}policy: {{routingStrategy: simple}}\nclusters: [{{name: c1, clusterID: a, addresses: [{{type: Hostname, value: a.example.net}}]}}, {{name: c2, clusterID: b, addresses: [{{type: Hostname, value: b.example.net}}]}}]"
            ),
            "cannot point at several hostnames",
        ),
        ("gateway: [".to_string(), "invalid scenario"),
    ];
    for (scenario, expected) in cases {
        let output = hub(&["plan", "-f", "-"], Some(&scenario));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{expected}: accepted");
        assert!(stderr.contains(expected), "{expected:?} not in {stderr:?}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    }
    let missing = hub(&["plan", "-f", "/nonexistent/scenario.yaml"], None);
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("cannot read /nonexistent/scenario.yaml")
    );
}

/// A free loopback port for both UDP and TCP.
fn free_port() -> u16 {
    meridian_testkit::ports::reserve_loopback_port(meridian_testkit::ports::Listens::TcpAndUdp)
        .unwrap()
}

#[test]
fn the_nameserver_command_serves_a_plan_to_dig() {
    let dir = tempfile::tempdir().unwrap();
    let example = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../docs/plan-examples/geo.yaml");
    let plan = hub(
        &["plan", "-f", example.to_str().unwrap(), "-o", "json"],
        None,
    );
    assert!(plan.status.success());
    let records = dir.path().join("plan.json");
    std::fs::write(&records, &plan.stdout).unwrap();

    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let mut server = Command::new(env!("CARGO_BIN_EXE_meridian-hub"))
        .args([
            "nameserver",
            "--records",
            records.to_str().unwrap(),
            "--zone",
            "example.com",
            "--listen",
            &listen,
        ])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut answer = String::new();
    for _ in 0..50 {
        let dig = Command::new("dig")
            .args([
                "@127.0.0.1",
                "-p",
                &port.to_string(),
                "+short",
                "+time=1",
                "+tries=1",
                "api.example.com",
            ])
            .output()
            .expect("dig runs (Debian dnsutils)");
        answer = String::from_utf8_lossy(&dig.stdout).into_owned();
        if answer.contains("172.31.0.1") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(answer.lines().last(), Some("172.31.0.1"), "{answer}");
    assert_eq!(answer.lines().count(), 4, "the whole chain: {answer}");
}

/// `meridian-hub explain -f` on a documented scenario: each client's GEO branch and weighted
/// shares, by cluster, in text and JSON; bad input is a message and a non-zero exit.
#[test]
fn explain_tells_each_client_its_branch_and_shares_offline() {
    let scenario = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../docs/plan-examples/geo-custom-weights.yaml");
    let scenario = scenario.to_str().unwrap();
    // (client flags, the branch at klb, served by)
    let table: [(&[&str], &str, &str); 3] = [
        (
            &["--country", "US"],
            "geo-country",
            "served by: us-gcp 100%",
        ),
        (
            &["--country", "IE"],
            "geo-country",
            "served by: eu-aws 25%, eu-azure 75%",
        ),
        (
            &["--country", "FR", "--continent", "EU"],
            "geo-catch-all",
            "served by: eu-aws 25%, eu-azure 75%",
        ),
    ];
    for (client, branch, served) in table {
        let mut args = vec!["explain", "api.example.com", "-f", scenario];
        args.extend(client);
        let output = hub(&args, None);
        let text = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "{client:?}: {output:?}");
        assert!(
            text.contains(&format!("klb.api.example.com: {branch}")),
            "{client:?}: {text}"
        );
        assert!(text.contains(served), "{client:?}: {text}");
    }
    let output = hub(
        &[
            "explain",
            "api.example.com",
            "--country",
            "US",
            "-f",
            scenario,
            "-o",
            "json",
        ],
        None,
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        json["answer"]["answers"],
        serde_json::json!({ "172.31.1.1": 1.0 })
    );
    assert_eq!(json["records"][0]["leaves"][1]["cluster"], "us-gcp");

    let missing = hub(
        &[
            "explain",
            "api.example.org",
            "--country",
            "US",
            "-f",
            scenario,
        ],
        None,
    );
    assert!(!missing.status.success());
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("no ManagedZone holds api.example.org"),
        "{missing:?}"
    );
    let no_client = hub(&["explain", "api.example.com", "-f", scenario], None);
    assert!(!no_client.status.success(), "a client is required");
}
