//! A private nginx on a free loopback port for tests, from a configuration the test gives,
//! stopped (and its directory removed) when dropped. Without nginx installed it says so and
//! the test skips, unless `RATELAB_REQUIRE_NGINX=1` makes that a failure (as CI does); the
//! test is marked ignored before that, by its package's build script.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A running nginx.
#[derive(Debug)]
pub struct Nginx {
    child: Child,
    dir: PathBuf,
    /// Its port.
    pub port: u16,
    /// `http://127.0.0.1:PORT/`.
    pub url: String,
}

/// The nginx binary, on the PATH or in /usr/sbin (where Debian puts it).
pub fn binary() -> Option<PathBuf> {
    ratelab_procs::installed::nginx_binary(&std::env::var_os("PATH").unwrap_or_default())
}

impl Nginx {
    /// Starts nginx with `http` inside its `http {}` block and `server` inside a `server {}`
    /// block that listens on the free port; `{root}` in either is the private directory's
    /// `www/` (which holds `index.html`, `ok`). `None`, after saying why, when nginx is not
    /// installed and not required.
    pub fn start(test: &str, http: &str, server: &str) -> Option<Nginx> {
        let bin = binary();
        let how = "Debian: apt-get install nginx-light";
        if !crate::require(test, "nginx", bin.is_some(), "RATELAB_REQUIRE_NGINX", how) {
            return None;
        }
        let bin = bin?;
        let port = crate::free_port();
        let dir = std::env::temp_dir().join(format!("ratelab-nginx-{}-{port}", std::process::id()));
        std::fs::create_dir_all(dir.join("www")).unwrap();
        std::fs::write(dir.join("www/index.html"), "ok\n").unwrap();
        let d = dir.display();
        let root = format!("{d}/www");
        let conf = format!(
            "worker_processes 1;\n\
             pid {d}/nginx.pid;\n\
             error_log {d}/error.log warn;\n\
             events {{ worker_connections 1024; }}\n\
             http {{\n\
               access_log off;\n\
               client_body_temp_path {d}/body; proxy_temp_path {d}/proxy;\n\
               fastcgi_temp_path {d}/fastcgi; uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n\
               {}\n\
               server {{\n\
                 listen 127.0.0.1:{port};\n\
                 {}\n\
               }}\n\
             }}\n",
            http.replace("{root}", &root),
            server.replace("{root}", &root),
        );
        std::fs::write(dir.join("nginx.conf"), conf).unwrap();
        let child = Command::new(bin)
            .args(["-p", &d.to_string(), "-e", &format!("{d}/error.log")])
            .args(["-c", &format!("{d}/nginx.conf"), "-g", "daemon off;"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // The guard exists before the wait: a startup that fails still stops the process.
        let nginx = Nginx {
            child,
            dir,
            port,
            url: format!("http://127.0.0.1:{port}/"),
        };
        let start = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "nginx did not open port {port}: {}",
                std::fs::read_to_string(nginx.dir.join("error.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(nginx)
    }
}

impl Nginx {
    /// The master's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Nginx {
    /// Stops nginx with SIGTERM, its fast shutdown, in which the master stops its workers: a
    /// SIGKILL would end the master alone and leave the workers serving the port. SIGKILL only
    /// if it has not exited within 5 s.
    fn drop(&mut self) {
        let termed = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        let start = Instant::now();
        while termed && start.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        self.child.kill().ok();
        self.child.wait().ok();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
