//! The contract every limiter algorithm meets.

use crate::{CostError, Decision, Nanos};
use core::fmt::Debug;

/// What a policy advertises to clients: `q` quota units per `w` (draft-10's `RateLimit-Policy`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Quota {
    /// The most a client can take at once (`q`).
    pub limit: u64,
    /// The time over which `limit` is granted (`w`): the window, or the time a token bucket
    /// takes to refill from empty.
    pub window: Nanos,
}

/// A rate-limiting algorithm: a policy plus a pure transition over its per-key state.
///
/// The transition is a pure function of `(state, now, cost, policy)`. It never reads a
/// clock, allocates or fails except for a cost the policy can never admit. Making the
/// transition atomic is the store's job, not the algorithm's.
pub trait Algorithm {
    /// Per-key state. `None` means "never seen, or expired": a full quota.
    type State: Copy + Eq + Debug + Send + Sync + 'static;

    /// Decides one request of `cost` units arriving at `now`, returning the state to store
    /// and the decision. On a denial the returned state is equivalent to the input.
    ///
    /// A `now` earlier than the time the state was last updated (a clock that stepped back,
    /// or a caller with a skewed clock) never panics and never grants more than the later
    /// time would have: each algorithm documents how it treats it.
    fn transition(
        &self,
        state: Option<Self::State>,
        now: Nanos,
        cost: u64,
    ) -> Result<(Self::State, Decision), CostError>;

    /// The instant from which `state` is equivalent to `None`, so a store can drop it (its TTL).
    fn expires_at(&self, state: &Self::State) -> Nanos;

    /// The quota this policy advertises.
    fn quota(&self) -> Quota;

    /// The time to keep `state` after `now`: `expires_at - now`, at least 1 ns so a store
    /// never writes an already-expired entry.
    fn ttl(&self, state: &Self::State, now: Nanos) -> Nanos {
        Nanos(self.expires_at(state).saturating_sub(now).as_u64().max(1))
    }
}

/// Checks `cost` against the largest admissible cost.
pub(crate) fn check_cost(cost: u64, limit: u64) -> Result<(), CostError> {
    if cost > limit {
        Err(CostError { cost, limit })
    } else {
        Ok(())
    }
}
