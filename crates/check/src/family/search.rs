//! Black-box mode: a Wing–Gong search over the orders real time allows, in the style of Lowe
//! and Porcupine, memoised on (the set linearized so far, the family's state, the last
//! decision time).
//!
//! An answered operation is judged at its decision time. An operation without an answer
//! stays open to the end and may take effect at some moment between the last decision and
//! the next answered one, or never; open operations of one cost sent by then are
//! interchangeable, so one of each cost is tried, at each moment the family names.
//!
//! Where a family's denials never change its state ([`Family::denials_keep_state`]), a
//! denial explained from a node with that node's state as its only outcome is linearized at
//! once, as the node's only child: any order placing it later explains the same answers
//! with it placed here (it is within the real-time horizon), provided the moments open
//! operations may take effect at stay as they were (none is open, or the last decision time
//! does not move). A crowd of overlapping denials is then one path, not every order of it.

use super::explain::{explain, violation_unless_guessed};
use super::spec::Family;
use crate::linearizable::{Op, Seen, Verdict, Violation, horizon, linearized_at_once, words};
use ratelab_core::Nanos;
use std::collections::HashSet;

/// A point of the search.
#[derive(Clone)]
struct Node<S> {
    /// Every answered operation before this index is linearized...
    prefix: usize,
    /// ... and these after it (sorted).
    beyond: Vec<usize>,
    /// The open operations that took effect (sorted).
    used: Vec<usize>,
    hash: u64,
    state: S,
    last_at: Nanos,
}

struct Search<'a, F: Family> {
    family: &'a F,
    answered: Vec<&'a Op>,
    open: Vec<&'a Op>,
    words: Vec<u64>,
    seen: HashSet<(u64, F::State, Nanos)>,
    explored: u64,
    budget: u64,
    /// Whether an open operation was tried at a moment the family named.
    guessed: bool,
    /// The furthest any branch got: explained, the operation, why, and whether a denial the
    /// specification admits.
    furthest: Option<(usize, u64, String, bool)>,
}

pub(super) fn search<F: Family>(
    family: &F,
    ops: &[Op],
    fresh: Vec<F::State>,
    budget: u64,
) -> Verdict {
    let by_call = |v: &mut Vec<&Op>| v.sort_by_key(|o| (o.call, o.id));
    let mut answered: Vec<&Op> = ops.iter().filter(|o| o.seen != Seen::Unknown).collect();
    let mut open: Vec<&Op> = ops.iter().filter(|o| o.seen == Seen::Unknown).collect();
    by_call(&mut answered);
    by_call(&mut open);
    let words = words(answered.len() + open.len());
    let mut s = Search {
        family,
        answered,
        open,
        words,
        seen: HashSet::new(),
        explored: 0,
        budget,
        guessed: false,
        furthest: None,
    };
    let mut stack: Vec<Node<F::State>> = fresh
        .into_iter()
        .rev()
        .map(|state| Node {
            prefix: 0,
            beyond: Vec::new(),
            used: Vec::new(),
            hash: 0,
            state,
            last_at: Nanos::ZERO,
        })
        .collect();
    while let Some(n) = stack.pop() {
        if n.prefix == s.answered.len() {
            return Verdict::Linearizable;
        }
        if !s.seen.insert((n.hash, n.state.clone(), n.last_at)) {
            continue;
        }
        s.explored += 1 + (n.beyond.len() + n.used.len()) as u64;
        if s.explored > s.budget {
            return Verdict::Unknown {
                explored: s.explored,
            };
        }
        let children = s.children(&n);
        // Depth first, earliest call first.
        stack.extend(children.into_iter().rev());
    }
    let (explained, id, detail, phantom) =
        s.furthest
            .take()
            .unwrap_or((0, 0, "no order explains the answers".into(), false));
    let v = Violation {
        id,
        detail: format!("({}) {detail}", family.name()),
        explained,
        phantom_denial: phantom,
    };
    violation_unless_guessed(family, s.guessed, s.explored, v)
}

impl<F: Family> Search<'_, F> {
    fn children(&mut self, n: &Node<F::State>) -> Vec<Node<F::State>> {
        let pending = |i: usize| i >= n.prefix && n.beyond.binary_search(&i).is_err();
        let horizon = horizon(&self.answered, n.prefix, pending);
        let mut out = Vec::new();
        let mut next_at: Option<Nanos> = None;
        let explained = n.prefix + n.beyond.len();
        for i in n.prefix..self.answered.len() {
            let op = self.answered[i];
            if op.call > horizon {
                break;
            }
            if !pending(i) {
                continue;
            }
            let (Some(at), Some(latest)) = (op.decided(), op.decided_by()) else {
                continue;
            };
            // An open operation before it took effect no later than its latest moment.
            next_at = Some(next_at.map_or(latest, |x| x.min(latest)));
            let e = explain(self.family, &n.state, op);
            self.guessed |= e.guessed;
            let keeps = self.family.denials_keep_state()
                && e.next.len() == 1
                && e.next[0] == n.state
                && linearized_at_once(op, self.open.is_empty(), at, n.last_at);
            for state in e.next {
                let mut c = n.clone();
                c.beyond.insert(c.beyond.partition_point(|&b| b < i), i);
                while c.beyond.first() == Some(&c.prefix) {
                    c.beyond.remove(0);
                    c.prefix += 1;
                }
                c.hash ^= self.words[i];
                c.state = state;
                c.last_at = n.last_at.max(at);
                if keeps {
                    // A denial changing nothing here: linearized at once (module docs).
                    return vec![c];
                }
                out.push(c);
            }
            if let Some((why, phantom)) = e.miss
                && self.furthest.as_ref().is_none_or(|f| explained > f.0)
            {
                self.furthest = Some((explained, op.id, why, phantom));
            }
        }
        // An open operation may take effect before the next answered one.
        if let Some(at) = next_at {
            let mut costs: Vec<u64> = Vec::new();
            for (j, op) in self.open.iter().enumerate() {
                if op.call > at || op.call > horizon {
                    break;
                }
                if n.used.binary_search(&j).is_ok() || costs.contains(&op.cost) {
                    continue;
                }
                costs.push(op.cost);
                let from = n.last_at.max(op.call).min(at);
                let pieces = self.family.moments(&n.state, from, at);
                self.guessed |= !self.family.moments_cover(from, at);
                for moment in pieces.into_iter().flat_map(|(lo, hi)| [lo, hi]) {
                    let (_, state) = self.family.decide(&n.state, moment, op.cost);
                    let mut c = n.clone();
                    c.used.insert(c.used.partition_point(|&u| u < j), j);
                    c.hash ^= self.words[self.answered.len() + j];
                    c.state = state;
                    c.last_at = n.last_at.max(moment);
                    out.push(c);
                }
            }
        }
        out
    }
}
