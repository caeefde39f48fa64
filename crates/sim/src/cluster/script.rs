//! The algorithm the cluster's store runs, and the algorithms one run plugs in.

use crate::planted::StorePolicy;
use crate::scenario::Scenario;
use ratelab_core::{Algorithm, FixedWindow, Policy};

/// What the cluster needs of the algorithm its store runs, beyond [`Algorithm`]: the
/// builtin policies' script ([`StorePolicy`]) and a user's limiter
/// ([`crate::limiter::Plugged`]) both provide it.
pub(crate) trait Script: Algorithm + Clone + Send + Sync + 'static {
    /// The fixed window the `incr_then_expire` planted bug counts over, if this is one.
    fn fixed_window(&self) -> Option<FixedWindow>;
}

impl Script for StorePolicy {
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
        let engine = sc.spec.store.engine;
        Plug {
            script: StorePolicy {
                bug,
                ..StorePolicy::on(sc.policy, engine)
            },
            gateway: StorePolicy::correct(sc.policy),
            edge: edge_bucket(sc).map(|b| StorePolicy::on(Policy::TokenBucket(b), engine)),
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
