//! The answers: every request answered exactly once, and the counts of each kind of answer.

use super::checker::{Checker, Figure, Judged, Needs, Run};
use super::failure::{Class, Failure};

/// Answered exactly once, and the answers counted.
pub struct Answers;

const FIGURES: &[Figure] = &[
    Figure::bounded("allowed", "admitted requests", Needs::Nothing, |r| {
        Some(r.report.allowed)
    }),
    Figure::bounded("denied", "denied requests", Needs::Nothing, |r| {
        Some(r.report.denied)
    }),
    Figure::bounded(
        "errors",
        "requests answered with a store error",
        Needs::Nothing,
        |r| Some(r.report.errors),
    ),
    Figure::bounded(
        "fail_open",
        "requests let through because the store failed (fail-open answers)",
        Needs::Nothing,
        |r| Some(r.report.fail_open),
    ),
    Figure::bounded(
        "bypassed",
        "requests let through by the kill switch",
        Needs::Nothing,
        |r| Some(r.report.bypassed),
    ),
    Figure::bounded(
        "full",
        "requests denied because the store had no room for their new key",
        Needs::Nothing,
        |r| Some(r.report.full),
    ),
    Figure::bounded(
        "rejected",
        "requests rejected by the guard",
        Needs::Nothing,
        |r| Some(r.report.rejected),
    ),
    Figure::bounded(
        "cached",
        "requests the gateways' denial caches answered",
        Needs::Nothing,
        |r| Some(r.report.cached),
    ),
    Figure::zero(
        "cached_unjustified",
        "denial-cache answers no denial on the key justified",
        Needs::Nothing,
        |r| Some(r.report.cached_unjustified),
    ),
    Figure::bounded(
        "fail_open_latency_ms",
        "the slowest fail-open answer, from send to answer, in ms (rounded up)",
        Needs::Nothing,
        |r| {
            r.report
                .fail_open_latency_ms
                .map(|[_, _, worst]| worst.ceil() as u64)
        },
    ),
];

impl Checker for Answers {
    fn name(&self) -> &'static str {
        "answered-once"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let r = run.report;
        out.judged("answered-once", r.requests);
        if r.unanswered > 0 || r.duplicated > 0 {
            out.failures.push(Failure::new(
                Class::Safety,
                "answered-once",
                format!(
                    "{} unanswered, {} answered twice",
                    r.unanswered, r.duplicated
                ),
            ));
        }
    }
}
