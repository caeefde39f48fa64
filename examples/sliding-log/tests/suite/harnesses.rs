//! The sliding log in all three harnesses: loom, shuttle, and the madsim cluster.
use ratelab_core::{Algorithm, Nanos};
use ratelab_example_sliding_log::SlidingLog;
use ratelab_sim::harness::{Race, loom, shuttle};
use ratelab_sim::{Claim, Limiter, run_seeds_with};
use ratelab_sim::{Client, Fault, Scenario, ScenarioBuilder};
use ratelab_store::Path::{Atomic, Naive};

const LOG: SlidingLog = SlidingLog {
    window: Nanos(100_000_000),
};

#[test]
fn loom_and_shuttle_find_the_naive_lost_update_and_none_on_the_atomic_path() {
    let explore = |path, n| loom::explore(&Race::last_unit(LOG, path, n), Default::default());
    let (naive, atomic) = (explore(Naive, 2), explore(Atomic, 3));
    assert!(naive.violations > 0 && atomic.held(), "{atomic:?}");
    let naive = || _ = shuttle::check_random(Race::last_unit(LOG, Naive, 4), 7, 1_000);
    assert!(shuttle::expect_violation(naive).contains("lost update"));
    let atomic = shuttle::check_pct(Race::last_unit(LOG, Atomic, 6), 7, 2_000, 3);
    assert_eq!(atomic, 2_000);
}

/// Three gateways on one key, seeds 1 to 3: 180 requests/s against 3 per 100 ms; every
/// checker's verdict must be `verdict`, and the most admitted in any window is returned.
fn cluster(sc: ScenarioBuilder, verdict: &str) -> Vec<u64> {
    // Claimed exactly: never more than 3 in any 100 ms.
    let log = Limiter::claiming(LOG, Claim::AnyWindow(LOG.quota()));
    let ana = Client::key("user:ana").count(3).poisson(60);
    let sc = sc.seeds(1..=3).duration_ms(1_000).gateways(3);
    let sc = sc.policy_of(&log).client(ana).expect_explorer(verdict);
    let reports = run_seeds_with(&sc.build().unwrap(), &log).expect("runs");
    for r in &reports {
        let replay = format!("seed {} (RATELAB_SEED={0} replays it)", r.seed);
        assert!(r.passed, "{replay}: {:?}", r.failures);
    }
    reports.iter().map(|r| r.figure("max_in_window")).collect()
}

#[test]
fn the_cluster_holds_it_to_3_per_window_and_catches_the_naive_path() {
    assert_eq!(cluster(Scenario::builder("calm"), "pass"), [3, 3, 3]);
    let crash = Scenario::builder("store crash").fault(Fault::store_crash(400, 100));
    assert!(cluster(crash, "pass").iter().all(|&m| m <= 3));
    let naive = cluster(Scenario::builder("naive").naive(), "safety/window");
    assert!(naive.iter().all(|&m| m > 3), "{naive:?}");
}
