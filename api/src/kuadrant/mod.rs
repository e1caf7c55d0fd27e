//! `kuadrant.io/v1alpha1`: the kinds the seeds define.

mod dns_policy;
mod dns_record;
mod health_check;
mod health_probe;
mod managed_zone;

pub use dns_policy::*;
pub use dns_record::*;
pub use health_check::*;
pub use health_probe::*;
pub use managed_zone::*;

/// A reference to a Secret in the referrer's namespace.
#[derive(
    serde::Serialize, serde::Deserialize, schemars::JsonSchema, Clone, Debug, PartialEq, Eq,
)]
pub struct SecretRef {
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}
