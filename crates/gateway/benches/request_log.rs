//! What the request id and the request log cost a decision.
//!
//! One gateway over two in-process stores (per-IP and per-key token buckets) decides requests
//! from one client with one key, at a fake clock that advances 10 µs per request. Three runs:
//!
//! - `no_log`: no `tracing` subscriber: the event is a disabled callsite, the id is still minted;
//! - `log_to_memory`: the `RequestLogLayer` formats each line into a reused in-memory buffer;
//! - `log_to_file`: the `FileSink` on `/dev/null`: one `write` system call per line.
//!
//! Also `id`: minting one UUIDv7.
//!
//! Run: `cargo bench -p ratelab-gateway --bench request_log`

use criterion::{Criterion, criterion_group, criterion_main};
use ratelab_core::{Nanos, Policy, TokenBucket};
use ratelab_gateway::limits::NoHeaders;
use ratelab_gateway::reqlog::{FileSink, IdGenerator, LogSink, RequestLogLayer};
use ratelab_gateway::{Env, Gateway, GatewayConfig, Request};
use ratelab_store::{LocalClient, MemoryStore};
use std::future::Future;
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tracing_subscriber::layer::SubscriberExt as _;

static CLOCK: AtomicU64 = AtomicU64::new(1_767_225_600_000_000_000);

fn tick() -> Nanos {
    Nanos(CLOCK.fetch_add(10_000, Ordering::Relaxed))
}

#[derive(Clone, Copy)]
struct FakeEnv;

impl Env for FakeEnv {
    fn now(&self) -> Nanos {
        Nanos(CLOCK.load(Ordering::Relaxed))
    }
    async fn timeout<F: Future + Send>(&self, _: Duration, fut: F) -> Option<F::Output>
    where
        F::Output: Send,
    {
        Some(fut.await)
    }
}

/// In-process stores answer at once: one poll decides.
fn ready<F: Future>(f: F) -> F::Output {
    match pin!(f).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("an in-process decision was pending"),
    }
}

type Clock = fn() -> Nanos;

fn gateway() -> Gateway<LocalClient<Policy, Clock>, FakeEnv> {
    let client = |b| {
        LocalClient::new(
            Arc::new(MemoryStore::new(Policy::TokenBucket(b))),
            tick as Clock,
        )
    };
    let config = GatewayConfig {
        id_seed: Some(7),
        ..GatewayConfig::default()
    };
    let bucket = TokenBucket::per_second(1_000, 1_000_000).unwrap();
    Gateway::new(config, Some(client(bucket)), Some(client(bucket)), FakeEnv)
}

fn decide(gw: &Gateway<LocalClient<Policy, Clock>, FakeEnv>) -> u16 {
    let req = Request {
        peer: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        api_key: Some(b"customer-42"),
        route: "/orders",
        method: "GET",
        headers: &NoHeaders,
        cost: 1,
        trace: 0,
    };
    ready(gw.check(req, None)).status
}

/// Formats into memory and keeps only the last line, so the run measures formatting alone.
struct LastLine(std::sync::Mutex<String>);

impl LogSink for LastLine {
    fn write_line(&self, _: &str, line: &str) {
        let mut last = self.0.lock().unwrap();
        last.clear();
        last.push_str(line);
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("request_log");
    let mut ids = IdGenerator::new(1);
    g.bench_function("id", |b| {
        b.iter(|| black_box(ids.next(tick().as_u64() / 1_000_000)))
    });
    let gw = gateway();
    g.bench_function("no_log", |b| b.iter(|| black_box(decide(&gw))));
    let memory =
        tracing_subscriber::registry().with(RequestLogLayer::new(LastLine(Default::default())));
    tracing::subscriber::with_default(memory, || {
        g.bench_function("log_to_memory", |b| b.iter(|| black_box(decide(&gw))));
    });
    let file = FileSink::create(std::path::Path::new("/dev/null")).expect("/dev/null opens");
    let file = tracing_subscriber::registry().with(RequestLogLayer::new(file));
    tracing::subscriber::with_default(file, || {
        g.bench_function("log_to_file", |b| b.iter(|| black_box(decide(&gw))));
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
