//! The in-process store: sharded maps under the backend's mutexes.
//!
//! Keys are spread over a fixed number of shards by their deterministic hash (FNV-1a, carried
//! by the [`Key`]), each a mutex around a map. The atomic path holds one shard's lock across read, transition and
//! write; the naive path takes it twice, once per step, which is exactly the window the
//! lost update needs.
//!
//! Bounds: at most `max_keys` live keys (split evenly over the shards). A shard that is full
//! first drops its expired entries; if it is still full the write fails with
//! [`StoreError::Full`].

use crate::backend::{BackendMutex, StdBackend, SyncBackend};
use crate::{Key, LimitError, Store, StoreError};
use core::fmt;
use core::hash::{BuildHasherDefault, Hasher};
use ratelab_core::{Algorithm, Decision, Nanos};
use std::collections::HashMap;

/// Default number of shards.
pub const DEFAULT_SHARDS: usize = 64;
/// Default bound on live keys.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;

/// Passes a [`Key`]'s precomputed hash through (keys hash themselves with one `write_u64`).
#[derive(Clone, Copy, Debug, Default)]
struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        self.0 = crate::key::fnv1a(bytes);
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

type FnvMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

struct Entry<S> {
    state: S,
    expires_at: Nanos,
}

struct Shard<S> {
    map: FnvMap<Key, Entry<S>>,
    /// Calls served by this shard (one per `get`, `set` or `apply`: one round trip each).
    calls: u64,
}

/// Counters a test or benchmark can read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Store calls served: each is one round trip to a remote store.
    pub calls: u64,
    /// Entries currently held, expired or not.
    pub entries: u64,
}

/// An in-process [`Store`], generic over its synchronisation backend.
pub struct MemoryStore<A: Algorithm, B: SyncBackend = StdBackend> {
    algorithm: A,
    shards: Box<[B::Mutex<Shard<A::State>>]>,
    max_keys_per_shard: usize,
}

impl<A: Algorithm, B: SyncBackend> fmt::Debug for MemoryStore<A, B>
where
    A: fmt::Debug,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("algorithm", &self.algorithm)
            .field("shards", &self.shards.len())
            .field("max_keys_per_shard", &self.max_keys_per_shard)
            .finish()
    }
}

impl<A: Algorithm> MemoryStore<A, StdBackend> {
    /// A store on `std` primitives with the default shards and key bound.
    pub fn new(algorithm: A) -> Self {
        MemoryStore::with_backend(algorithm, DEFAULT_SHARDS, DEFAULT_MAX_KEYS)
    }
}

impl<A: Algorithm, B: SyncBackend> MemoryStore<A, B> {
    /// A store on backend `B` with `shards` shards (at least 1) holding at most `max_keys`
    /// live keys (at least one per shard).
    pub fn with_backend(algorithm: A, shards: usize, max_keys: usize) -> Self {
        let shards = shards.max(1);
        let max_keys_per_shard = max_keys.div_ceil(shards).max(1);
        let shards = (0..shards)
            .map(|_| {
                B::Mutex::new(Shard {
                    map: FnvMap::default(),
                    calls: 0,
                })
            })
            .collect();
        MemoryStore {
            algorithm,
            shards,
            max_keys_per_shard,
        }
    }

    fn shard(&self, key: &Key) -> &B::Mutex<Shard<A::State>> {
        // The map uses the hash's low bits; the shard takes the high ones. The modulo keeps the
        // index below `shards.len()`, so it fits in usize.
        let i = ((key.hash_u64() >> 32) % self.shards.len() as u64) as usize;
        &self.shards[i]
    }

    /// Drops every entry expired at `now`; returns how many were dropped.
    pub fn purge_expired(&self, now: Nanos) -> usize {
        self.shards
            .iter()
            .map(|s| s.with(|shard| purge(&mut shard.map, now)))
            .sum()
    }

    /// Up to `limit` keys whose entries have expired at `now` but are still held, in key order:
    /// what an idle-bucket cleanup would delete.
    pub fn expired_keys(&self, now: Nanos, limit: usize) -> Vec<Key> {
        let mut keys: Vec<Key> = Vec::new();
        for s in self.shards.iter() {
            s.with(|shard| {
                keys.extend(
                    shard
                        .map
                        .iter()
                        .filter(|(_, e)| e.expires_at <= now)
                        .map(|(k, _)| k.clone()),
                )
            });
        }
        keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        keys.truncate(limit);
        keys
    }

    /// Deletes `key`'s entry, live or not; whether there was one.
    pub fn remove(&self, key: &Key) -> bool {
        self.shard(key)
            .with(|shard| shard.map.remove(key).is_some())
    }

    /// Calls served and entries held, summed over shards.
    pub fn stats(&self) -> StoreStats {
        self.shards.iter().fold(StoreStats::default(), |acc, s| {
            s.with(|shard| StoreStats {
                calls: acc.calls + shard.calls,
                entries: acc.entries + shard.map.len() as u64,
            })
        })
    }
}

fn purge<S>(map: &mut FnvMap<Key, Entry<S>>, now: Nanos) -> usize {
    let before = map.len();
    map.retain(|_, e| e.expires_at > now);
    before - map.len()
}

impl<S: Copy> Shard<S> {
    fn live(&self, key: &Key, now: Nanos) -> Option<S> {
        self.map
            .get(key)
            .filter(|e| e.expires_at > now)
            .map(|e| e.state)
    }

    fn put(
        &mut self,
        key: &Key,
        state: S,
        expires_at: Nanos,
        now: Nanos,
        max: usize,
    ) -> Result<(), StoreError> {
        if let Some(e) = self.map.get_mut(key) {
            *e = Entry { state, expires_at };
            return Ok(());
        }
        if self.map.len() >= max && purge(&mut self.map, now) == 0 {
            return Err(StoreError::Full);
        }
        self.map.insert(key.clone(), Entry { state, expires_at });
        Ok(())
    }
}

impl<A: Algorithm, B: SyncBackend> Store for MemoryStore<A, B> {
    type Algorithm = A;

    fn algorithm(&self) -> &A {
        &self.algorithm
    }

    fn get(&self, key: &Key, now: Nanos) -> Result<Option<A::State>, StoreError> {
        Ok(self.shard(key).with(|shard| {
            shard.calls += 1;
            shard.live(key, now)
        }))
    }

    fn set(&self, key: &Key, state: A::State, ttl: Nanos, now: Nanos) -> Result<(), StoreError> {
        let max = self.max_keys_per_shard;
        self.shard(key).with(|shard| {
            shard.calls += 1;
            shard.put(key, state, now.saturating_add(ttl), now, max)
        })
    }

    fn apply(&self, key: &Key, now: Nanos, cost: u64) -> Result<Decision, LimitError> {
        let max = self.max_keys_per_shard;
        let algorithm = &self.algorithm;
        self.shard(key).with(|shard| {
            shard.calls += 1;
            let entry = shard.map.get_mut(key);
            let state = entry
                .as_ref()
                .filter(|e| e.expires_at > now)
                .map(|e| e.state);
            let (next, decision) = algorithm.transition(state, now, cost)?;
            if decision.allowed {
                let expires_at = now.saturating_add(algorithm.ttl(&next, now));
                match entry {
                    Some(e) => {
                        *e = Entry {
                            state: next,
                            expires_at,
                        }
                    }
                    None => shard.put(key, next, expires_at, now, max)?,
                }
            }
            Ok(decision)
        })
    }
}
