//! A request decided in two halves around its store's reply, for a front that holds the
//! request between them by name rather than in a future ([`crate::front`] on Redis).
//!
//! [`Gateway::begin`] runs everything up to the store: the request's planning, and for a
//! request whose limits are all enforced, on the atomic path, their denial caches, breakers
//! and budget, then their call, sent at once when their client can send: one limit's
//! ([`StoreClient::send`]), or several limits' in one all-or-nothing step
//! ([`StoreClient::send_all`]). [`Gateway::complete`] runs everything after the reply: the
//! limits' outcomes, latency and breaker records, the answer's fields, the counters, the id
//! and the log line. The steps are [`Gateway::check`]'s own ([`Gateway::layer_start`] and
//! [`Gateway::layer_end`] for one limit, [`Gateway::together_start`] and
//! [`Gateway::together_end`] for several, [`Gateway::account`]), so both ways decide alike.
//! Anything else (a shadow limit, the naive path, limits that cannot be decided in one step,
//! a key the store could not read) is [`Later`]: decided by the same async steps as `check`,
//! from the plan the first half made.

use super::Gateway;
use super::layer::{ProbeHeld, StoreCall, error_outcome};
use crate::answer::{Answer, LayerOutcome, Verdict};
use crate::breaker::Permit;
use crate::env::Env;
use crate::limits::{LimitSet, Mode, Planned, PlannedList};
use crate::request::{Guard, Request};
use ratelab_core::Nanos;
use ratelab_store::{
    AllApplied, AllItem, Key, LimitError, Outcome, Path, Sent, SentReply, StoreClient, StoreError,
    TimeSource,
};
use smallvec::SmallVec;
use std::sync::Arc;

/// What the first half of a request's decision left ([`Gateway::begin`]).
#[derive(Debug)]
pub(crate) enum Begun<C> {
    /// Decided without waiting (refused, let through by the kill switch, answered from a
    /// denial cache, or decided without a store call), its id minted and logged.
    Answered(Answer),
    /// Its store call sent: the reply, read by [`Gateway::read_reply`], goes to
    /// [`Gateway::complete`].
    Sent(Waiting<C>, Sent),
    /// Its store call still to make, through the client ([`Gateway::call_store`]), then
    /// [`Gateway::complete`].
    Call(Waiting<C>),
    /// Decided later by [`Gateway::decide_later`].
    Later(Later<C>),
}

/// What the reply to a sent call says ([`Gateway::read_reply`]).
#[derive(Debug)]
pub(crate) enum Reply {
    /// The call's end, for [`Gateway::complete`].
    Ended(Ended),
    /// The call is to be made again, through the client ([`Gateway::call_store`]).
    Again,
    /// A key the store could not read, among several limits: the request is to be decided
    /// one limit at a time ([`Gateway::unreadable`], then [`Gateway::decide_later`]).
    Unreadable,
}

/// What a call made through the client left ([`Gateway::call_store`],
/// [`Gateway::await_sent`]).
#[derive(Debug)]
pub(crate) enum Called<C> {
    /// The call's end, for [`Gateway::complete`].
    Ended(Waiting<C>, Ended),
    /// The request is to be decided by [`Gateway::decide_later`].
    Later(Later<C>),
}

/// How a request's store call ended (`None` inside: no reply in time), for
/// [`Gateway::complete`].
#[derive(Debug)]
pub(crate) struct Ended(EndedAs);

#[derive(Debug)]
enum EndedAs {
    /// One limit's call.
    One(Option<Result<Outcome, LimitError>>),
    /// Several limits' all-or-nothing step.
    All(Option<Result<AllApplied, LimitError>>),
}

/// A limit a request is decided at: its place in the request's [`LimitSet`], its key, the
/// request's cost there.
type At = (usize, Key, u64);

/// A request waiting for its store call's reply.
#[derive(Debug)]
pub(crate) struct Waiting<C> {
    /// The limits it started with.
    set: Arc<LimitSet<C>>,
    /// The limit it is decided at.
    first: At,
    /// The further limits decided with it in one all-or-nothing step, in order (none for a
    /// request at one limit).
    more: Box<[At]>,
    call: StoreCall,
    trace: u64,
    fail_closed: bool,
    /// When the request started.
    start: Nanos,
    answer: Answer,
    /// Whether its call ended (its second half ran), or it went to be decided later.
    ended: bool,
}

impl<C> Drop for Waiting<C> {
    /// A request dropped before its call's end (its client went away) gives its breaker's
    /// probe back ([`ProbeHeld`]; a step over several limits holds none).
    fn drop(&mut self) {
        if !self.ended {
            drop(ProbeHeld::new(&self.set[self.first.0].breaker, &self.call));
        }
    }
}

/// A request planned, to be decided as [`Gateway::check`] decides it.
#[derive(Debug)]
pub(crate) struct Later<C> {
    set: Arc<LimitSet<C>>,
    /// Each planned limit's place in `set`, key and cost.
    plan: SmallVec<[At; 2]>,
    trace: u64,
    fail_closed: bool,
    shadow_all: bool,
    start: Nanos,
    answer: Answer,
    /// The end of an all-or-nothing step over its limits that could not read a key: they
    /// are decided one by one from there ([`Gateway::run_limits`]).
    resume: Option<Nanos>,
}

impl<C> Waiting<C> {
    /// A request at `limits` of `set` (the first, and any further ones decided with it),
    /// waiting for `call`; `head` is its trace id, whether it fails closed and its start.
    fn new(
        set: Arc<LimitSet<C>>,
        (first, more): (At, Box<[At]>),
        call: StoreCall,
        (trace, fail_closed, start): (u64, bool, Nanos),
        answer: Answer,
    ) -> Self {
        Waiting {
            set,
            first,
            more,
            call,
            trace,
            fail_closed,
            start,
            answer,
            ended: false,
        }
    }

    /// The call's bound: from when it started, for what the request's deadline left it.
    pub(crate) fn bound(&self) -> (Nanos, std::time::Duration) {
        (self.call.started, self.call.budget)
    }

    /// The request's number, its store calls' trace id.
    pub(crate) fn trace(&self) -> u64 {
        self.trace
    }

    /// Its limits, in order.
    fn limits(&self) -> impl Iterator<Item = &At> + Clone {
        std::iter::once(&self.first).chain(&self.more)
    }

    /// The request, to be decided by the async steps from its plan, one limit at a time from
    /// `resume`: the request's start when its step could not be taken, else the step's end
    /// (the step spent nothing, and was recorded). Only a request
    /// at several limits goes: one whose call holds a breaker's probe ends in
    /// [`Gateway::complete`].
    fn into_later(mut self, resume: Nanos) -> Later<C> {
        debug_assert!(!self.more.is_empty() || self.call.permit != Permit::Probe);
        self.ended = true;
        Later {
            resume: Some(resume),
            set: self.set.clone(),
            plan: self.limits().cloned().collect(),
            trace: self.trace,
            fail_closed: self.fail_closed,
            shadow_all: false,
            start: self.start,
            answer: std::mem::replace(&mut self.answer, Answer::bare(Verdict::Allow, 200)),
        }
    }
}

impl<C> Later<C> {
    /// The request planned at `plan`, of `set`, to be decided by [`Gateway::decide_later`];
    /// `head` is its trace id, whether it fails closed and whether all its limits are shadow
    /// ones.
    fn new(
        set: Arc<LimitSet<C>>,
        plan: SmallVec<[At; 2]>,
        (trace, fail_closed, shadow_all): (u64, bool, bool),
        start: Nanos,
        answer: Answer,
    ) -> Self {
        Later {
            set,
            plan,
            trace,
            fail_closed,
            shadow_all,
            start,
            answer,
            resume: None,
        }
    }

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

/// The clients of `limits` (of `set`), their calls carrying `trace`.
fn traced_clients<'s, C: StoreClient>(
    set: &'s LimitSet<C>,
    limits: impl Iterator<Item = &'s At>,
    trace: u64,
) -> SmallVec<[std::borrow::Cow<'s, C>; 2]> {
    limits
        .map(|(at, _, _)| set[*at].client.traced(trace))
        .collect()
}

/// The items of one all-or-nothing step at `limits`, each through its client in `clients`.
fn items_of<'a, C: StoreClient>(
    clients: &'a [std::borrow::Cow<'a, C>],
    limits: impl Iterator<Item = &'a At>,
) -> SmallVec<[AllItem<'a, C>; 2]> {
    limits
        .zip(clients)
        .map(|((_, key, cost), c)| (&**c, key, *cost))
        .collect()
}

/// `planned`, of `set`, as each limit's place in `set`, key and cost.
fn plan_of<C>(set: &LimitSet<C>, planned: PlannedList<'_, C>) -> SmallVec<[At; 2]> {
    planned
        .into_iter()
        .map(|p| (place(set, &p), p.key, p.cost))
        .collect()
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
        let in_halves = !shadow_all
            && self.config.path == Path::Atomic
            && planned.iter().all(|p| p.limit.spec.mode != Mode::Shadow);
        if !in_halves {
            let plan = plan_of(&set, planned);
            let head = (req.trace, fail_closed, shadow_all);
            return Begun::Later(Later::new(set, plan, head, start, answer));
        }
        if planned.len() > 1 {
            super::reserve(&mut answer.limits, planned.len());
            if let Some(fields) = self.cached(planned.iter().enumerate(), start, &mut answer) {
                self.conclude(fields, &mut answer);
                return self.answered(req, answer, start);
            }
            let plan = plan_of(&set, planned);
            return self.begin_together(req, set, plan, (fail_closed, start), answer);
        }
        let mut planned = planned;
        let Some(one) = planned.pop() else {
            self.conclude(None, &mut answer);
            return self.answered(req, answer, start);
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
        let limits = ((at, key, cost), Box::default());
        let waiting = Waiting::new(set, limits, call, (req.trace, fail_closed, start), answer);
        match sent {
            None => Begun::Call(waiting),
            Some(Ok(sent)) => Begun::Sent(waiting, sent),
            // Decided without the store (a store known to be down).
            Some(Err(e)) => {
                let ended = Ended(EndedAs::One(Some(Err(e))));
                Begun::Answered(self.complete(waiting, ended, || *req))
            }
        }
    }

    /// [`Gateway::begin`] for a request at several enforced limits (`plan`, of `set`), their
    /// denial caches consulted: their one all-or-nothing step, sent when their client can
    /// send it.
    fn begin_together(
        &self,
        req: &Request<'_>,
        set: Arc<LimitSet<C>>,
        plan: SmallVec<[At; 2]>,
        (fail_closed, start): (bool, Nanos),
        answer: Answer,
    ) -> Begun<C> {
        let deadline = start.saturating_add(Nanos::from(self.config.timeout));
        let limits = plan.iter().map(|(at, _, cost)| (&*set[*at], *cost));
        let head = (req.trace, fail_closed, false);
        let Some(call) = self.together_start(limits, plan.len(), (deadline, start)) else {
            // One by one from the request's start, as `check` decides them when the step
            // cannot be taken (their denial caches were consulted).
            let mut later = Later::new(set, plan, head, start, answer);
            later.resume = Some(start);
            return Begun::Later(later);
        };
        let mut plan = plan.into_iter();
        let Some(first) = plan.next() else {
            let mut answer = answer;
            self.conclude(None, &mut answer);
            return self.answered(req, answer, start);
        };
        let limits = (first, plan.collect());
        let waiting = Waiting::new(set, limits, call, (req.trace, fail_closed, start), answer);
        let sent = {
            let clients = traced_clients(&waiting.set, waiting.limits(), req.trace);
            let items = items_of(&clients, waiting.limits());
            C::send_all(&items, self.caller_now(&waiting.call))
        };
        match sent {
            // Not sent: the step is taken through the client (`apply_all`), as `check` takes it.
            None => Begun::Call(waiting),
            Some(Ok(sent)) => Begun::Sent(waiting, sent),
            // A key the store could not read, as when the reply says so.
            Some(Err(LimitError::Store(StoreError::Corrupt))) => {
                Begun::Later(self.unreadable(waiting))
            }
            // Decided without the store (a cost a limit can never admit, a store known to
            // be down).
            Some(Err(e)) => {
                let ended = Ended(EndedAs::All(Some(Err(e))));
                Begun::Answered(self.complete(waiting, ended, || *req))
            }
        }
    }

    /// `waiting`'s all-or-nothing step, which could not read a key (nothing was written),
    /// recorded as `check` records it; the request, to be decided one limit at a time from
    /// the step's end.
    pub(crate) fn unreadable(&self, waiting: Waiting<C>) -> Later<C> {
        let mut clock = waiting.call.started;
        let group = waiting
            .limits()
            .map(|(at, key, cost)| (&*waiting.set[*at], key, *cost));
        let corrupt = Some(Err(LimitError::Store(StoreError::Corrupt)));
        let fail_closed = waiting.fail_closed;
        let outcomes = self.together_end(group, &waiting.call, corrupt, fail_closed, &mut clock);
        debug_assert!(
            outcomes.is_none(),
            "an unreadable key is decided one by one"
        );
        waiting.into_later(clock)
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
        outcome: LayerOutcome,
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

    /// The outcomes of `waiting`'s all-or-nothing step, which ended with `result`, in
    /// `answer`: the limits' fields, and a denial. `clock` is set to the step's end.
    fn settle_together(
        &self,
        waiting: &Waiting<C>,
        result: Option<Result<AllApplied, LimitError>>,
        answer: &mut Answer,
        clock: &mut Nanos,
    ) -> Option<super::fields::Fields> {
        let set = &waiting.set;
        let group = waiting
            .limits()
            .map(|(at, key, cost)| (&*set[*at], key, *cost));
        let fail_closed = waiting.fail_closed;
        let outcomes = self
            .together_end(group, &waiting.call, result, fail_closed, clock)
            .unwrap_or_else(|| {
                // A key the store could not read is decided by the async steps, one limit
                // at a time ([`Gateway::read_reply`]); met here, it is answered as one
                // limit's would be.
                let error = LimitError::Store(StoreError::Corrupt);
                let now = || self.env.now();
                let (o, _) = error_outcome(error, now, |r| LayerOutcome::failed(fail_closed, r));
                vec![o; 1 + waiting.more.len()]
            });
        let limits = waiting
            .limits()
            .enumerate()
            .map(|(i, (at, _, _))| (i, &*set[*at]));
        let mut fields = None;
        let denied = self.account_together(limits, outcomes, answer, &mut fields)?;
        if denied {
            answer.verdict = Verdict::Deny;
            answer.status = 429;
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
        if waiting.more.is_empty() {
            let applied = match reply {
                None => return Reply::Ended(Ended(EndedAs::One(None))),
                Some(Ok(reply)) => match waiting.set[waiting.first.0].client.read_sent(reply) {
                    Some(applied) => applied,
                    None => return Reply::Again,
                },
                Some(Err(e)) => Err(LimitError::Store(e)),
            };
            let outcome = applied.map(|a| Outcome {
                decision: a.decision,
                decided_at: a.store_time,
            });
            return Reply::Ended(Ended(EndedAs::One(Some(outcome))));
        }
        // `None`: the step is to be taken again; `Some(None)`: no reply in time.
        let all = match reply {
            None => Some(None),
            Some(Err(e)) => Some(Some(Err(LimitError::Store(e)))),
            Some(Ok(reply)) => {
                let items: SmallVec<[AllItem<'_, C>; 2]> = waiting
                    .limits()
                    .map(|(at, key, cost)| (&waiting.set[*at].client, key, *cost))
                    .collect();
                C::read_sent_all(&items, reply).map(Some)
            }
        };
        match all {
            // The step is to be taken again (a `NOSCRIPT`: nothing was spent).
            None => Reply::Again,
            // A key the store cannot read (nothing was written): the limits are decided one
            // by one, as `check` decides them.
            Some(Some(Err(LimitError::Store(StoreError::Corrupt)))) => Reply::Unreadable,
            Some(all) => Reply::Ended(Ended(EndedAs::All(all))),
        }
    }

    /// `waiting`'s `sent` call awaited within its bound through [`Env::timeout_from`] (for
    /// an environment that cannot bound it by name: [`Env::bound_sent`]), and made again
    /// through the client if its reply asks for it.
    pub(crate) async fn await_sent(&self, waiting: Waiting<C>, sent: Sent) -> Called<C> {
        let (started, budget) = waiting.bound();
        let reply = self.env.timeout_from(started, budget, sent).await;
        match self.read_reply(&waiting, reply) {
            Reply::Ended(ended) => Called::Ended(waiting, ended),
            Reply::Again => self.call_store(waiting).await,
            Reply::Unreadable => Called::Later(self.unreadable(waiting)),
        }
    }

    /// `waiting`'s store call made through its client (`apply`, or for several limits
    /// `apply_all`), within its bound.
    pub(crate) async fn call_store(&self, waiting: Waiting<C>) -> Called<C> {
        if !waiting.more.is_empty() {
            return self.call_together(waiting).await;
        }
        let (at, key, cost) = &waiting.first;
        let client = waiting.set[*at].client.traced(waiting.trace);
        let result = self.store_call(&client, (key, *cost), &waiting.call).await;
        drop(client);
        Called::Ended(waiting, Ended(EndedAs::One(result)))
    }

    /// [`Gateway::call_store`] for a request at several limits: their step through the
    /// client's `apply_all`, as [`Gateway::run_together`] takes it.
    async fn call_together(&self, waiting: Waiting<C>) -> Called<C> {
        let result = {
            let clients = traced_clients(&waiting.set, waiting.limits(), waiting.trace);
            let items = items_of(&clients, waiting.limits());
            let Some(step) = C::apply_all(&items, self.caller_now(&waiting.call)) else {
                // Not one step after all: decided one by one from the request's start, as
                // `check` decides them (their denial caches were consulted).
                drop(items);
                drop(clients);
                let start = waiting.start;
                return Called::Later(waiting.into_later(start));
            };
            let (started, budget) = waiting.bound();
            self.env.timeout_from(started, budget, step).await
        };
        match result {
            Some(Err(LimitError::Store(StoreError::Corrupt))) => {
                Called::Later(self.unreadable(waiting))
            }
            result => Called::Ended(waiting, Ended(EndedAs::All(result))),
        }
    }

    /// The second half of the decision on the request `req` makes, once its store call
    /// ended (`ended`): its answer, with its id and its log line (`req` is made only for the
    /// log line).
    pub(crate) fn complete<'r>(
        &self,
        mut waiting: Waiting<C>,
        ended: Ended,
        req: impl FnOnce() -> Request<'r>,
    ) -> Answer {
        // Its end records the breaker's permit.
        waiting.ended = true;
        let mut answer = std::mem::replace(&mut waiting.answer, Answer::bare(Verdict::Allow, 200));
        let mut clock = waiting.call.started;
        let fields = match ended.0 {
            EndedAs::One(result) => {
                let (at, key, cost) = &waiting.first;
                let limit = &waiting.set[*at];
                let call = &waiting.call;
                let outcome = self.layer_end(
                    (limit, key, *cost),
                    waiting.fail_closed,
                    call,
                    result,
                    &mut clock,
                );
                self.settle(limit, outcome, &mut answer)
            }
            EndedAs::All(result) => self.settle_together(&waiting, result, &mut answer, &mut clock),
        };
        self.conclude(fields, &mut answer);
        self.log_lazily(req, &mut answer, waiting.start);
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
            resume,
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
            (shadow_all, resume),
            &mut answer,
        )
        .await;
        self.log_lazily(req, &mut answer, start);
        answer
    }
}
