//! The overshoot experiment: the same offered load on the naive and atomic paths, over a
//! concurrency ladder, store round-trip latencies and seeds, on the deterministic simulator.
//!
//! At each point, `c` gateways each take one Poisson client sending `rate_per_client`
//! requests per second to **one shared key**, so `c` is the number of concurrent senders and
//! the offered load is `c × rate_per_client`. The envelope is B + R·T over the key's run; the
//! excess is what was admitted beyond it.
//!
//! Alongside each measurement sits a prediction from a first-order model of the lost update:
//! a request that reads a token is joined by every other request whose read lands before its
//! write does, all of which see the same token. With reads arriving at rate λ and a race
//! window d between a read and its write, each token is spent on 1 + λ·d requests on average,
//! so the predicted excess is `envelope × λ × d` (capped at what was offered beyond the
//! envelope). d is the race window the run measured at the store.

use ratelab_check::{Admission, window};
use ratelab_core::{Algorithm, FixedWindow, Nanos, SlidingWindow, TokenBucket};
use ratelab_sim::Client;
use ratelab_sim::{RunOptions, Scenario};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The grid of one sweep.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SweepConfig {
    /// Concurrent senders (gateways, one client each).
    pub concurrency: Vec<u32>,
    /// One-way store latencies, µs: a store round trip is twice one.
    pub latencies_us: Vec<u64>,
    /// Seeds at every point.
    pub seeds: Vec<u64>,
    /// Simulated seconds of load per run, in ms.
    pub duration_ms: u64,
    /// Token-bucket capacity B.
    pub capacity: u64,
    /// Token-bucket refill R per second.
    pub refill_per_sec: u64,
    /// Requests per second from each client.
    pub rate_per_client: u64,
    /// Per-call store timeout, ms.
    pub timeout_ms: u64,
}

impl Default for SweepConfig {
    fn default() -> Self {
        SweepConfig {
            concurrency: (0..=8).map(|i| 1 << i).collect(),
            latencies_us: vec![100, 500, 1_500, 4_000, 10_000],
            seeds: vec![1, 2, 3, 4, 5],
            duration_ms: 4_000,
            capacity: 10,
            refill_per_sec: 20,
            rate_per_client: 10,
            timeout_ms: 500,
        }
    }
}

/// One run of the sweep.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Point {
    /// `naive` or `atomic`.
    pub path: String,
    /// Concurrent senders.
    pub concurrency: u32,
    /// One-way latency, µs.
    pub latency_us: u64,
    /// Store round trip, ms: twice the one-way latency.
    pub rtt_ms: f64,
    /// Seed.
    pub seed: u64,
    /// Requests sent.
    pub offered: u64,
    /// Requests admitted.
    pub admitted: u64,
    /// Requests denied.
    pub denied: u64,
    /// Requests that failed.
    pub errors: u64,
    /// B + R·T over the key's run, rounded down.
    pub envelope: u64,
    /// Admitted beyond the envelope.
    pub excess: u64,
    /// `excess / envelope`, in percent.
    pub excess_pct: f64,
    /// Largest excess in any interval.
    pub max_excess: u64,
    /// Measured race window (naive path), ms.
    pub race_window_ms: Option<f64>,
    /// The model's predicted excess.
    pub predicted_excess: f64,
    /// The run's trace hash.
    pub trace_hash: String,
}

/// Mean, min and max over a point's seeds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Summary {
    /// `naive` or `atomic`.
    pub path: String,
    /// Concurrent senders.
    pub concurrency: u32,
    /// One-way latency, µs.
    pub latency_us: u64,
    /// Store round trip, ms.
    pub rtt_ms: f64,
    /// Seeds.
    pub seeds: usize,
    /// Mean offered.
    pub offered: f64,
    /// Mean envelope.
    pub envelope: f64,
    /// Mean admitted.
    pub admitted: f64,
    /// Mean excess.
    pub excess_mean: f64,
    /// Least excess.
    pub excess_min: u64,
    /// Most excess.
    pub excess_max: u64,
    /// Mean excess, percent of the envelope.
    pub excess_pct: f64,
    /// Mean predicted excess.
    pub predicted: f64,
    /// Mean race window, ms.
    pub race_window_ms: Option<f64>,
}

/// A sweep's results.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Sweep {
    /// The grid.
    pub config: SweepConfig,
    /// Every run, ordered by path, concurrency, latency, seed.
    pub points: Vec<Point>,
    /// Per (path, concurrency, latency).
    pub summary: Vec<Summary>,
}

/// The store round trip over a link of `latency_us` one way, ms: twice the one-way time, or
/// twice the simulator's least message time.
pub fn rtt_ms(latency_us: u64) -> f64 {
    let floor = ratelab_sim::dilation::MESSAGE_FLOOR.as_nanos() as f64 / 1e3;
    2.0 * (latency_us as f64).max(floor) / 1e3
}

/// The sweep's scenario at one point: `c` senders on `path` over a link of `lat_us` one way.
/// Panics on a point no scenario can hold; [`try_scenario`] says why instead.
pub fn scenario(cfg: &SweepConfig, path: &str, c: u32, lat_us: u64) -> Scenario {
    try_scenario(cfg, path, c, lat_us).expect("sweep scenarios are valid")
}

/// [`scenario`], or why the point cannot be simulated.
pub fn try_scenario(
    cfg: &SweepConfig,
    path: &str,
    c: u32,
    lat_us: u64,
) -> Result<Scenario, String> {
    let builder = Scenario::builder(format!(
        "sweep: {path} path, {c} concurrent senders, {lat_us} µs one way"
    ))
    .file("<sweep>")
    .duration_ms(cfg.duration_ms)
    .gateways(u64::from(c))
    .token_bucket(cfg.capacity, cfg.refill_per_sec)
    .store_timeout_ms(cfg.timeout_ms)
    .latency_us(lat_us, lat_us)
    .client(
        Client::key("user:ana")
            .count(u64::from(c))
            .poisson(cfg.rate_per_client),
    );
    let builder = match path {
        "naive" => builder.naive(),
        "atomic" => builder.atomic(),
        other => return Err(format!("unknown store path {other:?}: naive or atomic")),
    };
    builder.build().map_err(|e| e.to_string())
}

/// Runs the grid on `threads` worker threads, calling `progress(done, total)` as runs finish.
pub fn run(cfg: &SweepConfig, threads: usize, progress: &(dyn Fn(usize, usize) + Sync)) -> Sweep {
    let mut jobs = Vec::new();
    for path in ["naive", "atomic"] {
        for &c in &cfg.concurrency {
            for &l in &cfg.latencies_us {
                for &seed in &cfg.seeds {
                    jobs.push((path, c, l, seed));
                }
            }
        }
    }
    let points = ratelab_sim::parallel::map(
        &jobs,
        threads,
        |&(path, c, l, seed)| measure(cfg, path, c, l, seed),
        progress,
    );
    let summary = summarize(&points);
    Sweep {
        config: cfg.clone(),
        points,
        summary,
    }
}

/// Runs one point of the grid: `path` ("naive" or "atomic"), `c` concurrent senders,
/// `latency_us` one way, one seed.
pub fn measure(cfg: &SweepConfig, path: &str, c: u32, latency_us: u64, seed: u64) -> Point {
    let sc = scenario(cfg, path, c, latency_us);
    let (r, _) = ratelab_sim::run(&sc, seed, RunOptions::default());
    let seconds = cfg.duration_ms as f64 / 1e3;
    let lambda = r.requests as f64 / seconds;
    let race = r.race_window_us.map(|us| us / 1e3);
    let predicted = match race {
        Some(d_ms) if path == "naive" => {
            let raw = r.envelope as f64 * lambda * d_ms / 1e3;
            raw.min(r.requests.saturating_sub(r.envelope) as f64)
        }
        _ => 0.0,
    };
    Point {
        path: path.to_owned(),
        concurrency: c,
        latency_us,
        rtt_ms: rtt_ms(latency_us),
        seed,
        offered: r.requests,
        admitted: r.figure("allowed"),
        denied: r.figure("denied"),
        errors: r.figure("errors"),
        envelope: r.envelope,
        excess: r.figure("total_excess"),
        excess_pct: if r.envelope == 0 {
            0.0
        } else {
            100.0 * r.figure("total_excess") as f64 / r.envelope as f64
        },
        max_excess: r.figure("max_excess"),
        race_window_ms: race,
        predicted_excess: predicted,
        trace_hash: r.trace_hash,
    }
}

fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (n, s) = xs.fold((0usize, 0.0), |(n, s), x| (n + 1, s + x));
    if n == 0 { 0.0 } else { s / n as f64 }
}

/// Aggregates points over seeds.
pub fn summarize(points: &[Point]) -> Vec<Summary> {
    let mut groups: BTreeMap<(usize, u32, u64), Vec<&Point>> = BTreeMap::new();
    for p in points {
        let order = usize::from(p.path != "naive");
        groups
            .entry((order, p.concurrency, p.latency_us))
            .or_default()
            .push(p);
    }
    groups
        .into_values()
        .map(|g| {
            let f = g[0];
            let races: Vec<f64> = g.iter().filter_map(|p| p.race_window_ms).collect();
            Summary {
                path: f.path.clone(),
                concurrency: f.concurrency,
                latency_us: f.latency_us,
                rtt_ms: f.rtt_ms,
                seeds: g.len(),
                offered: mean(g.iter().map(|p| p.offered as f64)),
                envelope: mean(g.iter().map(|p| p.envelope as f64)),
                admitted: mean(g.iter().map(|p| p.admitted as f64)),
                excess_mean: mean(g.iter().map(|p| p.excess as f64)),
                excess_min: g.iter().map(|p| p.excess).min().unwrap_or(0),
                excess_max: g.iter().map(|p| p.excess).max().unwrap_or(0),
                excess_pct: mean(g.iter().map(|p| p.excess_pct)),
                predicted: mean(g.iter().map(|p| p.predicted_excess)),
                race_window_ms: (!races.is_empty()).then(|| mean(races.iter().copied())),
            }
        })
        .collect()
}

/// The fixed-window boundary burst against all three algorithms, in process.
#[derive(Clone, Debug, Serialize)]
pub struct AlgorithmRun {
    /// Algorithm name.
    pub algorithm: String,
    /// Requests admitted of the 200.
    pub admitted: u64,
    /// Most admitted in any interval of one window length.
    pub max_in_window: u64,
    /// Admission times, ms.
    pub admitted_at_ms: Vec<f64>,
}

/// Window length and limit of the comparison.
pub const COMPARE_WINDOW_MS: u64 = 1_000;
/// Requests per side of the boundary, and the per-window limit.
pub const COMPARE_LIMIT: u64 = 100;
/// How long before and after the boundary the two halves are sent, ms.
pub const COMPARE_SPREAD_MS: u64 = 100;

/// Arrival times of the comparison: `COMPARE_LIMIT` evenly in the `COMPARE_SPREAD_MS` before
/// the reset at `COMPARE_WINDOW_MS`, and as many in the same span after it.
pub fn compare_arrivals() -> Vec<Nanos> {
    let w = Nanos::from_millis(COMPARE_WINDOW_MS).as_u64();
    let spread = Nanos::from_millis(COMPARE_SPREAD_MS).as_u64();
    let n = COMPARE_LIMIT;
    (0..n)
        .map(|k| Nanos(w - spread + spread * k / n))
        .chain((0..n).map(|k| Nanos(w + spread * k / n)))
        .collect()
}

/// Runs the comparison: fixed window (`limit` per window), sliding window (same), token
/// bucket (B = limit, R = limit per window).
pub fn compare_algorithms() -> Vec<AlgorithmRun> {
    let window = Nanos::from_millis(COMPARE_WINDOW_MS);
    let arrivals = compare_arrivals();
    fn go<A: Algorithm>(name: &str, alg: A, arrivals: &[Nanos], window: Nanos) -> AlgorithmRun {
        let mut state = None;
        let mut adm = Vec::new();
        for (i, &t) in arrivals.iter().enumerate() {
            let (s, d) = alg.transition(state, t, 1).expect("cost 1 fits");
            state = Some(s);
            if d.allowed {
                adm.push(Admission {
                    at: t,
                    id: i as u64,
                    cost: 1,
                });
            }
        }
        let by_key = BTreeMap::from([("k", adm.clone())]);
        AlgorithmRun {
            algorithm: name.to_owned(),
            admitted: adm.len() as u64,
            max_in_window: window::window_spike(&by_key, window).max_in_window,
            admitted_at_ms: adm.iter().map(|a| a.at.as_u64() as f64 / 1e6).collect(),
        }
    }
    vec![
        go(
            "fixed window",
            FixedWindow::new(COMPARE_LIMIT, window).expect("valid"),
            &arrivals,
            window,
        ),
        go(
            "sliding window",
            SlidingWindow::new(COMPARE_LIMIT, window).expect("valid"),
            &arrivals,
            window,
        ),
        go(
            "token bucket",
            TokenBucket::new(COMPARE_LIMIT, COMPARE_LIMIT, window).expect("valid"),
            &arrivals,
            window,
        ),
    ]
}
