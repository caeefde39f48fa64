//! A run's report: counts, checker figures, the trace hash, and the expectations it failed.

use crate::scenario::Scenario;
use crate::spec::{WithFamily, with_family};
use ratelab_check::answers::{self, AnswerReport};
use ratelab_check::cleanup::{self, CleanupReport, FullAgain, StoreReset};
use ratelab_check::envelope::{self, Envelope, EnvelopeReport};
use ratelab_check::family::Family;
use ratelab_check::history::{Answer, History, Layer};
use ratelab_check::linearizable::Initial;
use ratelab_check::liveness::{self, LivenessReport};
use ratelab_check::window::{self, SpikeReport};
use ratelab_core::{Algorithm, Nanos, TokenBucket};
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
    /// Requests denied because a layer's store had no room for their new key.
    #[serde(default)]
    pub full: u64,
    /// Requests a gateway's denial cache answered with 429, without a store call.
    #[serde(default)]
    pub cached: u64,
    /// Of those, answers no earlier store denial on the same key justifies (a denial at
    /// store time d with wait r covers the key until d + r): a cache bug. Always 0 when the
    /// cache is right.
    #[serde(default)]
    pub cached_unjustified: u64,
    /// Store messages the run's requests caused, every layer and fate.
    #[serde(default)]
    pub store_calls: u64,
    /// Store calls the guard and the denial cache saved, measured: the same seed run again
    /// without either, and the store calls made there by exactly the requests the guard
    /// rejected or the cache answered here (absent without a guard or a cache).
    pub store_calls_saved: Option<u64>,
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
    /// Largest excess in any interval counting the fail-open answers as the admissions they
    /// are: beside `max_excess` (the limiter's own), what the store's failures let through.
    #[serde(default)]
    pub max_excess_with_fail_open: u64,
    /// B + R·T summed over keys that admitted anything: what a correct limiter could admit.
    pub envelope: u64,
    /// The worst window: key, from, to (ns), admitted, bound, request ids.
    pub excess_witness: Option<Witness>,
    /// Most admitted for one key in any interval of one window length.
    pub max_in_window: u64,
    /// Admitted requests of each key the scenario's `expect.keys` names.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub key_allowed: BTreeMap<String, u64>,
    /// The window length used for `max_in_window`, ns.
    pub window_ns: u64,
    /// Liveness check, when the scenario asks for it.
    pub liveness: Option<Liveness>,
    /// The edge (per-IP) layer's envelope figures, when the scenario has an edge limit.
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
    /// The cleanup job's figures, when the scenario runs it.
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

/// The edge layer's figures: the envelope checker run per client address over the requests
/// the edge admitted (whatever the per-key layer did next).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct EdgeFigures {
    /// Requests the edge admitted.
    pub admitted: u64,
    /// Requests the edge denied.
    pub denied: u64,
    /// B + R·T summed over addresses: what a correct edge could admit.
    pub envelope: u64,
    /// Largest excess over the edge envelope in any interval, per address.
    pub max_excess: u64,
    /// Excess over B + R·T across each address's run, summed.
    pub total_excess: u64,
    /// The worst window.
    pub witness: Option<Witness>,
    /// Requests the edge denied that reached the per-key layer anyway (always a failure).
    pub denied_but_spent: u64,
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

impl From<ratelab_check::Witness> for Witness {
    fn from(w: ratelab_check::Witness) -> Witness {
        Witness {
            key: w.key,
            from_ns: w.from.as_u64(),
            to_ns: w.to.as_u64(),
            admitted: w.admitted,
            bound: w.bound,
            ids: w.ids,
        }
    }
}

/// The cleanup job's figures ([`cleanup::cleanup`]).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct JobFigures {
    /// Whether the store checked tokens.
    pub fencing: bool,
    /// Lease grants.
    pub grants: u64,
    /// Breaches of single leadership, recomputed from grant times and lease lengths (always a
    /// failure).
    pub leader_conflicts: u64,
    /// Accepted commits: the job's runs.
    pub runs: u64,
    /// Commits accepted while a lease granted after their sender's was still within its
    /// length (recomputed from the grant, renewal and commit records and the lease lengths).
    #[serde(default)]
    pub in_successor_lease: u64,
    /// Commits accepted from a sender another grant had superseded.
    pub stale_accepted: u64,
    /// Such commits refused.
    pub stale_rejected: u64,
    /// Commits refused from the latest grantee.
    pub wrongly_rejected: u64,
    /// Buckets an accepted commit deleted that its plan's scan did not return (always a
    /// failure).
    #[serde(default)]
    pub deleted_unplanned: u64,
    /// Buckets deleted.
    pub keys_removed: u64,
    /// Buckets deleted although written after the scan that planned the deletion: the harm
    /// fencing prevents (a failure unless the scenario expects it).
    #[serde(default)]
    pub live_deleted: u64,
    /// The first such deletion: who, which bucket, when it was scanned, written and deleted
    /// (store time, ms).
    #[serde(default)]
    pub first_live_delete: Option<String>,
    /// Longest time without an accepted commit, ms.
    pub max_gap_ms: f64,
}

impl JobFigures {
    fn new(fencing: bool, f: CleanupReport) -> JobFigures {
        let ms = |t: Nanos| t.as_u64() as f64 / 1e6;
        JobFigures {
            fencing,
            grants: f.grants,
            leader_conflicts: f.leader_conflicts,
            runs: f.accepted,
            in_successor_lease: f.in_successor_lease,
            stale_accepted: f.superseded_accepted,
            stale_rejected: f.superseded_rejected,
            wrongly_rejected: f.wrongly_rejected,
            deleted_unplanned: f.deleted_unplanned,
            keys_removed: f.removed,
            live_deleted: f.live_deleted,
            first_live_delete: f.first_live_delete.map(|d| {
                format!(
                    "{} (token {}) deleted {:?} at {:.3} ms, scanned at {:.3} ms and written at {:.3} ms",
                    d.owner,
                    d.token,
                    d.key,
                    ms(d.at),
                    ms(d.scanned_at),
                    ms(d.written_at)
                )
            }),
            max_gap_ms: ms(f.max_gap),
        }
    }
}

/// When a bucket is full again after each write, by a family's specification.
struct FullBySpec<'a> {
    job: cleanup::JobHistory<'a>,
    resets: &'a [StoreReset],
}

impl WithFamily for FullBySpec<'_> {
    type Out = FullAgain;

    fn with<F: Family>(self, family: &F) -> FullAgain {
        FullAgain::by_spec(family, self.job, self.resets)
    }
}

/// The cleanup job judged ([`cleanup::cleanup`]), a bucket full again when the policy's
/// specification, replaying the admissions the store wrote, says so.
fn judge_job(sc: &Scenario, h: &History) -> CleanupReport {
    let end = ms_to_nanos(sc.spec.duration_ms.get());
    let resets: Vec<StoreReset> = crate::checkers::epochs::epochs(sc, true)
        .into_iter()
        .skip(1)
        .map(|(at, initial)| StoreReset {
            at,
            emptied: initial == Initial::Full,
        })
        .collect();
    let job = cleanup::JobHistory::of(h);
    let full = with_family(
        &sc.policy,
        FullBySpec {
            job,
            resets: &resets,
        },
    );
    cleanup::cleanup(job, &full, end)
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
    let env = Envelope::of(&sc.policy);
    let by_key = envelope::admissions(&h.requests);
    let EnvelopeReport {
        max_excess,
        total_excess,
        witness,
    } = envelope::envelope(&by_key, env);
    let with_fail_open = envelope::envelope(&envelope::admissions_with_fail_open(&h.requests), env);
    let window = sc.policy.quota().window;
    let SpikeReport { max_in_window, .. } = window::window_spike(&by_key, window);
    let AnswerReport {
        unanswered,
        duplicated,
        ..
    } = answers::answered_once(&h.requests);
    let counts = Counts::of(sc, h);
    let gateway_counters = stats
        .iter()
        .fold(GatewayCounters::default(), |a, s| GatewayCounters {
            fail_open: a.fail_open + s.fail_open(),
            bypassed: a.bypassed + s.bypassed,
            breaker_opened: a.breaker_opened + s.breaker_opened,
            breaker_closed: a.breaker_closed + s.breaker_closed,
        });

    let liveness = sc.spec.expect.liveness.then(|| {
        let keys = crate::eligible::liveness_keys(sc);
        // After the last fault: a request sent before it may still be in flight for one
        // deadline; a breaker it opened stays open for its cooldown, and the probe that
        // closes it takes up to one more; then two refill times.
        let timeout = sc.spec.store.timeout_ms.get();
        let breaker = sc
            .spec
            .gateway
            .breaker
            .map_or(0, |b| b.cooldown_ms.get() + timeout);
        let from = ms_to_nanos(crate::cluster::faults_end_ms(sc) + timeout + breaker)
            .saturating_add(Nanos(2 * window.as_u64()));
        let LivenessReport {
            checked,
            violations,
            ..
        } = liveness::liveness(&h.requests, &keys, from);
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

    let job = sc
        .spec
        .cleanup_job
        .map(|spec| JobFigures::new(spec.fencing, judge_job(sc, h)));

    let invariants = counts.invariant_failures(&gateway_counters);
    let mut report = Report {
        scenario: sc.name.clone(),
        file: sc.file.display().to_string(),
        seed,
        path: sc.path.name().to_owned(),
        gateways: sc.spec.gateways.get(),
        requests: h.requests.len() as u64,
        allowed: counts.allowed,
        denied: counts.denied,
        errors: counts.errors_by_kind.values().sum(),
        errors_by_kind: counts.errors_by_kind,
        fail_open: counts.fail_open_by_reason.values().sum(),
        fail_open_by_reason: counts.fail_open_by_reason,
        bypassed: counts.bypassed,
        rejected: counts.rejected,
        full: counts.full,
        cached: counts.cached,
        cached_unjustified: ratelab_check::cached::unjustified(&h.requests),
        store_calls: h
            .requests
            .iter()
            .map(|r| u64::from(r.store_calls_total()))
            .sum(),
        // Measured by the caller against a paired run without the guard and the denial cache
        // (`crate::run`).
        store_calls_saved: None,
        fail_open_latency_ms: counts.fail_open_latency_ms,
        gateway_counters,
        groups: counts.groups,
        unanswered,
        duplicated,
        max_excess,
        total_excess,
        max_excess_with_fail_open: with_fail_open.max_excess,
        envelope: envelope::allowance(&by_key, env),
        excess_witness: witness.map(Witness::from),
        max_in_window,
        key_allowed: sc
            .spec
            .expect
            .keys
            .keys()
            .map(|k| {
                (
                    k.clone(),
                    by_key.get(k.as_str()).map_or(0, |a| a.len() as u64),
                )
            })
            .collect(),
        window_ns: window.as_u64(),
        liveness,
        edge: edge_figures(sc, h),
        race_window_us,
        sim_ns: sim.as_u64(),
        wall_ms: wall.as_secs_f64() * 1e3,
        events: h.event_count,
        trace_hash: format!("{:016x}", h.trace_hash()),
        job,
        failures: Vec::new(),
        passed: false,
        checkers: None,
    };
    // A scenario judged by the explorer's checkers keeps only the accounting invariants here;
    // its caller adds the explorer's verdict.
    if sc.spec.expect.explorer.is_none() {
        report.failures = check(sc, &report, h);
    }
    report.failures.extend(invariants);
    report.passed = report.failures.is_empty();
    report
}

/// The answers counted by kind, and the invariants on store calls that hold for every run.
struct Counts {
    allowed: u64,
    denied: u64,
    bypassed: u64,
    rejected: u64,
    full: u64,
    cached: u64,
    errors_by_kind: BTreeMap<String, u64>,
    fail_open_by_reason: BTreeMap<String, u64>,
    fail_open_latency_ms: Option<[f64; 3]>,
    groups: Vec<GroupCounts>,
    /// Layer outcomes that failed open (a request can fail open on both layers).
    fail_open_layers: u64,
    /// Requests the kill switch bypassed or the guard rejected that reached a store.
    bypassed_store_calls: u64,
    /// Whether every request was answered, so the gateways' counters must match the answers.
    all_answered: bool,
}

impl Counts {
    fn of(sc: &Scenario, h: &History) -> Counts {
        let mut c = Counts {
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

    fn invariant_failures(&self, counters: &GatewayCounters) -> Vec<String> {
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

/// The edge layer's envelope, per client address, over what the edge itself admitted.
fn edge_figures(sc: &Scenario, h: &History) -> Option<EdgeFigures> {
    let e = sc.spec.gateway.edge?;
    let bucket = TokenBucket::per_second(e.capacity.get(), e.refill_per_sec.get()).ok()?;
    let env = Envelope::of_bucket(&bucket);
    // The gateways count IPv6 clients by their /64 (their default); so does the checker.
    let by_peer = envelope::edge_admissions(&h.requests, 64);
    let report = envelope::envelope(&by_peer, env);
    let edge_denied = |r: &&ratelab_check::history::RequestRecord| {
        matches!(
            r.layers.edge,
            Some(Answer::Denied { .. } | Answer::Full | Answer::Cached { .. })
        )
    };
    Some(EdgeFigures {
        admitted: by_peer.values().map(|v| v.len() as u64).sum(),
        denied: h.requests.iter().filter(edge_denied).count() as u64,
        envelope: envelope::allowance(&by_peer, env),
        max_excess: report.max_excess,
        total_excess: report.total_excess,
        witness: report.witness.map(Witness::from),
        denied_but_spent: h
            .requests
            .iter()
            .filter(edge_denied)
            .filter(|r| r.layers.per_key.is_some() || r.store_calls_on(Layer::PerKey) > 0)
            .count() as u64,
    })
}

fn ms_to_nanos(v: u64) -> Nanos {
    Nanos::from_millis(v)
}

/// The expectations `r` fails, each stated with its numbers: the bounds on the checkers'
/// figures, each key's admissions, answers, liveness.
fn check(sc: &Scenario, r: &Report, h: &History) -> Vec<String> {
    let e = &sc.spec.expect;
    let mut out = crate::checkers::held(&crate::checkers::Run::new(sc, r, h), &e.bounds);
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
