//! The cleanup job judged (`ratelab_check::cleanup`), a bucket full again when the policy's
//! specification, replaying the admissions the store wrote, says so: the evidence the
//! `cleanup` and `fencing` checkers measure their figures from and a report describes the job
//! with.

use crate::scenario::Scenario;
use crate::spec::{WithFamily, with_family};
use ratelab_check::cleanup::{self, CleanupReport, FullAgain, StoreReset};
use ratelab_check::family::Family;
use ratelab_check::history::History;
use ratelab_check::linearizable::Initial;
use ratelab_core::Nanos;
use serde::{Deserialize, Serialize};

/// The job judged, when the scenario runs it.
pub(crate) fn judged(sc: &Scenario, h: &History) -> Option<JobFigures> {
    let spec = sc.spec.cleanup_job?;
    Some(JobFigures::new(spec.fencing, judge_job(sc, h)))
}

/// The cleanup job's figures ([`cleanup::cleanup`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct JobFigures {
    /// Whether the store checked tokens.
    pub fencing: bool,
    /// Lease grants.
    pub grants: u64,
    /// Breaches of single leadership, recomputed from grant times and lease lengths (always a
    /// failure).
    pub leader_conflicts: u64,
    /// Accepted commits: the job's runs.
    pub runs: u64,
    /// Commits accepted while a lease granted after their sender's was still within its
    /// length (recomputed from the grant, renewal and commit records and the lease lengths).
    #[serde(default)]
    pub in_successor_lease: u64,
    /// Commits accepted from a sender another grant had superseded.
    pub stale_accepted: u64,
    /// Such commits refused.
    pub stale_rejected: u64,
    /// Commits refused from the latest grantee.
    pub wrongly_rejected: u64,
    /// Buckets an accepted commit deleted that its plan's scan did not return (always a
    /// failure).
    #[serde(default)]
    pub deleted_unplanned: u64,
    /// Buckets deleted.
    pub keys_removed: u64,
    /// Buckets deleted although written after the scan that planned the deletion: the harm
    /// fencing prevents (a failure unless the scenario expects it).
    #[serde(default)]
    pub live_deleted: u64,
    /// The first such deletion: who, which bucket, when it was scanned, written and deleted
    /// (store time, ms).
    #[serde(default)]
    pub first_live_delete: Option<String>,
    /// Longest time without an accepted commit, ms.
    pub max_gap_ms: f64,
}

impl JobFigures {
    fn new(fencing: bool, f: CleanupReport) -> JobFigures {
        let ms = |t: Nanos| t.as_u64() as f64 / 1e6;
        JobFigures {
            fencing,
            grants: f.grants,
            leader_conflicts: f.leader_conflicts,
            runs: f.accepted,
            in_successor_lease: f.in_successor_lease,
            stale_accepted: f.superseded_accepted,
            stale_rejected: f.superseded_rejected,
            wrongly_rejected: f.wrongly_rejected,
            deleted_unplanned: f.deleted_unplanned,
            keys_removed: f.removed,
            live_deleted: f.live_deleted,
            first_live_delete: f.first_live_delete.map(|d| {
                format!(
                    "{} (token {}) deleted {:?} at {:.3} ms, scanned at {:.3} ms and written at {:.3} ms",
                    d.owner,
                    d.token,
                    d.key,
                    ms(d.at),
                    ms(d.scanned_at),
                    ms(d.written_at)
                )
            }),
            max_gap_ms: ms(f.max_gap),
        }
    }
}

/// When a bucket is full again after each write, by a family's specification.
struct FullBySpec<'a> {
    job: cleanup::JobHistory<'a>,
    resets: &'a [StoreReset],
}

impl WithFamily for FullBySpec<'_> {
    type Out = FullAgain;

    fn with<F: Family>(self, family: &F) -> FullAgain {
        FullAgain::by_spec(family, self.job, self.resets)
    }
}

/// The cleanup job judged ([`cleanup::cleanup`]), a bucket full again when the policy's
/// specification, replaying the admissions the store wrote, says so.
fn judge_job(sc: &Scenario, h: &History) -> CleanupReport {
    let end = Nanos::from_millis(sc.spec.duration_ms.get());
    let resets: Vec<StoreReset> = super::epochs::epochs(sc, true)
        .into_iter()
        .skip(1)
        .map(|(at, initial)| StoreReset {
            at,
            emptied: initial == Initial::Full,
        })
        .collect();
    let job = cleanup::JobHistory::of(h);
    let full = with_family(
        &sc.policy,
        FullBySpec {
            job,
            resets: &resets,
        },
    );
    cleanup::cleanup(job, &full, end)
}
