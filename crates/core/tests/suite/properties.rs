//! Property tests of the core algorithms: the envelope, Retry-After exactness, the window
//! bounds, headers that parse as structured fields, and no panic at extreme inputs.

use proptest::prelude::*;
use ratelab_core::headers::{FieldsDraft, PolicyName, render};
use ratelab_core::{
    Algorithm, AlgorithmName, Decision, FirstHitWindow, FixedWindow, Nanos, Policy, PolicyError,
    SlidingWindow, SteppedBucket, TokenBucket,
};

/// Every decision of a run, with its arrival time and cost.
type History = Vec<(u64, u64, Decision)>;

/// Runs `arrivals` (time offsets, non-decreasing, and costs) through `alg`, returning every
/// decision with its time and the final state.
fn run<A: Algorithm>(alg: &A, arrivals: &[(u64, u64)]) -> (History, Option<A::State>) {
    let mut state = None;
    let mut out = Vec::with_capacity(arrivals.len());
    for &(t, cost) in arrivals {
        let (next, d) = alg
            .transition(state, Nanos(t), cost)
            .expect("cost within limit");
        state = Some(next);
        out.push((t, cost, d));
    }
    (out, state)
}

/// Turns gaps into absolute, non-decreasing times starting at `start`.
fn times(start: u64, steps: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut t = start;
    steps
        .iter()
        .map(|&(gap, cost)| {
            t = t.saturating_add(gap);
            (t, cost)
        })
        .collect()
}

fn bucket() -> impl Strategy<Value = TokenBucket> {
    (1u64..=20, 1u64..=5, 1u64..=2_000_000_000)
        .prop_map(|(b, a, p)| TokenBucket::new(b, a, Nanos(p)).expect("valid bucket"))
}

fn window_policy() -> impl Strategy<Value = (u64, u64)> {
    (1u64..=20, 1u64..=2_000_000_000)
}

/// Gaps up to ~1.5 s and costs up to 3 (clamped to the policy's limit by the caller).
fn steps() -> impl Strategy<Value = Vec<(u64, u64)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..1_000, 0u64..1_500_000_000],
            1u64..=3,
        ),
        1..120,
    )
}

fn clamp(steps: &[(u64, u64)], limit: u64) -> Vec<(u64, u64)> {
    steps.iter().map(|&(g, c)| (g, c.min(limit))).collect()
}

/// Asserts the decision invariants every algorithm shares.
fn check_decision(d: &Decision) -> Result<(), TestCaseError> {
    prop_assert!(d.remaining <= d.limit);
    match d.retry_after {
        Some(r) => {
            prop_assert!(!d.allowed);
            prop_assert!(
                r >= d.reset_after,
                "retry_after {r} < reset_after {}",
                d.reset_after
            );
        }
        None => prop_assert!(d.allowed),
    }
    prop_assert_eq!(d.reset_after == Nanos::ZERO, d.remaining == d.limit);
    prop_assert!(
        d.full_after >= d.reset_after,
        "full_after {} < reset_after {}",
        d.full_after,
        d.reset_after
    );
    prop_assert_eq!(d.full_after == Nanos::ZERO, d.remaining == d.limit);
    Ok(())
}

/// Waiting exactly `retry_after` admits the denied request; 1 ns earlier does not. Likewise,
/// `reset_after` is exactly when more than `remaining` becomes available.
fn check_exact<A: Algorithm>(
    alg: &A,
    state: A::State,
    now: u64,
    cost: u64,
) -> Result<(), TestCaseError> {
    let (after, d) = alg.transition(Some(state), Nanos(now), cost).unwrap();
    check_decision(&d)?;
    if let Some(retry) = d.retry_after {
        let at = now
            .checked_add(retry.as_u64())
            .expect("test times stay far from u64::MAX");
        let (_, ok) = alg.transition(Some(state), Nanos(at), cost).unwrap();
        prop_assert!(
            ok.allowed,
            "denied again after waiting retry_after = {retry}"
        );
        let (_, early) = alg.transition(Some(state), Nanos(at - 1), cost).unwrap();
        prop_assert!(!early.allowed, "admitted 1 ns before retry_after = {retry}");
    }
    if d.remaining < d.limit {
        let more = d.remaining + 1;
        let at = now + d.reset_after.as_u64();
        let (_, ok) = alg.transition(Some(after), Nanos(at), more).unwrap();
        prop_assert!(
            ok.allowed,
            "{more} not available after reset_after = {}",
            d.reset_after
        );
        let (_, early) = alg.transition(Some(after), Nanos(at - 1), more).unwrap();
        prop_assert!(!early.allowed, "{more} available 1 ns before reset_after");
    }
    check_window(alg, after, now, &d)
}

/// draft-11's effective window, exactly: the quota is whole at `now + full_after` and not
/// 1 ns before, and a client that spends at most `remaining` within that window, in single
/// units spread over it, is never denied.
fn check_window<A: Algorithm>(
    alg: &A,
    after: A::State,
    now: u64,
    d: &Decision,
) -> Result<(), TestCaseError> {
    let full = d.full_after.as_u64();
    let peek = |at: u64| {
        alg.transition(Some(after), Nanos(at), 0)
            .unwrap()
            .1
            .remaining
    };
    prop_assert_eq!(
        peek(now + full),
        d.limit,
        "not whole after full_after = {}",
        full
    );
    if full > 0 {
        prop_assert!(
            peek(now + full - 1) < d.limit,
            "whole 1 ns before full_after = {}",
            full
        );
    }
    let mut state = after;
    for i in 0..d.remaining {
        let at = now + full * i / d.remaining.max(1);
        let (next, step) = alg.transition(Some(state), Nanos(at), 1).unwrap();
        prop_assert!(
            step.allowed,
            "unit {} of r = {} denied at +{} ns of t = {} ns",
            i + 1,
            d.remaining,
            at - now,
            full
        );
        state = next;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// For every pair of admitted requests, the admitted cost between them is at most
    /// B + R·Δt, compared exactly: admitted·period ≤ B·period + amount·Δt.
    #[test]
    fn token_bucket_envelope_holds(b in bucket(), s in steps()) {
        let arrivals = times(0, &clamp(&s, b.capacity()));
        let (ds, _) = run(&b, &arrivals);
        let admitted: Vec<(u64, u64)> = ds.iter().filter(|x| x.2.allowed).map(|x| (x.0, x.1)).collect();
        let (cap, amount, period) = (b.capacity() as u128, b.refill_amount() as u128, b.refill_period().as_u64() as u128);
        for i in 0..admitted.len() {
            let mut sum = 0u128;
            for j in i..admitted.len() {
                sum += admitted[j].1 as u128;
                let dt = (admitted[j].0 - admitted[i].0) as u128;
                prop_assert!(sum * period <= cap * period + amount * dt,
                    "admitted {sum} in {dt} ns: over B + R·Δt");
            }
        }
        for (_, _, d) in &ds { check_decision(d)?; }
        // The bucket's fast TTL equals the contract's definition, expires_at − now (≥ 1 ns).
        let mut state = None;
        for &(t, cost) in &arrivals {
            let (next, _) = b.transition(state, Nanos(t), cost).unwrap();
            let expected = Nanos(b.expires_at(&next).saturating_sub(Nanos(t)).as_u64().max(1));
            prop_assert_eq!(b.ttl(&next, Nanos(t)), expected);
            prop_assert_eq!(b.ttl(&next, Nanos(t + 7)), Nanos(b.expires_at(&next).saturating_sub(Nanos(t + 7)).as_u64().max(1)));
            state = Some(next);
        }
    }

    /// The token bucket is not only safe but tight: from an empty history, a burst of B unit
    /// requests at one instant is admitted in full and the next is denied.
    #[test]
    fn token_bucket_admits_exactly_capacity_at_once(b in bucket(), t in 0u64..1_000_000_000_000) {
        let arrivals: Vec<(u64, u64)> = (0..=b.capacity()).map(|_| (t, 1)).collect();
        let (ds, _) = run(&b, &arrivals);
        let allowed = ds.iter().filter(|x| x.2.allowed).count() as u64;
        prop_assert_eq!(allowed, b.capacity());
        prop_assert!(!ds.last().unwrap().2.allowed);
    }

    #[test]
    fn token_bucket_retry_after_is_exact(b in bucket(), s in steps(), probe in (0u64..2_000_000_000, 1u64..=3)) {
        let arrivals = times(1_000, &clamp(&s, b.capacity()));
        let (_, state) = run(&b, &arrivals);
        let now = arrivals.last().unwrap().0 + probe.0 % 50_000_000;
        check_exact(&b, state.unwrap(), now, probe.1.min(b.capacity()))?;
    }

    #[test]
    fn fixed_window_admits_at_most_limit_per_window((limit, w) in window_policy(), s in steps()) {
        let fw = FixedWindow::new(limit, Nanos(w)).unwrap();
        let arrivals = times(0, &clamp(&s, limit));
        let (ds, _) = run(&fw, &arrivals);
        let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
        for (t, c, d) in &ds {
            check_decision(d)?;
            if d.allowed { *per_window.entry(t / w).or_default() += c; }
        }
        for (window, n) in per_window {
            prop_assert!(n <= limit, "window {window} admitted {n} > {limit}");
        }
    }

    #[test]
    fn fixed_window_retry_after_is_exact((limit, w) in window_policy(), s in steps(), probe in (0u64..2_000_000_000, 1u64..=3)) {
        let fw = FixedWindow::new(limit, Nanos(w)).unwrap();
        let arrivals = times(1_000, &clamp(&s, limit));
        let (_, state) = run(&fw, &arrivals);
        let now = arrivals.last().unwrap().0 + probe.0 % w;
        check_exact(&fw, state.unwrap(), now, probe.1.min(limit))?;
    }

    /// The first-hit window against its specification, replayed here: a key's window opens
    /// at its first request and at the first request after each window closes, and admits
    /// while its count plus the cost is at most the limit. Every decision is the replay's.
    #[test]
    fn first_hit_window_decides_as_its_specification((limit, w) in window_policy(), s in steps()) {
        let fh = FirstHitWindow::new(limit, Nanos(w)).unwrap();
        let arrivals = times(0, &clamp(&s, limit));
        let (ds, _) = run(&fh, &arrivals);
        let (mut start, mut count) = (None::<u64>, 0u64);
        for &(t, c, ref d) in &ds {
            check_decision(d)?;
            if start.is_none_or(|s| t >= s + w) {
                (start, count) = (Some(t), 0);
            }
            let admit = count + c <= limit;
            prop_assert_eq!(d.allowed, admit, "at {} ns, cost {}, {} taken", t, c, count);
            if admit { count += c; }
        }
    }

    #[test]
    fn first_hit_window_retry_after_is_exact((limit, w) in window_policy(), s in steps(), probe in (0u64..2_000_000_000, 1u64..=3)) {
        let fh = FirstHitWindow::new(limit, Nanos(w)).unwrap();
        let arrivals = times(1_000, &clamp(&s, limit));
        let (_, state) = run(&fh, &arrivals);
        let now = arrivals.last().unwrap().0 + probe.0 % w;
        check_exact(&fh, state.unwrap(), now, probe.1.min(limit))?;
    }

    /// The stepped bucket's envelope: steps come at least a period apart, so in any closed
    /// interval of Δt it admits at most B + min(A, B)·(⌊Δt/P⌋ + 1), within the window bound
    /// its quota gives (2L + L·Δt/W).
    #[test]
    fn stepped_bucket_envelope_holds((b, a, p) in (1u64..=20, 1u64..=25, 1u64..=2_000_000_000), s in steps()) {
        let sb = SteppedBucket::new(b, a, Nanos(p)).unwrap();
        let q = sb.quota();
        let arrivals = times(0, &clamp(&s, b));
        let (ds, _) = run(&sb, &arrivals);
        let admitted: Vec<(u64, u64)> = ds.iter().filter(|x| x.2.allowed).map(|x| (x.0, x.1)).collect();
        for (_, _, d) in &ds { check_decision(d)?; }
        for i in 0..admitted.len() {
            let mut sum = 0u128;
            for &(t, c) in &admitted[i..] {
                sum += u128::from(c);
                let dt = u128::from(t - admitted[i].0);
                let steps = dt / u128::from(p) + 1;
                prop_assert!(sum <= u128::from(b) + u128::from(a.min(b)) * steps, "{sum} in {dt} ns");
                let window = u128::from(q.window.as_u64());
                prop_assert!(sum * window <= 2 * u128::from(q.limit) * window + u128::from(q.limit) * dt);
            }
        }
    }

    #[test]
    fn stepped_bucket_retry_after_is_exact((b, a, p) in (1u64..=20, 1u64..=25, 1u64..=2_000_000_000), s in steps(), probe in (0u64..4_000_000_000, 1u64..=3)) {
        let sb = SteppedBucket::new(b, a, Nanos(p)).unwrap();
        let arrivals = times(1_000, &clamp(&s, b));
        let (_, state) = run(&sb, &arrivals);
        let now = arrivals.last().unwrap().0 + probe.0 % (2 * p);
        check_exact(&sb, state.unwrap(), now, probe.1.min(b))?;
    }

    /// The sliding-window counter's documented bound: in any interval of length W it admits
    /// at most limit + previous·e/W ≤ 2·limit, and within one aligned window at most limit.
    #[test]
    fn sliding_window_stays_within_its_bound((limit, w) in window_policy(), s in steps()) {
        let sw = SlidingWindow::new(limit, Nanos(w)).unwrap();
        let arrivals = times(0, &clamp(&s, limit));
        let (ds, _) = run(&sw, &arrivals);
        let admitted: Vec<(u64, u64)> = ds.iter().filter(|x| x.2.allowed).map(|x| (x.0, x.1)).collect();
        for (i, &(start, _)) in admitted.iter().enumerate() {
            let in_window: u64 = admitted[i..].iter().take_while(|a| a.0 < start + w).map(|a| a.1).sum();
            prop_assert!(in_window <= 2 * limit, "{in_window} admitted within {w} ns of {start}");
        }
        let mut per_window = std::collections::BTreeMap::<u64, u64>::new();
        for &(t, c) in &admitted { *per_window.entry(t / w).or_default() += c; }
        prop_assert!(per_window.values().all(|&n| n <= limit));
        for (_, _, d) in &ds { check_decision(d)?; }
    }

    #[test]
    fn sliding_window_retry_after_is_exact((limit, w) in window_policy(), s in steps(), probe in (0u64..4_000_000_000, 1u64..=3)) {
        let sw = SlidingWindow::new(limit, Nanos(w)).unwrap();
        let arrivals = times(1_000, &clamp(&s, limit));
        let (_, state) = run(&sw, &arrivals);
        let now = arrivals.last().unwrap().0 + probe.0 % (2 * w);
        check_exact(&sw, state.unwrap(), now, probe.1.min(limit))?;
    }

    /// Extreme valid inputs: the largest policies, times near u64::MAX, arbitrary (even
    /// backwards) times and costs. Nothing panics, every decision is well formed, and a cost
    /// above the limit is an error rather than a denial.
    #[test]
    fn no_panic_at_extreme_inputs(
        cap in prop_oneof![Just(1u64), Just(ratelab_core::token_bucket::MAX_CAPACITY), 1u64..=u64::MAX],
        amount in prop_oneof![Just(1u64), Just(ratelab_core::token_bucket::MAX_CAPACITY), 1u64..=u64::MAX],
        period in prop_oneof![Just(1u64), Just(ratelab_core::token_bucket::MAX_PERIOD.as_u64()), 1u64..=u64::MAX],
        ops in prop::collection::vec((prop_oneof![Just(u64::MAX), Just(u64::MAX - 1), Just(0u64), any::<u64>()], any::<u64>()), 1..40),
    ) {
        let algs: Vec<Policy> = every_policy(cap, amount, period).into_iter().filter_map(Result::ok).collect();
        for alg in &algs {
            let limit = alg.quota().limit;
            let mut state = None;
            for &(t, cost) in &ops {
                match alg.transition(state, Nanos(t), cost) {
                    Ok((next, d)) => {
                        prop_assert!(cost <= limit);
                        check_decision(&d)?;
                        let _ = alg.expires_at(&next);
                        let _ = alg.ttl(&next, Nanos(t));
                        for draft in [FieldsDraft::Draft10, FieldsDraft::Draft11] {
                            let fields = render(&PolicyName::new("p").unwrap(), alg.quota(), &d, draft);
                            prop_assert!(!fields.ratelimit.is_empty());
                        }
                        state = Some(next);
                    }
                    Err(e) => {
                        prop_assert!(cost > limit);
                        prop_assert_eq!(e.cost, cost);
                    }
                }
            }
        }
    }

    /// Rendered fields parse with an independent RFC 9651 parser, carry the decision's
    /// numbers under either draft (`t` draft-10's time until more quota, draft-11's effective
    /// window), and Retry-After is never 0 and never earlier than the announced `t`.
    #[test]
    fn headers_parse_as_structured_fields(b in bucket(), s in steps(), name in "[ -~]{1,64}") {
        let name = PolicyName::new(&name).unwrap();
        let arrivals = times(0, &clamp(&s, b.capacity()));
        let (ds, _) = run(&b, &arrivals);
        for (_, _, d) in &ds {
            for draft in [FieldsDraft::Draft10, FieldsDraft::Draft11] {
                let f = render(&name, b.quota(), d, draft);
                let policy = parse_item(&f.policy)?;
                prop_assert_eq!(&policy.0, name.as_str());
                prop_assert_eq!(policy.1.get("q").copied(), Some(b.capacity() as i64));
                prop_assert!(policy.1.get("w").copied().unwrap_or(0) >= 1);
                let rl = parse_item(&f.ratelimit)?;
                prop_assert_eq!(&rl.0, name.as_str());
                prop_assert_eq!(rl.1.get("r").copied(), Some(d.remaining as i64));
                let t = rl.1["t"] as u64;
                let want = match (draft, d.retry_after) {
                    (FieldsDraft::Draft10, _) => d.reset_after,
                    (FieldsDraft::Draft11, Some(wait)) => wait,
                    (FieldsDraft::Draft11, None) => d.full_after,
                };
                prop_assert_eq!(t, want.as_secs_ceil());
                match (&f.retry_after, d.retry_after) {
                    (Some(v), Some(after)) => {
                        let secs: u64 = v.parse().map_err(|_| TestCaseError::fail(format!("Retry-After {v:?}")))?;
                        prop_assert!(secs >= 1 && secs >= t);
                        prop_assert!(secs * 1_000_000_000 >= after.as_u64());
                        prop_assert!((secs - 1) * 1_000_000_000 < after.as_u64().max(1));
                    }
                    (None, None) => {}
                    other => prop_assert!(false, "Retry-After {:?} for a decision with retry_after {:?}", other.0, other.1),
                }
            }
        }
    }
}

/// Parses a one-item sf-list into (string, integer parameters).
fn parse_item(
    field: &str,
) -> Result<(String, std::collections::BTreeMap<String, i64>), TestCaseError> {
    let list: sfv::List = sfv::Parser::new(field)
        .parse()
        .map_err(|e| TestCaseError::fail(format!("{field:?} is not an sf-list: {e}")))?;
    prop_assert_eq!(list.len(), 1);
    let sfv::ListEntry::Item(item) = &list[0] else {
        return Err(TestCaseError::fail("inner list"));
    };
    let name = item
        .bare_item
        .as_string()
        .ok_or_else(|| TestCaseError::fail("policy name is not an sf-string"))?
        .as_str()
        .to_owned();
    let mut params = std::collections::BTreeMap::new();
    for (k, v) in &item.params {
        let n = v
            .as_integer()
            .ok_or_else(|| TestCaseError::fail(format!("{} is not an integer", k.as_str())))?;
        params.insert(k.as_str().to_owned(), i64::from(n));
    }
    Ok((name, params))
}

/// One policy of every algorithm from the same numbers (a capacity or limit, a refill amount,
/// a period or window in ns), where they are valid for it.
fn every_policy(cap: u64, amount: u64, period: u64) -> Vec<Result<Policy, PolicyError>> {
    vec![
        TokenBucket::new(cap, amount, Nanos(period)).map(Policy::TokenBucket),
        FixedWindow::new(cap, Nanos(period)).map(Policy::FixedWindow),
        SlidingWindow::new(cap, Nanos(period)).map(Policy::SlidingWindow),
        FirstHitWindow::new(cap, Nanos(period)).map(Policy::FirstHitWindow),
        SteppedBucket::new(cap, amount, Nanos(period)).map(Policy::SteppedBucket),
    ]
}

#[test]
fn the_extreme_inputs_cover_every_algorithm() {
    let names: Vec<AlgorithmName> = every_policy(1, 1, 1_000)
        .into_iter()
        .map(|p| p.expect("valid").name())
        .collect();
    assert_eq!(names, AlgorithmName::ALL);
}
