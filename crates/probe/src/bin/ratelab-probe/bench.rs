//! `ratelab-probe bench`: the atomic path on a real Redis beside `redis-benchmark` running the
//! same script (`ratelab bench --redis` hands its flags here).

use ratelab_probe::commands;
use std::process::ExitCode;

/// `ratelab-probe bench`'s flags.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The Redis to benchmark: a URL (`redis+cluster://HOST:PORT,…` for a Redis Cluster,
    /// where redis-benchmark runs with `--cluster`), `auto` for a private redis-server, or
    /// `auto-cluster` for a private local cluster.
    #[arg(long)]
    redis: String,
    /// Concurrent clients (1 to 1024).
    #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u64).range(1..=1024))]
    clients: u64,
    /// Wall seconds per measurement (1 to 60).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60))]
    seconds: u64,
}

/// `ratelab-probe bench`.
pub fn bench_command(args: BenchArgs) -> ExitCode {
    commands::redis_bench(&args.redis, args.clients, args.seconds)
}
