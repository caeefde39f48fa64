//! **fields**: `remaining` never grows faster than the refill between two answers in real
//! time (an exact bucket claim), a denial never reports room for its own cost,
//! `Retry-After` is never earlier than the `RateLimit` field's `t` (or the reset of the
//! older dialects), `remaining` is never above the limit announced beside it, and the
//! announced limit is the claim's (an exact claim; the first answer per key that differs).

use super::check::{Prepared, Probes};
use super::history::{Claim, Judging, Observation, Outcome, ProbeHistory};
use super::verdict::ProbeVerdict;
use crate::checker::{Checker, Failure, Figure, Judged, Needs};
use ratelab_core::Nanos;
use std::collections::BTreeMap;

/// The fields check.
pub struct Fields;

const FIGURES: &[Figure] = &[
    Figure::bounded(
        "fields_checked",
        "answers that carried a rate-limit field",
        Needs::Nothing,
    ),
    Figure::zero(
        "field_violations",
        "fields that contradict the claim or another field",
        Needs::Nothing,
    ),
];

impl Checker<Probes> for Fields {
    fn name(&self) -> &'static str {
        "fields"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn judge(&self, p: &Prepared<'_>, out: &mut Judged) {
        let mut found = Found::default();
        judge_fields(p.history, p.judging, &mut found);
        for f in &found.violations {
            out.failures.push(Failure::safety(
                "fields",
                format!("key {:?}: requests {:?}: {}", f.key, f.ids, f.what),
            ));
        }
        out.measured("fields_checked", found.checked);
        out.measured("field_violations", found.violations.len() as u64);
        out.keep("fields", found.violations);
    }
}

impl ProbeVerdict {
    /// The fields that contradict the claim or another field.
    pub fn field_violations(&self) -> &[FieldViolation] {
        self.0
            .evidence::<Vec<FieldViolation>>("fields")
            .map_or(&[], Vec::as_slice)
    }
}

/// What the field checks found.
#[derive(Default)]
struct Found {
    /// Answers that carried a field.
    checked: u64,
    /// The contradictions.
    violations: Vec<FieldViolation>,
}

/// A field that contradicts the claim or another field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldViolation {
    /// The key.
    pub key: String,
    /// The requests that witness it.
    pub ids: Vec<u64>,
    /// What is wrong.
    pub what: String,
}

/// The field checks, per key in send order.
fn judge_fields(h: &ProbeHistory, j: &Judging, v: &mut Found) {
    let mut by_key: BTreeMap<&str, Vec<&Observation>> = BTreeMap::new();
    for o in &h.observations {
        if o.outcome != Outcome::Allowed && o.outcome != Outcome::Denied {
            continue;
        }
        by_key.entry(&o.key).or_default().push(o);
    }
    let res = j.clock_resolution.as_u64();
    for (key, obs) in by_key {
        let mut flag = |ids: Vec<u64>, what: String| {
            v.violations.push(FieldViolation {
                key: key.to_owned(),
                ids,
                what,
            })
        };
        let mut limit_flagged = false;
        // Once per key each: the first answer is the witness.
        let mut malformed_flagged = false;
        for o in &obs {
            if let Some(l) = o.fields.limit {
                if let Some(r) = o.fields.remaining.filter(|&r| r > l) {
                    flag(
                        vec![o.id],
                        format!("remaining {r} above the announced limit {l}"),
                    );
                }
                if j.exact && l != j.claim.burst() && !limit_flagged {
                    limit_flagged = true;
                    flag(
                        vec![o.id],
                        format!("announced limit {l}, the claim's is {}", j.claim.burst()),
                    );
                }
            }
            if let Some((name, value)) = o.fields.malformed.as_ref().filter(|_| !malformed_flagged)
            {
                malformed_flagged = true;
                flag(
                    vec![o.id],
                    format!("{name}: {value:?} is not what the field's grammar allows"),
                );
            }
            let has = o.fields.remaining.is_some()
                || o.fields.retry_after.is_some()
                || o.fields.malformed.is_some();
            v.checked += u64::from(has);
            if o.outcome != Outcome::Denied {
                continue;
            }
            if let Some(r) = o.fields.remaining.filter(|&r| r >= o.cost) {
                flag(
                    vec![o.id],
                    format!("denied with remaining {r}, room for its cost {}", o.cost),
                );
            }
            if let (Some(w), Some(t)) = (o.fields.retry_after, o.fields.reset_secs)
                && w < Nanos::from_secs(t)
            {
                flag(
                    vec![o.id],
                    format!("Retry-After {w} is earlier than the RateLimit field's t={t}"),
                );
            }
        }
        // Remaining grows only as fast as the bucket refills: between an answer and a request
        // sent after it, at most R·Δt more (plus the fraction of a unit `remaining` rounds
        // away), Δt the widest the two decision times allow. Only for an exact bucket claim:
        // a bound says nothing of how `remaining` moves.
        let Claim::TokenBucket { amount, period, .. } = j.claim else {
            continue;
        };
        if !j.exact {
            continue;
        }
        let mut earlier: Vec<&Observation> = Vec::new();
        let mut sorted = obs.clone();
        sorted.sort_by_key(|o| (o.sent, o.id));
        for b in sorted {
            let Some(rb) = b.fields.remaining else {
                continue;
            };
            // The first of the latest answers before b's send that b's remaining outgrows.
            let first = earlier
                .iter()
                .rev()
                .take(256)
                .filter(|a| a.answered < b.sent)
                .filter_map(|a| {
                    let ra = a.fields.remaining?;
                    let dt = b
                        .answered
                        .as_u64()
                        .saturating_sub(a.sent.as_u64())
                        .saturating_add(res);
                    let grown = i128::from(rb) - i128::from(ra) - 1;
                    (grown >= 0
                        && grown * i128::from(period.as_u64())
                            >= i128::from(amount) * i128::from(dt))
                    .then_some((a.id, ra, dt))
                })
                .next();
            if let Some((aid, ra, dt)) = first {
                flag(
                    vec![aid, b.id],
                    format!(
                        "remaining went from {ra} to {rb} within {}, faster than the refill",
                        Nanos(dt)
                    ),
                );
            }
            earlier.push(b);
        }
    }
}
