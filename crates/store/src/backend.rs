//! The synchronisation primitives the in-memory store is built from, behind one trait.
//!
//! [`MemoryStore`](crate::MemoryStore) takes its mutex type from a [`SyncBackend`], so the very
//! same store code runs on `std` primitives in production and on loom's or shuttle's
//! instrumented primitives under the model checkers, with no `--cfg` flag: the model-checking
//! tests implement this trait for small wrappers around `loom::sync::Mutex` and
//! `shuttle::sync::Mutex`.

/// A family of synchronisation primitives.
pub trait SyncBackend: Send + Sync + 'static {
    /// The mutex type.
    type Mutex<T: Send + 'static>: BackendMutex<T>;
}

/// A mutex used only through a closure, so backends need no guard types.
pub trait BackendMutex<T>: Send + Sync {
    /// Wraps `value`.
    fn new(value: T) -> Self;
    /// Runs `f` with exclusive access to the value.
    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R;
}

/// The production backend: `std::sync::Mutex`.
#[derive(Clone, Copy, Debug, Default)]
pub struct StdBackend;

/// `std::sync::Mutex` as a [`BackendMutex`].
#[derive(Debug, Default)]
pub struct StdMutex<T>(std::sync::Mutex<T>);

impl<T: Send> BackendMutex<T> for StdMutex<T> {
    fn new(value: T) -> Self {
        StdMutex(std::sync::Mutex::new(value))
    }

    fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        // A panic while holding the lock cannot leave a shard half-updated (every update is a
        // single insert or remove), so a poisoned lock is safe to keep using.
        let mut guard = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        f(&mut guard)
    }
}

impl SyncBackend for StdBackend {
    type Mutex<T: Send + 'static> = StdMutex<T>;
}
