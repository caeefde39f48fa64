//! What one connection, one file or one request can cost the server, bounded: request heads
//! (431 past the bound, memory per unfinished head within it, a normal client served all the
//! while), a limits path swapped for a FIFO (the reloader refuses it unread, the server goes
//! on), a malformed chunked body (400, not the upstream's fault), and a key as long as the
//! documented maximum.

use crate::common;

use common::Server;
use ratelab_gateway::conns::ConnLimits;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The server's resident memory, KiB (`VmRSS` in `/proc/PID/status`).
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap()
}

/// `head` (with its blank line) on a new connection to `port`: the whole answer.
fn exchange(port: u16, head: &str) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    c.write_all(head.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// Connections that each hold an unfinished head this long.
const HEAD_BYTES: usize = 30 << 10;

/// The suite's scale: bounded in `cargo test`, larger under `RATELAB_ADVERSARIAL=full`
/// (`scripts/adversarial.sh`).
fn scaled(bounded: usize, full: usize) -> usize {
    match std::env::var("RATELAB_ADVERSARIAL").as_deref() {
        Ok("full") => full,
        _ => bounded,
    }
}

/// What one connection holding an unfinished head (or a stalled upload) may cost, KiB: its
/// read buffer, at most twice the head bound (hyper checks its bound between reads, and a
/// read may take as much again), and 4 KiB of the connection's own state.
const CONN_KIB: u64 = 2 * (ConnLimits::MAX_HEADER_BYTES as u64 >> 10) + 4;
/// What the rest of the server may grow by meanwhile, KiB.
const SLACK_KIB: u64 = 8 << 10;

#[test]
fn the_stated_bounds_are_todays() {
    use ratelab_server::config::{connection_budget, upstream_sockets};
    use ratelab_server::serve::{
        GRPC_CONNECTION_BYTES, GRPC_HEADER_LIST_BYTES, GRPC_STREAMS_PER_CONNECTION,
    };
    let data = connection_budget(Some(1024), 1, true, None).unwrap();
    let plain = connection_budget(Some(1024), 1, false, None).unwrap();
    let table = format!(
        "| bound | value |\n|---|---|\n\
         | request head | {head} bytes; a longer one is answered 431 |\n\
         | memory held by a connection with an unfinished head or a stalled upload | at most {CONN_KIB} KiB |\n\
         | connections under `ulimit -n 1024`, answering | {plain} |\n\
         | connections under `ulimit -n 1024`, proxying | {data}, over at most {sockets} upstream sockets |\n\
         | gRPC streams one connection carries at once | {GRPC_STREAMS_PER_CONNECTION} |\n\
         | gRPC header list | {list} KiB |\n\
         | memory one gRPC connection's requests may hold | {conn:.2} MiB |\n",
        head = ConnLimits::MAX_HEADER_BYTES,
        sockets = upstream_sockets(data),
        list = GRPC_HEADER_LIST_BYTES >> 10,
        conn = GRPC_CONNECTION_BYTES as f64 / (1 << 20) as f64,
    );
    ratelab_testkit::docs::check_block("docs/GATEWAY.md", "edge-bounds", &table);
}

#[test]
fn unfinished_heads_cost_at_most_their_bound_and_a_longer_head_is_431() {
    let slow_heads = scaled(300, 2000);
    let dir = ratelab_testkit::temp::TempDir::new("bounds-heads");
    let log = dir.join("requests.jsonl");
    let s = Server::start(&[
        "--header-read-timeout-ms",
        "30000",
        "--request-log",
        log.to_str().unwrap(),
    ]);
    let pid = s.child.id();
    let get = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert!(exchange(s.port, get).starts_with("HTTP/1.1 200"));
    let before = rss_kib(pid);
    let filler = format!("X-Filler: {}\r\n", "f".repeat(1000));
    let mut held = Vec::new();
    for _ in 0..slow_heads {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        c.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
        for _ in 0..HEAD_BYTES / filler.len() {
            c.write_all(filler.as_bytes()).unwrap();
        }
        held.push(c);
    }
    // A normal client is served while they wait.
    let start = Instant::now();
    assert!(exchange(s.port, get).starts_with("HTTP/1.1 200"));
    assert!(start.elapsed() < Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    let during = rss_kib(pid);
    let bound = before + (slow_heads as u64) * CONN_KIB + SLACK_KIB;
    assert!(
        during <= bound,
        "{slow_heads} unfinished heads of {HEAD_BYTES} bytes: RSS {before} KiB -> {during} KiB, \
         over the bound {bound} KiB"
    );
    drop(held);
    // A head longer than the bound is refused with 431.
    let long = format!(
        "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{}\r\n",
        filler.repeat((40 << 10) / filler.len())
    );
    let answer = exchange(s.port, &long);
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer:.80}");
    // Refused like any request: with its id, in the request log.
    assert!(answer.contains("x-request-id: "), "{answer:.300}");
    let start = Instant::now();
    while !std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("\"status\":431")
    {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "no 431 in the request log"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    eprintln!(
        "adversarial: {slow_heads} unfinished heads of {HEAD_BYTES} bytes, a normal client \
         served: RSS {before} -> {during} KiB (bound {bound})"
    );
}

#[test]
fn a_limits_path_swapped_for_a_fifo_is_refused_unread_and_the_server_goes_on() {
    let dir = ratelab_testkit::temp::TempDir::new("bounds-fifo");
    let limits = dir.join("limits.toml");
    let text = "[[limit]]\nname = \"ip\"\nalgorithm = \"token-bucket\"\ncapacity = 100\n\
                refill = 100\nrefill_period_ms = 1000\n";
    std::fs::write(&limits, text).unwrap();
    let s = Server::start(&[
        "--limits",
        limits.to_str().unwrap(),
        "--reload-interval-ms",
        "50",
    ]);
    std::fs::remove_file(&limits).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&limits)
        .status()
        .unwrap();
    assert!(made.success());
    s.wait_stderr("not a regular file");
    for _ in 0..3 {
        assert_eq!(s.get("/").0, 200);
    }
    // A regular file again: applied.
    std::fs::remove_file(&limits).unwrap();
    std::fs::write(&limits, text.replace("capacity = 100", "capacity = 1")).unwrap();
    s.wait_stderr("limits reloaded");
}

#[test]
fn a_limits_file_written_in_place_with_a_pause_is_applied_when_its_writer_closes_it() {
    let dir = ratelab_testkit::temp::TempDir::new("bounds-half-written");
    let limits = dir.join("limits.toml");
    let limit = |name: &str| {
        format!(
            "[[limit]]\nname = \"{name}\"\nalgorithm = \"token-bucket\"\ncapacity = 100\n\
             refill = 100\nrefill_period_ms = 1000\n"
        )
    };
    std::fs::write(&limits, limit("first")).unwrap();
    let s = Server::start(&[
        "--limits",
        limits.to_str().unwrap(),
        "--reload-interval-ms",
        "50",
    ]);
    // A writer truncates the file, writes one limit of two (a valid file on its own), and
    // pauses far longer than the polls and any settling time, then writes the rest.
    let mut w = std::fs::File::create(&limits).unwrap();
    w.write_all(limit("a").as_bytes()).unwrap();
    w.flush().unwrap();
    std::thread::sleep(Duration::from_millis(2000));
    assert!(
        !s.stderr().contains("limits reloaded"),
        "the half-written file was applied:\n{}",
        s.stderr()
    );
    w.write_all(format!("\n{}", limit("b")).as_bytes()).unwrap();
    drop(w);
    s.wait_stderr("2 limits");
    assert!(!s.stderr().contains(": 1 limits"), "{}", s.stderr());
}

#[test]
#[cfg_attr(
    ratelab_missing_nginx,
    ignore = "nginx is not installed (Debian: apt-get install nginx-light)"
)]
fn a_malformed_chunked_body_is_400_and_a_whole_key_fits() {
    let Some(upstream) =
        ratelab_testkit::nginx::Nginx::start("bounds_upstream", "", "location / { return 200; }")
    else {
        return;
    };
    let url = format!("http://127.0.0.1:{}", upstream.port);
    let s = Server::start(&["--upstream", &url]);
    let answer = exchange(
        s.port,
        "POST /x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
         zz\r\nhello\r\n0\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // The documented maximum key, 256 bytes, is a key; one byte more is not.
    let key = |n: usize| {
        let r = s.send("GET", "/k", &[("x-api-key", &"k".repeat(n))]);
        (r.status, r.body)
    };
    assert_eq!(key(256).0, 200);
    let (status, body) = key(257);
    assert_eq!(status, 400);
    assert!(body.contains("at most 256"), "{body}");
}

/// The open descriptors of process `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

#[test]
#[cfg_attr(
    ratelab_missing_nginx,
    ignore = "nginx is not installed (Debian: apt-get install nginx-light)"
)]
fn slow_uploads_under_ulimit_fit_the_descriptor_budget_and_a_normal_client_is_served() {
    // A real upstream that reads a whole body before answering: nginx buffers it, then
    // proxies to itself.
    let Some(upstream) = ratelab_testkit::nginx::Nginx::start(
        "bounds_uploads",
        "",
        "location = /ok { return 200 \"up\\n\"; }\n\
         location / { proxy_pass http://127.0.0.1:$server_port/ok; }",
    ) else {
        return;
    };
    let url = format!("http://127.0.0.1:{}", upstream.port);
    // Slow uploads that the per-IP limit admits (inside one address's burst of 1 000).
    let (uploads, nofile) = (scaled(620, 990), scaled(1024, 2048));
    let s = Server::start_with_nofile(nofile as u32, &["--upstream", &url]);
    let pid = s.child.id();
    // The budget the banner states: D data connections, D + 32 upstream sockets.
    let number_after = |text: &str, marker: &str| -> usize {
        let at = text
            .find(marker)
            .unwrap_or_else(|| panic!("{marker:?} in {text}"))
            + marker.len();
        text[at..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("a number after {marker:?} in {text}"))
    };
    let data = number_after(&s.banner, "bytes, at most ");
    let sockets = number_after(&s.banner, "over at most ");
    assert!(data + sockets < nofile, "{}", s.banner);
    let get = "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert!(exchange(s.port, get).contains("up\n"));
    let (rss_before, fds_before) = (rss_kib(pid), open_fds(pid));
    let mut held = Vec::new();
    for _ in 0..uploads {
        let mut c = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
        let _ = c.write_all(
            b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nfirst ten.",
        );
        held.push(c);
    }
    std::thread::sleep(Duration::from_millis(500));
    let (rss_during, fds_during) = (rss_kib(pid), open_fds(pid));
    // A normal client is served, on fresh connections, while the uploads stall.
    for _ in 0..3 {
        let answer = exchange(s.port, get);
        assert!(answer.contains("up\n"), "{answer:.200}");
    }
    let (rss_after, fds_after) = (rss_kib(pid), open_fds(pid));
    let fd_bound = data + sockets + fds_before;
    assert!(
        fds_during.max(fds_after) <= fd_bound,
        "descriptors {fds_before} -> {fds_during} -> {fds_after}, over {fd_bound}"
    );
    let rss_bound = rss_before + (data as u64) * CONN_KIB + SLACK_KIB;
    assert!(
        rss_during.max(rss_after) <= rss_bound,
        "RSS {rss_before} -> {rss_during} -> {rss_after} KiB, over {rss_bound}"
    );
    assert!(
        !s.stderr().contains("accept error"),
        "the server ran out of descriptors:\n{}",
        s.stderr()
    );
    eprintln!(
        "adversarial: {uploads} slow uploads under ulimit -n {nofile}, a normal client served: \
         {data} data connections, {sockets} upstream sockets; descriptors {fds_before} -> \
         {fds_during} -> {fds_after} (bound {fd_bound}); RSS {rss_before} -> {rss_during} -> \
         {rss_after} KiB (bound {rss_bound})"
    );
    drop(held);
}

/// Streams each gRPC connection tries to open.
const GRPC_STREAMS_TRIED: usize = 1024;

#[test]
fn grpc_streams_with_large_headers_hold_at_most_the_connections_bound() {
    // gRPC connections, each opening as many streams as it can (the server takes
    // GRPC_STREAMS_PER_CONNECTION at once; the client queues the rest), each stream with a
    // header list just under the 16 KiB bound and no body, held open.
    let connections = scaled(8, 64);
    use ratelab_server::serve::GRPC_CONNECTION_BYTES;
    let s = Server::start(&["--grpc-listen", "127.0.0.1:0"]);
    let grpc = s.grpc_port();
    let pid = s.child.id();
    let before = rss_kib(pid);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // 15 KiB: within the 16 KiB header list bound with the call's other fields, each
    // counted as name + value + 32 bytes (RFC 9113 §6.5.2), so the server holds the streams.
    let big = "v".repeat(15 << 10);
    let (opened, held) = rt.block_on(async {
        let mut opened = Vec::new();
        let mut held = Vec::new();
        for _ in 0..connections {
            let tcp = tokio::net::TcpStream::connect(("127.0.0.1", grpc)).await.unwrap();
            let (client, conn) = h2::client::handshake(tcp).await.unwrap();
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let mut n = 0;
            for _ in 0..GRPC_STREAMS_TRIED {
                // The server's stream bound: the next stream waits for room.
                let ready = tokio::time::timeout(Duration::from_millis(200), client.clone().ready());
                let Ok(Ok(mut ready)) = ready.await else {
                    break;
                };
                let req = http::Request::post(format!(
                    "http://127.0.0.1:{grpc}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
                ))
                .header("content-type", "application/grpc")
                .header("x-padding", big.as_str())
                .body(())
                .unwrap();
                match ready.send_request(req, false) {
                    Ok(stream) => held.push(stream),
                    Err(_) => break,
                }
                n += 1;
            }
            opened.push(n);
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        (opened, held)
    });
    let during = rss_kib(pid);
    // A normal client is served meanwhile (the HTTP data plane).
    assert_eq!(s.get("/").0, 200);
    let bound = before + (connections as u64) * (GRPC_CONNECTION_BYTES >> 10) + SLACK_KIB;
    eprintln!(
        "adversarial: {connections} gRPC connections sending {} streams each with 15 KiB of \
         headers and no body, a normal client served: RSS {before} -> {during} KiB (bound \
         {bound})",
        opened.iter().max().unwrap_or(&0)
    );
    assert!(
        during <= bound,
        "RSS {before} -> {during} KiB, over {bound}"
    );
    drop(held);
}
