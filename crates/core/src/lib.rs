//! # ratelab-core
//!
//! Sans-IO rate-limiting algorithms. Nothing here reads a clock, draws a random number,
//! blocks or performs I/O: every decision is a pure function
//!
//! ```text
//! (Option<State>, now, cost, &Policy) -> (State, Decision)
//! ```
//!
//! so the same code runs in production, under the loom and shuttle model checkers, and inside
//! the deterministic cluster simulator. Making a transition *atomic* across concurrent callers
//! is the store's job (`ratelab-store`), never the algorithm's: that separation is what lets
//! ratelab show the lost-update race as the only difference between its naive and atomic paths.
//!
//! Algorithms:
//! - [`TokenBucket`]: capacity B, refill R, as GCRA over exact scaled integer time. Its
//!   envelope — admitted cost in any interval Δt is at most B + R·Δt — is the invariant every
//!   ratelab checker uses.
//! - [`FixedWindow`]: `limit` per aligned window; shows the 2× boundary spike.
//! - [`SlidingWindow`]: the two-counter sliding-window approximation, with its error bound.
//! - [`FirstHitWindow`]: a fixed window opened by each key's first request, as Redis
//!   `INCR`-then-`EXPIRE` limiters count.
//! - [`SteppedBucket`]: a token bucket refilled in whole-period steps, as limiters that count
//!   refills by elapsed periods do.
//!
//! **A new algorithm** is one place: a file here with its policy type, its [`Algorithm`] impl
//! (state, transition, TTL) and its [`spec::Written`] impl (which parameters it takes, from
//! the one list of them, [`for_each_policy_field!`]), declared and re-exported here
//! (`pub mod`, `pub use`), and one line in [`for_each_algorithm!`] at the end of this file;
//! then its specification, a file in `ratelab-check`'s `family` that implements `Specified`
//! for its policy type. That line gives it a [`Policy`] and [`PolicyState`] variant and an
//! [`AlgorithmName`]; scenario files, the server's limits file and RLS configuration (all
//! written as a [`PolicySpec`]) and the probe's `--policy NAME:FIELD=N,…` accept it; the
//! simulator and the server's memory store run it; the explorer draws it; and every checker
//! reaches its specification through `ratelab_check::family::with_family`, which is written
//! from the same list, so an algorithm without one does not compile: the linearizability
//! checker holds its answers to it, and the simulator's liveness rule holds the keys within
//! what it sustains (`Family::sustains`) to liveness. The bound checkers hold it to what its
//! [`Quota`] of L per W allows any window algorithm, at most 2L + L·Δt/W in any interval Δt.
//! On Redis every algorithm is a function of one script (`ratelab-store`'s `limits.lua`; the
//! token bucket has a script of its own too, `token_bucket.lua`, whose functions that one
//! takes).
//!
//! One request at several limits is decided all or nothing by [`all::decide_all`]: admitted
//! and spent at every limit, or denied and spent at none.
//!
//! ```
//! use ratelab_core::{Algorithm, Nanos, TokenBucket};
//!
//! let bucket = TokenBucket::per_second(2, 1).unwrap(); // B = 2, R = 1/s
//! let (s, d) = bucket.transition(None, Nanos(0), 1).unwrap();
//! assert!(d.allowed && d.remaining == 1);
//! let (s, _) = bucket.transition(Some(s), Nanos(0), 1).unwrap();
//! let (_, d) = bucket.transition(Some(s), Nanos(0), 1).unwrap();
//! assert!(!d.allowed);
//! assert_eq!(d.retry_after, Some(Nanos::from_secs(1)));
//! ```
#![warn(missing_docs)]

mod algorithm;
pub mod all;
mod decision;
pub mod first_hit;
pub mod headers;
pub mod located;
mod policy;
pub mod spec;
pub mod stepped;
mod time;
pub mod token_bucket;
pub mod window;

pub use algorithm::{Algorithm, Quota};
pub use decision::{CostError, Decision, PolicyError};
pub use first_hit::{FirstHitWindow, FirstHitWindowState};
pub use spec::{PolicySpec, SpecError};
pub use stepped::{SteppedBucket, SteppedBucketState};
pub use time::{NANOS_PER_SEC, Nanos};
pub use token_bucket::{TokenBucket, TokenBucketState};
pub use window::{FixedWindow, SlidingWindow, WindowPolicy};

/// The algorithms, one line each: the variant, its policy and state types, its name in files
/// and its name in prose. Everything that names an algorithm comes from here: this crate's
/// [`Policy`], [`PolicyState`] and [`AlgorithmName`], and what other crates keep per
/// algorithm (`ratelab-check` its specification), by calling `for_each_algorithm!(m)` with a
/// macro `m` of their own that takes the list.
#[macro_export]
macro_rules! for_each_algorithm {
    ($callback:ident) => {
        $callback! {
            /// Token bucket (GCRA): `capacity`, and `refill_per_sec` or `refill` per
            /// `refill_period_ms`.
            TokenBucket($crate::TokenBucket, $crate::TokenBucketState), "token_bucket", "token bucket";
            /// Fixed window: `limit` per aligned window of `window_ms`.
            FixedWindow($crate::FixedWindow, $crate::window::FixedWindowState), "fixed_window", "fixed window";
            /// Sliding-window counter: `limit` per `window_ms`, the previous window weighted.
            SlidingWindow($crate::SlidingWindow, $crate::window::SlidingWindowState), "sliding_window", "sliding window";
            /// Fixed window opened by a key's first request: `limit` per `window_ms` from then.
            FirstHitWindow($crate::FirstHitWindow, $crate::FirstHitWindowState), "first_hit_window", "first-hit window";
            /// Token bucket refilled in whole-period steps: `capacity`, `refill` tokens at the
            /// end of every whole `refill_period_ms`.
            SteppedBucket($crate::SteppedBucket, $crate::SteppedBucketState), "stepped_bucket", "stepped token bucket";
        }
    };
}

use policy::algorithms;
for_each_algorithm!(algorithms);
