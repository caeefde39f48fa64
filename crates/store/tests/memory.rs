//! The in-memory store's contract on one thread: both paths agree when nothing interleaves,
//! state expires exactly when it stops mattering, keys and the key bound are enforced.

use ratelab_core::{Algorithm, FixedWindow, Nanos, TokenBucket};
use ratelab_store::{
    Key, KeyError, LimitError, MAX_KEY_LEN, MemoryStore, Path, Store, StoreError, decide,
};

fn key(s: &str) -> Key {
    Key::new(s).unwrap()
}

/// Sequentially, the naive and atomic paths are the same limiter: the race is their only
/// difference. The naive path pays two round trips per admitted request, the atomic one.
#[test]
fn naive_and_atomic_paths_agree_without_concurrency() {
    let bucket = TokenBucket::per_second(5, 2).unwrap();
    let (naive, atomic) = (MemoryStore::new(bucket), MemoryStore::new(bucket));
    let keys = [key("a"), key("b")];
    let mut admitted = 0;
    for i in 0..400u64 {
        let now = Nanos(i * 37_000_000);
        let k = &keys[usize::from(i % 3 == 0)];
        let cost = 1 + i % 3;
        let a = decide(&naive, Path::Naive, k, now, cost).unwrap();
        let b = decide(&atomic, Path::Atomic, k, now, cost).unwrap();
        assert_eq!(a, b, "request {i}");
        admitted += u64::from(a.allowed);
    }
    assert!(
        admitted > 10 && admitted < 390,
        "{admitted} admitted: the run must mix both"
    );
    assert_eq!(naive.stats().calls, 400 + admitted);
    assert_eq!(atomic.stats().calls, 400);
}

#[test]
fn state_expires_when_the_bucket_is_full_again() {
    let bucket = TokenBucket::per_second(4, 2).unwrap(); // full again 2 s after draining
    let store = MemoryStore::new(bucket);
    let k = key("user:ana");
    assert!(store.apply(&k, Nanos(0), 4).unwrap().allowed);
    let state = store.get(&k, Nanos(0)).unwrap().unwrap();
    assert_eq!(bucket.expires_at(&state), Nanos::from_secs(2));
    assert!(
        store
            .get(&k, Nanos::from_secs(2).saturating_sub(Nanos(1)))
            .unwrap()
            .is_some()
    );
    assert_eq!(store.get(&k, Nanos::from_secs(2)).unwrap(), None);
    assert_eq!(store.purge_expired(Nanos::from_secs(2)), 1);
    assert_eq!(store.stats().entries, 0);
    // An expired key starts full: exactly what the bucket would have refilled to.
    assert_eq!(
        store.apply(&k, Nanos::from_secs(2), 1).unwrap().remaining,
        3
    );
}

#[test]
fn fixed_window_state_expires_at_the_window_end() {
    let fw = FixedWindow::new(3, Nanos::from_secs(10)).unwrap();
    let store = MemoryStore::new(fw);
    let k = key("k");
    store.apply(&k, Nanos::from_secs(12), 1).unwrap();
    assert!(store.get(&k, Nanos::from_secs(19)).unwrap().is_some());
    assert!(store.get(&k, Nanos::from_secs(20)).unwrap().is_none());
}

#[test]
fn a_full_store_refuses_new_keys_after_purging_expired_ones() {
    let bucket = TokenBucket::per_second(1, 1).unwrap();
    let store = MemoryStore::<_>::with_backend(bucket, 1, 2);
    store.apply(&key("a"), Nanos(0), 1).unwrap();
    store.apply(&key("b"), Nanos(0), 1).unwrap();
    assert_eq!(
        store.apply(&key("c"), Nanos(0), 1),
        Err(LimitError::Store(StoreError::Full))
    );
    // Existing keys still work while full.
    assert!(!store.apply(&key("a"), Nanos(0), 1).unwrap().allowed);
    // Once a and b expire (1 s), c fits.
    assert!(
        store
            .apply(&key("c"), Nanos::from_secs(1), 1)
            .unwrap()
            .allowed
    );
}

#[test]
fn a_new_key_on_a_full_shard_sweeps_a_bounded_stretch_not_the_whole_shard() {
    // One shard of 100 keys: 99 live until 11 s, and the last one in, live only until 1 s.
    let bucket = TokenBucket::per_second(1, 1).unwrap();
    let store = MemoryStore::<_>::with_backend(bucket, 1, 100);
    for i in 0..99 {
        store
            .apply(&key(&format!("live{i}")), Nanos::from_secs(10), 1)
            .unwrap();
    }
    store.apply(&key("old"), Nanos(0), 1).unwrap();
    // At 5 s a new key finds the shard full. A whole-shard purge would free `old` at once;
    // the bounded sweep looks at 8 entries per attempt from a cursor that goes round, so it
    // refuses until the cursor reaches `old`, 13 attempts in.
    let mut attempts = 0;
    let admitted = loop {
        attempts += 1;
        let before = store.stats().swept;
        let r = store.apply(&key("new"), Nanos::from_secs(5), 1);
        assert!(
            store.stats().swept - before <= 8,
            "at most 8 entries per attempt"
        );
        match r {
            Err(LimitError::Store(StoreError::Full)) if attempts < 100 => continue,
            other => break other,
        }
    };
    assert!(admitted.unwrap().allowed);
    assert_eq!(
        attempts, 13,
        "99 live entries, 8 looked at per attempt, then `old`"
    );
    assert_eq!(store.stats().entries, 100, "`old` made room for `new`");
}

#[test]
fn a_small_key_bound_is_exact_for_the_whole_store() {
    // 64 shards asked for, but 2 047 keys give every shard room for fewer than 1 024: one
    // shard, so the bound holds for the store, not shard by shard.
    let bucket = TokenBucket::per_second(1, 1).unwrap();
    let store = MemoryStore::<_>::with_backend(bucket, 64, 2_047);
    for i in 0..2_047 {
        let r = store.apply(&key(&format!("k{i}")), Nanos(0), 1);
        assert!(r.is_ok_and(|d| d.allowed), "key {i} of 2 047 refused");
    }
    assert_eq!(
        store.apply(&key("one-more"), Nanos(0), 1),
        Err(LimitError::Store(StoreError::Full))
    );
}

#[test]
fn invalid_keys_are_rejected_with_a_reason() {
    assert_eq!(Key::new(""), Err(KeyError::Empty));
    let long = "k".repeat(MAX_KEY_LEN + 1);
    assert_eq!(
        Key::new(&long),
        Err(KeyError::TooLong {
            len: MAX_KEY_LEN + 1
        })
    );
    assert_eq!(Key::new("a\nb"), Err(KeyError::ControlCharacter { at: 1 }));
    assert!(Key::new(&"k".repeat(MAX_KEY_LEN)).is_ok());
    assert_eq!(
        Key::new("").unwrap_err().to_string(),
        "invalid key: empty (expected 1 to 256 bytes)"
    );
}

#[test]
fn a_tagged_key_is_the_prefixed_key_of_its_value() {
    let long = "k".repeat(MAX_KEY_LEN + 1);
    let long_prefix = "p".repeat(300);
    for (prefix, value) in [
        ("key:", "alice"),
        ("h:", ""),
        ("h:", long.as_str()),
        ("h:", "a\x07b"),
        ("x\ty:", "alice"),
        (long_prefix.as_str(), "alice"),
        ("", "bob"),
    ] {
        let two_steps = Key::new(value).and_then(|v| Key::prefixed(prefix, &v));
        assert_eq!(
            Key::tagged(prefix, value),
            two_steps,
            "{prefix:?} {value:?}"
        );
    }
    assert_eq!(Key::tagged("key:", "alice").unwrap().as_str(), "key:alice");
}

#[test]
fn cost_errors_pass_through_both_paths() {
    let store = MemoryStore::new(TokenBucket::per_second(2, 1).unwrap());
    for path in Path::ALL {
        let e = decide(&store, path, &key("k"), Nanos(0), 3).unwrap_err();
        assert!(
            matches!(e, LimitError::Cost(c) if c.cost == 3 && c.limit == 2),
            "{path}"
        );
    }
}

/// One request at several keys, all or nothing: denied by one key, it spends at none; a new
/// key without room fails the whole step before anything is written; a repeated key is
/// refused; and the step is one call however many shards it locks.
#[test]
fn apply_all_is_all_or_nothing() {
    use ratelab_store::Item;
    let loose = TokenBucket::per_second(5, 1).unwrap();
    let tight = TokenBucket::per_second(1, 1).unwrap();
    let store: MemoryStore<TokenBucket> = MemoryStore::with_backend(loose, 64, 64 * 4096);
    let (a, b) = (key("a"), key("b"));
    let now = Nanos::ZERO;
    let both = |cost| {
        [
            Item {
                key: &a,
                algorithm: &loose,
                cost,
            },
            Item {
                key: &b,
                algorithm: &tight,
                cost,
            },
        ]
    };
    let calls = store.stats().calls;
    let first = store.apply_all(&both(1), now).unwrap();
    assert!(first.allowed);
    assert_eq!(store.stats().calls, calls + 1, "one call for both keys");
    // b is spent: the next request is denied there and spends nothing at a.
    for _ in 0..3 {
        let d = store.apply_all(&both(1), now).unwrap();
        assert!(!d.allowed);
    }
    let a_left = store.apply(&a, now, 1).unwrap();
    assert_eq!(
        a_left.remaining, 3,
        "a spent only by the admitted request and this one"
    );
    // Keys in different shards: the step really takes several locks.
    let keys: Vec<Key> = (0..64).map(|i| key(&format!("s{i}"))).collect();
    let shards: std::collections::BTreeSet<usize> =
        keys.iter().map(|k| store.shard_of(k)).collect();
    assert!(shards.len() > 8);
    let items: Vec<Item<'_, TokenBucket>> = keys
        .iter()
        .map(|k| Item {
            key: k,
            algorithm: &tight,
            cost: 1,
        })
        .collect();
    assert!(store.apply_all(&items, now).unwrap().allowed);
    assert!(!store.apply_all(&items, now).unwrap().allowed);
    // Repeated keys are refused.
    let twice = [both(1)[0].key, both(1)[0].key].map(|k| Item {
        key: k,
        algorithm: &loose,
        cost: 1,
    });
    assert_eq!(store.apply_all(&twice, now), Err(LimitError::RepeatedKey));

    // Room for one new key, two asked for: nothing written.
    let small: MemoryStore<TokenBucket> = MemoryStore::with_backend(loose, 1, 2);
    small.apply(&key("old"), now, 1).unwrap();
    let (c, d) = (key("c"), key("d"));
    let new = [&c, &d].map(|k| Item {
        key: k,
        algorithm: &loose,
        cost: 1,
    });
    assert_eq!(
        small.apply_all(&new, now),
        Err(LimitError::Store(StoreError::Full))
    );
    assert_eq!(small.get(&c, now), Ok(None));
    assert_eq!(small.get(&d, now), Ok(None));
    assert_eq!(small.stats().entries, 1);
}
