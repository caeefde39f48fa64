//! What a simulated request costs without ratelab: the two floors `ratelab bench` measures
//! beside the cluster, on the same load (as many Poisson clients at the same rate, each on
//! its own stream), in the same run.
//!
//! - [`madsim_round_trips`]: madsim alone. Each arrival is a task on a client node that sends
//!   one raw endpoint message to a server node and waits for the echo: one arrival sleep,
//!   one task, two messages. Any simulated request that crosses madsim's network — whose
//!   latency, loss and partitions the scenarios rely on — costs at least this.
//! - [`event_loop`]: no runtime and no network. The arrivals, in a binary heap, each decided
//!   by one GCRA transition on its key: what the decisions themselves cost.
//!
//! Both time themselves with the wall clock, outside any simulation. The madsim floor has
//! madsim shed its finished tasks' records as the cluster does (`src/tasks.rs`), so neither
//! pays for madsim holding them to the end of the run.

use crate::dilation::{dilate, link_latency};
use crate::rng::SimRng;
use madsim::net::Endpoint;
use ratelab_core::{Algorithm, Nanos, TokenBucket};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant as WallInstant};

/// One floor measurement.
#[derive(Clone, Copy, Debug)]
pub struct FloorRun {
    /// Requests completed.
    pub requests: u64,
    /// Wall time it took.
    pub wall: Duration,
}

impl FloorRun {
    /// Requests per wall-clock second.
    pub fn per_sec(&self) -> f64 {
        self.requests as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// The load both floors take: `clients` Poisson streams at `rate` per second each for
/// `seconds`, each client on its own seeded stream, merged in time order.
fn arrivals(clients: u32, rate: u64, seconds: u64, seed: u64) -> Vec<(u64, u32)> {
    let mean = 1e9 / rate.max(1) as f64;
    let end = seconds * 1_000_000_000;
    let mut all = Vec::new();
    for c in 0..clients {
        let mut rng = SimRng::new(seed, u64::from(c));
        let mut t = rng.exponential(mean);
        while t < end {
            all.push((t, c));
            t += rng.exponential(mean);
        }
    }
    all.sort_unstable();
    all
}

const ECHO: u64 = 1;

/// madsim alone: every arrival one round trip between two nodes over a 1 ms link.
pub fn madsim_round_trips(clients: u32, rate: u64, seconds: u64, seed: u64) -> FloorRun {
    let schedule = arrivals(clients, rate, seconds, seed);
    let mut cfg = madsim::Config::default();
    let lat = link_latency(Duration::from_millis(1));
    cfg.net.send_latency = lat..lat + Duration::from_nanos(1);
    let rt = madsim::runtime::Runtime::with_seed_and_config(seed, cfg);
    let wall = WallInstant::now();
    let done = Arc::new(AtomicU64::new(0));
    let counted = done.clone();
    rt.block_on(async move {
        let handle = madsim::runtime::Handle::current();
        let server: SocketAddr = (IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 7).into();
        handle
            .create_node()
            .ip(server.ip())
            .build()
            .spawn(async move {
                let ep = Endpoint::bind(server).await.expect("server binds");
                while let Ok((msg, from)) = ep.recv_from_raw(ECHO).await {
                    if let Ok(tag) = msg.downcast::<u64>() {
                        ep.send_to_raw(from, *tag, Box::new(*tag)).await.ok();
                    }
                }
            });
        let clients_node = handle
            .create_node()
            .ip(IpAddr::V4(Ipv4Addr::new(10, 2, 0, 1)))
            .build();
        clients_node
            .spawn(async move {
                let ep = Arc::new(Endpoint::bind("0.0.0.0:0").await.expect("client binds"));
                let t0 = madsim::time::Instant::now();
                for (i, (t, _)) in schedule.into_iter().enumerate() {
                    madsim::time::sleep_until(t0 + dilate(Duration::from_nanos(t))).await;
                    let (ep, done) = (ep.clone(), counted.clone());
                    let tag = ECHO + 1 + i as u64;
                    madsim::task::spawn(async move {
                        if ep.send_to_raw(server, ECHO, Box::new(tag)).await.is_ok()
                            && ep.recv_from_raw(tag).await.is_ok()
                        {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    crate::tasks::spawned(i as u64);
                }
            })
            .await
            .ok();
        // The last round trips are 2 ms long: let them land.
        madsim::time::sleep(dilate(Duration::from_millis(20))).await;
    });
    FloorRun {
        requests: done.load(Ordering::Relaxed),
        wall: wall.elapsed(),
    }
}

/// No runtime: the same load, each arrival one GCRA decision (B = 100, R = 50/s) on one of
/// `keys` keys, popped from a binary heap of pending arrivals.
pub fn event_loop(clients: u32, rate: u64, seconds: u64, keys: u32, seed: u64) -> FloorRun {
    let bucket = TokenBucket::per_second(100, 50).expect("valid bucket");
    let mean = 1e9 / rate.max(1) as f64;
    let end = seconds * 1_000_000_000;
    let wall = WallInstant::now();
    let mut rngs: Vec<SimRng> = (0..clients)
        .map(|c| SimRng::new(seed, u64::from(c)))
        .collect();
    let mut heap: BinaryHeap<Reverse<(u64, u32)>> = rngs
        .iter_mut()
        .enumerate()
        .map(|(c, r)| Reverse((r.exponential(mean), c as u32)))
        .collect();
    let mut states = vec![None; keys.max(1) as usize];
    let (mut requests, mut admitted) = (0u64, 0u64);
    while let Some(Reverse((t, c))) = heap.pop() {
        if t >= end {
            continue;
        }
        let rng = &mut rngs[c as usize];
        let k = rng.below(u64::from(keys.max(1))) as usize;
        if let Ok((next, d)) = bucket.transition(states[k], Nanos(t), 1) {
            states[k] = Some(next);
            admitted += u64::from(d.allowed);
        }
        requests += 1;
        heap.push(Reverse((t + rng.exponential(mean), c)));
    }
    std::hint::black_box(admitted);
    FloorRun {
        requests,
        wall: wall.elapsed(),
    }
}
