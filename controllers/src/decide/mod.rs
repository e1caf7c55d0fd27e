//! The pure decisions: what to publish, what health allows, when silence is an outage, whether
//! a plan waits, which zone holds a domain. No Kubernetes I/O, no clock but the one passed in;
//! table and property tests.

pub mod convert;
pub mod desired;
pub mod exclude;
pub mod health;
pub mod host_marks;
pub mod listener_sets;
pub mod plan_guard;
pub mod policy;
pub mod probe_policy;
pub mod probe_seal;
pub mod shared_health;
pub mod shared_tiers;
pub mod silence;
pub mod zone_claims;
pub mod zone_serial;
