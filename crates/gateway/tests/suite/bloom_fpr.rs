//! The guard's false-positive rate, measured on keys that were never inserted, is within 10%
//! of the target it was sized for, at several sizes.

use ratelab_testkit::docs;

use ratelab_gateway::bloom::KeyGuard;

#[test]
fn measured_false_positive_rate_is_within_ten_percent_of_the_target() {
    let mut table = format!(
        "{:>8} {:>8} {:>10} {:>3} {:>9} {:>10} {:>8}\n",
        "n", "target", "bits", "k", "probes", "measured", "error"
    );
    for (n, p) in [
        (10_000u64, 0.05),
        (10_000, 0.01),
        (100_000, 0.01),
        (10_000, 0.001),
    ] {
        let keys: Vec<String> = (0..n).map(|i| format!("valid:{i}")).collect();
        let guard = KeyGuard::new::<str>(&keys, n, p, 0x5eed).unwrap();
        // Enough probes for about 2000 expected false positives: a 10% band is ~4.5 σ.
        let probes = (2_000.0 / p) as u64;
        let fp = (0..probes)
            .filter(|j| guard.may_contain(&format!("probe:{j}")))
            .count() as f64;
        let measured = fp / probes as f64;
        let error = (measured - p) / p;
        let s = guard.sizing();
        table.push_str(&format!(
            "{n:>8} {p:>8} {:>10} {:>3} {probes:>9} {measured:>10.5} {:>7.1}%\n",
            s.bits,
            s.hashes,
            error * 100.0
        ));
        assert!(error.abs() <= 0.10, "n = {n}, p = {p}: measured {measured}");
    }
    print!("{table}");
    docs::check_block(
        "docs/GATEWAY.md",
        "bloom-fpr",
        &format!("```text\n{table}```\n"),
    );
}

#[test]
fn the_same_seed_builds_the_same_filter() {
    let keys: Vec<String> = (0..1000).map(|i| format!("user:{i}")).collect();
    let a = KeyGuard::new::<str>(&keys, 1000, 0.01, 1).unwrap();
    let b = KeyGuard::new::<str>(&keys, 1000, 0.01, 1).unwrap();
    let hits = |g: &KeyGuard| {
        (0..20_000)
            .filter(|j| g.may_contain(&format!("bot:{j}")))
            .collect::<Vec<_>>()
    };
    assert_eq!(hits(&a), hits(&b));
}
