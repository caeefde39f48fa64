//! Fixed window aligned to the clock: at most `limit` per window `[phase + k·W,
//! phase + (k+1)·W)`. A request is admitted while its window's count plus its cost is at
//! most the limit; `remaining` is the limit less the count after it; a denied request is
//! admitted again when its window ends (never, if its cost exceeds the limit).
//!
//! The phase is invisible from outside a limiter (where its clock's zero is): given as
//! `None`, every phase the history can tell apart is a starting state, and the check
//! passes if one of them explains the answers. A request whose clock reads earlier than
//! its key's window (a clock that stepped back) is counted in that window.

use super::spec::{Family, Said, Sustains};
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
    /// The phase of windows of length `window` that start where a clock whose zero is at
    /// `origin` reads a multiple of the window (`None`: the origin, so the phase, unknown).
    pub fn phase_of(origin: Option<Nanos>, window: Nanos) -> Option<Nanos> {
        origin.map(|o| Nanos(o.as_u64() % window.as_u64().max(1)))
    }

    fn w(&self) -> u64 {
        self.window.as_u64().max(1)
    }

    /// The window holding `t`, numbered so that the window holding instant 0 is 0 or 1.
    pub fn index(&self, t: Nanos) -> u64 {
        match t.as_u64().checked_sub(self.phase) {
            Some(since) => since / self.w() + 1,
            None => 0,
        }
    }

    /// When window `k` ends.
    pub fn end(&self, k: u64) -> Nanos {
        Nanos(k.saturating_mul(self.w()).saturating_add(self.phase))
    }

    /// `[from, to]` cut at the window boundaries in it: one piece per window, when there
    /// are at most [`Grid::MOST_PIECES`]; beyond that, the windows holding `from` and `to`,
    /// the ones next to them, and the middle as one piece ([`Grid::cut_whole`] says which).
    pub fn pieces(&self, from: Nanos, to: Nanos) -> Vec<(Nanos, Nanos)> {
        let (a, b) = (self.index(from), self.index(to));
        let piece = |k: u64| {
            let lo = if k == a { from } else { self.end(k - 1) };
            let hi = if k == b {
                to
            } else {
                Nanos(self.end(k).as_u64().saturating_sub(1))
            };
            (lo, hi)
        };
        if self.cut_whole(from, to) {
            return (a..=b).map(piece).collect();
        }
        let mut out = vec![piece(a), piece(a + 1)];
        out.push((
            self.end(a + 1),
            Nanos(self.end(b - 2).as_u64().saturating_sub(1)),
        ));
        out.push(piece(b - 1));
        out.push(piece(b));
        out
    }

    /// The most windows [`Grid::pieces`] cuts an interval into one by one.
    pub const MOST_PIECES: u64 = 64;

    /// Whether [`Grid::pieces`] gives `[from, to]` one piece per window.
    pub fn cut_whole(&self, from: Nanos, to: Nanos) -> bool {
        self.index(to).saturating_sub(self.index(from)) < Self::MOST_PIECES
    }

    /// Whether every grid of `window`, whatever its phase, cuts `[from, to]` whole.
    pub fn cut_whole_at_any_phase(window: Nanos, from: Nanos, to: Nanos) -> bool {
        to.saturating_sub(from).as_u64() / window.as_u64().max(1) + 2 < Self::MOST_PIECES
    }

    /// Every phase that places `ops` in windows differently (each decision's offset in its
    /// window, at either end of the interval it is known within, and 0), and every phase a
    /// denial's `Retry-After` points at (the instant it names, at either end of its
    /// precision, is a window's end), sorted.
    pub fn phases(window: Nanos, ops: &[Op]) -> Vec<u64> {
        let w = window.as_u64().max(1);
        let mut p: Vec<u64> = Vec::new();
        for o in ops {
            let within = o.precision.decided_within.as_u64();
            let mut edges = |t: u64| {
                p.push(t % w);
                p.push(t.saturating_add(within) % w);
            };
            match o.seen {
                Seen::Allowed { at, .. } => edges(at.as_u64()),
                Seen::Denied { at, retry_after } => {
                    edges(at.as_u64());
                    if let Some(r) = retry_after {
                        // The instant it names lies from `at + r − unit + 1` to
                        // `at + within + r`.
                        let unit = o.precision.retry_after_unit.as_u64().max(1);
                        let end = at.as_u64().saturating_add(r.as_u64());
                        edges(end);
                        p.push(end.saturating_sub(unit - 1) % w);
                    }
                }
                Seen::Unknown => edges(o.call.as_u64()),
            }
        }
        p.push(0);
        p.sort_unstable();
        p.dedup();
        p
    }

    /// The grids a fixed window or a sliding counter of `window` may start on: at `phase`,
    /// or at every phase of [`Grid::phases`] when it is unknown.
    pub fn starts(window: Nanos, phase: Option<Nanos>, ops: &[Op]) -> Vec<Grid> {
        let w = window.as_u64().max(1);
        let phases = match phase {
            Some(p) => vec![p.as_u64() % w],
            None => Grid::phases(window, ops),
        };
        phases
            .into_iter()
            .map(|phase| Grid { window, phase })
            .collect()
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

    fn counted_within(&self) -> Option<(Nanos, u64)> {
        Some((self.window, self.limit))
    }

    fn fresh(&self, ops: &[Op]) -> Vec<State> {
        Grid::starts(self.window, self.phase, ops)
            .into_iter()
            .map(|grid| State {
                grid,
                index: 0,
                count: 0,
            })
            .collect()
    }

    fn decide(&self, s: &State, at: Nanos, cost: u64) -> (Said, State) {
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
        let said = Said {
            allowed,
            remaining: self.limit.saturating_sub(next.count),
            retry_at: (!allowed && cost <= self.limit).then(|| s.grid.end(next.index)),
        };
        (said, next)
    }

    fn moments(&self, s: &State, from: Nanos, to: Nanos) -> Vec<(Nanos, Nanos)> {
        // Within one window the answer, the instant room comes back and the state after a
        // request are the same at every moment.
        s.grid.pieces(from, to)
    }

    fn moments_cover(&self, from: Nanos, to: Nanos) -> bool {
        Grid::cut_whole_at_any_phase(self.window, from, to)
    }

    /// Each window, however placed, lies within a closed interval of its length.
    fn sustains(&self) -> Sustains {
        Sustains::Window {
            limit: self.limit,
            span: self.window,
        }
    }

    /// Idle once the window holding a count is over.
    fn idle_from(&self, s: &State) -> Option<Nanos> {
        Some(if s.count == 0 {
            Nanos::ZERO
        } else {
            s.grid.end(s.index)
        })
    }
}

/// `ratelab-core`'s fixed window: its windows start where its clock reads a multiple of the
/// window.
impl super::Specified for ratelab_core::FixedWindow {
    type Family = FixedWindow;

    fn family(&self, origin: Option<Nanos>) -> FixedWindow {
        FixedWindow {
            limit: self.0.limit(),
            window: self.0.window(),
            phase: Grid::phase_of(origin, self.0.window()),
        }
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

    /// A request sent at `sent` ms and answered at `ret` ms, decided somewhere between.
    fn flight(id: u64, sent: u64, ret: u64, seen: Seen) -> Op {
        Op {
            id,
            call: ms(sent),
            ret: Some(ms(ret)),
            cost: 1,
            seen,
            stamp: None,
            precision: crate::linearizable::Precision {
                decided_within: ms(ret - sent),
                retry_after_unit: Nanos(1),
            },
        }
    }

    fn admitted(left: u64, sent: u64) -> Seen {
        Seen::Allowed {
            at: ms(sent),
            remaining: Some(left),
        }
    }

    #[test]
    fn a_boundary_inside_a_flight_is_tried_at_every_phase_it_allows() {
        // Windows from 500 ms: A decided at 550 within its flight 400–600, C at 1 450 in the
        // same window. No request's own send or answer time is the phase.
        let spec = FixedWindow {
            limit: 2,
            window: Nanos::from_secs(1),
            phase: None,
        };
        let ops = [
            flight(0, 400, 600, admitted(1, 400)),
            flight(1, 1_450, 1_460, admitted(0, 1_450)),
        ];
        assert_eq!(
            check_key(&spec, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
    }

    #[test]
    fn a_long_flight_is_tried_in_every_window_it_meets() {
        // One per 10 ms: X decided at 25 within 0–60, Y denied at 26–28, Z admitted at
        // 31–33 (phase 0: X and Y share 20–30, Z opens 30–40).
        let spec = FixedWindow {
            limit: 1,
            window: ms(10),
            phase: None,
        };
        let ops = [
            flight(0, 0, 60, admitted(0, 0)),
            flight(
                1,
                26,
                28,
                Seen::Denied {
                    at: ms(26),
                    retry_after: None,
                },
            ),
            flight(2, 31, 33, admitted(0, 31)),
        ];
        assert_eq!(
            check_key(&spec, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        // Two admitted within one window's flight overlap, with nothing between: over.
        let two = [
            flight(0, 20, 21, admitted(0, 20)),
            flight(1, 22, 23, admitted(0, 22)),
        ];
        assert!(matches!(
            check_key(
                &FixedWindow {
                    phase: Some(Nanos::ZERO),
                    ..spec
                },
                &two,
                DEFAULT_BUDGET
            ),
            Verdict::Violation(_)
        ));
    }

    #[test]
    fn an_idle_state_answers_as_a_fresh_key() {
        let named = crate::family::testing::assert_idle_answers_as_fresh(
            &FixedWindow {
                limit: 4,
                window: ms(1000),
                phase: Some(ms(250)),
            },
            300,
            ms(400),
            3,
        );
        assert!(named > 100, "{named} states tight");
    }
}
