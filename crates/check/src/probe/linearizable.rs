//! **linearizable**, black-box ([`crate::linearizable::check_key_from`] for a bucket,
//! [`crate::family::check_key`] for a window family, with a precision per answer), for an
//! exact claim of a policy with a sequential specification: a denial the
//! claimed policy admits from every state the furthest order reached gives there is a
//! *phantom denial*. A key whose search ran out of budget is unknown, never a pass.

use super::check::{Prepared, ProbeCheck};
use super::history::Judging;
use super::verdict::ProbeVerdict;
use crate::linearizable::{LinearizabilityReport, Seen, Verdict};
use ratelab_core::Nanos;

/// The linearizability check.
pub struct Linearizable;

impl ProbeCheck for Linearizable {
    fn name(&self) -> &'static str {
        "linearizable"
    }

    fn applies(&self, j: &Judging) -> bool {
        j.exact && j.claim.has_spec(j.initial)
    }

    fn judge(&self, p: &Prepared<'_>, j: &Judging, v: &mut ProbeVerdict) {
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
                    if viol.phantom_denial {
                        v.phantom_denials.push(((*key).to_owned(), viol.id));
                    }
                    report.violations.insert((*key).to_owned(), viol);
                }
                Some(Verdict::Unknown { .. }) => report.unknown.push((*key).to_owned()),
            }
        }
        v.linearizable = Some(report);
    }

    fn failures(&self, v: &ProbeVerdict, out: &mut Vec<String>) {
        if let Some(l) = &v.linearizable {
            for (key, viol) in &l.violations {
                out.push(format!(
                    "linearizable: key {key:?}: request {}: {} ({} explained before it){}",
                    viol.id,
                    viol.detail,
                    viol.explained,
                    if viol.phantom_denial {
                        "; a phantom denial"
                    } else {
                        ""
                    }
                ));
            }
        }
    }
}
