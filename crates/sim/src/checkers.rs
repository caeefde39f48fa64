//! Checkers over a recorded history. They live outside the system under test, read only the
//! history, and report numbers: how much, where, and which requests witness it.
//!
//! - [`envelope`]: the token-bucket envelope. For every key and every interval `[t1, t2]`
//!   between two admissions, admitted cost ≤ B + R·(t2 − t1), compared exactly in integers.
//!   Reports the worst excess (in requests, rounded up), the window and request ids that
//!   witness it, and the total excess over each key's whole run.
//! - [`window_spike`]: the most admitted for one key in any interval of one window length.
//! - [`answered_once`]: every request answered exactly once — none lost, none duplicated.
//! - [`liveness`]: after faults heal and the quota has refilled, a client sending within the
//!   policy's rate is never denied.
//! - [`fencing`]: the cleanup job's safety and liveness. No commit is accepted with a token
//!   lower than one the lease table had granted before it (recomputed from the store's log of
//!   grants and commits, not taken from the fence); at most one leader per lease epoch (tokens
//!   grow, no grant while another lease is live, renewals only by the current holder); and the
//!   longest time without an accepted commit.
//!
//! Admissions are placed on the **store's** timeline (`decided_at`), the one clock every
//! gateway shares in truth, so a gateway's skewed clock shows up as excess rather than
//! hiding it.

use crate::history::{Answer, CommitRecord, LeaseRecord, RequestRecord};
use ratelab_core::Nanos;
use std::collections::BTreeMap;

/// The envelope's constants: admitted·`period` ≤ `burst`·`period` + `amount`·Δt (Δt in ns,
/// `period` in ns): capacity B = `burst`, rate R = `amount` / `period`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Envelope {
    /// B.
    pub burst: u64,
    /// Tokens per `period`.
    pub amount: u64,
    /// The refill period, ns.
    pub period: u64,
}

/// An admitted request, as the checkers see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Admission {
    /// Store time of the deciding operation.
    pub at: Nanos,
    /// Request id.
    pub id: u64,
    /// Cost.
    pub cost: u64,
}

/// The worst envelope violation found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Witness {
    /// The key.
    pub key: String,
    /// First admission in the window.
    pub from: Nanos,
    /// Last admission in the window.
    pub to: Nanos,
    /// Cost admitted in the window.
    pub admitted: u64,
    /// B + R·(to − from), rounded down.
    pub bound: u64,
    /// Ids of the admitted requests in the window (at most [`MAX_WITNESS_IDS`]).
    pub ids: Vec<u64>,
}

/// Most request ids a witness lists.
pub const MAX_WITNESS_IDS: usize = 32;

/// What the envelope checker found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EnvelopeReport {
    /// Largest excess over the envelope in any interval, over all keys, in requests (rounded up).
    pub max_excess: u64,
    /// Sum over keys of the excess over B + R·T across the key's whole run.
    pub total_excess: u64,
    /// Where `max_excess` happened, if anywhere.
    pub witness: Option<Witness>,
}

/// Groups admitted requests by key, each sorted by time then id.
pub fn admissions(requests: &[RequestRecord]) -> BTreeMap<&str, Vec<Admission>> {
    let mut by_key: BTreeMap<&str, Vec<Admission>> = BTreeMap::new();
    for r in requests {
        if let Some((_, Answer::Allowed { decided_at, .. })) = r.answer {
            by_key.entry(&r.key).or_default().push(Admission {
                at: decided_at,
                id: r.id,
                cost: r.cost,
            });
        }
    }
    for v in by_key.values_mut() {
        v.sort_unstable();
    }
    by_key
}

/// Runs the envelope checker over `by_key` (from [`admissions`]).
pub fn envelope(by_key: &BTreeMap<&str, Vec<Admission>>, env: Envelope) -> EnvelopeReport {
    let (b, a, p) = (
        i128::from(env.burst),
        i128::from(env.amount),
        i128::from(env.period),
    );
    let bp = b * p;
    let mut report = EnvelopeReport::default();
    let mut worst_scaled = 0i128;
    for (key, adm) in by_key {
        // excess(i, j) = (S_j − a·t_j) + (a·t_i − S_{i−1}) − B·P, maximised over i ≤ j with a
        // running maximum of the second term: O(n) per key.
        let mut s_prev = 0i128; // S_{j-1}
        let mut best = i128::MIN; // max over i ≤ j of a·t_i − S_{i−1}
        let mut best_i = 0usize;
        for (j, x) in adm.iter().enumerate() {
            let t = i128::from(x.at.as_u64());
            let cand = a * t - s_prev;
            if cand > best {
                best = cand;
                best_i = j;
            }
            let s_j = s_prev + i128::from(x.cost) * p;
            let excess = s_j - a * t + best - bp;
            if excess > worst_scaled {
                worst_scaled = excess;
                let window = &adm[best_i..=j];
                let from = adm[best_i].at;
                let admitted: u64 = window.iter().map(|w| w.cost).sum();
                let bound = (bp + a * (t - i128::from(from.as_u64()))) / p;
                report.witness = Some(Witness {
                    key: (*key).to_owned(),
                    from,
                    to: x.at,
                    admitted,
                    bound: u64::try_from(bound).unwrap_or(u64::MAX),
                    ids: window.iter().take(MAX_WITNESS_IDS).map(|w| w.id).collect(),
                });
            }
            s_prev = s_j;
        }
        if let (Some(first), Some(last)) = (adm.first(), adm.last()) {
            let span = i128::from(last.at.as_u64() - first.at.as_u64());
            let over = s_prev - bp - a * span;
            if over > 0 {
                report.total_excess += u64::try_from((over + p - 1) / p).unwrap_or(u64::MAX);
            }
        }
    }
    if worst_scaled > 0 {
        report.max_excess = u64::try_from((worst_scaled + p - 1) / p).unwrap_or(u64::MAX);
    }
    report
}

/// The most admitted for one key in any half-open interval of length `window`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpikeReport {
    /// The largest admitted cost in any such interval.
    pub max_in_window: u64,
    /// Its key.
    pub key: String,
    /// Its start.
    pub from: Nanos,
}

/// Runs the window-spike checker.
pub fn window_spike(by_key: &BTreeMap<&str, Vec<Admission>>, window: Nanos) -> SpikeReport {
    let mut best = SpikeReport::default();
    for (key, adm) in by_key {
        let mut lo = 0;
        let mut sum = 0u64;
        for (hi, x) in adm.iter().enumerate() {
            sum += x.cost;
            while adm[lo].at.as_u64() + window.as_u64() <= x.at.as_u64() {
                sum -= adm[lo].cost;
                lo += 1;
            }
            if sum > best.max_in_window {
                best = SpikeReport {
                    max_in_window: sum,
                    key: (*key).to_owned(),
                    from: adm[lo].at,
                };
            }
            let _ = hi;
        }
    }
    best
}

/// Requests without an answer, and answers beyond the first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnswerReport {
    /// Requests never answered.
    pub unanswered: u64,
    /// Extra answers.
    pub duplicated: u64,
    /// The first few unanswered ids.
    pub unanswered_ids: Vec<u64>,
}

/// Runs the answered-exactly-once checker.
pub fn answered_once(requests: &[RequestRecord]) -> AnswerReport {
    let mut r = AnswerReport::default();
    for q in requests {
        if q.answer.is_none() {
            r.unanswered += 1;
            if r.unanswered_ids.len() < MAX_WITNESS_IDS {
                r.unanswered_ids.push(q.id);
            }
        }
        r.duplicated += u64::from(q.extra_answers);
    }
    r
}

/// What the liveness checker found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LivenessReport {
    /// When checking started: last fault healed plus the time to refill.
    pub from: Nanos,
    /// Requests on eligible keys sent from then on.
    pub checked: u64,
    /// Of those, how many were not admitted.
    pub violations: u64,
    /// The first few violating ids.
    pub ids: Vec<u64>,
}

/// Runs the liveness checker: requests on `eligible` keys sent at or after `from` must all be
/// admitted.
pub fn liveness(requests: &[RequestRecord], eligible: &[String], from: Nanos) -> LivenessReport {
    let mut r = LivenessReport {
        from,
        ..LivenessReport::default()
    };
    for q in requests {
        if q.sent_at < from || !eligible.contains(&q.key) {
            continue;
        }
        r.checked += 1;
        if !matches!(q.answer, Some((_, Answer::Allowed { .. }))) {
            r.violations += 1;
            if r.ids.len() < MAX_WITNESS_IDS {
                r.ids.push(q.id);
            }
        }
    }
    r
}

/// What [`fencing`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FencingReport {
    /// Lease grants (not renewals).
    pub grants: u64,
    /// Grants or renewals that broke single leadership: a grant while another lease was live,
    /// a token not above the last one, a renewal of a lease not current.
    pub leader_conflicts: u64,
    /// Commits accepted.
    pub accepted: u64,
    /// Commits accepted with a token below one granted before them: a superseded leader's
    /// write that landed.
    pub stale_accepted: u64,
    /// Stale commits refused.
    pub stale_rejected: u64,
    /// Commits refused although their token was the newest granted (a fence that refuses too
    /// much).
    pub wrongly_rejected: u64,
    /// Buckets deleted by accepted commits.
    pub removed: u64,
    /// The first stale commit accepted: (store time, owner, token, highest granted before).
    pub first_stale: Option<(Nanos, String, u64, u64)>,
    /// Longest time without an accepted commit, from the start of the run to `end`.
    pub max_gap: Nanos,
}

/// Checks the cleanup job's leases and commits (each in store order, `seq` placing them among
/// each other), from time zero to `end`.
pub fn fencing(leases: &[LeaseRecord], commits: &[CommitRecord], end: Nanos) -> FencingReport {
    let mut r = FencingReport::default();
    let mut current: Option<&LeaseRecord> = None;
    let mut current_expiry = Nanos::ZERO;
    for l in leases {
        if l.renewal {
            if current.is_none_or(|c| c.token != l.token || c.owner != l.owner)
                || l.at >= current_expiry
            {
                r.leader_conflicts += 1;
            }
            current_expiry = l.expires_at;
            continue;
        }
        r.grants += 1;
        if let Some(c) = current
            && (l.at < current_expiry || l.token <= c.token)
        {
            r.leader_conflicts += 1;
        }
        current = Some(l);
        current_expiry = l.expires_at;
    }
    let mut granted = leases.iter().filter(|l| !l.renewal).peekable();
    let mut highest = 0;
    let mut last_accepted = Nanos::ZERO;
    for c in commits {
        while let Some(g) = granted.next_if(|g| g.seq < c.seq) {
            highest = highest.max(g.token);
        }
        let stale = c.token < highest;
        match (c.accepted, stale) {
            (true, true) => {
                r.stale_accepted += 1;
                if r.first_stale.is_none() {
                    r.first_stale = Some((c.at, c.owner.clone(), c.token, highest));
                }
            }
            (false, true) => r.stale_rejected += 1,
            (false, false) => r.wrongly_rejected += 1,
            (true, false) => {}
        }
        if c.accepted {
            r.accepted += 1;
            r.removed += c.removed;
            r.max_gap = r.max_gap.max(c.at.saturating_sub(last_accepted));
            last_accepted = c.at;
        }
    }
    r.max_gap = r.max_gap.max(end.saturating_sub(last_accepted));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(at_ms: u64, owner: &str, token: u64, ttl_ms: u64, renewal: bool) -> LeaseRecord {
        LeaseRecord {
            seq: at_ms,
            at: Nanos::from_millis(at_ms),
            owner: owner.into(),
            token,
            expires_at: Nanos::from_millis(at_ms + ttl_ms),
            renewal,
        }
    }

    fn commit(at_ms: u64, owner: &str, token: u64, accepted: bool) -> CommitRecord {
        CommitRecord {
            seq: at_ms,
            at: Nanos::from_millis(at_ms),
            owner: owner.into(),
            token,
            accepted,
            removed: 1,
        }
    }

    #[test]
    fn fencing_passes_a_clean_handover() {
        let leases = [
            grant(0, "a", 1, 100, false),
            grant(50, "a", 1, 100, true),
            grant(200, "b", 2, 100, false),
        ];
        let commits = [
            commit(10, "a", 1, true),
            commit(210, "b", 2, true),
            commit(900, "a", 1, false),
        ];
        let r = fencing(&leases, &commits, Nanos::from_millis(1_000));
        assert_eq!(r.grants, 2);
        assert_eq!(r.leader_conflicts, 0);
        assert_eq!((r.accepted, r.stale_accepted, r.stale_rejected), (2, 0, 1));
        assert_eq!(r.max_gap, Nanos::from_millis(790));
        assert_eq!(r.wrongly_rejected, 0);
    }

    #[test]
    fn fencing_counts_a_stale_commit_before_the_new_leaders_first_write() {
        // b is granted token 2 at 200 ms; a's token-1 commit lands at 205 ms, before b writes:
        // stale all the same. A fence that only remembers written tokens accepts it.
        let leases = [grant(0, "a", 1, 100, false), grant(200, "b", 2, 100, false)];
        let commits = [
            commit(10, "a", 1, true),
            commit(205, "a", 1, true),
            commit(210, "b", 2, true),
        ];
        let r = fencing(&leases, &commits, Nanos::from_millis(300));
        assert_eq!(r.stale_accepted, 1);
        assert_eq!(
            r.first_stale,
            Some((Nanos::from_millis(205), "a".into(), 1, 2))
        );
    }

    #[test]
    fn fencing_liveness_counts_from_the_start_and_an_idle_job_fails_it() {
        let r = fencing(&[], &[], Nanos::from_millis(1_000));
        assert_eq!(r.max_gap, Nanos::from_millis(1_000), "no commit at all");
        let late = [commit(700, "a", 1, true)];
        let leases = [grant(690, "a", 1, 100, false)];
        assert_eq!(
            fencing(&leases, &late, Nanos::from_millis(800)).max_gap,
            Nanos::from_millis(700)
        );
    }

    #[test]
    fn fencing_catches_a_stale_commit_that_landed() {
        let leases = [grant(0, "a", 1, 100, false), grant(200, "b", 2, 100, false)];
        let commits = [
            commit(10, "a", 1, true),
            commit(210, "b", 2, true),
            commit(300, "a", 1, true),
        ];
        let r = fencing(&leases, &commits, Nanos::from_millis(300));
        assert_eq!(r.stale_accepted, 1);
        assert_eq!(
            r.first_stale,
            Some((Nanos::from_millis(300), "a".into(), 1, 2))
        );
    }

    #[test]
    fn fencing_catches_two_leaders_in_one_epoch() {
        // b is granted while a's lease is live; c reuses a token; d renews a lease it lost.
        let leases = [
            grant(0, "a", 1, 100, false),
            grant(50, "b", 2, 100, false),
            grant(500, "c", 2, 100, false),
            grant(550, "d", 9, 100, true),
        ];
        let r = fencing(&leases, &[], Nanos::from_millis(1_000));
        assert_eq!(r.leader_conflicts, 3);
    }

    fn adm(times_ms: &[u64]) -> BTreeMap<&'static str, Vec<Admission>> {
        let v = times_ms
            .iter()
            .enumerate()
            .map(|(i, &t)| Admission {
                at: Nanos::from_millis(t),
                id: i as u64,
                cost: 1,
            })
            .collect();
        BTreeMap::from([("k", v)])
    }

    /// B = 2, R = 1/s.
    const ENV: Envelope = Envelope {
        burst: 2,
        amount: 1,
        period: 1_000_000_000,
    };

    #[test]
    fn envelope_passes_a_history_within_bounds() {
        let r = envelope(&adm(&[0, 0, 1000, 2000, 3000]), ENV);
        assert_eq!(r.max_excess, 0);
        assert_eq!(r.total_excess, 0);
        assert_eq!(r.witness, None);
    }

    #[test]
    fn envelope_catches_a_known_bad_history() {
        // Four at t = 0 with B = 2: two over. Then one at 500 ms: bound 2.5 over [0, 500].
        let r = envelope(&adm(&[0, 0, 0, 0, 500]), ENV);
        assert_eq!(
            r.max_excess, 3,
            "5 admitted against 2.5: 2.5 over, rounded up"
        );
        let w = r.witness.unwrap();
        assert_eq!(
            (w.admitted, w.bound, w.from, w.to),
            (5, 2, Nanos(0), Nanos::from_millis(500))
        );
        assert_eq!(w.ids, vec![0, 1, 2, 3, 4]);
        assert_eq!(r.total_excess, 3);
    }

    #[test]
    fn envelope_finds_excess_in_an_inner_window() {
        // Well spaced, then three at 10 s: B = 2 allows two at once plus what refilled.
        let r = envelope(&adm(&[0, 5000, 10_000, 10_000, 10_000]), ENV);
        assert_eq!(r.max_excess, 1);
        assert_eq!(r.witness.unwrap().from, Nanos::from_secs(10));
    }

    #[test]
    fn window_spike_counts_the_densest_window() {
        let r = window_spike(&adm(&[0, 900, 950, 1000, 1050, 3000]), Nanos::from_secs(1));
        assert_eq!(r.max_in_window, 4, "900, 950, 1000 and 1050 are within 1 s");
        assert_eq!(r.from, Nanos::from_millis(900));
    }

    fn record(id: u64, answer: Option<Answer>, extra: u32) -> RequestRecord {
        RequestRecord {
            id,
            client: 0,
            group: 0,
            key: "k".into(),
            gateway: 0,
            cost: 1,
            sent_at: Nanos::from_secs(id),
            answer: answer.map(|a| (Nanos::from_secs(id), a)),
            extra_answers: extra,
            read_at: None,
            written_at: None,
            store_calls: 0,
        }
    }

    const OK: Answer = Answer::Allowed {
        decided_at: Nanos(0),
        remaining: 0,
    };

    #[test]
    fn answered_once_catches_lost_and_duplicated_answers() {
        let r = answered_once(&[
            record(0, Some(OK), 0),
            record(1, None, 0),
            record(2, Some(OK), 2),
        ]);
        assert_eq!((r.unanswered, r.duplicated), (1, 2));
        assert_eq!(r.unanswered_ids, vec![1]);
        assert_eq!(
            answered_once(&[record(0, Some(OK), 0)]),
            AnswerReport::default()
        );
    }

    #[test]
    fn liveness_catches_a_denial_after_healing() {
        let denied = Answer::Denied {
            decided_at: Nanos(0),
            retry_after: Nanos(1),
        };
        let h = [
            record(0, Some(denied), 0),
            record(1, Some(OK), 0),
            record(2, Some(denied), 0),
        ];
        let r = liveness(&h, &["k".into()], Nanos::from_secs(1));
        assert_eq!((r.checked, r.violations, r.ids.clone()), (2, 1, vec![2]));
        assert_eq!(liveness(&h, &["other".into()], Nanos(0)).checked, 0);
    }
}
