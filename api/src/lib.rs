//! Meridian's Kubernetes vocabulary.
//!
//! The CRD types arrive with the API issue; for now this crate names the API groups so that
//! the other crates and the test bed agree on them.

/// Group of the seed-defined kinds (`DNSPolicy`, `DNSRecord`, `ManagedZone`, `DNSHealthCheckProbe`),
/// kept so that manifests written for the multicluster-gateway-controller apply unchanged.
pub const KUADRANT_GROUP: &str = "kuadrant.io";

/// Group of Meridian's own kinds (spoke reports, router shards, route bindings).
pub const MERIDIAN_GROUP: &str = "meridian.dev";
