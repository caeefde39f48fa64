//! The cleanup job's safety and liveness, judged by their consequences.
//!
//! The job deletes idle buckets: a leader scans for expired buckets, works on them, then
//! commits their deletion. Fencing exists so that a leader that stalled past its lease cannot
//! land that commit after another leader has taken over. This checker does not restate the
//! fence's rule (tokens below the highest are refused); it checks what the rule is *for*:
//!
//! - **No live bucket deleted.** No accepted commit deletes a bucket that was written after
//!   the scan that planned the commit (the same owner's latest scan before it, in the store's
//!   serial order) and was not yet full again when the delete landed ([`FullAgain`]: by the
//!   policy's own specification replaying the admissions the store wrote, never read off the
//!   state the store wrote; where the specification loses track of a bucket, its deletes
//!   are not judged).
//!   Deleting a full bucket changes nothing. Such a delete resets a bucket a client is
//!   draining: its next request finds a full bucket. This is the harm the unfenced canary
//!   shows. A commit that deletes a bucket its scan never returned is counted apart, and is
//!   a failure too.
//! - **One leader at a time**, recomputed from grant times, the lease lengths asked for and
//!   store time: no grant while another grant is still within its length (unless released),
//!   tokens strictly growing, renewals and releases only by the current holder before its
//!   lease lapses.
//! - **No commit in a successor's lease**: no commit accepted while a lease granted after
//!   its sender's (to another owner or token) is still within its length, by the grant and
//!   renewal times and the lengths asked for. Two leaders would then be acting at once,
//!   whatever tokens the fence compared.
//! - **Superseded commits**, as figures only: a commit whose sender is no longer the latest
//!   grantee (another owner, or another token, was granted since). This is close to the
//!   fence's own rule, so it is never the verdict; the verdicts are the ones above.
//! - **Liveness**: the longest time without an accepted commit, from time zero to the end.

use crate::family::Family;
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
    /// Accepted commits landing while a lease granted after their sender's was still within
    /// its length.
    pub in_successor_lease: u64,
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

/// When each bucket write (`JobHistory::writes`, same order) leaves its bucket full again:
/// from then on, deleting the bucket changes no answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FullAgain(Vec<Nanos>);

impl FullAgain {
    /// By the bound alone: a write leaves its bucket full again at the latest `refill` (the
    /// policy's time to refill from empty, or for how long a count still weighs) after it.
    pub fn within(job: JobHistory<'_>, refill: Nanos) -> FullAgain {
        FullAgain(
            job.writes
                .iter()
                .map(|w| w.at.saturating_add(refill))
                .collect(),
        )
    }

    /// By `family`'s specification: each bucket's admissions replayed in store order from a
    /// key nobody used (and from nothing again after an accepted commit deleted it, or the
    /// store lost every bucket), each write full again when its state is idle
    /// ([`Family::idle_from`]); where several states are possible, the earliest, so that a
    /// delete before it is harmful whichever the store held. Where the specification cannot
    /// follow the store (it denies an admission the store wrote, cannot name the instant, or
    /// the store's buckets were replaced by copies of unknown age), it makes no claim: the
    /// bucket's writes count as full again at once until it is deleted or the store emptied.
    /// (A bucket's time to refill from empty, [`FullAgain::within`], is when it is full again
    /// at the latest, not at the earliest: a delete before it may well be harmless.)
    pub fn by_spec<F: Family>(family: &F, job: JobHistory<'_>, resets: &[StoreReset]) -> FullAgain {
        // Per bucket: its possible states, or `None` once the specification lost track.
        let mut states: BTreeMap<&str, Option<Vec<F::State>>> = BTreeMap::new();
        let mut deletes = job.commits.iter().filter(|c| c.accepted).peekable();
        let mut resets = resets.iter().peekable();
        let mut out = Vec::with_capacity(job.writes.len());
        for w in job.writes {
            while let Some(c) = deletes.next_if(|c| c.seq < w.seq) {
                for key in &c.removed {
                    states.remove(key.as_str());
                }
            }
            while let Some(r) = resets.next_if(|r| r.at <= w.at) {
                if r.emptied {
                    states.clear();
                } else {
                    states.values_mut().for_each(|s| *s = None);
                }
            }
            let now = states
                .entry(&w.key)
                .or_insert_with(|| Some(family.fresh(&[])));
            let next: Option<Vec<F::State>> = now.take().and_then(|ss| {
                let next: Vec<F::State> = ss
                    .iter()
                    .map(|s| family.decide(s, w.at, w.cost))
                    .filter(|(said, _)| said.allowed)
                    .map(|(_, s)| s)
                    .collect();
                (!next.is_empty()).then_some(next)
            });
            let idle = next.as_ref().and_then(|ss| {
                ss.iter()
                    .map(|s| family.idle_from(s))
                    .try_fold(Nanos(u64::MAX), |m, t| Some(m.min(t?)))
            });
            out.push(idle.map_or(w.at, |t| t.max(w.at)));
            *now = next;
        }
        FullAgain(out)
    }
}

/// A moment the store's buckets were replaced: all lost (a crash's restart), or by copies of
/// unknown age (a failover to a replica).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreReset {
    /// Store time.
    pub at: Nanos,
    /// Whether every bucket was lost (else each holds a state the history cannot tell).
    pub emptied: bool,
}

/// Checks the cleanup job over its history, up to `end`, a bucket being full again after
/// each write as `full` says.
pub fn cleanup(job: JobHistory<'_>, full: &FullAgain, end: Nanos) -> CleanupReport {
    let JobHistory {
        leases,
        scans,
        commits,
        writes,
    } = job;
    let mut r = CleanupReport::default();
    leader_exclusivity(leases, &mut r);
    superseded(leases, commits, &mut r);
    r.in_successor_lease = in_successor_lease(leases, commits);
    assert_eq!(
        full.0.len(),
        writes.len(),
        "the full-again times are this job's"
    );
    live_deletes(scans, commits, writes, &full.0, &mut r);
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

/// Accepted commits landing while a lease granted after their sender's last grant, to
/// another owner or token, was within its length (its last grant or renewal before the
/// commit plus the length asked for, unless released).
fn in_successor_lease(leases: &[LeaseRecord], commits: &[CommitRecord]) -> u64 {
    let holder = |l: &LeaseRecord, c: &CommitRecord| l.owner == c.owner && l.token == c.token;
    let mut count = 0;
    for c in commits.iter().filter(|c| c.accepted) {
        let before = &leases[..leases.partition_point(|l| l.seq < c.seq)];
        let own_grant = before
            .iter()
            .rposition(|l| l.kind == LeaseKind::Grant && holder(l, c))
            .map_or(0, |i| i + 1);
        // Each later tenure's last word before the commit: a grant or renewal extends it, a
        // release ends it.
        let mut until: BTreeMap<(&str, u64), Nanos> = BTreeMap::new();
        for l in before[own_grant..].iter().filter(|l| !holder(l, c)) {
            let tenure = (l.owner.as_str(), l.token);
            match l.kind {
                LeaseKind::Grant => {
                    until.insert(tenure, l.at.saturating_add(l.ttl));
                }
                LeaseKind::Renewal => {
                    if let Some(t) = until.get_mut(&tenure) {
                        *t = l.at.saturating_add(l.ttl);
                    }
                }
                LeaseKind::Release => {
                    until.remove(&tenure);
                }
            }
        }
        if until.values().any(|&t| c.at < t) {
            count += 1;
        }
    }
    count
}

/// Accepted deletions of buckets written after the scan that planned them.
fn live_deletes(
    scans: &[ScanRecord],
    commits: &[CommitRecord],
    all_writes: &[WriteRecord],
    full: &[Nanos],
    r: &mut CleanupReport,
) {
    // Every bucket write, per key, in store order, with when it is full again.
    let mut writes: BTreeMap<&str, Vec<(u64, Nanos, Nanos)>> = BTreeMap::new();
    for (w, &full_at) in all_writes.iter().zip(full) {
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
            within_refill(&self.h, ms(wakes + 100))
        }
    }

    /// [`cleanup`] with buckets full again a refill from empty after each write.
    fn within_refill(h: &History, end: Nanos) -> CleanupReport {
        judged(JobHistory::of(h), end)
    }

    #[test]
    fn the_real_fence_deletes_no_live_bucket_after_a_stall() {
        let r = Script::new(Fence::new(), true).stalled_leader(170);
        assert_eq!((r.live_deleted, r.in_successor_lease), (0, 0), "{r:?}");
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
        // B's lease, granted at 150 ms for 100 ms, was running when A's commit landed.
        assert_eq!(r.in_successor_lease, 1);
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
        assert_eq!(r.in_successor_lease, 0, "B's lease lapsed at 250 ms");
        let r = Script::new(Fence::unchecked(), true).stalled_leader(160 + 999);
        assert_eq!(r.live_deleted, 1, "1 ms before it refilled: {r:?}");
    }

    #[test]
    fn a_bucket_is_live_until_the_specification_says_it_is_full() {
        // A bucket of 5 gaining 4 a second: one admission at 160 ms leaves it full again at
        // 410 ms (not 160 ms + the refill from empty): a delete at 420 ms is harmless, one at
        // 400 ms is not; two admissions leave it full at 660 ms.
        let spec = crate::linearizable::Spec::per_second(5, 4);
        let at = |delete: u64, writes: &[u64]| {
            let mut script = Script::new(Fence::new(), true);
            let a = script.acquire(0, "a", 10_000);
            script.scan(10, "a");
            for &w in writes {
                script.write(w);
            }
            script.commit(delete, "a", a);
            let job = JobHistory::of(&script.h);
            cleanup(job, &FullAgain::by_spec(&spec, job, &[]), ms(10_000)).live_deleted
        };
        assert_eq!(at(420, &[160]), 0);
        assert_eq!(at(400, &[160]), 1);
        assert_eq!(at(420, &[160, 165]), 1, "two admissions: full at 660 ms");
    }

    #[test]
    fn the_specification_replays_each_bucket_from_its_deletion() {
        let spec = crate::linearizable::Spec::per_second(5, 4);
        let mut script = Script::new(Fence::new(), true);
        let a = script.acquire(0, "a", 10_000);
        script.write(100);
        script.write(100);
        script.commit(110, "a", a);
        script.write(120);
        let job = JobHistory::of(&script.h);
        let full = FullAgain::by_spec(&spec, job, &[]);
        // 100 ms + 250 ms, 100 ms + 500 ms; then one admission on a fresh bucket.
        assert_eq!(full, FullAgain(vec![ms(350), ms(600), ms(370)]));
    }

    #[test]
    fn a_store_that_lost_its_buckets_is_replayed_from_nothing_or_not_judged() {
        let spec = crate::linearizable::Spec::per_second(5, 4);
        let mut script = Script::new(Fence::new(), true);
        script.write(100);
        script.write(100);
        script.write(120);
        let job = JobHistory::of(&script.h);
        let reset = |emptied| {
            FullAgain::by_spec(
                &spec,
                job,
                &[StoreReset {
                    at: ms(110),
                    emptied,
                }],
            )
        };
        // Emptied at 110 ms: the third admission is a fresh bucket's, full at 370 ms.
        assert_eq!(reset(true), FullAgain(vec![ms(350), ms(600), ms(370)]));
        // Replaced by a copy of unknown age (fuller or emptier than the primary's): no claim
        // until the bucket is deleted, so no delete of it is judged live.
        assert_eq!(reset(false), FullAgain(vec![ms(350), ms(600), ms(120)]));
    }

    #[test]
    fn where_the_specification_denies_a_write_it_makes_no_claim() {
        // A bucket of 1: the second admission at the same instant is one the specification
        // denies (a lost update), so it cannot say when that write, or the bucket's later
        // ones, leave it full: they count as full at once.
        let spec = crate::linearizable::Spec::per_second(1, 4);
        let mut script = Script::new(Fence::new(), true);
        script.write(100);
        script.write(100);
        script.write(900);
        let job = JobHistory::of(&script.h);
        let full = FullAgain::by_spec(&spec, job, &[]);
        assert_eq!(full, FullAgain(vec![ms(350), ms(100), ms(900)]));
    }

    #[test]
    fn a_delete_its_scan_never_returned_is_counted() {
        let mut script = Script::new(Fence::new(), true);
        let a = script.acquire(0, "a", 100);
        script.commit(10, "a", a);
        let r = within_refill(&script.h, ms(100));
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
        assert_eq!(judged(job(&clean, &[]), ms(200)).leader_conflicts, 0);
        let bad = [lease(0, "a", 1, 100, false), release(10, "b", 1)];
        assert_eq!(judged(job(&bad, &[]), ms(200)).leader_conflicts, 1);
        // A release by someone else does not end a's lease: a grant within it is a conflict.
        let overlap = [
            lease(0, "a", 1, 100, false),
            release(10, "b", 1),
            lease(20, "b", 2, 100, false),
        ];
        assert_eq!(judged(job(&overlap, &[]), ms(200)).leader_conflicts, 2);
    }

    #[test]
    fn an_unchecked_fence_deletes_a_live_bucket() {
        let r = Script::new(Fence::unchecked(), true).stalled_leader(170);
        assert_eq!(r.live_deleted, 1, "{r:?}");
    }

    /// [`cleanup`] of `job` with buckets full again a refill from empty after each write.
    fn judged(job: JobHistory<'_>, end: Nanos) -> CleanupReport {
        cleanup(job, &FullAgain::within(job, REFILL), end)
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
        let r = judged(job(&leases, &commits), ms(1_000));
        assert_eq!((r.grants, r.leader_conflicts), (2, 0));
        assert_eq!((r.accepted, r.superseded_accepted), (2, 0));
        assert_eq!((r.superseded_rejected, r.wrongly_rejected), (1, 0));
        assert_eq!(r.max_gap, ms(790));
        let idle = judged(job(&[], &[]), ms(1_000));
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
        let r = judged(job(&leases, &[]), ms(1_000));
        assert_eq!(r.leader_conflicts, 4, "{r:?}");
    }

    #[test]
    fn a_refused_commit_from_the_latest_grantee_is_counted() {
        let leases = [lease(0, "a", 1, 100, false)];
        let r = judged(job(&leases, &[commit(10, "a", 1, false)]), ms(50));
        assert_eq!(r.wrongly_rejected, 1);
    }

    #[test]
    fn a_commit_in_a_running_successor_lease_is_counted_whatever_the_tokens() {
        let release = |at: u64, owner: &str, token: u64| LeaseRecord {
            kind: LeaseKind::Release,
            ..lease(at, owner, token, 0, false)
        };
        let count = |leases: &[LeaseRecord], at: u64| {
            judged(job(leases, &[commit(at, "a", 1, true)]), ms(1_000)).in_successor_lease
        };
        let handover = [lease(0, "a", 1, 100, false), lease(150, "b", 2, 100, false)];
        assert_eq!(count(&handover, 170), 1, "b's lease runs to 250 ms");
        assert_eq!(count(&handover, 260), 0, "b's lease lapsed");
        assert_eq!(count(&handover, 120), 0, "before b's grant");
        let renewed = [
            handover[0].clone(),
            handover[1].clone(),
            lease(240, "b", 2, 100, true),
        ];
        assert_eq!(count(&renewed, 300), 1, "renewed to 340 ms");
        let released = [
            handover[0].clone(),
            handover[1].clone(),
            release(160, "b", 2),
        ];
        assert_eq!(count(&released, 170), 0, "b released its lease");
        // A's own later grant ends what came before it.
        let regranted = [
            handover[0].clone(),
            handover[1].clone(),
            lease(200, "a", 1, 100, false),
        ];
        assert_eq!(count(&regranted, 210), 0);
    }
}
