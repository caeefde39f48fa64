//! One in-process atomic decision: ratelab's `MemoryStore::apply` beside `governor` enforcing
//! the same quota (burst 50, 100 000 per second) in the same run.
//!
//! Both sides read a shared fake clock that advances 1 µs per decision (one atomic
//! read-modify-write each), so the figures compare the decisions themselves, not clocks. At
//! that pace one request in ten is admitted on a busy key.
//!
//! Run: `cargo bench -p ratelab-store --bench decision`

use criterion::{Criterion, criterion_group, criterion_main};
use governor::clock::FakeRelativeClock;
use governor::state::InMemoryState;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use ratelab_core::{Nanos, TokenBucket};
use ratelab_store::{Key, MemoryStore, Store};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const BURST: u32 = 50;
const PER_SEC: u32 = 100_000;
const MANY_KEYS: usize = 10_000;
const STEP: Duration = Duration::from_micros(1);

fn quota() -> Quota {
    Quota::per_second(NonZeroU32::new(PER_SEC).unwrap())
        .allow_burst(NonZeroU32::new(BURST).unwrap())
}

fn bucket() -> TokenBucket {
    TokenBucket::per_second(u64::from(BURST), u64::from(PER_SEC)).unwrap()
}

type Mw = governor::middleware::NoOpMiddleware<governor::nanos::Nanos>;
type GovKeyed = RateLimiter<String, DefaultKeyedStateStore<String>, FakeRelativeClock, Mw>;
type GovDirect = RateLimiter<governor::state::NotKeyed, InMemoryState, FakeRelativeClock, Mw>;

/// A ratelab store with its own fake clock.
struct Ours {
    store: MemoryStore<TokenBucket>,
    clock: AtomicU64,
}

impl Ours {
    fn new() -> Self {
        Ours {
            store: MemoryStore::new(bucket()),
            clock: AtomicU64::new(0),
        }
    }

    fn decide(&self, key: &Key) -> bool {
        let now = self.clock.fetch_add(1_000, Ordering::Relaxed);
        self.store.apply(key, Nanos(now), 1).unwrap().allowed
    }
}

struct Gov<L> {
    limiter: L,
    clock: FakeRelativeClock,
}

fn gov_keyed() -> Gov<GovKeyed> {
    let clock = FakeRelativeClock::default();
    Gov {
        limiter: RateLimiter::new(quota(), DefaultKeyedStateStore::default(), clock.clone()),
        clock,
    }
}

fn gov_direct() -> Gov<GovDirect> {
    let clock = FakeRelativeClock::default();
    Gov {
        limiter: RateLimiter::new(quota(), InMemoryState::default(), clock.clone()),
        clock,
    }
}

/// Runs `iters` calls of `op(i)` split over `threads` threads and returns the wall time.
fn timed<F: Fn(usize) + Sync>(threads: usize, iters: u64, op: F) -> Duration {
    let per = (iters as usize).div_ceil(threads);
    let start = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let op = &op;
            s.spawn(move || {
                for i in 0..per {
                    op(t * per + i);
                }
            });
        }
    });
    start.elapsed()
}

fn decisions(c: &mut Criterion) {
    let our_keys: Vec<Key> = (0..MANY_KEYS)
        .map(|i| Key::new(&format!("user:{i}")).unwrap())
        .collect();
    let gov_keys: Vec<String> = (0..MANY_KEYS).map(|i| format!("user:{i}")).collect();

    for threads in [1usize, 2] {
        let mut g = c.benchmark_group(format!("decision/{threads}-thread"));
        g.throughput(criterion::Throughput::Elements(1));

        let ours = Ours::new();
        g.bench_function("ratelab/single-key", |b| {
            b.iter_custom(|n| {
                timed(threads, n, |_| {
                    black_box(ours.decide(&our_keys[0]));
                })
            })
        });
        let gov = gov_keyed();
        g.bench_function("governor-keyed/single-key", |b| {
            b.iter_custom(|n| {
                timed(threads, n, |_| {
                    gov.clock.advance(STEP);
                    black_box(gov.limiter.check_key(&gov_keys[0]).is_ok());
                })
            })
        });
        let gov = gov_direct();
        g.bench_function("governor-direct/single-key", |b| {
            b.iter_custom(|n| {
                timed(threads, n, |_| {
                    gov.clock.advance(STEP);
                    black_box(gov.limiter.check().is_ok());
                })
            })
        });

        let ours = Ours::new();
        g.bench_function("ratelab/10k-keys", |b| {
            b.iter_custom(|n| {
                timed(threads, n, |i| {
                    black_box(ours.decide(&our_keys[i % MANY_KEYS]));
                })
            })
        });
        let gov = gov_keyed();
        g.bench_function("governor-keyed/10k-keys", |b| {
            b.iter_custom(|n| {
                timed(threads, n, |i| {
                    gov.clock.advance(STEP);
                    black_box(gov.limiter.check_key(&gov_keys[i % MANY_KEYS]).is_ok());
                })
            })
        });
        g.finish();
    }
}

/// Both limiters must agree before their speed means anything: the same quota, fed the same
/// clock, admits the same requests.
fn same_decisions() {
    let ours = Ours::new();
    let gov = gov_keyed();
    let key = Key::new("k").unwrap();
    let k = "k".to_owned();
    for i in 0..100_000 {
        gov.clock.advance(STEP);
        let a = ours.decide(&key);
        let b = gov.limiter.check_key(&k).is_ok();
        assert_eq!(a, b, "ratelab and governor disagree at decision {i}");
    }
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30)
}

fn benches(c: &mut Criterion) {
    same_decisions();
    decisions(c);
}

criterion_group! { name = group; config = config(); targets = benches }
criterion_main!(group);
