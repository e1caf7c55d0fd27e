//! What enforcing a policy reads, all from the shared caches: its Gateway, the rival
//! policies, the namespace's zones, and on the hub the clusters its Gateway is placed on.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use meridian_api::kuadrant::{DNSPolicy, DNSRecord, ManagedZone};
use meridian_api::labels::{DRAIN_LABEL, PLACEMENT_LABEL};
use meridian_api::meridian::GatewayReport;
use meridian_api::upstream::Gateway;
use meridian_dns::tree::GatewayRef;

use crate::Context;
use crate::decide::desired::{ListenerRef, PlacedCluster, ZoneRef, downstream_namespace, silence};
use crate::decide::exclude::Exclusions;
use crate::decide::policy::routing_strategy;
use crate::decide::silence::{BrakeMemory, FleetBrake, SilenceRules};
use crate::reconcile::fleet_brake;
use crate::runtime::indexes;
use meridian_dns::drain::DrainState;
use meridian_dns::tree::Strategy;

/// Everything a policy's records are decided from.
#[derive(Debug)]
pub struct Seen {
    pub gateway: Arc<Gateway>,
    pub gateway_ref: GatewayRef,
    /// The listeners the policy covers: of the Gateway's, then of those its ListenerSets add
    /// (keyed `<set>.<listener>`).
    pub listeners: Vec<ListenerRef>,
    /// Why ListenerSets naming the Gateway add nothing, or some of their listeners nothing.
    pub listener_set_problems: Vec<String>,
    /// Whether the policy targets the whole Gateway (neither a listener nor a ListenerSet).
    pub gateway_wide: bool,
    /// Every listener a policy on the Gateway may cover.
    pub coverable: Vec<Coverable>,
    /// The policies of the policy's namespace on its Gateway, itself among them.
    pub rivals: Vec<DNSPolicy>,
    /// The records of the listeners policies targeting them hold: left to them, never
    /// deleted by this policy (the holder takes each over in place, so its DNS never lapses).
    pub handed_over: Vec<String>,
    /// Records named as this policy's would be (`<gateway>-<listener>`) that another holds:
    /// name → who. Never overwritten ([`foreign_records`]).
    pub foreign_records: BTreeMap<String, String>,
    pub strategy: Strategy,
    /// The policy's `ttl` for the records health and choices change, seconds.
    pub answer_ttl: Option<u32>,
    /// The Gateway addresses the policy never publishes.
    pub excluded: Exclusions,
    /// The namespace's zones, by name.
    pub zones: Vec<ZoneRef>,
    /// What each zone's provider can hold, by zone name, for the zones whose provider is
    /// known (from its Secret's type, else its `status.provider`).
    pub zone_fidelity: BTreeMap<String, meridian_dns::fidelity::Fidelity>,
    /// The embedded zone each zone at a provider names as its `spec.routingDelegate`, by the
    /// provider zone's name: where what the provider cannot hold is published instead. A
    /// delegate that is missing or itself at a provider is left out (the zone's status says
    /// why), and the policy is refused as without one.
    pub zone_delegates: BTreeMap<String, ZoneRef>,
    /// On the hub, the clusters the Gateway is placed on; in distributed mode, this cluster.
    pub clusters: Vec<PlacedCluster>,
    /// How the silent ones among them are weighed, but for the fleet brake (decided).
    pub silence: SilenceRules,
    /// The fleet's heartbeats, when one of the clusters is silent.
    pub fleet: Option<FleetSeen>,
    /// Whether each cluster's ManagedCluster carries the drain label.
    pub marked_for_drain: Vec<(String, bool)>,
    /// Where the clusters' drains stood after the policy's last pass; `None` when there was
    /// none since this process started.
    pub drains: Option<BTreeMap<String, DrainState>>,
    /// Drains step a TTL apart, so resolvers' caches of one step expire before the next.
    pub drain_step_seconds: u64,
    /// The time the pass is decided at.
    pub now: Timestamp,
    pub now_seconds: u64,
    /// `DNSPolicy/namespace/name`: the policy's key in the memories.
    pub key: String,
}

/// What the fleet brake is decided from.
#[derive(Debug)]
pub struct FleetSeen {
    /// Every cluster's last heartbeat.
    pub heard: Vec<Timestamp>,
    /// What the brake held when last looked at.
    pub recalled: Option<BrakeMemory>,
    pub threshold_percent: u32,
}

/// Why a policy cannot be enforced; what was published stays published.
#[derive(Debug, PartialEq)]
pub enum Refusal {
    /// `target` says what is missing: `Gateway <namespace>/<name>` (and a listener), or a
    /// ListenerSet.
    TargetNotFound {
        target: String,
    },
    Conflicted {
        target: String,
        holder: String,
    },
    Invalid(String),
    /// The zone's provider cannot hold what the policy asks (`meridian_dns::fidelity`).
    Unsupported(String),
    /// The Gateway's Placement has no PlacementDecision at all: OCM has not decided yet (a
    /// Placement just made, or made again), which is no evidence that no cluster is placed.
    Undecided {
        placement: String,
    },
}

/// The kind of provider `zone` publishes through: the embedded nameserver without a Secret,
/// else what its Secret's type names (from the cache, so a zone applied with its policy is
/// known at once), else what its status last said.
fn zone_provider_kind<'a>(zone: &'a ManagedZone, ctx: &Context) -> Option<&'a str> {
    let Ok(secret) = zone.provider_secret_name() else {
        return None;
    };
    let Some(secret) = secret else {
        return Some("embedded");
    };
    let namespace = zone.namespace().unwrap_or_default();
    ctx.caches
        .secrets
        .get(Some(&namespace), secret)
        .and_then(|s| crate::zones::zone_provider::kind_of_secret_type(s.type_.as_deref()?))
        .or_else(|| zone.status.as_ref()?.provider.as_deref())
}

/// The routing delegate of each zone of a namespace (`zones`) at a provider: the embedded zone
/// its `spec.routingDelegate` names, once the delegation to it is published (the zone's
/// `RoutingDelegated` is True, which the hub says once the provider holds it, and the zone's
/// delegation record, looked up by `record` (namespace, name), is for that delegate's domain: no host is pointed into a
/// sub-zone resolvers cannot reach), when that is one of `zones`, has no provider Secret, and
/// no other zone names it (two parents' trees would share its names). A spec edit of the zone
/// that keeps its delegate keeps it here too: the trees do not move back and forth.
pub fn zone_delegates(
    zones: &[Arc<ManagedZone>],
    record: impl Fn(&str, &str) -> Option<Arc<DNSRecord>>,
) -> BTreeMap<String, ZoneRef> {
    let named = |delegate: &str| {
        zones
            .iter()
            .filter(|z| z.spec.routing_delegate.as_deref() == Some(delegate))
            .count()
    };
    zones
        .iter()
        .filter(|zone| zone.spec.dns_provider_secret_ref.is_some())
        .filter(|zone| {
            zone.status.as_ref().is_some_and(|status| {
                status.conditions.iter().any(|c| {
                    c.type_ == meridian_api::conditions::ROUTING_DELEGATED && c.status == "True"
                })
            })
        })
        .filter_map(|zone| {
            let wanted = zone.spec.routing_delegate.as_deref()?;
            if named(wanted) > 1 {
                return None;
            }
            let delegate = zones.iter().find(|d| {
                d.name_any() == wanted
                    && d.spec.dns_provider_secret_ref.is_none()
                    && d.metadata.deletion_timestamp.is_none()
            })?;
            let delegation = meridian_api::labels::routing_delegation_record(&zone.name_any());
            let clean = |name: &str| name.trim_end_matches('.').to_ascii_lowercase();
            let namespace = zone.namespace().unwrap_or_default();
            let delegated = record(&namespace, &delegation).is_some_and(|r| {
                r.labels().get(meridian_api::labels::ROUTING_DELEGATE_LABEL)
                    == Some(&zone.name_any())
                    && r.metadata.deletion_timestamp.is_none()
                    && clean(&r.spec.root_host) == clean(&delegate.spec.domain_name)
            });
            if !delegated {
                return None;
            }
            Some((
                zone.name_any(),
                ZoneRef {
                    name: delegate.name_any(),
                    domain: delegate.spec.domain_name.clone(),
                },
            ))
        })
        .collect()
}

/// Whether `policy` targets the Gateway `namespace/name` itself (not one of its ListenerSets).
pub fn targets(policy: &DNSPolicy, namespace: &str, name: &str) -> bool {
    let (target_namespace, target_name) = indexes::policy_target(policy);
    !policy.spec.target_ref.is_listener_set()
        && target_name == name
        && target_namespace == namespace
}

/// A listener a policy on its Gateway may cover: one of the Gateway's own, or one a ListenerSet
/// adds to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Coverable {
    /// What its record is named after (`<gateway>-<key>`): a Gateway listener's name, or a
    /// ListenerSet listener's key ([`crate::decide::listener_sets::SetListener`]).
    pub key: String,
    /// The ListenerSet that adds it (namespace, name), if one does.
    pub set: Option<(String, String)>,
    /// Its name in the Gateway or the ListenerSet.
    pub name: String,
}

impl Coverable {
    /// One of the Gateway's own listeners.
    pub fn own(name: &str) -> Self {
        Coverable {
            key: name.to_string(),
            set: None,
            name: name.to_string(),
        }
    }
}

/// The listeners policies on `gateway` may cover: its own, then those its ListenerSets add
/// and publish.
pub fn coverable(
    gateway: &Gateway,
    sets: &crate::decide::listener_sets::Attached,
) -> Vec<Coverable> {
    let own = gateway
        .spec
        .listeners
        .iter()
        .map(|l| Coverable::own(&l.name));
    let added = sets
        .listeners
        .iter()
        .filter(|l| l.publish)
        .map(|l| Coverable {
            key: l.key.clone(),
            set: Some((l.namespace.clone(), l.set.clone())),
            name: l.listener.name.clone(),
        });
    own.chain(added).collect()
}

/// How specifically `policy` targets `listener`, if at all (GEP-713: the more specific wins):
/// 2 for the listener itself (`sectionName`, of the Gateway or of its ListenerSet), 1 for its
/// ListenerSet, 0 for its Gateway.
fn specificity(policy: &DNSPolicy, listener: &Coverable) -> Option<u8> {
    let target = &policy.spec.target_ref;
    let section = target.section_name.as_deref();
    if target.is_listener_set() {
        let (namespace, set) = listener.set.as_ref()?;
        if Some(namespace.as_str()) != policy.metadata.namespace.as_deref() || *set != target.name {
            return None;
        }
        return match section {
            None => Some(1),
            Some(section) => (section == listener.name).then_some(2),
        };
    }
    match section {
        None => Some(0),
        Some(section) => (listener.set.is_none() && section == listener.name).then_some(2),
    }
}

/// Whether two policies target the same thing: they are equals, and the oldest holds it.
fn same_scope(a: &DNSPolicy, b: &DNSPolicy) -> bool {
    indexes::policy_target(a) == indexes::policy_target(b) && {
        let (a, b) = (&a.spec.target_ref, &b.spec.target_ref);
        a.is_listener_set() == b.is_listener_set() && a.section_name == b.section_name
    }
}

/// The policy among `rivals` that holds what `policy` targets (itself, or an equal).
fn scope_holder<'a>(policy: &DNSPolicy, rivals: &'a [DNSPolicy]) -> Option<&'a DNSPolicy> {
    holder(rivals.iter().filter(|p| same_scope(p, policy)))
}

/// The policy that covers `listener`: of the most specific targets the listener has a policy
/// for that can be enforced, the one holding it.
fn covering<'a>(rivals: &'a [DNSPolicy], listener: &Coverable) -> Option<&'a DNSPolicy> {
    rivals
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && is_valid(p))
        .filter_map(|p| Some((specificity(p, listener)?, p)))
        .filter(|(_, p)| scope_holder(p, rivals).is_some_and(|h| h.uid() == p.uid()))
        .max_by_key(|(specificity, _)| *specificity)
        .map(|(_, p)| p)
}

/// The keys of the listeners a policy covers: those it targets but the ones a more specific
/// policy holds (a policy for one listener, of the Gateway or of a ListenerSet, wins it from
/// one for the ListenerSet, which wins it from a Gateway-wide one: GEP-713). Between equals
/// (two policies with one target) the oldest holds, then by name, and the others are refused
/// as `Conflicted`. `rivals` are the policies of the policy's namespace on its Gateway, itself
/// among them; `target` names what it targets, for messages.
pub fn coverage(
    policy: &DNSPolicy,
    rivals: &[DNSPolicy],
    listeners: &[Coverable],
    target: &str,
) -> Result<Vec<String>, Refusal> {
    let section = policy.spec.target_ref.section_name.as_deref();
    let targeted: Vec<&Coverable> = listeners
        .iter()
        .filter(|l| specificity(policy, l).is_some())
        .collect();
    let target = match section {
        Some(section) => format!("{target} listener {section}"),
        None => target.to_string(),
    };
    if section.is_some() && targeted.is_empty() {
        return Err(Refusal::TargetNotFound { target });
    }
    if let Some(holder) = scope_holder(policy, rivals)
        && holder.uid() != policy.uid()
    {
        return Err(Refusal::Conflicted {
            target,
            holder: holder.name_any(),
        });
    }
    Ok(targeted
        .into_iter()
        .filter(|l| covering(rivals, l).is_none_or(|c| specificity(c, l) <= specificity(policy, l)))
        .map(|l| l.key.clone())
        .collect())
}

/// Which policy covers each of `listeners`, by [`coverage`]'s rules, by key. `rivals` are
/// every policy on the Gateway. A listener no policy covers is left out.
pub fn listener_holders(rivals: &[DNSPolicy], listeners: &[Coverable]) -> BTreeMap<String, String> {
    listeners
        .iter()
        .filter_map(|l| Some((l.key.clone(), covering(rivals, l)?.name_any())))
        .collect()
}

/// The keys of the listeners whose records the policy leaves to others rather than delete:
/// those it does not cover (`covered`) that another policy does. For a Gateway-wide policy,
/// those more specific policies hold; for one whose target moved or narrowed, the listeners it
/// had (its old listener's record passes to the one covering it in place instead of being
/// withdrawn).
fn handed_over(
    policy: &DNSPolicy,
    rivals: &[DNSPolicy],
    listeners: &[Coverable],
    covered: &[String],
) -> Vec<String> {
    listeners
        .iter()
        .filter(|l| !covered.contains(&l.key))
        .filter(|l| covering(rivals, l).is_some_and(|c| c.uid() != policy.uid()))
        .map(|l| l.key.clone())
        .collect()
}

/// Whether the policy's own fields can be enforced (what [`gather`] refuses as `Invalid`).
pub fn is_valid(policy: &DNSPolicy) -> bool {
    target_namespace(policy).is_ok()
        && routing_strategy(policy.spec.routing_strategy, &policy.spec.load_balancing).is_ok()
        && answer_ttl(policy.spec.ttl.as_deref()).is_ok()
        && Exclusions::parse(&policy.spec.exclude_addresses).is_ok()
}

/// The policy that holds a target when several have it: the oldest, then by name.
fn holder<'a>(policies: impl Iterator<Item = &'a DNSPolicy>) -> Option<&'a DNSPolicy> {
    policies
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .min_by(|a, b| {
            (
                a.metadata.creation_timestamp.as_ref().map(|t| t.0),
                a.name_any(),
            )
                .cmp(&(
                    b.metadata.creation_timestamp.as_ref().map(|t| t.0),
                    b.name_any(),
                ))
        })
}

/// The namespace a policy may target: its own. A `targetRef.namespace` naming another is
/// refused, as Gateway API refuses a reference across namespaces that the target's namespace
/// did not grant: a team with rights in one namespace would otherwise publish another team's
/// Gateway under its own names and write that Gateway's conditions.
pub fn target_namespace(policy: &DNSPolicy) -> Result<String, Refusal> {
    let namespace = policy.namespace().unwrap_or_default();
    match policy.spec.target_ref.namespace.as_deref() {
        None => Ok(namespace),
        Some(target) if target == namespace => Ok(namespace),
        Some(target) => Err(Refusal::Invalid(format!(
            "targetRef.namespace {target} is not the policy's namespace {namespace}: a DNSPolicy applies to a Gateway or ListenerSet of its own namespace"
        ))),
    }
}

/// Every policy on the Gateway `namespace/name`, of any namespace: those targeting it, and
/// those targeting a ListenerSet that names it.
pub fn policies_on_gateway(
    caches: &crate::runtime::caches::Caches,
    namespace: &str,
    name: &str,
) -> Vec<Arc<DNSPolicy>> {
    let mut policies: Vec<Arc<DNSPolicy>> = caches
        .policies
        .group(&indexes::group_key(namespace, name))
        .into_iter()
        .filter(|p| targets(p, namespace, name))
        .collect();
    for set in caches
        .listener_sets
        .group(&indexes::group_key(namespace, name))
    {
        let set_namespace = set.namespace().unwrap_or_default();
        policies.extend(
            caches
                .policies
                .group(&indexes::listener_set_policies(
                    &set_namespace,
                    &set.name_any(),
                ))
                .into_iter()
                // Another namespace's policy naming it is refused, and covers nothing.
                .filter(|p| {
                    p.spec.target_ref.is_listener_set()
                        && p.metadata.namespace.as_deref() == Some(set_namespace.as_str())
                }),
        );
    }
    policies
}

/// The policies of `policy`'s namespace on the Gateway `gateway` (namespace, name), itself
/// among them.
pub fn rivals(policy: &DNSPolicy, gateway: (&str, &str), ctx: &Context) -> Vec<DNSPolicy> {
    let namespace = policy.namespace();
    policies_on_gateway(&ctx.caches, gateway.0, gateway.1)
        .iter()
        .filter(|p| p.metadata.namespace == namespace)
        .map(|p| (**p).clone())
        .collect()
}

/// How long a deleted policy for one listener, or for a ListenerSet, waits for the policy
/// covering its listeners next to take their records over before it deletes them anyway.
pub const HANDOVER_GRACE: std::time::Duration = std::time::Duration::from_secs(120);

/// The records a deleted `policy` leaves for another to take over in place, rather than
/// withdraw: those of the listeners of `gateway` it targets (a listener, or a ListenerSet's)
/// that a valid policy not being deleted will cover once it is gone (one for the ListenerSet,
/// the Gateway-wide one, or another for the same target), for [`HANDOVER_GRACE`] after the
/// deletion.
pub fn handed_back(
    policy: &DNSPolicy,
    rivals: &[DNSPolicy],
    gateway: &str,
    listeners: &[Coverable],
    now: Timestamp,
) -> Vec<String> {
    let target = &policy.spec.target_ref;
    if !target.is_listener_set() && target.section_name.is_none() {
        return Vec::new();
    }
    let within_grace = policy
        .metadata
        .deletion_timestamp
        .as_ref()
        .is_none_or(|deleted| {
            now.duration_since(deleted.0).as_secs() < HANDOVER_GRACE.as_secs() as i64
        });
    if !within_grace {
        return Vec::new();
    }
    let successors: Vec<DNSPolicy> = rivals
        .iter()
        .filter(|p| p.uid() != policy.uid())
        .cloned()
        .collect();
    listeners
        .iter()
        .filter(|l| specificity(policy, l).is_some())
        .filter(|l| covering(&successors, l).is_some())
        .map(|l| crate::decide::desired::record_name(gateway, &l.key))
        .flat_map(|name| [crate::decide::desired::delegated_record_name(&name), name])
        .collect()
}

/// For a policy being deleted: its Gateway (namespace, name), the policies of its namespace
/// on it, and the listeners they may cover. A Gateway gone leaves a policy for a listener, or
/// for a ListenerSet, the listeners it named, so their records still pass to the Gateway-wide
/// policy. `None` while ListenerSets cannot be read: which records pass to whom is not known.
pub fn remembered_gateway(policy: &DNSPolicy, ctx: &Context) -> Option<Remembered> {
    let namespace = policy.namespace().unwrap_or_default();
    let target = &policy.spec.target_ref;
    if let Ok((gateway, sets)) = policy_gateway(policy, ctx) {
        let key = (gateway.namespace().unwrap_or_default(), gateway.name_any());
        let rivals = rivals(policy, (&key.0, &key.1), ctx);
        return Some(Remembered {
            listeners: coverable(&gateway, &sets),
            gateway: key,
            rivals,
        });
    }
    let nothing = |namespace: String| Remembered {
        gateway: (namespace, target.name.clone()),
        rivals: Vec::new(),
        listeners: Vec::new(),
    };
    if target_namespace(policy).is_err() {
        return Some(nothing(namespace));
    }
    if !target.is_listener_set() {
        let key = (namespace, target.name.clone());
        let rivals = rivals(policy, (&key.0, &key.1), ctx);
        let listeners = target
            .section_name
            .iter()
            .map(|s| Coverable::own(s))
            .collect();
        return Some(Remembered {
            gateway: key,
            rivals,
            listeners,
        });
    }
    if !ctx.caches.listener_sets.readable() {
        return None;
    }
    // The ListenerSet is gone (its listeners with it), or names another namespace's Gateway
    // (the policy was refused), or its Gateway is gone.
    let set = ctx.caches.listener_sets.get(Some(&namespace), &target.name);
    let parent = set
        .as_deref()
        .and_then(crate::decide::listener_sets::parent)
        .filter(|(gateway_namespace, _)| *gateway_namespace == namespace);
    let (Some(set), Some(key)) = (set, parent) else {
        return Some(nothing(namespace));
    };
    let rivals = rivals(policy, (&key.0, &key.1), ctx);
    let listeners = set
        .spec
        .listeners
        .iter()
        .map(|l| Coverable {
            key: format!(
                "{}.{}",
                crate::decide::listener_sets::set_key(&key.0, &namespace, &target.name),
                l.name
            ),
            set: Some((namespace.clone(), target.name.clone())),
            name: l.name.clone(),
        })
        .collect();
    Some(Remembered {
        gateway: key,
        rivals,
        listeners,
    })
}

/// What a deleted policy's records pass by ([`remembered_gateway`]).
pub struct Remembered {
    /// Its Gateway: namespace, name.
    pub gateway: (String, String),
    /// The policies of its namespace on that Gateway, itself among them.
    pub rivals: Vec<DNSPolicy>,
    /// The listeners they may cover.
    pub listeners: Vec<Coverable>,
}

/// The Gateway a policy is enforced on, and the ListenerSets attached to it: the Gateway it
/// targets, or the parent of the ListenerSet it targets, which must be a Gateway of the
/// policy's namespace that admits it.
fn policy_gateway(
    policy: &DNSPolicy,
    ctx: &Context,
) -> Result<(Arc<Gateway>, crate::decide::listener_sets::Attached), Refusal> {
    let namespace = target_namespace(policy)?;
    let target = &policy.spec.target_ref;
    let gateway_of = |gateway_namespace: &str, name: &str| {
        ctx.caches
            .gateways
            .get(Some(gateway_namespace), name)
            .ok_or_else(|| Refusal::TargetNotFound {
                target: format!("Gateway {gateway_namespace}/{name}"),
            })
    };
    let attached_to = |gateway: &Gateway| {
        crate::decide::listener_sets::attached(
            gateway,
            &ctx.caches.listener_sets.group(&indexes::group_key(
                &gateway.namespace().unwrap_or_default(),
                &gateway.name_any(),
            )),
        )
    };
    if !target.is_listener_set() {
        let gateway = gateway_of(&namespace, &target.name)?;
        let sets = attached_to(&gateway);
        return Ok((gateway, sets));
    }
    let Some(set) = ctx.caches.listener_sets.get(Some(&namespace), &target.name) else {
        return Err(Refusal::TargetNotFound {
            target: if ctx.caches.listener_sets.readable() {
                format!("ListenerSet {namespace}/{}", target.name)
            } else {
                format!(
                    "ListenerSet {namespace}/{} (ListenerSets cannot be read: not served, or not allowed)",
                    target.name
                )
            },
        });
    };
    let Some((gateway_namespace, gateway_name)) = crate::decide::listener_sets::parent(&set) else {
        return Err(Refusal::Invalid(format!(
            "ListenerSet {} names no Gateway as its parent",
            target.name
        )));
    };
    if gateway_namespace != namespace {
        return Err(Refusal::Invalid(format!(
            "ListenerSet {} is attached to Gateway {gateway_namespace}/{gateway_name} of another namespace: a DNSPolicy for it is not supported (a Gateway-wide policy of {gateway_namespace} publishes its listeners)",
            target.name
        )));
    }
    let gateway = gateway_of(&gateway_namespace, &gateway_name)?;
    let sets = attached_to(&gateway);
    if !sets
        .listeners
        .iter()
        .any(|l| l.namespace == namespace && l.set == target.name)
    {
        let why = crate::decide::listener_sets::admits(&gateway, &namespace)
            .err()
            .unwrap_or_else(|| {
                "none of its listeners is added (the Gateway-wide policy's status says why)".into()
            });
        return Err(Refusal::Invalid(format!(
            "ListenerSet {} adds no listener to Gateway {gateway_name}: {why}",
            target.name
        )));
    }
    if let Some(section) = target.section_name.as_deref()
        && set.spec.listeners.iter().any(|l| l.name == section)
        && !sets.listeners.iter().any(|l| {
            l.publish
                && l.namespace == namespace
                && l.set == target.name
                && l.listener.name == section
        })
    {
        return Err(Refusal::Invalid(format!(
            "listener {section} of ListenerSet {} publishes no DNS on Gateway {gateway_name} (an earlier listener has its hostname, or it is refused: the Gateway-wide policy's status says why)",
            target.name
        )));
    }
    Ok((gateway, sets))
}

pub fn gather(policy: &DNSPolicy, ctx: &Context) -> Result<Seen, Refusal> {
    let namespace = policy.namespace().unwrap_or_default();
    let target = &policy.spec.target_ref;
    let (gateway, sets) = policy_gateway(policy, ctx)?;
    let gateway_namespace = gateway.namespace().unwrap_or_default();
    let gateway_name = gateway.name_any();
    let rivals = rivals(policy, (&gateway_namespace, &gateway_name), ctx);
    let coverable = coverable(&gateway, &sets);
    let covered = coverage(
        policy,
        &rivals,
        &coverable,
        &format!(
            "{} {namespace}/{}",
            if target.is_listener_set() {
                "ListenerSet"
            } else {
                "Gateway"
            },
            target.name
        ),
    )?;
    let strategy = routing_strategy(policy.spec.routing_strategy, &policy.spec.load_balancing)
        .map_err(|problem| Refusal::Invalid(problem.to_string()))?;
    let answer_ttl = answer_ttl(policy.spec.ttl.as_deref()).map_err(Refusal::Invalid)?;
    let excluded = Exclusions::parse(&policy.spec.exclude_addresses).map_err(Refusal::Invalid)?;

    let namespace_zones: Vec<Arc<ManagedZone>> = ctx
        .caches
        .zones
        .state()
        .into_iter()
        .filter(|zone| zone.namespace().as_deref() == Some(namespace.as_str()))
        .collect();
    let mut zones: Vec<ZoneRef> = namespace_zones
        .iter()
        .map(|zone| ZoneRef {
            name: zone.name_any(),
            domain: zone.spec.domain_name.clone(),
        })
        .collect();
    let zone_fidelity = namespace_zones
        .iter()
        .filter_map(|zone| {
            Some((
                zone.name_any(),
                meridian_dns::fidelity::of_provider(zone_provider_kind(zone, ctx)?)?,
            ))
        })
        .collect();
    let zone_delegates = zone_delegates(&namespace_zones, |namespace, name| {
        ctx.caches.records.get(Some(namespace), name)
    });
    // In the order the API server lists them, so equal candidates resolve the same way.
    zones.sort_by(|a, b| a.name.cmp(&b.name));
    // The Gateway's own listeners, then those of the ListenerSets it admits: the ones the
    // policy covers.
    let hostnames = gateway
        .spec
        .listeners
        .iter()
        .map(|l| (l.name.clone(), l.hostname.clone()))
        .chain(
            sets.listeners
                .iter()
                .map(|l| (l.key.clone(), l.listener.hostname.clone())),
        );
    let listeners: Vec<ListenerRef> = hostnames
        .filter(|(key, _)| covered.contains(key))
        .map(|(name, hostname)| ListenerRef { name, hostname })
        .collect();
    let gateway_wide = !target.is_listener_set() && target.section_name.is_none();
    // What the ListenerSets add is the Gateway-wide policy's to explain.
    let mut listener_set_problems = if gateway_wide {
        sets.problems
    } else {
        Vec::new()
    };
    // A record moved into a routing delegate passes over with its delegated half.
    let mut handed_over: Vec<String> = handed_over(policy, &rivals, &coverable, &covered)
        .iter()
        .map(|key| crate::decide::desired::record_name(&gateway_name, key))
        .flat_map(|name| [crate::decide::desired::delegated_record_name(&name), name])
        .collect();
    // Fail static: while ListenerSets cannot be read (not served, or not allowed), the records
    // their listeners published stay as they are: every record of the policy that none of
    // the Gateway's own listeners makes.
    if !ctx.caches.listener_sets.readable() && gateway_wide {
        let own: std::collections::BTreeSet<String> = gateway
            .spec
            .listeners
            .iter()
            .map(|listener| crate::decide::desired::record_name(&gateway_name, &listener.name))
            .collect();
        let kept: Vec<String> = records_of(policy, ctx)
            .iter()
            .map(ResourceExt::name_any)
            .filter(|name| !own.contains(name))
            .collect();
        if !kept.is_empty() {
            listener_set_problems.push(format!(
                "ListenerSets cannot be read (not served, or not allowed): DNSRecords {} stay as they are",
                kept.join(", ")
            ));
        }
        handed_over.extend(kept);
    }
    let clusters = match &ctx.config.distributed {
        None => placed_clusters(&gateway, ctx)?,
        // This cluster's branch alone, from the Gateway the policy targets here.
        Some(local) => vec![PlacedCluster {
            name: local.name.clone(),
            labels: local.labels.clone(),
            cluster_id: Some(local.cluster_id.clone()),
            gateway: Some(GatewayReport::from_gateway(&gateway, &[], &[])),
            silent_for: None,
            weight_percent: 100,
        }],
    };
    let marked_for_drain: Vec<(String, bool)> = clusters
        .iter()
        .map(|c| (c.name.clone(), is_marked_for_drain(&c.labels)))
        .collect();
    let key = crate::object_key("DNSPolicy", Some(&namespace), &policy.name_any());
    let fleet = clusters
        .iter()
        .any(|c| c.silent_for.is_some())
        .then(|| FleetSeen {
            heard: fleet_brake::heard(ctx),
            recalled: ctx.brake_memory.recalled(),
            threshold_percent: ctx.config.fleet_brake_percent,
        });
    let silence = SilenceRules {
        timeout: ctx.config.heartbeat_timeout,
        health_checked: policy.spec.health_check.is_some(),
        brake: FleetBrake::default(),
        withdrawal_percent: ctx.config.silence_withdrawal_percent,
    };
    let now = (ctx.clock)();
    Ok(Seen {
        silence,
        gateway_ref: GatewayRef {
            name: gateway_name,
            namespace: gateway_namespace,
        },
        handed_over,
        foreign_records: foreign_records(policy, &gateway, &listeners, ctx),
        gateway,
        listeners,
        listener_set_problems,
        gateway_wide,
        coverable,
        rivals,
        strategy,
        answer_ttl,
        excluded,
        zones,
        zone_fidelity,
        zone_delegates,
        clusters,
        fleet,
        marked_for_drain,
        // A restarted controller (an agent restarted to change its cluster's labels, in
        // distributed mode) takes the drains up where its status left them.
        drains: ctx.drains.recalled(&key).or_else(|| {
            crate::reconcile::memory::drains::drains_in_status(
                policy.status.as_ref(),
                now.as_second().max(0) as u64,
            )
        }),
        drain_step_seconds: u64::from(answer_ttl.unwrap_or(meridian_dns::tree::LEAF_TTL)),
        now,
        now_seconds: now.as_second().max(0) as u64,
        key,
    })
}

/// The records this policy's listeners would be written as that exist and that another owner
/// holds ([`foreign_holder`]): name → who. Applying would take such a record over and
/// rewrite what its owner publishes.
fn foreign_records(
    policy: &DNSPolicy,
    gateway: &Gateway,
    listeners: &[ListenerRef],
    ctx: &Context,
) -> BTreeMap<String, String> {
    let namespace = policy.namespace().unwrap_or_default();
    let gateway = gateway.name_any();
    listeners
        .iter()
        .filter_map(|listener| {
            let name = crate::decide::desired::record_name(&gateway, &listener.name);
            let record = ctx.caches.records.get(Some(&namespace), &name)?;
            Some((name, foreign_holder(&record, policy, ctx)?))
        })
        .collect()
}

/// Who holds `record` when it is neither this policy's nor free to take: `None` when it is
/// this policy's, another's on the same Gateway (they hand records over in place), or a
/// policy's that no longer exists (it goes with that policy). A record with no policy's label
/// (written by hand, or the hub's own) or of a policy on another Gateway (`a` + `b-c` and
/// `a-b` + `c` both make `a-b-c`) is another owner's.
pub fn foreign_holder(record: &DNSRecord, policy: &DNSPolicy, ctx: &Context) -> Option<String> {
    let namespace = policy.namespace().unwrap_or_default();
    let Some(holder) = record.labels().get(crate::POLICY_LABEL) else {
        return Some("no DNSPolicy (written by hand or by the hub)".to_string());
    };
    if *holder == policy.name_any() {
        return None;
    }
    let other = ctx.caches.policies.get(Some(&namespace), holder)?;
    let sets = ctx.caches.listener_sets.state();
    (indexes::policy_gateway(&other, &sets) != indexes::policy_gateway(policy, &sets))
        .then(|| format!("DNSPolicy {holder}, which targets another Gateway"))
}

/// Whether a ManagedCluster's labels mark it for drain: the drain label with any value but
/// `false`.
fn is_marked_for_drain(labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels
        .get(DRAIN_LABEL)
        .is_some_and(|value| !value.eq_ignore_ascii_case("false"))
}

/// The policy's `ttl` in whole seconds (at least one); the schema refuses what cannot be one,
/// this says why for a policy written before it did.
fn answer_ttl(ttl: Option<&str>) -> Result<Option<u32>, String> {
    let Some(text) = ttl else {
        return Ok(None);
    };
    meridian_api::duration::parse_duration(text)
        .map(|duration| u32::try_from(duration.as_secs().max(1)).unwrap_or(u32::MAX))
        .map(Some)
        .ok_or_else(|| format!("ttl {text:?} is not a duration such as 5s or 1m"))
}

/// The clusters the Gateway's Placement decided, with their labels, reports and silences,
/// from the caches. (A cluster going silent wakes the policy through the fleet's one silence
/// timer, [`super::triggers`].) A Placement with no PlacementDecision at all is undecided, not
/// empty: OCM writes an empty decision for a Placement it has scheduled, so fail static until
/// it has (as the gateway placement does).
fn placed_clusters(gateway: &Gateway, ctx: &Context) -> Result<Vec<PlacedCluster>, Refusal> {
    let namespace = gateway.namespace().unwrap_or_default();
    let Some(placement) = gateway.labels().get(PLACEMENT_LABEL) else {
        return Ok(Vec::new());
    };
    let decisions = ctx
        .caches
        .decisions
        .group(&indexes::group_key(&namespace, placement));
    if decisions.is_empty() {
        return Err(Refusal::Undecided {
            placement: placement.clone(),
        });
    }
    let names = indexes::decided_clusters(&decisions, &namespace, placement);
    let downstream = downstream_namespace(&namespace);
    let now = (ctx.clock)();
    let mut clusters = Vec::new();
    for name in names {
        // A cluster that is gone from OCM is gone from DNS.
        let Some(cluster) = ctx.caches.clusters.get(None, &name) else {
            continue;
        };
        let report = ctx.report_of(&name);
        let heard = ctx.last_heard(&name, report.as_deref());
        let silent_for = silence(heard, now, ctx.config.heartbeat_timeout);
        clusters.push(PlacedCluster {
            name: name.clone(),
            labels: cluster.labels().clone(),
            silent_for,
            cluster_id: report.as_ref().map(|r| r.spec.cluster_id.clone()),
            gateway: report.and_then(|r| {
                r.spec
                    .gateways
                    .iter()
                    .find(|g| g.name == gateway.name_any() && g.namespace == downstream)
                    .cloned()
            }),
            weight_percent: 100,
        });
    }
    Ok(clusters)
}

/// The policy's DNSRecords.
pub fn records_of(policy: &DNSPolicy, ctx: &Context) -> Vec<DNSRecord> {
    let namespace = policy.namespace().unwrap_or_default();
    ctx.caches
        .records
        .group(&indexes::group_key(&namespace, &policy.name_any()))
        .iter()
        .map(|r| (**r).clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_routing_delegate_is_used_only_once_its_delegation_is_published_and_it_serves_one_zone() {
        let zone = |name: &str, domain: &str, delegate: Option<&str>, delegated: Option<&str>| {
            let secret = delegate.map(|_| serde_json::json!({ "name": "webhook" }));
            let conditions: Vec<serde_json::Value> = delegated
                .map(|status| {
                    serde_json::json!({
                        "type": meridian_api::conditions::ROUTING_DELEGATED, "status": status,
                        "reason": "Published", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
                    })
                })
                .into_iter()
                .collect();
            Arc::new(
                serde_json::from_value::<ManagedZone>(serde_json::json!({
                    "apiVersion": "kuadrant.io/v1alpha1", "kind": "ManagedZone",
                    "metadata": { "name": name, "namespace": "team" },
                    "spec": { "domainName": domain, "dnsProviderSecretRef": secret, "routingDelegate": delegate },
                    "status": { "conditions": conditions },
                }))
                .unwrap(),
            )
        };
        let record = |zone: &str, root: &str, labelled: bool| {
            let labels = if labelled {
                serde_json::json!({ meridian_api::labels::ROUTING_DELEGATE_LABEL: zone })
            } else {
                serde_json::json!({})
            };
            Arc::new(
                serde_json::from_value::<DNSRecord>(serde_json::json!({
                    "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSRecord",
                    "metadata": { "name": format!("{zone}-routing-delegate"), "namespace": "team", "labels": labels },
                    "spec": { "rootHost": root, "managedZone": { "name": zone }, "endpoints": [] },
                }))
                .unwrap(),
            )
        };
        let delegates = |zones: &[Arc<ManagedZone>], held: Option<Arc<DNSRecord>>| {
            zone_delegates(zones, |namespace, name| {
                held.clone()
                    .filter(|r| r.namespace().as_deref() == Some(namespace) && r.name_any() == name)
            })
        };
        let klb = zone("klb", "klb.example.com", None, None);
        let published = Some(record("example", "klb.example.com", true));
        let parent = zone("example", "example.com", Some("klb"), Some("True"));
        assert_eq!(
            delegates(&[parent.clone(), klb.clone()], published.clone()),
            BTreeMap::from([(
                "example".to_string(),
                ZoneRef {
                    name: "klb".into(),
                    domain: "klb.example.com".into()
                }
            )])
        );
        // Not yet said to be published, or no longer.
        for status in [None, Some("False")] {
            let waiting = zone("example", "example.com", Some("klb"), status);
            assert!(delegates(&[waiting, klb.clone()], published.clone()).is_empty());
        }
        // Said, but the delegation held is another delegate's, not labelled, or missing.
        for held in [
            Some(record("example", "old.example.com", true)),
            Some(record("example", "klb.example.com", false)),
            None,
        ] {
            assert!(delegates(&[parent.clone(), klb.clone()], held).is_empty());
        }
        // A delegate two zones name serves neither.
        let other = zone("other", "a.example.com", Some("klb"), Some("True"));
        assert!(delegates(&[parent.clone(), other, klb.clone()], published.clone()).is_empty());
        // A delegate at a provider is none.
        let at_provider = zone("klb", "klb.example.com", Some("x"), None);
        assert!(delegates(&[parent, at_provider], published).is_empty());
    }

    fn policy(namespace: &str, target_namespace: Option<&str>) -> DNSPolicy {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kuadrant.io/v1alpha1", "kind": "DNSPolicy",
            "metadata": { "name": "p", "namespace": namespace },
            "spec": { "targetRef": {
                "group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "web",
                "namespace": target_namespace,
            } },
        }))
        .expect("a policy")
    }

    #[test]
    fn a_policy_reaches_only_its_own_namespaces_gateways() {
        assert_eq!(target_namespace(&policy("shop", None)), Ok("shop".into()));
        assert_eq!(
            target_namespace(&policy("shop", Some("shop"))),
            Ok("shop".into())
        );
        let Err(Refusal::Invalid(message)) = target_namespace(&policy("mallory", Some("shop")))
        else {
            panic!("another namespace's Gateway is refused");
        };
        assert!(message.contains("targetRef.namespace shop"), "{message}");
        assert!(message.contains("namespace mallory"), "{message}");
    }

    /// `name` created at second `created`, for `section` (or the whole Gateway).
    fn on_web(name: &str, created: i64, section: Option<&str>) -> DNSPolicy {
        let mut policy = policy("shop", None);
        policy.metadata.name = Some(name.into());
        policy.metadata.uid = Some(format!("uid-{name}"));
        policy.metadata.creation_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                Timestamp::from_second(created).unwrap(),
            ));
        policy.spec.target_ref.section_name = section.map(str::to_string);
        policy
    }

    /// `name` created at second `created`, for the ListenerSet `set` (or its listener).
    fn on_set(name: &str, created: i64, set: &str, section: Option<&str>) -> DNSPolicy {
        let mut policy = on_web(name, created, section);
        policy.spec.target_ref.kind = "ListenerSet".into();
        policy.spec.target_ref.name = set.into();
        policy
    }

    /// The Gateway's listeners `api`, `www` and `shop`, and the ListenerSet `team`'s `docs`
    /// and `blog` (of the namespace), and `mallory`'s `docs` of another.
    fn listeners() -> Vec<Coverable> {
        let set = |namespace: &str, set: &str, name: &str| Coverable {
            key: if namespace == "shop" {
                format!("{set}.{name}")
            } else {
                format!("{namespace}.{set}.{name}")
            },
            set: Some((namespace.into(), set.into())),
            name: name.into(),
        };
        vec![
            Coverable::own("api"),
            Coverable::own("www"),
            Coverable::own("shop"),
            set("shop", "team", "docs"),
            set("shop", "team", "blog"),
            set("mallory", "team", "docs"),
        ]
    }

    fn keys(keys: &[&str]) -> Result<Vec<String>, Refusal> {
        Ok(keys.iter().map(|k| k.to_string()).collect())
    }

    #[test]
    fn the_most_specific_policy_covers_a_listener_and_equals_conflict_oldest_first() {
        let listeners = listeners();
        let wide = on_web("wide", 10, None);
        let wide_later = on_web("wide-later", 20, None);
        let api = on_web("api", 30, Some("api"));
        let api_older = on_web("api-older", 5, Some("api"));
        let www = on_web("www", 40, Some("www"));
        let nowhere = on_web("nowhere", 50, Some("missing"));
        // A Gateway listener policy does not name a ListenerSet's listener.
        let docs_on_gateway = on_web("docs-on-gateway", 50, Some("docs"));
        let team = on_set("team", 60, "team", None);
        let blog = on_set("blog", 70, "team", Some("blog"));
        let blog_later = on_set("blog-later", 80, "team", Some("blog"));
        let team_api = on_set("team-api", 90, "team", Some("api"));
        let other_set = on_set("other-set", 90, "other", None);
        let mut deleting = on_web("shop", 1, Some("shop"));
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        // An older policy for a ListenerSet of that name in another namespace (refused) is no
        // equal of the one for this namespace's.
        let mut elsewhere = on_set("elsewhere", 1, "team", None);
        elsewhere.spec.target_ref.namespace = Some("mallory".into());
        let all = [
            elsewhere,
            wide.clone(),
            wide_later.clone(),
            api.clone(),
            api_older.clone(),
            www.clone(),
            nowhere.clone(),
            team.clone(),
            blog.clone(),
            blog_later.clone(),
            deleting.clone(),
        ];
        let conflicted = |holder: &str, target: &str| {
            Err(Refusal::Conflicted {
                target: target.into(),
                holder: holder.into(),
            })
        };
        let not_found = |target: &str| {
            Err(Refusal::TargetNotFound {
                target: target.into(),
            })
        };
        let cases: [(&DNSPolicy, Result<Vec<String>, Refusal>); 12] = [
            // The Gateway-wide holder covers what no more specific policy holds: the listener
            // being deleted leaves its own back, and another namespace's ListenerSet has no
            // policy of this namespace.
            (&wide, keys(&["shop", "mallory.team.docs"])),
            (&wide_later, conflicted("wide", "t")),
            (&api, conflicted("api-older", "t listener api")),
            (&api_older, keys(&["api"])),
            (&www, keys(&["www"])),
            (&nowhere, not_found("t listener missing")),
            (&docs_on_gateway, not_found("t listener docs")),
            // The ListenerSet's policy leaves its listener to that listener's policy.
            (&team, keys(&["team.docs"])),
            (&blog, keys(&["team.blog"])),
            (&blog_later, conflicted("blog", "t listener blog")),
            // A ListenerSet policy names its own ListenerSet's listeners only.
            (&team_api, not_found("t listener api")),
            (&other_set, keys(&[])),
        ];
        for (policy, expected) in cases {
            let mut rivals = all.to_vec();
            if !rivals.iter().any(|r| r.uid() == policy.uid()) {
                rivals.push(policy.clone());
            }
            assert_eq!(
                coverage(policy, &rivals, &listeners, "t"),
                expected,
                "{}",
                policy.name_any()
            );
        }
        // A younger equal takes over from one being deleted.
        let shop_new = on_web("shop-new", 60, Some("shop"));
        let mut rivals = all.to_vec();
        rivals.push(shop_new.clone());
        assert_eq!(
            coverage(&shop_new, &rivals, &listeners, "t"),
            keys(&["shop"])
        );
    }

    #[test]
    fn each_listener_names_the_policy_that_covers_it() {
        let mut listeners = listeners();
        listeners.push(Coverable::own("bad"));
        let mut deleting = on_web("shop", 1, Some("shop"));
        deleting.metadata.deletion_timestamp = deleting.metadata.creation_timestamp.clone();
        let mut invalid = on_web("bad", 1, Some("bad"));
        invalid.spec.ttl = Some("soon".into());
        let mut invalid_set = on_set("team-bad", 1, "team", None);
        invalid_set.spec.ttl = Some("soon".into());
        let rivals = [
            on_web("wide-later", 20, None),
            on_web("wide", 10, None),
            on_web("api", 30, Some("api")),
            on_web("api-older", 5, Some("api")),
            on_web("nowhere", 50, Some("missing")),
            on_set("blog", 70, "team", Some("blog")),
            deleting,
            invalid,
            // The oldest for the ListenerSet cannot be enforced: nobody holds the ListenerSet,
            // and the Gateway-wide policy covers it.
            invalid_set,
            on_set("team", 60, "team", None),
        ];
        let holders = listener_holders(&rivals, &listeners);
        let expected: BTreeMap<String, String> = [
            // The oldest of equals, as coverage has it.
            ("api", "api-older"),
            // No listener policy: the Gateway-wide holder.
            ("www", "wide"),
            // One being deleted, or one that cannot be enforced, leaves it to the Gateway-wide.
            ("shop", "wide"),
            ("bad", "wide"),
            ("team.docs", "wide"),
            ("team.blog", "blog"),
            ("mallory.team.docs", "wide"),
        ]
        .into_iter()
        .map(|(l, p)| (l.to_string(), p.to_string()))
        .collect();
        assert_eq!(holders, expected);
        // With no Gateway-wide policy, a listener no policy holds is left out.
        let only_api = [on_web("api", 30, Some("api"))];
        assert_eq!(
            listener_holders(&only_api, &listeners),
            [("api".to_string(), "api".to_string())].into()
        );
    }

    #[test]
    fn a_policy_leaves_the_records_of_listeners_another_covers() {
        let listeners = listeners();
        let wide = on_web("wide", 10, None);
        let api = on_web("api", 30, Some("api"));
        let team = on_set("team", 60, "team", None);
        let rivals = [wide.clone(), api.clone(), team.clone()];
        let left = |policy: &DNSPolicy| {
            let covered = coverage(policy, &rivals, &listeners, "t").unwrap();
            handed_over(policy, &rivals, &listeners, &covered)
        };
        assert_eq!(left(&wide), ["api", "team.docs", "team.blog"]);
        // A narrower policy leaves what the others cover: a record of a listener it had passes
        // to the one covering it now.
        assert_eq!(
            left(&api),
            ["www", "shop", "team.docs", "team.blog", "mallory.team.docs"]
        );
        assert_eq!(left(&team), ["api", "www", "shop", "mallory.team.docs"]);
        // Alone, a ListenerSet's policy leaves nothing to anyone.
        let alone = [team.clone()];
        let covered = coverage(&team, &alone, &listeners, "t").unwrap();
        assert!(handed_over(&team, &alone, &listeners, &covered).is_empty());
    }

    #[test]
    fn a_deleted_narrower_policy_hands_its_records_back_to_the_next_for_a_while() {
        let listeners = listeners();
        let deleted_at = Timestamp::from_second(100).unwrap();
        let deleted = |mut policy: DNSPolicy| {
            policy.metadata.deletion_timestamp = Some(
                k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(deleted_at),
            );
            policy
        };
        let api = deleted(on_web("api", 30, Some("api")));
        let wide = on_web("wide", 10, None);
        let grace = HANDOVER_GRACE.as_secs() as i64;
        let at = |seconds: i64| Timestamp::from_second(100 + seconds).unwrap();
        let back = |policy: &DNSPolicy, rivals: &[DNSPolicy], now| {
            handed_back(policy, rivals, "web", &listeners, now)
        };
        // Each record with its half in a routing delegate, if it has one.
        assert_eq!(
            back(&api, &[api.clone(), wide.clone()], at(1)),
            ["web-api-delegated", "web-api"]
        );
        assert!(back(&api, &[api.clone(), wide.clone()], at(grace)).is_empty());
        // No Gateway-wide policy to take it, or that one is going too: withdrawn.
        assert!(back(&api, std::slice::from_ref(&api), at(1)).is_empty());
        let going = deleted(wide.clone());
        assert!(back(&api, &[api.clone(), going.clone()], at(1)).is_empty());
        // A Gateway-wide policy hands nothing back.
        assert!(back(&going, &[going.clone(), api.clone()], at(1)).is_empty());
        // A ListenerSet's policy hands its listeners back to the Gateway-wide one, and to the
        // policy of one of them.
        let team = deleted(on_set("team", 60, "team", None));
        let blog = on_set("blog", 70, "team", Some("blog"));
        assert_eq!(
            back(&team, &[team.clone(), wide.clone()], at(1)),
            [
                "web-team.docs-delegated",
                "web-team.docs",
                "web-team.blog-delegated",
                "web-team.blog"
            ]
        );
        assert_eq!(
            back(&team, &[team.clone(), blog.clone()], at(1)),
            ["web-team.blog-delegated", "web-team.blog"]
        );
    }
}
