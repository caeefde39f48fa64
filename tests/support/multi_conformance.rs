//! One property for every Redis deployment: a request at several limits, decided by
//! `RedisStore::apply_all`, equals the Rust core's all-or-nothing decision (`decide_all`),
//! field for field, over proptest-generated policies and request sequences at caller-supplied
//! times. On one server the limits' keys are one script; on a cluster they fall in different
//! slots and are decided slot by slot with a refund where a denial elsewhere undoes a spend,
//! which must still answer exactly as the core does.
//!
//! A module of the test binaries that run it (`tests/suite/redis.rs`,
//! `tests/suite/redis_cluster.rs`).

use crate::caller_clock::CallerClock;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use ratelab_core::all::{Effect, Part, decide_all};
use ratelab_core::{Nanos, TokenBucket};
use ratelab_store::redis_store::{RedisSetupError, RedisStore};
use ratelab_store::{Key, StoreClient};
use std::future::Future;

/// Today-ish, in ns since the epoch: the script must stay exact at realistic clocks.
const EPOCH_NS: u64 = 1_764_500_000_000_000_000;

/// Runs `cases` generated cases, each on stores made by `connect(first bucket, prefix)` and
/// its siblings under fresh prefixes; the number of cases run. Fails the test on the first
/// disagreement, with the case.
pub fn several_limits_decide_as_the_core<F, Fut>(
    rt: &tokio::runtime::Runtime,
    cases: u32,
    connect: F,
) -> u64
where
    F: Fn(TokenBucket, &str) -> Fut,
    Fut: Future<Output = Result<RedisStore, RedisSetupError>>,
{
    let bucket = (
        1u64..=6,
        1u64..=1_000,
        prop_oneof![Just(1_000_000_000u64), 1u64..=10_000_000_000],
    )
        .prop_filter_map("exact in Lua", |(c, a, p)| {
            let b = TokenBucket::new(c, a, Nanos(p)).ok()?;
            ratelab_store::redis_store::check_exact(&b).ok().map(|()| b)
        });
    let strategy = (
        prop::collection::vec(bucket, 2..=3),
        prop::collection::vec(
            (
                0u64..2_000_000_000,
                prop::collection::vec((any::<bool>(), 1u64..=3), 3),
            ),
            1..40,
        ),
    );
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&strategy, |(buckets, ops)| {
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            rt.block_on(async {
                let first = connect(buckets[0], &format!("multi{case}:0:"))
                    .await
                    .unwrap();
                let stores: Vec<RedisStore> = buckets
                    .iter()
                    .enumerate()
                    .map(|(i, b)| first.sibling(*b, &format!("multi{case}:{i}:")).unwrap())
                    .collect();
                let key = Key::new("k").unwrap();
                let mut states = vec![None; buckets.len()];
                let mut clock = CallerClock::at(EPOCH_NS);
                for (n, (gap, hits)) in ops.iter().enumerate() {
                    let t = clock.step(*gap);
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
                    let items: Vec<_> = matched
                        .iter()
                        .map(|&(i, c)| (&stores[i], &key, c))
                        .collect();
                    let got = RedisStore::apply_all(&items, Some(Nanos(t)))
                        .expect("siblings are one store")
                        .await
                        .unwrap();
                    let parts: Vec<Part<'_, TokenBucket>> = matched
                        .iter()
                        .map(|&(i, c)| Part {
                            algorithm: &buckets[i],
                            state: states[i],
                            cost: c,
                        })
                        .collect();
                    let want = decide_all(&parts, Nanos(t)).unwrap();
                    prop_assert_eq!(got.allowed, want.allowed, "op {} of {:?}", n, ops);
                    let decisions: Vec<_> = want.parts.iter().map(|(_, d)| *d).collect();
                    prop_assert_eq!(
                        &got.decisions,
                        &decisions,
                        "op {} of {:?} under {:?}",
                        n,
                        ops,
                        buckets
                    );
                    for (&(i, _), (effect, _)) in matched.iter().zip(&want.parts) {
                        if let Effect::Spent(s) = effect {
                            states[i] = Some(*s);
                        }
                    }
                }
                Ok(())
            })
        })
        .unwrap();
    case.into_inner()
}
