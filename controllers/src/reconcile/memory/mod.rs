//! What the reconcilers remember from one pass to the next, each a named type for the step
//! that uses it: the drain steps of each policy (its decide), the fleet brake's hold (its
//! decide), and the DNSRecord's tier choice, failovers under way, probes seen and drift marks.
//! [`crate::reconcile::context::Context`] holds them beside its handles; these modules depend on
//! nothing of the reconcilers, so the context can.

pub mod brake;
pub mod drains;
pub mod records;
