//! A private HAProxy on a free loopback port for tests, in front of one backend, from the
//! `frontend` and `backend` lines a test gives; stopped (and its directory removed) when
//! dropped. Without HAProxy installed it says so and the test skips, unless
//! `RATELAB_REQUIRE_HAPROXY=1` makes that a failure (as CI does).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running HAProxy.
#[derive(Debug)]
pub struct Haproxy {
    child: Child,
    dir: PathBuf,
    /// Its port.
    pub port: u16,
}

impl Haproxy {
    /// Starts HAProxy in HTTP mode, its frontend on the free port with `frontend` lines, its
    /// one backend server at `backend` (`127.0.0.1:PORT`) with `backend_lines`. `None`, after
    /// saying why, when HAProxy is not installed and not required.
    pub fn start(test: &str, frontend: &str, backend: &str, backend_lines: &str) -> Option<Self> {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let bin = ratelab_procs::installed::haproxy_binary(&path);
        let how = "Debian: apt-get install haproxy";
        if !crate::require(
            test,
            "haproxy",
            bin.is_some(),
            "RATELAB_REQUIRE_HAPROXY",
            how,
        ) {
            return None;
        }
        let bin = bin?;
        let port = crate::free_port();
        let dir =
            std::env::temp_dir().join(format!("ratelab-haproxy-{}-{port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = format!(
            "global\n  maxconn 1024\n\
             defaults\n  mode http\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n\
             frontend edge\n  bind 127.0.0.1:{port}\n  {frontend}\n  default_backend app\n\
             backend app\n  {backend_lines}\n  server app {backend}\n"
        );
        let file = dir.join("haproxy.cfg");
        std::fs::write(&file, conf).unwrap();
        let child = Command::new(bin)
            .args(["-db", "-f"])
            .arg(&file)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let haproxy = Haproxy { child, dir, port };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "haproxy did not open port {port}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(haproxy)
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
