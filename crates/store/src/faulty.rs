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
