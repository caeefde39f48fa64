//! What the gateway needs from the runtime that hosts it: time and timeouts. The madsim
//! cluster and the real server each bring their own ([`crate::http::TokioEnv`] for tokio).

use core::future::Future;
use ratelab_core::Nanos;
#[cfg(feature = "http")]
use ratelab_store::Sent;
use std::time::Duration;

/// Time and timeouts, from whatever runtime hosts the gateway.
pub trait Env: Send + Sync {
    /// The gateway's clock (the caller time of [`TimeSource::Caller`](ratelab_store::TimeSource::Caller), breaker cooldowns).
    fn now(&self) -> Nanos;
    /// The gateway's wall clock as Unix time, for request ids. Defaults to [`Env::now`], which
    /// is Unix time for a real server.
    fn unix_now(&self) -> Nanos {
        self.now()
    }
    /// A clock that never steps back, for each request's deadline. Defaults to [`Env::now`];
    /// a real server's wall clock can step, so it should return a monotonic reading.
    fn monotonic(&self) -> Nanos {
        self.now()
    }
    /// Unix time at the [`Env::monotonic`] reading `monotonic`, for the id of a request that
    /// started then. Defaults to a fresh [`Env::unix_now`]; an environment whose monotonic
    /// clock runs from a known Unix time computes it without reading a clock again.
    fn unix_at(&self, monotonic: Nanos) -> Nanos {
        let _ = monotonic;
        self.unix_now()
    }
    /// Whether [`Env::timeout`] polls `fut` before anything else and completes when `fut` does
    /// in that first poll, so that a decision over a store whose calls complete at once
    /// ([`StoreClient::IMMEDIATE`](ratelab_store::StoreClient::IMMEDIATE)) completes in one poll ([`crate::front`] then decides it
    /// in place). `false` unless an environment guarantees it.
    const POLLS_FIRST: bool = false;
    /// Runs `fut` for at most `after`; `None` if it did not finish in time.
    fn timeout<F: Future + Send>(
        &self,
        after: Duration,
        fut: F,
    ) -> impl Future<Output = Option<F::Output>> + Send
    where
        F::Output: Send;
    /// [`Env::timeout`] for a call whose bound runs from `started`, an [`Env::monotonic`]
    /// reading taken before it with nothing but the gateway's own work since: for at most
    /// `after` from then. Defaults to [`Env::timeout`], which bounds it from its own first
    /// wait; an environment whose clock costs a reading may bound it from `started` instead.
    fn timeout_from<F: Future + Send>(
        &self,
        started: Nanos,
        after: Duration,
        fut: F,
    ) -> impl Future<Output = Option<F::Output>> + Send
    where
        F::Output: Send,
    {
        let _ = started;
        self.timeout(after, fut)
    }
    /// A store call sent ahead of its reply, bounded as [`Env::timeout_from`] bounds a call,
    /// in a future a caller can hold by name ([`crate::front`] holds a request on Redis so,
    /// between the two halves of its decision). `Err` gives the call back when this
    /// environment bounds calls only through `timeout_from` (the default); the caller then
    /// awaits it there.
    #[cfg(feature = "http")]
    fn bound_sent(
        &self,
        started: Nanos,
        after: Duration,
        sent: Sent,
    ) -> Result<crate::deadlines::BoundedSent, Sent> {
        let _ = (started, after);
        Err(sent)
    }
}
