//! DNSPolicy spec → the engine's routing strategy. Pure, so the controller and the offline
//! planner share one set of rules, and so that input the API server did not validate (a
//! scenario file) gets the same checks the CRD schema makes.

use meridian_api::geo::is_valid_geo_code;
use meridian_api::kuadrant::{ClusterMatcher, LoadBalancing, MatcherProblem, RoutingStrategy};
use meridian_dns::tree::{self, CustomWeight, Strategy};

/// Why a policy cannot be turned into a record tree; each names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("loadBalancing.weighted.defaultWeight must be between 0 and {max}, not {0}", max = u32::MAX)]
    DefaultWeight(i64),
    #[error("loadBalancing.weighted.custom[{index}].weight must be between 0 and {max}, not {weight}", max = u32::MAX)]
    CustomWeight { index: usize, weight: i64 },
    /// A failover priority's or custom weight's cluster matcher (`field` names the entry).
    #[error("{field} {problem}")]
    Matcher {
        field: String,
        problem: MatcherProblem,
    },
    #[error("{field}.selector: {problem}")]
    Selector { field: String, problem: String },
    #[error(
        "loadBalancing.geo.defaultGeo {0:?} is not an ISO-3166 alpha-2 country code or a continent GEO-AF|AN|AS|EU|NA|OC|SA"
    )]
    DefaultGeo(String),
    #[error("loadBalancing.failover: priority {0} is not between 1 and 1000")]
    Priority(i64),
    #[error("loadBalancing.failover.holdDown {0:?} is not a duration of at most 1h")]
    HoldDown(String),
    #[error(
        "loadBalancing.failover needs routingStrategy loadbalanced: a simple record has no tiers to choose between"
    )]
    TiersWithSimple,
}

/// Failback hold-down of a policy's failover, in seconds: its `holdDown`, or the default.
pub fn hold_down_seconds(load_balancing: &LoadBalancing) -> Result<Option<u32>, PolicyError> {
    let Some(failover) = &load_balancing.failover else {
        return Ok(None);
    };
    let Some(text) = &failover.hold_down else {
        return Ok(Some(meridian_dns::tiers::DEFAULT_HOLD_DOWN as u32));
    };
    meridian_api::duration::parse_duration(text)
        .filter(|d| d.as_secs() <= 3600)
        .map(|d| Some(d.as_secs() as u32))
        .ok_or_else(|| PolicyError::HoldDown(text.clone()))
}

/// The engine's selector for a failover priority's or custom weight's clusters, the entry
/// named `field` in errors.
fn cluster_selector(
    matcher: ClusterMatcher<'_>,
    field: String,
) -> Result<tree::LabelSelector, PolicyError> {
    let selector = matcher.selector().map_err(|problem| PolicyError::Matcher {
        field: field.clone(),
        problem,
    })?;
    crate::decide::convert::label_selector(&selector)
        .map_err(|problem| PolicyError::Selector { field, problem })
}

fn tiers(load_balancing: &LoadBalancing) -> Result<Option<tree::Tiers>, PolicyError> {
    let Some(failover) = &load_balancing.failover else {
        return Ok(None);
    };
    let priority = |p: i64| {
        u32::try_from(p)
            .ok()
            .filter(|p| (1..=1000).contains(p))
            .ok_or(PolicyError::Priority(p))
    };
    let rules = failover
        .priorities
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            Ok(tree::TierRule {
                selector: cluster_selector(
                    entry.matcher(),
                    format!("loadBalancing.failover.priorities[{index}]"),
                )?,
                priority: priority(entry.priority)?,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    hold_down_seconds(load_balancing)?;
    Ok(Some(tree::Tiers {
        rules,
        default_priority: priority(failover.default_priority)?,
    }))
}

/// The engine's strategy for a policy's `routingStrategy` and `loadBalancing`.
pub fn routing_strategy(
    strategy: RoutingStrategy,
    load_balancing: &LoadBalancing,
) -> Result<Strategy, PolicyError> {
    let weighted = &load_balancing.weighted;
    let default_weight = u32::try_from(weighted.default_weight)
        .map_err(|_| PolicyError::DefaultWeight(weighted.default_weight))?;
    let custom = weighted
        .custom
        .iter()
        .enumerate()
        .map(|(index, entry)| {
            let selector = cluster_selector(
                entry.matcher(),
                format!("loadBalancing.weighted.custom[{index}]"),
            )?;
            let weight = u32::try_from(entry.weight).map_err(|_| PolicyError::CustomWeight {
                index,
                weight: entry.weight,
            })?;
            Ok(CustomWeight { selector, weight })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let default_geo = match &load_balancing.geo {
        Some(geo) if !is_valid_geo_code(&geo.default_geo) => {
            return Err(PolicyError::DefaultGeo(geo.default_geo.clone()));
        }
        Some(geo) => Some(geo.default_geo.clone()),
        None => None,
    };
    let tiers = tiers(load_balancing)?;
    Ok(match strategy {
        RoutingStrategy::Simple if tiers.is_some() => return Err(PolicyError::TiersWithSimple),
        RoutingStrategy::Simple => Strategy::Simple,
        RoutingStrategy::Loadbalanced => Strategy::LoadBalanced(tree::LoadBalancing {
            default_weight,
            custom,
            default_geo,
            tiers,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_api::kuadrant::{
        CustomWeight as ApiCustomWeight, Failover, GeoLoadBalancing, TierPriority,
        WeightedLoadBalancing,
    };

    fn load_balancing(custom: Vec<ApiCustomWeight>, geo: Option<&str>) -> LoadBalancing {
        LoadBalancing {
            weighted: WeightedLoadBalancing {
                default_weight: 120,
                custom,
            },
            geo: geo.map(|g| GeoLoadBalancing {
                default_geo: g.to_string(),
            }),
            failover: None,
        }
    }

    fn shorthand(attribute: Option<&str>, value: &str, weight: i64) -> ApiCustomWeight {
        ApiCustomWeight {
            selector: None,
            attribute: attribute.map(String::from),
            value: Some(value.to_string()),
            weight,
        }
    }

    #[test]
    fn the_shorthand_becomes_a_label_selector() {
        let lb = load_balancing(
            vec![
                shorthand(Some("cloud"), "Azure", 30),
                shorthand(None, "GCP", 20),
            ],
            Some("IE"),
        );
        let Strategy::LoadBalanced(engine) =
            routing_strategy(RoutingStrategy::Loadbalanced, &lb).unwrap()
        else {
            panic!()
        };
        assert_eq!(engine.default_weight, 120);
        assert_eq!(engine.default_geo.as_deref(), Some("IE"));
        let labels: Vec<_> = engine
            .custom
            .iter()
            .map(|c| (c.selector.match_labels.clone(), c.weight))
            .collect();
        assert_eq!(
            labels,
            [
                (
                    [(
                        "kuadrant.io/lb-attribute-cloud".to_string(),
                        "Azure".to_string()
                    )]
                    .into(),
                    30
                ),
                (
                    [(
                        "kuadrant.io/lb-attribute-custom-weight".to_string(),
                        "GCP".to_string()
                    )]
                    .into(),
                    20
                ),
            ]
        );
    }

    fn tier(attribute: Option<&str>, value: &str, priority: i64) -> TierPriority {
        TierPriority {
            selector: None,
            attribute: attribute.map(String::from),
            value: Some(value.to_string()),
            priority,
        }
    }

    fn with_tiers(priorities: Vec<TierPriority>, hold_down: Option<&str>) -> LoadBalancing {
        LoadBalancing {
            failover: Some(Failover {
                priorities,
                default_priority: 1000,
                hold_down: hold_down.map(String::from),
            }),
            ..load_balancing(Vec::new(), None)
        }
    }

    #[test]
    fn tiers_map_labels_to_priorities_and_the_rest_to_the_default() {
        let lb = with_tiers(
            vec![tier(Some("region"), "eu-west", 1), tier(None, "backup", 2)],
            Some("90s"),
        );
        let Strategy::LoadBalanced(engine) =
            routing_strategy(RoutingStrategy::Loadbalanced, &lb).unwrap()
        else {
            panic!()
        };
        let tiers = engine.tiers.unwrap();
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(
            tiers.priority_of(&labels(&[("kuadrant.io/lb-attribute-region", "eu-west")])),
            1
        );
        assert_eq!(
            tiers.priority_of(&labels(&[("kuadrant.io/lb-attribute-tier", "backup")])),
            2
        );
        assert_eq!(tiers.priority_of(&labels(&[])), 1000);
        assert_eq!(hold_down_seconds(&lb), Ok(Some(90)));
        assert_eq!(
            hold_down_seconds(&with_tiers(Vec::new(), None)),
            Ok(Some(60))
        );
        assert_eq!(
            routing_strategy(RoutingStrategy::Simple, &lb),
            Err(PolicyError::TiersWithSimple)
        );
    }

    #[test]
    fn invalid_policies_name_the_field() {
        let both = ApiCustomWeight {
            selector: Some(Default::default()),
            ..shorthand(None, "AWS", 1)
        };
        let attribute_only = ApiCustomWeight {
            value: None,
            selector: Some(Default::default()),
            ..shorthand(Some("cloud"), "", 1)
        };
        let cases = [
            (
                load_balancing(vec![shorthand(None, "AWS", -1)], None),
                "custom[0].weight",
            ),
            (
                load_balancing(vec![both], None),
                "custom[0] needs exactly one",
            ),
            (
                load_balancing(vec![attribute_only], None),
                "custom[0] attribute is only allowed together with value",
            ),
            (load_balancing(Vec::new(), Some("EU")), "defaultGeo \"EU\""),
            (
                LoadBalancing {
                    weighted: WeightedLoadBalancing {
                        default_weight: -3,
                        custom: Vec::new(),
                    },
                    geo: None,
                    failover: None,
                },
                "defaultWeight",
            ),
            (
                with_tiers(vec![tier(None, "eu-west", 0)], None),
                "priority 0 is not between 1 and 1000",
            ),
            (
                with_tiers(
                    vec![TierPriority {
                        selector: Some(Default::default()),
                        ..tier(None, "x", 1)
                    }],
                    None,
                ),
                "priorities[0] needs exactly one",
            ),
            // The attribute of a shorthand beside a selector: refused for both kinds of entry
            // (failover priorities once took it silently and ignored it).
            (
                with_tiers(
                    vec![TierPriority {
                        value: None,
                        selector: Some(Default::default()),
                        ..tier(Some("region"), "", 1)
                    }],
                    None,
                ),
                "priorities[0] attribute is only allowed together with value",
            ),
            (
                with_tiers(vec![tier(None, "eu-west", 1)], Some("2h")),
                "holdDown \"2h\"",
            ),
        ];
        for (lb, expected) in cases {
            let error = routing_strategy(RoutingStrategy::Loadbalanced, &lb)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(expected),
                "{error:?} should contain {expected:?}"
            );
        }
    }
}
