//! Deterministic examples: the fixed-window boundary spike, policy validation, time going
//! backwards, and header text.

use ratelab_core::headers::{FieldsDraft, PolicyName, render};
use ratelab_core::{Algorithm, FixedWindow, Nanos, SlidingWindow, TokenBucket};

/// Max admitted in any interval of length `w` (inclusive start, exclusive end).
fn max_in_any_window(admitted: &[u64], w: u64) -> usize {
    (0..admitted.len())
        .map(|i| {
            admitted[i..]
                .iter()
                .take_while(|&&t| t < admitted[i] + w)
                .count()
        })
        .max()
        .unwrap_or(0)
}

fn admitted_times<A: Algorithm>(alg: &A, arrivals: &[u64]) -> Vec<u64> {
    let mut state = None;
    let mut out = Vec::new();
    for &t in arrivals {
        let (s, d) = alg.transition(state, Nanos(t), 1).unwrap();
        state = Some(s);
        if d.allowed {
            out.push(t);
        }
    }
    out
}

/// 100 requests in the last 100 ms before a 60 s window resets and 100 in the first 100 ms
/// after: the fixed window admits all 200 within 200 ms; the token bucket (B = 100,
/// R = 100/60 s) and the sliding window admit about 100.
#[test]
fn fixed_window_admits_twice_its_limit_across_a_boundary() {
    let w = Nanos::from_secs(60).as_u64();
    let ms = 1_000_000;
    let mut arrivals: Vec<u64> = (0..100).map(|i| 2 * w - 100 * ms + i * ms).collect();
    arrivals.extend((0..100).map(|i| 2 * w + i * ms));

    let fixed = admitted_times(&FixedWindow::new(100, Nanos(w)).unwrap(), &arrivals);
    let bucket = admitted_times(&TokenBucket::new(100, 100, Nanos(w)).unwrap(), &arrivals);
    let sliding = admitted_times(&SlidingWindow::new(100, Nanos(w)).unwrap(), &arrivals);

    assert_eq!(max_in_any_window(&fixed, w), 200, "fixed window spike");
    // The bucket refills 100 tokens per 60 s: over the 200 ms burst that is 1/3 of a token.
    assert_eq!(max_in_any_window(&bucket, w), 100, "token bucket");
    // The sliding counter releases the decayed share of the previous window: 100·0.1/60 ≈ 0.17,
    // rounded by its ceiling to nothing extra.
    assert_eq!(max_in_any_window(&sliding, w), 100, "sliding window");
}

#[test]
fn invalid_policies_are_typed_errors() {
    let e = TokenBucket::per_second(0, 1).unwrap_err();
    assert_eq!(e.parameter, "capacity");
    assert_eq!(
        e.to_string(),
        "invalid capacity: 0 (expected between 1 and 1000000000000)"
    );
    assert_eq!(
        TokenBucket::per_second(1, 0).unwrap_err().parameter,
        "refill_amount"
    );
    assert_eq!(
        TokenBucket::new(1, 1, Nanos(0)).unwrap_err().parameter,
        "refill_period_ns"
    );
    let e = TokenBucket::new(1_000_000_000_000, 1, Nanos::from_secs(3600)).unwrap_err();
    assert_eq!(e.parameter, "fill_time_ns");
    assert_eq!(
        FixedWindow::new(0, Nanos(1)).unwrap_err().parameter,
        "limit"
    );
    assert_eq!(
        SlidingWindow::new(1, Nanos(0)).unwrap_err().parameter,
        "window_ns"
    );
    assert!(PolicyName::new("").is_err());
    assert!(PolicyName::new("tab\there").is_err());
    assert!(PolicyName::new(&"x".repeat(65)).is_err());
}

#[test]
fn cost_above_capacity_is_an_error_not_a_denial() {
    let b = TokenBucket::per_second(5, 1).unwrap();
    let e = b.transition(None, Nanos(0), 6).unwrap_err();
    assert_eq!((e.cost, e.limit), (6, 5));
    assert!(b.transition(None, Nanos(0), 5).unwrap().1.allowed);
}

/// A clock that steps back sees fewer tokens, never more: a bucket drained at t = 10 s stays
/// drained when asked at t = 5 s, and is admitted again only at its real refill time.
#[test]
fn time_going_backwards_never_grants_more() {
    let b = TokenBucket::per_second(2, 1).unwrap();
    let t10 = Nanos::from_secs(10);
    let (s, _) = b.transition(None, t10, 2).unwrap();
    let (_, d) = b.transition(Some(s), Nanos::from_secs(5), 1).unwrap();
    assert!(!d.allowed);
    assert_eq!(
        d.retry_after,
        Some(Nanos::from_secs(6)),
        "admitted at 11 s, as from t = 10 s"
    );

    let fw = FixedWindow::new(1, Nanos::from_secs(10)).unwrap();
    let (s, _) = fw.transition(None, Nanos::from_secs(25), 1).unwrap();
    let (_, d) = fw.transition(Some(s), Nanos::from_secs(15), 1).unwrap();
    assert!(
        !d.allowed,
        "an earlier window does not reset the later window's count"
    );
    assert_eq!(d.retry_after, Some(Nanos::from_secs(15)));

    let sw = SlidingWindow::new(1, Nanos::from_secs(10)).unwrap();
    let (s, _) = sw.transition(None, Nanos::from_secs(25), 1).unwrap();
    let (_, d) = sw.transition(Some(s), Nanos::from_secs(3), 1).unwrap();
    assert!(!d.allowed);
}

#[test]
fn headers_render_draft_10_and_draft_11_fields() {
    let b = TokenBucket::per_second(10, 2).unwrap();
    let name = PolicyName::new("per-key").unwrap();
    let (s, d) = b.transition(None, Nanos(0), 10).unwrap();
    let f = render(&name, b.quota(), &d, FieldsDraft::Draft10);
    assert_eq!(f.policy, r#""per-key";q=10;w=5"#);
    assert_eq!(
        f.ratelimit, r#""per-key";r=0;t=1"#,
        "1 s until one more token"
    );
    assert_eq!(f.retry_after, None);
    let f11 = render(&name, b.quota(), &d, FieldsDraft::Draft11);
    assert_eq!(f11.policy, f.policy);
    assert_eq!(
        f11.ratelimit, r#""per-key";r=0;t=5"#,
        "use no more than 0 within the 5 s the bucket takes to fill"
    );
    let (s2, d) = b.transition(Some(s), Nanos::from_millis(1_500), 1).unwrap();
    assert_eq!(
        render(&name, b.quota(), &d, FieldsDraft::Draft11).ratelimit,
        r#""per-key";r=2;t=4"#,
        "3 tokens refilled, 1 taken: full 4 s later"
    );
    let (_, d) = b
        .transition(Some(s2), Nanos::from_millis(1_500), 3)
        .unwrap();
    assert!(!d.allowed);
    let f11 = render(&name, b.quota(), &d, FieldsDraft::Draft11);
    assert_eq!(
        (f11.ratelimit.as_str(), f11.retry_after.as_deref()),
        (r#""per-key";r=2;t=1"#, Some("1")),
        "a denial's window ends when it would be admitted"
    );
    let (_, d) = b.transition(Some(s), Nanos(1), 2).unwrap();
    let f = render(&name, b.quota(), &d, FieldsDraft::Draft10);
    assert_eq!(
        f.retry_after.as_deref(),
        Some("1"),
        "2 tokens take 1 s at 2/s"
    );
    let quoted = PolicyName::new(r#"a"b\c"#).unwrap();
    assert!(
        render(&quoted, b.quota(), &d, FieldsDraft::Draft10)
            .policy
            .starts_with(r#""a\"b\\c";"#)
    );
}
