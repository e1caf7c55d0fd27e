//! DNSPolicy spec → the engine's routing strategy. Pure, so the controller and the offline
//! planner share one set of rules, and so that input the API server did not validate (a
//! scenario file) gets the same checks the CRD schema makes.

use meridian_api::geo::is_valid_geo_code;
use meridian_api::kuadrant::{LoadBalancing, RoutingStrategy};
use meridian_dns::tree::{self, CustomWeight, Strategy};

/// Why a policy cannot be turned into a record tree; each names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("loadBalancing.weighted.defaultWeight must be between 0 and {max}, not {0}", max = u32::MAX)]
    DefaultWeight(i64),
    #[error("loadBalancing.weighted.custom[{index}].weight must be between 0 and {max}, not {weight}", max = u32::MAX)]
    CustomWeight { index: usize, weight: i64 },
    #[error("loadBalancing.weighted.custom[{0}] needs exactly one of value and selector")]
    CustomForm(usize),
    #[error("loadBalancing.weighted.custom[{0}].attribute is only allowed together with value")]
    AttributeWithoutValue(usize),
    #[error("loadBalancing.weighted.custom[{index}].selector: {problem}")]
    Selector { index: usize, problem: String },
    #[error(
        "loadBalancing.geo.defaultGeo {0:?} is not an ISO-3166 alpha-2 country code or a continent GEO-AF|AN|AS|EU|NA|OC|SA"
    )]
    DefaultGeo(String),
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
            if entry.selector.is_some() == entry.value.is_some() {
                return Err(PolicyError::CustomForm(index));
            }
            if entry.attribute.is_some() && entry.value.is_none() {
                return Err(PolicyError::AttributeWithoutValue(index));
            }
            let weight = u32::try_from(entry.weight).map_err(|_| PolicyError::CustomWeight {
                index,
                weight: entry.weight,
            })?;
            let selector = entry
                .effective_selector()
                .ok_or(PolicyError::CustomForm(index))?;
            Ok(CustomWeight {
                selector: crate::convert::label_selector(&selector)
                    .map_err(|problem| PolicyError::Selector { index, problem })?,
                weight,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let default_geo = match &load_balancing.geo {
        Some(geo) if !is_valid_geo_code(&geo.default_geo) => {
            return Err(PolicyError::DefaultGeo(geo.default_geo.clone()));
        }
        Some(geo) => Some(geo.default_geo.clone()),
        None => None,
    };
    Ok(match strategy {
        RoutingStrategy::Simple => Strategy::Simple,
        RoutingStrategy::Loadbalanced => Strategy::LoadBalanced(tree::LoadBalancing {
            default_weight,
            custom,
            default_geo,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_api::kuadrant::{
        CustomWeight as ApiCustomWeight, GeoLoadBalancing, WeightedLoadBalancing,
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
                "custom[0].attribute",
            ),
            (load_balancing(Vec::new(), Some("EU")), "defaultGeo \"EU\""),
            (
                LoadBalancing {
                    weighted: WeightedLoadBalancing {
                        default_weight: -3,
                        custom: Vec::new(),
                    },
                    geo: None,
                },
                "defaultWeight",
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
