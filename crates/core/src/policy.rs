//! [`Policy`]: any of the three algorithms behind one type, for configuration and scenarios.

use crate::algorithm::{Algorithm, Quota};
use crate::window::{FixedWindow, FixedWindowState, SlidingWindow, SlidingWindowState};
use crate::{CostError, Decision, Nanos, TokenBucket, TokenBucketState};

/// One of the supported algorithms, chosen at run time.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Policy {
    /// Token bucket (GCRA).
    TokenBucket(TokenBucket),
    /// Fixed window.
    FixedWindow(FixedWindow),
    /// Sliding-window counter.
    SlidingWindow(SlidingWindow),
}

/// The state of whichever algorithm a [`Policy`] holds.
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyState {
    /// Token-bucket state.
    TokenBucket(TokenBucketState),
    /// Fixed-window state.
    FixedWindow(FixedWindowState),
    /// Sliding-window state.
    SlidingWindow(SlidingWindowState),
}

/// Runs `alg` over `state` if the state belongs to it. A state of another algorithm (the
/// policy changed under a live key) is treated as absent: the key starts with a full quota.
macro_rules! dispatch {
    ($alg:expr, $state:expr, $now:expr, $cost:expr, $variant:ident) => {{
        let state = match $state {
            Some(PolicyState::$variant(s)) => Some(s),
            _ => None,
        };
        $alg.transition(state, $now, $cost)
            .map(|(s, d)| (PolicyState::$variant(s), d))
    }};
}

impl Algorithm for Policy {
    type State = PolicyState;

    fn transition(
        &self,
        state: Option<PolicyState>,
        now: Nanos,
        cost: u64,
    ) -> Result<(PolicyState, Decision), CostError> {
        match self {
            Policy::TokenBucket(a) => dispatch!(a, state, now, cost, TokenBucket),
            Policy::FixedWindow(a) => dispatch!(a, state, now, cost, FixedWindow),
            Policy::SlidingWindow(a) => dispatch!(a, state, now, cost, SlidingWindow),
        }
    }

    fn expires_at(&self, state: &PolicyState) -> Nanos {
        match (self, state) {
            (Policy::TokenBucket(a), PolicyState::TokenBucket(s)) => a.expires_at(s),
            (Policy::FixedWindow(a), PolicyState::FixedWindow(s)) => a.expires_at(s),
            (Policy::SlidingWindow(a), PolicyState::SlidingWindow(s)) => a.expires_at(s),
            // A foreign state means nothing under this policy: it may go at once.
            _ => Nanos::ZERO,
        }
    }

    fn quota(&self) -> Quota {
        match self {
            Policy::TokenBucket(a) => a.quota(),
            Policy::FixedWindow(a) => a.quota(),
            Policy::SlidingWindow(a) => a.quota(),
        }
    }
}
