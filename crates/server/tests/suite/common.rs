//! The `ratelab-server` binary on a free port, driven by a real HTTP client.
#![allow(dead_code)]

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A server on a free port, killed when dropped; its stderr is collected.
pub struct Server {
    pub child: Child,
    pub port: u16,
    /// The admin listener's port (`/metrics`, `/admin/*`).
    pub admin_port: u16,
    /// What it printed on starting.
    pub banner: String,
    stderr: Arc<Mutex<String>>,
    rt: tokio::runtime::Runtime,
    http: reqwest::Client,
}

/// One answer: status, headers, body.
pub struct Reply {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Reply {
    /// A header's value, or "".
    pub fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }
}

impl Server {
    /// Starts the binary on a port of its own choosing and reads it off its first line.
    pub fn start(args: &[&str]) -> Server {
        Server::spawn(Command::new(env!("CARGO_BIN_EXE_ratelab-server")), args)
    }

    /// [`Server::start`] with the open-file limit (`ulimit -n`) at `nofile`.
    #[allow(dead_code)]
    pub fn start_with_nofile(nofile: u32, args: &[&str]) -> Server {
        let mut sh = Command::new("sh");
        sh.args(["-c", &format!("ulimit -n {nofile} && exec \"$0\" \"$@\"")])
            .arg(env!("CARGO_BIN_EXE_ratelab-server"));
        Server::spawn(sh, args)
    }

    fn spawn(mut command: Command, args: &[&str]) -> Server {
        use std::io::{BufRead as _, Read as _};
        let mut child = command
            .args(["--listen", "127.0.0.1:0"])
            .args(["--admin-listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The banner, up to its last line (the request log's).
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        out.read_line(&mut first).unwrap();
        let mut banner = first.clone();
        while !first.is_empty()
            && !banner
                .lines()
                .last()
                .unwrap_or("")
                .starts_with("  request log:")
        {
            let mut line = String::new();
            if out.read_line(&mut line).unwrap_or(0) == 0 {
                break;
            }
            banner.push_str(&line);
        }
        let Some(port) = first.trim().rsplit(':').next().and_then(|p| p.parse().ok()) else {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the server did not start: {first}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        };
        let admin_port = banner
            .lines()
            .find_map(|l| l.strip_prefix("  admin: http://"))
            .and_then(|l| l.split([' ', '(']).next()?.rsplit(':').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no admin listener in the banner:\n{banner}"));
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut pipe = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        Server {
            child,
            port,
            admin_port,
            banner,
            stderr,
            rt,
            http: reqwest::Client::new(),
        }
    }

    /// `method path` with `headers`.
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)]) -> Reply {
        self.send_body(method, path, headers, Vec::new())
    }

    /// `method path` with `headers` and `body`.
    pub fn send_body(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Reply {
        let url = format!("http://127.0.0.1:{}{path}", self.port);
        self.fetch(method, &url, headers, body)
    }

    /// `method url` with `headers` and `body`: any URL (a proxy in front, another listener).
    pub fn fetch(&self, method: &str, url: &str, headers: &[(&str, &str)], body: Vec<u8>) -> Reply {
        self.rt.block_on(async {
            let mut r = self.http.request(method.parse().unwrap(), url).body(body);
            for (n, v) in headers {
                r = r.header(*n, *v);
            }
            let r = r.send().await.unwrap();
            Reply {
                status: r.status().as_u16(),
                headers: r.headers().clone(),
                body: r.text().await.unwrap(),
            }
        })
    }

    /// `GET path` with `x-api-key: ana`: the status and the body.
    pub fn get(&self, path: &str) -> (u16, String) {
        let r = self.send("GET", path, &[("x-api-key", "ana")]);
        (r.status, r.body)
    }

    /// Turns the switch at `path` on the admin listener `on` or off, as an operator does:
    /// `PUT` with a JSON body.
    pub fn switch(&self, path: &str, on: bool) -> Reply {
        let body = if on { "\"on\"" } else { "\"off\"" };
        self.admin("PUT", path, &[], body)
    }

    /// `method path` with `headers` and `body` on the admin listener; a `PUT` is sent as JSON
    /// unless `headers` name another content type.
    pub fn admin(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
        let url = format!("http://127.0.0.1:{}{path}", self.admin_port);
        let mut h = headers.to_vec();
        if method == "PUT"
            && !h
                .iter()
                .any(|(n, _)| n.eq_ignore_ascii_case("content-type"))
        {
            h.push(("content-type", "application/json"));
        }
        self.fetch(method, &url, &h, body.as_bytes().to_vec())
    }

    /// `/metrics`, from the admin listener.
    pub fn metrics(&self) -> String {
        self.admin("GET", "/metrics", &[], "").body
    }

    /// The rate limit service's port, from the banner (the server started with
    /// `--grpc-listen 127.0.0.1:0`).
    #[allow(dead_code)]
    pub fn grpc_port(&self) -> u16 {
        self.banner
            .lines()
            .find_map(|l| l.split("gRPC): 127.0.0.1:").nth(1))
            .and_then(|l| l.split(';').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no gRPC port in the banner:\n{}", self.banner))
    }

    /// What the server wrote on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits (up to 20 s) until the server has written `needle` on stderr.
    pub fn wait_stderr(&self, needle: &str) {
        let start = Instant::now();
        while !self.stderr().contains(needle) {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "stderr never said {needle:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits (up to 20 s) until the metric series reaches `value`.
    pub fn wait_for(&self, name: &str, labels: &[&str], value: f64) {
        let start = Instant::now();
        loop {
            let m = self.metrics();
            if series(&m, name, labels) == Some(value) {
                return;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "{name} {labels:?} never reached {value}:\n{m}\nstderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// The value of the series `name` whose labels include every one of `labels`.
pub fn series(metrics: &str, name: &str, labels: &[&str]) -> Option<f64> {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| labels.iter().all(|want| l.contains(want)))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}
