//! The limits file with the real `ratelab-server` binary and a real HTTP client: selectors,
//! keys, costs, shadow mode and the global shadow switch, hot reload by a real file edit and
//! by SIGHUP, a bad edit refused while the old limits keep running, and Redis.

use crate::common;

use ratelab_testkit::{redis_cluster, redis_server};

use common::{Server, series};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A file in a directory of its own, removed when dropped.
struct TempFile {
    dir: PathBuf,
    path: PathBuf,
}

impl TempFile {
    fn new(name: &str, text: &str) -> TempFile {
        let dir = std::env::temp_dir().join(format!(
            "ratelab-limits-{}-{}",
            std::process::id(),
            redis_server::free_port()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        TempFile { dir, path }
    }

    /// Replaces the file the way editors do: a new file renamed over it.
    fn replace(&self, text: &str) {
        let tmp = self.dir.join(".edit");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, &self.path).unwrap();
    }

    fn arg(&self) -> &str {
        self.path.to_str().unwrap()
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

fn server_bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
}

fn docs(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../docs")
        .join(name)
}

#[test]
fn the_example_file_validates_and_the_committed_schema_is_current() {
    let out = server_bin()
        .arg("check")
        .arg(docs("limits.example.toml"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        said.contains("4 limits: per-ip, per-key, tenant-writes, search-trial"),
        "{said}"
    );

    let out = server_bin().arg("schema").output().unwrap();
    let committed = std::fs::read_to_string(docs("limits.schema.json")).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        committed,
        "docs/limits.schema.json is stale: regenerate it with \
         `cargo run -p ratelab-server -- schema > docs/limits.schema.json`"
    );

    let bad = TempFile::new(
        "limits.toml",
        "[[limit]]\nname = \"a\"\nalgorithm = \"token-bucket\"\ncapacity = 0\nrefill_per_sec = 1\n",
    );
    let out = server_bin().args(["check", bad.arg()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("{}:4:12: at limit[0].capacity:", bad.arg())),
        "{err}"
    );
    // The server refuses to start on it, with the same location.
    let out = server_bin().args(["--limits", bad.arg()]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(":4:12: at limit[0].capacity:"),
        "{out:?}"
    );
    // And refuses a limits file beside the classic flags.
    let good = TempFile::new("limits.toml", &tenant_limit(3));
    let out = server_bin()
        .args([
            "--limits",
            good.arg(),
            "--capacity",
            "5",
            "--refill-per-sec",
            "1",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not both"));
}

/// One limit: `capacity` per tenant (`x-tenant`) on `/api/`, one token back an hour.
fn tenant_limit(capacity: u64) -> String {
    format!(
        r#"
[[limit]]
name = "tenant"
algorithm = "token-bucket"
capacity = {capacity}
refill = 1
refill_period_ms = 3600000
key = "header:x-tenant"
match = {{ route_prefix = "/api/" }}
"#
    )
}

const MIXED: &str = r#"
[[limit]]
name = "posts"
algorithm = "fixed-window"
limit = 2
window_ms = 3600000
key = "global"
mode = "shadow"
cost_from_header = { name = "x-trial-cost", default = 1, max = 2 }
match = { methods = ["POST"] }

[[limit]]
name = "costly"
algorithm = "sliding-window"
limit = 10
window_ms = 3600000
key = "client-ip"
cost_from_header = { name = "x-cost", default = 1, max = 5 }
match = { route_prefix = "/costly" }
"#;

#[test]
fn selectors_keys_costs_and_shadow_mode_over_http() {
    let file = TempFile::new("limits.toml", &(tenant_limit(3) + MIXED));
    let s = Server::start(&["--limits", file.arg()]);
    let t1 = [("x-tenant", "t1")];

    // Per tenant, on /api/ only.
    let statuses: Vec<u16> = (0..4)
        .map(|_| s.send("GET", "/api/x", &t1).status)
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429]);
    let denied = s.send("GET", "/api/x", &t1);
    assert!(
        denied.body.contains(r#""violated-policies":["tenant"]"#),
        "{}",
        denied.body
    );
    assert!(denied.header("ratelimit-policy").starts_with("\"tenant\""));
    assert_eq!(s.send("GET", "/api/x", &[("x-tenant", "t2")]).status, 200);
    assert_eq!(s.send("GET", "/elsewhere", &t1).status, 200);
    let untenanted = s.send("GET", "/api/x", &[]);
    assert_eq!(untenanted.status, 200);
    assert_eq!(
        untenanted.header("ratelimit-policy"),
        "",
        "no limit applies"
    );

    // A shadow limit counts its denials, lets them through, and shows in no field.
    for _ in 0..5 {
        let r = s.send("POST", "/elsewhere", &[]);
        assert_eq!(r.status, 200);
        assert!(!r.header("ratelimit-policy").contains("posts"));
    }
    let m = s.metrics();
    let shadowed = |m: &str, limit: &str| {
        series(
            m,
            "ratelab_shadow_denied_total",
            &[&format!("limit=\"{limit}\"")],
        )
    };
    assert_eq!(shadowed(&m, "posts"), Some(3.0), "{m}");
    assert_eq!(shadowed(&m, "tenant"), Some(0.0), "{m}");
    // A shadow limit that cannot read its cost leaves the request alone.
    let r = s.send("POST", "/elsewhere", &[("x-trial-cost", "99")]);
    assert_eq!(r.status, 200, "{}", r.body);

    // A cost from a header, within its bounds.
    let cost = |c: &str| s.send("GET", "/costly", &[("x-cost", c)]);
    for bad in ["6", "0", "two"] {
        let r = cost(bad);
        assert_eq!(r.status, 400, "x-cost {bad}");
        assert!(
            r.body
                .contains("x-cost: expected an integer cost from 1 to 5"),
            "{}",
            r.body
        );
    }
    let statuses: Vec<u16> = ["5", "5", "1"].iter().map(|c| cost(c).status).collect();
    assert_eq!(statuses, [200, 200, 429]);

    // With limiting switched off, no header is read at all.
    assert_eq!(s.switch("/admin/kill-switch", true).body, "on\n");
    assert_eq!(cost("two").status, 200);
    assert_eq!(s.switch("/admin/kill-switch", false).body, "off\n");

    // The global shadow switch: every limit measured, nothing denied.
    assert_eq!(s.switch("/admin/shadow", true).body, "on\n");
    assert_eq!(s.send("GET", "/api/x", &t1).status, 200);
    let m = s.metrics();
    assert_eq!(shadowed(&m, "tenant"), Some(1.0), "{m}");
    assert_eq!(series(&m, "ratelab_shadow", &[]), Some(1.0), "{m}");
    assert_eq!(s.switch("/admin/shadow", false).body, "off\n");
    assert_eq!(s.send("GET", "/api/x", &t1).status, 429);
}

/// Requests sent back to back from another thread until stopped; every status seen.
struct Load {
    stop: Arc<AtomicBool>,
    statuses: Arc<Mutex<Vec<Result<u16, String>>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(port: u16) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let statuses = Arc::new(Mutex::new(Vec::new()));
        let (stop2, seen) = (stop.clone(), statuses.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let http = reqwest::Client::new();
                while !stop2.load(Ordering::Relaxed) {
                    let r = http
                        .get(format!("http://127.0.0.1:{port}/api/load"))
                        .header("x-tenant", "load")
                        .send()
                        .await;
                    let status = r.map(|r| r.status().as_u16()).map_err(|e| e.to_string());
                    seen.lock().unwrap().push(status);
                }
            });
        });
        Load {
            stop,
            statuses,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Vec<Result<u16, String>> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        self.statuses.lock().unwrap().clone()
    }
}

#[test]
fn a_real_edit_reloads_the_limits_and_a_bad_edit_is_refused() {
    let file = TempFile::new("limits.toml", &tenant_limit(2));
    let s = Server::start(&["--limits", file.arg(), "--reload-interval-ms", "20"]);
    let load = Load::start(s.port);
    let burst = |tenant: &str, n: usize| -> Vec<u16> {
        (0..n)
            .map(|_| s.send("GET", "/api/x", &[("x-tenant", tenant)]).status)
            .collect()
    };
    assert_eq!(burst("a", 3), [200, 200, 429]);
    let reloads = |result: &str| format!("result=\"{result}\"");

    // A valid edit: applied, new buckets of the new size.
    file.replace(&tenant_limit(5));
    s.wait_for("ratelab_limits_reloads_total", &[&reloads("applied")], 1.0);
    assert_eq!(burst("b", 6), [200, 200, 200, 200, 200, 429]);

    // A bad edit, written in place: refused, located, counted; the old limits keep running.
    std::fs::write(
        &file.path,
        tenant_limit(5).replace("capacity = 5", "capacity = -5"),
    )
    .unwrap();
    s.wait_for("ratelab_limits_reloads_total", &[&reloads("rejected")], 1.0);
    s.wait_stderr(&format!(
        "limits file rejected, keeping the 1 limits running: {}:5:12: at limit[0].capacity:",
        file.arg()
    ));
    assert_eq!(burst("c", 6), [200, 200, 200, 200, 200, 429]);
    // Reported once, not at every poll.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let m = s.metrics();
    assert_eq!(
        series(&m, "ratelab_limits_reloads_total", &[&reloads("rejected")]),
        Some(1.0)
    );
    assert_eq!(series(&m, "ratelab_limits_loaded", &[]), Some(1.0), "{m}");

    // An edit that leaves the tenant limit as it was keeps its buckets: b stays spent.
    file.replace(&(tenant_limit(5) + MIXED));
    s.wait_for("ratelab_limits_reloads_total", &[&reloads("applied")], 2.0);
    assert_eq!(
        series(&s.metrics(), "ratelab_limits_loaded", &[]),
        Some(3.0)
    );
    assert_eq!(burst("b", 1), [429]);

    // A changed policy starts new buckets: c, spent under the old one, is not read under
    // the new parameters (an hourly refill read as 1/s would be a wait of centuries).
    file.replace(
        &(tenant_limit(5).replace(
            "refill = 1\nrefill_period_ms = 3600000",
            "refill_per_sec = 1",
        ) + MIXED),
    );
    s.wait_for("ratelab_limits_reloads_total", &[&reloads("applied")], 3.0);
    let r = s.send("GET", "/api/x", &[("x-tenant", "c")]);
    assert_eq!(r.status, 200, "a fresh bucket");

    // Requests in flight through the reloads all got an answer from a limit set.
    let statuses = load.finish();
    assert!(statuses.len() > 10, "{}", statuses.len());
    let odd: Vec<_> = statuses
        .iter()
        .filter(|s| !matches!(s, Ok(200 | 429)))
        .collect();
    assert!(odd.is_empty(), "{odd:?}");
}

#[test]
fn sighup_reloads_at_once() {
    let file = TempFile::new("limits.toml", &tenant_limit(1));
    // Polled once an hour: only the signal can apply the edit within the test.
    let s = Server::start(&["--limits", file.arg(), "--reload-interval-ms", "3600000"]);
    assert_eq!(s.send("GET", "/api/x", &[("x-tenant", "a")]).status, 200);
    assert_eq!(s.send("GET", "/api/x", &[("x-tenant", "a")]).status, 429);
    file.replace(&tenant_limit(3).replace("name = \"tenant\"", "name = \"tenant-v2\""));
    let applied = ["result=\"applied\""];
    assert_eq!(
        series(&s.metrics(), "ratelab_limits_reloads_total", &applied),
        Some(0.0)
    );
    let pid = s.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    s.wait_for("ratelab_limits_reloads_total", &applied, 1.0);
    let r = s.send("GET", "/api/x", &[("x-tenant", "a")]);
    assert_eq!(r.status, 200);
    assert!(r.header("ratelimit-policy").starts_with("\"tenant-v2\""));
}

#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn limits_file_on_redis() {
    let Some(redis) = redis_server::RedisServer::start("limits_file_on_redis") else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let file = TempFile::new("limits.toml", &tenant_limit(2));
    // One worker: on Redis, the one-worker multi-thread runtime.
    let s = Server::start(&["--limits", file.arg(), "--redis", &url, "--workers", "1"]);
    let statuses: Vec<u16> = (0..3)
        .map(|_| s.send("GET", "/api/x", &[("x-tenant", "r")]).status)
        .collect();
    assert_eq!(statuses, [200, 200, 429]);
}

/// On one Redis server, a request at one token-bucket limit is decided in two halves around
/// its script call, which the front holds by name (`ratelab_gateway::front`): the answers
/// and their fields are the limit's; a script cache flushed under the server (a restarted
/// Redis) is loaded again within the request, which is decided, not failed open; a frozen
/// Redis is answered within the timeout, open, or 503 on a fail-closed route; and limiting
/// resumes once it thaws.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn on_redis_a_request_is_decided_around_its_script_call() {
    let Some(mut redis) = redis_server::RedisServer::start("decided_around_its_script_call") else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", redis.port);
    // The token bucket's own script on /api/, the limits script's sliding window on /win/.
    let window = "\n[[limit]]\nname = \"window\"\nalgorithm = \"sliding-window\"\nlimit = 2\n\
                  window_ms = 3600000\nkey = \"header:x-tenant\"\nmatch = { route_prefix = \"/win/\" }\n";
    let file = TempFile::new("limits.toml", &(tenant_limit(2) + window));
    let s = Server::start(&[
        "--limits",
        file.arg(),
        "--redis",
        &url,
        "--workers",
        "1",
        "--timeout-ms",
        "100",
        "--fail-closed-route",
        "/api/closed",
    ]);
    let send = |tenant: &str, path: &str| s.send("GET", path, &[("x-tenant", tenant)]);
    let fields: Vec<(u16, String)> = (0..3)
        .map(|_| {
            let r = send("a", "/api/x");
            (r.status, r.header("ratelimit").to_owned())
        })
        .collect();
    assert_eq!(
        fields,
        [
            (200, "\"tenant\";r=1;t=3600".to_owned()),
            (200, "\"tenant\";r=0;t=7200".to_owned()),
            (429, "\"tenant\";r=0;t=3600".to_owned()),
        ]
    );

    let windowed = |tenant: &str| {
        let r = send(tenant, "/win/x");
        let field = r.header("ratelimit");
        (
            r.status,
            field.split(";t=").next().unwrap_or(field).to_owned(),
        )
    };
    let window_fields: Vec<(u16, String)> = (0..3).map(|_| windowed("a")).collect();
    assert_eq!(
        window_fields,
        [
            (200, "\"window\";r=1".to_owned()),
            (200, "\"window\";r=0".to_owned()),
            (429, "\"window\";r=0".to_owned()),
        ]
    );

    // The scripts gone from Redis: each call is made again with its script loaded.
    assert_eq!(
        redis_cluster::cli(redis.port, &["SCRIPT", "FLUSH"]).trim(),
        "OK"
    );
    let r = send("b", "/api/x");
    assert_eq!(
        (r.status, r.header("ratelimit")),
        (200, "\"tenant\";r=1;t=3600")
    );
    assert_eq!(windowed("b"), (200, "\"window\";r=1".to_owned()));

    // Frozen: open within the timeout, and 503 where the route fails closed.
    answered_while_frozen(&redis, || send("c", "/api/x"), || send("c", "/api/closed"));
    let m = s.metrics();
    let timeouts = series(
        &m,
        "ratelab_fail_open_total",
        &["reason=\"timeout\"", "limit=\"tenant\""],
    );
    assert_eq!(timeouts, Some(1.0), "{m}");
    let errors = series(
        &m,
        "ratelab_fail_open_total",
        &["reason=\"error\"", "limit=\"tenant\""],
    );
    let window_errors = series(
        &m,
        "ratelab_fail_open_total",
        &["reason=\"error\"", "limit=\"window\""],
    );
    assert_eq!(window_errors, Some(0.0), "{m}");
    assert_eq!(
        errors,
        Some(0.0),
        "the flushed script failed nothing open: {m}"
    );

    // Thawed: decided again. (The frozen calls were written before they timed out, so Redis
    // ran them when it thawed: a request answered open may still have spent.)
    let r = send("d", "/api/x");
    assert_eq!(
        (r.status, r.header("ratelimit")),
        (200, "\"tenant\";r=1;t=3600")
    );

    // Killed: the lane loses its connection, then refuses calls while it is down, each
    // request failed open at once; restarted (empty, its scripts gone), limiting resumes.
    redis.kill();
    for _ in 0..3 {
        let r = send("e", "/api/x");
        assert_eq!((r.status, r.header("ratelimit")), (200, ""));
    }
    redis.restart();
    let resumed = (0..40).find_map(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let r = send("f", "/api/x");
        (!r.header("ratelimit").is_empty()).then(|| (r.status, r.header("ratelimit").to_owned()))
    });
    assert_eq!(
        resumed,
        Some((200, "\"tenant\";r=1;t=3600".to_owned())),
        "limiting resumed after the restart"
    );
}

/// A request at two limits on Redis, decided in one script call sent ahead of its reply,
/// fails and resumes as a request at one limit does
/// (`on_redis_a_request_is_decided_around_its_script_call`): decided again after the scripts
/// are flushed; frozen, every limit open within the timeout (each counted) and 503 where the
/// route fails closed; thawed, decided; killed, open at once; restarted, decided again.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn on_redis_a_request_at_two_limits_fails_and_resumes_as_at_one() {
    let Some(mut redis) = redis_server::RedisServer::start("two_limits_fail_and_resume") else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", redis.port);
    // [`POLLUTION_WINDOWS`] with room at the client address: a request at both limits.
    let two = POLLUTION_WINDOWS.replace("limit = 5\n", "limit = 50\n");
    assert_ne!(two, POLLUTION_WINDOWS);
    let file = TempFile::new("limits.toml", &two);
    let s = Server::start(&[
        "--limits",
        file.arg(),
        "--redis",
        &url,
        "--workers",
        "1",
        "--timeout-ms",
        "100",
        "--fail-closed-route",
        "/closed",
    ]);
    let send = |tenant: &str, path: &str| s.send("GET", path, &[("x-tenant", tenant)]);
    // Both limits' fields, per-ip's remaining first.
    let decided = |r: &common::Reply| {
        let field = r.header("ratelimit");
        let remaining = |name: &str| {
            let at = field.find(&format!("\"{name}\";r="))? + name.len() + 5;
            field[at..].split(';').next()?.parse::<u64>().ok()
        };
        (r.status, remaining("per-ip"), remaining("tenant"))
    };
    let first = [send("a", "/x"), send("a", "/x")];
    assert_eq!(
        first.each_ref().map(decided),
        [(200, Some(49), Some(0)), (429, Some(49), Some(0))]
    );

    // The scripts gone from Redis: the step is made again with its script loaded.
    assert_eq!(
        redis_cluster::cli(redis.port, &["SCRIPT", "FLUSH"]).trim(),
        "OK"
    );
    assert_eq!(decided(&send("b", "/x")), (200, Some(48), Some(0)));
    let m = s.metrics();
    for limit in ["per-ip", "tenant"] {
        let failed = |reason: &str| {
            let reason = format!("reason=\"{reason}\"");
            let limit = format!("limit=\"{limit}\"");
            series(&m, "ratelab_fail_open_total", &[&reason, &limit])
        };
        assert_eq!(failed("error"), Some(0.0), "{limit}: {m}");
        assert_eq!(failed("timeout"), Some(0.0), "{limit}: {m}");
    }

    // Frozen: both limits open within the timeout, and 503 where the route fails closed.
    answered_while_frozen(&redis, || send("c", "/x"), || send("c", "/closed"));
    let m = s.metrics();
    for limit in ["per-ip", "tenant"] {
        let limit = format!("limit=\"{limit}\"");
        let timeouts = series(
            &m,
            "ratelab_fail_open_total",
            &["reason=\"timeout\"", &limit],
        );
        assert_eq!(timeouts, Some(1.0), "{limit}: {m}");
    }

    // Thawed: decided again (the frozen steps ran when Redis thawed: each spent at per-ip).
    let thawed = decided(&send("d", "/x"));
    assert_eq!((thawed.0, thawed.2), (200, Some(0)), "{thawed:?}");

    // Killed: open at once, 503 where the route fails closed; restarted (empty, its scripts
    // gone), limiting resumes at both limits.
    redis.kill();
    for _ in 0..3 {
        let r = send("e", "/x");
        assert_eq!((r.status, r.header("ratelimit")), (200, ""));
    }
    assert_eq!(send("e", "/closed").status, 503);
    redis.restart();
    let resumed = (0..40).find_map(|_| {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let r = send("f", "/x");
        (!r.header("ratelimit").is_empty()).then(|| decided(&r))
    });
    assert_eq!(
        resumed,
        Some((200, Some(49), Some(0))),
        "limiting resumed after the restart"
    );
    assert_eq!(decided(&send("f", "/x")).0, 429);
}

/// `open` then `closed` sent while `redis` is frozen (SIGSTOP): the first answered open,
/// without fields, the second 503 (its route fails closed), both within a second.
fn answered_while_frozen(
    redis: &redis_server::RedisServer,
    open: impl Fn() -> common::Reply,
    closed: impl Fn() -> common::Reply,
) {
    redis.signal("STOP");
    let started = std::time::Instant::now();
    let (open, closed) = (open(), closed());
    let took = started.elapsed();
    redis.signal("CONT");
    assert_eq!((open.status, open.header("ratelimit")), (200, ""));
    assert_eq!(closed.status, 503);
    assert!(
        took < std::time::Duration::from_millis(1_000),
        "answered in {took:?}"
    );
}

/// One limit of each algorithm but the token bucket, each on a route named after it, keyed
/// by `x-k` (the fixed window's a week long: aligned to the clock, a boundary within the
/// test's seconds is all but impossible).
fn every_algorithm() -> String {
    [
        ("fixed", "fixed-window", "limit = 2\nwindow_ms = 604800000"),
        (
            "first-hit",
            "first-hit-window",
            "limit = 2\nwindow_ms = 3600000",
        ),
        (
            "sliding",
            "sliding-window",
            "limit = 2\nwindow_ms = 3600000",
        ),
        (
            "stepped",
            "stepped-bucket",
            "capacity = 2\nrefill = 1\nrefill_period_ms = 3600000",
        ),
    ]
    .map(|(name, algorithm, params)| {
        format!(
            "[[limit]]\nname = \"{name}\"\nalgorithm = \"{algorithm}\"\n{params}\n\
             key = \"header:x-k\"\nmatch = {{ route_prefix = \"/{name}\" }}\n\n"
        )
    })
    .concat()
}

/// [`POLLUTION`] with two other algorithms: a sliding window per client address, a first-hit
/// window per tenant.
const POLLUTION_WINDOWS: &str = r#"
[[limit]]
name = "per-ip"
algorithm = "sliding-window"
limit = 5
window_ms = 3600000

[[limit]]
name = "tenant"
algorithm = "first-hit-window"
limit = 1
window_ms = 3600000
key = "header:x-tenant"
"#;

/// On one Redis server every algorithm runs (one script call a request), each limit admitting
/// exactly its quota, and a denial by one limit spends nothing at another of a different
/// algorithm.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn every_algorithm_runs_on_redis_all_or_nothing() {
    let Some(redis) = redis_server::RedisServer::start("every_algorithm_runs_on_redis") else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let file = TempFile::new("limits.toml", &every_algorithm());
    let s = Server::start(&["--limits", file.arg(), "--redis", &url]);
    for route in ["/fixed", "/first-hit", "/sliding", "/stepped"] {
        let statuses: Vec<u16> = (0..3)
            .map(|_| s.send("GET", route, &[("x-k", "a")]).status)
            .collect();
        assert_eq!(statuses, [200, 200, 429], "{route}");
        let name = route.trim_start_matches('/');
        let denied = s.send("GET", route, &[("x-k", "a")]);
        assert!(
            denied
                .header("ratelimit")
                .starts_with(&format!("\"{name}\";r=0;")),
            "{route}: {}",
            denied.header("ratelimit")
        );
        assert_eq!(s.send("GET", route, &[("x-k", "b")]).status, 200, "{route}");
    }
    let file = TempFile::new("limits.toml", POLLUTION_WINDOWS);
    let s = Server::start(&["--limits", file.arg(), "--redis", &url]);
    denials_spend_nothing_elsewhere(&s, std::time::Duration::ZERO);
}

/// On a Redis Cluster every algorithm runs too, each limit admitting exactly its quota; a
/// request whose limits' keys lie in different slots is decided slot by slot, and a denial by
/// one limit spends nothing at another of a different algorithm once its refund lands.
#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn every_algorithm_runs_on_a_redis_cluster_all_or_nothing() {
    let Some(cluster) = redis_cluster::RedisCluster::start("every_algorithm_runs_on_a_cluster")
    else {
        return;
    };
    let seed = &cluster.seeds()[0];
    let file = TempFile::new("limits.toml", &every_algorithm());
    // A store call under a loaded test run can take longer than the 50 ms default.
    let s = Server::start(&[
        "--limits",
        file.arg(),
        "--redis-cluster",
        seed,
        "--timeout-ms",
        "1000",
    ]);
    for route in ["/fixed", "/first-hit", "/sliding", "/stepped"] {
        let statuses: Vec<u16> = (0..3)
            .map(|_| s.send("GET", route, &[("x-k", "a")]).status)
            .collect();
        assert_eq!(statuses, [200, 200, 429], "{route}");
        assert_eq!(s.send("GET", route, &[("x-k", "b")]).status, 200, "{route}");
    }
    let file = TempFile::new("limits.toml", POLLUTION_WINDOWS);
    // A store call under a loaded test run can take longer than the 50 ms default.
    let s = Server::start(&[
        "--limits",
        file.arg(),
        "--redis-cluster",
        seed,
        "--timeout-ms",
        "1000",
    ]);
    denials_spend_nothing_elsewhere(&s, std::time::Duration::from_millis(200));
    limits_in_different_slots(&cluster);
}

/// A per-IP limit of 5 and a per-tenant limit of 1: every request matches both.
const POLLUTION: &str = r#"
[[limit]]
name = "per-ip"
algorithm = "token-bucket"
capacity = 5
refill = 1
refill_period_ms = 3600000

[[limit]]
name = "tenant"
algorithm = "token-bucket"
capacity = 1
refill = 1
refill_period_ms = 3600000
key = "header:x-tenant"
"#;

/// Envoy's ratelimit "counter pollution" (its issue #1060), checked: requests denied by the
/// tenant limit spend nothing at the per-IP limit, so the client address keeps 4 of its 5.
/// `settle` is how long to wait for background refunds (a Redis Cluster's) before counting.
fn denials_spend_nothing_elsewhere(s: &Server, settle: std::time::Duration) {
    let t1 = [("x-tenant", "t1")];
    assert_eq!(s.send("GET", "/", &t1).status, 200);
    for _ in 0..3 {
        let r = s.send("GET", "/", &t1);
        assert_eq!(r.status, 429);
        assert!(
            r.body.contains(r#""violated-policies":["tenant"]"#),
            "{}",
            r.body
        );
        // The per-IP limit reports what it holds: the one admitted request's token gone.
        assert!(
            r.header("ratelimit").starts_with("\"per-ip\";r=4;"),
            "{}",
            r.header("ratelimit")
        );
    }
    std::thread::sleep(settle);
    let t2: Vec<u16> = (0..5)
        .map(|i| {
            s.send("GET", "/", &[("x-tenant", &format!("t2-{i}"))])
                .status
        })
        .collect();
    assert_eq!(
        t2,
        [200, 200, 200, 200, 429],
        "the per-IP limit kept 4 tokens"
    );
}

#[test]
fn a_denial_by_one_limit_spends_nothing_at_the_others_in_memory() {
    let file = TempFile::new("limits.toml", POLLUTION);
    let s = Server::start(&["--limits", file.arg()]);
    denials_spend_nothing_elsewhere(&s, std::time::Duration::ZERO);
}

#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn on_a_redis_cluster_a_denial_by_one_limit_spends_nothing_at_the_others() {
    let Some(cluster) = redis_cluster::RedisCluster::start(
        "on_a_redis_cluster_a_denial_by_one_limit_spends_nothing_at_the_others",
    ) else {
        return;
    };
    let file = TempFile::new("limits.toml", POLLUTION);
    let seed = &cluster.seeds()[0];
    // A store call under a loaded test run can take longer than the 50 ms default.
    let s = Server::start(&[
        "--limits",
        file.arg(),
        "--redis-cluster",
        seed,
        "--timeout-ms",
        "1000",
    ]);
    // A refund slower than the denial waits for lands in the background: margin for it.
    denials_spend_nothing_elsewhere(&s, std::time::Duration::from_millis(200));
    limits_in_different_slots(&cluster);
}

/// Asserts that the per-IP limit's one key and the tenant limit's keys lie in different
/// slots, so the requests were decided per slot with refunds.
fn limits_in_different_slots(cluster: &redis_cluster::RedisCluster) {
    let mut slots = std::collections::BTreeMap::new();
    for n in &cluster.nodes {
        for key in redis_cluster::cli(n.port, &["KEYS", "ratelab:limit:*"]).lines() {
            let slot = redis_cluster::cli(n.port, &["CLUSTER", "KEYSLOT", key]);
            slots.insert(key.to_owned(), slot.trim().to_owned());
        }
    }
    let per_ip: Vec<_> = slots
        .iter()
        .filter(|(k, _)| k.contains(":per-ip:"))
        .collect();
    let tenant: Vec<_> = slots
        .iter()
        .filter(|(k, _)| k.contains(":tenant:"))
        .collect();
    assert_eq!(per_ip.len(), 1, "{slots:?}");
    assert!(!tenant.is_empty(), "{slots:?}");
    assert!(tenant.iter().all(|(_, s)| *s != per_ip[0].1), "{slots:?}");
}

#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn on_redis_every_limit_is_one_script_call() {
    let Some(redis) = redis_server::RedisServer::start("on_redis_every_limit_is_one_script_call")
    else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let file = TempFile::new("limits.toml", POLLUTION);
    let s = Server::start(&["--limits", file.arg(), "--redis", &url]);
    let mut conn = connect(&url);
    reset_stats(&mut conn);
    denials_spend_nothing_elsewhere(&s, std::time::Duration::ZERO);
    let stats = commandstats(&mut conn);
    let field = |cmd: &str, name: &str| {
        stats
            .lines()
            .find(|l| l.starts_with(&format!("cmdstat_{cmd}:")))
            .and_then(|l| {
                l.split(&format!("{name}="))
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0)
    };
    // 9 requests, each matching both limits: 9 script runs. Commands a script runs are
    // counted too: one TIME per run, one GET per key (two keys per run). The first request's
    // EVALSHA, sent ahead of its reply, finds the script not loaded yet; the request is then
    // decided through the client, whose EVALSHA misses too before its SCRIPT LOAD: two
    // failed calls at most, none run.
    assert_eq!(field("time", "calls"), 9, "{stats}");
    assert_eq!(field("get", "calls"), 18, "{stats}");
    let (calls, failed) = (field("evalsha", "calls"), field("evalsha", "failed_calls"));
    assert_eq!(calls - failed, 9, "{stats}");
    assert!(failed <= 2, "{stats}");
    assert!(field("script|load", "calls") <= 1, "{stats}");
}

#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn the_denial_cache_answers_a_denied_key_without_a_store_call() {
    let Some(redis) = redis_server::RedisServer::start("the_denial_cache_answers_a_denied_key")
    else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let file = TempFile::new("limits.toml", &tenant_limit(1));
    let s = Server::start(&[
        "--limits",
        file.arg(),
        "--redis",
        &url,
        "--denial-cache",
        "1000",
    ]);
    let mut conn = connect(&url);
    let t = [("x-tenant", "abuser")];
    assert_eq!(s.send("GET", "/api/x", &t).status, 200);
    let first = s.send("GET", "/api/x", &t);
    assert_eq!(first.status, 429, "denied by the store");
    reset_stats(&mut conn);
    for _ in 0..5 {
        let r = s.send("GET", "/api/x", &t);
        assert_eq!(r.status, 429);
        assert!(
            r.body.contains(r#""violated-policies":["tenant"]"#),
            "{}",
            r.body
        );
        // The store's wait, counted down: an hour for the one token, never longer.
        let retry: u64 = r.header("retry-after").parse().unwrap();
        assert!((3590..=3600).contains(&retry), "{retry}");
        assert!(
            r.header("ratelimit").starts_with("\"tenant\";r=0;t="),
            "{}",
            r.header("ratelimit")
        );
    }
    let stats = commandstats(&mut conn);
    assert!(
        !stats.contains("cmdstat_evalsha"),
        "a cached denial called the store:\n{stats}"
    );
    let m = s.metrics();
    assert_eq!(
        series(
            &m,
            "ratelab_denial_cache_hits_total",
            &[r#"limit="tenant""#]
        ),
        Some(5.0),
        "{m}"
    );
    // Another key still goes to the store.
    assert_eq!(
        s.send("GET", "/api/x", &[("x-tenant", "other")]).status,
        200
    );
    let stats = commandstats(&mut conn);
    assert!(stats.contains("cmdstat_evalsha:calls=1,"), "{stats}");
}

/// `--redis-wait MS`: each admission is answered after a `WAIT 1 MS` on its primary, and a
/// denial (which wrote nothing) waits for nothing. With no replica every wait runs out, and
/// the admission stands.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn with_redis_wait_each_admission_waits_for_a_replica_and_denials_do_not() {
    let Some(redis) = redis_server::RedisServer::start("with_redis_wait_each_admission_waits")
    else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", redis.port);
    let file = TempFile::new("limits.toml", &tenant_limit(3));
    let s = Server::start(&[
        "--limits",
        file.arg(),
        "--redis",
        &url,
        "--redis-wait",
        "30",
        "--timeout-ms",
        "500",
    ]);
    let mut conn = connect(&url);
    reset_stats(&mut conn);
    let t = [("x-tenant", "waits")];
    for i in 0..5 {
        let started = std::time::Instant::now();
        let r = s.send("GET", "/api/x", &t);
        let took = started.elapsed();
        if i < 3 {
            assert_eq!(r.status, 200, "admission {i}");
            assert!(
                took >= std::time::Duration::from_millis(30),
                "admission {i} was answered before its wait ran out ({took:?}): no replica \
                 could have acknowledged it"
            );
        } else {
            assert_eq!(r.status, 429, "request {i}");
        }
    }
    // Five script runs (one TIME each; the first EVALSHA may miss the script cache), three
    // admissions written (SET), three waits.
    let stats = commandstats(&mut conn);
    assert!(stats.contains("cmdstat_time:calls=5,"), "{stats}");
    assert!(stats.contains("cmdstat_set:calls=3,"), "{stats}");
    assert!(stats.contains("cmdstat_wait:calls=3,"), "{stats}");
    // No replica acknowledged any of the three: counted for the operator.
    s.wait_for("ratelab_redis_waits_short_total", &[], 3.0);
}

#[test]
fn redis_wait_is_refused_without_redis_or_beyond_the_timeout() {
    let file = TempFile::new("limits.toml", &tenant_limit(3));
    for (args, says) in [
        (vec!["--redis-wait", "5"], "needs a Redis store"),
        (
            vec![
                "--redis",
                "redis://127.0.0.1:1",
                "--redis-wait",
                "50",
                "--timeout-ms",
                "50",
            ],
            "redis_wait_ms: 50 is out of range: expected 1 to half of timeout_ms (25)",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
            .args(["--limits", file.arg(), "--listen", "127.0.0.1:0"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A plain connection to the test's Redis, to read its statistics.
fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url).unwrap().get_connection().unwrap()
}

/// Zeroes the server's command statistics.
fn reset_stats(conn: &mut redis::Connection) {
    let _: () = redis::cmd("CONFIG").arg("RESETSTAT").query(conn).unwrap();
}

/// `INFO commandstats`.
fn commandstats(conn: &mut redis::Connection) -> String {
    redis::cmd("INFO").arg("commandstats").query(conn).unwrap()
}

/// A request whose API key no limit reads (here, limits keyed on a tenant header only) is
/// logged without it unless it is a valid key: a key of 5 000 bytes, which would make a
/// line longer than `ratelab log scan` reads, is left out, and the log stays searchable.
#[test]
fn a_key_no_limit_checked_is_logged_only_if_valid() {
    use ratelab_gateway::reqlog::{ScanQuery, scan};
    let dir = ratelab_testkit::temp::TempDir::new("log-unchecked-key");
    let log = dir.join("requests.jsonl");
    let file = TempFile::new("limits.toml", &tenant_limit(5));
    let s = Server::start(&[
        "--limits",
        file.arg(),
        "--request-log",
        log.to_str().unwrap(),
    ]);
    let long = "a".repeat(5_000);
    for key in [long.as_str(), "k"] {
        let r = s.send("GET", "/api/x", &[("x-tenant", "t"), ("x-api-key", key)]);
        assert_eq!(r.status, 200);
    }
    let query = ScanQuery {
        from_ms: 0,
        to_ms: u64::MAX,
        key: None,
        decision: None,
    };
    let start = std::time::Instant::now();
    let found = loop {
        let found = scan(std::slice::from_ref(&log), &query);
        if found.as_ref().is_ok_and(|f| f.lines.len() == 2)
            || start.elapsed() > std::time::Duration::from_secs(10)
        {
            break found;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let keys: Vec<Option<&str>> = found
        .as_ref()
        .expect("the log scans")
        .lines
        .iter()
        .map(|l| l.fields.get("key").and_then(|k| k.as_str()))
        .collect();
    assert_eq!(keys, [None, Some("k")]);
}

/// A limit on GET holds for HEAD, which frameworks answer with the GET handler; another
/// method passes it.
#[test]
fn a_limit_on_get_holds_for_head() {
    let file = TempFile::new(
        "limits.toml",
        "[[limit]]\nname = \"reads\"\nalgorithm = \"token-bucket\"\ncapacity = 2\nrefill = 1\n\
         refill_period_ms = 3600000\nkey = \"global\"\nmatch = { methods = [\"GET\"] }\n",
    );
    let s = Server::start(&["--limits", file.arg()]);
    let statuses: Vec<u16> = ["GET", "HEAD", "POST", "HEAD", "GET"]
        .iter()
        .map(|m| s.send(m, "/x", &[]).status)
        .collect();
    assert_eq!(statuses, [200, 200, 200, 429, 429]);
}
