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

    /// Looks at the brake with what it holds now, under one lock, so that reconciles looking
    /// at once never lose each other's memory: `look` returns its result and the memory to keep.
    /// Returns that result, and whether the brake was on before.
    pub fn update<T>(
        &self,
        look: impl FnOnce(Option<BrakeMemory>) -> (T, Option<BrakeMemory>),
    ) -> (T, bool) {
        let mut memory = self.0.lock().expect("brake memory lock");
        let was = memory.is_some();
        let (result, kept) = look(*memory);
        *memory = kept;
        (result, was)
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
        let (seen, was) = memory.update(|recalled| (recalled, Some(held)));
        assert_eq!((seen, was), (None, false), "off before");
        assert_eq!(memory.recalled(), Some(held));
        let (seen, was) = memory.update(|recalled| (recalled, None));
        assert_eq!(
            (seen, was),
            (Some(held), true),
            "on before, and seen as it was kept"
        );
        assert_eq!(memory.recalled(), None);
    }
}
