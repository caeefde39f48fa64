//! **retry-after**: a client that waited exactly the time it was told was admitted (the
//! probe sends those requests on a quiet key and records each pair).

use super::check::{Prepared, Probes};
use super::history::{Observation, Outcome, ProbeHistory};
use super::verdict::ProbeVerdict;
use crate::checker::{Checker, Failure, Figure, Judged, Needs};
use std::collections::BTreeMap;

/// The Retry-After honesty check.
pub struct Honesty;

const FIGURES: &[Figure] = &[
    Figure::bounded(
        "retry_after_probes",
        "honesty probes whose follow-up got an answer",
        Needs::Nothing,
    ),
    Figure::bounded(
        "retry_after_admitted",
        "follow-ups admitted after waiting exactly the Retry-After announced",
        Needs::Nothing,
    ),
];

impl Checker<Probes> for Honesty {
    fn name(&self) -> &'static str {
        "retry-after"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn judge(&self, p: &Prepared<'_>, out: &mut Judged) {
        let r = honesty(p.history);
        for (d, f) in &r.refused {
            out.failures.push(Failure::safety(
                "retry-after",
                format!("request {f} waited exactly what denial {d} announced and was denied"),
            ));
        }
        out.measured("retry_after_probes", r.probes as u64);
        out.measured("retry_after_admitted", r.admitted as u64);
        out.keep("retry-after", r);
    }
}

impl ProbeVerdict {
    /// The honesty probes: how many got an answer, were admitted, and the follow-ups denied.
    pub fn retry_after(&self) -> HonestyReport {
        self.0.evidence("retry-after").cloned().unwrap_or_default()
    }
}

/// What the honesty probes found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HonestyReport {
    /// Probes whose follow-up got an answer.
    pub probes: usize,
    /// Follow-ups admitted.
    pub admitted: usize,
    /// Follow-ups denied: (denial id, follow-up id).
    pub refused: Vec<(u64, u64)>,
}

/// The honesty probes' verdict.
fn honesty(h: &ProbeHistory) -> HonestyReport {
    let by_id: BTreeMap<u64, &Observation> = h.observations.iter().map(|o| (o.id, o)).collect();
    let mut r = HonestyReport::default();
    for p in &h.retry_probes {
        match by_id.get(&p.follow_up).map(|o| &o.outcome) {
            Some(Outcome::Allowed) => {
                r.probes += 1;
                r.admitted += 1;
            }
            Some(Outcome::Denied) => {
                r.probes += 1;
                r.refused.push((p.denied, p.follow_up));
            }
            _ => {}
        }
    }
    r
}
