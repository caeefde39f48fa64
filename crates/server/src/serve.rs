//! Running the server: the gateway over the embedded in-memory store or Redis, behind a real
//! HTTP server, until Ctrl-C or SIGTERM; with a limits file, reloaded live (see [`reload`]).

use crate::config::{LimitsSource, ServeSettings, StoreChoice};
use crate::limit_set::gateway;
use crate::proxy::Proxy;
use crate::reload;
use crate::rls::config::Domains;
use crate::stores::{Memory, Redis, Stores};
use ratelab_gateway::Gateway;
use ratelab_gateway::admin::admin_app;
use ratelab_gateway::conns::{ConnLimits, Connections};
use ratelab_gateway::front::{FrontEnd, Writes, serve};
use ratelab_gateway::http::{TokioEnv, answer_ok, prometheus};
use ratelab_gateway::reqlog::{FileSink, RequestLogLayer};
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

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
            // find a peer that went away; the streams of one connection, each stream's
            // header list and the body bytes a connection may have in flight are bounded,
            // so one connection holds at most GRPC_CONNECTION_BYTES of requests.
            let server = tonic::transport::Server::builder()
                .timeout(s.conns.header_read_timeout)
                .concurrency_limit_per_connection(GRPC_STREAMS_PER_CONNECTION)
                .max_concurrent_streams(Some(GRPC_STREAMS_PER_CONNECTION as u32))
                .http2_max_header_list_size(Some(GRPC_HEADER_LIST_BYTES))
                .initial_stream_window_size(Some(GRPC_STREAM_WINDOW_BYTES))
                .initial_connection_window_size(Some(GRPC_CONNECTION_WINDOW_BYTES))
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
        admin_app(
            gw.clone(),
            ratelab_gateway::admin::AdminAccess {
                port: Some(admin_addr.port()),
                ..s.admin.clone()
            },
        ),
        admin_limits,
        until(stopped.clone()),
    ));
    let (conns, stop) = (Connections::new("data", s.conns), until(stopped));
    match &s.upstream {
        Some(up) => {
            let proxy = Proxy::new(
                up.clone(),
                s.gateway.trusted_proxies.clone(),
                s.gateway.client_ip_header,
            )
            .service();
            let front = FrontEnd::new(gw, None, proxy)
                .with_peer_extension()
                .with_max_header_bytes(s.conns.max_header_bytes);
            // The upstream's bodies are streamed through as they come, uncopied (the
            // limiter's own answers on this connection are written the same way).
            let writes = Writes::Vectored;
            serve(
                listener,
                writes,
                conns,
                |peer, phase| front.connection(peer, phase),
                stop,
            )
            .await;
        }
        None => {
            let front = FrontEnd::new(gw, None, answer_ok())
                .with_max_header_bytes(s.conns.max_header_bytes);
            serve(
                listener,
                Writes::Flat,
                conns,
                |peer, phase| front.connection(peer, phase),
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

/// The streams one gRPC connection may carry at once: 100, Envoy's recommendation for an
/// edge listener (nginx's `http2_max_concurrent_streams` is 128).
pub const GRPC_STREAMS_PER_CONNECTION: usize = 100;
/// The largest header list one gRPC call may send (HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`):
/// 16 KiB. A rate limit call's metadata is a few hundred bytes.
pub const GRPC_HEADER_LIST_BYTES: u32 = 16 << 10;
/// The body bytes one gRPC stream may have unread (its flow-control window): 64 KiB, the
/// HTTP/2 default, far above a rate limit request.
pub const GRPC_STREAM_WINDOW_BYTES: u32 = 64 << 10;
/// The body bytes one gRPC connection may have unread across its streams: 1 MiB.
pub const GRPC_CONNECTION_WINDOW_BYTES: u32 = 1 << 20;
/// How many times its size a header list may cost while its stream is open: the frames as
/// read, their HPACK decoding, the request's header map, and the allocator's rounding.
/// Measured about 4.1 (a 15 KiB header list, about 61 KiB: `crates/server/tests/suite/bounds.rs`);
/// bounded with room.
pub const GRPC_HEADER_LIST_COPIES: u64 = 5;
/// What one gRPC connection's requests may hold at once: every stream's header list, as
/// held, and the connection's flow-control window of body bytes (8.8 MiB).
pub const GRPC_CONNECTION_BYTES: u64 =
    GRPC_STREAMS_PER_CONNECTION as u64 * GRPC_HEADER_LIST_BYTES as u64 * GRPC_HEADER_LIST_COPIES
        + GRPC_CONNECTION_WINDOW_BYTES as u64;

/// The rate limit service's tables, its service, and the YAML domains (kept across reloads
/// of the limits file).
type RlsParts<S> = (
    Arc<arc_swap::ArcSwap<crate::rls::Tables<<S as Stores>::Client>>>,
    crate::rls::Rls<S>,
    Domains,
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
        LimitsSource::Classic { .. } => Domains::default(),
    };
    // The settings found no domain twice; merged, the check holds whatever built them.
    domains
        .merge(g.yaml_domains.iter().cloned())
        .map_err(|r| r.to_string())?;
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
/// (Public for the benchmarks' anchors, which stop alike.)
pub async fn shutdown() {
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
        "ratelab-server: listening on http://{addr}\n{}\n  admitted requests: {}\n  store: {}; timeout {} ms; fail {}; RateLimit fields {}\n  connections: header read {} ms, idle {} ms, heads up to {} bytes, at most {} per listener (the admin listener {})\n  client address: {}\n  admin: http://{admin} (/metrics, /admin/kill-switch, /admin/shadow; changes from {}{}){grpc}\n  request log: {}",
        describe_limits(s),
        s.upstream
            .as_ref()
            .map_or("answered 200".into(), |u| format!(
                "forwarded to {} over at most {} sockets",
                u.url(),
                u.max_sockets()
            )),
        match &s.store {
            StoreChoice::Memory => "in-memory".into(),
            StoreChoice::Redis(url) => url.clone(),
            StoreChoice::RedisCluster(seeds) => format!(
                "Redis Cluster (seed {})",
                seeds.first().map_or("none", String::as_str)
            ),
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
        s.conns.max_header_bytes,
        s.conns.max_connections,
        crate::config::ADMIN_MAX_CONNECTIONS,
        if s.gateway.trusted_proxies.is_empty() {
            "the peer's (no trusted proxy)".to_owned()
        } else {
            format!(
                "the rightmost {} entry not in {}",
                s.gateway.client_ip_header.name(),
                s.gateway
                    .trusted_proxies
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
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
/// task writes the first call at once (docs/PERFORMANCE-HISTORY.md measured both).
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
    let redis_rs = match &s.store {
        StoreChoice::Memory => false,
        StoreChoice::Redis(url) => {
            !ratelab_store::redis_store::uses_lane(url, s.redis_wait.is_some())
        }
        StoreChoice::RedisCluster(_) => true,
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
        match &s.store {
            StoreChoice::Memory => serve_app(listener, admin, Memory::new(), &s).await,
            StoreChoice::Redis(url) => {
                let redis = Redis::connect(url, s.gateway.timeout)
                    .await?
                    .with_wait(s.redis_wait);
                serve_app(listener, admin, redis, &s).await
            }
            StoreChoice::RedisCluster(seeds) => {
                let redis = Redis::connect_cluster(seeds, s.gateway.timeout)
                    .await?
                    .with_wait(s.redis_wait);
                serve_app(listener, admin, redis, &s).await
            }
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
