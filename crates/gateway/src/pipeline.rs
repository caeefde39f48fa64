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

use crate::breaker::{BreakerConfig, Permit, Transition};
use crate::ip::{DEFAULT_IPV6_PREFIX, Forwarding, IpNet, client_ip};
use crate::limits::{
    Headers, KeyBy, Limit, LimitSet, LimitSpec, Mode, PER_IP, PER_KEY, Planned, plan,
};
use crate::reqlog::{IdGenerator, REQUEST_LOG_TARGET};
use arc_swap::{ArcSwap, ArcSwapOption};

mod together;
use core::future::Future;
use ratelab_core::Decision;
use ratelab_core::Nanos;
use ratelab_core::headers::{FieldsDraft, PolicyFields, PolicyName};
use ratelab_store::{Key, LimitError, Path, StoreClient, StoreError, TimeSource, decide_remote};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// Time and timeouts, from whatever runtime hosts the gateway.
pub trait Env: Send + Sync {
    /// The gateway's clock (the caller time of [`TimeSource::Caller`], breaker cooldowns).
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
    /// ([`StoreClient::IMMEDIATE`]) completes in one poll ([`crate::front`] then decides it
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
}

/// A pre-limit check (the bloom-filter guard slot): `Some(reason)` rejects the request before
/// any limit is consulted.
pub trait Guard: Send + Sync {
    /// Checks the request's API key, if any.
    fn reject(&self, api_key: Option<&str>) -> Option<String>;
}

pub use ratelab_store::FailReason;

/// How one limit ended for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LayerOutcome {
    /// The store decided.
    Decided {
        /// The decision.
        decision: Decision,
        /// The store time of the deciding operation.
        decided_at: Nanos,
    },
    /// The store failed and the request was let through.
    FailedOpen(FailReason),
    /// The store failed and the route fails closed.
    FailedClosed(FailReason),
    /// The store had no room for this new key: denied, nothing spent.
    StoreFull,
    /// Denied by the gateway's local denial cache, without a store call: the store denied
    /// this key until later ([`crate::denial_cache`]). The decision is the store's, its waits
    /// counted down.
    Cached(Decision),
}

impl LayerOutcome {
    /// A store failure's outcome: refused on a fail-closed route, let through otherwise.
    pub(crate) fn failed(fail_closed: bool, reason: FailReason) -> LayerOutcome {
        if fail_closed {
            LayerOutcome::FailedClosed(reason)
        } else {
            LayerOutcome::FailedOpen(reason)
        }
    }

    /// Whether the limit was exceeded: its store decided and denied (a store with
    /// no room for a new key is the server's limit, not the client's quota).
    pub fn over_limit(&self) -> bool {
        matches!(self, LayerOutcome::Decided { decision, .. } if !decision.allowed)
            || matches!(self, LayerOutcome::Cached(_))
    }
}

/// The verdict.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Let it through (200 from the demo server).
    Allow,
    /// Over a limit: 429.
    Deny,
    /// A fail-closed route while the store is failing: 503.
    Unavailable,
    /// Malformed input: 400, with the reason.
    BadRequest(String),
    /// Rejected by the guard: 403, with the reason.
    Rejected(String),
}

/// One request, as the pipeline sees it.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// The connection's peer address.
    pub peer: IpAddr,
    /// Forwarding headers, believed only from trusted proxies.
    pub forwarding: Forwarding<'a>,
    /// The raw `x-api-key` header, if present.
    pub api_key: Option<&'a [u8]>,
    /// The request path (for fail-closed routes and limit selectors).
    pub route: &'a str,
    /// The request method, upper case (for limit selectors).
    pub method: &'a str,
    /// The request's headers (for limit selectors, keys and costs).
    pub headers: &'a dyn Headers,
    /// Cost in quota units (1 for an HTTP request).
    pub cost: u64,
    /// Trace id carried by every store call for this request.
    pub trace: u64,
}

/// The answer to one request.
#[derive(Clone, Debug)]
pub struct Answer {
    /// Allow, deny, …
    pub verdict: Verdict,
    /// The HTTP status the verdict maps to.
    pub status: u16,
    /// Response headers: `RateLimit-Policy`, `RateLimit`, `Retry-After` as applicable.
    pub headers: Vec<(&'static str, String)>,
    /// The resolved client address.
    pub client_ip: Option<IpAddr>,
    /// The outcome of every limit that ran, in order.
    pub limits: Vec<LimitResult>,
    /// Whether the kill switch let it through.
    pub bypassed: bool,
    /// The request's UUIDv7, minted when it was decided; its log line carries it too.
    pub id: Uuid,
}

/// How one limit ended for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LimitResult {
    /// The limit's name.
    pub name: Arc<str>,
    /// Its outcome.
    pub outcome: LayerOutcome,
    /// Whether it was only measured (its own shadow mode, or the global shadow switch): its
    /// denial let the request through.
    pub shadow: bool,
    /// Its position in the request's plan (the order [`Gateway::check_planned`] was given).
    pub planned: usize,
}

impl Answer {
    /// The outcome of the limit called `name`, if it ran.
    pub fn outcome(&self, name: &str) -> Option<LayerOutcome> {
        self.limits
            .iter()
            .find(|r| &*r.name == name)
            .map(|r| r.outcome)
    }

    /// The names of the enforced limits whose quota the request exceeded, as the
    /// `RateLimit-Policy` field names them.
    pub fn violated_policies(&self) -> Vec<&str> {
        self.limits
            .iter()
            .filter(|r| !r.shadow && r.outcome.over_limit())
            .map(|r| &*r.name)
            .collect()
    }
}

impl Answer {
    /// An answer with no limit run, no headers and no id yet.
    fn bare(verdict: Verdict, status: u16) -> Answer {
        Answer {
            verdict,
            status,
            headers: Vec::new(),
            client_ip: None,
            limits: Vec::new(),
            bypassed: false,
            id: Uuid::nil(),
        }
    }
}

/// Gateway settings.
#[derive(Clone, Debug)]
pub struct GatewayConfig {
    /// Store access path (production: atomic).
    pub path: Path,
    /// Whose clock transitions read.
    pub time_source: TimeSource,
    /// Per-call timeout.
    pub timeout: Duration,
    /// Circuit breaker, per limit.
    pub breaker: BreakerConfig,
    /// Proxies whose forwarding headers are believed.
    pub trusted_proxies: Vec<IpNet>,
    /// Route prefixes that fail closed.
    pub fail_closed_routes: Vec<String>,
    /// Whether store trouble fails open (the default) on routes not listed as fail-closed.
    pub fail_open: bool,
    /// This gateway's name in the request log.
    pub name: String,
    /// Seed of the request ids' random bits; `None` draws one from the OS.
    pub id_seed: Option<u64>,
    /// The edge limit counts IPv6 clients by this prefix length (1–128; default 64).
    pub ipv6_prefix: u8,
    /// Keys each limit's local denial cache holds (0, the default: no cache). A key the store
    /// denied is then answered 429 by the gateway until the store's wait is over, without a
    /// store call ([`crate::denial_cache`]).
    pub denial_cache: usize,
    /// Whether answers carry the `RateLimit-Policy`, `RateLimit` and `Retry-After` headers
    /// (default true). A caller that never reads them (a simulation whose clients ignore them)
    /// can skip rendering them; decisions and counters are the same either way.
    pub headers: bool,
    /// Which draft the RateLimit fields follow (default draft-11;
    /// [`ratelab_core::headers`]).
    pub ratelimit_fields: FieldsDraft,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            path: Path::Atomic,
            time_source: TimeSource::Store,
            timeout: Duration::from_millis(50),
            breaker: BreakerConfig::default(),
            trusted_proxies: Vec::new(),
            fail_closed_routes: Vec::new(),
            fail_open: true,
            name: "gateway".into(),
            id_seed: None,
            ipv6_prefix: DEFAULT_IPV6_PREFIX,
            denial_cache: 0,
            headers: true,
            ratelimit_fields: FieldsDraft::default(),
        }
    }
}

/// Counters, exact and lock-free; also exported through the `metrics` facade.
#[derive(Debug, Default)]
pub struct Stats {
    /// Requests let through by the limits: admitted, or admitted because a limit failed open.
    pub allowed: AtomicU64,
    /// Requests denied (429), for any reason.
    pub denied: AtomicU64,
    /// Of those, requests denied because a limit's store had no room for a new key.
    pub denied_store_full: AtomicU64,
    /// Layers that failed open because of a store error.
    pub fail_open_error: AtomicU64,
    /// … a timeout.
    pub fail_open_timeout: AtomicU64,
    /// … an open breaker.
    pub fail_open_breaker: AtomicU64,
    /// Requests refused because a fail-closed route could not reach the store.
    pub fail_closed: AtomicU64,
    /// Requests let through by the kill switch.
    pub bypassed: AtomicU64,
    /// Requests a limit's denial cache answered, without a store call.
    pub denial_cache_hits: AtomicU64,
    /// Denials by a shadow limit (or under the global shadow switch), each let through.
    pub shadow_denied: AtomicU64,
    /// Requests rejected as malformed.
    pub bad_request: AtomicU64,
    /// Requests rejected by the guard.
    pub rejected: AtomicU64,
    /// Breaker openings.
    pub breaker_opened: AtomicU64,
    /// Breaker closings.
    pub breaker_closed: AtomicU64,
}

/// A snapshot of [`Stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// See [`Stats`].
    pub allowed: u64,
    /// See [`Stats`].
    pub denied: u64,
    /// See [`Stats`].
    pub denied_store_full: u64,
    /// See [`Stats`].
    pub fail_open_error: u64,
    /// See [`Stats`].
    pub fail_open_timeout: u64,
    /// See [`Stats`].
    pub fail_open_breaker: u64,
    /// See [`Stats`].
    pub fail_closed: u64,
    /// See [`Stats`].
    pub bypassed: u64,
    /// See [`Stats`].
    pub denial_cache_hits: u64,
    /// See [`Stats`].
    pub shadow_denied: u64,
    /// See [`Stats`].
    pub bad_request: u64,
    /// See [`Stats`].
    pub rejected: u64,
    /// See [`Stats`].
    pub breaker_opened: u64,
    /// See [`Stats`].
    pub breaker_closed: u64,
}

impl StatsSnapshot {
    /// Fail-open limit outcomes of every reason.
    pub fn fail_open(&self) -> u64 {
        self.fail_open_error + self.fail_open_timeout + self.fail_open_breaker
    }
}

impl Stats {
    /// Reads every counter.
    pub fn snapshot(&self) -> StatsSnapshot {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            allowed: r(&self.allowed),
            denied: r(&self.denied),
            denied_store_full: r(&self.denied_store_full),
            fail_open_error: r(&self.fail_open_error),
            fail_open_timeout: r(&self.fail_open_timeout),
            fail_open_breaker: r(&self.fail_open_breaker),
            fail_closed: r(&self.fail_closed),
            bypassed: r(&self.bypassed),
            denial_cache_hits: r(&self.denial_cache_hits),
            shadow_denied: r(&self.shadow_denied),
            bad_request: r(&self.bad_request),
            rejected: r(&self.rejected),
            breaker_opened: r(&self.breaker_opened),
            breaker_closed: r(&self.breaker_closed),
        }
    }
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

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

/// The `# HELP` text and unit of every metric the gateway exports.
fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_counter!("ratelab_requests_total", "Requests answered, by decision.");
    describe_counter!(
        "ratelab_fail_open_total",
        "Limit checks let through because the limit's store failed, by reason and limit."
    );
    describe_counter!(
        "ratelab_store_full_total",
        "Requests denied because a limit's store had no room for a new key."
    );
    describe_counter!(
        "ratelab_denial_cache_hits_total",
        "Requests a limit's local denial cache answered with 429, without a store call."
    );
    describe_counter!(
        "ratelab_shadow_denied_total",
        "Requests a limit would have denied, let through because it is in shadow mode."
    );
    describe_counter!(
        "ratelab_breaker_transitions_total",
        "A limit's circuit breaker opening or closing."
    );
    describe_gauge!(
        "ratelab_kill_switch",
        "1 while the kill switch lets everything through."
    );
    describe_gauge!(
        "ratelab_shadow",
        "1 while the global shadow switch only measures every limit."
    );
    // The store-latency histogram is rendered apart: crate::latency.
}

/// Each limit's counters at 0.
fn export_limit_zeros<C>(limits: &LimitSet<C>) {
    for limit in limits {
        let label = || limit.label.clone();
        for to in ["open", "closed"] {
            metrics::counter!("ratelab_breaker_transitions_total", "to" => to, "limit" => label())
                .increment(0);
        }
        for reason in ratelab_store::FailReason::ALL {
            metrics::counter!("ratelab_fail_open_total", "reason" => reason.name(), "limit" => label())
                .increment(0);
        }
        metrics::counter!("ratelab_store_full_total", "limit" => label()).increment(0);
        metrics::counter!("ratelab_shadow_denied_total", "limit" => label()).increment(0);
        if limit.cache.is_some() {
            metrics::counter!("ratelab_denial_cache_hits_total", "limit" => label()).increment(0);
        }
    }
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
                .any(|p| route.starts_with(p.as_str()))
    }

    /// What the limits before `now` (monotonic) left of the request's timeout, which ends at
    /// `deadline`; never more than the timeout itself, even if the monotonic clock misbehaves.
    fn budget(&self, now: Nanos, deadline: Nanos) -> Duration {
        Duration::from(deadline.saturating_sub(now)).min(self.config.timeout)
    }

    /// Runs one limit: breaker, store call bounded by the request's `deadline` (on
    /// [`Env::monotonic`]), failure policy.
    async fn run_layer(
        &self,
        layer: &Limit<C>,
        key: &Key,
        cost: u64,
        trace: u64,
        fail_closed: bool,
        deadline: Nanos,
    ) -> LayerOutcome {
        let fail = |reason| LayerOutcome::failed(fail_closed, reason);
        // The decision's time is the gateway's clock; the breaker's cooldown and the latency
        // are intervals, on the monotonic clock: a wall clock set back must not hold the
        // breaker open.
        // The send time first: a denial cached from this call must never outlast the store's
        // wait, which runs from a decision made at or after it.
        let started = self.env.monotonic();
        let budget = self.budget(started, deadline);
        if budget.is_zero() {
            // Spent before this limit: the store is not called, and the breaker, which counts
            // the store's answers, learns nothing.
            return fail(FailReason::Timeout);
        }
        // The gateway's clock is read only when the decision runs on it: on the store's
        // clock (the default) the store reads its own.
        let caller = self.config.time_source == TimeSource::Caller;
        let now = if caller { self.env.now() } else { Nanos::ZERO };
        let permit = layer.breaker.lock().expect("breaker").permit(started);
        if permit == Permit::Skip {
            return fail(FailReason::BreakerOpen);
        }
        let client = layer.client.traced(trace);
        let call = decide_remote(
            &*client,
            self.config.path,
            self.config.time_source,
            key,
            now,
            cost,
        );
        let result = self.env.timeout(budget, call).await;
        let end = self.env.monotonic();
        let (outcome, ok) = match result {
            Some(Ok(o)) => (
                LayerOutcome::Decided {
                    decision: o.decision,
                    decided_at: o.decided_at,
                },
                true,
            ),
            Some(Err(e)) => error_outcome(e, || if caller { now } else { self.env.now() }, fail),
            None => (fail(FailReason::Timeout), false),
        };
        self.finish(layer, permit, started, end, ok);
        remember(layer, key, cost, started, &outcome);
        outcome
    }

    /// After a store call for `limit` from `started` to `end`: its latency, and its breaker's
    /// record (the breaker counts the store's health: a decision, or an answer about one key,
    /// full or unreadable, is a store that works).
    fn finish(&self, limit: &Limit<C>, permit: Permit, started: Nanos, end: Nanos, ok: bool) {
        limit.record_latency(end.saturating_sub(started).as_u64());
        let transition = limit
            .breaker
            .lock()
            .expect("breaker")
            .record(end, permit, ok);
        match transition {
            Transition::Opened => {
                bump(&self.stats.breaker_opened);
                metrics::counter!("ratelab_breaker_transitions_total", "to" => "open", "limit" => limit.label.clone())
                    .increment(1);
            }
            Transition::Closed => {
                bump(&self.stats.breaker_closed);
                metrics::counter!("ratelab_breaker_transitions_total", "to" => "closed", "limit" => limit.label.clone())
                    .increment(1);
            }
            Transition::None => {}
        }
    }

    /// Decides `req`, then mints its id and emits its log line.
    pub async fn check(&self, req: Request<'_>, guard: Option<&dyn Guard>) -> Answer {
        // One monotonic reading starts the request: its deadline and the time in its id.
        let start = self.env.monotonic();
        let mut answer = self.decide(req, guard, start).await;
        self.log(&req, &mut answer, start);
        answer
    }

    /// Refuses a request the HTTP layer could not read (400, with `reason`), counted and logged
    /// like any other.
    pub fn refuse(&self, req: Request<'_>, reason: String) -> Answer {
        bump(&self.stats.bad_request);
        let mut answer = Answer::bare(Verdict::BadRequest(reason), 400);
        self.log(&req, &mut answer, self.env.monotonic());
        answer
    }

    /// Mints the answer's id and emits its log line, in one critical section: ids are issued
    /// and written in the same order, so the log is sorted by id.
    /// The id's time is Unix time at `start`, the request's monotonic start
    /// ([`Env::unix_at`]).
    fn log(&self, req: &Request<'_>, answer: &mut Answer, start: Nanos) {
        let (decision, layer, fail_open, remaining) = Self::summary(answer);
        // Only a key the pipeline accepted is logged (bounded, no control characters): every
        // answer but a 400 got past the key's validation.
        let key = req
            .api_key
            .filter(|_| !matches!(answer.verdict, Verdict::BadRequest(_)))
            .and_then(|k| std::str::from_utf8(k).ok());
        let ip = answer.client_ip.unwrap_or(req.peer);
        let mut ids = self.ids.lock().unwrap_or_else(|e| e.into_inner());
        let id = ids.next(self.env.unix_at(start).as_u64() / 1_000_000);
        tracing::info!(
            target: REQUEST_LOG_TARGET,
            id = %id,
            gateway = self.config.name.as_str(),
            trace = req.trace,
            ip = %ip,
            key,
            decision,
            layer,
            fail_open,
            status = answer.status,
            remaining,
        );
        drop(ids);
        answer.id = id;
    }

    /// The log's decision, the limit it rests on, the fail-open reason, the quota left.
    /// Shadow limits never decide a request, so the log names only enforced ones.
    fn summary(
        a: &Answer,
    ) -> (
        &'static str,
        Option<&str>,
        Option<&'static str>,
        Option<u64>,
    ) {
        match &a.verdict {
            Verdict::Rejected(_) => return ("rejected", None, None, None),
            Verdict::BadRequest(_) => return ("bad_request", None, None, None),
            _ if a.bypassed => return ("bypassed", None, None, None),
            _ => {}
        }
        let enforced = || a.limits.iter().filter(|r| !r.shadow);
        if let Some((r, LayerOutcome::FailedClosed(reason))) = enforced()
            .map(|r| (r, r.outcome))
            .find(|(_, o)| matches!(o, LayerOutcome::FailedClosed(_)))
        {
            return ("unavailable", Some(&r.name), Some(reason.name()), None);
        }
        if a.verdict == Verdict::Deny {
            let denied = enforced().find(|r| match r.outcome {
                LayerOutcome::Decided { decision, .. } => !decision.allowed,
                LayerOutcome::StoreFull | LayerOutcome::Cached(_) => true,
                _ => false,
            });
            return ("denied", denied.map(|r| &*r.name), None, Some(0));
        }
        if let Some((r, LayerOutcome::FailedOpen(reason))) = enforced()
            .map(|r| (r, r.outcome))
            .find(|(_, o)| matches!(o, LayerOutcome::FailedOpen(_)))
        {
            return ("failed_open", Some(&r.name), Some(reason.name()), None);
        }
        match enforced().next_back() {
            Some(r) => match r.outcome {
                LayerOutcome::Decided { decision, .. } => {
                    ("allowed", Some(&r.name), None, Some(decision.remaining))
                }
                _ => ("allowed", None, None, None),
            },
            None => ("allowed", None, None, None),
        }
    }

    async fn decide(&self, req: Request<'_>, guard: Option<&dyn Guard>, start: Nanos) -> Answer {
        let mut answer = Answer::bare(Verdict::Allow, 200);
        let bad = |mut a: Answer, reason: String| {
            a.status = 400;
            a.verdict = Verdict::BadRequest(reason);
            a
        };
        let ip = match client_ip(req.peer, req.forwarding, &self.config.trusted_proxies) {
            Ok(ip) => ip,
            Err(e) => {
                bump(&self.stats.bad_request);
                return bad(answer, e);
            }
        };
        answer.client_ip = Some(ip);
        let api_key = match req.api_key.map(std::str::from_utf8) {
            None => None,
            Some(Ok(k)) => Some(k),
            Some(Err(_)) => {
                bump(&self.stats.bad_request);
                return bad(answer, "x-api-key is not valid UTF-8".into());
            }
        };
        if let Some(reason) = guard.and_then(|g| g.reject(api_key)) {
            bump(&self.stats.rejected);
            metrics::counter!("ratelab_requests_total", "decision" => "rejected").increment(1);
            answer.status = 403;
            answer.verdict = Verdict::Rejected(reason);
            return answer;
        }
        if self.kill_switch() {
            bump(&self.stats.bypassed);
            metrics::counter!("ratelab_requests_total", "decision" => "bypassed").increment(1);
            answer.bypassed = true;
            return answer;
        }
        // Planned against the set this request started with, before any store call: an
        // unreadable key or cost at an enforced limit refuses the request with nothing spent
        // anywhere (a shadow limit that cannot read its own skips the request instead).
        let set = self.limits.load_full();
        let shadow_all = self.shadow();
        let planned = match plan(&set, &req, ip, api_key, self.config.ipv6_prefix, shadow_all) {
            Ok(p) => p,
            Err(e) => {
                bump(&self.stats.bad_request);
                return bad(answer, e);
            }
        };
        let fail_closed = self.fails_closed(req.route);
        self.decide_planned(
            &planned,
            (req.trace, fail_closed, start),
            shadow_all,
            answer,
        )
        .await
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
            forwarding: Forwarding::default(),
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
            bump(&self.stats.bypassed);
            metrics::counter!("ratelab_requests_total", "decision" => "bypassed").increment(1);
            answer.bypassed = true;
        } else {
            answer = self
                .decide_planned(planned, (trace, fail_closed, start), self.shadow(), answer)
                .await;
        }
        self.log(&req, &mut answer, start);
        answer
    }

    /// Runs `planned` and completes `answer`: its verdict, its fields, the counters.
    async fn decide_planned(
        &self,
        planned: &[Planned<'_, C>],
        (trace, fail_closed, start): (u64, bool, Nanos),
        shadow_all: bool,
        mut answer: Answer,
    ) -> Answer {
        let fields = self
            .run_limits(
                planned,
                (trace, fail_closed, start),
                shadow_all,
                &mut answer,
            )
            .await;
        if answer.verdict == Verdict::Unavailable {
            return answer;
        }
        if let Some(fields) = fields {
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
        answer
    }

    /// Runs the planned limits: first each enforced limit's denial cache, which answers a
    /// key the store denied until its wait is over without any store call; then the enforced
    /// limits together in one all-or-nothing step when their store can ([`together`]), else
    /// one by one in order until one denies (the later ones are not consulted and spend
    /// nothing); then the shadow ones, each on its own, on every request they match. A
    /// fail-closed request that cannot reach its store is a 503.
    /// Returns the enforced limits' fields, rendered, when any of them decided.
    async fn run_limits(
        &self,
        planned: &[Planned<'_, C>],
        (trace, fail_closed, start): (u64, bool, Nanos),
        shadow_all: bool,
        answer: &mut Answer,
    ) -> Option<Fields> {
        let deadline = start.saturating_add(Nanos::from(self.config.timeout));
        let shadow = |p: &Planned<'_, C>| shadow_all || p.limit.spec.mode == Mode::Shadow;
        let enforced = || planned.iter().enumerate().filter(|(_, p)| !shadow(p));
        let mut fields: Option<Fields> = None;
        let mut denied = false;
        let cached = enforced().find_map(|(i, p)| {
            let d = p.limit.cache.as_ref()?.lookup(&p.key, p.cost, start)?;
            Some((i, p.limit, d))
        });
        if let Some((i, limit, decision)) = cached {
            // The store denied this key until later: answered here, with no store call and
            // nothing spent at any limit (a request the store denies spends nothing).
            bump(&self.stats.denial_cache_hits);
            metrics::counter!("ratelab_denial_cache_hits_total", "limit" => limit.label.clone())
                .increment(1);
            let outcome = LayerOutcome::Cached(decision);
            self.account((i, limit), outcome, false, answer, &mut fields);
            // Answered without any store call: the shadow limits are not consulted either.
            answer.verdict = Verdict::Deny;
            answer.status = 429;
            return fields;
        }
        // One limit alone is decided on its own: no group to gather.
        let group: Vec<&Planned<'_, C>> = match enforced().nth(1) {
            Some(_) => enforced().map(|(_, p)| p).collect(),
            None => Vec::new(),
        };
        if let Some(outcomes) = self
            .run_together(&group, trace, fail_closed, deadline)
            .await
        {
            for ((i, p), outcome) in enforced().zip(outcomes) {
                match self.account((i, p.limit), outcome, false, answer, &mut fields) {
                    Step::Unavailable => return None,
                    Step::Refused => denied = true,
                    Step::Go => {}
                }
            }
        } else {
            for (i, p) in enforced() {
                let outcome = self
                    .run_layer(p.limit, &p.key, p.cost, trace, fail_closed, deadline)
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
                .run_layer(p.limit, &p.key, p.cost, trace, false, deadline)
                .await;
            self.account((i, p.limit), outcome, true, answer, &mut fields);
        }
        if denied {
            answer.verdict = Verdict::Deny;
            answer.status = 429;
        }
        fields
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
                    bump(&self.stats.denied_store_full);
                    metrics::counter!("ratelab_store_full_total", "limit" => limit.label.clone())
                        .increment(1);
                }
                true
            }
            LayerOutcome::FailedOpen(reason) => {
                let counter = match reason {
                    FailReason::Error => &self.stats.fail_open_error,
                    FailReason::Timeout => &self.stats.fail_open_timeout,
                    FailReason::BreakerOpen => &self.stats.fail_open_breaker,
                };
                bump(counter);
                metrics::counter!("ratelab_fail_open_total", "reason" => reason.name(), "limit" => limit.label.clone())
                    .increment(1);
                false
            }
            LayerOutcome::FailedClosed(_) => {
                bump(&self.stats.fail_closed);
                metrics::counter!("ratelab_requests_total", "decision" => "fail_closed")
                    .increment(1);
                answer.verdict = Verdict::Unavailable;
                answer.status = 503;
                answer.headers.push(("retry-after", "1".into()));
                return Step::Unavailable;
            }
        };
        if refused && shadow {
            bump(&self.stats.shadow_denied);
            metrics::counter!("ratelab_shadow_denied_total", "limit" => limit.label.clone())
                .increment(1);
            Step::Go
        } else if refused {
            Step::Refused
        } else {
            Step::Go
        }
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
fn error_outcome(
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

/// The enforced limits' response fields, joined as one list each.
#[derive(Debug, Default)]
struct Fields {
    policies: String,
    ratelimit: String,
    /// The latest wait a denying limit announced, whole seconds.
    retry_after: Option<u64>,
}

impl Fields {
    fn add(&mut self, policy: &str, ratelimit: String) {
        if self.policies.is_empty() {
            self.policies = policy.to_owned();
            // The first item is the list: no copy.
            self.ratelimit = ratelimit;
        } else {
            for (list, item) in [
                (&mut self.policies, policy),
                (&mut self.ratelimit, &*ratelimit),
            ] {
                list.push_str(", ");
                list.push_str(item);
            }
        }
    }
}

/// The headers of a request planned by its front end: none.
#[derive(Debug)]
struct NoHeaders;

impl crate::limits::Headers for NoHeaders {
    fn get(&self, _: &str) -> Option<&[u8]> {
        None
    }
}
