//! The controllers the hub and the agents share, in four parts, each a folder, each using only
//! those listed before it:
//!
//! - [`decide`]: the pure decisions. What a policy publishes ([`decide::desired`]), what health
//!   allows ([`decide::health`] on the hub, [`decide::shared_health`] through the zone in
//!   distributed mode), when silence is an outage ([`decide::silence`]), whether a plan waits
//!   ([`decide::plan_guard`]), which zone holds a domain ([`decide::zone_claims`]).
//! - [`runtime`]: what they run on: one watch per kind shared by every controller
//!   ([`runtime::caches`]) and the trigger predicates of the caches' groups
//!   ([`runtime::indexes`]), the error type, the names objects are written under, the clock,
//!   the fence, metrics and the journal.
//! - [`zones`]: zones as served: the ManagedZone → provider mapping ([`zones::zone_provider`]),
//!   the embedded nameserver's zones ([`zones::zone_mirror`], [`zones::dnssec_keys`]), owners.
//! - [`reconcile`]: the reconcilers, DNSPolicy → DNSRecords ([`reconcile::dns_policy`]) and
//!   DNSRecord → provider ([`reconcile::dns_record`]), and the [`Context`] they share.
//!
//! Each reconcile is a pipeline: read what it needs, compute the result with a pure function,
//! write with server-side apply under one field manager, and say what happened in status. The
//! hub (`meridian-hub`) runs them beside what only a hub does; the agent (`meridian-agent --mode
//! distributed`) runs them for its own cluster. `scripts/module-circles.py` keeps the parts
//! (and the modules within each) free of import circles.

pub mod decide;
pub mod reconcile;
pub mod runtime;
pub mod zones;

pub use reconcile::context::{
    Concurrency, Context, ControllerConfig, LocalCluster, apply_params, counted, delete_if_present,
    jittered, retry_after, with_finalizer,
};
pub use runtime::clock::{Clock, now};
pub use runtime::error::Error;
pub use runtime::identity::{DISTRIBUTED_LABEL, FIELD_MANAGER, POLICY_LABEL, object_key};
