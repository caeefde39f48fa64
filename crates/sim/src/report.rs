//! A run's report: the run's accounting, the checkers' figures (each measured by the checker
//! that declares it, [`crate::checkers`]) and their evidence, the trace hash, and the
//! expectations it failed.

use crate::checkers::{
    CHECKERS, Counts, EdgeFigures, EnvelopeEvidence, Figures, GatewayCounters, GroupCounts,
    JobFigures, Liveness, Run, Witness,
};
use crate::scenario::Scenario;
use ratelab_check::envelope;
use ratelab_check::history::History;
use ratelab_core::{Algorithm, Nanos};
use ratelab_gateway::StatsSnapshot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Everything one seed's run produced that a person or a test reads.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Report {
    /// Scenario name (file stem).
    pub scenario: String,
    /// Scenario file.
    pub file: String,
    /// The seed.
    pub seed: u64,
    /// `naive` or `atomic`.
    pub path: String,
    /// Gateways in the cluster.
    pub gateways: u64,
    /// Requests sent.
    pub requests: u64,
    /// Every figure the checkers measured on this run, by name ([`crate::checkers::figures`]
    /// says what each counts): `allowed`, `max_excess`, `job_runs`… A figure the run does
    /// not measure (a cleanup job's, without one) is absent; `store_calls_saved` is measured
    /// by [`crate::run`] against the same seed run without the guard and the denial cache.
    /// In JSON, each is a field of the report's object.
    #[serde(flatten)]
    pub figures: Figures,
    /// Store errors by kind.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Fail-open answers by reason.
    pub fail_open_by_reason: BTreeMap<String, u64>,
    /// Store messages the run's requests caused, every layer and fate.
    #[serde(default)]
    pub store_calls: u64,
    /// Send-to-answer latency of fail-open answers, ms: p50, p99, max (absent if none).
    pub fail_open_latency_percentiles_ms: Option<[f64; 3]>,
    /// The gateways' own counters, summed: fail-open layer outcomes, bypassed, breaker
    /// openings and closings.
    pub gateway_counters: GatewayCounters,
    /// Requests, allowed, denied, errors, fail-open and bypassed per client group.
    pub groups: Vec<GroupCounts>,
    /// Requests never answered.
    pub unanswered: u64,
    /// Answers beyond the first.
    pub duplicated: u64,
    /// B + R·T summed over keys that admitted anything: what a correct limiter could admit.
    pub envelope: u64,
    /// The worst window: key, from, to (ns), admitted, bound, request ids.
    pub excess_witness: Option<Witness>,
    /// Admitted requests of each key the scenario's `expect.keys` names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub key_allowed: BTreeMap<String, u64>,
    /// The window length used for `max_in_window`, ns.
    pub window_ns: u64,
    /// Liveness check, when the scenario asks for it.
    pub liveness: Option<Liveness>,
    /// The edge (per-IP) layer's envelope, when the scenario has an edge limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edge: Option<EdgeFigures>,
    /// Naive path: mean time between the store serving a request's read and applying its
    /// write, over requests that did both, in µs. This is the race window.
    pub race_window_us: Option<f64>,
    /// Simulated time the run covered, ns.
    pub sim_ns: u64,
    /// Wall-clock time the run took, ms (not part of the trace).
    pub wall_ms: f64,
    /// Events recorded.
    pub events: u64,
    /// FNV-1a over every event: equal for equal runs.
    pub trace_hash: String,
    /// The cleanup job judged, when the scenario runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobFigures>,
    /// Expectations this run failed, each with its numbers. For a scenario judged by the
    /// explorer's checkers (`expect.explorer`), only the accounting invariants: the caller
    /// adds the explorer's verdict (`ratelab run` and the scenario tests do).
    pub failures: Vec<String>,
    /// Whether every expectation held (see `failures` for an explorer-judged scenario).
    pub passed: bool,
    /// What every checker found ([`crate::verdict::judge`]), for a run of a user's limiter
    /// ([`crate::run_with`]): empty when every checker held; absent for [`crate::run`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkers: Option<Vec<crate::verdict::Failure>>,
}

impl Report {
    /// Figure `name` ([`crate::checkers::figures`]), 0 when the run does not measure it.
    pub fn figure(&self, name: &str) -> u64 {
        debug_assert!(
            CHECKERS.figure(name).is_some(),
            "{name:?} is no checker's figure"
        );
        self.figures.get(name).copied().unwrap_or(0)
    }
}

/// Builds the report for one run and checks the scenario's expectations.
pub fn build(
    sc: &Scenario,
    seed: u64,
    h: &History,
    stats: &[StatsSnapshot],
    sim: Nanos,
    wall: Duration,
) -> Report {
    let run = Run::new(sc, h).stats(stats);
    let measured = CHECKERS.measure(&run);
    let counts = measured
        .evidence::<Counts>("answered-once")
        .cloned()
        .unwrap_or_else(|| Counts::of(sc, h));
    let gateway_counters = GatewayCounters::sum(stats);
    let gaps: Vec<u64> = h
        .requests
        .iter()
        .filter_map(|r| Some(r.written_at?.as_u64().saturating_sub(r.read_at?.as_u64())))
        .collect();
    let race_window_us =
        (!gaps.is_empty()).then(|| gaps.iter().sum::<u64>() as f64 / gaps.len() as f64 / 1e3);
    let key_allowed = if sc.spec.expect.keys.is_empty() {
        BTreeMap::new()
    } else {
        let by_key = envelope::admissions(&h.requests);
        let admitted = |k: &str| by_key.get(k).map_or(0, |a| a.len() as u64);
        let keys = sc.spec.expect.keys.keys();
        keys.map(|k| (k.clone(), admitted(k))).collect()
    };
    let bound = measured.evidence::<EnvelopeEvidence>("envelope");
    let invariants = counts.invariant_failures(&gateway_counters);
    let mut report = Report {
        scenario: sc.name.clone(),
        file: sc.file.display().to_string(),
        seed,
        path: sc.path.name().to_owned(),
        gateways: sc.spec.gateways.get(),
        requests: h.requests.len() as u64,
        figures: measured.figures.clone(),
        errors_by_kind: counts.errors_by_kind,
        fail_open_by_reason: counts.fail_open_by_reason,
        store_calls: h
            .requests
            .iter()
            .map(|r| u64::from(r.store_calls_total()))
            .sum(),
        fail_open_latency_percentiles_ms: counts.fail_open_latency_ms,
        gateway_counters,
        groups: counts.groups,
        unanswered: counts.unanswered,
        duplicated: counts.duplicated,
        envelope: bound.map_or(0, |b| b.allowance),
        excess_witness: bound.and_then(|b| b.witness.clone()),
        key_allowed,
        window_ns: sc.policy.quota().window.as_u64(),
        liveness: measured.evidence::<Liveness>("liveness").cloned(),
        edge: measured.evidence::<EdgeFigures>("edge").cloned(),
        race_window_us,
        sim_ns: sim.as_u64(),
        wall_ms: wall.as_secs_f64() * 1e3,
        events: h.event_count,
        trace_hash: format!("{:016x}", h.trace_hash()),
        job: measured.evidence::<JobFigures>("cleanup").cloned(),
        failures: Vec::new(),
        passed: false,
        checkers: None,
    };
    // A scenario judged by the explorer's checkers keeps only the accounting invariants here;
    // its caller adds the explorer's verdict.
    if sc.spec.expect.explorer.is_none() {
        report.failures = check(sc, &report);
    }
    report.failures.extend(invariants);
    report.passed = report.failures.is_empty();
    report
}

/// The expectations `r` fails, each stated with its numbers: the bounds on the checkers'
/// figures, each key's admissions, answers, liveness.
fn check(sc: &Scenario, r: &Report) -> Vec<String> {
    let e = &sc.spec.expect;
    let mut out = crate::checkers::held(&r.figures, &e.bounds);
    for (k, b) in &e.keys {
        let bounds = crate::scenario::Bounds {
            at_most: b.allowed_at_most,
            at_least: b.allowed_at_least,
        };
        let admitted = r.key_allowed.get(k).copied().unwrap_or(0);
        out.extend(bounds.broken_by(&format!("allowed on key {k:?}"), admitted, None));
    }
    if e.all_answered && (r.unanswered > 0 || r.duplicated > 0) {
        out.push(format!(
            "every request answered exactly once: {} unanswered, {} answered more than once",
            r.unanswered, r.duplicated
        ));
    }
    if let Some(l) = &r.liveness {
        if l.checked == 0 {
            out.push(format!(
                "liveness: no request qualifies (needs a key whose clients all send at a constant rate within the policy, after {} ns)",
                l.from_ns
            ));
        } else if l.violations > 0 {
            out.push(format!(
                "liveness: {} of {} requests within the rate were not admitted after faults healed ({} ns)",
                l.violations, l.checked, l.from_ns
            ));
        }
    }
    out
}
