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
//!
//! **A new algorithm** is a file here with its policy type and its [`Algorithm`] impl (state,
//! transition, TTL) and its [`spec::Written`] impl (its parameters), declared and re-exported
//! here (`pub mod`, `pub use`), plus one line in the list at the end of this file. That line gives it a [`Policy`] and [`PolicyState`] variant and an
//! [`AlgorithmName`]: scenario files, the server's limits file and RLS configuration (all
//! written as a [`PolicySpec`]) accept it, the simulator and the server's memory store run it,
//! and the explorer draws it. Redis runs only the token bucket's script (`ratelab-store`'s
//! `token_bucket.lua`; the server refuses other algorithms on Redis). The checkers hold a new
//! algorithm to the bound its [`Quota`] of L per W allows any window algorithm, at most
//! 2L + L·Δt/W in any interval Δt; a specification of its own (exact linearizability,
//! over-denial) goes in `ratelab-check` and `ratelab-sim`'s `checkers/`, and what it must
//! admit (the keys held to liveness) in `ratelab-sim`'s `eligible.rs`.
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
mod time;
pub mod token_bucket;
pub mod window;

pub use algorithm::{Algorithm, Quota};
pub use decision::{CostError, Decision, PolicyError};
pub use first_hit::{FirstHitWindow, FirstHitWindowState};
pub use spec::{PolicySpec, SpecError};
pub use time::{NANOS_PER_SEC, Nanos};
pub use token_bucket::{TokenBucket, TokenBucketState};
pub use window::{FixedWindow, SlidingWindow, WindowPolicy};

// The algorithms, one line each: the variant, its policy and state types, its name in files
// and its name in prose. Everything that names an algorithm comes from here.
policy::algorithms! {
    /// Token bucket (GCRA): `capacity`, and `refill_per_sec` or `refill` per
    /// `refill_period_ms`.
    TokenBucket(TokenBucket, TokenBucketState), "token_bucket", "token bucket";
    /// Fixed window: `limit` per aligned window of `window_ms`.
    FixedWindow(FixedWindow, window::FixedWindowState), "fixed_window", "fixed window";
    /// Sliding-window counter: `limit` per `window_ms`, the previous window weighted.
    SlidingWindow(SlidingWindow, window::SlidingWindowState), "sliding_window", "sliding window";
    /// Fixed window opened by a key's first request: `limit` per `window_ms` from then.
    FirstHitWindow(FirstHitWindow, FirstHitWindowState), "first_hit_window", "first-hit window";
}
