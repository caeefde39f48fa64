//! The algorithm the cluster's store runs, and the algorithms one run plugs in.

use crate::planted::StorePolicy;
use crate::scenario::Scenario;
use ratelab_core::{Algorithm, FixedWindow, Nanos, Policy, PolicyState};

/// What the cluster needs of the algorithm its store runs, beyond [`Algorithm`]: the
/// builtin policies' script ([`StorePolicy`]) and a user's limiter
/// ([`crate::limiter::Plugged`]) both provide it.
pub(crate) trait Script: Algorithm + Clone + Send + Sync + 'static {
    /// When a state this algorithm wrote is full again, for the cleanup job's checker.
    fn full_at(&self, state: &Self::State) -> Option<Nanos>;

    /// The fixed window the `incr_then_expire` planted bug counts over, if this is one.
    fn fixed_window(&self) -> Option<FixedWindow>;
}

impl Script for StorePolicy {
    /// Read off the state: a token bucket's theoretical arrival time, the end of a fixed
    /// window, the end of the window after a sliding window's (when its count stops weighing);
    /// for another algorithm, when its state expires.
    fn full_at(&self, state: &PolicyState) -> Option<Nanos> {
        let ns = match (self.policy, *state) {
            (Policy::TokenBucket(b), PolicyState::TokenBucket(s)) => {
                s.tat_scaled / u128::from(b.refill_amount().max(1))
            }
            (Policy::FixedWindow(w), PolicyState::FixedWindow(s)) => {
                let len = u128::from(w.0.window().as_u64());
                (u128::from(s.window) + 1) * len
            }
            (Policy::SlidingWindow(w), PolicyState::SlidingWindow(s)) => {
                let len = u128::from(w.0.window().as_u64());
                (u128::from(s.window) + 2) * len
            }
            // Another algorithm's state is full again when it expires, as
            // `Algorithm::expires_at` promises (a foreign state: at once).
            #[allow(unreachable_patterns)]
            (policy, state) => u128::from(policy.expires_at(&state).as_u64()),
        };
        Some(Nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
    }

    fn fixed_window(&self) -> Option<FixedWindow> {
        match self.policy {
            Policy::FixedWindow(w) => Some(w),
            _ => None,
        }
    }
}

/// The algorithms one run's cluster uses: the per-key layer's as the store's script runs it
/// (with a planted script bug, if any) and as the gateways run it on the naive path, and the
/// edge layer's.
#[derive(Clone, Debug)]
pub(crate) struct Plug<S> {
    /// The per-key algorithm in the store node.
    pub(crate) script: S,
    /// The per-key algorithm in the gateways.
    pub(crate) gateway: S,
    /// The edge layer's algorithm, when the scenario has an edge limit.
    pub(crate) edge: Option<S>,
}

impl Plug<StorePolicy> {
    /// The builtin policy of `sc`, with its script's planted bug.
    pub(crate) fn builtin(sc: &Scenario) -> Plug<StorePolicy> {
        let bug = sc.spec.planted_bug.filter(|b| b.in_script());
        Plug {
            script: StorePolicy {
                policy: sc.policy,
                bug,
            },
            gateway: StorePolicy::correct(sc.policy),
            edge: edge_bucket(sc).map(|b| StorePolicy::correct(Policy::TokenBucket(b))),
        }
    }
}

/// The scenario's edge limit, as a token bucket.
pub(crate) fn edge_bucket(sc: &Scenario) -> Option<ratelab_core::TokenBucket> {
    sc.spec.gateway.edge.map(|e| {
        ratelab_core::TokenBucket::per_second(e.capacity.get(), e.refill_per_sec.get())
            .expect("validated edge policy")
    })
}
