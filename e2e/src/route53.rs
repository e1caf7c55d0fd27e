//! A Route53 zone on moto for the tests that publish to Route53: reached by the hub through a
//! proxy that counts calls by action and can play an outage, and by the test straight.

use meridian_dns::model::{Endpoint, RecordType};
use meridian_hub::run_command::RunArgs;
use meridian_providers::Provider;
use meridian_providers::route53::Route53Provider;
use meridian_testkit::counting_proxy::CountingProxy;
use meridian_testkit::moto::MotoServer;
use serde_json::{Value, json};

/// One hosted zone on its own moto server.
pub struct Route53Zone {
    _moto: MotoServer,
    /// Straight to moto, for the test's own reads and writes.
    pub direct: Route53Provider,
    pub zone_id: String,
    /// What the hub talks to.
    pub proxy: CountingProxy,
}

impl std::fmt::Debug for Route53Zone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Route53Zone")
            .field("zone_id", &self.zone_id)
            .finish_non_exhaustive()
    }
}

impl Route53Zone {
    pub async fn start(domain: &str) -> Self {
        let moto = MotoServer::start().expect("moto starts");
        moto.create_zone(domain).await.expect("a zone");
        let direct = moto.provider(100);
        let zone_id = direct.list_zones().await.expect("moto lists its zones")[0]
            .id
            .clone();
        let proxy = CountingProxy::start(moto.address(), 0)
            .await
            .expect("the proxy starts");
        Route53Zone {
            _moto: moto,
            direct,
            zone_id,
            proxy,
        }
    }

    /// The `kuadrant.io/aws` Secret `namespace/name` with moto's keys (the hub reaches moto
    /// through [`Route53Zone::hub_args`]).
    pub fn secret(&self, namespace: &str, name: &str) -> Value {
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kuadrant.io/aws",
            "metadata": { "name": name, "namespace": namespace },
            "stringData": {
                "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                "AWS_REGION": "us-east-1",
            },
        })
    }

    /// A hub whose Route53 is the proxy (the admin's `--aws-endpoint`).
    pub fn hub_args(&self, kubeconfig: &std::path::Path) -> RunArgs {
        let mut args = RunArgs::local(kubeconfig);
        args.providers.aws_endpoint = Some(self.proxy.endpoint());
        args
    }

    /// Every record of the zone (ownership TXT records included, NS records aside),
    /// sorted.
    pub async fn records(&self) -> Vec<Endpoint> {
        let mut records: Vec<Endpoint> = self
            .direct
            .records(&self.zone_id)
            .await
            .expect("moto answers")
            .into_iter()
            .filter(|e| e.record_type != RecordType::Ns)
            .collect();
        records.sort();
        records
    }

    /// The A records the zone holds (ownership TXT records aside), by name.
    pub async fn held(&self) -> Vec<(String, Vec<String>)> {
        held_by(&self.direct, &self.zone_id).await
    }
}

/// The A records a provider holds (ownership TXT records aside), by name.
pub async fn held_by(provider: &impl Provider, zone_id: &str) -> Vec<(String, Vec<String>)> {
    let mut held: Vec<(String, Vec<String>)> = provider
        .records(zone_id)
        .await
        .expect("the provider answers")
        .into_iter()
        .filter(|e: &Endpoint| e.record_type == RecordType::A && !e.dns_name.starts_with("ns1."))
        .map(|e| (e.dns_name, e.targets))
        .collect();
    held.sort();
    held
}
