//! Fencing (a fenced job): no commit accepted from a leader another grant had superseded,
//! and one leader at a time, both recomputed from the lease records.

use super::checker::{Checker, Figure, Judged, Needs, Run};
use super::failure::{Class, Failure};

/// The fencing checker.
pub struct Fencing;

const FIGURES: &[Figure] = &[
    Figure::bounded(
        "stale_writes_accepted",
        "cleanup commits accepted with a token lower than one granted before them",
        Needs::Job,
        |r| r.report.job.as_ref().map(|j| j.stale_accepted),
    ),
    Figure::bounded(
        "stale_writes_rejected",
        "cleanup commits the fence rejected as stale",
        Needs::Job,
        |r| r.report.job.as_ref().map(|j| j.stale_rejected),
    ),
    Figure::zero(
        "leader_conflicts",
        "breaches of one leader at a time",
        Needs::Job,
        |r| r.report.job.as_ref().map(|j| j.leader_conflicts),
    ),
];

impl Checker for Fencing {
    fn name(&self) -> &'static str {
        "fencing"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let Some(j) = run.report.job.as_ref().filter(|j| j.fencing) else {
            return;
        };
        if !run.h.commits.is_empty() {
            out.judged("fencing", run.h.commits.len() as u64);
        }
        if j.stale_accepted > 0 || j.leader_conflicts > 0 {
            out.failures.push(Failure::new(
                Class::Safety,
                "fencing",
                format!(
                    "{} commits accepted from a superseded leader, {} breaches of one leader at a \
                     time",
                    j.stale_accepted, j.leader_conflicts
                ),
            ));
        }
    }
}
