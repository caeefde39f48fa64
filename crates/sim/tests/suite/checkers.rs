//! The registry of checkers: every figure a bound, bounds read and written back, located
//! errors for bounds no checker reports or a scenario cannot measure.

use ratelab_sim::checkers::{CHECKERS, figures};
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
    assert_eq!(checkers.len(), CHECKERS.len());
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
    assert!(r.allowed > 3, "{r:?}");
    assert!(
        r.failures
            .iter()
            .any(|f| f == &format!("allowed = {}, expected at most 3", r.allowed)),
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
