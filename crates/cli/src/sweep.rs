//! `ratelab sweep`: the overshoot experiment's flags, turned into a `SweepConfig` for
//! `ratelab_lab::commands` (the simulated ladder, the real one on Redis, or the committed
//! real runs simulated again).

use ratelab_lab::commands::{self, EXIT_BAD_INPUT};
use ratelab_lab::sweep::SweepConfig;
use std::path::PathBuf;
use std::process::ExitCode;

/// `ratelab sweep`'s flags.
#[derive(clap::Args, Debug)]
pub struct SweepArgs {
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
pub fn sweep_command(args: SweepArgs) -> ExitCode {
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
    let cfg = SweepConfig {
        concurrency,
        latencies_us,
        seeds: (1..=seeds).collect(),
        duration_ms: seconds * 1000,
        ..Default::default()
    };
    let outcome = if resimulate_redis {
        commands::resimulate_real(&cfg, threads, &out, &writeup, &cluster_doc)
            .map(|done| done.iter().map(ToString::to_string).collect::<String>())
    } else if let Some(url) = redis {
        let docs = commands::RealDocs {
            writeup: &writeup,
            cluster_doc: &cluster_doc,
        };
        let bar = progress_bar(commands::real_sweep_runs(&cfg, redis_runs));
        let done = commands::real_sweep(&cfg, &url, redis_runs, threads, &out, docs, &|d, _| {
            bar.set_position(d as u64)
        });
        bar.finish_and_clear();
        done.map(|d| d.to_string())
    } else {
        let bar = progress_bar(commands::sweep_runs(&cfg));
        let done = commands::sweep(
            &cfg,
            threads,
            scenarios_only,
            &out,
            &writeup,
            &readme,
            &|d, _| bar.set_position(d as u64),
        );
        bar.finish_and_clear();
        done.map(|d| d.to_string())
    };
    crate::print_outcome(outcome)
}

/// A bar over `total` runs.
fn progress_bar(total: usize) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} runs ({eta} left)",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}
