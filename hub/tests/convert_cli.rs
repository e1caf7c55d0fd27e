//! `meridian-hub convert` as a user runs it, on Kuadrant's own v1 examples
//! (`fixtures/kuadrant-v1`): what each becomes, the findings, the exit status, a fleet of
//! per-cluster policies becoming one, and no Secret value ever printed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// What Kuadrant's example script fills the placeholders with, and the provider keys, which
/// must never be printed.
const NAMESPACE: &str = "gateway";
const ACCESS_KEY: &str = "AKIACONVERTTESTKEY";
const SECRET_KEY: &str = "convert-test-secret-value";

fn fixture(name: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kuadrant-v1")
        .join(name);
    std::fs::read_to_string(&path)
        .unwrap()
        .replace("${DNSPOLICY_NAMESPACE}", NAMESPACE)
        .replace("${KUADRANT_ZONE_ROOT_DOMAIN}", "example.com")
        .replace("${KUADRANT_AWS_ACCESS_KEY_ID}", ACCESS_KEY)
        .replace("${KUADRANT_AWS_SECRET_ACCESS_KEY}", SECRET_KEY)
        .replace("${KUADRANT_AWS_REGION}", "eu-west-1")
}

/// A cluster's manifests: the policy, with Kuadrant's example Gateway and provider Secret.
fn cluster_dir(root: &Path, cluster: &str, policy: &str) -> String {
    let dir = root.join(cluster);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("policy.yaml"), policy).unwrap();
    for shared in ["gateway.yaml", "aws-dns-provider-secret.yaml"] {
        std::fs::write(dir.join(shared), fixture(shared)).unwrap();
    }
    format!("{cluster}={}", dir.display())
}

fn convert(args: &[&str]) -> (Output, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_meridian-hub"))
        .arg("convert")
        .args(args)
        .output()
        .expect("meridian-hub runs");
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    let stderr = String::from_utf8(output.stderr.clone()).unwrap();
    for printed in [&stdout, &stderr] {
        assert!(
            !printed.contains(ACCESS_KEY) && !printed.contains(SECRET_KEY),
            "a Secret value was printed:\n{printed}"
        );
    }
    (output, stdout, stderr)
}

fn documents(stdout: &str) -> Vec<serde_json::Value> {
    yaml_serde::Deserializer::from_str(stdout)
        .map(|d| <serde_json::Value as serde::Deserialize>::deserialize(d).unwrap())
        .collect()
}

#[test]
fn each_kuadrant_example_converts_with_its_findings() {
    // (example, exit 0?, what stdout holds, what stderr holds)
    let cases: [(&str, bool, &[&str], &[&str]); 6] = [
        (
            "dnspolicy.yaml",
            true,
            &[
                "defaultGeo: GEO-EU",
                "kuadrant.io/lb-attribute-geo-code: GEO-EU",
                "domainName: example.com",
                "name: aws-credentials",
            ],
            &["0 of them changing answers"],
        ),
        (
            "dnspolicy-healthchecks.yaml",
            false,
            &[
                "failureThreshold: 4",
                "endpoint: /healthz",
                "interval: 300s",
                "allowInsecureCertificates: true",
            ],
            &[
                "the continent is GEO-EU",
                "Meridian counts failures that reach it: written 4",
            ],
        ),
        (
            "dnspolicy-exclude-address.yaml",
            false,
            &["- 10.89.0.0/16", "- some.local.domain", "- 127.0.0.1"],
            &["the continent is GEO-EU"],
        ),
        (
            "dnspolicy-bad-strategy.yaml",
            true,
            &["routingStrategy: simple"],
            &["routingStrategy simple, one record holding every cluster's addresses"],
        ),
        (
            "dnspolicy-delegated.yaml",
            false,
            &["defaultGeo: GEO-EU"],
            &["no one Secret labelled kuadrant.io/default-provider=true in gateway"],
        ),
        (
            "kuadrant_v1_dnspolicy.yaml",
            true,
            &[
                "namespace: default",
                "protocol: HTTP\n",
                "name: provider-ref",
            ],
            &["0 of them changing answers"],
        ),
    ];
    for (example, succeeds, out, err) in cases {
        let root = tempfile::tempdir().unwrap();
        let cluster = cluster_dir(root.path(), "eu-1", &fixture(example));
        let (output, stdout, stderr) = convert(&["--zone", "example.com", &cluster]);
        assert_eq!(
            output.status.success(),
            succeeds,
            "{example}:\n{stdout}\n{stderr}"
        );
        for said in out {
            assert!(
                stdout.contains(said),
                "{example}: {said:?} not in\n{stdout}"
            );
        }
        for said in err {
            assert!(
                stderr.contains(said),
                "{example}: {said:?} not in\n{stderr}"
            );
        }
        let kinds: Vec<String> = documents(&stdout)
            .iter()
            .map(|d| d["kind"].as_str().unwrap().to_string())
            .collect();
        assert!(
            kinds.contains(&"DNSPolicy".to_string()),
            "{example}: {kinds:?}"
        );
    }
}

/// Kuadrant's example on two clusters, the second in the US at a higher weight and not the
/// default geo: one Meridian policy, and the labels that say each cluster's part.
#[test]
fn a_fleet_of_kuadrant_policies_becomes_one_policy_with_cluster_labels_or_agent_flags() {
    let root = tempfile::tempdir().unwrap();
    let eu = cluster_dir(root.path(), "eu-1", &fixture("dnspolicy.yaml"));
    let us_policy = fixture("dnspolicy.yaml")
        .replace("geo: GEO-EU", "geo: US")
        .replace("weight: 120", "weight: 200")
        .replace("defaultGeo: true", "defaultGeo: false");
    let us = cluster_dir(root.path(), "us-1", &us_policy);
    let (output, stdout, stderr) = convert(&["--zone", "example.com", &eu, &us]);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let documents = documents(&stdout);
    let of_kind = |kind: &str| -> Vec<&serde_json::Value> {
        documents.iter().filter(|d| d["kind"] == kind).collect()
    };
    let [policy] = of_kind("DNSPolicy")[..] else {
        panic!("one policy: {stdout}")
    };
    let lb = &policy["spec"]["loadBalancing"];
    assert_eq!(lb["geo"]["defaultGeo"], "GEO-EU");
    assert_eq!(lb["weighted"]["defaultWeight"], 120);
    assert_eq!(
        lb["weighted"]["custom"],
        serde_json::json!([{"attribute": "weight", "value": "200", "weight": 200}])
    );
    let clusters = of_kind("ManagedCluster");
    assert_eq!(clusters.len(), 2);
    assert_eq!(
        clusters[1]["metadata"],
        serde_json::json!({"name": "us-1", "labels": {
            "kuadrant.io/lb-attribute-geo-code": "US", "kuadrant.io/lb-attribute-weight": "200"}})
    );
    assert_eq!(of_kind("ManagedZone").len(), 1);

    let (output, stdout, _) =
        convert(&["--mode", "distributed", "--zone", "example.com", &eu, &us]);
    assert!(output.status.success());
    assert!(stdout.contains(
        "# us-1: meridian-agent run --mode distributed --cluster-name us-1 --cluster-label kuadrant.io/lb-attribute-geo-code=US --cluster-label kuadrant.io/lb-attribute-weight=200"
    ), "{stdout}");
    assert!(!stdout.contains("kind: ManagedCluster"));
}

#[test]
fn check_manifests_refuses_kuadrant_v1_and_names_the_way_over() {
    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("policy.yaml"), fixture("dnspolicy.yaml")).unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_meridian-hub"))
        .args(["check-manifests", &root.path().display().to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert!(!output.status.success(), "{stdout}");
    assert!(stdout.contains("meridian-hub convert"), "{stdout}");
    assert!(stdout.contains("1 objects checked, 1 refusals"), "{stdout}");
}
