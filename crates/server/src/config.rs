//! The server's config file and its validation into settings: every field optional, flags
//! override it (`args`), and every error names the file, JSON path, line and column.

use crate::limits::FileLimit;
use crate::rls::config::{Domains, Repeated};
use ratelab_core::headers::FieldsDraft;
use ratelab_core::located::Located;
use ratelab_core::{Nanos, TokenBucket};
use ratelab_gateway::admin::{AdminAccess, AdminToken};
use ratelab_gateway::conns::ConnLimits;
use ratelab_gateway::{BreakerConfig, ClientIpHeader, GatewayConfig, IpNet};
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A token-bucket limit.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitFile {
    /// Capacity B.
    pub capacity: u64,
    /// Refill R per second.
    pub refill_per_sec: u64,
}

/// Breaker settings.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BreakerFile {
    /// Consecutive failures that open it.
    pub failures_to_open: u32,
    /// Cooldown, ms.
    pub cooldown_ms: u64,
}

/// The config file: every field optional; flags override it.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeFile {
    /// Listen address.
    pub listen: Option<SocketAddr>,
    /// Per-key limit (x-api-key).
    pub per_key: Option<LimitFile>,
    /// Per-IP edge limit.
    pub per_ip: Option<LimitFile>,
    /// Each request's store deadline, shared by its layers, ms.
    pub timeout_ms: Option<u64>,
    /// The per-IP limit counts IPv6 clients by this prefix length (1–128, default 64).
    pub ipv6_prefix: Option<u8>,
    /// Breaker.
    pub breaker: Option<BreakerFile>,
    /// Trusted proxies (IPs or ranges).
    pub trusted_proxies: Option<Vec<String>>,
    /// The forwarding header believed from them: `x-forwarded-for` (default), `forwarded`,
    /// `x-real-ip` or `none`.
    pub client_ip_header: Option<String>,
    /// Route prefixes that fail closed.
    pub fail_closed_routes: Option<Vec<String>>,
    /// The admin listener's address: `/metrics` and `/admin/*`, never on the data plane
    /// (default `127.0.0.1:9901`).
    pub admin_listen: Option<SocketAddr>,
    /// Addresses (the TCP peer's) a change on the admin listener may come from (default:
    /// loopback).
    pub admin: Option<Vec<String>>,
    /// A file holding the bearer token every admin request must carry (relative to this
    /// file's directory); default: no token.
    pub admin_token_file: Option<PathBuf>,
    /// Names the admin listener answers to in `Host`, besides its IP address and
    /// `localhost`.
    pub admin_hosts: Option<Vec<String>>,
    /// The largest request head, bytes (default 32768); a larger one is answered 431.
    pub max_header_bytes: Option<u64>,
    /// How long a client has to send a request's head, ms (default 10000).
    pub header_read_timeout_ms: Option<u64>,
    /// How long a connection may wait idle for its next request, ms (default 60000).
    pub idle_timeout_ms: Option<u64>,
    /// The most connections each listener holds open (default 10000, or what the open-file
    /// limit leaves room for).
    pub max_connections: Option<usize>,
    /// The largest request body forwarded to the upstream, bytes (default 10 MiB).
    pub max_body_bytes: Option<u64>,
    /// Which draft the RateLimit fields follow: `draft-11` (default) or `draft-10`.
    pub ratelimit_fields: Option<String>,
    /// Whether to fail open (default true).
    pub fail_open: Option<bool>,
    /// Start with the kill switch on (limiting off); default false.
    pub kill_switch: Option<bool>,
    /// A Redis URL: use Redis as the store instead of the embedded in-memory one.
    pub redis: Option<String>,
    /// Seed nodes of a Redis Cluster (URLs) to use as the store instead.
    pub redis_cluster: Option<Vec<String>>,
    /// With Redis: answer each admission only once one replica holds its write (Redis
    /// `WAIT 1 MS` after the script), or after this many ms either way, so a failover loses
    /// no acknowledged admission unless a wait ran out; at most half of `timeout_ms`.
    /// Default: no wait.
    pub redis_wait_ms: Option<u64>,
    /// Write the request log (JSON lines) to this file; default: no request log.
    pub request_log: Option<PathBuf>,
    /// This gateway's name in the request log (default "gateway").
    pub name: Option<String>,
    /// The store access path: `atomic` (default) or `naive`, the read-then-write canary
    /// that loses updates under concurrency (for demonstrations and probes, never for use).
    pub path: Option<String>,
    /// A limits file (TOML; relative to this file's directory) instead of `per_key` and
    /// `per_ip`; reloaded when it changes and on SIGHUP.
    pub limits: Option<PathBuf>,
    /// How often the limits file is checked for changes, ms (default 1000).
    pub reload_interval_ms: Option<u64>,
    /// Start with the global shadow switch on: every limit evaluated and counted, nothing
    /// denied; default false.
    pub shadow: Option<bool>,
    /// Forward admitted requests to this `http://host[:port][/path]` (default: answer 200).
    pub upstream: Option<String>,
    /// How long the upstream has to start answering, ms (default 30000).
    pub upstream_timeout_ms: Option<u64>,
    /// Keys each limit's local denial cache holds (default 0: no cache).
    pub denial_cache: Option<usize>,
    /// Runtime worker threads (default: one per core).
    pub workers: Option<usize>,
    /// Serve Envoy's rate limit service (gRPC) on this address too.
    pub grpc_listen: Option<SocketAddr>,
    /// envoyproxy/ratelimit YAML files (one domain each; relative to this file's directory)
    /// whose domains the rate limit service serves, beside the limits file's `[[domain]]`s.
    pub rls_config: Option<Vec<PathBuf>>,
    /// What the rate limit service answers when the store fails: `ok` (fail open, the
    /// default) or `unavailable` (the gRPC status, so Envoy's `failure_mode_deny` decides).
    pub grpc_failure_mode: Option<String>,
}

/// Reads a config file, with errors naming file, JSON path, line and column.
pub fn read_file(path: &Path) -> Result<ServeFile, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
    let mut de = serde_json::Deserializer::from_str(&text);
    let parsed: ServeFile = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let inner = e.inner();
        let msg = inner.to_string();
        let msg = msg
            .rfind(" at line ")
            .map_or(msg.clone(), |i| msg[..i].to_owned());
        let at = e.path().to_string();
        let position = (inner.line(), inner.column());
        Located::new(path.display().to_string(), position, &at, msg).to_string()
    })?;
    de.end()
        .map_err(|e| format!("{}:{}:{}: {e}", path.display(), e.line(), e.column()))?;
    let mut parsed = parsed;
    if let Some(dir) = path.parent() {
        let rebase = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = dir.join(&*p);
            }
        };
        if let Some(limits) = parsed.limits.as_mut() {
            rebase(limits);
        }
        if let Some(token) = parsed.admin_token_file.as_mut() {
            rebase(token);
        }
        parsed.rls_config.iter_mut().flatten().for_each(rebase);
    }
    Ok(parsed)
}

/// Where the limits come from.
#[derive(Debug)]
pub enum LimitsSource {
    /// The classic pair: per-IP, then per-key (`x-api-key`).
    Classic {
        /// Per-IP bucket.
        per_ip: TokenBucket,
        /// Per-key bucket.
        per_key: TokenBucket,
    },
    /// A limits file, watched for changes.
    File {
        /// The file.
        path: PathBuf,
        /// The text its limits were read from.
        text: String,
        /// Its limits.
        limits: Vec<FileLimit>,
        /// Its rate limit service domains.
        domains: Domains,
    },
}

/// Envoy's rate limit service, when served.
#[derive(Debug)]
pub struct GrpcSettings {
    /// Its listen address.
    pub listen: SocketAddr,
    /// Whether a store failure answers `UNAVAILABLE` (else OK, failing open).
    pub fail_closed: bool,
    /// The domains of the envoyproxy/ratelimit YAML files (the limits file's own are in
    /// [`LimitsSource::File`]).
    pub yaml_domains: Domains,
}

/// Everything `serve` needs, validated.
#[derive(Debug)]
pub struct ServeSettings {
    /// Listen address.
    pub listen: SocketAddr,
    /// The limits.
    pub limits: LimitsSource,
    /// How often the limits file is checked for changes.
    pub reload_interval: Duration,
    /// The global shadow switch at startup.
    pub shadow: bool,
    /// Where admitted requests go, if anywhere.
    pub upstream: Option<crate::proxy::Upstream>,
    /// Runtime worker threads (`None`: one per core).
    pub workers: Option<usize>,
    /// Gateway settings.
    pub gateway: GatewayConfig,
    /// The admin listener's address.
    pub admin_listen: SocketAddr,
    /// Who may use the admin listener.
    pub admin: AdminAccess,
    /// Every listener's connection bounds (the admin listener's bound is
    /// [`ADMIN_MAX_CONNECTIONS`]).
    pub conns: ConnLimits,
    /// Kill switch at startup.
    pub kill_switch: bool,
    /// Where the limits keep their buckets.
    pub store: StoreChoice,
    /// With Redis: how long each admission waits for a replica to hold its write.
    pub redis_wait: Option<Duration>,
    /// Where the request log goes.
    pub request_log: Option<PathBuf>,
    /// Envoy's rate limit service, if served.
    pub grpc: Option<GrpcSettings>,
}

/// Where the limits keep their buckets: the config file's `redis` or `redis_cluster` (or the
/// flags `--redis`, `--redis-cluster`), at most one of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreChoice {
    /// The embedded in-memory store (neither was given).
    Memory,
    /// One Redis server, at this URL.
    Redis(String),
    /// A Redis Cluster, by the URLs of its seed nodes (at least one).
    RedisCluster(Vec<String>),
}

impl StoreChoice {
    /// The choice the file's `redis` and `redis_cluster` make: an error when both are given,
    /// or a cluster with no seed node.
    fn from_file(
        redis: Option<String>,
        redis_cluster: Option<Vec<String>>,
    ) -> Result<StoreChoice, String> {
        match (redis, redis_cluster) {
            (Some(_), Some(_)) => Err("give one Redis server (redis) or a Redis Cluster's seed \
                 nodes (redis_cluster), not both"
                .into()),
            (_, Some(seeds)) if seeds.is_empty() => {
                Err("redis_cluster: expected at least one seed node URL".into())
            }
            (_, Some(seeds)) => Ok(StoreChoice::RedisCluster(seeds)),
            (Some(url), None) => Ok(StoreChoice::Redis(url)),
            (None, None) => Ok(StoreChoice::Memory),
        }
    }
}

impl ServeFile {
    /// Whether it names a Redis store (one server or a cluster).
    fn names_redis(&self) -> bool {
        self.redis.is_some() || self.redis_cluster.is_some()
    }
}

fn nets(list: &[String], what: &str) -> Result<Vec<IpNet>, String> {
    list.iter()
        .map(|s| s.parse().map_err(|e| format!("{what}: {e}")))
        .collect()
}

/// The limits: the file's, or the classic pair with its defaults.
fn limits_source(f: &ServeFile) -> Result<LimitsSource, String> {
    if let Some(path) = &f.limits {
        if f.per_key.is_some() || f.per_ip.is_some() {
            return Err(
                "give the limits in the limits file, or as per-key and per-IP limits, not both"
                    .into(),
            );
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        let (limits, domains) = crate::limits::parse_all(&path.display().to_string(), &text)?;
        return Ok(LimitsSource::File {
            path: path.clone(),
            text,
            limits,
            domains,
        });
    }
    let per_key = f.per_key.unwrap_or(LimitFile {
        capacity: 100,
        refill_per_sec: 10,
    });
    let per_ip = f.per_ip.unwrap_or(LimitFile {
        capacity: per_key.capacity.saturating_mul(10),
        refill_per_sec: per_key.refill_per_sec.saturating_mul(10),
    });
    let bucket = |l: LimitFile, what: &str| {
        TokenBucket::per_second(l.capacity, l.refill_per_sec).map_err(|e| format!("{what}: {e}"))
    };
    // The per-key limit first: the per-IP one defaults to ten times it.
    let per_key = bucket(per_key, "per-key limit")?;
    Ok(LimitsSource::Classic {
        per_ip: bucket(per_ip, "per-IP limit")?,
        per_key,
    })
}

/// The admin listener's default address.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:9901";
/// The admin listener's bound on open connections.
pub const ADMIN_MAX_CONNECTIONS: usize = 64;
/// The largest `max_body_bytes`: 1 GiB.
const MAX_BODY_BYTES: u64 = 1 << 30;
/// File descriptors kept for what is not a client connection (the store, the upstream's
/// pool, the limits file, the log).
const FD_RESERVE: u64 = 256;

/// The process's soft limit on open files, from `/proc/self/limits` (`None` when unknown or
/// unlimited).
fn open_files_limit() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = text.lines().find(|l| l.starts_with("Max open files"))?;
    line.trim_start_matches("Max open files")
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The bound on each listener's connections under the open-file limit `nofile` (`None`:
/// unknown or unlimited), with `listeners` listeners besides the admin one, `proxied` when
/// the data listener forwards to an upstream, and `explicit` when the operator gave one (an
/// explicit bound that does not fit is an error; the default is lowered to fit). A proxying
/// data listener counts twice (its clients and their upstream sockets), and the pool's idle
/// sockets are taken off the top.
pub fn connection_budget(
    nofile: Option<u64>,
    listeners: u64,
    proxied: bool,
    explicit: Option<usize>,
) -> Result<usize, String> {
    let units = listeners.max(1) + u64::from(proxied);
    let idle = if proxied {
        crate::proxy::UPSTREAM_IDLE as u64
    } else {
        0
    };
    let room =
        nofile.map(|n| n.saturating_sub(FD_RESERVE + ADMIN_MAX_CONNECTIONS as u64 + idle) / units);
    let what = if proxied {
        format!("{listeners} listeners and the upstream's sockets")
    } else {
        format!("{listeners} listeners")
    };
    Ok(match (explicit, room) {
        (Some(n), _) if !(1..=1_000_000).contains(&n) => {
            return Err(format!(
                "max_connections: {n} is out of range: expected 1 to 1000000"
            ));
        }
        (Some(n), Some(room)) if n as u64 > room => {
            return Err(format!(
                "max_connections: {n} connections on each of {what} do not fit \
                 the open-file limit (ulimit -n), which leaves room for {room}: raise the limit \
                 or lower max_connections"
            ));
        }
        (Some(n), _) => n,
        (None, Some(room)) => ConnLimits::MAX_CONNECTIONS.min(room.max(1) as usize),
        (None, None) => ConnLimits::MAX_CONNECTIONS,
    })
}

/// The connection bounds: each within range, and together within the open-file limit (a
/// bound given explicitly that does not fit is an error; the default is lowered to fit). With
/// an upstream, each data connection may hold a socket to it, and the pool keeps
/// [`crate::proxy::UPSTREAM_IDLE`] more: the budget counts both
/// ([`upstream_sockets`]).
fn conn_limits(f: &ServeFile, listeners: u64) -> Result<ConnLimits, String> {
    let ms = |v: Option<u64>, default: Duration, what: &str| -> Result<Duration, String> {
        match v {
            None => Ok(default),
            Some(ms) if (1..=3_600_000).contains(&ms) => Ok(Duration::from_millis(ms)),
            Some(ms) => Err(format!(
                "{what}: {ms} is out of range: expected 1 to 3600000"
            )),
        }
    };
    let header_read_timeout = ms(
        f.header_read_timeout_ms,
        ConnLimits::HEADER_READ_TIMEOUT,
        "header_read_timeout_ms",
    )?;
    let idle_timeout = ms(
        f.idle_timeout_ms,
        ConnLimits::IDLE_TIMEOUT,
        "idle_timeout_ms",
    )?;
    let max_connections = connection_budget(
        open_files_limit(),
        listeners,
        f.upstream.is_some(),
        f.max_connections,
    )?;
    let max_header_bytes = match f.max_header_bytes {
        None => ConnLimits::MAX_HEADER_BYTES,
        Some(n) if (ConnLimits::MIN_HEADER_BYTES as u64..=1 << 20).contains(&n) => n as usize,
        Some(n) => {
            return Err(format!(
                "max_header_bytes: {n} is out of range: expected {} to 1048576",
                ConnLimits::MIN_HEADER_BYTES
            ));
        }
    };
    Ok(ConnLimits {
        header_read_timeout,
        idle_timeout,
        max_connections,
        max_header_bytes,
    })
}

/// Validates a merged file + flags into settings.
pub fn settings(f: ServeFile) -> Result<ServeSettings, String> {
    let limits = limits_source(&f)?;
    let conns = conn_limits(&f, if f.grpc_listen.is_some() { 2 } else { 1 })?;
    let limits_domains = match &limits {
        LimitsSource::File { domains, .. } => domains.clone(),
        LimitsSource::Classic { .. } => Domains::default(),
    };
    let grpc = grpc_settings(&f, &limits_domains)?;
    let reload_ms = f.reload_interval_ms.unwrap_or(1000);
    if !(10..=3_600_000).contains(&reload_ms) {
        return Err(format!(
            "reload_interval_ms: {reload_ms} is out of range: expected 10 to 3600000"
        ));
    }
    let timeout_ms = f.timeout_ms.unwrap_or(50);
    if !(1..=60_000).contains(&timeout_ms) {
        return Err(format!(
            "timeout_ms: {timeout_ms} is out of range: expected 1 to 60000"
        ));
    }
    let redis_wait = match f.redis_wait_ms {
        None => None,
        Some(_) if !f.names_redis() => {
            return Err("redis_wait_ms: needs a Redis store (redis or redis_cluster)".into());
        }
        // The request's deadline covers the script and the wait: half of it for the wait
        // leaves the other half for the script and both round trips.
        Some(ms) if ms == 0 || ms > timeout_ms / 2 => {
            return Err(format!(
                "redis_wait_ms: {ms} is out of range: expected 1 to half of timeout_ms ({}), \
                 so an admission whose wait runs out still answers within its deadline",
                timeout_ms / 2
            ));
        }
        Some(ms) => Some(Duration::from_millis(ms)),
    };
    let ipv6_prefix = f
        .ipv6_prefix
        .unwrap_or(ratelab_gateway::ip::DEFAULT_IPV6_PREFIX);
    if !(1..=128).contains(&ipv6_prefix) {
        return Err(format!(
            "ipv6_prefix: {ipv6_prefix} is out of range: expected 1 to 128"
        ));
    }
    let breaker = f
        .breaker
        .map_or(BreakerConfig::default(), |b| BreakerConfig {
            failures_to_open: b.failures_to_open.max(1),
            cooldown: Nanos::from_millis(b.cooldown_ms),
        });
    Ok(ServeSettings {
        listen: f
            .listen
            .unwrap_or_else(|| "127.0.0.1:8080".parse().expect("literal")),
        limits,
        reload_interval: Duration::from_millis(reload_ms),
        shadow: f.shadow.unwrap_or(false),
        workers: match f.workers {
            Some(n) if !(1..=1024).contains(&n) => {
                return Err(format!("workers: {n} is out of range: expected 1 to 1024"));
            }
            w => w,
        },
        upstream: upstream(&f, conns.header_read_timeout)?
            .map(|u| u.with_max_sockets(upstream_sockets(conns.max_connections))),
        gateway: GatewayConfig {
            timeout: Duration::from_millis(timeout_ms),
            breaker,
            trusted_proxies: nets(&f.trusted_proxies.unwrap_or_default(), "trusted proxy")?,
            client_ip_header: match f.client_ip_header.as_deref() {
                None => ClientIpHeader::default(),
                Some(h) => h.parse().map_err(|e| format!("client_ip_header: {e}"))?,
            },
            fail_closed_routes: {
                let routes = f.fail_closed_routes.unwrap_or_default();
                for r in &routes {
                    crate::limits::check_route(r).map_err(|e| format!("fail_closed_route: {e}"))?;
                }
                routes
            },
            fail_open: f.fail_open.unwrap_or(true),
            ipv6_prefix,
            name: match f.name {
                Some(n) if n.is_empty() || n.len() > 64 || n.chars().any(char::is_control) => {
                    return Err(format!(
                        "name: {n:?}: expected 1 to 64 bytes with no control characters"
                    ));
                }
                Some(n) => n,
                None => "gateway".into(),
            },
            path: match f.path.as_deref() {
                None | Some("atomic") => ratelab_store::Path::Atomic,
                Some("naive") => ratelab_store::Path::Naive,
                Some(other) => {
                    return Err(format!("path: {other:?}: expected \"atomic\" or \"naive\""));
                }
            },
            ratelimit_fields: match f.ratelimit_fields.as_deref() {
                None => FieldsDraft::default(),
                Some(d) => FieldsDraft::parse(d).map_err(|e| format!("ratelimit_fields: {e}"))?,
            },
            denial_cache: match f.denial_cache.unwrap_or(0) {
                n if n > 0 && f.path.as_deref() == Some("naive") => {
                    return Err(
                        "denial_cache: the denial cache needs the atomic path (on the naive path a lost update can move a bucket's state earlier, so a store denial holds for no time at all)"
                            .into(),
                    );
                }
                n if n <= 10_000_000 => n,
                n => {
                    return Err(format!(
                        "denial_cache: {n} is out of range: expected 0 to 10000000"
                    ));
                }
            },
            ..GatewayConfig::default()
        },
        admin_listen: f
            .admin_listen
            .unwrap_or_else(|| DEFAULT_ADMIN_LISTEN.parse().expect("literal")),
        admin: admin_access(
            f.admin.as_deref(),
            f.admin_token_file.as_deref(),
            f.admin_hosts.as_deref(),
        )?,
        conns,
        kill_switch: f.kill_switch.unwrap_or(false),
        grpc,
        store: StoreChoice::from_file(f.redis, f.redis_cluster)?,
        redis_wait,
        request_log: f.request_log,
    })
}

/// Where admitted requests go, if anywhere: the upstream, its timeout and its body bounds
/// (a stalled body waits the header-read timeout, `gap`).
/// The sockets a proxy may open to its upstream: one for each data connection's request in
/// flight, and the pool's idle ones.
pub fn upstream_sockets(max_connections: usize) -> usize {
    max_connections + crate::proxy::UPSTREAM_IDLE
}

fn upstream(f: &ServeFile, gap: Duration) -> Result<Option<crate::proxy::Upstream>, String> {
    Ok(match &f.upstream {
        None => None,
        Some(url) => {
            let ms = f.upstream_timeout_ms.unwrap_or(30_000);
            if !(1..=600_000).contains(&ms) {
                return Err(format!(
                    "upstream_timeout_ms: {ms} is out of range: expected 1 to 600000"
                ));
            }
            let max_bytes = f
                .max_body_bytes
                .unwrap_or(crate::proxy::DEFAULT_MAX_BODY_BYTES);
            if !(1..=MAX_BODY_BYTES).contains(&max_bytes) {
                return Err(format!(
                    "max_body_bytes: {max_bytes} is out of range: expected 1 to {MAX_BODY_BYTES}"
                ));
            }
            Some(
                crate::proxy::Upstream::parse(url, Duration::from_millis(ms))?
                    .with_body_limits(crate::body::BodyLimits { max_bytes, gap }),
            )
        }
    })
}

/// Who may use the admin listener: the addresses (`from`; default loopback), and the token
/// in `token_file` when one is configured.
fn admin_access(
    from: Option<&[String]>,
    token_file: Option<&Path>,
    hosts: Option<&[String]>,
) -> Result<AdminAccess, String> {
    let hosts = hosts.unwrap_or_default();
    if let Some(h) = hosts.iter().find(|h| {
        h.is_empty()
            || h.len() > 253
            || !h
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.')
    }) {
        return Err(format!(
            "admin host {h:?}: expected a DNS name (letters, digits, - and .), without a port"
        ));
    }
    Ok(AdminAccess {
        hosts: hosts.iter().map(|h| h.to_ascii_lowercase()).collect(),
        // The listener's port is known once it is bound ([`crate::serve`]).
        port: None,
        from: match from {
            Some(list) => nets(list, "admin address")?,
            None => AdminAccess::default().from,
        },
        token: match token_file {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    format!("admin token file {}: cannot read: {e}", path.display())
                })?;
                Some(
                    AdminToken::parse(&text)
                        .map_err(|e| format!("admin token file {}: {e}", path.display()))?,
                )
            }
        },
    })
}

/// The rate limit service's settings: its address, failure mode and YAML domains, which
/// must not repeat a domain of the limits file (`file_domains`) or of each other.
fn grpc_settings(f: &ServeFile, file_domains: &Domains) -> Result<Option<GrpcSettings>, String> {
    let fail_closed = match f.grpc_failure_mode.as_deref() {
        None | Some("ok") => false,
        Some("unavailable") => true,
        Some(other) => {
            return Err(format!(
                "grpc_failure_mode: {other:?}: expected \"ok\" or \"unavailable\""
            ));
        }
    };
    let files = f.rls_config.as_deref().unwrap_or_default();
    let Some(listen) = f.grpc_listen else {
        if !files.is_empty() || !file_domains.is_empty() || f.grpc_failure_mode.is_some() {
            return Err(
                "rate limit service domains or settings were given without grpc_listen \
                 (--grpc-listen ADDR) to serve them"
                    .into(),
            );
        }
        return Ok(None);
    };
    // Every domain served so far, the limits file's first: a YAML file's domain must be new.
    let mut served = file_domains.clone();
    let mut yaml_domains = Domains::default();
    for path in files {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot read: {e}", path.display()))?;
        let file = path.display().to_string();
        let d = crate::rls::config::parse_yaml(&file, &text)?;
        if f.names_redis() {
            crate::rls::config::check_redis_yaml(&file, &text, &d)?;
        }
        let twice = |r: Repeated| format!("{}: {r}", path.display());
        served.merge([d.clone()]).map_err(twice)?;
        yaml_domains.merge([d]).map_err(twice)?;
    }
    Ok(Some(GrpcSettings {
        listen,
        fail_closed,
        yaml_domains,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_store_is_memory_one_redis_or_a_cluster_never_both() {
        let url = || Some("redis://127.0.0.1:6379".to_owned());
        let seeds = |n: usize| Some(vec!["redis://127.0.0.1:7000".to_owned(); n]);
        assert_eq!(StoreChoice::from_file(None, None), Ok(StoreChoice::Memory));
        assert_eq!(
            StoreChoice::from_file(url(), None),
            Ok(StoreChoice::Redis(url().unwrap()))
        );
        assert_eq!(
            StoreChoice::from_file(None, seeds(2)),
            Ok(StoreChoice::RedisCluster(seeds(2).unwrap()))
        );
        assert_eq!(
            StoreChoice::from_file(url(), seeds(1)),
            Err(
                "give one Redis server (redis) or a Redis Cluster's seed nodes (redis_cluster), \
                 not both"
                    .into()
            )
        );
        assert_eq!(
            StoreChoice::from_file(None, seeds(0)),
            Err("redis_cluster: expected at least one seed node URL".into())
        );
    }
}
