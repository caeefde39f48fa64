//! Linearizability, for every limiter family: the per-key answers of each epoch are
//! explained by a real-time order under the policy's sequential specification. A token
//! bucket is held to `ratelab_check::linearizable` (which also starts from a bucket in an
//! unknown state, after a failover); every other family to its specification in
//! `ratelab_check::family`, from a key nobody used, so on epochs that start from fresh
//! state (the run's start, a crash's restart) — an epoch a failover began is left to the
//! bound and the envelope. A request whose answer was lost is replayed where the store
//! applied it, at the time its write was recorded. Every answer is judged: an admission the
//! specification denies, a denial it admits (a phantom denial: over-denial, in every
//! family), a wrong `remaining` or `Retry-After`. The first violation is reported; a key
//! whose search runs out of budget is counted as unknown, neither passed nor failed.

use super::checker::{Checker, Class, Failure, Judged, Run, Runs};
use crate::spec::{WithFamily, bucket_spec, with_family};
use ratelab_check::family::{self, Family};
use ratelab_check::history::History;
use ratelab_check::linearizable::{self, Initial, Op, Seen, Spec, Verdict};
use ratelab_core::{Nanos, Policy};

/// The linearizability search's default budget per key and epoch (states made, weighed by
/// size: about 100 MB at most); past it the key's verdict is unknown, counted apart: neither a
/// failure nor a pass.
pub const LINEARIZABILITY_BUDGET: u64 = 1_000_000;

/// The linearizability checker.
pub struct Linearizable;

impl Checker<Runs> for Linearizable {
    fn name(&self) -> &'static str {
        "linearizable"
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        if run.exact || matches!(run.sc.policy(), Policy::TokenBucket(_)) {
            out.judged("linearizable", 0);
        }
        match run.sc.policy() {
            Policy::TokenBucket(bucket) => judge_bucket(run, &bucket_spec(bucket), out),
            // Another family is held to its specification only when the run's limiter claims
            // to be exactly the policy.
            _ if !run.exact => {}
            policy => with_family(policy, JudgeFamily { run, out }),
        }
    }
}

/// [`judge_family`] as work for whichever family the policy names.
struct JudgeFamily<'r, 'a> {
    run: &'r Run<'a>,
    out: &'r mut Judged,
}

impl WithFamily for JudgeFamily<'_, '_> {
    type Out = ();

    fn with<F: Family>(self, family: &F) {
        judge_family(self.run, family, self.out)
    }
}

/// The operations with an answer to judge.
fn judged(ops: &[Op]) -> u64 {
    ops.iter().filter(|o| o.seen != Seen::Unknown).count() as u64
}

fn report(out: &mut Judged, epoch: usize, key: &str, v: &linearizable::Violation) {
    let phantom = if v.phantom_denial {
        " (a phantom denial)"
    } else {
        ""
    };
    out.failures.push(Failure::new(
        Class::Safety,
        "linearizable",
        format!(
            "epoch {epoch}, key {key:?}: request {}{phantom}: {}",
            v.id, v.detail
        ),
    ));
}

fn judge_bucket(run: &Run<'_>, spec: &Spec, out: &mut Judged) {
    let (_, ops, starts) = run.grouped();
    for ((epoch, key), ops) in ops {
        let (start, initial) = starts
            .get(*epoch)
            .copied()
            .unwrap_or((Nanos::ZERO, Initial::Full));
        // A promoted bucket's state is unknown at the promotion, not before: every
        // operation of the epoch took effect after it began, whenever it was sent.
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
        out.judged("linearizable", judged(&ops));
        match linearizable::check_key_from(spec, &ops, run.budget, initial) {
            Verdict::Violation(v) => {
                report(out, *epoch, key, &v);
                break;
            }
            Verdict::Unknown { .. } => out.unknown_keys += 1,
            Verdict::Linearizable => {}
        }
    }
}

/// `o` as the store applied it: an answer lost after the store applied it (stamped) is the
/// admission the store wrote at its write's time, in the epoch that write fell in; one the
/// store applied without writing (a denial: nothing changed) is left out; one without a
/// stamp (the naive path's reads and writes) stays open for the search.
fn as_applied(o: &Op, h: &History, in_epoch: &dyn Fn(Nanos) -> bool) -> Option<Op> {
    if o.seen != Seen::Unknown || o.stamp.is_none() {
        return Some(*o);
    }
    let at = h.requests.get(usize::try_from(o.id).ok()?)?.written_at?;
    in_epoch(at).then_some(Op {
        seen: Seen::Allowed {
            at,
            remaining: None,
        },
        ..*o
    })
}

fn judge_family<F: Family>(run: &Run<'_>, spec: &F, out: &mut Judged) {
    let (_, ops, starts) = run.grouped();
    for ((epoch, key), ops) in ops {
        let Some(&(start, Initial::Full)) = starts.get(*epoch) else {
            continue;
        };
        let end = starts.get(epoch + 1).map_or(Nanos(u64::MAX), |s| s.0);
        let in_epoch = |t: Nanos| t >= start && t < end;
        let ops: Vec<Op> = ops
            .iter()
            .filter_map(|o| as_applied(o, run.h, &in_epoch))
            .collect();
        out.judged("linearizable", judged(&ops));
        match family::check_key(spec, &ops, run.budget) {
            Verdict::Violation(v) => {
                report(out, *epoch, key, &v);
                break;
            }
            Verdict::Unknown { .. } => out.unknown_keys += 1,
            Verdict::Linearizable => {}
        }
    }
}
