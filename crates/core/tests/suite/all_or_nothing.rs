//! Property tests of the all-or-nothing decision over several limits: a request is admitted
//! exactly when every limit alone would admit it; a denied one changes no limit's state
//! (no counter pollution); an admitted one advances every limit as its own transition does;
//! and each limit keeps its own envelope, B + R·Δt, however requests overlap.

use proptest::prelude::*;
use ratelab_core::all::{Effect, Part, decide_all};
use ratelab_core::{Algorithm, Nanos, TokenBucket, TokenBucketState};

fn bucket() -> impl Strategy<Value = TokenBucket> {
    (1u64..=8, 1u64..=4, 1u64..=2_000_000_000)
        .prop_map(|(b, a, p)| TokenBucket::new(b, a, Nanos(p)).expect("valid bucket"))
}

/// Requests: a gap, then for each of up to 4 limits whether the request matches it and its
/// cost there.
fn requests() -> impl Strategy<Value = Vec<(u64, Vec<(bool, u64)>)>> {
    prop::collection::vec(
        (
            prop_oneof![Just(0u64), 0u64..1_000, 0u64..1_500_000_000],
            prop::collection::vec((any::<bool>(), 1u64..=3), 4),
        ),
        1..100,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn all_or_nothing_over_several_buckets(
        buckets in prop::collection::vec(bucket(), 1..=4),
        reqs in requests(),
    ) {
        let mut states: Vec<Option<TokenBucketState>> = vec![None; buckets.len()];
        // Per limit, the admitted (time, cost) pairs.
        let mut admitted: Vec<Vec<(u64, u64)>> = vec![Vec::new(); buckets.len()];
        let mut t = 0u64;
        for (gap, hits) in &reqs {
            t += gap;
            let now = Nanos(t);
            let matched: Vec<(usize, u64)> = hits
                .iter()
                .take(buckets.len())
                .enumerate()
                .filter(|(_, (m, _))| *m)
                .map(|(i, &(_, c))| (i, c.min(buckets[i].capacity())))
                .collect();
            if matched.is_empty() {
                continue;
            }
            let parts: Vec<Part<'_, TokenBucket>> = matched
                .iter()
                .map(|&(i, cost)| Part { algorithm: &buckets[i], state: states[i], cost })
                .collect();
            let all = decide_all(&parts, now).unwrap();
            // Each limit alone.
            let alone: Vec<_> = parts
                .iter()
                .map(|p| p.algorithm.transition(p.state, now, p.cost).unwrap())
                .collect();
            prop_assert_eq!(all.allowed, alone.iter().all(|(_, d)| d.allowed));
            prop_assert_eq!(all.parts.len(), parts.len());
            for (k, ((effect, decision), (next, single))) in all.parts.iter().zip(&alone).enumerate() {
                let (i, cost) = matched[k];
                match effect {
                    Effect::Spent(s) => {
                        prop_assert!(all.allowed);
                        prop_assert_eq!(s, next);
                        prop_assert_eq!(decision, single);
                        states[i] = Some(*s);
                        admitted[i].push((t, cost));
                    }
                    Effect::Denied => {
                        prop_assert!(!all.allowed && !single.allowed);
                        prop_assert_eq!(decision, single);
                    }
                    Effect::Unspent => {
                        prop_assert!(!all.allowed && single.allowed);
                        // What it holds now: what it would have had left, plus the cost.
                        prop_assert!(decision.allowed);
                        prop_assert_eq!(decision.remaining, single.remaining + cost);
                        prop_assert_eq!(decision.retry_after, None);
                    }
                }
            }
        }
        // Every limit's own envelope, exactly: admitted·period ≤ B·period + amount·Δt.
        for (b, adm) in buckets.iter().zip(&admitted) {
            let (cap, amount, period) = (
                b.capacity() as u128,
                b.refill_amount() as u128,
                b.refill_period().as_u64() as u128,
            );
            for i in 0..adm.len() {
                let mut sum = 0u128;
                for j in i..adm.len() {
                    sum += adm[j].1 as u128;
                    let dt = (adm[j].0 - adm[i].0) as u128;
                    prop_assert!(sum * period <= cap * period + amount * dt);
                }
            }
        }
    }
}

#[test]
fn a_denial_by_one_limit_spends_nothing_at_the_others() {
    let loose = TokenBucket::per_second(10, 1).unwrap();
    let tight = TokenBucket::per_second(1, 1).unwrap();
    let now = Nanos::ZERO;
    let (spent, _) = tight.transition(None, now, 1).unwrap();
    let parts = [
        Part {
            algorithm: &loose,
            state: None,
            cost: 1,
        },
        Part {
            algorithm: &tight,
            state: Some(spent),
            cost: 1,
        },
    ];
    let all = decide_all(&parts, now).unwrap();
    assert!(!all.allowed);
    assert_eq!(all.parts[0].0, Effect::Unspent);
    assert_eq!(
        all.parts[0].1.remaining, 10,
        "the loose limit is still full"
    );
    assert_eq!(all.parts[1].0, Effect::Denied);
    assert_eq!(all.parts[1].1.retry_after, Some(Nanos::from_secs(1)));
    // A cost one limit can never admit names that limit.
    let parts = [
        Part {
            algorithm: &loose,
            state: None,
            cost: 2,
        },
        Part {
            algorithm: &tight,
            state: None,
            cost: 2,
        },
    ];
    assert_eq!(decide_all(&parts, now).unwrap_err().0, 1);
}
