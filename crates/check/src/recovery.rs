//! Recovery: once every fault has healed, the limiter decides again.
//!
//! A request sent after the history's recovery instant (the caller's: the last fault's end,
//! plus what the gateway may still wait out — a deadline, a breaker's cooldown and the probe
//! that closes it) meets a healthy store, so every limit on its way must decide it: an
//! admission, a denial, a full store, a cached denial, a rejection by the guard. A fail-open,
//! an error or a kill-switch bypass then is a limiter that stopped deciding — a connection
//! never re-established, a switch never switched back. An open breaker is judged by what
//! closes it: it stays open until a request probes the store (none may come while a denial
//! cache answers), and turns others away while its probe is in flight. An open-breaker
//! answer therefore fails once the same gateway's store decided that limit for a request
//! sent after recovery and answered before this one was sent, or once a deadline has passed
//! since that gateway's first open-breaker answer after recovery (its probe was in flight
//! then, against a healthy store, and is over within a deadline): a breaker that never
//! closes. This is liveness on what remains after faults, for every request, not only for a
//! paced probe.

use crate::history::{Answer, ErrorKind, FailReason, History, Layer};
use ratelab_core::Nanos;

/// A request after recovery that a limit did not decide.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Undecided {
    /// The request.
    pub id: u64,
    /// When it was sent.
    pub sent: Nanos,
    /// The layer that did not decide it, and what it answered.
    pub layer: Layer,
    /// That answer.
    pub answer: Answer,
}

/// Whether `a` is a decision (or an answer that needs none from the store).
fn decided(a: Answer) -> bool {
    !matches!(
        a,
        Answer::FailedOpen(_) | Answer::Error(_) | Answer::Bypassed
    )
}

/// Whether `a` is an open breaker's answer.
fn breaker_open(a: Answer) -> bool {
    matches!(
        a,
        Answer::FailedOpen(FailReason::BreakerOpen) | Answer::Error(ErrorKind::BreakerOpen)
    )
}

/// The requests of `h` sent from `from` on and answered: how many, and those a limit did not
/// decide, with `deadline` the requests' deadline.
pub fn undecided_after(h: &History, from: Nanos, deadline: Nanos) -> (u64, Vec<Undecided>) {
    // Per (gateway, layer): the first answer, to a request sent from `from` on, that its
    // store decided (a probe that closed the breaker, or a call through a closed one).
    let mut closed: std::collections::BTreeMap<(u32, Layer), Nanos> = Default::default();
    // Per (gateway, layer): the first open-breaker answer after `from`, and so the latest its
    // probe ends.
    let mut probed: std::collections::BTreeMap<(u32, Layer), Nanos> = Default::default();
    for r in h.requests.iter().filter(|r| r.sent_at >= from) {
        let Some((at, _)) = r.answer else { continue };
        for l in Layer::ALL {
            if r.layers.get(l).is_some_and(breaker_open) {
                let e = probed.entry((r.gateway, l)).or_insert(at);
                *e = (*e).min(at);
            }
            let by_store = r.store_calls_on(l) > 0
                && matches!(
                    r.layers.get(l),
                    Some(Answer::Allowed { .. } | Answer::Denied { .. })
                );
            if by_store {
                let e = closed.entry((r.gateway, l)).or_insert(at);
                *e = (*e).min(at);
            }
        }
    }
    let mut judged = 0u64;
    let mut out = Vec::new();
    for r in h.requests.iter().filter(|r| r.sent_at >= from) {
        let Some((_, answer)) = r.answer else {
            continue;
        };
        judged += 1;
        let mut layers = Layer::ALL
            .iter()
            .filter_map(|&l| r.layers.get(l).map(|a| (l, a)));
        let failed = if answer == Answer::Bypassed {
            Some((Layer::PerKey, answer))
        } else {
            layers.find(|&(l, a)| {
                let never_closed = || {
                    closed.get(&(r.gateway, l)).is_some_and(|&t| t < r.sent_at)
                        || probed
                            .get(&(r.gateway, l))
                            .is_some_and(|&t| t.saturating_add(deadline) < r.sent_at)
                };
                !decided(a) && (!breaker_open(a) || never_closed())
            })
        };
        if let Some((layer, answer)) = failed {
            out.push(Undecided {
                id: r.id,
                sent: r.sent_at,
                layer,
                answer,
            });
        }
    }
    (judged, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::Layers;
    use crate::testing::record;

    fn answered(id: u64, a: Answer) -> crate::history::RequestRecord {
        let mut r = record(id, Some(a), 0);
        r.layers = Layers {
            edge: None,
            per_key: Some(a),
        };
        r
    }

    #[test]
    fn after_recovery_every_request_is_decided() {
        let allowed = Answer::Allowed {
            decided_at: Nanos::ZERO,
            remaining: 0,
        };
        let mut h = History::new(false);
        h.requests = vec![
            // During the fault: failing open is what it is for.
            answered(0, Answer::FailedOpen(FailReason::Timeout)),
            answered(1, allowed),
            answered(2, Answer::FailedOpen(FailReason::BreakerOpen)),
            answered(3, Answer::Error(ErrorKind::Unavailable)),
            answered(4, Answer::Bypassed),
            answered(5, Answer::Full),
        ];
        let (judged, found) = undecided_after(&h, Nanos::from_secs(1), Nanos::from_millis(50));
        assert_eq!(judged, 5);
        // The open breaker at 2 s: nothing had probed the store since recovery.
        assert_eq!(found.iter().map(|u| u.id).collect::<Vec<_>>(), [3, 4]);
    }

    #[test]
    fn a_breaker_still_open_after_its_store_decided_never_closed() {
        let allowed = Answer::Allowed {
            decided_at: Nanos::ZERO,
            remaining: 0,
        };
        let breaker = Answer::FailedOpen(FailReason::BreakerOpen);
        let mut probe = answered(1, allowed);
        probe.store_calls = [0, 1];
        let mut h = History::new(false);
        h.requests = vec![probe, answered(2, breaker)];
        let (_, found) = undecided_after(&h, Nanos::from_secs(1), Nanos::from_millis(50));
        assert_eq!(found.iter().map(|u| u.id).collect::<Vec<_>>(), [2]);
        // Answered from the denial cache, with no store call, it closed nothing.
        h.requests[0].store_calls = [0, 0];
        assert!(
            undecided_after(&h, Nanos::from_secs(1), Nanos::from_millis(50))
                .1
                .is_empty()
        );
    }

    #[test]
    fn a_breaker_still_open_a_deadline_after_its_first_refusal_never_closed() {
        let breaker = Answer::FailedOpen(FailReason::BreakerOpen);
        let mut h = History::new(false);
        // Open at 2 s (its probe in flight), open again at 3 s: a probe lasts one deadline.
        h.requests = vec![answered(2, breaker), answered(3, breaker)];
        let (_, found) = undecided_after(&h, Nanos::from_secs(1), Nanos::from_millis(50));
        assert_eq!(found.iter().map(|u| u.id).collect::<Vec<_>>(), [3]);
        // Within the deadline, the probe may still be in flight.
        let (_, found) = undecided_after(&h, Nanos::from_secs(1), Nanos::from_secs(5));
        assert!(found.is_empty());
    }
}
