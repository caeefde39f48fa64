//! Bring your own limiter: a user's [`Algorithm`] in the simulated cluster.
//!
//! A limiter is any [`Algorithm`] with what it promises ([`Limiter`], [`Claim`]).
//! [`crate::run_with`] runs a scenario with it in place of the scenario's builtin policy:
//! the store node holds its states in the same [`ratelab_store::MemoryStore`], the gateways
//! run its transition on the naive path, every store-side fault and planted gateway bug
//! applies, and every checker of [`crate::verdict`] judges the history against the claim.
//!
//! The cluster is generic over the algorithm (its store node, messages and store client carry
//! the algorithm's own state type, never a serialized copy: madsim's messages are
//! `Box<dyn Any>`), so a user's state travels as it is. One wrapper, [`Plugged`], puts the
//! user's algorithm and the scenario's edge token bucket (if any) behind one type, because a
//! gateway reaches both of its layers through one store-client type.

use crate::cluster::Script;
use ratelab_core::{
    Algorithm, CostError, Decision, FixedWindow, Nanos, Policy, PolicyError, Quota, TokenBucket,
    TokenBucketState,
};

/// What a limiter promises, which the checkers hold it to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// At most `limit` admitted per `window`: the envelope checker allows `limit` at once and
    /// `limit` per window after (doubled, as for the builtin windows: a fixed window admits
    /// twice its limit across a boundary), and the report's `max_in_window` is the most
    /// admitted in any interval of one `window`. No linearizability specification applies.
    Window(Quota),
    /// At most `limit` admitted in *any* interval of one `window` (half-open): a sliding
    /// log's exact promise. Held to everything [`Claim::Window`] is, and per key and store
    /// epoch to the most admitted in any window being at most `limit` (checker `window`).
    AnyWindow(Quota),
    /// Token-bucket semantics: admitted cost in any interval Δt ≤ B + R·Δt exactly, and every
    /// key's answers linearizable under the token bucket's sequential specification.
    TokenBucket(TokenBucket),
}

impl Claim {
    /// The builtin policy whose envelope (and, for a token bucket, sequential specification)
    /// the checkers know: what they hold the limiter to.
    pub fn policy(self) -> Result<Policy, PolicyError> {
        match self {
            Claim::Window(q) | Claim::AnyWindow(q) => {
                FixedWindow::new(q.limit, q.window).map(Policy::FixedWindow)
            }
            Claim::TokenBucket(b) => Ok(Policy::TokenBucket(b)),
        }
    }
}

/// A user's rate limiter as [`crate::run_with`] takes it: an [`Algorithm`] and the promise
/// the checkers hold it to.
#[derive(Clone, Copy, Debug)]
pub struct Limiter<A> {
    algorithm: A,
    claim: Claim,
}

impl<A: Algorithm + Clone + Send + Sync + 'static> Limiter<A> {
    /// `algorithm`, claiming what it advertises: at most `quota().limit` per
    /// `quota().window` ([`Claim::Window`]).
    pub fn new(algorithm: A) -> Limiter<A> {
        let claim = Claim::Window(algorithm.quota());
        Limiter { algorithm, claim }
    }

    /// `algorithm`, claiming `claim` (a token bucket's semantics, say).
    pub fn claiming(algorithm: A, claim: Claim) -> Limiter<A> {
        Limiter { algorithm, claim }
    }

    /// The algorithm.
    pub fn algorithm(&self) -> &A {
        &self.algorithm
    }

    /// What it promises.
    pub fn claim(&self) -> Claim {
        self.claim
    }
}

/// The algorithm a plugged-in cluster's store client runs: the user's limiter on the per-key
/// layer, the scenario's token bucket on the edge layer.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Plugged<A> {
    /// The user's limiter.
    User(A),
    /// The edge layer's token bucket.
    Edge(TokenBucket),
}

/// The state of a [`Plugged`] algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PluggedState<S> {
    /// A state of the user's limiter.
    User(S),
    /// A state of the edge's token bucket.
    Edge(TokenBucketState),
}

impl<A: Algorithm> Algorithm for Plugged<A> {
    type State = PluggedState<A::State>;

    fn transition(
        &self,
        state: Option<Self::State>,
        now: Nanos,
        cost: u64,
    ) -> Result<(Self::State, Decision), CostError> {
        // A state of the other layer is never sent to this one; were it, it would mean
        // nothing here, like a state of another policy under a builtin one.
        match self {
            Plugged::User(a) => {
                let s = match state {
                    Some(PluggedState::User(s)) => Some(s),
                    _ => None,
                };
                a.transition(s, now, cost)
                    .map(|(s, d)| (PluggedState::User(s), d))
            }
            Plugged::Edge(b) => {
                let s = match state {
                    Some(PluggedState::Edge(s)) => Some(s),
                    _ => None,
                };
                b.transition(s, now, cost)
                    .map(|(s, d)| (PluggedState::Edge(s), d))
            }
        }
    }

    fn expires_at(&self, state: &Self::State) -> Nanos {
        match (self, state) {
            (Plugged::User(a), PluggedState::User(s)) => a.expires_at(s),
            (Plugged::Edge(b), PluggedState::Edge(s)) => b.expires_at(s),
            _ => Nanos::ZERO,
        }
    }

    fn quota(&self) -> Quota {
        match self {
            Plugged::User(a) => a.quota(),
            Plugged::Edge(b) => b.quota(),
        }
    }

    fn ttl(&self, state: &Self::State, now: Nanos) -> Nanos {
        match (self, state) {
            (Plugged::User(a), PluggedState::User(s)) => a.ttl(s, now),
            (Plugged::Edge(b), PluggedState::Edge(s)) => b.ttl(s, now),
            _ => Nanos(1),
        }
    }
}

impl<A: Algorithm + Clone + Send + Sync + 'static> Script for Plugged<A> {
    fn fixed_window(&self) -> Option<FixedWindow> {
        None
    }
}
