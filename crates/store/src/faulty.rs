//! A fault-injecting [`StoreClient`] wrapper, driven by a seeded ChaCha8 stream and a
//! declarative plan.
//!
//! Each call draws once and meets one fate:
//! - **error**: answered with [`StoreError::Unavailable`] without reaching the store;
//! - **drop**: never reaches the store; the caller sees [`StoreError::Timeout`];
//! - **lost reply**: reaches the store and is applied, but the caller sees
//!   [`StoreError::Timeout`] — the fault that makes retries dangerous;
//! - **served**: passed through untouched.
//!
//! It injects no latency (the caller's timeout is not exercised here; the simulator does
//! that), no crash or state loss (the simulator's store node does), and no reordering.

use crate::{Applied, Key, LimitError, Read, StoreClient, StoreError};
use core::future::Future;
use rand_chacha::ChaCha8Rng;
use rand_core::{Rng as _, SeedableRng};
use ratelab_core::{Algorithm, Nanos};
use std::borrow::Cow;
use std::sync::{Arc, Mutex};

/// What fraction of calls meet each fault (the rest are served). Fractions from 0 to 1.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultPlan {
    /// Answered with an error, unapplied.
    pub error: f64,
    /// Dropped, unapplied; the caller times out.
    pub drop: f64,
    /// Applied, reply lost; the caller times out.
    pub lost_reply: f64,
}

/// What happened to one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// Passed through.
    Served,
    /// Error, unapplied.
    Errored,
    /// Dropped, unapplied.
    Dropped,
    /// Applied, reply lost.
    ReplyLost,
}

/// A [`StoreClient`] that injects faults into another.
#[derive(Clone, Debug)]
pub struct FaultyClient<C> {
    inner: C,
    plan: FaultPlan,
    rng: Arc<Mutex<ChaCha8Rng>>,
    fates: Arc<Mutex<Vec<Fate>>>,
}

impl<C: StoreClient> FaultyClient<C> {
    /// Wraps `inner`; `seed` fixes every fate.
    pub fn new(inner: C, plan: FaultPlan, seed: u64) -> Self {
        FaultyClient {
            inner,
            plan,
            rng: Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed))),
            fates: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Every call's fate so far, in order.
    pub fn fates(&self) -> Vec<Fate> {
        self.fates.lock().expect("fates").clone()
    }

    fn draw(&self) -> Fate {
        let u = (self.rng.lock().expect("rng").next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        let p = self.plan;
        let fate = if u < p.error {
            Fate::Errored
        } else if u < p.error + p.drop {
            Fate::Dropped
        } else if u < p.error + p.drop + p.lost_reply {
            Fate::ReplyLost
        } else {
            Fate::Served
        };
        self.fates.lock().expect("fates").push(fate);
        fate
    }
}

fn unapplied(f: Fate) -> Option<StoreError> {
    match f {
        Fate::Errored => Some(StoreError::Unavailable),
        Fate::Dropped => Some(StoreError::Timeout),
        _ => None,
    }
}

impl<C: StoreClient> StoreClient for FaultyClient<C> {
    type Algorithm = C::Algorithm;

    fn algorithm(&self) -> &C::Algorithm {
        self.inner.algorithm()
    }

    /// The wrapped client's traced copy, wrapped: its calls draw from the same fault stream.
    fn traced(&self, request: u64) -> Cow<'_, Self> {
        match self.inner.traced(request) {
            Cow::Borrowed(_) => Cow::Borrowed(self),
            Cow::Owned(inner) => Cow::Owned(FaultyClient {
                inner,
                plan: self.plan,
                rng: self.rng.clone(),
                fates: self.fates.clone(),
            }),
        }
    }

    fn get(
        &self,
        key: &Key,
    ) -> impl Future<Output = Result<Read<<C::Algorithm as Algorithm>::State>, StoreError>> + Send
    {
        let fate = self.draw();
        async move {
            if let Some(e) = unapplied(fate) {
                return Err(e);
            }
            let r = self.inner.get(key).await;
            if fate == Fate::ReplyLost {
                Err(StoreError::Timeout)
            } else {
                r
            }
        }
    }

    fn set(
        &self,
        key: &Key,
        state: <C::Algorithm as Algorithm>::State,
        ttl: Nanos,
    ) -> impl Future<Output = Result<(), StoreError>> + Send {
        let fate = self.draw();
        async move {
            if let Some(e) = unapplied(fate) {
                return Err(e);
            }
            let r = self.inner.set(key, state, ttl).await;
            if fate == Fate::ReplyLost {
                Err(StoreError::Timeout)
            } else {
                r
            }
        }
    }

    fn apply(
        &self,
        key: &Key,
        now: Option<Nanos>,
        cost: u64,
    ) -> impl Future<Output = Result<Applied, LimitError>> + Send {
        let fate = self.draw();
        async move {
            if let Some(e) = unapplied(fate) {
                return Err(e.into());
            }
            let r = self.inner.apply(key, now, cost).await;
            if fate == Fate::ReplyLost {
                Err(StoreError::Timeout.into())
            } else {
                r
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LocalClient, MemoryStore};
    use ratelab_core::TokenBucket;

    type Clock = fn() -> Nanos;

    fn epoch() -> Nanos {
        Nanos::ZERO
    }

    /// Every future here completes at once (the store is in-process).
    fn ready<F: Future>(f: F) -> F::Output {
        use std::task::{Context, Poll, Waker};
        match std::pin::pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(v) => v,
            Poll::Pending => panic!("an in-process call was pending"),
        }
    }

    /// A client whose traced copies are its own (as an RPC client's are): each apply notes
    /// the trace id it carried.
    #[derive(Clone, Debug)]
    struct Tracing {
        inner: LocalClient<TokenBucket, Clock>,
        trace: Option<u64>,
        seen: Arc<Mutex<Vec<Option<u64>>>>,
    }

    impl StoreClient for Tracing {
        type Algorithm = TokenBucket;

        fn algorithm(&self) -> &TokenBucket {
            self.inner.algorithm()
        }

        fn traced(&self, request: u64) -> Cow<'_, Self> {
            Cow::Owned(Tracing {
                trace: Some(request),
                ..self.clone()
            })
        }

        fn get(
            &self,
            key: &Key,
        ) -> impl Future<Output = Result<Read<ratelab_core::TokenBucketState>, StoreError>> + Send
        {
            self.inner.get(key)
        }

        fn set(
            &self,
            key: &Key,
            state: ratelab_core::TokenBucketState,
            ttl: Nanos,
        ) -> impl Future<Output = Result<(), StoreError>> + Send {
            self.inner.set(key, state, ttl)
        }

        async fn apply(
            &self,
            key: &Key,
            at: Option<Nanos>,
            cost: u64,
        ) -> Result<Applied, LimitError> {
            self.seen.lock().expect("seen").push(self.trace);
            self.inner.apply(key, at, cost).await
        }
    }

    fn store() -> Arc<MemoryStore<TokenBucket>> {
        Arc::new(MemoryStore::new(
            TokenBucket::per_second(1000, 1000).expect("a valid bucket"),
        ))
    }

    #[test]
    fn a_traced_copy_carries_the_trace_to_the_store_and_draws_from_the_same_stream() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let inner = Tracing {
            inner: LocalClient::new(store(), epoch as Clock),
            trace: None,
            seen: seen.clone(),
        };
        let plan = FaultPlan {
            error: 0.5,
            ..FaultPlan::default()
        };
        let faulty = FaultyClient::new(inner, plan, 7);
        let key = Key::new("k").expect("a valid key");
        let traced = faulty.traced(42);
        assert!(matches!(traced, Cow::Owned(_)), "the inner copy is wrapped");
        for _ in 0..20 {
            let _ = ready(traced.apply(&key, None, 1));
        }
        let _ = ready(faulty.apply(&key, None, 1));
        // One stream of fates, drawn by the copy and the original alike.
        let fates = faulty.fates();
        assert_eq!(fates.len(), 21);
        assert_eq!(traced.fates(), fates);
        // Only the served calls reached the store: the copy's with the trace, the original's
        // without.
        let served = |calls: &[Fate]| calls.iter().filter(|f| **f == Fate::Served).count();
        assert!((1..20).contains(&served(&fates[..20])), "{fates:?}");
        let seen = seen.lock().expect("seen").clone();
        let mut expected = vec![Some(42); served(&fates[..20])];
        if fates[20] == Fate::Served {
            expected.push(None);
        }
        assert_eq!(seen, expected);
    }
}
