//! Which DNSHealthCheckProbes an agent runs: only those the hub derived. Probes live in the
//! tenants' namespaces, beside the DNSRecords they check, so a tenant can write one by hand,
//! and every agent of the fleet used to run it. The hub now seals each probe it writes (an
//! HMAC-SHA256 of its namespace, name and spec, with a key only the hub and the agents hold, in
//! the annotation [`SEAL_ANNOTATION`]); an agent runs a probe only when the seal checks out.
//! A tenant can read neither the key (in the hub's namespace, copied into the cluster
//! namespaces) nor forge a seal, and any change to a sealed probe's spec breaks its seal.

use hmac::{Hmac, KeyInit, Mac};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use meridian_api::kuadrant::{DNSHealthCheckProbe, DNSHealthCheckProbeSpec};
use sha2::Sha256;

/// The annotation carrying a probe's seal (lowercase hex).
pub const SEAL_ANNOTATION: &str = "meridian.dev/probe-seal";
/// The key of the seal Secret holding the key.
pub const KEY_FIELD: &str = "key";
/// Bytes of a new key; shorter keys are refused.
const KEY_BYTES: usize = 32;

/// Whom a probe belongs to: the DNSRecord it checks (the label the hub finds it by) and that
/// record's UID (its owner), both covered by the seal. A sealed probe stripped of either, or
/// saved and written again for a record since gone, no longer checks out, and one that still
/// names its record is found and deleted by the hub when the record wants it no more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Owner<'a> {
    pub record: &'a str,
    pub uid: &'a str,
}

impl<'a> Owner<'a> {
    /// As the probe says: its record label and its controller owner's UID.
    pub fn of(probe: &'a DNSHealthCheckProbe) -> Option<Self> {
        let record = probe
            .labels()
            .get(crate::decide::health::PROBE_RECORD_LABEL)?;
        let uid = probe
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|owner| owner.controller == Some(true) && owner.kind == "DNSRecord")?
            .uid
            .as_str();
        Some(Owner { record, uid })
    }
}

/// What a seal covers: the probe's namespace, name, owner and spec as the API server stores it.
fn message(
    namespace: &str,
    name: &str,
    owner: Owner<'_>,
    spec: &DNSHealthCheckProbeSpec,
) -> Vec<u8> {
    let spec = serde_json::to_string(spec).expect("a probe spec serializes");
    format!("{namespace}/{name}\n{}/{}\n{spec}", owner.record, owner.uid).into_bytes()
}

fn mac(key: &[u8]) -> Hmac<Sha256> {
    <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes a key of any length")
}

/// The seal of the probe `namespace/name` of `owner` with `spec`.
pub fn seal(
    key: &[u8],
    namespace: &str,
    name: &str,
    owner: Owner<'_>,
    spec: &DNSHealthCheckProbeSpec,
) -> String {
    let mut mac = mac(key);
    mac.update(&message(namespace, name, owner, spec));
    mac.finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether `probe` carries a seal `key` made for its namespace, name and spec (compared in
/// constant time).
pub fn is_sealed(key: &[u8], probe: &DNSHealthCheckProbe) -> bool {
    let Some(seal) = probe.annotations().get(SEAL_ANNOTATION) else {
        return false;
    };
    let Some(bytes) = from_hex(seal) else {
        return false;
    };
    let Some(owner) = Owner::of(probe) else {
        return false;
    };
    let mut mac = mac(key);
    mac.update(&message(
        &probe.namespace().unwrap_or_default(),
        &probe.name_any(),
        owner,
        &probe.spec,
    ));
    mac.verify_slice(&bytes).is_ok()
}

fn from_hex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The key a seal Secret holds, if it is one (long enough).
pub fn key_of(secret: &Secret) -> Option<Vec<u8>> {
    let key = secret.data.as_ref()?.get(KEY_FIELD)?.0.clone();
    (key.len() >= KEY_BYTES).then_some(key)
}

/// A new random key.
pub fn new_key() -> Vec<u8> {
    use rand::RngCore;
    let mut key = vec![0u8; KEY_BYTES];
    rand::rng().fill_bytes(&mut key);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWNER: Owner<'static> = Owner {
        record: "api",
        uid: "0a1b2c3d-0000-4000-8000-000000000001",
    };

    fn probe(name: &str, address: &str, seal: Option<String>) -> DNSHealthCheckProbe {
        let mut probe: DNSHealthCheckProbe = serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSHealthCheckProbe",
            "metadata": {
                "name": name, "namespace": "shop",
                "labels": { crate::decide::health::PROBE_RECORD_LABEL: OWNER.record },
                "ownerReferences": [{
                    "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord", "name": OWNER.record,
                    "uid": OWNER.uid, "controller": true,
                }],
            },
            "spec": { "port": 443, "host": "api.example.com", "address": address },
        }))
        .expect("a probe");
        if let Some(seal) = seal {
            probe
                .metadata
                .annotations
                .get_or_insert_default()
                .insert(SEAL_ANNOTATION.into(), seal);
        }
        probe
    }

    #[test]
    fn only_the_hubs_seal_on_the_same_probe_checks_out() {
        let key = new_key();
        let sealed_for = |name: &str, address: &str| {
            let unsealed = probe(name, address, None);
            seal(&key, "shop", name, OWNER, &unsealed.spec)
        };
        let good = sealed_for("api-abc", "192.0.2.1");
        assert!(is_sealed(
            &key,
            &probe("api-abc", "192.0.2.1", Some(good.clone()))
        ));
        let cases = [
            // Written by hand: no seal.
            probe("api-abc", "192.0.2.1", None),
            // A sealed probe's spec changed: its address now the metadata service.
            probe("api-abc", "169.254.169.254", Some(good.clone())),
            // The seal copied onto another probe.
            probe("api-xyz", "192.0.2.1", Some(good.clone())),
            // A seal made with another key, and garbage.
            probe(
                "api-abc",
                "192.0.2.1",
                Some(seal(
                    &new_key(),
                    "shop",
                    "api-abc",
                    OWNER,
                    &probe("api-abc", "192.0.2.1", None).spec,
                )),
            ),
            probe("api-abc", "192.0.2.1", Some("zz".into())),
            probe("api-abc", "192.0.2.1", Some(good[..10].to_string())),
        ];
        for forged in cases {
            assert!(!is_sealed(&key, &forged), "{forged:?}");
        }
        // Another namespace's probe of the same name and spec.
        let mut elsewhere = probe("api-abc", "192.0.2.1", Some(good.clone()));
        elsewhere.metadata.namespace = Some("mallory".into());
        assert!(!is_sealed(&key, &elsewhere));
        // Detached from its record (so the hub would not find it to delete it), or saved and
        // written again for another record.
        let mut detached = probe("api-abc", "192.0.2.1", Some(good.clone()));
        detached.metadata.labels = None;
        assert!(!is_sealed(&key, &detached));
        let mut orphaned = probe("api-abc", "192.0.2.1", Some(good));
        orphaned.metadata.owner_references.as_mut().unwrap()[0].uid =
            "0a1b2c3d-0000-4000-8000-000000000002".into();
        assert!(!is_sealed(&key, &orphaned));
    }

    #[test]
    fn a_short_key_is_no_key() {
        let secret = |bytes: usize| Secret {
            data: Some(
                [(
                    KEY_FIELD.to_string(),
                    k8s_openapi::ByteString(vec![7; bytes]),
                )]
                .into(),
            ),
            ..Default::default()
        };
        assert!(key_of(&secret(KEY_BYTES)).is_some());
        assert!(key_of(&secret(8)).is_none());
        assert!(key_of(&Secret::default()).is_none());
    }
}
