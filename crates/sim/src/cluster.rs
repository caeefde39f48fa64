//! The simulated cluster: one store node, N gateway nodes, a client node, and the faults.
//!
//! - The **store node** owns every key and handles its messages one at a time, in arrival
//!   order, like Redis: each request runs to completion (read, transition, write) before the
//!   next is looked at. It holds one real [`MemoryStore`] per limit layer (the per-key
//!   policy's, and the edge policy's when the scenario has one); every call names its layer,
//!   so a layer's keys are decided under that layer's policy only. It
//!   decides store-side faults per message from the scenario's plan and its own seeded
//!   stream: answer with an error (not applied), drop (not applied: the caller times out),
//!   apply but lose the reply, or delay the reply. A crash kills the node; the restart runs
//!   its init again with an empty store: all state is lost. With `store.replica`, every write
//!   is copied to a replica after a lag (`replica.rs`), and a failover kills the node and
//!   restarts it from the replica's copies.
//! - Each **gateway node** decides requests over a [`StoreClient`] whose implementation here
//!   sends raw endpoint messages to the store node (`transport.rs`), on either path, bounded
//!   by the request's deadline on the node's timeout queue (`timeouts.rs`), reading its own
//!   clock (true simulated time with the scenario's offset and drift) or the store's.
//! - **Clients** are tasks on a client node. They send each request by starting the gateway's
//!   handler on the chosen gateway node; clients that honour Retry-After wait for the answer.
//! - **Network faults** use madsim's verbs: `clog_link` for partitions, the packet-loss rate,
//!   `kill`/`restart`, `pause`/`resume`.
//!
//! Nothing here reads a wall clock or an unseeded random number.

use crate::dilation::{self, dilate, sleep};
use crate::planted::{Counters, PlantedBug, StorePolicy, counted_decision};
use crate::replica::{Copied, Replica, Restored};
use crate::rng::{SimRng, stream};
use crate::scenario::{
    ClientSpec, FaultKind, FaultSpec, GatewayChoice, NodeName, Pattern, Scenario, TokenSourceName,
    ms,
};
use crate::timeouts::Timeouts;
use crate::transport::{self, Fate, Link, Lost};
use madsim::net::{Endpoint, NetSim};
use madsim::runtime::{Handle, NodeHandle};
use madsim::time::Instant;
use ratelab_check::history::{
    Answer, CommitRecord, ErrorKind, FailReason, History, Layer, Layers, LeaseKind, LeaseRecord,
    ScanRecord, StoreFate, StoreOp,
};
use ratelab_core::{Algorithm, CostError, Decision, FixedWindow, Nanos, Policy, PolicyState};
use ratelab_gateway::limits::{NoHeaders, PER_IP, PER_KEY};
use ratelab_gateway::singleton::{FencedJob, Singleton, SingletonConfig};
use ratelab_gateway::{
    Answer as GatewayAnswer, BreakerConfig, Env, Forwarding, Gateway, GatewayConfig, LayerOutcome,
    Request as GatewayRequest, StatsSnapshot,
};
use ratelab_store::{
    Applied, Fence, FenceVerdict, HashSeed, Key, LeaseClient, LeaseTable, LimitError, MemoryStore,
    Read, Store, StoreClient, StoreError, TokenSource,
};
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const STORE_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
const STORE_PORT: u16 = 6379;
/// madsim time (undilated: 50 ns of physical time) for nodes to start and bind before time zero.
const SETUP: Duration = Duration::from_millis(5);

fn store_addr() -> SocketAddr {
    SocketAddr::new(IpAddr::V4(STORE_IP), STORE_PORT)
}

fn gateway_ip(i: u32) -> IpAddr {
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

/// A store call, carrying the store algorithm's state type `S` (the builtin policies'
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

impl<S> StoreCall<S> {
    /// Calls of the cleanup job, not of a client request.
    fn is_job(&self) -> bool {
        !matches!(
            self,
            StoreCall::Get { .. }
                | StoreCall::Set { .. }
                | StoreCall::Apply { .. }
                | StoreCall::Incr { .. }
                | StoreCall::Expire { .. }
        )
    }
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

/// State every node reaches: the recorder and the run's time origin.
pub(crate) struct Shared {
    t0: Instant,
    pub(crate) history: Mutex<History>,
}

impl Shared {
    /// Physical time since time zero.
    fn now(&self) -> Nanos {
        dilation::physical(Instant::now().saturating_duration_since(self.t0))
    }

    /// Sleeps until `t` of physical time after time zero.
    async fn sleep_until(&self, t: Duration) {
        madsim::time::sleep_until(self.t0 + dilate(t)).await;
    }

    fn record(&self, f: impl FnOnce(&mut History, Nanos)) {
        let now = self.now();
        f(&mut self.history.lock().expect("recorder"), now);
    }
}

/// Store-side faults, evaluated per message.
struct StorePlan {
    windows: Vec<StoreWindow>,
}

struct StoreWindow {
    kind: FaultKind,
    from: Nanos,
    until: Nanos,
    rate: f64,
    extra: (u64, u64),
}

enum Verdict {
    Serve,
    Error,
    Drop,
    LoseReply,
    Delay(Nanos),
}

impl StorePlan {
    fn new(faults: &[FaultSpec]) -> StorePlan {
        let windows = faults
            .iter()
            .filter(|f| {
                matches!(
                    f.kind,
                    FaultKind::StoreErrors
                        | FaultKind::StoreTimeouts
                        | FaultKind::LostReplies
                        | FaultKind::StoreLatency
                )
            })
            .map(|f| StoreWindow {
                kind: f.kind,
                from: ms(f.at_ms.map_or(0, |v| v.get())),
                until: ms(f.until_ms.map_or(0, |v| v.get())),
                rate: f.rate.map_or(1.0, |r| r.get()),
                extra: f
                    .extra_latency
                    .map_or((0, 0), |l| (l.min_us.get() * 1_000, l.max_us.get() * 1_000)),
            })
            .collect();
        StorePlan { windows }
    }

    fn verdict(&self, now: Nanos, rng: &mut SimRng) -> Verdict {
        for w in &self.windows {
            if now < w.from || now >= w.until || !rng.chance(w.rate) {
                continue;
            }
            return match w.kind {
                FaultKind::StoreErrors => Verdict::Error,
                FaultKind::StoreTimeouts => Verdict::Drop,
                FaultKind::LostReplies => Verdict::LoseReply,
                _ => Verdict::Delay(Nanos(rng.between(w.extra.0, w.extra.1))),
            };
        }
        Verdict::Serve
    }
}

/// What the store does with one message's reply.
type Reply<S> = Fate<Result<StoreReply<S>, WireError>>;

/// The store's replica, shared by every incarnation of the store node and the failover.
type SharedReplica<S> = Arc<Mutex<Replica<<S as Algorithm>::State>>>;

struct StoreNode<S: Script> {
    /// The per-key policy's buckets.
    store: MemoryStore<S>,
    /// Plain counters (`INCRBY`, `EXPIRE`).
    counters: Mutex<Counters>,
    /// The cleanup job's lease and the fence on its commits (lost in a crash, with the rest).
    job: Mutex<(LeaseTable, Fence)>,
    /// The edge policy's buckets, when the scenario has an edge limit.
    edge: Option<MemoryStore<S>>,
    /// Whether the cleanup's commit deletes without checking the keys still expired.
    blind_delete: bool,
    /// Whether the fence learns each token the lease table grants (false: only the tokens
    /// it sees written, the `fence_forgets_grants` planted bug).
    fence_learns_grants: bool,
    /// Whether writes' full-again times are recorded (for the cleanup job's checker).
    track_full: bool,
    /// The replica every write is copied to, if the scenario has one (it outlives the node).
    replica: Option<SharedReplica<S>>,
    /// Whether an acknowledged write's reply waits for its copy to reach the replica.
    wait: bool,
    shared: Arc<Shared>,
    plan: Arc<StorePlan>,
    rng: Arc<Mutex<SimRng>>,
}

impl<S: Script> StoreNode<S> {
    /// Handles one message to completion; only the reply's delivery is deferred.
    fn handle(&self, req: StoreRequest<S::State>) -> Reply<S::State> {
        let now = self.shared.now();
        let verdict = self
            .plan
            .verdict(now, &mut self.rng.lock().expect("store rng"));
        let id = req.request;
        if req.call.is_job() {
            if matches!(verdict, Verdict::Error | Verdict::Drop) {
                return refuse(verdict);
            }
            let (reply, copied) = self.apply_job(req.call, now);
            return deliver(self.waited(verdict, copied, now), reply);
        }
        let counter = matches!(req.call, StoreCall::Incr { .. } | StoreCall::Expire { .. });
        let (layer, key, op) = match &req.call {
            StoreCall::Get { layer, key } => (*layer, key.clone(), StoreOp::Get),
            StoreCall::Set { layer, key, .. } => (*layer, key.clone(), StoreOp::Set),
            StoreCall::Apply { layer, key, .. } | StoreCall::Incr { layer, key, .. } => {
                (*layer, key.clone(), StoreOp::Apply { allowed: false })
            }
            StoreCall::Expire { layer, key, .. } => (*layer, key.clone(), StoreOp::Set),
            _ => unreachable!("job calls are handled above"),
        };
        if matches!(verdict, Verdict::Error | Verdict::Drop) {
            let fate = if matches!(verdict, Verdict::Error) {
                StoreFate::Errored
            } else {
                StoreFate::Dropped
            };
            self.shared
                .record(|h, at| h.store(at, id, layer, &key, op, fate));
            return refuse(verdict);
        }
        let (reply, op) = self.apply(req.call, now);
        let copied = self.replicate_write(layer, &key, counter, op, reply.is_ok(), now);
        let verdict = self.waited(verdict, copied, now);
        let full_at = self.full_at(layer, &key, op, reply.is_ok(), now);
        let fate = match verdict {
            // A refusal (a full store, a bad key) applied nothing, whatever became of its reply.
            _ if reply.is_err() => StoreFate::Errored,
            Verdict::LoseReply => StoreFate::ReplyLost,
            Verdict::Delay(d) => StoreFate::Delayed(d),
            _ => StoreFate::Served,
        };
        self.shared.record(|h, at| {
            h.store(at, id, layer, &key, op, fate);
            if let Some(t) = full_at {
                h.written_full_at(&key, t);
            }
        });
        deliver(verdict, reply)
    }

    /// Copies what a served call wrote to the replica, if there is one: a plain counter's
    /// entry after `INCRBY` or `EXPIRE`, a key's entry after a write or an admitted decision.
    /// Returns when the copy arrives.
    fn replicate_write(
        &self,
        layer: Layer,
        key: &str,
        counter: bool,
        op: StoreOp,
        ok: bool,
        now: Nanos,
    ) -> Option<Nanos> {
        let replica = self.replica.as_ref()?;
        if !ok {
            return None;
        }
        let copy = if counter {
            let entry = self.counters.lock().expect("counters").entry(key);
            Copied::Counter {
                key: key.to_owned(),
                entry,
            }
        } else if matches!(op, StoreOp::Set | StoreOp::Apply { allowed: true }) {
            let k = Key::new(key).ok()?;
            Copied::Key {
                layer,
                key: key.to_owned(),
                entry: self.store_for(layer).ok()?.entry(&k),
            }
        } else {
            return None;
        };
        Some(replica.lock().expect("replica").ship(now, copy))
    }

    /// `verdict` for a reply whose write's copy reaches the replica at `copied`: held until
    /// then when writes wait for the replica.
    fn waited(&self, verdict: Verdict, copied: Option<Nanos>, now: Nanos) -> Verdict {
        let Some(arrives) = copied.filter(|_| self.wait) else {
            return verdict;
        };
        let hold = arrives.saturating_sub(now);
        match verdict {
            Verdict::Serve if hold == Nanos::ZERO => Verdict::Serve,
            Verdict::Serve => Verdict::Delay(hold),
            Verdict::Delay(d) => Verdict::Delay(d.max(hold)),
            other => other,
        }
    }

    /// When a per-key state this call wrote is full again, read off the state now stored: a
    /// token bucket's theoretical arrival time, the end of a fixed window, the end of the
    /// window after a sliding window's (when its count stops weighing); `None` for other calls.
    fn full_at(&self, layer: Layer, key: &str, op: StoreOp, ok: bool, now: Nanos) -> Option<Nanos> {
        let wrote = ok && matches!(op, StoreOp::Set | StoreOp::Apply { allowed: true });
        if !self.track_full || !wrote || layer != Layer::PerKey {
            return None;
        }
        let k = Key::new(key).ok()?;
        let state = self.store.get(&k, now).ok()??;
        Store::algorithm(&self.store).full_at(&state)
    }

    /// Applies one of the cleanup job's calls, and copies what it changed to the replica, if
    /// there is one; returns the reply and when the copy arrives.
    fn apply_job(
        &self,
        call: StoreCall<S::State>,
        now: Nanos,
    ) -> (Result<StoreReply<S::State>, WireError>, Option<Nanos>) {
        let reply = self.run_job(call, now);
        let wrote = matches!(
            reply,
            Ok(StoreReply::Granted(Some(_))
                | StoreReply::Done(true)
                | StoreReply::Fenced { accepted: true, .. })
        );
        let Some(replica) = self.replica.as_ref().filter(|_| wrote) else {
            return (reply, None);
        };
        let (leases, fence) = self.job.lock().expect("store job state").clone();
        let copy = Copied::Job { leases, fence };
        let arrives = replica.lock().expect("replica").ship(now, copy);
        (reply, Some(arrives))
    }

    /// Runs one of the cleanup job's calls; the lease table and the fence record what they
    /// did.
    fn run_job(
        &self,
        call: StoreCall<S::State>,
        now: Nanos,
    ) -> Result<StoreReply<S::State>, WireError> {
        let mut job = self.job.lock().expect("store job state");
        let (leases, fence) = &mut *job;
        let lease = |h: &mut History, owner: String, token: u64, ttl: Nanos, kind: LeaseKind| {
            h.lease(LeaseRecord {
                seq: 0,
                at: now,
                owner,
                token,
                ttl,
                kind,
            })
        };
        Ok(match call {
            StoreCall::Acquire { owner, ttl } => {
                let token = leases.acquire(JOB_LEASE, &owner, ttl, now);
                if let Some(t) = token {
                    // The fence lives beside the lease table: it learns each grant.
                    if self.fence_learns_grants {
                        fence.learn(t);
                    }
                    self.shared
                        .record(|h, _| lease(h, owner, t, ttl, LeaseKind::Grant));
                }
                StoreReply::Granted(token)
            }
            StoreCall::Renew { owner, token, ttl } => {
                let done = leases.renew(JOB_LEASE, &owner, token, ttl, now);
                if done {
                    self.shared
                        .record(|h, _| lease(h, owner, token, ttl, LeaseKind::Renewal));
                }
                StoreReply::Done(done)
            }
            StoreCall::Release { owner, token } => {
                let done = leases.release(JOB_LEASE, &owner, token, now);
                if done {
                    self.shared
                        .record(|h, _| lease(h, owner, token, Nanos::ZERO, LeaseKind::Release));
                }
                StoreReply::Done(done)
            }
            StoreCall::ScanExpired { owner, limit } => {
                let keys: Vec<String> = self
                    .store
                    .expired_keys(now, limit as usize)
                    .into_iter()
                    .map(|k| k.as_str().to_owned())
                    .collect();
                self.shared.record(|h, _| {
                    h.scan(ScanRecord {
                        seq: 0,
                        at: now,
                        owner,
                        keys: keys.clone(),
                    })
                });
                StoreReply::Keys(keys)
            }
            StoreCall::Cleanup { owner, token, keys } => {
                let accepted = fence.admit(token) == FenceVerdict::Accepted;
                let mut removed = Vec::new();
                if accepted {
                    for k in keys.iter().filter_map(|k| Key::new(k).ok()) {
                        let gone = if self.blind_delete {
                            self.store.remove(&k)
                        } else {
                            self.store.remove_expired(&k, now)
                        };
                        if gone {
                            removed.push(k.as_str().to_owned());
                        }
                    }
                }
                if let Some(replica) = &self.replica {
                    let mut replica = replica.lock().expect("replica");
                    for key in &removed {
                        let copy = Copied::Key {
                            layer: Layer::PerKey,
                            key: key.clone(),
                            entry: None,
                        };
                        replica.ship(now, copy);
                    }
                }
                self.shared.record(|h, _| {
                    h.commit(CommitRecord {
                        seq: 0,
                        at: now,
                        owner,
                        token,
                        accepted,
                        removed,
                    })
                });
                StoreReply::Fenced {
                    accepted,
                    highest: fence.highest(),
                }
            }
            StoreCall::Get { .. }
            | StoreCall::Set { .. }
            | StoreCall::Apply { .. }
            | StoreCall::Incr { .. }
            | StoreCall::Expire { .. } => {
                unreachable!("request calls are handled by `apply`")
            }
        })
    }

    /// The store of `layer`; a call to a layer the scenario does not have is refused.
    fn store_for(&self, layer: Layer) -> Result<&MemoryStore<S>, WireError> {
        match layer {
            Layer::PerKey => Ok(&self.store),
            Layer::Edge => self.edge.as_ref().ok_or(WireError::Unavailable),
        }
    }

    fn apply(
        &self,
        req: StoreCall<S::State>,
        now: Nanos,
    ) -> (Result<StoreReply<S::State>, WireError>, StoreOp) {
        let key_of = |k: &str| Key::new(k).map_err(|_| WireError::BadKey);
        let store_err = |e: StoreError| match e {
            StoreError::Full => WireError::Full,
            _ => WireError::Unavailable,
        };
        match req {
            StoreCall::Get { layer, key } => {
                let r = key_of(&key)
                    .and_then(|k| self.store_for(layer)?.get(&k, now).map_err(store_err));
                let reply = r.map(|state| StoreReply::Read {
                    state,
                    store_time: now,
                });
                (reply, StoreOp::Get)
            }
            StoreCall::Set {
                layer,
                key,
                state,
                ttl,
            } => {
                let r = key_of(&key).and_then(|k| {
                    self.store_for(layer)?
                        .set(&k, state, ttl, now)
                        .map_err(store_err)
                });
                (r.map(|()| StoreReply::Written), StoreOp::Set)
            }
            StoreCall::Apply {
                layer,
                key,
                now: at,
                cost,
            } => {
                let r = key_of(&key).and_then(|k| {
                    self.store_for(layer)?
                        .apply(&k, at.unwrap_or(now), cost)
                        .map_err(|e| match e {
                            LimitError::Cost(c) => WireError::Cost {
                                cost: c.cost,
                                limit: c.limit,
                            },
                            LimitError::Store(s) => store_err(s),
                            // One key per call: a key cannot repeat.
                            LimitError::RepeatedKey => store_err(StoreError::Corrupt),
                        })
                });
                let allowed = r.as_ref().is_ok_and(|d| d.allowed);
                let reply = r.map(|decision| StoreReply::Applied {
                    decision,
                    store_time: now,
                });
                (reply, StoreOp::Apply { allowed })
            }
            StoreCall::Incr { layer, key, by } => {
                let r = key_of(&key).and_then(|_| self.store_for(layer)).map(|_| {
                    let count = self.counters.lock().expect("counters").incr(&key, by, now);
                    StoreReply::Counted {
                        count,
                        store_time: now,
                    }
                });
                let allowed = matches!(r, Ok(StoreReply::Counted { count, .. })
                    if count <= Store::algorithm(&self.store).quota().limit);
                (r, StoreOp::Apply { allowed })
            }
            StoreCall::Expire { layer, key, ttl } => {
                let r = key_of(&key).and_then(|_| self.store_for(layer)).map(|_| {
                    self.counters
                        .lock()
                        .expect("counters")
                        .expire(&key, ttl, now);
                    StoreReply::Written
                });
                (r, StoreOp::Set)
            }
            _ => unreachable!("job calls are handled by `apply_job`"),
        }
    }
}

/// One layer's store: `max_keys` live keys at most, hashed with keys fixed by the run's seed.
fn sim_store<S: Script>(policy: S, max_keys: usize, seed: u64) -> MemoryStore<S> {
    MemoryStore::with_backend(policy, ratelab_store::memory::DEFAULT_SHARDS, max_keys)
        .with_seed(HashSeed(seed, !seed))
}

/// The reply to a message the store refused (error) or dropped.
fn refuse<S>(verdict: Verdict) -> Reply<S> {
    match verdict {
        Verdict::Error => Fate::Now(Err(WireError::Unavailable)),
        _ => Fate::Never,
    }
}

/// Delivers `reply` as `verdict` says: now, late, or never.
fn deliver<S>(verdict: Verdict, reply: Result<StoreReply<S>, WireError>) -> Reply<S> {
    match verdict {
        Verdict::LoseReply => Fate::Never,
        Verdict::Delay(d) => Fate::After(Duration::from(d), reply),
        _ => Fate::Now(reply),
    }
}

/// The cleanup job's lease name.
const JOB_LEASE: &str = "cleanup";

/// A gateway's link to the store node.
type StoreLink<S> = Link<StoreRequest<S>, Result<StoreReply<S>, WireError>>;

/// The [`StoreClient`] over the store node's messages, for one client request.
#[derive(Clone)]
struct RpcStore<S: Script> {
    link: Arc<StoreLink<S::State>>,
    /// A bound on each call, for callers that set none (the cleanup job); the gateway
    /// pipeline bounds its calls with the request's deadline.
    timeout: Option<Duration>,
    /// The layer whose store and policy this client serves.
    layer: Layer,
    algorithm: S,
    /// The client request this client's calls serve.
    request: u64,
    /// The gateway's planted bug, if any.
    planted: Option<PlantedBug>,
    /// The per-attempt timeout after which `retry_on_timeout` sends its call again.
    attempt: Duration,
}

/// A store call in flight.
type Call<'a, S> = Pin<Box<dyn Future<Output = Result<StoreReply<S>, StoreError>> + Send + 'a>>;

impl<S: Script> RpcStore<S> {
    /// Makes one call. Boxed, so the gateway pipeline's future holds a pointer to it, not
    /// the call's own state (a message send and a wait for its reply, often nested twice).
    fn call(&self, call: StoreCall<S::State>) -> Call<'_, S::State> {
        Box::pin(self.call_unboxed(call))
    }

    async fn call_unboxed(
        &self,
        call: StoreCall<S::State>,
    ) -> Result<StoreReply<S::State>, StoreError> {
        let req = StoreRequest {
            request: self.request,
            call,
        };
        let sent = self.link.call(req);
        let reply = match self.timeout {
            Some(t) => dilation::timeout(t, sent)
                .await
                .ok_or(StoreError::Timeout)?,
            None => sent.await,
        };
        match reply {
            Ok(Ok(reply)) => Ok(reply),
            Ok(Err(WireError::Full)) => Err(StoreError::Full),
            Ok(Err(_)) | Err(Lost::Unsent) => Err(StoreError::Unavailable),
        }
    }

    /// A decision call as the `retry_on_timeout` gateway makes it: one more attempt after
    /// `attempt`, while the first may still be applied.
    async fn call_retrying(
        &self,
        call: StoreCall<S::State>,
    ) -> Result<StoreReply<S::State>, StoreError> {
        match dilation::timeout(self.attempt, self.call(call.clone())).await {
            Some(reply) => reply,
            None => self.call(call).await,
        }
    }

    /// A fixed window as the `incr_then_expire` gateway decides it: `INCRBY`, then, when the
    /// count shows the window's first request, `EXPIRE` in a second call.
    async fn incr_then_expire(&self, key: String, cost: u64) -> Result<Applied, LimitError> {
        let Some(w) = self.algorithm.fixed_window() else {
            return Err(StoreError::Unavailable.into());
        };
        let (limit, window) = (w.0.limit(), w.0.window());
        if cost > limit {
            return Err(LimitError::Cost(CostError { cost, limit }));
        }
        let layer = self.layer;
        let incr = StoreCall::Incr {
            layer,
            key: key.clone(),
            by: cost,
        };
        let StoreReply::Counted { count, store_time } = self.call(incr).await? else {
            return Err(StoreError::Unavailable.into());
        };
        if count == cost {
            let expire = StoreCall::Expire {
                layer,
                key,
                ttl: window,
            };
            self.call(expire).await?;
        }
        Ok(Applied {
            decision: counted_decision(count, limit, window),
            store_time,
        })
    }

    /// A lease renewal or release: whether the store did it.
    async fn done(&self, call: StoreCall<S::State>) -> Result<bool, StoreError> {
        match self.call(call).await? {
            StoreReply::Done(done) => Ok(done),
            _ => Err(StoreError::Unavailable),
        }
    }
}

impl<S: Script> StoreClient for RpcStore<S> {
    type Algorithm = S;

    fn algorithm(&self) -> &S {
        &self.algorithm
    }

    fn traced(&self, request: u64) -> std::borrow::Cow<'_, Self> {
        std::borrow::Cow::Owned(RpcStore {
            request,
            ..self.clone()
        })
    }

    fn get(&self, key: &Key) -> impl Future<Output = Result<Read<S::State>, StoreError>> + Send {
        let req = StoreCall::Get {
            layer: self.layer,
            key: key.as_str().to_owned(),
        };
        async move {
            match self.call(req).await? {
                StoreReply::Read { state, store_time } => Ok(Read { state, store_time }),
                _ => Err(StoreError::Unavailable),
            }
        }
    }

    fn set(
        &self,
        key: &Key,
        state: S::State,
        ttl: Nanos,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let req = StoreCall::Set {
            layer: self.layer,
            key: key.as_str().to_owned(),
            state,
            ttl,
        };
        async move {
            match self.call(req).await? {
                StoreReply::Written => Ok(()),
                _ => Err(StoreError::Unavailable),
            }
        }
    }

    fn apply(
        &self,
        key: &Key,
        now: Option<Nanos>,
        cost: u64,
    ) -> impl Future<Output = Result<Applied, LimitError>> + Send {
        let req = StoreCall::Apply {
            layer: self.layer,
            key: key.as_str().to_owned(),
            now,
            cost,
        };
        let planted = self.planted.filter(|_| self.layer == Layer::PerKey);
        async move {
            let reply = match planted {
                Some(PlantedBug::IncrThenExpire) => {
                    return self.incr_then_expire(key.as_str().to_owned(), cost).await;
                }
                Some(PlantedBug::RetryOnTimeout) => self.call_retrying(req).await?,
                _ => self.call(req).await?,
            };
            match reply {
                StoreReply::Applied {
                    decision,
                    store_time,
                } => Ok(Applied {
                    decision,
                    store_time,
                }),
                _ => Err(StoreError::Unavailable.into()),
            }
        }
    }
}

impl<S: Script> LeaseClient for RpcStore<S> {
    fn acquire(
        &self,
        _name: &str,
        owner: &str,
        ttl: Nanos,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>> + Send {
        let call = StoreCall::Acquire {
            owner: owner.to_owned(),
            ttl,
        };
        async move {
            match self.call(call).await? {
                StoreReply::Granted(t) => Ok(t),
                _ => Err(StoreError::Unavailable),
            }
        }
    }

    fn renew(
        &self,
        _name: &str,
        owner: &str,
        token: u64,
        ttl: Nanos,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let call = StoreCall::Renew {
            owner: owner.to_owned(),
            token,
            ttl,
        };
        async move { self.done(call).await }
    }

    fn release(
        &self,
        _name: &str,
        owner: &str,
        token: u64,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send {
        let call = StoreCall::Release {
            owner: owner.to_owned(),
            token,
        };
        async move { self.done(call).await }
    }
}

/// The idle-bucket cleanup over RPC: scan for expired buckets, work on them for `work`, commit
/// their deletion with the fencing token.
struct Cleanup<S: Script> {
    rpc: RpcStore<S>,
    owner: String,
    work: Duration,
    batch: u32,
}

impl<S: Script> FencedJob for Cleanup<S> {
    type Plan = Vec<String>;

    async fn plan(&self) -> Result<Vec<String>, StoreError> {
        let keys = match self
            .rpc
            .call(StoreCall::ScanExpired {
                owner: self.owner.clone(),
                limit: self.batch,
            })
            .await?
        {
            StoreReply::Keys(keys) => keys,
            _ => return Err(StoreError::Unavailable),
        };
        if !self.work.is_zero() {
            sleep(self.work).await;
        }
        Ok(keys)
    }

    async fn commit(&self, token: u64, keys: Vec<String>) -> Result<FenceVerdict, StoreError> {
        let call = StoreCall::Cleanup {
            owner: self.owner.clone(),
            token,
            keys,
        };
        match self.rpc.call(call).await? {
            StoreReply::Fenced { accepted: true, .. } => Ok(FenceVerdict::Accepted),
            StoreReply::Fenced { highest, .. } => Ok(FenceVerdict::Stale { highest }),
            _ => Err(StoreError::Unavailable),
        }
    }
}

/// Gateway `g`'s side of the cleanup job, from its staggered start to the end of the run.
async fn job_main<S: Script>(cluster: Arc<Cluster<S>>, g: usize, rpc: RpcStore<S>) {
    let sc = &cluster.sc;
    let Some(spec) = sc.spec.cleanup_job else {
        return;
    };
    let n = cluster.gateways.len() as u64;
    let period = Duration::from_millis(spec.period_ms.get());
    let stagger = period * g as u32 / n as u32;
    cluster.shared.sleep_until(stagger).await;
    let owner = format!("gateway-{g}");
    let job = Cleanup {
        rpc: rpc.clone(),
        owner: owner.clone(),
        work: Duration::from_millis(spec.work_ms.get()),
        batch: spec.batch.get() as u32,
    };
    let config = SingletonConfig {
        name: JOB_LEASE.into(),
        owner,
        lease_ttl: Duration::from_millis(spec.lease_ms.get()),
        period,
    };
    let env = cluster.gateways[g].gateway.env().clone();
    let end = ms(sc.spec.duration_ms.get());
    let shared = cluster.shared.clone();
    Singleton::new(config, rpc, job, env)
        .run(|_| shared.now() < end)
        .await;
}

/// A gateway's view of time: true time, shifted by `offset_ns` and scaled by `1 + drift_ppm/10⁶`.
#[derive(Clone, Copy, Debug, Default)]
struct Clock {
    offset_ns: i64,
    drift_ppm: i64,
}

impl Clock {
    fn read(self, truth: Nanos) -> Nanos {
        let t = i128::from(truth.as_u64());
        let skewed = t + t * i128::from(self.drift_ppm) / 1_000_000 + i128::from(self.offset_ns);
        Nanos(u64::try_from(skewed.max(0)).unwrap_or(u64::MAX))
    }
}

/// Unix time of the simulation's time zero on every gateway's wall clock (request ids):
/// 2026-01-01T00:00:00Z. A gateway's clock fault shifts its wall clock too.
pub const SIM_EPOCH_MS: u64 = 1_767_225_600_000;

/// A gateway node's view of time: its own (skewed) clock; its node's timeout queue.
#[derive(Clone)]
struct SimEnv {
    shared: Arc<Shared>,
    clock: Clock,
    timeouts: Arc<Timeouts>,
}

impl Env for SimEnv {
    fn now(&self) -> Nanos {
        self.clock.read(self.shared.now())
    }

    fn unix_now(&self) -> Nanos {
        Nanos::from_millis(SIM_EPOCH_MS).saturating_add(self.now())
    }

    /// madsim's own time, which its timeouts run on (the skewed clock is for decisions).
    fn monotonic(&self) -> Nanos {
        self.shared.now()
    }

    async fn timeout<F: Future + Send>(&self, after: Duration, fut: F) -> Option<F::Output>
    where
        F::Output: Send,
    {
        self.timeouts.timeout(dilate(after), fut).await
    }
}

struct SimGateway<S: Script> {
    node: NodeHandle,
    gateway: Gateway<RpcStore<S>, SimEnv>,
}

struct Cluster<S: Script> {
    sc: Arc<Scenario>,
    shared: Arc<Shared>,
    replica: Option<SharedReplica<S>>,
    gateways: Vec<Arc<SimGateway<S>>>,
    guard: Option<ratelab_gateway::bloom::KeyGuard>,
}

/// The address client `i` sends from.
fn client_ip(i: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a20_0000 + i))
}

/// What the recorder keeps of a gateway's answer: the binding layer's outcome, and each
/// layer's own.
fn to_history(a: &GatewayAnswer) -> (Answer, Layers) {
    let (edge, per_key) = (a.outcome(PER_IP), a.outcome(PER_KEY));
    let layers = Layers {
        edge: edge.map(layer_answer),
        per_key: per_key.map(layer_answer),
    };
    if a.bypassed {
        return (Answer::Bypassed, layers);
    }
    if matches!(a.verdict, ratelab_gateway::Verdict::Rejected(_)) {
        return (Answer::Rejected, layers);
    }
    let edge_denied = matches!(
        edge,
        Some(LayerOutcome::Decided { decision, .. }) if !decision.allowed
    ) || edge == Some(LayerOutcome::StoreFull);
    let binding = if edge_denied { edge } else { per_key.or(edge) };
    let answer = binding.map_or(Answer::Error(ErrorKind::Unavailable), layer_answer);
    (answer, layers)
}

/// One layer's outcome, as the recorder keeps it.
fn layer_answer(o: LayerOutcome) -> Answer {
    match o {
        LayerOutcome::Decided {
            decision,
            decided_at,
        } if decision.allowed => Answer::Allowed {
            decided_at,
            remaining: decision.remaining,
        },
        LayerOutcome::Decided {
            decision,
            decided_at,
        } => Answer::Denied {
            decided_at,
            retry_after: decision.retry_after.unwrap_or(Nanos::ZERO),
        },
        LayerOutcome::FailedOpen(r) => Answer::FailedOpen(r),
        LayerOutcome::FailedClosed(r) => Answer::Error(match r {
            FailReason::Error => ErrorKind::Unavailable,
            FailReason::Timeout => ErrorKind::Timeout,
            FailReason::BreakerOpen => ErrorKind::BreakerOpen,
        }),
        LayerOutcome::StoreFull => Answer::Full,
        LayerOutcome::Cached(d) => Answer::Cached {
            retry_after: d.retry_after.unwrap_or(Nanos::ZERO),
        },
    }
}

/// Reads `name`'s `r` and `t` from a RateLimit field value (`"per-key";r=0;t=1, …`).
fn ratelimit_item(value: &str, name: &str) -> Option<(u64, u64)> {
    let quoted = format!("\"{name}\"");
    let item = value.split(", ").find(|i| i.starts_with(&quoted))?;
    let param = |k: &str| {
        item.split(';')
            .find_map(|p| p.strip_prefix(k)?.strip_prefix('=')?.parse::<u64>().ok())
    };
    Some((param("r")?, param("t")?))
}

/// One gateway request: run the gateway pipeline, record and return the answer.
async fn serve<S: Script>(
    cluster: Arc<Cluster<S>>,
    g: usize,
    id: u64,
    client: u32,
    key: String,
    cost: u64,
) -> GatewayAnswer {
    let gw = &cluster.gateways[g];
    let req = GatewayRequest {
        peer: client_ip(client),
        forwarding: Forwarding::default(),
        api_key: Some(key.as_bytes()),
        route: "/",
        method: "GET",
        headers: &NoHeaders,
        cost,
        trace: id,
    };
    let guard = cluster
        .guard
        .as_ref()
        .map(|g| g as &dyn ratelab_gateway::Guard);
    // Boxed: the pipeline's future is kilobytes, and a spawned task would copy it.
    let answer = Box::pin(gw.gateway.check(req, guard)).await;
    let (recorded, layers) = to_history(&answer);
    cluster
        .shared
        .record(|h, at| h.answer(at, id, recorded, layers));
    answer
}

/// A client's arrival times, in ns from the start of the run.
struct Arrivals {
    pattern: Pattern,
    start: u64,
    stop: u64,
    k: u64,
    phase: u64,
    rate: u64,
    next_poisson: u64,
    burst: Vec<u64>,
}

impl Arrivals {
    fn new(c: &ClientSpec, duration_ms: u64, rng: &mut SimRng) -> Arrivals {
        let a = &c.arrival;
        let start = c.start_ms.get() * 1_000_000;
        let stop = c.stop_ms.map_or(duration_ms, |v| v.get()) * 1_000_000;
        let rate = a.rate_per_sec.map_or(1, |r| r.get());
        let interval = 1_000_000_000 / rate;
        let mut burst = Vec::new();
        match a.pattern {
            Pattern::Burst => {
                let n = a.requests.map_or(0, |v| v.get());
                let at = a.at_ms.map_or(0, |v| v.get()) * 1_000_000;
                let spread = a.spread_ms.map_or(0, |v| v.get()) * 1_000_000;
                burst.extend((0..n).map(|k| at + spread * k / n));
            }
            Pattern::BoundaryBursts => {
                let n = a.requests.map_or(0, |v| v.get());
                let every = a.every_ms.map_or(1, |v| v.get()) * 1_000_000;
                let before = a.before_ms.map_or(0, |v| v.get()) * 1_000_000;
                let after = a.after_ms.map_or(0, |v| v.get()) * 1_000_000;
                let mut b = (start / every + 1) * every;
                while b < stop {
                    burst.extend((0..n).map(|k| b - before + before * k / n));
                    burst.extend((0..n).map(|k| b + after * k / n));
                    b += every;
                }
                burst.retain(|&t| t >= start && t < stop);
            }
            Pattern::Times => {
                burst.extend(
                    a.times_us
                        .iter()
                        .flatten()
                        .map(|&us| us.saturating_mul(1_000)),
                );
                burst.sort_unstable();
            }
            _ => {}
        }
        burst.reverse();
        let phase = rng.below(interval.max(1));
        let next_poisson = start + rng.exponential(interval as f64);
        Arrivals {
            pattern: a.pattern,
            start,
            stop,
            k: 0,
            phase,
            rate,
            next_poisson,
            burst,
        }
    }

    fn next(&mut self, rng: &mut SimRng) -> Option<u64> {
        let t = match self.pattern {
            Pattern::Constant => {
                let t = self.start
                    + self.phase
                    + (u128::from(self.k) * 1_000_000_000 / u128::from(self.rate)) as u64;
                self.k += 1;
                t
            }
            Pattern::Poisson => {
                let t = self.next_poisson;
                self.next_poisson += rng.exponential(1e9 / self.rate as f64);
                t
            }
            Pattern::Burst | Pattern::BoundaryBursts | Pattern::Times => self.burst.pop()?,
        };
        (t < self.stop).then_some(t)
    }
}

/// Sends one client's requests.
async fn client_main<S: Script>(cluster: Arc<Cluster<S>>, group: usize, client: u32, seed: u64) {
    let spec = &cluster.sc.spec;
    let c = &spec.clients[group];
    let mut rng = SimRng::new(seed, stream::CLIENTS + u64::from(client));
    let mut arrivals = Arrivals::new(c, spec.duration_ms.get(), &mut rng);
    let n = cluster.gateways.len() as u64;
    let mut next_gateway = u64::from(client) % n;
    let mut not_before = 0u64;
    while let Some(t) = arrivals.next(&mut rng) {
        if t < not_before {
            continue;
        }
        // A sleep takes at least `dilation::SLEEP_FLOOR`: sleep only when the arrival is
        // still ahead, so a late client catches up instead of drifting.
        if Nanos(t) > cluster.shared.now() {
            cluster.shared.sleep_until(Duration::from_nanos(t)).await;
        }
        // A client that waited for answers can fall behind its arrivals: it still stops
        // sending at its stop time, so every request is sent while the run is on.
        if cluster.shared.now().as_u64() >= arrivals.stop {
            break;
        }
        let key = match (&c.key, &c.keys) {
            (Some(k), _) => k.clone(),
            (None, Some(ks)) => format!("{}:{}", ks.prefix, rng.below(ks.count.get())),
            (None, None) => unreachable!("validated: key or keys"),
        };
        let g = match c.gateway {
            GatewayChoice::RoundRobin => {
                let g = next_gateway;
                next_gateway = (next_gateway + 1) % n;
                g
            }
            GatewayChoice::Random => rng.below(n),
            GatewayChoice::Fixed(g) => u64::from(g),
        } as usize;
        let cost = c.cost.get();
        let mut id = 0;
        cluster.shared.record(|h, at| {
            let peer = client_ip(client);
            id = h.send(at, client, group as u32, key.clone(), peer, g as u32, cost);
        });
        let answer =
            cluster.gateways[g]
                .node
                .spawn(serve(cluster.clone(), g, id, client, key, cost));
        if !(c.honour_retry_after || c.self_throttle) {
            continue;
        }
        let Ok(answer) = answer.await else { continue };
        let now = cluster.shared.now().as_u64();
        let header = |name: &str| {
            answer
                .headers
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.as_str())
        };
        if answer.status == 429
            && let Some(secs) = header("retry-after").and_then(|v| v.parse::<u64>().ok())
        {
            not_before = now + secs * 1_000_000_000;
        }
        if c.self_throttle
            && let Some((0, t)) = header("ratelimit").and_then(|v| ratelimit_item(v, "per-key"))
        {
            not_before = not_before.max(now + t * 1_000_000_000);
        }
    }
}

/// Injects one node- or network-level fault, and marks store-side fault windows in the trace.
async fn fault_main<S: Script>(cluster: Arc<Cluster<S>>, f: FaultSpec, store: NodeHandle) {
    let shared = &cluster.shared;
    let handle = Handle::current();
    let net = NetSim::current();
    let at = Duration::from_millis(f.at_ms.map_or(0, |v| v.get()));
    let until = Duration::from_millis(f.until_ms.map_or(0, |v| v.get()));
    let kind = f.kind.name();
    let gateway_ids = |gs: &[u32]| -> Vec<_> {
        gs.iter()
            .map(|&g| cluster.gateways[g as usize].node.id())
            .collect()
    };
    let node_id = |n: NodeName| match n {
        NodeName::Store => store.id(),
        NodeName::Gateway(g) => cluster.gateways[g as usize].node.id(),
    };
    shared.sleep_until(at).await;
    shared.record(|h, t| h.fault(t, format!("{kind} begins: {f:?}")));
    match f.kind {
        FaultKind::StoreCrash => {
            handle.kill(store.id());
            // Every copy goes down with the primary.
            if let Some(r) = &cluster.replica {
                r.lock().expect("replica").clear();
            }
            let down = Duration::from_millis(f.restart_after_ms.map_or(0, |v| v.get()));
            sleep(down).await;
            handle.restart(store.id());
        }
        FaultKind::StoreFailover => {
            let kill = shared.now();
            handle.kill(store.id());
            let lost = cluster
                .replica
                .as_ref()
                .map_or_else(Vec::new, |r| r.lock().expect("replica").promote(kill));
            shared.record(|h, t| {
                h.lost_to_failover += lost.len() as u64;
                // The cleanup checker judges deletions by the bucket writes the surviving
                // store holds.
                for (at, copy) in &lost {
                    if let Copied::Key {
                        layer: Layer::PerKey,
                        key,
                        ..
                    } = copy
                    {
                        h.retract_write(key, *at);
                    }
                }
                let n = lost.len();
                h.fault(t, format!("{kind}: {n} writes not on the replica are lost"));
            });
            let down = Duration::from_millis(f.promote_after_ms.map_or(0, |v| v.get()));
            sleep(down).await;
            // The restart starts from the replica's copies: the promotion.
            handle.restart(store.id());
        }
        FaultKind::Partition => {
            let ids = gateway_ids(f.gateways.as_deref().unwrap_or_default());
            for &g in &ids {
                net.clog_link(g, store.id());
                net.clog_link(store.id(), g);
            }
            shared.sleep_until(until).await;
            for &g in &ids {
                net.unclog_link(g, store.id());
                net.unclog_link(store.id(), g);
            }
        }
        FaultKind::PacketLoss => {
            let rate = f.rate.map_or(1.0, |r| r.get());
            net.update_config(|c| c.packet_loss_rate = rate);
            shared.sleep_until(until).await;
            net.update_config(|c| c.packet_loss_rate = 0.0);
        }
        FaultKind::Pause => {
            let id = node_id(f.node.unwrap_or(NodeName::Store));
            handle.pause(id);
            shared.sleep_until(until).await;
            handle.resume(id);
        }
        FaultKind::KillSwitch => {
            let targets: Vec<usize> = match &f.gateways {
                Some(gs) => gs.iter().map(|&g| g as usize).collect(),
                None => (0..cluster.gateways.len()).collect(),
            };
            for &g in &targets {
                cluster.gateways[g].gateway.set_kill_switch(true);
            }
            shared.sleep_until(until).await;
            for &g in &targets {
                cluster.gateways[g].gateway.set_kill_switch(false);
            }
        }
        FaultKind::Clock => return,
        FaultKind::StoreErrors
        | FaultKind::StoreTimeouts
        | FaultKind::LostReplies
        | FaultKind::StoreLatency => shared.sleep_until(until).await,
    }
    shared.record(|h, t| h.fault(t, format!("{kind} ends")));
}

/// The madsim network configuration for a scenario.
pub(crate) fn net_config(sc: &Scenario) -> madsim::Config {
    let mut cfg = madsim::Config::default();
    let lat = sc.spec.network.latency;
    let lo = dilation::link_latency(Duration::from_micros(lat.min_us.get()));
    let hi = dilation::link_latency(Duration::from_micros(lat.max_us.get()));
    // madsim draws from a half-open range: make it non-empty and include the maximum.
    cfg.net.send_latency = lo..hi + Duration::from_nanos(1);
    cfg
}

/// When the last fault of `sc` ends, in ms (clock faults never end and are not counted).
pub fn faults_end_ms(sc: &Scenario) -> u64 {
    sc.spec
        .faults
        .iter()
        .filter_map(|f| f.window_ms().map(|(_, until)| until))
        .max()
        .unwrap_or(0)
}

/// What the cluster needs of the algorithm its store runs, beyond [`Algorithm`]: the
/// builtin policies' script ([`StorePolicy`]) and a user's limiter
/// ([`crate::limiter::Plugged`]) both provide it.
pub(crate) trait Script: Algorithm + Clone + Send + Sync + 'static {
    /// When a state this algorithm wrote is full again, for the cleanup job's checker.
    fn full_at(&self, state: &Self::State) -> Option<Nanos>;

    /// The fixed window the `incr_then_expire` planted bug counts over, if this is one.
    fn fixed_window(&self) -> Option<FixedWindow>;
}

impl Script for StorePolicy {
    /// Read off the state: a token bucket's theoretical arrival time, the end of a fixed
    /// window, the end of the window after a sliding window's (when its count stops weighing).
    fn full_at(&self, state: &PolicyState) -> Option<Nanos> {
        let ns = match (self.policy, *state) {
            (Policy::TokenBucket(b), PolicyState::TokenBucket(s)) => {
                s.tat_scaled / u128::from(b.refill_amount().max(1))
            }
            (Policy::FixedWindow(w), PolicyState::FixedWindow(s)) => {
                let len = u128::from(w.0.window().as_u64());
                (u128::from(s.window) + 1) * len
            }
            (Policy::SlidingWindow(w), PolicyState::SlidingWindow(s)) => {
                let len = u128::from(w.0.window().as_u64());
                (u128::from(s.window) + 2) * len
            }
            _ => return None,
        };
        Some(Nanos(u64::try_from(ns).unwrap_or(u64::MAX)))
    }

    fn fixed_window(&self) -> Option<FixedWindow> {
        match self.policy {
            Policy::FixedWindow(w) => Some(w),
            _ => None,
        }
    }
}

/// The algorithms one run's cluster uses: the per-key layer's as the store's script runs it
/// (with a planted script bug, if any) and as the gateways run it on the naive path, and the
/// edge layer's.
#[derive(Clone, Debug)]
pub(crate) struct Plug<S> {
    /// The per-key algorithm in the store node.
    pub(crate) script: S,
    /// The per-key algorithm in the gateways.
    pub(crate) gateway: S,
    /// The edge layer's algorithm, when the scenario has an edge limit.
    pub(crate) edge: Option<S>,
}

impl Plug<StorePolicy> {
    /// The builtin policy of `sc`, with its script's planted bug.
    pub(crate) fn builtin(sc: &Scenario) -> Plug<StorePolicy> {
        let bug = sc
            .spec
            .planted_bug
            .filter(|b| matches!(b, PlantedBug::ShortTtl | PlantedBug::RefillRounding));
        Plug {
            script: StorePolicy {
                policy: sc.policy,
                bug,
            },
            gateway: StorePolicy::correct(sc.policy),
            edge: edge_bucket(sc).map(|b| StorePolicy::correct(Policy::TokenBucket(b))),
        }
    }
}

/// The scenario's edge limit, as a token bucket.
pub(crate) fn edge_bucket(sc: &Scenario) -> Option<ratelab_core::TokenBucket> {
    sc.spec.gateway.edge.map(|e| {
        ratelab_core::TokenBucket::per_second(e.capacity.get(), e.refill_per_sec.get())
            .expect("validated edge policy")
    })
}

/// Runs one seed of `sc` with its builtin policy inside the current madsim runtime; returns
/// the history and each gateway's counters.
pub(crate) async fn simulate(
    sc: Arc<Scenario>,
    seed: u64,
    keep_events: bool,
) -> (History, Vec<StatsSnapshot>) {
    let plug = Plug::builtin(&sc);
    simulate_with(sc, plug, seed, keep_events).await
}

/// Runs one seed of `sc` with `plug`'s algorithms inside the current madsim runtime.
pub(crate) async fn simulate_with<S: Script>(
    sc: Arc<Scenario>,
    plug: Plug<S>,
    seed: u64,
    keep_events: bool,
) -> (History, Vec<StatsSnapshot>) {
    let handle = Handle::current();
    // Time zero is after a short setup allowance, in which nodes start and bind; events during
    // setup are stamped 0.
    let shared = Arc::new(Shared {
        t0: Instant::now() + SETUP,
        history: Mutex::new(if sc.spec.cleanup_job.is_some() {
            History::new(keep_events).keeping_writes()
        } else {
            History::new(keep_events)
        }),
    });
    let replica: Option<SharedReplica<S>> = sc.spec.store.replica.map(|r| {
        let lag = (r.lag.min_us.get() * 1_000, r.lag.max_us.get() * 1_000);
        Arc::new(Mutex::new(Replica::new(
            lag,
            SimRng::new(seed, stream::REPLICA),
        )))
    });
    let store_node = start_store_node(&handle, &sc, seed, (&shared, &replica), &plug);
    let mut gateways = Vec::new();
    let mut job_clients = Vec::new();
    for i in 0..sc.spec.gateways.get() as u32 {
        let (gateway, job_client) = start_gateway(&handle, &sc, seed, i, &shared, &plug).await;
        gateways.push(gateway);
        job_clients.push(job_client);
    }
    let guard = sc.spec.gateway.guard.as_ref().map(|g| {
        let (prefix, n) = (&g.valid_keys.prefix, g.valid_keys.count.get());
        let keys = (0..n).map(|i| format!("{prefix}:{i}"));
        ratelab_gateway::bloom::KeyGuard::new::<str>(
            keys,
            n,
            g.false_positive_rate.get(),
            u128::from(seed),
        )
        .expect("validated guard")
    });
    let cluster = Arc::new(Cluster {
        sc: sc.clone(),
        shared: shared.clone(),
        replica,
        gateways,
        guard,
    });
    shared.sleep_until(Duration::ZERO).await;

    let clients_node = handle
        .create_node()
        .name("clients")
        .ip(IpAddr::V4(Ipv4Addr::new(10, 2, 0, 1)))
        .build();
    let mut client = 0u32;
    for (g, c) in sc.spec.clients.iter().enumerate() {
        for _ in 0..c.count.get() {
            clients_node.spawn(client_main(cluster.clone(), g, client, seed));
            client += 1;
        }
    }
    for f in &sc.spec.faults {
        madsim::task::spawn(fault_main(cluster.clone(), f.clone(), store_node.clone()));
    }
    if sc.spec.cleanup_job.is_some() {
        for (g, rpc) in job_clients.into_iter().enumerate() {
            cluster.gateways[g]
                .node
                .spawn(job_main(cluster.clone(), g, rpc));
        }
    }

    let end = ms(sc.spec.duration_ms.get().max(faults_end_ms(&sc)));
    shared
        .sleep_until(Duration::from(end) + drain_time(&sc))
        .await;
    let stats = cluster
        .gateways
        .iter()
        .map(|g| g.gateway.stats().snapshot())
        .collect();
    let history = std::mem::take(&mut *shared.history.lock().expect("recorder"));
    // Every node's tasks hold the cluster, which holds the nodes: madsim does not cancel a
    // node's tasks when its runtime is dropped (madsim-rs/madsim#242), so without killing
    // the nodes each run's cluster would stay in memory for good.
    for g in &cluster.gateways {
        handle.kill(g.node.id());
    }
    handle.kill(clients_node.id());
    handle.kill(store_node.id());
    (history, stats)
}

/// How long the run goes on after the last send or fault, so that every request in flight is
/// answered: two timeouts, four one-way latencies, the largest injected delay, and a margin.
fn drain_time(sc: &Scenario) -> Duration {
    2 * Duration::from_millis(sc.spec.store.timeout_ms.get())
        + Duration::from_micros(4 * sc.spec.network.latency.max_us.get())
        + Duration::from_millis(10)
        + sc.spec
            .faults
            .iter()
            .filter_map(|f| f.extra_latency)
            .map(|l| Duration::from_micros(l.max_us.get()))
            .max()
            .unwrap_or_default()
}

/// Creates the store node: one store per layer, the lease table and fence, and the receive
/// loops. A restart runs this init again: with every store empty after a crash, from the
/// replica's copies after a failover.
fn start_store_node<S: Script>(
    handle: &Handle,
    sc: &Scenario,
    seed: u64,
    (shared, replica): (&Arc<Shared>, &Option<SharedReplica<S>>),
    plug: &Plug<S>,
) -> NodeHandle {
    let (script, edge) = (plug.script.clone(), plug.edge.clone());
    let fence_learns_grants = sc.spec.planted_bug != Some(PlantedBug::FenceForgetsGrants);
    let plan = Arc::new(StorePlan::new(&sc.spec.faults));
    let rng = Arc::new(Mutex::new(SimRng::new(seed, stream::STORE)));
    let job = sc.spec.cleanup_job;
    let fencing = job.is_none_or(|j| j.fencing);
    let blind_delete = job.is_some_and(|j| j.blind_delete);
    let track_full = job.is_some();
    let tokens = match job.map(|j| j.tokens) {
        Some(TokenSourceName::Counter) => TokenSource::Counter,
        _ => TokenSource::StoreClock,
    };
    // A store that restarts grants no lease for one lease length: its predecessor may have
    // granted one it lost.
    let grace = job.map_or(Nanos::ZERO, |j| ms(j.lease_ms.get()));
    let max_keys = sc.spec.store.max_keys.get() as usize;
    let wait = sc.spec.store.replica.is_some_and(|r| r.wait);
    let (shared, replica) = (shared.clone(), replica.clone());
    let started = Arc::new(std::sync::atomic::AtomicBool::new(false));
    handle
        .create_node()
        .name("store")
        .ip(IpAddr::V4(STORE_IP))
        .init(move || {
            // Fixed hash keys per run: the same keys land in the same shards every time.
            let hash_seed = SimRng::new(seed, stream::STORE_HASH).next_u64();
            let store = sim_store(script.clone(), max_keys, hash_seed);
            let edge = edge.clone().map(|p| sim_store(p, max_keys, hash_seed ^ 1));
            let mut counters = Counters::default();
            let fence = if fencing {
                Fence::new()
            } else {
                Fence::unchecked()
            };
            let mut job = (LeaseTable::with_tokens(tokens), fence);
            if let Some(r) = &replica {
                r.lock().expect("replica").replay(Restored {
                    per_key: &store,
                    edge: edge.as_ref(),
                    counters: &mut counters,
                    job: &mut job,
                });
            }
            let restarted = started.swap(true, std::sync::atomic::Ordering::Relaxed);
            if restarted && tokens == TokenSource::StoreClock {
                let now = shared.now();
                job.0.hold_grants_until(now.saturating_add(grace));
                // With no live holder, a grant may have been lost: every token from before
                // now is stale, so a leader that lost its lease to that grant is refused
                // even while no one holds the lease. (A live holder is the latest grantee:
                // nobody could be granted over it.)
                if job.0.holder(JOB_LEASE, now).is_none() {
                    job.1.learn(now.as_u64());
                }
            }
            let node = Arc::new(StoreNode {
                store,
                counters: Mutex::new(counters),
                job: Mutex::new(job),
                edge,
                blind_delete,
                fence_learns_grants,
                track_full,
                replica: replica.clone(),
                wait,
                shared: shared.clone(),
                plan: plan.clone(),
                rng: rng.clone(),
            });
            async move {
                let ep = Endpoint::bind(store_addr())
                    .await
                    .expect("store binds its port");
                transport::serve(ep, move |req: StoreRequest<S::State>| node.handle(req)).await;
            }
        })
        .build()
}

/// Creates gateway `i`'s node, its clock and its pipeline over RPC store clients; returns it
/// with the per-key client its cleanup job uses.
async fn start_gateway<S: Script>(
    handle: &Handle,
    sc: &Scenario,
    seed: u64,
    i: u32,
    shared: &Arc<Shared>,
    plug: &Plug<S>,
) -> (Arc<SimGateway<S>>, RpcStore<S>) {
    let node = handle
        .create_node()
        .name(format!("gateway-{i}"))
        .ip(gateway_ip(i))
        .build();
    let (link, timeouts) = node
        .spawn(async {
            let ep = Endpoint::bind("0.0.0.0:0")
                .await
                .expect("gateway binds a port");
            (Link::start(ep, store_addr()), Timeouts::start())
        })
        .await
        .expect("gateway setup task");
    let clock = sc
        .spec
        .faults
        .iter()
        .filter(|f| f.kind == FaultKind::Clock && f.gateway == Some(i))
        .fold(Clock::default(), |c, f| Clock {
            offset_ns: c.offset_ns + f.offset_ms.map_or(0, |v| v.get()) * 1_000_000,
            drift_ppm: c.drift_ppm + f.drift_ppm.map_or(0, |v| v.get()),
        });
    if clock.offset_ns != 0 || clock.drift_ppm != 0 {
        shared.record(|h, t| {
            h.fault(
                t,
                format!(
                    "clock gateway {i}: offset {} ns, drift {} ppm",
                    clock.offset_ns, clock.drift_ppm
                ),
            )
        });
    }
    let timeout = Duration::from_millis(sc.spec.store.timeout_ms.get());
    let rpc = |layer, algorithm| RpcStore {
        link: link.clone(),
        timeout: None,
        layer,
        algorithm,
        request: 0,
        planted: sc.spec.planted_bug,
        attempt: timeout / 2,
    };
    let spec = &sc.spec.gateway;
    let config = GatewayConfig {
        path: sc.path,
        time_source: sc.time_source,
        timeout,
        breaker: spec.breaker.map_or(
            // No breaker: it never opens.
            BreakerConfig {
                failures_to_open: u32::MAX,
                cooldown: Nanos::ZERO,
            },
            |b| BreakerConfig {
                failures_to_open: b.failures_to_open.get() as u32,
                cooldown: ms(b.cooldown_ms.get()),
            },
        ),
        fail_open: spec.fail_open,
        // Only clients that pace themselves read the headers: render them only for those.
        headers: sc
            .spec
            .clients
            .iter()
            .any(|c| c.honour_retry_after || c.self_throttle),
        name: format!("gateway-{i}"),
        id_seed: Some(SimRng::new(seed, stream::GATEWAY_IDS + u64::from(i)).next_u64()),
        denial_cache: sc
            .spec
            .gateway
            .denial_cache
            .map_or(0, |c| c.keys.get() as usize),
        ..GatewayConfig::default()
    };
    let env = SimEnv {
        shared: shared.clone(),
        clock,
        timeouts,
    };
    let edge = plug.edge.clone().map(|p| rpc(Layer::Edge, p));
    let per_key = rpc(Layer::PerKey, plug.gateway.clone());
    let job = RpcStore {
        timeout: Some(timeout),
        ..per_key.clone()
    };
    let gateway = Arc::new(SimGateway {
        node,
        gateway: Gateway::new(config, edge, Some(per_key), env),
    });
    (gateway, job)
}
