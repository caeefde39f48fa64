//! `ratelab bench`: simulator speed, or the atomic path on a real Redis beside
//! `redis-benchmark` (the simulator's are `ratelab_lab::commands`', Redis's run in
//! `ratelab-probe bench`).

use ratelab_lab::commands;
use std::process::ExitCode;

/// `ratelab bench`'s flags.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
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
}

/// `ratelab bench`.
pub fn bench_command(args: BenchArgs) -> ExitCode {
    let BenchArgs {
        gateways,
        seconds,
        rate,
        runs,
        redis,
        clients,
        print_scenario,
    } = args;
    match redis {
        // A real Redis is measured by `ratelab-probe`, which has no simulator linked in.
        Some(url) => crate::elsewhere::run(
            "bench",
            crate::elsewhere::Args::from(
                [
                    "--redis".to_owned(),
                    url,
                    "--clients".to_owned(),
                    clients.to_string(),
                    "--seconds".to_owned(),
                    seconds.to_string(),
                ]
                .map(Into::into)
                .to_vec(),
            ),
        ),
        None if print_scenario => {
            let text = commands::bench_scenario(gateways, seconds, rate)
                .and_then(|sc| serde_json::to_string_pretty(sc.spec()).map_err(|e| e.to_string()));
            crate::print_outcome(text.map(|t| t + "\n"))
        }
        None => crate::print_outcome(
            commands::bench(gateways, seconds, rate, runs).map(|d| d.to_string()),
        ),
    }
}
