//! Meridian's embedded authoritative nameserver.
//!
//! Zones are immutable snapshots in a [`Catalog`] that is swapped atomically on every change, so a
//! query sees either the old zone or the new one, never a mix. Answers are chosen at query time:
//! one target drawn by weight for weighted records, the client's location (EDNS Client Subnet,
//! else the source address, looked up in a MaxMind-format database) for GEO records, with the
//! catch-all `*` and then a deterministic fallback, never an empty answer.
//!
//! [`respond`] is a pure function from a request packet to response packets; [`server`] runs it
//! on UDP and TCP. Standard secondaries follow the zones: NOTIFY on every change, then IXFR from
//! a journal of recent changes (or AXFR), signed with TSIG; they get plain records, since they
//! cannot choose by GEO or weight (see `transfer`).

pub(crate) mod answer;
mod clock;
mod cookie;
pub mod dnssec;
pub mod explain;
mod fast;
pub mod geo;
mod history;
mod notify;
mod prepared;
mod query;
pub mod rate_limit;
pub mod server;
pub mod stats;
mod transfer;
mod tsig;
mod zone;

pub use answer::{respond, respond_into};
pub use explain::{Explanation, explain};
pub use geo::{GeoCode, GeoDb, Location};
pub use history::serial_newer;
pub use meridian_dns::wire::{TsigKey, TsigKeyError};
pub use query::{QueryContext, Transport};
pub use rate_limit::RateLimit;
pub use server::{DEFAULT_TCP_CONNECTIONS, NameServer, ServerConfig, next_serial};
pub use stats::{Stats, Tally};
pub use zone::{
    Catalog, DEFAULT_SOA_EXPIRE, DelegationError, MIN_SOA_EXPIRE, NAME_SERVER_TTL, Zone,
    ZoneConfig, ZoneNameServer,
};
