//! Zones as they are served: the ManagedZone → provider mapping, the embedded nameserver's zones
//! (mirrored from DNSRecords, signed with the keys kept here), and who owns what in a zone.

pub mod dnssec_keys;
pub mod owners;
pub mod provider_args;
pub mod zone_mirror;
pub mod zone_provider;
