//! Slow and idle connections are closed after the stated timeouts while other clients are
//! served, and the connection bound makes room rather than letting a flood of silent
//! connections shut the door (bounded counts, loopback only).

use crate::common;

use common::{Server, series};
use std::io::{ErrorKind, Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// Whether the server has closed `c`: what it sent is read (and dropped) without waiting,
/// up to its end.
fn closed(mut c: &TcpStream) -> bool {
    let mut buf = [0u8; 4096];
    c.set_nonblocking(true).unwrap();
    let r = loop {
        match c.read(&mut buf) {
            Ok(0) => break true,
            Ok(_) => continue,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break false,
            Err(_) => break true,
        }
    };
    c.set_nonblocking(false).unwrap();
    r
}

/// A connection that sent half a request's head and nothing more.
fn half_sent(port: u16) -> TcpStream {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    c
}

/// The status of `GET /` sent on a fresh connection (closed after the answer).
fn get_fresh(port: u16) -> u16 {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut answer = Vec::new();
    c.read_to_end(&mut answer).unwrap();
    let head = String::from_utf8_lossy(&answer[..answer.len().min(12)]).into_owned();
    head.strip_prefix("HTTP/1.1 ")
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {head:?}"))
}

const UNLIMITED: [&str; 8] = [
    "--capacity",
    "1000000",
    "--refill-per-sec",
    "1000000",
    "--ip-capacity",
    "1000000",
    "--ip-refill-per-sec",
    "1000000",
];

#[test]
fn half_sent_requests_are_closed_after_the_header_timeout_while_a_client_is_served() {
    let mut args = UNLIMITED.to_vec();
    args.extend([
        "--header-read-timeout-ms",
        "1500",
        "--idle-timeout-ms",
        "10000",
    ]);
    let s = Server::start(&args);
    const SLOW: usize = 300;
    const TIMEOUT: Duration = Duration::from_millis(1500);
    let started = Instant::now();
    // Each connection's head timer starts when the server accepts it, after `connect`
    // returned here: none may be closed before that moment plus the timeout, however slowly
    // a loaded machine runs this loop.
    let slow: Vec<(TcpStream, Instant)> = (0..SLOW)
        .map(|_| {
            let opened = Instant::now();
            (half_sent(s.port), opened)
        })
        .collect();
    // Connections seen open while their timeout had not passed: the check below is only as
    // good as these observations, so there must be some.
    let mut seen_before_deadline = 0;
    let mut early = Vec::new();
    let mut served = 0;
    loop {
        let mut open = 0;
        for (c, opened) in &slow {
            let deadline = *opened + TIMEOUT;
            let looked = Instant::now();
            if !closed(c) {
                open += 1;
                seen_before_deadline += usize::from(looked < deadline);
            } else if Instant::now() < deadline {
                // Closed before this look ended, and the look ended before the deadline.
                early.push(opened.duration_since(started));
            }
        }
        if open == 0 {
            break;
        }
        // A normal client is served throughout, on fresh connections.
        assert_eq!(get_fresh(s.port), 200, "after {:?}", started.elapsed());
        served += 1;
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{open} of {SLOW} half-sent requests still open after {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(25));
    }
    assert!(
        early.is_empty(),
        "closed before their timeout: the connections opened at {early:?}"
    );
    assert!(seen_before_deadline > 0, "never looked before a timeout");
    assert!(served > 10);
    let m = s.metrics();
    let closed_for = |reason: &str| {
        let labels = [r#"listener="data""#, &format!("reason=\"{reason}\"")];
        series(&m, "ratelab_connections_closed_total", &labels).unwrap_or(-1.0)
    };
    assert!(closed_for("header_timeout") >= SLOW as f64, "{m}");
    assert_eq!(closed_for("evicted"), 0.0);
}

#[test]
fn an_idle_keep_alive_connection_is_closed_after_the_idle_timeout_not_before() {
    let mut args = UNLIMITED.to_vec();
    args.extend([
        "--header-read-timeout-ms",
        "300",
        "--idle-timeout-ms",
        "1500",
    ]);
    let s = Server::start(&args);
    let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut answer = [0u8; 512];
    let n = c.read(&mut answer).unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
    let answered = Instant::now();
    std::thread::sleep(Duration::from_millis(900));
    assert!(
        !closed(&c),
        "closed at the header timeout, before the idle one"
    );
    // Still usable: a second request on it is answered.
    c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let n = c.read(&mut answer).unwrap();
    assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
    let again = Instant::now();
    while !closed(&c) {
        assert!(again.elapsed() < Duration::from_secs(6), "never closed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        again.elapsed() >= Duration::from_millis(1400),
        "{:?}",
        again.elapsed()
    );
    assert!(answered.elapsed() >= Duration::from_millis(2300));
}

#[test]
fn at_the_connection_bound_the_longest_waiting_connection_makes_room() {
    let mut args = UNLIMITED.to_vec();
    args.extend([
        "--max-connections",
        "40",
        "--header-read-timeout-ms",
        "60000",
    ]);
    let s = Server::start(&args);
    let silent: Vec<TcpStream> = (0..40)
        .map(|_| {
            let c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
            std::thread::sleep(Duration::from_millis(2));
            c
        })
        .collect();
    // The listener is full of silent connections; real clients are still served, each
    // making room by closing the connection that has waited longest.
    let mut kept = Vec::new();
    for _ in 0..5 {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let mut answer = [0u8; 512];
        let n = c.read(&mut answer).unwrap();
        assert!(answer[..n].starts_with(b"HTTP/1.1 200"));
        kept.push(c);
    }
    let start = Instant::now();
    while !silent[..5].iter().all(closed) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no room was made: {}",
            s.metrics()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        silent[5..].iter().all(|c| !closed(c)),
        "only the oldest were closed"
    );
    // A client sees its connection closed before the server's task for it has ended and
    // counted it: wait for the gauge to settle rather than read it once.
    let evicted = [r#"listener="data""#, r#"reason="evicted""#];
    let open = |m: &str| series(m, "ratelab_connections_open", &[r#"listener="data""#]);
    let settled = Instant::now();
    let mut m = s.metrics();
    while open(&m) != Some(40.0) && settled.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
        m = s.metrics();
    }
    assert_eq!(open(&m), Some(40.0), "{m}");
    assert_eq!(
        series(&m, "ratelab_connections_closed_total", &evicted),
        Some(5.0),
        "{m}"
    );
}

#[test]
fn a_silent_connection_to_the_rate_limit_service_is_closed_too() {
    let s = Server::start(&[
        "--grpc-listen",
        "127.0.0.1:0",
        "--header-read-timeout-ms",
        "500",
    ]);
    let grpc = s.grpc_port();
    let c = TcpStream::connect(("127.0.0.1", grpc)).unwrap();
    let start = Instant::now();
    while !closed(&c) {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "never closed: {}",
            s.metrics()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(start.elapsed() >= Duration::from_millis(400));
    let m = s.metrics();
    let labels = [r#"listener="grpc""#, r#"reason="header_timeout""#];
    assert_eq!(
        series(&m, "ratelab_connections_closed_total", &labels),
        Some(1.0),
        "{m}"
    );
}
