//! What a family is: the trait every limiter family's specification implements, and what
//! it answers one request.

use crate::linearizable::Op;
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

/// How an answered operation was judged from one state (the states it leaves possible are
/// appended to the caller's list: none when nothing explains it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Judged {
    /// When nothing explains it: why, and whether it is a denial the specification admits.
    pub miss: Option<(String, bool)>,
    /// Whether its decision's moment was tried only at the ends of pieces that may not
    /// cover every answer.
    pub guessed: bool,
}

/// What a family admits in full, in any order: traffic whose cost, in every interval of
/// length Δt, stays within a curve ([`Family::sustains`]). The simulator holds the keys whose
/// paced clients stay within it to liveness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sustains {
    /// At most `burst + amount·Δt/period`, for every Δt ≥ 0.
    Bucket {
        /// The curve at Δt = 0.
        burst: u64,
        /// Units per `period` after it.
        amount: u64,
        /// The period of `amount`.
        period: Nanos,
    },
    /// At most `limit` in every closed interval of length `span`.
    Window {
        /// The most in one span.
        limit: u64,
        /// The span.
        span: Nanos,
    },
}

/// A limiter family's sequential specification.
///
/// [`Family::decide`] is the definition; the search and the replay ask the family through
/// [`Family::explain`] (an answer from a state) and [`Family::took_effect`] (a request whose
/// answer never came), whose defaults try [`Family::decide`] at the moments
/// [`Family::moments`] names. A family whose state can stand for a whole set of states (the
/// token bucket's range of TATs) answers those two exactly instead, and says how its states
/// nest ([`Family::holds`]) so the search skips a point another already covered.
pub trait Family {
    /// The state of one key.
    type State: Clone + Eq + Hash + Debug;

    /// The family's name in reports.
    fn name(&self) -> &'static str;

    /// The states a key nobody used may start in, given its history: one, or one per value
    /// a parameter invisible from outside can take that the history can tell apart (a fixed
    /// window's phase).
    fn fresh(&self, ops: &[Op]) -> Vec<Self::State>;

    /// What the family admits in full whatever the order: its promise to a client that
    /// stays within it (every family states one; there is no default to fall back on).
    fn sustains(&self) -> Sustains;

    /// The answer to a request of `cost` at `at` from `state`, and the state after it.
    fn decide(&self, state: &Self::State, at: Nanos, cost: u64) -> (Said, Self::State);

    /// What `op`'s answer leaves possible from `state`, appended to `next` (nothing when no
    /// state explains it): its decision fell at some moment of `[at, at + decided_within]`
    /// (one moment for the simulator's exact times).
    fn explain(&self, state: &Self::State, op: &Op, next: &mut Vec<Self::State>) -> Judged
    where
        Self: Sized,
    {
        super::explain::by_moments(self, state, op, next)
    }

    /// The states after a request of `cost` whose answer never came took effect (admitted
    /// or denied) at some moment of `[from, to]`, each with the earliest moment it stands
    /// for, appended to `out`: [`Family::decide`] at the ends of each piece of
    /// [`Family::moments`] (whether that covers every outcome is [`Family::moments_cover`]).
    /// The search takes the moment as its last decision time: a request linearized after
    /// this one takes effect no earlier.
    fn took_effect(
        &self,
        state: &Self::State,
        (from, to): (Nanos, Nanos),
        cost: u64,
        out: &mut Vec<(Self::State, Nanos)>,
    ) {
        let start = out.len();
        for (lo, hi) in self.moments(state, from, to) {
            for at in [lo, hi] {
                let next = (self.decide(state, at, cost).1, at);
                if !out[start..].contains(&next) {
                    out.push(next);
                }
            }
        }
    }

    /// Whether `wider` stands for every state `narrower` does (equal, unless a state is a
    /// set of states: [`Family::states_nest`]).
    fn holds(&self, wider: &Self::State, narrower: &Self::State) -> bool {
        wider == narrower
    }

    /// Whether [`Family::holds`] is more than equality: the search then keeps, for each set
    /// of operations linearized, the states it visited, and skips a point whose state one of
    /// them holds with no later decision time.
    fn states_nest(&self) -> bool {
        false
    }

    /// The states a replay holds after a step, merged in place where the family can (by
    /// default they stay as they are).
    fn merge(&self, _states: &mut Vec<Self::State>) {}

    /// `[from, to]` cut into pieces for a request that took effect, or was decided, at an
    /// unknown moment there: each piece is tried at its two ends.
    fn moments(&self, _state: &Self::State, from: Nanos, to: Nanos) -> Vec<(Nanos, Nanos)> {
        vec![(from, to)]
    }

    /// Whether trying each piece of [`Family::moments`] over `[from, to]` at its ends gives
    /// every answer and state reachable in it (a state that changes with the exact moment,
    /// as a log of admission times does, is not covered).
    fn moments_cover(&self, _from: Nanos, _to: Nanos) -> bool {
        false
    }

    /// The window a key's first request opens and what it admits, if the family has one:
    /// from a key nobody used, every admission decided within `.0` of the first decision is
    /// in one window of at most `.1` (a first-hit window's length and limit). The check
    /// counts those before it searches: a history of many concurrent admissions is refuted
    /// at once, not by trying every order.
    fn first_window(&self) -> Option<(Nanos, u64)> {
        None
    }

    /// The span and the limit every count a decision is held to lies within, if the family
    /// counts that way: a decision at `d` counts only admissions decided after `d − .0`
    /// (or linearized before it, overlapping it), against `.1` (a fixed window's, a
    /// first-hit window's, a sliding log's; not a bucket's nor a sliding counter's, whose
    /// previous window weighs in). The check then finds by counting a denial that room
    /// under the limit makes a phantom whatever the order: a crowd of paced denials is
    /// refuted at once, not left to a search whose window starts are only guessed.
    fn counted_within(&self) -> Option<(Nanos, u64)> {
        None
    }

    /// Whether a denial leaves every state exactly as it was, at any moment (a bucket's TAT;
    /// not a window that a later decision rolls over): the search then linearizes such a
    /// denial as soon as it is explained.
    fn denials_keep_state(&self) -> bool {
        false
    }

    /// Whether [`Family::fresh`] gives every starting state that can explain a history (not
    /// so where a hidden parameter moves answers continuously, as a sliding counter's phase
    /// moves its weights).
    fn fresh_covers(&self) -> bool {
        true
    }

    /// The instant from which `state`, left alone, answers every request as a key nobody
    /// used would (a bucket full again, a window over); `None` if the family cannot say.
    fn idle_from(&self, _state: &Self::State) -> Option<Nanos> {
        None
    }
}
