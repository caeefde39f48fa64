//! loom: every interleaving of a [`Race`] (up to a preemption bound, if given).
//!
//! loom primitives exist only inside `loom::model`; the store is built there, on
//! [`LoomBackend`], once per execution. What each execution admitted is gathered outside the
//! model with std primitives, so a caller can assert the lost update was found (the naive
//! path) or never happened (the atomic path). Exhaustive models of 2 and 3 threads take
//! thousands of executions (under a second); bound 4 threads and more
//! (`preemption_bound: Some(2)`).
//!
//! To watch a violating interleaving, stop at the first one (`stop_at_violation`) and run the
//! test with `LOOM_LOG=trace`.

use super::Race;
use loom::sync::Arc;
use ratelab_core::{Algorithm, Decision};
use ratelab_store::backend::{BackendMutex, SyncBackend};
use ratelab_store::{MemoryStore, Store};
use std::sync::Mutex as StdMutex;

backend!("loom", LoomBackend, LoomMutex, loom::sync::Mutex);

/// What exploring one race found.
#[derive(Clone, Debug, Default)]
pub struct Exploration {
    /// Executions explored.
    pub executions: u64,
    /// What the algorithm alone admits of the racing requests ([`Race::expected`]).
    pub expected: usize,
    /// Executions that admitted more than `expected`: lost updates.
    pub violations: u64,
    /// Executions that admitted fewer than `expected`.
    pub starved: u64,
    /// The most admitted in one execution.
    pub max_admitted: usize,
    /// The racing gateways' decisions in the first violating execution.
    pub first_violation: Option<Vec<Decision>>,
}

impl Exploration {
    /// Every execution admitted exactly what the algorithm alone admits.
    pub fn held(&self) -> bool {
        self.violations == 0 && self.starved == 0
    }
}

/// How to explore.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// loom's preemption bound (`None`: exhaustive).
    pub preemption_bound: Option<usize>,
    /// Panic at the first violating execution, so loom prints it (with `LOOM_LOG=trace`).
    pub stop_at_violation: bool,
}

/// Explores every interleaving of `race` (within `options`' bound) over ratelab's
/// [`MemoryStore`].
pub fn explore<A>(race: &Race<A>, options: Options) -> Exploration
where
    A: Algorithm + Clone + Send + Sync + 'static,
{
    explore_store(race, options, |a: &A| {
        MemoryStore::<A, LoomBackend>::with_backend(a.clone(), 1, 16)
    })
}

/// Explores every interleaving of `race` over a store `make` builds for each execution: a
/// user's [`Store`], built on loom's primitives (say, generic over a
/// [`SyncBackend`] and given [`LoomBackend`]) so loom can interleave it.
pub fn explore_store<A, S>(
    race: &Race<A>,
    options: Options,
    make: impl Fn(&A) -> S + Send + Sync + 'static,
) -> Exploration
where
    A: Algorithm + Clone + Send + Sync + 'static,
    S: Store<Algorithm = A> + Send + Sync + 'static,
{
    let (before, expected) = race.expected();
    let found = std::sync::Arc::new(StdMutex::new(Exploration {
        expected,
        ..Exploration::default()
    }));
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = options.preemption_bound;
    let (sink, race) = (found.clone(), race.clone());
    builder.check(move || {
        let decisions = race.execute(
            Arc::new(make(&race.algorithm)),
            &before,
            |store, race| loom::thread::spawn(move || race.take(&*store)),
            |h| h.join().expect("gateway thread"),
        );
        let admitted = decisions.iter().filter(|d| d.allowed).count();

        let mut f = sink.lock().expect("no panics while recording");
        f.executions += 1;
        f.max_admitted = f.max_admitted.max(admitted);
        if admitted < expected {
            f.starved += 1;
        }
        if admitted > expected {
            f.violations += 1;
            f.first_violation.get_or_insert(decisions);
            drop(f);
            assert!(
                !options.stop_at_violation,
                "lost update: {admitted} gateways admitted where the algorithm alone admits \
                 {expected}"
            );
        }
    });
    let mut f = found.lock().expect("model finished");
    std::mem::take(&mut *f)
}
