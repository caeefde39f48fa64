//! A request decided in two halves around its store's reply, for a front that holds the
//! request between them by name rather than in a future ([`crate::front`] on Redis).
//!
//! [`Gateway::begin`] runs everything up to the store: the request's planning, and for a
//! request at one enforced limit on the atomic path, that limit's denial cache, breaker and
//! budget, then its call, sent at once when the limit's client can send
//! ([`StoreClient::send`]). [`Gateway::complete`] runs everything after the reply: the
//! limit's outcome, latency and breaker record, the answer's fields, the counters, the id and
//! the log line. The steps are [`Gateway::check`]'s own ([`Gateway::layer_start`],
//! [`Gateway::layer_end`], [`Gateway::account`]), so both ways decide alike. Anything else
//! (several limits, a shadow limit, the naive path) is [`Later`]: decided by the same async
//! steps as `check`, from the plan the first half made.

use super::Gateway;
use super::layer::{ProbeHeld, StoreCall};
use crate::answer::{Answer, Verdict};
use crate::env::Env;
use crate::limits::{LimitSet, Mode, Planned, PlannedList};
use crate::request::{Guard, Request};
use ratelab_core::Nanos;
use ratelab_store::{
    Key, LimitError, Outcome, Path, Sent, SentReply, StoreClient, StoreError, TimeSource,
};
use smallvec::SmallVec;
use std::sync::Arc;

/// What the first half of a request's decision left ([`Gateway::begin`]).
#[derive(Debug)]
pub(crate) enum Begun<C> {
    /// Decided without waiting (refused, let through by the kill switch, answered from a
    /// denial cache, or decided without a store call), its id minted and logged.
    Answered(Answer),
    /// Its one store call sent: the reply, read by [`Gateway::read_reply`], goes to
    /// [`Gateway::complete`].
    Sent(Waiting<C>, Sent),
    /// Its one store call still to make, through the client's `apply`
    /// ([`Gateway::call_store`]), then [`Gateway::complete`].
    Call(Waiting<C>),
    /// Decided later by [`Gateway::decide_later`].
    Later(Later<C>),
}

/// What the reply to a sent call says ([`Gateway::read_reply`]).
#[derive(Debug)]
pub(crate) enum Reply {
    /// The call's end: its outcome, or `None` when no reply came in time.
    Ended(Option<Result<Outcome, LimitError>>),
    /// The call is to be made again, through the client's `apply` ([`Gateway::call_store`]).
    Again,
}

/// A request waiting for its one store call's reply.
#[derive(Debug)]
pub(crate) struct Waiting<C> {
    /// The limits it started with, and the place of the one it is decided at.
    set: Arc<LimitSet<C>>,
    at: usize,
    key: Key,
    cost: u64,
    call: StoreCall,
    trace: u64,
    fail_closed: bool,
    /// When the request started.
    start: Nanos,
    answer: Answer,
    /// Whether its call ended (its second half ran).
    ended: bool,
}

impl<C> Drop for Waiting<C> {
    /// A request dropped before its call's end (its client went away) gives its breaker's
    /// probe back as a failure ([`ProbeHeld`]).
    fn drop(&mut self) {
        if !self.ended {
            drop(ProbeHeld::new(&self.set[self.at].breaker, &self.call));
        }
    }
}

/// A request planned, to be decided as [`Gateway::check`] decides it.
#[derive(Debug)]
pub(crate) struct Later<C> {
    set: Arc<LimitSet<C>>,
    /// Each planned limit's place in `set`, key and cost.
    plan: SmallVec<[(usize, Key, u64); 2]>,
    trace: u64,
    fail_closed: bool,
    shadow_all: bool,
    start: Nanos,
    answer: Answer,
}

impl<C> Waiting<C> {
    /// The call's bound: from when it started, for what the request's deadline left it.
    pub(crate) fn bound(&self) -> (Nanos, std::time::Duration) {
        (self.call.started, self.call.budget)
    }

    /// The request's number, its store calls' trace id.
    pub(crate) fn trace(&self) -> u64 {
        self.trace
    }
}

impl<C> Later<C> {
    /// The request's number, its store calls' trace id.
    pub(crate) fn trace(&self) -> u64 {
        self.trace
    }
}

/// The place in `set` of the limit `planned` is at.
fn place<C>(set: &LimitSet<C>, planned: &Planned<'_, C>) -> usize {
    let at = set.iter().position(|l| std::ptr::eq(l, planned.limit));
    debug_assert!(at.is_some(), "a request's limits are planned from its set");
    at.unwrap_or(0)
}

impl<C: StoreClient, E: Env> Gateway<C, E> {
    /// The first half of `req`'s decision: everything up to its store call, which is sent
    /// when it can be.
    pub(crate) fn begin(&self, req: &Request<'_>, guard: Option<&dyn Guard>) -> Begun<C> {
        let start = self.env.monotonic();
        let mut answer = Answer::bare(Verdict::Allow, 200);
        let set = self.limits.load_full();
        let Some((planned, shadow_all)) = self.prepare(&set, req, guard, &mut answer) else {
            return self.answered(req, answer, start);
        };
        if planned.is_empty() {
            // No limit applies: allowed, with nothing to call.
            self.conclude(None, &mut answer);
            return self.answered(req, answer, start);
        }
        let fail_closed = self.fails_closed(req.route);
        let mut planned = planned;
        let one = match planned.pop() {
            Some(one)
                if planned.is_empty()
                    && !shadow_all
                    && one.limit.spec.mode != Mode::Shadow
                    && self.config.path == Path::Atomic =>
            {
                one
            }
            last => {
                planned.extend(last);
                let plan = planned
                    .into_iter()
                    .map(|p| (place(&set, &p), p.key, p.cost))
                    .collect();
                return Begun::Later(Later {
                    set,
                    plan,
                    trace: req.trace,
                    fail_closed,
                    shadow_all,
                    start,
                    answer,
                });
            }
        };
        super::reserve(&mut answer.limits, 1);
        if let Some(fields) = self.cached(std::iter::once((0, &one)), start, &mut answer) {
            self.conclude(fields, &mut answer);
            return self.answered(req, answer, start);
        }
        let deadline = start.saturating_add(Nanos::from(self.config.timeout));
        let call = match self.layer_start((one.limit, one.cost), fail_closed, (deadline, start)) {
            Ok(call) => call,
            Err(outcome) => {
                let fields = self.settle(one.limit, outcome, &mut answer);
                self.conclude(fields, &mut answer);
                return self.answered(req, answer, start);
            }
        };
        let now = (self.config.time_source == TimeSource::Caller).then_some(call.now);
        let sent = one
            .limit
            .client
            .traced(req.trace)
            .send(&one.key, now, one.cost);
        let at = place(&set, &one);
        let Planned { key, cost, .. } = one;
        drop(planned);
        let waiting = Waiting {
            set,
            at,
            key,
            cost,
            call,
            trace: req.trace,
            fail_closed,
            start,
            answer,
            ended: false,
        };
        match sent {
            None => Begun::Call(waiting),
            Some(Ok(sent)) => Begun::Sent(waiting, sent),
            // Decided without the store (a store known to be down).
            Some(Err(e)) => Begun::Answered(self.complete(waiting, Some(Err(e)), || *req)),
        }
    }

    /// `answer`, complete, with its id and its log line.
    fn answered(&self, req: &Request<'_>, mut answer: Answer, start: Nanos) -> Begun<C> {
        self.log(req, &mut answer, start);
        Begun::Answered(answer)
    }

    /// The one enforced limit's `outcome` in `answer`: its fields, and a denial.
    fn settle(
        &self,
        limit: &crate::limits::Limit<C>,
        outcome: crate::answer::LayerOutcome,
        answer: &mut Answer,
    ) -> Option<super::fields::Fields> {
        let mut fields = None;
        match self.account((0, limit), outcome, false, answer, &mut fields) {
            super::Step::Unavailable => return None,
            super::Step::Refused => {
                answer.verdict = Verdict::Deny;
                answer.status = 429;
            }
            super::Step::Go => {}
        }
        fields
    }

    /// What `reply`, the reply to `waiting`'s sent call within its bound (`None`: none came
    /// in time), says.
    pub(crate) fn read_reply(
        &self,
        waiting: &Waiting<C>,
        reply: Option<Result<SentReply, StoreError>>,
    ) -> Reply {
        let applied = match reply {
            None => return Reply::Ended(None),
            Some(Ok(reply)) => match waiting.set[waiting.at].client.read_sent(reply) {
                Some(applied) => applied,
                None => return Reply::Again,
            },
            Some(Err(e)) => Err(LimitError::Store(e)),
        };
        Reply::Ended(Some(applied.map(|a| Outcome {
            decision: a.decision,
            decided_at: a.store_time,
        })))
    }

    /// `waiting`'s `sent` call awaited within its bound through [`Env::timeout_from`] (for
    /// an environment that cannot bound it by name: [`Env::bound_sent`]), and made again
    /// through the client's `apply` if its reply asks for it.
    pub(crate) async fn await_sent(
        &self,
        waiting: &Waiting<C>,
        sent: Sent,
    ) -> Option<Result<Outcome, LimitError>> {
        let (started, budget) = waiting.bound();
        let reply = self.env.timeout_from(started, budget, sent).await;
        match self.read_reply(waiting, reply) {
            Reply::Ended(result) => result,
            Reply::Again => self.call_store(waiting).await,
        }
    }

    /// `waiting`'s store call made through its client's `apply`, within its bound.
    pub(crate) async fn call_store(
        &self,
        waiting: &Waiting<C>,
    ) -> Option<Result<Outcome, LimitError>> {
        let client = waiting.set[waiting.at].client.traced(waiting.trace);
        self.store_call(&client, (&waiting.key, waiting.cost), &waiting.call)
            .await
    }

    /// The second half of the decision on the request `req` makes, once its store call
    /// ended with `result` (`None`: out of time): its answer, with its id and its log line
    /// (`req` is made only for the log line).
    pub(crate) fn complete<'r>(
        &self,
        mut waiting: Waiting<C>,
        result: Option<Result<Outcome, LimitError>>,
        req: impl FnOnce() -> Request<'r>,
    ) -> Answer {
        // Its end records the breaker's permit.
        waiting.ended = true;
        let mut answer = std::mem::replace(&mut waiting.answer, Answer::bare(Verdict::Allow, 200));
        let Waiting {
            set,
            at,
            key,
            cost,
            call,
            fail_closed,
            start,
            ..
        } = &waiting;
        let limit = &set[*at];
        let mut clock = call.started;
        let outcome = self.layer_end((limit, key, *cost), *fail_closed, call, result, &mut clock);
        let fields = self.settle(limit, outcome, &mut answer);
        self.conclude(fields, &mut answer);
        self.log_lazily(req, &mut answer, *start);
        answer
    }

    /// Decides `later` as [`Gateway::check`] decides a planned request; its answer, with its
    /// id and its log line (of the request `req` makes, made only for it).
    pub(crate) async fn decide_later<'r>(
        &self,
        later: Later<C>,
        req: impl FnOnce() -> Request<'r>,
    ) -> Answer {
        let Later {
            set,
            plan,
            trace,
            fail_closed,
            shadow_all,
            start,
            mut answer,
        } = later;
        let planned: PlannedList<'_, C> = plan
            .into_iter()
            .map(|(at, key, cost)| Planned {
                limit: &set[at],
                key,
                cost,
            })
            .collect();
        self.decide_planned(
            &planned,
            (trace, fail_closed, start),
            shadow_all,
            &mut answer,
        )
        .await;
        self.log_lazily(req, &mut answer, start);
        answer
    }
}
