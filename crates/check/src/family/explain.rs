//! Judging one answer against a family's specification by trying its decision at moments
//! ([`Family::explain`]'s default), and the verdict both the replay and the search give.

use super::spec::{Family, Judged, Said};
use crate::linearizable::{Op, Seen, Verdict, Violation};
use ratelab_core::Nanos;

/// What `op`'s answer leaves possible from `state` ([`Family::explain`]'s default): its
/// decision fell at some moment of `[at, at + decided_within]` (one moment for the
/// simulator's exact times), each piece of [`Family::moments`] tried at its two ends.
pub(crate) fn by_moments<F: Family>(
    family: &F,
    state: &F::State,
    op: &Op,
    next_states: &mut Vec<F::State>,
) -> Judged {
    let start = next_states.len();
    let at = op.decided().unwrap_or(op.call);
    let within = op.precision.decided_within;
    let pieces = if within == Nanos::ZERO {
        vec![(at, at)]
    } else {
        family.moments(state, at, at.saturating_add(within))
    };
    let mut out = Judged::default();
    let mut phantom = true;
    out.guessed = within > Nanos::ZERO && !family.moments_cover(at, at.saturating_add(within));
    for (lo, hi) in pieces {
        let ends: Vec<(Said, F::State)> = [lo, hi][..if lo == hi { 1 } else { 2 }]
            .iter()
            .map(|&t| family.decide(state, t, op.cost))
            .collect();
        for (said, next) in &ends {
            match mismatch(op, said, (lo, hi)) {
                None => {
                    if !next_states[start..].contains(next) {
                        next_states.push(next.clone());
                    }
                }
                Some(why) => {
                    phantom &= said.allowed && matches!(op.seen, Seen::Denied { .. });
                    out.miss.get_or_insert((why, false));
                }
            }
        }
        // Admitted at the later end, with a `remaining` between what the earlier end gives
        // (nothing, if it denies) and the later end's: a moment between gave it (a remaining
        // that moves with the moment moves by whole units, and only grows as time passes).
        if let (
            [(a, _), (b, next)],
            Seen::Allowed {
                remaining: Some(r), ..
            },
        ) = (&ends[..], op.seen)
        {
            let least = if a.allowed { a.remaining } else { 0 };
            if b.allowed && r >= least && r <= b.remaining && !next_states[start..].contains(next) {
                next_states.push(next.clone());
            }
        }
    }
    if next_states.len() == start {
        if let Some(m) = out.miss.as_mut() {
            m.1 = phantom;
        }
    } else {
        out.miss = None;
    }
    out
}

/// Why `op`'s answer is not what `said` gives when decided at some moment of `[lo, hi]`, or
/// `None` if it is. A reported `Retry-After` is the true wait rounded up to `op`'s unit
/// (exact for the simulator).
pub(crate) fn mismatch(op: &Op, said: &Said, (lo, hi): (Nanos, Nanos)) -> Option<String> {
    let says = || match (said.allowed, said.retry_at) {
        (true, _) => format!("the spec admits it, {} left", said.remaining),
        (false, Some(r)) => format!("the spec denies it until {r}"),
        (false, None) => "the spec denies it for good".to_owned(),
    };
    match op.seen {
        Seen::Allowed { at, remaining } => {
            let ok = said.allowed && remaining.is_none_or(|r| r == said.remaining);
            (!ok).then(|| {
                let left = remaining.map_or(String::new(), |r| format!(" with remaining {r}"));
                format!("admitted{left} at {at}; {}", says())
            })
        }
        Seen::Denied { at, retry_after } => {
            // The true wait, `retry_at − τ` for τ in [lo, hi], is above 0 and within one unit
            // below the reported `w`.
            let unit = op.precision.retry_after_unit.as_u64().max(1);
            let fits = |w: Nanos| {
                said.retry_at.is_some_and(|r| {
                    let (least, most) = (r.saturating_sub(hi), r.saturating_sub(lo));
                    most > Nanos::ZERO && least <= w && most.as_u64() + unit > w.as_u64()
                })
            };
            let ok = !said.allowed && retry_after.is_none_or(fits);
            (!ok).then(|| {
                let told = retry_after.map_or(String::new(), |w| format!(" with retry after {w}"));
                format!("denied{told} at {at}; {}", says())
            })
        }
        Seen::Unknown => None,
    }
}

/// A violation, or [`Verdict::Unknown`] when the moments tried for some request may have
/// missed the one that explains it (`guessed`), or the starting states the one it starts from.
pub(crate) fn violation_unless_guessed<F: Family>(
    family: &F,
    guessed: bool,
    explored: u64,
    v: Violation,
) -> Verdict {
    if guessed || !family.fresh_covers() {
        Verdict::Unknown { explored }
    } else {
        Verdict::Violation(v)
    }
}
