//! Failure answers judged (`ratelab_check::fail_reasons`): each fail-open or error answer
//! has the failure it names behind it in the history — a timeout its whole deadline, a
//! store error an erroring store call or an active fault, an open breaker an earlier
//! failure on its gateway; each store-full answer the store's refusal for want of room.

use super::checker::{Checker, Class, Failure, Figure, Judged, Needs, Run, Runs};
use crate::scenario::ms;
use ratelab_check::fail_reasons::{self, FaultWindow, Unexplained};

/// The failure answers' checker.
pub struct FailReasons;

const FIGURES: &[Figure] = &[Figure::zero(
    "unexplained_failures",
    "fail-open, error and store-full answers with no failure behind them in the history: a \
     timeout before the deadline, a store error with no erroring call and no fault, an open \
     breaker with no earlier failure, a full store the store never reported",
    Needs::Nothing,
)];

fn judge(run: &Run<'_>) -> (u64, Vec<Unexplained>) {
    let spec = run.sc.spec();
    let faults: Vec<_> = spec
        .faults
        .iter()
        .filter_map(|f| {
            let (from, to) = f.window_ms()?;
            Some(FaultWindow {
                from: ms(from),
                to: ms(to),
                gateways: f.fails_calls_from(),
            })
        })
        .collect();
    let opens_after = spec
        .gateway
        .breaker
        .map(|b| u32::try_from(b.failures_to_open.get()).unwrap_or(u32::MAX));
    fail_reasons::judge(run.h, ms(spec.store.timeout_ms.get()), &faults, opens_after)
}

impl Checker<Runs> for FailReasons {
    fn name(&self) -> &'static str {
        "fail-reasons"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn measure(&self, run: &Run<'_>, out: &mut Judged) {
        out.measured("unexplained_failures", judge(run).1.len() as u64);
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
