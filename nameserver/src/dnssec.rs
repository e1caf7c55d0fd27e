//! DNSSEC for the embedded nameserver: online signing with keys every server of a zone shares.
//!
//! A signed zone has a key-signing key (KSK, flags 257: the parent's DS names it, and it signs
//! only the DNSKEY set) and a zone-signing key (ZSK, flags 256: it signs everything else). The
//! ZSK can be rolled without touching the parent: a new ZSK is published beside the active one
//! (a *standby* key), then signs, then the old one is withdrawn (see `docs/nameserver.md`).
//!
//! Answers are chosen per query (GEO, weight), so signatures are made online. The variants a
//! query can get are few and known when the zone is published, so their signatures are made
//! then and kept with the prepared records (`fast::Prepared`); only denials, wildcard answers
//! and ANY are signed per query. Denials are compact (RFC 9824): one NSEC at the query name
//! whose next name is its immediate successor, so nothing can be walked.
//!
//! The KSK signs nothing but the DNSKEY set, so a server may be given that one signature
//! instead of the key ([`ZoneKeys::presigned`]): the hub keeps the KSK, signs the DNSKEY set
//! for the agents that serve DNS, and signs it again before the signature is half its
//! validity old. A stolen agent can then forge answers only until the ZSK rolls, and never
//! the DNSKEY set a validator trusts the zone's keys through.
//!
//! The crypto is ring's, through hickory-proto; nothing here signs or hashes by itself.

use std::fmt;

use hickory_proto::dnssec::crypto::{EcdsaSigningKey, Ed25519SigningKey};
use hickory_proto::dnssec::rdata::{CDNSKEY, CDS, DNSKEY, DNSSECRData, DS, NSEC, RRSIG, SigInput};
use hickory_proto::dnssec::{
    Algorithm, DigestType, PublicKey, PublicKeyBuf, SigningKey, TBS, Verifier,
};
use hickory_proto::rr::{DNSClass, Name, RData, Record, RecordType, SerialNumber};
use hickory_proto::serialize::binary::{BinDecodable, BinEncodable};
use rustls_pki_types::PrivatePkcs8KeyDer;

/// How long a signature is valid: long enough that a zone published once and left alone
/// still validates for a week after its signatures are due to be made again.
pub const SIGNATURE_VALIDITY: u32 = 14 * 24 * 3600;
/// Signatures are made again once they are this old (half their validity).
pub const SIGNATURE_REFRESH: u32 = 7 * 24 * 3600;
/// Signatures start this long before they are made, for validators whose clocks are behind.
const INCEPTION_SKEW: u32 = 3600;
/// The TTL of DNSKEY, CDS and CDNSKEY unless the zone says otherwise.
pub const DEFAULT_DNSKEY_TTL: u32 = 3600;
/// RFC 9824's NXNAME meta type: in a compact denial's type bitmap, "this name does not exist".
const NXNAME: u16 = 128;

/// A signing algorithm the nameserver offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyAlgorithm {
    /// ECDSA P-256 with SHA-256, algorithm 13: the default, validated everywhere.
    EcdsaP256Sha256,
    /// Ed25519, algorithm 15: smaller and faster, validated by current resolvers.
    Ed25519,
}

impl KeyAlgorithm {
    /// The name ManagedZones and key Secrets use.
    pub fn name(self) -> &'static str {
        match self {
            KeyAlgorithm::EcdsaP256Sha256 => "ECDSAP256SHA256",
            KeyAlgorithm::Ed25519 => "ED25519",
        }
    }

    /// The algorithm named `name` (as [`KeyAlgorithm::name`], any case).
    pub fn parse(name: &str) -> Option<Self> {
        [KeyAlgorithm::EcdsaP256Sha256, KeyAlgorithm::Ed25519]
            .into_iter()
            .find(|algorithm| algorithm.name().eq_ignore_ascii_case(name))
    }

    /// The IANA number (13 or 15).
    pub fn number(self) -> u8 {
        u8::from(self.wire())
    }

    fn wire(self) -> Algorithm {
        match self {
            KeyAlgorithm::EcdsaP256Sha256 => Algorithm::ECDSAP256SHA256,
            KeyAlgorithm::Ed25519 => Algorithm::ED25519,
        }
    }
}

impl fmt::Display for KeyAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why keys could not be made or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// The bytes are not a PKCS#8 private key of the zone's algorithm (the key itself is never
    /// part of the message).
    #[error("the {role} is not a PKCS#8 {algorithm} private key")]
    Unreadable {
        role: &'static str,
        algorithm: KeyAlgorithm,
    },
    #[error("{0:?} is not a domain name")]
    BadApex(String),
    #[error("generating a {0} key failed")]
    Generate(KeyAlgorithm),
    /// A DNSKEY signature handed to a server without the KSK does not sign this zone's DNSKEY
    /// set with its KSK (made for other keys, another TTL, another zone, or not at all).
    #[error("the DNSKEY set's signature does not verify: {0}")]
    DnskeySignature(String),
}

/// A new private key of `algorithm`, PKCS#8 DER (what key Secrets hold).
pub fn generate_key(algorithm: KeyAlgorithm) -> Result<Vec<u8>, KeyError> {
    let key = match algorithm {
        KeyAlgorithm::EcdsaP256Sha256 => EcdsaSigningKey::generate_pkcs8(algorithm.wire()),
        KeyAlgorithm::Ed25519 => Ed25519SigningKey::generate_pkcs8(),
    };
    key.map(|der| der.secret_pkcs8_der().to_vec())
        .map_err(|_| KeyError::Generate(algorithm))
}

fn signing_key(
    algorithm: KeyAlgorithm,
    pkcs8: &[u8],
    role: &'static str,
) -> Result<Box<dyn SigningKey>, KeyError> {
    let der = PrivatePkcs8KeyDer::from(pkcs8);
    let unreadable = |_| KeyError::Unreadable { role, algorithm };
    Ok(match algorithm {
        KeyAlgorithm::EcdsaP256Sha256 => {
            Box::new(EcdsaSigningKey::from_pkcs8(&der, algorithm.wire()).map_err(unreadable)?)
        }
        KeyAlgorithm::Ed25519 => Box::new(Ed25519SigningKey::from_pkcs8(&der).map_err(unreadable)?),
    })
}

/// One key as the zone publishes it.
struct PublishedKey {
    dnskey: DNSKEY,
    tag: u16,
}

impl PublishedKey {
    fn new(
        key: &dyn SigningKey,
        flags: u16,
        role: &'static str,
        algorithm: KeyAlgorithm,
    ) -> Result<Self, KeyError> {
        let unreadable = KeyError::Unreadable { role, algorithm };
        let public = key.to_public_key().map_err(|_| unreadable.clone())?;
        let dnskey = DNSKEY::with_flags(flags, public);
        let tag = dnskey.calculate_key_tag().map_err(|_| unreadable)?;
        Ok(PublishedKey { dnskey, tag })
    }
}

/// DNSKEY flags: a zone key (256), and the secure entry point bit (1) for the KSK.
const ZSK_FLAGS: u16 = 256;
const KSK_FLAGS: u16 = 257;

/// What signs a zone's DNSKEY set.
enum DnskeySigner {
    /// The KSK itself (the hub).
    Key(Box<dyn SigningKey>),
    /// A signature the KSK's holder made over exactly this DNSKEY set (an agent), verified
    /// when the keys were loaded.
    Presigned(Box<Record>),
}

/// The keys a signed zone is served with. Equal when they publish and sign the same.
pub struct ZoneKeys {
    /// The zone's apex: the signer of every signature.
    apex: Name,
    algorithm: KeyAlgorithm,
    ksk: DnskeySigner,
    ksk_published: PublishedKey,
    zsk: Box<dyn SigningKey>,
    zsk_published: PublishedKey,
    /// ZSKs published without signing: the next one before a rollover switches to it, the
    /// previous one until every signature it made has expired from caches.
    standby: Vec<PublishedKey>,
    dnskey_ttl: u32,
}

impl ZoneKeys {
    /// The keys of the zone at `apex` from their PKCS#8 private halves: the KSK, the ZSK that
    /// signs, and ZSKs that are only published.
    pub fn new(
        apex: &str,
        algorithm: KeyAlgorithm,
        ksk: &[u8],
        zsk: &[u8],
        standby: &[&[u8]],
        dnskey_ttl: u32,
    ) -> Result<Self, KeyError> {
        let ksk = signing_key(algorithm, ksk, "key-signing key")?;
        let ksk_published =
            PublishedKey::new(ksk.as_ref(), KSK_FLAGS, "key-signing key", algorithm)?;
        Self::with_dnskey_signer(
            apex,
            algorithm,
            (DnskeySigner::Key(ksk), ksk_published),
            zsk,
            standby,
            dnskey_ttl,
        )
    }

    /// The keys of a zone served without its KSK: the KSK's public key (a DNSKEY's public key
    /// field), the ZSK that signs and the standby ZSKs (PKCS#8), and `dnskey_signature`, the
    /// RRSIG record (wire form, [`ZoneKeys::dnskey_signature`]) the KSK's holder made over the
    /// DNSKEY set these keys publish with `dnskey_ttl`. A signature over any other set, by any
    /// other key or algorithm, or not valid at Unix time `now`, is refused here rather than
    /// served to validators that would reject it.
    #[allow(clippy::too_many_arguments)]
    pub fn presigned(
        apex: &str,
        algorithm: KeyAlgorithm,
        ksk_public: &[u8],
        zsk: &[u8],
        standby: &[&[u8]],
        dnskey_ttl: u32,
        dnskey_signature: &[u8],
        now: u64,
    ) -> Result<Self, KeyError> {
        let bad = |why: &str| KeyError::DnskeySignature(why.to_string());
        let dnskey = DNSKEY::with_flags(
            KSK_FLAGS,
            PublicKeyBuf::new(ksk_public.to_vec(), algorithm.wire()),
        );
        let tag = dnskey
            .calculate_key_tag()
            .map_err(|_| bad("the key-signing key's public key is unreadable"))?;
        let signature = Record::from_bytes(dnskey_signature).map_err(|_| bad("not a record"))?;
        let keys = Self::with_dnskey_signer(
            apex,
            algorithm,
            (
                DnskeySigner::Presigned(Box::new(signature.clone())),
                PublishedKey { dnskey, tag },
            ),
            zsk,
            standby,
            dnskey_ttl,
        )?;
        let RData::DNSSEC(DNSSECRData::RRSIG(rrsig)) = &signature.data else {
            return Err(bad("not an RRSIG"));
        };
        let input = rrsig.input();
        let dnskeys = keys.apex_records(RecordType::DNSKEY);
        if input.type_covered != RecordType::DNSKEY
            || input.algorithm != algorithm.wire()
            || input.key_tag != tag
            || input.signer_name != keys.apex
            || signature.name != keys.apex
            || input.original_ttl != dnskey_ttl
        {
            return Err(bad("it covers another set"));
        }
        // Valid until 2106, so Unix time fits the 32-bit fields without serial arithmetic.
        let (inception, expiration) = (
            u64::from(input.sig_inception.get()),
            u64::from(input.sig_expiration.get()),
        );
        if now < inception || now >= expiration {
            return Err(bad(&format!(
                "it is valid from {inception} to {expiration} (Unix time), not at {now}"
            )));
        }
        keys.ksk_published
            .dnskey
            .verify_rrsig(&keys.apex, DNSClass::IN, rrsig, dnskeys.iter())
            .map_err(|_| bad("made with another key or over other keys"))?;
        Ok(keys)
    }

    fn with_dnskey_signer(
        apex: &str,
        algorithm: KeyAlgorithm,
        (ksk, ksk_published): (DnskeySigner, PublishedKey),
        zsk: &[u8],
        standby: &[&[u8]],
        dnskey_ttl: u32,
    ) -> Result<Self, KeyError> {
        let zsk = signing_key(algorithm, zsk, "zone-signing key")?;
        let zsk_published =
            PublishedKey::new(zsk.as_ref(), ZSK_FLAGS, "zone-signing key", algorithm)?;
        let standby = standby
            .iter()
            .map(|der| {
                let key = signing_key(algorithm, der, "standby zone-signing key")?;
                PublishedKey::new(
                    key.as_ref(),
                    ZSK_FLAGS,
                    "standby zone-signing key",
                    algorithm,
                )
            })
            .collect::<Result<_, _>>()?;
        let apex = Name::from_ascii(format!("{}.", apex.trim_end_matches('.')))
            .map_err(|_| KeyError::BadApex(apex.to_string()))?
            .to_lowercase();
        Ok(ZoneKeys {
            apex,
            algorithm,
            ksk,
            ksk_published,
            zsk,
            zsk_published,
            standby,
            dnskey_ttl,
        })
    }

    pub fn algorithm(&self) -> KeyAlgorithm {
        self.algorithm
    }

    /// The tag of the ZSK that signs.
    pub fn signing_tag(&self) -> u16 {
        self.zsk_published.tag
    }

    /// The tag of the KSK (the DS's).
    pub fn ksk_tag(&self) -> u16 {
        self.ksk_published.tag
    }

    /// The KSK's public key, as its DNSKEY holds it (what [`ZoneKeys::presigned`] takes).
    pub fn ksk_public(&self) -> Vec<u8> {
        self.ksk_published
            .dnskey
            .public_key()
            .public_bytes()
            .to_vec()
    }

    /// Whether these keys hold the KSK (else they serve a signature made with it).
    pub fn holds_ksk(&self) -> bool {
        matches!(self.ksk, DnskeySigner::Key(_))
    }

    /// The RRSIG record over the DNSKEY set, made at Unix time `now` (wire form, for
    /// [`ZoneKeys::presigned`]); `None` without the KSK.
    pub fn dnskey_signature(&self, now: u64) -> Option<Vec<u8>> {
        let DnskeySigner::Key(_) = self.ksk else {
            return None;
        };
        self.sign(&self.apex_records(RecordType::DNSKEY), now)?
            .to_bytes()
            .ok()
    }

    /// When the DNSKEY set's signature these keys serve was made (Unix time: its inception
    /// less the skew), if they serve one made elsewhere.
    pub fn dnskey_signed_at(&self) -> Option<u64> {
        let DnskeySigner::Presigned(signature) = &self.ksk else {
            return None;
        };
        let RData::DNSSEC(DNSSECRData::RRSIG(rrsig)) = &signature.data else {
            return None;
        };
        Some(u64::from(rrsig.input().sig_inception.get()) + u64::from(INCEPTION_SKEW))
    }

    /// Whether `other` publishes the same DNSKEY set (the signature over it aside).
    pub fn publishes_same(&self, other: &ZoneKeys) -> bool {
        let published = |keys: &ZoneKeys| -> Vec<DNSKEY> {
            keys.published().map(|key| key.dnskey.clone()).collect()
        };
        self.apex == other.apex
            && self.dnskey_ttl == other.dnskey_ttl
            && published(self) == published(other)
    }

    /// The tags of every published key: KSK, signing ZSK, standby ZSKs.
    pub fn published_tags(&self) -> Vec<u16> {
        self.published().map(|key| key.tag).collect()
    }

    fn published(&self) -> impl Iterator<Item = &PublishedKey> {
        [&self.ksk_published, &self.zsk_published]
            .into_iter()
            .chain(&self.standby)
    }

    /// The DS record the parent zone needs (SHA-256 of the KSK).
    pub fn ds(&self) -> DS {
        let digest = self
            .ksk_published
            .dnskey
            .to_digest(&self.apex, DigestType::SHA256)
            .map(|digest| digest.as_ref().to_vec())
            .unwrap_or_default();
        DS::new(
            self.ksk_published.tag,
            self.algorithm.wire(),
            DigestType::SHA256,
            digest,
        )
    }

    /// The DS record in zone-file form, e.g. `example.com. 3600 IN DS 12345 13 2 AB…`.
    pub fn ds_line(&self) -> String {
        let record = Record::from_rdata(
            self.apex.clone(),
            self.dnskey_ttl,
            RData::DNSSEC(DNSSECRData::DS(self.ds())),
        );
        record.to_string()
    }

    /// The apex's DNSKEY, CDS or CDNSKEY records; none for another type.
    pub fn apex_records(&self, record_type: RecordType) -> Vec<Record> {
        let record =
            |rdata| Record::from_rdata(self.apex.clone(), self.dnskey_ttl, RData::DNSSEC(rdata));
        match record_type {
            RecordType::DNSKEY => self
                .published()
                .map(|key| record(DNSSECRData::DNSKEY(key.dnskey.clone())))
                .collect(),
            // RFC 7344: the child's wish for its DS set, which a parent may poll.
            RecordType::CDS => {
                let ds = self.ds();
                vec![record(DNSSECRData::CDS(CDS::new(
                    ds.key_tag(),
                    Some(ds.algorithm()),
                    ds.digest_type(),
                    ds.digest().to_vec(),
                )))]
            }
            RecordType::CDNSKEY => {
                let ksk = &self.ksk_published.dnskey;
                vec![record(DNSSECRData::CDNSKEY(CDNSKEY::with_flags(
                    ksk.flags(),
                    Some(self.algorithm.wire()),
                    ksk.public_key().public_bytes().to_vec(),
                )))]
            }
            _ => Vec::new(),
        }
    }

    /// The RRSIG over `rrset` (records of one owner, type and class; at least one), made at
    /// Unix time `now`: by the KSK for the DNSKEY set (or the signature made with it, which
    /// covers the only DNSKEY set these keys publish), else by the ZSK. `None` only if the
    /// crypto fails, which a key that loaded does not.
    pub fn sign(&self, rrset: &[Record], now: u64) -> Option<Record> {
        let first = rrset.first()?;
        let (key, tag) = if first.record_type() == RecordType::DNSKEY {
            match &self.ksk {
                DnskeySigner::Key(key) => (key.as_ref(), self.ksk_published.tag),
                DnskeySigner::Presigned(signature) => return Some(Record::clone(signature)),
            }
        } else {
            (self.zsk.as_ref(), self.zsk_published.tag)
        };
        let now = now as u32;
        let input = SigInput {
            type_covered: first.record_type(),
            algorithm: self.algorithm.wire(),
            num_labels: first.name.num_labels(),
            original_ttl: first.ttl,
            sig_expiration: SerialNumber::new(now.wrapping_add(SIGNATURE_VALIDITY)),
            sig_inception: SerialNumber::new(now.wrapping_sub(INCEPTION_SKEW)),
            key_tag: tag,
            signer_name: self.apex.clone(),
        };
        let tbs = TBS::from_input(&first.name, DNSClass::IN, &input, rrset.iter()).ok()?;
        let signature = key.sign(&tbs).ok()?;
        Some(Record::from_rdata(
            first.name.clone(),
            first.ttl,
            RData::DNSSEC(DNSSECRData::RRSIG(RRSIG::from_sig(input, signature))),
        ))
    }
}

/// Equal when they publish the same keys and sign the DNSKEY set alike: a signature made
/// again elsewhere is a change, which a server takes up.
impl PartialEq for ZoneKeys {
    fn eq(&self, other: &Self) -> bool {
        let presigned = |keys: &ZoneKeys| match &keys.ksk {
            DnskeySigner::Key(_) => None,
            DnskeySigner::Presigned(signature) => Some(signature.clone()),
        };
        self.publishes_same(other) && presigned(self) == presigned(other)
    }
}

impl Eq for ZoneKeys {}

/// Tags and algorithm only: a private key never reaches a log.
impl fmt::Debug for ZoneKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZoneKeys")
            .field("apex", &self.apex.to_ascii())
            .field("algorithm", &self.algorithm)
            .field("ksk", &self.ksk_published.tag)
            .field("holds_ksk", &self.holds_ksk())
            .field("zsk", &self.zsk_published.tag)
            .field(
                "standby",
                &self.standby.iter().map(|key| key.tag).collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// RFC 9824's compact denial at `owner`: an NSEC whose next name is the immediate successor
/// `\000.owner`, so it covers nothing but the owner. `types` are those at the owner, `None`
/// when it does not exist (NXNAME).
pub fn compact_denial(owner: &Name, types: Option<&[RecordType]>, ttl: u32) -> Record {
    let next = Name::from_labels([&[0u8][..]])
        .ok()
        .and_then(|zero| zero.append_domain(owner).ok())
        .unwrap_or_else(|| owner.clone());
    let mut bitmap: Vec<RecordType> =
        types.map_or_else(|| vec![RecordType::Unknown(NXNAME)], <[RecordType]>::to_vec);
    bitmap.extend([RecordType::RRSIG, RecordType::NSEC]);
    Record::from_rdata(
        owner.clone(),
        ttl,
        RData::DNSSEC(DNSSECRData::NSEC(NSEC::new(next, bitmap))),
    )
}
