//! The store node: one message at a time, to completion, like Redis; store-side faults
//! decided per message; the replica's copies; the cleanup job's lease table and fence.

use super::record::Shared;
use super::script::{Plug, Script};
use super::wire::{
    JOB_LEASE, JobCall, STORE_IP, StoreCall, StoreMessage, StoreReply, WireError, store_addr,
};
use crate::faults::Verdict;
use crate::planted::{Counters, PlantedBug};
use crate::replica::{Copied, Replica, Restored};
use crate::rng::{SimRng, stream};
use crate::scenario::{FaultSpec, Scenario, TokenSourceName, ms};
use crate::transport::{self, Fate};
use madsim::net::Endpoint;
use madsim::runtime::{Handle, NodeHandle};
use ratelab_check::history::{
    CommitRecord, History, Layer, LeaseKind, LeaseRecord, ScanRecord, StoreFate, StoreOp,
};
use ratelab_core::{Algorithm, Nanos};
use ratelab_store::{
    Fence, FenceVerdict, HashSeed, Key, LeaseTable, LimitError, MemoryStore, Store, StoreError,
    TokenSource,
};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Store-side faults, evaluated per message in the scenario's order: the first that holds
/// the message decides.
pub(crate) struct StorePlan {
    pub(crate) faults: Vec<FaultSpec>,
}

impl StorePlan {
    pub(crate) fn new(faults: &[FaultSpec]) -> StorePlan {
        StorePlan {
            faults: faults.to_vec(),
        }
    }

    /// The first fault's verdict on a message at `now`, drawing from the store's `rng` (taken
    /// only when there is a fault to ask).
    pub(crate) fn verdict(&self, now: Nanos, rng: &Mutex<SimRng>) -> Verdict {
        if self.faults.is_empty() {
            return Verdict::Serve;
        }
        let mut rng = rng.lock().expect("store rng");
        self.faults
            .iter()
            .find_map(|f| f.as_kind().on_store_message(now, &mut rng))
            .unwrap_or(Verdict::Serve)
    }
}

/// What the store does with one message's reply.
pub(crate) type Reply<S> = Fate<Result<StoreReply<S>, WireError>>;

/// The store's replica, shared by every incarnation of the store node and the failover.
pub(crate) type SharedReplica<S> = Arc<Mutex<Replica<<S as Algorithm>::State>>>;

pub(crate) struct StoreNode<S: Script> {
    /// The per-key policy's buckets.
    pub(crate) store: MemoryStore<S>,
    /// Plain counters (`INCRBY`, `EXPIRE`).
    pub(crate) counters: Mutex<Counters>,
    /// The cleanup job's lease and the fence on its commits (lost in a crash, with the rest).
    pub(crate) job: Mutex<(LeaseTable, Fence)>,
    /// The edge policy's buckets, when the scenario has an edge limit.
    pub(crate) edge: Option<MemoryStore<S>>,
    /// Whether the cleanup's commit deletes without checking the keys still expired.
    pub(crate) blind_delete: bool,
    /// Whether the fence learns each token the lease table grants (false: only the tokens
    /// it sees written, the `fence_forgets_grants` planted bug).
    pub(crate) fence_learns_grants: bool,
    /// The replica every write is copied to, if the scenario has one (it outlives the node).
    pub(crate) replica: Option<SharedReplica<S>>,
    /// Whether an acknowledged write's reply waits for its copy to reach the replica.
    pub(crate) wait: bool,
    pub(crate) shared: Arc<Shared>,
    pub(crate) plan: Arc<StorePlan>,
    pub(crate) rng: Arc<Mutex<SimRng>>,
}

impl<S: Script> StoreNode<S> {
    /// Handles one message to completion; only the reply's delivery is deferred.
    pub(crate) fn handle(&self, message: StoreMessage<S::State>) -> Reply<S::State> {
        let now = self.shared.now();
        let verdict = self.plan.verdict(now, &self.rng);
        let req = match message {
            StoreMessage::Request(req) => req,
            StoreMessage::Job(call) => {
                if matches!(verdict, Verdict::Error | Verdict::Drop) {
                    return refuse(verdict);
                }
                let (reply, copied) = self.apply_job(call, now);
                return deliver(self.waited(verdict, copied, now), reply);
            }
        };
        let id = req.request;
        let counter = matches!(req.call, StoreCall::Incr { .. } | StoreCall::Expire { .. });
        let (layer, key, op) = match &req.call {
            StoreCall::Get { layer, key } => (*layer, key.as_str(), StoreOp::Get),
            StoreCall::Set { layer, key, .. } => (*layer, key.as_str(), StoreOp::Set),
            StoreCall::Apply { layer, key, .. } | StoreCall::Incr { layer, key, .. } => {
                (*layer, key.as_str(), StoreOp::Apply { allowed: false })
            }
            StoreCall::Expire { layer, key, .. } => (*layer, key.as_str(), StoreOp::Set),
        };
        if matches!(verdict, Verdict::Error | Verdict::Drop) {
            let fate = if matches!(verdict, Verdict::Error) {
                StoreFate::Errored
            } else {
                StoreFate::Dropped
            };
            self.shared
                .record_at(now, |h, at| h.store(at, id, layer, key, op, fate));
            return refuse(verdict);
        }
        let (reply, op) = self.apply(&req.call, now);
        let copied = self.replicate_write(layer, key, counter, op, reply.is_ok(), now);
        let verdict = self.waited(verdict, copied, now);
        let fate = match verdict {
            // A refusal (a full store, a bad key) applied nothing, whatever became of its reply.
            _ if matches!(reply, Err(WireError::Full)) => StoreFate::Full,
            _ if reply.is_err() => StoreFate::Errored,
            Verdict::LoseReply => StoreFate::ReplyLost,
            Verdict::Delay(d) => StoreFate::Delayed(d),
            _ => StoreFate::Served,
        };
        self.shared
            .record_at(now, |h, at| h.store(at, id, layer, key, op, fate));
        deliver(verdict, reply)
    }

    /// Copies what a served call wrote to the replica, if there is one: a plain counter's
    /// entry after `INCRBY` or `EXPIRE`, a key's entry after a write or an admitted decision.
    /// Returns when the copy arrives.
    pub(crate) fn replicate_write(
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
    pub(crate) fn waited(&self, verdict: Verdict, copied: Option<Nanos>, now: Nanos) -> Verdict {
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

    /// Applies one of the cleanup job's calls, and copies what it changed to the replica, if
    /// there is one; returns the reply and when the copy arrives.
    pub(crate) fn apply_job(
        &self,
        call: JobCall,
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
    pub(crate) fn run_job(
        &self,
        call: JobCall,
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
            JobCall::Acquire { owner, ttl } => {
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
            JobCall::Renew { owner, token, ttl } => {
                let done = leases.renew(JOB_LEASE, &owner, token, ttl, now);
                if done {
                    self.shared
                        .record(|h, _| lease(h, owner, token, ttl, LeaseKind::Renewal));
                }
                StoreReply::Done(done)
            }
            JobCall::Release { owner, token } => {
                let done = leases.release(JOB_LEASE, &owner, token, now);
                if done {
                    self.shared
                        .record(|h, _| lease(h, owner, token, Nanos::ZERO, LeaseKind::Release));
                }
                StoreReply::Done(done)
            }
            JobCall::ScanExpired { owner, limit } => {
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
            JobCall::Cleanup { owner, token, keys } => {
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
        })
    }

    /// The store of `layer`; a call to a layer the scenario does not have is refused.
    pub(crate) fn store_for(&self, layer: Layer) -> Result<&MemoryStore<S>, WireError> {
        match layer {
            Layer::PerKey => Ok(&self.store),
            Layer::Edge => self.edge.as_ref().ok_or(WireError::Unavailable),
        }
    }

    pub(crate) fn apply(
        &self,
        req: &StoreCall<S::State>,
        now: Nanos,
    ) -> (Result<StoreReply<S::State>, WireError>, StoreOp) {
        let key_of = |k: &str| Key::new(k).map_err(|_| WireError::BadKey);
        let store_err = |e: StoreError| match e {
            StoreError::Full => WireError::Full,
            _ => WireError::Unavailable,
        };
        match *req {
            StoreCall::Get { layer, ref key } => {
                let r = key_of(key)
                    .and_then(|k| self.store_for(layer)?.get(&k, now).map_err(store_err));
                let reply = r.map(|state| StoreReply::Read {
                    state,
                    store_time: now,
                });
                (reply, StoreOp::Get)
            }
            StoreCall::Set {
                layer,
                ref key,
                state,
                ttl,
            } => {
                let r = key_of(key).and_then(|k| {
                    self.store_for(layer)?
                        .set(&k, state, ttl, now)
                        .map_err(store_err)
                });
                (r.map(|()| StoreReply::Written), StoreOp::Set)
            }
            StoreCall::Apply {
                layer,
                ref key,
                now: at,
                cost,
            } => {
                let r = key_of(key).and_then(|k| {
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
            StoreCall::Incr { layer, ref key, by } => {
                let r = key_of(key).and_then(|_| self.store_for(layer)).map(|_| {
                    let count = self.counters.lock().expect("counters").incr(key, by, now);
                    StoreReply::Counted {
                        count,
                        store_time: now,
                    }
                });
                let allowed = matches!(r, Ok(StoreReply::Counted { count, .. })
                    if count <= Store::algorithm(&self.store).quota().limit);
                (r, StoreOp::Apply { allowed })
            }
            StoreCall::Expire {
                layer,
                ref key,
                ttl,
            } => {
                let r = key_of(key).and_then(|_| self.store_for(layer)).map(|_| {
                    self.counters
                        .lock()
                        .expect("counters")
                        .expire(key, ttl, now);
                    StoreReply::Written
                });
                (r, StoreOp::Set)
            }
        }
    }
}

/// One layer's store: `max_keys` live keys at most, hashed with keys fixed by the run's seed.
pub(crate) fn sim_store<S: Script>(policy: S, max_keys: usize, seed: u64) -> MemoryStore<S> {
    MemoryStore::with_backend(policy, ratelab_store::memory::DEFAULT_SHARDS, max_keys)
        .with_seed(HashSeed(seed, !seed))
}

/// The reply to a message the store refused (error) or dropped.
pub(crate) fn refuse<S>(verdict: Verdict) -> Reply<S> {
    match verdict {
        Verdict::Error => Fate::Now(Err(WireError::Unavailable)),
        _ => Fate::Never,
    }
}

/// Delivers `reply` as `verdict` says: now, late, or never.
pub(crate) fn deliver<S>(verdict: Verdict, reply: Result<StoreReply<S>, WireError>) -> Reply<S> {
    match verdict {
        Verdict::LoseReply => Fate::Never,
        Verdict::Delay(d) => Fate::After(Duration::from(d), reply),
        _ => Fate::Now(reply),
    }
}

/// Creates the store node: one store per layer, the lease table and fence, and the receive
/// loops. A restart runs this init again: with every store empty after a crash, from the
/// replica's copies after a failover.
pub(crate) fn start_store_node<S: Script>(
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
                transport::serve(ep, move |m: StoreMessage<S::State>| node.handle(m)).await;
            }
        })
        .build()
}
