//! The messages between the gateways and the store node: raw madsim endpoint messages, so
//! madsim's network decides every one (its latency, packet loss, `clog_link` partitions, a
//! killed or paused node), and nothing else runs per message.
//!
//! - A gateway's [`Link`] owns its endpoint. A call sends one message tagged [`CALL`] and
//!   waits on a slot of its own; one receive loop per gateway takes every reply tagged
//!   [`REPLY`] and fills the slot its id names (the call's [`Ticket`]). A reply for a call
//!   nobody waits for any more (timed out, or its request gone) is dropped.
//! - The store node runs one loop ([`serve`]): take a message, handle it to completion, send
//!   its reply. Each receive and each send costs one least sleep on madsim's clock
//!   (`dilation::SLEEP_FLOOR` of physical time), so the store takes a message every 20 ns
//!   of physical time and a message waits at most that long per message ahead of it.
//!   A delayed reply is sent by a task of its own, so it holds up nothing else.
//!
//! No call here has a timeout of its own: the gateway pipeline bounds every call with the
//! request's deadline, and the cleanup job's calls are bounded by their caller.

use crate::lock::Lock;
use madsim::net::Endpoint;
use ratelab_gateway::waiting::{Slots, Ticket};
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
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

/// Each waiting call's reply, once it lands, and who to wake when it does: a slot per call,
/// named by the call's ticket, which the call's message carries.
type Waiting<R> = Lock<Slots<(Option<R>, Option<Waker>)>>;

/// Waits for a call's reply to land in its slot, and gives the slot back with the reply.
struct Wait<'g, 'a, R> {
    call: &'g mut Deregister<'a, R>,
}

impl<R> Future for Wait<'_, '_, R> {
    type Output = R;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R> {
        let call = &mut *self.call;
        let mut w = call.waiting.lock();
        // The slot is the call's until it ends ([`Deregister`]).
        let Some((reply, waker)) = w.get_mut(&call.ticket) else {
            return Poll::Pending;
        };
        match reply.take() {
            Some(r) => {
                // Given back under the same lock: the call's end has nothing left to do.
                let slot = w.remove(&call.ticket);
                drop(w);
                call.given_back = true;
                drop(slot);
                Poll::Ready(r)
            }
            None => {
                if !waker.as_ref().is_some_and(|old| old.will_wake(cx.waker())) {
                    *waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

/// A gateway's side of the store's messages: requests of type `Q`, replies of type `R`.
pub(crate) struct Link<Q, R> {
    ep: Endpoint,
    to: SocketAddr,
    waiting: Arc<Waiting<R>>,
    _request: std::marker::PhantomData<fn(Q)>,
}

impl<Q, R> std::fmt::Debug for Link<Q, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Link").field("to", &self.to).finish()
    }
}

/// Gives a call's slot back when the call ends, however it ends (unless its reply did).
struct Deregister<'a, R> {
    waiting: &'a Waiting<R>,
    ticket: Ticket,
    given_back: bool,
}

impl<R> Drop for Deregister<'_, R> {
    fn drop(&mut self) {
        if self.given_back {
            return;
        }
        let slot = self.waiting.lock().remove(&self.ticket);
        // A reply or a waker it still held is dropped with the lock released.
        drop(slot);
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
                let waker = {
                    let mut w = slots.lock();
                    match w.get_mut(&Ticket::from_u64(id)) {
                        // A call still waiting (else the reply is dropped).
                        Some(slot) => {
                            slot.0 = Some(reply);
                            slot.1.take()
                        }
                        None => None,
                    }
                };
                if let Some(w) = waker {
                    w.wake();
                }
            }
        });
        Arc::new(Link {
            ep,
            to,
            waiting,
            _request: std::marker::PhantomData,
        })
    }

    /// Sends `request` and waits for its reply (for ever, if none comes: the caller bounds
    /// the wait).
    pub(crate) async fn call(&self, request: Q) -> Result<R, Lost> {
        let ticket = self.waiting.lock().insert((None, None));
        let mut call = Deregister {
            waiting: &self.waiting,
            ticket,
            given_back: false,
        };
        self.ep
            .send_to_raw(self.to, CALL, Box::new((ticket.to_u64(), request)))
            .await
            .map_err(|_| Lost::Unsent)?;
        Ok(Wait { call: &mut call }.await)
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
