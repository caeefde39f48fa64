//! Every applicable checker over one explored run, and the failures they find.
//!
//! Safety checkers judge each *epoch* of the store apart: a store crash loses every bucket,
//! and what a restarted store admits is held to a fresh envelope (a limiter that keeps its
//! state in memory promises nothing across a crash). Within an epoch:
//!
//! - `envelope`: per key, admitted cost in any interval Δt ≤ B + R·Δt (on the store's clock);
//! - `linearizable`: the per-key answers are explained by a real-time order under the token
//!   bucket's specification (`ratelab_check::linearizable`);
//! - `answered-once`: every request answered exactly once;
//! - `cleanup`: the cleanup job deleted no live bucket and nothing it had not planned;
//! - `liveness` (after the last fault heals, when the run has a probe client within the
//!   policy): every probe request admitted.
//!
//! Each failure carries a detail naming what witnessed it.

use ratelab_check::Admission;
use ratelab_check::envelope::{self, Envelope};
use ratelab_check::history::History;
use ratelab_check::linearizable::{self, Op, Seen, Spec, Verdict};
use ratelab_core::{Nanos, Policy};
use ratelab_sim::scenario::FaultKind;
use ratelab_sim::{Report, Scenario};
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

/// When each epoch of the store begins: 0, and each crash's restart.
fn epochs(sc: &Scenario) -> Vec<Nanos> {
    let mut starts = vec![Nanos::ZERO];
    for f in &sc.spec().faults {
        if f.kind == FaultKind::StoreCrash {
            let at = f.at_ms.map_or(0, |v| v.get()) + f.restart_after_ms.map_or(0, |v| v.get());
            starts.push(Nanos::from_millis(f.at_ms.map_or(0, |v| v.get())));
            starts.push(Nanos::from_millis(at));
        }
    }
    starts.sort_unstable();
    starts.dedup();
    starts
}

fn epoch_of(starts: &[Nanos], t: Nanos) -> usize {
    starts.partition_point(|&s| s <= t).saturating_sub(1)
}

/// The failures the checkers find in one run.
pub fn judge(sc: &Scenario, report: &Report, h: &History) -> Vec<Failure> {
    let mut out = Vec::new();
    let Policy::TokenBucket(bucket) = *sc.policy() else {
        return out;
    };
    let starts = epochs(sc);
    // Per epoch and key: the admissions, and the per-key layer's operations.
    let mut admitted: BTreeMap<usize, BTreeMap<&str, Vec<Admission>>> = BTreeMap::new();
    let mut ops: BTreeMap<(usize, &str), Vec<Op>> = BTreeMap::new();
    for r in &h.requests {
        let Some(op) = Op::per_key(r) else {
            continue;
        };
        if let Seen::Allowed { at, .. } = op.seen {
            admitted
                .entry(epoch_of(&starts, at))
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
        for e in epochs {
            ops.entry((e, r.key.as_str())).or_default().push(op);
        }
    }
    let env = Envelope::of_bucket(&bucket);
    for (epoch, by_key) in &mut admitted {
        for adm in by_key.values_mut() {
            adm.sort_unstable();
        }
        let e = envelope::envelope(by_key, env);
        if e.max_excess > 0 {
            out.push(Failure::new(
                Class::Safety,
                "envelope",
                format!(
                    "epoch {epoch}: {} admitted beyond B + R·Δt{}",
                    e.max_excess,
                    e.witness
                        .map(|w| format!(" on key {:?}", w.key))
                        .unwrap_or_default()
                ),
            ));
        }
    }
    let spec = Spec {
        capacity: bucket.capacity(),
        amount: bucket.refill_amount(),
        period: bucket.refill_period(),
    };
    for ((epoch, key), ops) in &ops {
        if let Verdict::Violation(v) = linearizable::check_key(&spec, ops, LINEARIZABILITY_BUDGET) {
            out.push(Failure::new(
                Class::Safety,
                "linearizable",
                format!("epoch {epoch}, key {key:?}: request {}: {}", v.id, v.detail),
            ));
            break;
        }
    }
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
    out
}

/// The linearizability search's budget per key and epoch; past it the key counts as passed
/// (the checker's verdict is unknown, not a failure).
pub const LINEARIZABILITY_BUDGET: u64 = 200_000;
