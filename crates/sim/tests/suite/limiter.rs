//! A user's limiter in the cluster (`run_with`) and the typed scenario builder.

use ratelab_core::{Algorithm, Nanos, TokenBucket};
use ratelab_sim::scenario::{Expect, PlantedBug, Scenario};
use ratelab_sim::{Claim, Limiter, RunOptions, run, run_with};
use ratelab_sim::{Client, Fault};
use std::path::Path;

/// Two gateways on one key, an edge limit, and lost replies: every layer and a fault.
fn busy() -> ratelab_sim::ScenarioBuilder {
    Scenario::builder("a token bucket, plugged in and builtin")
        .seeds([1, 2])
        .duration_ms(600)
        .gateways(2)
        .token_bucket(5, 20)
        .client(Client::key("user:ana").count(3).poisson(80))
        .fault(Fault::lost_replies(200, 300).rate(0.5))
        .edit(|s| {
            s.gateway.edge = Some(ratelab_sim::scenario::EdgeSpec {
                capacity: ratelab_sim::scenario::Bounded::new(20).unwrap(),
                refill_per_sec: ratelab_sim::scenario::Bounded::new(100).unwrap(),
            })
        })
}

#[test]
fn a_builtin_bucket_plugged_in_gives_the_builtin_trace_hash() {
    let bucket = TokenBucket::per_second(5, 20).expect("policy");
    let limiter = Limiter::claiming(bucket, Claim::TokenBucket(bucket));
    for path in ["naive", "atomic"] {
        let b = busy();
        let sc = if path == "naive" { b.naive() } else { b }
            .build()
            .expect("valid");
        for seed in [1, 2] {
            let (builtin, _) = run(&sc, seed, RunOptions::default());
            let (plugged, _) = run_with(&sc, seed, RunOptions::default(), &limiter).expect("runs");
            assert_eq!(plugged.trace_hash, builtin.trace_hash, "{path} seed {seed}");
            assert_eq!(
                (
                    plugged.figure("allowed"),
                    plugged.figure("denied"),
                    plugged.figure("errors"),
                    plugged.figure("max_excess")
                ),
                (
                    builtin.figure("allowed"),
                    builtin.figure("denied"),
                    builtin.figure("errors"),
                    builtin.figure("max_excess")
                )
            );
            assert!(builtin.checkers.is_none());
            let found = plugged.checkers.expect("run_with judges");
            // The atomic bucket holds under every checker, linearizability included; the naive
            // path's lost updates are found.
            assert_eq!(found.is_empty(), path == "atomic", "{path}: {found:?}");
        }
    }
}

#[test]
fn a_canary_scenario_passes_when_the_checkers_find_its_failure() {
    let bucket = TokenBucket::per_second(5, 20).expect("policy");
    let expect = Expect {
        explorer: Some("safety/linearizable".into()),
        ..Expect::default()
    };
    let sc = busy().naive().expect(expect).build().expect("valid");
    let limiter = Limiter::claiming(bucket, Claim::TokenBucket(bucket));
    let (r, _) = run_with(&sc, 1, RunOptions::default(), &limiter).expect("runs");
    assert!(r.passed, "{:?}", r.failures);
    // Claimed only as a window, there is no sequential specification to break.
    let (r, _) = run_with(&sc, 1, RunOptions::default(), &Limiter::new(bucket)).expect("runs");
    assert!(!r.passed && r.failures[0].contains("expected safety/linearizable"));
}

#[test]
fn a_planted_bug_of_the_builtin_code_is_refused_for_a_user_limiter() {
    let sc = busy()
        .planted_bug(PlantedBug::ShortTtl)
        .build()
        .expect("valid");
    let bucket = TokenBucket::per_second(5, 20).expect("policy");
    let e = run_with(&sc, 1, RunOptions::default(), &Limiter::new(bucket)).expect_err("refused");
    assert_eq!(e.path, "planted_bug");
}

#[test]
fn a_built_scenario_is_the_file_it_describes() {
    let text = r#"{ "description": "d", "seeds": [1], "duration_ms": 1000, "gateways": 2,
        "policy": { "algorithm": "token_bucket", "capacity": 10, "refill_per_sec": 20 },
        "store": { "path": "naive", "timeout_ms": 40 },
        "network": { "latency": { "min_us": 300, "max_us": 300 } },
        "clients": [ { "count": 2, "keys": { "prefix": "user", "count": 5 },
                       "arrival": { "pattern": "poisson", "rate_per_sec": 90 } } ],
        "faults": [ { "kind": "store_crash", "at_ms": 500, "restart_after_ms": 100 } ] }"#;
    let file = Scenario::parse(Path::new("x.json"), text).expect("valid file");
    let built = Scenario::builder("d")
        .file("x.json")
        .duration_ms(1000)
        .gateways(2)
        .token_bucket(10, 20)
        .naive()
        .store_timeout_ms(40)
        .latency_us(300, 300)
        .client(Client::keys("user", 5).count(2).poisson(90))
        .fault(Fault::store_crash(500, 100))
        .build()
        .expect("valid builder");
    let json = |s: &Scenario| serde_json::to_string(s.spec()).expect("serializes");
    assert_eq!(json(&built), json(&file));
    assert_eq!(built.name(), "x");
}

#[test]
fn a_builder_value_out_of_range_is_an_error_at_its_path() {
    let e = Scenario::builder("d")
        .duration_ms(1000)
        .token_bucket(10, 20)
        .client(Client::key("k").poisson(0))
        .build()
        .expect_err("rate 0");
    assert_eq!(e.path, "clients[0].arrival.rate_per_sec");
    let e = Scenario::builder("d")
        .duration_ms(1000)
        .build()
        .expect_err("no policy");
    assert_eq!(e.path, "policy");
    // Rules across fields are the file's: a client is needed.
    let e = Scenario::builder("d")
        .duration_ms(1000)
        .token_bucket(1, 1)
        .build()
        .expect_err("no clients");
    assert!(e.path.starts_with("clients"), "{e}");
}

#[test]
fn a_claimed_window_is_written_as_a_fixed_window_policy() {
    let bucket = TokenBucket::per_second(4, 2).expect("policy");
    let sc = Scenario::builder("d")
        .duration_ms(100)
        .policy_of(&Limiter::new(bucket))
        .client(Client::key("k").constant(10))
        .build()
        .expect("valid");
    // The bucket's quota: 4 per the 2 s it takes to fill from empty.
    assert_eq!(sc.policy().quota().limit, 4);
    assert_eq!(sc.policy().quota().window, Nanos::from_secs(2));
}

/// A fixed window admits up to twice its limit across a boundary: within what a window claim
/// allows, and caught by the exact claim a sliding log makes.
#[test]
fn the_exact_window_claim_catches_a_boundary_spike_the_window_claim_allows() {
    let fw = ratelab_core::FixedWindow::new(5, Nanos::from_millis(100)).expect("policy");
    let sc = |verdict: &str| {
        Scenario::builder("a fixed window under an exact claim")
            .seeds([1, 2, 3])
            .duration_ms(1_000)
            .gateways(1)
            .fixed_window(5, 100)
            .client(Client::key("user:ana").count(3).poisson(100))
            .expect_explorer(verdict)
            .build()
            .expect("valid")
    };
    let window = Limiter::new(fw);
    let exact = Limiter::claiming(fw, Claim::AnyWindow(fw.quota()));
    for seed in [1, 2, 3] {
        let (r, _) = run_with(&sc("pass"), seed, RunOptions::default(), &window).expect("runs");
        assert!(r.passed, "seed {seed}: {:?}", r.failures);
        assert!(
            r.figure("max_in_window") > 5,
            "seed {seed}: no boundary spike drawn"
        );
        let (r, _) =
            run_with(&sc("safety/window"), seed, RunOptions::default(), &exact).expect("runs");
        assert!(r.passed, "seed {seed}: {:?}", r.failures);
        let found = r.checkers.expect("judged");
        assert!(
            found.iter().any(|f| f.detail.contains("against at most 5")),
            "seed {seed}: {found:?}"
        );
    }
}
