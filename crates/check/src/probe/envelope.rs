//! **envelope**: admitted cost in any window at most what the claim allows, B + R·Δt, with
//! Δt the widest the admissions' spans allow ([`crate::envelope::envelope_spans`]).

use super::check::{Prepared, Probes};
use super::verdict::ProbeVerdict;
use crate::checker::{Checker, Failure, Figure, Judged, Needs};
use crate::envelope::EnvelopeReport;
use ratelab_core::Nanos;

/// The envelope check.
pub struct Envelope;

const FIGURES: &[Figure] = &[
    Figure::zero(
        "max_excess",
        "largest excess over B + R·Δt in any interval, per key, Δt the widest the spans allow",
        Needs::Nothing,
    ),
    Figure::bounded(
        "total_excess",
        "admitted beyond B + R·T over each key's whole span, summed over keys",
        Needs::Nothing,
    ),
    Figure::bounded(
        "allowance",
        "what the claim allows the admitted keys over their spans (B + R·T per key)",
        Needs::Nothing,
    ),
];

impl Checker<Probes> for Envelope {
    fn name(&self) -> &'static str {
        "envelope"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn judge(&self, p: &Prepared<'_>, out: &mut Judged) {
        let env = p.judging.claim.envelope();
        let mut report = crate::envelope::envelope_spans(&p.spans, env);
        if let Some(w) = report.witness.as_mut() {
            w.from = Nanos(w.from.as_u64().saturating_sub(p.shift));
            w.to = Nanos(w.to.as_u64().saturating_sub(p.shift));
        }
        // What the claim allows for the admitted keys over their spans (B + R·T per key).
        let allowance = p
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
        out.measured("max_excess", report.max_excess);
        out.measured("total_excess", report.total_excess);
        out.measured("allowance", allowance);
        if let Some(w) = report.witness.as_ref().filter(|_| report.max_excess > 0) {
            out.failures.push(Failure::safety(
                "envelope",
                format!(
                    "key {:?}: {} admitted in [{}, {}] against a bound of {} (excess {}; requests {:?})",
                    w.key, w.admitted, w.from, w.to, w.bound, report.max_excess, w.ids
                ),
            ));
        }
        out.keep("envelope", report);
    }
}

impl ProbeVerdict {
    /// The envelope check's report: its worst window (on the probe's clock) and excesses.
    pub fn envelope(&self) -> Option<&EnvelopeReport> {
        self.0.evidence("envelope")
    }
}
