//! The simulated ladder at the round trips a real store measured.
//!
//! `ratelab sweep --redis` runs the overshoot ladder on a real Redis (the `ratelab` command
//! owns that part) and measures, at every point, the store round trip its senders saw. This
//! module then runs the simulated ladder with each point's one-way latency set to half that
//! round trip, for the same duration and policy, over several seeds, and sets the two side
//! by side ([`RealLadder`], [`real_table`]).
//!
//! Two measured windows explain any disagreement: the real race window (from the middle of a
//! naive request's `GET` round trip to the middle of its `SET`: the store-side gap between the
//! read and the write, if both legs of each call take equally long) and the simulated one (the
//! store's own timestamps). At a matched round trip the simulated race window is the round
//! trip; the real one also holds whatever the sender spends between the read's reply and the
//! write.

use crate::sweep::{self, Point, Summary, SweepConfig};
pub use ratelab_probe::real::{CLOSE_US, RealPoint};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt::Write as _;

/// One real run replayed on the simulator: the same reads at the same store times.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Replayed {
    /// `naive` or `atomic`.
    pub path: String,
    /// Concurrent senders (gateways in the simulation).
    pub concurrency: u32,
    /// The real run replayed.
    pub run: u32,
    /// One-way latency, µs.
    pub latency_us: u64,
    /// Requests sent.
    pub offered: u64,
    /// Admitted beyond the envelope.
    pub excess: u64,
    /// The run's trace hash.
    pub trace_hash: String,
}

/// The kind of real store a ladder ran on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RealStore {
    /// One redis-server.
    #[default]
    Server,
    /// A Redis Cluster: each point's key on its slot's primary, through the cluster client.
    Cluster,
}

impl RealStore {
    /// How the comparison's table names it.
    pub fn describe(self) -> &'static str {
        match self {
            RealStore::Server => "one redis-server on loopback",
            RealStore::Cluster => "a Redis Cluster through the cluster client",
        }
    }

    /// The results files' name, without extension: `docs/results/STEM.json` and `.csv`.
    pub fn results_stem(self) -> &'static str {
        match self {
            RealStore::Server => "overshoot-redis",
            RealStore::Cluster => "overshoot-redis-cluster",
        }
    }

    /// The name of the docs block the table goes in (`<!-- BEGIN sweep:NAME -->`).
    pub fn block(self) -> &'static str {
        match self {
            RealStore::Server => "redis",
            RealStore::Cluster => "redis-cluster",
        }
    }
}

/// The real ladder and the simulated one at its round trips.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RealLadder {
    /// What the real runs ran on (absent in files from before clusters: one server).
    #[serde(default)]
    pub store: RealStore,
    /// Every real run.
    pub real: Vec<RealPoint>,
    /// The simulated runs' settings (their latencies are the matched ones).
    pub sim_config: SweepConfig,
    /// Every simulated run.
    pub sim: Vec<Point>,
    /// The simulated runs per (path, concurrency), over seeds.
    pub sim_summary: Vec<Summary>,
    /// Every real run replayed on the simulator at its round trip.
    pub replayed: Vec<Replayed>,
}

/// The scenario that replays `p` on the simulator over a link of `latency_us` one way: one
/// client sending at the times the real store executed each read (so the simulated store
/// sees them at the same spacing, one latency later), round robin over `p.concurrency`
/// gateways, on `base`'s policy.
pub fn replay_scenario(
    p: &RealPoint,
    latency_us: u64,
    base: &SweepConfig,
) -> Result<ratelab_sim::Scenario, String> {
    let last = p.store_reads_us.last().copied().unwrap_or(0);
    let text = serde_json::json!({
        "description": format!("replay: real {} run {} at {} senders, {latency_us} µs one way", p.path, p.run, p.concurrency),
        "seeds": [1],
        "duration_ms": last / 1000 + 1,
        "gateways": p.concurrency,
        "policy": { "algorithm": "token_bucket", "capacity": base.capacity, "refill_per_sec": base.refill_per_sec },
        "store": { "path": p.path, "timeout_ms": base.timeout_ms },
        "network": { "latency": { "min_us": latency_us, "max_us": latency_us } },
        "clients": [ { "key": "user:ana", "arrival": { "pattern": "times", "times_us": p.store_reads_us } } ]
    })
    .to_string();
    ratelab_sim::Scenario::parse(std::path::Path::new("<replay>"), &text).map_err(|e| {
        format!(
            "the real {} run {} at {} senders cannot be replayed: {e}",
            p.path, p.run, p.concurrency
        )
    })
}

/// The one-way latency a replay of `p` runs at, µs: half its own race window (so the
/// simulated store sees each read's write as far after it as the real one did, on average),
/// or half its round trip on the atomic path.
pub fn replay_latency_us(p: &RealPoint) -> u64 {
    (p.race_window_us.unwrap_or(p.rtt_us) / 2.0).round() as u64
}

/// Replays `p` (see [`replay_scenario`]).
pub fn replay(p: &RealPoint, latency_us: u64, base: &SweepConfig) -> Result<Replayed, String> {
    let sc = replay_scenario(p, latency_us, base)?;
    let (r, _) = ratelab_sim::run(&sc, 1, ratelab_sim::RunOptions::default());
    Ok(Replayed {
        path: p.path.clone(),
        concurrency: p.concurrency,
        run: p.run,
        latency_us,
        offered: r.requests,
        excess: r.figure("total_excess"),
        trace_hash: r.trace_hash,
    })
}

/// The one-way latency, µs, that gives the simulator the round trip `path` measured at
/// concurrency `c` (the mean over real runs), or `None` if it was not measured.
pub fn matched_latency_us(real: &[RealPoint], path: &str, c: u32) -> Option<u64> {
    let rtts: Vec<f64> = real
        .iter()
        .filter(|p| p.path == path && p.concurrency == c)
        .map(|p| p.rtt_us)
        .collect();
    (!rtts.is_empty()).then(|| (rtts.iter().sum::<f64>() / rtts.len() as f64 / 2.0).round() as u64)
}

/// Runs the simulated ladder at the round trips of `real`: `base`'s policy and per-sender
/// rate, the real runs' duration, `seeds`, on `threads` worker threads. An error, before any
/// run, if a point cannot be simulated (a hand-edited results file, say).
pub fn simulate(
    store: RealStore,
    real: Vec<RealPoint>,
    base: &SweepConfig,
    seeds: &[u64],
    threads: usize,
) -> Result<RealLadder, String> {
    if let Some(p) = real
        .iter()
        .find(|p| p.path != "naive" && p.path != "atomic")
    {
        return Err(format!(
            "a real run on path {:?}: expected naive or atomic",
            p.path
        ));
    }
    let seconds = real.first().map_or(2, |p| p.seconds);
    let mut jobs = Vec::new();
    let keys: BTreeSet<(usize, u32)> = real
        .iter()
        .map(|p| (usize::from(p.path != "naive"), p.concurrency))
        .collect();
    for (order, c) in keys {
        let path = if order == 0 { "naive" } else { "atomic" };
        if let Some(l) = matched_latency_us(&real, path, c) {
            jobs.extend(seeds.iter().map(|&s| (path, c, l, s)));
        }
    }
    let mut latencies: Vec<u64> = jobs.iter().map(|j| j.2).collect();
    latencies.sort_unstable();
    latencies.dedup();
    let sim_config = SweepConfig {
        concurrency: real
            .iter()
            .map(|p| p.concurrency)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect(),
        latencies_us: latencies,
        seeds: seeds.to_vec(),
        duration_ms: seconds * 1000,
        ..base.clone()
    };
    for &(path, c, l, _) in &jobs {
        sweep::try_scenario(&sim_config, path, c, l)
            .map_err(|e| format!("{path} path at {c} senders, {l} µs one way: {e}"))?;
    }
    for p in &real {
        replay_scenario(p, replay_latency_us(p), &sim_config)?;
    }
    let sim = ratelab_sim::parallel::map(
        &jobs,
        threads,
        |&(path, c, l, seed)| sweep::measure(&sim_config, path, c, l, seed),
        &|_, _| {},
    );
    let sim_summary = sweep::summarize(&sim);
    let replayed = ratelab_sim::parallel::map(
        &real,
        threads,
        |p| replay(p, replay_latency_us(p), &sim_config),
        &|_, _| {},
    )
    .into_iter()
    .collect::<Result<Vec<_>, _>>()?;
    Ok(RealLadder {
        store,
        real,
        sim_config,
        sim,
        sim_summary,
        replayed,
    })
}

/// Mean, least and most of `xs`.
fn spread(xs: &[f64]) -> (f64, f64, f64) {
    let n = xs.len().max(1) as f64;
    let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (xs.iter().sum::<f64>() / n, lo, hi)
}

/// How far apart two figures may be and still agree: 30 % of the real one, or the two
/// spreads' half-widths together, whichever is larger.
pub fn tolerance(real: (f64, f64, f64), sim: (f64, f64, f64)) -> f64 {
    (0.3 * real.0).max((real.2 - real.1) / 2.0 + (sim.2 - sim.1) / 2.0)
}

/// One row of the comparison.
#[derive(Clone, Debug)]
pub struct Row {
    /// Concurrent senders.
    pub concurrency: u32,
    /// Mean offered (real).
    pub offered: f64,
    /// Mean real round trip, naive path, µs.
    pub rtt_us: f64,
    /// Mean real race window, µs.
    pub real_race_us: Option<f64>,
    /// Simulated race window, µs.
    pub sim_race_us: Option<f64>,
    /// Real naive excess: mean, least, most over runs.
    pub real_naive: (f64, f64, f64),
    /// Simulated naive excess: mean, least, most over seeds.
    pub sim_naive: (f64, f64, f64),
    /// The real naive runs replayed: mean, least, most.
    pub replayed_naive: (f64, f64, f64),
    /// Largest real atomic excess.
    pub real_atomic: u64,
    /// Largest simulated atomic excess.
    pub sim_atomic: u64,
    /// p99 lateness of real arrivals, µs (worst run).
    pub late_p99_us: f64,
    /// Mean percentage of real naive reads less than [`CLOSE_US`] after the previous one.
    pub store_close_pct: f64,
    /// Worst KS distance from Poisson over the real naive runs: the senders' start times,
    /// the reads at the store, and the critical value at 0.999 for their count.
    pub ks: (f64, f64, f64),
}

impl Row {
    /// Whether the naive excesses agree within [`tolerance`].
    pub fn agrees(&self) -> bool {
        (self.sim_naive.0 - self.real_naive.0).abs() <= tolerance(self.real_naive, self.sim_naive)
    }
}

/// The comparison, one row per concurrency that has both paths on both sides.
pub fn rows(l: &RealLadder) -> Vec<Row> {
    let cs: BTreeSet<u32> = l.real.iter().map(|p| p.concurrency).collect();
    let mut out = Vec::new();
    for c in cs {
        let real = |path: &str| -> Vec<&RealPoint> {
            l.real
                .iter()
                .filter(|p| p.path == path && p.concurrency == c)
                .collect()
        };
        let sim = |path: &str| {
            l.sim_summary
                .iter()
                .find(|s| s.path == path && s.concurrency == c)
        };
        let (rn, ra) = (real("naive"), real("atomic"));
        let (Some(sn), Some(sa)) = (sim("naive"), sim("atomic")) else {
            continue;
        };
        if rn.is_empty() || ra.is_empty() {
            continue;
        }
        let sim_runs: Vec<f64> = l
            .sim
            .iter()
            .filter(|p| p.path == "naive" && p.concurrency == c)
            .map(|p| p.excess as f64)
            .collect();
        let races: Vec<f64> = rn.iter().filter_map(|p| p.race_window_us).collect();
        out.push(Row {
            concurrency: c,
            offered: spread(&rn.iter().map(|p| p.offered as f64).collect::<Vec<_>>()).0,
            rtt_us: spread(&rn.iter().map(|p| p.rtt_us).collect::<Vec<_>>()).0,
            real_race_us: (!races.is_empty()).then(|| spread(&races).0),
            sim_race_us: sn.race_window_ms.map(|ms| ms * 1e3),
            real_naive: spread(&rn.iter().map(|p| p.excess as f64).collect::<Vec<_>>()),
            sim_naive: spread(&sim_runs),
            replayed_naive: spread(
                &l.replayed
                    .iter()
                    .filter(|p| p.path == "naive" && p.concurrency == c)
                    .map(|p| p.excess as f64)
                    .collect::<Vec<_>>(),
            ),
            real_atomic: ra.iter().map(|p| p.excess).max().unwrap_or(0),
            sim_atomic: sa.excess_max,
            late_p99_us: rn
                .iter()
                .chain(&ra)
                .map(|p| p.late_p99_us)
                .fold(0.0, f64::max),
            store_close_pct: spread(&rn.iter().map(|p| p.store_close_pct).collect::<Vec<_>>()).0,
            ks: (
                rn.iter().map(|p| p.arrivals_ks).fold(0.0, f64::max),
                rn.iter().map(|p| p.store_arrivals_ks).fold(0.0, f64::max),
                ratelab_check::arrivals::ks_critical(
                    rn.iter().map(|p| p.offered as usize).min().unwrap_or(1),
                ),
            ),
        });
    }
    out
}

fn opt_us(v: Option<f64>) -> String {
    v.map_or("–".to_owned(), |v| format!("{v:.0}"))
}

/// The comparison as the write-up's Markdown block.
pub fn real_table(l: &RealLadder) -> String {
    let runs = l.real.iter().map(|p| p.run).max().map_or(0, |r| r + 1);
    let seconds = l.real.first().map_or(0, |p| p.seconds);
    let mut out = format!(
        "Real: {}, Redis `TIME`, {seconds} s per point, {runs} runs. \
         Simulated: the same policy (B = {}, R = {}/s), {} req/s per sender and duration, each \
         path over a link of half the round trip the real runs measured; Poisson arrivals over \
         {} seeds, and each real run replayed: its reads at the times the real store ran them, over a link of half its own race window.\n\n\
         | concurrent | offered | real round trip µs | race window µs real / sim | reads < 10 µs apart at the store, real / Poisson | KS from Poisson: sender starts / reads at the store (0.999 critical) | real naive excess (min–max) | sim naive excess, Poisson (min–max) | agree (±) | sim naive excess, real arrivals (min–max) | agree (±) | atomic excess real / sim |\n\
         |---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|\n",
        l.store.describe(),
        l.sim_config.capacity,
        l.sim_config.refill_per_sec,
        l.sim_config.rate_per_client,
        l.sim_config.seeds.len(),
    );
    let fig = |(m, lo, hi): (f64, f64, f64)| format!("{m:.1} ({lo:.0}–{hi:.0})");
    let verdict = |real: (f64, f64, f64), sim: (f64, f64, f64)| {
        let tol = tolerance(real, sim);
        let yes = (sim.0 - real.0).abs() <= tol;
        format!("{} (±{tol:.1})", if yes { "yes" } else { "no" })
    };
    for r in rows(l) {
        let lambda = r.offered / seconds.max(1) as f64;
        let poisson_close = 100.0 * (1.0 - (-lambda * CLOSE_US / 1e6).exp());
        let _ = writeln!(
            out,
            "| {} | {:.0} | {:.0} | {} / {} | {:.1}% / {poisson_close:.1}% | {:.3} / {:.3} ({:.3}) | {} | {} | {} | {} | {} | {} / {} |",
            r.concurrency,
            r.offered,
            r.rtt_us,
            opt_us(r.real_race_us),
            opt_us(r.sim_race_us),
            r.store_close_pct,
            r.ks.0,
            r.ks.1,
            r.ks.2,
            fig(r.real_naive),
            fig(r.sim_naive),
            verdict(r.real_naive, r.sim_naive),
            fig(r.replayed_naive),
            verdict(r.real_naive, r.replayed_naive),
            r.real_atomic,
            r.sim_atomic,
        );
    }
    let pairs = pairs_sentence(l, 8);
    if !pairs.is_empty() {
        out.push('\n');
        out.push_str(&pairs);
    }
    out
}

/// How far a replay may be from the real run it replays and still agree: 30 % of the real
/// excess, or this many requests at small counts.
pub const PAIR_SLACK: f64 = 2.0;

/// Each real naive run from `min_c` senders up against its own replay: the sentence after
/// the table.
pub fn pairs_sentence(l: &RealLadder, min_c: u32) -> String {
    let pairs: Vec<(&RealPoint, &Replayed)> =
        l.real
            .iter()
            .filter(|p| p.path == "naive" && p.concurrency >= min_c)
            .filter_map(|p| {
                let r = l.replayed.iter().find(|r| {
                    r.path == p.path && r.concurrency == p.concurrency && r.run == p.run
                })?;
                Some((p, r))
            })
            .collect();
    let gap = |(p, r): &(&RealPoint, &Replayed)| (r.excess as f64 - p.excess as f64).abs();
    let ok = |pr: &(&RealPoint, &Replayed)| gap(pr) <= (0.3 * pr.0.excess as f64).max(PAIR_SLACK);
    let within = pairs.iter().filter(|pr| ok(pr)).count();
    let Some(worst) = pairs.iter().max_by(|a, b| gap(a).total_cmp(&gap(b))) else {
        return String::new();
    };
    format!(
        "Run by run, each real naive run from {min_c} senders up against its own replay: the \
         replay's excess is within 30 % (or {PAIR_SLACK:.0} requests) of the real run's in \
         {within} of {} runs; the largest gap is {:.0} ({} senders, run {}: real {}, replay {}).\n",
        pairs.len(),
        gap(worst),
        worst.0.concurrency,
        worst.0.run,
        worst.0.excess,
        worst.1.excess,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agreement_is_thirty_percent_or_the_spreads() {
        // Tight spreads: 30 % of the real mean.
        assert_eq!(tolerance((100.0, 100.0, 100.0), (0.0, 0.0, 0.0)), 30.0);
        // Wide spreads: their half-widths together.
        assert_eq!(tolerance((10.0, 0.0, 20.0), (10.0, 5.0, 15.0)), 15.0);
    }
}
