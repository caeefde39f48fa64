//! Fixed window aligned to the clock: at most `limit` per window `[phase + k·W,
//! phase + (k+1)·W)`. A request is admitted while its window's count plus its cost is at
//! most the limit; `remaining` is the limit less the count after it; a denied request is
//! admitted again when its window ends (never, if its cost exceeds the limit).
//!
//! The phase is invisible from outside a limiter (where its clock's zero is): given as
//! `None`, every phase the history can tell apart is a starting state, and the check
//! passes if one of them explains the answers. A request whose clock reads earlier than
//! its key's window (a clock that stepped back) is counted in that window.

use super::Family;
use crate::linearizable::{Op, Seen};
use ratelab_core::Nanos;

/// Windows of length `window` starting at `phase` (modulo `window`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Grid {
    /// The window's length.
    pub window: Nanos,
    /// Where windows start, in `[0, window)`.
    pub phase: u64,
}

impl Grid {
    fn w(&self) -> u64 {
        self.window.as_u64().max(1)
    }

    /// The window holding `t`, numbered so that the window holding instant 0 is 0 or 1.
    pub fn index(&self, t: Nanos) -> u64 {
        (t.as_u64() + self.w() - self.phase) / self.w()
    }

    /// When window `k` ends.
    pub fn end(&self, k: u64) -> Nanos {
        Nanos(k.saturating_mul(self.w()).saturating_add(self.phase))
    }

    /// One sub-interval `(from, to)` of `[from, to]` per class of windows a request taking
    /// effect there can land in, as seen by requests decided at `to` or later: the window
    /// holding `from`, one window between (they all end before `to`'s previous window), the
    /// window before `to`'s, and `to`'s.
    pub fn classes(&self, from: Nanos, to: Nanos) -> Vec<(Nanos, Nanos)> {
        let (a, b) = (self.index(from), self.index(to));
        let mut ks = vec![a];
        for k in [a + 1, b.saturating_sub(1), b] {
            if k > a && k <= b && !ks.contains(&k) {
                ks.push(k);
            }
        }
        ks.into_iter()
            .map(|k| {
                let lo = if k == a { from } else { self.end(k - 1) };
                let hi = if k == b {
                    to
                } else {
                    Nanos(self.end(k).as_u64() - 1)
                };
                (lo, hi)
            })
            .collect()
    }

    /// Every phase that places `ops` in windows differently (each decision's offset in its
    /// window, and 0), and every phase a denial's `Retry-After` points at (the instant it
    /// names, to the precision it has, is a window's end), sorted.
    pub fn phases(window: Nanos, ops: &[Op]) -> Vec<u64> {
        let w = window.as_u64().max(1);
        let mut p: Vec<u64> = Vec::new();
        for o in ops {
            match o.seen {
                Seen::Allowed { at, .. } => p.push(at.as_u64() % w),
                Seen::Denied { at, retry_after } => {
                    p.push(at.as_u64() % w);
                    if let Some(r) = retry_after {
                        let unit = o.precision.retry_after_unit.as_u64().max(1);
                        let end = at.as_u64().saturating_add(r.as_u64());
                        p.push(end % w);
                        p.push(end.saturating_sub(unit - 1) % w);
                    }
                }
                Seen::Unknown => p.push(o.call.as_u64() % w),
            }
        }
        p.push(0);
        p.sort_unstable();
        p.dedup();
        p
    }
}

/// A fixed window's specification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FixedWindow {
    /// Units admitted per window.
    pub limit: u64,
    /// The window's length.
    pub window: Nanos,
    /// Where windows start (modulo the window), if known.
    pub phase: Option<Nanos>,
}

/// A key's fixed window: the grid, the window its count is in, the count.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    grid: Grid,
    index: u64,
    count: u64,
}

impl Family for FixedWindow {
    type State = State;

    fn name(&self) -> &'static str {
        "fixed window"
    }

    fn fresh(&self, ops: &[Op]) -> Vec<State> {
        let w = self.window.as_u64().max(1);
        let phases = match self.phase {
            Some(p) => vec![p.as_u64() % w],
            None => Grid::phases(self.window, ops),
        };
        phases
            .into_iter()
            .map(|phase| State {
                grid: Grid {
                    window: self.window,
                    phase,
                },
                index: 0,
                count: 0,
            })
            .collect()
    }

    fn decide(&self, s: &State, at: Nanos, cost: u64) -> (super::Said, State) {
        let k = s.grid.index(at);
        let mut next = if s.index >= k {
            s.clone()
        } else {
            State {
                index: k,
                count: 0,
                ..s.clone()
            }
        };
        let allowed = next.count.saturating_add(cost) <= self.limit;
        if allowed {
            next.count += cost;
        }
        let said = super::Said {
            allowed,
            remaining: self.limit.saturating_sub(next.count),
            retry_at: (!allowed && cost <= self.limit).then(|| s.grid.end(next.index)),
        };
        (said, next)
    }

    fn moments(&self, s: &State, from: Nanos, to: Nanos) -> Vec<(Nanos, Nanos)> {
        // Within one window the answer, the instant room comes back and the state after a
        // request are the same at every moment.
        s.grid.classes(from, to)
    }

    fn moments_cover(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::check_key;
    use crate::family::testing::{allowed, answered_by, denied, ms, unstamped, violation_at};
    use crate::linearizable::{DEFAULT_BUDGET, Verdict};

    const SPEC: FixedWindow = FixedWindow {
        limit: 3,
        window: Nanos(1_000_000_000),
        phase: Some(Nanos(0)),
    };

    #[test]
    fn the_core_fixed_window_is_explained_replayed_and_searched() {
        let core = ratelab_core::FixedWindow::new(5, Nanos::from_secs(1)).unwrap();
        let ops = answered_by(&core, 300, ms(120), 3);
        let spec = FixedWindow { limit: 5, ..SPEC };
        assert_eq!(
            check_key(&spec, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        let few = unstamped(&ops[..60]);
        assert_eq!(
            check_key(&spec, &few, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
    }

    #[test]
    fn a_fourth_admission_in_a_window_of_three_is_a_violation() {
        let ops = [
            allowed(0, ms(10), 2),
            allowed(1, ms(20), 1),
            allowed(2, ms(30), 0),
            allowed(3, ms(40), 0),
        ];
        assert!(violation_at(&check_key(&SPEC, &ops, DEFAULT_BUDGET), 3));
        assert!(violation_at(
            &check_key(&SPEC, &unstamped(&ops), DEFAULT_BUDGET),
            3
        ));
    }

    #[test]
    fn a_denial_with_room_is_a_phantom_denial() {
        let ops = [allowed(0, ms(10), 2), denied(1, ms(20), Some(ms(980)))];
        match check_key(&SPEC, &ops, DEFAULT_BUDGET) {
            Verdict::Violation(v) => assert!(v.id == 1 && v.phantom_denial, "{v:?}"),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn remaining_and_retry_after_are_judged() {
        let wrong_remaining = [allowed(0, ms(10), 1)];
        assert!(violation_at(
            &check_key(&SPEC, &wrong_remaining, DEFAULT_BUDGET),
            0
        ));
        let full = [
            allowed(0, ms(10), 2),
            allowed(1, ms(10), 1),
            allowed(2, ms(10), 0),
        ];
        let right = [full.as_slice(), &[denied(3, ms(300), Some(ms(700)))]].concat();
        assert_eq!(
            check_key(&SPEC, &right, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        let late = [full.as_slice(), &[denied(3, ms(300), Some(ms(1700)))]].concat();
        assert!(violation_at(&check_key(&SPEC, &late, DEFAULT_BUDGET), 3));
    }

    #[test]
    fn an_unknown_phase_is_found_from_the_history() {
        // Windows starting at 500 ms: three at 600–700, three more at 1 600.
        let ops = [
            allowed(0, ms(600), 2),
            allowed(1, ms(650), 1),
            allowed(2, ms(700), 0),
            denied(3, ms(1_400), Some(ms(100))),
            allowed(4, ms(1_600), 2),
        ];
        assert!(matches!(
            check_key(&SPEC, &ops, DEFAULT_BUDGET),
            Verdict::Violation(_)
        ));
        let any_phase = FixedWindow {
            phase: None,
            ..SPEC
        };
        assert_eq!(
            check_key(&any_phase, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        assert_eq!(
            check_key(&any_phase, &unstamped(&ops), DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        // A fourth within 300 ms opens a window at some phase, so it leaves two, not none.
        let four = [
            allowed(0, ms(600), 2),
            allowed(1, ms(650), 1),
            allowed(2, ms(700), 0),
            allowed(3, ms(900), 0),
        ];
        assert!(matches!(
            check_key(&any_phase, &four, DEFAULT_BUDGET),
            Verdict::Violation(_)
        ));
    }

    #[test]
    fn an_unanswered_request_may_have_taken_the_last_place() {
        let mut ops = vec![allowed(0, ms(10), 2), allowed(1, ms(20), 1)];
        let mut lost = crate::family::testing::op(2, ms(30), 1, crate::linearizable::Seen::Unknown);
        lost.stamp = None;
        ops.push(lost);
        ops.push(denied(3, ms(40), Some(ms(960))));
        let ops = unstamped(&ops);
        assert_eq!(
            check_key(&SPEC, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
    }
}
