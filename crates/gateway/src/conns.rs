//! Bounds on a listener's connections, so that slow or idle clients cannot hold the server:
//! how long a client may take to send a request's head, how long a connection may wait idle
//! between requests, and how many connections may be open at once.
//!
//! Each accepted socket is admitted by its listener's [`Connections`] and wrapped in
//! [`Watched`], which notes when bytes arrive; the request service is wrapped in
//! [`Tracked`], which notes when a request starts and when its answer is ready. From those a
//! connection is in one of three phases:
//!
//! | phase | from | bounded by |
//! |---|---|---|
//! | head | accept, or the first byte after an idle wait | [`ConnLimits::header_read_timeout`] |
//! | body | a request whose body is awaited from its client (marked by the service that reads it: [`Phase::body_awaited`]), since the wait began | the reader's own gap bound (twice the header-read timeout as a backstop) |
//! | busy | a request's head was read, until its answer is ready | the request's own deadlines (store, upstream, body) |
//! | idle | an answer was made (writing it refreshes the wait) | [`ConnLimits::idle_timeout`] |
//!
//! A connection past its phase's deadline is closed: its socket's reads and writes fail, so
//! the HTTP connection ends as if the client had gone. An answer still being written after
//! it was made (a streamed body) counts as waiting from its last write. A multiplexed
//! connection (HTTP/2, the gRPC listener) has no request boundaries visible here: it is in
//! the head phase until its first bytes, then idle, each byte it sends starting the idle
//! wait again. The server's own keepalive pings, answered, count: a live client that sends
//! nothing keeps its connection, bounded by the connection bound; a peer that stops
//! answering is closed.
//!
//! At [`ConnLimits::max_connections`] a new connection makes room by closing the connection
//! that has waited longest on its client (idle, with its head still unfinished, or with its
//! request's body still arriving); when every connection is busy the new one is closed at
//! once. A slow upload is thus a slow head by other means: it cannot hold a place a prompt
//! client needs. Either way it is
//! counted (`ratelab_connections_closed_total{reason=…}`,
//! `ratelab_connections_refused_total`), so an operator can tell a slowloris from a load
//! spike.
//!
//! Deadlines are checked by one sweeping task per listener, eight times per shortest timeout
//! (at most every 500 ms), on a clock it advances: a connection is closed within a tick of
//! its deadline, either side, and the request path pays a few relaxed atomic operations per
//! request, never a timer.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A listener's bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnLimits {
    /// How long a client has to send a request's whole head: from the connection's start,
    /// or from the first byte after an idle wait.
    pub header_read_timeout: Duration,
    /// How long a connection may wait, with no request in progress, for the next one.
    pub idle_timeout: Duration,
    /// How many connections may be open at once.
    pub max_connections: usize,
    /// The most bytes a request's head (request line and headers) may have: an HTTP/1.1
    /// connection's read buffer never grows past it, and a longer head is answered 431.
    pub max_header_bytes: usize,
}

impl ConnLimits {
    /// The default header-read timeout: 10 s, Envoy's recommended `request_headers_timeout`
    /// for an edge proxy (nginx's `client_header_timeout` is 60 s).
    pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
    /// The default idle timeout: 60 s (nginx's `keepalive_timeout` is 75 s).
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
    /// The default bound on open connections.
    pub const MAX_CONNECTIONS: usize = 10_000;
    /// The default bound on a request head: 32 KiB, nginx's default head buffers
    /// (`large_client_header_buffers 4 8k`; Envoy's `max_request_headers_kb` is 60).
    pub const MAX_HEADER_BYTES: usize = 32 << 10;
    /// The smallest bound on a request head hyper accepts.
    pub const MIN_HEADER_BYTES: usize = 8 << 10;
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            header_read_timeout: Self::HEADER_READ_TIMEOUT,
            idle_timeout: Self::IDLE_TIMEOUT,
            max_connections: Self::MAX_CONNECTIONS,
            max_header_bytes: Self::MAX_HEADER_BYTES,
        }
    }
}

/// How a listener's connections carry requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// One request at a time (HTTP/1.1): the phases follow the requests ([`Tracked`]).
    Sequential,
    /// Streams multiplexed on the connection (HTTP/2): head until the first bytes, then idle,
    /// every byte read starting the idle wait again.
    Multiplexed,
}

// A connection's phase, in the top two bits of its state; the low bits hold the coarse time
// (ms since the listener's start) the phase began.
const IDLE: u64 = 0;
const HEAD: u64 = 1;
const BUSY: u64 = 2;
const BODY: u64 = 3;
const PHASE_SHIFT: u32 = 62;
const SINCE_MASK: u64 = (1 << PHASE_SHIFT) - 1;

fn pack(phase: u64, since_ms: u64) -> u64 {
    (phase << PHASE_SHIFT) | (since_ms & SINCE_MASK)
}

/// What the sweeper and the accept loop know of one connection.
struct Watch {
    state: AtomicU64,
    closing: AtomicBool,
    /// The tasks waiting to read and to write, woken when the connection is closed.
    wakers: Mutex<[Option<Waker>; 2]>,
}

impl Watch {
    fn set(&self, phase: u64, now_ms: u64) {
        self.state.store(pack(phase, now_ms), Ordering::Relaxed);
    }

    /// Moves the connection from phase `from` to `to` at `now_ms`, only if it is in `from`
    /// (one step: a concurrent change of phase is never undone).
    fn swap(&self, from: u64, to: u64, now_ms: u64) {
        let _ = self
            .state
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
                (s >> PHASE_SHIFT == from).then_some(pack(to, now_ms))
            });
    }

    fn phase(&self) -> (u64, u64) {
        let s = self.state.load(Ordering::Relaxed);
        (s >> PHASE_SHIFT, s & SINCE_MASK)
    }

    fn register(&self, slot: usize, waker: &Waker) {
        let mut w = self.wakers.lock().unwrap_or_else(|e| e.into_inner());
        match &mut w[slot] {
            Some(old) if old.will_wake(waker) => {}
            other => *other = Some(waker.clone()),
        }
    }

    /// Closes the connection: its next read or write fails, and a task waiting on either is
    /// woken to find out.
    fn close(&self) {
        self.closing.store(true, Ordering::Release);
        let wakers = std::mem::take(&mut *self.wakers.lock().unwrap_or_else(|e| e.into_inner()));
        wakers.into_iter().flatten().for_each(Waker::wake);
    }

    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }
}

struct Inner {
    limits: ConnLimits,
    /// The listener's name in the metrics (`listener` label).
    name: &'static str,
    start: Instant,
    /// Coarse time, ms since `start`, advanced by the sweeper.
    now_ms: AtomicU64,
    open: Mutex<Registry>,
}

#[derive(Default)]
struct Registry {
    next: u64,
    conns: HashMap<u64, Arc<Watch>>,
}

impl Inner {
    fn now_ms(&self) -> u64 {
        self.now_ms.load(Ordering::Relaxed)
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The deadline of a connection in `phase` since `since`, ms; `None` while busy.
    fn deadline(&self, phase: u64, since: u64) -> Option<u64> {
        let after = match phase {
            HEAD => self.limits.header_read_timeout,
            IDLE => self.limits.idle_timeout,
            // The body's reader answers a body that stopped arriving (408) after one
            // header-read timeout; this is the backstop for a reader that did not.
            BODY => self.limits.header_read_timeout.saturating_mul(2),
            _ => return None,
        };
        Some(since.saturating_add(after.as_millis().try_into().unwrap_or(u64::MAX)))
    }

    /// Reads the clock into the coarse time.
    fn tick(&self) -> u64 {
        let now = self
            .start
            .elapsed()
            .as_millis()
            .try_into()
            .unwrap_or(u64::MAX);
        self.now_ms.fetch_max(now, Ordering::Relaxed);
        now
    }

    /// Closes every connection past its deadline.
    fn sweep(&self) {
        let now = self.tick();
        let open = self.registry();
        for w in open.conns.values() {
            if w.is_closing() {
                continue;
            }
            let (phase, since) = w.phase();
            if self.deadline(phase, since).is_some_and(|d| now >= d) {
                let reason = match phase {
                    HEAD => "header_timeout",
                    BODY => "body_timeout",
                    _ => "idle_timeout",
                };
                metrics::counter!("ratelab_connections_closed_total", "listener" => self.name, "reason" => reason)
                    .increment(1);
                w.close();
            }
        }
    }
}

/// One listener's open connections and their bounds. Cheap to clone.
#[derive(Clone)]
pub struct Connections {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Connections {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connections")
            .field("listener", &self.inner.name)
            .field("limits", &self.inner.limits)
            .field("open", &self.open())
            .finish()
    }
}

impl Connections {
    /// The connections of the listener `name` (its label in the metrics), under `limits`;
    /// starts the sweeping task on the current tokio runtime, which ends with the last clone.
    pub fn new(name: &'static str, limits: ConnLimits) -> Connections {
        describe();
        for reason in ["header_timeout", "body_timeout", "idle_timeout", "evicted"] {
            metrics::counter!("ratelab_connections_closed_total", "listener" => name, "reason" => reason)
                .increment(0);
        }
        metrics::counter!("ratelab_connections_refused_total", "listener" => name).increment(0);
        metrics::gauge!("ratelab_connections_open", "listener" => name).set(0.0);
        let inner = Arc::new(Inner {
            limits,
            name,
            start: Instant::now(),
            now_ms: AtomicU64::new(0),
            open: Mutex::new(Registry::default()),
        });
        let shortest = limits.header_read_timeout.min(limits.idle_timeout);
        let tick = (shortest / 8).clamp(Duration::from_millis(5), Duration::from_millis(500));
        let weak: Weak<Inner> = Arc::downgrade(&inner);
        tokio::spawn(async move {
            let mut every = tokio::time::interval(tick);
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                every.tick().await;
                match weak.upgrade() {
                    Some(inner) => inner.sweep(),
                    None => return,
                }
            }
        });
        Connections { inner }
    }

    /// The bounds.
    pub fn limits(&self) -> ConnLimits {
        self.inner.limits
    }

    /// How many connections are open.
    pub fn open(&self) -> usize {
        self.inner.registry().conns.len()
    }

    /// Admits a newly accepted socket, framed as `framing`: the socket wrapped, or `None`
    /// when the listener is full and no connection could be closed to make room (the caller
    /// drops the socket, closing it).
    pub fn admit<T>(&self, io: T, framing: Framing) -> Option<Watched<T>> {
        let now = self.inner.tick();
        let mut open = self.inner.registry();
        if open.conns.len() >= self.inner.limits.max_connections {
            // The connection that has waited longest with no request in progress (of two
            // that started waiting in the same millisecond, the older connection).
            let victim = open
                .conns
                .iter()
                .filter(|(_, w)| !w.is_closing())
                .filter_map(|(id, w)| match w.phase() {
                    (BUSY, _) => None,
                    // Idle, an unfinished head, or a body still arriving.
                    (_, since) => Some(((since, *id), w)),
                })
                .min_by_key(|(order, _)| *order)
                .map(|(_, w)| w.clone());
            let name = self.inner.name;
            match victim {
                Some(w) => {
                    metrics::counter!("ratelab_connections_closed_total", "listener" => name, "reason" => "evicted")
                        .increment(1);
                    w.close();
                }
                None => {
                    metrics::counter!("ratelab_connections_refused_total", "listener" => name)
                        .increment(1);
                    return None;
                }
            }
        }
        let watch = Arc::new(Watch {
            state: AtomicU64::new(pack(HEAD, now)),
            closing: AtomicBool::new(false),
            wakers: Mutex::new([None, None]),
        });
        let id = open.next;
        open.next += 1;
        open.conns.insert(id, watch.clone());
        metrics::gauge!("ratelab_connections_open", "listener" => self.inner.name)
            .set(open.conns.len() as f64);
        drop(open);
        Some(Watched {
            io,
            ticket: Ticket {
                id,
                watch,
                owner: self.inner.clone(),
            },
            framing,
        })
    }
}

fn describe() {
    metrics::describe_gauge!("ratelab_connections_open", "Open connections, by listener.");
    metrics::describe_counter!(
        "ratelab_connections_closed_total",
        "Connections the server closed, by listener and reason: header_timeout (a request's \
         head was not sent in time), body_timeout (its body stopped arriving), idle_timeout \
         (no request in time), evicted (closed at the connection bound to make room)."
    );
    metrics::describe_counter!(
        "ratelab_connections_refused_total",
        "Connections closed on arrival: the listener was at its bound with every connection \
         in the middle of a request."
    );
}

/// A connection's place in its listener's registry; leaving it (when the socket is dropped)
/// frees the place.
struct Ticket {
    id: u64,
    watch: Arc<Watch>,
    owner: Arc<Inner>,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut open = self.owner.registry();
        open.conns.remove(&self.id);
        metrics::gauge!("ratelab_connections_open", "listener" => self.owner.name)
            .set(open.conns.len() as f64);
    }
}

/// A handle on one connection's phase, for its request service ([`Tracked`]).
#[derive(Clone)]
pub struct Phase {
    watch: Arc<Watch>,
    owner: Arc<Inner>,
}

impl std::fmt::Debug for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Phase").finish_non_exhaustive()
    }
}

impl Phase {
    fn busy(&self) {
        self.watch.set(BUSY, self.owner.now_ms());
    }

    fn idle(&self) {
        self.watch.set(IDLE, self.owner.now_ms());
    }

    /// The request's body is awaited from its client, from now: the connection waits on
    /// its client, and may be closed to make room at the connection bound, as an unfinished
    /// head may. Called by the service that reads the body when the body has nothing ready;
    /// only a connection busy with a request changes (one already waiting keeps the time its
    /// wait began; one whose answer was made already is left as it is).
    pub fn body_awaited(&self) {
        self.watch.swap(BUSY, BODY, self.owner.now_ms());
    }

    /// A piece of the body arrived, or the body ended: the connection is busy with the
    /// request again (a connection not waiting for a body is left as it is).
    pub fn body_arrived(&self) {
        self.watch.swap(BODY, BUSY, self.owner.now_ms());
    }
}

/// A socket admitted by [`Connections::admit`]: reads and writes pass through, noting the
/// connection's phase; once the connection is closed for a bound, both fail.
pub struct Watched<T> {
    io: T,
    ticket: Ticket,
    framing: Framing,
}

impl<T> std::fmt::Debug for Watched<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watched")
            .field("framing", &self.framing)
            .finish_non_exhaustive()
    }
}

impl<T> Watched<T> {
    /// The handle its request service marks requests with.
    pub fn phase(&self) -> Phase {
        Phase {
            watch: self.ticket.watch.clone(),
            owner: self.ticket.owner.clone(),
        }
    }

    /// The socket.
    pub fn get_ref(&self) -> &T {
        &self.io
    }

    fn closed() -> std::io::Error {
        std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "closed by the server: a connection bound was reached",
        )
    }

    fn read_some(&self) {
        let (w, owner) = (&self.ticket.watch, &self.ticket.owner);
        match self.framing {
            Framing::Sequential => {
                if w.phase().0 == IDLE {
                    w.set(HEAD, owner.now_ms());
                }
            }
            Framing::Multiplexed => w.set(IDLE, owner.now_ms()),
        }
    }

    fn wrote_some(&self) {
        let (w, owner) = (&self.ticket.watch, &self.ticket.owner);
        if self.framing == Framing::Sequential && w.phase().0 == IDLE {
            w.set(IDLE, owner.now_ms());
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Watched<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        if this.ticket.watch.is_closing() {
            return Poll::Ready(Err(Self::closed()));
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.io).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    this.read_some();
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                // Registered, then checked again: a close between the two still wakes us.
                this.ticket.watch.register(0, cx.waker());
                if this.ticket.watch.is_closing() {
                    return Poll::Ready(Err(Self::closed()));
                }
                Poll::Pending
            }
            other => other,
        }
    }
}

impl<T> Watched<T> {
    /// A write's outcome, noted: bytes written refresh an idle wait; a write that must wait
    /// registers to be woken if the connection is closed meanwhile.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<std::io::Result<usize>>,
    ) -> Poll<std::io::Result<usize>> {
        match polled {
            Poll::Ready(Ok(n)) => {
                if n > 0 {
                    self.wrote_some();
                }
                Poll::Ready(Ok(n))
            }
            Poll::Pending => {
                self.ticket.watch.register(1, cx.waker());
                if self.ticket.watch.is_closing() {
                    return Poll::Ready(Err(Self::closed()));
                }
                Poll::Pending
            }
            other => other,
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Watched<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.ticket.watch.is_closing() {
            return Poll::Ready(Err(Self::closed()));
        }
        let polled = Pin::new(&mut this.io).poll_write(cx, buf);
        this.wrote(cx, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        if this.ticket.watch.is_closing() {
            return Poll::Ready(Err(Self::closed()));
        }
        let polled = Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        this.wrote(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

/// A request service that marks its connection busy while a request is decided and
/// answered, and idle once the answer is made.
#[derive(Debug)]
pub struct Tracked<S> {
    inner: S,
    phase: Phase,
}

impl<S> Tracked<S> {
    /// `inner`, marking `phase`.
    pub fn new(inner: S, phase: Phase) -> Self {
        Tracked { inner, phase }
    }
}

impl<S, R> hyper::service::Service<R> for Tracked<S>
where
    S: hyper::service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = TrackedFuture<S::Future>;

    fn call(&self, req: R) -> Self::Future {
        self.phase.busy();
        TrackedFuture {
            call: self.inner.call(req),
            phase: Some(self.phase.clone()),
        }
    }
}

pin_project_lite::pin_project! {
    /// The future of a [`Tracked`] call: the inner one, marking the connection idle when it
    /// completes.
    pub struct TrackedFuture<F> {
        #[pin]
        call: F,
        phase: Option<Phase>,
    }
}

impl<F> std::fmt::Debug for TrackedFuture<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackedFuture").finish_non_exhaustive()
    }
}

impl<F: Future> Future for TrackedFuture<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let out = std::task::ready!(this.call.poll(cx));
        if let Some(p) = this.phase.take() {
            p.idle();
        }
        Poll::Ready(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    fn limits(header_ms: u64, idle_ms: u64, max: usize) -> ConnLimits {
        ConnLimits {
            header_read_timeout: Duration::from_millis(header_ms),
            idle_timeout: Duration::from_millis(idle_ms),
            max_connections: max,
            ..ConnLimits::default()
        }
    }

    #[tokio::test]
    async fn a_body_awaited_makes_room_and_one_outliving_its_answer_changes_nothing() {
        let conns = Connections::new("t", limits(60_000, 60_000, 2));
        let (a, _a) = tokio::io::duplex(64);
        let (b, _b) = tokio::io::duplex(64);
        let upload = conns.admit(a, Framing::Sequential).unwrap();
        let busy = conns.admit(b, Framing::Sequential).unwrap();
        let (p, q) = (upload.phase(), busy.phase());
        let phase = |w: &Watched<tokio::io::DuplexStream>| w.ticket.watch.phase().0;
        p.busy();
        q.busy();
        p.body_awaited();
        assert_eq!(phase(&upload), BODY);
        p.body_arrived();
        assert_eq!(phase(&upload), BUSY);
        p.body_awaited();
        // At the bound, the upload waiting on its client makes room; the busy one stays.
        let (c, _c) = tokio::io::duplex(64);
        assert!(conns.admit(c, Framing::Sequential).is_some());
        assert!(upload.ticket.watch.is_closing() && !busy.ticket.watch.is_closing());
        // A body read after its answer was made (an upstream that answered early) leaves
        // the connection as its answer left it.
        q.idle();
        q.body_awaited();
        assert_eq!(phase(&busy), IDLE);
        q.body_arrived();
        assert_eq!(phase(&busy), IDLE);
    }

    #[tokio::test]
    async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
        let conns = Connections::new("test", limits(60, 10_000, 10));
        let (client, server) = tokio::io::duplex(64);
        let mut watched = conns.admit(server, Framing::Sequential).expect("room");
        assert_eq!(conns.open(), 1);
        let mut buf = [0u8; 8];
        let started = Instant::now();
        let err = watched.read(&mut buf).await.expect_err("closed");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(50));
        drop(watched);
        assert_eq!(conns.open(), 0);
        drop(client);
    }

    #[tokio::test]
    async fn a_busy_connection_is_never_closed_for_time_and_idles_after_its_answer() {
        let conns = Connections::new("test", limits(40, 80, 10));
        let (mut client, server) = tokio::io::duplex(64);
        let mut watched = conns.admit(server, Framing::Sequential).expect("room");
        let phase = watched.phase();
        client.write_all(b"GET").await.unwrap();
        let mut buf = [0u8; 8];
        assert_eq!(watched.read(&mut buf).await.unwrap(), 3);
        phase.busy();
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert!(!phase.watch.is_closing(), "closed while busy");
        watched.write_all(b"ok").await.unwrap();
        phase.idle();
        let started = Instant::now();
        let err = watched.read(&mut buf).await.expect_err("closed when idle");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() >= Duration::from_millis(60));
    }

    #[tokio::test]
    async fn at_the_bound_the_longest_waiting_connection_makes_room_unless_all_are_busy() {
        let conns = Connections::new("test", limits(10_000, 10_000, 2));
        let pause = || std::thread::sleep(Duration::from_millis(5));
        let (_c1, s1) = tokio::io::duplex(64);
        let (_c2, s2) = tokio::io::duplex(64);
        let first = conns.admit(s1, Framing::Sequential).expect("room");
        pause();
        let second = conns.admit(s2, Framing::Sequential).expect("room");
        // The first answers a request and waits anew, from later than the second began: the
        // wait decides, not the order of admission.
        pause();
        conns.inner.tick();
        first.phase().idle();
        let (_c3, s3) = tokio::io::duplex(64);
        let third = conns.admit(s3, Framing::Sequential).expect("room made");
        assert!(
            second.ticket.watch.is_closing(),
            "the longest wait was closed"
        );
        assert!(!first.ticket.watch.is_closing());
        drop(second);
        first.phase().busy();
        third.phase().busy();
        let (_c4, s4) = tokio::io::duplex(64);
        assert!(conns.admit(s4, Framing::Sequential).is_none(), "all busy");
        assert_eq!(conns.open(), 2);
    }

    #[tokio::test]
    async fn a_multiplexed_connection_stays_open_while_its_client_speaks() {
        let conns = Connections::new("test", limits(60, 100, 10));
        let (mut client, server) = tokio::io::duplex(64);
        let mut watched = conns.admit(server, Framing::Multiplexed).expect("room");
        let mut buf = [0u8; 8];
        for _ in 0..6 {
            tokio::time::sleep(Duration::from_millis(40)).await;
            client.write_all(b"p").await.unwrap();
            assert_eq!(watched.read(&mut buf).await.unwrap(), 1);
        }
        let err = watched
            .read(&mut buf)
            .await
            .expect_err("closed once silent");
        assert_eq!(err.kind(), std::io::ErrorKind::TimedOut);
    }
}
