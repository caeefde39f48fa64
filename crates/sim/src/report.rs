//! A run's report: counts, checker figures, the trace hash, and the expectations it failed.

use crate::checkers::{self, AnswerReport, Envelope, EnvelopeReport, LivenessReport, SpikeReport};
use crate::history::{Answer, History};
use crate::scenario::{ClientSpec, Pattern, Scenario};
use ratelab_core::{Algorithm, Nanos, Policy};
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
    /// Requests admitted.
    pub allowed: u64,
    /// Requests denied.
    pub denied: u64,
    /// Requests answered with a store error.
    pub errors: u64,
    /// Errors by kind.
    pub errors_by_kind: BTreeMap<String, u64>,
    /// Requests let through because the store failed (fail-open answers).
    pub fail_open: u64,
    /// Fail-open answers by reason.
    pub fail_open_by_reason: BTreeMap<String, u64>,
    /// Requests let through by the kill switch.
    pub bypassed: u64,
    /// Requests rejected by the guard before the limits.
    pub rejected: u64,
    /// Store calls the guard saved: what the rejected requests would have cost.
    pub store_calls_saved: u64,
    /// Send-to-answer latency of fail-open answers, ms: p50, p99, max (absent if none).
    pub fail_open_latency_ms: Option<[f64; 3]>,
    /// The gateways' own counters, summed: fail-open layer outcomes, bypassed, breaker
    /// openings and closings.
    pub gateway_counters: GatewayCounters,
    /// Requests, allowed, denied, errors, fail-open and bypassed per client group.
    pub groups: Vec<GroupCounts>,
    /// Requests never answered.
    pub unanswered: u64,
    /// Answers beyond the first.
    pub duplicated: u64,
    /// Largest excess over B + R·Δt in any interval (requests, rounded up).
    pub max_excess: u64,
    /// Excess over B + R·T across each key's run, summed.
    pub total_excess: u64,
    /// B + R·T summed over keys that admitted anything: what a correct limiter could admit.
    pub envelope: u64,
    /// The worst window: key, from, to (ns), admitted, bound, request ids.
    pub excess_witness: Option<Witness>,
    /// Most admitted for one key in any interval of one window length.
    pub max_in_window: u64,
    /// The window length used for `max_in_window`, ns.
    pub window_ns: u64,
    /// Liveness check, when the scenario asks for it.
    pub liveness: Option<Liveness>,
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
    /// The cleanup job's figures, when the scenario runs it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<JobFigures>,
    /// Expectations this run failed, each with its numbers.
    pub failures: Vec<String>,
    /// Whether every expectation held.
    pub passed: bool,
}

/// The gateways' counters, summed over gateways.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct GatewayCounters {
    /// Layers that failed open.
    pub fail_open: u64,
    /// Requests bypassed by the kill switch.
    pub bypassed: u64,
    /// Breaker openings.
    pub breaker_opened: u64,
    /// Breaker closings.
    pub breaker_closed: u64,
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

/// The envelope checker's witness, for reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Witness {
    /// Key.
    pub key: String,
    /// First admission in the window, ns.
    pub from_ns: u64,
    /// Last admission in the window, ns.
    pub to_ns: u64,
    /// Admitted cost in the window.
    pub admitted: u64,
    /// B + R·Δt, rounded down.
    pub bound: u64,
    /// Request ids (at most 32).
    pub ids: Vec<u64>,
}

/// The liveness checker's figures, for reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Liveness {
    /// Checking started here, ns.
    pub from_ns: u64,
    /// Eligible keys.
    pub keys: Vec<String>,
    /// Requests checked.
    pub checked: u64,
    /// Of those, not admitted.
    pub violations: u64,
}

/// The envelope constants of a policy: a window policy advertises `limit` per `window`.
pub fn envelope_of(policy: &Policy) -> Envelope {
    match policy {
        Policy::TokenBucket(b) => Envelope {
            burst: b.capacity(),
            amount: b.refill_amount(),
            period: b.refill_period().as_u64(),
        },
        Policy::FixedWindow(w) => Envelope {
            burst: w.0.limit(),
            amount: w.0.limit(),
            period: w.0.window().as_u64(),
        },
        Policy::SlidingWindow(w) => Envelope {
            burst: w.0.limit(),
            amount: w.0.limit(),
            period: w.0.window().as_u64(),
        },
    }
}

/// Keys whose every client sends at a constant rate, in total within the policy's rate.
fn liveness_keys(sc: &Scenario, env: Envelope) -> Vec<String> {
    let mut rate: BTreeMap<String, Option<u64>> = BTreeMap::new();
    let constant = |c: &ClientSpec| c.arrival.pattern == Pattern::Constant;
    for c in &sc.spec.clients {
        match (&c.key, &c.keys) {
            (Some(k), _) => {
                let r = rate.entry(k.clone()).or_insert(Some(0));
                *r = match (*r, constant(c)) {
                    (Some(sum), true) => Some(
                        sum + c.arrival.rate_per_sec.map_or(0, |v| v.get())
                            * c.count.get()
                            * c.cost.get(),
                    ),
                    _ => None,
                };
            }
            (None, Some(ks)) => {
                // A key set is picked at random: its per-key arrivals are not paced.
                for i in 0..ks.count.get().min(1_000) {
                    rate.insert(format!("{}:{i}", ks.prefix), None);
                }
            }
            (None, None) => {}
        }
    }
    rate.into_iter()
        .filter(|(_, r)| {
            // rate ≤ amount / period (per ns) ⇔ rate·period ≤ amount·10⁹.
            r.is_some_and(|r| {
                u128::from(r) * u128::from(env.period) <= u128::from(env.amount) * 1_000_000_000
            })
        })
        .map(|(k, _)| k)
        .collect()
}

/// The cleanup job's lease and fencing figures ([`checkers::fencing`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct JobFigures {
    /// Whether the store checked tokens.
    pub fencing: bool,
    /// Lease grants.
    pub grants: u64,
    /// Breaches of single leadership (always a failure).
    pub leader_conflicts: u64,
    /// Accepted commits: the job's runs.
    pub runs: u64,
    /// Commits accepted with a stale token.
    pub stale_accepted: u64,
    /// Commits refused as stale.
    pub stale_rejected: u64,
    /// Commits refused without being stale (always a failure).
    pub wrongly_rejected: u64,
    /// Buckets deleted.
    pub keys_removed: u64,
    /// The first stale commit accepted: who sent it, with which token, above which it should
    /// have been refused, and when (store time, ms).
    pub first_stale: Option<String>,
    /// Longest time without an accepted commit, ms.
    pub max_gap_ms: f64,
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
    let env = envelope_of(&sc.policy);
    let by_key = checkers::admissions(&h.requests);
    let EnvelopeReport {
        max_excess,
        total_excess,
        witness,
    } = checkers::envelope(&by_key, env);
    let window = sc.policy.quota().window;
    let SpikeReport { max_in_window, .. } = checkers::window_spike(&by_key, window);
    let AnswerReport {
        unanswered,
        duplicated,
        ..
    } = checkers::answered_once(&h.requests);

    let mut allowed = 0;
    let mut denied = 0;
    let mut bypassed = 0;
    let mut rejected = 0;
    let mut errors_by_kind = BTreeMap::new();
    let mut fail_open_by_reason = BTreeMap::new();
    let mut fail_open_latency = Vec::new();
    let mut groups: Vec<GroupCounts> = (0..sc.spec.clients.len() as u32)
        .map(|group| GroupCounts {
            group,
            ..GroupCounts::default()
        })
        .collect();
    for r in &h.requests {
        let g = &mut groups[r.group as usize];
        g.requests += 1;
        match r.answer {
            Some((_, Answer::Allowed { .. })) => {
                allowed += 1;
                g.allowed += 1;
            }
            Some((_, Answer::Denied { .. })) => {
                denied += 1;
                g.denied += 1;
            }
            Some((_, Answer::Error(e))) => {
                *errors_by_kind.entry(e.name().to_owned()).or_insert(0) += 1;
                g.errors += 1;
            }
            Some((at, Answer::FailedOpen(reason))) => {
                *fail_open_by_reason
                    .entry(reason.name().to_owned())
                    .or_insert(0) += 1;
                fail_open_latency.push(at.saturating_sub(r.sent_at).as_u64());
                g.fail_open += 1;
            }
            Some((_, Answer::Bypassed)) => {
                bypassed += 1;
                g.bypassed += 1;
            }
            Some((_, Answer::Rejected)) => rejected += 1,
            None => {}
        }
    }
    let errors = errors_by_kind.values().sum();
    let fail_open = fail_open_by_reason.values().sum();
    fail_open_latency.sort_unstable();
    let pct = |p: f64| {
        let n = fail_open_latency.len();
        let i = ((n as f64 * p).ceil() as usize).clamp(1, n) - 1;
        fail_open_latency[i] as f64 / 1e6
    };
    let fail_open_latency_ms =
        (!fail_open_latency.is_empty()).then(|| [pct(0.5), pct(0.99), pct(1.0)]);
    let gateway_counters = stats
        .iter()
        .fold(GatewayCounters::default(), |a, s| GatewayCounters {
            fail_open: a.fail_open + s.fail_open(),
            bypassed: a.bypassed + s.bypassed,
            breaker_opened: a.breaker_opened + s.breaker_opened,
            breaker_closed: a.breaker_closed + s.breaker_closed,
        });
    // Bypassed and rejected requests must never reach the store: no store operation carries
    // their id.
    let bypassed_store_calls = h
        .requests
        .iter()
        .filter(|r| {
            matches!(r.answer, Some((_, Answer::Bypassed | Answer::Rejected))) && r.store_calls > 0
        })
        .count() as u64;
    // A decision costs one call per layer on the atomic path, up to two on the naive path.
    let per_layer = if sc.path == ratelab_store::Path::Naive {
        2
    } else {
        1
    };
    let layers = 1 + u64::from(sc.spec.gateway.edge.is_some());
    let store_calls_saved = rejected * per_layer * layers;

    let envelope: u64 = by_key
        .values()
        .map(|adm| {
            let span = adm.last().map_or(0, |l| l.at.as_u64() - adm[0].at.as_u64());
            let b = u128::from(env.burst) * u128::from(env.period)
                + u128::from(env.amount) * u128::from(span);
            u64::try_from(b / u128::from(env.period)).unwrap_or(u64::MAX)
        })
        .sum();

    let liveness = sc.spec.expect.liveness.then(|| {
        let keys = liveness_keys(sc, env);
        let from = ms_to_nanos(crate::cluster::faults_end_ms(sc))
            .saturating_add(Nanos(2 * window.as_u64()));
        let LivenessReport {
            checked,
            violations,
            ..
        } = checkers::liveness(&h.requests, &keys, from);
        Liveness {
            from_ns: from.as_u64(),
            keys,
            checked,
            violations,
        }
    });

    let gaps: Vec<u64> = h
        .requests
        .iter()
        .filter_map(|r| Some(r.written_at?.as_u64().saturating_sub(r.read_at?.as_u64())))
        .collect();
    let race_window_us =
        (!gaps.is_empty()).then(|| gaps.iter().sum::<u64>() as f64 / gaps.len() as f64 / 1e3);

    let job = sc.spec.cleanup_job.map(|spec| {
        let end = ms_to_nanos(sc.spec.duration_ms.get());
        let f = checkers::fencing(&h.leases, &h.commits, end);
        JobFigures {
            fencing: spec.fencing,
            grants: f.grants,
            leader_conflicts: f.leader_conflicts,
            runs: f.accepted,
            stale_accepted: f.stale_accepted,
            stale_rejected: f.stale_rejected,
            wrongly_rejected: f.wrongly_rejected,
            keys_removed: f.removed,
            first_stale: f.first_stale.map(|(at, owner, token, highest)| {
                format!(
                    "{owner} committed token {token} at {:.3} ms after token {highest} was granted",
                    at.as_u64() as f64 / 1e6
                )
            }),
            max_gap_ms: f.max_gap.as_u64() as f64 / 1e6,
        }
    });

    let mut report = Report {
        scenario: sc.name.clone(),
        file: sc.file.display().to_string(),
        seed,
        path: sc.path.name().to_owned(),
        gateways: sc.spec.gateways.get(),
        requests: h.requests.len() as u64,
        allowed,
        denied,
        errors,
        errors_by_kind,
        fail_open,
        fail_open_by_reason,
        bypassed,
        rejected,
        store_calls_saved,
        fail_open_latency_ms,
        gateway_counters,
        groups,
        unanswered,
        duplicated,
        max_excess,
        total_excess,
        envelope,
        excess_witness: witness.map(|w| Witness {
            key: w.key,
            from_ns: w.from.as_u64(),
            to_ns: w.to.as_u64(),
            admitted: w.admitted,
            bound: w.bound,
            ids: w.ids,
        }),
        max_in_window,
        window_ns: window.as_u64(),
        liveness,
        race_window_us,
        sim_ns: sim.as_u64(),
        wall_ms: wall.as_secs_f64() * 1e3,
        events: h.event_count,
        trace_hash: format!("{:016x}", h.trace_hash()),
        job,
        failures: Vec::new(),
        passed: false,
    };
    report.failures = check(sc, &report);
    if bypassed_store_calls > 0 {
        report.failures.push(format!(
            "{bypassed_store_calls} store calls were made for requests the kill switch bypassed"
        ));
    }
    report.passed = report.failures.is_empty();
    report
}

fn ms_to_nanos(v: u64) -> Nanos {
    Nanos::from_millis(v)
}

/// The expectations `r` fails, each stated with its numbers.
fn check(sc: &Scenario, r: &Report) -> Vec<String> {
    let e = &sc.spec.expect;
    let mut out = Vec::new();
    let mut bound = |name: &str, value: u64, at_most: Option<u64>, at_least: Option<u64>| {
        if let Some(m) = at_most
            && value > m
        {
            out.push(format!("{name} = {value}, expected at most {m}"));
        }
        if let Some(m) = at_least
            && value < m
        {
            out.push(format!("{name} = {value}, expected at least {m}"));
        }
    };
    bound(
        "max_excess",
        r.max_excess,
        e.max_excess_at_most,
        e.max_excess_at_least,
    );
    bound(
        "total_excess",
        r.total_excess,
        e.total_excess_at_most,
        e.total_excess_at_least,
    );
    bound(
        "max_in_window",
        r.max_in_window,
        e.max_in_window_at_most,
        e.max_in_window_at_least,
    );
    bound("allowed", r.allowed, e.allowed_at_most, e.allowed_at_least);
    bound("denied", r.denied, e.denied_at_most, e.denied_at_least);
    bound("errors", r.errors, e.errors_at_most, e.errors_at_least);
    bound(
        "fail_open",
        r.fail_open,
        e.fail_open_at_most,
        e.fail_open_at_least,
    );
    bound(
        "bypassed",
        r.bypassed,
        e.bypassed_at_most,
        e.bypassed_at_least,
    );
    bound(
        "breaker_opened",
        r.gateway_counters.breaker_opened,
        None,
        e.breaker_opened_at_least,
    );
    bound(
        "breaker_closed",
        r.gateway_counters.breaker_closed,
        None,
        e.breaker_closed_at_least,
    );
    if let Some(j) = &r.job {
        bound(
            "stale_writes_accepted",
            j.stale_accepted,
            e.stale_writes_accepted_at_most,
            e.stale_writes_accepted_at_least,
        );
        bound(
            "stale_writes_rejected",
            j.stale_rejected,
            None,
            e.stale_writes_rejected_at_least,
        );
        bound("job_runs", j.runs, None, e.job_runs_at_least);
        bound(
            "job_max_gap_ms",
            j.max_gap_ms.ceil() as u64,
            e.job_max_gap_ms_at_most,
            None,
        );
        bound("leader_conflicts", j.leader_conflicts, Some(0), None);
        bound(
            "wrongly_rejected_commits",
            j.wrongly_rejected,
            Some(0),
            None,
        );
    }
    if let (Some(max), Some([_, _, worst])) =
        (e.fail_open_latency_ms_at_most, r.fail_open_latency_ms)
        && worst > max as f64
    {
        out.push(format!(
            "slowest fail-open answer took {worst:.3} ms, expected at most {max} ms"
        ));
    }
    // The gateways' counters must agree with the answers the clients received. Checked only
    // when every request was answered: a request lost with its gateway has no answer to count.
    if r.unanswered == 0 {
        if r.gateway_counters.bypassed != r.bypassed {
            out.push(format!(
                "bypassed counter {} != {} bypassed answers",
                r.gateway_counters.bypassed, r.bypassed
            ));
        }
        if sc.spec.gateway.edge.is_none() && r.gateway_counters.fail_open != r.fail_open {
            out.push(format!(
                "fail_open counter {} != {} fail-open answers",
                r.gateway_counters.fail_open, r.fail_open
            ));
        }
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
