//! What happened in a run: every request with its one answer, and every event in order.
//!
//! The recorder sits outside the system under test: gateways, clients and the store report
//! to it, and checkers read it after the run. It records what could be observed from
//! outside — sends, answers with each limit layer's outcome, store operations with their
//! store times, lease grants with their requested lengths, scans and deletions — never a
//! component's own bookkeeping (a fence's highest token, a lease table's expiry).
//!
//! Every event also feeds the **trace hash** (FNV-1a over a fixed binary encoding), so two
//! runs of the same scenario and seed must produce the same hash.

use ratelab_core::Nanos;
use std::fmt;
use std::net::IpAddr;

/// How a request was answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// Admitted; `decided_at` is the store time of the operation the decision rests on.
    Allowed {
        /// Store time of the deciding operation.
        decided_at: Nanos,
        /// Quota left.
        remaining: u64,
    },
    /// Denied.
    Denied {
        /// Store time of the deciding operation.
        decided_at: Nanos,
        /// The wait the client was told.
        retry_after: Nanos,
    },
    /// The store failed and the gateway let the request through (fail open).
    FailedOpen(FailReason),
    /// The kill switch let the request through; no limit was consulted.
    Bypassed,
    /// The guard rejected the request (unknown key) before any limit.
    Rejected,
    /// Denied without a decision: the store had no room for a new key.
    Full,
    /// Denied by the gateway's local denial cache, without a store call: an earlier answer
    /// from the store said the key is denied until later.
    Cached {
        /// The wait the client was told.
        retry_after: Nanos,
    },
    /// The store failed (and the gateway did not fail open).
    Error(ErrorKind),
}

pub use ratelab_store::FailReason;

/// A limit layer: which store a call went to and which policy decided.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum Layer {
    /// The per-IP edge limit, keyed by the client's address.
    Edge,
    /// The per-key limit.
    PerKey,
}

impl Layer {
    /// Both layers, in pipeline order.
    pub const ALL: [Layer; 2] = [Layer::Edge, Layer::PerKey];

    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Edge => "edge",
            Layer::PerKey => "per_key",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Each limit layer's own outcome for one request (`None`: the layer did not run).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layers {
    /// The edge layer's outcome.
    pub edge: Option<Answer>,
    /// The per-key layer's outcome.
    pub per_key: Option<Answer>,
}

impl Layers {
    /// The outcome of `layer`.
    pub fn get(&self, layer: Layer) -> Option<Answer> {
        match layer {
            Layer::Edge => self.edge,
            Layer::PerKey => self.per_key,
        }
    }
}

/// A store failure seen by a gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// The store answered with an error.
    Unavailable = 0,
    /// No answer within the timeout.
    Timeout = 1,
    /// The breaker was open: the store was not called.
    BreakerOpen = 3,
}

impl ErrorKind {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::BreakerOpen => "breaker_open",
        }
    }
}

/// One request, from send to answer.
#[derive(Clone, Debug)]
pub struct RequestRecord {
    /// Sequential id, in send order.
    pub id: u64,
    /// Client index (over all groups).
    pub client: u32,
    /// Client group index.
    pub group: u32,
    /// The key.
    pub key: String,
    /// The address the client sent from (what the edge layer limits).
    pub peer: IpAddr,
    /// The gateway it was sent to.
    pub gateway: u32,
    /// Its cost.
    pub cost: u64,
    /// When the client sent it (true simulated time).
    pub sent_at: Nanos,
    /// The first answer and when it arrived.
    pub answer: Option<(Nanos, Answer)>,
    /// Each layer's outcome behind the first answer.
    pub layers: Layers,
    /// Answers beyond the first (a correct gateway never gives any).
    pub extra_answers: u32,
    /// When the store served this request's per-key read (naive path).
    pub read_at: Option<Nanos>,
    /// When the store wrote this request's per-key bucket: the naive path's `set`, or an
    /// admitting atomic transition.
    pub written_at: Option<Nanos>,
    /// Store messages handled for this request, whatever their fate, per layer
    /// ([`Layer::Edge`], [`Layer::PerKey`]).
    pub store_calls: [u32; 2],
    /// Of those, the messages the store answered with an error, per layer.
    pub store_errored: [u32; 2],
    /// Of those, the messages the store refused for want of room for a new key, per layer.
    pub store_full: [u32; 2],
    /// The store's serial position of the last atomic transition it applied for this
    /// request's per-key layer (the store-stamped linearizability check's order).
    pub applied_seq: Option<u64>,
}

impl RequestRecord {
    /// Store messages handled for this request on `layer`.
    pub fn store_calls_on(&self, layer: Layer) -> u32 {
        self.store_calls[layer.index()]
    }

    /// Store messages handled for this request on every layer.
    pub fn store_calls_total(&self) -> u32 {
        self.store_calls.iter().sum()
    }
}

/// A store operation as the store node saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreOp {
    /// A read.
    Get,
    /// A write.
    Set,
    /// An atomic transition; `allowed` is its verdict.
    Apply {
        /// Whether it admitted.
        allowed: bool,
    },
}

/// What the store did with one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreFate {
    /// Applied and answered.
    Served,
    /// Answered with an error, not applied.
    Errored,
    /// Refused for want of room for a new key, not applied.
    Full,
    /// Dropped unapplied: the caller times out.
    Dropped,
    /// Applied, reply lost.
    ReplyLost,
    /// Applied, reply delayed by this much.
    Delayed(Nanos),
}

/// What a lease record is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseKind {
    /// A new grant, with a new token.
    Grant,
    /// A renewal of a held lease.
    Renewal,
    /// The holder gave the lease up.
    Release,
}

/// A lease grant, renewal or release the store answered with success: who, when (store
/// time), with which token, for how long the holder asked (zero for a release). When it lapses
/// is the checker's to work out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// Position among all recorded events (set by [`History::lease`]).
    pub seq: u64,
    /// Store time.
    pub at: Nanos,
    /// The holder.
    pub owner: String,
    /// The grant's fencing token.
    pub token: u64,
    /// The length asked for, from `at`.
    pub ttl: Nanos,
    /// Grant, renewal or release.
    pub kind: LeaseKind,
}

/// A bucket written in the per-key store: the naive path's `set`, or an admitting atomic
/// transition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteRecord {
    /// Position among all recorded events (the store's serial order).
    pub seq: u64,
    /// Store time.
    pub at: Nanos,
    /// The store key written.
    pub key: String,
    /// The cost of the request it admitted.
    pub cost: u64,
}

/// A cleanup job's scan for expired buckets: the plan a later commit acts on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanRecord {
    /// Position among all recorded events (set by [`History::scan`]).
    pub seq: u64,
    /// Store time.
    pub at: Nanos,
    /// Who scanned.
    pub owner: String,
    /// The keys it returned.
    pub keys: Vec<String>,
}

/// A cleanup commit, as the store handled it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitRecord {
    /// Position among all recorded events (set by [`History::commit`]).
    pub seq: u64,
    /// Store time.
    pub at: Nanos,
    /// Who sent it.
    pub owner: String,
    /// The token it carried.
    pub token: u64,
    /// Whether the resource applied it.
    pub accepted: bool,
    /// The bucket keys it deleted (none if refused).
    pub removed: Vec<String>,
}

/// One event.
#[derive(Clone, Debug)]
pub enum Event {
    /// A client sent a request.
    Sent {
        /// Request id.
        id: u64,
    },
    /// The store handled a message.
    Store {
        /// The client request it served.
        id: u64,
        /// The layer whose store it went to.
        layer: Layer,
        /// The key.
        key: String,
        /// The operation.
        op: StoreOp,
        /// What happened to it.
        fate: StoreFate,
    },
    /// A gateway answered.
    Answered {
        /// Request id.
        id: u64,
        /// The answer.
        answer: Answer,
        /// Each layer's outcome.
        layers: Layers,
    },
    /// The store granted (or renewed) the cleanup job's lease.
    Lease(LeaseRecord),
    /// The store answered a cleanup scan.
    Scan(ScanRecord),
    /// The store handled a cleanup commit.
    Commit(CommitRecord),
    /// A fault began or ended.
    Fault {
        /// What.
        what: String,
    },
}

/// An event and when it happened.
#[derive(Clone, Debug)]
pub struct Timed {
    /// True simulated time.
    pub at: Nanos,
    /// The event.
    pub event: Event,
}

/// The recorded run.
#[derive(Debug, Default)]
pub struct History {
    /// Every request, indexed by id.
    pub requests: Vec<RequestRecord>,
    /// The cleanup job's leases, in store order.
    pub leases: Vec<LeaseRecord>,
    /// The cleanup job's scans, in store order.
    pub scans: Vec<ScanRecord>,
    /// Every per-key bucket write, in store order (kept only when asked for).
    pub writes: Vec<WriteRecord>,
    /// The cleanup job's commits, in store order.
    pub commits: Vec<CommitRecord>,
    /// Each gateway's request log, by gateway name (kept only when asked for).
    pub request_logs: std::collections::BTreeMap<String, String>,
    /// Every event, in order (kept only when tracing).
    pub events: Vec<Timed>,
    /// How many events happened.
    pub event_count: u64,
    /// Store operations applied whose reply was lost.
    pub applied_replies_lost: u64,
    /// Writes a failover lost: applied by the primary, never copied to the promoted replica.
    pub lost_to_failover: u64,
    keep_events: bool,
    keep_writes: bool,
    hash: Fnv,
}

/// FNV-1a, 64-bit: the trace hash, and the checkers' hash for grouping by key.
#[derive(Debug)]
pub(crate) struct Fnv(u64);

/// FNV-1a's 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The prime's powers 0 to 8 (wrapping): what `n` zero bytes multiply the state by.
const FNV_PRIME_POWERS: [u64; 9] = {
    let mut p = [1u64; 9];
    let mut i = 1;
    while i < 9 {
        p[i] = p[i - 1].wrapping_mul(FNV_PRIME);
        i += 1;
    }
    p
};

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.bytes(bytes);
    }
}

impl Fnv {
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(FNV_PRIME);
        }
    }
    /// The eight little-endian bytes of `v`, as [`Fnv::bytes`] hashes them. A zero byte only
    /// multiplies by the prime (the xor leaves the state alone), so the high zero bytes of a
    /// small value are hashed as one multiply by a power of the prime: the same hash, in a
    /// few steps rather than eight (most values hashed are times, ids and tags).
    fn u64(&mut self, v: u64) {
        let significant = 8 - (v.leading_zeros() / 8) as usize;
        let mut h = self.0;
        for &x in &v.to_le_bytes()[..significant] {
            h = (h ^ u64::from(x)).wrapping_mul(FNV_PRIME);
        }
        self.0 = h.wrapping_mul(FNV_PRIME_POWERS[8 - significant]);
    }
    fn store(&mut self, id: u64, layer: Layer, key: &str, op: StoreOp, fate: StoreFate) {
        self.u64(2);
        self.u64(id);
        // The per-key layer hashes as it always has; the edge adds a marker.
        if layer == Layer::Edge {
            self.u64(0xed9e);
        }
        self.bytes(key.as_bytes());
        self.u64(match op {
            StoreOp::Get => 0,
            StoreOp::Set => 1,
            StoreOp::Apply { allowed } => 2 + u64::from(allowed),
        });
        match fate {
            StoreFate::Served => self.u64(0),
            StoreFate::Errored => self.u64(1),
            StoreFate::Dropped => self.u64(2),
            StoreFate::ReplyLost => self.u64(3),
            StoreFate::Full => self.u64(5),
            StoreFate::Delayed(d) => {
                self.u64(4);
                self.u64(d.as_u64());
            }
        }
    }

    fn answer(&mut self, answer: &Answer) {
        match answer {
            Answer::Allowed {
                decided_at,
                remaining,
            } => {
                self.u64(0);
                self.u64(decided_at.as_u64());
                self.u64(*remaining);
            }
            Answer::Denied {
                decided_at,
                retry_after,
            } => {
                self.u64(1);
                self.u64(decided_at.as_u64());
                self.u64(retry_after.as_u64());
            }
            Answer::Error(e) => {
                self.u64(2);
                self.u64(*e as u64);
            }
            Answer::FailedOpen(r) => {
                self.u64(3);
                self.u64(*r as u64);
            }
            Answer::Bypassed => self.u64(4),
            Answer::Rejected => self.u64(5),
            Answer::Full => self.u64(6),
            Answer::Cached { retry_after } => {
                self.u64(7);
                self.u64(retry_after.as_u64());
            }
        }
    }
}

impl History {
    /// A recorder; `keep_events` keeps the full event list for `--trace`.
    pub fn new(keep_events: bool) -> History {
        History {
            keep_events,
            ..History::default()
        }
    }

    /// The same recorder with room for `requests` requests made up front: a run that knows
    /// its load records it without copying its requests into ever larger buffers.
    pub fn expecting(mut self, requests: usize) -> History {
        self.requests.reserve_exact(requests);
        self
    }

    /// The same recorder, also keeping every bucket write (what the cleanup checker needs).
    pub fn keeping_writes(mut self) -> History {
        self.keep_writes = true;
        self
    }

    /// The hash over every event so far.
    pub fn trace_hash(&self) -> u64 {
        self.hash.0
    }

    fn push(&mut self, at: Nanos, event: Event) {
        let h = &mut self.hash;
        h.u64(at.as_u64());
        match &event {
            Event::Sent { id } => {
                h.u64(1);
                h.u64(*id);
            }
            Event::Store {
                id,
                layer,
                key,
                op,
                fate,
            } => h.store(*id, *layer, key, *op, *fate),
            Event::Answered { id, answer, layers } => {
                h.u64(3);
                h.u64(*id);
                h.answer(answer);
                if let Some(edge) = &layers.edge {
                    h.u64(0xed9e);
                    h.answer(edge);
                }
            }
            Event::Fault { what } => {
                h.u64(4);
                h.bytes(what.as_bytes());
            }
            Event::Lease(l) => {
                h.u64(5);
                h.bytes(l.owner.as_bytes());
                h.u64(l.token);
                h.u64(l.at.saturating_add(l.ttl).as_u64());
                h.u64(match l.kind {
                    LeaseKind::Grant => 0,
                    LeaseKind::Renewal => 1,
                    LeaseKind::Release => 2,
                });
            }
            Event::Commit(c) => {
                h.u64(6);
                h.bytes(c.owner.as_bytes());
                h.u64(c.token);
                h.u64(u64::from(c.accepted));
                h.u64(c.removed.len() as u64);
            }
            Event::Scan(s) => {
                h.u64(7);
                h.bytes(s.owner.as_bytes());
                for k in &s.keys {
                    h.bytes(k.as_bytes());
                }
            }
        }
        self.event_count += 1;
        if self.keep_events {
            self.events.push(Timed { at, event });
        }
    }

    /// Records a new request and returns its id.
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &mut self,
        at: Nanos,
        client: u32,
        group: u32,
        key: String,
        peer: IpAddr,
        gateway: u32,
        cost: u64,
    ) -> u64 {
        let id = self.requests.len() as u64;
        self.requests.push(RequestRecord {
            id,
            client,
            group,
            key,
            peer,
            gateway,
            cost,
            sent_at: at,
            answer: None,
            layers: Layers::default(),
            extra_answers: 0,
            read_at: None,
            written_at: None,
            store_calls: [0; 2],
            store_errored: [0; 2],
            store_full: [0; 2],
            applied_seq: None,
        });
        self.push(at, Event::Sent { id });
        id
    }

    /// Records an answer to request `id`, with each layer's outcome.
    pub fn answer(&mut self, at: Nanos, id: u64, answer: Answer, layers: Layers) {
        if let Some(r) = self.requests.get_mut(id as usize) {
            if r.answer.is_some() {
                r.extra_answers += 1;
            } else {
                r.answer = Some((at, answer));
                r.layers = layers;
            }
        }
        self.push(at, Event::Answered { id, answer, layers });
    }

    /// Takes back the per-key write of `key` the store made at `at`, which a failover lost:
    /// the bucket writes are the surviving store's.
    pub fn retract_write(&mut self, key: &str, at: Nanos) {
        self.writes.retain(|w| !(w.key == key && w.at == at));
    }

    /// Records one store message's handling.
    pub fn store(
        &mut self,
        at: Nanos,
        id: u64,
        layer: Layer,
        key: &str,
        op: StoreOp,
        fate: StoreFate,
    ) {
        let applied = !matches!(
            fate,
            StoreFate::Errored | StoreFate::Dropped | StoreFate::Full
        );
        if applied && fate == StoreFate::ReplyLost {
            self.applied_replies_lost += 1;
        }
        let wrote = applied && matches!(op, StoreOp::Set | StoreOp::Apply { allowed: true });
        if wrote && layer == Layer::PerKey && self.keep_writes {
            self.writes.push(WriteRecord {
                seq: self.event_count,
                at,
                key: key.to_owned(),
                cost: self.requests.get(id as usize).map_or(1, |r| r.cost),
            });
        }
        if let Some(r) = self.requests.get_mut(id as usize) {
            r.store_calls[layer.index()] += 1;
            if fate == StoreFate::Errored {
                r.store_errored[layer.index()] += 1;
            }
            if fate == StoreFate::Full {
                r.store_full[layer.index()] += 1;
            }
            if applied && layer == Layer::PerKey {
                if matches!(op, StoreOp::Apply { .. }) {
                    r.applied_seq = Some(self.event_count);
                }
                match op {
                    StoreOp::Get => r.read_at = Some(at),
                    StoreOp::Set | StoreOp::Apply { allowed: true } => r.written_at = Some(at),
                    StoreOp::Apply { allowed: false } => {}
                }
            }
        }
        if self.keep_events {
            let key = key.to_owned();
            self.push(
                at,
                Event::Store {
                    id,
                    layer,
                    key,
                    op,
                    fate,
                },
            );
        } else {
            // The same hash, without building the event (and copying its key) to drop it.
            self.hash.u64(at.as_u64());
            self.hash.store(id, layer, key, op, fate);
            self.event_count += 1;
        }
    }

    /// Records a lease grant, renewal or release.
    pub fn lease(&mut self, mut l: LeaseRecord) {
        l.seq = self.event_count;
        self.leases.push(l.clone());
        self.push(l.at, Event::Lease(l));
    }

    /// Records a cleanup scan.
    pub fn scan(&mut self, mut s: ScanRecord) {
        s.seq = self.event_count;
        self.scans.push(s.clone());
        self.push(s.at, Event::Scan(s));
    }

    /// Records a cleanup commit.
    pub fn commit(&mut self, mut c: CommitRecord) {
        c.seq = self.event_count;
        self.commits.push(c.clone());
        self.push(c.at, Event::Commit(c));
    }

    /// Records a fault starting or ending.
    pub fn fault(&mut self, at: Nanos, what: String) {
        self.push(at, Event::Fault { what });
    }
}

impl fmt::Display for Timed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = self.at.as_u64() as f64 / 1e6;
        write!(f, "{ms:>12.6} ms  ")?;
        match &self.event {
            Event::Sent { id } => write!(f, "sent      #{id}"),
            Event::Store {
                id,
                layer,
                key,
                op,
                fate,
            } => {
                write!(
                    f,
                    "store     #{id} {} {op:?} {key:?} -> {fate:?}",
                    layer.name()
                )
            }
            Event::Answered { id, answer, layers } => {
                write!(f, "answered  #{id} {answer:?}")?;
                if let Some(edge) = layers.edge {
                    write!(f, " (edge {edge:?})")?;
                }
                Ok(())
            }
            Event::Scan(s) => write!(
                f,
                "scan      {} found {} expired buckets {:?}",
                s.owner,
                s.keys.len(),
                s.keys
            ),
            Event::Fault { what } => write!(f, "fault     {what}"),
            Event::Lease(l) => write!(
                f,
                "lease     {} token {} {} for {:.6} ms",
                l.owner,
                l.token,
                match l.kind {
                    LeaseKind::Grant => "granted",
                    LeaseKind::Renewal => "renewed",
                    LeaseKind::Release => "released",
                },
                l.ttl.as_u64() as f64 / 1e6
            ),
            Event::Commit(c) => write!(
                f,
                "commit    {} token {} {} ({} keys deleted)",
                c.owner,
                c.token,
                if c.accepted {
                    "accepted"
                } else {
                    "REJECTED as stale"
                },
                c.removed.len()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Fnv;

    #[test]
    fn a_u64_hashes_as_its_eight_little_endian_bytes() {
        let values = [
            0,
            1,
            0xff,
            0x100,
            0xed9e,
            0x0100_0000_0000_0000,
            0x00ff_0000_0000_0001,
            10_000_000_000,
            u64::MAX >> 8,
            u64::MAX,
        ];
        for v in values {
            let (mut whole, mut bytes) = (Fnv::default(), Fnv::default());
            whole.u64(v);
            bytes.bytes(&v.to_le_bytes());
            assert_eq!(whole.0, bytes.0, "{v:#x}");
        }
    }
}
