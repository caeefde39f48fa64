//! One drawn scenario validated, run and judged by every checker that applies, and run again
//! to check that it is deterministic: what [`crate::explore::explore_one`] and the shrinker
//! ask of each candidate.

use super::coverage;
use super::verdict::{self, Class, Failure};
use ratelab_sim::{RunOptions, Scenario};
use std::collections::BTreeMap;
use std::path::Path;

/// One scenario's run, judged.
#[derive(Clone, Debug)]
pub struct Checked {
    /// Requests simulated.
    pub requests: u64,
    /// Events the run had.
    pub events: u64,
    /// What the checkers found.
    pub failures: Vec<Failure>,
    /// The coverage probes the run reached.
    pub reached: Vec<&'static str>,
    /// Keys whose linearizability search ran out of budget.
    pub unknown_keys: u64,
    /// What each checker that applied judged (see [`ratelab_sim::checkers::Judged`]).
    pub judged: BTreeMap<String, u64>,
}

/// When [`check`] runs a scenario a second time, to compare trace hashes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rerun {
    /// Never: one run.
    Never,
    /// When the first run fails.
    IfFailed,
    /// Always.
    Always,
}

/// Validates scenario `json`, runs it with `seed` and judges the run (a linearizability
/// search of `budget` per key and epoch), then runs it again as `rerun` says to check it is
/// deterministic.
pub fn check(json: &serde_json::Value, seed: u64, rerun: Rerun, budget: u64) -> Checked {
    let fail = |class, checker: &str, detail: String| Checked {
        requests: 0,
        events: 0,
        failures: vec![Failure {
            class,
            checker: checker.into(),
            detail,
        }],
        reached: Vec::new(),
        unknown_keys: 0,
        judged: BTreeMap::new(),
    };
    let sc = match Scenario::parse(Path::new("<explore>"), &json.to_string()) {
        Ok(sc) => sc,
        Err(e) => return fail(Class::Generator, "validator", e.to_string()),
    };
    let run = || ratelab_sim::run(&sc, seed, RunOptions::default());
    let (report, history) = match std::panic::catch_unwind(run) {
        Ok(r) => r,
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "a panic without a message".into());
            return fail(Class::Panic, "run", msg);
        }
    };
    let judged = verdict::judge_within(&sc, &history, budget);
    let mut failures = judged.failures.clone();
    if rerun == Rerun::Always || (rerun == Rerun::IfFailed && !failures.is_empty()) {
        let again = std::panic::catch_unwind(run).map(|(r, _)| r.trace_hash);
        if again.as_deref().ok() != Some(report.trace_hash.as_str()) {
            failures.push(Failure {
                class: Class::Determinism,
                checker: "trace-hash".into(),
                detail: format!(
                    "first run {}, rerun {}; {}",
                    report.trace_hash,
                    again.unwrap_or_else(|_| "a panic".into()),
                    divergence(&sc, seed)
                ),
            });
        }
    }
    Checked {
        requests: report.requests,
        events: report.events,
        failures,
        reached: coverage::reached(&sc, &report, &history),
        unknown_keys: judged.unknown_keys,
        judged: judged
            .judged
            .iter()
            .map(|(k, v)| ((*k).to_owned(), *v))
            .collect(),
    }
}

/// Where two traced runs of a nondeterministic seed part: the first event that differs.
fn divergence(sc: &Scenario, seed: u64) -> String {
    let traced = || {
        std::panic::catch_unwind(|| {
            let options = RunOptions {
                keep_events: true,
                ..RunOptions::default()
            };
            ratelab_sim::run(sc, seed, options).1.events
        })
    };
    match (traced(), traced()) {
        (Ok(a), Ok(b)) => first_difference(&a, &b),
        _ => "a traced rerun panicked".into(),
    }
}

/// The first event at which two traces differ, described.
pub fn first_difference<T: std::fmt::Debug>(a: &[T], b: &[T]) -> String {
    let describe = |e: Option<&T>| e.map_or_else(|| "the end".to_owned(), |e| format!("{e:?}"));
    match (0..a.len().max(b.len()))
        .find(|&i| a.get(i).map(|e| format!("{e:?}")) != b.get(i).map(|e| format!("{e:?}")))
    {
        Some(i) => format!(
            "the traces part at event {i}: {} against {}",
            describe(a.get(i)),
            describe(b.get(i))
        ),
        None => "two traced reruns agree (the difference is outside the events)".into(),
    }
}
