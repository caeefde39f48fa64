//! Linearizability (token bucket): the per-key answers of each epoch are explained by a
//! real-time order under the token bucket's specification (`ratelab_check::linearizable`).
//! The first violation is reported; a key whose search runs out of budget is counted as
//! unknown, neither passed nor failed.

use super::checker::{Checker, Judged, Run};
use super::failure::{Class, Failure};
use ratelab_check::linearizable::{self, Initial, Op, Spec, Verdict};
use ratelab_core::{Nanos, Policy};

/// The linearizability search's default budget per key and epoch (states made, weighed by
/// size: about 100 MB at most); past it the key's verdict is unknown, counted apart: neither a
/// failure nor a pass.
pub const LINEARIZABILITY_BUDGET: u64 = 1_000_000;

/// The token bucket's linearizability checker.
pub struct Linearizable;

impl Checker for Linearizable {
    fn name(&self) -> &'static str {
        "linearizable"
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let Policy::TokenBucket(bucket) = *run.sc.policy() else {
            return;
        };
        let (_, ops, starts) = run.grouped();
        let spec = Spec {
            capacity: bucket.capacity(),
            amount: bucket.refill_amount(),
            period: bucket.refill_period(),
        };
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
            match linearizable::check_key_from(&spec, &ops, run.budget, initial) {
                Verdict::Violation(v) => {
                    out.failures.push(Failure::new(
                        Class::Safety,
                        "linearizable",
                        format!("epoch {epoch}, key {key:?}: request {}: {}", v.id, v.detail),
                    ));
                    break;
                }
                Verdict::Unknown { .. } => out.unknown_keys += 1,
                Verdict::Linearizable => {}
            }
        }
    }
}
