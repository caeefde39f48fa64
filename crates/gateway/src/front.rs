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
//! - a request goes straight to the limiter: no path is reserved on the data plane (the
//!   metrics and the switches are served on a listener of their own, [`crate::admin`]), so
//!   `/metrics` or `/admin/kill-switch` sent here is limited and answered like any path;
//! - the request body is handed to the inner service as hyper produced it (hyper's
//!   `Incoming`), not boxed on the way;
//! - over a store whose calls complete at once (the in-memory store:
//!   [`StoreClient::IMMEDIATE`], under an environment whose timeouts poll first:
//!   [`Env::POLLS_FIRST`]) a request is decided in the service's call itself, on its stack
//!   ([`Gateway::check`], polled once), and its answer's future ([`FrontFuture`]) is the
//!   refusal, ready, or the inner service's own call;
//! - over any other store (Redis) a request is decided in two halves around its store call
//!   (`Gateway::begin` in the call, `Gateway::complete` when the reply comes: the same steps
//!   as `check`). A request at one enforced limit whose client sends its call at once
//!   ([`StoreClient::send`]: any family on one Redis server), or at several decided together
//!   in one step its clients send at once ([`StoreClient::send_all`]), waits for the reply
//!   in its answer's future itself ([`Remote`], bounded by the request's deadline through
//!   [`Env::bound_sent`]), with no future of the decision's own; a request at no limit is
//!   answered in the call; any other (a shadow limit, the naive path, a client that does not
//!   send — a cluster's, or one that waits for a replica —, a breaker not closed among
//!   several limits, a reply asking for the call again, a key the store cannot read among
//!   several) is finished in a boxed future.
//!
//! Either way a request is decided before the inner service is polled ready, so one the
//! inner service keeps waiting has been counted already (the `ok` answer and the reverse
//! proxy are always ready).
//!
//! It speaks HTTP/1.1 only (`axum::serve` also took HTTP/2 from clients that start with it
//! in cleartext).
//!
//! [`serve`] bounds every connection ([`crate::conns`]: header-read and idle timeouts, a
//! bound on open connections) and takes any per-connection hyper service, so the admin
//! listener runs the same loop, and the benchmark's bare anchor
//! (`ratelab-server`'s `bare` example) runs the very same stack without the limiter, and the
//! gap between the two is the limiter's own cost.

use crate::answer::Answer;
use crate::conns::{Connections, Framing, Phase, Tracked};
use crate::deadlines::BoundedSent;
use crate::env::Env;
use crate::http::{Decided, RateLimitLayer, finish, refusal, request_numbered};
use crate::pipeline::Gateway;
use crate::pipeline::halves::{Begun, Called, Later, Reply, Waiting};
use crate::request::Guard;
use axum::body::Body;
use axum::extract::ConnectInfo;
use core::future::Future;
use http::{Request, Response};
use hyper::body::Incoming;
use ratelab_store::StoreClient;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// What every connection's [`Front`] shares.
struct Shared<C, E, S> {
    layer: RateLimitLayer<C, E>,
    inner: S,
}

/// The gateway in front of `inner`, for one connection: made by [`FrontEnd::connection`].
pub struct Front<C, E, S> {
    shared: Arc<Shared<C, E, S>>,
    peer: SocketAddr,
    /// The connection's phase, lent to the inner service with the peer.
    phase: Option<Phase>,
    peer_extension: bool,
    max_head: usize,
}

/// Makes a [`Front`] for each accepted connection.
pub struct FrontEnd<C, E, S> {
    shared: Arc<Shared<C, E, S>>,
    /// Whether admitted requests carry the client's address as a `ConnectInfo` extension
    /// (an inner service that needs it, such as a reverse proxy, asks for it).
    peer_extension: bool,
    /// The longest request head answered ([`head_bytes`]); longer ones are 431.
    max_head: usize,
}

impl<C, E, S> Clone for FrontEnd<C, E, S> {
    fn clone(&self) -> Self {
        FrontEnd {
            shared: self.shared.clone(),
            peer_extension: self.peer_extension,
            max_head: self.max_head,
        }
    }
}

impl<C, E, S> FrontEnd<C, E, S>
where
    C: StoreClient + 'static,
    E: Env + 'static,
{
    /// The gateway in front of `inner`; installs the metrics recorder and exports the
    /// counters at zero, as [`crate::http::app`] does.
    pub fn new(gateway: Arc<Gateway<C, E>>, guard: Option<Arc<dyn Guard>>, inner: S) -> Self {
        crate::http::prometheus();
        gateway.export_zeros();
        FrontEnd {
            shared: Arc::new(Shared {
                layer: RateLimitLayer::new(gateway, guard),
                inner,
            }),
            peer_extension: false,
            max_head: usize::MAX,
        }
    }

    /// The same front, answering 431 to a request whose head is longer than `bytes`
    /// ([`head_bytes`]). The connection's read buffer is bounded too ([`serve`], from
    /// [`crate::conns::ConnLimits::max_header_bytes`]), but it is checked only between reads,
    /// so a head up to about twice its bound can be read whole: this check holds the bound to
    /// the head's bytes (less the whitespace around header values, which hyper trims).
    pub fn with_max_header_bytes(mut self, bytes: usize) -> Self {
        self.max_head = bytes;
        self
    }

    /// The same front, whose admitted requests carry the client's address as a
    /// `ConnectInfo<SocketAddr>` extension for the inner service, and the connection's
    /// [`Phase`].
    pub fn with_peer_extension(mut self) -> Self {
        self.peer_extension = true;
        self
    }

    /// The service for the connection from `peer`, whose phase is `phase` (lent to the inner
    /// service with the peer, [`FrontEnd::with_peer_extension`], so that a reverse proxy
    /// marks the connection while a request's body arrives).
    pub fn connection(&self, peer: SocketAddr, phase: Phase) -> Front<C, E, S> {
        Front {
            shared: self.shared.clone(),
            peer,
            phase: self.peer_extension.then_some(phase),
            peer_extension: self.peer_extension,
            max_head: self.max_head,
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

/// The inner service a [`Front`] puts the gateway in front of: a tower service of hyper's
/// requests that never fails, cheap to clone, its calls' futures sendable.
pub trait InnerService:
    tower::Service<
        Request<Incoming>,
        Response = Response<Body>,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
}

impl<S> InnerService for S where
    S: tower::Service<
            Request<Incoming>,
            Response = Response<Body>,
            Error = Infallible,
            Future: Send + 'static,
        > + Clone
        + Send
        + Sync
        + 'static
{
}

type BoxFuture = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

pin_project_lite::pin_project! {
    /// The future of a [`Front`]'s answer. A request decided in the call (an in-memory
    /// store's) is answered without a future of its own: its refusal is ready, and an admitted
    /// one is the inner service's call, which gets the answer's fields when it completes. A
    /// request whose one store call was sent waits for its reply here ([`Remote`]), and is
    /// decided when it comes. Anything else that waits before its decision is boxed.
    pub struct FrontFuture<F, R> {
        #[pin]
        state: State<F, R>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProj]
    enum State<F, R> {
        // The answer, made in the call (taken when returned).
        Ready { response: Option<Response<Body>> },
        // An admitted request's inner call, and the answer whose fields its response gets.
        Admitted { #[pin] call: F, answer: Option<Answer> },
        // A request waiting for its store call's reply (taken when it comes), boxed: the
        // answer's future stays small, and hyper moves it.
        Remote { remote: Option<Box<R>> },
        // Anything else.
        Boxed { future: BoxFuture },
        // Answered.
        Done,
    }
}

/// A request whose store call was sent in the [`Front`]'s call (one limit's, or several
/// limits' all-or-nothing step): the reply,
/// within the request's deadline, then the second half of its decision, then the inner call
/// if it is admitted. Held by the answer's future (in a box, so that the future hyper moves
/// stays small), with no future of the decision's own.
pub struct Remote<C, E, S> {
    shared: Arc<Shared<C, E, S>>,
    peer: IpAddr,
    waiting: Waiting<C>,
    reply: BoundedSent,
    parts: http::request::Parts,
    body: Incoming,
}

impl<C, E, S> std::fmt::Debug for Remote<C, E, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Remote")
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

impl<F, R> FrontFuture<F, R> {
    fn ready(response: Response<Body>) -> Self {
        FrontFuture {
            state: State::Ready {
                response: Some(response),
            },
        }
    }

    /// The future `make` makes, boxed: made in its box ([`crate::in_place`]).
    #[inline(always)]
    fn boxed<G>(make: impl FnOnce() -> G) -> Self
    where
        G: Future<Output = Result<Response<Body>, Infallible>> + Send + 'static,
    {
        FrontFuture {
            state: State::Boxed {
                future: crate::in_place::boxed(make),
            },
        }
    }
}

impl<F, R> std::fmt::Debug for FrontFuture<F, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.state {
            State::Ready { .. } => "FrontFuture::Ready",
            State::Admitted { .. } => "FrontFuture::Admitted",
            State::Remote { .. } => "FrontFuture::Remote",
            State::Boxed { .. } => "FrontFuture::Boxed",
            State::Done => "FrontFuture::Done",
        })
    }
}

impl<C, E, S> Future for FrontFuture<S::Future, Remote<C, E, S>>
where
    C: StoreClient + 'static,
    E: Env + 'static,
    S: InnerService,
{
    type Output = Result<Response<Body>, Infallible>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        loop {
            let response = match state.as_mut().project() {
                StateProj::Ready { response } => response.take(),
                StateProj::Admitted { call, answer } => {
                    let Ok(resp) = std::task::ready!(call.poll(cx));
                    answer.take().map(|a| finish(resp, a))
                }
                StateProj::Remote { remote } => {
                    let reply = match remote {
                        Some(r) => std::task::ready!(Pin::new(&mut r.reply).poll(cx)),
                        None => return Poll::Pending,
                    };
                    let Some(remote) = remote.take() else {
                        return Poll::Pending;
                    };
                    // Decided now, and the answer's next state taken from here.
                    let next = (*remote).decide(reply, cx);
                    state.set(next.state);
                    continue;
                }
                StateProj::Boxed { future } => {
                    let Ok(resp) = std::task::ready!(future.as_mut().poll(cx));
                    Some(resp)
                }
                // Polled again after it completed: it stays pending, as the contract allows.
                StateProj::Done => return Poll::Pending,
            };
            state.set(State::Done);
            return match response {
                Some(r) => Poll::Ready(Ok(r)),
                None => Poll::Pending,
            };
        }
    }
}

impl<C, E, S> Remote<C, E, S>
where
    C: StoreClient + 'static,
    E: Env + 'static,
    S: InnerService,
{
    /// The request decided on its store call's `reply` (`None`: none came in time), and what
    /// its answer's future does next.
    fn decide(
        self,
        reply: Option<Result<ratelab_store::SentReply, ratelab_store::StoreError>>,
        cx: &mut Context<'_>,
    ) -> FrontFuture<S::Future, Self> {
        let Remote {
            shared,
            peer,
            waiting,
            parts,
            body,
            ..
        } = self;
        let gateway = shared.layer.gateway();
        let ended = match gateway.read_reply(&waiting, reply) {
            Reply::Ended(ended) => ended,
            Reply::Again => return call_through_client(shared, peer, waiting, parts, body),
            Reply::Unreadable => {
                let later = gateway.unreadable(waiting);
                return FrontFuture::boxed(move || decided_later(shared, peer, later, parts, body));
            }
        };
        let trace = waiting.trace();
        let answer = gateway.complete(waiting, ended, || request_numbered(peer, &parts, trace));
        answer_with(&shared, parts, body, answer, cx)
    }
}

/// `waiting`'s store call made through the client's `apply` (`apply_all` for a step over
/// several limits), in a future of its own (a
/// client that does not send; or made again, a restarted store's script loaded first), then
/// the rest of its request.
fn call_through_client<C, E, S>(
    shared: Arc<Shared<C, E, S>>,
    peer: IpAddr,
    waiting: Waiting<C>,
    parts: http::request::Parts,
    body: Incoming,
) -> FrontFuture<S::Future, Remote<C, E, S>>
where
    C: StoreClient + 'static,
    E: Env + 'static,
    S: InnerService,
{
    FrontFuture::boxed(move || async move {
        let called = shared.layer.gateway().call_store(waiting).await;
        complete_later(shared, peer, called, parts, body).await
    })
}

/// `answer`, decided, for the request whose head is `parts`: its refusal, or its inner call
/// when admitted — called now if the inner service is ready in `cx`, else readied and
/// called in a future of its own.
fn answer_with<C, E, S, R>(
    shared: &Arc<Shared<C, E, S>>,
    parts: http::request::Parts,
    body: Incoming,
    answer: Answer,
    cx: &mut Context<'_>,
) -> FrontFuture<S::Future, R>
where
    S: InnerService,
{
    if let Some(refused) = refusal(&answer) {
        return FrontFuture::ready(finish(refused, answer));
    }
    let req = Request::from_parts(parts, body);
    let mut inner = shared.inner.clone();
    match tower::Service::poll_ready(&mut inner, cx) {
        Poll::Ready(Ok(())) => FrontFuture {
            state: State::Admitted {
                call: tower::Service::call(&mut inner, req),
                answer: Some(answer),
            },
        },
        Poll::Ready(Err(never)) => match never {},
        Poll::Pending => ready_later(inner, req, answer),
    }
}

/// An admitted request whose inner service was not ready yet: readied, then called, in a
/// future of its own.
#[cold]
#[inline(never)]
fn ready_later<S, R>(
    mut inner: S,
    req: Request<Incoming>,
    answer: Answer,
) -> FrontFuture<S::Future, R>
where
    S: InnerService,
{
    FrontFuture::boxed(move || async move {
        std::future::poll_fn(|cx| tower::Service::poll_ready(&mut inner, cx)).await?;
        let resp = tower::Service::call(&mut inner, req).await?;
        Ok(finish(resp, answer))
    })
}

/// The rest of a request's decision once its store call was made through the client
/// (`called`): its second half, or the async steps, then its answer, in a future of its own.
async fn complete_later<C, E, S>(
    shared: Arc<Shared<C, E, S>>,
    peer: IpAddr,
    called: Called<C>,
    parts: http::request::Parts,
    body: Incoming,
) -> Result<Response<Body>, Infallible>
where
    C: StoreClient + 'static,
    E: Env + 'static,
    S: InnerService,
{
    let (waiting, ended) = match called {
        Called::Ended(waiting, ended) => (waiting, ended),
        Called::Later(later) => return decided_later(shared, peer, later, parts, body).await,
    };
    let trace = waiting.trace();
    let request = || request_numbered(peer, &parts, trace);
    let answer = shared.layer.gateway().complete(waiting, ended, request);
    respond(&shared, parts, body, answer).await
}

/// `later` decided by the async steps ([`Gateway::decide_later`]), then its answer.
async fn decided_later<C, E, S>(
    shared: Arc<Shared<C, E, S>>,
    peer: IpAddr,
    later: Later<C>,
    parts: http::request::Parts,
    body: Incoming,
) -> Result<Response<Body>, Infallible>
where
    C: StoreClient + 'static,
    E: Env + 'static,
    S: InnerService,
{
    let trace = later.trace();
    let request = || request_numbered(peer, &parts, trace);
    let answer = shared.layer.gateway().decide_later(later, request).await;
    respond(&shared, parts, body, answer).await
}

/// `answer`'s response, for the request whose head is `parts`: its refusal, or the inner
/// service's answer, readied and called, when admitted.
async fn respond<C, E, S>(
    shared: &Shared<C, E, S>,
    parts: http::request::Parts,
    body: Incoming,
    answer: Answer,
) -> Result<Response<Body>, Infallible>
where
    S: InnerService,
{
    if let Some(refused) = refusal(&answer) {
        return Ok(finish(refused, answer));
    }
    let mut inner = shared.inner.clone();
    std::future::poll_fn(|cx| tower::Service::poll_ready(&mut inner, cx)).await?;
    let resp = tower::Service::call(&mut inner, Request::from_parts(parts, body)).await?;
    Ok(finish(resp, answer))
}

impl<C, E, S> hyper::service::Service<Request<Incoming>> for Front<C, E, S>
where
    C: StoreClient + 'static,
    E: Env + 'static,
    S: InnerService,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = FrontFuture<S::Future, Remote<C, E, S>>;

    fn call(&self, mut req: Request<Incoming>) -> Self::Future {
        if self.max_head != usize::MAX && head_bytes(&req) > self.max_head {
            let (parts, _) = req.into_parts();
            return FrontFuture::ready(self.shared.layer.refuse_head(
                self.peer.ip(),
                &parts,
                http::StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                format!("the request head is longer than {} bytes", self.max_head),
            ));
        }
        if self.peer_extension {
            req.extensions_mut().insert(ConnectInfo(self.peer));
            if let Some(phase) = &self.phase {
                req.extensions_mut().insert(phase.clone());
            }
        }
        let peer = self.peer.ip();
        let noop = &mut Context::from_waker(std::task::Waker::noop());
        let (mut parts, body) = req.into_parts();
        if C::IMMEDIATE && E::POLLS_FIRST {
            // Decided here, in the call (the store's calls complete at once): only an
            // admitted request's inner call is left to wait for.
            let answer = match self.shared.layer.decide_now(peer, &mut parts) {
                Decided::Answered(answer) => answer,
                Decided::Refused(refused) => return FrontFuture::ready(refused),
            };
            return answer_with(&self.shared, parts, body, answer, noop);
        }
        // Decided in two halves around the store's reply: the first here, up to the store
        // call, sent now when it can be.
        let begun = match self.shared.layer.begin(peer, &mut parts) {
            Ok(begun) => begun,
            Err(refused) => return FrontFuture::ready(refused),
        };
        let shared = self.shared.clone();
        match begun {
            Begun::Answered(answer) => answer_with(&shared, parts, body, answer, noop),
            Begun::Sent(waiting, sent) => {
                let (started, budget) = waiting.bound();
                match shared
                    .layer
                    .gateway()
                    .env()
                    .bound_sent(started, budget, sent)
                {
                    Ok(reply) => FrontFuture {
                        state: State::Remote {
                            remote: Some(crate::in_place::made_in_box(|| Remote {
                                shared,
                                peer,
                                waiting,
                                reply,
                                parts,
                                body,
                            })),
                        },
                    },
                    Err(sent) => FrontFuture::boxed(move || async move {
                        let called = shared.layer.gateway().await_sent(waiting, sent).await;
                        complete_later(shared, peer, called, parts, body).await
                    }),
                }
            }
            Begun::Call(waiting) => call_through_client(shared, peer, waiting, parts, body),
            Begun::Later(later) => {
                FrontFuture::boxed(move || decided_later(shared, peer, later, parts, body))
            }
        }
    }
}

/// The bytes of `req`'s head as sent on HTTP/1.1, less the optional whitespace hyper trims
/// around header values: the request line (its target in absolute form included) and every
/// header line, with their line ends and the blank line.
pub fn head_bytes<B>(req: &Request<B>) -> usize {
    let uri = req.uri();
    let target = match (uri.scheme_str(), uri.authority()) {
        (Some(scheme), Some(authority)) => scheme.len() + "://".len() + authority.as_str().len(),
        // Authority form (`CONNECT host:port`): the authority is the whole target.
        (None, Some(authority)) => authority.as_str().len(),
        _ => 0,
    } + uri.path_and_query().map_or(0, |p| p.as_str().len());
    let target = target.max(1);
    let line = req.method().as_str().len() + 1 + target + 1 + "HTTP/1.1\r\n".len();
    req.headers()
        .iter()
        .map(|(n, v)| n.as_str().len() + 2 + v.len() + 2)
        .sum::<usize>()
        + line
        + 2
}

/// How a connection writes its answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Writes {
    /// Each answer's head and body copied into one buffer and written with one `write`: for
    /// small answers (a limiter's own 200 and 429) fewer instructions per request than
    /// [`Writes::Vectored`] (docs/PERFORMANCE-HISTORY.md). Each body chunk is copied, and the buffer
    /// grows to hold the largest chunk.
    Flat,
    /// The head and the body's chunks written from their own buffers with `writev`, never
    /// copied: for large or streamed bodies (a reverse proxy's).
    Vectored,
}

/// Serves HTTP/1.1 on `listener` until `shutdown` completes, with the service
/// `service_for(peer, phase)` on each connection (`phase`: the connection's, for a service
/// that reads request bodies to mark: [`Phase::body_awaited`]), answers written as `writes`
/// says, every connection
/// admitted and bounded by `conns` ([`crate::conns`]); then stops accepting and waits for the
/// requests in flight (each connection closes after its current answer).
///
/// Accepted sockets get `TCP_NODELAY`: an answer is written as soon as it is ready. An accept
/// error that concerns one connection is skipped; any other (out of file descriptors, say)
/// is reported on standard error and the loop waits a second before accepting again.
pub async fn serve<F, T, B>(
    listener: tokio::net::TcpListener,
    writes: Writes,
    conns: Connections,
    service_for: F,
    shutdown: impl Future<Output = ()>,
) where
    F: Fn(SocketAddr, Phase) -> T,
    T: hyper::service::Service<Request<Incoming>, Response = Response<B>> + Send + 'static,
    T::Future: Send + 'static,
    T::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    let max_buf = conns
        .limits()
        .max_header_bytes
        .max(crate::conns::ConnLimits::MIN_HEADER_BYTES);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                eprintln!("accept error: {e}; accepting again in 1 s");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        let _ = stream.set_nodelay(true);
        // At the bound with every connection busy: closed at once (dropped).
        let Some(stream) = conns.admit(stream, Framing::Sequential) else {
            continue;
        };
        let service = Tracked::new(service_for(peer, stream.phase()), stream.phase());
        // The read buffer is bounded by the head's bound (hyper answers a longer head 431);
        // a body is read through it in pieces of at most that size.
        let conn = hyper::server::conn::http1::Builder::new()
            .max_buf_size(max_buf)
            .writev(writes == Writes::Vectored)
            .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            // A connection's own error (the client went away mid-request, or a bound closed
            // it) ends it alone.
            let _ = conn.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// Whether an accept error concerns only the connection being accepted.
pub fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionRefused | ConnectionAborted | ConnectionReset
    )
}

#[cfg(test)]
mod head_tests {
    use super::head_bytes;

    #[test]
    fn a_head_is_counted_as_sent() {
        let sent = "GET /a?b=1 HTTP/1.1\r\nhost: x\r\nx-k: vv\r\n\r\n";
        let req = http::Request::get("/a?b=1")
            .header("host", "x")
            .header("x-k", "vv")
            .body(())
            .unwrap();
        assert_eq!(head_bytes(&req), sent.len());
        let absolute = http::Request::get("http://example.test:8080/a")
            .body(())
            .unwrap();
        let sent = "GET http://example.test:8080/a HTTP/1.1\r\n\r\n";
        assert_eq!(head_bytes(&absolute), sent.len());
        let connect = http::Request::connect("example.test:443").body(()).unwrap();
        let sent = "CONNECT example.test:443 HTTP/1.1\r\n\r\n";
        assert_eq!(head_bytes(&connect), sent.len());
    }
}
