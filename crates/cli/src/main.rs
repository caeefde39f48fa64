//! `ratelab`: run, check and replay rate-limiter simulation scenarios.
//!
//! Exit codes: 0 every expectation held, 1 an expectation failed, 2 bad input.

mod explore;
mod probe;
mod soak;

use clap::{Parser, Subcommand};
use ratelab_lab::commands::run_report::{describe, gateway_line, job_line, row};
use ratelab_sim::{RunOptions, Scenario, replay_commands};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "ratelab",
    version,
    about = "Deterministic simulation of distributed rate limiting"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a scenario's seeds (or one seed) and check its expectations.
    Run {
        /// The scenario file.
        file: PathBuf,
        /// Run only this seed (the scenario's seeds otherwise).
        #[arg(long)]
        seed: Option<u64>,
        /// Print every event of the run.
        #[arg(long)]
        trace: bool,
        /// Print one JSON object per seed instead of a table.
        #[arg(long)]
        json: bool,
        /// Write each gateway's request log (JSON lines) to DIR/seed-SEED/gateway-N.jsonl.
        #[arg(long, value_name = "DIR")]
        request_logs: Option<PathBuf>,
        /// Write a self-contained HTML timeline of one key's requests (with several seeds,
        /// one file per seed: NAME-seed-S.html).
        #[arg(long, value_name = "FILE")]
        timeline: Option<PathBuf>,
        /// The key the timeline shows (default: the envelope's witness, else the busiest key).
        #[arg(long, value_name = "KEY", requires = "timeline")]
        timeline_key: Option<String>,
        /// Worker threads for the seeds (1 to 256; default: every core). The output is the
        /// same on any number.
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
        threads: Option<u64>,
    },
    /// Request logs: scan by time range.
    Log {
        #[command(subcommand)]
        command: LogCommand,
    },
    /// Validate scenario files without running them.
    Check {
        /// Scenario files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print the JSON Schema of scenario files.
    Schema,
    /// Draw whole scenarios from seeds, run them against a system under test and judge each
    /// run with every checker: find the failures no scenario names (exit 1 if any).
    Explore(Box<explore::ExploreArgs>),
    /// Mutate the shipped scenarios and feed each input to validation and a short run: every
    /// input must get a verdict or a clear error, never a panic (exit 1 if one panics).
    Fuzz {
        /// Inputs to generate (1 to 10 000 000).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
        inputs: u64,
        /// The campaign's seed: the same seed gives the same inputs.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Where the scenarios to mutate are.
        #[arg(long, default_value = "sim-scenarios")]
        corpus: PathBuf,
        /// Run a valid input only if it schedules at most this many requests (1 to 1 000 000).
        #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        run_requests: u64,
        /// … and simulates at most this long, ms (1 to 3 600 000).
        #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
        run_ms: u64,
    },
    /// Soak a real ratelab-server: a long, bounded run over many keys, sampled for growth of
    /// its memory, latency tail and denials.
    Soak(Box<soak::SoakArgs>),
    /// Serve the gateway over HTTP, on the in-memory store or Redis: 200 when allowed, 429
    /// when denied (the code of `ratelab-server`, the binary to deploy, which has no
    /// simulator linked in).
    Serve(Box<ratelab_server::ServeArgs>),
    /// Check a real limiter from outside (an HTTP endpoint, a Redis script, the
    /// read-then-write client) against the policy it claims: exit 1 if a check fails, 2 on
    /// bad input or an unreachable limiter.
    Probe {
        #[command(subcommand)]
        command: probe::ProbeCommand,
    },
    /// The overshoot experiment: naive vs atomic across concurrency and store round trip,
    /// plus the algorithm comparison. Writes docs/results/ and the figures in the docs.
    Sweep(Box<SweepArgs>),
    /// Measure what a Redis Cluster failover costs a token bucket: on a private local cluster
    /// (three primaries, three replicas), kill the hot key's primary under load, once without
    /// and once with WAIT after each decision; failed calls, recovery and overshoot.
    Failover {
        /// Concurrent senders on the hot key (1 to 256).
        #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=256))]
        senders: u32,
        /// Seconds of traffic per run (6 to 120: the kill is at 1 s, the restart 2 s after the
        /// promotion; with --scale, 1 to 120 per measurement).
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=120))]
        seconds: u64,
        /// B (1 to 1000000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        capacity: u64,
        /// R per second (1 to 1000000). The default refills B in 5 s, longer than the
        /// outage, so that a lost write would show as an overshoot.
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        refill_per_sec: u64,
        /// The WAIT run's longest wait for a replica, ms (1 to 1000).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(1..=1000))]
        wait_ms: u64,
        /// Print the reports as JSON.
        #[arg(long)]
        json: bool,
        /// Instead, measure decisions per second on one private redis-server and on a private
        /// cluster of three primaries, side by side.
        #[arg(long)]
        scale: bool,
        /// Where the results go: `OUT/failover-real.json` (or `OUT/cluster-scale.json` with
        /// --scale).
        #[arg(long, default_value = "docs/results")]
        out: PathBuf,
        /// The doc whose `figures:failover-real` (or `figures:cluster-scale`) block is
        /// rewritten.
        #[arg(long, default_value = "docs/CLUSTER.md")]
        doc: PathBuf,
    },
    /// Measure simulator speed: simulated requests and simulated seconds per wall second on
    /// the atomic path (build with --release for meaningful figures).
    Bench {
        /// Gateways in the cluster (1 to 256).
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=256))]
        gateways: u64,
        /// Simulated seconds of load (1 to 600); for Redis, wall seconds per measurement (1 to
        /// 60).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
        seconds: u64,
        /// Offered load, requests per simulated second, spread over 1 000 keys (1 to 1 000 000).
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        rate: u64,
        /// Runs to make (1 to 100; the report shows each and the best).
        #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
        runs: u32,
        /// Benchmark the atomic path on a real Redis instead, beside redis-benchmark running
        /// the same script: a URL (`redis+cluster://HOST:PORT,…` for a Redis Cluster, where
        /// redis-benchmark runs with `--cluster`), `auto` for a private redis-server, or
        /// `auto-cluster` for a private local cluster.
        #[arg(long)]
        redis: Option<String>,
        /// Concurrent clients for the Redis benchmark (1 to 1024).
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=1024))]
        clients: u64,
        /// Print the benchmark's scenario file and exit (to run it under a profiler with
        /// `ratelab run`).
        #[arg(long, conflicts_with = "redis")]
        print_scenario: bool,
    },
}

#[derive(Subcommand, Debug)]
enum LogCommand {
    /// Print the request log lines whose id time is in [--from, --to), from one gateway's log
    /// or several merged in id order. Each file is searched by binary search on its ids; only
    /// the lines in the range are parsed.
    Scan {
        /// Request logs, one per gateway.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Start (inclusive): Unix ms or RFC 3339 (2026-01-01T00:00:00.250Z).
        #[arg(long)]
        from: String,
        /// End (exclusive): Unix ms or RFC 3339.
        #[arg(long)]
        to: String,
        /// Only this API key.
        #[arg(long)]
        key: Option<String>,
        /// Only this decision.
        #[arg(long, value_parser = [
            "allowed", "denied", "failed_open", "bypassed", "rejected", "bad_request",
            "unavailable",
        ])]
        decision: Option<String>,
    },
}

use ratelab_lab::commands::{EXIT_BAD_INPUT, EXIT_FAILED};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { EXIT_BAD_INPUT } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Run {
            file,
            seed,
            trace,
            json,
            request_logs,
            timeline,
            timeline_key,
            threads,
        } => run(
            &file,
            seed,
            RunOutput {
                trace,
                json,
                request_logs: request_logs.as_deref(),
                timeline: timeline.as_deref(),
                timeline_key: timeline_key.as_deref(),
            },
            threads.map_or_else(ratelab_sim::parallel::default_threads, |t| t as usize),
        ),
        Command::Log {
            command:
                LogCommand::Scan {
                    files,
                    from,
                    to,
                    key,
                    decision,
                },
        } => log_scan(&files, &from, &to, key, decision),
        Command::Check { files } => check(&files),
        Command::Failover {
            senders,
            seconds,
            scale: true,
            out,
            doc,
            ..
        } => ratelab_lab::commands::scale(senders, seconds, &out, &doc),
        Command::Failover { seconds, .. } if seconds < 6 => {
            eprintln!(
                "error: invalid value '{seconds}' for '--seconds': a failover run needs 6 to 120 \
                 (the kill is at 1 s, the restart 2 s after the promotion)"
            );
            ExitCode::from(EXIT_BAD_INPUT)
        }
        Command::Failover {
            senders,
            seconds,
            capacity,
            refill_per_sec,
            wait_ms,
            json,
            out,
            doc,
            ..
        } => ratelab_lab::commands::failover(
            ratelab_lab::failover::FailoverConfig {
                senders,
                seconds: seconds as f64,
                kill_at: 1.0,
                restart_after: Some(2.0),
                capacity,
                refill_per_sec,
                wait: None,
                timeout: std::time::Duration::from_millis(50 + 2 * wait_ms),
            },
            std::time::Duration::from_millis(wait_ms),
            json,
            (&out, &doc),
        ),
        Command::Bench {
            redis: Some(url),
            clients,
            seconds,
            ..
        } => ratelab_lab::commands::redis_bench(&url, clients, seconds),
        Command::Bench {
            gateways,
            seconds,
            rate,
            runs,
            print_scenario,
            ..
        } => ratelab_lab::commands::bench(gateways, seconds, rate, runs, print_scenario),
        Command::Sweep(args) => sweep_command(*args),
        Command::Serve(args) => ratelab_server::serve_command(*args),
        Command::Probe { command } => probe::probe_command(command),
        Command::Soak(args) => soak::soak_command(*args),
        Command::Explore(args) => explore::explore_command(*args),
        Command::Fuzz {
            inputs,
            seed,
            corpus,
            run_requests,
            run_ms,
        } => fuzz(
            &corpus,
            &ratelab_lab::fuzz::FuzzConfig {
                inputs,
                seed,
                run_requests,
                run_ms,
            },
        ),
        Command::Schema => {
            print!("{}", ratelab_sim::scenario::json_schema());
            ExitCode::SUCCESS
        }
    }
}

/// `ratelab fuzz`.
fn fuzz(dir: &std::path::Path, cfg: &ratelab_lab::fuzz::FuzzConfig) -> ExitCode {
    let corpus = match ratelab_lab::fuzz::corpus(dir) {
        Ok(c) if !c.is_empty() => c,
        Ok(_) => {
            eprintln!("error: {}: no scenario files to mutate", dir.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
        Err(e) => {
            eprintln!("error: {}: {e}", dir.display());
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let bar = indicatif::ProgressBar::new(cfg.inputs);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} inputs ({per_sec}, {eta} left)",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let started = std::time::Instant::now();
    let r = ratelab_lab::fuzz::fuzz(&corpus, cfg, &|done| bar.set_position(done));
    bar.finish_and_clear();
    println!(
        "{} inputs from {} scenarios (seed {}) in {:.1} s{}",
        r.inputs,
        corpus.len(),
        cfg.seed,
        started.elapsed().as_secs_f64(),
        if cfg!(debug_assertions) {
            ", debug build (overflow checks on)"
        } else {
            ", release build"
        }
    );
    println!(
        "  refused by validation (exit 2): {}
  valid: {} — run for one seed: {} ({} passed, {} failed their expectations), over the run budget: {}
  panics: {}",
        r.invalid, r.valid, r.ran, r.passed, r.failed, r.not_run, r.panic_count
    );
    if r.panic_count == 0 {
        return ExitCode::SUCCESS;
    }
    for p in &r.panics {
        eprintln!(
            "\nPANIC in {} of input {} (mutated from {}): {}\n--- input ---\n{}\n---",
            p.stage,
            p.input,
            p.from.display(),
            p.message,
            p.text
        );
    }
    eprintln!(
        "replay: cargo run -p ratelab -- fuzz --inputs {} --seed {}",
        cfg.inputs, cfg.seed
    );
    ExitCode::from(EXIT_FAILED)
}

fn load(file: &std::path::Path) -> Result<Scenario, ExitCode> {
    Scenario::load(file).map_err(|e| {
        eprintln!("error: {e}");
        ExitCode::from(EXIT_BAD_INPUT)
    })
}

fn check(files: &[PathBuf]) -> ExitCode {
    let mut ok = true;
    for f in files {
        match Scenario::load(f) {
            Ok(sc) => println!(
                "ok: {} ({} seeds, about {} requests per seed)",
                f.display(),
                sc.spec().seeds.get().len(),
                sc.scheduled_requests()
            ),
            Err(e) => {
                eprintln!("error: {e}");
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_BAD_INPUT)
    }
}

/// `ratelab log scan`.
fn log_scan(
    files: &[PathBuf],
    from: &str,
    to: &str,
    key: Option<String>,
    decision: Option<String>,
) -> ExitCode {
    use ratelab_gateway::reqlog::{ScanQuery, parse_time, scan};
    let bad = |msg: String| {
        eprintln!("error: {msg}");
        ExitCode::from(EXIT_BAD_INPUT)
    };
    let (from_ms, to_ms) = match (parse_time(from), parse_time(to)) {
        (Ok(f), Ok(t)) => (f, t),
        (Err(e), _) => return bad(format!("--from {e}")),
        (_, Err(e)) => return bad(format!("--to {e}")),
    };
    if to_ms <= from_ms {
        return bad(format!(
            "--to ({to_ms} ms) must be after --from ({from_ms} ms)"
        ));
    }
    let q = ScanQuery {
        from_ms,
        to_ms,
        key,
        decision,
    };
    let result = match scan(files, &q) {
        Ok(r) => r,
        Err(e) => return bad(e.to_string()),
    };
    let mut out = std::io::stdout().lock();
    for l in &result.lines {
        let _ = writeln!(out, "{}", l.text);
    }
    let mut by_decision = std::collections::BTreeMap::<&str, u64>::new();
    for l in &result.lines {
        let d = l.fields.get("decision").and_then(|v| v.as_str());
        *by_decision.entry(d.unwrap_or("?")).or_default() += 1;
    }
    eprintln!("{} lines matched {by_decision:?}", result.lines.len());
    for f in &result.files {
        eprintln!(
            "  {}: {} bytes, {} ids read by the binary search, {} lines in the range parsed",
            f.file.display(),
            f.bytes,
            f.probes,
            f.in_range
        );
    }
    ExitCode::SUCCESS
}

/// What `ratelab run` prints and writes besides the table.
struct RunOutput<'a> {
    trace: bool,
    json: bool,
    request_logs: Option<&'a std::path::Path>,
    timeline: Option<&'a std::path::Path>,
    timeline_key: Option<&'a str>,
}

fn run(
    file: &std::path::Path,
    seed: Option<u64>,
    output: RunOutput<'_>,
    threads: usize,
) -> ExitCode {
    let RunOutput {
        trace,
        json,
        request_logs,
        timeline,
        timeline_key,
    } = output;
    let sc = match load(file) {
        Ok(sc) => sc,
        Err(code) => return code,
    };
    let seeds = seed.map_or_else(|| sc.spec().seeds.get().to_vec(), |s| vec![s]);
    let mut out = std::io::stdout().lock();
    if !json {
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
    let mut failed = Vec::new();
    let options = RunOptions {
        // The timeline draws every store call of its key from the events.
        keep_events: trace || timeline.is_some(),
        request_logs: request_logs.is_some(),
    };
    // Every seed on the worker threads; each printed in seed order as soon as it is done.
    let mut write_error = None;
    ratelab_sim::run_seeds(&sc, &seeds, threads, options, |(report, history)| {
        if write_error.is_some() {
            return;
        }
        let mut report = report;
        let (verdict, named) =
            ratelab_lab::explore::report::explorer_verdict(&sc, &mut report, &history);
        let s = report.seed;
        if let Some(dir) = request_logs {
            let dir = dir.join(format!("seed-{s}"));
            // One file per gateway, empty for a gateway that answered nothing.
            let written = std::fs::create_dir_all(&dir).and_then(|()| {
                (0..sc.spec().gateways.get()).try_for_each(|g| {
                    let name = format!("gateway-{g}");
                    let text = history.request_logs.get(&name).map_or("", String::as_str);
                    std::fs::write(dir.join(format!("{name}.jsonl")), text)
                })
            });
            if let Err(e) = written {
                write_error = Some(format!("request logs in {}: {e}", dir.display()));
                return;
            }
            eprintln!(
                "request logs: {} (gateway-0.jsonl to gateway-{}.jsonl)",
                dir.display(),
                sc.spec().gateways.get() - 1
            );
        }
        if let Some(path) = timeline {
            let path = if seeds.len() > 1 {
                let stem = path
                    .file_stem()
                    .map_or_else(String::new, |s| s.to_string_lossy().into_owned());
                path.with_file_name(format!("{stem}-seed-{s}.html"))
            } else {
                path.to_owned()
            };
            let key = timeline_key
                .map(str::to_owned)
                .or_else(|| named.key.clone());
            match ratelab_lab::timeline::write(&sc, &report, &history, key, named.request, &path) {
                Ok(true) => {}
                Ok(false) => {
                    write_error = Some("timeline: the run has no requests".into());
                    return;
                }
                Err(e) => {
                    write_error = Some(e);
                    return;
                }
            }
            eprintln!("timeline: {}", path.display());
        }
        if trace {
            for e in &history.events {
                let _ = writeln!(out, "{}", describe(e, &history));
            }
        }
        if json {
            let _ = writeln!(
                out,
                "{}",
                serde_json::to_string(&report).expect("report serializes")
            );
        } else {
            row(&mut out, &report);
            gateway_line(&mut out, &report);
            job_line(&mut out, &report);
            if let Some(v) = &verdict {
                let _ = writeln!(out, "{v}");
            }
        }
        if !report.passed {
            failed.push(report);
        }
    });
    let _ = out.flush();
    if let Some(e) = write_error {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if failed.is_empty() {
        return ExitCode::SUCCESS;
    }
    for r in &failed {
        eprintln!(
            "\nFAILED: scenario {} ({}), seed {}",
            r.scenario, r.file, r.seed
        );
        for f in &r.failures {
            eprintln!("  {f}");
        }
        if let Some(w) = &r.excess_witness {
            eprintln!(
                "  worst window: key {:?}, {} admitted in [{} ns, {} ns] against a bound of {}; requests {:?}",
                w.key, w.admitted, w.from_ns, w.to_ns, w.bound, w.ids
            );
        }
        eprintln!("  replay:");
        for c in replay_commands(&r.scenario, &r.file, r.seed) {
            eprintln!("    {c}");
        }
    }
    ExitCode::from(EXIT_FAILED)
}

/// `ratelab sweep`'s flags.
#[derive(clap::Args, Debug)]
struct SweepArgs {
    /// Concurrency ladder: powers of two from 1 up to this (1 to 256, one gateway per
    /// sender).
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=256))]
    max_concurrency: u32,
    /// The concurrency ladder given step by step instead (comma separated, each 1 to 256).
    #[arg(long, value_delimiter = ',', conflicts_with = "max_concurrency",
          value_parser = clap::value_parser!(u32).range(1..=256))]
    concurrency: Vec<u32>,
    /// One-way store latencies, µs (comma separated, each at most 10000000); a store
    /// round trip is twice one.
    #[arg(long, value_delimiter = ',', default_values_t = vec![100u64, 500, 1_500, 4_000, 10_000],
          value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    latencies_us: Vec<u64>,
    /// Seeds per point: 1 to N (N from 1 to 100).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=100))]
    seeds: u64,
    /// Simulated seconds per run (1 to 60).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u64).range(1..=60))]
    seconds: u64,
    /// Worker threads (1 to 64; default: every core).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=64))]
    threads: Option<u64>,
    /// Where the CSV, JSON and SVG files go.
    #[arg(long, default_value = "docs/results")]
    out: PathBuf,
    /// The write-up whose marked figures are rewritten.
    #[arg(long, default_value = "docs/WRITEUP.md")]
    writeup: PathBuf,
    /// The README whose marked headline table is rewritten.
    #[arg(long, default_value = "README.md")]
    readme: PathBuf,
    /// Run the ladder on a real Redis instead: a URL (`redis+cluster://HOST:PORT,…` for a
    /// Redis Cluster), `auto` for a private redis-server on a free loopback port, or
    /// `auto-cluster` for a private local cluster of three primaries and three replicas.
    #[arg(long)]
    redis: Option<String>,
    /// With a cluster in --redis: the doc whose `sweep:redis-cluster` block is rewritten
    /// (the results go to `OUT/overshoot-redis-cluster.{json,csv}`).
    #[arg(long, default_value = "docs/CLUSTER.md")]
    cluster_doc: PathBuf,
    /// With --redis: repetitions of the real ladder (1 to 20).
    #[arg(long, default_value_t = 3, requires = "redis",
          value_parser = clap::value_parser!(u32).range(1..=20))]
    redis_runs: u32,
    /// Keep the committed real-Redis runs (`OUT/overshoot-redis.json`) and rerun only
    /// their simulated side (after a change to the simulator).
    #[arg(long, conflicts_with_all = ["redis", "scenarios_only"])]
    resimulate_redis: bool,
    /// Keep the committed ladder (`OUT/overshoot.json`) and rerun only the scenarios the
    /// docs cite: `gateway.json` and their tables (after editing a scenario).
    #[arg(long, conflicts_with = "redis")]
    scenarios_only: bool,
}

/// `ratelab sweep`: the simulated ladder, the real one on Redis, or the committed real runs
/// simulated again.
fn sweep_command(args: SweepArgs) -> ExitCode {
    let SweepArgs {
        max_concurrency,
        concurrency,
        latencies_us,
        seeds,
        seconds,
        threads,
        out,
        writeup,
        readme,
        redis,
        cluster_doc,
        redis_runs,
        resimulate_redis,
        scenarios_only,
    } = args;
    if latencies_us.is_empty() {
        eprintln!("error: --latencies-us needs 1 or more values");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let threads = threads.map_or_else(ratelab_sim::parallel::default_threads, |t| t as usize);
    let concurrency = if concurrency.is_empty() {
        (0..=max_concurrency.ilog2()).map(|i| 1 << i).collect()
    } else {
        concurrency
            .into_iter()
            .collect::<std::collections::BTreeSet<u32>>()
            .into_iter()
            .collect()
    };
    let cfg = ratelab_lab::sweep::SweepConfig {
        concurrency,
        latencies_us,
        seeds: (1..=seeds).collect(),
        duration_ms: seconds * 1000,
        ..Default::default()
    };
    if resimulate_redis {
        return ratelab_lab::commands::resimulate_real(&cfg, threads, &out, &writeup, &cluster_doc);
    }
    match redis {
        Some(url) => {
            let docs = ratelab_lab::commands::RealDocs {
                writeup: &writeup,
                cluster_doc: &cluster_doc,
            };
            ratelab_lab::commands::real_sweep(&cfg, &url, redis_runs, threads, &out, docs)
        }
        None => {
            ratelab_lab::commands::sweep(&cfg, threads, scenarios_only, &out, &writeup, &readme)
        }
    }
}
