//! The simulator's checkers: one file each, listed once in [`CHECKERS`].
//!
//! A checker (`ratelab_check::checker::Checker`, the trait the probe's checks implement too)
//! says what it applies to, measures its own figures from the history (which a scenario's
//! `expect` bounds, `<figure>_at_most` and `<figure>_at_least`), and judges a run against its
//! own specification, recomputed from the history (never from the code under test or its
//! counters). A report's figures ([`crate::Report::figures`]), its bounds ([`held`]), the
//! explorer's verdict ([`judge`]), a scenario's `expect.explorer` and [`crate::run_with`] all
//! iterate [`CHECKERS`].
//!
//! **A new checker** is one file here with a type implementing `Checker<Runs>`, and one line
//! in [`CHECKERS`]: its figures become bounds scenario files may give (with their schema), and
//! its failures part of every explorer verdict.

mod answers;
mod bound;
mod checker;
mod cleanup;
mod edge;
pub(crate) mod epochs;
mod fail_reasons;
mod fencing;
mod gateway;
mod job;
mod linearizable;
mod liveness;
mod over_denial;
mod recovery;

pub(crate) use answers::Counts;
pub use answers::GroupCounts;
pub use bound::{Evidence as EnvelopeEvidence, Witness};
pub use checker::{
    Bounds, Checker, Class, Failure, Figure, Figures, Judged, Needs, Registry, Run, Runs,
};
pub use edge::EdgeFigures;
pub use gateway::{GatewayCounters, STORE_CALLS_SAVED};
pub use job::JobFigures;
pub use linearizable::LINEARIZABILITY_BUDGET;
pub use liveness::Phase as Liveness;

use std::collections::BTreeMap;

/// Every checker, in the order their failures are reported.
pub static CHECKERS: Registry<Runs> = Registry(&[
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
]);

/// Every figure of every checker.
pub fn figures() -> impl Iterator<Item = &'static Figure> {
    CHECKERS.figures()
}

/// The figure named `name`.
pub fn figure(name: &str) -> Option<&'static Figure> {
    CHECKERS.figure(name)
}

/// Every checker's verdict on one run.
pub fn judge(run: &Run<'_>) -> Judged {
    CHECKERS.judge(run)
}

/// The `bounds` (by figure name; and the figures held to 0 on every run) that `figures`
/// break, each stated with its numbers. A figure the run does not measure breaks a lower
/// bound; [`STORE_CALLS_SAVED`] is measured after the run, by [`crate::run`], and bounded
/// there.
pub fn held(figures: &Figures, bounds: &BTreeMap<String, Bounds>) -> Vec<String> {
    CHECKERS.held(figures, bounds, &[STORE_CALLS_SAVED])
}
