//! `ratelab`: run, check and replay rate-limiter simulation scenarios.
//!
//! Exit codes: 0 every expectation held, 1 an expectation failed, 2 bad input.
//!
//! This file parses the arguments and dispatches; each subcommand is a module of its own
//! (its flags and what it prints), and the experiments behind them are `ratelab-lab`'s. The
//! commands that measure real processes (`probe`, `audit`, `soak`, `failover`) run in
//! `ratelab-probe`, a binary with no simulator linked in ([`elsewhere`]).

mod bench;
mod check;
mod elsewhere;
mod explore;
mod fuzz;
mod log;
mod run;
mod run_report;
mod sweep;

use clap::{Parser, Subcommand};
use ratelab_lab::commands::EXIT_BAD_INPUT;
use std::process::ExitCode;

/// mimalloc: a simulated request allocates its messages, futures and records many times over
/// (docs/PERFORMANCE.md, "Simulator speed", measured `ratelab bench` with it and with glibc's
/// allocator side by side).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
    Run(Box<run::RunArgs>),
    /// Request logs: scan by time range.
    Log {
        #[command(subcommand)]
        command: log::LogCommand,
    },
    /// Validate scenario files without running them.
    Check(check::CheckArgs),
    /// Print the JSON Schema of scenario files.
    Schema,
    /// Draw whole scenarios from seeds, run them against a system under test and judge each
    /// run with every checker: find the failures no scenario names (exit 1 if any).
    Explore(Box<explore::ExploreArgs>),
    /// Mutate the shipped scenarios and feed each input to validation and a short run: every
    /// input must get a verdict or a clear error, never a panic (exit 1 if one panics).
    Fuzz(fuzz::FuzzArgs),
    /// Soak a real ratelab-server: a long, bounded run over many keys, sampled for growth of
    /// its memory, latency tail and denials (runs `ratelab-probe soak`).
    #[command(disable_help_flag = true)]
    Soak(elsewhere::Args),
    /// Serve the gateway over HTTP, on the in-memory store or Redis: 200 when allowed, 429
    /// when denied (the code of `ratelab-server`, the binary to deploy, which has no
    /// simulator linked in).
    Serve(Box<ratelab_server::ServeArgs>),
    /// Check a real limiter from outside (an HTTP endpoint, a Redis script, the
    /// read-then-write client) against the policy it claims: exit 1 if a check fails, 2 on
    /// bad input or an unreachable limiter (runs `ratelab-probe probe`).
    #[command(disable_help_flag = true)]
    Probe(elsewhere::Args),
    /// Audit the rate limiters people deploy (the recipes under audits/): install each from
    /// its registry, start it on loopback, probe it and write docs/AUDITS.md and
    /// docs/results/audits/ (exit 1 if a target could not be run; runs `ratelab-probe audit`).
    #[command(disable_help_flag = true)]
    Audit(elsewhere::Args),
    /// The overshoot experiment: naive vs atomic across concurrency and store round trip,
    /// plus the algorithm comparison. Writes docs/results/ and the figures in the docs.
    Sweep(Box<sweep::SweepArgs>),
    /// Measure what a Redis Cluster failover costs a token bucket: on a private local cluster
    /// (three primaries, three replicas), kill the hot key's primary under load, once without
    /// and once with WAIT after each decision; failed calls, recovery and overshoot (runs
    /// `ratelab-probe failover`).
    #[command(disable_help_flag = true)]
    Failover(elsewhere::Args),
    /// Measure simulator speed: simulated requests and simulated seconds per wall second on
    /// the atomic path (build with --release for meaningful figures).
    Bench(bench::BenchArgs),
}

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
        Command::Run(args) => run::run_command(*args),
        Command::Log { command } => log::log_command(command),
        Command::Check(args) => check::check_command(args),
        Command::Schema => {
            print!("{}", ratelab_sim::scenario::json_schema());
            ExitCode::SUCCESS
        }
        Command::Explore(args) => explore::explore_command(*args),
        Command::Fuzz(args) => fuzz::fuzz_command(args),
        Command::Soak(args) => elsewhere::run("soak", args),
        Command::Serve(args) => ratelab_server::serve_command(*args),
        Command::Probe(args) => elsewhere::run("probe", args),
        Command::Audit(args) => elsewhere::run("audit", args),
        Command::Sweep(args) => sweep::sweep_command(*args),
        Command::Failover(args) => elsewhere::run("failover", args),
        Command::Bench(args) => bench::bench_command(args),
    }
}

/// Prints a command's text and exits 0, or prints its error and exits 2.
fn print_outcome(outcome: Result<String, String>) -> ExitCode {
    match outcome {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(EXIT_BAD_INPUT)
        }
    }
}
