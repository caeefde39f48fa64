//! The simulator's time is physical time: requests leave when their arrival process says,
//! and a message takes the one-way latency the scenario declares, with no hidden floor.
//!
//! Each check recomputes its figure from the history's timestamps with its own arithmetic;
//! the arrival checks are also run on the same history coarsened to a 1 ms clock, the
//! simulator's resolution before its clock was dilated, and must reject it.

use ratelab_check::arrivals::{gaps, ks_critical, ks_exponential};
use ratelab_sim::{History, RunOptions, Scenario};
use std::path::Path;

fn scenario(json: serde_json::Value) -> Scenario {
    Scenario::parse(Path::new("<fidelity>"), &json.to_string()).expect("valid scenario")
}

fn run(sc: &Scenario) -> History {
    ratelab_sim::run(sc, 1, RunOptions::default()).1
}

/// One client's send times, in order.
fn send_times(h: &History) -> Vec<u64> {
    h.requests.iter().map(|r| r.sent_at.as_u64()).collect()
}

fn one_client(pattern: &str, rate: u64) -> Scenario {
    scenario(serde_json::json!({
        "description": "one client, one gateway: the arrival process alone",
        "seeds": 1,
        "duration_ms": 20_000,
        "gateways": 1,
        "policy": { "algorithm": "token_bucket", "capacity": 1000, "refill_per_sec": 1000 },
        "store": { "path": "atomic" },
        "clients": [ { "count": 1, "key": "k", "arrival": { "pattern": pattern, "rate_per_sec": rate } } ]
    }))
}

#[test]
fn poisson_gaps_are_exponential() {
    let rate = 313;
    let times = send_times(&run(&one_client("poisson", rate)));
    assert!(times.len() > 5_000, "{} sends", times.len());
    let mean = 1e9 / rate as f64;
    let g = gaps(&times);
    let d = ks_exponential(&g, mean);
    let crit = ks_critical(g.len());
    assert!(
        d < crit,
        "KS distance {d:.4} ≥ {crit:.4} over {} gaps",
        g.len()
    );

    // The same sends on a 1 ms clock (each held to the next millisecond, the late ones back
    // to back) are not exponential: the test can tell.
    let coarse: Vec<u64> = times
        .iter()
        .map(|t| t.div_ceil(1_000_000) * 1_000_000)
        .collect();
    let dc = ks_exponential(&gaps(&coarse), mean);
    assert!(
        dc > crit,
        "KS cannot tell a 1 ms clock: {dc:.4} ≤ {crit:.4}"
    );
}

#[test]
fn constant_gaps_are_the_period() {
    let rate = 313;
    let times = send_times(&run(&one_client("constant", rate)));
    assert!(times.len() > 5_000, "{} sends", times.len());
    let period = 1e9 / rate as f64;
    // Each arrival is rounded down to a whole nanosecond and may leave one least sleep late.
    let tolerance = 1.0 + ratelab_sim::dilation::SLEEP_FLOOR.as_nanos() as f64;
    let worst = gaps(&times)
        .iter()
        .map(|g| (g - period).abs())
        .fold(0.0, f64::max);
    assert!(worst <= tolerance, "a gap is {worst} ns off the period");
    let coarse: Vec<u64> = times
        .iter()
        .map(|t| t.div_ceil(1_000_000) * 1_000_000)
        .collect();
    let worst_coarse = gaps(&coarse)
        .iter()
        .map(|g| (g - period).abs())
        .fold(0.0, f64::max);
    assert!(
        worst_coarse > tolerance,
        "a 1 ms clock passes: {worst_coarse}"
    );
}

/// The naive path's race window — from the store serving a read to applying its write — is
/// the reply's one-way time plus the write's: twice the declared latency.
#[test]
fn a_100_us_link_gives_a_200_us_race_window() {
    let sc = scenario(serde_json::json!({
        "description": "naive path over a 100 µs link",
        "seeds": 1,
        "duration_ms": 2_000,
        "gateways": 4,
        "policy": { "algorithm": "token_bucket", "capacity": 10, "refill_per_sec": 20 },
        "store": { "path": "naive" },
        "network": { "latency": { "min_us": 100, "max_us": 100 } },
        "clients": [ { "count": 4, "key": "k", "arrival": { "pattern": "poisson", "rate_per_sec": 200 } } ]
    }));
    let (report, h) = ratelab_sim::run(&sc, 1, RunOptions::default());
    let windows: Vec<u64> = h
        .requests
        .iter()
        .filter_map(|r| Some(r.written_at?.as_u64() - r.read_at?.as_u64()))
        .collect();
    assert!(windows.len() > 40, "{} read-write pairs", windows.len());
    let floor = ratelab_sim::dilation::SLEEP_FLOOR.as_nanos() as u64;
    for w in &windows {
        assert!(
            (200_000..=200_000 + 4 * floor).contains(w),
            "a race window of {w} ns over a 100 µs link"
        );
    }
    let race_us = report.race_window_us.expect("the naive path measures it");
    assert!(race_us < 500.0, "race window {race_us} µs");
    // The first answer arrives a store round trip after the send, on the atomic path too.
    let atomic = {
        let mut spec = sc.spec().clone();
        spec.store.path = ratelab_sim::scenario::PathName::Atomic;
        Scenario::from_spec(Path::new("<fidelity>"), spec).expect("valid")
    };
    let h = run(&atomic);
    let (sent, answered) = h
        .requests
        .iter()
        .find_map(|r| Some((r.sent_at, r.answer.as_ref()?.0)))
        .expect("an answer");
    let took = answered.as_u64() - sent.as_u64();
    assert!(
        (200_000..=200_000 + 4 * floor).contains(&took),
        "one atomic round trip took {took} ns"
    );
}

/// A `times` client sends at exactly its listed times, in time order; a time outside its
/// sending window is refused with its place in the file.
#[test]
fn listed_times_are_sent_as_listed() {
    let mut times: Vec<u64> = (0..200).map(|k| (k * 7_919) % 1_000_000).collect();
    times.push(123);
    times.push(123);
    let sc = scenario(serde_json::json!({
        "description": "a replayed load",
        "seeds": 1,
        "duration_ms": 1_000,
        "gateways": 2,
        "policy": { "algorithm": "token_bucket", "capacity": 1000, "refill_per_sec": 1000 },
        "store": { "path": "atomic" },
        "clients": [ { "key": "k", "arrival": { "pattern": "times", "times_us": times } } ]
    }));
    let sent = send_times(&run(&sc));
    let mut want: Vec<u64> = times.iter().map(|t| t * 1_000).collect();
    want.sort_unstable();
    assert_eq!(sent.len(), want.len());
    let floor = ratelab_sim::dilation::SLEEP_FLOOR.as_nanos() as u64;
    for (got, want) in sent.iter().zip(&want) {
        assert!(
            (*want..=want + floor).contains(got),
            "sent at {got} ns, listed {want} ns"
        );
    }

    let bad = serde_json::json!({
        "description": "a time after the run",
        "seeds": 1,
        "duration_ms": 10,
        "gateways": 1,
        "policy": { "algorithm": "token_bucket", "capacity": 10, "refill_per_sec": 10 },
        "store": { "path": "atomic" },
        "clients": [ { "key": "k", "arrival": { "pattern": "times", "times_us": [5, 10_000] } } ]
    });
    let e = Scenario::parse(Path::new("bad.json"), &bad.to_string())
        .expect_err("a time outside the run")
        .to_string();
    assert!(
        e.contains("clients[0].arrival.times_us[1]") && e.contains("10000 µs is outside"),
        "{e}"
    );
}

#[test]
fn a_retrier_sends_a_denied_request_again_exactly_at_its_retry_after() {
    let sc = scenario(serde_json::json!({
        "description": "a bucket of 2 gaining 1 a second; a client draining it retries at Retry-After",
        "seeds": 1,
        "duration_ms": 5_000,
        "gateways": 1,
        "policy": { "algorithm": "token_bucket", "capacity": 2, "refill_per_sec": 1 },
        "store": { "path": "atomic" },
        "clients": [ {
            "key": "k",
            "arrival": { "pattern": "constant", "rate_per_sec": 50 },
            "stop_ms": 3_000,
            "retry_at_retry_after": true
        } ]
    }));
    let h = run(&sc);
    let denied: Vec<_> = h
        .requests
        .iter()
        .filter(|r| {
            matches!(
                r.answer,
                Some((_, ratelab_check::history::Answer::Denied { .. }))
            )
        })
        .collect();
    // Each second: a retry admitted, the next arrival denied (a retry sent at or after the
    // group's stop time is not sent).
    assert!(denied.len() >= 3, "{} denials", denied.len());
    let denied: Vec<_> = denied
        .into_iter()
        .filter(|d| d.answer.unwrap().0.as_u64() + 1_000_000_000 < 3_000_000_000)
        .collect();
    for d in &denied {
        let (answered, _) = d.answer.expect("answered");
        // Retry-After is whole seconds, rounded up: 1 s here.
        let due = answered.as_u64() + 1_000_000_000;
        let again = h
            .requests
            .iter()
            .find(|r| r.sent_at.as_u64() >= due)
            .unwrap_or_else(|| panic!("no request after {due} ns"));
        assert_eq!(
            again.sent_at.as_u64(),
            due,
            "the retry is sent exactly then"
        );
        assert_eq!((again.key.as_str(), again.cost), ("k", 1));
        assert!(
            matches!(
                again.answer,
                Some((_, ratelab_check::history::Answer::Allowed { .. }))
            ),
            "the retry finds the room Retry-After promised: {again:?}"
        );
    }
}

#[test]
fn ipv6_clients_send_from_their_own_prefix_or_share_one() {
    use std::net::IpAddr;
    let sc = scenario(serde_json::json!({
        "description": "three groups of two clients: IPv4, IPv6 each its own /64, IPv6 sharing a /64",
        "seeds": 1,
        "duration_ms": 100,
        "gateways": 1,
        "policy": { "algorithm": "token_bucket", "capacity": 100, "refill_per_sec": 100 },
        "store": { "path": "atomic" },
        "clients": [
            { "count": 2, "key": "a", "arrival": { "pattern": "burst", "at_ms": 0, "requests": 1 } },
            { "count": 2, "key": "b", "address": "ipv6", "arrival": { "pattern": "burst", "at_ms": 0, "requests": 1 } },
            { "count": 2, "key": "c", "address": "ipv6_shared_prefix", "arrival": { "pattern": "burst", "at_ms": 0, "requests": 1 } }
        ]
    }));
    let h = run(&sc);
    let peers = |key: &str| -> Vec<IpAddr> {
        h.requests
            .iter()
            .filter(|r| r.key == key)
            .map(|r| r.peer)
            .collect()
    };
    let net = |ip: &IpAddr| ratelab_check::envelope::network(*ip, 64);
    let (a, b, c) = (peers("a"), peers("b"), peers("c"));
    assert!(a.iter().all(IpAddr::is_ipv4) && a[0] != a[1], "{a:?}");
    assert!(
        b.iter().all(IpAddr::is_ipv6) && net(&b[0]) != net(&b[1]),
        "{b:?}"
    );
    assert!(c.iter().all(IpAddr::is_ipv6) && c[0] != c[1], "{c:?}");
    assert_eq!(net(&c[0]), net(&c[1]), "one /64: {c:?}");
}

#[test]
fn a_retrier_that_also_paces_itself_is_refused_at_its_field() {
    let text = serde_json::json!({
        "description": "both",
        "seeds": 1,
        "duration_ms": 100,
        "gateways": 1,
        "policy": { "algorithm": "token_bucket", "capacity": 2, "refill_per_sec": 1 },
        "store": { "path": "atomic" },
        "clients": [ {
            "key": "k",
            "arrival": { "pattern": "constant", "rate_per_sec": 50 },
            "retry_at_retry_after": true,
            "self_throttle": true
        } ]
    })
    .to_string();
    let e = Scenario::parse(Path::new("both.json"), &text).unwrap_err();
    assert_eq!(e.path, "clients[0].retry_at_retry_after", "{e}");
    assert!(e.message.contains("choose one"), "{e}");
}
