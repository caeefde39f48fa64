//! The gateways' own figures: breaker openings and closings, and the store calls the guard
//! and the denial cache save.

use super::checker::{Checker, Figure, Judged, Needs, Run, Runs};
use ratelab_gateway::StatsSnapshot;
use serde::{Deserialize, Serialize};

/// The gateways' breakers and savings (figures only).
pub struct Gateways;

/// Measured after the run, by [`crate::run`], against the same seed run again without the
/// guard and the denial cache.
pub const STORE_CALLS_SAVED: &str = "store_calls_saved";

const FIGURES: &[Figure] = &[
    Figure::bounded(
        "breaker_opened",
        "breaker openings over all gateways, as the gateways counted them",
        Needs::Nothing,
    ),
    Figure::bounded(
        "breaker_closed",
        "breaker closings over all gateways, as the gateways counted them",
        Needs::Nothing,
    ),
    Figure::bounded(
        STORE_CALLS_SAVED,
        "store calls the guard or the denial cache saved, measured against the same seed run \
         without them (not measured: a bound on it fails)",
        Needs::Nothing,
    ),
];

impl Checker<Runs> for Gateways {
    fn name(&self) -> &'static str {
        "gateways"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    /// The breakers as the gateways counted them: these figures report the gateways' own
    /// account of their breakers (which scenarios bound), not a verdict on it; the answers
    /// checker holds those counters to the answers the clients received.
    fn measure(&self, run: &Run<'_>, out: &mut Judged) {
        let c = GatewayCounters::sum(run.stats);
        out.measured("breaker_opened", c.breaker_opened);
        out.measured("breaker_closed", c.breaker_closed);
    }
}

/// The gateways' counters, summed over gateways.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct GatewayCounters {
    /// Layers that failed open.
    pub fail_open: u64,
    /// Requests bypassed by the kill switch.
    pub bypassed: u64,
    /// Breaker openings.
    pub breaker_opened: u64,
    /// Breaker closings.
    pub breaker_closed: u64,
}

impl GatewayCounters {
    /// The counters of `stats`, summed.
    pub fn sum(stats: &[StatsSnapshot]) -> GatewayCounters {
        stats
            .iter()
            .fold(GatewayCounters::default(), |a, s| GatewayCounters {
                fail_open: a.fail_open + s.fail_open(),
                bypassed: a.bypassed + s.bypassed,
                breaker_opened: a.breaker_opened + s.breaker_opened,
                breaker_closed: a.breaker_closed + s.breaker_closed,
            })
    }
}
