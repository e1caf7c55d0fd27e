//! The reconcilers hub and agents share, each a pipeline (gather → decide → apply → status),
//! and the context they share.

pub mod context;
pub mod dns_policy;
pub mod dns_record;
pub mod fleet_brake;
pub mod gateway_status;
pub mod memory;
