//! Every applicable checker over one run, and the failures they find: what the explorer
//! (`ratelab explore`) judges each drawn run by, what a scenario's `expect.explorer` asks for,
//! and what [`crate::run_with`] holds a user's limiter to.
//!
//! Safety checkers judge each *epoch* of the store apart: a store crash loses every bucket,
//! and what a restarted store admits is held to a fresh envelope (a limiter that keeps its
//! state in memory promises nothing across a crash). A failover (`store_failover`) keeps the
//! replica's state, a little behind the primary's: the bounds hold across it with an
//! allowance, per key, of the admissions it can have lost, at most min(B, the cost admitted
//! in the replica's largest lag before the primary died, up to the promotion) — the bound
//! docs/CLUSTER.md derives. The linearizability checker starts afresh at a promotion from a
//! bucket in an unknown state. Within an epoch:
//!
//! - `envelope` (token bucket): per key, admitted cost in any interval Δt ≤ B + R·Δt (on the
//!   store's clock);
//! - `window` (every algorithm but the token bucket, from its quota): per key, admitted cost in any interval Δt ≤
//!   L·(2 + Δt/W), which holds for any fixed window however its windows are placed (an
//!   interval meets at most ⌈Δt/W⌉ + 1 of them) and for the sliding-window counter (whose
//!   current window never admits more than L);
//! - `linearizable` (every algorithm): the per-key answers are explained by a real-time order
//!   under the family's specification (`ratelab_check::linearizable` for the token bucket,
//!   `ratelab_check::family` for the others), every denial as well as every admission;
//! - `answered-once`: every request answered exactly once;
//! - `fail-reasons`: every fail-open or error answer has the failure it names behind it;
//! - `recovery`: after every fault healed, every request decided by every limit;
//! - `over-denial` (fixed window, atomic path, store clock): no denial while the key's window
//!   had room for it;
//! - `cleanup`: the cleanup job deleted no live bucket and nothing it had not planned;
//! - `fencing` (a fenced job): one leader at a time, and no commit accepted while a lease
//!   granted after its sender's was still within its length, both recomputed from the lease
//!   and commit records and the lease lengths;
//! - `liveness` (after the last fault heals, when the run has a probe client within the
//!   policy): every probe request admitted.
//!
//! Each failure carries a detail naming what witnessed it.

use crate::Scenario;
use crate::checkers::epochs::{beyond, beyond_allowance, failovers, grouped};
use crate::checkers::{self, Run};
pub use crate::checkers::{Class, Failure, Judged, LINEARIZABILITY_BUDGET};
use ratelab_check::Admission;
use ratelab_check::history::History;
use ratelab_check::window;
use ratelab_core::Nanos;
use std::collections::BTreeMap;

/// The failures every checker ([`crate::checkers::CHECKERS`]) finds in one run.
pub fn judge(sc: &Scenario, h: &History) -> Judged {
    checkers::judge(&Run::new(sc, h))
}

/// [`judge`] with a linearizability budget of `budget` per key and epoch instead of
/// [`LINEARIZABILITY_BUDGET`].
pub fn judge_within(sc: &Scenario, h: &History, budget: u64) -> Judged {
    checkers::judge(&Run::new(sc, h).budget(budget))
}

/// [`judge`] for a run of an algorithm that the scenario's policy only bounds unless `exact`
/// (a user's limiter and its claim).
pub fn judge_claimed(sc: &Scenario, h: &History, exact: bool) -> Judged {
    checkers::judge(&Run::new(sc, h).exact(exact))
}

/// The exact window promise ([`crate::Claim::AnyWindow`]): per store epoch and key, at most
/// `limit` admitted in any interval of one `window`.
pub fn any_window(sc: &Scenario, h: &History, limit: u64, window: Nanos) -> Vec<Failure> {
    let (admitted, _, _) = grouped(sc, h, false);
    let failovers = failovers(sc);
    let over = |key: &str, adm: &[Admission]| {
        let one = BTreeMap::from([(key, adm.to_vec())]);
        window::window_spike(&one, window)
            .max_in_window
            .saturating_sub(limit)
    };
    admitted
        .iter()
        .filter_map(|(epoch, by_key)| {
            let (key, allowed) = if failovers.is_empty() {
                let s = window::window_spike(by_key, window);
                (s.max_in_window > limit).then_some((s.key, 0))?
            } else {
                let (_, key, allowed) = beyond_allowance(by_key, &failovers, limit, &over)?;
                (key, allowed)
            };
            let one = BTreeMap::from([(key.as_str(), by_key[key.as_str()].clone())]);
            let s = window::window_spike(&one, window);
            let what = format!(
                "{} admitted in the window of {window} from {}, against at most {limit}",
                s.max_in_window, s.from
            );
            Some(beyond("window", *epoch, &key, what, allowed))
        })
        .collect()
}

/// The explorer's checkers on a scenario that asks for their verdict (`expect.explorer`).
#[derive(Clone, Debug, Default)]
pub struct Expected {
    /// What the checkers found.
    pub found: Vec<Failure>,
    /// How that differs from what the scenario expects; empty when it holds.
    pub problems: Vec<String>,
    /// Keys (per epoch) whose linearizability search ran out of budget: a run expected to
    /// pass with any is unknown, not passed.
    pub unknown_keys: u64,
}

/// How `found` differs from `want` (`"pass"`, or the signature `"class/checker"` a canary must
/// show); empty when it holds.
pub fn held_to(want: &str, found: &[Failure]) -> Vec<String> {
    if want == "pass" {
        found
            .iter()
            .map(|f| format!("explorer: {}: {}", f.signature(), f.detail))
            .collect()
    } else if found.iter().any(|f| f.signature() == want) {
        Vec::new()
    } else {
        let seen: Vec<String> = found.iter().map(Failure::signature).collect();
        vec![format!(
            "explorer: expected {want}, the checkers found {}",
            if seen.is_empty() {
                "nothing".to_owned()
            } else {
                seen.join(", ")
            }
        )]
    }
}

/// Judges a run by its scenario's `expect.explorer`; `None` when it asks for no verdict.
pub fn explorer_expectation(sc: &Scenario, h: &History) -> Option<Expected> {
    let want = sc.spec().expect.explorer.as_ref()?;
    let judged = judge(sc, h);
    let problems = held_to(want, &judged.failures);
    Some(Expected {
        found: judged.failures,
        problems,
        unknown_keys: judged.unknown_keys,
    })
}
