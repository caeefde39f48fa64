//! `ratelab probe` against real limiters: `ratelab-server` on memory and on a real
//! redis-server (atomic and naive paths), ratelab's own Lua script and the read-then-write
//! client on Redis, and nginx's `limit_req`, a limiter nobody here wrote.
//!
//! Each test drives the real binary against real servers on free loopback ports and reads
//! its JSON report. The naive path and a claim tighter than nginx's real policy are the
//! canaries: the probe must fail them (exit 1), with the figures that show why.
//!
//! Without `redis-server` or `nginx` installed the tests that need them are marked ignored,
//! unless `RATELAB_REQUIRE_REDIS=1` / `RATELAB_REQUIRE_NGINX=1` (as in CI).

use ratelab_testkit::{nginx, redis_cluster, redis_server};

use crate::{probe_binary, server_binary};
use redis_server::{RedisServer, free_port};
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn wait_for_port(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not open port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `ratelab probe ARGS --json`: its exit code and report.
fn probe(args: &[&str]) -> (i32, Value) {
    let out = Command::new(probe_binary())
        .arg("probe")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let code = out.status.code().unwrap_or(-1);
    let text = String::from_utf8_lossy(&out.stdout);
    let report = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "probe {args:?} (exit {code}) printed no JSON report ({e}): {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, report)
}

/// Runs `ratelab probe ARGS` expecting bad input: its stderr.
fn probe_refused(args: &[&str]) -> String {
    let out = Command::new(probe_binary())
        .arg("probe")
        .args(args)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A `ratelab-server` on a free port, killed when dropped.
struct Serve {
    child: Child,
    url: String,
}

impl Serve {
    /// The server with B = 5, R = 2/s per key and a per-IP limit out of the way.
    fn start(extra: &[&str]) -> Serve {
        let mut args = vec!["--capacity", "5", "--refill-per-sec", "2"];
        args.extend(["--ip-capacity", "1000000", "--ip-refill-per-sec", "1000000"]);
        args.extend(extra);
        Serve::with(&args)
    }

    /// The server with `args` alone (beside its addresses).
    fn with(args: &[&str]) -> Serve {
        let port = free_port();
        let child = Command::new(server_binary())
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(["--admin-listen", "127.0.0.1:0"])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_for_port(port, "ratelab-server");
        Serve {
            child,
            url: format!("http://127.0.0.1:{port}/"),
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// The ladder every test runs: enough concurrency for the lost update, few enough requests
/// to stay quick.
const LADDER: [&str; 6] = [
    "--concurrency",
    "1,8,64",
    "--requests",
    "300",
    "--keys",
    "8",
];

fn probe_serve(url: &str, extra: &[&str]) -> (i32, Value) {
    probe_instances(&[url], extra)
}

/// [`probe_serve`] over several instances.
fn probe_instances(urls: &[&str], extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["http"];
    args.extend(urls);
    args.extend(["--key-header", "x-api-key", "--policy-name", "per-key"]);
    args.extend(["--policy", "token-bucket:5,2"]);
    args.extend(LADDER);
    args.extend(extra);
    probe(&args)
}

fn u(v: &Value, path: &str) -> u64 {
    v.pointer(path)
        .and_then(Value::as_u64)
        .unwrap_or_else(|| panic!("{path} in {v}"))
}

/// A correct limiter: every check passes, and the honesty probes were admitted after
/// waiting exactly the Retry-After they were told.
fn assert_passes(code: i32, r: &Value) {
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(r["failures"], Value::Array(vec![]), "{r:#}");
    assert_eq!(u(r, "/envelope/max_excess"), 0);
    assert!(u(r, "/admitted") > 0 && u(r, "/denied") > 0, "{r:#}");
    assert_eq!(u(r, "/failed"), 0);
    assert_eq!(
        u(r, "/linearizable/keys"),
        3 * 8 + 3,
        "8 keys a step and 3 honesty keys"
    );
}

fn assert_retry_after_exact(r: &Value) {
    assert_eq!(u(r, "/retry_after/probes"), 3, "{r:#}");
    assert_eq!(u(r, "/retry_after/admitted"), 3, "{r:#}");
}

#[test]
fn ratelab_serve_on_memory_passes_with_retry_after_exact() {
    let s = Serve::start(&[]);
    let (code, r) = probe_serve(&s.url, &[]);
    assert_passes(code, &r);
    assert_retry_after_exact(&r);
    // Without --policy the claim is read from RateLimit-Policy (q=5;w=3) as a bound that
    // holds for a fixed window and for ratelab's rounded bucket alike: the envelope is
    // checked, linearizability is not.
    let mut args = vec!["http", &s.url, "--key-header", "x-api-key"];
    args.extend(["--policy-name", "per-key", "--retry-probes", "0"]);
    args.extend(LADDER);
    let (code, r) = probe(&args);
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(
        r["policy"], "token-bucket:10,2.5",
        "2q at once, q/(w - 1) after"
    );
    assert_eq!(r["linearizable"], Value::Null);
    assert_eq!(u(&r, "/envelope/max_excess"), 0);
    // With --policy the two announced policies need no --policy-name: the binding item's
    // fields are read.
    let mut args = vec!["http", &s.url, "--key-header", "x-api-key"];
    args.extend(["--policy", "token-bucket:5,2", "--retry-probes", "0"]);
    args.extend(LADDER);
    let (code, r) = probe(&args);
    assert_eq!(code, 0, "{r:#}");
}

/// The probe reads the RateLimit fields of either draft: the server's default (draft-11,
/// `t` the effective window) above, draft-10 here, each field checked against the
/// Retry-After beside it.
#[test]
fn the_probe_reads_draft_10_fields_as_well() {
    let s = Serve::start(&["--ratelimit-fields", "draft-10"]);
    let (code, r) = probe_serve(&s.url, &[]);
    assert_passes(code, &r);
    assert_retry_after_exact(&r);
    assert!(u(&r, "/fields/checked") > 0, "{r:#}");
    assert_eq!(
        u(&r, "/fields/dialects/RateLimit"),
        u(&r, "/fields/checked"),
        "every answer in the structured field: {r:#}"
    );
    // The same limiter with the search starved of budget: nothing failed, nothing is shown
    // linearizable either. Unknown is its own verdict and exit code, never a pass.
    let (code, r) = probe_serve(&s.url, &["--budget", "1", "--retry-probes", "0"]);
    assert_eq!(code, 3, "{r:#}");
    assert_eq!(r["verdict"], "unknown", "{r:#}");
    assert_eq!(r["pass"], false, "{r:#}");
    assert_eq!(r["failures"], Value::Array(vec![]), "{r:#}");
    assert!(!r["linearizable"]["unknown"].as_array().unwrap().is_empty());
}

#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn ratelab_serve_on_redis_passes_atomic_and_the_probe_catches_its_naive_path() {
    let Some(redis) = RedisServer::start("ratelab_serve_on_redis") else {
        return;
    };
    let url = redis.url();
    let atomic = Serve::start(&["--redis", &url]);
    let (code, r) = probe_serve(&atomic.url, &[]);
    assert_passes(code, &r);
    assert_retry_after_exact(&r);
    let naive = Serve::start(&["--redis", &url, "--path", "naive"]);
    let page = std::env::temp_dir().join(format!("ratelab-probe-{}.html", std::process::id()));
    let page_arg = page.to_str().unwrap();
    let (code, r) = probe_serve(&naive.url, &["--retry-probes", "0", "--timeline", page_arg]);
    assert_eq!(code, 1, "the lost update goes unnoticed: {r:#}");
    assert!(u(&r, "/envelope/max_excess") > 0, "{r:#}");
    let witness = &r["envelope"]["witness"];
    assert!(witness["ids"].as_array().is_some_and(|ids| !ids.is_empty()));
    assert!(
        !r["linearizable"]["violations"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    // The timeline draws the witness's key, its requests and the violating window.
    let html = std::fs::read_to_string(&page).unwrap();
    std::fs::remove_file(&page).ok();
    assert!(
        html.contains(witness["key"].as_str().unwrap()),
        "{html:.400}"
    );
    assert!(html.contains(r#"class="violation""#) && html.contains(r#"class="request""#));
}

/// Several instances of one limiter: two `ratelab-server`s sharing one Redis hold the policy
/// together; two each with its own memory admit the burst twice (a per-process limit), and
/// the probe, spreading its requests over both, says so.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn the_probe_spreads_over_instances_and_catches_per_instance_memory() {
    let Some(redis) = RedisServer::start("probe_instances") else {
        return;
    };
    let url = redis.url();
    let (a, b) = (
        Serve::start(&["--redis", &url]),
        Serve::start(&["--redis", &url]),
    );
    let (code, r) = probe_instances(&[&a.url, &b.url], &["--spread", "random:7"]);
    assert_passes(code, &r);
    let instances = r["instances"].as_array().unwrap();
    assert_eq!(instances.len(), 2, "{r:#}");
    assert!(instances.iter().all(|i| u(i, "/requests") > 100), "{r:#}");
    let (a, b) = (Serve::start(&[]), Serve::start(&[]));
    let (code, r) = probe_instances(&[&a.url, &b.url], &["--retry-probes", "0"]);
    assert_eq!(code, 1, "each instance admits its own burst: {r:#}");
    assert!(u(&r, "/envelope/max_excess") >= 4, "{r:#}");
    // Round robin by request: each instance got half.
    let instances = r["instances"].as_array().unwrap();
    assert_eq!(u(&instances[0], "/requests"), u(&instances[1], "/requests"));
    let e = probe_refused(&[
        "http",
        &a.url,
        "http://127.0.0.1:1/{key}",
        "--policy",
        "token-bucket:5,2",
    ]);
    assert!(e.contains("{key} must be in every URL or in none"), "{e}");
    let e = probe_refused(&[
        "http",
        &a.url,
        "--spread",
        "random:x",
        "--policy",
        "token-bucket:5,2",
    ]);
    assert!(e.contains("random:SEED"), "{e}");
}

/// `ratelab probe redis URL` running ratelab's own token-bucket script, B = 5, R = 2/s.
fn probe_atomic_script(url: &str) -> (i32, Value) {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../store/src/token_bucket.lua");
    let mut args = vec!["redis", url, "--script", script.to_str().unwrap()];
    args.extend(["--keys-template", "{key}"]);
    args.extend([
        "--args-template",
        "{capacity},{amount},{period_ns},{cost},,",
    ]);
    args.extend(["--reply", "allowed=0,remaining=1,retry_after_ns=3"]);
    args.extend(["--policy", "token-bucket:5,2"]);
    args.extend(LADDER);
    probe(&args)
}

#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn probe_redis_on_a_cluster_url_passes_the_atomic_script_and_catches_get_set() {
    let Some(cluster) = redis_cluster::RedisCluster::start("probe_redis_on_a_cluster") else {
        return;
    };
    let hosts: Vec<String> = cluster
        .nodes
        .iter()
        .take(2)
        .map(|n| format!("127.0.0.1:{}", n.port))
        .collect();
    let url = format!("redis+cluster://{}", hosts.join(","));
    let (code, r) = probe_atomic_script(&url);
    assert_passes(code, &r);

    let mut args = vec!["redis", &url, "--pattern", "get-set"];
    args.extend(["--policy", "token-bucket:5,2", "--retry-probes", "0"]);
    args.extend(LADDER);
    let (code, r) = probe(&args);
    assert_eq!(
        code, 1,
        "the lost update goes unnoticed on a cluster: {r:#}"
    );
    assert!(u(&r, "/envelope/max_excess") > 0, "{r:#}");
}

#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn probe_redis_passes_the_atomic_script_and_catches_the_read_then_write_client() {
    let Some(redis) = RedisServer::start("probe_redis") else {
        return;
    };
    let url = redis.url();
    let (code, r) = probe_atomic_script(&url);
    assert_passes(code, &r);
    assert_retry_after_exact(&r);

    // A script that answers every call with an error has decided nothing: never a pass.
    let broken = std::env::temp_dir().join(format!("ratelab-broken-{}.lua", std::process::id()));
    std::fs::write(&broken, "return redis.error_reply('ERR not today')").unwrap();
    let mut args = vec!["redis", &url, "--script", broken.to_str().unwrap()];
    args.extend(["--policy", "token-bucket:5,2", "--retry-probes", "0"]);
    args.extend(LADDER);
    let (code, r) = probe(&args);
    std::fs::remove_file(&broken).ok();
    assert_eq!(code, 1, "{r:#}");
    let first = r["failures"][0].as_str().unwrap();
    assert!(
        first.starts_with("decisions: 900 of 900 requests got none"),
        "{first}"
    );
    assert!(first.contains("not today"), "{first}");

    let mut args = vec![
        "redis",
        &url,
        "--pattern",
        "get-set",
        "--policy",
        "token-bucket:5,2",
    ];
    args.extend(LADDER);
    args.extend(["--retry-probes", "0"]);
    let (code, r) = probe(&args);
    assert_eq!(code, 1, "the lost update goes unnoticed: {r:#}");
    assert!(u(&r, "/envelope/max_excess") > 0, "{r:#}");
    assert!(
        !r["linearizable"]["violations"]
            .as_array()
            .unwrap()
            .is_empty()
    );
}

/// A private nginx on a free port with a `limit_req` zone keyed by `x-api-key`, stopped
/// when dropped; `None` (after saying why) when nginx is not installed and not required.
fn nginx_limit_req(test: &str, rate: &str, burst: u32) -> Option<nginx::Nginx> {
    // limit_req runs in the preaccess phase, so the answer must come from a later phase (a
    // static file), not from `return`, which the rewrite phase sends before it.
    nginx::Nginx::start(
        test,
        &format!(
            "limit_req_zone $http_x_api_key zone=probe:1m rate={rate};\n limit_req_status 429;"
        ),
        &format!("root {{root}};\n location / {{ limit_req zone=probe burst={burst} nodelay; }}"),
    )
}

#[test]
#[cfg_attr(
    ratelab_missing_nginx,
    ignore = "nginx is not installed (Debian: apt-get install nginx-light)"
)]
fn nginx_limit_req_is_within_its_documented_envelope_and_a_tighter_claim_fails() {
    let Some(nginx) = nginx_limit_req("nginx_limit_req", "20r/s", 5) else {
        return;
    };
    // nginx decides on its cached time, updated once per event-loop iteration, in whole
    // milliseconds: a decision can rest on a clock a few ms behind the request, which the
    // probe is told (without it, a run now and then sees nginx admit one request ~2 ms early).
    // An iteration stretches with the machine's load: beside the rest of `cargo test` on two
    // cores, 10 ms was seen too little once (one request admitted early), so the probe is
    // told 25 ms, still a small part of the 50 ms between two of nginx's tokens.
    let probe_claiming = |policy: &str| {
        let mut args = vec![
            "http",
            &nginx.url,
            "--key-header",
            "x-api-key",
            "--policy",
            policy,
            "--clock-resolution",
            "25ms",
        ];
        args.extend(LADDER);
        probe(&args)
    };
    // nginx's documented semantics: rate r, burst b, nodelay — a bucket of b + 1 at r.
    let (code, r) = probe_claiming("leaky-bucket:20r/s,5");
    assert_eq!(code, 0, "{r:#}");
    assert_eq!(u(&r, "/envelope/max_excess"), 0);
    assert_eq!(u(&r, "/failed"), 0);
    assert!(
        r["linearizable"]["violations"]
            .as_array()
            .unwrap()
            .is_empty(),
        "{r:#}"
    );
    assert!(
        u(&r, "/admitted") >= 3 * 8 * 6,
        "each fresh key admits its burst: {r:#}"
    );
    // nginx sends no Retry-After: the honesty probes say so rather than pass.
    assert_eq!(u(&r, "/retry_after/probes"), 0);
    assert!(
        r["retry_after"]["skipped"][0]
            .as_str()
            .unwrap()
            .contains("announced no wait")
    );

    // Claimed tighter than configured: the probe must see nginx admit more than the claim.
    let (code, r) = probe_claiming("leaky-bucket:20r/s,2");
    assert_eq!(code, 1, "{r:#}");
    assert!(
        u(&r, "/envelope/max_excess") >= 3,
        "burst 5 against a claimed 2: {r:#}"
    );
}

#[test]
fn bad_input_exits_2_with_the_reason() {
    let e = probe_refused(&["http", "http://127.0.0.1:1/", "--policy", "token-bucket:5"]);
    assert!(e.contains("two values"), "{e}");
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/");
    let e = probe_refused(&["http", &url, "--policy", "token-bucket:5,1"]);
    assert!(e.contains("does not answer"), "{e}");
    let e = probe_refused(&[
        "http",
        "https://127.0.0.1:1/",
        "--policy",
        "token-bucket:5,1",
    ]);
    assert!(e.contains("only http://"), "{e}");
    let e = probe_refused(&["http", &url, "--keys", "4", "--policy", "token-bucket:5,1"]);
    assert!(e.contains("--key-header"), "{e}");
    let e = probe_refused(&["redis", "redis://127.0.0.1:1/", "--pattern", "get-set"]);
    assert!(e.contains("--policy is required"), "{e}");
    let script = |lua: &str, extra: &[&str]| {
        let mut args = vec!["redis", "redis://127.0.0.1:1/", "--script", lua];
        args.extend(["--policy", "token-bucket:5,1"]);
        args.extend(extra);
        probe_refused(&args)
    };
    let e = script("/nonexistent.lua", &[]);
    assert!(e.contains("/nonexistent.lua"), "{e}");
    let lua = std::env::temp_dir().join(format!("ratelab-probe-{}.lua", std::process::id()));
    std::fs::write(&lua, "return 1").unwrap();
    let e = script(lua.to_str().unwrap(), &["--reply", "allowed=0,left=1"]);
    assert!(e.contains("expected allowed, remaining"), "{e}");
    let e = script(lua.to_str().unwrap(), &["--keys-template", "{user}"]);
    assert!(e.contains("unknown placeholder {user}"), "{e}");
    std::fs::remove_file(&lua).ok();
}

/// A limiter whose tokens come in whole-period steps (`ratelab-server` with a stepped-bucket
/// limit, keyed by `x-api-key`) passes the probe held to that family, which it names with the
/// fields a limits file writes (never failed; a key the search cannot explain from the
/// moments it tries is unknown, as where a full bucket's new anchor falls inside a request's
/// flight); held to the continuous bucket of the same capacity and rate, its denials between
/// steps are caught as phantom denials.
#[test]
fn a_stepped_bucket_passes_as_itself_and_is_no_continuous_bucket() {
    let dir = ratelab_testkit::temp::TempDir::new("ratelab-probe-stepped");
    let limits = dir.join("limits.toml");
    std::fs::write(
        &limits,
        "[[limit]]\nname = \"per-key\"\nalgorithm = \"stepped-bucket\"\ncapacity = 4\n\
         refill = 2\nrefill_period_ms = 500\nkey = \"api-key\"\n",
    )
    .unwrap();
    let s = Serve::with(&["--limits", limits.to_str().unwrap()]);
    let stepped = "stepped-bucket:capacity=4,refill=2,refill_period_ms=500";
    // The two claims probed side by side, on keys of their own.
    let claimed = |policy: &'static str| {
        let url = s.url.clone();
        move || {
            let mut args = vec!["http", &url, "--key-header", "x-api-key"];
            args.extend(["--policy-name", "per-key", "--policy", policy]);
            args.extend(["--phases", "boundary"]);
            args.extend(LADDER);
            probe(&args)
        }
    };
    let ((code, r), (continuous_code, continuous)) = std::thread::scope(|scope| {
        let itself = scope.spawn(claimed(stepped));
        let continuous = scope.spawn(claimed("token-bucket:4,4"));
        (itself.join().unwrap(), continuous.join().unwrap())
    });
    assert!(code == 0 || code == 3, "{r:#}");
    assert_eq!(r["policy"], stepped, "{r:#}");
    assert_eq!(
        r["linearizable"]["violations"],
        Value::Array(vec![]),
        "{r:#}"
    );
    assert_eq!(r["failures"], Value::Array(vec![]), "{r:#}");
    assert!(u(&r, "/linearizable/keys") > 0, "{r:#}");
    assert!(u(&r, "/admitted") > 0 && u(&r, "/denied") > 0, "{r:#}");
    let (code, r) = (continuous_code, continuous);
    assert_eq!(code, 1, "{r:#}");
    assert!(
        r["failures"].as_array().is_some_and(|f| f
            .iter()
            .any(|f| f.as_str().is_some_and(|f| f.contains("a phantom denial")))),
        "{r:#}"
    );
}
