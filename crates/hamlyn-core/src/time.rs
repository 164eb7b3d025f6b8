//! Time, passed in: the core never reads a clock.

use core::time::Duration;

/// A duration in whole nanoseconds, saturating (`Duration::MAX` and anything past
/// 584 years is `u64::MAX`): the unit of [`Instant`].
pub fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A point in time in nanoseconds since an origin the caller chooses (a monotonic clock
/// in the engine, a simulated clock in tests).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// The instant `nanos` nanoseconds later (saturating).
    pub fn plus_nanos(self, nanos: u64) -> Instant {
        Instant(self.0.saturating_add(nanos))
    }

    /// The instant `d` later (saturating).
    pub fn plus(self, d: Duration) -> Instant {
        self.plus_nanos(duration_nanos(d))
    }

    /// Nanoseconds from `earlier` to `self` (0 if `earlier` is later).
    pub fn nanos_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}
