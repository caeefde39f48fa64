//! The local denial cache: a gateway that was told a key is denied until T answers that
//! key's requests with 429 itself until T, without a store call.
//!
//! Why it never denies what the store would admit, for the token bucket (GCRA): a denial of
//! cost c at store time d says the bucket's theoretical arrival time TAT is more than
//! B·P − c·P ahead of d, and `retry_after` = r is exactly how long until it no longer is. TAT
//! never moves earlier: time passing leaves it where it is, and every admission, by any
//! gateway, pushes it later. So the store denies every request of cost ≥ c on that key at
//! every store time before d + r — whatever the other gateways do meanwhile. The cache
//! therefore answers only requests of cost at least the denied one's, and only until T.
//!
//! T is kept on the gateway's monotonic clock, never compared with the store's clock: the
//! cache stores T = s + r, where s is when the gateway *sent* the denied call. The store
//! decided at or after s, so T is no later than the true d + r, whatever the offset between
//! the gateway's clock and the store's (and the answer's latency only shortens T). The two
//! clocks' rates still enter — NTP slews a clock by up to 500 ppm, 1.8 s over an hour's wait
//! — so T is shortened by a thousandth of the wait, at least 1 ms. A store whose clock *steps*
//! forward (a wall clock set ahead), loses its state (a restart, an eviction, a failover) or
//! decides on the naive path (where a lost update can move TAT earlier) may admit before T;
//! the cache is not for those (the server refuses it with the naive path).
//!
//! Fixed and sliding windows keep this property too (a window's count only grows until the
//! window ends, and `retry_after` names that end), as does any algorithm whose `retry_after`
//! is the time until the store admits again whatever happens meanwhile.
//!
//! Memory is bounded: at most `capacity` keys per limit; a full cache drops the key inserted
//! longest ago (an evicted key simply goes back to the store), and an expired entry is
//! dropped when it is looked up.
//!
//! A cache that holds no key (none denied yet, or every one looked up after it expired, or
//! evicted) answers a lookup without taking its lock: the count of keys held is kept beside
//! the map. A lookup that races an insert and misses it goes to the
//! store, which decides the request as it would have without a cache.

use ratelab_core::{Decision, Nanos};
use ratelab_store::Key;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// One cached denial.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Denied until then, on the gateway's monotonic clock.
    until: Nanos,
    /// The denied cost: only requests costing at least this are answered.
    cost: u64,
    /// The store's denial.
    decision: Decision,
    /// When the denied call was sent (monotonic).
    sent: Nanos,
    /// Insertion number, to tell a stale eviction-queue entry from the live one.
    stamp: u64,
}

#[derive(Debug, Default)]
struct Inner {
    entries: BTreeMap<Key, Entry>,
    /// Keys by insertion stamp, oldest first: exactly one per entry.
    order: BTreeMap<u64, Key>,
    next: u64,
}

/// A limit's denial cache.
#[derive(Debug)]
pub struct DenialCache {
    capacity: usize,
    inner: Mutex<Inner>,
    /// How many keys `inner` holds, written under its lock after every change.
    held: AtomicUsize,
}

impl DenialCache {
    /// A cache of at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> DenialCache {
        DenialCache {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
            held: AtomicUsize::new(0),
        }
    }

    /// The denial to answer a request of `cost` at `key` with, at monotonic time `now`: the
    /// store's, its waits counted down to `now`. `None` when the key is not denied for that
    /// cost any more (or never was).
    pub fn lookup(&self, key: &Key, cost: u64, now: Nanos) -> Option<Decision> {
        if self.held.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let e = *inner.entries.get(key)?;
        if now >= e.until {
            inner.entries.remove(key);
            inner.order.remove(&e.stamp);
            self.held.store(inner.entries.len(), Ordering::Relaxed);
            return None;
        }
        if cost < e.cost {
            return None;
        }
        let elapsed = now.saturating_sub(e.sent);
        Some(Decision {
            allowed: false,
            remaining: 0,
            retry_after: Some(e.until.saturating_sub(now)),
            reset_after: e.decision.reset_after.saturating_sub(elapsed),
            full_after: e.decision.full_after.saturating_sub(elapsed),
            ..e.decision
        })
    }

    /// Remembers the store's `decision` for a request of `cost` at `key`, sent at monotonic
    /// time `sent`. Only a denial with a wait is kept, shortened by a thousandth of the wait
    /// (at least 1 ms) against clock-rate drift; an entry already held that covers at least as
    /// long, for costs at least as small, is kept instead.
    pub fn insert(&self, key: &Key, cost: u64, sent: Nanos, decision: &Decision) {
        let Some(wait) = decision.retry_after.filter(|_| !decision.allowed) else {
            return;
        };
        let margin = Nanos(wait.as_u64() / 1_000).max(Nanos::from_millis(1));
        let until = sent.saturating_add(wait.saturating_sub(margin));
        if until <= sent {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = inner.entries.get(key)
            && old.until >= until
            && old.cost <= cost
        {
            return;
        }
        let stamp = inner.next;
        inner.next += 1;
        let entry = Entry {
            until,
            cost,
            decision: *decision,
            sent,
            stamp,
        };
        if let Some(old) = inner.entries.insert(key.clone(), entry) {
            inner.order.remove(&old.stamp);
        }
        inner.order.insert(stamp, key.clone());
        while inner.entries.len() > self.capacity {
            let Some((_, oldest)) = inner.order.pop_first() else {
                break;
            };
            inner.entries.remove(&oldest);
        }
        self.held.store(inner.entries.len(), Ordering::Relaxed);
    }

    /// Keys held, as of the last change, read without the lock (an expired key counts until
    /// it is looked up or evicted).
    pub fn len(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn denial(retry_ms: u64) -> Decision {
        Decision {
            allowed: false,
            limit: 5,
            remaining: 0,
            reset_after: Nanos::from_millis(5_000),
            retry_after: Some(Nanos::from_millis(retry_ms)),
            full_after: Nanos::from_millis(9_000),
        }
    }

    #[test]
    fn answers_until_the_send_time_plus_the_wait_for_costs_at_least_the_denied_one() {
        let c = DenialCache::new(8);
        let k = Key::new("k").unwrap();
        c.insert(&k, 2, Nanos::from_millis(100), &denial(1_000));
        // Held until 100 ms + 1 000 ms, less a thousandth of the wait.
        let d = c.lookup(&k, 2, Nanos::from_millis(600)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Nanos::from_millis(499)));
        assert_eq!(d.reset_after, Nanos::from_millis(4_500));
        assert_eq!(d.full_after, Nanos::from_millis(8_500));
        assert_eq!(d.limit, 5);
        assert!(
            c.lookup(&k, 1, Nanos::from_millis(600)).is_none(),
            "a smaller cost may fit"
        );
        assert!(c.lookup(&k, 3, Nanos::from_millis(1_098)).is_some());
        assert!(
            c.lookup(&k, 2, Nanos::from_millis(1_099)).is_none(),
            "T has come"
        );
        assert!(c.is_empty(), "an expired entry is dropped when seen");
        // Admissions and waitless denials are not kept.
        let admitted = Decision {
            allowed: true,
            ..denial(0)
        };
        c.insert(&k, 1, Nanos::ZERO, &admitted);
        c.insert(&k, 1, Nanos::ZERO, &denial(0));
        assert!(c.is_empty());
        // Emptied, it answers again once a denial is kept.
        c.insert(&k, 1, Nanos::from_millis(2_000), &denial(1_000));
        assert_eq!(c.len(), 1);
        assert!(c.lookup(&k, 1, Nanos::from_millis(2_500)).is_some());
    }

    /// A denial that covers less time than one held, for a cost no smaller, leaves the held
    /// one in place; one for a smaller cost takes its place even if shorter.
    #[test]
    fn an_entry_that_covers_more_is_kept() {
        let c = DenialCache::new(8);
        let k = Key::new("k").unwrap();
        c.insert(&k, 2, Nanos::ZERO, &denial(10_000));
        for cost in [2, 3] {
            c.insert(&k, cost, Nanos::ZERO, &denial(1_000));
            assert!(
                c.lookup(&k, 2, Nanos::from_millis(5_000)).is_some(),
                "{cost}"
            );
        }
        c.insert(&k, 1, Nanos::ZERO, &denial(1_000));
        assert!(c.lookup(&k, 1, Nanos::from_millis(500)).is_some());
        assert!(c.lookup(&k, 2, Nanos::from_millis(5_000)).is_none());
    }

    #[test]
    fn memory_is_bounded_and_the_oldest_goes_first() {
        let c = DenialCache::new(3);
        let keys: Vec<Key> = (0..10)
            .map(|i| Key::new(&format!("k{i}")).unwrap())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            c.insert(k, 1, Nanos(i as u64), &denial(60_000));
            // Re-inserting a held key does not grow the cache.
            c.insert(k, 1, Nanos(i as u64), &denial(60_000));
            assert!(c.len() <= 3);
        }
        assert!(c.lookup(&keys[9], 1, Nanos(10)).is_some());
        assert!(c.lookup(&keys[6], 1, Nanos(10)).is_none(), "evicted");
        assert_eq!(c.inner.lock().unwrap().order.len(), 3);
        assert_eq!(
            c.len(),
            c.inner.lock().unwrap().entries.len(),
            "the count held is the map's"
        );
        // A shorter, costlier denial does not replace one that covers more.
        let k = &keys[9];
        c.insert(k, 2, Nanos(0), &denial(1_000));
        assert!(
            c.lookup(k, 1, Nanos(10)).is_some(),
            "the longer entry for cost 1 is kept"
        );
    }
}
