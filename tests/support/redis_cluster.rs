//! A private Redis Cluster for one test: three primaries and three replicas from
//! `redis-server` on free loopback ports, no persistence, a short `cluster-node-timeout` (500 ms),
//! created with `redis-cli --cluster create … --cluster-replicas 1 --cluster-yes`, and torn
//! down when dropped.
//!
//! Without `redis-server` and `redis-cli` the tests that need it say so loudly and skip,
//! unless `RATELAB_REQUIRE_REDIS=1`, in which case they fail. `.ci/run` installs them and sets
//! that. The `ratelab failover` command uses the same code ([`RedisCluster::create`]).

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One node, killed when dropped.
pub struct Node {
    child: Option<Child>,
    pub port: u16,
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            c.kill().ok();
            c.wait().ok();
        }
    }
}

pub struct RedisCluster {
    pub nodes: Vec<Node>,
    dir: PathBuf,
}

/// A port nothing listens on now, never handed out before in this process, with its cluster
/// bus port (port + 10 000) free of every port handed out too: the tests of one binary start
/// clusters at once. 0, which no node can use, if none was found.
fn free_port() -> u16 {
    use std::sync::Mutex;
    static GIVEN: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    for _ in 0..100 {
        let Ok(port) = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
        else {
            continue;
        };
        let bus = u32::from(port) + 10_000;
        let clash = given
            .iter()
            .any(|&g| g == port || u32::from(g) + 10_000 == u32::from(port) || u32::from(g) == bus);
        if bus <= 65_535 && !clash && std::net::TcpListener::bind(("127.0.0.1", bus as u16)).is_ok()
        {
            given.push(port);
            return port;
        }
    }
    0
}

/// Whether `redis-server` and `redis-cli` are installed.
pub fn installed() -> bool {
    ["redis-server", "redis-cli"].iter().all(|c| {
        Command::new(c)
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// `redis-cli -p PORT args…`, its output ("" if it could not run).
pub fn cli(port: u16, args: &[&str]) -> String {
    Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
        .unwrap_or_default()
}

impl RedisCluster {
    /// Starts and creates a cluster for test `test`, or returns `None` (after saying why) when
    /// Redis is not installed and not required.
    pub fn start(test: &str) -> Option<RedisCluster> {
        if !installed() {
            if std::env::var("RATELAB_REQUIRE_REDIS").as_deref() == Ok("1") {
                panic!(
                    "{test}: redis-server or redis-cli is not installed and RATELAB_REQUIRE_REDIS=1"
                );
            }
            eprintln!(
                "\n*** SKIPPED {test}: redis-server and redis-cli are not installed. Install them \
                 (Debian: apt-get install redis-server) to run the Redis Cluster tests; set \
                 RATELAB_REQUIRE_REDIS=1 to make their absence a failure. ***\n"
            );
            return None;
        }
        Some(RedisCluster::create().unwrap_or_else(|e| panic!("{test}: {e}")))
    }

    /// Starts six nodes and makes them a cluster of three primaries with a replica each.
    pub fn create() -> Result<RedisCluster, String> {
        if !installed() {
            return Err(
                "redis-server and redis-cli are not installed (Debian: apt-get install redis-server)"
                    .into(),
            );
        }
        let dir = std::env::temp_dir().join(format!(
            "ratelab-cluster-{}-{}",
            std::process::id(),
            free_port()
        ));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut c = RedisCluster {
            nodes: Vec::new(),
            dir,
        };
        for _ in 0..6 {
            let mut node = Node {
                child: None,
                port: free_port(),
            };
            c.spawn(&mut node)?;
            c.nodes.push(node);
        }
        let addrs: Vec<String> = c
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .output()
            .map_err(|e| format!("redis-cli: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create failed: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        c.wait_ok()?;
        Ok(c)
    }

    fn spawn(&self, node: &mut Node) -> Result<(), String> {
        let port = node.port.to_string();
        let child = Command::new("redis-server")
            .args([
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "500"])
            // A replica that never finished its first sync cannot be promoted: start the sync
            // at once rather than after the default 5 s wait for more replicas.
            .args(["--repl-diskless-sync-delay", "0"])
            .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
            .args([
                "--dir",
                &self.dir.to_string_lossy(),
                "--loglevel",
                "warning",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("redis-server: {e}"))?;
        node.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while cli(node.port, &["PING"]).trim() != "PONG" {
            if Instant::now() > deadline {
                return Err(format!("node {port} did not answer PING"));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Waits (up to 30 s) until every live node reports the cluster ok with every slot
    /// served, and every replica is in sync with its primary (so it can be promoted).
    pub fn wait_ok(&self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
                let info = cli(n.port, &["CLUSTER", "INFO"]);
                let repl = cli(n.port, &["INFO", "replication"]);
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && (repl.contains("role:master") || repl.contains("master_link_status:up"))
            });
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err("the cluster never became ok".into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Seed URLs: every node.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect()
    }

    /// The port of the live primary that serves `key`'s slot, if one does.
    pub fn primary_of(&self, key: &str) -> Option<u16> {
        let live = self.nodes.iter().filter(|n| n.child.is_some());
        let slot: u16 = live.clone().find_map(|n| {
            cli(n.port, &["CLUSTER", "KEYSLOT", key])
                .trim()
                .parse()
                .ok()
        })?;
        live.map(|n| n.port).find(|&port| {
            let nodes = cli(port, &["CLUSTER", "NODES"]);
            let mine = nodes.lines().find(|l| l.contains("myself")).unwrap_or("");
            mine.contains("master") && mine.split(' ').skip(8).any(|r| in_range(r, slot))
        })
    }

    /// Runs `args` on every live primary.
    pub fn on_primaries(&self, args: &[&str]) {
        for n in self.nodes.iter().filter(|n| n.child.is_some()) {
            if cli(n.port, &["ROLE"]).starts_with("master") {
                cli(n.port, args);
            }
        }
    }

    /// Starts the node on `port` again, killed before: it reads its cluster config and
    /// rejoins (as a replica, if its slots were failed over).
    pub fn restart(&mut self, port: u16) -> Result<(), String> {
        if !self
            .nodes
            .iter()
            .any(|n| n.port == port && n.child.is_none())
        {
            return Err(format!("no killed node on port {port}"));
        }
        let mut node = Node { child: None, port };
        self.spawn(&mut node)?;
        if let Some(n) = self.nodes.iter_mut().find(|n| n.port == port) {
            n.child = node.child.take();
        }
        Ok(())
    }

    /// Kills the node on `port` (SIGKILL).
    pub fn kill(&mut self, port: u16) {
        if let Some(mut c) = self
            .nodes
            .iter_mut()
            .find(|n| n.port == port)
            .and_then(|n| n.child.take())
        {
            c.kill().ok();
            c.wait().ok();
        }
    }
}

/// Whether a `CLUSTER NODES` slot field (`0-5460`, `42`) holds `slot`.
fn in_range(field: &str, slot: u16) -> bool {
    match field.split_once('-') {
        Some((a, b)) => match (a.parse::<u16>(), b.parse::<u16>()) {
            (Ok(a), Ok(b)) => (a..=b).contains(&slot),
            _ => false,
        },
        None => field.parse::<u16>() == Ok(slot),
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                c.kill().ok();
                c.wait().ok();
            }
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
