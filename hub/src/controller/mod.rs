//! The controllers only a hub runs: gateway placement and agent install
//! ([`gateway_placement`]), the probe header copies agents read ([`probe_headers`]), ManagedZone
//! status ([`managed_zone`]) and router-shard DNS ([`router_dns`]). The DNSPolicy and DNSRecord
//! controllers are shared with the agents (`meridian_controllers`).

pub mod gateway_placement;
pub mod managed_zone;
pub mod probe_headers;
pub mod router_dns;

/// Reconciles at once for the hub's light controllers (zones, header copies, router shards):
/// their objects are few or their writes rare, and they should not crowd the API server while
/// a fleet's DNS is due.
const CONCURRENCY_SMALL: u16 = 4;
