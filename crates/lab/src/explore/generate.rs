//! Swarm generation: one explore seed draws one whole scenario.
//!
//! Every choice comes from the seed's own stream ([`EXPLORE_STREAM`]), apart from the
//! simulation's, so the same explore seed draws the same scenario on any machine, and the
//! simulation of that scenario draws from the scenario's own seed as usual. As in swarm
//! testing (Groce et al. 2012; TigerBeetle's VOPR), each fault kind is switched on or off
//! per seed, so some runs are fault-free and some dense; each feature (an edge limit, a
//! breaker, fail-open, clients that pace themselves, the cleanup job) likewise.
//!
//! The draws go through [`ratelab_sim::Scenario::builder`], the typed builder a test uses,
//! and the result is an ordinary scenario file ([`written`]): the same types and the same
//! validator as a hand-written one.

use ratelab_core::{Algorithm as _, AlgorithmName, PolicySpec};
use ratelab_sim::faults::{FaultKind, FaultSpec, Shape};
use ratelab_sim::rng::{Draw, SimRng};
use ratelab_sim::scenario::{AddressKind, GatewayChoice, ScenarioSpec};
use ratelab_sim::{Client, Fault, Scenario, ScenarioBuilder, ScenarioError};
use serde_json::Value;

/// The explorer's stream, apart from every stream the simulation draws from.
pub const EXPLORE_STREAM: u64 = 0x6578_706c_6f72_6501;

/// The stream a system under test draws its own parts from (a cleanup job for a cleanup
/// bug, when the seed drew none), apart from the scenario's.
pub const SUT_STREAM: u64 = EXPLORE_STREAM + 1;

/// A cleanup job's parameters, as [`ScenarioBuilder::cleanup_job`] takes them.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    period_ms: u64,
    lease_ms: u64,
    work_ms: u64,
    batch: u64,
}

impl Job {
    /// Gives `b` this job.
    pub fn on(self, b: ScenarioBuilder) -> ScenarioBuilder {
        b.cleanup_job(self.period_ms, self.lease_ms, self.work_ms, self.batch)
    }
}

/// A cleanup job for seed `seed`, drawn as [`draw`] draws one, from [`SUT_STREAM`]. Its lease
/// tokens come from the store's clock, so it may run beside any store fault.
pub fn cleanup_job(seed: u64) -> Job {
    job(&mut Draw(SimRng::new(seed, SUT_STREAM)))
}

/// A cleanup job's parameters.
fn job(d: &mut Draw) -> Job {
    let period_ms = d.int(50, 500);
    Job {
        period_ms,
        lease_ms: period_ms * d.int(2, 4),
        work_ms: d.int(0, period_ms),
        batch: d.int(1, 50),
    }
}

/// The algorithms a seed draws from, each as often as it appears: every algorithm once
/// ([`AlgorithmName::ALL`], so a new one is explored from the day it is added), and the token
/// bucket, ratelab's own, twice more.
pub fn drawn() -> Vec<AlgorithmName> {
    let mut drawn = vec![AlgorithmName::TokenBucket; 2];
    drawn.extend_from_slice(AlgorithmName::ALL);
    drawn
}

/// A policy of `algorithm` that admits `capacity` at once and `refill` a second over time
/// ([`AlgorithmName::shaped`]).
pub fn policy(algorithm: AlgorithmName, capacity: u64, refill: u64) -> PolicySpec {
    algorithm.shaped(capacity, refill)
}

/// The capacity and rate per second of a drawn policy (the inverse of [`policy`]): its quota's
/// limit, and that limit over its quota's window. `None` if it is not a valid policy.
pub fn policy_parts(spec: &PolicySpec) -> Option<(u64, u64)> {
    let quota = spec.build().ok()?.quota();
    let rate = u128::from(quota.limit) * 1_000_000_000 / u128::from(quota.window.as_u64().max(1));
    Some((quota.limit, u64::try_from(rate).unwrap_or(u64::MAX).max(1)))
}

/// How a client group was drawn, before it goes into the builder: later draws change some
/// of it (its keys, its arrival, its cost).
#[derive(Clone, Debug)]
struct Drawn {
    count: u64,
    keys: Keys,
    arrival: Arrival,
    pacing: Option<Pacing>,
    address: Option<AddressKind>,
    gateway: Option<GatewayChoice>,
    cost: Option<u64>,
}

#[derive(Clone, Debug)]
enum Keys {
    One(String),
    Set(u64),
}

#[derive(Clone, Debug)]
enum Arrival {
    Poisson(u64),
    Constant(u64),
    Burst {
        at_ms: u64,
        requests: u64,
        spread_ms: Option<u64>,
    },
    BoundaryBursts {
        every_ms: u64,
        requests: u64,
        before_ms: u64,
        after_ms: u64,
    },
    Times(Vec<u64>),
}

#[derive(Clone, Copy, Debug)]
enum Pacing {
    HonourRetryAfter,
    SelfThrottle,
    RetryAtRetryAfter,
}

impl Drawn {
    /// A group of one client on `key` arriving as `arrival`.
    fn one(key: &str, arrival: Arrival) -> Drawn {
        Drawn {
            count: 1,
            keys: Keys::One(key.to_owned()),
            arrival,
            pacing: None,
            address: None,
            gateway: None,
            cost: None,
        }
    }

    /// The group, for the builder.
    fn client(self) -> Client {
        let c = match self.keys {
            Keys::One(key) => Client::key(key),
            Keys::Set(count) => Client::keys("u", count),
        };
        let mut c = c.count(self.count);
        c = match self.arrival {
            Arrival::Poisson(rate) => c.poisson(rate),
            Arrival::Constant(rate) => c.constant(rate),
            Arrival::Burst {
                at_ms,
                requests,
                spread_ms: None,
            } => c.burst(at_ms, requests),
            Arrival::Burst {
                at_ms,
                requests,
                spread_ms: Some(spread),
            } => c.burst_over(at_ms, requests, spread),
            Arrival::BoundaryBursts {
                every_ms,
                requests,
                before_ms,
                after_ms,
            } => c.boundary_bursts(every_ms, requests, before_ms, after_ms),
            Arrival::Times(times) => c.times_us(times),
        };
        c = match self.pacing {
            Some(Pacing::HonourRetryAfter) => c.honour_retry_after(),
            Some(Pacing::SelfThrottle) => c.self_throttle(),
            Some(Pacing::RetryAtRetryAfter) => c.retry_at_retry_after(),
            None => c,
        };
        if let Some(a) = self.address {
            c = c.address(a);
        }
        if let Some(g) = self.gateway {
            c = c.gateway(g);
        }
        match self.cost {
            Some(cost) => c.cost(cost),
            None => c,
        }
    }
}

/// What the first draws of a seed settle, which later draws read.
#[derive(Clone, Copy, Debug)]
struct Settled {
    duration: u64,
    capacity: u64,
    refill: u64,
    algorithm: AlgorithmName,
}

/// The scenario explore seed `seed` draws (before the system under test adjusts it), as a
/// builder: every value drawn from the seed's stream in a fixed order.
pub fn draw(seed: u64) -> ScenarioBuilder {
    let mut d = Draw(SimRng::new(seed, EXPLORE_STREAM));
    let duration = d.int(500, 4_000);
    let gateways = d.int(1, 6);
    let capacity = *d.pick(&[1u64, 2, 5, 10, 20, 50]);
    let refill = *d.pick(&[1u64, 5, 20, 50, 100]);
    let algorithm = *d.pick(&drawn());
    let s = Settled {
        duration,
        capacity,
        refill,
        algorithm,
    };
    let lat_min = d.int(20, 2_000);
    let lat_max = lat_min + d.int(0, 1_000);
    // A deadline above what two layers' round trips take on a healthy link, as anyone
    // would set it: a timeout shorter than the round trip fails every request open.
    let timeout_ms = (*d.pick(&[5u64, 20, 50, 100])).max(8 * lat_max / 1_000 + 1);
    let edge = d
        .chance(0.2)
        .then(|| (*d.pick(&[5u64, 20, 100]), *d.pick(&[5u64, 20, 100])));

    let mut clients = Vec::new();
    for _ in 0..d.int(1, 3) {
        clients.push(client(&mut d, duration, gateways, capacity));
    }
    // Sometimes a probe: one client well within the policy on a key of its own, so the
    // liveness phase has something to hold to.
    let within = edge.map_or(refill, |(_, r)| r.min(refill));
    let probe = d.chance(0.5) && within >= 5;
    if probe {
        clients.push(Drawn::one("probe", Arrival::Constant(within / 5)));
    }

    let mut b = Scenario::builder(format!(
        "drawn by `ratelab explore` from explore seed {seed}"
    ))
    .seeds([seed])
    .gateways(gateways)
    .policy(policy(algorithm, capacity, refill))
    .atomic()
    .store_timeout_ms(timeout_ms)
    .latency_us(lat_min, lat_max)
    .fail_open_if(d.chance(0.5));
    if d.chance(0.3) {
        b = b.breaker(d.int(1, 10), d.int(10, 500));
    }
    if let Some((capacity, refill_per_sec)) = edge {
        b = b.edge(capacity, refill_per_sec);
    }
    let shape = Shape {
        duration_ms: duration,
        gateways,
    };
    let mut faults = FaultSpec::draw_all(&mut d, &shape);
    // The job's tokens come from the store's clock: a crash or a failover that loses the
    // lease table does not roll them back.
    if d.chance(0.2) {
        b = job(&mut d).on(b);
    }
    if probe {
        b = b.liveness();
    }
    // Sometimes a store with room for few keys, and more keys than that (drawn last, so the
    // draws above stay what they were).
    if d.chance(0.1) {
        b = b.max_keys(64);
        clients[0].keys = Keys::Set(d.int(65, 400));
    }
    // Sometimes a replicated store, and then sometimes a failover to its replica (drawn last
    // too).
    if d.chance(0.25) {
        let lo = d.int(0, 2_000);
        let hi = lo + d.int(0, 20_000);
        // Writes wait for the replica only where a wait on each layer still fits in the
        // deadline beside the round trips, as anyone would configure it.
        let headroom = (timeout_ms * 1_000).saturating_sub(8 * lat_max);
        let wait = d.chance(0.3) && 3 * hi < headroom;
        b = b.replica_lag_us(lo, hi, wait);
        if d.chance(0.6) {
            let at = d.int(0, duration - 1);
            let failover = FaultKind::StoreFailover.draw(&mut d, (at, at + 1), &shape);
            let promote = failover.window_ms().map_or(0, |(from, until)| until - from);
            // The store is down once at a time: no failover while a crash has it down.
            let overlaps = faults.iter().any(|f| match f {
                FaultSpec::StoreCrash(c) => {
                    let from = c.at_ms.get();
                    at <= from + c.restart_after_ms.get() && from <= at + promote
                }
                _ => false,
            });
            if !overlaps {
                faults.push(failover);
            }
        }
    }
    for f in faults {
        b = b.fault(Fault::from(f));
    }
    let (b, duration) = extras(&mut d, b, &mut clients, s, !probe);
    clients
        .into_iter()
        .fold(b, |b, c| b.client(c.client()))
        .duration_ms(duration)
}

/// Features drawn last, so that every draw before them stays what it was, each in a fair
/// share of seeds: the gateway's denial cache and bloom guard (`guard` where no liveness
/// probe runs, whose key it would reject), boundary bursts and explicit times, costs up to
/// the burst, a key left idle past its state's lifetime, and runs up to 30 s when the refill
/// is slow. The run's duration, with them.
fn extras(
    d: &mut Draw,
    mut b: ScenarioBuilder,
    clients: &mut Vec<Drawn>,
    s: Settled,
    guard: bool,
) -> (ScenarioBuilder, u64) {
    let mut duration = s.duration;
    if d.chance(0.25) {
        b = b.denial_cache(d.int(1, 1_000));
    }
    // The guard knows the `u` keys; the `k` keys are made up (rejected but for the filter's
    // false positives).
    if d.chance(0.15) && guard {
        b = b.guard("u", d.int(1, 40), *d.pick(&[0.001, 0.01, 0.1]));
    }
    // A window's length, or a bucket's time to refill from empty, ms.
    let full_ms = policy(s.algorithm, s.capacity, s.refill)
        .window_ms
        .unwrap_or(s.capacity.saturating_mul(1_000) / s.refill.max(1))
        .max(1);
    if d.chance(0.1) && s.refill <= 5 {
        duration = d.int(duration, 30_000);
    }
    if d.chance(0.15) {
        let every = full_ms.min(duration);
        clients[0].arrival = Arrival::BoundaryBursts {
            every_ms: every,
            requests: d.int(1, 2 * s.capacity),
            before_ms: d.int(0, every.min(50)),
            after_ms: d.int(0, every.min(50)),
        };
    }
    if d.chance(0.2) {
        let i = d.int(0, clients.len() as u64 - 1) as usize;
        clients[i].cost = Some(d.int(1, s.capacity));
    }
    if d.chance(0.1) {
        let mut times: Vec<u64> = (0..d.int(1, 30))
            .map(|_| d.int(0, duration * 1_000 - 1))
            .collect();
        times.sort_unstable();
        clients.push(Drawn::one("t", Arrival::Times(times)));
    }
    // A key drained, left idle past the time its state lives, then drained again.
    let gap_at = full_ms.saturating_add(d.int(1, 2 * full_ms));
    if d.chance(0.15) && gap_at < 30_000 {
        duration = duration.max(gap_at + 100);
        for at_ms in [0, gap_at] {
            let burst = Arrival::Burst {
                at_ms,
                requests: s.capacity,
                spread_ms: None,
            };
            clients.push(Drawn::one("idle", burst));
        }
    }
    (b, duration)
}

fn client(d: &mut Draw, duration: u64, gateways: u64, capacity: u64) -> Drawn {
    let count = d.int(1, 6);
    let keys = if d.chance(0.5) {
        Keys::One(format!("k{}", d.int(0, 3)))
    } else {
        Keys::Set(d.int(2, 20))
    };
    let arrival = match d.int(0, 2) {
        0 => Arrival::Poisson(d.int(1, 400)),
        1 => Arrival::Constant(d.int(1, 200)),
        _ => Arrival::Burst {
            at_ms: d.int(0, duration - 1),
            requests: d.int(1, 50),
            spread_ms: Some(d.int(0, 50)),
        },
    };
    let pacing = if d.chance(0.15) {
        Some(Pacing::HonourRetryAfter)
    } else if d.chance(0.15) {
        Some(Pacing::SelfThrottle)
    } else if d.chance(0.15) {
        Some(Pacing::RetryAtRetryAfter)
    } else {
        None
    };
    let address = d
        .chance(0.2)
        .then(|| *d.pick(&[AddressKind::Ipv6, AddressKind::Ipv6SharedPrefix]));
    let gateway = if d.chance(0.2) {
        Some(GatewayChoice::Fixed(d.int(0, gateways - 1) as u32))
    } else if d.chance(0.3) {
        Some(GatewayChoice::Random)
    } else {
        None
    };
    let cost = d.chance(0.1).then(|| d.int(1, 3.min(capacity)));
    Drawn {
        count,
        keys,
        arrival,
        pacing,
        address,
        gateway,
        cost,
    }
}

/// `spec` as scenario JSON, written as a person would write it: a field at its default is
/// left out, but for those every drawn scenario gives (its duration, gateways, policy,
/// store path and deadline, latency, failure policy, clients' arrivals and faults), so
/// the shrinker has the same fields to simplify on every seed.
pub fn written(spec: &ScenarioSpec) -> Value {
    let mut v = serde_json::to_value(spec).expect("a scenario spec serializes");
    // Every field at its default, but for those a builder must be given.
    let defaults = serde_json::to_value(
        Scenario::builder("")
            .duration_ms(1)
            .policy(PolicySpec::empty(AlgorithmName::TokenBucket))
            .cleanup_job(1, 1, 0, 1_000)
            .client(Client::key("").constant(1))
            .written()
            .expect("the defaults are in range"),
    )
    .expect("a scenario spec serializes");
    let client_default = defaults["clients"][0].clone();
    // A field at its default is left out, but for those every drawn scenario writes.
    fn prune(v: &mut Value, default: &Value, kept: &[&str]) {
        let (Value::Object(map), Value::Object(def)) = (v, default) else {
            return;
        };
        map.retain(|k, child| {
            !child.is_null() && (kept.contains(&k.as_str()) || def.get(k) != Some(child))
        });
    }
    prune(
        &mut v,
        &defaults,
        &[
            "description",
            "seeds",
            "duration_ms",
            "gateways",
            "policy",
            "store",
            "network",
            "gateway",
            "clients",
            "faults",
        ],
    );
    for (part, kept) in [
        ("store", &["path", "timeout_ms"][..]),
        ("network", &["latency"]),
        ("gateway", &["fail_open"]),
        ("expect", &[]),
        ("cleanup_job", &[]),
    ] {
        if let Some(child) = v.get_mut(part) {
            prune(child, &defaults[part], kept);
        }
    }
    if let Some(clients) = v["clients"].as_array_mut() {
        for c in clients {
            prune(c, &client_default, &["arrival", "key", "keys"]);
        }
    }
    v
}

/// [`written`] of what `b` wrote, or what is out of range in it.
pub fn json(b: ScenarioBuilder) -> Result<Value, ScenarioError> {
    Ok(written(&b.written()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_algorithm_is_drawn_and_shaped_back() {
        for &a in AlgorithmName::ALL {
            assert!(drawn().contains(&a), "{a} is never drawn");
            for (capacity, rate) in [(1, 1), (5, 20), (50, 100), (2, 5)] {
                let p = policy(a, capacity, rate);
                assert_eq!(p.algorithm, a, "{p:?}");
                assert_eq!(policy_parts(&p), Some((capacity, rate)), "{a}: {p:?}");
            }
        }
        assert_eq!(
            policy_parts(&PolicySpec::empty(AlgorithmName::FixedWindow)),
            None
        );
    }
}
