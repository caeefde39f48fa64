//! loom proofs: every interleaving of N gateways taking the last token from one key.
//!
//! The store under test is the real [`MemoryStore`], built on loom's instrumented mutex
//! through the store's [`SyncBackend`] seam; no copy of the store logic lives here.
//!
//! Each model leaves exactly one token in a bucket and lets N gateways (threads) ask for it
//! at the same instant. A correct limiter admits exactly one of them in *every* interleaving.
//!
//! - naive path: loom finds interleavings that admit more than one (both gateways read the
//!   same state before either writes back). These tests pass *because* the lost update is
//!   found, and print how often.
//! - atomic path: exhaustive (no preemption bound) for 2 and 3 gateways, bounded for 4;
//!   exactly one admitted in every execution.
//!
//! To watch a violating interleaving step by step, stop at the first one and trace it:
//!
//! ```text
//! RATELAB_LOOM_STOP_AT_VIOLATION=1 LOOM_LOG=trace \
//!     cargo test --test loom naive_path_loses_updates_with_two_gateways -- --nocapture
//! ```

#[path = "support/docs.rs"]
mod docs;

use loom::sync::Arc;
use ratelab_core::{Decision, Nanos, TokenBucket};
use ratelab_store::backend::{BackendMutex, SyncBackend};
use ratelab_store::{Key, MemoryStore, Path, decide};
use std::sync::Mutex as StdMutex;

/// loom's primitives behind the store's backend trait.
struct LoomBackend;

struct LoomMutex<T>(loom::sync::Mutex<T>);

impl<T: Send> BackendMutex<T> for LoomMutex<T> {
    fn new(value: T) -> Self {
        LoomMutex(loom::sync::Mutex::new(value))
    }

    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self
            .0
            .lock()
            .expect("no thread panics while holding the lock"))
    }
}

impl SyncBackend for LoomBackend {
    type Mutex<T: Send + 'static> = LoomMutex<T>;
}

/// What exploring one model found, gathered outside loom with std primitives.
#[derive(Debug, Default)]
struct Exploration {
    executions: u64,
    /// Executions that admitted more than the one token left.
    violations: u64,
    /// Executions that admitted nobody (a correct limiter never does this either).
    starved: u64,
    max_admitted: usize,
    first_violation: Option<Vec<Decision>>,
}

fn explore(path: Path, gateways: usize, preemption_bound: Option<usize>) -> Exploration {
    let found = std::sync::Arc::new(StdMutex::new(Exploration::default()));
    let stop_at_violation = std::env::var_os("RATELAB_LOOM_STOP_AT_VIOLATION").is_some();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = preemption_bound;
    let sink = found.clone();
    builder.check(move || {
        // Capacity = gateways, drained to one token before the gateways start.
        let bucket = TokenBucket::per_second(gateways as u64, 1).expect("valid policy");
        let store = Arc::new(MemoryStore::<_, LoomBackend>::with_backend(bucket, 1, 16));
        let key = Key::new("user:ana").expect("valid key");
        for _ in 1..gateways {
            let d = decide(&*store, Path::Atomic, &key, Nanos(0), 1).expect("in-memory store");
            assert!(d.allowed);
        }
        let handles: Vec<_> = (0..gateways)
            .map(|_| {
                let (store, key) = (store.clone(), key.clone());
                loom::thread::spawn(move || {
                    decide(&*store, path, &key, Nanos(0), 1).expect("in-memory store")
                })
            })
            .collect();
        let decisions: Vec<Decision> = handles
            .into_iter()
            .map(|h| h.join().expect("gateway thread"))
            .collect();
        let admitted = decisions.iter().filter(|d| d.allowed).count();

        let mut f = sink.lock().expect("no panics while recording");
        f.executions += 1;
        f.max_admitted = f.max_admitted.max(admitted);
        if admitted == 0 {
            f.starved += 1;
        }
        if admitted > 1 {
            f.violations += 1;
            f.first_violation.get_or_insert(decisions);
            drop(f);
            assert!(
                !stop_at_violation,
                "lost update: {admitted} gateways admitted with one token left"
            );
        }
    });
    let mut f = found.lock().expect("model finished");
    std::mem::take(&mut *f)
}

fn describe(decisions: &[Decision]) -> String {
    decisions
        .iter()
        .enumerate()
        .map(|(g, d)| {
            let verdict = if d.allowed { "admitted" } else { "denied" };
            format!("gateway {g} {verdict} (remaining {})", d.remaining)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Explores the naive path and requires the lost update; returns the lines it printed.
fn assert_lost_update_found(gateways: usize, preemption_bound: Option<usize>) -> String {
    let f = explore(Path::Naive, gateways, preemption_bound);
    let first = f
        .first_violation
        .as_deref()
        .expect("loom must find the lost update");
    let lines = format!(
        "loom naive path, {gateways} gateways, 1 token left ({}): lost update found in {} of {} \
         executions (up to {} admitted)\n  first violating execution: {}\n",
        bound_name(preemption_bound),
        f.violations,
        f.executions,
        f.max_admitted,
        describe(first)
    );
    print!("{lines}");
    println!(
        "  to trace it: RATELAB_LOOM_STOP_AT_VIOLATION=1 LOOM_LOG=trace cargo test --test loom \
         naive -- --nocapture"
    );
    assert!(f.violations > 0 && f.max_admitted == gateways);
    assert!(
        f.violations < f.executions,
        "serial interleavings admit exactly one"
    );
    lines
}

fn bound_name(preemption_bound: Option<usize>) -> String {
    preemption_bound.map_or("exhaustive".to_owned(), |b| format!("preemption bound {b}"))
}

/// Explores the atomic path and requires no violation; returns the line it printed.
fn assert_never_overshoots(gateways: usize, preemption_bound: Option<usize>) -> String {
    let f = explore(Path::Atomic, gateways, preemption_bound);
    let line = format!(
        "loom atomic path, {gateways} gateways, 1 token left ({}): {} executions, {} violations\n",
        bound_name(preemption_bound),
        f.executions,
        f.violations
    );
    print!("{line}");
    assert_eq!(f.violations, 0, "first violation: {:?}", f.first_violation);
    assert_eq!(f.starved, 0, "some execution admitted nobody");
    assert_eq!(f.max_admitted, 1);
    assert!(f.executions > 1, "loom explored more than one interleaving");
    line
}

/// `lines` as the README shows them.
fn text_block(lines: &str) -> String {
    format!("```text\n{lines}```\n")
}

#[test]
fn naive_path_loses_updates_with_two_gateways() {
    let lines = assert_lost_update_found(2, None);
    docs::check_block("README.md", "loom-naive", &text_block(&lines));
}

#[test]
fn naive_path_loses_updates_with_three_gateways() {
    // Exhaustive is ~80k executions (10 s); two preemptions already expose the race.
    let _ = assert_lost_update_found(3, Some(2));
}

#[test]
fn atomic_path_never_overshoots_with_two_gateways() {
    let _ = assert_never_overshoots(2, None);
}

#[test]
fn atomic_path_never_overshoots_with_three_gateways() {
    let line = assert_never_overshoots(3, None);
    docs::check_block("README.md", "loom-atomic", &text_block(&line));
}

#[test]
fn atomic_path_never_overshoots_with_four_gateways_bounded() {
    let _ = assert_never_overshoots(4, Some(2));
}
