//! The shuttle model shared by the shuttle test binaries: N gateways take the last token of
//! one key through the real `MemoryStore`, built on shuttle's mutex through the store's
//! `SyncBackend` seam.

use ratelab_core::{Nanos, TokenBucket};
use ratelab_store::backend::{BackendMutex, SyncBackend};
use ratelab_store::{Key, MemoryStore, Path, decide};
use shuttle::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// shuttle's primitives behind the store's backend trait.
pub struct ShuttleBackend;

pub struct ShuttleMutex<T>(shuttle::sync::Mutex<T>);

impl<T: Send> BackendMutex<T> for ShuttleMutex<T> {
    fn new(value: T) -> Self {
        ShuttleMutex(shuttle::sync::Mutex::new(value))
    }

    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self
            .0
            .lock()
            .expect("no thread panics while holding the lock"))
    }
}

impl SyncBackend for ShuttleBackend {
    type Mutex<T: Send + 'static> = ShuttleMutex<T>;
}

/// Executions run, counted outside shuttle so a test can report it.
#[derive(Debug, Default)]
pub struct Counter(AtomicU64);

impl Counter {
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The model: a bucket of capacity `gateways` drained to one token, then `gateways` threads
/// each ask for a token at the same instant on `path`. Panics (which shuttle reports with the
/// failing schedule) if more than one is admitted, or none.
pub fn take_last_token(
    path: Path,
    gateways: usize,
    executions: std::sync::Arc<Counter>,
) -> impl Fn() + Send + Sync + 'static {
    move || {
        executions.0.fetch_add(1, Ordering::Relaxed);
        let bucket = TokenBucket::per_second(gateways as u64, 1).expect("valid policy");
        let store = Arc::new(MemoryStore::<_, ShuttleBackend>::with_backend(
            bucket, 1, 16,
        ));
        let key = Key::new("user:ana").expect("valid key");
        for _ in 1..gateways {
            let d = decide(&*store, Path::Atomic, &key, Nanos(0), 1).expect("in-memory store");
            assert!(d.allowed);
        }
        let handles: Vec<_> = (0..gateways)
            .map(|_| {
                let (store, key) = (store.clone(), key.clone());
                shuttle::thread::spawn(move || {
                    decide(&*store, path, &key, Nanos(0), 1).expect("in-memory store")
                })
            })
            .collect();
        let admitted = handles
            .into_iter()
            .map(|h| h.join().expect("gateway thread"))
            .filter(|d| d.allowed)
            .count();
        assert!(
            admitted <= 1,
            "lost update: {admitted} of {gateways} gateways admitted with one token left"
        );
        assert_eq!(admitted, 1, "nobody admitted with one token left");
    }
}

/// Runs `check` (which must panic through shuttle) and returns the panic message.
pub fn expect_violation(check: impl FnOnce()) -> String {
    let err = std::panic::catch_unwind(std::panic::AssertUnwindSafe(check))
        .expect_err("shuttle must find the lost update on the naive path");
    err.downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}
