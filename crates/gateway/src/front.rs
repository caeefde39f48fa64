//! The HTTP/1.1 front end a server runs: an accept loop driving hyper's connection state
//! machine on each socket, with graceful shutdown, and [`Front`], the per-connection service
//! that puts the gateway in front of an inner service.
//!
//! [`crate::http::app`] is the same gateway as an axum `Router`, for an app that embeds it.
//! The front is what `ratelab-server` serves, and it is leaner per request:
//!
//! - the client's address is the connection's, known once per connection, not inserted into
//!   every request's extensions (`ConnectInfo`) and read back (only an inner service that
//!   asks for it, the reverse proxy, gets it as an extension:
//!   [`FrontEnd::with_peer_extension`]);
//! - a request goes straight to the limiter: only the reserved paths (`/metrics`,
//!   `/admin/kill-switch`, `/admin/shadow`) are routed, through the same axum routes as
//!   [`crate::http::app`];
//! - the request body is handed to the inner service as hyper produced it (hyper's
//!   `Incoming`), not boxed on the way.
//!
//! It speaks HTTP/1.1 only (`axum::serve` also took HTTP/2 from clients that start with it
//! in cleartext).
//!
//! [`serve`] takes any per-connection hyper service, so the benchmark's bare anchor
//! (`ratelab-server`'s `bare` example) runs the very same stack without the limiter, and the
//! gap between the two is the limiter's own cost.

use crate::http::{AppState, RESERVED, RateLimitLayer, reserved_routes};
use crate::ip::IpNet;
use crate::pipeline::{Env, Gateway, Guard};
use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use core::future::Future;
use http::{Request, Response};
use hyper::body::Incoming;
use ratelab_store::StoreClient;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

/// What every connection's [`Front`] shares.
struct Shared<C, E, S> {
    layer: RateLimitLayer<C, E>,
    inner: S,
    reserved: Router,
}

/// The gateway in front of `inner`, for one connection: made by [`FrontEnd::connection`].
pub struct Front<C, E, S> {
    shared: Arc<Shared<C, E, S>>,
    peer: SocketAddr,
    peer_extension: bool,
}

/// Makes a [`Front`] for each accepted connection.
pub struct FrontEnd<C, E, S> {
    shared: Arc<Shared<C, E, S>>,
    /// Whether admitted requests carry the client's address as a `ConnectInfo` extension
    /// (an inner service that needs it, such as a reverse proxy, asks for it).
    peer_extension: bool,
}

impl<C, E, S> Clone for FrontEnd<C, E, S> {
    fn clone(&self) -> Self {
        FrontEnd {
            shared: self.shared.clone(),
            peer_extension: self.peer_extension,
        }
    }
}

impl<C, E, S> FrontEnd<C, E, S>
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    /// The gateway in front of `inner`, with the admin endpoints open to `admin`; installs
    /// the metrics recorder and exports the counters at zero, as [`crate::http::app`] does.
    pub fn new(
        gateway: Arc<Gateway<C, E>>,
        admin: Vec<IpNet>,
        guard: Option<Arc<dyn Guard>>,
        inner: S,
    ) -> Self {
        let state = Arc::new(AppState::new(gateway.clone(), admin));
        FrontEnd {
            shared: Arc::new(Shared {
                layer: RateLimitLayer::new(gateway, guard),
                inner,
                reserved: reserved_routes(state),
            }),
            peer_extension: false,
        }
    }

    /// The same front, whose admitted requests carry the client's address as a
    /// `ConnectInfo<SocketAddr>` extension for the inner service.
    pub fn with_peer_extension(mut self) -> Self {
        self.peer_extension = true;
        self
    }

    /// The service for the connection from `peer`.
    pub fn connection(&self, peer: SocketAddr) -> Front<C, E, S> {
        Front {
            shared: self.shared.clone(),
            peer,
            peer_extension: self.peer_extension,
        }
    }
}

impl<C, E, S> std::fmt::Debug for Front<C, E, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Front")
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl<C, E, S> std::fmt::Debug for FrontEnd<C, E, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FrontEnd")
            .field("peer_extension", &self.peer_extension)
            .finish_non_exhaustive()
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

impl<C, E, S> hyper::service::Service<Request<Incoming>> for Front<C, E, S>
where
    C: StoreClient + 'static,
    E: Env + 'static,
    S: tower::Service<Request<Incoming>, Response = Response<Body>, Error = Infallible>
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture;

    fn call(&self, mut req: Request<Incoming>) -> BoxFuture {
        let reserved = RESERVED.contains(&req.uri().path());
        if reserved || self.peer_extension {
            req.extensions_mut().insert(ConnectInfo(self.peer));
        }
        if reserved {
            let mut router = self.shared.reserved.clone();
            return Box::pin(
                async move { tower::Service::call(&mut router, req.map(Body::new)).await },
            );
        }
        let shared = self.shared.clone();
        let peer = self.peer.ip();
        Box::pin(async move {
            // A clone of the inner service, readied here: `limited` calls it when admitted.
            let mut inner = shared.inner.clone();
            std::future::poll_fn(|cx| tower::Service::poll_ready(&mut inner, cx)).await?;
            shared.layer.limited(Some(peer), req, inner).await
        })
    }
}

/// How a connection writes its answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writes {
    /// Each answer's head and body copied into one buffer and written with one `write`: for
    /// small answers (a limiter's own 200 and 429) fewer instructions per request than
    /// [`Writes::Vectored`] (docs/PERFORMANCE.md). Each body chunk is copied, and the buffer
    /// grows to hold the largest chunk.
    Flat,
    /// The head and the body's chunks written from their own buffers with `writev`, never
    /// copied: for large or streamed bodies (a reverse proxy's).
    Vectored,
}

/// Serves HTTP/1.1 on `listener` until `shutdown` completes, with the service
/// `service_for(peer)` on each connection, answers written as `writes` says; then stops
/// accepting and waits for the requests in flight (each connection closes after its current
/// answer).
///
/// Accepted sockets get `TCP_NODELAY`: an answer is written as soon as it is ready. An accept
/// error that concerns one connection is skipped; any other (out of file descriptors, say)
/// is reported on standard error and the loop waits a second before accepting again.
pub async fn serve<F, T, B>(
    listener: tokio::net::TcpListener,
    writes: Writes,
    service_for: F,
    shutdown: impl Future<Output = ()>,
) where
    F: Fn(SocketAddr) -> T,
    T: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    T::Future: Send + 'static,
    T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) if connection_error(&e) => continue,
            Err(e) => {
                eprintln!("accept error: {e}; accepting again in 1 s");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = hyper::server::conn::http1::Builder::new()
            .writev(writes == Writes::Vectored)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service_for(peer));
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A connection's own error (the client went away mid-request) ends it alone.
            let _ = conn.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Whether an accept error concerns only the connection being accepted.
fn connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}
