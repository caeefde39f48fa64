//! The admin plane apart from the data plane: the switches and the metrics are served on the
//! admin listener only; a client of the limited service, even through a real nginx in front
//! (the recommended deployment, where every client's TCP peer is loopback), can neither
//! reach nor change them; the operator on the admin listener can.

use crate::common;

use ratelab_testkit::nginx;

use common::{Server, series};

/// An nginx in front of `s`: `/` proxied to the data plane, and, to show that even a proxy
/// misconfigured to expose the admin listener cannot relay a change, `/ops/` to the admin
/// listener. Both add `X-Forwarded-For`, as a proxy in front of a limiter must.
fn nginx_in_front(test: &str, s: &Server) -> Option<nginx::Nginx> {
    nginx::Nginx::start(
        test,
        "",
        &format!(
            "location /ops/ {{ proxy_pass http://127.0.0.1:{admin}/; \
               proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; }}\n\
             location / {{ proxy_pass http://127.0.0.1:{data}; \
               proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for; }}",
            admin = s.admin_port,
            data = s.port,
        ),
    )
}

#[test]
#[cfg_attr(
    ratelab_missing_nginx,
    ignore = "nginx is not installed (Debian: apt-get install nginx-light)"
)]
fn a_client_behind_nginx_cannot_change_the_switches_and_the_operator_can() {
    let s = Server::start(&[
        "--capacity",
        "3",
        "--refill-per-sec",
        "1",
        "--trusted-proxy",
        "127.0.0.1",
    ]);
    let Some(proxy) = nginx_in_front("admin_behind_nginx", &s) else {
        return;
    };
    let through = |method: &str, path: &str, key: &str, body: &str| {
        let url = format!("http://127.0.0.1:{}{path}", proxy.port);
        s.fetch(
            method,
            &url,
            &[("x-api-key", key)],
            body.as_bytes().to_vec(),
        )
    };
    // The data plane answers the admin paths like any other path: limited, 200 `ok`.
    for path in ["/admin/kill-switch", "/admin/shadow"] {
        let r = through("PUT", path, "mallory", "on");
        assert_eq!((r.status, r.body.as_str()), (200, "ok\n"), "{path}");
        assert!(!r.header("ratelimit").is_empty(), "{path} was limited");
    }
    let r = through("GET", "/metrics", "mallory", "");
    assert_eq!((r.status, r.body.as_str()), (200, "ok\n"));
    // A proxy that relays to the admin listener cannot change a switch either.
    let r = s.fetch(
        "PUT",
        &format!("http://127.0.0.1:{}/ops/admin/kill-switch", proxy.port),
        &[("content-type", "application/json")],
        b"\"on\"".to_vec(),
    );
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.contains("relayed by a proxy"), "{}", r.body);
    assert_eq!(s.admin("GET", "/admin/kill-switch", &[], "").body, "off\n");
    assert_eq!(s.admin("GET", "/admin/shadow", &[], "").body, "off\n");
    // Limiting holds: the fourth request of a key within the second is refused.
    let statuses: Vec<u16> = (0..6)
        .map(|_| through("GET", "/api", "alice", "").status)
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429, 429]);
    let bypassed = [r#"decision="bypassed""#];
    assert_eq!(
        series(&s.metrics(), "ratelab_requests_total", &bypassed),
        Some(0.0)
    );

    // The operator, straight on the admin listener, turns limiting off and on.
    let r = s.switch("/admin/kill-switch", true);
    assert_eq!((r.status, r.body.as_str()), (200, "on\n"));
    assert_eq!(through("GET", "/api", "alice", "").status, 200, "bypassed");
    assert_eq!(
        series(&s.metrics(), "ratelab_requests_total", &bypassed),
        Some(1.0)
    );
    assert_eq!(s.switch("/admin/kill-switch", false).body, "off\n");
    assert_eq!(through("GET", "/api", "alice", "").status, 429);
}

#[test]
fn the_data_plane_limits_the_admin_paths_like_any_other() {
    let s = Server::start(&["--capacity", "2", "--refill-per-sec", "1"]);
    let put = |path: &str| {
        s.send_body("PUT", path, &[("x-api-key", "eve")], b"on".to_vec())
            .status
    };
    assert_eq!(
        [
            put("/admin/kill-switch"),
            put("/admin/shadow"),
            put("/metrics")
        ],
        [200, 200, 429]
    );
    assert_eq!(s.admin("GET", "/admin/kill-switch", &[], "").body, "off\n");
    assert!(s.metrics().contains("ratelab_requests_total"));
}

#[test]
fn with_a_token_file_every_admin_request_needs_the_token() {
    let dir = std::env::temp_dir().join(format!("ratelab-admin-token-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("token");
    std::fs::write(&file, "a-long-enough-admin-token-42\n").unwrap();
    let s = Server::start(&["--admin-token-file", file.to_str().unwrap()]);
    assert!(s.banner.contains("bearer token required"), "{}", s.banner);
    assert!(
        !s.banner.contains("a-long-enough"),
        "the banner shows no token"
    );
    let bearer = [("authorization", "Bearer a-long-enough-admin-token-42")];
    let wrong = [("authorization", "Bearer a-long-enough-admin-token-43")];
    for (method, path, body) in [
        ("GET", "/metrics", ""),
        ("GET", "/admin/shadow", ""),
        ("PUT", "/admin/shadow", "\"on\""),
    ] {
        let r = s.admin(method, path, &[], body);
        assert_eq!(r.status, 401, "{method} {path}");
        assert_eq!(
            r.header("www-authenticate"),
            "Bearer realm=\"ratelab-admin\""
        );
        assert_eq!(s.admin(method, path, &wrong, body).status, 401);
        assert_eq!(s.admin(method, path, &bearer, body).status, 200);
    }
    assert_eq!(s.admin("GET", "/admin/shadow", &bearer, "").body, "on\n");

    // A token too short to be one is refused at startup, with the file named.
    std::fs::write(&file, "short\n").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
        .args(["--admin-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0"])
        .args(["--admin-token-file", file.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("admin token file {}", file.display())) && err.contains("16 to 512"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn the_rate_limit_service_port_serves_nothing_administrative() {
    use std::io::{Read as _, Write as _};
    let s = Server::start(&["--grpc-listen", "127.0.0.1:0"]);
    let grpc = s.grpc_port();
    let mut c = std::net::TcpStream::connect(("127.0.0.1", grpc)).unwrap();
    c.set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .unwrap();
    c.write_all(b"PUT /admin/kill-switch HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\non")
        .unwrap();
    let mut answer = Vec::new();
    let _ = c.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(!answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(s.admin("GET", "/admin/kill-switch", &[], "").body, "off\n");
}
