//! Store-stamped mode: one replay of a key's operations in the store's order.
//!
//! Each answered operation is judged at its decision time from every state the replay
//! holds; an operation the store stamped but whose answer was lost took effect at some
//! moment between the decisions around it (each moment the family names is tried, so the
//! replay may hold several states); one the store never stamped is skipped.

use super::explain::{explain, violation_unless_guessed};
use super::spec::Family;
use crate::linearizable::{Op, Verdict, Violation, store_order};
use ratelab_core::Nanos;
use std::collections::HashSet;

pub(super) fn replay<F: Family>(
    family: &F,
    ops: &[Op],
    fresh: Vec<F::State>,
    budget: u64,
) -> Verdict {
    let (order, next_decided) = store_order(ops);
    let mut states = fresh;
    let mut last_at = Nanos::ZERO;
    let mut explored = 0u64;
    let mut guessed = false;
    for (i, op) in order.iter().enumerate() {
        let mut after: Vec<F::State> = Vec::new();
        let mut seen_states = HashSet::new();
        let mut push = |s: F::State, after: &mut Vec<F::State>| {
            if seen_states.insert(s.clone()) {
                after.push(s);
            }
        };
        match op.decided() {
            None => {
                let from = last_at.max(op.call).min(next_decided[i]);
                guessed |= !family.moments_cover(from, next_decided[i]);
                for s in &states {
                    for (lo, hi) in family.moments(s, from, next_decided[i]) {
                        for at in [lo, hi] {
                            push(family.decide(s, at, op.cost).1, &mut after);
                        }
                    }
                }
            }
            Some(at) => {
                let mut first_miss = None;
                let mut phantom = true;
                for s in &states {
                    let e = explain(family, s, op);
                    guessed |= e.guessed;
                    for next in e.next {
                        push(next, &mut after);
                    }
                    if let Some((why, p)) = e.miss {
                        phantom &= p;
                        first_miss.get_or_insert(why);
                    }
                }
                if after.is_empty() {
                    let v = Violation {
                        id: op.id,
                        detail: format!(
                            "in store order ({}): {}",
                            family.name(),
                            first_miss.unwrap_or_default()
                        ),
                        explained: i,
                        phantom_denial: phantom,
                    };
                    return violation_unless_guessed(family, guessed, explored, v);
                }
                last_at = last_at.max(at);
            }
        }
        explored += after.len() as u64;
        if explored > budget {
            return Verdict::Unknown { explored };
        }
        states = after;
    }
    Verdict::Linearizable
}
