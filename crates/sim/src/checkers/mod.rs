//! The checkers: one file each, listed once in [`CHECKERS`].
//!
//! A checker says what it applies to, reports its figures (which a scenario's `expect`
//! bounds, `<figure>_at_most` and `<figure>_at_least`), and judges a run against its own
//! specification, recomputed from the history (never from the code under test or its
//! counters). The report's bounds ([`held`]), the explorer's verdict ([`judge`]), a
//! scenario's `expect.explorer` and [`crate::run_with`] all iterate [`CHECKERS`].
//!
//! **A new checker** is one file here with a type implementing [`Checker`], and one line in
//! [`CHECKERS`]: its figures become bounds scenario files may give (with their schema), and
//! its failures part of every explorer verdict.

mod answers;
mod bound;
mod checker;
mod cleanup;
mod edge;
pub(crate) mod epochs;
mod fail_reasons;
mod failure;
mod fencing;
mod gateway;
mod linearizable;
mod liveness;
mod over_denial;
mod recovery;

pub use checker::{Bounds, Checker, Figure, Judged, Needs, Run};
pub use failure::{Class, Failure};
pub use linearizable::LINEARIZABILITY_BUDGET;

use std::collections::BTreeMap;

/// Every checker, in the order their failures are reported.
pub static CHECKERS: &[&dyn Checker] = &[
    &bound::Bound,
    &linearizable::Linearizable,
    &answers::Answers,
    &fail_reasons::FailReasons,
    &cleanup::Cleanup,
    &fencing::Fencing,
    &liveness::Liveness,
    &recovery::Recovery,
    &over_denial::OverDenial,
    &gateway::Gateways,
    &edge::Edge,
];

/// Every figure of every checker.
pub fn figures() -> impl Iterator<Item = &'static Figure> {
    CHECKERS.iter().flat_map(|c| c.figures())
}

/// The figure named `name`.
pub fn figure(name: &str) -> Option<&'static Figure> {
    figures().find(|f| f.name == name)
}

/// Every checker's verdict on one run.
pub fn judge(run: &Run<'_>) -> Judged {
    let mut out = Judged::default();
    for c in CHECKERS {
        c.judge(run, &mut out);
    }
    out
}

/// The `bounds` (by figure name; and the figures held to 0 on every run) that `run` breaks,
/// each stated with its numbers. A figure the run does not measure breaks a lower bound;
/// `store_calls_saved` is measured after the run, by [`crate::run`], and bounded there.
pub fn held(run: &Run<'_>, bounds: &BTreeMap<String, Bounds>) -> Vec<String> {
    let mut out = Vec::new();
    for f in figures() {
        let given = bounds.get(f.name).copied().unwrap_or_default();
        match (f.read)(run) {
            Some(value) => out.extend(given.broken_by(f.name, value, (f.held_at_most)(given))),
            None if f.name == "store_calls_saved" => {}
            None => {
                if let Some(least) = given.at_least {
                    out.push(format!(
                        "{} not measured on this run, expected at least {least}",
                        f.name
                    ));
                }
            }
        }
    }
    out
}
