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
    /// Honesty probes skipped, and why.
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
    let (retry_probes, retry_skipped) = honesty(&target, &rec, cfg, claim).await;
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
