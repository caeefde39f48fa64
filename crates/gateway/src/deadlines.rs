//! The store calls' deadlines under tokio: every call waiting on a thread is bounded by one
//! timer, that thread's sweeper's, rather than one timer each.
//!
//! A tokio timer registered earlier than the time its driver last planned to wake at makes
//! the driver wake up its thread, and that plan is made only when the thread parks: every
//! call that registered its own timer between two parks paid a system call (an `eventfd`
//! write) for it, about one every other request under load on Redis (`scripts/syscalls-http.sh`).
//! Here a call registers its deadline in its thread's table; one task, the sweeper, sleeps
//! until the earliest deadline in it, wakes the calls whose deadline has come and sleeps
//! again. A call that completes takes its entry out. The sweeper re-arms its timer when it
//! wakes, and earlier only when a call's deadline comes before the one it sleeps until:
//! deadlines of one length come in order, so under a steady load it wakes about once per
//! deadline's length, whatever the rate.
//!
//! A table serves one runtime on one thread: its sweeper is spawned on that runtime by the
//! first call that waits there. A call on another runtime (or after the runtime has gone: a
//! test's, and then the next test's on the same thread) gets a table of its own; a table left
//! behind (by a thread that took another, or that ended) has its sweeper end once its last
//! call is done. Time is tokio's ([`tokio::time::Instant`]): a call bounded from its first
//! wait ([`within`]) under a paused test clock is cut where `tokio::time::timeout` would cut
//! it, while one bounded from a monotonic reading ([`within_from`], which `TokioEnv` uses) is
//! bounded on the system's clock, which a paused tokio clock does not follow. The sweeper's
//! timer may stay armed after its calls are done, so a paused clock may advance to it.

use crate::waiting::{ByDeadline, Ticket};
use ratelab_core::Nanos;
use ratelab_store::{Sent, SentReply, StoreError};
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::runtime::{Handle, Id};
use tokio::time::{Instant, Sleep};

/// Runs `fut` for at most `after` from now; `None` if it did not finish in time. `fut` is
/// polled first, and its deadline registered only if it waits. The call is held in place,
/// not moved into a future of its own: a store call's future is kilobytes, and each move
/// copies it.
pub(crate) fn within<F: Future>(after: Duration, fut: F) -> Within<F> {
    Within {
        fut,
        from: None,
        after,
        entry: None,
    }
}

/// [`within`] from `started`, nanoseconds after [`epoch`] (a monotonic reading taken before
/// the call): the clock is not read when the call waits. The deadline is worked out then,
/// not here: a call built where it is held is not copied in.
pub(crate) fn within_from<F: Future>(started: Nanos, after: Duration, fut: F) -> Within<F> {
    Within {
        fut,
        from: Some(started),
        after,
        entry: None,
    }
}

/// A store call sent ahead of its reply ([`ratelab_store::Sent`]), bounded as [`within_from`]
/// bounds a call: what [`crate::Env::bound_sent`] gives under tokio. Its output is the reply,
/// or `None` once the bound has passed.
pub struct BoundedSent(Within<Sent>);

impl std::fmt::Debug for BoundedSent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoundedSent").finish_non_exhaustive()
    }
}

impl BoundedSent {
    /// `sent`, bounded from `started` (as [`within_from`]) for at most `after`.
    pub(crate) fn new(started: Nanos, after: Duration, sent: Sent) -> Self {
        BoundedSent(within_from(started, after, sent))
    }
}

impl Future for BoundedSent {
    type Output = Option<Result<SentReply, StoreError>>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

/// The start of the clock the gateway's monotonic readings count from (tokio's: its timers,
/// and so the sweeper's, run on it).
pub(crate) fn epoch() -> std::time::Instant {
    static EPOCH: OnceLock<std::time::Instant> = OnceLock::new();
    *EPOCH.get_or_init(std::time::Instant::now)
}

/// One runtime's waiting calls on one thread, by deadline, and their sweeper.
struct Table {
    /// Each waiting call's waker, by its deadline.
    waiting: ByDeadline<Instant, Waker>,
    /// The sweeper's waker (`None` before its first poll, and once it has ended).
    sweeper: Option<Waker>,
    /// The deadline the sweeper sleeps until (`None`: no call waits).
    armed_for: Option<Instant>,
    /// The runtime the sweeper runs on.
    runtime: Id,
    /// Whether the sweeper task still runs (its runtime has not dropped it).
    alive: bool,
    /// Whether the thread has since taken another table: the sweeper ends once no call waits.
    left_behind: bool,
}

type Shared = Arc<Mutex<Table>>;

/// A thread's table: a thread that ends leaves it behind, so its sweeper ends too.
struct Local(Option<Shared>);

impl Drop for Local {
    fn drop(&mut self) {
        if let Some(t) = self.0.take() {
            leave_behind(&t);
        }
    }
}

thread_local! {
    static TABLE: RefCell<Local> = const { RefCell::new(Local(None)) };
}

/// Marks `t` left behind and wakes its sweeper, which ends once its last call is done.
#[cold]
#[inline(never)]
fn leave_behind(t: &Shared) {
    let sweeper = {
        let mut t = lock(t);
        t.left_behind = true;
        t.sweeper.take()
    };
    if let Some(w) = sweeper {
        w.wake();
    }
}

fn lock(t: &Shared) -> MutexGuard<'_, Table> {
    t.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new table for this thread and `runtime`, its sweeper spawned; the one the thread had is
/// left behind. (Once per thread and runtime: kept out of line, away from every call's
/// registration.)
#[cold]
#[inline(never)]
fn fresh(runtime: Id) -> Shared {
    let (t, sleep, old) = TABLE.with(|cell| {
        // Made before the table is kept: a runtime without timers panics in the caller, as
        // `tokio::time::timeout` does, and leaves no table without a sweeper.
        let sleep = tokio::time::sleep_until(Instant::now());
        let t: Shared = Arc::new(Mutex::new(Table {
            waiting: ByDeadline::default(),
            sweeper: None,
            armed_for: None,
            runtime,
            alive: true,
            left_behind: false,
        }));
        let old = cell.borrow_mut().0.replace(t.clone());
        (t, sleep, old)
    });
    // Spawned, and the old table's sweeper woken, with the thread's cell released.
    tokio::spawn(sweep(Alive(t.clone()), sleep));
    if let Some(old) = old {
        leave_behind(&old);
    }
    t
}

/// The sweeper's hold on its table: marks it dead when the task ends or is dropped, so a
/// call still registered there moves to a live table.
struct Alive(Shared);

impl Drop for Alive {
    fn drop(&mut self) {
        let (waiting, sweeper) = {
            let mut t = lock(&self.0);
            t.alive = false;
            let waiting: Vec<Waker> = t.waiting.values().cloned().collect();
            (waiting, t.sweeper.take())
        };
        drop(sweeper);
        // A call still waiting (on another runtime than the one that dropped the sweeper)
        // moves to a live table when it next runs.
        waiting.into_iter().for_each(Waker::wake);
    }
}

/// Wakes each call whose deadline has come, then sleeps until the next deadline, or until a
/// call with an earlier one (or the first after none) wakes it. Ends when its table has been
/// left behind and no call waits in it.
async fn sweep(table: Alive, sleep: Sleep) {
    let mut sleep = std::pin::pin!(sleep);
    // The deadline the timer last fired at: everything up to it is due, whatever the clock
    // reads now.
    let mut fired = None;
    std::future::poll_fn(|cx| {
        loop {
            let now = fired.map_or_else(Instant::now, |at: Instant| at.max(Instant::now()));
            let mut due = Vec::new();
            let mut replaced = None;
            let next = {
                let mut t = lock(&table.0);
                while let Some(w) = t.waiting.pop_due(now) {
                    due.push(w);
                }
                let next = t.waiting.earliest();
                t.armed_for = next;
                if next.is_none() && t.left_behind {
                    None
                } else {
                    if !t.sweeper.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        replaced = t.sweeper.replace(cx.waker().clone());
                    }
                    Some(next)
                }
            };
            drop(replaced);
            // Woken with the lock released: a woken call finds its entry gone.
            due.into_iter().for_each(Waker::wake);
            let Some(next) = next else {
                return Poll::Ready(());
            };
            let Some(next) = next else {
                return Poll::Pending;
            };
            if sleep.deadline() != next {
                sleep.as_mut().reset(next);
            }
            if sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            fired = Some(next);
        }
    })
    .await
}

pin_project_lite::pin_project! {
    /// A call bounded by its thread's sweeper ([`within`]).
    pub(crate) struct Within<F> {
        #[pin]
        fut: F,
        // Where the bound runs from, in nanoseconds after `epoch` (`None`: its first wait).
        from: Option<Nanos>,
        after: Duration,
        // The call's table, its ticket there and its deadline, once it has waited.
        entry: Option<(Shared, Ticket, Instant)>,
    }

    impl<F> PinnedDrop for Within<F> {
        fn drop(this: Pin<&mut Self>) {
            leave(this.project().entry);
        }
    }
}

impl<F: Future> Future for Within<F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.fut.poll(cx) {
            leave(this.entry);
            return Poll::Ready(Some(out));
        }
        let Some((table, ticket, at)) = this.entry.as_ref() else {
            let start = this
                .from
                .and_then(|from| Instant::from_std(epoch()).checked_add(Duration::from(from)))
                .unwrap_or_else(Instant::now);
            // As `tokio::time::timeout`: a bound past the clock's range is no bound.
            let at = start
                .checked_add(*this.after)
                .unwrap_or_else(|| start + Duration::from_secs(30 * 365 * 86_400));
            *this.entry = Some(register(at, cx.waker()));
            return Poll::Pending;
        };
        let mut t = lock(table);
        let alive = t.alive;
        match t.waiting.get_mut(ticket) {
            // Taken out by the sweeper: the deadline has come.
            None => {
                drop(t);
                *this.entry = None;
                Poll::Ready(None)
            }
            // Its sweeper has gone: the same deadline, in a live table.
            Some(_) if !alive => {
                let at = *at;
                let old = t.waiting.remove(ticket);
                drop(t);
                drop(old);
                *this.entry = Some(register(at, cx.waker()));
                Poll::Pending
            }
            Some(w) => {
                // The waker it replaces is dropped with the lock released.
                let old =
                    (!w.will_wake(cx.waker())).then(|| std::mem::replace(w, cx.waker().clone()));
                drop(t);
                drop(old);
                Poll::Pending
            }
        }
    }
}

/// Registers a call waiting until `at`, woken by `waker`, in the table of this thread and
/// the current runtime, with a live sweeper: the table, the call's ticket and `at`. A thread with no
/// such table (none yet, one of another runtime, or one whose sweeper has gone) makes a new
/// one; the check and the insert are made under one lock.
fn register(at: Instant, waker: &Waker) -> (Shared, Ticket, Instant) {
    let runtime = Handle::current().id();
    let mut kept = TABLE.with(|cell| cell.borrow().0.clone());
    // A runtime shutting down drops each sweeper as it is spawned: the third new table is
    // kept.
    let mut made = 0;
    loop {
        let table = kept.take().unwrap_or_else(|| {
            made += 1;
            fresh(runtime)
        });
        let (ticket, sweeper) = {
            let mut t = lock(&table);
            if !(t.alive && t.runtime == runtime) && made < 3 {
                continue;
            }
            let ticket = t.waiting.insert(at, waker.clone());
            // The sweeper sleeps past this deadline, or not at all: woken to re-arm.
            let early = t.armed_for.is_none_or(|armed| at < armed);
            if early {
                t.armed_for = Some(at);
            }
            (ticket, if early { t.sweeper.clone() } else { None })
        };
        if let Some(w) = sweeper {
            w.wake();
        }
        return (table, ticket, at);
    }
}

/// Takes a call's entry out of its table, if it waited; wakes a left-behind table's sweeper
/// to end when this was its last call.
fn leave(entry: &mut Option<(Shared, Ticket, Instant)>) {
    if let Some((table, ticket, _)) = entry.take() {
        let (entry, sweeper) = {
            let mut t = lock(&table);
            let entry = t.waiting.remove(&ticket);
            let last = t.left_behind && t.waiting.is_empty();
            (entry, if last { t.sweeper.take() } else { None })
        };
        drop(entry);
        if let Some(w) = sweeper {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{TABLE, lock, within};
    use std::future::Future;
    use std::time::Duration;
    use tokio::time::Instant;

    /// Whether `elapsed` is `ms`, late by no more than a loaded machine's scheduling.
    fn at_ms(elapsed: Duration, ms: u64) -> bool {
        elapsed >= Duration::from_millis(ms) && elapsed < Duration::from_millis(ms + 40)
    }

    /// `fut`, or a failure if it runs past 5 s: a call the sweeper never wakes fails the test
    /// rather than hanging it.
    async fn bounded<F: std::future::Future>(fut: F) -> F::Output {
        tokio::time::timeout(Duration::from_secs(5), fut)
            .await
            .expect("answered within 5 s")
    }

    fn never() -> std::future::Pending<()> {
        std::future::pending()
    }

    #[tokio::test]
    async fn a_call_that_outlives_its_deadline_is_cut_there_and_one_that_does_not_completes() {
        let start = Instant::now();
        let slow = within(
            Duration::from_millis(50),
            tokio::time::sleep(Duration::from_secs(5)),
        );
        assert_eq!(bounded(slow).await, None);
        assert!(at_ms(start.elapsed(), 50), "{:?}", start.elapsed());
        let start = Instant::now();
        let fast = within(Duration::from_millis(50), async {
            tokio::time::sleep(Duration::from_millis(10)).await;
            7
        });
        assert_eq!(bounded(fast).await, Some(7));
        assert!(at_ms(start.elapsed(), 10), "{:?}", start.elapsed());
        assert_eq!(
            within(Duration::ZERO, async { 8 }).await,
            Some(8),
            "ready at once"
        );
    }

    #[tokio::test]
    async fn calls_with_deadlines_out_of_order_are_each_cut_at_their_own() {
        let start = Instant::now();
        let call = |ms: u64| async move {
            let out = within(Duration::from_millis(ms), never()).await;
            (ms, out, start.elapsed())
        };
        let (a, b, c, d, e) =
            bounded(async { tokio::join!(call(300), call(100), call(200), call(100), call(50)) })
                .await;
        for (ms, out, elapsed) in [a, b, c, d, e] {
            assert_eq!(out, None, "{ms} ms");
            assert!(at_ms(elapsed, ms), "{ms} ms: {elapsed:?}");
        }
        // A call with an earlier deadline than the one the sweeper already sleeps until.
        let (long, short) = bounded(async {
            tokio::join!(call(300), async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                let start = Instant::now();
                let out = within(Duration::from_millis(50), never()).await;
                (out, start.elapsed())
            })
        })
        .await;
        assert_eq!((long.1, short.0), (None, None));
        assert!(at_ms(short.1, 50), "{:?}", short.1);
        // And a call made after them all were cut, with nothing else waiting.
        let start = Instant::now();
        assert_eq!(
            bounded(within(Duration::from_millis(20), never())).await,
            None
        );
        assert!(at_ms(start.elapsed(), 20), "{:?}", start.elapsed());
    }

    #[tokio::test]
    async fn calls_that_complete_or_are_dropped_leave_nothing_in_the_table() {
        // Spawned on this runtime's one thread: every call waits in its table.
        let calls: Vec<_> = (0..200u64)
            .map(|i| {
                tokio::spawn(async move {
                    let done = tokio::time::sleep(Duration::from_millis(i % 20));
                    within(Duration::from_millis(10), done).await.is_some()
                })
            })
            .collect();
        let answered = bounded(async {
            let mut out = Vec::new();
            for c in calls {
                out.push(c.await.unwrap());
            }
            out
        })
        .await;
        // Those that slept well inside their 10 ms were answered; those well past it, cut.
        for (i, answered) in answered.iter().enumerate() {
            match i % 20 {
                0..5 => assert!(answered, "call {i}"),
                15.. => assert!(!answered, "call {i}"),
                _ => {}
            }
        }
        // A waiting call dropped before its deadline.
        let dropped = within(Duration::from_secs(60), never());
        assert!(
            tokio::time::timeout(Duration::from_millis(5), dropped)
                .await
                .is_err()
        );
        let left = TABLE.with(|t| t.borrow().0.as_ref().map(|t| lock(t).waiting.len()));
        assert_eq!(left, Some(0), "every entry was taken out");
    }

    #[test]
    fn a_thread_whose_runtime_has_gone_starts_a_sweeper_on_the_next() {
        for _ in 0..3 {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let start = std::time::Instant::now();
            let out = rt.block_on(bounded(within(Duration::from_millis(5), never())));
            assert_eq!(out, None);
            assert!(start.elapsed() >= Duration::from_millis(5));
        }
    }

    #[test]
    fn a_call_whose_sweeper_went_with_its_runtime_is_still_cut_at_its_deadline() {
        // The call waits on `first` (its deadline in `first`'s table), `first` goes, and the
        // same call goes on waiting on `second`.
        let first = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let start = std::time::Instant::now();
        let mut call = Box::pin(within(Duration::from_millis(100), never()));
        first.block_on(std::future::poll_fn(|cx| {
            assert!(call.as_mut().poll(cx).is_pending());
            std::task::Poll::Ready(())
        }));
        drop(first);
        let second = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(second.block_on(bounded(call)), None);
        assert!(at_ms(start.elapsed(), 100), "{:?}", start.elapsed());
    }

    #[test]
    fn a_thread_that_ends_leaves_its_table_and_its_sweeper_ends() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let handle = rt.handle().clone();
        let table = std::thread::spawn(move || {
            handle.block_on(within(Duration::from_millis(1), never()));
            TABLE
                .with(|t| t.borrow().0.clone())
                .expect("the thread's table")
        })
        .join()
        .unwrap();
        let start = std::time::Instant::now();
        while lock(&table).alive {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "the sweeper still runs"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_call_on_another_runtime_of_the_thread_is_not_left_to_a_sweeper_nobody_runs() {
        // `first` spawns the thread's first sweeper, and then is never driven again.
        let first = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        first.block_on(within(Duration::from_millis(1), never()));
        let second = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let start = std::time::Instant::now();
        let out = second.block_on(bounded(within(Duration::from_millis(50), never())));
        assert_eq!(out, None);
        assert!(at_ms(start.elapsed(), 50), "{:?}", start.elapsed());
        drop(first);
    }
}
