//! Linearizability, per key: the operations a check reads ([`Op`]: what each client saw, and
//! when), the verdicts ([`Verdict`]), and the token bucket's entry points ([`check_key`],
//! [`check_key_from`], [`check`] over every key).
//!
//! A limiter is linearizable if the answers its clients saw are explained by *some* order of
//! the requests, one at a time, that respects real time (a request answered before another
//! was sent comes first), under the limiter family's sequential specification. This catches
//! what the envelope cannot: a request denied that the bucket had room for (a phantom
//! denial), a wrong `remaining` or `retry_after`, a token spent twice when each admission
//! still fits under B + R·Δt.
//!
//! There is one search, over any family ([`crate::family`]); the token bucket is one family
//! among the others ([`crate::family::token_bucket`], its specification written there from
//! the policy's definition, never by calling `ratelab-core`). This module holds what every
//! family's check shares.
//!
//! **Operations** ([`Op`]) carry their call and return times, the limiter's own decision time
//! for an answered request (the store's clock, as the recorded `decided_at`, or a span a
//! probe knows it within: [`Precision`]), what the client saw, and optionally the store's
//! order stamp. Two modes, chosen per key:
//!
//! - *Store-stamped*: when every answered operation carries a stamp, the order is the
//!   store's, and the check is one replay in stamp order; an operation the store stamped but
//!   whose answer was lost is replayed too, and one it never stamped is skipped.
//! - *Black-box*: otherwise, a Wing–Gong search in the style of Lowe and Porcupine over the
//!   orders real time allows. An operation without an answer (a timeout, a lost reply, a
//!   failure the gateway answered for) stays open to the end of the history and may take
//!   effect after its call, or never (Knossos' `:info`). The search has a budget of states;
//!   past it the verdict is [`Verdict::Unknown`], never a guess.

use std::collections::BTreeMap;

use ratelab_core::Nanos;

/// The token bucket the checker holds the answers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Spec {
    /// B, tokens.
    pub capacity: u64,
    /// Tokens gained every `period`.
    pub amount: u64,
    /// The refill period.
    pub period: Nanos,
}

/// What the client saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// Admitted at the limiter's time `at`, with `remaining` tokens left if reported.
    Allowed {
        /// Decision time (the store's clock).
        at: Nanos,
        /// Tokens left, if the limiter reported them.
        remaining: Option<u64>,
    },
    /// Denied at `at`, told to wait `retry_after` if reported.
    Denied {
        /// Decision time (the store's clock).
        at: Nanos,
        /// The wait the client was told, if reported.
        retry_after: Option<Nanos>,
    },
    /// No decision reached the client: it may have taken effect, or not.
    Unknown,
}

/// One request on one key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Op {
    /// The request's id (for reports).
    pub id: u64,
    /// When it was sent.
    pub call: Nanos,
    /// When its answer arrived; `None` if none did.
    pub ret: Option<Nanos>,
    /// Its cost.
    pub cost: u64,
    /// What the client saw.
    pub seen: Seen,
    /// The store's order of application, if the store recorded it (`None`: not applied, or
    /// not recorded).
    pub stamp: Option<u64>,
    /// How precisely its decision time and wait are known.
    pub precision: Precision,
}

/// How precisely an answer's decision time and `retry_after` are known.
///
/// The simulator records the store's own decision time and the exact wait
/// ([`Precision::EXACT`]). A probe of a limiter seen only from outside knows neither: the
/// decision fell somewhere between the send and the answer (widened by the limiter's clock
/// resolution), and a `Retry-After` field is whole seconds rounded up. The checker then
/// holds the answer to every decision time and every wait those allow: a violation it
/// reports holds for all of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Precision {
    /// The decision fell in `[at, at + decided_within]`.
    pub decided_within: Nanos,
    /// The reported `retry_after` is the true wait rounded up to a multiple of this (1 ns:
    /// exact).
    pub retry_after_unit: Nanos,
}

impl Precision {
    /// A recorded decision time and an exact wait.
    pub const EXACT: Precision = Precision {
        decided_within: Nanos(0),
        retry_after_unit: Nanos(1),
    };
}

/// What the bucket held before the first operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Initial {
    /// Full: a key nobody used (every history the simulator records, a probe's fresh keys).
    Full,
    /// Anything from empty to full: a key others may have used before the history began.
    Unknown,
}

/// The verdict on one key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Some order explains every answer.
    Linearizable,
    /// No order does.
    Violation(Violation),
    /// The search ran out of budget after this much work.
    Unknown {
        /// States made, each weighed by its size (one, plus the operations it holds
        /// linearized out of order).
        explored: u64,
    },
}

/// Why no order explains the answers: the request the longest explained prefix could not be
/// extended by, and what the specification gave for it there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The request.
    pub id: u64,
    /// What the client saw, and what the specification gave in the furthest state reached.
    pub detail: String,
    /// How many requests were explained before it.
    pub explained: usize,
    /// Whether it is a *phantom denial*: a denial the specification admits from every state
    /// the furthest order reached gives there, at every moment it may have been decided.
    pub phantom_denial: bool,
}

impl Spec {
    /// A spec for a bucket of `capacity` tokens gaining `per_second` tokens a second.
    pub fn per_second(capacity: u64, per_second: u64) -> Spec {
        Spec {
            capacity,
            amount: per_second,
            period: Nanos(1_000_000_000),
        }
    }
}

/// The default budget of search work per key: states made, each weighed by its size.
pub const DEFAULT_BUDGET: u64 = 2_000_000;

/// Checks one key's operations (any order) against `spec`, exploring at most `budget`
/// search states.
pub fn check_key(spec: &Spec, ops: &[Op], budget: u64) -> Verdict {
    check_key_from(spec, ops, budget, Initial::Full)
}

/// [`check_key`] from a bucket that held `initial` before the first operation.
pub fn check_key_from(spec: &Spec, ops: &[Op], budget: u64, initial: Initial) -> Verdict {
    // What came before the history was decided no later than the first answer arrived (or,
    // for the simulator's exact times, the first call).
    let first = ops
        .iter()
        .map(|o| {
            Nanos(
                o.call
                    .as_u64()
                    .saturating_add(o.precision.decided_within.as_u64()),
            )
        })
        .min()
        .unwrap_or(Nanos::ZERO);
    let from = crate::family::token_bucket::Tats::initial(initial, spec, first);
    crate::family::check_key_from(spec, ops, budget, vec![from])
}

/// The real-time horizon of a search point: the next operation can be any pending one sent
/// no later than the first return among the pending answered ones (`answered` by call time,
/// pending from `prefix` on as `pending` says). Operations return after their call, so the
/// scan stops once calls pass the running minimum.
pub(crate) fn horizon(answered: &[&Op], prefix: usize, pending: impl Fn(usize) -> bool) -> Nanos {
    let mut horizon = Nanos(u64::MAX);
    for (i, op) in answered.iter().enumerate().skip(prefix) {
        if op.call > horizon {
            break;
        }
        if pending(i) {
            horizon = horizon.min(op.ret.unwrap_or(Nanos(u64::MAX)));
        }
    }
    horizon
}

/// Whether `op`, explained from a point with its state unchanged, may be linearized there
/// at once as the point's only child (both searches' reduction): it is a denial, and the
/// moments open operations may take effect at stay as they were — there are none open, or
/// the last decision time (`last_at`) does not move past `at`.
pub(crate) fn linearized_at_once(op: &Op, none_open: bool, at: Nanos, last_at: Nanos) -> bool {
    matches!(op.seen, Seen::Denied { .. }) && (none_open || at <= last_at)
}

/// The operations the store stamped, in its order, each with the next answered decision
/// time after it (one backward pass; far in the future after the last).
pub(crate) fn store_order(ops: &[Op]) -> (Vec<&Op>, Vec<Nanos>) {
    let mut order: Vec<&Op> = ops.iter().filter(|o| o.stamp.is_some()).collect();
    order.sort_by_key(|o| o.stamp);
    let mut next_decided = vec![Nanos(u64::MAX / 2); order.len()];
    let mut next = Nanos(u64::MAX / 2);
    for (i, op) in order.iter().enumerate().rev() {
        next_decided[i] = next;
        if let Some(at) = op.decided() {
            next = at;
        }
    }
    (order, next_decided)
}

/// Fixed pseudo-random words (SplitMix64), one per operation: a set's hash is the XOR of its
/// members' words, the same on every run (the family search's too).
pub(crate) fn words(n: usize) -> Vec<u64> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..n)
        .map(|_| {
            // SplitMix64: fixed words, so the search is the same on every run.
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        })
        .collect()
}

impl Op {
    /// When its decision was made, if an answer says.
    pub fn decided(&self) -> Option<Nanos> {
        match self.seen {
            Seen::Allowed { at, .. } | Seen::Denied { at, .. } => Some(at),
            Seen::Unknown => None,
        }
    }

    /// The latest moment its decision may have been made, if an answer says: its decision
    /// time plus the precision it is known with.
    pub fn decided_by(&self) -> Option<Nanos> {
        self.decided()
            .map(|at| at.saturating_add(self.precision.decided_within))
    }

    /// `r`'s per-key operation: its call and return times, what its answer said (an answer
    /// the gateway gave for a failure is [`Seen::Unknown`]), and the store's stamp when the
    /// recorder has one (a simulated store's atomic transition). Without stamps, as from a
    /// real store, the check is black-box.
    /// `None` when the request never reached the per-key layer, the store refused its new
    /// key, or the gateway's denial cache answered it (nothing was applied).
    pub fn per_key(r: &crate::history::RequestRecord) -> Option<Op> {
        use crate::history::Answer;
        let seen = match r.layers.per_key? {
            Answer::Allowed {
                decided_at,
                remaining,
            } => Seen::Allowed {
                at: decided_at,
                remaining: Some(remaining),
            },
            Answer::Denied {
                decided_at,
                retry_after,
            } => Seen::Denied {
                at: decided_at,
                retry_after: Some(retry_after),
            },
            // Nothing was applied: no room for the key, or the gateway's denial cache answered
            // without a store call (the report checks those against the store's denials).
            Answer::Full | Answer::Cached { .. } => return None,
            _ => Seen::Unknown,
        };
        Some(Op {
            id: r.id,
            call: r.sent_at,
            ret: if seen == Seen::Unknown {
                None
            } else {
                r.answer.as_ref().map(|(t, _)| *t)
            },
            cost: r.cost,
            seen,
            stamp: r.applied_seq,
            precision: Precision::EXACT,
        })
    }
}

/// Every key's verdict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinearizabilityReport {
    /// Keys checked.
    pub keys: usize,
    /// Keys with a violation, with it.
    pub violations: BTreeMap<String, Violation>,
    /// Keys the budget ran out on.
    pub unknown: Vec<String>,
}

impl LinearizabilityReport {
    /// Whether every key was shown linearizable.
    pub fn linearizable(&self) -> bool {
        self.violations.is_empty() && self.unknown.is_empty()
    }
}

/// Checks every key of `by_key` (each key's operations) against `spec`.
pub fn check<'k>(
    spec: &Spec,
    by_key: impl IntoIterator<Item = (&'k str, Vec<Op>)>,
    budget: u64,
) -> LinearizabilityReport {
    let mut r = LinearizabilityReport::default();
    for (key, ops) in by_key {
        r.keys += 1;
        match check_key(spec, &ops, budget) {
            Verdict::Linearizable => {}
            Verdict::Violation(v) => {
                r.violations.insert(key.to_owned(), v);
            }
            Verdict::Unknown { .. } => r.unknown.push(key.to_owned()),
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::{Algorithm, TokenBucket};

    const S: u64 = 1_000_000_000;

    fn ms(v: u64) -> Nanos {
        Nanos(v * 1_000_000)
    }

    /// An answered request decided at `at`, in flight from `call` to `ret`.
    fn allowed(id: u64, call: u64, at: u64, ret: u64, remaining: u64) -> Op {
        Op {
            id,
            call: ms(call),
            ret: Some(ms(ret)),
            cost: 1,
            seen: Seen::Allowed {
                at: ms(at),
                remaining: Some(remaining),
            },
            stamp: None,
            precision: Precision::EXACT,
        }
    }

    fn denied(id: u64, call: u64, at: u64, ret: u64, retry_after: Option<Nanos>) -> Op {
        Op {
            id,
            call: ms(call),
            ret: Some(ms(ret)),
            cost: 1,
            seen: Seen::Denied {
                at: ms(at),
                retry_after,
            },
            stamp: None,
            precision: Precision::EXACT,
        }
    }

    fn unanswered(id: u64, call: u64) -> Op {
        Op {
            id,
            call: ms(call),
            ret: None,
            cost: 1,
            seen: Seen::Unknown,
            stamp: None,
            precision: Precision::EXACT,
        }
    }

    fn verdict(spec: Spec, ops: &[Op]) -> Verdict {
        check_key(&spec, ops, DEFAULT_BUDGET)
    }

    /// A sequential history answered by `ratelab-core`'s bucket: the two implementations of
    /// the policy agree, on every answer field the checker reads.
    #[test]
    fn a_history_answered_by_the_core_bucket_is_linearizable_in_both_modes() {
        let bucket = TokenBucket::per_second(5, 3).unwrap();
        let spec = Spec::per_second(5, 3);
        let mut state = None;
        let mut ops = Vec::new();
        let mut t = 0u64;
        for i in 0..400u64 {
            t += (i * 7_919 % 23) * 17_000_000;
            let at = Nanos(t);
            let (next, d) = bucket.transition(state, at, 1 + i % 2).unwrap();
            state = Some(next);
            let seen = if d.allowed {
                Seen::Allowed {
                    at,
                    remaining: Some(d.remaining),
                }
            } else {
                Seen::Denied {
                    at,
                    retry_after: d.retry_after,
                }
            };
            ops.push(Op {
                id: i,
                call: at,
                ret: Some(at),
                cost: 1 + i % 2,
                seen,
                stamp: Some(i),
                precision: Precision::EXACT,
            });
        }
        assert!(ops.iter().any(|o| matches!(o.seen, Seen::Denied { .. })));
        assert_eq!(verdict(spec, &ops), Verdict::Linearizable, "stamped");
        for o in &mut ops {
            o.stamp = None;
        }
        assert_eq!(verdict(spec, &ops), Verdict::Linearizable, "black box");
    }

    #[test]
    fn overlapping_requests_are_put_in_the_order_their_answers_need() {
        // B = 2: the request sent second got the larger remaining, so it went first.
        let spec = Spec::per_second(2, 1);
        let ops = [allowed(1, 0, 5, 10, 0), allowed(2, 1, 4, 9, 1)];
        assert_eq!(verdict(spec, &ops), Verdict::Linearizable);
    }

    #[test]
    fn a_token_spent_twice_is_caught_though_the_envelope_holds() {
        // B = 5, a fresh bucket: two overlapping admissions each say 4 left. Two admissions
        // are well inside B + R·Δt, so the envelope passes; no order gives both answers.
        let spec = Spec::per_second(5, 1);
        let ops = [allowed(1, 0, 2, 4, 4), allowed(2, 1, 3, 5, 4)];
        let Verdict::Violation(v) = verdict(spec, &ops) else {
            panic!("not caught")
        };
        assert!(v.detail.contains("remaining 4"), "{v:?}");
    }

    #[test]
    fn a_phantom_denial_is_caught() {
        // B = 3 and one admission before it: the bucket had room.
        let spec = Spec::per_second(3, 1);
        let ops = [allowed(1, 0, 0, 1, 2), denied(2, 10, 10, 11, None)];
        let Verdict::Violation(v) = verdict(spec, &ops) else {
            panic!("not caught")
        };
        assert_eq!(v.id, 2);
        assert!(v.detail.contains("the spec admits it"), "{v:?}");
    }

    #[test]
    fn a_wrong_remaining_or_retry_after_is_caught() {
        let spec = Spec::per_second(2, 1);
        let wrong_remaining = [allowed(1, 0, 0, 1, 0)];
        assert!(matches!(
            verdict(spec, &wrong_remaining),
            Verdict::Violation(_)
        ));
        // Empty bucket at 2 ms: one token back after 1 s minus the 2 ms since the first
        // admission... the right wait is exact; one nanosecond off is a violation.
        let right = Nanos(S - 1_000_000);
        let ok = [
            allowed(1, 0, 1, 1, 1),
            allowed(2, 1, 1, 1, 0),
            denied(3, 2, 2, 2, Some(right)),
        ];
        assert_eq!(verdict(spec, &ok), Verdict::Linearizable);
        let off = [
            allowed(1, 0, 1, 1, 1),
            allowed(2, 1, 1, 1, 0),
            denied(3, 2, 2, 2, Some(Nanos(right.as_u64() + 1))),
        ];
        assert!(matches!(verdict(spec, &off), Verdict::Violation(_)));
    }

    #[test]
    fn real_time_order_is_respected() {
        // B = 1: the first admission returned before the second was sent, and both say 0
        // left within the same second: whichever went first, the second had no token.
        let spec = Spec::per_second(1, 1);
        let ops = [allowed(1, 0, 1, 2, 0), allowed(2, 3, 4, 5, 0)];
        assert!(matches!(verdict(spec, &ops), Verdict::Violation(_)));
    }

    #[test]
    fn an_unanswered_request_may_or_may_not_have_taken_effect() {
        let spec = Spec::per_second(1, 1);
        // It took the token: the later denial is explained.
        let took = [unanswered(1, 0), denied(2, 10, 10, 11, None)];
        assert_eq!(verdict(spec, &took), Verdict::Linearizable);
        // It did not: the later admission is explained.
        let not = [unanswered(1, 0), allowed(2, 10, 10, 11, 0)];
        assert_eq!(verdict(spec, &not), Verdict::Linearizable);
        // Without it the denial is a phantom.
        let alone = [denied(2, 10, 10, 11, None)];
        assert!(matches!(verdict(spec, &alone), Verdict::Violation(_)));
    }

    #[test]
    fn a_stamped_history_is_replayed_in_store_order() {
        let spec = Spec::per_second(1, 1);
        // Stamped in the order that explains them: the denial after the admission.
        let mut ops = [allowed(1, 0, 2, 3, 0), denied(2, 0, 1, 3, None)];
        ops[0].stamp = Some(1);
        ops[1].stamp = Some(2);
        assert_eq!(verdict(spec, &ops), Verdict::Linearizable);
        // The other way round, the store's own order contradicts the answers.
        ops[0].stamp = Some(2);
        ops[1].stamp = Some(1);
        let Verdict::Violation(v) = verdict(spec, &ops) else {
            panic!("not caught")
        };
        assert!(v.detail.starts_with("in store order"), "{v:?}");
    }

    #[test]
    fn an_exhausted_budget_is_unknown_not_a_verdict() {
        // Twenty overlapping admissions for nineteen tokens, none reporting what was left:
        // showing that no order works means trying every subset of them first.
        let spec = Spec::per_second(19, 1);
        let ops: Vec<Op> = (0..20)
            .map(|i| Op {
                seen: Seen::Allowed {
                    at: ms(5),
                    remaining: None,
                },
                ..allowed(i, 0, 5, 10, 0)
            })
            .collect();
        assert!(matches!(
            check_key(&spec, &ops, 1_000),
            Verdict::Unknown { .. }
        ));
        // Nineteen of them fit.
        assert_eq!(check_key(&spec, &ops[..19], 1_000), Verdict::Linearizable);
    }

    /// The same core-answered history seen from outside: each decision somewhere within a
    /// flight of 5 ms, a denial's wait in whole seconds. Still explained; and a token spent
    /// twice is still caught.
    #[test]
    fn blurred_times_and_rounded_waits_explain_a_correct_history_and_catch_a_wrong_one() {
        let bucket = TokenBucket::per_second(4, 3).unwrap();
        let spec = Spec::per_second(4, 3);
        let mut state = None;
        let mut ops = Vec::new();
        for i in 0..300u64 {
            let at = Nanos(3_000_000 + i * 45_000_000 + (i % 3) * 1_000_000);
            let (next, d) = bucket.transition(state, at, 1).unwrap();
            state = Some(next);
            let call = Nanos(at.as_u64() - 2_000_000);
            let precision = Precision {
                decided_within: Nanos(5_000_000),
                retry_after_unit: Nanos(S),
            };
            let seen = if d.allowed {
                Seen::Allowed {
                    at: call,
                    remaining: Some(d.remaining),
                }
            } else {
                let w = d.retry_after.unwrap().as_u64().div_ceil(S) * S;
                Seen::Denied {
                    at: call,
                    retry_after: Some(Nanos(w)),
                }
            };
            ops.push(Op {
                id: i,
                call,
                ret: Some(Nanos(call.as_u64() + 5_000_000)),
                cost: 1,
                seen,
                stamp: None,
                precision,
            });
        }
        assert!(ops.iter().any(|o| matches!(o.seen, Seen::Denied { .. })));
        assert_eq!(verdict(spec, &ops), Verdict::Linearizable);
        // The fourth admission claims the third's remaining.
        let Seen::Allowed { at, .. } = ops[3].seen else {
            panic!("the fourth was admitted")
        };
        ops[3].seen = Seen::Allowed {
            at,
            remaining: Some(1),
        };
        assert!(matches!(verdict(spec, &ops), Verdict::Violation(_)));
    }

    #[test]
    fn an_unknown_start_explains_an_early_denial_a_full_one_does_not() {
        let spec = Spec::per_second(2, 1);
        let ops = [denied(1, 0, 0, 1, None), allowed(2, 2000, 2000, 2001, 1)];
        assert!(matches!(verdict(spec, &ops), Verdict::Violation(_)));
        assert_eq!(
            check_key_from(&spec, &ops, DEFAULT_BUDGET, Initial::Unknown),
            Verdict::Linearizable
        );
        // Unknown is at most empty, never more: B = 2 at 1/s never asks for an hour.
        let hour = [denied(1, 0, 0, 1, Some(Nanos(3600 * S)))];
        let v = check_key_from(&spec, &hour, DEFAULT_BUDGET, Initial::Unknown);
        assert!(matches!(v, Verdict::Violation(_)), "{v:?}");
    }

    #[test]
    fn answers_no_state_gives_are_caught_even_when_the_moment_is_uncertain() {
        let spec = Spec::per_second(2, 1);
        let blur = |mut o: Op| {
            o.precision.decided_within = Nanos(S);
            o.precision.retry_after_unit = Nanos(S);
            o
        };
        // More left than the bucket holds, after a long idle time.
        let too_many = [blur(allowed(1, 5000, 5000, 5001, 5))];
        assert!(matches!(verdict(spec, &too_many), Verdict::Violation(_)));
        // A denial told to wait nothing.
        let ops = [
            allowed(1, 0, 0, 0, 1),
            allowed(2, 0, 0, 0, 0),
            blur(denied(3, 1, 1, 2, Some(Nanos(0)))),
        ];
        assert!(matches!(verdict(spec, &ops), Verdict::Violation(_)));
        // A denial of a full bucket is a phantom; one of an empty bucket with a wrong wait
        // is a violation but not a phantom.
        let Verdict::Violation(v) = verdict(spec, &[denied(1, 0, 0, 1, None)]) else {
            panic!("not caught")
        };
        assert!(v.phantom_denial, "{v:?}");
        let wrong_wait = [
            allowed(1, 0, 0, 0, 1),
            allowed(2, 0, 0, 0, 0),
            denied(3, 1, 1, 1, Some(Nanos(7))),
        ];
        let Verdict::Violation(v) = verdict(spec, &wrong_wait) else {
            panic!("not caught")
        };
        assert!(!v.phantom_denial, "{v:?}");
    }
}
