//! Liveness: after the last fault heals, when the run has a client within the policy, every
//! one of its requests admitted (`expect.liveness` switches the phase on).

use super::checker::{Checker, Class, Failure, Judged, Run, Runs};
use crate::scenario::Scenario;
use ratelab_check::history::History;
use ratelab_check::liveness::{self, LivenessReport};
use ratelab_core::{Algorithm, Nanos};
use serde::{Deserialize, Serialize};

/// The liveness checker.
pub struct Liveness;

impl Checker<Runs> for Liveness {
    fn name(&self) -> &'static str {
        "liveness"
    }

    fn measure(&self, run: &Run<'_>, out: &mut Judged) {
        if let Some(l) = phase(run.sc, run.h) {
            out.keep("liveness", l);
        }
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let Some(l) = phase(run.sc, run.h) else {
            return;
        };
        out.judged("liveness", l.checked);
        if l.violations > 0 {
            out.failures.push(Failure::new(
                Class::Liveness,
                "liveness",
                format!(
                    "{} of {} probe requests after the faults healed not admitted",
                    l.violations, l.checked
                ),
            ));
        }
    }
}

/// The liveness phase, when the scenario asks for it: where it starts, its keys, and what it
/// found.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Phase {
    /// Checking started here, ns.
    pub from_ns: u64,
    /// Eligible keys.
    pub keys: Vec<String>,
    /// Requests checked.
    pub checked: u64,
    /// Of those, not admitted.
    pub violations: u64,
}

/// The liveness phase of a run whose scenario asks for it.
fn phase(sc: &Scenario, h: &History) -> Option<Phase> {
    if !sc.spec.expect.liveness {
        return None;
    }
    let keys = crate::eligible::liveness_keys(sc);
    // After the last fault: a request sent before it may still be in flight for one
    // deadline; a breaker it opened stays open for its cooldown, and the probe that
    // closes it takes up to one more; then two refill times.
    let timeout = sc.spec.store.timeout_ms.get();
    let breaker = sc
        .spec
        .gateway
        .breaker
        .map_or(0, |b| b.cooldown_ms.get() + timeout);
    let window = sc.policy.quota().window;
    let from = Nanos::from_millis(crate::cluster::faults_end_ms(sc) + timeout + breaker)
        .saturating_add(Nanos(2 * window.as_u64()));
    let LivenessReport {
        checked,
        violations,
        ..
    } = liveness::liveness(&h.requests, &keys, from);
    Some(Phase {
        from_ns: from.as_u64(),
        keys,
        checked,
        violations,
    })
}
