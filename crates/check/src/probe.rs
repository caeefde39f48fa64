//! Judging a limiter seen only from outside: what a probe's clients sent and were answered,
//! held to a claimed policy.
//!
//! A probe knows less than the simulator: not when the limiter decided (somewhere between a
//! request's send and its answer, widened by the limiter's clock resolution), not its store's
//! order, and only the fields the limiter chose to send (a `Retry-After` in whole seconds, a
//! `RateLimit` remaining, or nothing). Every checker here therefore holds an answer to every
//! decision time and wait those allow, so what it reports is a violation whichever they were:
//!
//! - **envelope**: admitted cost in any window ≤ B + R·Δt, with Δt the widest the
//!   admissions' spans allow ([`envelope::envelope_spans`]);
//! - **linearizability**, black-box ([`linearizable::check_key_from`] with a
//!   [`Precision`](crate::linearizable::Precision) per answer), for a token-bucket claim;
//!   a denial the claimed bucket admits from every state the furthest order reached gives
//!   there is a *phantom denial*;
//! - **fields**: `remaining` never grows faster than the refill between two answers in real
//!   time, a denial never reports room for its own cost, and `Retry-After` is never earlier
//!   than the `RateLimit` field's `t`;
//! - **Retry-After honesty**: a client that waited exactly the time it was told was admitted
//!   (the probe sends those requests on a quiet key and records each pair).

use crate::envelope::{self, Envelope, EnvelopeReport, Span};
use crate::linearizable::{
    self, Initial, LinearizabilityReport, Op, Precision, Seen, Spec, Verdict,
};
use ratelab_core::Nanos;
use std::collections::BTreeMap;

/// What the limiter answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Admitted.
    Allowed,
    /// Denied.
    Denied,
    /// No decision came back (a transport error, an unexpected status, an error reply): it
    /// may have taken effect, or not.
    Failed(String),
}

/// The rate-limit fields an answer carried, in the checker's units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fields {
    /// Units left (`RateLimit` `r`, `X-RateLimit-Remaining`, or a script's reply).
    pub remaining: Option<u64>,
    /// The `RateLimit` field's `t`, in whole seconds: draft-10's time until more quota, or
    /// draft-11's effective window. Under either draft a denial's `Retry-After` must not
    /// point before it.
    pub reset_secs: Option<u64>,
    /// The wait a denial announced.
    pub retry_after: Option<Nanos>,
    /// `retry_after` is the true wait rounded up to a multiple of this (1 s for a
    /// `Retry-After` field; 1 ns when exact).
    pub retry_after_unit: Nanos,
}

impl Fields {
    /// The fields an HTTP limiter sends for `d` when it renders it as ratelab's draft-10
    /// headers do: `remaining`, the `RateLimit` field's `t` and `Retry-After`, in whole
    /// seconds rounded up. For histories made from decisions (tests, benchmarks), never for
    /// judging.
    pub fn rendered(d: &ratelab_core::Decision) -> Fields {
        let secs = |w: Nanos| w.as_u64().div_ceil(1_000_000_000);
        Fields {
            remaining: Some(d.remaining),
            reset_secs: Some(secs(d.reset_after)),
            retry_after: d.retry_after.map(|w| Nanos::from_secs(secs(w))),
            retry_after_unit: Nanos::from_secs(1),
        }
    }
}

impl Outcome {
    /// Admitted or denied.
    pub fn of(allowed: bool) -> Outcome {
        if allowed {
            Outcome::Allowed
        } else {
            Outcome::Denied
        }
    }
}

/// One request a probe sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// Sequential id, in send order.
    pub id: u64,
    /// The key it was sent for.
    pub key: String,
    /// The probe client that sent it.
    pub client: u32,
    /// Its cost.
    pub cost: u64,
    /// When it was sent, on the probe's clock (from the probe's start).
    pub sent: Nanos,
    /// When its answer arrived.
    pub answered: Nanos,
    /// The answer.
    pub outcome: Outcome,
    /// The fields it carried.
    pub fields: Fields,
}

/// A Retry-After honesty probe: after denial `denied`, its client waited exactly the
/// announced time and sent `follow_up` on the same quiet key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryProbe {
    /// The denial's id.
    pub denied: u64,
    /// The follow-up's id.
    pub follow_up: u64,
}

/// Everything a probe recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProbeHistory {
    /// Every request, by id.
    pub observations: Vec<Observation>,
    /// The honesty probes.
    pub retry_probes: Vec<RetryProbe>,
}

/// The policy a probe holds the limiter to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Claim {
    /// A token bucket: `capacity` B, `amount` tokens every `period`.
    TokenBucket {
        /// B.
        capacity: u64,
        /// Tokens per period.
        amount: u64,
        /// The refill period.
        period: Nanos,
    },
    /// At most `limit` per aligned `window` (its placement unknown from outside).
    FixedWindow {
        /// L.
        limit: u64,
        /// W.
        window: Nanos,
    },
}

impl Claim {
    /// The envelope the claim promises: a bucket's B + R·Δt; for a fixed window whose
    /// boundaries the probe cannot see, any interval of Δt meets at most ⌈Δt/W⌉ + 1 windows,
    /// so 2L + L·Δt/W.
    pub fn envelope(&self) -> Envelope {
        match *self {
            Claim::TokenBucket {
                capacity,
                amount,
                period,
            } => Envelope {
                burst: capacity,
                amount,
                period: period.as_u64().max(1),
            },
            Claim::FixedWindow { limit, window } => Envelope {
                burst: limit.saturating_mul(2),
                amount: limit,
                period: window.as_u64().max(1),
            },
        }
    }

    /// The sequential specification the black-box search holds answers to: the token
    /// bucket's (a window's answers depend on boundaries the probe cannot see).
    pub fn spec(&self) -> Option<Spec> {
        match *self {
            Claim::TokenBucket {
                capacity,
                amount,
                period,
            } => Some(Spec {
                capacity,
                amount,
                period,
            }),
            Claim::FixedWindow { .. } => None,
        }
    }
}

/// How a probe's history is judged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Judging {
    /// The claimed policy.
    pub claim: Claim,
    /// How far the limiter's clock may lag the moment it decided (its resolution: 1 ms for
    /// a millisecond clock).
    pub clock_resolution: Nanos,
    /// What each key held before the probe: full for keys the probe made up.
    pub initial: Initial,
    /// The linearizability search's budget per key.
    pub budget: u64,
    /// Whether the claim is the limiter's exact policy, so its answers can be held to the
    /// sequential specification; `false` for a bound only (a rate known to be at most R).
    pub exact: bool,
}

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
}

impl ProbeVerdict {
    /// One line per failed check; empty when every check passed. A linearizability search
    /// that ran out of budget is *unknown*, not a failure.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        if let Some((id, why)) = &self.first_failed {
            // A limiter that answers with errors has not been checked: say so, never pass.
            out.push(format!(
                "decisions: {} of {} requests got none (request {id}: {why})",
                self.failed, self.requests
            ));
        }
        if let Some(w) = self
            .envelope
            .witness
            .as_ref()
            .filter(|_| self.envelope.max_excess > 0)
        {
            out.push(format!(
                "envelope: key {:?}: {} admitted in [{}, {}] against a bound of {} (excess {}; requests {:?})",
                w.key, w.admitted, w.from, w.to, w.bound, self.envelope.max_excess, w.ids
            ));
        }
        if let Some(l) = &self.linearizable {
            for (key, v) in &l.violations {
                out.push(format!(
                    "linearizable: key {key:?}: request {}: {} ({} explained before it)",
                    v.id, v.detail, v.explained
                ));
            }
        }
        for f in &self.fields {
            out.push(format!(
                "fields: key {:?}: requests {:?}: {}",
                f.key, f.ids, f.what
            ));
        }
        for (d, f) in &self.retry_after.refused {
            out.push(format!(
                "retry-after: request {f} waited exactly what denial {d} announced and was denied"
            ));
        }
        out
    }
}

/// Judges `h` under `j`.
pub fn judge(h: &ProbeHistory, j: &Judging) -> ProbeVerdict {
    let mut v = ProbeVerdict {
        requests: h.observations.len(),
        ..ProbeVerdict::default()
    };
    let mut spans: BTreeMap<&str, Vec<Span>> = BTreeMap::new();
    let mut ops: BTreeMap<&str, Vec<Op>> = BTreeMap::new();
    // The limiter's clock may lag a request's send by up to the resolution, so each request is
    // judged as sent that much earlier. The probe's clock starts at its first send, so the
    // judging runs on a timeline shifted later by the resolution, where `sent − resolution`
    // never falls before 0 (a clamp there would take the allowance from the run's first
    // requests); only differences matter to the checks, and the witness is shifted back.
    let shift = j.clock_resolution.as_u64();
    let later = |t: Nanos| Nanos(t.as_u64().saturating_add(shift));
    for o in &h.observations {
        let from = o.sent;
        let answered = later(o.answered);
        let precision = Precision {
            decided_within: Nanos(answered.as_u64().saturating_sub(from.as_u64())),
            retry_after_unit: Nanos(o.fields.retry_after_unit.as_u64().max(1)),
        };
        let seen = match o.outcome {
            Outcome::Allowed => {
                v.admitted += o.cost;
                spans.entry(&o.key).or_default().push(Span {
                    from,
                    to: answered,
                    id: o.id,
                    cost: o.cost,
                });
                Seen::Allowed {
                    at: from,
                    remaining: o.fields.remaining,
                }
            }
            Outcome::Denied => {
                v.denied += o.cost;
                Seen::Denied {
                    at: from,
                    retry_after: o.fields.retry_after,
                }
            }
            Outcome::Failed(ref why) => {
                v.failed += 1;
                v.first_failed.get_or_insert_with(|| (o.id, why.clone()));
                Seen::Unknown
            }
        };
        // Each operation taken as sent earlier: fewer real-time constraints, never a false alarm.
        ops.entry(&o.key).or_default().push(Op {
            id: o.id,
            call: from,
            ret: (seen != Seen::Unknown).then_some(answered),
            cost: o.cost,
            seen,
            stamp: None,
            precision,
        });
    }
    for s in spans.values_mut() {
        s.sort_unstable();
    }
    let env = j.claim.envelope();
    v.envelope = envelope::envelope_spans(&spans, env);
    if let Some(w) = v.envelope.witness.as_mut() {
        w.from = Nanos(w.from.as_u64().saturating_sub(shift));
        w.to = Nanos(w.to.as_u64().saturating_sub(shift));
    }
    v.allowance = spans
        .values()
        .map(|s| {
            let span = s
                .iter()
                .map(|x| x.to)
                .max()
                .map_or(0, |to| to.as_u64().saturating_sub(s[0].from.as_u64()));
            let b = u128::from(env.burst) * u128::from(env.period)
                + u128::from(env.amount) * u128::from(span);
            u64::try_from(b / u128::from(env.period)).unwrap_or(u64::MAX)
        })
        .sum();
    if let Some(spec) = j.claim.spec().filter(|_| j.exact) {
        let mut report = LinearizabilityReport::default();
        for (key, key_ops) in &ops {
            // A key no answer came back for says nothing either way.
            if key_ops.iter().all(|o| o.seen == Seen::Unknown) {
                continue;
            }
            report.keys += 1;
            match linearizable::check_key_from(&spec, key_ops, j.budget, j.initial) {
                Verdict::Linearizable => {}
                Verdict::Violation(viol) => {
                    if viol.phantom_denial {
                        v.phantom_denials.push(((*key).to_owned(), viol.id));
                    }
                    report.violations.insert((*key).to_owned(), viol);
                }
                Verdict::Unknown { .. } => report.unknown.push((*key).to_owned()),
            }
        }
        v.linearizable = Some(report);
    }
    fields(h, j, &mut v);
    v.retry_after = honesty(h);
    v
}

/// The field checks, per key in send order.
fn fields(h: &ProbeHistory, j: &Judging, v: &mut ProbeVerdict) {
    let mut by_key: BTreeMap<&str, Vec<&Observation>> = BTreeMap::new();
    for o in &h.observations {
        if o.outcome != Outcome::Allowed && o.outcome != Outcome::Denied {
            continue;
        }
        by_key.entry(&o.key).or_default().push(o);
    }
    let res = j.clock_resolution.as_u64();
    for (key, obs) in by_key {
        let mut flag = |ids: Vec<u64>, what: String| {
            v.fields.push(FieldViolation {
                key: key.to_owned(),
                ids,
                what,
            })
        };
        for o in &obs {
            let has = o.fields.remaining.is_some() || o.fields.retry_after.is_some();
            v.fields_checked += usize::from(has);
            if o.outcome != Outcome::Denied {
                continue;
            }
            if let Some(r) = o.fields.remaining.filter(|&r| r >= o.cost) {
                flag(
                    vec![o.id],
                    format!("denied with remaining {r}, room for its cost {}", o.cost),
                );
            }
            if let (Some(w), Some(t)) = (o.fields.retry_after, o.fields.reset_secs)
                && w < Nanos::from_secs(t)
            {
                flag(
                    vec![o.id],
                    format!("Retry-After {w} is earlier than the RateLimit field's t={t}"),
                );
            }
        }
        // Remaining grows only as fast as the bucket refills: between an answer and a request
        // sent after it, at most R·Δt more (plus the fraction of a unit `remaining` rounds
        // away), Δt the widest the two decision times allow. Only for an exact bucket claim:
        // a bound says nothing of how `remaining` moves.
        let Claim::TokenBucket { amount, period, .. } = j.claim else {
            continue;
        };
        if !j.exact {
            continue;
        }
        let mut earlier: Vec<&Observation> = Vec::new();
        let mut sorted = obs.clone();
        sorted.sort_by_key(|o| (o.sent, o.id));
        for b in sorted {
            let Some(rb) = b.fields.remaining else {
                continue;
            };
            // The first of the latest answers before b's send that b's remaining outgrows.
            let first = earlier
                .iter()
                .rev()
                .take(256)
                .filter(|a| a.answered < b.sent)
                .filter_map(|a| {
                    let ra = a.fields.remaining?;
                    let dt = b.answered.as_u64().saturating_sub(a.sent.as_u64()) + res;
                    let grown = i128::from(rb) - i128::from(ra) - 1;
                    (grown >= 0
                        && grown * i128::from(period.as_u64())
                            >= i128::from(amount) * i128::from(dt))
                    .then_some((a.id, ra, dt))
                })
                .next();
            if let Some((aid, ra, dt)) = first {
                flag(
                    vec![aid, b.id],
                    format!(
                        "remaining went from {ra} to {rb} within {}, faster than the refill",
                        Nanos(dt)
                    ),
                );
            }
            earlier.push(b);
        }
    }
}

/// The honesty probes' verdict.
fn honesty(h: &ProbeHistory) -> HonestyReport {
    let by_id: BTreeMap<u64, &Observation> = h.observations.iter().map(|o| (o.id, o)).collect();
    let mut r = HonestyReport::default();
    for p in &h.retry_probes {
        match by_id.get(&p.follow_up).map(|o| &o.outcome) {
            Some(Outcome::Allowed) => {
                r.probes += 1;
                r.admitted += 1;
            }
            Some(Outcome::Denied) => {
                r.probes += 1;
                r.refused.push((p.denied, p.follow_up));
            }
            _ => {}
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use ratelab_core::{Algorithm, TokenBucket};

    const CLAIM: Claim = Claim::TokenBucket {
        capacity: 5,
        amount: 2,
        period: Nanos(1_000_000_000),
    };

    fn judging(claim: Claim) -> Judging {
        Judging {
            claim,
            clock_resolution: Nanos::from_millis(1),
            initial: Initial::Full,
            budget: linearizable::DEFAULT_BUDGET,
            exact: true,
        }
    }

    /// Requests on one key answered by `ratelab-core`'s bucket at a moment inside each
    /// request's flight, reported as a limiter's HTTP fields would be (Retry-After in whole
    /// seconds, rounded up), with `clients` of them in flight at once.
    fn answered_by_the_core(bucket: &TokenBucket, n: u64, clients: u64) -> ProbeHistory {
        let mut state = None;
        let mut h = ProbeHistory::default();
        for i in 0..n {
            let sent = Nanos::from_millis(i / clients * 40 + i % clients);
            let decided = Nanos(sent.as_u64() + 3_000_000 + (i * 7_919 % 5) * 100_000);
            let (next, d) = bucket.transition(state, decided, 1).unwrap();
            state = Some(next);
            h.observations.push(Observation {
                id: i,
                key: "k".into(),
                client: (i % clients) as u32,
                cost: 1,
                sent,
                answered: Nanos(decided.as_u64() + 2_000_000),
                outcome: Outcome::of(d.allowed),
                fields: Fields::rendered(&d),
            });
        }
        h
    }

    #[test]
    fn a_correct_bucket_seen_from_outside_passes_every_check() {
        let bucket = TokenBucket::per_second(5, 2).unwrap();
        let h = answered_by_the_core(&bucket, 300, 1);
        let v = judge(&h, &judging(CLAIM));
        assert!(v.denied > 0 && v.admitted > 0, "{v:?}");
        assert_eq!(v.failures(), Vec::<String>::new());
        assert_eq!(v.linearizable.unwrap().keys, 1);
        assert!(v.fields_checked > 250);
    }

    #[test]
    fn a_limiter_looser_than_its_claim_fails_the_envelope_and_linearizability() {
        // The limiter runs B = 8 while claiming B = 5.
        let bucket = TokenBucket::per_second(8, 2).unwrap();
        let h = answered_by_the_core(&bucket, 300, 1);
        let v = judge(&h, &judging(CLAIM));
        assert!(v.envelope.max_excess >= 2, "{:?}", v.envelope);
        assert!(!v.linearizable.as_ref().unwrap().linearizable());
        let f = v.failures();
        assert!(
            f.iter().any(|l| l.starts_with("envelope: key \"k\"")),
            "{f:?}"
        );
    }

    #[test]
    fn a_limiter_tighter_than_its_claim_shows_phantom_denials() {
        // The limiter runs B = 3 while claiming B = 5: it never admits too much, but denies
        // what the claimed bucket had room for.
        let bucket = TokenBucket::per_second(3, 2).unwrap();
        let mut h = answered_by_the_core(&bucket, 300, 1);
        for o in &mut h.observations {
            o.fields = Fields::default();
        }
        let v = judge(&h, &judging(CLAIM));
        assert_eq!(v.envelope.max_excess, 0);
        assert_eq!(v.phantom_denials.len(), 1, "{v:?}");
    }

    #[test]
    fn contradictory_fields_are_reported() {
        let bucket = TokenBucket::per_second(5, 2).unwrap();
        let mut h = answered_by_the_core(&bucket, 60, 1);
        let denial = h
            .observations
            .iter()
            .position(|o| o.outcome == Outcome::Denied)
            .unwrap();
        // A denial that reports room, and one whose Retry-After is earlier than its t.
        h.observations[denial].fields.remaining = Some(3);
        h.observations[denial + 1].fields.reset_secs = Some(9);
        h.observations[denial + 1].outcome = Outcome::Denied;
        h.observations[denial + 1].fields.retry_after = Some(Nanos::from_secs(1));
        let v = judge(&h, &judging(CLAIM));
        let what: Vec<&str> = v.fields.iter().map(|f| f.what.as_str()).collect();
        assert!(
            what.iter().any(|w| w.contains("room for its cost")),
            "{what:?}"
        );
        assert!(what.iter().any(|w| w.contains("earlier than")), "{what:?}");
        assert!(
            what.iter().any(|w| w.contains("faster than the refill")),
            "{what:?}"
        );
    }

    #[test]
    fn a_follow_up_denied_after_waiting_is_a_dishonest_retry_after() {
        let bucket = TokenBucket::per_second(5, 2).unwrap();
        let mut h = answered_by_the_core(&bucket, 20, 1);
        let d = h
            .observations
            .iter()
            .find(|o| o.outcome == Outcome::Denied)
            .unwrap()
            .id;
        let ok = h
            .observations
            .iter()
            .rev()
            .find(|o| o.outcome == Outcome::Allowed)
            .unwrap()
            .id;
        let no = h
            .observations
            .iter()
            .rev()
            .find(|o| o.outcome == Outcome::Denied)
            .unwrap()
            .id;
        h.retry_probes = vec![RetryProbe {
            denied: d,
            follow_up: ok,
        }];
        assert_eq!(judge(&h, &judging(CLAIM)).retry_after.admitted, 1);
        h.retry_probes = vec![RetryProbe {
            denied: d,
            follow_up: no,
        }];
        let v = judge(&h, &judging(CLAIM));
        assert_eq!(v.retry_after.refused, vec![(d, no)]);
        assert!(v.failures().iter().any(|l| l.starts_with("retry-after")));
    }

    #[test]
    fn a_fixed_window_claim_is_held_to_twice_its_limit() {
        let claim = Claim::FixedWindow {
            limit: 5,
            window: Nanos::from_secs(1),
        };
        let bucket = TokenBucket::per_second(8, 5).unwrap();
        let mut h = answered_by_the_core(&bucket, 100, 1);
        for o in &mut h.observations {
            o.fields = Fields::default();
        }
        let v = judge(&h, &judging(claim));
        assert!(v.linearizable.is_none());
        assert_eq!(v.envelope.max_excess, 0, "8 at once is within 2L");
    }

    fn seen(id: u64, sent_us: u64, answered_us: u64, outcome: Outcome) -> Observation {
        Observation {
            id,
            key: "k".into(),
            client: id as u32,
            cost: 1,
            sent: Nanos(sent_us * 1_000),
            answered: Nanos(answered_us * 1_000),
            outcome,
            fields: Fields::default(),
        }
    }

    #[test]
    fn a_lagging_clock_excuses_an_unanswered_request_taking_effect_before_its_send() {
        // B = 1 at 1/s on a clock 0.7 ms behind: the unanswered request took the token at
        // 999.3 ms by that clock, so it was back by 1999.3 ms, when the last was admitted.
        let claim = Claim::TokenBucket {
            capacity: 1,
            amount: 1,
            period: Nanos(1_000_000_000),
        };
        let h = ProbeHistory {
            observations: vec![
                seen(0, 1_000_000, 1_000_500, Outcome::Failed("timeout".into())),
                seen(1, 1_500_000, 1_500_200, Outcome::Denied),
                seen(2, 1_999_400, 1_999_600, Outcome::Allowed),
            ],
            retry_probes: Vec::new(),
        };
        let v = judge(&h, &judging(claim));
        assert!(v.linearizable.as_ref().unwrap().linearizable());
        assert_eq!(
            v.failures().len(),
            1,
            "only the missing decision is reported"
        );
    }

    #[test]
    fn the_first_requests_of_a_run_get_the_whole_clock_resolution() {
        // B = 1 at 20/s on a clock up to 25 ms behind: the first request, sent 1 ms into the
        // run, may have been stamped at -24 ms, so a second admission answered at 28.2 ms is
        // within the claim; a run's start is no reason to judge its first requests tighter.
        let claim = Claim::TokenBucket {
            capacity: 1,
            amount: 1,
            period: Nanos::from_millis(50),
        };
        let h = ProbeHistory {
            observations: vec![
                seen(0, 1_000, 1_200, Outcome::Allowed),
                seen(1, 28_000, 28_200, Outcome::Allowed),
            ],
            retry_probes: Vec::new(),
        };
        let mut j = judging(claim);
        j.clock_resolution = Nanos::from_millis(25);
        let v = judge(&h, &j);
        assert_eq!(v.failures(), Vec::<String>::new());
        // With a resolution that cannot explain it, the same history is an excess, and the
        // witness is on the probe's clock.
        j.clock_resolution = Nanos::from_millis(1);
        let v = judge(&h, &j);
        let w = v.envelope.witness.expect("an excess");
        assert_eq!(
            (w.admitted, w.bound, w.from, w.to),
            (2, 1, Nanos(0), Nanos(28_200_000))
        );
    }

    #[test]
    fn a_limiter_that_decides_nothing_is_not_passed() {
        let h = ProbeHistory {
            observations: (0..5)
                .map(|i| seen(i, i * 10, i * 10 + 5, Outcome::Failed("status 404".into())))
                .collect(),
            retry_probes: Vec::new(),
        };
        let v = judge(&h, &judging(CLAIM));
        assert_eq!(v.linearizable.as_ref().unwrap().keys, 0);
        let f = v.failures();
        assert_eq!(
            f,
            ["decisions: 5 of 5 requests got none (request 0: status 404)"]
        );
    }

    #[test]
    fn an_unknown_start_allows_a_decision_stamped_up_to_the_first_answer() {
        // B = 1 at 1/s on a millisecond clock: a request before the history (the probe's
        // preflight, say) was stamped 1000 ms and emptied the bucket until 2000 ms. The
        // history's two denials announce the waits that gives, to the microsecond.
        let claim = Claim::TokenBucket {
            capacity: 1,
            amount: 1,
            period: Nanos(1_000_000_000),
        };
        let denial = |id, sent_us, wait_ms| {
            let mut o = seen(id, sent_us, sent_us + 200, Outcome::Denied);
            o.fields.retry_after = Some(Nanos::from_millis(wait_ms));
            o.fields.retry_after_unit = Nanos(1_000);
            o
        };
        let h = ProbeHistory {
            observations: vec![denial(0, 1_000_600, 1_000), denial(1, 1_500_700, 500)],
            retry_probes: Vec::new(),
        };
        let j = Judging {
            initial: Initial::Unknown,
            ..judging(claim)
        };
        let v = judge(&h, &j);
        assert_eq!(v.failures(), Vec::<String>::new());
        // From a full bucket, the first denial is a phantom.
        let v = judge(&h, &judging(claim));
        assert_eq!(v.phantom_denials, [("k".to_owned(), 0)]);
    }
}
