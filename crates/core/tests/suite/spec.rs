//! Policy specs: every algorithm is built from its spec and writes it back; a spec with a
//! field missing, out of range or of another algorithm is refused at that field.

use ratelab_core::{AlgorithmName, Nanos, Policy, PolicySpec, TokenBucket};

fn spec(algorithm: AlgorithmName, fields: &[(&str, u64)]) -> PolicySpec {
    let mut s = PolicySpec::empty(algorithm);
    for &(f, v) in fields {
        let slot = match f {
            "capacity" => &mut s.capacity,
            "refill_per_sec" => &mut s.refill_per_sec,
            "refill" => &mut s.refill,
            "refill_period_ms" => &mut s.refill_period_ms,
            "limit" => &mut s.limit,
            "window_ms" => &mut s.window_ms,
            other => panic!("no field {other}"),
        };
        *slot = Some(v);
    }
    s
}

#[test]
fn every_algorithm_is_named_once_and_builds_from_its_shape() {
    assert_eq!(AlgorithmName::ALL.len(), AlgorithmName::NAMES.len());
    for &a in AlgorithmName::ALL {
        assert_eq!(AlgorithmName::parse(a.name()), Some(a));
        assert_eq!(AlgorithmName::parse(&a.name().replace('_', "-")), Some(a));
        let shaped = a.shaped(10, 5);
        let policy = shaped.build().unwrap_or_else(|e| panic!("{a}: {e}"));
        assert_eq!(policy.name(), a);
        assert_eq!(policy.spec(), shaped, "{a} writes back what built it");
        use ratelab_core::Algorithm as _;
        let q = policy.quota();
        assert_eq!(q.limit, 10, "{a}");
        assert_eq!(q.window, Nanos::from_secs(2), "{a}: 10 at 5 a second");
    }
    assert_eq!(AlgorithmName::parse("leaky_bucket_x"), None);
}

#[test]
fn a_bucket_slower_than_one_a_second_is_written_per_period() {
    let b = TokenBucket::new(100, 100, Nanos::from_secs(3_600)).unwrap();
    let s = Policy::TokenBucket(b).spec();
    assert_eq!((s.refill, s.refill_period_ms), (Some(100), Some(3_600_000)));
    assert_eq!(s.refill_per_sec, None);
    assert_eq!(s.build(), Ok(Policy::TokenBucket(b)));
}

#[test]
fn a_bad_spec_is_refused_at_its_field() {
    use AlgorithmName::*;
    let cases: &[(PolicySpec, Option<&str>, &str)] = &[
        (
            spec(TokenBucket, &[("refill_per_sec", 1)]),
            None,
            "a token bucket needs `capacity`",
        ),
        (
            spec(TokenBucket, &[("capacity", 0), ("refill_per_sec", 1)]),
            Some("capacity"),
            "0: expected 1 to 1000000000000",
        ),
        (
            spec(
                TokenBucket,
                &[("capacity", 5), ("refill_per_sec", 1), ("limit", 3)],
            ),
            Some("limit"),
            "`limit` does not apply to a token bucket (it takes: capacity, refill_per_sec, refill, refill_period_ms)",
        ),
        (
            spec(TokenBucket, &[("capacity", 5)]),
            None,
            "a token bucket needs `refill_per_sec`, or `refill` and `refill_period_ms`",
        ),
        (
            spec(
                TokenBucket,
                &[("capacity", 5), ("refill_per_sec", 1), ("refill", 1)],
            ),
            Some("refill_per_sec"),
            "give `refill_per_sec`, or `refill` and `refill_period_ms`, not both",
        ),
        (
            spec(TokenBucket, &[("capacity", 5), ("refill", 1)]),
            None,
            "`refill` needs `refill_period_ms`",
        ),
        (
            spec(FixedWindow, &[("limit", 5)]),
            None,
            "a fixed window needs `window_ms`",
        ),
        (
            spec(SlidingWindow, &[("limit", 5), ("window_ms", 604_800_001)]),
            Some("window_ms"),
            "604800001: expected 1 to 604800000",
        ),
        (
            spec(
                FixedWindow,
                &[("capacity", 5), ("limit", 5), ("window_ms", 10)],
            ),
            Some("capacity"),
            "`capacity` does not apply to a fixed window (it takes: limit, window_ms)",
        ),
    ];
    for (s, field, message) in cases {
        let e = s.build().expect_err(message);
        assert_eq!((e.field, e.message.as_str()), (*field, *message), "{s:?}");
    }
}

#[test]
fn a_spec_accepts_what_the_algorithms_accept() {
    assert_eq!(
        ratelab_core::spec::COUNT_MAX,
        ratelab_core::token_bucket::MAX_CAPACITY
    );
}
