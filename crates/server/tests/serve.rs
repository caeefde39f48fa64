//! The `ratelab-server` binary, started on a free port and driven by a real HTTP client.

use std::process::Command;

mod common;

use common::{Server, series};

#[test]
fn the_server_binary_serves_and_limits() {
    let s = Server::start(&["--capacity", "2", "--refill-per-sec", "1"]);
    let statuses: Vec<u16> = (0..3).map(|_| s.get("/").0).collect();
    assert_eq!(statuses, [200, 200, 429]);
}

#[test]
fn every_known_counter_is_exported_at_zero_and_store_latency_is_a_histogram() {
    let s = Server::start(&[]);
    let fresh = s.metrics();
    for (name, labels) in [
        ("ratelab_requests_total", vec![r#"decision="denied""#]),
        ("ratelab_requests_total", vec![r#"decision="bypassed""#]),
        (
            "ratelab_breaker_transitions_total",
            vec![r#"to="open""#, r#"limit="per-ip""#],
        ),
        (
            "ratelab_fail_open_total",
            vec![r#"reason="timeout""#, r#"limit="per-key""#],
        ),
        (
            "ratelab_fail_open_total",
            vec![r#"reason="breaker_open""#, r#"limit="per-ip""#],
        ),
        ("ratelab_store_full_total", vec![r#"limit="per-key""#]),
        ("ratelab_kill_switch", vec![]),
    ] {
        assert_eq!(
            series(&fresh, name, &labels),
            Some(0.0),
            "{name} {labels:?} in:\n{fresh}"
        );
    }
    assert!(fresh.contains("# HELP ratelab_fail_open_total "), "{fresh}");
    assert_eq!(s.get("/").0, 200);
    let after = s.metrics();
    // A histogram: cumulative buckets from 25 µs up, the one call in the 1 s one.
    let bucket = |le: &str| {
        let labels = [r#"limit="per-key""#, le];
        series(&after, "ratelab_store_latency_seconds_bucket", &labels)
    };
    assert!(bucket(r#"le="0.000025""#).is_some(), "{after}");
    assert_eq!(bucket(r#"le="1""#), Some(1.0), "{after}");
    assert!(
        after.contains("# HELP ratelab_store_latency_seconds "),
        "{after}"
    );
    assert_eq!(
        series(&after, "ratelab_requests_total", &[r#"decision="allowed""#]),
        Some(1.0)
    );
}

#[test]
fn bad_flags_exit_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
        .args(["--capacity", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--capacity"), "{err}");
}
