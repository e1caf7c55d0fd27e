//! Meridian's DNS engine. It knows records, zones, owners and health, and nothing about
//! Kubernetes: the hub and the spoke agent translate their objects into its types.
//!
//! - [`tree`] builds the record tree of one host from a policy and the clusters serving it;
//!   [`tree::RecordTree::prune`] removes unhealthy leaves from it;
//! - [`plan`] turns one owner's desired records, the zone and what the owner published before
//!   into a change set, with external-dns-compatible ownership records;
//! - [`provider`] is the interface to DNS providers, with a strict in-memory one;
//! - [`nameserver`] is the embedded authoritative server, answering GEO and weighted records
//!   at query time.

pub mod model;
pub mod nameserver;
pub mod plan;
pub mod provider;
pub mod shortcode;
pub mod tree;

pub use model::{Endpoint, RecordKey, RecordType};
