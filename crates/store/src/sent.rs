//! A store call sent ahead of its reply ([`crate::StoreClient::send`]): the call is on its way
//! to the store, and [`Sent`], a future its caller can hold by name, is its reply.
//!
//! A caller that holds a decision in two halves around the store's reply (the HTTP front's
//! way on Redis) keeps this instead of the nested futures of an `apply`: one small value to
//! poll, and the reply read by the client that sent it ([`crate::StoreClient::read_sent`]).

use crate::StoreError;
use core::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

#[cfg(feature = "redis")]
use crate::redis_lane::Reply;
#[cfg(feature = "redis")]
use tokio::sync::oneshot;

/// A call written to the store, its reply still to come. Its output is the reply, for the
/// client that sent the call to read; a reply that cannot come (the connection was lost) is
/// [`StoreError::Unavailable`]. Polled again once complete, it stays pending.
#[derive(Debug)]
pub struct Sent {
    state: State,
}

#[derive(Debug)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
enum State {
    /// Waiting on a Redis lane's reply.
    #[cfg(feature = "redis")]
    Lane(oneshot::Receiver<Reply>),
    /// Its reply was taken.
    Done,
}

/// The reply to a [`Sent`] call, as its client reads it ([`crate::StoreClient::read_sent`]).
#[derive(Debug)]
pub struct SentReply {
    #[cfg(feature = "redis")]
    pub(crate) reply: Reply,
}

impl Sent {
    /// The call whose reply `reply` will carry, on a Redis lane.
    #[cfg(feature = "redis")]
    pub(crate) fn on_lane(reply: oneshot::Receiver<Reply>) -> Self {
        Sent {
            state: State::Lane(reply),
        }
    }
}

impl Future for Sent {
    type Output = Result<SentReply, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let _ = &cx;
        match &mut self.state {
            #[cfg(feature = "redis")]
            State::Lane(rx) => {
                let got = std::task::ready!(Pin::new(rx).poll(cx));
                self.state = State::Done;
                Poll::Ready(
                    got.map(|reply| SentReply { reply })
                        .map_err(|_| StoreError::Unavailable),
                )
            }
            State::Done => Poll::Pending,
        }
    }
}
