//! The conversion itself, pure: Kuadrant v1 DNSPolicies from every cluster of a fleet in,
//! Meridian's objects and the findings out.
//!
//! Kuadrant runs one DNSPolicy per workload cluster, each saying that cluster's `geo`, `weight`
//! and whether its geo answers the rest of the world (`defaultGeo`). Meridian runs one policy
//! for the fleet and reads each cluster's geo and weight from labels (a ManagedCluster's on a
//! hub; `--cluster-label` in distributed mode). So the policies of one namespace and name are
//! grouped across clusters, and what differed between them becomes cluster labels: the geo
//! code under `kuadrant.io/lb-attribute-geo-code`, the weight under
//! `kuadrant.io/lb-attribute-weight` with a custom weight entry for each weight.

use std::collections::{BTreeMap, BTreeSet};

use meridian_api::geo::is_valid_geo_code;
use meridian_api::kuadrant::{
    CustomWeight, DNSPolicy, DNSPolicySpec, GeoLoadBalancing, HealthCheck, HealthProtocol,
    LoadBalancing, ManagedZone, PolicyTargetReference, RoutingStrategy, SecretRef,
    WeightedLoadBalancing,
};
use meridian_api::labels::{GEO_CODE_LABEL, lb_attribute_label};
use meridian_controllers::decide::exclude::Exclusions;
use meridian_controllers::zones::zone_provider::{
    AWS_SECRET_TYPE, AZURE_SECRET_TYPE, GCP_SECRET_TYPE, RFC2136_SECRET_TYPE,
};

use super::kuadrant_v1::{ClusterManifests, Policy};

/// The attribute whose label carries a cluster's Kuadrant weight.
pub const WEIGHT_ATTRIBUTE: &str = "weight";

/// dns-operator's defaults, applied by its CRD when a field is absent.
const KUADRANT_WEIGHT: i64 = 120;
const KUADRANT_PORT: i64 = 443;
const KUADRANT_FAILURE_THRESHOLD: i64 = 5;
const KUADRANT_INTERVAL: &str = "5m";
/// Meridian's shortest probe interval.
const SHORTEST_INTERVAL_SECONDS: u64 = 5;
/// The most excluded addresses a Meridian (and a Kuadrant) policy holds.
const MOST_EXCLUDED: usize = 20;

/// What the conversion cannot guess from the manifests.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The provider zones' domains (Kuadrant finds a zone at the provider by the listener's
    /// hostname; a ManagedZone names it). A policy gets the longest one holding its Gateway's
    /// hostnames, or the only one.
    pub zones: Vec<String>,
    /// The Kuadrant deployment's `--insecure-health-checks` (dns-operator's default: true):
    /// whether its probes accepted any certificate.
    pub insecure_health_checks: bool,
}

/// One thing the reader must know about a conversion.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `namespace/name`, the cluster when it is one cluster's, and the field.
    pub at: String,
    pub kind: FindingKind,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindingKind {
    /// Clients would get different answers (or none) than under Kuadrant: the command exits
    /// non-zero while any remains.
    ChangesAnswers,
    /// Carried with its meaning kept; what was implicit is now written (a default, an
    /// off-by-one threshold, a union).
    Kept,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            FindingKind::ChangesAnswers => "changes answers",
            FindingKind::Kept => "kept",
        };
        write!(
            f,
            "{kind:<15}  {}: {}",
            printable(&self.at),
            printable(&self.text)
        )
    }
}

/// `text` with its control characters escaped: a finding quotes values from manifests a
/// tenant may have written, and a newline or a terminal escape there must not forge another
/// finding line or repaint the reader's terminal.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// What a fleet's Kuadrant policies become.
#[derive(Debug, Clone, Default)]
pub struct Conversion {
    pub zones: Vec<ManagedZone>,
    pub policies: Vec<DNSPolicy>,
    /// Each cluster's attribute labels (ManagedCluster labels, or agent `--cluster-label`s).
    pub cluster_labels: BTreeMap<String, BTreeMap<String, String>>,
    pub findings: Vec<Finding>,
}

impl Conversion {
    pub fn changes_answers(&self) -> usize {
        self.findings
            .iter()
            .filter(|f| f.kind == FindingKind::ChangesAnswers)
            .count()
    }
}

/// One policy as one cluster has it.
struct Member<'a> {
    cluster: &'a ClusterManifests,
    policy: &'a Policy,
}

/// Converts every cluster's Kuadrant v1 DNSPolicies.
pub fn convert(clusters: &[ClusterManifests], options: &Options) -> Conversion {
    let mut groups: BTreeMap<(&str, &str), Vec<Member>> = BTreeMap::new();
    let mut sorted: Vec<&ClusterManifests> = clusters.iter().collect();
    sorted.sort_by(|a, b| a.cluster.cmp(&b.cluster));
    for cluster in sorted {
        for policy in &cluster.policies {
            groups
                .entry((&policy.namespace, &policy.name))
                .or_default()
                .push(Member { cluster, policy });
        }
    }
    let mut conversion = Conversion::default();
    // Which policy set each cluster label, so that two policies wanting different values on one
    // cluster (a ManagedCluster has one geo) are found rather than the later one winning.
    let mut labels: BTreeMap<String, BTreeMap<String, (String, String)>> = BTreeMap::new();
    let mut zones: BTreeMap<(String, String), (ManagedZone, String)> = BTreeMap::new();
    for ((namespace, name), members) in groups {
        let mut group = Group {
            namespace,
            name,
            members: &members,
            findings: Vec::new(),
            labels: Vec::new(),
        };
        let policy = group.policy(options);
        let zone = group.zone(options);
        for (cluster, key, value) in std::mem::take(&mut group.labels) {
            let owner = format!("{namespace}/{name}");
            let set = labels.entry(cluster.clone()).or_default();
            match set.get(&key) {
                Some((held, by)) if *held != value => group.findings.push(Finding {
                    at: format!("{owner} on {cluster}"),
                    kind: FindingKind::ChangesAnswers,
                    text: format!(
                        "wants label {key}={value}, but {by} set it to {held}: a cluster has one value of a label, so one of the two policies answers differently (give one a label attribute of its own)"
                    ),
                }),
                Some(_) => {}
                None => {
                    set.insert(key, (value, owner));
                }
            }
        }
        if let Some((zone, secret)) = zone {
            let key = (namespace.to_string(), zone.spec.domain_name.clone());
            match zones.get(&key) {
                Some((_, held)) if *held != secret => group.findings.push(Finding {
                    at: format!("{namespace}/{name}"),
                    kind: FindingKind::ChangesAnswers,
                    text: format!(
                        "zone {} is written with Secret {held} for another policy, and this one names {secret}: one ManagedZone has one Secret",
                        key.1
                    ),
                }),
                Some(_) => {}
                None => {
                    zones.insert(key, (zone, secret));
                }
            }
        }
        conversion.findings.append(&mut group.findings);
        conversion.policies.extend(policy);
    }
    conversion.zones = zones.into_values().map(|(zone, _)| zone).collect();
    conversion.cluster_labels = labels
        .into_iter()
        .map(|(cluster, set)| (cluster, set.into_iter().map(|(k, (v, _))| (k, v)).collect()))
        .collect();
    conversion
}

/// The policies of one namespace and name, one per cluster.
struct Group<'a> {
    namespace: &'a str,
    name: &'a str,
    members: &'a [Member<'a>],
    findings: Vec<Finding>,
    /// (cluster, label, value) the policy needs.
    labels: Vec<(String, String, String)>,
}

impl Group<'_> {
    fn at(&self, cluster: Option<&str>, field: &str) -> String {
        let mut at = format!("{}/{}", self.namespace, self.name);
        if let Some(cluster) = cluster {
            at.push_str(&format!(" on {cluster}"));
        }
        if !field.is_empty() {
            at.push_str(&format!(" {field}"));
        }
        at
    }

    fn changes(&mut self, cluster: Option<&str>, field: &str, text: String) {
        let at = self.at(cluster, field);
        self.findings.push(Finding {
            at,
            kind: FindingKind::ChangesAnswers,
            text,
        });
    }

    fn kept(&mut self, cluster: Option<&str>, field: &str, text: String) {
        let at = self.at(cluster, field);
        self.findings.push(Finding {
            at,
            kind: FindingKind::Kept,
            text,
        });
    }

    /// The first cluster's value of a field, and a finding when the others differ.
    fn agreed<T: PartialEq + std::fmt::Debug + Clone>(
        &mut self,
        field: &str,
        value: impl Fn(&Policy) -> T,
    ) -> T {
        let first = value(self.members[0].policy);
        let differing: Vec<&str> = self
            .members
            .iter()
            .filter(|m| value(m.policy) != first)
            .map(|m| m.cluster.cluster.as_str())
            .collect();
        if !differing.is_empty() {
            let text = format!(
                "differs on {} from {}'s; Meridian has one policy for the fleet and takes {}'s",
                differing.join(", "),
                self.members[0].cluster.cluster,
                self.members[0].cluster.cluster
            );
            self.changes(None, field, text);
        }
        first
    }

    fn policy(&mut self, options: &Options) -> Option<DNSPolicy> {
        for member in self.members {
            let cluster = member.cluster.cluster.as_str();
            let spec = &member.policy.spec;
            let unknown = spec
                .unknown
                .keys()
                .map(|k| format!("spec.{k}"))
                .chain(
                    spec.target_ref
                        .unknown
                        .keys()
                        .map(|k| format!("spec.targetRef.{k}")),
                )
                .chain(
                    spec.health_check
                        .iter()
                        .flat_map(|h| h.unknown.keys())
                        .map(|k| format!("spec.healthCheck.{k}")),
                )
                .chain(
                    spec.load_balancing
                        .iter()
                        .flat_map(|l| l.unknown.keys())
                        .map(|k| format!("spec.loadBalancing.{k}")),
                )
                .collect::<Vec<_>>();
            for field in unknown {
                self.changes(
                    Some(cluster),
                    &field,
                    "not a field of Kuadrant's v1 DNSPolicy either; not carried".into(),
                );
            }
        }
        let target = self.agreed("spec.targetRef", |p| p.spec.target_ref.clone());
        if target.group != "gateway.networking.k8s.io" || target.kind != "Gateway" {
            self.changes(
                None,
                "spec.targetRef",
                format!(
                    "targets {}/{}: only Gateways (group gateway.networking.k8s.io) are targets, in Kuadrant as in Meridian; not converted",
                    target.group, target.kind
                ),
            );
            return None;
        }
        let health_check = self.agreed("spec.healthCheck", |p| p.spec.health_check.clone());
        let health_check = health_check.map(|h| self.health_check(&h, options));
        let load_balancing = self.load_balancing();
        let exclude_addresses = self.exclude_addresses();
        let routing_strategy = if load_balancing.is_some() {
            RoutingStrategy::Loadbalanced
        } else {
            RoutingStrategy::Simple
        };
        let spec = DNSPolicySpec {
            target_ref: PolicyTargetReference {
                group: target.group,
                kind: target.kind,
                name: target.name,
                namespace: None,
                section_name: target.section_name,
            },
            routing_strategy,
            load_balancing: load_balancing.unwrap_or_default(),
            health_check,
            ttl: None,
            exclude_addresses,
        };
        let mut policy = DNSPolicy::new(self.name, spec);
        policy.metadata.namespace = Some(self.namespace.to_string());
        Some(policy)
    }

    /// `loadBalancing` of every cluster: the strategy, the geo labels and default geo, the
    /// weight labels and custom weights.
    fn load_balancing(&mut self) -> Option<LoadBalancing> {
        let with: Vec<&Member> = self
            .members
            .iter()
            .filter(|m| m.policy.spec.load_balancing.is_some())
            .collect();
        if with.is_empty() {
            self.kept(
                None,
                "spec.loadBalancing",
                "absent: routingStrategy simple, one record holding every cluster's addresses, as in Kuadrant".into(),
            );
            return None;
        }
        if with.len() < self.members.len() {
            let without: Vec<&str> = self
                .members
                .iter()
                .filter(|m| m.policy.spec.load_balancing.is_none())
                .map(|m| m.cluster.cluster.as_str())
                .collect();
            self.changes(
                None,
                "spec.loadBalancing",
                format!(
                    "absent on {} and set elsewhere (Kuadrant reports the clash and publishes neither shape); Meridian load balances every cluster, those at weight {KUADRANT_WEIGHT} with no geo",
                    without.join(", ")
                ),
            );
        }
        let mut weights: BTreeMap<i64, Vec<String>> = BTreeMap::new();
        let mut geos: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut default_geos: BTreeSet<String> = BTreeSet::new();
        for member in &with {
            let cluster = member.cluster.cluster.clone();
            let lb = member
                .policy
                .spec
                .load_balancing
                .as_ref()
                .expect("filtered");
            let weight = lb.weight.unwrap_or(KUADRANT_WEIGHT);
            if weight < 0 {
                self.changes(
                    Some(&cluster),
                    "spec.loadBalancing.weight",
                    format!("{weight} is not a weight; the cluster gets weight {KUADRANT_WEIGHT}"),
                );
            }
            weights
                .entry(weight.max(0))
                .or_default()
                .push(cluster.clone());
            let geo = lb.geo.clone().unwrap_or_default();
            if is_valid_geo_code(&geo) {
                geos.entry(geo.clone()).or_default().push(cluster.clone());
                self.labels
                    .push((cluster.clone(), GEO_CODE_LABEL.to_string(), geo.clone()));
                if lb.default_geo == Some(true) {
                    default_geos.insert(geo);
                }
            } else {
                let hint = if is_valid_geo_code(&format!("GEO-{geo}")) {
                    format!(" (the continent is GEO-{geo})")
                } else {
                    String::new()
                };
                self.changes(
                    Some(&cluster),
                    "spec.loadBalancing.geo",
                    format!(
                        "{geo:?} is not an ISO 3166 country code or a continent GEO-AF|AN|AS|EU|NA|OC|SA{hint}; the cluster gets no geo label and answers only as the default geo does"
                    ),
                );
            }
        }
        // The weight most clusters have is the default; each other weight is a custom entry
        // for the clusters labelled with it. Every cluster is labelled, so that another policy
        // wanting another weight on the same cluster is seen.
        let default_weight = weights
            .iter()
            .max_by_key(|(weight, clusters)| (clusters.len(), std::cmp::Reverse(**weight)))
            .map(|(weight, _)| *weight)
            .unwrap_or(KUADRANT_WEIGHT);
        let label = lb_attribute_label(Some(WEIGHT_ATTRIBUTE));
        let mut custom = Vec::new();
        for (weight, clusters) in &weights {
            for cluster in clusters {
                self.labels
                    .push((cluster.clone(), label.clone(), weight.to_string()));
            }
            if *weight != default_weight {
                custom.push(CustomWeight {
                    selector: None,
                    attribute: Some(WEIGHT_ATTRIBUTE.to_string()),
                    value: Some(weight.to_string()),
                    weight: *weight,
                });
            }
        }
        let geo = if geos.is_empty() {
            None
        } else {
            let default_geo = match default_geos.len() {
                1 => default_geos.into_iter().next().expect("one"),
                0 => {
                    let (most, _) = geos
                        .iter()
                        .max_by_key(|(geo, clusters)| (clusters.len(), std::cmp::Reverse(*geo)))
                        .expect("not empty");
                    let most = most.clone();
                    self.changes(
                        None,
                        "spec.loadBalancing.defaultGeo",
                        format!(
                            "no cluster says defaultGeo: true, so Kuadrant published no catch-all and clients outside {} got no answer; Meridian answers them from {most}, the geo with the most clusters",
                            geos.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    );
                    most
                }
                _ => {
                    let first = default_geos.iter().next().expect("several").clone();
                    self.changes(
                        None,
                        "spec.loadBalancing.defaultGeo",
                        format!(
                            "clusters in {} each say defaultGeo: true (Kuadrant reports the clash); Meridian has one default geo and takes {first}",
                            default_geos.iter().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    );
                    first
                }
            };
            Some(GeoLoadBalancing { default_geo })
        };
        if weights.len() > 1 {
            self.kept(
                None,
                "spec.loadBalancing.weight",
                format!(
                    "defaultWeight {default_weight}; {} (each cluster's label {label} says its weight)",
                    custom
                        .iter()
                        .map(|c| format!("weight {} for clusters labelled {}", c.weight, c.weight))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        Some(LoadBalancing {
            weighted: WeightedLoadBalancing {
                default_weight,
                custom,
            },
            geo,
            failover: None,
        })
    }

    /// dns-operator's `HealthCheckSpec` with its defaults, as Meridian's health check.
    fn health_check(
        &mut self,
        kuadrant: &super::kuadrant_v1::HealthCheck,
        options: &Options,
    ) -> HealthCheck {
        let field = "spec.healthCheck";
        let threshold = kuadrant
            .failure_threshold
            .unwrap_or(KUADRANT_FAILURE_THRESHOLD)
            .max(1);
        self.kept(
            None,
            &format!("{field}.failureThreshold"),
            format!(
                "Kuadrant's {threshold} counts failures that must be exceeded; Meridian counts failures that reach it: written {}",
                threshold + 1
            ),
        );
        let interval_text = kuadrant.interval.as_deref().unwrap_or(KUADRANT_INTERVAL);
        let interval = match meridian_api::duration::parse_duration(interval_text)
            .map(|d| d.as_secs_f64().ceil() as u64)
        {
            Some(seconds) if seconds >= SHORTEST_INTERVAL_SECONDS => {
                if kuadrant.interval.is_none() {
                    self.kept(
                        None,
                        &format!("{field}.interval"),
                        format!("absent: Kuadrant's default {KUADRANT_INTERVAL}, written (Meridian's default is 30s)"),
                    );
                }
                format!("{seconds}s")
            }
            Some(_) => {
                self.kept(
                    None,
                    &format!("{field}.interval"),
                    format!("{interval_text} is below Meridian's shortest interval; written {SHORTEST_INTERVAL_SECONDS}s"),
                );
                format!("{SHORTEST_INTERVAL_SECONDS}s")
            }
            None => {
                self.changes(
                    None,
                    &format!("{field}.interval"),
                    format!("{interval_text:?} is not a duration; written Kuadrant's default {KUADRANT_INTERVAL}"),
                );
                "300s".to_string()
            }
        };
        let endpoint = match kuadrant.path.as_deref() {
            None | Some("") => "/".to_string(),
            Some(path) if path.starts_with('?') => {
                self.kept(
                    None,
                    &format!("{field}.path"),
                    format!("{path} is the query of the root path: written /{path}"),
                );
                format!("/{path}")
            }
            Some(path) => path.to_string(),
        };
        let protocol = match kuadrant.protocol.as_deref() {
            None | Some("HTTPS") => HealthProtocol::Https,
            Some("HTTP") => HealthProtocol::Http,
            Some(other) => {
                self.changes(
                    None,
                    &format!("{field}.protocol"),
                    format!(
                        "{other:?} is neither HTTP nor HTTPS; written HTTPS, Kuadrant's default"
                    ),
                );
                HealthProtocol::Https
            }
        };
        let port = kuadrant.port.unwrap_or(KUADRANT_PORT);
        let port = if (1..=65535).contains(&port) {
            port as i32
        } else {
            self.changes(
                None,
                &format!("{field}.port"),
                format!("{port} is not a port; written {KUADRANT_PORT}"),
            );
            KUADRANT_PORT as i32
        };
        if options.insecure_health_checks && protocol == HealthProtocol::Https {
            self.kept(
                None,
                &format!("{field}.allowInsecureCertificates"),
                "Kuadrant's probes accept any certificate (dns-operator's --insecure-health-checks, on by default): written true; set it false once the gateways' certificates verify".into(),
            );
        }
        let additional_headers_ref = kuadrant.additional_headers_ref.as_ref().map(|r| {
            self.changes(
                None,
                &format!("{field}.additionalHeadersRef"),
                format!(
                    "Meridian sends headers only from a Secret of type {} (so a probe never carries another Secret, such as the zone's keys, to a gateway): recreate Secret {} with that type, or the probes go without its headers",
                    meridian_controllers::decide::health::PROBE_HEADERS_SECRET_TYPE,
                    r.name
                ),
            );
            SecretRef {
                name: r.name.clone(),
            }
        });
        HealthCheck {
            endpoint,
            port,
            protocol,
            failure_threshold: (threshold + 1).min(i32::MAX as i64) as i32,
            interval,
            // dns-operator's probes count 200 and 201 as healthy, as Meridian's default does.
            expected_responses: vec![200, 201],
            additional_headers_ref,
            allow_insecure_certificates: options.insecure_health_checks
                && protocol == HealthProtocol::Https,
        }
    }

    /// Every cluster's `excludeAddresses`, together: an address is one cluster's, so excluding
    /// it fleet-wide excludes what each cluster excluded.
    fn exclude_addresses(&mut self) -> Vec<String> {
        let mut all: Vec<String> = Vec::new();
        for member in self.members {
            for address in &member.policy.spec.exclude_addresses {
                if !all.contains(address) {
                    all.push(address.clone());
                }
            }
        }
        let same = self
            .members
            .iter()
            .all(|m| m.policy.spec.exclude_addresses.len() == all.len());
        if !same {
            self.kept(
                None,
                "spec.excludeAddresses",
                "the clusters' lists differ: their union applies to every cluster".into(),
            );
        }
        if let Err(problem) = Exclusions::parse(&all) {
            self.changes(
                None,
                "spec.excludeAddresses",
                format!("{problem}; none is carried, so every address is published"),
            );
            return Vec::new();
        }
        if all.len() > MOST_EXCLUDED {
            self.changes(
                None,
                "spec.excludeAddresses",
                format!(
                    "{} addresses together, more than {MOST_EXCLUDED}: the first {MOST_EXCLUDED} are carried",
                    all.len()
                ),
            );
            all.truncate(MOST_EXCLUDED);
        }
        all
    }

    /// The ManagedZone the policy publishes into, and its Secret's name.
    fn zone(&mut self, options: &Options) -> Option<(ManagedZone, String)> {
        let mut secrets: BTreeSet<String> = BTreeSet::new();
        for member in self.members {
            let cluster = member.cluster.cluster.as_str();
            let spec = &member.policy.spec;
            let named = spec.provider_refs.first().map(|r| r.name.clone());
            let secret = match named {
                Some(name) => Some(name),
                None => {
                    let found = member.cluster.default_provider(self.namespace);
                    let how = if spec.delegate {
                        "delegate: true: the hub publishes every cluster's records itself, which is what delegating them to a primary cluster did; the zone's Secret is"
                    } else {
                        "no providerRefs: the zone's Secret is"
                    };
                    match found {
                        Some(secret) => {
                            self.kept(
                                Some(cluster),
                                if spec.delegate {
                                    "spec.delegate"
                                } else {
                                    "spec.providerRefs"
                                },
                                format!("{how} the namespace's default provider, {}", secret.name),
                            );
                            Some(secret.name.clone())
                        }
                        None => {
                            self.changes(
                                Some(cluster),
                                "spec.providerRefs",
                                format!("absent, and the manifests hold no one Secret labelled {}=true in {}: name the zone's Secret", super::kuadrant_v1::DEFAULT_PROVIDER_LABEL, self.namespace),
                            );
                            None
                        }
                    }
                }
            };
            let Some(secret) = secret else { continue };
            if let Some(facts) = member.cluster.secret(self.namespace, &secret) {
                let supported = [
                    AWS_SECRET_TYPE,
                    GCP_SECRET_TYPE,
                    AZURE_SECRET_TYPE,
                    RFC2136_SECRET_TYPE,
                ];
                if !supported.contains(&facts.type_.as_str()) {
                    self.changes(
                        Some(cluster),
                        "spec.providerRefs",
                        format!(
                            "Secret {secret} has type {}: Meridian publishes to {} Secrets or its own nameserver, not this provider",
                            facts.type_,
                            supported.join(", ")
                        ),
                    );
                }
            }
            secrets.insert(secret);
        }
        if secrets.len() > 1 {
            let names = secrets.iter().cloned().collect::<Vec<_>>().join(", ");
            self.changes(
                None,
                "spec.providerRefs",
                format!("the clusters name different Secrets ({names}): one zone has one Secret; the first is written"),
            );
        }
        let secret = secrets.into_iter().next()?;
        let domain = self.zone_domain(options)?;
        let zone: ManagedZone = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1",
            "kind": "ManagedZone",
            "metadata": { "name": zone_object_name(&domain), "namespace": self.namespace },
            "spec": { "domainName": domain, "dnsProviderSecretRef": { "name": secret } },
        }))
        .expect("a ManagedZone");
        Some((zone, secret))
    }

    /// The `--zone` that holds the Gateway's hostnames (the longest), or the only `--zone`.
    fn zone_domain(&mut self, options: &Options) -> Option<String> {
        let target = &self.members[0].policy.spec.target_ref.name;
        let hostnames: BTreeSet<String> = self
            .members
            .iter()
            .filter_map(|m| m.cluster.gateway(self.namespace, target))
            .flat_map(|g| g.hostnames.iter().cloned())
            .collect();
        let zones: Vec<String> = options
            .zones
            .iter()
            .map(|z| z.trim_end_matches('.').to_ascii_lowercase())
            .collect();
        if hostnames.is_empty() {
            if let [only] = zones.as_slice() {
                return Some(only.clone());
            }
            self.changes(
                None,
                "spec.providerRefs",
                format!(
                    "the zone's domain is unknown: Kuadrant finds the zone at the provider by the listener's hostname, and the manifests hold no Gateway {target} with hostnames; say it with --zone"
                ),
            );
            return None;
        }
        let holds = |zone: &str, host: &str| {
            let host = host.trim_start_matches("*.");
            host == zone || host.ends_with(&format!(".{zone}"))
        };
        let held_by = |host: &String| {
            zones
                .iter()
                .filter(|z| holds(z, host))
                .max_by_key(|z| z.len())
                .cloned()
        };
        let domains: BTreeSet<Option<String>> = hostnames.iter().map(held_by).collect();
        let outside: Vec<&str> = hostnames
            .iter()
            .filter(|h| held_by(h).is_none())
            .map(String::as_str)
            .collect();
        if !outside.is_empty() {
            self.changes(
                None,
                "spec.providerRefs",
                format!(
                    "no --zone holds {}: say the provider zone's domain with --zone, or these hosts are not published",
                    outside.join(", ")
                ),
            );
        }
        let found: Vec<String> = domains.into_iter().flatten().collect();
        if found.len() > 1 {
            self.changes(
                None,
                "spec.providerRefs",
                format!(
                    "the Gateway's hosts are in zones {}; the policy's Secret is written for {} only (write a ManagedZone for each other zone with its Secret)",
                    found.join(", "),
                    found[0]
                ),
            );
        }
        found.into_iter().next()
    }
}

/// A ManagedZone's name for a domain: its labels joined by dashes.
pub fn zone_object_name(domain: &str) -> String {
    domain.replace('.', "-")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::convert::kuadrant_v1::ClusterManifests;
    use serde_json::{Value, json};

    fn cluster(name: &str, documents: &[Value]) -> ClusterManifests {
        let mut cluster = ClusterManifests::new(name);
        for document in documents {
            cluster.add(document).unwrap();
        }
        cluster
    }

    fn policy(namespace: &str, name: &str, spec: Value) -> Value {
        json!({"apiVersion": "kuadrant.io/v1", "kind": "DNSPolicy",
               "metadata": {"name": name, "namespace": namespace}, "spec": spec})
    }

    fn lb(geo: &str, weight: i64, default_geo: bool) -> Value {
        json!({"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
               "providerRefs": [{"name": "aws"}],
               "loadBalancing": {"geo": geo, "weight": weight, "defaultGeo": default_geo}})
    }

    fn gateway(namespace: &str, hosts: &[&str]) -> Value {
        json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
               "metadata": {"name": "gw", "namespace": namespace},
               "spec": {"listeners": hosts.iter().map(|h| json!({"name": h.replace('.', "-"), "hostname": h})).collect::<Vec<_>>()}})
    }

    fn options(zones: &[&str]) -> Options {
        Options {
            zones: zones.iter().map(|z| z.to_string()).collect(),
            insecure_health_checks: true,
        }
    }

    fn texts(conversion: &Conversion, kind: FindingKind) -> Vec<String> {
        conversion
            .findings
            .iter()
            .filter(|f| f.kind == kind)
            .map(|f| format!("{}: {}", f.at, f.text))
            .collect()
    }

    #[test]
    fn a_fleet_of_per_cluster_policies_becomes_one_policy_and_cluster_labels() {
        let clusters = [
            cluster(
                "eu-1",
                &[
                    policy("team", "web", lb("GEO-EU", 120, true)),
                    gateway("team", &["app.example.com"]),
                ],
            ),
            cluster("eu-2", &[policy("team", "web", lb("GEO-EU", 120, true))]),
            cluster("us-1", &[policy("team", "web", lb("US", 200, false))]),
        ];
        let conversion = convert(&clusters, &options(&["example.com", "other.example"]));
        assert_eq!(conversion.changes_answers(), 0, "{:?}", conversion.findings);
        let [policy] = conversion.policies.as_slice() else {
            panic!()
        };
        assert_eq!(policy.metadata.namespace.as_deref(), Some("team"));
        assert_eq!(policy.spec.routing_strategy, RoutingStrategy::Loadbalanced);
        let lb = &policy.spec.load_balancing;
        assert_eq!(lb.geo.as_ref().unwrap().default_geo, "GEO-EU");
        assert_eq!(lb.weighted.default_weight, 120);
        assert_eq!(lb.weighted.custom.len(), 1);
        assert_eq!(
            (
                lb.weighted.custom[0].value.as_deref(),
                lb.weighted.custom[0].weight
            ),
            (Some("200"), 200)
        );
        let weight = lb_attribute_label(Some(WEIGHT_ATTRIBUTE));
        assert_eq!(conversion.cluster_labels["us-1"][GEO_CODE_LABEL], "US");
        assert_eq!(conversion.cluster_labels["us-1"][&weight], "200");
        assert_eq!(conversion.cluster_labels["eu-2"][&weight], "120");
        let [zone] = conversion.zones.as_slice() else {
            panic!()
        };
        assert_eq!(zone.spec.domain_name, "example.com");
        assert_eq!(zone.metadata.name.as_deref(), Some("example-com"));
        assert_eq!(zone.provider_secret_name(), Ok(Some("aws")));
    }

    #[test]
    fn kuadrant_defaults_are_written_out_and_the_threshold_moves_by_one() {
        let spec = json!({"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
                          "providerRefs": [{"name": "aws"}],
                          "healthCheck": {"protocol": "HTTPS", "failureThreshold": 3, "path": "?ready"}});
        let conversion = convert(
            &[cluster("c", &[policy("team", "web", spec)])],
            &options(&["example.com"]),
        );
        let check = conversion.policies[0].spec.health_check.clone().unwrap();
        assert_eq!(check.failure_threshold, 4);
        assert_eq!(check.interval, "300s");
        assert_eq!(check.port, 443);
        assert_eq!(check.endpoint, "/?ready");
        assert!(check.allow_insecure_certificates);
        assert_eq!(
            conversion.policies[0].spec.routing_strategy,
            RoutingStrategy::Simple
        );
        assert_eq!(conversion.changes_answers(), 0, "{:?}", conversion.findings);
        let kept = texts(&conversion, FindingKind::Kept).join("\n");
        for said in [
            "failureThreshold",
            "interval",
            "allowInsecureCertificates",
            "routingStrategy simple",
            "path",
        ] {
            assert!(kept.contains(said), "{said} in {kept}");
        }
        let strict = Options {
            insecure_health_checks: false,
            ..options(&["example.com"])
        };
        let spec = json!({"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"},
                          "providerRefs": [{"name": "aws"}], "healthCheck": {"interval": "1s"}});
        let conversion = convert(&[cluster("c", &[policy("team", "web", spec)])], &strict);
        let check = conversion.policies[0].spec.health_check.clone().unwrap();
        assert!(!check.allow_insecure_certificates);
        assert_eq!(
            (check.interval.as_str(), check.failure_threshold),
            ("5s", 6)
        );
    }

    #[test]
    fn what_would_change_answers_is_said_and_counted() {
        let mut headers = lb("IE", 120, true);
        headers["healthCheck"] = json!({"additionalHeadersRef": {"name": "token"}});
        let cases: Vec<(&str, Vec<ClusterManifests>, &str)> = vec![
            (
                "headers",
                vec![cluster("a", &[policy("t", "p", headers)])],
                "additionalHeadersRef",
            ),
            (
                "continent without prefix",
                vec![cluster("a", &[policy("t", "p", lb("EU", 120, true))])],
                "the continent is GEO-EU",
            ),
            (
                "no default geo",
                vec![
                    cluster("a", &[policy("t", "p", lb("IE", 120, false))]),
                    cluster("b", &[policy("t", "p", lb("US", 120, false))]),
                ],
                "Meridian answers them from IE",
            ),
            (
                "two default geos",
                vec![
                    cluster("a", &[policy("t", "p", lb("IE", 120, true))]),
                    cluster("b", &[policy("t", "p", lb("US", 120, true))]),
                ],
                "takes IE",
            ),
            (
                "mixed shapes",
                vec![
                    cluster("a", &[policy("t", "p", lb("IE", 120, true))]),
                    cluster(
                        "b",
                        &[policy(
                            "t",
                            "p",
                            json!({"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}, "providerRefs": [{"name": "aws"}]}),
                        )],
                    ),
                ],
                "absent on b",
            ),
            (
                "other provider",
                vec![cluster(
                    "a",
                    &[
                        policy("t", "p", lb("IE", 120, true)),
                        json!({"apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/coredns", "metadata": {"name": "aws", "namespace": "t"}}),
                    ],
                )],
                "has type kuadrant.io/coredns",
            ),
            (
                "no provider",
                vec![cluster(
                    "a",
                    &[policy(
                        "t",
                        "p",
                        json!({"targetRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}}),
                    )],
                )],
                "name the zone's Secret",
            ),
            (
                "host outside the zones",
                vec![cluster(
                    "a",
                    &[
                        policy("t", "p", lb("IE", 120, true)),
                        gateway("t", &["app.elsewhere.org"]),
                    ],
                )],
                "no --zone holds app.elsewhere.org",
            ),
            (
                "bad exclusion",
                vec![cluster(
                    "a",
                    &[policy("t", "p", {
                        let mut s = lb("IE", 120, true);
                        s["excludeAddresses"] = json!(["10.0.0.0/33"]);
                        s
                    })],
                )],
                "every address is published",
            ),
            (
                "unknown field",
                vec![cluster(
                    "a",
                    &[policy("t", "p", {
                        let mut s = lb("IE", 120, true);
                        s["routingStrategy"] = json!("loadbalanced");
                        s
                    })],
                )],
                "spec.routingStrategy",
            ),
        ];
        for (what, clusters, expected) in cases {
            let conversion = convert(&clusters, &options(&["example.com"]));
            let changes = texts(&conversion, FindingKind::ChangesAnswers).join("\n");
            assert!(
                changes.contains(expected),
                "{what}: {expected:?} not in\n{changes}"
            );
            assert!(conversion.changes_answers() > 0, "{what}");
        }
    }

    #[test]
    fn a_listener_policy_keeps_its_listener() {
        let mut spec = lb("IE", 120, true);
        spec["targetRef"]["sectionName"] = json!("api");
        let conversion = convert(
            &[cluster("a", &[policy("t", "p", spec)])],
            &options(&["example.com"]),
        );
        assert_eq!(conversion.changes_answers(), 0, "{:?}", conversion.findings);
        assert_eq!(
            conversion.policies[0]
                .spec
                .target_ref
                .section_name
                .as_deref(),
            Some("api")
        );
    }

    /// Two teams convert policies naming the same cluster: one team's geo must not quietly
    /// become the other's (a ManagedCluster has one geo label). And one team's policy never
    /// lands in, or takes its zone Secret from, the other's namespace.
    #[test]
    fn one_teams_policy_cannot_relabel_another_teams_clusters_or_reach_its_namespace() {
        let a = policy("team-a", "web", lb("IE", 120, true));
        let b = policy("team-b", "web", lb("US", 10, true));
        let secret_b = json!({"apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/aws",
                              "metadata": {"name": "other", "namespace": "team-b",
                                           "labels": {"kuadrant.io/default-provider": "true"}}});
        let mut b_without_provider = b.clone();
        b_without_provider["spec"]["providerRefs"] = json!([]);
        let conversion = convert(
            &[cluster("shared", &[a, b_without_provider, secret_b])],
            &options(&["example.com"]),
        );
        let changes = texts(&conversion, FindingKind::ChangesAnswers).join("\n");
        assert!(
            changes.contains("team-b/web on shared: wants label kuadrant.io/lb-attribute-geo-code=US, but team-a/web set it to IE"),
            "{changes}"
        );
        assert_eq!(conversion.cluster_labels["shared"][GEO_CODE_LABEL], "IE");
        let namespaces: Vec<_> = conversion
            .zones
            .iter()
            .map(|z| {
                (
                    z.metadata.namespace.clone().unwrap(),
                    z.provider_secret_name().unwrap().unwrap().to_string(),
                )
            })
            .collect();
        assert_eq!(
            namespaces,
            [
                ("team-a".to_string(), "aws".to_string()),
                ("team-b".to_string(), "other".to_string())
            ]
        );
    }

    /// A hostile value cannot reach the output as anything but data: it is refused, never
    /// written as a label, and a finding quoting it stays one line with no terminal escape.
    #[test]
    fn hostile_values_are_refused_or_escaped_never_written_raw() {
        let mut escape = lb("IE", 120, true);
        escape["forged\nchanges answers  t/p: \u{1b}[2J"] = json!(1);
        let conversion = convert(
            &[cluster("a", &[policy("t", "p", escape)])],
            &options(&["example.com"]),
        );
        let lines: Vec<String> = conversion.findings.iter().map(|f| f.to_string()).collect();
        assert!(
            lines.iter().any(|l| l.contains("forged\\nchanges")),
            "{lines:?}"
        );
        for line in &lines {
            assert!(!line.contains('\n') && !line.contains('\u{1b}'), "{line:?}");
        }
        let spec = lb("IE\n---\nkind: ClusterRoleBinding", 120, true);
        let conversion = convert(
            &[cluster("a", &[policy("t", "p", spec)])],
            &options(&["example.com"]),
        );
        assert!(conversion.changes_answers() > 0);
        assert!(
            conversion
                .cluster_labels
                .get("a")
                .is_none_or(|l| !l.contains_key(GEO_CODE_LABEL))
        );
        assert!(conversion.policies[0].spec.load_balancing.geo.is_none());
    }
}
