//! Every scenario in `sim-scenarios/` (and its subfolders), every seed, run twice.
//!
//! Each scenario file is one test, named after its path without `.json`
//! (`naive-canary`, `regressions/…`). For every seed the run must meet the scenario's
//! `expect` block, and a second run must reproduce the same trace hash. A failure prints the
//! scenario, the seed, the failed expectations with their numbers, and the commands that
//! replay it:
//!
//! ```text
//! RATELAB_SEED=<seed> cargo test --test scenarios -- <name>
//! cargo run -p ratelab -- run <file> --seed <seed> --trace
//! ```
//!
//! `RATELAB_SEED` replaces each scenario's seeds with that one seed.

use libtest_mimic::{Arguments, Failed, Trial};
use ratelab_sim::{RunOptions, Scenario, replay_commands};
use std::path::{Path, PathBuf};

/// Every `*.json` below `dir`, in path order. A directory that cannot be read is an error:
/// a suite that quietly found nothing would pass.
fn scenario_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut paths = Vec::new();
    for e in entries {
        paths.push(e.map_err(|e| format!("{}: {e}", dir.display()))?.path());
    }
    paths.sort();
    for p in paths {
        if p.is_dir() {
            scenario_files(&p, out)?;
        } else if p.extension().is_some_and(|x| x == "json") {
            out.push(p);
        }
    }
    Ok(())
}

/// The fewest scenario files the suite accepts: the shipped set is larger, and a checkout
/// with fewer has lost some.
const MIN_SCENARIOS: usize = 30;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn check_scenario(file: &Path) -> Result<(), Failed> {
    let sc = Scenario::load(file).map_err(|e| Failed::from(format!("bad scenario: {e}")))?;
    let seeds =
        match std::env::var("RATELAB_SEED") {
            Ok(s) => vec![s.trim().parse::<u64>().map_err(|_| {
                Failed::from(format!("RATELAB_SEED={s:?} is not an unsigned integer"))
            })?],
            Err(_) => sc.spec().seeds.get().to_vec(),
        };
    let rel = file
        .strip_prefix(root())
        .unwrap_or(file)
        .display()
        .to_string();
    let mut problems = Vec::new();
    for seed in seeds {
        let (first, history) = ratelab_sim::run(&sc, seed, RunOptions::default());
        let (second, _) = ratelab_sim::run(&sc, seed, RunOptions::default());
        let mut failures = first.failures.clone();
        // A scenario judged by the explorer's checkers (a shrunk failure in regressions/).
        if let Some(v) = ratelab_lab::explore::verdict::explorer_expectation(&sc, &history) {
            failures.extend(v.problems);
            // Unknown is never a pass: a shipped scenario's keys are all decided.
            if v.unknown_keys > 0 {
                failures.push(format!(
                    "unknown: the linearizability search ran out of its budget on {} keys",
                    v.unknown_keys
                ));
            }
        }
        if first.trace_hash != second.trace_hash {
            failures.push(format!(
                "not deterministic: trace hash {} then {}",
                first.trace_hash, second.trace_hash
            ));
        }
        if failures.is_empty() {
            continue;
        }
        let mut msg = format!("scenario {} ({rel}), seed {seed}:\n", sc.name());
        for f in &failures {
            msg.push_str(&format!("  {f}\n"));
        }
        if let Some(w) = &first.excess_witness {
            msg.push_str(&format!(
                "  worst window: key {:?}, {} admitted in [{} ns, {} ns] against a bound of {}; requests {:?}\n",
                w.key, w.admitted, w.from_ns, w.to_ns, w.bound, w.ids
            ));
        }
        msg.push_str("  replay with:\n");
        let name = trial_name(file);
        for c in replay_commands(&name, &rel, seed) {
            msg.push_str(&format!("    {c}\n"));
        }
        problems.push(msg);
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n").into())
    }
}

fn trial_name(file: &Path) -> String {
    let dir = root().join("sim-scenarios");
    let rel = file.strip_prefix(&dir).unwrap_or(file);
    rel.with_extension("").to_string_lossy().replace('\\', "/")
}

fn main() {
    let args = Arguments::from_args();
    let mut files = Vec::new();
    if let Err(e) = scenario_files(&root().join("sim-scenarios"), &mut files) {
        eprintln!("error: cannot read the scenarios: {e}");
        std::process::exit(101);
    }
    if files.len() < MIN_SCENARIOS {
        eprintln!(
            "error: found {} scenario files under sim-scenarios/, expected at least {MIN_SCENARIOS}",
            files.len()
        );
        std::process::exit(101);
    }
    let seeds: usize = files
        .iter()
        .filter_map(|f| Scenario::load(f).ok())
        .map(|sc| match std::env::var("RATELAB_SEED") {
            Ok(_) => 1,
            Err(_) => sc.spec().seeds.get().len(),
        })
        .sum();
    println!(
        "{} scenario files, {seeds} seeds, each run twice and compared by trace hash",
        files.len()
    );
    let mut trials: Vec<Trial> = files
        .iter()
        .cloned()
        .map(|f| {
            let name = trial_name(&f);
            Trial::test(name, move || check_scenario(&f))
        })
        .collect();

    trials.push(Trial::test("madsim_determinism_check", || {
        let file = root().join("sim-scenarios/atomic-same-load.json");
        let sc = Scenario::load(&file).map_err(|e| Failed::from(e.to_string()))?;
        let hash = ratelab_sim::madsim_determinism_check(&sc, 1);
        let (report, _) = ratelab_sim::run(&sc, 1, RunOptions::default());
        if hash != report.trace_hash {
            return Err(format!(
                "determinism check hash {hash} != run hash {}",
                report.trace_hash
            )
            .into());
        }
        Ok(())
    }));

    let all = files.clone();
    trials.push(Trial::test(
        "every_scenario_round_trips_through_its_spec",
        move || {
            // A scenario edited in code is validated again from its spec: what `from_spec` makes
            // of an unedited spec must be the scenario the file gave.
            for f in &all {
                let sc = Scenario::load(f).map_err(|e| Failed::from(e.to_string()))?;
                let again = Scenario::from_spec(f, sc.spec().clone())
                    .map_err(|e| Failed::from(format!("{}: {e}", f.display())))?;
                let (a, b) = (
                    serde_json::to_string(sc.spec()).unwrap_or_default(),
                    serde_json::to_string(again.spec()).unwrap_or_default(),
                );
                if a != b || sc.scheduled_requests() != again.scheduled_requests() {
                    return Err(
                        format!("{}: the spec changed in the round trip", f.display()).into(),
                    );
                }
            }
            Ok(())
        },
    ));

    trials.push(Trial::test(
        "an_unreadable_scenario_directory_is_an_error",
        || {
            // Regression: the walk used to return quietly, and zero scenarios counted as a pass.
            let missing = root().join("sim-scenarios/does-not-exist");
            match scenario_files(&missing, &mut Vec::new()) {
                Err(e) if e.contains("does-not-exist") => Ok(()),
                other => {
                    Err(format!("expected an error naming the directory, got {other:?}").into())
                }
            }
        },
    ));

    trials.push(Trial::test("scenario_schema_is_current", || {
        let path = root().join("docs/scenario.schema.json");
        let committed = std::fs::read_to_string(&path).unwrap_or_default();
        if committed != ratelab_sim::scenario::json_schema() {
            return Err(format!(
                "{} is out of date: regenerate it with `cargo run -p ratelab -- schema > docs/scenario.schema.json`",
                path.display()
            )
            .into());
        }
        Ok(())
    }));

    libtest_mimic::run(&args, trials).exit();
}
