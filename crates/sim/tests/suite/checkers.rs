//! The registry of checkers: every figure a bound, bounds read and written back, located
//! errors for bounds no checker reports or a scenario cannot measure.

use ratelab_core::Policy;
use ratelab_sim::checkers::{CHECKERS, Needs, figures};
use ratelab_sim::scenario::Expect;
use ratelab_sim::{Scenario, ScenarioError};
use std::collections::BTreeSet;
use std::path::Path;

fn with_expect(expect: &str) -> Result<Scenario, ScenarioError> {
    let text = format!(
        r#"{{
  "description": "expect",
  "seeds": 1,
  "duration_ms": 500,
  "policy": {{ "algorithm": "token_bucket", "capacity": 10, "refill_per_sec": 50 }},
  "store": {{ "path": "atomic" }},
  "clients": [ {{ "key": "k", "arrival": {{ "pattern": "constant", "rate_per_sec": 20 }} }} ],
  "expect": {expect}
}}"#
    );
    Scenario::parse(Path::new("expect.json"), &text)
}

#[test]
fn every_figure_is_named_once_and_bounds_both_ways() {
    let names: Vec<&str> = figures().map(|f| f.name).collect();
    let unique: BTreeSet<&str> = names.iter().copied().collect();
    assert_eq!(names.len(), unique.len(), "{names:?}");
    let checkers: BTreeSet<&str> = CHECKERS.iter().map(|c| c.name()).collect();
    assert_eq!(checkers.len(), CHECKERS.iter().count());
    for name in names {
        let mut e = Expect::default();
        assert!(e.set(&format!("{name}_at_most"), 3).is_some(), "{name}");
        assert!(e.set(&format!("{name}_at_least"), 1).is_some(), "{name}");
        let json = serde_json::to_string(&e).unwrap();
        let back: Expect = serde_json::from_str(&json).unwrap();
        assert_eq!(back, e, "{json}");
        assert_eq!(back.bound(name).at_most, Some(3));
        assert_eq!(back.bound(name).at_least, Some(1));
    }
}

#[test]
fn a_bound_no_checker_reports_is_an_error_naming_the_figures() {
    let e = with_expect(r#"{ "max_excess_at_most": 0, "excess_at_most": 0 }"#).unwrap_err();
    assert!(
        e.message.starts_with("unknown field `excess_at_most`"),
        "{e}"
    );
    for f in figures() {
        assert!(e.message.contains(f.name), "{e}");
    }
    assert_eq!(e.line, 8, "{e}");
}

#[test]
fn a_bound_the_scenario_cannot_measure_is_located() {
    let e = with_expect(r#"{ "edge_denied_at_least": 1 }"#).unwrap_err();
    assert_eq!(e.path, "expect.edge_denied_at_least", "{e}");
    assert_eq!(e.message, "this bound needs a `gateway.edge` limit");
    let e = with_expect(r#"{ "job_runs_at_least": 1 }"#).unwrap_err();
    assert_eq!(e.message, "this bound needs a `cleanup_job`");
}

#[test]
fn bounds_are_held_and_a_broken_one_is_stated_with_its_numbers() {
    let sc = with_expect(r#"{ "allowed_at_most": 3, "denied_at_least": 0 }"#).unwrap();
    let (r, _) = ratelab_sim::run(&sc, 1, Default::default());
    assert!(r.figure("allowed") > 3, "{r:?}");
    assert!(
        r.failures
            .iter()
            .any(|f| f == &format!("allowed = {}, expected at most 3", r.figure("allowed"))),
        "{:?}",
        r.failures
    );
    let sc = with_expect(r#"{ "allowed_at_least": 1, "max_excess_at_most": 0 }"#).unwrap();
    assert!(ratelab_sim::run(&sc, 1, Default::default()).0.passed);
}

#[test]
fn a_figure_held_to_zero_takes_only_a_lower_bound() {
    let e = with_expect(r#"{ "cached_unjustified_at_most": 3 }"#).unwrap_err();
    assert_eq!(e.path, "expect.cached_unjustified_at_most", "{e}");
    assert!(e.message.contains("held to 0 on every run"), "{e}");
}

#[test]
fn over_denial_needs_a_fixed_window() {
    let e = with_expect(r#"{ "over_denied_at_most": 0 }"#).unwrap_err();
    assert_eq!(e.message, "this bound needs a `fixed_window` policy", "{e}");
}

#[test]
fn a_lower_bound_on_a_figure_the_run_does_not_measure_fails() {
    // Nothing fails open in a run without faults: its latency is not measured.
    let sc = with_expect(r#"{ "fail_open_latency_ms_at_least": 1 }"#).unwrap();
    let (r, _) = ratelab_sim::run(&sc, 1, Default::default());
    assert!(
        r.failures
            .contains(&"fail_open_latency_ms not measured on this run, expected at least 1".into()),
        "{:?}",
        r.failures
    );
}

#[test]
fn a_bound_written_twice_is_an_error() {
    let e = with_expect(r#"{ "max_excess_at_most": 0, "max_excess_at_most": 5 }"#).unwrap_err();
    assert_eq!(e.message, "duplicate field `max_excess_at_most`", "{e}");
    assert!(e.path.starts_with("expect"), "{e}");
}

/// Each figure a run reports is measured by the checker that declares it, exactly where the
/// scenario has what it needs, and is no field of the report's own (in JSON the figures sit
/// beside the report's fields, so a name both used would be written twice).
#[test]
fn a_run_reports_exactly_the_figures_its_checkers_measure() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Measured only on some runs of what they need: a fail-open answer, the atomic path on
    // the store clock, a guard or a denial cache.
    let conditional = ["fail_open_latency_ms", "over_denied", "store_calls_saved"];
    for file in [
        "sim-scenarios/edge/naive-edge-leaks.json",
        "sim-scenarios/fencing/stale-leader-fenced.json",
        "sim-scenarios/fixed-window-boundary-burst.json",
        "sim-scenarios/gateway/fail-open-store-errors.json",
    ] {
        let sc = Scenario::load(&root.join(file)).unwrap_or_else(|e| panic!("{e}"));
        let (mut r, _) = ratelab_sim::run(&sc, 1, Default::default());
        for name in r.figures.keys() {
            assert!(CHECKERS.figure(name).is_some(), "{file}: {name}");
        }
        for f in figures() {
            let has = match f.needs {
                Needs::Nothing => true,
                Needs::Edge => sc.spec().gateway.edge.is_some(),
                Needs::Job => sc.spec().cleanup_job.is_some(),
                Needs::FixedWindow => matches!(sc.policy(), Policy::FixedWindow(_)),
            };
            if !conditional.contains(&f.name) {
                assert_eq!(r.figures.contains_key(f.name), has, "{file}: {}", f.name);
            }
        }
        r.figures.clear();
        let own = serde_json::to_value(&r).unwrap();
        for f in figures() {
            assert!(own.get(f.name).is_none(), "{}: a report field", f.name);
        }
    }
}
