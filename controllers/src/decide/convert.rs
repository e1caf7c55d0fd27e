//! Kubernetes vocabulary into the engine's, and back.
//!
//! Records as the Kubernetes API spells them (`meridian_api::kuadrant::Endpoint`) and as the
//! engine does (`meridian_dns::model::Endpoint`). The two are kept apart on purpose: the API
//! type carries schema and compatibility fields, the engine type carries normalisation.

use meridian_api::kuadrant::{
    Endpoint as ApiEndpoint, ProviderSpecificProperty, RecordType as ApiType,
};
use meridian_dns::model::{Endpoint, GEO_CODE, ProviderSpecific, RecordType, WEIGHT};
use meridian_dns::tree::{LabelSelector, SelectorOperator, SelectorRequirement};

fn to_engine_type(record_type: ApiType) -> RecordType {
    match record_type {
        ApiType::A => RecordType::A,
        ApiType::Aaaa => RecordType::Aaaa,
        ApiType::Cname => RecordType::Cname,
        ApiType::Txt => RecordType::Txt,
        ApiType::Ns => RecordType::Ns,
        ApiType::Srv => RecordType::Srv,
        ApiType::Mx => RecordType::Mx,
        ApiType::Caa => RecordType::Caa,
    }
}

fn to_api_type(record_type: RecordType) -> ApiType {
    match record_type {
        RecordType::A => ApiType::A,
        RecordType::Aaaa => ApiType::Aaaa,
        RecordType::Cname => ApiType::Cname,
        RecordType::Txt => ApiType::Txt,
        RecordType::Ns => ApiType::Ns,
        RecordType::Srv => ApiType::Srv,
        RecordType::Mx => ApiType::Mx,
        RecordType::Caa => ApiType::Caa,
    }
}

/// A provider-specific property in Meridian's terms. DNSRecords written for
/// multicluster-gateway-controller may carry external-dns's AWS spellings; those that mean
/// what Meridian's `geo-code` and `weight` mean are read as them (AWS continent codes gain the
/// `GEO-` prefix). Anything else is kept as written, and providers ignore what they do not know.
pub fn routing_property(name: &str, value: &str) -> ProviderSpecific {
    let (name, value) = match name {
        "aws/geolocation-country-code" => (GEO_CODE, value.to_string()),
        "aws/geolocation-continent-code" => (GEO_CODE, format!("GEO-{value}")),
        "aws/weight" => (WEIGHT, value.to_string()),
        _ => (name, value.to_string()),
    };
    ProviderSpecific {
        name: name.to_string(),
        value,
    }
}

/// The engine's record for an API record (TTLs outside `u32` are clamped; the schema bounds
/// them anyway).
pub fn to_engine(endpoint: &ApiEndpoint) -> Endpoint {
    let mut record = Endpoint::new(
        endpoint.dns_name.clone(),
        to_engine_type(endpoint.record_type),
        endpoint.targets.iter().cloned(),
        u32::try_from(endpoint.record_ttl.max(0)).unwrap_or(u32::MAX),
    );
    record.set_identifier = endpoint.set_identifier.clone();
    record.provider_specific = endpoint
        .provider_specific
        .iter()
        .map(|p| routing_property(&p.name, &p.value))
        .collect();
    record.normalize();
    record
}

pub fn to_api(endpoint: &Endpoint) -> ApiEndpoint {
    ApiEndpoint {
        dns_name: endpoint.dns_name.clone(),
        record_type: to_api_type(endpoint.record_type),
        targets: endpoint.targets.clone(),
        record_ttl: i64::from(endpoint.record_ttl),
        set_identifier: endpoint.set_identifier.clone(),
        provider_specific: endpoint
            .provider_specific
            .iter()
            .map(|p| ProviderSpecificProperty {
                name: p.name.clone(),
                value: p.value.clone(),
            })
            .collect(),
        labels: Default::default(),
    }
}

pub fn all_to_engine(endpoints: &[ApiEndpoint]) -> Vec<Endpoint> {
    endpoints.iter().map(to_engine).collect()
}

pub fn all_to_api(endpoints: &[Endpoint]) -> Vec<ApiEndpoint> {
    endpoints.iter().map(to_api).collect()
}

/// The engine's form of a Kubernetes label selector; an unknown operator is an error.
pub fn label_selector(
    selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector,
) -> Result<LabelSelector, String> {
    let match_expressions = selector
        .match_expressions
        .iter()
        .flatten()
        .map(|requirement| {
            let operator = match requirement.operator.as_str() {
                "In" => SelectorOperator::In,
                "NotIn" => SelectorOperator::NotIn,
                "Exists" => SelectorOperator::Exists,
                "DoesNotExist" => SelectorOperator::DoesNotExist,
                other => {
                    return Err(format!(
                        "unknown operator {other:?} (In, NotIn, Exists, DoesNotExist)"
                    ));
                }
            };
            Ok(SelectorRequirement {
                key: requirement.key.clone(),
                operator,
                values: requirement.values.clone().unwrap_or_default(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(LabelSelector {
        match_labels: selector.match_labels.clone().unwrap_or_default(),
        match_expressions,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mgc_aws_routing_names_read_as_meridians() {
        // (name, value as written, name and value read)
        for (name, value, read) in [
            ("aws/geolocation-country-code", "*", (GEO_CODE, "*")),
            ("aws/geolocation-country-code", "IE", (GEO_CODE, "IE")),
            ("aws/geolocation-continent-code", "NA", (GEO_CODE, "GEO-NA")),
            ("aws/weight", "60", (WEIGHT, "60")),
            ("weight", "60", (WEIGHT, "60")),
            ("aws/health-check-id", "abc", ("aws/health-check-id", "abc")),
        ] {
            let property = routing_property(name, value);
            assert_eq!(
                (property.name.as_str(), property.value.as_str()),
                read,
                "{name}"
            );
        }
    }

    #[test]
    fn records_survive_the_round_trip_through_the_api_type() {
        for record_type in RecordType::ALL {
            let record = Endpoint::new("x.example.com", record_type, ["v".to_string()], 60)
                .with_set_identifier("s")
                .with_property(WEIGHT, "10")
                .with_property(GEO_CODE, "IE");
            assert_eq!(to_engine(&to_api(&record)), record);
        }
    }
}
