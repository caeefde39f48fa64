//! Who the client is, decided at the edge, behind the real proxies a deployment puts in
//! front: clients on their own loopback addresses (127.0.0.2, 127.0.0.3) forge `Forwarded`,
//! `X-Forwarded-For` and `X-Real-IP` through a real nginx (configured as docs/GATEWAY.md
//! shows) and a real HAProxy (`option forwardfor`, which appends a line of its own); each is
//! limited under its own address and cannot drain the other's bucket. And a route's limit
//! holds however its path and method are spelled, through the proxy to a real upstream.

use crate::common;

use common::Server;
use ratelab_testkit::haproxy::Haproxy;
use ratelab_testkit::nginx::Nginx;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// One request, written as `head` (without the blank line) from the source address `from`
/// to `port` on 127.0.0.1, on a connection of its own: the status and the body.
fn send_from(from: &str, port: u16, head: &str) -> (u16, String) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(SocketAddr::new(from.parse().unwrap(), 0))
            .unwrap();
        let mut c = socket
            .connect(SocketAddr::from(([127, 0, 0, 1], port)))
            .await
            .unwrap();
        let req = format!("{head}\r\nHost: edge.test\r\nConnection: close\r\n\r\n");
        c.write_all(req.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), c.read_to_end(&mut answer))
            .await
            .expect("an answer within 10 s")
            .unwrap();
        let answer = String::from_utf8_lossy(&answer).into_owned();
        let status = answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status line in {answer:?}"));
        let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
        (status, body)
    })
}

/// A per-address limit of 3 an hour: within a test, exactly 3 admissions per address.
const PER_IP: &str = r#"
[[limit]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 3
refill = 1
refill_period_ms = 3600000
key = "client-ip"
"#;

/// The server with [`PER_IP`], believing 127.0.0.1 (the proxy) and, with `header`, the
/// forwarding header named.
fn limited_server(header: Option<&str>) -> (Server, ratelab_testkit::temp::TempDir) {
    let dir = ratelab_testkit::temp::TempDir::new("edge-per-ip");
    let limits = dir.join("limits.toml");
    std::fs::write(&limits, PER_IP).unwrap();
    let mut args = vec![
        "--limits",
        limits.to_str().unwrap(),
        "--trusted-proxy",
        "127.0.0.1",
    ];
    if let Some(h) = header {
        args.extend(["--client-ip-header", h]);
    }
    (Server::start(&args), dir)
}

/// Client A (127.0.0.2) sends eight requests, each forging another address in every
/// forwarding header (a fresh one, then client B's); then B (127.0.0.3) sends three. A is
/// held to its own bucket; B's bucket is whole. The figures' row for `front`.
fn forgers_are_limited_under_their_own_address(front: &str, port: u16) -> String {
    let mut admitted_a = 0;
    for i in 0..8 {
        let forged = if i % 2 == 0 {
            format!("198.51.100.{i}")
        } else {
            "127.0.0.3".to_owned()
        };
        let head = format!(
            "GET /api HTTP/1.1\r\nForwarded: for={forged}\r\nX-Forwarded-For: {forged}\r\n\
             X-Real-IP: {forged}"
        );
        let (status, body) = send_from("127.0.0.2", port, &head);
        assert!(status == 200 || status == 429, "{front}: {status} {body}");
        admitted_a += usize::from(status == 200);
    }
    assert_eq!(admitted_a, 3, "{front}: the forger's own bucket allows 3");
    let b: Vec<u16> = (0..3)
        .map(|_| send_from("127.0.0.3", port, "GET /api HTTP/1.1").0)
        .collect();
    let admitted_b = b.iter().filter(|&&s| s == 200).count();
    assert_eq!(admitted_b, 3, "{front}: B's bucket was drained by A");
    format!("| {front} | {admitted_a} of 8 | {admitted_b} of 3 |\n")
}

/// The figures' table head.
const FORGERY_HEAD: &str =
    "| in front | forger admitted (capacity 3) | other client admitted |\n|---|---|---|\n";

#[test]
#[cfg_attr(
    ratelab_missing_nginx,
    ignore = "nginx is not installed (Debian: apt-get install nginx-light)"
)]
fn behind_nginx_a_forged_forwarding_header_chooses_no_address() {
    // As docs/GATEWAY.md deploys it: nginx extends X-Forwarded-For and passes the client's
    // own Forwarded and X-Real-IP through untouched.
    let (s, _dir) = limited_server(None);
    let location = format!(
        "location / {{ proxy_pass http://127.0.0.1:{}; \
           proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; }}",
        s.port
    );
    let Some(nginx) = Nginx::start("edge_nginx_xff", "", &location) else {
        return;
    };
    let mut table = FORGERY_HEAD.to_owned();
    table += &forgers_are_limited_under_their_own_address(
        "nginx, `$proxy_add_x_forwarded_for`; `--client-ip-header x-forwarded-for`",
        nginx.port,
    );

    // nginx setting X-Real-IP to the peer it saw (and passing a forged X-Forwarded-For).
    let (s, _dir) = limited_server(Some("x-real-ip"));
    let location = format!(
        "location / {{ proxy_pass http://127.0.0.1:{}; \
           proxy_set_header X-Real-IP $remote_addr; }}",
        s.port
    );
    let Some(nginx) = Nginx::start("edge_nginx_real_ip", "", &location) else {
        return;
    };
    table += &forgers_are_limited_under_their_own_address(
        "nginx, `X-Real-IP $remote_addr`; `--client-ip-header x-real-ip`",
        nginx.port,
    );
    ratelab_testkit::docs::check_block("docs/GATEWAY.md", "edge-forgery-nginx", &table);
}

#[test]
#[cfg_attr(
    ratelab_missing_haproxy,
    ignore = "haproxy is not installed (Debian: apt-get install haproxy)"
)]
fn behind_haproxy_its_own_forwarding_line_names_the_client() {
    // `option forwardfor` appends an X-Forwarded-For line after the client's own.
    let (s, _dir) = limited_server(None);
    let Some(haproxy) = Haproxy::start(
        "edge_haproxy",
        "option forwardfor",
        &format!("127.0.0.1:{}", s.port),
        "",
    ) else {
        return;
    };
    let table = FORGERY_HEAD.to_owned()
        + &forgers_are_limited_under_their_own_address(
            "HAProxy, `option forwardfor`; `--client-ip-header x-forwarded-for`",
            haproxy.port,
        );
    ratelab_testkit::docs::check_block("docs/GATEWAY.md", "edge-forgery-haproxy", &table);
}

/// A limit on `POST /api/`, two requests an hour, in front of a real upstream (nginx)
/// that echoes the method and target it received.
const API_POSTS: &str = r#"
[[limit]]
name = "api-posts"
algorithm = "token-bucket"
capacity = 2
refill = 1
refill_period_ms = 3600000
key = "global"
match = { route_prefix = "/api/", methods = ["POST"] }

[[limit]]
name = "per-key"
algorithm = "token-bucket"
capacity = 100
refill = 1
refill_period_ms = 1000
key = "api-key"
cost_from_header = { name = "x-cost", default = 1, max = 5 }
"#;

#[test]
#[cfg_attr(
    ratelab_missing_nginx,
    ignore = "nginx is not installed (Debian: apt-get install nginx-light)"
)]
fn a_routes_limit_holds_however_its_path_and_method_are_spelled() {
    let Some(upstream) = Nginx::start(
        "edge_upstream",
        "",
        "location / { return 200 \"$request_method $request_uri key=$http_x_api_key\\n\"; }",
    ) else {
        return;
    };
    let dir = ratelab_testkit::temp::TempDir::new("edge-limits");
    let limits = dir.join("limits.toml");
    std::fs::write(&limits, API_POSTS).unwrap();
    let upstream_url = format!("http://127.0.0.1:{}", upstream.port);
    let s = Server::start(&[
        "--limits",
        limits.to_str().unwrap(),
        "--upstream",
        &upstream_url,
    ]);
    let post = |target: &str| send_from("127.0.0.1", s.port, &format!("POST {target} HTTP/1.1"));
    let spellings = [
        "/api/x",
        "//api/x",
        "/%61pi/x",
        "/API/x",
        "/./api/x",
        "/b/../api/x",
        "/api//x",
        "/%2e/api/x",
    ];
    let mut admitted = Vec::new();
    let mut table = "| request | answer | the upstream saw |\n|---|---|---|\n".to_owned();
    for target in spellings {
        let (status, body) = post(target);
        match status {
            200 => admitted.push(body.clone()),
            429 => {}
            other => panic!("{target}: {other} {body}"),
        }
        let saw = if status == 200 {
            body.trim_end()
        } else {
            "nothing"
        };
        table += &format!("| `POST {target}` | {status} | {saw} |\n");
    }
    assert_eq!(admitted.len(), 2, "{admitted:?}");
    // The upstream got the path the limiter matched.
    for body in &admitted {
        assert!(
            body == "POST /api/x key=\n" || body == "POST /API/x key=\n",
            "{body:?}"
        );
    }
    // Spellings an application could read otherwise are refused, and reach no upstream.
    for head in [
        "post /api/x HTTP/1.1",
        "Post /api/x HTTP/1.1",
        "POST /api%2Fx HTTP/1.1",
        "POST /api;v=1/x HTTP/1.1",
        "GET /x HTTP/1.1\r\nx-api-key: a\r\nx-api-key: b",
        "GET /x HTTP/1.1\r\nx-api-key: a\r\nx_api_key: b",
        "GET /x HTTP/1.1\r\nX_Api_Key: b",
        "GET /x HTTP/1.1\r\nx-api-key: a\r\nx-cost: 1\r\nx-cost: 1",
        "GET /x HTTP/1.1\r\nx-api-key: a\r\nConnection: keep-alive, X-Api-Key",
        "GET /x HTTP/1.1\r\nx-api-key: a\r\nx-cost: 5\r\nConnection: x_cost",
    ] {
        let (status, body) = send_from("127.0.0.1", s.port, head);
        assert_eq!(status, 400, "{head:?}: {body}");
        assert!(
            !body.contains("key="),
            "{head:?} reached the upstream: {body}"
        );
        let shown = head.replace("\r\n", " · ").replace(" HTTP/1.1", "");
        table += &format!("| `{shown}` | {status} | nothing |\n");
    }
    ratelab_testkit::docs::check_block("docs/GATEWAY.md", "edge-spellings", &table);
    // One key, sent once: admitted and forwarded with the key the limiter counted.
    let (status, body) = send_from("127.0.0.1", s.port, "GET /x HTTP/1.1\r\nx-api-key: a");
    assert_eq!((status, body.as_str()), (200, "GET /x key=a\n"));
}
