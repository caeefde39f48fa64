//! What a checker is, for the simulator and the probe alike: its name, the figures it
//! measures, when it applies, and its verdict; and a [`Registry`], the one list a product's
//! checkers are kept in.
//!
//! The simulator's checkers judge a simulated run (`ratelab_sim::checkers::CHECKERS`, over
//! its `Run`); the probe's judge a black-box history ([`crate::probe::CHECKS`], over
//! [`crate::probe::Prepared`]). Both are `Registry`s of this one trait: every loop over
//! checkers (which apply, their figures, the bounds a scenario puts on them, their
//! failures, what they could not decide) is written once, here.
//!
//! **A figure is its checker's own**: the checker that declares it in
//! [`Checker::figures`] measures it — from the history, unless its `about` says it reports
//! what the system under test counted of itself (the gateways' breaker transitions) — and it
//! is carried by name in [`Figures`], never as a field of a report. A simulated run's figures
//! are measured apart from its verdict ([`Checker::measure`]: every run's report has them,
//! and a scenario bounds them); a probe's checks record theirs while judging, as the numbers
//! of their verdicts.

use serde::{Deserialize, Serialize};
use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// What part of a simulated scenario a figure needs: a bound on it is an error without
/// that part. The probe's figures need nothing.
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

/// A figure a checker measures, which a scenario's `expect` can bound (`<name>_at_most`,
/// `<name>_at_least`).
#[derive(Debug)]
pub struct Figure {
    /// Its name.
    pub name: &'static str,
    /// What it counts, and what each bound means.
    pub about: &'static str,
    /// What part of the scenario it needs.
    pub needs: Needs,
    /// The bound it is held to when the scenario gives none, given the scenario's bounds on
    /// it.
    pub held_at_most: fn(Bounds) -> Option<u64>,
    /// Whether it is held to 0 on every run: a scenario may bound it from below (a canary
    /// that must show it), never lift its 0.
    pub invariant: bool,
}

impl Figure {
    /// A figure held only to the bounds a scenario gives.
    pub const fn bounded(name: &'static str, about: &'static str, needs: Needs) -> Figure {
        Figure {
            name,
            about,
            needs,
            held_at_most: |_| None,
            invariant: false,
        }
    }

    /// A figure held to 0 on every run (a scenario may ask for it from below).
    pub const fn zero(name: &'static str, about: &'static str, needs: Needs) -> Figure {
        Figure {
            held_at_most: |_| Some(0),
            invariant: true,
            ..Figure::bounded(name, about, needs)
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

/// The figures measured on one run, by name: only those the run measures (a cleanup job's
/// figures are absent from a run without one).
pub type Figures = BTreeMap<String, u64>;

/// What kind of failure.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Class {
    /// An invariant broke.
    Safety,
    /// After the faults healed, the system did not recover.
    Liveness,
    /// The run panicked.
    Panic,
    /// The same seed gave another trace.
    Determinism,
    /// The drawn scenario was not valid (a bug in the generator).
    Generator,
}

impl Class {
    /// Its name in signatures and files.
    pub fn name(self) -> &'static str {
        match self {
            Class::Safety => "safety",
            Class::Liveness => "liveness",
            Class::Panic => "panic",
            Class::Determinism => "determinism",
            Class::Generator => "generator",
        }
    }
}

/// One failure a checker found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    /// Its class.
    pub class: Class,
    /// The checker that found it (or what failed).
    pub checker: String,
    /// What witnessed it.
    pub detail: String,
}

impl Failure {
    /// A failure `checker` found, witnessed by `detail`.
    pub fn new(class: Class, checker: &str, detail: String) -> Failure {
        Failure {
            class,
            checker: checker.to_owned(),
            detail,
        }
    }

    /// A safety failure `checker` found.
    pub fn safety(checker: &str, detail: String) -> Failure {
        Failure::new(Class::Safety, checker, detail)
    }

    /// `class/checker`, as `expect.explorer` names it.
    pub fn signature(&self) -> String {
        format!("{}/{}", self.class.name(), self.checker)
    }

    /// `checker: detail`, one line of a report.
    pub fn line(&self) -> String {
        format!("{}: {}", self.checker, self.detail)
    }
}

/// What the checkers found in one history: their failures, the keys they could not decide,
/// how much each judged, the figures they measured, and the evidence they keep.
#[derive(Clone, Debug, Default)]
pub struct Judged {
    /// The failures.
    pub failures: Vec<Failure>,
    /// Keys (per epoch) on which the linearizability search ran out of budget: neither
    /// passed nor failed.
    pub unknown_keys: u64,
    /// What each checker that applies judged there (requests, or the job's commits): an
    /// entry, even 0, for every checker that applied. A checker applies where the history
    /// has what it judges (failure answers, denials, the job's commits) or where it should
    /// have (the liveness phase's keys, every answer).
    pub judged: BTreeMap<&'static str, u64>,
    /// The checkers that applied, in the registry's order.
    pub applied: Vec<&'static str>,
    /// The figures the checkers that applied measured.
    pub figures: Figures,
    /// What each checker keeps to explain its verdict (a witness, the violations), by its
    /// name; read back with [`Judged::evidence`].
    pub evidence: Evidence,
}

impl Judged {
    /// Counts `n` more things `checker` judged.
    pub fn judged(&mut self, checker: &'static str, n: u64) {
        *self.judged.entry(checker).or_default() += n;
    }

    /// Records figure `name`'s value.
    pub fn measured(&mut self, name: &str, value: u64) {
        self.figures.insert(name.to_owned(), value);
    }

    /// Figure `name`, when measured.
    pub fn figure(&self, name: &str) -> Option<u64> {
        self.figures.get(name).copied()
    }

    /// Keeps `value` as `checker`'s evidence.
    pub fn keep<T: Any + Send + Sync + fmt::Debug>(&mut self, checker: &'static str, value: T) {
        self.evidence.0.insert(checker, Arc::new(value));
    }

    /// `checker`'s evidence, when it kept a `T`.
    pub fn evidence<T: Any>(&self, checker: &str) -> Option<&T> {
        let kept: &dyn Kept = &**self.evidence.0.get(checker)?;
        kept.as_any().downcast_ref()
    }

    /// One line per failure, `checker: detail`.
    pub fn lines(&self) -> Vec<String> {
        self.failures.iter().map(Failure::line).collect()
    }
}

/// Each checker's evidence, by name (typed by the checker that keeps it).
#[derive(Clone, Default)]
pub struct Evidence(BTreeMap<&'static str, Arc<dyn Kept>>);

/// A value kept as evidence.
trait Kept: Any + Send + Sync + fmt::Debug {
    fn as_any(&self) -> &dyn Any;
}

impl<T: Any + Send + Sync + fmt::Debug> Kept for T {
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl fmt::Debug for Evidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map().entries(self.0.iter()).finish()
    }
}

/// What a registry's checkers judge: [`Subject::Of`] is the judged thing, borrowing what it
/// judges for any lifetime (a simulated run, a probe's prepared history).
pub trait Subject: 'static {
    /// The judged thing.
    type Of<'a>: ?Sized;
}

/// A checker of `S`: it says when it applies, measures its figures, and judges what it is
/// given against its own specification (recomputed from the history, never from the code
/// under test or its counters).
pub trait Checker<S: Subject>: Sync {
    /// Its name in failure signatures (`class/name`) and reports.
    fn name(&self) -> &'static str;

    /// The figures it measures.
    fn figures(&self) -> &'static [Figure] {
        &[]
    }

    /// Whether it judges `s` at all.
    fn applies(&self, s: &S::Of<'_>) -> bool {
        let _ = s;
        true
    }

    /// Measures its figures on `s` (those `s` measures) into `out.figures`, keeping what a
    /// report describes them with as its evidence; cheap: a report measures every run.
    fn measure(&self, s: &S::Of<'_>, out: &mut Judged) {
        let _ = (s, out);
    }

    /// Judges `s`: failures, undecided keys and evidence go to `out`, and the figures its
    /// verdict computes where they are not measured apart. Checks nothing where it does not
    /// apply.
    fn judge(&self, s: &S::Of<'_>, out: &mut Judged) {
        let _ = (s, out);
    }
}

/// The checkers of one kind of history, in the order their failures are reported.
pub struct Registry<S: Subject>(pub &'static [&'static dyn Checker<S>]);

impl<S: Subject> fmt::Debug for Registry<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|c| c.name()))
            .finish()
    }
}

impl<S: Subject> Registry<S> {
    /// Its checkers.
    pub fn iter(&self) -> impl Iterator<Item = &'static dyn Checker<S>> + use<S> {
        self.0.iter().copied()
    }

    /// Every figure of every checker.
    pub fn figures(&self) -> impl Iterator<Item = &'static Figure> + use<S> {
        self.0.iter().flat_map(|c| c.figures())
    }

    /// The figure named `name`.
    pub fn figure(&self, name: &str) -> Option<&'static Figure> {
        self.figures().find(|f| f.name == name)
    }

    /// Every figure the checkers that apply measure on `s`, and their evidence.
    pub fn measure(&self, s: &S::Of<'_>) -> Judged {
        let mut out = Judged::default();
        for c in self.iter().filter(|c| c.applies(s)) {
            c.measure(s, &mut out);
        }
        out
    }

    /// Every checker's verdict on `s` (those that apply), without the figures
    /// [`Checker::measure`] gives.
    pub fn judge(&self, s: &S::Of<'_>) -> Judged {
        let mut out = Judged::default();
        for c in self.iter().filter(|c| c.applies(s)) {
            out.applied.push(c.name());
            c.judge(s, &mut out);
        }
        out
    }

    /// [`Registry::judge`] with every applying checker's figures measured too.
    pub fn judge_measured(&self, s: &S::Of<'_>) -> Judged {
        let mut out = self.measure(s);
        for c in self.iter().filter(|c| c.applies(s)) {
            out.applied.push(c.name());
            c.judge(s, &mut out);
        }
        out
    }

    /// The `bounds` (by figure name; and the figures held to 0 on every history) that
    /// `figures` break, each stated with its numbers. A figure not measured breaks a lower
    /// bound, except those in `measured_later` (bounded by whoever measures them).
    pub fn held(
        &self,
        figures: &Figures,
        bounds: &BTreeMap<String, Bounds>,
        measured_later: &[&str],
    ) -> Vec<String> {
        let mut out = Vec::new();
        for f in self.figures() {
            let given = bounds.get(f.name).copied().unwrap_or_default();
            match figures.get(f.name) {
                Some(&value) => out.extend(given.broken_by(f.name, value, (f.held_at_most)(given))),
                None if measured_later.contains(&f.name) => {}
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
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Slices;

    impl Subject for Slices {
        type Of<'a> = [u64];
    }

    struct Counts;

    impl Checker<Slices> for Counts {
        fn name(&self) -> &'static str {
            "counts"
        }

        fn figures(&self) -> &'static [Figure] {
            const F: &[Figure] = &[
                Figure::bounded("sum", "the sum", Needs::Nothing),
                Figure::zero("zeros", "zeros seen", Needs::Nothing),
            ];
            F
        }

        fn measure(&self, s: &[u64], out: &mut Judged) {
            out.figures.insert("sum".into(), s.iter().sum());
            let zeros = s.iter().filter(|&&x| x == 0).count() as u64;
            out.figures.insert("zeros".into(), zeros);
        }

        fn judge(&self, s: &[u64], out: &mut Judged) {
            out.judged("counts", s.len() as u64);
            if s.contains(&0) {
                out.failures
                    .push(Failure::safety("counts", "a zero".into()));
                out.keep("counts", s.iter().position(|&x| x == 0));
            }
        }
    }

    struct Never;

    impl Checker<Slices> for Never {
        fn name(&self) -> &'static str {
            "never"
        }

        fn applies(&self, _: &[u64]) -> bool {
            false
        }

        fn judge(&self, _: &[u64], out: &mut Judged) {
            out.failures.push(Failure::safety("never", "judged".into()));
        }
    }

    static REGISTRY: Registry<Slices> = Registry(&[&Counts, &Never]);

    #[test]
    fn a_registry_judges_with_the_checkers_that_apply_and_keeps_their_evidence() {
        let j = REGISTRY.judge_measured(&[3, 0, 4]);
        assert_eq!(j.applied, ["counts"]);
        assert_eq!(j.lines(), ["counts: a zero"]);
        assert_eq!(j.figure("sum"), Some(7));
        assert_eq!(j.evidence::<Option<usize>>("counts"), Some(&Some(1)));
        assert_eq!(j.evidence::<u64>("counts"), None, "typed by its checker");
        assert!(REGISTRY.judge(&[1, 2]).failures.is_empty());
    }

    #[test]
    fn held_breaks_the_bounds_given_and_the_invariants() {
        let figures = REGISTRY.measure(&[3, 0, 4]).figures;
        let none = BTreeMap::new();
        assert_eq!(
            REGISTRY.held(&figures, &none, &[]),
            ["zeros = 1, expected at most 0"]
        );
        let bounds = BTreeMap::from([
            (
                "sum".to_owned(),
                Bounds {
                    at_most: Some(5),
                    at_least: None,
                },
            ),
            (
                "zeros".to_owned(),
                Bounds {
                    at_most: None,
                    at_least: Some(1),
                },
            ),
        ]);
        assert_eq!(
            REGISTRY.held(&figures, &bounds, &[]),
            [
                "sum = 7, expected at most 5",
                "zeros = 1, expected at most 0"
            ]
        );
        let unmeasured = BTreeMap::from([(
            "sum".to_owned(),
            Bounds {
                at_most: None,
                at_least: Some(1),
            },
        )]);
        assert_eq!(
            REGISTRY.held(&Figures::new(), &unmeasured, &[]),
            ["sum not measured on this run, expected at least 1"]
        );
        assert!(
            REGISTRY
                .held(&Figures::new(), &unmeasured, &["sum"])
                .is_empty()
        );
    }
}
