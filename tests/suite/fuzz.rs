//! Bad input gets a verdict or a clear error, never a panic: a bounded mutation campaign
//! over the shipped scenarios, in the test build (debug: overflow checks on). The long
//! campaign is a command: `cargo run -p ratelab -- fuzz --inputs 100000`.

use ratelab_lab::fuzz::{FuzzConfig, corpus, fuzz};
use std::path::Path;

#[test]
fn a_thousand_mutated_scenarios_get_a_verdict_or_an_error_never_a_panic() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("sim-scenarios");
    let files = corpus(&dir).expect("the shipped scenarios");
    assert!(files.len() >= 30, "{} scenarios", files.len());
    let cfg = FuzzConfig {
        inputs: 1_000,
        seed: 0x5eed,
        run_requests: 5_000,
        run_ms: 5_000,
    };
    let r = fuzz(&files, &cfg, &|_| {});
    println!(
        "{} inputs: {} refused, {} valid, {} run ({} passed, {} failed), {} panics",
        r.inputs, r.invalid, r.valid, r.ran, r.passed, r.failed, r.panic_count
    );
    assert_eq!(r.panic_count, 0, "{:#?}", r.panics);
    // The campaign reaches both paths: it is not all syntax errors, nor all valid.
    assert_eq!(r.inputs, 1_000);
    assert!(r.invalid >= 300 && r.valid >= 100 && r.ran >= 50, "{r:?}");
    assert!(r.passed > 0 && r.failed > 0, "{r:?}");
}
