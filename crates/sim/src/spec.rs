//! The sequential specification each builtin policy names, from `ratelab_check::family`'s
//! registry (every algorithm of `ratelab-core` has one there, or does not compile): what the
//! linearizability checker holds answers to, what the cleanup job's checker replays to know
//! when a bucket is full again, and what the liveness rule promises a paced client. The
//! limiter's clock is the simulated clock, so windows are aligned to its zero.

pub(crate) use ratelab_check::family::WithFamily;
use ratelab_check::family::{self, Specified};
use ratelab_check::linearizable::Spec;
use ratelab_core::{Nanos, Policy};

/// The token bucket's specification for `policy`'s bucket.
pub(crate) fn bucket_spec(bucket: &ratelab_core::TokenBucket) -> Spec {
    bucket.family(Some(Nanos::ZERO))
}

/// Does `work` with the specification of `policy`'s family.
pub(crate) fn with_family<W: WithFamily>(policy: &Policy, work: W) -> W::Out {
    family::with_family(policy, Some(Nanos::ZERO), work)
}
