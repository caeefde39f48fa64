//! Swarm generation: one explore seed draws one whole scenario.
//!
//! Every choice comes from the seed's own stream ([`EXPLORE_STREAM`]), apart from the
//! simulation's, so the same explore seed draws the same scenario on any machine, and the
//! simulation of that scenario draws from the scenario's own seed as usual. As in swarm
//! testing (Groce et al. 2012; TigerBeetle's VOPR), each fault kind is switched on or off
//! per seed, so some runs are fault-free and some dense; each feature (an edge limit, a
//! breaker, fail-open, clients that pace themselves, the cleanup job) likewise.
//!
//! The result is an ordinary scenario file: the same types and the same validator as a
//! hand-written one.

use ratelab_core::{Algorithm as _, AlgorithmName, PolicySpec};
use ratelab_sim::faults::{FaultKind, FaultSpec, Shape};
use ratelab_sim::rng::{Draw, SimRng};
use serde_json::{Value, json};

/// The explorer's stream, apart from every stream the simulation draws from.
pub const EXPLORE_STREAM: u64 = 0x6578_706c_6f72_6501;

/// The stream a system under test draws its own parts from (a cleanup job for a cleanup
/// bug, when the seed drew none), apart from the scenario's.
pub const SUT_STREAM: u64 = EXPLORE_STREAM + 1;

/// A cleanup job for seed `seed`, drawn as [`draw`] draws one, from [`SUT_STREAM`]. Its lease
/// tokens come from the store's clock, so it may run beside any store fault.
pub fn cleanup_job(seed: u64) -> Value {
    job(&mut Draw(SimRng::new(seed, SUT_STREAM)))
}

/// A cleanup job's parameters.
fn job(d: &mut Draw) -> Value {
    let period = d.int(50, 500);
    json!({
        "period_ms": period,
        "lease_ms": period * d.int(2, 4),
        "work_ms": d.int(0, period),
        "batch": d.int(1, 50)
    })
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
/// ([`AlgorithmName::shaped`]), as scenario JSON.
pub fn policy(algorithm: AlgorithmName, capacity: u64, refill: u64) -> Value {
    serde_json::to_value(algorithm.shaped(capacity, refill)).expect("a policy spec serializes")
}

/// The capacity and rate per second of a drawn policy (the inverse of [`policy`]): its quota's
/// limit, and that limit over its quota's window. `None` if it is not a valid policy.
pub fn policy_parts(policy: &Value) -> Option<(u64, u64)> {
    let spec: PolicySpec = serde_json::from_value(policy.clone()).ok()?;
    let quota = spec.build().ok()?.quota();
    let rate = u128::from(quota.limit) * 1_000_000_000 / u128::from(quota.window.as_u64().max(1));
    Some((quota.limit, u64::try_from(rate).unwrap_or(u64::MAX).max(1)))
}

/// The scenario explore seed `seed` draws, as scenario JSON (before the system under test
/// adjusts it).
pub fn draw(seed: u64) -> Value {
    let mut d = Draw(SimRng::new(seed, EXPLORE_STREAM));
    let duration = d.int(500, 4_000);
    let gateways = d.int(1, 6);
    let capacity = *d.pick(&[1u64, 2, 5, 10, 20, 50]);
    let refill = *d.pick(&[1u64, 5, 20, 50, 100]);
    let algorithm = *d.pick(&drawn());
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
        clients.push(json!({
            "key": "probe",
            "arrival": { "pattern": "constant", "rate_per_sec": within / 5 }
        }));
    }

    let mut gateway = json!({ "fail_open": d.chance(0.5) });
    if d.chance(0.3) {
        gateway["breaker"] = json!({
            "failures_to_open": d.int(1, 10),
            "cooldown_ms": d.int(10, 500)
        });
    }
    if let Some((capacity, refill_per_sec)) = edge {
        gateway["edge"] = json!({ "capacity": capacity, "refill_per_sec": refill_per_sec });
    }

    let mut spec = json!({
        "description": format!("drawn by `ratelab explore` from explore seed {seed}"),
        "seeds": [seed],
        "duration_ms": duration,
        "gateways": gateways,
        "policy": policy(algorithm, capacity, refill),
        "store": { "path": "atomic", "timeout_ms": timeout_ms },
        "network": { "latency": { "min_us": lat_min, "max_us": lat_max } },
        "gateway": gateway,
        "clients": clients,
        "faults": faults(&mut d, duration, gateways),
    });
    // The job's tokens come from the store's clock: a crash or a failover that loses the
    // lease table does not roll them back.
    if d.chance(0.2) {
        spec["cleanup_job"] = job(&mut d);
    }
    if probe {
        spec["expect"] = json!({ "liveness": true });
    }
    // Sometimes a store with room for few keys, and more keys than that (drawn last, so the
    // draws above stay what they were).
    if d.chance(0.1) {
        spec["store"]["max_keys"] = json!(64);
        if let Some(c) = spec["clients"][0].as_object_mut() {
            c.remove("key");
            c.insert(
                "keys".into(),
                json!({ "prefix": "u", "count": d.int(65, 400) }),
            );
        }
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
        spec["store"]["replica"] = json!({ "lag": { "min_us": lo, "max_us": hi }, "wait": wait });
        if d.chance(0.6) {
            let at = d.int(0, duration - 1);
            let shape = Shape {
                duration_ms: duration,
                gateways,
            };
            let failover = FaultKind::StoreFailover.draw(&mut d, (at, at + 1), &shape);
            let promote = failover.window_ms().map_or(0, |(from, until)| until - from);
            // The store is down once at a time: no failover while a crash has it down.
            let overlaps = spec["faults"].as_array().is_some_and(|fs| {
                fs.iter().any(|f| {
                    let from = f["at_ms"].as_u64().unwrap_or(0);
                    let until = from + f["restart_after_ms"].as_u64().unwrap_or(0);
                    f["kind"] == "store_crash" && at <= until && from <= at + promote
                })
            });
            if let (false, Some(fs)) = (overlaps, spec["faults"].as_array_mut()) {
                fs.push(serde_json::to_value(&failover).expect("a fault serializes"));
            }
        }
    }
    extras(&mut d, &mut spec, capacity, refill);
    spec
}

/// Features drawn last, so that every draw before them stays what it was, each in a fair
/// share of seeds: the gateway's denial cache and bloom guard, boundary bursts and explicit
/// times, costs up to the burst, a key left idle past its state's lifetime, and runs up to
/// 30 s when the refill is slow.
fn extras(d: &mut Draw, spec: &mut Value, capacity: u64, refill: u64) {
    let mut duration = spec["duration_ms"].as_u64().unwrap_or(1_000);
    if d.chance(0.25) {
        spec["gateway"]["denial_cache"] = json!({ "keys": d.int(1, 1_000) });
    }
    // The guard knows the `u` keys; the `k` keys are made up (rejected but for the filter's
    // false positives). Not beside a liveness probe, whose key it would reject.
    if d.chance(0.15) && spec.get("expect").is_none() {
        spec["gateway"]["guard"] = json!({
            "valid_keys": { "prefix": "u", "count": d.int(1, 40) },
            "false_positive_rate": *d.pick(&[0.001, 0.01, 0.1])
        });
    }
    // A window's length, or a bucket's time to refill from empty, ms.
    let full_ms = spec["policy"]["window_ms"]
        .as_u64()
        .unwrap_or(capacity.saturating_mul(1_000) / refill.max(1))
        .max(1);
    if d.chance(0.1) && refill <= 5 {
        duration = d.int(duration, 30_000);
    }
    let Some(clients) = spec["clients"].as_array_mut() else {
        return;
    };
    if d.chance(0.15) {
        let every = full_ms.min(duration);
        clients[0]["arrival"] = json!({
            "pattern": "boundary_bursts",
            "every_ms": every,
            "requests": d.int(1, 2 * capacity),
            "before_ms": d.int(0, every.min(50)),
            "after_ms": d.int(0, every.min(50))
        });
    }
    if d.chance(0.2) {
        let i = d.int(0, clients.len() as u64 - 1) as usize;
        clients[i]["cost"] = json!(d.int(1, capacity));
    }
    if d.chance(0.1) {
        let mut times: Vec<u64> = (0..d.int(1, 30))
            .map(|_| d.int(0, duration * 1_000 - 1))
            .collect();
        times.sort_unstable();
        clients.push(json!({
            "key": "t",
            "arrival": { "pattern": "times", "times_us": times }
        }));
    }
    // A key drained, left idle past the time its state lives, then drained again.
    let gap_at = full_ms.saturating_add(d.int(1, 2 * full_ms));
    if d.chance(0.15) && gap_at < 30_000 {
        duration = duration.max(gap_at + 100);
        for at_ms in [0, gap_at] {
            clients.push(json!({
                "key": "idle",
                "arrival": { "pattern": "burst", "at_ms": at_ms, "requests": capacity }
            }));
        }
    }
    spec["duration_ms"] = json!(duration);
}

fn client(d: &mut Draw, duration: u64, gateways: u64, capacity: u64) -> Value {
    let mut c = json!({ "count": d.int(1, 6) });
    if d.chance(0.5) {
        c["key"] = json!(format!("k{}", d.int(0, 3)));
    } else {
        c["keys"] = json!({ "prefix": "u", "count": d.int(2, 20) });
    }
    c["arrival"] = match d.int(0, 2) {
        0 => json!({ "pattern": "poisson", "rate_per_sec": d.int(1, 400) }),
        1 => json!({ "pattern": "constant", "rate_per_sec": d.int(1, 200) }),
        _ => json!({
            "pattern": "burst",
            "at_ms": d.int(0, duration - 1),
            "requests": d.int(1, 50),
            "spread_ms": d.int(0, 50)
        }),
    };
    if d.chance(0.15) {
        c["honour_retry_after"] = json!(true);
    } else if d.chance(0.15) {
        c["self_throttle"] = json!(true);
    } else if d.chance(0.15) {
        c["retry_at_retry_after"] = json!(true);
    }
    if d.chance(0.2) {
        c["address"] = json!(*d.pick(&["ipv6", "ipv6_shared_prefix"]));
    }
    if d.chance(0.2) {
        c["gateway"] = json!(d.int(0, gateways - 1));
    } else if d.chance(0.3) {
        c["gateway"] = json!("random");
    }
    if d.chance(0.1) {
        c["cost"] = json!(d.int(1, 3.min(capacity)));
    }
    c
}

/// The faults a seed draws: each kind's own draw ([`FaultSpec::draw_all`]).
fn faults(d: &mut Draw, duration: u64, gateways: u64) -> Vec<Value> {
    let shape = Shape {
        duration_ms: duration,
        gateways,
    };
    FaultSpec::draw_all(d, &shape)
        .iter()
        .map(|f| serde_json::to_value(f).expect("a fault serializes"))
        .collect()
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
                assert_eq!(p["algorithm"], a.name(), "{p}");
                assert_eq!(policy_parts(&p), Some((capacity, rate)), "{a}: {p}");
            }
        }
        assert_eq!(policy_parts(&json!({ "algorithm": "fixed_window" })), None);
    }
}
