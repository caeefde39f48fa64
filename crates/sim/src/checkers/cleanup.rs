//! The idle-bucket cleanup job: no live bucket deleted, nothing deleted outside its plan, and
//! the job's runs and liveness (recomputed from the job's scans, commits and the bucket
//! writes by `ratelab_check::cleanup`).

use super::checker::{Checker, Failure, Figure, Judged, Needs, Run, Runs};

/// The cleanup job's checker.
pub struct Cleanup;

const FIGURES: &[Figure] = &[
    Figure {
        name: "live_buckets_deleted",
        about: "buckets the cleanup job deleted although they were written after the scan that \
                planned the deletion (held to 0 unless the scenario bounds it from below: the \
                unfenced canary)",
        needs: Needs::Job,
        held_at_most: |given| given.at_least.is_none().then_some(0),
        invariant: false,
    },
    Figure::zero(
        "buckets_deleted_outside_their_plan",
        "buckets a commit deleted that its own scan had not planned",
        Needs::Job,
    ),
    Figure::bounded("job_runs", "accepted cleanup commits", Needs::Job),
    Figure::bounded(
        "job_max_gap_ms",
        "longest time without an accepted cleanup commit, from the first one to the end of the \
         run, ms (rounded up): the job's liveness",
        Needs::Job,
    ),
];

impl Checker<Runs> for Cleanup {
    fn name(&self) -> &'static str {
        "cleanup"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn measure(&self, run: &Run<'_>, out: &mut Judged) {
        let Some(j) = run.job() else {
            return;
        };
        out.measured("live_buckets_deleted", j.live_deleted);
        out.measured("buckets_deleted_outside_their_plan", j.deleted_unplanned);
        out.measured("job_runs", j.runs);
        out.measured("job_max_gap_ms", j.max_gap_ms.ceil() as u64);
        out.keep("cleanup", j.clone());
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let Some(j) = run.job() else {
            return;
        };
        // It applies where the job committed: each accepted commit's deletions judged.
        if !run.h.commits.is_empty() {
            out.judged("cleanup", j.runs);
        }
        if j.live_deleted > 0 || j.deleted_unplanned > 0 {
            out.failures.push(Failure::safety(
                "cleanup",
                format!(
                    "{} live buckets deleted (first {:?}), {} deleted unplanned",
                    j.live_deleted, j.first_live_delete, j.deleted_unplanned
                ),
            ));
        }
    }
}
