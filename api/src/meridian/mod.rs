//! `meridian.dev/v1alpha1`: Meridian's own kinds.

mod cluster_report;
mod route_binding;
mod router;

pub use cluster_report::*;
pub use route_binding::*;
pub use router::*;
