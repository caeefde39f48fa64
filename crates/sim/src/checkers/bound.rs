//! The bound on admissions: per store epoch and key, a token bucket's envelope B + R·Δt, or
//! for any other algorithm, from its quota of L per W, L·(2 + Δt/W), which holds for any fixed
//! window however its windows are placed, aligned or opened by a key's first request (an
//! interval meets at most ⌈Δt/W⌉ + 1 of them), and for the sliding-window counter (whose
//! current window never admits more than L). Across a failover
//! a key may exceed it by what the failover can have lost (`epochs`).

use super::checker::{Checker, Figure, Judged, Needs, Run};
use super::epochs::{beyond, beyond_allowance, envelope_excess, failovers};
use ratelab_check::envelope::{self, Envelope};
use ratelab_core::Policy;

/// The envelope (token bucket) or window bound (every other algorithm, from its quota).
pub struct Bound;

const FIGURES: &[Figure] = &[
    Figure::bounded(
        "max_excess",
        "largest excess over the envelope B + R·Δt in any interval, per key",
        Needs::Nothing,
        |r| Some(r.report.max_excess),
    ),
    Figure::bounded(
        "max_excess_with_fail_open",
        "largest excess over the envelope counting fail-open answers as the admissions they \
         are: beside max_excess (the limiter's own), what the store's failures let through",
        Needs::Nothing,
        |r| Some(r.report.max_excess_with_fail_open),
    ),
    Figure::bounded(
        "total_excess",
        "admitted beyond B + R·T over each key's whole run, summed over keys",
        Needs::Nothing,
        |r| Some(r.report.total_excess),
    ),
    Figure::bounded(
        "max_in_window",
        "most admitted for one key in any interval of one window length",
        Needs::Nothing,
        |r| Some(r.report.max_in_window),
    ),
];

impl Checker for Bound {
    fn name(&self) -> &'static str {
        "envelope"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
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
