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

impl SentReply {
    /// The reply's integers, as the scripts answer; `None` when the store had lost the
    /// script (`NOSCRIPT`: the call is to be made again), nothing run. An error reply is its
    /// code's error ([`StoreError::of_reply_code`]), any other shape `Unavailable`.
    #[cfg(feature = "redis")]
    pub(crate) fn ints(self) -> Option<Result<Vec<i64>, StoreError>> {
        Some(match self.reply {
            Reply::Ints(v) => Ok(v),
            Reply::Other => Err(StoreError::Unavailable),
            error => match error.error_code() {
                Some("NOSCRIPT") => return None,
                code => Err(StoreError::of_reply_code(code)),
            },
        })
    }
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

#[cfg(all(test, feature = "redis"))]
mod tests {
    use super::*;

    fn ints(reply: Reply) -> Option<Result<Vec<i64>, StoreError>> {
        SentReply { reply }.ints()
    }

    #[test]
    fn a_reply_reads_as_its_integers_again_or_its_codes_error() {
        assert_eq!(ints(Reply::Ints(vec![1, 2])), Some(Ok(vec![1, 2])));
        let error = |text: &str| Reply::Error(text.into());
        assert_eq!(ints(error("NOSCRIPT No matching script")), None);
        assert_eq!(
            ints(error("CORRUPT unreadable state")),
            Some(Err(StoreError::Corrupt))
        );
        assert_eq!(ints(error("ERR busy")), Some(Err(StoreError::Unavailable)));
        assert_eq!(ints(Reply::Other), Some(Err(StoreError::Unavailable)));
    }

    #[tokio::test]
    async fn a_sent_call_is_its_reply_or_unavailable_once_its_sender_is_gone() {
        let (tx, rx) = oneshot::channel();
        tx.send(Reply::Ints(vec![7])).unwrap();
        let got = Sent::on_lane(rx).await.map(|r| r.reply);
        assert_eq!(got, Ok(Reply::Ints(vec![7])));
        let (tx, rx) = oneshot::channel::<Reply>();
        drop(tx);
        assert_eq!(
            Sent::on_lane(rx).await.map(|r| r.reply),
            Err(StoreError::Unavailable)
        );
    }
}
