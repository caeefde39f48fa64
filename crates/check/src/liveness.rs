//! Liveness after faults heal: once the last fault is over and the quota has had time to
//! refill, a client sending within the policy's rate is never denied.

use crate::envelope::MAX_WITNESS_IDS;
use crate::history::{Answer, RequestRecord};
use ratelab_core::Nanos;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::record;

    const OK: Answer = Answer::Allowed {
        decided_at: Nanos(0),
        remaining: 0,
    };

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
