//! The `meridian-testbed` command line.

use clap::{Parser, Subcommand};

use crate::Fleet;

#[derive(Debug, Parser)]
#[command(
    name = "meridian-testbed",
    version,
    about = "Meridian's test bed of real control planes"
)]
pub struct Cli {
    /// Log filter in `tracing` syntax. kube's client logs every refused connection while the
    /// test bed polls a starting apiserver, so it is quiet unless asked for.
    #[arg(
        long,
        env = "MERIDIAN_LOG",
        default_value = "info,kube_client=off",
        global = true
    )]
    pub log: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run Meridian end to end as users run it: a hub and three spokes with OCM and a node
    /// each, the hub installed by its chart from the images `make images` built, the agents the
    /// hub delivers running as pods, Traefik and the demo app on every spoke, the example
    /// DNSPolicy with a health check, answers through the hub's DNS Service and requests
    /// through Unbound; stop on Ctrl-C.
    Demo {
        /// Run the hub and the agents inside this process instead, on control planes without
        /// nodes (no images needed; starts in about half the time; no gateway serves: the demo
        /// writes the Gateways' addresses itself).
        #[arg(long)]
        in_process: bool,
    },
}

impl Cli {
    pub fn parse_and_run() -> anyhow::Result<()> {
        Self::parse().run()
    }

    pub fn run(self) -> anyhow::Result<()> {
        match self.command {
            Command::Demo { in_process: true } => run_program(&self.log, demo()),
            Command::Demo { in_process: false } => run_program(&self.log, demo_pods()),
        }
    }
}

/// Runs a test-bed program (the demo, a benchmark) to its end: logs to standard error under
/// `log` (a `tracing` filter), on a current-thread runtime, because every child process is
/// spawned from this thread and its parent-death signal is tied to it.
pub fn run_program(
    log: &str,
    program: impl std::future::Future<Output = anyhow::Result<()>>,
) -> anyhow::Result<()> {
    init_logging(log);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(program)
}

/// Logs to standard error, filtered by `log` (`RUST_LOG` syntax).
pub fn init_logging(log: &str) {
    tracing_subscriber::fmt()
        .with_env_filter(log)
        .with_writer(std::io::stderr)
        .init();
}

async fn demo() -> anyhow::Result<()> {
    use crate::example::{
        FRANCE, HOST, IRELAND, NAMESPACE, RunningExample, UNITED_STATES, dig, with_example_spokes,
    };
    use meridian_api::conditions::{ENFORCED, condition_status};
    use meridian_api::kuadrant::{DNSPolicy, DNSRecord};

    let started = std::time::Instant::now();
    println!(
        "Starting a hub and three spokes (real kube-apiservers, OCM placement and work agents)..."
    );
    let fleet = with_example_spokes(Fleet::builder()).start().await?;
    // Each spoke: the hub's ManifestWork creates the downstream Gateway; the demo plays the
    // gateway implementation (there is no Istio here) and gives it an address; the agent runs
    // with the hub credentials the hub delivered to the spoke.
    let example = RunningExample::start(&fleet, std::time::Duration::from_secs(10)).await?;
    let hub_client = fleet.hub.client();
    let policies: kube::Api<DNSPolicy> = kube::Api::namespaced(hub_client.clone(), NAMESPACE);
    crate::eventually("the DNSPolicy is Enforced", crate::DEFAULT_PATIENCE, || {
        let policies = policies.clone();
        async move {
            let policy = policies.get("prod-web").await?;
            Ok(policy
                .status
                .filter(|s| condition_status(&s.conditions, ENFORCED) == Some(true))
                .map(|_| ()))
        }
    })
    .await?;
    let record = kube::Api::<DNSRecord>::namespaced(hub_client.clone(), NAMESPACE)
        .get("prod-web-api")
        .await?;
    println!(
        "\nUp in {:.1} s. The DNSRecord prod-web-api the hub built from the policy:",
        started.elapsed().as_secs_f64()
    );
    for endpoint in record.status.map(|s| s.endpoints).unwrap_or_default() {
        let routing: Vec<String> = endpoint
            .provider_specific
            .iter()
            .map(|p| format!("{}={}", p.name, p.value))
            .collect();
        println!(
            "  {:<44} {:<5} {:<28} -> {}",
            endpoint.dns_name,
            serde_json::to_value(endpoint.record_type)?
                .as_str()
                .unwrap_or_default(),
            routing.join(","),
            endpoint.targets.join(", ")
        );
    }
    let nameserver = example.hub.nameserver;
    println!(
        "\nAnswers for {HOST} (spoke-1 IE 10.0.0.1, spoke-2 US 10.0.0.2, spoke-3 GEO-EU 10.0.0.3):"
    );
    for (place, subnet) in [
        ("Ireland", IRELAND),
        ("the United States", UNITED_STATES),
        ("France", FRANCE),
    ] {
        let answers = tokio::task::spawn_blocking(move || dig(nameserver, Some(subnet))).await?;
        println!(
            "  from {place:<18} (+subnet={subnet}): {}",
            answers.join(", ")
        );
    }
    let geoip = example.dir.path().join("country.mmdb");
    print_explanation(
        &hub_client,
        UNITED_STATES,
        &geoip,
        fleet.hub.kubeconfig_path(),
    )
    .await?;
    println!("\nnameserver: {nameserver}");
    println!("live view: http://{}/", example.hub.view);
    println!("KUBECONFIG={}", fleet.hub.kubeconfig_path().display());
    println!("kubectl: {}", fleet.assets.kubectl.display());
    println!(
        "\nTry it (in another shell, with the KUBECONFIG above):
  dig @{ip} -p {port} {HOST} +subnet={UNITED_STATES} +short
  kubectl label managedcluster spoke-2 kuadrant.io/lb-attribute-geo-code=IE --overwrite
  dig @{ip} -p {port} {HOST} +subnet={UNITED_STATES} +short    # now the IE group answers
  kubectl -n {NAMESPACE} patch dnspolicy prod-web --type merge -p '{{\"spec\":{{\"loadBalancing\":{{\"weighted\":{{\"defaultWeight\":10}}}}}}}}'
  kubectl -n {NAMESPACE} get dnsrecord prod-web-api -o yaml    # the weights changed
Press Ctrl-C to stop; everything is deleted on exit.",
        ip = nameserver.ip(),
        port = nameserver.port()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    println!("Stopping.");
    example.stop().await;
    drop(fleet);
    Ok(())
}

async fn demo_pods() -> anyhow::Result<()> {
    use crate::example::{
        FRANCE, HOST, IRELAND, NAMESPACE, SPOKES, UNITED_STATES, ZONE_DOMAIN, apply, install,
        with_example_spokes,
    };
    use crate::release::{
        RELEASE_NAMESPACE, answers_become, dig_service, dns_endpoints, imported_archives,
        install_release, publish, pulled_from, wait_for_agent_pod, wait_for_hub_pods,
    };
    use crate::traffic::{
        ExampleGateways, Resolver, fault_command, health_checked_policy, request, tiered_policy,
    };

    let started = std::time::Instant::now();
    let images = crate::built_images()?;
    let hub_image = crate::image_named(&images, "/meridian-hub");
    let app_image = crate::image_named(&images, "/meridian-demo-app");
    println!(
        "Starting a hub and three spokes, each with a node (kubelet, containerd) holding {}...",
        images
            .iter()
            .map(|image| image.reference.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    // The hub's and agent's images and the chart come from the test bed's registry, as a
    // release's come from yours.
    let registry = crate::registry::Registry::start().await?;
    let published = publish(&registry, &images, &[hub_image.tag()])?;
    // The spokes join through OCM's registration, and the agent is an OCM add-on its addon
    // manager installs, as on a real fleet.
    let fleet = with_example_spokes(Fleet::builder())
        .with_nodes(imported_archives(&images))
        .with_registration()
        .start()
        .await?;
    println!(
        "Nodes Ready after {:.1} s; helm install {} --version {} (images from {}) on the hub...",
        started.elapsed().as_secs_f64(),
        published.chart,
        published.version,
        published.image_registry,
    );
    install_release(&fleet, &published, &[]).await?;
    let hub = fleet.hub.client();
    // Each spoke's Gateway API implementation is Traefik, on the spoke node's address, with the
    // demo app behind it; the hub's ManifestWorks give the spokes' Gateways Traefik's class.
    let mut gateways = ExampleGateways::start(&fleet, &app_image.reference).await?;
    install(&hub).await?;
    apply(
        &kube::Api::<meridian_api::kuadrant::DNSPolicy>::namespaced(hub.clone(), NAMESPACE),
        health_checked_policy(30, "5s", 2, "5s"),
    )
    .await?;
    wait_for_hub_pods(&hub, hub_image.tag()).await?;
    for (spoke, _, _, _) in SPOKES {
        wait_for_agent_pod(
            &fleet.spoke(spoke).client(),
            crate::release::AGENT_NAMESPACE,
            hub_image.tag(),
        )
        .await?;
    }
    let spokes: Vec<&str> = SPOKES.iter().map(|(spoke, _, _, _)| *spoke).collect();
    crate::release::addon_rollout(
        hub.clone(),
        spokes.iter().map(|s| s.to_string()).collect(),
        None,
    )
    .await?;
    println!("\nkubectl get managedclusteraddon -A (OCM's registration and addon manager):");
    for state in crate::release::addon_states(&hub, &spokes).await? {
        println!("  {state}");
    }
    gateways.serving(&fleet).await?;
    for (cluster, namespace) in std::iter::once((&fleet.hub, RELEASE_NAMESPACE)).chain(
        SPOKES
            .iter()
            .map(|(spoke, _, _, _)| (fleet.spoke(spoke), crate::release::AGENT_NAMESPACE)),
    ) {
        let pulled = pulled_from(&cluster.client(), namespace, &published.image_registry).await?;
        println!("{}: Meridian's pods pulled {pulled:?}", cluster.name());
    }
    // Each cluster is published once a probe of its gateway passed.
    answers_become(&hub, Some(IRELAND), &[gateways.address("spoke-1").as_str()]).await?;
    answers_become(
        &hub,
        Some(UNITED_STATES),
        &[gateways.address("spoke-2").as_str()],
    )
    .await?;
    answers_become(&hub, Some(FRANCE), &[gateways.address("spoke-3").as_str()]).await?;
    let endpoints = dns_endpoints(&hub).await?;
    let resolver = Resolver::start(ZONE_DOMAIN, &endpoints).await?;
    println!("\nUp in {:.1} s.", started.elapsed().as_secs_f64());
    for cluster in [&fleet.hub, fleet.spoke("spoke-1")] {
        let pods = std::process::Command::new(&fleet.assets.kubectl)
            .arg(format!(
                "--kubeconfig={}",
                cluster.kubeconfig_path().display()
            ))
            .args(["get", "pods", "-A", "-o", "wide"])
            .output()?;
        println!(
            "\n$ kubectl get pods -A   # on {}\n{}",
            cluster.name(),
            String::from_utf8_lossy(&pods.stdout)
        );
    }
    let spokes: Vec<String> = SPOKES
        .iter()
        .map(|(spoke, geo, _, _)| format!("{spoke} {geo} {}", gateways.address(spoke)))
        .collect();
    println!(
        "Answers for {HOST} through the DNS Service (ready endpoints {endpoints:?}; each spoke's \
         Traefik: {}):",
        spokes.join(", ")
    );
    for (place, subnet) in [
        ("Ireland", IRELAND),
        ("the United States", UNITED_STATES),
        ("France", FRANCE),
    ] {
        let answers = dig_service(&hub, Some(subnet)).await?;
        println!(
            "  from {place:<18} (+subnet={subnet}): {}",
            answers.join(", ")
        );
    }
    let served = request(resolver.address(), HOST, std::time::Duration::from_secs(2)).await;
    println!(
        "\nA request through Unbound ({}) to the gateway it answers: {served:?}",
        resolver.address()
    );

    // DNSSEC on: the leading hub makes the zone's keys (a Secret) and puts the DS in the
    // ManagedZone's status; every hub pod signs with them. A validating Unbound trusts the DS.
    let ds = crate::example::sign_zone(&hub, NAMESPACE, "example", None).await?;
    let validating =
        meridian_testkit::unbound::ValidatingResolver::start(ZONE_DOMAIN, &endpoints, &ds)
            .await
            .map_err(|e| anyhow::anyhow!(e))?;
    let validating_address = validating.address;
    crate::eventually(
        "answers validate at every hub pod",
        crate::DEFAULT_PATIENCE,
        || async move {
            let (validated, _) = tokio::task::spawn_blocking(move || {
                crate::example::dig_validated(validating_address, HOST, "A", Some(IRELAND))
            })
            .await
            .expect("dig ran");
            Ok(validated.then_some(()))
        },
    )
    .await?;
    println!(
        "\nDNSSEC on (kubectl -n {NAMESPACE} patch managedzone example --type merge -p '{{\"spec\":{{\"dnssec\":{{\"enabled\":true}}}}}}'). \
         The DS for the parent zone (status.dnssec.ds):\n  {ds}\nThrough a validating Unbound ({validating_address}) trusting it:"
    );
    for (place, subnet) in [
        ("Ireland", IRELAND),
        ("the United States", UNITED_STATES),
        ("France", FRANCE),
    ] {
        let (validated, answers) = tokio::task::spawn_blocking(move || {
            crate::example::dig_validated(validating_address, HOST, "A", Some(subnet))
        })
        .await?;
        println!(
            "  from {place:<18} (+subnet={subnet}): {} {}",
            answers.join(", "),
            if validated {
                "(AD: validated)"
            } else {
                "(NOT validated)"
            }
        );
    }

    let geoip = fleet.hub.kubeconfig_path().with_file_name("country.mmdb");
    crate::example::write_geoip(&geoip)?;
    print_explanation(&hub, UNITED_STATES, &geoip, fleet.hub.kubeconfig_path()).await?;
    if let Some(endpoint) = endpoints.first() {
        println!(
            "\nThe live view (zones, hosts, trees with health, recent changes), on a hub pod, for an identity bound to the ClusterRole meridian-view-reader:\n  curl -H \"Authorization: Bearer $(kubectl create token <account bound to meridian-view-reader>)\" http://{}:8088/",
            endpoint.ip()
        );
    }

    println!("\nKUBECONFIG={}", fleet.hub.kubeconfig_path().display());
    for (spoke, _, _, _) in SPOKES {
        println!(
            "{spoke}: KUBECONFIG={}",
            fleet.spoke(spoke).kubeconfig_path().display()
        );
    }
    println!("kubectl: {}", fleet.assets.kubectl.display());
    let (resolver_ip, resolver_port) = (resolver.address().ip(), resolver.address().port());
    let curl = format!(
        "curl -s --resolve {HOST}:80:$(dig @{resolver_ip} -p {resolver_port} +short {HOST} | tail -1) http://{HOST}/"
    );
    let spoke_1_app = gateways.app_pod("spoke-1");
    println!(
        "\nTry it (in another shell, with the hub's KUBECONFIG above):
  {curl}    # served by spoke-1 (IE, the default GEO)
Make spoke-1's app fail: its health checks fail (every 5 s, 2 in a row), Meridian withdraws it,
and within about 15 s (with the 5 s TTL) the same curl is served by another cluster:
  {fail}
  while sleep 1; do {curl}; done
Make it recover, and the traffic comes back:
  {recover}",
        fail = fault_command(spoke_1_app, "unavailable"),
        recover = fault_command(spoke_1_app, "none"),
    );
    if let Some(endpoint) = endpoints.first() {
        println!(
            "More:
  kubectl -n {RELEASE_NAMESPACE} get pods,lease
  kubectl get managedclusteraddon -A    # the agent, an OCM add-on, Available on every spoke
  dig @{ip} -p {port} {HOST} +subnet={UNITED_STATES} +short
  dig @{validating_ip} -p {validating_port} {HOST} +dnssec +subnet={UNITED_STATES}    # flags: ... ad
  kubectl -n {NAMESPACE} patch managedzone example --type merge -p '{{\"spec\":{{\"dnssec\":{{\"zskRollover\":\"1\"}}}}}}'    # a ZSK rollover
  kubectl -n {NAMESPACE} get managedzone example -o jsonpath='{{.status.dnssec}}'
  kubectl label managedcluster spoke-2 kuadrant.io/lb-attribute-geo-code=IE --overwrite
  dig @{ip} -p {port} {HOST} +subnet={UNITED_STATES} +short    # now the IE group answers
Cut the hub off from every cluster (freeze the agents), and the answers stay:
  pkill -STOP -f 'meridian-agent run --cluster-name spoke-'
  kubectl -n {NAMESPACE} get dnspolicy prod-web -o jsonpath='{{.status.conditions[?(@.type==\"meridian.dev/FailStatic\")].message}}'
  dig @{ip} -p {port} {HOST} +subnet={UNITED_STATES} +short    # the same answer, minutes on
  pkill -CONT -f 'meridian-agent run --cluster-name spoke-'",
            ip = endpoint.ip(),
            port = endpoint.port(),
            validating_ip = validating_address.ip(),
            validating_port = validating_address.port(),
        );
    }
    // Priority tiers, as a file the user applies: IE first, then US, then the rest. `replace`,
    // not `apply`: the demo wrote the policy by server-side apply, and a client-side apply
    // would keep its `geo` section.
    let tiered_file = fleet
        .hub
        .kubeconfig_path()
        .with_file_name("dnspolicy-failover.json");
    std::fs::write(
        &tiered_file,
        serde_json::to_string_pretty(&tiered_policy("5s", 2, "5s", "60s"))?,
    )?;
    println!(
        "Priority tiers instead of GEO: spoke-1 (IE) first, then spoke-2 (US), then the rest:
  kubectl replace -f {file}
The switch may rewrite most of the zone; then Meridian holds it until approved (the record's
Ready message names the plan):
  kubectl -n {NAMESPACE} get dnsrecord prod-web-api -o jsonpath='{{.status.conditions[?(@.type==\"Ready\")].message}}'
  kubectl -n {NAMESPACE} annotate managedzone example meridian.dev/approve-plan=<the plan it names>
Then spoke-1's failure sends the traffic to spoke-2 (never spoke-3), and after the recovery it
comes back only once spoke-1 has been healthy for the 60 s hold-down:
  {fail}
  {recover}
Drain spoke-1 in TTL-sized steps (its weight 50 %, 10 %, 0), and bring it back the same way:
  kubectl label managedcluster spoke-1 meridian.dev/drain=true
  kubectl -n {NAMESPACE} get dnspolicy prod-web -o jsonpath='{{.status.draining}}'
  kubectl label managedcluster spoke-1 meridian.dev/drain-",
        file = tiered_file.display(),
        fail = fault_command(spoke_1_app, "unavailable"),
        recover = fault_command(spoke_1_app, "none"),
    );
    println!("Press Ctrl-C to stop; everything is deleted on exit.");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    println!("Stopping.");
    drop(validating);
    drop(resolver);
    drop(gateways);
    drop(fleet);
    Ok(())
}

/// Prints `meridian-hub explain` for a client in `subnet`, and the command that repeats it.
async fn print_explanation(
    hub: &kube::Client,
    subnet: &str,
    geoip: &std::path::Path,
    kubeconfig: &std::path::Path,
) -> anyhow::Result<()> {
    use crate::example::HOST;
    let report = crate::observe::explain_live(hub, HOST, Some(subnet), geoip).await?;
    let text = meridian_hub::explain_command::render(
        &report,
        meridian_hub::explain_command::ExplainFormat::Text,
    )?;
    println!(
        "\nWhy a client in {subnet} gets its answer:\n$ cargo run -q -p meridian-hub -- explain {HOST} --client {subnet} --geoip {} --kubeconfig {}\n{text}",
        geoip.display(),
        kubeconfig.display()
    );
    Ok(())
}
