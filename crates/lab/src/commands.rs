//! The experiments the `ratelab` subcommands run, from their settings to what they print
//! and the files and doc blocks they write: the simulated sweep (`ratelab sweep`), the real
//! ladder on Redis and its simulated twin (`sweep --redis`, `--resimulate-redis`), and the
//! simulator's benchmark (`ratelab bench`). The real-world commands are
//! `ratelab_probe::commands`'.
//!
//! Each returns what it found, which displays as the command prints it, or what the caller
//! can fix (a missing doc, no redis-server, an unreachable store) as an error; `ratelab`
//! prints either and picks the exit code. Progress goes to the caller's callback.

pub use ratelab_probe::commands::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNKNOWN};
use ratelab_probe::commands::{redis_store_arg, tokio_rt};
use ratelab_probe::real;
use ratelab_sim::{RunOptions, Scenario};
use std::fmt;

/// Progress of a long command: runs done of the total.
pub type Progress<'a> = &'a (dyn Fn(usize, usize) + Sync);

/// `ratelab sweep`'s outcome: the ladder, the algorithm comparison and the files written.
#[derive(Debug)]
pub struct SweepDone {
    /// The ladder's settings.
    pub cfg: crate::sweep::SweepConfig,
    /// The ladder.
    pub results: crate::sweep::Sweep,
    /// The algorithms at a window boundary.
    pub runs: Vec<crate::sweep::AlgorithmRun>,
    /// Its wall time, s.
    pub wall_s: f64,
    /// The files and doc blocks written.
    pub written: Vec<String>,
}

/// `ratelab sweep`: the simulated ladder (or, with `scenarios_only`, the committed one) and
/// the scenarios the docs cite, written to `out` and the docs.
pub fn sweep(
    cfg: &crate::sweep::SweepConfig,
    threads: usize,
    scenarios_only: bool,
    out: &std::path::Path,
    writeup: &std::path::Path,
    readme: &std::path::Path,
    progress: Progress<'_>,
) -> Result<SweepDone, String> {
    use crate::{output, sweep};
    for doc in [writeup, readme] {
        std::fs::read_to_string(doc).map_err(|e| {
            format!(
                "{}: {e} (run from the repository root, or pass --writeup/--readme)",
                doc.display()
            )
        })?;
    }
    let started = std::time::Instant::now();
    let results = if scenarios_only {
        committed_sweep(out)?
    } else {
        sweep::run(cfg, threads, progress)
    };
    let runs = sweep::compare_algorithms();
    let mut gateway = Vec::new();
    for file in output::cited_scenarios() {
        let sc = Scenario::load(std::path::Path::new(file)).map_err(|e| e.to_string())?;
        gateway.push(ratelab_sim::run(&sc, 1, RunOptions::default()).0);
    }
    let written = output::write_all(&results, &runs, &gateway, out, writeup, readme)?;
    Ok(SweepDone {
        cfg: cfg.clone(),
        results,
        runs,
        wall_s: started.elapsed().as_secs_f64(),
        written,
    })
}

/// The total of [`sweep`]'s progress: every point's naive and atomic runs.
pub fn sweep_runs(cfg: &crate::sweep::SweepConfig) -> usize {
    2 * cfg.concurrency.len() * cfg.latencies_us.len() * cfg.seeds.len()
}

impl fmt::Display for SweepDone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let results = &self.results;
        writeln!(
            f,
            "{} runs in {:.1} s ({} simulated requests)\n",
            results.points.len(),
            self.wall_s,
            results.points.iter().map(|p| p.offered).sum::<u64>()
        )?;
        for &l in &self.cfg.latencies_us {
            let mut t = ratelab_probe::table::new(vec![
                "concurrent",
                "offered",
                "envelope",
                "naive admitted",
                "naive excess (min–max)",
                "excess %",
                "model",
                "atomic admitted",
                "atomic excess max",
            ]);
            for &c in &self.cfg.concurrency {
                let find = |p: &str| {
                    results
                        .summary
                        .iter()
                        .find(|r| r.path == p && r.concurrency == c && r.latency_us == l)
                };
                let (Some(n), Some(a)) = (find("naive"), find("atomic")) else {
                    continue;
                };
                t.add_row(vec![
                    c.to_string(),
                    format!("{:.0}", n.offered),
                    format!("{:.0}", n.envelope),
                    format!("{:.0}", n.admitted),
                    format!("{:.1} ({}–{})", n.excess_mean, n.excess_min, n.excess_max),
                    format!("{:.0}%", n.excess_pct),
                    format!("{:.1}", n.predicted),
                    format!("{:.0}", a.admitted),
                    a.excess_max.to_string(),
                ]);
            }
            writeln!(
                f,
                "store round trip {} ms (one-way latency {l} µs):\n{t}\n",
                crate::sweep::rtt_ms(l)
            )?;
        }
        let mut t =
            ratelab_probe::table::new(vec!["algorithm", "admitted of 200", "most in any window"]);
        for r in &self.runs {
            t.add_row(vec![
                r.algorithm.clone(),
                r.admitted.to_string(),
                r.max_in_window.to_string(),
            ]);
        }
        writeln!(
            f,
            "boundary burst, 100 before and 100 after a reset, limit 100 per 1000 ms:\n{t}\n"
        )?;
        written(f, &self.written)
    }
}

/// The files a command wrote, as it lists them.
fn written(f: &mut fmt::Formatter<'_>, files: &[String]) -> fmt::Result {
    writeln!(f, "wrote:")?;
    for w in files {
        writeln!(f, "  {w}")?;
    }
    Ok(())
}

/// Whether the ladder's `--redis` names a cluster (`auto-cluster` or a `redis+cluster://` URL).
fn ladder_kind(arg: &str) -> crate::matched::RealStore {
    use crate::matched::RealStore;
    if arg == "auto-cluster" || ratelab_store::redis_conn::cluster_seeds(arg).is_some() {
        RealStore::Cluster
    } else {
        RealStore::Server
    }
}

/// The docs a real ladder rewrites: the write-up for one server, the cluster doc for a
/// cluster.
#[derive(Clone, Copy, Debug)]
pub struct RealDocs<'a> {
    /// The write-up, for one server's ladder.
    pub writeup: &'a std::path::Path,
    /// The cluster doc, for a cluster's ladder.
    pub cluster_doc: &'a std::path::Path,
}

impl RealDocs<'_> {
    fn for_store(&self, store: crate::matched::RealStore) -> &std::path::Path {
        match store {
            crate::matched::RealStore::Server => self.writeup,
            crate::matched::RealStore::Cluster => self.cluster_doc,
        }
    }
}

/// The ladder committed in `out/overshoot.json`.
fn committed_sweep(out: &std::path::Path) -> Result<crate::sweep::Sweep, String> {
    let path = out.join("overshoot.json");
    std::fs::read_to_string(&path)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
        .map_err(|e| format!("{}: {e} (run the full sweep first)", path.display()))
}

/// A real ladder beside its simulated twin: what `sweep --redis` and `--resimulate-redis`
/// print for each store measured.
#[derive(Debug)]
pub struct MatchedDone {
    /// What was measured, when it was measured in this command: runs, wall time, the store.
    pub measured: Option<String>,
    /// The real runs and their simulations.
    pub ladder: crate::matched::RealLadder,
    /// The files and doc blocks written.
    pub written: Vec<String>,
}

impl fmt::Display for MatchedDone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(m) = &self.measured {
            writeln!(f, "{m}")?;
        }
        writeln!(
            f,
            "{} simulated runs at the measured round trips\n",
            self.ladder.sim.len()
        )?;
        writeln!(f, "{}", crate::matched::real_table(&self.ladder))?;
        written(f, &self.written)
    }
}

/// `ratelab sweep --redis URL`: the ladder on a real Redis (a private one for `auto` or
/// `auto-cluster`), then simulated at its measured round trips and written.
pub fn real_sweep(
    cfg: &crate::sweep::SweepConfig,
    url: &str,
    runs: u32,
    threads: usize,
    out: &std::path::Path,
    docs: RealDocs<'_>,
    progress: Progress<'_>,
) -> Result<MatchedDone, String> {
    let kind = ladder_kind(url);
    let doc = docs.for_store(kind);
    std::fs::read_to_string(doc).map_err(|e| format!("{}: {e}", doc.display()))?;
    let (url, _store) = redis_store_arg(url)?;
    let rcfg = real::RealConfig {
        concurrency: cfg.concurrency.clone(),
        seconds: cfg.duration_ms / 1000,
        rate_per_client: cfg.rate_per_client,
        capacity: cfg.capacity,
        refill_per_sec: cfg.refill_per_sec,
        runs,
    };
    let started = std::time::Instant::now();
    let points = tokio_rt().block_on(real::ladder(&url, &rcfg, progress))?;
    let measured = format!(
        "{} real runs in {:.1} s on {url}",
        points.len(),
        started.elapsed().as_secs_f64()
    );
    let mut done = matched(kind, points, cfg, threads, out, doc)?;
    done.measured = Some(measured);
    Ok(done)
}

/// The total of [`real_sweep`]'s progress: each rung's naive and atomic runs, `runs` times.
pub fn real_sweep_runs(cfg: &crate::sweep::SweepConfig, runs: u32) -> usize {
    cfg.concurrency.len() * 2 * runs as usize
}

/// `sweep --resimulate-redis`: the committed real runs, simulated again: one server's, and a
/// cluster's when it was measured.
pub fn resimulate_real(
    cfg: &crate::sweep::SweepConfig,
    threads: usize,
    out: &std::path::Path,
    writeup: &std::path::Path,
    cluster_doc: &std::path::Path,
) -> Result<Vec<MatchedDone>, String> {
    use crate::matched::{RealLadder, RealStore};
    let docs = RealDocs {
        writeup,
        cluster_doc,
    };
    let mut done = Vec::new();
    for (kind, measure) in [
        (RealStore::Server, "auto"),
        (RealStore::Cluster, "auto-cluster"),
    ] {
        let path = out.join(format!("{}.json", kind.results_stem()));
        if kind == RealStore::Cluster && !path.exists() {
            continue;
        }
        let committed = std::fs::read_to_string(&path)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<RealLadder>(&t).map_err(|e| e.to_string()))
            .map_err(|e| {
                format!(
                    "{}: {e} (run `ratelab sweep --redis {measure}` to measure it)",
                    path.display()
                )
            })?;
        done.push(matched(
            kind,
            committed.real,
            cfg,
            threads,
            out,
            docs.for_store(kind),
        )?);
    }
    Ok(done)
}

/// Simulates the ladder at `points`' round trips and writes the comparison.
fn matched(
    kind: crate::matched::RealStore,
    points: Vec<ratelab_probe::real::RealPoint>,
    cfg: &crate::sweep::SweepConfig,
    threads: usize,
    out: &std::path::Path,
    writeup: &std::path::Path,
) -> Result<MatchedDone, String> {
    let ladder = crate::matched::simulate(kind, points, cfg, &cfg.seeds, threads)?;
    let written = crate::output::write_real(&ladder, out, writeup)?;
    Ok(MatchedDone {
        measured: None,
        ladder,
        written,
    })
}

/// The scenario `ratelab bench` runs: the atomic path, `gateways` gateways and as many
/// clients, `rate` requests a simulated second over 1 000 keys, for `seconds`.
pub fn bench_scenario(gateways: u64, seconds: u64, rate: u64) -> Result<Scenario, String> {
    let per_client = rate.div_ceil(gateways.max(1)).max(1);
    Scenario::builder("simulator benchmark")
        .file("<bench>")
        .duration_ms(seconds.saturating_mul(1000))
        .gateways(gateways)
        .token_bucket(100, 50)
        .atomic()
        .client(
            ratelab_sim::Client::keys("user", 1000)
                .count(gateways)
                .poisson(per_client),
        )
        .build()
        .map_err(|e| e.to_string())
}

/// One run of the benchmark: requests, wall and simulated time.
#[derive(Clone, Copy, Debug)]
pub struct BenchRun {
    /// Simulated requests.
    pub requests: u64,
    /// Wall time, s.
    pub wall_s: f64,
    /// Simulated time, ns.
    pub sim_ns: u64,
}

/// `ratelab bench`'s outcome: each run and the two floors, measured in the same command.
#[derive(Clone, Debug)]
pub struct BenchDone {
    /// Gateways (and clients).
    pub gateways: u64,
    /// Requests a simulated second offered.
    pub offered: u64,
    /// Simulated seconds.
    pub seconds: u64,
    /// Each run.
    pub runs: Vec<BenchRun>,
    /// madsim alone: the best requests per wall second.
    pub madsim_per_sec: f64,
    /// No runtime: the best ns per request.
    pub bare_ns: f64,
}

impl BenchDone {
    /// The best run's simulated requests per wall second.
    pub fn best(&self) -> f64 {
        self.runs
            .iter()
            .map(|r| r.requests as f64 / r.wall_s)
            .fold(0.0, f64::max)
    }
}

/// `ratelab bench`: the simulator's speed on the atomic path, beside its two floors (madsim
/// alone, and no runtime at all), each the best of `runs`.
pub fn bench(gateways: u64, seconds: u64, rate: u64, runs: u32) -> Result<BenchDone, String> {
    let sc = bench_scenario(gateways, seconds, rate)?;
    let clients = gateways;
    let per_client = rate.div_ceil(clients.max(1)).max(1);
    let runs = runs.max(1);
    let measured = (0..runs)
        .map(|_| {
            let (r, _) = ratelab_sim::run(&sc, 1, RunOptions::default());
            BenchRun {
                requests: r.requests,
                wall_s: r.wall_ms / 1e3,
                sim_ns: r.sim_ns,
            }
        })
        .collect();
    // The floors, on the same load, in the same run.
    let madsim = (0..runs)
        .map(|_| ratelab_sim::floor::madsim_round_trips(clients as u32, per_client, seconds, 1))
        .map(|m| m.per_sec())
        .fold(0.0, f64::max);
    let bare = (0..runs)
        .map(|_| ratelab_sim::floor::event_loop(clients as u32, per_client, seconds, 1000, 1))
        .map(|e| e.wall.as_nanos() as f64 / e.requests.max(1) as f64)
        .fold(f64::INFINITY, f64::min);
    Ok(BenchDone {
        gateways,
        offered: per_client * clients,
        seconds,
        runs: measured,
        madsim_per_sec: madsim,
        bare_ns: bare,
    })
}

impl fmt::Display for BenchDone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (gateways, seconds, runs) = (self.gateways, self.seconds, self.runs.len());
        writeln!(
            f,
            "atomic path, {gateways} gateways, {gateways} clients, {} requests/s offered over 1000 keys, {seconds} simulated s{}",
            self.offered,
            if cfg!(debug_assertions) {
                " (debug build: use --release)"
            } else {
                ""
            }
        )?;
        let mut t = ratelab_probe::table::numeric(
            [
                "run",
                "requests",
                "wall s",
                "sim requests/s",
                "sim s per wall s",
            ],
            0,
        );
        for (i, r) in self.runs.iter().enumerate() {
            t.add_row([
                (i + 1).to_string(),
                r.requests.to_string(),
                format!("{:.3}", r.wall_s),
                format!("{:.0}", r.requests as f64 / r.wall_s),
                format!("{:.1}", r.sim_ns as f64 / 1e9 / r.wall_s),
            ]);
        }
        writeln!(f, "{t}")?;
        let best = self.best();
        writeln!(
            f,
            "best: {best:.0} simulated requests per wall-clock second"
        )?;
        writeln!(
            f,
            "floor, madsim alone (one task and one endpoint round trip per request): {:.0} requests/s (best of {runs}); the cluster runs at {:.2}x it",
            self.madsim_per_sec,
            best / self.madsim_per_sec
        )?;
        writeln!(
            f,
            "floor, no runtime (one GCRA decision per request from a binary heap): {:.0} ns per request (best of {runs})",
            self.bare_ns
        )
    }
}
