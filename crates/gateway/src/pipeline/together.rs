//! Every enforced limit of a request in one all-or-nothing store step.
//!
//! A request that matches several enforced limits is decided at all of them in one round
//! trip when their store can ([`StoreClient::apply_all`]: the shared in-memory store under
//! its shard locks in one global order, one Lua script over every key on Redis): admitted
//! and spent at every limit, or denied and spent at none. Deciding them one by one instead
//! charges a request denied by a later limit to the earlier ones.
//!
//! Otherwise, and whenever one of the limits' breakers is not closed (each limit keeps its
//! own breaker), the limits are decided one by one in order, stopping at the first denial.

use super::Gateway;
use super::layer::{StoreCall, error_outcome, remember};
use crate::answer::FailReason;
use crate::answer::LayerOutcome;
use crate::breaker::{BreakerState, Permit};
use crate::env::Env;
use crate::limits::{Limit, Planned};
use ratelab_core::{Algorithm, Nanos};
use ratelab_store::{
    AllApplied, AllItem, Key, LimitError, Path, StoreClient, StoreError, TimeSource,
};

impl<C: StoreClient, E: Env> Gateway<C, E> {
    /// The outcome at each of `group` (enforced limits, in order) from one all-or-nothing
    /// store step, or `None` when it cannot be taken and the limits are decided one by one.
    /// On a full store only the first limit's outcome is returned (full): the others were not
    /// decided. `clock` is as for [`Gateway::run_layer`]: the step starts from it, and a step
    /// that calls the store sets it to the call's end.
    pub(super) async fn run_together(
        &self,
        group: &[&Planned<'_, C>],
        (trace, fail_closed): (u64, bool),
        (deadline, clock): (Nanos, &mut Nanos),
    ) -> Option<Vec<LayerOutcome>> {
        let limits = || group.iter().map(|p| (&**p.limit, p.cost));
        let call = self.together_start(limits(), group.len(), (deadline, *clock))?;
        let clients: Vec<_> = group.iter().map(|p| p.limit.client.traced(trace)).collect();
        let items: Vec<AllItem<'_, C>> = group
            .iter()
            .zip(&clients)
            .map(|(p, c)| (&**c, &p.key, p.cost))
            .collect();
        let step = C::apply_all(&items, self.caller_now(&call))?;
        let result = self.env.timeout_from(call.started, call.budget, step).await;
        let group = group.iter().map(|p| (&**p.limit, &p.key, p.cost));
        self.together_end(group, &call, result, fail_closed, clock)
    }

    /// The start of an all-or-nothing step over `count` enforced limits (each one's limit and
    /// cost), from `started` (monotonic) within what `deadline` leaves: its budget and, on the
    /// gateway's clock, the time it decides at. `None` when the step cannot be taken and the
    /// limits are decided one by one: on the naive path, for one limit, a cost beyond a
    /// limit's capacity, no time left, or a breaker not closed.
    pub(super) fn together_start<'l>(
        &self,
        limits: impl Iterator<Item = (&'l Limit<C>, u64)> + Clone,
        count: usize,
        (deadline, started): (Nanos, Nanos),
    ) -> Option<StoreCall>
    where
        C: 'l,
    {
        if self.config.path != Path::Atomic || count < 2 {
            return None;
        }
        // A cost beyond a limit's capacity is answered per limit (a denial with no retry).
        if limits
            .clone()
            .any(|(l, cost)| cost > l.client.algorithm().quota().limit)
        {
            return None;
        }
        // The send time no later than the call: a denial cached from this call must never
        // outlast the store's wait, which runs from a decision made at or after it.
        let budget = self.budget(started, deadline);
        if budget.is_zero() {
            return None;
        }
        // The gateway's clock only when the step runs on it: on the store's clock the store
        // reads its own.
        let caller = self.config.time_source == TimeSource::Caller;
        let now = if caller { self.env.now() } else { Nanos::ZERO };
        // Only while every breaker is closed, checked before the call: a store may start the
        // step as soon as it is asked (the in-memory one decides at once). A closed
        // breaker's permit is a call and changes nothing; an open or probing one has its own
        // rules, kept by the one-by-one path.
        if !limits
            .clone()
            .all(|(l, _)| matches!(l.breaker.state(), BreakerState::Closed(_)))
        {
            return None;
        }
        Some(StoreCall {
            started,
            budget,
            now,
            permit: Permit::Call,
        })
    }

    /// The time a step started by [`Gateway::together_start`] decides at: the gateway's
    /// clock, or `None` for the store's own.
    pub(super) fn caller_now(&self, call: &StoreCall) -> Option<Nanos> {
        (self.config.time_source == TimeSource::Caller).then_some(call.now)
    }

    /// The end of the step `call` over `group` (each limit, key and cost, in order), which
    /// ended with `result` (`None`: out of time): each limit's outcome, its breaker's record
    /// and its denial cache; `None` when the limits are to be decided one by one instead (a
    /// key the store cannot read: nothing was written). `clock` is set to the step's end.
    pub(super) fn together_end<'l>(
        &self,
        group: impl Iterator<Item = (&'l Limit<C>, &'l Key, u64)> + Clone,
        call: &StoreCall,
        result: Option<Result<AllApplied, LimitError>>,
        fail_closed: bool,
        clock: &mut Nanos,
    ) -> Option<Vec<LayerOutcome>>
    where
        C: 'l,
    {
        let started = call.started;
        let end = self.env.monotonic();
        *clock = end;
        let fail = |reason| LayerOutcome::failed(fail_closed, reason);
        let count = group.clone().count();
        let (outcomes, ok) = match result {
            Some(Ok(all)) => (
                all.decisions
                    .iter()
                    .map(|&decision| LayerOutcome::Decided {
                        decision,
                        decided_at: all.store_time,
                    })
                    .collect(),
                true,
            ),
            Some(Err(LimitError::Store(StoreError::Full))) => (vec![LayerOutcome::StoreFull], true),
            // One key the store cannot read must not switch off the request's other limits:
            // nothing was written (every key is read before any is), so decide them one by one.
            Some(Err(LimitError::Store(StoreError::Corrupt))) => {
                for (limit, _, _) in group {
                    self.finish(limit, Permit::Call, started, end, true);
                }
                return None;
            }
            Some(Err(e)) => {
                let now = || self.caller_now(call).unwrap_or_else(|| self.env.now());
                let (o, ok) = error_outcome(e, now, fail);
                (vec![o; count], ok)
            }
            None => (vec![fail(FailReason::Timeout); count], false),
        };
        for (limit, _, _) in group.clone() {
            self.finish(limit, Permit::Call, started, end, ok);
        }
        for ((limit, key, cost), outcome) in group.zip(&outcomes) {
            remember(limit, key, cost, started, outcome);
        }
        Some(outcomes)
    }
}
