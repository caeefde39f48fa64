//! Every failure answer has the failure it names behind it.
//!
//! A gateway that cannot get a decision from its store lets the request through (fail
//! open) or refuses it (an error), and says why: the store answered with an error, the
//! deadline passed, or the breaker was open. Each reason is a claim about the history, and
//! each is checked against it, per limit layer:
//!
//! - **timeout**: the request waited its whole deadline: answered at least `deadline` after
//!   it was sent (the deadline runs from when the gateway started the request, which is no
//!   earlier than the send). A gateway that gives up sooner took a store that was answering
//!   in time for one that was not.
//! - **error**: the store answered one of this request's calls on that layer with an error,
//!   or a fault was active at some moment between the send and the answer (a store that is
//!   down, cut off or failing over answers nothing).
//! - **breaker open**: a request sent to the same gateway no later than this answer failed
//!   on that layer with a timeout or an error (a breaker opens only on failures; a failure
//!   falls between its request's send and its answer, and the answer may come later, after
//!   another layer).
//!
//! A fail-open with none of these behind it let a user's request through while the limiter
//! could have decided it; an error with none refused one for nothing.

use crate::history::{Answer, ErrorKind, FailReason, History, Layer};
use ratelab_core::Nanos;

/// A failure answer the history does not account for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unexplained {
    /// The request.
    pub id: u64,
    /// The layer that failed.
    pub layer: Layer,
    /// Why it is not accounted for.
    pub detail: String,
}

/// What a failure answer claims: the reason, and whether the request was let through.
fn claim(a: Answer) -> Option<(FailReason, bool)> {
    match a {
        Answer::FailedOpen(r) => Some((r, true)),
        Answer::Error(ErrorKind::Unavailable) => Some((FailReason::Error, false)),
        Answer::Error(ErrorKind::Timeout) => Some((FailReason::Timeout, false)),
        Answer::Error(ErrorKind::BreakerOpen) => Some((FailReason::BreakerOpen, false)),
        _ => None,
    }
}

/// The failure answers of `h` judged, and those that nothing in it accounts for, given the
/// requests' `deadline` and the `faults` (each active from its first instant to its last).
pub fn judge(h: &History, deadline: Nanos, faults: &[(Nanos, Nanos)]) -> (u64, Vec<Unexplained>) {
    // The first send of a request that failed with a timeout or an error, per (gateway,
    // layer), to account for a breaker.
    let mut first_failure: std::collections::BTreeMap<(u32, Layer), Nanos> = Default::default();
    for r in &h.requests {
        let at = r.sent_at;
        for layer in Layer::ALL {
            if let Some((FailReason::Timeout | FailReason::Error, _)) =
                r.layers.get(layer).and_then(claim)
            {
                let e = first_failure.entry((r.gateway, layer)).or_insert(at);
                *e = (*e).min(at);
            }
        }
    }
    let mut out = Vec::new();
    let mut judged = 0u64;
    for r in &h.requests {
        let Some((at, _)) = r.answer else { continue };
        for layer in Layer::ALL {
            let Some((reason, open)) = r.layers.get(layer).and_then(claim) else {
                continue;
            };
            judged += 1;
            let waited = at.saturating_sub(r.sent_at);
            let what = if open { "failed open" } else { "refused" };
            let why = match reason {
                FailReason::Timeout if waited < deadline => Some(format!(
                    "{what} on a timeout after {waited}, before its deadline of {deadline}"
                )),
                FailReason::Error
                    if r.store_errored[layer as usize] == 0
                        && !faults
                            .iter()
                            .any(|&(from, to)| from <= at && r.sent_at <= to) =>
                {
                    Some(format!(
                        "{what} on a store error, but the store answered none of its calls \
                         with an error and no fault was active from {} to {at}",
                        r.sent_at
                    ))
                }
                FailReason::BreakerOpen
                    if first_failure
                        .get(&(r.gateway, layer))
                        .is_none_or(|&first| first > at) =>
                {
                    Some(format!(
                        "{what} on an open breaker at {at}, but no request sent to gateway {} \
                         by then failed on this limit",
                        r.gateway
                    ))
                }
                _ => None,
            };
            if let Some(detail) = why {
                out.push(Unexplained {
                    id: r.id,
                    layer,
                    detail,
                });
            }
        }
    }
    (judged, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Layers;
    use crate::testing::record;

    const DEADLINE: Nanos = Nanos(50_000_000);

    /// Request `id`, sent at `id` s, failed on its per-key layer with `a` after `waited`.
    fn failed(id: u64, a: Answer, waited: Nanos) -> crate::history::RequestRecord {
        let mut r = record(id, Some(a), 0);
        r.answer = Some((Nanos(r.sent_at.as_u64() + waited.as_u64()), a));
        r.layers = Layers {
            edge: None,
            per_key: Some(a),
        };
        r
    }

    fn history(rs: Vec<crate::history::RequestRecord>) -> History {
        let mut h = History::new(false);
        h.requests = rs;
        h
    }

    #[test]
    fn a_timeout_before_the_deadline_is_unexplained() {
        let early = failed(
            0,
            Answer::FailedOpen(FailReason::Timeout),
            Nanos(10_000_000),
        );
        let on_time = failed(1, Answer::FailedOpen(FailReason::Timeout), DEADLINE);
        let (_, found) = judge(&history(vec![early, on_time]), DEADLINE, &[]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id, 0);
    }

    #[test]
    fn an_error_needs_an_erroring_store_or_a_fault() {
        let a = Answer::Error(ErrorKind::Unavailable);
        let mut errored = failed(0, a, Nanos(1_000));
        errored.store_errored = [0, 1];
        let bare = failed(1, a, Nanos(1_000));
        let during_fault = failed(2, a, Nanos(1_000));
        let h = history(vec![errored, bare, during_fault]);
        let fault = [(Nanos::from_secs(2), Nanos::from_secs(3))];
        let (_, found) = judge(&h, DEADLINE, &fault);
        assert_eq!(found.iter().map(|u| u.id).collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn an_open_breaker_needs_an_earlier_failure_on_its_gateway() {
        let breaker = Answer::FailedOpen(FailReason::BreakerOpen);
        let first = failed(0, breaker, Nanos(1_000));
        let timeout = failed(1, Answer::FailedOpen(FailReason::Timeout), DEADLINE);
        let after = failed(2, breaker, Nanos(1_000));
        let (_, found) = judge(&history(vec![first, timeout, after]), DEADLINE, &[]);
        assert_eq!(found.iter().map(|u| u.id).collect::<Vec<_>>(), [0]);
    }

    #[test]
    fn a_breaker_opened_by_a_failure_answered_after_it_is_explained() {
        let breaker = Answer::FailedOpen(FailReason::BreakerOpen);
        // Sent at 1.5 s, failed on its layer, answered at 6.5 s after another layer; the
        // breaker it opened answered a request at 2 s.
        let mut slow = failed(
            1,
            Answer::FailedOpen(FailReason::Timeout),
            Nanos::from_secs(5),
        );
        slow.sent_at = Nanos::from_millis(1_500);
        slow.answer = Some((
            Nanos::from_millis(6_500),
            Answer::FailedOpen(FailReason::Timeout),
        ));
        let quick = failed(2, breaker, Nanos(1_000));
        let (judged, found) = judge(&history(vec![slow, quick]), DEADLINE, &[]);
        assert_eq!(judged, 2);
        assert!(found.is_empty(), "{found:?}");
    }
}
