//! Over-denial (fixed window, atomic path, the store's clock): a denial is wrong when the
//! key had room for it however its windows are placed: the cost admitted in the window's
//! length before the denial, `(t − W, t]`, plus the denied cost, is at most the limit (the
//! window holding `t` began inside that interval, so it holds no more). Admissions count at
//! the store's decision, those whose answer was lost or never came at the time the simulated
//! store applied them. A crash or a failover only frees room, so the rule holds across them;
//! the denial cache's answers are judged apart (`cached_unjustified`). A user's limiter that
//! claims only a window bound is not held to it.

use super::checker::{Checker, Class, Failure, Figure, Judged, Needs, Run, Runs};
use ratelab_check::linearizable::{Op, Seen};
use ratelab_core::{Algorithm, Nanos, Policy};
use ratelab_store::{Path, TimeSource};
use std::collections::BTreeMap;

/// The fixed window's over-denial checker.
pub struct OverDenial;

const FIGURES: &[Figure] = &[Figure::bounded(
    "over_denied",
    "requests a fixed window denied while their window had room for them (atomic path, store \
     clock; not measured otherwise)",
    Needs::FixedWindow,
)];

/// One wrong denial: the request, its key, when, and what its window had admitted by then.
struct Wrong<'h> {
    id: u64,
    key: &'h str,
    at: Nanos,
    admitted: u64,
}

/// What happened on one key, by time.
#[derive(Default)]
struct KeyOps {
    /// (decided at, denied?, cost, id): admissions sort before denials at one instant.
    decided: Vec<(Nanos, bool, u64, u64)>,
}

/// The denials judged and the wrong ones of a run; `None` where the rule does not apply.
fn over_denied<'h>(run: &Run<'h>) -> Option<(u64, Vec<Wrong<'h>>)> {
    let Policy::FixedWindow(w) = *run.sc.policy() else {
        return None;
    };
    if !run.exact || run.sc.path() != Path::Atomic || run.sc.time_source() != TimeSource::Store {
        return None;
    }
    let (limit, len) = (w.0.limit(), w.0.window().as_u64().max(1));
    let mut keys: BTreeMap<&str, KeyOps> = BTreeMap::new();
    for r in &run.h.requests {
        let k = keys.entry(r.key.as_str()).or_default();
        let Some(op) = Op::per_key(r) else {
            // No per-key outcome reached the client: count what the store applied.
            if r.answer.is_none()
                && let Some(applied) = r.written_at
            {
                k.decided.push((applied, false, r.cost, r.id));
            }
            continue;
        };
        match op.seen {
            Seen::Allowed { at, .. } => k.decided.push((at, false, op.cost, r.id)),
            Seen::Denied { at, .. } => k.decided.push((at, true, op.cost, r.id)),
            Seen::Unknown => {
                if let Some(applied) = r.written_at {
                    k.decided.push((applied, false, op.cost, r.id));
                }
            }
        }
    }
    let mut wrong = Vec::new();
    let mut denials = 0u64;
    for (key, mut k) in keys {
        k.decided.sort_unstable();
        // The admissions within one window's length before each decision, oldest first.
        let mut recent: std::collections::VecDeque<(Nanos, u64)> = Default::default();
        let mut admitted = 0u64;
        for &(at, denied, cost, id) in &k.decided {
            while let Some(&(t, c)) = recent.front()
                && t.as_u64().saturating_add(len) <= at.as_u64()
            {
                admitted = admitted.saturating_sub(c);
                recent.pop_front();
            }
            if !denied {
                recent.push_back((at, cost));
                admitted = admitted.saturating_add(cost);
                continue;
            }
            denials += 1;
            if admitted.saturating_add(cost) <= limit {
                wrong.push(Wrong {
                    id,
                    key,
                    at,
                    admitted,
                });
            }
        }
    }
    Some((denials, wrong))
}

impl Checker<Runs> for OverDenial {
    fn name(&self) -> &'static str {
        "over-denial"
    }

    fn figures(&self) -> &'static [Figure] {
        FIGURES
    }

    fn measure(&self, run: &Run<'_>, out: &mut Judged) {
        if let Some((_, wrong)) = over_denied(run) {
            out.measured("over_denied", wrong.len() as u64);
        }
    }

    fn judge(&self, run: &Run<'_>, out: &mut Judged) {
        let Some((denials, wrong)) = over_denied(run) else {
            return;
        };
        if denials > 0 {
            out.judged("over-denial", denials);
        }
        if let Some(w) = wrong.first() {
            out.failures.push(Failure::new(
                Class::Safety,
                "over-denial",
                format!(
                    "key {:?}: request {} denied at {} with {} admitted in the window's length \
                     before it, of {} ({} such denials)",
                    w.key,
                    w.id,
                    w.at,
                    w.admitted,
                    run.sc.policy().quota().limit,
                    wrong.len()
                ),
            ));
        }
    }
}
