//! Every applicable checker over one run, and the failures they find: what the explorer
//! (`ratelab explore`) judges each drawn run by, what a scenario's `expect.explorer` asks for,
//! and what [`crate::run_with`] holds a user's limiter to.
//!
//! Safety checkers judge each *epoch* of the store apart: a store crash loses every bucket,
//! and what a restarted store admits is held to a fresh envelope (a limiter that keeps its
//! state in memory promises nothing across a crash). A failover (`store_failover`) keeps the
//! replica's state, a little behind the primary's: the bounds hold across it with an
//! allowance, per key, of the admissions it can have lost, at most min(B, the cost admitted
//! in the replica's largest lag before the primary died, up to the promotion) — the bound
//! docs/CLUSTER.md derives. The linearizability checker starts afresh at a promotion from a
//! bucket in an unknown state. Within an epoch:
//!
//! - `envelope` (token bucket): per key, admitted cost in any interval Δt ≤ B + R·Δt (on the
//!   store's clock);
//! - `window` (fixed and sliding windows): per key, admitted cost in any interval Δt ≤
//!   L·(2 + Δt/W), which holds for any fixed window however its windows are placed (an
//!   interval meets at most ⌈Δt/W⌉ + 1 of them) and for the sliding-window counter (whose
//!   current window never admits more than L);
//! - `linearizable` (token bucket): the per-key answers are explained by a real-time order
//!   under the token bucket's specification (`ratelab_check::linearizable`);
//! - `answered-once`: every request answered exactly once;
//! - `cleanup`: the cleanup job deleted no live bucket and nothing it had not planned;
//! - `fencing` (a fenced job): no commit accepted from a leader another grant had
//!   superseded, and one leader at a time, both recomputed from the lease records;
//! - `liveness` (after the last fault heals, when the run has a probe client within the
//!   policy): every probe request admitted.
//!
//! Each failure carries a detail naming what witnessed it.

use crate::faults::Outage;
use crate::scenario::{PathName, ms};
use crate::{Report, Scenario};
use ratelab_check::Admission;
use ratelab_check::envelope::{self, Envelope};
use ratelab_check::history::History;
use ratelab_check::linearizable::{self, Initial, Op, Seen, Spec, Verdict};
use ratelab_check::window;
use ratelab_core::{Nanos, Policy};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What kind of failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// An invariant broke.
    Safety,
    /// After the faults healed, the system did not recover.
    Liveness,
    /// The run panicked.
    Panic,
    /// The same seed gave another trace.
    Determinism,
    /// The drawn scenario was not valid (a bug in the generator).
    Generator,
}

/// One failure of one run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Its class.
    pub class: Class,
    /// The checker that found it (or what failed).
    pub checker: String,
    /// What witnessed it.
    pub detail: String,
}

impl Failure {
    fn new(class: Class, checker: &str, detail: String) -> Failure {
        Failure {
            class,
            checker: checker.to_owned(),
            detail,
        }
    }
}

/// When each epoch of the store begins, and whether its buckets start full: 0; each crash
/// and its restart (full: every bucket was lost); with `failovers`, each failover and its
/// promotion (unknown: the replica's state, behind the primary's).
fn epochs(sc: &Scenario, failovers: bool) -> Vec<(Nanos, Initial)> {
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

fn epoch_of(starts: &[(Nanos, Initial)], t: Nanos) -> usize {
    starts.partition_point(|&(s, _)| s <= t).saturating_sub(1)
}

/// A failover, as the checkers see it: the primary died at `kill` and the replica took over
/// at `promoted`; an admission decided from `lost_from` on may not have reached the replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Failover {
    lost_from: Nanos,
    kill: Nanos,
    promoted: Nanos,
}

/// The failovers of `sc` that can lose acknowledged admissions: none when every write waits
/// for the replica. An admission's write reaches the replica at most its largest lag after
/// it was decided, and on the naive path the write follows the decision within the
/// request's deadline.
fn failovers(sc: &Scenario) -> Vec<Failover> {
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
fn failover_allowance(adm: &[Admission], failovers: &[Failover], burst: u64) -> u64 {
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
fn beyond_allowance(
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
fn envelope_excess(env: Envelope) -> impl Fn(&str, &[Admission]) -> u64 {
    move |key, adm| {
        let one = BTreeMap::from([(key, adm.to_vec())]);
        envelope::envelope(&one, env).max_excess
    }
}

/// A failure of bound `bound` on `key` in `epoch`: `what` happened, where its failovers
/// allowed `allowed`.
fn beyond(bound: &str, epoch: usize, key: &str, what: String, allowed: u64) -> Failure {
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

/// What the checkers find in one run.
#[derive(Clone, Debug, Default)]
pub struct Judged {
    /// The failures.
    pub failures: Vec<Failure>,
    /// Keys (per epoch) on which the linearizability search ran out of budget: neither
    /// passed nor failed.
    pub unknown_keys: u64,
}

/// Per store epoch (crashes only) and key: the admissions (each sorted by time); and, when
/// `with_ops`, per epoch (failovers too) and key, the per-key layer's operations, with how
/// each such epoch starts.
type Grouped<'h> = (
    BTreeMap<usize, BTreeMap<&'h str, Vec<Admission>>>,
    BTreeMap<(usize, &'h str), Vec<Op>>,
    Vec<(Nanos, Initial)>,
);

fn grouped<'h>(sc: &Scenario, h: &'h History, with_ops: bool) -> Grouped<'h> {
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

/// The failures the checkers find in one run.
pub fn judge(sc: &Scenario, report: &Report, h: &History) -> Judged {
    let mut out = Vec::new();
    // Only the token bucket has a linearizability specification here.
    let bucket = matches!(sc.policy(), Policy::TokenBucket(_));
    let (admitted, ops, starts) = grouped(sc, h, bucket);
    let failovers = failovers(sc);
    // What a failover can re-grant on a key: the policy's own B or L, at most.
    let lost_cap = Envelope::of(sc.policy()).burst;
    let (bound, env) = match *sc.policy() {
        Policy::TokenBucket(b) => ("envelope", Envelope::of_bucket(&b)),
        ref window => {
            let e = Envelope::of(window);
            (
                "window",
                Envelope {
                    burst: e.burst.saturating_mul(2),
                    ..e
                },
            )
        }
    };
    for (epoch, by_key) in &admitted {
        let found = if failovers.is_empty() {
            let e = envelope::envelope(by_key, env);
            (e.max_excess > 0).then(|| {
                (
                    e.max_excess,
                    e.witness.map_or_else(String::new, |w| w.key),
                    0,
                )
            })
        } else {
            beyond_allowance(by_key, &failovers, lost_cap, &envelope_excess(env))
        };
        if let Some((excess, key, allowed)) = found {
            let what = format!("{excess} admitted beyond the bound");
            out.push(beyond(bound, *epoch, &key, what, allowed));
        }
    }
    let mut unknown_keys = 0;
    if let Policy::TokenBucket(bucket) = *sc.policy() {
        unknown_keys = linearizability(&bucket, &ops, &starts, &mut out);
    }
    others(report, &mut out);
    Judged {
        failures: out,
        unknown_keys,
    }
}

/// The exact window promise ([`crate::Claim::AnyWindow`]): per store epoch and key, at most
/// `limit` admitted in any interval of one `window`.
pub fn any_window(sc: &Scenario, h: &History, limit: u64, window: Nanos) -> Vec<Failure> {
    let (admitted, _, _) = grouped(sc, h, false);
    let failovers = failovers(sc);
    let over = |key: &str, adm: &[Admission]| {
        let one = BTreeMap::from([(key, adm.to_vec())]);
        window::window_spike(&one, window)
            .max_in_window
            .saturating_sub(limit)
    };
    admitted
        .iter()
        .filter_map(|(epoch, by_key)| {
            let (key, allowed) = if failovers.is_empty() {
                let s = window::window_spike(by_key, window);
                (s.max_in_window > limit).then_some((s.key, 0))?
            } else {
                let (_, key, allowed) = beyond_allowance(by_key, &failovers, limit, &over)?;
                (key, allowed)
            };
            let one = BTreeMap::from([(key.as_str(), by_key[key.as_str()].clone())]);
            let s = window::window_spike(&one, window);
            let what = format!(
                "{} admitted in the window of {window} from {}, against at most {limit}",
                s.max_in_window, s.from
            );
            Some(beyond("window", *epoch, &key, what, allowed))
        })
        .collect()
}

/// The linearizability checker over every key and epoch; the first violation is reported.
/// Returns the keys whose search ran out of budget.
fn linearizability(
    bucket: &ratelab_core::TokenBucket,
    ops: &BTreeMap<(usize, &str), Vec<Op>>,
    starts: &[(Nanos, Initial)],
    out: &mut Vec<Failure>,
) -> u64 {
    let spec = Spec {
        capacity: bucket.capacity(),
        amount: bucket.refill_amount(),
        period: bucket.refill_period(),
    };
    let mut unknown = 0;
    for ((epoch, key), ops) in ops {
        let (start, initial) = starts
            .get(*epoch)
            .copied()
            .unwrap_or((Nanos::ZERO, Initial::Full));
        // A promoted bucket's state is unknown at the promotion, not before: every operation
        // of the epoch took effect after it began, whenever it was sent.
        let ops: Vec<Op> = match initial {
            Initial::Unknown => ops
                .iter()
                .map(|&o| Op {
                    call: o.call.max(start),
                    ..o
                })
                .collect(),
            Initial::Full => ops.clone(),
        };
        match linearizable::check_key_from(&spec, &ops, LINEARIZABILITY_BUDGET, initial) {
            Verdict::Violation(v) => {
                out.push(Failure::new(
                    Class::Safety,
                    "linearizable",
                    format!("epoch {epoch}, key {key:?}: request {}: {}", v.id, v.detail),
                ));
                break;
            }
            Verdict::Unknown { .. } => unknown += 1,
            Verdict::Linearizable => {}
        }
    }
    unknown
}

/// The checkers that read the report's figures: answers, the cleanup job, liveness.
fn others(report: &Report, out: &mut Vec<Failure>) {
    if report.unanswered > 0 || report.duplicated > 0 {
        out.push(Failure::new(
            Class::Safety,
            "answered-once",
            format!(
                "{} unanswered, {} answered twice",
                report.unanswered, report.duplicated
            ),
        ));
    }
    if let Some(j) = &report.job
        && (j.live_deleted > 0 || j.deleted_unplanned > 0)
    {
        out.push(Failure::new(
            Class::Safety,
            "cleanup",
            format!(
                "{} live buckets deleted (first {:?}), {} deleted unplanned",
                j.live_deleted, j.first_live_delete, j.deleted_unplanned
            ),
        ));
    }
    if let Some(j) = &report.job
        && j.fencing
        && (j.stale_accepted > 0 || j.leader_conflicts > 0)
    {
        out.push(Failure::new(
            Class::Safety,
            "fencing",
            format!(
                "{} commits accepted from a superseded leader, {} breaches of one leader at a \
                 time",
                j.stale_accepted, j.leader_conflicts
            ),
        ));
    }
    if let Some(l) = &report.liveness
        && l.violations > 0
    {
        out.push(Failure::new(
            Class::Liveness,
            "liveness",
            format!(
                "{} of {} probe requests after the faults healed not admitted",
                l.violations, l.checked
            ),
        ));
    }
}

/// The linearizability search's budget per key and epoch (states made, weighed by size:
/// about 100 MB at most); past it the key's verdict is unknown, counted apart, not a failure.
pub const LINEARIZABILITY_BUDGET: u64 = 1_000_000;

impl Class {
    /// Its name in signatures and files.
    pub fn name(self) -> &'static str {
        match self {
            Class::Safety => "safety",
            Class::Liveness => "liveness",
            Class::Panic => "panic",
            Class::Determinism => "determinism",
            Class::Generator => "generator",
        }
    }
}

impl Failure {
    /// `class/checker`, as `expect.explorer` names it.
    pub fn signature(&self) -> String {
        format!("{}/{}", self.class.name(), self.checker)
    }
}

/// The explorer's checkers on a scenario that asks for their verdict (`expect.explorer`).
#[derive(Clone, Debug, Default)]
pub struct Expected {
    /// What the checkers found.
    pub found: Vec<Failure>,
    /// How that differs from what the scenario expects; empty when it holds.
    pub problems: Vec<String>,
}

/// How `found` differs from `want` (`"pass"`, or the signature `"class/checker"` a canary must
/// show); empty when it holds.
pub fn held_to(want: &str, found: &[Failure]) -> Vec<String> {
    if want == "pass" {
        found
            .iter()
            .map(|f| format!("explorer: {}: {}", f.signature(), f.detail))
            .collect()
    } else if found.iter().any(|f| f.signature() == want) {
        Vec::new()
    } else {
        let seen: Vec<String> = found.iter().map(Failure::signature).collect();
        vec![format!(
            "explorer: expected {want}, the checkers found {}",
            if seen.is_empty() {
                "nothing".to_owned()
            } else {
                seen.join(", ")
            }
        )]
    }
}

/// Judges a run by its scenario's `expect.explorer`; `None` when it asks for no verdict.
pub fn explorer_expectation(sc: &Scenario, report: &Report, h: &History) -> Option<Expected> {
    let want = sc.spec().expect.explorer.as_ref()?;
    let found = judge(sc, report, h).failures;
    let problems = held_to(want, &found);
    Some(Expected { found, problems })
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
            .client(crate::scenario::Client::key("k").constant(10))
            .fault(crate::scenario::Fault::store_failover(100, 50))
            .fault(crate::scenario::Fault::store_crash(500, 20))
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
