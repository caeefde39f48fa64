//! The request pipeline: guard → kill switch → the matching limits (by default the per-IP
//! edge limit and the per-key limit) → answer, then the request's UUIDv7 and its log line
//! (see [`crate::reqlog`] for why the id comes last).
//!
//! Runtime-agnostic: the store comes in through [`StoreClient`], time and timeouts through
//! [`Env`]. The same [`Gateway`] runs in the madsim cluster and behind the real HTTP server.
//!
//! Failure policy, per limit: a request has **one deadline**, its store timeout from when it
//! started, shared by every limit (a limit gets what the limits before it left); on an
//! error, a timeout, or while the limit's circuit breaker is open, the request is **allowed**
//! (fail open), marked as such, and counted by reason — unless the route is configured
//! fail-closed, in which case it is refused with 503. The kill switch disables limiting: every
//! request is allowed without touching the store, and counted as bypassed.
//!
//! A full store is not a failure. A store holds a bounded number of keys; when a request
//! needs a *new* key and the store has no room, that limit **denies** it (429, counted as
//! `store_full`) and spends nothing, while every existing key goes on being limited exactly.
//! Failing open instead would let anyone who can mint keys (many addresses, or one IPv6
//! network rotating through its addresses) switch limiting off for everyone; the breaker does
//! not count it either, since the store answered (nor an unreadable stored value, which fails
//! that one request open: one key's problem must not open the breaker for all). The edge
//! limit keys IPv6 clients by their
//! network ([`GatewayConfig::ipv6_prefix`], a /64 by default), so one subscriber's addresses
//! share one bucket.

mod fields;
#[cfg(feature = "http")]
pub(crate) mod halves;
mod layer;
mod log;
mod rare;
mod together;

use crate::answer::{Answer, LayerOutcome, LimitResult, Verdict};
use crate::config::GatewayConfig;
use crate::env::Env;
use crate::ip::client_ip;
use crate::limits::{
    KeyBy, Limit, LimitSet, LimitSpec, Mode, NoHeaders, PER_IP, PER_KEY, Planned, PlannedList,
    plan, unambiguous,
};
use crate::reqlog::IdGenerator;
use crate::request::{Guard, Request};
use crate::stats::Stats;
use crate::stats::{bump, describe, export_limit_zeros};
use arc_swap::{ArcSwap, ArcSwapOption};
use fields::Fields;
use ratelab_core::Nanos;
use ratelab_core::headers::{PolicyFields, PolicyName};
use ratelab_store::StoreClient;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use uuid::Uuid;

/// The gateway: named limits over store clients, with the failure policy above.
#[derive(Debug)]
pub struct Gateway<C, E> {
    config: GatewayConfig,
    limits: ArcSwap<LimitSet<C>>,
    env: E,
    kill_switch: AtomicBool,
    shadow: AtomicBool,
    /// `ratelab_requests_total` for `allowed` and `denied`, looked up once (and again by
    /// [`Gateway::export_zeros`]).
    decisions: ArcSwapOption<[metrics::Counter; 2]>,
    stats: Stats,
    ids: Mutex<IdGenerator>,
}

impl<C: StoreClient, E: Env> Gateway<C, E> {
    /// A gateway with the classic pair of limits, each over its own client: the per-IP edge
    /// limit ([`PER_IP`], every request by client address), then the per-key limit
    /// ([`PER_KEY`], requests with an `x-api-key`, by key).
    pub fn new(config: GatewayConfig, edge: Option<C>, per_key: Option<C>, env: E) -> Self {
        let limit = |name: &str, key_by, client| {
            let name = PolicyName::new(name).expect("static policy names are valid");
            let limit = Limit::new(LimitSpec::new(name, key_by), client, config.breaker);
            Arc::new(limit.with_denial_cache(config.denial_cache))
        };
        let set = edge
            .map(|c| limit(PER_IP, KeyBy::ClientIp, c))
            .into_iter()
            .chain(per_key.map(|c| limit(PER_KEY, KeyBy::ApiKey, c)))
            .collect();
        Self::with_limits(config, set, env)
    }

    /// A gateway applying `limits`, in order.
    pub fn with_limits(config: GatewayConfig, limits: LimitSet<C>, env: E) -> Self {
        // Without a configured seed, seed from the random low 64 bits of an OS-random v7 UUID.
        let seed = config
            .id_seed
            .unwrap_or_else(|| Uuid::now_v7().as_u128() as u64);
        Gateway {
            ids: Mutex::new(IdGenerator::new(seed)),
            limits: ArcSwap::from_pointee(limits),
            config,
            env,
            kill_switch: AtomicBool::new(false),
            shadow: AtomicBool::new(false),
            decisions: ArcSwapOption::empty(),
            stats: Stats::default(),
        }
    }

    /// The limits being applied.
    pub fn limits(&self) -> Arc<LimitSet<C>> {
        self.limits.load_full()
    }

    /// Applies `limits` from the next request on; requests already being decided finish
    /// against the set they started with. Their counters are exported at 0 (see
    /// [`Gateway::export_zeros`]).
    pub fn replace_limits(&self, limits: LimitSet<C>) {
        export_limit_zeros(&limits);
        self.limits.store(Arc::new(limits));
    }

    /// Exports every per-limit series of `limits` at 0, for limits a front end holds outside
    /// the gateway's own set (Envoy's rate limit service's descriptor limits).
    pub fn export_zeros_for(&self, limits: &LimitSet<C>) {
        export_limit_zeros(limits);
    }

    /// Registers every counter whose label values are known in advance (the decisions, each
    /// limit's fail-open reasons, full-store refusals and shadow denials, the breakers'
    /// transitions) at 0, so a dashboard or an alert on their rate has a series to watch
    /// before the first event. [`crate::http::app`] and the HTTP front end
    /// ([`crate::front::FrontEnd::new`]) call it; an app that embeds the tower
    /// layer calls it once its own metrics recorder is installed.
    pub fn export_zeros(&self) {
        for decision in ["allowed", "denied", "rejected", "bypassed", "fail_closed"] {
            metrics::counter!("ratelab_requests_total", "decision" => decision).increment(0);
        }
        describe();
        self.refresh_decisions();
        export_limit_zeros(&self.limits.load());
    }

    /// Counts an answered request as allowed or denied, on counters looked up on first use
    /// rather than at every request.
    fn count_decision(&self, denied: bool) {
        let at = usize::from(denied);
        match &*self.decisions.load() {
            Some(c) => c[at].increment(1),
            None => self.refresh_decisions()[at].increment(1),
        }
    }

    /// Looks the request counters up in the recorder installed now.
    fn refresh_decisions(&self) -> Arc<[metrics::Counter; 2]> {
        let c = Arc::new(
            ["allowed", "denied"]
                .map(|d| metrics::counter!("ratelab_requests_total", "decision" => d)),
        );
        self.decisions.store(Some(c.clone()));
        c
    }

    /// Turns limiting off (`true`) or back on.
    pub fn set_kill_switch(&self, on: bool) {
        self.kill_switch.store(on, Ordering::SeqCst);
        metrics::gauge!("ratelab_kill_switch").set(if on { 1.0 } else { 0.0 });
    }

    /// Whether limiting is off.
    pub fn kill_switch(&self) -> bool {
        self.kill_switch.load(Ordering::SeqCst)
    }

    /// Turns the global shadow switch on (`true`: every limit is evaluated and counted, and
    /// nothing is denied) or off (each limit in its own mode).
    pub fn set_shadow(&self, on: bool) {
        self.shadow.store(on, Ordering::SeqCst);
        metrics::gauge!("ratelab_shadow").set(if on { 1.0 } else { 0.0 });
    }

    /// Whether the global shadow switch is on.
    pub fn shadow(&self) -> bool {
        self.shadow.load(Ordering::SeqCst)
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The settings.
    pub fn config(&self) -> &GatewayConfig {
        &self.config
    }

    /// The environment.
    pub fn env(&self) -> &E {
        &self.env
    }

    fn fails_closed(&self, route: &str) -> bool {
        !self.config.fail_open
            || self
                .config
                .fail_closed_routes
                .iter()
                .any(|p| crate::limits::starts_with_ignoring_case(route, p))
    }

    /// Decides `req`, then mints its id and emits its log line. (A block, not an `async fn`:
    /// an `async fn` keeps its argument twice, as the argument and as the local it is moved
    /// into, and the request is a hundred bytes.)
    #[allow(
        clippy::manual_async_fn,
        reason = "the request is held once, see above"
    )]
    pub fn check<'a>(
        &'a self,
        req: Request<'a>,
        guard: Option<&'a dyn Guard>,
    ) -> impl Future<Output = Answer> + Send + 'a {
        async move {
            // One monotonic reading starts the request: its deadline and the time in its id.
            let start = self.env.monotonic();
            let mut answer = self.decide(&req, guard, start).await;
            self.log(&req, &mut answer, start);
            answer
        }
    }

    /// Refuses a request the HTTP layer could not read (400, with `reason`), counted and logged
    /// like any other.
    pub fn refuse(&self, req: Request<'_>, reason: String) -> Answer {
        self.refuse_with(req, reason, 400)
    }

    /// [`Gateway::refuse`] with another status than 400 (431 for a head past its bound).
    pub fn refuse_with(&self, req: Request<'_>, reason: String, status: u16) -> Answer {
        bump(&self.stats.bad_request);
        let mut answer = Answer::bare(Verdict::BadRequest(reason), status);
        self.log(&req, &mut answer, self.env.monotonic());
        answer
    }

    /// Decides `req` (borrowed: [`Gateway::check`] keeps it for the log line, and a copy
    /// here would be kept in both futures).
    async fn decide(&self, req: &Request<'_>, guard: Option<&dyn Guard>, start: Nanos) -> Answer {
        let mut answer = Answer::bare(Verdict::Allow, 200);
        let set = self.limits.load_full();
        if let Some((planned, shadow_all)) = self.prepare(&set, req, guard, &mut answer) {
            let fail_closed = self.fails_closed(req.route);
            self.decide_planned(
                &planned,
                (req.trace, fail_closed, start),
                (shadow_all, None),
                &mut answer,
            )
            .await;
        }
        answer
    }

    /// Everything before `req`'s store calls, against `set`, the limits it started with: its
    /// client's address, its key, the guard, the kill switch, its headers' one spelling, its
    /// planned limits (with whether the global shadow switch is on). `None` when `answer` is
    /// complete without them (refused, or let through by the kill switch).
    fn prepare<'s>(
        &self,
        set: &'s LimitSet<C>,
        req: &Request<'_>,
        guard: Option<&dyn Guard>,
        answer: &mut Answer,
    ) -> Option<(PlannedList<'s, C>, bool)> {
        let bad = |a: &mut Answer, reason: String| {
            rare::bad_request(&self.stats);
            a.status = 400;
            a.verdict = Verdict::BadRequest(reason);
        };
        let ip = match client_ip(
            req.peer,
            self.config.client_ip_header,
            req.headers,
            &self.config.trusted_proxies,
        ) {
            Ok(ip) => ip,
            Err(e) => {
                bad(answer, e);
                return None;
            }
        };
        answer.client_ip = Some(ip);
        let api_key = match req.api_key.map(std::str::from_utf8) {
            None => None,
            Some(Ok(k)) => Some(k),
            Some(Err(_)) => {
                bad(answer, "x-api-key is not valid UTF-8".into());
                return None;
            }
        };
        if let Some(reason) = guard.and_then(|g| g.reject(api_key)) {
            rare::rejected(&self.stats);
            answer.status = 403;
            answer.verdict = Verdict::Rejected(reason);
            return None;
        }
        if self.kill_switch() {
            rare::bypassed(&self.stats);
            answer.bypassed = true;
            return None;
        }
        // Planned against the set this request started with, before any store call: an
        // unreadable key or cost at an enforced limit refuses the request with nothing spent
        // anywhere (a shadow limit that cannot read its own skips the request instead).
        if let Err(e) = unambiguous(set, req.headers) {
            bad(answer, e);
            return None;
        }
        let shadow_all = self.shadow();
        match plan(set, req, ip, api_key, self.config.ipv6_prefix, shadow_all) {
            Ok(p) => Some((p, shadow_all)),
            Err(e) => {
                bad(answer, e);
                None
            }
        }
    }

    /// Decides a request whose limits `planned` were planned by its front end rather than
    /// from an HTTP request (Envoy's rate limit service maps descriptors to limits itself):
    /// the same steps as [`Gateway::check`] after its planning, then the id and the log line.
    /// `peer` is the caller's address and `route` names the request, for the log; `trace` is
    /// carried by every store call; `fail_closed` alone decides whether an unreachable store
    /// is a [`Verdict::Unavailable`] (the HTTP settings `fail_open` and `fail_closed_routes`
    /// do not apply). Each result's
    /// [`LimitResult::planned`] is its position in `planned`.
    pub async fn check_planned(
        &self,
        planned: &[Planned<'_, C>],
        (peer, route): (IpAddr, &str),
        trace: u64,
        fail_closed: bool,
    ) -> Answer {
        let req = Request {
            peer,
            api_key: None,
            route,
            method: "",
            headers: &NoHeaders,
            cost: 1,
            trace,
        };
        let start = self.env.monotonic();
        let mut answer = Answer::bare(Verdict::Allow, 200);
        answer.client_ip = Some(peer);
        if self.kill_switch() {
            rare::bypassed(&self.stats);
            answer.bypassed = true;
        } else {
            self.decide_planned(
                planned,
                (trace, fail_closed, start),
                (self.shadow(), None),
                &mut answer,
            )
            .await;
        }
        self.log(&req, &mut answer, start);
        answer
    }

    /// Runs `planned` and completes `answer`: its verdict, its fields, the counters.
    /// (`answer` is borrowed, not moved in and out: a moved one is kept twice in the future.)
    /// `resume` as for [`Gateway::run_limits`].
    async fn decide_planned(
        &self,
        planned: &[Planned<'_, C>],
        (trace, fail_closed, start): (u64, bool, Nanos),
        (shadow_all, resume): (bool, Option<Nanos>),
        answer: &mut Answer,
    ) {
        // Each planned limit leaves one result: made at its size, not grown on the first push.
        reserve(&mut answer.limits, planned.len());
        let fields = self
            .run_limits(
                planned,
                (trace, fail_closed, start),
                (shadow_all, resume),
                answer,
            )
            .await;
        self.conclude(fields, answer);
    }

    /// Completes `answer` once its limits ran, the enforced ones' `fields` rendered: its
    /// fields, the counters.
    fn conclude(&self, fields: Option<Fields>, answer: &mut Answer) {
        if answer.verdict == Verdict::Unavailable {
            return;
        }
        if let Some(fields) = fields {
            reserve(&mut answer.headers, 3);
            answer.headers.push(("ratelimit-policy", fields.policies));
            answer.headers.push(("ratelimit", fields.ratelimit));
            if answer.verdict == Verdict::Deny {
                let retry = fields.retry_after.unwrap_or(1);
                answer.headers.push(("retry-after", retry.to_string()));
            }
        } else if answer.verdict == Verdict::Deny && self.config.headers {
            answer.headers.push(("retry-after", "1".into()));
        }
        if answer.verdict == Verdict::Deny {
            bump(&self.stats.denied);
            self.count_decision(true);
        } else {
            bump(&self.stats.allowed);
            self.count_decision(false);
        }
    }

    /// Runs the planned limits: first each enforced limit's denial cache, which answers a
    /// key the store denied until its wait is over without any store call; then the enforced
    /// limits together in one all-or-nothing step when their store can ([`together`]), else
    /// one by one in order until one denies (the later ones are not consulted and spend
    /// nothing); then the shadow ones, each on its own, on every request they match. A
    /// fail-closed request that cannot reach its store is a 503.
    /// Returns the enforced limits' fields, rendered, when any of them decided. `resume`: the
    /// end (monotonic) of an all-or-nothing step already taken over the enforced limits, which
    /// could not read a key and wrote nothing (the front's second half): they are decided one
    /// by one from there, the denial caches consulted before that step.
    async fn run_limits(
        &self,
        planned: &[Planned<'_, C>],
        (trace, fail_closed, start): (u64, bool, Nanos),
        (shadow_all, resume): (bool, Option<Nanos>),
        answer: &mut Answer,
    ) -> Option<Fields> {
        let deadline = start.saturating_add(Nanos::from(self.config.timeout));
        let shadow = |p: &Planned<'_, C>| shadow_all || p.limit.spec.mode == Mode::Shadow;
        let enforced = || planned.iter().enumerate().filter(|(_, p)| !shadow(p));
        let mut fields: Option<Fields> = None;
        let mut denied = false;
        // The latest monotonic reading, each limit's start: the request's, then each store
        // call's end (`run_layer`).
        let mut clock = start;
        let together = match resume {
            Some(end) => {
                clock = end;
                None
            }
            None => {
                if let Some(fields) = self.cached(enforced(), start, answer) {
                    return fields;
                }
                // One limit alone is decided on its own: no group to gather.
                let group: Vec<&Planned<'_, C>> = match enforced().nth(1) {
                    Some(_) => enforced().map(|(_, p)| p).collect(),
                    None => Vec::new(),
                };
                self.run_together(&group, (trace, fail_closed), (deadline, &mut clock))
                    .await
            }
        };
        if let Some(outcomes) = together {
            let limits = enforced().map(|(i, p)| (i, &**p.limit));
            denied = self.account_together(limits, outcomes, answer, &mut fields)?;
        } else {
            for (i, p) in enforced() {
                let outcome = self
                    .run_layer(
                        (p.limit, &p.key, p.cost),
                        (trace, fail_closed),
                        (deadline, &mut clock),
                    )
                    .await;
                match self.account((i, p.limit), outcome, false, answer, &mut fields) {
                    Step::Unavailable => return None,
                    Step::Refused => {
                        denied = true;
                        break;
                    }
                    Step::Go => {}
                }
            }
        }
        // A shadow limit never refuses a request: not for its quota, nor for its store.
        for (i, p) in planned.iter().enumerate().filter(|(_, p)| shadow(p)) {
            let outcome = self
                .run_layer(
                    (p.limit, &p.key, p.cost),
                    (trace, false),
                    (deadline, &mut clock),
                )
                .await;
            self.account((i, p.limit), outcome, true, answer, &mut fields);
        }
        if denied {
            answer.verdict = Verdict::Deny;
            answer.status = 429;
        }
        fields
    }

    /// Records the outcomes of one all-or-nothing step at `limits` (each with its place in the
    /// plan, in order) in the answer, the counters and `fields`: whether any refused the
    /// request, or `None` when one made it unavailable (a fail-closed store error).
    fn account_together<'l>(
        &self,
        limits: impl Iterator<Item = (usize, &'l Limit<C>)>,
        outcomes: Vec<LayerOutcome>,
        answer: &mut Answer,
        fields: &mut Option<Fields>,
    ) -> Option<bool>
    where
        C: 'l,
    {
        let mut denied = false;
        for (limit, outcome) in limits.zip(outcomes) {
            match self.account(limit, outcome, false, answer, fields) {
                Step::Unavailable => return None,
                Step::Refused => denied = true,
                Step::Go => {}
            }
        }
        Some(denied)
    }

    /// The first of the `enforced` limits (with their places in the plan) whose denial cache
    /// holds its key, if any: then the request is denied there, with no store call and
    /// nothing spent at any limit (a request the store denies spends nothing), and its
    /// fields are returned. Answered without any store call, its shadow limits are not
    /// consulted either.
    fn cached<'p, 's: 'p>(
        &self,
        mut enforced: impl Iterator<Item = (usize, &'p Planned<'s, C>)>,
        start: Nanos,
        answer: &mut Answer,
    ) -> Option<Option<Fields>>
    where
        C: 's,
    {
        let (i, limit, decision) = enforced.find_map(|(i, p)| {
            let d = p.limit.cache.as_ref()?.lookup(&p.key, p.cost, start)?;
            Some((i, p.limit, d))
        })?;
        rare::denial_cache_hit(&self.stats, &limit.label);
        let mut fields = None;
        self.account(
            (i, limit),
            LayerOutcome::Cached(decision),
            false,
            answer,
            &mut fields,
        );
        answer.verdict = Verdict::Deny;
        answer.status = 429;
        Some(fields)
    }

    /// Records one limit's outcome in the answer, the counters and (for an enforced limit)
    /// the response fields; what it means for the request.
    fn account(
        &self,
        (planned, limit): (usize, &Limit<C>),
        outcome: LayerOutcome,
        shadow: bool,
        answer: &mut Answer,
        fields: &mut Option<Fields>,
    ) -> Step {
        answer.limits.push(LimitResult {
            name: limit.name_arc(),
            outcome,
            shadow,
            planned,
        });
        let refused = match outcome {
            LayerOutcome::Decided { decision, .. } | LayerOutcome::Cached(decision) => {
                if self.config.headers && !shadow {
                    let f = limit.policy_fields();
                    let all = fields.get_or_insert_with(Fields::default);
                    all.add(
                        f.policy(),
                        f.ratelimit(&decision, self.config.ratelimit_fields),
                    );
                    if !decision.allowed {
                        all.retry_after = PolicyFields::retry_after(&decision).max(all.retry_after);
                    }
                }
                !decision.allowed
            }
            LayerOutcome::StoreFull => {
                if !shadow {
                    rare::store_full(&self.stats, &limit.label);
                }
                true
            }
            LayerOutcome::FailedOpen(reason) => {
                rare::failed_open(&self.stats, reason, &limit.label);
                false
            }
            LayerOutcome::FailedClosed(_) => {
                rare::failed_closed(&self.stats);
                answer.verdict = Verdict::Unavailable;
                answer.status = 503;
                answer.headers.push(("retry-after", "1".into()));
                return Step::Unavailable;
            }
        };
        if refused && shadow {
            rare::shadow_denied(&self.stats, &limit.label);
            Step::Go
        } else if refused {
            Step::Refused
        } else {
            Step::Go
        }
    }
}

/// Room for `n` more in `v`: an empty one made at that size (a fresh allocation, which
/// growing an empty vector takes a slower path to), any other grown.
fn reserve<T>(v: &mut Vec<T>, n: usize) {
    if v.capacity() == 0 {
        *v = Vec::with_capacity(n);
    } else {
        v.reserve_exact(n);
    }
}

/// What one limit's outcome means for the request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    /// Go on.
    Go,
    /// An enforced limit refused it (429).
    Refused,
    /// A fail-closed route could not reach the store (503).
    Unavailable,
}
