//! The history as every probe check reads it. A check is a
//! `ratelab_check::checker::Checker<Probes>`, the trait the simulator's checkers implement too.

use super::history::{Judging, Outcome, ProbeHistory};
use crate::checker::Subject;
use crate::envelope::Span;
use crate::linearizable::{Op, Precision, Seen};
use ratelab_core::Nanos;
use std::collections::BTreeMap;

/// What the probe's checks judge: a [`Prepared`] history.
#[derive(Debug)]
pub struct Probes;

impl Subject for Probes {
    type Of<'a> = Prepared<'a>;
}

/// The history as the checks read it, prepared once.
///
/// The limiter's clock may lag a request's send by up to the resolution, so each request is
/// judged as sent that much earlier. The probe's clock starts at its first send, so the
/// judging runs on a timeline shifted later by the resolution, where `sent − resolution`
/// never falls before 0 (a clamp there would take the allowance from the run's first
/// requests); only differences matter to the checks, and a witness is shifted back.
#[derive(Debug)]
pub struct Prepared<'a> {
    /// The history.
    pub history: &'a ProbeHistory,
    /// What it is judged under: the claim, the clock's resolution, the budget.
    pub judging: &'a Judging,
    /// Per key, each admission's span from its send to its answer (shifted), sorted.
    pub spans: BTreeMap<&'a str, Vec<Span>>,
    /// Per key, every request as an operation of the linearizability search (shifted).
    pub ops: BTreeMap<&'a str, Vec<Op>>,
    /// The shift, ns: the clock resolution.
    pub shift: u64,
}

impl<'a> Prepared<'a> {
    /// Prepares `h` for judging under `j`.
    pub fn of(h: &'a ProbeHistory, j: &'a Judging) -> Prepared<'a> {
        let mut spans: BTreeMap<&str, Vec<Span>> = BTreeMap::new();
        let mut ops: BTreeMap<&str, Vec<Op>> = BTreeMap::new();
        let shift = j.clock_resolution.as_u64();
        let later = |t: Nanos| Nanos(t.as_u64().saturating_add(shift));
        for o in &h.observations {
            let from = o.sent;
            let answered = later(o.answered);
            let precision = Precision {
                decided_within: Nanos(answered.as_u64().saturating_sub(from.as_u64())),
                retry_after_unit: Nanos(o.fields.retry_after_unit.as_u64().max(1)),
            };
            let seen = match o.outcome {
                Outcome::Allowed => {
                    spans.entry(&o.key).or_default().push(Span {
                        from,
                        to: answered,
                        id: o.id,
                        cost: o.cost,
                    });
                    Seen::Allowed {
                        at: from,
                        remaining: o.fields.remaining,
                    }
                }
                Outcome::Denied => Seen::Denied {
                    at: from,
                    retry_after: o.fields.retry_after,
                },
                Outcome::Failed(_) => Seen::Unknown,
            };
            // Each operation taken as sent earlier: fewer real-time constraints, never a
            // false alarm.
            ops.entry(&o.key).or_default().push(Op {
                id: o.id,
                call: from,
                ret: (seen != Seen::Unknown).then_some(answered),
                cost: o.cost,
                seen,
                stamp: None,
                precision,
            });
        }
        for s in spans.values_mut() {
            s.sort_unstable();
        }
        Prepared {
            history: h,
            judging: j,
            spans,
            ops,
            shift,
        }
    }
}
