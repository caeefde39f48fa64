//! Running the server: the gateway over the embedded in-memory store or Redis, behind a real
//! HTTP server, until Ctrl-C.

use crate::config::ServeSettings;
use ratelab_core::{Nanos, Policy, TokenBucket};
use ratelab_gateway::http::{TokioEnv, app};
use ratelab_gateway::reqlog::{FileSink, RequestLogLayer};
use ratelab_gateway::{Env, Gateway};
use ratelab_store::redis_store::{RedisOptions, RedisStore};
use ratelab_store::{LocalClient, MemoryStore};
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

type Clock = fn() -> Nanos;
type Local = LocalClient<Policy, Clock>;

fn wall_clock() -> Nanos {
    TokioEnv.now()
}

/// Builds the gateway over two in-memory stores.
pub fn gateway(s: &ServeSettings) -> Arc<Gateway<Local, TokioEnv>> {
    let client = |b: TokenBucket| {
        LocalClient::new(
            Arc::new(MemoryStore::new(Policy::TokenBucket(b))),
            wall_clock as Clock,
        )
    };
    Arc::new(Gateway::new(
        s.gateway.clone(),
        Some(client(s.per_ip)),
        Some(client(s.per_key)),
        TokioEnv,
    ))
}

/// Builds the gateway over Redis: one store per layer, each with its own policy.
async fn redis_gateway(
    s: &ServeSettings,
    url: &str,
) -> Result<Arc<Gateway<RedisStore, TokioEnv>>, String> {
    let store = |b: TokenBucket, prefix: &str| {
        let options = RedisOptions {
            prefix: prefix.into(),
            timeout: s.gateway.timeout,
        };
        RedisStore::connect(url, b, options)
    };
    let per_ip = store(s.per_ip, "ratelab:ip:")
        .await
        .map_err(|e| e.to_string())?;
    let per_key = store(s.per_key, "ratelab:key:")
        .await
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(Gateway::new(
        s.gateway.clone(),
        Some(per_ip),
        Some(per_key),
        TokioEnv,
    )))
}

async fn serve_app<C: ratelab_store::StoreClient + 'static>(
    listener: tokio::net::TcpListener,
    gw: Arc<Gateway<C, TokioEnv>>,
    s: &ServeSettings,
) -> Result<(), String> {
    // The app installs the metrics recorder: the switch is set after, so its gauge shows.
    let app = app(gw.clone(), s.admin.clone(), None);
    gw.set_kill_switch(s.kill_switch);
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<SocketAddr>(),
    )
    .with_graceful_shutdown(shutdown())
    .await
    .map_err(|e| format!("server error: {e}"))
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

/// Serves until Ctrl-C or SIGTERM.
pub fn run(s: ServeSettings) -> Result<(), String> {
    let rt = tokio::runtime::Builder::new_multi_thread()
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
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        // A closed stdout (`ratelab-server | head -1`) must not take the server down.
        let _ = writeln!(
            std::io::stdout(),
            "ratelab-server: listening on http://{addr}\n  per-key (x-api-key): B = {}, R = {}/s\n  per-IP: B = {}, R = {}/s\n  store: {}; timeout {} ms; fail {}\n  /metrics, /admin/kill-switch (admin from {})\n  request log: {}",
            s.per_key.capacity(),
            s.per_key.refill_amount(),
            s.per_ip.capacity(),
            s.per_ip.refill_amount(),
            s.redis.as_deref().unwrap_or("in-memory"),
            s.gateway.timeout.as_millis(),
            if s.gateway.fail_open { "open" } else { "closed" },
            s.admin.iter().map(ToString::to_string).collect::<Vec<_>>().join(", "),
            s.request_log.as_ref().map_or("off".into(), |p| p.display().to_string()),
        );
        match &s.redis {
            Some(url) => serve_app(listener, redis_gateway(&s, url).await?, &s).await,
            None => serve_app(listener, gateway(&s), &s).await,
        }
    })
}
