//! The Helm chart (`deploy/helm/meridian`) with Helm built from its Go module: it lints clean,
//! renders least-privilege RBAC, a non-root read-only hub and switchable CRDs, the committed
//! `deploy/hub/hub.yaml` is its rendering, and `helm install` / `helm uninstall` work against
//! a real API server.

use std::path::PathBuf;
use std::process::{Command, Output};

use meridian_e2e::{ControlPlane, Error, TestBedAssets, repository_root};
use serde::Deserialize;
use yaml_serde::Value;

const RELEASE: &str = "meridian";
const NAMESPACE: &str = "meridian-system";

fn chart() -> PathBuf {
    repository_root().join("deploy/helm/meridian")
}

fn helm(args: &[&str]) -> Output {
    meridian_e2e::helm_command()
        .expect("helm is built (make testbed)")
        .args(args)
        .output()
        .expect("helm runs")
}

fn succeeded(output: &Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// `helm template` of the chart with `sets`, as Helm prints it.
fn template(sets: &[&str]) -> String {
    let chart = chart();
    let mut args = vec![
        "template",
        RELEASE,
        chart.to_str().unwrap(),
        "--namespace",
        NAMESPACE,
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    succeeded(&helm(&args), "helm template")
}

/// The chart rendered with `sets`, as YAML documents.
fn render(sets: &[&str]) -> Vec<Value> {
    documents(&template(sets))
}

fn documents(yaml: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(yaml)
        .map(|document| Value::deserialize(document).expect("helm renders YAML"))
        .filter(|document| !document.is_null())
        .collect()
}

/// The value of the environment variable `name` of `container`, if it has one.
fn env_value(container: &Value, name: &str) -> Option<Value> {
    container["env"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .map(|e| e["value"].clone())
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

#[test]
fn the_chart_lints_clean() {
    succeeded(
        &helm(&["lint", "--strict", chart().to_str().unwrap()]),
        "helm lint --strict",
    );
}

#[test]
fn the_chart_renders_a_least_privilege_nonroot_hub_and_switchable_crds() {
    let documents = render(&[]);
    let crds = of_kind(&documents, "CustomResourceDefinition");
    assert_eq!(crds.len(), meridian_api::crds::served_crds().len());
    assert!(
        crds.iter()
            .all(|crd| crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"),
        "CRDs outlive an uninstall (deleting them would delete every policy)"
    );

    let deployment = of_kind(&documents, "Deployment")[0];
    let spec = &deployment["spec"];
    assert_eq!(spec["replicas"], 2);
    // Every replica answers DNS, so an update replaces one at a time and never has none ready.
    assert_eq!(spec["strategy"]["type"], "RollingUpdate");
    assert_eq!(spec["strategy"]["rollingUpdate"]["maxUnavailable"], 0);
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    let container = &pod["containers"][0];
    assert_eq!(
        container["image"],
        "ghcr.io/meridian-dev/meridian-hub:0.1.0"
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        container["securityContext"]["allowPrivilegeEscalation"],
        false
    );
    assert_eq!(
        container["securityContext"]["capabilities"]["drop"][0],
        "ALL"
    );
    let env = |name: &str| env_value(container, name);
    assert_eq!(
        env("MERIDIAN_AGENT_IMAGE"),
        Some("ghcr.io/meridian-dev/meridian-agent:0.1.0".into())
    );
    assert_eq!(env("MERIDIAN_LEASE_NAMESPACE"), Some(NAMESPACE.into()));
    assert!(container["resources"]["limits"]["memory"].is_string());

    let hub_role = of_kind(&documents, "ClusterRole")
        .into_iter()
        .find(|role| role["metadata"]["name"] == RELEASE)
        .expect("the hub's ClusterRole");
    let rules = hub_role["rules"].as_sequence().unwrap();
    for rule in rules {
        for field in ["apiGroups", "resources", "verbs"] {
            assert!(
                !rule[field].as_sequence().unwrap().contains(&"*".into()),
                "no wildcard {field} in {rule:?}"
            );
        }
    }
    let grants = |resource: &str, verb: &str| {
        rules.iter().any(|rule| {
            rule["resources"]
                .as_sequence()
                .unwrap()
                .contains(&resource.into())
                && rule["verbs"].as_sequence().unwrap().contains(&verb.into())
        })
    };
    assert!(grants("dnsrecords/status", "patch"));
    assert!(grants("manifestworks", "delete"));
    // The one Secret it deletes is its own copy of the probe headers (at uninstall), by name.
    let secret_deletes: Vec<&Value> = rules
        .iter()
        .filter(|rule| {
            rule["resources"]
                .as_sequence()
                .unwrap()
                .contains(&"secrets".into())
                && rule["verbs"]
                    .as_sequence()
                    .unwrap()
                    .contains(&"delete".into())
        })
        .collect();
    assert!(!secret_deletes.is_empty());
    for rule in secret_deletes {
        assert_eq!(
            rule["resourceNames"],
            yaml_serde::from_str::<Value>(
                "[meridian-probe-headers, meridian-probe-seal, meridian-dnssec-keys]"
            )
            .unwrap(),
            "the hub deletes no other Secret than the agents' copies and its seal key: {rule:?}"
        );
    }
    assert!(!grants("nodes", "get"), "nor reads nodes");
    // Tokens for the agents' ServiceAccounts alone; no ClusterRole written, only the agents'
    // bound; bindings created, never changed or deleted cluster-wide.
    let rules_for = |resource: &str| -> Vec<&Value> {
        rules
            .iter()
            .filter(|rule| {
                rule["resources"]
                    .as_sequence()
                    .unwrap()
                    .contains(&resource.into())
            })
            .collect()
    };
    let names = |text: &str| yaml_serde::from_str::<Value>(text).unwrap();
    for rule in rules_for("serviceaccounts/token") {
        assert_eq!(rule["resourceNames"], names("[meridian-agent]"), "{rule:?}");
    }
    for rule in rules_for("clusterroles") {
        assert_eq!(rule["verbs"], names("[bind]"), "{rule:?}");
        assert_eq!(
            rule["resourceNames"],
            names(
                "[meridian-agent-reporter, meridian-agent-zone-keys, meridian-agent-probes, meridian-agent-zones]"
            )
        );
    }
    // Secrets are read anywhere, written in the release's namespace alone.
    for verb in ["create", "update", "patch"] {
        assert!(!grants("secrets", verb), "no cluster-wide Secret {verb}");
        assert!(
            !grants("roles", verb),
            "no Role {verb} outside its namespace"
        );
    }
    let own = of_kind(&documents, "Role")
        .into_iter()
        .find(|role| role["metadata"]["name"] == RELEASE)
        .expect("the hub's Role in its namespace");
    assert_eq!(own["metadata"]["namespace"], NAMESPACE);
    assert!(own["rules"].as_sequence().unwrap().iter().any(|rule| {
        rule["resources"] == names("[secrets]")
            && rule["verbs"]
                .as_sequence()
                .unwrap()
                .contains(&"create".into())
    }));
    for rule in rules_for("clusterrolebindings") {
        assert_eq!(rule["verbs"], names("[create]"), "{rule:?}");
    }
    for resource in ["roles", "rolebindings", "serviceaccounts", "leases"] {
        for rule in rules_for(resource) {
            let verbs = rule["verbs"].as_sequence().unwrap();
            if verbs.contains(&"update".into()) || verbs.contains(&"delete".into()) {
                assert!(
                    rule["resourceNames"].is_sequence(),
                    "{resource} changed or deleted by name only: {rule:?}"
                );
            }
        }
    }

    // The agents' ClusterRoles are the chart's, exactly what the hub binds.
    let agent_roles: Vec<(Value, Value)> = of_kind(&documents, "ClusterRole")
        .into_iter()
        .filter(|role| role["metadata"]["labels"]["meridian.dev/granted-to"] == "agents")
        .map(|role| (role["metadata"]["name"].clone(), role["rules"].clone()))
        .collect();
    let expected: Vec<(Value, Value)> = meridian_hub::placement::agent_cluster_roles()
        .into_iter()
        .map(|role| {
            let role: Value = serde_json::from_value(role).unwrap();
            (role["metadata"]["name"].clone(), role["rules"].clone())
        })
        .collect();
    assert_eq!(
        agent_roles, expected,
        "agent-roles.yaml is what the hub binds"
    );
    // The add-on agents' fleet-wide bindings are the chart's, exactly what the hub expects
    // (the zones' only when agents serve DNS).
    let fleet_bindings = |documents: &[Value]| -> Vec<(Value, Value, Value)> {
        of_kind(documents, "ClusterRoleBinding")
            .into_iter()
            .filter(|b| b["metadata"]["labels"]["meridian.dev/granted-to"] == "agents")
            .map(|b| {
                (
                    b["metadata"]["name"].clone(),
                    b["roleRef"].clone(),
                    b["subjects"].clone(),
                )
            })
            .collect()
    };
    let expected_bindings = |serves_dns: bool| -> Vec<(Value, Value, Value)> {
        meridian_hub::placement::addon_fleet_bindings(serves_dns)
            .into_iter()
            .map(|b| {
                let b: Value = serde_json::from_value(b).unwrap();
                (
                    b["metadata"]["name"].clone(),
                    b["roleRef"].clone(),
                    b["subjects"].clone(),
                )
            })
            .collect()
    };
    assert_eq!(fleet_bindings(&documents), expected_bindings(false));
    let serving = render(&["dns.agentListen=0.0.0.0:5353"]);
    assert_eq!(fleet_bindings(&serving), expected_bindings(true));
    // The add-on is the default delivery.
    assert_eq!(env("MERIDIAN_AGENT_DELIVERY"), Some("addon".into()));
    // Registry credentials reach the hub's pods and, by name, the agents'.
    assert!(env("MERIDIAN_AGENT_IMAGE_PULL_SECRETS").is_none());
    let private = render(&["image.pullSecrets[0]=regcred"]);
    let hub = of_kind(&private, "Deployment")[0]["spec"]["template"]["spec"].clone();
    assert_eq!(hub["imagePullSecrets"][0]["name"].as_str(), Some("regcred"));
    assert!(
        !of_kind(&private, "Job").is_empty(),
        "the uninstall hook's Job"
    );
    for job in of_kind(&private, "Job") {
        let pod = &job["spec"]["template"]["spec"];
        assert_eq!(
            pod["imagePullSecrets"][0]["name"].as_str(),
            Some("regcred"),
            "{job:?}"
        );
    }
    assert!(
        hub.get("imagePullSecrets").is_some()
            && of_kind(&documents, "Deployment")[0]["spec"]["template"]["spec"]
                .get("imagePullSecrets")
                .is_none()
    );
    assert_eq!(
        env_value(&hub["containers"][0], "MERIDIAN_AGENT_IMAGE_PULL_SECRETS"),
        Some("regcred".into())
    );

    // /metrics and the view behind TokenReview and SubjectAccessReview; the ports closed to
    // everything but DNS unless the values name who may come in.
    assert_eq!(env("MERIDIAN_HTTP_AUTH"), Some("true".into()));
    assert!(grants("tokenreviews", "create") && grants("subjectaccessreviews", "create"));
    let readers: Vec<&Value> = of_kind(&documents, "ClusterRole")
        .into_iter()
        .filter(|role| role["rules"][0]["nonResourceURLs"].is_sequence())
        .collect();
    assert_eq!(
        readers.len(),
        2,
        "a metrics reader and a view reader to bind"
    );
    let policy = of_kind(&documents, "NetworkPolicy")[0];
    let ingress = policy["spec"]["ingress"].as_sequence().unwrap();
    assert_eq!(ingress.len(), 1, "DNS only: {ingress:?}");
    assert!(ingress[0]["from"].is_null(), "DNS from anywhere");
    let opened =
        render(&["networkPolicy.httpFrom[0].namespaceSelector.matchLabels.name=monitoring"]);
    let ingress = of_kind(&opened, "NetworkPolicy")[0]["spec"]["ingress"].clone();
    assert_eq!(
        ingress[1]["from"][0]["namespaceSelector"]["matchLabels"]["name"],
        "monitoring"
    );

    let services = of_kind(&documents, "Service");
    let dns = services
        .iter()
        .find(|s| s["metadata"]["name"] == "meridian-dns")
        .expect("the DNS Service");
    assert_eq!(dns["spec"]["ports"][0]["port"], 53);
    assert_eq!(of_kind(&documents, "PodDisruptionBudget").len(), 1);

    // CRD rights are a separate privilege: without them, nothing of the kind is rendered.
    let without = render(&["crds.install=false"]);
    assert!(of_kind(&without, "CustomResourceDefinition").is_empty());
    assert_eq!(without.len(), documents.len() - crds.len());

    // A digest pins the image.
    let digest = format!("sha256:{}", "a".repeat(64));
    let pinned = render(&[
        &format!("image.hub.digest={digest}"),
        &format!("image.agent.digest={digest}"),
    ]);
    let container = &of_kind(&pinned, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"],
        Value::from(format!("ghcr.io/meridian-dev/meridian-hub@{digest}"))
    );
    assert!(container["env"].as_sequence().unwrap().iter().any(
        |e| e["value"] == format!("ghcr.io/meridian-dev/meridian-agent@{digest}").as_str()
    ));
}

/// The arguments `make crds` renders `deploy/hub/hub.yaml` with: no CRDs, and no uninstall
/// hook (`kubectl apply` would run its Job at once; without Helm, `meridian-hub uninstall` is
/// run by hand).
const HUB_MANIFEST_SETS: &[&str] = &["crds.install=false", "uninstall.removeAgents=false"];

#[test]
fn secondaries_get_notify_targets_and_a_key_file_from_a_secret() {
    let documents = render(&[
        "dns.secondaries.tsigKeySecret.name=meridian-tsig",
        "dns.secondaries.tsigKeySecret.key=tsig.key",
        "dns.secondaries.notify={192.0.2.80:53,198.51.100.9:53}",
        "geoip.volume.configMap.name=geoip",
    ]);
    let pod = &of_kind(&documents, "Deployment")[0]["spec"]["template"]["spec"];
    let container = &pod["containers"][0];
    let env = |name: &str| env_value(container, name);
    assert_eq!(
        env("MERIDIAN_DNS_NOTIFY"),
        Some("192.0.2.80:53 198.51.100.9:53".into())
    );
    assert_eq!(
        env("MERIDIAN_DNS_TSIG_KEY_FILE"),
        Some("/etc/meridian/tsig/tsig.key".into())
    );
    assert_eq!(
        env("MERIDIAN_DNS_ALLOW_TRANSFER"),
        None,
        "no keyless transfer unless asked"
    );
    // The key comes only from the Secret, mounted read-only beside the GEO database.
    let mounts: Vec<&Value> = container["volumeMounts"]
        .as_sequence()
        .unwrap()
        .iter()
        .collect();
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "tsig" && m["readOnly"] == true)
    );
    assert!(mounts.iter().any(|m| m["name"] == "geoip"));
    let volumes = pod["volumes"].as_sequence().unwrap();
    let tsig = volumes.iter().find(|v| v["name"] == "tsig").unwrap();
    assert_eq!(tsig["secret"]["secretName"], "meridian-tsig");
    assert!(volumes.iter().any(|v| v["name"] == "geoip"));
    // Without secondaries, nothing of it renders.
    let plain = render(&[]);
    let container = &of_kind(&plain, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0];
    assert!(container["volumeMounts"].is_null());
    let text = template(&[]);
    assert!(!text.contains("MERIDIAN_DNS_NOTIFY") && !text.contains("TSIG"));
}

#[test]
fn the_view_has_its_own_port_and_the_dashboard_and_alerts_ship_with_the_chart() {
    let documents = render(&[]);
    let container =
        &of_kind(&documents, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env_value(container, "MERIDIAN_VIEW_ADDR"),
        Some("0.0.0.0:8088".into())
    );
    let view = of_kind(&documents, "Service")
        .into_iter()
        .find(|s| s["metadata"]["name"] == "meridian-view")
        .expect("a Service for kubectl port-forward");
    assert_eq!(view["spec"]["type"], "ClusterIP");
    assert_eq!(view["spec"]["ports"][0]["port"], 8088);
    assert!(
        view["spec"]["ports"][0]["port"] != 5353,
        "never the DNS port"
    );
    // The dashboard is the committed JSON, labelled for Grafana's sidecar.
    let dashboard = of_kind(&documents, "ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "meridian-dashboard")
        .expect("the dashboard's ConfigMap");
    assert_eq!(dashboard["metadata"]["labels"]["grafana_dashboard"], "1");
    let json: serde_json::Value =
        serde_json::from_str(dashboard["data"]["meridian.json"].as_str().unwrap()).unwrap();
    let committed: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(chart().join("files/monitoring/dashboard.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(json, committed);
    // The PrometheusRule renders when asked (or when the API server serves its kind), with the
    // rule file's groups unchanged.
    assert!(of_kind(&documents, "PrometheusRule").is_empty());
    let with_rules = render(&["monitoring.prometheusRule.enabled=true"]);
    let rule = of_kind(&with_rules, "PrometheusRule")[0];
    let file: Value = yaml_serde::from_str(
        &std::fs::read_to_string(chart().join("files/monitoring/alerts.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(rule["spec"]["groups"], file["groups"]);
    let summary = &rule["spec"]["groups"][0]["rules"][1]["annotations"]["summary"];
    assert!(
        summary.as_str().unwrap().contains("{{ $value"),
        "Prometheus' templates pass through Helm untouched: {summary:?}"
    );
}

/// promtool, unpacked by `make packages` (scripts/promtool.sh).
fn promtool(args: &[&str], dir: &std::path::Path) -> Output {
    let path = Command::new("bash")
        .arg(repository_root().join("scripts/promtool.sh"))
        .arg("--print-path")
        .output()
        .expect("bash runs");
    let path = String::from_utf8_lossy(&path.stdout).trim().to_string();
    Command::new(&path)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| panic!("{path} runs (make packages installs it): {e}"))
}

#[test]
fn the_alerts_pass_promtool_and_their_unit_tests() {
    let root = repository_root();
    succeeded(
        &promtool(
            &["check", "rules", "files/monitoring/alerts.yaml"],
            &chart(),
        ),
        "promtool check rules",
    );
    let tested = succeeded(
        &promtool(
            &["test", "rules", "alerts.test.yaml"],
            &root.join("deploy/monitoring"),
        ),
        "promtool test rules",
    );
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Every alert links its runbook section, and docs/monitoring.md has each one.
    let rules: Value = yaml_serde::from_str(
        &std::fs::read_to_string(chart().join("files/monitoring/alerts.yaml")).unwrap(),
    )
    .unwrap();
    let runbooks = std::fs::read_to_string(root.join("docs/monitoring.md")).unwrap();
    for rule in rules["groups"][0]["rules"].as_sequence().unwrap() {
        let alert = rule["alert"].as_str().unwrap();
        let url = rule["annotations"]["runbook_url"].as_str().unwrap();
        assert!(
            url.ends_with(&format!("docs/monitoring.md#{}", alert.to_lowercase())),
            "{alert}: {url}"
        );
        assert!(
            runbooks.contains(&format!("### {alert}\n")),
            "docs/monitoring.md has no runbook section for {alert}"
        );
    }
}

#[test]
fn helm_uninstall_first_removes_the_agents_with_a_nonroot_hook() {
    let documents = render(&[]);
    let jobs = of_kind(&documents, "Job");
    assert_eq!(jobs.len(), 1, "one uninstall hook");
    let job = jobs[0];
    assert_eq!(job["metadata"]["annotations"]["helm.sh/hook"], "pre-delete");
    let pod = &job["spec"]["template"]["spec"];
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["containers"][0]["args"][0], "uninstall");
    assert_eq!(
        pod["serviceAccountName"], RELEASE,
        "the hook acts with the hub's rights, which include deleting what it created"
    );
    assert!(of_kind(&render(&["uninstall.removeAgents=false"]), "Job").is_empty());
}

#[test]
fn the_committed_hub_manifest_is_the_rendered_chart() {
    let rendered = template(HUB_MANIFEST_SETS);
    let committed = std::fs::read_to_string(repository_root().join("deploy/hub/hub.yaml"))
        .expect("deploy/hub/hub.yaml");
    let body = committed
        .split_once("\n---\n")
        .map(|(_, body)| format!("---\n{body}"))
        .unwrap_or_default();
    assert!(
        body == rendered,
        "deploy/hub/hub.yaml is not the rendered chart; regenerate it with `make crds` and commit the result"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_and_uninstalls_the_chart_on_an_api_server() -> Result<(), Error> {
    let assets = TestBedAssets::locate()?;
    let plane = ControlPlane::start("chart", &assets).await?;
    let kubeconfig = plane.kubeconfig_path().to_str().unwrap().to_string();
    let chart = chart();
    succeeded(
        &helm(&[
            "install",
            RELEASE,
            chart.to_str().unwrap(),
            "--namespace",
            NAMESPACE,
            "--create-namespace",
            // No node runs the uninstall hook's Job here (the install test runs it on one).
            "--set",
            "uninstall.removeAgents=false",
            "--kubeconfig",
            &kubeconfig,
        ]),
        "helm install",
    );
    let kubectl = |args: &[&str]| {
        Command::new(&assets.kubectl)
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .args(args)
            .output()
            .expect("kubectl runs")
    };
    // The API server took every object: the CRDs are established, RBAC is what the chart says
    // (asked of kinds this API server serves; OCM's are not installed here).
    succeeded(
        &kubectl(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/dnspolicies.kuadrant.io",
            "crd/dnsrecords.kuadrant.io",
        ]),
        "the CRDs are established",
    );
    let account = format!("system:serviceaccount:{NAMESPACE}:{RELEASE}");
    let can = |verb: &str, resource: &str| {
        let output = kubectl(&["auth", "can-i", verb, resource, "--as", &account, "-A"]);
        let answer = String::from_utf8_lossy(&output.stdout).trim().to_string();
        assert!(
            answer == "yes" || answer == "no",
            "kubectl auth can-i {verb} {resource}: {answer:?} {}",
            String::from_utf8_lossy(&output.stderr)
        );
        answer == "yes"
    };
    assert!(can("patch", "dnsrecords.kuadrant.io"));
    // A withdrawn record's probes are deleted in one request (found by the install test).
    assert!(can("deletecollection", "dnshealthcheckprobes.kuadrant.io"));
    assert!(can("create", "leases.coordination.k8s.io"));
    assert!(can("create", "events.events.k8s.io"));
    assert!(!can("delete", "secrets"));
    assert!(!can("get", "nodes"));
    // Least privilege where it counts (asked in kube-system, which any controller's token
    // would come from): no token but the agents', no ClusterRole written, no binding deleted.
    let can_in = |args: &[&str]| {
        let mut full = vec!["auth", "can-i"];
        full.extend(args);
        full.extend(["--as", &account]);
        let output = kubectl(&full);
        String::from_utf8_lossy(&output.stdout).trim() == "yes"
    };
    assert!(!can_in(&[
        "create",
        "serviceaccounts/default",
        "--subresource=token",
        "-n",
        "kube-system"
    ]));
    assert!(can_in(&[
        "create",
        "serviceaccounts/meridian-agent",
        "--subresource=token",
        "-n",
        "spoke-1"
    ]));
    assert!(!can("create", "clusterroles"));
    assert!(!can("escalate", "clusterroles"));
    assert!(!can("delete", "clusterrolebindings"));
    assert!(!can_in(&[
        "update",
        "leases/kube-controller-manager",
        "-n",
        "kube-system"
    ]));
    // The default owner ID is kube-system's UID: that namespace is read, no other; the
    // ConfigMap keeping it is written in the hub's namespace alone.
    assert!(can_in(&["get", "namespaces/kube-system"]));
    assert!(!can_in(&["get", "namespaces/team-a"]));
    assert!(can_in(&[
        "patch",
        "configmaps/meridian-owner-id",
        "-n",
        NAMESPACE
    ]));
    assert!(!can_in(&["patch", "configmaps/anything", "-n", NAMESPACE]));
    assert!(!can_in(&["create", "configmaps", "-n", "kube-system"]));
    // A Secret written in kube-system could be a token for its controllers: none is.
    assert!(!can_in(&["create", "secrets", "-n", "kube-system"]));
    assert!(!can_in(&["patch", "secrets/anything", "-n", "kube-system"]));
    assert!(can_in(&["create", "secrets", "-n", NAMESPACE]));
    assert!(can_in(&[
        "get",
        "secrets/provider-credentials",
        "-n",
        "team-a"
    ]));
    // Everything the hub may do in kube-system, as the API server lists it: no Secret write
    // but the deletes of named copies earlier hubs made, and no token but the agents'.
    let listed = kubectl(&[
        "auth",
        "can-i",
        "--list",
        "-n",
        "kube-system",
        "--as",
        &account,
    ]);
    let listed = String::from_utf8_lossy(&listed.stdout).to_string();
    eprintln!("kubectl auth can-i --list -n kube-system --as {account}:\n{listed}");
    let rules = can_i_list(&listed);
    assert!(rules.len() > 10, "{listed}");
    for (resource, names, verbs) in &rules {
        let writes = verbs.iter().any(|v| {
            [
                "create",
                "update",
                "patch",
                "delete",
                "deletecollection",
                "*",
            ]
            .contains(&v.as_str())
        });
        if resource == "secrets" && writes {
            assert!(
                !names.is_empty() && verbs.iter().all(|v| v == "delete"),
                "a Secret write beyond deleting named copies: {names:?} {verbs:?}"
            );
        }
        if resource == "serviceaccounts/token" {
            assert_eq!(names, &["meridian-agent"], "tokens for the agents only");
        }
        assert!(
            resource != "*" && !verbs.contains(&"*".to_string()),
            "a wildcard: {resource} {verbs:?}"
        );
    }
    succeeded(
        &kubectl(&["get", "deployment/meridian", "-n", NAMESPACE]),
        "the hub's Deployment",
    );

    succeeded(
        &helm(&[
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--kubeconfig",
            &kubeconfig,
            "--wait",
            "--timeout",
            "60s",
        ]),
        "helm uninstall",
    );
    let deployment = kubectl(&["get", "deployment/meridian", "-n", NAMESPACE]);
    assert!(!deployment.status.success(), "the Deployment is gone");
    let role = kubectl(&["get", "clusterrole/meridian"]);
    assert!(!role.status.success(), "the ClusterRole is gone");
    succeeded(
        &kubectl(&["get", "crd/dnspolicies.kuadrant.io"]),
        "the CRDs are kept",
    );
    Ok(())
}

/// The rows of `kubectl auth can-i --list`: resource, resource names, verbs (non-resource URLs
/// left out).
fn can_i_list(table: &str) -> Vec<(String, Vec<String>, Vec<String>)> {
    let list = |text: &str| -> Vec<String> {
        text.trim_matches(|c| c == '[' || c == ']')
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            // Columns: Resources, Non-Resource URLs, Resource Names, Verbs; lists in brackets.
            let (resource, rest) = line.trim().split_once(char::is_whitespace)?;
            let lists: Vec<&str> = rest
                .split(']')
                .map(|part| part.trim())
                .filter(|part| part.starts_with('['))
                .collect();
            let [_, names, verbs] = lists.as_slice() else {
                return None;
            };
            Some((resource.to_string(), list(names), list(verbs)))
        })
        .collect()
}

#[test]
fn can_i_list_rows_are_read() {
    let table = "Resources                              Non-Resource URLs   Resource Names      Verbs\n\
                 serviceaccounts/token                  []                  [meridian-agent]    [create]\n\
                 secrets                                []                  [a b]               [delete]\n\
                 leases.coordination.k8s.io             []                  []                  [get list watch create]\n\
                                                        [/metrics]          []                  [get]\n";
    assert_eq!(
        can_i_list(table),
        [
            (
                "serviceaccounts/token".to_string(),
                vec!["meridian-agent".to_string()],
                vec!["create".to_string()]
            ),
            (
                "secrets".to_string(),
                vec!["a".to_string(), "b".to_string()],
                vec!["delete".to_string()]
            ),
            (
                "leases.coordination.k8s.io".to_string(),
                vec![],
                ["get", "list", "watch", "create"]
                    .map(String::from)
                    .to_vec()
            ),
        ]
    );
}
