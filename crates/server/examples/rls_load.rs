//! Load for Envoy's rate limit service (`scripts/bench-rls.sh`): a gRPC load generator, and
//! the benchmark's anchor, a bare RLS server on the same tonic stack that answers OK without
//! limiting anything, so the limiter's own cost is the gap between the two. Given a
//! `redis://` URL the anchor first runs ratelab's bucket script once per call, on the first
//! descriptor's first value (`anchor/script.rs`), and answers OK whatever the decision
//! (`UNAVAILABLE` when the script gave no reply): a gRPC front and one script call, with no
//! limiter in between.
//!
//! ```sh
//! cargo run --profile production -p ratelab-server --example rls_load -- bare 127.0.0.1:9000 [workers [redis://…]]
//! cargo run --profile production -p ratelab-server --example rls_load -- load 127.0.0.1:9000 SECS CONCURRENCY KEYS
//! ```
//!
//! `load` keeps CONCURRENCY calls in flight (one connection each) for SECS seconds, each on
//! the `bench` domain with one descriptor `key=kN`, N drawn from KEYS values by a seeded
//! generator, and prints `calls/s p50_us p99_us calls`. A call that fails or answers anything but
//! OK ends it with an error, so every measured call was a whole admitted decision.

use ratelab_server::rls::proto::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use ratelab_server::rls::proto::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use ratelab_server::rls::proto::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus,
};
use ratelab_server::rls::proto::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use ratelab_server::rls::proto::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use ratelab_server::rls::proto::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use std::io::Write as _;
use std::time::{Duration, Instant};

#[path = "anchor/script.rs"]
mod script;

/// The server's allocator, so that the gap to the bare anchor is the limiter's alone.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// The anchor: every call OK, one status per descriptor, nothing counted; with a script,
/// after one call of it.
struct Bare(Option<script::Script>);

#[tonic::async_trait]
impl RateLimitService for Bare {
    async fn should_rate_limit(
        &self,
        request: tonic::Request<RateLimitRequest>,
    ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
        let request = request.get_ref();
        if let Some(script) = &self.0 {
            let key = request
                .descriptors
                .first()
                .and_then(|d| d.entries.first())
                .map_or(&b""[..], |e| e.value.as_bytes());
            if !script.call(key).await {
                return Err(tonic::Status::unavailable("no decision from the script"));
            }
        }
        let n = request.descriptors.len();
        Ok(tonic::Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![
                DescriptorStatus {
                    code: Code::Ok as i32,
                    ..DescriptorStatus::default()
                };
                n
            ],
            ..RateLimitResponse::default()
        }))
    }
}

fn runtime(workers: Option<usize>) -> Result<tokio::runtime::Runtime, Error> {
    let mut rt = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        rt.worker_threads(n);
    }
    Ok(rt.enable_all().build()?)
}

async fn bare(addr: std::net::SocketAddr, redis: Option<&str>) -> Result<(), Error> {
    // Redis first: the port is open only once the script is loaded.
    let script = match redis {
        Some(url) => Some(script::Script::on_redis(url).await?),
        None => None,
    };
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let on = script
        .as_ref()
        .map_or(String::new(), |s| format!(" on Redis at {}", s.addr));
    writeln!(
        std::io::stdout(),
        "bare RLS{on}: listening on {}",
        listener.local_addr()?
    )?;
    let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Bare(script)))
        .serve_with_incoming(incoming)
        .await?;
    Ok(())
}

/// A small seeded generator (xorshift64*), so every run draws the same keys.
struct Draw(u64);

impl Draw {
    fn next(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

async fn load(addr: String, secs: u64, concurrency: usize, keys: u64) -> Result<(), Error> {
    // Every connection first, then the clock: the window holds only calls.
    let mut clients = Vec::with_capacity(concurrency);
    for _ in 0..concurrency {
        clients.push(RateLimitServiceClient::connect(format!("http://{addr}")).await?);
    }
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);
    let mut tasks = Vec::with_capacity(concurrency);
    for (t, mut client) in clients.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            let mut draw = Draw(0x9e37_79b9_7f4a_7c15 ^ (t as u64 + 1));
            let mut took = Vec::new();
            while Instant::now() < until {
                let req = RateLimitRequest {
                    domain: "bench".into(),
                    descriptors: vec![RateLimitDescriptor {
                        entries: vec![Entry {
                            key: "key".into(),
                            value: format!("k{}", draw.next(keys)),
                        }],
                        limit: None,
                        hits_addend: None,
                    }],
                    hits_addend: 0,
                };
                let sent = Instant::now();
                let r = client.should_rate_limit(req).await?.into_inner();
                took.push(sent.elapsed());
                if r.overall_code != Code::Ok as i32 {
                    return Err::<_, Error>(
                        format!("a call was answered {}, not OK", r.overall_code).into(),
                    );
                }
            }
            Ok(took)
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await??);
    }
    let elapsed = start.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |q: f64| {
        ratelab_check::percentile::of(&all, q)
            .map_or(0.0, |d: std::time::Duration| d.as_secs_f64() * 1e6)
    };
    if all.is_empty() {
        return Err("no call completed".into());
    }
    writeln!(
        std::io::stdout(),
        "{:.0} {:.0} {:.0} {}",
        all.len() as f64 / elapsed,
        pct(0.50),
        pct(0.99),
        all.len()
    )?;
    Ok(())
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: rls_load bare ADDR [WORKERS [REDIS_URL]] | rls_load load ADDR SECS CONCURRENCY KEYS";
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["bare", addr, rest @ ..] if rest.len() <= 2 => {
            let workers = rest.first().map(|w| w.parse()).transpose()?;
            let redis = rest.get(1).copied();
            runtime(workers)?.block_on(bare(addr.parse()?, redis))
        }
        ["load", addr, secs, concurrency, keys] => runtime(Some(1))?.block_on(load(
            (*addr).to_owned(),
            secs.parse()?,
            concurrency.parse()?,
            keys.parse()?,
        )),
        _ => Err(usage.into()),
    }
}
