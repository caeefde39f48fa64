//! **retry-after**: a client that waited exactly the time it was told was admitted (the
//! probe sends those requests on a quiet key and records each pair).

use super::check::{Prepared, ProbeCheck};
use super::history::{Judging, Observation, Outcome, ProbeHistory};
use super::verdict::{HonestyReport, ProbeVerdict};
use std::collections::BTreeMap;

/// The Retry-After honesty check.
pub struct Honesty;

impl ProbeCheck for Honesty {
    fn name(&self) -> &'static str {
        "retry-after"
    }

    fn judge(&self, p: &Prepared<'_>, _: &Judging, v: &mut ProbeVerdict) {
        v.retry_after = honesty(p.history);
    }

    fn failures(&self, v: &ProbeVerdict, out: &mut Vec<String>) {
        for (d, f) in &v.retry_after.refused {
            out.push(format!(
                "retry-after: request {f} waited exactly what denial {d} announced and was denied"
            ));
        }
    }
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
