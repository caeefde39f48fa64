//! Recovery (`ratelab_check::recovery`): once the last fault has healed, and the gateways
//! have waited out a deadline and, with a breaker, its cooldown and the probe that closes
//! it, every request is decided by every limit on its way — no fail-open, error or bypass.

use super::checker::{Checker, Class, Failure, Figure, Judged, Needs, Run, Runs};
use crate::scenario::ms;
use ratelab_check::recovery::{self, Undecided};
use ratelab_core::Nanos;

/// The recovery checker.
pub struct Recovery;

const FIGURES: &[Figure] = &[Figure::zero(
    "undecided_after_recovery",
    "requests sent after every fault healed (plus a deadline, and a breaker's cooldown and \
     its probe) that a limit did not decide: failed open, refused on an error, or bypassed",
    Needs::Nothing,
)];

/// When the gateways have recovered: the last fault's end, a deadline for a call in flight,
/// and with a breaker its cooldown and one more deadline for the probe that closes it.
fn recovered_at(run: &Run<'_>) -> Nanos {
    let spec = run.sc.spec();
    let timeout = spec.store.timeout_ms.get();
    let breaker = spec
        .gateway
        .breaker
        .map_or(0, |b| b.cooldown_ms.get() + timeout);
    ms(crate::cluster::faults_end_ms(run.sc) + timeout + breaker)
}

fn judge(run: &Run<'_>) -> (u64, Vec<Undecided>) {
    let deadline = ms(run.sc.spec().store.timeout_ms.get());
    recovery::undecided_after(run.h, recovered_at(run), deadline)
}

impl Checker<Runs> for Recovery {
    fn name(&self) -> &'static str {
        "recovery"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn measure(&self, run: &Run<'_>, out: &mut Judged) {
        out.measured("undecided_after_recovery", judge(run).1.len() as u64);
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let (judged, found) = judge(run);
        out.judged("recovery", judged);
        if let Some(u) = found.first() {
            out.failures.push(Failure::new(
                Class::Liveness,
                "recovery",
                format!(
                    "request {} sent at {} after every fault healed (from {}): {:?} on the {} \
                     layer ({} in all)",
                    u.id,
                    u.sent,
                    recovered_at(run),
                    u.answer,
                    u.layer.name(),
                    found.len()
                ),
            ));
        }
    }
}
