//! Route scheduling onto router shards (seed 003), the pure part: which shards may serve a
//! route, which of them a strategy picks, which host each binding serves, who wins a host, and
//! what the route's `status.ingress[]` says. The scheduler (`crate::scheduler`) reads the
//! cluster and writes what [`schedule`] returns.
//!
//! Rules, as OpenShift users expect them:
//! - A binding is sticky: it stays while its shard exists and still selects the route.
//! - A route without a host is served at `<namespace>-<name>.<shard suffix>` on each shard; a
//!   route with a host keeps it.
//! - Two routes claiming one host: the older (creation time, then UID) wins; the newer is not
//!   bound, says `HostAlreadyClaimed`, and is scheduled once the older goes.
//! - A route no shard can take says why and is retried on every pass.

use std::collections::BTreeMap;

use meridian_dns::tree::LabelSelector;

/// A router shard as the scheduler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Shard {
    pub name: String,
    /// The public DNS suffix.
    pub dns: String,
    pub route_selector: LabelSelector,
    pub namespace_selector: LabelSelector,
    /// Most routes the shard takes.
    pub capacity: Option<usize>,
}

/// A route as the scheduler sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// Creation time, in seconds; older routes win hosts.
    pub created: i64,
    pub labels: BTreeMap<String, String>,
    pub namespace_labels: BTreeMap<String, String>,
    /// The host the route asks for, if any.
    pub host: Option<String>,
}

impl RouteView {
    fn key(&self) -> (String, String) {
        (self.namespace.clone(), self.name.clone())
    }

    /// Older first: creation time, then UID.
    fn age_key(&self) -> (i64, &str) {
        (self.created, &self.uid)
    }
}

/// A route bound to a shard, serving `host` there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Binding {
    pub namespace: String,
    pub route: String,
    pub router: String,
    pub host: String,
}

/// Picks shards for a new route among those eligible (sorted by name). Returning none leaves
/// the route unscheduled for this pass.
pub trait SchedulingStrategy: Send {
    fn name(&self) -> &'static str;
    /// `load` is each shard's bound routes, including this pass's earlier choices.
    fn choose(
        &mut self,
        route: &RouteView,
        eligible: &[&Shard],
        load: &BTreeMap<String, usize>,
    ) -> Vec<String>;
    /// State to persist across restarts (the round-robin cursor), if the strategy has any.
    fn cursor(&self) -> Option<u64> {
        None
    }
}

/// The seed's first strategy: the next eligible shard after the last one chosen. The cursor
/// counts routes scheduled so far; the scheduler persists it, so a restart does not send the
/// next routes back to the first shard.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RoundRobin {
    pub cursor: u64,
}

impl SchedulingStrategy for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn cursor(&self) -> Option<u64> {
        Some(self.cursor)
    }

    fn choose(
        &mut self,
        _: &RouteView,
        eligible: &[&Shard],
        _: &BTreeMap<String, usize>,
    ) -> Vec<String> {
        if eligible.is_empty() {
            return Vec::new();
        }
        let index = usize::try_from(self.cursor % eligible.len() as u64).unwrap_or(0);
        self.cursor = self.cursor.wrapping_add(1);
        vec![eligible[index].name.clone()]
    }
}

/// Every eligible shard serves the route (the route's labels decide alone).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LabelMatch;

impl SchedulingStrategy for LabelMatch {
    fn name(&self) -> &'static str {
        "label-match"
    }

    fn choose(
        &mut self,
        _: &RouteView,
        eligible: &[&Shard],
        _: &BTreeMap<String, usize>,
    ) -> Vec<String> {
        eligible.iter().map(|s| s.name.clone()).collect()
    }
}

/// The eligible shard with the fewest routes (ties: by name).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LeastLoaded;

impl SchedulingStrategy for LeastLoaded {
    fn name(&self) -> &'static str {
        "least-loaded"
    }

    fn choose(
        &mut self,
        _: &RouteView,
        eligible: &[&Shard],
        load: &BTreeMap<String, usize>,
    ) -> Vec<String> {
        eligible
            .iter()
            .min_by_key(|s| (load.get(&s.name).copied().unwrap_or(0), s.name.clone()))
            .map(|s| vec![s.name.clone()])
            .unwrap_or_default()
    }
}

/// The strategy named on the command line.
pub fn strategy_named(name: &str, cursor: u64) -> Option<Box<dyn SchedulingStrategy>> {
    match name {
        "round-robin" => Some(Box::new(RoundRobin { cursor })),
        "label-match" => Some(Box::new(LabelMatch)),
        "least-loaded" => Some(Box::new(LeastLoaded)),
        _ => None,
    }
}

/// The host a route is served at on a shard.
pub fn route_host(route: &RouteView, shard: &Shard) -> String {
    match &route.host {
        Some(host) if !host.is_empty() => host.clone(),
        _ => format!("{}-{}.{}", route.namespace, route.name, shard.dns),
    }
}

/// Whether a shard selects a route (ignoring capacity).
pub fn selects(shard: &Shard, route: &RouteView) -> bool {
    shard.route_selector.matches(&route.labels)
        && shard.namespace_selector.matches(&route.namespace_labels)
}

/// What a route's status says about one shard (one `status.ingress[]` entry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admission {
    pub host: String,
    /// The shard, or `None` when no shard could take the route.
    pub router: Option<String>,
    pub admitted: bool,
    pub reason: Option<&'static str>,
    pub message: Option<String>,
}

/// Reasons a route is not admitted.
pub mod reasons {
    pub const HOST_ALREADY_CLAIMED: &str = "HostAlreadyClaimed";
    pub const NO_ELIGIBLE_SHARD: &str = "NoEligibleShard";
}

/// The result of one scheduling pass.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Schedule {
    /// Every binding that should exist, sorted.
    pub bindings: Vec<Binding>,
    /// Each route's ingress entries, by (namespace, name).
    pub admissions: BTreeMap<(String, String), Vec<Admission>>,
    /// Bound routes per shard.
    pub load: BTreeMap<String, usize>,
}

/// One pass: keeps sticky bindings, schedules the rest with `strategy`, resolves host claims.
pub fn schedule(
    routes: &[RouteView],
    shards: &[Shard],
    existing: &[Binding],
    strategy: &mut dyn SchedulingStrategy,
) -> Schedule {
    let mut shards: Vec<&Shard> = shards.iter().collect();
    shards.sort_by(|a, b| a.name.cmp(&b.name));
    let mut routes: Vec<&RouteView> = routes.iter().collect();
    routes.sort_by(|a, b| a.age_key().cmp(&b.age_key()));

    let mut result = Schedule::default();
    let mut load: BTreeMap<String, usize> = shards.iter().map(|s| (s.name.clone(), 0)).collect();
    // Hosts claimed so far, by the older routes (routes are visited oldest first).
    let mut claims: BTreeMap<String, (String, String)> = BTreeMap::new();
    // Kept bindings count towards load before anything new is placed.
    let kept: BTreeMap<(String, String), Vec<&Shard>> = routes
        .iter()
        .map(|route| {
            let shards_of_route: Vec<&Shard> = existing
                .iter()
                .filter(|b| b.namespace == route.namespace && b.route == route.name)
                .filter_map(|b| shards.iter().find(|s| s.name == b.router).copied())
                .filter(|shard| selects(shard, route))
                .collect();
            (route.key(), shards_of_route)
        })
        .collect();
    for shard in kept.values().flatten() {
        *load.entry(shard.name.clone()).or_default() += 1;
    }

    for route in routes {
        let key = route.key();
        let mut chosen: Vec<&Shard> = kept.get(&key).cloned().unwrap_or_default();
        let newly_chosen = chosen.is_empty();
        if newly_chosen {
            let eligible: Vec<&Shard> = shards
                .iter()
                .copied()
                .filter(|shard| selects(shard, route))
                .filter(|shard| {
                    shard
                        .capacity
                        .is_none_or(|cap| load.get(&shard.name).copied().unwrap_or(0) < cap)
                })
                .collect();
            // A route whose host an older route holds is not scheduled at all (it would only
            // take capacity), so it is checked before the strategy moves its cursor.
            let blocked = eligible
                .iter()
                .map(|shard| route_host(route, shard))
                .find_map(|host| claims.get(&host).map(|owner| (host, owner.clone())));
            if let Some((host, (owner_ns, owner_name))) = blocked {
                result.admissions.insert(
                    key,
                    vec![Admission {
                        router: eligible.first().map(|s| s.name.clone()),
                        admitted: false,
                        reason: Some(reasons::HOST_ALREADY_CLAIMED),
                        message: Some(format!(
                            "host {host} is claimed by the older route {owner_ns}/{owner_name}"
                        )),
                        host,
                    }],
                );
                continue;
            }
            let picked = strategy.choose(route, &eligible, &load);
            chosen = eligible
                .iter()
                .copied()
                .filter(|shard| picked.contains(&shard.name))
                .collect();
            if chosen.is_empty() {
                let why = if shards.iter().any(|s| selects(s, route)) {
                    "every Router that selects the route is at capacity; retrying"
                } else {
                    "no Router selects the route's labels and namespace; retrying"
                };
                result.admissions.insert(
                    key,
                    vec![Admission {
                        host: route.host.clone().unwrap_or_default(),
                        router: None,
                        admitted: false,
                        reason: Some(reasons::NO_ELIGIBLE_SHARD),
                        message: Some(why.to_string()),
                    }],
                );
                continue;
            }
        }
        let mut admissions = Vec::new();
        let mut winning: Vec<Binding> = Vec::new();
        let mut lost: Option<Admission> = None;
        for shard in &chosen {
            let host = route_host(route, shard);
            if let Some((owner_ns, owner_name)) = claims.get(&host)
                && (owner_ns, owner_name) != (&route.namespace, &route.name)
            {
                lost = Some(Admission {
                    router: Some(shard.name.clone()),
                    admitted: false,
                    reason: Some(reasons::HOST_ALREADY_CLAIMED),
                    message: Some(format!(
                        "host {host} is claimed by the older route {owner_ns}/{owner_name}"
                    )),
                    host,
                });
                continue;
            }
            winning.push(Binding {
                namespace: route.namespace.clone(),
                route: route.name.clone(),
                router: shard.name.clone(),
                host: host.clone(),
            });
            admissions.push(Admission {
                host,
                router: Some(shard.name.clone()),
                admitted: true,
                reason: None,
                message: None,
            });
        }
        if let Some(lost) = lost {
            // An older route took the host since this one was bound: it gives the shard up.
            admissions.push(lost);
        }
        for binding in &winning {
            claims.insert(binding.host.clone(), key.clone());
            if newly_chosen {
                *load.entry(binding.router.clone()).or_default() += 1;
            }
        }
        if !newly_chosen {
            // Kept bindings were counted up front; the ones given up free their place.
            for shard in chosen
                .iter()
                .filter(|s| !winning.iter().any(|b| b.router == s.name))
            {
                if let Some(count) = load.get_mut(&shard.name) {
                    *count = count.saturating_sub(1);
                }
            }
        }
        result.bindings.extend(winning);
        result.admissions.insert(key, admissions);
    }
    result.bindings.sort();
    result.load = load;
    result
}

/// Names of the bindings of a route: `<route>.<router>`, shortened with a digest past the
/// 253 characters an object name may have.
pub fn binding_name(route: &str, router: &str) -> String {
    let name = format!("{route}.{router}");
    if name.len() <= 253 {
        return name;
    }
    let digest = meridian_dns::shortcode::shortcode(&name, 8);
    let prefix: String = name.chars().take(240).collect();
    format!("{}-{digest}", prefix.trim_end_matches(['-', '.']))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(name: &str, selector: &[(&str, &str)], capacity: Option<usize>) -> Shard {
        Shard {
            name: name.into(),
            dns: format!("{name}.apps.example.com"),
            route_selector: LabelSelector {
                match_labels: selector
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                match_expressions: Vec::new(),
            },
            namespace_selector: LabelSelector::default(),
            capacity,
        }
    }

    fn route(name: &str, created: i64, labels: &[(&str, &str)], host: Option<&str>) -> RouteView {
        RouteView {
            namespace: "shop".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            created,
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            namespace_labels: BTreeMap::new(),
            host: host.map(str::to_string),
        }
    }

    fn bound(schedule: &Schedule) -> Vec<(&str, &str, &str)> {
        schedule
            .bindings
            .iter()
            .map(|b| (b.route.as_str(), b.router.as_str(), b.host.as_str()))
            .collect()
    }

    #[test]
    fn round_robin_takes_turns_and_continues_from_its_cursor() {
        let shards = [shard("a", &[], None), shard("b", &[], None)];
        let routes = [
            route("r1", 1, &[], None),
            route("r2", 2, &[], None),
            route("r3", 3, &[], None),
        ];
        let mut strategy = RoundRobin::default();
        let first = schedule(&routes, &shards, &[], &mut strategy);
        assert_eq!(
            bound(&first),
            [
                ("r1", "a", "shop-r1.a.apps.example.com"),
                ("r2", "b", "shop-r2.b.apps.example.com"),
                ("r3", "a", "shop-r3.a.apps.example.com"),
            ]
        );
        assert_eq!(strategy.cursor, 3);
        // Bindings are sticky: the next pass keeps them and only places the new route, at the
        // persisted cursor (a restarted scheduler would start from it).
        let mut restarted = RoundRobin { cursor: 3 };
        let more = [routes.to_vec(), vec![route("r4", 4, &[], None)]].concat();
        let second = schedule(&more, &shards, &first.bindings, &mut restarted);
        assert_eq!(second.bindings[..3], first.bindings[..]);
        assert_eq!(bound(&second)[3], ("r4", "b", "shop-r4.b.apps.example.com"));
        assert_eq!(
            second.load,
            BTreeMap::from([("a".into(), 2), ("b".into(), 2)])
        );
    }

    #[test]
    fn label_match_binds_every_selecting_shard_and_least_loaded_fills_the_emptiest() {
        let shards = [
            shard("public", &[("exposure", "public")], None),
            shard("all", &[], None),
            shard("internal", &[("exposure", "internal")], None),
        ];
        let routes = [route(
            "web",
            1,
            &[("exposure", "public")],
            Some("www.example.com"),
        )];
        let matched = schedule(&routes, &shards, &[], &mut LabelMatch);
        assert_eq!(
            bound(&matched),
            [
                ("web", "all", "www.example.com"),
                ("web", "public", "www.example.com")
            ],
            "a route with its own host keeps it on every shard"
        );

        let shards = [shard("a", &[], None), shard("b", &[], None)];
        let existing = [
            Binding {
                namespace: "shop".into(),
                route: "old1".into(),
                router: "a".into(),
                host: "x1".into(),
            },
            Binding {
                namespace: "shop".into(),
                route: "old2".into(),
                router: "a".into(),
                host: "x2".into(),
            },
        ];
        let routes = [
            route("old1", 1, &[], Some("x1")),
            route("old2", 2, &[], Some("x2")),
            route("new1", 3, &[], None),
            route("new2", 4, &[], None),
        ];
        let placed = schedule(&routes, &shards, &existing, &mut LeastLoaded);
        let routers: Vec<(&str, &str)> = placed
            .bindings
            .iter()
            .map(|b| (b.route.as_str(), b.router.as_str()))
            .collect();
        assert!(
            routers.contains(&("new1", "b")) && routers.contains(&("new2", "b")),
            "{routers:?}"
        );
        // Then a tie (2 and 2) goes to the first by name.
        let routes = [routes.to_vec(), vec![route("new3", 5, &[], None)]].concat();
        let next = schedule(&routes, &shards, &placed.bindings, &mut LeastLoaded);
        assert!(
            next.bindings
                .iter()
                .any(|b| b.route == "new3" && b.router == "a")
        );
    }

    #[test]
    fn a_binding_goes_when_its_shard_goes_or_stops_selecting_and_capacity_is_kept() {
        let shards = [
            shard("a", &[("tier", "gold")], Some(1)),
            shard("b", &[], Some(1)),
        ];
        let routes = [
            route("r1", 1, &[("tier", "gold")], None),
            route("r2", 2, &[], None),
            route("r3", 3, &[], None),
        ];
        let first = schedule(&routes, &shards, &[], &mut LeastLoaded);
        assert_eq!(
            bound(&first).iter().map(|b| (b.0, b.1)).collect::<Vec<_>>(),
            [("r1", "a"), ("r2", "b")]
        );
        let r3 = &first.admissions[&("shop".into(), "r3".into())][0];
        assert_eq!(r3.reason, Some(reasons::NO_ELIGIBLE_SHARD));
        assert!(
            r3.message.as_deref().unwrap().contains("capacity"),
            "{r3:?}"
        );

        // Shard b is deleted under r2: r2 is rescheduled... onto nothing (a is full and r2 is
        // not gold), so it says so; r3 as well.
        let without_b = schedule(&routes, &shards[..1], &first.bindings, &mut LeastLoaded);
        assert_eq!(bound(&without_b).len(), 1);
        assert!(
            without_b.bindings.iter().all(|b| b.router != "b"),
            "no binding outlives its shard"
        );
        // r1 loses its gold label: shard a no longer selects it, the binding goes, r1 lands on b.
        let relabelled = [
            route("r1", 1, &[], None),
            routes[1].clone(),
            routes[2].clone(),
        ];
        let moved = schedule(&relabelled, &shards, &first.bindings, &mut LeastLoaded);
        assert!(
            !moved
                .bindings
                .iter()
                .any(|b| b.route == "r1" && b.router == "a")
        );
        let none_for_r1 = moved.admissions[&("shop".into(), "r1".into())][0].clone();
        assert_eq!(
            none_for_r1.reason,
            Some(reasons::NO_ELIGIBLE_SHARD),
            "b is full with r2"
        );
    }

    #[test]
    fn the_older_route_wins_a_host_and_the_newer_is_admitted_when_it_goes() {
        let shards = [shard("a", &[], None)];
        let older = route("first", 10, &[], Some("shop.example.com"));
        let newer = route("second", 20, &[], Some("shop.example.com"));
        // The newer one was even bound first (the older got its host later): it gives way.
        let existing = [Binding {
            namespace: "shop".into(),
            route: "second".into(),
            router: "a".into(),
            host: "shop.example.com".into(),
        }];
        let contested = schedule(
            &[newer.clone(), older.clone()],
            &shards,
            &existing,
            &mut RoundRobin::default(),
        );
        assert_eq!(bound(&contested), [("first", "a", "shop.example.com")]);
        let lost = &contested.admissions[&("shop".into(), "second".into())];
        assert_eq!(lost.len(), 1);
        assert!(!lost[0].admitted);
        assert_eq!(lost[0].reason, Some(reasons::HOST_ALREADY_CLAIMED));
        assert!(lost[0].message.as_deref().unwrap().contains("shop/first"));
        assert_eq!(contested.load["a"], 1);
        // Same creation time: the UID decides, the same way every pass.
        let twin = RouteView {
            uid: "uid-0".into(),
            created: 20,
            ..route("twin", 20, &[], Some("shop.example.com"))
        };
        let tie = schedule(&[newer.clone(), twin], &shards, &[], &mut LabelMatch);
        assert_eq!(bound(&tie)[0].0, "twin");

        let promoted = schedule(
            &[newer],
            &shards,
            &contested.bindings,
            &mut RoundRobin::default(),
        );
        assert_eq!(bound(&promoted), [("second", "a", "shop.example.com")]);
        assert!(promoted.admissions[&("shop".into(), "second".into())][0].admitted);
    }

    #[test]
    fn strategies_are_chosen_by_name_and_binding_names_fit() {
        for name in ["round-robin", "label-match", "least-loaded"] {
            assert_eq!(strategy_named(name, 0).unwrap().name(), name);
        }
        assert!(strategy_named("random", 0).is_none());
        assert_eq!(binding_name("web", "shard1"), "web.shard1");
        let long = binding_name(&"r".repeat(250), "shard1");
        assert!(long.len() <= 253, "{}", long.len());
        assert_ne!(long, binding_name(&"r".repeat(251), "shard1"));
    }
}
