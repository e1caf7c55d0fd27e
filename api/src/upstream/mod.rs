//! The parts of upstream kinds Meridian reads or writes: OCM, Gateway API and OpenShift Route.
//!
//! Each struct holds only the fields Meridian uses. Where Meridian writes a whole object (or
//! passes one through, like a Gateway copied into a ManifestWork), every struct on the path keeps
//! the fields it does not model in an `extra` map, so a round trip loses nothing.
//! The schemas are the upstream projects' own CRDs, installed by the test bed, never these types.

mod gateway;
mod ocm;
mod openshift;

pub use gateway::*;
pub use ocm::*;
pub use openshift::*;

/// Fields a struct does not model, kept verbatim.
pub type Extra = std::collections::BTreeMap<String, serde_json::Value>;
