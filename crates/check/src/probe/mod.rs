//! Judging a limiter seen only from outside: what a probe's clients sent and were answered,
//! held to a claimed policy by every check in [`CHECKS`].
//!
//! A probe knows less than the simulator: not when the limiter decided (somewhere between a
//! request's send and its answer, widened by the limiter's clock resolution), not its store's
//! order, and only the fields the limiter chose to send (a `Retry-After` in whole seconds, a
//! `RateLimit` remaining, or nothing). Every checker here therefore holds an answer to every
//! decision time and wait those allow, so what it reports is a violation whichever they were.
//! Each check is a file here implementing `Checker<Probes>` (the trait of
//! [`crate::checker`], the simulator's checkers' too), declaring its figures and reading
//! back its evidence, and a line in [`CHECKS`]:
//!
//! - **decisions**: a request without a decision is a failure, never a pass;
//! - **envelope**: admitted cost in any window ≤ B + R·Δt, with Δt the widest the
//!   admissions' spans allow ([`crate::envelope::envelope_spans`]);
//! - **linearizability**, black-box ([`crate::linearizable::check_key_from`] with a
//!   [`Precision`](crate::linearizable::Precision) per answer for a token-bucket claim,
//!   [`crate::family::check_key`] for a window family's: fixed at an unknown phase, first-hit,
//!   sliding log, sliding counter); a denial the claimed policy admits from every state the
//!   furthest order reached gives there is a *phantom denial*;
//! - **fields**: `remaining` never grows faster than the refill between two answers in real
//!   time, a denial never reports room for its own cost, and `Retry-After` is never earlier
//!   than the `RateLimit` field's `t`, an announced limit agrees with the claim and
//!   `remaining`, and every rate-limit field is one its grammar allows;
//! - **Retry-After honesty**: a client that waited exactly the time it was told was admitted
//!   (the probe sends those requests on a quiet key and records each pair).

mod check;
mod decisions;
mod envelope;
mod fields;
mod history;
mod honesty;
mod linearizable;
mod verdict;

pub use check::{Prepared, Probes};
pub use fields::FieldViolation;
pub use history::{
    Claim, Dialect, Fields, Judging, Observation, Outcome, ProbeHistory, ResetUnit, RetryProbe,
    Rounding, WindowKind,
};
pub use honesty::HonestyReport;
pub use verdict::ProbeVerdict;

use crate::checker::Registry;

/// Every check, in the order the report lists their failures.
pub static CHECKS: Registry<Probes> = Registry(&[
    &decisions::Decisions,
    &envelope::Envelope,
    &linearizable::Linearizable,
    &fields::Fields,
    &honesty::Honesty,
]);

/// Judges `h` under `j`: every check in [`CHECKS`] that applies.
pub fn judge(h: &ProbeHistory, j: &Judging) -> ProbeVerdict {
    ProbeVerdict(CHECKS.judge_measured(&Prepared::of(h, j)))
}

impl ProbeVerdict {
    /// Figure `name` ([`CHECKS`] declares them), 0 when no check measured it.
    pub fn figure(&self, name: &str) -> u64 {
        debug_assert!(
            CHECKS.figure(name).is_some(),
            "{name:?} is no probe check's figure"
        );
        self.0.figure(name).unwrap_or(0)
    }

    /// The checks that applied to the claim and judged the history, in the registry's order.
    pub fn checks(&self) -> &[&'static str] {
        &self.0.applied
    }

    /// One line per failure, `check: detail`; empty when every check passed. A
    /// linearizability search that ran out of budget is *unknown*, not a failure.
    pub fn failures(&self) -> Vec<String> {
        self.0.lines()
    }

    /// Keys no check could decide (the linearizability search ran out of its budget).
    pub fn unknown(&self) -> usize {
        usize::try_from(self.0.unknown_keys).unwrap_or(usize::MAX)
    }

    /// The verdict: failed if any check failed, else unknown if a key could not be decided,
    /// else passed. Unknown is never a pass.
    pub fn conclusion(&self) -> Conclusion {
        if !self.failures().is_empty() {
            Conclusion::Failed
        } else if self.unknown() > 0 {
            Conclusion::Unknown
        } else {
            Conclusion::Passed
        }
    }
}

/// A probe's verdict in one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conclusion {
    /// Every check that applied held, and decided every key.
    Passed,
    /// A check failed.
    Failed,
    /// No check failed, but some key could not be decided.
    Unknown,
}

impl Conclusion {
    /// `pass`, `fail` or `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            Conclusion::Passed => "pass",
            Conclusion::Failed => "fail",
            Conclusion::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests;
