//! Shrinking: a failing scenario cut down to a small one that fails with the same signature.
//!
//! The shrinker edits the scenario's JSON, never the simulator: each candidate is an ordinary
//! scenario, validated as any file is (an invalid candidate is skipped and costs nothing), run
//! with the same seed and judged by the same checkers; it is kept when a failure of the same
//! class and checker remains. Rounds of edits, coarse first, repeat until a round keeps none:
//!
//! 1. lists (faults, client groups): delta debugging, as Zeller's ddmin: drop all, then
//!    halves, then each element;
//! 2. optional fields anywhere (a breaker, an edge limit, the cleanup job, a client's cost,
//!    a fault's rate): dropped, so defaults apply;
//! 3. numbers (durations, fault windows, rates, counts, gateways, keys): tried at 0, 1,
//!    their leading digit and half their value, smallest first, as proptest halves towards
//!    simple values; a fraction tries 1;
//! 4. switches: `true` tried as `false`.
//!
//! It is deterministic: the same input and seed give the same result on any machine. The
//! budget is a number of runs ([`DEFAULT_RUNS`]), never a wall-clock time.

use super::check::{Rerun, check};
use super::verdict::Class;
use ratelab_sim::Scenario;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// Runs a shrink may make unless told otherwise.
pub const DEFAULT_RUNS: u32 = 300;

/// How big a scenario's run is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Size {
    /// Requests simulated.
    pub requests: u64,
    /// Events the run had.
    pub events: u64,
    /// Faults the scenario injects.
    pub faults: u64,
    /// Client groups.
    pub clients: u64,
    /// Gateways.
    pub gateways: u64,
    /// Simulated duration, ms.
    pub duration_ms: u64,
}

/// A shrink's result.
#[derive(Clone, Debug)]
pub struct Shrunk {
    /// The smallest failing scenario found.
    pub spec: Value,
    /// The input's size.
    pub before: Size,
    /// The result's size.
    pub after: Size,
    /// Runs made.
    pub runs: u32,
    /// Whether the budget ran out before a round kept no edit.
    pub exhausted: bool,
    /// The failure's witness in the result's run.
    pub detail: String,
}

/// One edit of a scenario's JSON, at a JSON pointer.
#[derive(Clone, Debug)]
enum Edit {
    /// Drop the elements `lo..hi` of the array at the pointer.
    Drain(String, usize, usize),
    /// Drop the object field at the pointer.
    Remove(String),
    /// Set the value at the pointer.
    Set(String, Value),
}

fn apply(spec: &Value, edit: &Edit) -> Option<Value> {
    let mut out = spec.clone();
    match edit {
        Edit::Drain(at, lo, hi) => {
            let list = out.pointer_mut(at)?.as_array_mut()?;
            if *hi > list.len() || lo >= hi {
                return None;
            }
            list.drain(lo..hi);
        }
        Edit::Remove(at) => {
            let (parent, name) = at.rsplit_once('/')?;
            let name = name.replace("~1", "/").replace("~0", "~");
            out.pointer_mut(parent)?.as_object_mut()?.remove(&name)?;
        }
        Edit::Set(at, v) => {
            let slot = out.pointer_mut(at)?;
            if slot == v {
                return None;
            }
            *slot = v.clone();
        }
    }
    Some(out)
}

/// Fields the shrinker never touches: what the scenario is, and the seed it fails with.
const KEEP: [&str; 5] = [
    "description",
    "seeds",
    "$schema",
    "algorithm",
    "planted_bug",
];

/// Delta-debugging edits over the lists of faults and client groups.
fn list_edits(spec: &Value) -> Vec<Edit> {
    let mut out = Vec::new();
    for name in ["faults", "clients"] {
        let n = spec[name].as_array().map_or(0, Vec::len);
        if n == 0 {
            continue;
        }
        let at = format!("/{name}");
        out.push(Edit::Drain(at.clone(), 0, n));
        let mut chunk = n / 2;
        while chunk >= 1 {
            // From the end, so an accepted drop leaves the earlier chunks where they were.
            let mut hi = n;
            while hi >= chunk && hi > 0 {
                out.push(Edit::Drain(at.clone(), hi - chunk, hi));
                hi -= chunk;
            }
            chunk /= 2;
        }
    }
    out
}

/// Simpler values for the number `v`, smallest first.
fn simpler(v: &serde_json::Number) -> Vec<Value> {
    if let Some(u) = v.as_u64() {
        let mut lead = u;
        let mut scale = 1;
        while lead >= 10 {
            lead /= 10;
            scale *= 10;
        }
        let mut c = vec![0, 1, lead * scale, u / 2];
        c.retain(|&x| x < u);
        c.sort_unstable();
        c.dedup();
        c.into_iter().map(Value::from).collect()
    } else if let Some(i) = v.as_i64() {
        vec![Value::from(0), Value::from(i / 2)]
    } else if let Some(f) = v.as_f64() {
        if f < 1.0 {
            vec![Value::from(1.0)]
        } else {
            vec![]
        }
    } else {
        vec![]
    }
}

/// Field removals, number and switch simplifications, over the whole tree.
fn leaf_edits(v: &Value, at: &str, removals: &mut Vec<Edit>, leaves: &mut Vec<Edit>) {
    match v {
        Value::Object(map) => {
            for (k, child) in map {
                if KEEP.contains(&k.as_str()) {
                    continue;
                }
                let here = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                removals.push(Edit::Remove(here.clone()));
                leaf_edits(child, &here, removals, leaves);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                leaf_edits(child, &format!("{at}/{i}"), removals, leaves);
            }
        }
        Value::Number(n) => {
            for s in simpler(n) {
                leaves.push(Edit::Set(at.to_owned(), s));
            }
        }
        Value::Bool(true) => leaves.push(Edit::Set(at.to_owned(), Value::Bool(false))),
        _ => {}
    }
}

fn edits(spec: &Value) -> Vec<Edit> {
    let mut out = list_edits(spec);
    let (mut removals, mut leaves) = (Vec::new(), Vec::new());
    leaf_edits(spec, "", &mut removals, &mut leaves);
    out.extend(removals);
    out.extend(leaves);
    out
}

fn size_of(spec: &Value, requests: u64, events: u64) -> Size {
    let len = |k: &str| spec[k].as_array().map_or(0, |a| a.len() as u64);
    Size {
        requests,
        events,
        faults: len("faults"),
        clients: len("clients"),
        gateways: spec["gateways"].as_u64().unwrap_or(1),
        duration_ms: spec["duration_ms"].as_u64().unwrap_or(0),
    }
}

/// Shrinks `spec`, which fails with seed `seed` as `(class, checker)`, in at most `runs` runs.
pub fn shrink(spec: &Value, seed: u64, class: Class, checker: &str, runs: u32) -> Shrunk {
    // One run per candidate, and so per unit of the budget; two when the failure is a
    // difference between runs.
    let rerun = if class == Class::Determinism {
        Rerun::Always
    } else {
        Rerun::Never
    };
    let mut made = 0u32;
    // The run's size when `cand` is valid and still fails the same way.
    let fails = |cand: &Value, made: &mut u32| -> Option<(u64, u64, String)> {
        Scenario::parse(Path::new("<shrink>"), &cand.to_string()).ok()?;
        *made += 1;
        let c = check(cand, seed, rerun, super::verdict::LINEARIZABILITY_BUDGET);
        let f = c
            .failures
            .into_iter()
            .find(|f| f.class == class && f.checker == checker)?;
        Some((c.requests, c.events, f.detail))
    };
    let first = fails(spec, &mut made);
    let (requests, events, mut detail) = first.clone().unwrap_or_default();
    let before = size_of(spec, requests, events);
    let mut cur = spec.clone();
    let mut after = before;
    let mut exhausted = false;
    if first.is_some() {
        'rounds: loop {
            let mut kept = false;
            for edit in edits(&cur) {
                if made >= runs {
                    exhausted = true;
                    break 'rounds;
                }
                let Some(cand) = apply(&cur, &edit) else {
                    continue;
                };
                if let Some((r, e, d)) = fails(&cand, &mut made) {
                    after = size_of(&cand, r, e);
                    detail = d;
                    cur = cand;
                    kept = true;
                }
            }
            if !kept {
                break;
            }
        }
    }
    Shrunk {
        spec: cur,
        before,
        after,
        runs: made,
        exhausted,
        detail,
    }
}

/// A shrink's record in a campaign's report.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct ShrinkSummary {
    /// The regression file written.
    pub file: String,
    /// The input's size.
    pub before: Size,
    /// The result's size.
    pub after: Size,
    /// Runs made.
    pub runs: u32,
    /// Whether the budget ran out first.
    pub exhausted: bool,
    /// The command that replays it.
    pub replay: String,
}

/// The regression scenario a shrunk failure becomes, with a one-line description of what
/// it pins: a safety or liveness failure is judged by the explorer's checkers, which must find
/// `signature` again.
pub fn regression(shrunk: &Shrunk, signature: &str, sut: &str, seed: u64) -> Value {
    let mut spec = shrunk.spec.clone();
    let mut line = format!(
        "pins {signature} on `{sut}` (shrunk from explore seed {seed}): {}",
        shrunk.detail.replace('\n', " ")
    );
    if line.len() > 300 {
        let mut cut = 297;
        while !line.is_char_boundary(cut) {
            cut -= 1;
        }
        line.truncate(cut);
        line.push_str("...");
    }
    spec["description"] = line.into();
    spec["seeds"] = serde_json::json!([seed]);
    if !spec["expect"].is_object() {
        spec["expect"] = serde_json::json!({});
    }
    // A panic or a nondeterministic run is not a verdict a checker gives: such a regression
    // is an ordinary scenario, which fails (panics, or differs on its rerun) until fixed.
    if signature.starts_with("safety/") || signature.starts_with("liveness/") {
        spec["expect"]["explorer"] = signature.into();
    }
    spec
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_shrink_towards_simple_values() {
        let n = |v: Value| simpler(v.as_number().expect("a number"));
        assert_eq!(
            n(json!(1234)),
            vec![json!(0), json!(1), json!(617), json!(1000)]
        );
        assert_eq!(n(json!(1)), vec![json!(0)]);
        assert_eq!(n(json!(-40)), vec![json!(0), json!(-20)]);
        assert_eq!(n(json!(0.3)), vec![json!(1.0)]);
    }

    #[test]
    fn edits_apply_where_they_point_and_nowhere_else() {
        let spec = json!({ "faults": [1, 2, 3, 4], "a": { "b/c": 5 } });
        let drop = apply(&spec, &Edit::Drain("/faults".into(), 2, 4)).expect("applies");
        assert_eq!(drop["faults"], json!([1, 2]));
        let gone = apply(&spec, &Edit::Remove("/a/b~1c".into())).expect("applies");
        assert_eq!(gone["a"], json!({}));
        assert!(apply(&spec, &Edit::Drain("/faults".into(), 3, 9)).is_none());
        assert!(apply(&spec, &Edit::Set("/missing".into(), json!(1))).is_none());
        // Lists first, halves before singles, from the end.
        let e = list_edits(&spec);
        assert!(matches!(e[0], Edit::Drain(_, 0, 4)));
        assert!(matches!(e[1], Edit::Drain(_, 2, 4)));
    }
}
