//! The store node on the Redis scripts (`store.engine: "redis_scripts"`): `limits.lua` in an
//! embedded Lua decides every layer's requests. It computes what the core computes, so a run
//! on it is the same run as on the core, event for event (the same trace hash and report);
//! and a bug planted in the script shows in the checkers' verdict.

use ratelab_sim::{RunOptions, Scenario, ScenarioError, StoreEngine};
use std::path::Path;

/// Every family, at a rate above its limit, from three gateways with store latency and a
/// partition of one gateway: denials, windows turning, retries. Each with an edge limit, so
/// both layers run on the engine.
const POLICIES: [&str; 5] = [
    r#"{ "algorithm": "token_bucket", "capacity": 10, "refill_per_sec": 40 }"#,
    r#"{ "algorithm": "fixed_window", "limit": 12, "window_ms": 300 }"#,
    r#"{ "algorithm": "first_hit_window", "limit": 9, "window_ms": 250 }"#,
    r#"{ "algorithm": "sliding_window", "limit": 15, "window_ms": 400 }"#,
    r#"{ "algorithm": "stepped_bucket", "capacity": 8, "refill": 3, "refill_period_ms": 90 }"#,
];

fn scenario(policy: &str, engine: &str, extra: &str) -> Result<Scenario, ScenarioError> {
    let text = format!(
        r#"{{
  "description": "engine",
  "seeds": [1, 2],
  "duration_ms": 1500,
  "gateways": 3,
  "policy": {policy},
  "store": {{ "path": "atomic", "engine": "{engine}" }},
  "gateway": {{ "edge": {{ "capacity": 40, "refill_per_sec": 200 }} }},
  "clients": [
    {{ "count": 3, "key": "user:ana", "arrival": {{ "pattern": "poisson", "rate_per_sec": 90 }} }},
    {{ "count": 2, "key": "user:bo", "arrival": {{ "pattern": "constant", "rate_per_sec": 30 }} }}
  ],
  "faults": [
    {{ "kind": "store_latency", "at_ms": 300, "until_ms": 700, "extra_latency": {{ "min_us": 500, "max_us": 4000 }} }},
    {{ "kind": "partition", "gateways": [1], "at_ms": 900, "until_ms": 1100 }}
  ]{extra}
}}"#
    );
    Scenario::parse(Path::new("engine.json"), &text)
}

/// One seed's report (as JSON) and trace hash.
fn run(sc: &Scenario, seed: u64) -> (serde_json::Value, u64) {
    let (report, history) = ratelab_sim::run(sc, seed, RunOptions::default());
    let mut report = serde_json::to_value(&report).expect("a report serialises");
    // How long the run took on this machine is no part of it.
    report.as_object_mut().map(|r| r.remove("wall_ms"));
    (report, history.trace_hash())
}

#[test]
fn every_family_runs_the_same_on_the_script_as_on_the_core() {
    for policy in POLICIES {
        let core = scenario(policy, "core", "").expect("valid");
        let script = scenario(policy, "redis_scripts", "").expect("valid");
        assert_eq!(script.spec().store.engine, StoreEngine::RedisScripts);
        for seed in [1, 2] {
            let (want, want_hash) = run(&core, seed);
            let (got, got_hash) = run(&script, seed);
            assert_eq!(got, want, "{policy}, seed {seed}");
            assert_eq!(got_hash, want_hash, "{policy}, seed {seed}");
            let denied = want["denied"].as_u64().unwrap_or(0);
            assert!(
                denied > 0,
                "{policy}: the run denies, so both outcomes are compared"
            );
        }
    }
}

#[test]
fn a_bug_planted_in_the_script_is_caught_by_the_checkers() {
    // The fixed window forgets its count within the window it is in.
    let planted = ratelab_store::script::LIMITS_SCRIPT.replace(
        "if st[1] >= index then win, count = st[1], st[2] end",
        "if st[1] > index then win, count = st[1], st[2] end",
    );
    let sc = scenario(
        POLICIES[1],
        "redis_scripts",
        r#", "expect": { "max_excess_at_most": 0 }"#,
    )
    .expect("valid");
    let (report, _) = ratelab_sim::run(&sc, 1, RunOptions::default());
    assert!(report.passed, "the script holds: {:?}", report.failures);
    let (report, _) = ratelab_store::lua_script::with_script(&planted, || {
        ratelab_sim::run(&sc, 1, RunOptions::default())
    });
    assert!(!report.passed, "the planted bug shows");
    assert!(report.figure("max_excess") > 0, "{:?}", report.failures);
}

#[test]
fn the_engine_refuses_a_limit_beyond_the_script_and_a_bug_of_the_core() {
    // 2 × capacity × refill period = 2·10¹⁶ ns, beyond 2⁵³.
    let huge = r#"{ "algorithm": "token_bucket", "capacity": 10000000, "refill_per_sec": 1 }"#;
    let e = scenario(huge, "redis_scripts", "").unwrap_err();
    assert_eq!(e.path, "store.engine", "{e}");
    assert!(e.message.contains("beyond the Redis script's range"), "{e}");
    scenario(huge, "core", "").expect("the core runs it");
    let e = scenario(
        POLICIES[0],
        "redis_scripts",
        r#", "planted_bug": "refill_rounding""#,
    )
    .unwrap_err();
    assert_eq!(e.path, "store.engine", "{e}");
    assert!(e.message.contains("refill_rounding"), "{e}");
    let e = scenario(POLICIES[0], "lua", "").unwrap_err();
    assert!(e.message.contains("redis_scripts"), "{e}");
}
