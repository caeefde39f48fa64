//! A target's processes on loopback: its store (a private `redis-server`) and its instances,
//! each on a free port, with its output in a log file; all stopped when dropped.

use super::recipe::{Loaded, StoreKind, Template};
use ratelab_procs::redis::RedisServer;
use std::collections::BTreeMap;
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A private store on a free loopback port.
#[derive(Debug)]
pub enum Store {
    /// `redis-server`.
    Redis(RedisServer),
    /// `memcached`, killed when dropped.
    Memcached {
        /// The process.
        child: Child,
        /// Its port.
        port: u16,
    },
}

impl Store {
    fn start(kind: StoreKind) -> Result<Option<Store>, String> {
        Ok(match kind {
            StoreKind::None => None,
            StoreKind::Redis => Some(Store::Redis(RedisServer::start()?)),
            StoreKind::Memcached => {
                let port = ratelab_procs::free_port();
                Some(Store::Memcached {
                    child: spawn_memcached(port)?,
                    port,
                })
            }
        })
    }

    /// Freezes it (SIGSTOP) or lets it go on (SIGCONT).
    pub fn signal(&self, sig: &str) -> Result<(), String> {
        match self {
            Store::Redis(r) => {
                let pid = r.pid().ok_or("redis-server is not running")?;
                ratelab_procs::redis::signal(pid, sig)
            }
            Store::Memcached { child, .. } => ratelab_procs::redis::signal(child.id(), sig),
        }
    }

    /// Kills it (SIGKILL): everything it held is gone.
    pub fn kill(&mut self) {
        match self {
            Store::Redis(r) => r.kill(),
            Store::Memcached { child, .. } => {
                ratelab_procs::redis::signal(child.id(), "CONT").ok();
                child.kill().ok();
                child.wait().ok();
            }
        }
    }

    /// Starts it again, empty, on the same port.
    pub fn restart(&mut self) -> Result<(), String> {
        match self {
            Store::Redis(r) => r.try_restart(),
            Store::Memcached { child, port } => {
                *child = spawn_memcached(*port)?;
                Ok(())
            }
        }
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        match self {
            Store::Redis(r) => r.port,
            Store::Memcached { port, .. } => *port,
        }
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Store::Redis(r) => r.pid(),
            Store::Memcached { child, .. } => Some(child.id()),
        }
    }

    /// The command line that starts another one like it, empty, on its port (what a
    /// reproducer runs after it kills this one).
    pub fn command(&self) -> Vec<String> {
        let port = self.port().to_string();
        let tmp = std::env::temp_dir().display().to_string();
        let memcached = ["-l", "127.0.0.1", "-U", "0", "-p", &port];
        let args: Vec<&str> = match self {
            Store::Redis(_) => vec![
                "redis-server",
                "--port",
                &port,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--dir",
                &tmp,
            ],
            Store::Memcached { .. } if running_as_root() => {
                [&["memcached", "-u", "root"][..], &memcached].concat()
            }
            Store::Memcached { .. } => [&["memcached"][..], &memcached].concat(),
        };
        args.into_iter().map(str::to_owned).collect()
    }

    /// Its URL, in the scheme its clients take (`redis://…/`, `memcached://…`).
    pub fn url(&self) -> String {
        match self {
            Store::Redis(r) => r.url(),
            Store::Memcached { port, .. } => format!("memcached://127.0.0.1:{port}"),
        }
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        if let Store::Memcached { child, .. } = self {
            child.kill().ok();
            child.wait().ok();
        }
    }
}

/// Whether this process runs as root (memcached refuses to unless told which user to be).
fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout.trim_ascii() == b"0")
}

/// A private `memcached` on `port`, once it listens.
fn spawn_memcached(port: u16) -> Result<Child, String> {
    let mut cmd = Command::new("memcached");
    if running_as_root() {
        cmd.args(["-u", "root"]);
    }
    let mut child = cmd
        .args(["-l", "127.0.0.1", "-U", "0", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting memcached: {e}"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            child.kill().ok();
            child.wait().ok();
            return Err(format!("memcached did not listen on {port} within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child)
}

/// The environment variable every instance of a run gets: the run's own directory.
const RUN_MARKER: &str = "RATELAB_AUDIT_RUN";

/// The environment variable every instance gets: the pid of the ratelab that started it.
const OWNER_MARKER: &str = "RATELAB_AUDIT_OWNER";

/// The processes whose environment holds `marker` (`NAME=value`), with when each started.
fn marked(marker: &str) -> Vec<(u32, u64)> {
    // A whole entry of the environment: NUL before it (or the start) and after it.
    let marker = format!("\0{marker}\0");
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let mut env = vec![0];
            env.extend(std::fs::read(format!("/proc/{pid}/environ")).ok()?);
            let has = env.windows(marker.len()).any(|w| w == marker.as_bytes());
            has.then(|| Some((pid, started_at(pid)?)))?
        })
        .collect()
}

/// Stops, at once, every process this ratelab started for its targets, the stores and what
/// their instances forked away included: what an interrupted audit does before it exits,
/// when no target's own stop will run.
pub fn stop_everything() {
    let mut all = descendants(std::process::id());
    all.extend(marked(&format!("{OWNER_MARKER}={}", std::process::id())));
    for (pid, since) in all {
        if started_at(pid) == Some(since) {
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status()
                .ok();
        }
    }
}

/// A running target.
#[derive(Debug)]
pub struct Running {
    /// The store, if the recipe has one.
    pub store: Option<Store>,
    children: Vec<Child>,
    /// Each instance's port, in order.
    pub ports: Vec<u16>,
    /// Where each instance's output goes.
    pub logs: Vec<PathBuf>,
    dir: PathBuf,
}

impl Drop for Running {
    /// Each instance runs in a process group of its own (a server's workers with it): the
    /// group gets SIGTERM, a server's orderly stop in which a master stops its workers, and
    /// SIGKILL if it has not exited within 5 s. A SIGKILL to a master alone would leave its
    /// workers serving the port.
    fn drop(&mut self) {
        let group = |c: &Child, sig: &str| {
            Command::new("kill")
                .args([sig, "--", &format!("-{}", c.id())])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        // Every process an instance started, whatever group it moved itself into (a server
        // that makes itself a session leader leaves its parent's group): killed after the
        // groups are, if still running.
        let mut started: Vec<(u32, u64)> = self
            .children
            .iter()
            .flat_map(|c| descendants(c.id()))
            .collect();
        for c in &mut self.children {
            group(c, "-CONT");
            let termed = group(c, "-TERM");
            let start = Instant::now();
            while termed && start.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            group(c, "-KILL");
            c.kill().ok();
            c.wait().ok();
        }
        // And every process that carries this run's marker in its environment: a daemon
        // that forked twice, whose parent is no longer the instance.
        started.extend(self.processes());
        for (pid, since) in started {
            // Only the same process: its pid may have been given to another since.
            if started_at(pid) != Some(since) {
                continue;
            }
            Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .stderr(Stdio::null())
                .status()
                .ok();
        }
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

impl Running {
    /// The processes still running that this run's instances started, whatever became of
    /// their parents and groups (each carries the run's marker in its environment), with
    /// when each started.
    pub fn processes(&self) -> Vec<(u32, u64)> {
        marked(&format!("{RUN_MARKER}={}", self.dir.display()))
    }

    /// Copies the instances' logs where they outlive the run (the run's own directory goes
    /// when it stops), and names them: what a run that could not judge leaves to read.
    pub fn keep_logs(&self, to: &std::path::Path) -> Vec<PathBuf> {
        std::fs::create_dir_all(to).ok();
        self.logs
            .iter()
            .filter_map(|log| {
                let kept = to.join(log.file_name()?);
                std::fs::copy(log, &kept).ok()?;
                Some(kept)
            })
            .collect()
    }
}

/// When process `pid` started (clock ticks after boot), from `/proc`, and its parent.
fn stat(pid: u32) -> Option<(u32, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The fields after the command name's closing parenthesis: state, parent, … and the
    // start time, the 20th of them.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    Some((fields.get(1)?.parse().ok()?, fields.get(19)?.parse().ok()?))
}

fn started_at(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, since)| since)
}

/// The processes descended from `pid` (children, theirs, …), with when each started, read
/// from `/proc`.
fn descendants(pid: u32) -> Vec<(u32, u64)> {
    let all: Vec<(u32, u32, u64)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let p: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
            let (ppid, since) = stat(p)?;
            Some((p, ppid, since))
        })
        .collect();
    let mut out: Vec<(u32, u64)> = Vec::new();
    let mut frontier = vec![pid];
    while let Some(parent) = frontier.pop() {
        for &(p, pp, since) in &all {
            if pp == parent && !out.iter().any(|&(o, _)| o == p) {
                out.push((p, since));
                frontier.push(p);
            }
        }
    }
    out
}

/// Replaces the recipe's placeholders in `s`.
fn fill(s: &str, vars: &BTreeMap<String, String>) -> String {
    vars.iter()
        .fold(s.to_owned(), |s, (k, v)| s.replace(&format!("{{{k}}}"), v))
}

/// The last lines a log holds, to say why an instance died.
fn tail(path: &PathBuf) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().rev().take(8).collect();
    lines.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// Starts `store` and `count` instances with the variant's environment; waits until each
/// instance accepts connections, or says which did not and what it printed.
pub fn start(
    r: &Loaded,
    store: StoreKind,
    env: &BTreeMap<String, String>,
    count: u32,
    templates: &[Template],
) -> Result<Running, String> {
    let store = Store::start(store)?;
    // Unique to this run, among every ratelab running: its marker names it.
    let dir = std::env::temp_dir().join(format!(
        "ratelab-audit-{}-{}-{}",
        r.name,
        std::process::id(),
        ratelab_procs::free_port()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut running = Running {
        store,
        children: Vec::new(),
        ports: Vec::new(),
        logs: Vec::new(),
        dir: dir.clone(),
    };
    let inst = &r.recipe.instance;
    // Every instance's ports are known to each (peers that sync name one another).
    let ports: Vec<u16> = (0..count).map(|_| ratelab_procs::free_port()).collect();
    let peer_ports: Vec<u16> = (0..count).map(|_| ratelab_procs::free_port()).collect();
    for i in 0..count {
        let port = ports[i as usize];
        let mut vars: BTreeMap<String, String> = BTreeMap::new();
        vars.insert("port".into(), port.to_string());
        vars.insert("peer_port".into(), peer_ports[i as usize].to_string());
        for (j, (p, q)) in ports.iter().zip(&peer_ports).enumerate() {
            vars.insert(format!("port_{j}"), p.to_string());
            vars.insert(format!("peer_port_{j}"), q.to_string());
        }
        vars.insert("instance".into(), i.to_string());
        let abs = r.dir.canonicalize().unwrap_or_else(|_| r.dir.clone());
        vars.insert("dir".into(), abs.display().to_string());
        vars.insert("run_dir".into(), dir.display().to_string());
        if let Some(s) = &running.store {
            vars.insert("store_url".into(), s.url());
            vars.insert("store_host".into(), "127.0.0.1".into());
            vars.insert("store_port".into(), s.port().to_string());
        }
        for t in templates {
            let text = std::fs::read_to_string(r.dir.join(&t.from))
                .map_err(|e| format!("{}: {}: {e}", r.name, t.from))?;
            let to = dir.join(fill(&t.to, &vars));
            std::fs::write(&to, fill(&text, &vars))
                .map_err(|e| format!("{}: {e}", to.display()))?;
        }
        let log = dir.join(format!("instance-{i}.log"));
        let out = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let args: Vec<String> = inst.command.iter().map(|a| fill(a, &vars)).collect();
        // A bare name is looked up as the install check looked it up (a server in /usr/sbin).
        let program = if args[0].contains('/') {
            PathBuf::from(&args[0])
        } else {
            super::install::locate(&args[0]).unwrap_or_else(|| PathBuf::from(&args[0]))
        };
        let mut cmd = Command::new(program);
        cmd.args(&args[1..])
            .process_group(0)
            .current_dir(&r.dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        for (k, v) in inst.env.iter().chain(env) {
            cmd.env(k, fill(v, &vars));
        }
        // Inherited by everything the instance starts, a daemon that forks away included.
        cmd.env(RUN_MARKER, &running.dir);
        cmd.env(OWNER_MARKER, std::process::id().to_string());
        let child = cmd
            .spawn()
            .map_err(|e| format!("{}: starting {:?}: {e}", r.name, args.join(" ")))?;
        running.children.push(child);
        running.ports.push(port);
        running.logs.push(log);
    }
    let deadline = Instant::now() + Duration::from_secs(inst.start_timeout_s);
    for i in 0..running.ports.len() {
        loop {
            if TcpStream::connect(("127.0.0.1", running.ports[i])).is_ok() {
                break;
            }
            if let Ok(Some(status)) = running.children[i].try_wait() {
                return Err(format!(
                    "{}: instance {i} exited ({status}) before listening; it printed:\n{}",
                    r.name,
                    tail(&running.logs[i])
                ));
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "{}: instance {i} did not listen on port {} within {} s; it printed:\n{}",
                    r.name,
                    running.ports[i],
                    inst.start_timeout_s,
                    tail(&running.logs[i])
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(running)
}
