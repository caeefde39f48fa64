//! The sequential specification each builtin policy names, from `ratelab_check::family`:
//! what the linearizability checker holds answers to, and what the cleanup job's checker
//! replays to know when a bucket is full again. Windows are aligned to the simulated clock's
//! zero; the sliding counter rounds its weighted estimate up, as the policy states.
//!
//! **A new policy** gets its line in [`with_family`].

use ratelab_check::family::Family;
use ratelab_check::family::first_hit::FirstHitWindow;
use ratelab_check::family::fixed_window::FixedWindow;
use ratelab_check::family::sliding_counter::{Rounding, SlidingCounter};
use ratelab_check::linearizable::Spec;
use ratelab_core::{Nanos, Policy};

/// Work to do with a family's specification, whichever it is.
pub(crate) trait WithFamily {
    /// What the work gives.
    type Out;

    /// Does the work with `family`.
    fn with<F: Family>(self, family: &F) -> Self::Out;
}

/// The token bucket's specification for `policy`'s bucket.
pub(crate) fn bucket_spec(bucket: &ratelab_core::TokenBucket) -> Spec {
    Spec {
        capacity: bucket.capacity(),
        amount: bucket.refill_amount(),
        period: bucket.refill_period(),
    }
}

/// Does `work` with the specification of `policy`'s family.
pub(crate) fn with_family<W: WithFamily>(policy: &Policy, work: W) -> W::Out {
    match *policy {
        Policy::TokenBucket(bucket) => work.with(&bucket_spec(&bucket)),
        Policy::FixedWindow(w) => work.with(&FixedWindow {
            limit: w.0.limit(),
            window: w.0.window(),
            phase: Some(Nanos::ZERO),
        }),
        Policy::SlidingWindow(w) => work.with(&SlidingCounter {
            limit: w.0.limit(),
            window: w.0.window(),
            phase: Some(Nanos::ZERO),
            rounding: Rounding::Up,
            first_hit: false,
        }),
        Policy::FirstHitWindow(w) => work.with(&FirstHitWindow {
            limit: w.0.limit(),
            window: w.0.window(),
        }),
    }
}
