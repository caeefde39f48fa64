//! The in-process store: sharded maps under the backend's mutexes.
//!
//! Keys are spread over a fixed number of shards by a **keyed** hash (SipHash-1-3): the
//! production store draws its keys from the OS, so a client cannot choose keys that collide
//! in one map or pile into one shard; [`MemoryStore::seeded`] fixes them for the simulator,
//! whose runs must repeat. Each shard is a mutex around an insertion-ordered map. The atomic
//! path holds one shard's lock across read, transition and write; the naive path takes it
//! twice, once per step, which is exactly the window the lost update needs.
//!
//! Bounds: at most `max_keys` live keys, kept per shard (`max_keys / shards` each). So that a
//! small bound is not a handful of keys per shard, a store gets at most one shard per
//! [`MIN_KEYS_PER_SHARD`] keys, each shard room for at least that many: a bound below 2 048
//! keys is one shard, exact for the whole store. An existing key is always updated. A *new* key on a full shard first gets a bounded sweep: the shard looks at
//! the next [`PURGE_STEPS`] entries after a cursor that goes round the shard, dropping the
//! expired ones. If that frees nothing the write fails with [`StoreError::Full`], which the
//! gateway answers as a denial. Each insert thus costs O(1) however full the shard, and an
//! expired entry is found within `len / PURGE_STEPS` inserts.

use crate::backend::{BackendMutex, StdBackend, SyncBackend};
use crate::{Key, LimitError, Store, StoreError};
use core::fmt;
use core::hash::{BuildHasher, BuildHasherDefault, Hash, Hasher};
use indexmap::{Equivalent, IndexMap};
use ratelab_core::all::{AllDecision, Effect, Part, decide_all};
use ratelab_core::{Algorithm, Decision, Nanos};
use siphasher::sip::SipHasher13;

/// Default number of shards.
pub const DEFAULT_SHARDS: usize = 64;
/// Default bound on live keys.
pub const DEFAULT_MAX_KEYS: usize = 1 << 20;
/// Entries a new key on a full shard may examine for expiry before it is refused.
pub const PURGE_STEPS: usize = 8;
/// The fewest keys one shard is given room for (fewer shards for smaller bounds).
pub const MIN_KEYS_PER_SHARD: usize = 1_024;

/// Passes a hash computed once per call through to the map.
#[derive(Clone, Copy, Debug, Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else in rather than drop it.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// A stored key with its keyed hash.
#[derive(Clone)]
struct Slot {
    hash: u64,
    key: Text,
}

impl PartialEq for Slot {
    fn eq(&self, other: &Slot) -> bool {
        self.key.bytes() == other.key.bytes()
    }
}

impl Eq for Slot {}

impl Hash for Slot {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

/// The longest stored key kept inline in its slot: with its length and the variant's tag,
/// 40 bytes, against a `Box<str>`'s 16 and a block of its own.
const INLINE: usize = 38;

/// A stored key's text: inline in the slot when short, so a lookup compares it where the
/// entry lies, with no pointer to follow to a block of its own; else a [`Key`]. An entry is
/// 24 bytes larger than with a boxed key, and a key of up to 38 bytes (a client's API key
/// under its limit's prefix, an address) takes no allocation of its own.
#[derive(Clone)]
enum Text {
    /// The key's first `len` bytes.
    Inline { len: u8, bytes: [u8; INLINE] },
    /// A key too long to keep inline.
    Heap(Key),
}

impl Text {
    /// `prefix` then `key`.
    fn new(prefix: &str, key: &Key) -> Text {
        let (p, k) = (prefix.as_bytes(), key.as_str().as_bytes());
        let len = p.len() + k.len();
        if len > INLINE {
            return Text::Heap(match prefix {
                "" => key.clone(),
                prefix => Key::joined(prefix, key),
            });
        }
        let mut bytes = [0; INLINE];
        bytes[..p.len()].copy_from_slice(p);
        bytes[p.len()..len].copy_from_slice(k);
        Text::Inline {
            len: len as u8,
            bytes,
        }
    }

    fn bytes(&self) -> &[u8] {
        match self {
            Text::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Text::Heap(k) => k.as_str().as_bytes(),
        }
    }

    /// The key again. Inline bytes were copied from two `str`s, so they are UTF-8 and the
    /// lossy reading leaves them as they are.
    fn key(&self) -> Key {
        match self {
            Text::Inline { .. } => Key::stored(&String::from_utf8_lossy(self.bytes())),
            Text::Heap(k) => k.clone(),
        }
    }
}

/// A lookup by a borrowed key (`prefix` then `key`, the stored key being their
/// concatenation) and its hash, without building a [`Slot`] or joining the two.
struct Probe<'a> {
    hash: u64,
    prefix: &'a str,
    key: &'a Key,
}

impl Probe<'_> {
    /// The stored key: built only when a new entry is inserted.
    fn owned(&self) -> Text {
        Text::new(self.prefix, self.key)
    }
}

impl Hash for Probe<'_> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.hash);
    }
}

impl Equivalent<Slot> for Probe<'_> {
    fn equivalent(&self, slot: &Slot) -> bool {
        let (stored, prefix, key) = (
            slot.key.bytes(),
            self.prefix.as_bytes(),
            self.key.as_str().as_bytes(),
        );
        stored.len() == prefix.len() + key.len()
            && stored.starts_with(prefix)
            && stored.ends_with(key)
    }
}

type Map<V> = IndexMap<Slot, V, BuildHasherDefault<PassThrough>>;

struct Entry<S> {
    state: S,
    expires_at: Nanos,
}

struct Shard<S> {
    map: Map<Entry<S>>,
    /// Where the bounded sweep looks next.
    cursor: usize,
    /// Calls served by this shard (one per `get`, `set` or `apply`: one round trip each).
    calls: u64,
    /// Entries the bounded sweep has examined.
    swept: u64,
}

/// One key's part in [`MemoryStore::apply_all`].
#[derive(Debug)]
pub struct Item<'a, A> {
    /// The key.
    pub key: &'a Key,
    /// The algorithm its limit runs.
    pub algorithm: &'a A,
    /// The request's cost there.
    pub cost: u64,
}

/// Per item: the state to write and when it expires.
type Writes<S> = Vec<Option<(S, Nanos)>>;

/// The decision at the heart of [`MemoryStore::apply_all`]: from every key's state, and
/// whether every new key has room, the result and the writes.
type Decide<'d, S, R> = dyn FnMut(&[Option<S>], bool) -> (R, Writes<S>) + 'd;

/// What every level of [`MemoryStore::apply_all`]'s nested locking shares.
struct Nested<'p, 'k> {
    /// Item indices by shard, in ascending shard order.
    groups: &'p [(usize, Vec<usize>)],
    probes: &'p [Probe<'k>],
    now: Nanos,
}

/// Counters a test or benchmark can read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Store calls served: each is one round trip to a remote store.
    pub calls: u64,
    /// Entries currently held, expired or not.
    pub entries: u64,
    /// Entries examined by the bounded sweeps of full shards, in all.
    pub swept: u64,
}

/// The keys of the store's SipHash-1-3.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HashSeed(pub u64, pub u64);

impl HashSeed {
    /// Keys from the OS's randomness (through std's `RandomState`).
    pub fn random() -> HashSeed {
        let draw = || std::collections::hash_map::RandomState::new().hash_one(0u8);
        HashSeed(draw(), draw())
    }
}

/// An in-process [`Store`], generic over its synchronisation backend.
pub struct MemoryStore<A: Algorithm, B: SyncBackend = StdBackend> {
    algorithm: A,
    shards: Box<[B::Mutex<Shard<A::State>>]>,
    max_keys_per_shard: usize,
    seed: HashSeed,
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
            .finish_non_exhaustive()
    }
}

impl<A: Algorithm> MemoryStore<A, StdBackend> {
    /// A store on `std` primitives with the default shards and key bound, hashing with keys
    /// drawn from the OS.
    pub fn new(algorithm: A) -> Self {
        MemoryStore::with_backend(algorithm, DEFAULT_SHARDS, DEFAULT_MAX_KEYS)
            .with_seed(HashSeed::random())
    }

    /// The same with fixed hash keys derived from `seed`: the same keys land in the same
    /// shards on every run.
    pub fn seeded(algorithm: A, seed: u64) -> Self {
        MemoryStore::with_backend(algorithm, DEFAULT_SHARDS, DEFAULT_MAX_KEYS)
            .with_seed(HashSeed(seed, seed.rotate_left(32) ^ 0x5eed))
    }
}

/// How many shards a store asked for `shards` with room for `max_keys` has: at least 1, and
/// at most one per [`MIN_KEYS_PER_SHARD`] keys.
pub fn shard_count(shards: usize, max_keys: usize) -> usize {
    shards.clamp(1, (max_keys / MIN_KEYS_PER_SHARD).max(1))
}

/// The live keys each shard of a store asked for `shards` with room for `max_keys` holds.
pub fn keys_per_shard(shards: usize, max_keys: usize) -> usize {
    max_keys.div_ceil(shard_count(shards, max_keys)).max(1)
}

impl<A: Algorithm, B: SyncBackend> MemoryStore<A, B> {
    /// A store on backend `B` with up to `shards` shards (at least 1, and at most one per
    /// [`MIN_KEYS_PER_SHARD`] keys) holding at most `max_keys` live keys, with fixed hash keys:
    /// the model checkers and tests need them fixed, a server wants [`MemoryStore::new`]'s
    /// (or its own, through [`MemoryStore::with_seed`]).
    pub fn with_backend(algorithm: A, shards: usize, max_keys: usize) -> Self {
        let shards = shard_count(shards, max_keys);
        let max_keys_per_shard = keys_per_shard(shards, max_keys);
        let shards = (0..shards)
            .map(|_| {
                B::Mutex::new(Shard {
                    map: Map::default(),
                    cursor: 0,
                    calls: 0,
                    swept: 0,
                })
            })
            .collect();
        MemoryStore {
            algorithm,
            shards,
            max_keys_per_shard,
            seed: HashSeed(0, 0),
        }
    }

    /// The same store hashing with `seed` (before any key is stored).
    pub fn with_seed(mut self, seed: HashSeed) -> Self {
        self.seed = seed;
        self
    }

    fn hash(&self, key: &Key) -> u64 {
        self.hash_in("", key)
    }

    /// The hash of `key` under `prefix`: the hash of their concatenation (the hasher reads
    /// a stream of bytes), computed without joining them.
    fn hash_in(&self, prefix: &str, key: &Key) -> u64 {
        let mut h = SipHasher13::new_with_keys(self.seed.0, self.seed.1);
        h.write(prefix.as_bytes());
        h.write(key.as_str().as_bytes());
        h.finish()
    }

    /// The key's hash and its shard.
    fn locate<'k>(&self, key: &'k Key) -> (Probe<'k>, &B::Mutex<Shard<A::State>>) {
        self.locate_in("", key)
    }

    /// The hash and shard of `key` under `prefix`.
    fn locate_in<'k>(
        &self,
        prefix: &'k str,
        key: &'k Key,
    ) -> (Probe<'k>, &B::Mutex<Shard<A::State>>) {
        let hash = self.hash_in(prefix, key);
        let probe = Probe { hash, prefix, key };
        (probe, &self.shards[self.shard_index(hash)])
    }

    /// The shard a hash lives in.
    fn shard_index(&self, hash: u64) -> usize {
        // The map uses the hash's low bits; the shard takes the high ones. The modulo keeps the
        // index below `shards.len()`, so it fits in usize.
        ((hash >> 32) % self.shards.len() as u64) as usize
    }

    /// The index of the shard holding `key` (tests check that a multi-key step really
    /// spans several shards).
    pub fn shard_of(&self, key: &Key) -> usize {
        self.shard_index(self.hash(key))
    }

    /// One request at several keys in one atomic step, all or nothing
    /// ([`ratelab_core::all::decide_all`]), each key under its own item's algorithm: admitted
    /// and spent at every key, or denied and spent at none.
    ///
    /// The keys' shards are locked in ascending index order, one global order, so concurrent
    /// steps over overlapping keys cannot deadlock, and held across the reads, the decision
    /// and the writes. A new key that would not fit makes an admitted step fail with
    /// [`StoreError::Full`], before anything is written. One call: one round trip.
    pub fn apply_all(
        &self,
        items: &[Item<'_, A>],
        now: Nanos,
    ) -> Result<AllDecision<A::State>, LimitError> {
        for (i, a) in items.iter().enumerate() {
            if items[..i].iter().any(|b| b.key == a.key) {
                return Err(LimitError::RepeatedKey);
            }
        }
        let probes: Vec<Probe<'_>> = items
            .iter()
            .map(|it| Probe {
                hash: self.hash(it.key),
                prefix: "",
                key: it.key,
            })
            .collect();
        let mut by_shard: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
        for (i, p) in probes.iter().enumerate() {
            by_shard
                .entry(self.shard_index(p.hash))
                .or_default()
                .push(i);
        }
        let groups: Vec<(usize, Vec<usize>)> = by_shard.into_iter().collect();
        let mut states = vec![None; items.len()];
        let mut room = true;
        let mut decide = |states: &[Option<A::State>], room: bool| {
            let none = || vec![None; items.len()];
            let parts: Vec<Part<'_, A>> = items
                .iter()
                .zip(states)
                .map(|(it, s)| Part {
                    algorithm: it.algorithm,
                    state: *s,
                    cost: it.cost,
                })
                .collect();
            let d = match decide_all(&parts, now) {
                Ok(d) => d,
                Err((_, e)) => return (Err(LimitError::Cost(e)), none()),
            };
            if d.allowed && !room {
                return (Err(LimitError::Store(StoreError::Full)), none());
            }
            let writes = d
                .parts
                .iter()
                .zip(items)
                .map(|((effect, _), it)| match effect {
                    Effect::Spent(s) => Some((*s, now.saturating_add(it.algorithm.ttl(s, now)))),
                    Effect::Denied | Effect::Unspent => None,
                })
                .collect();
            (Ok(d), writes)
        };
        let ctx = Nested {
            groups: &groups,
            probes: &probes,
            now,
        };
        self.nested(&ctx, 0, &mut states, &mut room, &mut decide).0
    }

    /// Locks the shard of group `level`, reads its keys, goes on to the next group (or
    /// decides, past the last), then writes its keys' new states and unlocks: every lock is
    /// held across the decision, and taken in the groups' ascending shard order.
    fn nested<R>(
        &self,
        ctx: &Nested<'_, '_>,
        level: usize,
        states: &mut [Option<A::State>],
        room: &mut bool,
        decide: &mut Decide<'_, A::State, R>,
    ) -> (R, Writes<A::State>) {
        let Some((shard, members)) = ctx.groups.get(level) else {
            return decide(states, *room);
        };
        let max = self.max_keys_per_shard;
        self.shards[*shard].with(|shard| {
            if level == 0 {
                shard.calls += 1;
            }
            let new = |shard: &Shard<A::State>| {
                members
                    .iter()
                    .filter(|&&i| !shard.map.contains_key(&ctx.probes[i]))
                    .count()
            };
            if new(shard) > 0 && shard.map.len() + new(shard) > max {
                // The sweep may drop this step's own expired keys: count again after it.
                shard.sweep(ctx.now);
                if shard.map.len() + new(shard) > max {
                    *room = false;
                }
            }
            for &i in members {
                states[i] = shard.live(&ctx.probes[i], ctx.now);
            }
            let (r, writes) = self.nested(ctx, level + 1, states, room, decide);
            for &i in members {
                if let Some((state, expires_at)) = writes[i] {
                    // Room for every new key was checked above, under this same lock.
                    let _ = shard.put(&ctx.probes[i], state, expires_at, ctx.now, usize::MAX);
                }
            }
            (r, writes)
        })
    }

    /// Drops every entry expired at `now`; returns how many were dropped.
    pub fn purge_expired(&self, now: Nanos) -> usize {
        self.shards
            .iter()
            .map(|s| {
                s.with(|shard| {
                    let before = shard.map.len();
                    shard.map.retain(|_, e| e.expires_at > now);
                    shard.cursor = 0;
                    before - shard.map.len()
                })
            })
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
                        .map(|(k, _)| k.key.key()),
                )
            });
        }
        keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        keys.truncate(limit);
        keys
    }

    /// `key`'s entry as held, live or expired: its state and when it expires (what a replica
    /// copies after each write).
    pub fn entry(&self, key: &Key) -> Option<(A::State, Nanos)> {
        let (probe, shard) = self.locate(key);
        shard.with(|shard| shard.map.get(&probe).map(|e| (e.state, e.expires_at)))
    }

    /// Writes `key`'s entry as a replica applies a copied one: `state`, expiring at
    /// `expires_at`, at `now` (a full store refuses a new key, as for any write).
    pub fn restore(
        &self,
        key: &Key,
        state: A::State,
        expires_at: Nanos,
        now: Nanos,
    ) -> Result<(), StoreError> {
        let max = self.max_keys_per_shard;
        let (probe, shard) = self.locate(key);
        shard.with(|shard| shard.put(&probe, state, expires_at, now, max))
    }

    /// Deletes `key`'s entry, live or not; whether there was one.
    pub fn remove(&self, key: &Key) -> bool {
        let (probe, shard) = self.locate(key);
        shard.with(|shard| shard.map.swap_remove(&probe).is_some())
    }

    /// Deletes `key`'s entry only if it has expired at `now` (a compare-and-delete): a bucket
    /// written since it was found expired stays. Whether one was deleted.
    pub fn remove_expired(&self, key: &Key, now: Nanos) -> bool {
        let (probe, shard) = self.locate(key);
        shard.with(|shard| {
            let expired = shard.map.get(&probe).is_some_and(|e| e.expires_at <= now);
            expired && shard.map.swap_remove(&probe).is_some()
        })
    }

    /// Calls served and entries held, summed over shards.
    pub fn stats(&self) -> StoreStats {
        self.shards.iter().fold(StoreStats::default(), |acc, s| {
            s.with(|shard| StoreStats {
                calls: acc.calls + shard.calls,
                entries: acc.entries + shard.map.len() as u64,
                swept: acc.swept + shard.swept,
            })
        })
    }
}

impl<S: Copy> Shard<S> {
    fn live(&self, probe: &Probe<'_>, now: Nanos) -> Option<S> {
        self.map
            .get(probe)
            .filter(|e| e.expires_at > now)
            .map(|e| e.state)
    }

    /// Looks at up to [`PURGE_STEPS`] entries from the cursor and drops the expired ones;
    /// whether any was dropped.
    fn sweep(&mut self, now: Nanos) -> bool {
        let mut freed = false;
        for _ in 0..PURGE_STEPS {
            if self.map.is_empty() {
                break;
            }
            if self.cursor >= self.map.len() {
                self.cursor = 0;
            }
            self.swept += 1;
            let expired = self
                .map
                .get_index(self.cursor)
                .is_some_and(|(_, e)| e.expires_at <= now);
            if expired {
                // The last entry moves into the cursor's place: look at it next.
                self.map.swap_remove_index(self.cursor);
                freed = true;
            } else {
                self.cursor += 1;
            }
        }
        freed
    }

    fn put(
        &mut self,
        probe: &Probe<'_>,
        state: S,
        expires_at: Nanos,
        now: Nanos,
        max: usize,
    ) -> Result<(), StoreError> {
        if let Some(e) = self.map.get_mut(probe) {
            *e = Entry { state, expires_at };
            return Ok(());
        }
        if self.map.len() >= max && !self.sweep(now) {
            return Err(StoreError::Full);
        }
        let slot = Slot {
            hash: probe.hash,
            key: probe.owned(),
        };
        self.map.insert(slot, Entry { state, expires_at });
        Ok(())
    }
}

impl<A: Algorithm, B: SyncBackend> Store for MemoryStore<A, B> {
    type Algorithm = A;

    fn algorithm(&self) -> &A {
        &self.algorithm
    }

    fn get(&self, key: &Key, now: Nanos) -> Result<Option<A::State>, StoreError> {
        let (probe, shard) = self.locate(key);
        Ok(shard.with(|shard| {
            shard.calls += 1;
            shard.live(&probe, now)
        }))
    }

    fn set(&self, key: &Key, state: A::State, ttl: Nanos, now: Nanos) -> Result<(), StoreError> {
        let max = self.max_keys_per_shard;
        let (probe, shard) = self.locate(key);
        shard.with(|shard| {
            shard.calls += 1;
            shard.put(&probe, state, now.saturating_add(ttl), now, max)
        })
    }

    fn apply(&self, key: &Key, now: Nanos, cost: u64) -> Result<Decision, LimitError> {
        self.apply_with(key, &self.algorithm, now, cost)
    }
}

impl<A: Algorithm, B: SyncBackend> MemoryStore<A, B> {
    /// The atomic path ([`Store::apply`]) under `algorithm` instead of the store's own: one
    /// limit's step in a store that several limits share.
    pub fn apply_with(
        &self,
        key: &Key,
        algorithm: &A,
        now: Nanos,
        cost: u64,
    ) -> Result<Decision, LimitError> {
        self.apply_with_clock(key, algorithm, || now, cost)
    }

    /// [`MemoryStore::apply_with`] at the time `clock` reads once the key's shard is locked:
    /// the store's own clock, read where Redis reads `TIME`, inside the step. Decisions on
    /// one key then see their times in the order they are made, however many threads race.
    pub fn apply_with_clock(
        &self,
        key: &Key,
        algorithm: &A,
        clock: impl FnOnce() -> Nanos,
        cost: u64,
    ) -> Result<Decision, LimitError> {
        self.apply_with_clock_in("", key, algorithm, clock, cost)
    }

    /// [`MemoryStore::apply_with_clock`] at the key `prefix` followed by `key`, which a
    /// prefixed client ([`crate::SharedClient`]) calls without joining the two: the prefix
    /// must be one [`Key::prefixed`] accepts.
    pub(crate) fn apply_with_clock_in(
        &self,
        prefix: &str,
        key: &Key,
        algorithm: &A,
        clock: impl FnOnce() -> Nanos,
        cost: u64,
    ) -> Result<Decision, LimitError> {
        let max = self.max_keys_per_shard;
        let (probe, shard) = self.locate_in(prefix, key);
        shard.with(|shard| {
            let now = clock();
            shard.calls += 1;
            let entry = shard.map.get_mut(&probe);
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
                    None => shard.put(&probe, next, expires_at, now, max)?,
                }
            }
            Ok(decision)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::TokenBucket;

    fn shards_of(store: &MemoryStore<TokenBucket>) -> Vec<usize> {
        (0..64)
            .map(|i| {
                let key = Key::new(&format!("client:{i}")).unwrap();
                let (_, shard) = store.locate(&key);
                store
                    .shards
                    .iter()
                    .position(|s| core::ptr::eq(s, shard))
                    .unwrap()
            })
            .collect()
    }

    #[test]
    fn shard_placement_follows_the_hash_keys() {
        let bucket = TokenBucket::per_second(1, 1).unwrap();
        let a = MemoryStore::seeded(bucket, 1);
        assert_eq!(shards_of(&a), shards_of(&MemoryStore::seeded(bucket, 1)));
        assert_ne!(shards_of(&a), shards_of(&MemoryStore::seeded(bucket, 2)));
        // Production stores draw their keys: two of them place the same keys differently.
        assert_ne!(
            shards_of(&MemoryStore::new(bucket)),
            shards_of(&MemoryStore::new(bucket))
        );
    }

    #[test]
    fn a_prefixed_decision_is_the_decision_at_the_joined_key() {
        use crate::Store;
        let bucket = TokenBucket::per_second(3, 1).unwrap();
        let store = MemoryStore::seeded(bucket, 1);
        let (prefix, key) = ("limit:a:", Key::new("k").unwrap());
        let joined = Key::prefixed(prefix, &key).unwrap();
        assert_eq!(store.hash_in(prefix, &key), store.hash(&joined));
        let at = |ms| move || Nanos::from_millis(ms);
        let d = store
            .apply_with_clock_in(prefix, &key, &bucket, at(0), 1)
            .unwrap();
        assert_eq!(d.remaining, 2);
        // The same entry under its joined name, and under the prefixed one again.
        assert_eq!(store.apply(&joined, Nanos::ZERO, 1).unwrap().remaining, 1);
        let d = store
            .apply_with_clock_in(prefix, &key, &bucket, at(0), 1)
            .unwrap();
        assert_eq!(d.remaining, 0);
        // A key that is only a suffix or a prefix of the stored one is another bucket.
        let near = store
            .apply_with_clock_in("limit:", &Key::new("a:k").unwrap(), &bucket, at(0), 1)
            .unwrap();
        assert!(
            !near.allowed,
            "limit: + a:k is the same text: the same, spent bucket"
        );
        let other = store
            .apply_with_clock_in("limit:b:", &key, &bucket, at(0), 1)
            .unwrap();
        assert_eq!(other.remaining, 2);
        assert_eq!(store.apply(&key, Nanos::ZERO, 1).unwrap().remaining, 2);
    }

    #[test]
    fn a_conditional_delete_spares_a_bucket_written_since_it_expired() {
        use crate::Store;
        let bucket = TokenBucket::per_second(2, 1).unwrap();
        let store = MemoryStore::seeded(bucket, 1);
        let key = Key::new("k").unwrap();
        store.apply(&key, Nanos::ZERO, 1).unwrap();
        // Full again (expired) after 1 s: deleted.
        assert!(store.remove_expired(&key, Nanos::from_millis(1_000)));
        assert!(!store.remove(&key), "already gone");
        // Written again, so live at 1.5 s: kept, and its state with it.
        store.apply(&key, Nanos::from_millis(1_200), 1).unwrap();
        assert!(!store.remove_expired(&key, Nanos::from_millis(1_500)));
        let d = store.apply(&key, Nanos::from_millis(1_500), 1).unwrap();
        assert_eq!(
            d.remaining, 0,
            "the kept bucket still holds its spent token"
        );
    }

    #[test]
    fn keys_either_side_of_the_inline_length_are_found_and_listed() {
        use crate::Store;
        let bucket = TokenBucket::per_second(2, 1).unwrap();
        let store = MemoryStore::seeded(bucket, 1);
        let at = |ms| move || Nanos::from_millis(ms);
        // Prefix and key together 38 bytes (inline) and 39 (boxed); and a key of 39 bytes
        // with no prefix.
        let short = Key::new(&"s".repeat(INLINE - 7)).unwrap();
        let long = Key::new(&"l".repeat(INLINE - 6)).unwrap();
        let bare = Key::new(&"b".repeat(INLINE + 1)).unwrap();
        for (key, inline) in [(&short, true), (&long, false)] {
            let joined = Key::prefixed("limit:x", key).unwrap();
            let text = Text::new("limit:x", key);
            assert_eq!(matches!(text, Text::Inline { .. }), inline);
            assert_eq!(text.bytes(), joined.as_str().as_bytes());
            store
                .apply_with_clock_in("limit:x", key, &bucket, at(0), 1)
                .unwrap();
            let again = store
                .apply_with_clock_in("limit:x", key, &bucket, at(0), 1)
                .unwrap();
            assert_eq!(again.remaining, 0, "the same bucket, found again");
            assert!(!store.apply(&joined, Nanos::ZERO, 1).unwrap().allowed);
        }
        store.apply(&bare, Nanos::ZERO, 1).unwrap();
        assert_eq!(store.apply(&bare, Nanos::ZERO, 1).unwrap().remaining, 0);
        let listed: Vec<String> = store
            .expired_keys(Nanos::from_millis(10_000), 10)
            .iter()
            .map(|k| k.as_str().to_owned())
            .collect();
        let mut expected = vec![
            bare.as_str().to_owned(),
            format!("limit:x{}", long.as_str()),
            format!("limit:x{}", short.as_str()),
        ];
        expected.sort();
        assert_eq!(listed, expected);
    }
}
