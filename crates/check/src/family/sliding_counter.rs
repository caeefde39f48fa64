//! Sliding-window counter: the count in the last `window` estimated from two aligned
//! windows' counts, the previous one weighted by the part of it still inside the sliding
//! window, as Cloudflare, `limits` and Upstash compute it:
//! `estimate = previous · (W − e) / W + current`, with `e` the time elapsed in the current
//! window. A request is admitted when `estimate + cost ≤ limit`; `remaining` is
//! `limit − estimate` after it, rounded down; a denied request is admitted again at the
//! first instant the estimate, decaying with no new admission, leaves room for it.
//!
//! **Rounding.** The weighted previous count is a fraction; members of the family differ in
//! what they do with it, so the specification takes it as a parameter ([`Rounding`]):
//! rounded up (ratelab's own limiter: the conservative choice, never admitting more than
//! the exact estimate allows), rounded down, or kept exact (compared as a fraction).
//!
//! Windows are aligned to the clock at a phase, as the fixed window's ([`Grid`]); a request
//! whose clock reads earlier than its key's current window is taken at that window's start.
//!
//! **Opened by a key's first request** (`first_hit`, as HAProxy's stick-table rates count):
//! a key's first request opens a window there, the windows follow on from it, and a request
//! two windows or more after the current one's start opens a window again, with both counts
//! zero. Its first window has no previous count, so it admits at most L
//! ([`Family::first_window`]); the instant a window opens is the decision's own, known only
//! as well as the decision is, so a history the moments tried cannot explain is unknown.
//!
//! [`Family::first_window`]: super::spec::Family::first_window

use super::fixed_window::Grid;
use super::spec::{Family, Said, Sustains};
use crate::linearizable::Op;
use ratelab_core::Nanos;

/// What is done with the weighted previous count's fraction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rounding {
    /// Rounded up to a whole unit.
    Up,
    /// Rounded down.
    Down,
    /// Kept: the estimate is compared as a fraction.
    Exact,
}

/// A sliding-window counter's specification.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlidingCounter {
    /// Units per window.
    pub limit: u64,
    /// The window's length.
    pub window: Nanos,
    /// Where aligned windows start (modulo the window), if known.
    pub phase: Option<Nanos>,
    /// The weighted count's rounding.
    pub rounding: Rounding,
    /// Windows opened by each key's first request rather than aligned to the clock (the
    /// phase is then not used).
    pub first_hit: bool,
}

/// A key's counters: the grid, the current window, its count and the previous window's.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct State {
    grid: Grid,
    index: u64,
    current: u64,
    previous: u64,
}

impl SlidingCounter {
    fn w(&self) -> u128 {
        u128::from(self.window.as_u64().max(1))
    }

    /// The state rolled to the window holding `at`.
    fn rolled(&self, s: &State, at: Nanos) -> State {
        let k = s.grid.index(at);
        // Index 0 is a key no request opened (a window opened at `at` holds `at`).
        if self.first_hit && (s.index == 0 || k >= s.index + 2) {
            let grid = Grid {
                window: self.window,
                phase: at.as_u64() % self.w() as u64,
            };
            return State {
                index: grid.index(at),
                grid,
                current: 0,
                previous: 0,
            };
        }
        match k {
            k if k <= s.index => s.clone(),
            k if k == s.index + 1 => State {
                index: k,
                current: 0,
                previous: s.current,
                ..s.clone()
            },
            k => State {
                index: k,
                current: 0,
                previous: 0,
                ..s.clone()
            },
        }
    }

    /// `estimate · W` for the rolled state `s` at `at` (a time in or before its window).
    fn estimate_w(&self, s: &State, at: Nanos) -> u128 {
        let w = self.w();
        let start = u128::from(s.grid.end(s.index).as_u64()).saturating_sub(w);
        let e = u128::from(at.as_u64()).saturating_sub(start).min(w);
        let weighted = u128::from(s.previous) * (w - e);
        let weighted = match self.rounding {
            Rounding::Up => weighted.div_ceil(w) * w,
            Rounding::Down => weighted / w * w,
            Rounding::Exact => weighted,
        };
        weighted + u128::from(s.current) * w
    }

    fn admits(&self, s: &State, at: Nanos, cost: u64) -> bool {
        let s = self.rolled(s, at);
        self.estimate_w(&s, at) + u128::from(cost) * self.w() <= u128::from(self.limit) * self.w()
    }

    /// The first instant from `at` at which `s` (no new admission) admits `cost`: the
    /// estimate only falls as time passes, and is zero two windows on.
    fn first_admitted(&self, s: &State, at: Nanos, cost: u64) -> Option<Nanos> {
        if cost > self.limit {
            return None;
        }
        let (mut lo, mut hi) = (
            at.as_u64(),
            s.grid.end(s.index.max(s.grid.index(at)) + 1).as_u64(),
        );
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.admits(s, Nanos(mid), cost) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(Nanos(lo))
    }
}

impl Family for SlidingCounter {
    type State = State;

    fn name(&self) -> &'static str {
        "sliding-window counter"
    }

    fn fresh(&self, ops: &[Op]) -> Vec<State> {
        if self.first_hit {
            // No window yet: the first request opens one.
            return vec![State {
                grid: Grid {
                    window: self.window,
                    phase: 0,
                },
                index: 0,
                current: 0,
                previous: 0,
            }];
        }
        Grid::starts(self.window, self.phase, ops)
            .into_iter()
            .map(|grid| State {
                grid,
                index: 0,
                current: 0,
                previous: 0,
            })
            .collect()
    }

    fn fresh_covers(&self) -> bool {
        // The weights move with the exact phase, which the phases tried only place.
        self.phase.is_some() || self.first_hit
    }

    fn first_window(&self) -> Option<(Nanos, u64)> {
        self.first_hit.then_some((self.window, self.limit))
    }

    fn decide(&self, s: &State, at: Nanos, cost: u64) -> (Said, State) {
        let mut next = self.rolled(s, at);
        let allowed = self.admits(&next, at, cost);
        if allowed {
            next.current += cost;
        }
        let used = self.estimate_w(&next, at);
        let limit = u128::from(self.limit) * self.w();
        let remaining = (limit.saturating_sub(used) / self.w()) as u64;
        let retry_at = if allowed {
            None
        } else {
            self.first_admitted(&next, at, cost)
        };
        (
            Said {
                allowed,
                remaining,
                retry_at,
            },
            next,
        )
    }

    fn moments(&self, s: &State, from: Nanos, to: Nanos) -> Vec<(Nanos, Nanos)> {
        // Within one window the estimate only falls: not admitted at the window's earliest
        // moment if ever, admitted at its latest if ever, a `remaining` between theirs at a
        // moment between; the state after is one of two, and the instant room comes back
        // one.
        s.grid.pieces(from, to)
    }

    fn moments_cover(&self, from: Nanos, to: Nanos) -> bool {
        // A window opened at an unknown moment has its phase there: not covered.
        (!self.first_hit || from == to) && Grid::cut_whole_at_any_phase(self.window, from, to)
    }

    /// Its estimate weighs in the previous window, so two windows' traffic counts.
    fn sustains(&self) -> Sustains {
        Sustains::Window {
            limit: self.limit,
            span: Nanos(self.window.as_u64().saturating_mul(2)),
        }
    }

    /// Idle once neither count weighs: the window after the current one's count has
    /// become the previous, or the current window once the previous count is all it holds.
    /// Windows a first request opens: idle once the next request opens one again (two
    /// windows after the current one began), every later request then answered as a fresh
    /// key's would be; before that its windows keep the old start, which a fresh key's
    /// would not.
    fn idle_from(&self, s: &State) -> Option<Nanos> {
        Some(match (s.current, s.previous) {
            _ if self.first_hit && s.index > 0 => s.grid.end(s.index + 1),
            (0, 0) => Nanos::ZERO,
            (0, _) => s.grid.end(s.index),
            _ => s.grid.end(s.index + 1),
        })
    }
}

/// `ratelab-core`'s sliding window: windows aligned to its clock, its weighted estimate
/// rounded up.
impl super::Specified for ratelab_core::SlidingWindow {
    type Family = SlidingCounter;

    fn family(&self, origin: Option<Nanos>) -> SlidingCounter {
        SlidingCounter {
            limit: self.0.limit(),
            window: self.0.window(),
            phase: Grid::phase_of(origin, self.0.window()),
            rounding: Rounding::Up,
            first_hit: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::check_key;
    use crate::family::testing::{allowed, answered_by, denied, ms, unstamped, violation_at};
    use crate::linearizable::{DEFAULT_BUDGET, Verdict};

    const SPEC: SlidingCounter = SlidingCounter {
        limit: 4,
        window: Nanos(1_000_000_000),
        phase: Some(Nanos(0)),
        rounding: Rounding::Up,
        first_hit: false,
    };

    #[test]
    fn the_core_sliding_window_is_explained_replayed_and_searched() {
        let core = ratelab_core::SlidingWindow::new(6, Nanos::from_secs(1)).unwrap();
        let ops = answered_by(&core, 400, ms(90), 3);
        let spec = SlidingCounter { limit: 6, ..SPEC };
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

    /// Four in the first window; at 1.5 s the previous window weighs 4 · 0.5 = 2.
    fn first_window() -> Vec<crate::linearizable::Op> {
        (0..4)
            .map(|i| allowed(i, ms(100 + 100 * i), 3 - i))
            .collect()
    }

    #[test]
    fn a_counter_that_forgets_the_previous_window_is_caught() {
        let mut ops = first_window();
        ops.push(allowed(4, ms(1_500), 1));
        ops.push(allowed(5, ms(1_500), 0));
        ops.push(allowed(6, ms(1_500), 0));
        assert!(violation_at(&check_key(&SPEC, &ops, DEFAULT_BUDGET), 6));
        assert!(violation_at(
            &check_key(&SPEC, &unstamped(&ops), DEFAULT_BUDGET),
            6
        ));
    }

    #[test]
    fn the_weighted_estimate_denies_and_says_when() {
        let mut ops = first_window();
        ops.push(allowed(4, ms(1_500), 1));
        ops.push(allowed(5, ms(1_500), 0));
        // ⌈4 · (1 000 − e) / 1 000⌉ + 2 + 1 ≤ 4 from e = 750 ms on.
        ops.push(denied(6, ms(1_500), Some(ms(250))));
        assert_eq!(
            check_key(&SPEC, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        let mut phantom = first_window();
        phantom.push(denied(4, ms(1_500), Some(ms(1))));
        match check_key(&SPEC, &phantom, DEFAULT_BUDGET) {
            Verdict::Violation(v) => assert!(v.id == 4 && v.phantom_denial, "{v:?}"),
            v => panic!("{v:?}"),
        }
    }

    #[test]
    fn the_rounding_is_the_specification_s_parameter() {
        // At 1.7 s the previous window weighs 4 · 0.3 = 1.2: rounded up 2, down 1.
        let mut ops = first_window();
        ops.push(allowed(4, ms(1_700), 1));
        ops.push(allowed(5, ms(1_700), 0));
        assert_eq!(
            check_key(&SPEC, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        let down = SlidingCounter {
            rounding: Rounding::Down,
            ..SPEC
        };
        assert!(violation_at(&check_key(&down, &ops, DEFAULT_BUDGET), 4));
        let mut three = first_window();
        three.extend([
            allowed(4, ms(1_700), 2),
            allowed(5, ms(1_700), 1),
            allowed(6, ms(1_700), 0),
        ]);
        assert_eq!(
            check_key(&down, &three, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        assert!(violation_at(&check_key(&SPEC, &three, DEFAULT_BUDGET), 4));
    }

    /// Four from 300 ms, in the window their first request opened: [300 ms, 1.3 s).
    fn opened_at_300() -> Vec<crate::linearizable::Op> {
        (0..4)
            .map(|i| allowed(i, ms(300 + 100 * i), 3 - i))
            .collect()
    }

    const OPENED: SlidingCounter = SlidingCounter {
        rounding: Rounding::Down,
        first_hit: true,
        phase: None,
        ..SPEC
    };

    #[test]
    fn windows_opened_by_the_first_request_weigh_from_there() {
        // At 1.5 s the window opened at 1.3 s is 200 ms old: the previous four weigh
        // ⌊4 · 0.8⌋ = 3, so one more fits, and no second.
        let mut ops = opened_at_300();
        ops.push(allowed(4, ms(1_500), 0));
        for o in [ops.clone(), unstamped(&ops)] {
            assert_eq!(
                check_key(&OPENED, &o, DEFAULT_BUDGET),
                Verdict::Linearizable
            );
        }
        ops.push(allowed(5, ms(1_500), 0));
        assert!(violation_at(&check_key(&OPENED, &ops, DEFAULT_BUDGET), 5));
        // Aligned to the clock at 0 instead, 1.5 s is half way: ⌊4 · 0.5⌋ = 2 leaves two.
        let aligned = SlidingCounter {
            first_hit: false,
            phase: Some(Nanos::ZERO),
            ..OPENED
        };
        let mut two = opened_at_300();
        two.extend([allowed(4, ms(1_500), 1), allowed(5, ms(1_500), 0)]);
        assert_eq!(
            check_key(&aligned, &two, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        assert!(matches!(
            check_key(&OPENED, &two, DEFAULT_BUDGET),
            Verdict::Violation(_)
        ));
    }

    #[test]
    fn two_quiet_windows_and_the_next_request_opens_a_window_again() {
        let mut ops = opened_at_300();
        // 3 s: two windows after the one opened at 0.3 s began; a fresh window, full room.
        ops.extend((0..4).map(|i| allowed(4 + i, ms(3_000), 3 - i)));
        assert_eq!(
            check_key(&OPENED, &ops, DEFAULT_BUDGET),
            Verdict::Linearizable
        );
        ops.push(denied(8, ms(3_100), Some(ms(1_000))));
        assert!(matches!(
            check_key(&OPENED, &ops, DEFAULT_BUDGET),
            Verdict::Violation(v) if v.id == 8
        ));
    }

    #[test]
    fn a_first_window_admitting_more_than_its_limit_is_refuted_by_counting() {
        // Five admissions sent within 100 ms of the key's first, each decided within 50 ms
        // of its send: a phase the search could only guess, but counting needs none.
        let blurred: Vec<_> = (0..5)
            .map(|i| {
                let mut o = allowed(i, ms(300 + 20 * i), 0);
                o.stamp = None;
                o.ret = Some(ms(350 + 20 * i));
                o.precision.decided_within = ms(50);
                o.seen = crate::linearizable::Seen::Allowed {
                    at: ms(300 + 20 * i),
                    remaining: None,
                };
                o
            })
            .collect();
        assert!(matches!(
            check_key(&OPENED, &blurred, DEFAULT_BUDGET),
            Verdict::Violation(v) if v.detail.contains("first window admits 4")
        ));
        assert_eq!(
            check_key(&OPENED, &blurred[..4], DEFAULT_BUDGET),
            Verdict::Linearizable
        );
    }

    #[test]
    fn an_idle_state_answers_as_a_fresh_key() {
        let opened = crate::family::testing::assert_idle_answers_as_fresh(
            &SlidingCounter {
                window: ms(1000),
                rounding: Rounding::Up,
                ..OPENED
            },
            300,
            ms(400),
            3,
        );
        assert!(opened > 50, "{opened} states tight");
        let named = crate::family::testing::assert_idle_answers_as_fresh(
            &SlidingCounter {
                limit: 4,
                window: ms(1000),
                phase: Some(ms(250)),
                rounding: Rounding::Up,
                first_hit: false,
            },
            300,
            ms(400),
            3,
        );
        assert!(named > 100, "{named} states tight");
    }
}
