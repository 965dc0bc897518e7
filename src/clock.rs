//! The clock the allocator and the controller read: the machine's, or a virtual one.
//!
//! Owns: the [`Clock`] trait and [`SystemClock`]. Must not touch: anything that decides.

use std::time::Instant;

/// Where the time is read: the machine's clocks in the operator, virtual time in the policy
/// simulator (`diorch simulate`) and in tests, so the allocator and the controller's decision
/// step run the same rules on either. Call latencies (metrics) are always wall time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// Monotonic time: reservation ages and re-plan rate limits.
    fn now(&self) -> Instant;
    /// Calendar time: job ages from their creation timestamps.
    fn wall(&self) -> jiff::Timestamp;
}

/// The machine's clocks.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
    fn wall(&self) -> jiff::Timestamp {
        jiff::Timestamp::now()
    }
}
