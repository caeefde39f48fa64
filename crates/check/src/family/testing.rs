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

/// The same operations without the store's stamps (judged by the search).
pub fn unstamped(ops: &[Op]) -> Vec<Op> {
    ops.iter().map(|&o| Op { stamp: None, ..o }).collect()
}

/// Whether the verdict is a violation at request `id`.
pub fn violation_at(v: &Verdict, id: u64) -> bool {
    matches!(v, Verdict::Violation(x) if x.id == id)
}
