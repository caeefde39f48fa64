//! Mutation fuzzing of scenario files: bad input must get a clear error, never a panic.
//!
//! Each input is a shipped scenario mutated from a seeded stream — numbers set to extremes
//! (0, −1, the bounds and one past them, 2⁵³, `u64::MAX`, fractions), fields deleted, values
//! retyped, subtrees spliced in from other scenarios (a fault, an edge, a cleanup job where
//! none was), array elements duplicated or dropped, and text truncated or with bytes
//! inserted. Every input goes through the two paths the CLI takes: validation (what
//! `ratelab check` does: exit 0 or 2) and, when it is valid and small enough, one seed of the
//! run (what `ratelab run` does: exit 0 or 1). A panic on either path is a failure, recorded
//! with its input; so is a valid scenario whose report is not a pass or a failure.
//!
//! The same seed gives the same inputs on any machine: `ratelab fuzz --inputs N --seed S`.

use ratelab_sim::rng::SimRng;
use ratelab_sim::{RunOptions, Scenario};
use serde_json::{Map, Value};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// What a fuzz campaign runs.
#[derive(Clone, Debug)]
pub struct FuzzConfig {
    /// Inputs to generate.
    pub inputs: u64,
    /// The campaign's seed.
    pub seed: u64,
    /// A valid input is run only if it schedules at most this many requests per seed.
    pub run_requests: u64,
    /// … and simulates at most this long, ms.
    pub run_ms: u64,
}

/// A panic, with what caused it.
#[derive(Clone, Debug)]
pub struct PanicCase {
    /// Which input (0-based).
    pub input: u64,
    /// The scenario it was mutated from.
    pub from: PathBuf,
    /// `check` or `run`.
    pub stage: &'static str,
    /// The panic message.
    pub message: String,
    /// The input text.
    pub text: String,
}

/// What a campaign found.
#[derive(Clone, Debug, Default)]
pub struct FuzzReport {
    /// Inputs generated.
    pub inputs: u64,
    /// Refused by validation (the CLI's exit 2).
    pub invalid: u64,
    /// Accepted by validation.
    pub valid: u64,
    /// Of the valid ones, run for one seed.
    pub ran: u64,
    /// Of those, runs whose expectations held (exit 0).
    pub passed: u64,
    /// Runs whose expectations failed (exit 1).
    pub failed: u64,
    /// Valid inputs too large to run within the budget.
    pub not_run: u64,
    /// Panics, at most [`MAX_KEPT`] kept in full.
    pub panics: Vec<PanicCase>,
    /// Panics in all.
    pub panic_count: u64,
}

impl FuzzConfig {
    /// The command that runs this campaign again.
    pub fn replay(&self) -> String {
        format!(
            "cargo run -p ratelab -- fuzz --inputs {} --seed {}",
            self.inputs, self.seed
        )
    }
}

impl std::fmt::Display for PanicCase {
    /// Where it panicked, the message, and the input in full.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PANIC in {} of input {} (mutated from {}): {}\n--- input ---\n{}\n---",
            self.stage,
            self.input,
            self.from.display(),
            self.message,
            self.text
        )
    }
}

impl std::fmt::Display for FuzzReport {
    /// The verdicts the inputs got, one kind a line (the campaign's summary).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "  refused by validation (exit 2): {}\n  valid: {} — run for one seed: {} ({} passed, \
             {} failed their expectations), over the run budget: {}\n  panics: {}",
            self.invalid,
            self.valid,
            self.ran,
            self.passed,
            self.failed,
            self.not_run,
            self.panic_count
        )
    }
}

/// Panics kept with their input.
pub const MAX_KEPT: usize = 20;

/// Runs a campaign over `corpus` (file, text) pairs, calling `progress(done)` every 100 inputs.
pub fn fuzz(corpus: &[(PathBuf, String)], cfg: &FuzzConfig, progress: &dyn Fn(u64)) -> FuzzReport {
    let mut report = FuzzReport::default();
    if corpus.is_empty() {
        return report;
    }
    let parsed: Vec<Value> = corpus
        .iter()
        .filter_map(|(_, t)| serde_json::from_str(t).ok())
        .collect();
    let message = QuietPanics::install();
    let mut rng = SimRng::new(cfg.seed, 0xf022);
    for input in 0..cfg.inputs {
        if input % 100 == 0 {
            progress(input);
        }
        let (file, text) = &corpus[rng.below(corpus.len() as u64) as usize];
        let mutated = mutate(text, &parsed, &mut rng);
        report.inputs += 1;
        let panicked = |stage: &'static str, report: &mut FuzzReport| {
            report.panic_count += 1;
            if report.panics.len() < MAX_KEPT {
                report.panics.push(PanicCase {
                    input,
                    from: file.clone(),
                    stage,
                    message: message.take(),
                    text: mutated.clone(),
                });
            }
        };
        let checked = catch_unwind(|| Scenario::parse(file, &mutated));
        let sc = match checked {
            Err(_) => {
                panicked("check", &mut report);
                continue;
            }
            Ok(Err(_)) => {
                report.invalid += 1;
                continue;
            }
            Ok(Ok(sc)) => sc,
        };
        report.valid += 1;
        if sc.scheduled_requests() > cfg.run_requests
            || sc.spec().duration_ms.get() > cfg.run_ms
            || ratelab_sim::faults_end_ms(&sc) > cfg.run_ms
        {
            report.not_run += 1;
            continue;
        }
        let seed = sc.spec().seeds.get()[0];
        match catch_unwind(AssertUnwindSafe(|| {
            ratelab_sim::run(&sc, seed, RunOptions::default()).0
        })) {
            Ok(r) if r.passed => report.passed += 1,
            Ok(_) => report.failed += 1,
            Err(_) => panicked("run", &mut report),
        }
        report.ran += 1;
    }
    progress(cfg.inputs);
    drop(message);
    report
}

/// Reads every `*.json` under `dir`, in path order.
pub fn corpus(dir: &Path) -> std::io::Result<Vec<(PathBuf, String)>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&d)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "json") {
                let text = std::fs::read_to_string(&p)?;
                out.push((p, text));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// While alive, panics print nothing; their message is kept for [`QuietPanics::take`].
struct QuietPanics {
    previous: Option<PanicHook>,
}

type PanicHook = Box<dyn Fn(&std::panic::PanicHookInfo<'_>) + Sync + Send>;

static LAST_PANIC: Mutex<String> = Mutex::new(String::new());

impl QuietPanics {
    fn install() -> QuietPanics {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(|info| {
            let at = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()) = format!("{msg}{at}");
        }));
        QuietPanics {
            previous: Some(previous),
        }
    }

    fn take(&self) -> String {
        std::mem::take(&mut *LAST_PANIC.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl Drop for QuietPanics {
    fn drop(&mut self) {
        if let Some(p) = self.previous.take() {
            std::panic::set_hook(p);
        }
    }
}

/// Numbers worth trying anywhere: zero, signs, the schema's bounds and one past them, the
/// edges of the integer types JSON numbers meet.
const EXTREMES: [f64; 24] = [
    0.0,
    1.0,
    2.0,
    -1.0,
    0.5,
    63.0,
    64.0,
    256.0,
    257.0,
    1_000.0,
    1_024.0,
    1_025.0,
    60_000.0,
    1_000_000.0,
    3_600_000.0,
    3_600_001.0,
    86_400_000.0,
    10_000_000.0,
    1e12,
    1e12 + 1.0,
    4_294_967_296.0,
    9_007_199_254_740_992.0,
    1.8446744073709552e19,
    -9.223372036854776e18,
];

/// One mutated input from `text`; `others` are the corpus's parsed files, for splicing.
pub fn mutate(text: &str, others: &[Value], rng: &mut SimRng) -> String {
    let Ok(mut v) = serde_json::from_str::<Value>(text) else {
        return text.to_owned();
    };
    for _ in 0..1 + rng.below(2) {
        mutate_value(&mut v, others, rng);
    }
    let mut out = if rng.chance(0.5) {
        serde_json::to_string_pretty(&v)
    } else {
        serde_json::to_string(&v)
    }
    .unwrap_or_default();
    if rng.chance(0.15) {
        mutate_text(&mut out, rng);
    }
    out
}

fn mutate_value(v: &mut Value, others: &[Value], rng: &mut SimRng) {
    let mut paths = Vec::new();
    collect_paths(v, &mut Vec::new(), &mut paths);
    // Weights out of 20: numbers 8, deletion 3, retyping 2, splicing 4, arrays 2, new members 1.
    let op = rng.below(20);
    if op <= 7 {
        // A number leaf, most of the time; any value otherwise.
        let numbers: Vec<&Vec<Seg>> = paths
            .iter()
            .filter(|p| get_path(v, p).is_some_and(Value::is_number))
            .collect();
        if !numbers.is_empty() && rng.chance(0.9) {
            let p = numbers[rng.below(numbers.len() as u64) as usize].clone();
            if let Some(target) = at_path(v, &p) {
                *target = number(target, rng);
            }
            return;
        }
    }
    let path = &paths[rng.below(paths.len() as u64) as usize];
    let Some(target) = at_path(v, path) else {
        return;
    };
    match op {
        0..=7 => *target = number(target, rng),
        8..=10 => {
            if let Some(parent) = parent_object(v, path) {
                let keys: Vec<String> = parent.keys().cloned().collect();
                if !keys.is_empty() {
                    parent.remove(&keys[rng.below(keys.len() as u64) as usize]);
                }
            }
        }
        11 | 12 => *target = retyped(rng),
        13..=16 => {
            // Splice: a member of another scenario, by the name it has there.
            let donor = &others[rng.below(others.len() as u64) as usize];
            let mut donor_paths = Vec::new();
            collect_paths(donor, &mut Vec::new(), &mut donor_paths);
            let dp = &donor_paths[rng.below(donor_paths.len() as u64) as usize];
            let (Some(Seg::Key(name)), Some(value)) = (dp.last(), get_path(donor, dp)) else {
                return;
            };
            if let Value::Object(m) = target {
                m.insert(name.clone(), value.clone());
            } else {
                *target = value.clone();
            }
        }
        17 | 18 => {
            if let Value::Array(a) = target {
                match (rng.below(3), a.len()) {
                    (0, n) if n > 0 => {
                        let e = a[rng.below(n as u64) as usize].clone();
                        for _ in 0..1 + rng.below(3) {
                            a.push(e.clone());
                        }
                    }
                    (1, n) if n > 0 => {
                        a.remove(rng.below(n as u64) as usize);
                    }
                    _ => a.clear(),
                }
            } else {
                *target = number(target, rng);
            }
        }
        _ => {
            if let Value::Object(m) = target {
                m.insert(
                    ["unknown", "$schema", "seed", "edge", "rate"][rng.below(5) as usize].into(),
                    retyped(rng),
                );
            } else {
                *target = retyped(rng);
            }
        }
    }
}

fn number(old: &Value, rng: &mut SimRng) -> Value {
    let n = if let (Some(v), true) = (old.as_f64(), rng.chance(0.5)) {
        match rng.below(4) {
            0 => v + 1.0,
            1 => v - 1.0,
            2 => v * 2.0,
            _ => (v / 2.0).floor(),
        }
    } else {
        EXTREMES[rng.below(EXTREMES.len() as u64) as usize]
    };
    if n.fract() == 0.0 && (0.0..1.8446744073709552e19).contains(&n) {
        Value::from(n as u64)
    } else if n.fract() == 0.0 && (-9.223372036854776e18..0.0).contains(&n) {
        Value::from(n as i64)
    } else if n >= 1.8446744073709552e19 {
        Value::from(u64::MAX)
    } else {
        serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number)
    }
}

fn retyped(rng: &mut SimRng) -> Value {
    match rng.below(9) {
        0 => Value::Null,
        1 => Value::Bool(rng.chance(0.5)),
        2 => Value::String(String::new()),
        3 => Value::String("x\u{0}é".into()),
        4 => Value::Array(Vec::new()),
        5 => Value::Object(Map::new()),
        6 => Value::from(-1),
        7 => Value::from(vec![0u64]),
        _ => Value::String("9".repeat(1 + rng.below(400) as usize)),
    }
}

fn mutate_text(out: &mut String, rng: &mut SimRng) {
    if out.is_empty() {
        return;
    }
    let at = |rng: &mut SimRng, s: &str| {
        let mut i = rng.below(s.len() as u64 + 1) as usize;
        while !s.is_char_boundary(i) {
            i -= 1;
        }
        i
    };
    match rng.below(3) {
        0 => {
            let i = at(rng, out);
            out.truncate(i);
        }
        1 => {
            let i = at(rng, out);
            let j = at(rng, out).max(i);
            out.replace_range(i..j, "");
        }
        _ => {
            let i = at(rng, out);
            let c = [
                '{', '}', '[', ']', ',', ':', '"', '0', '-', '\\', 'é', '\u{0}',
            ];
            out.insert(i, c[rng.below(c.len() as u64) as usize]);
        }
    }
}

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

fn collect_paths(v: &Value, here: &mut Vec<Seg>, out: &mut Vec<Vec<Seg>>) {
    out.push(here.clone());
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                here.push(Seg::Key(k.clone()));
                collect_paths(c, here, out);
                here.pop();
            }
        }
        Value::Array(a) => {
            for (i, c) in a.iter().enumerate() {
                here.push(Seg::Index(i));
                collect_paths(c, here, out);
                here.pop();
            }
        }
        _ => {}
    }
}

fn at_path<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, seg| match (seg, v) {
        (Seg::Key(k), Value::Object(m)) => m.get_mut(k),
        (Seg::Index(i), Value::Array(a)) => a.get_mut(*i),
        _ => None,
    })
}

fn get_path<'a>(v: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, seg| match (seg, v) {
        (Seg::Key(k), Value::Object(m)) => m.get(k),
        (Seg::Index(i), Value::Array(a)) => a.get(*i),
        _ => None,
    })
}

/// The object holding the value at `path` (or the root object for the root).
fn parent_object<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Map<String, Value>> {
    let parent = if path.is_empty() {
        v
    } else {
        at_path(v, &path[..path.len() - 1])?
    };
    parent.as_object_mut()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_inputs() {
        let text = r#"{"a": 1, "b": [1, 2, {"c": "x"}], "d": {"e": 5}}"#;
        let others = vec![serde_json::from_str(text).unwrap()];
        let inputs = |seed| {
            let mut rng = SimRng::new(seed, 1);
            (0..50)
                .map(|_| mutate(text, &others, &mut rng))
                .collect::<Vec<_>>()
        };
        assert_eq!(inputs(7), inputs(7));
        assert_ne!(inputs(7), inputs(8));
        assert!(inputs(7).iter().any(|m| m != text), "it mutates");
    }
}
