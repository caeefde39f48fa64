//! Black-box mode: a Wing–Gong search over the orders real time allows, in the style of Lowe
//! and Porcupine, memoised on the set linearized so far, the family's state and the last
//! decision time (where a family's states nest, as the token bucket's ranges do, a point is
//! skipped when one with the same set, a state holding its own and a last decision time no
//! later was visited).
//!
//! An answered operation is judged at its decision time ([`Family::explain`]). An operation
//! without an answer stays open to the end and may take effect at some moment between the
//! last decision and the next answered one, or never ([`Family::took_effect`]); open
//! operations of one cost sent by then are interchangeable, so one of each cost is tried.
//! Taking effect without changing the state is not tried: the point itself keeps the
//! operation open, to take effect later or never.
//!
//! Where a family's denials never change its state ([`Family::denials_keep_state`]), a
//! denial explained from a node with that node's state as its only outcome is linearized at
//! once, as the node's only child: any order placing it later explains the same answers
//! with it placed here (it is within the real-time horizon), provided the moments open
//! operations may take effect at stay as they were (none is open, or the last decision time
//! does not move). A crowd of overlapping denials is then one path, not every order of it.

use super::explain::violation_unless_guessed;
use super::spec::Family;
use crate::linearizable::{Op, Seen, Verdict, Violation, horizon, linearized_at_once, words};
use ratelab_core::Nanos;
use std::collections::{HashMap, HashSet};

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
    seen: Memo<F::State>,
    /// Buffers the family's answers are written to, kept between calls.
    scratch: Vec<F::State>,
    moments: Vec<(F::State, Nanos)>,
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
        seen: if family.states_nest() {
            Memo::Nested(HashMap::new())
        } else {
            Memo::Exact(HashSet::new())
        },
        scratch: Vec::new(),
        moments: Vec::new(),
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
        if s.seen.covered(family, &n) {
            continue;
        }
        s.explored += 1;
        let children = s.children(&n);
        if s.explored > s.budget {
            return Verdict::Unknown {
                explored: s.explored,
            };
        }
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
    /// Charges the budget for a point about to be made from `n`; whether the budget allows
    /// it. Every point made counts, not only those expanded, each by its size: a wide history
    /// (thousands of overlapping operations, as behind a paused gateway) makes thousands of
    /// children per point, each holding the operations linearized out of order, and the stack
    /// holding them must stay bounded too.
    fn charge(&mut self, n: &Node<F::State>) -> bool {
        self.explored += 1 + (n.beyond.len() + n.used.len()) as u64;
        self.explored <= self.budget
    }

    fn children(&mut self, n: &Node<F::State>) -> Vec<Node<F::State>> {
        let pending = |i: usize| i >= n.prefix && n.beyond.binary_search(&i).is_err();
        let horizon = horizon(&self.answered, n.prefix, pending);
        let mut out = Vec::new();
        let mut next_at: Option<Nanos> = None;
        let explained = n.prefix + n.beyond.len();
        for i in n.prefix..self.answered.len() {
            let op = self.answered[i];
            if op.call > horizon || self.explored > self.budget {
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
            let mut next = std::mem::take(&mut self.scratch);
            next.clear();
            let e = self.family.explain(&n.state, op, &mut next);
            self.guessed |= e.guessed;
            let keeps = self.family.denials_keep_state()
                && next.len() == 1
                && next[0] == n.state
                && linearized_at_once(op, self.open.is_empty(), at, n.last_at);
            let mut kept = None;
            for state in next.drain(..) {
                if !self.charge(n) {
                    break;
                }
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
                    kept = Some(c);
                    break;
                }
                out.push(c);
            }
            self.scratch = next;
            if let Some(c) = kept {
                // A denial changing nothing here: linearized at once (module docs).
                return vec![c];
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
            for j in 0..self.open.len() {
                let op = self.open[j];
                if op.call > at || op.call > horizon || self.explored > self.budget {
                    break;
                }
                if n.used.binary_search(&j).is_ok() || costs.contains(&op.cost) {
                    continue;
                }
                costs.push(op.cost);
                let from = n.last_at.max(op.call).min(at);
                self.guessed |= !self.family.moments_cover(from, at);
                let mut next = std::mem::take(&mut self.moments);
                next.clear();
                self.family
                    .took_effect(&n.state, (from, at), op.cost, &mut next);
                for (state, moment) in next.drain(..) {
                    // Taking effect and changing nothing is no more than staying open (this
                    // point keeps the operation to use later, or never, with no later last
                    // decision time): nothing to try.
                    if state == n.state {
                        continue;
                    }
                    if !self.charge(n) {
                        break;
                    }
                    let mut c = n.clone();
                    c.used.insert(c.used.partition_point(|&u| u < j), j);
                    c.hash ^= self.words[self.answered.len() + j];
                    c.state = state;
                    c.last_at = n.last_at.max(moment);
                    out.push(c);
                }
                self.moments = next;
            }
        }
        out
    }
}

/// The points visited: exactly, or, where a family's states nest, for each set of operations
/// linearized the states visited with their last decision times.
enum Memo<S> {
    Exact(HashSet<(u64, S, Nanos)>),
    Nested(HashMap<u64, Vec<(S, Nanos)>>),
}

impl<S: Clone + Eq + std::hash::Hash> Memo<S> {
    /// Whether `n` adds nothing to what was visited (and `n` is recorded if it does). Where
    /// states nest, a point with the same operations linearized, a state holding `n`'s and a
    /// last decision time no later covers it: every step maps a wider state onto a wider one
    /// and an earlier last decision leaves open operations more moments, so whatever `n` can
    /// explain that point could, and it has been explored or is being explored above `n`.
    fn covered<F: Family<State = S>>(&mut self, family: &F, n: &Node<S>) -> bool {
        match self {
            Memo::Exact(seen) => !seen.insert((n.hash, n.state.clone(), n.last_at)),
            Memo::Nested(seen) => {
                let visited = seen.entry(n.hash).or_default();
                let covers = |(s, at): &(S, Nanos)| family.holds(s, &n.state) && *at <= n.last_at;
                if visited.iter().any(covers) {
                    return true;
                }
                visited.retain(|(s, at)| !(family.holds(&n.state, s) && n.last_at <= *at));
                visited.push((n.state.clone(), n.last_at));
                false
            }
        }
    }
}
