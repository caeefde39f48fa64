//! shuttle: a [`Race`] as a shuttle test, for any of its schedulers (`check_dfs`,
//! `check_random`, `check_pct`, `replay`).
//!
//! [`race`] makes the closure a scheduler runs: each execution builds the store on
//! [`ShuttleBackend`], runs the race, and panics if the gateways admitted more (a lost
//! update) or fewer than the algorithm alone admits. shuttle reports the panic with the
//! failing schedule, which `shuttle::replay` accepts; [`expect_violation`] turns the panic
//! a canary needs into its message.

use super::Race;
use ratelab_core::Algorithm;
use ratelab_store::backend::{BackendMutex, SyncBackend};
use ratelab_store::{MemoryStore, Store};
use shuttle::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

backend!(
    "shuttle",
    ShuttleBackend,
    ShuttleMutex,
    shuttle::sync::Mutex
);

/// Executions run, counted outside shuttle so a caller can report them.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Executions so far.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Counts one more execution (for a model of the caller's own).
    pub fn bump(&self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

/// The shuttle test of `race`, counting its executions in `executions`. Panics (which
/// shuttle reports with the failing schedule) when the gateways admit other than what the
/// algorithm alone admits.
pub fn race<A>(
    race: Race<A>,
    executions: std::sync::Arc<Counter>,
) -> impl Fn() + Send + Sync + 'static
where
    A: Algorithm + Clone + Send + Sync + 'static,
{
    race_store(race, executions, |a: &A| {
        MemoryStore::<A, ShuttleBackend>::with_backend(a.clone(), 1, 16)
    })
}

/// [`race`] over a store `make` builds for each execution: a user's [`Store`], built on
/// shuttle's primitives (say, generic over a [`SyncBackend`] and given [`ShuttleBackend`]).
pub fn race_store<A, S>(
    race: Race<A>,
    executions: std::sync::Arc<Counter>,
    make: impl Fn(&A) -> S + Send + Sync + 'static,
) -> impl Fn() + Send + Sync + 'static
where
    A: Algorithm + Clone + Send + Sync + 'static,
    S: Store<Algorithm = A> + Send + Sync + 'static,
{
    let (before, expected) = race.expected();
    move || {
        executions.0.fetch_add(1, Ordering::Relaxed);
        let admitted = race
            .execute(
                Arc::new(make(&race.algorithm)),
                &before,
                |store, race| shuttle::thread::spawn(move || race.take(&*store)),
                |h| h.join().expect("gateway thread"),
            )
            .iter()
            .filter(|d| d.allowed)
            .count();
        let gateways = race.gateways;
        assert!(
            admitted <= expected,
            "lost update: {admitted} of {gateways} gateways admitted where the algorithm alone \
             admits {expected}"
        );
        assert_eq!(
            admitted, expected,
            "{admitted} of {gateways} gateways admitted where the algorithm alone admits {expected}"
        );
    }
}

/// Runs `check` (which must panic through shuttle) and returns the panic message.
pub fn expect_violation(check: impl FnOnce()) -> String {
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check))
        .expect_err("shuttle must find a violation");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// Runs `race` under shuttle's PCT scheduler (bug depth `depth`, `iterations` executions,
/// from `seed`, so a run repeats); returns the executions run. Panics with the failing
/// schedule on a violation.
pub fn check_pct<A>(race: Race<A>, seed: u64, iterations: usize, depth: usize) -> u64
where
    A: Algorithm + Clone + Send + Sync + 'static,
{
    let runs = std::sync::Arc::new(Counter::default());
    let scheduler = shuttle::scheduler::PctScheduler::new_from_seed(seed, depth, iterations);
    shuttle::Runner::new(scheduler, shuttle::Config::default()).run(self::race(race, runs.clone()));
    runs.get()
}

/// Runs `race` under shuttle's random scheduler (`iterations` executions from `seed`);
/// returns the executions run. Panics with the failing schedule on a violation.
pub fn check_random<A>(race: Race<A>, seed: u64, iterations: usize) -> u64
where
    A: Algorithm + Clone + Send + Sync + 'static,
{
    let runs = std::sync::Arc::new(Counter::default());
    shuttle::check_random_with_seed(self::race(race, runs.clone()), seed, iterations);
    runs.get()
}

/// Runs `race` under shuttle's DFS scheduler (exhaustive unless `max_iterations` stops it
/// first); returns the executions run. Panics with the failing schedule on a violation.
pub fn check_dfs<A>(race: Race<A>, max_iterations: Option<usize>) -> u64
where
    A: Algorithm + Clone + Send + Sync + 'static,
{
    let runs = std::sync::Arc::new(Counter::default());
    shuttle::check_dfs(self::race(race, runs.clone()), max_iterations);
    runs.get()
}
