//! loom proofs: every interleaving of N gateways taking the last token from one key.
//!
//! The store under test is the real `MemoryStore`, built on loom's instrumented mutex
//! through the store's `SyncBackend` seam by the harness any limiter can use
//! (`ratelab_sim::harness::loom`); no copy of the store logic lives here.
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
//! The all-or-nothing step over several keys (`MemoryStore::apply_all`) is proved the same
//! way on overlapping key sets (`support/overlap.rs`): no deadlock, no lost update, no
//! counter pollution, exhaustively with 2 gateways and within preemption bound 3 with 3
//! (exhaustive with 3 takes over 100 000 executions); deciding the limits one by one is the
//! canary, and loom finds its pollution.
//!
//! To watch a violating interleaving step by step, stop at the first one and trace it:
//!
//! ```text
//! RATELAB_LOOM_STOP_AT_VIOLATION=1 LOOM_LOG=trace \
//!     cargo test --test loom naive_path_loses_updates_with_two_gateways -- --nocapture
//! ```

use ratelab_testkit::docs;
mod support {
    pub mod overlap;
}
use support::overlap;

use ratelab_core::TokenBucket;
use ratelab_sim::harness::loom::{Exploration, Options, explore};
use ratelab_sim::harness::{Race, describe};
use ratelab_store::Path;

/// A bucket of capacity `gateways` raced for its last token by `gateways` threads.
fn last_token(path: Path, gateways: usize, preemption_bound: Option<usize>) -> Exploration {
    let bucket = TokenBucket::per_second(gateways as u64, 1).expect("valid policy");
    let options = Options {
        preemption_bound,
        stop_at_violation: std::env::var_os("RATELAB_LOOM_STOP_AT_VIOLATION").is_some(),
    };
    let f = explore(&Race::last_unit(bucket, path, gateways), options);
    assert_eq!(f.expected, 1, "the bucket alone admits one of them");
    f
}

/// Explores the naive path and requires the lost update; returns the lines it printed.
fn assert_lost_update_found(gateways: usize, preemption_bound: Option<usize>) -> String {
    let f = last_token(Path::Naive, gateways, preemption_bound);
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
    let f = last_token(Path::Atomic, gateways, preemption_bound);
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

/// What loom found over every interleaving of the overlapping-keys model.
#[derive(Debug, Default)]
struct Overlap {
    executions: u64,
    violations: u64,
    first: Option<String>,
}

/// Explores `gateways` requests over two keys each, overlapping in a cycle
/// (`support/overlap.rs`), decided by `step`. loom itself fails the model on a deadlock.
fn explore_overlap(step: overlap::Step, gateways: usize, bound: Option<usize>) -> Overlap {
    use ratelab_sim::harness::loom::LoomBackend;
    let found = std::sync::Arc::new(std::sync::Mutex::new(Overlap::default()));
    let sink = found.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = bound;
    builder.check(move || {
        let store = loom::sync::Arc::new(overlap::store::<LoomBackend>());
        let keys = loom::sync::Arc::new(overlap::keys(&*store, gateways));
        let threads: Vec<_> = (0..gateways)
            .map(|g| {
                let (store, keys) = (store.clone(), keys.clone());
                loom::thread::spawn(move || overlap::take(&*store, &keys, g, step))
            })
            .collect();
        let admitted: Vec<bool> = threads
            .into_iter()
            .map(|t| t.join().expect("gateway thread"))
            .collect();
        let v = overlap::violation(&*store, &keys, &admitted);
        let mut f = sink.lock().expect("no panics while recording");
        f.executions += 1;
        if let Some(v) = v {
            f.violations += 1;
            f.first.get_or_insert(v);
        }
    });
    let mut f = found.lock().expect("model finished");
    std::mem::take(&mut *f)
}

#[test]
fn all_or_nothing_over_overlapping_keys_with_two_gateways() {
    let f = explore_overlap(overlap::Step::Together, 2, None);
    println!(
        "loom all-or-nothing, 2 gateways on 2 keys in 2 shards (exhaustive): {} executions, {} \
         violations, no deadlock",
        f.executions, f.violations
    );
    assert_eq!(f.violations, 0, "{:?}", f.first);
    assert!(f.executions > 1);
}

#[test]
fn all_or_nothing_over_overlapping_keys_with_three_gateways() {
    let f = explore_overlap(overlap::Step::Together, 3, Some(3));
    println!(
        "loom all-or-nothing, 3 gateways on 3 keys in 3 shards, a cycle (preemption bound 3): {} \
         executions, {} violations, no deadlock",
        f.executions, f.violations
    );
    assert_eq!(f.violations, 0, "{:?}", f.first);
    assert!(f.executions > 1);
}

#[test]
fn one_by_one_limits_pollute_counters() {
    let f = explore_overlap(overlap::Step::OneByOne, 2, None);
    let first = f.first.as_deref().expect("loom must find the pollution");
    println!(
        "loom one limit at a time, 2 gateways on 2 keys: counter pollution in {} of {} \
         executions\n  first: {first}",
        f.violations, f.executions
    );
    assert!(first.contains("counter pollution"), "{first}");
    assert!(f.violations < f.executions, "serial orders are clean");
}
