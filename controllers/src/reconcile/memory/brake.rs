//! The fleet brake's memory: what it held when last looked at. [`crate::reconcile::fleet_brake`]
//! decides the brake with it and keeps it.

use std::sync::Mutex;

use crate::decide::silence::BrakeMemory;

/// What the brake held when last looked at, so that it lets go only once its wave is heard
/// again; `None` while it is off. One per process: the brake is the fleet's, not a policy's.
#[derive(Debug, Default)]
pub struct FleetBrakeMemory(Mutex<Option<BrakeMemory>>);

impl FleetBrakeMemory {
    /// What the brake held when last looked at.
    pub fn recalled(&self) -> Option<BrakeMemory> {
        *self.0.lock().expect("brake memory lock")
    }

    /// Keeps `memory` for the next look; returns whether the brake was on before it.
    pub fn keep(&self, memory: Option<BrakeMemory>) -> bool {
        std::mem::replace(&mut *self.0.lock().expect("brake memory lock"), memory).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    #[test]
    fn the_memory_says_whether_the_brake_was_on() {
        let memory = FleetBrakeMemory::default();
        let held = BrakeMemory {
            held_heard_since: Timestamp::from_second(10_000).unwrap(),
            released_at: None,
        };
        assert!(!memory.keep(Some(held)), "off before");
        assert_eq!(memory.recalled(), Some(held));
        assert!(memory.keep(None), "on before");
        assert_eq!(memory.recalled(), None);
    }
}
