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
//! the gateway's clock and the store's (and the answer's latency only shortens T). Only the
//! clocks' rates enter, and a drift of 10⁻⁴ on a wait of seconds is sub-millisecond.
//!
//! Fixed and sliding windows keep this property too (a window's count only grows until the
//! window ends, and `retry_after` names that end), as does any algorithm whose `retry_after`
//! is the time until the store admits again whatever happens meanwhile.
//!
//! Memory is bounded: at most `capacity` keys per limit; a full cache first drops expired
//! entries, then the oldest. An evicted key simply goes back to the store.

use ratelab_core::{Decision, Nanos};
use ratelab_store::Key;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

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
    /// Keys by insertion, oldest first (with the stamp they were inserted with).
    order: VecDeque<(Key, u64)>,
    next: u64,
}

/// A limit's denial cache.
#[derive(Debug)]
pub struct DenialCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

impl DenialCache {
    /// A cache of at most `capacity` keys (at least 1).
    pub fn new(capacity: usize) -> DenialCache {
        DenialCache {
            capacity: capacity.max(1),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The denial to answer a request of `cost` at `key` with, at monotonic time `now`: the
    /// store's, its waits counted down to `now`. `None` when the key is not denied for that
    /// cost any more (or never was).
    pub fn lookup(&self, key: &Key, cost: u64, now: Nanos) -> Option<Decision> {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let e = *inner.entries.get(key)?;
        if now >= e.until {
            inner.entries.remove(key);
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
            ..e.decision
        })
    }

    /// Remembers the store's `decision` for a request of `cost` at `key`, sent at monotonic
    /// time `sent`. Only a denial with a wait is kept.
    pub fn insert(&self, key: &Key, cost: u64, sent: Nanos, decision: &Decision) {
        let Some(wait) = decision
            .retry_after
            .filter(|w| !decision.allowed && *w > Nanos::ZERO)
        else {
            return;
        };
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let stamp = inner.next;
        inner.next += 1;
        let entry = Entry {
            until: sent.saturating_add(wait),
            cost,
            decision: *decision,
            sent,
            stamp,
        };
        if inner.entries.insert(key.clone(), entry).is_none() {
            while inner.entries.len() > self.capacity {
                Self::evict(&mut inner, sent);
            }
        }
        inner.order.push_back((key.clone(), stamp));
        // The queue holds one live item per entry plus stale ones; keep it bounded too.
        if inner.order.len() > 2 * self.capacity {
            let live: std::collections::BTreeSet<(Key, u64)> = inner
                .entries
                .iter()
                .map(|(k, e)| (k.clone(), e.stamp))
                .collect();
            inner.order.retain(|item| live.contains(item));
        }
    }

    /// Drops one entry: the oldest expired one among the first few, else the oldest.
    fn evict(inner: &mut Inner, now: Nanos) {
        while let Some((key, stamp)) = inner.order.pop_front() {
            let live = inner.entries.get(&key).is_some_and(|e| e.stamp == stamp);
            if live {
                inner.entries.remove(&key);
                return;
            }
        }
        // No queue left (cannot happen: every entry is queued); drop any expired entry.
        if let Some(k) = inner
            .entries
            .iter()
            .find(|(_, e)| e.until <= now)
            .map(|(k, _)| k.clone())
            .or_else(|| inner.entries.keys().next().cloned())
        {
            inner.entries.remove(&k);
        }
    }

    /// Keys held now.
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entries
            .len()
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
        }
    }

    #[test]
    fn answers_until_the_send_time_plus_the_wait_for_costs_at_least_the_denied_one() {
        let c = DenialCache::new(8);
        let k = Key::new("k").unwrap();
        c.insert(&k, 2, Nanos::from_millis(100), &denial(1_000));
        let d = c.lookup(&k, 2, Nanos::from_millis(600)).unwrap();
        assert!(!d.allowed);
        assert_eq!(d.retry_after, Some(Nanos::from_millis(500)));
        assert_eq!(d.reset_after, Nanos::from_millis(4_500));
        assert_eq!(d.limit, 5);
        assert!(
            c.lookup(&k, 1, Nanos::from_millis(600)).is_none(),
            "a smaller cost may fit"
        );
        assert!(c.lookup(&k, 3, Nanos::from_millis(1_099)).is_some());
        assert!(
            c.lookup(&k, 2, Nanos::from_millis(1_100)).is_none(),
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
        assert!(c.inner.lock().unwrap().order.len() <= 6);
    }
}
