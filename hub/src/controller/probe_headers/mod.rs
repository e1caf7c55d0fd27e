//! Delivers the extra request headers of health probes to the agents. A probe names a Secret
//! in its own namespace, which an agent may not read. The hub copies the headers of every
//! Secret a probe names into one Secret, `meridian-probe-headers`, in each cluster's namespace,
//! and the agent's Role there allows reading that Secret only. Keys are
//! `<namespace>.<secret name>` (a namespace has no dots, so the split is unambiguous); values
//! are JSON objects of header names to values.
//!
//! | | |
//! |---|---|
//! | **Watches** (shared caches) | ManagedClusters, DNSHealthCheckProbes, Secrets |
//! | **Triggered by** ([`triggers`]) | a new cluster; a probe that names (or named) a header Secret; a named Secret (every cluster); a cluster's copy changed or deleted (that cluster) |
//! | **Gathers** | the Secrets the probes name, and the cluster's copy, from the cache |
//! | **Decides** | the copy's data ([`headers_data`], pure) |
//! | **Writes** | the copy, only when its data differs |

pub mod triggers;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use meridian_api::upstream::ManagedCluster;

use meridian_api::names::PROBE_HEADERS_SECRET as HEADERS_SECRET;
use meridian_api::names::PROBE_SEAL_SECRET;
use meridian_controllers::health::secret_headers;
use meridian_controllers::{Context, Error, retry_after};

const CONTROLLER: &str = "probe-headers";

/// The key of a header Secret in the copy.
pub fn headers_key(namespace: &str, secret: &str) -> String {
    format!("{namespace}.{secret}")
}

/// The copy's data: for each named Secret that exists, its keys and values as headers.
pub fn headers_data(
    sources: &BTreeMap<(String, String), Option<Secret>>,
) -> BTreeMap<String, ByteString> {
    sources
        .iter()
        .filter_map(|((namespace, name), secret)| {
            // A refused Secret (its type, its size) is not copied; the record's status says why.
            let headers = secret_headers(secret.as_ref()?).ok()?;
            let json = serde_json::to_vec(&headers).expect("a map of strings serializes");
            Some((headers_key(namespace, name), ByteString(json)))
        })
        .collect()
}

/// Runs the controller until `stop` resolves.
pub async fn run(ctx: Arc<Context>, stop: impl std::future::Future<Output = ()> + Send + 'static) {
    let all = ctx.caches.clusters.store().clone();
    let requests = triggers::requests(&ctx.caches);
    meridian_controllers::caches::run_controller(
        all,
        ctx.config.concurrency.light,
        requests,
        reconcile,
        error_policy,
        ctx,
        stop,
    )
    .await;
}

pub async fn reconcile(cluster: Arc<ManagedCluster>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.metrics.reconciled(CONTROLLER);
    if !ctx.caches.listed() {
        return Err(Error::Waiting("the first list of probes".into()));
    }
    let namespace = cluster.name_any();
    // The key the agent checks the hub's seal on a probe with, before it runs it.
    let key = ctx.probe_seal_key().await?;
    let seal = BTreeMap::from([(
        meridian_controllers::probe_seal::KEY_FIELD.to_string(),
        ByteString(key),
    )]);
    if super::cluster_copies::deliver(&ctx, &namespace, PROBE_SEAL_SECRET, &seal).await? {
        tracing::info!(cluster = %namespace, "delivered the probe seal key");
    }
    let referenced: BTreeSet<(String, String)> = ctx
        .caches
        .probes
        .state()
        .iter()
        .filter_map(|probe| {
            let reference = probe.spec.additional_headers_ref.as_ref()?;
            Some((
                probe.namespace().unwrap_or_default(),
                reference.name.clone(),
            ))
        })
        .collect();
    if referenced.is_empty() {
        // No probe in the fleet sends headers: nothing to deliver, and nothing to read until a
        // probe names a Secret (that change wakes every cluster).
        return Ok(Action::await_change());
    }
    let mut sources = BTreeMap::new();
    for (secret_namespace, name) in referenced {
        let secret = ctx.caches.secrets.get(Some(&secret_namespace), &name);
        if secret.is_none() {
            tracing::debug!(namespace = %secret_namespace, secret = %name, "a probe's header Secret does not exist");
        }
        sources.insert((secret_namespace, name), secret.map(|s| (*s).clone()));
    }
    let data = headers_data(&sources);
    if super::cluster_copies::deliver(&ctx, &namespace, HEADERS_SECRET, &data).await? {
        tracing::info!(cluster = %namespace, secrets = data.len(), "delivered probe headers");
    }
    // A rotated source Secret, or a copy someone changed, wakes this cluster again.
    Ok(Action::requeue(ctx.config.resync))
}

pub fn error_policy(cluster: Arc<ManagedCluster>, error: &Error, ctx: Arc<Context>) -> Action {
    retry_after(&*cluster, error, &ctx, CONTROLLER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_named_secret_becomes_one_key_of_json_headers_and_missing_or_refused_ones_are_left_out()
    {
        let secret = |type_: &str, key: &str| Secret {
            type_: Some(type_.into()),
            data: Some(BTreeMap::from([(
                key.to_string(),
                ByteString(b"s3cret".to_vec()),
            )])),
            ..Default::default()
        };
        let headers_type = meridian_controllers::health::PROBE_HEADERS_SECRET_TYPE;
        let sources = BTreeMap::from([
            (
                ("gateways".to_string(), "probe-auth".to_string()),
                Some(secret(headers_type, "X-Probe-Token")),
            ),
            (("gateways".to_string(), "missing".to_string()), None),
            // The attack: the zone's provider credentials named as headers.
            (
                ("gateways".to_string(), "aws".to_string()),
                Some(secret("kuadrant.io/aws", "AWS_SECRET_ACCESS_KEY")),
            ),
        ]);
        let data = headers_data(&sources);
        assert_eq!(data.keys().collect::<Vec<_>>(), ["gateways.probe-auth"]);
        let headers: BTreeMap<String, String> =
            serde_json::from_slice(&data["gateways.probe-auth"].0).unwrap();
        assert_eq!(headers["X-Probe-Token"], "s3cret");
    }
}
