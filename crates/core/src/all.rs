//! One request at several limits, all or nothing.
//!
//! A request that matches several limits (per IP, per key, per route) is admitted only if
//! every one of them admits it, and then it is spent at every one; if any denies it, it is
//! spent at none. Deciding the limits one after another instead, spending at each until one
//! denies, charges a denied request to the limits before the denying one ("counter
//! pollution"): a client over one limit drains its others without being served.
//!
//! [`decide_all`] is the pure decision; a store makes it atomic by holding every key's state
//! across it (the in-memory store's shard locks in one global order, one Lua script over all
//! the keys in Redis).

use crate::{Algorithm, CostError, Decision, Nanos};

/// One limit's part in a request: its algorithm, its key's live state, the request's cost.
#[derive(Clone, Copy, Debug)]
pub struct Part<'a, A: Algorithm> {
    /// The limit's algorithm.
    pub algorithm: &'a A,
    /// Its key's live state (`None`: never seen or expired).
    pub state: Option<A::State>,
    /// The request's cost at this limit.
    pub cost: u64,
}

/// What an all-or-nothing decision does at one limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect<S> {
    /// Admitted everywhere: store this state (with the algorithm's TTL).
    Spent(S),
    /// This limit denied the request: nothing changes.
    Denied,
    /// This limit would have admitted it, but another denied it: nothing changes.
    Unspent,
}

/// The decision at every limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllDecision<S> {
    /// Whether every limit admitted the request.
    pub allowed: bool,
    /// Per limit, in order: the effect, and the decision to report. A spent limit reports its
    /// admission; a denying one its denial (with its `retry_after`); an unspent one what it
    /// holds now, as if asked for nothing (`allowed`, its current `remaining`).
    pub parts: Vec<(Effect<S>, Decision)>,
}

/// Decides one request at every part at `now`, all or nothing. A cost a part's policy can
/// never admit is an error, naming the part's index.
pub fn decide_all<A: Algorithm>(
    parts: &[Part<'_, A>],
    now: Nanos,
) -> Result<AllDecision<A::State>, (usize, CostError)> {
    let mut singles = Vec::with_capacity(parts.len());
    for (i, p) in parts.iter().enumerate() {
        singles.push(
            p.algorithm
                .transition(p.state, now, p.cost)
                .map_err(|e| (i, e))?,
        );
    }
    let allowed = singles.iter().all(|(_, d)| d.allowed);
    let parts = singles
        .into_iter()
        .zip(parts)
        .map(|((next, decision), p)| {
            if allowed {
                (Effect::Spent(next), decision)
            } else if !decision.allowed {
                (Effect::Denied, decision)
            } else {
                // Cost 0 spends nothing: the limit's own view now. (An algorithm that refuses
                // a cost of 0 reports the admission it would have made.)
                let held = p
                    .algorithm
                    .transition(p.state, now, 0)
                    .map_or(decision, |(_, d)| d);
                (Effect::Unspent, held)
            }
        })
        .collect();
    Ok(AllDecision { allowed, parts })
}
