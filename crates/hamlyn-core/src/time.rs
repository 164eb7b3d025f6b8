//! Time, passed in: the core never reads a clock.

/// A point in time in nanoseconds since an origin the caller chooses (a monotonic clock
/// in the engine, a simulated clock in tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// The instant `nanos` nanoseconds later (saturating).
    pub fn plus_nanos(self, nanos: u64) -> Instant {
        Instant(self.0.saturating_add(nanos))
    }

    /// Nanoseconds from `earlier` to `self` (0 if `earlier` is later).
    pub fn nanos_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}
