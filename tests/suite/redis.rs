//! The store contract on a real `redis-server` (private, on a free loopback port).
//!
//! - the Lua script decides exactly as the Rust core does, field for field, on
//!   proptest-generated sequences (caller-supplied `now` near today's epoch nanoseconds);
//! - the same conformance body passes on the in-memory store and on Redis;
//! - real concurrency: the naive path loses updates, the atomic path does not;
//! - real faults: a frozen (SIGSTOP), killed and restarted server, with the gateway failing
//!   open within its timeout, the breaker opening, and limiting resuming after;
//! - the singleton job's lease and fencing scripts: growing tokens, holder-only renew and
//!   release, and a stalled leader's stale commit refused.

use crate::caller_clock::CallerClock;
use crate::multi_conformance;
use ratelab_testkit::redis_server;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use ratelab_core::{Algorithm, Nanos, TokenBucket};
use ratelab_gateway::http::TokioEnv;
use ratelab_gateway::limits::{NoHeaders, PER_IP, PER_KEY};
use ratelab_gateway::singleton::{FencedJob, Singleton, SingletonConfig, Tick};
use ratelab_gateway::{BreakerConfig, FailReason, Gateway, GatewayConfig, LayerOutcome, Request};
use ratelab_store::faulty::{Fate, FaultPlan, FaultyClient};
use ratelab_store::redis_store::{RedisOptions, RedisStore};
use ratelab_store::{
    FenceVerdict, Key, LeaseClient, LocalClient, MemoryStore, Path, StoreClient, TimeSource,
    decide_remote,
};
use redis_server::{RedisServer, info_field};
use std::sync::Arc;
use std::time::Duration;

/// Today-ish, in ns since the epoch: the script must stay exact at realistic clocks.
const EPOCH_NS: u64 = 1_764_500_000_000_000_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn options(prefix: &str) -> RedisOptions {
    RedisOptions {
        prefix: prefix.into(),
        timeout: Duration::from_millis(500),
    }
}

/// A store for a B = 5, R = 20/s bucket on `server`, under `prefix`.
async fn connect(server: &RedisServer, prefix: &str) -> RedisStore {
    let bucket = TokenBucket::per_second(5, 20).unwrap();
    RedisStore::connect(&server.url(), bucket, options(prefix))
        .await
        .unwrap()
}

/// One conformance body for any store client: sequential decisions at caller-supplied times
/// equal the core's, on both paths.
/// `set_clock` moves the store's own clock (TTL expiry) along with the caller's.
async fn conformance<C: StoreClient<Algorithm = TokenBucket>>(
    client: &C,
    name: &str,
    set_clock: impl Fn(u64),
) {
    let bucket = *client.algorithm();
    let mut state = None;
    let key = Key::new(&format!("conformance:{name}")).unwrap();
    let mut clock = CallerClock::at(EPOCH_NS);
    for i in 0..200u64 {
        let t = clock.step((i * 7_919) % 40_000_000);
        let cost = 1 + i % 3;
        let path = if i % 2 == 0 {
            Path::Atomic
        } else {
            Path::Naive
        };
        set_clock(t);
        let got = decide_remote(client, path, TimeSource::Caller, &key, Nanos(t), cost)
            .await
            .unwrap();
        let (next, want) = bucket.transition(state, Nanos(t), cost).unwrap();
        if want.allowed {
            state = Some(next);
        }
        assert_eq!(
            got.decision, want,
            "{name}: request {i} at {t} on the {path} path"
        );
    }
}

#[test]
fn conformance_suite_passes_on_memory() {
    let rt = runtime();
    let bucket = TokenBucket::per_second(5, 20).unwrap();
    let clock = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let reader = clock.clone();
    let memory = LocalClient::new(Arc::new(MemoryStore::new(bucket)), move || {
        Nanos(reader.load(std::sync::atomic::Ordering::Relaxed))
    });
    rt.block_on(conformance(&memory, "memory", |t| {
        clock.store(t, std::sync::atomic::Ordering::Relaxed)
    }));
    // The fault-injecting wrapper with an empty plan is the store it wraps.
    let memory = LocalClient::new(Arc::new(MemoryStore::new(bucket)), {
        let reader = clock.clone();
        move || Nanos(reader.load(std::sync::atomic::Ordering::Relaxed))
    });
    let faulty = FaultyClient::new(memory, FaultPlan::default(), 7);
    rt.block_on(conformance(&faulty, "faulty (no faults)", |t| {
        clock.store(t, std::sync::atomic::Ordering::Relaxed)
    }));
}

#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn conformance_suite_passes_on_redis() {
    let Some(server) = RedisServer::start("conformance_suite_passes_on_redis") else {
        return;
    };
    let bucket = TokenBucket::per_second(5, 20).unwrap();
    runtime().block_on(async {
        let redis = RedisStore::connect(&server.url(), bucket, options("conf:"))
            .await
            .unwrap();
        // Redis keeps its own clock for TTLs; the decisions use the caller's.
        conformance(&redis, "redis", |_| {}).await;
        let faulty = FaultyClient::new(redis, FaultPlan::default(), 7);
        conformance(&faulty, "faulty redis (no faults)", |_| {}).await;
    });
}

/// With faults injected into Redis, every decision that comes back is exactly the core's,
/// counting the transitions whose reply was lost (applied, but reported as a timeout), and
/// no unapplied call changes the state.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn injected_faults_never_corrupt_a_decision() {
    let Some(server) = RedisServer::start("injected_faults_never_corrupt_a_decision") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let redis = connect(&server, "faulty:").await;
        let bucket = *redis.algorithm();
        let plan = FaultPlan {
            error: 0.1,
            drop: 0.1,
            lost_reply: 0.1,
        };
        let faulty = FaultyClient::new(redis, plan, 42);
        let key = Key::new("k").unwrap();
        let (mut state, mut clock, mut served) = (None, CallerClock::at(EPOCH_NS), 0);
        for i in 0..400u64 {
            let t = clock.step((i * 7_919) % 40_000_000);
            let got = faulty.apply(&key, Some(Nanos(t)), 1).await;
            let fate = *faulty.fates().last().unwrap();
            let (next, want) = bucket.transition(state, Nanos(t), 1).unwrap();
            match fate {
                Fate::Served => {
                    assert_eq!(got.unwrap().decision, want, "call {i}");
                    served += 1;
                }
                Fate::ReplyLost => assert!(got.is_err()),
                Fate::Errored | Fate::Dropped => {
                    assert!(got.is_err());
                    continue;
                }
            }
            if want.allowed {
                state = Some(next);
            }
        }
        let fates = faulty.fates();
        let count = |f: Fate| fates.iter().filter(|&&x| x == f).count();
        println!(
            "400 calls: {served} served, {} errored, {} dropped, {} replies lost",
            count(Fate::Errored),
            count(Fate::Dropped),
            count(Fate::ReplyLost)
        );
        assert!(
            count(Fate::ReplyLost) > 10 && count(Fate::Errored) > 10 && count(Fate::Dropped) > 10
        );
    });
}

#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn lua_script_decides_exactly_as_the_core() {
    let Some(server) = RedisServer::start("lua_script_decides_exactly_as_the_core") else {
        return;
    };
    let rt = runtime();
    let strategy = (
        1u64..=50,
        1u64..=1_000,
        prop_oneof![Just(1_000_000_000u64), 1u64..=60_000_000_000],
        prop::collection::vec((0u64..3_000_000_000, 1u64..=4), 1..60),
    );
    let mut runner = TestRunner::new(Config {
        cases: 64,
        failure_persistence: None,
        ..Config::default()
    });
    let case = std::sync::atomic::AtomicU64::new(0);
    runner
        .run(&strategy, |(cap, amount, period, ops)| {
            let Ok(bucket) = TokenBucket::new(cap, amount, Nanos(period)) else {
                return Ok(());
            };
            if ratelab_store::redis_store::check_exact(&bucket).is_err() {
                return Ok(());
            }
            let case = case.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            rt.block_on(async {
                let store =
                    RedisStore::connect(&server.url(), bucket, options(&format!("prop{case}:")))
                        .await
                        .unwrap();
                let key = Key::new("k").unwrap();
                let mut state = None;
                let mut clock = CallerClock::at(EPOCH_NS);
                for (i, &(gap, cost)) in ops.iter().enumerate() {
                    let t = clock.step(gap);
                    let cost = cost.min(cap);
                    let got = store
                        .apply(&key, Some(Nanos(t)), cost)
                        .await
                        .unwrap()
                        .decision;
                    let (next, want) = bucket.transition(state, Nanos(t), cost).unwrap();
                    if want.allowed {
                        state = Some(next);
                    }
                    prop_assert_eq!(got, want, "op {} of {:?} under {:?}", i, ops, bucket);
                }
                Ok(())
            })
        })
        .unwrap();
    println!(
        "Lua script and core agreed on {} generated policies and sequences",
        case.into_inner()
    );
}

/// One request at several limits: the Lua script over several keys decides exactly as the
/// core's all-or-nothing decision, field for field, spending at every key or at none.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn lua_script_decides_several_limits_exactly_as_the_core() {
    let Some(server) = RedisServer::start("lua_script_decides_several_limits_exactly_as_the_core")
    else {
        return;
    };
    let url = server.url();
    let n =
        multi_conformance::several_limits_decide_as_the_core(&runtime(), 48, |bucket, prefix| {
            RedisStore::connect(&url, bucket, options(prefix))
        });
    println!(
        "the Lua script over several keys and the core agreed on {n} generated request sequences"
    );
}

/// Many tasks take the last token at the same instant over real connections.
async fn admitted_with_one_token_left(
    store: &RedisStore,
    path: Path,
    round: u64,
    tasks: usize,
) -> usize {
    let key = Key::new(&format!("race:{path}:{round}")).unwrap();
    let now = Nanos(EPOCH_NS + round * 10_000_000_000);
    let cap = store.algorithm().capacity();
    for _ in 1..cap {
        assert!(
            decide_remote(store, Path::Atomic, TimeSource::Caller, &key, now, 1)
                .await
                .unwrap()
                .decision
                .allowed
        );
    }
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let (store, key) = (store.clone(), key.clone());
            tokio::spawn(async move {
                decide_remote(&store, path, TimeSource::Caller, &key, now, 1).await
            })
        })
        .collect();
    let mut admitted = 0;
    for h in handles {
        admitted += usize::from(h.await.unwrap().unwrap().decision.allowed);
    }
    admitted
}

#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn real_concurrency_loses_updates_on_the_naive_path_only() {
    let Some(server) = RedisServer::start("real_concurrency_loses_updates_on_the_naive_path_only")
    else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let bucket = TokenBucket::per_second(4, 1).unwrap();
        let store = RedisStore::connect(&server.url(), bucket, options("race:"))
            .await
            .unwrap();
        let mut naive = Vec::new();
        for round in 0..20 {
            naive.push(admitted_with_one_token_left(&store, Path::Naive, round, 32).await);
            let atomic = admitted_with_one_token_left(&store, Path::Atomic, 100 + round, 32).await;
            assert_eq!(
                atomic, 1,
                "atomic path, round {round}: exactly the one token left"
            );
        }
        println!("naive path, 32 tasks, 1 token left, 20 rounds: admitted {naive:?}");
        assert!(
            naive.iter().any(|&n| n > 1),
            "the naive path lost an update on real Redis"
        );
    });
}

type Gw = Gateway<RedisStore, TokioEnv>;

/// A request from 127.0.0.1 with API key `key`.
fn request(key: &'static [u8]) -> Request<'static> {
    Request {
        peer: "127.0.0.1".parse().unwrap(),
        api_key: Some(key),
        route: "/",
        method: "GET",
        headers: &NoHeaders,
        cost: 1,
        trace: 0,
    }
}

async fn check(gw: &Gw) -> Option<LayerOutcome> {
    gw.check(request(b"alice"), None).await.outcome(PER_KEY)
}

/// The fault tests' store call timeout.
const FAULT_TIMEOUT: Duration = Duration::from_millis(100);

/// A per-key gateway on `server` for the fault tests: a 100 ms timeout, a breaker that opens
/// after 3 failures and probes after 300 ms.
async fn fault_gateway(server: &RedisServer, bucket: TokenBucket, prefix: &str) -> Gw {
    let options = RedisOptions {
        prefix: prefix.into(),
        timeout: FAULT_TIMEOUT,
    };
    let store = RedisStore::connect(&server.url(), bucket, options)
        .await
        .unwrap();
    let config = GatewayConfig {
        timeout: FAULT_TIMEOUT,
        breaker: BreakerConfig {
            failures_to_open: 3,
            cooldown: Nanos::from_millis(300),
        },
        ..GatewayConfig::default()
    };
    Gateway::new(config, None, Some(store), TokioEnv)
}

#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn frozen_killed_and_restarted_redis_fails_open_then_recovers() {
    let Some(mut server) =
        RedisServer::start("frozen_killed_and_restarted_redis_fails_open_then_recovers")
    else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let gw = fault_gateway(&server, TokenBucket::per_second(3, 1).unwrap(), "faults:").await;
        // Healthy: three admitted, then denied.
        for _ in 0..3 {
            assert!(matches!(check(&gw).await, Some(LayerOutcome::Decided { decision, .. }) if decision.allowed));
        }
        assert!(matches!(check(&gw).await, Some(LayerOutcome::Decided { decision, .. }) if !decision.allowed));

        // Frozen: each call fails open within the timeout, then the breaker skips the store.
        server.signal("STOP");
        let mut reasons = Vec::new();
        for _ in 0..6 {
            let started = std::time::Instant::now();
            let outcome = check(&gw).await;
            let took = started.elapsed();
            assert!(took < FAULT_TIMEOUT + Duration::from_millis(50), "answered in {took:?}");
            match outcome {
                Some(LayerOutcome::FailedOpen(r)) => reasons.push(r.name()),
                other => panic!("expected fail-open while frozen, got {other:?}"),
            }
        }
        assert_eq!(&reasons[..3], ["timeout"; 3], "{reasons:?}");
        assert!(reasons[3..].iter().all(|r| *r == "breaker_open"), "{reasons:?}");
        assert_eq!(gw.stats().snapshot().breaker_opened, 1);

        // Resumed: after the cooldown a probe closes the breaker and limiting resumes.
        server.signal("CONT");
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert!(matches!(check(&gw).await, Some(LayerOutcome::Decided { .. })), "limiting resumed");
        assert_eq!(gw.stats().snapshot().breaker_closed, 1);

        // Killed: errors fail open, nothing panics.
        server.kill();
        for _ in 0..3 {
            assert!(matches!(check(&gw).await, Some(LayerOutcome::FailedOpen(_))));
        }
        // Restarted (empty): the connection manager reconnects and limiting resumes; the
        // bucket starts full, so up to B extra requests pass — the state-loss bound.
        server.restart();
        let mut decided = None;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if let Some(LayerOutcome::Decided { decision, .. }) = check(&gw).await {
                decided = Some(decision);
                break;
            }
        }
        let d = decided.expect("the gateway reconnected to the restarted server");
        assert!(d.allowed && d.remaining == 2, "a fresh bucket after the restart: {d:?}");
    });
}

/// Both layers on one frozen Redis: the request has one deadline, the store timeout, shared
/// by the edge and per-key layers. Before, each layer spent its own timeout and an answer
/// took up to twice it. The margin allowed for scheduling on a loaded 2-core machine is
/// stated here: 30 ms.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn both_layers_on_a_frozen_redis_answer_within_one_timeout() {
    const TIMEOUT: Duration = Duration::from_millis(50);
    const MARGIN: Duration = Duration::from_millis(30);
    let Some(server) =
        RedisServer::start("both_layers_on_a_frozen_redis_answer_within_one_timeout")
    else {
        return;
    };
    let rt = runtime();
    let url = server.url();
    rt.block_on(async {
        let layer = |prefix: &'static str| {
            let options = RedisOptions {
                prefix: prefix.into(),
                timeout: TIMEOUT,
            };
            RedisStore::connect(&url, TokenBucket::per_second(100, 100).unwrap(), options)
        };
        let (edge, per_key) = (
            layer("two:ip:").await.unwrap(),
            layer("two:key:").await.unwrap(),
        );
        let config = GatewayConfig {
            timeout: TIMEOUT,
            // No breaker: every request waits on the frozen store.
            breaker: BreakerConfig {
                failures_to_open: u32::MAX,
                cooldown: Nanos::ZERO,
            },
            ..GatewayConfig::default()
        };
        let gw = Gateway::new(config, Some(edge), Some(per_key), TokioEnv);
        let req = || request(b"alice");
        let healthy = gw.check(req(), None).await;
        assert!(
            matches!(healthy.outcome(PER_KEY), Some(LayerOutcome::Decided { .. })),
            "{healthy:?}"
        );
        server.signal("STOP");
        let mut slowest = Duration::ZERO;
        for _ in 0..10 {
            let started = std::time::Instant::now();
            let a = gw.check(req(), None).await;
            slowest = slowest.max(started.elapsed());
            assert_eq!(
                a.outcome(PER_IP),
                Some(LayerOutcome::FailedOpen(FailReason::Timeout))
            );
            assert_eq!(
                a.outcome(PER_KEY),
                Some(LayerOutcome::FailedOpen(FailReason::Timeout)),
                "the edge spent the deadline: the per-key layer is not called"
            );
        }
        server.signal("CONT");
        println!("two layers on a frozen Redis, 50 ms deadline: slowest answer {slowest:?}");
        assert!(slowest < TIMEOUT + MARGIN, "slowest {slowest:?}");
    });
}

/// The same freeze under concurrent load: 32 tasks keep sending while the server is stopped.
/// Every request is answered within the timeout (plus scheduling slack) and fails open; the
/// breaker opens, so most of them never wait on the store; after the server resumes and the
/// cooldown passes, the same load is decided by the store again.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn frozen_redis_under_concurrent_load_fails_open_within_the_timeout() {
    let Some(server) =
        RedisServer::start("frozen_redis_under_concurrent_load_fails_open_within_the_timeout")
    else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let bucket = TokenBucket::per_second(1_000, 1_000).unwrap();
        let gw = Arc::new(fault_gateway(&server, bucket, "load:").await);
        // 32 tasks, 10 requests each, 20 ms apart: each answer and how long it took.
        let load = |gw: Arc<Gw>| async move {
            let tasks: Vec<_> = (0..32)
                .map(|_| {
                    let gw = gw.clone();
                    tokio::spawn(async move {
                        let mut out = Vec::new();
                        for _ in 0..10 {
                            let started = std::time::Instant::now();
                            let outcome = check(&gw).await;
                            out.push((outcome, started.elapsed()));
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                        out
                    })
                })
                .collect();
            let mut all = Vec::new();
            for t in tasks {
                all.extend(t.await.unwrap());
            }
            all
        };
        server.signal("STOP");
        let frozen = load(gw.clone()).await;
        server.signal("CONT");
        let slowest = frozen.iter().map(|(_, took)| *took).max().unwrap();
        assert!(
            slowest < FAULT_TIMEOUT + Duration::from_millis(100),
            "slowest {slowest:?}"
        );
        let mut reasons = std::collections::BTreeMap::<&str, u64>::new();
        for (outcome, _) in &frozen {
            match outcome {
                Some(LayerOutcome::FailedOpen(r)) => *reasons.entry(r.name()).or_default() += 1,
                other => panic!("expected fail-open while frozen, got {other:?}"),
            }
        }
        println!("320 requests to a frozen Redis: {reasons:?}, slowest answer {slowest:?}");
        assert!(
            reasons.get("timeout").copied().unwrap_or(0) >= 3,
            "{reasons:?}"
        );
        assert!(
            reasons["breaker_open"] > 160,
            "the breaker spared the store: {reasons:?}"
        );
        assert_eq!(gw.stats().snapshot().fail_open(), 320);
        assert!(gw.stats().snapshot().breaker_opened >= 1);

        tokio::time::sleep(Duration::from_millis(350)).await;
        let resumed = load(gw.clone()).await;
        // Half-open, the breaker lets one probe through; the rest of the first wave fails open
        // at once until the probe succeeds and closes it. After that, the store decides all.
        let (first_wave, later): (Vec<_>, Vec<_>) =
            resumed.iter().enumerate().partition(|(i, _)| i % 10 == 0);
        assert!(
            later
                .iter()
                .all(|(_, (o, _))| matches!(o, Some(LayerOutcome::Decided { .. }))),
            "limiting resumed"
        );
        let probes = first_wave
            .iter()
            .filter(|(_, (o, _))| matches!(o, Some(LayerOutcome::Decided { .. })))
            .count();
        assert!(probes >= 1, "the probe was decided");
        assert!(
            first_wave.iter().all(|(_, (o, _))| matches!(
                o,
                Some(
                    LayerOutcome::Decided { .. }
                        | LayerOutcome::FailedOpen(FailReason::BreakerOpen)
                )
            )),
            "{first_wave:?}"
        );
        assert!(gw.stats().snapshot().breaker_closed >= 1);
    });
}

/// The lease script: set-if-absent with expiry, renew and release by the holder only, tokens
/// that only grow; and the fence script refusing the stale token of a lapsed holder.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn redis_leases_grant_growing_tokens_and_the_fence_rejects_a_stale_one() {
    let Some(server) = RedisServer::start("redis_leases") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let store = connect(&server, "lease:").await;
        let ttl = Nanos::from_millis(200);
        let a = store.acquire("cleanup", "a", ttl).await.unwrap().unwrap();
        // A token is the server's clock in µs (or one more than the last, if that is later).
        assert!(a > 1_700_000_000_000_000, "{a}");
        assert_eq!(store.acquire("cleanup", "b", ttl).await, Ok(None), "held");
        assert_eq!(
            store.renew("cleanup", "b", a, ttl).await,
            Ok(false),
            "not b's"
        );
        assert_eq!(store.release("cleanup", "b", a).await, Ok(false), "not b's");
        assert_eq!(store.renew("cleanup", "a", a, ttl).await, Ok(true));
        assert_eq!(
            store.fenced_set("cleanup", "ledger", a, "a swept").await,
            Ok(FenceVerdict::Accepted)
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            store.renew("cleanup", "a", a, ttl).await,
            Ok(false),
            "lapsed"
        );
        let b = store.acquire("cleanup", "b", ttl).await.unwrap().unwrap();
        assert!(b >= a + 300_000, "{b} at least 300 ms of µs after {a}");
        // Stale from the moment b is granted, before b has written anything.
        assert_eq!(
            store
                .fenced_set("cleanup", "ledger", a, "a's early stale sweep")
                .await,
            Ok(FenceVerdict::Stale { highest: b })
        );
        assert_eq!(
            store.fenced_set("cleanup", "ledger", b, "b swept").await,
            Ok(FenceVerdict::Accepted)
        );
        assert_eq!(
            store
                .fenced_set("cleanup", "ledger", a, "a's stale sweep")
                .await,
            Ok(FenceVerdict::Stale { highest: b })
        );
        assert_eq!(
            store.fenced_get("cleanup", "ledger").await,
            Ok(Some((b, "b swept".into())))
        );
        assert_eq!(store.release("cleanup", "a", a).await, Ok(false));
        assert_eq!(store.release("cleanup", "b", b).await, Ok(true));
        let c = store.acquire("cleanup", "a", ttl).await.unwrap().unwrap();
        assert!(c > b, "{c} after {b}");
        // A lost token (a restart without persistence) does not bring tokens back down.
        store.release("cleanup", "a", c).await.unwrap();
        let mut raw = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let _: () = redis::cmd("FLUSHALL").query_async(&mut raw).await.unwrap();
        let d = store.acquire("cleanup", "b", ttl).await.unwrap().unwrap();
        assert!(d > c, "{d} after a flush, {c} before it");
    });
}

/// Writes a ledger entry, fenced; stalls in `plan` when told to.
struct Ledger {
    store: RedisStore,
    owner: &'static str,
    stall: Duration,
}

impl FencedJob for Ledger {
    type Plan = String;
    async fn plan(&self) -> Result<String, ratelab_store::StoreError> {
        tokio::time::sleep(self.stall).await;
        Ok(format!("swept by {}", self.owner))
    }
    async fn commit(
        &self,
        token: u64,
        entry: String,
    ) -> Result<FenceVerdict, ratelab_store::StoreError> {
        self.store
            .fenced_set("cleanup", "ledger", token, &entry)
            .await
    }
}

/// Two gateways' singleton jobs on one Redis: the leader stalls between its lease check and
/// its commit for twice its lease; the other takes over with a larger token and commits; the
/// stalled leader's commit is then refused.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn a_stalled_leaders_commit_is_rejected_on_redis() {
    let Some(server) = RedisServer::start("a_stalled_leaders_commit_is_rejected_on_redis") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let store = connect(&server, "job:").await;
        let config = |owner: &str| SingletonConfig {
            name: "cleanup".into(),
            owner: owner.into(),
            lease_ttl: Duration::from_millis(200),
            period: Duration::from_millis(50),
        };
        let job = |owner, stall| Ledger {
            store: store.clone(),
            owner,
            stall,
        };
        let env = TokioEnv;
        let mut a = Singleton::new(
            config("a"),
            store.clone(),
            job("a", Duration::from_millis(400)),
            env,
        );
        let mut b = Singleton::new(config("b"), store.clone(), job("b", Duration::ZERO), env);
        let follower = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let mut ticks = Vec::new();
            b.run(|t| {
                ticks.push(t);
                !matches!(t, Tick::Ran { .. })
            })
            .await;
            ticks
        });
        let stalled = a.tick().await;
        let ticks = follower.await.unwrap();
        assert!(
            ticks[..ticks.len() - 1]
                .iter()
                .all(|t| *t == Tick::Follower)
        );
        let Some(&Tick::Ran {
            token: b_token,
            verdict: FenceVerdict::Accepted,
        }) = ticks.last()
        else {
            panic!("b's last tick: {:?}", ticks.last());
        };
        let Tick::Ran {
            token: a_token,
            verdict: FenceVerdict::Stale { highest },
        } = stalled
        else {
            panic!("a's stalled tick: {stalled:?}");
        };
        assert!(
            a_token < b_token && highest == b_token,
            "{a_token} {b_token} {highest}"
        );
        assert_eq!(
            store.fenced_get("cleanup", "ledger").await,
            Ok(Some((b_token, "swept by b".into())))
        );
        assert_eq!(a.token(), None, "a stale verdict drops leadership");
    });
}

/// Regression: a stored value the store did not write (corrupt, foreign, or huge enough to
/// overflow `hi × units + lo`) is a typed store error on both paths — never a panic, and never
/// read as an empty bucket that admits.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn a_corrupt_stored_bucket_is_a_typed_error_on_both_paths() {
    let Some(server) = RedisServer::start("a_corrupt_stored_bucket_is_a_typed_error_on_both_paths")
    else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let store = connect(&server, "corrupt:").await;
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let bad = [
            "340282366920938463463374607431768211455 1", // hi × units overflows u128
            "1 99999999999999999999999",                 // lo beyond its unit
            "12 x",
            "12",
            "",
            "-1 5",
            "1 2 3",
        ];
        for (i, value) in bad.iter().enumerate() {
            let key = Key::new(&format!("k{i}")).unwrap();
            let () = redis::cmd("SET")
                .arg(format!("corrupt:{}", key.as_str()))
                .arg(*value)
                .query_async(&mut conn)
                .await
                .unwrap();
            let naive =
                decide_remote(&store, Path::Naive, TimeSource::Store, &key, Nanos::ZERO, 1).await;
            let atomic = decide_remote(
                &store,
                Path::Atomic,
                TimeSource::Store,
                &key,
                Nanos::ZERO,
                1,
            )
            .await;
            for (path, r) in [("naive", naive), ("atomic", atomic)] {
                assert_eq!(
                    r,
                    Err(ratelab_store::LimitError::Store(
                        ratelab_store::StoreError::Corrupt
                    )),
                    "{path} path on {value:?}"
                );
            }
        }
        // Through the gateway: an unreadable bucket fails that request open, and however many
        // times, the breaker (open after 2 failures) stays shut: it is one key's problem.
        let config = GatewayConfig {
            breaker: BreakerConfig {
                failures_to_open: 2,
                cooldown: Nanos::from_secs(60),
            },
            ..GatewayConfig::default()
        };
        let gw = Gateway::new(config, None, Some(store.clone()), TokioEnv);
        for _ in 0..5 {
            let req = request(b"bad");
            let () = redis::cmd("SET")
                .arg("corrupt:key:bad")
                .arg("12 x")
                .query_async(&mut conn)
                .await
                .unwrap();
            let a = gw.check(req, None).await;
            assert_eq!(
                a.outcome(PER_KEY),
                Some(LayerOutcome::FailedOpen(FailReason::Error))
            );
        }
        assert_eq!(gw.stats().snapshot().breaker_opened, 0);
        // A well-formed value still decides, also where the script's `lo` has 16 digits
        // (R above 10⁶/s).
        let fast = RedisStore::connect(
            &server.url(),
            TokenBucket::per_second(1_000, 2_000_000).unwrap(),
            options("fast:"),
        )
        .await
        .unwrap();
        let key = Key::new("sixteen").unwrap();
        let () = redis::cmd("SET")
            .arg("fast:sixteen")
            .arg("1 1999999999999999")
            .query_async(&mut conn)
            .await
            .unwrap();
        for path in [Path::Naive, Path::Atomic] {
            let r = decide_remote(&fast, path, TimeSource::Store, &key, Nanos::ZERO, 1).await;
            assert!(r.is_ok(), "{path:?} on a 16-digit lo: {r:?}");
        }
        let key = Key::new("fresh").unwrap();
        let ok = decide_remote(
            &store,
            Path::Atomic,
            TimeSource::Store,
            &key,
            Nanos::ZERO,
            1,
        )
        .await;
        assert!(ok.is_ok_and(|o| o.decision.allowed));
        let ok = decide_remote(&store, Path::Naive, TimeSource::Store, &key, Nanos::ZERO, 1).await;
        assert!(ok.is_ok(), "{ok:?}");
    });
}

/// A script call on the lane echoing `n`: its reply, or `None` if the call failed.
async fn lane_call(
    lane: &ratelab_store::redis_lane::Lane,
    n: u64,
) -> Option<ratelab_store::redis_lane::Reply> {
    use ratelab_store::redis_lane::{Arg, Command};
    let echo = [
        Arg::Bytes(b"EVAL"),
        Arg::Bytes(b"return {tonumber(ARGV[1]), tonumber(ARGV[1]) * 2}"),
        Arg::Int(0),
        Arg::Int(n),
    ];
    let rx = lane.call(&Command::new(echo.into_iter())).ok()?;
    tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .expect("answered or failed, never hung")
        .ok()
}

/// The lane, the connection the script calls take: 16 tasks × 100 calls at once each get
/// their own reply (a script echoing its argument); a killed server fails the calls at once
/// and the lane reconnects to the restarted one; a frozen server's connection is dropped once
/// it has been silent for the stall bound, its call failed, never left hanging.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn the_lane_answers_every_call_its_own_reply_and_outlives_kill_restart_and_freeze() {
    use ratelab_store::redis_lane::{Lane, Reply, Target};
    let Some(mut server) = RedisServer::start("the_lane_answers_every_call_its_own_reply") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let stall = Duration::from_millis(300);
        let target = Target::of(&server.url(), Duration::from_millis(500)).expect("plain TCP");
        let lane = Arc::new(Lane::new(target, stall));
        let tasks: Vec<_> = (0..16)
            .map(|t| {
                let lane = lane.clone();
                tokio::spawn(async move {
                    for i in 0..100 {
                        let n = t * 1000 + i;
                        let got = lane_call(&lane, n).await;
                        let n = n as i64;
                        assert_eq!(got, Some(Reply::Ints(vec![n, 2 * n])), "call {n}");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }

        server.kill();
        let started = std::time::Instant::now();
        assert_eq!(lane_call(&lane, 1).await, None, "killed: the call fails");
        assert!(started.elapsed() < Duration::from_secs(1), "at once");
        server.restart();
        let mut back = None;
        for _ in 0..40 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            back = lane_call(&lane, 7).await;
            if back.is_some() {
                break;
            }
        }
        assert_eq!(back, Some(Reply::Ints(vec![7, 14])), "reconnected");

        server.signal("STOP");
        let started = std::time::Instant::now();
        let frozen = lane_call(&lane, 8).await;
        let took = started.elapsed();
        server.signal("CONT");
        assert_eq!(frozen, None, "frozen: the call fails");
        assert!(
            took >= stall && took < 4 * stall,
            "dropped after the stall bound: {took:?}"
        );
        let mut back = None;
        for _ in 0..40 {
            back = lane_call(&lane, 9).await;
            if back.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            back,
            Some(Reply::Ints(vec![9, 18])),
            "a new connection after the freeze"
        );
    });
}

/// A server behind a password, on database 3: the lane authenticates and selects it (the
/// bucket's key lands in database 3), and after `SCRIPT FLUSH` the decision reloads its
/// script and goes on.
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn the_store_authenticates_selects_its_database_and_reloads_a_flushed_script() {
    let Some(server) = RedisServer::start("the_store_authenticates_selects_its_database") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let mut admin = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg("s3cret")
            .query_async(&mut admin)
            .await
            .unwrap();
        let url = format!("redis://:s3cret@127.0.0.1:{}/3", server.port);
        let bucket = TokenBucket::per_second(2, 1).unwrap();
        let store = RedisStore::connect(&url, bucket, options("auth:"))
            .await
            .unwrap();
        let key = Key::new("alice").unwrap();
        let mut db3 = redis::Client::open(url.as_str())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let allowed = |store: &RedisStore| {
            let (store, key) = (store.clone(), key.clone());
            async move { store.apply(&key, None, 1).await.unwrap().decision.allowed }
        };
        assert!(allowed(&store).await);
        let exists: bool = redis::cmd("EXISTS")
            .arg("auth:alice")
            .query_async(&mut db3)
            .await
            .unwrap();
        assert!(exists, "the bucket is in database 3");
        let () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut db3)
            .await
            .unwrap();
        assert!(allowed(&store).await, "the script was loaded again");
        assert!(
            !allowed(&store).await,
            "and the bucket kept its state: B = 2 spent"
        );
        // The store's connections on database 3: the lane, which loaded the script again
        // itself and ran the calls (its last command the call), and redis-rs's, which loaded
        // nothing.
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut db3)
            .await
            .unwrap();
        let last = |cmd: &str| {
            clients
                .lines()
                .filter(|l| l.contains(" db=3 ") && l.contains(&format!(" cmd={cmd} ")))
                .count()
        };
        assert_eq!((last("evalsha"), last("script|load")), (1, 0), "{clients}");
        let wrong = format!("redis://:wrong@127.0.0.1:{}/3", server.port);
        assert!(
            RedisStore::connect(&wrong, bucket, options("auth:"))
                .await
                .is_err(),
            "a wrong password is refused at connect"
        );
    });
}

/// After `SCRIPT FLUSH`, a burst of concurrent calls that all find their script missing loads
/// each script once between them (not once per call), and every call is decided: token-bucket
/// calls and a fixed window's (the limits script), three rounds with a burst, on the lane and
/// through redis-rs (a store that waits for replicas, here for none, takes the general
/// connection).
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn a_burst_of_noscript_replies_loads_each_script_once() {
    let Some(server) = RedisServer::start("a_burst_of_noscript_replies_loads_each_script_once")
    else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        let bucket = TokenBucket::per_second(5, 1).unwrap();
        // Room for the burst's retries behind the loads on a loaded test machine.
        let options = |prefix: &str| RedisOptions {
            prefix: prefix.into(),
            timeout: Duration::from_secs(5),
        };
        let on_lane = RedisStore::connect(&server.url(), bucket, options("lane:"))
            .await
            .unwrap();
        let general = RedisStore::connect(&server.url(), bucket, options("general:"))
            .await
            .unwrap()
            .with_wait(0, Duration::from_millis(100));
        let mut admin = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        for (name, store) in [("lane", on_lane), ("redis-rs", general)] {
            burst_after_a_flush(name, &store, &mut admin).await;
        }
    });
}

/// Rounds of: the scripts flushed, 32 concurrent calls (half token bucket, half a fixed
/// window through `store`), every one decided, two `SCRIPT LOAD`s in all. Redis holds the
/// calls' `EVALSHA`s a moment (`CLIENT PAUSE`, well within the store's timeout) so that they
/// reach it together, as after a restart; a round in which they still did not (a stalled machine) proves nothing about a
/// burst and is run again, up to ten rounds for three bursts.
async fn burst_after_a_flush(
    name: &str,
    store: &RedisStore,
    admin: &mut redis::aio::MultiplexedConnection,
) {
    let window = ratelab_core::Policy::FixedWindow(
        ratelab_core::FixedWindow::new(5, Nanos::from_millis(1_000)).unwrap(),
    );
    let windows = Arc::new(
        ratelab_store::redis_policy::RedisPolicy::new(store, window, &format!("{name}-w:"))
            .unwrap(),
    );
    let mut bursts = 0;
    for round in 0..10 {
        if bursts == 3 {
            break;
        }
        for reset in [
            &["SCRIPT", "FLUSH"][..],
            &["CONFIG", "RESETSTAT"],
            &["CLIENT", "PAUSE", "300"],
        ] {
            let () = redis::cmd(reset[0])
                .arg(&reset[1..])
                .query_async(admin)
                .await
                .unwrap();
        }
        let calls = (0..32).map(|i| {
            let (store, windows) = (store.clone(), windows.clone());
            tokio::spawn(async move {
                let key = Key::new(&format!("k{round}-{i}")).unwrap();
                if i % 2 == 0 {
                    store.apply(&key, None, 1).await.map(|a| a.decision)
                } else {
                    windows.apply(&key, None, 1).await.map(|a| a.decision)
                }
            })
        });
        for c in calls.collect::<Vec<_>>() {
            let d = c.await.unwrap().expect("decided after the loads");
            assert!(d.allowed, "{name}: a fresh key admits: {d:?}");
        }
        let info: String = redis::cmd("INFO")
            .arg("all")
            .query_async(admin)
            .await
            .unwrap();
        // However the calls met Redis, each script was loaded once.
        assert_eq!(
            info_field(&info, "cmdstat_script|load", "calls"),
            2,
            "{name}, round {round}: {info}"
        );
        // A burst: more calls found a script missing than there are scripts.
        if info_field(&info, "errorstat_NOSCRIPT", "count") > 2 {
            bursts += 1;
        }
    }
    assert_eq!(
        bursts, 3,
        "{name}: rounds in which the calls met Redis together"
    );
}

/// After Redis has been down a while and restarts empty, the first call is decided: the lane
/// reconnects and loads the script again itself (`NOSCRIPT`). Loaded through the general
/// connection, which had given up reconnecting during the outage, it failed — and behind
/// the server's breaker one failed probe is another cooldown of fail-open answers
/// (`ratelab audit --explore ratelab-server/token-bucket` found 2 s of them after a restart).
#[test]
#[cfg_attr(
    ratelab_missing_redis,
    ignore = "redis-server is not installed (Debian: apt-get install redis-server)"
)]
fn after_a_restart_the_first_call_is_decided() {
    let Some(mut server) = RedisServer::start("after_a_restart_the_first_call_is_decided") else {
        return;
    };
    let rt = runtime();
    rt.block_on(async {
        // The server's default timeout, within which a call's script load must fit too.
        let bucket = TokenBucket::per_second(5, 20).unwrap();
        let options = RedisOptions {
            prefix: "restart:".into(),
            timeout: Duration::from_millis(50),
        };
        let store = RedisStore::connect(&server.url(), bucket, options)
            .await
            .unwrap();
        let key = Key::new("k").unwrap();
        store.apply(&key, None, 1).await.expect("decided");
        server.kill();
        assert!(
            store.apply(&key, None, 1).await.is_err(),
            "killed: no decision"
        );
        // Down long enough for a connection's reconnect attempts to give up.
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        server.restart();
        // Past the lane's backoff after its failed connect.
        tokio::time::sleep(Duration::from_millis(150)).await;
        let d = store.apply(&key, None, 1).await;
        assert!(d.is_ok(), "the first call after the restart: {d:?}");
    });
}
