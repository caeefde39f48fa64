//! Store-stamped mode: one replay of a key's operations in the store's order.
//!
//! Each answered operation is judged at its decision time from every state the replay
//! holds; an operation the store stamped but whose answer was lost took effect at some
//! moment between the decisions around it ([`Family::took_effect`], so the replay may hold
//! several states, which the family may merge); one the store never stamped is skipped.

use super::explain::violation_unless_guessed;
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
    // Buffers kept between operations: the states after one, what one state leaves, and
    // (once the states are many) a set to keep them distinct.
    let mut after: Vec<F::State> = Vec::new();
    let mut next: Vec<F::State> = Vec::new();
    let mut moments: Vec<(F::State, Nanos)> = Vec::new();
    let mut distinct: HashSet<F::State> = HashSet::new();
    for (i, op) in order.iter().enumerate() {
        after.clear();
        distinct.clear();
        let mut first_miss = None;
        let mut phantom = true;
        for s in &states {
            next.clear();
            match op.decided() {
                None => {
                    let from = last_at.max(op.call).min(next_decided[i]);
                    guessed |= !family.moments_cover(from, next_decided[i]);
                    moments.clear();
                    family.took_effect(s, (from, next_decided[i]), op.cost, &mut moments);
                    next.extend(moments.drain(..).map(|(state, _)| state));
                }
                Some(_) => {
                    let e = family.explain(s, op, &mut next);
                    guessed |= e.guessed;
                    if let Some((why, p)) = e.miss {
                        phantom &= p;
                        first_miss.get_or_insert(why);
                    }
                }
            }
            for x in next.drain(..) {
                push_distinct(&mut after, &mut distinct, x);
            }
        }
        if let Some(at) = op.decided() {
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
        std::mem::swap(&mut states, &mut after);
        family.merge(&mut states);
        // The replay is one pass: what the budget bounds is its branching, the states held
        // beyond one.
        explored += (states.len() as u64).saturating_sub(1);
        if explored > budget {
            return Verdict::Unknown { explored };
        }
    }
    Verdict::Linearizable
}

/// Adds `x` to `after` unless it is there: by looking while the states are few, by a set
/// once they are many.
fn push_distinct<S: Clone + Eq + std::hash::Hash>(
    after: &mut Vec<S>,
    distinct: &mut HashSet<S>,
    x: S,
) {
    const FEW: usize = 8;
    if after.len() < FEW {
        if !after.contains(&x) {
            after.push(x);
        }
        return;
    }
    if distinct.is_empty() {
        distinct.extend(after.iter().cloned());
    }
    if distinct.insert(x.clone()) {
        after.push(x);
    }
}
