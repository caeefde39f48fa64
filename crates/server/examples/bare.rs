//! The anchor of the HTTP throughput benchmark (`scripts/bench-http.sh`): the same front end
//! as `ratelab-server` (hyper's HTTP/1.1 connections, served by
//! [`ratelab_gateway::front::serve`] on the same runtime), answering `ok` with no limiting at
//! all, so the limiter's own cost is the gap between the two.
//!
//! Given a `redis://` URL it is the anchor on Redis: each request first runs ratelab's
//! bucket script once, on the request's `x-api-key`, through the pipelined connection
//! `ratelab-server` uses ([`ratelab_store::redis_lane`], a lane of its own), with the
//! arguments `redis-benchmark` sends in the same bench, and is answered `ok` whatever the
//! decision (503 when the script gave no reply, or an error). What an HTTP front and one
//! script call per request cost together, with no limiter in between.
//!
//! `cargo run --profile production -p ratelab-server --example bare -- 127.0.0.1:9000 [workers [redis://…]]`

use ratelab_store::redis_lane::{Arg, Command, Lane, Reply, Target};
use std::sync::Arc;
use std::time::Duration;

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
            Some(url) => Some(Arc::new(on_redis(url).await?)),
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| format!("listen on {listen}: {e}"))?;
        let addr = listener.local_addr().map_err(|e| e.to_string())?;
        let forever = std::future::pending::<()>();
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
                ratelab_gateway::front::serve(listener, writes, conns, service_for, forever).await;
            }
            Some(script) => {
                println!(
                    "bare on Redis at {}: listening on http://{addr}",
                    script.addr
                );
                let service = hyper::service::service_fn(move |req| {
                    let script = script.clone();
                    async move { script.run(req).await }
                });
                let service_for = |_, _| service.clone();
                ratelab_gateway::front::serve(listener, writes, conns, service_for, forever).await;
            }
        }
        Ok(())
    })
}

/// The bucket script on one Redis: a lane to it and the script's digest.
struct Script {
    lane: Lane,
    sha: String,
    /// The server's `host:port` (the URL without its password).
    addr: String,
}

/// Loads ratelab's bucket script into the Redis at `url` and opens a lane to it.
async fn on_redis(url: &str) -> Result<Script, String> {
    let timeout = Duration::from_secs(5);
    let target = Target::of(url, timeout)
        .ok_or("the Redis URL: expected redis://host:port/ (plain TCP, one server)")?;
    let addr = target.addr.clone();
    let load = async {
        let mut conn = redis::Client::open(url)?
            .get_multiplexed_async_connection()
            .await?;
        redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(ratelab_store::redis_store::SCRIPT)
            .query_async::<String>(&mut conn)
            .await
    };
    let sha = tokio::time::timeout(timeout, load)
        .await
        .map_err(|_| format!("loading the script on {addr}: no answer in {timeout:?}"))?
        .map_err(|e| format!("loading the script on {addr}: {e}"))?;
    Ok(Script {
        lane: Lane::new(target, Duration::from_secs(1)),
        sha,
        addr,
    })
}

impl Script {
    /// Runs the script once on the request's key (`bare:` and its `x-api-key`), and answers
    /// `ok` — or 503 if the script gave no reply, or an error.
    async fn run<B>(
        &self,
        req: http::Request<B>,
    ) -> Result<http::Response<axum::body::Body>, std::convert::Infallible> {
        let key = req
            .headers()
            .get("x-api-key")
            .map_or(&b""[..], |v| v.as_bytes());
        // redis-benchmark's arguments in scripts/bench-http.sh: B = a = 10^6 per 10^9 ns,
        // cost 1, the store's clock.
        let args = [
            Arg::Bytes(b"EVALSHA"),
            Arg::Bytes(self.sha.as_bytes()),
            Arg::Int(1),
            Arg::Joined(b"bare:", key),
            Arg::Int(1_000_000),
            Arg::Int(1_000_000),
            Arg::Int(1_000_000_000),
            Arg::Int(1),
            Arg::Bytes(b""),
            Arg::Bytes(b""),
        ];
        // The script's reply is an array of integers; anything else (no reply, an error
        // reply such as NOSCRIPT) means the script did not run as benched.
        let replied = match self.lane.call(&Command::new(args.into_iter())) {
            Ok(rx) => matches!(rx.await, Ok(Reply::Ints(_))),
            Err(_) => false,
        };
        if replied {
            // The bare front's own answer, as without Redis.
            use tower::ServiceExt as _;
            return ratelab_gateway::http::answer_ok().oneshot(req).await;
        }
        let mut r = http::Response::new(axum::body::Body::from("no decision from the script\n"));
        *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        Ok(r)
    }
}
