//! The reconcilers the hub and the agents share.
//!
//! - [`dns_policy`]: DNSPolicy → DNSRecords. On the hub, one record tree per listener across the
//!   clusters the Gateway is placed on; in distributed mode, this cluster's branch.
//! - [`dns_record`]: DNSRecord → provider. Plans against the zone with ownership, prunes by
//!   health ([`health`] on the hub, [`shared_health`] through the zone in distributed mode) and
//!   applies through the ManagedZone's provider ([`zone_provider`]).
//!
//! Each reconcile is a pipeline: read what it needs, compute the result with a pure function
//! ([`desired`], [`health`], [`shared_health`], `meridian_dns::plan`), write with server-side
//! apply under one field manager, and say what happened in status. The hub (`meridian-hub`)
//! runs them beside what only a hub does; the agent (`meridian-agent --mode distributed`) runs
//! them for its own cluster.

pub mod applied;
pub mod caches;
pub mod clock;
mod context;
pub mod convert;
pub mod desired;
pub mod dns_policy;
pub mod dns_record;
pub mod dnssec_keys;
mod error;
pub mod fence;
pub mod gateway_status;
pub mod health;
pub mod host_marks;
pub mod identity;
pub mod indexes;
pub mod journal;
pub mod metrics;
pub mod owners;
pub mod plan_guard;
pub mod policy;
pub mod probe_policy;
pub mod probe_seal;
pub mod provider_args;
pub mod shared_health;
pub mod silence;
pub mod zone_claims;
pub mod zone_mirror;
pub mod zone_provider;
pub mod zone_serial;

pub use clock::{Clock, now};
pub use context::{
    Concurrency, Context, ControllerConfig, LocalCluster, apply_params, counted, delete_if_present,
    retry_after, with_finalizer,
};
pub use error::Error;
pub use identity::{DISTRIBUTED_LABEL, FIELD_MANAGER, POLICY_LABEL, object_key};
