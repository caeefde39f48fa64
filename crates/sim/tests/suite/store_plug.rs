//! A store ratelab did not write, in the loom and shuttle harnesses: the [`Store`] contract is
//! a plug point as the algorithm is. One user store keeps the contract (each `apply` one step
//! under the key's lock, by delegating to a `MemoryStore` built on the checker's mutex); the
//! other "applies" in two steps, a read and a write, and both model checkers must find the
//! lost update on its atomic path.

use ratelab_core::{Algorithm, Decision, Nanos, TokenBucket};
use ratelab_sim::harness::Race;
use ratelab_sim::harness::loom::{LoomBackend, Options, explore_store};
use ratelab_sim::harness::shuttle::{Counter, ShuttleBackend, expect_violation, race_store};
use ratelab_store::backend::SyncBackend;
use ratelab_store::{Key, LimitError, MemoryStore, Path, StateOf, Store, StoreError};
use std::sync::Arc;

/// A user's store: the in-memory one underneath, its `apply` atomic or split in two.
struct UserStore<B: SyncBackend> {
    inner: MemoryStore<TokenBucket, B>,
    split_apply: bool,
}

impl<B: SyncBackend> Store for UserStore<B> {
    type Algorithm = TokenBucket;

    fn algorithm(&self) -> &TokenBucket {
        self.inner.algorithm()
    }

    fn get(&self, key: &Key, now: Nanos) -> Result<Option<StateOf<Self>>, StoreError> {
        self.inner.get(key, now)
    }

    fn set(&self, key: &Key, s: StateOf<Self>, ttl: Nanos, now: Nanos) -> Result<(), StoreError> {
        self.inner.set(key, s, ttl, now)
    }

    fn apply(&self, key: &Key, now: Nanos, cost: u64) -> Result<Decision, LimitError> {
        if !self.split_apply {
            return self.inner.apply(key, now, cost);
        }
        let state = self.inner.get(key, now)?;
        let (next, d) = self.algorithm().transition(state, now, cost)?;
        if d.allowed {
            self.inner
                .set(key, next, self.algorithm().ttl(&next, now), now)?;
        }
        Ok(d)
    }
}

fn store<B: SyncBackend>(split_apply: bool) -> impl Fn(&TokenBucket) -> UserStore<B> {
    move |b: &TokenBucket| UserStore {
        inner: MemoryStore::with_backend(*b, 1, 16),
        split_apply,
    }
}

fn race(gateways: usize) -> Race<TokenBucket> {
    Race::last_unit(
        TokenBucket::per_second(3, 1).unwrap(),
        Path::Atomic,
        gateways,
    )
}

#[test]
fn loom_holds_a_user_store_that_keeps_the_contract_and_catches_one_that_does_not() {
    let held = explore_store(&race(3), Options::default(), store::<LoomBackend>(false));
    assert!(held.held() && held.executions > 1, "{held:?}");
    let split = explore_store(&race(2), Options::default(), store::<LoomBackend>(true));
    assert!(
        split.violations > 0,
        "the split apply's lost update went unseen: {split:?}"
    );
}

#[test]
fn shuttle_holds_a_user_store_that_keeps_the_contract_and_catches_one_that_does_not() {
    let runs = Arc::new(Counter::default());
    let held = race_store(race(4), runs.clone(), store::<ShuttleBackend>(false));
    shuttle::check_random_with_seed(held, 7, 500);
    assert_eq!(runs.get(), 500);
    let split = race_store(
        race(4),
        Arc::new(Counter::default()),
        store::<ShuttleBackend>(true),
    );
    let found = expect_violation(|| shuttle::check_random_with_seed(split, 7, 2_000));
    assert!(found.contains("lost update"), "{found}");
}
