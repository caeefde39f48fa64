//! The messages between the gateways and the store node: raw madsim endpoint messages, so
//! madsim's network decides every one (its latency, packet loss, `clog_link` partitions, a
//! killed or paused node), and nothing else runs per message.
//!
//! - A gateway's [`Link`] owns its endpoint. A call sends one message tagged [`CALL`] and
//!   waits on a slot of its own; one receive loop per gateway takes every reply tagged
//!   [`REPLY`] and fills the slot its id names. A reply for a call nobody waits for any more
//!   (timed out, or its request gone) is dropped.
//! - The store node runs one loop ([`serve`]): take a message, handle it to completion, send
//!   its reply. Each receive and each send costs one least sleep on madsim's clock
//!   (`dilation::SLEEP_FLOOR` of physical time), so the store takes a message every 20 ns
//!   of physical time and a message waits at most that long per message ahead of it.
//!   A delayed reply is sent by a task of its own, so it holds up nothing else.
//!
//! No call here has a timeout of its own: the gateway pipeline bounds every call with the
//! request's deadline, and the cleanup job's calls are bounded by their caller.

use madsim::net::Endpoint;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// The tag of a call to the store.
pub(crate) const CALL: u64 = 0x7261_7465_6c61_6201;
/// The tag of a reply from the store.
pub(crate) const REPLY: u64 = 0x7261_7465_6c61_6202;

/// Why a call got no reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lost {
    /// The message could not be sent (the gateway's endpoint is gone).
    Unsent,
}

/// Where a call's reply lands, and who to wake when it does.
struct Slot<R> {
    state: Mutex<(Option<R>, Option<Waker>)>,
}

impl<R> Slot<R> {
    fn fill(&self, r: R) {
        let mut s = self.state.lock().expect("reply slot");
        s.0 = Some(r);
        if let Some(w) = s.1.take() {
            w.wake();
        }
    }
}

/// Waits for a slot to be filled.
struct Wait<R>(Arc<Slot<R>>);

impl<R> Future for Wait<R> {
    type Output = R;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        let mut s = self.0.state.lock().expect("reply slot");
        match s.0.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.1 = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

type Waiting<R> = Mutex<BTreeMap<u64, Arc<Slot<R>>>>;

/// A gateway's side of the store's messages: requests of type `Q`, replies of type `R`.
pub(crate) struct Link<Q, R> {
    ep: Endpoint,
    to: SocketAddr,
    next: AtomicU64,
    waiting: Arc<Waiting<R>>,
    _request: std::marker::PhantomData<fn(Q)>,
}

impl<Q, R> std::fmt::Debug for Link<Q, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("to", &self.to).finish()
    }
}

/// Removes a call's slot when the call ends, however it ends.
struct Deregister<'a, R> {
    waiting: &'a Waiting<R>,
    id: u64,
}

impl<R> Drop for Deregister<'_, R> {
    fn drop(&mut self) {
        self.waiting.lock().expect("waiting calls").remove(&self.id);
    }
}

impl<Q, R> Link<Q, R>
where
    Q: Send + Sync + 'static,
    R: Send + Sync + 'static,
{
    /// A link from `ep` to `to`, with its receive loop spawned on the current node.
    pub(crate) fn start(ep: Endpoint, to: SocketAddr) -> Arc<Self> {
        let waiting: Arc<Waiting<R>> = Arc::default();
        let (rx, slots) = (ep.clone(), waiting.clone());
        madsim::task::spawn(async move {
            while let Ok((msg, _)) = rx.recv_from_raw(REPLY).await {
                let Ok(reply) = msg.downcast::<(u64, R)>() else {
                    continue;
                };
                let (id, reply) = *reply;
                let slot = slots.lock().expect("waiting calls").remove(&id);
                if let Some(slot) = slot {
                    slot.fill(reply);
                }
            }
        });
        Arc::new(Link {
            ep,
            to,
            next: AtomicU64::new(0),
            waiting,
            _request: std::marker::PhantomData,
        })
    }

    /// Sends `request` and waits for its reply (for ever, if none comes: the caller bounds
    /// the wait).
    pub(crate) async fn call(&self, request: Q) -> Result<R, Lost> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot {
            state: Mutex::new((None, None)),
        });
        self.waiting
            .lock()
            .expect("waiting calls")
            .insert(id, slot.clone());
        let _guard = Deregister {
            waiting: &self.waiting,
            id,
        };
        self.ep
            .send_to_raw(self.to, CALL, Box::new((id, request)))
            .await
            .map_err(|_| Lost::Unsent)?;
        Ok(Wait(slot).await)
    }
}

/// What the store does with one message's reply.
pub(crate) enum Fate<R> {
    /// Send it now.
    Now(R),
    /// Send it after this much physical time.
    After(Duration, R),
    /// Never send it (dropped, or the reply is lost).
    Never,
}

/// The store's loop on `ep`: every call handled by `handle`, one at a time, in arrival order.
pub(crate) async fn serve<Q, R>(ep: Endpoint, mut handle: impl FnMut(Q) -> Fate<R>)
where
    Q: Send + Sync + 'static,
    R: Send + Sync + 'static,
{
    while let Ok((msg, from)) = ep.recv_from_raw(CALL).await {
        let Ok(call) = msg.downcast::<(u64, Q)>() else {
            continue;
        };
        let (id, call) = *call;
        match handle(call) {
            Fate::Now(reply) => {
                ep.send_to_raw(from, REPLY, Box::new((id, reply)))
                    .await
                    .ok();
            }
            Fate::After(delay, reply) => {
                let ep = ep.clone();
                madsim::task::spawn(async move {
                    crate::dilation::sleep(delay).await;
                    ep.send_to_raw(from, REPLY, Box::new((id, reply)))
                        .await
                        .ok();
                });
            }
            Fate::Never => {}
        }
    }
}
