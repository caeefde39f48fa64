//! What gateways and the store node say to each other: the addresses, a client request's
//! calls and the cleanup job's calls (separate message types), and the replies.

use ratelab_check::history::Layer;
use ratelab_core::{Decision, Nanos, PolicyState};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};

pub(crate) const STORE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub(crate) const STORE_PORT: u16 = 6379;

pub(crate) fn store_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(STORE_IP), STORE_PORT)
}

pub(crate) fn gateway_ip(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 1, (i / 200) as u8, (i % 200 + 1) as u8))
}
/// A message to the store node: the call, tagged with the client request it serves (trace
/// metadata, like a request-id header; the store's logic never reads it).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoreRequest<S = PolicyState> {
    /// The client request id.
    pub request: u64,
    /// The call.
    pub call: StoreCall<S>,
}

/// A client request's store call, carrying the store algorithm's state type `S` (the builtin policies'
/// [`PolicyState`] unless a user's limiter is plugged in).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum StoreCall<S = PolicyState> {
    /// Naive path, step 1.
    Get {
        /// Whose store.
        layer: Layer,
        /// The key.
        key: String,
    },
    /// Naive path, step 2.
    Set {
        /// Whose store.
        layer: Layer,
        /// The key.
        key: String,
        /// The state to store.
        state: S,
        /// Time to live.
        ttl: Nanos,
    },
    /// Atomic path.
    Apply {
        /// Whose store.
        layer: Layer,
        /// The key.
        key: String,
        /// The caller's time, or `None` for the store's clock.
        now: Option<Nanos>,
        /// Cost.
        cost: u64,
    },
    /// A plain counter's `INCRBY` (the `incr_then_expire` planted bug's first call).
    Incr {
        /// Whose store.
        layer: Layer,
        /// The key.
        key: String,
        /// By how much.
        by: u64,
    },
    /// A plain counter's `EXPIRE` (its second call).
    Expire {
        /// Whose store.
        layer: Layer,
        /// The key.
        key: String,
        /// Time to live from now.
        ttl: Nanos,
    },
}

/// A call of the cleanup job (not of a client request).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum JobCall {
    /// Take the cleanup lease if nobody holds it.
    Acquire {
        /// Who asks.
        owner: String,
        /// Grant length.
        ttl: Nanos,
    },
    /// Extend the cleanup lease.
    Renew {
        /// Who asks.
        owner: String,
        /// The grant's token.
        token: u64,
        /// New length from now.
        ttl: Nanos,
    },
    /// Give the cleanup lease up.
    Release {
        /// Who asks.
        owner: String,
        /// The grant's token.
        token: u64,
    },
    /// List per-key buckets that have expired but are still held.
    ScanExpired {
        /// Who asks.
        owner: String,
        /// At most this many.
        limit: u32,
    },
    /// Delete per-key buckets `keys`, fenced by `token`.
    Cleanup {
        /// Who sends it.
        owner: String,
        /// The fencing token.
        token: u64,
        /// The keys to delete.
        keys: Vec<String>,
    },
}

/// A message to the store node: a client request's call, or the cleanup job's.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum StoreMessage<S = PolicyState> {
    /// A call serving a client request.
    Request(StoreRequest<S>),
    /// A call of the cleanup job.
    Job(JobCall),
}

/// The store node's successful replies, carrying the store algorithm's state type `S`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum StoreReply<S = PolicyState> {
    /// The state read.
    Read {
        /// The state.
        state: Option<S>,
        /// Store clock.
        store_time: Nanos,
    },
    /// The write was applied.
    Written,
    /// The transition's decision.
    Applied {
        /// The decision.
        decision: Decision,
        /// Store clock.
        store_time: Nanos,
    },
    /// A counter's new count.
    Counted {
        /// The count.
        count: u64,
        /// Store clock.
        store_time: Nanos,
    },
    /// The lease's new token, or `None` if it is held.
    Granted(Option<u64>),
    /// Whether a renewal or release was done.
    Done(bool),
    /// Expired bucket keys.
    Keys(Vec<String>),
    /// The store refused a cost its policy can never admit: the caller's error, not the
    /// store's (made by the gateway's client from [`WireError::Cost`], so that the gateway
    /// answers it as the denial it is rather than as a store failure).
    CostRefused(ratelab_core::CostError),
    /// A fenced commit's verdict.
    Fenced {
        /// Applied, or refused as stale.
        accepted: bool,
        /// The highest token the resource has accepted.
        highest: u64,
    },
}

/// The store node's errors, as sent over the wire.
#[derive(Clone, Copy, Debug, Serialize, Deserialize)]
pub enum WireError {
    /// Injected error or refusal.
    Unavailable,
    /// The key limit was reached.
    Full,
    /// The key was invalid.
    BadKey,
    /// The cost exceeds the policy.
    Cost {
        /// Cost.
        cost: u64,
        /// Limit.
        limit: u64,
    },
}

/// The cleanup job's lease name.
pub(crate) const JOB_LEASE: &str = "cleanup";
