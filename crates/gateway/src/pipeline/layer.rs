//! One limit's store call for one request: its breaker, the call bounded by what the
//! request's deadline leaves, and what a failure means (open or closed, by route); the
//! latency and the breaker's record after it; a denial kept in the limit's denial cache.

use super::Gateway;
use crate::answer::{FailReason, LayerOutcome};
use crate::breaker::{Permit, SharedBreaker, Transition};
use crate::env::Env;
use crate::limits::Limit;
use core::future::Future;
use ratelab_core::{Algorithm, CostError, Decision, Nanos};
use ratelab_store::{Key, LimitError, Outcome, StoreClient, StoreError, TimeSource, decide_remote};
use std::time::Duration;

/// One limit's store call, once its breaker let it be made ([`Gateway::layer_start`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct StoreCall {
    /// The monotonic reading it started from: its latency's and its denial's start.
    pub(crate) started: Nanos,
    /// What the request's deadline leaves it, from `started`.
    pub(crate) budget: Duration,
    /// The gateway's clock for the decision (read only on the caller's clock).
    pub(crate) now: Nanos,
    /// The breaker's permit, recorded when the call ends.
    pub(crate) permit: Permit,
}

impl<C: StoreClient, E: Env> Gateway<C, E> {
    /// What the limits before `now` (monotonic) left of the request's timeout, which ends at
    /// `deadline`; never more than the timeout itself, even if the monotonic clock misbehaves.
    pub(super) fn budget(&self, now: Nanos, deadline: Nanos) -> Duration {
        Duration::from(deadline.saturating_sub(now)).min(self.config.timeout)
    }

    /// Runs one limit: breaker, store call bounded by the request's `deadline` (on
    /// [`Env::monotonic`]), failure policy. `clock` is the caller's latest monotonic reading,
    /// with nothing but the gateway's own work since (the request's start, or the end of the
    /// store call before): the limit starts from it rather than from a reading of its own, and
    /// a limit that calls the store sets it to the call's end.
    pub(super) async fn run_layer(
        &self,
        (layer, key, cost): (&Limit<C>, &Key, u64),
        (trace, fail_closed): (u64, bool),
        (deadline, clock): (Nanos, &mut Nanos),
    ) -> LayerOutcome {
        let call = match self.layer_start((layer, cost), fail_closed, (deadline, *clock)) {
            Ok(call) => call,
            Err(outcome) => return outcome,
        };
        let client = layer.client.traced(trace);
        let mut held = ProbeHeld::new(&layer.breaker, &call);
        // Made where it is awaited: a call bound to a local first is kept beside the timeout
        // that holds it, both in this future, which its callers move.
        let result = self.store_call(&client, (key, cost), &call).await;
        held.ended();
        self.layer_end((layer, key, cost), fail_closed, &call, result, clock)
    }

    /// The store call `call` makes over `client` (one limit's, traced) at `key` for `cost`, on
    /// the gateway's path and clock, bounded from its start by its budget.
    pub(super) fn store_call<'a>(
        &'a self,
        client: &'a C,
        (key, cost): (&'a Key, u64),
        call: &StoreCall,
    ) -> impl Future<Output = Option<Result<Outcome, LimitError>>> + Send + 'a {
        self.env.timeout_from(
            call.started,
            call.budget,
            decide_remote(
                client,
                self.config.path,
                self.config.time_source,
                key,
                call.now,
                cost,
            ),
        )
    }

    /// One limit's work before its store call, from `started`, the caller's latest
    /// monotonic reading ([`Gateway::run_layer`]'s `clock`): the call to make, or the limit's
    /// outcome without one (a cost it can never admit, no time left, its breaker open).
    pub(super) fn layer_start(
        &self,
        (layer, cost): (&Limit<C>, u64),
        fail_closed: bool,
        (deadline, started): (Nanos, Nanos),
    ) -> Result<StoreCall, LayerOutcome> {
        let fail = |reason| LayerOutcome::failed(fail_closed, reason);
        // The decision's time is the gateway's clock; the breaker's cooldown and the latency
        // are intervals, on the monotonic clock: a wall clock set back must not hold the
        // breaker open.
        // The send time no later than the call: a denial cached from this call must never
        // outlast the store's wait, which runs from a decision made at or after it. Read
        // before this limit's work, so its latency and the breaker's clock count that work
        // too (a few microseconds against a store's round trip), and its budget is the
        // deadline less the time up to that reading.
        // A cost the limit can never admit is the caller's error: a denial with no retry,
        // decided here without a store call, as the stores' clients would refuse it. The
        // breaker, which counts the store's answers, learns nothing from it: a store never
        // reached must not close it.
        let most = layer.client.algorithm().quota().limit;
        if cost > most {
            let refused = LimitError::Cost(CostError { cost, limit: most });
            return Err(error_outcome(refused, || self.env.now(), fail).0);
        }
        let budget = self.budget(started, deadline);
        if budget.is_zero() {
            // Spent before this limit: the store is not called, and the breaker, which counts
            // the store's answers, learns nothing.
            return Err(fail(FailReason::Timeout));
        }
        // The gateway's clock is read only when the decision runs on it: on the store's
        // clock (the default) the store reads its own.
        let caller = self.config.time_source == TimeSource::Caller;
        let now = if caller { self.env.now() } else { Nanos::ZERO };
        let permit = layer.breaker.permit(started);
        if permit == Permit::Skip {
            return Err(fail(FailReason::BreakerOpen));
        }
        Ok(StoreCall {
            started,
            budget,
            now,
            permit,
        })
    }

    /// One limit's work after its store `call` ended with `result` (`None`: out of time):
    /// its outcome, its latency and breaker's record, a denial kept in its cache. Sets
    /// `clock` to the call's end.
    pub(super) fn layer_end(
        &self,
        (layer, key, cost): (&Limit<C>, &Key, u64),
        fail_closed: bool,
        call: &StoreCall,
        result: Option<Result<Outcome, LimitError>>,
        clock: &mut Nanos,
    ) -> LayerOutcome {
        let fail = |reason| LayerOutcome::failed(fail_closed, reason);
        let end = self.env.monotonic();
        *clock = end;
        let caller = self.config.time_source == TimeSource::Caller;
        let (outcome, ok) = match result {
            Some(Ok(o)) => (
                LayerOutcome::Decided {
                    decision: o.decision,
                    decided_at: o.decided_at,
                },
                true,
            ),
            Some(Err(e)) => {
                error_outcome(e, || if caller { call.now } else { self.env.now() }, fail)
            }
            None => (fail(FailReason::Timeout), false),
        };
        self.finish(layer, call.permit, call.started, end, ok);
        remember(layer, key, cost, call.started, &outcome);
        outcome
    }

    /// After a store call for `limit` from `started` to `end`: its latency, and its breaker's
    /// record (the breaker counts the store's health: a decision, or an answer about one key,
    /// full or unreadable, is a store that works).
    pub(super) fn finish(
        &self,
        limit: &Limit<C>,
        permit: Permit,
        started: Nanos,
        end: Nanos,
        ok: bool,
    ) {
        limit.record_latency(end.saturating_sub(started).as_u64());
        let transition = limit.breaker.record(end, permit, ok);
        if transition != Transition::None {
            super::rare::breaker_moved(&self.stats, transition, &limit.label);
        }
    }
}

/// A breaker's half-open probe, held by a store call still running: given back if the call is
/// dropped before its end (its request's client went away), so that the breaker is never left
/// half open with no probe out, skipping the store for good, and a client that leaves says
/// nothing of the store's health (the next call probes).
pub(super) struct ProbeHeld<'a> {
    breaker: Option<&'a SharedBreaker>,
    started: Nanos,
}

impl<'a> ProbeHeld<'a> {
    /// Held for `call`, made at `breaker`'s permit (nothing to hold unless it is the probe).
    pub(super) fn new(breaker: &'a SharedBreaker, call: &StoreCall) -> Self {
        ProbeHeld {
            breaker: (call.permit == Permit::Probe).then_some(breaker),
            started: call.started,
        }
    }

    /// The call ended: its end records the probe.
    pub(super) fn ended(&mut self) {
        self.breaker = None;
    }
}

impl Drop for ProbeHeld<'_> {
    fn drop(&mut self) {
        if let Some(breaker) = self.breaker {
            breaker.release(self.started);
        }
    }
}

/// Keeps a denial in `limit`'s denial cache, if it has one: the call was sent at `sent`.
pub(super) fn remember<C>(
    limit: &Limit<C>,
    key: &Key,
    cost: u64,
    sent: Nanos,
    outcome: &LayerOutcome,
) {
    if let (Some(cache), LayerOutcome::Decided { decision, .. }) = (&limit.cache, outcome) {
        cache.insert(key, cost, sent, decision);
    }
}

/// A store error's outcome for one limit, and whether the store answered (for its breaker).
/// `now`, the gateway's clock, is read only for the one outcome that carries a time.
pub(super) fn error_outcome(
    e: LimitError,
    now: impl FnOnce() -> Nanos,
    fail: impl Fn(FailReason) -> LayerOutcome,
) -> (LayerOutcome, bool) {
    match e {
        LimitError::Store(StoreError::Timeout) => (fail(FailReason::Timeout), false),
        LimitError::Store(StoreError::Full) => (LayerOutcome::StoreFull, true),
        LimitError::Store(e) => (fail(FailReason::Error), e.store_answered()),
        // A cost the policy can never admit is the caller's error; it is answered as a
        // denial with no retry.
        LimitError::Cost(c) => (
            LayerOutcome::Decided {
                decision: Decision {
                    allowed: false,
                    limit: c.limit,
                    remaining: 0,
                    reset_after: Nanos::ZERO,
                    retry_after: None,
                    full_after: Nanos::ZERO,
                },
                decided_at: now(),
            },
            true,
        ),
        // Each limit has a key space of its own: never produced by the gateway.
        LimitError::RepeatedKey => (fail(FailReason::Error), true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::{BreakerConfig, BreakerState};

    /// A breaker opened by one failure at 0, half open from 10 ms.
    fn half_open() -> (SharedBreaker, StoreCall) {
        let breaker = SharedBreaker::new(BreakerConfig {
            failures_to_open: 1,
            cooldown: Nanos::from_millis(10),
        });
        let first = breaker.permit(Nanos::ZERO);
        breaker.record(Nanos::ZERO, first, false);
        let at = Nanos::from_millis(10);
        let permit = breaker.permit(at);
        assert_eq!(
            (permit, breaker.state()),
            (Permit::Probe, BreakerState::HalfOpen)
        );
        let call = StoreCall {
            started: at,
            budget: Duration::from_millis(50),
            now: Nanos::ZERO,
            permit,
        };
        (breaker, call)
    }

    #[test]
    fn a_probe_dropped_before_its_end_is_given_back() {
        let (breaker, call) = half_open();
        drop(ProbeHeld::new(&breaker, &call));
        // Never left half open with no probe out, which would skip the store for good, nor
        // opened for another cooldown by a client that left: the next call probes.
        assert_eq!(breaker.state(), BreakerState::Open(Nanos::from_millis(10)));
        assert_eq!(breaker.permit(Nanos::from_millis(11)), Permit::Probe);
    }

    #[test]
    fn a_probe_whose_call_ended_is_left_to_the_call_s_record() {
        let (breaker, call) = half_open();
        let mut held = ProbeHeld::new(&breaker, &call);
        held.ended();
        drop(held);
        assert_eq!(breaker.state(), BreakerState::HalfOpen);
        assert_eq!(
            breaker.record(Nanos::from_millis(11), call.permit, true),
            Transition::Closed
        );
    }

    #[test]
    fn a_plain_call_holds_no_probe() {
        let breaker = SharedBreaker::new(BreakerConfig::default());
        let call = StoreCall {
            started: Nanos::ZERO,
            budget: Duration::from_millis(50),
            now: Nanos::ZERO,
            permit: breaker.permit(Nanos::ZERO),
        };
        drop(ProbeHeld::new(&breaker, &call));
        assert_eq!(breaker.state(), BreakerState::Closed(0));
    }
}
