//! The caller's clock of a test that decides on it against a real Redis, whose keys expire on
//! Redis's own clock: it moves by each step asked for, and at least as far as real time has
//! moved since the last step (and 1 ms more), so that whatever Redis has expired on its clock
//! the core has let go of too on the caller's, however slowly a loaded machine runs the test.
//!
//! A module of `tests/suite` (its Redis and Redis Cluster tests).

use std::time::Instant;

/// A caller's clock, ns since the epoch.
pub struct CallerClock {
    now: u64,
    last: Instant,
}

impl CallerClock {
    /// A clock at `start`.
    pub fn at(start: u64) -> CallerClock {
        CallerClock {
            now: start,
            last: Instant::now(),
        }
    }

    /// Moves the clock by `step` ns, or by as much as real time moved since the last step
    /// and 1 ms more, whichever is further; the new time.
    pub fn step(&mut self, step: u64) -> u64 {
        let real = u64::try_from(self.last.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.last = Instant::now();
        self.now = self
            .now
            .saturating_add(step.max(real.saturating_add(1_000_000)));
        self.now
    }
}
