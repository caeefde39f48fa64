//! Probes: check a real limiter ratelab did not write, from outside, with the checkers crate.
//!
//! A probe drives a [`Target`] — an HTTP endpoint ([`http`]), a Redis Lua script or the
//! script-free read-then-write client ([`redis`]) — with a concurrency ladder of real
//! clients over real connections: at each step `c` clients send back to back on a fresh set
//! of keys, so each step starts from full buckets. Then a few clients check Retry-After
//! honesty on quiet keys: drain the key until denied, wait exactly the announced time, send
//! once more. Every request is recorded with its send and answer times and the fields the
//! limiter sent ([`ProbeHistory`]), and [`ratelab_check::probe::judge`] holds the history to
//! the claimed policy.
//!
//! A new kind of target is a type implementing [`Target`] in a module here, and a
//! `ratelab probe` subcommand that builds it.

pub mod bench;
pub mod fields;
pub mod http;
pub mod policy;
pub mod redis;
pub mod report;

use ratelab_check::linearizable::Initial;
use ratelab_check::probe::{
    Claim, Fields, Judging, Observation, Outcome, ProbeHistory, ProbeVerdict, RetryProbe, judge,
};
use ratelab_core::Nanos;
use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// One request to the limiter under test, and what came back.
pub trait Target: Clone + Send + Sync + 'static {
    /// Asks the limiter about one request of `cost` on `key` (request `id`): its decision,
    /// or [`Outcome::Failed`] when none came back, and the fields it sent.
    fn send(&self, id: u64, key: &str, cost: u64)
    -> impl Future<Output = (Outcome, Fields)> + Send;

    /// The instance of the limiter request `id` goes to, when the target spreads requests
    /// over several (0 otherwise).
    fn instance(&self, _id: u64) -> u32 {
        0
    }
}

/// How a probe spreads its requests over a limiter's instances.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Spread {
    /// Request `id` goes to instance `id mod n`.
    RoundRobin,
    /// Each request to an instance drawn from `seed` and its id.
    Random {
        /// The seed.
        seed: u64,
    },
}

impl Spread {
    /// `round-robin` or `random:SEED`.
    pub fn parse(s: &str) -> Result<Spread, String> {
        match s.split_once(':') {
            None if s == "round-robin" => Ok(Spread::RoundRobin),
            Some(("random", seed)) => seed
                .trim()
                .parse()
                .map(|seed| Spread::Random { seed })
                .map_err(|_| format!("{s:?}: the seed must be a whole number (random:SEED)")),
            _ => Err(format!("{s:?}: expected round-robin or random:SEED")),
        }
    }

    /// The instance of `n` request `id` goes to.
    pub fn pick(self, id: u64, n: u32) -> u32 {
        let n = u64::from(n.max(1));
        let at = match self {
            Spread::RoundRobin => id % n,
            Spread::Random { seed } => ratelab_store::rng::StreamRng::new(seed, id).next_u64() % n,
        };
        u32::try_from(at).unwrap_or(0)
    }
}

/// How a probe runs.
#[derive(Clone, Debug)]
pub struct ProbeConfig {
    /// Clients per step, in order.
    pub ladder: Vec<u32>,
    /// Requests per step.
    pub requests_per_step: u64,
    /// Keys per step (each step's are fresh).
    pub keys: u32,
    /// Whether the target keeps a bucket per key the probe names; if not (a limiter keyed
    /// on something the probe cannot vary), every request is on one key, `global`.
    pub partitioned: bool,
    /// The prefix of every key the probe makes up (unique per run).
    pub key_prefix: String,
    /// A time bound on the whole ladder; a step stops sending when it passes.
    pub max_time: Duration,
    /// Retry-After honesty probes (0: none).
    pub retry_probes: u32,
    /// The longest announced wait an honesty probe sits out.
    pub max_wait: Duration,
    /// The limiter's clock resolution.
    pub clock_resolution: Nanos,
    /// What each key held before the probe.
    pub initial: Initial,
    /// The linearizability search's budget per key.
    pub budget: u64,
    /// Whether the claim is exact (given on the command line) or only a bound (read from
    /// a rounded `RateLimit-Policy` field).
    pub exact: bool,
    /// The phases after the ladder.
    pub phases: Phases,
    /// Whether the limiter's windows start where the Unix time is a multiple of the window
    /// (as `floor(now / window)` counts them), so that the checks know their phase.
    pub epoch_windows: bool,
}

/// The phases a probe runs after its ladder and before the honesty probes, each on keys of
/// its own and judged by the same checkers as the ladder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phases {
    /// Idle past the time the claim takes to forget a key (its bucket full again, its
    /// windows over), then a burst of the claim's burst on each of the ladder's first keys:
    /// a limiter whose keys never expire, or expire late, denies it (expiry bugs).
    pub idle: bool,
    /// One client per key sending evenly at `steady_percent` of the claimed rate for
    /// `steady`, from a key nobody used: a bucket never denies such a client, and a
    /// window rarely does (a sliding counter's estimate, or a window whose small limit the
    /// requests' spacing does not divide, may), so its denials test over-denial: each is
    /// judged against the claim like any other, a phantom where the claim admits it.
    pub steady: Option<Duration>,
    /// The steady client's rate, in percent of the claimed rate (1 to 99).
    pub steady_percent: u32,
    /// One client per key sending at four times the claimed rate for two of the claim's
    /// windows (or refills), so that its bursts straddle whatever boundary the limiter's
    /// windows have.
    pub boundary: bool,
}

impl Phases {
    /// Every phase, with a steady client at 80 % of the rate for `steady`.
    pub fn all(steady: Duration) -> Phases {
        Phases {
            idle: true,
            steady: Some(steady),
            steady_percent: 80,
            boundary: true,
        }
    }

    /// Parses `idle,steady,boundary` (any of them, or `none`), the steady phase lasting
    /// `steady`.
    pub fn parse(s: &str, steady: Duration) -> Result<Phases, String> {
        let mut p = Phases {
            steady_percent: 80,
            ..Phases::default()
        };
        for part in s.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            match part {
                "idle" => p.idle = true,
                "steady" => p.steady = Some(steady),
                "boundary" => p.boundary = true,
                "none" => {}
                other => {
                    return Err(format!(
                        "phase {other:?}: expected idle, steady, boundary or none"
                    ));
                }
            }
        }
        Ok(p)
    }
}

/// How long `claim` takes to forget a key: a bucket refilled from empty, or two windows
/// (a sliding counter's previous window still weighs through the next).
pub fn forget_time(claim: &Claim) -> Duration {
    let e = claim.envelope();
    let ns = match claim {
        Claim::TokenBucket { capacity, .. } => {
            capacity.div_ceil(e.amount.max(1)).saturating_mul(e.period)
        }
        Claim::Window { window, .. } => window.as_u64().saturating_mul(2),
        // Two of its quota's windows: at least its time to fill from empty.
        Claim::Policy(_) => e.period.saturating_mul(2),
    };
    Duration::from_nanos(ns)
}

/// The time between two requests at `percent` of `claim`'s sustained rate.
pub(crate) fn interval_at(claim: &Claim, percent: u32) -> Duration {
    let e = claim.envelope();
    let ns =
        u128::from(e.period) * 100 / (u128::from(e.amount.max(1)) * u128::from(percent.max(1)));
    Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
}

/// Where windows aligned to the Unix time start on a timeline whose zero is at the wall
/// clock's `wall`: an instant there at which the Unix time is a multiple of the claim's
/// window (`None` for a claim without windows).
pub fn epoch_origin(claim: &Claim, wall: std::time::SystemTime) -> Option<Nanos> {
    let window = match *claim {
        Claim::TokenBucket { .. } => return None,
        Claim::Window { window, .. } => window.as_u64(),
        Claim::Policy(p) => ratelab_core::Algorithm::quota(&p).window.as_u64(),
    }
    .max(1);
    let now = wall
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let into = u64::try_from(now % u128::from(window)).unwrap_or(0);
    Some(Nanos((window - into) % window))
}

/// A finished probe.
#[derive(Clone, Debug)]
pub struct ProbeRun {
    /// The policy it was held to.
    pub claim: Claim,
    /// What was recorded.
    pub history: ProbeHistory,
    /// The verdict.
    pub verdict: ProbeVerdict,
    /// Per step: clients, requests, admitted, seconds.
    pub steps: Vec<StepSummary>,
    /// Phases and honesty probes skipped, and why.
    pub retry_skipped: Vec<String>,
    /// Wall time of the whole probe.
    pub seconds: f64,
    /// Wall time of the checkers alone.
    pub check_seconds: f64,
}

/// One step of the ladder.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepSummary {
    /// Concurrent clients.
    pub clients: u32,
    /// Requests sent.
    pub requests: u64,
    /// Admitted.
    pub admitted: u64,
    /// Wall seconds.
    pub seconds: f64,
}

/// A key name unique to this process and moment, so a run starts from keys nobody used.
pub fn fresh_prefix() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("ratelab-probe-{}-{:x}", std::process::id(), now % (1 << 48))
}

/// The recorder shared by a probe's clients.
#[derive(Clone)]
struct Recorder {
    start: Instant,
    next_id: Arc<AtomicU64>,
    observations: Arc<Mutex<Vec<Observation>>>,
    done: Arc<AtomicU64>,
}

impl Recorder {
    fn elapsed(&self) -> Nanos {
        Nanos(u64::try_from(self.start.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// Sends one request through `target` and records it.
    async fn send<T: Target>(&self, target: &T, client: u32, key: &str, cost: u64) -> Observation {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let sent = self.elapsed();
        let (outcome, fields) = target.send(id, key, cost).await;
        let answered = self.elapsed();
        let o = Observation {
            id,
            key: key.to_owned(),
            client,
            instance: target.instance(id),
            cost,
            sent,
            answered,
            outcome,
            fields,
        };
        self.observations
            .lock()
            .expect("probe recorder")
            .push(o.clone());
        self.done.fetch_add(1, Ordering::Relaxed);
        o
    }
}

/// Runs the probe: the ladder, then the honesty probes, then the checkers. `progress` is
/// told the requests sent so far and the total planned, as they go.
pub async fn probe<T: Target>(
    target: T,
    claim: Claim,
    cfg: &ProbeConfig,
    progress: impl Fn(u64, u64) + Send + Sync + 'static,
) -> ProbeRun {
    let wall = std::time::SystemTime::now();
    let rec = Recorder {
        start: Instant::now(),
        next_id: Arc::new(AtomicU64::new(0)),
        observations: Arc::new(Mutex::new(Vec::new())),
        done: Arc::new(AtomicU64::new(0)),
    };
    let total = cfg.requests_per_step * cfg.ladder.len() as u64;
    let deadline = rec.start + cfg.max_time;
    let ticker = {
        let done = rec.done.clone();
        let progress = Arc::new(progress);
        tokio::spawn(async move {
            loop {
                progress(done.load(Ordering::Relaxed).min(total), total);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    let mut steps = Vec::new();
    for (step, &clients) in cfg.ladder.iter().enumerate() {
        steps.push(run_step(&target, &rec, cfg, step, clients, deadline).await);
    }
    ticker.abort();
    let phase_skipped = run_phases(&target, &rec, cfg, claim).await;
    let (retry_probes, mut retry_skipped) = honesty(&target, &rec, cfg, claim).await;
    retry_skipped.extend(phase_skipped);
    let mut observations = std::mem::take(&mut *rec.observations.lock().expect("probe recorder"));
    observations.sort_by_key(|o| o.id);
    let history = ProbeHistory {
        observations,
        retry_probes,
    };
    let checking = Instant::now();
    let verdict = judge(
        &history,
        &Judging {
            claim,
            clock_resolution: cfg.clock_resolution,
            initial: cfg.initial,
            budget: cfg.budget,
            exact: cfg.exact,
            origin: cfg
                .epoch_windows
                .then(|| epoch_origin(&claim, wall))
                .flatten(),
        },
    );
    ProbeRun {
        claim,
        history,
        verdict,
        steps,
        retry_skipped,
        seconds: rec.start.elapsed().as_secs_f64(),
        check_seconds: checking.elapsed().as_secs_f64(),
    }
}

/// The phases after the ladder: steady and boundary clients side by side, then the idle
/// burst once the ladder's keys have been quiet long enough.
/// Returns why each phase that was skipped was.
async fn run_phases<T: Target>(
    target: &T,
    rec: &Recorder,
    cfg: &ProbeConfig,
    claim: Claim,
) -> Vec<String> {
    let p = cfg.phases;
    let mut skipped = Vec::new();
    let quiet_from = Instant::now();
    // Phases on one shared bucket would judge each other's traffic: only the idle burst.
    let keys = if cfg.partitioned { cfg.keys.max(1) } else { 0 };
    if keys == 0 && (p.steady.is_some() || p.boundary) {
        skipped.push(
            "steady and boundary phases: the target does not partition by key, and on its one \
             bucket they would judge each other's traffic"
                .to_owned(),
        );
    }
    let mut tasks = Vec::new();
    let mut paced = |name: &str, client: u32, every: Duration, count: u64| {
        for k in 0..keys {
            let (target, rec) = (target.clone(), rec.clone());
            let key = format!("{}-{name}{k}", cfg.key_prefix);
            tasks.push(tokio::spawn(async move {
                let start = tokio::time::Instant::now();
                for n in 0..count {
                    let at = start + every.saturating_mul(u32::try_from(n).unwrap_or(u32::MAX));
                    tokio::time::sleep_until(at).await;
                    rec.send(&target, client + k, &key, 1).await;
                }
            }));
        }
    };
    if let Some(d) = p.steady {
        let every = interval_at(&claim, p.steady_percent);
        let count = (d.as_nanos() / every.as_nanos().max(1)).clamp(1, 10_000) as u64;
        paced("steady", 20_000, every, count);
    }
    if p.boundary {
        let every = interval_at(&claim, 400);
        let span = forget_time(&claim);
        if span > cfg.max_wait {
            skipped.push(format!(
                "boundary phase: its bursts span the claim's {span:?} to forget a key, beyond --max-wait"
            ));
        } else {
            let count = (span.as_nanos() / every.as_nanos().max(1)).clamp(1, 2_000) as u64;
            paced("boundary", 30_000, every, count);
        }
    }
    for t in tasks {
        let _ = t.await;
    }
    if p.idle {
        // A tenth more than the claim's own forgetting time, for the limiter's clock.
        let wait =
            forget_time(&claim).mul_f64(1.1) + Duration::from_nanos(cfg.clock_resolution.as_u64());
        let elapsed = quiet_from.elapsed();
        if wait > cfg.max_wait {
            skipped.push(format!(
                "idle phase: the claim forgets a key after {wait:?}, beyond --max-wait"
            ));
            return skipped;
        }
        tokio::time::sleep(wait.saturating_sub(elapsed)).await;
        let mut burst = Vec::new();
        for k in 0..keys.max(1) {
            let (target, rec) = (target.clone(), rec.clone());
            let key = key_of(cfg, 0, k, 0);
            let count = claim.burst().min(1_000);
            burst.push(tokio::spawn(async move {
                for _ in 0..count {
                    rec.send(&target, 40_000 + k, &key, 1).await;
                }
            }));
        }
        for t in burst {
            let _ = t.await;
        }
    }
    skipped
}

/// The one key of a probe whose target does not partition by key.
pub const GLOBAL: &str = "global";

/// The key of request `n` of client `client` at `step`.
fn key_of(cfg: &ProbeConfig, step: usize, client: u32, n: u64) -> String {
    if !cfg.partitioned {
        return GLOBAL.to_owned();
    }
    let k = (u64::from(client) + n) % u64::from(cfg.keys.max(1));
    format!("{}-s{step}-k{k}", cfg.key_prefix)
}

/// One step: `clients` clients sending back to back until the step's requests are sent.
async fn run_step<T: Target>(
    target: &T,
    rec: &Recorder,
    cfg: &ProbeConfig,
    step: usize,
    clients: u32,
    deadline: Instant,
) -> StepSummary {
    let began = Instant::now();
    let left = Arc::new(AtomicU64::new(cfg.requests_per_step));
    let admitted = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for client in 0..clients.max(1) {
        let (target, rec, left, admitted, cfg) = (
            target.clone(),
            rec.clone(),
            left.clone(),
            admitted.clone(),
            cfg.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline
                && left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |l| l.checked_sub(1))
                    .is_ok()
            {
                let key = key_of(&cfg, step, client, n);
                let o = rec.send(&target, client, &key, 1).await;
                admitted.fetch_add(u64::from(o.outcome == Outcome::Allowed), Ordering::Relaxed);
                n += 1;
            }
        }));
    }
    for t in tasks {
        // A client task that panicked loses only its own unsent requests: what it recorded
        // stays in the history.
        let _ = t.await;
    }
    StepSummary {
        clients,
        requests: cfg.requests_per_step - left.load(Ordering::Relaxed),
        admitted: admitted.load(Ordering::Relaxed),
        seconds: began.elapsed().as_secs_f64(),
    }
}

/// The honesty probes, concurrently, each on its own quiet key: drain it until denied, wait
/// exactly the announced time, send once more.
async fn honesty<T: Target>(
    target: &T,
    rec: &Recorder,
    cfg: &ProbeConfig,
    claim: Claim,
) -> (Vec<RetryProbe>, Vec<String>) {
    let most = claim
        .burst()
        .saturating_mul(2)
        .saturating_add(10)
        .min(100_000);
    // One shared bucket is quiet only for one prober at a time.
    let probes = if cfg.partitioned {
        cfg.retry_probes
    } else {
        cfg.retry_probes.min(1)
    };
    let mut tasks = Vec::new();
    for p in 0..probes {
        let (target, rec, cfg) = (target.clone(), rec.clone(), cfg.clone());
        let client = 10_000 + p;
        tasks.push(tokio::spawn(async move {
            let key = if cfg.partitioned {
                format!("{}-retry{p}", cfg.key_prefix)
            } else {
                GLOBAL.to_owned()
            };
            let mut denial = None;
            for _ in 0..most {
                let o = rec.send(&target, client, &key, 1).await;
                if o.outcome == Outcome::Denied {
                    denial = Some(o);
                    break;
                }
            }
            let Some(d) = denial else {
                return Err(format!("{key}: not denied within {most} requests"));
            };
            let Some(wait) = d.fields.retry_after else {
                return Err(format!("{key}: denial {} announced no wait", d.id));
            };
            let wait = Duration::from_nanos(wait.as_u64());
            if wait > cfg.max_wait {
                return Err(format!(
                    "{key}: denial {} announced {wait:?}, beyond --max-wait",
                    d.id
                ));
            }
            tokio::time::sleep(wait).await;
            let f = rec.send(&target, client, &key, 1).await;
            Ok(RetryProbe {
                denied: d.id,
                follow_up: f.id,
            })
        }));
    }
    let (mut probes, mut skipped) = (Vec::new(), Vec::new());
    for t in tasks {
        match t.await {
            Ok(Ok(p)) => probes.push(p),
            Ok(Err(why)) => skipped.push(why),
            Err(e) => skipped.push(format!("honesty probe died: {e}")),
        }
    }
    (probes, skipped)
}
