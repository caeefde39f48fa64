//! `ratelab-probe`: the real-world commands, in a binary with no simulator linked in (the
//! clock, randomness and threads it measures with are the machine's own). `ratelab probe`,
//! `ratelab audit`, `ratelab soak`, `ratelab failover` and `ratelab bench --redis` hand their
//! arguments to it, so either name works.
//!
//! Exit codes: 0 every check held, 1 a check failed, 2 bad input, 3 a check could not
//! conclude.

mod audit;
mod bench;
mod failover;
mod probe;
mod soak;

use clap::{Parser, Subcommand};
use ratelab_probe::commands::EXIT_BAD_INPUT;
use std::process::ExitCode;

#[derive(Parser, Debug)]
#[command(
    name = "ratelab-probe",
    version,
    about = "Real rate limiters measured from outside and judged"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Check a real limiter from outside (an HTTP endpoint, a Redis script, the
    /// read-then-write client) against the policy it claims: exit 1 if a check fails, 2 on
    /// bad input or an unreachable limiter.
    Probe {
        #[command(subcommand)]
        command: probe::ProbeCommand,
    },
    /// Audit the rate limiters people deploy (the recipes under audits/): install each from
    /// its registry, start it on loopback, probe it and write docs/AUDITS.md and
    /// docs/results/audits/ (exit 1 if a target could not be run).
    Audit(Box<audit::AuditArgs>),
    /// Soak a real ratelab-server: a long, bounded run over many keys, sampled for growth of
    /// its memory, latency tail and denials.
    Soak(Box<soak::SoakArgs>),
    /// Measure what a Redis Cluster failover costs a token bucket: on a private local cluster
    /// (three primaries, three replicas), kill the hot key's primary under load, once without
    /// and once with WAIT after each decision; failed calls, recovery and overshoot.
    Failover(failover::FailoverArgs),
    /// Benchmark the atomic path on a real Redis beside redis-benchmark running the same
    /// script (`ratelab bench --redis`).
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
        Command::Probe { command } => probe::probe_command(command),
        Command::Audit(args) => audit::audit_command(*args),
        Command::Soak(args) => soak::soak_command(*args),
        Command::Failover(args) => failover::failover_command(args),
        Command::Bench(args) => bench::bench_command(args),
    }
}
