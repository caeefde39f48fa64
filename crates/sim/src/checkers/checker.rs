//! One simulated run as the checkers see it ([`Run`]); what a checker is, its figures and
//! its verdict are `ratelab_check::checker`'s, the same for the probe.

use super::epochs::{Grouped, grouped};
use super::job::{self, JobFigures};
use crate::scenario::Scenario;
use ratelab_check::history::History;
use ratelab_gateway::StatsSnapshot;
use std::sync::OnceLock;

pub use ratelab_check::checker::{
    Bounds, Checker, Class, Failure, Figure, Figures, Judged, Needs, Registry, Subject,
};

/// What the simulator's checkers judge: a [`Run`].
#[derive(Debug)]
pub struct Runs;

impl Subject for Runs {
    type Of<'a> = Run<'a>;
}

/// One run, as the checkers see it: the scenario, the history, and the gateways' own
/// counters (read only by figures that report them).
#[derive(Debug)]
pub struct Run<'a> {
    /// The scenario.
    pub sc: &'a Scenario,
    /// The run's history.
    pub h: &'a History,
    /// The gateways' counters at the end of the run (empty when not given).
    pub stats: &'a [StatsSnapshot],
    /// Whether the run's algorithm is the scenario's policy itself (a builtin, or a user's
    /// limiter that claims to be exactly it), so that a checker may hold every answer to that
    /// policy, denials included; `false` when the policy is only a bound the limiter claims.
    pub exact: bool,
    /// The linearizability search's budget per key and epoch (states made, weighed by size);
    /// past it the key's verdict is unknown.
    pub budget: u64,
    grouped: OnceLock<Grouped<'a>>,
    job: OnceLock<Option<JobFigures>>,
}

impl<'a> Run<'a> {
    /// A run of the scenario's own policy to judge.
    pub fn new(sc: &'a Scenario, h: &'a History) -> Run<'a> {
        Run {
            sc,
            h,
            stats: &[],
            exact: true,
            budget: super::LINEARIZABILITY_BUDGET,
            grouped: OnceLock::new(),
            job: OnceLock::new(),
        }
    }

    /// The same run, with the gateways' counters.
    pub fn stats(self, stats: &'a [StatsSnapshot]) -> Run<'a> {
        Run { stats, ..self }
    }

    /// The same run, of an algorithm the scenario's policy only bounds when `exact` is false.
    pub fn exact(self, exact: bool) -> Run<'a> {
        Run { exact, ..self }
    }

    /// The same run, judged with a linearizability budget of `budget` per key and epoch.
    pub fn budget(self, budget: u64) -> Run<'a> {
        Run { budget, ..self }
    }

    /// Admissions per epoch and key, the per-key operations per epoch and key, and how each
    /// epoch starts (computed once, for every checker).
    pub(crate) fn grouped(&self) -> &Grouped<'a> {
        self.grouped.get_or_init(|| grouped(self.sc, self.h, true))
    }

    /// The cleanup job judged, when the scenario runs it (computed once).
    pub fn job(&self) -> Option<&JobFigures> {
        self.job
            .get_or_init(|| job::judged(self.sc, self.h))
            .as_ref()
    }
}
