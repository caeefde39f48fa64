//! The overlapping-keys model shared by the loom and shuttle proofs of the all-or-nothing
//! step: gateways each send one request that matches two limits, on key sets that overlap
//! in a cycle (gateway g takes keys g and g + 1, in that order), over the real
//! `MemoryStore` with several shards, each key in a shard of its own. Every bucket holds one
//! token and time stands still.
//!
//! The cycle is the shape that deadlocks when locks are taken in each request's own order;
//! `MemoryStore::apply_all` takes them in one global order. Any two requests share a key, so
//! a correct store admits exactly one of them, and a key is spent exactly when a request
//! holding it was admitted. The one-by-one order (spend at each limit until one denies) is
//! the canary: it spends at keys of denied requests ("counter pollution") and can admit none.

#![allow(dead_code)]

use ratelab_core::{Nanos, TokenBucket};
use ratelab_store::backend::SyncBackend;
use ratelab_store::{Item, Key, MemoryStore, Store};

/// How a gateway decides its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// One all-or-nothing step over both keys.
    Together,
    /// Each key in turn, stopping at the first denial: the polluting order.
    OneByOne,
}

/// One token per bucket, never refilled within the model.
pub fn bucket() -> TokenBucket {
    TokenBucket::per_second(1, 1).expect("valid policy")
}

/// A store of four shards.
pub fn store<B: SyncBackend>() -> MemoryStore<TokenBucket, B> {
    MemoryStore::with_backend(bucket(), 4, 4 * 4096)
}

/// `n` keys, each in a different shard of `store`.
pub fn keys<B: SyncBackend>(store: &MemoryStore<TokenBucket, B>, n: usize) -> Vec<Key> {
    let mut keys: Vec<Key> = Vec::new();
    for i in 0.. {
        let k = Key::new(&format!("k{i}")).expect("a valid key");
        if keys.iter().all(|o| store.shard_of(o) != store.shard_of(&k)) {
            keys.push(k);
        }
        if keys.len() == n {
            break;
        }
    }
    keys
}

/// Gateway `g`'s keys, in its request's order: `g`, then `g + 1`, round the cycle.
pub fn request(g: usize, gateways: usize) -> [usize; 2] {
    [g, (g + 1) % gateways]
}

/// Gateway `g`'s request; whether it was admitted.
pub fn take<B: SyncBackend>(
    store: &MemoryStore<TokenBucket, B>,
    keys: &[Key],
    g: usize,
    step: Step,
) -> bool {
    let b = bucket();
    let ks = request(g, keys.len());
    match step {
        Step::Together => {
            let items = ks.map(|k| Item {
                key: &keys[k],
                algorithm: &b,
                cost: 1,
            });
            store
                .apply_all(&items, Nanos::ZERO)
                .expect("the store answers")
                .allowed
        }
        Step::OneByOne => ks.iter().all(|&k| {
            store
                .apply(&keys[k], Nanos::ZERO, 1)
                .expect("the store answers")
                .allowed
        }),
    }
}

/// What one execution did wrong, if anything: a key spent by no admitted request, or not
/// spent by an admitted one; other than exactly one request admitted.
pub fn violation<B: SyncBackend>(
    store: &MemoryStore<TokenBucket, B>,
    keys: &[Key],
    admitted: &[bool],
) -> Option<String> {
    let gateways = admitted.len();
    for (k, key) in keys.iter().enumerate() {
        let spent = store
            .get(key, Nanos::ZERO)
            .expect("the store answers")
            .is_some();
        let holders = (0..gateways)
            .filter(|&g| admitted[g] && request(g, gateways).contains(&k))
            .count();
        if usize::from(spent) != holders {
            return Some(format!(
                "counter pollution: key {k} spent {} time(s), by {holders} admitted request(s) \
                 (admitted: {admitted:?})",
                usize::from(spent)
            ));
        }
    }
    let n = admitted.iter().filter(|a| **a).count();
    (n != 1).then(|| format!("{n} requests admitted where exactly one fits: {admitted:?}"))
}
