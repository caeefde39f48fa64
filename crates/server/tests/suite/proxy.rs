//! The reverse proxy: the real `ratelab-server` in front of a real upstream HTTP server
//! started by the test, driven by a real HTTP client.

use crate::common;

use axum::body::Bytes;
use axum::extract::Request;
use common::Server;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// An upstream on a free port, counting the requests that reach it. It answers 201 with what
/// it received: method, path and query, the headers the test asks about, and the body's length
/// and checksum; `/big` answers 2 MiB, and `/slow` answers after 600 ms.
struct Upstream {
    port: u16,
    hits: Arc<AtomicU64>,
    _thread: std::thread::JoinHandle<()>,
}

fn checksum(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(*b)))
}

impl Upstream {
    fn start() -> Upstream {
        let hits = Arc::new(AtomicU64::new(0));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let counter = hits.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let handler = move |req: Request| {
                    let counter = counter.clone();
                    async move {
                        counter.fetch_add(1, Ordering::SeqCst);
                        let (parts, body) = req.into_parts();
                        // A body the proxy cut short (past a bound) ends the request here.
                        let Ok(body) = axum::body::to_bytes(body, 64 << 20).await else {
                            return http::Response::builder()
                                .status(400)
                                .body(axum::body::Body::from("cut short\n"))
                                .unwrap();
                        };
                        let body: Bytes = body;
                        if parts.uri.path().ends_with("/slow") {
                            tokio::time::sleep(std::time::Duration::from_millis(600)).await;
                        }
                        if parts.uri.path().ends_with("/big") {
                            return http::Response::builder()
                                .status(200)
                                .body(axum::body::Body::from(vec![7u8; 2 << 20]))
                                .unwrap();
                        }
                        let seen = |h: &str| {
                            parts
                                .headers
                                .get(h)
                                .and_then(|v| v.to_str().ok())
                                .unwrap_or("-")
                                .to_owned()
                        };
                        // Any other header naming an address or a forwarding.
                        let written = ["forwarded", "x-forwarded-for", "x-forwarded-host"];
                        let addressing: Vec<&str> = parts
                            .headers
                            .keys()
                            .map(|k| k.as_str())
                            .filter(|k| k.contains("ip") || k.contains("forward"))
                            .filter(|k| !written.contains(k) && *k != "x-forwarded-proto")
                            .collect();
                        let addressing = match addressing.is_empty() {
                            true => "-".to_owned(),
                            false => addressing.join(","),
                        };
                        let text = format!(
                            "{} {} x-custom={} x-secret={} keep-alive={} connection={} \
                             x-forwarded-for={} x-forwarded-host={} x-forwarded-proto={} \
                             forwarded={} addressing={} len={} sum={}\n",
                            parts.method,
                            parts.uri,
                            seen("x-custom"),
                            seen("x-secret"),
                            seen("keep-alive"),
                            seen("connection"),
                            seen("x-forwarded-for"),
                            seen("x-forwarded-host"),
                            seen("x-forwarded-proto"),
                            seen("forwarded"),
                            addressing,
                            body.len(),
                            checksum(&body)
                        );
                        http::Response::builder()
                            .status(201)
                            .header("x-upstream", "yes")
                            .header("connection", "x-up-secret")
                            .header("x-up-secret", "1")
                            .body(axum::body::Body::from(text))
                            .unwrap()
                    }
                };
                let app = axum::Router::new().fallback(handler);
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                axum::serve(listener, app).await.unwrap();
            });
        });
        Upstream {
            port,
            hits,
            _thread: thread,
        }
    }

    fn hits(&self) -> u64 {
        self.hits.load(Ordering::SeqCst)
    }
}

#[test]
fn admitted_requests_reach_the_upstream_and_denied_ones_never_do() {
    let up = Upstream::start();
    let url = format!("http://127.0.0.1:{}/base", up.port);
    let s = Server::start(&[
        "--capacity",
        "3",
        "--refill-per-sec",
        "1",
        "--upstream",
        &url,
    ]);

    let r = s.send(
        "GET",
        "/echo/a?b=c&d=e",
        &[
            ("x-api-key", "k1"),
            ("x-custom", "kept"),
            ("connection", "x-secret"),
            ("x-secret", "hop"),
            ("keep-alive", "timeout=5"),
        ],
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(
        r.body
            .starts_with("GET /base/echo/a?b=c&d=e x-custom=kept x-secret=- keep-alive=- "),
        "{}",
        r.body
    );
    assert!(r.body.contains("x-forwarded-for=127.0.0.1 "), "{}", r.body);
    assert!(
        r.body.contains("x-forwarded-proto=http forwarded=- "),
        "{}",
        r.body
    );
    assert!(
        r.body
            .contains(&format!("x-forwarded-host=127.0.0.1:{} ", s.port)),
        "{}",
        r.body
    );
    // The upstream's answer, with the RateLimit fields added and its hop-by-hop ones gone.
    assert_eq!(r.header("x-upstream"), "yes");
    assert_eq!(
        r.header("x-up-secret"),
        "",
        "named by the upstream's Connection"
    );
    assert!(r.header("ratelimit-policy").contains("\"per-key\";q=3"));
    assert!(r.header("ratelimit").contains("\"per-key\";r=2"));

    // A client's own forwarding headers are not believed: the upstream sees its address.
    let spoofed = s.send(
        "GET",
        "/who",
        &[
            ("x-api-key", "k2"),
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-proto", "https"),
            ("forwarded", "for=6.6.6.6"),
            ("x-real-ip", "6.6.6.6"),
            ("true-client-ip", "6.6.6.6"),
            ("x-client-ip", "6.6.6.6"),
            ("cf-connecting-ip", "6.6.6.6"),
            ("X_Forwarded_For", "6.6.6.6"),
            ("x_real_ip", "6.6.6.6"),
            ("x_forwarded_proto", "https"),
        ],
    );
    assert!(
        spoofed.body.contains("x-forwarded-for=127.0.0.1 ")
            && spoofed
                .body
                .contains("x-forwarded-proto=http forwarded=- addressing=- "),
        "{}",
        spoofed.body
    );

    // A streamed body, both ways.
    let body: Vec<u8> = (0..(1u32 << 20)).map(|i| (i % 251) as u8).collect();
    let posted = s.send_body("POST", "/upload", &[("x-api-key", "k1")], body.clone());
    assert_eq!(posted.status, 201);
    assert!(
        posted
            .body
            .ends_with(&format!("len={} sum={}\n", body.len(), checksum(&body))),
        "{}",
        posted.body
    );
    let big = s.send("GET", "/big", &[("x-api-key", "k1")]);
    assert_eq!(big.status, 200);
    assert_eq!(big.body.len(), 2 << 20);

    // Denied: answered by the limiter, never forwarded.
    let before = up.hits();
    assert_eq!(before, 4);
    let denied = s.send("GET", "/echo", &[("x-api-key", "k1")]);
    assert_eq!(denied.status, 429);
    assert_eq!(denied.header("content-type"), "application/problem+json");
    assert_eq!(up.hits(), before, "a denied request reached the upstream");
}

#[test]
fn an_unreachable_upstream_is_a_502_with_a_body() {
    // Nothing listens there now; and on 127.0.0.2 no server of a test can take the port
    // meanwhile (they listen on 127.0.0.1), as this one's own listener could, forwarding to
    // itself.
    let port = std::net::TcpListener::bind("127.0.0.2:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.2:{port}");
    let s = Server::start(&["--upstream", &url, "--upstream-timeout-ms", "2000"]);
    let r = s.send("GET", "/x", &[]);
    assert_eq!(r.status, 502);
    assert_eq!(
        r.body, "upstream unreachable\n",
        "the upstream's address stays internal"
    );
    s.wait_stderr(&format!("upstream {url} unreachable"));
    // Still limited and counted on the way.
    assert!(r.header("ratelimit-policy").contains("per-ip"));
}

#[test]
fn a_bad_upstream_url_exits_2() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
        .args(["--upstream", "https://example.com"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("https upstreams are not supported"));
}

#[test]
fn a_trusted_proxys_forwarding_headers_are_extended() {
    let up = Upstream::start();
    let url = format!("http://127.0.0.1:{}", up.port);
    let s = Server::start(&["--upstream", &url, "--trusted-proxy", "127.0.0.1"]);
    let r = s.send(
        "GET",
        "/who",
        &[
            ("x-forwarded-for", "203.0.113.9"),
            ("x-forwarded-proto", "https"),
        ],
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(
        r.body.contains("x-forwarded-for=203.0.113.9, 127.0.0.1 ")
            && r.body.contains("x-forwarded-proto=https "),
        "{}",
        r.body
    );
    // A `Connection` field naming the forwarding header does not erase the chain the
    // limiter read.
    let r = s.send(
        "GET",
        "/who",
        &[
            ("x-forwarded-for", "203.0.113.9"),
            ("connection", "x-forwarded-for"),
        ],
    );
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(
        r.body.contains("x-forwarded-for=203.0.113.9, 127.0.0.1 "),
        "{}",
        r.body
    );
}

#[test]
fn sigterm_stops_accepting_and_lets_the_request_in_flight_finish() {
    use std::io::{Read as _, Write as _};
    let up = Upstream::start();
    let url = format!("http://127.0.0.1:{}/base", up.port);
    let mut s = Server::start(&["--upstream", &url]);
    let port = s.port;
    // A request the upstream holds for 600 ms, on a connection of its own.
    let in_flight = std::thread::spawn(move || {
        let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.write_all(b"GET /slow HTTP/1.1\r\nhost: t\r\nx-api-key: k\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        answer
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while up.hits() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never reached the upstream"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // The shell's own `kill`: no procps needed.
    let term = std::process::Command::new("sh")
        .args(["-c", &format!("kill -TERM {}", s.child.id())])
        .status()
        .unwrap();
    assert!(term.success());
    // The answer in flight arrives whole, and the connection is closed after it.
    let answer = in_flight.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert!(answer.contains("GET /base/slow"), "{answer}");
    let status = loop {
        if let Some(status) = s.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the server did not stop"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
}

#[test]
fn a_body_past_its_bounds_is_refused_with_413_or_408() {
    use std::io::{Read as _, Write as _};
    let up = Upstream::start();
    let url = format!("http://127.0.0.1:{}", up.port);
    let s = Server::start(&[
        "--upstream",
        &url,
        "--max-body-bytes",
        "1000",
        "--header-read-timeout-ms",
        "400",
    ]);
    let key = [("x-api-key", "uploader")];
    // Declared longer than the bound: refused before the upstream sees it.
    let r = s.send_body("POST", "/x", &key, vec![1u8; 1001]);
    assert_eq!(r.status, 413, "{}", r.body);
    assert!(r.body.contains("larger than 1000 bytes"), "{}", r.body);
    assert_eq!(up.hits(), 0);
    // Within it: forwarded whole.
    let r = s.send_body("POST", "/x", &key, vec![1u8; 1000]);
    assert_eq!(r.status, 201, "{}", r.body);
    assert!(r.body.contains("len=1000"), "{}", r.body);
    // A body that stops arriving: 408 once the header-read timeout has passed without a byte.
    let mut c = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    c.write_all(
        b"POST /x HTTP/1.1\r\nHost: x\r\nx-api-key: uploader\r\nContent-Length: 100\r\n\r\n0123456789",
    )
    .unwrap();
    let started = std::time::Instant::now();
    let mut answer = [0u8; 256];
    let n = c.read(&mut answer).unwrap();
    let head = String::from_utf8_lossy(&answer[..n]);
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    assert!(started.elapsed() >= std::time::Duration::from_millis(350));
    // A chunked body that grows past the bound: 413 as well.
    let mut c = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    let chunk = format!("258\r\n{}\r\n", "a".repeat(600));
    let request = format!(
        "POST /x HTTP/1.1\r\nHost: x\r\nx-api-key: uploader\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}{chunk}0\r\n\r\n"
    );
    c.write_all(request.as_bytes()).unwrap();
    let n = c.read(&mut answer).unwrap();
    let head = String::from_utf8_lossy(&answer[..n]);
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
}
