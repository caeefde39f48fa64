//! # ratelab-store
//!
//! Where limiter state lives, and the two ways of updating it.
//!
//! Every store offers both access paths over the *same* core transition
//! ([`ratelab_core::Algorithm::transition`]), so the race is the only difference between them:
//!
//! - **naive** ([`decide_naive`]): [`Store::get`] the state, run the transition in the caller,
//!   [`Store::set`] the result with a TTL. Two round trips, and between them a window in which
//!   another caller's update to the same key is overwritten: the *lost update*. ratelab keeps
//!   this path as its canary: the model checkers and the simulator must catch it.
//! - **atomic** ([`Store::apply`]): the store runs the transition on its own state in one
//!   step (under the key's lock here, a Lua script in Redis, one message handled serially by
//!   the simulated store node). Concurrent callers are serialised; nothing is lost.
//!
//! Every stored state carries a TTL ([`ratelab_core::Algorithm::ttl`]): it expires exactly
//! when it becomes equivalent to "no state", so idle buckets clear themselves without ever
//! granting a token early.
//!
//! [`StoreClient`] is the same contract for a store reached over a network, one round trip
//! per call, and [`decide_remote`] runs either path over it.
//!
//! **A new store backend** implements [`Store`] (in process) or [`StoreClient`] (over a
//! network) in a file here; the server picks it in its `stores` module. A client that can
//! write a call at once and read its reply later also implements [`StoreClient::send`] and
//! [`StoreClient::read_sent`] ([`Sent`]), and for several limits' all-or-nothing step
//! [`StoreClient::send_all`] and [`StoreClient::read_sent_all`]: the HTTP front then holds
//! the call by name, with no future of the decision's own. An algorithm Redis
//! should run atomically is a Lua script here: every family is one function in `limits.lua`
//! ([`redis_limits`], with an arm in `ScriptLimit::new` naming its parameters), the token
//! bucket's taken from `token_bucket.lua`, its own script; its state's text and its undoing
//! are arms of [`redis_state`], and its refund a function in `refund.lua` (a request a Redis
//! Cluster decides slot by slot is given back where another slot denied it: [`redis_slots`]).
//!
//! [`MemoryStore`] is the in-process store. It is generic over a [`SyncBackend`], so the
//! loom and shuttle proofs in the workspace's `tests/` check this very code.
#![warn(missing_docs)]

pub mod backend;
mod client;
mod error;
pub mod faulty;
mod key;
pub mod lease;
#[cfg(feature = "lua")]
pub mod lua_script;
pub mod memory;
#[cfg(feature = "redis")]
pub mod redis_conn;
#[cfg(feature = "redis")]
pub mod redis_lane;
#[cfg(feature = "redis")]
pub mod redis_limits;
#[cfg(feature = "redis")]
pub mod redis_policy;
#[cfg(feature = "redis")]
pub mod redis_slots;
pub mod redis_state;
#[cfg(feature = "redis")]
pub mod redis_store;
pub mod rng;
pub mod script;
#[cfg(feature = "redis")]
mod script_loads;
mod sent;

pub use backend::{BackendMutex, StdBackend, SyncBackend};
pub use client::{
    AllApplied, AllFuture, AllItem, Applied, LocalClient, Outcome, Read, SharedClient, StoreClient,
    TimeSource, decide_remote,
};
pub use error::{FailReason, LimitError, StoreError};
pub use key::{Key, KeyError, MAX_KEY_LEN, MAX_PREFIX_LEN};
pub use lease::{Fence, FenceVerdict, LeaseClient, LeaseTable, LocalLeases, TokenSource};
pub use memory::{HashSeed, Item, MemoryStore, StoreStats};
pub use sent::{Sent, SentReply};

use core::fmt;
use ratelab_core::{Algorithm, Decision, Nanos};

/// The state type of a store's algorithm.
pub type StateOf<S> = <<S as Store>::Algorithm as Algorithm>::State;

/// A shared store of per-key limiter state.
///
/// `now` is the caller's clock, used for TTL expiry (and, on the atomic path, for the
/// transition). Stores with a clock of their own, such as Redis, may use theirs instead.
pub trait Store {
    /// The algorithm whose state this store holds.
    type Algorithm: Algorithm;

    /// The algorithm and policy the store applies.
    fn algorithm(&self) -> &Self::Algorithm;

    /// Naive path, step 1: the state under `key`, or `None` if absent or expired at `now`.
    fn get(&self, key: &Key, now: Nanos) -> Result<Option<StateOf<Self>>, StoreError>;

    /// Naive path, step 2: stores `state` under `key` until `now + ttl`, unconditionally.
    fn set(
        &self,
        key: &Key,
        state: StateOf<Self>,
        ttl: Nanos,
        now: Nanos,
    ) -> Result<(), StoreError>;

    /// Atomic path: applies one request of `cost` at `now` to `key` in a single step.
    fn apply(&self, key: &Key, now: Nanos, cost: u64) -> Result<Decision, LimitError>;
}

/// Which access path a caller uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Path {
    /// Read, compute in the caller, write: two round trips, loses updates under concurrency.
    Naive,
    /// One step in the store: no lost updates.
    Atomic,
}

impl Path {
    /// Both paths, naive first.
    pub const ALL: [Path; 2] = [Path::Naive, Path::Atomic];

    /// The lower-case name used in files and flags.
    pub fn name(self) -> &'static str {
        match self {
            Path::Naive => "naive",
            Path::Atomic => "atomic",
        }
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The naive path: `get`, transition in the caller, `set` if admitted.
///
/// Deliberately not atomic. Two callers that both `get` before either `set`s each see the
/// same tokens and both write back: one update is lost and the key admits more than its
/// policy allows.
pub fn decide_naive<S: Store + ?Sized>(
    store: &S,
    key: &Key,
    now: Nanos,
    cost: u64,
) -> Result<Decision, LimitError> {
    let state = store.get(key, now)?;
    let (next, decision) = store.algorithm().transition(state, now, cost)?;
    if decision.allowed {
        let ttl = store.algorithm().ttl(&next, now);
        store.set(key, next, ttl, now)?;
    }
    Ok(decision)
}

/// Decides one request on the chosen path.
pub fn decide<S: Store + ?Sized>(
    store: &S,
    path: Path,
    key: &Key,
    now: Nanos,
    cost: u64,
) -> Result<Decision, LimitError> {
    match path {
        Path::Naive => decide_naive(store, key, now, cost),
        Path::Atomic => store.apply(key, now, cost),
    }
}
