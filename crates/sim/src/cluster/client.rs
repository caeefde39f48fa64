//! The gateways' store client over the store node's messages, with the planted bugs that
//! live in a client (retries after a timeout, a timeout too short, a connection never
//! re-established, `INCRBY` then `EXPIRE`).

use super::script::Script;
use super::wire::{JobCall, StoreCall, StoreMessage, StoreReply, StoreRequest, WireError};
use crate::dilation::{self};
use crate::planted::{PlantedBug, counted_decision};
use crate::transport::{Link, Lost};
use ratelab_check::history::Layer;
use ratelab_core::{CostError, Nanos};

use ratelab_store::{Applied, Key, LeaseClient, LimitError, Read, StoreClient, StoreError};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// A gateway's link to the store node.
pub(crate) type StoreLink<S> = Link<StoreMessage<S>, Result<StoreReply<S>, WireError>>;

/// A gateway's connection to the store node: its link, and whether a call on it failed
/// (which only `no_reconnect`'s gateway remembers). One shared value, so a request's copy of
/// the store client ([`StoreClient::traced`]) takes one reference.
pub(crate) struct Connection<S> {
    pub(crate) link: Arc<StoreLink<S>>,
    pub(crate) dead: std::sync::atomic::AtomicBool,
}

/// The [`StoreClient`] over the store node's messages, for one client request.
#[derive(Clone)]
pub(crate) struct RpcStore<S: Script> {
    pub(crate) conn: Arc<Connection<S::State>>,
    /// A bound on each call, for callers that set none (the cleanup job); the gateway
    /// pipeline bounds its calls with the request's deadline.
    pub(crate) timeout: Option<Duration>,
    /// The layer whose store and policy this client serves.
    pub(crate) layer: Layer,
    pub(crate) algorithm: S,
    /// The client request this client's calls serve.
    pub(crate) request: u64,
    /// The gateway's planted bug, if any.
    pub(crate) planted: Option<PlantedBug>,
    /// The per-attempt timeout after which `retry_on_timeout` sends its call again.
    pub(crate) attempt: Duration,
}

/// A reply as the store client returns it: a store full or a cost refused are answers; a
/// wire error or an unsent call, an unavailable store.
fn read_reply<S>(
    reply: Result<Result<StoreReply<S>, WireError>, Lost>,
) -> Result<StoreReply<S>, StoreError> {
    match reply {
        Ok(Ok(reply)) => Ok(reply),
        Ok(Err(WireError::Full)) => Err(StoreError::Full),
        Ok(Err(WireError::Cost { cost, limit })) => {
            Ok(StoreReply::CostRefused(CostError { cost, limit }))
        }
        Ok(Err(_)) | Err(Lost::Unsent) => Err(StoreError::Unavailable),
    }
}

/// A store call in flight.
pub(crate) type Call<'a, S> =
    Pin<Box<dyn Future<Output = Result<StoreReply<S>, StoreError>> + Send + 'a>>;

impl<S: Script> RpcStore<S> {
    /// Makes one call. Boxed, so the gateway pipeline's future holds a pointer to it, not
    /// the call's own state (a message send and a wait for its reply, often nested twice).
    pub(crate) fn call(&self, call: StoreCall<S::State>) -> Call<'_, S::State> {
        let request = StoreRequest {
            request: self.request,
            call,
        };
        self.send(StoreMessage::Request(request))
    }

    /// Makes one of the cleanup job's calls.
    pub(crate) fn job(&self, call: JobCall) -> Call<'_, S::State> {
        self.send(StoreMessage::Job(call))
    }

    /// Sends `message`, within this client's own bound if it has one. The two are boxed
    /// apart: madsim's timeout more than doubles a call's state, and a block past 1 KiB
    /// takes the allocator's slower path, so the gateway's calls, which have no bound of
    /// their own, are not made as large as the cleanup job's.
    fn send(&self, message: StoreMessage<S::State>) -> Call<'_, S::State> {
        match self.timeout {
            Some(t) => Box::pin(async move {
                let reply = dilation::timeout(t, self.conn.link.call(message))
                    .await
                    .map_err(|_| StoreError::Timeout)?;
                read_reply(reply)
            }),
            None => Box::pin(async move { read_reply(self.conn.link.call(message).await) }),
        }
    }

    /// A decision call as the `retry_on_timeout` gateway makes it: one more attempt after
    /// `attempt`, while the first may still be applied.
    pub(crate) async fn call_retrying(
        &self,
        call: StoreCall<S::State>,
    ) -> Result<StoreReply<S::State>, StoreError> {
        match dilation::timeout(self.attempt, self.call(call.clone())).await {
            Ok(reply) => reply,
            Err(_) => self.call(call).await,
        }
    }

    /// A decision call as the `no_reconnect` gateway makes it: over a connection that, once a
    /// call on it failed, fails every call at once.
    pub(crate) async fn call_once_alive(
        &self,
        call: StoreCall<S::State>,
    ) -> Result<StoreReply<S::State>, StoreError> {
        use std::sync::atomic::{AtomicBool, Ordering};
        /// Marks the connection dead unless the call completes: a call the gateway's
        /// deadline drops (a timeout) fails the connection too.
        struct Guard<'a>(&'a AtomicBool, bool);
        impl Drop for Guard<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.store(true, Ordering::Relaxed);
                }
            }
        }
        if self.conn.dead.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable);
        }
        let mut guard = Guard(&self.conn.dead, false);
        let reply = self.call(call).await;
        guard.1 = !matches!(reply, Err(StoreError::Unavailable | StoreError::Timeout));
        reply
    }

    /// A fixed window as the `incr_then_expire` gateway decides it: `INCRBY`, then, when the
    /// count shows the window's first request, `EXPIRE` in a second call.
    pub(crate) async fn incr_then_expire(
        &self,
        key: String,
        cost: u64,
    ) -> Result<Applied, LimitError> {
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
    pub(crate) async fn done(&self, call: JobCall) -> Result<bool, StoreError> {
        match self.job(call).await? {
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
        // The planted bugs' calls are boxed: their timeouts would otherwise size every
        // call's future, which the gateway pipeline holds and moves.
        async move {
            let reply = match planted {
                Some(PlantedBug::IncrThenExpire) => {
                    return Box::pin(self.incr_then_expire(key.as_str().to_owned(), cost)).await;
                }
                Some(PlantedBug::RetryOnTimeout) => Box::pin(self.call_retrying(req)).await?,
                Some(PlantedBug::NoReconnect) => Box::pin(self.call_once_alive(req)).await?,
                Some(PlantedBug::ErrorsAsFull) => self.call(req).await.map_err(|e| match e {
                    StoreError::Unavailable => StoreError::Full,
                    e => e,
                })?,
                Some(PlantedBug::ShortClientTimeout) => {
                    Box::pin(dilation::timeout(self.attempt / 2, self.call(req)))
                        .await
                        .map_err(|_| StoreError::Timeout)??
                }
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
                StoreReply::CostRefused(c) => Err(LimitError::Cost(c)),
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
        let call = JobCall::Acquire {
            owner: owner.to_owned(),
            ttl,
        };
        async move {
            match self.job(call).await? {
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
        let call = JobCall::Renew {
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
        let call = JobCall::Release {
            owner: owner.to_owned(),
            token,
        };
        async move { self.done(call).await }
    }
}
