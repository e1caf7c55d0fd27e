//! Meridian's Kubernetes vocabulary: the CRD types it serves, the parts of upstream kinds (OCM,
//! Gateway API, OpenShift Route) it reads or writes, and the label, annotation and condition
//! names shared by the hub, the agent and the tests.
//!
//! Seed-defined kinds keep the group `kuadrant.io` and the field names of the
//! multicluster-gateway-controller release that implemented the seeds, so manifests written for
//! it apply unchanged. Meridian's own kinds use `meridian.dev`.

// clippy reads the repeated `type_ = "string"` of several `printcolumn(...)` entries in one
// `#[kube(...)]` attribute as a duplicated attribute; they are separate columns.
#![allow(clippy::duplicated_attributes)]

pub mod conditions;
pub mod crds;
pub mod duration;
pub mod geo;
pub mod kuadrant;
pub mod labels;
pub mod meridian;
pub mod names;
pub mod upstream;
mod validation;

/// Group of the seed-defined kinds (`DNSPolicy`, `DNSRecord`, `ManagedZone`, `DNSHealthCheckProbe`).
pub const KUADRANT_GROUP: &str = "kuadrant.io";

/// Group of Meridian's own kinds (cluster reports, router shards, route bindings).
pub const MERIDIAN_GROUP: &str = "meridian.dev";

/// The `kubectl get` category every Meridian-served kind belongs to: `kubectl get meridian`.
pub const CATEGORY: &str = "meridian";
