//! The lane: a lean pipelined connection to one `redis-server` for the atomic path's script
//! call, the one command a limiter sends per request.
//!
//! redis-rs's multiplexed connection serves every command shape: each call goes through a
//! channel to the connection's task, a general RESP parser builds a tree of values, and a
//! response timer runs beside the caller's own. A decision needs none of that. On the lane a
//! caller encodes its command straight into the connection's output buffer under a lock,
//! queues a one-shot reply slot behind it, and awaits the slot; one task per connection writes
//! and reads, and reads a reply by the shape the scripts answer with (an array of integers,
//! or an error). Encoding a command and reading a reply is the codec's (`codec`, its types
//! re-exported here); this module owns the connection and the calls waiting on it.
//!
//! **Writes.** A call that finds Redis idle (no call in flight, none waiting to be written)
//! writes its command itself, at once. A call made while Redis works waits in the buffer,
//! and the connection task writes everything waiting in one write when it next runs — after
//! the tasks already ready in this scheduler turn (when Redis is busy the task puts itself
//! behind them once before writing), so the calls of one turn share a system call on each
//! side, and Redis reads them in one go. (Writing every call at once instead keeps Redis
//! busier a little sooner, for one more system call per request on the server.)
//!
//! **Failures.** The connection is made on demand (plain TCP, with `AUTH` and `SELECT` from
//! the URL first) and remade on the next call after it is lost. When it is lost, closed by
//! the server, unreadable, or silent while calls wait through two stall checks
//! ([`Lane::stall`] apart), every waiting call fails ([`LaneError::Down`]) and its unsent
//! commands are dropped, never sent later. After a failed connect, a refused handshake, a
//! reply the lane cannot follow or a connection closed before any reply, calls fail at once
//! for a short backoff rather than each trying again. A caller that gives up (its timeout) leaves its slot behind; the reply, when
//! it comes, is dropped. The buffer is bounded ([`MAX_WAITING`] calls): beyond it calls fail
//! at once.

use crate::script_loads::ScriptLoads;
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::oneshot;

mod codec;

pub use codec::{Arg, Command, Encoded, ProtocolError, Reply, parse};

/// Most calls waiting on one lane (sent or not yet sent); beyond, calls fail at once.
pub const MAX_WAITING: usize = 1 << 16;
/// The shortest stall bound a lane takes.
const MIN_STALL: Duration = Duration::from_millis(10);
/// The longest stall bound a lane takes.
const MAX_STALL: Duration = Duration::from_secs(24 * 60 * 60);
/// How long calls fail at once after a connect failed.
const BACKOFF: Duration = Duration::from_millis(100);
/// A read buffer grown past this by a long reply is shrunk once the reply is read.
const MAX_READ_BUFFER: usize = 1 << 20;
/// Why a call got no reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LaneError {
    /// No connection: it could not be made, or it was lost before the reply.
    Down,
    /// Too many calls already waiting.
    Full,
}

/// Where a lane connects, and what it sends first on each connection.
#[derive(Clone)]
pub struct Target {
    /// `host:port`.
    pub addr: String,
    /// `AUTH` and `SELECT`, encoded, and how many commands they are.
    handshake: (Vec<u8>, usize),
    /// Bound on making the connection.
    connect_timeout: Duration,
}

impl std::fmt::Debug for Target {
    /// The address and the handshake's length: never the password.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("addr", &self.addr)
            .field("handshake_commands", &self.handshake.1)
            .finish_non_exhaustive()
    }
}

impl Target {
    /// The target of a `redis://` URL over plain TCP; `None` for any other kind (TLS, a Unix
    /// socket, a cluster), which the lane does not speak.
    pub fn of(url: &str, connect_timeout: Duration) -> Option<Target> {
        use redis::{ConnectionAddr, IntoConnectionInfo};
        let info = url.into_connection_info().ok()?;
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        let settings = info.redis_settings();
        let mut handshake = (Vec::new(), 0);
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password).write_packed_command(&mut handshake.0);
            handshake.1 += 1;
        }
        if settings.db() != 0 {
            redis::cmd("SELECT")
                .arg(settings.db())
                .write_packed_command(&mut handshake.0);
            handshake.1 += 1;
        }
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.clone()
        };
        Some(Target {
            addr: format!("{host}:{port}"),
            handshake,
            connect_timeout,
        })
    }
}

/// Who waits for a reply.
enum Waiter {
    /// The connection's own first commands: any error reply ends it.
    Handshake,
    /// A caller.
    Call(oneshot::Sender<Reply>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// No connection and no task: the next call starts one.
    Idle,
    /// The task is connecting: calls queue.
    Connecting,
    /// Connected.
    Up,
    /// A connect failed: calls fail until then.
    Down(Instant),
}

struct State {
    /// Commands not yet handed to the connection, encoded.
    out: Vec<u8>,
    /// How many of `waiting`'s last entries are commands in `out`.
    queued: usize,
    /// The batches in flight (handed to the connection, not wholly answered): how many
    /// commands of each are unanswered, oldest first.
    batches: VecDeque<usize>,
    /// A waiter per command sent or queued, in order.
    waiting: VecDeque<Waiter>,
    phase: Phase,
    /// The connection, while up: a call finding Redis idle writes to it itself.
    stream: Option<Arc<TcpStream>>,
    /// The connection task holds part of a batch it has not finished writing.
    writing: bool,
    /// The connection task, to wake when there is something to write.
    io: Option<Waker>,
    /// Every handle is gone: the task ends.
    closed: bool,
    /// Counts the connection tasks started: a task touches the state only while it is the
    /// latest.
    epoch: u64,
}

impl State {
    /// Commands written and not yet answered.
    fn in_flight(&self) -> usize {
        self.waiting.len() - self.queued
    }

    /// Ends the connection: every waiting call fails, unsent commands are dropped. What it
    /// gives back (the waiters, the socket) is to be dropped outside the lock.
    fn reset(&mut self, phase: Phase) -> Ended {
        self.phase = phase;
        self.out.clear();
        self.queued = 0;
        self.batches.clear();
        self.writing = false;
        self.io = None;
        Ended {
            _waiters: std::mem::take(&mut self.waiting),
            _stream: self.stream.take(),
        }
    }
}

struct Shared {
    target: Target,
    stall: Duration,
    state: Mutex<State>,
    /// The scripts loaded over this lane after a `NOSCRIPT`, one load per burst.
    loads: ScriptLoads,
}

/// A lean pipelined connection to one server (see the module's docs). Dropping the last
/// handle closes it.
pub struct Lane {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Lane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lane")
            .field("addr", &self.shared.target.addr)
            .finish_non_exhaustive()
    }
}

impl Drop for Lane {
    fn drop(&mut self) {
        let waker = {
            let mut st = self.shared.state.lock();
            st.closed = true;
            st.io.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Lane {
    /// A lane to `target`; a connection whose server answers nothing while calls wait, through
    /// two checks `stall` apart (10 ms to a day), is dropped. Nothing is connected until the
    /// first call.
    pub fn new(target: Target, stall: Duration) -> Lane {
        Lane {
            shared: Arc::new(Shared {
                target,
                stall: stall.clamp(MIN_STALL, MAX_STALL),
                state: Mutex::new(State {
                    out: Vec::with_capacity(16 * 1024),
                    queued: 0,
                    batches: VecDeque::new(),
                    stream: None,
                    writing: false,
                    waiting: VecDeque::new(),
                    phase: Phase::Idle,
                    io: None,
                    closed: false,
                    epoch: 0,
                }),
                loads: ScriptLoads::default(),
            }),
        }
    }

    /// The scripts loaded over this lane after a `NOSCRIPT`: the calls that find a script
    /// missing take turns to load it, and only the first does ([`crate::script_loads`]).
    pub(crate) fn script_loads(&self) -> &ScriptLoads {
        &self.shared.loads
    }

    /// The time between two stall checks: a connection that answers nothing while calls wait
    /// through two checks in a row is dropped.
    pub fn stall(&self) -> Duration {
        self.shared.stall
    }

    /// Queues `command`; its reply arrives on the receiver (which fails if the connection is
    /// lost first). The first call, and the first after a connection is lost, starts the
    /// connection's task on the caller's tokio runtime; such a call outside a runtime fails
    /// ([`LaneError::Down`]). A call that finds Redis idle writes its command itself, holding
    /// the lane's lock for that one non-blocking write.
    pub fn call(&self, command: &Command) -> Result<oneshot::Receiver<Reply>, LaneError> {
        let (tx, rx) = oneshot::channel();
        let mut st = self.shared.state.lock();
        if st.waiting.len() >= MAX_WAITING {
            return Err(LaneError::Full);
        }
        let mut start = None;
        match st.phase {
            Phase::Down(until) if Instant::now() < until => return Err(LaneError::Down),
            Phase::Down(_) | Phase::Idle => {
                let runtime = tokio::runtime::Handle::try_current().map_err(|_| LaneError::Down)?;
                st.phase = Phase::Connecting;
                st.epoch += 1;
                start = Some((runtime, st.epoch));
            }
            Phase::Connecting | Phase::Up => {}
        }
        // Redis idle (nothing in flight, nothing before this call to write): the call goes
        // out now, from here. Otherwise it joins the batch the connection task writes when it
        // next runs, which this call wakes it for if it is the batch's first.
        let idle = st.batches.is_empty() && st.out.is_empty() && !st.writing;
        let first = st.out.is_empty();
        st.out.extend_from_slice(command.as_bytes());
        st.queued += 1;
        st.waiting.push_back(Waiter::Call(tx));
        if idle
            && let Some(stream) = &st.stream
            && let Ok(n) = stream.try_write(&st.out)
        {
            st.out.drain(..n);
            let sent = std::mem::take(&mut st.queued);
            st.batches.push_back(sent);
        }
        let waker = if first && !st.out.is_empty() {
            st.io.take()
        } else {
            None
        };
        drop(st);
        if let Some(w) = waker {
            w.wake();
        }
        // The task starts outside the lock: a runtime that is shutting down drops it at once,
        // and its guard then takes the lock to undo the start.
        if let Some((runtime, epoch)) = start {
            // Until it is connected, a task that ends (a connect that fails, a runtime that
            // cannot connect) leaves the lane backing off.
            let guard = TaskGuard {
                shared: self.shared.clone(),
                epoch,
                then: Phase::Down(Instant::now() + BACKOFF),
            };
            runtime.spawn(run(guard));
        }
        Ok(rx)
    }
}

/// A lost connection's waiters (dropping them fails their calls) and socket, dropped
/// outside the lock.
struct Ended {
    _waiters: VecDeque<Waiter>,
    _stream: Option<Arc<TcpStream>>,
}

/// A connection task's hold on the lane: when the task ends, however it ends (its work
/// done, or dropped unpolled or mid-way by a runtime shutting down), the guard resets the
/// lane to `then` and fails every waiting call, unless a later task has taken over.
struct TaskGuard {
    shared: Arc<Shared>,
    epoch: u64,
    then: Phase,
}

impl TaskGuard {
    /// Runs `f` on the state while this task is the latest; `None` once it is not.
    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> Option<T> {
        let mut st = self.shared.state.lock();
        (st.epoch == self.epoch).then(|| f(&mut st))
    }
}

impl Drop for TaskGuard {
    fn drop(&mut self) {
        // The calls fail, and the socket closes, once the lock is released.
        drop(self.with(|st| st.reset(self.then)));
    }
}

/// The connection's task: connects, then writes and reads until the connection is lost or
/// the lane closed; its guard resets the lane when it ends.
async fn run(mut guard: TaskGuard) {
    let shared = guard.shared.clone();
    let target = &shared.target;
    let connect = tokio::time::timeout(target.connect_timeout, TcpStream::connect(&target.addr));
    let Ok(Ok(stream)) = connect.await else {
        guard.then = Phase::Down(Instant::now() + BACKOFF);
        return;
    };
    let _ = stream.set_nodelay(true);
    let stream = Arc::new(stream);
    let up = guard.with(|st| {
        // The handshake goes first on the wire, before the calls queued while connecting.
        let (bytes, n) = &target.handshake;
        if *n > 0 {
            st.out.splice(0..0, bytes.iter().copied());
            let at = st.waiting.len() - st.queued;
            for _ in 0..*n {
                st.waiting.insert(at, Waiter::Handshake);
            }
            st.queued += n;
        }
        st.phase = Phase::Up;
        st.stream = Some(stream.clone());
    });
    if up.is_none() {
        return;
    }
    guard.then = Phase::Idle;
    let first_check = tokio::time::Instant::now() + shared.stall;
    let mut conn = Connection {
        stream,
        write: Vec::with_capacity(16 * 1024),
        written: 0,
        read: vec![0; 16 * 1024],
        filled: 0,
        parsed: Vec::new(),
        replies: Vec::new(),
        tick: tokio::time::interval_at(first_check, shared.stall),
        answered: 0,
        quiet_ticks: 0,
        deferred: false,
        replied: false,
    };
    conn.tick
        .set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = poll_fn(|cx| conn.poll(&guard, cx)).await;
    if end == End::Refused || !conn.replied {
        // A server that refuses the handshake, speaks something else, or closes connections
        // without answering (a proxy whose backend is down, a server at its client limit) is
        // not asked again by every call.
        guard.then = Phase::Down(Instant::now() + BACKOFF);
    }
}

/// Why a connection ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum End {
    /// Closed, failed, silent, or the lane closed: the next call connects again.
    Lost,
    /// It refused the handshake or sent what is not a reply to the calls sent.
    Refused,
}

struct Connection {
    stream: Arc<TcpStream>,
    /// The batch being written, and how much of it is.
    write: Vec<u8>,
    written: usize,
    /// Bytes read and not yet parsed.
    read: Vec<u8>,
    /// How much of `read` holds them (the rest is room to read into).
    filled: usize,
    /// Replies parsed in one read, then with their waiters.
    parsed: Vec<Reply>,
    replies: Vec<(Waiter, Reply)>,
    /// The stall check.
    tick: tokio::time::Interval,
    /// Replies since the last tick.
    answered: u64,
    /// Ticks in a row with calls in flight and no reply.
    quiet_ticks: u32,
    /// The task put itself behind the ready tasks before writing.
    deferred: bool,
    /// The server has answered on this connection.
    replied: bool,
}

impl Connection {
    /// Makes progress; ready when the connection is to end.
    fn poll(&mut self, guard: &TaskGuard, cx: &mut Context<'_>) -> Poll<End> {
        loop {
            let mut progress = false;
            let mut defer = false;
            {
                let mut st = guard.shared.state.lock();
                if st.closed || st.epoch != guard.epoch {
                    return Poll::Ready(End::Lost);
                }
                if !st.io.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                    st.io = Some(cx.waker().clone());
                }
                // Everything queued goes in one write. (Bytes without a call are the rest of
                // a batch a caller began writing, its calls already in flight.)
                if self.write.is_empty() {
                    st.writing = false;
                }
                if self.write.is_empty()
                    && !st.out.is_empty()
                    && !self.deferred
                    && !st.batches.is_empty()
                {
                    // Redis is busy: let the tasks ready now queue their calls first.
                    self.deferred = true;
                    defer = true;
                } else if self.write.is_empty() && !st.out.is_empty() {
                    self.deferred = false;
                    std::mem::swap(&mut self.write, &mut st.out);
                    let sent = std::mem::take(&mut st.queued);
                    if sent > 0 {
                        st.batches.push_back(sent);
                    }
                    st.writing = true;
                }
            }
            if defer {
                cx.waker().wake_by_ref();
            }
            if !self.write.is_empty() {
                match self.poll_write(cx) {
                    Poll::Ready(Ok(n)) => progress |= n > 0,
                    Poll::Ready(Err(end)) => return Poll::Ready(end),
                    Poll::Pending => {}
                }
            }
            match self.poll_read(guard, cx) {
                Poll::Ready(Ok(n)) => progress |= n > 0,
                Poll::Ready(Err(end)) => return Poll::Ready(end),
                Poll::Pending => {}
            }
            if self.stalled(guard, cx) {
                return Poll::Ready(End::Lost);
            }
            if !progress {
                return Poll::Pending;
            }
        }
    }

    /// Writes what it can of the batch: how many bytes.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Poll<Result<usize, End>> {
        let mut total = 0;
        while self.written < self.write.len() {
            if self.stream.poll_write_ready(cx).is_pending() {
                return if total > 0 {
                    Poll::Ready(Ok(total))
                } else {
                    Poll::Pending
                };
            }
            match self.stream.try_write(&self.write[self.written..]) {
                Ok(0) => return Poll::Ready(Err(End::Lost)),
                Ok(n) => {
                    self.written += n;
                    total += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return Poll::Ready(Err(End::Lost)),
            }
        }
        self.write.clear();
        self.written = 0;
        Poll::Ready(Ok(total))
    }

    /// Reads what has arrived and answers the waiters of every whole reply: how many replies.
    fn poll_read(&mut self, guard: &TaskGuard, cx: &mut Context<'_>) -> Poll<Result<usize, End>> {
        loop {
            if self.stream.poll_read_ready(cx).is_pending() {
                return Poll::Pending;
            }
            if self.read.len() - self.filled < 4096 {
                self.read.resize(self.read.len() * 2, 0);
            }
            match self.stream.try_read(&mut self.read[self.filled..]) {
                Ok(0) => return Poll::Ready(Err(End::Lost)),
                Ok(n) => {
                    self.filled += n;
                    break;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => return Poll::Ready(Err(End::Lost)),
            }
        }
        let mut used = 0;
        loop {
            match parse(&self.read[used..self.filled]) {
                Ok(Some((reply, n))) => {
                    used += n;
                    self.parsed.push(reply);
                }
                Ok(None) => break,
                Err(_) => return Poll::Ready(Err(End::Refused)),
            }
        }
        self.read.copy_within(used..self.filled, 0);
        self.filled -= used;
        if self.filled > MAX_READ_BUFFER {
            // A reply this long is not one the scripts give.
            return Poll::Ready(Err(End::Refused));
        }
        if self.read.len() > MAX_READ_BUFFER && self.filled < 16 * 1024 {
            // A long reply grew the buffer: give the room back.
            self.read.truncate(16 * 1024);
            self.read.shrink_to_fit();
        }
        let n = self.parsed.len();
        self.replied |= n > 0;
        {
            let mut st = guard.shared.state.lock();
            if st.epoch != guard.epoch {
                return Poll::Ready(Err(End::Lost));
            }
            if n > st.in_flight() {
                // More replies than commands sent: not a server this lane can follow.
                return Poll::Ready(Err(End::Refused));
            }
            for reply in self.parsed.drain(..) {
                let Some(waiter) = st.waiting.pop_front() else {
                    return Poll::Ready(Err(End::Refused));
                };
                if let Some(left) = st.batches.front_mut() {
                    *left -= 1;
                    if *left == 0 {
                        st.batches.pop_front();
                    }
                }
                self.replies.push((waiter, reply));
            }
        }
        self.answered += n as u64;
        for (waiter, reply) in self.replies.drain(..) {
            match waiter {
                Waiter::Handshake if matches!(reply, Reply::Error(_)) => {
                    return Poll::Ready(Err(End::Refused));
                }
                Waiter::Handshake => {}
                Waiter::Call(tx) => {
                    let _ = tx.send(reply);
                }
            }
        }
        Poll::Ready(Ok(n.max(1)))
    }

    /// Whether calls have waited on a silent server through two stall checks in a row (the
    /// checks a stall bound apart: for two to three stall bounds).
    fn stalled(&mut self, guard: &TaskGuard, cx: &mut Context<'_>) -> bool {
        while self.tick.poll_tick(cx).is_ready() {
            let waiting = guard.with(|st| st.in_flight() > 0).unwrap_or(false);
            if waiting && self.answered == 0 {
                self.quiet_ticks += 1;
            } else {
                self.quiet_ticks = 0;
            }
            self.answered = 0;
            if self.quiet_ticks >= 2 {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::{Arg, Command, Lane, LaneError, Reply, Target};
    use std::io::{Read, Write};
    use std::time::{Duration, Instant};

    /// A peer on a loopback port that answers each connection's first read with `answer`,
    /// then holds the connection open; how many connections it accepted.
    fn peer(answer: &'static [u8]) -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { return };
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    if conn.read(&mut buf).is_ok_and(|n| n > 0) {
                        let _ = conn.write_all(answer);
                    }
                    let _ = conn.read(&mut buf);
                    std::thread::sleep(Duration::from_secs(5));
                });
            }
        });
        (port, accepted)
    }

    fn lane_to(port: u16, stall: Duration) -> Lane {
        let url = format!("redis://127.0.0.1:{port}/");
        Lane::new(Target::of(&url, Duration::from_secs(1)).unwrap(), stall)
    }

    fn cmd() -> Command {
        Command::new([Arg::Bytes(b"EVALSHA"), Arg::Bytes(b"0123"), Arg::Int(0)].into_iter())
    }

    #[test]
    fn targets_are_plain_tcp_urls_with_their_handshake() {
        let of = |url: &str| Target::of(url, Duration::from_secs(1));
        let plain = of("redis://127.0.0.1:6379/").unwrap();
        assert_eq!(
            (plain.addr.as_str(), plain.handshake.1),
            ("127.0.0.1:6379", 0)
        );
        assert_eq!(of("redis://[::1]:7000").unwrap().addr, "[::1]:7000");
        let full = of("redis://ann:s3cret@localhost:6380/3").unwrap();
        assert_eq!(full.addr, "localhost:6380");
        assert_eq!(
            full.handshake,
            (
                b"*3\r\n$4\r\nAUTH\r\n$3\r\nann\r\n$6\r\ns3cret\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n"
                    .to_vec(),
                2
            )
        );
        let password_only = of("redis://:pw@h:1").unwrap();
        assert!(
            password_only
                .handshake
                .0
                .starts_with(b"*2\r\n$4\r\nAUTH\r\n$2\r\npw")
        );
        assert!(!format!("{full:?}").contains("s3cret"), "{full:?}");
        for other in [
            "rediss://127.0.0.1:6379/",
            "unix:///tmp/redis.sock",
            "redis+unix:///tmp/r.sock",
            "not a url",
        ] {
            assert!(of(other).is_none(), "{other}");
        }
    }

    #[test]
    fn a_peer_that_is_not_redis_fails_the_calls_and_is_left() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Garbage, and more replies than calls: each fails the call and ends the
            // connection; after a backoff the next call makes a new one.
            for answer in [&b"?garbage\r\n"[..], b"*1\r\n:1\r\n*1\r\n:2\r\n"] {
                let (port, accepted) = peer(answer);
                let lane = lane_to(port, Duration::from_secs(10));
                for round in 1..=2 {
                    let got =
                        tokio::time::timeout(Duration::from_secs(2), lane.call(&cmd()).unwrap())
                            .await
                            .expect("answered, not hung");
                    // (The second answer's first call gets the first reply, or fails with it.)
                    if answer.starts_with(b"?") || round == 2 {
                        assert!(got.is_err(), "{answer:?}: {got:?}");
                    }
                    // Within the backoff that follows, calls fail at once, unsent.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    assert_eq!(lane.call(&cmd()).err(), Some(LaneError::Down));
                    tokio::time::sleep(super::BACKOFF + Duration::from_millis(20)).await;
                }
                assert_eq!(
                    accepted.load(std::sync::atomic::Ordering::SeqCst),
                    2,
                    "{answer:?}"
                );
            }
        });
    }

    #[test]
    fn a_lane_outlives_the_runtime_its_connection_ran_on() {
        let (port, accepted) = peer(b"*1\r\n:1\r\n");
        let lane = lane_to(port, Duration::from_secs(10));
        let once = || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let got = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(2), lane.call(&cmd()).unwrap()).await
            });
            // Dropping the runtime ends the connection's task mid-way.
            drop(rt);
            got
        };
        assert_eq!(once(), Ok(Ok(Reply::Ints(vec![1]))));
        assert_eq!(
            once(),
            Ok(Ok(Reply::Ints(vec![1]))),
            "a new connection on the new runtime"
        );
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[test]
    fn a_peer_that_closes_without_answering_is_backed_off() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                drop(conn);
            }
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let lane = lane_to(port, Duration::from_secs(10));
            let got = tokio::time::timeout(Duration::from_secs(2), lane.call(&cmd()).unwrap())
                .await
                .expect("failed, not hung");
            assert!(got.is_err());
            tokio::time::sleep(Duration::from_millis(10)).await;
            assert_eq!(
                lane.call(&cmd()).err(),
                Some(LaneError::Down),
                "backing off"
            );
        });
    }

    #[test]
    fn a_silent_peer_is_dropped_after_the_stall_bound() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            // Reads, never answers.
            let (port, _) = peer(b"");
            let lane = lane_to(port, Duration::from_millis(100));
            let started = Instant::now();
            let got = tokio::time::timeout(Duration::from_secs(3), lane.call(&cmd()).unwrap())
                .await
                .expect("failed, not hung");
            assert!(got.is_err());
            let took = started.elapsed();
            assert!(
                took >= Duration::from_millis(100) && took < Duration::from_secs(1),
                "{took:?}"
            );
        });
    }

    #[test]
    fn nothing_listening_fails_at_once_then_for_the_backoff() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let lane = lane_to(port, Duration::from_secs(1));
            let first = lane.call(&cmd()).unwrap();
            assert!(first.await.is_err(), "refused");
            assert_eq!(
                lane.call(&cmd()).err(),
                Some(LaneError::Down),
                "within the backoff"
            );
        });
        // Outside a runtime: an error, not a panic.
        assert_eq!(
            lane_to(1, Duration::from_secs(1)).call(&cmd()).err(),
            Some(LaneError::Down)
        );
    }
}
