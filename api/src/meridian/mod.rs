//! `meridian.dev/v1alpha1`: Meridian's own kinds.

mod cluster_report;
mod probe_results;
mod route_binding;
mod router;

pub use cluster_report::*;
pub use probe_results::*;
pub use route_binding::*;
pub use router::*;
