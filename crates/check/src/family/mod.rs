//! A sequential specification for every limiter family, and the linearizability check that
//! holds a key's answers to one.
//!
//! A family ([`Family`]) is a limiter's definition written as a state machine, here, from
//! the family's published definition (never by calling `ratelab-core`): from a state, a
//! request of cost `c` at time `t` is admitted or denied, with the `remaining` and the
//! instant more room comes back (a `Retry-After`) that the definition gives, and a next
//! state. The families, one file each:
//!
//! | family | file | state |
//! |---|---|---|
//! | token bucket (GCRA) | [`token_bucket`] | the bucket's theoretical arrival time |
//! | leaky bucket in nginx's form (`limit_req`) | [`gcra`] | the excess in thousandths, the last update's millisecond |
//! | fixed window aligned to the clock (any phase) | [`fixed_window`] | the window, its count |
//! | fixed window opened by a key's first request | [`first_hit`] | the window's start, its count |
//! | sliding log (exact) | [`sliding_log`] | every admission in the last window |
//! | sliding-window counter (the weighted two-window estimate) | [`sliding_counter`] | the window, its count and the previous window's |
//!
//! [`check_key`] holds one key's operations ([`Op`], as the token bucket's own check reads
//! them) to a family: in the store's order when every answer carries the store's stamp (one
//! replay, [`replay`]), otherwise by a search over the orders real time allows
//! ([`search`]). Both judge every answer: an admission the specification denies
//! (over-admission), a denial it admits (a *phantom denial*), a wrong `remaining`, a wrong
//! `Retry-After`.
//!
//! Decision times are taken as exact (the simulator records the store's own). A request
//! whose answer never came took effect at an unknown moment: the family names the moments
//! worth trying ([`Family::moments`]) and says whether they cover every outcome
//! ([`Family::moments_cover`]); where they may not, a history the check cannot explain is
//! [`Verdict::Unknown`], never a violation on a guess.
//!
//! **A new family** is a file here with a type implementing [`Family`], its known-good and
//! known-bad histories as unit tests, and a line in the table above.

pub mod first_hit;
pub mod fixed_window;
pub mod gcra;
mod replay;
mod search;
pub mod sliding_counter;
pub mod sliding_log;
pub mod token_bucket;

#[cfg(test)]
pub(crate) mod testing;

use crate::linearizable::{Op, Seen, Verdict, Violation};
use ratelab_core::Nanos;
use std::fmt::Debug;
use std::hash::Hash;

/// What the specification answers one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Said {
    /// Admitted.
    pub allowed: bool,
    /// The room left after it, in the family's units (as the limiter reports it).
    pub remaining: u64,
    /// On a denial, the instant the request would first be admitted (its `Retry-After` is
    /// this less the decision time); `None` if never.
    pub retry_at: Option<Nanos>,
}

/// A limiter family's sequential specification.
pub trait Family {
    /// The state of one key.
    type State: Clone + Eq + Hash + Debug;

    /// The family's name in reports.
    fn name(&self) -> &'static str;

    /// The states a key nobody used may start in, given its history: one, or one per value
    /// a parameter invisible from outside can take that the history can tell apart (a fixed
    /// window's phase).
    fn fresh(&self, ops: &[Op]) -> Vec<Self::State>;

    /// The answer to a request of `cost` at `at` from `state`, and the state after it.
    fn decide(&self, state: &Self::State, at: Nanos, cost: u64) -> (Said, Self::State);

    /// The moments in `[from, to]` to try for a request that took effect at an unknown
    /// moment there.
    fn moments(&self, _state: &Self::State, from: Nanos, to: Nanos) -> Vec<Nanos> {
        if from < to { vec![from, to] } else { vec![to] }
    }

    /// Whether [`Family::moments`] gives every state reachable in its interval (a state that
    /// changes with the exact moment, as a log of admission times does, is not covered).
    fn moments_cover(&self) -> bool {
        false
    }
}

/// Why `op`'s answer is not what `said` gives, or `None` if it is. A reported `Retry-After`
/// is the true wait rounded up to `op`'s unit (exact for the simulator).
pub(crate) fn mismatch(op: &Op, said: &Said) -> Option<String> {
    let says = || match (said.allowed, said.retry_at) {
        (true, _) => format!("the spec admits it, {} left", said.remaining),
        (false, Some(r)) => format!("the spec denies it until {r}"),
        (false, None) => "the spec denies it for good".to_owned(),
    };
    match op.seen {
        Seen::Allowed { at, remaining } => {
            let ok = said.allowed && remaining.is_none_or(|r| r == said.remaining);
            (!ok).then(|| {
                let left = remaining.map_or(String::new(), |r| format!(" with remaining {r}"));
                format!("admitted{left} at {at}; {}", says())
            })
        }
        Seen::Denied { at, retry_after } => {
            let wait = said.retry_at.map(|r| r.saturating_sub(at));
            let unit = op.precision.retry_after_unit.as_u64().max(1);
            let fits = |w: Nanos| {
                wait.is_some_and(|v| v <= w && v.as_u64() + unit > w.as_u64() && v > Nanos::ZERO)
            };
            let ok = !said.allowed && retry_after.is_none_or(fits);
            (!ok).then(|| {
                let told = retry_after.map_or(String::new(), |w| format!(" with retry after {w}"));
                format!("denied{told} at {at}; {}", says())
            })
        }
        Seen::Unknown => None,
    }
}

/// When `op`'s decision was made, if an answer says.
pub(crate) fn decided(op: &Op) -> Option<Nanos> {
    match op.seen {
        Seen::Allowed { at, .. } | Seen::Denied { at, .. } => Some(at),
        Seen::Unknown => None,
    }
}

/// Holds one key's operations (any order) to `family`, from a key nobody used, searching at
/// most `budget` states: store-stamped histories are replayed in the store's order, others
/// searched.
pub fn check_key<F: Family>(family: &F, ops: &[Op], budget: u64) -> Verdict {
    let fresh = family.fresh(ops);
    let answered_stamped = ops
        .iter()
        .filter(|o| o.seen != Seen::Unknown)
        .all(|o| o.stamp.is_some());
    if answered_stamped && ops.iter().any(|o| o.stamp.is_some()) {
        replay::replay(family, ops, fresh, budget)
    } else {
        search::search(family, ops, fresh, budget)
    }
}

/// A violation, or [`Verdict::Unknown`] when the moments tried for some unanswered request
/// may have missed the one that explains it.
pub(crate) fn violation_unless_guessed<F: Family>(
    family: &F,
    guessed: bool,
    explored: u64,
    v: Violation,
) -> Verdict {
    if guessed && !family.moments_cover() {
        Verdict::Unknown { explored }
    } else {
        Verdict::Violation(v)
    }
}
