//! Which keys the liveness phase holds to: those whose offered load the policy promises to
//! admit in full.
//!
//! A key qualifies when every client sending on it is paced by the clock alone (a constant
//! arrival pattern, not waiting for answers or headers), and the arrival curve of those
//! streams at the store stays within what the policy admits. One stream of rate `r` sends at
//! most ⌊r·(Δt + J)⌋ + 1 requests whose store times fall in any closed interval of length Δt,
//! where J bounds how much the network moves one request against another (the spread of
//! one-way latency, over each store round trip before the per-key call).
//!
//! What the policy admits is its family's promise, [`Family::sustains`] (every family states
//! one, so a new algorithm cannot be missed here):
//!
//! - a bucket's curve (B, R) (the token bucket's own envelope; a stepped bucket's B − A at
//!   A per period): the arrivals are admitted in full when the curve is at most B + R·Δt for
//!   every Δt ≥ 0 (a flow that conforms to the bucket's envelope), and their rate is at most
//!   R/2, so a bucket the faults left empty is full again within the two fill times the
//!   phase waits after the last fault;
//! - a window's (L in any span S): the fixed window's S = W, however its windows are placed
//!   (aligned to the clock, or opened by a key's first request: each window lies within a
//!   closed interval of length W); the sliding-window counter's S = 2W, its estimate
//!   weighing in the previous window: the curve at Δt = S is at most L.
//!
//! Each client is also its own address at the edge limit, so its stream must pass the edge
//! bucket by the same rule; a key outside a guard's valid keys is rejected, and a key a key
//! set also draws is not paced, so neither qualifies. A store with a bound on its keys
//! denies a new key once full, so no key is held to liveness when the keys the clients can
//! send (per layer) could fill one of its shards; and a gateway deciding on its own clock
//! (`time_source: gateway`) is promised nothing, since its clock may be skewed.
//! Anything the rule cannot settle within its budget of steps is left out, so a key is held
//! to liveness only when the policy's own guarantee covers it.

use crate::scenario::{AddressKind, ClientSpec, Pattern, Scenario};
use crate::spec::WithFamily;
use ratelab_check::family::{Family, Sustains};
use ratelab_core::{Nanos, Policy};
use std::collections::BTreeMap;

/// Identical paced streams on a key: rate per second, cost per request, how many.
#[derive(Clone, Copy, Debug)]
struct Stream {
    rate: u64,
    cost: u64,
    count: u64,
}

const SEC: u128 = 1_000_000_000;

/// Most steps of the token bucket's curve the rule evaluates before leaving a key out.
const STEP_BUDGET: usize = 100_000;

/// Whether no layer's store can ever be full: every key the clients can send on a layer fits
/// in one of its shards (the memory store's sharding: `ratelab_store::memory`).
fn never_full(sc: &Scenario) -> bool {
    let per_shard = ratelab_store::memory::keys_per_shard(
        ratelab_store::memory::DEFAULT_SHARDS,
        sc.spec.store.max_keys.get() as usize,
    ) as u64;
    let per_key: u64 = sc
        .spec
        .clients
        .iter()
        .map(|c| c.keys.as_ref().map_or(1, |k| k.count.get()))
        .sum();
    // The edge layer keys each client by its own network: one per client, one per group
    // that shares an IPv6 /64.
    let edge: u64 = sc.spec.clients.iter().map(edge_buckets).sum();
    per_key <= per_shard && (sc.spec.gateway.edge.is_none() || edge <= per_shard)
}

/// The edge buckets a client group's requests fall in: one per client, or one for a group
/// sharing an IPv6 /64.
fn edge_buckets(c: &ClientSpec) -> u64 {
    match c.address {
        AddressKind::Ipv6SharedPrefix => 1,
        AddressKind::Ipv4 | AddressKind::Ipv6 => c.count.get(),
    }
}

/// Whether `key` is one of a key set's keys (`prefix:i`, i below its count).
fn in_set(key: &str, prefix: &str, count: u64) -> bool {
    key.strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix(':'))
        .and_then(|i| i.parse::<u64>().ok())
        .is_some_and(|i| i < count)
}

/// The keys a run's liveness phase checks, in order.
pub(crate) fn liveness_keys(sc: &Scenario) -> Vec<String> {
    if sc.time_source == ratelab_store::TimeSource::Caller || !never_full(sc) {
        return Vec::new();
    }
    let jitter = jitter(sc);
    let paced = |c: &ClientSpec| c.arrival.pattern() == Pattern::Constant && !c.waits_for_answers();
    let edge = sc
        .spec
        .gateway
        .edge
        .map(|e| (e.capacity.get(), e.refill_per_sec.get()));
    // Each edge bucket's streams: a client's own, or its whole group's when the group
    // shares one IPv6 /64.
    let passes_edge = |s: Stream, c: &ClientSpec| {
        edge.is_none_or(|(b, r)| {
            let per_bucket = Stream {
                count: s.count / edge_buckets(c),
                ..s
            };
            bucket_admits(&[per_bucket], jitter, u128::from(b), u128::from(r), SEC)
        })
    };
    let mut streams: BTreeMap<&str, Option<Vec<Stream>>> = BTreeMap::new();
    for c in &sc.spec.clients {
        let Some(k) = &c.key else {
            continue;
        };
        let s = Stream {
            rate: c.arrival.rate_per_sec().unwrap_or(0),
            cost: c.cost.get(),
            count: c.count.get(),
        };
        let entry = streams.entry(k.as_str()).or_insert(Some(Vec::new()));
        match entry.as_mut() {
            Some(list) if paced(c) && passes_edge(s, c) => list.push(s),
            _ => *entry = None,
        }
    }
    let sets: Vec<(&str, u64)> = sc
        .spec
        .clients
        .iter()
        .filter_map(|c| c.keys.as_ref().map(|k| (k.prefix.as_str(), k.count.get())))
        .collect();
    let guard = sc.spec.gateway.guard.as_ref();
    streams
        .into_iter()
        .filter(|(k, _)| !sets.iter().any(|(p, n)| in_set(k, p, *n)))
        .filter(|(k, _)| {
            guard.is_none_or(|g| in_set(k, &g.valid_keys.prefix, g.valid_keys.count.get()))
        })
        .filter(|(_, s)| s.as_ref().is_some_and(|s| admits(&sc.policy, s, jitter)))
        .map(|(k, _)| k.to_owned())
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
        .map(|s| u128::from(s.count) * u128::from(s.cost) * (u128::from(s.rate) * span / SEC + 1))
        .sum()
}

fn admits(policy: &Policy, streams: &[Stream], jitter: Nanos) -> bool {
    crate::spec::with_family(policy, Admits { streams, jitter })
}

/// Whether the streams stay within what a family sustains ([`Family::sustains`]).
struct Admits<'a> {
    streams: &'a [Stream],
    jitter: Nanos,
}

impl WithFamily for Admits<'_> {
    type Out = bool;

    fn with<F: Family>(self, family: &F) -> bool {
        match family.sustains() {
            Sustains::Bucket {
                burst,
                amount,
                period,
            } => bucket_admits(
                self.streams,
                self.jitter,
                u128::from(burst),
                u128::from(amount),
                u128::from(period.as_u64()),
            ),
            Sustains::Window { limit, span } => {
                curve(self.streams, u128::from(span.as_u64()), self.jitter) <= u128::from(limit)
            }
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
        .map(|s| u128::from(s.count) * u128::from(s.cost) * u128::from(s.rate))
        .sum();
    // ρ ≤ R/2 ⇔ 2·ρ·period ≤ amount·10⁹: an emptied bucket refills within two fill times.
    if 2 * rho * period > amount * SEC {
        return false;
    }
    let j = u128::from(jitter.as_u64());
    let count: u128 = streams
        .iter()
        .map(|s| u128::from(s.count) * u128::from(s.cost))
        .sum();
    // The curve lies under count + ρ·(Δt + J)/10⁹: when that line is under the envelope at
    // Δt = 0 it is under it everywhere (its slope is at most R).
    if (count * SEC + rho * j) * period <= burst * SEC * period {
        return true;
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

    fn streams(rate: u64, count: u64) -> Vec<Stream> {
        vec![Stream {
            rate,
            cost: 1,
            count,
        }]
    }

    #[test]
    fn one_stream_within_half_the_rate_is_admitted_by_a_bucket_of_one() {
        // B = 1, R = 100/s: a token every 10 ms. A stream at 50/s (20 ms apart) moved by up
        // to 1 ms: the line through the curve's steps is above B at Δt = 0, so its steps are
        // checked, and they fit.
        assert!(bucket_admits(
            &streams(50, 1),
            Nanos::from_millis(1),
            1,
            100,
            SEC
        ));
        // Two streams at 25/s may arrive together: a bucket of one cannot promise both.
        assert!(!bucket_admits(
            &streams(25, 2),
            Nanos::from_millis(1),
            1,
            100,
            SEC
        ));
        assert!(bucket_admits(
            &streams(25, 2),
            Nanos::from_millis(1),
            2,
            100,
            SEC
        ));
        // Above half the rate, never: a bucket the faults emptied would not refill in time.
        assert!(!bucket_admits(
            &streams(51, 1),
            Nanos::ZERO,
            1_000,
            100,
            SEC
        ));
    }

    #[test]
    fn jitter_larger_than_the_token_time_fails_at_a_step() {
        // B = 1, R = 100/s, a stream at 50/s (20 ms apart) moved by up to 15 ms: two can land
        // 5 ms apart, sooner than the 10 ms a token takes; the step at Δt = 5 ms shows it.
        assert!(!bucket_admits(
            &streams(50, 1),
            Nanos::from_millis(15),
            1,
            100,
            SEC
        ));
        assert_eq!(curve(&streams(50, 1), 5_000_000, Nanos::from_millis(15)), 2);
        // Within 5 ms of jitter the same stream fits.
        assert!(bucket_admits(
            &streams(50, 1),
            Nanos::from_millis(5),
            1,
            100,
            SEC
        ));
    }

    #[test]
    fn windows_hold_to_the_curve_over_one_or_two_windows() {
        let three = streams(14, 3);
        let w = Nanos::from_millis(100);
        let j = Nanos::from_millis(1);
        // Three streams at 14/s put up to 6 in a window of 100 ms: not within 5.
        assert_eq!(curve(&three, u128::from(w.as_u64()), j), 6);
        assert_eq!(curve(&three, 2 * u128::from(w.as_u64()), j), 9);
        assert_eq!(curve(&streams(10, 1), 2 * u128::from(w.as_u64()), j), 3);
    }

    #[test]
    fn key_set_membership_reads_the_index() {
        assert!(in_set("u:1500", "u", 2_000));
        assert!(!in_set("u:2000", "u", 2_000));
        assert!(!in_set("user:1", "u", 2_000));
        assert!(!in_set("u:x", "u", 2_000));
    }
}
