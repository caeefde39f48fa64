//! Liveness: after the last fault heals, when the run has a client within the policy, every
//! one of its requests admitted (`expect.liveness` switches the phase on).

use super::checker::{Checker, Judged, Run};
use super::failure::{Class, Failure};

/// The liveness checker.
pub struct Liveness;

impl Checker for Liveness {
    fn name(&self) -> &'static str {
        "liveness"
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let Some(l) = &run.report.liveness else {
            return;
        };
        out.judged("liveness", l.checked);
        if l.violations > 0 {
            out.failures.push(Failure::new(
                Class::Liveness,
                "liveness",
                format!(
                    "{} of {} probe requests after the faults healed not admitted",
                    l.violations, l.checked
                ),
            ));
        }
    }
}
