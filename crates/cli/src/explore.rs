//! `ratelab explore`: the campaign's command line, its progress bar and its report.

use ratelab_lab::commands::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNKNOWN};
use ratelab_lab::explore::report::{render, table};
use ratelab_lab::explore::{self, Campaign, ExploreReport, Sut, shrink};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// `ratelab explore`'s flags.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct ExploreArgs {
    /// Join shard reports, or measure the planted bugs, instead of exploring.
    #[command(subcommand)]
    command: Option<ExploreCommand>,
    /// Seeds to explore, from --first (1 to 100 000 000).
    #[arg(long, default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 1)]
    first: u64,
    /// Stop after this much wall time, whatever is left of --seeds: seconds (`60`, `60s`) or
    /// minutes (`10m`), 1 s to 24 h.
    #[arg(long, value_parser = parse_time)]
    time: Option<u64>,
    /// Worker threads (1 to 256; default: every core).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
    jobs: Option<u64>,
    /// Run only shard I of N (`I/N`, 0 ≤ I < N): the seeds congruent to I modulo N.
    #[arg(long, value_parser = parse_shard, default_value = "0/1")]
    shard: (u64, u64),
    /// The system under test: correct, or a planted bug.
    #[arg(long, default_value = "correct", value_parser = sut_parser())]
    sut: Sut,
    /// Do not shrink the failures found.
    #[arg(long)]
    no_shrink: bool,
    /// Runs each shrink may make (1 to 100 000).
    #[arg(long, default_value_t = shrink::DEFAULT_RUNS, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    shrink_runs: u32,
    /// Where shrunk failures are written as regression scenarios.
    #[arg(long, default_value = "sim-scenarios/regressions")]
    regressions: PathBuf,
    /// Where each distinct failure's drawn scenario is saved, and the report.
    #[arg(long, default_value = "explore-out")]
    out: PathBuf,
    /// Print the report as JSON instead of text.
    #[arg(long)]
    json: bool,
    /// The linearizability search's budget per key and epoch, in states (1 to 10^8): past it
    /// a key is unknown, and a campaign with unknowns and no failure exits 3.
    #[arg(long, default_value_t = explore::verdict::LINEARIZABILITY_BUDGET, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    budget: u64,
}

#[derive(clap::Subcommand, Debug)]
enum ExploreCommand {
    /// Print the scenario an explore seed draws (as `--sut` adjusts it), to replay or edit.
    Show {
        /// The explore seed.
        seed: u64,
        /// The system under test.
        #[arg(long, default_value = "correct", value_parser = sut_parser())]
        sut: Sut,
    },
    /// Find each planted bug from seed 1 with no hint, shrink it, and write the table.
    Table {
        /// Give up on a planted bug after this many seeds (1 to 1 000 000).
        #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        max_seeds: u64,
        /// Worker threads (1 to 256; default: every core).
        #[arg(long, value_parser = clap::value_parser!(u64).range(1..=256))]
        jobs: Option<u64>,
        /// Runs each shrink may make (1 to 100 000).
        #[arg(long, default_value_t = shrink::DEFAULT_RUNS, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        shrink_runs: u32,
        /// Where the shrunk failures are written.
        #[arg(long, default_value = "sim-scenarios/regressions")]
        regressions: PathBuf,
        /// The document whose `planted` block gets the table.
        #[arg(long, default_value = "docs/EXPLORER.md")]
        writeup: PathBuf,
        /// Where the figures are written as JSON.
        #[arg(long, default_value = "docs/results/planted.json")]
        results: PathBuf,
    },
    /// Join shard reports (`report.json` files of one system under test) into one.
    Merge {
        /// The shard reports.
        #[arg(required = true)]
        reports: Vec<PathBuf>,
        /// Print the merged report as JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn parse_shard(s: &str) -> Result<(u64, u64), String> {
    let bad = || format!("{s:?}: expected I/N with 0 ≤ I < N, such as 0/4");
    let (i, n) = s.split_once('/').ok_or_else(bad)?;
    let (i, n): (u64, u64) = (
        i.trim().parse().map_err(|_| bad())?,
        n.trim().parse().map_err(|_| bad())?,
    );
    if n == 0 || i >= n {
        return Err(bad());
    }
    Ok((i, n))
}

/// `60`, `60s` or `10m`, as seconds.
fn parse_time(s: &str) -> Result<u64, String> {
    let bad = || format!("{s:?}: expected seconds (60, 60s) or minutes (10m), 1 s to 24 h");
    let t = s.trim();
    let (digits, scale) = match t.strip_suffix('m') {
        Some(d) => (d, 60),
        None => (t.strip_suffix('s').unwrap_or(t), 1),
    };
    let n: u64 = digits.trim().parse().map_err(|_| bad())?;
    let secs = n.checked_mul(scale).ok_or_else(bad)?;
    if (1..=86_400).contains(&secs) {
        Ok(secs)
    } else {
        Err(bad())
    }
}

/// Every system under test by name: clap lists them in `--help` and refuses any other.
fn sut_parser() -> impl clap::builder::TypedValueParser<Value = Sut> {
    use clap::builder::TypedValueParser as _;
    clap::builder::PossibleValuesParser::new(Sut::all().map(Sut::name))
        .map(|name| Sut::parse(&name).expect("a listed name"))
}

/// Batches of this many seeds between checks of `--time`.
const BATCH: u64 = 256;

/// Runs `ratelab explore`.
pub fn explore_command(args: ExploreArgs) -> ExitCode {
    match args.command {
        Some(ExploreCommand::Merge { reports, json }) => return merge(&reports, json),
        Some(ExploreCommand::Show { seed, sut }) => {
            return match explore::scenario_json(seed, sut) {
                Ok(json) => {
                    println!(
                        "{}",
                        serde_json::to_string_pretty(&json).unwrap_or_default()
                    );
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_FAILED)
                }
            };
        }
        Some(ExploreCommand::Table {
            max_seeds,
            jobs,
            shrink_runs,
            regressions,
            writeup,
            results,
        }) => {
            let threads = jobs.map_or_else(ratelab_sim::parallel::default_threads, |j| j as usize);
            let progress = |line: &str| eprintln!("{line}");
            return match table(
                max_seeds,
                threads,
                shrink_runs,
                &regressions,
                &writeup,
                &results,
                &progress,
            ) {
                Ok(t) if t.missing == 0 => {
                    print!("{}", t.markdown);
                    ExitCode::SUCCESS
                }
                Ok(t) => {
                    print!("{}", t.markdown);
                    eprintln!(
                        "{} planted bugs not found within {max_seeds} seeds",
                        t.missing
                    );
                    ExitCode::from(EXIT_FAILED)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(EXIT_BAD_INPUT)
                }
            };
        }
        None => {}
    }
    let threads = args
        .jobs
        .map_or_else(ratelab_sim::parallel::default_threads, |j| j as usize);
    let started = Instant::now();
    let deadline = args.time.map(|s| started + Duration::from_secs(s));
    let bar = indicatif::ProgressBar::new(args.seeds);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{elapsed_precise} [{bar:40}] {pos}/{len} seeds, {per_sec} ({msg})",
        )
        .expect("valid template")
        .progress_chars("=> "),
    );
    let mut outcomes = Vec::new();
    let mut first = args.first;
    let end = args.first.saturating_add(args.seeds);
    while first < end && deadline.is_none_or(|d| Instant::now() < d) {
        let count = BATCH.min(end - first);
        let c = Campaign {
            sut: args.sut,
            first,
            count,
            shard: args.shard,
            threads,
            budget: args.budget,
        };
        let done = outcomes.len() as u64;
        let (_, batch) = explore::run(&c, &|d, _| bar.set_position(done + d as u64));
        outcomes.extend(batch);
        let failed = outcomes.iter().filter(|o| !o.failures.is_empty()).count();
        bar.set_message(format!("{failed} failed"));
        first += count;
    }
    bar.finish_and_clear();
    let wall = started.elapsed().as_secs_f64();
    let mut report = explore::summarize(args.sut, &outcomes, Some(&args.out));
    if !args.no_shrink {
        for f in &mut report.found {
            eprintln!(
                "shrinking {}/{} (seed {})…",
                f.class.name(),
                f.checker,
                f.first_seed
            );
            if let Err(e) =
                explore::shrink_found(f, &args.regressions, Some(&args.out), args.shrink_runs)
            {
                eprintln!("error: {e}");
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    if let Err(e) = explore::save(&args.out, args.sut, &report) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).unwrap_or_default()
        );
    } else {
        print!("{}", render(&report, wall));
    }
    exit(&report)
}

/// Failures, or a checker that applied and judged nothing, exit 1; no failure but keys the
/// search could not decide, 3 (unknown is never a pass); otherwise 0.
fn exit(report: &ExploreReport) -> ExitCode {
    if !report.found.is_empty() || !report.blind().is_empty() {
        ExitCode::from(EXIT_FAILED)
    } else if report.unknown_seeds > 0 {
        ExitCode::from(EXIT_UNKNOWN)
    } else {
        ExitCode::SUCCESS
    }
}

fn merge(paths: &[PathBuf], json: bool) -> ExitCode {
    let mut reports = Vec::new();
    for p in paths {
        let r = std::fs::read_to_string(p)
            .map_err(|e| e.to_string())
            .and_then(|t| serde_json::from_str::<ExploreReport>(&t).map_err(|e| e.to_string()));
        match r {
            Ok(r) => reports.push(r),
            Err(e) => {
                eprintln!("error: {}: {e}", p.display());
                return ExitCode::from(EXIT_BAD_INPUT);
            }
        }
    }
    match explore::merge(&reports) {
        Ok(r) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&r).unwrap_or_default());
            } else {
                print!("{}", render(&r, f64::NAN));
            }
            exit(&r)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}
