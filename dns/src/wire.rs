//! Engine records as DNS wire records (hickory-proto), for the two crates that speak DNS: the
//! embedded nameserver and the RFC2136 provider. Behind the `wire` feature, so the engine on
//! its own needs no DNS wire library.

use std::net::{Ipv4Addr, Ipv6Addr};

use hickory_proto::rr::rdata::{A, AAAA, CNAME, NS, TXT};
use hickory_proto::rr::{Name, RData, Record, RecordType as WireType};

use crate::model::{Endpoint, RecordType};

/// TTL for records published without one (and the nameserver's negative-caching TTL).
pub const DEFAULT_TTL: u32 = 60;

/// The wire type of a record type.
pub fn wire_type(record_type: RecordType) -> WireType {
    match record_type {
        RecordType::A => WireType::A,
        RecordType::Aaaa => WireType::AAAA,
        RecordType::Cname => WireType::CNAME,
        RecordType::Txt => WireType::TXT,
        RecordType::Ns => WireType::NS,
        RecordType::Srv => WireType::SRV,
        RecordType::Mx => WireType::MX,
        RecordType::Caa => WireType::CAA,
    }
}

/// `records` at `owner` as wire records: one per target. SRV, MX and CAA values, and targets
/// that do not parse as their type, are left out.
pub fn to_wire(owner: &Name, records: Vec<&Endpoint>) -> Vec<Record> {
    let mut wire = Vec::new();
    for record in records {
        let ttl = if record.record_ttl == 0 {
            DEFAULT_TTL
        } else {
            record.record_ttl
        };
        for target in &record.targets {
            let rdata = match record.record_type {
                RecordType::A => target.parse::<Ipv4Addr>().ok().map(|ip| RData::A(A(ip))),
                RecordType::Aaaa => target
                    .parse::<Ipv6Addr>()
                    .ok()
                    .map(|ip| RData::AAAA(AAAA(ip))),
                RecordType::Cname => Name::from_ascii(format!("{target}."))
                    .ok()
                    .map(|n| RData::CNAME(CNAME(n))),
                RecordType::Ns => Name::from_ascii(format!("{target}."))
                    .ok()
                    .map(|n| RData::NS(NS(n))),
                // One DNS character-string holds 255 bytes: longer values travel as several.
                RecordType::Txt => Some(RData::TXT(TXT::new(crate::model::txt_strings(target)))),
                RecordType::Srv | RecordType::Mx | RecordType::Caa => None,
            };
            if let Some(rdata) = rdata {
                wire.push(Record::from_rdata(owner.clone(), ttl, rdata));
            }
        }
    }
    wire
}

/// `name` as an absolute DNS name (the root when it is not a valid name).
pub fn fqdn(name: &str) -> Name {
    Name::from_ascii(format!("{name}.")).unwrap_or_else(|_| Name::root())
}

/// A TSIG key (RFC 8945): its name, HMAC algorithm and secret. The secret is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct TsigKey {
    /// The key's name, as both sides know it (`meridian-transfer`), without the final dot.
    pub name: String,
    /// `hmac-sha256`, `hmac-sha384` or `hmac-sha512`.
    pub algorithm: String,
    secret: Vec<u8>,
}

impl std::fmt::Debug for TsigKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TsigKey")
            .field("name", &self.name)
            .field("algorithm", &self.algorithm)
            .finish_non_exhaustive()
    }
}

/// Why a TSIG key is unusable. No variant carries the secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TsigKeyError {
    #[error("unsupported TSIG algorithm {0:?} (hmac-sha256, hmac-sha384 or hmac-sha512)")]
    Algorithm(String),
    #[error("the secret of TSIG key {0:?} is not base64")]
    Secret(String),
    #[error("TSIG key name {0:?} is not a domain name")]
    Name(String),
    #[error(
        "not a key file of BIND's format (key \"NAME\" {{ algorithm ALG; secret \"BASE64\"; }};): {0}"
    )]
    KeyFile(String),
}

impl TsigKey {
    /// A key from its parts; the secret in base64, as BIND and Kubernetes Secrets hold it.
    pub fn new(name: &str, algorithm: &str, secret_base64: &str) -> Result<Self, TsigKeyError> {
        use base64::Engine as _;
        let algorithm = algorithm.trim().to_ascii_lowercase();
        if !matches!(
            algorithm.as_str(),
            "hmac-sha256" | "hmac-sha384" | "hmac-sha512"
        ) {
            return Err(TsigKeyError::Algorithm(algorithm));
        }
        let name = name.trim().trim_end_matches('.').to_ascii_lowercase();
        if name.is_empty() || Name::from_ascii(format!("{name}.")).is_err() {
            return Err(TsigKeyError::Name(name));
        }
        let secret = base64::engine::general_purpose::STANDARD
            .decode(secret_base64.trim())
            .map_err(|_| TsigKeyError::Secret(name.clone()))?;
        Ok(TsigKey {
            name,
            algorithm,
            secret,
        })
    }

    /// The keys of a key file as `tsig-keygen` writes it:
    /// `key "NAME" { algorithm hmac-sha256; secret "BASE64"; };` (several keys may follow
    /// one another; comments start with `#` or `//`).
    pub fn parse_key_file(text: &str) -> Result<Vec<Self>, TsigKeyError> {
        let text: String = text
            .lines()
            .map(|line| {
                let line = line.split_once('#').map_or(line, |(code, _)| code);
                line.split_once("//").map_or(line, |(code, _)| code)
            })
            .collect::<Vec<_>>()
            .join(" ");
        let bad = |why: &str| TsigKeyError::KeyFile(why.to_string());
        let mut keys = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            let after_key = rest
                .strip_prefix("key")
                .ok_or_else(|| bad("expected `key`"))?;
            let (name, after_name) = after_key
                .trim_start()
                .strip_prefix('"')
                .and_then(|s| s.split_once('"'))
                .ok_or_else(|| bad("expected a quoted key name"))?;
            let (body, after_body) = after_name
                .trim_start()
                .strip_prefix('{')
                .and_then(|s| s.split_once('}'))
                .ok_or_else(|| bad("expected { ... }"))?;
            let (mut algorithm, mut secret) = (None, None);
            for statement in body.split(';').map(str::trim).filter(|s| !s.is_empty()) {
                match statement.split_once(char::is_whitespace) {
                    Some(("algorithm", value)) => algorithm = Some(value.trim()),
                    Some(("secret", value)) => secret = Some(value.trim().trim_matches('"')),
                    _ => return Err(bad("a key holds only `algorithm` and `secret`")),
                }
            }
            let (Some(algorithm), Some(secret)) = (algorithm, secret) else {
                return Err(bad("a key needs an algorithm and a secret"));
            };
            keys.push(TsigKey::new(name, algorithm, secret)?);
            rest = after_body
                .trim_start()
                .strip_prefix(';')
                .ok_or_else(|| bad("expected `;` after a key"))?
                .trim_start();
        }
        if keys.is_empty() {
            return Err(bad("no key"));
        }
        Ok(keys)
    }

    /// hickory's signer and verifier for this key; `fudge` is the clock skew allowed, seconds.
    pub fn signer(&self, fudge: u16) -> hickory_proto::rr::TSigner {
        use hickory_proto::rr::rdata::tsig::TsigAlgorithm;
        let algorithm = match self.algorithm.as_str() {
            "hmac-sha384" => TsigAlgorithm::HmacSha384,
            "hmac-sha512" => TsigAlgorithm::HmacSha512,
            _ => TsigAlgorithm::HmacSha256,
        };
        hickory_proto::rr::TSigner::new(self.secret.clone(), algorithm, fqdn(&self.name), fudge)
            .expect("the three algorithms TsigKey accepts are supported")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_files_read_as_tsig_keygen_writes_them() {
        let file = "# made by tsig-keygen\nkey \"xfr.Example.\" {\n\talgorithm hmac-sha256;\n\tsecret \"c2VjcmV0\";\n};\nkey \"b\" { algorithm HMAC-SHA512; secret \"YQ==\"; }; // two\n";
        let keys = TsigKey::parse_key_file(file).unwrap();
        assert_eq!(
            keys.iter()
                .map(|k| (k.name.as_str(), k.algorithm.as_str()))
                .collect::<Vec<_>>(),
            [("xfr.example", "hmac-sha256"), ("b", "hmac-sha512")]
        );
        assert_eq!(
            keys[0],
            TsigKey::new("xfr.example", "hmac-sha256", "c2VjcmV0").unwrap()
        );
        assert!(
            !format!("{keys:?}").contains("c2VjcmV0"),
            "the secret is never printed"
        );
        let table: &[(&str, TsigKeyError)] = &[
            ("", TsigKeyError::KeyFile("no key".into())),
            (
                "key \"a\" { algorithm hmac-md5; secret \"YQ==\"; };",
                TsigKeyError::Algorithm("hmac-md5".into()),
            ),
            (
                "key \"a\" { algorithm hmac-sha256; secret \"not base64!\"; };",
                TsigKeyError::Secret("a".into()),
            ),
            (
                "key \"a\" { algorithm hmac-sha256; };",
                TsigKeyError::KeyFile("a key needs an algorithm and a secret".into()),
            ),
            (
                "key \"a\" { algorithm hmac-sha256; secret \"YQ==\"; }",
                TsigKeyError::KeyFile("expected `;` after a key".into()),
            ),
            (
                "zone \"a\" {};",
                TsigKeyError::KeyFile("expected `key`".into()),
            ),
        ];
        for (text, expected) in table {
            assert_eq!(
                TsigKey::parse_key_file(text).as_ref(),
                Err(expected),
                "{text}"
            );
        }
    }
}
