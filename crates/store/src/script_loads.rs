//! One `SCRIPT LOAD` per connection for a burst of `NOSCRIPT` replies.
//!
//! After Redis restarts (or `SCRIPT FLUSH`), every call in flight gets `NOSCRIPT` at once. If
//! each loaded the script itself, a busy limiter would send the script's whole text once per
//! waiting call, each compiled by Redis in turn, while the calls' deadlines run. Here the calls
//! that find the script missing take turns: the first loads it, and a call whose turn comes
//! after a load that finished since it sent its `EVALSHA` only sends its `EVALSHA` again.
//!
//! A caller takes a [`Reload`] ([`ScriptLoads::start`]) before it sends its `EVALSHA`, and
//! after each `NOSCRIPT` reply asks it what [`Next`]. Inside: the call's count of its
//! script's loads is read before the send ([`ScriptLoads::seen`]); on `NOSCRIPT` the call
//! takes the connection's [`ScriptLoads::turn`]. If [`Turn::loaded_since`] (its script was
//! loaded after the call was sent), it gives the turn up and sends its `EVALSHA` again; should
//! the script be missing still (Redis restarted again), it takes a turn once more and loads it
//! regardless. Otherwise it loads the script, marks the turn [`Turn::loaded`], and retries. A
//! `NOSCRIPT` after its own load is the caller's reply. A turn given up without a load (a
//! caller's timeout) passes to the next caller, which loads the script itself.
//!
//! Loads are counted per script (by the address of the string holding its SHA, which its store
//! keeps for as long as it runs), so the calls of one script never take another script's load
//! for their own: the first [`SCRIPTS`] scripts a connection runs have a counter each,
//! and any beyond share one more (a script that shares it may be loaded twice in a burst,
//! never left missing).
//!
//! One turn serves every script of a connection. While loads keep failing (a node that cannot
//! be reached), the calls that find a script missing try to load it one after another, each
//! within its own timeout, rather than all at once.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// The scripts with a counter of their own.
pub(crate) const SCRIPTS: usize = 7;

/// The loads made over one connection, and the turn to make the next.
#[derive(Debug, Default)]
pub(crate) struct ScriptLoads {
    /// Per script: the address of its name (0 for a free entry) and the loads of it
    /// completed; the last entry counts the loads of every script past [`SCRIPTS`].
    done: [(AtomicUsize, AtomicU64); SCRIPTS + 1],
    /// Held by the caller whose turn it is.
    turn: tokio::sync::Mutex<()>,
}

/// A caller's turn to load a script; the next caller's comes when it is dropped.
pub(crate) struct Turn<'a> {
    done: &'a AtomicU64,
    since: bool,
    _held: tokio::sync::MutexGuard<'a, ()>,
}

impl ScriptLoads {
    /// `script`'s counter: its own entry, taken on first use, or the shared last one.
    fn counter(&self, script: &str) -> &AtomicU64 {
        let id = script.as_ptr() as usize;
        // Read first: every call looks its script up, and only a new script writes.
        for (key, done) in &self.done[..SCRIPTS] {
            let k = key.load(Ordering::Acquire);
            if k == id {
                return done;
            }
            if k == 0 {
                match key.compare_exchange(0, id, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => return done,
                    Err(k) if k == id => return done,
                    Err(_) => {}
                }
            }
        }
        &self.done[SCRIPTS].1
    }

    /// The loads of `script` completed so far: read before sending the `EVALSHA` that may
    /// find it missing.
    pub(crate) fn seen(&self, script: &str) -> u64 {
        self.counter(script).load(Ordering::Acquire)
    }

    /// Waits for this caller's turn to load `script`, for a call sent when
    /// [`ScriptLoads::seen`] was `seen`.
    pub(crate) async fn turn(&self, script: &str, seen: u64) -> Turn<'_> {
        let held = self.turn.lock().await;
        let done = self.counter(script);
        Turn {
            done,
            since: done.load(Ordering::Acquire) != seen,
            _held: held,
        }
    }
}

/// What a call does after a `NOSCRIPT` reply ([`Reload::after_missing`]).
pub(crate) enum Next<'a> {
    /// The reply is the caller's, whatever it says.
    Reply,
    /// Send the call again: its script was loaded since it was sent.
    Resend,
    /// Load the script, mark the turn [`Turn::loaded`], and send the call again.
    Load(Turn<'a>),
}

/// One call's way through a `NOSCRIPT` burst, by this module's protocol: at most one resend
/// after another caller's load and one load of its own.
pub(crate) struct Reload<'a> {
    loads: &'a ScriptLoads,
    script: &'a str,
    seen: u64,
    passes: u8,
}

impl ScriptLoads {
    /// A call of `script` about to be sent.
    pub(crate) fn start<'a>(&'a self, script: &'a str) -> Reload<'a> {
        Reload {
            loads: self,
            script,
            seen: self.seen(script),
            passes: 0,
        }
    }
}

impl<'a> Reload<'a> {
    /// What to do after a `NOSCRIPT` reply (any other reply is the caller's): a load of the
    /// script that finished since the call was sent is tried first, without holding the turn
    /// (the burst's calls resend together); then, or if the script is missing still (Redis
    /// restarted again), the call loads it. After the call's own load, a `NOSCRIPT` is its
    /// reply ([`Next::Reply`]).
    pub(crate) async fn after_missing(&mut self) -> Next<'a> {
        if self.passes >= 2 {
            return Next::Reply;
        }
        let turn = self.loads.turn(self.script, self.seen).await;
        if self.passes == 0 && turn.loaded_since() {
            self.passes = 1;
            drop(turn);
            self.seen = self.loads.seen(self.script);
            return Next::Resend;
        }
        self.passes = 2;
        Next::Load(turn)
    }
}

impl Turn<'_> {
    /// The script was loaded after the caller's `EVALSHA` was sent: sending it again may find
    /// the script.
    pub(crate) fn loaded_since(&self) -> bool {
        self.since
    }

    /// The caller loaded its script; the turn passes on.
    pub(crate) fn loaded(self) {
        self.done.fetch_add(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::{SCRIPTS, ScriptLoads};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    /// Sixteen calls that all find the script missing, on a runtime with two workers, each
    /// going through the burst by [`super::Reload`] against a stand-in server (a flag for
    /// "the script is loaded", a short sleep for a load): one load in all, every call answered.
    #[test]
    fn a_burst_of_missing_scripts_makes_one_load() {
        use super::Next;
        static SCRIPT: &str = "return 1";
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let loads = Arc::new(ScriptLoads::default());
        let made = Arc::new(AtomicU32::new(0));
        let there = Arc::new(AtomicBool::new(false));
        rt.block_on(async {
            // Every call is sent before any load: each reads the count, then finds the script
            // missing.
            let sent = Arc::new(tokio::sync::Barrier::new(16));
            let calls = (0..16).map(|_| {
                let (loads, made, there) = (loads.clone(), made.clone(), there.clone());
                let sent = sent.clone();
                tokio::spawn(async move {
                    let mut reload = loads.start(SCRIPT);
                    sent.wait().await;
                    let mut missing = true;
                    while missing {
                        match reload.after_missing().await {
                            Next::Reply => break,
                            Next::Resend => missing = !there.load(Ordering::SeqCst),
                            Next::Load(turn) => {
                                tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                                made.fetch_add(1, Ordering::SeqCst);
                                there.store(true, Ordering::SeqCst);
                                turn.loaded();
                                missing = false;
                            }
                        }
                    }
                    missing
                })
            });
            for c in calls.collect::<Vec<_>>() {
                let missing = tokio::time::timeout(std::time::Duration::from_secs(10), c)
                    .await
                    .expect("every turn comes")
                    .unwrap();
                assert!(!missing, "every call ends with the script found");
            }
        });
        assert_eq!(made.load(Ordering::SeqCst), 1);
        assert_eq!(loads.seen(SCRIPT), 1);
    }

    /// A turn given up without a load leaves the next caller to load; one script's load is
    /// not another's; past the scripts with a counter of their own, the rest share one.
    #[test]
    fn loads_are_counted_per_script_and_a_turn_given_up_passes_on() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let texts: Vec<String> = (0..SCRIPTS + 2).map(|i| format!("return {i}")).collect();
        rt.block_on(async {
            let loads = ScriptLoads::default();
            let (a, b) = (texts[0].as_str(), texts[1].as_str());
            let seen = loads.seen(a);
            drop(loads.turn(a, seen).await);
            let turn = loads.turn(a, seen).await;
            assert!(!turn.loaded_since(), "nothing was loaded");
            turn.loaded();
            assert!(loads.turn(a, seen).await.loaded_since());
            let seen_b = loads.seen(b);
            assert!(
                !loads.turn(b, seen_b).await.loaded_since(),
                "a's load is not b's"
            );
            assert_eq!((loads.seen(a), loads.seen(b)), (1, 0));
            // Every script past the first SCRIPTS shares the last counter.
            for t in &texts[2..] {
                loads.seen(t);
            }
            let (x, y) = (texts[SCRIPTS].as_str(), texts[SCRIPTS + 1].as_str());
            let seen_y = loads.seen(y);
            loads.turn(x, loads.seen(x)).await.loaded();
            assert!(loads.turn(y, seen_y).await.loaded_since());
            assert_eq!(loads.seen(a), 1);
        });
    }

    /// Redis restarted again after another call's load: the call that resent finds the script
    /// missing still and loads it itself; after its own load, a `NOSCRIPT` is its reply.
    #[test]
    fn a_script_missing_after_the_resend_is_loaded_then_the_reply_is_the_callers() {
        use super::Next;
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            // One string: scripts are told apart by the address of their name.
            let script = String::from("return 2");
            let loads = ScriptLoads::default();
            let (mut first, mut second) = (loads.start(&script), loads.start(&script));
            let Next::Load(turn) = first.after_missing().await else {
                panic!("the first call loads");
            };
            turn.loaded();
            assert!(matches!(second.after_missing().await, Next::Resend));
            let Next::Load(turn) = second.after_missing().await else {
                panic!("missing after the resend: the second call loads");
            };
            turn.loaded();
            assert!(matches!(second.after_missing().await, Next::Reply));
            assert!(matches!(first.after_missing().await, Next::Reply));
            assert_eq!(loads.seen(&script), 2);
        });
    }
}
