//! **decisions**: how many requests got a decision. A limiter that answers with errors has
//! not been checked: its requests without a decision are a failure, never a pass.

use super::check::{Prepared, ProbeCheck};
use super::history::{Judging, Outcome};
use super::verdict::ProbeVerdict;

/// The decisions check.
pub struct Decisions;

impl ProbeCheck for Decisions {
    fn name(&self) -> &'static str {
        "decisions"
    }

    fn judge(&self, p: &Prepared<'_>, _: &Judging, v: &mut ProbeVerdict) {
        v.requests = p.history.observations.len();
        for o in &p.history.observations {
            match o.outcome {
                Outcome::Allowed => v.admitted += o.cost,
                Outcome::Denied => v.denied += o.cost,
                Outcome::Failed(ref why) => {
                    v.failed += 1;
                    v.first_failed.get_or_insert_with(|| (o.id, why.clone()));
                }
            }
        }
    }

    fn failures(&self, v: &ProbeVerdict, out: &mut Vec<String>) {
        if let Some((id, why)) = &v.first_failed {
            out.push(format!(
                "decisions: {} of {} requests got none (request {id}: {why})",
                v.failed, v.requests
            ));
        }
    }
}
