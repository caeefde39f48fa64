//! The asynchronous store contract: a store reached over a network.
//!
//! A gateway talks to a remote store (the simulated store node, Redis) through
//! [`StoreClient`]. Each call is one round trip and reports the store's own clock, so the
//! caller can choose whose time a transition uses ([`TimeSource`]) and a checker can place
//! every decision on the store's timeline.
//!
//! [`decide_remote`] runs either access path over a client, with the same core transition as
//! the in-process [`Store`](crate::Store) paths.

use crate::sent::{Sent, SentReply};
use crate::{Key, LimitError, Path, StoreError};
use core::future::Future;
use ratelab_core::{Algorithm, Decision, Nanos};
use std::borrow::Cow;
use std::sync::Arc;

/// Whose clock a transition reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TimeSource {
    /// The store's clock (like Redis `TIME`): one clock for every gateway, immune to their skew.
    Store,
    /// The calling gateway's clock: each gateway's skew and drift leak into the decisions.
    /// A key's lifetime is still kept on the store's clock (Redis expires a key by its own):
    /// a caller whose clock runs slower than the store's loses a key's state before its own
    /// clock says the state is over, and that key's next request is decided as its first.
    Caller,
}

impl TimeSource {
    /// The lower-case name used in files and flags.
    pub fn name(self) -> &'static str {
        match self {
            TimeSource::Store => "store",
            TimeSource::Caller => "gateway",
        }
    }
}

/// What a read returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read<S> {
    /// The live state, or `None` if absent or expired.
    pub state: Option<S>,
    /// The store's clock when it served the read.
    pub store_time: Nanos,
}

/// What an atomic apply returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    /// The decision.
    pub decision: Decision,
    /// The store's clock when it applied the transition.
    pub store_time: Nanos,
}

/// A decision made over a remote store, with the store time it rests on: the apply on the
/// atomic path, the read on the naive path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The decision.
    pub decision: Decision,
    /// The store's clock at the operation the decision was computed from.
    pub decided_at: Nanos,
}

/// What an all-or-nothing step over several keys returned ([`StoreClient::apply_all`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllApplied {
    /// Whether every key admitted the request (and it was spent at every one).
    pub allowed: bool,
    /// Per item, in order, the decision to report
    /// ([`AllDecision::parts`](ratelab_core::all::AllDecision::parts)).
    pub decisions: Vec<Decision>,
    /// The store's clock when it decided.
    pub store_time: Nanos,
}

/// One item of [`StoreClient::apply_all`]: a limit's client, a key in its key space, a cost.
pub type AllItem<'a, C> = (&'a C, &'a Key, u64);

/// The future [`StoreClient::apply_all`] returns.
pub type AllFuture<'a> =
    core::pin::Pin<Box<dyn Future<Output = Result<AllApplied, LimitError>> + Send + 'a>>;

/// A store reached by round trips. Every method is one round trip.
pub trait StoreClient: Clone + Send + Sync {
    /// The algorithm whose state the store holds.
    type Algorithm: Algorithm + Send + Sync;

    /// Whether every future this client returns is ready when first polled (a store in this
    /// process, behind no network): a caller may then run a whole decision over it in one
    /// poll, without boxing it to wait. A client that may ever wait leaves it `false`: a
    /// caller that trusted it would have to give up a decision half made (a breaker's probe
    /// handed out and never recorded, the request neither logged nor counted).
    const IMMEDIATE: bool = false;

    /// The algorithm and policy in force.
    fn algorithm(&self) -> &Self::Algorithm;

    /// A client whose calls carry `request` as their trace id, so the store's log of a call can
    /// be joined to the request it served. The default ignores it and lends this client, with
    /// no copy.
    fn traced(&self, request: u64) -> Cow<'_, Self> {
        let _ = request;
        Cow::Borrowed(self)
    }

    /// Naive path, step 1.
    fn get(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Read<<Self::Algorithm as Algorithm>::State>, StoreError>> + Send;

    /// Naive path, step 2: stores `state` for `ttl` on the store's clock, unconditionally.
    fn set(
        &self,
        key: &Key,
        state: <Self::Algorithm as Algorithm>::State,
        ttl: Nanos,
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Atomic path: one transition in the store, at `now` if given, else on the store's clock.
    fn apply(
        &self,
        key: &Key,
        now: Option<Nanos>,
        cost: u64,
    ) -> impl Future<Output = Result<Applied, LimitError>> + Send;

    /// Atomic path, in two halves, for a caller that holds the call by name rather than in a
    /// future of its own: the call is written to the store before this returns (now, not when
    /// first polled), and the [`Sent`]'s output is its reply, which
    /// [`StoreClient::read_sent`] reads. Nothing bounds the wait but the caller (a gateway's
    /// deadline). `None` when this client cannot (the default): the caller awaits
    /// [`StoreClient::apply`] instead. An `Err` is the call's outcome, decided without the
    /// store (a cost the policy can never admit, a store known to be down).
    fn send(&self, key: &Key, now: Option<Nanos>, cost: u64) -> Option<Result<Sent, LimitError>> {
        let _ = (key, now, cost);
        None
    }

    /// The outcome in `reply`, the reply to a call this client [sent](StoreClient::send): what
    /// [`StoreClient::apply`] would have returned for it. `None` when the call has to be made
    /// again through [`StoreClient::apply`] (the store had lost its script: a restarted
    /// server), which nothing was spent for. A client that sends reads its own replies; the
    /// default, for one that does not, reads any reply as a store it cannot use
    /// ([`StoreError::Unavailable`]), never as a call to make again, which would spend twice.
    fn read_sent(&self, reply: SentReply) -> Option<Result<Applied, LimitError>> {
        let _ = reply;
        Some(Err(LimitError::Store(StoreError::Unavailable)))
    }

    /// [`StoreClient::apply_all`] in two halves, as [`StoreClient::send`] is
    /// [`StoreClient::apply`]'s: the step over every item is written to the store before this
    /// returns, and [`StoreClient::read_sent_all`] reads its reply. `None` when this store
    /// cannot send it (the default), or would not take it as one step (the items not all of
    /// one server): the caller then goes through [`StoreClient::apply_all`]. An `Err` is the
    /// step's outcome, decided without the store (a cost a limit can never admit, a key given
    /// twice, a store known to be down).
    fn send_all(
        items: &[AllItem<'_, Self>],
        now: Option<Nanos>,
    ) -> Option<Result<Sent, LimitError>> {
        let _ = (items, now);
        None
    }

    /// The outcome in `reply`, the reply to the step [`StoreClient::send_all`] sent over
    /// `items` (the same items, in the same order): what [`StoreClient::apply_all`] would
    /// have returned. `None` when the step has to be made again through `apply_all` (a
    /// `NOSCRIPT`: nothing was spent). The default reads any reply as a store it cannot use,
    /// as [`StoreClient::read_sent`]'s does.
    fn read_sent_all(
        items: &[AllItem<'_, Self>],
        reply: SentReply,
    ) -> Option<Result<AllApplied, LimitError>> {
        let _ = (items, reply);
        Some(Err(LimitError::Store(StoreError::Unavailable)))
    }

    /// Atomic path over several limits: one request at every item's key, in one step and one
    /// round trip, all or nothing ([`ratelab_core::all`]). Each item is the client of one
    /// limit (its algorithm and key space) of the *same* store. `None` when this store cannot,
    /// or the items are not all of one store: the caller then decides them one by one. The
    /// step runs when the future is polled, never before (a caller may drop it unpolled).
    /// A step that fails with [`StoreError::Corrupt`] wrote nothing.
    fn apply_all<'a>(items: &'a [AllItem<'a, Self>], now: Option<Nanos>) -> Option<AllFuture<'a>> {
        let _ = (items, now);
        None
    }
}

/// Decides one request over `client` on `path`, reading time from `time` (the caller's
/// clock reads `caller_now`).
pub async fn decide_remote<C: StoreClient>(
    client: &C,
    path: Path,
    time: TimeSource,
    key: &Key,
    caller_now: Nanos,
    cost: u64,
) -> Result<Outcome, LimitError> {
    match path {
        Path::Atomic => {
            let now = (time == TimeSource::Caller).then_some(caller_now);
            let applied = client.apply(key, now, cost).await?;
            Ok(Outcome {
                decision: applied.decision,
                decided_at: applied.store_time,
            })
        }
        // Boxed: the naive path's two calls would otherwise size every atomic call's
        // future, which callers move and copy, by the larger of their futures.
        Path::Naive => Box::pin(decide_naive(client, time, key, caller_now, cost)).await,
    }
}

/// The naive path: read the state, decide here, write it back if admitted.
async fn decide_naive<C: StoreClient>(
    client: &C,
    time: TimeSource,
    key: &Key,
    caller_now: Nanos,
    cost: u64,
) -> Result<Outcome, LimitError> {
    let read = client.get(key).await?;
    let now = match time {
        TimeSource::Store => read.store_time,
        TimeSource::Caller => caller_now,
    };
    let algorithm = client.algorithm();
    let (next, decision) = algorithm.transition(read.state, now, cost)?;
    if decision.allowed {
        client.set(key, next, algorithm.ttl(&next, now)).await?;
    }
    Ok(Outcome {
        decision,
        decided_at: read.store_time,
    })
}

/// The naive path's read from an in-process store, at the time `clock` gives, which is the
/// store's clock.
fn read_now<A: Algorithm>(
    store: &crate::MemoryStore<A>,
    key: &Key,
    clock: &impl Fn() -> Nanos,
) -> Result<Read<A::State>, StoreError> {
    let now = clock();
    crate::Store::get(store, key, now).map(|state| Read {
        state,
        store_time: now,
    })
}

/// A [`StoreClient`] over an in-process [`MemoryStore`](crate::MemoryStore): every call
/// completes at once. The store's clock is the `now` the client is given by `clock`.
#[derive(Debug)]
pub struct LocalClient<A: Algorithm, F> {
    store: std::sync::Arc<crate::MemoryStore<A>>,
    clock: F,
}

impl<A: Algorithm, F: Clone> Clone for LocalClient<A, F> {
    fn clone(&self) -> Self {
        LocalClient {
            store: self.store.clone(),
            clock: self.clock.clone(),
        }
    }
}

impl<A: Algorithm, F: Fn() -> Nanos> LocalClient<A, F> {
    /// A client of `store` whose clock is `clock`.
    pub fn new(store: std::sync::Arc<crate::MemoryStore<A>>, clock: F) -> Self {
        LocalClient { store, clock }
    }

    /// The store.
    pub fn store(&self) -> &crate::MemoryStore<A> {
        &self.store
    }
}

impl<A, F> StoreClient for LocalClient<A, F>
where
    A: Algorithm + Send + Sync,
    F: Fn() -> Nanos + Clone + Send + Sync,
{
    type Algorithm = A;

    // Every call completes in the call: each future returned is `core::future::ready`.
    const IMMEDIATE: bool = true;

    fn algorithm(&self) -> &A {
        crate::Store::algorithm(&*self.store)
    }

    fn get(&self, key: &Key) -> impl Future<Output = Result<Read<A::State>, StoreError>> + Send {
        core::future::ready(read_now(&self.store, key, &self.clock))
    }

    fn set(
        &self,
        key: &Key,
        state: A::State,
        ttl: Nanos,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let now = (self.clock)();
        core::future::ready(crate::Store::set(&*self.store, key, state, ttl, now))
    }

    fn apply(
        &self,
        key: &Key,
        now: Option<Nanos>,
        cost: u64,
    ) -> impl Future<Output = Result<Applied, LimitError>> + Send {
        let store_time = (self.clock)();
        let r = crate::Store::apply(&*self.store, key, now.unwrap_or(store_time), cost).map(
            |decision| Applied {
                decision,
                store_time,
            },
        );
        core::future::ready(r)
    }
}

/// One limit's client of an in-process [`MemoryStore`](crate::MemoryStore) that several
/// limits share: its own algorithm, and its own key space (`prefix`), so the limits of one
/// request can be decided in one all-or-nothing step ([`StoreClient::apply_all`]).
#[derive(Debug)]
pub struct SharedClient<A: Algorithm, F> {
    store: Arc<crate::MemoryStore<A>>,
    algorithm: A,
    prefix: Arc<str>,
    clock: F,
}

impl<A: Algorithm + Clone, F: Clone> Clone for SharedClient<A, F> {
    fn clone(&self) -> Self {
        SharedClient {
            store: self.store.clone(),
            algorithm: self.algorithm.clone(),
            prefix: self.prefix.clone(),
            clock: self.clock.clone(),
        }
    }
}

impl<A: Algorithm, F: Fn() -> Nanos> SharedClient<A, F> {
    /// A client of `store` for a limit running `algorithm` on the keys under `prefix` (at most
    /// [`MAX_PREFIX_LEN`](crate::MAX_PREFIX_LEN) bytes, no control characters), whose clock is
    /// `clock`.
    pub fn new(
        store: Arc<crate::MemoryStore<A>>,
        algorithm: A,
        prefix: &str,
        clock: F,
    ) -> Result<Self, crate::KeyError> {
        Key::prefixed(prefix, &Key::new("k")?)?;
        Ok(SharedClient {
            store,
            algorithm,
            prefix: prefix.into(),
            clock,
        })
    }

    /// The shared store.
    pub fn store(&self) -> &crate::MemoryStore<A> {
        &self.store
    }

    fn key(&self, key: &Key) -> Key {
        // The prefix was checked when the client was made.
        Key::joined(&self.prefix, key)
    }
}

impl<A, F> StoreClient for SharedClient<A, F>
where
    A: Algorithm + Clone + Send + Sync,
    F: Fn() -> Nanos + Clone + Send + Sync,
{
    type Algorithm = A;

    // Every call completes in the call: each future returned is `core::future::ready`, or
    // (`apply_all`) an async block that awaits nothing.
    const IMMEDIATE: bool = true;

    fn algorithm(&self) -> &A {
        &self.algorithm
    }

    fn get(&self, key: &Key) -> impl Future<Output = Result<Read<A::State>, StoreError>> + Send {
        core::future::ready(read_now(&self.store, &self.key(key), &self.clock))
    }

    fn set(
        &self,
        key: &Key,
        state: A::State,
        ttl: Nanos,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let now = (self.clock)();
        let r = crate::Store::set(&*self.store, &self.key(key), state, ttl, now);
        core::future::ready(r)
    }

    fn apply(
        &self,
        key: &Key,
        now: Option<Nanos>,
        cost: u64,
    ) -> impl Future<Output = Result<Applied, LimitError>> + Send {
        // The store's clock is read under the key's lock, as a script reads `TIME`: two
        // racing decisions on one key never see their times in the other order.
        let store_time = std::cell::Cell::new(Nanos::ZERO);
        let clock = || {
            let t = (self.clock)();
            store_time.set(t);
            now.unwrap_or(t)
        };
        let r = self
            .store
            .apply_with_clock_in(&self.prefix, key, &self.algorithm, clock, cost)
            .map(|decision| Applied {
                decision,
                store_time: store_time.get(),
            });
        core::future::ready(r)
    }

    fn apply_all<'a>(items: &'a [AllItem<'a, Self>], now: Option<Nanos>) -> Option<AllFuture<'a>> {
        let (first, _, _) = items.first()?;
        if !items
            .iter()
            .all(|(c, _, _)| Arc::ptr_eq(&c.store, &first.store))
        {
            return None;
        }
        Some(Box::pin(async move {
            let store_time = (first.clock)();
            let keys: Vec<Key> = items.iter().map(|(c, k, _)| c.key(k)).collect();
            let parts: Vec<crate::Item<'_, A>> = items
                .iter()
                .zip(&keys)
                .map(|((c, _, cost), key)| crate::Item {
                    key,
                    algorithm: &c.algorithm,
                    cost: *cost,
                })
                .collect();
            first
                .store
                .apply_all(&parts, now.unwrap_or(store_time))
                .map(|d| AllApplied {
                    allowed: d.allowed,
                    decisions: d.parts.into_iter().map(|(_, d)| d).collect(),
                    store_time,
                })
        }))
    }
}
