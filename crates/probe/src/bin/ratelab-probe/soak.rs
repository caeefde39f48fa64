//! `ratelab soak`: a long, bounded run of a real `ratelab-server` over many keys, sampled
//! for growth ([`ratelab_probe::soak`]).

use ratelab_probe::soak::{SoakConfig, run};
use std::path::PathBuf;
use std::process::ExitCode;

/// The flags of `ratelab soak`.
#[derive(clap::Args, Debug)]
pub struct SoakArgs {
    /// Requests to send in all (1 to 10⁹).
    #[arg(long, default_value_t = 10_000_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000))]
    requests: u64,
    /// Distinct keys, each visited in turn (1 to 10⁸; the server's default key bound is
    /// 2²⁰).
    #[arg(long, default_value_t = 1_000_000, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    keys: u64,
    /// Keep-alive connections sending at once (1 to 4096).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
    concurrency: u64,
    /// One request in this many goes to one of 8 hot keys, which run over their limit (0:
    /// none).
    #[arg(long, default_value_t = 10)]
    hot_every: u64,
    /// How often a sample is taken, ms (100 to 3 600 000).
    #[arg(long, default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    interval_ms: u64,
    /// The per-key limit's capacity.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000_000))]
    capacity: u64,
    /// The per-key limit's refill per second.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=1_000_000_000_000))]
    refill_per_sec: u64,
    /// The server binary (default: `ratelab-server` beside this `ratelab`).
    #[arg(long)]
    server: Option<PathBuf>,
    /// An argument for the server, before its listen flags (repeatable; `--server-arg serve`
    /// soaks `ratelab serve`).
    #[arg(long = "server-arg", allow_hyphen_values = true)]
    server_args: Vec<String>,
    /// Also write the samples as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// Runs the soak, printing each sample as it comes and the table at the end: 0, or 2 on bad
/// input or a server that does not start.
pub fn soak_command(a: SoakArgs) -> ExitCode {
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(2)
    };
    let server = match a.server {
        Some(p) => p,
        None => match std::env::current_exe() {
            Ok(exe) => exe.with_file_name("ratelab-server"),
            Err(e) => return fail(format!("cannot find this executable: {e}")),
        },
    };
    if !server.is_file() {
        return fail(format!(
            "{}: no such server binary (build it: cargo build --release -p ratelab-server, or give --server)",
            server.display()
        ));
    }
    let mut command = vec![server.display().to_string()];
    let mut server_args = a.server_args;
    // `serve` names the subcommand of `ratelab`: it comes first.
    if server_args.first().is_some_and(|s| s == "serve") {
        command.push(server_args.remove(0));
    }
    let config = SoakConfig {
        server: command,
        server_args,
        requests: a.requests,
        keys: a.keys,
        concurrency: a.concurrency as usize,
        hot_every: a.hot_every,
        interval: std::time::Duration::from_millis(a.interval_ms),
        capacity: a.capacity,
        refill_per_sec: a.refill_per_sec,
    };
    let report = match run(&config, |s| {
        eprintln!(
            "{:>7.1} s: {} requests ({} denied, {} errors), p99 {} µs, RSS {:.1} MiB",
            s.at_s,
            s.requests,
            s.denied,
            s.errors,
            s.p99_us,
            s.rss_kib as f64 / 1024.0
        );
    }) {
        Ok(r) => r,
        Err(e) => return fail(e),
    };
    println!("{}", report.markdown());
    if let Some(path) = a.json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        if let Err(e) = std::fs::write(&path, text + "\n") {
            return fail(format!("{}: cannot write: {e}", path.display()));
        }
    }
    ExitCode::SUCCESS
}
