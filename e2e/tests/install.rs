//! The install path as users take it, with Meridian running as pods from its images on real
//! nodes: `helm install` on the hub → the hub runs as two pods, one leading → the example
//! Gateway and DNSPolicy → the hub's ManifestWork installs the agent, OCM's work agent applies
//! it, the agent runs as a pod on each spoke with the credentials the hub delivered → `dig`
//! answers by GEO and weight through the DNS Service's endpoints. Then `helm upgrade` to a new
//! image tag rolls the hub and the agents while a client keeps asking, and deleting the policy
//! plus `helm uninstall` leave nothing of Meridian behind (the users' Gateway stays).
//! (The test bed has no service proxy: see `meridian_e2e::release`.)
//!
//! Needs the images: `make test` packs them from its own build (`scripts/images.sh --test-build`,
//! `MERIDIAN_IMAGES_DIR`); run alone, it takes those `make images` built.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::ResourceExt;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use kube::{Api, Client};
use meridian_api::kuadrant::{DNSPolicy, DNSRecord};
use meridian_api::upstream::Gateway;
use meridian_e2e::example::{
    FRANCE, GATEWAY, GEO_LABEL, IRELAND, NAMESPACE, SPOKES, UNITED_STATES, install,
    with_example_spokes,
};
use meridian_e2e::registry::Registry;
use meridian_e2e::release::{
    AGENT_NAMESPACE, RELEASE, RELEASE_NAMESPACE, WORK_AGENT_NAMESPACE, addon_rollout, addon_states,
    answers_become, current_addon_template, dig_service, dns_endpoints, imported_archives,
    install_release, publish, pulled_from, run_helm, upgrade_release, wait_for_agent_pod,
    wait_for_hub_pods,
};
use meridian_e2e::synthetic::{
    ChangeRun, Strategy, SyntheticFleet, change_address, heartbeat, wait_answering, write_fleet,
};
use meridian_e2e::traffic::ExampleGateways;
use meridian_e2e::{
    DEFAULT_PATIENCE, Error, Fleet, OcmDynamicApis, built_images, eventually, image_named,
};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_installs_meridian_as_pods_that_answer_upgrade_without_a_gap_and_uninstall_cleanly()
-> Result<(), Error> {
    meridian_e2e::test_logs("warn,kube_client=off,meridian_e2e=info");
    let images = built_images()?;
    let (hub_image, agent_image) = meridian_e2e::hub_and_agent(&images);
    // The images and the chart are pushed to the test bed's registry, with the tag the upgrade
    // below moves to (a re-tagged release of the same images); the nodes import only the demo
    // app, and pull Meridian's images.
    let registry = Registry::start().await?;
    let next_tag = format!("{}-next", hub_image.tag());
    let published = publish(&registry, &images, &[hub_image.tag(), &next_tag])?;
    println!(
        "published {} {} and images under {}: {}",
        published.chart,
        published.version,
        published.image_registry,
        registry.catalog()?.trim().replace('\n', ", ")
    );
    let fleet_started = Instant::now();
    // The spokes join through OCM's registration; its addon manager runs on the hub.
    let fleet = with_example_spokes(Fleet::builder())
        .with_nodes(imported_archives(&images))
        .with_registration()
        .start()
        .await?;
    for cluster in fleet.clusters() {
        let node = cluster.node().expect("started with nodes");
        println!(
            "{}: node Ready {:.1} s after containerd started; resident {} MiB",
            cluster.name(),
            node.start_time().as_secs_f64(),
            cluster.resident_memory_bytes() / (1 << 20)
        );
    }
    println!(
        "fleet of four with nodes: {:.1} s",
        fleet_started.elapsed().as_secs_f64()
    );
    let hub = fleet.hub.client();

    // helm install oci://…: the chart and the images from the registry.
    let installed = Instant::now();
    // The agents answer DNS too (on their pods' addresses), as a zone spanning the spokes has
    // them do.
    install_release(
        &fleet,
        &published,
        &[
            "hub.withdrawalGraceSeconds=5",
            "dns.agentListen=0.0.0.0:5353",
            // An install from before the add-on: the hub installs the agents itself. The
            // upgrade below moves them to the add-on.
            "agent.delivery=work",
        ],
    )
    .await?;
    let hub_pods = wait_for_hub_pods(&hub, hub_image.tag()).await?;
    println!("hub pods running: {hub_pods:?}");
    let holder = lease_holder(&hub).await?;
    assert!(
        hub_pods.iter().any(|pod| holder.starts_with(pod.as_str())),
        "one of the hub's pods holds the Lease: {holder} among {hub_pods:?}"
    );

    // Each spoke's gateway implementation (Traefik, with the demo app behind it), then the
    // admin's objects.
    let mut gateways = ExampleGateways::start(
        &fleet,
        &image_named(&images, "/meridian-demo-app").reference,
    )
    .await?;
    install(&hub).await?;
    for (spoke, _, _, _) in SPOKES {
        let pod = wait_for_agent_pod(
            &fleet.spoke(spoke).client(),
            WORK_AGENT_NAMESPACE,
            agent_image.tag(),
        )
        .await?;
        println!(
            "{spoke}: agent pod {pod} running from {}",
            agent_image.reference
        );
    }
    gateways.serving(&fleet).await?;
    // Every Meridian pod runs an image containerd pulled from the registry.
    let pulled = pulled_from(&hub, RELEASE_NAMESPACE, &published.image_registry).await?;
    println!("hub pods' images: {pulled:?}");
    for (spoke, _, _, _) in SPOKES {
        let pulled = pulled_from(
            &fleet.spoke(spoke).client(),
            WORK_AGENT_NAMESPACE,
            &published.image_registry,
        )
        .await?;
        println!("{spoke}: agent's image: {pulled:?}");
    }
    let (ie, us, eu) = (
        gateways.address("spoke-1"),
        gateways.address("spoke-2"),
        gateways.address("spoke-3"),
    );
    answers_become(&hub, Some(IRELAND), &[ie.as_str()]).await?;
    println!(
        "helm install → first correct answer: {:.1} s",
        installed.elapsed().as_secs_f64()
    );
    answers_become(&hub, Some(UNITED_STATES), &[us.as_str()]).await?;
    answers_become(&hub, Some(FRANCE), &[eu.as_str()]).await?;

    // Weight: with spoke-3 (Azure, weight 30) in the IE group beside spoke-1 (AWS, 120),
    // Ireland gets both, in proportion.
    label_geo(&hub, "spoke-3", "IE").await?;
    let seen = eventually("Ireland gets both IE clusters", DEFAULT_PATIENCE, || {
        let hub = hub.clone();
        async move {
            let mut seen = BTreeMap::<String, u32>::new();
            for _ in 0..60 {
                for ip in dig_service(&hub, Some(IRELAND)).await? {
                    *seen.entry(ip).or_default() += 1;
                }
            }
            Ok((seen.len() == 2).then_some(seen))
        }
    })
    .await?;
    let mut ie_group = vec![ie.clone(), eu.clone()];
    ie_group.sort();
    assert_eq!(seen.keys().cloned().collect::<Vec<_>>(), ie_group);
    assert!(seen[&ie] > seen[&eu], "120 : 30 shows: {seen:?}");
    println!("Ireland, 60 queries: {seen:?}");

    address_changes_reach_every_server(&fleet).await?;

    // An AddOnDeploymentConfig for every add-on agent, as a fleet with an image mirror and
    // infrastructure nodes has: the agent's image from the mirror (a copy in another
    // repository of the registry), its resources, a toleration; the template's namespace kept.
    let mirror = format!("{}/mirror", registry.host);
    for tag in [hub_image.tag(), next_tag.as_str()] {
        registry.mirror(
            &format!("{}/meridian-agent:{tag}", published.image_registry),
            &format!("mirror/meridian-agent:{tag}"),
        )?;
    }
    let deployment_config = json!({
        "apiVersion": "addon.open-cluster-management.io/v1alpha1",
        "kind": "AddOnDeploymentConfig",
        "metadata": { "name": "meridian-agents", "namespace": NAMESPACE },
        "spec": {
            "agentInstallNamespace": "",
            "registries": [{
                "source": format!("{}/meridian-agent", published.image_registry),
                "mirror": format!("{mirror}/meridian-agent"),
            }],
            // OCM v1.2.1's addon manager applies tolerations only beside a node selector.
            "nodePlacement": {
                "nodeSelector": { "kubernetes.io/os": "linux" },
                "tolerations": [{ "key": "meridian.dev/infra", "operator": "Exists", "effect": "NoSchedule" }],
            },
            "resourceRequirements": [{
                "containerID": "deployments:meridian-agent:agent",
                "resources": { "requests": { "cpu": "20m", "memory": "48Mi" } },
            }],
        },
    });
    Api::<DynamicObject>::namespaced_with(
        hub.clone(),
        NAMESPACE,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "addon.open-cluster-management.io",
            "v1alpha1",
            "AddOnDeploymentConfig",
        )),
    )
    .patch(
        "meridian-agents",
        &PatchParams::apply("example-admin").force(),
        &Patch::Apply(&deployment_config),
    )
    .await?;

    // helm upgrade to the new tag of the same images (pushed above), and from agents the hub
    // installs to OCM's add-on, while a client keeps asking from Ireland.
    let probing = Arc::new(AtomicBool::new(true));
    let prober = tokio::spawn(probe_answers(
        hub.clone(),
        ie_group.clone(),
        probing.clone(),
    ));
    let spoke_names: Vec<String> = SPOKES
        .iter()
        .map(|(spoke, _, _, _)| spoke.to_string())
        .collect();
    let installing = tokio::spawn(addon_rollout(hub.clone(), spoke_names.clone(), None));
    let upgrade_started = Instant::now();
    upgrade_release(
        &fleet,
        &published,
        &[
            &format!("image.tag={next_tag}"),
            "agent.delivery=addon",
            &format!("agent.addon.deploymentConfig={NAMESPACE}/meridian-agents"),
        ],
    )?;
    let new_pods = wait_for_hub_pods(&hub, &next_tag).await?;
    // The new hub writes its agent as an AddOnTemplate, which OCM's addon manager installs on
    // every cluster (the first install of an add-on is not rolled out: there is nothing to
    // keep).
    let spokes: Vec<&str> = SPOKES.iter().map(|(spoke, _, _, _)| *spoke).collect();
    let (template, installed) = installing.await.expect("the watch ran")?;
    for (cluster, asked, available) in installed {
        println!(
            "install of {template}: {cluster} asked at {:.1} s, Available at {:.1} s after helm upgrade",
            asked.as_secs_f64(),
            available.as_secs_f64()
        );
    }
    println!("kubectl get managedclusteraddon -A:");
    for state in addon_states(&hub, &spokes).await? {
        assert_eq!(state.available.as_deref(), Some("True"), "{state}");
        println!("  {state}");
    }
    for (spoke, _, _, _) in SPOKES {
        wait_for_agent_pod(&fleet.spoke(spoke).client(), AGENT_NAMESPACE, &next_tag).await?;
        // The deployment config: the image from the mirror, the resources, the toleration.
        // (containerd names a pulled image by the first repository it knew its digest under,
        // here the one the earlier agent came from, so the pod spec says where it came from.)
        let agent = Api::<Deployment>::namespaced(fleet.spoke(spoke).client(), AGENT_NAMESPACE)
            .get("meridian-agent")
            .await?;
        let pod = agent
            .spec
            .and_then(|spec| spec.template.spec)
            .expect("a pod spec");
        let image = pod.containers[0].image.clone().unwrap_or_default();
        assert!(
            image.starts_with(&format!("{mirror}/meridian-agent:")),
            "{spoke}: {image}"
        );
        println!("{spoke}: add-on agent's image: {image}");
        let requests = pod.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .unwrap_or_default();
        assert_eq!(
            requests.get("cpu").map(|q| q.0.as_str()),
            Some("20m"),
            "{spoke}"
        );
        assert!(
            pod.tolerations
                .unwrap_or_default()
                .iter()
                .any(|t| t.key.as_deref() == Some("meridian.dev/infra")),
            "{spoke}: the deployment config's toleration"
        );
    }
    // Once a cluster's add-on is Available, the hub removes the agent it installed itself, and
    // its ServiceAccount (every token it minted goes with it).
    let works = Api::<DynamicObject>::all_with(hub.clone(), &OcmDynamicApis::manifest_work());
    let handed_over = eventually(
        "the hub's own agent works are gone",
        DEFAULT_PATIENCE,
        || {
            let works = works.clone();
            async move {
                let agent_works = works
                    .list(&ListParams::default().fields("metadata.name=meridian-agent"))
                    .await?;
                Ok(agent_works.items.is_empty().then_some(()))
            }
        },
    )
    .await;
    if handed_over.is_err() {
        eprintln!("{}", fleet.hub.node().expect("a node").pod_logs());
    }
    handed_over?;
    for (spoke, _, _, _) in SPOKES {
        let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), spoke);
        assert!(
            accounts.get_opt("meridian-agent").await?.is_none(),
            "the hub-minted identity in {spoke}'s namespace is gone"
        );
    }
    println!(
        "helm upgrade → hub {new_pods:?} and the three add-on agents on {next_tag}: {:.1} s",
        upgrade_started.elapsed().as_secs_f64()
    );
    // A new agent version (back to the first tag: a new template all the same) is rolled out
    // over the placement one cluster at a time (the chart's `progressive`): each cluster is
    // asked to run it only once the one before it is Available with it.
    let rolling = tokio::spawn(addon_rollout(
        hub.clone(),
        spoke_names.clone(),
        Some(template.clone()),
    ));
    upgrade_release(
        &fleet,
        &published,
        &[&format!("image.tag={}", hub_image.tag())],
    )?;
    let next_template = current_addon_template(&hub, Some(&template)).await?;
    let (rolled, order) = rolling.await.expect("the watch ran")?;
    assert_eq!(rolled, next_template);
    for (cluster, asked, available) in &order {
        println!(
            "rollout of {next_template}: {cluster} asked at {:.1} s, Available at {:.1} s",
            asked.as_secs_f64(),
            available.as_secs_f64()
        );
    }
    for pair in order.windows(2) {
        assert!(
            pair[1].1 >= pair[0].2,
            "{} was asked before {} was Available: {order:?}",
            pair[1].0,
            pair[0].0
        );
    }
    for (spoke, _, _, _) in SPOKES {
        wait_for_agent_pod(
            &fleet.spoke(spoke).client(),
            AGENT_NAMESPACE,
            hub_image.tag(),
        )
        .await?;
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    probing.store(false, Ordering::SeqCst);
    let probe = prober.await.unwrap();
    println!(
        "during the upgrade: {} queries, {} failed, longest gap {:.1} s",
        probe.queries,
        probe.failures,
        probe.longest_gap.as_secs_f64()
    );
    // Every replica answers (standbys mirror the zones), the Deployment replaces one at a time,
    // and a stopping replica answers until the Service has let it go: no query goes unanswered.
    assert_eq!(
        probe.failures, 0,
        "no DNS gap during the upgrade: {probe:?}"
    );
    assert!(probe.queries > 10, "the client asked throughout: {probe:?}");
    answers_become(&hub, Some(UNITED_STATES), &[us.as_str()]).await?;

    // Uninstall: the policy goes first, while the hub still runs to withdraw its records (the
    // finalizers are the hub's); then the release, whose pre-delete hook stops the hub and
    // removes the agents. The Gateway stays placed, so a hub still running would reinstall them.
    Api::<DNSPolicy>::namespaced(hub.clone(), NAMESPACE)
        .delete(GATEWAY, &DeleteParams::default())
        .await?;
    let records: Api<DNSRecord> = Api::namespaced(hub.clone(), NAMESPACE);
    let withdrawn = eventually("the policy's records are gone", DEFAULT_PATIENCE, || {
        let records = records.clone();
        async move {
            let list = records.list(&ListParams::default()).await?;
            Ok(list.items.is_empty().then_some(()))
        }
    })
    .await;
    if withdrawn.is_err() {
        eprintln!("{}", fleet.hub.node().expect("a node").pod_logs());
    }
    withdrawn?;
    answers_become(&hub, Some(IRELAND), &[]).await?;
    let secrets: Api<Secret> = Api::namespaced(hub.clone(), RELEASE_NAMESPACE);
    assert!(
        secrets.get_opt("meridian-probe-seal").await?.is_some(),
        "the hub made its key for sealing probes"
    );
    let uninstalled = run_helm(
        &fleet.hub,
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            RELEASE_NAMESPACE,
            "--wait",
        ],
    );
    if uninstalled.is_err() {
        eprintln!("{}", fleet.hub.node().expect("a node").pod_logs());
    }
    uninstalled?;
    let pods: Api<Pod> = Api::namespaced(hub.clone(), RELEASE_NAMESPACE);
    eventually("nothing of the release runs", DEFAULT_PATIENCE, || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default()).await?;
            Ok(list.items.is_empty().then_some(()))
        }
    })
    .await?;
    // The add-on goes with its ClusterManagementAddOn, ManagedClusterAddOns and templates;
    // the addon manager then deletes its works, and OCM's work agent what they applied.
    eventually("no add-on or agent work is left", DEFAULT_PATIENCE, || {
        let (works, hub) = (works.clone(), hub.clone());
        async move {
            let addons = Api::<meridian_api::upstream::ManagedClusterAddOn>::all(hub.clone())
                .list(&ListParams::default())
                .await?;
            let templates = Api::<DynamicObject>::all_with(
                hub.clone(),
                &meridian_hub::addon::template_resource(),
            )
            .list(&ListParams::default())
            .await?;
            let works = works.list(&ListParams::default()).await?;
            let agent_works = works
                .items
                .iter()
                .filter(|w| {
                    w.name_any() == "meridian-agent" || w.name_any().starts_with("addon-meridian")
                })
                .count();
            Ok(
                (addons.items.is_empty() && templates.items.is_empty() && agent_works == 0)
                    .then_some(()),
            )
        }
    })
    .await?;
    for (spoke, _, _, _) in SPOKES {
        let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), spoke);
        assert!(
            accounts.get_opt("meridian-agent").await?.is_none(),
            "the agent's hub identity in {spoke}'s namespace is gone"
        );
        // Deleted by the uninstall hook with a right only it has, and only while it runs.
        let bindings: Api<ClusterRoleBinding> = Api::all(hub.clone());
        assert!(
            bindings
                .get_opt(&format!("meridian-agent-probes-{spoke}"))
                .await?
                .is_none(),
            "the agent's cluster-wide binding for {spoke} is gone"
        );
        let client = fleet.spoke(spoke).client();
        let namespaces: Api<Namespace> = Api::all(client.clone());
        eventually(
            &format!("{spoke} has no agent left"),
            DEFAULT_PATIENCE,
            || {
                let namespaces = namespaces.clone();
                async move {
                    let work_agent = namespaces.get_opt(WORK_AGENT_NAMESPACE).await?;
                    let addon_agent = namespaces.get_opt(AGENT_NAMESPACE).await?;
                    Ok((work_agent.is_none() && addon_agent.is_none()).then_some(()))
                }
            },
        )
        .await?;
        // The users' Gateway is still placed: its copies on the spokes are theirs, and stay.
        let downstream: Api<Gateway> = Api::namespaced(client, &format!("kuadrant-{NAMESPACE}"));
        assert!(
            downstream.get_opt(GATEWAY).await?.is_some(),
            "{spoke} keeps the users' Gateway"
        );
    }
    // What stays is the users' and the namespace's: the hub's Lease, held by the uninstall so
    // that no replica could lead (and reinstall agents) while Helm deleted them.
    let leases: Api<Lease> = Api::namespaced(hub.clone(), RELEASE_NAMESPACE);
    let holder = leases
        .get("meridian-hub")
        .await?
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("meridian-uninstall"));
    assert!(
        secrets.get_opt("meridian-probe-seal").await?.is_none(),
        "the key the hub made for sealing probes went with it"
    );
    Ok(())
}

/// A synthetic fleet beside the example's (clusters, reports, heartbeats, Gateways and
/// loadbalanced policies, as OCM, agents and admins write them) in the example zone, which it
/// signs as `make demo` does (and which stays signed for the rest of the test); then one
/// cluster's gateway address changes five times in a row, alone and then while other
/// clusters' addresses change in the same moments. Each server of the zone, asked directly
/// (each hub replica, each agent), answers each new address, and the next change comes only
/// once every server has: no server lags the record's status by a change. The lag behind the
/// status is printed (a figure, not asserted). The synthetic fleet is gone again afterwards.
async fn address_changes_reach_every_server(fleet: &Fleet) -> Result<(), Error> {
    let hub = fleet.hub.client();
    let synthetic = SyntheticFleet {
        clusters: 15,
        gateways: 15,
        strategy: Strategy::LoadBalanced,
        first_cluster: 100,
    };
    write_fleet(&hub, &synthetic, true).await?;
    let heartbeats = heartbeat(hub.clone(), synthetic.clone(), Duration::from_secs(10));
    let mut servers: Vec<(String, SocketAddr)> = dns_endpoints(&hub)
        .await?
        .into_iter()
        .map(|address| (format!("hub replica {}", address.ip()), address))
        .collect();
    assert_eq!(servers.len(), 2, "both hub replicas serve: {servers:?}");
    for (spoke, _, _, _) in SPOKES {
        let pods: Api<Pod> = Api::namespaced(fleet.spoke(spoke).client(), WORK_AGENT_NAMESPACE);
        let list = pods
            .list(&ListParams::default().labels("app=meridian-agent"))
            .await?;
        let address = list
            .items
            .iter()
            .filter(|pod| pod.metadata.deletion_timestamp.is_none())
            .find_map(|pod| pod.status.as_ref()?.pod_ip.as_ref()?.parse().ok())
            .expect("the agent pod has an address");
        servers.push((format!("{spoke}'s agent"), SocketAddr::new(address, 5353)));
    }
    let addresses: Vec<SocketAddr> = servers.iter().map(|(_, address)| *address).collect();
    for (name, address) in &servers {
        let asked = Instant::now();
        wait_answering(&synthetic, *address, DEFAULT_PATIENCE).await?;
        println!(
            "{name} answers the synthetic fleet's {} hosts ({:.1} s)",
            synthetic.gateways,
            asked.elapsed().as_secs_f64()
        );
    }
    let mut overrides = BTreeMap::new();
    let j = 3;
    let i = synthetic.placed(j)[0];
    for (round, churn) in [(1u8, None), (2u8, Some((2u8, 6usize)))] {
        let new: Vec<String> = (1..=5).map(|k| format!("10.99.{round}.{k}")).collect();
        let run = ChangeRun {
            cluster: i,
            gateway: j,
            addresses: new,
            churn,
        };
        let changes = change_address(
            &hub,
            &synthetic,
            &run,
            &addresses,
            &mut overrides,
            DEFAULT_PATIENCE,
        )
        .await?;
        let what = if churn.is_some() {
            "with six other addresses changing"
        } else {
            "alone"
        };
        for (index, (name, _)) in servers.iter().enumerate() {
            let each: Vec<String> = changes
                .iter()
                .map(|change| match change.after_status()[index] {
                    Some(after) => format!("{}ms", after.as_millis()),
                    None => format!("never (answered {:?})", change.last_answer[index]),
                })
                .collect();
            println!(
                "{what}: {name} answered each change after status said it: {}",
                each.join(" ")
            );
        }
        for change in &changes {
            assert!(
                change.published.is_some(),
                "status says {} is published",
                change.address
            );
            for (index, (name, _)) in servers.iter().enumerate() {
                assert!(
                    change.answered[index].is_some(),
                    "{name} answers {} at {} ({what}); it answers {:?}",
                    change.address,
                    change.name,
                    change.last_answer[index]
                );
            }
        }
    }
    // What each replica says of itself: nothing behind the records' status, and, once the
    // leader's status write has followed the last change, the leader's content. Asked as a
    // scraper the admin allowed (the chart answers /metrics to no one else).
    let token = scraper_token(&hub, servers[0].1).await?;
    idle_flood_leaves_the_pod_ready(&hub, &synthetic, servers[0].1).await?;
    for (name, address) in servers.iter().take(2) {
        let health = SocketAddr::new(address.ip(), 8080);
        let token = token.clone();
        eventually(
            &format!("{name} says it serves the leader's content"),
            DEFAULT_PATIENCE,
            || {
                let token = token.clone();
                async move {
                    let (status, metrics) =
                        meridian_e2e::observe::get_as(health, "/metrics", Some(&token)).await?;
                    let says = |line: &str| metrics.lines().any(|l| l == line);
                    let serves = says("meridian_mirror_records_behind 0")
                        && says(r#"meridian_zone_serves_leader_content{zone="example.com"} 1"#)
                        && says(r#"meridian_zone_unserved_changes{zone="example.com"} 0"#);
                    if !serves {
                        let said: Vec<&str> = metrics
                            .lines()
                            .filter(|l| {
                                l.starts_with("meridian_zone_") || l.starts_with("meridian_mirror_")
                            })
                            .collect();
                        eprintln!("{health}: {status}: {said:?}");
                    }
                    Ok(serves.then_some(()))
                }
            },
        )
        .await?;
    }
    heartbeats.abort();
    remove_fleet(&hub, &synthetic).await
}

/// The hub pod answering DNS at `address`: its Ready condition and its container's restarts.
async fn hub_pod_state(hub: &Client, address: SocketAddr) -> Result<(bool, i32), Error> {
    let pods: Api<Pod> = Api::namespaced(hub.clone(), RELEASE_NAMESPACE);
    let pod = pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|pod| {
            pod.status.as_ref().and_then(|s| s.pod_ip.as_deref())
                == Some(address.ip().to_string().as_str())
        })
        .expect("the replica's pod");
    let status = pod.status.unwrap_or_default();
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    let restarts = status
        .container_statuses
        .iter()
        .flatten()
        .map(|c| c.restart_count)
        .sum();
    Ok((ready, restarts))
}

/// 1,000 idle connections to a hub pod's HTTP port, held for 30 s (three liveness periods, 15
/// readiness periods): the pod stays Ready without a restart and answers DNS meanwhile. They
/// come from this host, the kubelet's own address, so the kubelet's probes share the flood's
/// share of the port ([`meridian_hub::http::Limits`]) and still pass.
async fn idle_flood_leaves_the_pod_ready(
    hub: &Client,
    synthetic: &meridian_e2e::synthetic::SyntheticFleet,
    address: SocketAddr,
) -> Result<(), Error> {
    use tokio::io::AsyncReadExt;
    let (ready, restarts_before) = hub_pod_state(hub, address).await?;
    assert!(ready, "the replica is Ready before the flood");
    let health = SocketAddr::new(address.ip(), 8080);
    let mut held = Vec::new();
    for _ in 0..1000 {
        if let Ok(Ok(stream)) = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(health),
        )
        .await
        {
            held.push(stream);
        }
    }
    let flooded = Instant::now();
    while flooded.elapsed() < Duration::from_secs(30) {
        wait_answering(synthetic, address, DEFAULT_PATIENCE).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let mut closed = 0;
    for stream in &mut held {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(20), stream.read(&mut byte)).await
        {
            closed += 1;
        }
    }
    let (ready, restarts) = hub_pod_state(hub, address).await?;
    println!(
        "{} idle connections to {health} held for 30 s: {closed} closed by the hub; Ready {ready}, \
         restarts {restarts_before} → {restarts}; DNS answered throughout",
        held.len()
    );
    assert!(
        held.len() >= 1000 && closed >= 980,
        "the flood reached the pod: {closed}"
    );
    assert!(ready, "the replica stays Ready");
    assert_eq!(restarts, restarts_before, "no restart");
    Ok(())
}

/// A token for a ServiceAccount the admin lets scrape `/metrics` (bound to the chart's
/// `meridian-metrics-reader`), after showing that a hub pod at `address` refuses a client
/// without a token (401), one whose identity lacks the right (403), and the view to the
/// scraper (403), while its probes stay open.
async fn scraper_token(hub: &Client, address: SocketAddr) -> Result<String, Error> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use meridian_e2e::observe::get_as;
    let health = SocketAddr::new(address.ip(), 8080);
    let view = SocketAddr::new(address.ip(), 8088);
    let accounts: Api<ServiceAccount> = Api::namespaced(hub.clone(), RELEASE_NAMESPACE);
    meridian_e2e::example::apply(
        &accounts,
        serde_json::json!({
            "apiVersion": "v1", "kind": "ServiceAccount",
            "metadata": { "name": "scraper", "namespace": RELEASE_NAMESPACE },
        }),
    )
    .await?;
    let token = accounts
        .create_token_request(
            "scraper",
            &PostParams::default(),
            &TokenRequest {
                spec: Some(TokenRequestSpec {
                    expiration_seconds: Some(3600),
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
        .await?
        .status
        .and_then(|s| s.token)
        .unwrap_or_default();
    let (status, _) = get_as(health, "/livez", None).await?;
    assert!(status.contains(" 200 "), "the kubelet's probe: {status}");
    let (status, _) = get_as(health, "/metrics", None).await?;
    assert!(status.contains(" 401 "), "no token: {status}");
    let (status, _) = get_as(health, "/metrics", Some("made-up")).await?;
    assert!(status.contains(" 401 "), "a made-up token: {status}");
    let (status, _) = get_as(health, "/metrics", Some(&token)).await?;
    assert!(
        status.contains(" 403 "),
        "an identity without the right: {status}"
    );
    meridian_e2e::example::apply(
        &Api::<ClusterRoleBinding>::all(hub.clone()),
        serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": { "name": "scraper-reads-meridian-metrics" },
            "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "meridian-metrics-reader" },
            "subjects": [{ "kind": "ServiceAccount", "name": "scraper", "namespace": RELEASE_NAMESPACE }],
        }),
    )
    .await?;
    // The refusal is remembered for 5 s at most.
    eventually("the scraper may read /metrics", DEFAULT_PATIENCE, || {
        let token = token.clone();
        async move {
            let (status, _) = get_as(health, "/metrics", Some(&token)).await?;
            Ok(status.contains(" 200 ").then_some(()))
        }
    })
    .await?;
    let (status, _) = get_as(view, "/", Some(&token)).await?;
    assert!(
        status.contains(" 403 "),
        "the scraper may not read the view: {status}"
    );
    Ok(token)
}

/// Deletes what [`write_fleet`] wrote of `synthetic` but the namespace and zone it shares with
/// the example, and waits until its records are withdrawn.
async fn remove_fleet(hub: &Client, synthetic: &SyntheticFleet) -> Result<(), Error> {
    let clusters = Api::<DynamicObject>::all_with(hub.clone(), &OcmDynamicApis::managed_cluster());
    let policies: Api<DNSPolicy> = Api::namespaced(hub.clone(), NAMESPACE);
    let gateways: Api<Gateway> = Api::namespaced(hub.clone(), NAMESPACE);
    for j in 0..synthetic.gateways {
        policies
            .delete(&synthetic.gateway(j), &DeleteParams::default())
            .await?;
        gateways
            .delete(&synthetic.gateway(j), &DeleteParams::default())
            .await?;
    }
    let decisions: Api<DynamicObject> = Api::namespaced_with(
        hub.clone(),
        NAMESPACE,
        &OcmDynamicApis::placement_decision(),
    );
    for j in 0..synthetic.gateways {
        decisions
            .delete(
                &format!("{}-decision-1", synthetic.gateway(j)),
                &DeleteParams::default(),
            )
            .await?;
    }
    // The clusters, and their namespaces with the reports, Leases and what the hub made there
    // for their agents.
    let namespaces: Api<Namespace> = Api::all(hub.clone());
    for i in 0..synthetic.clusters {
        clusters
            .delete(&synthetic.cluster(i), &DeleteParams::default())
            .await?;
        namespaces
            .delete(&synthetic.cluster(i), &DeleteParams::default())
            .await?;
    }
    let records: Api<DNSRecord> = Api::namespaced(hub.clone(), NAMESPACE);
    eventually(
        "the synthetic fleet's records are gone",
        DEFAULT_PATIENCE,
        || {
            let records = records.clone();
            async move {
                let left = records
                    .list(&ListParams::default())
                    .await?
                    .items
                    .iter()
                    .filter(|record| {
                        record
                            .metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with("gw-"))
                    })
                    .count();
                Ok((left == 0).then_some(()))
            }
        },
    )
    .await
}

async fn lease_holder(hub: &Client) -> Result<String, Error> {
    let leases: Api<Lease> = Api::namespaced(hub.clone(), RELEASE_NAMESPACE);
    eventually("a hub pod holds the Lease", DEFAULT_PATIENCE, || {
        let leases = leases.clone();
        async move {
            Ok(leases
                .get_opt("meridian-hub")
                .await?
                .and_then(|lease| lease.spec?.holder_identity))
        }
    })
    .await
}

async fn label_geo(hub: &Client, cluster: &str, geo: &str) -> Result<(), Error> {
    let clusters = Api::<DynamicObject>::all_with(hub.clone(), &OcmDynamicApis::managed_cluster());
    let patch = serde_json::json!({ "metadata": { "labels": { GEO_LABEL: geo } } });
    clusters
        .patch(
            cluster,
            &Default::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await?;
    Ok(())
}

#[derive(Debug, Default)]
struct Probe {
    queries: u32,
    failures: u32,
    longest_gap: Duration,
}

/// Asks from Ireland through the Service until told to stop; a query fails when it gets no
/// answer or not one of the IE group's addresses (`ie_group`).
async fn probe_answers(hub: Client, ie_group: Vec<String>, probing: Arc<AtomicBool>) -> Probe {
    let mut probe = Probe::default();
    let mut failing_since: Option<Instant> = None;
    while probing.load(Ordering::SeqCst) {
        let answer = dig_service(&hub, Some(IRELAND)).await.unwrap_or_default();
        let good = answer.len() == 1 && ie_group.contains(&answer[0]);
        if !good {
            // What a failing query got, so a gap can be explained (no endpoint, no answer, or
            // a wrong one).
            println!("probe query {} got {answer:?}", probe.queries);
        }
        probe.queries += 1;
        match (good, failing_since) {
            (false, None) => {
                probe.failures += 1;
                failing_since = Some(Instant::now());
            }
            (false, Some(_)) => probe.failures += 1,
            (true, Some(since)) => {
                probe.longest_gap = probe.longest_gap.max(since.elapsed());
                failing_since = None;
            }
            (true, None) => {}
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Some(since) = failing_since {
        probe.longest_gap = probe.longest_gap.max(since.elapsed());
    }
    probe
}
