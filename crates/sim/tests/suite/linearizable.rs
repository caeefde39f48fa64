//! The linearizability checker over every shipped token-bucket scenario, seed 1, per-key
//! layer: no false alarm on the correct limiter, and the naive path caught — including runs
//! whose admissions stay inside the envelope.
//!
//! "The correct limiter" is read off each scenario's own settings, not its name: the atomic
//! path on the store's clock, with no fault that loses the store's state (a crash) and no
//! cleanup job that deletes without fencing. Any such run must be linearizable; a naive-path
//! run with lost updates must not be.

use ratelab_check::history::History;
use ratelab_check::linearizable::{self, DEFAULT_BUDGET, Op, Spec};
use ratelab_core::Policy;
use ratelab_sim::scenario::{FaultKind, PathName, TimeSourceName};
use ratelab_sim::{RunOptions, Scenario};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
}

/// Each key's per-key-layer operations: call and return times, what the answer said, and,
/// with `stamped`, the store's order of application (as a black-box client records them
/// without).
fn per_key_ops(h: &History, stamped: bool) -> BTreeMap<String, Vec<Op>> {
    let mut by: BTreeMap<String, Vec<Op>> = BTreeMap::new();
    for r in &h.requests {
        if let Some(mut op) = Op::per_key(r) {
            if !stamped {
                op.stamp = None;
            }
            by.entry(r.key.clone()).or_default().push(op);
        }
    }
    by
}

fn correct_limiter(sc: &Scenario) -> bool {
    let s = sc.spec();
    s.store.path == PathName::Atomic
        && s.store.time_source == TimeSourceName::Store
        && !s.faults.iter().any(|f| f.kind() == FaultKind::StoreCrash)
        // A failover loses the writes its replica had not received. Writes that wait for the
        // replica keep every acknowledged admission, but a denial answered from an admission
        // still on its way (a denial writes nothing, so does not wait) can be undone too: a
        // history across a failover is judged per epoch (verdict.rs), not whole.
        && !s.faults.iter().any(|f| f.kind() == FaultKind::StoreFailover)
        && s.cleanup_job.is_none_or(|j| j.fencing && !j.blind_delete)
        && s.planted_bug.is_none()
}

#[test]
fn correct_runs_are_linearizable_and_naive_runs_are_not() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../sim-scenarios");
    let mut all = Vec::new();
    files(&root, &mut all);
    let (mut correct, mut naive_caught, mut inside_envelope) = (0, 0, 0);
    for file in &all {
        let sc = Scenario::load(file).unwrap_or_else(|e| panic!("{e}"));
        let Policy::TokenBucket(b) = *sc.policy() else {
            continue;
        };
        let spec = Spec {
            capacity: b.capacity(),
            amount: b.refill_amount(),
            period: b.refill_period(),
        };
        let (report, h) = ratelab_sim::run(&sc, 1, RunOptions::default());
        let check = |stamped| {
            linearizable::check(
                &spec,
                per_key_ops(&h, stamped)
                    .iter()
                    .map(|(k, ops)| (k.as_str(), ops.clone())),
                DEFAULT_BUDGET,
            )
        };
        let r = check(false);
        let stamped = check(true);
        let name = file
            .strip_prefix(&root)
            .unwrap_or(file)
            .display()
            .to_string();
        println!(
            "{name}: {} keys, {} violations, {} unknown, envelope excess {}",
            r.keys,
            r.violations.len(),
            r.unknown.len(),
            report.figure("total_excess")
        );
        if correct_limiter(&sc) {
            correct += 1;
            assert!(
                r.linearizable(),
                "{name}: a correct limiter judged not linearizable: {:?} (unknown: {:?})",
                r.violations.iter().next(),
                r.unknown
            );
            assert!(
                stamped.linearizable(),
                "{name}: a correct limiter not linearizable in the store's order: {:?}",
                stamped.violations.iter().next()
            );
        } else if sc.spec().store.path == PathName::Naive && !r.violations.is_empty() {
            naive_caught += 1;
            if report.figure("total_excess") == 0 {
                inside_envelope += 1;
            }
        }
    }
    assert!(correct >= 10, "{correct} correct-limiter scenarios checked");
    assert!(naive_caught >= 3, "{naive_caught} naive scenarios caught");
    assert!(
        inside_envelope >= 1,
        "no naive run the envelope passes was caught ({naive_caught} caught)"
    );
}
