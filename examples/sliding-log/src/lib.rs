//! A sliding-log rate limiter: at most `LIMIT` requests in any `window`.
use ratelab_core::{Algorithm, CostError, Decision, Nanos, Quota};

/// Requests admitted per window; the log holds that many times, so its state is `Copy`.
pub const LIMIT: usize = 3;

/// The policy: `LIMIT` requests per `window`.
#[derive(Clone, Copy, Debug)]
pub struct SlidingLog {
    /// The window's length.
    pub window: Nanos,
}

/// When each admission still in the window was made, oldest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Log {
    times: [Nanos; LIMIT],
    len: usize,
}

impl Algorithm for SlidingLog {
    type State = Log;

    fn transition(
        &self,
        log: Option<Log>,
        now: Nanos,
        cost: u64,
    ) -> Result<(Log, Decision), CostError> {
        let limit = LIMIT as u64;
        if cost > limit {
            return Err(CostError { cost, limit });
        }
        // Keep the admissions that still weigh at `now` (a clock set back keeps them all).
        let (mut times, mut len) = ([Nanos::ZERO; LIMIT], 0);
        for &t in log.iter().flat_map(|l| &l.times[..l.len]) {
            if t.saturating_add(self.window) > now {
                (times[len], len) = (t, len + 1);
            }
        }
        times[..len].sort();
        let (free, allowed) = (LIMIT - len, cost <= (LIMIT - len) as u64);
        if allowed {
            times[len..len + cost as usize].fill(now);
            len += cost as usize;
        }
        // How long until admission `i` leaves the window.
        let leaves = |i: usize| times[i].saturating_add(self.window).saturating_sub(now);
        let decision = Decision {
            allowed,
            limit,
            remaining: (LIMIT - len) as u64,
            reset_after: len.checked_sub(1).map_or(Nanos::ZERO, leaves),
            retry_after: (!allowed).then(|| leaves(cost as usize - free - 1)),
            // Whole again once the newest admission has left the window.
            full_after: len.checked_sub(1).map_or(Nanos::ZERO, leaves),
        };
        Ok((Log { times, len }, decision))
    }

    fn expires_at(&self, log: &Log) -> Nanos {
        let newest = log.times[..log.len].iter().max();
        newest.map_or(Nanos::ZERO, |t| t.saturating_add(self.window))
    }

    fn quota(&self) -> Quota {
        Quota {
            limit: LIMIT as u64,
            window: self.window,
        }
    }
}
