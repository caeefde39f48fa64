//! Private Redis processes on free loopback ports, each stopped when its guard drops: one
//! `redis-server` ([`RedisServer`]) or a Redis Cluster of three primaries and three replicas
//! ([`RedisCluster`]). No persistence, a temp dir each, removed on drop.
//!
//! The experiments that need a store of their own start it here (`ratelab sweep --redis auto`,
//! `auto-cluster`, `ratelab failover`, in `ratelab-lab`), and so do the tests, through
//! `ratelab-testkit`, which adds the skip-or-fail policy for a machine without Redis.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::free_port;

/// How long a started node has to answer `PING`.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a created cluster has to report every slot served and every replica in sync.
const CLUSTER_OK_TIMEOUT: Duration = Duration::from_secs(30);

fn runs(command: &str) -> bool {
    Command::new(command)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `redis-server` is installed.
pub fn server_installed() -> bool {
    runs("redis-server")
}

/// Whether `redis-server` and `redis-cli` (which creates a cluster) are installed.
pub fn cluster_installed() -> bool {
    runs("redis-server") && runs("redis-cli")
}

/// The integer `field` of `line` in a Redis `INFO` reply (`cmdstat_get:calls=3,usec=…` is line
/// `cmdstat_get`, field `calls`; `errorstat_NOSCRIPT:count=2`, field `count`): 0 when absent.
pub fn info_field(info: &str, line: &str, field: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(line)?.strip_prefix(':'))
        .and_then(|rest| {
            rest.split(',')
                .find_map(|kv| kv.strip_prefix(field)?.strip_prefix('='))
        })
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
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

/// A fresh directory under the system temp dir for `what`.
fn private_dir(what: &str) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!(
        "ratelab-{what}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// Whether a server answers `PING` on `port` (within 200 ms).
fn pings(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_millis(200))).ok();
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok() && s.read_exact(&mut buf).is_ok() && &buf == b"+PONG\r\n"
}

/// Starts `redis-server` on `port` in `dir` with `extra` arguments and waits for its `PING`.
fn spawn(port: u16, dir: &std::path::Path, extra: &[&str]) -> Result<Child, String> {
    let mut child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .args(["--dir", &dir.to_string_lossy(), "--loglevel", "warning"])
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start redis-server ({e}); install it (Debian: apt-get install \
                 redis-server) or pass --redis URL"
            )
        })?;
    let deadline = Instant::now() + START_TIMEOUT;
    while !pings(port) {
        if Instant::now() > deadline {
            stop(&mut child);
            return Err(format!("redis-server did not answer PING on port {port}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}

/// Ends `child` and waits for it: continued first, since a stopped (SIGSTOP) server may
/// ignore SIGKILL until continued on some systems.
fn stop(child: &mut Child) {
    signal(child.id(), "CONT").ok();
    child.kill().ok();
    child.wait().ok();
}

/// Sends signal `sig` (`STOP`, `CONT`, `TERM`) to process `pid`.
pub fn signal(pid: u32, sig: &str) -> Result<(), String> {
    let status = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .map_err(|e| format!("kill: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("kill -{sig} {pid} failed"))
    }
}

/// One private `redis-server`, stopped (SIGKILL) and its directory removed on drop.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    /// Its port.
    pub port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts one and waits until it answers `PING`, or explains why not.
    pub fn start() -> Result<RedisServer, String> {
        let dir = private_dir("redis")?;
        let mut server = RedisServer {
            child: None,
            port: free_port(),
            dir,
        };
        server.child = Some(spawn(server.port, &server.dir, &[])?);
        Ok(server)
    }

    /// `redis://127.0.0.1:PORT/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends a signal (`STOP`, `CONT`) to the server. Panics if it is not running or the
    /// signal cannot be sent: a test that freezes a server must know it did.
    pub fn signal(&self, sig: &str) {
        let pid = self.pid().expect("server running");
        signal(pid, sig).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Kills the server (SIGKILL): all its state is gone.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop(&mut c);
        }
    }

    /// Starts a fresh, empty server on the same port. Panics if it does not start.
    pub fn restart(&mut self) {
        self.try_restart().unwrap_or_else(|e| panic!("{e}"));
    }

    /// [`RedisServer::restart`], saying why when it does not start.
    pub fn try_restart(&mut self) -> Result<(), String> {
        self.kill();
        self.child = Some(spawn(self.port, &self.dir, &[])?);
        Ok(())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// One node of a [`RedisCluster`], killed when dropped.
#[derive(Debug)]
pub struct Node {
    child: Option<Child>,
    /// Its port.
    pub port: u16,
}

impl Node {
    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            stop(&mut c);
        }
    }
}

/// A private Redis Cluster: three primaries and three replicas on free loopback ports, a
/// short `cluster-node-timeout` (500 ms), joined as `redis-cli --cluster create …
/// --cluster-replicas 1` joins them, torn down when dropped.
#[derive(Debug)]
pub struct RedisCluster {
    /// The nodes, killed or running.
    pub nodes: Vec<Node>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts six nodes and makes them a cluster of three primaries with a replica each.
    pub fn create() -> Result<RedisCluster, String> {
        if !cluster_installed() {
            return Err(
                "redis-server and redis-cli are not installed (Debian: apt-get install redis-server)"
                    .into(),
            );
        }
        let mut c = RedisCluster {
            nodes: Vec::new(),
            dir: private_dir("cluster")?,
        };
        for _ in 0..6 {
            let port = free_port();
            let child = c.spawn(port)?;
            c.nodes.push(Node {
                child: Some(child),
                port,
            });
        }
        c.join()?;
        c.wait_ok()?;
        Ok(c)
    }

    /// Makes the six nodes one cluster, as `redis-cli --cluster create … --cluster-replicas 1`
    /// does, without its one-second polls: the slots split evenly over the first three, a
    /// distinct config epoch each, every node met, then each of the last three a replica of
    /// one of the first three.
    fn join(&self) -> Result<(), String> {
        let ports: Vec<u16> = self.nodes.iter().map(|n| n.port).collect();
        let expect_ok = |port: u16, args: &[&str]| {
            let reply = cli(port, args);
            if reply.trim() == "OK" {
                Ok(())
            } else {
                Err(format!("redis-cli -p {port} {}: {reply:?}", args.join(" ")))
            }
        };
        for (i, &port) in ports.iter().enumerate() {
            expect_ok(port, &["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()])?;
        }
        for (i, &port) in ports.iter().take(3).enumerate() {
            // ADDSLOTS with every slot named, as redis-cli does (ADDSLOTSRANGE is Redis 7's).
            let slots: Vec<String> = (16_384 * i / 3..16_384 * (i + 1) / 3)
                .map(|slot| slot.to_string())
                .collect();
            let mut args = vec!["CLUSTER", "ADDSLOTS"];
            args.extend(slots.iter().map(String::as_str));
            expect_ok(port, &args)?;
        }
        for &port in &ports[1..] {
            expect_ok(
                port,
                &["CLUSTER", "MEET", "127.0.0.1", &ports[0].to_string()],
            )?;
        }
        let deadline = Instant::now() + CLUSTER_OK_TIMEOUT;
        while !ports
            .iter()
            .all(|&p| cli(p, &["CLUSTER", "INFO"]).contains("cluster_known_nodes:6"))
        {
            if Instant::now() > deadline {
                return Err("the cluster's nodes never all met".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // A node met is known under a made-up name until its handshake ends: a replica may
        // not know its primary's id yet, and says so; it is asked again.
        for i in 0..3 {
            let primary = cli(ports[i], &["CLUSTER", "MYID"]);
            while let Err(e) = expect_ok(ports[i + 3], &["CLUSTER", "REPLICATE", primary.trim()]) {
                if Instant::now() > deadline {
                    return Err(e);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        Ok(())
    }

    fn spawn(&self, port: u16) -> Result<Child, String> {
        let config = format!("nodes-{port}.conf");
        spawn(
            port,
            &self.dir,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-node-timeout",
                "500",
                // A replica that never finished its first sync cannot be promoted: start the
                // sync at once rather than after the default 5 s wait for more replicas.
                "--repl-diskless-sync-delay",
                "0",
                "--cluster-config-file",
                &config,
            ],
        )
    }

    /// Waits (up to 30 s) until every live node reports the cluster ok with every slot
    /// served, and every replica is in sync with its primary (so it can be promoted).
    pub fn wait_ok(&self) -> Result<(), String> {
        let deadline = Instant::now() + CLUSTER_OK_TIMEOUT;
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

    /// `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis+cluster://{}", hosts.join(","))
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

    /// Runs `args` on every live primary: each one's answer, as `redis-cli` prints it.
    pub fn on_primaries(&self, args: &[&str]) -> Vec<String> {
        self.nodes
            .iter()
            .filter(|n| n.child.is_some())
            .filter(|n| cli(n.port, &["ROLE"]).starts_with("master"))
            .map(|n| cli(n.port, args))
            .collect()
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
        let child = self.spawn(port)?;
        if let Some(n) = self.nodes.iter_mut().find(|n| n.port == port) {
            n.child = Some(child);
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
            stop(&mut c);
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
        // Every node first, then the directory their files are in.
        self.nodes.clear();
        std::fs::remove_dir_all(&self.dir).ok();
    }
}
