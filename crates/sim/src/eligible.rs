//! Which keys the liveness phase holds to: those whose offered load the policy promises to
//! admit in full.
//!
//! A key qualifies when every client sending on it is paced by the clock alone (a constant
//! arrival pattern, not waiting for answers or headers), and the arrival curve of those
//! streams at the store stays within what the policy admits. One stream of rate `r` sends at
//! most ⌊r·(Δt + J)⌋ + 1 requests whose store times fall in any closed interval of length Δt,
//! where J bounds how much the network moves one request against another (the spread of
//! one-way latency, over each store round trip before the per-key call). Then:
//!
//! - token bucket (B, R): the arrivals are admitted in full when the curve is at most
//!   B + R·Δt for every Δt ≥ 0 (a flow that conforms to the bucket's own envelope);
//! - fixed window (L per W), however its windows are placed: the curve at Δt = W is at most L;
//! - sliding-window counter (L per W): its estimate weighs in the previous window, so the
//!   curve at Δt = 2W is at most L.
//!
//! A store with a bound on its keys denies a new key once full, so no key is held to
//! liveness when the keys the clients can send (per layer) could fill one of its shards.
//! Anything the rule cannot settle within its budget of steps is left out, so a key is held
//! to liveness only when the policy's own guarantee covers it.

use crate::scenario::{ClientSpec, Pattern, Scenario};
use ratelab_core::{Nanos, Policy};
use std::collections::BTreeMap;

/// One paced stream on a key: rate per second and cost per request.
#[derive(Clone, Copy, Debug)]
struct Stream {
    rate: u64,
    cost: u64,
}

const SEC: u128 = 1_000_000_000;

/// Most steps of the token bucket's curve the rule evaluates before leaving a key out.
const STEP_BUDGET: usize = 100_000;

/// Whether no layer's store can ever be full: every key the clients can send on a layer fits
/// in one of its shards (the memory store's sharding: `ratelab_store::memory`).
fn never_full(sc: &Scenario) -> bool {
    let max = sc.spec.store.max_keys.get() as usize;
    let shards = ratelab_store::memory::DEFAULT_SHARDS
        .clamp(1, (max / ratelab_store::memory::MIN_KEYS_PER_SHARD).max(1));
    let per_shard = max.div_ceil(shards) as u64;
    let per_key: u64 = sc
        .spec
        .clients
        .iter()
        .map(|c| c.keys.as_ref().map_or(1, |k| k.count.get()))
        .sum();
    // The edge layer keys each client by its own address.
    let edge: u64 = sc.spec.clients.iter().map(|c| c.count.get()).sum();
    per_key <= per_shard && (sc.spec.gateway.edge.is_none() || edge <= per_shard)
}

/// The keys a run's liveness phase checks, in order.
pub(crate) fn liveness_keys(sc: &Scenario) -> Vec<String> {
    if !never_full(sc) {
        return Vec::new();
    }
    let mut streams: BTreeMap<String, Option<Vec<Stream>>> = BTreeMap::new();
    let paced = |c: &ClientSpec| {
        c.arrival.pattern == Pattern::Constant && !c.honour_retry_after && !c.self_throttle
    };
    for c in &sc.spec.clients {
        match (&c.key, &c.keys) {
            (Some(k), _) => {
                let entry = streams.entry(k.clone()).or_insert(Some(Vec::new()));
                match (entry.as_mut(), paced(c)) {
                    (Some(list), true) => {
                        let s = Stream {
                            rate: c.arrival.rate_per_sec.map_or(0, |v| v.get()),
                            cost: c.cost.get(),
                        };
                        list.extend(std::iter::repeat_n(s, c.count.get() as usize));
                    }
                    _ => *entry = None,
                }
            }
            (None, Some(ks)) => {
                // A key set is picked at random: its per-key arrivals are not paced.
                for i in 0..ks.count.get().min(1_000) {
                    streams.insert(format!("{}:{i}", ks.prefix), None);
                }
            }
            (None, None) => {}
        }
    }
    let jitter = jitter(sc);
    streams
        .into_iter()
        .filter(|(_, s)| s.as_ref().is_some_and(|s| admits(&sc.policy, s, jitter)))
        .map(|(k, _)| k)
        .collect()
}

/// How far the network can move one request's store time against another's: the spread of
/// one-way latency over the per-key call's path (the edge layer's round trip first, when
/// there is one), plus a microsecond.
fn jitter(sc: &Scenario) -> Nanos {
    let l = &sc.spec.network.latency;
    let spread = (l.max_us.get() - l.min_us.get()) * 1_000;
    let legs = if sc.spec.gateway.edge.is_some() { 3 } else { 1 };
    Nanos(spread * legs + 1_000)
}

/// The most cost the streams put in any closed interval of length `dt` (ns) at the store.
fn curve(streams: &[Stream], dt: u128, jitter: Nanos) -> u128 {
    let span = dt + u128::from(jitter.as_u64());
    streams
        .iter()
        .map(|s| u128::from(s.cost) * (u128::from(s.rate) * span / SEC + 1))
        .sum()
}

fn admits(policy: &Policy, streams: &[Stream], jitter: Nanos) -> bool {
    match policy {
        Policy::TokenBucket(b) => bucket_admits(
            streams,
            jitter,
            u128::from(b.capacity()),
            u128::from(b.refill_amount()),
            u128::from(b.refill_period().as_u64()),
        ),
        Policy::FixedWindow(w) => {
            curve(streams, u128::from(w.0.window().as_u64()), jitter) <= u128::from(w.0.limit())
        }
        Policy::SlidingWindow(w) => {
            curve(streams, 2 * u128::from(w.0.window().as_u64()), jitter) <= u128::from(w.0.limit())
        }
    }
}

/// Whether the curve stays within `burst + amount·Δt/period` for every Δt ≥ 0.
fn bucket_admits(
    streams: &[Stream],
    jitter: Nanos,
    burst: u128,
    amount: u128,
    period: u128,
) -> bool {
    // Rates in cost per second; the bucket's R = amount/period per ns.
    let rho: u128 = streams
        .iter()
        .map(|s| u128::from(s.cost) * u128::from(s.rate))
        .sum();
    // ρ ≤ R ⇔ ρ·period ≤ amount·10⁹.
    if rho * period > amount * SEC {
        return false;
    }
    let j = u128::from(jitter.as_u64());
    let count: u128 = streams.iter().map(|s| u128::from(s.cost)).sum();
    // The curve lies under count + ρ·(Δt + J)/10⁹: when that line is under the envelope at
    // Δt = 0 it is under it everywhere (its slope is at most R).
    if (count * SEC + rho * j) * period <= burst * SEC * period {
        return true;
    }
    if rho * period == amount * SEC {
        return false;
    }
    // Otherwise the line crosses the envelope at H; check every step of the curve before it.
    // H·(R − ρ) = count + ρ·J − B, in ns: H = (count·10⁹ + ρ·J − B·10⁹)·period /
    // (amount·10⁹ − ρ·period).
    let excess = count * SEC + rho * j - burst * SEC;
    let horizon = excess * period / (amount * SEC - rho * period) + 1;
    let mut steps: Vec<u128> = vec![0];
    for s in streams {
        let rate = u128::from(s.rate);
        if rate == 0 {
            continue;
        }
        // The stream's count steps up where r·(Δt + J) reaches k·10⁹.
        let mut k = (j * rate) / SEC + 1;
        loop {
            let at = (k * SEC).div_ceil(rate).saturating_sub(j);
            if at > horizon {
                break;
            }
            if steps.len() >= STEP_BUDGET {
                return false;
            }
            steps.push(at);
            k += 1;
        }
    }
    steps
        .iter()
        .all(|&dt| curve(streams, dt, jitter) * period <= burst * period + amount * dt)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(rate: u64) -> Vec<Stream> {
        vec![Stream { rate, cost: 1 }]
    }

    #[test]
    fn one_stream_under_the_rate_is_admitted_by_a_bucket_of_one() {
        // B = 1, R = 100/s: a request every 10 ms; a stream at 50/s with 1 ms of jitter fits.
        assert!(bucket_admits(&one(50), Nanos::from_millis(1), 1, 100, SEC));
        // Two streams at 25/s may arrive together: a bucket of one cannot promise both.
        let two = vec![Stream { rate: 25, cost: 1 }; 2];
        assert!(!bucket_admits(&two, Nanos::from_millis(1), 1, 100, SEC));
        assert!(bucket_admits(&two, Nanos::from_millis(1), 2, 100, SEC));
        // Above the rate, never.
        assert!(!bucket_admits(&one(101), Nanos::ZERO, 1_000, 100, SEC));
    }

    #[test]
    fn jitter_larger_than_the_token_time_needs_steps_checked() {
        // B = 1, R = 100/s, a stream at 90/s (11.1 ms apart) moved by up to 5 ms: two can land
        // 1.1 ms apart, sooner than the 10 ms a token takes.
        assert!(!bucket_admits(&one(90), Nanos::from_millis(5), 1, 100, SEC));
        // With B = 2 the curve's steps all stay under the envelope.
        assert!(bucket_admits(&one(90), Nanos::from_millis(5), 2, 100, SEC));
    }

    #[test]
    fn windows_hold_to_the_curve_over_one_or_two_windows() {
        let three = vec![Stream { rate: 14, cost: 1 }; 3];
        let w = Nanos::from_millis(100);
        let j = Nanos::from_millis(1);
        // Three streams at 14/s put up to 6 in a window of 100 ms: not within 5.
        assert_eq!(curve(&three, u128::from(w.as_u64()), j), 6);
        assert_eq!(curve(&three, 2 * u128::from(w.as_u64()), j), 9);
        assert_eq!(curve(&one(10), 2 * u128::from(w.as_u64()), j), 3);
    }
}
