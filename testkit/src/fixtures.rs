//! Fixtures as builders on the real types, one per kind the controllers read. Each starts from
//! the smallest object its kind accepts and adds only what a test names: the test reads as the
//! object it needs. [`Fixture::build`] returns the typed object (and [`Fixture::json`] the same
//! object as the API server takes it), so a fixture the types refuse fails where it is written.

use std::marker::PhantomData;
use std::sync::Arc;

use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::labels::PLACEMENT_LABEL;
use meridian_api::meridian::{ClusterReport, ProbeResults};
use meridian_api::upstream::{Gateway, PlacementDecision};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// A builder of a `K`, over its JSON form.
#[derive(Debug, Clone)]
pub struct Fixture<K> {
    value: Value,
    kind: PhantomData<K>,
}

impl<K: DeserializeOwned> Fixture<K> {
    fn new(api_version: &str, kind: &str, namespace: &str, name: &str, spec: Value) -> Self {
        Fixture {
            value: json!({
                "apiVersion": api_version,
                "kind": kind,
                "metadata": { "name": name, "namespace": namespace },
                "spec": spec,
            }),
            kind: PhantomData,
        }
    }

    /// Merges `patch` into the object, as a JSON merge patch does: objects merge, anything else
    /// (a list, a string) replaces, and `null` removes.
    pub fn with(mut self, patch: Value) -> Self {
        merge(&mut self.value, patch);
        self
    }

    pub fn label(self, key: &str, value: &str) -> Self {
        self.with(json!({ "metadata": { "labels": { key: value } } }))
    }

    pub fn annotation(self, key: &str, value: &str) -> Self {
        self.with(json!({ "metadata": { "annotations": { key: value } } }))
    }

    /// The UID the API server gave it (what owner references and namesakes are told apart by).
    pub fn uid(self, uid: &str) -> Self {
        self.with(json!({ "metadata": { "uid": uid } }))
    }

    pub fn generation(self, generation: i64) -> Self {
        self.with(json!({ "metadata": { "generation": generation } }))
    }

    pub fn finalizer(mut self, finalizer: &str) -> Self {
        push(
            &mut self.value,
            &["metadata", "finalizers"],
            json!(finalizer),
        );
        self
    }

    /// The object as JSON, as a server-side apply sends it.
    pub fn json(&self) -> Value {
        self.value.clone()
    }

    /// The typed object.
    pub fn build(&self) -> K {
        serde_json::from_value(self.value.clone()).unwrap_or_else(|error| {
            panic!(
                "a {} fixture its type refuses: {error}\n{:#}",
                self.value["kind"], self.value
            )
        })
    }

    pub fn arc(&self) -> Arc<K> {
        Arc::new(self.build())
    }
}

/// A DNSPolicy in `namespace` targeting the Gateway `gateway` there.
pub fn dns_policy(namespace: &str, name: &str, gateway: &str) -> Fixture<DNSPolicy> {
    Fixture::new(
        "kuadrant.io/v1alpha1",
        "DNSPolicy",
        namespace,
        name,
        json!({
            "targetRef": { "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": gateway },
        }),
    )
}

/// A DNSRecord in `namespace` publishing into the ManagedZone `zone` there, with no endpoints.
pub fn dns_record(namespace: &str, name: &str, zone: &str) -> Fixture<DNSRecord> {
    Fixture::new(
        "kuadrant.io/v1alpha1",
        "DNSRecord",
        namespace,
        name,
        json!({ "managedZone": { "name": zone }, "endpoints": [] }),
    )
}

impl Fixture<DNSRecord> {
    pub fn root_host(self, host: &str) -> Self {
        self.with(json!({ "spec": { "rootHost": host } }))
    }

    /// One more endpoint: `name` of `record_type` with `targets`, for 60 s.
    pub fn endpoint(self, name: &str, record_type: &str, targets: &[&str]) -> Self {
        self.endpoint_for(name, record_type, targets, 60)
    }

    /// One more endpoint: `name` of `record_type` with `targets`, for `ttl` seconds.
    pub fn endpoint_for(
        mut self,
        name: &str,
        record_type: &str,
        targets: &[&str],
        ttl: u32,
    ) -> Self {
        push(
            &mut self.value,
            &["spec", "endpoints"],
            json!({ "dnsName": name, "recordType": record_type, "targets": targets, "recordTTL": ttl }),
        );
        self
    }

    /// Its endpoints, as the API takes them (a list of `{dnsName, recordType, targets, …}`).
    pub fn endpoints(self, endpoints: Value) -> Self {
        self.with(json!({ "spec": { "endpoints": endpoints } }))
    }

    /// Health checks of its leaves on `port` over `protocol` (`HTTP` or `HTTPS`).
    pub fn health_check(self, port: u16, protocol: &str) -> Self {
        self.with(json!({ "spec": { "healthCheck": { "port": port, "protocol": protocol } } }))
    }

    /// Owned (as its controller) by `policy`, which must have a UID.
    pub fn owned_by(mut self, policy: &DNSPolicy) -> Self {
        use kube::Resource;
        let owner = policy
            .controller_owner_ref(&())
            .expect("the policy has a UID");
        push(
            &mut self.value,
            &["metadata", "ownerReferences"],
            serde_json::to_value(owner).expect("an owner reference serializes"),
        );
        self
    }
}

/// A ManagedZone in `namespace` for `domain`, served by the embedded nameserver.
pub fn managed_zone(namespace: &str, name: &str, domain: &str) -> Fixture<ManagedZone> {
    Fixture::new(
        "kuadrant.io/v1alpha1",
        "ManagedZone",
        namespace,
        name,
        json!({ "domainName": domain }),
    )
}

impl Fixture<ManagedZone> {
    /// At a provider, through the Secret `secret` in the zone's namespace.
    pub fn at_provider(self, secret: &str) -> Self {
        self.with(json!({ "spec": { "dnsProviderSecretRef": { "name": secret } } }))
    }
}

/// A Gateway in `namespace` of the multi-cluster class, with no listeners.
pub fn gateway(namespace: &str, name: &str) -> Fixture<Gateway> {
    Fixture::new(
        "gateway.networking.k8s.io/v1",
        "Gateway",
        namespace,
        name,
        json!({
            "gatewayClassName": "kuadrant-multi-cluster-gateway-instance-per-cluster",
            "listeners": [],
        }),
    )
}

impl Fixture<Gateway> {
    /// Placed on the clusters the OCM Placement `placement` decides.
    pub fn placement(self, placement: &str) -> Self {
        self.label(PLACEMENT_LABEL, placement)
    }

    /// Of the GatewayClass `class` (a cluster's own implementation, say) instead.
    pub fn class(self, class: &str) -> Self {
        self.with(json!({ "spec": { "gatewayClassName": class } }))
    }

    /// One more listener: `name` for `hostname` on `port` over `protocol`.
    pub fn listener(mut self, name: &str, hostname: &str, port: u16, protocol: &str) -> Self {
        push(
            &mut self.value,
            &["spec", "listeners"],
            json!({ "name": name, "hostname": hostname, "port": port, "protocol": protocol }),
        );
        self
    }
}

/// A Gateway's status as its implementation writes it (a server-side apply of the status):
/// `addresses` (IPs, else hostnames), and each listener of `listeners` with its attached routes.
pub fn gateway_status(addresses: &[&str], listeners: &[(&str, i32)]) -> Value {
    let addresses: Vec<Value> = addresses
        .iter()
        .map(|address| {
            let kind = match address.parse::<std::net::IpAddr>() {
                Ok(_) => "IPAddress",
                Err(_) => "Hostname",
            };
            json!({ "type": kind, "value": address })
        })
        .collect();
    let listeners: Vec<Value> = listeners
        .iter()
        .map(|(name, routes)| {
            json!({ "name": name, "attachedRoutes": routes, "supportedKinds": [], "conditions": [] })
        })
        .collect();
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "status": { "addresses": addresses, "listeners": listeners },
    })
}

/// The PlacementDecision of OCM's Placement `placement` in `namespace`, deciding `clusters`.
pub fn placement_decision(
    namespace: &str,
    placement: &str,
    clusters: &[&str],
) -> Fixture<PlacementDecision> {
    let decisions: Vec<Value> = clusters
        .iter()
        .map(|cluster| json!({ "clusterName": cluster, "reason": "" }))
        .collect();
    Fixture::new(
        "cluster.open-cluster-management.io/v1beta1",
        "PlacementDecision",
        namespace,
        &format!("{placement}-decision-1"),
        json!({}),
    )
    .label(PLACEMENT_LABEL, placement)
    .with(json!({ "spec": null, "status": { "decisions": decisions } }))
}

/// The agent's ClusterReport in its cluster namespace, for the cluster `cluster_id`, with no
/// Gateways.
pub fn cluster_report(namespace: &str, cluster_id: &str) -> Fixture<ClusterReport> {
    Fixture::new(
        "meridian.dev/v1alpha1",
        "ClusterReport",
        namespace,
        "agent",
        json!({ "clusterID": cluster_id }),
    )
}

impl Fixture<ClusterReport> {
    /// One more reported Gateway, `namespace/name` at `address`.
    pub fn gateway(mut self, namespace: &str, name: &str, address: &str) -> Self {
        push(
            &mut self.value,
            &["spec", "gateways"],
            json!({
                "name": name, "namespace": namespace,
                "addresses": [{ "type": "IPAddress", "value": address }],
            }),
        );
        self
    }
}

/// A shard of an agent's probe results in its cluster namespace, with no probes.
pub fn probe_results(namespace: &str, shard: u32) -> Fixture<ProbeResults> {
    Fixture::new(
        "meridian.dev/v1alpha1",
        "ProbeResults",
        namespace,
        &format!("agent-probes-{shard}"),
        json!({ "shard": shard, "shards": 1 }),
    )
}

/// The `namespace/name` of each reference, sorted: what a trigger asked for, as a test reads it.
pub fn names<K: kube::Resource>(
    refs: impl IntoIterator<Item = kube::runtime::reflector::ObjectRef<K>>,
) -> Vec<String> {
    let mut names: Vec<String> = refs
        .into_iter()
        .map(|r| format!("{}/{}", r.namespace.unwrap_or_default(), r.name))
        .collect();
    names.sort();
    names
}

/// A `True` condition of `type_`, as a controller writes it.
pub fn condition(type_: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    serde_json::from_value(json!({
        "type": type_, "status": "True", "reason": "Test", "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }))
    .expect("a condition")
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(target), Value::Object(patch)) => {
            for (key, value) in patch {
                if value.is_null() {
                    target.remove(&key);
                } else {
                    merge(target.entry(key).or_insert(Value::Null), value);
                }
            }
        }
        (target, patch) => *target = patch,
    }
}

fn push(value: &mut Value, path: &[&str], item: Value) {
    let mut at = value;
    for key in path {
        at = at
            .as_object_mut()
            .expect("a fixture's path runs through objects")
            .entry(key.to_string())
            .or_insert(Value::Null);
    }
    if !at.is_array() {
        *at = Value::Array(Vec::new());
    }
    at.as_array_mut().expect("an array").push(item);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixtures_build_the_real_types() {
        let policy = dns_policy("dns", "web", "prod-web")
            .uid("p1")
            .generation(2)
            .build();
        assert_eq!(policy.spec.target_ref.name, "prod-web");
        assert_eq!(policy.metadata.generation, Some(2));
        let record = dns_record("dns", "web-api", "zone")
            .root_host("api.example.com")
            .endpoint("api.example.com", "A", &["192.0.2.1"])
            .endpoint("www.api.example.com", "A", &["192.0.2.2"])
            .health_check(443, "HTTPS")
            .owned_by(&policy)
            .finalizer("meridian.dev/a")
            .finalizer("meridian.dev/b")
            .build();
        assert_eq!(record.spec.endpoints.len(), 2);
        assert!(record.spec.health_check.is_some());
        assert_eq!(record.metadata.owner_references.unwrap()[0].uid, "p1");
        assert_eq!(record.metadata.finalizers.unwrap().len(), 2);
        let zone = managed_zone("dns", "zone", "example.com")
            .at_provider("aws")
            .build();
        assert!(zone.spec.dns_provider_secret_ref.is_some());
        let gateway = gateway("dns", "prod-web").placement("everywhere").build();
        assert_eq!(
            gateway.metadata.labels.unwrap()[PLACEMENT_LABEL],
            "everywhere"
        );
        let decision = placement_decision("dns", "everywhere", &["spoke-1", "spoke-2"]).build();
        assert_eq!(decision.status.unwrap().decisions.len(), 2);
        let report = cluster_report("spoke-1", "c1")
            .gateway("kuadrant-dns", "prod-web", "192.0.2.10")
            .build();
        assert_eq!(report.spec.gateways.len(), 1);
        probe_results("spoke-1", 0).build();
        // A merge patch removes what it sets to null.
        let bare = dns_record("dns", "web-api", "zone")
            .label("a", "b")
            .with(json!({ "metadata": { "labels": null } }))
            .build();
        assert!(bare.metadata.labels.is_none());
    }

    #[test]
    #[should_panic(expected = "a \"DNSRecord\" fixture its type refuses")]
    fn a_fixture_its_type_refuses_fails_where_it_is_written() {
        dns_record("dns", "web-api", "zone")
            .with(json!({ "spec": { "endpoints": "not a list" } }))
            .build();
    }
}
