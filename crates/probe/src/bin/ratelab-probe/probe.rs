//! `ratelab probe`: check a real limiter from outside — its command line, progress bar and
//! report. The probe itself is `ratelab_probe::probe`.

use ratelab_check::linearizable::{DEFAULT_BUDGET, Initial};
use ratelab_check::probe::{Claim, Conclusion};
use ratelab_core::Nanos;
use ratelab_probe::commands::{EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNKNOWN};
use ratelab_probe::probe::bench::BenchShape;
use ratelab_probe::probe::{
    self, ProbeConfig, ProbeRun, Target, http::HttpSpec, http::HttpTarget, policy, redis, report,
};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

/// `ratelab probe`'s subcommands.
#[derive(clap::Subcommand, Debug)]
pub enum ProbeCommand {
    /// Probe an HTTP rate limiter: 2xx/3xx admitted, --deny-status denied.
    Http(Box<HttpArgs>),
    /// Probe a limiter in Redis: a Lua script (--script) or the read-then-write client
    /// (--pattern get-set).
    Redis(Box<RedisArgs>),
    /// Measure the black-box checker on seeded probe-shaped histories, beside the
    /// store-order replay of the same histories (build with --release).
    Bench {
        /// Operations per history (1 to 1 000 000).
        #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
        ops: u64,
        /// Keys (1 to 100 000).
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=100_000))]
        keys: u64,
        /// Closed-loop clients (1 to 4096).
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=4096))]
        concurrency: u64,
        /// The most a client waits between an answer and its next send, ms (0 to 1000; 0:
        /// back to back, every client always in flight).
        #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u64).range(0..=1000))]
        think_ms: u64,
        /// Seeds, one history each (1 to 1000).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
        seeds: u64,
        /// The search budget per key (1 to 10^8).
        #[arg(long, default_value_t = DEFAULT_BUDGET, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
        budget: u64,
    },
}

/// Flags every probe takes.
#[derive(clap::Args, Debug)]
pub struct Common {
    /// The policy the limiter claims: token-bucket:B,R, fixed-window:L,W (aligned, phase
    /// unseen), first-hit:L,W, sliding-log:L,W, sliding-counter:L,W[,exact|up|down] or
    /// leaky-bucket:RATE,BURST (nginx limit_req with nodelay). For HTTP, default: the
    /// limiter's own RateLimit-Policy field.
    #[arg(long)]
    policy: Option<String>,
    /// The concurrency ladder: clients per step (each 1 to 1024).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1u32, 2, 4, 8, 16, 32, 64],
          value_parser = clap::value_parser!(u32).range(1..=1024))]
    concurrency: Vec<u32>,
    /// Requests per step (1 to 1 000 000).
    #[arg(long, default_value_t = 400, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    requests: u64,
    /// Keys per step, each a fresh bucket (1 to 100 000).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    keys: u32,
    /// A bound on the ladder's wall time (ms, s, m or h; bare: seconds).
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    max_time: Duration,
    /// Phases after the ladder, each on keys of its own: idle (past the claim's time to
    /// forget a key, then a burst on the ladder's first keys), steady (a client per key at
    /// 80 % of the claimed rate, never to be denied), boundary (four times the rate across
    /// two windows); a comma-separated list, or none.
    #[arg(long, default_value = "none", value_parser = parse_phases)]
    phases: probe::Phases,
    /// The limiter's windows start where the Unix time is a multiple of the window (as
    /// `floor(now / window)` counts them): the checks then know their phase, and hold a
    /// fixed window or a sliding counter to it rather than to any phase.
    #[arg(long)]
    epoch_windows: bool,
    /// Retry-After honesty probes after the ladder (0 to 64).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(0..=64))]
    retry_probes: u32,
    /// The longest announced wait an honesty probe sits out.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    max_wait: Duration,
    /// How far the limiter's clock may lag the moment it decides (its resolution).
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    clock_resolution: Duration,
    /// The linearizability search's budget per key (states, 1 to 10^8; the search's memory
    /// grows with it): past it the key is reported unknown.
    #[arg(long, default_value_t = DEFAULT_BUDGET, value_parser = clap::value_parser!(u64).range(1..=100_000_000))]
    budget: u64,
    /// Per-request timeout.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    timeout: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Write a self-contained HTML timeline of one key's requests.
    #[arg(long, value_name = "FILE")]
    timeline: Option<PathBuf>,
    /// The key the timeline shows (default: the envelope's witness, else the first key no
    /// order explains, else the busiest).
    #[arg(long, value_name = "KEY", requires = "timeline")]
    timeline_key: Option<String>,
}

/// `ratelab probe http`.
#[derive(clap::Args, Debug)]
pub struct HttpArgs {
    /// The URL; `{key}` in it is replaced by the key. Several URLs are several instances of
    /// one limiter (sharing its store): each request goes to one, as --spread says.
    #[arg(required = true, num_args = 1..)]
    url: Vec<String>,
    /// How requests are spread over several URLs: round-robin, or random:SEED.
    #[arg(long, default_value = "round-robin", value_parser = probe::Spread::parse)]
    spread: probe::Spread,
    /// The header that carries the key (e.g. x-api-key).
    #[arg(long)]
    key_header: Option<String>,
    /// The method.
    #[arg(long, default_value = "GET")]
    method: String,
    /// An extra header, `Name: value` (repeatable).
    #[arg(long = "header")]
    headers: Vec<String>,
    /// Statuses that mean denied.
    #[arg(long, value_delimiter = ',', default_values_t = vec![429u16],
          value_parser = clap::value_parser!(u16).range(100..=599))]
    deny_status: Vec<u16>,
    /// The RateLimit / RateLimit-Policy item to read when the limiter sends several.
    #[arg(long)]
    policy_name: Option<String>,
    /// What X-RateLimit-Reset counts: auto (told apart by size), delta (seconds from now),
    /// epoch-s or epoch-ms.
    #[arg(long, default_value = "auto", value_parser = probe::fields::ResetReading::parse)]
    reset_unit: probe::fields::ResetReading,
    #[command(flatten)]
    common: Common,
}

/// `ratelab probe redis`.
#[derive(clap::Args, Debug)]
pub struct RedisArgs {
    /// The Redis URL (redis://127.0.0.1:6379/).
    url: String,
    /// The Lua script to probe.
    #[arg(long, conflicts_with = "pattern", required_unless_present = "pattern")]
    script: Option<PathBuf>,
    /// A client pattern instead of a script: get-set (GET, decide in the client, SET).
    #[arg(long, value_parser = ["get-set"])]
    pattern: Option<String>,
    /// The script's KEYS, comma separated templates ({key}, {cost}, …).
    #[arg(long, default_value = "{key}", requires = "script")]
    keys_template: String,
    /// The script's ARGV, comma separated templates.
    #[arg(long, default_value = "", requires = "script")]
    args_template: String,
    /// Where the reply's fields are: allowed=I[,remaining=I][,retry_after_ns|us|ms|s=I].
    #[arg(long, default_value = "allowed=0", requires = "script")]
    reply: String,
    /// Connections to spread the calls over (1 to 256; default: the ladder's top).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=256))]
    connections: Option<u32>,
    #[command(flatten)]
    common: Common,
}

/// The steady phase's length.
const STEADY: Duration = Duration::from_secs(3);

fn parse_phases(s: &str) -> Result<probe::Phases, String> {
    probe::Phases::parse(s, STEADY)
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    policy::duration(s).map(|n| Duration::from_nanos(n.as_u64()))
}

fn bad(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {msg}");
    ExitCode::from(EXIT_BAD_INPUT)
}

fn config(c: &Common, partitioned: bool) -> ProbeConfig {
    ProbeConfig {
        ladder: c.concurrency.clone(),
        requests_per_step: c.requests,
        keys: c.keys,
        partitioned,
        key_prefix: probe::fresh_prefix(),
        max_time: c.max_time,
        retry_probes: c.retry_probes,
        max_wait: c.max_wait,
        clock_resolution: Nanos(u64::try_from(c.clock_resolution.as_nanos()).unwrap_or(u64::MAX)),
        // A limiter keyed on something the probe cannot vary may have been used before.
        initial: if partitioned {
            Initial::Full
        } else {
            Initial::Unknown
        },
        budget: c.budget,
        exact: true,
        phases: c.phases,
        epoch_windows: c.epoch_windows,
    }
}

/// Runs `ratelab probe`.
pub fn probe_command(cmd: ProbeCommand) -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime starts");
    match cmd {
        ProbeCommand::Http(a) => rt.block_on(http(*a)),
        ProbeCommand::Redis(a) => rt.block_on(redis_probe(*a)),
        ProbeCommand::Bench {
            ops,
            keys,
            concurrency,
            think_ms,
            seeds,
            budget,
        } => ratelab_probe::commands::probe_bench(
            BenchShape {
                ops,
                keys,
                concurrency,
                think: Nanos::from_millis(think_ms),
                lost_updates: false,
                budget,
            },
            seeds,
        ),
    }
}

async fn http(a: HttpArgs) -> ExitCode {
    let partitioned = a.key_header.is_some() || a.url.iter().any(|u| u.contains("{key}"));
    if !partitioned && a.common.keys > 1 {
        return bad("--keys needs a place for the key: --key-header NAME or {key} in the URL");
    }
    let spec = HttpSpec {
        urls: a.url.clone(),
        spread: a.spread,
        method: a.method.clone(),
        key_header: a.key_header.clone(),
        headers: a.headers.clone(),
        deny_statuses: a.deny_status.clone(),
        policy_name: a.policy_name.clone(),
        reset: a.reset_unit,
        timeout: a.common.timeout,
    };
    let top = a.common.concurrency.iter().copied().max().unwrap_or(1) as usize;
    let target = match HttpTarget::new(&spec, top) {
        Ok(t) => t,
        Err(e) => return bad(e),
    };
    let mut cfg = config(&a.common, partitioned);
    let given = match a.common.policy.as_deref().map(policy::parse).transpose() {
        Ok(c) => c,
        Err(e) => return bad(format!("--policy: {e}")),
    };
    let announced = match target
        .preflight(&format!("{}-preflight", cfg.key_prefix))
        .await
    {
        Ok(p) => p,
        Err(e) => return bad(format!("the limiter does not answer: {e}")),
    };
    let claim = match (given, announced) {
        (Some(c), _) => c,
        (None, Err(e)) => return bad(e),
        (None, Ok(Some((q, w)))) => match policy::announced(q, w) {
            Ok(c) => {
                cfg.exact = false;
                eprintln!(
                    "held to RateLimit-Policy q={q};w={w} as a bound, {}: give --policy for the \
                     linearizability check",
                    policy::describe(&c)
                );
                c
            }
            Err(e) => return bad(e),
        },
        (None, Ok(None)) => {
            return bad("the limiter announces no RateLimit-Policy: give --policy");
        }
    };
    let name = a.url.join(" ");
    finish(target, claim, &cfg, &a.common, &name).await
}

async fn redis_probe(a: RedisArgs) -> ExitCode {
    let Some(p) = &a.common.policy else {
        return bad("--policy is required: a script announces no policy");
    };
    let claim = match policy::parse(p) {
        Ok(c) => c,
        Err(e) => return bad(format!("--policy: {e}")),
    };
    // A bucket per probe key only if the key reaches the script.
    let keyed = |t: &str| t.contains("{key}");
    let partitioned = a.script.is_none() || keyed(&a.keys_template) || keyed(&a.args_template);
    if !partitioned && a.common.keys > 1 {
        return bad("--keys needs {key} in --keys-template or --args-template");
    }
    let cfg = config(&a.common, partitioned);
    let connections = a.connections.map_or_else(
        || {
            a.common
                .concurrency
                .iter()
                .copied()
                .max()
                .unwrap_or(1)
                .min(256) as usize
        },
        |c| c as usize,
    );
    match &a.script {
        Some(path) => {
            let source = match std::fs::read_to_string(path) {
                Ok(s) => s,
                Err(e) => return bad(format!("{}: {e}", path.display())),
            };
            let reply = match redis::ReplyMap::parse(&a.reply) {
                Ok(r) => r,
                Err(e) => return bad(e),
            };
            let split = |t: &str| -> Vec<String> {
                if t.is_empty() {
                    Vec::new()
                } else {
                    t.split(',').map(str::to_owned).collect()
                }
            };
            let spec = redis::ScriptSpec {
                url: a.url.clone(),
                source,
                keys: split(&a.keys_template),
                args: split(&a.args_template),
                reply,
                connections,
                timeout: a.common.timeout,
            };
            match redis::ScriptTarget::connect(spec, claim).await {
                Ok(t) => {
                    let name = format!("{} --script {}", a.url, path.display());
                    finish(t, claim, &cfg, &a.common, &name).await
                }
                Err(e) => bad(e),
            }
        }
        None => match redis::GetSetTarget::connect(&a.url, claim, a.common.timeout).await {
            Ok(t) => {
                let name = format!("{} --pattern get-set", a.url);
                finish(t, claim, &cfg, &a.common, &name).await
            }
            Err(e) => bad(e),
        },
    }
}

/// Runs the probe with a progress bar, prints the report, writes the timeline.
async fn finish<T: Target>(
    target: T,
    claim: Claim,
    cfg: &ProbeConfig,
    common: &Common,
    name: &str,
) -> ExitCode {
    let total = cfg.requests_per_step * cfg.ladder.len() as u64;
    let bar = indicatif::ProgressBar::new(total);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} requests {elapsed}")
            .expect("a valid template"),
    );
    let shown = bar.clone();
    let run: ProbeRun =
        probe::probe(target, claim, cfg, move |done, _| shown.set_position(done)).await;
    bar.finish_and_clear();
    if common.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report::json(&run, name)).expect("JSON prints")
        );
    } else {
        print!("{}", report::text(&run, name));
    }
    if let Some(path) = &common.timeline {
        let key = common
            .timeline_key
            .clone()
            .or_else(|| report::default_key(&run));
        if let Some(key) = key {
            if let Err(e) = std::fs::write(path, report::timeline_html(&run, name, &key)) {
                return bad(format!("timeline {}: {e}", path.display()));
            }
            eprintln!("timeline of key {key:?} written to {}", path.display());
        }
    }
    match run.verdict.conclusion() {
        Conclusion::Passed => ExitCode::SUCCESS,
        Conclusion::Unknown => ExitCode::from(EXIT_UNKNOWN),
        Conclusion::Failed => ExitCode::from(EXIT_FAILED),
    }
}
