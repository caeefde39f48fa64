//! The anchor of the HTTP throughput benchmark (`scripts/bench-http.sh`): the same front end
//! as `ratelab-server` (hyper's HTTP/1.1 connections, served by
//! [`ratelab_gateway::front::serve`] on the same runtime), answering `ok` with no limiting at
//! all, so the limiter's own cost is the gap between the two.
//!
//! Given a `redis://` URL it is the anchor on Redis: each request first runs ratelab's
//! bucket script once, on the request's `x-api-key`, through the same pipelined connection
//! as `ratelab-server` ([`ratelab_store::redis_lane`]), with the arguments `redis-benchmark`
//! sends in the same bench, and is answered `ok` whatever the script said. What an HTTP
//! front and one script call per request cost together, with no limiter in between.
//!
//! `cargo run --profile production -p ratelab-server --example bare -- 127.0.0.1:9000 [workers [redis://…]]`

use ratelab_store::redis_lane::{Arg, Command, Lane, Target};
use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

/// The server's allocator, so that the gap to it is the limiter's alone.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let listen: std::net::SocketAddr = args.next().unwrap_or("127.0.0.1:0".into()).parse()?;
    // The same runtime as `ratelab-server --workers N` (one worker: the current-thread
    // runtime).
    let workers = args.next().map(|n| n.parse()).transpose()?;
    let redis = args.next();
    let mut rt = ratelab_server::serve::runtime_for(workers, false);
    rt.enable_all().build()?.block_on(async {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let forever = std::future::pending::<()>();
        // Written as ratelab-server writes its own answers.
        let writes = ratelab_gateway::front::Writes::Flat;
        match redis {
            None => {
                writeln!(std::io::stdout(), "bare: listening on http://{addr}")?;
                // The server's own answer to an admitted request, with nothing in front of it.
                let ok = hyper_util::service::TowerToHyperService::new(
                    ratelab_gateway::http::answer_ok::<hyper::body::Incoming>(),
                );
                ratelab_gateway::front::serve(listener, writes, |_| ok.clone(), forever).await;
            }
            Some(url) => {
                let script = on_redis(&url).await?;
                writeln!(
                    std::io::stdout(),
                    "bare on {url}: listening on http://{addr}"
                )?;
                let service = hyper::service::service_fn(move |req| {
                    let script = script.clone();
                    async move { script.run(req).await }
                });
                ratelab_gateway::front::serve(listener, writes, |_| service.clone(), forever).await;
            }
        }
        Ok(())
    })
}

/// The bucket script on one Redis: a lane to it and the script's digest.
#[derive(Clone)]
struct Script {
    lane: Arc<Lane>,
    sha: Arc<str>,
}

/// Loads ratelab's bucket script into the Redis at `url` and opens a lane to it.
async fn on_redis(url: &str) -> Result<Script, Box<dyn std::error::Error>> {
    let target = Target::of(url, Duration::from_secs(1))
        .ok_or_else(|| format!("{url}: not a redis:// URL over TCP"))?;
    let mut conn = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(ratelab_store::redis_store::SCRIPT)
        .query_async(&mut conn)
        .await?;
    Ok(Script {
        lane: Arc::new(Lane::new(target, Duration::from_secs(1))),
        sha: sha.into(),
    })
}

impl Script {
    /// Runs the script once on the request's key (`bare:` and its `x-api-key`), and answers
    /// `ok` — or 503 if Redis gave no reply.
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
        let replied = match self.lane.call(&Command::new(args.into_iter())) {
            Ok(rx) => rx.await.is_ok(),
            Err(_) => false,
        };
        let mut r = http::Response::new(axum::body::Body::from(if replied {
            "ok\n"
        } else {
            "no reply from Redis\n"
        }));
        if !replied {
            *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
        }
        Ok(r)
    }
}
