//! Fencing (a fenced job): one leader at a time, and no commit accepted while a lease granted
//! after its sender's is still within its length, both recomputed from the grant, renewal and
//! commit records and the lengths asked for (`ratelab_check::cleanup`), never from the
//! fence's rule. Commits from a superseded sender (another owner or token granted the lease
//! since its grant, close to the fence's own rule) are figures only.

use super::checker::{Checker, Failure, Figure, Judged, Needs, Run, Runs};

/// The fencing checker.
pub struct Fencing;

const FIGURES: &[Figure] = &[
    Figure::zero(
        "commits_in_successor_lease",
        "cleanup commits accepted while a lease granted after their sender's was still within \
         its length",
        Needs::Job,
    ),
    Figure::bounded(
        "stale_writes_accepted",
        "cleanup commits accepted from a sender another owner or token was granted the lease \
         after",
        Needs::Job,
    ),
    Figure::bounded(
        "stale_writes_rejected",
        "cleanup commits the fence rejected as stale",
        Needs::Job,
    ),
    Figure::zero(
        "leader_conflicts",
        "breaches of one leader at a time",
        Needs::Job,
    ),
];

impl Checker<Runs> for Fencing {
    fn name(&self) -> &'static str {
        "fencing"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn measure(&self, run: &Run<'_>, out: &mut Judged) {
        let Some(j) = run.job() else {
            return;
        };
        if j.fencing {
            out.measured("commits_in_successor_lease", j.in_successor_lease);
        }
        out.measured("stale_writes_accepted", j.stale_accepted);
        out.measured("stale_writes_rejected", j.stale_rejected);
        out.measured("leader_conflicts", j.leader_conflicts);
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let Some(j) = run.job().filter(|j| j.fencing) else {
            return;
        };
        if !run.h.commits.is_empty() {
            out.judged("fencing", run.h.commits.len() as u64);
        }
        if j.in_successor_lease > 0 || j.leader_conflicts > 0 {
            out.failures.push(Failure::safety(
                "fencing",
                format!(
                    "{} commits accepted within a successor's lease, {} breaches of one leader \
                     at a time",
                    j.in_successor_lease, j.leader_conflicts
                ),
            ));
        }
    }
}
