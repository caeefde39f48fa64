//! The probe's checks on histories made by the core's own decisions and by hand.

use super::*;
use crate::linearizable::{self, Initial};
use ratelab_core::{Algorithm, Nanos, TokenBucket};

const CLAIM: Claim = Claim::TokenBucket {
    capacity: 5,
    amount: 2,
    period: Nanos(1_000_000_000),
};

fn judging(claim: Claim) -> Judging {
    Judging {
        claim,
        clock_resolution: Nanos::from_millis(1),
        initial: Initial::Full,
        budget: linearizable::DEFAULT_BUDGET,
        exact: true,
        origin: None,
    }
}

/// Requests on one key answered by `ratelab-core`'s bucket at a moment inside each
/// request's flight, reported as a limiter's HTTP fields would be (Retry-After in whole
/// seconds, rounded up), with `clients` of them in flight at once.
fn answered_by_the_core<A: Algorithm>(bucket: &A, n: u64, clients: u64) -> ProbeHistory {
    let mut state = None;
    let mut h = ProbeHistory::default();
    for i in 0..n {
        let sent = Nanos::from_millis(i / clients * 40 + i % clients);
        let decided = Nanos(sent.as_u64() + 3_000_000 + (i * 7_919 % 5) * 100_000);
        let (next, d) = bucket.transition(state, decided, 1).unwrap();
        state = Some(next);
        h.observations.push(Observation {
            id: i,
            key: "k".into(),
            client: (i % clients) as u32,
            instance: 0,
            cost: 1,
            sent,
            answered: Nanos(decided.as_u64() + 2_000_000),
            outcome: Outcome::of(d.allowed),
            fields: Fields::rendered(&d),
        });
    }
    h
}

#[test]
fn a_correct_bucket_seen_from_outside_passes_every_check() {
    let bucket = TokenBucket::per_second(5, 2).unwrap();
    let h = answered_by_the_core(&bucket, 300, 1);
    let v = judge(&h, &judging(CLAIM));
    assert!(v.figure("denied") > 0 && v.figure("admitted") > 0, "{v:?}");
    assert_eq!(v.failures(), Vec::<String>::new());
    assert_eq!(v.linearizable().unwrap().keys, 1);
    assert!(v.figure("fields_checked") > 250);
}

#[test]
fn a_limiter_looser_than_its_claim_fails_the_envelope_and_linearizability() {
    // The limiter runs B = 8 while claiming B = 5.
    let bucket = TokenBucket::per_second(8, 2).unwrap();
    let h = answered_by_the_core(&bucket, 300, 1);
    let v = judge(&h, &judging(CLAIM));
    assert!(v.figure("max_excess") >= 2, "{:?}", v.envelope());
    assert!(!v.linearizable().unwrap().linearizable());
    let f = v.failures();
    assert!(
        f.iter().any(|l| l.starts_with("envelope: key \"k\"")),
        "{f:?}"
    );
}

#[test]
fn a_limiter_tighter_than_its_claim_shows_phantom_denials() {
    // The limiter runs B = 3 while claiming B = 5: it never admits too much, but denies
    // what the claimed bucket had room for.
    let bucket = TokenBucket::per_second(3, 2).unwrap();
    let mut h = answered_by_the_core(&bucket, 300, 1);
    for o in &mut h.observations {
        o.fields = Fields::default();
    }
    let v = judge(&h, &judging(CLAIM));
    assert_eq!(v.figure("max_excess"), 0);
    assert_eq!(v.phantom_denials().len(), 1, "{v:?}");
}

#[test]
fn contradictory_fields_are_reported() {
    let bucket = TokenBucket::per_second(5, 2).unwrap();
    let mut h = answered_by_the_core(&bucket, 60, 1);
    let denial = h
        .observations
        .iter()
        .position(|o| o.outcome == Outcome::Denied)
        .unwrap();
    // A denial that reports room, and one whose Retry-After is earlier than its t.
    h.observations[denial].fields.remaining = Some(3);
    h.observations[denial + 1].fields.reset_secs = Some(9);
    h.observations[denial + 1].outcome = Outcome::Denied;
    h.observations[denial + 1].fields.retry_after = Some(Nanos::from_secs(1));
    let v = judge(&h, &judging(CLAIM));
    let what: Vec<&str> = v
        .field_violations()
        .iter()
        .map(|f| f.what.as_str())
        .collect();
    assert!(
        what.iter().any(|w| w.contains("room for its cost")),
        "{what:?}"
    );
    assert!(what.iter().any(|w| w.contains("earlier than")), "{what:?}");
    assert!(
        what.iter().any(|w| w.contains("faster than the refill")),
        "{what:?}"
    );
}

#[test]
fn an_announced_limit_is_held_to_the_claim_and_above_remaining() {
    let bucket = TokenBucket::per_second(5, 2).unwrap();
    let mut h = answered_by_the_core(&bucket, 60, 1);
    for o in &mut h.observations {
        o.fields.limit = Some(5);
    }
    assert!(
        judge(&h, &judging(CLAIM)).field_violations().is_empty(),
        "the claim's limit"
    );
    // Remaining after the first admission is 4.
    for o in &mut h.observations {
        o.fields.limit = Some(3);
    }
    let v = judge(&h, &judging(CLAIM));
    let what: Vec<&str> = v
        .field_violations()
        .iter()
        .map(|f| f.what.as_str())
        .collect();
    assert_eq!(
        what.iter()
            .filter(|w| w.contains("announced limit 3, the claim's is 5"))
            .count(),
        1,
        "once per key: {what:?}"
    );
    assert!(
        what.iter()
            .any(|w| w.contains("above the announced limit 3")),
        "{what:?}"
    );
}

#[test]
fn a_malformed_field_is_a_contradiction_once_per_key() {
    let bucket = TokenBucket::per_second(5, 2).unwrap();
    let mut h = answered_by_the_core(&bucket, 20, 1);
    assert!(judge(&h, &judging(CLAIM)).field_violations().is_empty());
    for o in h.observations.iter_mut().skip(3) {
        o.fields.malformed = Some(("retry-after".into(), "0.25".into()));
    }
    let v = judge(&h, &judging(CLAIM));
    let flagged: Vec<&FieldViolation> = v
        .field_violations()
        .iter()
        .filter(|f| f.what.contains("retry-after: \"0.25\""))
        .collect();
    assert_eq!(flagged.len(), 1, "{:?}", v.field_violations());
    assert_eq!(flagged[0].ids, vec![h.observations[3].id]);
}

#[test]
fn a_follow_up_denied_after_waiting_is_a_dishonest_retry_after() {
    let bucket = TokenBucket::per_second(5, 2).unwrap();
    let mut h = answered_by_the_core(&bucket, 20, 1);
    let d = h
        .observations
        .iter()
        .find(|o| o.outcome == Outcome::Denied)
        .unwrap()
        .id;
    let ok = h
        .observations
        .iter()
        .rev()
        .find(|o| o.outcome == Outcome::Allowed)
        .unwrap()
        .id;
    let no = h
        .observations
        .iter()
        .rev()
        .find(|o| o.outcome == Outcome::Denied)
        .unwrap()
        .id;
    h.retry_probes = vec![RetryProbe {
        denied: d,
        follow_up: ok,
    }];
    assert_eq!(judge(&h, &judging(CLAIM)).retry_after().admitted, 1);
    h.retry_probes = vec![RetryProbe {
        denied: d,
        follow_up: no,
    }];
    let v = judge(&h, &judging(CLAIM));
    assert_eq!(v.retry_after().refused, vec![(d, no)]);
    assert!(v.failures().iter().any(|l| l.starts_with("retry-after")));
}

#[test]
fn a_fixed_window_claim_is_held_to_twice_its_limit() {
    let claim = Claim::Window {
        kind: WindowKind::Fixed,
        limit: 5,
        window: Nanos::from_secs(1),
    };
    let bucket = TokenBucket::per_second(8, 5).unwrap();
    let mut h = answered_by_the_core(&bucket, 100, 1);
    for o in &mut h.observations {
        o.fields = Fields::default();
    }
    let bound = Judging {
        exact: false,
        ..judging(claim)
    };
    let v = judge(&h, &bound);
    assert!(v.linearizable().is_none());
    assert_eq!(v.figure("max_excess"), 0, "8 at once is within 2L");
}

fn seen(id: u64, sent_us: u64, answered_us: u64, outcome: Outcome) -> Observation {
    Observation {
        id,
        key: "k".into(),
        client: id as u32,
        instance: 0,
        cost: 1,
        sent: Nanos(sent_us * 1_000),
        answered: Nanos(answered_us * 1_000),
        outcome,
        fields: Fields::default(),
    }
}

#[test]
fn a_lagging_clock_excuses_an_unanswered_request_taking_effect_before_its_send() {
    // B = 1 at 1/s on a clock 0.7 ms behind: the unanswered request took the token at
    // 999.3 ms by that clock, so it was back by 1999.3 ms, when the last was admitted.
    let claim = Claim::TokenBucket {
        capacity: 1,
        amount: 1,
        period: Nanos(1_000_000_000),
    };
    let h = ProbeHistory {
        observations: vec![
            seen(0, 1_000_000, 1_000_500, Outcome::Failed("timeout".into())),
            seen(1, 1_500_000, 1_500_200, Outcome::Denied),
            seen(2, 1_999_400, 1_999_600, Outcome::Allowed),
        ],
        retry_probes: Vec::new(),
    };
    let v = judge(&h, &judging(claim));
    assert!(v.linearizable().unwrap().linearizable());
    assert_eq!(
        v.failures().len(),
        1,
        "only the missing decision is reported"
    );
}

#[test]
fn the_first_requests_of_a_run_get_the_whole_clock_resolution() {
    // B = 1 at 20/s on a clock up to 25 ms behind: the first request, sent 1 ms into the
    // run, may have been stamped at -24 ms, so a second admission answered at 28.2 ms is
    // within the claim; a run's start is no reason to judge its first requests tighter.
    let claim = Claim::TokenBucket {
        capacity: 1,
        amount: 1,
        period: Nanos::from_millis(50),
    };
    let h = ProbeHistory {
        observations: vec![
            seen(0, 1_000, 1_200, Outcome::Allowed),
            seen(1, 28_000, 28_200, Outcome::Allowed),
        ],
        retry_probes: Vec::new(),
    };
    let mut j = judging(claim);
    j.clock_resolution = Nanos::from_millis(25);
    let v = judge(&h, &j);
    assert_eq!(v.failures(), Vec::<String>::new());
    // With a resolution that cannot explain it, the same history is an excess, and the
    // witness is on the probe's clock.
    j.clock_resolution = Nanos::from_millis(1);
    let v = judge(&h, &j);
    let w = v.envelope().unwrap().witness.clone().expect("an excess");
    assert_eq!(
        (w.admitted, w.bound, w.from, w.to),
        (2, 1, Nanos(0), Nanos(28_200_000))
    );
}

#[test]
fn a_limiter_that_decides_nothing_is_not_passed() {
    let h = ProbeHistory {
        observations: (0..5)
            .map(|i| seen(i, i * 10, i * 10 + 5, Outcome::Failed("status 404".into())))
            .collect(),
        retry_probes: Vec::new(),
    };
    let v = judge(&h, &judging(CLAIM));
    assert_eq!(v.linearizable().unwrap().keys, 0);
    let f = v.failures();
    assert_eq!(
        f,
        ["decisions: 5 of 5 requests got none (request 0: status 404)"]
    );
}

#[test]
fn an_unknown_start_allows_a_decision_stamped_up_to_the_first_answer() {
    // B = 1 at 1/s on a millisecond clock: a request before the history (the probe's
    // preflight, say) was stamped 1000 ms and emptied the bucket until 2000 ms. The
    // history's two denials announce the waits that gives, to the microsecond.
    let claim = Claim::TokenBucket {
        capacity: 1,
        amount: 1,
        period: Nanos(1_000_000_000),
    };
    let denial = |id, sent_us, wait_ms| {
        let mut o = seen(id, sent_us, sent_us + 200, Outcome::Denied);
        o.fields.retry_after = Some(Nanos::from_millis(wait_ms));
        o.fields.retry_after_unit = Nanos(1_000);
        o
    };
    let h = ProbeHistory {
        observations: vec![denial(0, 1_000_600, 1_000), denial(1, 1_500_700, 500)],
        retry_probes: Vec::new(),
    };
    let j = Judging {
        initial: Initial::Unknown,
        ..judging(claim)
    };
    let v = judge(&h, &j);
    assert_eq!(v.failures(), Vec::<String>::new());
    // From a full bucket, the first denial is a phantom.
    let v = judge(&h, &judging(claim));
    assert_eq!(v.phantom_denials(), [("k".to_owned(), 0)]);
}

#[test]
fn the_checks_that_apply_are_the_registrys_and_are_listed() {
    let bucket = TokenBucket::new(5, 2, Nanos::from_secs(1)).unwrap();
    let h = answered_by_the_core(&bucket, 20, 2);
    let all: Vec<&str> = CHECKS.iter().map(|c| c.name()).collect();
    assert_eq!(judge(&h, &judging(CLAIM)).checks(), all);
    // A window from an unknown state has no specification to start from: every check but
    // that one.
    let window = Judging {
        initial: linearizable::Initial::Unknown,
        ..judging(Claim::Window {
            kind: WindowKind::Fixed,
            limit: 5,
            window: Nanos::from_secs(1),
        })
    };
    let v = judge(&h, &window);
    assert!(!v.checks().contains(&"linearizable") && v.linearizable().is_none());
    assert_eq!(v.checks().len(), all.len() - 1);
    // A bound only: no check holds answers to a sequential specification.
    let bound = Judging {
        exact: false,
        ..judging(CLAIM)
    };
    assert!(!judge(&h, &bound).checks().contains(&"linearizable"));
}

#[test]
fn a_key_the_search_cannot_decide_is_unknown_never_a_pass() {
    let bucket = TokenBucket::new(5, 2, Nanos::from_secs(1)).unwrap();
    let h = answered_by_the_core(&bucket, 40, 4);
    assert_eq!(judge(&h, &judging(CLAIM)).conclusion(), Conclusion::Passed);
    let starved = Judging {
        budget: 1,
        ..judging(CLAIM)
    };
    let v = judge(&h, &starved);
    assert!(v.failures().is_empty(), "{:?}", v.failures());
    assert!(v.unknown() > 0);
    assert_eq!(v.conclusion(), Conclusion::Unknown);
}

/// Each window family's claim, and ratelab-core's limiter of that family.
fn window_families(limit: u64) -> Vec<(Claim, Box<dyn Fn() -> ProbeHistory>)> {
    use ratelab_core::{FirstHitWindow, FixedWindow, SlidingWindow};
    let w = Nanos::from_secs(1);
    let claim = |kind| Claim::Window {
        kind,
        limit: 5,
        window: w,
    };
    vec![
        (
            claim(WindowKind::Fixed),
            Box::new(move || answered_by_the_core(&FixedWindow::new(limit, w).unwrap(), 150, 2)),
        ),
        (
            claim(WindowKind::FirstHit),
            Box::new(move || answered_by_the_core(&FirstHitWindow::new(limit, w).unwrap(), 150, 2)),
        ),
        (
            claim(WindowKind::SlidingCounter {
                rounding: Rounding::Up,
                first_hit: false,
            }),
            Box::new(move || answered_by_the_core(&SlidingWindow::new(limit, w).unwrap(), 150, 2)),
        ),
    ]
}

#[test]
fn every_window_family_seen_from_outside_is_held_to_its_specification() {
    // Answered by the family's own limiter, decided within each request's flight, the
    // Retry-After in whole seconds: every check passes, the fixed window's phase unseen.
    for (claim, history) in window_families(5) {
        let v = judge(&history(), &judging(claim));
        assert!(v.checks().contains(&"linearizable"), "{claim:?}");
        assert_eq!(
            v.conclusion(),
            Conclusion::Passed,
            "{claim:?}: {:?}",
            v.failures()
        );
    }
    // One more per window than claimed: the fixed window is caught by its specification at
    // every phase; the first-hit window (whose state moves with the exact moment a window
    // opened) and the sliding counter (whose weights move with the exact phase) are at least
    // never passed.
    for (claim, history) in window_families(6) {
        let v = judge(&history(), &judging(claim));
        assert_ne!(v.conclusion(), Conclusion::Passed, "{claim:?}");
        if matches!(
            claim,
            Claim::Window {
                kind: WindowKind::Fixed,
                ..
            }
        ) {
            assert!(
                v.failures().iter().any(|f| f.starts_with("linearizable")),
                "{claim:?}: {:?}",
                v.failures()
            );
        }
    }
}

/// What a claim admits of one key's requests at given times, from a key nobody used: a
/// bucket's burst and refill; a fixed window at whichever phase admits the most; a window
/// opened by the first request counting both bursts in one window.
#[test]
fn most_admitted_decides_each_request_by_the_claims_family() {
    let ms = |t: u64| Nanos::from_millis(t);
    let bucket = Claim::TokenBucket {
        capacity: 2,
        amount: 1,
        period: Nanos::from_secs(1),
    };
    assert_eq!(bucket.most_admitted(&[ms(0), ms(0), ms(0), ms(1_000)]), 3);
    let window = |kind| Claim::Window {
        kind,
        limit: 10,
        window: Nanos::from_secs(1),
    };
    let two_bursts: Vec<Nanos> = (0..10)
        .map(|_| ms(990))
        .chain((0..10).map(|_| ms(1_010)))
        .collect();
    assert_eq!(window(WindowKind::Fixed).most_admitted(&two_bursts), 20);
    assert_eq!(window(WindowKind::FirstHit).most_admitted(&two_bursts), 10);
    assert_eq!(
        window(WindowKind::SlidingLog).most_admitted(&two_bursts),
        10
    );
    // The fewest: a fixed window at a phase with no boundary between the bursts admits
    // the first burst only; a window the first request opens, the first burst only.
    assert_eq!(window(WindowKind::Fixed).admitted(&two_bursts), (10, 20));
    assert_eq!(window(WindowKind::FirstHit).admitted(&two_bursts), (10, 10));
    let apart: Vec<Nanos> = (0..10)
        .map(|_| ms(0))
        .chain((0..10).map(|_| ms(1_500)))
        .collect();
    assert_eq!(window(WindowKind::FirstHit).admitted(&apart), (20, 20));
    assert_eq!(bucket.admitted(&[ms(0), ms(0), ms(0), ms(1_000)]), (3, 3));
    // Room left after each: 1, 0, 0 (denied), then a token refilled and spent.
    assert_eq!(
        bucket.most_left(&[ms(0), ms(0), ms(0), ms(1_000)]),
        vec![1, 0, 0, 0]
    );
    assert_eq!(
        window(WindowKind::FirstHit).most_left(&apart[..11]),
        (0..10).rev().chain([9]).collect::<Vec<u64>>()
    );
}

/// A sliding counter whose key expires a window after its last write forgets the previous
/// window while it still weighs: after 10 admitted and a pause of 1.3 windows, it admits 10
/// again where the estimate leaves room for 3. At an unknown phase some phase explains that
/// (the second burst two windows on), so only a limiter whose windows the probe can place
/// (aligned to the Unix time) is caught.
#[test]
fn a_known_phase_catches_a_sliding_counter_that_forgets_its_previous_window() {
    let claim = Claim::Window {
        kind: WindowKind::SlidingCounter {
            rounding: Rounding::Down,
            first_hit: false,
        },
        limit: 10,
        window: Nanos::from_secs(1),
    };
    let ms = |t: u64| Nanos::from_millis(t);
    let observations: Vec<Observation> = (0..20u64)
        .map(|i| {
            let sent = if i < 10 { 100 + i } else { 1_300 + i };
            Observation {
                id: i,
                key: "k".into(),
                client: 0,
                instance: 0,
                cost: 1,
                sent: ms(sent),
                answered: ms(sent + 1),
                outcome: Outcome::Allowed,
                fields: Fields::default(),
            }
        })
        .collect();
    let h = ProbeHistory {
        observations,
        retry_probes: Vec::new(),
    };
    let unknown_phase = judge(&h, &judging(claim));
    assert!(unknown_phase.failures().is_empty(), "{unknown_phase:?}");
    let aligned = judge(
        &h,
        &Judging {
            origin: Some(Nanos::ZERO),
            ..judging(claim)
        },
    );
    assert!(
        aligned
            .failures()
            .iter()
            .any(|f| f.starts_with("linearizable")),
        "{aligned:?}"
    );
}

/// `fields_checked` counts the answers that carry any field the checks read: a remaining
/// count, a `Retry-After` alone, or a field outside its grammar alone; none without fields.
#[test]
fn the_answers_with_fields_are_counted() {
    let bucket = TokenBucket::per_second(5, 2).unwrap();
    let mut h = answered_by_the_core(&bucket, 40, 1);
    for o in &mut h.observations {
        o.fields = Fields::default();
    }
    assert_eq!(judge(&h, &judging(CLAIM)).figure("fields_checked"), 0);
    h.observations[1].fields.retry_after = Some(Nanos::from_secs(1));
    h.observations[2].fields.malformed = Some(("retry-after".into(), "soon".into()));
    h.observations[3].fields.remaining = Some(2);
    assert_eq!(judge(&h, &judging(CLAIM)).figure("fields_checked"), 3);
}
