//! What the pipeline answers: how each limit ended for a request ([`LayerOutcome`],
//! [`LimitResult`]), the verdict, and the answer a front end turns into a response.

use ratelab_core::{Decision, Nanos};
use std::net::IpAddr;
use std::sync::Arc;
use uuid::Uuid;

pub use ratelab_store::FailReason;

/// How one limit ended for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerOutcome {
    /// The store decided.
    Decided {
        /// The decision.
        decision: Decision,
        /// The store time of the deciding operation.
        decided_at: Nanos,
    },
    /// The store failed and the request was let through.
    FailedOpen(FailReason),
    /// The store failed and the route fails closed.
    FailedClosed(FailReason),
    /// The store had no room for this new key: denied, nothing spent.
    StoreFull,
    /// Denied by the gateway's local denial cache, without a store call: the store denied
    /// this key until later ([`crate::denial_cache`]). The decision is the store's, its waits
    /// counted down.
    Cached(Decision),
}

impl LayerOutcome {
    /// A store failure's outcome: refused on a fail-closed route, let through otherwise.
    pub(crate) fn failed(fail_closed: bool, reason: FailReason) -> LayerOutcome {
        if fail_closed {
            LayerOutcome::FailedClosed(reason)
        } else {
            LayerOutcome::FailedOpen(reason)
        }
    }

    /// Whether the limit was exceeded: its store decided and denied (a store with
    /// no room for a new key is the server's limit, not the client's quota).
    pub fn over_limit(&self) -> bool {
        matches!(self, LayerOutcome::Decided { decision, .. } if !decision.allowed)
            || matches!(self, LayerOutcome::Cached(_))
    }
}

/// The verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Let it through (200 from the demo server).
    Allow,
    /// Over a limit: 429.
    Deny,
    /// A fail-closed route while the store is failing: 503.
    Unavailable,
    /// Malformed input: 400, with the reason.
    BadRequest(String),
    /// Rejected by the guard: 403, with the reason.
    Rejected(String),
}

/// The answer to one request.
#[derive(Clone, Debug)]
pub struct Answer {
    /// Allow, deny, …
    pub verdict: Verdict,
    /// The HTTP status the verdict maps to.
    pub status: u16,
    /// Response headers: `RateLimit-Policy`, `RateLimit`, `Retry-After` as applicable.
    pub headers: Vec<(&'static str, String)>,
    /// The resolved client address.
    pub client_ip: Option<IpAddr>,
    /// The outcome of every limit that ran, in order.
    pub limits: Vec<LimitResult>,
    /// Whether the kill switch let it through.
    pub bypassed: bool,
    /// The request's UUIDv7, minted when it was decided; its log line carries it too.
    pub id: Uuid,
}

/// How one limit ended for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitResult {
    /// The limit's name.
    pub name: Arc<str>,
    /// Its outcome.
    pub outcome: LayerOutcome,
    /// Whether it was only measured (its own shadow mode, or the global shadow switch): its
    /// denial let the request through.
    pub shadow: bool,
    /// Its position in the request's plan (the order [`Gateway::check_planned`](crate::Gateway::check_planned) was given).
    pub planned: usize,
}

impl Answer {
    /// The outcome of the limit called `name`, if it ran.
    pub fn outcome(&self, name: &str) -> Option<LayerOutcome> {
        self.limits
            .iter()
            .find(|r| &*r.name == name)
            .map(|r| r.outcome)
    }

    /// The names of the enforced limits whose quota the request exceeded, as the
    /// `RateLimit-Policy` field names them.
    pub fn violated_policies(&self) -> Vec<&str> {
        self.limits
            .iter()
            .filter(|r| !r.shadow && r.outcome.over_limit())
            .map(|r| &*r.name)
            .collect()
    }
}

impl Answer {
    /// An answer with no limit run, no headers and no id yet.
    pub(crate) fn bare(verdict: Verdict, status: u16) -> Answer {
        Answer {
            verdict,
            status,
            headers: Vec::new(),
            client_ip: None,
            limits: Vec::new(),
            bypassed: false,
            id: Uuid::nil(),
        }
    }
}
