//! Which ManagedZone a domain belongs to. Many teams share one hub, each with rights in its own
//! namespace; without claims a ManagedZone in one namespace for another team's domain (or a
//! name under it, a longer apex the nameserver would answer from) took that team's names.
//!
//! The rules, decided here from the zones alone so that every replica and agent decides alike:
//!
//! - An apex belongs to exactly one ManagedZone. Among the zones that may claim a domain, the
//!   oldest (by `creationTimestamp`, which the API server sets, then by namespace and name)
//!   holds it; a later zone for the same domain (in any namespace), or for a parent or a child
//!   of it in another namespace, is refused and publishes nothing. Zones that were refused do
//!   not refuse others: only holders do.
//! - A platform admin may grant domain suffixes to namespaces (the hub's `--domain-grant`);
//!   once any grant exists, a namespace may claim only names under the suffixes granted to it
//!   (deny by default), as an external-dns installation serves only its `--domain-filter`.
//! - A public suffix (`com`, `co.uk`, `github.io`: [`is_public_suffix`]) is held by no zone
//!   unless the admin's grants cover it: the first team to claim `com` would otherwise refuse
//!   every later zone under it in other namespaces.
//! - A zone the leading hub refused for want of a grant or as a public suffix (its status says
//!   [`reasons::DOMAIN_NOT_GRANTED`] or [`reasons::PUBLIC_SUFFIX`]) is refused by agents too,
//!   which have no grants of their own ([`DomainGrants::following_the_leader`]). Only the hub writes a zone's status; the hub
//!   itself decides by its grants alone, so a grant added later frees the zone.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use kube::ResourceExt;
use meridian_api::conditions;
use meridian_api::kuadrant::ManagedZone;

/// Reasons of a refused zone's `Ready=False` (and of its records' status).
pub mod reasons {
    /// An older ManagedZone holds the domain, a parent or a child of it.
    pub const DOMAIN_CLAIMED: &str = "DomainClaimed";
    /// The zone's namespace has no grant for its domain.
    pub const DOMAIN_NOT_GRANTED: &str = "DomainNotGranted";
    /// The zone's domain is a public suffix (`com`, `co.uk`, `github.io`), which no one team
    /// holds unless the platform admin grants it by name.
    pub const PUBLIC_SUFFIX: &str = "DomainIsPublicSuffix";
}

/// Domain suffixes a platform admin granted to namespaces. None at all means every namespace
/// may claim any domain (claims still hold: the oldest wins).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainGrants {
    /// Suffixes by namespace, lowercase, without the trailing dot.
    by_namespace: BTreeMap<String, Vec<String>>,
    /// Whether to take the leading hub's refusals from the zones' status, for a process that
    /// has not got the hub's grants (an agent). The hub decides by its own grants alone: a
    /// grant added later must free a zone it refused.
    follow_leader: bool,
}

impl DomainGrants {
    /// The grants of a process that has not got the hub's (an agent serving DNS): none of its
    /// own, and the leader's refusals followed.
    pub fn following_the_leader() -> Self {
        DomainGrants {
            by_namespace: BTreeMap::new(),
            follow_leader: true,
        }
    }

    /// From the hub's `--domain-grant` values, each `NAMESPACE=SUFFIX[,SUFFIX...]`.
    pub fn parse<S: AsRef<str>>(values: &[S]) -> Result<Self, String> {
        let mut by_namespace: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for value in values {
            let value = value.as_ref();
            let (namespace, suffixes) = value.split_once('=').ok_or_else(|| {
                format!("domain grant {value:?}: expected NAMESPACE=SUFFIX[,SUFFIX...]")
            })?;
            let namespace = namespace.trim();
            if !is_namespace_name(namespace) {
                return Err(format!(
                    "domain grant {value:?}: {namespace:?} is not a namespace name"
                ));
            }
            for suffix in suffixes.split(',') {
                let suffix = normalize(suffix.trim());
                if suffix.is_empty() || !suffix.split('.').all(is_domain_label) {
                    return Err(format!(
                        "domain grant {value:?}: {suffix:?} is not a domain name"
                    ));
                }
                by_namespace
                    .entry(namespace.to_string())
                    .or_default()
                    .push(suffix);
            }
        }
        Ok(DomainGrants {
            by_namespace,
            follow_leader: false,
        })
    }

    /// Whether any grant was made (and so whether namespaces without one may claim nothing).
    pub fn restricts(&self) -> bool {
        !self.by_namespace.is_empty()
    }

    /// Whether `namespace` may claim `domain`.
    pub fn allows(&self, namespace: &str, domain: &str) -> bool {
        if !self.restricts() {
            return true;
        }
        let domain = normalize(domain);
        self.by_namespace
            .get(namespace)
            .is_some_and(|suffixes| suffixes.iter().any(|s| is_at_or_under(&domain, s)))
    }

    /// The suffixes granted to `namespace`, for messages.
    fn granted(&self, namespace: &str) -> String {
        match self.by_namespace.get(namespace) {
            Some(suffixes) => suffixes.join(", "),
            None => "none".into(),
        }
    }
}

/// A Kubernetes namespace name: an RFC 1123 label.
fn is_namespace_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

fn is_domain_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// A domain as claims compare it: lowercase, no trailing dot.
pub fn normalize(domain: &str) -> String {
    domain.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether `name` is `domain` or a name under it (both normalized).
pub fn is_at_or_under(name: &str, domain: &str) -> bool {
    name == domain
        || (name.len() > domain.len()
            && name.ends_with(domain)
            && name.as_bytes()[name.len() - domain.len() - 1] == b'.')
}

/// Whether `host` (a record's root host) is at or under `zone`'s domain: what a record of the
/// zone may publish.
pub fn in_zone(host: &str, zone: &ManagedZone) -> bool {
    is_at_or_under(&normalize(host), &normalize(&zone.spec.domain_name))
}

/// The key of `zone` in [`claims`]: `namespace/name`.
pub fn claim_key(zone: &ManagedZone) -> String {
    format!(
        "{}/{}",
        zone.namespace().unwrap_or_default(),
        zone.name_any()
    )
}

/// A zone's claim on its domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The zone holds its domain: it may serve and publish.
    Holds,
    /// Another zone holds the domain, a parent or a child of it.
    Claimed {
        holder_namespace: String,
        holder_name: String,
        holder_domain: String,
    },
    /// The zone's namespace has no grant for its domain.
    NotGranted { granted: String },
    /// The zone's domain is a public suffix.
    PublicSuffix,
}

impl Claim {
    pub fn holds(&self) -> bool {
        *self == Claim::Holds
    }

    /// The reason a refused zone's status gives.
    pub fn reason(&self) -> &'static str {
        match self {
            Claim::Holds => "Holds",
            Claim::Claimed { .. } => reasons::DOMAIN_CLAIMED,
            Claim::NotGranted { .. } => reasons::DOMAIN_NOT_GRANTED,
            Claim::PublicSuffix => reasons::PUBLIC_SUFFIX,
        }
    }
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Claim::Holds => write!(f, "the zone holds its domain"),
            Claim::Claimed {
                holder_namespace,
                holder_name,
                holder_domain,
            } => write!(
                f,
                "the domain is claimed by ManagedZone {holder_name} in namespace {holder_namespace} ({holder_domain}), an older zone for the same domain, a parent or a child of it; this zone serves and publishes nothing"
            ),
            Claim::NotGranted { granted } => write!(
                f,
                "the hub's domain grants give this namespace no suffix the domain is under (granted: {granted}); this zone serves and publishes nothing"
            ),
            Claim::PublicSuffix => write!(
                f,
                "the domain is a public suffix (on the Public Suffix List), under which many owners register names; a zone for it would refuse every other team's zones under it, so only a platform admin's domain grant naming it lets a namespace hold it; this zone serves and publishes nothing"
            ),
        }
    }
}

/// One zone as claims see it.
#[derive(Debug, Clone)]
struct Claimant {
    namespace: String,
    name: String,
    domain: String,
    /// Seconds since the epoch of `creationTimestamp`; zones not yet created sort last.
    created: i64,
}

impl Claimant {
    fn of(zone: &ManagedZone) -> Self {
        Claimant {
            namespace: zone.namespace().unwrap_or_default(),
            name: zone.name_any(),
            domain: normalize(&zone.spec.domain_name),
            created: zone
                .metadata
                .creation_timestamp
                .as_ref()
                .map_or(i64::MAX, |t| t.0.as_second()),
        }
    }

    fn order(&self) -> (i64, &str, &str) {
        (self.created, &self.namespace, &self.name)
    }

    /// Whether the two cannot both hold: the same domain, or one under the other across
    /// namespaces (a team may delegate within its own namespace).
    fn conflicts(&self, other: &Claimant) -> bool {
        self.domain == other.domain
            || (self.namespace != other.namespace
                && (is_at_or_under(&self.domain, &other.domain)
                    || is_at_or_under(&other.domain, &self.domain)))
    }
}

/// Whether `domain` (normalized) is itself a public suffix, ICANN's (`com`, `co.uk`) or a
/// private one (`github.io`), by the Public Suffix List compiled into the binary. A name the
/// list does not know (`test`, `internal`) is not.
pub fn is_public_suffix(domain: &str) -> bool {
    psl::suffix(domain.as_bytes())
        .is_some_and(|suffix| suffix.is_known() && suffix.as_bytes() == domain.as_bytes())
}

/// How the leading hub refused `zone`, when it refused it for want of a grant or as a public
/// suffix (see the module's notes).
fn refused_by_leader(zone: &ManagedZone) -> Option<Claim> {
    let status = zone.status.as_ref()?;
    status.conditions.iter().find_map(|c| {
        if c.type_ != conditions::READY || c.status != "False" {
            return None;
        }
        match c.reason.as_str() {
            reasons::DOMAIN_NOT_GRANTED => Some(Claim::NotGranted {
                granted: "the hub's".into(),
            }),
            reasons::PUBLIC_SUFFIX => Some(Claim::PublicSuffix),
            _ => None,
        }
    })
}

/// Every zone's claim, by `namespace/name`, among `zones` (pure; the same on every server
/// that sees the same zones).
pub fn claims(zones: &[Arc<ManagedZone>], grants: &DomainGrants) -> BTreeMap<String, Claim> {
    let mut result = BTreeMap::new();
    let mut candidates = Vec::new();
    for zone in zones {
        let claimant = Claimant::of(zone);
        let key = claim_key(zone);
        let refusal = if grants.follow_leader {
            refused_by_leader(zone)
        } else if !grants.allows(&claimant.namespace, &claimant.domain) {
            Some(Claim::NotGranted {
                granted: grants.granted(&claimant.namespace),
            })
        } else if is_public_suffix(&claimant.domain) && !grants.restricts() {
            // With grants, the admin's grant covering the suffix is the leave to hold it.
            Some(Claim::PublicSuffix)
        } else {
            None
        };
        match refusal {
            Some(claim) => {
                result.insert(key, claim);
            }
            None => candidates.push((key, claimant)),
        }
    }
    candidates.sort_by(|(_, a), (_, b)| a.order().cmp(&b.order()));
    // Holders by domain labels reversed (`com.example.shop`), so the holders at or under a
    // domain are one range and those above it a few lookups: a pass over every zone stays
    // near-linear at thousands of zones.
    let mut holders: BTreeMap<String, Vec<Claimant>> = BTreeMap::new();
    for (key, claimant) in candidates {
        let conflict = conflicting_holder(&holders, &claimant).cloned();
        let claim = match conflict {
            Some(holder) => Claim::Claimed {
                holder_namespace: holder.namespace,
                holder_name: holder.name,
                holder_domain: holder.domain,
            },
            None => {
                holders
                    .entry(reversed(&claimant.domain))
                    .or_default()
                    .push(claimant);
                Claim::Holds
            }
        };
        result.insert(key, claim);
    }
    result
}

/// `zone`'s claim among `zones`.
pub fn claim_of(zone: &ManagedZone, zones: &[Arc<ManagedZone>], grants: &DomainGrants) -> Claim {
    let key = claim_key(zone);
    let mut all: Vec<Arc<ManagedZone>> = zones
        .iter()
        .filter(|z| z.namespace() != zone.namespace() || z.name_any() != zone.name_any())
        .cloned()
        .collect();
    // The zone as given (the cache may not have it yet).
    all.push(Arc::new(zone.clone()));
    claims(&all, grants).remove(&key).unwrap_or(Claim::Holds)
}

fn reversed(domain: &str) -> String {
    domain.rsplit('.').collect::<Vec<_>>().join(".")
}

fn conflicting_holder<'a>(
    holders: &'a BTreeMap<String, Vec<Claimant>>,
    claimant: &Claimant,
) -> Option<&'a Claimant> {
    let key = reversed(&claimant.domain);
    // The same domain, and every parent.
    let mut parent = key.as_str();
    loop {
        if let Some(found) = holders
            .get(parent)
            .and_then(|list| list.iter().find(|h| claimant.conflicts(h)))
        {
            return Some(found);
        }
        match parent.rfind('.') {
            Some(dot) => parent = &parent[..dot],
            None => break,
        }
    }
    // Every child: keys starting with `key.`.
    let below = format!("{key}.");
    holders
        .range(below.clone()..)
        .take_while(|(k, _)| k.starts_with(&below))
        .flat_map(|(_, list)| list.iter())
        .find(|h| claimant.conflicts(h))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn zone(namespace: &str, name: &str, domain: &str, created: &str) -> Arc<ManagedZone> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
                "metadata": {
                    "name": name, "namespace": namespace,
                    "creationTimestamp": format!("2026-11-27T10:00:{created}Z"),
                },
                "spec": { "domainName": domain },
            }))
            .expect("a zone"),
        )
    }

    fn claimed_by(namespace: &str, name: &str, domain: &str) -> Claim {
        Claim::Claimed {
            holder_namespace: namespace.into(),
            holder_name: name.into(),
            holder_domain: domain.into(),
        }
    }

    #[test]
    fn the_oldest_zone_holds_its_domain_its_parents_and_children_across_namespaces() {
        let victim = zone("victim", "main", "victim.com", "01");
        let cases: Vec<(Arc<ManagedZone>, Claim)> = vec![
            // The same domain, in another namespace or the victim's own.
            (
                zone("mallory", "z", "victim.com", "02"),
                claimed_by("victim", "main", "victim.com"),
            ),
            (
                zone("victim", "again", "Victim.COM.", "02"),
                claimed_by("victim", "main", "victim.com"),
            ),
            // A longer apex (a child) and a parent, in another namespace.
            (
                zone("mallory", "z", "shop.victim.com", "02"),
                claimed_by("victim", "main", "victim.com"),
            ),
            // The parent `com` is a public suffix, refused as such (a parent that is not one
            // is below).
            (zone("mallory", "z", "com", "02"), Claim::PublicSuffix),
            // A child in the holder's own namespace: the team delegates to itself.
            (
                zone("victim", "shop", "shop.victim.com", "02"),
                Claim::Holds,
            ),
            // Names that only look alike.
            (zone("mallory", "z", "notvictim.com", "02"), Claim::Holds),
            (zone("mallory", "z", "victim.co", "02"), Claim::Holds),
            (zone("mallory", "z", "com.victim", "02"), Claim::Holds),
        ];
        for (other, expected) in cases {
            let zones = vec![victim.clone(), other.clone()];
            let claims = claims(&zones, &DomainGrants::default());
            assert_eq!(
                claims[&format!("{}/{}", other.namespace().unwrap(), other.name_any())],
                expected,
                "{}",
                other.spec.domain_name
            );
            assert_eq!(claims["victim/main"], Claim::Holds);
        }
        let child = zone("victim", "shop", "shop.victim.com", "01");
        let parent = zone("mallory", "z", "victim.com", "02");
        assert_eq!(
            claims(&[child, parent], &DomainGrants::default())["mallory/z"],
            claimed_by("victim", "shop", "shop.victim.com")
        );
    }

    #[test]
    fn age_decides_whatever_the_order_seen_and_refused_zones_refuse_nobody() {
        let older = zone("a", "z", "shop.example.com", "01");
        let refused = zone("b", "z", "example.com", "02");
        // Conflicts with the refused zone alone (its parent, another namespace).
        let sibling = zone("c", "z", "api.example.com", "03");
        let mut zones = vec![sibling.clone(), refused.clone(), older.clone()];
        for _ in 0..3 {
            zones.rotate_left(1);
            let claims = claims(&zones, &DomainGrants::default());
            assert_eq!(claims["a/z"], Claim::Holds);
            assert_eq!(claims["b/z"], claimed_by("a", "z", "shop.example.com"));
            assert_eq!(claims["c/z"], Claim::Holds);
        }
        // Created in the same second: namespace, then name, decide.
        let (first, second) = (zone("a", "z", "x.com", "05"), zone("b", "z", "x.com", "05"));
        let claims = claims(&[second, first], &DomainGrants::default());
        assert_eq!(claims["a/z"], Claim::Holds);
        assert_eq!(claims["b/z"], claimed_by("a", "z", "x.com"));
    }

    #[test]
    fn once_any_grant_exists_a_namespace_claims_only_what_it_was_granted() {
        let grants =
            DomainGrants::parse(&["victim=victim.com", "shop=shop.example.org,Other.NET."])
                .expect("grants");
        let cases = [
            ("victim", "victim.com", true),
            ("victim", "api.victim.com", true),
            ("victim", "notvictim.com", false),
            ("victim", "com", false),
            ("shop", "shop.example.org", true),
            ("shop", "example.org", false),
            ("shop", "a.other.net", true),
            ("mallory", "victim.com", false),
            ("mallory", "mallory.io", false),
        ];
        for (namespace, domain, allowed) in cases {
            assert_eq!(
                grants.allows(namespace, domain),
                allowed,
                "{namespace} {domain}"
            );
        }
        // A zone without a grant refuses nobody, however old.
        let zones = vec![
            zone("mallory", "z", "victim.com", "01"),
            zone("victim", "main", "victim.com", "02"),
        ];
        let claims = claims(&zones, &grants);
        assert_eq!(
            claims["mallory/z"],
            Claim::NotGranted {
                granted: "none".into()
            }
        );
        assert_eq!(claims["victim/main"], Claim::Holds);
        for bad in [
            "victim",
            "=victim.com",
            "victim=",
            "vic tim=a.com",
            "v=a..com",
        ] {
            assert!(DomainGrants::parse(&[bad]).is_err(), "{bad}");
        }
        assert!(grants.restricts() && !DomainGrants::default().restricts());
    }

    #[test]
    fn an_agent_without_grants_follows_the_leaders_refusal() {
        let mut refused = (*zone("mallory", "z", "victim.com", "01")).clone();
        refused.status = Some(meridian_api::kuadrant::ManagedZoneStatus {
            conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: conditions::READY.into(),
                status: "False".into(),
                reason: reasons::DOMAIN_NOT_GRANTED.into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-11-27T10:00:00Z".parse().unwrap(),
                ),
                observed_generation: None,
            }],
            ..Default::default()
        });
        let victim = zone("victim", "main", "victim.com", "02");
        let zones = vec![Arc::new(refused), victim];
        let followed = claims(&zones, &DomainGrants::following_the_leader());
        assert!(!followed["mallory/z"].holds());
        assert_eq!(followed["victim/main"], Claim::Holds);
        // The hub decides by its own grants: with the grant now given, the zone refused before
        // for want of one holds again (its status is the hub's own earlier word).
        let granted = DomainGrants::parse(&["mallory=victim.com", "victim=victim.com"]).unwrap();
        assert!(claims(&zones, &granted)["mallory/z"].holds());
    }

    #[test]
    fn a_public_suffix_is_held_by_no_one_unless_granted_and_blocks_no_one() {
        for suffix in ["com", "co.uk", "github.io", "s3.amazonaws.com"] {
            assert!(is_public_suffix(suffix), "{suffix}");
        }
        for name in [
            "example.com",
            "shop.co.uk",
            "me.github.io",
            "test",
            "mallory.test",
        ] {
            assert!(!is_public_suffix(name), "{name}");
        }
        // The attack: the oldest zone of all, for `com`, in the tenant's namespace.
        let zones = [
            zone("mallory", "everything", "com", "00"),
            zone("shop", "main", "example.com", "01"),
            zone("mallory", "uk", "co.uk", "02"),
            zone("shop", "uk", "shop.co.uk", "03"),
        ];
        let all = claims(&zones, &DomainGrants::default());
        assert_eq!(all["mallory/everything"], Claim::PublicSuffix);
        assert_eq!(all["mallory/uk"], Claim::PublicSuffix);
        assert!(
            all["shop/main"].holds() && all["shop/uk"].holds(),
            "{all:?}"
        );
        assert_eq!(all["mallory/everything"].reason(), reasons::PUBLIC_SUFFIX);
        // The admin may give a suffix by name (a registry running its own zone).
        let grants = DomainGrants::parse(&["mallory=co.uk", "shop=example.com"]).unwrap();
        let granted = claims(&zones, &grants);
        assert!(granted["mallory/uk"].holds(), "{granted:?}");
        assert!(matches!(
            granted["mallory/everything"],
            Claim::NotGranted { .. }
        ));
        // An agent follows the leader's refusal, whichever it was.
        let mut refused = (*zones[0]).clone();
        refused.status = Some(meridian_api::kuadrant::ManagedZoneStatus {
            conditions: vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
                type_: conditions::READY.into(),
                status: "False".into(),
                reason: reasons::PUBLIC_SUFFIX.into(),
                message: String::new(),
                last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    "2026-11-27T10:00:00Z".parse().unwrap(),
                ),
                observed_generation: None,
            }],
            ..Default::default()
        });
        let seen = [Arc::new(refused), zones[1].clone()];
        let followed = claims(&seen, &DomainGrants::following_the_leader());
        assert_eq!(followed["mallory/everything"], Claim::PublicSuffix);
        assert!(followed["shop/main"].holds());
    }

    #[test]
    fn claims_agree_with_pairwise_conflicts_whatever_the_mix() {
        // Property: no two holders conflict, and every refused zone names an older holder it
        // conflicts with.
        let labels = ["a", "b", "c"];
        let mut zones = Vec::new();
        let mut i = 0;
        for x in labels {
            for y in labels {
                for namespace in ["n1", "n2", "n3"] {
                    for domain in [format!("{x}.com"), format!("{y}.{x}.com")] {
                        i += 1;
                        let created = format!("{:02}", (i * 37) % 60);
                        zones.push(zone(namespace, &format!("z{i}"), &domain, &created));
                    }
                }
            }
        }
        let claims = claims(&zones, &DomainGrants::default());
        let holders: Vec<Claimant> = zones
            .iter()
            .filter(|z| claims[&format!("{}/{}", z.namespace().unwrap(), z.name_any())].holds())
            .map(|z| Claimant::of(z))
            .collect();
        for (i, a) in holders.iter().enumerate() {
            for b in &holders[i + 1..] {
                assert!(!a.conflicts(b), "{a:?} and {b:?} both hold");
            }
        }
        for zone in &zones {
            let me = Claimant::of(zone);
            if let Claim::Claimed {
                holder_namespace,
                holder_name,
                ..
            } = &claims[&format!("{}/{}", me.namespace, me.name)]
            {
                let holder = holders
                    .iter()
                    .find(|h| &h.namespace == holder_namespace && &h.name == holder_name)
                    .expect("a holder");
                assert!(holder.conflicts(&me) && holder.order() < me.order());
            }
        }
    }
}
