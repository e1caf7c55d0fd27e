//! The keys of a signed embedded zone: one Secret per ManagedZone in the hub's own namespace
//! ([`keys_secret_name`], type `meridian.io/dnssec-keys`), written only by the leading hub and
//! read by every replica, so every server of the zone signs with the same keys. The hub writes
//! no Secret outside its namespace; keys an earlier hub kept beside the zone
//! (`<name>-dnssec`) are taken over on first use.
//!
//! The Secret holds the algorithm, the key-signing key, the zone-signing key that signs and,
//! during a rollover, a standby ZSK, each as PKCS#8 DER, and where the rollover is. A rollover
//! ([`advance`]) follows RFC 6781's pre-publish method, each step at least the zone's rollover
//! step after the last: publish the new ZSK, sign with it, withdraw the old one. Keys are never
//! logged: [`KeySet`]'s `Debug` shows tags only.
//!
//! The Secret has no owner: deleting the ManagedZone keeps its keys, so a zone made again under
//! the same name keeps the DS its parent has.
//!
//! Agents that serve DNS get a copy without the KSK ([`CopiedKeys`]): the ZSKs and the hub's
//! signature over the DNSKEY set, made again before it is half its validity old. A stolen
//! agent's keys sign answers until the next ZSK rollover, and cannot sign another DNSKEY set.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use meridian_api::kuadrant::{DnssecAlgorithm, ManagedZone};
use meridian_nameserver::dnssec::{
    DEFAULT_DNSKEY_TTL, KeyAlgorithm, KeyError, SIGNATURE_REFRESH, ZoneKeys,
};

/// The type of key Secrets.
pub const KEYS_SECRET_TYPE: &str = "meridian.io/dnssec-keys";

/// Annotation on a key Secret naming its ManagedZone (`<namespace>/<name>`), for people.
pub const ZONE_ANNOTATION: &str = "meridian.dev/zone";

/// The name, in the hub's namespace, of the key Secret of the ManagedZone `zone_name` in
/// `zone_namespace`: readable, and a hash of both so that no two zones share one, within an
/// object name's 253 characters.
pub fn keys_secret_name(zone_namespace: &str, zone_name: &str) -> String {
    let hash = meridian_dns::shortcode::shortcode(&format!("{zone_namespace}/{zone_name}"), 10);
    let readable: String = format!("dnssec-{zone_namespace}.{zone_name}")
        .chars()
        .take(253 - hash.len() - 1)
        .collect();
    format!("{}-{hash}", readable.trim_end_matches(['-', '.']))
}

/// Where earlier hubs kept a zone's keys: beside its ManagedZone, named after it.
pub fn legacy_keys_secret_name(zone_name: &str) -> String {
    format!("{zone_name}-dnssec")
}

/// Where a ZSK rollover is.
#[derive(Clone, PartialEq, Eq)]
pub enum Rollover {
    /// One ZSK, published and signing. `handled`: the last `spec.dnssec.zskRollover` done.
    Stable { handled: Option<String> },
    /// The next ZSK is published; the current one still signs.
    Prepublished {
        next: Vec<u8>,
        since: u64,
        handled: String,
    },
    /// The new ZSK signs; the previous one stays published until its signatures are gone
    /// from caches.
    Switched {
        previous: Vec<u8>,
        since: u64,
        handled: String,
    },
}

/// The phase and times only: the standby key stays out of logs.
impl std::fmt::Debug for Rollover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Rollover::Stable { handled } => write!(f, "Stable {{ handled: {handled:?} }}"),
            Rollover::Prepublished { since, handled, .. }
            | Rollover::Switched { since, handled, .. } => {
                write!(
                    f,
                    "{} {{ since: {since}, handled: {handled:?} }}",
                    self.phase()
                )
            }
        }
    }
}

impl Rollover {
    pub fn phase(&self) -> &'static str {
        match self {
            Rollover::Stable { .. } => "Stable",
            Rollover::Prepublished { .. } => "Prepublished",
            Rollover::Switched { .. } => "Switched",
        }
    }

    /// When the next step is due (Unix time), if one is under way.
    pub fn next_step_at(&self, step: u64) -> Option<u64> {
        match self {
            Rollover::Stable { .. } => None,
            Rollover::Prepublished { since, .. } | Rollover::Switched { since, .. } => {
                Some(since + step)
            }
        }
    }
}

/// A zone's keys as the Secret holds them.
#[derive(Clone, PartialEq, Eq)]
pub struct KeySet {
    pub algorithm: KeyAlgorithm,
    pub ksk: Vec<u8>,
    pub zsk: Vec<u8>,
    pub rollover: Rollover,
}

impl std::fmt::Debug for KeySet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeySet")
            .field("algorithm", &self.algorithm)
            .field("rollover", &self.rollover.phase())
            .finish_non_exhaustive()
    }
}

/// Why a zone's keys cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeySetError {
    #[error("Secret {secret}: {field} is missing or unreadable")]
    Field { secret: String, field: &'static str },
    #[error("Secret {secret}: {source}")]
    Key { secret: String, source: KeyError },
}

/// The algorithm a ManagedZone asks for (ECDSA P-256 by default).
pub fn requested_algorithm(zone: &ManagedZone) -> KeyAlgorithm {
    match zone.spec.dnssec.as_ref().and_then(|d| d.algorithm) {
        Some(DnssecAlgorithm::Ed25519) => KeyAlgorithm::Ed25519,
        _ => KeyAlgorithm::EcdsaP256Sha256,
    }
}

/// Whether a ManagedZone asks to be signed.
pub fn signing_requested(zone: &ManagedZone) -> bool {
    zone.spec.dnssec.as_ref().is_some_and(|d| d.enabled)
}

impl KeySet {
    /// A new key set: a KSK and a ZSK from `generate`.
    pub fn generate(
        algorithm: KeyAlgorithm,
        generate: impl Fn(KeyAlgorithm) -> Result<Vec<u8>, KeyError>,
    ) -> Result<Self, KeyError> {
        Ok(KeySet {
            algorithm,
            ksk: generate(algorithm)?,
            zsk: generate(algorithm)?,
            rollover: Rollover::Stable { handled: None },
        })
    }

    /// The key set in `secret`.
    pub fn from_secret(secret: &Secret) -> Result<Self, KeySetError> {
        let name = secret.name_any();
        let data = secret.data.clone().unwrap_or_default();
        let field = |field: &'static str| -> Result<Vec<u8>, KeySetError> {
            data.get(field)
                .map(|bytes| bytes.0.clone())
                .filter(|bytes| !bytes.is_empty())
                .ok_or(KeySetError::Field {
                    secret: name.clone(),
                    field,
                })
        };
        let text = |field: &'static str| -> Result<String, KeySetError> {
            String::from_utf8(field_or_empty(&data, field)).map_err(|_| KeySetError::Field {
                secret: name.clone(),
                field,
            })
        };
        let algorithm = KeyAlgorithm::parse(&text("algorithm")?).ok_or(KeySetError::Field {
            secret: name.clone(),
            field: "algorithm",
        })?;
        let since = || -> Result<u64, KeySetError> {
            text("since")?.parse().map_err(|_| KeySetError::Field {
                secret: name.clone(),
                field: "since",
            })
        };
        let handled = text("handled")?;
        let rollover = match text("rollover")?.as_str() {
            "" | "Stable" => Rollover::Stable {
                handled: (!handled.is_empty()).then_some(handled),
            },
            "Prepublished" => Rollover::Prepublished {
                next: field("standby")?,
                since: since()?,
                handled,
            },
            "Switched" => Rollover::Switched {
                previous: field("standby")?,
                since: since()?,
                handled,
            },
            _ => {
                return Err(KeySetError::Field {
                    secret: name,
                    field: "rollover",
                });
            }
        };
        Ok(KeySet {
            algorithm,
            ksk: field("ksk")?,
            zsk: field("zsk")?,
            rollover,
        })
    }

    /// The Secret's data for this key set.
    pub fn to_data(&self) -> BTreeMap<String, ByteString> {
        let mut data = BTreeMap::new();
        let mut put = |field: &str, bytes: Vec<u8>| {
            data.insert(field.to_string(), ByteString(bytes));
        };
        put("algorithm", self.algorithm.name().into());
        put("ksk", self.ksk.clone());
        put("zsk", self.zsk.clone());
        put("rollover", self.rollover.phase().into());
        match &self.rollover {
            Rollover::Stable { handled } => {
                put("handled", handled.clone().unwrap_or_default().into());
            }
            Rollover::Prepublished {
                next: standby,
                since,
                handled,
            }
            | Rollover::Switched {
                previous: standby,
                since,
                handled,
            } => {
                put("standby", standby.clone());
                put("since", since.to_string().into());
                put("handled", handled.clone().into());
            }
        }
        data
    }

    /// The keys the nameserver signs the zone at `apex` with, their DNSKEY set served with
    /// `dnskey_ttl` (see [`dnskey_ttl`]).
    pub fn zone_keys(
        &self,
        apex: &str,
        secret: &str,
        dnskey_ttl: u32,
    ) -> Result<Arc<ZoneKeys>, KeySetError> {
        let standby: Vec<&[u8]> = match &self.rollover {
            Rollover::Stable { .. } => Vec::new(),
            Rollover::Prepublished { next: standby, .. }
            | Rollover::Switched {
                previous: standby, ..
            } => vec![standby.as_slice()],
        };
        ZoneKeys::new(
            apex,
            self.algorithm,
            &self.ksk,
            &self.zsk,
            &standby,
            dnskey_ttl,
        )
        .map(Arc::new)
        .map_err(|source| KeySetError::Key {
            secret: secret.to_string(),
            source,
        })
    }
}

/// How a ManagedZone's embedded zone is served, as far as its keys go.
#[derive(Debug)]
pub enum ZoneSigning {
    Unsigned,
    Signed(Arc<ZoneKeys>),
    /// To be signed, but its keys cannot be had (yet, or here): not served at all.
    Unavailable(String),
}

/// Where a process serving embedded zones reads their keys from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySource {
    /// Each zone's key Secret, in the hub's namespace (a hub replica).
    HubSecrets { namespace: String },
    /// The copy the hub keeps in its own namespace for the agents serving DNS, which may read
    /// that Secret only (see [`copy_data`]): no KSK, a signature made with it instead.
    HubCopy { namespace: String },
}

/// How `zone` is to be served by a process whose Secret cache is `secrets` and which reads
/// keys from `source`. Without keys a signed zone is not served at all.
pub fn signing_from_cache(
    zone: &ManagedZone,
    secrets: &crate::runtime::caches::Cache<Secret>,
    source: &KeySource,
) -> ZoneSigning {
    if !signing_requested(zone) {
        return ZoneSigning::Unsigned;
    }
    let name = keys_secret_name(&zone.namespace().unwrap_or_default(), &zone.name_any());
    let ttl = dnskey_ttl(zone);
    let keys = match source {
        KeySource::HubSecrets { namespace } => {
            let Some(secret) = secrets.get(Some(namespace), &name) else {
                return ZoneSigning::Unavailable(format!("its keys (Secret {name}) are not here"));
            };
            KeySet::from_secret(&secret)
                .and_then(|keys| keys.zone_keys(&zone.spec.domain_name, &name, ttl))
        }
        KeySource::HubCopy { namespace } => {
            let copy = secrets.get(Some(namespace), meridian_api::names::DNSSEC_KEYS_SECRET);
            let Some(copied) = copy.as_deref().and_then(|copy| copied_keys(copy, zone)) else {
                return ZoneSigning::Unavailable(format!(
                    "its keys are not in the copy {}",
                    meridian_api::names::DNSSEC_KEYS_SECRET
                ));
            };
            copied.zone_keys(&zone.spec.domain_name, ttl, unix_now())
        }
    };
    match keys {
        Ok(keys) => ZoneSigning::Signed(keys),
        Err(error) => ZoneSigning::Unavailable(error.to_string()),
    }
}

/// Unix time now.
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs())
}

/// The key of a zone's keys in the copies: `<namespace>.<ManagedZone name>` (a namespace has no
/// dots, so the split is unambiguous).
pub fn copy_key(namespace: &str, zone_name: &str) -> String {
    format!("{namespace}.{zone_name}")
}

/// A zone's keys as the agents' copy holds them: everything a server needs but the KSK.
/// The hub signs the DNSKEY set with the KSK for them and signs it again before the signature
/// is [`SIGNATURE_REFRESH`] old, so the KSK never leaves the hub's namespace.
#[derive(Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CopiedKeys {
    pub algorithm: String,
    /// The KSK's public key (its DNSKEY's public key field).
    pub ksk_public: ByteString,
    /// The ZSK that signs, PKCS#8.
    pub zsk: ByteString,
    /// The ZSKs published beside it during a rollover, PKCS#8.
    #[serde(default)]
    pub standby: Vec<ByteString>,
    /// The RRSIG record over the DNSKEY set these keys publish, wire form.
    pub dnskey_signature: ByteString,
    /// When the hub made the signature (Unix time) and for which DNSKEY TTL: the hub's note of
    /// when to make it again; a server checks the signature itself.
    pub signed_at: u64,
    pub dnskey_ttl: u32,
}

/// Tags and times only: the ZSK stays out of logs.
impl std::fmt::Debug for CopiedKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CopiedKeys")
            .field("algorithm", &self.algorithm)
            .field("signed_at", &self.signed_at)
            .field("dnskey_ttl", &self.dnskey_ttl)
            .finish_non_exhaustive()
    }
}

impl CopiedKeys {
    /// What the copy holds of `keys` (a zone's key set, KSK included) for the zone at `apex`
    /// served with `dnskey_ttl`, at Unix time `now`: `previous`'s signature when it was made
    /// over the same keys for the same TTL less than [`SIGNATURE_REFRESH`] ago (so the copy
    /// does not change at every look), else a new one.
    pub fn of(
        keys: &KeySet,
        apex: &str,
        secret: &str,
        dnskey_ttl: u32,
        previous: Option<&CopiedKeys>,
        now: u64,
    ) -> Result<Self, KeySetError> {
        let zone_keys = keys.zone_keys(apex, secret, dnskey_ttl)?;
        let standby = match &keys.rollover {
            Rollover::Stable { .. } => Vec::new(),
            Rollover::Prepublished { next: standby, .. }
            | Rollover::Switched {
                previous: standby, ..
            } => vec![ByteString(standby.clone())],
        };
        let mut copied = CopiedKeys {
            algorithm: keys.algorithm.name().to_string(),
            ksk_public: ByteString(zone_keys.ksk_public()),
            zsk: ByteString(keys.zsk.clone()),
            standby,
            dnskey_signature: ByteString(Vec::new()),
            signed_at: now,
            dnskey_ttl,
        };
        // Kept only while it is fresh, for the same keys, and still verifies for this zone and
        // TTL (a zone made again under the same name with another domain keeps its key Secret).
        if let Some(previous) = previous.filter(|previous| {
            previous.signed_at <= now
                && now - previous.signed_at < u64::from(SIGNATURE_REFRESH)
                && CopiedKeys {
                    dnskey_signature: ByteString(Vec::new()),
                    signed_at: now,
                    ..(*previous).clone()
                } == copied
                && previous.zone_keys(apex, dnskey_ttl, now).is_ok()
        }) {
            return Ok(previous.clone());
        }
        copied.dnskey_signature =
            ByteString(
                zone_keys
                    .dnskey_signature(now)
                    .ok_or_else(|| KeySetError::Field {
                        secret: secret.to_string(),
                        field: "ksk",
                    })?,
            );
        Ok(copied)
    }

    /// The keys a server of the zone at `apex` signs with: the ZSK, and the hub's signature
    /// over the DNSKEY set, checked against the KSK's public key and valid at Unix time `now`.
    pub fn zone_keys(
        &self,
        apex: &str,
        dnskey_ttl: u32,
        now: u64,
    ) -> Result<Arc<ZoneKeys>, KeySetError> {
        let copy = meridian_api::names::DNSSEC_KEYS_SECRET.to_string();
        let algorithm = KeyAlgorithm::parse(&self.algorithm).ok_or(KeySetError::Field {
            secret: copy.clone(),
            field: "algorithm",
        })?;
        let standby: Vec<&[u8]> = self.standby.iter().map(|key| key.0.as_slice()).collect();
        ZoneKeys::presigned(
            apex,
            algorithm,
            &self.ksk_public.0,
            &self.zsk.0,
            &standby,
            dnskey_ttl,
            &self.dnskey_signature.0,
            now,
        )
        .map(Arc::new)
        .map_err(|source| KeySetError::Key {
            secret: copy,
            source,
        })
    }
}

/// The data of the key copy for the agents (pure): for each signed zone (its ManagedZone and
/// its key Secret), [`CopiedKeys`] as JSON under [`copy_key`], at Unix time `now`. `previous`
/// is the copy as it is, whose signatures are kept while fresh. A zone whose keys cannot be
/// read is left out (its servers keep signing with what they had).
pub fn copy_data<'a>(
    keys: impl IntoIterator<Item = (&'a ManagedZone, &'a Secret)>,
    previous: Option<&Secret>,
    now: u64,
) -> BTreeMap<String, ByteString> {
    keys.into_iter()
        .filter_map(|(zone, secret)| {
            let key = copy_key(&zone.namespace().unwrap_or_default(), &zone.name_any());
            let before = previous.and_then(|copy| copied_entry(copy, &key));
            let copied = KeySet::from_secret(secret)
                .and_then(|keys| {
                    CopiedKeys::of(
                        &keys,
                        &zone.spec.domain_name,
                        &secret.name_any(),
                        dnskey_ttl(zone),
                        before.as_ref(),
                        now,
                    )
                })
                .inspect_err(|error| {
                    tracing::warn!(zone = %key, %error, "not copying keys that cannot be read");
                })
                .ok()?;
            let json = serde_json::to_vec(&copied).expect("copied keys serialize");
            Some((key, ByteString(json)))
        })
        .collect()
}

/// The zone's keys as the copy holds them, if it does.
fn copied_keys(copy: &Secret, zone: &ManagedZone) -> Option<CopiedKeys> {
    copied_entry(
        copy,
        &copy_key(&zone.namespace().unwrap_or_default(), &zone.name_any()),
    )
}

fn copied_entry(copy: &Secret, key: &str) -> Option<CopiedKeys> {
    serde_json::from_slice(&copy.data.as_ref()?.get(key)?.0).ok()
}

/// The zone's key set, leader only: made on first use (the Secret created in the hub's
/// namespace `hub_namespace`, or taken over from where an earlier hub kept it, `legacy`), and
/// one rollover step on when one is due (the Secret replaced, at the version read, so two
/// writers cannot both win). `cached` is the Secret as the cache has it; the API server is
/// asked when the cache has none, which a Secret created moments ago may not be in yet.
pub async fn ensure_keys(
    client: &kube::Client,
    zone: &ManagedZone,
    hub_namespace: &str,
    cached: Option<Arc<Secret>>,
    legacy: Option<Arc<Secret>>,
    now: u64,
) -> Result<KeySet, crate::Error> {
    use kube::api::{Api, PostParams};
    let name = keys_secret_name(&zone.namespace().unwrap_or_default(), &zone.name_any());
    let api: Api<Secret> = Api::namespaced(client.clone(), hub_namespace);
    let existing = match cached {
        Some(secret) => Some(Secret::clone(&secret)),
        None => api.get_opt(&name).await?,
    };
    let invalid = |error: String| crate::Error::Waiting(format!("DNSSEC keys: {error}"));
    let Some(secret) = existing else {
        // Keys an earlier hub kept beside the zone (the parent may have their DS), or new ones.
        let (keys, from) = match legacy.filter(|s| s.type_.as_deref() == Some(KEYS_SECRET_TYPE)) {
            Some(legacy) => (
                KeySet::from_secret(&legacy).map_err(|e| invalid(e.to_string()))?,
                "took over the zone's DNSSEC keys from beside it",
            ),
            None => {
                if let Some(ds) = published_ds(zone) {
                    // New keys would not match the DS the parent may have: every validator
                    // would reject the zone. Keys put back (from a backup) are taken up as
                    // they come.
                    return Err(invalid(format!(
                        "Secret {name} is gone, and status names the DS {ds}; restore the Secret, or turn \
                         dnssec off and on again for new keys (then replace the DS in the parent)"
                    )));
                }
                let keys = KeySet::generate(
                    requested_algorithm(zone),
                    meridian_nameserver::dnssec::generate_key,
                )
                .map_err(|e| invalid(e.to_string()))?;
                (keys, "made the zone's DNSSEC keys")
            }
        };
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(hub_namespace.to_string()),
                labels: Some(BTreeMap::from([(
                    "app.kubernetes.io/managed-by".to_string(),
                    "meridian".to_string(),
                )])),
                annotations: Some(BTreeMap::from([(
                    ZONE_ANNOTATION.to_string(),
                    format!(
                        "{}/{}",
                        zone.namespace().unwrap_or_default(),
                        zone.name_any()
                    ),
                )])),
                ..Default::default()
            },
            type_: Some(KEYS_SECRET_TYPE.to_string()),
            data: Some(keys.to_data()),
            ..Default::default()
        };
        api.create(&PostParams::default(), &secret).await?;
        tracing::info!(zone = %zone.spec.domain_name, secret = %name, algorithm = %keys.algorithm, "{from}");
        return Ok(keys);
    };
    let keys = KeySet::from_secret(&secret).map_err(|e| invalid(e.to_string()))?;
    let dnssec = zone.spec.dnssec.clone().unwrap_or_default();
    let step = rollover_step(zone);
    let advanced = advance(
        &keys,
        dnssec.zsk_rollover.as_deref(),
        step,
        now,
        meridian_nameserver::dnssec::generate_key,
    )
    .map_err(|e| invalid(e.to_string()))?;
    let Some(advanced) = advanced else {
        return Ok(keys);
    };
    let mut replacement = secret;
    replacement.data = Some(advanced.to_data());
    api.replace(&name, &PostParams::default(), &replacement)
        .await?;
    tracing::info!(zone = %zone.spec.domain_name, from = keys.rollover.phase(), to = advanced.rollover.phase(), "ZSK rollover step");
    Ok(advanced)
}

/// The DS the zone's status names: its keys were made, and the parent may have the DS.
fn published_ds(zone: &ManagedZone) -> Option<&str> {
    zone.status.as_ref()?.dnssec.as_ref()?.ds.as_deref()
}

/// The TTL of a zone's DNSKEY set: half its rollover step, at most an hour. A resolver then
/// holds a DNSKEY set for at most half a step, so after a pre-published key has been out for a
/// step every resolver knows it before it signs, however short the step is set.
pub fn dnskey_ttl(zone: &ManagedZone) -> u32 {
    (rollover_step(zone) / 2).clamp(1, u64::from(DEFAULT_DNSKEY_TTL)) as u32
}

/// `spec.dnssec.rolloverStep` in seconds.
pub fn rollover_step(zone: &ManagedZone) -> u64 {
    zone.spec
        .dnssec
        .as_ref()
        .and_then(|d| d.rollover_step.as_deref())
        .and_then(meridian_api::duration::parse_duration)
        .unwrap_or(meridian_api::kuadrant::DEFAULT_ROLLOVER_STEP)
        .as_secs()
        .max(1)
}

fn field_or_empty(data: &BTreeMap<String, ByteString>, field: &str) -> Vec<u8> {
    data.get(field).map(|b| b.0.clone()).unwrap_or_default()
}

/// The key set one rollover step on at Unix time `now`, if a step is due: a new
/// `requested` value (`spec.dnssec.zskRollover`) starts a rollover from `Stable`; `step`
/// seconds after each step comes the next. A request made while a rollover runs waits for it
/// to finish.
pub fn advance(
    keys: &KeySet,
    requested: Option<&str>,
    step: u64,
    now: u64,
    generate: impl FnOnce(KeyAlgorithm) -> Result<Vec<u8>, KeyError>,
) -> Result<Option<KeySet>, KeyError> {
    let mut next = keys.clone();
    next.rollover = match &keys.rollover {
        Rollover::Stable { handled } => match requested {
            Some(request) if handled.as_deref() != Some(request) => Rollover::Prepublished {
                next: generate(keys.algorithm)?,
                since: now,
                handled: request.to_string(),
            },
            _ => return Ok(None),
        },
        Rollover::Prepublished {
            next: new_zsk,
            since,
            handled,
        } if now >= since + step => {
            next.zsk = new_zsk.clone();
            Rollover::Switched {
                previous: keys.zsk.clone(),
                since: now,
                handled: handled.clone(),
            }
        }
        Rollover::Switched { since, handled, .. } if now >= since + step => Rollover::Stable {
            handled: Some(handled.clone()),
        },
        _ => return Ok(None),
    };
    Ok(Some(next))
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_nameserver::dnssec::SIGNATURE_VALIDITY;

    /// Keys named by a counter, so the table can say which is which (`advance` never looks
    /// inside a key).
    fn counter() -> impl FnMut(KeyAlgorithm) -> Result<Vec<u8>, KeyError> {
        let mut made = 0u8;
        move |_| {
            made += 1;
            Ok(vec![made])
        }
    }

    #[test]
    fn a_rollover_publishes_then_switches_then_withdraws_each_a_step_apart() {
        let mut keys = KeySet {
            algorithm: KeyAlgorithm::EcdsaP256Sha256,
            ksk: vec![100],
            zsk: vec![50],
            rollover: Rollover::Stable { handled: None },
        };
        let step = 7200;
        let mut generate = counter();
        // (seconds, spec.dnssec.zskRollover, phase, signing ZSK, standby ZSK)
        type Moment<'a> = (u64, Option<&'a str>, &'a str, u8, Option<u8>);
        let timeline: &[Moment] = &[
            (0, None, "Stable", 50, None),
            (10, Some("r1"), "Prepublished", 50, Some(1)),
            (10 + step - 1, Some("r1"), "Prepublished", 50, Some(1)),
            (10 + step, Some("r1"), "Switched", 1, Some(50)),
            // A new request during a rollover waits for it to end.
            (10 + step + 5, Some("r2"), "Switched", 1, Some(50)),
            (10 + 2 * step - 1, Some("r2"), "Switched", 1, Some(50)),
            (10 + 2 * step, Some("r2"), "Stable", 1, None),
            (10 + 2 * step + 1, Some("r2"), "Prepublished", 1, Some(2)),
        ];
        for (index, &(now, request, phase, zsk, standby)) in timeline.iter().enumerate() {
            if let Some(next) = advance(&keys, request, step, now, &mut generate).unwrap() {
                keys = next;
            }
            let standby_key = match &keys.rollover {
                Rollover::Stable { .. } => None,
                Rollover::Prepublished { next, .. } => Some(next[0]),
                Rollover::Switched { previous, .. } => Some(previous[0]),
            };
            let what = format!("step {index} at {now}");
            assert_eq!(keys.rollover.phase(), phase, "{what}");
            assert_eq!(keys.zsk, [zsk], "{what}");
            assert_eq!(standby_key, standby, "{what}");
            assert_eq!(keys.ksk, [100], "{what}: the KSK never changes");
        }
        // A request already handled starts nothing.
        let done = KeySet {
            rollover: Rollover::Stable {
                handled: Some("r2".into()),
            },
            ..keys
        };
        assert_eq!(
            advance(&done, Some("r2"), step, 1 << 40, counter()),
            Ok(None)
        );
    }

    #[test]
    fn a_key_set_survives_its_secret_and_never_prints_a_key() {
        let algorithm = KeyAlgorithm::Ed25519;
        let mut keys =
            KeySet::generate(algorithm, meridian_nameserver::dnssec::generate_key).unwrap();
        for rollover in [
            Rollover::Stable { handled: None },
            Rollover::Prepublished {
                next: meridian_nameserver::dnssec::generate_key(algorithm).unwrap(),
                since: 42,
                handled: "now".into(),
            },
            Rollover::Switched {
                previous: meridian_nameserver::dnssec::generate_key(algorithm).unwrap(),
                since: 43,
                handled: "now".into(),
            },
        ] {
            keys.rollover = rollover;
            let secret = Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some("zone-dnssec".into()),
                    ..Default::default()
                },
                data: Some(keys.to_data()),
                ..Default::default()
            };
            assert_eq!(KeySet::from_secret(&secret), Ok(keys.clone()));
            let zone_keys = keys.zone_keys("example.com", "zone-dnssec", 3600).unwrap();
            let published = if matches!(keys.rollover, Rollover::Stable { .. }) {
                2
            } else {
                3
            };
            assert_eq!(zone_keys.published_tags().len(), published);
            let shown = format!("{keys:?} {zone_keys:?}");
            assert!(!shown.contains(&format!("{:?}", keys.ksk)), "{shown}");
        }
        let mut broken = keys.to_data();
        broken.insert("zsk".into(), ByteString(b"not a key".to_vec()));
        let secret = Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("zone-dnssec".into()),
                ..Default::default()
            },
            data: Some(broken),
            ..Default::default()
        };
        let error = KeySet::from_secret(&secret)
            .unwrap()
            .zone_keys("example.com", "zone-dnssec", 3600)
            .unwrap_err()
            .to_string();
        assert!(error.contains("zone-signing key"), "{error}");
        assert!(!error.contains("not a key"), "{error}");
    }

    fn signed_zone(namespace: &str, name: &str, rollover_step: &str) -> ManagedZone {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
            "metadata": { "name": name, "namespace": namespace },
            "spec": {
                "domainName": "shop.example.com",
                "dnssec": { "enabled": true, "rolloverStep": rollover_step },
            },
        }))
        .unwrap()
    }

    fn key_secret(keys: &KeySet) -> Secret {
        Secret {
            metadata: kube::api::ObjectMeta {
                name: Some(keys_secret_name("team", "shop.example")),
                namespace: Some("meridian-system".into()),
                ..Default::default()
            },
            type_: Some(KEYS_SECRET_TYPE.into()),
            data: Some(keys.to_data()),
            ..Default::default()
        }
    }

    #[test]
    fn the_copy_for_agents_holds_each_signed_zones_keys_but_never_the_ksk() {
        let algorithm = KeyAlgorithm::EcdsaP256Sha256;
        let keys = KeySet::generate(algorithm, meridian_nameserver::dnssec::generate_key).unwrap();
        let secret = key_secret(&keys);
        let zone = signed_zone("team", "shop.example", "2h");
        let now = 1_800_000_000;
        let data = copy_data([(&zone, &secret)], None, now);
        assert_eq!(data.keys().collect::<Vec<_>>(), ["team.shop.example"]);
        // Not the KSK in any form a field could hold it.
        let text = String::from_utf8(data["team.shop.example"].0.clone()).unwrap();
        let fields: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).unwrap();
        assert!(!fields.contains_key("ksk"), "{:?}", fields.keys());
        let ksk_b64 = serde_json::to_string(&ByteString(keys.ksk.clone())).unwrap();
        assert!(
            !text.contains(ksk_b64.trim_matches('"')),
            "the KSK is in the copy"
        );
        let copy = Secret {
            data: Some(data),
            ..Default::default()
        };
        let copied = copied_keys(&copy, &zone).expect("copied");
        assert!(copied_keys(&copy, &signed_zone("other", "shop.example", "2h")).is_none());
        assert!(copied_keys(&copy, &signed_zone("team", "shop", "2h")).is_none());

        // What the agent serves: the same DNSKEY set as the hub, the hub's signature over it,
        // and its own ZSK signatures.
        let ttl = dnskey_ttl(&zone);
        let at_hub = keys
            .zone_keys("shop.example.com", "keys", ttl)
            .expect("the hub's keys");
        let at_agent = copied
            .zone_keys("shop.example.com", ttl, now)
            .expect("the agent's keys");
        assert!(at_hub.holds_ksk() && !at_agent.holds_ksk());
        assert!(at_agent.publishes_same(&at_hub));
        assert_eq!(at_agent.ds(), at_hub.ds());
        assert_eq!(at_agent.dnskey_signed_at(), Some(now));
        // Another TTL than the one signed for, or another zone: refused, not served.
        for (apex, ttl) in [("shop.example.com", ttl + 1), ("other.example.com", ttl)] {
            let error = copied.zone_keys(apex, ttl, now).unwrap_err().to_string();
            assert!(error.contains("signature"), "{apex} {ttl}: {error}");
        }
        // Past its validity (a hub silent for two weeks), or before it: refused, not served.
        for when in [now + u64::from(SIGNATURE_VALIDITY), now - 2 * 3600] {
            let error = copied
                .zone_keys("shop.example.com", ttl, when)
                .unwrap_err()
                .to_string();
            assert!(error.contains("not at"), "{when}: {error}");
        }
    }

    #[test]
    fn the_copys_signature_is_kept_while_fresh_and_made_again_for_new_keys_or_when_due() {
        let algorithm = KeyAlgorithm::EcdsaP256Sha256;
        let keys = KeySet::generate(algorithm, meridian_nameserver::dnssec::generate_key).unwrap();
        let zone = signed_zone("team", "shop.example", "2h");
        let ttl = dnskey_ttl(&zone);
        let now = 1_800_000_000;
        let first = CopiedKeys::of(&keys, "shop.example.com", "keys", ttl, None, now).unwrap();
        let at = |keys: &KeySet, ttl: u32, when: u64| {
            CopiedKeys::of(keys, "shop.example.com", "keys", ttl, Some(&first), when).unwrap()
        };
        let refresh = u64::from(SIGNATURE_REFRESH);
        assert_eq!(at(&keys, ttl, now + refresh - 1), first, "fresh: kept");
        let due = at(&keys, ttl, now + refresh);
        assert_ne!(
            due.dnskey_signature, first.dnskey_signature,
            "due: made again"
        );
        assert_eq!(due.signed_at, now + refresh);
        let other_ttl = at(&keys, ttl / 2, now + 1);
        assert_ne!(other_ttl.dnskey_signature, first.dnskey_signature);
        other_ttl
            .zone_keys("shop.example.com", ttl / 2, now + 1)
            .expect("signed for the new TTL");
        // A rollover step publishes another key: the DNSKEY set changed, so did its signature.
        let mut rolling = keys.clone();
        rolling.rollover = Rollover::Prepublished {
            next: meridian_nameserver::dnssec::generate_key(algorithm).unwrap(),
            since: now,
            handled: "1".into(),
        };
        let prepublished = at(&rolling, ttl, now + 1);
        assert_eq!(prepublished.standby.len(), 1);
        prepublished
            .zone_keys("shop.example.com", ttl, now + 1)
            .expect("signed over the three keys");
        // A signature kept from before the rollover would not verify over the new set.
        let stale = CopiedKeys {
            standby: prepublished.standby.clone(),
            ..first.clone()
        };
        assert!(stale.zone_keys("shop.example.com", ttl, now + 1).is_err());
        // A zone made again for another domain under the same name and keys: signed again.
        let moved = CopiedKeys::of(
            &keys,
            "other.example.com",
            "keys",
            ttl,
            Some(&first),
            now + 1,
        )
        .unwrap();
        moved
            .zone_keys("other.example.com", ttl, now + 1)
            .expect("signed for the new apex");
        // A clock that went back does not keep a signature from the future.
        assert_ne!(at(&keys, ttl, now - 1).signed_at, first.signed_at);
    }

    #[test]
    fn a_copy_whose_signature_was_made_with_another_key_is_refused() {
        // An agent fed a DNSKEY set signed with a key the DS does not name (what forging the
        // copy, or mixing two zones' copies, would produce) serves nothing signed with it.
        let algorithm = KeyAlgorithm::EcdsaP256Sha256;
        let generate = meridian_nameserver::dnssec::generate_key;
        let keys = KeySet::generate(algorithm, generate).unwrap();
        let other = KeySet::generate(algorithm, generate).unwrap();
        let now = 1_800_000_000;
        let honest = CopiedKeys::of(&keys, "shop.example.com", "keys", 3600, None, now).unwrap();
        let foreign = CopiedKeys::of(&other, "shop.example.com", "keys", 3600, None, now).unwrap();
        let forged = CopiedKeys {
            dnskey_signature: foreign.dnskey_signature.clone(),
            ..honest.clone()
        };
        let error = forged
            .zone_keys("shop.example.com", 3600, now)
            .unwrap_err()
            .to_string();
        assert!(error.contains("DNSKEY set's signature"), "{error}");
        let garbage = CopiedKeys {
            dnskey_signature: ByteString(vec![0; 40]),
            ..honest
        };
        assert!(garbage.zone_keys("shop.example.com", 3600, now).is_err());
    }

    #[test]
    fn each_zone_has_its_own_key_secret_name_in_the_hub_namespace() {
        let name = keys_secret_name("team", "shop.example");
        assert!(name.starts_with("dnssec-team.shop.example-"), "{name}");
        // The split the old name scheme allowed: `a-b` in `c` and `b` in `a-c` and so on; and
        // the namespace/name boundary must count.
        let names = [
            keys_secret_name("team", "shop"),
            keys_secret_name("team-shop", "x"),
            keys_secret_name("team", "shop-x"),
            keys_secret_name("other", "shop"),
        ];
        let distinct: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(distinct.len(), names.len(), "{names:?}");
        // The longest a ManagedZone's name and a namespace can be still makes a valid name.
        let long = keys_secret_name(&"n".repeat(63), &"z".repeat(253));
        assert!(long.len() <= 253, "{}", long.len());
        assert_ne!(
            long,
            keys_secret_name(&"n".repeat(63), &format!("{}y", "z".repeat(252)))
        );
        assert_eq!(legacy_keys_secret_name("shop"), "shop-dnssec");
    }
}
