//! The controllers only a hub runs: gateway placement and agent install
//! ([`gateway_placement`]), the probe header and zone key copies agents read
//! ([`probe_headers`], [`key_copies`]), ManagedZone
//! status ([`managed_zone`]) and router-shard DNS ([`router_dns`]). The DNSPolicy and DNSRecord
//! controllers are shared with the agents (`meridian_controllers`).

pub mod cluster_copies;
pub mod gateway_placement;
pub mod key_copies;
pub mod managed_zone;
pub mod probe_headers;
pub mod router_dns;
