//! Histories for the families' unit tests.

use crate::linearizable::{Op, Precision, Seen, Verdict};
use ratelab_core::{Algorithm, Nanos};

/// `v` milliseconds.
pub fn ms(v: u64) -> Nanos {
    Nanos(v * 1_000_000)
}

/// A request of `cost` decided at `at`, sent and answered then, stamped `id`.
pub fn op(id: u64, at: Nanos, cost: u64, seen: Seen) -> Op {
    Op {
        id,
        call: at,
        ret: (seen != Seen::Unknown).then_some(at),
        cost,
        seen,
        stamp: Some(id),
        precision: Precision::EXACT,
    }
}

/// Admitted at `at` with `remaining` left.
pub fn allowed(id: u64, at: Nanos, remaining: u64) -> Op {
    op(
        id,
        at,
        1,
        Seen::Allowed {
            at,
            remaining: Some(remaining),
        },
    )
}

/// Denied at `at`, told to retry after `wait` if given.
pub fn denied(id: u64, at: Nanos, wait: Option<Nanos>) -> Op {
    op(
        id,
        at,
        1,
        Seen::Denied {
            at,
            retry_after: wait,
        },
    )
}

/// A history answered by `ratelab-core`'s implementation of the policy: requests at
/// pseudo-random gaps up to `max_gap`, of costs 1 to `max_cost`.
pub fn answered_by<A: Algorithm>(alg: &A, n: u64, max_gap: Nanos, max_cost: u64) -> Vec<Op> {
    let mut state = None;
    let mut t = 0u64;
    let mut ops = Vec::new();
    for i in 0..n {
        t += (i * 7_919 % 101) * max_gap.as_u64() / 100;
        let at = Nanos(t);
        let cost = 1 + (i * 31 % 7) % max_cost;
        let (next, d) = alg.transition(state, at, cost).unwrap();
        state = Some(next);
        let seen = if d.allowed {
            Seen::Allowed {
                at,
                remaining: Some(d.remaining),
            }
        } else {
            Seen::Denied {
                at,
                retry_after: d.retry_after,
            }
        };
        ops.push(op(i, at, cost, seen));
    }
    ops
}

/// A probe's crowd on one key, answered by `family`: `n` requests of cost 1, one sent
/// every `every`, each answered `flight` after its send and decided at a pseudo-random
/// moment of the first `within` of it (that much blur in its record); unstamped.
pub fn crowd<F: super::Family>(
    family: &F,
    n: u64,
    every: Nanos,
    flight: Nanos,
    within: Nanos,
) -> Vec<Op> {
    let blur = within.as_u64().max(1);
    let mut decided: Vec<(u64, u64)> = (0..n)
        .map(|i| (i * every.as_u64() + (i * 7_919_000_003 % blur), i))
        .collect();
    decided.sort_unstable();
    let mut state = family.fresh(&[]).remove(0);
    let mut ops = Vec::new();
    for (d, i) in decided {
        let call = Nanos(i * every.as_u64());
        let (said, next) = family.decide(&state, Nanos(d), 1);
        state = next;
        let seen = if said.allowed {
            Seen::Allowed {
                at: call,
                remaining: Some(said.remaining),
            }
        } else {
            Seen::Denied {
                at: call,
                retry_after: None,
            }
        };
        ops.push(Op {
            id: i,
            call,
            ret: Some(call.saturating_add(flight)),
            cost: 1,
            seen,
            stamp: None,
            precision: Precision {
                decided_within: within,
                retry_after_unit: Nanos(1),
            },
        });
    }
    ops
}

/// The same operations without the store's stamps (judged by the search).
pub fn unstamped(ops: &[Op]) -> Vec<Op> {
    ops.iter().map(|&o| Op { stamp: None, ..o }).collect()
}

/// Whether the verdict is a violation at request `id`.
pub fn violation_at(v: &Verdict, id: u64) -> bool {
    matches!(v, Verdict::Violation(x) if x.id == id)
}

/// The answers `family` gives from `state` to a run of requests from `at`: every cost up to
/// `max_cost` at once, then one every `gap / 5` for as long again, each decided on the state
/// the ones before left.
fn run_from<F: super::Family>(
    family: &F,
    state: &F::State,
    at: Nanos,
    gap: Nanos,
    max_cost: u64,
) -> Vec<super::Said> {
    let mut state = state.clone();
    (0..4 * max_cost + 8)
        .map(|i| {
            let t = at.saturating_add(Nanos(i.saturating_sub(max_cost) * gap.as_u64() / 5));
            let (said, next) = family.decide(&state, t, 1 + i % max_cost);
            state = next;
            said
        })
        .collect()
}

/// Asserts [`Family::idle_from`]'s promise for `family` over a pseudo-random run of `n`
/// requests (gaps up to `max_gap`, costs up to `max_cost`): from the instant it names, each
/// state answers every run of requests as a key nobody used does, and a nanosecond before it
/// (when that is after the state's last request) some request or run is answered
/// otherwise: the instant is the first, not merely a safe one. Returns how many states
/// were tight that way.
pub fn assert_idle_answers_as_fresh<F: super::Family>(
    family: &F,
    n: u64,
    max_gap: Nanos,
    max_cost: u64,
) -> u64 {
    let fresh = family.fresh(&[]).remove(0);
    let mut state = fresh.clone();
    let (mut t, mut named) = (0u64, 0);
    let run = |s: &F::State, at: Nanos| run_from(family, s, at, max_gap, max_cost);
    for i in 0..n {
        t += (i * 7_919 % 101) * max_gap.as_u64() / 100;
        let cost = 1 + (i * 31 % 7) % max_cost;
        state = family.decide(&state, Nanos(t), cost).1;
        let Some(idle) = family.idle_from(&state) else {
            continue;
        };
        if idle > Nanos(t + 1) {
            let before = Nanos(idle.as_u64() - 1);
            let differs = (1..=max_cost)
                .any(|c| family.decide(&state, before, c).0 != family.decide(&fresh, before, c).0)
                || run(&state, before) != run(&fresh, before);
            assert!(
                differs,
                "{}: state {state:?} already answers as a fresh key at {before:?}, before {idle:?}",
                family.name()
            );
            named += 1;
        }
        let idle = idle.max(Nanos(t));
        for later in [0, 1, max_gap.as_u64() / 3, max_gap.as_u64() * 5] {
            let at = Nanos(idle.as_u64() + later);
            assert_eq!(
                run(&state, at),
                run(&fresh, at),
                "{}: state {state:?} idle from {idle:?}, run from {at:?}",
                family.name()
            );
        }
    }
    named
}
