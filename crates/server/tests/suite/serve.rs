//! The `ratelab-server` binary, started on a free port and driven by a real HTTP client.

use std::process::Command;

use crate::common;

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

/// The RateLimit item of `value` as (r, t), read with an RFC 9651 parser.
fn r_and_t(value: &str) -> (i64, i64) {
    let list: sfv::List = sfv::Parser::new(value).parse().expect("an sf-list");
    let Some(sfv::ListEntry::Item(item)) = list.first() else {
        panic!("no item in {value:?}");
    };
    let int = |k: &str| {
        let v = item.params.get(k).and_then(|v| v.as_integer());
        i64::from(v.unwrap_or_else(|| panic!("no integer {k} in {value:?}")))
    };
    (int("r"), int("t"))
}

#[test]
fn the_ratelimit_fields_follow_draft_11_by_default_and_draft_10_on_a_flag() {
    // B = 10, R = 2/s: after 4 requests at once, 6 remain, one more token comes in 0.5 s,
    // and the bucket is full again in 2 s.
    for (flags, t) in [(&[][..], 2), (&["--ratelimit-fields", "draft-10"][..], 1)] {
        let mut args = vec!["--capacity", "10", "--refill-per-sec", "2"];
        args.extend_from_slice(flags);
        let s = Server::start(&args);
        let draft = if t == 2 { "draft-11" } else { "draft-10" };
        assert!(
            s.banner.contains(&format!("RateLimit fields {draft}")),
            "{}",
            s.banner
        );
        let key = [("x-api-key", "ana")];
        let last = (0..4).map(|_| s.send("GET", "/", &key)).last().unwrap();
        assert_eq!(last.status, 200);
        let items: Vec<&str> = last.header("ratelimit").split(", ").collect();
        let per_key = items.iter().find(|i| i.starts_with("\"per-key\"")).unwrap();
        assert_eq!(r_and_t(per_key), (6, t), "{draft}: {per_key}");
        // Spend the rest: the denial's window ends when it would be admitted, and
        // Retry-After points no earlier, under either draft.
        let denied = (0..7).map(|_| s.send("GET", "/", &key)).last().unwrap();
        assert_eq!(denied.status, 429);
        let items: Vec<&str> = denied.header("ratelimit").split(", ").collect();
        let per_key = items.iter().find(|i| i.starts_with("\"per-key\"")).unwrap();
        let (r, t) = r_and_t(per_key);
        let retry: i64 = denied.header("retry-after").parse().unwrap();
        assert_eq!((r, t), (0, 1), "{draft}: {per_key}");
        assert!(retry >= t && retry == 1, "{draft}: Retry-After {retry}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
        .args(["--ratelimit-fields", "draft-12"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
