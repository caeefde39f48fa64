//! The anchor of the HTTP throughput benchmark (`scripts/bench-http.sh`): the same front end
//! as `ratelab-server` (hyper's HTTP/1.1 connections, served by
//! [`ratelab_gateway::front::serve`] on the same runtime), answering `ok` with no limiting at
//! all, so the limiter's own cost is the gap between the two.
//!
//! Given a `redis://` URL it is the anchor on Redis: each request first runs ratelab's
//! bucket script once, on the request's `x-api-key` (`anchor/script.rs`), and is answered
//! `ok` whatever the decision (503 when the script gave no reply, or an error). What an HTTP
//! front and one script call per request cost together, with no limiter in between.
//!
//! `cargo run --profile production -p ratelab-server --example bare -- 127.0.0.1:9000 [workers [redis://…]]`

#[path = "anchor/script.rs"]
mod script;

use script::Script;
use std::sync::Arc;

/// The server's allocator, so that the gap to it is the limiter's alone.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    if let Err(e) = run() {
        eprintln!("bare: {e}");
        std::process::exit(2);
    }
}

/// `bare [LISTEN [WORKERS [REDIS_URL]]]`.
fn run() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or("127.0.0.1:0".into());
    let listen: std::net::SocketAddr = listen
        .parse()
        .map_err(|e| format!("listen address {listen:?}: {e} (expected host:port)"))?;
    // The same runtime as `ratelab-server --workers N` (one worker: the current-thread
    // runtime).
    let workers = match args.next() {
        None => None,
        Some(w) => Some(
            w.parse::<usize>()
                .ok()
                .filter(|n| (1..=1024).contains(n))
                .ok_or(format!("workers {w:?}: expected 1 to 1024"))?,
        ),
    };
    let redis = args.next();
    if let Some(extra) = args.next() {
        return Err(format!(
            "unexpected argument {extra:?} (usage: bare [LISTEN [WORKERS [REDIS_URL]]])"
        ));
    }
    let mut rt = ratelab_server::serve::runtime_for(workers, false);
    let rt = rt
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    rt.block_on(async {
        // Redis first: the port is open only once the script is loaded.
        let script = match &redis {
            Some(url) => Some(Arc::new(Script::on_redis(url).await?)),
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| format!("listen on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        // Stopped as ratelab-server stops (SIGTERM or Ctrl-C), returning from `main`: a
        // build that writes its profile at exit (scripts/pgo-build.sh) writes it then.
        let stop = ratelab_server::serve::shutdown();
        // Written as ratelab-server writes its own answers, its connections bounded alike.
        let writes = ratelab_gateway::front::Writes::Flat;
        let conns = ratelab_gateway::conns::Connections::new(
            "data",
            ratelab_gateway::conns::ConnLimits::default(),
        );
        match script {
            None => {
                println!("bare: listening on http://{addr}");
                // The server's own answer to an admitted request, with nothing in front of it.
                let ok = hyper_util::service::TowerToHyperService::new(
                    ratelab_gateway::http::answer_ok::<hyper::body::Incoming>(),
                );
                let service_for = |_, _| ok.clone();
                ratelab_gateway::front::serve(listener, writes, conns, service_for, stop).await;
            }
            Some(script) => {
                println!(
                    "bare on Redis at {}: listening on http://{addr}",
                    script.addr
                );
                let service = hyper::service::service_fn(move |req| {
                    let script = script.clone();
                    async move { answer(&script, req).await }
                });
                let service_for = |_, _| service.clone();
                ratelab_gateway::front::serve(listener, writes, conns, service_for, stop).await;
            }
        }
        Ok(())
    })
}

/// Runs the script once on the request's key (its `x-api-key`), and answers `ok` — or 503
/// if the script gave no reply, or an error.
async fn answer<B>(
    script: &Script,
    req: http::Request<B>,
) -> Result<http::Response<axum::body::Body>, std::convert::Infallible> {
    let key = req
        .headers()
        .get("x-api-key")
        .map_or(&b""[..], |v| v.as_bytes());
    if script.call(key).await {
        // The bare front's own answer, as without Redis.
        use tower::ServiceExt as _;
        return ratelab_gateway::http::answer_ok().oneshot(req).await;
    }
    let mut r = http::Response::new(axum::body::Body::from("no decision from the script\n"));
    *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    Ok(r)
}
