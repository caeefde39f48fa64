//! A scenario's policy is core's `PolicySpec`: its errors are located at the field, either
//! spelling of a name reads, and an unknown name lists the known ones.

use ratelab_sim::{Scenario, ScenarioError};
use std::path::Path;

fn with_policy(policy: &str) -> Result<Scenario, ScenarioError> {
    let text = format!(
        r#"{{
  "description": "policy",
  "seeds": 1,
  "duration_ms": 1000,
  "policy": {policy},
  "store": {{ "path": "atomic" }},
  "clients": [ {{ "key": "k", "arrival": {{ "pattern": "constant", "rate_per_sec": 20 }} }} ]
}}"#
    );
    Scenario::parse(Path::new("policy.json"), &text)
}

#[test]
fn a_field_of_another_algorithm_is_an_error_at_that_field() {
    let e = with_policy(
        r#"{ "algorithm": "fixed_window", "limit": 5, "window_ms": 100, "capacity": 3 }"#,
    )
    .unwrap_err();
    assert_eq!(e.path, "policy.capacity", "{e}");
    assert_eq!((e.line, e.column), (5, 86), "{e}");
    assert_eq!(
        e.message,
        "`capacity` does not apply to a fixed window (it takes: limit, window_ms)"
    );
}

#[test]
fn a_missing_or_out_of_range_field_is_located() {
    let e = with_policy(r#"{ "algorithm": "token_bucket", "capacity": 3 }"#).unwrap_err();
    assert_eq!(e.path, "policy", "{e}");
    assert_eq!(
        e.message,
        "a token bucket needs `refill_per_sec`, or `refill` and `refill_period_ms`"
    );
    let e = with_policy(r#"{ "algorithm": "sliding_window", "limit": 0, "window_ms": 10 }"#)
        .unwrap_err();
    assert_eq!(e.path, "policy.limit", "{e}");
    assert_eq!(e.message, "0: expected 1 to 1000000000000");
}

#[test]
fn names_read_in_either_spelling_and_unknown_ones_list_the_known() {
    let a = with_policy(r#"{ "algorithm": "token-bucket", "capacity": 3, "refill_per_sec": 1 }"#)
        .expect("hyphens read");
    let b = with_policy(r#"{ "algorithm": "token_bucket", "capacity": 3, "refill_per_sec": 1 }"#)
        .expect("snake case reads");
    assert_eq!(a.policy(), b.policy());
    // A bucket slower than one a second, as the limits file writes it.
    with_policy(
        r#"{ "algorithm": "token_bucket", "capacity": 3, "refill": 1, "refill_period_ms": 60000 }"#,
    )
    .expect("refill per period reads");
    let e = with_policy(r#"{ "algorithm": "leaky", "limit": 3 }"#).unwrap_err();
    assert_eq!(e.path, "policy.algorithm", "{e}");
    assert!(
        e.message
            .starts_with("unknown variant `leaky`, expected one of `token_bucket`"),
        "{e}"
    );
}
