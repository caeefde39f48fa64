//! **decisions**: how many requests got a decision. A limiter that answers with errors has
//! not been checked: its requests without a decision are a failure, never a pass.

use super::check::{Prepared, Probes};
use super::history::Outcome;
use crate::checker::{Checker, Failure, Figure, Judged, Needs};

/// The decisions check.
pub struct Decisions;

const FIGURES: &[Figure] = &[
    Figure::bounded("requests", "requests sent", Needs::Nothing),
    Figure::bounded("admitted", "cost admitted", Needs::Nothing),
    Figure::bounded("denied", "cost denied", Needs::Nothing),
    Figure::zero("failed", "requests without a decision", Needs::Nothing),
];

impl Checker<Probes> for Decisions {
    fn name(&self) -> &'static str {
        "decisions"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn judge(&self, p: &Prepared<'_>, out: &mut Judged) {
        let (mut admitted, mut denied, mut failed) = (0, 0, 0);
        let mut first_failed = None;
        let observations = &p.history.observations;
        for o in observations {
            match o.outcome {
                Outcome::Allowed => admitted += o.cost,
                Outcome::Denied => denied += o.cost,
                Outcome::Failed(ref why) => {
                    failed += 1;
                    first_failed.get_or_insert((o.id, why));
                }
            }
        }
        out.measured("requests", observations.len() as u64);
        out.measured("admitted", admitted);
        out.measured("denied", denied);
        out.measured("failed", failed);
        if let Some((id, why)) = first_failed {
            out.failures.push(Failure::safety(
                "decisions",
                format!(
                    "{failed} of {} requests got none (request {id}: {why})",
                    observations.len()
                ),
            ));
        }
    }
}
