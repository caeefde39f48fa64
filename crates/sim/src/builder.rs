//! A typed scenario builder: a [`Scenario`] from Rust code, validated exactly like a file.
//!
//! Each setter takes plain numbers; a number outside its field's range is remembered as an
//! error at that field's JSON path, and [`ScenarioBuilder::build`] reports the first one. A
//! built spec then goes through [`Scenario::from_spec`], so every rule a file must meet holds
//! for a built scenario too. What no setter covers is reachable through
//! [`ScenarioBuilder::edit`] on the [`ScenarioSpec`] itself.
//!
//! ```
//! use ratelab_sim::{Client, Fault, Scenario};
//!
//! let sc = Scenario::builder("two gateways race for one key")
//!     .duration_ms(500)
//!     .gateways(2)
//!     .token_bucket(10, 20)
//!     .atomic()
//!     .client(Client::key("user:ana").count(2).poisson(100))
//!     .fault(Fault::store_crash(200, 50))
//!     .build()
//!     .unwrap();
//! assert_eq!(sc.spec().gateways.get(), 2);
//! ```

use crate::faults::{self, Rated};
use crate::limiter::Limiter;
use crate::scenario::*;
use std::path::PathBuf;

/// Builds a [`Scenario`]; see the module docs. Made by [`Scenario::builder`].
#[derive(Clone, Debug)]
pub struct ScenarioBuilder {
    file: PathBuf,
    spec: ScenarioSpec,
    duration: bool,
    policy: bool,
    /// The first out-of-range value: its JSON path and what was wrong.
    error: Option<(String, String)>,
}

/// A client group for [`ScenarioBuilder::client`]: one key or a key set, then an arrival
/// pattern, with the group's other settings at their file defaults.
#[derive(Clone, Debug)]
pub struct Client {
    spec: ClientSpec,
    error: Option<(String, String)>,
    /// Whether an arrival was given (a group needs one).
    arrival_given: bool,
}

/// A fault for [`ScenarioBuilder::fault`]: one constructor per kind, times in ms, or any
/// fault already typed (`Fault::from(spec)`, as the explorer draws them).
#[derive(Clone, Debug)]
pub struct Fault {
    spec: FaultSpec,
    error: Option<(String, String)>,
}

/// `v` as a `Bounded<MIN, MAX>`, or the error at `path` (kept only if it is the first).
fn bounded<const MIN: u64, const MAX: u64>(
    error: &mut Option<(String, String)>,
    path: &str,
    v: u64,
) -> Bounded<MIN, MAX> {
    Bounded::new(v).unwrap_or_else(|| {
        error.get_or_insert_with(|| {
            (
                path.to_owned(),
                format!("{v} is out of range: expected an integer from {MIN} to {MAX}"),
            )
        });
        Bounded::default()
    })
}

fn fraction(error: &mut Option<(String, String)>, path: &str, v: f64) -> Fraction {
    Fraction::new(v).unwrap_or_else(|| {
        error.get_or_insert_with(|| {
            (
                path.to_owned(),
                format!("{v} is out of range: expected a fraction from 0 to 1"),
            )
        });
        Fraction::new(0.0).expect("0 is a fraction")
    })
}

impl Scenario {
    /// A builder for a scenario that shows `description`: one seed (1), one gateway, the
    /// atomic path, and every other field at its file default; a duration, a policy and at
    /// least one client are needed.
    pub fn builder(description: impl Into<String>) -> ScenarioBuilder {
        ScenarioBuilder {
            file: PathBuf::from("<builder>"),
            spec: ScenarioSpec {
                schema: None,
                description: description.into(),
                seeds: Seeds::new(vec![1]).expect("one seed"),
                duration_ms: Bounded::default(),
                gateways: Bounded::default(),
                policy: PolicySpec::empty(AlgorithmName::TokenBucket),
                store: StoreSpec {
                    path: PathName::Atomic,
                    time_source: TimeSourceName::default(),
                    timeout_ms: Bounded::new(50).expect("default timeout"),
                    max_keys: Bounded::new(1 << 20).expect("default key bound"),
                    replica: None,
                    engine: StoreEngine::Core,
                },
                gateway: GatewaySpec::default(),
                network: NetworkSpec::default(),
                clients: Vec::new(),
                cleanup_job: None,
                planted_bug: None,
                faults: Vec::new(),
                expect: Expect::default(),
            },
            duration: false,
            policy: false,
            error: None,
        }
    }
}

impl ScenarioBuilder {
    /// The file name errors and reports give (default `<builder>`); its stem is the
    /// scenario's name.
    pub fn file(mut self, file: impl Into<PathBuf>) -> Self {
        self.file = file.into();
        self
    }

    /// The seeds to run (1 to [`MAX_SEEDS`]; default: seed 1).
    pub fn seeds(mut self, seeds: impl IntoIterator<Item = u64>) -> Self {
        match Seeds::new(seeds.into_iter().collect()) {
            Some(s) => self.spec.seeds = s,
            None => {
                self.error.get_or_insert_with(|| {
                    ("seeds".into(), format!("expected 1 to {MAX_SEEDS} seeds"))
                });
            }
        }
        self
    }

    /// How long clients send, in simulated ms.
    pub fn duration_ms(mut self, ms: u64) -> Self {
        self.spec.duration_ms = bounded(&mut self.error, "duration_ms", ms);
        self.duration = true;
        self
    }

    /// Number of gateways (default 1).
    pub fn gateways(mut self, n: u64) -> Self {
        self.spec.gateways = bounded(&mut self.error, "gateways", n);
        self
    }

    /// The policy `spec` writes (checked when the scenario is built).
    pub fn policy(mut self, spec: PolicySpec) -> Self {
        self.spec.policy = spec;
        self.policy = true;
        self
    }

    /// A token bucket: capacity B, refill R per second.
    pub fn token_bucket(self, capacity: u64, refill_per_sec: u64) -> Self {
        self.policy(AlgorithmName::TokenBucket.shaped(capacity, refill_per_sec))
    }

    /// A fixed window: `limit` per `window_ms`.
    pub fn fixed_window(self, limit: u64, window_ms: u64) -> Self {
        self.window(AlgorithmName::FixedWindow, limit, window_ms)
    }

    /// A sliding-window counter: `limit` per `window_ms`.
    pub fn sliding_window(self, limit: u64, window_ms: u64) -> Self {
        self.window(AlgorithmName::SlidingWindow, limit, window_ms)
    }

    fn window(self, algorithm: AlgorithmName, limit: u64, window_ms: u64) -> Self {
        let mut spec = PolicySpec::empty(algorithm);
        spec.limit = Some(limit);
        spec.window_ms = Some(window_ms);
        self.policy(spec)
    }

    /// The policy `limiter` claims ([`Limiter::claim`]), so the scenario as written names what
    /// [`crate::run_with`] holds the limiter to. An error if the claim has no file form (a
    /// window or refill period not a whole number of ms).
    pub fn policy_of<A>(self, limiter: &Limiter<A>) -> Self
    where
        A: ratelab_core::Algorithm + Clone + Send + Sync + 'static,
    {
        let claim = limiter.claim();
        match claim.policy() {
            Ok(policy) if policy.spec().build() == Ok(policy) => self.policy(policy.spec()),
            _ => self.failed("policy", format!("{claim:?} has no scenario-file form")),
        }
    }

    /// The naive store path (read, decide in the gateway, write).
    pub fn naive(mut self) -> Self {
        self.spec.store.path = PathName::Naive;
        self
    }

    /// The atomic store path (the default).
    pub fn atomic(mut self) -> Self {
        self.spec.store.path = PathName::Atomic;
        self
    }

    /// Decide on each gateway's own clock instead of the store's.
    pub fn gateway_time(mut self) -> Self {
        self.spec.store.time_source = TimeSourceName::Gateway;
        self
    }

    /// Each request's store deadline at the gateway, ms (default 50).
    pub fn store_timeout_ms(mut self, ms: u64) -> Self {
        self.spec.store.timeout_ms = bounded(&mut self.error, "store.timeout_ms", ms);
        self
    }

    /// One-way network latency, drawn uniformly from `min_us` to `max_us`.
    pub fn latency_us(mut self, min_us: u64, max_us: u64) -> Self {
        let e = &mut self.error;
        self.spec.network.latency = LatencyRange {
            min_us: bounded(e, "network.latency.min_us", min_us),
            max_us: bounded(e, "network.latency.max_us", max_us),
        };
        self
    }

    /// What decides on the atomic path in the store node (default: the core's transition).
    pub fn engine(mut self, engine: StoreEngine) -> Self {
        self.spec.store.engine = engine;
        self
    }

    /// A replica of the store, each write copied to it `min_us` to `max_us` later; with
    /// `wait`, an acknowledged write's reply waits for its copy.
    pub fn replica_lag_us(mut self, min_us: u64, max_us: u64, wait: bool) -> Self {
        let e = &mut self.error;
        self.spec.store.replica = Some(ReplicaSpec {
            lag: LatencyRange {
                min_us: bounded(e, "store.replica.lag.min_us", min_us),
                max_us: bounded(e, "store.replica.lag.max_us", max_us),
            },
            wait,
        });
        self
    }

    /// Let requests through when the store fails (default: they fail).
    pub fn fail_open(mut self) -> Self {
        self.spec.gateway.fail_open = true;
        self
    }

    /// Let requests through when the store fails if `open` (the default: they fail).
    pub fn fail_open_if(mut self, open: bool) -> Self {
        self.spec.gateway.fail_open = open;
        self
    }

    /// A circuit breaker per layer: open after `failures_to_open` consecutive failures, probe
    /// after `cooldown_ms`.
    pub fn breaker(mut self, failures_to_open: u64, cooldown_ms: u64) -> Self {
        let e = &mut self.error;
        self.spec.gateway.breaker = Some(BreakerSpec {
            failures_to_open: bounded(e, "gateway.breaker.failures_to_open", failures_to_open),
            cooldown_ms: bounded(e, "gateway.breaker.cooldown_ms", cooldown_ms),
        });
        self
    }

    /// A per-address edge limit in front of the per-key policy: a token bucket of
    /// `capacity`, refilled `refill_per_sec`.
    pub fn edge(mut self, capacity: u64, refill_per_sec: u64) -> Self {
        let e = &mut self.error;
        self.spec.gateway.edge = Some(EdgeSpec {
            capacity: bounded(e, "gateway.edge.capacity", capacity),
            refill_per_sec: bounded(e, "gateway.edge.refill_per_sec", refill_per_sec),
        });
        self
    }

    /// A denial cache of `keys` keys per limit on every gateway.
    pub fn denial_cache(mut self, keys: u64) -> Self {
        self.spec.gateway.denial_cache = Some(DenialCacheSpec {
            keys: bounded(&mut self.error, "gateway.denial_cache.keys", keys),
        });
        self
    }

    /// A bloom-filter guard of the valid keys `prefix:0` … `prefix:(count-1)`, sized for
    /// `false_positive_rate`.
    pub fn guard(
        mut self,
        prefix: impl Into<String>,
        count: u64,
        false_positive_rate: f64,
    ) -> Self {
        let e = &mut self.error;
        self.spec.gateway.guard = Some(GuardSpec {
            valid_keys: KeySet {
                prefix: prefix.into(),
                count: bounded(e, "gateway.guard.valid_keys.count", count),
            },
            false_positive_rate: fraction(
                e,
                "gateway.guard.false_positive_rate",
                false_positive_rate,
            ),
        });
        self
    }

    /// The idle-bucket cleanup job: a tick every `period_ms`, leases of `lease_ms`, `work_ms`
    /// between its scan and its commit, at most `batch` keys a commit; fenced, deleting only
    /// keys still expired, its tokens from the store's clock.
    pub fn cleanup_job(mut self, period_ms: u64, lease_ms: u64, work_ms: u64, batch: u64) -> Self {
        let e = &mut self.error;
        self.spec.cleanup_job = Some(JobSpec {
            lease_ms: bounded(e, "cleanup_job.lease_ms", lease_ms),
            period_ms: bounded(e, "cleanup_job.period_ms", period_ms),
            work_ms: bounded(e, "cleanup_job.work_ms", work_ms),
            fencing: true,
            blind_delete: false,
            batch: bounded(e, "cleanup_job.batch", batch),
            tokens: TokenSourceName::default(),
        });
        self
    }

    /// Most live keys the store holds per layer (default 1 048 576).
    pub fn max_keys(mut self, n: u64) -> Self {
        self.spec.store.max_keys = bounded(&mut self.error, "store.max_keys", n);
        self
    }

    /// Switch the liveness phase on (`expect.liveness`).
    pub fn liveness(mut self) -> Self {
        self.spec.expect.liveness = true;
        self
    }

    /// Adds a client group.
    pub fn client(mut self, c: Client) -> Self {
        let i = self.spec.clients.len();
        let missing = (!c.arrival_given).then(|| {
            (
                "arrival".to_owned(),
                "a client group needs an arrival: constant, poisson or burst".to_owned(),
            )
        });
        if let Some((path, message)) = c.error.or(missing) {
            self.error
                .get_or_insert_with(|| (format!("clients[{i}].{path}"), message));
        }
        self.spec.clients.push(c.spec);
        self
    }

    /// Adds a fault.
    pub fn fault(mut self, f: Fault) -> Self {
        let i = self.spec.faults.len();
        if let Some((path, message)) = f.error {
            self.error
                .get_or_insert_with(|| (format!("faults[{i}].{path}"), message));
        }
        self.spec.faults.push(f.spec);
        self
    }

    /// Runs a deliberately broken limiter (see [`PlantedBug`]).
    pub fn planted_bug(mut self, bug: PlantedBug) -> Self {
        self.spec.planted_bug = Some(bug);
        self
    }

    /// What every seed's run must satisfy.
    pub fn expect(mut self, expect: Expect) -> Self {
        self.spec.expect = expect;
        self
    }

    /// Judge every seed by every checker (`expect.explorer`): `"pass"`, or the signature
    /// `"class/checker"` a canary must show (`"safety/window"`).
    pub fn expect_explorer(mut self, verdict: impl Into<String>) -> Self {
        self.spec.expect.explorer = Some(verdict.into());
        self
    }

    /// The spec as written so far.
    pub fn spec(&self) -> &ScenarioSpec {
        &self.spec
    }

    /// Changes anything else in the spec as written.
    pub fn edit(mut self, f: impl FnOnce(&mut ScenarioSpec)) -> Self {
        f(&mut self.spec);
        self
    }

    fn failed(mut self, path: &str, message: String) -> Self {
        self.error.get_or_insert_with(|| (path.to_owned(), message));
        self
    }

    /// The spec as written, without the rules across fields that [`ScenarioBuilder::build`]
    /// then checks: an error only for a value out of its field's range, or a missing
    /// duration, policy or arrival.
    pub fn written(self) -> Result<ScenarioSpec, ScenarioError> {
        let missing = if !self.duration {
            Some(("duration_ms", "a duration is needed: `duration_ms`"))
        } else if !self.policy {
            Some((
                "policy",
                "a policy is needed: `policy`, `token_bucket`, `fixed_window`, `sliding_window` or `policy_of`",
            ))
        } else {
            None
        };
        let error = self
            .error
            .or_else(|| missing.map(|(p, m)| (p.to_owned(), m.to_owned())));
        match error {
            Some((path, message)) => Err(ScenarioError {
                file: self.file,
                path,
                line: 0,
                column: 0,
                message,
            }),
            None => Ok(self.spec),
        }
    }

    /// The scenario, validated as [`Scenario::from_spec`] validates a file's contents.
    pub fn build(self) -> Result<Scenario, ScenarioError> {
        let file = self.file.clone();
        Scenario::from_spec(&file, self.written()?)
    }
}

impl Client {
    fn new(key: Option<String>, keys: Option<KeySet>) -> Client {
        Client {
            spec: ClientSpec {
                count: Bounded::new(1).expect("one client"),
                key,
                keys,
                // Until an arrival is given: `build` refuses a group without one.
                arrival: ArrivalSpec::Times(Times {
                    times_us: Vec::new(),
                }),
                cost: Bounded::new(1).expect("cost 1"),
                gateway: GatewayChoice::default(),
                honour_retry_after: false,
                self_throttle: false,
                retry_at_retry_after: false,
                address: AddressKind::default(),
                start_ms: Ms::default(),
                stop_ms: None,
            },
            error: None,
            arrival_given: false,
        }
    }

    /// Clients that send every request with `key`.
    pub fn key(key: impl Into<String>) -> Client {
        Client::new(Some(key.into()), None)
    }

    /// Clients that pick each request's key from `prefix:0` … `prefix:(count-1)`.
    pub fn keys(prefix: impl Into<String>, count: u64) -> Client {
        let mut c = Client::new(None, None);
        c.spec.keys = Some(KeySet {
            prefix: prefix.into(),
            count: bounded(&mut c.error, "keys.count", count),
        });
        c
    }

    /// How many clients in the group (default 1).
    pub fn count(mut self, n: u64) -> Client {
        self.spec.count = bounded(&mut self.error, "count", n);
        self
    }

    /// Each request's cost (default 1).
    pub fn cost(mut self, cost: u64) -> Client {
        self.spec.cost = bounded(&mut self.error, "cost", cost);
        self
    }

    /// Evenly spaced requests at `rate_per_sec`.
    pub fn constant(self, rate_per_sec: u64) -> Client {
        self.rate(Pattern::Constant, rate_per_sec)
    }

    /// Poisson arrivals at `rate_per_sec`.
    pub fn poisson(self, rate_per_sec: u64) -> Client {
        self.rate(Pattern::Poisson, rate_per_sec)
    }

    fn rate(mut self, pattern: Pattern, rate_per_sec: u64) -> Client {
        self.arrival_given = true;
        let rate = Rate {
            rate_per_sec: bounded(&mut self.error, "arrival.rate_per_sec", rate_per_sec),
        };
        self.spec.arrival = match pattern {
            Pattern::Poisson => ArrivalSpec::Poisson(rate),
            _ => ArrivalSpec::Constant(rate),
        };
        self
    }

    /// `requests` sent at once at `at_ms`.
    pub fn burst(mut self, at_ms: u64, requests: u64) -> Client {
        self.arrival_given = true;
        let e = &mut self.error;
        self.spec.arrival = ArrivalSpec::Burst(Burst {
            at_ms: bounded(e, "arrival.at_ms", at_ms),
            requests: bounded(e, "arrival.requests", requests),
            spread_ms: None,
        });
        self
    }

    /// `requests` spread evenly over `spread_ms` from `at_ms`.
    pub fn burst_over(mut self, at_ms: u64, requests: u64, spread_ms: u64) -> Client {
        self = self.burst(at_ms, requests);
        if let ArrivalSpec::Burst(b) = &mut self.spec.arrival {
            b.spread_ms = Some(bounded(&mut self.error, "arrival.spread_ms", spread_ms));
        }
        self
    }

    /// Every `every_ms`, `requests` spread over the `before_ms` before the boundary and
    /// `requests` over the `after_ms` after it.
    pub fn boundary_bursts(
        mut self,
        every_ms: u64,
        requests: u64,
        before_ms: u64,
        after_ms: u64,
    ) -> Client {
        self.arrival_given = true;
        let e = &mut self.error;
        self.spec.arrival = ArrivalSpec::BoundaryBursts(BoundaryBursts {
            every_ms: bounded(e, "arrival.every_ms", every_ms),
            requests: bounded(e, "arrival.requests", requests),
            before_ms: bounded(e, "arrival.before_ms", before_ms),
            after_ms: bounded(e, "arrival.after_ms", after_ms),
        });
        self
    }

    /// One request at each of `times_us`, µs from the start of the run.
    pub fn times_us(mut self, times_us: Vec<u64>) -> Client {
        self.arrival_given = true;
        self.spec.arrival = ArrivalSpec::Times(Times { times_us });
        self
    }

    /// Pace from the answers' fields: wait the RateLimit field's `t` when it reports none
    /// left, and Retry-After after a 429.
    pub fn self_throttle(mut self) -> Client {
        self.spec.self_throttle = true;
        self
    }

    /// Which gateway each request goes to (default round robin).
    pub fn gateway(mut self, choice: GatewayChoice) -> Client {
        self.spec.gateway = choice;
        self
    }

    /// Wait the returned Retry-After after a denial before sending again.
    pub fn honour_retry_after(mut self) -> Client {
        self.spec.honour_retry_after = true;
        self
    }

    /// After a 429 whose Retry-After is at least a second, send the same request again
    /// exactly then.
    pub fn retry_at_retry_after(mut self) -> Client {
        self.spec.retry_at_retry_after = true;
        self
    }

    /// Connect from `address` (each client its own IPv4 address, by default).
    pub fn address(mut self, address: AddressKind) -> Client {
        self.spec.address = address;
        self
    }

    /// Send from `start_ms` to `stop_ms` only.
    pub fn between_ms(mut self, start_ms: u64, stop_ms: u64) -> Client {
        let e = &mut self.error;
        self.spec.start_ms = bounded(e, "start_ms", start_ms);
        self.spec.stop_ms = Some(bounded(e, "stop_ms", stop_ms));
        self
    }
}

impl Fault {
    /// A fault of the `rate`-taking kind `make`, over `[at_ms, until_ms)`.
    fn rated(at_ms: u64, until_ms: u64, make: fn(Rated) -> FaultSpec) -> Fault {
        let mut error = None;
        let rated = Rated {
            at_ms: bounded(&mut error, "at_ms", at_ms),
            until_ms: bounded(&mut error, "until_ms", until_ms),
            rate: None,
        };
        Fault {
            spec: make(rated),
            error,
        }
    }

    /// The store crashes at `at_ms`, losing all state, and restarts `restart_after_ms` later.
    pub fn store_crash(at_ms: u64, restart_after_ms: u64) -> Fault {
        let mut error = None;
        let spec = FaultSpec::StoreCrash(faults::StoreCrash {
            at_ms: bounded(&mut error, "at_ms", at_ms),
            restart_after_ms: bounded(&mut error, "restart_after_ms", restart_after_ms),
        });
        Fault { spec, error }
    }

    /// The store's primary dies at `at_ms`, and its replica (see
    /// [`ScenarioBuilder::replica_lag_us`]) is promoted `promote_after_ms` later with the
    /// writes that had reached it.
    pub fn store_failover(at_ms: u64, promote_after_ms: u64) -> Fault {
        let mut error = None;
        let spec = FaultSpec::StoreFailover(faults::StoreFailover {
            at_ms: bounded(&mut error, "at_ms", at_ms),
            promote_after_ms: bounded(&mut error, "promote_after_ms", promote_after_ms),
        });
        Fault { spec, error }
    }

    /// The store answers every call in `[at_ms, until_ms)` with an error.
    pub fn store_errors(at_ms: u64, until_ms: u64) -> Fault {
        Fault::rated(at_ms, until_ms, |r| {
            FaultSpec::StoreErrors(faults::StoreErrors(r))
        })
    }

    /// The store drops every call in the window unapplied: the gateways time out.
    pub fn store_timeouts(at_ms: u64, until_ms: u64) -> Fault {
        Fault::rated(at_ms, until_ms, |r| {
            FaultSpec::StoreTimeouts(faults::StoreTimeouts(r))
        })
    }

    /// The store applies every call in the window but the reply is lost.
    pub fn lost_replies(at_ms: u64, until_ms: u64) -> Fault {
        Fault::rated(at_ms, until_ms, |r| {
            FaultSpec::LostReplies(faults::LostReplies(r))
        })
    }

    /// `gateways` cannot reach the store in the window.
    pub fn partition(at_ms: u64, until_ms: u64, gateways: impl IntoIterator<Item = u32>) -> Fault {
        let mut error = None;
        let spec = FaultSpec::Partition(faults::Partition(faults::Cut {
            at_ms: bounded(&mut error, "at_ms", at_ms),
            until_ms: bounded(&mut error, "until_ms", until_ms),
            gateways: gateways.into_iter().collect(),
        }));
        Fault { spec, error }
    }

    /// `gateways` cannot reach the store in the window, while the store's replies still
    /// reach them: their calls are applied and their answers lost.
    pub fn asymmetric_partition(
        at_ms: u64,
        until_ms: u64,
        gateways: impl IntoIterator<Item = u32>,
    ) -> Fault {
        let mut error = None;
        let spec = FaultSpec::AsymmetricPartition(faults::AsymmetricPartition(faults::Cut {
            at_ms: bounded(&mut error, "at_ms", at_ms),
            until_ms: bounded(&mut error, "until_ms", until_ms),
            gateways: gateways.into_iter().collect(),
        }));
        Fault { spec, error }
    }

    /// Messages between the gateways and the store are lost in the window (see
    /// [`Fault::rate`]).
    pub fn packet_loss(at_ms: u64, until_ms: u64) -> Fault {
        Fault::rated(at_ms, until_ms, |r| {
            FaultSpec::PacketLoss(faults::PacketLoss(r))
        })
    }

    /// The store answers `min_us` to `max_us` later than the network's latency in the window.
    pub fn store_latency(at_ms: u64, until_ms: u64, min_us: u64, max_us: u64) -> Fault {
        let mut error = None;
        let spec = FaultSpec::StoreLatency(faults::StoreLatency {
            at_ms: bounded(&mut error, "at_ms", at_ms),
            until_ms: bounded(&mut error, "until_ms", until_ms),
            extra_latency: LatencyRange {
                min_us: bounded(&mut error, "extra_latency.min_us", min_us),
                max_us: bounded(&mut error, "extra_latency.max_us", max_us),
            },
        });
        Fault { spec, error }
    }

    /// `node` (the store, or a gateway) stops in the window and resumes after it.
    pub fn pause(at_ms: u64, until_ms: u64, node: NodeName) -> Fault {
        let mut error = None;
        let spec = FaultSpec::Pause(faults::Pause {
            at_ms: bounded(&mut error, "at_ms", at_ms),
            until_ms: bounded(&mut error, "until_ms", until_ms),
            node,
        });
        Fault { spec, error }
    }

    /// The operator's kill switch turns limiting off in the window: on `gateways`, or on
    /// every gateway when `None`.
    pub fn kill_switch(at_ms: u64, until_ms: u64, gateways: Option<Vec<u32>>) -> Fault {
        let mut error = None;
        let spec = FaultSpec::KillSwitch(faults::KillSwitch {
            at_ms: bounded(&mut error, "at_ms", at_ms),
            until_ms: bounded(&mut error, "until_ms", until_ms),
            gateways,
        });
        Fault { spec, error }
    }

    /// `gateway`'s clock runs `offset_ms` ahead (negative: behind) and drifts by `drift_ppm`
    /// for the whole run.
    pub fn clock(gateway: u32, offset_ms: Option<i64>, drift_ppm: Option<i64>) -> Fault {
        let mut error = None;
        let mut signed = |path: &str, v: Option<i64>, limit: i64| {
            v.and_then(|v| {
                let ok = (-limit..=limit).contains(&v);
                if !ok {
                    error.get_or_insert_with(|| {
                        (
                            path.to_owned(),
                            format!(
                                "{v} is out of range: expected an integer from -{limit} to {limit}"
                            ),
                        )
                    });
                }
                ok.then_some(v)
            })
        };
        let offset_ms = signed("offset_ms", offset_ms, 3_600_000).and_then(Signed::new);
        let drift_ppm = signed("drift_ppm", drift_ppm, 100_000).and_then(Signed::new);
        let spec = FaultSpec::Clock(faults::Clock {
            gateway,
            offset_ms,
            drift_ppm,
        });
        Fault { spec, error }
    }

    /// Only `rate` (0 to 1) of the window's calls or messages are affected (default all);
    /// for a kind that takes no rate, an error at `rate`.
    pub fn rate(mut self, rate: f64) -> Fault {
        let rate = fraction(&mut self.error, "rate", rate);
        match &mut self.spec {
            FaultSpec::StoreErrors(faults::StoreErrors(r))
            | FaultSpec::StoreTimeouts(faults::StoreTimeouts(r))
            | FaultSpec::LostReplies(faults::LostReplies(r))
            | FaultSpec::PacketLoss(faults::PacketLoss(r)) => r.rate = Some(rate),
            other => {
                let kind = other.kind().name();
                self.error.get_or_insert_with(|| {
                    (
                        "rate".into(),
                        format!("`rate` does not apply to a {kind} fault"),
                    )
                });
            }
        }
        self
    }
}

impl From<FaultSpec> for Fault {
    fn from(spec: FaultSpec) -> Fault {
        Fault { spec, error: None }
    }
}
