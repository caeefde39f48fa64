//! A bound on the reverse proxy's sockets to its upstream: each socket, in use or idle in the
//! pool, holds one of a fixed number of permits from the moment it is connected until it is
//! closed, so the proxy's descriptors are counted in the server's open-file budget
//! ([`crate::config`]) and cannot grow with the requests in flight.
//!
//! At the bound a request waits for a socket — one coming back to the pool, or a permit
//! freed by a socket closing — for at most the connect timeout; then its connection attempt
//! fails with [`UpstreamFull`], which the proxy answers 503 with `Retry-After: 1`.

use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::rt::TokioIo;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// No upstream socket could be had within the wait: every permitted socket is busy.
#[derive(Debug)]
pub struct UpstreamFull {
    /// The bound.
    pub sockets: usize,
}

impl std::fmt::Display for UpstreamFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "all {} upstream connections are in use", self.sockets)
    }
}

impl std::error::Error for UpstreamFull {}

/// An [`HttpConnector`] whose sockets hold permits: at most `sockets` open at once.
#[derive(Clone, Debug)]
pub struct Bounded {
    inner: HttpConnector,
    permits: Arc<Semaphore>,
    sockets: usize,
    wait: Duration,
}

impl Bounded {
    /// `inner`, with at most `sockets` open at once, a connection waiting at most `wait` for
    /// a permit.
    pub fn new(inner: HttpConnector, sockets: usize, wait: Duration) -> Bounded {
        Bounded {
            inner,
            permits: Arc::new(Semaphore::new(sockets.max(1))),
            sockets: sockets.max(1),
            wait,
        }
    }
}

/// A permitted socket: the permit is returned when it is dropped (closed).
#[derive(Debug)]
pub struct Permitted {
    io: TokioIo<TcpStream>,
    _permit: OwnedSemaphorePermit,
}

type Error = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<http::Uri> for Bounded {
    type Response = Permitted;
    type Error = Error;
    type Future = Pin<Box<dyn Future<Output = Result<Permitted, Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        tower::Service::poll_ready(&mut self.inner, cx).map_err(Into::into)
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        // The connector's future does nothing until polled: the permit comes first.
        let connect = tower::Service::call(&mut self.inner, uri);
        let (permits, wait, sockets) = (self.permits.clone(), self.wait, self.sockets);
        Box::pin(async move {
            let permit = match tokio::time::timeout(wait, permits.acquire_owned()).await {
                Ok(Ok(p)) => p,
                Ok(Err(closed)) => return Err(closed.into()),
                Err(_) => return Err(UpstreamFull { sockets }.into()),
            };
            let io = connect.await?;
            Ok(Permitted {
                io,
                _permit: permit,
            })
        })
    }
}

impl Connection for Permitted {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

impl hyper::rt::Read for Permitted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Permitted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
}

/// Whether `e` (or an error it wraps) is [`UpstreamFull`].
pub fn is_full(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(e);
    while let Some(err) = next {
        if err.is::<UpstreamFull>() {
            return true;
        }
        next = err.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn at_the_bound_a_connection_waits_then_fails_and_a_closed_socket_frees_its_place() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let uri: http::Uri = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                held.push(s);
            }
        });
        let mut c = Bounded::new(HttpConnector::new(), 1, Duration::from_millis(100));
        let first = tower::Service::call(&mut c, uri.clone()).await.unwrap();
        let err = tower::Service::call(&mut c, uri.clone()).await.unwrap_err();
        assert!(is_full(err.as_ref()), "{err}");
        assert_eq!(err.to_string(), "all 1 upstream connections are in use");
        drop(first);
        assert!(tower::Service::call(&mut c, uri).await.is_ok());
    }
}
