//! # ratelab-harness
//!
//! The model-checking harnesses for any [`Algorithm`]: loom ([`loom`]) and shuttle
//! ([`shuttle`]) explore the thread interleavings of one race over the real
//! [`MemoryStore`](ratelab_store::MemoryStore), built on their instrumented mutexes through
//! the store's [`SyncBackend`](ratelab_store::SyncBackend) seam.
//!
//! The race ([`Race`]): a key is brought to its last unit(s) by requests decided one after
//! another, then N gateways (threads) each ask for one more at the same instant, on the
//! naive or the atomic path. A correct store admits exactly what the algorithm admits when
//! the same requests are decided one at a time ([`Race::expected`], computed by calling the
//! algorithm alone, never the store): requests of equal cost at one instant are
//! interchangeable, so every serial order admits the same number. More is a lost update;
//! fewer is a store that lost a request's effect the other way.
//!
//! The naive path is the canary: the checkers must find its lost update. The atomic path
//! must hold in every interleaving explored.
//!
//! Nothing here needs the simulator: the crate builds with or without `--cfg madsim`, so a
//! limiter's own crate can run loom and shuttle over it with this crate alone
//! (`ratelab_sim::harness` is the same module, for those who use the cluster too).
#![warn(missing_docs)]

/// A model checker's mutex behind the store's backend trait: the backend type and a wrapper
/// around the checker's mutex (a wrapper, because of the orphan rule).
macro_rules! backend {
    ($checker:literal, $backend:ident, $mutex:ident, $($inner:ident)::+) => {
        #[doc = concat!($checker, "'s primitives behind the store's backend trait.")]
        #[derive(Clone, Copy, Debug, Default)]
        pub struct $backend;

        #[doc = concat!("`", stringify!($($inner)::+), "` as a [`BackendMutex`].")]
        #[derive(Debug)]
        pub struct $mutex<T>($($inner)::+<T>);

        impl<T: Send> BackendMutex<T> for $mutex<T> {
            fn new(value: T) -> Self {
                $mutex(<$($inner)::+<T>>::new(value))
            }

            fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
                f(&mut self
                    .0
                    .lock()
                    .expect("no thread panics while holding the lock"))
            }
        }

        impl SyncBackend for $backend {
            type Mutex<T: Send + 'static> = $mutex<T>;
        }
    };
}

pub mod loom;
pub mod shuttle;

use ratelab_core::{Algorithm, Decision, Nanos};
use ratelab_store::{Key, Path, Store, decide};

/// The key every race is run on.
pub const RACE_KEY: &str = "user:ana";

/// One race: `gateways` threads take what is left of one key at `now`.
#[derive(Clone, Debug)]
pub struct Race<A> {
    /// The algorithm under test.
    pub algorithm: A,
    /// The store path the gateways take.
    pub path: Path,
    /// Threads racing for the key.
    pub gateways: usize,
    /// Requests decided one at a time (on the atomic path) before the race.
    pub before: u64,
    /// Each request's cost.
    pub cost: u64,
    /// The instant every request arrives.
    pub now: Nanos,
}

impl<A: Algorithm + Clone + Send + Sync + 'static> Race<A> {
    /// `gateways` threads race on `path` for the last unit of `algorithm`'s quota: the key
    /// first takes `quota().limit - 1` requests of cost 1 at time 0.
    pub fn last_unit(algorithm: A, path: Path, gateways: usize) -> Race<A> {
        let before = algorithm.quota().limit.saturating_sub(1);
        Race {
            algorithm,
            path,
            gateways,
            before,
            cost: 1,
            now: Nanos::ZERO,
        }
    }

    /// The same race with `before` requests decided first.
    pub fn after(mut self, before: u64) -> Race<A> {
        self.before = before;
        self
    }

    /// The algorithm alone, one request at a time: the decisions of the requests before the
    /// race, and how many of the racing requests it admits.
    pub fn expected(&self) -> (Vec<bool>, usize) {
        let mut state = None;
        let mut decide_one = || {
            let (next, d) = self
                .algorithm
                .transition(state, self.now, self.cost)
                .expect("the race's cost is admissible");
            if d.allowed {
                state = Some(next);
            }
            d.allowed
        };
        let before: Vec<bool> = (0..self.before).map(|_| decide_one()).collect();
        let admitted = (0..self.gateways).filter(|_| decide_one()).count();
        (before, admitted)
    }

    /// One execution over `store`: the requests before the race (requiring the decisions
    /// the algorithm alone makes, `want`), then the racing gateways as the model checker's
    /// threads (`spawn` starts one, `join` waits for its decision).
    fn execute<P, H>(
        &self,
        store: P,
        want: &[bool],
        spawn: impl Fn(P, Race<A>) -> H,
        join: impl Fn(H) -> Decision,
    ) -> Vec<Decision>
    where
        P: std::ops::Deref + Clone,
        P::Target: Store<Algorithm = A>,
    {
        self.prepare(&*store, &race_key(), want);
        let handles: Vec<H> = (0..self.gateways)
            .map(|_| spawn(store.clone(), self.clone()))
            .collect();
        handles.into_iter().map(join).collect()
    }

    /// Decides the requests before the race through `store`, requiring the decisions the
    /// algorithm alone makes (`want`).
    fn prepare<S: Store<Algorithm = A> + ?Sized>(&self, store: &S, key: &Key, want: &[bool]) {
        for (i, &allowed) in want.iter().enumerate() {
            let d = decide(store, Path::Atomic, key, self.now, self.cost).expect("in-memory store");
            assert_eq!(
                d.allowed, allowed,
                "request {i} before the race: the store decided otherwise than the algorithm"
            );
        }
    }

    /// One racing request.
    fn take<S: Store<Algorithm = A> + ?Sized>(&self, store: &S) -> Decision {
        decide(store, self.path, &race_key(), self.now, self.cost).expect("in-memory store")
    }
}

fn race_key() -> Key {
    Key::new(RACE_KEY).expect("valid key")
}

/// `gateways` of `decisions`, one line.
pub fn describe(decisions: &[Decision]) -> String {
    decisions
        .iter()
        .enumerate()
        .map(|(g, d)| {
            let verdict = if d.allowed { "admitted" } else { "denied" };
            format!("gateway {g} {verdict} (remaining {})", d.remaining)
        })
        .collect::<Vec<_>>()
        .join(", ")
}
