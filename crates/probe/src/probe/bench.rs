//! What the black-box checker costs: seeded histories shaped like a probe's (closed-loop
//! clients on many keys, each decision at an unknown moment of its flight, waits in whole
//! seconds) judged as a probe judges them, beside the anchor — the same history replayed in
//! the order its store applied it, which is what the simulator's stamped histories allow.
//!
//! The limiter behind each history is `ratelab-core`'s token bucket, applied in decision
//! order: atomically (a correct limiter, which every check must pass), or read at one moment
//! of the flight and written back at a later one (the read-then-write client, whose lost
//! updates the checker must find).

use ratelab_check::linearizable::{self, Initial, Op, Precision, Seen, Spec, Verdict};
use ratelab_check::probe::{
    Claim, Fields, Judging, Observation, Outcome, ProbeHistory, ProbeVerdict, judge,
};
use ratelab_core::{Algorithm, Nanos, TokenBucket, TokenBucketState};
use ratelab_store::rng::StreamRng;
use std::collections::BTreeMap;
use std::time::Instant;

/// The shape of the histories.
#[derive(Clone, Copy, Debug)]
pub struct BenchShape {
    /// Operations per history.
    pub ops: u64,
    /// Keys.
    pub keys: u64,
    /// Closed-loop clients.
    pub concurrency: u64,
    /// The most a client waits between an answer and its next send.
    pub think: Nanos,
    /// Whether the limiter loses updates (reads and writes back in two steps).
    pub lost_updates: bool,
    /// The search budget per key.
    pub budget: u64,
}

/// The bucket every key runs: B = 10, 20 a second.
pub const CLAIM: Claim = Claim::TokenBucket {
    capacity: 10,
    amount: 20,
    period: Nanos(1_000_000_000),
};

/// The clock resolution the histories are judged with: the probe's default.
pub const CLOCK_RESOLUTION: Nanos = Nanos(1_000_000);

/// One history's measurement.
#[derive(Clone, Debug)]
pub struct BenchRun {
    /// The seed.
    pub seed: u64,
    /// Operations admitted.
    pub admitted: u64,
    /// Seconds the probe's judge took (envelope, black-box search, fields).
    pub black_box_s: f64,
    /// Seconds the anchor took: the same operations replayed in store order.
    pub stamped_s: f64,
    /// Keys shown linearizable, with a violation, or unknown (budget spent).
    pub keys: (usize, usize, usize),
    /// The envelope's worst excess.
    pub max_excess: u64,
    /// Requests in flight on average (total flight time over the history's span).
    pub in_flight: f64,
}

/// One request as generated: when it was sent, how long its flight, and where in it the
/// limiter read and wrote (the same moment for an atomic limiter).
struct Planned {
    id: u64,
    client: u64,
    key: u64,
    sent: u64,
    answered: u64,
    read: u64,
    write: u64,
}

fn plan(shape: &BenchShape, seed: u64) -> Vec<Planned> {
    let mut rng = StreamRng::new(seed, 0x9b0b);
    let mut next_send: Vec<u64> = (0..shape.concurrency.max(1))
        .map(|_| rng.below(1_000_000))
        .collect();
    let mut out = Vec::with_capacity(shape.ops as usize);
    for id in 0..shape.ops {
        // The client whose next send is earliest (ties: the lowest index).
        let (client, &sent) = next_send
            .iter()
            .enumerate()
            .min_by_key(|&(i, t)| (*t, i))
            .expect("at least one client");
        let flight = rng.between(100_000, 2_000_000);
        let read = sent + rng.below(flight / 2 + 1);
        let write = if shape.lost_updates {
            read + rng.below(sent + flight - read + 1)
        } else {
            read
        };
        let answered = sent + flight;
        out.push(Planned {
            id,
            client: client as u64,
            key: rng.below(shape.keys.max(1)),
            sent,
            answered,
            read,
            write,
        });
        next_send[client] = answered + rng.below(shape.think.as_u64() + 1);
    }
    out
}

/// A history and its store order: each request's decision, applied in time order (reads
/// and writes as separate events for the read-then-write limiter).
fn history(shape: &BenchShape, seed: u64) -> (ProbeHistory, Vec<u64>) {
    let Claim::TokenBucket {
        capacity,
        amount,
        period,
    } = CLAIM
    else {
        unreachable!("the bench claims a bucket")
    };
    let bucket = TokenBucket::new(capacity, amount, period).expect("a valid bucket");
    let planned = plan(shape, seed);
    // Events: (time, request index, 0 = read / 1 = write). At one instant, one request's
    // read and write stay together, so an atomic request is one step even on a tie.
    let mut events: Vec<(u64, usize, u8)> = Vec::with_capacity(planned.len() * 2);
    for (i, p) in planned.iter().enumerate() {
        events.push((p.read, i, 0));
        events.push((p.write, i, 1));
    }
    events.sort_unstable();
    let mut state: BTreeMap<u64, TokenBucketState> = BTreeMap::new();
    let mut read: Vec<Option<Option<TokenBucketState>>> = vec![None; planned.len()];
    let mut decided: Vec<Option<ratelab_core::Decision>> = vec![None; planned.len()];
    let mut order = Vec::with_capacity(planned.len());
    for (_, i, kind) in events {
        let p = &planned[i];
        if kind == 0 {
            read[i] = Some(state.get(&p.key).copied());
            continue;
        }
        let before = read[i].take().expect("read before write");
        let (next, d) = bucket
            .transition(before, Nanos(p.read), 1)
            .expect("cost 1 fits");
        if d.allowed {
            state.insert(p.key, next);
        }
        decided[i] = Some(d);
        order.push(p.id);
    }
    let observations = planned
        .iter()
        .zip(decided)
        .map(|(p, d)| {
            let d = d.expect("every request decided");
            Observation {
                id: p.id,
                key: format!("k{}", p.key),
                client: p.client as u32,
                instance: 0,
                cost: 1,
                sent: Nanos(p.sent),
                answered: Nanos(p.answered),
                outcome: Outcome::of(d.allowed),
                fields: Fields::rendered(&d),
            }
        })
        .collect();
    (
        ProbeHistory {
            observations,
            retry_probes: Vec::new(),
        },
        order,
    )
}

/// The anchor: every key's operations replayed in the store's order.
fn stamped(h: &ProbeHistory, order: &[u64], spec: &Spec) -> usize {
    let mut stamp = vec![0u64; order.len()];
    for (n, &id) in order.iter().enumerate() {
        stamp[id as usize] = n as u64;
    }
    let mut by_key: BTreeMap<&str, Vec<Op>> = BTreeMap::new();
    for o in &h.observations {
        let seen = match o.outcome {
            Outcome::Allowed => Seen::Allowed {
                at: o.sent,
                remaining: o.fields.remaining,
            },
            _ => Seen::Denied {
                at: o.sent,
                retry_after: o.fields.retry_after,
            },
        };
        by_key.entry(&o.key).or_default().push(Op {
            id: o.id,
            call: o.sent,
            ret: Some(o.answered),
            cost: 1,
            seen,
            stamp: Some(stamp[o.id as usize]),
            precision: Precision {
                decided_within: Nanos(o.answered.as_u64() - o.sent.as_u64()),
                retry_after_unit: Nanos::from_secs(1),
            },
        });
    }
    by_key
        .values()
        .filter(|ops| linearizable::check_key(spec, ops, u64::MAX) == Verdict::Linearizable)
        .count()
}

/// Generates and judges one history.
pub fn run(shape: &BenchShape, seed: u64) -> (BenchRun, ProbeVerdict) {
    let (h, order) = history(shape, seed);
    let began = Instant::now();
    let v = judge(
        &h,
        &Judging {
            claim: CLAIM,
            clock_resolution: CLOCK_RESOLUTION,
            initial: Initial::Full,
            budget: shape.budget,
            exact: true,
            origin: None,
        },
    );
    let black_box_s = began.elapsed().as_secs_f64();
    let spec = CLAIM.spec().expect("a bucket has a spec");
    let began = Instant::now();
    std::hint::black_box(stamped(&h, &order, &spec));
    let stamped_s = began.elapsed().as_secs_f64();
    let l = v.linearizable().expect("a bucket is checked");
    let flight: u64 = h
        .observations
        .iter()
        .map(|o| o.answered.as_u64() - o.sent.as_u64())
        .sum();
    let span = h
        .observations
        .iter()
        .map(|o| o.answered.as_u64())
        .max()
        .unwrap_or(0)
        .saturating_sub(
            h.observations
                .iter()
                .map(|o| o.sent.as_u64())
                .min()
                .unwrap_or(0),
        );
    let run = BenchRun {
        seed,
        admitted: v.figure("admitted"),
        black_box_s,
        stamped_s,
        keys: (
            l.keys - l.violations.len() - l.unknown.len(),
            l.violations.len(),
            l.unknown.len(),
        ),
        max_excess: v.figure("max_excess"),
        in_flight: flight as f64 / span.max(1) as f64,
    };
    (run, v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(lost_updates: bool) -> BenchShape {
        BenchShape {
            ops: 1_500,
            keys: 15,
            concurrency: 64,
            think: Nanos::from_millis(20),
            lost_updates,
            budget: linearizable::DEFAULT_BUDGET,
        }
    }

    #[test]
    fn the_atomic_history_passes_and_the_lost_updates_are_found() {
        let (ok, v) = run(&shape(false), 1);
        assert_eq!(v.failures(), Vec::<String>::new());
        assert_eq!(ok.keys, (15, 0, 0));
        assert!(ok.admitted > 100 && ok.admitted < 1_500, "{ok:?}");
        let (bad, _) = run(&shape(true), 1);
        assert!(bad.keys.1 > 0, "no lost update found: {bad:?}");
    }

    #[test]
    fn the_same_seed_draws_the_same_history() {
        let a = history(&shape(true), 7);
        let b = history(&shape(true), 7);
        assert_eq!(a.0, b.0);
        assert_eq!(a.1, b.1);
    }
}
