//! Fail static on real nodes: Meridian installed by Helm, the hub as pods and an agent as a pod
//! on each spoke, and the hub cut off from its clusters by freezing the agents' processes
//! (SIGSTOP on the processes of this fleet's own agent containers, nothing else): first one
//! cluster (withdrawn at its timeout: there is no healthCheck), then two of three, then all,
//! each reconnected after (SIGCONT). The fleet brake holds the two and the three from the
//! start and lets go by itself. A client asks from three places the whole time: no answer is
//! ever empty, and while cut off from most or all of its clusters the hub changes none.
//!
//! Needs the images: `make test` packs them from its own build (`scripts/images.sh --test-build`,
//! `MERIDIAN_IMAGES_DIR`); run alone, it takes those `make images` built.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Api, Client};
use meridian_api::conditions;
use meridian_api::kuadrant::DNSPolicy;
use meridian_api::meridian::ClusterReport;
use meridian_e2e::example::{
    FRANCE, GATEWAY, IRELAND, NAMESPACE, SPOKES, UNITED_STATES, install, with_example_spokes,
};
use meridian_e2e::registry::Registry;
use meridian_e2e::release::{
    WORK_AGENT_NAMESPACE, answers_become, dig_service, imported_archives, install_release, publish,
    wait_for_agent_pod, wait_for_hub_pods,
};
use meridian_e2e::traffic::ExampleGateways;
use meridian_e2e::{
    DEFAULT_PATIENCE, Error, Fleet, built_images, condition_becomes, eventually, image_named,
};

/// Shorter than the default 120 s, so that the test waits less, and still three renewals
/// (agents renew every 30 s): a cluster is quiet for the brake after half of it.
const HEARTBEAT_TIMEOUT_SECONDS: u64 = 90;
const PLACES: [(&str, &str); 3] = [
    ("Ireland", IRELAND),
    ("the United States", UNITED_STATES),
    ("France", FRANCE),
];

/// The agent processes of `spoke`'s own node: children of its containerd shims whose command
/// line names the cluster.
fn agent_pids(fleet: &Fleet, spoke: &str) -> Vec<u32> {
    let node = fleet.spoke(spoke).node().expect("started with nodes");
    let shims: BTreeSet<u32> = node.pids().into_iter().collect();
    let mut agents = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // The parent is the second field after the command name, which ends with ')'.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if !parent.is_some_and(|parent| shims.contains(&parent)) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<String> = cmdline
            .split(|byte| *byte == 0)
            .map(|arg| String::from_utf8_lossy(arg).into_owned())
            .collect();
        let names_spoke = args
            .windows(2)
            .any(|pair| pair[0] == "--cluster-name" && pair[1] == spoke);
        if names_spoke {
            agents.push(pid);
        }
    }
    agents
}

fn signal_agents(fleet: &Fleet, spokes: &[&str], signal: &str) {
    for spoke in spokes {
        let pids = agent_pids(fleet, spoke);
        assert!(!pids.is_empty(), "{spoke}'s agent process is found");
        for pid in pids {
            let status = std::process::Command::new("kill")
                .args([format!("-{signal}"), pid.to_string()])
                .status()
                .expect("kill runs");
            assert!(status.success(), "kill -{signal} {pid}");
        }
        println!("{spoke}: agent {signal}");
    }
}

/// The message of the policy's condition `type_` once `holds` says it is the one awaited.
async fn policy_condition(
    hub: &Client,
    type_: &'static str,
    what: &str,
    holds: impl Fn(&Condition) -> bool,
) -> Result<String, Error> {
    let policies: Api<DNSPolicy> = Api::namespaced(hub.clone(), NAMESPACE);
    let condition = condition_becomes(&policies, GATEWAY, type_, what, holds).await?;
    Ok(condition.message)
}

/// The policy's `FailStatic` message once its reason is `reason`.
async fn fail_static(hub: &Client, reason: &'static str) -> Result<String, Error> {
    let what = format!("the policy's FailStatic is {reason}");
    policy_condition(hub, conditions::FAIL_STATIC, &what, |c| c.reason == reason).await
}

/// The policy's `Enforced` message once it contains `text`.
async fn enforced_says(hub: &Client, text: &'static str) -> Result<String, Error> {
    let what = format!("the policy says {text:?}");
    policy_condition(hub, conditions::ENFORCED, &what, |c| {
        c.message.contains(text)
    })
    .await
}

/// What the hub saw, for a failure: the heartbeats, the policy's conditions and the pods' logs.
async fn explain(fleet: &Fleet) {
    let hub = fleet.hub.client();
    for (spoke, _, _, _) in SPOKES {
        let lease =
            Api::<k8s_openapi::api::coordination::v1::Lease>::namespaced(hub.clone(), spoke)
                .get_opt("meridian-agent-heartbeat")
                .await;
        let renewed = lease
            .ok()
            .flatten()
            .and_then(|l| l.spec?.renew_time)
            .map(|t| t.0.to_string());
        let reported = Api::<ClusterReport>::namespaced(hub.clone(), spoke)
            .get_opt(meridian_api::names::CLUSTER_REPORT)
            .await
            .ok()
            .flatten()
            .and_then(|r| r.spec.reported_at)
            .map(|t| t.0.to_string());
        println!(
            "{spoke}: heartbeat renewed {renewed:?}, reported {reported:?}; agent processes {:?}",
            agent_pids(fleet, spoke)
        );
    }
    if let Ok(policy) = Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE)
        .get(GATEWAY)
        .await
    {
        for condition in policy.status.iter().flat_map(|s| s.conditions.iter()) {
            println!(
                "policy {}: {} {}",
                condition.type_, condition.reason, condition.message
            );
        }
    }
    println!("{}", fleet.hub.node().expect("a node").pod_logs());
}

/// What a client saw from each place while it asked: every distinct answer per phase, and the
/// empty ones.
#[derive(Debug, Default)]
struct Seen {
    queries: u32,
    empty: u32,
    answers: BTreeMap<(String, &'static str), BTreeSet<Vec<String>>>,
}

/// Asks from each place in turn through the DNS Service until told to stop, filing each answer
/// under the phase current at the time, and counting the rounds over every place in `rounds`.
async fn ask(
    hub: Client,
    phase: Arc<std::sync::Mutex<String>>,
    asking: Arc<AtomicBool>,
    rounds: Arc<AtomicU32>,
) -> Seen {
    let mut seen = Seen::default();
    while asking.load(Ordering::SeqCst) {
        for (place, subnet) in PLACES {
            let answer = dig_service(&hub, Some(subnet)).await.unwrap_or_default();
            seen.queries += 1;
            if answer.is_empty() {
                seen.empty += 1;
                println!("empty answer for {place}");
            }
            let current = phase.lock().unwrap().clone();
            seen.answers
                .entry((current, place))
                .or_default()
                .insert(answer);
        }
        rounds.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meridian_as_pods_keeps_answering_when_the_hub_is_cut_off_from_its_clusters()
-> Result<(), Error> {
    meridian_e2e::test_logs("warn,kube_client=off,meridian_e2e=info");
    let images = built_images()?;
    let (hub_image, agent_image) = meridian_e2e::hub_and_agent(&images);
    let registry = Registry::start().await?;
    let published = publish(&registry, &images, &[hub_image.tag()])?;
    let fleet = with_example_spokes(Fleet::builder())
        .with_nodes(imported_archives(&images))
        .start()
        .await?;
    let hub = fleet.hub.client();
    let timeout = format!("hub.clusterHeartbeatTimeoutSeconds={HEARTBEAT_TIMEOUT_SECONDS}");
    // The heartbeat deadlines in the hub's log, for a failure to explain.
    let log = r"hub.log=info\,meridian_controllers::reconcile::dns_policy::triggers=debug\,meridian_controllers::runtime::caches=debug";
    // The hub installs the agents itself: this fleet runs no OCM addon manager.
    install_release(
        &fleet,
        &published,
        &[timeout.as_str(), log, "agent.delivery=work"],
    )
    .await?;
    wait_for_hub_pods(&hub, hub_image.tag()).await?;
    // Each spoke's gateway implementation (Traefik, with the demo app behind it).
    let mut gateways = ExampleGateways::start(
        &fleet,
        &image_named(&images, "/meridian-demo-app").reference,
    )
    .await?;
    install(&hub).await?;
    for (spoke, _, _, _) in SPOKES {
        wait_for_agent_pod(
            &fleet.spoke(spoke).client(),
            WORK_AGENT_NAMESPACE,
            agent_image.tag(),
        )
        .await?;
    }
    gateways.serving(&fleet).await?;
    let (ie, us, eu) = (
        gateways.address("spoke-1"),
        gateways.address("spoke-2"),
        gateways.address("spoke-3"),
    );
    answers_become(&hub, Some(IRELAND), &[ie.as_str()]).await?;
    answers_become(&hub, Some(UNITED_STATES), &[us.as_str()]).await?;
    answers_become(&hub, Some(FRANCE), &[eu.as_str()]).await?;

    let phase = Arc::new(std::sync::Mutex::new("0 everyone heard".to_string()));
    let asking = Arc::new(AtomicBool::new(true));
    let rounds = Arc::new(AtomicU32::new(0));
    let client = tokio::spawn(ask(
        hub.clone(),
        phase.clone(),
        asking.clone(),
        rounds.clone(),
    ));
    // Until the client has asked from every place three more times: a phase's own answers.
    let asked_in_phase = || {
        let from = rounds.load(Ordering::SeqCst);
        let rounds = rounds.clone();
        eventually(
            "three rounds of questions in this phase",
            DEFAULT_PATIENCE,
            move || {
                let now = rounds.load(Ordering::SeqCst);
                async move { Ok((now >= from + 3).then_some(())) }
            },
        )
    };
    let enter = |name: &str| {
        println!("phase: {name}");
        *phase.lock().unwrap() = name.to_string();
    };
    let started = Instant::now();
    let elapsed = || format!("{:.0} s", started.elapsed().as_secs_f64());

    // One cluster cut off, no healthCheck: its silence withdraws it at the timeout (a third of
    // the fleet is no brake), and France is answered by another cluster.
    enter("1 spoke-3 cut off");
    signal_agents(&fleet, &["spoke-3"], "STOP");
    let withdrawn = enforced_says(&hub, "spoke-3: no heartbeat from its agent").await;
    if withdrawn.is_err() {
        explain(&fleet).await;
    }
    let withdrawn = withdrawn?;
    println!("{}: {withdrawn}", elapsed());
    // At every replica: the one a dig reached says nothing of the others, which follow the
    // leader a moment apart, and phase 2 must hold only answers given once all have moved.
    eventually(
        "France is answered by another cluster at every replica",
        DEFAULT_PATIENCE,
        || {
            let (hub, eu) = (hub.clone(), eu.clone());
            async move {
                let answers = meridian_e2e::release::dig_each_endpoint(&hub, Some(FRANCE)).await?;
                Ok((!answers.is_empty()
                    && answers.iter().all(|a| !a.is_empty() && *a != [eu.clone()]))
                .then_some(()))
            }
        },
    )
    .await?;
    enter("2 spoke-3 withdrawn");
    asked_in_phase().await?;
    // A phase of its own while France's answer comes back, so that phase 2 holds only answers
    // given while spoke-3 was withdrawn.
    enter("2b spoke-3 reconnected");
    signal_agents(&fleet, &["spoke-3"], "CONT");
    answers_become(&hub, Some(FRANCE), &[eu.as_str()]).await?;
    fail_static(&hub, conditions::fail_static::NONE_KEPT).await?;

    // Two of three cut off at once: they are quiet before either is silent, so the fleet
    // brake holds both from the start, and nothing changes for anyone.
    enter("3 two of three cut off");
    signal_agents(&fleet, &["spoke-2", "spoke-3"], "STOP");
    let braked = fail_static(&hub, conditions::fail_static::FLEET_BRAKE).await?;
    println!("{}: {braked}", elapsed());
    asked_in_phase().await?;
    enter("4 two of three reconnected");
    signal_agents(&fleet, &["spoke-2", "spoke-3"], "CONT");
    let released = fail_static(&hub, conditions::fail_static::NONE_KEPT).await?;
    println!("{}: {released}", elapsed());
    asked_in_phase().await?;

    // All three cut off: the same.
    enter("5 all cut off");
    signal_agents(&fleet, &["spoke-1", "spoke-2", "spoke-3"], "STOP");
    let braked = fail_static(&hub, conditions::fail_static::FLEET_BRAKE).await?;
    println!("{}: {braked}", elapsed());
    assert!(braked.contains("spoke-1"), "{braked}");
    asked_in_phase().await?;
    enter("6 all reconnected");
    signal_agents(&fleet, &["spoke-1", "spoke-2", "spoke-3"], "CONT");
    let released = fail_static(&hub, conditions::fail_static::NONE_KEPT).await?;
    println!("{}: {released}", elapsed());
    asked_in_phase().await?;
    asking.store(false, Ordering::SeqCst);
    let seen = client.await.unwrap();

    for ((phase, place), answers) in &seen.answers {
        println!("{phase}, {place}: {answers:?}");
    }
    println!("{} queries, {} empty", seen.queries, seen.empty);
    assert_eq!(seen.empty, 0, "no host ever emptied: {seen:?}");
    let only = |phase: &str, place: &'static str, expected: &str| {
        let answers = &seen.answers[&(phase.to_string(), place)];
        assert_eq!(
            answers,
            &BTreeSet::from([vec![expected.to_string()]]),
            "{phase}, from {place}"
        );
    };
    // Cut off from most or all of its clusters, and reconnected, the hub changed no answer.
    for phase in [
        "3 two of three cut off",
        "4 two of three reconnected",
        "5 all cut off",
        "6 all reconnected",
    ] {
        only(phase, "Ireland", &ie);
        only(phase, "the United States", &us);
        only(phase, "France", &eu);
    }
    // With spoke-3 withdrawn, France got another cluster's answer, never its own.
    assert!(
        !seen.answers[&("2 spoke-3 withdrawn".to_string(), "France")].contains(&vec![eu.clone()]),
        "{seen:?}"
    );
    Ok(())
}
