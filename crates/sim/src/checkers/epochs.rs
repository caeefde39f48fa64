//! Store epochs and failovers, as every safety checker sees them: a crash starts a fresh
//! epoch from full buckets, a failover one from a bucket in an unknown state, a little behind
//! the primary; the admissions and operations of a run grouped by epoch and key.

use crate::Scenario;
use crate::faults::Outage;
use crate::scenario::{PathName, ms};
use ratelab_check::Admission;
use ratelab_check::checker::{Class, Failure};
use ratelab_check::envelope::{self, Envelope};
use ratelab_check::history::History;
use ratelab_check::linearizable::{Initial, Op, Seen};
use ratelab_core::Nanos;
use std::collections::BTreeMap;

/// When each epoch of the store begins, and whether its buckets start full: 0; each crash
/// and its restart (full: every bucket was lost); with `failovers`, each failover and its
/// promotion (unknown: the replica's state, behind the primary's).
pub(crate) fn epochs(sc: &Scenario, failovers: bool) -> Vec<(Nanos, Initial)> {
    let mut starts = vec![(Nanos::ZERO, Initial::Full)];
    for f in &sc.spec().faults {
        let initial = match f.outage() {
            Some(Outage::Restart) => Initial::Full,
            Some(Outage::Failover) if failovers => Initial::Unknown,
            _ => continue,
        };
        let Some((at, back)) = f.window_ms() else {
            continue;
        };
        starts.push((Nanos::from_millis(at), initial));
        starts.push((Nanos::from_millis(back), initial));
    }
    starts.sort_unstable_by_key(|&(t, i)| (t, i == Initial::Full));
    // Where a crash and a failover start together, the crash's fresh start wins.
    starts.dedup_by(|later, first| {
        later.0 == first.0 && {
            first.1 = later.1;
            true
        }
    });
    starts
}

pub(crate) fn epoch_of(starts: &[(Nanos, Initial)], t: Nanos) -> usize {
    starts.partition_point(|&(s, _)| s <= t).saturating_sub(1)
}

/// A failover, as the checkers see it: the primary died at `kill` and the replica took over
/// at `promoted`; an admission decided from `lost_from` on may not have reached the replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failover {
    pub(crate) lost_from: Nanos,
    pub(crate) kill: Nanos,
    pub(crate) promoted: Nanos,
}

/// The failovers of `sc` that can lose acknowledged admissions: none when every write waits
/// for the replica. An admission's write reaches the replica at most its largest lag after
/// it was decided, and on the naive path the write follows the decision within the
/// request's deadline.
pub(crate) fn failovers(sc: &Scenario) -> Vec<Failover> {
    let spec = sc.spec();
    let Some(replica) = spec.store.replica.filter(|r| !r.wait) else {
        return Vec::new();
    };
    let mut behind = Nanos(replica.lag.max_us.get() * 1_000);
    if spec.store.path == PathName::Naive {
        behind = behind.saturating_add(ms(spec.store.timeout_ms.get()));
    }
    let mut out: Vec<Failover> = spec
        .faults
        .iter()
        .filter(|f| f.outage() == Some(Outage::Failover))
        .filter_map(|f| f.window_ms())
        .map(|(kill, promoted)| Failover {
            lost_from: ms(kill).saturating_sub(behind),
            kill: ms(kill),
            promoted: ms(promoted),
        })
        .collect();
    // In time order, whatever the file's order: the lifetimes between them are consecutive.
    out.sort_unstable_by_key(|f| f.kill);
    out
}

/// What `failovers` can have re-granted on one key whose admissions are `adm`: per failover,
/// at most min(`burst`, the cost admitted from what it can have lost to the promotion).
pub(crate) fn failover_allowance(adm: &[Admission], failovers: &[Failover], burst: u64) -> u64 {
    failovers
        .iter()
        .map(|f| {
            let lost: u64 = adm
                .iter()
                .filter(|a| a.at >= f.lost_from && a.at <= f.promoted)
                .map(|a| a.cost)
                .sum();
            lost.min(burst)
        })
        .sum()
}

/// The first key of `by_key` beyond its bound: its excess (`excess` of its admissions), and
/// what its failovers allow. Each primary's lifetime, between failovers, must hold the
/// bound exactly (one store, one state); across failovers a key may exceed it by its
/// allowance and no more.
pub(crate) fn beyond_allowance(
    by_key: &BTreeMap<&str, Vec<Admission>>,
    failovers: &[Failover],
    burst: u64,
    excess: &dyn Fn(&str, &[Admission]) -> u64,
) -> Option<(u64, String, u64)> {
    by_key.iter().find_map(|(&key, adm)| {
        let mut from = Nanos::ZERO;
        for life in failovers
            .iter()
            .map(|f| (f.kill, f.promoted))
            .chain([(Nanos(u64::MAX), Nanos(u64::MAX))])
        {
            let lived: Vec<Admission> = adm
                .iter()
                .filter(|a| a.at >= from && a.at <= life.0)
                .copied()
                .collect();
            let e = excess(key, &lived);
            if e > 0 {
                return Some((e, key.to_owned(), 0));
            }
            from = life.1;
        }
        let allowed = failover_allowance(adm, failovers, burst);
        let e = excess(key, adm);
        (e > allowed).then(|| (e, key.to_owned(), allowed))
    })
}

/// The excess of one key's admissions over `env`.
pub(crate) fn envelope_excess(env: Envelope) -> impl Fn(&str, &[Admission]) -> u64 {
    move |key, adm| {
        let one = BTreeMap::from([(key, adm.to_vec())]);
        envelope::envelope(&one, env).max_excess
    }
}

/// A failure of bound `bound` on `key` in `epoch`: `what` happened, where its failovers
/// allowed `allowed`.
pub(crate) fn beyond(bound: &str, epoch: usize, key: &str, what: String, allowed: u64) -> Failure {
    let allowance = if allowed > 0 {
        format!(", where its failovers allow {allowed}")
    } else {
        String::new()
    };
    Failure::new(
        Class::Safety,
        bound,
        format!("epoch {epoch}: {what} on key {key:?}{allowance}"),
    )
}

/// Per store epoch (crashes only) and key: the admissions (each sorted by time); and, when
/// `with_ops`, per epoch (failovers too) and key, the per-key layer's operations, with how
/// each such epoch starts.
pub(crate) type Grouped<'h> = (
    BTreeMap<usize, BTreeMap<&'h str, Vec<Admission>>>,
    BTreeMap<(usize, &'h str), Vec<Op>>,
    Vec<(Nanos, Initial)>,
);

pub(crate) fn grouped<'h>(sc: &Scenario, h: &'h History, with_ops: bool) -> Grouped<'h> {
    let crashes = epochs(sc, false);
    let starts = epochs(sc, true);
    let mut admitted: BTreeMap<usize, BTreeMap<&str, Vec<Admission>>> = BTreeMap::new();
    let mut ops: BTreeMap<(usize, &str), Vec<Op>> = BTreeMap::new();
    for r in &h.requests {
        let Some(op) = Op::per_key(r) else {
            continue;
        };
        if let Seen::Allowed { at, .. } = op.seen {
            admitted
                .entry(epoch_of(&crashes, at))
                .or_default()
                .entry(r.key.as_str())
                .or_default()
                .push(Admission {
                    at,
                    id: r.id,
                    cost: r.cost,
                });
        }
        // An answered request belongs to the epoch it was decided in; an unanswered one may
        // have been applied in the epoch it was sent in or any later one (a message in
        // flight across a restart reaches the new store).
        let epochs = match op.seen {
            Seen::Allowed { at, .. } | Seen::Denied { at, .. } => {
                let e = epoch_of(&starts, at);
                e..e + 1
            }
            Seen::Unknown => epoch_of(&starts, r.sent_at)..starts.len(),
        };
        if with_ops {
            for e in epochs {
                ops.entry((e, r.key.as_str())).or_default().push(op);
            }
        }
    }
    for by_key in admitted.values_mut() {
        for adm in by_key.values_mut() {
            adm.sort_unstable();
        }
    }
    (admitted, ops, starts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adm(at_ms: u64, cost: u64) -> Admission {
        Admission {
            at: Nanos::from_millis(at_ms),
            id: at_ms,
            cost,
        }
    }

    /// B = 2, one token per 100 ms.
    const ENV: Envelope = Envelope {
        burst: 2,
        amount: 1,
        period: 100_000_000,
    };

    fn failover(lost_from: u64, kill: u64, promoted: u64) -> Failover {
        Failover {
            lost_from: Nanos::from_millis(lost_from),
            kill: Nanos::from_millis(kill),
            promoted: Nanos::from_millis(promoted),
        }
    }

    #[test]
    fn a_failover_allows_what_was_admitted_in_its_window_capped_at_b() {
        let a = [adm(10, 1), adm(95, 1), adm(99, 1), adm(150, 1), adm(400, 1)];
        let f = [failover(90, 100, 200)];
        assert_eq!(failover_allowance(&a, &f, 5), 3);
        assert_eq!(failover_allowance(&a, &f, 2), 2);
        assert_eq!(failover_allowance(&a, &[], 5), 0);
    }

    #[test]
    fn excess_across_a_failover_passes_within_its_allowance_and_excess_within_a_life_fails() {
        let excess = envelope_excess(ENV);
        // Two admitted just before the kill, their writes lost, and two more at the
        // promotion: four in 10 ms on a bucket of two, across the failover.
        let across = vec![adm(95, 1), adm(99, 1), adm(200, 1), adm(201, 1)];
        let by_key = BTreeMap::from([("k", across.clone())]);
        assert_eq!(excess("k", &across), 1);
        let f = [failover(90, 100, 200)];
        assert_eq!(beyond_allowance(&by_key, &f, ENV.burst, &excess), None);
        // A failover elsewhere allows nothing here.
        let elsewhere = [failover(500, 510, 600)];
        let (e, key, allowed) = beyond_allowance(&by_key, &elsewhere, ENV.burst, &excess).unwrap();
        assert_eq!((e, key.as_str(), allowed), (1, "k", 0));
        // Four at once within one primary's life fail, whatever a failover allows later.
        let burst = vec![adm(10, 1), adm(10, 1), adm(10, 1), adm(10, 1), adm(95, 1)];
        let by_key = BTreeMap::from([("k", burst)]);
        let (e, _, allowed) = beyond_allowance(&by_key, &f, ENV.burst, &excess).unwrap();
        assert_eq!((e, allowed), (3, 0));
    }

    #[test]
    fn a_promotion_starts_an_epoch_from_an_unknown_bucket_and_a_crash_from_a_full_one() {
        let sc = crate::Scenario::builder("epochs")
            .duration_ms(1_000)
            .token_bucket(2, 10)
            .replica_lag_us(100, 200, false)
            .client(crate::Client::key("k").constant(10))
            .fault(crate::Fault::store_failover(100, 50))
            .fault(crate::Fault::store_crash(500, 20))
            .build()
            .unwrap();
        let ms = Nanos::from_millis;
        assert_eq!(
            epochs(&sc, true),
            vec![
                (ms(0), Initial::Full),
                (ms(100), Initial::Unknown),
                (ms(150), Initial::Unknown),
                (ms(500), Initial::Full),
                (ms(520), Initial::Full),
            ]
        );
        assert_eq!(
            epochs(&sc, false),
            vec![
                (ms(0), Initial::Full),
                (ms(500), Initial::Full),
                (ms(520), Initial::Full)
            ]
        );
        assert_eq!(
            failovers(&sc),
            vec![Failover {
                lost_from: Nanos(99_800_000),
                kill: ms(100),
                promoted: ms(150)
            }]
        );
    }
}
