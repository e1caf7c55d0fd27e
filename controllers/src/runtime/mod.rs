//! What the controllers run on: the shared watch caches and the triggers they feed, the
//! error type, the names objects are written and filed under, the clock, the fence, the
//! metrics and the journal.

pub mod applied;
pub mod backoff;
pub mod caches;
pub mod clock;
pub mod error;
pub mod fence;
pub mod identity;
pub mod indexes;
pub mod journal;
pub mod metrics;
