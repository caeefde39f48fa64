//! **fields**: `remaining` never grows faster than the refill between two answers in real
//! time (an exact bucket claim), a denial never reports room for its own cost, and
//! `Retry-After` is never earlier than the `RateLimit` field's `t`.

use super::check::{Prepared, ProbeCheck};
use super::history::{Claim, Judging, Observation, Outcome, ProbeHistory};
use super::verdict::{FieldViolation, ProbeVerdict};
use ratelab_core::Nanos;
use std::collections::BTreeMap;

/// The fields check.
pub struct Fields;

impl ProbeCheck for Fields {
    fn name(&self) -> &'static str {
        "fields"
    }

    fn judge(&self, p: &Prepared<'_>, j: &Judging, v: &mut ProbeVerdict) {
        judge_fields(p.history, j, v);
    }

    fn failures(&self, v: &ProbeVerdict, out: &mut Vec<String>) {
        for f in &v.fields {
            out.push(format!(
                "fields: key {:?}: requests {:?}: {}",
                f.key, f.ids, f.what
            ));
        }
    }
}

/// The field checks, per key in send order.
fn judge_fields(h: &ProbeHistory, j: &Judging, v: &mut ProbeVerdict) {
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
            v.fields.push(FieldViolation {
                key: key.to_owned(),
                ids,
                what,
            })
        };
        for o in &obs {
            let has = o.fields.remaining.is_some() || o.fields.retry_after.is_some();
            v.fields_checked += usize::from(has);
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
                    let dt = b.answered.as_u64().saturating_sub(a.sent.as_u64()) + res;
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
