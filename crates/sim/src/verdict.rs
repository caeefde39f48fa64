//! Every applicable checker over one run, and the failures they find: what the explorer
//! (`ratelab explore`) judges each drawn run by, what a scenario's `expect.explorer` asks for,
//! and what [`crate::run_with`] holds a user's limiter to.
//!
//! Safety checkers judge each *epoch* of the store apart: a store crash loses every bucket,
//! and what a restarted store admits is held to a fresh envelope (a limiter that keeps its
//! state in memory promises nothing across a crash). Within an epoch:
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

use crate::scenario::FaultKind;
use crate::{Report, Scenario};
use ratelab_check::Admission;
use ratelab_check::envelope::{self, Envelope};
use ratelab_check::history::History;
use ratelab_check::linearizable::{self, Op, Seen, Spec, Verdict};
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

/// What the checkers find in one run.
#[derive(Clone, Debug, Default)]
pub struct Judged {
    /// The failures.
    pub failures: Vec<Failure>,
    /// Keys (per epoch) on which the linearizability search ran out of budget: neither
    /// passed nor failed.
    pub unknown_keys: u64,
}

/// Per store epoch and key: the admissions (each sorted by time), and, when `with_ops`, the
/// per-key layer's operations.
type Grouped<'h> = (
    BTreeMap<usize, BTreeMap<&'h str, Vec<Admission>>>,
    BTreeMap<(usize, &'h str), Vec<Op>>,
);

fn grouped<'h>(sc: &Scenario, h: &'h History, with_ops: bool) -> Grouped<'h> {
    let starts = epochs(sc);
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
    (admitted, ops)
}

/// The failures the checkers find in one run.
pub fn judge(sc: &Scenario, report: &Report, h: &History) -> Judged {
    let mut out = Vec::new();
    // Only the token bucket has a linearizability specification here.
    let bucket = matches!(sc.policy(), Policy::TokenBucket(_));
    let (admitted, ops) = grouped(sc, h, bucket);
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
        let e = envelope::envelope(by_key, env);
        if e.max_excess > 0 {
            out.push(Failure::new(
                Class::Safety,
                bound,
                format!(
                    "epoch {epoch}: {} admitted beyond the bound{}",
                    e.max_excess,
                    e.witness
                        .map(|w| format!(" on key {:?}", w.key))
                        .unwrap_or_default()
                ),
            ));
        }
    }
    let mut unknown_keys = 0;
    if let Policy::TokenBucket(bucket) = *sc.policy() {
        unknown_keys = linearizability(&bucket, &ops, &mut out);
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
    let (admitted, _) = grouped(sc, h, false);
    admitted
        .iter()
        .filter_map(|(epoch, by_key)| {
            let s = window::window_spike(by_key, window);
            (s.max_in_window > limit).then(|| {
                Failure::new(
                    Class::Safety,
                    "window",
                    format!(
                        "epoch {epoch}: {} admitted in the window of {window} from {} on key {:?}, \
                         against at most {limit}",
                        s.max_in_window, s.from, s.key
                    ),
                )
            })
        })
        .collect()
}

/// The linearizability checker over every key and epoch; the first violation is reported.
/// Returns the keys whose search ran out of budget.
fn linearizability(
    bucket: &ratelab_core::TokenBucket,
    ops: &BTreeMap<(usize, &str), Vec<Op>>,
    out: &mut Vec<Failure>,
) -> u64 {
    let spec = Spec {
        capacity: bucket.capacity(),
        amount: bucket.refill_amount(),
        period: bucket.refill_period(),
    };
    let mut unknown = 0;
    for ((epoch, key), ops) in ops {
        match linearizable::check_key(&spec, ops, LINEARIZABILITY_BUDGET) {
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
