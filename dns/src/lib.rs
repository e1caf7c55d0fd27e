//! Meridian's DNS engine. It knows records, zones, owners and health, and nothing about
//! Kubernetes, networks or async runtimes: the controllers translate their objects into its
//! types, and the providers and the nameserver carry its results to DNS.
//!
//! - [`tree`] builds the record tree of one host from a policy and the clusters serving it;
//!   [`tree::RecordTree::prune`] removes unhealthy leaves from it;
//! - [`fidelity`] says what each provider can hold of a tree, and what a tree asks that it
//!   cannot; [`delegation`] splits a tree between a zone of plain records and a sub-zone
//!   Meridian serves;
//! - [`drain`] steps a drained cluster's weight down and back up;
//! - [`tiers`] keeps only the active priority tier of each weighted set, with failback
//!   hold-down;
//! - [`plan`] turns one owner's desired records, the zone and what the owner published before
//!   into a change set, with external-dns-compatible ownership records;
//! - [`changes`] is that change set, and what applying it strictly means;
//! - [`model`] is the record model, [`shortcode`] the short hash names are built from;
//! - `wire` (feature `wire`) turns records into DNS wire records for the crates that speak DNS.

pub mod changes;
pub mod delegation;
pub mod drain;
pub mod drift;
pub mod fidelity;
pub mod model;
pub mod plan;
pub mod shortcode;
pub mod tiers;
pub mod tree;
#[cfg(feature = "wire")]
pub mod wire;

pub use model::{Endpoint, RecordKey, RecordType};
