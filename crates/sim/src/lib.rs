//! # ratelab-sim
//!
//! A deterministic cluster simulation of distributed rate limiting, on madsim.
//!
//! A scenario (a JSON file; see `docs/SCENARIOS.md`) describes a cluster — one store node,
//! N gateways, load-generating clients — a limiter policy, the store access path (naive or
//! atomic), the network, and faults. [`run`] simulates one seed of it and returns a
//! [`Report`]: the run's accounting, the figures each checker measured (envelope excess,
//! window spike, answers…, by name) and their evidence (the worst window, the liveness phase,
//! the cleanup job), and a **trace hash** over every event. The same scenario and seed always give
//! the same hash; [`run`] is all a replay needs.
//!
//! Every failure names its seed and the commands that replay it ([`replay_commands`]).
//!
//! Where things are: the scenario format and its checks (`scenario`, `validate`, and the
//! bounded values files are made of in [`values`]); the faults ([`faults`]: **a new fault
//! kind is one file in `src/faults/` and one line in its `faults!` list**, which makes its
//! `kind` in scenario files, its schema, its checks, its injection and the explorer's draw of
//! it); the cluster, split by role (`cluster/`: the wire messages, the store node, the
//! gateways' store client, the cleanup job, the skewed clocks, the recorder, the workload,
//! the fault driver); the store's replica, its lag and what a failover promotes (`replica`); time
//! ([`dilation`]: physical time on madsim's clock); the messages between gateways and the
//! store (`transport`) and each gateway's timeouts (`timeouts`); the checkers ([`checkers`]:
//! **a new checker is one file in `src/checkers/` and one line in its `CHECKERS`**, which
//! makes its figures bounds a scenario's `expect` takes and its failures part of every
//! verdict); the report (`report`: the accounting, the checkers' figures and evidence, the
//! bounds; and `eligible`: which keys the liveness phase holds to); running seeds on every core ([`parallel`]); the planted bugs the
//! explorer must find ([`planted`]: a new one is a variant of [`planted::PlantedBug`] with
//! what it needs of its scenario, its code where it lives — the store's script in
//! `planted.rs`, a client's behaviour in `cluster/client.rs`, the store node's in
//! `cluster/store_node.rs` — and its names in `PlantedBug::ALL`, `name` and `command_name`;
//! the explorer then runs it as a system under test of its own); and the
//! cost floors `ratelab bench` measures beside the cluster ([`floor`]).
//!
//! **A user's limiter** ([`limiter`], `docs/BRING-YOUR-OWN.md`): [`run_with`] runs a scenario
//! with any [`ratelab_core::Algorithm`] in place of the scenario's policy and judges it with
//! every checker ([`verdict`]) against what it claims ([`Claim`]); [`harness`] runs it under
//! loom and shuttle; [`Scenario::builder`] makes scenarios in Rust. The cluster is generic
//! over the algorithm its store node runs, not reached through an object-safe seam: the
//! store node, its messages ([`StoreCall`], [`StoreReply`]) and the gateways' store client
//! carry the algorithm's own state type, which madsim's `Box<dyn Any>` messages move without
//! serializing. The builtin policies are one instance of that code (with the planted script
//! bugs), so a builtin token bucket plugged in as a user's limiter gives the builtin run's
//! trace hash (`tests/suite/limiter.rs`), and no dynamic dispatch enters the builtin path.
//! The builtin policies' store can decide by the Redis script instead of the core
//! (`store.engine: "redis_scripts"`, [`planted::StorePolicy`] calling
//! `ratelab_store::lua_script`): the same run, event for event, when the script is right
//! (`tests/suite/store_engine.rs`).
//!
//! This crate needs `--cfg madsim`, which the workspace's `.cargo/config.toml` sets.
#![warn(missing_docs)]

#[cfg(not(madsim))]
compile_error!(
    "ratelab-sim needs `--cfg madsim`: build from the workspace root, whose .cargo/config.toml \
     sets it, and do not override it with a RUSTFLAGS variable that lacks `--cfg madsim`"
);

mod builder;
pub mod checkers;
mod cluster;
pub mod dilation;
mod eligible;
pub mod expect;
pub mod faults;
pub mod floor;
pub use ratelab_harness as harness;
pub mod limiter;
pub mod locate;
mod lock;
pub mod parallel;
pub mod planted;
mod read;
mod replica;
pub mod report;
pub mod rng;
pub mod scenario;
mod spec;
mod tagged;
mod tasks;
mod timeouts;
mod transport;
mod validate;
pub mod values;
pub mod verdict;

pub use builder::{Client, Fault, ScenarioBuilder};
pub use cluster::{
    JobCall, SIM_EPOCH_MS, StoreCall, StoreMessage, StoreReply, StoreRequest, WireError,
    faults_end_ms,
};
pub use limiter::{Claim, Limiter};
pub use ratelab_check::History;
pub use ratelab_check::history;
pub use report::Report;
pub use scenario::{Scenario, ScenarioError, ScenarioSpec, StoreEngine};

use ratelab_core::Nanos;
use std::sync::Arc;
use std::time::Instant as WallInstant;

/// What to keep from a run.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunOptions {
    /// Keep every event, for `--trace`.
    pub keep_events: bool,
    /// Keep each gateway's request log (JSON lines) in [`History::request_logs`].
    pub request_logs: bool,
}

/// Simulates one seed of `scenario`.
pub fn run(scenario: &Scenario, seed: u64, options: RunOptions) -> (Report, History) {
    execute(scenario, seed, options, cluster::Plug::builtin(scenario))
}

/// Simulates one seed of `scenario` with a user's `limiter` in place of the scenario's
/// policy, and judges the run by every checker ([`verdict::judge`]) against the limiter's
/// [`Claim`]: the report's `checkers` lists what they found, and its `failures` (and
/// `passed`) hold both the scenario's `expect` bounds and the checkers' verdict, as a
/// scenario with `expect.explorer` does (`"pass"` unless the scenario names the failure it
/// expects, for a canary).
///
/// The report is built as if the scenario's `policy` were the claim's
/// ([`Claim::policy`]): its envelope figures, window length and liveness phase are the
/// claim's. The same scenario, seed and limiter give the same trace hash on every run.
///
/// An error if the scenario plants a bug that lives in a builtin algorithm's code
/// (`short_ttl`, `refill_rounding`, `incr_then_expire`: a user's limiter has no place for
/// them) or the claim is not a valid policy.
pub fn run_with<A: ratelab_core::Algorithm + Clone + Send + Sync + 'static>(
    scenario: &Scenario,
    seed: u64,
    options: RunOptions,
    limiter: &Limiter<A>,
) -> Result<(Report, History), ScenarioError> {
    use limiter::Plugged;
    let fail = |path: &str, message: String| ScenarioError {
        file: scenario.file.clone(),
        path: path.to_owned(),
        line: 0,
        column: 0,
        message,
    };
    if let Some(bug) = scenario
        .spec
        .planted_bug
        .filter(|b| !b.outside_the_algorithm())
    {
        let apply: Vec<&str> = scenario::PlantedBug::ALL
            .iter()
            .filter(|b| b.outside_the_algorithm())
            .map(|b| b.name())
            .collect();
        return Err(fail(
            "planted_bug",
            format!(
                "{bug:?} lives in a builtin algorithm's code: with a user's limiter only {} \
                 apply",
                apply.join(", ")
            ),
        ));
    }
    if scenario.spec.store.engine != StoreEngine::Core {
        return Err(fail(
            "store.engine",
            "the Redis scripts decide the builtin policies: a user's limiter decides with its \
             own code, on the core engine"
                .into(),
        ));
    }
    let mut claimed = scenario.clone();
    claimed.policy = limiter
        .claim()
        .policy()
        .map_err(|e| fail("policy", format!("the limiter's claim: {e}")))?;
    let plug = cluster::Plug {
        script: Plugged::User(limiter.algorithm().clone()),
        gateway: Plugged::User(limiter.algorithm().clone()),
        edge: cluster::edge_bucket(scenario).map(Plugged::Edge),
    };
    let (mut report, history) = execute(&claimed, seed, options, plug);
    let exact = matches!(limiter.claim(), Claim::TokenBucket(_));
    let mut found = verdict::judge_claimed(&claimed, &history, exact).failures;
    if let Claim::AnyWindow(q) = limiter.claim() {
        found.extend(verdict::any_window(&claimed, &history, q.limit, q.window));
    }
    let want = scenario.spec.expect.explorer.as_deref().unwrap_or("pass");
    report.failures.extend(verdict::held_to(want, &found));
    report.passed = report.failures.is_empty();
    report.checkers = Some(found);
    Ok((report, history))
}

/// [`run_with`] over every seed of `scenario`, in order, or over the one seed in the
/// `RATELAB_SEED` environment variable when it is set: how a failing seed is replayed.
pub fn run_seeds_with<A: ratelab_core::Algorithm + Clone + Send + Sync + 'static>(
    scenario: &Scenario,
    limiter: &Limiter<A>,
) -> Result<Vec<Report>, ScenarioError> {
    let seeds = match std::env::var("RATELAB_SEED") {
        Ok(s) => vec![s.trim().parse::<u64>().map_err(|e| ScenarioError {
            file: scenario.file.clone(),
            path: "seeds".into(),
            line: 0,
            column: 0,
            message: format!("RATELAB_SEED={s:?} is not a seed: {e}"),
        })?],
        Err(_) => scenario.spec.seeds.get().to_vec(),
    };
    seeds
        .into_iter()
        .map(|seed| run_with(scenario, seed, RunOptions::default(), limiter).map(|(r, _)| r))
        .collect()
}

/// Simulates one seed of `scenario` with `plug`'s algorithms and builds its report.
fn execute<S: cluster::Script>(
    scenario: &Scenario,
    seed: u64,
    options: RunOptions,
    plug: cluster::Plug<S>,
) -> (Report, History) {
    let wall = WallInstant::now();
    let sc = Arc::new(scenario.clone());
    let paired = plug.clone();
    // The runtime is built inside the closure, so the spans madsim makes for its nodes belong
    // to whichever subscriber is in force for the run.
    let simulate = || {
        let rt =
            madsim::runtime::Runtime::with_seed_and_config(seed, cluster::net_config(scenario));
        rt.block_on(cluster::simulate_with(sc, plug, seed, options.keep_events))
    };
    let (history, stats) = if options.request_logs {
        use tracing_subscriber::layer::SubscriberExt as _;
        let sink = Arc::new(ratelab_gateway::reqlog::MemorySink::default());
        let subscriber = tracing_subscriber::registry()
            .with(ratelab_gateway::reqlog::RequestLogLayer::new(sink.clone()));
        let (mut history, stats) = tracing::subscriber::with_default(subscriber, simulate);
        history.request_logs = sink.take();
        (history, stats)
    } else {
        simulate()
    };
    let sim = history
        .events
        .last()
        .map(|e| e.at)
        .unwrap_or(Nanos::ZERO)
        .max(Nanos::from_millis(scenario.spec.duration_ms.get()));
    let mut report = report::build(scenario, seed, &history, &stats, sim, wall.elapsed());
    let gw = &scenario.spec.gateway;
    let measured = if gw.guard.is_some() || gw.denial_cache.is_some() {
        savings(scenario, seed, &history, paired)
    } else {
        Err("nothing to save: the scenario has no guard and no denial cache".into())
    };
    // Absent, not 0, when the two runs cannot be paired: the figure is not measured then.
    if let Ok(&saved) = measured.as_ref() {
        report
            .figures
            .insert(checkers::STORE_CALLS_SAVED.to_owned(), saved);
    }
    let bounds = scenario.spec.expect.bound(checkers::STORE_CALLS_SAVED);
    if bounds != scenario::Bounds::default() {
        let failures = match measured {
            Ok(saved) => bounds.broken_by(checkers::STORE_CALLS_SAVED, saved, None),
            Err(e) => {
                let want: Vec<String> = [
                    bounds.at_least.map(|v| format!("at least {v}")),
                    bounds.at_most.map(|v| format!("at most {v}")),
                ]
                .into_iter()
                .flatten()
                .collect();
                vec![format!(
                    "store_calls_saved not measured ({e}), expected {}",
                    want.join(" and ")
                )]
            }
        };
        if !failures.is_empty() {
            report.failures.extend(failures);
            report.passed = false;
        }
    }
    (report, history)
}

/// Each client's requests, in the order it sent them.
fn per_client(h: &History) -> std::collections::BTreeMap<u32, Vec<&history::RequestRecord>> {
    let mut by: std::collections::BTreeMap<u32, Vec<&history::RequestRecord>> =
        std::collections::BTreeMap::new();
    for r in &h.requests {
        by.entry(r.client).or_default().push(r);
    }
    by
}

/// What the guard and the denial cache saved, measured: the same seed run again without
/// either, and, for each request the guard rejected or a cache answered, the store calls the
/// *same* request (the same client's n-th) made there — on whichever path the scenario takes, so a naive denial that writes nothing
/// counts one call, not two. Requests pair by client and order, and must carry the same keys
/// (a client draws them from its own stream); an error if they do not (a client that waits
/// for answers sends differently once it is not rejected).
fn savings<S: cluster::Script>(
    scenario: &Scenario,
    seed: u64,
    guarded: &History,
    plug: cluster::Plug<S>,
) -> Result<u64, String> {
    use ratelab_check::history::Answer;
    let mut spec = scenario.spec.clone();
    spec.gateway.guard = None;
    spec.gateway.denial_cache = None;
    let unguarded = Scenario::from_spec(&scenario.file, spec).map_err(|e| e.to_string())?;
    let rt = madsim::runtime::Runtime::with_seed_and_config(seed, cluster::net_config(&unguarded));
    let (h, _) = rt.block_on(cluster::simulate_with(
        Arc::new(unguarded),
        plug,
        seed,
        false,
    ));
    let (with, without) = (per_client(guarded), per_client(&h));
    let mut saved = 0u64;
    for (client, sent) in &with {
        let other = without.get(client).map_or(&[][..], Vec::as_slice);
        if other.len() != sent.len() || sent.iter().zip(other).any(|(a, b)| a.key != b.key) {
            return Err(format!(
                "client {client} sent other requests without the guard ({} vs {}): no pairing",
                sent.len(),
                other.len()
            ));
        }
        saved += sent
            .iter()
            .zip(other)
            .filter(|(a, _)| {
                matches!(
                    a.answer,
                    Some((_, Answer::Rejected | Answer::Cached { .. }))
                )
            })
            .map(|(_, b)| u64::from(b.store_calls_total()))
            .sum::<u64>();
    }
    Ok(saved)
}

/// Simulates each of `seeds` of `scenario` on `threads` worker threads, handing each run to
/// `each` in `seeds`' order as it completes: the same sequence on any number of threads.
pub fn run_seeds(
    scenario: &Scenario,
    seeds: &[u64],
    threads: usize,
    options: RunOptions,
    each: impl FnMut((Report, History)),
) {
    parallel::for_each_in_order(seeds, threads, |&s| run(scenario, s, options), each);
}

/// Runs `scenario`'s seed under madsim's own determinism check: the run is executed twice and
/// every random draw compared. Panics (with madsim's replay hint) if they differ.
pub fn madsim_determinism_check(scenario: &Scenario, seed: u64) -> String {
    // check_determinism runs `f` on fresh threads: hand the scenario over through a global.
    *GLOBAL.lock().expect("determinism slot") = Some(scenario.clone());
    madsim::runtime::Runtime::check_determinism(seed, cluster::net_config(scenario), || async {
        let sc = GLOBAL
            .lock()
            .expect("determinism slot")
            .clone()
            .expect("scenario set");
        let seed = madsim::runtime::Handle::current().seed();
        let (h, _) = cluster::simulate(Arc::new(sc), seed, false).await;
        format!("{:016x}", h.trace_hash())
    })
}

static GLOBAL: std::sync::Mutex<Option<Scenario>> = std::sync::Mutex::new(None);

/// The two commands that replay `seed` of the scenario in `file` named `name`.
pub fn replay_commands(name: &str, file: &str, seed: u64) -> [String; 2] {
    [
        format!("RATELAB_SEED={seed} cargo test --test scenarios -- {name}"),
        format!("cargo run -p ratelab -- run {file} --seed {seed} --trace"),
    ]
}
