//! The store's replica (`store.replica`): asynchronous replication, as Redis replicates a
//! primary, and the promotion a `store_failover` fault performs.
//!
//! After each write the store node ships what the write left behind — a key's entry, a plain
//! counter, the lease table with its fence — to the replica. Each copy arrives a lag after the
//! write, drawn uniformly from the scenario's range on the replica's own seeded stream, and no
//! copy overtakes an earlier one: the replication stream is one ordered connection. The
//! replica lives outside the store node, so killing the node leaves it standing.
//!
//! At a failover the primary dies at `kill`. The replica is promoted with every copy that had
//! arrived by then; the copies still on the way are lost, and with them the writes they carried
//! (acknowledged or not). The promoted store starts from the replica's state, and the log
//! goes on from there: the next failover promotes a replica of the promoted store.
//!
//! With `wait`, a write's reply is held until its copy has arrived, as `WAIT 1 0` after it
//! would: an acknowledged write is then never lost to a failover.

use crate::faults::ReplicaControl;
use crate::planted::Counters;
use crate::rng::SimRng;
use ratelab_check::history::Layer;
use ratelab_core::{Algorithm, Nanos};
use ratelab_store::{Fence, Key, LeaseTable, MemoryStore};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// What one write left behind, as its copy carries it.
#[derive(Clone, Debug)]
pub(crate) enum Copied<S> {
    /// A per-key entry of `layer`: its state and expiry, or `None` once deleted.
    Key {
        layer: Layer,
        key: String,
        entry: Option<(S, Nanos)>,
    },
    /// A plain counter's count and expiry, or `None` once deleted.
    Counter {
        key: String,
        entry: Option<(u64, Option<Nanos>)>,
    },
    /// The cleanup job's lease table and fence.
    Job { leases: LeaseTable, fence: Fence },
}

/// One copy on its way: written at `at`, on the replica from `arrives`.
#[derive(Clone, Debug)]
struct Shipped<S> {
    at: Nanos,
    arrives: Nanos,
    copy: Copied<S>,
}

/// What a copy overwrites on the replica: one key of one layer, one counter, or the job's
/// state.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Slot {
    Key(u8, String),
    Counter(String),
    Job,
}

impl<S> Copied<S> {
    fn slot(&self) -> Slot {
        match self {
            Copied::Key { layer, key, .. } => {
                let layer = match layer {
                    Layer::PerKey => 0,
                    Layer::Edge => 1,
                };
                Slot::Key(layer, key.clone())
            }
            Copied::Counter { key, .. } => Slot::Counter(key.clone()),
            Copied::Job { .. } => Slot::Job,
        }
    }
}

/// The replica: the latest copy it holds of each slot, and the copies still on their way, in
/// stream order. A copy that has arrived replaces the slot's older one, so the replica keeps
/// one copy per key rather than one per write.
#[derive(Debug)]
pub(crate) struct Replica<S> {
    lag: (u64, u64),
    rng: SimRng,
    held: BTreeMap<Slot, (Nanos, Copied<S>)>,
    on_the_way: VecDeque<Shipped<S>>,
}

/// The stores a replay fills: what the store node starts from.
pub(crate) struct Restored<'a, A: Algorithm> {
    pub per_key: &'a MemoryStore<A>,
    pub edge: Option<&'a MemoryStore<A>>,
    pub counters: &'a mut Counters,
    pub job: &'a mut (LeaseTable, Fence),
}

impl<S: Copy> Replica<S> {
    /// A replica whose copies arrive `lag` ns (min, max) after their writes, drawn from `rng`.
    pub(crate) fn new(lag: (u64, u64), rng: SimRng) -> Replica<S> {
        Replica {
            lag,
            rng,
            held: BTreeMap::new(),
            on_the_way: VecDeque::new(),
        }
    }

    /// Ships `copy` of a write made at `now`; returns when it arrives on the replica.
    pub(crate) fn ship(&mut self, now: Nanos, copy: Copied<S>) -> Nanos {
        self.settle(now);
        let lag = Nanos(self.rng.between(self.lag.0, self.lag.1));
        let behind = self.on_the_way.back().map_or(Nanos::ZERO, |s| s.arrives);
        let arrives = now.saturating_add(lag).max(behind);
        self.on_the_way.push_back(Shipped {
            at: now,
            arrives,
            copy,
        });
        arrives
    }

    /// Takes in every copy that has arrived by `now`.
    fn settle(&mut self, now: Nanos) {
        while self.on_the_way.front().is_some_and(|s| s.arrives <= now) {
            if let Some(s) = self.on_the_way.pop_front() {
                self.held.insert(s.copy.slot(), (s.at, s.copy));
            }
        }
    }

    /// Promotes the replica as the primary dies at `kill`: the copies that had not arrived
    /// by then are dropped. Returns the lost writes, each with the time it was made.
    pub(crate) fn promote(&mut self, kill: Nanos) -> Vec<(Nanos, Copied<S>)> {
        self.settle(kill);
        self.on_the_way.drain(..).map(|s| (s.at, s.copy)).collect()
    }

    /// Forgets every copy: a crash that takes the replica down with the primary.
    pub(crate) fn clear(&mut self) {
        self.held.clear();
        self.on_the_way.clear();
    }

    /// Applies every copy the replica holds to empty stores (after [`Replica::promote`], or
    /// at the first start, when it holds none).
    pub(crate) fn replay<A: Algorithm<State = S>>(&self, into: Restored<'_, A>) {
        // In the order the writes were made, each at its own time: then the copies restored
        // and still live at any write's time were live on the primary then too, so a store
        // as large as the primary has room for each (in key order, a copy long expired could
        // take the place of a live one, and a live bucket would come back full).
        let mut copies: Vec<&(Nanos, Copied<S>)> = self.held.values().collect();
        copies.sort_by_key(|(at, _)| *at);
        for (at, copy) in copies {
            match copy {
                Copied::Key { layer, key, entry } => {
                    let store = match layer {
                        Layer::PerKey => Some(into.per_key),
                        Layer::Edge => into.edge,
                    };
                    let (Some(store), Ok(k), Some((state, expires_at))) =
                        (store, Key::new(key), entry)
                    else {
                        continue;
                    };
                    let _ = store.restore(&k, *state, *expires_at, *at);
                }
                Copied::Counter { key, entry } => into.counters.restore(key, *entry),
                Copied::Job { leases, fence } => *into.job = (leases.clone(), *fence),
            }
        }
    }
}

impl<S: Copy + Send> ReplicaControl for Mutex<Replica<S>> {
    fn clear(&self) {
        self.lock().expect("replica").clear();
    }

    fn promote(&self, kill: Nanos) -> Vec<(Nanos, Option<String>)> {
        let lost = self.lock().expect("replica").promote(kill);
        lost.into_iter()
            .map(|(at, copy)| {
                let key = match copy {
                    Copied::Key {
                        layer: Layer::PerKey,
                        key,
                        ..
                    } => Some(key),
                    _ => None,
                };
                (at, key)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::TokenBucket;

    fn counter(key: &str, n: u64) -> Copied<u64> {
        Copied::Counter {
            key: key.into(),
            entry: Some((n, None)),
        }
    }

    #[test]
    fn copies_arrive_in_order_and_a_promotion_keeps_only_those_that_arrived() {
        let mut r = Replica::new((1_000, 9_000), SimRng::new(7, 1));
        let mut arrivals = Vec::new();
        for i in 0..50 {
            let at = r.ship(Nanos(i * 100), counter(&format!("c{}", i % 5), i));
            assert!(at >= Nanos(i * 100 + 1_000));
            assert!(arrivals.last().is_none_or(|&last| at >= last), "{at:?}");
            arrivals.push(at);
        }
        let arrived = arrivals.iter().filter(|&&a| a <= Nanos(3_000)).count();
        let lost = r.promote(Nanos(3_000));
        assert_eq!(lost.len(), 50 - arrived);
        // The lost are the last writes, in order.
        assert!(lost.windows(2).all(|w| w[0].0 < w[1].0));
        // What arrived is held once per counter: the latest of each.
        assert_eq!(r.held.len(), arrived.min(5));
        r.clear();
        assert!(r.promote(Nanos(u64::MAX)).is_empty() && r.held.is_empty());
    }

    #[test]
    fn a_replay_restores_what_arrived_and_not_what_was_lost() {
        let bucket = TokenBucket::per_second(10, 10).unwrap();
        let mut r = Replica::new((5, 5), SimRng::new(1, 1));
        let store = MemoryStore::new(bucket);
        let key = Key::new("k").unwrap();
        let mut states = Vec::new();
        for t in [10, 20, 30] {
            ratelab_store::Store::apply(&store, &key, Nanos(t), 1).unwrap();
            let entry = store.entry(&key);
            states.push(entry);
            r.ship(
                Nanos(t),
                Copied::Key {
                    layer: Layer::PerKey,
                    key: "k".into(),
                    entry,
                },
            );
        }
        // The third write (arriving at 35) is lost to a kill at 30.
        assert_eq!(r.promote(Nanos(30)).len(), 1);
        let (fresh, mut counters, mut job) = (
            MemoryStore::new(bucket),
            Counters::default(),
            (LeaseTable::new(), Fence::new()),
        );
        r.replay(Restored {
            per_key: &fresh,
            edge: None,
            counters: &mut counters,
            job: &mut job,
        });
        assert_eq!(fresh.entry(&key), states[1]);
        assert_ne!(fresh.entry(&key), states[2]);
    }
}
