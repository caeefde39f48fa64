//! A circuit breaker for store calls, sans-IO: it reads time only from its arguments.
//!
//! Closed: calls go through; `failures_to_open` consecutive failures open it. Open: calls are
//! skipped (the gateway fails open or closed at once, without paying the timeout) until
//! `cooldown` has passed. Half-open: one probe call goes through; success closes the breaker,
//! failure re-opens it for another cooldown.

use ratelab_core::Nanos;

/// Breaker settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BreakerConfig {
    /// Consecutive failures that open the breaker (at least 1).
    pub failures_to_open: u32,
    /// How long it stays open before a probe.
    pub cooldown: Nanos,
}

impl Default for BreakerConfig {
    fn default() -> Self {
        BreakerConfig {
            failures_to_open: 5,
            cooldown: Nanos::from_millis(1_000),
        }
    }
}

/// The breaker's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through; this many consecutive failures so far.
    Closed(u32),
    /// Calls are skipped until this instant.
    Open(Nanos),
    /// One probe is in flight; other calls are skipped.
    HalfOpen,
}

/// Whether a call may go to the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Permit {
    /// Make the call.
    Call,
    /// Make the call as the half-open probe.
    Probe,
    /// Skip the store.
    Skip,
}

/// What a result did to the breaker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transition {
    /// Nothing changed state.
    None,
    /// It opened.
    Opened,
    /// It closed.
    Closed,
}

/// A circuit breaker.
#[derive(Clone, Debug)]
pub struct Breaker {
    config: BreakerConfig,
    state: BreakerState,
}

impl Breaker {
    /// A closed breaker.
    pub fn new(config: BreakerConfig) -> Breaker {
        Breaker {
            config: BreakerConfig {
                failures_to_open: config.failures_to_open.max(1),
                ..config
            },
            state: BreakerState::Closed(0),
        }
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        self.state
    }

    /// Asks to call the store at `now`.
    pub fn permit(&mut self, now: Nanos) -> Permit {
        match self.state {
            BreakerState::Closed(_) => Permit::Call,
            BreakerState::Open(until) if now >= until => {
                self.state = BreakerState::HalfOpen;
                Permit::Probe
            }
            BreakerState::Open(_) | BreakerState::HalfOpen => Permit::Skip,
        }
    }

    /// Reports how a permitted call ended.
    pub fn record(&mut self, now: Nanos, permit: Permit, ok: bool) -> Transition {
        match (self.state, ok) {
            (BreakerState::Closed(_), true) => {
                self.state = BreakerState::Closed(0);
                Transition::None
            }
            (BreakerState::Closed(n), false) => {
                if n + 1 >= self.config.failures_to_open {
                    self.state = BreakerState::Open(now.saturating_add(self.config.cooldown));
                    Transition::Opened
                } else {
                    self.state = BreakerState::Closed(n + 1);
                    Transition::None
                }
            }
            (BreakerState::HalfOpen, true) if permit == Permit::Probe => {
                self.state = BreakerState::Closed(0);
                Transition::Closed
            }
            (BreakerState::HalfOpen, false) if permit == Permit::Probe => {
                self.state = BreakerState::Open(now.saturating_add(self.config.cooldown));
                Transition::Opened
            }
            // A call permitted before the breaker opened, finishing late: it changes nothing.
            _ => Transition::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_probes_after_cooldown_and_closes() {
        let mut b = Breaker::new(BreakerConfig {
            failures_to_open: 3,
            cooldown: Nanos(100),
        });
        for t in 0..2 {
            assert_eq!(b.permit(Nanos(t)), Permit::Call);
            assert_eq!(b.record(Nanos(t), Permit::Call, false), Transition::None);
        }
        // A success resets the count.
        assert_eq!(b.record(Nanos(2), Permit::Call, true), Transition::None);
        for t in 3..5 {
            b.record(Nanos(t), Permit::Call, false);
        }
        assert_eq!(b.record(Nanos(5), Permit::Call, false), Transition::Opened);
        assert_eq!(b.permit(Nanos(104)), Permit::Skip);
        assert_eq!(b.permit(Nanos(105)), Permit::Probe);
        assert_eq!(b.permit(Nanos(106)), Permit::Skip, "one probe at a time");
        assert_eq!(
            b.record(Nanos(107), Permit::Probe, false),
            Transition::Opened
        );
        assert_eq!(b.permit(Nanos(207)), Permit::Probe);
        assert_eq!(
            b.record(Nanos(208), Permit::Probe, true),
            Transition::Closed
        );
        assert_eq!(b.state(), BreakerState::Closed(0));
    }
}
