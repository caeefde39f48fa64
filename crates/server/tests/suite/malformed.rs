//! Malformed HTTP/1.1 requests on the data plane and malformed HTTP/2 frames on the gRPC
//! port: each is refused (a 4xx, or the connection closed), none reaches the upstream, a
//! request hidden behind conflicting framing is never read, and the server goes on serving.

use crate::common;

use common::Server;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::Duration;

/// `bytes` on a new connection to `port`, then the whole answer (empty when the server
/// closed the connection without one).
fn raw(port: u16, bytes: &[u8]) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = c.write_all(bytes);
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// The status of every answer in `text` (pipelined answers included).
fn statuses(text: &str) -> Vec<u16> {
    text.match_indices("HTTP/1.1 ")
        .filter_map(|(at, _)| text[at + 9..].get(..3)?.parse().ok())
        .collect()
}

/// Requests no HTTP/1.1 server may answer as a request: each must be refused.
const MALFORMED: [(&str, &[u8]); 14] = [
    ("no version", b"GET /\r\nHost: x\r\n\r\n"),
    ("bad version", b"GET / HTTP/9.9\r\nHost: x\r\n\r\n"),
    ("space in the target", b"GET /a b HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("bad header name", b"GET / HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n"),
    ("NUL in a value", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\0b\r\n\r\n"),
    ("obsolete line folding", b"GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n"),
    (
        "two different Content-Lengths",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
    ),
    (
        "a negative Content-Length",
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n",
    ),
    (
        "a chunk size that is not hex",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
    ),
    (
        "a chunk size past 64 bits",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFFFF\r\na\r\n",
    ),
    (
        "an unknown transfer coding",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc",
    ),
    ("the HTTP/2 preface on HTTP/1.1", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ("a control character in the target", b"GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n"),
    ("no Host", b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n"),
];

#[test]
#[cfg_attr(
    ratelab_missing_nginx,
    ignore = "nginx is not installed (Debian: apt-get install nginx-light)"
)]
fn malformed_http1_requests_are_refused_and_reach_no_upstream() {
    // The upstream echoes what it receives.
    let Some(upstream) = ratelab_testkit::nginx::Nginx::start(
        "malformed_upstream",
        "",
        "location / { return 200 \"$request_method $request_uri\\n\"; }",
    ) else {
        return;
    };
    let url = format!("http://127.0.0.1:{}", upstream.port);
    let s = Server::start(&["--upstream", &url]);
    for (what, bytes) in MALFORMED {
        let answer = raw(s.port, bytes);
        let got = statuses(&answer);
        assert!(
            got.iter()
                .all(|&st| (400..500).contains(&st) || st == 501 || st == 505),
            "{what}: {got:?} {answer:.200}"
        );
        assert!(
            !answer.contains("\r\nserver: nginx"),
            "{what} reached the upstream"
        );
    }
    // Content-Length and chunked together: the body is read as chunked (RFC 9112 §6.3),
    // re-framed for the upstream (which cannot read another body than the limiter did), and
    // the connection is closed after the answer (§6.1): what followed is never a request.
    let smuggled = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\
                     Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n\
                     GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
    let answer = raw(s.port, smuggled);
    assert_eq!(statuses(&answer), [200], "{answer}");
    assert!(answer.ends_with("POST /a\n"), "{answer}");
    // The server goes on serving.
    let answer = raw(
        s.port,
        b"GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert_eq!(statuses(&answer), [200], "{answer}");
}

/// An HTTP/2 frame: length, type, flags, stream, payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut f = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The types of the whole frames at the start of `bytes`, in order.
fn frame_types(mut bytes: &[u8]) -> Vec<u8> {
    let mut types = Vec::new();
    while bytes.len() >= 9 {
        let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        types.push(bytes[3]);
        bytes = bytes.get(9 + len..).unwrap_or_default();
    }
    types
}

#[test]
fn malformed_http2_frames_end_their_connection_and_the_service_goes_on() {
    let s = Server::start(&["--grpc-listen", "127.0.0.1:0"]);
    let grpc = s.grpc_port();
    let settings = frame(4, 0, 0, &[]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "garbage instead of the preface",
            b"GET / HTTP/1.1\r\n\r\n".to_vec(),
        ),
        ("a DATA frame on stream 0", frame(0, 0, 0, b"x")),
        (
            "SETTINGS with a length not a multiple of 6",
            frame(4, 0, 0, &[0, 3, 0]),
        ),
        (
            "a window increment of 0",
            frame(8, 0, 0, &0u32.to_be_bytes()),
        ),
        ("HEADERS on an even stream", frame(1, 4, 2, &[0x82])),
        (
            "HEADERS with a broken HPACK block",
            frame(1, 4, 1, &[0xff, 0xff, 0xff, 0xff]),
        ),
        (
            "a frame past the maximum size",
            frame(0, 0, 1, &vec![0; 20_000]),
        ),
        ("a PING of the wrong length", frame(6, 0, 0, &[0; 7])),
    ];
    for (what, bytes) in cases {
        let mut all = PREFACE.to_vec();
        if what != "garbage instead of the preface" {
            all.extend_from_slice(&settings);
            all.extend_from_slice(&bytes);
        } else {
            all = bytes;
        }
        let mut c = TcpStream::connect(("127.0.0.1", grpc)).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = c.write_all(&all);
        let mut answer = Vec::new();
        // The server ends the connection (GOAWAY, then close): the read ends before the
        // 5 s timeout.
        let start = std::time::Instant::now();
        let _ = c.read_to_end(&mut answer);
        assert!(
            start.elapsed() < Duration::from_secs(4),
            "{what}: the connection stayed open"
        );
        // After the preface, the server's answer is whole frames: one of them a GOAWAY.
        if what != "garbage instead of the preface" {
            assert!(frame_types(&answer).contains(&7), "{what}: {answer:?}");
        }
    }
    // The service goes on: a well-formed connection still gets its SETTINGS.
    let mut c = TcpStream::connect(("127.0.0.1", grpc)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c.write_all(&[PREFACE, &settings].concat()).unwrap();
    let mut head = [0u8; 9];
    c.read_exact(&mut head).unwrap();
    assert_eq!(head[3], 4, "a SETTINGS frame first");
    assert_eq!(s.get("/").0, 200);
}
