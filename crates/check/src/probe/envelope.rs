//! **envelope**: admitted cost in any window at most what the claim allows, B + R·Δt, with
//! Δt the widest the admissions' spans allow ([`crate::envelope::envelope_spans`]).

use super::check::{Prepared, ProbeCheck};
use super::history::Judging;
use super::verdict::ProbeVerdict;
use ratelab_core::Nanos;

/// The envelope check.
pub struct Envelope;

impl ProbeCheck for Envelope {
    fn name(&self) -> &'static str {
        "envelope"
    }

    fn judge(&self, p: &Prepared<'_>, j: &Judging, v: &mut ProbeVerdict) {
        let env = j.claim.envelope();
        v.envelope = crate::envelope::envelope_spans(&p.spans, env);
        if let Some(w) = v.envelope.witness.as_mut() {
            w.from = Nanos(w.from.as_u64().saturating_sub(p.shift));
            w.to = Nanos(w.to.as_u64().saturating_sub(p.shift));
        }
        // What the claim allows for the admitted keys over their spans (B + R·T per key).
        v.allowance = p
            .spans
            .values()
            .map(|s| {
                let span = s
                    .iter()
                    .map(|x| x.to)
                    .max()
                    .map_or(0, |to| to.as_u64().saturating_sub(s[0].from.as_u64()));
                let b = u128::from(env.burst) * u128::from(env.period)
                    + u128::from(env.amount) * u128::from(span);
                u64::try_from(b / u128::from(env.period)).unwrap_or(u64::MAX)
            })
            .sum();
    }

    fn failures(&self, v: &ProbeVerdict, out: &mut Vec<String>) {
        if let Some(w) = v
            .envelope
            .witness
            .as_ref()
            .filter(|_| v.envelope.max_excess > 0)
        {
            out.push(format!(
                "envelope: key {:?}: {} admitted in [{}, {}] against a bound of {} (excess {}; requests {:?})",
                w.key, w.admitted, w.from, w.to, w.bound, v.envelope.max_excess, w.ids
            ));
        }
    }
}
