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

    /// `[from, to]` cut into pieces for a request that took effect, or was decided, at an
    /// unknown moment there: each piece is tried at its two ends.
    fn moments(&self, _state: &Self::State, from: Nanos, to: Nanos) -> Vec<(Nanos, Nanos)> {
        vec![(from, to)]
    }

    /// Whether trying each piece of [`Family::moments`] at its ends gives every answer and
    /// state reachable in it (a state that changes with the exact moment, as a log of
    /// admission times does, is not covered).
    fn moments_cover(&self) -> bool {
        false
    }
}

/// What an answered operation leaves possible from one state.
pub(crate) struct Explained<S> {
    /// The states after it (none: nothing explains it).
    pub next: Vec<S>,
    /// When nothing does: why, and whether it is a denial the specification admits.
    pub miss: Option<(String, bool)>,
    /// Whether its decision's moment was tried only at the ends of pieces that may not
    /// cover every answer.
    pub guessed: bool,
}

/// What `op`'s answer leaves possible from `state`: its decision fell at some moment of
/// `[at, at + decided_within]` (one moment for the simulator's exact times).
pub(crate) fn explain<F: Family>(family: &F, state: &F::State, op: &Op) -> Explained<F::State> {
    let at = decided(op).unwrap_or(op.call);
    let within = op.precision.decided_within;
    let pieces = if within == Nanos::ZERO {
        vec![(at, at)]
    } else {
        family.moments(state, at, at.saturating_add(within))
    };
    let mut out = Explained {
        next: Vec::new(),
        miss: None,
        guessed: false,
    };
    let mut phantom = true;
    for (lo, hi) in pieces {
        out.guessed |= lo != hi && !family.moments_cover();
        let ends: Vec<(Said, F::State)> = [lo, hi][..if lo == hi { 1 } else { 2 }]
            .iter()
            .map(|&t| family.decide(state, t, op.cost))
            .collect();
        for (said, next) in &ends {
            match mismatch(op, said, (lo, hi)) {
                None => {
                    if !out.next.contains(next) {
                        out.next.push(next.clone());
                    }
                }
                Some(why) => {
                    phantom &= said.allowed && matches!(op.seen, Seen::Denied { .. });
                    out.miss.get_or_insert((why, false));
                }
            }
        }
        // Admitted at both ends, with a `remaining` between theirs: a moment between gave it
        // (a remaining that moves with the moment moves by whole units).
        if let (
            [(a, _), (b, next)],
            Seen::Allowed {
                remaining: Some(r), ..
            },
        ) = (&ends[..], op.seen)
            && a.allowed
            && b.allowed
            && r > a.remaining.min(b.remaining)
            && r < a.remaining.max(b.remaining)
            && !out.next.contains(next)
        {
            out.next.push(next.clone());
        }
    }
    if out.next.is_empty() {
        if let Some(m) = out.miss.as_mut() {
            m.1 = phantom;
        }
    } else {
        out.miss = None;
    }
    out
}

/// Why `op`'s answer is not what `said` gives when decided at some moment of `[lo, hi]`, or
/// `None` if it is. A reported `Retry-After` is the true wait rounded up to `op`'s unit
/// (exact for the simulator).
pub(crate) fn mismatch(op: &Op, said: &Said, (lo, hi): (Nanos, Nanos)) -> Option<String> {
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
            // The true wait, `retry_at − τ` for τ in [lo, hi], is above 0 and within one unit
            // below the reported `w`.
            let unit = op.precision.retry_after_unit.as_u64().max(1);
            let fits = |w: Nanos| {
                said.retry_at.is_some_and(|r| {
                    let (least, most) = (r.saturating_sub(hi), r.saturating_sub(lo));
                    most > Nanos::ZERO && least <= w && most.as_u64() + unit > w.as_u64()
                })
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
