//! The cleanup job's safety and liveness, judged by their consequences.
//!
//! The job deletes idle buckets: a leader scans for expired buckets, works on them, then
//! commits their deletion. Fencing exists so that a leader that stalled past its lease cannot
//! land that commit after another leader has taken over. This checker does not restate the
//! fence's rule (tokens below the highest are refused); it checks what the rule is *for*:
//!
//! - **No live bucket deleted.** No accepted commit deletes a bucket that was written after
//!   the scan that planned the commit (the same owner's latest scan before it, in the store's
//!   serial order) and was not yet full again when the delete landed: when the state written
//!   says (`WriteRecord::full_at`, read off that state, not the store's TTL), or else by the
//!   write plus the time to refill from empty (the policy's, given by the caller). Deleting a
//!   full bucket changes nothing. Such a
//!   delete resets a bucket a client is draining: its next request finds a full bucket. This
//!   is the harm the unfenced canary shows. A commit that deletes a bucket its scan never
//!   returned is counted apart, and is a failure too.
//! - **One leader at a time**, recomputed from grant times, the lease lengths asked for and
//!   store time: no grant while another grant is still within its length (unless released),
//!   tokens strictly growing, renewals and releases only by the current holder before its
//!   lease lapses.
//! - **Superseded commits**, as figures only: a commit whose sender is no longer the latest
//!   grantee (another owner, or another token, was granted since). This is close to the
//!   fence's own rule, so it is never the verdict; the verdict is the consequence above.
//! - **Liveness**: the longest time without an accepted commit, from time zero to the end.

use crate::history::{CommitRecord, LeaseKind, LeaseRecord, ScanRecord, WriteRecord};
use ratelab_core::Nanos;
use std::collections::BTreeMap;

/// A deletion of a live bucket: the commit, the key, and the write it destroyed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveDelete {
    /// Store time of the commit.
    pub at: Nanos,
    /// Who committed.
    pub owner: String,
    /// The token it carried.
    pub token: u64,
    /// The bucket deleted.
    pub key: String,
    /// Store time of the scan that planned the commit.
    pub scanned_at: Nanos,
    /// Store time of the last write to the bucket between the scan and the commit.
    pub written_at: Nanos,
}

/// What [`cleanup`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// Lease grants (not renewals).
    pub grants: u64,
    /// Breaches of one leader at a time: a grant while another lease was within its length, a
    /// token not above the last one, a renewal by a non-holder or after the lease lapsed.
    pub leader_conflicts: u64,
    /// Commits accepted.
    pub accepted: u64,
    /// Accepted commits from a sender that had been superseded.
    pub superseded_accepted: u64,
    /// Refused commits from a sender that had been superseded.
    pub superseded_rejected: u64,
    /// Refused commits from the latest grantee.
    pub wrongly_rejected: u64,
    /// Buckets deleted by accepted commits.
    pub removed: u64,
    /// Buckets deleted although written after the scan that planned their deletion, and not
    /// yet refilled.
    pub live_deleted: u64,
    /// Buckets an accepted commit deleted that its plan's scan did not return.
    pub deleted_unplanned: u64,
    /// The first such deletion.
    pub first_live_delete: Option<LiveDelete>,
    /// Longest time without an accepted commit, from time zero to `end`.
    pub max_gap: Nanos,
}

/// The cleanup job's part of a history, each list in store order, `seq` placing the records
/// among each other.
#[derive(Clone, Copy, Debug)]
pub struct JobHistory<'a> {
    /// Lease grants and renewals.
    pub leases: &'a [LeaseRecord],
    /// Scans.
    pub scans: &'a [ScanRecord],
    /// Commits.
    pub commits: &'a [CommitRecord],
    /// Every bucket write.
    pub writes: &'a [WriteRecord],
}

impl<'a> JobHistory<'a> {
    /// The job's records in `h` (which must have kept its writes).
    pub fn of(h: &'a crate::History) -> JobHistory<'a> {
        JobHistory {
            leases: &h.leases,
            scans: &h.scans,
            commits: &h.commits,
            writes: &h.writes,
        }
    }
}

/// Checks the cleanup job over its history, up to `end`; `refill` is the policy's time to
/// refill a bucket from empty (after which a bucket is full, and deleting it is harmless).
pub fn cleanup(job: JobHistory<'_>, refill: Nanos, end: Nanos) -> CleanupReport {
    let JobHistory {
        leases,
        scans,
        commits,
        writes,
    } = job;
    let mut r = CleanupReport::default();
    leader_exclusivity(leases, &mut r);
    superseded(leases, commits, &mut r);
    live_deletes(scans, commits, writes, refill, &mut r);
    let mut last_accepted = Nanos::ZERO;
    for c in commits.iter().filter(|c| c.accepted) {
        r.accepted += 1;
        r.removed += c.removed.len() as u64;
        r.max_gap = r.max_gap.max(c.at.saturating_sub(last_accepted));
        last_accepted = c.at;
    }
    r.max_gap = r.max_gap.max(end.saturating_sub(last_accepted));
    r
}

/// One leader at a time, from grant times and lease lengths.
fn leader_exclusivity(leases: &[LeaseRecord], r: &mut CleanupReport) {
    // The current holder and when its lease lapses: its last grant or renewal plus the length
    // it asked for.
    let mut holder: Option<(&str, u64, Nanos)> = None;
    let mut last_token = 0u64;
    for l in leases {
        let lapses = l.at.saturating_add(l.ttl);
        let by_holder = |h: Option<(&str, u64, Nanos)>| {
            h.is_some_and(|(owner, token, until)| {
                owner == l.owner && token == l.token && l.at < until
            })
        };
        match l.kind {
            LeaseKind::Renewal | LeaseKind::Release => {
                // Only the holder's renewal or release changes who holds the lease.
                if !by_holder(holder) {
                    r.leader_conflicts += 1;
                } else if l.kind == LeaseKind::Renewal {
                    holder = Some((&l.owner, l.token, lapses));
                } else {
                    holder = None;
                }
                continue;
            }
            LeaseKind::Grant => {}
        }
        r.grants += 1;
        let live = holder.is_some_and(|(_, _, until)| l.at < until);
        if live || (r.grants > 1 && l.token <= last_token) {
            r.leader_conflicts += 1;
        }
        last_token = last_token.max(l.token);
        holder = Some((&l.owner, l.token, lapses));
    }
}

/// Whether each commit's sender was still the latest grantee when the store handled it.
fn superseded(leases: &[LeaseRecord], commits: &[CommitRecord], r: &mut CleanupReport) {
    let mut grants = leases
        .iter()
        .filter(|l| l.kind == LeaseKind::Grant)
        .peekable();
    let mut latest: Option<&LeaseRecord> = None;
    for c in commits {
        while let Some(g) = grants.next_if(|g| g.seq < c.seq) {
            latest = Some(g);
        }
        let current = latest.is_some_and(|g| g.owner == c.owner && g.token == c.token);
        match (c.accepted, current) {
            (true, false) => r.superseded_accepted += 1,
            (false, false) => r.superseded_rejected += 1,
            (false, true) => r.wrongly_rejected += 1,
            (true, true) => {}
        }
    }
}

/// Accepted deletions of buckets written after the scan that planned them.
fn live_deletes(
    scans: &[ScanRecord],
    commits: &[CommitRecord],
    all_writes: &[WriteRecord],
    refill: Nanos,
    r: &mut CleanupReport,
) {
    // Every bucket write, per key, in store order.
    let mut writes: BTreeMap<&str, Vec<(u64, Nanos, Nanos)>> = BTreeMap::new();
    for w in all_writes {
        // Live until full again: as the state written says, or at the latest after a refill
        // from empty.
        let full_at = w.full_at.unwrap_or(w.at.saturating_add(refill));
        writes
            .entry(&w.key)
            .or_default()
            .push((w.seq, w.at, full_at));
    }
    for w in writes.values_mut() {
        w.sort_unstable();
    }
    for c in commits.iter().filter(|c| c.accepted) {
        let plan = scans
            .iter()
            .rev()
            .find(|s| s.seq < c.seq && s.owner == c.owner);
        let (from_seq, scanned_at) = plan.map_or((0, Nanos::ZERO), |s| (s.seq, s.at));
        for key in &c.removed {
            if !plan.is_some_and(|s| s.keys.contains(key)) {
                r.deleted_unplanned += 1;
            }
            let Some(ws) = writes.get(key.as_str()) else {
                continue;
            };
            // The last write before the commit; harmful if it came after the scan.
            let before = ws.partition_point(|&(seq, _, _)| seq < c.seq);
            let Some(&(seq, written_at, full_at)) = before.checked_sub(1).map(|i| &ws[i]) else {
                continue;
            };
            // Written since the scan, and not yet back to full when the delete landed.
            if seq > from_seq && c.at < full_at {
                r.live_deleted += 1;
                if r.first_live_delete.is_none() {
                    r.first_live_delete = Some(LiveDelete {
                        at: c.at,
                        owner: c.owner.clone(),
                        token: c.token,
                        key: key.clone(),
                        scanned_at,
                        written_at,
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Answer, History, Layer, Layers, StoreFate, StoreOp};
    use ratelab_store::{Fence, FenceVerdict, LeaseTable};

    fn ms(v: u64) -> Nanos {
        Nanos::from_millis(v)
    }

    /// A scripted cleanup run, sans IO: a real lease table, a fence under test, one bucket `k`
    /// and a client that writes it; every step recorded in a [`History`] as the simulator
    /// records it.
    struct Script {
        h: History,
        leases: LeaseTable,
        fence: Fence,
        learn_grants: bool,
    }

    impl Script {
        fn new(fence: Fence, learn_grants: bool) -> Script {
            Script {
                h: History::new(false).keeping_writes(),
                leases: LeaseTable::new(),
                fence,
                learn_grants,
            }
        }

        fn acquire(&mut self, at: u64, owner: &str, ttl: u64) -> u64 {
            let token = self
                .leases
                .acquire("cleanup", owner, ms(ttl), ms(at))
                .expect("the lease is free");
            if self.learn_grants {
                self.fence.learn(token);
            }
            self.h.lease(LeaseRecord {
                seq: 0,
                at: ms(at),
                owner: owner.into(),
                token,
                ttl: ms(ttl),
                kind: LeaseKind::Grant,
            });
            token
        }

        fn scan(&mut self, at: u64, owner: &str) {
            self.h.scan(ScanRecord {
                seq: 0,
                at: ms(at),
                owner: owner.into(),
                keys: vec!["k".into()],
            });
        }

        fn write(&mut self, at: u64) {
            let peer = "10.0.0.1".parse().unwrap();
            let id = self.h.send(ms(at), 0, 0, "k".into(), peer, 0, 1);
            let op = StoreOp::Apply { allowed: true };
            self.h
                .store(ms(at), id, Layer::PerKey, "k", op, StoreFate::Served);
            let answer = Answer::Allowed {
                decided_at: ms(at),
                remaining: 0,
            };
            let layers = Layers {
                edge: None,
                per_key: Some(answer),
            };
            self.h.answer(ms(at), id, answer, layers);
        }

        fn commit(&mut self, at: u64, owner: &str, token: u64) {
            let accepted = self.fence.admit(token) == FenceVerdict::Accepted;
            self.h.commit(CommitRecord {
                seq: 0,
                at: ms(at),
                owner: owner.into(),
                token,
                accepted,
                removed: if accepted { vec!["k".into()] } else { vec![] },
            });
        }

        /// A stalls past its lease; B takes over; the client re-creates `k` at 160 ms; A wakes
        /// and commits at `wakes` the deletion it planned before the stall; B then runs its
        /// own job.
        fn stalled_leader(mut self, wakes: u64) -> CleanupReport {
            let a = self.acquire(0, "a", 100);
            self.scan(10, "a");
            let b = self.acquire(150, "b", 100);
            self.write(160);
            self.commit(wakes, "a", a);
            self.scan(wakes + 10, "b");
            self.commit(wakes + 20, "b", b);
            cleanup(JobHistory::of(&self.h), REFILL, ms(wakes + 100))
        }
    }

    #[test]
    fn the_real_fence_deletes_no_live_bucket_after_a_stall() {
        let r = Script::new(Fence::new(), true).stalled_leader(170);
        assert_eq!(r.live_deleted, 0, "{r:?}");
        assert_eq!((r.superseded_rejected, r.superseded_accepted), (1, 0));
        assert_eq!(
            (r.grants, r.leader_conflicts, r.wrongly_rejected),
            (2, 0, 0)
        );
    }

    #[test]
    fn a_fence_that_does_not_learn_grants_deletes_a_live_bucket() {
        // A wrong rule: the fence remembers only tokens it has written, so the stalled
        // leader's token 1 passes before B's first commit.
        let r = Script::new(Fence::new(), false).stalled_leader(170);
        assert_eq!(r.live_deleted, 1, "{r:?}");
        assert_eq!(r.superseded_accepted, 1);
        let d = r.first_live_delete.expect("a witness");
        assert_eq!((d.owner.as_str(), d.token, d.key.as_str()), ("a", 1, "k"));
        assert_eq!(
            (d.scanned_at, d.written_at, d.at),
            (ms(10), ms(160), ms(170))
        );
    }

    #[test]
    fn deleting_a_bucket_that_has_refilled_since_its_write_is_harmless() {
        // The same stale delete, landing after the bucket written at 160 ms is full again.
        let r = Script::new(Fence::unchecked(), true).stalled_leader(160 + 1_000);
        assert_eq!(r.live_deleted, 0, "{r:?}");
        assert_eq!(
            r.superseded_accepted, 1,
            "still a superseded commit, counted"
        );
        let r = Script::new(Fence::unchecked(), true).stalled_leader(160 + 999);
        assert_eq!(r.live_deleted, 1, "1 ms before it refilled: {r:?}");
    }

    #[test]
    fn a_bucket_is_live_until_the_state_written_says_it_is_full() {
        // Written at 160 ms nearly full, so full again at 200 ms (not 160 + the refill from
        // empty): a delete at 210 ms is harmless, one at 190 ms is not.
        let at = |delete: u64| {
            let mut script = Script::new(Fence::new(), true);
            let a = script.acquire(0, "a", 10_000);
            script.scan(10, "a");
            script.write(160);
            script.h.written_full_at("k", ms(200));
            script.commit(delete, "a", a);
            cleanup(JobHistory::of(&script.h), REFILL, ms(10_000)).live_deleted
        };
        assert_eq!(at(210), 0);
        assert_eq!(at(190), 1);
    }

    #[test]
    fn a_delete_its_scan_never_returned_is_counted() {
        let mut script = Script::new(Fence::new(), true);
        let a = script.acquire(0, "a", 100);
        script.commit(10, "a", a);
        let r = cleanup(JobHistory::of(&script.h), REFILL, ms(100));
        assert_eq!((r.deleted_unplanned, r.live_deleted), (1, 0), "{r:?}");
    }

    #[test]
    fn a_release_ends_the_lease_and_only_the_holder_releases() {
        let release = |at: u64, owner: &str, token: u64| LeaseRecord {
            kind: LeaseKind::Release,
            ..lease(at, owner, token, 0, false)
        };
        let clean = [
            lease(0, "a", 1, 100, false),
            release(10, "a", 1),
            lease(20, "b", 2, 100, false),
        ];
        assert_eq!(
            cleanup(job(&clean, &[]), REFILL, ms(200)).leader_conflicts,
            0
        );
        let bad = [lease(0, "a", 1, 100, false), release(10, "b", 1)];
        assert_eq!(cleanup(job(&bad, &[]), REFILL, ms(200)).leader_conflicts, 1);
        // A release by someone else does not end a's lease: a grant within it is a conflict.
        let overlap = [
            lease(0, "a", 1, 100, false),
            release(10, "b", 1),
            lease(20, "b", 2, 100, false),
        ];
        assert_eq!(
            cleanup(job(&overlap, &[]), REFILL, ms(200)).leader_conflicts,
            2
        );
    }

    #[test]
    fn an_unchecked_fence_deletes_a_live_bucket() {
        let r = Script::new(Fence::unchecked(), true).stalled_leader(170);
        assert_eq!(r.live_deleted, 1, "{r:?}");
    }

    fn job<'a>(leases: &'a [LeaseRecord], commits: &'a [CommitRecord]) -> JobHistory<'a> {
        JobHistory {
            leases,
            scans: &[],
            commits,
            writes: &[],
        }
    }

    /// The policy's time to refill from empty, in these tests.
    const REFILL: Nanos = Nanos::from_millis(1_000);

    fn lease(at: u64, owner: &str, token: u64, ttl: u64, renewal: bool) -> LeaseRecord {
        LeaseRecord {
            seq: at,
            at: ms(at),
            owner: owner.into(),
            token,
            ttl: ms(ttl),
            kind: if renewal {
                LeaseKind::Renewal
            } else {
                LeaseKind::Grant
            },
        }
    }

    fn commit(at: u64, owner: &str, token: u64, accepted: bool) -> CommitRecord {
        CommitRecord {
            seq: at,
            at: ms(at),
            owner: owner.into(),
            token,
            accepted,
            removed: Vec::new(),
        }
    }

    #[test]
    fn a_clean_handover_passes_and_the_gap_counts_from_time_zero() {
        let leases = [
            lease(0, "a", 1, 100, false),
            lease(50, "a", 1, 100, true),
            lease(200, "b", 2, 100, false),
        ];
        let commits = [
            commit(10, "a", 1, true),
            commit(210, "b", 2, true),
            commit(900, "a", 1, false),
        ];
        let r = cleanup(job(&leases, &commits), REFILL, ms(1_000));
        assert_eq!((r.grants, r.leader_conflicts), (2, 0));
        assert_eq!((r.accepted, r.superseded_accepted), (2, 0));
        assert_eq!((r.superseded_rejected, r.wrongly_rejected), (1, 0));
        assert_eq!(r.max_gap, ms(790));
        let idle = cleanup(job(&[], &[]), REFILL, ms(1_000));
        assert_eq!(idle.max_gap, ms(1_000), "no commit at all");
    }

    #[test]
    fn two_leaders_are_caught_from_lease_lengths() {
        // b is granted while a's 100 ms are not over; c reuses a token; d renews a lease it
        // does not hold; a renews after its lease lapsed.
        let leases = [
            lease(0, "a", 1, 100, false),
            lease(50, "b", 2, 100, false),
            lease(500, "c", 2, 100, false),
            lease(550, "d", 9, 100, true),
            lease(900, "e", 10, 10, false),
            lease(950, "e", 10, 10, true),
        ];
        let r = cleanup(job(&leases, &[]), REFILL, ms(1_000));
        assert_eq!(r.leader_conflicts, 4, "{r:?}");
    }

    #[test]
    fn a_refused_commit_from_the_latest_grantee_is_counted() {
        let leases = [lease(0, "a", 1, 100, false)];
        let r = cleanup(job(&leases, &[commit(10, "a", 1, false)]), REFILL, ms(50));
        assert_eq!(r.wrongly_rejected, 1);
    }
}
