//! What the probe's checks found.

use crate::envelope::EnvelopeReport;
use crate::linearizable::LinearizabilityReport;

/// A field that contradicts the claim or another field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldViolation {
    /// The key.
    pub key: String,
    /// The requests that witness it.
    pub ids: Vec<u64>,
    /// What is wrong.
    pub what: String,
}

/// What the honesty probes found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HonestyReport {
    /// Probes whose follow-up got an answer.
    pub probes: usize,
    /// Follow-ups admitted.
    pub admitted: usize,
    /// Follow-ups denied: (denial id, follow-up id).
    pub refused: Vec<(u64, u64)>,
}

/// The verdict on a probe.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeVerdict {
    /// Requests sent.
    pub requests: usize,
    /// Admitted (cost).
    pub admitted: u64,
    /// Denied (cost).
    pub denied: u64,
    /// Without a decision.
    pub failed: u64,
    /// The first request without a decision, and why.
    pub first_failed: Option<(u64, String)>,
    /// What the claim allows for the admitted keys over their spans (B + R·T per key).
    pub allowance: u64,
    /// The envelope checker's report.
    pub envelope: EnvelopeReport,
    /// The black-box linearizability verdicts (`None`: the claim has no sequential spec, or
    /// is only a bound).
    pub linearizable: Option<LinearizabilityReport>,
    /// Denials the claimed bucket admits from every state the furthest order reached gives
    /// there: (key, request id).
    pub phantom_denials: Vec<(String, u64)>,
    /// Answers whose fields were checked.
    pub fields_checked: usize,
    /// Field contradictions.
    pub fields: Vec<FieldViolation>,
    /// The honesty probes.
    pub retry_after: HonestyReport,
    /// The checks that applied to the claim and judged the history, in the registry's order.
    pub checks: Vec<&'static str>,
}
