//! What a checker is: what it applies to, the figures it reports, and its verdict.

use super::epochs::{Grouped, grouped};
use super::failure::Failure;
use crate::Report;
use crate::scenario::Scenario;
use ratelab_check::history::History;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// One run, as the checkers see it: the scenario, the history, and the report's counts.
#[derive(Debug)]
pub struct Run<'a> {
    /// The scenario.
    pub sc: &'a Scenario,
    /// The run's report.
    pub report: &'a Report,
    /// The run's history.
    pub h: &'a History,
    /// Whether the run's algorithm is the scenario's policy itself (a builtin, or a user's
    /// limiter that claims to be exactly it), so that a checker may hold every answer to that
    /// policy, denials included; `false` when the policy is only a bound the limiter claims.
    pub exact: bool,
    /// The linearizability search's budget per key and epoch (states made, weighed by size);
    /// past it the key's verdict is unknown.
    pub budget: u64,
    grouped: OnceLock<Grouped<'a>>,
}

impl<'a> Run<'a> {
    /// A run of the scenario's own policy to judge.
    pub fn new(sc: &'a Scenario, report: &'a Report, h: &'a History) -> Run<'a> {
        Run {
            sc,
            report,
            h,
            exact: true,
            budget: super::LINEARIZABILITY_BUDGET,
            grouped: OnceLock::new(),
        }
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
}

/// What part of a scenario a figure needs; a bound on it is an error without that part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Needs {
    /// Any scenario.
    Nothing,
    /// A `gateway.edge` limit.
    Edge,
    /// A `cleanup_job`.
    Job,
    /// A `fixed_window` policy.
    FixedWindow,
}

/// A figure a checker reports, which a scenario's `expect` can bound (`<name>_at_most`,
/// `<name>_at_least`).
#[derive(Debug)]
pub struct Figure {
    /// Its name.
    pub name: &'static str,
    /// What it counts, and what each bound means.
    pub about: &'static str,
    /// What part of the scenario it needs.
    pub needs: Needs,
    /// Its value on a run; `None` when the run does not measure it.
    pub read: fn(&Run<'_>) -> Option<u64>,
    /// The bound it is held to when the scenario gives none, given the scenario's bounds on
    /// it.
    pub held_at_most: fn(Bounds) -> Option<u64>,
    /// Whether it is held to 0 on every run: a scenario may bound it from below (a canary
    /// that must show it), never lift its 0.
    pub invariant: bool,
}

impl Figure {
    /// A figure held only to the bounds a scenario gives.
    pub const fn bounded(
        name: &'static str,
        about: &'static str,
        needs: Needs,
        read: fn(&Run<'_>) -> Option<u64>,
    ) -> Figure {
        Figure {
            name,
            about,
            needs,
            read,
            held_at_most: |_| None,
            invariant: false,
        }
    }

    /// A figure held to 0 on every run (a scenario may ask for it from below).
    pub const fn zero(
        name: &'static str,
        about: &'static str,
        needs: Needs,
        read: fn(&Run<'_>) -> Option<u64>,
    ) -> Figure {
        Figure {
            held_at_most: |_| Some(0),
            invariant: true,
            ..Figure::bounded(name, about, needs, read)
        }
    }
}

/// The bounds on one figure.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bounds {
    /// At most this.
    pub at_most: Option<u64>,
    /// At least this.
    pub at_least: Option<u64>,
}

impl Bounds {
    /// What `value` of figure `name` breaks: these bounds, and `held_at_most` where no upper
    /// bound is given.
    pub fn broken_by(self, name: &str, value: u64, held_at_most: Option<u64>) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(m) = self.at_most.or(held_at_most)
            && value > m
        {
            out.push(format!("{name} = {value}, expected at most {m}"));
        }
        if let Some(m) = self.at_least
            && value < m
        {
            out.push(format!("{name} = {value}, expected at least {m}"));
        }
        out
    }
}

/// What a checker found in one run.
#[derive(Clone, Debug, Default)]
pub struct Judged {
    /// The failures.
    pub failures: Vec<Failure>,
    /// Keys (per epoch) on which the linearizability search ran out of budget: neither
    /// passed nor failed.
    pub unknown_keys: u64,
    /// What each checker that applies to the run judged there (requests, or the job's
    /// commits): an entry, even 0, for every checker that applied. A checker applies where
    /// the run has what it judges (failure answers, denials, the job's commits) or where it
    /// should have (the liveness phase's keys, every answer).
    pub judged: BTreeMap<&'static str, u64>,
}

impl Judged {
    /// Counts `n` more things `checker` judged.
    pub fn judged(&mut self, checker: &'static str, n: u64) {
        *self.judged.entry(checker).or_default() += n;
    }
}

/// A checker: it says what it applies to, reports its figures, and judges a run against its
/// own specification (recomputed from the history, never from the code under test).
pub trait Checker: Sync {
    /// Its name in failure signatures (`class/name`).
    fn name(&self) -> &'static str;

    /// The figures it reports.
    fn figures(&self) -> &'static [Figure] {
        &[]
    }

    /// Judges one run: failures go to `out` (what the explorer, `expect.explorer` and a
    /// user's limiter are held to). Checks nothing where it does not apply.
    fn judge(&self, _run: &Run<'_>, _out: &mut Judged) {}
}
