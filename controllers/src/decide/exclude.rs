//! A policy's `excludeAddresses`: Gateway addresses it never publishes. An IP address is
//! excluded when it is listed or inside a listed CIDR range, a hostname when it is listed (names
//! compared without case or a trailing dot). Pure; the policy's decide applies it to every
//! cluster's reported addresses before the records are built.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::decide::desired::PlacedCluster;

/// What a policy excludes, parsed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exclusions {
    ranges: Vec<IpNet>,
    hostnames: BTreeSet<String>,
}

impl Exclusions {
    /// Parses `spec.excludeAddresses`. The schema refuses what is neither an IP, a CIDR range
    /// nor a hostname; this says why for a policy written before it did.
    pub fn parse(values: &[String]) -> Result<Self, String> {
        let mut exclusions = Exclusions::default();
        for value in values {
            let value = value.trim();
            if let Ok(range) = value.parse::<IpNet>() {
                exclusions.ranges.push(range);
            } else if let Ok(address) = value.parse::<IpAddr>() {
                exclusions.ranges.push(IpNet::from(address));
            } else if is_hostname(value) {
                exclusions.hostnames.insert(normalize(value));
            } else {
                return Err(format!(
                    "excludeAddresses: {value:?} is not an IP address, a CIDR range or a hostname"
                ));
            }
        }
        Ok(exclusions)
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty() && self.hostnames.is_empty()
    }

    /// Whether `value` (a Gateway status address, an IP or a hostname) is excluded.
    pub fn excludes(&self, value: &str) -> bool {
        match value.trim().parse::<IpAddr>() {
            Ok(address) => self.ranges.iter().any(|range| range.contains(&address)),
            Err(_) => self.hostnames.contains(&normalize(value)),
        }
    }

    /// Takes the excluded addresses out of every cluster's reported Gateway. Returns, per
    /// cluster that lost any, what it lost and whether anything is left (for status), and the
    /// clusters left with none.
    pub fn apply(&self, clusters: &mut [PlacedCluster]) -> Applied {
        let mut applied = Applied::default();
        if self.is_empty() {
            return applied;
        }
        for cluster in clusters {
            let Some(report) = cluster.gateway.as_mut() else {
                continue;
            };
            let (excluded, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut report.addresses)
                .into_iter()
                .partition(|address| self.excludes(&address.value));
            report.addresses = kept;
            if excluded.is_empty() {
                continue;
            }
            let listed: Vec<&str> = excluded.iter().map(|a| a.value.as_str()).collect();
            if report.addresses.is_empty() {
                applied.emptied.push(cluster.name.clone());
            }
            applied.notes.push(if report.addresses.is_empty() {
                format!(
                    "{}: every address of its Gateway is excluded by excludeAddresses ({}): it adds nothing",
                    cluster.name,
                    listed.join(", ")
                )
            } else {
                format!(
                    "{}: {} excluded by excludeAddresses",
                    cluster.name,
                    listed.join(", ")
                )
            });
        }
        applied
    }
}

/// What [`Exclusions::apply`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Per cluster that lost addresses: which, and whether any is left.
    pub notes: Vec<String>,
    /// The clusters left with no address.
    pub emptied: Vec<String>,
}

fn normalize(hostname: &str) -> String {
    hostname.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// A DNS name: dot-separated labels of letters, digits, `-` and `_`, up to 63 characters each
/// and 253 in all, no label starting or ending with `-`, and a last label that is not all
/// digits (no top-level domain is, so `10.0.0.300` is a mistyped address, not a name).
fn is_hostname(value: &str) -> bool {
    let name = value.trim_end_matches('.');
    !name.is_empty()
        && name.len() <= 253
        && !name
            .rsplit('.')
            .next()
            .is_some_and(|top| top.chars().all(|c| c.is_ascii_digit()))
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_api::meridian::{GatewayReport, ReportedAddress};

    fn exclusions(values: &[&str]) -> Exclusions {
        Exclusions::parse(&values.iter().map(|v| v.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn addresses_ranges_and_hostnames_are_excluded_and_nothing_else() {
        let excluded = exclusions(&[
            "192.0.2.7",
            "10.0.0.0/8",
            "2001:db8::/32",
            "LB.Example.NET.",
        ]);
        // (address, excluded, why)
        let cases = [
            ("192.0.2.7", true, "listed"),
            ("192.0.2.8", false, "its neighbour"),
            ("10.200.3.4", true, "inside 10/8"),
            ("11.0.0.1", false, "outside 10/8"),
            ("2001:db8:1::5", true, "inside the IPv6 range"),
            ("2001:db9::5", false, "outside it"),
            ("lb.example.net", true, "names compare without case or dot"),
            ("lb2.example.net", false, "another name"),
            (
                "::ffff:10.0.0.1",
                false,
                "an IPv4-mapped IPv6 address is IPv6",
            ),
        ];
        for (address, expected, why) in cases {
            assert_eq!(excluded.excludes(address), expected, "{address}: {why}");
        }
    }

    #[test]
    fn what_is_neither_an_address_a_range_nor_a_name_is_refused() {
        for bad in [
            "10.0.0.300/8",
            "10.0.0.300",
            "not an address",
            "-lb.example.net",
            "a..b",
            "",
        ] {
            let error = Exclusions::parse(&[bad.to_string()]).unwrap_err();
            assert!(error.contains("excludeAddresses"), "{bad}: {error}");
        }
        assert!(Exclusions::parse(&[]).unwrap().is_empty());
    }

    fn placed(name: &str, addresses: &[&str]) -> PlacedCluster {
        PlacedCluster {
            name: name.into(),
            labels: Default::default(),
            cluster_id: Some(format!("id-{name}")),
            gateway: Some(GatewayReport {
                name: "prod-web".into(),
                namespace: "kuadrant-gateways".into(),
                addresses: addresses
                    .iter()
                    .map(|value| ReportedAddress {
                        type_: "IPAddress".into(),
                        value: value.to_string(),
                    })
                    .collect(),
                listeners: Vec::new(),
            }),
            silent_for: None,
            weight_percent: 100,
        }
    }

    #[test]
    fn a_cluster_keeps_what_is_not_excluded_and_status_names_what_went() {
        let mut clusters = [
            placed("spoke-1", &["10.0.0.1", "192.0.2.1"]),
            placed("spoke-2", &["10.0.0.2"]),
            placed("spoke-3", &["192.0.2.3"]),
        ];
        let applied = exclusions(&["10.0.0.0/8"]).apply(&mut clusters);
        let notes = &applied.notes;
        let left: Vec<usize> = clusters
            .iter()
            .map(|c| c.gateway.as_ref().unwrap().addresses.len())
            .collect();
        assert_eq!(left, [1, 0, 1]);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(
            notes[0].starts_with("spoke-1: 10.0.0.1 excluded"),
            "{notes:?}"
        );
        assert!(notes[1].contains("spoke-2: every address"), "{notes:?}");
        assert_eq!(applied.emptied, ["spoke-2"]);
        // No exclusions: nothing changes, nothing is said.
        let before = clusters.clone();
        assert_eq!(
            Exclusions::default().apply(&mut clusters),
            Applied::default()
        );
        assert_eq!(clusters, before);
    }
}
