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
//! | token bucket (GCRA) | [`token_bucket`] | a range of the bucket's theoretical arrival times |
//! | fixed window aligned to the clock (any phase) | [`fixed_window`] | the window, its count |
//! | fixed window opened by a key's first request | [`first_hit`] | the window's start, its count |
//! | sliding log (exact) | [`sliding_log`] | every admission in the last window |
//! | sliding-window counter (the weighted two-window estimate) | [`sliding_counter`] | the window, its count and the previous window's |
//! | token bucket refilled in whole-period steps | [`stepped_bucket`] | its tokens, the instant its steps count from |
//!
//! [`check_key`] holds one key's operations ([`Op`]) to a family, the one linearizability
//! check ratelab has (the token bucket's [`crate::linearizable::check_key`] calls it): in the store's order when every answer carries the store's stamp (one
//! replay, [`replay`]), otherwise by a search over the orders real time allows
//! ([`search`]). Both judge every answer: an admission the specification denies
//! (over-admission), a denial it admits (a *phantom denial*), a wrong `remaining`, a wrong
//! `Retry-After`.
//!
//! An answer's decision fell at some moment of `[at, at + decided_within]` (one moment for
//! the simulator, which records the store's own time; a request's flight for a probe), and a
//! request whose answer never came took effect at an unknown moment: the family cuts such an
//! interval into pieces ([`Family::moments`]), each tried at its two ends, and says whether
//! that covers every outcome ([`Family::moments_cover`]); where it may not, or where the
//! family's starting states may not cover every hidden parameter ([`Family::fresh_covers`]),
//! a history the check cannot explain is [`Verdict::Unknown`], never a violation on a guess.
//!
//! A leaky bucket (the probe's `leaky-bucket:RATE,BURST`, nginx's `limit_req`) is no family
//! of its own: as a meter, whose level drains at the rate and which admits while the level
//! plus the cost fits in BURST + 1, it decides exactly as the token bucket of BURST + 1 at the
//! same rate (the token bucket's tests show it on generated sequences). nginx's own
//! thousandths and milliseconds are nginx's rounding of it.
//!
//! **A new family** is a file here with a type implementing [`Family`], its known-good and
//! known-bad histories as unit tests, and a line in the table above. A family that specifies
//! one of `ratelab-core`'s algorithms implements [`Specified`] for that algorithm's policy
//! type in the same file: [`with_family`] is written from core's one list of algorithms
//! (`ratelab_core::for_each_algorithm!`), so an algorithm without its specification does
//! not compile, and the simulator, its liveness rule and the probe reach the family from
//! a [`ratelab_core::Policy`] through it.

mod explain;
pub mod first_hit;
pub mod fixed_window;
mod replay;
mod search;
pub mod sliding_counter;
pub mod sliding_log;
mod spec;
pub mod stepped_bucket;
pub mod token_bucket;

#[cfg(test)]
pub(crate) mod testing;

pub use spec::{Family, Judged, Said, Sustains};

use crate::linearizable::{Op, Seen, Verdict, Violation};
use ratelab_core::Nanos;

/// The specification of one of `ratelab-core`'s algorithms: implemented, in the family's
/// file, for the algorithm's policy type.
pub trait Specified {
    /// The family that specifies it.
    type Family: Family;

    /// Its specification with this policy's parameters. `origin` is the instant, on the
    /// history's time axis, at which the limiter's clock reads zero, where known (the
    /// simulator's clock; a black box's is not), for the families whose windows it places.
    fn family(&self, origin: Option<Nanos>) -> Self::Family;
}

/// Work to do with a family's specification, whichever it is ([`with_family`]).
pub trait WithFamily {
    /// What the work gives.
    type Out;

    /// Does the work with `family`.
    fn with<F: Family>(self, family: &F) -> Self::Out;
}

/// Writes [`with_family`] from the list of algorithms.
macro_rules! specified {
    ($( $(#[$doc:meta])* $variant:ident($policy:ty, $state:ty), $name:literal, $prose:literal; )*) => {
        /// Does `work` with the specification of `policy`'s algorithm ([`Specified`]), its
        /// clock's zero at `origin` if known.
        pub fn with_family<W: WithFamily>(
            policy: &ratelab_core::Policy,
            origin: Option<Nanos>,
            work: W,
        ) -> W::Out {
            match policy {
                $(ratelab_core::Policy::$variant(p) => {
                    work.with(&<$policy as Specified>::family(p, origin))
                })*
            }
        }
    };
}
ratelab_core::for_each_algorithm!(specified);

/// Holds one key's operations (any order) to `family`, from a key nobody used, searching at
/// most `budget` states: store-stamped histories are replayed in the store's order, others
/// searched (after counting, for the families that count within a span).
pub fn check_key<F: Family>(family: &F, ops: &[Op], budget: u64) -> Verdict {
    check_key_from(family, ops, budget, family.fresh(ops))
}

/// [`check_key`] from the states `fresh` (a key others may have used: every state it may
/// have held when the history began).
pub fn check_key_from<F: Family>(
    family: &F,
    ops: &[Op],
    budget: u64,
    fresh: Vec<F::State>,
) -> Verdict {
    if let Some(v) = first_window_overflow(family, ops) {
        return Verdict::Violation(v);
    }
    let answered_stamped = ops
        .iter()
        .filter(|o| o.seen != Seen::Unknown)
        .all(|o| o.stamp.is_some());
    if answered_stamped && ops.iter().any(|o| o.stamp.is_some()) {
        replay::replay(family, ops, fresh, budget)
    } else if let Some(v) = phantom_by_counting(family, ops) {
        // The replay is exact and says more; the search would only guess at this.
        Verdict::Violation(v)
    } else {
        search::search(family, ops, fresh, budget)
    }
}

/// The earliest moment `o` may have been decided.
fn earliest(o: &Op) -> Nanos {
    match o.seen {
        Seen::Allowed { at, .. } | Seen::Denied { at, .. } => at,
        Seen::Unknown => o.call,
    }
}

/// The latest moment `o` may have been decided: for a request whose answer never came, any
/// moment after it was sent.
fn latest(o: &Op) -> u64 {
    o.decided_by().map_or(u64::MAX, Nanos::as_u64)
}

/// A denial the specification gives in no order ([`Family::counted_within`]). The count
/// it is held to is of the window current when it is linearized: admissions decided after
/// its earliest moment less the span, and admissions whose clock read earlier but which the
/// window took in, each linearized after the request that opened that window — one decided
/// after that same moment. So the count holds at most the admissions sent before the denial
/// was answered that were either decided after that moment or still in flight when some
/// request that was could have been sent; an unanswered request sent by then may have been
/// admitted too. When all of them leave room for its cost under the limit, it is a phantom
/// denial whatever the order and the moments.
fn phantom_by_counting<F: Family>(family: &F, ops: &[Op]) -> Option<Violation> {
    let (span, limit) = family.counted_within()?;
    let mut denials: Vec<&Op> = ops
        .iter()
        .filter(|o| matches!(o.seen, Seen::Denied { .. }) && o.cost <= limit)
        .collect();
    denials.sort_by_key(|o| o.id);
    for d in denials {
        let (from, answered) = (earliest(d).as_u64(), d.ret.unwrap_or(Nanos(u64::MAX)));
        let recent = |o: &Op| latest(o).saturating_add(span.as_u64()) > from;
        // The earliest send of a request that may have opened the denial's window.
        let opened = ops
            .iter()
            .filter(|o| o.call <= answered && recent(o))
            .map(|o| o.call)
            .min()
            .unwrap_or(d.call);
        let counted: u64 = ops
            .iter()
            .filter(|o| o.call <= answered && o.id != d.id)
            .filter(|o| match o.seen {
                Seen::Allowed { .. } => recent(o) || o.ret.unwrap_or(Nanos(u64::MAX)) >= opened,
                Seen::Unknown => true,
                Seen::Denied { .. } => false,
            })
            .map(|o| o.cost)
            .sum();
        if counted.saturating_add(d.cost) <= limit {
            return Some(Violation {
                id: d.id,
                detail: format!(
                    "denied at {}; at most {counted} units were admitted that its count could hold (decided within {span} before it, or in flight when a request that was could have been sent), and the limit is {limit}",
                    earliest(d)
                ),
                explained: 0,
                phantom_denial: true,
            });
        }
    }
    None
}

/// From a key nobody used, the first decision opens a window ([`Family::first_window`]) no
/// earlier than the first request was sent; every admission certainly decided before that
/// send plus the window's length is in it, unless a request that may have been decided
/// later (and so have opened another window, taking in the requests whose clocks read
/// earlier) was linearized before it — which real time rules out when the admission was
/// answered before that request was sent. More than the window admits among the rest is a
/// violation whatever the order, found by counting (the admission that overflows it is the
/// witness).
fn first_window_overflow<F: Family>(family: &F, ops: &[Op]) -> Option<Violation> {
    let (window, limit) = family.first_window()?;
    let first = ops.iter().map(earliest).min()?;
    let until = first.as_u64().saturating_add(window.as_u64());
    let reopened = ops
        .iter()
        .filter(|o| latest(o) >= until)
        .map(|o| o.call)
        .min()
        .unwrap_or(Nanos(u64::MAX));
    let mut inside: Vec<(u64, &Op)> = ops
        .iter()
        .filter(|o| matches!(o.seen, Seen::Allowed { .. }))
        .filter(|o| o.ret.is_some_and(|r| r < reopened))
        .map(|o| (latest(o), o))
        .filter(|&(latest, _)| latest < until)
        .collect();
    inside.sort_by_key(|&(latest, o)| (latest, o.id));
    let mut admitted = 0u64;
    for (_, o) in &inside {
        admitted = admitted.saturating_add(o.cost);
        if admitted > limit {
            return Some(Violation {
                id: o.id,
                detail: format!(
                    "admitted with {admitted} units certainly decided within {window} of the key's first request (sent at {first}); its first window admits {limit}"
                ),
                explained: 0,
                phantom_denial: false,
            });
        }
    }
    None
}
