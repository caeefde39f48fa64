//! Running the server: the gateway over the embedded in-memory store or Redis, behind a real
//! HTTP server, until Ctrl-C or SIGTERM; with a limits file, reloaded live (see [`reload`]).

use crate::config::{LimitsSource, ServeSettings};
use crate::limits::FileLimit;
use crate::proxy::Proxy;
use crate::reload;
use ratelab_core::{Nanos, Policy, TokenBucket};
use ratelab_gateway::admin::admin_app;
use ratelab_gateway::conns::{ConnLimits, Connections};
use ratelab_gateway::front::{FrontEnd, Writes, serve};
use ratelab_gateway::http::{TokioEnv, answer_ok, prometheus};
use ratelab_gateway::limits::{KeyBy, Limit, LimitSet, LimitSpec, PER_IP, PER_KEY};
use ratelab_gateway::reqlog::{FileSink, RequestLogLayer};
use ratelab_gateway::{Env, Gateway, GatewayConfig};
use ratelab_store::redis_store::{RedisOptions, RedisStore};
use ratelab_store::{MemoryStore, SharedClient, StoreClient};
use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

type Clock = fn() -> Nanos;
/// An in-memory limit's client: its key space in the store every limit shares.
pub type Local = SharedClient<Policy, Clock>;

fn wall_clock() -> Nanos {
    TokioEnv.now()
}

/// Where a server's limits keep their buckets: each limit gets a client of its own.
pub trait Stores: Clone + Send + Sync + 'static {
    /// A limit's store client.
    type Client: StoreClient + Clone + Send + Sync + 'static;
    /// A client for a limit running `policy` on the keys under `prefix`.
    fn client(
        &self,
        prefix: &str,
        policy: Policy,
    ) -> impl Future<Output = Result<Self::Client, String>> + Send;
    /// Whether `client` runs exactly `policy` (so a reloaded limit can keep its buckets).
    fn runs(client: &Self::Client, policy: &Policy) -> bool;

    /// When admissions wait for a replica: how many waits so far came back with none (the
    /// admission stands, but a failover may lose it). `None` when nothing waits.
    fn waits_short(&self) -> Option<u64> {
        None
    }

    /// Checks that this store can run every limit and every domain's limit of a limits file
    /// (`file`, `text`), with errors located in the file. The default accepts everything.
    fn check(
        &self,
        file: &str,
        text: &str,
        limits: &[FileLimit],
        domains: &[crate::rls::config::Domain],
    ) -> Result<(), String> {
        let _ = (file, text, limits, domains);
        Ok(())
    }
}

/// The embedded in-memory store, shared by every limit (each in its own key space), so one
/// request's limits are decided in one all-or-nothing step.
#[derive(Clone, Debug)]
pub struct Memory {
    store: Arc<MemoryStore<Policy>>,
}

impl Memory {
    /// A new, empty store.
    pub fn new() -> Memory {
        // The store's own policy is never used: every limit's client brings its own.
        let unused = Policy::TokenBucket(TokenBucket::per_second(1, 1).expect("a valid bucket"));
        Memory {
            store: Arc::new(MemoryStore::new(unused)),
        }
    }
}

impl Default for Memory {
    fn default() -> Self {
        Memory::new()
    }
}

impl Stores for Memory {
    type Client = Local;

    async fn client(&self, prefix: &str, policy: Policy) -> Result<Local, String> {
        SharedClient::new(self.store.clone(), policy, prefix, wall_clock as Clock)
            .map_err(|e| format!("key prefix {prefix:?}: {e}"))
    }

    fn runs(client: &Local, policy: &Policy) -> bool {
        client.algorithm() == policy
    }
}

/// Redis: one connection shared by every limit (each under its own key prefix), so one
/// request's limits are decided in one script call.
#[derive(Clone, Debug)]
pub struct Redis {
    conn: RedisStore,
    /// Whether admissions wait for a replica.
    waits: bool,
}

impl Redis {
    /// Connects to `url` (one server, or a cluster's `redis+cluster://` URL), with `timeout`
    /// for each call.
    pub async fn connect(url: &str, timeout: Duration) -> Result<Redis, String> {
        let (bucket, options) = Redis::setup(timeout)?;
        // Every decision goes through the gateway's pipeline, under the request's deadline.
        let conn = RedisStore::connect(url, bucket, options)
            .await
            .map_err(|e| e.to_string())?
            .bounded_by_caller();
        Ok(Redis { conn, waits: false })
    }

    /// Connects to the Redis Cluster of `seeds`, with `timeout` for each call. A request's
    /// limits whose keys are in different slots are decided slot by slot, refunded where
    /// admitted when any slot denies (`ratelab_store::redis_store`).
    pub async fn connect_cluster(seeds: &[String], timeout: Duration) -> Result<Redis, String> {
        let (bucket, options) = Redis::setup(timeout)?;
        let conn = RedisStore::connect_cluster(seeds, bucket, options)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Redis { conn, waits: false })
    }

    /// The same store, answering each admission only once a replica holds its write, or
    /// after `wait` ([`RedisStore::with_wait`]).
    pub fn with_wait(self, wait: Option<Duration>) -> Redis {
        match wait {
            Some(w) => Redis {
                conn: self.conn.with_wait(1, w),
                waits: true,
            },
            None => self,
        }
    }

    /// The shared connection's own bucket (never used: every limit's sibling brings its own)
    /// and options.
    fn setup(timeout: Duration) -> Result<(TokenBucket, RedisOptions), String> {
        let options = RedisOptions {
            prefix: "ratelab:".into(),
            timeout,
        };
        Ok((
            TokenBucket::per_second(1, 1).map_err(|e| e.to_string())?,
            options,
        ))
    }
}

impl Stores for Redis {
    type Client = RedisStore;

    async fn client(&self, prefix: &str, policy: Policy) -> Result<RedisStore, String> {
        let Policy::TokenBucket(bucket) = policy else {
            return Err(
                "the Redis store runs token-bucket limits only (fixed and sliding windows \
                 need the in-memory store)"
                    .into(),
            );
        };
        self.conn.sibling(bucket, prefix).map_err(|e| e.to_string())
    }

    fn runs(client: &RedisStore, policy: &Policy) -> bool {
        Policy::TokenBucket(*client.algorithm()) == *policy
    }

    fn waits_short(&self) -> Option<u64> {
        self.waits.then(|| self.conn.waits_short())
    }

    fn check(
        &self,
        file: &str,
        text: &str,
        limits: &[FileLimit],
        domains: &[crate::rls::config::Domain],
    ) -> Result<(), String> {
        crate::limits::check_redis(file, text, limits)?;
        crate::rls::config::check_redis(domains)
            .map_err(|(path, msg)| crate::limits::located(file, text, &path, msg).to_string())
    }
}

/// A limit over `client`, with the gateway's breaker and denial-cache settings.
pub(crate) fn limit<C>(config: &GatewayConfig, spec: LimitSpec, client: C) -> Arc<Limit<C>> {
    let limit = Limit::new(spec, client, config.breaker);
    Arc::new(limit.with_denial_cache(config.denial_cache))
}

/// The classic pair when no limits file is given: per-IP, then per-key (`x-api-key`).
async fn classic<S: Stores>(
    stores: &S,
    per_ip: TokenBucket,
    per_key: TokenBucket,
    config: &GatewayConfig,
) -> Result<LimitSet<S::Client>, String> {
    let mut set = Vec::new();
    for (name, key_by, bucket, prefix) in [
        (PER_IP, KeyBy::ClientIp, per_ip, "ratelab:ip:"),
        (PER_KEY, KeyBy::ApiKey, per_key, "ratelab:key:"),
    ] {
        let client = stores.client(prefix, Policy::TokenBucket(bucket)).await?;
        let spec = LimitSpec::new(
            ratelab_core::headers::PolicyName::new(name).map_err(|e| e.to_string())?,
            key_by,
        );
        set.push(limit(config, spec, client));
    }
    Ok(set)
}

/// The set for a limits file's `limits`. A limit of `old` with the same name and algorithm
/// keeps its store (its buckets), and its breaker too when nothing else changed.
pub async fn file_set<S: Stores>(
    stores: &S,
    old: &LimitSet<S::Client>,
    limits: Vec<FileLimit>,
    config: &GatewayConfig,
) -> Result<LimitSet<S::Client>, String> {
    let mut set = Vec::with_capacity(limits.len());
    for l in limits {
        let name = l.spec.name.as_str().to_owned();
        let kept = old
            .iter()
            .find(|o| o.name() == name && S::runs(o.client(), &l.policy));
        let limit = match kept {
            Some(o) if *o.spec() == l.spec => o.clone(),
            Some(o) => limit(config, l.spec, o.client().clone()),
            None => {
                // The policy's fingerprint in the key space: a limit whose parameters change
                // starts new buckets (an old state read under new parameters would be wrong),
                // and the old ones expire by their TTL.
                let prefix = format!("ratelab:limit:{name}:{:08x}:", fingerprint(&l.policy));
                let client = stores
                    .client(&prefix, l.policy)
                    .await
                    .map_err(|e| format!("limit {name}: {e}"))?;
                limit(config, l.spec, client)
            }
        };
        set.push(limit);
    }
    Ok(set)
}

/// A stable 32-bit fingerprint of a policy's algorithm and parameters (FNV-1a of its
/// description): the same in every process and release that describes it the same way.
pub(crate) fn fingerprint(policy: &Policy) -> u32 {
    fingerprint_text(&format!("{policy:?}"))
}

/// FNV-1a of `text`, folded to 32 bits: stable across processes and releases.
pub(crate) fn fingerprint_text(text: &str) -> u32 {
    let h = text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    (h ^ (h >> 32)) as u32
}

/// The gateway the settings describe, over `stores`.
pub async fn gateway<S: Stores>(
    s: &ServeSettings,
    stores: &S,
) -> Result<Arc<Gateway<S::Client, TokioEnv>>, String> {
    let config = &s.gateway;
    let set = match &s.limits {
        LimitsSource::Classic { per_ip, per_key } => {
            classic(stores, *per_ip, *per_key, config).await?
        }
        LimitsSource::File {
            path,
            text,
            limits,
            domains,
        } => {
            stores.check(&path.display().to_string(), text, limits, domains)?;
            file_set(stores, &Vec::new(), limits.clone(), config).await?
        }
    };
    Ok(Arc::new(Gateway::with_limits(
        s.gateway.clone(),
        set,
        TokioEnv,
    )))
}

/// How often the metrics recorder is tidied and the store's own counts are copied into it.
const METRICS_UPKEEP: Duration = Duration::from_secs(1);

/// Builds the gateway, starts the reloader, then announces the address (so a client that
/// read the banner finds the server whole, SIGHUP handler included) and serves.
async fn serve_app<S: Stores>(
    listener: tokio::net::TcpListener,
    admin_listener: tokio::net::TcpListener,
    stores: S,
    s: &ServeSettings,
) -> Result<(), String> {
    let gw = gateway(s, &stores).await?;
    // The metrics recorder first: switches and reload counters are set after it, so their
    // series show.
    prometheus();
    // The recorder's upkeep runs on a timer, as the exporter's own HTTP listener would run it
    // (the store-latency histogram, counted on every request, is kept apart:
    // ratelab_gateway::latency). Counts kept by the store itself are copied on the same
    // timer.
    if stores.waits_short().is_some() {
        metrics::describe_counter!(
            "ratelab_redis_waits_short_total",
            "Admissions whose wait for a replica came back with none (--redis-wait): they \
             stand, but a failover may lose them."
        );
    }
    let counted = stores.clone();
    tokio::spawn(async move {
        let metrics = prometheus();
        let mut every = tokio::time::interval(METRICS_UPKEEP);
        loop {
            every.tick().await;
            metrics.run_upkeep();
            if let Some(n) = counted.waits_short() {
                metrics::counter!("ratelab_redis_waits_short_total").absolute(n);
            }
        }
    });
    gw.set_kill_switch(s.kill_switch);
    gw.set_shadow(s.shadow);
    let rls = match &s.grpc {
        Some(g) => Some(rls_service(&gw, &stores, s, g).await?),
        None => None,
    };
    if let LimitsSource::File { path, text, .. } = &s.limits {
        let config = s.gateway.clone();
        reload::start(
            gw.clone(),
            stores,
            path.clone(),
            text,
            s.reload_interval,
            config,
            rls.as_ref()
                .map(|(tables, _, yaml)| (tables.clone(), yaml.clone())),
        );
    }
    // One shutdown for both servers: Ctrl-C or SIGTERM stops them together.
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown().await;
        let _ = stop.send(true);
    });
    let until = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    let grpc = match (rls, &s.grpc) {
        (Some((_, service, _)), Some(g)) => {
            let listener = tokio::net::TcpListener::bind(g.listen)
                .await
                .map_err(|e| format!("cannot listen on {} (gRPC): {e}", g.listen))?;
            let addr = listener.local_addr().map_err(|e| e.to_string())?;
            let incoming = crate::listeners::grpc_incoming(listener, s.conns);
            // A call has the header-read timeout to arrive whole and be answered (its
            // message is small; the store's own deadline is far shorter); keepalive pings
            // find a peer that went away, and the streams of one connection are bounded.
            let server = tonic::transport::Server::builder()
                .timeout(s.conns.header_read_timeout)
                .concurrency_limit_per_connection(GRPC_STREAMS_PER_CONNECTION)
                .max_concurrent_streams(Some(GRPC_STREAMS_PER_CONNECTION as u32))
                .http2_keepalive_interval(Some(s.conns.idle_timeout / 2))
                .http2_keepalive_timeout(Some(s.conns.header_read_timeout))
                .add_service(
                    crate::rls::proto::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer::new(service),
                )
                .serve_with_incoming_shutdown(incoming, until(stopped.clone()));
            Some((addr, tokio::spawn(server)))
        }
        _ => None,
    };
    let admin_addr = admin_listener.local_addr().map_err(|e| e.to_string())?;
    banner(&listener, admin_addr, s, grpc.as_ref().map(|(a, _)| *a))?;
    let admin_limits = ConnLimits {
        max_connections: crate::config::ADMIN_MAX_CONNECTIONS,
        ..s.conns
    };
    let admin = tokio::spawn(crate::listeners::serve_admin(
        admin_listener,
        admin_app(gw.clone(), s.admin.clone()),
        admin_limits,
        until(stopped.clone()),
    ));
    let (conns, stop) = (Connections::new("data", s.conns), until(stopped));
    match &s.upstream {
        Some(up) => {
            let proxy = Proxy::new(up.clone(), s.gateway.trusted_proxies.clone()).service();
            let front = FrontEnd::new(gw, None, proxy).with_peer_extension();
            // The upstream's bodies are streamed through as they come, uncopied (the
            // limiter's own answers on this connection are written the same way).
            let writes = Writes::Vectored;
            serve(listener, writes, conns, |peer| front.connection(peer), stop).await;
        }
        None => {
            let front = FrontEnd::new(gw, None, answer_ok());
            serve(
                listener,
                Writes::Flat,
                conns,
                |peer| front.connection(peer),
                stop,
            )
            .await;
        }
    }
    let _ = admin.await;
    if let Some((_, task)) = grpc {
        match task.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("gRPC server error: {e}")),
            Err(e) => return Err(format!("gRPC server stopped: {e}")),
        }
    }
    Ok(())
}

/// The streams one gRPC connection may carry at once.
const GRPC_STREAMS_PER_CONNECTION: usize = 1024;

/// The rate limit service's tables, its service, and the YAML domains (kept across reloads
/// of the limits file).
type RlsParts<S> = (
    Arc<arc_swap::ArcSwap<crate::rls::Tables<<S as Stores>::Client>>>,
    crate::rls::Rls<S>,
    Vec<crate::rls::config::Domain>,
);

/// Builds the rate limit service over the gateway's pipeline and store.
async fn rls_service<S: Stores>(
    gw: &Arc<Gateway<S::Client, TokioEnv>>,
    stores: &S,
    s: &ServeSettings,
    g: &crate::config::GrpcSettings,
) -> Result<RlsParts<S>, String> {
    let mut domains = match &s.limits {
        LimitsSource::File { domains, .. } => domains.clone(),
        LimitsSource::Classic { .. } => Vec::new(),
    };
    domains.extend(g.yaml_domains.iter().cloned());
    let tables = crate::rls::build(stores, &domains, &s.gateway).await?;
    gw.export_zeros_for(&tables.limits());
    let tables = Arc::new(arc_swap::ArcSwap::from_pointee(tables));
    let service = crate::rls::Rls::new(
        gw.clone(),
        tables.clone(),
        stores.clone(),
        s.gateway.clone(),
        g.fail_closed,
    );
    Ok((tables, service, g.yaml_domains.clone()))
}

/// Ctrl-C, or the SIGTERM a service manager sends: stop accepting, finish what is in flight.
async fn shutdown() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
}

/// The startup banner's lines about the limits.
fn describe_limits(s: &ServeSettings) -> String {
    match &s.limits {
        LimitsSource::Classic { per_ip, per_key } => format!(
            "  per-key (x-api-key): B = {}, R = {}/s\n  per-IP: B = {}, R = {}/s",
            per_key.capacity(),
            per_key.refill_amount(),
            per_ip.capacity(),
            per_ip.refill_amount(),
        ),
        LimitsSource::File {
            path,
            limits,
            domains,
            ..
        } => format!(
            "  limits: {} from {} (reloaded on change and SIGHUP): {}{}",
            limits.len(),
            path.display(),
            limits
                .iter()
                .map(|l| l.spec.name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            if domains.is_empty() {
                String::new()
            } else {
                format!(
                    "\n  rate limit service domains from it: {}",
                    domains
                        .iter()
                        .map(|d| d.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
        ),
    }
}

/// The startup banner; its first line ends with the address, its last is the request log's.
fn banner(
    listener: &tokio::net::TcpListener,
    admin: SocketAddr,
    s: &ServeSettings,
    grpc: Option<SocketAddr>,
) -> Result<(), String> {
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let grpc = grpc.map_or(String::new(), |g| {
        let fail = match s.grpc.as_ref().is_some_and(|g| g.fail_closed) {
            true => "UNAVAILABLE",
            false => "OK (fail open)",
        };
        format!("\n  rate limit service (Envoy RLS v3, gRPC): {g}; on store failure: {fail}")
    });
    // A closed stdout (`ratelab-server | head -1`) must not take the server down.
    let _ = writeln!(
        std::io::stdout(),
        "ratelab-server: listening on http://{addr}\n{}\n  admitted requests: {}\n  store: {}; timeout {} ms; fail {}; RateLimit fields {}\n  connections: header read {} ms, idle {} ms, at most {} per listener (the admin listener {})\n  admin: http://{admin} (/metrics, /admin/kill-switch, /admin/shadow; changes from {}{}){grpc}\n  request log: {}",
        describe_limits(s),
        s.upstream
            .as_ref()
            .map_or("answered 200".into(), |u| format!(
                "forwarded to {}",
                u.url()
            )),
        match (&s.redis, s.redis_cluster.first()) {
            (Some(url), _) => url.clone(),
            (None, Some(seed)) => format!("Redis Cluster (seed {seed})"),
            (None, None) => "in-memory".into(),
        } + &s.redis_wait.map_or(String::new(), |w| format!(
            ", each admission waits for a replica up to {} ms",
            w.as_millis()
        )),
        s.gateway.timeout.as_millis(),
        if s.gateway.fail_open {
            "open"
        } else {
            "closed"
        },
        s.gateway.ratelimit_fields.name(),
        s.conns.header_read_timeout.as_millis(),
        s.conns.idle_timeout.as_millis(),
        s.conns.max_connections,
        crate::config::ADMIN_MAX_CONNECTIONS,
        s.admin
            .from
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", "),
        if s.admin.token.is_some() {
            ", bearer token required"
        } else {
            ""
        },
        s.request_log
            .as_ref()
            .map_or("off".into(), |p| p.display().to_string()),
    );
    Ok(())
}

/// The runtime for `workers` worker threads (the default: one per core). One worker is
/// tokio's current-thread runtime, except on a Redis that is reached through redis-rs
/// (`redis_rs`: a cluster, a TLS or Unix-socket URL, or waiting for replicas), where it is a
/// one-worker multi-thread runtime. On the current-thread runtime a task woken by the
/// running one waits behind the tasks already ready, so the lane's calls of one scheduler
/// turn leave in one write; the multi-thread runtime runs it next, so redis-rs's connection
/// task writes the first call at once (docs/PERFORMANCE.md measures both).
pub fn runtime_for(workers: Option<usize>, redis_rs: bool) -> tokio::runtime::Builder {
    match workers {
        Some(1) if !redis_rs => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut rt = tokio::runtime::Builder::new_multi_thread();
            rt.worker_threads(n);
            rt
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    }
}

/// Serves until Ctrl-C or SIGTERM.
pub fn run(s: ServeSettings) -> Result<(), String> {
    // Redis through redis-rs rather than the lane (ratelab_store::redis_lane).
    let redis_rs = match &s.redis {
        Some(url) => !ratelab_store::redis_store::uses_lane(url, s.redis_wait.is_some()),
        None => !s.redis_cluster.is_empty(),
    };
    let mut rt = runtime_for(s.workers, redis_rs);
    let rt = rt
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    if let Some(path) = &s.request_log {
        use tracing_subscriber::layer::SubscriberExt as _;
        let sink = FileSink::create(path)
            .map_err(|e| format!("request log {}: cannot open: {e}", path.display()))?;
        let subscriber = tracing_subscriber::registry().with(RequestLogLayer::new(sink));
        tracing::subscriber::set_global_default(subscriber)
            .map_err(|e| format!("request log: {e}"))?;
    }
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(s.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", s.listen))?;
        let admin = tokio::net::TcpListener::bind(s.admin_listen)
            .await
            .map_err(|e| format!("cannot listen on {} (admin): {e}", s.admin_listen))?;
        match &s.redis {
            Some(url) => {
                let redis = Redis::connect(url, s.gateway.timeout)
                    .await?
                    .with_wait(s.redis_wait);
                serve_app(listener, admin, redis, &s).await
            }
            None if !s.redis_cluster.is_empty() => {
                let redis = Redis::connect_cluster(&s.redis_cluster, s.gateway.timeout)
                    .await?
                    .with_wait(s.redis_wait);
                serve_app(listener, admin, redis, &s).await
            }
            None => serve_app(listener, admin, Memory::new(), &s).await,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::runtime_for;
    use tokio::runtime::RuntimeFlavor;

    #[test]
    fn one_worker_is_the_current_thread_runtime_but_over_redis_rs() {
        let built = |workers, redis_rs| runtime_for(workers, redis_rs).build().expect("a runtime");
        assert_eq!(
            built(Some(1), false).handle().runtime_flavor(),
            RuntimeFlavor::CurrentThread
        );
        let redis_rs = built(Some(1), true);
        assert_eq!(
            redis_rs.handle().runtime_flavor(),
            RuntimeFlavor::MultiThread
        );
        assert_eq!(redis_rs.metrics().num_workers(), 1);
        let three = built(Some(3), false);
        assert_eq!(three.handle().runtime_flavor(), RuntimeFlavor::MultiThread);
        assert_eq!(three.metrics().num_workers(), 3);
        assert_eq!(
            built(None, false).handle().runtime_flavor(),
            RuntimeFlavor::MultiThread
        );
    }
}
