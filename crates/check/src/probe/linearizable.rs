//! **linearizable**, black-box ([`crate::linearizable::check_key_from`] for a bucket,
//! [`crate::family::check_key`] for a window family, with a precision per answer), for an
//! exact claim of a policy with a sequential specification: a denial the
//! claimed policy admits from every state the furthest order reached gives there is a
//! *phantom denial*. A key whose search ran out of budget is unknown, never a pass.

use super::check::{Prepared, Probes};
use super::verdict::ProbeVerdict;
use crate::checker::{Checker, Failure, Figure, Judged, Needs};
use crate::linearizable::{LinearizabilityReport, Seen, Verdict};
use ratelab_core::Nanos;

/// The linearizability check.
pub struct Linearizable;

const FIGURES: &[Figure] = &[
    Figure::bounded(
        "linearizable_keys",
        "keys the search judged (those with an answer)",
        Needs::Nothing,
    ),
    Figure::zero(
        "phantom_denials",
        "denials the claimed policy admits from every state the furthest order reached gives",
        Needs::Nothing,
    ),
];

impl Checker<Probes> for Linearizable {
    fn name(&self) -> &'static str {
        "linearizable"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn applies(&self, p: &Prepared<'_>) -> bool {
        p.judging.exact && p.judging.claim.has_spec(p.judging.initial)
    }

    fn judge(&self, p: &Prepared<'_>, out: &mut Judged) {
        let j = p.judging;
        let mut report = LinearizabilityReport::default();
        for (key, key_ops) in &p.ops {
            // A key no answer came back for says nothing either way.
            if key_ops.iter().all(|o| o.seen == Seen::Unknown) {
                continue;
            }
            report.keys += 1;
            // The judging runs on a timeline shifted later by the clock resolution.
            let origin = j.origin.map(|o| Nanos(o.as_u64().saturating_add(p.shift)));
            match j.claim.check_key(key_ops, j.budget, j.initial, origin) {
                None | Some(Verdict::Linearizable) => {}
                Some(Verdict::Violation(viol)) => {
                    report.violations.insert((*key).to_owned(), viol);
                }
                Some(Verdict::Unknown { .. }) => report.unknown.push((*key).to_owned()),
            }
        }
        for (key, viol) in &report.violations {
            out.failures.push(Failure::safety(
                "linearizable",
                format!(
                    "key {key:?}: request {}: {} ({} explained before it){}",
                    viol.id,
                    viol.detail,
                    viol.explained,
                    if viol.phantom_denial {
                        "; a phantom denial"
                    } else {
                        ""
                    }
                ),
            ));
        }
        let phantoms = report.violations.values().filter(|v| v.phantom_denial);
        out.measured("phantom_denials", phantoms.count() as u64);
        out.measured("linearizable_keys", report.keys as u64);
        out.unknown_keys += report.unknown.len() as u64;
        out.keep("linearizable", report);
    }
}

impl ProbeVerdict {
    /// The black-box linearizability verdicts (`None`: the claim has no sequential spec, or
    /// is only a bound).
    pub fn linearizable(&self) -> Option<&LinearizabilityReport> {
        self.0.evidence("linearizable")
    }

    /// Denials the claimed policy admits from every state the furthest order reached gives
    /// there: (key, request id).
    pub fn phantom_denials(&self) -> Vec<(String, u64)> {
        let Some(l) = self.linearizable() else {
            return Vec::new();
        };
        let phantom = l.violations.iter().filter(|(_, v)| v.phantom_denial);
        phantom.map(|(k, v)| (k.clone(), v.id)).collect()
    }
}
