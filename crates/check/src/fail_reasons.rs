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
//!   or a fault that can fail its gateway's calls was active at some moment between the send
//!   and the answer (a store that is down, cut off or failing over answers nothing; a fault
//!   on another gateway's link explains nothing here).
//! - **breaker open**: the gateway has a breaker, and at least as many requests as it takes
//!   failures to open it, sent to the same gateway no later than this answer, failed on that
//!   layer with a timeout or an error (a breaker opens only on failures; a failure falls
//!   between its request's send and its answer, and the answer may come later, after
//!   another layer). After a cooldown one failure opens it again, so this is the least the
//!   history must show, not all.
//!
//! - **store full**: the store refused one of this request's calls on that layer for want of
//!   room for a new key (its own record of the call).
//!
//! A fail-open with none of these behind it let a user's request through while the limiter
//! could have decided it; an error or a store-full answer with none refused one for nothing.

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

/// A fault's window, and whose store calls it can fail without the store answering them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FaultWindow {
    /// Its first instant.
    pub from: Nanos,
    /// Its last instant.
    pub to: Nanos,
    /// The gateways whose calls it can fail; `None`, every gateway.
    pub gateways: Option<Vec<u32>>,
}

impl FaultWindow {
    /// Whether it could have failed a call of `gateway`'s made between `sent` and `answered`.
    fn explains(&self, gateway: u32, sent: Nanos, answered: Nanos) -> bool {
        self.from <= answered
            && sent <= self.to
            && self
                .gateways
                .as_ref()
                .is_none_or(|gs| gs.contains(&gateway))
    }
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
/// requests' `deadline`, the `faults`, and the failures it takes to open a gateway's breaker
/// (`None`: the gateways have none).
pub fn judge(
    h: &History,
    deadline: Nanos,
    faults: &[FaultWindow],
    opens_after: Option<u32>,
) -> (u64, Vec<Unexplained>) {
    // The sends of requests that failed with a timeout or an error, per (gateway, layer), in
    // order, to account for a breaker.
    let mut failures: std::collections::BTreeMap<(u32, Layer), Vec<Nanos>> = Default::default();
    for r in &h.requests {
        for layer in Layer::ALL {
            if let Some((FailReason::Timeout | FailReason::Error, _)) =
                r.layers.get(layer).and_then(claim)
            {
                failures
                    .entry((r.gateway, layer))
                    .or_default()
                    .push(r.sent_at);
            }
        }
    }
    for sends in failures.values_mut() {
        sends.sort_unstable();
    }
    let failed_by = |gateway: u32, layer: Layer, at: Nanos| {
        failures
            .get(&(gateway, layer))
            .map_or(0, |s| s.partition_point(|&t| t <= at))
    };
    let mut out = Vec::new();
    let mut judged = 0u64;
    for r in &h.requests {
        let Some((at, _)) = r.answer else { continue };
        for layer in Layer::ALL {
            if r.layers.get(layer) == Some(Answer::Full) {
                judged += 1;
                if r.store_full[layer as usize] == 0 {
                    out.push(Unexplained {
                        id: r.id,
                        layer,
                        detail: format!(
                            "refused as store-full at {at}, but the store refused none of its \
                             calls for want of room"
                        ),
                    });
                }
                continue;
            }
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
                        && !faults.iter().any(|f| f.explains(r.gateway, r.sent_at, at)) =>
                {
                    Some(format!(
                        "{what} on a store error, but the store answered none of its calls \
                         with an error and no fault that can fail gateway {}'s calls was \
                         active from {} to {at}",
                        r.gateway, r.sent_at
                    ))
                }
                FailReason::BreakerOpen => match opens_after {
                    None => Some(format!(
                        "{what} on an open breaker at {at}, but the gateways have no breaker"
                    )),
                    Some(n) => {
                        let failed = failed_by(r.gateway, layer, at);
                        (failed < n as usize).then(|| {
                            format!(
                                "{what} on an open breaker at {at}, but only {failed} requests \
                                 sent to gateway {} by then failed on this limit, of the {n} it \
                                 takes to open",
                                r.gateway
                            )
                        })
                    }
                },
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
        let (_, found) = judge(&history(vec![early, on_time]), DEADLINE, &[], Some(1));
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
        let mut elsewhere = failed(3, a, Nanos(1_000));
        elsewhere.gateway = 1;
        let h = history(vec![errored, bare, during_fault, elsewhere]);
        // A store-wide fault over request 2's flight; a cut of gateway 0's link over request
        // 3's, which went through gateway 1.
        let fault = [
            FaultWindow {
                from: Nanos::from_secs(2),
                to: Nanos::from_millis(2_500),
                gateways: None,
            },
            FaultWindow {
                from: Nanos::from_secs(3),
                to: Nanos::from_secs(4),
                gateways: Some(vec![0]),
            },
        ];
        let (_, found) = judge(&h, DEADLINE, &fault, Some(1));
        assert_eq!(found.iter().map(|u| u.id).collect::<Vec<_>>(), [1, 3]);
    }

    #[test]
    fn a_store_full_answer_needs_the_stores_refusal_for_want_of_room() {
        let mut refused = failed(0, Answer::Full, Nanos(1_000));
        refused.store_full = [0, 1];
        let mut errored = failed(1, Answer::Full, Nanos(1_000));
        errored.store_errored = [0, 1];
        let mut other_layer = failed(2, Answer::Full, Nanos(1_000));
        other_layer.store_full = [1, 0];
        let h = history(vec![refused, errored, other_layer]);
        // Not even a fault explains it: a full store is the store's own answer.
        let fault = [FaultWindow {
            from: Nanos::ZERO,
            to: Nanos::from_secs(10),
            gateways: None,
        }];
        let (judged, found) = judge(&h, DEADLINE, &fault, Some(1));
        assert_eq!(judged, 3);
        assert_eq!(found.iter().map(|u| u.id).collect::<Vec<_>>(), [1, 2]);
    }

    #[test]
    fn an_open_breaker_needs_an_earlier_failure_on_its_gateway() {
        let breaker = Answer::FailedOpen(FailReason::BreakerOpen);
        let first = failed(0, breaker, Nanos(1_000));
        let timeout = failed(1, Answer::FailedOpen(FailReason::Timeout), DEADLINE);
        let after = failed(2, breaker, Nanos(1_000));
        let h = history(vec![first, timeout, after]);
        let (_, found) = judge(&h, DEADLINE, &[], Some(1));
        assert_eq!(found.iter().map(|u| u.id).collect::<Vec<_>>(), [0]);
        // A breaker that takes two failures to open cannot be open after one; no breaker at
        // all, never.
        let ids = |opens_after| {
            let (_, found) = judge(&h, DEADLINE, &[], opens_after);
            found.iter().map(|u| u.id).collect::<Vec<_>>()
        };
        assert_eq!(ids(Some(2)), [0, 2]);
        assert_eq!(ids(None), [0, 2]);
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
        let (judged, found) = judge(&history(vec![slow, quick]), DEADLINE, &[], Some(1));
        assert_eq!(judged, 2);
        assert!(found.is_empty(), "{found:?}");
    }
}
