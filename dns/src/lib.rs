//! Meridian's DNS engine. It knows records, zones, owners and health, and nothing about
//! Kubernetes: the hub and the spoke agent translate their objects into its types.
//!
//! The engine arrives with the record-tree issue; this crate exists now so the workspace has
//! its final shape and the dependency direction (hub → dns, agent → dns, never dns → kube) is
//! fixed from the start.
