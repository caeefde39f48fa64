//! Flags of the server, merged over its config file.

use crate::config::{LimitFile, read_file, settings};
use crate::serve::run;
use std::path::PathBuf;
use std::process::ExitCode;

/// The largest capacity or refill rate a flag accepts (the core's own bound is checked too).
const LIMIT_MAX: u64 = 1_000_000_000_000;

/// Exit code for bad input.
pub const EXIT_BAD_INPUT: u8 = 2;

/// The server's flags (each overrides the config file).
#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Listen address (default 127.0.0.1:8080).
    #[arg(long)]
    listen: Option<std::net::SocketAddr>,
    /// The admin listener: `/metrics`, `/admin/kill-switch` and `/admin/shadow`, never served
    /// on the data plane (default 127.0.0.1:9901).
    #[arg(long, value_name = "ADDR")]
    admin_listen: Option<std::net::SocketAddr>,
    /// A file holding a bearer token that every request to the admin listener must carry
    /// (`Authorization: Bearer <token>`).
    #[arg(long, value_name = "FILE")]
    admin_token_file: Option<PathBuf>,
    /// How long a client has to send a request's head, ms (default 10000); a connection
    /// past it is closed.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    header_read_timeout_ms: Option<u64>,
    /// How long a connection may wait idle for its next request, ms (default 60000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=3_600_000))]
    idle_timeout_ms: Option<u64>,
    /// The most connections each listener holds open (default 10000, or what the open-file
    /// limit leaves room for); at the bound the longest-waiting connection with no request
    /// in progress is closed to make room, or the new one when all are busy.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    max_connections: Option<u64>,
    /// The largest request head (request line and headers), bytes (default 32768, as nginx's
    /// `large_client_header_buffers 4 8k`): a larger one is answered 431.
    #[arg(long, value_parser = clap::value_parser!(u64).range(8192..=1_048_576))]
    max_header_bytes: Option<u64>,
    /// A name the admin listener answers to in `Host` besides its IP address and
    /// `localhost` (repeatable): a request naming any other host (DNS rebinding) is refused.
    #[arg(long = "admin-host", value_name = "NAME")]
    admin_hosts: Vec<String>,
    /// The largest request body forwarded to --upstream, bytes (default 10485760): a larger
    /// one is answered 413.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_073_741_824))]
    max_body_bytes: Option<u64>,
    /// Which draft of the RateLimit fields answers follow, in HTTP and in the rate limit
    /// service's response headers: draft-11 (default: `t` is the effective window) or
    /// draft-10 (`t` is the time until more quota).
    #[arg(long, value_parser = ["draft-10", "draft-11"])]
    ratelimit_fields: Option<String>,
    /// A JSON config file; flags override it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Per-key capacity B (default 100).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=LIMIT_MAX))]
    capacity: Option<u64>,
    /// Per-key refill R per second (default 10).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=LIMIT_MAX))]
    refill_per_sec: Option<u64>,
    /// Per-IP capacity (default 10 × the per-key one).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=LIMIT_MAX))]
    ip_capacity: Option<u64>,
    /// Per-IP refill per second (default 10 × the per-key one).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=LIMIT_MAX))]
    ip_refill_per_sec: Option<u64>,
    /// The per-IP limit counts IPv6 clients by this prefix length (default 64).
    #[arg(long, value_parser = clap::value_parser!(u8).range(1..=128))]
    ipv6_prefix: Option<u8>,
    /// Each request's store deadline, shared by its layers, ms (default 50).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    timeout_ms: Option<u64>,
    /// A proxy whose forwarding header is believed (IP or range; repeatable).
    #[arg(long = "trusted-proxy")]
    trusted_proxies: Vec<String>,
    /// The one forwarding header believed from trusted proxies: x-forwarded-for (default),
    /// forwarded, x-real-ip, or none. The client is its rightmost entry, across every line,
    /// that is not a trusted proxy; every other forwarding header is ignored.
    #[arg(long, value_parser = ["x-forwarded-for", "forwarded", "x-real-ip", "none"])]
    client_ip_header: Option<String>,
    /// A route prefix that fails closed (repeatable).
    #[arg(long = "fail-closed-route")]
    fail_closed_routes: Vec<String>,
    /// Use Redis at this URL as the store (default: in memory).
    #[arg(long)]
    redis: Option<String>,
    /// Use the Redis Cluster this node belongs to as the store (a seed node's URL;
    /// repeatable).
    #[arg(long = "redis-cluster", value_name = "URL")]
    redis_cluster: Vec<String>,
    /// With Redis: answer each admission only once a replica holds its write (WAIT 1 MS
    /// after the script), or after MS either way; at most half of --timeout-ms.
    #[arg(long = "redis-wait", value_name = "MS")]
    redis_wait_ms: Option<u64>,
    /// Start with the kill switch on (limiting off).
    #[arg(long)]
    kill_switch: bool,
    /// Write the request log (JSON lines, one per request) to this file.
    #[arg(long, value_name = "FILE")]
    request_log: Option<PathBuf>,
    /// This gateway's name in the request log (default "gateway").
    #[arg(long)]
    name: Option<String>,
    /// The store access path: atomic (default), or naive, the read-then-write canary that
    /// loses updates under concurrency.
    #[arg(long, value_parser = ["atomic", "naive"])]
    path: Option<String>,
    /// A limits file (TOML) instead of the per-key and per-IP flags; reloaded when it
    /// changes and on SIGHUP. `ratelab-server schema` prints its JSON Schema.
    #[arg(long, value_name = "FILE")]
    limits: Option<PathBuf>,
    /// How often the limits file is checked for changes, ms (default 1000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(10..=3_600_000))]
    reload_interval_ms: Option<u64>,
    /// Start with the global shadow switch on: every limit evaluated and counted, nothing
    /// denied.
    #[arg(long)]
    shadow: bool,
    /// Forward admitted requests to this http://host[:port][/path] and return its answers
    /// (default: answer 200 "ok").
    #[arg(long, value_name = "URL")]
    upstream: Option<String>,
    /// How long the upstream has to start answering, ms (default 30000).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    upstream_timeout_ms: Option<u64>,
    /// Give each limit a local denial cache of this many keys: a key the store denied is
    /// answered 429 here until its wait is over, without a store call (default 0: none).
    #[arg(long, value_name = "KEYS", value_parser = clap::value_parser!(u64).range(0..=10_000_000))]
    denial_cache: Option<u64>,
    /// Runtime worker threads (default: one per core). On a machine that also runs the load
    /// generator, fewer workers than cores serve more (docs/PERFORMANCE.md).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    workers: Option<u64>,
    /// Also serve Envoy's rate limit service (RLS v3 gRPC) on this address, for the
    /// limits file's `[[domain]]`s and the `--rls-config` files.
    #[arg(long, value_name = "ADDR")]
    grpc_listen: Option<std::net::SocketAddr>,
    /// An envoyproxy/ratelimit YAML config file (one domain) for the rate limit service
    /// (repeatable).
    #[arg(long = "rls-config", value_name = "FILE")]
    rls_config: Vec<PathBuf>,
    /// What the rate limit service answers when the store fails: ok (fail open, the
    /// default) or unavailable (so Envoy's failure_mode_deny decides).
    #[arg(long, value_parser = ["ok", "unavailable"])]
    grpc_failure_mode: Option<String>,
}

/// The config file, overridden by the flags, validated, then served until Ctrl-C: 0 after a
/// clean shutdown, 2 on bad input (a flag, the config file, an unreachable store).
pub fn serve_command(args: ServeArgs) -> ExitCode {
    let ServeArgs {
        listen,
        admin_listen,
        admin_token_file,
        header_read_timeout_ms,
        idle_timeout_ms,
        max_connections,
        max_header_bytes,
        admin_hosts,
        max_body_bytes,
        ratelimit_fields,
        config,
        capacity,
        refill_per_sec,
        ip_capacity,
        ip_refill_per_sec,
        ipv6_prefix,
        timeout_ms,
        trusted_proxies,
        client_ip_header,
        fail_closed_routes,
        redis,
        redis_cluster,
        redis_wait_ms,
        kill_switch,
        request_log,
        name,
        path,
        limits,
        reload_interval_ms,
        shadow,
        upstream,
        upstream_timeout_ms,
        denial_cache,
        workers,
        grpc_listen,
        rls_config,
        grpc_failure_mode,
    } = args;
    let fail = |e: String| {
        eprintln!("error: {e}");
        ExitCode::from(EXIT_BAD_INPUT)
    };
    let mut f = match config.as_deref().map(read_file).transpose() {
        Ok(f) => f.unwrap_or_default(),
        Err(e) => return fail(e),
    };
    f.listen = listen.or(f.listen);
    f.admin_listen = admin_listen.or(f.admin_listen);
    f.admin_token_file = admin_token_file.or(f.admin_token_file);
    f.header_read_timeout_ms = header_read_timeout_ms.or(f.header_read_timeout_ms);
    f.idle_timeout_ms = idle_timeout_ms.or(f.idle_timeout_ms);
    f.max_connections = max_connections.map(|n| n as usize).or(f.max_connections);
    f.max_body_bytes = max_body_bytes.or(f.max_body_bytes);
    f.max_header_bytes = max_header_bytes.or(f.max_header_bytes);
    f.client_ip_header = client_ip_header.or(f.client_ip_header);
    if !admin_hosts.is_empty() {
        f.admin_hosts = Some(admin_hosts);
    }
    f.ratelimit_fields = ratelimit_fields.or(f.ratelimit_fields);
    let merge = |l: Option<LimitFile>, b: Option<u64>, r: Option<u64>| match (l, b, r) {
        (l, None, None) => Ok(l),
        (Some(l), b, r) => Ok(Some(LimitFile {
            capacity: b.unwrap_or(l.capacity),
            refill_per_sec: r.unwrap_or(l.refill_per_sec),
        })),
        (None, Some(b), Some(r)) => Ok(Some(LimitFile {
            capacity: b,
            refill_per_sec: r,
        })),
        (None, _, _) => Err("give both a capacity and a refill rate for a limit".to_owned()),
    };
    f.per_key = match merge(f.per_key, capacity, refill_per_sec) {
        Ok(l) => l,
        Err(e) => return fail(format!("per-key limit: {e}")),
    };
    f.per_ip = match merge(f.per_ip, ip_capacity, ip_refill_per_sec) {
        Ok(l) => l,
        Err(e) => return fail(format!("per-IP limit: {e}")),
    };
    f.timeout_ms = timeout_ms.or(f.timeout_ms);
    f.ipv6_prefix = ipv6_prefix.or(f.ipv6_prefix);
    if !trusted_proxies.is_empty() {
        f.trusted_proxies = Some(trusted_proxies);
    }
    if !fail_closed_routes.is_empty() {
        f.fail_closed_routes = Some(fail_closed_routes);
    }
    f.redis = redis.or(f.redis);
    if !redis_cluster.is_empty() {
        f.redis_cluster = Some(redis_cluster);
    }
    f.redis_wait_ms = redis_wait_ms.or(f.redis_wait_ms);
    if kill_switch {
        f.kill_switch = Some(true);
    }
    f.request_log = request_log.or(f.request_log);
    f.name = name.or(f.name);
    f.path = path.or(f.path);
    f.limits = limits.or(f.limits);
    f.reload_interval_ms = reload_interval_ms.or(f.reload_interval_ms);
    if shadow {
        f.shadow = Some(true);
    }
    f.upstream = upstream.or(f.upstream);
    f.upstream_timeout_ms = upstream_timeout_ms.or(f.upstream_timeout_ms);
    f.denial_cache = denial_cache.map(|n| n as usize).or(f.denial_cache);
    f.workers = workers.map(|n| n as usize).or(f.workers);
    f.grpc_listen = grpc_listen.or(f.grpc_listen);
    if !rls_config.is_empty() {
        f.rls_config = Some(rls_config);
    }
    f.grpc_failure_mode = grpc_failure_mode.or(f.grpc_failure_mode);
    match settings(f).and_then(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(e),
    }
}
