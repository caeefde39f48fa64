//! One timeout queue per gateway node.
//!
//! A madsim `Sleep` adds a timer to madsim's heap every time it is polled while pending, and a
//! `timeout` polls its `Sleep` every time the future it guards is woken: a store call that
//! wakes three times leaves three timers in the heap for the whole timeout, each expiring
//! later as a wasted wake-up. Here each gateway keeps its pending deadlines in one ordered
//! queue ([`ByDeadline`]: by deadline, then arrival), and one task per gateway sleeps until the
//! earliest of them: a deadline costs a slot taken and given back, and the task wakes about
//! once per timeout length while calls keep finishing in time.
//!
//! The queue reads only madsim's clock, on the gateway's node, so a paused node's timeouts
//! fire when it resumes, as its tasks run again.

use crate::lock::Lock;
use madsim::time::{Instant, TimeHandle};
use ratelab_gateway::waiting::{ByDeadline, Ticket};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

#[derive(Default)]
struct Queue {
    /// Each pending deadline and who waits on it; a deadline taken out has passed (or its
    /// call has ended).
    pending: ByDeadline<Instant, Option<Waker>>,
    /// The deadline the queue's task sleeps until, if it sleeps on one.
    target: Option<Instant>,
    /// The queue's task, to wake when a deadline earlier than its target arrives.
    task: Option<Waker>,
}

/// A gateway's timeouts.
pub(crate) struct Timeouts {
    queue: Lock<Queue>,
    /// madsim's clock, read directly rather than through its `clock_gettime` shim.
    time: TimeHandle,
}

impl std::fmt::Debug for Timeouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.queue.lock();
        f.debug_struct("Timeouts")
            .field("pending", &q.pending.len())
            .finish()
    }
}

impl Timeouts {
    /// A queue, with its task spawned on the current node.
    pub(crate) fn start() -> Arc<Timeouts> {
        let t = Arc::new(Timeouts {
            queue: Lock::default(),
            time: TimeHandle::current(),
        });
        madsim::task::spawn(t.clone().run());
        t
    }

    /// Runs `fut` until madsim's clock passes `after` from now (on its own, undilated
    /// scale); `None` if it does first. The deadline is set when the call is first polled,
    /// and the call is held in place: a wrapping `async fn` would keep a second copy of it.
    pub(crate) fn timeout<F: Future>(&self, after: Duration, fut: F) -> Timed<'_, F> {
        Timed {
            fut,
            queue: self,
            after,
            armed: None,
        }
    }

    /// Puts a deadline `after` from now in the queue, with the waker to wake when it passes,
    /// waking the queue's task when it is earlier than the one the task sleeps until.
    fn arm(&self, after: Duration, waker: &Waker) -> Entry<'_> {
        let deadline = self.time.now_instant() + after;
        let key = {
            let mut q = self.queue.lock();
            let key = q.pending.insert(deadline, Some(waker.clone()));
            if q.target.is_none_or(|t| deadline < t)
                && let Some(w) = q.task.take()
            {
                w.wake();
            }
            key
        };
        Entry { queue: self, key }
    }

    /// Fires every deadline that has passed; returns the next one.
    fn fire_due(&self) -> Option<Instant> {
        let now = self.time.now_instant();
        let mut q = self.queue.lock();
        while let Some(waiter) = q.pending.pop_due(now) {
            if let Some(w) = waiter {
                w.wake();
            }
        }
        q.pending.earliest()
    }

    async fn run(self: Arc<Self>) {
        loop {
            let next = self.fire_due();
            Park {
                queue: &self,
                target: next,
                sleep: next.map(madsim::time::sleep_until),
            }
            .await;
        }
    }
}

/// Removes a deadline from the queue when its future ends, however it ends.
struct Entry<'a> {
    queue: &'a Timeouts,
    key: Ticket,
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        let mut q = self.queue.queue.lock();
        q.pending.remove(&self.key);
    }
}

pin_project_lite::pin_project! {
    /// A future raced against its deadline ([`Timeouts::timeout`]).
    pub(crate) struct Timed<'a, F> {
        #[pin]
        fut: F,
        queue: &'a Timeouts,
        after: Duration,
        // The deadline's place in the queue, from the first poll (taken out when this ends,
        // however it ends).
        armed: Option<Entry<'a>>,
    }
}

impl<F: Future> Future for Timed<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let queue = *this.queue;
        // Armed on the first poll with this poll's waker: a future pending on its first poll
        // (a store call always is) needs no second look at the queue.
        let entry = match this.armed {
            Some(entry) => entry,
            None => {
                *this.armed = Some(queue.arm(*this.after, cx.waker()));
                return this.fut.poll(cx).map(Some);
            }
        };
        if let Poll::Ready(v) = this.fut.poll(cx) {
            return Poll::Ready(Some(v));
        }
        let mut q = queue.queue.lock();
        match q.pending.get_mut(&entry.key) {
            // Taken out by the queue's task: the deadline has passed.
            None => return Poll::Ready(None),
            // The waker is replaced only when it would wake another task.
            Some(Some(waker)) if waker.will_wake(cx.waker()) => {}
            Some(waker) => *waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

/// The queue's task between two deadlines: until its target passes, or an earlier deadline
/// arrives.
struct Park<'a> {
    queue: &'a Timeouts,
    target: Option<Instant>,
    sleep: Option<madsim::time::Sleep>,
}

impl Future for Park<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        {
            let mut q = self.queue.queue.lock();
            let earliest = q.pending.earliest();
            let earlier = match (earliest, self.target) {
                (Some(e), Some(t)) => e < t,
                (Some(_), None) => true,
                _ => false,
            };
            if earlier {
                q.target = None;
                return Poll::Ready(());
            }
            q.target = self.target;
            q.task = Some(cx.waker().clone());
        }
        match self.sleep.as_mut() {
            Some(s) => Pin::new(s).poll(cx),
            None => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(t: &Timeouts) -> usize {
        t.queue.lock().pending.len()
    }

    #[test]
    fn deadlines_fire_in_time_are_removed_when_done_and_an_earlier_one_rearms_the_queue() {
        let rt = madsim::runtime::Runtime::new();
        rt.block_on(async {
            let t = Timeouts::start();
            let ms = Duration::from_millis;
            // A future that finishes first: its value, and its deadline gone.
            let quick = t.timeout(ms(50), async { 7 }).await;
            assert_eq!(quick, Some(7));
            assert_eq!(pending(&t), 0);
            // One that never finishes: cut off at its deadline, not before.
            let start = Instant::now();
            let never = t.timeout(ms(30), std::future::pending::<()>()).await;
            assert_eq!(never, None);
            let took = Instant::now() - start;
            assert!(took >= ms(30) && took < ms(31), "{took:?}");
            assert_eq!(pending(&t), 0);
            // The queue sleeps towards a far deadline; a nearer one must still fire on time.
            let far = {
                let t = t.clone();
                madsim::task::spawn(async move {
                    t.timeout(ms(1_000), std::future::pending::<()>()).await
                })
            };
            madsim::time::sleep(ms(1)).await;
            let start = Instant::now();
            assert_eq!(t.timeout(ms(5), std::future::pending::<()>()).await, None);
            let took = Instant::now() - start;
            assert!(took < ms(6), "the nearer deadline waited {took:?}");
            assert_eq!(far.await.ok(), Some(None));
            assert_eq!(pending(&t), 0);
            // A wait cancelled while registered (its future dropped) leaves nothing behind.
            let outer =
                madsim::time::timeout(ms(2), t.timeout(ms(100), std::future::pending::<()>()))
                    .await;
            assert!(outer.is_err(), "the outer bound cut it off");
            assert_eq!(pending(&t), 0);
        });
    }
}
