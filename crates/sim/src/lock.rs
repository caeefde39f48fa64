//! The lock for state a simulation's tasks share: the recorder, each gateway's timeout
//! queue and its link's waiting calls.
//!
//! A run is one thread (madsim runs every task of a seed on the thread that runs the seed),
//! so these locks are never contended; they are there because the state is reached through
//! `Arc`s that tasks, which must be `Send`, carry. What a lock costs is then its atomic
//! operations alone: `std`'s mutex takes two per use (an exchange to lock, another to
//! unlock), a spin lock one (its unlock is a plain store). Taken a dozen times per
//! simulated request, the difference is measurable (`docs/PERFORMANCE.md`). A guard is never
//! held across an `.await`.

/// A lock never contended (see the module's docs).
pub(crate) type Lock<T> = spin::Mutex<T>;
