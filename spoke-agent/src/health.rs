//! The agent's health loop: every `DNSHealthCheckProbe` on the hub becomes a leaf this cluster
//! probes, and the results become the `probes` of the cluster's report.
//!
//! The agent may read probes hub-wide, but no hub Secret except, by name, what the hub keeps for
//! the agents in its own namespace: the probes' header Secrets, one copy per tenant namespace
//! (`meridian-probe-headers-<namespace>`, each watched by name while a probe needs it), and the
//! key of the hub's seal (`meridian-probe-seal`). A probe whose headers have not arrived yet is
//! not probed: probing it without them would report a failure that is not the backend's. A probe without
//! the hub's seal (written by hand in a tenant's namespace, or changed since the hub wrote it)
//! is never probed (see `meridian_controllers::decide::probe_seal`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, reflector, watcher};
use kube::{Client, ResourceExt};
use meridian_api::kuadrant::{DNSHealthCheckProbe, HealthProtocol};
use meridian_api::meridian::ProbeReport;
use tokio::sync::{mpsc, watch};

use crate::probe::{Leaf, LeafUpdate, ProbeRunner, ProbeSpec, ProbeState, Prober, Protocol};

use meridian_api::names::{PROBE_SEAL_SECRET, probe_headers_copy};
use meridian_controllers::decide::probe_seal;
/// The tick the seal key is looked at on.
const SEAL_TICK: Duration = Duration::from_secs(30);
/// The seal key is read again every this many ticks once it is here (10 minutes).
const SEAL_REFRESHES: u32 = 20;
/// The same while some probe's seal does not check out (2 minutes).
const UNSEALED_REFRESHES: u32 = 4;
/// Longest wait for one probe's answer. A probe waits a fifth of its interval, between these
/// two: a gateway that hangs is found out after `interval × failureThreshold + timeout` at
/// worst, so at the shortest interval (5 s) the timeout is 1 s, Kubernetes' own probe default.
const MAX_TIMEOUT: Duration = Duration::from_secs(10);
const MIN_TIMEOUT: Duration = Duration::from_secs(1);

/// A probe on the hub: namespace and name.
pub type ProbeKey = (String, String);

/// Headers per `<namespace>.<secret>` key, as the hub's copies hold them.
pub type HeaderCopies = BTreeMap<String, Vec<(String, String)>>;

pub use meridian_api::duration::parse_duration;

/// Reads the hub's header copy for the tenant namespace `namespace`: each key (a Secret's name)
/// holds a JSON object of header names to values. Headers that could smuggle another header or
/// request line (CR, LF, or a name that is not a token) are dropped.
pub fn header_copy(namespace: &str, copy: &Secret) -> HeaderCopies {
    copy.data
        .iter()
        .flatten()
        .filter_map(|(secret, value)| {
            let headers: BTreeMap<String, String> = serde_json::from_slice(&value.0).ok()?;
            let headers = headers
                .into_iter()
                .filter(|(name, value)| safe_header(name, value))
                .collect();
            Some((headers_key(namespace, secret), headers))
        })
        .collect()
}

fn headers_key(namespace: &str, secret: &str) -> String {
    format!("{namespace}.{secret}")
}

/// The tenant namespaces whose header copies the probes need.
pub fn header_namespaces<'a>(
    probes: impl IntoIterator<Item = &'a DNSHealthCheckProbe>,
) -> std::collections::BTreeSet<String> {
    probes
        .into_iter()
        .filter(|probe| probe.spec.additional_headers_ref.is_some())
        .map(|probe| probe.namespace().unwrap_or_default())
        .collect()
}

/// One watch per header copy the probes need, each selecting its copy by name (all the agent's
/// Role allows). A namespace no probe needs any more has its watch stopped and its headers
/// dropped.
struct HeaderWatches {
    copies_api: Api<Secret>,
    watches: HashMap<String, tokio::task::JoinHandle<()>>,
    copies: Arc<std::sync::Mutex<BTreeMap<String, HeaderCopies>>>,
    changed: Arc<tokio::sync::Notify>,
}

impl HeaderWatches {
    fn new(copies_api: Api<Secret>) -> Self {
        HeaderWatches {
            copies_api,
            watches: HashMap::new(),
            copies: Arc::default(),
            changed: Arc::default(),
        }
    }

    /// Watches exactly the copies of `namespaces`.
    fn follow(&mut self, namespaces: &std::collections::BTreeSet<String>) {
        self.watches.retain(|namespace, watch| {
            let wanted = namespaces.contains(namespace);
            if !wanted {
                watch.abort();
            }
            wanted
        });
        self.copies
            .lock()
            .expect("header copies lock")
            .retain(|namespace, _| namespaces.contains(namespace));
        for namespace in namespaces {
            if self.watches.contains_key(namespace) {
                continue;
            }
            let watch = tokio::spawn(watch_copy(
                self.copies_api.clone(),
                namespace.clone(),
                self.copies.clone(),
                self.changed.clone(),
            ));
            self.watches.insert(namespace.clone(), watch);
        }
    }

    /// Every header the copies hold now.
    fn headers(&self) -> HeaderCopies {
        self.copies
            .lock()
            .expect("header copies lock")
            .values()
            .flat_map(|copy| copy.clone())
            .collect()
    }
}

impl Drop for HeaderWatches {
    fn drop(&mut self) {
        for watch in self.watches.values() {
            watch.abort();
        }
    }
}

/// Follows the copy of `namespace`'s headers until aborted, keeping `copies` as it is.
async fn watch_copy(
    api: Api<Secret>,
    namespace: String,
    copies: Arc<std::sync::Mutex<BTreeMap<String, HeaderCopies>>>,
    changed: Arc<tokio::sync::Notify>,
) {
    let name = probe_headers_copy(&namespace);
    let (store, writer) = reflector::store();
    let events = watcher(
        api,
        watcher::Config::default().fields(&format!("metadata.name={name}")),
    )
    .default_backoff()
    .reflect(writer);
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        if let Err(error) = event {
            // Until the hub's Role names a new copy, reading it is forbidden: the watch retries.
            tracing::debug!(%error, copy = %name, "watching a header copy failed; it restarts with backoff");
            continue;
        }
        let copy = store
            .state()
            .first()
            .map(|copy| header_copy(&namespace, copy))
            .unwrap_or_default();
        let mut held = copies.lock().expect("header copies lock");
        if held.get(&namespace) != Some(&copy) {
            held.insert(namespace.clone(), copy);
            changed.notify_one();
        }
    }
}

/// Whether a header can be sent as it is: a token name, and a value that cannot smuggle
/// another header or request line.
pub fn safe_header(name: &str, value: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
        && !value.contains(['\r', '\n', '\0'])
}

/// Why a probe is not probed from here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skipped {
    /// A wildcard host names no one host to ask for.
    Wildcard,
    /// The probe's header Secret has not been copied to this cluster (yet).
    HeadersMissing(String),
    Invalid(String),
}

/// The leaf a probe asks this cluster to check.
pub fn leaf_for(probe: &DNSHealthCheckProbe, headers: &HeaderCopies) -> Result<Leaf, Skipped> {
    let spec = &probe.spec;
    if spec.host.starts_with('*') {
        return Err(Skipped::Wildcard);
    }
    let interval = parse_duration(&spec.interval)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| Skipped::Invalid(format!("interval {:?}", spec.interval)))?;
    let extra_headers = match &spec.additional_headers_ref {
        None => Vec::new(),
        Some(reference) => {
            let key = headers_key(&probe.namespace().unwrap_or_default(), &reference.name);
            headers
                .get(&key)
                .cloned()
                .ok_or(Skipped::HeadersMissing(key))?
        }
    };
    Ok(Leaf {
        spec: ProbeSpec {
            host: spec.host.clone(),
            address: spec.address.clone(),
            port: u16::try_from(spec.port)
                .map_err(|_| Skipped::Invalid(format!("port {}", spec.port)))?,
            path: spec.path.clone(),
            protocol: match spec.protocol {
                HealthProtocol::Http => Protocol::Http,
                HealthProtocol::Https => Protocol::Https,
            },
            expected: spec
                .expected_responses
                .iter()
                .filter_map(|code| u16::try_from(*code).ok())
                .collect(),
            headers: extra_headers,
            allow_insecure_certificate: spec.allow_insecure_certificate,
            timeout: (interval / 5).clamp(MIN_TIMEOUT, MAX_TIMEOUT),
        },
        interval,
        failure_threshold: u32::try_from(spec.failure_threshold.max(1)).unwrap_or(1),
    })
}

/// The results worth reporting: probes with a verdict, sorted.
pub fn probe_reports(results: &BTreeMap<ProbeKey, (ProbeState, Time)>) -> Vec<ProbeReport> {
    results
        .iter()
        .filter_map(|((namespace, name), (state, at))| {
            Some(ProbeReport {
                namespace: namespace.clone(),
                name: name.clone(),
                healthy: state.healthy?,
                consecutive_failures: i32::try_from(state.consecutive_failures).unwrap_or(i32::MAX),
                reason: state.reason.clone(),
                last_checked_at: Some(at.clone()),
            })
        })
        .collect()
}

/// Whether two report lists differ in what the hub decides on (verdicts and reasons), not
/// just in counts and times. Only such changes are worth an immediate write; the rest travels
/// with the next heartbeat.
pub fn verdicts_differ(a: &[ProbeReport], b: &[ProbeReport]) -> bool {
    let verdicts = |reports: &[ProbeReport]| -> Vec<(String, String, bool)> {
        reports
            .iter()
            .map(|r| (r.namespace.clone(), r.name.clone(), r.healthy))
            .collect()
    };
    verdicts(a) != verdicts(b)
}

/// Runs the health loop until the process ends: follows the hub's probes and header copies,
/// probes every leaf, and publishes the results on `reports` (notifying only when a verdict
/// changes).
pub async fn run(
    hub: Client,
    hub_namespace: String,
    prober: Arc<Prober>,
    reports: watch::Sender<Vec<ProbeReport>>,
) -> anyhow::Result<()> {
    let (store, writer) = reflector::store();
    let probes = watcher(
        Api::<DNSHealthCheckProbe>::all(hub.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .reflect(writer)
    .touched_objects();
    let mut probes = std::pin::pin!(probes);
    let copies: Api<Secret> = Api::namespaced(hub, &hub_namespace);
    let mut header_watches = HeaderWatches::new(copies.clone());
    let header_changed = header_watches.changed.clone();
    let mut seal_key: Option<Vec<u8>> = None;
    // The key does not change once made: read it until it is here, then seldom (thousands of
    // agents each reading it every refresh would be a steady load on the hub).
    let mut refreshes = 0u32;
    // Probes whose seal did not check out at the last look: a new key (the hub's Secret made
    // again) would show at the next refresh instead of within ten minutes.
    let mut some_unsealed = false;
    let (updates, mut results_rx) = mpsc::channel::<LeafUpdate<ProbeKey>>(1024);
    let mut runner = ProbeRunner::new(prober, updates);
    let mut results: BTreeMap<ProbeKey, (ProbeState, Time)> = BTreeMap::new();
    let mut refresh = tokio::time::interval(SEAL_TICK);
    let mut resync = false;
    loop {
        tokio::select! {
            event = probes.next() => match event {
                Some(Ok(_)) => resync = true,
                Some(Err(error)) => tracing::warn!(%error, "watching probes failed; the watch restarts with backoff"),
                None => anyhow::bail!("the probe watch ended"),
            },
            _ = refresh.tick() => {
                refreshes = refreshes.wrapping_add(1);
                // Unsealed probes (a new key, or a tenant's by hand) look again every two
                // minutes at most: a tenant's probes alone must not make it a steady read.
                if seal_key.is_none()
                    || (some_unsealed && refreshes.is_multiple_of(UNSEALED_REFRESHES))
                    || refreshes.is_multiple_of(SEAL_REFRESHES)
                {
                    seal_key = match copies.get_opt(PROBE_SEAL_SECRET).await {
                        Ok(copy) => copy.as_ref().and_then(probe_seal::key_of),
                        Err(error) => {
                            tracing::warn!(%error, "reading the probe seal key failed; keeping the last copy");
                            seal_key
                        }
                    };
                }
                resync = true;
            }
            () = header_changed.notified() => resync = true,
            Some(update) = results_rx.recv() => {
                let now = Time(k8s_openapi::jiff::Timestamp::now());
                if runner_knows(&store, &update.key) {
                    results.insert(update.key, (update.state, now));
                }
                publish(&reports, &results);
                continue;
            }
        }
        if !resync {
            continue;
        }
        resync = false;
        // Deletions are not "touched": compare the whole set with the cache each time.
        let mut leaves = HashMap::new();
        let all = store.state();
        let sealed: Vec<&DNSHealthCheckProbe> = all
            .iter()
            .map(|probe| &**probe)
            .filter(|probe| {
                seal_key
                    .as_deref()
                    .is_some_and(|seal_key| probe_seal::is_sealed(seal_key, probe))
            })
            .collect();
        let unsealed = all.len() - sealed.len();
        // Only the hub's probes say whose headers to fetch: a tenant's probe by hand cannot
        // make the agent watch another namespace's copy.
        header_watches.follow(&header_namespaces(sealed.iter().copied()));
        let headers = header_watches.headers();
        for probe in sealed {
            let key = (probe.namespace().unwrap_or_default(), probe.name_any());
            match leaf_for(probe, &headers) {
                Ok(leaf) => {
                    leaves.insert(key, leaf);
                }
                Err(Skipped::Wildcard) => {}
                Err(skipped) => {
                    // Missing headers come with their copy's watch, which wakes this loop.
                    tracing::debug!(probe = ?key, ?skipped, "not probing");
                }
            }
        }
        some_unsealed = unsealed > 0;
        if unsealed > 0 {
            tracing::debug!(unsealed, "not probing probes the hub did not seal");
            if seal_key.is_none() {
                // The hub delivers its key within moments of the agent's install.
                refresh.reset_after(Duration::from_secs(2));
            }
        }
        let keys: Vec<ProbeKey> = leaves.keys().cloned().collect();
        for stopped in runner.sync(leaves) {
            results.remove(&stopped);
        }
        results.retain(|key, _| keys.contains(key));
        publish(&reports, &results);
    }
}

fn runner_knows(store: &reflector::Store<DNSHealthCheckProbe>, key: &ProbeKey) -> bool {
    store
        .get(&reflector::ObjectRef::new(&key.1).within(&key.0))
        .is_some()
}

fn publish(
    reports: &watch::Sender<Vec<ProbeReport>>,
    results: &BTreeMap<ProbeKey, (ProbeState, Time)>,
) {
    let fresh = probe_reports(results);
    reports.send_if_modified(|current| {
        let notify = verdicts_differ(current, &fresh);
        *current = fresh;
        notify
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::ByteString;
    use meridian_api::kuadrant::{DNSHealthCheckProbeSpec, SecretRef};

    fn probe(host: &str, headers: Option<&str>) -> DNSHealthCheckProbe {
        let mut probe = DNSHealthCheckProbe::new(
            "api-abc",
            DNSHealthCheckProbeSpec {
                port: 8443,
                host: host.into(),
                address: "192.0.2.10".into(),
                path: "/healthz".into(),
                protocol: HealthProtocol::Https,
                interval: "5s".into(),
                additional_headers_ref: headers.map(|name| SecretRef { name: name.into() }),
                expected_responses: vec![200, 204],
                allow_insecure_certificate: true,
                failure_threshold: 2,
            },
        );
        probe.metadata.namespace = Some("gateways".into());
        probe
    }

    #[test]
    fn a_probe_becomes_a_leaf_with_its_settings_and_delivered_headers() {
        let copy = Secret {
            data: Some(BTreeMap::from([(
                "probe-auth".to_string(),
                ByteString(
                    br#"{"X-Token":"s3cret","Bad\nName":"x","X-Evil":"a\r\nHost: other"}"#.to_vec(),
                ),
            )])),
            ..Default::default()
        };
        let headers = header_copy("gateways", &copy);
        let leaf = leaf_for(&probe("api.example.com", Some("probe-auth")), &headers).unwrap();
        assert_eq!(
            leaf.spec.headers,
            [("X-Token".to_string(), "s3cret".to_string())]
        );
        assert_eq!(
            (
                leaf.spec.port,
                leaf.spec.protocol,
                leaf.spec.address.as_str()
            ),
            (8443, Protocol::Https, "192.0.2.10")
        );
        assert_eq!(leaf.spec.expected, [200, 204]);
        assert!(leaf.spec.allow_insecure_certificate);
        assert_eq!(
            (leaf.interval, leaf.failure_threshold),
            (Duration::from_secs(5), 2)
        );
        assert_eq!(leaf.spec.timeout, Duration::from_secs(1));

        assert_eq!(
            leaf_for(&probe("api.example.com", Some("elsewhere")), &headers),
            Err(Skipped::HeadersMissing("gateways.elsewhere".into()))
        );
        assert_eq!(
            leaf_for(&probe("*.example.com", None), &headers),
            Err(Skipped::Wildcard)
        );
    }

    #[test]
    fn only_judged_probes_are_reported_and_only_verdicts_notify() {
        let at = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let judged = |healthy: Option<bool>, failures| ProbeState {
            consecutive_failures: failures,
            healthy,
            reason: None,
        };
        let key = |name: &str| ("gateways".to_string(), name.to_string());
        let mut results = BTreeMap::from([
            (key("a"), (judged(Some(true), 0), at.clone())),
            (key("b"), (judged(None, 1), at.clone())),
        ]);
        let first = probe_reports(&results);
        assert_eq!(first.len(), 1, "b has no verdict yet");
        results.insert(
            key("a"),
            (
                judged(Some(true), 0),
                Time(k8s_openapi::jiff::Timestamp::MAX),
            ),
        );
        assert!(
            !verdicts_differ(&first, &probe_reports(&results)),
            "a new time is not news"
        );
        results.insert(key("b"), (judged(Some(false), 3), at));
        assert!(verdicts_differ(&first, &probe_reports(&results)));
    }
}

/// Distributed mode: this cluster's probes of the addresses of the hosts it publishes, for
/// health agreed through the zone (`meridian_controllers::decide::shared_health`). Probes follow what the
/// DNSRecord passes ask for; verdicts are kept per record and address.
#[derive(Debug)]
pub struct ZoneProbes {
    inner: std::sync::Mutex<ZoneProbesInner>,
    verdicts: Arc<std::sync::Mutex<BTreeMap<ProbeKey, Option<bool>>>>,
}

#[derive(Debug)]
struct ZoneProbesInner {
    runner: ProbeRunner<ProbeKey>,
    /// Record → (record, address) → leaf.
    leaves: BTreeMap<String, HashMap<ProbeKey, Leaf>>,
}

impl ZoneProbes {
    /// Starts the probe runner; call within a Tokio runtime.
    pub fn start(prober: Arc<Prober>) -> Arc<Self> {
        let (updates, mut received) = mpsc::channel::<LeafUpdate<ProbeKey>>(1024);
        let verdicts: Arc<std::sync::Mutex<BTreeMap<ProbeKey, Option<bool>>>> = Arc::default();
        let sink = verdicts.clone();
        tokio::spawn(async move {
            while let Some(update) = received.recv().await {
                let mut verdicts = sink.lock().expect("verdicts lock");
                // A leaf stopped meanwhile has no entry any more; do not bring it back.
                if let Some(verdict) = verdicts.get_mut(&update.key) {
                    *verdict = update.state.healthy;
                }
            }
        });
        Arc::new(ZoneProbes {
            inner: std::sync::Mutex::new(ZoneProbesInner {
                runner: ProbeRunner::new(prober, updates),
                leaves: BTreeMap::new(),
            }),
            verdicts,
        })
    }
}

impl meridian_controllers::decide::shared_health::SharedProbes for ZoneProbes {
    fn watch(
        &self,
        record: &str,
        host: &str,
        addresses: &std::collections::BTreeSet<String>,
        check: &meridian_api::kuadrant::HealthCheck,
        headers: Option<&[(String, String)]>,
    ) {
        let addresses: Vec<String> = addresses.iter().cloned().collect();
        // Headers the check names but that cannot be read: nothing is probed.
        let wanted = match headers {
            Some(_) => {
                // Hub-less, a wildcard is not probed: no hub gathers route hostnames.
                meridian_controllers::decide::health::wanted_probes(
                    record,
                    host,
                    &addresses,
                    check,
                    &Default::default(),
                )
            }
            None => Vec::new(),
        };
        let headers: Vec<(String, String)> = headers
            .unwrap_or_default()
            .iter()
            .filter(|(name, value)| safe_header(name, value))
            .cloned()
            .collect();
        let leaves: HashMap<ProbeKey, Leaf> = wanted
            .into_iter()
            .filter_map(|mut wanted| {
                let address = wanted.spec.address.clone();
                // The headers come with the call here, not from the hub's copy.
                wanted.spec.additional_headers_ref = None;
                let probe = DNSHealthCheckProbe::new(&wanted.name, wanted.spec);
                let mut leaf = leaf_for(&probe, &HeaderCopies::new()).ok()?;
                leaf.spec.headers = headers.clone();
                Some(((record.to_string(), address), leaf))
            })
            .collect();
        let mut inner = self.inner.lock().expect("probes lock");
        {
            let mut verdicts = self.verdicts.lock().expect("verdicts lock");
            for key in leaves.keys() {
                verdicts.entry(key.clone()).or_insert(None);
            }
        }
        inner.leaves.insert(record.to_string(), leaves);
        let all: HashMap<ProbeKey, Leaf> = inner
            .leaves
            .values()
            .flat_map(|leaves| leaves.iter().map(|(k, v)| (k.clone(), v.clone())))
            .collect();
        let stopped = inner.runner.sync(all);
        let mut verdicts = self.verdicts.lock().expect("verdicts lock");
        for key in stopped {
            verdicts.remove(&key);
        }
    }

    fn failing(&self, record: &str) -> std::collections::BTreeSet<String> {
        self.verdicts
            .lock()
            .expect("verdicts lock")
            .iter()
            .filter(|((r, _), verdict)| r == record && **verdict == Some(false))
            .map(|((_, address), _)| address.clone())
            .collect()
    }
}
