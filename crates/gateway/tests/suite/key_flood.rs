//! A flood of new keys must not switch limiting off. The store holds a bounded number of
//! keys; once it is full, a *new* key is denied (`StoreFull`) and counts neither as a store
//! failure nor toward the breaker, so existing keys go on being limited exactly. And an IPv6
//! client rotating through its /64 is one client to the edge limit.

use ratelab_check::envelope::{Admission, Envelope, envelope};
use ratelab_core::{Nanos, Policy, TokenBucket};
use ratelab_gateway::limits::{NoHeaders, PER_KEY};
use ratelab_gateway::{BreakerConfig, Env, Gateway, GatewayConfig, LayerOutcome, Request, Verdict};
use ratelab_store::memory::PURGE_STEPS;
use ratelab_store::{LocalClient, MemoryStore};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

thread_local! {
    /// Each test runs on its own thread, with its own clock.
    static CLOCK: Cell<u64> = const { Cell::new(0) };
}

fn tick() -> Nanos {
    Nanos(CLOCK.with(Cell::get))
}

fn set_clock(t: Nanos) {
    CLOCK.with(|c| c.set(t.as_u64()));
}

#[derive(Clone, Copy, Debug)]
struct FakeEnv;

impl Env for FakeEnv {
    fn now(&self) -> Nanos {
        tick()
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
type Client = LocalClient<Policy, Clock>;

/// The key limit of the flooded store.
const MAX_KEYS: usize = 1_000;

fn client(bucket: TokenBucket, max_keys: usize) -> Client {
    let store = MemoryStore::with_backend(Policy::TokenBucket(bucket), 16, max_keys);
    LocalClient::new(Arc::new(store), tick as Clock)
}

fn gateway(edge: Option<Client>, per_key: Client) -> Gateway<Client, FakeEnv> {
    let config = GatewayConfig {
        id_seed: Some(1),
        // A breaker that would open after 5 consecutive failures.
        breaker: BreakerConfig {
            failures_to_open: 5,
            cooldown: Nanos::from_secs(1),
        },
        ..GatewayConfig::default()
    };
    Gateway::new(config, edge, Some(per_key), FakeEnv)
}

fn request<'a>(peer: IpAddr, key: &'a [u8]) -> Request<'a> {
    Request {
        peer,
        api_key: Some(key),
        route: "/",
        method: "GET",
        headers: &NoHeaders,
        cost: 1,
        trace: 0,
    }
}

#[test]
fn ten_times_the_key_limit_in_new_keys_leaves_the_victim_limited_exactly() {
    let bucket = TokenBucket::per_second(5, 1).unwrap();
    let per_key = client(bucket, MAX_KEYS);
    let store = per_key.clone();
    let gw = gateway(None, per_key);
    let peer: IpAddr = "192.0.2.1".parse().unwrap();
    let mut victim = Vec::new();
    let mut flood_full = 0u64;
    // 10 s: every ms one new key (10 000 in all, 10× the limit); every 10 ms the victim.
    for ms in 0..10_000u64 {
        set_clock(Nanos::from_millis(ms));
        let key = format!("flood:{ms}");
        let a = ready(gw.check(request(peer, key.as_bytes()), None));
        if a.outcome(PER_KEY) == Some(LayerOutcome::StoreFull) {
            assert_eq!(
                a.verdict,
                Verdict::Deny,
                "a new key on a full store is denied"
            );
            assert_eq!(a.status, 429);
            flood_full += 1;
        }
        if ms % 10 == 0 {
            let a = ready(gw.check(request(peer, b"victim"), None));
            match a.outcome(PER_KEY) {
                Some(LayerOutcome::Decided {
                    decision,
                    decided_at,
                }) => {
                    if decision.allowed {
                        victim.push(Admission {
                            at: decided_at,
                            id: ms,
                            cost: 1,
                        });
                    }
                }
                other => panic!("the victim's key was not decided at {ms} ms: {other:?}"),
            }
        }
    }
    let stats = gw.stats().snapshot();
    println!(
        "flood: {flood_full} new keys denied as store_full; victim admitted {}; {stats:?}; store {:?}",
        victim.len(),
        store.store().stats()
    );
    assert!(flood_full > 1_000, "the store filled up: {flood_full}");
    assert_eq!(stats.denied_store_full, flood_full);
    assert_eq!(stats.fail_open(), 0, "nothing failed open");
    assert_eq!(
        stats.breaker_opened, 0,
        "a full store is not a failing store"
    );
    // The victim: B + R·Δt exactly, over its 10 s of requests at 100/s.
    let admitted = victim.len() as u64;
    let r = envelope(
        &BTreeMap::from([("victim", victim)]),
        Envelope::of_bucket(&bucket),
    );
    assert_eq!(r.max_excess, 0, "{r:?}");
    assert_eq!(
        admitted,
        5 + 9,
        "B = 5 at 0 s, then one per second to 9.99 s"
    );
    // Bounded work per request: a new key on a full shard looks at most PURGE_STEPS entries.
    let s = store.store().stats();
    assert!(s.entries <= MAX_KEYS as u64 + 16, "{s:?}");
    assert!(
        s.swept <= PURGE_STEPS as u64 * s.calls,
        "swept {} entries in {} calls",
        s.swept,
        s.calls
    );
}

#[test]
fn an_ipv6_client_rotating_through_its_64_is_one_client_to_the_edge() {
    let edge_bucket = TokenBucket::per_second(10, 1).unwrap();
    let edge = client(edge_bucket, MAX_KEYS);
    let per_key = client(TokenBucket::per_second(1_000, 1_000).unwrap(), MAX_KEYS);
    let (edge_store, key_store) = (edge.clone(), per_key.clone());
    let gw = gateway(Some(edge), per_key);
    let mut admitted = 0u64;
    // 5 000 requests in 5 s, each from a new address in 2001:db8:1:2::/64, each a new key.
    for i in 0..5_000u64 {
        set_clock(Nanos::from_millis(i));
        let peer = IpAddr::V6(
            (0x2001_0db8_0001_0002_0000_0000_0000_0000u128 | u128::from(i * 7919 + 1)).into(),
        );
        let key = format!("k{i}");
        let a = ready(gw.check(request(peer, key.as_bytes()), None));
        admitted += u64::from(a.verdict == Verdict::Allow);
    }
    println!(
        "admitted {admitted}; edge {:?}; per-key {:?}",
        edge_store.store().stats(),
        key_store.store().stats()
    );
    assert_eq!(admitted, 10 + 4, "one bucket for the /64: B = 10, then 1/s");
    assert_eq!(edge_store.store().stats().entries, 1, "one edge key");
    assert_eq!(
        key_store.store().stats().entries,
        admitted,
        "an edge denial spends nothing at the per-key layer"
    );
}
