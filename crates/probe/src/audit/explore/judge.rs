//! Judging one run: every answer held to the claim by the probe's checkers, apart from the
//! answers a store fault touched, which are classified and held to the failure mode the
//! target declares.
//!
//! A fault's *zone* runs from its start until the declared recovery after its end. A
//! request whose flight (send to answer) overlaps a zone is classified: already in flight
//! when the fault began, sent while the store was down or slow, or sent during the
//! recovery. Its answer is not held to the policy (a fail-open target admits beyond it by
//! design), but an admission whose whole flight fell while the store was down is a
//! failure-mode finding for a fail-closed target, and so are, whatever the mode, requests a
//! target held through a spell down: every one in flight at its start or sent in its first
//! half answered only once the store was back (a target that waits for its store decides in
//! no mode at all; one that gives up sooner than half the spell holds nothing). Every other request is judged: those
//! before the first fault from keys nobody used, those after each zone from any state (the
//! store may have lost what it held, or missed what was admitted while it was down). So a
//! target that has not limited again by the end of its declared recovery is judged, and
//! caught, like any over-admission.
//!
//! A run more than 5 % of whose answers before its first fault are not decisions (5xx,
//! refused, timeouts on a healthy store) could not run: it judges nothing. Fewer, and any
//! after a fault, are the decisions check's failures.
//!
//! After a fault a key is judged from any state: a bucket by its specification and its
//! envelope, a window family (which no specification here starts from an unknown state) by
//! its envelope alone. While the store is down, a local fallback's admissions per key are
//! held to its instances' own limits over the spell, as the fixed audit holds them
//! ([`crate::audit::faults`]).

use super::run::{Applied, Ran};
use crate::audit::recipe::FailureMode;
use ratelab_check::linearizable::Initial;
use ratelab_check::probe::{Claim, Judging, Observation, Outcome, ProbeHistory, judge};
use ratelab_core::Nanos;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How the answers a fault touched fell.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Classified {
    /// In flight when a fault began.
    pub in_flight_at_start: u64,
    /// Sent while the store was down or slow.
    pub sent_during: u64,
    /// Sent after the store was back, within the declared recovery.
    pub sent_in_recovery: u64,
    /// Of those sent during a fault, answered only after it ended.
    pub answered_after: u64,
}

/// What one run found.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    /// Why the run judged nothing, if it could not run.
    pub could_not_run: Option<String>,
    /// Failure lines by check (`linearizable`, `envelope`, `failure-mode`, …): the first
    /// line of each.
    pub failures: BTreeMap<String, String>,
    /// Keys no check could decide.
    pub unknown: usize,
    /// Requests judged against the policy.
    pub judged: u64,
    /// The requests a fault touched.
    pub classified: Classified,
}

impl Found {
    /// Whether a check failed.
    pub fn failed(&self) -> bool {
        !self.failures.is_empty()
    }
}

/// What a run is held to.
#[derive(Clone, Copy, Debug)]
pub struct Holding {
    /// The claim.
    pub claim: Claim,
    /// The limiter's clock resolution.
    pub clock_resolution: Nanos,
    /// The linearizability search's budget per key.
    pub budget: u64,
    /// The failure mode it declares.
    pub mode: FailureMode,
    /// Its declared recovery.
    pub recovery: Nanos,
    /// Whether its windows start where the Unix time is a multiple of the window.
    pub epoch_windows: bool,
    /// Its instances: a local fallback admits at most this many times the policy.
    pub instances: u32,
}

/// The share of undecided answers outside the faults past which a run could not run, %.
const UNDECIDED_PERCENT: u64 = 5;

/// Adds `line` to `check`'s failures (a check's second line follows its first).
fn add(failures: &mut BTreeMap<String, String>, check: &str, line: String) {
    failures
        .entry(check.to_owned())
        .and_modify(|first| {
            first.push_str("; ");
            first.push_str(&line);
        })
        .or_insert(line);
}

/// Holds the admissions decided while the store was down to the declared mode: none for a
/// fail-closed target; for a local fallback, per key and spell, no more than its instances'
/// own limits allow over the spell (each holding the policy from any state); a fail-open
/// target may admit them all.
fn down_spells(
    f: &mut Found,
    ran: &Ran,
    h: &Holding,
    down_admitted: &BTreeMap<(usize, &str), Vec<u64>>,
) {
    match h.mode {
        FailureMode::FailOpen => {}
        FailureMode::FailClosed => {
            let ids: Vec<u64> = down_admitted.values().flatten().copied().collect();
            if !ids.is_empty() {
                add(
                    &mut f.failures,
                    "failure-mode",
                    format!(
                        "failure-mode: declared fail-closed, but {} requests were admitted while the store was down (requests {:?})",
                        ids.len(),
                        &ids[..ids.len().min(8)]
                    ),
                );
            }
        }
        FailureMode::LocalFallback => {
            for (&(fault, key), ids) in down_admitted {
                let a = &ran.faults[fault];
                let spell = a.down_until.as_u64().saturating_sub(a.from.as_u64());
                let one = h
                    .claim
                    .envelope()
                    .over(spell.saturating_add(h.clock_resolution.as_u64()));
                let bound = one.saturating_mul(u64::from(h.instances.max(1)));
                if ids.len() as u64 > bound {
                    add(
                        &mut f.failures,
                        "failure-mode",
                        format!(
                            "failure-mode: declared local-fallback, but key {key:?} admitted {} while the store was down for {} ms, beyond the {bound} its {} instances' own limits allow (requests {:?})",
                            ids.len(),
                            spell / 1_000_000,
                            h.instances,
                            &ids[..ids.len().min(8)]
                        ),
                    );
                }
            }
        }
    }
}

/// Judges `ran`.
pub fn found(ran: &Ran, h: &Holding) -> Found {
    let mut f = Found::default();
    let zone = |a: &Applied| {
        (
            a.from,
            Nanos(a.until.as_u64().saturating_add(h.recovery.as_u64())),
        )
    };
    let mut segments: BTreeMap<usize, Vec<Observation>> = BTreeMap::new();
    let mut undecided: Vec<&Observation> = Vec::new();
    let mut outside = 0u64;
    // Admitted while the store was down: (fault, key) → request ids.
    let mut down_admitted: BTreeMap<(usize, &str), Vec<u64>> = BTreeMap::new();
    let mut held: Vec<u64> = Vec::new();
    for o in &ran.observations {
        let touched = ran.faults.iter().enumerate().find(|(_, a)| {
            let (from, to) = zone(a);
            o.sent <= to && o.answered >= from
        });
        if let Some((fault, a)) = touched {
            let c = &mut f.classified;
            if o.sent < a.from {
                c.in_flight_at_start += 1;
            } else if o.sent <= a.until {
                c.sent_during += 1;
                c.answered_after += u64::from(o.answered > a.until);
            } else {
                c.sent_in_recovery += 1;
            }
            if a.kind.down()
                && a.from <= o.sent
                && o.answered <= a.down_until
                && o.outcome == Outcome::Allowed
            {
                down_admitted
                    .entry((fault, o.key.as_str()))
                    .or_default()
                    .push(o.id);
            }
            continue;
        }
        let segment = ran.faults.iter().filter(|a| zone(a).1 < o.sent).count();
        // Before any fault the store is healthy: answers that are not decisions there mean
        // the run cannot judge. After one, they are the decisions check's to judge (a target
        // that never decides again is a finding, not a run lost).
        if segment == 0 {
            outside += 1;
            if matches!(o.outcome, Outcome::Failed(_)) {
                undecided.push(o);
            }
        }
        let mut o = o.clone();
        o.key = format!("{}@{segment}", o.key);
        segments.entry(segment).or_default().push(o);
    }
    // Held through a spell down: every request in flight at its start or sent in its first
    // half answered only once the store was back ([`crate::audit::faults::held`]).
    for a in ran.faults.iter().filter(|a| a.kind.down()) {
        let flights = ran
            .observations
            .iter()
            .map(|o| (o.id, o.sent.as_u64(), o.answered.as_u64()));
        held.extend(crate::audit::faults::held(
            (a.from.as_u64(), a.down_until.as_u64()),
            flights,
        ));
    }
    if let Some(first) = undecided.first()
        && undecided.len() as u64 * 100 > outside * UNDECIDED_PERCENT
    {
        let why = match &first.outcome {
            Outcome::Failed(why) => why.as_str(),
            _ => "",
        };
        f.could_not_run = Some(format!(
            "{} of {outside} answers on a healthy store were not decisions (the first, request {}: {why})",
            undecided.len(),
            first.id
        ));
        return f;
    }
    if !held.is_empty() {
        add(
            &mut f.failures,
            "failure-mode",
            format!(
                "failure-mode: declared {}, but {} requests in flight while the store was down got no answer until it was back (requests {:?})",
                h.mode.name(),
                held.len(),
                &held[..held.len().min(8)]
            ),
        );
    }
    down_spells(&mut f, ran, h, &down_admitted);
    for (segment, observations) in segments {
        f.judged += observations.len() as u64;
        let initial = if segment == 0 {
            Initial::Full
        } else {
            Initial::Unknown
        };
        let history = ProbeHistory {
            observations,
            retry_probes: Vec::new(),
        };
        let verdict = judge(
            &history,
            &Judging {
                claim: h.claim,
                clock_resolution: h.clock_resolution,
                initial,
                budget: h.budget,
                exact: true,
                origin: h
                    .epoch_windows
                    .then(|| crate::probe::epoch_origin(&h.claim, ran.wall))
                    .flatten(),
            },
        );
        f.unknown += verdict.unknown();
        for line in verdict.failures() {
            let check = line.split(':').next().unwrap_or("").trim().to_owned();
            f.failures.entry(check).or_insert(line);
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::super::schedule::FaultKind;
    use super::*;
    use ratelab_check::probe::Fields;

    fn ms(t: u64) -> Nanos {
        Nanos::from_millis(t)
    }

    fn seen(id: u64, key: &str, sent: u64, answered: u64, outcome: Outcome) -> Observation {
        Observation {
            id,
            key: key.into(),
            client: 0,
            instance: 0,
            cost: 1,
            sent: ms(sent),
            answered: ms(answered),
            outcome,
            fields: Fields::default(),
        }
    }

    fn holding(mode: FailureMode) -> Holding {
        Holding {
            claim: Claim::TokenBucket {
                capacity: 2,
                amount: 1,
                period: Nanos::from_secs(1),
            },
            clock_resolution: ms(1),
            budget: 100_000,
            mode,
            recovery: ms(100),
            epoch_windows: false,
            instances: 1,
        }
    }

    /// A freeze from 1 000 to 1 200 ms, its zone to 1 300 ms.
    fn freeze() -> Vec<Applied> {
        vec![Applied {
            kind: FaultKind::Freeze,
            from: ms(1_000),
            down_until: ms(1_200),
            until: ms(1_200),
        }]
    }

    #[test]
    fn the_requests_a_fault_touched_are_classified_and_not_held_to_the_policy() {
        let ran = Ran {
            wall: std::time::UNIX_EPOCH,
            observations: vec![
                seen(0, "a", 0, 5, Outcome::Allowed),
                seen(1, "a", 990, 1_210, Outcome::Denied),
                seen(2, "a", 1_050, 1_100, Outcome::Allowed),
                seen(3, "a", 1_090, 1_250, Outcome::Allowed),
                seen(4, "a", 1_250, 1_260, Outcome::Allowed),
                seen(5, "a", 1_400, 1_405, Outcome::Allowed),
                seen(6, "a", 1_410, 1_415, Outcome::Allowed),
            ],
            faults: freeze(),
        };
        let open = found(&ran, &holding(FailureMode::FailOpen));
        assert_eq!(
            open.classified,
            Classified {
                in_flight_at_start: 1,
                sent_during: 2,
                sent_in_recovery: 1,
                answered_after: 1,
            }
        );
        // Judged: the first before the fault (a full bucket), two after its zone from any
        // state, within the policy. Request 2 was decided while the store was frozen, so the
        // target held nothing (request 1's wait is not a hold).
        assert_eq!(open.judged, 3);
        assert!(open.failures.is_empty(), "{open:?}");
        // Fail-closed: that admission, whose whole flight fell in the freeze, is a finding.
        let closed = found(&ran, &holding(FailureMode::FailClosed));
        let line = &closed.failures["failure-mode"];
        assert!(
            line.contains("admitted while the store was down (requests [2])"),
            "{closed:?}"
        );
        // A target that answers nothing until its store is back holds every request in
        // flight at the freeze's start or sent in its first half: requests 1 and 3.
        let mut waits = ran.clone();
        waits.observations.retain(|o| o.id != 2);
        let held = found(&waits, &holding(FailureMode::FailOpen));
        assert!(
            held.failures["failure-mode"].contains("declared fail-open, but 2 requests in flight")
                && held.failures["failure-mode"].contains("[1, 3]"),
            "{held:?}"
        );
    }

    /// A local fallback holds each key to its instances' own limits while the store is down:
    /// two instances of a bucket of 2 and 1 a second admit at most 2 × (2 + 0.2) = 4 over the
    /// 200 ms freeze (and its 1 ms resolution); 5 is beyond them, 4 within.
    #[test]
    fn a_local_fallback_is_held_to_its_instances_own_limits_while_the_store_is_down() {
        let during = |admitted: u64| Ran {
            observations: (0..admitted)
                .map(|i| {
                    let at = 1_010 + i * 30;
                    seen(i, "a", at, at + 5, Outcome::Allowed)
                })
                .collect(),
            faults: freeze(),
            wall: std::time::UNIX_EPOCH,
        };
        let fallback = Holding {
            instances: 2,
            ..holding(FailureMode::LocalFallback)
        };
        let over = found(&during(5), &fallback);
        assert!(
            over.failures["failure-mode"].contains("key \"a\" admitted 5")
                && over.failures["failure-mode"].contains("beyond the 4"),
            "{over:?}"
        );
        assert!(found(&during(4), &fallback).failures.is_empty());
        // Fail-open admits them all; fail-closed none.
        assert!(
            found(&during(5), &holding(FailureMode::FailOpen))
                .failures
                .is_empty()
        );
        assert!(
            found(&during(1), &holding(FailureMode::FailClosed))
                .failures
                .contains_key("failure-mode")
        );
    }

    #[test]
    fn a_target_that_does_not_limit_after_recovery_is_caught() {
        // Admitting every request of a client sending every 20 ms for 2 s after the zone.
        let observations = (0..100)
            .map(|i| {
                let at = 1_400 + i * 20;
                seen(i, "a", at, at + 2, Outcome::Allowed)
            })
            .collect();
        let ran = Ran {
            observations,
            faults: freeze(),
            wall: std::time::UNIX_EPOCH,
        };
        let f = found(&ran, &holding(FailureMode::FailOpen));
        assert!(f.failures.contains_key("envelope"), "{f:?}");
    }

    #[test]
    fn a_run_whose_answers_are_not_decisions_could_not_run() {
        let observations = (0..20)
            .map(|i| {
                let o = if i % 4 == 0 {
                    Outcome::Failed("status 502".into())
                } else {
                    Outcome::Denied
                };
                seen(i, "a", i * 10, i * 10 + 1, o)
            })
            .collect();
        let f = found(
            &Ran {
                observations,
                faults: Vec::new(),
                wall: std::time::UNIX_EPOCH,
            },
            &holding(FailureMode::FailClosed),
        );
        let why = f.could_not_run.expect("could not run");
        assert!(
            why.contains("5 of 20") && why.contains("status 502"),
            "{why}"
        );
        assert!(f.failures.is_empty() && f.judged == 0);
    }
}
