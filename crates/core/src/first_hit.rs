//! The fixed window that starts at a key's first request, as a Redis `INCR` with an `EXPIRE`
//! set by the window's first request gives (express-rate-limit, rate-limiter-flexible,
//! Flask-Limiter's fixed window on Redis).
//!
//! A key's window opens at its first request and lasts `window`; the requests after it ends
//! open the next. At most `limit` is admitted per window. Windows of one key never overlap,
//! so in any interval Δt it admits at most `limit` · (⌊Δt / window⌋ + 2): the boundary spike
//! of the aligned fixed window is still there, placed by the traffic instead of the clock.
//!
//! Time going backwards: a `now` before the window's start is counted in that window, so it
//! can never open a new window early.

use crate::algorithm::{Algorithm, Quota, check_cost};
use crate::window::WindowPolicy;
use crate::{CostError, Decision, Nanos, PolicyError};

/// At most `limit` per window of `window`, each key's window opened by its first request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FirstHitWindow(pub WindowPolicy);

/// A first-hit window's state: when the window opened, and how much it has admitted.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FirstHitWindowState {
    /// The instant the window opened, ns.
    pub start: Nanos,
    /// Units admitted in it.
    pub count: u64,
}

impl FirstHitWindow {
    /// At most `limit` per window of length `window`.
    pub fn new(limit: u64, window: Nanos) -> Result<FirstHitWindow, PolicyError> {
        WindowPolicy::new(limit, window).map(FirstHitWindow)
    }

    /// When the window opened at `start` closes, ns.
    fn end(&self, start: Nanos) -> u128 {
        u128::from(start.as_u64()) + self.0.w()
    }
}

impl Algorithm for FirstHitWindow {
    type State = FirstHitWindowState;

    fn transition(
        &self,
        state: Option<FirstHitWindowState>,
        now: Nanos,
        cost: u64,
    ) -> Result<(FirstHitWindowState, Decision), CostError> {
        let limit = self.0.limit();
        check_cost(cost, limit)?;
        let mut st = match state {
            // The window still open (or a clock that stepped back before it opened).
            Some(s) if u128::from(now.as_u64()) < self.end(s.start) => s,
            _ => FirstHitWindowState {
                start: now,
                count: 0,
            },
        };
        let allowed = st.count + cost <= limit;
        if allowed {
            st.count += cost;
        }
        let until_end = Nanos::saturating_from_u128(self.end(st.start) - u128::from(now.as_u64()));
        // The whole limit comes back at once, when the window closes.
        let whole_after = if st.count == 0 {
            Nanos::ZERO
        } else {
            until_end
        };
        let decision = Decision {
            allowed,
            limit,
            remaining: limit - st.count,
            reset_after: whole_after,
            retry_after: (!allowed).then_some(until_end),
            full_after: whole_after,
        };
        Ok((st, decision))
    }

    fn expires_at(&self, state: &FirstHitWindowState) -> Nanos {
        Nanos::saturating_from_u128(self.end(state.start))
    }

    fn quota(&self) -> Quota {
        Quota {
            limit: self.0.limit(),
            window: self.0.window(),
        }
    }
}

crate::window::written_as_window!(FirstHitWindow);

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Nanos {
        Nanos::from_millis(v)
    }

    #[test]
    fn the_window_opens_at_the_first_request_not_at_the_clock() {
        let w = FirstHitWindow::new(2, ms(1_000)).unwrap();
        let (s, d) = w.transition(None, ms(900), 1).unwrap();
        assert!(d.allowed && d.remaining == 1 && d.reset_after == ms(1_000));
        let (s, d) = w.transition(Some(s), ms(950), 1).unwrap();
        assert!(d.allowed && d.remaining == 0);
        // An aligned window would have opened anew at 1 000 ms; this one is open to 1 900.
        let (s2, d) = w.transition(Some(s), ms(1_100), 1).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(ms(800)));
        assert_eq!(s2, s, "a denial leaves the state as it was");
        assert_eq!(w.expires_at(&s), ms(1_900));
        // At the announced time the next window opens.
        let (s, d) = w.transition(Some(s), ms(1_900), 2).unwrap();
        assert!(d.allowed && d.remaining == 0);
        assert_eq!(s.start, ms(1_900));
    }

    #[test]
    fn a_clock_that_steps_back_counts_in_the_open_window() {
        let w = FirstHitWindow::new(1, ms(100)).unwrap();
        let (s, _) = w.transition(None, ms(1_000), 1).unwrap();
        let (_, d) = w.transition(Some(s), ms(500), 1).unwrap();
        assert!(!d.allowed, "an earlier clock must not open a new window");
    }
}
