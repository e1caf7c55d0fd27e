//! Where a health probe may connect. A probe's address comes from a DNSRecord's leaves, which a
//! tenant can write, and every agent runs it from inside its own cluster's network: without a
//! policy, a record answering `169.254.169.254` or `127.0.0.1` made every spoke request its
//! cloud's metadata service or its kubelet, and the per-cluster reasons in status read like a
//! port scan.
//!
//! Never probed, whatever the admin says: loopback, link-local (the metadata services),
//! unspecified and multicast addresses, and IPv4 broadcast. The admin adds ranges (the pod and
//! service networks: `--probe-deny`, Helm value `probes.deny`). The hub leaves such leaves out
//! of the probes it writes and says so in the record's status; the agent checks again, after
//! resolving a hostname, before it opens any connection.
//!
//! A test bed whose gateways listen on loopback addresses (this repository's tests) allows
//! loopback explicitly; nothing else can.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

/// The flags of the hub and the agent that set the policy.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ProbePolicyArgs {
    /// Address ranges probes never connect to, besides loopback, link-local, unspecified and
    /// multicast addresses, which are never probed (Helm value `probes.deny`): the pod,
    /// service and node networks. The hub passes its own to the agents it installs. See
    /// docs/security.md.
    #[arg(
        long = "probe-deny",
        env = "MERIDIAN_PROBE_DENY",
        value_delimiter = ','
    )]
    pub probe_deny: Vec<String>,

    /// Lets probes reach loopback addresses: for a test bed whose gateways listen there,
    /// never in production.
    #[arg(long, env = "MERIDIAN_PROBE_ALLOW_LOOPBACK")]
    pub probe_allow_loopback: bool,
}

impl ProbePolicyArgs {
    pub fn policy(&self) -> Result<ProbeAddressPolicy, String> {
        ProbeAddressPolicy::parse(&self.probe_deny, self.probe_allow_loopback)
            .map_err(|e| format!("--probe-deny: {e}"))
    }
}

/// Why an address is not probed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Loopback, link-local, unspecified, multicast or broadcast.
    Special(&'static str),
    /// In a range the admin denied.
    Denied(IpNet),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::Special(kind) => write!(f, "{kind} addresses are never probed"),
            Refusal::Denied(range) => write!(f, "{range} is denied to probes by the admin"),
        }
    }
}

/// The addresses probes may not connect to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeAddressPolicy {
    /// Ranges the admin denied besides the special ones.
    pub deny: Vec<IpNet>,
    /// A test bed whose gateways listen on loopback (never in production).
    pub allow_loopback: bool,
}

/// Metadata services outside the link-local ranges: AWS's IPv6 one and Alibaba Cloud's.
const METADATA_SERVICES: [IpAddr; 2] = [
    IpAddr::V6(std::net::Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
    IpAddr::V4(std::net::Ipv4Addr::new(100, 100, 100, 200)),
];

/// The IPv4 address an IPv6 address carries, where it reaches one.
fn embedded_ipv4(v6: std::net::Ipv6Addr) -> Option<std::net::Ipv4Addr> {
    let s = v6.segments();
    let from = |hi: u16, lo: u16| {
        let [a, b] = hi.to_be_bytes();
        let [c, d] = lo.to_be_bytes();
        std::net::Ipv4Addr::new(a, b, c, d)
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return Some(v4);
    }
    match s {
        // IPv4-compatible (deprecated, still routed by some stacks); not `::` nor `::1`.
        [0, 0, 0, 0, 0, 0, hi, lo] if hi != 0 => Some(from(hi, lo)),
        // NAT64's well-known prefix, and the local-use one.
        [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(from(hi, lo)),
        [0x64, 0xff9b, 1, ..] => Some(from(s[6], s[7])),
        // 6to4: the IPv4 address follows the prefix.
        [0x2002, hi, lo, ..] => Some(from(hi, lo)),
        _ => None,
    }
}

impl ProbeAddressPolicy {
    /// The address a connection to `ip` reaches: an IPv4 address written as IPv6 (mapped,
    /// compatible, NAT64, 6to4) is the IPv4 address.
    pub fn reached(ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V6(v6) => embedded_ipv4(v6).map_or(ip, IpAddr::V4),
            v4 => v4,
        }
    }

    /// A test bed's policy: its gateways listen on loopback addresses (never in production).
    pub fn test_bed() -> Self {
        ProbeAddressPolicy {
            allow_loopback: true,
            ..Default::default()
        }
    }

    /// From `--probe-deny` values (CIDRs or single addresses).
    pub fn parse<S: AsRef<str>>(deny: &[S], allow_loopback: bool) -> Result<Self, String> {
        let deny = deny
            .iter()
            .map(|value| {
                let value = value.as_ref().trim();
                value
                    .parse::<IpNet>()
                    .or_else(|_| value.parse::<IpAddr>().map(IpNet::from))
                    .map(|net| net.trunc())
                    .map_err(|_| format!("probe deny range {value:?} is not a CIDR or an address"))
            })
            .collect::<Result<_, _>>()?;
        Ok(ProbeAddressPolicy {
            deny,
            allow_loopback,
        })
    }

    /// Why `ip` may not be probed, if it may not.
    pub fn refuses(&self, ip: IpAddr) -> Option<Refusal> {
        // An IPv4 address written as IPv6 is judged as the IPv4 address it reaches: mapped
        // (`::ffff:127.0.0.1`), compatible (`::127.0.0.1`), NAT64 (`64:ff9b::/96`, where a
        // cluster translates) and 6to4 (`2002::/16`).
        let ip = Self::reached(ip);
        if METADATA_SERVICES.contains(&ip) {
            return Some(Refusal::Special("cloud metadata service"));
        }
        let special = match ip {
            IpAddr::V4(v4) if v4.is_loopback() => (!self.allow_loopback).then_some("loopback"),
            IpAddr::V6(v6) if v6.is_loopback() => (!self.allow_loopback).then_some("loopback"),
            IpAddr::V4(v4) if v4.is_link_local() => Some("link-local"),
            IpAddr::V6(v6) if v6.is_unicast_link_local() => Some("link-local"),
            IpAddr::V4(v4) if v4.is_unspecified() => Some("unspecified"),
            IpAddr::V6(v6) if v6.is_unspecified() => Some("unspecified"),
            IpAddr::V4(v4) if v4.is_multicast() => Some("multicast"),
            IpAddr::V6(v6) if v6.is_multicast() => Some("multicast"),
            IpAddr::V4(v4) if v4.is_broadcast() => Some("broadcast"),
            // 0.0.0.0/8 reaches this host on Linux, as loopback does.
            IpAddr::V4(v4) if v4.octets()[0] == 0 => Some("unspecified"),
            _ => None,
        };
        if let Some(kind) = special {
            return Some(Refusal::Special(kind));
        }
        self.deny
            .iter()
            .find(|range| range.contains(&ip))
            .map(|range| Refusal::Denied(*range))
    }

    /// Why `address` (a leaf: an IP address, or a hostname the agent resolves) may not be
    /// probed, as far as can be told without resolving it.
    pub fn refuses_leaf(&self, address: &str) -> Option<Refusal> {
        let ip = address
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .ok()?;
        self.refuses(ip)
    }

    /// The agent's arguments that carry this policy.
    pub fn agent_args(&self) -> Vec<String> {
        let mut args: Vec<String> = self
            .deny
            .iter()
            .flat_map(|range| ["--probe-deny".to_string(), range.to_string()])
            .collect();
        if self.allow_loopback {
            args.push("--probe-allow-loopback".into());
        }
        args
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_addresses_are_refused_whatever_the_admin_allows() {
        let strict =
            ProbeAddressPolicy::parse(&["10.96.0.0/12", "10.244.0.0/16", "fd00::1"], false)
                .expect("a policy");
        let test_bed = ProbeAddressPolicy::test_bed();
        let cases = [
            // (address, refused strictly, refused on the test bed)
            (
                "127.0.0.1",
                Some("loopback addresses are never probed"),
                None,
            ),
            (
                "127.9.8.7",
                Some("loopback addresses are never probed"),
                None,
            ),
            ("::1", Some("loopback addresses are never probed"), None),
            (
                "::ffff:127.0.0.1",
                Some("loopback addresses are never probed"),
                None,
            ),
            (
                "169.254.169.254",
                Some("link-local addresses are never probed"),
                Some("link-local addresses are never probed"),
            ),
            (
                "::ffff:169.254.169.254",
                Some("link-local addresses are never probed"),
                Some("link-local addresses are never probed"),
            ),
            (
                "fe80::1",
                Some("link-local addresses are never probed"),
                Some("link-local addresses are never probed"),
            ),
            (
                "0.0.0.0",
                Some("unspecified addresses are never probed"),
                Some("unspecified addresses are never probed"),
            ),
            (
                "0.1.2.3",
                Some("unspecified addresses are never probed"),
                Some("unspecified addresses are never probed"),
            ),
            (
                "::",
                Some("unspecified addresses are never probed"),
                Some("unspecified addresses are never probed"),
            ),
            (
                "224.0.0.1",
                Some("multicast addresses are never probed"),
                Some("multicast addresses are never probed"),
            ),
            (
                "ff02::1",
                Some("multicast addresses are never probed"),
                Some("multicast addresses are never probed"),
            ),
            (
                "255.255.255.255",
                Some("broadcast addresses are never probed"),
                Some("broadcast addresses are never probed"),
            ),
            (
                "10.100.0.10",
                Some("10.96.0.0/12 is denied to probes by the admin"),
                None,
            ),
            (
                "10.244.3.4",
                Some("10.244.0.0/16 is denied to probes by the admin"),
                None,
            ),
            (
                "fd00::1",
                Some("fd00::1/128 is denied to probes by the admin"),
                None,
            ),
            (
                "::127.0.0.1",
                Some("loopback addresses are never probed"),
                None,
            ),
            (
                "64:ff9b::a9fe:a9fe",
                Some("link-local addresses are never probed"),
                Some("link-local addresses are never probed"),
            ),
            (
                "64:ff9b::10.100.0.10",
                Some("10.96.0.0/12 is denied to probes by the admin"),
                None,
            ),
            (
                "2002:a9fe:a9fe::1",
                Some("link-local addresses are never probed"),
                Some("link-local addresses are never probed"),
            ),
            (
                "fd00:ec2::254",
                Some("cloud metadata service addresses are never probed"),
                Some("cloud metadata service addresses are never probed"),
            ),
            (
                "100.100.100.200",
                Some("cloud metadata service addresses are never probed"),
                Some("cloud metadata service addresses are never probed"),
            ),
            ("10.250.2.1", None, None),
            ("192.0.2.66", None, None),
            ("2001:db8::1", None, None),
        ];
        for (address, strictly, on_test_bed) in cases {
            let ip: IpAddr = address.parse().unwrap();
            assert_eq!(
                strict.refuses(ip).map(|r| r.to_string()).as_deref(),
                strictly,
                "{address}"
            );
            assert_eq!(
                test_bed.refuses(ip).map(|r| r.to_string()).as_deref(),
                on_test_bed,
                "{address} on the test bed"
            );
        }
        assert_eq!(strict.refuses_leaf("gateway.example.com"), None);
        assert!(strict.refuses_leaf("[::1]").is_some());
        assert!(ProbeAddressPolicy::parse(&["10.0.0.0/33"], false).is_err());
        assert!(ProbeAddressPolicy::parse(&["pods"], false).is_err());
        assert_eq!(
            strict.agent_args(),
            [
                "--probe-deny",
                "10.96.0.0/12",
                "--probe-deny",
                "10.244.0.0/16",
                "--probe-deny",
                "fd00::1/128"
            ]
        );
    }
}
