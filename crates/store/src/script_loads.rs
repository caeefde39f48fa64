//! One `SCRIPT LOAD` per connection for a burst of `NOSCRIPT` replies.
//!
//! After Redis restarts (or `SCRIPT FLUSH`), every call in flight gets `NOSCRIPT` at once. If
//! each loaded the script itself, a busy limiter would send the script's whole text once per
//! waiting call, each compiled by Redis in turn, while the calls' deadlines run. Here the calls
//! that find the script missing take turns: the first loads it, and a call whose turn comes
//! after a load that finished since it sent its `EVALSHA` only sends its `EVALSHA` again.
//!
//! A caller reads [`ScriptLoads::seen`] before it sends its `EVALSHA`; on `NOSCRIPT` it takes
//! its [`ScriptLoads::turn`]. If [`Turn::loaded_since`], it gives the turn up and sends its
//! `EVALSHA` again (having read `seen` anew); should the script still be missing (the load was
//! another script's, or Redis restarted again) it takes a turn once more. Otherwise it loads
//! the script, marks the turn [`Turn::loaded`], and retries. A turn given up without a load (a
//! caller's timeout) passes to the next caller, which loads the script itself.

use std::sync::atomic::{AtomicU64, Ordering};

/// The loads made over one connection, and the turn to make the next.
#[derive(Debug, Default)]
pub(crate) struct ScriptLoads {
    /// Loads completed so far (of any script).
    done: AtomicU64,
    /// Held by the caller whose turn it is.
    turn: tokio::sync::Mutex<()>,
}

/// A caller's turn to load a script; the next caller's comes when it is dropped.
pub(crate) struct Turn<'a> {
    loads: &'a ScriptLoads,
    since: bool,
    _held: tokio::sync::MutexGuard<'a, ()>,
}

impl ScriptLoads {
    /// The loads completed so far: read before sending the `EVALSHA` that may find the script
    /// missing.
    pub(crate) fn seen(&self) -> u64 {
        self.done.load(Ordering::Acquire)
    }

    /// Waits for this caller's turn, for a call sent when [`ScriptLoads::seen`] was `seen`.
    pub(crate) async fn turn(&self, seen: u64) -> Turn<'_> {
        let held = self.turn.lock().await;
        Turn {
            loads: self,
            since: self.seen() != seen,
            _held: held,
        }
    }
}

impl Turn<'_> {
    /// A load finished after the caller's `EVALSHA` was sent: sending it again may find the
    /// script.
    pub(crate) fn loaded_since(&self) -> bool {
        self.since
    }

    /// The caller loaded its script; the turn passes on.
    pub(crate) fn loaded(self) {
        self.loads.done.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::ScriptLoads;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Sixteen calls that all find the script missing, their turns taken concurrently on a
    /// runtime with two workers: one load in all.
    #[test]
    fn a_burst_of_missing_scripts_makes_one_load() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let loads = Arc::new(ScriptLoads::default());
        let made = Arc::new(AtomicU32::new(0));
        let script_there = Arc::new(std::sync::atomic::AtomicBool::new(false));
        rt.block_on(async {
            let seen: Vec<u64> = (0..16).map(|_| loads.seen()).collect();
            let calls = seen.into_iter().map(|seen| {
                let (loads, made, there) = (loads.clone(), made.clone(), script_there.clone());
                tokio::spawn(async move {
                    let turn = loads.turn(seen).await;
                    if turn.loaded_since() && there.load(Ordering::SeqCst) {
                        return;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                    made.fetch_add(1, Ordering::SeqCst);
                    there.store(true, Ordering::SeqCst);
                    turn.loaded();
                })
            });
            for c in calls.collect::<Vec<_>>() {
                tokio::time::timeout(std::time::Duration::from_secs(10), c)
                    .await
                    .expect("every turn comes")
                    .unwrap();
            }
        });
        assert_eq!(made.load(Ordering::SeqCst), 1);
        assert_eq!(loads.seen(), 1);
    }

    /// A turn given up without a load leaves the next caller to load; a load of another
    /// script (seen as a load since) still lets a caller load its own.
    #[test]
    fn a_turn_given_up_or_another_scripts_load_leaves_the_load_to_the_next() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let loads = ScriptLoads::default();
            let seen = loads.seen();
            drop(loads.turn(seen).await);
            let turn = loads.turn(seen).await;
            assert!(!turn.loaded_since(), "nothing was loaded");
            turn.loaded();
            let turn = loads.turn(seen).await;
            assert!(turn.loaded_since());
            turn.loaded();
            assert_eq!(loads.seen(), 2);
        });
    }
}
