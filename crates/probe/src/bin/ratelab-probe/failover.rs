//! `ratelab failover`: what a Redis Cluster failover costs a token bucket, or, with
//! `--scale`, decisions per second on one server and on a cluster (the experiments are
//! `ratelab_probe::commands`').

use ratelab_probe::commands::{self, EXIT_BAD_INPUT};
use ratelab_probe::failover::FailoverConfig;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `ratelab failover`'s flags.
#[derive(clap::Args, Debug)]
pub struct FailoverArgs {
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
}

/// `ratelab failover`.
pub fn failover_command(args: FailoverArgs) -> ExitCode {
    let FailoverArgs {
        senders,
        seconds,
        capacity,
        refill_per_sec,
        wait_ms,
        json,
        scale,
        out,
        doc,
    } = args;
    if scale {
        return commands::scale(senders, seconds, &out, &doc);
    }
    if seconds < 6 {
        eprintln!(
            "error: invalid value '{seconds}' for '--seconds': a failover run needs 6 to 120 \
             (the kill is at 1 s, the restart 2 s after the promotion)"
        );
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    commands::failover(
        FailoverConfig {
            senders,
            seconds: seconds as f64,
            kill_at: 1.0,
            restart_after: Some(2.0),
            capacity,
            refill_per_sec,
            wait: None,
            timeout: Duration::from_millis(50 + 2 * wait_ms),
        },
        Duration::from_millis(wait_ms),
        json,
        (&out, &doc),
    )
}
