//! The bound on admissions: per store epoch and key, a token bucket's envelope B + R·Δt, or
//! for any other algorithm, from its quota of L per W, L·(2 + Δt/W), which holds for any fixed
//! window however its windows are placed, aligned or opened by a key's first request (an
//! interval meets at most ⌈Δt/W⌉ + 1 of them), and for the sliding-window counter (whose
//! current window never admits more than L). Across a failover
//! a key may exceed it by what the failover can have lost (`epochs`).

use super::checker::{Checker, Figure, Judged, Needs, Run, Runs};
use super::epochs::{beyond, beyond_allowance, envelope_excess, failovers};
use ratelab_check::envelope::{self, Envelope, EnvelopeReport};
use ratelab_check::history::Answer;
use ratelab_check::window;
use ratelab_core::{Algorithm, Policy};
use serde::{Deserialize, Serialize};

/// The envelope (token bucket) or window bound (every other algorithm, from its quota).
pub struct Bound;

const FIGURES: &[Figure] = &[
    Figure::bounded(
        "max_excess",
        "largest excess over the envelope B + R·Δt in any interval, per key",
        Needs::Nothing,
    ),
    Figure::bounded(
        "max_excess_with_fail_open",
        "largest excess over the envelope counting fail-open answers as the admissions they \
         are: beside max_excess (the limiter's own), what the store's failures let through",
        Needs::Nothing,
    ),
    Figure::bounded(
        "total_excess",
        "admitted beyond B + R·T over each key's whole run, summed over keys",
        Needs::Nothing,
    ),
    Figure::bounded(
        "max_in_window",
        "most admitted for one key in any interval of one window length",
        Needs::Nothing,
    ),
];

impl Checker<Runs> for Bound {
    fn name(&self) -> &'static str {
        "envelope"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    /// The figures over the whole run, as the clients saw it, and the [`Evidence`].
    fn measure(&self, run: &Run<'_>, out: &mut Judged) {
        let env = Envelope::of(run.sc.policy());
        let by_key = envelope::admissions(&run.h.requests);
        let EnvelopeReport {
            max_excess,
            total_excess,
            witness,
        } = envelope::envelope(&by_key, env);
        // With no fail-open answer the two groupings are the same: measured once.
        let failed_open = run
            .h
            .requests
            .iter()
            .any(|r| matches!(r.answer, Some((_, Answer::FailedOpen(_)))));
        let max_excess_with_fail_open = if failed_open {
            let by_key = envelope::admissions_with_fail_open(&run.h.requests);
            envelope::envelope(&by_key, env).max_excess
        } else {
            max_excess
        };
        let window = run.sc.policy().quota().window;
        let spike = window::window_spike(&by_key, window);
        out.measured("max_excess", max_excess);
        out.measured("total_excess", total_excess);
        out.measured("max_excess_with_fail_open", max_excess_with_fail_open);
        out.measured("max_in_window", spike.max_in_window);
        out.keep(
            "envelope",
            Evidence {
                allowance: envelope::allowance(&by_key, env),
                witness: witness.map(Witness::from),
            },
        );
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let sc = run.sc;
        let (admitted, _, _) = run.grouped();
        let failovers = failovers(sc);
        // What a failover can re-grant on a key: the policy's own B or L, at most.
        let lost_cap = Envelope::of(sc.policy()).burst;
        let (bound, env) = match *sc.policy() {
            Policy::TokenBucket(b) => ("envelope", Envelope::of_bucket(&b)),
            ref window => {
                let e = Envelope::of(window);
                let doubled = Envelope {
                    burst: e.burst.saturating_mul(2),
                    ..e
                };
                ("window", doubled)
            }
        };
        out.judged(bound, 0);
        for (epoch, by_key) in admitted {
            out.judged(bound, by_key.values().map(|a| a.len() as u64).sum());
            let found = if failovers.is_empty() {
                let e = envelope::envelope(by_key, env);
                (e.max_excess > 0).then(|| {
                    let key = e.witness.map_or_else(String::new, |w| w.key);
                    (e.max_excess, key, 0)
                })
            } else {
                beyond_allowance(by_key, &failovers, lost_cap, &envelope_excess(env))
            };
            if let Some((excess, key, allowed)) = found {
                let what = format!("{excess} admitted beyond the bound");
                out.failures
                    .push(beyond(bound, *epoch, &key, what, allowed));
            }
        }
    }
}

/// What the envelope's figures are described with.
#[derive(Clone, Debug)]
pub struct Evidence {
    /// B + R·T summed over the keys that admitted anything: what a correct limiter could
    /// admit.
    pub allowance: u64,
    /// The worst window.
    pub witness: Option<Witness>,
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
