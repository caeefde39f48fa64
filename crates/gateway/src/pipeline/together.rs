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
use super::layer::{error_outcome, remember};
use crate::answer::FailReason;
use crate::answer::LayerOutcome;
use crate::breaker::{BreakerState, Permit};
use crate::env::Env;
use crate::limits::Planned;
use ratelab_core::{Algorithm, Nanos};
use ratelab_store::{AllItem, LimitError, Path, StoreClient, StoreError, TimeSource};

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
        if self.config.path != Path::Atomic || group.len() < 2 {
            return None;
        }
        // A cost beyond a limit's capacity is answered per limit (a denial with no retry).
        if group
            .iter()
            .any(|p| p.cost > p.limit.client.algorithm().quota().limit)
        {
            return None;
        }
        // The send time no later than the call: a denial cached from this call must never
        // outlast the store's wait, which runs from a decision made at or after it.
        let started = *clock;
        let budget = self.budget(started, deadline);
        if budget.is_zero() {
            return None;
        }
        // The gateway's clock only when the step runs on it: on the store's clock the store
        // reads its own.
        let caller = self.config.time_source == TimeSource::Caller;
        let now = if caller { self.env.now() } else { Nanos::ZERO };
        let clients: Vec<_> = group.iter().map(|p| p.limit.client.traced(trace)).collect();
        let items: Vec<AllItem<'_, C>> = group
            .iter()
            .zip(&clients)
            .map(|(p, c)| (&**c, &p.key, p.cost))
            .collect();
        let caller_now = caller.then_some(now);
        // Only while every breaker is closed, checked before the call: a store may start the
        // step as soon as it is asked (the in-memory one decides at once). A closed
        // breaker's permit is a call and changes nothing; an open or probing one has its own
        // rules, kept by the one-by-one path.
        if !group
            .iter()
            .all(|p| matches!(p.limit.breaker.state(), BreakerState::Closed(_)))
        {
            return None;
        }
        let call = C::apply_all(&items, caller_now)?;
        let result = self.env.timeout_from(started, budget, call).await;
        let end = self.env.monotonic();
        *clock = end;
        let fail = |reason| LayerOutcome::failed(fail_closed, reason);
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
                for p in group {
                    self.finish(p.limit, Permit::Call, started, end, true);
                }
                return None;
            }
            Some(Err(e)) => {
                let (o, ok) = error_outcome(e, || if caller { now } else { self.env.now() }, fail);
                (vec![o; group.len()], ok)
            }
            None => (vec![fail(FailReason::Timeout); group.len()], false),
        };
        for p in group {
            self.finish(p.limit, Permit::Call, started, end, ok);
        }
        for (p, outcome) in group.iter().zip(&outcomes) {
            remember(p.limit, &p.key, p.cost, started, outcome);
        }
        Some(outcomes)
    }
}
