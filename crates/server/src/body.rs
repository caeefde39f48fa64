//! A request body read under bounds, for the reverse proxy: at most so many bytes, and no
//! longer a wait for the next chunk than a stated gap. A body past either bound ends in an
//! error (the upstream sees its request cut short) and says which bound it crossed
//! ([`Tripped`]), so the client is answered 413 or 408 rather than 502; a body that cannot be
//! read as sent (malformed chunked framing) is a 400, not the upstream's fault. While the
//! body has nothing ready its connection is marked as waiting on its client
//! ([`Phase::body_awaited`]), so a slow upload can be closed to make room at the connection
//! bound, as a slow head can; while the upstream is slow to read it, it is not.

use hyper::body::{Body, Frame, SizeHint};
use ratelab_gateway::conns::Phase;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

/// The bounds on a proxied request's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BodyLimits {
    /// The most bytes a body may have.
    pub max_bytes: u64,
    /// The longest wait for the next chunk.
    pub gap: Duration,
}

/// Which bound a body crossed, if any: shared between the body and the code that answers.
#[derive(Clone, Debug, Default)]
pub struct Tripped(Arc<AtomicU8>);

const NONE: u8 = 0;
const TOO_LARGE: u8 = 1;
const TOO_SLOW: u8 = 2;
const MALFORMED: u8 = 3;

impl Tripped {
    /// Whether the body was longer than allowed.
    pub fn too_large(&self) -> bool {
        self.0.load(Ordering::Relaxed) == TOO_LARGE
    }

    /// Whether the body stopped arriving for longer than allowed.
    pub fn too_slow(&self) -> bool {
        self.0.load(Ordering::Relaxed) == TOO_SLOW
    }

    /// Whether the body could not be read as sent (malformed chunked framing, or cut short
    /// by the client).
    pub fn malformed(&self) -> bool {
        self.0.load(Ordering::Relaxed) == MALFORMED
    }

    fn set(&self, what: u8) {
        let _ = self
            .0
            .compare_exchange(NONE, what, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// The error a bounded body ends with.
#[derive(Debug)]
pub struct BoundCrossed(&'static str);

impl std::fmt::Display for BoundCrossed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.0)
    }
}

impl std::error::Error for BoundCrossed {}

/// The connection's phase while the body is read: waiting on its client while the body has
/// nothing ready, busy again when a piece arrives ([`Phase::body_awaited`]); busy when the
/// body ends or is dropped.
struct Arriving(Option<Phase>);

impl Arriving {
    fn awaited(&self) {
        if let Some(p) = &self.0 {
            p.body_awaited();
        }
    }

    fn arrived(&self) {
        if let Some(p) = &self.0 {
            p.body_arrived();
        }
    }

    fn done(&mut self) {
        if let Some(p) = self.0.take() {
            p.body_arrived();
        }
    }
}

impl Drop for Arriving {
    fn drop(&mut self) {
        self.done();
    }
}

pin_project_lite::pin_project! {
    /// `inner`, bounded by [`BodyLimits`].
    pub struct Bounded<B> {
        #[pin]
        inner: B,
        limits: BodyLimits,
        read: u64,
        // The deadline for the next chunk, armed when a poll finds none ready.
        wait: Option<Pin<Box<tokio::time::Sleep>>>,
        tripped: Tripped,
        arriving: Arriving,
    }
}

impl<B> std::fmt::Debug for Bounded<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bounded")
            .field("limits", &self.limits)
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl<B: Body> Bounded<B> {
    /// `inner` under `limits`, reporting a crossed bound to `tripped`.
    pub fn new(inner: B, limits: BodyLimits, tripped: Tripped) -> Self {
        Bounded {
            inner,
            limits,
            read: 0,
            wait: None,
            tripped,
            arriving: Arriving(None),
        }
    }

    /// The same body, marking `phase` as waiting on the client while the body has nothing
    /// ready, until it ends or is dropped.
    pub fn marking(mut self, phase: Option<Phase>) -> Self {
        if !self.inner.is_end_stream() {
            self.arriving = Arriving(phase);
        }
        self
    }
}

impl<B> Body for Bounded<B>
where
    B: Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, Self::Error>>> {
        let this = self.project();
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                *this.wait = None;
                this.arriving.arrived();
                if let Some(data) = frame.data_ref() {
                    *this.read = this
                        .read
                        .saturating_add(hyper::body::Buf::remaining(data) as u64);
                    if *this.read > this.limits.max_bytes {
                        this.tripped.set(TOO_LARGE);
                        return Poll::Ready(Some(Err(Box::new(BoundCrossed(
                            "request body larger than allowed",
                        )))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.tripped.set(MALFORMED);
                this.arriving.done();
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => {
                this.arriving.done();
                Poll::Ready(None)
            }
            Poll::Pending => {
                this.arriving.awaited();
                let gap = this.limits.gap;
                let wait = this
                    .wait
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(gap)));
                match wait.as_mut().poll(cx) {
                    Poll::Ready(()) => {
                        this.tripped.set(TOO_SLOW);
                        Poll::Ready(Some(Err(Box::new(BoundCrossed(
                            "request body stopped arriving",
                        )))))
                    }
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body as AxumBody;

    async fn drain<B: Body + Unpin>(mut b: B) -> Result<u64, B::Error>
    where
        B::Data: hyper::body::Buf,
    {
        let mut n = 0;
        while let Some(f) = std::future::poll_fn(|cx| Pin::new(&mut b).poll_frame(cx)).await {
            if let Some(d) = f?.data_ref() {
                n += hyper::body::Buf::remaining(d) as u64;
            }
        }
        Ok(n)
    }

    #[tokio::test]
    async fn a_body_within_bounds_passes_whole_and_a_longer_one_is_cut() {
        let limits = BodyLimits {
            max_bytes: 10,
            gap: Duration::from_secs(5),
        };
        let tripped = Tripped::default();
        let ok = Bounded::new(AxumBody::from("0123456789"), limits, tripped.clone());
        assert_eq!(drain(ok).await.unwrap(), 10);
        assert!(!tripped.too_large());
        let long = Bounded::new(AxumBody::from("0123456789x"), limits, tripped.clone());
        assert!(drain(long).await.is_err());
        assert!(tripped.too_large() && !tripped.too_slow());
    }

    #[tokio::test]
    async fn a_body_that_stops_arriving_is_cut_after_the_gap() {
        let limits = BodyLimits {
            max_bytes: 1 << 20,
            gap: Duration::from_millis(50),
        };
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<Frame<axum::body::Bytes>, std::io::Error>>(1);
        tx.send(Ok(Frame::data(axum::body::Bytes::from_static(b"part"))))
            .await
            .unwrap();
        let stream = tokio_stream_from(rx);
        let tripped = Tripped::default();
        let slow = Bounded::new(stream, limits, tripped.clone());
        assert!(drain(slow).await.is_err());
        assert!(tripped.too_slow());
        drop(tx);
    }

    /// A body whose frames come from a channel (and never end while the sender lives).
    fn tokio_stream_from(
        rx: tokio::sync::mpsc::Receiver<Result<Frame<axum::body::Bytes>, std::io::Error>>,
    ) -> ChannelBody {
        ChannelBody(rx)
    }

    struct ChannelBody(
        tokio::sync::mpsc::Receiver<Result<Frame<axum::body::Bytes>, std::io::Error>>,
    );

    impl Body for ChannelBody {
        type Data = axum::body::Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<axum::body::Bytes>, std::io::Error>>> {
            self.0.poll_recv(cx)
        }
    }
}
