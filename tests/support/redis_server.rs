//! A private `redis-server` for one test: a free loopback port, no persistence, a temp dir,
//! stopped when dropped.
//!
//! Without `redis-server` on the PATH the tests that need it say so loudly and skip, unless
//! `RATELAB_REQUIRE_REDIS=1`, in which case they fail. `.ci/run` installs it and sets that.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct RedisServer {
    child: Option<Child>,
    pub port: u16,
    dir: PathBuf,
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn installed() -> bool {
    Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl RedisServer {
    /// Starts a server, or returns `None` (after saying why) when Redis is not installed and
    /// not required.
    pub fn start(test: &str) -> Option<RedisServer> {
        if !installed() {
            if std::env::var("RATELAB_REQUIRE_REDIS").as_deref() == Ok("1") {
                panic!("{test}: redis-server is not installed and RATELAB_REQUIRE_REDIS=1");
            }
            eprintln!(
                "\n*** SKIPPED {test}: redis-server is not installed. Install it (Debian: apt-get install redis-server) \
                 to run the Redis tests; set RATELAB_REQUIRE_REDIS=1 to make its absence a failure. ***\n"
            );
            return None;
        }
        let dir = std::env::temp_dir().join(format!(
            "ratelab-redis-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = RedisServer {
            child: None,
            port: free_port(),
            dir,
        };
        s.spawn();
        Some(s)
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args([
                "--port",
                &self.port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args([
                "--dir",
                self.dir.to_str().unwrap(),
                "--daemonize",
                "no",
                "--loglevel",
                "warning",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !self.ping() {
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer PING on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn ping(&self) -> bool {
        let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else {
            return false;
        };
        s.set_read_timeout(Some(Duration::from_millis(200))).ok();
        let mut buf = [0u8; 7];
        s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().expect("server running").id()
    }

    /// Sends a signal (`STOP`, `CONT`) to the server.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .unwrap();
        assert!(ok.success(), "kill -{sig}");
    }

    /// Kills the server (SIGKILL): all its state is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }

    /// Starts a fresh, empty server on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(c) = &self.child {
            // A stopped server ignores SIGKILL until continued on some systems: continue first.
            Command::new("kill")
                .args(["-CONT", &c.id().to_string()])
                .status()
                .ok();
        }
        self.kill();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
