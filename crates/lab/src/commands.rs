//! The experiments the `ratelab` subcommands run, from their settings to the tables they
//! print and the files and doc blocks they write: the simulated sweep (`ratelab sweep`), the
//! real ladder on Redis and its simulated twin (`sweep --redis`, `--resimulate-redis`), and
//! the simulator's benchmark (`ratelab bench`). The real-world commands are
//! `ratelab_probe::commands`'.
//!
//! Each returns the command's exit code: [`EXIT_BAD_INPUT`] after printing `error: …` for
//! anything the caller can fix (a missing doc, no redis-server, an unreachable store).

pub use ratelab_probe::commands::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNKNOWN};
use ratelab_probe::commands::{redis_store_arg, tokio_rt};
use ratelab_probe::real;
use ratelab_sim::{RunOptions, Scenario};
use std::process::ExitCode;

/// `ratelab sweep`: the simulated ladder (or, with `scenarios_only`, the committed one) and
/// the scenarios the docs cite, printed and written to `out` and the docs.
pub fn sweep(
    cfg: &crate::sweep::SweepConfig,
    threads: usize,
    scenarios_only: bool,
    out: &std::path::Path,
    writeup: &std::path::Path,
    readme: &std::path::Path,
) -> ExitCode {
    use crate::{output, sweep};
    for doc in [writeup, readme] {
        if let Err(e) = std::fs::read_to_string(doc) {
            eprintln!(
                "error: {}: {e} (run from the repository root, or pass --writeup/--readme)",
                doc.display()
            );
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    }
    let total = 2 * cfg.concurrency.len() * cfg.latencies_us.len() * cfg.seeds.len();
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} runs ({eta} left)",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let started = std::time::Instant::now();
    let results = if scenarios_only {
        match committed_sweep(out) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    } else {
        sweep::run(cfg, threads, &|done, _| bar.set_position(done as u64))
    };
    bar.finish_and_clear();
    let runs = sweep::compare_algorithms();
    let mut gateway = Vec::new();
    for file in output::cited_scenarios() {
        match Scenario::load(std::path::Path::new(file)) {
            Ok(sc) => gateway.push(ratelab_sim::run(&sc, 1, RunOptions::default()).0),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    let written = match output::write_all(&results, &runs, &gateway, out, writeup, readme) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    println!(
        "{} runs in {:.1} s ({} simulated requests)\n",
        results.points.len(),
        started.elapsed().as_secs_f64(),
        results.points.iter().map(|p| p.offered).sum::<u64>()
    );
    for &l in &cfg.latencies_us {
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
        for &c in &cfg.concurrency {
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
        println!(
            "store round trip {} ms (one-way latency {l} µs):\n{t}\n",
            crate::sweep::rtt_ms(l)
        );
    }
    let mut t =
        ratelab_probe::table::new(vec!["algorithm", "admitted of 200", "most in any window"]);
    for r in &runs {
        t.add_row(vec![
            r.algorithm.clone(),
            r.admitted.to_string(),
            r.max_in_window.to_string(),
        ]);
    }
    println!("boundary burst, 100 before and 100 after a reset, limit 100 per 1000 ms:\n{t}\n");
    println!("wrote:");
    for w in written {
        println!("  {w}");
    }
    ExitCode::SUCCESS
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

/// `ratelab sweep --redis URL`: the ladder on a real Redis (a private one for `auto` or
/// `auto-cluster`), then simulated at its measured round trips, printed and written.
pub fn real_sweep(
    cfg: &crate::sweep::SweepConfig,
    url: &str,
    runs: u32,
    threads: usize,
    out: &std::path::Path,
    docs: RealDocs<'_>,
) -> ExitCode {
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(EXIT_BAD_INPUT)
    };
    let kind = ladder_kind(url);
    let doc = docs.for_store(kind);
    if let Err(e) = std::fs::read_to_string(doc) {
        return fail(format!("{}: {e}", doc.display()));
    }
    let (url, _store) = match redis_store_arg(url) {
        Ok(u) => u,
        Err(e) => return fail(e),
    };
    let rcfg = real::RealConfig {
        concurrency: cfg.concurrency.clone(),
        seconds: cfg.duration_ms / 1000,
        rate_per_client: cfg.rate_per_client,
        capacity: cfg.capacity,
        refill_per_sec: cfg.refill_per_sec,
        runs,
    };
    let total = rcfg.concurrency.len() * 2 * runs as usize;
    let bar = indicatif::ProgressBar::new(total as u64);
    let started = std::time::Instant::now();
    let points = match tokio_rt().block_on(real::ladder(&url, &rcfg, &|d, _| {
        bar.set_position(d as u64)
    })) {
        Ok(p) => p,
        Err(e) => return fail(e),
    };
    bar.finish_and_clear();
    println!(
        "{} real runs in {:.1} s on {url}",
        points.len(),
        started.elapsed().as_secs_f64()
    );
    write_matched(kind, points, cfg, threads, out, docs.for_store(kind))
}

/// `sweep --resimulate-redis`: the committed real runs, simulated again: one server's, and a
/// cluster's when it was measured.
pub fn resimulate_real(
    cfg: &crate::sweep::SweepConfig,
    threads: usize,
    out: &std::path::Path,
    writeup: &std::path::Path,
    cluster_doc: &std::path::Path,
) -> ExitCode {
    use crate::matched::{RealLadder, RealStore};
    let docs = RealDocs {
        writeup,
        cluster_doc,
    };
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
            .and_then(|t| serde_json::from_str::<RealLadder>(&t).map_err(|e| e.to_string()));
        let code = match committed {
            Ok(l) => write_matched(kind, l.real, cfg, threads, out, docs.for_store(kind)),
            Err(e) => {
                eprintln!(
                    "error: {}: {e} (run `ratelab sweep --redis {measure}` to measure it)",
                    path.display()
                );
                ExitCode::from(EXIT_BAD_INPUT)
            }
        };
        if code != ExitCode::SUCCESS {
            return code;
        }
    }
    ExitCode::SUCCESS
}

/// Simulates the ladder at `points`' round trips, prints the comparison and writes it.
fn write_matched(
    kind: crate::matched::RealStore,
    points: Vec<ratelab_probe::real::RealPoint>,
    cfg: &crate::sweep::SweepConfig,
    threads: usize,
    out: &std::path::Path,
    writeup: &std::path::Path,
) -> ExitCode {
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(EXIT_BAD_INPUT)
    };
    let ladder = match crate::matched::simulate(kind, points, cfg, &cfg.seeds, threads) {
        Ok(l) => l,
        Err(e) => return fail(e),
    };
    println!(
        "{} simulated runs at the measured round trips\n",
        ladder.sim.len()
    );
    println!("{}", crate::matched::real_table(&ladder));
    match crate::output::write_real(&ladder, out, writeup) {
        Ok(w) => {
            println!("wrote:");
            for f in w {
                println!("  {f}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `ratelab bench`: the simulator's speed on the atomic path, beside its two floors (madsim
/// alone, and no runtime at all).
pub fn bench(gateways: u64, seconds: u64, rate: u64, runs: u32, print_scenario: bool) -> ExitCode {
    let clients = gateways;
    let per_client = rate.div_ceil(clients).max(1);
    let built = Scenario::builder("simulator benchmark")
        .file("<bench>")
        .duration_ms(seconds.saturating_mul(1000))
        .gateways(gateways)
        .token_bucket(100, 50)
        .atomic()
        .client(
            ratelab_sim::Client::keys("user", 1000)
                .count(clients)
                .poisson(per_client),
        )
        .build();
    let sc = match built {
        Ok(sc) => sc,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if print_scenario {
        match serde_json::to_string_pretty(sc.spec()) {
            Ok(text) => println!("{text}"),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
        return ExitCode::SUCCESS;
    }
    println!(
        "atomic path, {gateways} gateways, {clients} clients, {} requests/s offered over 1000 keys, {seconds} simulated s{}",
        per_client * clients,
        if cfg!(debug_assertions) {
            " (debug build: use --release)"
        } else {
            ""
        }
    );
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
    let mut best = 0.0f64;
    for i in 1..=runs.max(1) {
        let (r, _) = ratelab_sim::run(&sc, 1, RunOptions::default());
        let wall_s = r.wall_ms / 1e3;
        let per_sec = r.requests as f64 / wall_s;
        best = best.max(per_sec);
        t.add_row([
            i.to_string(),
            r.requests.to_string(),
            format!("{wall_s:.3}"),
            format!("{per_sec:.0}"),
            format!("{:.1}", r.sim_ns as f64 / 1e9 / wall_s),
        ]);
    }
    println!("{t}");
    println!("best: {best:.0} simulated requests per wall-clock second");
    // The floors, on the same load, in the same run.
    let rate_per_client = per_client;
    let madsim = (0..runs.max(1))
        .map(|_| {
            ratelab_sim::floor::madsim_round_trips(clients as u32, rate_per_client, seconds, 1)
        })
        .max_by(|a, b| a.per_sec().total_cmp(&b.per_sec()));
    let bare = (0..runs.max(1))
        .map(|_| ratelab_sim::floor::event_loop(clients as u32, rate_per_client, seconds, 1000, 1))
        .max_by(|a, b| a.per_sec().total_cmp(&b.per_sec()));
    if let (Some(m), Some(e)) = (madsim, bare) {
        println!(
            "floor, madsim alone (one task and one endpoint round trip per request): {:.0} requests/s (best of {runs}); the cluster runs at {:.2}x it",
            m.per_sec(),
            best / m.per_sec()
        );
        println!(
            "floor, no runtime (one GCRA decision per request from a binary heap): {:.0} ns per request (best of {runs})",
            e.wall.as_nanos() as f64 / e.requests.max(1) as f64
        );
    }
    ExitCode::SUCCESS
}

/// `ratelab run`'s table, per-seed lines, the files it writes and a failure's report.
pub mod run_report {
    use std::io::Write;
    use std::path::{Path, PathBuf};

    /// The scenario's summary and the table's column names, their widths [`row`]'s. The table
    /// is written a row at a time, each seed as soon as it is done, with its gateway, job and
    /// verdict lines under it, so its columns are padded here rather than laid out at the end.
    pub fn header(out: &mut impl Write, sc: &ratelab_sim::Scenario) {
        let _ = writeln!(
            out,
            "{} — {}\n{} path, {} gateways, {} client groups, {} faults, {} ms\n",
            sc.name(),
            sc.spec().description,
            sc.path().name(),
            sc.spec().gateways.get(),
            sc.spec().clients.len(),
            sc.spec().faults.len(),
            sc.spec().duration_ms.get()
        );
        let _ = writeln!(
            out,
            "{:>8} {:>9} {:>8} {:>8} {:>7} {:>10} {:>12} {:>13}  {:<16}  result",
            "seed",
            "requests",
            "allowed",
            "denied",
            "errors",
            "max_excess",
            "total_excess",
            "max_in_window",
            "trace_hash"
        );
    }

    /// Writes seed `seed`'s request logs to `DIR/seed-SEED/gateway-N.jsonl`, one file per
    /// gateway (empty for a gateway that answered nothing); the directory written.
    pub fn write_request_logs(
        dir: &Path,
        sc: &ratelab_sim::Scenario,
        history: &ratelab_sim::History,
        seed: u64,
    ) -> Result<PathBuf, String> {
        let dir = dir.join(format!("seed-{seed}"));
        let written = std::fs::create_dir_all(&dir).and_then(|()| {
            (0..sc.spec().gateways.get()).try_for_each(|g| {
                let name = format!("gateway-{g}");
                let text = history.request_logs.get(&name).map_or("", String::as_str);
                std::fs::write(dir.join(format!("{name}.jsonl")), text)
            })
        });
        written.map_err(|e| format!("request logs in {}: {e}", dir.display()))?;
        Ok(dir)
    }

    /// Where seed `seed`'s timeline goes: `path` itself, or `NAME-seed-SEED.html` beside it
    /// when the run has `several` seeds.
    pub fn timeline_path(path: &Path, seed: u64, several: bool) -> PathBuf {
        if !several {
            return path.to_owned();
        }
        let stem = path
            .file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
        path.with_file_name(format!("{stem}-seed-{seed}.html"))
    }

    /// A failed seed's report: its failures, the worst window and the commands that replay it.
    pub fn failure(r: &ratelab_sim::Report) -> String {
        use std::fmt::Write as _;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "\nFAILED: scenario {} ({}), seed {}",
            r.scenario, r.file, r.seed
        );
        for f in &r.failures {
            let _ = writeln!(s, "  {f}");
        }
        if let Some(w) = &r.excess_witness {
            let _ = writeln!(
                s,
                "  worst window: key {:?}, {} admitted in [{} ns, {} ns] against a bound of {}; requests {:?}",
                w.key, w.admitted, w.from_ns, w.to_ns, w.bound, w.ids
            );
        }
        let _ = writeln!(s, "  replay:");
        for c in ratelab_sim::replay_commands(&r.scenario, &r.file, r.seed) {
            let _ = writeln!(s, "    {c}");
        }
        s
    }

    /// One seed's line of `ratelab run`'s table.
    pub fn row(out: &mut impl Write, r: &ratelab_sim::Report) {
        let _ = writeln!(
            out,
            "{:>8} {:>9} {:>8} {:>8} {:>7} {:>10} {:>12} {:>13}  {:<16}  {}",
            r.seed,
            r.requests,
            r.allowed,
            r.denied,
            r.errors,
            r.max_excess,
            r.total_excess,
            r.max_in_window,
            r.trace_hash,
            if r.passed { "pass" } else { "FAIL" }
        );
    }

    /// The gateway's failure handling for one seed, when there was any.
    pub fn gateway_line(out: &mut impl Write, r: &ratelab_sim::Report) {
        let c = &r.gateway_counters;
        if r.fail_open == 0 && r.bypassed == 0 && c.breaker_opened == 0 {
            return;
        }
        let mut line = format!(
            "{:>8}   fail-open {} {:?}",
            "", r.fail_open, r.fail_open_by_reason
        );
        if let Some([p50, p99, max]) = r.fail_open_latency_ms {
            line.push_str(&format!(
                ", answer latency p50 {p50:.3} ms, p99 {p99:.3} ms, max {max:.3} ms"
            ));
        }
        line.push_str(&format!(
            "; bypassed {}; breaker opened {}, closed {}",
            r.bypassed, c.breaker_opened, c.breaker_closed
        ));
        let _ = writeln!(out, "{line}");
    }

    /// The cleanup job's lease and fencing figures for one seed, when it ran.
    pub fn job_line(out: &mut impl Write, r: &ratelab_sim::Report) {
        let Some(j) = &r.job else { return };
        let mut line = format!(
            "{:>8}   cleanup job ({}): {} grants, {} runs, stale commits {} rejected / {} accepted, \
             {} buckets deleted, longest gap {:.3} ms",
            "",
            if j.fencing { "fenced" } else { "NOT fenced" },
            j.grants,
            j.runs,
            j.stale_rejected,
            j.stale_accepted,
            j.keys_removed,
            j.max_gap_ms
        );
        if let Some(first) = &j.first_live_delete {
            line.push_str(&format!(
                "; {} live buckets deleted, the first: {first}",
                j.live_deleted
            ));
        }
        let _ = writeln!(out, "{line}");
    }

    /// One event of a history, a sent request with its client, key, gateway and cost.
    pub fn describe(e: &ratelab_sim::history::Timed, h: &ratelab_sim::History) -> String {
        use ratelab_sim::history::Event;
        match &e.event {
            Event::Sent { id } => {
                let r = &h.requests[*id as usize];
                format!(
                    "{:>12.6} ms  sent      #{id} client {} key {:?} gateway {} cost {}",
                    e.at.as_u64() as f64 / 1e6,
                    r.client,
                    r.key,
                    r.gateway,
                    r.cost
                )
            }
            _ => e.to_string(),
        }
    }
}
