//! What happened in a run: every request with its one answer, and every event in order.
//!
//! The recorder sits outside the system under test: gateways, clients and the store node
//! report to it, and checkers read it after the run. Every event also feeds the **trace
//! hash** (FNV-1a over a fixed binary encoding), so two runs of the same scenario and seed
//! must produce the same hash.

use ratelab_core::Nanos;
use std::fmt;

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
    /// The store failed (and the gateway did not fail open).
    Error(ErrorKind),
}

pub use ratelab_gateway::FailReason;

/// A store failure seen by a gateway.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ErrorKind {
    /// The store answered with an error.
    Unavailable,
    /// No answer within the timeout.
    Timeout,
    /// The store is full.
    Full,
    /// The breaker was open: the store was not called.
    BreakerOpen,
}

impl ErrorKind {
    /// Lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Full => "full",
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
    /// The gateway it was sent to.
    pub gateway: u32,
    /// Its cost.
    pub cost: u64,
    /// When the client sent it (true simulated time).
    pub sent_at: Nanos,
    /// The first answer and when it arrived.
    pub answer: Option<(Nanos, Answer)>,
    /// Answers beyond the first (a correct gateway never gives any).
    pub extra_answers: u32,
    /// When the store served this request's read (naive path).
    pub read_at: Option<Nanos>,
    /// When the store applied this request's write (naive path).
    pub written_at: Option<Nanos>,
    /// Store messages handled for this request, whatever their fate.
    pub store_calls: u32,
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
    /// Dropped unapplied: the caller times out.
    Dropped,
    /// Applied, reply lost.
    ReplyLost,
    /// Applied, reply delayed by this much.
    Delayed(Nanos),
}

/// A lease grant or renewal, as the store made it.
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
    /// When it lapses unless renewed (store time).
    pub expires_at: Nanos,
    /// A renewal of a held lease, not a new grant.
    pub renewal: bool,
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
    /// Bucket keys it deleted (0 if refused).
    pub removed: u64,
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
    },
    /// The store granted (or renewed) the cleanup job's lease.
    Lease(LeaseRecord),
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
    /// The cleanup job's commits, in store order.
    pub commits: Vec<CommitRecord>,
    /// Each gateway's request log, by gateway name (kept only when asked for).
    pub request_logs: std::collections::BTreeMap<String, String>,
    /// Every event, in order (kept only when tracing).
    pub events: Vec<Timed>,
    /// How many events happened.
    pub event_count: u64,
    keep_events: bool,
    hash: Fnv,
}

#[derive(Debug)]
struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Self {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    fn bytes(&mut self, b: &[u8]) {
        for &x in b {
            self.0 = (self.0 ^ u64::from(x)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    fn u64(&mut self, v: u64) {
        self.bytes(&v.to_le_bytes());
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
            Event::Store { id, key, op, fate } => {
                h.u64(2);
                h.u64(*id);
                h.bytes(key.as_bytes());
                h.u64(match op {
                    StoreOp::Get => 0,
                    StoreOp::Set => 1,
                    StoreOp::Apply { allowed } => 2 + u64::from(*allowed),
                });
                match fate {
                    StoreFate::Served => h.u64(0),
                    StoreFate::Errored => h.u64(1),
                    StoreFate::Dropped => h.u64(2),
                    StoreFate::ReplyLost => h.u64(3),
                    StoreFate::Delayed(d) => {
                        h.u64(4);
                        h.u64(d.as_u64());
                    }
                }
            }
            Event::Answered { id, answer } => {
                h.u64(3);
                h.u64(*id);
                match answer {
                    Answer::Allowed {
                        decided_at,
                        remaining,
                    } => {
                        h.u64(0);
                        h.u64(decided_at.as_u64());
                        h.u64(*remaining);
                    }
                    Answer::Denied {
                        decided_at,
                        retry_after,
                    } => {
                        h.u64(1);
                        h.u64(decided_at.as_u64());
                        h.u64(retry_after.as_u64());
                    }
                    Answer::Error(e) => {
                        h.u64(2);
                        h.u64(*e as u64);
                    }
                    Answer::FailedOpen(r) => {
                        h.u64(3);
                        h.u64(*r as u64);
                    }
                    Answer::Bypassed => h.u64(4),
                    Answer::Rejected => h.u64(5),
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
                h.u64(l.expires_at.as_u64());
                h.u64(u64::from(l.renewal));
            }
            Event::Commit(c) => {
                h.u64(6);
                h.bytes(c.owner.as_bytes());
                h.u64(c.token);
                h.u64(u64::from(c.accepted));
                h.u64(c.removed);
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
        gateway: u32,
        cost: u64,
    ) -> u64 {
        let id = self.requests.len() as u64;
        self.requests.push(RequestRecord {
            id,
            client,
            group,
            key,
            gateway,
            cost,
            sent_at: at,
            answer: None,
            extra_answers: 0,
            read_at: None,
            written_at: None,
            store_calls: 0,
        });
        self.push(at, Event::Sent { id });
        id
    }

    /// Records an answer to request `id`.
    pub fn answer(&mut self, at: Nanos, id: u64, answer: Answer) {
        if let Some(r) = self.requests.get_mut(id as usize) {
            if r.answer.is_some() {
                r.extra_answers += 1;
            } else {
                r.answer = Some((at, answer));
            }
        }
        self.push(at, Event::Answered { id, answer });
    }

    /// Records a store operation made for request `id`.
    pub fn store(&mut self, at: Nanos, id: u64, key: &str, op: StoreOp, fate: StoreFate) {
        let applied = !matches!(fate, StoreFate::Errored | StoreFate::Dropped);
        if let Some(r) = self.requests.get_mut(id as usize) {
            r.store_calls += 1;
        }
        if let Some(r) = self.requests.get_mut(id as usize).filter(|_| applied) {
            match op {
                StoreOp::Get => r.read_at = Some(at),
                StoreOp::Set => r.written_at = Some(at),
                StoreOp::Apply { .. } => {}
            }
        }
        self.push(
            at,
            Event::Store {
                id,
                key: key.to_owned(),
                op,
                fate,
            },
        );
    }

    /// Records a lease grant or renewal.
    pub fn lease(&mut self, mut l: LeaseRecord) {
        l.seq = self.event_count;
        self.leases.push(l.clone());
        self.push(l.at, Event::Lease(l));
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
            Event::Store { id, key, op, fate } => {
                write!(f, "store     #{id} {op:?} {key:?} -> {fate:?}")
            }
            Event::Answered { id, answer } => write!(f, "answered  #{id} {answer:?}"),
            Event::Fault { what } => write!(f, "fault     {what}"),
            Event::Lease(l) => write!(
                f,
                "lease     {} token {} {} until {:.6} ms",
                l.owner,
                l.token,
                if l.renewal { "renewed" } else { "granted" },
                l.expires_at.as_u64() as f64 / 1e6
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
                c.removed
            ),
        }
    }
}
