//! The gateways' own figures: breaker openings and closings, and the store calls the guard
//! and the denial cache save.

use super::checker::{Checker, Figure, Needs};

/// The gateways' breakers and savings (figures only).
pub struct Gateways;

const FIGURES: &[Figure] = &[
    Figure::bounded(
        "breaker_opened",
        "breaker openings over all gateways",
        Needs::Nothing,
        |r| Some(r.report.gateway_counters.breaker_opened),
    ),
    Figure::bounded(
        "breaker_closed",
        "breaker closings over all gateways",
        Needs::Nothing,
        |r| Some(r.report.gateway_counters.breaker_closed),
    ),
    Figure::bounded(
        "store_calls_saved",
        "store calls the guard or the denial cache saved, measured against the same seed run \
         without them (not measured: a bound on it fails)",
        Needs::Nothing,
        |r| r.report.store_calls_saved,
    ),
];

impl Checker for Gateways {
    fn name(&self) -> &'static str {
        "gateways"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }
}
