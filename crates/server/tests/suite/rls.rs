//! Envoy's rate limit service on the real `ratelab-server` binary, driven by a gRPC client
//! nobody here wrote (Python's grpcio, stubs generated from the server's own proto files by
//! grpc_tools) and by a Rust tonic client: OVER_LIMIT after exactly the capacity under
//! concurrent callers, the RateLimit fields as structured fields, shadow mode, the descriptor
//! tree, one all-or-nothing step per call, overrides and costs, bad requests, and a frozen
//! real redis-server answered OK (fail open) or UNAVAILABLE.
//!
//! Without Python's grpcio the Python tests are marked ignored, unless
//! `RATELAB_REQUIRE_GRPCIO=1` (set by `.ci/run`, which installs Debian's `python3-grpcio` and
//! `python3-grpc-tools`).

use crate::common;

use ratelab_testkit::{redis_cluster, redis_server};

use common::{Server, series};
use ratelab_server::rls::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use ratelab_server::rls::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use ratelab_server::rls::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelab_server::rls::proto::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const LIMITS: &str = r#"
[[domain]]
domain = "edge"

[[domain.descriptors]]
key = "api"
rate_limit = { unit = "hour", requests_per_unit = 20 }

[[domain.descriptors]]
key = "trial"
shadow_mode = true
rate_limit = { unit = "hour", requests_per_unit = 5 }

[[domain.descriptors]]
key = "wide"
rate_limit = { unit = "hour", requests_per_unit = 100 }

[[domain.descriptors]]
key = "narrow"
policy = { algorithm = "token-bucket", capacity = 3, refill = 3, refill_period_ms = 3600000, name = "narrow" }

[[domain.descriptors]]
key = "plan"
value = "free"
rate_limit = { unit = "hour", requests_per_unit = 2, name = "free-plan" }
[[domain.descriptors.descriptors]]
key = "user"
rate_limit = { unit = "hour", requests_per_unit = 1 }

[[domain.descriptors]]
key = "plan"
rate_limit = { unit = "hour", requests_per_unit = 4, name = "any-plan" }

[[domain.descriptors]]
key = "plan"
value = "internal"
rate_limit = { unlimited = true }

[[domain]]
domain = "default/eg/https"

[[domain.descriptors]]
key = "api"
rate_limit = { unit = "HOUR", requests_per_unit = 1 }
"#;

/// A file in a directory of its own, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Dir {
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let d = std::env::temp_dir().join(format!(
            "ratelab-rls-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&d).unwrap();
        Dir(d)
    }

    fn write(&self, name: &str, text: &str) -> String {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        std::fs::remove_dir_all(&self.0).ok();
    }
}

/// A server with the test limits and the rate limit service on a free port: the server, its
/// gRPC address, and the directory of its files.
fn serve(extra: &[&str]) -> (Server, String, Dir) {
    let dir = Dir::new();
    let limits = dir.write("limits.toml", LIMITS);
    let mut args = vec!["--limits", &limits];
    args.extend_from_slice(extra);
    let (server, grpc) = serve_grpc(&args);
    (server, grpc, dir)
}

/// The server with `args` and its rate limit service on a port of its own choosing, read
/// off its banner.
fn serve_grpc(args: &[&str]) -> (Server, String) {
    let mut all = vec!["--grpc-listen", "127.0.0.1:0"];
    all.extend_from_slice(args);
    let server = Server::start(&all);
    let grpc = server
        .banner
        .lines()
        .find_map(|l| l.split_once("(Envoy RLS v3, gRPC): "))
        .and_then(|(_, rest)| rest.split(';').next())
        .unwrap_or_else(|| panic!("no gRPC address in the banner:\n{}", server.banner))
        .to_owned();
    (server, grpc)
}

/// A Python with grpcio and grpc_tools, or `None` (after saying why) when there is none and
/// none is required.
fn python(test: &str) -> Option<&'static str> {
    let found = ["python3", "/usr/bin/python3"].into_iter().find(|p| {
        Command::new(p)
            .args(["-c", "import grpc, grpc_tools"])
            .output()
            .is_ok_and(|o| o.status.success())
    });
    if found.is_none() {
        if std::env::var("RATELAB_REQUIRE_GRPCIO").as_deref() == Ok("1") {
            panic!("{test}: no python3 with grpcio and grpc_tools, and RATELAB_REQUIRE_GRPCIO=1");
        }
        eprintln!(
            "\n*** SKIPPED {test}: no python3 with grpcio and grpc_tools. Install them (Debian: \
             apt-get install python3-grpcio python3-grpc-tools) to run the gRPC client tests; set \
             RATELAB_REQUIRE_GRPCIO=1 to make their absence a failure. ***\n"
        );
    }
    found
}

fn server_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `calls` ShouldRateLimit calls from `concurrency` Python threads: one JSON answer each.
fn grpcio(
    py: &str,
    addr: &str,
    (calls, concurrency): (usize, usize),
    domain: &str,
    descriptors: &[&str],
) -> Vec<Value> {
    let out_dir = Dir::new();
    let out = Command::new(py)
        .arg(server_dir().join("tests/rls_client.py"))
        .arg(addr)
        .arg(server_dir().join("proto"))
        .arg(&out_dir.0)
        .args([calls.to_string(), concurrency.to_string()])
        .args([domain, "0"])
        .args(descriptors)
        .output()
        .unwrap();
    assert!(out.status.success(), "the Python client failed: {out:?}");
    let answers: Vec<Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(answers.len(), calls);
    answers
}

fn count(answers: &[Value], code: &str) -> usize {
    answers.iter().filter(|a| a["code"] == code).count()
}

/// A structured-field list of one item named `name`: its integer parameters.
fn field_params(field: &str, name: &str) -> std::collections::BTreeMap<String, i64> {
    let list: sfv::List = sfv::Parser::new(field)
        .parse()
        .unwrap_or_else(|e| panic!("{field:?} is not a structured-field list: {e}"));
    assert_eq!(list.len(), 1, "{field}");
    let sfv::ListEntry::Item(item) = &list[0] else {
        panic!("{field}: not an item")
    };
    assert_eq!(item.bare_item.as_string().map(|s| s.as_str()), Some(name));
    item.params
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_owned(), i64::from(v.as_integer()?))))
        .collect()
}

/// The `r` of a RateLimit field for `name`.
fn remaining_field(field: &str, name: &str) -> i64 {
    field_params(field, name)["r"]
}

/// The `q` and `w` of a RateLimit-Policy field for `name`.
fn policy_field(field: &str, name: &str) -> (i64, i64) {
    let p = field_params(field, name);
    (p["q"], p["w"])
}

fn check_over_limit_after_the_capacity(answers: &[Value]) {
    assert_eq!(count(answers, "OK"), 20, "{answers:?}");
    assert_eq!(count(answers, "OVER_LIMIT"), answers.len() - 20);
    // Every admitted call saw a different quota left: 19 down to 0, each spent once.
    let mut left: Vec<i64> = answers
        .iter()
        .filter(|a| a["code"] == "OK")
        .map(|a| {
            let h = &a["headers"];
            assert_eq!(
                policy_field(h["ratelimit-policy"].as_str().unwrap(), "edge.api"),
                (20, 3600)
            );
            let r = remaining_field(h["ratelimit"].as_str().unwrap(), "edge.api");
            assert_eq!(a["statuses"][0]["remaining"].as_i64(), Some(r));
            assert!(h.get("retry-after").is_none(), "{a}");
            r
        })
        .collect();
    left.sort_unstable();
    assert_eq!(left, (0..20).collect::<Vec<_>>());
    for a in answers.iter().filter(|a| a["code"] == "OVER_LIMIT") {
        let s = &a["statuses"][0];
        assert_eq!(s["code"], "OVER_LIMIT");
        assert_eq!(s["remaining"], 0);
        assert_eq!(s["limit"]["requests_per_unit"], 20);
        assert_eq!(s["limit"]["unit"], "HOUR");
        // One token every 180 s: the wait is at most that.
        let retry: u64 = a["headers"]["retry-after"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((1..=180).contains(&retry), "{a}");
        assert!(s["reset_ns"].as_u64().unwrap() <= 180_000_000_000, "{a}");
    }
}

#[test]
#[cfg_attr(
    ratelab_missing_grpcio,
    ignore = "no python3 with grpcio and grpc_tools (Debian: apt-get install python3-grpcio python3-grpc-tools)"
)]
fn grpcio_gets_over_limit_after_exactly_the_capacity_in_memory() {
    let Some(py) = python("grpcio_gets_over_limit_after_exactly_the_capacity_in_memory") else {
        return;
    };
    let (_server, grpc, _dir) = serve(&[]);
    let answers = grpcio(py, &grpc, (60, 16), "edge", &["api=alice"]);
    check_over_limit_after_the_capacity(&answers);
    // Another value of the same descriptor is a bucket of its own.
    let other = grpcio(py, &grpc, (1, 1), "edge", &["api=bob"]);
    assert_eq!(other[0]["code"], "OK");
    assert_eq!(other[0]["statuses"][0]["remaining"], 19);
    // A descriptor's own hits_addend is its cost: 20 − 7 − 7 leaves 6, too few for a third.
    let heavy = grpcio(py, &grpc, (3, 1), "edge", &["api=zed@7"]);
    let codes: Vec<_> = heavy.iter().map(|a| a["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["OK", "OK", "OVER_LIMIT"], "{heavy:?}");
    assert_eq!(heavy[2]["statuses"][0]["remaining"], 6);
}

#[test]
#[cfg_attr(
    ratelab_missing_grpcio,
    ignore = "no python3 with grpcio and grpc_tools (Debian: apt-get install python3-grpcio python3-grpc-tools)"
)]
fn grpcio_shadow_mode_is_never_over_limit_but_counted() {
    let Some(py) = python("grpcio_shadow_mode_is_never_over_limit_but_counted") else {
        return;
    };
    let (server, grpc, _dir) = serve(&[]);
    // Every descriptor limit's series is there at 0 before any call.
    let before = series(
        &server.metrics(),
        "ratelab_shadow_denied_total",
        &["limit=\"edge.trial\""],
    );
    assert_eq!(before, Some(0.0));
    let answers = grpcio(py, &grpc, (20, 8), "edge", &["trial=carol"]);
    assert_eq!(count(&answers, "OK"), 20, "{answers:?}");
    assert!(answers.iter().all(|a| a["statuses"][0]["code"] == "OK"));
    let denied = series(
        &server.metrics(),
        "ratelab_shadow_denied_total",
        &["limit=\"edge.trial\""],
    );
    assert_eq!(denied, Some(15.0));
}

#[test]
#[cfg_attr(
    any(ratelab_missing_redis, ratelab_missing_grpcio),
    ignore = "redis-server or python3's grpcio is not installed (Debian: apt-get install redis-server python3-grpcio python3-grpc-tools)"
)]
fn grpcio_on_a_frozen_redis_gets_ok_or_unavailable_as_configured() {
    let test = "grpcio_on_a_frozen_redis_gets_ok_or_unavailable_as_configured";
    let Some(py) = python(test) else { return };
    let Some(redis) = redis_server::RedisServer::start(test) else {
        return;
    };
    let url = redis.url();
    let (open, open_grpc, _d1) = serve(&["--redis", &url, "--timeout-ms", "250"]);
    let (_closed, closed_grpc, _d2) = serve(&[
        "--redis",
        &url,
        "--grpc-failure-mode",
        "unavailable",
        "--timeout-ms",
        "250",
    ]);
    // Healthy, on Redis: OVER_LIMIT after exactly the capacity, as in memory.
    check_over_limit_after_the_capacity(&grpcio(py, &open_grpc, (40, 16), "edge", &["api=dave"]));
    let healthy = grpcio(py, &closed_grpc, (1, 1), "edge", &["api=erin"]);
    assert_eq!(healthy[0]["code"], "OK", "{healthy:?}");
    // All or nothing on Redis too: one script over both buckets.
    let mut c = Client::connect(&open_grpc);
    let both: [&[(&str, &str)]; 2] = [&[("wide", "r")], &[("narrow", "r")]];
    let admitted = (0..6).filter(|_| c.codes("edge", &both)[0] == "OK").count();
    assert_eq!(admitted, 3);
    let wide = c.call(request("edge", &[&[("wide", "r")]])).unwrap();
    assert_eq!(wide.statuses[0].limit_remaining, 100 - 3 - 1);
    // A limit the Redis script cannot run exactly is refused at startup, located.
    let dir = Dir::new();
    let yearly = dir.write(
        "limits.toml",
        "[[domain]]\ndomain = \"d\"\n[[domain.descriptors]]\nkey = \"k\"\nrate_limit = { unit = \"year\", requests_per_unit = 1000 }\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
        .args(["--listen", "127.0.0.1:0", "--grpc-listen", "127.0.0.1:0"])
        .args(["--admin-listen", "127.0.0.1:0"])
        .args(["--limits", &yearly, "--redis", &url])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{yearly}:5:14: at domain[0].descriptors[0].rate_limit: "
        )),
        "{err}"
    );

    redis.signal("STOP");
    let open_answers = grpcio(py, &open_grpc, (8, 4), "edge", &["api=frank"]);
    let closed_answers = grpcio(py, &closed_grpc, (8, 4), "edge", &["api=frank"]);
    redis.signal("CONT");
    assert_eq!(count(&open_answers, "OK"), 8, "{open_answers:?}");
    let failed_open: f64 = ["error", "timeout", "breaker_open"]
        .iter()
        .filter_map(|r| {
            series(
                &open.metrics(),
                "ratelab_fail_open_total",
                &[&format!("reason=\"{r}\""), "limit=\"edge.api\""],
            )
        })
        .sum();
    assert_eq!(failed_open, 8.0);
    assert!(
        closed_answers
            .iter()
            .all(|a| a["ok"] == false && a["error"] == "UNAVAILABLE"),
        "{closed_answers:?}"
    );
}

/// A tonic client's calls on one runtime.
struct Client {
    rt: tokio::runtime::Runtime,
    client: RateLimitServiceClient<tonic::transport::Channel>,
}

impl Client {
    fn connect(addr: &str) -> Client {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let client = rt
            .block_on(RateLimitServiceClient::connect(format!("http://{addr}")))
            .unwrap();
        Client { rt, client }
    }

    fn call(&mut self, req: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
        self.rt
            .block_on(self.client.should_rate_limit(req))
            .map(tonic::Response::into_inner)
    }

    /// The overall code and each status's code, by name.
    fn codes(&mut self, domain: &str, descriptors: &[&[(&str, &str)]]) -> Vec<String> {
        let r = self
            .call(request(domain, descriptors))
            .unwrap_or_else(|e| panic!("{descriptors:?}: {e}"));
        let name = |c: i32| {
            ratelab_server::rls::proto::envoy::service::ratelimit::v3::rate_limit_response::Code::try_from(c)
                .unwrap()
                .as_str_name()
                .to_owned()
        };
        std::iter::once(name(r.overall_code))
            .chain(r.statuses.iter().map(|s| name(s.code)))
            .collect()
    }
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        limit: None,
        hits_addend: None,
    }
}

fn request(domain: &str, descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.into(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend: 0,
    }
}

#[test]
fn the_descriptor_tree_is_walked_as_envoyproxy_ratelimit_walks_it() {
    let (server, grpc, _dir) = serve(&[]);
    let mut c = Client::connect(&grpc);
    // plan=free has its own limit (2); any other plan the value-less one (4, per value);
    // plan=internal is unlimited; a plan with a user reaches the nested limit (1).
    let free = [("plan", "free")];
    assert_eq!(c.codes("edge", &[&free]), ["OK", "OK"]);
    assert_eq!(c.codes("edge", &[&free]), ["OK", "OK"]);
    assert_eq!(c.codes("edge", &[&free]), ["OVER_LIMIT", "OVER_LIMIT"]);
    for _ in 0..4 {
        assert_eq!(c.codes("edge", &[&[("plan", "pro")]]), ["OK", "OK"]);
    }
    assert_eq!(
        c.codes("edge", &[&[("plan", "pro")]]),
        ["OVER_LIMIT", "OVER_LIMIT"]
    );
    assert_eq!(c.codes("edge", &[&[("plan", "team")]]), ["OK", "OK"]);
    for _ in 0..10 {
        assert_eq!(c.codes("edge", &[&[("plan", "internal")]]), ["OK", "OK"]);
    }
    let user = [("plan", "free"), ("user", "u1")];
    assert_eq!(c.codes("edge", &[&user]), ["OK", "OK"]);
    assert_eq!(c.codes("edge", &[&user]), ["OVER_LIMIT", "OVER_LIMIT"]);
    // The nested node exists only under plan=free: elsewhere the walk ends unmatched.
    for _ in 0..3 {
        assert_eq!(
            c.codes("edge", &[&[("plan", "pro"), ("user", "u1")]]),
            ["OK", "OK"]
        );
    }
    // Unknown keys and domains match nothing: OK, and counted.
    assert_eq!(c.codes("edge", &[&[("nothing", "x")]]), ["OK", "OK"]);
    assert_eq!(c.codes("elsewhere", &[&[("api", "x")]]), ["OK", "OK"]);
    let unmatched = series(
        &server.metrics(),
        "ratelab_rls_descriptors_total",
        &["result=\"unmatched\""],
    );
    assert_eq!(unmatched, Some(5.0));
    let r = c.call(request("edge", &[&[("plan", "internal")]])).unwrap();
    assert_eq!(r.statuses[0].current_limit, None);
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
    // Envoy Gateway's domains have slashes; units are in any case.
    let eg = "default/eg/https";
    assert_eq!(c.codes(eg, &[&[("api", "a")]]), ["OK", "OK"]);
    assert_eq!(
        c.codes(eg, &[&[("api", "a")]]),
        ["OVER_LIMIT", "OVER_LIMIT"]
    );
}

#[test]
fn the_descriptors_of_one_call_are_decided_all_or_nothing() {
    let (_server, grpc, _dir) = serve(&[]);
    let mut c = Client::connect(&grpc);
    let both: [&[(&str, &str)]; 2] = [&[("wide", "t")], &[("narrow", "t")]];
    let mut admitted = 0;
    for _ in 0..10 {
        let codes = c.codes("edge", &both);
        if codes[0] == "OK" {
            admitted += 1;
        } else {
            // The narrow limit refused the call, and the wide one spent nothing for it.
            assert_eq!(codes, ["OVER_LIMIT", "OK", "OVER_LIMIT"]);
        }
    }
    assert_eq!(admitted, 3);
    let wide = c.call(request("edge", &[&[("wide", "t")]])).unwrap();
    assert_eq!(wide.statuses[0].limit_remaining, 100 - 3 - 1);
    let narrow = c.call(request("edge", &[&[("narrow", "t")]])).unwrap();
    let limit = narrow.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.name.as_str(), limit.requests_per_unit),
        ("narrow", 3)
    );
    // Both limits' fields in one list each, in descriptor order.
    let pair = c.call(request("edge", &both)).unwrap();
    let field = |name: &str| {
        pair.response_headers_to_add
            .iter()
            .find(|h| h.key == name)
            .map(|h| h.value.clone())
            .unwrap()
    };
    assert_eq!(
        field("ratelimit-policy"),
        "\"edge.wide\";q=100;w=3600, \"narrow\";q=3;w=3600"
    );
    assert!(field("retry-after").parse::<u64>().unwrap() >= 1);
    // A cost beyond a capacity is over the limit before any store call: nothing spent at
    // the wide limit either.
    let mut beyond = request("edge", &[&[("wide", "b")], &[("narrow", "b")]]);
    beyond.descriptors[1].hits_addend = Some(4);
    let r = c.call(beyond).unwrap();
    assert_eq!(
        (r.overall_code, r.statuses[0].code, r.statuses[1].code),
        (2, 1, 2)
    );
    let wide = c.call(request("edge", &[&[("wide", "b")]])).unwrap();
    assert_eq!(wide.statuses[0].limit_remaining, 99);
}

/// Two descriptors of other algorithms than the token bucket, for a server on Redis.
const WINDOWS: &str = r#"
[[domain]]
domain = "edge"

[[domain.descriptors]]
key = "wide"
policy = { algorithm = "sliding-window", limit = 100, window_ms = 3600000, name = "wide" }

[[domain.descriptors]]
key = "narrow"
policy = { algorithm = "fixed-window", limit = 3, window_ms = 604800000, name = "narrow" }
"#;

/// On Redis too, every algorithm: one call's descriptors are one step, all or nothing.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn on_redis_windows_are_decided_all_or_nothing_per_call() {
    let Some(redis) = redis_server::RedisServer::start("rls_windows_on_redis") else {
        return;
    };
    let url = format!("redis://127.0.0.1:{}", redis.port);
    windows_all_or_nothing(&["--redis", &url]);
}

/// And on a Redis Cluster, where a call's two descriptors lie in different slots: decided
/// slot by slot, given back where another slot denied.
#[test]
#[cfg_attr(
    ratelab_missing_redis_cluster,
    ignore = "redis-server or redis-cli is not installed (Debian: apt-get install redis-server)"
)]
fn on_a_redis_cluster_windows_are_decided_all_or_nothing_per_call() {
    let Some(cluster) = redis_cluster::RedisCluster::start("rls_windows_on_a_cluster") else {
        return;
    };
    windows_all_or_nothing(&["--redis-cluster", &cluster.seeds()[0]]);
    // The two windows' keys lie in different slots: each call was decided slot by slot, and
    // the wide window given back what a denial by the narrow one spent there.
    let mut slots = std::collections::BTreeMap::new();
    for n in &cluster.nodes {
        let keys = redis_cluster::cli(n.port, &["KEYS", "*"]);
        for key in keys.lines().filter(|k| !k.is_empty()) {
            let slot = redis_cluster::cli(n.port, &["CLUSTER", "KEYSLOT", key]);
            slots.insert(key.to_owned(), slot.trim().to_owned());
        }
    }
    assert_eq!(slots.len(), 2, "{slots:?}");
    let distinct: std::collections::BTreeSet<_> = slots.values().collect();
    assert_eq!(distinct.len(), 2, "{slots:?}");
}

/// [`WINDOWS`] served on `store`: the narrow window denies, the wide one spends nothing then.
fn windows_all_or_nothing(store: &[&str]) {
    let dir = Dir::new();
    let limits = dir.write("limits.toml", WINDOWS);
    let mut args = vec!["--limits", limits.as_str()];
    args.extend(store);
    let (_server, grpc) = serve_grpc(&args);
    let mut c = Client::connect(&grpc);
    let both: [&[(&str, &str)]; 2] = [&[("wide", "t")], &[("narrow", "t")]];
    let codes: Vec<String> = (0..6).map(|_| c.codes("edge", &both)[0].clone()).collect();
    assert_eq!(
        codes,
        ["OK", "OK", "OK", "OVER_LIMIT", "OVER_LIMIT", "OVER_LIMIT"]
    );
    // The narrow window refused three calls, and the wide one spent nothing for them.
    let wide = c.call(request("edge", &[&[("wide", "t")]])).unwrap();
    assert_eq!(wide.statuses[0].limit_remaining, 100 - 3 - 1);
}

#[test]
fn overrides_costs_and_bad_requests() {
    let (_server, grpc, _dir) = serve(&[]);
    let mut c = Client::connect(&grpc);
    // An override limits even a descriptor the tree does not know: 2 a minute.
    let mut over = request("edge", &[&[("nothing", "o")]]);
    over.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 2,
        unit: 2, // MINUTE
    });
    let codes: Vec<i32> = (0..3)
        .map(|_| c.call(over.clone()).unwrap().overall_code)
        .collect();
    assert_eq!(codes, [1, 1, 2]);
    let limit = c.call(over.clone()).unwrap().statuses[0]
        .current_limit
        .clone()
        .unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (2, 2));
    // On an unknown domain an override limits nothing, as envoyproxy/ratelimit.
    over.domain = "unknown".into();
    for _ in 0..4 {
        assert_eq!(c.call(over.clone()).unwrap().overall_code, 1);
    }
    // Values too long for a bucket key, or with control characters, are buckets too.
    let long = "v".repeat(1000);
    for value in [long.as_str(), "a\u{7}b"] {
        let left: Vec<u32> = (0..2)
            .map(|_| {
                let r = c.call(request("edge", &[&[("api", value)]])).unwrap();
                r.statuses[0].limit_remaining
            })
            .collect();
        assert_eq!(left, [19, 18], "{value:?}");
    }
    // The request's hits_addend is every descriptor's cost; a descriptor's own wins.
    let mut heavy = request("edge", &[&[("api", "h")]]);
    heavy.hits_addend = 7;
    let left: Vec<(i32, u32)> = (0..3)
        .map(|_| {
            let r = c.call(heavy.clone()).unwrap();
            (r.overall_code, r.statuses[0].limit_remaining)
        })
        .collect();
    // 20 − 7 − 7 leaves 6: a third 7 is refused and spends nothing.
    assert_eq!(left, [(1, 13), (1, 6), (2, 6)]);
    heavy.descriptors[0].hits_addend = Some(6);
    assert_eq!(c.call(heavy.clone()).unwrap().overall_code, 1);
    assert_eq!(c.call(heavy).unwrap().overall_code, 2);
    // A cost beyond a shadow limit's capacity is measured, never OVER_LIMIT.
    let mut trial = request("edge", &[&[("trial", "t")]]);
    trial.hits_addend = 7;
    assert_eq!(c.call(trial).unwrap().overall_code, 1);
    // Bad requests: INVALID_ARGUMENT, naming what is wrong.
    for (req, said) in [
        (request("", &[&[("api", "x")]]), "domain is empty"),
        (request("edge", &[]), "0 descriptors"),
        (request("edge", &[&[]]), "descriptors[0]: 0 entries"),
        (
            request("edge", &[&[("", "x")]]),
            "descriptors[0].entries[0]: the key is empty",
        ),
        (
            request("edge", &vec![&[("api", "x")][..]; 65]),
            "65 descriptors",
        ),
        (
            request("edge", &[&vec![("api", "x"); 17]]),
            "descriptors[0]: 17 entries",
        ),
    ] {
        let e = c.call(req).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(said), "{e:?}");
    }
    for (requests_per_unit, unit, said) in [
        (0, 1, "requests_per_unit 0"),
        (5, 0, "unit 0: expected SECOND, MINUTE"),
        (5, 8, "unit 8: expected SECOND, MINUTE"),
    ] {
        let mut bad = request("edge", &[&[("api", "x")]]);
        bad.descriptors[0].limit = Some(RateLimitOverride {
            requests_per_unit,
            unit,
        });
        let e = c.call(bad).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains(said), "{e:?}");
    }
    // A year is a unit too.
    let mut yearly = request("edge", &[&[("nothing", "y")]]);
    yearly.descriptors[0].limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: 6, // YEAR
    });
    let codes: Vec<i32> = (0..2)
        .map(|_| c.call(yearly.clone()).unwrap().overall_code)
        .collect();
    assert_eq!(codes, [1, 2]);
}

#[test]
fn envoyproxy_ratelimit_yaml_loads_unchanged_and_bad_files_are_located() {
    let sample = server_dir().join("../../docs/envoy/ratelimit.yaml");
    let out = Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
        .arg("check")
        .arg(&sample)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("1 domains (edge) with 4 descriptor limits"),
        "{out:?}"
    );
    let (server, grpc) = serve_grpc(&["--rls-config", sample.to_str().unwrap()]);
    let mut c = Client::connect(&grpc);
    let login = [("path", "/login"), ("remote_address", "10.0.0.1")];
    for _ in 0..8 {
        // shadow_mode: never over the limit, however often.
        assert_eq!(c.codes("edge", &[&login]), ["OK", "OK"]);
    }
    // 5 a minute: 3 of the 8 measured as denied, under the name made of the tree's path.
    assert_eq!(
        series(
            &server.metrics(),
            "ratelab_shadow_denied_total",
            &["limit=\"edge.path__login.remote_address\""]
        ),
        Some(3.0)
    );
    let r = c.call(request("edge", &[&[("client_id", "c1")]])).unwrap();
    assert_eq!(
        r.statuses[0].current_limit.as_ref().unwrap().name,
        "per-client"
    );
    assert_eq!(
        c.codes("edge", &[&[("client_id", "internal-batch")]]),
        ["OK", "OK"]
    );

    let dir = Dir::new();
    for (text, said) in [
        (
            "domain: x\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 3\n",
            ":5:7: at descriptors[0].rate_limit.unit: unknown unit \"fortnight\"",
        ),
        (
            "domain: x\ndescriptors:\n  - key: a\n    value: v*\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
            ":4:5: at descriptors[0].value: \"v*\": wildcard values are not supported",
        ),
        (
            "domain: x\ndescriptors:\n  - key: a\n  - key: b\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: y}]\n",
            ":8:7: at descriptors[1].rate_limit.replaces: `replaces` is not supported",
        ),
        (
            "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a\n",
            ":5:5: at descriptors[1].key: key \"a\" appears twice at this level",
        ),
        (
            "domain: x\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, name: n}\n  - key: b\n    rate_limit:\n      name: n\n      unit: second\n      requests_per_unit: 1\n",
            ":7:7: at descriptors[1].rate_limit.name: \"n\" names two limits",
        ),
    ] {
        let file = dir.write("bad.yaml", text);
        let out = Command::new(env!("CARGO_BIN_EXE_ratelab-server"))
            .args(["check", &file])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&format!("{file}{said}")), "{err}");
    }
}

#[test]
fn a_reload_of_the_limits_file_swaps_the_domains_and_a_bad_edit_keeps_them() {
    let (server, grpc, dir) = serve(&["--reload-interval-ms", "20"]);
    let mut c = Client::connect(&grpc);
    assert_eq!(c.codes("edge", &[&[("api", "r")]]), ["OK", "OK"]);
    // A bad edit (an unknown field) is refused; the running domains keep answering.
    dir.write(
        "limits.toml",
        &LIMITS.replace("shadow_mode = true", "shadow = true"),
    );
    server.wait_stderr("limits file rejected");
    assert_eq!(c.codes("edge", &[&[("api", "r")]]), ["OK", "OK"]);
    // A good one replaces them: api becomes 1 an hour, a new domain appears.
    let edited = LIMITS.replace("requests_per_unit = 20", "requests_per_unit = 1")
        + "\n[[domain]]\ndomain = \"added\"\n[[domain.descriptors]]\nkey = \"k\"\nrate_limit = { unlimited = true }\n";
    dir.write("limits.toml", &edited);
    server.wait_stderr("limits reloaded");
    assert_eq!(c.codes("edge", &[&[("api", "r2")]]), ["OK", "OK"]);
    assert_eq!(
        c.codes("edge", &[&[("api", "r2")]]),
        ["OVER_LIMIT", "OVER_LIMIT"]
    );
    let r = c.call(request("added", &[&[("k", "v")]])).unwrap();
    assert_eq!(r.statuses[0].limit_remaining, u32::MAX);
}
