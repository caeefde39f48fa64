//! The answers: every request answered exactly once, and the counts of each kind of answer
//! (the report's accounting, and the invariants on the gateways' counters and store calls
//! every run holds to).

use super::checker::{Checker, Failure, Figure, Judged, Needs, Run, Runs};
use super::gateway::GatewayCounters;
use crate::scenario::Scenario;
use ratelab_check::answers;
use ratelab_check::history::{Answer, History, Layer};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Answered exactly once, and the answers counted.
pub struct Answers;

const FIGURES: &[Figure] = &[
    Figure::bounded("allowed", "admitted requests", Needs::Nothing),
    Figure::bounded("denied", "denied requests", Needs::Nothing),
    Figure::bounded(
        "errors",
        "requests answered with a store error",
        Needs::Nothing,
    ),
    Figure::bounded(
        "fail_open",
        "requests let through because the store failed (fail-open answers)",
        Needs::Nothing,
    ),
    Figure::bounded(
        "bypassed",
        "requests let through by the kill switch",
        Needs::Nothing,
    ),
    Figure::bounded(
        "full",
        "requests denied because the store had no room for their new key",
        Needs::Nothing,
    ),
    Figure::bounded("rejected", "requests rejected by the guard", Needs::Nothing),
    Figure::bounded(
        "cached",
        "requests the gateways' denial caches answered",
        Needs::Nothing,
    ),
    Figure::zero(
        "cached_unjustified",
        "denial-cache answers no denial on the key justified",
        Needs::Nothing,
    ),
    Figure::bounded(
        "fail_open_latency_ms",
        "the slowest fail-open answer, from send to answer, in ms (rounded up)",
        Needs::Nothing,
    ),
];

impl Checker<Runs> for Answers {
    fn name(&self) -> &'static str {
        "answered-once"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn measure(&self, run: &Run<'_>, out: &mut Judged) {
        let c = Counts::of(run.sc, run.h);
        out.measured("allowed", c.allowed);
        out.measured("denied", c.denied);
        out.measured("errors", c.errors_by_kind.values().sum());
        out.measured("fail_open", c.fail_open_by_reason.values().sum());
        out.measured("bypassed", c.bypassed);
        out.measured("full", c.full);
        out.measured("rejected", c.rejected);
        out.measured("cached", c.cached);
        let unjustified = ratelab_check::cached::unjustified(&run.h.requests);
        out.measured("cached_unjustified", unjustified);
        if let Some([_, _, worst]) = c.fail_open_latency_ms {
            out.measured("fail_open_latency_ms", worst.ceil() as u64);
        }
        out.keep("answered-once", c);
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let a = answers::answered_once(&run.h.requests);
        out.judged("answered-once", run.h.requests.len() as u64);
        if a.unanswered > 0 || a.duplicated > 0 {
            out.failures.push(Failure::safety(
                "answered-once",
                format!(
                    "{} unanswered, {} answered twice",
                    a.unanswered, a.duplicated
                ),
            ));
        }
    }
}

/// One client group's answers.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct GroupCounts {
    /// Group index in the scenario.
    pub group: u32,
    /// Requests sent.
    pub requests: u64,
    /// Admitted by a decision.
    pub allowed: u64,
    /// Denied (429).
    pub denied: u64,
    /// Failed.
    pub errors: u64,
    /// Let through failing open.
    pub fail_open: u64,
    /// Let through by the kill switch.
    pub bypassed: u64,
}

/// The answers counted by kind, and the invariants on store calls that hold for every run
/// (the checker's evidence, which the report describes the answers with).
#[derive(Clone, Debug)]
pub(crate) struct Counts {
    /// Requests never answered.
    pub unanswered: u64,
    /// Answers beyond the first.
    pub duplicated: u64,
    pub allowed: u64,
    pub denied: u64,
    pub bypassed: u64,
    pub rejected: u64,
    pub full: u64,
    pub cached: u64,
    pub errors_by_kind: BTreeMap<String, u64>,
    pub fail_open_by_reason: BTreeMap<String, u64>,
    pub fail_open_latency_ms: Option<[f64; 3]>,
    pub groups: Vec<GroupCounts>,
    /// Layer outcomes that failed open (a request can fail open on both layers).
    fail_open_layers: u64,
    /// Requests the kill switch bypassed or the guard rejected that reached a store.
    bypassed_store_calls: u64,
    /// Whether every request was answered, so the gateways' counters must match the answers.
    all_answered: bool,
}

impl Counts {
    pub fn of(sc: &Scenario, h: &History) -> Counts {
        let once = answers::answered_once(&h.requests);
        let mut c = Counts {
            unanswered: once.unanswered,
            duplicated: once.duplicated,
            allowed: 0,
            denied: 0,
            bypassed: 0,
            rejected: 0,
            full: 0,
            cached: 0,
            errors_by_kind: BTreeMap::new(),
            fail_open_by_reason: BTreeMap::new(),
            fail_open_latency_ms: None,
            groups: (0..sc.spec.clients.len() as u32)
                .map(|group| GroupCounts {
                    group,
                    ..GroupCounts::default()
                })
                .collect(),
            fail_open_layers: 0,
            bypassed_store_calls: 0,
            all_answered: true,
        };
        let mut fail_open_latency = Vec::new();
        for r in &h.requests {
            let g = &mut c.groups[r.group as usize];
            g.requests += 1;
            c.fail_open_layers += Layer::ALL
                .iter()
                .filter(|&&l| matches!(r.layers.get(l), Some(Answer::FailedOpen(_))))
                .count() as u64;
            match r.answer {
                Some((_, Answer::Allowed { .. })) => {
                    c.allowed += 1;
                    g.allowed += 1;
                }
                Some((_, Answer::Denied { .. })) => {
                    c.denied += 1;
                    g.denied += 1;
                }
                Some((_, Answer::Full)) => {
                    c.full += 1;
                    c.denied += 1;
                    g.denied += 1;
                }
                Some((_, Answer::Cached { .. })) => {
                    c.cached += 1;
                    c.denied += 1;
                    g.denied += 1;
                }
                Some((_, Answer::Error(e))) => {
                    *c.errors_by_kind.entry(e.name().to_owned()).or_insert(0) += 1;
                    g.errors += 1;
                }
                Some((at, Answer::FailedOpen(reason))) => {
                    *c.fail_open_by_reason
                        .entry(reason.name().to_owned())
                        .or_insert(0) += 1;
                    fail_open_latency.push(at.saturating_sub(r.sent_at).as_u64());
                    g.fail_open += 1;
                }
                Some((_, Answer::Bypassed)) => {
                    c.bypassed += 1;
                    g.bypassed += 1;
                }
                Some((_, Answer::Rejected)) => c.rejected += 1,
                None => c.all_answered = false,
            }
            // Bypassed, rejected and cache-denied requests must never reach the store: no
            // store operation carries their id.
            if matches!(
                r.answer,
                Some((
                    _,
                    Answer::Bypassed | Answer::Rejected | Answer::Cached { .. }
                ))
            ) && r.store_calls_total() > 0
            {
                c.bypassed_store_calls += 1;
            }
        }
        fail_open_latency.sort_unstable();
        c.fail_open_latency_ms = (!fail_open_latency.is_empty()).then(|| {
            let pct = |q: f64| {
                ratelab_check::percentile::of(&fail_open_latency, q)
                    .map_or(0.0, |ns| ns as f64 / 1e6)
            };
            [pct(0.5), pct(0.99), pct(1.0)]
        });
        c
    }

    pub fn invariant_failures(&self, counters: &GatewayCounters) -> Vec<String> {
        let mut out = Vec::new();
        // The gateways' counters must agree with the answers the clients received, layer by
        // layer. Checked only when every request was answered: a request lost with its
        // gateway has no answer to count.
        if self.all_answered {
            if counters.bypassed != self.bypassed {
                out.push(format!(
                    "bypassed counter {} != {} bypassed answers",
                    counters.bypassed, self.bypassed
                ));
            }
            if counters.fail_open != self.fail_open_layers {
                out.push(format!(
                    "fail_open counter {} != {} layers that failed open in the answers",
                    counters.fail_open, self.fail_open_layers
                ));
            }
        }
        if self.bypassed_store_calls > 0 {
            out.push(format!(
                "{} store calls were made for requests the kill switch bypassed or the guard rejected",
                self.bypassed_store_calls
            ));
        }
        out
    }
}
