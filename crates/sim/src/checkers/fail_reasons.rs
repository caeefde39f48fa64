//! Failure answers judged (`ratelab_check::fail_reasons`): each fail-open or error answer
//! has the failure it names behind it in the history — a timeout its whole deadline, a
//! store error an erroring store call or an active fault, an open breaker an earlier
//! failure on its gateway.

use super::checker::{Checker, Figure, Judged, Needs, Run};
use super::failure::{Class, Failure};
use crate::scenario::ms;
use ratelab_check::fail_reasons::{self, Unexplained};

/// The failure answers' checker.
pub struct FailReasons;

const FIGURES: &[Figure] = &[Figure::zero(
    "unexplained_failures",
    "fail-open and error answers with no failure behind them in the history: a timeout \
     before the deadline, a store error with no erroring call and no fault, an open breaker \
     with no earlier failure",
    Needs::Nothing,
    |r| Some(judge(r).1.len() as u64),
)];

fn judge(run: &Run<'_>) -> (u64, Vec<Unexplained>) {
    let spec = run.sc.spec();
    let faults: Vec<_> = spec
        .faults
        .iter()
        .filter_map(|f| f.window_ms())
        .map(|(from, to)| (ms(from), ms(to)))
        .collect();
    fail_reasons::judge(run.h, ms(spec.store.timeout_ms.get()), &faults)
}

impl Checker for FailReasons {
    fn name(&self) -> &'static str {
        "fail-reasons"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let (judged, found) = judge(run);
        // It applies where there are failure answers to judge.
        if judged > 0 {
            out.judged("fail-reasons", judged);
        }
        if let Some(u) = found.first() {
            out.failures.push(Failure::new(
                Class::Safety,
                "fail-reasons",
                format!(
                    "request {} ({} layer): {} ({} in all)",
                    u.id,
                    u.layer.name(),
                    u.detail,
                    found.len()
                ),
            ));
        }
    }
}
